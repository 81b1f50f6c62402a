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
#include "kern_plan.h"

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

/*
 * Starts (on != 0) or stops the span a profiler started with --profile-from-start off records
 * (ncu, nsys: cudaProfilerStart / cudaProfilerStop), so that it sees the timed steps and not the
 * plan searches before them. A no-op without a profiler and in a build without CUDA.
 */
KERN_API void kern_cuda_profiler_range(int on);

/*
 * The current device's memory in use (total minus free, every process's and the context's own
 * included: what nvidia-smi shows) and its total, in bytes. Returns 0, or -KERN_EBACKEND without
 * CUDA or a device.
 */
KERN_API int kern_cuda_mem_info(size_t *used, size_t *total);

/*
 * cuDNN's whole view of one pass (op: KERN_PLAN_FWD, _DATA, _FILTER) of the dense convolution
 * d, for scripts/gpu-check's conv-probe: its heuristics' ranked list into heur (nothing run) and
 * every algorithm timed once by cudnnFind* into find (fastest first, each with its time, workspace
 * and determinism), at most KERN_PLAN_MAX_CANDS each, the counts in *nheur and *nfind. The
 * context's plans are not touched. Allocates and synchronises: not inside a graph capture.
 * Returns 0, -EINVAL (a bad shape, dtype, layout or op; x_nstride != 0), -KERN_EBACKEND (a CPU
 * context, or a build without cuDNN or CUDA), -EIO (cuDNN failed: kern_cuda_ctx_last_error).
 */
KERN_API int kern_cuda_conv2d_probe(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d, int op,
                                    struct kern_plan_cand *heur, int *nheur,
                                    struct kern_plan_cand *find, int *nfind);

/*
 * The conv passes ctx has planned so far, by how they were chosen (counts[KERN_PLAN_HOW_*]: from
 * the plan table, by cuDNN's heuristics, by a timed search). A slice's plan that takes its
 * dense twin's algorithms counts nowhere. Returns 0, -EINVAL, -KERN_EBACKEND (not a CUDA
 * context, or a build without cuDNN or CUDA).
 */
KERN_API int kern_cuda_conv_plan_counts(struct kern_ctx *ctx, int counts[3]);

/*
 * The twins of kern.h's ops: kern_cuda_NAME for every row of kern_ops.def, with the
 * kern_ref_NAME parameter list (the contract is the row's, with SEMANTICS above).
 */
#define KERN_OP(name, params) KERN_API int kern_cuda_##name params;
#include "kern_ops.def"
#undef KERN_OP

/*
 * What the CUDA twins add, by family:
 *
 * kern_conv.h, lowp: cuDNN with data type BFLOAT16 / HALF (FLOAT for KERN_DT_F32), compute type
 * FLOAT, CUDNN_TENSOR_OP_MATH (tensor cores; FMA math for KERN_DT_F32, no TF32), tensor format
 * NCHW or NHWC. Plans (descriptors, algorithms, workspace sizes) are cached per (shape, dtype,
 * layout), as the float32 ones: plan every shape before a graph capture. Differences from the
 * reference, inside the parity tolerances: cuDNN's summation order; fwd with bias rounds twice
 * (y = r(r(S) + b), cuDNN's AddTensor on the reduced-type y); bwd_data with KERN_ACCUM_DX blends
 * dx_old in cuDNN's epilogue. bwd_filter and bwd_bias compute r(S) into the workspace (reduced
 * type: the legacy API wants dw in the input type) and one kernel widens it into (or adds it
 * to) the float32 dw / db.
 *
 * kern_bn.h: in the SyncBatchNorm phases the sums buffer is device memory too. BN + SiLU +
 * residual add: the BN forward's statistics and coefficient kernels (kern_cuda_bn.cu,
 * kern_cuda_bn_sync.cu), then one apply kernel that writes silu(x a + b) + r; the product of the
 * SiLU is rounded before the add (__fmul_rn, no FMA), so the result is bit for bit that of
 * kern_cuda_bn_silu_fwd_* followed by kern_cuda_add_fwd; against the CPU reference it differs
 * as the BN+SiLU ops do.
 *
 * kern_loss.h, the whole YOLOv5 loss: every pointer but d and the p / dp arrays themselves is
 * device memory (targets, nt, out, scratch, p[l], dp[l]); nothing is read back, so the op is
 * asynchronous and graph-capturable. *nt and the rows are checked on the device: a bad count is
 * taken as 0 and bad rows are skipped, flagged in out[KERN_YOLO_OUT_STATUS] with NaN losses (the
 * reference returns -EINVAL). build_targets gives every (level, offset, anchor, target) a fixed
 * slot, so entry order is slot order; the last entry of a cell wins tobj by an atomicMax on the
 * slot; gradients are gathered per cell in slot order after a stable sort by cell, so results
 * are bitwise reproducible, and equal the reference's up to expf/atanf rounding.
 * kern_cuda_yolo_loss_scratch_size asks CUB for its sort's temporary size, which depends on the
 * device: it needs a visible device (-EIO without one) and ctx may be NULL.
 *
 * kern_optim.h, kern_cast.h: the segment table, sumsq, found_inf and every buffer are device
 * memory; the struct kern_sgd descriptor is host memory (its scalars travel as kernel
 * arguments); ema_update_dyn's dyn is device memory, read by the kernel when it runs.
 * kern_cuda_optim_sumsq uses the context scratch for its block partials. The SGD step, EMA,
 * unscale and casts are bitwise equal to the CPU's (no FMA contraction); the sum of squares
 * matches within double rounding. Nothing waits for the host.
 *
 * kern_augment.h: aug_batch's descriptors travel as kernel parameters (no copy;
 * graph-capturable): the host array may be reused as soon as the call returns.
 */

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

#ifdef __cplusplus
}
#endif

#endif
