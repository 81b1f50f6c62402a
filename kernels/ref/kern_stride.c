/*
 * Casts that move elements too, CPU reference: between a float32 channel slice and a dense 16-bit
 * tensor (kern.h "Channel slices"), from float32 NCHW to 16-bit channels-last (kern_cast.h), and
 * the Detect head's permute from a 16-bit conv output (kern_tensor.h, detect16_*).
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

int kern_ref_cast_f32_lowp_cl(struct kern_ctx *ctx, int dtype, uint16_t *restrict dst,
                              const float *restrict src, int n, int c, size_t hw)
{
    /* n images of c hw elements, checked as the slice casts' dense case (no n * c overflow) */
    const int rc =
        cast_ns_check(ctx, dtype, dst, src, c < 0 ? -1 : n, (size_t)(c < 0 ? 0 : c) * hw, 0);
    if (rc < 0) return rc;
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t ch = 0; ch < (size_t)c; ch++)
            for (size_t p = 0; p < hw; p++) {
                const float v = src[(i * (size_t)c + ch) * hw + p];
                dst[(i * hw + p) * (size_t)c + ch] =
                    dtype == KERN_DT_BF16 ? kern_bf16_from_f32(v) : kern_f16_from_f32(v);
            }
    return 0;
}

/* Index in raw (layout) of element k of anchor a at cell (y, x) of image b. */
static size_t detect16_at(const struct kern_detect *d, int layout, size_t b, size_t a, size_t y,
                          size_t x, size_t k)
{
    const size_t ch = a * (size_t)d->no + k, cells = (size_t)d->ny * (size_t)d->nx;
    const size_t cc = (size_t)d->na * (size_t)d->no;
    if (layout == KERN_LAYOUT_NHWC) return (b * cells + y * (size_t)d->nx + x) * cc + ch;
    return (b * cc + ch) * cells + y * (size_t)d->nx + x;
}

static int detect16_run(struct kern_ctx *ctx, const struct kern_detect *d, int layout, float *p,
                        const uint16_t *raw_in, uint16_t *raw_out, const float *dp)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!d || d->bs < 1 || d->na < 1 || d->no < 5 || d->ny < 1 || d->nx < 1, -EINVAL);
    KERN_RETURN_IF(layout != KERN_LAYOUT_NCHW && layout != KERN_LAYOUT_NHWC, -EINVAL);
    size_t t = 0; /* the head's element, (bs, na, ny, nx, no) order */
    for (size_t b = 0; b < (size_t)d->bs; b++)
        for (size_t a = 0; a < (size_t)d->na; a++)
            for (size_t y = 0; y < (size_t)d->ny; y++)
                for (size_t x = 0; x < (size_t)d->nx; x++)
                    for (size_t k = 0; k < (size_t)d->no; k++, t++) {
                        const size_t at = detect16_at(d, layout, b, a, y, x, k);
                        if (p)
                            p[t] = kern_bf16_to_f32(raw_in[at]);
                        else
                            raw_out[at] = kern_bf16_from_f32(dp[t]);
                    }
    return 0;
}

int kern_ref_detect16_fwd(struct kern_ctx *ctx, const struct kern_detect *d, int layout,
                          float *restrict p, const uint16_t *restrict raw)
{
    KERN_RETURN_IF(!p || !raw, -EINVAL);
    return detect16_run(ctx, d, layout, p, raw, NULL, NULL);
}

int kern_ref_detect16_bwd(struct kern_ctx *ctx, const struct kern_detect *d, int layout,
                          uint16_t *restrict draw, const float *restrict dp)
{
    KERN_RETURN_IF(!draw || !dp, -EINVAL);
    return detect16_run(ctx, d, layout, NULL, NULL, draw, dp);
}
