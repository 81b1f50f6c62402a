/* Inference weights from a .pt, a checkpoint, or a model yaml (weights.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ffr.h"
#include "ptload.h"
#include "train.h"
#include "weights.h"

static int fail(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t cap, int rc, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

void trn_meta_value(const char *meta, size_t len, const char *key, char *dst, size_t cap)
{
    dst[0] = '\0';
    const size_t kl = strlen(key);
    size_t i = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && meta[e] != '\n')
            e++;
        if (e - i > kl && !memcmp(meta + i, key, kl) && meta[i + kl] == ':') {
            size_t v = i + kl + 1;
            while (v < e && meta[v] == ' ')
                v++;
            const size_t n = e - v < cap - 1 ? e - v : cap - 1;
            memcpy(dst, meta + v, n);
            dst[n] = '\0';
            return;
        }
        i = e + 1;
    }
}

/* The model from cfg when given, else from the yaml text. */
static int model_from(const char *cfg, const char *yaml, size_t len, const char *yname, int nc,
                      struct trn_model **m, char *err, size_t cap)
{
    struct trn_model_opts mo;
    trn_model_opts_default(&mo);
    mo.nc = nc;
    char why[512] = "";
    int rc;
    if (cfg) {
        char path[4096];
        if (trn_model_cfg_find(cfg, TRN_MODELS_DIR, path, sizeof path))
            return fail(err, cap, -ENOENT,
                        "%s: model yaml not found (give a path, or a name from trainer/models: "
                        "yolov5n/s/m/l/x, or set FFYOLO_MODELS_DIR)",
                        cfg);
        rc = trn_model_load(path, &mo, m, why, sizeof why);
    } else {
        rc = trn_model_parse(yaml, len, yname, &mo, m, why, sizeof why);
    }
    return rc < 0 ? fail(err, cap, rc, "%s", why[0] ? why : trn_model_strerror(rc)) : 0;
}

/* An ultralytics .pt: the architecture from its yaml (or cfg), the weights copied in.
 * ultralytics asserts the weights' classes equal the dataset's: no nc override here. */
static int load_pt(const char *path, const char *cfg, struct trn_model **m, char *err, size_t cap)
{
    struct trn_pt *pt = NULL;
    char why[512] = "";
    int rc = trn_pt_open(path, &pt, why, sizeof why);
    if (rc < 0) return fail(err, cap, rc, "%s", why[0] ? why : trn_pt_strerror(rc));
    char *yaml = NULL;
    int len = 0;
    if (!cfg) {
        len = trn_pt_model_yaml(pt, NULL, NULL, 0);
        yaml = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (!yaml) {
            rc = fail(err, cap, len < 0 ? len : -ENOMEM,
                      "%s: no model yaml in the checkpoint (%s); pass --cfg", path,
                      len < 0 ? trn_pt_strerror(len) : "out of memory");
            trn_pt_close(pt);
            return rc;
        }
        trn_pt_model_yaml(pt, NULL, yaml, (size_t)len + 1);
    }
    rc = model_from(cfg, yaml, (size_t)len, path, 0, m, err, cap);
    free(yaml);
    if (rc == 0) {
        struct trn_pt_match mt;
        rc = trn_pt_copy_into_model(pt, NULL, *m, &mt, why, sizeof why);
        if (rc < 0) {
            fail(err, cap, rc, "%s", why[0] ? why : trn_pt_strerror(rc));
            trn_model_destroy(*m);
            *m = NULL;
        }
    }
    trn_pt_close(pt);
    return rc;
}

/* Reads record k of a checkpoint whose summary must be `name`, exactly `bytes` long (or any
 * length into a new NUL-terminated *text). */
static int ckpt_record(const struct ffr_reader *r, uint64_t k, const char *name, void *dst,
                       size_t bytes, char **text, size_t *text_len)
{
    struct ffr_record_info ri;
    if (ffr_reader_info(r, k, &ri) < 0 || ri.summary_len != strlen(name) ||
        memcmp(ri.summary, name, ri.summary_len))
        return -EINVAL;
    if (text) {
        *text = malloc((size_t)ri.raw_len + 1);
        if (!*text) return -ENOMEM;
        dst = *text;
        bytes = ri.raw_len;
    }
    if (ri.raw_len != bytes) return -EINVAL;
    const int64_t got = ffr_reader_read(r, NULL, k, dst, bytes);
    if (got < 0) return (int)got;
    if (text) {
        (*text)[got] = '\0';
        *text_len = (size_t)got;
    }
    return 0;
}

