/*
 * The YOLOv5 model definition: ultralytics v7.0 parse_model over the values model_yaml.c read,
 * then the state-dict layout, optimizer groups, initial weights, summary and activation plan.
 * Citations (models/yolo.py, models/common.py, utils/torch_utils.py at v7.0) are for the rules
 * only; see docs/recipe.md S2.
 */
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "priv/model_internal.h"
#include "sampler.h"
#include "errors.h"

/* ctr[3] of the init stream: "modl", so no sampler stream (stream << 24 | block) meets it. */
#define INIT_STREAM_TAG 0x6d6f646cu

/* Largest model file we read. */
#define MODEL_FILE_MAX (1u << 20)

struct trn_model {
    struct trn_model_info info;
    struct trn_layer *layers; /* info.n_layers */
    struct trn_conv *convs;   /* info.n_convs */
    int conv_cap;
    struct trn_tensor *tensors; /* info.n_tensors */
    int tensor_cap;
    int *group[3]; /* tensor indices per optimizer group */
    int n_group[3];
    void *arena[TRN_ARENA_N]; /* owned */
    bool nc_overridden;       /* opts->nc changed the yaml's nc (summary prints it) */
    int bn_layers;            /* BatchNorm2d modules (for the fused count) */
};

static const char *const module_names[] = {
    [TRN_MOD_CONV] = "models.common.Conv",
    [TRN_MOD_BOTTLENECK] = "models.common.Bottleneck",
    [TRN_MOD_C3] = "models.common.C3",
    [TRN_MOD_SPPF] = "models.common.SPPF",
    [TRN_MOD_UPSAMPLE] = "torch.nn.modules.upsampling.Upsample",
    [TRN_MOD_CONCAT] = "models.common.Concat",
    [TRN_MOD_DETECT] = "models.yolo.Detect",
};

void trn_model_opts_default(struct trn_model_opts *o)
{
    memset(o, 0, sizeof *o);
}

/* ---------------------------------------------------------------------------------------- */
/* Building blocks: tensors and convs                                                       */

static int add_tensor(struct trn_model *m, const char *prefix, const char *suffix,
                      enum trn_tensor_role role, int ndim, const int *shape, int layer, int conv)
{
    if (m->info.n_tensors == m->tensor_cap) {
        const int cap = m->tensor_cap ? m->tensor_cap * 2 : 256;
        struct trn_tensor *t = realloc(m->tensors, (size_t)cap * sizeof *t);
        if (!t) return -ENOMEM;
        m->tensors = t;
        m->tensor_cap = cap;
    }
    struct trn_tensor *t = &m->tensors[m->info.n_tensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s.%s", prefix, suffix);
    t->role = role;
    t->arena = role == TRN_T_BN_COUNT ? TRN_ARENA_COUNT
               : (role == TRN_T_BN_MEAN || role == TRN_T_BN_VAR || role == TRN_T_ANCHORS)
                   ? TRN_ARENA_BUFFER
                   : TRN_ARENA_PARAM;
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < 4; d++) {
        t->shape[d] = d < ndim ? shape[d] : 1;
        if (d < ndim) t->numel *= (size_t)shape[d];
    }
    t->layer = layer;
    t->conv = conv;
    return m->info.n_tensors++;
}

/* A Conv (bn) or a Detect output conv (!bn) named `name`; returns its index or -ENOMEM. */
static int add_conv(struct trn_model *m, int layer, const char *name, int c1, int c2, int k, int s,
                    int p, bool bn)
{
    if (m->info.n_convs == m->conv_cap) {
        const int cap = m->conv_cap ? m->conv_cap * 2 : 64;
        struct trn_conv *c = realloc(m->convs, (size_t)cap * sizeof *c);
        if (!c) return -ENOMEM;
        m->convs = c;
        m->conv_cap = cap;
    }
    const int ci = m->info.n_convs;
    struct trn_conv *c = &m->convs[ci];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->layer = layer;
    c->c1 = c1;
    c->c2 = c2;
    c->k = k;
    c->s = s;
    c->p = p;
    c->bn = bn;
    c->bias = c->bn_weight = c->bn_bias = c->bn_mean = c->bn_var = c->bn_count = -1;
    const int wshape[4] = { c2, c1, k, k };
    char pre[64];
    int t;
    if (bn) {
        snprintf(pre, sizeof pre, "%s.conv", name);
        if ((t = add_tensor(m, pre, "weight", TRN_T_CONV_WEIGHT, 4, wshape, layer, ci)) < 0)
            return t;
        m->convs[ci].weight = t;
        snprintf(pre, sizeof pre, "%s.bn", name);
        static const struct {
            const char *suffix;
            enum trn_tensor_role role;
        } bnt[] = { { "weight", TRN_T_BN_WEIGHT },
                    { "bias", TRN_T_BN_BIAS },
                    { "running_mean", TRN_T_BN_MEAN },
                    { "running_var", TRN_T_BN_VAR },
                    { "num_batches_tracked", TRN_T_BN_COUNT } };
        int idx[5];
        for (int i = 0; i < 5; i++) {
            const int nd = bnt[i].role == TRN_T_BN_COUNT ? 0 : 1;
            if ((idx[i] = add_tensor(m, pre, bnt[i].suffix, bnt[i].role, nd, &c2, layer, ci)) < 0)
                return idx[i];
        }
        c = &m->convs[ci];
        c->bn_weight = idx[0];
        c->bn_bias = idx[1];
        c->bn_mean = idx[2];
        c->bn_var = idx[3];
        c->bn_count = idx[4];
        m->info.n_bn_channels += c2;
        m->bn_layers++;
    } else {
        if ((t = add_tensor(m, name, "weight", TRN_T_DETECT_WEIGHT, 4, wshape, layer, ci)) < 0)
            return t;
        m->convs[ci].weight = t;
        if ((t = add_tensor(m, name, "bias", TRN_T_DETECT_BIAS, 1, &c2, layer, ci)) < 0) return t;
        m->convs[ci].bias = t;
    }
    return m->info.n_convs++;
}

/* ---------------------------------------------------------------------------------------- */
/* parse_model                                                                              */

struct build {
    struct trn_model *m;
    const char *file;
    char *err;
    size_t cap;
    int nc;        /* d['nc'] after the override: what the name "nc" evaluates to */
    int no;        /* parse_model's no = na * (nc + 5): a c2 equal to it is not scaled */
    double gd, gw; /* depth and width multiples */
    const struct trn_val *anchors; /* d['anchors'] */
    int *chs;                      /* output channels of each row so far */
    int ch_in;                     /* image channels */
    /* the row being built */
    int i;
    size_t line;
    const char *mod; /* module as written */
};

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int
fail_row(const struct build *b, int rc, size_t line, const char *fmt, ...)
{
    if (b->err && b->cap) {
        char msg[384];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(b->err, b->cap, "%s:%zu: layer %d: %s", b->file, line ? line : b->line, b->i, msg);
    }
    return rc;
}

static bool is_number(const struct trn_val *v)
{
    return v->type == TRN_VAL_INT || v->type == TRN_VAL_FLOAT;
}

static double num(const struct trn_val *v)
{
    return v->type == TRN_VAL_INT ? (double)v->i : v->f;
}

/* Python's eval() of a string argument, for the names parse_model's locals give it here. */
static int eval_arg(const struct build *b, const struct trn_val *src, struct trn_val *dst)
{
    if (src->type != TRN_VAL_STR) return trn_val_copy(dst, src);
    const char *s = src->s;
    memset(dst, 0, sizeof *dst);
    dst->line = src->line;
    if (strcmp(s, "nc") == 0) {
        dst->type = TRN_VAL_INT;
        dst->i = b->nc;
        return 0;
    }
    if (strcmp(s, "anchors") == 0) {
        const int rc = trn_val_copy(dst, b->anchors);
        dst->line = src->line;
        return rc;
    }
    if (strcmp(s, "None") == 0) {
        dst->type = TRN_VAL_NONE;
        return 0;
    }
    if (strcmp(s, "True") == 0 || strcmp(s, "False") == 0) {
        dst->type = TRN_VAL_BOOL;
        dst->i = s[0] == 'T';
        return 0;
    }
    /* A Python numeric literal: decimal int without leading zeros, or a float. */
    char *end;
    errno = 0;
    const long long iv = strtoll(s, &end, 10);
    if (*s && !*end && errno == 0 && !(s[0] == '0' && s[1]) &&
        !((s[0] == '-' || s[0] == '+') && s[1] == '0' && s[2])) {
        dst->type = TRN_VAL_INT;
        dst->i = iv;
        return 0;
    }
    const double fv = strtod(s, &end);
    if (*s && !*end && strpbrk(s, "0123456789") && !strpbrk(s, "xXpP") && !strchr(s, ' ')) {
        dst->type = TRN_VAL_FLOAT;
        dst->f = fv;
        return 0;
    }
    return trn_val_copy(dst, src); /* NameError in parse_model: stays a string */
}

/* Argument i, or NULL if absent. */
static const struct trn_val *arg(const struct trn_val *args, size_t i)
{
    return i < args->n ? &args->items[i] : NULL;
}

static int want_int(const struct build *b, const struct trn_val *v, const char *what, long lo,
                    long hi, int *out)
{
    if (!v || v->type != TRN_VAL_INT || v->i < lo || v->i > hi)
        return fail_row(b, -TRN_MODEL_ESCHEMA, v ? v->line : 0,
                        "%s: %s must be an integer in %ld..%ld", b->mod, what, lo, hi);
    *out = (int)v->i;
    return 0;
}

/* An argument that must keep its default: absent, or equal to `want` (an int or a bool). */
static int want_default(const struct build *b, const struct trn_val *v, const char *what,
                        enum trn_val_type type, int64_t want)
{
    if (!v) return 0;
    if (v->type == type && v->i == want) return 0;
    return fail_row(b, -TRN_MODEL_EUNSUPPORTED, v->line, "%s: %s other than %s is not supported",
                    b->mod, what,
                    type == TRN_VAL_BOOL ? (want ? "True" : "False") : (want == 1 ? "1" : "0"));
}

/* Python truthiness of a shortcut argument (bool or int). */
static int want_bool(const struct build *b, const struct trn_val *v, bool dflt, bool *out)
{
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (v->type != TRN_VAL_BOOL && v->type != TRN_VAL_INT)
        return fail_row(b, -TRN_MODEL_ESCHEMA, v->line, "%s: shortcut must be True or False",
                        b->mod);
    *out = v->i != 0;
    return 0;
}

