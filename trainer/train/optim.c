/*
 * Optimizer, schedule and EMA (see optim.h). Parameters, gradients and state share the PARAM
 * arena's layout; updates overwrite (=) params and state, gradients are read (step) or scaled /
 * zeroed in place (clip, zero_grad).
 *
 * The SGD step, the gradient norm, the clip and the EMA are the kern ops (kern.h "Optimizer
 * step"): one implementation, the CPU reference here and its CUDA twin on the device
 * (trn_optim_dev_*). The segment table lists the group tensors group by group, in the order of
 * the model's group lists, so the double sum of the norm runs in the order it always did.
 */
#include "optim.h"

#include "kern.h"
#include "errors.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct trn_optim {
    struct trn_optim_opts o;
    const struct trn_model *m;
    int n_group[3];             /* tensors per group */
    const int *group[3];        /* tensor indices (the model's lists) */
    size_t len;                 /* PARAM arena floats */
    float *s0, *s1;             /* momentum_buffer / exp_avg, exp_avg_sq (Adam only) */
    double wd1;                 /* group 1's scaled weight decay */
    int64_t steps;              /* optimizer steps taken */
    int64_t last_opt_step;      /* ni of the last step, -1 before any */
    struct kern_ctx *kc;        /* CPU context of the kern ops */
    struct kern_optim_seg *seg; /* group tensors, group by group (host table) */
    int *seg_tensor;            /* each segment's tensor */
    size_t n_seg, total;        /* segments (0: no group tensor), their elements */
};

struct trn_ema {
    struct kern_ctx *kc; /* CPU context of the kern ops */
    const struct trn_model *m;
    size_t len[2];   /* PARAM, BUFFER arena floats */
    float *arena[2]; /* copies */
    int64_t updates; /* optimizer steps seen */
};

void trn_optim_opts_default(struct trn_optim_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->kind = TRN_OPTIM_SGD;
    o->lr0 = 0.01;
    o->lrf = 0.01;
    o->momentum = 0.937;
    o->weight_decay = 0.0005;
    o->warmup_epochs = 3.0;
    o->warmup_momentum = 0.8;
    o->warmup_bias_lr = 0.1;
    o->batch_size = 16;
    o->nbs = 64;
    o->epochs = 300;
    o->nb = 1;
    o->cos_lr = false;
    o->max_grad_norm = 10.0;
    o->beta2 = 0.999;
    o->eps = 1e-8;
}

void trn_optim_opts_from_hyp(struct trn_optim_opts *o, const struct trn_hyp *h)
{
    if (!o || !h) return;
    o->lr0 = h->lr0;
    o->lrf = h->lrf;
    o->momentum = h->momentum;
    o->weight_decay = h->weight_decay;
    o->warmup_epochs = h->warmup_epochs;
    o->warmup_momentum = h->warmup_momentum;
    o->warmup_bias_lr = h->warmup_bias_lr;
}

static int optim_opts_check(const struct trn_optim_opts *o)
{
    if (!o || o->batch_size < 1 || o->nbs < 1 || o->epochs < 1 || o->nb < 1) return -EINVAL;
    if ((unsigned)o->kind > TRN_OPTIM_ADAMW) return -EINVAL;
    const double v[] = { o->lr0,
                         o->lrf,
                         o->momentum,
                         o->weight_decay,
                         o->warmup_epochs,
                         o->warmup_momentum,
                         o->warmup_bias_lr,
                         o->max_grad_norm,
                         o->beta2,
                         o->eps };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!isfinite(v[i])) return -EINVAL;
    if (o->lr0 < 0 || o->momentum < 0 || o->momentum >= 1 || o->weight_decay < 0 ||
        o->warmup_epochs < 0 || o->beta2 < 0 || o->beta2 >= 1 || o->eps <= 0)
        return -EINVAL;
    return 0;
}

/* Python's round() / numpy's .round(): half to even (the default rounding mode). */
static double optim_round(double x)
{
    return nearbyint(x);
}

