/*
 * Batch norm (BatchNorm2d), SiLU, and BN+SiLU fused, CPU reference.
 *
 * Shapes (NCHW, float32): x, y, dx, dy (n, c, hw) with hw = h * w; gamma, beta, running_mean,
 * running_var, save_mean, save_invstd, dgamma, dbeta (c). x and dx are dense; y and dy step
 * d->y_nstride elements from image to image (a channel slice of a concat buffer; 0: dense), so
 * y's gaps between images are never touched. SiLU ops take flat element counts.
 *
 * Training forward: per channel, mean and biased variance over N = n * hw elements (summed in
 * double, two passes); invstd = 1 / sqrt(var + eps); y = x * a + b with a = gamma * invstd,
 * b = beta - mean * a. Running stats: r = (1 - m) r + m s, with the unbiased variance
 * var * N / (N - 1). Eval forward uses the running stats.
 * Backward (batch stats): xhat = (x - mean) invstd, dbeta = sum dy, dgamma = sum dy xhat,
 * dx = gamma invstd (dy - dbeta / N - xhat dgamma / N).
 * Fused BN+SiLU: z = bn(x), y = silu(z); the backward recomputes z from x and the saved stats
 * (z is never stored) and runs the BN backward on dz = dy silu'(z).
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dgamma and dbeta overwrite unless
 * accum has KERN_ACCUM_DPARAM. Overwritten buffers are never read.
 * Threads: channels (BN) or element ranges (SiLU) are split over the context's threads; every
 * value is computed the same way whatever the split, so results do not depend on the count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compiler.h"
#include "kern_bn_common.h"
#include "kern_internal.h"

void kern_bn_init(struct kern_bn *d, int n, int c, int hw)
{
    if (!d) return;
    d->n = n;
    d->c = c;
    d->hw = hw;
    d->eps = KERN_BN_EPS;
    d->momentum = KERN_BN_MOMENTUM;
    d->y_nstride = 0;
    d->r_nstride = 0;
}

static double lanes_sum(const float *acc)
{
    double s = 0.0;
    for (int k = 0; k < KERN_BN_LANES; k++)
        s += acc[k];
    return s;
}

/* Sum of x[0..len), len <= KERN_BN_CHUNK. */
KERN_VEC_CLONES static float chunk_sum(const float *restrict x, size_t len)
{
    float acc[KERN_BN_LANES] = { 0 };
    size_t j = 0;
    for (; j + KERN_BN_LANES <= len; j += KERN_BN_LANES)
        for (int k = 0; k < KERN_BN_LANES; k++)
            acc[k] += x[j + k];
    for (; j < len; j++)
        acc[0] += x[j];
    return (float)lanes_sum(acc);
}

/* Sum of (x - m)^2 over x[0..len), len <= KERN_BN_CHUNK. */
KERN_VEC_CLONES static float chunk_sq(const float *restrict x, size_t len, float m)
{
    float acc[KERN_BN_LANES] = { 0 };
    size_t j = 0;
    for (; j + KERN_BN_LANES <= len; j += KERN_BN_LANES)
        for (int k = 0; k < KERN_BN_LANES; k++) {
            const float t = x[j + k] - m;
            acc[k] += t * t;
        }
    for (; j < len; j++) {
        const float t = x[j] - m;
        acc[0] += t * t;
    }
    return (float)lanes_sum(acc);
}

/* Everything a BN op needs, shared by its workers; each worker takes a range of channels. */
struct bn_job {
    const struct kern_bn *d;
    float *y, *dx, *dgamma, *dbeta; /* outputs (NULL where unused) */
    float *save_mean, *save_invstd, *running_mean, *running_var;
    const float *x, *dy, *gamma, *beta;                    /* inputs */
    const float *mean_in, *invstd_in, *rmean_in, *rvar_in; /* saved or running stats */
    unsigned accum;
    int silu;
};

void kern_bn_moments(const struct kern_bn *d, size_t c, const float *restrict x, double *mean_out,
                     double *m2_out, double *count)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    /*
     * One pass over memory: each L1-sized chunk is read twice (its sum, then its squares about
     * its own float mean), and the chunks are merged in double (Chan et al.'s pairwise update),
     * which keeps the two-pass accuracy without a second trip through a plane larger than L2.
     */
    double mean = 0.0, q = 0.0, seen = 0.0;
    for (int i = 0; i < d->n; i++) {
        const float *const xc = x + (size_t)i * plane + c * hw;
        for (size_t j0 = 0; j0 < hw; j0 += KERN_BN_CHUNK) {
            const size_t len = hw - j0 < KERN_BN_CHUNK ? hw - j0 : KERN_BN_CHUNK;
            const double nb = (double)len;
            const double mb = (double)chunk_sum(xc + j0, len) / nb;
            const float mf = (float)mb;
            /* sum (x - mb)^2 = sum (x - mf)^2 - len (mb - mf)^2 */
            const double qb =
                (double)chunk_sq(xc + j0, len, mf) - nb * (mb - (double)mf) * (mb - (double)mf);
            const double tot = seen + nb, delta = mb - mean;
            mean += delta * nb / tot;
            q += qb + delta * delta * seen * nb / tot;
            seen = tot;
        }
    }
    *mean_out = mean;
    *m2_out = q;
    *count = seen;
}

