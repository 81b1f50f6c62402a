/*
 * augment: YOLOv5's training augmentations and validation letterbox on the CPU (the reference
 * the GPU path must match), as pure functions.
 *
 * What it reproduces: ultralytics/yolov5 v7.0 utils/dataloaders.py (load_mosaic, __getitem__,
 * the rect batch shapes) and utils/augmentations.py (random_perspective, box_candidates, mixup,
 * augment_hsv, letterbox), as written down in the recipe (docs/recipe.md S5, S6). Pixel
 * operations follow the OpenCV 4.x uint8 code paths ultralytics calls: warpAffine and
 * warpPerspective with INTER_LINEAR (fixed point: 32x32 interpolation table, 15-bit weights,
 * AB_BITS = 10 coordinate rounding), cvtColor BGR<->HSV (8-bit, H in [0, 180), including the
 * AVX2 build's truncating SIMD loop) and resize INTER_LINEAR. tests/trainer/test_augment.c
 * compares with OpenCV 4.6 (Debian, AVX2 machine): every pixel of every case is equal; the
 * contract is +-1 per channel value, as other OpenCV builds differ among themselves by that
 * much. Labels follow numpy's float32/float64 arithmetic and match within 1e-6. The float code
 * assumes no FP contraction (GCC in ISO C mode, or clang without FMA in -march).
 *
 * No randomness inside: every random draw is an explicit argument (struct trn_aug_draws and its
 * parts). The trn_aug_draw_* functions turn uniform numbers from a caller's generator into those
 * draws in ultralytics' draw order, so the sampler's counter-based streams can drive them.
 *
 * Conventions.
 *   - Images are RGB8, HWC, rows of w*3 bytes with no padding (ffr-det-1 pixel_format 0).
 *     ultralytics works on BGR; every operation here gives, on an RGB image, the RGB form of
 *     what ultralytics computes on the BGR image (only HSV cares).
 *   - Label rows are 5 floats. Record and output layout: (class, cx, cy, w, h) normalised to
 *     [0, 1]. Working layout during augmentation: (class, x1, y1, x2, y2) in pixels of the
 *     current image. float32, as ultralytics keeps them (its label arrays are float32).
 *   - Segments (polygons) are optional per image: seg_n[i] points for label i (0 allowed) and the
 *     points packed in label order as (x, y) float pairs, normalised in records and in pixels
 *     in working sets. An image "has segments" when seg_n != NULL.
 *   - Sizes are int pixels (1..32767; OpenCV's fixed-point coordinates are 16-bit).
 *   - Errors are negative errno values: -EINVAL (bad argument), -ENOSPC (an output capacity is
 *     too small; nothing useful was written), -ENOMEM, -ENOTSUP (a GPU plan of a sample whose
 *     pixels it cannot describe). trn_aug_strerror() names them.
 *
 * Thread safety: every function is thread-safe on distinct outputs; const inputs may be shared.
 * A struct trn_aug_ws is used by one thread at a time (one per worker). trn_aug_hsv builds a
 * 540 KiB constant table on first use (pthread_once).
 *
 * Pixels. The pixel work (paste, warp, HSV, flips, mixup, the batch tensor) is done by the kern
 * library's augmentation ops (kern.h "Augmentation pixels"): on the CPU through one process-wide
 * CPU context (trn_aug_cpu_ctx), and for a whole batch on any kern context, a GPU included,
 * through trn_aug_plan_sample + trn_aug_train_batch: the draws and the labels stay on the host,
 * the pixels are computed where the tiles are, with the same bytes.
 */
#ifndef TRN_AUGMENT_H
#define TRN_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Grey of letterbox padding, the mosaic canvas and the warp border (ultralytics' 114). */
#define TRN_AUG_FILL 114

/* Points each polygon is resampled to before the warp (ultralytics' resample_segments n). */
#define TRN_AUG_SEG_POINTS 1000

/* ---------------------------------------------------------------------------------------- */
/* Hyperparameters and draws                                                                */

/*
 * Augmentation hyperparameters: the ultralytics hyp yaml keys of the same names and meaning.
 * Fill with trn_aug_hyp_default() (hyp.scratch-low.yaml values), then override.
 */
