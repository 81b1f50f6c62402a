/*
 * Channel slices on the CPU reference (kern.h "Channel slices"): every op that takes an n-stride
 * (BN / BN+SiLU fused and phased, float32 conv2d, max pool, the _ns upsample and AMP casts) run
 * dense and with its strided side a slice of a wider poisoned buffer; the two must agree bit for
 * bit and the gaps must keep their canary (stride_testutil.h). Once on one thread and once on
 * three (the ops split channels, images or planes over threads). Also the argument checks: a
 * non-zero stride below the dense one is -EINVAL, and the lowp convs refuse any x_nstride.
 * And the casts that permute: cast_f32_lowp_cl (to channels last) and detect16_* (the Detect
 * head from a bf16 conv output), against the dense casts and the float32 permutes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_lowp_common.h"
#include "kern_testutil.h"
#include "tap.h"

#include "stride_testutil.h"

static void *cpu_up(const void *h, size_t bytes)
{
    void *const p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("Bail out! out of memory\n");
        exit(99);
    }
    memcpy(p, h, bytes);
    return p;
}

static void cpu_down(void *h, const void *d, size_t bytes)
{
    memcpy(h, d, bytes);
}

static void test_errors(struct kern_ctx *ctx)
{
    struct kern_bn b;
    kern_bn_init(&b, 2, 4, 9);
    is_int(b.y_nstride, 0, "kern_bn_init: y_nstride 0 (dense)");
    float y[72], x[72], g[4] = { 1, 1, 1, 1 }, bt[4] = { 0 }, rm[4] = { 0 }, rv[4] = { 1, 1, 1, 1 };
    kt_fill(x, 72, -1, 1);
    b.y_nstride = 35; /* < c hw = 36 */
    is_int(kern_ref_bn_fwd_eval(ctx, &b, y, x, g, bt, rm, rv), -EINVAL,
           "bn: y_nstride below c hw is -EINVAL");
    b.y_nstride = 36;
    is_int(kern_ref_bn_fwd_eval(ctx, &b, y, x, g, bt, rm, rv), 0,
           "bn: y_nstride equal to c hw is accepted");

    struct kern_conv2d cd;
    kern_conv2d_init(&cd, 2, 3, 5, 5, 4, 3, 1, 1);
    is_int(cd.x_nstride, 0, "kern_conv2d_init: x_nstride 0 (dense)");
    size_t ws = 0;
    cd.x_nstride = 74; /* < 75 */
    is_int(kern_ref_conv2d_workspace_size(ctx, &cd, &ws), -EINVAL,
           "conv2d: x_nstride below c_in h w is -EINVAL");
    cd.x_nstride = 150;
    is_int(kern_ref_conv2d_workspace_size(ctx, &cd, &ws), 0, "conv2d: a wider x_nstride is fine");
    struct kern_conv2d_lowp lp;
    kern_conv2d_lowp_init(&lp, &cd, KERN_DT_BF16, KERN_LAYOUT_NCHW);
    is_int(kern_ref_conv2d_lowp_workspace_size(ctx, &lp, &ws), -EINVAL,
           "conv2d_lowp: any x_nstride is -EINVAL (dense only)");

    struct kern_pool2d pd = { .n = 2, .c = 3, .h_in = 6, .w_in = 6, .k = 5, .stride = 1, .pad = 2 };
    int oh, ow;
    pd.y_nstride = 107;
    is_int(kern_pool2d_out_hw(&pd, &oh, &ow), -EINVAL, "pool: y_nstride below c h w is -EINVAL");
    pd.y_nstride = 0;
    pd.x_nstride = 100;
    is_int(kern_pool2d_out_hw(&pd, &oh, &ow), -EINVAL, "pool: x_nstride below c h w is -EINVAL");
    pd.x_nstride = 108;
    is_int(kern_pool2d_out_hw(&pd, &oh, &ow), 0, "pool: x_nstride equal to c h w is accepted");

    float up[4 * 72];
    is_int(kern_ref_upsample2x_ns_fwd(ctx, up, x, 2, 4, 3, 3, 143, 0), -EINVAL,
           "upsample2x_ns: y_nstride below 4 c h w is -EINVAL");
    is_int(kern_ref_upsample2x_ns_bwd(ctx, x, up, 2, 4, 3, 3, 35, 0, 0), -EINVAL,
           "upsample2x_ns: x_nstride below c h w is -EINVAL");
    uint16_t h16[72];
    is_int(kern_ref_cast_f32_lowp_ns(ctx, KERN_DT_F32, h16, x, 2, 36, 0), -EINVAL,
           "cast_f32_lowp_ns: dtype float32 is -EINVAL");
    is_int(kern_ref_cast_f32_lowp_ns(ctx, KERN_DT_BF16, h16, x, 2, 36, 30), -EINVAL,
           "cast_f32_lowp_ns: nstride below inner is -EINVAL");
    is_int(kern_ref_cast_lowp_f32_ns(ctx, KERN_DT_F16, x, h16, 2, 36, 36, 4u), -EINVAL,
           "cast_lowp_f32_ns: unknown accum bits are -EINVAL");
}

