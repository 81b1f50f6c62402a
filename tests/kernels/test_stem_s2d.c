/*
 * The stem as space-to-depth (kern_tensor.h), on the CPU: YOLOv5's 6x6 stride-2 pad-2 stem conv
 * against a 3x3 stride-1 pad-1 conv of the 2x2 space-to-depth input (16 channels for RGB, the
 * last 4 zero) with the weights rearranged, forward and both gradients.
 *   - Bit for bit on values where every product and every partial sum is exact in float32
 *     (inputs k/8, weights and output gradients k/16): there the sum order cannot matter, so any
 *     difference is a wrong index map. A swapped dy/dx or a wrong channel order fails it.
 *   - Within a tolerance from the reduction length on random floats (the two convs sum the same
 *     products in another order).
 *   - NCHW and NHWC bit-identical; the maps' round trips; accumulation; the argument checks.
 *   - The fused cast of the bf16 executor's input (cast_f32_lowp_s2d) equals s2d then the cast,
 *     and the executor's bf16 stem (that input, the rearranged weights cast, OIHW dw mapped
 *     back) equals the bf16 6x6 conv bit for bit on exact values, in both layouts.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_testutil.h"
#include "tap.h"

static struct kern_ctx *g;

/* k/den for k uniform in -8..8 */
static float *grid(size_t n, float den)
{
    float *const p = kt_alloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(kt_randint(0, 16) - 8) / den;
    return p;
}

static float *uni(size_t n)
{
    float *const p = kt_alloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)kt_randint(0, 1 << 20) / (float)(1 << 19) - 1.0f;
    return p;
}

/* Largest |a - b| / (1 + |b|), and whether a == b bit for bit. */
static double diff(const float *a, const float *b, size_t n, int *same)
{
    double e = 0;
    *same = memcmp(a, b, n * sizeof(float)) == 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= e)) e = d;
    }
    return e;
}

/* The stem both ways on (n, 3, h, w) with k_out filters: y, dx, dw of each into r6 / r3. */
struct stem {
    float *y, *dx, *dw;
};

static void stem_both(int n, int h, int w, int k_out, const float *x, const float *w6,
                      const float *dy, struct stem *r6, struct stem *r3, float *dw3_pad_max)
{
    const int c = 3, ho = h / 2, wo = w / 2;
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * k_out * ho * wo;
    const size_t ns = (size_t)n * 16 * ho * wo, n6 = (size_t)k_out * c * 36,
                 n3 = (size_t)k_out * 16 * 9;
    struct kern_conv2d d6, d3;
    kern_conv2d_init(&d6, n, c, h, w, k_out, 6, 2, 2);
    kern_conv2d_init(&d3, n, 16, ho, wo, k_out, 3, 1, 1);
    const struct kern_s2d s = { n, c, h, w, 16, KERN_LAYOUT_NCHW };
    size_t ws6 = 0, ws3 = 0;
    if (kern_ref_conv2d_workspace_size(g, &d6, &ws6) < 0 ||
        kern_ref_conv2d_workspace_size(g, &d3, &ws3) < 0 ||
        kern_ctx_reserve(g, ws6 > ws3 ? ws6 : ws3) < 0)
        printf("Bail out! workspace\n"), exit(99);
    r6->y = kt_alloc(ny), r6->dx = kt_alloc(nx), r6->dw = kt_alloc(n6);
    r3->y = kt_alloc(ny), r3->dx = kt_alloc(nx), r3->dw = kt_alloc(n6);
    int rc = kern_ref_conv2d_fwd(g, &d6, r6->y, x, w6, NULL);
    rc |= kern_ref_conv2d_bwd_data(g, &d6, r6->dx, dy, w6, 0);
    rc |= kern_ref_conv2d_bwd_filter(g, &d6, r6->dw, dy, x, 0);
    float *const xs = kt_alloc(ns), *const w3 = kt_alloc(n3), *const dxs = kt_alloc(ns),
                 *const dw3 = kt_alloc(n3);
    rc |= kern_ref_s2d_fwd(g, &s, xs, x);
    rc |= kern_ref_s2d_weight_fwd(g, &s, k_out, w3, w6);
    rc |= kern_ref_conv2d_fwd(g, &d3, r3->y, xs, w3, NULL);
    rc |= kern_ref_conv2d_bwd_data(g, &d3, dxs, dy, w3, 0);
    rc |= kern_ref_s2d_bwd(g, &s, r3->dx, dxs, 0);
    rc |= kern_ref_conv2d_bwd_filter(g, &d3, dw3, dy, xs, 0);
    rc |= kern_ref_s2d_weight_bwd(g, &s, k_out, r3->dw, dw3, 0);
    if (rc) printf("Bail out! an op failed\n"), exit(99);
    float m = 0;
    for (int o = 0; o < k_out; o++)
        for (int ch = 12; ch < 16; ch++)
            for (int t = 0; t < 9; t++)
                m = fmaxf(m, fabsf(dw3[((size_t)o * 16 + ch) * 9 + t]));
    *dw3_pad_max = m;
    free(xs), free(w3), free(dxs), free(dw3);
}