struct trn_aug_hyp {
    double hsv_h;       /* hue gain, fraction: H *= 1 + U(-1, 1) * hsv_h; default 0.015 */
    double hsv_s;       /* saturation gain fraction; default 0.7 */
    double hsv_v;       /* value gain fraction; default 0.4 */
    double degrees;     /* rotation range, degrees: U(-degrees, degrees); default 0 */
    double translate;   /* translation range, fraction of output size: U(0.5 +- t); default 0.1 */
    double scale;       /* scale range: U(1 - scale, 1 + scale); default 0.5 */
    double shear;       /* shear range, degrees: U(-shear, shear); default 0 */
    double perspective; /* perspective range, U(-p, p); != 0 switches to warpPerspective;
                           default 0 */
    double flipud;      /* probability of a top-bottom flip; default 0 */
    double fliplr;      /* probability of a left-right flip; default 0.5 */
    double mosaic;      /* probability of a mosaic; default 1.0 */
    double mixup;       /* probability of mixup (mosaic samples only); default 0 */
    double copy_paste;  /* copy_paste's p: the fraction of a mosaic's polygon-bearing labels
                           tried for a mirrored copy (see "copy_paste"); default 0 */
};

/* Fill *hyp with hyp.scratch-low.yaml's augmentation values (above). hyp: out. */
void trn_aug_hyp_default(struct trn_aug_hyp *hyp);

/*
 * Check a hyp: every value finite and >= 0, the probabilities (flipud, fliplr, mosaic, mixup,
 * copy_paste) <= 1. Returns 0 or -EINVAL.
 */
int trn_aug_hyp_validate(const struct trn_aug_hyp *hyp);

/* The draws of one random_perspective call (ultralytics draws them in this order). */
struct trn_aug_persp_draws {
    double persp_x;     /* P[2][0], U(-perspective, perspective) */
    double persp_y;     /* P[2][1], U(-perspective, perspective) */
    double angle;       /* rotation, degrees, U(-degrees, degrees) (counter-clockwise as cv2) */
    double scale;       /* U(1 - scale, 1 + scale) */
    double shear_x;     /* degrees, U(-shear, shear): S[0][1] = tan(shear_x * pi / 180) */
    double shear_y;     /* degrees: S[1][0] = tan(shear_y * pi / 180) */
    double translate_x; /* fraction of the output width, U(0.5 - translate, 0.5 + translate) */
    double translate_y; /* fraction of the output height */
    bool perspective;   /* hyp.perspective != 0: warpPerspective and a homogeneous divide
                           (ultralytics tests the hyp, not the draw) */
};

/* The draws of one mosaic: its centre, then its random_perspective. */
struct trn_aug_mosaic_draws {
    int xc; /* centre x on the 2s x 2s canvas: int(U(s/2, 3s/2)) (drawn after yc) */
    int yc; /* centre y: int(U(s/2, 3s/2)) (drawn first) */
    struct trn_aug_persp_draws persp; /* the warp that follows */
};

/* HSV draws: ultralytics skips the whole conversion (no draws either) when all gains are 0. */
struct trn_aug_hsv_draws {
    bool apply;     /* hyp.hsv_h, hsv_s or hsv_v != 0 */
    double gain[3]; /* H, S, V multipliers r = 1 + U(-1, 1) * (hsv_h, hsv_s, hsv_v) */
};

/*
 * Everything random about one training sample apart from which records it uses (the
 * sampler's plan: struct trn_plan). The loader copies the decisions from the plan and fills
 * the rest with the trn_aug_draw_* functions.
 */
struct trn_aug_draws {
    bool mosaic;                        /* mosaic of 4 tiles, else letterbox of one image */
    struct trn_aug_mosaic_draws mos;    /* mosaic: centre + warp; non-mosaic: only mos.persp */
    bool mixup;                         /* blend with a second mosaic (needs mosaic) */
    struct trn_aug_mosaic_draws mixmos; /* that second mosaic's centre + warp */
    double mixup_ratio;                 /* r ~ Beta(32, 32): weight of the first image */
    struct trn_aug_hsv_draws hsv;       /* colour gains */
    bool flipud;                        /* mirror top-bottom (after HSV) */
    bool fliplr;                        /* mirror left-right (after HSV) */
    uint64_t copy_paste_key[2];         /* hyp.copy_paste > 0: the keys of random.sample's
                                           choice on the mosaic and the mixup mosaic
                                           (trn_aug_copy_paste_select) */
};

/*
 * A source of uniform doubles in [0, 1), e.g. a wrapper of trn_rng_uniform. Each call is one
 * draw; ctx is the caller's. Must not fail.
 */
typedef double (*trn_aug_uniform_fn)(void *ctx);

