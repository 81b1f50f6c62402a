/*
 * kern: the tensor ops of the YOLOv5 trainer, forward and backward.
 *
 * Layer L1 (docs/design.md): includes nothing of this project. Every op has a CPU reference
 * (kern_ref_*, kernels/ref/, C + libm + OpenBLAS) and a CUDA twin (kern_cuda_*, kernels/cuda/,
 * kern_cuda.h) with exactly the same parameter list, so tests/kernels can run both on the same
 * inputs (style guide rule 25) and the trainer can call either through struct kern_ops.
 *
 * THE OP LIST. Every op is written once, as a row KERN_OP(name, (parameters)) with its contract
 * in the header of its family: kern_conv.h, kern_bn.h, kern_tensor.h, kern_loss.h,
 * kern_optim.h, kern_cast.h, kern_augment.h (included below; kern_ops.def lists them in table
 * order). From the rows come the kern_ref_* prototypes and the struct kern_ops members here, the
 * kern_cuda_* prototypes in kern_cuda.h, and both backend tables (designated initialisers), so
 * a table cannot name an op of another signature in a slot.
 * The CPU's blocked and SIMD passes (kernels/cpu/) are rows of a table of their own,
 * kern_cpu.h's struct kern_cpu_ops: plain functions without a context, each checked against
 * the reference it speeds up.
 *
 * TENSORS. Dense float32, NCHW (batch, channels, height, width), row-major, no padding between
 * rows or planes. Shapes are given in small descriptor structs (struct kern_conv2d, ...) or as
 * explicit counts. For the CPU reference every pointer is host memory; for the CUDA twins every
 * tensor pointer is device memory (descriptors and the scalar outputs documented as "host" stay
 * on the host). The caller owns every buffer; no op keeps a pointer after it returns.
 *
 * ALIASING. Unless an op says otherwise, outputs must not overlap inputs (the prototypes carry
 * KERN_RESTRICT). Elementwise ops that say "may run in place" accept dst == src exactly (never a
 * partial overlap).
 *
 * GRADIENTS. Every backward op takes `unsigned accum`, a mask of KERN_ACCUM_* bits:
 *   KERN_ACCUM_DX     set: input gradients are added (dx += ...); clear: overwritten (dx = ...).
 *   KERN_ACCUM_DPARAM set: parameter gradients (dw, db, dgamma, dbeta) are added; clear:
 *                     overwritten.
 * With a bit clear the old contents are never read (they may be NaN). Accumulation lets a
 * tensor read by several consumers (C3 input, SPPF, residuals) collect its gradient in place,
 * and lets parameter gradients sum over micro-batches.
 *
 * ERRORS. Functions returning int give 0 on success and a negative code on failure: -EINVAL for
 * bad arguments (NULL pointers, non-positive or inconsistent shapes; nothing is written),
 * -KERN_EWORKSPACE when the context's workspace is too small, -KERN_EBACKEND when a context of
 * the wrong backend is passed, -ENOMEM when an allocation at setup fails. kern_strerror() names
 * every code. The library never prints, never exits, never allocates inside an op.
 *
 * THREADS. A struct kern_ctx is used by one thread at a time (its workspace and worker threads
 * are shared by the ops called on it); different contexts may be used concurrently. A CPU
 * context with kern_ctx_opts.threads = n > 1 owns n - 1 sleeping worker threads and splits each
 * large op over n (conv2d by images, BN by channels, elementwise ops by ranges; small ops stay
 * on the caller). Splits are static, so results are bitwise reproducible run to run for a given
 * thread count; between thread counts only conv2d may differ in the last bits (dw is summed from
 * per-thread partials, and GEMM blocking differs). With threads <= 1 every op runs on the
 * calling thread and the conv2d GEMMs use OpenBLAS's own threads.
 */
#ifndef KERN_H
#define KERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define KERN_RESTRICT __restrict__
#else
#define KERN_RESTRICT restrict
#endif

