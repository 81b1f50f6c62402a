/*
 * kern_cast.h: dtype casts between float32 and the 16-bit AMP types, dense and over channel slices.
 *
 * Part of kern.h, which includes it: include kern.h, not this file. The first part declares
 * the family's descriptors and helpers (this family has none). The op rows at the end,
 * KERN_OP(name, (parameters)), are expanded by whoever defines KERN_OP: kern.h makes them the
 * kern_ref_* prototypes and struct kern_ops members, kern_cuda.h the kern_cuda_* prototypes, each
 * backend its table (kern_ops.def lists the families in table order). Each row's comment is its
 * contract.
 */
#ifndef KERN_H
#error "include kern.h, not kern_cast.h"
#endif

/* The rows, laid out by hand: clang-format would read them as one statement. */
/* clang-format off */
#ifdef KERN_OP

/* --- dense --- */

/*
 * Casts between float32 and the 16-bit AMP types, count elements, as PyTorch's .to() on the CPU:
 * round to nearest, ties to even; overflow gives +-Inf; fp16 subnormals are kept (gradual
 * underflow); NaN becomes a quiet NaN: 0x7e00 | sign for fp16 (as PyTorch), 0x7fc0 for bf16
 * (c10::BFloat16's scalar rule; torch 1.13's AVX2 loop writes 0xffff: any NaN is as good). bf16
 * keeps float32's range (no scaler needed); fp16 needs the dynamic loss scaler. The widening casts
 * are exact. Errors: -EINVAL (NULL with count > 0).
 */
KERN_OP(cast_f32_bf16, (struct kern_ctx *ctx, uint16_t *KERN_RESTRICT dst,
                        const float *KERN_RESTRICT src, size_t count))
KERN_OP(cast_bf16_f32, (struct kern_ctx *ctx, float *KERN_RESTRICT dst,
                        const uint16_t *KERN_RESTRICT src, size_t count))
KERN_OP(cast_f32_f16, (struct kern_ctx *ctx, uint16_t *KERN_RESTRICT dst,
                       const float *KERN_RESTRICT src, size_t count))
KERN_OP(cast_f16_f32, (struct kern_ctx *ctx, float *KERN_RESTRICT dst,
                       const uint16_t *KERN_RESTRICT src, size_t count))

/* --- over channel slices (kern_tensor.h, "Channel slices") --- */

/*
 * Autocast's casts for a conv whose float32 input is a channel slice. dtype: KERN_DT_BF16 or
 * KERN_DT_F16; the float32 side is n images of `inner` elements, image i at i * nstride (0:
 * inner); the 16-bit side is dense (n, inner). Roundings as kern_ref_cast_f32_bf16 / _f16 (and
 * the exact widenings), so the result is the dense cast of the gathered slice bit for bit.
 * kern_ref_cast_f32_lowp_ns: dst (16-bit, overwritten) = r(src slice).
 * kern_ref_cast_lowp_f32_ns: dst slice (=|+=) widen(src) (KERN_ACCUM_DX: one float32 add, as a
 * widen into scratch then kern_ref_add_bwd would).
 * Errors: -EINVAL (dtype, n < 0, a non-zero nstride < inner, NULL with n inner > 0).
 */
KERN_OP(cast_f32_lowp_ns, (struct kern_ctx *ctx, int dtype, uint16_t *KERN_RESTRICT dst,
                           const float *KERN_RESTRICT src, int n, size_t inner, size_t src_nstride))
KERN_OP(cast_lowp_f32_ns, (struct kern_ctx *ctx, int dtype, float *KERN_RESTRICT dst,
                           const uint16_t *KERN_RESTRICT src, int n, size_t inner,
                           size_t dst_nstride, unsigned accum))

/* --- to channels last (the NHWC network's weights and input) --- */

/*
 * dst (n, hw, c) 16-bit = r(src (n, c, hw) float32): conv weights (c_out, c_in, k_h, k_w) into
 * the NHWC convs' (c_out, k_h, k_w, c_in), and the input images into NHWC. dtype KERN_DT_BF16 or
 * KERN_DT_F16; roundings as kern_ref_cast_f32_bf16 / _f16, so the result is the dense cast,
 * permuted, bit for bit. Errors: -EINVAL (dtype, n or c < 0, NULL with elements).
 */
KERN_OP(cast_f32_lowp_cl, (struct kern_ctx *ctx, int dtype, uint16_t *KERN_RESTRICT dst,
                           const float *KERN_RESTRICT src, int n, int c, size_t hw))

/*
 * The stem's input for the bf16 executor in one pass: dst 16-bit, d->layout, (n, c_out, h / 2,
 * w / 2) = r(s2d(src)) with src the float32 images (n, c, h, w) always NCHW (what the loaders
 * hand the net), pad channels 0: bit for bit kern_ref_s2d_fwd in NCHW followed by the dense cast
 * (NCHW) or kern_ref_cast_f32_lowp_cl (NHWC), without the float32 tensor between them.
 * Errors: -EINVAL (a bad descriptor (kern_tensor.h "The stem as space-to-depth"), dtype, NULL).
 */
KERN_OP(cast_f32_lowp_s2d, (struct kern_ctx *ctx, const struct kern_s2d *d, int dtype,
                            uint16_t *KERN_RESTRICT dst, const float *KERN_RESTRICT src))
#endif /* KERN_OP */
/* clang-format on */
