/*
 * Detect head CPU references (kern_ref_detect_*): the (bs, na*no, ny, nx) -> (bs, na, ny, nx, no)
 * reshape against PyTorch's view + permute written out index by index, its backward as the
 * inverse (overwrite and accumulate), and the inference decode against ultralytics' formulas in
 * double: xy = (2 sigmoid + grid - 0.5) * stride, wh = (2 sigmoid)^2 * anchor * stride.
 * The reshape is a copy (bit-exact); decode is checked to 1e-5 + 1e-5 |ref| (pixels up to 640).
 * The blocked reshapes (kern_detect_blk_fwd / _bwd, the oneDNN executor's) against the NCHW ones
 * on the same numbers, blocks of 16 and 8, with and without pad lanes: the same bytes, pad lanes
 * of the gradient 0, nothing written past it; the blocked decode (kern_detect_blk_decode) the
 * NCHW decode's bytes, over several of its tiles, and its bad calls refused.
 */
#include <errno.h>

#include "kern_testutil.h"

static double sig(double v)
{
    return 1.0 / (1.0 + exp(-v));
}

static void check_detect(int bs, int na, int no, int ny, int nx, float stride)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const struct kern_detect d = { bs, na, no, ny, nx, stride };
    const size_t n = (size_t)bs * na * no * ny * nx;
    float *const raw = kt_alloc(n), *const p = kt_alloc(n), *const back = kt_alloc(n);
    float *const dec = kt_alloc(n), *const acc = kt_alloc(n);
    double *const ref = malloc(n * 8);
    /* The YOLOv5 P3 anchors, in grid units. */
    const float anchors[6] = { 1.25f, 1.625f, 2.0f, 3.75f, 4.125f, 2.875f };
    kt_fill(raw, n, -6, 6);
    kt_poison(p, n);
    is_int(kern_ref_detect_reshape_fwd(ctx, &d, p, raw), 0, "reshape bs%d na%d no%d %dx%d runs", bs,
           na, no, ny, nx);
    size_t bad = 0;
    for (int b = 0; b < bs; b++)
        for (int a = 0; a < na; a++)
            for (int y = 0; y < ny; y++)
                for (int x = 0; x < nx; x++)
                    for (int k = 0; k < no; k++) {
                        const size_t pi = ((((size_t)b * na + a) * ny + y) * nx + x) * no + k;
                        const size_t ri =
                            (((size_t)b * na * no + (size_t)a * no + k) * ny + y) * nx + x;
                        bad += p[pi] != raw[ri];
                    }
    ok(bad == 0, "reshape equals view(bs,na,no,ny,nx).permute(0,1,3,4,2) (%zu mismatches)", bad);
    kt_poison(back, n);
    kern_ref_detect_reshape_bwd(ctx, &d, back, p, 0);
    ok(!memcmp(back, raw, n * 4), "reshape bwd (=) is the inverse permutation");
    memcpy(acc, raw, n * 4);
    kern_ref_detect_reshape_bwd(ctx, &d, acc, p, KERN_ACCUM_DX);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += acc[i] != 2.0f * raw[i];
    ok(bad == 0, "reshape bwd (+=) accumulates (%zu mismatches)", bad);

    for (int b = 0; b < bs; b++)
        for (int a = 0; a < na; a++)
            for (int y = 0; y < ny; y++)
                for (int x = 0; x < nx; x++)
                    for (int k = 0; k < no; k++) {
                        const size_t pi = ((((size_t)b * na + a) * ny + y) * nx + x) * no + k;
                        const double s = sig(p[pi]);
                        double v = s;
                        if (k == 0) v = (2 * s + x - 0.5) * stride;
                        if (k == 1) v = (2 * s + y - 0.5) * stride;
                        if (k == 2) v = 4 * s * s * anchors[2 * a] * stride;
                        if (k == 3) v = 4 * s * s * anchors[2 * a + 1] * stride;
                        ref[pi] = v;
                    }
    kt_poison(dec, n);
    is_int(kern_ref_detect_decode(ctx, &d, dec, raw, anchors), 0, "decode runs");
    kt_check_close("decode vs ultralytics formulas in double", dec, ref, n, 1e-5, 1e-5);
    is_int(kern_ref_detect_decode(ctx, &d, dec, raw, NULL), -EINVAL, "decode without anchors");
    const struct kern_detect bad_d = { bs, na, 4, ny, nx, stride };
    is_int(kern_ref_detect_reshape_fwd(ctx, &bad_d, p, raw), -EINVAL, "no < 5 refused");
    free(raw), free(p), free(back), free(dec), free(acc), free(ref);
    kern_ctx_destroy(ctx);
}