/* cast_f32_lowp_cl: the dense cast, permuted to channels last, bit for bit (both dtypes). */
static void test_cast_cl(struct kern_ctx *ctx, int n, int c, size_t hw)
{
    const size_t e = (size_t)n * c * hw;
    float *src = kt_alloc(e);
    kt_fill(src, e, -7e4f, 7e4f);
    src[0] = 1e-7f; /* an fp16 subnormal */
    uint16_t *dense = malloc(e * 2), *cl = malloc(e * 2);
    for (int k = 0; k < 2; k++) {
        const int dt = k ? KERN_DT_F16 : KERN_DT_BF16;
        int rc = k ? kern_ref_cast_f32_f16(ctx, dense, src, e)
                   : kern_ref_cast_f32_bf16(ctx, dense, src, e);
        if (!rc) rc = kern_ref_cast_f32_lowp_cl(ctx, dt, cl, src, n, c, hw);
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)n; i++)
            for (size_t ch = 0; ch < (size_t)c; ch++)
                for (size_t p = 0; p < hw; p++)
                    bad += cl[(i * hw + p) * c + ch] != dense[(i * c + ch) * hw + p];
        ok(rc == 0 && bad == 0,
           "cast_f32_lowp_cl %s n%d c%d hw %zu: the dense cast, channels last (%zu off)",
           k ? "f16" : "bf16", n, c, hw, bad);
    }
    is_int(kern_ref_cast_f32_lowp_cl(ctx, KERN_DT_F32, cl, src, n, c, hw), -EINVAL,
           "cast_f32_lowp_cl: float32 refused");
    is_int(kern_ref_cast_f32_lowp_cl(ctx, KERN_DT_BF16, NULL, src, n, c, hw), -EINVAL,
           "cast_f32_lowp_cl: NULL refused");
    free(src), free(dense), free(cl);
}

/* detect16: the float32 Detect permutes on the widened bf16 conv output, NCHW and NHWC; the
 * backward is r(dp) permuted back. */
static void test_detect16(struct kern_ctx *ctx)
{
    const struct kern_detect d = { .bs = 2, .na = 3, .no = 7, .ny = 5, .nx = 4, .stride = 8 };
    const size_t cells = (size_t)d.ny * d.nx, cc = (size_t)d.na * d.no,
                 e = (size_t)d.bs * cc * cells;
    float *raw = kt_alloc(e), *dp = kt_alloc(e), *p32 = kt_alloc(e), *draw32 = kt_alloc(e);
    kt_fill(raw, e, -4, 4), kt_fill(dp, e, -1, 1);
    uint16_t *r16 = malloc(e * 2), *rn = malloc(e * 2), *d16 = malloc(e * 2);
    int rc = kern_ref_cast_f32_bf16(ctx, r16, raw, e);
    float *raww = kt_alloc(e);
    for (size_t t = 0; t < e; t++)
        raww[t] = kern_bf16_to_f32(r16[t]);
    rc |= kern_ref_detect_reshape_fwd(ctx, &d, p32, raww);
    rc |= kern_ref_detect_reshape_bwd(ctx, &d, draw32, dp, 0);
    rc |= kern_ref_cast_f32_lowp_cl(ctx, KERN_DT_BF16, rn, raww, d.bs, (int)cc, cells);
    for (int layout = 0; layout < 2; layout++) {
        float *p = kt_alloc(e);
        int r = kern_ref_detect16_fwd(ctx, &d, layout, p, layout ? rn : r16);
        r |= kern_ref_detect16_bwd(ctx, &d, layout, d16, dp);
        size_t fbad = 0, bbad = 0;
        for (size_t t = 0; t < e; t++)
            fbad += p[t] != p32[t];
        for (size_t i = 0; i < (size_t)d.bs; i++)
            for (size_t ch = 0; ch < cc; ch++)
                for (size_t q = 0; q < cells; q++) {
                    const size_t at =
                        layout ? (i * cells + q) * cc + ch : (i * cc + ch) * cells + q;
                    bbad += d16[at] != kern_bf16_from_f32(draw32[(i * cc + ch) * cells + q]);
                }
        ok(rc == 0 && r == 0 && fbad == 0 && bbad == 0,
           "detect16 %s: the float32 permute of the widened output; dx r(dp) permuted back (%zu, "
           "%zu off)",
           layout ? "NHWC" : "NCHW", fbad, bbad);
        free(p);
    }
    is_int(kern_ref_detect16_fwd(ctx, &d, 2, p32, r16), -EINVAL, "detect16: a bad layout refused");
    free(raw), free(dp), free(p32), free(draw32), free(r16), free(rn), free(d16), free(raww);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 20261122u);
    struct kern_ctx *const one = kt_ctx(0), *const three = kt_ctx_threads(3);
    test_errors(one);
    test_cast_cl(one, 2, 5, 7 * 3);
    test_cast_cl(one, 4, 16, 9); /* a 3x3 conv's weights, c_out 4 */
    test_detect16(one);
    const struct st_env e1 = { "cpu", kern_ops_ref(), one, cpu_up, cpu_down, free };
    const struct st_env e3 = { "cpu x3", kern_ops_ref(), three, cpu_up, cpu_down, free };
    st_all(&e1, NULL);
    st_all(&e3, NULL);
    kern_ctx_destroy(three);
    kern_ctx_destroy(one);
    return tap_done();
}