#if defined(__GNUC__)
#define KERN_API __attribute__((visibility("default")))
#else
#define KERN_API
#endif

/* Error codes of this library, returned negated. Above every errno value; pinned once released. */
enum {
    KERN_EWORKSPACE = 2001, /* the context's workspace is smaller than the op needs */
    KERN_EBACKEND = 2002,   /* the context belongs to another backend (or it is not built) */
};

/* Returns a static, human-readable description of rc (any negative code, errno or KERN_E*). */
KERN_API const char *kern_strerror(int rc);

/* Bits of the `accum` argument of backward ops (see GRADIENTS above). */
#define KERN_ACCUM_DX     1u
#define KERN_ACCUM_DPARAM 2u

/* YOLOv5 constants (recipe S2, S3): BatchNorm2d eps and momentum, CIoU eps. */
#define KERN_BN_EPS      1e-3f
#define KERN_BN_MOMENTUM 0.03f
#define KERN_CIOU_EPS    1e-7f

/* ---------------------------------------------------------------------------------------- */
/* Context: backend, threads, workspace                                                     */

enum { KERN_BACKEND_CPU = 0, KERN_BACKEND_CUDA = 1 };

struct kern_ctx;
struct kern_plan; /* kern_plan.h: which cuDNN algorithm each conv pass runs */

struct kern_ctx_opts {
    int backend;             /* KERN_BACKEND_CPU (kern_ref_*) or KERN_BACKEND_CUDA (kern_cuda_*) */
    int threads;             /* CPU: threads per op, caller included (0, 1: caller only; > 1 sets
                                OpenBLAS to one thread, process-wide, so the pools do not fight) */
    int device;              /* CUDA: device ordinal; ignored on CPU */
    void *workspace;         /* borrowed scratch (device memory for CUDA), or NULL for none yet */
    size_t workspace_size;   /* bytes at workspace; 0 when workspace is NULL */
    int any_algo;            /* CUDA: each conv may take a non-deterministic algorithm
                                (PyTorch's cudnn.deterministic False); 0: a deterministic one where
                                there is one, as ultralytics' train.py asks
                                (init_seeds(deterministic=True)); ignored on CPU */
    struct kern_plan *plans; /* CUDA: borrowed conv plan table (kern_plan.h), or NULL: each
                                conv pass takes its entry there when it fits, and every choice
                                made is put there; ignored on CPU */
    int tune;                /* CUDA: a pass the table lacks is timed (cudnnFind*) rather than
                                ranked by cuDNN's heuristics; 0: never time (reproducible) */
};

/* Fills *o with the defaults: CPU backend, threads 0 (caller only), device 0, no workspace. */
KERN_API void kern_ctx_opts_default(struct kern_ctx_opts *o);

/*
 * Creates a context (and, for threads > 1, its worker threads). opts may be NULL for the defaults.
 * The workspace in opts, if any, is borrowed: it must stay valid and unused by others until
 * kern_ctx_destroy or until replaced by kern_ctx_set_workspace. On success *out owns the new
 * context; returns 0. Errors: -EINVAL (bad options, threads > 256), -KERN_EBACKEND (backend not
 * built into this library), -ENOMEM, -EAGAIN (a worker thread could not be started).
 */
KERN_API int kern_ctx_create(const struct kern_ctx_opts *opts, struct kern_ctx **out);

/* Destroys ctx and frees the workspace it owns (never a borrowed one). Accepts NULL. */
KERN_API void kern_ctx_destroy(struct kern_ctx *ctx);

/* The CPUs this process may run on (its affinity mask, so taskset and cgroup cpusets count),
 * at least 1: what a default thread count is made from. Thread-safe. */
KERN_API int kern_cpu_count(void);

/* The threads a BLAS call made now would use (OpenBLAS's setting; 1 when the BLAS does not
 * say): 1 once a context with threads > 1 exists, so the two never oversubscribe. */
