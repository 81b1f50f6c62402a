/*
 * kern_tensor.h: parameter-free layers: max pool, nearest upsample, concat, residual add, the
 * Detect head, channel slices.
 *
 * Part of kern.h, which includes it: include kern.h, not this file. The first part declares
 * the family's descriptors and helpers. The op rows at the end, KERN_OP(name, (parameters)),
 * are expanded by whoever defines KERN_OP: kern.h makes them the kern_ref_* prototypes and
 * struct kern_ops members, kern_cuda.h the kern_cuda_* prototypes, each backend its table
 * (kern_ops.def lists the families in table order). Each row's comment is its contract.
 */
#ifndef KERN_H
#error "include kern.h, not kern_tensor.h"
#endif

#ifndef KERN_TENSOR_H
#define KERN_TENSOR_H

/* ---------------------------------------------------------------------------------------- */
/* The stem as space-to-depth                                                               */

/*
 * YOLOv5's stem, a 6x6 stride-2 pad-2 conv of c input channels, equals a 3x3 stride-1 pad-1 conv
 * of the image's 2x2 space-to-depth: the same products, summed in another order. cuDNN runs the
 * second on tensor cores, where the first takes a legacy engine (its weight gradient alone took
 * 15.8 of yolov5n's 70.7 ms of kernels on an H200).
 * kern_s2d: x (n, c, h, w) -> y (n, c_out, h / 2, w / 2), both in `layout`: channel
 *   (dy 2 + dx) c + ch of y at (r, s) is x[ch][2 r + dy][2 s + dx]; channels 4 c .. c_out - 1 are
 *   0 (c_out 16 for RGB: a multiple the tensor cores take). The order keeps NHWC copies whole:
 *   the pixels 2 s and 2 s + 1 of an input row are one run of 2 c values of y.
 * kern_s2d weights: w6 (k_out, c, 6, 6) -> w3 (k_out, c_out, 3, 3), w3[o][(dy 2 + dx) c + ch][i][j]
 *   = w6[o][ch][2 i + dy][2 j + dx], pad channels 0 (both OIHW, as every conv weight here).
 * Then conv3x3_s1_p1(s2d(x), w3) = conv6x6_s2_p2(x, w6), and the gradients map back by the
 * inverse permutations (pad channels dropped): s2d_bwd gives dx from dy, s2d_weight_bwd dw6 from
 * dw3. Pure copies: the CUDA twins give the same bits (kern_s2d_common.h).
 */
struct kern_s2d {
    int n, c, h, w; /* the input: n, c >= 1; h, w even, >= 2 */
    int c_out;      /* channels of y, >= 4 c */
    int layout;     /* KERN_LAYOUT_NCHW or KERN_LAYOUT_NHWC: x, y, dx and dy */
};

/* ---------------------------------------------------------------------------------------- */
/* Max pool 2d, nearest upsample x2                                                         */

/*
 * x (n, c, h_in, w_in) -> y, idx (n, c, h_out, w_out), h_out = (h_in + 2 pad - k) / stride + 1
 * (floor, PyTorch's ceil_mode=False). Padding is -inf (never selected), pad <= k / 2 as PyTorch
 * requires. idx holds the argmax as an offset into its input plane (ih * w_in + iw), PyTorch's
 * convention; ties keep the first maximum in row-major window order, and a NaN wins.
 */
struct kern_pool2d {
    int n, c;       /* batch size and channels, >= 1 */
    int h_in, w_in; /* input plane, >= 1 */
    int k;          /* square window, >= 1 */
    int stride;     /* >= 1 */
    int pad;        /* 0 <= pad <= k / 2 */
    /* Elements from one image to the next in x, dx (x_nstride) and in y, dy (y_nstride), so
       that either side may be a channel slice of a wider tensor (SPPF's pools read and write
       their concat buffer in place); 0: c h w of that side (dense); else at least that (-EINVAL).
       Elements between images are never touched. idx is always dense (n, c, h_out, w_out). */
    size_t x_nstride, y_nstride;
};

/* Computes the output size. Errors: -EINVAL (bad or empty shape). */
KERN_API int kern_pool2d_out_hw(const struct kern_pool2d *d, int *h_out, int *w_out);

/* ---------------------------------------------------------------------------------------- */
/* Detect head                                                                              */