/*
 * Draw one random_perspective's parameters in ultralytics' order: P(x, y), angle, scale,
 * shear (x, y), translate (x, y) — 8 uniforms, each as random.uniform(lo, hi) = lo + (hi -
 * lo) * u. hyp: in. out: out. Thread-safe (as far as `uniform` is).
 */
void trn_aug_draw_perspective(const struct trn_aug_hyp *hyp, trn_aug_uniform_fn uniform, void *ctx,
                              struct trn_aug_persp_draws *out);

/*
 * Draw one mosaic: yc then xc as int(U(s/2, 2s - s/2)) (ultralytics' mosaic_border -s/2),
 * then trn_aug_draw_perspective. img_size: s, the output side (640). out: out.
 */
void trn_aug_draw_mosaic(const struct trn_aug_hyp *hyp, int img_size, trn_aug_uniform_fn uniform,
                         void *ctx, struct trn_aug_mosaic_draws *out);

/*
 * Draw the HSV gains: 3 uniforms (H, S, V) when any hyp gain is non-zero, none otherwise
 * (out->apply = false, gains 1). out: out.
 */
void trn_aug_draw_hsv(const struct trn_aug_hyp *hyp, trn_aug_uniform_fn uniform, void *ctx,
                      struct trn_aug_hsv_draws *out);

/*
 * A Beta(a, b) variate (a, b > 0) from uniforms: X / (X + Y) with Gamma variates by Marsaglia
 * and Tsang (normals by Box-Muller, shape < 1 boosted). Same distribution as numpy's, not the
 * same numbers. Uses a variable number of draws. Returns NAN when a or b is not > 0.
 */
double trn_aug_draw_beta(double a, double b, trn_aug_uniform_fn uniform, void *ctx);

/*
 * Fill a whole struct trn_aug_draws from one uniform source in ultralytics' order, for tests
 * and tools (the trainer uses the sampler's plan and streams instead): mosaic decision
 * (u < hyp.mosaic), the mosaic (centre, warp) or the non-mosaic warp, mixup decision (mosaic
 * only), the mixup mosaic and its ratio (Beta(32, 32)), HSV gains, flipud (u < p), fliplr.
 * Partner choice and shuffles are not drawn here. img_size: s. out: out.
 */
void trn_aug_draws_fill(const struct trn_aug_hyp *hyp, int img_size, trn_aug_uniform_fn uniform,
                        void *ctx, struct trn_aug_draws *out);

/* ---------------------------------------------------------------------------------------- */
/* Images and labels                                                                        */

/*
 * One decoded record as the augmentations read it (all borrowed, read-only). labels rows are
 * (class, cx, cy, w, h) normalised to the image, as in ffr-det-1. seg_n: NULL when the record
 * has no segments, else n_labels counts; seg_xy: sum(seg_n) normalised (x, y) pairs.
 */
struct trn_aug_tile {
    const uint8_t *pixels; /* h * w * 3 bytes, RGB8 HWC */
    int w, h;              /* pixels, >= 1 */
    const float *labels;   /* [n_labels][5] */
    int n_labels;          /* >= 0 */
    const uint32_t *seg_n; /* [n_labels] points per label, or NULL */
    const float *seg_xy;   /* [sum seg_n][2] */
};

/*
 * A working label set: rows (class, x1, y1, x2, y2) in pixels, with optional segments in
 * pixels. The caller owns every buffer; functions that produce a set check the capacities.
 */
struct trn_aug_boxes {
    float *rows;       /* [cap_rows][5] */
    uint32_t *seg_n;   /* [cap_rows] points per row; NULL: no segments */
    float *seg_xy;     /* [cap_points][2] pixel (x, y) pairs, packed in row order */
    int n;             /* rows in use */
    int cap_rows;      /* capacity of rows (and seg_n) in rows */
    size_t n_points;   /* points in use (sum of seg_n[0..n)) */
    size_t cap_points; /* capacity of seg_xy in points */
};

/* ---------------------------------------------------------------------------------------- */
/* Mosaic                                                                                   */

