/*
 * Batch norm (BatchNorm2d), SiLU and BN+SiLU fused, CUDA.
 *
 * Shapes (NCHW, float32, dense, device memory): x, y, dx, dy (n, c, hw) with hw = h * w; gamma,
 * beta, running_mean, running_var, save_mean, save_invstd, dgamma, dbeta (c). SiLU ops take
 * flat element counts. Same formulas as kernels/ref/kern_bn.c.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dgamma and dbeta overwrite unless
 * accum has KERN_ACCUM_DPARAM. Overwritten buffers are never read.
 *
 * Every BN op is three launches on the context's stream:
 *   1. partial: grid (c, chunks); block (ch, k) sums its k-th slice of channel ch's N = n hw
 *      elements in double (forward: x and x^2; backward: dz and dz xhat) into the scratch;
 *   2. finalize: one thread per channel adds its chunks in order, writes the stats (and the
 *      running-stat update, dgamma, dbeta) and the per-channel coefficients of the next pass;
 *   3. apply: one block per (image, channel) plane, elementwise.
 * Chunks give the device enough blocks when c is small (the stem: 16-32 channels of 320x320)
 * without atomics, so results are bitwise reproducible. The forward variance is E[x^2] - mean^2
 * in double (one pass instead of the reference's two; double keeps the cancellation below float
 * rounding unless |mean| > 1e4 std). The fused backward recomputes z = bn(x) and silu'(z) in
 * passes 1 and 3 instead of storing them (memory traffic is the cost, not the arithmetic).
 */
#include <math.h>

#include "kern_cuda_internal.h"

/*
 * Pass 1. mode 0: sums of x and x^2. mode 1: sums of dz and dz xhat, dz = dy (silu 0) or
 * dy silu'(xhat gamma + beta) (silu 1). part[(ch * chunks + k) * 2 + {0, 1}].
 */
__global__ void bn_partial(double *__restrict__ part, const float *__restrict__ x,
                           const float *__restrict__ dy, const float *__restrict__ gamma,
                           const float *__restrict__ beta, const float *__restrict__ mean,
                           const float *__restrict__ invstd, int n, int c, int hw, int chunks,
                           int mode, int silu, size_t ysn)
{
    const int ch = blockIdx.x, k = blockIdx.y;
    const size_t cnt = (size_t)n * (size_t)hw;
    const size_t lo = cnt * (size_t)k / (size_t)chunks, hi = cnt * (size_t)(k + 1) / (size_t)chunks;
    double s = 0.0, q = 0.0;
    float m = 0.0f, is = 0.0f, g = 0.0f, bt = 0.0f;
    if (mode == 1) {
        m = mean[ch];
        is = invstd[ch];
        g = gamma[ch];
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

/* Pass 2, forward: stats, saves, running update; coef[ch] = a, coef[c + ch] = b. */
__global__ void bn_finalize_fwd(float *__restrict__ coef, float *__restrict__ save_mean,
                                float *__restrict__ save_invstd, float *__restrict__ running_mean,
                                float *__restrict__ running_var, const double *__restrict__ part,
                                const float *__restrict__ gamma, const float *__restrict__ beta,
                                int c, int chunks, double cnt, float eps, float momentum)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double s = 0.0, q = 0.0;
    for (int k = 0; k < chunks; k++) {
        s += part[((size_t)ch * chunks + k) * 2];
        q += part[((size_t)ch * chunks + k) * 2 + 1];
    }
    const double mean = s / cnt;
    double var = q / cnt - mean * mean;
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

/* Eval coefficients from the running stats, as the reference. */
__global__ void bn_coef_eval(float *__restrict__ coef, const float *__restrict__ gamma,
                             const float *__restrict__ beta, const float *__restrict__ rmean,
                             const float *__restrict__ rvar, int c, float eps)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const double invstd = 1.0 / sqrt((double)rvar[ch] + (double)eps);
    coef[ch] = (float)(gamma[ch] * invstd);
    coef[c + ch] = (float)(beta[ch] - rmean[ch] * (double)gamma[ch] * invstd);
}

/* Pass 3, forward: y = x a + b (then SiLU), one block per plane. */
__global__ void bn_apply_fwd(float *__restrict__ y, const float *__restrict__ x,
                             const float *__restrict__ coef, int c, int hw, int silu, size_t ysn)
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

/* Pass 2, backward: dgamma, dbeta; coef = (mean dz, mean dz xhat, gamma invstd) per channel. */
__global__ void bn_finalize_bwd(float *__restrict__ coef, float *__restrict__ dgamma,
                                float *__restrict__ dbeta, const double *__restrict__ part,
                                const float *__restrict__ gamma, const float *__restrict__ invstd,
                                int c, int chunks, double cnt, int add)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double s = 0.0, q = 0.0;
    for (int k = 0; k < chunks; k++) {
        s += part[((size_t)ch * chunks + k) * 2];
        q += part[((size_t)ch * chunks + k) * 2 + 1];
    }
    if (dgamma) {
        dgamma[ch] = add ? dgamma[ch] + (float)q : (float)q;
        dbeta[ch] = add ? dbeta[ch] + (float)s : (float)s;
    }
    coef[ch] = (float)(s / cnt);
    coef[c + ch] = (float)(q / cnt);
    coef[2 * c + ch] = gamma[ch] * invstd[ch];
}

