/*
 * kern_bn.h: batch norm: BatchNorm2d, SiLU, BN + SiLU fused, the SyncBatchNorm phases, BN + SiLU +
 * residual add.
 *
 * Part of kern.h, which includes it: include kern.h, not this file. The first part declares
 * the family's descriptors and helpers. The op rows at the end, KERN_OP(name, (parameters)),
 * are expanded by whoever defines KERN_OP: kern.h makes them the kern_ref_* prototypes and
 * struct kern_ops members, kern_cuda.h the kern_cuda_* prototypes, each backend its table
 * (kern_ops.def lists the families in table order). Each row's comment is its contract.
 */
#ifndef KERN_H
#error "include kern.h, not kern_bn.h"
#endif

#ifndef KERN_BN_H
#define KERN_BN_H

/* ---------------------------------------------------------------------------------------- */
/* Batch norm (BatchNorm2d), SiLU, and the two fused                                        */

/*
 * x, y, dx, dy  (n, c, hw)   hw = height * width of each plane
 * gamma, beta, running_mean, running_var, save_mean, save_invstd, dgamma, dbeta  (c)
 *
 * Training: mean and biased variance over (n, hw) normalise x; y = (x - mean) * invstd * gamma +
 * beta with invstd = 1 / sqrt(var + eps). The running stats become (1 - momentum) * running +
 * momentum * batch stat, with the unbiased variance var * N / (N - 1), N = n * hw (N must be
 * > 1, as in PyTorch). save_mean and save_invstd keep the batch mean and invstd for backward.
 * Eval: running_mean and running_var normalise x; nothing is updated.
 * Statistics are accumulated in double on the CPU.
 */
struct kern_bn {
    int n;          /* batch size, >= 1 */
    int c;          /* channels, >= 1 */
    int hw;         /* elements per plane (height * width), >= 1 */
    float eps;      /* added to the variance; KERN_BN_EPS for YOLOv5 */
    float momentum; /* running-stat update weight; KERN_BN_MOMENTUM for YOLOv5 */
    /* Elements from one image to the next in y and dy, the output side (a channel slice of a
       wider tensor: producers write a concat's slice, no copy); 0: c * hw (dense). x and dx are
       always dense. */
    size_t y_nstride;
    /* The same for the residual input r of the fused residual-add ops; 0: c * hw (dense). */
    size_t r_nstride;
};

/* Fills *d with the shape and the YOLOv5 eps (1e-3) and momentum (0.03). */
KERN_API void kern_bn_init(struct kern_bn *d, int n, int c, int hw);

/* ---------------------------------------------------------------------------------------- */
/* Batch norm in phases, for SyncBatchNorm                                                  */

