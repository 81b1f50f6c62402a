/*
 * Speed of the CPU augmentation on one thread, at the recipe's size: a 640 x 640 training sample
 * (mosaic of four 640 x 480 tiles with 8 polygon labels each, random_perspective, HSV, fliplr)
 * with hyp.scratch-low values, and each stage alone. Registered as a meson benchmark; prints
 * ms of thread CPU time per sample (the fastest of 5 rounds; CPU time, not wall time, so that
 * a shared machine does not inflate it). Not a test: nothing is asserted about time. The
 * loader's fused planar pass (trn_aug_train_sample_planar: tiles sampled in place, HSV, flips
 * and the uint8 NCHW write in one pass) is timed at each SIMD level, alternating with the
 * staged path, on the same draws.
 * Usage: test_augment_bench [samples [level]]   level: time only the fused pass at that SIMD
 * level (for a profiler)
 */
#include "augment.h"
#include "kern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S    640
#define TW   640
#define TH   480
#define NLAB 8
#define NPTS 32

#define RNG_TESTUTIL_SEED 88172645463325252ull
#include "rng_testutil.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 10;
    static uint8_t px[4][TW * TH * 3];
    static float labels[4][5 * NLAB], seg_xy[4][2 * NLAB * NPTS];
    static uint32_t seg_n[4][NLAB];
    struct trn_aug_tile tiles[4];
    for (int t = 0; t < 4; t++) {
        /* smooth gradients with mild noise: closer to photographs than white noise */
        for (int y = 0; y < TH; y++)
            for (int x = 0; x < TW; x++)
                for (int c = 0; c < 3; c++)
                    px[t][(y * TW + x) * 3 + c] =
                        (uint8_t)((x / 3 + y / 5 + 70 * c + 40 * t + (int)(urand(NULL) * 12)) &
                                  255);
        for (int j = 0; j < NLAB; j++) {
            const double cx = 0.2 + 0.6 * urand(NULL), cy = 0.2 + 0.6 * urand(NULL);
            const double r = 0.05 + 0.15 * urand(NULL);
            float *l = labels[t] + 5 * j;
            l[0] = (float)j, l[1] = (float)cx, l[2] = (float)cy, l[3] = (float)(2 * r),
            l[4] = (float)(2 * r);
            seg_n[t][j] = NPTS;
            for (int k = 0; k < NPTS; k++) {
                seg_xy[t][2 * (j * NPTS + k)] = (float)(cx + r * __builtin_cos(k * 0.19634954));
                seg_xy[t][2 * (j * NPTS + k) + 1] = (float)(cy + r * __builtin_sin(k * 0.19634954));
            }
        }
        tiles[t] = (struct trn_aug_tile){ px[t], TW, TH, labels[t], NLAB, seg_n[t], seg_xy[t] };
    }
    struct trn_aug_hyp hyp;
    trn_aug_hyp_default(&hyp);
    struct trn_aug_ws *ws;
    if (trn_aug_ws_create(S, 4 * NLAB, 4 * NLAB * NPTS, &ws) < 0) return 1;
    static uint8_t out[S * S * 3], canvas[4 * S * S * 3];
    float rows[5 * 4 * NLAB];

    /* The machine may be shared: report the fastest of 5 rounds of n samples each. */
    double whole = 1e30, t_mos = 1e30, t_warp = 1e30, t_hsv = 1e30,
           planar[3] = { 1e30, 1e30, 1e30 };
    static uint8_t nchw[3 * S * S];
    const int top = kern_aug_simd(KERN_AUG_SIMD_AVX512);
    if (argc > 2) {
        kern_aug_simd(atoi(argv[2]));
        const double p0 = now_ms();
        for (int i = 0; i < n; i++) {
            struct trn_aug_draws d;
            trn_aug_draws_fill(&hyp, S, urand, NULL, &d);
            if (trn_aug_train_sample_planar(ws, &hyp, &d, tiles, 4, S, S, KERN_AUG_U8, nchw, rows,
                                            4 * NLAB) < 0)
                return 1;
        }
        printf("fused planar pass, level %d: %.2f ms per sample\n", kern_aug_simd(-1),
               (now_ms() - p0) / n);
        return 0;
    }
    static uint32_t bseg_n[4 * NLAB];
    static float bseg_xy[2 * 4 * NLAB * NPTS];
    for (int round = 0; round < 5; round++) {
        double t0 = now_ms();
        for (int i = 0; i < n; i++) {
            struct trn_aug_draws d;
            trn_aug_draws_fill(&hyp, S, urand, NULL, &d);
            if (trn_aug_train_sample(ws, &hyp, &d, tiles, 4, out, rows, 4 * NLAB) < 0) return 1;
        }
        const double t = (now_ms() - t0) / n;
        whole = t < whole ? t : whole;
        for (int level = 0; level <= top; level++) {
            kern_aug_simd(level);
            const double p0 = now_ms();
            for (int i = 0; i < n; i++) {
                struct trn_aug_draws d;
                trn_aug_draws_fill(&hyp, S, urand, NULL, &d);
                if (trn_aug_train_sample_planar(ws, &hyp, &d, tiles, 4, S, S, KERN_AUG_U8, nchw,
                                                rows, 4 * NLAB) < 0)
                    return 1;
            }
            const double tp = (now_ms() - p0) / n;
            planar[level] = tp < planar[level] ? tp : planar[level];
        }
        kern_aug_simd(top);
        double tm = 0, tw = 0, th = 0;
        for (int i = 0; i < n; i++) {
            struct trn_aug_draws d;
            trn_aug_draws_fill(&hyp, S, urand, NULL, &d);
            struct trn_aug_boxes b = { rows, bseg_n, bseg_xy, 0, 4 * NLAB, 0, 4 * NLAB * NPTS };
            const double a = now_ms();
            trn_aug_mosaic4(S, d.mos.xc, d.mos.yc, tiles, canvas, &b);
            const double m = now_ms();
            trn_aug_random_perspective(canvas, 2 * S, 2 * S, out, S, S, &d.mos.persp, &b);
            const double w = now_ms();
            trn_aug_hsv(out, S, S, &d.hsv);
            const double h = now_ms();
            tm += m - a, tw += w - m, th += h - w;
        }
        t_mos = tm / n < t_mos ? tm / n : t_mos;
        t_warp = tw / n < t_warp ? tw / n : t_warp;
        t_hsv = th / n < t_hsv ? th / n : t_hsv;
    }
    printf("augment, one thread, %d samples of %dx%d (4 tiles %dx%d, %d polygons of %d points "
           "each):\n",
           n, S, S, TW, TH, 4 * NLAB, NPTS);
    printf("  whole training sample (mosaic + random_perspective + hsv + flip): %.2f ms "
           "(%.0f samples/s)\n",
           whole, 1e3 / whole);
    static const char *const names[3] = { "scalar", "AVX2", "AVX-512" };
    for (int level = 0; level <= top; level++)
        printf("  fused planar pass (the loader's), %s: %.2f ms (%.0f samples/s), %.2fx the "
               "staged sample\n",
               names[level], planar[level], 1e3 / planar[level], whole / planar[level]);
    printf("  mosaic4 (canvas 1280x1280): %.2f ms\n", t_mos);
    printf("  random_perspective (warp + %d polygon boxes): %.2f ms\n", 4 * NLAB, t_warp);
    printf("  hsv: %.2f ms\n", t_hsv);
    trn_aug_ws_destroy(ws);
    return 0;
}