/* Pass 3, backward: dx (=|+=) k (dz - mean dz - xhat mean(dz xhat)). */
__global__ void bn_apply_bwd(float *__restrict__ dx, const float *__restrict__ dy,
                             const float *__restrict__ x, const float *__restrict__ coef,
                             const float *__restrict__ gamma, const float *__restrict__ beta,
                             const float *__restrict__ mean, const float *__restrict__ invstd,
                             int c, int hw, int silu, int add, size_t ysn)
{
    const size_t plane = blockIdx.x;
    const int ch = (int)(plane % (size_t)c);
    const float mdy = coef[ch], mdyx = coef[c + ch], k = coef[2 * c + ch];
    const float m = mean[ch], is = invstd[ch], g = gamma[ch], bt = silu ? beta[ch] : 0.0f;
    const size_t off = plane * (size_t)hw, yoff = plane / (size_t)c * ysn + (size_t)ch * (size_t)hw;
    for (int j = threadIdx.x; j < hw; j += blockDim.x) {
        const float xh = (x[off + j] - m) * is;
        float gz = dy[yoff + j];
        if (silu) gz *= kern_cuda_silu_grad(xh * g + bt);
        const float v = k * (gz - mdy - xh * mdyx);
        dx[off + j] = add ? dx[off + j] + v : v;
    }
}

static int bn_fwd_train_common(struct kern_ctx *ctx, const struct kern_bn *d, float *y,
                               float *save_mean, float *save_invstd, float *running_mean,
                               float *running_var, const float *x, const float *gamma,
                               const float *beta, int silu)
{
    KERN_CHECK_CUDA_CTX(ctx);
    size_t ysn = 0;
    const int rc = kern_cuda_bn_check_ysn(d, &ysn);
    if (rc < 0) return rc;
    if (!y || !x || !gamma || !beta) return -EINVAL;
    if (kern_bn_check_running(d, running_mean, running_var) < 0) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    double *const part = (double *)st->scratch;
    float *const coef = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    const int chunks = kern_cuda_bn_chunks(d);
    const double cnt = (double)d->n * (double)d->hw;
    bn_partial<<<dim3((unsigned)d->c, (unsigned)chunks), KERN_CUDA_THREADS, 0, st->stream>>>(
        part, x, NULL, NULL, NULL, NULL, NULL, d->n, d->c, d->hw, chunks, 0, 0, (size_t)0);
    bn_finalize_fwd<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        coef, save_mean, save_invstd, running_mean, running_var, part, gamma, beta, d->c, chunks,
        cnt, d->eps, d->momentum);
    bn_apply_fwd<<<(unsigned)((size_t)d->n * (size_t)d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        y, x, coef, d->c, d->hw, silu, ysn);
    return kern_cuda_launched(ctx, "bn_fwd_train");
}

