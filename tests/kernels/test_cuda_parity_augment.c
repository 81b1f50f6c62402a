/*
 * CUDA parity of the augmentation pixel ops (style guide rule 25): every kern_cuda_aug_* op
 * against its kern_ref_aug_* twin on the same random inputs (fresh draws each run; the seed is
 * printed, --seed N replays it), device outputs poisoned first (0xA5 bytes: a value never
 * written shows up as a difference). Photo-like tiles, random canvases (regions at the edges,
 * empty, overlapping), random affine and perspective warps, HSV gains, widths that are not
 * multiples of 32 (the HSV row tail that rounds), odd sizes for the flips, and the fused batch
 * over more samples than one launch takes (16), in each dtype (the bf16 space-to-depth ones
 * also bit for bit against the GPU's float32 batch and its cast).
 *
 * Tolerance: |gpu - cpu| <= 1 per uint8 value (the contract), <= 1/255 + 1e-7 per float
 * value; the kernels use the reference's exact integer and IEEE arithmetic, so the maximum
 * difference printed is expected to be 0.
 * Exits 77 with "# SKIP no CUDA device" when no device is visible (registered with the
 * exit-code protocol, CUDA builds only). --bench times the fused batch (see run_bench).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_lowp_common.h"
#include "kern_testutil.h"
#include "tap.h"
#include "cuda_testutil.h"
#include "parity.h"

static int g_worst; /* largest uint8 difference seen */

/* Compares the device bytes d with the CPU's ref (uint8 values, or floats when f32). */
static void cmp(const char *what, const void *d, const void *ref, size_t bytes, bool f32)
{
    uint8_t *got = malloc(bytes ? bytes : 1);
    kct_down(got, d, bytes);
    double maxd = 0;
    size_t bad = 0, first = 0;
    const size_t n = f32 ? bytes / 4 : bytes;
    for (size_t i = 0; i < n; i++) {
        double g, r;
        if (f32) {
            float a, b;
            memcpy(&a, got + 4 * i, 4), memcpy(&b, (const uint8_t *)ref + 4 * i, 4);
            g = a, r = b;
        } else {
            g = got[i], r = ((const uint8_t *)ref)[i];
        }
        const double diff = isnan(g) ? INFINITY : fabs(g - r);
        if (diff > maxd) maxd = diff;
        if (diff > (f32 ? 1.0 / 255 + 1e-7 : 1.0) && !bad++) first = i;
    }
    const int worst = (int)ceil(f32 ? maxd * 255 - 1e-3 : maxd);
    if (worst > g_worst) g_worst = worst;
    ok(bad == 0, "%s: max |gpu - cpu| %.3g over %zu values", what, maxd, n);
    if (bad) tap_diag("%zu values over tolerance, first at %zu", bad, first);
    free(got);
}

/* ---- random inputs (as tests/kernels/test_augment_ops.c) ------------------------------------ */

static uint8_t *rand_image(int w, int h)
{
    uint8_t *img = malloc((size_t)w * (size_t)h * 3);
    const int k = kt_randint(0, 255), flat = kt_randint(0, 255);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                const int blk = (x / 8 + y / 8 + k) % 4;
                const int v = blk == 0   ? (int)(kt_next() & 255)
                              : blk == 1 ? flat
                                         : x * 255 / w + y * 128 / h + c * 60 + k;
                img[((size_t)y * w + x) * 3 + c] = (uint8_t)v;
            }
    return img;
}

static void rand_matrix(int src_w, int src_h, int dst_w, int dst_h, int persp, double M[9])
{
    const double sc = kt_uniform(0.5f, 1.5f), a = kt_uniform(-30, 30) * M_PI / 180;
    const double sh = tan(kt_uniform(-5, 5) * M_PI / 180);
    const double px = persp ? kt_uniform(-1e-3f, 1e-3f) : 0,
                 py = persp ? kt_uniform(-1e-3f, 1e-3f) : 0;
    const double tx = kt_uniform(0.3f, 0.7f) * dst_w, ty = kt_uniform(0.3f, 0.7f) * dst_h;
    const double cx = -src_w / 2.0, cy = -src_h / 2.0;
    const double r00 = cos(a) * sc, r01 = sin(a) * sc, r10 = -sin(a) * sc, r11 = cos(a) * sc;
    double P[9] = { r00 + sh * r10, r01 + sh * r11, 0, r10, r11, 0, px, py, 1 };
    for (int i = 0; i < 3; i++)
        P[3 * i + 2] = P[3 * i] * cx + P[3 * i + 1] * cy + P[3 * i + 2];
    for (int j = 0; j < 3; j++) {
        M[j] = P[j] + tx * P[6 + j];
        M[3 + j] = P[3 + j] + ty * P[6 + j];
        M[6 + j] = P[6 + j];
    }
}

