/*
 * BN + SiLU (+ residual) on 16-bit activations, NCHW or NHWC, CPU reference. Contracts in
 * kern_bn.h, "BN + SiLU (+ residual) on 16-bit activations".
 *
 * Every number is kern_bnx_common.h's, in the order the contract gives (chunks of pixels, each
 * summed pixel by pixel in float, merged in double chunk after chunk), so that the CUDA twins
 * (kern_cuda_bnx.cu) give the same bits. This file is compiled without FP contraction (the pragma
 * below): the build's -ffp-contract=fast would let the compiler fuse a product into a sum where
 * the device rounds both.
 * Threads: channels are split over the context's threads; each channel's values are computed the
 * same way whatever the split.
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdbool.h>

#include "kern_bnx_common.h"
#include "kern_internal.h"

void kern_bnx_init(struct kern_bnx *d, int n, int c, int hw, int layout)
{
    if (!d) return;
    *d = (struct kern_bnx){ .n = n,
                            .c = c,
                            .hw = hw,
                            .layout = layout,
                            .dtype = KERN_DT_BF16,
                            .eps = KERN_BN_EPS,
                            .momentum = KERN_BN_MOMENTUM };
}

/* Every phase's checks: a CPU context, the descriptor, the phase's own arguments (args_ok). */
static int enter(const struct kern_ctx *ctx, const struct kern_bnx *d, bool args_ok)
{
    if (!ctx) return -EINVAL;
    if (ctx->backend != KERN_BACKEND_CPU) return -KERN_EBACKEND;
    if (!d || !args_ok) return -EINVAL;
    const size_t ld[3] = { d->x_ld, d->y_ld, d->r_ld };
    return kern_bnx_check_shape(d->n, d->c, d->hw, d->layout, d->dtype, d->eps, d->momentum, ld) < 0
               ? -EINVAL
               : 0;
}

struct bnx_job {
    const struct kern_bnx *d;
    double *sums;
    const double *sums_in;
    uint16_t *y, *dx;
    float *save_mean, *save_invstd, *running_mean, *running_var, *dgamma, *dbeta;
    const uint16_t *x, *dy, *r;
    const float *gamma, *beta, *mean_in, *invstd_in;
    unsigned accum;
};

/* A backward pass's job: the forward's inputs and saves, and what to add to. */
static struct bnx_job bwd_job(const struct kern_bnx *d, const uint16_t *dy, const uint16_t *x,
                              const float *gamma, const float *beta, const float *save_mean,
                              const float *save_invstd, unsigned accum)
{
    return (struct bnx_job){ .d = d,
                             .dy = dy,
                             .x = x,
                             .gamma = gamma,
                             .beta = beta,
                             .mean_in = save_mean,
                             .invstd_in = save_invstd,
                             .accum = accum };
}

/* The channels this worker takes, and the phase's check and run over the context's threads. */
static int run(struct kern_ctx *ctx, const struct bnx_job *j, kern_task_fn *fn)
{
    const struct kern_bnx *const d = j->d;
    kern_parallel(ctx, fn, (void *)j, (size_t)d->n * (size_t)d->c * (size_t)d->hw);
    if (j->sums) j->sums[2 * (size_t)d->c] = (double)d->n * (double)d->hw;
    return 0;
}

/* Element (pixel p of the n hw, channel ch) of a tensor with stride ld. */
static size_t at(const struct kern_bnx *d, size_t ld, size_t p, size_t ch)
{
    const size_t hw = (size_t)d->hw;
    return kern_bnx_at(d->layout, d->c, d->hw, ld, p / hw, ch, p % hw);
}

/* What a worker of a phase sees: the job, the pixels a channel has, the chunk, its channels. */
struct bnx_span {
    const struct bnx_job *j;
    const struct kern_bnx *d;
    size_t cnt, chunk, lo, hi;
};

static struct bnx_span span(const void *arg, int w, int nw)
{
    const struct bnx_job *const j = arg;
    struct bnx_span s = { .j = j, .d = j->d, .cnt = (size_t)j->d->n * (size_t)j->d->hw };
    s.chunk = KERN_BNX_CHUNK(s.cnt, j->d->c);
    kern_share((size_t)j->d->c, w, nw, &s.lo, &s.hi);
    return s;
}

