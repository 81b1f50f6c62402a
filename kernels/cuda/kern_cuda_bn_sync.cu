/*
 * Batch norm and BN+SiLU in phases (SyncBatchNorm), CUDA. Contracts in kern.h, "Batch norm in
 * phases"; CPU reference in kernels/ref/kern_bn_sync.c.
 *
 * Shapes (NCHW, float32, dense, device memory): x, y, dx, dy (n, c, hw) with hw = h * w; gamma,
 * beta, running_mean, running_var, save_mean, save_invstd, dgamma, dbeta (c); sums
 * (KERN_BN_SUMS_LEN(c) = 2c + 1 doubles, device memory): two per-channel sums, then the count.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dgamma and dbeta overwrite unless
 * accum has KERN_ACCUM_DPARAM. Overwritten buffers are never read.
 *
 * The reductions (stats, bwd_reduce) are kern_cuda_bn.cu's first two passes: grid (c, chunks),
 * each block sums its slice of a channel in double (x and x^2 per element, so the forward's
 * E[x^2] - mean^2 cancels only in double), then one thread per channel adds its chunks in order
 * into sums (no atomics: bitwise reproducible). fwd_apply is a per-channel coefficient kernel
 * (statistics, saves, running update) then one block per (image, channel) plane; bwd_apply is
 * one block per plane reading its channel's sums directly. The fused BN+SiLU recomputes z and
 * silu'(z) from x in each pass rather than storing them.
 */
#include <math.h>

#include "kern_cuda_internal.h"

/*
 * Pass 1. mode 0: sums of x and x^2. mode 1: sums of dz and dz xhat, dz = dy (silu 0) or
 * dy silu'(xhat gamma + beta) (silu 1). part[(ch * chunks + k) * 2 + {0, 1}].
 */
static __global__ void bns_partial(double *__restrict__ part, const float *__restrict__ x,
                                   const float *__restrict__ dy, const float *__restrict__ gamma,
                                   const float *__restrict__ beta, const float *__restrict__ mean,
                                   const float *__restrict__ invstd, int n, int c, int hw,
                                   int chunks, int mode, int silu, size_t ysn)
{
    const int ch = blockIdx.x, k = blockIdx.y;
    const size_t cnt = (size_t)n * (size_t)hw;
    const size_t lo = cnt * (size_t)k / (size_t)chunks, hi = cnt * (size_t)(k + 1) / (size_t)chunks;
    double s = 0.0, q = 0.0;
    float m = 0.0f, is = 0.0f, g = 0.0f, bt = 0.0f;
    if (mode == 1) {
        m = mean[ch];
        is = invstd[ch];
        g = silu ? gamma[ch] : 0.0f;
        bt = silu ? beta[ch] : 0.0f;
    }
    for (size_t i = lo / (size_t)hw; i < (size_t)n && i * (size_t)hw < hi; i++) {
        const size_t p0 = i * (size_t)hw;
        const size_t j0 = lo > p0 ? lo - p0 : 0, j1 = hi - p0 < (size_t)hw ? hi - p0 : (size_t)hw;
        const size_t off = (i * (size_t)c + (size_t)ch) * (size_t)hw;
        const size_t yoff = i * ysn + (size_t)ch * (size_t)hw;
        for (size_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
            const float v = x[off + j];
            if (mode == 0) {
                s += v;
                q += (double)v * v;
            } else {
                const float xh = (v - m) * is;
                float gz = dy[yoff + j];
                if (silu) gz *= kern_cuda_silu_grad(xh * g + bt);
                s += gz;
                q += (double)gz * xh;
            }
        }
    }
    kern_cuda_block_sum2(s, q);
    if (threadIdx.x == 0) {
        part[((size_t)ch * chunks + k) * 2] = s;
        part[((size_t)ch * chunks + k) * 2 + 1] = q;
    }
}

