/*
 * The CUDA context (stream, cuDNN handle, reduction scratch, device workspace), the device
 * count and error text. No tensors here; no gradients. The op table is in kern_cuda_ops.cu and
 * cuDNN is reached only through st->conv_release, so a program that makes contexts but calls
 * no CUDA op (the CPU tests of a CUDA build) links neither the kernels nor libcudnn.
 *
 * The stream is non-blocking so the ops never serialise against the legacy default stream; the
 * caller orders its own work through kern_cuda_ctx_stream(). A second non-blocking stream, the
 * copy queue of kern.h "Queues and events" (kern_cuda_stream.cu), is made here too, so that a
 * loader thread enqueueing uploads never races the ops thread to create it. The scratch is
 * allocated once at creation (reductions never allocate); the cuDNN handle is created lazily by
 * the first conv plan because cudnnCreate costs ~100 ms and a context without convolutions (the
 * loss) needs none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda_internal.h"

#include <cuda_profiler_api.h>

int kern_cuda_fail(struct kern_ctx *ctx, cudaError_t err, const char *where)
{
    if (ctx && ctx->backend_state)
        snprintf(kern_cuda_st(ctx)->err, KERN_CUDA_ERRLEN, "%s: %s (%s)", where,
                 cudaGetErrorString(err), cudaGetErrorName(err));
    return err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

int kern_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not sticky, clear it */
        return 0;
    }
    return n;
}

int kern_cuda_mem_info(size_t *used, size_t *total)
{
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        (void)cudaGetLastError();
        return -KERN_EBACKEND;
    }
    if (used) *used = t - f;
    if (total) *total = t;
    return 0;
}

void kern_cuda_profiler_range(int on)
{
    if ((on ? cudaProfilerStart() : cudaProfilerStop()) != cudaSuccess) (void)cudaGetLastError();
}

int kern_cuda_ctx_create(const struct kern_ctx_opts *o, struct kern_ctx **out)
{
    if (!o || !out) return -EINVAL;
    *out = NULL;
    const int ndev = kern_cuda_device_count();
    if (ndev <= 0) return -KERN_EBACKEND;
    if (o->device < 0 || o->device >= ndev) return -EINVAL;
    if (!o->workspace != !o->workspace_size) return -EINVAL;
    if ((uintptr_t)o->workspace % 16u) return -EINVAL;
    struct kern_ctx *const ctx = (struct kern_ctx *)calloc(1, sizeof(*ctx));
    struct kern_cuda_state *const st = (struct kern_cuda_state *)calloc(1, sizeof(*st));
    if (!ctx || !st) {
        free(ctx);
        free(st);
        return -ENOMEM;
    }
    ctx->backend = KERN_BACKEND_CUDA;
    ctx->threads = 1;
    ctx->device = o->device;
    ctx->ws = o->workspace;
    ctx->ws_size = o->workspace_size;
    ctx->backend_state = st;
    st->any_algo = o->any_algo != 0;
    st->tune = o->tune != 0;
    st->plan_table = o->plans;
    int rc = 0;
    cudaError_t e = cudaSetDevice(o->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st->copy_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&st->scratch, KERN_CUDA_SCRATCH_BYTES);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&st->host_loss, sizeof(float));
    if (e != cudaSuccess) rc = kern_cuda_fail(ctx, e, "kern_cuda_ctx_create");
    if (rc < 0) {
        kern_cuda_ctx_destroy(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

void kern_cuda_ctx_destroy(struct kern_ctx *ctx)
{
    if (!ctx) return;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    if (st) {
        cudaSetDevice(ctx->device);
        if (st->stream) cudaStreamSynchronize(st->stream);
        if (st->copy_stream) cudaStreamSynchronize(st->copy_stream);
        if (st->conv_release) st->conv_release(ctx);
        if (ctx->ws_owned) cudaFree(ctx->ws);
        cudaFree(st->scratch);
        cudaFreeHost(st->host_loss);
        if (st->stream) cudaStreamDestroy(st->stream);
        if (st->copy_stream) cudaStreamDestroy(st->copy_stream);
        free(st);
    }
    free(ctx);
}

int kern_cuda_ctx_reserve(struct kern_ctx *ctx, size_t bytes)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (bytes <= ctx->ws_size) return 0;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes); /* 256-byte aligned */
    if (e != cudaSuccess) return kern_cuda_fail(ctx, e, "kern_ctx_reserve");
    if (ctx->ws_owned) {
        /* The old buffer may still be read by enqueued work. */
        cudaStreamSynchronize(kern_cuda_st(ctx)->stream);
        cudaFree(ctx->ws);
    }
    ctx->ws = p;
    ctx->ws_size = bytes;
    ctx->ws_owned = 1;
    return 0;
}

