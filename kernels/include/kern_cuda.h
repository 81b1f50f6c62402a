/*
 * kern CUDA backend: the kern_cuda_* twins of the kern_ref_* ops (kern.h), the CUDA op table and
 * the few CUDA-only context calls (stream, sync, device count).
 *
 * Shared by C and CUDA (.cu) files: extern "C" guards, no C-only syntax (restrict goes through
 * KERN_RESTRICT from kern.h), no CUDA types (the stream is handed out as void *).
 *
 * AVAILABILITY. kern_ops_cuda(), kern_cuda_device_count(), kern_cuda_ctx_stream() and
 * kern_cuda_ctx_sync() always exist: in a build without CUDA (HAVE_CUDA 0 in ffyolo_config.h)
 * kern_ops_cuda() returns NULL, kern_cuda_device_count() returns 0 and the context calls
 * return -KERN_EBACKEND. The kern_cuda_* op symbols exist only when HAVE_CUDA is 1; go through
 * the table (kern_ops_cuda()) to stay buildable either way.
 *
 * SEMANTICS. Every op has exactly its kern_ref_* twin's parameter list, argument checks, error
 * codes, accumulation rule (KERN_ACCUM_*) and documented result, with these differences:
 *   - tensor pointers are device memory; descriptors (struct kern_conv2d, ...) are host memory;
 *     the scalar `loss` of kern_cuda_bce_logits_fwd and `dloss` of its backward are host values;
 *   - ops are asynchronous: they enqueue work on the context's stream and return; results are
 *     visible to the host after kern_cuda_ctx_sync(ctx) (or any later work on that stream). The
 *     exception is kern_cuda_bce_logits_fwd, which must return a host float and so waits;
 *   - reductions (BN statistics, BCE) run in double in a fixed order: results are bitwise
 *     reproducible run to run, and match the CPU reference within float rounding, not bitwise;
 *   - a failed launch or CUDA/cuDNN call returns -EIO (-ENOMEM for device memory); the text of
 *     the last failure is kept for kern_cuda_ctx_last_error().
 * The CUDA context (kern_ctx_create with KERN_BACKEND_CUDA) owns one non-blocking stream, a
 * cuDNN handle, a small device scratch for reductions and the conv2d plan cache; its workspace
 * (kern_ctx_reserve / kern_ctx_set_workspace) is device memory.
 *
 * THREADS. As kern.h: one thread at a time per context. Contexts on the same device may be used
 * concurrently from different threads. kern_ctx_create makes the context's device current on
 * the creating thread; a thread that calls ops of a context on another device than its current
 * one must cudaSetDevice(ctx device) first (the ops do not switch, to keep launches cheap).
 */
#ifndef KERN_CUDA_H
#define KERN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The CUDA op table (kern_cuda_*); its functions need KERN_BACKEND_CUDA contexts. Static and
 * immutable. Returns NULL when this library was built without CUDA.
 */
KERN_API const struct kern_ops *kern_ops_cuda(void);

/*
 * Number of CUDA devices usable by this process (0 when the build has no CUDA, no driver is
 * installed, or no device is visible). Never fails; safe from any thread.
 */
KERN_API int kern_cuda_device_count(void);

/*
 * The cudaStream_t (as void *) on which every op of ctx runs, for the caller's own kernels,
 * copies and graph capture. Borrowed: valid until kern_ctx_destroy(ctx). NULL when ctx is NULL
 * or not a CUDA context.
 */
KERN_API void *kern_cuda_ctx_stream(struct kern_ctx *ctx);

/*
 * Waits until all work enqueued on ctx's stream is done. Returns 0, -EINVAL (NULL ctx),
 * -KERN_EBACKEND (not a CUDA context) or -EIO (a kernel failed; see kern_cuda_ctx_last_error).
 */
KERN_API int kern_cuda_ctx_sync(struct kern_ctx *ctx);

/*
 * A static or context-owned description of the last CUDA or cuDNN failure on ctx ("" when none),
 * valid until the next call on ctx. Never NULL.
 */
KERN_API const char *kern_cuda_ctx_last_error(const struct kern_ctx *ctx);