/* Pass 2: the chunks of each channel in order into sums; the count; backward: dgamma, dbeta. */
static __global__ void bns_finalize(double *__restrict__ sums, float *__restrict__ dgamma,
                                    float *__restrict__ dbeta, const double *__restrict__ part,
                                    int c, int chunks, double cnt, int add)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double s = 0.0, q = 0.0;
    for (int k = 0; k < chunks; k++) {
        s += part[((size_t)ch * chunks + k) * 2];
        q += part[((size_t)ch * chunks + k) * 2 + 1];
    }
    sums[ch] = s;
    sums[c + ch] = q;
    if (ch == 0) sums[2 * (size_t)c] = cnt;
    if (dgamma) {
        dgamma[ch] = add ? dgamma[ch] + (float)q : (float)q;
        dbeta[ch] = add ? dbeta[ch] + (float)s : (float)s;
    }
}

/* Forward: statistics from the summed buffer, saves, running update; coef = (a, b) per channel. */
static __global__ void bns_coef_fwd(float *__restrict__ coef, float *__restrict__ save_mean,
                                    float *__restrict__ save_invstd,
                                    float *__restrict__ running_mean,
                                    float *__restrict__ running_var,
                                    const double *__restrict__ sums,
                                    const float *__restrict__ gamma, const float *__restrict__ beta,
                                    int c, float eps, float momentum)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const double cnt = sums[2 * (size_t)c];
    const double mean = sums[ch] / cnt;
    double var = sums[c + ch] / cnt - mean * mean;
    if (var < 0.0) var = 0.0;
    const double invstd = 1.0 / sqrt(var + (double)eps);
    if (save_mean) save_mean[ch] = (float)mean;
    if (save_invstd) save_invstd[ch] = (float)invstd;
    if (running_mean) {
        const double mo = momentum;
        running_mean[ch] = (float)((1.0 - mo) * running_mean[ch] + mo * mean);
        running_var[ch] = (float)((1.0 - mo) * running_var[ch] + mo * var * cnt / (cnt - 1.0));
    }
    coef[ch] = (float)(gamma[ch] * invstd);
    coef[c + ch] = (float)(beta[ch] - mean * gamma[ch] * invstd);
}

/* Forward: y = x a + b (then SiLU), one block per plane. */
static __global__ void bns_apply_fwd(float *__restrict__ y, const float *__restrict__ x,
                                     const float *__restrict__ coef, int c, int hw, int silu,
                                     size_t ysn)
{
    const size_t plane = blockIdx.x;
    const int ch = (int)(plane % (size_t)c);
    const float a = coef[ch], b = coef[c + ch];
    const float *const xp = x + plane * (size_t)hw;
    float *const yp = y + plane / (size_t)c * ysn + (size_t)ch * (size_t)hw;
    for (int j = threadIdx.x; j < hw; j += blockDim.x) {
        const float z = xp[j] * a + b;
        yp[j] = silu ? z * kern_cuda_sigmoid(z) : z;
    }
}