/*
 * The training BN and BN+SiLU above, split where a data-parallel caller sums per-channel
 * statistics over its ranks, as PyTorch's SyncBatchNorm does:
 *
 *   forward:  kern_ref_bn_stats(x) -> sums;  sum sums over the ranks;
 *             kern_ref_bn[_silu]_fwd_apply(sums) -> y, save_mean, save_invstd, running stats
 *   backward: kern_ref_bn[_silu]_bwd_reduce(dy) -> sums, dgamma, dbeta;  sum sums over the ranks;
 *             kern_ref_bn[_silu]_bwd_apply(sums) -> dx
 *
 * SUMS. KERN_BN_SUMS_LEN(c) = 2c + 1 doubles of the backend's tensor memory (device memory for
 * CUDA): sums[0..c) and sums[c..2c) hold two per-channel sums and sums[2c] the number of
 * elements per channel they cover (n * hw on one rank). The caller adds the ranks' buffers
 * elementwise (any order, any transport), so the apply ops read the global sums AND the global
 * count N: ranks may hold different batch sizes. Without the sum (one rank) the phases compute
 * what kern_ref_bn[_silu]_fwd_train and _bwd compute, up to rounding.
 *   kern_ref_bn_stats:         (sum x, sum x^2, n hw)
 *   kern_ref_bn*_bwd_reduce:   (sum dz, sum dz xhat, n hw), dz = dy for BN, dy silu'(z) for
 *                              BN+SiLU (z = xhat gamma + beta recomputed), xhat = (x -
 *                              save_mean) save_invstd
 * WHY DOUBLE. The forward needs a sum it can add over ranks, so the variance comes back as
 * E[x^2] - mean^2 after the sum, which cancels when |mean| >> std: in float pairs the relative
 * error of the variance would be about 6e-8 (mean / std)^2 (1e-4 at mean = 40 std); in double it
 * is 1e-16 (mean / std)^2, negligible below mean = 1e4 std (the bound the CUDA BN forward already
 * has). Locally each rank still computes its channel mean and sum of squared deviations as the
 * fused op does (two-level, Chan's merge) and only then forms sum x^2 = M2 + N mean^2, so no
 * float sum of squares is ever formed. Backends need float64 sums: TCP, MPI and NCCL all have
 * them; the buffers are 2c + 1 values per layer, never the activations.
 *
 * FORWARD APPLY. mean = sums[ch] / N, var = max(sums[c + ch] / N - mean^2, 0) (biased) and
 * invstd = 1 / sqrt(var + eps) normalise x; save_mean, save_invstd receive them (for backward;
 * either may be NULL); running_mean, running_var (both or neither) are updated with momentum and
 * the UNBIASED global variance var N / (N - 1), as SyncBatchNorm's
 * batch_norm_gather_stats_with_counts.
 * BACKWARD. bwd_reduce writes this rank's sums, and dgamma = sum dz xhat, dbeta = sum dz of THIS
 * rank's batch (=|+= by KERN_ACCUM_DPARAM; both may be NULL): parameter gradients stay local,
 * as in SyncBatchNorm, and the data-parallel gradient all-reduce sums them like every other
 * parameter's. bwd_apply: dx (=|+= by KERN_ACCUM_DX) = gamma invstd (dz - sum dz / N - xhat
 * sum(dz xhat) / N) with the reduced sums and N.
 * The BN and BN+SiLU variants of each phase have the same parameter list. In the backward
 * phases beta is read only by the BN+SiLU ones (it may be NULL for plain BN), and gamma by every
 * one but kern_ref_bn_bwd_reduce (NULL allowed there).
 * save_mean and save_invstd given to the backward phases come from the forward apply on the
 * same x.
 * Errors: -EINVAL as the fused ops (bad shape, NULL tensors, a local n * hw < 2 when running
 * stats are updated). The summed values are not checked (on CUDA they are in device memory):
 * the count must be >= 1, and >= 2 when running stats are updated.
 */
#define KERN_BN_SUMS_LEN(c) (2u * (size_t)(c) + 1u)

/* ---------------------------------------------------------------------------------------- */
/* BN + SiLU (+ residual) on 16-bit activations, NCHW or NHWC                               */

/*
 * The training BatchNorm + SiLU of the bf16 NHWC network (issue 41): activations, their
 * gradients and the residual in bf16 (uint16_t), the statistics and every per-element step in
 * float32 or double, in phases as SyncBatchNorm's above (bnx_stats -> the caller may sum over
 * its ranks -> bnx_silu_apply; bnx_silu_bwd_reduce -> sum -> bnx_silu_bwd_apply), so that one
 * rank and several run the same code.
 *
 * LAYOUT. d->layout KERN_LAYOUT_NHWC (channels_last): element (image i, channel ch, pixel p) at
 * i hw ld + p ld + ch, ld the tensor's pixel stride (ld >= c: a concat's channel slice is a
 * pointer to its first channel with the concat's ld); KERN_LAYOUT_NCHW: at i ld + ch hw + p, ld
 * the image stride (>= c hw). 0 means dense (c, or c hw). x and dx step d->x_ld, y and dy
 * d->y_ld, r d->r_ld.
 *
 * NUMBERS. Bit for bit the same on every backend, and the same for NCHW and NHWC: the math of
 * each element is one header shared by the C and CUDA sources (kern_bnx_common.h: products and
 * sums rounded one at a time, no FMA contraction; a polynomial exp), and every reduction has one
 * order: the n hw pixels, image after image, in chunks of KERN_BNX_CHUNK(n hw, c) pixels; a
 * chunk's float sums run pixel by pixel; the chunks merge in double, chunk after chunk (stats:
 * Chan et al.'s update of (count, mean, M2); the backward's sums: plain double sums). y = silu(x
 * a + b) (+ r), rounded to bf16 once; a, b as kern_bn_sums_coef (double). The backward
 * recomputes z = xhat gamma + beta, dz = dy silu'(z), and dx = k (dz - m1 - xhat m2) with k =
 * gamma invstd, m1 = sum dz / N, m2 = sum dz xhat / N.
 *
 * SUMS: KERN_BN_SUMS_LEN(c) doubles as the float32 phases': (sum x, sum x^2 as M2 + N mean^2,
 * N) from stats, (sum dz, sum dz xhat, N) from bwd_reduce. dgamma, dbeta (float, c): overwritten
 * unless accum has KERN_ACCUM_DPARAM; dx: written unless accum has KERN_ACCUM_DX (then the sum is
 * formed in float and rounded once). r: NULL, or the residual added after the SiLU (the
 * bottleneck's x + cv2(cv1(x))); its gradient is dy itself, which the caller passes on.
 * dtype: KERN_DT_BF16. Errors: -EINVAL (a bad shape, stride, dtype or NULL).
 */