/* The twins of kern.h's ops; see there (and SEMANTICS above) for each. */
KERN_API int kern_cuda_conv2d_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                             size_t *bytes);
KERN_API int kern_cuda_conv2d_fwd(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                  float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                  const float *KERN_RESTRICT w, const float *KERN_RESTRICT bias);
KERN_API int kern_cuda_conv2d_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                       float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                                       const float *KERN_RESTRICT w, unsigned accum);
KERN_API int kern_cuda_conv2d_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                         float *KERN_RESTRICT dw, const float *KERN_RESTRICT dy,
                                         const float *KERN_RESTRICT x, unsigned accum);
KERN_API int kern_cuda_conv2d_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                       float *KERN_RESTRICT db, const float *KERN_RESTRICT dy,
                                       unsigned accum);

KERN_API int kern_cuda_bn_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d,
                                    float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                                    float *KERN_RESTRICT save_invstd,
                                    float *KERN_RESTRICT running_mean,
                                    float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                                    const float *KERN_RESTRICT gamma,
                                    const float *KERN_RESTRICT beta);
KERN_API int kern_cuda_bn_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d,
                                   float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                   const float *KERN_RESTRICT gamma,
                                   const float *KERN_RESTRICT beta,
                                   const float *KERN_RESTRICT running_mean,
                                   const float *KERN_RESTRICT running_var);
KERN_API int kern_cuda_bn_bwd(struct kern_ctx *ctx, const struct kern_bn *d,
                              float *KERN_RESTRICT dx, float *KERN_RESTRICT dgamma,
                              float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
                              const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                              const float *KERN_RESTRICT save_mean,
                              const float *KERN_RESTRICT save_invstd, unsigned accum);
KERN_API int kern_cuda_silu_fwd(struct kern_ctx *ctx, float *y, const float *x, size_t count);
KERN_API int kern_cuda_silu_bwd(struct kern_ctx *ctx, float *dx, const float *dy,
                                const float *KERN_RESTRICT x, size_t count, unsigned accum);
KERN_API int
kern_cuda_bn_silu_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                            float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                            float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                            const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                            const float *KERN_RESTRICT beta);
KERN_API int kern_cuda_bn_silu_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d,
                                        float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                        const float *KERN_RESTRICT gamma,
                                        const float *KERN_RESTRICT beta,
                                        const float *KERN_RESTRICT running_mean,
                                        const float *KERN_RESTRICT running_var);
KERN_API int kern_cuda_bn_silu_bwd(struct kern_ctx *ctx, const struct kern_bn *d,
                                   float *KERN_RESTRICT dx, float *KERN_RESTRICT dgamma,
                                   float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
                                   const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                                   const float *KERN_RESTRICT beta,
                                   const float *KERN_RESTRICT save_mean,
                                   const float *KERN_RESTRICT save_invstd, unsigned accum);

KERN_API int kern_cuda_maxpool2d_fwd(struct kern_ctx *ctx, const struct kern_pool2d *d,
                                     float *KERN_RESTRICT y, int32_t *KERN_RESTRICT idx,
                                     const float *KERN_RESTRICT x);
KERN_API int kern_cuda_maxpool2d_bwd(struct kern_ctx *ctx, const struct kern_pool2d *d,
                                     float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                                     const int32_t *KERN_RESTRICT idx, unsigned accum);
KERN_API int kern_cuda_upsample2x_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT y,
                                      const float *KERN_RESTRICT x, int planes, int h, int w);
KERN_API int kern_cuda_upsample2x_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                      const float *KERN_RESTRICT dy, int planes, int h, int w,
                                      unsigned accum);

KERN_API int kern_cuda_concat_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT y,
                                  const float *KERN_RESTRICT x, int n, int c_x, int hw, int c_y,
                                  int c_off);
KERN_API int kern_cuda_concat_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                  const float *KERN_RESTRICT dy, int n, int c_x, int hw, int c_y,
                                  int c_off, unsigned accum);
KERN_API int kern_cuda_add_fwd(struct kern_ctx *ctx, float *y, const float *a, const float *b,
                               size_t count);
KERN_API int kern_cuda_add_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                               const float *KERN_RESTRICT dy, size_t count, unsigned accum);

