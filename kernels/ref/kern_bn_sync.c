/*
 * Batch norm and BN+SiLU in phases (SyncBatchNorm), CPU reference. Contracts in kern.h,
 * "Batch norm in phases".
 *
 * Shapes (NCHW, float32, dense): x, y, dx, dy (n, c, hw) with hw = h * w; gamma, beta,
 * running_mean, running_var, save_mean, save_invstd, dgamma, dbeta (c); sums
 * (KERN_BN_SUMS_LEN(c) = 2c + 1 doubles): two per-channel sums, then the element count.
 *
 * stats: per channel the mean and the sum of squared deviations M2 exactly as kern_bn.c's
 * training forward computes them (L1-sized float chunks, 16 lanes, chunk results merged in
 * double with Chan's update), then sum x = N mean and sum x^2 = M2 + N mean^2 in double.
 * fwd_apply: mean = S1 / N, var = S2 / N - mean^2 (double), then kern_bn.c's y = x a + b.
 * bwd_reduce: kern_bn.c's first backward pass (float chunks of 16 lanes, totals in double).
 * bwd_apply: kern_bn.c's second backward pass with the summed means.
 * So with one rank the phases give the fused ops' results up to the rounding of the variance.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dgamma and dbeta overwrite unless
 * accum has KERN_ACCUM_DPARAM. Overwritten buffers are never read.
 * Threads: channels are split over the context's threads; every value is computed the same way
 * whatever the split, so results do not depend on the thread count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compiler.h"
#include "kern_internal.h"

/* As kern_bn.c, so that the phases and the fused ops agree. */
#define BNS_LANES 16
#define BNS_CHUNK 1024

static int bns_check(const struct kern_bn *d)
{
    if (!d || d->n < 1 || d->c < 1 || d->hw < 1) return -EINVAL;
    if (!(d->eps >= 0.0f) || !(d->momentum >= 0.0f && d->momentum <= 1.0f)) return -EINVAL;
    return 0;
}

/*
 * exp(v) for v in [-87.3, 88.7] without libm, vectorisable: kern_bn.c's bn_expf (Cody-Waite
 * reduction, Cephes' degree-6 polynomial, 2^n added into the exponent), kept identical so that
 * the fused and the phased SiLU give the same bits. Callers clamp v.
 */
static inline float bns_expf(float v)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    const float t = v * 1.44269504088896341f + magic;
    const float nf = t - magic;
    uint32_t tb, mb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    const uint32_t n = tb - mb;
    const float r = (v - nf * 0.693359375f) - nf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t pb;
    memcpy(&pb, &p, sizeof pb);
    pb += n << 23;
    memcpy(&p, &pb, sizeof p);
    return p;
}

static inline float bns_sigmoid(float v)
{
    float m = -v;
    m = m < -87.0f ? -87.0f : m;
    m = m > 88.0f ? 88.0f : m;
    return 1.0f / (1.0f + bns_expf(m));
}

static inline float bns_silu_grad(float v)
{
    const float s = bns_sigmoid(v);
    return s * (1.0f + v * (1.0f - s));
}

static double bns_lanes(const float *acc)
{
    double s = 0.0;
    for (int k = 0; k < BNS_LANES; k++)
        s += acc[k];
    return s;
}

/* Sum of x[0..len), len <= BNS_CHUNK. */
KERN_VEC_CLONES static float bns_chunk_sum(const float *restrict x, size_t len)
{
    float acc[BNS_LANES] = { 0 };
    size_t j = 0;
    for (; j + BNS_LANES <= len; j += BNS_LANES)
        for (int k = 0; k < BNS_LANES; k++)
            acc[k] += x[j + k];
    for (; j < len; j++)
        acc[0] += x[j];
    return (float)bns_lanes(acc);
}