/* c2 from args[0]: make_divisible(c2 * gw, 8) = ceil(c2 * gw / 8) * 8 unless c2 == no. */
static int out_channels(const struct build *b, const struct trn_val *args, int *c2)
{
    int raw = 0;
    const int rc = want_int(b, arg(args, 0), "output channels", 1, TRN_MODEL_MAX_CHANNELS, &raw);
    if (rc) return rc;
    if (raw != b->no) {
        const double x = ceil((double)raw * b->gw / 8.0) * 8.0;
        if (!(x >= 1 && x <= TRN_MODEL_MAX_CHANNELS))
            return fail_row(b, -TRN_MODEL_ESCHEMA, args->items[0].line,
                            "%s: %d channels x width_multiple is out of range", b->mod, raw);
        raw = (int)x;
    }
    *c2 = raw;
    return 0;
}

/* c_ = int(c2 * e) for e from args[idx] (default 0.5). */
static int hidden_channels(const struct build *b, const struct trn_val *v, int c2, int *c_)
{
    double e = 0.5;
    if (v) {
        if (!is_number(v) || !(num(v) > 0) || num(v) > 64)
            return fail_row(b, -TRN_MODEL_ESCHEMA, v->line, "%s: e must be a number in (0, 64]",
                            b->mod);
        e = num(v);
    }
    const double x = trunc((double)c2 * e);
    if (!(x >= 1 && x <= TRN_MODEL_MAX_CHANNELS))
        return fail_row(b, -TRN_MODEL_ESCHEMA, v ? v->line : 0,
                        "%s: hidden channels int(%d * %g) out of range", b->mod, c2, e);
    *c_ = (int)x;
    return 0;
}

/* A printed-argument list: [ints..., then copies of rest[from..]]. */
static int make_args(struct trn_val *out, const int64_t *ints, size_t n_ints,
                     const struct trn_val *rest, size_t from)
{
    memset(out, 0, sizeof *out);
    out->type = TRN_VAL_LIST;
    const size_t n_rest = rest && rest->n > from ? rest->n - from : 0;
    const size_t n = n_ints + n_rest;
    if (!n) return 0;
    out->items = calloc(n, sizeof *out->items);
    if (!out->items) return -ENOMEM;
    for (size_t i = 0; i < n_ints; i++) {
        out->items[i].type = TRN_VAL_INT;
        out->items[i].i = ints[i];
        out->n = i + 1;
    }
    for (size_t i = 0; i < n_rest; i++) {
        out->n = n_ints + i + 1;
        if (trn_val_copy(&out->items[n_ints + i], &rest->items[from + i])) return -ENOMEM;
    }
    return 0;
}

static int set_args_text(struct trn_layer *L, const struct trn_val *printed)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (trn_val_repr(printed, &buf, &len, &cap)) {
        free(buf);
        return -ENOMEM;
    }
    L->args_text = buf;
    return 0;
}

/* One Conv module (conv + BN + SiLU) named prefix. */
static int conv_bn(struct build *b, const char *prefix, int c1, int c2, int k, int s, int p)
{
    const int rc = add_conv(b->m, b->i, prefix, c1, c2, k, s, p, true);
    return rc < 0 ? rc : 0;
}

/* Bottleneck(c1, c2, shortcut, e) named prefix: cv1 1x1 c1->c_, cv2 3x3 c_->c2. */
static int bottleneck(struct build *b, const char *prefix, int c1, int c2, int c_)
{
    char name[48];
    snprintf(name, sizeof name, "%s.cv1", prefix);
    int rc = conv_bn(b, name, c1, c_, 1, 1, 0);
    snprintf(name, sizeof name, "%s.cv2", prefix);
    return rc ? rc : conv_bn(b, name, c_, c2, 3, 1, 1);
}

static int build_conv(struct build *b, struct trn_layer *L, const struct trn_val *args,
                      struct trn_val *printed)
{
    int c2 = 0, k = 1, s = 1, p, rc;
    if ((rc = out_channels(b, args, &c2))) return rc;
    if (arg(args, 1) && (rc = want_int(b, arg(args, 1), "kernel", 1, 31, &k))) return rc;
    if (arg(args, 2) && (rc = want_int(b, arg(args, 2), "stride", 1, 32, &s))) return rc;
    p = k / 2; /* autopad */
    const struct trn_val *pv = arg(args, 3);
    if (pv && pv->type != TRN_VAL_NONE && (rc = want_int(b, pv, "padding", 0, k, &p))) return rc;
    if ((rc = want_default(b, arg(args, 4), "groups", TRN_VAL_INT, 1)) ||
        (rc = want_default(b, arg(args, 5), "dilation", TRN_VAL_INT, 1)) ||
        (rc = want_default(b, arg(args, 6), "act", TRN_VAL_BOOL, 1)))
        return rc;
    if (args->n > 7)
        return fail_row(b, -TRN_MODEL_ESCHEMA, args->line,
                        "%s: at most 7 arguments [c2, k, s, p, g, d, act]", b->mod);
    if (L->n > 1 && L->c_in != c2)
        return fail_row(b, -TRN_MODEL_ESCHEMA, 0,
                        "%s repeated %d times needs equal input and output channels (%d, %d)",
                        b->mod, L->n, L->c_in, c2);
    L->c_out = c2;
    L->k = k;
    L->s = s;
    L->p = p;
    for (int j = 0; j < L->n; j++) {
        char name[48];
        if (L->n > 1)
            snprintf(name, sizeof name, "model.%d.%d", b->i, j);
        else
            snprintf(name, sizeof name, "model.%d", b->i);
        if ((rc = conv_bn(b, name, L->c_in, c2, k, s, p))) return rc;
    }
    const int64_t ints[2] = { L->c_in, c2 };
    return make_args(printed, ints, 2, args, 1);
}

/* Bottleneck and C3 share their arguments: [c2, shortcut=True, g=1, e=0.5]. */
static int build_csp(struct build *b, struct trn_layer *L, const struct trn_val *args,
                     struct trn_val *printed)
{
    int c2 = 0, c_ = 0, rc;
    bool shortcut = true;
    if ((rc = out_channels(b, args, &c2)) || (rc = want_bool(b, arg(args, 1), true, &shortcut)) ||
        (rc = want_default(b, arg(args, 2), "groups", TRN_VAL_INT, 1)) ||
        (rc = hidden_channels(b, arg(args, 3), c2, &c_)))
        return rc;
    if (args->n > 4)
        return fail_row(b, -TRN_MODEL_ESCHEMA, args->line,
                        "%s: at most 4 arguments [c2, shortcut, g, e]", b->mod);
    L->c_out = c2;
    L->hidden = c_;
    char name[48];
    if (L->type == TRN_MOD_C3) {
        /* C3(c1, c2, n, shortcut, g, e): bottlenecks are Bottleneck(c_, c_, shortcut, e=1.0). */
        L->shortcut = shortcut;
        snprintf(name, sizeof name, "model.%d.cv1", b->i);
        if ((rc = conv_bn(b, name, L->c_in, c_, 1, 1, 0))) return rc;
        snprintf(name, sizeof name, "model.%d.cv2", b->i);
        if ((rc = conv_bn(b, name, L->c_in, c_, 1, 1, 0))) return rc;
        snprintf(name, sizeof name, "model.%d.cv3", b->i);
        if ((rc = conv_bn(b, name, 2 * c_, c2, 1, 1, 0))) return rc;
        for (int j = 0; j < L->n; j++) {
            snprintf(name, sizeof name, "model.%d.m.%d", b->i, j);
            if ((rc = bottleneck(b, name, c_, c_, c_))) return rc;
        }
        const int64_t ints[3] = { L->c_in, c2, L->n };
        return make_args(printed, ints, 3, args, 1);
    }
    if (L->n > 1 && L->c_in != c2)
        return fail_row(b, -TRN_MODEL_ESCHEMA, 0,
                        "%s repeated %d times needs equal input and output channels (%d, %d)",
                        b->mod, L->n, L->c_in, c2);
    L->shortcut = shortcut && L->c_in == c2;
    for (int j = 0; j < L->n; j++) {
        if (L->n > 1)
            snprintf(name, sizeof name, "model.%d.%d", b->i, j);
        else
            snprintf(name, sizeof name, "model.%d", b->i);
        if ((rc = bottleneck(b, name, L->c_in, c2, c_))) return rc;
    }
    const int64_t ints[2] = { L->c_in, c2 };
    return make_args(printed, ints, 2, args, 1);
}

static int build_sppf(struct build *b, struct trn_layer *L, const struct trn_val *args,
                      struct trn_val *printed)
{
    int c2 = 0, k = 5, rc;
    if ((rc = out_channels(b, args, &c2))) return rc;
    if (arg(args, 1) && (rc = want_int(b, arg(args, 1), "pool kernel", 1, 31, &k))) return rc;
    if (k % 2 == 0)
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, args->items[1].line,
                        "%s: an even pool kernel changes the size; use an odd k", b->mod);
    if (args->n > 2)
        return fail_row(b, -TRN_MODEL_ESCHEMA, args->line, "%s: at most 2 arguments [c2, k]",
                        b->mod);
    const int c_ = L->c_in / 2;
    if (c_ < 1)
        return fail_row(b, -TRN_MODEL_ESCHEMA, 0, "%s: needs at least 2 input channels", b->mod);
    L->c_out = c2;
    L->hidden = c_;
    L->k = k;
    char name[48];
    snprintf(name, sizeof name, "model.%d.cv1", b->i);
    if ((rc = conv_bn(b, name, L->c_in, c_, 1, 1, 0))) return rc;
    snprintf(name, sizeof name, "model.%d.cv2", b->i);
    if ((rc = conv_bn(b, name, 4 * c_, c2, 1, 1, 0))) return rc;
    const int64_t ints[2] = { L->c_in, c2 };
    return make_args(printed, ints, 2, args, 1);
}