KERN_API int kern_cuda_detect_reshape_fwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                          float *KERN_RESTRICT p, const float *KERN_RESTRICT raw);
KERN_API int kern_cuda_detect_reshape_bwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                          float *KERN_RESTRICT draw, const float *KERN_RESTRICT dp,
                                          unsigned accum);
KERN_API int kern_cuda_detect_decode(struct kern_ctx *ctx, const struct kern_detect *d,
                                     float *KERN_RESTRICT out, const float *KERN_RESTRICT raw,
                                     const float *KERN_RESTRICT anchors);

KERN_API int kern_cuda_bce_logits_fwd(struct kern_ctx *ctx, float *loss,
                                      const float *KERN_RESTRICT x, const float *KERN_RESTRICT t,
                                      size_t rows, size_t cols, size_t ldx);
KERN_API int kern_cuda_bce_logits_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                      const float *KERN_RESTRICT x, const float *KERN_RESTRICT t,
                                      size_t rows, size_t cols, size_t ldx, float dloss,
                                      unsigned accum);
KERN_API int kern_cuda_ciou_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT ciou,
                                const float *KERN_RESTRICT b1, const float *KERN_RESTRICT b2,
                                size_t n);
KERN_API int kern_cuda_ciou_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT db1,
                                float *KERN_RESTRICT db2, const float *KERN_RESTRICT dciou,
                                const float *KERN_RESTRICT b1, const float *KERN_RESTRICT b2,
                                size_t n, unsigned accum);

/* The twins of kern.h's "Batch norm in phases" (SyncBatchNorm): the sums buffer is device memory
 * too. */
KERN_API int kern_cuda_bn_stats(struct kern_ctx *ctx, const struct kern_bn *d,
                                double *KERN_RESTRICT sums, const float *KERN_RESTRICT x);
KERN_API int
kern_cuda_bn_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                       float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                       float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                       const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                       const float *KERN_RESTRICT beta, const double *KERN_RESTRICT sums);
KERN_API int
kern_cuda_bn_silu_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                            float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                            float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                            const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                            const float *KERN_RESTRICT beta, const double *KERN_RESTRICT sums);
KERN_API int kern_cuda_bn_bwd_reduce(struct kern_ctx *ctx, const struct kern_bn *d,
                                     double *KERN_RESTRICT sums, float *KERN_RESTRICT dgamma,
                                     float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
                                     const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                                     const float *KERN_RESTRICT beta,
                                     const float *KERN_RESTRICT save_mean,
                                     const float *KERN_RESTRICT save_invstd, unsigned accum);
KERN_API int kern_cuda_bn_silu_bwd_reduce(
    struct kern_ctx *ctx, const struct kern_bn *d, double *KERN_RESTRICT sums,
    float *KERN_RESTRICT dgamma, float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
    const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
    const float *KERN_RESTRICT save_mean, const float *KERN_RESTRICT save_invstd, unsigned accum);
KERN_API int kern_cuda_bn_bwd_apply(struct kern_ctx *ctx, const struct kern_bn *d,
                                    float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                                    const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                                    const float *KERN_RESTRICT beta,
                                    const float *KERN_RESTRICT save_mean,
                                    const float *KERN_RESTRICT save_invstd,
                                    const double *KERN_RESTRICT sums, unsigned accum);
KERN_API int kern_cuda_bn_silu_bwd_apply(
    struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT dx,
    const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
    const float *KERN_RESTRICT beta, const float *KERN_RESTRICT save_mean,
    const float *KERN_RESTRICT save_invstd, const double *KERN_RESTRICT sums, unsigned accum);

/* --- optim --- */
/* The twins of kern.h's "Optimizer step, ..." ops. The segment table, sumsq, found_inf and every
 * buffer are device memory; the struct kern_sgd descriptor is host memory (its scalars travel as
 * kernel arguments). kern_cuda_optim_sumsq uses the context scratch for its block partials. The
 * SGD step, EMA, unscale and casts are bitwise equal to the CPU's (no FMA contraction); the sum
 * of squares matches within double rounding. Nothing waits for the host. */