struct kern_bnx {
    int n, c, hw;            /* images, channels, pixels per image (>= 1 each) */
    int layout;              /* KERN_LAYOUT_NCHW or KERN_LAYOUT_NHWC */
    int dtype;               /* KERN_DT_BF16 */
    float eps;               /* KERN_BN_EPS for YOLOv5 */
    float momentum;          /* running-stat update weight */
    size_t x_ld, y_ld, r_ld; /* strides, as LAYOUT says; 0: dense */
};

/* Fills *d: the shape, layout, bf16, YOLOv5's eps and momentum, dense strides. */
KERN_API void kern_bnx_init(struct kern_bnx *d, int n, int c, int hw, int layout);

/* Pixels per chunk of the reductions (NUMBERS): at least 1024, and few enough chunks that their
 * partial sums (8 bytes per chunk and channel) fit in 4 MiB. */
#define KERN_BNX_CHUNK(count, c)                                   \
    ((size_t)(count) * (size_t)(c)*8u <= ((size_t)4 << 20) * 1024u \
         ? (size_t)1024                                            \
         : (((size_t)(count) * (size_t)(c)*8u / ((size_t)4 << 20) + 1u + 255u) / 256u * 256u))

#endif /* KERN_BN_H */

/* The rows, laid out by hand: clang-format would read them as one statement. */
/* clang-format off */
#ifdef KERN_OP

/* --- Batch norm (BatchNorm2d), SiLU, and the two fused --- */

/*
 * Training forward. y (overwritten); save_mean, save_invstd (overwritten; either may be NULL
 * when no backward follows); running_mean, running_var (updated in place; both NULL to skip the
 * update). Errors: -EINVAL (also for N = n * hw < 2 when the running stats are updated).
 */
KERN_OP(bn_fwd_train, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                       float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                       float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                       const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                       const float *KERN_RESTRICT beta))

/* Eval forward: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta. */
KERN_OP(bn_fwd_eval, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                      const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                      const float *KERN_RESTRICT beta, const float *KERN_RESTRICT running_mean,
                      const float *KERN_RESTRICT running_var))

/*
 * Training backward (batch statistics, as PyTorch in train mode). dx uses KERN_ACCUM_DX; dgamma
 * and dbeta use KERN_ACCUM_DPARAM; dgamma and dbeta may both be NULL (frozen BN: only dx).
 * save_mean and save_invstd come from the forward call on the same x.
 */
KERN_OP(bn_bwd, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT dx,
                 float *KERN_RESTRICT dgamma, float *KERN_RESTRICT dbeta,
                 const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x,
                 const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT save_mean,
                 const float *KERN_RESTRICT save_invstd, unsigned accum))

/* SiLU forward over count elements: y = x * sigmoid(x). May run in place (y == x). */
KERN_OP(silu_fwd, (struct kern_ctx *ctx, float *y, const float *x, size_t count))

/*
 * SiLU backward: dx (=|+=) dy * s * (1 + x * (1 - s)), s = sigmoid(x), from the SiLU input x.
 * Uses KERN_ACCUM_DX. dx may equal dy (in place, only without KERN_ACCUM_DX).
 */
KERN_OP(silu_bwd, (struct kern_ctx *ctx, float *dx, const float *dy, const float *KERN_RESTRICT x,
                   size_t count, unsigned accum))

/*
 * Fused BN (training) + SiLU: y = silu(bn(x)); same arguments and updates as
 * kern_ref_bn_fwd_train. The BN output is not stored: the backward recomputes it from x.
 */
KERN_OP(bn_silu_fwd_train, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                            float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                            float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                            const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                            const float *KERN_RESTRICT beta))

/* Fused BN (eval) + SiLU: y = silu(bn_eval(x)). */
KERN_OP(bn_silu_fwd_eval, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                           const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                           const float *KERN_RESTRICT beta, const float *KERN_RESTRICT running_mean,
                           const float *KERN_RESTRICT running_var))

/*
 * Backward of kern_ref_bn_silu_fwd_train, given dy = dL/dy of the SiLU output and the BN input
 * x (beta is needed to recompute the SiLU input). Gradients as in kern_ref_bn_bwd.
 */
