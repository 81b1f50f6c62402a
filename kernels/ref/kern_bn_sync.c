/*
 * Batch norm and BN+SiLU in phases (SyncBatchNorm), CPU reference. Contracts in kern.h,
 * "Batch norm in phases".
 *
 * Shapes (NCHW, float32): x, y, dx, dy (n, c, hw) with hw = h * w, x and dx dense, y and dy
 * stepping d->y_nstride elements per image (0: dense; kern_bn.c); gamma, beta,
 * running_mean, running_var, save_mean, save_invstd, dgamma, dbeta (c); sums
 * (KERN_BN_SUMS_LEN(c) = 2c + 1 doubles): two per-channel sums, then the element count.
 *
 * Every per-element loop is kern_bn.c's, shared through kern_bn_common.h: stats takes the
 * channel moments of the fused training forward (kern_bn_moments) and forms sum x = N mean and
 * sum x^2 = M2 + N mean^2 in double; fwd_apply computes mean = S1 / N, var = S2 / N - mean^2
 * (double) and applies y = x a + b (kern_bn_apply_channel); bwd_reduce is the fused backward's
 * first pass (kern_bn_dz_chunk, kern_bn_grad_sums), bwd_apply its second with the summed means
 * (kern_bn_dx_channel).
 * So with one rank the phases give the fused ops' results up to the rounding of the variance.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dgamma and dbeta overwrite unless
 * accum has KERN_ACCUM_DPARAM. Overwritten buffers are never read.
 * Threads: channels are split over the context's threads; every value is computed the same way
 * whatever the split, so results do not depend on the thread count.
 */
#include <math.h>

#include "kern_bn_common.h"
#include "kern_internal.h"

/* Everything a phase needs, shared by its workers; each worker takes a range of channels. */
struct bns_job {
    const struct kern_bn *d;
    double *sums;                      /* stats, bwd_reduce: out */
    const double *sums_in;             /* fwd_apply, bwd_apply: the summed buffer */
    float *y, *dx, *dgamma, *dbeta;    /* outputs (NULL where unused) */
    float *save_mean, *save_invstd;    /* fwd_apply: out, may be NULL */
    float *running_mean, *running_var; /* fwd_apply: updated, or NULL */
    const float *x, *dy, *gamma, *beta;
    const float *mean_in, *invstd_in; /* backward: the forward's saved stats */
    unsigned accum;
    int silu;
};

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                  */

static void stats_task(void *arg, int w, int nw)
{
    const struct bns_job *const j = arg;
    const struct kern_bn *const d = j->d;
    size_t lo, hi;
    kern_share((size_t)d->c, w, nw, &lo, &hi);
    for (size_t c = lo; c < hi; c++) {
        double mean, q, seen;
        kern_bn_moments(d, c, j->x, &mean, &q, &seen);
        j->sums[c] = seen * mean;
        j->sums[(size_t)d->c + c] = q + seen * mean * mean;
    }
}

int kern_ref_bn_stats(struct kern_ctx *ctx, const struct kern_bn *d, double *restrict sums,
                      const float *restrict x)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!sums || !x, -EINVAL);
    struct bns_job j = { .d = d, .sums = sums, .x = x };
    kern_parallel(ctx, stats_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    sums[2 * (size_t)d->c] = (double)d->n * (double)d->hw;
    return 0;
}

void kern_bn_sums_coef(const struct kern_bn *d, size_t c, const double *restrict sums,
                       float *restrict save_mean, float *restrict save_invstd,
                       float *restrict running_mean, float *restrict running_var,
                       const float *restrict gamma, const float *restrict beta, float *a, float *b)
{
    const size_t cc = (size_t)d->c;
    const double cnt = sums[2 * cc];
    double mean, var;
    kern_bn_sums_moments(sums, cc, c, &mean, &var);
    const double invstd = 1.0 / sqrt(var + (double)d->eps);
    if (save_mean) save_mean[c] = (float)mean;
    if (save_invstd) save_invstd[c] = (float)invstd;
    if (running_mean) {
        const double m = d->momentum;
        running_mean[c] = (float)((1.0 - m) * running_mean[c] + m * mean);
        running_var[c] = (float)((1.0 - m) * running_var[c] + m * var * cnt / (cnt - 1.0));
    }
    *a = (float)(gamma[c] * invstd);
    *b = (float)(beta[c] - mean * gamma[c] * invstd);
}