static void check_blk(int bs, int na, int no, int ny, int nx, int blk)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const struct kern_detect d = { bs, na, no, ny, nx, 8.0f };
    const int C = na * no, cpad = (C + blk - 1) / blk * blk;
    const size_t cells = (size_t)ny * (size_t)nx, n = (size_t)bs * (size_t)C * cells;
    const size_t nb = (size_t)bs * (size_t)cpad * cells;
    float *const raw = kt_alloc(n), *const rawb = kt_alloc(nb), *const p = kt_alloc(n);
    float *const pb = kt_alloc(n), *const dp = kt_alloc(n), *const draw = kt_alloc(n);
    float *const drawb_ref = kt_alloc(nb), *const drawb = kt_alloc(nb + 1);
    kt_fill(raw, n, -6, 6);
    kt_fill(dp, n, -1, 1);
    kt_to_blk(rawb, raw, bs, C, cpad, blk, cells);
    kt_poison(pb, n);
    kt_poison(drawb, nb + 1);
    if (kern_ref_detect_reshape_fwd(ctx, &d, p, raw) ||
        kern_ref_detect_reshape_bwd(ctx, &d, draw, dp, 0))
        exit(98);
    for (int b = bs - 1; b >= 0; b--) /* any order */
        for (int a = 0; a < na; a++)
            kern_ops_cpu()->detect_blk_fwd(&d, blk, b, a, pb, rawb);
    ok(!memcmp(p, pb, n * sizeof *p),
       "blocked reshape bs%d na%d no%d %dx%d blk%d: p as the NCHW op's", bs, na, no, ny, nx, blk);
    kt_to_blk(drawb_ref, draw, bs, C, cpad, blk, cells);
    for (int b = 0; b < bs; b++)
        for (int cb = cpad / blk - 1; cb >= 0; cb--)
            kern_ops_cpu()->detect_blk_bwd(&d, blk, b, cb, drawb, dp);
    ok(!memcmp(drawb, drawb_ref, nb * sizeof *drawb) && kt_is_canary(drawb[nb]),
       "blocked reshape bs%d na%d no%d %dx%d blk%d: its gradient as the NCHW op's (pad lanes 0, "
       "nothing past it)",
       bs, na, no, ny, nx, blk);
    /* the decode: each (image, anchor) where the caller puts it, here the NCHW op's place */
    const float anchors[6] = { 1.25f, 1.625f, 2.0f, 3.75f, 4.125f, 2.875f };
    float *const dec = kt_alloc(n), *const decb = kt_alloc(n + 1);
    kt_poison(decb, n + 1);
    if (kern_ref_detect_decode(ctx, &d, dec, raw, anchors)) exit(98);
    int rc = 0;
    for (int b = bs - 1; b >= 0; b--)
        for (int a = na - 1; a >= 0; a--)
            rc |= kern_ops_cpu()->detect_blk_decode(
                &d, blk, b, a, decb + ((size_t)b * (size_t)na + (size_t)a) * cells * (size_t)no,
                rawb, anchors);
    ok(!rc && !memcmp(dec, decb, n * sizeof *dec) && kt_is_canary(decb[n]),
       "blocked decode bs%d na%d no%d %dx%d blk%d: the NCHW op's bytes, nothing past them", bs, na,
       no, ny, nx, blk);
    free(dec), free(decb);
    free(raw), free(rawb), free(p), free(pb), free(dp), free(draw), free(drawb_ref), free(drawb);
    kern_ctx_destroy(ctx);
}

/* Bad calls are refused, nothing written. */
static void check_blk_decode_args(void)
{
    const struct kern_detect d = { 1, 3, 85, 2, 2, 8.0f };
    const float anchors[6] = { 1, 1, 1, 1, 1, 1 };
    float raw[256 * 4] = { 0 }, out[85 * 4];
    kt_poison(out, 85 * 4);
    struct kern_detect big = d;
    big.no = KERN_DETECT_BLK_MAX_NO + 1;
    struct kern_detect nostride = d;
    nostride.stride = 0.0f;
    ok(kern_ops_cpu()->detect_blk_decode(&d, 12, 0, 0, out, raw, anchors) == -EINVAL &&
           kern_ops_cpu()->detect_blk_decode(&d, 16, 1, 0, out, raw, anchors) == -EINVAL &&
           kern_ops_cpu()->detect_blk_decode(&d, 16, 0, 3, out, raw, anchors) == -EINVAL &&
           kern_ops_cpu()->detect_blk_decode(&big, 16, 0, 0, out, raw, anchors) == -EINVAL &&
           kern_ops_cpu()->detect_blk_decode(&nostride, 16, 0, 0, out, raw, anchors) == -EINVAL &&
           kern_ops_cpu()->detect_blk_decode(&d, 16, 0, 0, out, NULL, anchors) == -EINVAL &&
           kern_ops_cpu()->detect_blk_decode(&d, 16, 0, 0, out, raw, NULL) == -EINVAL &&
           kt_is_canary(out[0]) && kt_is_canary(out[85 * 4 - 1]),
       "blocked decode refuses a block of 12, an image or anchor out of range, no above %d, a "
       "zero stride and NULLs, writing nothing",
       KERN_DETECT_BLK_MAX_NO);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 17);
    check_detect(2, 3, 85, 4, 5, 8.0f);
    check_detect(1, 3, 6, 3, 2, 32.0f);
    check_detect(1, 1, 5, 1, 1, 16.0f);
    check_blk(2, 3, 85, 4, 5, 16); /* 255 channels: one pad lane */
    check_blk(2, 3, 85, 3, 3, 8);
    check_blk(1, 2, 8, 2, 3, 16);    /* whole blocks; an anchor per block */
    check_blk(1, 3, 6, 5, 1, 8);     /* anchors split inside blocks */
    check_blk(2, 3, 85, 13, 11, 16); /* more cells than one tile of the decode */
    check_blk_decode_args();
    return tap_done();
}
