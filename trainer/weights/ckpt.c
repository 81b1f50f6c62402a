/* Our checkpoint file (ckpt.h, docs/checkpoint.md): the record list, the metadata mapping, and
 * the EMA weights into a model. */
#include "ckpt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "weights.h"
#include "util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints store arenas as raw little-endian bytes"
#endif

#define META_MAX_KEYS 96

static const char *const record_names[TRN_CKPT_N_RECORDS] = {
    "model.param",  "model.buffer", "model.count", "ema.param", "ema.buffer", "optim.state0",
    "optim.state1", "grad",         "model.yaml",  "hyp.yaml",  "opt.yaml",
};

/* The metadata: a flat YAML mapping of scalars; nested mappings and lists are skipped. */
struct meta {
    int n;
    char *key[META_MAX_KEYS];
    char *val[META_MAX_KEYS];
};

struct trn_ckpt {
    struct ffr_reader *r;
    char *path;
    struct meta meta;
    int64_t rec[TRN_CKPT_N_RECORDS];
};

const char *trn_ckpt_record_name(int k)
{
    return k >= 0 && k < TRN_CKPT_N_RECORDS ? record_names[k] : NULL;
}

int trn_ckpt_write(const char *path, const struct trn_ckpt_src rec[TRN_CKPT_N_RECORDS],
                   const char *meta, size_t mlen, char *err, size_t cap)
{
    struct ffr_writer_opts wo;
    ffr_writer_opts_default(&wo);
    wo.align = 64;
    struct ffr_writer *w = NULL;
    int rc = ffr_writer_open(&w, path, &wo);
    if (rc < 0) {
        trn_seterr(err, cap, "%s: cannot write the checkpoint: %s", path, ffr_strerror(rc));
        return rc;
    }
    for (int k = 0; k < TRN_CKPT_N_RECORDS && rc == 0; k++)
        rc = ffr_writer_append(w, rec[k].p, rec[k].bytes, record_names[k], strlen(record_names[k]));
    if (rc == 0) rc = ffr_writer_set_metadata(w, meta, mlen);
    if (rc < 0) {
        ffr_writer_abort(w);
    } else {
        rc = ffr_writer_close(w);
    }
    if (rc < 0)
        trn_seterr(err, cap,
                   "%s: writing the checkpoint failed: %s (the previous file, if any, is "
                   "kept)",
                   path, ffr_strerror(rc));
    return rc;
}

static void meta_free(struct meta *M)
{
    for (int i = 0; i < M->n; i++) {
        free(M->key[i]);
        free(M->val[i]);
    }
    memset(M, 0, sizeof *M);
}

/* Returns 0 or -TRN_CKPT_EBAD, -ENOMEM. */
static int meta_parse(const char *text, size_t len, struct meta *M)
{
    memset(M, 0, sizeof *M);
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return -ENOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = -TRN_CKPT_EBAD, depth = 0;
    char *key = NULL;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) goto out;
        const yaml_event_type_t t = ev.type;
        if (t == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            rc = 0;
            goto out;
        }
        if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) {
            /* a nested value: its key has no scalar */
            if (++depth == 2) {
                free(key);
                key = NULL;
            }
        } else if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) {
            depth--;
        } else if (t == YAML_SCALAR_EVENT && depth == 1) {
            const char *v = (const char *)ev.data.scalar.value;
            if (!key) {
                key = strdup(v);
                if (!key) rc = -ENOMEM;
            } else {
                if (M->n == META_MAX_KEYS) {
                    yaml_event_delete(&ev);
                    goto out;
                }
                M->key[M->n] = key;
                M->val[M->n] = strdup(v);
                key = NULL;
                if (!M->val[M->n++]) rc = -ENOMEM;
            }
        }
        yaml_event_delete(&ev);
        if (rc == -ENOMEM) goto out;
    }
out:
    free(key);
    yaml_parser_delete(&p);
    if (rc < 0) meta_free(M);
    return rc;
}

bool trn_ckpt_probe(const struct ffr_reader *r)
{
    size_t len = 0;
    const char *m = ffr_reader_metadata(r, &len);
    char fmt[64];
    trn_meta_value(m, len, "format", fmt, sizeof fmt);
    return !strcmp(fmt, TRN_CKPT_FORMAT);
}

void trn_ckpt_close(struct trn_ckpt *c)
{
    if (!c) return;
    ffr_reader_close(c->r);
    meta_free(&c->meta);
    free(c->path);
    free(c);
}