void kern_bn_channel_stats(const struct kern_bn *d, int c, const float *restrict x,
                           double *mean_out, double *invstd_out, float *restrict save_mean,
                           float *restrict save_invstd, float *restrict running_mean,
                           float *restrict running_var)
{
    const double cnt = (double)d->n * (double)d->hw;
    double mean, q, seen;
    kern_bn_moments(d, (size_t)c, x, &mean, &q, &seen);
    const double var = q / cnt;
    const double invstd = 1.0 / sqrt(var + (double)d->eps);
    *mean_out = mean;
    *invstd_out = invstd;
    if (save_mean) save_mean[c] = (float)mean;
    if (save_invstd) save_invstd[c] = (float)invstd;
    if (running_mean) {
        const double m = d->momentum;
        running_mean[c] = (float)((1.0 - m) * running_mean[c] + m * mean);
        running_var[c] = (float)((1.0 - m) * running_var[c] + m * var * cnt / (cnt - 1.0));
    }
}

KERN_VEC_CLONES void kern_bn_apply_channel(const struct kern_bn *d, size_t c, float *restrict y,
                                           const float *restrict x, float a, float b, int silu)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw, ysn = kern_bn_y_nstride(d);
    for (int i = 0; i < d->n; i++) {
        const float *const xc = x + (size_t)i * plane + c * hw;
        float *const yc = y + (size_t)i * ysn + c * hw;
        if (silu) {
            for (size_t j = 0; j < hw; j++) {
                const float z = xc[j] * a + b;
                yc[j] = z * kern_bn_sigmoid(z);
            }
        } else {
            for (size_t j = 0; j < hw; j++)
                yc[j] = xc[j] * a + b;
        }
    }
}

static void bn_train_task(void *arg, int w, int nw)
{
    const struct bn_job *const j = arg;
    size_t lo, hi;
    kern_share((size_t)j->d->c, w, nw, &lo, &hi);
    for (int c = (int)lo; c < (int)hi; c++) {
        double mean, invstd;
        kern_bn_channel_stats(j->d, c, j->x, &mean, &invstd, j->save_mean, j->save_invstd,
                              j->running_mean, j->running_var);
        const float a = (float)(j->gamma[c] * invstd);
        const float b = (float)(j->beta[c] - mean * j->gamma[c] * invstd);
        kern_bn_apply_channel(j->d, c, j->y, j->x, a, b, j->silu);
    }
}

static int bn_fwd_train_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                               float *restrict save_mean, float *restrict save_invstd,
                               float *restrict running_mean, float *restrict running_var,
                               const float *restrict x, const float *restrict gamma,
                               const float *restrict beta, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!y || !x || !gamma || !beta, -EINVAL);
    KERN_RETURN_IF(kern_bn_check_running(d, running_mean, running_var) < 0, -EINVAL);
    struct bn_job j = { .d = d,
                        .y = y,
                        .save_mean = save_mean,
                        .save_invstd = save_invstd,
                        .running_mean = running_mean,
                        .running_var = running_var,
                        .x = x,
                        .gamma = gamma,
                        .beta = beta,
                        .silu = silu };
    kern_parallel(ctx, bn_train_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                          float *restrict save_mean, float *restrict save_invstd,
                          float *restrict running_mean, float *restrict running_var,
                          const float *restrict x, const float *restrict gamma,
                          const float *restrict beta)
{
    return bn_fwd_train_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x,
                               gamma, beta, 0);
}

int kern_ref_bn_silu_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                               float *restrict save_mean, float *restrict save_invstd,
                               float *restrict running_mean, float *restrict running_var,
                               const float *restrict x, const float *restrict gamma,
                               const float *restrict beta)
{
    return bn_fwd_train_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x,
                               gamma, beta, 1);
}

static void bn_eval_task(void *arg, int w, int nw)
{
    const struct bn_job *const j = arg;
    size_t lo, hi;
    kern_share((size_t)j->d->c, w, nw, &lo, &hi);
    for (int c = (int)lo; c < (int)hi; c++) {
        float a, b;
        kern_bn_eval_coef(j->gamma[c], j->beta[c], j->rmean_in[c], j->rvar_in[c], j->d->eps, &a,
                          &b);
        kern_bn_apply_channel(j->d, c, j->y, j->x, a, b, j->silu);
    }
}

