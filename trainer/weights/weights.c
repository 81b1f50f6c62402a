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
#include "ckpt.h"
#include "ptload.h"
#include "weights.h"
#include "util.h"
#include "errors.h"

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
            return trn_fail(err, cap, -ENOENT,
                            "%s: model yaml not found (give a path, or a name from models: "
                            "yolov5n/s/m/l/x, or set FFYOLO_MODELS_DIR)",
                            cfg);
        rc = trn_model_load(path, &mo, m, why, sizeof why);
    } else {
        rc = trn_model_parse(yaml, len, yname, &mo, m, why, sizeof why);
    }
    return rc < 0 ? trn_fail(err, cap, rc, "%s", why[0] ? why : trn_strerror(rc)) : 0;
}

/* train.py loads ckpt['model'] (attempt_load, for inference, prefers 'ema'): the key that
 * holds it when it is there and not None, else the inference choice. */
static const char *train_key(const struct trn_pt *pt)
{
    const char *k, *d;
    for (int i = 0; trn_pt_top_key(pt, i, &k, &d) > i; i++)
        if (!strcmp(k, "model") && strcmp(d, "None")) return "model";
    return NULL;
}

/* An ultralytics .pt: the architecture from its yaml (or cfg), the weights copied in; for
 * training (train) its `model`, else as attempt_load. ultralytics asserts the weights' classes
 * equal the dataset's: no nc override here. yaml_out: optional, the .pt's yaml (malloc'd). */
static int load_pt(const char *path, const char *cfg, bool train, struct trn_model **m,
                   char **yaml_out, size_t *ylen_out, char *err, size_t cap)
{
    struct trn_pt *pt = NULL;
    char why[512] = "";
    int rc = trn_pt_open(path, &pt, why, sizeof why);
    if (rc < 0) return trn_fail(err, cap, rc, "%s", why[0] ? why : trn_strerror(rc));
    const char *which = train ? train_key(pt) : NULL;
    char *yaml = NULL;
    int len = 0;
    if (!cfg) {
        len = trn_pt_model_yaml(pt, which, NULL, 0);
        yaml = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (!yaml) {
            rc = trn_fail(err, cap, len < 0 ? len : -ENOMEM,
                          "%s: no model yaml in the checkpoint (%s); pass --cfg", path,
                          len < 0 ? trn_strerror(len) : "out of memory");
            trn_pt_close(pt);
            return rc;
        }
        trn_pt_model_yaml(pt, which, yaml, (size_t)len + 1);
    }
    rc = model_from(cfg, yaml, (size_t)len, path, 0, m, err, cap);
    if (rc == 0 && yaml_out) {
        *yaml_out = yaml, *ylen_out = (size_t)len;
        yaml = NULL;
    }
    free(yaml);
    if (rc == 0) {
        struct trn_pt_match mt;
        rc = trn_pt_copy_into_model(pt, which, *m, &mt, why, sizeof why);
        if (rc < 0) {
            trn_fail(err, cap, rc, "%s", why[0] ? why : trn_strerror(rc));
            trn_model_destroy(*m);
            *m = NULL;
            if (yaml_out) free(*yaml_out), *yaml_out = NULL;
        }
    }
    trn_pt_close(pt);
    return rc;
}

/*
 * Our checkpoint (ckpt.h): the EMA weights, the model yaml it was built from, nc from the
 * metadata. Returns 0, a negative error, or 1: not a checkpoint (nothing done).
 */
static int load_ckpt(const char *path, const char *cfg, struct trn_model **m, char **meta_out,
                     size_t *meta_len_out, char **yaml_out, size_t *ylen_out, char *err, size_t cap)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return 1;
    if (!trn_ckpt_probe(r)) {
        ffr_reader_close(r);
        return 1;
    }
    struct trn_ckpt *c = NULL;
    int rc = trn_ckpt_adopt(r, path, &c, err, cap);
    if (rc < 0) return rc;
    int64_t nc = 0;
    if (trn_ckpt_i64(c, "nc", 1, 65536, &nc) < 0) nc = 0;
    size_t ylen = 0;
    char *yaml = trn_ckpt_text(c, TRN_CKPT_MODEL_YAML, &ylen, &rc);
    if (!yaml)
        trn_fail(err, cap, rc, "%s: the checkpoint's model yaml cannot be read: %s", path,
                 ffr_strerror(rc));
    else
        rc = model_from(cfg, yaml, ylen, path, (int)nc, m, err, cap);
    if (yaml_out && rc == 0) {
        *yaml_out = yaml, *ylen_out = ylen;
        yaml = NULL;
    }
    free(yaml);
    if (rc == 0) rc = trn_ckpt_load_ema(c, *m, true, err, cap);
    size_t mlen = 0;
    const char *meta = trn_ckpt_metadata(c, &mlen);
    if (rc == 0 && meta_out) {
        *meta_out = malloc(mlen + 1);
        if (!*meta_out) {
            rc = trn_fail(err, cap, -ENOMEM, "%s: out of memory", path);
        } else {
            memcpy(*meta_out, meta, mlen);
            (*meta_out)[mlen] = '\0';
            if (meta_len_out) *meta_len_out = mlen;
        }
    }
    trn_ckpt_close(c);
    if (rc < 0) {
        trn_model_destroy(*m);
        *m = NULL;
        if (yaml_out) free(*yaml_out), *yaml_out = NULL;
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
        return trn_fail(err, err_cap, -e, "%s: %s", weights, strerror(e));
    }
    /* A checkpoint is told by its ffr metadata; anything else is tried as a .pt. */
    const int rc = ends_with_ci(weights, ".pt")
                       ? 1
                       : load_ckpt(weights, cfg, out, meta, meta_len, NULL, NULL, err, err_cap);
    return rc == 1 ? load_pt(weights, cfg, false, out, NULL, NULL, err, err_cap) : rc;
}

int trn_weights_pretrained(const char *weights, struct trn_model **src, char **yaml,
                           size_t *yaml_len, char *err, size_t err_cap)
{
    if (!weights || !src || !yaml || !yaml_len) return -EINVAL;
    *src = NULL, *yaml = NULL, *yaml_len = 0;
    struct stat st;
    if (stat(weights, &st) != 0) {
        const int e = errno;
        return trn_fail(err, err_cap, -e, "--weights %s: %s", weights, strerror(e));
    }
    int rc = ends_with_ci(weights, ".pt")
                 ? 1
                 : load_ckpt(weights, NULL, src, NULL, NULL, yaml, yaml_len, err, err_cap);
    if (rc != 1) return rc;
    char why[512] = "";
    rc = load_pt(weights, NULL, true, src, yaml, yaml_len, why, sizeof why);
    if (rc == -TRN_PT_EZIP)
        return trn_fail(err, err_cap, rc,
                        "--weights %s: neither an ultralytics .pt nor one of our checkpoints (%s)",
                        weights, why);
    if (rc < 0) trn_fail(err, err_cap, rc, "--weights %s: %s", weights, why);
    return rc;
}