/* Random canvas of n regions; host tiles into tiles[], device copies into dtiles[]; c holds
 * host pointers, dc the same canvas with device pointers. */
static void rand_canvas(struct kern_aug_canvas *c, struct kern_aug_canvas *dc, int cw, int ch,
                        int n, uint8_t **tiles, uint8_t **dtiles)
{
    memset(c, 0, sizeof *c);
    c->w = cw, c->h = ch, c->n_paste = n;
    for (int i = 0; i < n; i++) {
        struct kern_aug_paste *p = &c->paste[i];
        p->src_w = kt_randint(1, cw), p->src_h = kt_randint(1, ch);
        tiles[i] = rand_image(p->src_w, p->src_h);
        dtiles[i] = kct_up(tiles[i], (size_t)p->src_w * p->src_h * 3);
        p->src = tiles[i];
        p->w = kt_randint(0, p->src_w), p->h = kt_randint(0, p->src_h);
        if (kt_randint(0, 5) == 0) p->w = 0;
        p->src_x = kt_randint(0, p->src_w - p->w), p->src_y = kt_randint(0, p->src_h - p->h);
        const int edge = kt_randint(0, 4);
        p->dst_x = edge == 0 ? 0 : edge == 1 ? cw - p->w : kt_randint(0, cw - p->w);
        p->dst_y = edge == 1 ? ch - p->h : edge == 0 ? 0 : kt_randint(0, ch - p->h);
    }
    *dc = *c;
    for (int i = 0; i < n; i++)
        dc->paste[i].src = dtiles[i];
}

static void rand_lut(struct kern_aug_hsv_lut *lut)
{
    const double gain[3] = { 1 + kt_uniform(-1, 1) * 0.015, 1 + kt_uniform(-1, 1) * 0.7,
                             1 + kt_uniform(-1, 1) * 0.4 };
    kern_aug_hsv_lut_init(lut, gain);
}

/* ---- ops ---------------------------------------------------------------------------------- */

static void test_paste(void)
{
    const int cw = kt_randint(1, 400), ch = kt_randint(1, 400), n = kt_randint(0, 4);
    struct kern_aug_canvas c, dc;
    uint8_t *tiles[4], *dtiles[4];
    rand_canvas(&c, &dc, cw, ch, n, tiles, dtiles);
    const size_t bytes = (size_t)cw * ch * 3;
    uint8_t *ref = malloc(bytes), *d = kct_poison(bytes);
    CK(kern_ref_aug_paste(g_cpu, ref, &c));
    CK(kern_cuda_aug_paste(g_gpu, d, &dc));
    char what[64];
    snprintf(what, sizeof what, "paste %d regions on %dx%d", n, cw, ch);
    cmp(what, d, ref, bytes, false);
    for (int i = 0; i < n; i++)
        free(tiles[i]), cudaFree(dtiles[i]);
    free(ref), cudaFree(d);
}

static void test_warp(int persp)
{
    const int sw = kt_randint(1, 700), sh = kt_randint(1, 700);
    const int dw = kt_randint(1, 700), dh = kt_randint(1, 700);
    const uint8_t border = (uint8_t)kt_randint(0, 255);
    uint8_t *src = rand_image(sw, sh), *dsrc = kct_up(src, (size_t)sw * sh * 3);
    double M[9], inv[9];
    rand_matrix(sw, sh, dw, dh, persp, M);
    kern_aug_warp_invert(M, persp, inv);
    const size_t bytes = (size_t)dw * dh * 3;
    uint8_t *ref = malloc(bytes), *d = kct_poison(bytes);
    CK(kern_ref_aug_warp(g_cpu, ref, dw, dh, src, sw, sh, inv, persp, border));
    CK(kern_cuda_aug_warp(g_gpu, d, dw, dh, dsrc, sw, sh, inv, persp, border));
    char what[80];
    snprintf(what, sizeof what, "warp %s %dx%d -> %dx%d", persp ? "perspective" : "affine", sw, sh,
             dw, dh);
    cmp(what, d, ref, bytes, false);
    free(src), free(ref), cudaFree(dsrc), cudaFree(d);
}

