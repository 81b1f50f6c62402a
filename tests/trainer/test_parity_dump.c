/*
 * The committed PyTorch parity dump (make_parity_ref.py) and its reader: format checks and
 * refusals of damaged files, then the dump's internal consistency against facts the C side
 * knows independently: trn_model's parameter names, shapes, count and initial weights (the
 * generator, bit for bit), the activation plan's layer shapes, the input generator, the loss
 * formulas (objectness and class BCE recomputed from the stored Detect outputs and
 * build_targets entries, the duplicate-cell rule, gains, x batch size), the grad norm, the first
 * SGD step element by element and the EMA recursion.
 *
 * argv[1]: the dump file.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "model.h"
#include "parity_dump.h"
#include "tap.h"

#define SEED    0    /* weights: trn_model_init(SEED) */
#define INPUT_K 1000 /* input: trn_model_init_uniform(0, INPUT_K, j) */
#define IMG     128
#define BS      2

static const struct pdump_tensor *need(const struct pdump *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static const struct pdump_tensor *need(const struct pdump *d, const char *fmt, ...)
{
    char name[PDUMP_NAME_LEN + 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const struct pdump_tensor *t = pdump_find(d, name);
    if (!t) {
        printf("Bail out! %s not in the dump\n", name);
        exit(99);
    }
    return t;
}

static double scalar(const struct pdump *d, const char *name)
{
    return need(d, "%s", name)->data[0];
}

static int close_to(double got, double want, double rtol)
{
    return fabs(got - want) <= rtol * fabs(want) + 1e-12;
}

/* ---------------------------------------------------------------------------------------- */
/* damaged files                                                                            */

static int write_variant(const char *path, const unsigned char *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -errno;
    const int rc = fwrite(buf, 1, len, f) == len ? 0 : -EIO;
    return fclose(f) || rc ? -EIO : 0;
}

static int open_variant(const char *path, const unsigned char *buf, size_t len)
{
    if (write_variant(path, buf, len)) {
        printf("Bail out! cannot write %s\n", path);
        exit(99);
    }
    struct pdump *d = NULL;
    const int rc = pdump_open(path, &d);
    pdump_close(d);
    return rc;
}

/* The compressed form: a frame cut short, a flipped byte, and frames whose header claims more
 * than the bound or no size at all are refused before anything that size is allocated. */
static void test_damaged_zstd(const char *tpath, const unsigned char *raw, size_t len)
{
    const size_t cap = ZSTD_compressBound(len);
    unsigned char *z = malloc(cap), *tmp = malloc(cap + 64);
    /* with the checksum, as zstd's CLI writes the committed dumps */
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    const size_t zlen = z && tmp && cc ? ZSTD_compress2(cc, z, cap, raw, len) : 0;
    ZSTD_freeCCtx(cc);
    if (!z || !tmp || !zlen || ZSTD_isError(zlen)) {
        printf("Bail out! ZSTD_compress\n");
        exit(99);
    }
    unsigned char *back = NULL;
    size_t blen = 0;
    write_variant(tpath, z, zlen);
    ok(pdump_read_file(tpath, &back, &blen) == 0 && blen == len && !memcmp(back, raw, len),
       "a zstd frame reads back as the raw dump");
    free(back);
    is_int(open_variant(tpath, z, zlen), 0, "the compressed copy opens");
    is_int(open_variant(tpath, z, zlen / 2), -PDUMP_ETRUNC, "a frame cut in half: truncated");
    memcpy(tmp, z, zlen);
    tmp[zlen / 2] ^= 0x40;
    const int flipped = open_variant(tpath, tmp, zlen);
    ok(flipped == -PDUMP_ECORRUPT || flipped == -PDUMP_ETRUNC,
       "a flipped byte inside the frame: refused (%d, %s)", flipped, pdump_strerror(flipped));
    /* a frame declaring 1 TiB of content: refused by its header */
    cc = ZSTD_createCCtx();
    ZSTD_CCtx_setPledgedSrcSize(cc, 1ull << 40);
    ZSTD_outBuffer ob = { tmp, cap + 64, 0 };
    ZSTD_inBuffer ib = { raw, 64, 0 };
    ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_flush); /* the header and a first block only */
    ZSTD_freeCCtx(cc);
    is_int(open_variant(tpath, tmp, ob.pos), -EFBIG, "a frame claiming 1 TiB: -EFBIG");
    /* no content size in the header (a streamed frame): refused rather than grown blindly */
    cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
    ob = (ZSTD_outBuffer){ tmp, cap + 64, 0 };
    ib = (ZSTD_inBuffer){ raw, len, 0 };
    while (ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_end) != 0) {
    }
    ZSTD_freeCCtx(cc);
    is_int(open_variant(tpath, tmp, ob.pos), -EFBIG, "a frame of unknown size: -EFBIG");
    free(z);
    free(tmp);
}