int trn_optim_accumulate(const struct trn_optim_opts *o)
{
    if (optim_opts_check(o) < 0) return 0;
    const double a = optim_round((double)o->nbs / o->batch_size);
    return a < 1.0 ? 1 : (int)a;
}

double trn_optim_weight_decay(const struct trn_optim_opts *o)
{
    if (optim_opts_check(o) < 0) return 0.0;
    return o->weight_decay * o->batch_size * trn_optim_accumulate(o) / o->nbs;
}

int64_t trn_optim_warmup_iters(const struct trn_optim_opts *o)
{
    if (optim_opts_check(o) < 0) return 0;
    const double w = optim_round(o->warmup_epochs * (double)o->nb);
    return w > 100.0 ? (int64_t)w : 100;
}

double trn_optim_lf(const struct trn_optim_opts *o, int epoch)
{
    if (!o || o->epochs < 1) return 0.0;
    const double x = epoch, E = o->epochs;
    if (o->cos_lr) return ((1.0 - cos(x * M_PI / E)) / 2.0) * (o->lrf - 1.0) + 1.0;
    return (1.0 - x / E) * (1.0 - o->lrf) + o->lrf;
}

/* np.interp(x, [0, x1], [y0, y1]) for 0 <= x <= x1: numpy returns y1 exactly at the end. */
static double optim_interp(double x, double x1, double y0, double y1)
{
    if (x >= x1) return y1;
    return (y1 - y0) / x1 * x + y0;
}

int trn_optim_schedule(const struct trn_optim_opts *o, int epoch, int64_t ni,
                       struct trn_optim_sched *out)
{
    if (optim_opts_check(o) < 0 || !out || epoch < 0 || ni < 0) return -EINVAL;
    const double lr = o->lr0 * trn_optim_lf(o, epoch);
    const int64_t nw = trn_optim_warmup_iters(o);
    memset(out, 0, sizeof *out);
    if (ni <= nw) {
        const double x = (double)ni, x1 = (double)nw;
        const double acc = optim_round(optim_interp(x, x1, 1.0, (double)o->nbs / o->batch_size));
        out->accumulate = acc < 1.0 ? 1 : (int)acc;
        out->lr[0] = optim_interp(x, x1, o->warmup_bias_lr, lr);
        out->lr[1] = out->lr[2] = optim_interp(x, x1, 0.0, lr);
        out->momentum = o->kind == TRN_OPTIM_SGD
                            ? optim_interp(x, x1, o->warmup_momentum, o->momentum)
                            : o->momentum;
        out->warmup = true;
    } else {
        out->accumulate = trn_optim_accumulate(o);
        out->lr[0] = out->lr[1] = out->lr[2] = lr;
        out->momentum = o->momentum;
        out->warmup = false;
    }
    return 0;
}

/* The segment table of the three groups (tensors with elements only). */
static int optim_build_table(struct trn_optim *opt)
{
    size_t n = 0;
    for (int g = 0; g < 3; g++)
        n += (size_t)opt->n_group[g];
    opt->seg = calloc(n ? n : 1, sizeof *opt->seg);
    opt->seg_tensor = calloc(n ? n : 1, sizeof *opt->seg_tensor);
    if (!opt->seg || !opt->seg_tensor) return -ENOMEM;
    n = 0;
    for (int g = 0; g < 3; g++) {
        for (int k = 0; k < opt->n_group[g]; k++) {
            const struct trn_tensor *const T = trn_model_tensor(opt->m, opt->group[g][k]);
            if (!T || T->numel == 0) continue;
            /* a frozen row's tensors are in no segment: torch skips a parameter with no grad */
            if (T->layer >= 0 && T->layer < TRN_MODEL_MAX_LAYERS &&
                (opt->o.frozen[T->layer / 64] >> (T->layer % 64) & 1))
                continue;
            opt->seg[n].offset = T->offset;
            opt->seg[n].count = T->numel;
            opt->seg[n].group = g;
            opt->seg_tensor[n] = opt->group[g][k];
            n++;
        }
    }
    opt->n_seg = n;
    if (n == 0) return 0;
    return kern_optim_segs_prepare(opt->seg, n, opt->len, 3, &opt->total);
}

