/*
 * tta (trainer/eval/tta.h): ultralytics' test-time augmentation and model ensembles.
 *   - scale_img sizes for the shapes val.py and detect.py see (640 square, 480x640, tiny);
 *   - scale_img pixels: a constant image stays constant with exact 0.447 padding; a horizontal
 *     ramp gives PyTorch's bilinear source positions (align_corners=False); flipping inside
 *     equals resizing a mirrored copy;
 *   - _descale_pred inverts the branch's geometry (scale, then the lr flip) on boxes;
 *   - _clip_augmented counts: the coarsest level of the first branch and the finest of the last;
 *   - the runner on yolov5n (initial weights, nc 3) at 96x64: branch 1 is the plain forward,
 *     the flipped branch on a left-right symmetric image is the mirror of the unflipped one,
 *     row counts add up; an ensemble of one model twice doubles the rows and gives the same
 *     detections after NMS; models with different classes are refused.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "net.h"
#include "nms.h"
#include "tap.h"
#include "tta.h"

#ifndef TRN_TEST_MODELS_DIR
#define TRN_TEST_MODELS_DIR "models"
#endif

static void test_sizes(void)
{
    int rh, rw, ph, pw;
    is_int(trn_tta_scaled_size(640, 640, 0.83, 32, &rh, &rw, &ph, &pw), 0, "640 x 0.83");
    ok(rh == 531 && rw == 531 && ph == 544 && pw == 544,
       "640 x 0.83: 531 resized, 544 padded "
       "(got %d %d %d %d)",
       rh, rw, ph, pw);
    trn_tta_scaled_size(640, 640, 0.67, 32, &rh, &rw, &ph, &pw);
    ok(rh == 428 && rw == 428 && ph == 448 && pw == 448,
       "640 x 0.67: 428 resized, 448 padded "
       "(got %d %d %d %d)",
       rh, rw, ph, pw);
    trn_tta_scaled_size(480, 640, 0.83, 32, &rh, &rw, &ph, &pw);
    ok(rh == 398 && rw == 531 && ph == 416 && pw == 544,
       "480x640 x 0.83: 398x531 in 416x544 "
       "(got %d %d %d %d)",
       rh, rw, ph, pw);
    trn_tta_scaled_size(32, 32, 0.67, 32, &rh, &rw, &ph, &pw);
    ok(rh == 21 && rw == 21 && ph == 32 && pw == 32, "32 x 0.67: 21 in 32 (got %d %d %d %d)", rh,
       rw, ph, pw);
    trn_tta_scaled_size(352, 608, 1.0, 32, &rh, &rw, &ph, &pw);
    ok(rh == 352 && rw == 608 && ph == 352 && pw == 608, "ratio 1: the input unchanged");
    ok(trn_tta_scaled_size(0, 640, 0.83, 32, &rh, &rw, &ph, &pw) == -EINVAL &&
           trn_tta_scaled_size(640, 640, 0, 32, &rh, &rw, &ph, &pw) == -EINVAL &&
           trn_tta_scaled_size(640, 640, NAN, 32, &rh, &rw, &ph, &pw) == -EINVAL &&
           trn_tta_scaled_size(640, 640, 0.83, 0, &rh, &rw, &ph, &pw) == -EINVAL &&
           trn_tta_scaled_size(1, 1, 0.5, 32, &rh, &rw, &ph, &pw) == -EINVAL,
       "bad sizes, ratios and grids are -EINVAL");
}

static void test_scale_pixels(void)
{
    enum { H = 60, W = 100 };
    const double r = 0.83;
    int rh, rw, ph, pw;
    trn_tta_scaled_size(H, W, r, 32, &rh, &rw, &ph, &pw);
    const size_t in_n = 2 * (size_t)H * W, out_n = 2 * (size_t)ph * pw;
    float *in = malloc(in_n * sizeof *in), *mir = malloc(in_n * sizeof *mir);
    float *a = malloc(out_n * sizeof *a), *b = malloc(out_n * sizeof *b);
    if (!in || !mir || !a || !b) {
        ok(0, "out of memory");
        return;
    }
    /* plane 0 constant 0.3, plane 1 a ramp in x */
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            in[(size_t)y * W + x] = 0.3f;
            in[(size_t)H * W + (size_t)y * W + x] = (float)x;
        }
    is_int(trn_tta_scale_img(in, 1, 2, H, W, r, 32, false, a, out_n), 0, "scale_img runs");
    int bad_const = 0, bad_pad = 0, bad_ramp = 0;
    double worst = 0;
    const float scale = (float)W / (float)rw;
    for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++) {
            const float c = a[(size_t)y * pw + x], v = a[(size_t)ph * pw + (size_t)y * pw + x];
            if (y >= rh || x >= rw) {
                if (c != TRN_TTA_PAD || v != TRN_TTA_PAD) bad_pad++;
                continue;
            }
            if (fabsf(c - 0.3f) > 1e-6f) bad_const++;
            /* PyTorch: src = scale * (x + 0.5) - 0.5, clamped to [0, W - 1] */
            double src = (double)scale * (x + 0.5) - 0.5;
            src = src < 0 ? 0 : src > W - 1 ? W - 1 : src;
            const double e = fabs((double)v - src);
            if (e > worst) worst = e;
            if (e > 1e-4) bad_ramp++;
        }
    ok(!bad_const, "a constant image stays constant inside (%d off)", bad_const);
    ok(!bad_pad, "right and bottom padding is exactly 0.447 (%d off)", bad_pad);
    ok(!bad_ramp, "a ramp gives PyTorch's bilinear source positions (max error %.2g)", worst);

    for (int p = 0; p < 2; p++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                mir[(size_t)p * H * W + (size_t)y * W + x] =
                    in[(size_t)p * H * W + (size_t)y * W + (W - 1 - x)] + 0.01f * (float)y;
    for (int p = 0; p < 2; p++) /* the same rows tilt in `in`, so mir is exactly in mirrored */
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                in[(size_t)p * H * W + (size_t)y * W + x] += 0.01f * (float)y;
    trn_tta_scale_img(in, 1, 2, H, W, r, 32, true, a, out_n);
    trn_tta_scale_img(mir, 1, 2, H, W, r, 32, false, b, out_n);
    ok(!memcmp(a, b, out_n * sizeof *a), "flip inside scale_img == scaling a mirrored copy");
    trn_tta_scale_img(in, 1, 2, H, W, 1.0, 32, true, a, out_n);
    int bad = 0;
    for (size_t i = 0; i < in_n; i++)
        bad += a[i] != mir[i];
    ok(!bad, "ratio 1 with flip is the mirror (%d off)", bad);
    ok(trn_tta_scale_img(in, 1, 2, H, W, r, 32, false, a, out_n - 1) == -EINVAL,
       "a destination one float short is -EINVAL");
    free(in);
    free(mir);
    free(a);
    free(b);
}

