/*
 * Casts between a float32 channel slice and a dense 16-bit tensor, CUDA (kern.h "Channel
 * slices"; CPU reference kernels/ref/kern_stride.c).
 *
 * Shapes (device memory): the float32 side holds n images of `inner` elements, image i at
 * i * nstride (0: inner, dense); the 16-bit side is dense (n, inner), KERN_DT_BF16 or KERN_DT_F16.
 * Elements between the float32 images are never touched. One thread per dense element; the
 * roundings are the integer ones of kern_cuda_optim.cu's casts (copied here, as those are static
 * to that file), so results equal the CPU reference bit for bit.
 *
 * Gradients: the widening cast overwrites dst unless accum has KERN_ACCUM_DX (dst += widened).
 */
#include <stdint.h>

#include "kern_cuda_internal.h"

static __device__ __forceinline__ uint16_t ns_bf16_from_f32(float f)
{
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static __device__ __forceinline__ uint16_t ns_f16_from_f32(float f)
{
    const uint32_t u = __float_as_uint(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    if (a < 0x33000000u) return sign;
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    const uint32_t up = rem > half || (rem == half && (q & 1u));
    return (uint16_t)(sign | (q + up));
}

static __device__ __forceinline__ float ns_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e != 0) return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
    const float v = __fmul_rn((float)m, 0x1p-24f);
    return sign ? -v : v;
}

static __global__ void cast_f32_lowp_ns_kernel(uint16_t *__restrict__ dst,
                                               const float *__restrict__ src, size_t total,
                                               size_t inner, size_t ns, int bf16)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t i = e / inner, j = e - i * inner;
        const float v = src[i * ns + j];
        dst[e] = bf16 ? ns_bf16_from_f32(v) : ns_f16_from_f32(v);
    }
}

static __global__ void cast_lowp_f32_ns_kernel(float *__restrict__ dst,
                                               const uint16_t *__restrict__ src, size_t total,
                                               size_t inner, size_t ns, int bf16, int add)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t i = e / inner, j = e - i * inner;
        const float v = bf16 ? __uint_as_float((uint32_t)src[e] << 16) : ns_f16_to_f32(src[e]);
        float *const o = dst + i * ns + j;
        *o = add ? *o + v : v;
    }
}

static int cast_ns_check(struct kern_ctx *ctx, int dtype, const void *a, const void *b, int n,
                         size_t inner, size_t nstride)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (dtype != KERN_DT_BF16 && dtype != KERN_DT_F16) return -EINVAL;
    if (n < 0 || (nstride && nstride < inner)) return -EINVAL;
    if (n > 0 && inner > 0 && (!a || !b)) return -EINVAL;
    return 0;
}

int kern_cuda_cast_f32_lowp_ns(struct kern_ctx *ctx, int dtype, uint16_t *__restrict__ dst,
                               const float *__restrict__ src, int n, size_t inner,
                               size_t src_nstride)
{
    const int rc = cast_ns_check(ctx, dtype, dst, src, n, inner, src_nstride);
    if (rc < 0) return rc;
    const size_t total = (size_t)n * inner;
    if (total == 0) return 0;
    cast_f32_lowp_ns_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                              kern_cuda_st(ctx)->stream>>>(
        dst, src, total, inner, src_nstride ? src_nstride : inner, dtype == KERN_DT_BF16);
    return kern_cuda_launched(ctx, "cast_f32_lowp_ns");
}

int kern_cuda_cast_lowp_f32_ns(struct kern_ctx *ctx, int dtype, float *__restrict__ dst,
                               const uint16_t *__restrict__ src, int n, size_t inner,
                               size_t dst_nstride, unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = cast_ns_check(ctx, dtype, dst, src, n, inner, dst_nstride);
    if (rc < 0) return rc;
    const size_t total = (size_t)n * inner;
    if (total == 0) return 0;
    cast_lowp_f32_ns_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                              kern_cuda_st(ctx)->stream>>>(
        dst, src, total, inner, dst_nstride ? dst_nstride : inner, dtype == KERN_DT_BF16,
        (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "cast_lowp_f32_ns");
}
