/*
 * BN + SiLU + residual add, fused (the YOLOv5 bottleneck's x + cv2(cv1(x))), CPU reference.
 * Contracts in kern.h, "BN + SiLU + residual add".
 *
 * Shapes (NCHW, float32): x (n, c, hw) dense; y and r (n, c, hw) stepping d->y_nstride and
 * d->r_nstride elements from image to image (0: c hw, dense), so either may be a channel slice
 * of a wider tensor whose other channels are never touched; gamma, beta, running_mean,
 * running_var, save_mean, save_invstd (c); sums (KERN_BN_SUMS_LEN(c) doubles).
 *
 * y = silu(x a + b) + r, with the per-channel a, b of the training forward (batch statistics),
 * the eval forward (running statistics) or SyncBatchNorm's apply phase (summed statistics),
 * each from the helper the unfused op uses (kern_bn_common.h). The SiLU output goes through
 * kern_bn_apply_channel itself, one L1-sized span at a time straight into y, and r is added
 * while the span is still in L1: so the result is the unfused composition's bit for bit
 * (bn_silu_fwd_* then add_fwd, the same compiled loop, and a plain float add that cannot be
 * contracted with the SiLU's product), while memory sees one pass: x and r read, y written once.
 *
 * No gradients here (forward only): the backward is kern_ref_bn_silu_bwd on the sum's gradient.
 * Threads: channels are split over the context's threads; every value is computed the same way
 * whatever the split, so results do not depend on the thread count.
 */
#include <math.h>

#include "kern_bn_common.h"
#include "kern_internal.h"

enum { RESADD_TRAIN, RESADD_EVAL, RESADD_APPLY };

/* Everything an op needs, shared by its workers; each worker takes a range of channels. */
struct resadd_job {
    const struct kern_bn *d;
    float *y;
    float *save_mean, *save_invstd, *running_mean, *running_var; /* train, apply: out or NULL */
    const float *x, *gamma, *beta, *r;
    const float *rmean_in, *rvar_in; /* eval: the running stats */
    const double *sums;              /* apply: the summed statistics */
    int mode;                        /* RESADD_* */
};

/* Elements per span: 4 KiB of y, so the SiLU output is still in L1 when r is added to it. */
#define RESADD_SPAN KERN_BN_CHUNK

void kern_bn_silu_add_span(float *restrict y, const float *restrict x, const float *restrict r,
                           size_t len, float a, float b)
{
    for (size_t j0 = 0; j0 < len; j0 += RESADD_SPAN) {
        const size_t n = len - j0 < RESADD_SPAN ? len - j0 : RESADD_SPAN;
        /* the BN+SiLU op's own loop on a one-image, one-channel span of n elements */
        struct kern_bn span;
        kern_bn_init(&span, 1, 1, (int)n);
        kern_bn_apply_channel(&span, 0, y + j0, x + j0, a, b, 1);
        if (r)
            for (size_t j = j0; j < j0 + n; j++)
                y[j] = y[j] + r[j];
    }
}

/* y = silu(x a + b) + r over channel c of every image. */
static void resadd_channel(const struct kern_bn *d, size_t c, float *restrict y,
                           const float *restrict x, const float *restrict r, float a, float b)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    const size_t ysn = d->y_nstride ? d->y_nstride : plane;
    const size_t rsn = d->r_nstride ? d->r_nstride : plane;
    for (int i = 0; i < d->n; i++)
        kern_bn_silu_add_span(y + (size_t)i * ysn + c * hw, x + (size_t)i * plane + c * hw,
                              r + (size_t)i * rsn + c * hw, hw, a, b);
}