/* Sum of (x - m)^2 over x[0..len), len <= BNS_CHUNK. */
KERN_VEC_CLONES static float bns_chunk_sq(const float *restrict x, size_t len, float m)
{
    float acc[BNS_LANES] = { 0 };
    size_t j = 0;
    for (; j + BNS_LANES <= len; j += BNS_LANES)
        for (int k = 0; k < BNS_LANES; k++) {
            const float t = x[j + k] - m;
            acc[k] += t * t;
        }
    for (; j < len; j++) {
        const float t = x[j] - m;
        acc[0] += t * t;
    }
    return (float)bns_lanes(acc);
}

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
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    size_t lo, hi;
    kern_share((size_t)d->c, w, nw, &lo, &hi);
    for (size_t c = lo; c < hi; c++) {
        /* kern_bn.c's bn_channel_stats: chunk mean and squares about it, merged in double */
        double mean = 0.0, q = 0.0, seen = 0.0;
        for (int i = 0; i < d->n; i++) {
            const float *const xc = j->x + (size_t)i * plane + c * hw;
            for (size_t j0 = 0; j0 < hw; j0 += BNS_CHUNK) {
                const size_t len = hw - j0 < BNS_CHUNK ? hw - j0 : BNS_CHUNK;
                const double nb = (double)len;
                const double mb = (double)bns_chunk_sum(xc + j0, len) / nb;
                const float mf = (float)mb;
                const double qb = (double)bns_chunk_sq(xc + j0, len, mf) -
                                  nb * (mb - (double)mf) * (mb - (double)mf);
                const double tot = seen + nb, delta = mb - mean;
                mean += delta * nb / tot;
                q += qb + delta * delta * seen * nb / tot;
                seen = tot;
            }
        }
        j->sums[c] = seen * mean;
        j->sums[(size_t)d->c + c] = q + seen * mean * mean;
    }
}

int kern_ref_bn_stats(struct kern_ctx *ctx, const struct kern_bn *d, double *restrict sums,
                      const float *restrict x)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = bns_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!sums || !x, -EINVAL);
    struct bns_job j = { .d = d, .sums = sums, .x = x };
    kern_parallel(ctx, stats_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    sums[2 * (size_t)d->c] = (double)d->n * (double)d->hw;
    return 0;
}

/* y = x a + b (then SiLU) over channel c, for every image: kern_bn.c's bn_apply_channel. */
KERN_VEC_CLONES static void apply_channel(const struct kern_bn *d, size_t c, float *restrict y,
                                          const float *restrict x, float a, float b, int silu)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    for (int i = 0; i < d->n; i++) {
        const float *const xc = x + (size_t)i * plane + c * hw;
        float *const yc = y + (size_t)i * plane + c * hw;
        if (silu) {
            for (size_t k = 0; k < hw; k++) {
                const float z = xc[k] * a + b;
                yc[k] = z * bns_sigmoid(z);
            }
        } else {
            for (size_t k = 0; k < hw; k++)
                yc[k] = xc[k] * a + b;
        }
    }
}

static void fwd_apply_task(void *arg, int w, int nw)
{
    const struct bns_job *const j = arg;
    const struct kern_bn *const d = j->d;
    const size_t cc = (size_t)d->c;
    const double cnt = j->sums_in[2 * cc];
    size_t lo, hi;
    kern_share(cc, w, nw, &lo, &hi);
    for (size_t c = lo; c < hi; c++) {
        const double mean = j->sums_in[c] / cnt;
        double var = j->sums_in[cc + c] / cnt - mean * mean;
        if (var < 0.0) var = 0.0; /* rounding of E[x^2] - mean^2; a NaN stays NaN */
        const double invstd = 1.0 / sqrt(var + (double)d->eps);
        if (j->save_mean) j->save_mean[c] = (float)mean;
        if (j->save_invstd) j->save_invstd[c] = (float)invstd;
        if (j->running_mean) {
            const double m = d->momentum;
            j->running_mean[c] = (float)((1.0 - m) * j->running_mean[c] + m * mean);
            j->running_var[c] =
                (float)((1.0 - m) * j->running_var[c] + m * var * cnt / (cnt - 1.0));
        }
        const float a = (float)(j->gamma[c] * invstd);
        const float b = (float)(j->beta[c] - mean * j->gamma[c] * invstd);
        apply_channel(d, c, j->y, j->x, a, b, j->silu);
    }
}

static int fwd_apply_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                            float *restrict save_mean, float *restrict save_invstd,
                            float *restrict running_mean, float *restrict running_var,
                            const float *restrict x, const float *restrict gamma,
                            const float *restrict beta, const double *restrict sums, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = bns_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!y || !x || !gamma || !beta || !sums, -EINVAL);
    KERN_RETURN_IF(!running_mean != !running_var, -EINVAL);
    KERN_RETURN_IF(running_mean && (size_t)d->n * (size_t)d->hw < 2, -EINVAL);
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

