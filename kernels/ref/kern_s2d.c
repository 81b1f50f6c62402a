/*
 * The stem as space-to-depth (kern_tensor.h "The stem as space-to-depth"): x (n, c, h, w) ->
 * y (n, c_out, h / 2, w / 2) in NCHW or NHWC, and the stem's weights w6 (k_out, c, 6, 6) ->
 * w3 (k_out, c_out, 3, 3). Pure permutations: the forward ops overwrite every element (pad
 * channels with 0); s2d_bwd's dx (=|+=) by KERN_ACCUM_DX, s2d_weight_bwd's dw6 by
 * KERN_ACCUM_DPARAM. cast_f32_lowp_s2d (kern_cast.h) fuses the forward with the cast for the
 * bf16 executor. One thread: a few MB a step, copied once.
 */
#include <errno.h>
#include <stddef.h>

#include "kern_internal.h"
#include "kern_lowp_common.h"
#include "kern_s2d_common.h"

int kern_ref_s2d_fwd(struct kern_ctx *ctx, const struct kern_s2d *d, float *restrict y,
                     const float *restrict x)
{
    KERN_CHECK_CPU_CTX(ctx);
    if (kern_s2d_check(d) < 0 || !y || !x) return -EINVAL;
    const size_t ny = kern_s2d_out_count(d);
    for (size_t i = 0; i < ny; i++) {
        const ptrdiff_t s = kern_s2d_src(d, i);
        y[i] = s < 0 ? 0.0f : x[s];
    }
    return 0;
}

int kern_ref_s2d_bwd(struct kern_ctx *ctx, const struct kern_s2d *d, float *restrict dx,
                     const float *restrict dy, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (kern_s2d_check(d) < 0 || !dx || !dy) return -EINVAL;
    const size_t nx = kern_s2d_count(d);
    const int add = (accum & KERN_ACCUM_DX) != 0;
    for (size_t i = 0; i < nx; i++) {
        const float g = dy[kern_s2d_dst(d, i)];
        dx[i] = add ? dx[i] + g : g;
    }
    return 0;
}

int kern_ref_s2d_weight_fwd(struct kern_ctx *ctx, const struct kern_s2d *d, int k_out,
                            float *restrict w3, const float *restrict w6)
{
    KERN_CHECK_CPU_CTX(ctx);
    if (kern_s2d_check(d) < 0 || k_out < 1 || !w3 || !w6) return -EINVAL;
    const size_t n3 = (size_t)k_out * d->c_out * 9;
    for (size_t i = 0; i < n3; i++) {
        const ptrdiff_t s = kern_s2d_w_src(d, i);
        w3[i] = s < 0 ? 0.0f : w6[s];
    }
    return 0;
}

int kern_ref_s2d_weight_bwd(struct kern_ctx *ctx, const struct kern_s2d *d, int k_out,
                            float *restrict dw6, const float *restrict dw3, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (kern_s2d_check(d) < 0 || k_out < 1 || !dw6 || !dw3) return -EINVAL;
    const size_t n6 = (size_t)k_out * d->c * 36;
    const int add = (accum & KERN_ACCUM_DPARAM) != 0;
    for (size_t i = 0; i < n6; i++) {
        const float g = dw3[kern_s2d_w_dst(d, i)];
        dw6[i] = add ? dw6[i] + g : g;
    }
    return 0;
}

int kern_ref_cast_f32_lowp_s2d(struct kern_ctx *ctx, const struct kern_s2d *d, int dtype,
                               uint16_t *restrict dst, const float *restrict src)
{
    KERN_CHECK_CPU_CTX(ctx);
    if (kern_s2d_check(d) < 0 || !dst || !src) return -EINVAL;
    if (dtype != KERN_DT_BF16 && dtype != KERN_DT_F16) return -EINVAL;
    const size_t ny = kern_s2d_out_count(d);
    for (size_t i = 0; i < ny; i++) {
        const ptrdiff_t s = kern_s2d_src_in(d, i, KERN_LAYOUT_NCHW);
        const float v = s < 0 ? 0.0f : src[s];
        dst[i] = dtype == KERN_DT_BF16 ? kern_bf16_from_f32(v) : kern_f16_from_f32(v);
    }
    return 0;
}