static void stats_task(void *arg, int w, int nw)
{
    const struct bnx_span S = span(arg, w, nw);
    const struct bnx_job *const j = S.j;
    const struct kern_bnx *const d = S.d;
    const size_t cnt = S.cnt, chunk = S.chunk;
    for (size_t ch = S.lo; ch < S.hi; ch++) {
        double seen = 0.0, mean = 0.0, m2 = 0.0;
        for (size_t p0 = 0; p0 < cnt; p0 += chunk) {
            const size_t len = cnt - p0 < chunk ? cnt - p0 : chunk;
            float s = 0.0f, q = 0.0f;
            for (size_t p = p0; p < p0 + len; p++)
                s = BNX_FADD(s, kern_bf16_to_f32(j->x[at(d, d->x_ld, p, ch)]));
            const float mf = BNX_FDIV(s, (float)len);
            for (size_t p = p0; p < p0 + len; p++) {
                const float v = BNX_FSUB(kern_bf16_to_f32(j->x[at(d, d->x_ld, p, ch)]), mf);
                q = BNX_FADD(q, BNX_FMUL(v, v));
            }
            kern_bnx_merge(&seen, &mean, &m2, (double)len, s, q, mf);
        }
        j->sums[ch] = BNX_DMUL(seen, mean);
        j->sums[(size_t)d->c + ch] = BNX_DADD(m2, BNX_DMUL(BNX_DMUL(seen, mean), mean));
    }
}

int kern_ref_bnx_stats(struct kern_ctx *ctx, const struct kern_bnx *d, double *restrict sums,
                       const uint16_t *restrict x)
{
    const int rc = enter(ctx, d, sums && x);
    if (rc < 0) return rc;
    const struct bnx_job j = { .d = d, .sums = sums, .x = x };
    return run(ctx, &j, stats_task);
}

static void apply_task(void *arg, int w, int nw)
{
    const struct bnx_span S = span(arg, w, nw);
    const struct bnx_job *const j = S.j;
    const struct kern_bnx *const d = S.d;
    for (size_t ch = S.lo; ch < S.hi; ch++) {
        float a, b;
        kern_bnx_coef(j->sums_in, (size_t)d->c, ch, d->eps, d->momentum, j->gamma[ch], j->beta[ch],
                      j->save_mean ? j->save_mean + ch : NULL,
                      j->save_invstd ? j->save_invstd + ch : NULL,
                      j->running_mean ? j->running_mean + ch : NULL,
                      j->running_var ? j->running_var + ch : NULL, &a, &b);
        for (size_t p = 0; p < S.cnt; p++)
            j->y[at(d, d->y_ld, p, ch)] =
                kern_bnx_fwd(j->x[at(d, d->x_ld, p, ch)], a, b, j->r != NULL,
                             j->r ? j->r[at(d, d->r_ld, p, ch)] : 0);
    }
}

int kern_ref_bnx_silu_apply(struct kern_ctx *ctx, const struct kern_bnx *d, uint16_t *restrict y,
                            float *restrict save_mean, float *restrict save_invstd,
                            float *restrict running_mean, float *restrict running_var,
                            const uint16_t *restrict x, const float *restrict gamma,
                            const float *restrict beta, const double *restrict sums,
                            const uint16_t *restrict r)
{
    const int rc = enter(ctx, d, y && x && gamma && beta && sums && !running_mean == !running_var);
    if (rc < 0) return rc;
    struct bnx_job j = { .d = d,
                         .sums_in = sums,
                         .y = y,
                         .save_mean = save_mean,
                         .save_invstd = save_invstd,
                         .running_mean = running_mean,
                         .running_var = running_var,
                         .x = x,
                         .r = r,
                         .gamma = gamma,
                         .beta = beta };
    return run(ctx, &j, apply_task);
}

/* A channel's forward statistics and parameters, as the backward reads them. */
struct bnx_chan {
    float mean, invstd, g, bt;
};

static struct bnx_chan chan(const struct bnx_job *j, size_t ch)
{
    return (struct bnx_chan){ j->mean_in[ch], j->invstd_in[ch], j->gamma[ch], j->beta[ch] };
}

/* dz at pixel p of channel ch (and its xhat). */
static float dz_at(const struct bnx_job *j, struct bnx_chan k, size_t p, size_t ch, float *xhat)
{
    const struct kern_bnx *const d = j->d;
    return kern_bnx_dz(j->dy[at(d, d->y_ld, p, ch)], j->x[at(d, d->x_ld, p, ch)], k.mean, k.invstd,
                       k.g, k.bt, xhat);
}