static void test_damaged(const char *path)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    if (pdump_read_file(path, &buf, &len)) {
        printf("Bail out! cannot read %s\n", path);
        exit(99);
    }
    unsigned char *tmp = malloc(len);
    if (!tmp) exit(99);
    char tpath[256];
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tpath, sizeof tpath, "%s/test_parity_dump.%d.bin", dir, (int)getpid());

    struct pdump *d = NULL;
    is_int(pdump_open("/nonexistent/parity.bin", &d), -ENOENT, "missing file: -ENOENT");
    is_int(open_variant(tpath, buf, len), 0, "an unchanged copy opens");
    memcpy(tmp, buf, len);
    tmp[0] = 'X';
    is_int(open_variant(tpath, tmp, len), -PDUMP_EBADMAGIC, "bad magic refused");
    is_int(open_variant(tpath, buf, 5), -PDUMP_ETRUNC, "5-byte prefix: truncated");
    memcpy(tmp, buf, len);
    tmp[12] = 2;
    is_int(open_variant(tpath, tmp, len), -PDUMP_EVERSION, "version 2 refused");
    is_int(open_variant(tpath, buf, len - 1), -PDUMP_ETRUNC, "one byte short: truncated");
    /* a consistent size field but the last entry's data cut */
    memcpy(tmp, buf, len);
    const uint64_t shorter = len - 4;
    for (int i = 0; i < 8; i++)
        tmp[24 + i] = (unsigned char)(shorter >> (8 * i));
    is_int(open_variant(tpath, tmp, len - 4), -PDUMP_ETRUNC, "last entry cut: truncated");
    /* first entry ("input"): numel no longer the product of its dims */
    memcpy(tmp, buf, len);
    tmp[PDUMP_HEADER + PDUMP_NAME_LEN + 40] ^= 1;
    is_int(open_variant(tpath, tmp, len), -PDUMP_ECORRUPT, "numel != product of dims: corrupt");
    memcpy(tmp, buf, len);
    tmp[PDUMP_HEADER + PDUMP_NAME_LEN] = 7;
    is_int(open_variant(tpath, tmp, len), -PDUMP_ECORRUPT, "unknown kind: corrupt");
    memcpy(tmp, buf, len);
    memset(tmp + PDUMP_HEADER, 'a', PDUMP_NAME_LEN);
    is_int(open_variant(tpath, tmp, len), -PDUMP_ECORRUPT, "unterminated name: corrupt");
    memcpy(tmp, buf, len);
    const float nan = NAN;
    memcpy(tmp + PDUMP_HEADER + PDUMP_ENTRY_HDR, &nan, 4);
    is_int(open_variant(tpath, tmp, len), -PDUMP_ECORRUPT, "NaN value: corrupt");
    ok(strstr(pdump_strerror(-PDUMP_ETRUNC), "truncated") != NULL &&
           strcmp(pdump_strerror(-ENOENT), strerror(ENOENT)) == 0,
       "pdump_strerror names format and errno codes");
    test_damaged_zstd(tpath, buf, len);
    remove(tpath);
    free(buf);
    free(tmp);
}

/* ---------------------------------------------------------------------------------------- */
/* the dump itself                                                                          */