int trn_optim_create(const struct trn_model *m, const struct trn_optim_opts *o,
                     struct trn_optim **out)
{
    if (!m || !out) return -EINVAL;
    int rc = optim_opts_check(o);
    if (rc < 0) return rc;
    struct trn_optim *const opt = calloc(1, sizeof *opt);
    if (!opt) return -ENOMEM;
    opt->o = *o;
    opt->m = m;
    for (int g = 0; g < 3; g++) {
        rc = trn_model_group(m, g, &opt->group[g]);
        if (rc < 0) {
            free(opt);
            return rc;
        }
        opt->n_group[g] = rc;
    }
    opt->len = trn_model_info(m)->arena_len[TRN_ARENA_PARAM];
    const size_t n_state = o->kind == TRN_OPTIM_SGD ? 1 : 2;
    opt->s0 = calloc(opt->len ? opt->len : 1, sizeof(float));
    opt->s1 = n_state > 1 ? calloc(opt->len ? opt->len : 1, sizeof(float)) : NULL;
    if (!opt->s0 || (n_state > 1 && !opt->s1)) {
        trn_optim_destroy(opt);
        return -ENOMEM;
    }
    opt->wd1 = trn_optim_weight_decay(o);
    opt->last_opt_step = -1;
    if ((rc = optim_build_table(opt)) < 0 || (rc = kern_ctx_create(NULL, &opt->kc)) < 0) {
        trn_optim_destroy(opt);
        return rc == -KERN_EBACKEND ? -EINVAL : rc;
    }
    *out = opt;
    return 0;
}

void trn_optim_destroy(struct trn_optim *opt)
{
    if (!opt) return;
    kern_ctx_destroy(opt->kc);
    free(opt->seg);
    free(opt->seg_tensor);
    free(opt->s0);
    free(opt->s1);
    free(opt);
}

const struct trn_optim_opts *trn_optim_get_opts(const struct trn_optim *opt)
{
    return opt ? &opt->o : NULL;
}

int trn_optim_clip(const struct trn_optim *opt, float *grads, double max_norm, double *norm)
{
    if (!opt || !grads) return -EINVAL;
    double ss = 0.0;
    int rc = opt->n_seg
                 ? kern_ref_optim_sumsq(opt->kc, &ss, grads, opt->seg, opt->n_seg, opt->total)
                 : 0;
    if (rc < 0) return -EINVAL;
    const double n = sqrt(ss);
    if (norm) *norm = n;
    if (!(max_norm > 0.0)) return 0;
    /* clip_coef = max_norm / (total_norm + 1e-6), float32 tensors in PyTorch. */
    const float coef = (float)max_norm / ((float)n + 1e-6f);
    if (!(coef < 1.0f)) return 0;
    int32_t found_inf = 0; /* the unscale op is the in-place scale; its flag is not needed */
    rc = kern_ref_amp_unscale(opt->kc, grads, opt->seg, opt->n_seg, opt->total, coef, &found_inf);
    return rc < 0 ? -EINVAL : 1;
}

/* The SGD descriptor of one step: python's doubles rounded to float, as PyTorch's kernels do. */
static void optim_sgd_desc(const struct trn_optim *opt, const struct trn_optim_sched *s,
                           struct kern_sgd *d)
{
    memset(d, 0, sizeof *d);
    d->n_seg = opt->n_seg;
    d->total = opt->total;
    d->n_groups = 3;
    d->nesterov = 1;
    d->first = opt->steps == 0;
    d->grad_scale = 1.0f;
    for (int g = 0; g < 3; g++) {
        d->group[g].lr = (float)s->lr[g];
        d->group[g].momentum = (float)s->momentum;
        d->group[g].weight_decay = g == 1 ? (float)opt->wd1 : 0.0f;
    }
}

