/*
 * BN + SiLU (+ residual) on 16-bit activations, NCHW or NHWC, CUDA. Contracts in kern_bn.h,
 * "BN + SiLU (+ residual) on 16-bit activations"; the same bits as the CPU reference
 * (kern_bnx.c): both run kern_bnx_common.h's lines in the contract's order.
 *
 * Reductions in two launches: one thread per (chunk, channel) sums its chunk pixel by pixel in
 * float into the scratch (channels adjacent across threads: NHWC reads coalesce), then one thread
 * per channel merges the chunks in chunk order, in double. The element passes run one thread per
 * (pixel, channel), channel fastest, from per-channel coefficients a first launch puts in the
 * scratch. All on the context's stream.
 */
#include "kern_bnx_common.h"
#include "kern_cuda_internal.h"

struct bnx_geo {
    int layout, c, hw;
    size_t cnt, chunk, nchunks;
};

static __device__ __forceinline__ size_t bnx_at(const bnx_geo &g, size_t ld, size_t p, size_t ch)
{
    return kern_bnx_at(g.layout, g.c, g.hw, ld, p / (size_t)g.hw, ch, p % (size_t)g.hw);
}

/* Item t of a (chunk, channel) grid: its channel, first pixel and length. */
static __device__ __forceinline__ size_t bnx_chunk(const bnx_geo &g, size_t t, size_t *ch,
                                                   size_t *p0)
{
    *ch = t % (size_t)g.c;
    *p0 = t / (size_t)g.c * g.chunk;
    return g.cnt - *p0 < g.chunk ? g.cnt - *p0 : g.chunk;
}

/*
 * part[k c + ch] for chunk k of channel ch: (sum x, sum (x - mf)^2) of the forward (dy NULL), or
 * (sum dz, sum dz xhat) of the backward.
 */
static __global__ void bnx_part(bnx_geo g, const uint16_t *__restrict__ x, size_t x_ld,
                                const uint16_t *__restrict__ dy, size_t y_ld,
                                const float *__restrict__ mean, const float *__restrict__ invstd,
                                const float *__restrict__ gamma, const float *__restrict__ beta,
                                float2 *__restrict__ part)
{
    const size_t total = g.nchunks * (size_t)g.c;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t ch, p0;
        const size_t len = bnx_chunk(g, t, &ch, &p0);
        float a1 = 0.0f, a2 = 0.0f;
        if (!dy) {
            for (size_t p = p0; p < p0 + len; p++)
                a1 = BNX_FADD(a1, kern_bf16_to_f32(x[bnx_at(g, x_ld, p, ch)]));
            const float mf = BNX_FDIV(a1, (float)len);
            for (size_t p = p0; p < p0 + len; p++) {
                const float v = BNX_FSUB(kern_bf16_to_f32(x[bnx_at(g, x_ld, p, ch)]), mf);
                a2 = BNX_FADD(a2, BNX_FMUL(v, v));
            }
        } else {
            for (size_t p = p0; p < p0 + len; p++) {
                float xhat;
                const float dz = kern_bnx_dz(dy[bnx_at(g, y_ld, p, ch)], x[bnx_at(g, x_ld, p, ch)],
                                             mean[ch], invstd[ch], gamma[ch], beta[ch], &xhat);
                a1 = BNX_FADD(a1, dz);
                a2 = BNX_FADD(a2, BNX_FMUL(dz, xhat));
            }
        }
        part[t] = make_float2(a1, a2);
    }
}

static __global__ void bnx_stats_merge(bnx_geo g, const float2 *__restrict__ part,
                                       double *__restrict__ sums, double n, double hw)
{
    const size_t ch = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (ch == 0) sums[2 * (size_t)g.c] = BNX_DMUL(n, hw);
    if (ch >= (size_t)g.c) return;
    double seen = 0.0, mean = 0.0, m2 = 0.0;
    for (size_t k = 0; k < g.nchunks; k++) {
        const size_t p0 = k * g.chunk, len = g.cnt - p0 < g.chunk ? g.cnt - p0 : g.chunk;
        const float2 v = part[k * (size_t)g.c + ch];
        kern_bnx_merge(&seen, &mean, &m2, (double)len, v.x, v.y, BNX_FDIV(v.x, (float)len));
    }
    sums[ch] = BNX_DMUL(seen, mean);
    sums[(size_t)g.c + ch] = BNX_DADD(m2, BNX_DMUL(BNX_DMUL(seen, mean), mean));
}