static int build_upsample(struct build *b, struct trn_layer *L, const struct trn_val *args,
                          struct trn_val *printed)
{
    /* nn.Upsample(size=None, scale_factor=None, mode='nearest', align_corners=None) */
    const struct trn_val *size = arg(args, 0), *sf = arg(args, 1), *mode = arg(args, 2),
                         *ac = arg(args, 3);
    if (size && size->type != TRN_VAL_NONE)
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, size->line,
                        "%s: a fixed output size is not supported; use [None, 2, 'nearest']",
                        b->mod);
    const bool sf_ok =
        sf && ((sf->type == TRN_VAL_INT && sf->i >= 1 && sf->i <= 16) ||
               (sf->type == TRN_VAL_FLOAT && sf->f >= 1 && sf->f <= 16 && sf->f == floor(sf->f)));
    if (!sf_ok)
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, sf ? sf->line : 0,
                        "%s: scale_factor must be an integer 1..16", b->mod);
    if (mode && !(mode->type == TRN_VAL_STR && strcmp(mode->s, "nearest") == 0))
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, mode->line,
                        "%s: only mode 'nearest' is supported", b->mod);
    if ((ac && ac->type != TRN_VAL_NONE) || args->n > 4)
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, args->line,
                        "%s: only [None, scale, 'nearest'] is supported", b->mod);
    L->scale = (int)num(sf);
    L->c_out = L->c_in;
    return trn_val_copy(printed, args);
}

static int build_concat(struct build *b, struct trn_layer *L, const struct trn_val *args,
                        struct trn_val *printed)
{
    const struct trn_val *d = arg(args, 0);
    if ((d && !(d->type == TRN_VAL_INT && d->i == 1)) || args->n > 1)
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, d ? d->line : args->line,
                        "%s: only dimension 1 (channels) is supported", b->mod);
    int sum = 0;
    for (int j = 0; j < L->n_from; j++)
        sum += L->from[j] < 0 ? b->ch_in : b->chs[L->from[j]];
    if (sum > TRN_MODEL_MAX_CHANNELS)
        return fail_row(b, -TRN_MODEL_ESCHEMA, 0, "%s: %d channels is too many", b->mod, sum);
    L->c_in = sum;
    L->c_out = sum;
    return trn_val_copy(printed, args);
}

/* Rows of w,h pixel pairs: nl rows of 2*na numbers each; or an integer na, which parse_model
 * turns into nl rows of the placeholders 0, 1, ..., 2na - 1 for AutoAnchor to replace
 * (`[list(range(args[1] * 2))] * len(f)`). levels: the Detect's inputs (nl for an integer),
 * 0 where only na is wanted. */
static int read_anchors(const struct build *b, const struct trn_val *a, int levels, int *nl,
                        int *na, float px[TRN_MODEL_MAX_LEVELS][TRN_MODEL_MAX_ANCHORS][2])
{
    if (a->type == TRN_VAL_INT) {
        if (a->i < 1 || a->i > TRN_MODEL_MAX_ANCHORS)
            return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA,
                            "%s:%zu: anchors: %lld anchors per level (1..%d)", b->file, a->line,
                            (long long)a->i, TRN_MODEL_MAX_ANCHORS);
        *nl = levels > 0 && levels <= TRN_MODEL_MAX_LEVELS ? levels : 1;
        *na = (int)a->i;
        for (int r = 0; r < *nl; r++)
            for (int j = 0; j < 2 * *na; j++)
                px[r][j / 2][j % 2] = (float)j;
        return 0;
    }
    if (a->type != TRN_VAL_LIST || a->n < 1 || a->n > TRN_MODEL_MAX_LEVELS)
        return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA,
                        "%s:%zu: anchors must be 1..%d rows of w,h pixel pairs", b->file, a->line,
                        TRN_MODEL_MAX_LEVELS);
    const size_t w = a->items[0].n;
    for (size_t r = 0; r < a->n; r++) {
        const struct trn_val *row = &a->items[r];
        if (row->type != TRN_VAL_LIST || row->n != w || w < 2 || w % 2 ||
            w > 2 * TRN_MODEL_MAX_ANCHORS)
            return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA,
                            "%s:%zu: anchors: every row must hold the same number (2..%d, "
                            "even) of w,h values",
                            b->file, row->line, 2 * TRN_MODEL_MAX_ANCHORS);
        for (size_t j = 0; j < w; j++) {
            const struct trn_val *x = &row->items[j];
            if (!is_number(x) || !(num(x) > 0) || num(x) > 1e6)
                return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA,
                                "%s:%zu: anchors: values must be positive numbers (pixels)",
                                b->file, x->line);
            /* torch.tensor(anchors).float(): to float32 */
            px[r][j / 2][j % 2] = (float)num(x);
        }
    }
    *nl = (int)a->n;
    *na = (int)(w / 2);
    return 0;
}

static int build_detect(struct build *b, struct trn_layer *L, const struct trn_val *args,
                        struct trn_val *printed)
{
    struct trn_model_info *I = &b->m->info;
    int nc = 0, rc;
    if ((rc = want_int(b, arg(args, 0), "nc", 1, 100000, &nc))) return rc;
    const struct trn_val *a = arg(args, 1);
    if (!a)
        return fail_row(b, -TRN_MODEL_ESCHEMA, args->line, "%s: arguments must be [nc, anchors]",
                        b->mod);
    if (args->n > 2)
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, args->line,
                        "%s: only the arguments [nc, anchors] are supported", b->mod);
    if ((rc = read_anchors(b, a, L->n_from, &I->nl, &I->na, I->anchors_px))) return rc;
    if (I->nl != L->n_from)
        return fail_row(b, -TRN_MODEL_ESCHEMA, 0, "%s: %d anchor rows for %d inputs", b->mod, I->nl,
                        L->n_from);
    I->nc = nc;
    I->no = nc + 5;
    L->c_out = I->na * I->no;
    L->c_in = L->from[0] < 0 ? b->ch_in : b->chs[L->from[0]];
    /* register_buffer('anchors'): its entry precedes the convs in the state dict */
    const int ashape[3] = { I->nl, I->na, 2 };
    char pre[32];
    snprintf(pre, sizeof pre, "model.%d", b->i);
    if ((rc = add_tensor(b->m, pre, "anchors", TRN_T_ANCHORS, 3, ashape, b->i, -1)) < 0) return rc;
    int64_t chs[TRN_MODEL_MAX_FROM];
    for (int l = 0; l < L->n_from; l++) {
        chs[l] = L->from[l] < 0 ? b->ch_in : b->chs[L->from[l]];
        char name[48];
        snprintf(name, sizeof name, "model.%d.m.%d", b->i, l);
        if ((rc = add_conv(b->m, b->i, name, (int)chs[l], L->c_out, 1, 1, 0, false)) < 0) return rc;
    }
    /* printed: [nc, anchors, [ch of each input]] */
    if ((rc = make_args(printed, NULL, 0, args, 0))) return rc;
    struct trn_val *grown = realloc(printed->items, (printed->n + 1) * sizeof *grown);
    if (!grown) return -ENOMEM;
    printed->items = grown;
    struct trn_val *chl = &printed->items[printed->n++];
    return make_args(chl, chs, (size_t)L->n_from, NULL, 0);
}

static int module_type(const char *s, enum trn_module *t)
{
    static const struct {
        const char *name;
        enum trn_module t;
    } known[] = {
        { "Conv", TRN_MOD_CONV },
        { "Bottleneck", TRN_MOD_BOTTLENECK },
        { "C3", TRN_MOD_C3 },
        { "SPPF", TRN_MOD_SPPF },
        { "nn.Upsample", TRN_MOD_UPSAMPLE },
        { "Upsample", TRN_MOD_UPSAMPLE },
        { "torch.nn.Upsample", TRN_MOD_UPSAMPLE },
        { "Concat", TRN_MOD_CONCAT },
        { "Detect", TRN_MOD_DETECT },
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(s, known[i].name) == 0) {
            *t = known[i].t;
            return 0;
        }
    return -1;
}

/* from: -1, -k, an index, or a list of those; resolved to absolute indices (-1 = image). */
static int resolve_from(struct build *b, struct trn_layer *L, const struct trn_val *f,
                        bool want_list)
{
    const struct trn_val *items = f;
    size_t n = 1;
    if (f->type == TRN_VAL_LIST) {
        items = f->items;
        n = f->n;
    }
    if ((f->type == TRN_VAL_LIST) != want_list)
        return fail_row(b, -TRN_MODEL_ESCHEMA, f->line,
                        want_list ? "%s: from must be a list of layers, e.g. [-1, 6]"
                                  : "%s: from must be one layer (-1 or an index), not a list",
                        b->mod);
    if (n < 1 || n > TRN_MODEL_MAX_FROM)
        return fail_row(b, -TRN_MODEL_ESCHEMA, f->line, "%s: from must list 1..%d layers", b->mod,
                        TRN_MODEL_MAX_FROM);
    for (size_t j = 0; j < n; j++) {
        const struct trn_val *x = &items[j];
        if (x->type != TRN_VAL_INT)
            return fail_row(b, -TRN_MODEL_ESCHEMA, x->line, "%s: from must hold integers", b->mod);
        int64_t a;
        if (x->i == -1)
            a = b->i - 1; /* layer 0: -1, the image */
        else if (x->i < 0)
            a = b->i + x->i;
        else
            a = x->i;
        if (x->i != -1 && (a < 0 || a >= b->i))
            return fail_row(b, -TRN_MODEL_ESCHEMA, x->line, "%s: from %lld is out of range (%s)",
                            b->mod, (long long)x->i,
                            b->i ? "it must name an earlier layer" : "layer 0 can only take -1");
        L->from[j] = (int)a;
    }
    L->n_from = (int)n;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (trn_val_repr(f, &buf, &len, &cap)) {
        free(buf);
        return -ENOMEM;
    }
    snprintf(L->from_text, sizeof L->from_text, "%s", buf);
    free(buf);
    return 0;
}