static void stem_free(struct stem *r)
{
    free(r->y), free(r->dx), free(r->dw);
}

static void test_exact(int n, int h, int w, int k_out)
{
    const size_t nx = (size_t)n * 3 * h * w, ny = (size_t)n * k_out * (h / 2) * (w / 2);
    const size_t n6 = (size_t)k_out * 3 * 36;
    float *const x = grid(nx, 8), *const w6 = grid(n6, 16), *const dy = grid(ny, 16);
    struct stem a, b;
    float pad;
    stem_both(n, h, w, k_out, x, w6, dy, &a, &b, &pad);
    int same;
    diff(b.y, a.y, ny, &same);
    ok(same, "%dx3x%dx%d, %d filters, exact values: s2d conv's y equals the 6x6 conv's bit for bit",
       n, h, w, k_out);
    diff(b.dx, a.dx, nx, &same);
    ok(same, "  and dx (3x3 bwd_data, then s2d_bwd)");
    diff(b.dw, a.dw, n6, &same);
    ok(same, "  and dw (3x3 bwd_filter, then s2d_weight_bwd)");
    ok(pad == 0.0f, "  the pad channels' weight gradient is 0 (%g)", pad);
    stem_free(&a), stem_free(&b);
    free(x), free(w6), free(dy);
}

static void test_random(int n, int h, int w, int k_out)
{
    const size_t nx = (size_t)n * 3 * h * w, ny = (size_t)n * k_out * (h / 2) * (w / 2);
    const size_t n6 = (size_t)k_out * 3 * 36;
    float *const x = uni(nx), *const w6 = uni(n6), *const dy = uni(ny);
    struct stem a, b;
    float pad;
    stem_both(n, h, w, k_out, x, w6, dy, &a, &b, &pad);
    int same;
    /* sums of 108 (y), 36 k_out (dx), n h w / 4 (dw) products of magnitude <= 1: float32 sums
     * in another order differ by a few ulps of the sum's size */
    const double ey = diff(b.y, a.y, ny, &same), edx = diff(b.dx, a.dx, nx, &same),
                 edw = diff(b.dw, a.dw, n6, &same);
    const double tol = 64 * 1.2e-7 * sqrt((double)n * h * w);
    ok(ey < tol && edx < tol && edw < tol,
       "random floats: y, dx, dw within %.2g of the 6x6 conv's (%.2g, %.2g, %.2g)", tol, ey, edx,
       edw);
    stem_free(&a), stem_free(&b);
    free(x), free(w6), free(dy);
}

/* NCHW (n, c, h, w) -> NHWC */
static void to_nhwc(float *dst, const float *src, int n, int c, int h, int w)
{
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++)
            for (int i = 0; i < h * w; i++)
                dst[((size_t)b * h * w + i) * c + ch] = src[((size_t)b * c + ch) * h * w + i];
}