/*
 * load_mosaic's placement: paste 4 tiles onto a 2s x 2s canvas filled with 114, with tile 0's
 * bottom-right corner at (xc, yc), tile 1's bottom-left, tile 2's top-right, tile 3's top-left,
 * each cropped to the canvas. Labels (and segments) become canvas pixels (xywhn2xyxy with the
 * tile's size and offset) and are clipped to [0, 2s] (float32, as ultralytics). Rows keep the
 * tile order; out->seg_n is set to NULL when no tile has segments, else tiles without segments
 * contribute rows with 0 points.
 *
 * s: output side (img_size), 1..16383. xc, yc: centre, in [0, 2s]. tiles: 4, in placement
 * order. canvas: out, 2s * 2s * 3 bytes. out: rows/seg buffers and capacities in; n, n_points
 * and seg_n (kept or set to NULL) out; out->seg_n must point to a buffer if any tile has
 * segments. Returns the number of rows, -EINVAL, or -ENOSPC (rows or points do not fit;
 * canvas still written).
 */
int trn_aug_mosaic4(int s, int xc, int yc, const struct trn_aug_tile tiles[4], uint8_t *canvas,
                    struct trn_aug_boxes *out);

/* ---------------------------------------------------------------------------------------- */
/* copy_paste                                                                               */

/*
 * ultralytics' copy_paste (augmentations.py v7.0), which load_mosaic runs on the 2s x 2s canvas
 * between the placement and random_perspective when hyp.copy_paste > 0: k = round(p * n) of the
 * n polygon-bearing labels are drawn (random.sample); in that order, each label's box mirrored
 * left-right (w - x2, y1, w - x1, y2) is appended with its mirrored polygon when its
 * intersection over area (bbox_ioa, float32, eps 1e-7) with every label so far, the appended
 * ones included, is below 0.30; the accepted labels' own polygons (truncated to int) are filled
 * into a mask (cv2.drawContours FILLED), and the canvas takes its mirror image wherever the
 * mirrored mask is set. trn_aug_train_sample does this for every mosaic (and mixup mosaic);
 * rows then need room for twice the tiles' labels (trn_aug_train_sample's cap_rows).
 * A GPU plan (trn_aug_plan_sample) of a sample that pastes is -ENOTSUP: the loader builds those
 * on the host. Which labels are drawn comes from the draws' key, so the numbers are not Python's.
 */

/*
 * cv2.fillPoly (what drawContours with FILLED calls) of one closed polygon of n integer
 * vertices (x, y pairs), shift 0, LINE_8, into the w x h byte mask: the outline as 8-connected
 * lines, then the inside by OpenCV's scanline rules, clipped to the mask; covered bytes become
 * value. Returns 0, -EINVAL or -ENOMEM.
 */
int trn_aug_fill_poly(uint8_t *mask, int w, int h, const int32_t *xy, int n, uint8_t value);

/*
 * random.sample(range(n), k=round(p * n)), k rounded half to even: sel (n entries) gets a
 * permutation of 0..n-1 whose first k entries are the draw, in order, from key. Returns k or
 * -EINVAL.
 */
int trn_aug_copy_paste_select(uint64_t key, int n, double p, int *sel);

/*
 * copy_paste's labels on a w x h canvas: b holds the canvas labels (pixels) and their polygons
 * (b->seg_n not NULL); sel: k row indices of rows with points, in draw order. Accepted rows are
 * appended to b (rows and points; -ENOSPC past its capacities) and their polygons filled into
 * mask (w x h bytes, zeroed first). Returns the rows appended, -EINVAL, -ENOSPC or -ENOMEM.
 */
int trn_aug_copy_paste_labels(struct trn_aug_boxes *b, int w, int h, const int *sel, int k,
                              uint8_t *mask);

/* copy_paste's pixels: canvas (w x h RGB8, in place) takes its left-right mirror image wherever
 * the mirrored mask is set (im[i] = flip(im)[i], i = flip(mask)). */
void trn_aug_copy_paste_pixels(uint8_t *canvas, int w, int h, const uint8_t *mask);

/* ---------------------------------------------------------------------------------------- */
/* random_perspective                                                                       */

/*
 * The 3x3 matrix M = T * S * R * P * C of random_perspective (row-major, maps source pixel
 * (x, y, 1) to output): C moves the source centre (src_w/2, src_h/2) to the origin, P has the
 * perspective terms, R = cv2.getRotationMatrix2D((0, 0), angle, scale), S the shears, T moves
 * to (translate_x * dst_w, translate_y * dst_h). M: out.
 */
void trn_aug_perspective_matrix(int src_w, int src_h, int dst_w, int dst_h,
                                const struct trn_aug_persp_draws *d, double M[9]);

