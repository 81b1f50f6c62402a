/*
 * kern_augment.h: augmentation pixels: mosaic paste, warp, HSV, flips, mixup, the batch tensor.
 *
 * Part of kern.h, which includes it: include kern.h, not this file. The first part declares
 * the family's descriptors and helpers. The op rows at the end, KERN_OP(name, (parameters)),
 * are expanded by whoever defines KERN_OP: kern.h makes them the kern_ref_* prototypes and
 * struct kern_ops members, kern_cuda.h the kern_cuda_* prototypes, each backend its table
 * (kern_ops.def lists the families in table order). Each row's comment is its contract.
 */
#ifndef KERN_H
#error "include kern.h, not kern_augment.h"
#endif

#ifndef KERN_AUGMENT_H
#define KERN_AUGMENT_H

/* ---------------------------------------------------------------------------------------- */
/* Augmentation pixels: mosaic paste, warp, HSV, flips, mixup, the batch tensor (uint8)     */

/*
 * The pixel work of YOLOv5's training augmentation (trainer/data/augment.h keeps the draws and the
 * labels), so that it runs on either backend and the GPU builds batches in device memory.
 *
 * IMAGES. RGB8, HWC, h rows of w * 3 bytes with no padding, sizes 1..32767 (OpenCV's
 * fixed-point coordinates are 16-bit). Pixel pointers are the backend's memory (device memory
 * for CUDA); descriptors (struct kern_aug_*), matrices and LUTs are host memory, read during
 * the call only. The arithmetic is OpenCV 4.x's uint8 code paths as trainer/data/augment.h
 * documents them (warpAffine / warpPerspective INTER_LINEAR fixed point, cvtColor HSV 8-bit,
 * numpy's truncating casts); the CUDA twins use only integer and correctly rounded IEEE
 * operations in the same order (no contraction), so they give the same bytes.
 * THREADS. Unlike the other ops, all but kern_ref_aug_batch use nothing of a CPU context but its
 * backend (no workspace, no worker threads): one CPU context may serve them from any number of
 * threads at once. Errors: -EINVAL (NULL pointers, sizes out of range, regions outside their
 * images), -KERN_EBACKEND; the CUDA twins also -EIO / -ENOMEM as kern_cuda.h says.
 */
#define KERN_AUG_FILL      114 /* grey of the mosaic canvas and of the warp border (ultralytics) */
#define KERN_AUG_MAX_PASTE 4   /* regions of one canvas: the 4 tiles of a mosaic */

/*
 * Element type and layout of the batch tensor (the trainer's TRN_PIXELS_*):
 *   - KERN_AUG_U8, KERN_AUG_F32: (n, 3, h, w) NCHW, uint8 or float32 value / 255;
 *   - KERN_AUG_BF16_S2D_NHWC, _NCHW (aug_batch only): the stem's 2x2 space-to-depth of the
 *     float32 tensor (kern_tensor.h "The stem as space-to-depth", KERN_AUG_S2D_C channels, the
 *     last 4 zero) in bf16 rounded to nearest even, (n, h/2, w/2, 16) or (n, 16, h/2, w/2):
 *     the bits of cast_f32_lowp_s2d over the float32 tensor, which a bf16 executor's stem reads
 *     as it is, so that a step has no input cast. h and w even.
 */
enum { KERN_AUG_U8 = 0, KERN_AUG_F32 = 1, KERN_AUG_BF16_S2D_NHWC = 2, KERN_AUG_BF16_S2D_NCHW = 3 };
#define KERN_AUG_S2D_C 16 /* channels of the space-to-depth tensor: 12 of RGB, 4 of padding */

/* Bytes of one h x w image of the batch tensor in dtype; 0 for an unknown dtype, a size out of
 * 1..32767, or an odd side in a space-to-depth dtype. Host only, any thread. */
KERN_API size_t kern_aug_image_bytes(int dtype, int h, int w);

/* Channel ch (0..2) of pixel (y, x) of the h x w image at img (host memory) in dtype, as the
 * uint8 the augmentation made: the byte itself, or round(v 255) clamped to 0..255 of the float32
 * or bf16 element (exact: a bf16 keeps value / 255 to 8 bits). Arguments unchecked. Host only,
 * any thread. */
KERN_API uint8_t kern_aug_pixel(const void *img, int dtype, int h, int w, int ch, int y, int x);