/* coef[ch] = a, coef[c + ch] = b; the saves and the running update. */
static __global__ void bnx_coef(int c, float eps, float momentum, const double *__restrict__ sums,
                                const float *__restrict__ gamma, const float *__restrict__ beta,
                                float *save_mean, float *save_invstd, float *running_mean,
                                float *running_var, float *__restrict__ coef)
{
    const size_t ch = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (ch >= (size_t)c) return;
    kern_bnx_coef(sums, (size_t)c, ch, eps, momentum, gamma[ch], beta[ch],
                  save_mean ? save_mean + ch : NULL, save_invstd ? save_invstd + ch : NULL,
                  running_mean ? running_mean + ch : NULL, running_var ? running_var + ch : NULL,
                  &coef[ch], &coef[(size_t)c + ch]);
}

static __global__ void bnx_apply(bnx_geo g, uint16_t *__restrict__ y, size_t y_ld,
                                 const uint16_t *__restrict__ x, size_t x_ld,
                                 const uint16_t *__restrict__ r, size_t r_ld,
                                 const float *__restrict__ coef)
{
    const size_t total = g.cnt * (size_t)g.c;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t ch = t % (size_t)g.c, p = t / (size_t)g.c;
        y[bnx_at(g, y_ld, p, ch)] =
            kern_bnx_fwd(x[bnx_at(g, x_ld, p, ch)], coef[ch], coef[(size_t)g.c + ch], r != NULL,
                         r ? r[bnx_at(g, r_ld, p, ch)] : (uint16_t)0);
    }
}

static __global__ void bnx_bwd_merge(bnx_geo g, const float2 *__restrict__ part,
                                     double *__restrict__ sums, float *__restrict__ dgamma,
                                     float *__restrict__ dbeta, int add, double n, double hw)
{
    const size_t ch = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (ch == 0) sums[2 * (size_t)g.c] = BNX_DMUL(n, hw);
    if (ch >= (size_t)g.c) return;
    double s1 = 0.0, s2 = 0.0;
    for (size_t k = 0; k < g.nchunks; k++) {
        const float2 v = part[k * (size_t)g.c + ch];
        s1 = BNX_DADD(s1, (double)v.x);
        s2 = BNX_DADD(s2, (double)v.y);
    }
    sums[ch] = s1;
    sums[(size_t)g.c + ch] = s2;
    dgamma[ch] = add ? BNX_FADD(dgamma[ch], (float)s2) : (float)s2;
    dbeta[ch] = add ? BNX_FADD(dbeta[ch], (float)s1) : (float)s1;
}

/* coef[ch] = k, coef[c + ch] = m1, coef[2 c + ch] = m2. */
static __global__ void bnx_bwd_coef(int c, const double *__restrict__ sums,
                                    const float *__restrict__ gamma,
                                    const float *__restrict__ invstd, float *__restrict__ coef)
{
    const size_t ch = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (ch >= (size_t)c) return;
    const double n = sums[2 * (size_t)c];
    coef[ch] = BNX_FMUL(gamma[ch], invstd[ch]);
    coef[(size_t)c + ch] = (float)BNX_DDIV(sums[ch], n);
    coef[2 * (size_t)c + ch] = (float)BNX_DDIV(sums[(size_t)c + ch], n);
}

static __global__ void
bnx_bwd_apply(bnx_geo g, uint16_t *__restrict__ dx, const uint16_t *__restrict__ dy, size_t y_ld,
              const uint16_t *__restrict__ x, size_t x_ld, const float *__restrict__ mean,
              const float *__restrict__ invstd, const float *__restrict__ gamma,
              const float *__restrict__ beta, const float *__restrict__ coef, int add)
{
    const size_t total = g.cnt * (size_t)g.c, c = (size_t)g.c;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t ch = t % c, p = t / c, xi = bnx_at(g, x_ld, p, ch);
        float xhat;
        const float dz = kern_bnx_dz(dy[bnx_at(g, y_ld, p, ch)], x[xi], mean[ch], invstd[ch],
                                     gamma[ch], beta[ch], &xhat);
        dx[xi] = kern_bnx_dx(dz, xhat, coef[ch], coef[c + ch], coef[2 * c + ch], add,
                             add ? dx[xi] : (uint16_t)0);
    }
}

/* The checks of every op, the geometry, and whether the chunks' partials fit the scratch. */
static int bnx_setup(struct kern_ctx *ctx, const struct kern_bnx *d, bnx_geo *g)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!d) return -EINVAL;
    const size_t ld[3] = { d->x_ld, d->y_ld, d->r_ld };
    if (kern_bnx_check_shape(d->n, d->c, d->hw, d->layout, d->dtype, d->eps, d->momentum, ld) < 0)
        return -EINVAL;
    g->layout = d->layout;
    g->c = d->c;
    g->hw = d->hw;
    g->cnt = (size_t)d->n * (size_t)d->hw;
    g->chunk = KERN_BNX_CHUNK(g->cnt, d->c);
    g->nchunks = (g->cnt + g->chunk - 1) / g->chunk;
    if (g->nchunks * (size_t)d->c * sizeof(float2) > KERN_CUDA_SCRATCH_BYTES ||
        3 * (size_t)d->c * sizeof(float) > KERN_CUDA_SCRATCH_BYTES)
        return -EINVAL;
    return 0;
}