int kern_cuda_bn_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *__restrict__ y,
                           float *__restrict__ save_mean, float *__restrict__ save_invstd,
                           float *__restrict__ running_mean, float *__restrict__ running_var,
                           const float *__restrict__ x, const float *__restrict__ gamma,
                           const float *__restrict__ beta)
{
    return bn_fwd_train_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x,
                               gamma, beta, 0);
}

int kern_cuda_bn_silu_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d,
                                float *__restrict__ y, float *__restrict__ save_mean,
                                float *__restrict__ save_invstd, float *__restrict__ running_mean,
                                float *__restrict__ running_var, const float *__restrict__ x,
                                const float *__restrict__ gamma, const float *__restrict__ beta)
{
    return bn_fwd_train_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x,
                               gamma, beta, 1);
}

static int bn_fwd_eval_common(struct kern_ctx *ctx, const struct kern_bn *d, float *y,
                              const float *x, const float *gamma, const float *beta,
                              const float *running_mean, const float *running_var, int silu)
{
    KERN_CHECK_CUDA_CTX(ctx);
    size_t ysn = 0;
    const int rc = kern_cuda_bn_check_ysn(d, &ysn);
    if (rc < 0) return rc;
    if (!y || !x || !gamma || !beta || !running_mean || !running_var) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    float *const coef = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    bn_coef_eval<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        coef, gamma, beta, running_mean, running_var, d->c, d->eps);
    bn_apply_fwd<<<(unsigned)((size_t)d->n * (size_t)d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        y, x, coef, d->c, d->hw, silu, ysn);
    return kern_cuda_launched(ctx, "bn_fwd_eval");
}

int kern_cuda_bn_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d, float *__restrict__ y,
                          const float *__restrict__ x, const float *__restrict__ gamma,
                          const float *__restrict__ beta, const float *__restrict__ running_mean,
                          const float *__restrict__ running_var)
{
    return bn_fwd_eval_common(ctx, d, y, x, gamma, beta, running_mean, running_var, 0);
}

int kern_cuda_bn_silu_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d, float *__restrict__ y,
                               const float *__restrict__ x, const float *__restrict__ gamma,
                               const float *__restrict__ beta,
                               const float *__restrict__ running_mean,
                               const float *__restrict__ running_var)
{
    return bn_fwd_eval_common(ctx, d, y, x, gamma, beta, running_mean, running_var, 1);
}

/*
 * Hooks for the fused residual add (kern_cuda_resadd.cu): passes 1 and 2 of the training
 * forward, or the eval coefficients, into the scratch; *coef = (a, b) per channel there.
 */
int kern_cuda_bn_coef_train(struct kern_ctx *ctx, const struct kern_bn *d, float *save_mean,
                            float *save_invstd, float *running_mean, float *running_var,
                            const float *x, const float *gamma, const float *beta,
                            const float **coef)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    double *const part = (double *)st->scratch;
    float *const cf = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    const int chunks = kern_cuda_bn_chunks(d);
    bn_partial<<<dim3((unsigned)d->c, (unsigned)chunks), KERN_CUDA_THREADS, 0, st->stream>>>(
        part, x, NULL, NULL, NULL, NULL, NULL, d->n, d->c, d->hw, chunks, 0, 0, (size_t)0);
    bn_finalize_fwd<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        cf, save_mean, save_invstd, running_mean, running_var, part, gamma, beta, d->c, chunks,
        (double)d->n * (double)d->hw, d->eps, d->momentum);
    *coef = cf;
    return kern_cuda_launched(ctx, "bn_coef_train");
}

int kern_cuda_bn_coef_eval(struct kern_ctx *ctx, const struct kern_bn *d, const float *gamma,
                           const float *beta, const float *running_mean, const float *running_var,
                           const float **coef)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    float *const cf = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    bn_coef_eval<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        cf, gamma, beta, running_mean, running_var, d->c, d->eps);
    *coef = cf;
    return kern_cuda_launched(ctx, "bn_coef_eval");
}