static int build_row(struct build *b, const struct trn_spec_row *row)
{
    struct trn_model *m = b->m;
    struct trn_layer *L = &m->layers[b->i];
    memset(L, 0, sizeof *L);
    L->index = b->i;
    L->line = row->line;
    b->line = row->line;
    b->mod = "?";
    if (row->module.type != TRN_VAL_STR)
        return fail_row(b, -TRN_MODEL_ESCHEMA, row->module.line, "module must be a name, e.g. C3");
    b->mod = row->module.s;
    if (module_type(row->module.s, &L->type))
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, row->module.line, "unknown module '%s'",
                        row->module.s);
    L->module_name = module_names[L->type];
    int rc;
    const bool list_from = L->type == TRN_MOD_CONCAT || L->type == TRN_MOD_DETECT;
    if ((rc = resolve_from(b, L, &row->from, list_from))) return rc;
    L->c_in = L->from[0] < 0 ? b->ch_in : b->chs[L->from[0]];

    /* n = n_ = max(round(n * gd), 1) if n > 1 else n  (round: half to even, like rint) */
    const struct trn_val *nv = &row->number;
    if (nv->type != TRN_VAL_INT || nv->i < 1 || nv->i > 1000000)
        return fail_row(b, -TRN_MODEL_ESCHEMA, nv->line, "%s: number must be an integer >= 1",
                        b->mod);
    double n = (double)nv->i;
    if (nv->i > 1) n = fmax(rint(n * b->gd), 1.0);
    if (n > TRN_MODEL_MAX_REPEATS)
        return fail_row(b, -TRN_MODEL_ESCHEMA, nv->line, "%s: %g repeats (at most %d)", b->mod, n,
                        TRN_MODEL_MAX_REPEATS);
    L->n = (int)n;
    if (L->n > 1 && L->type != TRN_MOD_CONV && L->type != TRN_MOD_BOTTLENECK &&
        L->type != TRN_MOD_C3)
        return fail_row(b, -TRN_MODEL_EUNSUPPORTED, nv->line,
                        "%s: number > 1 is supported for Conv, Bottleneck and C3 only", b->mod);

    if (row->args.type != TRN_VAL_LIST)
        return fail_row(b, -TRN_MODEL_ESCHEMA, row->args.line, "%s: args must be a list", b->mod);
    /* args[j] = eval(a) if isinstance(a, str) else a */
    struct trn_val args = { .type = TRN_VAL_LIST, .line = row->args.line };
    struct trn_val printed = { .type = TRN_VAL_LIST };
    if (row->args.n) {
        args.items = calloc(row->args.n, sizeof *args.items);
        if (!args.items) return -ENOMEM;
        for (size_t j = 0; j < row->args.n; j++) {
            args.n = j + 1;
            if ((rc = eval_arg(b, &row->args.items[j], &args.items[j]))) goto out;
        }
    }
    L->conv0 = m->info.n_convs;
    switch (L->type) {
    case TRN_MOD_CONV:
        rc = build_conv(b, L, &args, &printed);
        break;
    case TRN_MOD_BOTTLENECK:
    case TRN_MOD_C3:
        rc = build_csp(b, L, &args, &printed);
        break;
    case TRN_MOD_SPPF:
        rc = build_sppf(b, L, &args, &printed);
        break;
    case TRN_MOD_UPSAMPLE:
        rc = build_upsample(b, L, &args, &printed);
        break;
    case TRN_MOD_CONCAT:
        rc = build_concat(b, L, &args, &printed);
        break;
    case TRN_MOD_DETECT:
        rc = build_detect(b, L, &args, &printed);
        break;
    }
    if (rc) goto out;
    L->n_conv = m->info.n_convs - L->conv0;
    rc = set_args_text(L, &printed);
out:
    trn_val_free(&args);
    trn_val_free(&printed);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Shapes                                                                                   */

static int conv_out(int in, int k, int s, int p)
{
    const int x = in + 2 * p - k;
    return x < 0 ? 0 : x / s + 1;
}

/* Spatial size of every row's output (and of each conv's output) for an h x w image. Detect's
 * row size is level 0's. Returns 0 or -TRN_MODEL_ESHAPE with err naming the row. */
static int propagate(const struct trn_model *m, const char *file, int h, int w, int *lh, int *lw,
                     int *cvh, int *cvw, char *err, size_t cap)
{
    for (int i = 0; i < m->info.n_layers; i++) {
        const struct trn_layer *L = &m->layers[i];
        int H = L->from[0] < 0 ? h : lh[L->from[0]];
        int W = L->from[0] < 0 ? w : lw[L->from[0]];
        for (int j = 0; j < L->n_conv; j++) {
            const struct trn_conv *c = &m->convs[L->conv0 + j];
            int ih = H, iw = W;
            if (L->type == TRN_MOD_DETECT) {
                ih = L->from[j] < 0 ? h : lh[L->from[j]];
                iw = L->from[j] < 0 ? w : lw[L->from[j]];
            }
            cvh[L->conv0 + j] = conv_out(ih, c->k, c->s, c->p);
            cvw[L->conv0 + j] = conv_out(iw, c->k, c->s, c->p);
            if (L->type == TRN_MOD_CONV) {
                H = cvh[L->conv0 + j];
                W = cvw[L->conv0 + j];
            }
        }
        switch (L->type) {
        case TRN_MOD_UPSAMPLE:
            if (H > (1 << 20) / L->scale || W > (1 << 20) / L->scale)
                return trn_fail(err, cap, -TRN_MODEL_ESHAPE,
                                "%s:%zu: layer %d: upsampled size too large for a %dx%d "
                                "image",
                                file, L->line, i, h, w);
            H *= L->scale;
            W *= L->scale;
            break;
        case TRN_MOD_CONCAT:
            for (int j = 1; j < L->n_from; j++) {
                const int h2 = L->from[j] < 0 ? h : lh[L->from[j]];
                const int w2 = L->from[j] < 0 ? w : lw[L->from[j]];
                if (h2 != H || w2 != W)
                    return trn_fail(err, cap, -TRN_MODEL_ESHAPE,
                                    "%s:%zu: layer %d: Concat inputs differ in size "
                                    "(%dx%d vs %dx%d) for a %dx%d image; use a multiple of "
                                    "the largest stride",
                                    file, L->line, i, H, W, h2, w2, h, w);
            }
            break;
        case TRN_MOD_DETECT:
            H = cvh[L->conv0];
            W = cvw[L->conv0];
            break;
        default:
            break; /* Bottleneck, C3, SPPF keep the size (stride 1, autopad, odd kernels) */
        }
        if (H < 1 || W < 1 || (int64_t)H * W > (int64_t)1 << 30)
            return trn_fail(err, cap, -TRN_MODEL_ESHAPE,
                            "%s:%zu: layer %d: output size %dx%d for a %dx%d image", file, L->line,
                            i, H, W, h, w);
        lh[i] = H;
        lw[i] = W;
    }
    return 0;
}

/* Strides from a 256x256 probe (DetectionModel.__init__: s / x.shape[-2]), check_anchor_order,
 * and every row's cumulative stride. */
static int probe_strides(struct trn_model *m, const char *file, char *err, size_t cap)
{
    struct trn_model_info *I = &m->info;
    const int s = 256;
    int *buf = calloc((size_t)(2 * I->n_layers + 2 * I->n_convs + 4), sizeof *buf);
    if (!buf) return -ENOMEM;
    int *lh = buf, *lw = buf + I->n_layers, *cvh = lw + I->n_layers, *cvw = cvh + I->n_convs;
    int rc = propagate(m, file, s, s, lh, lw, cvh, cvw, err, cap);
    if (rc) goto out;
    for (int i = 0; i < I->n_layers; i++)
        m->layers[i].stride = s % lh[i] == 0 ? s / lh[i] : 0;
    const struct trn_layer *D = &m->layers[I->detect];
    for (int l = 0; l < I->nl; l++) {
        const int ny = cvh[D->conv0 + l];
        if (s % ny) {
            rc = trn_fail(err, cap, -TRN_MODEL_EUNSUPPORTED,
                          "%s:%zu: layer %d: Detect input %d has a non-integer stride "
                          "(256 / %d)",
                          file, D->line, I->detect, l, ny);
            goto out;
        }
        I->stride[l] = s / ny;
    }
    /* check_anchor_order: mean anchor area per level must grow with the stride. */
    double a0 = 0, a1 = 0;
    for (int j = 0; j < I->na; j++) {
        a0 += (double)(I->anchors_px[0][j][0] * I->anchors_px[0][j][1]);
        a1 += (double)(I->anchors_px[I->nl - 1][j][0] * I->anchors_px[I->nl - 1][j][1]);
    }
    const double da = (a1 - a0) / I->na;
    const int ds = I->stride[I->nl - 1] - I->stride[0];
    if (da != 0 && (da > 0) != (ds > 0)) {
        for (int l = 0; l < I->nl / 2; l++)
            for (int j = 0; j < I->na; j++)
                for (int d = 0; d < 2; d++) {
                    const float t = I->anchors_px[l][j][d];
                    I->anchors_px[l][j][d] = I->anchors_px[I->nl - 1 - l][j][d];
                    I->anchors_px[I->nl - 1 - l][j][d] = t;
                }
        I->anchors_reversed = true;
    }
out:
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Layout, groups, counts                                                                   */

static int layout(struct trn_model *m)
{
    struct trn_model_info *I = &m->info;
    size_t len[TRN_ARENA_N] = { 0 };
    for (int k = 0; k < I->n_tensors; k++) {
        struct trn_tensor *t = &m->tensors[k];
        size_t *l = &len[t->arena];
        if (t->arena != TRN_ARENA_COUNT)
            *l = (*l + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
        t->offset = *l;
        *l += t->numel;
        if (t->arena == TRN_ARENA_PARAM) {
            I->n_params += (int64_t)t->numel;
            m->layers[t->layer].n_params += (int64_t)t->numel;
        }
        const int g = t->role == TRN_T_BN_BIAS || t->role == TRN_T_DETECT_BIAS         ? 0
                      : t->role == TRN_T_CONV_WEIGHT || t->role == TRN_T_DETECT_WEIGHT ? 1
                      : t->role == TRN_T_BN_WEIGHT                                     ? 2
                                                                                       : -1;
        if (g >= 0) {
            int *ng = realloc(m->group[g], (size_t)(m->n_group[g] + 1) * sizeof *ng);
            if (!ng) return -ENOMEM;
            m->group[g] = ng;
            ng[m->n_group[g]++] = k;
        }
    }
    /* A hostile yaml could ask for terabytes; the largest YOLOv5 has 87 M parameters. */
    if (len[TRN_ARENA_PARAM] > TRN_MODEL_MAX_PARAMS || len[TRN_ARENA_BUFFER] > TRN_MODEL_MAX_PARAMS)
        return -EFBIG;
    for (int a = 0; a < TRN_ARENA_N; a++) {
        len[a] = (len[a] + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
        I->arena_len[a] = len[a];
        const size_t esz = a == TRN_ARENA_COUNT ? sizeof(int64_t) : sizeof(float);
        m->arena[a] = aligned_alloc(64, len[a] ? len[a] * esz : 64);
        if (!m->arena[a]) return -ENOMEM;
        memset(m->arena[a], 0, len[a] * esz);
    }
    return 0;
}

/* len(list(model.modules())): every nn.Module once (Conv's SiLU is one shared instance). */
static int count_modules(const struct trn_model *m)
{
    int n = 2; /* DetectionModel, its nn.Sequential */
    bool any_conv = false;
    for (int i = 0; i < m->info.n_layers; i++) {
        const struct trn_layer *L = &m->layers[i];
        int per = 0;
        switch (L->type) {
        case TRN_MOD_CONV:
            per = 3; /* Conv, Conv2d, BatchNorm2d */
            break;
        case TRN_MOD_BOTTLENECK:
            per = 1 + 2 * 3;
            break;
        case TRN_MOD_C3:
            per = 1 + 3 * 3 + 1 + 7 * L->n; /* C3, cv1-3, m Sequential, bottlenecks */
            break;
        case TRN_MOD_SPPF:
            per = 1 + 2 * 3 + 1; /* SPPF, cv1, cv2, MaxPool2d */
            break;
        case TRN_MOD_UPSAMPLE:
        case TRN_MOD_CONCAT:
            per = 1;
            break;
        case TRN_MOD_DETECT:
            per = 2 + m->info.nl; /* Detect, ModuleList, Conv2d per level */
            break;
        }
        if (L->type != TRN_MOD_C3 && L->n > 1)
            n += 1 + per * L->n; /* nn.Sequential of n copies */
        else
            n += per;
        if (L->type == TRN_MOD_CONV || L->type == TRN_MOD_BOTTLENECK || L->type == TRN_MOD_C3 ||
            L->type == TRN_MOD_SPPF)
            any_conv = true;
    }
    return n + any_conv;
}

/* ---------------------------------------------------------------------------------------- */
/* Top level                                                                                */

static int read_top(struct build *b, const struct trn_spec *sp, const struct trn_model_opts *o)
{
    struct trn_model_info *I = &b->m->info;
    static const char *const names[TRN_KEY_N] = {
        "nc", "depth_multiple", "width_multiple", "anchors", "ch", "activation", "backbone", "head"
    };
    for (int k = TRN_KEY_NC; k <= TRN_KEY_ANCHORS; k++)
        if (!sp->present[k])
            return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA, "%s: missing key '%s'", b->file,
                            names[k]);
    const struct trn_val *v = &sp->key[TRN_KEY_NC];
    if (v->type != TRN_VAL_INT || v->i < 1 || v->i > 100000)
        return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA,
                        "%s:%zu: nc must be an integer in 1..100000", b->file, v->line);
    I->nc_yaml = (int)v->i;
    b->nc = I->nc_yaml;
    if (o && o->nc > 0) {
        if (o->nc > 100000)
            return trn_fail(b->err, b->cap, -EINVAL, "nc override %d is out of range", o->nc);
        b->m->nc_overridden = o->nc != I->nc_yaml;
        b->nc = o->nc;
    }
    for (int k = TRN_KEY_GD; k <= TRN_KEY_GW; k++) {
        v = &sp->key[k];
        if (!is_number(v) || !(num(v) > 0) || num(v) > 100)
            return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA,
                            "%s:%zu: %s must be a number in (0, 100]", b->file, v->line, names[k]);
    }
    b->gd = I->depth_multiple = num(&sp->key[TRN_KEY_GD]);
    b->gw = I->width_multiple = num(&sp->key[TRN_KEY_GW]);
    b->ch_in = 3;
    if (sp->present[TRN_KEY_CH]) {
        v = &sp->key[TRN_KEY_CH];
        if (v->type != TRN_VAL_INT || v->i < 1 || v->i > 64)
            return trn_fail(b->err, b->cap, -TRN_MODEL_ESCHEMA,
                            "%s:%zu: ch must be an integer in 1..64", b->file, v->line);
        b->ch_in = (int)v->i;
    }
    I->ch = b->ch_in;
    if (sp->present[TRN_KEY_ACTIVATION]) {
        v = &sp->key[TRN_KEY_ACTIVATION];
        if (v->type != TRN_VAL_NONE && !(v->type == TRN_VAL_STR && strcmp(v->s, "nn.SiLU()") == 0))
            return trn_fail(b->err, b->cap, -TRN_MODEL_EUNSUPPORTED,
                            "%s:%zu: activation: only nn.SiLU() is supported", b->file, v->line);
    }
    /* na = len(anchors[0]) // 2; no = na * (nc + 5) (parse_model's c2 != no test) */
    b->anchors = &sp->key[TRN_KEY_ANCHORS];
    int nl, na;
    float px[TRN_MODEL_MAX_LEVELS][TRN_MODEL_MAX_ANCHORS][2];
    const int rc = read_anchors(b, b->anchors, 0, &nl, &na, px);
    if (rc) return rc;
    b->no = na * (b->nc + 5);
    return 0;
}