static int bn_fwd_eval_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                              const float *restrict x, const float *restrict gamma,
                              const float *restrict beta, const float *restrict running_mean,
                              const float *restrict running_var, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!y || !x || !gamma || !beta || !running_mean || !running_var, -EINVAL);
    struct bn_job j = { .d = d,
                        .y = y,
                        .x = x,
                        .gamma = gamma,
                        .beta = beta,
                        .rmean_in = running_mean,
                        .rvar_in = running_var,
                        .silu = silu };
    kern_parallel(ctx, bn_eval_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                         const float *restrict x, const float *restrict gamma,
                         const float *restrict beta, const float *restrict running_mean,
                         const float *restrict running_var)
{
    return bn_fwd_eval_common(ctx, d, y, x, gamma, beta, running_mean, running_var, 0);
}

int kern_ref_bn_silu_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                              const float *restrict x, const float *restrict gamma,
                              const float *restrict beta, const float *restrict running_mean,
                              const float *restrict running_var)
{
    return bn_fwd_eval_common(ctx, d, y, x, gamma, beta, running_mean, running_var, 1);
}

KERN_VEC_CLONES void kern_bn_dz_chunk(float *restrict gz, const float *restrict dy,
                                      const float *restrict x, size_t len, float mean, float invstd,
                                      float g, float bt)
{
    for (size_t j = 0; j < len; j++) {
        const float xh = (x[j] - mean) * invstd;
        gz[j] = dy[j] * kern_bn_silu_grad(xh * g + bt);
    }
}

KERN_VEC_CLONES void kern_bn_grad_sums(const float *restrict g, const float *restrict x, size_t len,
                                       float mean, float invstd, float *sdy, float *sdyx)
{
    float a1[KERN_BN_LANES] = { 0 }, a2[KERN_BN_LANES] = { 0 };
    size_t j = 0;
    for (; j + KERN_BN_LANES <= len; j += KERN_BN_LANES)
        for (int k = 0; k < KERN_BN_LANES; k++) {
            const float v = g[j + k];
            a1[k] += v;
            a2[k] += v * ((x[j + k] - mean) * invstd);
        }
    for (; j < len; j++) {
        a1[0] += g[j];
        a2[0] += g[j] * ((x[j] - mean) * invstd);
    }
    *sdy = (float)lanes_sum(a1);
    *sdyx = (float)lanes_sum(a2);
}

KERN_VEC_CLONES void kern_bn_dx_channel(const struct kern_bn *d, size_t c, float *restrict dx,
                                        const float *restrict dy, const float *restrict x,
                                        float mean, float invstd, float g, float bt, float mdy,
                                        float mdyx, int add, int silu, int dz_in_dx)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw, ysn = kern_bn_y_nstride(d);
    const float k = g * invstd;
    for (int i = 0; i < d->n; i++) {
        const size_t off = (size_t)i * plane + c * hw;
        const float *const xc = x + off, *const dyc = dy + (size_t)i * ysn + c * hw;
        float *const dxc = dx + off;
        if (dz_in_dx) {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] = k * (dxc[j] - mdy - xh * mdyx);
            }
        } else if (silu && !add) {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] = k * (dyc[j] * kern_bn_silu_grad(xh * g + bt) - mdy - xh * mdyx);
            }
        } else if (silu) {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] += k * (dyc[j] * kern_bn_silu_grad(xh * g + bt) - mdy - xh * mdyx);
            }
        } else if (!add) {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] = k * (dyc[j] - mdy - xh * mdyx);
            }
        } else {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] += k * (dyc[j] - mdy - xh * mdyx);
            }
        }
    }
}

/*
 * The BN backward for one channel. With silu, dy is the gradient of silu(z) and is turned into
 * dz on the fly (z recomputed from x); when dx is overwritten, the first pass parks dz in dx so
 * the second pass need not recompute it; when dx accumulates, dz goes through a stack chunk.
 */