KERN_API int kern_blas_threads(void);

/* The BLAS kernels the CPU ops use, for a log line: OpenBLAS's core name (e.g. "SkylakeX"), with
 * a note when this library chose it because OpenBLAS fell back to Prescott's SSE3 kernels on a
 * CPU it does not know (kern_ctx_create does that once, see kern_ctx.c); "not OpenBLAS"
 * otherwise. Static storage. Thread-safe. */
KERN_API const char *kern_blas_core(void);

/* Returns the backend of ctx (KERN_BACKEND_*), or -EINVAL for NULL. */
KERN_API int kern_ctx_backend(const struct kern_ctx *ctx);

/* The threads that run one of ctx's CPU ops, caller included (>= 1), or -EINVAL for NULL. */
KERN_API int kern_ctx_threads(const struct kern_ctx *ctx);

/*
 * Makes sure ctx has at least `bytes` of workspace, allocating a context-owned buffer if the
 * current one is smaller (a borrowed buffer is then dropped, not freed). Call it at setup with
 * the maximum over all layers of kern_*_conv2d_workspace_size; ops never allocate.
 * Invalidates nothing the caller holds. Errors: -EINVAL, -ENOMEM (the old workspace is kept).
 */
KERN_API int kern_ctx_reserve(struct kern_ctx *ctx, size_t bytes);

/*
 * Replaces the workspace with a borrowed buffer of `bytes` (NULL, 0 for none); frees a
 * context-owned one. The buffer must be 16-byte aligned and stay valid while ctx uses it.
 * Errors: -EINVAL (NULL ctx, misaligned buffer, or NULL with bytes > 0).
 */
KERN_API int kern_ctx_set_workspace(struct kern_ctx *ctx, void *buf, size_t bytes);

/* Returns the workspace size of ctx in bytes (0 for NULL). */
KERN_API size_t kern_ctx_workspace_size(const struct kern_ctx *ctx);

/*
 * Tensor memory of ctx's backend, so that a caller (the trainer's net) plans its arenas once and
 * runs unchanged on either backend: host memory (64-byte aligned) for CPU contexts, device memory
 * (cudaMalloc, 256-byte aligned) for CUDA contexts.
 *
 * kern_mem_alloc: *out receives `bytes` of zeroed memory owned by the caller (free with
 * kern_mem_free on a context of the same backend and device, never with free()). bytes 0 gives
 * NULL and 0. On the CPU, blocks from 1 MiB on are anonymous mappings: the pages are zero when
 * first touched and cost nothing until then.
 * Errors: -EINVAL (NULL ctx or out), -ENOMEM, -KERN_EBACKEND.
 * kern_mem_free: frees p (NULL ok). Waits for ctx's enqueued work first on CUDA.
 * kern_mem_copy: copies bytes between memory of the directions' kinds (KERN_COPY_*). CPU
 * contexts take every direction as host-to-host. On CUDA, host-to-device and device-to-device
 * copies are enqueued on ctx's stream (cudaMemcpyAsync): from pageable host memory the driver
 * stages the source before the call returns, so it may be reused at once; from pinned memory
 * (cudaHostAlloc) the copy reads the source until it completes on the stream, so the source
 * must stay unchanged until the stream gets there (sync the context or wait on later work).
 * Device-to-host waits, so the host may read dst when it returns. Errors: -EINVAL, -EIO.
 * kern_mem_zero: zeroes bytes at p (ctx's kind of memory), enqueued on CUDA. Errors: -EINVAL,
 * -EIO.
 */
enum { KERN_COPY_H2D = 1, KERN_COPY_D2H = 2, KERN_COPY_D2D = 3 };
KERN_API int kern_mem_alloc(struct kern_ctx *ctx, size_t bytes, void **out);
KERN_API void kern_mem_free(struct kern_ctx *ctx, void *p);
KERN_API int kern_mem_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir);
KERN_API int kern_mem_zero(struct kern_ctx *ctx, void *p, size_t bytes);