static void derive_name(char *dst, size_t cap, const char *file)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char stem[128];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot && dot != stem) *dot = '\0'; /* Path.stem */
    /* .replace('yolov5', 'YOLOv5') */
    size_t o = 0;
    for (const char *p = stem; *p && o + 1 < cap;) {
        if (strncmp(p, "yolov5", 6) == 0) {
            for (const char *r = "YOLOv5"; *r && o + 1 < cap; r++)
                dst[o++] = *r;
            p += 6;
        } else {
            dst[o++] = *p++;
        }
    }
    dst[o] = '\0';
}

void trn_model_destroy(struct trn_model *m)
{
    if (!m) return;
    for (int i = 0; m->layers && i < m->info.n_layers; i++)
        free((char *)m->layers[i].args_text);
    free(m->layers);
    free(m->convs);
    free(m->tensors);
    for (int g = 0; g < 3; g++)
        free(m->group[g]);
    for (int a = 0; a < TRN_ARENA_N; a++)
        free(m->arena[a]);
    free(m);
}

int trn_model_parse(const char *text, size_t len, const char *file,
                    const struct trn_model_opts *opts, struct trn_model **out, char *err,
                    size_t err_cap)
{
    if (!text || !file || !out) return -EINVAL;
    if (err && err_cap) err[0] = '\0';
    struct trn_spec sp;
    int rc = trn_spec_parse(text, len, file, &sp, err, err_cap);
    if (rc) return rc;
    struct trn_model *m = calloc(1, sizeof *m);
    struct build b = { .m = m, .file = file, .err = err, .cap = err_cap };
    if (!m || !(m->layers = calloc(sp.n_rows + 1, sizeof *m->layers)) ||
        !(b.chs = calloc(sp.n_rows + 1, sizeof *b.chs))) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = read_top(&b, &sp, opts))) goto out;
    if (sp.n_rows == 0) {
        rc = trn_fail(err, err_cap, -TRN_MODEL_ESCHEMA, "%s: backbone and head are empty", file);
        goto out;
    }
    m->info.detect = -1;
    for (size_t i = 0; i < sp.n_rows; i++) {
        b.i = (int)i;
        m->info.n_layers = (int)i + 1; /* so destroy frees this row's text */
        if ((rc = build_row(&b, &sp.rows[i]))) goto out;
        const struct trn_layer *L = &m->layers[i];
        if (L->type == TRN_MOD_DETECT) {
            if (i + 1 != sp.n_rows) {
                rc = fail_row(&b, -TRN_MODEL_EUNSUPPORTED, L->line,
                              "Detect must be the last layer (exactly one)");
                goto out;
            }
            m->info.detect = (int)i;
        }
        b.chs[i] = L->c_out;
    }
    if (m->info.detect < 0) {
        rc = trn_fail(err, err_cap, -TRN_MODEL_ESCHEMA, "%s: the last layer must be Detect", file);
        goto out;
    }
    if ((rc = probe_strides(m, file, err, err_cap))) goto out;
    if ((rc = layout(m)) == -EFBIG)
        rc = trn_fail(err, err_cap, -TRN_MODEL_ESCHEMA,
                      "%s: the model has %lld parameters (at most %lld)", file,
                      (long long)m->info.n_params, (long long)TRN_MODEL_MAX_PARAMS);
    if (rc) goto out;
    m->info.n_modules = count_modules(m);
    if (opts && opts->name)
        snprintf(m->info.name, sizeof m->info.name, "%s", opts->name);
    else
        derive_name(m->info.name, sizeof m->info.name, file);
    *out = m;
    m = NULL;
out:
    free(b.chs);
    trn_model_destroy(m);
    trn_spec_free(&sp);
    if (rc == -ENOMEM && err && err_cap && !err[0])
        snprintf(err, err_cap, "%s: out of memory", file);
    return rc;
}

int trn_model_load(const char *path, const struct trn_model_opts *opts, struct trn_model **out,
                   char *err, size_t err_cap)
{
    if (!path || !out) return -EINVAL;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        return trn_fail(err, err_cap, -e, "%s: %s", path, strerror(e));
    }
    struct stat st;
    int rc = 0;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
    } else if ((uint64_t)st.st_size > MODEL_FILE_MAX) {
        rc = -EFBIG;
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = -ENOMEM;
    } else {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            const ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                rc = r < 0 ? -errno : -EIO;
                break;
            }
            got += (size_t)r;
        }
        if (!rc) rc = trn_model_parse(buf, got, path, opts, out, err, err_cap);
    }
    close(fd);
    free(buf);
    if (rc && err && err_cap && !err[0])
        snprintf(err, err_cap, "%s: %s", path,
                 rc == -EINVAL ? "not a regular file" : trn_strerror(rc));
    return rc;
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int trn_model_cfg_find(const char *cfg, const char *models_dir, char *dst, size_t dst_cap)
{
    if (!cfg || !dst || !dst_cap) return -EINVAL;
    if (file_exists(cfg)) {
        if (strlen(cfg) >= dst_cap) return -ENAMETOOLONG;
        snprintf(dst, dst_cap, "%s", cfg);
        return 0;
    }
    if (strchr(cfg, '/')) return -ENOENT;
    const char *dirs[3] = { getenv("FFYOLO_MODELS_DIR"), "models", models_dir };
    static const char *const ext[2] = { "", ".yaml" };
    for (int d = 0; d < 3; d++) {
        if (!dirs[d] || !*dirs[d]) continue;
        for (int e = 0; e < 2; e++) {
            char p[4096];
            if (snprintf(p, sizeof p, "%s/%s%s", dirs[d], cfg, ext[e]) >= (int)sizeof p)
                return -ENAMETOOLONG;
            if (file_exists(p)) {
                if (strlen(p) >= dst_cap) return -ENAMETOOLONG;
                snprintf(dst, dst_cap, "%s", p);
                return 0;
            }
        }
    }
    return -ENOENT;
}

/* ---------------------------------------------------------------------------------------- */
/* Accessors                                                                                */

const struct trn_model_info *trn_model_info(const struct trn_model *m)
{
    return &m->info;
}