static void test_listing(const struct pdump *d)
{
    is_int(pdump_version(d), PDUMP_VERSION, "version %d", PDUMP_VERSION);
    static const char *const groups[] = { "input",        "targets", "hyp",   "layer.",
                                          "detect.",      "bt.",     "loss.", "dloss.",
                                          "grad.",        "init.",   "step.", "step1.delta.",
                                          "step2.delta.", "step3." };
    const int ng = (int)(sizeof groups / sizeof groups[0]);
    int count[16] = { 0 }, other = 0, full = 0;
    size_t stored = 0;
    for (int i = 0; i < pdump_count(d); i++) {
        const struct pdump_tensor *t = pdump_at(d, i);
        int g = 0;
        while (g < ng && strncmp(t->name, groups[g], strlen(groups[g])) != 0)
            g++;
        if (g == ng)
            other++;
        else
            count[g]++;
        full += t->kind == PDUMP_FULL;
        stored += t->n_stored;
    }
    tap_diag("%d entries (%d full, %d sampled), %zu stored floats", pdump_count(d), full,
             pdump_count(d) - full, stored);
    for (int g = 0; g < ng; g++)
        tap_diag("  %-14s %d", groups[g], count[g]);
    is_int(other, 0, "every entry belongs to a documented group");
    ok(pdump_at(d, pdump_count(d)) == NULL && pdump_find(d, "no.such") == NULL,
       "out-of-range index and unknown name give NULL");
}

static void test_stats(const struct pdump *d)
{
    int bad = 0, n = 0, bad_samples = 0;
    for (int i = 0; i < pdump_count(d); i++) {
        const struct pdump_tensor *t = pdump_at(d, i);
        if (t->kind == PDUMP_FULL) {
            double s[4];
            pdump_stats(t->data, t->numel, s);
            const double want[4] = { t->l2, t->l1, t->sum, t->maxabs };
            const double scale[4] = { t->l2, t->l1, t->l1, t->maxabs };
            for (int k = 0; k < 4; k++)
                if (fabs(s[k] - want[k]) > 1e-9 * scale[k] + 1e-30) {
                    if (bad < 5)
                        tap_diag("%s: stat %d is %.17g, recomputed %.17g", t->name, k, want[k],
                                 s[k]);
                    bad++;
                }
            n++;
        } else {
            /* samples lie inside the whole tensor's range and norms */
            for (size_t j = 0; j < t->n_stored; j++)
                bad_samples += fabs(t->data[j]) > t->maxabs || fabs(t->data[j]) > t->l2;
        }
    }
    is_int(bad, 0, "stored statistics equal those of the %d full tensors (1e-9)", n);
    is_int(bad_samples, 0, "samples within maxabs and l2 of their tensors");
}

static void test_losses(const struct pdump *d)
{
    const struct pdump_tensor *hyp = need(d, "hyp");
    const float *h = hyp->data;
    /* recipe S3: box 0.05 * 3 / nl, obj 1.0 * (img / 640)^2 * 3 / nl, cls 0.5 * nc / 80 * 3 / nl */
    ok(hyp->numel == 8 && close_to(h[0], 0.05, 1e-7) &&
           close_to(h[1], (IMG / 640.0) * (IMG / 640.0), 1e-7) && close_to(h[2], 0.5, 1e-7) &&
           h[3] == 4.0f && h[4] == 1.0f && close_to(h[5], 0.4, 1e-7) && h[6] == 4.0f && h[7] == BS,
       "hyp: gains 0.05 / 0.04 / 0.5, balance 4 / 1 / 0.4, anchor_t 4, batch 2");
    const double lbox = scalar(d, "loss.lbox"), lobj = scalar(d, "loss.lobj"),
                 lcls = scalar(d, "loss.lcls"), total = scalar(d, "loss.total");
    tap_diag("lbox %.7g lobj %.7g lcls %.7g total %.7g", lbox, lobj, lcls, total);
    ok(lbox > 0 && lobj > 0 && lcls > 0 && total > 0, "losses are positive");
    ok(close_to(total, (h[0] * lbox + h[1] * lobj + h[2] * lcls) * BS, 1e-6),
       "total = (box lbox + obj lobj + cls lcls) x bs");
    double sb = 0, so = 0, sc = 0;
    for (int l = 0; l < 3; l++) {
        sb += need(d, "loss.%d.lbox", l)->data[0];
        so += h[3 + l] * need(d, "loss.%d.lobj", l)->data[0];
        sc += need(d, "loss.%d.lcls", l)->data[0];
    }
    ok(close_to(sb, lbox, 1e-6) && close_to(so, lobj, 1e-6) && close_to(sc, lcls, 1e-6),
       "raw losses are the per-level sums (lobj balanced)");
    const float *it = need(d, "loss.items")->data;
    ok(close_to(it[0], h[0] * lbox, 1e-6) && close_to(it[1], h[1] * lobj, 1e-6) &&
           close_to(it[2], h[2] * lcls, 1e-6),
       "loss.items = gains x raw losses");
    const struct pdump_tensor *sl = need(d, "step.loss");
    ok(sl->ndim == 2 && sl->shape[0] == 3 && sl->shape[1] == 4 && sl->data[0] == (float)lbox &&
           sl->data[1] == (float)lobj && sl->data[2] == (float)lcls && sl->data[3] == (float)total,
       "step.loss[0] is the loss of the dumped forward");
    ok(sl->data[11] < sl->data[7] && sl->data[7] < sl->data[3],
       "total loss falls over the three steps (%.6g, %.6g, %.6g)", (double)sl->data[3],
       (double)sl->data[7], (double)sl->data[11]);
}

