/*
 * A small training step for the graph tests (test_graph.c on the CPU, test_cuda_parity_graph.c on
 * the GPU), written once against struct kern_ops and kern_mem_*, so it runs on either backend:
 *   y = conv3x3(x, w); a = silu(bn_train(y)) (running stats updated); loss = sum(a^2) / 2, so
 *   dL/da = a; dgamma, dbeta, dy = bn_silu_bwd; dw = conv2d_bwd_filter; sumsq = |grads|^2;
 *   SGD (nesterov, weight decay on w, clipping, fused EMA of the parameters); EMA of the running
 *   stats (ema_update, or ema_update_dyn when the scalars are in memory).
 * Parameters live in one flat buffer with padding between the tensors (canaries there), as the
 * trainer's arenas. The per-step scalars follow a warmup: lr and momentum change every step,
 * `first` on step 0 only, grad_scale alternates between 1 and 0.5, ModelEMA's decay grows.
 * Include after kern.h, kern_testutil.h and tap.h.
 */
#ifndef GRAPH_TESTUTIL_H
#define GRAPH_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GT_N     2
#define GT_CIN   4
#define GT_HW    12
#define GT_COUT  8
#define GT_WN    (GT_COUT * GT_CIN * 9)
#define GT_W_OFF 0
#define GT_G_OFF (GT_WN + 5)
#define GT_B_OFF (GT_G_OFF + GT_COUT + 3)
#define GT_LEN   (GT_B_OFF + GT_COUT + 4)
#define GT_XN    (GT_N * GT_CIN * GT_HW * GT_HW)
#define GT_YN    (GT_N * GT_COUT * GT_HW * GT_HW)

/* Host copies of the state that a step changes (and the input). */
struct gt_host {
    float x[GT_XN];
    float params[GT_LEN], mom[GT_LEN], ema[GT_LEN], grads[GT_LEN];
    float stats[2 * GT_COUT], ema_stats[2 * GT_COUT];
    double sumsq;
};

struct gt_step {
    const struct kern_ops *K;
    struct kern_ctx *ctx;
    struct kern_conv2d cd;
    struct kern_bn bd;
    size_t total;        /* elements in the segments */
    struct kern_sgd sgd; /* host descriptor; sgd.dyn = dyn on the in-memory path */
    /* backend memory */
    float *x, *params, *mom, *ema, *grads;
    float *y, *act, *dy, *save_mean, *save_invstd;
    float *stats, *ema_stats; /* running mean | running var, and their EMA */
    double *sumsq;
    struct kern_optim_seg *seg;
    struct kern_sgd_dyn *dyn; /* NULL: the scalars are host fields of sgd */
};

static inline void gt_bail(const char *what, int rc)
{
    printf("Bail out! %s: %s\n", what, kern_strerror(rc));
    exit(99);
}

static inline void *gt_alloc(struct kern_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    const int rc = kern_mem_alloc(ctx, bytes, &p);
    if (rc < 0) gt_bail("kern_mem_alloc", rc);
    return p;
}

static inline void gt_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir)
{
    const int rc = kern_mem_copy(ctx, dst, src, bytes, dir);
    if (rc < 0) gt_bail("kern_mem_copy", rc);
}

/* A random start: the same for every step object made from the same h. */
static inline void gt_host_init(struct gt_host *h)
{
    memset(h, 0, sizeof(*h));
    kt_fill(h->x, GT_XN, -1.0f, 1.0f);
    for (size_t i = 0; i < GT_LEN; i++)
        h->params[i] = h->ema[i] = h->mom[i] = h->grads[i] = kt_canary();
    kt_fill(h->params + GT_W_OFF, GT_WN, -0.3f, 0.3f);
    kt_fill(h->params + GT_G_OFF, GT_COUT, 0.8f, 1.2f);
    kt_fill(h->params + GT_B_OFF, GT_COUT, -0.1f, 0.1f);
    memcpy(h->ema + GT_W_OFF, h->params + GT_W_OFF, GT_WN * sizeof(float));
    memcpy(h->ema + GT_G_OFF, h->params + GT_G_OFF, GT_COUT * sizeof(float));
    memcpy(h->ema + GT_B_OFF, h->params + GT_B_OFF, GT_COUT * sizeof(float));
    for (int c = 0; c < GT_COUT; c++) {
        h->stats[c] = h->ema_stats[c] = 0.0f;
        h->stats[GT_COUT + c] = h->ema_stats[GT_COUT + c] = 1.0f;
    }
}