/*
 * raw (bs, na*no, ny, nx)       the output of a Detect 1x1 conv, channel = a*no + k
 * p   (bs, na, ny, nx, no)      PyTorch's view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2)
 * k: 0-1 xy, 2-3 wh, 4 objectness, 5.. classes (no = nc + 5).
 */
struct kern_detect {
    int bs;       /* batch size, >= 1 */
    int na;       /* anchors per cell (3), >= 1 */
    int no;       /* outputs per anchor, nc + 5, >= 5 */
    int ny, nx;   /* grid size, >= 1 */
    float stride; /* pixels per grid cell (8, 16, 32) */
};

/* ---------------------------------------------------------------------------------------- */
/* Channel slices: producers and consumers of a concat's inputs work in place               */

/*
 * A Concat (and C3's and SPPF's concats) need not copy: each input can live in its channel
 * slice of the concat's output, written there by its producer and read there by its consumers.
 * A channel slice [c_off, c_off + c) of an (n, C, h, w) tensor is dense within an image (c h w
 * elements from base + c_off h w) and strided across the batch: image i starts nstride = C h w
 * elements after image i - 1. The ops that produce or consume such tensors take that n-stride
 * (0 always means dense, the default of every init function and of a zeroed descriptor, with
 * results bit for bit those of a dense call):
 *   struct kern_bn.y_nstride       the output y and its gradient dy of every BN / BN+SiLU op
 *   struct kern_conv2d.x_nstride   the input x and its gradient dx of the float32 conv2d ops
 *   struct kern_pool2d.x_nstride, .y_nstride   max pool's input and output sides
 *   kern_*_upsample2x_ns_fwd / _bwd            nearest x2 upsample with both sides strided
 *   kern_*_cast_f32_lowp_ns / _lowp_f32_ns     AMP casts between a slice and dense scratch
 * Elements between the images (the other channels of the concat) are never read nor written,
 * so several producers may fill one concat buffer, each its own slice.
 */

/* ---------------------------------------------------------------------------------------- */
/* Max pool and nearest upsample on 16-bit activations, NCHW or NHWC                        */

/*
 * SPPF's max pools and the neck's upsamples of the bf16 NHWC network (issue 41), bit for bit the
 * same on every backend and in either layout (kern_map16_common.h holds each element's steps for
 * the C and CUDA sources). d: the input map (n, c, h, w) in d->layout with strides as struct
 * kern_bnx's (kern_bn.h: NHWC pixel stride, NCHW image stride; 0 dense): x and dx step x_ld, y
 * and dy y_ld.
 * maxpool16: window k (odd, <= 15), stride 1, pad k / 2, so y is h x w; padding never wins; the
 *   window scanned row-major, v taken when v > max or v is NaN (kern_ref_maxpool2d_fwd's rule,
 *   on the values as float): y is the winner's bits, idx[dense y index] its offset kh k + kw.
 *   Backward: each element of dx the float sum, from 0 in row-major output order, of the dy whose
 *   window chose it, then plus the old dx with KERN_ACCUM_DX, rounded once (a gather: no atomics,
 *   one order).
 * upsample16: y (2h x 2w), y(oy, ox) = x(oy / 2, ox / 2). Backward: dx the float sum of dy's 2 x 2
 *   block in row-major order (plus the old dx with KERN_ACCUM_DX), rounded once.
 * dtype KERN_DT_BF16. Errors: -EINVAL (shape, k, layout, dtype, stride, NULL).
 */
struct kern_map16 {
    int n, c, h, w; /* the input map, >= 1 each */
    int k;          /* maxpool16's window */
    int layout;     /* KERN_LAYOUT_NCHW or KERN_LAYOUT_NHWC */
    int dtype;      /* KERN_DT_BF16 */
    size_t x_ld, y_ld;
};

#endif /* KERN_TENSOR_H */

/* The rows, laid out by hand: clang-format would read them as one statement. */
/* clang-format off */
#ifdef KERN_OP

/* --- Max pool 2d, nearest upsample x2 --- */

/* y = maxpool(x); idx (overwritten) may be NULL when no backward follows. */
KERN_OP(maxpool2d_fwd, (struct kern_ctx *ctx, const struct kern_pool2d *d, float *KERN_RESTRICT y,
                        int32_t *KERN_RESTRICT idx, const float *KERN_RESTRICT x))