KERN_API int kern_cuda_sgd_step(struct kern_ctx *ctx, const struct kern_sgd *d,
                                float *KERN_RESTRICT params, float *KERN_RESTRICT momentum,
                                float *KERN_RESTRICT ema, const float *KERN_RESTRICT grads,
                                const struct kern_optim_seg *KERN_RESTRICT seg,
                                const double *KERN_RESTRICT sumsq,
                                const int32_t *KERN_RESTRICT found_inf);
KERN_API int kern_cuda_optim_sumsq(struct kern_ctx *ctx, double *KERN_RESTRICT sumsq,
                                   const float *KERN_RESTRICT grads,
                                   const struct kern_optim_seg *KERN_RESTRICT seg, size_t n_seg,
                                   size_t total);
KERN_API int kern_cuda_ema_update(struct kern_ctx *ctx, float *KERN_RESTRICT ema,
                                  const float *KERN_RESTRICT x, size_t count, float decay,
                                  float weight);
KERN_API int kern_cuda_amp_unscale(struct kern_ctx *ctx, float *KERN_RESTRICT grads,
                                   const struct kern_optim_seg *KERN_RESTRICT seg, size_t n_seg,
                                   size_t total, float scale, int32_t *KERN_RESTRICT found_inf);
KERN_API int kern_cuda_cast_f32_bf16(struct kern_ctx *ctx, uint16_t *KERN_RESTRICT dst,
                                     const float *KERN_RESTRICT src, size_t count);
KERN_API int kern_cuda_cast_bf16_f32(struct kern_ctx *ctx, float *KERN_RESTRICT dst,
                                     const uint16_t *KERN_RESTRICT src, size_t count);
KERN_API int kern_cuda_cast_f32_f16(struct kern_ctx *ctx, uint16_t *KERN_RESTRICT dst,
                                    const float *KERN_RESTRICT src, size_t count);
KERN_API int kern_cuda_cast_f16_f32(struct kern_ctx *ctx, float *KERN_RESTRICT dst,
                                    const uint16_t *KERN_RESTRICT src, size_t count);

/* --- yololoss --- */

/*
 * The twins of kern.h's whole YOLOv5 loss. Every pointer but d and the p / dp arrays themselves
 * is device memory (targets, nt, out, scratch, p[l], dp[l]); nothing is read back, so the op is
 * asynchronous and graph-capturable. *nt and the rows are checked on the device: a bad count is
 * taken as 0 and bad rows are skipped, flagged in out[KERN_YOLO_OUT_STATUS] with NaN losses (the
 * reference returns -EINVAL). build_targets gives every (level, offset, anchor, target) a fixed
 * slot, so entry order is slot order; the last entry of a cell wins tobj by an atomicMax on the
 * slot; gradients are gathered per cell in slot order after a stable sort by cell, so results
 * are bitwise reproducible, and equal the reference's up to expf/atanf rounding.
 * kern_cuda_yolo_loss_scratch_size asks CUB for its sort's temporary size, which depends on the
 * device: it needs a visible device (-EIO without one) and ctx may be NULL.
 */
KERN_API int kern_cuda_yolo_loss_scratch_size(struct kern_ctx *ctx, const struct kern_yolo_loss *d,
                                              size_t *bytes);
KERN_API int kern_cuda_yolo_loss(struct kern_ctx *ctx, const struct kern_yolo_loss *d,
                                 float *const *dp, float *KERN_RESTRICT out, const float *const *p,
                                 const float *KERN_RESTRICT targets, const int *KERN_RESTRICT nt,
                                 void *scratch, size_t scratch_bytes, unsigned accum);

/* --- augment --- */
KERN_API int kern_cuda_aug_paste(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT canvas,
                                 const struct kern_aug_canvas *c);
KERN_API int kern_cuda_aug_warp(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT dst, int dst_w,
                                int dst_h, const uint8_t *KERN_RESTRICT src, int src_w, int src_h,
                                const double inv[9], int perspective, uint8_t border);
KERN_API int kern_cuda_aug_hsv(struct kern_ctx *ctx, uint8_t *img, int w, int h,
                               const struct kern_aug_hsv_lut *lut);
KERN_API int kern_cuda_aug_flip(struct kern_ctx *ctx, uint8_t *img, int w, int h, int lr, int ud);
KERN_API int kern_cuda_aug_mixup(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT img,
                                 const uint8_t *KERN_RESTRICT img2, size_t n, double r);