/* The scalars of step k (0-based), as the trainer's warmup makes them. */
static inline void gt_scalars(int k, struct kern_sgd_dyn *s)
{
    memset(s, 0, sizeof(*s));
    const double f = (double)(k + 1) / 8.0;
    s->group[0].lr = (float)(0.02 * f);
    s->group[1].lr = (float)(0.02 * f);
    s->group[2].lr = (float)(0.1 - 0.08 * f); /* warmup_bias_lr falling to lr */
    for (int g = 0; g < 3; g++)
        s->group[g].momentum = (float)(0.8 + 0.137 * f);
    s->group[0].weight_decay = 5e-4f;
    s->first = k == 0;
    s->grad_scale = k % 2 ? 0.5f : 1.0f;
    const double d = 0.9999 * (1.0 - exp(-(double)(k + 1) / 3.0));
    s->ema_decay = (float)d;
    s->ema_weight = (float)(1.0 - d);
}

/* Puts the scalars of s into the host descriptor (the path without dyn). */
static inline void gt_sgd_set_host(struct kern_sgd *d, const struct kern_sgd_dyn *s)
{
    for (int g = 0; g < KERN_OPTIM_MAX_GROUPS; g++)
        d->group[g] = s->group[g];
    d->first = s->first;
    d->grad_scale = s->grad_scale;
    d->ema_decay = s->ema_decay;
    d->ema_weight = s->ema_weight;
}

/* Makes a step on ctx from h; with_dyn: the scalars in backend memory (host fields NaN, so a
 * read of them would show). */
static inline void gt_step_init(struct gt_step *S, const struct kern_ops *K, struct kern_ctx *ctx,
                                const struct gt_host *h, int with_dyn)
{
    memset(S, 0, sizeof(*S));
    S->K = K;
    S->ctx = ctx;
    kern_conv2d_init(&S->cd, GT_N, GT_CIN, GT_HW, GT_HW, GT_COUT, 3, 1, 1);
    kern_bn_init(&S->bd, GT_N, GT_COUT, GT_HW * GT_HW);
    size_t ws = 0;
    int rc = K->conv2d_workspace_size(ctx, &S->cd, &ws); /* plans the shape on CUDA */
    if (rc == 0) rc = kern_ctx_reserve(ctx, ws);
    if (rc < 0) gt_bail("conv workspace", rc);
    struct kern_optim_seg seg[3] = { { .offset = GT_W_OFF, .count = GT_WN, .group = 0 },
                                     { .offset = GT_G_OFF, .count = GT_COUT, .group = 1 },
                                     { .offset = GT_B_OFF, .count = GT_COUT, .group = 2 } };
    if (kern_optim_segs_prepare(seg, 3, GT_LEN, 3, &S->total) < 0) gt_bail("segments", -EINVAL);
    const size_t fb = sizeof(float);
    S->x = gt_alloc(ctx, GT_XN * fb);
    S->params = gt_alloc(ctx, GT_LEN * fb);
    S->mom = gt_alloc(ctx, GT_LEN * fb);
    S->ema = gt_alloc(ctx, GT_LEN * fb);
    S->grads = gt_alloc(ctx, GT_LEN * fb);
    S->y = gt_alloc(ctx, GT_YN * fb);
    S->act = gt_alloc(ctx, GT_YN * fb);
    S->dy = gt_alloc(ctx, GT_YN * fb);
    S->save_mean = gt_alloc(ctx, GT_COUT * fb);
    S->save_invstd = gt_alloc(ctx, GT_COUT * fb);
    S->stats = gt_alloc(ctx, 2 * GT_COUT * fb);
    S->ema_stats = gt_alloc(ctx, 2 * GT_COUT * fb);
    S->sumsq = gt_alloc(ctx, sizeof(double));
    S->seg = gt_alloc(ctx, sizeof seg);
    gt_copy(ctx, S->seg, seg, sizeof seg, KERN_COPY_H2D);
    gt_copy(ctx, S->x, h->x, sizeof h->x, KERN_COPY_H2D);
    gt_copy(ctx, S->params, h->params, sizeof h->params, KERN_COPY_H2D);
    gt_copy(ctx, S->mom, h->mom, sizeof h->mom, KERN_COPY_H2D);
    gt_copy(ctx, S->ema, h->ema, sizeof h->ema, KERN_COPY_H2D);
    gt_copy(ctx, S->grads, h->grads, sizeof h->grads, KERN_COPY_H2D);
    gt_copy(ctx, S->stats, h->stats, sizeof h->stats, KERN_COPY_H2D);
    gt_copy(ctx, S->ema_stats, h->ema_stats, sizeof h->ema_stats, KERN_COPY_H2D);
    S->sgd.n_seg = 3;
    S->sgd.total = S->total;
    S->sgd.n_groups = 3;
    S->sgd.nesterov = 1;
    S->sgd.max_norm = 2.0f;
    if (with_dyn) {
        S->dyn = gt_alloc(ctx, sizeof(struct kern_sgd_dyn));
        S->sgd.dyn = S->dyn;
        struct kern_sgd_dyn nan;
        for (int g = 0; g < KERN_OPTIM_MAX_GROUPS; g++)
            nan.group[g].lr = nan.group[g].momentum = nan.group[g].weight_decay = NAN;
        nan.first = 1;
        nan.grad_scale = nan.ema_decay = nan.ema_weight = NAN;
        gt_sgd_set_host(&S->sgd, &nan);
    }
}

