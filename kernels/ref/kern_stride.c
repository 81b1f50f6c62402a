/*
 * Casts between a float32 channel slice and a dense 16-bit tensor, CPU reference (kern.h
 * "Channel slices").
 *
 * Shapes: the float32 side holds n images of `inner` elements each, image i at i * nstride (a
 * concat's channel slice; nstride 0: inner, dense), the 16-bit side is dense (n, inner) of
 * dtype KERN_DT_BF16 or KERN_DT_F16. Elements between the float32 images are never read or
 * written. The roundings are kern_ref_cast_f32_bf16 / _f16's (kern_lowp_common.h), so a strided
 * cast equals the dense cast of the gathered slice bit for bit.
 *
 * Gradients: the widening cast overwrites dst unless accum has KERN_ACCUM_DX (then dst += the
 * widened value, one float32 add: what a widen into scratch followed by kern_ref_add_bwd with
 * KERN_ACCUM_DX gives). Single-threaded: a cast is memory bound and small beside its conv.
 */
#include "kern_internal.h"
#include "kern_lowp_common.h"

static int cast_ns_check(struct kern_ctx *ctx, int dtype, const void *a, const void *b, int n,
                         size_t inner, size_t nstride)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(dtype != KERN_DT_BF16 && dtype != KERN_DT_F16, -EINVAL);
    KERN_RETURN_IF(n < 0 || (nstride && nstride < inner), -EINVAL);
    KERN_RETURN_IF(n > 0 && inner > 0 && (!a || !b), -EINVAL);
    return 0;
}

int kern_ref_cast_f32_lowp_ns(struct kern_ctx *ctx, int dtype, uint16_t *restrict dst,
                              const float *restrict src, int n, size_t inner, size_t src_nstride)
{
    const int rc = cast_ns_check(ctx, dtype, dst, src, n, inner, src_nstride);
    if (rc < 0) return rc;
    const size_t ns = src_nstride ? src_nstride : inner;
    for (int i = 0; i < n; i++) {
        const float *const s = src + (size_t)i * ns;
        uint16_t *const d = dst + (size_t)i * inner;
        if (dtype == KERN_DT_BF16) {
            for (size_t j = 0; j < inner; j++)
                d[j] = kern_bf16_from_f32(s[j]);
        } else {
            for (size_t j = 0; j < inner; j++)
                d[j] = kern_f16_from_f32(s[j]);
        }
    }
    return 0;
}

int kern_ref_cast_lowp_f32_ns(struct kern_ctx *ctx, int dtype, float *restrict dst,
                              const uint16_t *restrict src, int n, size_t inner, size_t dst_nstride,
                              unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = cast_ns_check(ctx, dtype, dst, src, n, inner, dst_nstride);
    if (rc < 0) return rc;
    const size_t ns = dst_nstride ? dst_nstride : inner;
    const int add = (accum & KERN_ACCUM_DX) != 0;
    for (int i = 0; i < n; i++) {
        float *const d = dst + (size_t)i * ns;
        const uint16_t *const s = src + (size_t)i * inner;
        for (size_t j = 0; j < inner; j++) {
            const float v = dtype == KERN_DT_BF16 ? kern_bf16_to_f32(s[j]) : kern_f16_to_f32(s[j]);
            d[j] = add ? d[j] + v : v;
        }
    }
    return 0;
}