/* One rectangle copied from a tile onto a canvas. */
struct kern_aug_paste {
    const uint8_t *src; /* tile pixels, src_h rows of src_w * 3 bytes (backend memory) */
    int src_w, src_h;   /* tile size, 1..32767 */
    int src_x, src_y;   /* top-left of the region in the tile, >= 0 */
    int dst_x, dst_y;   /* top-left of the region on the canvas, >= 0 */
    int w, h;           /* region size in pixels, >= 0 (0: nothing); inside tile and canvas */
};

/*
 * A canvas filled with KERN_AUG_FILL and regions pasted in order (a later region wins where
 * they overlap; the mosaic's never do). The fused batch op samples it without materialising it.
 */
struct kern_aug_canvas {
    int w, h;                                        /* canvas size, 1..32767 */
    int n_paste;                                     /* regions in use, 0..KERN_AUG_MAX_PASTE */
    struct kern_aug_paste paste[KERN_AUG_MAX_PASTE]; /* [0, n_paste) in paste order */
};

/* Returns 0 when c is a valid canvas (sizes, counts, every region inside its tile and the
 * canvas, src non-NULL for non-empty regions), else -EINVAL. Host only, any thread. */
KERN_API int kern_aug_canvas_check(const struct kern_aug_canvas *c);

/*
 * The inverse (destination -> source) of a forward warp matrix M (row-major 3x3, source pixel
 * to destination), as cv::warpAffine (perspective 0: 1 / (m0 m4 - m1 m3) and the explicit 2x3
 * formulas; only M[0..6) read; inv[6..9) = 0, 0, 1) and cv::warpPerspective (cv::invert
 * DECOMP_LU: cofactors over a double determinant; a singular M gives zeros) compute it before
 * sampling. inv: out. Host only, any thread.
 */
KERN_API void kern_aug_warp_invert(const double M[9], int perspective, double inv[9]);

/* augment_hsv's per-image lookup tables, applied to OpenCV's 8-bit H, S and V. */
struct kern_aug_hsv_lut {
    uint8_t h[256]; /* H (0..179) -> (uint8)((H * gain_h) mod 180) */
    uint8_t s[256]; /* S -> (uint8)clip(S * gain_s, 0, 255) */
    uint8_t v[256]; /* V -> (uint8)clip(V * gain_v, 0, 255) */
};

/* Fill *lut from the gains (H, S, V multipliers 1 + U(-1, 1) hsv_*) as ultralytics' augment_hsv
 * (numpy float64, truncating casts). lut: out. Host only, any thread. */
KERN_API void kern_aug_hsv_lut_init(struct kern_aug_hsv_lut *lut, const double gain[3]);

/*
 * Everything about the pixels of one training sample (s x s), prepared on the host from the
 * random draws (the trainer's trn_aug_plan_sample): warp canvas[0] by inv[0]; with mixup also
 * canvas[1] by inv[1] and blend (first image weight mixup_ratio); HSV; flips. The CUDA twin takes
 * the descriptors as kernel parameters (16 per launch; CUDA 12.1+ driver for their 21 KB).
 */
struct kern_aug_sample {
    struct kern_aug_canvas canvas[2]; /* source canvas of each warp; [1] read only with mixup */
    double inv[2][9];                 /* inverse warp matrices (kern_aug_warp_invert) */
    int perspective[2];               /* 1: warpPerspective, 0: warpAffine (inv 2x3) */
    int mixup;                        /* 1: blend with the second warp */
    double mixup_ratio;               /* weight of the first image, [0, 1] */
    int hsv;                          /* 1: apply lut */
    struct kern_aug_hsv_lut lut;      /* HSV tables when hsv */
    int flip_lr, flip_ud;             /* 1: mirror left-right / top-bottom (after HSV) */
};

/* Returns 0 when smp is a valid sample for output side s, else -EINVAL. Host only. */
KERN_API int kern_aug_sample_check(const struct kern_aug_sample *smp, int s);

/* SIMD levels of kern_cpu.h's aug_sample and kern_ref_aug_batch; every level gives the same bytes.
 */
enum { KERN_AUG_SIMD_SCALAR = 0, KERN_AUG_SIMD_AVX2 = 1, KERN_AUG_SIMD_AVX512 = 2 };

/* The level in use: the highest the CPU has, at most max. max >= 0 also sets that cap for the
 * process (tests force each level; default: no cap); max < 0 only asks. Any thread. */