/* --multi-scale's F.interpolate to a given size: the resized part of scale_img, unpadded. */
static void test_interpolate(void)
{
    enum { H = 64, W = 64 };
    float *in = malloc(3 * H * W * sizeof *in), *a = malloc(3 * 96 * 96 * sizeof *a);
    float *b = malloc(3 * 96 * 96 * sizeof *b);
    for (int i = 0; i < 3 * H * W; i++)
        in[i] = (float)((i * 2654435761u) % 1000u) / 1000.0f;
    /* r = 1.5: int(64 * 1.5) = 96 = ceil(96 / 32) * 32, so scale_img does not pad */
    int rc = trn_tta_scale_img(in, 1, 3, H, W, 1.5, 32, false, a, 3 * 96 * 96);
    if (rc == 0) rc = trn_tta_interpolate(in, 1, 3, H, W, 96, 96, b, 3 * 96 * 96);
    ok(rc == 0 && !memcmp(a, b, 3 * 96 * 96 * sizeof *a),
       "interpolate to 96x96 equals scale_img at r = 1.5, bit for bit");
    ok(trn_tta_interpolate(in, 1, 3, H, W, 96, 96, b, 100) == -EINVAL, "a short dst refused");
    free(in), free(a), free(b);
}

static void test_descale(void)
{
    /* boxes in an image of width 640, sent through branch geometry and back */
    const float boxes[3][4] = { { 100, 200, 30, 40 },
                                { 600.5f, 10, 80, 12 },
                                { 320, 320, 640, 640 } };
    float p[3][7];
    const double r = 0.83;
    const int W = 640;
    for (int i = 0; i < 3; i++) {
        /* what the flipped, scaled branch sees: x mirrored, then all scaled */
        p[i][0] = (float)((W - boxes[i][0]) * r);
        p[i][1] = (float)(boxes[i][1] * r);
        p[i][2] = (float)(boxes[i][2] * r);
        p[i][3] = (float)(boxes[i][3] * r);
        p[i][4] = 0.5f;
        p[i][5] = 0.25f;
        p[i][6] = 0.75f;
    }
    is_int(trn_tta_descale(&p[0][0], 3, 7, r, true, W), 0, "descale runs");
    double worst = 0;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            worst = fmax(worst, fabs((double)p[i][k] - boxes[i][k]));
    ok(worst < 1e-3, "descale(flip) maps the flipped, scaled boxes back (max error %.2g px)",
       worst);
    ok(p[1][4] == 0.5f && p[1][5] == 0.25f && p[1][6] == 0.75f, "scores are untouched");
    ok(trn_tta_descale(&p[0][0], 3, 3, r, false, W) == -EINVAL &&
           trn_tta_descale(NULL, 1, 7, r, false, W) == -EINVAL &&
           trn_tta_descale(&p[0][0], 3, 7, 0, false, W) == -EINVAL,
       "bad descale arguments are -EINVAL");
}

