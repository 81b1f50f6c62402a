/*
 * float32 <-> bf16 / fp16 bit conversions of the CPU reference, shared by the casts
 * (kern_optim.c) and the reduced-precision convolutions (kern_conv.c) so both round the same
 * way: round to nearest even, NaN kept (bf16 0x7fc0, fp16 0x7e00 with the sign), overflow to Inf,
 * fp16 subnormals kept. The CUDA casts (kern_cuda_optim.cu, kern_cuda_stride.cu) include it too:
 * under nvcc every function is also a __device__ one, so both backends run the same lines.
 * Private to kernels/.
 */
#ifndef KERN_LOWP_COMMON_H
#define KERN_LOWP_COMMON_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KERN_LOWP_FN static __host__ __device__ __forceinline__
#else
#define KERN_LOWP_FN static inline
#endif

KERN_LOWP_FN uint32_t kern_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

KERN_LOWP_FN float kern_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* c10::BFloat16's round_to_nearest_even: add 0x7fff plus the lowest kept bit, truncate.
 * Values that round past the largest bf16 carry into the exponent and become Inf. */
KERN_LOWP_FN uint16_t kern_bf16_from_f32(float f)
{
    const uint32_t u = kern_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

KERN_LOWP_FN float kern_bf16_to_f32(uint16_t h)
{
    return kern_f32_from_bits((uint32_t)h << 16);
}

/* IEEE binary16 from binary32, round to nearest even, with subnormals and overflow to Inf. */
KERN_LOWP_FN uint16_t kern_f16_from_f32(float f)
{
    const uint32_t u = kern_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (or Inf): Inf */
    if (a >= 0x38800000u) {                                  /* >= 2^-14: normal */
        const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);    /* round at bit 13 */
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13)); /* rebias 127 -> 15 */
    }
    if (a < 0x33000000u) return sign; /* < 2^-25: +-0 (ties to 0 too) */
    /* Subnormal: m 2^(e-150) with the implicit bit; the result counts units of 2^-24. */
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e; /* 14..24 bits to drop */
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    const uint32_t up = rem > mid || (rem == mid && (q & 1u));
    return (uint16_t)(sign | (q + up));
}

KERN_LOWP_FN float kern_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return kern_f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e != 0) return kern_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    /* Zero or subnormal: m 2^-24, exact in float. */
    const float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
}

#endif