static void test_layouts_and_maps(void)
{
    const int n = 2, c = 3, h = 6, w = 10;
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * 16 * (h / 2) * (w / 2);
    const struct kern_s2d s = { n, c, h, w, 16, KERN_LAYOUT_NCHW };
    struct kern_s2d sh = s;
    sh.layout = KERN_LAYOUT_NHWC;
    float *const x = uni(nx), *const xh = kt_alloc(nx), *const y = kt_alloc(ny),
                 *const yh = kt_alloc(ny), *const yt = kt_alloc(ny);
    to_nhwc(xh, x, n, c, h, w);
    kt_poison(y, ny), kt_poison(yh, ny);
    ok(kern_ref_s2d_fwd(g, &s, y, x) == 0 && kern_ref_s2d_fwd(g, &sh, yh, xh) == 0, "s2d_fwd");
    to_nhwc(yt, y, n, 16, h / 2, w / 2);
    ok(!memcmp(yt, yh, ny * sizeof(float)), "NHWC's y is NCHW's transposed, bit for bit");
    /* the channel order: (dy 2 + dx) c + ch */
    int order = 1;
    for (int q = 0; q < 4; q++)
        for (int ch = 0; ch < c; ch++)
            order &= y[((size_t)1 * 16 + q * c + ch) * (h / 2) * (w / 2) + 1 * (w / 2) + 2] ==
                     x[((size_t)1 * c + ch) * h * w + (2 + q / 2) * w + 4 + q % 2];
    ok(order, "channel (dy 2 + dx) c + ch holds x[ch][2r + dy][2s + dx]");
    int zeros = 1;
    for (size_t i = 0; i < ny; i++)
        zeros &= ((i / (size_t)((h / 2) * (w / 2))) % 16 < 12) || y[i] == 0.0f;
    ok(zeros, "channels 12..15 are 0");
    /* the backward is the inverse: s2d_bwd(s2d(x)) = x, and += adds */
    float *const back = kt_alloc(nx), *const backh = kt_alloc(nx);
    kt_poison(back, nx);
    ok(kern_ref_s2d_bwd(g, &s, back, y, 0) == 0 && !memcmp(back, x, nx * sizeof(float)),
       "s2d_bwd(s2d(x)) = x bit for bit (NCHW)");
    ok(kern_ref_s2d_bwd(g, &sh, backh, yh, 0) == 0 && !memcmp(backh, xh, nx * sizeof(float)),
       "and NHWC");
    ok(kern_ref_s2d_bwd(g, &s, back, y, KERN_ACCUM_DX) == 0 && back[7] == x[7] + x[7] &&
           back[nx - 1] == x[nx - 1] + x[nx - 1],
       "KERN_ACCUM_DX adds");
    const int k_out = 4;
    const size_t n6 = (size_t)k_out * c * 36, n3 = (size_t)k_out * 16 * 9;
    float *const w6 = uni(n6), *const w3 = kt_alloc(n3), *const w6b = kt_alloc(n6);
    kt_poison(w6b, n6);
    ok(kern_ref_s2d_weight_fwd(g, &s, k_out, w3, w6) == 0 &&
           kern_ref_s2d_weight_bwd(g, &s, k_out, w6b, w3, 0) == 0 &&
           !memcmp(w6b, w6, n6 * sizeof(float)),
       "s2d_weight_bwd(s2d_weight(w6)) = w6 bit for bit");
    ok(w3[(2 * 16 + 1 * c + 2) * 9 + 1 * 3 + 2] ==
           w6[((size_t)2 * c + 2) * 36 + (2 + 0) * 6 + 4 + 1],
       "w3[o][(dy 2 + dx) c + ch][i][j] = w6[o][ch][2i + dy][2j + dx]");
    ok(kern_ref_s2d_weight_bwd(g, &s, k_out, w6b, w3, KERN_ACCUM_DPARAM) == 0 &&
           w6b[5] == w6[5] + w6[5],
       "KERN_ACCUM_DPARAM adds");
    /* argument checks */
    struct kern_s2d bad = s;
    bad.h = 7;
    ok(kern_ref_s2d_fwd(g, &bad, y, x) == -EINVAL, "an odd height: -EINVAL");
    bad = s, bad.c_out = 11;
    ok(kern_ref_s2d_fwd(g, &bad, y, x) == -EINVAL, "c_out < 4 c: -EINVAL");
    bad = s, bad.layout = 2;
    ok(kern_ref_s2d_bwd(g, &bad, back, y, 0) == -EINVAL, "an unknown layout: -EINVAL");
    ok(kern_ref_s2d_bwd(g, &s, back, y, 4) == -EINVAL, "an unknown accum bit: -EINVAL");
    ok(kern_ref_s2d_weight_fwd(g, &s, 0, w3, w6) == -EINVAL, "k_out 0: -EINVAL");
    ok(kern_ref_s2d_fwd(g, NULL, y, x) == -EINVAL, "no descriptor: -EINVAL");
    free(x), free(xh), free(y), free(yh), free(yt), free(back), free(backh);
    free(w6), free(w3), free(w6b);
}