static void test_clip(void)
{
    size_t keep, skip;
    /* 640: 3 * (80^2 + 40^2 + 20^2) = 25200 rows; 448: 3 * (56^2 + 28^2 + 14^2) = 12348 */
    is_int(trn_tta_clip_counts(3, 25200, 12348, &keep, &skip), 0, "clip counts");
    ok(keep == 25200 - 1200, "first branch loses its P5 level: keeps %zu of 25200", keep);
    ok(skip == 3 * 56 * 56, "last branch loses its P3 level: skips %zu of 12348", skip);
    /* a 416x544 first branch: 3 * (52*68 + 26*34 + 13*17) = 13923; 13923 // 21 = 663 */
    trn_tta_clip_counts(3, 13923, 13923, &keep, &skip);
    ok(keep == 13923 - 663 && skip == 663 * 16, "rect shapes: Python's // on the row count");
    trn_tta_clip_counts(3, 20, 20, &keep, &skip);
    ok(keep == 0 && skip == 0, "fewer rows than grid points: [:-0] keeps none, [0:] all");
    trn_tta_clip_counts(1, 300, 300, &keep, &skip);
    ok(keep == 0 && skip == 300, "one level: both cuts take everything (g = 1)");
    ok(trn_tta_clip_counts(0, 1, 1, &keep, &skip) == -EINVAL, "nl 0 is -EINVAL");
}

static struct trn_model *load_model(int nc, uint64_t seed)
{
    char path[4096], err[512] = "";
    if (trn_model_cfg_find("yolov5n", TRN_TEST_MODELS_DIR, path, sizeof path) < 0) return NULL;
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    o.nc = nc;
    struct trn_model *m = NULL;
    if (trn_model_load(path, &o, &m, err, sizeof err) < 0) {
        tap_diag("%s", err);
        return NULL;
    }
    trn_model_init(m, seed);
    return m;
}

static int nms(struct trn_nms *w, const float *pred, int rows, int no, struct trn_det *d)
{
    struct trn_nms_opts o;
    trn_nms_opts_default(&o);
    o.conf_thres = 0.0005f;
    return trn_nms_run(w, pred, (size_t)rows, (size_t)no, no - 5, &o, d, TRN_NMS_MAX_DET);
}