/* One Adam / AdamW tensor; bc2s = sqrt(1 - b2^t) and step_size = lr / (1 - b1^t) as floats. */
static void optim_adam_tensor(float *restrict th, float *restrict m1, float *restrict m2,
                              const float *restrict gr, size_t n, float decay_mul, float wd,
                              float w1, float b2, float omb2, float bc2s, float step_size,
                              float eps)
{
    for (size_t i = 0; i < n; i++) {
        float t = th[i];
        if (decay_mul != 1.0f) t = t * decay_mul;
        float g = gr[i];
        if (wd != 0.0f) g = g + wd * t;
        const float m = m1[i] + w1 * (g - m1[i]);
        const float v = m2[i] * b2 + (omb2 * g) * g;
        m1[i] = m;
        m2[i] = v;
        const float denom = sqrtf(v) / bc2s + eps;
        th[i] = t + (-step_size) * (m / denom);
    }
}

int trn_optim_step(struct trn_optim *opt, float *params, const float *grads,
                   const struct trn_optim_sched *s)
{
    if (!opt || !params || !grads || !s) return -EINVAL;
    for (int g = 0; g < 3; g++)
        if (!isfinite(s->lr[g])) return -EINVAL;
    const struct trn_optim_opts *const o = &opt->o;
    if (o->kind == TRN_OPTIM_SGD) {
        struct kern_sgd d;
        optim_sgd_desc(opt, s, &d);
        if (opt->n_seg &&
            kern_ref_sgd_step(opt->kc, &d, params, opt->s0, NULL, grads, opt->seg, NULL, NULL) < 0)
            return -EINVAL;
    } else {
        const double t = (double)(opt->steps + 1), b1 = o->momentum, b2 = o->beta2;
        const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (int g = 0; g < 3; g++) {
            const double lr = s->lr[g], wd = g == 1 ? opt->wd1 : 0.0;
            const int adamw = o->kind == TRN_OPTIM_ADAMW;
            const float decay_mul = adamw ? (float)(1.0 - lr * wd) : 1.0f;
            const float wd_l2 = adamw ? 0.0f : (float)wd;
            for (int k = 0; k < opt->n_group[g]; k++) {
                const struct trn_tensor *const T = trn_model_tensor(opt->m, opt->group[g][k]);
                optim_adam_tensor(params + T->offset, opt->s0 + T->offset, opt->s1 + T->offset,
                                  grads + T->offset, T->numel, decay_mul, wd_l2, (float)(1.0 - b1),
                                  (float)b2, (float)(1.0 - b2), (float)sqrt(bc2), (float)(lr / bc1),
                                  (float)o->eps);
            }
        }
    }
    opt->steps++;
    return 0;
}

int trn_optim_zero_grad(const struct trn_optim *opt, float *grads)
{
    if (!opt || !grads) return -EINVAL;
    for (int g = 0; g < 3; g++) {
        for (int k = 0; k < opt->n_group[g]; k++) {
            const struct trn_tensor *const T = trn_model_tensor(opt->m, opt->group[g][k]);
            memset(grads + T->offset, 0, T->numel * sizeof *grads);
        }
    }
    return 0;
}

int trn_optim_after_batch(struct trn_optim *opt, float *params, float *grads, int epoch, int64_t ni,
                          struct trn_optim_report *rep)
{
    if (!opt || !params || !grads) return -EINVAL;
    struct trn_optim_report r;
    memset(&r, 0, sizeof r);
    int rc = trn_optim_schedule(&opt->o, epoch, ni, &r.sched);
    if (rc < 0) return rc;
    if (ni - opt->last_opt_step >= r.sched.accumulate) {
        rc = trn_optim_clip(opt, grads, opt->o.max_grad_norm, &r.grad_norm);
        if (rc < 0) return rc;
        r.clipped = rc == 1;
        if ((rc = trn_optim_step(opt, params, grads, &r.sched)) < 0) return rc;
        trn_optim_zero_grad(opt, grads);
        opt->last_opt_step = ni;
        r.stepped = true;
    }
    if (rep) *rep = r;
    return r.stepped ? 1 : 0;
}

int trn_optim_get_counters(const struct trn_optim *opt, struct trn_optim_counters *out)
{
    if (!opt || !out) return -EINVAL;
    out->steps = opt->steps;
    out->last_opt_step = opt->last_opt_step;
    return 0;
}

