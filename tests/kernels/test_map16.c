/*
 * Max pool and nearest upsample on bf16 activations, NCHW or NHWC (kern_tensor.h "Max pool and
 * nearest upsample on 16-bit activations"), CPU reference:
 *   - NCHW and NHWC, and NHWC channel slices of wider tensors, give the same bits (y, idx, dx),
 *     nothing outside a slice written;
 *   - against the float32 ops on the widened numbers (kern_ref_maxpool2d_*, kern_ref_upsample2x_*):
 *     the forwards exactly (the same winner, the same offset), the backwards within one bf16
 *     rounding of their float sums;
 *   - with NaN and ties in windows, KERN_ACCUM_DX, bad descriptors;
 *   - copy16 (the concat's copies) into and out of NHWC slices and NCHW image strides.
 * The CUDA twins' bits are checked against these in test_cuda_parity_bnx.c.
 * Usage: test_kern_map16 [--seed N]
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_lowp_common.h"
#include "kern_testutil.h"
#include "tap.h"

static struct kern_ctx *g_ctx;

static uint16_t *u16(size_t n, uint16_t v)
{
    uint16_t *p = malloc((n ? n : 1) * 2);
    if (!p) exit(99);
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

/* NCHW <-> NHWC with pixel stride ld (the channels at the pointer given). */
static void to_nhwc(uint16_t *dst, const uint16_t *src, int n, int c, int hw, size_t ld)
{
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t ch = 0; ch < (size_t)c; ch++)
            for (size_t p = 0; p < (size_t)hw; p++)
                dst[(i * hw + p) * ld + ch] = src[(i * c + ch) * hw + p];
}

static void from_nhwc(uint16_t *dst, const uint16_t *src, int n, int c, int hw, size_t ld)
{
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t ch = 0; ch < (size_t)c; ch++)
            for (size_t p = 0; p < (size_t)hw; p++)
                dst[(i * c + ch) * hw + p] = src[(i * hw + p) * ld + ch];
}