KERN_OP(bn_silu_bwd, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT dx,
                      float *KERN_RESTRICT dgamma, float *KERN_RESTRICT dbeta,
                      const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x,
                      const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                      const float *KERN_RESTRICT save_mean, const float *KERN_RESTRICT save_invstd,
                      unsigned accum))

/* --- Batch norm in phases, for SyncBatchNorm --- */

/* Forward phase 1: sums (KERN_BN_SUMS_LEN(d->c), overwritten) = (sum x, sum x^2, n hw). */
KERN_OP(bn_stats, (struct kern_ctx *ctx, const struct kern_bn *d, double *KERN_RESTRICT sums,
                   const float *KERN_RESTRICT x))

/* Forward phase 2: y = bn(x) with the summed statistics (see FORWARD APPLY). */
KERN_OP(bn_fwd_apply, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                       float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                       float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                       const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                       const float *KERN_RESTRICT beta, const double *KERN_RESTRICT sums))

/* Forward phase 2 with SiLU: y = silu(bn(x)); as kern_ref_bn_fwd_apply. */
KERN_OP(bn_silu_fwd_apply, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                            float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                            float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                            const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                            const float *KERN_RESTRICT beta, const double *KERN_RESTRICT sums))

/* Backward phase 1 (BN): sums = (sum dy, sum dy xhat, n hw); local dgamma, dbeta. */
KERN_OP(bn_bwd_reduce, (struct kern_ctx *ctx, const struct kern_bn *d, double *KERN_RESTRICT sums,
                        float *KERN_RESTRICT dgamma, float *KERN_RESTRICT dbeta,
                        const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x,
                        const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                        const float *KERN_RESTRICT save_mean,
                        const float *KERN_RESTRICT save_invstd, unsigned accum))

/* Backward phase 1 (BN+SiLU, dy the gradient of the SiLU output): as above with dz. */
KERN_OP(bn_silu_bwd_reduce, (struct kern_ctx *ctx, const struct kern_bn *d,
                             double *KERN_RESTRICT sums, float *KERN_RESTRICT dgamma,
                             float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
                             const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                             const float *KERN_RESTRICT beta, const float *KERN_RESTRICT save_mean,
                             const float *KERN_RESTRICT save_invstd, unsigned accum))

/* Backward phase 2 (BN): dx from the summed (sum dy, sum dy xhat, N). KERN_ACCUM_DX. */
KERN_OP(bn_bwd_apply, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT dx,
                       const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x,
                       const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                       const float *KERN_RESTRICT save_mean, const float *KERN_RESTRICT save_invstd,
                       const double *KERN_RESTRICT sums, unsigned accum))

/* Backward phase 2 (BN+SiLU): dx from the summed (sum dz, sum dz xhat, N). KERN_ACCUM_DX. */
KERN_OP(bn_silu_bwd_apply, (struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT dx,
                            const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x,
                            const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                            const float *KERN_RESTRICT save_mean,
                            const float *KERN_RESTRICT save_invstd,
                            const double *KERN_RESTRICT sums, unsigned accum))

/* --- BN + SiLU + residual add, fused (the YOLOv5 bottleneck's x + cv2(cv1(x))) --- */

/*
 * y = silu(bn(x)) + r in one pass: the three BN+SiLU forwards above (training, eval, and the
 * SyncBatchNorm apply phase) with a residual r (n, c, hw) added to the SiLU output, so that the
 * SiLU output is never stored. Every parameter, update and error is the unfused op's; r comes
 * last. The result is bit for bit that of the unfused composition on the same backend:
 * bn_silu_fwd_* into y, then add_fwd(y, y, r) (the SiLU output is rounded to float before the
 * add; no fused multiply-add across the two).
 * STRIDES. y steps d->y_nstride elements from one image to the next and r steps d->r_nstride
 * (0: c hw, dense), so either may be a channel slice of a wider tensor: element (i, ch, p) of y
 * is y[i y_nstride + ch hw + p]; elements between the slices are never touched. x is dense.
 * -EINVAL also for a nonzero stride below c hw, or a NULL r.
 * ALIASING. y must not overlap x or r (the prototypes carry KERN_RESTRICT).
 * BACKWARD. No op of its own: d(sum)/d(silu output) = 1, so kern_ref_bn_silu_bwd (or the
 * phased backward) reads the sum's gradient as dy, and r's gradient is the sum's too.
 */
KERN_OP(bn_silu_add_fwd_train, (struct kern_ctx *ctx, const struct kern_bn *d,
                                float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                                float *KERN_RESTRICT save_invstd, float *KERN_RESTRICT running_mean,
                                float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                                const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                                const float *KERN_RESTRICT r))