const struct trn_layer *trn_model_layer(const struct trn_model *m, int i)
{
    return i >= 0 && i < m->info.n_layers ? &m->layers[i] : NULL;
}

const struct trn_conv *trn_model_conv(const struct trn_model *m, int i)
{
    return i >= 0 && i < m->info.n_convs ? &m->convs[i] : NULL;
}

const struct trn_tensor *trn_model_tensor(const struct trn_model *m, int i)
{
    return i >= 0 && i < m->info.n_tensors ? &m->tensors[i] : NULL;
}

int trn_model_find(const struct trn_model *m, const char *name)
{
    for (int k = 0; k < m->info.n_tensors; k++)
        if (strcmp(m->tensors[k].name, name) == 0) return k;
    return -ENOENT;
}

int trn_model_transfer(struct trn_model *dst, const struct trn_model *src, bool anchors)
{
    if (!dst || !src) return -EINVAL;
    int moved = 0;
    for (int k = 0; k < dst->info.n_tensors; k++) {
        const struct trn_tensor *d = &dst->tensors[k];
        if (!anchors && d->role == TRN_T_ANCHORS) continue;
        const int j = trn_model_find(src, d->name);
        if (j < 0) continue;
        const struct trn_tensor *s = &src->tensors[j];
        bool same =
            s->ndim == d->ndim && (s->arena == TRN_ARENA_COUNT) == (d->arena == TRN_ARENA_COUNT);
        for (int i = 0; same && i < d->ndim; i++)
            same = s->shape[i] == d->shape[i];
        if (!same) continue;
        const size_t es = d->arena == TRN_ARENA_COUNT ? sizeof(int64_t) : sizeof(float);
        memcpy((char *)trn_model_arena(dst, d->arena) + d->offset * es,
               (const char *)trn_model_arena_const(src, s->arena) + s->offset * es, d->numel * es);
        moved++;
    }
    return moved;
}

int trn_model_group(const struct trn_model *m, int group, const int **idx)
{
    if (group < 0 || group > 2) return -EINVAL;
    if (idx) *idx = m->group[group];
    return m->n_group[group];
}

void *trn_model_arena(struct trn_model *m, enum trn_arena a)
{
    return (int)a >= 0 && a < TRN_ARENA_N ? m->arena[a] : NULL;
}

const void *trn_model_arena_const(const struct trn_model *m, enum trn_arena a)
{
    return (int)a >= 0 && a < TRN_ARENA_N ? m->arena[a] : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Initial weights                                                                          */

float trn_model_round_fp16(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    const uint32_t sign = b & 0x80000000u;
    uint32_t a = b ^ sign;
    if (a >= 0x7f800000u) return x; /* inf, NaN */
    if (a >= 0x477ff000u) {         /* >= 65520: rounds past 65504 */
        const float inf = INFINITY;
        return sign ? -inf : inf;
    }
    if (a < 0x38800000u) { /* below 2^-14: fp16 subnormals, steps of 2^-24 */
        const float y = nearbyintf(fabsf(x) * 0x1p24f) * 0x1p-24f;
        return sign ? -y : y;
    }
    a += 0xfffu + ((a >> 13) & 1u); /* keep 10 mantissa bits, ties to even */
    a &= ~0x1fffu;
    a |= sign;
    float y;
    memcpy(&y, &a, sizeof y);
    return y;
}

float trn_model_init_uniform(uint64_t seed, uint32_t k, uint64_t j)
{
    const uint64_t q = j >> 2;
    const uint32_t ctr[4] = { (uint32_t)q, (uint32_t)(q >> 32), k, INIT_STREAM_TAG };
    const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    uint32_t out[4];
    trn_philox4x32_10(ctr, key, out);
    return (float)(out[j & 3] >> 8) * 0x1p-24f;
}

/* U(-bound, bound) into dst[0..n) for tensor k, 4 values per Philox block. */
static void fill_uniform(float *dst, size_t n, uint64_t seed, uint32_t k, float bound)
{
    const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    for (size_t q = 0; q * 4 < n; q++) {
        const uint32_t ctr[4] = { (uint32_t)q, (uint32_t)((uint64_t)q >> 32), k, INIT_STREAM_TAG };
        uint32_t out[4];
        trn_philox4x32_10(ctr, key, out);
        for (size_t r = 0; r < 4 && q * 4 + r < n; r++) {
            const float u = (float)(out[r] >> 8) * 0x1p-24f;
            dst[q * 4 + r] = (2.0f * u - 1.0f) * bound;
        }
    }
}

int trn_model_init(struct trn_model *m, uint64_t seed)
{
    const struct trn_model_info *I = &m->info;
    float *P = m->arena[TRN_ARENA_PARAM], *B = m->arena[TRN_ARENA_BUFFER];
    int64_t *C = m->arena[TRN_ARENA_COUNT];
    memset(P, 0, I->arena_len[TRN_ARENA_PARAM] * sizeof *P);
    memset(B, 0, I->arena_len[TRN_ARENA_BUFFER] * sizeof *B);
    memset(C, 0, I->arena_len[TRN_ARENA_COUNT] * sizeof *C);
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *t = &m->tensors[k];
        float *dst = t->arena == TRN_ARENA_PARAM ? P + t->offset : B + t->offset;
        switch (t->role) {
        case TRN_T_CONV_WEIGHT:
        case TRN_T_DETECT_WEIGHT:
        case TRN_T_DETECT_BIAS: {
            const struct trn_conv *c = &m->convs[t->conv];
            const int fan_in = c->c1 * c->k * c->k;
            const float bound = (float)(1.0 / sqrt((double)fan_in));
            fill_uniform(dst, t->numel, seed, (uint32_t)k, bound);
            if (t->role == TRN_T_DETECT_BIAS) {
                /* _initialize_biases: level l = the conv's place in Detect */
                const int l = t->conv - m->layers[I->detect].conv0;
                const float s = (float)I->stride[l];
                const float g = 640.0f / s;
                const float r = 8.0f / (g * g);
                const float c_obj = (float)log((double)r);
                const float c_cls = (float)log(0.6 / ((double)I->nc - 0.99999));
                for (int a = 0; a < I->na; a++) {
                    dst[a * I->no + 4] += c_obj;
                    for (int j = 0; j < I->nc; j++)
                        dst[a * I->no + 5 + j] += c_cls;
                }
            }
            break;
        }
        case TRN_T_BN_WEIGHT:
        case TRN_T_BN_VAR:
            for (size_t j = 0; j < t->numel; j++)
                dst[j] = 1.0f;
            break;
        case TRN_T_BN_BIAS:
        case TRN_T_BN_MEAN:
            break; /* zero */
        case TRN_T_BN_COUNT:
            C[t->offset] = 0;
            break;
        case TRN_T_ANCHORS:
            /* m.anchors /= m.stride.view(-1, 1, 1), in float32 */
            for (int l = 0; l < I->nl; l++)
                for (int a = 0; a < I->na; a++)
                    for (int d = 0; d < 2; d++)
                        dst[(l * I->na + a) * 2 + d] = I->anchors_px[l][a][d] / (float)I->stride[l];
            break;
        }
        if (t->arena != TRN_ARENA_COUNT)
            for (size_t j = 0; j < t->numel; j++)
                dst[j] = trn_model_round_fp16(dst[j]);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* GFLOPs, summary                                                                          */

double trn_model_gflops(const struct trn_model *m, int imgsz, bool fused)
{
    const struct trn_model_info *I = &m->info;
    int smax = 0;
    for (int l = 0; l < I->nl; l++)
        smax = I->stride[l] > smax ? I->stride[l] : smax;
    const int stride = smax > 32 ? smax : 32;
    int *buf = calloc((size_t)(2 * I->n_layers + 2 * I->n_convs + 4), sizeof *buf);
    if (!buf) return 0;
    int *lh = buf, *lw = buf + I->n_layers, *cvh = lw + I->n_layers, *cvw = cvh + I->n_convs;
    double ops = 0;
    if (propagate(m, "", stride, stride, lh, lw, cvh, cvw, NULL, 0) == 0) {
        for (int i = 0; i < I->n_convs; i++) {
            const struct trn_conv *c = &m->convs[i];
            const double out = (double)c->c2 * cvh[i] * cvw[i];
            ops += out * c->c1 * c->k * c->k;    /* thop: output numel * (c1 / g) * k * k */
            if (c->bn && !fused) ops += 4 * out; /* thop count_normalization, affine */
        }
        for (int i = 0; i < I->n_layers; i++)
            if (m->layers[i].type == TRN_MOD_UPSAMPLE)
                ops += (double)m->layers[i].c_out * lh[i] * lw[i];
    }
    free(buf);
    const double flops = ops / 1e9 * 2;
    return flops * imgsz / stride * imgsz / stride;
}

/* snprintf into dst at *len, growing the logical length even when it no longer fits. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void
cat(char *dst, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char dummy[1];
    const int n =
        *len < cap ? vsnprintf(dst + *len, cap - *len, fmt, ap) : vsnprintf(dummy, 0, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

int trn_model_summary(const struct trn_model *m, char *dst, size_t dst_cap)
{
    const struct trn_model_info *I = &m->info;
    size_t len = 0;
    if (dst && dst_cap) dst[0] = '\0';
    if (!dst) dst_cap = 0;
    if (m->nc_overridden)
        cat(dst, dst_cap, &len, "Overriding model.yaml nc=%d with nc=%d\n", I->nc_yaml, I->nc);
    cat(dst, dst_cap, &len, "\n%3s%18s%3s%10s  %-40s%-30s\n", "", "from", "n", "params", "module",
        "arguments");
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = &m->layers[i];
        cat(dst, dst_cap, &len, "%3d%18s%3d%10lld  %-40s%-30s\n", i, L->from_text, L->n,
            (long long)L->n_params, L->module_name, L->args_text);
    }
    cat(dst, dst_cap, &len, "%s summary: %d layers, %lld parameters, %lld gradients, %.1f GFLOPs\n",
        I->name, I->n_modules, (long long)I->n_params, (long long)I->n_params,
        trn_model_gflops(m, 640, false));
    return len > (size_t)INT32_MAX ? -ENOMEM : (int)len;
}

int trn_model_summary_line(const struct trn_model *m, int imgsz, bool fused, bool no_grad,
                           char *dst, size_t dst_cap)
{
    if (!m || imgsz < 1) return -EINVAL;
    const struct trn_model_info *I = &m->info;
    long long layers = I->n_modules, params = I->n_params, grads = no_grad ? 0 : I->n_params;
    if (fused) {
        long long detect = 0;
        for (int i = 0; i < I->n_convs; i++) {
            const struct trn_conv *c = &m->convs[i];
            if (c->bn) { /* BatchNorm2d (weight, bias) out, a conv bias in */
                layers--;
                params -= c->c2;
            } else {
                detect += (long long)c->c2 * c->c1 * c->k * c->k + c->c2;
            }
        }
        grads = no_grad ? 0 : detect;
    }
    size_t len = 0;
    if (dst && dst_cap) dst[0] = '\0';
    if (!dst) dst_cap = 0;
    cat(dst, dst_cap, &len, "%s summary: %lld layers, %lld parameters, %lld gradients, %.1f GFLOPs",
        I->name, layers, params, grads, trn_model_gflops(m, imgsz, fused));
    return len > (size_t)INT32_MAX ? -ENOMEM : (int)len;
}