int trn_optim_set_counters(struct trn_optim *opt, const struct trn_optim_counters *c)
{
    if (!opt || !c || c->steps < 0 || c->last_opt_step < -1) return -EINVAL;
    opt->steps = c->steps;
    opt->last_opt_step = c->last_opt_step;
    return 0;
}

float *trn_optim_state(struct trn_optim *opt, int k, size_t *len)
{
    if (!opt || k < 0 || k > 1) return NULL;
    float *const s = k == 0 ? opt->s0 : opt->s1;
    if (len) *len = s ? opt->len : 0;
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* EMA                                                                                      */

int trn_ema_create(const struct trn_model *m, struct trn_ema **out)
{
    if (!m || !out) return -EINVAL;
    struct trn_ema *const e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    const int rc = kern_ctx_create(NULL, &e->kc);
    if (rc < 0) {
        free(e);
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    e->m = m;
    const enum trn_arena which[2] = { TRN_ARENA_PARAM, TRN_ARENA_BUFFER };
    for (int k = 0; k < 2; k++) {
        e->len[k] = trn_model_info(m)->arena_len[which[k]];
        e->arena[k] = malloc((e->len[k] ? e->len[k] : 1) * sizeof(float));
        if (!e->arena[k]) {
            trn_ema_destroy(e);
            return -ENOMEM;
        }
        if (e->len[k])
            memcpy(e->arena[k], trn_model_arena_const(m, which[k]), e->len[k] * sizeof(float));
    }
    *out = e;
    return 0;
}

void trn_ema_destroy(struct trn_ema *e)
{
    if (!e) return;
    kern_ctx_destroy(e->kc);
    free(e->arena[0]);
    free(e->arena[1]);
    free(e);
}

double trn_ema_decay(int64_t updates)
{
    return 0.9999 * (1.0 - exp(-(double)updates / 2000.0));
}

int trn_ema_update(struct trn_ema *e, const float *params, const float *buffers)
{
    if (!e || !params || !buffers) return -EINVAL;
    e->updates++;
    const double d = trn_ema_decay(e->updates);
    /* v *= d; v += (1 - d) * msd[k]: two float32 ops with python's doubles rounded. */
    const float df = (float)d, omd = (float)(1.0 - d);
    const float *const src[2] = { params, buffers };
    for (int k = 0; k < 2; k++)
        if (kern_ref_ema_update(e->kc, e->arena[k], src[k], e->len[k], df, omd) < 0) return -EINVAL;
    return 0;
}

float *trn_ema_arena(struct trn_ema *e, enum trn_arena a)
{
    if (!e) return NULL;
    if (a == TRN_ARENA_PARAM) return e->arena[0];
    if (a == TRN_ARENA_BUFFER) return e->arena[1];
    return NULL;
}

int64_t trn_ema_updates(const struct trn_ema *e)
{
    return e ? e->updates : 0;
}

void trn_ema_set_updates(struct trn_ema *e, int64_t updates)
{
    if (e && updates >= 0) e->updates = updates;
}

/* ---------------------------------------------------------------------------------------- */
/* The step on a kern backend                                                               */

struct trn_optim_dev {
    struct trn_optim *opt;
    const struct kern_ops *K;
    struct kern_ctx *ctx;
    struct kern_optim_seg *seg; /* backend memory: opt's table */
    float *mom;                 /* backend memory: momentum buffers, PARAM layout */
    double *sumsq;              /* backend memory: sum of squares of the last step */
    int32_t *found_inf;         /* backend memory: overflow flag for the caller */
    void *lowp;                 /* borrowed: the 16-bit copy each step rewrites, or NULL */
    int lowp_dtype;             /* its KERN_DT_* */
    bool ordered;               /* seg carries a lowp order (trn_optim_dev_set_params_lowp) */
};

int trn_optim_dev_create(struct trn_optim *opt, const struct kern_ops *K, struct kern_ctx *ctx,
                         struct trn_optim_dev **out)
{
    if (!opt || !K || !ctx || !out || !K->sgd_step || !K->optim_sumsq) return -EINVAL;
    if (K->backend != kern_ctx_backend(ctx)) return -EINVAL;
    if (opt->o.kind != TRN_OPTIM_SGD) return -ENOTSUP;
    struct trn_optim_dev *const dv = calloc(1, sizeof *dv);
    if (!dv) return -ENOMEM;
    dv->opt = opt;
    dv->K = K;
    dv->ctx = ctx;
    const size_t seg_bytes = opt->n_seg * sizeof *opt->seg;
    int rc = kern_mem_alloc(ctx, opt->len * sizeof(float), (void **)&dv->mom);
    if (rc == 0) rc = kern_mem_alloc(ctx, sizeof(double), (void **)&dv->sumsq);
    if (rc == 0) rc = kern_mem_alloc(ctx, sizeof(int32_t), (void **)&dv->found_inf);
    if (rc == 0 && seg_bytes) rc = kern_mem_alloc(ctx, seg_bytes, (void **)&dv->seg);
    if (rc == 0 && seg_bytes) rc = kern_mem_copy(ctx, dv->seg, opt->seg, seg_bytes, KERN_COPY_H2D);
    if (rc < 0) {
        trn_optim_dev_destroy(dv);
        return rc;
    }
    *out = dv;
    return 0;
}

void trn_optim_dev_destroy(struct trn_optim_dev *dv)
{
    if (!dv) return;
    kern_mem_free(dv->ctx, dv->seg);
    kern_mem_free(dv->ctx, dv->mom);
    kern_mem_free(dv->ctx, dv->sumsq);
    kern_mem_free(dv->ctx, dv->found_inf);
    free(dv);
}

int trn_optim_dev_step(struct trn_optim_dev *dv, float *params, const float *grads,
                       const struct trn_optim_sched *s, const struct trn_optim_dev_step_opts *o)
{
    if (!dv || !params || !grads || !s) return -EINVAL;
    for (int g = 0; g < 3; g++)
        if (!isfinite(s->lr[g])) return -EINVAL;
    struct trn_optim *const opt = dv->opt;
    const struct trn_optim_dev_step_opts none = { 1.0f, 0, NULL, 0.0 };
    if (!o) o = &none;
    if (!isfinite(o->grad_scale) || (o->ema && !isfinite(o->ema_decay))) return -EINVAL;
    struct kern_sgd d;
    optim_sgd_desc(opt, s, &d);
    d.grad_scale = o->grad_scale;
    d.max_norm = opt->o.max_grad_norm > 0.0 ? (float)opt->o.max_grad_norm : 0.0f;
    d.skip_nonfinite = o->skip_nonfinite != 0;
    d.ema_decay = (float)o->ema_decay;
    d.ema_weight = (float)(1.0 - o->ema_decay);
    d.params_lowp = dv->lowp;
    d.lowp_dtype = dv->lowp_dtype;
    if (opt->n_seg) {
        int rc = 0;
        if (d.max_norm > 0.0f || d.skip_nonfinite)
            rc = dv->K->optim_sumsq(dv->ctx, dv->sumsq, grads, dv->seg, opt->n_seg, opt->total);
        if (rc == 0)
            rc = dv->K->sgd_step(dv->ctx, &d, params, dv->mom, o->ema, grads, dv->seg,
                                 d.max_norm > 0.0f || d.skip_nonfinite ? dv->sumsq : NULL, NULL);
        if (rc < 0) return rc;
    }
    opt->steps++;
    return 0;
}

int trn_optim_dev_dyn_fill(const struct trn_optim_dev *dv, const struct trn_optim_sched *s,
                           const struct trn_optim_dev_step_opts *o, struct kern_sgd_dyn *out)
{
    if (!dv || !s || !out) return -EINVAL;
    for (int g = 0; g < 3; g++)
        if (!isfinite(s->lr[g])) return -EINVAL;
    const struct trn_optim_dev_step_opts none = { 1.0f, 0, NULL, 0.0 };
    if (!o) o = &none;
    if (!isfinite(o->grad_scale) || (o->ema && !isfinite(o->ema_decay))) return -EINVAL;
    /* the descriptor trn_optim_dev_step would build, so the roundings are its own */
    struct kern_sgd d;
    optim_sgd_desc(dv->opt, s, &d);
    memset(out, 0, sizeof *out);
    for (int g = 0; g < KERN_OPTIM_MAX_GROUPS; g++)
        out->group[g] = d.group[g];
    out->first = d.first;
    out->grad_scale = o->grad_scale;
    out->ema_decay = o->ema ? (float)o->ema_decay : 0.0f;
    out->ema_weight = o->ema ? (float)(1.0 - o->ema_decay) : 1.0f;
    return 0;
}

int trn_optim_dev_step_dyn(struct trn_optim_dev *dv, float *params, const float *grads,
                           const struct kern_sgd_dyn *dyn, const struct trn_optim_dev_step_opts *o)
{
    if (!dv || !params || !grads || !dyn) return -EINVAL;
    const struct trn_optim *const opt = dv->opt;
    if (!opt->n_seg) return 0;
    /* the host fields are ignored with dyn (kern.h): only the layout and the options stay */
    const struct trn_optim_sched zero = { .accumulate = 1 };
    struct kern_sgd d;
    optim_sgd_desc(opt, &zero, &d);
    d.dyn = dyn;
    d.max_norm = opt->o.max_grad_norm > 0.0 ? (float)opt->o.max_grad_norm : 0.0f;
    d.skip_nonfinite = o && o->skip_nonfinite != 0;
    d.params_lowp = dv->lowp;
    d.lowp_dtype = dv->lowp_dtype;
    const bool norm = d.max_norm > 0.0f || d.skip_nonfinite;
    int rc = 0;
    if (norm) rc = dv->K->optim_sumsq(dv->ctx, dv->sumsq, grads, dv->seg, opt->n_seg, opt->total);
    if (rc == 0)
        rc = dv->K->sgd_step(dv->ctx, &d, params, dv->mom, o ? o->ema : NULL, grads, dv->seg,
                             norm ? dv->sumsq : NULL, NULL);
    return rc;
}

int trn_optim_dev_set_params_lowp(struct trn_optim_dev *dv, void *params_lowp, int dtype,
                                  const struct kern_lowp_order *order)
{
    if (!dv || (params_lowp && dtype != KERN_DT_BF16 && dtype != KERN_DT_F16)) return -EINVAL;
    const struct trn_optim *const opt = dv->opt;
    if ((order || dv->ordered) && opt->n_seg) {
        /* the device table with each segment's lowp order (checked by the prepare), or back to
         * the plain one */
        const size_t bytes = opt->n_seg * sizeof *opt->seg;
        struct kern_optim_seg *const t = malloc(bytes);
        if (!t) return -ENOMEM;
        memcpy(t, opt->seg, bytes);
        for (size_t i = 0; order && i < opt->n_seg; i++) {
            t[i].lowp = order[opt->seg_tensor[i]];
        }
        size_t total = 0;
        int rc = kern_optim_segs_prepare(t, opt->n_seg, opt->len, 3, &total);
        if (rc == 0) rc = kern_mem_copy(dv->ctx, dv->seg, t, bytes, KERN_COPY_H2D);
        free(t);
        if (rc < 0) return rc;
    }
    dv->ordered = order != NULL;
    dv->lowp = params_lowp;
    dv->lowp_dtype = params_lowp ? dtype : 0;
    return 0;
}

int trn_optim_dev_zero_grad(struct trn_optim_dev *dv, float *grads)
{
    if (!dv || !grads) return -EINVAL;
    return kern_mem_zero(dv->ctx, grads, dv->opt->len * sizeof(float));
}

void *trn_optim_dev_buffer(struct trn_optim_dev *dv, int k)
{
    if (!dv) return NULL;
    if (k == 0) return dv->mom;
    if (k == 1) return dv->sumsq;
    if (k == 2) return dv->found_inf;
    return NULL;
}

const char *trn_optim_strerror(int rc)
{
    if (rc == -ENOTSUP) return "not supported on the device (Adam/AdamW stay on the host)";
    return trn_strerror(rc);
}