int kern_cuda_bnx_stats(struct kern_ctx *ctx, const struct kern_bnx *d, double *sums,
                        const uint16_t *x)
{
    bnx_geo g;
    const int rc = bnx_setup(ctx, d, &g);
    if (rc < 0) return rc;
    if (!sums || !x) return -EINVAL;
    struct kern_cuda_state *st = kern_cuda_st(ctx);
    float2 *part = (float2 *)st->scratch;
    bnx_part<<<kern_cuda_blocks(g.nchunks * (size_t)g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g, x, d->x_ld, NULL, 0, NULL, NULL, NULL, NULL, part);
    bnx_stats_merge<<<kern_cuda_chan_blocks(g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g, part, sums, (double)d->n, (double)d->hw);
    return kern_cuda_launched(ctx, "bnx_stats");
}

int kern_cuda_bnx_silu_apply(struct kern_ctx *ctx, const struct kern_bnx *d, uint16_t *y,
                             float *save_mean, float *save_invstd, float *running_mean,
                             float *running_var, const uint16_t *x, const float *gamma,
                             const float *beta, const double *sums, const uint16_t *r)
{
    bnx_geo g;
    const int rc = bnx_setup(ctx, d, &g);
    if (rc < 0) return rc;
    if (!y || !x || !gamma || !beta || !sums || (!running_mean != !running_var)) return -EINVAL;
    struct kern_cuda_state *st = kern_cuda_st(ctx);
    float *coef = (float *)st->scratch;
    bnx_coef<<<kern_cuda_chan_blocks(g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g.c, d->eps, d->momentum, sums, gamma, beta, save_mean, save_invstd, running_mean,
        running_var, coef);
    bnx_apply<<<kern_cuda_blocks(g.cnt * (size_t)g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g, y, d->y_ld, x, d->x_ld, r, d->r_ld, coef);
    return kern_cuda_launched(ctx, "bnx_silu_apply");
}

int kern_cuda_bnx_silu_bwd_reduce(struct kern_ctx *ctx, const struct kern_bnx *d, double *sums,
                                  float *dgamma, float *dbeta, const uint16_t *dy,
                                  const uint16_t *x, const float *gamma, const float *beta,
                                  const float *save_mean, const float *save_invstd, unsigned accum)
{
    bnx_geo g;
    const int rc = bnx_setup(ctx, d, &g);
    if (rc < 0) return rc;
    if (!sums || !dgamma || !dbeta || !dy || !x || !gamma || !beta || !save_mean || !save_invstd)
        return -EINVAL;
    struct kern_cuda_state *st = kern_cuda_st(ctx);
    float2 *part = (float2 *)st->scratch;
    bnx_part<<<kern_cuda_blocks(g.nchunks * (size_t)g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g, x, d->x_ld, dy, d->y_ld, save_mean, save_invstd, gamma, beta, part);
    bnx_bwd_merge<<<kern_cuda_chan_blocks(g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g, part, sums, dgamma, dbeta, (accum & KERN_ACCUM_DPARAM) != 0, (double)d->n,
        (double)d->hw);
    return kern_cuda_launched(ctx, "bnx_silu_bwd_reduce");
}

int kern_cuda_bnx_silu_bwd_apply(struct kern_ctx *ctx, const struct kern_bnx *d, uint16_t *dx,
                                 const uint16_t *dy, const uint16_t *x, const float *gamma,
                                 const float *beta, const float *save_mean,
                                 const float *save_invstd, const double *sums, unsigned accum)
{
    bnx_geo g;
    const int rc = bnx_setup(ctx, d, &g);
    if (rc < 0) return rc;
    if (!dx || !dy || !x || !gamma || !beta || !save_mean || !save_invstd || !sums) return -EINVAL;
    struct kern_cuda_state *st = kern_cuda_st(ctx);
    float *coef = (float *)st->scratch;
    bnx_bwd_coef<<<kern_cuda_chan_blocks(g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g.c, sums, gamma, save_invstd, coef);
    bnx_bwd_apply<<<kern_cuda_blocks(g.cnt * (size_t)g.c), KERN_CUDA_THREADS, 0, st->stream>>>(
        g, dx, dy, d->y_ld, x, d->x_ld, save_mean, save_invstd, gamma, beta, coef,
        (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "bnx_silu_bwd_apply");
}