/* 16-bit copies of float32 values in the layout (channels last in NHWC, for weights too). */
static uint16_t *to16(const float *v, int n, int c, size_t hw, int layout)
{
    uint16_t *const o = malloc((size_t)n * c * hw * 2 + 2);
    if (!o) exit(99);
    const int rc = layout == KERN_LAYOUT_NHWC
                       ? kern_ref_cast_f32_lowp_cl(g, KERN_DT_BF16, o, v, n, c, hw)
                       : kern_ref_cast_f32_bf16(g, o, v, (size_t)n * c * hw);
    if (rc < 0) printf("Bail out! cast\n"), exit(99);
    return o;
}

/* The bf16 executor's stem (net_exec_x16.c THE STEM): its 3x3 conv of cast_f32_lowp_s2d's input
 * with the rearranged weights cast, against the 6x6 stride-2 bf16 conv, on values whose products
 * and sums are exact in float32: the same bf16 y and the same float32 dw bit for bit. */
static void test_exact_lowp(int n, int h, int w, int k_out, int layout)
{
    const int c = 3, ho = h / 2, wo = w / 2;
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * k_out * ho * wo;
    const size_t n6 = (size_t)k_out * c * 36, n3 = (size_t)k_out * 16 * 9;
    float *const x = grid(nx, 8), *const w6 = grid(n6, 16), *const dy = grid(ny, 16);
    struct kern_conv2d c6, c3;
    kern_conv2d_init(&c6, n, c, h, w, k_out, 6, 2, 2);
    kern_conv2d_init(&c3, n, 16, ho, wo, k_out, 3, 1, 1);
    struct kern_conv2d_lowp d6, d3;
    kern_conv2d_lowp_init(&d6, &c6, KERN_DT_BF16, layout);
    kern_conv2d_lowp_init(&d3, &c3, KERN_DT_BF16, layout);
    d6.dw_oihw = d3.dw_oihw = 1;
    size_t ws6 = 0, ws3 = 0;
    if (kern_ref_conv2d_lowp_workspace_size(g, &d6, &ws6) < 0 ||
        kern_ref_conv2d_lowp_workspace_size(g, &d3, &ws3) < 0 ||
        kern_ctx_reserve(g, ws6 > ws3 ? ws6 : ws3) < 0)
        printf("Bail out! workspace\n"), exit(99);
    uint16_t *const x16 = to16(x, n, c, (size_t)h * w, layout);
    uint16_t *const w616 = to16(w6, k_out, c, 36, layout);
    uint16_t *const dy16 = to16(dy, n, k_out, (size_t)ho * wo, layout);
    uint16_t *const y6 = malloc(ny * 2), *const y3 = malloc(ny * 2);
    uint16_t *const xs = malloc((size_t)n * 16 * ho * wo * 2);
    float *const dw6 = kt_alloc(n6), *const dw = kt_alloc(n6), *const w3 = kt_alloc(n3),
                 *const dw3 = kt_alloc(n3);
    if (!y6 || !y3 || !xs) exit(99);
    const struct kern_s2d s = { n, c, h, w, 16, layout };
    int rc = kern_ref_conv2d_lowp_fwd(g, &d6, y6, x16, w616, NULL);
    rc |= kern_ref_conv2d_lowp_bwd_filter(g, &d6, dw6, dy16, x16, 0);
    rc |= kern_ref_cast_f32_lowp_s2d(g, &s, KERN_DT_BF16, xs, x);
    rc |= kern_ref_s2d_weight_fwd(g, &s, k_out, w3, w6);
    uint16_t *const w316 = to16(w3, k_out, 16, 9, layout);
    rc |= kern_ref_conv2d_lowp_fwd(g, &d3, y3, xs, w316, NULL);
    rc |= kern_ref_conv2d_lowp_bwd_filter(g, &d3, dw3, dy16, xs, 0);
    kt_poison(dw, n6);
    rc |= kern_ref_s2d_weight_bwd(g, &s, k_out, dw, dw3, 0);
    ok(!rc && !memcmp(y6, y3, ny * 2),
       "bf16 %s %dx3x%dx%d, %d filters, exact values: the s2d stem's y is the 6x6 conv's, bit for "
       "bit",
       layout ? "NHWC" : "NCHW", n, h, w, k_out);
    ok(!rc && !memcmp(dw6, dw, n6 * sizeof(float)), "  and dw (OIHW, through s2d_weight_bwd)");
    free(x), free(w6), free(dy), free(x16), free(w616), free(dy16), free(y6), free(y3), free(xs);
    free(dw6), free(dw), free(w3), free(dw3), free(w316);
}