/* Backward: dx (=|+=) gamma invstd (dz - sum dz / N - xhat sum(dz xhat) / N), block per plane. */
static __global__ void bns_apply_bwd(float *__restrict__ dx, const float *__restrict__ dy,
                                     const float *__restrict__ x, const double *__restrict__ sums,
                                     const float *__restrict__ gamma,
                                     const float *__restrict__ beta, const float *__restrict__ mean,
                                     const float *__restrict__ invstd, int c, int hw, int silu,
                                     int add, size_t ysn)
{
    const size_t plane = blockIdx.x;
    const int ch = (int)(plane % (size_t)c);
    const double cnt = sums[2 * (size_t)c];
    const float mdy = (float)(sums[ch] / cnt), mdyx = (float)(sums[c + ch] / cnt);
    const float m = mean[ch], is = invstd[ch], g = gamma[ch], bt = silu ? beta[ch] : 0.0f;
    const float k = g * is;
    const size_t off = plane * (size_t)hw, yoff = plane / (size_t)c * ysn + (size_t)ch * (size_t)hw;
    for (int j = threadIdx.x; j < hw; j += blockDim.x) {
        const float xh = (x[off + j] - m) * is;
        float gz = dy[yoff + j];
        if (silu) gz *= kern_cuda_silu_grad(xh * g + bt);
        const float v = k * (gz - mdy - xh * mdyx);
        dx[off + j] = add ? dx[off + j] + v : v;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                  */

int kern_cuda_bn_stats(struct kern_ctx *ctx, const struct kern_bn *d, double *__restrict__ sums,
                       const float *__restrict__ x)
{
    KERN_CHECK_CUDA_CTX(ctx);
    const int rc = kern_cuda_bn_check(d);
    if (rc < 0) return rc;
    if (!sums || !x) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    double *const part = (double *)st->scratch;
    const int chunks = kern_cuda_bn_chunks(d);
    bns_partial<<<dim3((unsigned)d->c, (unsigned)chunks), KERN_CUDA_THREADS, 0, st->stream>>>(
        part, x, NULL, NULL, NULL, NULL, NULL, d->n, d->c, d->hw, chunks, 0, 0, (size_t)0);
    bns_finalize<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        sums, NULL, NULL, part, d->c, chunks, (double)d->n * (double)d->hw, 0);
    return kern_cuda_launched(ctx, "bn_stats");
}

/* Hook for the fused residual add (kern_cuda_resadd.cu): fwd_apply's coefficients from the
 * summed buffer (saves, running update) into the scratch; *coef = (a, b) per channel there. */
int kern_cuda_bn_coef_sums(struct kern_ctx *ctx, const struct kern_bn *d, float *save_mean,
                           float *save_invstd, float *running_mean, float *running_var,
                           const float *gamma, const float *beta, const double *sums,
                           const float **coef)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    float *const cf = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    bns_coef_fwd<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        cf, save_mean, save_invstd, running_mean, running_var, sums, gamma, beta, d->c, d->eps,
        d->momentum);
    *coef = cf;
    return kern_cuda_launched(ctx, "bn_coef_sums");
}

static int fwd_apply_common(struct kern_ctx *ctx, const struct kern_bn *d, float *y,
                            float *save_mean, float *save_invstd, float *running_mean,
                            float *running_var, const float *x, const float *gamma,
                            const float *beta, const double *sums, int silu)
{
    KERN_CHECK_CUDA_CTX(ctx);
    size_t ysn = 0;
    const int rc = kern_cuda_bn_check_ysn(d, &ysn);
    if (rc < 0) return rc;
    if (!y || !x || !gamma || !beta || !sums) return -EINVAL;
    if (kern_bn_check_running(d, running_mean, running_var) < 0) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    float *const coef = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    bns_coef_fwd<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        coef, save_mean, save_invstd, running_mean, running_var, sums, gamma, beta, d->c, d->eps,
        d->momentum);
    bns_apply_fwd<<<(unsigned)((size_t)d->n * (size_t)d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        y, x, coef, d->c, d->hw, silu, ysn);
    return kern_cuda_launched(ctx, "bn_fwd_apply");
}

int kern_cuda_bn_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *__restrict__ y,
                           float *__restrict__ save_mean, float *__restrict__ save_invstd,
                           float *__restrict__ running_mean, float *__restrict__ running_var,
                           const float *__restrict__ x, const float *__restrict__ gamma,
                           const float *__restrict__ beta, const double *__restrict__ sums)
{
    return fwd_apply_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                            beta, sums, 0);
}

int kern_cuda_bn_silu_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d,
                                float *__restrict__ y, float *__restrict__ save_mean,
                                float *__restrict__ save_invstd, float *__restrict__ running_mean,
                                float *__restrict__ running_var, const float *__restrict__ x,
                                const float *__restrict__ gamma, const float *__restrict__ beta,
                                const double *__restrict__ sums)
{
    return fwd_apply_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                            beta, sums, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Backward                                                                                 */

static int bwd_reduce_common(struct kern_ctx *ctx, const struct kern_bn *d, double *sums,
                             float *dgamma, float *dbeta, const float *dy, const float *x,
                             const float *gamma, const float *beta, const float *save_mean,
                             const float *save_invstd, unsigned accum, int silu)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    size_t ysn = 0;
    const int rc = kern_cuda_bn_check_ysn(d, &ysn);
    if (rc < 0) return rc;
    if (!sums || !dy || !x || !save_mean || !save_invstd) return -EINVAL;
    if (!dgamma != !dbeta) return -EINVAL;
    if (silu && (!gamma || !beta)) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    double *const part = (double *)st->scratch;
    const int chunks = kern_cuda_bn_chunks(d);
    bns_partial<<<dim3((unsigned)d->c, (unsigned)chunks), KERN_CUDA_THREADS, 0, st->stream>>>(
        part, x, dy, gamma, beta, save_mean, save_invstd, d->n, d->c, d->hw, chunks, 1, silu, ysn);
    bns_finalize<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        sums, dgamma, dbeta, part, d->c, chunks, (double)d->n * (double)d->hw,
        (accum & KERN_ACCUM_DPARAM) != 0);
    return kern_cuda_launched(ctx, "bn_bwd_reduce");
}