/*
 * cv2.warpAffine(src, M, (dst_w, dst_h), flags=INTER_LINEAR, borderMode=BORDER_CONSTANT,
 * borderValue=(v, v, v)): M (2x3, row-major) maps source to destination, as OpenCV without
 * WARP_INVERSE_MAP. Bit-exact to OpenCV 4.x's fixed-point path for 3-channel uint8 (the test
 * measures it). src: src_h * src_w * 3. dst: out, dst_h * dst_w * 3, must not overlap src.
 * Returns 0 or -EINVAL (sizes out of range, NULL).
 */
int trn_aug_warp_affine(const uint8_t *src, int src_w, int src_h, const double M[6], uint8_t *dst,
                        int dst_w, int dst_h, uint8_t border_value);

/*
 * cv2.warpPerspective with the same flags as trn_aug_warp_affine; M is 3x3 row-major.
 * Returns 0 or -EINVAL.
 */
int trn_aug_warp_perspective(const uint8_t *src, int src_w, int src_h, const double M[9],
                             uint8_t *dst, int dst_w, int dst_h, uint8_t border_value);

/*
 * ultralytics' box_candidates for one row: keep when w > 2, h > 2 (pixels), area ratio
 * (w*h) / (w0*s * h0*s) > area_thr and aspect ratio < 100, where before = (x1, y1, x2, y2)
 * before the warp (float32, scaled by `scale` in float32 as numpy does) and after = the box
 * after it. area_thr: 0.10 without segments, 0.01 with. Returns true to keep.
 */
bool trn_aug_box_candidate(const float before[4], double scale, const double after[4],
                           double area_thr);

/*
 * random_perspective: warp src (src_w x src_h) into dst (dst_w x dst_h; ultralytics' border
 * b gives dst = src + 2b: the mosaic uses b = -s/2) with M from trn_aug_perspective_matrix, and
 * transform the labels in place: with segments (boxes->seg_n != NULL and some point non-zero,
 * as ultralytics' `any(x.any())`), each polygon is closed, resampled to TRN_AUG_SEG_POINTS
 * points, transformed, and boxed by its points inside [0, dst_w] x [0, dst_h] (rows without
 * points fall back to their 4 corners); without, the 4 corners are transformed, boxed and
 * clipped. Rows failing box_candidates are removed (order kept). Segments are consumed: on
 * return boxes->seg_n is NULL and n_points 0 (ultralytics returns no segments either).
 *
 * src: src_h * src_w * 3. dst: out, dst_h * dst_w * 3, not overlapping src. d: in.
 * boxes: in/out. Returns the rows kept, or -EINVAL.
 */
int trn_aug_random_perspective(const uint8_t *src, int src_w, int src_h, uint8_t *dst, int dst_w,
                               int dst_h, const struct trn_aug_persp_draws *d,
                               struct trn_aug_boxes *boxes);

/* ---------------------------------------------------------------------------------------- */
/* Mixup, HSV, flips, output labels                                                         */

/*
 * mixup pixels: img[i] = (uint8)(img[i] * r + img2[i] * (1 - r)) in double, truncated (numpy's
 * astype(uint8)). Labels are concatenated by the caller (first image's rows first).
 * img: in/out, n bytes. img2: n bytes. r: mixup_ratio in [0, 1].
 */
void trn_aug_mixup(uint8_t *img, const uint8_t *img2, size_t n, double r);

/*
 * augment_hsv in place: RGB -> HSV (OpenCV 8-bit: H in [0, 180), S and V in [0, 255], integer
 * tables), LUTs H' = (uint8)((H * gain[0]) mod 180), S' = (uint8)clip(S * gain[1], 0, 255),
 * V' likewise, HSV -> RGB (OpenCV 8-bit, float). OpenCV's HSV -> RGB is not one function of
 * the pixel: its SIMD loop (blocks of 32 pixels of a row on AVX2 machines) truncates where the
 * scalar loop for the rest of the row rounds, which is why the row width is needed. Rows of a
 * multiple of 32 pixels (640) are all SIMD. Does nothing when !d->apply.
 * rgb: in/out, h rows of w pixels (w * 3 bytes each).
 */
void trn_aug_hsv(uint8_t *rgb, int w, int h, const struct trn_aug_hsv_draws *d);

/*
 * Mirror left-right: the image (w x h) and normalised rows (cx = 1 - cx). img may be NULL
 * (labels only); rows may be NULL when n == 0.
 */
void trn_aug_flip_lr(uint8_t *img, int w, int h, float *rows, int n);

