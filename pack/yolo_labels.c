/*
 * YOLO label files: text parsing and the cleaning rules of ultralytics/yolov5 v7.0
 * verify_image_label (utils/dataloaders.py), which decide what a model trained by ultralytics
 * actually sees. The rules, and where we are stricter, are listed in dataset.h. Facts that the
 * code below depends on:
 *   - Python reads the file as text, strips it, splits it into lines (\n, \r, \r\n, \v, \f,
 *     \x1c-\x1e), drops lines of length 0 (a line of spaces is kept, and has no token), and splits
 *     each line on whitespace (which also includes \x1f);
 *   - "segment file" = any row with more than 6 tokens; then every row is class + xy pairs and the
 *     box is the points' min/max turned into centre/size in float32 (segments2boxes, xyxy2xywh);
 *   - otherwise np.array(rows, float32) needs equal row lengths, then exactly 5 columns;
 *   - any failure rejects the whole file (and its image); duplicates are removed with np.unique,
 *     which returns the unique rows SORTED, each at its first occurrence, and only then
 *     (if any duplicate existed) is the sorted order used.
 */
#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dataset_internal.h"
#include "det.h"
#include "ffr.h"

/* ---------------------------------------------------------------------------------------------
 * Numbers
 * ------------------------------------------------------------------------------------------- */

static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

/* Exact powers of ten: a double holds 10^0..10^22 exactly, which makes the fast path below
 * correctly rounded (one IEEE operation on two exact operands). */