static void bn_bwd_channel(const struct kern_bn *d, int c, float *restrict dx,
                           float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                           const float *restrict x, const float *restrict gamma,
                           const float *restrict beta, float mean, float invstd, unsigned accum,
                           int silu)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw, ysn = kern_bn_y_nstride(d);
    const int add_dx = (accum & KERN_ACCUM_DX) != 0;
    const float g = gamma[c], bt = silu ? beta[c] : 0.0f;
    float tmp[KERN_BN_CHUNK];
    double sdy = 0.0, sdyx = 0.0;
    for (int i = 0; i < d->n; i++) {
        const size_t off = (size_t)i * plane + (size_t)c * hw;
        const size_t yoff = (size_t)i * ysn + (size_t)c * hw;
        for (size_t j0 = 0; j0 < hw; j0 += KERN_BN_CHUNK) {
            const size_t len = hw - j0 < KERN_BN_CHUNK ? hw - j0 : KERN_BN_CHUNK;
            const float *gz = dy + yoff + j0;
            if (silu) {
                float *const park = add_dx ? tmp : dx + off + j0;
                kern_bn_dz_chunk(park, gz, x + off + j0, len, mean, invstd, g, bt);
                gz = park;
            }
            float s1, s2;
            kern_bn_grad_sums(gz, x + off + j0, len, mean, invstd, &s1, &s2);
            sdy += s1;
            sdyx += s2;
        }
    }
    if (dgamma) {
        if (accum & KERN_ACCUM_DPARAM) {
            dgamma[c] += (float)sdyx;
            dbeta[c] += (float)sdy;
        } else {
            dgamma[c] = (float)sdyx;
            dbeta[c] = (float)sdy;
        }
    }
    const double cnt = (double)d->n * (double)hw;
    kern_bn_dx_channel(d, (size_t)c, dx, dy, x, mean, invstd, g, bt, (float)(sdy / cnt),
                       (float)(sdyx / cnt), add_dx, silu, silu && !add_dx);
}

static void bn_bwd_task(void *arg, int w, int nw)
{
    const struct bn_job *const j = arg;
    size_t lo, hi;
    kern_share((size_t)j->d->c, w, nw, &lo, &hi);
    for (int c = (int)lo; c < (int)hi; c++)
        bn_bwd_channel(j->d, c, j->dx, j->dgamma, j->dbeta, j->dy, j->x, j->gamma, j->beta,
                       j->mean_in[c], j->invstd_in[c], j->accum, j->silu);
}

static int bn_bwd_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                         float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                         const float *restrict x, const float *restrict gamma,
                         const float *restrict beta, const float *restrict save_mean,
                         const float *restrict save_invstd, unsigned accum, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!dx || !dy || !x || !gamma || !save_mean || !save_invstd, -EINVAL);
    KERN_RETURN_IF(!dgamma != !dbeta, -EINVAL);
    KERN_RETURN_IF(silu && !beta, -EINVAL);
    struct bn_job j = { .d = d,
                        .dx = dx,
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
    kern_parallel(ctx, bn_bwd_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_bwd(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                    float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                    const float *restrict x, const float *restrict gamma,
                    const float *restrict save_mean, const float *restrict save_invstd,
                    unsigned accum)
{
    return bn_bwd_common(ctx, d, dx, dgamma, dbeta, dy, x, gamma, NULL, save_mean, save_invstd,
                         accum, 0);
}

int kern_ref_bn_silu_bwd(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                         float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                         const float *restrict x, const float *restrict gamma,
                         const float *restrict beta, const float *restrict save_mean,
                         const float *restrict save_invstd, unsigned accum)
{
    return bn_bwd_common(ctx, d, dx, dgamma, dbeta, dy, x, gamma, beta, save_mean, save_invstd,
                         accum, 1);
}

struct silu_job {
    float *y;        /* fwd: y; bwd: dx */
    const float *x;  /* the SiLU input */
    const float *dy; /* bwd only */
    size_t count;
    int add; /* bwd: dx += */
};

KERN_VEC_CLONES static void silu_fwd_task(void *arg, int w, int nw)
{
    const struct silu_job *const j = arg;
    size_t lo, hi;
    kern_share(j->count, w, nw, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const float v = j->x[i];
        j->y[i] = v * kern_bn_sigmoid(v);
    }
}

int kern_ref_silu_fwd(struct kern_ctx *ctx, float *y, const float *x, size_t count)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!y || !x, -EINVAL);
    struct silu_job j = { y, x, NULL, count, 0 };
    kern_parallel(ctx, silu_fwd_task, &j, count);
    return 0;
}

KERN_VEC_CLONES static void silu_bwd_task(void *arg, int w, int nw)
{
    const struct silu_job *const j = arg;
    size_t lo, hi;
    kern_share(j->count, w, nw, &lo, &hi);
    if (j->add) {
        for (size_t i = lo; i < hi; i++)
            j->y[i] += j->dy[i] * kern_bn_silu_grad(j->x[i]);
    } else {
        for (size_t i = lo; i < hi; i++)
            j->y[i] = j->dy[i] * kern_bn_silu_grad(j->x[i]);
    }
}

int kern_ref_silu_bwd(struct kern_ctx *ctx, float *dx, const float *dy, const float *restrict x,
                      size_t count, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dx || !dy || !x, -EINVAL);
    KERN_RETURN_IF((accum & KERN_ACCUM_DX) && dx == dy, -EINVAL);
    struct silu_job j = { dx, x, dy, count, (accum & KERN_ACCUM_DX) != 0 };
    kern_parallel(ctx, silu_bwd_task, &j, count);
    return 0;
}