/* bf16 values on a coarse grid (ties in most windows), a few NaN. */
static uint16_t *draws(size_t n, bool nan)
{
    uint16_t *p = u16(n, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = kern_bf16_from_f32((float)kt_randint(-8, 8) * 0.25f);
    for (size_t i = 0; nan && i < n / 97; i++)
        p[(size_t)kt_randint(0, (int)n - 1)] = 0x7fc0;
    return p;
}

/* The pool or upsample (pool 0: k ignored) forward and backward in NCHW, NHWC and NHWC slices;
 * returns the NCHW results in y, idx (pool), dx for the float32 comparison. */
static void run_layouts(int n, int c, int h, int w, int k, bool pool, bool nan, uint16_t **y_out,
                        uint8_t **idx_out, uint16_t **dx_out, uint16_t **x_out, uint16_t **dy_out)
{
    const int oh = pool ? h : 2 * h, ow = pool ? w : 2 * w;
    const size_t ex = (size_t)n * c * h * w, ey = (size_t)n * c * oh * ow;
    uint16_t *x = draws(ex, nan), *dy = draws(ey, false);
    struct kern_map16 d = {
        .n = n, .c = c, .h = h, .w = w, .k = k, .layout = KERN_LAYOUT_NCHW, .dtype = KERN_DT_BF16
    };
    uint16_t *y = u16(ey, 0x7fc1), *dx = u16(ex, 0x7fc1);
    uint8_t *idx = calloc(ey, 1);
    int rc = pool ? kern_ref_maxpool16_fwd(g_ctx, &d, y, idx, x)
                  : kern_ref_upsample16_fwd(g_ctx, &d, y, x);
    if (!rc)
        rc = pool ? kern_ref_maxpool16_bwd(g_ctx, &d, dx, dy, idx, 0)
                  : kern_ref_upsample16_bwd(g_ctx, &d, dx, dy, 0);
    is_int(rc, 0, "%s n%d c%d %dx%d%s: NCHW runs", pool ? "pool" : "upsample", n, c, h, w,
           nan ? " with NaN" : "");

    /* NHWC slices: x and dx at channel 1 of c + 3, y and dy at channel 2 of c + 4 */
    const size_t lx = (size_t)c + 3, ly = (size_t)c + 4;
    const size_t px = (size_t)n * h * w, py = (size_t)n * oh * ow;
    uint16_t *xs = u16(px * lx, 0x7fc1), *dys = u16(py * ly, 0x7fc1);
    uint16_t *ys = u16(py * ly, 0x7fc1), *dxs = u16(px * lx, 0x7fc1);
    to_nhwc(xs + 1, x, n, c, h * w, lx), to_nhwc(dys + 2, dy, n, c, oh * ow, ly);
    d.layout = KERN_LAYOUT_NHWC, d.x_ld = lx, d.y_ld = ly;
    uint8_t *idx_h = calloc(ey, 1);
    rc = pool ? kern_ref_maxpool16_fwd(g_ctx, &d, ys + 2, idx_h, xs + 1)
              : kern_ref_upsample16_fwd(g_ctx, &d, ys + 2, xs + 1);
    if (!rc)
        rc = pool ? kern_ref_maxpool16_bwd(g_ctx, &d, dxs + 1, dys + 2, idx_h, 0)
                  : kern_ref_upsample16_bwd(g_ctx, &d, dxs + 1, dys + 2, 0);
    uint16_t *yb = u16(ey, 0), *dxb = u16(ex, 0);
    from_nhwc(yb, ys + 2, n, c, oh * ow, ly), from_nhwc(dxb, dxs + 1, n, c, h * w, lx);
    size_t idx_bad = 0, touched = 0;
    for (size_t i = 0; pool && i < (size_t)n; i++) /* idx is dense in y's layout */
        for (size_t ch = 0; ch < (size_t)c; ch++)
            for (size_t p = 0; p < (size_t)oh * ow; p++)
                idx_bad += idx[(i * c + ch) * oh * ow + p] != idx_h[(i * oh * ow + p) * c + ch];
    for (size_t p = 0; p < py; p++)
        for (size_t q = 0; q < ly; q++)
            touched += (q < 2 || q >= 2 + (size_t)c) && ys[p * ly + q] != 0x7fc1;
    for (size_t p = 0; p < px; p++)
        for (size_t q = 0; q < lx; q++)
            touched += (q < 1 || q >= 1 + (size_t)c) && dxs[p * lx + q] != 0x7fc1;
    ok(rc == 0 && !memcmp(y, yb, ey * 2) && !memcmp(dx, dxb, ex * 2) && idx_bad == 0 &&
           touched == 0,
       "%s n%d c%d %dx%d: NHWC slices give NCHW's bits (y, idx, dx; %zu idx off, %zu written "
       "outside)",
       pool ? "pool" : "upsample", n, c, h, w, idx_bad, touched);
    free(xs), free(dys), free(ys), free(dxs), free(yb), free(dxb), free(idx_h);
    *y_out = y, *dx_out = dx, *x_out = x, *dy_out = dy;
    if (idx_out)
        *idx_out = idx;
    else
        free(idx);
}

static float *widen(const uint16_t *h, size_t n)
{
    float *f = kt_alloc(n);
    for (size_t i = 0; i < n; i++)
        f[i] = kern_bf16_to_f32(h[i]);
    return f;
}

static void test_pool(int n, int c, int h, int w, int k, bool nan)
{
    uint16_t *y, *dx, *x, *dy;
    uint8_t *idx;
    run_layouts(n, c, h, w, k, true, nan, &y, &idx, &dx, &x, &dy);
    const size_t e = (size_t)n * c * h * w;
    struct kern_pool2d pd = {
        .n = n, .c = c, .h_in = h, .w_in = w, .k = k, .stride = 1, .pad = k / 2
    };
    float *xf = widen(x, e), *dyf = widen(dy, e), *yf = kt_alloc(e), *dxf = kt_alloc(e);
    int32_t *idf = calloc(e, sizeof *idf);
    int rc = kern_ref_maxpool2d_fwd(g_ctx, &pd, yf, idf, xf);
    if (!rc) rc = kern_ref_maxpool2d_bwd(g_ctx, &pd, dxf, dyf, idf, 0);
    size_t ybad = 0, ibad = 0, dbad = 0;
    for (size_t t = 0; t < e; t++) {
        const float yv = kern_bf16_to_f32(y[t]);
        ybad += !(yv == yf[t] || (isnan(yv) && isnan(yf[t])));
        const int p = (int)(t % ((size_t)h * w)), oy = p / w, ox = p % w;
        const int iy = oy - k / 2 + idx[t] / k, ix = ox - k / 2 + idx[t] % k;
        ibad += !isnan(yv) && iy * w + ix != idf[t];
        const float want = dxf[t], got = kern_bf16_to_f32(dx[t]);
        dbad += !(fabsf(got - want) <= fabsf(want) / 256 || (isnan(got) && isnan(want)));
    }
    ok(rc == 0 && ybad == 0 && ibad == 0 && dbad == 0,
       "pool k%d n%d c%d %dx%d%s against float32: y and idx exact, dx within bf16 (%zu, %zu, %zu "
       "off)",
       k, n, c, h, w, nan ? " with NaN" : "", ybad, ibad, dbad);
    free(y), free(idx), free(dx), free(x), free(dy), free(xf), free(dyf), free(yf), free(dxf);
    free(idf);
}

static void test_upsample(int n, int c, int h, int w)
{
    uint16_t *y, *dx, *x, *dy;
    run_layouts(n, c, h, w, 0, false, false, &y, NULL, &dx, &x, &dy);
    const size_t e = (size_t)n * c * h * w;
    float *xf = widen(x, e), *dyf = widen(dy, 4 * e), *yf = kt_alloc(4 * e), *dxf = kt_alloc(e);
    int rc = kern_ref_upsample2x_fwd(g_ctx, yf, xf, n * c, h, w);
    if (!rc) rc = kern_ref_upsample2x_bwd(g_ctx, dxf, dyf, n * c, h, w, 0);
    size_t ybad = 0, dbad = 0;
    for (size_t t = 0; t < 4 * e; t++)
        ybad += kern_bf16_to_f32(y[t]) != yf[t];
    for (size_t t = 0; t < e; t++)
        dbad += fabsf(kern_bf16_to_f32(dx[t]) - dxf[t]) > fabsf(dxf[t]) / 256;
    ok(rc == 0 && ybad == 0 && dbad == 0,
       "upsample n%d c%d %dx%d against float32: y exact, dx within bf16 (%zu, %zu off)", n, c, h, w,
       ybad, dbad);
    free(y), free(dx), free(x), free(dy), free(xf), free(dyf), free(yf), free(dxf);
}

static void test_accum_errors(void)
{
    const int n = 2, c = 3, h = 6, w = 5;
    const size_t e = (size_t)n * c * h * w;
    struct kern_map16 d = {
        .n = n, .c = c, .h = h, .w = w, .k = 5, .layout = KERN_LAYOUT_NHWC, .dtype = KERN_DT_BF16
    };
    uint16_t *x = draws(e, false), *dy = draws(e, false), *y = u16(e, 0), *dx = u16(e, 0);
    uint8_t *idx = calloc(e, 1);
    uint16_t *acc = draws(e, false), *old = u16(e, 0);
    memcpy(old, acc, e * 2);
    int rc = kern_ref_maxpool16_fwd(g_ctx, &d, y, idx, x);
    if (!rc) rc = kern_ref_maxpool16_bwd(g_ctx, &d, dx, dy, idx, 0);
    if (!rc) rc = kern_ref_maxpool16_bwd(g_ctx, &d, acc, dy, idx, KERN_ACCUM_DX);
    size_t bad = 0;
    for (size_t t = 0; t < e; t++) { /* coarse-grid values: every sum here is exact */
        bad += kern_bf16_to_f32(acc[t]) != kern_bf16_to_f32(old[t]) + kern_bf16_to_f32(dx[t]);
    }
    ok(rc == 0 && bad == 0, "KERN_ACCUM_DX adds the routed gradients to dx (%zu off)", bad);
    struct kern_map16 b = d;
    b.k = 4;
    is_int(kern_ref_maxpool16_fwd(g_ctx, &b, y, idx, x), -EINVAL, "an even window refused");
    b = d, b.k = 17;
    is_int(kern_ref_maxpool16_fwd(g_ctx, &b, y, idx, x), -EINVAL, "a window over 15 refused");
    b = d, b.dtype = KERN_DT_F32;
    is_int(kern_ref_upsample16_fwd(g_ctx, &b, y, x), -EINVAL, "a float32 descriptor refused");
    b = d, b.y_ld = 2;
    is_int(kern_ref_upsample16_fwd(g_ctx, &b, y, x), -EINVAL, "a pixel stride below c refused");
    b = d, b.layout = KERN_LAYOUT_NCHW, b.y_ld = (size_t)c * h * w;
    is_int(kern_ref_upsample16_fwd(g_ctx, &b, y, x), -EINVAL,
           "an NCHW upsample image stride below 4 c h w refused");
    is_int(kern_ref_maxpool16_fwd(g_ctx, &d, y, NULL, x), -EINVAL, "a pool without idx refused");
    free(x), free(dy), free(y), free(dx), free(idx), free(acc), free(old);
}

/* copy16: a concat's copy into an NHWC slice and the gradient's out of it, with and without
 * KERN_ACCUM_DX; NCHW image strides; the pixels between the slices untouched. */
static void test_copy(int n, int c, int h, int w)
{
    const size_t hw = (size_t)h * w, e = (size_t)n * c * hw, ld = (size_t)c + 6, off = 4;
    const size_t wide = (size_t)n * hw * ld;
    uint16_t *x = draws(e, true), *xs = u16(wide, 0x7fc1), *back = u16(e, 0x7fc1);
    uint16_t *old = draws(e, false), *acc = u16(e, 0);
    struct kern_map16 d = {
        .n = n, .c = c, .h = h, .w = w, .layout = KERN_LAYOUT_NHWC, .dtype = KERN_DT_BF16
    };
    d.y_ld = ld;
    int rc = kern_ref_copy16(g_ctx, &d, xs + off, x, 0); /* into the slice */
    d.y_ld = 0, d.x_ld = ld;
    if (!rc) rc = kern_ref_copy16(g_ctx, &d, back, xs + off, 0); /* and out */
    memcpy(acc, old, e * 2);
    if (!rc) rc = kern_ref_copy16(g_ctx, &d, acc, xs + off, KERN_ACCUM_DX);
    size_t touched = 0, abad = 0;
    for (size_t p = 0; p < (size_t)n * hw; p++)
        for (size_t q = 0; q < ld; q++)
            touched += (q < off || q >= off + (size_t)c) && xs[p * ld + q] != 0x7fc1;
    for (size_t t = 0; t < e; t++) {
        const uint16_t want = kern_bf16_from_f32(kern_bf16_to_f32(old[t]) + kern_bf16_to_f32(x[t]));
        abad +=
            acc[t] != want && !(isnan(kern_bf16_to_f32(acc[t])) && isnan(kern_bf16_to_f32(want)));
    }
    ok(rc == 0 && !memcmp(back, x, e * 2) && touched == 0 && abad == 0,
       "copy16 n%d c%d %dx%d: NHWC into a slice and out gives x's bits, KERN_ACCUM_DX is r(old + "
       "x) (%zu written outside, %zu sums off)",
       n, c, h, w, touched, abad);
    /* NCHW with image strides: the same bits */
    const size_t img = (size_t)c * hw, lds = img + 9;
    uint16_t *ys = u16((size_t)n * lds, 0x7fc1), *back2 = u16(e, 0);
    struct kern_map16 dn = {
        .n = n, .c = c, .h = h, .w = w, .layout = KERN_LAYOUT_NCHW, .dtype = KERN_DT_BF16
    };
    dn.y_ld = lds;
    rc = kern_ref_copy16(g_ctx, &dn, ys, x, 0);
    dn.y_ld = 0, dn.x_ld = lds;
    if (!rc) rc = kern_ref_copy16(g_ctx, &dn, back2, ys, 0);
    size_t gap = 0;
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t q = img; q < lds; q++)
            gap += ys[i * lds + q] != 0x7fc1;
    ok(rc == 0 && !memcmp(back2, x, e * 2) && gap == 0,
       "copy16 NCHW with image strides: x's bits, the gaps untouched (%zu)", gap);
    dn.x_ld = img - 1;
    is_int(kern_ref_copy16(g_ctx, &dn, back2, ys, 0), -EINVAL, "copy16: a short stride refused");
    free(x), free(xs), free(back), free(old), free(acc), free(ys), free(back2);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 41);
    g_ctx = kt_ctx_threads(2);
    test_pool(2, 5, 9, 7, 5, false); /* SPPF's k 5 */
    test_pool(1, 3, 4, 6, 5, true);  /* windows larger than the map, NaN */
    test_pool(2, 4, 11, 10, 3, true);
    test_upsample(2, 5, 6, 7);
    test_upsample(1, 17, 3, 4);
    test_accum_errors();
    test_copy(2, 5, 6, 7);
    test_copy(1, 16, 3, 4);
    kern_ctx_destroy(g_ctx);
    return tap_done();
}