static double bce(double x, double y)
{
    /* BCE-with-logits, stable form */
    return (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
}

/* build_targets entries, tobj and the objectness / class losses, recomputed from the stored
 * Detect outputs with the documented layout and duplicate rule */
static void test_targets(const struct pdump *d, const struct trn_model *m)
{
    const float *anchors = NULL;
    const struct trn_tensor *at = trn_model_tensor(m, trn_model_find(m, "model.24.anchors"));
    anchors = (const float *)trn_model_arena_const(m, at->arena) + at->offset;
    const struct pdump_tensor *tg = need(d, "targets");
    ok(tg->ndim == 2 && tg->shape[1] == 6 && tg->shape[0] >= 8, "targets: (%d, 6)", tg->shape[0]);
    int n_dup_total = 0;
    for (int l = 0; l < 3; l++) {
        const int ny = IMG / (8 << l), nx = ny;
        const struct pdump_tensor *p = need(d, "detect.%d", l);
        ok(p->kind == PDUMP_FULL && p->ndim == 5 && p->shape[0] == BS && p->shape[1] == 3 &&
               p->shape[2] == ny && p->shape[3] == nx && p->shape[4] == 85,
           "detect.%d is (2, 3, %d, %d, 85), full", l, ny, nx);
        const struct pdump_tensor *b = need(d, "bt.%d.b", l), *a = need(d, "bt.%d.a", l),
                                  *gj = need(d, "bt.%d.gj", l), *gi = need(d, "bt.%d.gi", l),
                                  *tc = need(d, "bt.%d.tcls", l), *tb = need(d, "bt.%d.tbox", l),
                                  *an = need(d, "bt.%d.anch", l), *iou = need(d, "loss.%d.iou", l),
                                  *tobj = need(d, "loss.%d.tobj", l);
        const size_t n = b->numel;
        ok(n > 0 && a->numel == n && gj->numel == n && gi->numel == n && tc->numel == n &&
               tb->numel == 4 * n && an->numel == 2 * n && iou->numel == n &&
               tobj->numel == (size_t)BS * 3 * ny * nx,
           "level %d: %zu build_targets entries, consistent lengths", l, n);
        int bad = 0;
        for (size_t e = 0; e < n; e++) {
            const int ia = (int)a->data[e];
            bad += b->data[e] < 0 || b->data[e] >= BS || ia < 0 || ia > 2 || gj->data[e] < 0 ||
                   gj->data[e] >= ny || gi->data[e] < 0 || gi->data[e] >= nx ||
                   tb->data[4 * e] < -0.5f || tb->data[4 * e] > 1.5f ||
                   tb->data[4 * e + 1] < -0.5f || tb->data[4 * e + 1] > 1.5f ||
                   an->data[2 * e] != anchors[(l * 3 + ia) * 2] ||
                   an->data[2 * e + 1] != anchors[(l * 3 + ia) * 2 + 1];
            /* anchor_t: the ratio test passed */
            const double rw = tb->data[4 * e + 2] / an->data[2 * e],
                         rh = tb->data[4 * e + 3] / an->data[2 * e + 1];
            bad += fmax(fmax(rw, 1 / rw), fmax(rh, 1 / rh)) >= 4.0;
        }
        is_int(bad, 0,
               "level %d: indices in range, xy in [-0.5, 1.5], anchors = the model's, "
               "ratios < anchor_t",
               l);

        /* tobj: the last entry per cell, clamped at 0; everything else 0 */
        float *want = calloc(tobj->numel, sizeof *want);
        int dup = 0;
        char *seen = calloc(tobj->numel, 1);
        for (size_t e = 0; e < n; e++) {
            const size_t c =
                (((size_t)b->data[e] * 3 + (size_t)a->data[e]) * (size_t)ny + (size_t)gj->data[e]) *
                    (size_t)nx +
                (size_t)gi->data[e];
            dup += seen[c];
            seen[c] = 1;
            want[c] = iou->data[e] > 0 ? iou->data[e] : 0;
        }
        n_dup_total += dup;
        is_int(memcmp(want, tobj->data, tobj->numel * sizeof *want), 0,
               "level %d: tobj = clamp(CIoU, 0) of the last entry per cell (%d duplicates)", l,
               dup);

        double lo = 0;
        for (size_t c = 0; c < tobj->numel; c++)
            lo += bce(p->data[c * 85 + 4], tobj->data[c]);
        lo /= (double)tobj->numel;
        const double want_lobj = need(d, "loss.%d.lobj", l)->data[0];
        ok(close_to(lo, want_lobj, 1e-5),
           "level %d: lobj = mean BCE(p[..., 4], tobj): %.7g vs %.7g", l, lo, want_lobj);
        double lc = 0;
        for (size_t e = 0; e < n; e++) {
            const size_t c =
                (((size_t)b->data[e] * 3 + (size_t)a->data[e]) * (size_t)ny + (size_t)gj->data[e]) *
                    (size_t)nx +
                (size_t)gi->data[e];
            for (int k = 0; k < 80; k++)
                lc += bce(p->data[c * 85 + 5 + (size_t)k], k == (int)tc->data[e] ? 1.0 : 0.0);
        }
        lc /= (double)n * 80;
        const double want_lcls = need(d, "loss.%d.lcls", l)->data[0];
        ok(close_to(lc, want_lcls, 1e-5), "level %d: lcls = mean BCE over n x 80: %.7g vs %.7g", l,
           lc, want_lcls);
        free(want);
        free(seen);

        const struct pdump_tensor *g = need(d, "dloss.detect.%d", l);
        ok(g->kind == PDUMP_FULL && g->numel == p->numel && g->l2 > 0,
           "dloss.detect.%d: full, same shape, nonzero", l);
    }
    ok(n_dup_total > 0, "the case exercises duplicate cells (%d)", n_dup_total);
}

/* names, shapes and count of the gradients and samples of the initial weights */
static void test_params(const struct pdump *d, struct trn_model *m)
{
    const struct trn_model_info *I = trn_model_info(m);
    int n_param = 0, bad_shape = 0, n_grad = 0;
    int64_t numel = 0;
    for (int i = 0; i < pdump_count(d); i++)
        n_grad += strncmp(pdump_at(d, i)->name, "grad.", 5) == 0;
    trn_model_init(m, SEED);
    int bad_init = 0;
    struct pdump_tol exact = { 0, 0, 0, 3, 1, 0 };
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *t = trn_model_tensor(m, k);
        if (t->arena != TRN_ARENA_PARAM) continue;
        n_param++;
        numel += (int64_t)t->numel;
        const struct pdump_tensor *g = need(d, "grad.%s", t->name);
        bool same = g->ndim == t->ndim;
        for (int j = 0; same && j < t->ndim; j++)
            same = g->shape[j] == t->shape[j];
        bad_shape += !same;
        const float *w = (const float *)trn_model_arena(m, TRN_ARENA_PARAM) + t->offset;
        bad_init +=
            pdump_compare(need(d, "init.%s", t->name), w, t->numel, &exact, stdout, NULL) != 0;
    }
    is_int(n_grad, n_param, "one gradient per trainable tensor of trn_model (%d)", n_param);
    is_int(n_param, 177, "yolov5n has 177 trainable tensors");
    is_int(numel, I->n_params, "gradient elements = yolov5n's %lld parameters",
           (long long)I->n_params);
    is_int(bad_shape, 0, "gradient shapes equal the model's");
    is_int(bad_init, 0, "init.* equal trn_model_init(seed %d) bit for bit", SEED);
    /* the stored grad norm is the norm of the stored gradients */
    double s2 = 0;
    for (int i = 0; i < pdump_count(d); i++)
        if (strncmp(pdump_at(d, i)->name, "grad.", 5) == 0)
            s2 += pdump_at(d, i)->l2 * pdump_at(d, i)->l2;
    const double gn = need(d, "step.gradnorm")->data[0];
    ok(close_to(sqrt(s2), gn, 1e-6), "step.gradnorm[0] = L2 of all gradients (%.7g)", gn);
    const float *cc = need(d, "step.clip_coef")->data;
    int bad_clip = 0;
    for (int s = 0; s < 3; s++) {
        const double g = need(d, "step.gradnorm")->data[s];
        bad_clip += !close_to(cc[s], fmin(10.0 / (g + 1e-6), 1.0), 1e-6);
    }
    is_int(bad_clip, 0, "clip coefficients = min(10 / (norm + 1e-6), 1)");
}

