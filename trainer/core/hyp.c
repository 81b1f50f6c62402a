/*
 * hyp: ultralytics hyp yaml -> struct trn_hyp, with libyaml's document API (the files are a few
 * dozen lines; the document API keeps aliases as references, so a hostile file cannot expand).
 */
#include "hyp.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define HYP_MAX_FILE (1u << 20)

/* One key: where it lives, its range, and its scratch-low default. */
struct hyp_key {
    const char *name;
    size_t offset; /* into struct trn_hyp */
    double lo, hi; /* allowed range */
    bool lo_open;  /* lo itself is not allowed */
    bool hi_open;  /* hi itself is not allowed */
    bool whole;    /* must be a whole number */
    bool optional; /* missing is normal (no note) */
    double deflt;  /* hyp.scratch-low.yaml */
};

#define K(n, lo, hi, lo_open, hi_open, whole, opt, d)                            \
    {                                                                            \
#n, offsetof(struct trn_hyp, n), lo, hi, lo_open, hi_open, whole, opt, d \
    }

/* Values from ultralytics/yolov5 data/hyps/hyp.scratch-low.yaml; ranges from struct trn_hyp. */
static const struct hyp_key keys[] = {
    K(lr0, 0, 1, true, false, false, false, 0.01),
    K(lrf, 0, 1, true, false, false, false, 0.01),
    K(momentum, 0, 1, false, true, false, false, 0.937),
    K(weight_decay, 0, 1, false, true, false, false, 0.0005),
    K(warmup_epochs, 0, 1000, false, false, false, false, 3.0),
    K(warmup_momentum, 0, 1, false, true, false, false, 0.8),
    K(warmup_bias_lr, 0, 1, false, false, false, false, 0.1),
    K(box, 0, 1000, false, false, false, false, 0.05),
    K(cls, 0, 1000, false, false, false, false, 0.5),
    K(cls_pw, 0, 1000, true, false, false, false, 1.0),
    K(obj, 0, 1000, false, false, false, false, 1.0),
    K(obj_pw, 0, 1000, true, false, false, false, 1.0),
    K(iou_t, 0, 1, false, false, false, false, 0.20),
    K(anchor_t, 1, 100, false, false, false, false, 4.0),
    K(anchors, 0, 100, false, false, true, true, 0.0),
    K(fl_gamma, 0, 100, false, false, false, false, 0.0),
    K(hsv_h, 0, 1, false, false, false, false, 0.015),
    K(hsv_s, 0, 1, false, false, false, false, 0.7),
    K(hsv_v, 0, 1, false, false, false, false, 0.4),
    K(degrees, 0, 180, false, false, false, false, 0.0),
    K(translate, 0, 1, false, false, false, false, 0.1),
    K(scale, 0, 1, false, true, false, false, 0.5),
    K(shear, 0, 89, false, false, false, false, 0.0),
    K(perspective, 0, 0.01, false, false, false, false, 0.0),
    K(flipud, 0, 1, false, false, false, false, 0.0),
    K(fliplr, 0, 1, false, false, false, false, 0.5),
    K(mosaic, 0, 1, false, false, false, false, 1.0),
    K(mixup, 0, 1, false, false, false, false, 0.0),
    K(copy_paste, 0, 1, false, false, false, false, 0.0),
};
#undef K
#define N_KEYS (sizeof keys / sizeof keys[0])

static double *field(struct trn_hyp *h, const struct hyp_key *k)
{
    return (double *)(void *)((char *)h + k->offset);
}

static double cfield(const struct trn_hyp *h, const struct hyp_key *k)
{
    double v;
    memcpy(&v, (const char *)h + k->offset, sizeof v);
    return v;
}

__attribute__((format(printf, 3, 4))) static void note_f(trn_hyp_note_fn note, void *ctx,
                                                         const char *fmt, ...)
{
    if (!note) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    note(ctx, msg);
}

void trn_hyp_default(struct trn_hyp *h)
{
    memset(h, 0, sizeof *h);
    for (size_t i = 0; i < N_KEYS; i++)
        *field(h, &keys[i]) = keys[i].deflt;
}

