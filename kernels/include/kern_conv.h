/*
 * kern_conv.h: convolution: float32 conv2d and its reduced-precision (AMP) twin.
 *
 * Part of kern.h, which includes it: include kern.h, not this file. The first part declares
 * the family's descriptors and helpers. The op rows at the end, KERN_OP(name, (parameters)),
 * are expanded by whoever defines KERN_OP: kern.h makes them the kern_ref_* prototypes and
 * struct kern_ops members, kern_cuda.h the kern_cuda_* prototypes, each backend its table
 * (kern_ops.def lists the families in table order). Each row's comment is its contract.
 */
#ifndef KERN_H
#error "include kern.h, not kern_conv.h"
#endif

#ifndef KERN_CONV_H
#define KERN_CONV_H

/* ---------------------------------------------------------------------------------------- */
/* conv2d: groups 1, dilation 1, no bias except where given                                 */

/*
 * x  (n, c_in, h_in, w_in)            input
 * w  (c_out, c_in, k_h, k_w)          weights (PyTorch Conv2d layout)
 * b  (c_out)                          optional bias (Detect's 1x1 convs)
 * y  (n, c_out, h_out, w_out)         h_out = (h_in + 2 pad_h - k_h) / stride_h + 1 (floor)
 */
struct kern_conv2d {
    int n;                  /* batch size, >= 1 */
    int c_in, h_in, w_in;   /* input channels and spatial size, >= 1 */
    int c_out;              /* output channels, >= 1 */
    int k_h, k_w;           /* kernel size, >= 1 */
    int stride_h, stride_w; /* stride, >= 1 */
    int pad_h, pad_w;       /* zero padding on each side, >= 0 */
    /* Elements from one image to the next in x and dx (a channel slice of a wider tensor, as a
       concat's input read in place: image i's c_in planes start at x + i * x_nstride, dense
       within the image); 0: c_in h_in w_in (dense); else >= c_in h_in w_in (-EINVAL). Elements
       between the images are never read, and bwd_data never writes them. y, dy, w are dense.
       The lowp ops (struct kern_conv2d_lowp) take their strides in x_ld, y_ld: 0 here (-EINVAL). */
    size_t x_nstride;
};

/* Fills *d for a square kernel, stride and padding (the YOLOv5 case); x_nstride 0 (dense). */
KERN_API void kern_conv2d_init(struct kern_conv2d *d, int n, int c_in, int h_in, int w_in,
                               int c_out, int k, int stride, int pad);

/* Computes the output size into *h_out, *w_out. Errors: -EINVAL (bad or empty shape). */
KERN_API int kern_conv2d_out_hw(const struct kern_conv2d *d, int *h_out, int *w_out);

/* FLOPs of one forward pass (2 per multiply-add); backward data and filter cost the same each. */
KERN_API double kern_conv2d_flops(const struct kern_conv2d *d);

/* ---------------------------------------------------------------------------------------- */
/* conv2d in reduced precision (AMP): bf16 / fp16 tensors, fp32 accumulation, NCHW or NHWC  */

