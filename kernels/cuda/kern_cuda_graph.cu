/*
 * Graphs, CUDA (kern.h "Graphs"): stream capture of a caller's function of ops on the context's
 * stream, instantiated once, replayed with one cudaGraphLaunch. No tensors, no gradients here:
 * the captured ops document their own shapes and accumulation.
 *
 * Capture mode: cudaStreamCaptureModeThreadLocal. The capturing thread's unsafe calls (cudaMalloc,
 * synchronisations, legacy-stream copies) fail and invalidate the capture, which is the mistake
 * we want reported; other threads (the loader uploading the next batch on its own stream, the
 * contexts of other GPUs) keep working, which Global mode would forbid for the whole capture.
 *
 * Errors: the ops map every CUDA failure to -EIO, so whether fn failed because an op is not
 * capture-safe is read from the capture itself: a stream left Invalidated, or an EndCapture
 * error of the capture family, gives -ENOTSUP. The first failure text recorded while capturing
 * (the op's, "bce_logits_fwd: operation not permitted when stream is capturing") is kept in
 * kern_cuda_ctx_last_error. Capture errors are not sticky, but they stay in the thread's last
 * error: it is cleared so that the next op's launch check does not report it again.
 */
#include <stdio.h>
#include <string.h>

#include "kern_cuda_internal.h"

static bool graph_capture_error(cudaError_t e)
{
    switch (e) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorCapturedEvent:
        return true;
    default:
        return false;
    }
}

/* Records "kern_graph_capture: <first failure while capturing, or e>" as the context's error. */
static void graph_note(struct kern_ctx *ctx, const char *first, cudaError_t e)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    if (first[0])
        snprintf(st->err, KERN_CUDA_ERRLEN, "kern_graph_capture: not capture-safe: %s", first);
    else
        snprintf(st->err, KERN_CUDA_ERRLEN, "kern_graph_capture: not capture-safe: %s (%s)",
                 cudaGetErrorString(e), cudaGetErrorName(e));
}

int kern_cuda_graph_capture(struct kern_ctx *ctx, kern_graph_fn fn, void *arg, void **exec)
{
    if (exec) *exec = NULL;
    KERN_CHECK_CUDA_CTX(ctx);
    if (!fn || !exec) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(st->stream, &cs);
    if (e != cudaSuccess)
        return kern_cuda_fail(ctx, e, "kern_graph_capture: cudaStreamIsCapturing");
    if (cs != cudaStreamCaptureStatusNone) return -EBUSY;
    e = cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return kern_cuda_fail(ctx, e, "kern_graph_capture: cudaStreamBeginCapture");
    st->err[0] = '\0';
    const int frc = fn(arg);
    char first[KERN_CUDA_ERRLEN];
    memcpy(first, st->err, sizeof first);
    cs = cudaStreamCaptureStatusNone;
    (void)cudaStreamIsCapturing(st->stream, &cs);
    cudaGraph_t graph = NULL;
    const cudaError_t end = cudaStreamEndCapture(st->stream, &graph);
    (void)cudaGetLastError(); /* not sticky; keep it from failing the next op's launch check */
    /* A refused call may fail only itself, leaving the capture active: its recorded text
     * (kern_cuda_fail's "where: text (cudaErrorName)") still names the capture error. */
    const bool refused = frc < 0 && (strstr(first, "(cudaErrorStreamCapture") ||
                                     strstr(first, "(cudaErrorCapturedEvent"));
    if (cs == cudaStreamCaptureStatusInvalidated || graph_capture_error(end) || refused) {
        if (graph) cudaGraphDestroy(graph);
        graph_note(ctx, first, end);
        return -ENOTSUP;
    }
    if (frc < 0 || end != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        return frc < 0 ? frc : kern_cuda_fail(ctx, end, "kern_graph_capture: cudaStreamEndCapture");
    }
    cudaGraphExec_t ge = NULL;
    e = cudaGraphInstantiateWithFlags(&ge, graph, 0);
    cudaGraphDestroy(graph); /* the executable graph keeps its own copy */
    if (e != cudaSuccess) return kern_cuda_fail(ctx, e, "kern_graph_capture: instantiate");
    /* Capturing ran nothing: this launch is the one call of fn that capture stands for. */
    e = cudaGraphLaunch(ge, st->stream);
    if (e != cudaSuccess) {
        cudaGraphExecDestroy(ge);
        return kern_cuda_fail(ctx, e, "kern_graph_capture: cudaGraphLaunch");
    }
    *exec = (void *)ge;
    return 0;
}

int kern_cuda_graph_replay(struct kern_ctx *ctx, void *exec)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!exec) return -EINVAL;
    const cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, kern_cuda_st(ctx)->stream);
    return e == cudaSuccess ? 0 : kern_cuda_fail(ctx, e, "kern_graph_replay");
}

void kern_cuda_graph_destroy(struct kern_ctx *ctx, void *exec)
{
    if (!ctx || ctx->backend != KERN_BACKEND_CUDA || !exec) return;
    /* cudaGraphExecDestroy does not wait for launches in flight on its own. */
    cudaStreamSynchronize(kern_cuda_st(ctx)->stream);
    cudaGraphExecDestroy((cudaGraphExec_t)exec);
}