static void fwd_apply_task(void *arg, int w, int nw)
{
    const struct bns_job *const j = arg;
    const struct kern_bn *const d = j->d;
    size_t lo, hi;
    kern_share((size_t)d->c, w, nw, &lo, &hi);
    for (size_t c = lo; c < hi; c++) {
        float a, b;
        kern_bn_sums_coef(d, c, j->sums_in, j->save_mean, j->save_invstd, j->running_mean,
                          j->running_var, j->gamma, j->beta, &a, &b);
        kern_bn_apply_channel(d, c, j->y, j->x, a, b, j->silu);
    }
}

static int fwd_apply_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                            float *restrict save_mean, float *restrict save_invstd,
                            float *restrict running_mean, float *restrict running_var,
                            const float *restrict x, const float *restrict gamma,
                            const float *restrict beta, const double *restrict sums, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!y || !x || !gamma || !beta || !sums, -EINVAL);
    KERN_RETURN_IF(kern_bn_check_running(d, running_mean, running_var) < 0, -EINVAL);
    struct bns_job j = { .d = d,
                         .sums_in = sums,
                         .y = y,
                         .save_mean = save_mean,
                         .save_invstd = save_invstd,
                         .running_mean = running_mean,
                         .running_var = running_var,
                         .x = x,
                         .gamma = gamma,
                         .beta = beta,
                         .silu = silu };
    kern_parallel(ctx, fwd_apply_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                          float *restrict save_mean, float *restrict save_invstd,
                          float *restrict running_mean, float *restrict running_var,
                          const float *restrict x, const float *restrict gamma,
                          const float *restrict beta, const double *restrict sums)
{
    return fwd_apply_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                            beta, sums, 0);
}

int kern_ref_bn_silu_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                               float *restrict save_mean, float *restrict save_invstd,
                               float *restrict running_mean, float *restrict running_var,
                               const float *restrict x, const float *restrict gamma,
                               const float *restrict beta, const double *restrict sums)
{
    return fwd_apply_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                            beta, sums, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Backward                                                                                 */

static void bwd_reduce_task(void *arg, int w, int nw)
{
    const struct bns_job *const j = arg;
    const struct kern_bn *const d = j->d;
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw, ysn = kern_bn_y_nstride(d);
    size_t lo, hi;
    kern_share((size_t)d->c, w, nw, &lo, &hi);
    float tmp[KERN_BN_CHUNK];
    for (size_t c = lo; c < hi; c++) {
        const float mean = j->mean_in[c], invstd = j->invstd_in[c];
        const float g = j->silu ? j->gamma[c] : 0.0f, bt = j->silu ? j->beta[c] : 0.0f;
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < d->n; i++) {
            const size_t off = (size_t)i * plane + c * hw, yoff = (size_t)i * ysn + c * hw;
            for (size_t j0 = 0; j0 < hw; j0 += KERN_BN_CHUNK) {
                const size_t len = hw - j0 < KERN_BN_CHUNK ? hw - j0 : KERN_BN_CHUNK;
                const float *gz = j->dy + yoff + j0;
                if (j->silu) {
                    kern_bn_dz_chunk(tmp, gz, j->x + off + j0, len, mean, invstd, g, bt);
                    gz = tmp;
                }
                float s1, s2;
                kern_bn_grad_sums(gz, j->x + off + j0, len, mean, invstd, &s1, &s2);
                sdy += s1;
                sdyx += s2;
            }
        }
        j->sums[c] = sdy;
        j->sums[(size_t)d->c + c] = sdyx;
        if (j->dgamma) {
            if (j->accum & KERN_ACCUM_DPARAM) {
                j->dgamma[c] += (float)sdyx;
                j->dbeta[c] += (float)sdy;
            } else {
                j->dgamma[c] = (float)sdyx;
                j->dbeta[c] = (float)sdy;
            }
        }
    }
}

