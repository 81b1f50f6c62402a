/*
 * The pieces of batch norm that the fused ops (kern_bn.c) and the phased ones for SyncBatchNorm
 * (kern_bn_sync.c) share, so that both compute every value the same way: argument checks
 * (kern_bn_args.h, which the CUDA ops use too), the vectorisable exp/sigmoid, the chunked channel
 * moments, the forward apply, and the backward's chunk sums and dx pass. Private to kernels/ref.
 */
#ifndef KERN_BN_COMMON_H
#define KERN_BN_COMMON_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kern.h"
#include "kern_bn_args.h"

/*
 * Sums run in float over chunks that stay in L1, KERN_BN_LANES independent lanes (so that the
 * compiler can vectorise a float reduction without reassociating), then the chunk totals in
 * double: the error is that of a KERN_BN_CHUNK / KERN_BN_LANES element float sum.
 */
#define KERN_BN_LANES 16
#define KERN_BN_CHUNK 1024

/*
 * exp(v) for v in [-87.3, 88.7], vectorisable: no libm call, no branch, only float and int32
 * arithmetic. n = round(v / ln 2) by the 1.5 * 2^23 trick (the integer sits in the low mantissa
 * bits), r = v - n ln 2 in two parts (Cody-Waite), exp(r) by the degree-6 polynomial of Cephes'
 * expf (relative error about 1 ulp), then 2^n added into the exponent field. Callers clamp v.
 */
static inline float kern_bn_expf(float v)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    const float t = v * 1.44269504088896341f + magic;
    const float nf = t - magic;
    uint32_t tb, mb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    const uint32_t n = tb - mb; /* round(v log2 e), two's complement */
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

/*
 * The clamp of kern_bn_sigmoid, {-87, 88}, defined in kern_bn_lim.c so that no compiler sees its
 * values here. With literal bounds GCC splits the select into its arms, folds exp of the constant
 * arm, and in the vector loops evaluates that arm on every lane before blending: z times
 * 1 / (1 + e^88), a subnormal, every time, and each subnormal result costs an FP assist. The
 * SiLU pass ran at 4.2 ns per element (AVX-512, in cache) for that, 0.5 ns without.
 */
extern const float kern_bn_sigmoid_lim[2];

/* 1 / (1 + exp(-v)) for any float v (clamped where exp(-v) leaves the float range). */
static inline float kern_bn_sigmoid(float v)
{
    float m = -v;
    m = m < kern_bn_sigmoid_lim[0] ? kern_bn_sigmoid_lim[0] : m;
    m = m > kern_bn_sigmoid_lim[1] ? kern_bn_sigmoid_lim[1] : m;
    return 1.0f / (1.0f + kern_bn_expf(m));
}

static inline float kern_bn_silu_grad(float v)
{
    const float s = kern_bn_sigmoid(v);
    return s * (1.0f + v * (1.0f - s));
}

/*
 * Channel c of x (n, c, hw): *count elements, their *mean and the sum of squared deviations *m2,
 * in one pass over memory (each L1 chunk read twice, chunks merged in double by Chan et al.'s
 * pairwise update).
 */
void kern_bn_moments(const struct kern_bn *d, size_t c, const float *restrict x, double *mean,
                     double *m2, double *count);

/*
 * Batch statistics of channel c of x (the training forward's): *mean_out and *invstd_out in
 * double, save_mean[c] and save_invstd[c] when non-NULL, and the running-stat update when
 * running_mean is non-NULL.
 */
void kern_bn_channel_stats(const struct kern_bn *d, int c, const float *restrict x,
                           double *mean_out, double *invstd_out, float *restrict save_mean,
                           float *restrict save_invstd, float *restrict running_mean,
                           float *restrict running_var);

/*
 * Channel ch's mean and biased variance from a summed buffer (KERN_BN_SUMS_LEN(c) doubles: sum x,
 * sum x^2, count): E[x^2] - mean^2, below 0 (its rounding) taken as 0, a NaN kept. One definition
 * for the NCHW ops' SyncBatchNorm and the blocked ones' (kern_bn_blk.c).
 */
static inline void kern_bn_sums_moments(const double *sums, size_t c, size_t ch, double *mean,
                                        double *var)
{
    const double cnt = sums[2 * c];
    *mean = sums[ch] / cnt;
    *var = sums[c + ch] / cnt - *mean * *mean;
    if (*var < 0.0) *var = 0.0;
}

/*
 * SyncBatchNorm's forward apply for channel c (kern_bn_sync.c): the statistics from the summed
 * buffer, the saves and running update as kern_bn_channel_stats, and *a, *b such that
 * bn(x) = x a + b.
 */
void kern_bn_sums_coef(const struct kern_bn *d, size_t c, const double *restrict sums,
                       float *restrict save_mean, float *restrict save_invstd,
                       float *restrict running_mean, float *restrict running_var,
                       const float *restrict gamma, const float *restrict beta, float *a, float *b);

/* The eval forward's per-channel coefficients, bn(x) = x a + b from the running statistics:
 * one definition for every op that applies them (kern_bn.c, kern_resadd.c, the fused conv in
 * kern_conv.c), so that all round alike. */
static inline void kern_bn_eval_coef(float gamma, float beta, float running_mean, float running_var,
                                     float eps, float *a, float *b)
{
    const double invstd = 1.0 / sqrt((double)running_var + (double)eps);
    *a = (float)(gamma * invstd);
    *b = (float)(beta - running_mean * (double)gamma * invstd);
}

/* y = x a + b (then SiLU) over channel c, for every image; y steps kern_bn_y_nstride(d). */
void kern_bn_apply_channel(const struct kern_bn *d, size_t c, float *restrict y,
                           const float *restrict x, float a, float b, int silu);

/* y[0..len) = silu(x a + b), plus r[0..len) when r != NULL, an L1-sized span at a time: the
 * BN+SiLU op's own loop, then a plain add while the span is in L1 (kern_resadd.c), so the result
 * is the unfused ops' bit for bit. Used by the residual op and the fused eval conv. */
void kern_bn_silu_add_span(float *restrict y, const float *restrict x, const float *restrict r,
                           size_t len, float a, float b);

/* dz = dy silu'(xhat g + bt) over x[0..len), xhat = (x - mean) invstd, into gz. */
void kern_bn_dz_chunk(float *restrict gz, const float *restrict dy, const float *restrict x,
                      size_t len, float mean, float invstd, float g, float bt);

/* *s1 = sum of g[0..len), *s2 = sum of g xhat, len <= KERN_BN_CHUNK, in lanes. */
void kern_bn_grad_sums(const float *restrict g, const float *restrict x, size_t len, float mean,
                       float invstd, float *s1, float *s2);

/*
 * The backward's dx pass over channel c (dy steps kern_bn_y_nstride(d), x and dx are dense):
 * dx (= or += with add) k (dz - mdy - xhat mdyx),
 * k = g invstd, dz = dy (silu 0) or dy silu'(xhat g + bt) recomputed (silu 1), or, with
 * dz_in_dx (silu, not add), the dz an earlier pass parked in dx.
 */
void kern_bn_dx_channel(const struct kern_bn *d, size_t c, float *restrict dx,
                        const float *restrict dy, const float *restrict x, float mean, float invstd,
                        float g, float bt, float mdy, float mdyx, int add, int silu, int dz_in_dx);

#endif