/* ---------------------------------------------------------------------------------------- */
/* Tensor dtypes and layouts (AMP)                                                          */

/* The element types of the reduced-precision ops (kern_conv.h, kern_cast.h) and the tensor
 * layouts of the lowp convolutions. */
enum { KERN_DT_F32 = 0, KERN_DT_BF16 = 1, KERN_DT_F16 = 2 };
enum { KERN_LAYOUT_NCHW = 0, KERN_LAYOUT_NHWC = 1 };

/* ---------------------------------------------------------------------------------------- */
/* Graphs: a caller's sequence of ops captured once and replayed (one CUDA graph per step)  */

/*
 * A training step is a few thousand small launches; on the GPU their launch gaps cost more than
 * the work. A graph records the ops a caller's function enqueues on a context once and replays
 * them with one launch. The backend decides what recording means:
 *   CPU:  capture calls fn(arg) once and keeps (fn, arg); replay calls fn(arg) again. So a CPU
 *         "graph" is exactly a direct call (same results, same errors), and the trainer's code
 *         path is the same on both backends.
 *   CUDA: capture runs fn(arg) between cudaStreamBeginCapture and cudaStreamEndCapture on the
 *         context's stream (nothing executes while recording), instantiates the graph, then
 *         launches it once; replay is one cudaGraphLaunch on the stream (asynchronous, like the
 *         ops). Mode cudaStreamCaptureModeThreadLocal: an unsafe call (cudaMalloc, a
 *         synchronisation, ...) made by the capturing thread fails the capture, while other
 *         threads (the data loader's uploads, other devices' contexts) are not disturbed, as
 *         cudaStreamCaptureModeGlobal would do; Relaxed would let a cudaMalloc inside fn pass
 *         silently, uncaptured.
 * On both backends kern_graph_capture therefore has the effect of one call of fn(arg), and each
 * kern_graph_replay the effect of one more.
 *
 * WHAT A REPLAY SEES. The ops' arguments are frozen at capture: the same pointers, shapes, and
 * host scalars (lr, decay, ...) at every replay. Only the contents of memory change. So every
 * value that changes between steps must be read from backend memory that the caller rewrites
 * before each replay: the input batch, the targets and their count (kern_*_yolo_loss reads nt
 * from memory), the SGD / EMA scalars (struct kern_sgd_dyn through kern_sgd.dyn,
 * kern_*_ema_update_dyn). fn must take the same path at every call (no branch on step-dependent
 * host state) and must not read results on the host.
 *
 * CAPTURE-SAFE CUDA OPS. Every kern_cuda_* op that only enqueues kernels (and cuDNN / CUB calls)
 * on the stream: the BN family, SiLU, pool, upsample, concat, add, detect, bce_logits_bwd, CIoU,
 * kern_cuda_yolo_loss (its scratch sized at setup), sgd_step, optim_sumsq, ema_update(_dyn),
 * amp_unscale, the casts, the aug ops; kern_mem_zero; kern_mem_copy D2D; conv2d fwd / bwd_data /
 * bwd_filter / bwd_bias and kern_cuda_conv2d_workspace_size ONCE THEIR SHAPE IS PLANNED (called
 * before, outside the capture). NOT capture-safe (the capture fails with -ENOTSUP):
 *   - kern_cuda_bce_logits_fwd (waits on the stream to return a host float; use
 *     kern_cuda_yolo_loss, whose outputs stay on the device);
 *   - the first conv2d op or kern_cuda_conv2d_workspace_size of a new shape (creates the cuDNN
 *     handle and plans it: cuDNN's heuristics, or cudnnFind*, which allocates and
 *     synchronises);
 *   - kern_mem_alloc, kern_mem_free, kern_ctx_reserve, kern_ctx_set_workspace (cudaMalloc /
 *     cudaFree / synchronise), kern_ctx_create / kern_ctx_destroy;
 *   - kern_mem_copy D2H (it waits), kern_cuda_ctx_sync, and any cudaMemcpy (non-async),
 *     cudaStreamSynchronize or cudaDeviceSynchronize of the caller's own;
 *   - kern_mem_copy H2D from pageable host memory (rejected or, at best, a copy that re-reads
 *     the same host address at every replay): upload the batch and the per-step scalars BEFORE
 *     the replay, from pinned memory, with kern_mem_copy on the context's stream.
 * Plan first: run fn once directly (it makes the conv plans and sizes the workspaces), then
 * capture.
 */