/*
 * The convolutions of PyTorch's autocast: inputs and weights in bf16 (or fp16), products and
 * sums in float32, outputs in the reduced type; the parameter gradients come back as float32
 * so that they add straight into the fp32 master gradients. These are separate entry points
 * with their own descriptor: struct kern_conv2d and the float32 kern_*_conv2d_* ops above are
 * unchanged (bit for bit).
 *
 * ELEMENT TYPES (dtype). KERN_DT_BF16 and KERN_DT_F16 tensors are arrays of uint16_t holding
 * the bit patterns (bf16: the top half of a float32; fp16: IEEE binary16), as the casts
 * kern_*_cast_f32_bf16 / _f16 write them. KERN_DT_F32 is float32 (then these ops are float32
 * convolutions with a layout choice). Let r(v) be the rounding of a float32 v to dtype, round to
 * nearest, ties to even, overflow to +-Inf, fp16 subnormals kept (as the casts; identity for
 * KERN_DT_F32), and S the exact-product float32 sum the op computes (every product of two
 * 16-bit values is exact in float32; the order of the float32 additions is the backend's).
 * The CPU reference defines:
 *   fwd          y  = r(S + b)                 bias (dtype, optional) added in float32 before the
 *                                              one rounding
 *   bwd_data     dx = r(S)  |  r(dx_old + S)   with KERN_ACCUM_DX (dx_old widened, float32 add)
 *   bwd_filter   dw = r(S)  |  dw_old + r(S)   dw float32; r(S) widened exactly
 *   bwd_bias     db = r(S)  |  db_old + r(S)   db float32; S the sum of dy over n, h, w in
 *                                              double, rounded to float32
 * The gradients r(S) of the parameters are what PyTorch gives: under autocast the conv's weight
 * gradient is a bf16 tensor that the cast's backward widens and accumulates into the fp32 .grad.
 * The reduced-type dw also matches cuDNN's legacy API, which requires dw in the input type
 * (the CUDA twin computes r(S) into its workspace, then widens and adds it in one kernel).
 * fp16 gradients can overflow to Inf: that is the dynamic loss scaler's signal (kern_sgd
 * skip_nonfinite / kern_*_amp_unscale found_inf), as in PyTorch.
 *
 * LAYOUT. KERN_LAYOUT_NCHW: x (n, c_in, h, w), y (n, c_out, h_out, w_out), w and dw (c_out,
 * c_in, k_h, k_w), as the float32 ops. KERN_LAYOUT_NHWC (PyTorch channels_last): x (n, h, w,
 * c_in), y (n, h_out, w_out, c_out), w and dw (c_out, k_h, k_w, c_in). Bias and db: (c_out).
 * x_ld, y_ld and dw_oihw (below) widen this to channel slices and an OIHW dw.
 * The layout only moves elements: the CPU reference gives the same values bit for bit in both.
 *
 * WORKSPACE. kern_*_conv2d_lowp_workspace_size, as the float32 ops: reserve the maximum once.
 * CPU: per working thread c_in h_in w_in + c_out h_out w_out floats more than the float32 op
 * (the widened image and the float32 output), plus c_out c_in k_h k_w floats shared (widened
 * weights, or the float32 dw sum). CUDA: the cuDNN algorithms' need plus, for bwd_filter and
 * bwd_bias, the reduced-type dw / db (16-byte aligned).
 *
 * Errors, aliasing, threads and accumulation bits: as the float32 conv2d ops (-EINVAL also for
 * a dtype or layout outside the enums).
 */

struct kern_conv2d_lowp {
    struct kern_conv2d conv; /* the shape, as for the float32 ops (x_nstride 0) */
    int dtype;               /* KERN_DT_*: type of x, w, bias, y, dx, dy (dw, db are float32) */
    int layout;              /* KERN_LAYOUT_*: of x, y, dx, dy, w, and of dw unless dw_oihw */
    /* STRIDES. x and dx step x_ld, y and dy step y_ld, as struct kern_bnx's (kern_bn.h): NHWC the
       pixel stride (>= the tensor's channels: a concat's channel slice is a pointer to its first
       channel with the concat's stride), NCHW the image stride (>= c h w); 0: dense. Elements
       outside the slices are never read, and never written. The results are the dense call's
       bit for bit (the CUDA twin runs the dense shape's algorithms on the strided descriptors). */
    size_t x_ld, y_ld;
    /* 1: dw is (c_out, c_in, k_h, k_w) in either layout, the float32 master gradients' order, so
       that the NHWC network adds into them without a transpose pass (the CUDA twin permutes in
       its widening kernel); 0: dw in `layout`. */
    int dw_oihw;
};

/* Fills *d with the shape *conv (copied), dtype and layout. NULL d or conv: nothing. */
KERN_API void kern_conv2d_lowp_init(struct kern_conv2d_lowp *d, const struct kern_conv2d *conv,
                                    int dtype, int layout);

#endif /* KERN_CONV_H */

/* The rows, laid out by hand: clang-format would read them as one statement. */
/* clang-format off */
#ifdef KERN_OP