static void test_pixels(void)
{
    const int w = kt_randint(1, 700), h = kt_randint(1, 300);
    const size_t bytes = (size_t)w * h * 3;
    uint8_t *a = rand_image(w, h), *b = rand_image(w, h), *ref = malloc(bytes);
    uint8_t *da = kct_up(a, bytes), *db = kct_up(b, bytes);
    char what[64];

    struct kern_aug_hsv_lut lut;
    rand_lut(&lut);
    memcpy(ref, a, bytes);
    CK(kern_ref_aug_hsv(g_cpu, ref, w, h, &lut));
    CK(kern_cuda_aug_hsv(g_gpu, da, w, h, &lut));
    snprintf(what, sizeof what, "hsv %dx%d (row tail %d)", w, h, w % 32);
    cmp(what, da, ref, bytes, false);

    for (int mode = 1; mode < 4; mode++) {
        const int fw = w | (mode == 1 ? 1 : 0), fh = h | (mode == 2 ? 1 : 0); /* odd sizes too */
        const size_t fb = (size_t)fw * fh * 3;
        uint8_t *img = rand_image(fw, fh), *dimg = kct_up(img, fb);
        CK(kern_ref_aug_flip(g_cpu, img, fw, fh, mode & 1, mode >> 1));
        CK(kern_cuda_aug_flip(g_gpu, dimg, fw, fh, mode & 1, mode >> 1));
        snprintf(what, sizeof what, "flip lr=%d ud=%d %dx%d", mode & 1, mode >> 1, fw, fh);
        cmp(what, dimg, img, fb, false);
        free(img), cudaFree(dimg);
    }

    const double r = kt_uniform(0, 1);
    memcpy(ref, a, bytes);
    cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
    CK(kern_ref_aug_mixup(g_cpu, ref, b, bytes, r));
    CK(kern_cuda_aug_mixup(g_gpu, da, db, bytes, r));
    snprintf(what, sizeof what, "mixup r %.4f over %zu bytes", r, bytes);
    cmp(what, da, ref, bytes, false);

    for (int dtype = 0; dtype < 2; dtype++) {
        const size_t ob = bytes * (dtype ? 4 : 1);
        uint8_t *oref = malloc(ob), *od = kct_poison(ob);
        cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
        CK(kern_ref_aug_to_nchw(g_cpu, oref, dtype, a, w, h));
        CK(kern_cuda_aug_to_nchw(g_gpu, od, dtype, da, w, h));
        snprintf(what, sizeof what, "to_nchw %s %dx%d", dtype ? "f32" : "u8", w, h);
        cmp(what, od, oref, ob, dtype != 0);
        free(oref), cudaFree(od);
    }
    free(a), free(b), free(ref), cudaFree(da), cudaFree(db);
}

static bool is_s2d(int dtype)
{
    return dtype == KERN_AUG_BF16_S2D_NHWC || dtype == KERN_AUG_BF16_S2D_NCHW;
}

/*
 * The space-to-depth batch d (device) of n samples dp: bit for bit the GPU's own float32 batch
 * then kern_cuda_cast_f32_lowp_s2d; and within the uint8 tolerance of the CPU's ref (decoded:
 * each bf16 is value / 255 to 8 bits, so round(v 255) gives the value back).
 */