KERN_API int kern_aug_simd(int max);

#endif /* KERN_AUGMENT_H */

/* The rows, laid out by hand: clang-format would read them as one statement. */
/* clang-format off */
#ifdef KERN_OP

/* --- Augmentation pixels --- */

/*
 * canvas (c->h rows of c->w * 3 bytes) = KERN_AUG_FILL, then every region of c copied on.
 * The regions' tiles must not overlap the canvas.
 */
KERN_OP(aug_paste, (struct kern_ctx *ctx, uint8_t *KERN_RESTRICT canvas,
                    const struct kern_aug_canvas *c))

/*
 * dst (dst_w x dst_h) = src (src_w x src_h) sampled at inv (from kern_aug_warp_invert) with
 * INTER_LINEAR and BORDER_CONSTANT `border`, as cv::warpAffine (perspective 0, inv 2x3) or
 * cv::warpPerspective (inv 3x3) with WARP_INVERSE_MAP: affine source coordinates in fixed
 * point (AB_BITS 10, 5 fraction bits), perspective ones per 1024/min(dst_h, 16)-column block
 * in double; 15-bit bilinear weights; taps outside src read `border`. dst must not overlap src.
 */
KERN_OP(aug_warp, (struct kern_ctx *ctx, uint8_t *KERN_RESTRICT dst, int dst_w, int dst_h,
                   const uint8_t *KERN_RESTRICT src, int src_w, int src_h, const double inv[9],
                   int perspective, uint8_t border))

/*
 * augment_hsv in place on img (w x h): RGB -> HSV (OpenCV 8-bit, integer tables), the LUTs,
 * HSV -> RGB (OpenCV 8-bit, float), whose AVX2 SIMD loop truncates each row's first
 * w / 32 * 32 pixels while its scalar tail rounds (the row width matters; rows of 640 are all
 * truncated). -EINVAL also when lut->h maps some H in 0..179 to 180 or more (kern_aug_hsv_lut_init
 * never does).
 */
KERN_OP(aug_hsv, (struct kern_ctx *ctx, uint8_t *img, int w, int h,
                  const struct kern_aug_hsv_lut *lut))

/* Mirror img (w x h) in place: left-right when lr != 0, top-bottom when ud != 0. */
KERN_OP(aug_flip, (struct kern_ctx *ctx, uint8_t *img, int w, int h, int lr, int ud))

/*
 * mixup in place: img[i] = (uint8)(img[i] r + img2[i] (1 - r)) in double, truncated (numpy's
 * astype(uint8)). n bytes each; r in [0, 1].
 */
KERN_OP(aug_mixup, (struct kern_ctx *ctx, uint8_t *KERN_RESTRICT img,
                    const uint8_t *KERN_RESTRICT img2, size_t n, double r))

/*
 * One HWC image (w x h) to planar CHW: dst is 3 planes of h * w elements (R, G, B), uint8
 * (KERN_AUG_U8) or float32 value / 255.0f (KERN_AUG_F32): the loader's batch layout.
 */
KERN_OP(aug_to_nchw, (struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype,
                      const uint8_t *KERN_RESTRICT hwc, int w, int h))

/*
 * The fused batch write: for each of the n samples, every output pixel is computed in one pass
 * (warp taps read straight from the pasted regions, KERN_AUG_FILL elsewhere, which equals
 * pasting onto a canvas and warping it with border KERN_AUG_FILL; then mixup, HSV, flips) and
 * written to image i of dst in dtype (any of the four; every element written, padding
 * included). Bytes equal to kern_ref_aug_paste + _warp (+ the same for canvas[1] and _mixup) +
 * _hsv + _flip + _to_nchw, then for the space-to-depth dtypes kern_ref_cast_f32_lowp_s2d of
 * the float32 tensor. samples: n host descriptors; their tile pointers are the backend's
 * memory. s: 1..32767 (even for space-to-depth); n >= 1. Images are split over the context's
 * threads (one thread at a time per context for this op, as the other ops); the split never
 * changes a byte. The CPU reference holds a uint8 image per thread for the space-to-depth
 * dtypes (-ENOMEM).
 */
KERN_OP(aug_batch, (struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype, int s,
                    const struct kern_aug_sample *samples, int n))
#endif /* KERN_OP */
/* clang-format on */
