/*
 * Casts that move elements too, CUDA (CPU reference kernels/ref/kern_stride.c): between a float32
 * channel slice and a dense 16-bit tensor (kern.h "Channel slices"), float32 NCHW to 16-bit
 * channels-last (kern_cast.h), the Detect head's permute from a 16-bit conv output (detect16_*).
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

/* One thread per element of dst, channels fastest (coalesced writes). */
static __global__ void cast_f32_lowp_cl_kernel(uint16_t *__restrict__ dst,
                                               const float *__restrict__ src, size_t total, int c,
                                               size_t hw, int bf16)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t ch = e % (size_t)c, ip = e / (size_t)c, i = ip / hw, p = ip % hw;
        const float v = src[(i * (size_t)c + ch) * hw + p];
        dst[e] = bf16 ? kern_bf16_from_f32(v) : kern_f16_from_f32(v);
    }
}

int kern_cuda_cast_f32_lowp_cl(struct kern_ctx *ctx, int dtype, uint16_t *__restrict__ dst,
                               const float *__restrict__ src, int n, int c, size_t hw)
{
    /* n images of c hw elements, checked as the slice casts' dense case (no n * c overflow) */
    const int rc =
        cast_ns_check(ctx, dtype, dst, src, c < 0 ? -1 : n, (size_t)(c < 0 ? 0 : c) * hw, 0);
    if (rc < 0) return rc;
    const size_t total = (size_t)n * (size_t)c * hw;
    if (total == 0) return 0;
    cast_f32_lowp_cl_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                              kern_cuda_st(ctx)->stream>>>(dst, src, total, c, hw,
                                                           dtype == KERN_DT_BF16);
    return kern_cuda_launched(ctx, "cast_f32_lowp_cl");
}

/* One thread per head element t ((bs, na, ny, nx, no) order); fwd: p[t] = widen(raw[at]), bwd:
 * raw[at] = r(dp[t]). */
static __global__ void detect16_kernel(kern_detect d, int nhwc, float *__restrict__ p,
                                       const uint16_t *__restrict__ raw_in,
                                       uint16_t *__restrict__ raw_out, const float *__restrict__ dp)
{
    const size_t no = (size_t)d.no, nx = (size_t)d.nx, ny = (size_t)d.ny, na = (size_t)d.na;
    const size_t total = (size_t)d.bs * na * ny * nx * no, cells = ny * nx, cc = na * no;
    KERN_CUDA_LOOP(t, total)
    {
        const size_t k = t % no, x = t / no % nx, y = t / (no * nx) % ny, a = t / (no * cells) % na,
                     b = t / (no * cells * na);
        const size_t ch = a * no + k;
        const size_t at =
            nhwc ? (b * cells + y * nx + x) * cc + ch : (b * cc + ch) * cells + y * nx + x;
        if (p)
            p[t] = kern_bf16_to_f32(raw_in[at]);
        else
            raw_out[at] = kern_bf16_from_f32(dp[t]);
    }
}

static int detect16_run(struct kern_ctx *ctx, const struct kern_detect *d, int layout, float *p,
                        const uint16_t *raw_in, uint16_t *raw_out, const float *dp)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!d || d->bs < 1 || d->na < 1 || d->no < 5 || d->ny < 1 || d->nx < 1) return -EINVAL;
    if (layout != KERN_LAYOUT_NCHW && layout != KERN_LAYOUT_NHWC) return -EINVAL;
    const size_t total = (size_t)d->bs * d->na * d->ny * d->nx * d->no;
    detect16_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        *d, layout == KERN_LAYOUT_NHWC, p, raw_in, raw_out, dp);
    return kern_cuda_launched(ctx, "detect16");
}

int kern_cuda_detect16_fwd(struct kern_ctx *ctx, const struct kern_detect *d, int layout,
                           float *__restrict__ p, const uint16_t *__restrict__ raw)
{
    if (!p || !raw) return -EINVAL;
    return detect16_run(ctx, d, layout, p, raw, NULL, NULL);
}

int kern_cuda_detect16_bwd(struct kern_ctx *ctx, const struct kern_detect *d, int layout,
                           uint16_t *__restrict__ draw, const float *__restrict__ dp)
{
    if (!draw || !dp) return -EINVAL;
    return detect16_run(ctx, d, layout, NULL, NULL, draw, dp);
}
