/*
 * The per-element math and the reduction order of BN + SiLU on 16-bit activations (kern_bn.h
 * "BN + SiLU (+ residual) on 16-bit activations"), written once for the CPU reference
 * (kern_bnx.c) and the CUDA twins (kern_cuda_bnx.cu): under nvcc every function is also a
 * __device__ one, so both backends run the same lines. Bit-identical results need every float
 * and double operation rounded on its own: on the device the _rn intrinsics (nvcc would fuse a
 * product and a sum into an FMA), on the host plain operators in a file compiled without FP
 * contraction (kern_bnx.c says so). exp is Cephes' polynomial (as kern_bn_expf), not a libm's.
 * Private to kernels/.
 */
#ifndef KERN_BNX_COMMON_H
#define KERN_BNX_COMMON_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kern_lowp_common.h"

#ifdef __CUDACC__
#define KERN_BNX_FN static __host__ __device__ __forceinline__
#else
#define KERN_BNX_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define BNX_FMUL(a, b) __fmul_rn((a), (b))
#define BNX_FADD(a, b) __fadd_rn((a), (b))
#define BNX_FSUB(a, b) __fsub_rn((a), (b))
#define BNX_FDIV(a, b) __fdiv_rn((a), (b))
#define BNX_DMUL(a, b) __dmul_rn((a), (b))
#define BNX_DADD(a, b) __dadd_rn((a), (b))
#define BNX_DSUB(a, b) __dsub_rn((a), (b))
#define BNX_DDIV(a, b) __ddiv_rn((a), (b))
#define BNX_DSQRT(a)   __dsqrt_rn(a)
#else
#define BNX_FMUL(a, b) ((float)(a) * (float)(b))
#define BNX_FADD(a, b) ((float)(a) + (float)(b))
#define BNX_FSUB(a, b) ((float)(a) - (float)(b))
#define BNX_FDIV(a, b) ((float)(a) / (float)(b))
#define BNX_DMUL(a, b) ((double)(a) * (double)(b))
#define BNX_DADD(a, b) ((double)(a) + (double)(b))
#define BNX_DSUB(a, b) ((double)(a) - (double)(b))
#define BNX_DDIV(a, b) ((double)(a) / (double)(b))
#define BNX_DSQRT(a)   sqrt(a)
#endif

/* Element (image i, channel ch, pixel p) of a tensor with stride ld (0: dense) in d's layout. */
KERN_BNX_FN size_t kern_bnx_at(int layout, int c, int hw, size_t ld, size_t i, size_t ch, size_t p)
{
    if (layout == 1) { /* KERN_LAYOUT_NHWC */
        const size_t pix = ld ? ld : (size_t)c;
        return (i * (size_t)hw + p) * pix + ch;
    }
    const size_t img = ld ? ld : (size_t)c * (size_t)hw;
    return i * img + ch * (size_t)hw + p;
}

/* The descriptor's checks, the same on every backend: shape, layout, dtype, strides. d's fields
 * as struct kern_bnx (kern_bn.h); returns 0 or -EINVAL. */
KERN_BNX_FN int kern_bnx_check_shape(int n, int c, int hw, int layout, int dtype, float eps,
                                     float momentum, const size_t ld[3])
{
    if (n < 1 || c < 1 || hw < 1 || (layout != 0 && layout != 1) || dtype != 1) return -EINVAL;
    if (!(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f)) return -EINVAL;
    const size_t dense = layout == 1 ? (size_t)c : (size_t)c * (size_t)hw;
    for (int k = 0; k < 3; k++)
        if (ld[k] && ld[k] < dense) return -EINVAL;
    return 0;
}

/* exp(v) for v in [-87, 88]: kern_bn_expf's steps (Cody-Waite reduction, Cephes' degree-6
 * polynomial, 2^n into the exponent), each operation rounded on its own. */