static void bwd_reduce_task(void *arg, int w, int nw)
{
    const struct bnx_span S = span(arg, w, nw);
    const struct bnx_job *const j = S.j;
    const struct kern_bnx *const d = S.d;
    const size_t cnt = S.cnt, chunk = S.chunk;
    for (size_t ch = S.lo; ch < S.hi; ch++) {
        const struct bnx_chan k = chan(j, ch);
        double s1 = 0.0, s2 = 0.0;
        for (size_t p0 = 0; p0 < cnt; p0 += chunk) {
            const size_t len = cnt - p0 < chunk ? cnt - p0 : chunk;
            float a1 = 0.0f, a2 = 0.0f;
            for (size_t p = p0; p < p0 + len; p++) {
                float xhat;
                const float dz = dz_at(j, k, p, ch, &xhat);
                a1 = BNX_FADD(a1, dz);
                a2 = BNX_FADD(a2, BNX_FMUL(dz, xhat));
            }
            s1 = BNX_DADD(s1, (double)a1);
            s2 = BNX_DADD(s2, (double)a2);
        }
        j->sums[ch] = s1;
        j->sums[(size_t)d->c + ch] = s2;
        const bool add = (j->accum & KERN_ACCUM_DPARAM) != 0;
        j->dgamma[ch] = add ? BNX_FADD(j->dgamma[ch], (float)s2) : (float)s2;
        j->dbeta[ch] = add ? BNX_FADD(j->dbeta[ch], (float)s1) : (float)s1;
    }
}

int kern_ref_bnx_silu_bwd_reduce(struct kern_ctx *ctx, const struct kern_bnx *d,
                                 double *restrict sums, float *restrict dgamma,
                                 float *restrict dbeta, const uint16_t *restrict dy,
                                 const uint16_t *restrict x, const float *restrict gamma,
                                 const float *restrict beta, const float *restrict save_mean,
                                 const float *restrict save_invstd, unsigned accum)
{
    const int rc = enter(ctx, d,
                         !(!sums || !dgamma || !dbeta || !dy || !x || !gamma || !beta ||
                           !save_mean || !save_invstd));
    if (rc < 0) return rc;
    struct bnx_job j = bwd_job(d, dy, x, gamma, beta, save_mean, save_invstd, accum);
    j.sums = sums, j.dgamma = dgamma, j.dbeta = dbeta;
    return run(ctx, &j, bwd_reduce_task);
}

static void bwd_apply_task(void *arg, int w, int nw)
{
    const struct bnx_span S = span(arg, w, nw);
    const struct bnx_job *const j = S.j;
    const struct kern_bnx *const d = S.d;
    const size_t cc = (size_t)d->c;
    const int add = (j->accum & KERN_ACCUM_DX) != 0;
    for (size_t ch = S.lo; ch < S.hi; ch++) {
        const struct bnx_chan k = chan(j, ch);
        const double n = j->sums_in[2 * cc];
        const float m1 = (float)BNX_DDIV(j->sums_in[ch], n);
        const float m2 = (float)BNX_DDIV(j->sums_in[cc + ch], n);
        const float kg = BNX_FMUL(k.g, k.invstd);
        for (size_t p = 0; p < S.cnt; p++) {
            float xhat;
            const float dz = dz_at(j, k, p, ch, &xhat);
            const size_t xi = at(d, d->x_ld, p, ch);
            j->dx[xi] = kern_bnx_dx(dz, xhat, kg, m1, m2, add, add ? j->dx[xi] : 0);
        }
    }
}

int kern_ref_bnx_silu_bwd_apply(struct kern_ctx *ctx, const struct kern_bnx *d,
                                uint16_t *restrict dx, const uint16_t *restrict dy,
                                const uint16_t *restrict x, const float *restrict gamma,
                                const float *restrict beta, const float *restrict save_mean,
                                const float *restrict save_invstd, const double *restrict sums,
                                unsigned accum)
{
    const int rc = enter(
        ctx, d, !(!dx || !dy || !x || !gamma || !beta || !save_mean || !save_invstd || !sums));
    if (rc < 0) return rc;
    struct bnx_job j = bwd_job(d, dy, x, gamma, beta, save_mean, save_invstd, accum);
    j.sums_in = sums, j.dx = dx;
    return run(ctx, &j, bwd_apply_task);
}