struct kern_graph;

/* The recorded function: enqueues ops on the context it was written for and returns 0 or the
 * first negative code of an op (and stops there). */
typedef int (*kern_graph_fn)(void *arg);

/*
 * Records fn(arg) on ctx as a graph and runs it once (see above). arg is borrowed: it must stay
 * valid (and, on the CPU, keep describing the same work) until kern_graph_destroy, because the
 * CPU replay calls fn(arg) again. On success *out owns the new graph; returns 0. On error *out
 * is NULL, nothing was run on CUDA (on the CPU, fn ran once and its error is returned), and ctx
 * is usable again:
 *   -EINVAL       NULL ctx, fn or out;
 *   -ENOTSUP      CUDA: an op inside fn is not capture-safe (cudaErrorStreamCaptureUnsupported,
 *                 ...Invalidated, ...Implicit, ...); kern_cuda_ctx_last_error(ctx) names the CUDA
 *                 error and, when fn's op recorded one, the op;
 *   -EBUSY        CUDA: ctx's stream is already being captured (graphs do not nest);
 *   fn's own code CUDA: fn failed for another reason (-EINVAL, -KERN_EWORKSPACE, ...);
 *   -ENOMEM       the graph could not be allocated;
 *   -EIO          CUDA: instantiation or the first launch failed (kern_cuda_ctx_last_error).
 * Thread safety: as any op on ctx (one thread at a time), and on CUDA the same thread for the
 * whole capture.
 */
KERN_API int kern_graph_capture(struct kern_ctx *ctx, kern_graph_fn fn, void *arg,
                                struct kern_graph **out);

/*
 * Runs the recorded work once more on its context: CPU, fn(arg) again, returning its code; CUDA,
 * one cudaGraphLaunch on the context's stream, returning as soon as it is enqueued (results
 * visible after kern_cuda_ctx_sync or a D2H kern_mem_copy; memory read by the graph may be
 * rewritten by work enqueued on the same stream after the replay). The context must still exist.
 * Errors: -EINVAL (NULL g), -EIO (CUDA launch failure, kern_cuda_ctx_last_error), fn's code (CPU).
 */
KERN_API int kern_graph_replay(struct kern_graph *g);

/* Frees g (after the replays enqueued on CUDA finish using it). Accepts NULL. Call it before
 * kern_ctx_destroy of its context. */
KERN_API void kern_graph_destroy(struct kern_graph *g);

/* ---------------------------------------------------------------------------------------- */
/* Queues and events: uploads on a copy queue, overlapped with the ops                      */