/* ---------------------------------------------------------------------------------------- */
/* Activation plan                                                                          */

struct planner {
    struct trn_act_plan *p;
    int cap;
    size_t total;
    int batch;
};

static int act_add(struct planner *pl, const char *name, const char *suffix, int c, int h, int w)
{
    struct trn_act_plan *p = pl->p;
    if (p->n_acts == pl->cap) {
        const int cap = pl->cap ? pl->cap * 2 : 256;
        struct trn_act *a = realloc(p->acts, (size_t)cap * sizeof *a);
        if (!a) return -ENOMEM;
        p->acts = a;
        pl->cap = cap;
    }
    struct trn_act *a = &p->acts[p->n_acts];
    memset(a, 0, sizeof *a);
    if (suffix)
        snprintf(a->name, sizeof a->name, "%s.%s", name, suffix);
    else
        snprintf(a->name, sizeof a->name, "%s", name);
    a->n = pl->batch;
    a->c = c;
    a->h = h;
    a->w = w;
    a->numel = (size_t)pl->batch * (size_t)c * (size_t)h * (size_t)w;
    pl->total = (pl->total + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
    a->offset = pl->total;
    if (a->numel > SIZE_MAX / 8 - pl->total) return -EOVERFLOW;
    pl->total += a->numel;
    return p->n_acts++;
}

/* conv ci reads act `in`; plans conv (+ bn + act) outputs. Returns the last output's index. */
static int plan_conv(struct planner *pl, const struct trn_model *m, int ci, int in, int h, int w)
{
    const struct trn_conv *c = &m->convs[ci];
    struct trn_act_conv *ac = &pl->p->convs[ci];
    ac->in = in;
    ac->bn = ac->act = ac->add = -1;
    if ((ac->conv = act_add(pl, c->name, c->bn ? "conv" : "out", c->c2, h, w)) < 0) return ac->conv;
    if (!c->bn) return ac->conv;
    /* no pre-SiLU slot: BN and SiLU run fused (trn_act_conv.bn stays -1) */
    if ((ac->act = act_add(pl, c->name, "act", c->c2, h, w)) < 0) return ac->act;
    return ac->act;
}

/* A shortcut bottleneck's cv2 (conv ci, cv1 = ci - 1, input x = cv1's input): its conv output,
 * then the sum in place of its SiLU output (trn_act_conv.act). Returns the sum. */
static int plan_conv_sum(struct planner *pl, const struct trn_model *m, int ci, int in, int c_out,
                         int h, int w)
{
    const struct trn_conv *c = &m->convs[ci];
    struct trn_act_conv *ac = &pl->p->convs[ci];
    ac->in = in;
    ac->bn = ac->act = ac->add = -1;
    if ((ac->conv = act_add(pl, c->name, "conv", c->c2, h, w)) < 0) return ac->conv;
    return ac->add = act_add(pl, c->name, "add", c_out, h, w);
}

/*
 * The gradient offsets (trn_act.doff, trn_act_plan.dtotal). alias[a] >= 0: act a's gradient is
 * act alias[a]'s, a later act (a bottleneck input and its sum), so in reverse order every target
 * is final before the acts that point at it; the others get their own slots in act order.
 */
static void plan_grad_offsets(struct trn_act_plan *p, const int *alias, const int *gcat,
                              const int *gcoff)
{
    size_t t = 0;
    for (int a = 0; a < p->n_acts; a++) {
        if (alias[a] >= 0 || gcat[a] >= 0) continue;
        t = (t + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
        p->acts[a].doff = t;
        t += p->acts[a].numel;
    }
    for (int a = 0; a < p->n_acts; a++) { /* gcat: a concat buffer, never placed itself */
        if (gcat[a] < 0) continue;
        const struct trn_act *C = &p->acts[gcat[a]];
        p->acts[a].doff = C->doff + (size_t)gcoff[a] * (size_t)C->h * (size_t)C->w;
        p->acts[a].dnstride = (size_t)C->c * (size_t)C->h * (size_t)C->w;
    }
    for (int a = p->n_acts - 1; a >= 0; a--) {
        if (alias[a] < 0) continue;
        p->acts[a].doff = p->acts[alias[a]].doff;
        p->acts[a].dnstride = p->acts[alias[a]].dnstride;
    }
    p->dtotal = (t + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
}

/* ---------------------------------------------------------------------------------------- */
/* Concat without copies (trn_act.nstride, dnstride)                                         */

/* One input of a concat buffer: act `act` goes to channels [c_off, ..) of act `cat`. */
struct slice_src {
    int act, cat, c_off;
};

/* What conv ci hands on (net.c's conv_out): the residual sum, the SiLU output or the raw conv. */
static int plan_conv_out(const struct trn_act_plan *p, int ci)
{
    const struct trn_act_conv *ac = &p->convs[ci];
    return ac->add >= 0 ? ac->add : ac->act >= 0 ? ac->act : ac->conv;
}

/* Every concat input of the plan in row order (net.c's cat_fwd calls): C3 (branch, cv2), SPPF
 * (x, three pools), Concat (from order). s: room for 4 n_layers + TRN_MODEL_MAX_FROM n_layers. */
static int slice_sources(const struct trn_model *m, const struct trn_act_plan *p,
                         struct slice_src *s)
{
    int k = 0;
    for (int i = 0; i < m->info.n_layers; i++) {
        const struct trn_layer *L = &m->layers[i];
        const struct trn_act_layer *al = &p->layers[i];
        const int c0 = L->conv0;
        if (L->type == TRN_MOD_C3) {
            const int br = plan_conv_out(p, L->n ? c0 + 4 + 2 * (L->n - 1) : c0);
            s[k++] = (struct slice_src){ br, al->cat, 0 };
            s[k++] = (struct slice_src){ plan_conv_out(p, c0 + 1), al->cat, L->hidden };
        } else if (L->type == TRN_MOD_SPPF) {
            s[k++] = (struct slice_src){ plan_conv_out(p, c0), al->cat, 0 };
            for (int j = 0; j < 3; j++)
                s[k++] = (struct slice_src){ al->pool[j], al->cat, (j + 1) * L->hidden };
        } else if (L->type == TRN_MOD_CONCAT) {
            int off = 0;
            for (int j = 0; j < L->n_from; j++) {
                const int src = L->from[j] < 0 ? 0 : p->layers[L->from[j]].out;
                s[k++] = (struct slice_src){ src, al->cat, off };
                off += p->acts[src].c;
            }
        }
    }
    return k;
}

static void note_reader(int *rmin, int *rmax, int a, int row)
{
    if (a < 0) return;
    if (row < rmin[a]) rmin[a] = row;
    if (row > rmax[a]) rmax[a] = row;
}

/*
 * Concat without copies: decide which concat inputs live in their concat buffer's channel slice
 * and move them there. Forward (offset, nstride): an input of exactly one concat slot, not the
 * image, produced by an op that can write a strided output (a BN+SiLU or BN+SiLU+add output, a
 * pool, an upsample) and whose slice starts TRN_MODEL_ALIGN-aligned; the other acts are packed
 * again in act order, so the arena shrinks by the placed ones. Gradient (gcat[a], gcoff[a] for
 * plan_grad_offsets): only for a forward-placed act whose gradient storage (its own and that of
 * the acts sharing it through alias) gets no contribution before the concat buffer's gradient is
 * written, because that buffer's first writer overwrites the whole of it: every other reader of
 * that storage must run its backward after every reader of the buffer (rows below the first
 * reader of a Concat row's buffer; inside the row for a C3 / SPPF buffer, whose reader cv3 / cv2
 * runs first), and none may be a residual pair that net.c passes on with a flat add (pass_bwd).
 * Returns 0 or -ENOMEM.
 */
static int plan_slices(const struct trn_model *m, struct trn_act_plan *p, const int *alias,
                       int *gcat, int *gcoff)
{
    const struct trn_model_info *I = &m->info;
    const int na = p->n_acts;
    const size_t ns_max = (size_t)I->n_layers * (4 + TRN_MODEL_MAX_FROM);
    struct slice_src *s = malloc(ns_max * sizeof *s);
    int *cnt = calloc((size_t)na, sizeof *cnt), *prod = calloc((size_t)na, sizeof *prod);
    int *rmin = malloc((size_t)na * sizeof *rmin), *rmax = malloc((size_t)na * sizeof *rmax);
    int *flat = calloc((size_t)na, sizeof *flat), *catrow = malloc((size_t)na * sizeof *catrow);
    int *fcat = malloc((size_t)na * sizeof *fcat), *fcoff = calloc((size_t)na, sizeof *fcoff);
    int rc = -ENOMEM;
    if (!s || !cnt || !prod || !rmin || !rmax || !flat || !catrow || !fcat || !fcoff) goto out;
    for (int a = 0; a < na; a++) {
        rmin[a] = INT_MAX;
        rmax[a] = -1;
        catrow[a] = fcat[a] = gcat[a] = -1;
        gcoff[a] = 0;
    }
    /* who reads what (concat copies aside), who can write a slice, residual pairs */
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = &m->layers[i];
        const struct trn_act_layer *al = &p->layers[i];
        for (int ci = L->conv0; ci < L->conv0 + L->n_conv; ci++) {
            const struct trn_act_conv *ac = &p->convs[ci];
            note_reader(rmin, rmax, ac->in, i);
            if (m->convs[ci].bn) {
                if (ac->act >= 0) prod[ac->act] = 1;
                if (ac->add >= 0) prod[ac->add] = 1;
            }
            if (ac->add >= 0 && ci > 0) {
                const int x = p->convs[ci - 1].in;
                if (alias[x] != ac->add) flat[x] = flat[ac->add] = 1; /* net.c pass_bwd */
            }
        }
        if (al->cat >= 0) catrow[al->cat] = i;
        if (L->type == TRN_MOD_SPPF) {
            note_reader(rmin, rmax, plan_conv_out(p, L->conv0), i);
            for (int j = 0; j < 3; j++) {
                prod[al->pool[j]] = 1;
                if (j < 2) note_reader(rmin, rmax, al->pool[j], i);
            }
        } else if (L->type == TRN_MOD_UPSAMPLE) {
            note_reader(rmin, rmax, L->from[0] < 0 ? 0 : p->layers[L->from[0]].out, i);
            prod[al->out] = 1;
        }
    }
    const int n_src = slice_sources(m, p, s);
    for (int k = 0; k < n_src; k++)
        cnt[s[k].act]++;
    /* forward placement */
    for (int k = 0; k < n_src; k++) {
        const int a = s[k].act, cat = s[k].cat;
        const struct trn_act *A = &p->acts[a], *C = &p->acts[cat];
        const size_t plane = (size_t)C->h * (size_t)C->w;
        if (a == 0 || cnt[a] != 1 || !prod[a] || A->n != C->n || A->h != C->h || A->w != C->w ||
            s[k].c_off + A->c > C->c || (size_t)s[k].c_off * plane % TRN_MODEL_ALIGN)
            continue;
        fcat[a] = cat;
        fcoff[a] = s[k].c_off;
    }
    /* gradient placement: a root of its gradient-sharing group, with the order above */
    for (int a = 0; a < na; a++) {
        if (fcat[a] < 0 || alias[a] >= 0) continue;
        int gmin = INT_MAX, gmax = -1, bad = 0;
        for (int b = 0; b < na; b++) {
            int r = b;
            while (alias[r] >= 0)
                r = alias[r];
            if (r != a) continue;
            bad |= flat[b];
            if (rmin[b] < gmin) gmin = rmin[b];
            if (rmax[b] > gmax) gmax = rmax[b];
        }
        const int cat = fcat[a], row = catrow[cat];
        const int internal =
            row >= 0 && (m->layers[row].type == TRN_MOD_C3 || m->layers[row].type == TRN_MOD_SPPF);
        if (internal)
            bad |= gmax >= 0 && (gmin != row || gmax != row);
        else
            bad |= gmax >= 0 && gmax >= rmin[cat];
        if (bad) continue;
        gcat[a] = cat;
        gcoff[a] = fcoff[a];
    }
    /* pack the unplaced acts again in act order, then point the placed ones into their slices */
    size_t t = 0;
    for (int a = 0; a < na; a++) {
        struct trn_act *A = &p->acts[a];
        A->nstride = A->dnstride = 0;
        if (fcat[a] >= 0) continue;
        t = (t + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
        A->offset = t;
        t += A->numel;
    }
    for (int a = 0; a < na; a++) {
        if (fcat[a] < 0) continue;
        struct trn_act *A = &p->acts[a];
        const struct trn_act *C = &p->acts[fcat[a]];
        A->offset = C->offset + (size_t)fcoff[a] * (size_t)C->h * (size_t)C->w;
        A->nstride = (size_t)C->c * (size_t)C->h * (size_t)C->w;
    }
    p->total = (t + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
    rc = 0;
out:
    free(s);
    free(cnt);
    free(prod);
    free(rmin);
    free(rmax);
    free(flat);
    free(catrow);
    free(fcat);
    free(fcoff);
    return rc;
}

/* Rows whose `from` lists row src (each listing counts). */
static int row_readers(const struct trn_model *m, int src)
{
    int k = 0;
    for (int i = 0; i < m->info.n_layers; i++)
        for (int j = 0; j < m->layers[i].n_from; j++)
            k += m->layers[i].from[j] == src;
    return k;
}

void trn_act_plan_free(struct trn_act_plan *p)
{
    if (!p) return;
    free(p->acts);
    free(p->convs);
    free(p->layers);
    memset(p, 0, sizeof *p);
}

int trn_model_plan(const struct trn_model *m, int batch, int h, int w, struct trn_act_plan *out,
                   char *err, size_t err_cap)
{
    if (!m || !out || batch < 1 || h < 1 || w < 1 || batch > 65536 || h > 65536 || w > 65536)
        return -EINVAL;
    const struct trn_model_info *I = &m->info;
    memset(out, 0, sizeof *out);
    int *buf = calloc((size_t)(2 * I->n_layers + 4 * I->n_convs + 4), sizeof *buf);
    int *alias = NULL, *gcat = NULL, *gcoff = NULL, n_alias = 0;
    out->convs = calloc((size_t)I->n_convs + 1, sizeof *out->convs);
    out->layers = calloc((size_t)I->n_layers + 1, sizeof *out->layers);
    struct planner pl = { .p = out, .batch = batch };
    int rc = 0;
    if (!buf || !out->convs || !out->layers) {
        rc = -ENOMEM;
        goto out;
    }
    int *lh = buf, *lw = buf + I->n_layers, *cvh = lw + I->n_layers, *cvw = cvh + I->n_convs;
    /* gradient sharing (plan_grad_offsets): act alias_of[k] takes act alias_to[k]'s gradient */
    int *alias_of = cvw + I->n_convs, *alias_to = alias_of + I->n_convs;
    if ((rc = propagate(m, I->name, h, w, lh, lw, cvh, cvw, err, err_cap))) goto out;
    out->batch = batch;
    out->h = h;
    out->w = w;
    const int input = act_add(&pl, "input", NULL, I->ch, h, w);
    if (input < 0) {
        rc = input;
        goto out;
    }
#define TRY_ACT(x)                    \
    do {                              \
        if ((rc = (x)) < 0) goto out; \
    } while (0)
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = &m->layers[i];
        struct trn_act_layer *al = &out->layers[i];
        al->cat = al->pool[0] = al->pool[1] = al->pool[2] = -1;
        const int H = lh[i], W = lw[i];
        int x = L->from[0] < 0 ? input : out->layers[L->from[0]].out;
        char name[32];
        snprintf(name, sizeof name, "model.%d", i);
        const int c0 = L->conv0;
        switch (L->type) {
        case TRN_MOD_CONV:
            for (int j = 0; j < L->n; j++)
                TRY_ACT(x = plan_conv(&pl, m, c0 + j, x, cvh[c0 + j], cvw[c0 + j]));
            break;
        case TRN_MOD_BOTTLENECK:
            for (int j = 0; j < L->n; j++) {
                const int y = x;
                TRY_ACT(x = plan_conv(&pl, m, c0 + 2 * j, y, H, W));
                if (!L->shortcut) {
                    TRY_ACT(x = plan_conv(&pl, m, c0 + 2 * j + 1, x, H, W));
                    continue;
                }
                TRY_ACT(x = plan_conv_sum(&pl, m, c0 + 2 * j + 1, x, L->c_out, H, W));
                /* copy j > 0 reads copy j - 1's output, which nothing else reads */
                if (y != input && (j > 0 || row_readers(m, L->from[0]) == 1)) {
                    alias_of[n_alias] = y;
                    alias_to[n_alias++] = x;
                }
            }
            break;
        case TRN_MOD_C3: {
            int y;
            TRY_ACT(y = plan_conv(&pl, m, c0, x, H, W)); /* cv1 */
            for (int j = 0; j < L->n; j++) {
                const int b1 = c0 + 3 + 2 * j;
                const int b_in = y; /* cv1's output or the previous sum: read only here */
                TRY_ACT(y = plan_conv(&pl, m, b1, y, H, W));
                if (!L->shortcut) {
                    TRY_ACT(y = plan_conv(&pl, m, b1 + 1, y, H, W));
                    continue;
                }
                TRY_ACT(y = plan_conv_sum(&pl, m, b1 + 1, y, L->hidden, H, W));
                alias_of[n_alias] = b_in;
                alias_to[n_alias++] = y;
            }
            TRY_ACT(plan_conv(&pl, m, c0 + 1, x, H, W)); /* cv2 */
            TRY_ACT(al->cat = act_add(&pl, name, "cat", 2 * L->hidden, H, W));
            TRY_ACT(x = plan_conv(&pl, m, c0 + 2, al->cat, H, W)); /* cv3 */
            break;
        }
        case TRN_MOD_SPPF:
            TRY_ACT(x = plan_conv(&pl, m, c0, x, H, W));
            for (int j = 0; j < 3; j++) {
                char sfx[8];
                snprintf(sfx, sizeof sfx, "pool%d", j + 1);
                TRY_ACT(al->pool[j] = act_add(&pl, name, sfx, L->hidden, H, W));
            }
            TRY_ACT(al->cat = act_add(&pl, name, "cat", 4 * L->hidden, H, W));
            TRY_ACT(x = plan_conv(&pl, m, c0 + 1, al->cat, H, W));
            break;
        case TRN_MOD_UPSAMPLE:
            TRY_ACT(x = act_add(&pl, name, "out", L->c_out, H, W));
            break;
        case TRN_MOD_CONCAT:
            TRY_ACT(al->cat = act_add(&pl, name, "cat", L->c_out, H, W));
            x = al->cat;
            break;
        case TRN_MOD_DETECT:
            for (int l = 0; l < L->n_conv; l++) {
                const int in = L->from[l] < 0 ? input : out->layers[L->from[l]].out;
                int y;
                TRY_ACT(y = plan_conv(&pl, m, c0 + l, in, cvh[c0 + l], cvw[c0 + l]));
                if (l == 0) x = y;
            }
            break;
        }
        al->out = x;
        al->c = L->c_out;
        al->h = H;
        al->w = W;
    }
#undef TRY_ACT
    rc = 0;
    out->total = (pl.total + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
    alias = malloc((size_t)out->n_acts * sizeof *alias);
    gcat = malloc((size_t)out->n_acts * sizeof *gcat);
    gcoff = malloc((size_t)out->n_acts * sizeof *gcoff);
    if (!alias || !gcat || !gcoff) {
        rc = -ENOMEM;
        goto out;
    }
    for (int a = 0; a < out->n_acts; a++)
        alias[a] = -1;
    for (int k = 0; k < n_alias; k++)
        alias[alias_of[k]] = alias_to[k];
    if ((rc = plan_slices(m, out, alias, gcat, gcoff)) < 0) goto out;
    plan_grad_offsets(out, alias, gcat, gcoff);
out:
    free(alias);
    free(gcat);
    free(gcoff);
    free(buf);
    if (rc) trn_act_plan_free(out);
    return rc < 0 ? rc : 0;
}