/* Mirror top-bottom: the image and normalised rows (cy = 1 - cy). As trn_aug_flip_lr. */
void trn_aug_flip_ud(uint8_t *img, int w, int h, float *rows, int n);

/*
 * xyxy2xywhn(clip=True, eps): in place, pixel (class, x1, y1, x2, y2) rows of a w x h image
 * become (class, cx, cy, w, h) normalised, after clipping x to [0, w - eps] and y to
 * [0, h - eps]. ultralytics uses eps = 1e-3. float32 arithmetic as numpy on float32 arrays.
 */
void trn_aug_xyxy_to_xywhn(float *rows, int n, int w, int h, double eps);

/* ---------------------------------------------------------------------------------------- */
/* Letterbox, resize and rect batch shapes                                                  */

/*
 * cv2.resize(src, (dst_w, dst_h), interpolation=INTER_LINEAR) for RGB8 (OpenCV 4.x 8-bit
 * fixed-point path). dst: out, not overlapping src. Returns 0 or -EINVAL.
 */
int trn_aug_resize_linear(const uint8_t *src, int src_w, int src_h, uint8_t *dst, int dst_w,
                          int dst_h);

/* letterbox options (ultralytics' keyword arguments). */
struct trn_aug_letterbox_opts {
    bool auto_pad;   /* `auto`: pad only to the next multiple of stride; default false */
    bool scale_fill; /* `scaleFill`: stretch to the shape, no padding; default false */
    bool scaleup;    /* allow r > 1 (training: true; validation: false); default true */
    int stride;      /* for auto_pad; default 32 */
};

/* The defaults above. o: out. */
void trn_aug_letterbox_opts_default(struct trn_aug_letterbox_opts *o);

/* Where letterbox puts the image. */
struct trn_aug_letterbox_plan {
    int out_w, out_h;        /* padded output size, pixels */
    int new_w, new_h;        /* resized image size: round(w * r), round(h * r) (half to even) */
    int left, top;           /* padding before the image: round(dw - 0.1), round(dh - 0.1) */
    double ratio_w, ratio_h; /* scale applied to labels (r, r; scale_fill: per axis) */
    double pad_w, pad_h;     /* dw, dh: half the padding, as floats; labels shift by these */
};

/*
 * Plan letterbox(im (w x h), new_shape = (new_h, new_w), opts). Returns 0 or -EINVAL (sizes
 * < 1 or > 32767, stride < 1). plan: out.
 */
int trn_aug_letterbox_plan(int w, int h, int new_h, int new_w,
                           const struct trn_aug_letterbox_opts *opts,
                           struct trn_aug_letterbox_plan *plan);

/*
 * Apply a plan: resize (INTER_LINEAR, skipped when the size does not change) and pad with 114.
 * src: h * w * 3 (the w, h the plan was made for). dst: out, plan->out_h * out_w * 3 bytes
 * (dst_cap checked), not overlapping src. Returns 0, -EINVAL or -ENOSPC.
 */
int trn_aug_letterbox(const uint8_t *src, int w, int h, const struct trn_aug_letterbox_plan *plan,
                      uint8_t *dst, size_t dst_cap);

/*
 * np.argsort(v) of a float64 array as numpy 1.24 orders it (its default introsort, ties in that
 * algorithm's order, not index order; with heapsort, kind='heapsort'): n indices into order.
 * Returns 0 or -EINVAL. The version dependence is documented at the implementation (augment.c).
 */
int trn_aug_argsort_np(const double *v, int64_t n, int64_t *order, bool heapsort);

/*
 * Rect validation batch shapes (S6): sort images by aspect ratio h/w exactly as val.py's
 * ar.argsort() does (trn_aug_argsort_np: tie order matters, since it decides which images share
 * a batch and so which letterbox shape each gets), cut the order into batches of `batch`, and
 * give batch b the shape
 * ceil(shape_rel * img_size / stride + pad) * stride with shape_rel = (max_ar, 1) if every ar <
 * 1, (1, 1/min_ar) if every ar > 1, else (1, 1), as (h, w).
 *
 * hw: n (h, w) pairs (original sizes; ultralytics uses the source image sizes), each >= 1.
 * order: out, n dataset indices in sorted order (image i of batch b is order[b*batch + i]).
 * shapes: out, nb = ceil(n / batch) (h, w) pairs. Returns nb, -EINVAL or -ENOMEM.
 */
int trn_aug_rect_shapes(const int32_t *hw, int64_t n, int batch, int img_size, int stride,
                        double pad, int64_t *order, int32_t *shapes);