static void resadd_task(void *arg, int w, int nw)
{
    const struct resadd_job *const j = arg;
    const struct kern_bn *const d = j->d;
    size_t lo, hi;
    kern_share((size_t)d->c, w, nw, &lo, &hi);
    for (size_t c = lo; c < hi; c++) {
        float a, b;
        if (j->mode == RESADD_TRAIN) {
            /* bn_train_task's coefficients (kern_bn.c) */
            double mean, invstd;
            kern_bn_channel_stats(d, (int)c, j->x, &mean, &invstd, j->save_mean, j->save_invstd,
                                  j->running_mean, j->running_var);
            a = (float)(j->gamma[c] * invstd);
            b = (float)(j->beta[c] - mean * j->gamma[c] * invstd);
        } else if (j->mode == RESADD_EVAL) {
            kern_bn_eval_coef(j->gamma[c], j->beta[c], j->rmean_in[c], j->rvar_in[c], d->eps, &a,
                              &b);
        } else {
            kern_bn_sums_coef(d, c, j->sums, j->save_mean, j->save_invstd, j->running_mean,
                              j->running_var, j->gamma, j->beta, &a, &b);
        }
        resadd_channel(d, c, j->y, j->x, j->r, a, b);
    }
}

/* The checks every variant shares: the BN ones (y_nstride included), r_nstride, pointers. */
static int resadd_check(struct kern_ctx *ctx, const struct kern_bn *d, const float *y,
                        const float *x, const float *gamma, const float *beta, const float *r)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    /* kern_bn_check has refused a y_nstride narrower than the channels; r likewise */
    KERN_RETURN_IF(d->r_nstride && d->r_nstride < (size_t)d->c * (size_t)d->hw, -EINVAL);
    KERN_RETURN_IF(!y || !x || !gamma || !beta || !r, -EINVAL);
    return 0;
}

static int resadd_run(struct kern_ctx *ctx, struct resadd_job *j)
{
    const struct kern_bn *const d = j->d;
    kern_parallel(ctx, resadd_task, j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_silu_add_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                                   float *restrict save_mean, float *restrict save_invstd,
                                   float *restrict running_mean, float *restrict running_var,
                                   const float *restrict x, const float *restrict gamma,
                                   const float *restrict beta, const float *restrict r)
{
    const int rc = resadd_check(ctx, d, y, x, gamma, beta, r);
    if (rc < 0) return rc;
    KERN_RETURN_IF(kern_bn_check_running(d, running_mean, running_var) < 0, -EINVAL);
    struct resadd_job j = { .d = d,
                            .y = y,
                            .save_mean = save_mean,
                            .save_invstd = save_invstd,
                            .running_mean = running_mean,
                            .running_var = running_var,
                            .x = x,
                            .gamma = gamma,
                            .beta = beta,
                            .r = r,
                            .mode = RESADD_TRAIN };
    return resadd_run(ctx, &j);
}

int kern_ref_bn_silu_add_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                                  const float *restrict x, const float *restrict gamma,
                                  const float *restrict beta, const float *restrict running_mean,
                                  const float *restrict running_var, const float *restrict r)
{
    const int rc = resadd_check(ctx, d, y, x, gamma, beta, r);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!running_mean || !running_var, -EINVAL);
    struct resadd_job j = { .d = d,
                            .y = y,
                            .x = x,
                            .gamma = gamma,
                            .beta = beta,
                            .r = r,
                            .rmean_in = running_mean,
                            .rvar_in = running_var,
                            .mode = RESADD_EVAL };
    return resadd_run(ctx, &j);
}

int kern_ref_bn_silu_add_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                                   float *restrict save_mean, float *restrict save_invstd,
                                   float *restrict running_mean, float *restrict running_var,
                                   const float *restrict x, const float *restrict gamma,
                                   const float *restrict beta, const double *restrict sums,
                                   const float *restrict r)
{
    const int rc = resadd_check(ctx, d, y, x, gamma, beta, r);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!sums, -EINVAL);
    KERN_RETURN_IF(kern_bn_check_running(d, running_mean, running_var) < 0, -EINVAL);
    struct resadd_job j = { .d = d,
                            .y = y,
                            .save_mean = save_mean,
                            .save_invstd = save_invstd,
                            .running_mean = running_mean,
                            .running_var = running_var,
                            .x = x,
                            .gamma = gamma,
                            .beta = beta,
                            .r = r,
                            .sums = sums,
                            .mode = RESADD_APPLY };
    return resadd_run(ctx, &j);
}