int trn_ckpt_adopt(struct ffr_reader *r, const char *path, struct trn_ckpt **out, char *err,
                   size_t cap)
{
    *out = NULL;
    struct trn_ckpt *c = calloc(1, sizeof *c);
    char *p = strdup(path);
    if (!c || !p) {
        free(c);
        free(p);
        ffr_reader_close(r);
        trn_seterr(err, cap, "%s: out of memory", path);
        return -ENOMEM;
    }
    c->r = r;
    c->path = p;
    size_t mlen = 0;
    const char *mt = ffr_reader_metadata(r, &mlen);
    int rc = meta_parse(mt, mlen, &c->meta);
    const char *fmt = rc == 0 ? trn_ckpt_get(c, "format") : NULL;
    if (rc < 0 || !fmt || strcmp(fmt, TRN_CKPT_FORMAT)) {
        trn_seterr(err, cap, "%s: not a yolo-train checkpoint (metadata format is not %s)", path,
                   TRN_CKPT_FORMAT);
        trn_ckpt_close(c);
        return rc == -ENOMEM ? rc : -TRN_CKPT_EBAD;
    }
    for (int k = 0; k < TRN_CKPT_N_RECORDS; k++)
        c->rec[k] = -1;
    const uint64_t n = ffr_reader_count(r);
    for (uint64_t i = 0; i < n; i++) {
        struct ffr_record_info ri;
        if (ffr_reader_info(r, i, &ri) < 0) continue;
        for (int k = 0; k < TRN_CKPT_N_RECORDS; k++)
            if (ri.summary_len == strlen(record_names[k]) &&
                !memcmp(ri.summary, record_names[k], ri.summary_len) && c->rec[k] < 0)
                c->rec[k] = (int64_t)i;
    }
    for (int k = 0; k < TRN_CKPT_N_RECORDS; k++)
        if (c->rec[k] < 0) {
            trn_seterr(err, cap, "%s: checkpoint has no record '%s'", path, record_names[k]);
            trn_ckpt_close(c);
            return -TRN_CKPT_EBAD;
        }
    *out = c;
    return 0;
}

int trn_ckpt_open(const char *path, struct trn_ckpt **out, char *err, size_t cap)
{
    *out = NULL;
    char e[512] = "";
    struct ffr_reader *r = NULL;
    const int rc = ffr_reader_open(&r, path, NULL, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s", e[0] ? e : ffr_strerror(rc));
        return rc;
    }
    return trn_ckpt_adopt(r, path, out, err, cap);
}

const char *trn_ckpt_metadata(const struct trn_ckpt *c, size_t *len)
{
    return ffr_reader_metadata(c->r, len);
}

const char *trn_ckpt_get(const struct trn_ckpt *c, const char *key)
{
    for (int i = 0; i < c->meta.n; i++)
        if (!strcmp(c->meta.key[i], key)) return c->meta.val[i];
    return NULL;
}

int trn_ckpt_i64(const struct trn_ckpt *c, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = trn_ckpt_get(c, key);
    if (!v) return -TRN_CKPT_EBAD;
    char *end = NULL;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -TRN_CKPT_EBAD;
    *out = x;
    return 0;
}

int trn_ckpt_f64(const struct trn_ckpt *c, const char *key, double *out)
{
    const char *v = trn_ckpt_get(c, key);
    if (!v) return -TRN_CKPT_EBAD;
    char *end = NULL;
    const double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x)) return -TRN_CKPT_EBAD;
    *out = x;
    return 0;
}

int64_t trn_ckpt_record_index(const struct trn_ckpt *c, int k)
{
    return c->rec[k];
}

int trn_ckpt_read(const struct trn_ckpt *c, int k, void *dst, size_t bytes, char *err, size_t cap)
{
    struct ffr_record_info ri;
    int rc = ffr_reader_info(c->r, (uint64_t)c->rec[k], &ri);
    if (rc == 0 && ri.raw_len != bytes) rc = -TRN_CKPT_EBAD;
    if (rc == 0 && bytes > 0) {
        const int64_t got = ffr_reader_read(c->r, NULL, (uint64_t)c->rec[k], dst, bytes);
        rc = got < 0 ? (int)got : got == (int64_t)bytes ? 0 : -TRN_CKPT_EBAD;
    }
    if (rc < 0)
        trn_seterr(err, cap, "%s: record '%s': %s%s", c->path, record_names[k],
                   rc == -TRN_CKPT_EBAD ? "size does not fit the model" : ffr_strerror(rc),
                   rc == -TRN_CKPT_EBAD ? " (a checkpoint of another model?)" : "");
    return rc;
}

char *trn_ckpt_text(const struct trn_ckpt *c, int k, size_t *len, int *rc)
{
    struct ffr_record_info ri;
    *rc = ffr_reader_info(c->r, (uint64_t)c->rec[k], &ri);
    if (*rc == 0 && ri.raw_len > TRN_CKPT_MAX_TEXT) *rc = -FFR_ETOOBIG;
    char *s = *rc == 0 ? malloc((size_t)ri.raw_len + 1) : NULL;
    if (*rc == 0 && !s) *rc = -ENOMEM;
    if (!s) return NULL;
    const int64_t got = ffr_reader_read(c->r, NULL, (uint64_t)c->rec[k], s, ri.raw_len);
    if (got != (int64_t)ri.raw_len) {
        *rc = got < 0 ? (int)got : -FFR_ECORRUPT;
        free(s);
        return NULL;
    }
    s[got] = '\0';
    *len = (size_t)got;
    return s;
}

int trn_ckpt_load_ema(const struct trn_ckpt *c, struct trn_model *m, bool counts, char *err,
                      size_t cap)
{
    const struct trn_model_info *I = trn_model_info(m);
    int rc = trn_ckpt_read(c, TRN_CKPT_EMA_PARAM, trn_model_arena(m, TRN_ARENA_PARAM),
                           I->arena_len[TRN_ARENA_PARAM] * sizeof(float), err, cap);
    if (!rc)
        rc = trn_ckpt_read(c, TRN_CKPT_EMA_BUFFER, trn_model_arena(m, TRN_ARENA_BUFFER),
                           I->arena_len[TRN_ARENA_BUFFER] * sizeof(float), err, cap);
    if (!rc && counts)
        rc = trn_ckpt_read(c, TRN_CKPT_MODEL_COUNT, trn_model_arena(m, TRN_ARENA_COUNT),
                           I->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t), err, cap);
    return rc;
}