static int group_of(enum trn_tensor_role r)
{
    return r == TRN_T_BN_BIAS || r == TRN_T_DETECT_BIAS ? 0 : r == TRN_T_BN_WEIGHT ? 2 : 1;
}

/* step 1 from init + gradient, element by element; the EMA recursion over the deltas */
static void test_steps(const struct pdump *d, struct trn_model *m)
{
    const struct trn_model_info *I = trn_model_info(m);
    const float *lr = need(d, "step.lr")->data, *mom = need(d, "step.momentum")->data,
                *dec = need(d, "step.ema_decay")->data;
    int bad_sched = 0;
    for (int s = 0; s < 3; s++) {
        /* recipe S4 warmup, nw = 300: biases 0.1 -> 0.01, others 0 -> 0.01, momentum 0.8 ->
         * 0.937 */
        bad_sched += !close_to(lr[3 * s], 0.1 + (0.01 - 0.1) * s / 300.0, 1e-6) ||
                     !close_to(lr[3 * s + 1], 0.01 * s / 300.0, 1e-6) ||
                     !close_to(lr[3 * s + 2], 0.01 * s / 300.0, 1e-6) ||
                     !close_to(mom[s], 0.8 + (0.937 - 0.8) * s / 300.0, 1e-6) ||
                     !close_to(dec[s], 0.9999 * (1 - exp(-(s + 1) / 2000.0)), 1e-6);
    }
    is_int(bad_sched, 0, "lr, momentum and EMA decay follow the warmup schedule");
    trn_model_init(m, SEED);
    const double coef = need(d, "step.clip_coef")->data[0], wd = 5e-4;
    int bad_sgd = 0, bad_ema = 0, bad_param = 0, moved = 0;
    double worst_sgd = 0, worst_ema = 0;
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *t = trn_model_tensor(m, k);
        if (t->arena != TRN_ARENA_PARAM) continue;
        const float *w = (const float *)trn_model_arena(m, TRN_ARENA_PARAM) + t->offset;
        const struct pdump_tensor *g = need(d, "grad.%s", t->name),
                                  *d1 = need(d, "step1.delta.%s", t->name),
                                  *d2 = need(d, "step2.delta.%s", t->name),
                                  *d3 = need(d, "step3.delta.%s", t->name),
                                  *p3 = need(d, "step3.param.%s", t->name),
                                  *e3 = need(d, "step3.ema_delta.%s", t->name);
        const int grp = group_of(t->role);
        for (size_t i = 0; i < g->n_stored; i++) {
            const size_t j = pdump_index(g, i);
            if (pdump_index(d1, i) != j || pdump_index(e3, i) != j) {
                bad_sgd++;
                continue;
            }
            /* SGD, nesterov, first step: buf = g'; w -= lr (g' + momentum buf) */
            const double gg = g->data[i] * coef + (grp == 1 ? wd * w[j] : 0.0);
            const double want = -lr[grp] * (gg + mom[0] * gg);
            const double err = fabs(d1->data[i] - want);
            worst_sgd = fmax(worst_sgd, err / (fabs(want) + 1e-30));
            bad_sgd += err > 1e-5 * fabs(want) + 1e-12;
            /* EMA: e_s - w0 = d_s (e_{s-1} - w0) + (1 - d_s)(w_s - w0), e_0 = w0 */
            double e = 0, scale = 0;
            const double dl[3] = { d1->data[i], d2->data[i], d3->data[i] };
            for (int s = 0; s < 3; s++) {
                e = dec[s] * e + (1 - dec[s]) * dl[s];
                scale += fabs(dl[s]);
            }
            /* relative to the deltas' magnitude: e can cancel to near zero */
            const double eerr = fabs(e3->data[i] - e);
            worst_ema = fmax(worst_ema, eerr / (scale + 1e-30));
            bad_ema += eerr > 1e-6 * scale + 1e-15;
            /* step3.param = w0 + delta3 up to float32 rounding */
            bad_param += fabs(p3->data[i] - ((double)w[j] + d3->data[i])) >
                         0x1p-23 * fabs(p3->data[i]) + 1e-30;
            moved += d3->data[i] != 0;
        }
    }
    is_int(bad_sgd, 0,
           "step 1 = SGD (nesterov, groups, wd 5e-4 on conv weights, clip) of the "
           "stored gradients (worst rel %.2g)",
           worst_sgd);
    is_int(bad_ema, 0, "step3.ema = the EMA recursion over the three steps (worst rel %.2g)",
           worst_ema);
    is_int(bad_param, 0, "step3.param = init + step3.delta");
    ok(moved > 100000, "weights moved (%d sampled elements changed)", moved);
    int n_bn = 0, bad_bn = 0;
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *t = trn_model_tensor(m, k);
        if (t->role != TRN_T_BN_VAR && t->role != TRN_T_BN_MEAN) continue;
        n_bn++;
        const struct pdump_tensor *b = need(d, "step3.buffer.%s", t->name),
                                  *e = need(d, "step3.ema.%s", t->name);
        bad_bn += b->numel != t->numel || e->numel != t->numel;
        if (t->role == TRN_T_BN_VAR)
            for (size_t i = 0; i < b->n_stored; i++)
                bad_bn += !(b->data[i] > 0) || !(e->data[i] > 0);
    }
    is_int(n_bn, 2 * 57, "BN running mean and var of all 57 BN layers");
    is_int(bad_bn, 0, "BN buffers: right sizes, positive variances");
    ok(scalar(d, "step3.num_batches_tracked") == 3, "num_batches_tracked is 3");
}