/* Eval: y = silu(bn_eval(x)) + r; as kern_ref_bn_silu_fwd_eval. */
KERN_OP(bn_silu_add_fwd_eval, (struct kern_ctx *ctx, const struct kern_bn *d,
                               float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                               const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                               const float *KERN_RESTRICT running_mean,
                               const float *KERN_RESTRICT running_var,
                               const float *KERN_RESTRICT r))

/* SyncBatchNorm forward phase 2: y = silu(bn(x)) + r with the summed statistics; as
 * kern_ref_bn_silu_fwd_apply. */
KERN_OP(bn_silu_add_fwd_apply, (struct kern_ctx *ctx, const struct kern_bn *d,
                                float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                                float *KERN_RESTRICT save_invstd, float *KERN_RESTRICT running_mean,
                                float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                                const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                                const double *KERN_RESTRICT sums, const float *KERN_RESTRICT r))

/* --- BN + SiLU (+ residual) on 16-bit activations, NCHW or NHWC (see above) --- */

/* Forward phase 1: this backend's sums over x. */
KERN_OP(bnx_stats, (struct kern_ctx *ctx, const struct kern_bnx *d, double *KERN_RESTRICT sums,
                    const uint16_t *KERN_RESTRICT x))

/* Forward phase 2: y = silu(x a + b) (+ r) from the summed statistics; save_mean, save_invstd
 * (may be NULL), the running update (running_mean NULL: none), as kern_ref_bn_silu_fwd_apply. */
KERN_OP(bnx_silu_apply, (struct kern_ctx *ctx, const struct kern_bnx *d, uint16_t *KERN_RESTRICT y,
                         float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                         float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                         const uint16_t *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                         const float *KERN_RESTRICT beta, const double *KERN_RESTRICT sums,
                         const uint16_t *KERN_RESTRICT r))

/* Backward phase 1: sums = (sum dz, sum dz xhat, N); dgamma += / = sum dz xhat, dbeta sum dz. */
KERN_OP(bnx_silu_bwd_reduce, (struct kern_ctx *ctx, const struct kern_bnx *d,
                              double *KERN_RESTRICT sums, float *KERN_RESTRICT dgamma,
                              float *KERN_RESTRICT dbeta, const uint16_t *KERN_RESTRICT dy,
                              const uint16_t *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                              const float *KERN_RESTRICT beta, const float *KERN_RESTRICT save_mean,
                              const float *KERN_RESTRICT save_invstd, unsigned accum))

/* Backward phase 2: dx from the summed (sum dz, sum dz xhat, N). KERN_ACCUM_DX. */
KERN_OP(bnx_silu_bwd_apply, (struct kern_ctx *ctx, const struct kern_bnx *d,
                             uint16_t *KERN_RESTRICT dx, const uint16_t *KERN_RESTRICT dy,
                             const uint16_t *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                             const float *KERN_RESTRICT beta, const float *KERN_RESTRICT save_mean,
                             const float *KERN_RESTRICT save_invstd,
                             const double *KERN_RESTRICT sums, unsigned accum))

/* --- Conv + BN + SiLU (+ residual add), eval, fused: inference --- */

/*
 * y = silu(bn_eval(conv(x, w))), plus r when r != NULL: bit for bit conv2d_fwd(c) into tmp
 * followed by bn_silu_fwd_eval(d) (bn_silu_add_fwd_eval with r) from tmp. c: the conv, no bias;
 * d: the BN of its output (d->n, d->c, d->hw equal to c->n, c->c_out, h_out w_out), y and r
 * strided by d->y_nstride and d->r_nstride as there. tmp: scratch of the conv output's size; a
 * backend that does not fuse writes the conv's output there; the CPU never touches it: it runs
 * the conv a band of output rows at a time and applies BN+SiLU (and r) to the band while the band
 * is in L2, so the conv's output never goes to memory. Workspace: conv2d_workspace_size(c).
 * -EINVAL as either op, and for c and d of different shapes.
 */
KERN_OP(conv2d_bn_silu_fwd_eval, (struct kern_ctx *ctx, const struct kern_conv2d *c,
                                  const struct kern_bn *d, float *KERN_RESTRICT y,
                                  float *KERN_RESTRICT tmp, const float *KERN_RESTRICT x,
                                  const float *KERN_RESTRICT w, const float *KERN_RESTRICT gamma,
                                  const float *KERN_RESTRICT beta,
                                  const float *KERN_RESTRICT running_mean,
                                  const float *KERN_RESTRICT running_var,
                                  const float *KERN_RESTRICT r))
#endif /* KERN_OP */
/* clang-format on */