static void test_runner(void)
{
    enum { H = 64, W = 96, NC = 3, NO = NC + 5 };
    struct trn_model *m = load_model(NC, 0), *m2 = load_model(NC, 1), *m4 = load_model(4, 0);
    if (!ok(m && m2 && m4, "yolov5n with nc 3 and 4 built")) goto out;
    /* a left-right symmetric image with structure */
    float *img = malloc(3 * H * W * sizeof *img);
    if (!img) goto out;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W / 2; x++) {
                const float v = 0.5f + 0.4f * sinf(0.3f * (float)x + 0.2f * (float)(y * (c + 1)));
                img[((size_t)c * H + y) * W + x] = v;
                img[((size_t)c * H + y) * W + (W - 1 - x)] = v;
            }

    struct trn_tta_opts o;
    trn_tta_opts_default(&o);
    /* the reference ops, bit for bit: the runner's own arithmetic (scaling, flips, merging) is
       what is checked here, with memcmp against nets of our own and across a mirror, which
       oneDNN's summation order would not keep (its parity: test_net_onednn) */
    o.cpu_engine = TRN_CPU_ENGINE_REF;
    struct trn_tta *plain = NULL, *aug = NULL, *twice = NULL, *mixed = NULL;
    char err[512] = "";
    struct trn_model *pair[2] = { m, m };
    is_int(trn_tta_create(&m, 1, 1, &o, &plain, err, sizeof err), 0, "plain runner: %s", err);
    o.augment = true;
    is_int(trn_tta_create(&m, 1, 1, &o, &aug, err, sizeof err), 0, "augmented runner: %s", err);
    o.augment = false;
    is_int(trn_tta_create(pair, 2, 1, &o, &twice, err, sizeof err), 0, "ensemble of m, m: %s", err);
    struct trn_model *bad[2] = { m, m4 };
    err[0] = '\0';
    const int rc_bad = trn_tta_create(bad, 2, 1, &o, &mixed, err, sizeof err);
    ok(rc_bad == -EINVAL && strstr(err, "different class counts") && strstr(err, "3") &&
           strstr(err, "4"),
       "an ensemble of 3- and 4-class models is refused: %s", err);
    if (!plain || !aug || !twice) goto done;
    is_int(trn_tta_stride(plain), 32, "stride is the model's largest (32)");
    is_int(trn_tta_no(plain), NO, "no = nc + 5");

    const float *out;
    int rows_p = 0, rows_a = 0, rows_t = 0;
    is_int(trn_tta_infer(plain, img, H, W, &out, &rows_p, err, sizeof err), 0, "plain infer");
    float *p = malloc((size_t)rows_p * NO * sizeof *p);
    if (!p) goto done;
    memcpy(p, out, (size_t)rows_p * NO * sizeof *p);
    /* the same through a net of our own: the runner's plain path is trn_net_infer */
    struct trn_net *net = NULL;
    const float *ref = NULL;
    int rows_ref = 0;
    struct trn_net_opts no;
    trn_net_opts_default(&no);
    no.train = false;
    ok(trn_net_create(m, 1, H, W, &no, &net, NULL, 0) == 0 &&
           trn_net_infer(net, img, &ref, &rows_ref) == 0 && rows_ref == rows_p &&
           !memcmp(ref, p, (size_t)rows_p * NO * sizeof *p),
       "plain runner == trn_net_infer (%d rows)", rows_p);

    /* augment: branch 1 (clipped) + branch 2 + branch 3 (clipped) */
    const int r1 = 3 * (8 * 12 + 4 * 6 + 2 * 3); /* 96x64: grids 12x8, 6x4, 3x2 = 378 rows */
    int s2h, s2w, s3h, s3w, d0, d1;
    trn_tta_scaled_size(H, W, 0.83, 32, &d0, &d1, &s2h, &s2w);
    trn_tta_scaled_size(H, W, 0.67, 32, &d0, &d1, &s3h, &s3w);
    const int r2 = 3 * ((s2h / 8) * (s2w / 8) + (s2h / 16) * (s2w / 16) + (s2h / 32) * (s2w / 32));
    const int r3 = 3 * ((s3h / 8) * (s3w / 8) + (s3h / 16) * (s3w / 16) + (s3h / 32) * (s3w / 32));
    size_t keep, skip;
    trn_tta_clip_counts(3, (size_t)r1, (size_t)r3, &keep, &skip);
    is_int(trn_tta_infer(aug, img, H, W, &out, &rows_a, err, sizeof err), 0, "augmented infer: %s",
           err);
    is_int(rows_a, (int)keep + r2 + r3 - (int)skip,
           "augmented rows = clipped branch 1 + branch 2 + clipped branch 3 (%d + %d + %d - %zu)",
           (int)keep, r2, r3, skip);
    ok(rows_p == r1 && !memcmp(out, p, keep * NO * sizeof *p),
       "branch 1 is the plain forward, less its last %zu rows", (size_t)r1 - keep);

    /* branch 2 on a symmetric image: the unflipped scaled input gives the same raw rows, so
     * the runner's rows must be those rows descaled and mirrored: x = W - x / 0.83 */
    const size_t n2 = 3 * (size_t)s2h * s2w;
    float *sc = malloc(n2 * sizeof *sc);
    struct trn_net *net2 = NULL;
    const float *raw2 = NULL;
    int rows2 = 0;
    if (sc && trn_tta_scale_img(img, 1, 3, H, W, 0.83, 32, false, sc, n2) == 0 &&
        trn_net_create(m, 1, s2h, s2w, &no, &net2, NULL, 0) == 0 &&
        trn_net_infer(net2, sc, &raw2, &rows2) == 0) {
        int bad_rows = 0;
        double worst = 0;
        for (int i = 0; i < rows2; i++) {
            const float *g = out + ((size_t)keep + (size_t)i) * NO, *q = raw2 + (size_t)i * NO;
            const float want[4] = { (float)W - q[0] / 0.83f, q[1] / 0.83f, q[2] / 0.83f,
                                    q[3] / 0.83f };
            for (int k = 0; k < 4; k++)
                worst = fmax(worst, fabs((double)g[k] - want[k]));
            if (memcmp(g + 4, q + 4, (NO - 4) * sizeof *g)) bad_rows++;
        }
        ok(rows2 == r2 && worst < 1e-3 && !bad_rows,
           "symmetric input: the flipped branch's boxes are the unflipped ones mirrored back "
           "into the input (x = %d - x/0.83; max error %.2g px, %d score rows differ)",
           W, worst, bad_rows);
        /* and they land inside the original image, as the plain forward's do */
        int outside = 0;
        for (int i = 0; i < rows2; i++) {
            const float cx = out[((size_t)keep + (size_t)i) * NO];
            if (cx < -W || cx > 2 * W) outside++;
        }
        ok(!outside, "descaled centres stay near the %dx%d input (%d far off)", W, H, outside);
    } else {
        ok(0, "scaled reference forward");
    }
    trn_net_destroy(net2);
    free(sc);

    /* ensemble of the same model twice: rows double, NMS gives the same detections */
    is_int(trn_tta_infer(twice, img, H, W, &out, &rows_t, err, sizeof err), 0, "ensemble infer");
    ok(rows_t == 2 * rows_p && !memcmp(out, p, (size_t)rows_p * NO * sizeof *p) &&
           !memcmp(out + (size_t)rows_p * NO, p, (size_t)rows_p * NO * sizeof *p),
       "m + m: %d rows, both halves the single model's %d", rows_t, rows_p);
    struct trn_nms *w = NULL;
    struct trn_det *d1s = malloc(TRN_NMS_MAX_DET * sizeof *d1s);
    struct trn_det *d2s = malloc(TRN_NMS_MAX_DET * sizeof *d2s);
    if (trn_nms_create(&w) == 0 && d1s && d2s) {
        const int n1 = nms(w, p, rows_p, NO, d1s);
        const int n2d = nms(w, out, rows_t, NO, d2s);
        ok(n1 > 0 && n1 == n2d && !memcmp(d1s, d2s, (size_t)n1 * sizeof *d1s),
           "after NMS the ensemble m + m keeps exactly the single model's %d detections (%d)", n1,
           n2d);
    }
    trn_nms_destroy(w);
    free(d1s);
    free(d2s);

    /* two different models: model 2's rows follow model 1's */
    struct trn_tta *diff = NULL;
    struct trn_model *pair2[2] = { m, m2 };
    int rows_d = 0;
    ok(trn_tta_create(pair2, 2, 1, &o, &diff, err, sizeof err) == 0 &&
           trn_tta_infer(diff, img, H, W, &out, &rows_d, err, sizeof err) == 0 &&
           rows_d == 2 * rows_p && !memcmp(out, p, (size_t)rows_p * NO * sizeof *p) &&
           memcmp(out + (size_t)rows_p * NO, p, (size_t)rows_p * NO * sizeof *p),
       "m + m2: m's rows first, then m2's (different)");
    trn_tta_destroy(diff);
    trn_net_destroy(net);
    free(p);
done:
    trn_tta_destroy(plain);
    trn_tta_destroy(aug);
    trn_tta_destroy(twice);
    trn_tta_destroy(mixed);
    free(img);
out:
    trn_model_destroy(m);
    trn_model_destroy(m2);
    trn_model_destroy(m4);
}

int main(void)
{
    test_sizes();
    test_scale_pixels();
    test_interpolate();
    test_descale();
    test_clip();
    test_runner();
    return tap_done();
}