/* --- conv2d: groups 1, dilation 1, no bias except where given --- */

/*
 * Bytes of workspace that kern_ref_conv2d_fwd/_bwd_data/_bwd_filter and
 * kern_ref_conv2d_bn_silu_fwd_eval need for shape d on ctx (the max of them) into *bytes: per
 * thread that gets images, c_in k_h k_w h_out w_out floats (none for 1x1 stride-1 unpadded
 * convs), c_in h_in w_in floats more for strided convs, c_out c_in k_h k_w floats of partial dw
 * when threaded, and one band of the conv's output for the fused eval op (the plain ops run
 * without it: a 1x1 stride-1 unpadded conv's fwd and backward need no workspace). Depends on the
 * context's thread count. Errors: -EINVAL.
 */
KERN_OP(conv2d_workspace_size, (struct kern_ctx *ctx, const struct kern_conv2d *d, size_t *bytes))

/* y = conv(x, w) (+ bias[c_out] when bias != NULL). y is overwritten. */
KERN_OP(conv2d_fwd, (struct kern_ctx *ctx, const struct kern_conv2d *d, float *KERN_RESTRICT y,
                     const float *KERN_RESTRICT x, const float *KERN_RESTRICT w,
                     const float *KERN_RESTRICT bias))

/* dx (=|+=) dL/dx given dy (n, c_out, h_out, w_out) and w. Uses KERN_ACCUM_DX. */
KERN_OP(conv2d_bwd_data, (struct kern_ctx *ctx, const struct kern_conv2d *d,
                          float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                          const float *KERN_RESTRICT w, unsigned accum))

/* dw (=|+=) dL/dw, summed over the batch, given dy and x. Uses KERN_ACCUM_DPARAM. */
KERN_OP(conv2d_bwd_filter, (struct kern_ctx *ctx, const struct kern_conv2d *d,
                            float *KERN_RESTRICT dw, const float *KERN_RESTRICT dy,
                            const float *KERN_RESTRICT x, unsigned accum))

/* db[c_out] (=|+=) sum of dy over n, h, w. Uses KERN_ACCUM_DPARAM. */
KERN_OP(conv2d_bwd_bias, (struct kern_ctx *ctx, const struct kern_conv2d *d,
                          float *KERN_RESTRICT db, const float *KERN_RESTRICT dy, unsigned accum))

/* --- conv2d in reduced precision --- */

/* Bytes of workspace for the four lowp ops of d on ctx (see WORKSPACE). Errors: -EINVAL. */
KERN_OP(conv2d_lowp_workspace_size, (struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                     size_t *bytes))

/* y = r(conv(x, w) + bias); bias (c_out, dtype) may be NULL. y is overwritten. */
KERN_OP(conv2d_lowp_fwd, (struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                          void *KERN_RESTRICT y, const void *KERN_RESTRICT x,
                          const void *KERN_RESTRICT w, const void *KERN_RESTRICT bias))

/* dx (dtype) = r(S) or r(dx + S) given dy (dtype) and w (dtype). Uses KERN_ACCUM_DX. */
KERN_OP(conv2d_lowp_bwd_data, (struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                               void *KERN_RESTRICT dx, const void *KERN_RESTRICT dy,
                               const void *KERN_RESTRICT w, unsigned accum))

/* dw (float32, layout) = r(S) or dw + r(S), summed over the batch. Uses KERN_ACCUM_DPARAM. */
KERN_OP(conv2d_lowp_bwd_filter, (struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                 float *KERN_RESTRICT dw, const void *KERN_RESTRICT dy,
                                 const void *KERN_RESTRICT x, unsigned accum))

/* db[c_out] (float32) = r(S) or db + r(S), S the sum of dy. Uses KERN_ACCUM_DPARAM. */
KERN_OP(conv2d_lowp_bwd_bias, (struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                               float *KERN_RESTRICT db, const void *KERN_RESTRICT dy,
                               unsigned accum))
#endif /* KERN_OP */
/* clang-format on */