/* layer shapes against the C activation plan; the input against its generator */
static void test_layers(const struct pdump *d, const struct trn_model *m)
{
    struct trn_act_plan plan;
    char err[256];
    if (trn_model_plan(m, BS, IMG, IMG, &plan, err, sizeof err)) {
        printf("Bail out! plan: %s\n", err);
        exit(99);
    }
    int bad = 0;
    for (int i = 0; i < 24; i++) {
        const struct pdump_tensor *t = need(d, "layer.%d", i);
        const struct trn_act_layer *L = &plan.layers[i];
        if (t->ndim != 4 || t->shape[0] != BS || t->shape[1] != L->c || t->shape[2] != L->h ||
            t->shape[3] != L->w) {
            bad++;
            tap_diag("layer.%d: dump [%d, %d, %d, %d], plan [%d, %d, %d, %d]", i, t->shape[0],
                     t->shape[1], t->shape[2], t->shape[3], BS, L->c, L->h, L->w);
        }
    }
    is_int(bad, 0, "layer.0 .. layer.23 have the C plan's shapes");
    trn_act_plan_free(&plan);

    const struct pdump_tensor *in = need(d, "input");
    float *x = malloc(in->numel * sizeof *x);
    for (size_t j = 0; j < in->numel; j++)
        x[j] = trn_model_init_uniform(0, INPUT_K, j);
    struct pdump_tol tol = { 0, 0, 0, 3, 1, 0 };
    ok(in->numel == (size_t)BS * 3 * IMG * IMG &&
           pdump_compare(in, x, in->numel, &tol, stdout, NULL) == 0,
       "input samples = trn_model_init_uniform(0, %d, j), exactly", INPUT_K);
    tol = (struct pdump_tol){ 0, 0, 1e-9, 3, 0, 1 };
    ok(pdump_compare(in, x, in->numel, &tol, stdout, NULL) == 0,
       "input statistics match the regenerated batch");
    free(x);
}