static int bwd_reduce_common(struct kern_ctx *ctx, const struct kern_bn *d, double *restrict sums,
                             float *restrict dgamma, float *restrict dbeta,
                             const float *restrict dy, const float *restrict x,
                             const float *restrict gamma, const float *restrict beta,
                             const float *restrict save_mean, const float *restrict save_invstd,
                             unsigned accum, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!sums || !dy || !x || !save_mean || !save_invstd, -EINVAL);
    KERN_RETURN_IF(!dgamma != !dbeta, -EINVAL);
    KERN_RETURN_IF(silu && (!gamma || !beta), -EINVAL);
    struct bns_job j = { .d = d,
                         .sums = sums,
                         .dgamma = dgamma,
                         .dbeta = dbeta,
                         .x = x,
                         .dy = dy,
                         .gamma = gamma,
                         .beta = beta,
                         .mean_in = save_mean,
                         .invstd_in = save_invstd,
                         .accum = accum,
                         .silu = silu };
    kern_parallel(ctx, bwd_reduce_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    sums[2 * (size_t)d->c] = (double)d->n * (double)d->hw;
    return 0;
}

int kern_ref_bn_bwd_reduce(struct kern_ctx *ctx, const struct kern_bn *d, double *restrict sums,
                           float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                           const float *restrict x, const float *restrict gamma,
                           const float *restrict beta, const float *restrict save_mean,
                           const float *restrict save_invstd, unsigned accum)
{
    return bwd_reduce_common(ctx, d, sums, dgamma, dbeta, dy, x, gamma, beta, save_mean,
                             save_invstd, accum, 0);
}

int kern_ref_bn_silu_bwd_reduce(struct kern_ctx *ctx, const struct kern_bn *d,
                                double *restrict sums, float *restrict dgamma,
                                float *restrict dbeta, const float *restrict dy,
                                const float *restrict x, const float *restrict gamma,
                                const float *restrict beta, const float *restrict save_mean,
                                const float *restrict save_invstd, unsigned accum)
{
    return bwd_reduce_common(ctx, d, sums, dgamma, dbeta, dy, x, gamma, beta, save_mean,
                             save_invstd, accum, 1);
}

static void bwd_apply_task(void *arg, int w, int nw)
{
    const struct bns_job *const j = arg;
    const struct kern_bn *const d = j->d;
    const size_t cc = (size_t)d->c;
    const double cnt = j->sums_in[2 * cc];
    size_t lo, hi;
    kern_share(cc, w, nw, &lo, &hi);
    for (size_t c = lo; c < hi; c++)
        kern_bn_dx_channel(d, c, j->dx, j->dy, j->x, j->mean_in[c], j->invstd_in[c], j->gamma[c],
                           j->silu ? j->beta[c] : 0.0f, (float)(j->sums_in[c] / cnt),
                           (float)(j->sums_in[cc + c] / cnt), (j->accum & KERN_ACCUM_DX) != 0,
                           j->silu, 0);
}

static int bwd_apply_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                            const float *restrict dy, const float *restrict x,
                            const float *restrict gamma, const float *restrict beta,
                            const float *restrict save_mean, const float *restrict save_invstd,
                            const double *restrict sums, unsigned accum, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!dx || !dy || !x || !gamma || !save_mean || !save_invstd || !sums, -EINVAL);
    KERN_RETURN_IF(silu && !beta, -EINVAL);
    struct bns_job j = { .d = d,
                         .sums_in = sums,
                         .dx = dx,
                         .x = x,
                         .dy = dy,
                         .gamma = gamma,
                         .beta = beta,
                         .mean_in = save_mean,
                         .invstd_in = save_invstd,
                         .accum = accum,
                         .silu = silu };
    kern_parallel(ctx, bwd_apply_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_bwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                          const float *restrict dy, const float *restrict x,
                          const float *restrict gamma, const float *restrict beta,
                          const float *restrict save_mean, const float *restrict save_invstd,
                          const double *restrict sums, unsigned accum)
{
    return bwd_apply_common(ctx, d, dx, dy, x, gamma, beta, save_mean, save_invstd, sums, accum, 0);
}

int kern_ref_bn_silu_bwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                               const float *restrict dy, const float *restrict x,
                               const float *restrict gamma, const float *restrict beta,
                               const float *restrict save_mean, const float *restrict save_invstd,
                               const double *restrict sums, unsigned accum)
{
    return bwd_apply_common(ctx, d, dx, dy, x, gamma, beta, save_mean, save_invstd, sums, accum, 1);
}