KERN_API int kern_cuda_aug_to_nchw(struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype,
                                   const uint8_t *KERN_RESTRICT hwc, int w, int h);
/* The descriptors travel as kernel parameters (no copy; graph-capturable): the host array may
 * be reused as soon as the call returns. */
KERN_API int kern_cuda_aug_batch(struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype, int s,
                                 const struct kern_aug_sample *samples, int n);

/* --- graph --- */
/* kern_ref_ema_update_dyn's twin: dyn is device memory, read by the kernel when it runs. */
KERN_API int kern_cuda_ema_update_dyn(struct kern_ctx *ctx, float *KERN_RESTRICT ema,
                                      const float *KERN_RESTRICT x, size_t count,
                                      const struct kern_sgd_dyn *KERN_RESTRICT dyn);
/*
 * The CUDA side of kern_graph_capture / _replay / _destroy (kern.h "Graphs"), called by
 * kernels/ref/kern_graph.c for CUDA contexts; callers use the kern_graph_* calls. capture: *exec
 * receives the instantiated graph (a cudaGraphExec_t), already launched once; the errors are
 * kern_graph_capture's. replay: one cudaGraphLaunch on ctx's stream (-EIO on failure). destroy:
 * waits for ctx's stream, then frees exec (NULL ok). CUDA builds only, as the ops.
 */
KERN_API int kern_cuda_graph_capture(struct kern_ctx *ctx, kern_graph_fn fn, void *arg,
                                     void **exec);
KERN_API int kern_cuda_graph_replay(struct kern_ctx *ctx, void *exec);
KERN_API void kern_cuda_graph_destroy(struct kern_ctx *ctx, void *exec);

/* --- lowp --- */
/*
 * The twins of kern.h's reduced-precision convs (kern_ref_conv2d_lowp_*): cuDNN with data type
 * BFLOAT16 / HALF (FLOAT for KERN_DT_F32), compute type FLOAT, CUDNN_TENSOR_OP_MATH (tensor
 * cores; FMA math for KERN_DT_F32, no TF32), tensor format NCHW or NHWC. Plans (descriptors,
 * algorithms, workspace sizes) are cached per (shape, dtype, layout), as the float32 ones: plan
 * every shape before a graph capture. Differences from the reference, inside the parity
 * tolerances: cuDNN's summation order; fwd with bias rounds twice (y = r(r(S) + b), cuDNN's
 * AddTensor on the reduced-type y); bwd_data with KERN_ACCUM_DX blends dx_old in cuDNN's
 * epilogue. bwd_filter and bwd_bias compute r(S) into the workspace (reduced type: the legacy
 * API wants dw in the input type) and one kernel widens it into (or adds it to) the float32
 * dw / db.
 */
KERN_API int kern_cuda_conv2d_lowp_workspace_size(struct kern_ctx *ctx,
                                                  const struct kern_conv2d_lowp *d, size_t *bytes);
KERN_API int kern_cuda_conv2d_lowp_fwd(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                       void *KERN_RESTRICT y, const void *KERN_RESTRICT x,
                                       const void *KERN_RESTRICT w, const void *KERN_RESTRICT bias);
KERN_API int kern_cuda_conv2d_lowp_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                            void *KERN_RESTRICT dx, const void *KERN_RESTRICT dy,
                                            const void *KERN_RESTRICT w, unsigned accum);
KERN_API int kern_cuda_conv2d_lowp_bwd_filter(struct kern_ctx *ctx,
                                              const struct kern_conv2d_lowp *d,
                                              float *KERN_RESTRICT dw, const void *KERN_RESTRICT dy,
                                              const void *KERN_RESTRICT x, unsigned accum);
KERN_API int kern_cuda_conv2d_lowp_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                            float *KERN_RESTRICT db, const void *KERN_RESTRICT dy,
                                            unsigned accum);

/* --- resadd --- */
/*
 * The twins of kern.h's BN + SiLU + residual add (kern_ref_bn_silu_add_fwd_*): the BN forward's
 * statistics and coefficient kernels (kern_cuda_bn.cu, kern_cuda_bn_sync.cu), then one apply
 * kernel that writes silu(x a + b) + r. The product of the SiLU is rounded before the add
 * (__fmul_rn, no FMA), so the result is bit for bit that of kern_cuda_bn_silu_fwd_* followed by
 * kern_cuda_add_fwd; against the CPU reference it differs as the BN+SiLU ops do.
 */
