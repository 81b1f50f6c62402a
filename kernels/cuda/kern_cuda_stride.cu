/*
 * Casts between a float32 channel slice and a dense 16-bit tensor, CUDA (kern.h "Channel
 * slices"; CPU reference kernels/ref/kern_stride.c).
 *
 * Shapes (device memory): the float32 side holds n images of `inner` elements, image i at
 * i * nstride (0: inner, dense); the 16-bit side is dense (n, inner), KERN_DT_BF16 or KERN_DT_F16.
 * Elements between the float32 images are never touched. One thread per dense element; the
 * roundings are the integer ones of the casts (kern_lowp_common.h, the CPU reference's own
 * lines), so results equal the CPU reference bit for bit.
 *
 * Gradients: the widening cast overwrites dst unless accum has KERN_ACCUM_DX (dst += widened).
 */
#include <stdint.h>

#include "kern_cuda_internal.h"
#include "kern_lowp_common.h"

static __global__ void cast_f32_lowp_ns_kernel(uint16_t *__restrict__ dst,
                                               const float *__restrict__ src, size_t total,
                                               size_t inner, size_t ns, int bf16)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t i = e / inner, j = e - i * inner;
        const float v = src[i * ns + j];
        dst[e] = bf16 ? kern_bf16_from_f32(v) : kern_f16_from_f32(v);
    }
}

static __global__ void cast_lowp_f32_ns_kernel(float *__restrict__ dst,
                                               const uint16_t *__restrict__ src, size_t total,
                                               size_t inner, size_t ns, int bf16, int add)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t i = e / inner, j = e - i * inner;
        const float v = bf16 ? kern_bf16_to_f32(src[e]) : kern_f16_to_f32(src[e]);
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