/*
 * A context has two queues. KERN_QUEUE_COMPUTE is where every op, kern_mem_copy / _zero and
 * kern_graph_* run (on CUDA the context's stream, kern_cuda_ctx_stream). KERN_QUEUE_COPY is a
 * second queue for copies only (on CUDA a second non-blocking stream, made with the context), so
 * that an upload of the next batch runs on the copy engine while the step's kernels run. The
 * queues are ordered against each other only through events: kern_event_record marks the work
 * enqueued so far on a queue; kern_event_wait makes later work on a queue wait for it, on the
 * device (the host does not wait); kern_event_sync / kern_event_query let the host wait / look.
 * The usual pattern (trainer/data/loader.c), with COPY / COMPUTE for KERN_QUEUE_*:
 *   copy thread:  kern_mem_copy_on(ctx, COPY, dev, pinned, n, KERN_COPY_H2D);
 *                 kern_event_record(ctx, COPY, up);
 *   ops thread:   kern_event_wait(ctx, COMPUTE, up); ops reading dev ...
 *   copy thread:  kern_event_sync(up) before it rewrites `pinned`.
 *
 * CPU CONTEXTS. Everything is synchronous: kern_mem_copy_on copies before it returns (memmove,
 * as kern_mem_copy), record and wait do nothing, every event is always complete (query 1, sync
 * 0). So code written for the CUDA pattern runs unchanged, and its results are the same bytes.
 *
 * CUDA CONTEXTS. Events are cudaEventDisableTiming events of the context's device; record is
 * cudaEventRecord on the queue's stream, wait cudaStreamWaitEvent, sync cudaEventSynchronize,
 * query cudaEventQuery. A never-recorded event is complete. Re-recording an event replaces what
 * it marks; a wait or sync uses what it marked when the wait / sync was called.
 *
 * THREADS. The ops use a context from one thread at a time (kern.h THREADS); these calls are
 * freer, so that loader workers can upload the next batch during the step:
 *   - kern_mem_copy_on, kern_event_record and kern_event_wait on KERN_QUEUE_COPY may be called
 *     from other threads than the one running ops on ctx, concurrently with it (several threads
 *     may enqueue copies; their relative order on the queue is then the order of the calls);
 *   - kern_event_create / _destroy / _sync / _query: from any thread, any number at once;
 *   - KERN_QUEUE_COMPUTE calls belong to the thread running ops on ctx.
 * One event is not recorded by two threads at once, nor destroyed while another call uses it:
 * the caller orders those (the loader's mutex does). On CUDA these calls make ctx's device the
 * calling thread's current device when it is not. Failures are described, per thread, by
 * kern_stream_last_error(); COMPUTE-queue failures also by kern_cuda_ctx_last_error (which
 * belongs to the ops thread: COPY-queue failures do not write it).
 *
 * GRAPH CAPTURE (kern.h "Graphs") records the COMPUTE queue only. While a capture is running:
 *   - other threads may use the COPY queue and the host-side event calls freely (the capture's
 *     mode is thread-local): the loader keeps uploading;
 *   - inside the captured fn, kern_event_record / kern_event_wait on KERN_QUEUE_COMPUTE are
 *     refused on CUDA (-EIO, and the capture fails with -ENOTSUP; a CPU graph is a call, where
 *     they do nothing): a recorded event would mark the capture, not a replay, and a wait on an
 *     event recorded outside the graph would be frozen into it. So wait on the compute queue
 *     BEFORE kern_graph_capture / kern_graph_replay: the replay is enqueued after the wait,
 *     so the wait covers it. kern_mem_copy_on on
 *     KERN_QUEUE_COMPUTE is kern_mem_copy, with its capture rules. COPY-queue calls from inside
 *     fn are not part of the graph (they run once, at capture): do not make them there.
 */
enum { KERN_QUEUE_COMPUTE = 0, KERN_QUEUE_COPY = 1 };

struct kern_event;

/*
 * kern_mem_copy on the given queue: the same directions, argument checks and memory rules (see
 * kern_mem_copy). KERN_QUEUE_COMPUTE is exactly kern_mem_copy. On KERN_QUEUE_COPY of a CUDA
 * context: enqueued on the copy stream; a pinned source must stay unchanged until the copy
 * completes (record an event after it, kern_event_sync before rewriting the source); a pageable
 * source may be reused at once (the driver staged it); D2H waits for the copy queue, so dst is
 * readable on return. Errors: -EINVAL (NULL ctx, NULL dst or src with bytes > 0, a bad
 * direction or queue; nothing copied), -EIO / -ENOMEM (CUDA failure), -KERN_EBACKEND.
 */