/* ---------------------------------------------------------------------------------------- */
/* Whole samples                                                                            */

/* Per-worker scratch memory (canvases, label and point buffers). Opaque. */
struct trn_aug_ws;

/*
 * Bytes a workspace holds for img_size s with room for max_labels rows and max_points polygon
 * points (across the up to 8 tiles of one sample), for memory planning. 0 on overflow.
 */
size_t trn_aug_ws_bytes(int img_size, int max_labels, size_t max_points);

/*
 * Create a workspace for img_size s (even, 2..16382: the mosaic border is -s/2 on each side)
 * with initial room for max_labels rows and max_points points (rows are only per-row point
 * counts here: the label rows themselves live in the caller's output). It grows (realloc) when
 * a sample needs more, so after warm-up there is no allocation per image; it holds a
 * 2s x 2s x 3 canvas and an s x s x 3 image (about 6 MiB at 640). Returns 0, -EINVAL or -ENOMEM.
 * out: out (NULL on error). Destroy with trn_aug_ws_destroy.
 */
int trn_aug_ws_create(int img_size, int max_labels, size_t max_points, struct trn_aug_ws **out);

/* Free a workspace; NULL is a no-op. */
void trn_aug_ws_destroy(struct trn_aug_ws *ws);

/*
 * One training sample, as ultralytics' __getitem__ with augment=True: mosaic (4 tiles) and
 * random_perspective, or (no mosaic) letterbox(auto=False, scaleup=True) to s x s and
 * random_perspective with border 0 (boxes only, as ultralytics); then mixup with a second
 * mosaic; labels to normalised xywh (clip eps 1e-3); HSV; flipud; fliplr. With hyp.copy_paste > 0
 * each mosaic's canvas goes through copy_paste before its warp.
 *
 * ws: a workspace for this s. hyp: checked with trn_aug_hyp_validate. d: the draws.
 * tiles: 1 (no mosaic), 4 (mosaic, placement order) or 8 (mosaic + mixup: 4 then the mixup
 * mosaic's 4); n_tiles must match d. dst: out, s * s * 3 RGB8. rows: out, [cap_rows][5]
 * (class, cx, cy, w, h) normalised. Returns the number of rows (<= the sum of the tiles'
 * labels, twice that with copy_paste), or -EINVAL, -ENOSPC (cap_rows < sum of the tiles'
 * n_labels, or twice that when hyp.copy_paste > 0: rows is also the working buffer), -ENOMEM
 * (workspace growth). On error dst and
 * rows are unspecified. Tiles are borrowed for the call only. Polygons of a rectangle cropped
 * off the mosaic canvas are clipped point by point onto its edge, exactly as ultralytics does;
 * a rotation can then give them a box where no pixel of the object is (measured in
 * tests/trainer/test_augment_labels.c).
 */
int trn_aug_train_sample(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                         const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                         int n_tiles, uint8_t *dst, float *rows, int cap_rows);

/*
 * trn_aug_train_sample with an oh x ow output (rect training: train.py --rect, where the
 * dataset is not mosaicked): the tile letterboxed (auto=False, scaleup=True) to its batch's
 * shape and random_perspective with border 0 on that shape, then HSV and flips, as __getitem__
 * does for a rect batch. A mosaic sample needs oh = ow = s. dst: oh * ow * 3. Returns as
 * trn_aug_train_sample, and -EINVAL for a shape over s or a mosaic of another shape.
 */
int trn_aug_train_sample_shape(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                               const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                               int n_tiles, int oh, int ow, uint8_t *dst, float *rows,
                               int cap_rows);

/*
 * trn_aug_train_sample_shape with the pixels written as the loader's batch wants them: 3 planes
 * (R, G, B) of oh * ow elements, uint8 (KERN_AUG_U8) or float / 255 (KERN_AUG_F32), the same
 * bytes as trn_aug_train_sample_shape followed by that layout. One fused pass over the output
 * (kern_ops_cpu()->aug_sample: the tiles are sampled in place, no canvas is built unless copy_paste
 * draws on it), on the calling thread, SIMD where the CPU has it. Returns as
 * trn_aug_train_sample_shape.
 */
int trn_aug_train_sample_planar(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                                const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                                int n_tiles, int oh, int ow, int dtype, void *dst, float *rows,
                                int cap_rows);