static const double pow10_exact[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int pack_ds_parse_number(const char *s, size_t len, double *out)
{
    size_t i = 0;
    bool neg = false;
    if (i < len && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }
    const size_t rest = len - i;
    if ((rest == 3 && strncasecmp(s + i, "inf", 3) == 0) ||
        (rest == 8 && strncasecmp(s + i, "infinity", 8) == 0)) {
        *out = neg ? -INFINITY : INFINITY;
        return 0;
    }
    if (rest == 3 && strncasecmp(s + i, "nan", 3) == 0) {
        *out = NAN;
        return 0;
    }

    uint64_t mant = 0;
    int exp10 = 0, ndigits = 0;
    bool inexact = false;
    for (; i < len && is_digit(s[i]); i++, ndigits++) {
        const unsigned d = (unsigned)(s[i] - '0');
        if (mant <= (UINT64_MAX - 9) / 10)
            mant = mant * 10 + d;
        else {
            exp10++;
            inexact = true;
        }
    }
    if (i < len && s[i] == '.') {
        i++;
        for (; i < len && is_digit(s[i]); i++, ndigits++) {
            const unsigned d = (unsigned)(s[i] - '0');
            if (mant <= (UINT64_MAX - 9) / 10) {
                mant = mant * 10 + d;
                exp10--;
            } else if (d != 0) {
                inexact = true;
            }
        }
    }
    if (ndigits == 0) return -1;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        bool eneg = false;
        if (i < len && (s[i] == '+' || s[i] == '-')) {
            eneg = s[i] == '-';
            i++;
        }
        if (i >= len || !is_digit(s[i])) return -1;
        long e = 0;
        for (; i < len && is_digit(s[i]); i++)
            if (e < 100000) e = e * 10 + (s[i] - '0');
        exp10 += (int)(eneg ? -e : e);
    }
    if (i != len) return -1;

    double v;
    if (mant == 0) {
        v = 0.0;
    } else if (!inexact && mant <= (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        v = (double)mant;
        v = exp10 < 0 ? v / pow10_exact[-exp10] : v * pow10_exact[exp10];
    } else {
        /* Rare: long mantissas or big exponents. The grammar was checked above and is a subset
         * of strtod's, so strtod_l consumes all of it. */
        char small[128];
        char *buf = len < sizeof small ? small : malloc(len + 1);
        if (!buf) return -1;
        memcpy(buf, s, len);
        buf[len] = '\0';
        pthread_once(&c_locale_once, c_locale_init);
        v = c_locale ? strtod_l(buf, NULL, c_locale) : strtod(buf, NULL);
        if (buf != small) free(buf);
        *out = v; /* the sign is in buf */
        return 0;
    }
    *out = neg ? -v : v;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Row storage
 * ------------------------------------------------------------------------------------------- */

/* One text row: [b, e) in the buffer, its token count and physical line. */
struct lbl_span {
    size_t b, e;
    uint32_t ntok;
    uint32_t line;
};

void pack_lbl_free(struct pack_lbl *L)
{
    free(L->rows);
    free(L->pts);
    free(L->dups);
    free(L->drops);
    free(L->order);
    free(L->spans);
    memset(L, 0, sizeof *L);
}

void pack_lbl_reset(struct pack_lbl *L)
{
    L->n_rows = 0;
    L->n_pts = 0;
    L->n_dups = 0;
    L->n_drops = 0;
    L->n_in = 0;
    L->status = PACK_LBL_EMPTY;
    L->bad_line = 0;
    L->reason[0] = '\0';
}

int pack_lbl_push(struct pack_lbl *L, const float v[5], const float *xy, size_t n_pts,
                  uint32_t line, int64_t ann_id)
{
    if (n_pts > UINT32_MAX || L->n_pts + n_pts > UINT32_MAX) return -ENOMEM;
    int rc = pack_ds_grow((void **)&L->rows, &L->cap_rows, L->n_rows + 1, sizeof *L->rows);
    if (rc) return rc;
    rc = pack_ds_grow((void **)&L->pts, &L->cap_pts, 2 * (L->n_pts + n_pts), sizeof *L->pts);
    if (rc) return rc;
    struct pack_lbl_row *r = &L->rows[L->n_rows++];
    memcpy(r->v, v, sizeof r->v);
    r->seg_off = (uint32_t)L->n_pts;
    r->seg_n = xy ? (uint32_t)n_pts : 0;
    r->line = line;
    r->ann_id = ann_id;
    if (xy && n_pts) {
        memcpy(L->pts + 2 * L->n_pts, xy, 2 * n_pts * sizeof *xy);
        L->n_pts += n_pts;
    }
    return 0;
}

__attribute__((format(printf, 3, 4))) static void corrupt(struct pack_lbl *L, uint32_t line,
                                                          const char *fmt, ...)
{
    if (L->status == PACK_LBL_CORRUPT) return; /* keep the first reason */
    L->status = PACK_LBL_CORRUPT;
    L->bad_line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->reason, sizeof L->reason, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------------------------------------
 * Text
 * ------------------------------------------------------------------------------------------- */

/* Python str.split() whitespace, ASCII part. */
static bool py_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* Python str.splitlines() boundaries, ASCII part. */
static bool py_break(unsigned char c)
{
    return c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e);
}

/* Next token in [*p, e): returns its start and length, or NULL at the end. */
static const char *next_token(const char **p, const char *e, size_t *n)
{
    const char *s = *p;
    while (s < e && py_space((unsigned char)*s))
        s++;
    if (s >= e) {
        *p = e;
        return NULL;
    }
    const char *t = s;
    while (t < e && !py_space((unsigned char)*t))
        t++;
    *n = (size_t)(t - s);
    *p = t;
    return s;
}

/* Quotes a token for a message, shortened. */
static const char *show_tok(char *dst, size_t cap, const char *t, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 5 < cap; i++) {
        const unsigned char c = (unsigned char)t[i];
        if (c >= 0x20 && c < 0x7f)
            dst[k++] = (char)c;
        else
            k += (size_t)snprintf(dst + k, cap - k, "\\x%02x", c);
    }
    if (k < n && k + 4 <= cap) {
        memcpy(dst + k, "...", 3);
        k += 3;
    }
    dst[k < cap ? k : cap - 1] = '\0';
    return dst;
}

/* Parses a token to float32 the way numpy does for str input: Python float, then float32. */
static int tok_to_f32(struct pack_lbl *L, uint32_t line, const char *t, size_t n, float *out)
{
    double d;
    char q[48];
    if (pack_ds_parse_number(t, n, &d) != 0) {
        corrupt(L, line, "could not convert string to float: '%s'", show_tok(q, sizeof q, t, n));
        return -1;
    }
    if (!isfinite(d)) {
        corrupt(L, line, "non-finite label value '%s'", show_tok(q, sizeof q, t, n));
        return -1;
    }
    if (fabs(d) > FLT_MAX) { /* numpy would give inf, which the range checks then reject */
        corrupt(L, line, "label value '%s' out of float32 range", show_tok(q, sizeof q, t, n));
        return -1;
    }
    *out = (float)d;
    return 0;
}

int pack_lbl_parse(struct pack_lbl *L, const char *buf, size_t len, int64_t nc)
{
    pack_lbl_reset(L);
    /* strip() */
    size_t b = 0, e = len;
    while (b < e && py_space((unsigned char)buf[b]))
        b++;
    while (e > b && py_space((unsigned char)buf[e - 1]))
        e--;
    if (b == e) return 0; /* EMPTY */

    /* Physical line of position b: count \n and lone \r before it. */
    uint32_t line = 1;
    for (size_t i = 0; i < b; i++)
        if (buf[i] == '\n' || (buf[i] == '\r' && (i + 1 >= len || buf[i + 1] != '\n'))) line++;

    /* Pass 1: rows and their token counts. */
    size_t n_spans = 0;
    bool seg_file = false;
    uint32_t first_non_ascii = 0;
    for (size_t i = b; i <= e;) {
        size_t j = i;
        while (j < e && !py_break((unsigned char)buf[j])) {
            if ((unsigned char)buf[j] >= 0x80 && !first_non_ascii) first_non_ascii = line;
            j++;
        }
        if (j > i) { /* `if len(x)`: empty lines are dropped, lines of spaces are not */
            int rc = pack_ds_grow(&L->spans, &L->cap_spans, n_spans + 1, sizeof(struct lbl_span));
            if (rc) return rc;
            struct lbl_span *sp = (struct lbl_span *)L->spans + n_spans++;
            sp->b = i;
            sp->e = j;
            sp->line = line;
            sp->ntok = 0;
            const char *p = buf + i;
            size_t tn = 0;
            while (next_token(&p, buf + j, &tn))
                sp->ntok++;
            if (sp->ntok > 6) seg_file = true;
        }
        if (j >= e) break;
        /* one boundary; \r\n is one */
        if (buf[j] == '\r' && j + 1 < e && buf[j + 1] == '\n') j++;
        if (buf[j] == '\n' || buf[j] == '\r') line++;
        i = j + 1;
    }
    L->n_in = n_spans;
    if (first_non_ascii) {
        corrupt(L, first_non_ascii, "non-ASCII byte in label file");
        return 0;
    }

    const struct lbl_span *spans = L->spans;
    if (!seg_file) {
        for (size_t r = 0; r < n_spans; r++) {
            if (spans[r].ntok != spans[0].ntok) {
                corrupt(L, spans[r].line, "inhomogeneous rows: %u values here, %u on line %u",
                        spans[r].ntok, spans[0].ntok, spans[0].line);
                return 0;
            }
        }
        for (size_t r = 0; r < n_spans; r++) {
            const char *p = buf + spans[r].b;
            float v[5] = { 0 };
            size_t tn = 0, k = 0;
            for (const char *t; (t = next_token(&p, buf + spans[r].e, &tn)); k++) {
                float f;
                if (tok_to_f32(L, spans[r].line, t, tn, &f)) return 0;
                if (k < 5) v[k] = f;
            }
            if (k != 5) {
                corrupt(L, spans[r].line, "labels require 5 columns, %zu columns detected", k);
                return 0;
            }
            int rc = pack_lbl_push(L, v, NULL, 0, spans[r].line, -1);
            if (rc) return rc;
        }
    } else {
        for (size_t r = 0; r < n_spans; r++) {
            const struct lbl_span *sp = &spans[r];
            if (sp->ntok == 0) {
                corrupt(L, sp->line, "segment file row without class");
                return 0;
            }
            const size_t ncoord = sp->ntok - 1;
            if (ncoord % 2) {
                corrupt(L, sp->line, "cannot reshape %zu polygon values into x,y pairs", ncoord);
                return 0;
            }
            if (ncoord == 0) {
                corrupt(L, sp->line, "segment row without points");
                return 0;
            }
            const size_t npt = ncoord / 2;
            /* points are parsed straight into L->pts, then the row is pushed over them */
            if (L->n_pts + npt > UINT32_MAX) return -ENOMEM;
            int rc =
                pack_ds_grow((void **)&L->pts, &L->cap_pts, 2 * (L->n_pts + npt), sizeof *L->pts);
            if (rc) return rc;
            float *xy = L->pts + 2 * L->n_pts;
            const char *p = buf + sp->b;
            size_t tn = 0; /* set by next_token; initialised for -O3's flow analysis */
            const char *t = next_token(&p, buf + sp->e, &tn);
            float cls;
            if (tok_to_f32(L, sp->line, t, tn, &cls)) return 0;
            for (size_t k = 0; k < ncoord; k++) {
                t = next_token(&p, buf + sp->e, &tn);
                if (tok_to_f32(L, sp->line, t, tn, &xy[k])) return 0;
            }
            /* xyxy2xywh in float32, as numpy computes it on a float32 array */
            float v[5] = { cls };
            pack_ds_poly_box(xy, npt, v + 1);
            rc = pack_ds_grow((void **)&L->rows, &L->cap_rows, L->n_rows + 1, sizeof *L->rows);
            if (rc) return rc;
            struct pack_lbl_row *row = &L->rows[L->n_rows++];
            memcpy(row->v, v, sizeof v);
            row->seg_off = (uint32_t)L->n_pts;
            row->seg_n = (uint32_t)npt;
            row->line = sp->line;
            row->ann_id = -1;
            L->n_pts += npt;
        }
    }
    return pack_lbl_clean(L, nc);
}

/* ---------------------------------------------------------------------------------------------
 * Cleaning
 * ------------------------------------------------------------------------------------------- */

static int row_cmp(const struct pack_lbl_row *a, const struct pack_lbl_row *b)
{
    for (int k = 0; k < 5; k++) {
        if (a->v[k] < b->v[k]) return -1;
        if (a->v[k] > b->v[k]) return 1;
    }
    return 0;
}

static int order_cmp(const void *pa, const void *pb, void *ctx)
{
    const struct pack_lbl_row *rows = ctx;
    const size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const int c = row_cmp(&rows[a], &rows[b]);
    if (c) return c;
    return a < b ? -1 : a > b; /* stable: the first occurrence comes first, as mergesort */
}

int pack_lbl_clean(struct pack_lbl *L, int64_t nc)
{
    L->n_dups = 0;
    L->n_drops = 0;
    if (L->status == PACK_LBL_CORRUPT) return 0;
    L->n_in = L->n_rows > L->n_in ? L->n_rows : L->n_in;
    if (L->n_rows == 0) {
        L->status = PACK_LBL_EMPTY;
        return 0;
    }
    size_t n = L->n_rows;
    /* assert (lb >= 0).all(); NaN fails it too */
    size_t bad = 0;
    uint32_t bad_line = 0;
    for (size_t r = 0; r < n; r++) {
        bool ok = true;
        for (int k = 0; k < 5; k++)
            ok &= L->rows[r].v[k] >= 0.0f;
        if (!ok && !bad++) bad_line = L->rows[r].line;
    }
    if (bad) {
        corrupt(L, bad_line, "negative label values (%zu row%s)", bad, bad > 1 ? "s" : "");
        return 0;
    }
    /* assert (lb[:, 1:] <= 1).all() */
    for (size_t r = 0; r < n; r++) {
        bool ok = true;
        for (int k = 1; k < 5; k++)
            ok &= L->rows[r].v[k] <= 1.0f;
        if (!ok && !bad++) bad_line = L->rows[r].line;
    }
    if (bad) {
        corrupt(L, bad_line, "non-normalized or out of bounds coordinates (%zu row%s)", bad,
                bad > 1 ? "s" : "");
        return 0;
    }
    /* Ours: classes must be usable indices (ultralytics would truncate, or stop training). */
    for (size_t r = 0; r < n; r++) {
        const float c = L->rows[r].v[0];
        if (c != floorf(c) || c >= 16777216.0f) {
            corrupt(L, L->rows[r].line, "class %g is not an integer", (double)c);
            return 0;
        }
        if (nc >= 0 && (int64_t)c >= nc) {
            corrupt(L, L->rows[r].line, "class %d exceeds the class count %lld", (int)c,
                    (long long)nc);
            return 0;
        }
    }
    /* A class the record cannot hold drops its row alone (named by the caller's warning), not
     * the image and not the whole pack; --strict makes the warning an error. */
    size_t kept = 0;
    for (size_t r = 0; r < L->n_rows; r++) {
        if (L->rows[r].v[0] <= (float)DET_CLASS_MAX) {
            L->rows[kept++] = L->rows[r];
            continue;
        }
        int rc = pack_ds_grow((void **)&L->drops, &L->cap_drops, L->n_drops + 1, sizeof *L->drops);
        if (rc) return rc;
        L->drops[L->n_drops++] = (struct pack_lbl_drop){ .line = L->rows[r].line,
                                                         .ann_id = L->rows[r].ann_id,
                                                         .cls = L->rows[r].v[0] };
    }
    L->n_rows = n = kept;
    if (kept == 0) {
        L->status = PACK_LBL_EMPTY;
        return 0;
    }

    /* np.unique(lb, axis=0, return_index=True) */
    int rc = pack_ds_grow((void **)&L->order, &L->cap_order, n, sizeof *L->order);
    if (rc) return rc;
    for (size_t r = 0; r < n; r++)
        L->order[r] = r;
    qsort_r(L->order, n, sizeof *L->order, order_cmp, L->rows);
    size_t n_unique = 1;
    for (size_t i = 1; i < n; i++) {
        const struct pack_lbl_row *prev = &L->rows[L->order[n_unique - 1]];
        const struct pack_lbl_row *cur = &L->rows[L->order[i]];
        if (row_cmp(prev, cur) == 0) {
            rc = pack_ds_grow((void **)&L->dups, &L->cap_dups, L->n_dups + 1, sizeof *L->dups);
            if (rc) return rc;
            L->dups[L->n_dups++] = (struct pack_lbl_dup){ .line = cur->line,
                                                          .kept_line = prev->line,
                                                          .ann_id = cur->ann_id,
                                                          .kept_ann_id = prev->ann_id };
        } else {
            L->order[n_unique++] = L->order[i];
        }
    }
    if (n_unique < n) {
        /* lb = lb[i]: the kept rows in sorted order. Permute through a temporary copy. */
        struct pack_lbl_row *tmp = malloc(n_unique * sizeof *tmp);
        if (!tmp) return -ENOMEM;
        for (size_t i = 0; i < n_unique; i++)
            tmp[i] = L->rows[L->order[i]];
        memcpy(L->rows, tmp, n_unique * sizeof *tmp);
        free(tmp);
        L->n_rows = n_unique;
    }
    L->status = PACK_LBL_OK;
    return 0;
}