KERN_API int kern_mem_copy_on(struct kern_ctx *ctx, int queue, void *dst, const void *src,
                              size_t bytes, int dir);

/*
 * Creates an event of ctx (of its backend and device) into *out, owned by the caller (free with
 * kern_event_destroy before ctx is destroyed). New events are complete. Errors: -EINVAL (NULL
 * ctx or out), -ENOMEM, -EIO (cudaEventCreateWithFlags failed), -KERN_EBACKEND.
 */
KERN_API int kern_event_create(struct kern_ctx *ctx, struct kern_event **out);

/* Destroys ev (NULL ok). Work it marks may still be pending: it completes regardless. */
KERN_API void kern_event_destroy(struct kern_event *ev);

/*
 * Marks in ev the work enqueued so far on ctx's `queue` (KERN_QUEUE_*). ev must be an event of
 * ctx. Errors: -EINVAL (NULL ctx or ev, bad queue, ev of another context), -EIO (CUDA failure,
 * or KERN_QUEUE_COMPUTE while it is being captured; see GRAPH CAPTURE).
 */
KERN_API int kern_event_record(struct kern_ctx *ctx, int queue, struct kern_event *ev);

/*
 * Makes work enqueued later on ctx's `queue` wait, on the device, until the work ev marks is
 * done; returns at once. ev may be an event of another context of the same backend (on CUDA,
 * also of another device). Errors: -EINVAL (NULL ctx or ev, bad queue), -KERN_EBACKEND (ev of
 * another backend), -EIO (CUDA failure, or KERN_QUEUE_COMPUTE while it is being captured).
 */
KERN_API int kern_event_wait(struct kern_ctx *ctx, int queue, struct kern_event *ev);

/*
 * The host waits until the work ev marks is done. Returns 0, -EINVAL (NULL ev) or -EIO (the
 * marked work failed, or a CUDA failure).
 */
KERN_API int kern_event_sync(struct kern_event *ev);

/* Whether the work ev marks is done: 1 yes, 0 not yet; -EINVAL (NULL ev), -EIO. Never waits. */
KERN_API int kern_event_query(struct kern_event *ev);

/*
 * The calling thread's description of its last failed call of this section ("" when none; a
 * thread-local buffer, valid until that thread's next failing call). Never NULL.
 */
KERN_API const char *kern_stream_last_error(void);

/* ---------------------------------------------------------------------------------------- */
/* The op families (each header: descriptors, helpers, op rows)                             */

#include "kern_conv.h"
#include "kern_bn.h"
#include "kern_tensor.h"
#include "kern_loss.h"
#include "kern_optim.h"
#include "kern_cast.h"
#include "kern_augment.h"
#include "kern_cpu.h"

/* ---------------------------------------------------------------------------------------- */
/* The ops and the backend table                                                            */

/* kern_ref_NAME: the CPU reference of every op row (its contract in the family header). */
#define KERN_OP(name, params) KERN_API int kern_ref_##name params;
#include "kern_ops.def"
#undef KERN_OP

/*
 * One member per op, named and typed as its row, so that the trainer runs unchanged on either
 * backend: `const struct kern_ops *K = kern_ops_ref(); K->conv2d_fwd(ctx, ...)`. The CUDA backend
 * supplies kern_ops_cuda() (kern_cuda.h) with the kern_cuda_* twins. A table is immutable and
 * static; both are built from kern_ops.def with designated initialisers.
 */
struct kern_ops {
    int backend; /* KERN_BACKEND_* whose contexts these functions need */
#define KERN_OP(name, params) int(*name) params;
#include "kern_ops.def"
#undef KERN_OP
};

/* The CPU reference table (kern_ref_*); its contexts are KERN_BACKEND_CPU. Never NULL. */
KERN_API const struct kern_ops *kern_ops_ref(void);

#ifdef __cplusplus
}
#endif

#endif