static inline void gt_step_free(struct gt_step *S)
{
    void *const p[] = { S->x,     S->params,    S->mom,   S->ema,       S->grads,
                        S->y,     S->act,       S->dy,    S->save_mean, S->save_invstd,
                        S->stats, S->ema_stats, S->sumsq, S->seg,       S->dyn };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        kern_mem_free(S->ctx, p[i]);
}

/* The step: a kern_graph_fn. Stops at the first failing op. */
static inline int gt_step_fn(void *arg)
{
    struct gt_step *const S = (struct gt_step *)arg;
    const struct kern_ops *const K = S->K;
    struct kern_ctx *const c = S->ctx;
    float *const gamma = S->params + GT_G_OFF, *const beta = S->params + GT_B_OFF;
    int rc = K->conv2d_fwd(c, &S->cd, S->y, S->x, S->params + GT_W_OFF, NULL);
    if (rc == 0)
        rc = K->bn_silu_fwd_train(c, &S->bd, S->act, S->save_mean, S->save_invstd, S->stats,
                                  S->stats + GT_COUT, S->y, gamma, beta);
    if (rc == 0)
        rc = K->bn_silu_bwd(c, &S->bd, S->dy, S->grads + GT_G_OFF, S->grads + GT_B_OFF, S->act,
                            S->y, gamma, beta, S->save_mean, S->save_invstd, 0);
    if (rc == 0) rc = K->conv2d_bwd_filter(c, &S->cd, S->grads + GT_W_OFF, S->dy, S->x, 0);
    if (rc == 0) rc = K->optim_sumsq(c, S->sumsq, S->grads, S->seg, 3, S->total);
    if (rc == 0)
        rc = K->sgd_step(c, &S->sgd, S->params, S->mom, S->ema, S->grads, S->seg, S->sumsq, NULL);
    if (rc == 0)
        rc = S->dyn ? K->ema_update_dyn(c, S->ema_stats, S->stats, 2 * GT_COUT, S->dyn)
                    : K->ema_update(c, S->ema_stats, S->stats, 2 * GT_COUT, S->sgd.ema_decay,
                                    S->sgd.ema_weight);
    return rc;
}

/* Before step k: the scalars into the descriptor (direct path) or into *dyn (in-memory path).
 * stage: host memory holding the scalars while the copy runs (pinned on CUDA in the trainer). */
static inline void gt_step_prepare(struct gt_step *S, int k, struct kern_sgd_dyn *stage)
{
    gt_scalars(k, stage);
    if (S->dyn)
        gt_copy(S->ctx, S->dyn, stage, sizeof(*stage), KERN_COPY_H2D);
    else
        gt_sgd_set_host(&S->sgd, stage);
}

/* The state after the steps (waits for the backend). */
static inline void gt_download(struct gt_step *S, struct gt_host *h)
{
    gt_copy(S->ctx, h->params, S->params, sizeof h->params, KERN_COPY_D2H);
    gt_copy(S->ctx, h->mom, S->mom, sizeof h->mom, KERN_COPY_D2H);
    gt_copy(S->ctx, h->ema, S->ema, sizeof h->ema, KERN_COPY_D2H);
    gt_copy(S->ctx, h->grads, S->grads, sizeof h->grads, KERN_COPY_D2H);
    gt_copy(S->ctx, h->stats, S->stats, sizeof h->stats, KERN_COPY_D2H);
    gt_copy(S->ctx, h->ema_stats, S->ema_stats, sizeof h->ema_stats, KERN_COPY_D2H);
    gt_copy(S->ctx, &h->sumsq, S->sumsq, sizeof h->sumsq, KERN_COPY_D2H);
}

#endif