/* dx (=|+=) dy routed to idx (overlapping windows add up). Uses KERN_ACCUM_DX. */
KERN_OP(maxpool2d_bwd, (struct kern_ctx *ctx, const struct kern_pool2d *d, float *KERN_RESTRICT dx,
                        const float *KERN_RESTRICT dy, const int32_t *KERN_RESTRICT idx,
                        unsigned accum))

/* Nearest x2: x (planes, h, w) -> y (planes, 2h, 2w), y[oy][ox] = x[oy/2][ox/2]; planes = n*c. */
KERN_OP(upsample2x_fwd, (struct kern_ctx *ctx, float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                         int planes, int h, int w))

/* dx (planes, h, w) (=|+=) the sum of the 2x2 block of dy (planes, 2h, 2w). KERN_ACCUM_DX. */
KERN_OP(upsample2x_bwd, (struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                         const float *KERN_RESTRICT dy, int planes, int h, int w, unsigned accum))

/* --- Concat along channels, residual add --- */

/*
 * Concat is done one input at a time, as a channel-slice copy: x (n, c_x, hw) goes to channels
 * [c_off, c_off + c_x) of y (n, c_y, hw). Calling it for each input of a Concat layer, with
 * c_off the running sum of the channels before it, builds torch.cat(xs, dim=1). Channels of y
 * outside the slice are not touched.
 */
KERN_OP(concat_fwd, (struct kern_ctx *ctx, float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                     int n, int c_x, int hw, int c_y, int c_off))

/* dx (n, c_x, hw) (=|+=) channels [c_off, c_off + c_x) of dy (n, c_y, hw). KERN_ACCUM_DX. */
KERN_OP(concat_bwd, (struct kern_ctx *ctx, float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                     int n, int c_x, int hw, int c_y, int c_off, unsigned accum))

/* Residual add over count elements: y = a + b. May run in place (y == a or y == b). */
KERN_OP(add_fwd, (struct kern_ctx *ctx, float *y, const float *a, const float *b, size_t count))

/*
 * Backward of y = a + b for one of the two inputs: dx (=|+=) dy. Call it once for a and once
 * for b (or pass dy on when a gradient buffer can be shared). KERN_ACCUM_DX.
 */
KERN_OP(add_bwd, (struct kern_ctx *ctx, float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                  size_t count, unsigned accum))

/* --- the stem as space-to-depth (struct kern_s2d above) --- */

/* y = s2d(x), every element written (pad channels 0). -EINVAL: a bad descriptor or NULL. */
KERN_OP(s2d_fwd, (struct kern_ctx *ctx, const struct kern_s2d *d, float *KERN_RESTRICT y,
                  const float *KERN_RESTRICT x))

/* dx (=|+=) dy's elements at the places s2d put x's; pad channels never read. KERN_ACCUM_DX. */
KERN_OP(s2d_bwd, (struct kern_ctx *ctx, const struct kern_s2d *d, float *KERN_RESTRICT dx,
                  const float *KERN_RESTRICT dy, unsigned accum))

/* w3 (k_out, d->c_out, 3, 3) = the stem weights w6 (k_out, d->c, 6, 6) rearranged, pad channels
 * 0. -EINVAL: a bad descriptor, k_out < 1 or NULL. */
KERN_OP(s2d_weight_fwd, (struct kern_ctx *ctx, const struct kern_s2d *d, int k_out,
                         float *KERN_RESTRICT w3, const float *KERN_RESTRICT w6))

/* dw6 (=|+=) dw3 rearranged back; pad channels' gradient dropped. KERN_ACCUM_DPARAM. */
KERN_OP(s2d_weight_bwd, (struct kern_ctx *ctx, const struct kern_s2d *d, int k_out,
                         float *KERN_RESTRICT dw6, const float *KERN_RESTRICT dw3,
                         unsigned accum))

/* --- Detect head --- */

/* p = permute(raw) (overwritten). */
KERN_OP(detect_reshape_fwd, (struct kern_ctx *ctx, const struct kern_detect *d,
                             float *KERN_RESTRICT p, const float *KERN_RESTRICT raw))

/* draw (=|+=) the inverse permutation of dp. KERN_ACCUM_DX. */
KERN_OP(detect_reshape_bwd, (struct kern_ctx *ctx, const struct kern_detect *d,
                             float *KERN_RESTRICT draw, const float *KERN_RESTRICT dp,
                             unsigned accum))