/*
 * Our checkpoint (docs/checkpoint.md): an ffr file with metadata "format: ffyolo-ckpt-1"; the
 * EMA weights in records 3 "ema.param", 4 "ema.buffer", 2 "model.count", the yaml in 8, nc in
 * the metadata. Returns 0, a negative error, or 1: not a checkpoint (nothing done).
 */
static int load_ckpt(const char *path, const char *cfg, struct trn_model **m, char **meta_out,
                     size_t *meta_len_out, char *err, size_t cap)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return 1;
    size_t mlen = 0;
    const char *meta = ffr_reader_metadata(r, &mlen);
    char fmt[64], ncs[32];
    trn_meta_value(meta, mlen, "format", fmt, sizeof fmt);
    if (strcmp(fmt, TRN_TRAIN_CKPT_FORMAT)) {
        ffr_reader_close(r);
        return 1;
    }
    trn_meta_value(meta, mlen, "nc", ncs, sizeof ncs);
    char *end;
    const long nc = strtol(ncs, &end, 10);
    char *yaml = NULL;
    size_t ylen = 0;
    int rc = ckpt_record(r, 8, "model.yaml", NULL, 0, &yaml, &ylen);
    if (rc < 0)
        fail(err, cap, rc, "%s: no model yaml in the checkpoint (%s)", path,
             rc == -EINVAL ? "record 8 is not model.yaml" : ffr_strerror(rc));
    else
        rc = model_from(cfg, yaml, ylen, path, *ncs && !*end && nc > 0 && nc <= 65536 ? (int)nc : 0,
                        m, err, cap);
    free(yaml);
    if (rc == 0) {
        const struct trn_model_info *mi = trn_model_info(*m);
        rc = ckpt_record(r, 3, "ema.param", trn_model_arena(*m, TRN_ARENA_PARAM),
                         mi->arena_len[TRN_ARENA_PARAM] * sizeof(float), NULL, NULL);
        if (rc == 0)
            rc = ckpt_record(r, 4, "ema.buffer", trn_model_arena(*m, TRN_ARENA_BUFFER),
                             mi->arena_len[TRN_ARENA_BUFFER] * sizeof(float), NULL, NULL);
        if (rc == 0)
            rc = ckpt_record(r, 2, "model.count", trn_model_arena(*m, TRN_ARENA_COUNT),
                             mi->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t), NULL, NULL);
        if (rc < 0)
            fail(err, cap, rc, "%s: checkpoint records do not fit the model (%s)", path,
                 rc == -EINVAL ? "names or sizes differ" : ffr_strerror(rc));
    }
    if (rc == 0 && meta_out) {
        *meta_out = malloc(mlen + 1);
        if (!*meta_out) {
            rc = fail(err, cap, -ENOMEM, "%s: out of memory", path);
        } else {
            memcpy(*meta_out, meta, mlen);
            (*meta_out)[mlen] = '\0';
            if (meta_len_out) *meta_len_out = mlen;
        }
    }
    ffr_reader_close(r);
    if (rc < 0) {
        trn_model_destroy(*m);
        *m = NULL;
    }
    return rc;
}

static bool ends_with_ci(const char *s, const char *suf)
{
    const size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

int trn_weights_load(const char *weights, const char *cfg, int nc, struct trn_model **out,
                     char **meta, size_t *meta_len, char *err, size_t err_cap)
{
    if (!out || (!weights && !cfg)) return -EINVAL;
    *out = NULL;
    if (meta) *meta = NULL;
    if (meta_len) *meta_len = 0;
    if (!weights) {
        const int rc = model_from(cfg, NULL, 0, NULL, nc, out, err, err_cap);
        if (rc == 0) trn_model_init(*out, 0);
        return rc;
    }
    struct stat st;
    if (stat(weights, &st) != 0) {
        const int e = errno;
        return fail(err, err_cap, -e, "%s: %s", weights, strerror(e));
    }
    /* A checkpoint is told by its ffr metadata; anything else is tried as a .pt. */
    const int rc = ends_with_ci(weights, ".pt")
                       ? 1
                       : load_ckpt(weights, cfg, out, meta, meta_len, err, err_cap);
    return rc == 1 ? load_pt(weights, cfg, out, err, err_cap) : rc;
}