/* Sums of g[0..len) and g xhat, len <= BNS_CHUNK (kern_bn.c's lane order). */
KERN_VEC_CLONES static void reduce_chunk(const float *restrict g, const float *restrict x,
                                         size_t len, float mean, float invstd, float *s1, float *s2)
{
    float a1[BNS_LANES] = { 0 }, a2[BNS_LANES] = { 0 };
    size_t k = 0;
    for (; k + BNS_LANES <= len; k += BNS_LANES)
        for (int l = 0; l < BNS_LANES; l++) {
            const float v = g[k + l];
            a1[l] += v;
            a2[l] += v * ((x[k + l] - mean) * invstd);
        }
    for (; k < len; k++) {
        a1[0] += g[k];
        a2[0] += g[k] * ((x[k] - mean) * invstd);
    }
    *s1 = (float)bns_lanes(a1);
    *s2 = (float)bns_lanes(a2);
}

/* dz = dy silu'(xhat g + bt) over a chunk. */
KERN_VEC_CLONES static void dz_chunk(float *restrict gz, const float *restrict dy,
                                     const float *restrict x, size_t len, float mean, float invstd,
                                     float g, float bt)
{
    for (size_t k = 0; k < len; k++) {
        const float xh = (x[k] - mean) * invstd;
        gz[k] = dy[k] * bns_silu_grad(xh * g + bt);
    }
}

static void bwd_reduce_task(void *arg, int w, int nw)
{
    const struct bns_job *const j = arg;
    const struct kern_bn *const d = j->d;
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    size_t lo, hi;
    kern_share((size_t)d->c, w, nw, &lo, &hi);
    float tmp[BNS_CHUNK];
    for (size_t c = lo; c < hi; c++) {
        const float mean = j->mean_in[c], invstd = j->invstd_in[c];
        const float g = j->silu ? j->gamma[c] : 0.0f, bt = j->silu ? j->beta[c] : 0.0f;
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < d->n; i++) {
            const size_t off = (size_t)i * plane + c * hw;
            for (size_t j0 = 0; j0 < hw; j0 += BNS_CHUNK) {
                const size_t len = hw - j0 < BNS_CHUNK ? hw - j0 : BNS_CHUNK;
                const float *gz = j->dy + off + j0;
                if (j->silu) {
                    dz_chunk(tmp, gz, j->x + off + j0, len, mean, invstd, g, bt);
                    gz = tmp;
                }
                float s1, s2;
                reduce_chunk(gz, j->x + off + j0, len, mean, invstd, &s1, &s2);
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
    const int rc = bns_check(d);
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

/* dx (=|+=) k (dz - mdy - xhat mdyx) over channel c, for every image (dz recomputed). */
KERN_VEC_CLONES static void bwd_apply_channel(const struct kern_bn *d, size_t c, float *restrict dx,
                                              const float *restrict dy, const float *restrict x,
                                              float mean, float invstd, float g, float bt,
                                              float mdy, float mdyx, int add, int silu)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    const float k = g * invstd;
    for (int i = 0; i < d->n; i++) {
        const size_t off = (size_t)i * plane + c * hw;
        const float *const xc = x + off, *const dyc = dy + off;
        float *const dxc = dx + off;
        if (silu && !add) {
            for (size_t e = 0; e < hw; e++) {
                const float xh = (xc[e] - mean) * invstd;
                dxc[e] = k * (dyc[e] * bns_silu_grad(xh * g + bt) - mdy - xh * mdyx);
            }
        } else if (silu) {
            for (size_t e = 0; e < hw; e++) {
                const float xh = (xc[e] - mean) * invstd;
                dxc[e] += k * (dyc[e] * bns_silu_grad(xh * g + bt) - mdy - xh * mdyx);
            }
        } else if (!add) {
            for (size_t e = 0; e < hw; e++) {
                const float xh = (xc[e] - mean) * invstd;
                dxc[e] = k * (dyc[e] - mdy - xh * mdyx);
            }
        } else {
            for (size_t e = 0; e < hw; e++) {
                const float xh = (xc[e] - mean) * invstd;
                dxc[e] += k * (dyc[e] - mdy - xh * mdyx);
            }
        }
    }
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
        bwd_apply_channel(d, c, j->dx, j->dy, j->x, j->mean_in[c], j->invstd_in[c], j->gamma[c],
                          j->silu ? j->beta[c] : 0.0f, (float)(j->sums_in[c] / cnt),
                          (float)(j->sums_in[cc + c] / cnt), (j->accum & KERN_ACCUM_DX) != 0,
                          j->silu);
}

static int bwd_apply_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                            const float *restrict dy, const float *restrict x,
                            const float *restrict gamma, const float *restrict beta,
                            const float *restrict save_mean, const float *restrict save_invstd,
                            const double *restrict sums, unsigned accum, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    const int rc = bns_check(d);
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