/* cast_f32_lowp_s2d: s2d_fwd on the NCHW images, then the dense cast (NCHW) or the channels-last
 * cast (NHWC), bit for bit, without the float32 tensor between them; every element written. */
static void test_cast_s2d(void)
{
    const int n = 2, c = 3, h = 8, w = 6, co = 16;
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * co * (h / 2) * (w / 2);
    float *const x = uni(nx), *const y = kt_alloc(ny);
    for (size_t i = 0; i < nx; i += 7)
        x[i] *= 1e30f;        /* overflow to Inf in fp16, and large values in bf16 */
    x[5] = 1.0f + 1.0f / 256; /* a tie: bf16 rounds it to even (1.0) */
    uint16_t *const want = malloc(ny * 2), *const got = malloc(ny * 2);
    if (!want || !got) exit(99);
    const struct kern_s2d s = { n, c, h, w, co, KERN_LAYOUT_NCHW };
    ok(kern_ref_s2d_fwd(g, &s, y, x) == 0, "s2d_fwd (NCHW)");
    for (int layout = 0; layout < 2; layout++)
        for (int dt = KERN_DT_BF16; dt <= KERN_DT_F16; dt++) {
            const struct kern_s2d d = { n, c, h, w, co, layout };
            int rc =
                layout == KERN_LAYOUT_NHWC
                    ? kern_ref_cast_f32_lowp_cl(g, dt, want, y, n, co, (size_t)(h / 2) * (w / 2))
                : dt == KERN_DT_BF16 ? kern_ref_cast_f32_bf16(g, want, y, ny)
                                     : kern_ref_cast_f32_f16(g, want, y, ny);
            memset(got, 0xa5, ny * 2);
            if (!rc) rc = kern_ref_cast_f32_lowp_s2d(g, &d, dt, got, x);
            ok(!rc && !memcmp(want, got, ny * 2),
               "cast_f32_lowp_s2d %s %s: s2d then the cast, bit for bit", layout ? "NHWC" : "NCHW",
               dt == KERN_DT_BF16 ? "bf16" : "fp16");
        }
    const struct kern_s2d d = { n, c, h, w, co, KERN_LAYOUT_NHWC };
    ok(kern_ref_cast_f32_lowp_s2d(g, &d, KERN_DT_F32, got, x) == -EINVAL, "float32: -EINVAL");
    ok(kern_ref_cast_f32_lowp_s2d(g, &d, KERN_DT_BF16, NULL, x) == -EINVAL, "NULL: -EINVAL");
    struct kern_s2d bad = d;
    bad.w = 5;
    ok(kern_ref_cast_f32_lowp_s2d(g, &bad, KERN_DT_BF16, got, x) == -EINVAL, "odd width: -EINVAL");
    free(x), free(y), free(want), free(got);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 41);
    if (kern_ctx_create(NULL, &g) < 0) return 99;
    test_exact(2, 16, 16, 8);
    test_exact(1, 12, 20, 16);
    test_exact(3, 2, 4, 5);
    test_random(2, 32, 32, 16);
    test_layouts_and_maps();
    test_cast_s2d();
    for (int layout = 0; layout < 2; layout++) {
        test_exact_lowp(2, 16, 12, 8, layout);
        test_exact_lowp(1, 8, 20, 16, layout);
    }
    kern_ctx_destroy(g);
    return tap_done();
}