/*
 * The same permutes from a 16-bit Detect conv output in `layout` (KERN_LAYOUT_NCHW: raw (bs, na
 * no, ny, nx); KERN_LAYOUT_NHWC: (bs, ny, nx, na no)), dense, KERN_DT_BF16: p (float32) = the
 * widened raw, permuted; draw (overwritten) = r(dp), permuted back (the gradient reaching a
 * bf16 tensor under autocast is bf16). Errors: -EINVAL (shape, layout, NULL).
 */
KERN_OP(detect16_fwd, (struct kern_ctx *ctx, const struct kern_detect *d, int layout,
                       float *KERN_RESTRICT p, const uint16_t *KERN_RESTRICT raw))
KERN_OP(detect16_bwd, (struct kern_ctx *ctx, const struct kern_detect *d, int layout,
                       uint16_t *KERN_RESTRICT draw, const float *KERN_RESTRICT dp))

/*
 * Inference decode, with the permute fused: reads raw (bs, na*no, ny, nx), writes out
 * (bs, na, ny, nx, no) = (bs, na*ny*nx, no) boxes in input pixels, as ultralytics' Detect in
 * eval mode: s = sigmoid(v); xy = (2 s + (grid - 0.5)) * stride; wh = (2 s)^2 * anchor * stride;
 * objectness and classes = s. anchors (host or device like the tensors): na (w, h) pairs in grid
 * units (pixels / stride), as the model stores them.
 */
KERN_OP(detect_decode, (struct kern_ctx *ctx, const struct kern_detect *d, float *KERN_RESTRICT out,
                        const float *KERN_RESTRICT raw, const float *KERN_RESTRICT anchors))

/* --- Channel slices: producers and consumers of a concat's inputs work in place --- */

/*
 * Nearest x2 upsample with n-strides: x (n, c, h, w) -> y (n, c, 2h, 2w) as
 * kern_ref_upsample2x_fwd (planes = n c), with image i of y at y + i * y_nstride (0: 4 c h w)
 * and of x at x + i * x_nstride (0: c h w). Errors: -EINVAL (bad shape, NULL, a non-zero stride
 * below its dense value).
 */
KERN_OP(upsample2x_ns_fwd, (struct kern_ctx *ctx, float *KERN_RESTRICT y,
                            const float *KERN_RESTRICT x, int n, int c, int h, int w,
                            size_t y_nstride, size_t x_nstride))

/* Its backward: dx (=|+=) the 2x2 block sums of dy, with the same strides. KERN_ACCUM_DX. */
KERN_OP(upsample2x_ns_bwd, (struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                            const float *KERN_RESTRICT dy, int n, int c, int h, int w,
                            size_t x_nstride, size_t y_nstride, unsigned accum))
/* --- Max pool and nearest upsample on 16-bit activations, NCHW or NHWC (see above) --- */

KERN_OP(maxpool16_fwd, (struct kern_ctx *ctx, const struct kern_map16 *d,
                        uint16_t *KERN_RESTRICT y, uint8_t *KERN_RESTRICT idx,
                        const uint16_t *KERN_RESTRICT x))
KERN_OP(maxpool16_bwd, (struct kern_ctx *ctx, const struct kern_map16 *d,
                        uint16_t *KERN_RESTRICT dx, const uint16_t *KERN_RESTRICT dy,
                        const uint8_t *KERN_RESTRICT idx, unsigned accum))
KERN_OP(upsample16_fwd, (struct kern_ctx *ctx, const struct kern_map16 *d,
                         uint16_t *KERN_RESTRICT y, const uint16_t *KERN_RESTRICT x))
KERN_OP(upsample16_bwd, (struct kern_ctx *ctx, const struct kern_map16 *d,
                         uint16_t *KERN_RESTRICT dx, const uint16_t *KERN_RESTRICT dy,
                         unsigned accum))

/* copy16: y (=|+=) x, both maps (n, c, h, w) with their strides (x_ld, y_ld; k unused): a
 * concat's copies into its buffer's slice, and the gradient's out of it. With KERN_ACCUM_DX
 * each element is r(y + x), one float add rounded once; without, x's bits. */
KERN_OP(copy16, (struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *KERN_RESTRICT y,
                 const uint16_t *KERN_RESTRICT x, unsigned accum))
#endif /* KERN_OP */
/* clang-format on */