static int bn_bwd_common(struct kern_ctx *ctx, const struct kern_bn *d, float *dx, float *dgamma,
                         float *dbeta, const float *dy, const float *x, const float *gamma,
                         const float *beta, const float *save_mean, const float *save_invstd,
                         unsigned accum, int silu)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    size_t ysn = 0;
    const int rc = kern_cuda_bn_check_ysn(d, &ysn);
    if (rc < 0) return rc;
    if (!dx || !dy || !x || !gamma || !save_mean || !save_invstd) return -EINVAL;
    if (!dgamma != !dbeta) return -EINVAL;
    if (silu && !beta) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    double *const part = (double *)st->scratch;
    float *const coef = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    const int chunks = kern_cuda_bn_chunks(d);
    const double cnt = (double)d->n * (double)d->hw;
    bn_partial<<<dim3((unsigned)d->c, (unsigned)chunks), KERN_CUDA_THREADS, 0, st->stream>>>(
        part, x, dy, gamma, beta, save_mean, save_invstd, d->n, d->c, d->hw, chunks, 1, silu, ysn);
    bn_finalize_bwd<<<kern_cuda_chan_blocks(d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        coef, dgamma, dbeta, part, gamma, save_invstd, d->c, chunks, cnt,
        (accum & KERN_ACCUM_DPARAM) != 0);
    bn_apply_bwd<<<(unsigned)((size_t)d->n * (size_t)d->c), KERN_CUDA_THREADS, 0, st->stream>>>(
        dx, dy, x, coef, gamma, beta, save_mean, save_invstd, d->c, d->hw, silu,
        (accum & KERN_ACCUM_DX) != 0, ysn);
    return kern_cuda_launched(ctx, "bn_bwd");
}

int kern_cuda_bn_bwd(struct kern_ctx *ctx, const struct kern_bn *d, float *__restrict__ dx,
                     float *__restrict__ dgamma, float *__restrict__ dbeta,
                     const float *__restrict__ dy, const float *__restrict__ x,
                     const float *__restrict__ gamma, const float *__restrict__ save_mean,
                     const float *__restrict__ save_invstd, unsigned accum)
{
    return bn_bwd_common(ctx, d, dx, dgamma, dbeta, dy, x, gamma, NULL, save_mean, save_invstd,
                         accum, 0);
}

int kern_cuda_bn_silu_bwd(struct kern_ctx *ctx, const struct kern_bn *d, float *__restrict__ dx,
                          float *__restrict__ dgamma, float *__restrict__ dbeta,
                          const float *__restrict__ dy, const float *__restrict__ x,
                          const float *__restrict__ gamma, const float *__restrict__ beta,
                          const float *__restrict__ save_mean,
                          const float *__restrict__ save_invstd, unsigned accum)
{
    return bn_bwd_common(ctx, d, dx, dgamma, dbeta, dy, x, gamma, beta, save_mean, save_invstd,
                         accum, 1);
}

__global__ void silu_fwd_kernel(float *y, const float *x, size_t count)
{
    KERN_CUDA_LOOP(i, count)
    {
        const float v = x[i];
        y[i] = v * kern_cuda_sigmoid(v);
    }
}

__global__ void silu_bwd_kernel(float *dx, const float *dy, const float *__restrict__ x,
                                size_t count, int add)
{
    KERN_CUDA_LOOP(i, count)
    {
        const float g = dy[i] * kern_cuda_silu_grad(x[i]);
        dx[i] = add ? dx[i] + g : g;
    }
}

int kern_cuda_silu_fwd(struct kern_ctx *ctx, float *y, const float *x, size_t count)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!y || !x) return -EINVAL;
    if (count == 0) return 0;
    silu_fwd_kernel<<<kern_cuda_blocks(count), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        y, x, count);
    return kern_cuda_launched(ctx, "silu_fwd");
}

int kern_cuda_silu_bwd(struct kern_ctx *ctx, float *dx, const float *dy,
                       const float *__restrict__ x, size_t count, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!dx || !dy || !x) return -EINVAL;
    if ((accum & KERN_ACCUM_DX) && dx == dy) return -EINVAL;
    if (count == 0) return 0;
    silu_bwd_kernel<<<kern_cuda_blocks(count), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        dx, dy, x, count, (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "silu_bwd");
}