KERN_API int
kern_cuda_bn_silu_add_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d,
                                float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                                float *KERN_RESTRICT save_invstd, float *KERN_RESTRICT running_mean,
                                float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                                const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                                const float *KERN_RESTRICT r);
KERN_API int kern_cuda_bn_silu_add_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d,
                                            float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                            const float *KERN_RESTRICT gamma,
                                            const float *KERN_RESTRICT beta,
                                            const float *KERN_RESTRICT running_mean,
                                            const float *KERN_RESTRICT running_var,
                                            const float *KERN_RESTRICT r);
KERN_API int
kern_cuda_bn_silu_add_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d,
                                float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                                float *KERN_RESTRICT save_invstd, float *KERN_RESTRICT running_mean,
                                float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                                const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                                const double *KERN_RESTRICT sums, const float *KERN_RESTRICT r);

/* --- stride --- */
/* Channel slices (kern.h): the twins of kern_ref_upsample2x_ns_* and kern_ref_cast_*_ns. */
KERN_API int kern_cuda_upsample2x_ns_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT y,
                                         const float *KERN_RESTRICT x, int n, int c, int h, int w,
                                         size_t y_nstride, size_t x_nstride);
KERN_API int kern_cuda_upsample2x_ns_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                         const float *KERN_RESTRICT dy, int n, int c, int h, int w,
                                         size_t x_nstride, size_t y_nstride, unsigned accum);
KERN_API int kern_cuda_cast_f32_lowp_ns(struct kern_ctx *ctx, int dtype,
                                        uint16_t *KERN_RESTRICT dst, const float *KERN_RESTRICT src,
                                        int n, size_t inner, size_t src_nstride);
KERN_API int kern_cuda_cast_lowp_f32_ns(struct kern_ctx *ctx, int dtype, float *KERN_RESTRICT dst,
                                        const uint16_t *KERN_RESTRICT src, int n, size_t inner,
                                        size_t dst_nstride, unsigned accum);

/* --- stream --- */
/*
 * The CUDA side of kern.h "Queues and events", called by kernels/ref/kern_stream.c for CUDA
 * contexts (CUDA builds only, as the ops); callers use kern_mem_copy_on and kern_event_*. The
 * queues: KERN_QUEUE_COMPUTE is the context's stream, KERN_QUEUE_COPY its copy stream. ev is a
 * cudaEvent_t (cudaEventDisableTiming) as void *. Each call checks its arguments as the public
 * one, makes ctx's device current on the calling thread when it is not (any thread may call),
 * and on failure writes "what: CUDA text (name)" into err (cap bytes: the calling thread's
 * buffer behind kern_stream_last_error); KERN_QUEUE_COMPUTE failures also go to
 * kern_cuda_ctx_last_error. record / wait on KERN_QUEUE_COMPUTE while that stream is capturing
 * are refused with -EIO and a cudaErrorStreamCaptureUnsupported text (kern_graph_capture then
 * fails with -ENOTSUP). query returns 1 (done) or 0 (cudaErrorNotReady).
 */
KERN_API int kern_cuda_mem_copy_on(struct kern_ctx *ctx, int queue, void *dst, const void *src,
                                   size_t bytes, int dir, char *err, size_t cap);
KERN_API int kern_cuda_event_create(struct kern_ctx *ctx, void **ev, char *err, size_t cap);
KERN_API void kern_cuda_event_destroy(void *ev);
KERN_API int kern_cuda_event_record(struct kern_ctx *ctx, int queue, void *ev, char *err,
                                    size_t cap);
KERN_API int kern_cuda_event_wait(struct kern_ctx *ctx, int queue, void *ev, char *err, size_t cap);
KERN_API int kern_cuda_event_sync(void *ev, char *err, size_t cap);
KERN_API int kern_cuda_event_query(void *ev, char *err, size_t cap);

/* --- wcast --- */

#ifdef __cplusplus
}
#endif

#endif