static void cmp_s2d(const char *what, int dtype, int s, int n, const void *d, const uint16_t *ref,
                    const struct kern_aug_sample *dp)
{
    const int layout = dtype == KERN_AUG_BF16_S2D_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
    const size_t ny = (size_t)n * kern_aug_image_bytes(dtype, s, s) / 2;
    const struct kern_s2d sd = { n, 3, s, s, KERN_AUG_S2D_C, layout };
    void *f = kct_poison((size_t)n * kern_aug_image_bytes(KERN_AUG_F32, s, s));
    void *c = kct_poison(ny * 2);
    CK(kern_cuda_aug_batch(g_gpu, f, KERN_AUG_F32, s, dp, n));
    CK(kern_cuda_cast_f32_lowp_s2d(g_gpu, &sd, KERN_DT_BF16, c, f));
    uint16_t *got = malloc(ny * 2), *cast = malloc(ny * 2);
    kct_down(got, d, ny * 2);
    kct_down(cast, c, ny * 2);
    size_t bits = 0, far = 0;
    for (size_t i = 0; i < ny; i++) {
        bits += got[i] != cast[i];
        const float g = kern_bf16_to_f32(got[i]) * 255.0f, r = kern_bf16_to_f32(ref[i]) * 255.0f;
        far += labs(lrintf(g) - lrintf(r)) > 1;
    }
    ok(bits == 0 && far == 0,
       "%s: the GPU's float32 batch + cast_f32_lowp_s2d bit for bit (%zu of %zu differ), the "
       "CPU's within 1 (%zu over)",
       what, bits, ny, far);
    free(got), free(cast), cudaFree(f), cudaFree(c);
}

static void test_batch(int dtype)
{
    /* two launches; space-to-depth needs an even side */
    const int s = is_s2d(dtype) ? 2 * kt_randint(8, 160) : kt_randint(16, 320),
              n = kt_randint(17, 24);
    struct kern_aug_sample *p = calloc((size_t)n, sizeof *p), *dp = calloc((size_t)n, sizeof *dp);
    uint8_t **tiles = calloc((size_t)n * 8, sizeof *tiles),
            **dtiles = calloc((size_t)n * 8, sizeof *dtiles);
    int mix = 0, persp = 0;
    for (int i = 0; i < n; i++) {
        p[i].mixup = kt_randint(0, 2) == 0;
        for (int k = 0; k < 1 + p[i].mixup; k++) {
            const bool mosaic = kt_randint(0, 3) != 0;
            const int cs = mosaic ? 2 * s : s;
            rand_canvas(&p[i].canvas[k], &dp[i].canvas[k], cs, cs, mosaic ? 4 : 1,
                        tiles + 8 * i + 4 * k, dtiles + 8 * i + 4 * k);
            p[i].perspective[k] = kt_randint(0, 3) == 0;
            double M[9];
            rand_matrix(cs, cs, s, s, p[i].perspective[k], M);
            kern_aug_warp_invert(M, p[i].perspective[k], p[i].inv[k]);
        }
        p[i].mixup_ratio = kt_uniform(0.3f, 0.7f);
        p[i].hsv = kt_randint(0, 4) != 0;
        rand_lut(&p[i].lut);
        p[i].flip_lr = kt_randint(0, 1), p[i].flip_ud = kt_randint(0, 3) == 0;
        const struct kern_aug_canvas c0 = dp[i].canvas[0], c1 = dp[i].canvas[1];
        dp[i] = p[i];
        dp[i].canvas[0] = c0, dp[i].canvas[1] = c1;
        mix += p[i].mixup, persp += p[i].perspective[0];
    }
    const size_t bytes = (size_t)n * kern_aug_image_bytes(dtype, s, s);
    uint8_t *ref = malloc(bytes), *d = kct_poison(bytes);
    CK(kern_ref_aug_batch(g_cpu, ref, dtype, s, p, n));
    CK(kern_cuda_aug_batch(g_gpu, d, dtype, s, dp, n));
    static const char *const name[] = { "u8", "f32", "bf16 s2d NHWC", "bf16 s2d NCHW" };
    char what[96];
    snprintf(what, sizeof what, "batch %s s %d, %d samples (%d mixup, %d perspective)", name[dtype],
             s, n, mix, persp);
    if (is_s2d(dtype))
        cmp_s2d(what, dtype, s, n, d, (const uint16_t *)(const void *)ref, dp);
    else
        cmp(what, d, ref, bytes, dtype != 0);
    for (int i = 0; i < n * 8; i++)
        if (tiles[i]) free(tiles[i]), cudaFree(dtiles[i]);
    free(tiles), free(dtiles), free(p), free(dp), free(ref), cudaFree(d);
}

/*
 * --bench: the fused batch at the recipe's shape (64 mosaics of four 640x480 tiles into
 * 64 x 3 x 640 x 640 float, HSV and fliplr on, no mixup), timed with CUDA events over 20 runs
 * after 3 warm-ups. Prints ms per batch, images/s and the output write bandwidth; asserts
 * nothing about speed. The tiles' upload is not included (the loader's part).
 */