/* pdump_compare can fail: perturbations are found and reported */
static void test_compare(const struct pdump *d)
{
    const struct pdump_tensor *t = need(d, "detect.1");
    float *x = malloc(t->numel * sizeof *x);
    memcpy(x, t->data, t->numel * sizeof *x);
    struct pdump_result r;
    is_int(pdump_compare(t, x, t->numel, NULL, NULL, &r), 0, "a copy matches");
    ok(r.n_checked == t->numel && r.max_abs_err == 0, "every element checked, no error");
    /* float32-level noise, as PyTorch's own float32 run shows (<= 5e-5 of max |x|), passes */
    for (size_t j = 0; j < t->numel; j++)
        x[j] += (float)(((double)((j * 7919) % 101) - 50) / 50.0 * 2e-5 * t->maxabs);
    struct pdump_tol issue = { 0, 1e-4, 1e-4, 5, 1, 1 };
    is_int(pdump_compare(t, x, t->numel, &issue, stdout, &r), 0,
           "noise of 2e-5 x max|ref| passes the per-tensor 1e-4 criterion");
    memcpy(x, t->data, t->numel * sizeof *x);
    x[1234] *= 1.001f;
    const int rc = pdump_compare(t, x, t->numel, &issue, stdout, &r);
    ok(rc >= 1 && r.n_bad == 1 && r.worst_index == 1234 && r.max_rel_err > 9e-4,
       "a 1e-3 relative change of one element is caught (rc %d, index %zu)", rc, r.worst_index);
    memcpy(x, t->data, t->numel * sizeof *x);
    x[7] = NAN;
    ok(pdump_compare(t, x, t->numel, NULL, NULL, &r) > 0 && r.n_bad == 1, "a NaN is caught");
    memcpy(x, t->data, t->numel * sizeof *x);
    struct pdump_tol tol = issue;
    tol.check_samples = 0;
    for (size_t j = 0; j < t->numel; j++)
        x[j] *= 1.001f;
    const int rc_scale = pdump_compare(t, x, t->numel, &tol, NULL, &r);
    ok(rc_scale > 0 && r.n_checked == 0 && r.l2_rel_err > 9e-4,
       "statistics alone catch a 1e-3 scale error (l2 rel %.2g)", r.l2_rel_err);
    is_int(pdump_compare(t, x, t->numel - 1, NULL, NULL, NULL), -EINVAL, "wrong size: -EINVAL");
    is_int(pdump_compare_named(d, "no.such", x, 1, NULL, NULL, NULL), -ENOENT,
           "unknown name: -ENOENT");
    free(x);

    /* a sampled tensor: only its samples and statistics are known */
    const struct pdump_tensor *g = need(d, "grad.model.8.m.0.cv2.conv.weight");
    ok(g->kind == PDUMP_SAMPLED && g->n_stored == 2048 && pdump_index(g, 1) == g->numel / 2048,
       "large gradients are sampled at (i * numel) / 2048");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("Bail out! usage: test_parity_dump DUMP\n");
        return 99;
    }
    struct pdump *d = NULL;
    const int rc = pdump_open(argv[1], &d);
    if (!ok(rc == 0, "open %s", argv[1])) {
        tap_diag("%s", pdump_strerror(rc));
        return tap_done();
    }
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/yolov5n.yaml", TRN_TEST_MODELS_DIR);
    struct trn_model *m = NULL;
    if (trn_model_load(path, NULL, &m, err, sizeof err)) {
        printf("Bail out! %s\n", err);
        return 99;
    }
    trn_model_init(m, SEED); /* anchors, initial weights */
    test_listing(d);
    test_damaged(argv[1]);
    test_stats(d);
    test_losses(d);
    test_targets(d, m);
    test_params(d, m);
    test_steps(d, m);
    test_layers(d, m);
    test_compare(d);
    trn_model_destroy(m);
    pdump_close(d);
    return tap_done();
}