int kern_cuda_bn_bwd_reduce(struct kern_ctx *ctx, const struct kern_bn *d,
                            double *__restrict__ sums, float *__restrict__ dgamma,
                            float *__restrict__ dbeta, const float *__restrict__ dy,
                            const float *__restrict__ x, const float *__restrict__ gamma,
                            const float *__restrict__ beta, const float *__restrict__ save_mean,
                            const float *__restrict__ save_invstd, unsigned accum)
{
    return bwd_reduce_common(ctx, d, sums, dgamma, dbeta, dy, x, gamma, beta, save_mean,
                             save_invstd, accum, 0);
}

int kern_cuda_bn_silu_bwd_reduce(struct kern_ctx *ctx, const struct kern_bn *d,
                                 double *__restrict__ sums, float *__restrict__ dgamma,
                                 float *__restrict__ dbeta, const float *__restrict__ dy,
                                 const float *__restrict__ x, const float *__restrict__ gamma,
                                 const float *__restrict__ beta,
                                 const float *__restrict__ save_mean,
                                 const float *__restrict__ save_invstd, unsigned accum)
{
    return bwd_reduce_common(ctx, d, sums, dgamma, dbeta, dy, x, gamma, beta, save_mean,
                             save_invstd, accum, 1);
}

static int bwd_apply_common(struct kern_ctx *ctx, const struct kern_bn *d, float *dx,
                            const float *dy, const float *x, const float *gamma, const float *beta,
                            const float *save_mean, const float *save_invstd, const double *sums,
                            unsigned accum, int silu)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    size_t ysn = 0;
    const int rc = kern_cuda_bn_check_ysn(d, &ysn);
    if (rc < 0) return rc;
    if (!dx || !dy || !x || !gamma || !save_mean || !save_invstd || !sums) return -EINVAL;
    if (silu && !beta) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    bns_apply_bwd<<<(unsigned)((size_t)d->n * (size_t)d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        dx, dy, x, sums, gamma, beta, save_mean, save_invstd, d->c, d->hw, silu,
        (accum & KERN_ACCUM_DX) != 0, ysn);
    return kern_cuda_launched(ctx, "bn_bwd_apply");
}

int kern_cuda_bn_bwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *__restrict__ dx,
                           const float *__restrict__ dy, const float *__restrict__ x,
                           const float *__restrict__ gamma, const float *__restrict__ beta,
                           const float *__restrict__ save_mean,
                           const float *__restrict__ save_invstd, const double *__restrict__ sums,
                           unsigned accum)
{
    return bwd_apply_common(ctx, d, dx, dy, x, gamma, beta, save_mean, save_invstd, sums, accum, 0);
}

int kern_cuda_bn_silu_bwd_apply(struct kern_ctx *ctx, const struct kern_bn *d,
                                float *__restrict__ dx, const float *__restrict__ dy,
                                const float *__restrict__ x, const float *__restrict__ gamma,
                                const float *__restrict__ beta, const float *__restrict__ save_mean,
                                const float *__restrict__ save_invstd,
                                const double *__restrict__ sums, unsigned accum)
{
    return bwd_apply_common(ctx, d, dx, dy, x, gamma, beta, save_mean, save_invstd, sums, accum, 1);
}