/* Whether v is allowed for k; writes the reason to err when not. */
static bool key_ok(const struct hyp_key *k, double v, char *err, size_t cap)
{
    if (!isfinite(v)) {
        trn_fail(err, cap, -EINVAL, "%s: value is not finite", k->name);
        return false;
    }
    const bool below = k->lo_open ? !(v > k->lo) : !(v >= k->lo);
    const bool above = k->hi_open ? !(v < k->hi) : !(v <= k->hi);
    if (below || above) {
        trn_fail(err, cap, -EINVAL, "%s: %g is outside %c%g, %g%c", k->name, v,
                 k->lo_open ? '(' : '[', k->lo, k->hi, k->hi_open ? ')' : ']');
        return false;
    }
    if (k->whole && v != floor(v)) {
        trn_fail(err, cap, -EINVAL, "%s: %g is not a whole number", k->name, v);
        return false;
    }
    return true;
}

int trn_hyp_check(const struct trn_hyp *h, char *err, size_t err_cap)
{
    if (!h) return trn_fail(err, err_cap, -EINVAL, "no hyperparameters");
    for (size_t i = 0; i < N_KEYS; i++)
        if (!key_ok(&keys[i], cfield(h, &keys[i]), err, err_cap)) return -EINVAL;
    return 0;
}

/*
 * A plain scalar spelling a decimal number: [+-] digits [. digits] [(e|E) [+-] digits], with at
 * least one digit before the exponent. Stricter than strtod (no hex, inf, nan, spaces), so that
 * "0x1p3", "nan" or "1_0" are rejected rather than read differently than PyYAML would.
 */
static bool parse_number(const char *s, size_t len, double *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf) return false;
    size_t i = 0, digits = 0;
    if (s[i] == '+' || s[i] == '-') i++;
    while (i < len && s[i] >= '0' && s[i] <= '9')
        i++, digits++;
    if (i < len && s[i] == '.') {
        i++;
        while (i < len && s[i] >= '0' && s[i] <= '9')
            i++, digits++;
    }
    if (digits == 0) return false;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) i++;
        size_t ed = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9')
            i++, ed++;
        if (ed == 0) return false;
    }
    if (i != len) return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end = NULL;
    const double v = strtod(buf, &end);
    if (end != buf + len) return false;
    *out = v;
    return true;
}

static const struct hyp_key *find_key(const char *s, size_t len)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strlen(keys[i].name) == len && memcmp(keys[i].name, s, len) == 0) return &keys[i];
    return NULL;
}

/* A key scalar for messages: printable ASCII only, cut at 40 bytes. */
static void printable(const yaml_node_t *n, char *dst, size_t cap)
{
    const char *s = (const char *)n->data.scalar.value;
    const size_t len = n->data.scalar.length;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap && i < 40; i++)
        dst[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    dst[o] = '\0';
}