/*
 * One validation sample, as __getitem__ with augment=False: letterbox(auto=False,
 * scaleup=false) to (shape_h, shape_w) (the rect batch shape, or s x s), labels scaled and
 * shifted by the plan and converted to normalised xywh (clip eps 1e-3). No workspace needed.
 * dst: out, shape_h * shape_w * 3 (dst_cap checked). rows: out, [cap_rows][5]. plan: out,
 * may be NULL (needed to map predictions back). Returns tile->n_labels, -EINVAL or -ENOSPC.
 */
int trn_aug_val_sample(const struct trn_aug_tile *tile, int shape_h, int shape_w, uint8_t *dst,
                       size_t dst_cap, float *rows, int cap_rows,
                       struct trn_aug_letterbox_plan *plan);

/* ---------------------------------------------------------------------------------------- */
/* Pixels on a kern context (GPU batches)                                                   */

/*
 * The CPU kern context that the functions above run their pixel ops on, created on first use
 * (pthread_once) and kept for the process. The kern augmentation ops (except the batch op) may
 * share it between threads (kern.h). NULL only if it could not be created (out of memory): the
 * int functions then return -ENOMEM, and trn_aug_hsv, trn_aug_mixup and the flips leave the
 * image unchanged.
 */
struct kern_ctx *trn_aug_cpu_ctx(void);

/*
 * Plan one training sample without touching its pixels: the labels exactly as
 * trn_aug_train_sample computes them (rows, return value, errors), and *plan, the pixel
 * descriptor that kern_*_aug_batch turns into the same image. Tile geometry and labels are read
 * from `tiles`; the pixel pointers put into the plan are pixels[k] (the tiles' copies in a kern
 * context's memory, e.g. device memory), or tiles[k].pixels when pixels is NULL.
 * A non-mosaic sample whose letterbox would resize (the tile's long side is not s) has no plan:
 * -ENOTSUP (the loader's records are packed at the training size; resize them on the host).
 * ws, hyp, d, tiles, n_tiles, rows, cap_rows: as trn_aug_train_sample. plan: out.
 * Returns the number of rows or the errors of trn_aug_train_sample, or -ENOTSUP.
 */
int trn_aug_plan_sample(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                        const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                        int n_tiles, const uint8_t *const *pixels, struct kern_aug_sample *plan,
                        float *rows, int cap_rows);

/* One sample of a batch for trn_aug_train_batch. */
struct trn_aug_batch_item {
    const struct trn_aug_draws *d;    /* the sample's draws */
    const struct trn_aug_tile *tiles; /* n_tiles tiles (geometry, labels; host memory) */
    int n_tiles;                      /* 1, 4 or 8, as d says */
    const uint8_t *const *pixels;     /* n_tiles pixel pointers in ctx's memory, or NULL: the
                                         tiles' own (CPU contexts) */
    float *rows;                      /* out: [cap_rows][5] normalised (class, cx, cy, w, h) */
    int cap_rows;                     /* capacity of rows */
    int n_rows;                       /* out: rows written */
};

/*
 * A whole training batch on a kern context: every item is planned on the host
 * (trn_aug_plan_sample: labels into item->rows, n_rows), then one K->aug_batch call writes the
 * n images into dst, (n, 3, s, s) NCHW in ctx's memory, uint8 or float / 255 (dtype
 * KERN_AUG_U8 / KERN_AUG_F32: the loader's TRN_PIXELS_U8 / _F32). On a CPU context the bytes
 * equal trn_aug_train_sample's images stored as the loader stores them; on CUDA they are the
 * same (tests/kernels/test_cuda_parity_augment.c), enqueued on ctx's stream (the tiles must
 * stay valid until it has run; the host arrays may be reused on return).
 * ctx, K: a context and the op table of its backend (kern_ops_ref() / kern_ops_cuda()).
 * ws: the host workspace for labels (its s is the output side). plans: n host descriptors of
 * scratch (caller-owned, so no allocation per batch). Returns 0, the first planning error
 * (items before it are planned, nothing written), -EINVAL (bad arguments, K of another backend)
 * or the kern op's error.
 */
int trn_aug_train_batch(struct kern_ctx *ctx, const struct kern_ops *K, struct trn_aug_ws *ws,
                        const struct trn_aug_hyp *hyp, struct trn_aug_batch_item *items, int n,
                        struct kern_aug_sample *plans, int dtype, void *dst);

/* A static string naming rc (0, or a negative errno value from this module). */
const char *trn_aug_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif /* TRN_AUGMENT_H */
