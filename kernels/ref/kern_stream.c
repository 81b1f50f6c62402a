/*
 * Queues and events (kern.h "Queues and events"). No tensors here, no gradients. A CPU context
 * runs everything synchronously: a copy is a memmove before the call returns, so every event is
 * complete and record / wait have nothing to order. CUDA contexts go to
 * kernels/cuda/kern_cuda_stream.cu (the copy stream, cudaEvent_t); those hooks exist only in
 * CUDA builds, where alone a CUDA context can be made.
 *
 * Nothing here writes shared state on the CPU path (the event holds only its context), so the
 * calls that kern.h allows from a second thread need no lock; failure text is per thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffyolo_config.h"
#include "kern_internal.h"

#define STREAM_ERRLEN 256

#if HAVE_CUDA
/* The CUDA side (kern_cuda_stream.cu; declared for C and CUDA in kernels/include/kern_cuda.h, which
 * this library's include path does not reach). err: the calling thread's text buffer. */
int kern_cuda_mem_copy_on(struct kern_ctx *ctx, int queue, void *dst, const void *src, size_t bytes,
                          int dir, char *err, size_t cap);
int kern_cuda_event_create(struct kern_ctx *ctx, void **ev, char *err, size_t cap);
void kern_cuda_event_destroy(void *ev);
int kern_cuda_event_record(struct kern_ctx *ctx, int queue, void *ev, char *err, size_t cap);
int kern_cuda_event_wait(struct kern_ctx *ctx, int queue, void *ev, char *err, size_t cap);
int kern_cuda_event_sync(void *ev, char *err, size_t cap);
int kern_cuda_event_query(void *ev, char *err, size_t cap);
#endif

struct kern_event {
    struct kern_ctx *ctx; /* borrowed: the context it was created on, which outlives it */
    void *cu;             /* CUDA: the cudaEvent_t; NULL on the CPU */
};

/* The calling thread's last failure of this section. */
static _Thread_local char tl_err[STREAM_ERRLEN];

/* Notes "what: the code's name" for a failure found here (CUDA failures write their own). */
static int note(int rc, const char *what)
{
    snprintf(tl_err, sizeof tl_err, "%s: %s", what, kern_strerror(rc));
    return rc;
}

const char *kern_stream_last_error(void)
{
    return tl_err;
}

static int queue_ok(int queue)
{
    return queue == KERN_QUEUE_COMPUTE || queue == KERN_QUEUE_COPY;
}

int kern_mem_copy_on(struct kern_ctx *ctx, int queue, void *dst, const void *src, size_t bytes,
                     int dir)
{
    if (!ctx || !queue_ok(queue) || (bytes && (!dst || !src)) || dir < KERN_COPY_H2D ||
        dir > KERN_COPY_D2D)
        return note(-EINVAL, "kern_mem_copy_on");
    if (!bytes) return 0;
#if HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kern_cuda_mem_copy_on(ctx, queue, dst, src, bytes, dir, tl_err, sizeof tl_err);
#endif
    if (ctx->backend != KERN_BACKEND_CPU) return note(-KERN_EBACKEND, "kern_mem_copy_on");
    memmove(dst, src, bytes);
    return 0;
}

int kern_event_create(struct kern_ctx *ctx, struct kern_event **out)
{
    if (out) *out = NULL;
    if (!ctx || !out) return note(-EINVAL, "kern_event_create");
    if (ctx->backend != KERN_BACKEND_CPU && ctx->backend != KERN_BACKEND_CUDA)
        return note(-KERN_EBACKEND, "kern_event_create");
    struct kern_event *const ev = calloc(1, sizeof(*ev));
    if (!ev) return note(-ENOMEM, "kern_event_create");
    ev->ctx = ctx;
#if HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        const int rc = kern_cuda_event_create(ctx, &ev->cu, tl_err, sizeof tl_err);
        if (rc < 0) {
            free(ev);
            return rc;
        }
    }
#endif
    *out = ev;
    return 0;
}

void kern_event_destroy(struct kern_event *ev)
{
    if (!ev) return;
#if HAVE_CUDA
    if (ev->cu) kern_cuda_event_destroy(ev->cu);
#endif
    free(ev);
}

int kern_event_record(struct kern_ctx *ctx, int queue, struct kern_event *ev)
{
    if (!ctx || !ev || !queue_ok(queue) || ev->ctx != ctx)
        return note(-EINVAL, "kern_event_record");
#if HAVE_CUDA
    if (ev->cu) return kern_cuda_event_record(ctx, queue, ev->cu, tl_err, sizeof tl_err);
#endif
    return 0; /* CPU: the work before it is done already */
}

int kern_event_wait(struct kern_ctx *ctx, int queue, struct kern_event *ev)
{
    if (!ctx || !ev || !queue_ok(queue)) return note(-EINVAL, "kern_event_wait");
    if (ctx->backend != ev->ctx->backend) return note(-KERN_EBACKEND, "kern_event_wait");
#if HAVE_CUDA
    if (ev->cu) return kern_cuda_event_wait(ctx, queue, ev->cu, tl_err, sizeof tl_err);
#endif
    return 0;
}

int kern_event_sync(struct kern_event *ev)
{
    if (!ev) return note(-EINVAL, "kern_event_sync");
#if HAVE_CUDA
    if (ev->cu) return kern_cuda_event_sync(ev->cu, tl_err, sizeof tl_err);
#endif
    return 0;
}

int kern_event_query(struct kern_event *ev)
{
    if (!ev) return note(-EINVAL, "kern_event_query");
#if HAVE_CUDA
    if (ev->cu) return kern_cuda_event_query(ev->cu, tl_err, sizeof tl_err);
#endif
    return 1;
}