static void run_bench(void)
{
    enum { B = 64, S = 640, TW = 640, TH = 480, REPS = 20 };
    uint8_t *tiles[4], *dtiles[4];
    for (int t = 0; t < 4; t++) {
        tiles[t] = rand_image(TW, TH);
        dtiles[t] = kct_up(tiles[t], (size_t)TW * TH * 3);
    }
    struct kern_aug_sample *p = calloc(B, sizeof *p);
    for (int i = 0; i < B; i++) {
        const int xc = kt_randint(S / 2, 3 * S / 2), yc = kt_randint(S / 2, 3 * S / 2);
        struct kern_aug_canvas *c = &p[i].canvas[0];
        c->w = c->h = 2 * S, c->n_paste = 4;
        /* load_mosaic's placement (tiles are 640 x 480: never cropped by the 1280 canvas) */
        const int x0[4] = { xc - TW, xc, xc - TW, xc }, y0[4] = { yc - TH, yc - TH, yc, yc };
        for (int t = 0; t < 4; t++) {
            const int ax = x0[t] < 0 ? 0 : x0[t], ay = y0[t] < 0 ? 0 : y0[t];
            const int bx = x0[t] + TW > 2 * S ? 2 * S : x0[t] + TW;
            const int by = y0[t] + TH > 2 * S ? 2 * S : y0[t] + TH;
            c->paste[t] = (struct kern_aug_paste){ dtiles[t], TW, TH,      ax - x0[t], ay - y0[t],
                                                   ax,        ay, bx - ax, by - ay };
        }
        double M[9];
        rand_matrix(2 * S, 2 * S, S, S, 0, M);
        kern_aug_warp_invert(M, 0, p[i].inv[0]);
        p[i].hsv = 1;
        rand_lut(&p[i].lut);
        p[i].flip_lr = i & 1;
    }
    const size_t bytes = (size_t)B * 3 * S * S * sizeof(float);
    void *d = kct_poison(bytes);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaStream_t st = (cudaStream_t)kern_cuda_ctx_stream(g_gpu);
    int rc = 0;
    for (int r = 0; r < 3; r++)
        rc |= kern_cuda_aug_batch(g_gpu, d, KERN_AUG_F32, S, p, B);
    cudaEventRecord(e0, st);
    for (int r = 0; r < REPS; r++)
        rc |= kern_cuda_aug_batch(g_gpu, d, KERN_AUG_F32, S, p, B);
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    ms /= REPS;
    ok(rc == 0, "bench: kern_cuda_aug_batch returns 0");
    tap_diag("aug_batch %dx3x%dx%d f32 (mosaic 4x %dx%d, affine, HSV): %.3f ms per batch, "
             "%.0f img/s, %.0f GB/s written",
             B, S, S, TW, TH, ms, B / (ms * 1e-3), bytes / (ms * 1e-3) / 1e9);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    for (int t = 0; t < 4; t++)
        free(tiles[t]), cudaFree(dtiles[t]);
    free(p), cudaFree(d);
}

void parity_augment(int bench)
{

    if (bench) {
        run_bench();
        return;
    }
    for (int k = 0; k < 3; k++)
        test_paste();
    for (int k = 0; k < 3; k++) {
        test_warp(0);
        test_warp(1);
    }
    for (int k = 0; k < 2; k++)
        test_pixels();
    test_batch(KERN_AUG_U8);
    test_batch(KERN_AUG_F32);
    test_batch(KERN_AUG_BF16_S2D_NHWC);
    test_batch(KERN_AUG_BF16_S2D_NCHW);
    /* the table holds the twins under their names */
    const struct kern_ops *K = kern_ops_cuda();
    ok(K && K->aug_batch == kern_cuda_aug_batch && K->aug_paste == kern_cuda_aug_paste &&
           K->aug_warp == kern_cuda_aug_warp && K->aug_hsv == kern_cuda_aug_hsv &&
           K->aug_flip == kern_cuda_aug_flip && K->aug_mixup == kern_cuda_aug_mixup &&
           K->aug_to_nchw == kern_cuda_aug_to_nchw,
       "kern_ops_cuda() holds the augmentation twins");
    is_int(kern_cuda_aug_paste(g_cpu, NULL, NULL), -KERN_EBACKEND, "a CPU context: -KERN_EBACKEND");
    tap_diag("largest difference over all ops: %d (uint8 units)", g_worst);
}