int trn_hyp_parse(const char *text, size_t len, const char *name, trn_hyp_note_fn note,
                  void *note_ctx, struct trn_hyp *out, char *err, size_t err_cap)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    bool have_doc = false, seen[N_KEYS] = { false };
    struct trn_hyp h;
    int rc = 0;

    if (!name) name = "hyp";
    if (!out) return trn_fail(err, err_cap, -EINVAL, "%s: no output", name);
    trn_hyp_default(out);
    if (!text && len) return trn_fail(err, err_cap, -EINVAL, "%s: no text", name);
    trn_hyp_default(&h);

    if (!yaml_parser_initialize(&parser))
        return trn_fail(err, err_cap, -ENOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = trn_fail(err, err_cap, parser.error == YAML_MEMORY_ERROR ? -ENOMEM : -EINVAL,
                      "%s:%zu: not valid YAML: %s", name, parser.problem_mark.line + 1,
                      parser.problem ? parser.problem : "parse error");
        goto out;
    }
    have_doc = true;
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        rc = trn_fail(err, err_cap, -EINVAL, "%s: empty document (expected 'key: value' lines)",
                      name);
        goto out;
    }
    if (root->type != YAML_MAPPING_NODE) {
        rc = trn_fail(err, err_cap, -EINVAL, "%s:%zu: expected a mapping of 'key: value' lines",
                      name, root->start_mark.line + 1);
        goto out;
    }
    for (const yaml_node_pair_t *p = root->data.mapping.pairs.start;
         p < root->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(&doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(&doc, p->value);
        if (!k || !v) {
            rc = trn_fail(err, err_cap, -EINVAL, "%s: malformed mapping", name);
            goto out;
        }
        const size_t line = k->start_mark.line + 1;
        if (k->type != YAML_SCALAR_NODE) {
            rc = trn_fail(err, err_cap, -EINVAL, "%s:%zu: a key must be a plain name", name, line);
            goto out;
        }
        char kname[48];
        printable(k, kname, sizeof kname);
        const struct hyp_key *key =
            find_key((const char *)k->data.scalar.value, k->data.scalar.length);
        if (!key) {
            note_f(note, note_ctx, "%s:%zu: unknown key '%s' ignored", name, line, kname);
            continue;
        }
        const size_t ki = (size_t)(key - keys);
        if (seen[ki]) {
            rc = trn_fail(err, err_cap, -EINVAL, "%s:%zu: key '%s' given twice", name, line,
                          key->name);
            goto out;
        }
        seen[ki] = true;
        const size_t vline = v->start_mark.line + 1;
        double value;
        if (v->type != YAML_SCALAR_NODE || v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
            !parse_number((const char *)v->data.scalar.value, v->data.scalar.length, &value)) {
            char vs[48] = "";
            if (v->type == YAML_SCALAR_NODE) printable(v, vs, sizeof vs);
            rc = trn_fail(err, err_cap, -EINVAL, "%s:%zu: %s: expected a number, got %s%s%s", name,
                          vline, key->name, v->type == YAML_SCALAR_NODE ? "'" : "",
                          v->type == YAML_SCALAR_NODE     ? vs
                          : v->type == YAML_SEQUENCE_NODE ? "a list"
                                                          : "a mapping",
                          v->type == YAML_SCALAR_NODE ? "'" : "");
            goto out;
        }
        char why[160];
        if (!key_ok(key, value, why, sizeof why)) {
            rc = trn_fail(err, err_cap, -EINVAL, "%s:%zu: %s", name, vline, why);
            goto out;
        }
        *field(&h, key) = value;
    }
    for (size_t i = 0; i < N_KEYS; i++)
        if (!seen[i] && !keys[i].optional)
            note_f(note, note_ctx, "%s: key '%s' missing; using the scratch-low default %g", name,
                   keys[i].name, keys[i].deflt);
    *out = h;
out:
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int trn_hyp_load(const char *path, trn_hyp_note_fn note, void *note_ctx, struct trn_hyp *out,
                 char *err, size_t err_cap)
{
    if (out) trn_hyp_default(out);
    if (!path || !out) return trn_fail(err, err_cap, -EINVAL, "no path");
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        return trn_fail(err, err_cap, -e, "%s: %s", path, strerror(e));
    }
    struct stat st;
    char *buf = NULL;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        rc = trn_fail(err, err_cap, -e, "%s: %s", path, strerror(e));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = trn_fail(err, err_cap, -EINVAL, "%s: not a regular file", path);
        goto out;
    }
    if (st.st_size > (off_t)HYP_MAX_FILE) {
        rc = trn_fail(err, err_cap, -EFBIG, "%s: %lld bytes is too large for a hyp file", path,
                      (long long)st.st_size);
        goto out;
    }
    const size_t size = (size_t)st.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        rc = trn_fail(err, err_cap, -ENOMEM, "%s: out of memory", path);
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        const ssize_t k = read(fd, buf + got, size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            const int e = errno;
            rc = trn_fail(err, err_cap, -e, "%s: %s", path, strerror(e));
            goto out;
        }
        if (k == 0) break;
        got += (size_t)k;
    }
    rc = trn_hyp_parse(buf, got, path, note, note_ctx, out, err, err_cap);
out:
    free(buf);
    close(fd);
    return rc;
}