KERN_BNX_FN float kern_bnx_expf(float v)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: t's low mantissa bits hold round(v log2 e) */
    const float t = BNX_FADD(BNX_FMUL(v, 1.44269504088896341f), magic);
    const float nf = BNX_FSUB(t, magic);
    const uint32_t n = kern_f32_bits(t) - kern_f32_bits(magic);
    const float r =
        BNX_FSUB(BNX_FSUB(v, BNX_FMUL(nf, 0.693359375f)), BNX_FMUL(nf, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = BNX_FADD(BNX_FMUL(p, r), 1.3981999507e-3f);
    p = BNX_FADD(BNX_FMUL(p, r), 8.3334519073e-3f);
    p = BNX_FADD(BNX_FMUL(p, r), 4.1665795894e-2f);
    p = BNX_FADD(BNX_FMUL(p, r), 1.6666665459e-1f);
    p = BNX_FADD(BNX_FMUL(p, r), 5.0000001201e-1f);
    p = BNX_FADD(BNX_FADD(BNX_FMUL(BNX_FMUL(p, r), r), r), 1.0f);
    return kern_f32_from_bits(kern_f32_bits(p) + (n << 23));
}

/* sigmoid(z) = 1 / (1 + exp(-z)), -z clamped to [-87, 88] (NaN stays NaN). */
KERN_BNX_FN float kern_bnx_sigmoid(float z)
{
    float m = -z;
    m = m < -87.0f ? -87.0f : m;
    m = m > 88.0f ? 88.0f : m;
    return BNX_FDIV(1.0f, BNX_FADD(1.0f, kern_bnx_expf(m)));
}

/* The forward of one element: silu(x a + b), plus r when has_r, rounded to bf16. */
KERN_BNX_FN uint16_t kern_bnx_fwd(uint16_t x, float a, float b, int has_r, uint16_t r)
{
    const float z = BNX_FADD(BNX_FMUL(kern_bf16_to_f32(x), a), b);
    float y = BNX_FMUL(z, kern_bnx_sigmoid(z));
    if (has_r) y = BNX_FADD(y, kern_bf16_to_f32(r));
    return kern_bf16_from_f32(y);
}

/* The backward of one element: xhat = (x - mean) invstd, z = xhat g + bt recomputed, and
 * dz = dy silu'(z) = dy s (1 + z (1 - s)). Returns dz; *xhat_out = xhat. */
KERN_BNX_FN float kern_bnx_dz(uint16_t dy, uint16_t x, float mean, float invstd, float g, float bt,
                              float *xhat_out)
{
    const float xhat = BNX_FMUL(BNX_FSUB(kern_bf16_to_f32(x), mean), invstd);
    const float z = BNX_FADD(BNX_FMUL(xhat, g), bt);
    const float s = kern_bnx_sigmoid(z);
    const float grad = BNX_FMUL(s, BNX_FADD(1.0f, BNX_FMUL(z, BNX_FSUB(1.0f, s))));
    *xhat_out = xhat;
    return BNX_FMUL(kern_bf16_to_f32(dy), grad);
}

/* dx = k (dz - m1 - xhat m2), plus the old dx when add; rounded to bf16 once. */
KERN_BNX_FN uint16_t kern_bnx_dx(float dz, float xhat, float k, float m1, float m2, int add,
                                 uint16_t old)
{
    float v = BNX_FMUL(k, BNX_FSUB(BNX_FSUB(dz, m1), BNX_FMUL(xhat, m2)));
    if (add) v = BNX_FADD(kern_bf16_to_f32(old), v);
    return kern_bf16_from_f32(v);
}

/* A chunk's moments into the running (count, mean, M2) of its channel (Chan et al.): the chunk
 * has len pixels, float sum s and float sum of squares about its own float mean q. */
KERN_BNX_FN void kern_bnx_merge(double *seen, double *mean, double *m2, double len, float s,
                                float q, float mf)
{
    const double mb = BNX_DDIV((double)s, len);
    /* sum (x - mb)^2 = sum (x - mf)^2 - len (mb - mf)^2 */
    const double dm = BNX_DSUB(mb, (double)mf);
    const double qb = BNX_DSUB((double)q, BNX_DMUL(BNX_DMUL(len, dm), dm));
    const double tot = BNX_DADD(*seen, len), delta = BNX_DSUB(mb, *mean);
    *mean = BNX_DADD(*mean, BNX_DDIV(BNX_DMUL(delta, len), tot));
    *m2 = BNX_DADD(BNX_DADD(*m2, qb),
                   BNX_DDIV(BNX_DMUL(BNX_DMUL(BNX_DMUL(delta, delta), *seen), len), tot));
    *seen = tot;
}

/* The forward's per-channel coefficients from the summed buffer (kern_bn_sums_coef's formulas,
 * each operation rounded alone): the saves, the running update, bn(x) = x a + b. */
KERN_BNX_FN void kern_bnx_coef(const double *sums, size_t cc, size_t ch, float eps, float momentum,
                               float gamma, float beta, float *save_mean, float *save_invstd,
                               float *running_mean, float *running_var, float *a, float *b)
{
    const double cnt = sums[2 * cc];
    const double mean = BNX_DDIV(sums[ch], cnt);
    double var = BNX_DSUB(BNX_DDIV(sums[cc + ch], cnt), BNX_DMUL(mean, mean));
    if (var < 0.0) var = 0.0;
    const double invstd = BNX_DDIV(1.0, BNX_DSQRT(BNX_DADD(var, (double)eps)));
    if (save_mean) *save_mean = (float)mean;
    if (save_invstd) *save_invstd = (float)invstd;
    if (running_mean) {
        const double m = momentum, keep = BNX_DSUB(1.0, m);
        *running_mean = (float)BNX_DADD(BNX_DMUL(keep, (double)*running_mean), BNX_DMUL(m, mean));
        const double unbiased = BNX_DDIV(BNX_DMUL(var, cnt), BNX_DSUB(cnt, 1.0));
        *running_var = (float)BNX_DADD(BNX_DMUL(keep, (double)*running_var), BNX_DMUL(m, unbiased));
    }
    const double gi = BNX_DMUL((double)gamma, invstd);
    *a = (float)gi;
    *b = (float)BNX_DSUB((double)beta, BNX_DMUL(mean, gi));
}

#endif