int kern_cuda_ctx_set_workspace(struct kern_ctx *ctx, void *buf, size_t bytes)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if ((!buf && bytes) || (buf && !bytes) || (uintptr_t)buf % 16u) return -EINVAL;
    if (ctx->ws_owned) {
        cudaStreamSynchronize(kern_cuda_st(ctx)->stream);
        cudaFree(ctx->ws);
    }
    ctx->ws = buf;
    ctx->ws_size = bytes;
    ctx->ws_owned = 0;
    return 0;
}

void *kern_cuda_ctx_stream(struct kern_ctx *ctx)
{
    if (!ctx || ctx->backend != KERN_BACKEND_CUDA) return NULL;
    return (void *)kern_cuda_st(ctx)->stream;
}

int kern_cuda_ctx_sync(struct kern_ctx *ctx)
{
    KERN_CHECK_CUDA_CTX(ctx);
    const cudaError_t e = cudaStreamSynchronize(kern_cuda_st(ctx)->stream);
    return e == cudaSuccess ? 0 : kern_cuda_fail(ctx, e, "kern_cuda_ctx_sync");
}

const char *kern_cuda_ctx_last_error(const struct kern_ctx *ctx)
{
    if (!ctx || ctx->backend != KERN_BACKEND_CUDA || !ctx->backend_state) return "";
    return ((const struct kern_cuda_state *)ctx->backend_state)->err;
}

int kern_cuda_mem_alloc(struct kern_ctx *ctx, size_t bytes, void **out)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!out) return -EINVAL;
    *out = NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) return kern_cuda_fail(ctx, e, "kern_mem_alloc");
    /* Handed out zeroed, like the CPU twin's, and zeroed on return: the caller may upload into
     * it next on this context's stream or on the copy queue. A plain cudaMemset would run on the
     * legacy stream, which our non-blocking streams do not wait for, and may return before it
     * is done; so zero on the context's stream and wait for it (allocation is set-up work). */
    cudaStream_t s = kern_cuda_st(ctx)->stream;
    e = cudaMemsetAsync(p, 0, bytes, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
        cudaFree(p);
        return kern_cuda_fail(ctx, e, "kern_mem_alloc");
    }
    *out = p;
    return 0;
}

void kern_cuda_mem_free(struct kern_ctx *ctx, void *p)
{
    if (!ctx || ctx->backend != KERN_BACKEND_CUDA || !p) return;
    cudaStreamSynchronize(kern_cuda_st(ctx)->stream);
    cudaStreamSynchronize(kern_cuda_st(ctx)->copy_stream); /* an upload may still write p */
    cudaFree(p);
}

int kern_cuda_mem_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir)
{
    KERN_CHECK_CUDA_CTX(ctx);
    cudaStream_t s = kern_cuda_st(ctx)->stream;
    const cudaMemcpyKind kind = dir == KERN_COPY_H2D   ? cudaMemcpyHostToDevice
                                : dir == KERN_COPY_D2H ? cudaMemcpyDeviceToHost
                                                       : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, s);
    if (e == cudaSuccess && dir == KERN_COPY_D2H) e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? 0 : kern_cuda_fail(ctx, e, "kern_mem_copy");
}

int kern_cuda_mem_zero(struct kern_ctx *ctx, void *p, size_t bytes)
{
    KERN_CHECK_CUDA_CTX(ctx);
    const cudaError_t e = cudaMemsetAsync(p, 0, bytes, kern_cuda_st(ctx)->stream);
    return e == cudaSuccess ? 0 : kern_cuda_fail(ctx, e, "kern_mem_zero");
}
