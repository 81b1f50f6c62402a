/*
 * Queues and events, CUDA (kern.h "Queues and events"; called by kernels/ref/kern_stream.c). No
 * tensors, no gradients here. KERN_QUEUE_COMPUTE is the context's stream, KERN_QUEUE_COPY the
 * copy stream made with the context (kern_cuda_ctx.cu); events are cudaEventDisableTiming (no
 * timestamp: recording and waiting cost less, and nothing here times).
 *
 * Threads: COPY-queue calls come from a loader thread while the ops thread runs the step, so
 * they never write the context's error text (the ops thread's); the caller's text buffer is the
 * calling thread's own (kern_stream_last_error). CUDA keeps a current device per thread: each
 * call makes ctx's device current first, since the loader thread never called kern_ctx_create,
 * and an event is created on, and must be recorded on a stream of, the current device.
 *
 * Capture: kern_graph_capture (cudaStreamCaptureModeThreadLocal) captures the compute stream.
 * An event recorded there would mark the capture, not a replay, and a wait there on an event
 * from outside the graph would be frozen into it, so both are refused with a capture error text
 * that kern_cuda_graph.cu turns into -ENOTSUP. The copy stream is never captured: other threads
 * keep using it during a capture.
 */
#include <stdio.h>
#include <string.h>

#include "kern_cuda_internal.h"

/* Writes "what: text (name)" for e into err and maps e as kern_cuda_fail does. */
static int note(char *err, size_t cap, cudaError_t e, const char *what)
{
    if (err && cap)
        snprintf(err, cap, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* As note; a COMPUTE-queue failure is the ops thread's, so it also goes to the context. */
static int fail_on(struct kern_ctx *ctx, int queue, char *err, size_t cap, cudaError_t e,
                   const char *what)
{
    if (queue == KERN_QUEUE_COMPUTE) (void)kern_cuda_fail(ctx, e, what);
    return note(err, cap, e, what);
}

static int arg_error(char *err, size_t cap, int rc, const char *what)
{
    if (err && cap) snprintf(err, cap, "%s: %s", what, kern_strerror(rc));
    return rc;
}

static bool queue_ok(int queue)
{
    return queue == KERN_QUEUE_COMPUTE || queue == KERN_QUEUE_COPY;
}

static cudaError_t use_device(int device)
{
    int cur = -1;
    const cudaError_t e = cudaGetDevice(&cur);
    if (e != cudaSuccess) return e;
    return cur == device ? cudaSuccess : cudaSetDevice(device);
}

static cudaStream_t queue_stream(struct kern_ctx *ctx, int queue)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    return queue == KERN_QUEUE_COPY ? st->copy_stream : st->stream;
}

/* cudaSuccess, or the capture error when the compute stream is being captured. */
static cudaError_t not_capturing(struct kern_ctx *ctx, int queue)
{
    if (queue != KERN_QUEUE_COMPUTE) return cudaSuccess;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const cudaError_t e = cudaStreamIsCapturing(kern_cuda_st(ctx)->stream, &cs);
    if (e != cudaSuccess) return e;
    return cs == cudaStreamCaptureStatusNone ? cudaSuccess : cudaErrorStreamCaptureUnsupported;
}

int kern_cuda_mem_copy_on(struct kern_ctx *ctx, int queue, void *dst, const void *src, size_t bytes,
                          int dir, char *err, size_t cap)
{
    if (!ctx || !queue_ok(queue) || (bytes && (!dst || !src)) || dir < KERN_COPY_H2D ||
        dir > KERN_COPY_D2D)
        return arg_error(err, cap, -EINVAL, "kern_mem_copy_on");
    if (ctx->backend != KERN_BACKEND_CUDA)
        return arg_error(err, cap, -KERN_EBACKEND, "kern_mem_copy_on");
    if (!bytes) return 0;
    const cudaStream_t s = queue_stream(ctx, queue);
    const cudaMemcpyKind kind = dir == KERN_COPY_H2D   ? cudaMemcpyHostToDevice
                                : dir == KERN_COPY_D2H ? cudaMemcpyDeviceToHost
                                                       : cudaMemcpyDeviceToDevice;
    cudaError_t e = use_device(ctx->device);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, kind, s);
    /* As kern_mem_copy: the host may read a download's dst when the call returns. */
    if (e == cudaSuccess && dir == KERN_COPY_D2H) e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? 0 : fail_on(ctx, queue, err, cap, e, "kern_mem_copy_on");
}

int kern_cuda_event_create(struct kern_ctx *ctx, void **ev, char *err, size_t cap)
{
    if (ev) *ev = NULL;
    if (!ctx || !ev) return arg_error(err, cap, -EINVAL, "kern_event_create");
    if (ctx->backend != KERN_BACKEND_CUDA)
        return arg_error(err, cap, -KERN_EBACKEND, "kern_event_create");
    cudaEvent_t e_ = NULL;
    cudaError_t e = use_device(ctx->device);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&e_, cudaEventDisableTiming);
    if (e != cudaSuccess) return note(err, cap, e, "kern_event_create");
    *ev = (void *)e_;
    return 0;
}

void kern_cuda_event_destroy(void *ev)
{
    /* Released once the work it marks completes; nothing to wait for here. */
    if (ev) cudaEventDestroy((cudaEvent_t)ev);
}

int kern_cuda_event_record(struct kern_ctx *ctx, int queue, void *ev, char *err, size_t cap)
{
    if (!ctx || !ev || !queue_ok(queue)) return arg_error(err, cap, -EINVAL, "kern_event_record");
    if (ctx->backend != KERN_BACKEND_CUDA)
        return arg_error(err, cap, -KERN_EBACKEND, "kern_event_record");
    cudaError_t e = not_capturing(ctx, queue);
    if (e == cudaSuccess) e = use_device(ctx->device);
    if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)ev, queue_stream(ctx, queue));
    return e == cudaSuccess ? 0 : fail_on(ctx, queue, err, cap, e, "kern_event_record");
}

int kern_cuda_event_wait(struct kern_ctx *ctx, int queue, void *ev, char *err, size_t cap)
{
    if (!ctx || !ev || !queue_ok(queue)) return arg_error(err, cap, -EINVAL, "kern_event_wait");
    if (ctx->backend != KERN_BACKEND_CUDA)
        return arg_error(err, cap, -KERN_EBACKEND, "kern_event_wait");
    cudaError_t e = not_capturing(ctx, queue);
    if (e == cudaSuccess) e = use_device(ctx->device);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(queue_stream(ctx, queue), (cudaEvent_t)ev, 0);
    return e == cudaSuccess ? 0 : fail_on(ctx, queue, err, cap, e, "kern_event_wait");
}

int kern_cuda_event_sync(void *ev, char *err, size_t cap)
{
    if (!ev) return arg_error(err, cap, -EINVAL, "kern_event_sync");
    const cudaError_t e = cudaEventSynchronize((cudaEvent_t)ev);
    return e == cudaSuccess ? 0 : note(err, cap, e, "kern_event_sync");
}

int kern_cuda_event_query(void *ev, char *err, size_t cap)
{
    if (!ev) return arg_error(err, cap, -EINVAL, "kern_event_query");
    const cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) {
        /* Not a failure, but the runtime may keep it as the thread's last error, which the next
         * op's launch check (cudaGetLastError) would then report. */
        (void)cudaGetLastError();
        return 0;
    }
    return note(err, cap, e, "kern_event_query");
}
