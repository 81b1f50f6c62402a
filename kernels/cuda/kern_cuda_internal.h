/*
 * kern CUDA backend internals: the context's backend state, the context hooks that
 * kernels/ref/kern_ctx.c calls for KERN_BACKEND_CUDA, and launch/check helpers for the .cu files.
 * Not a public header. The hook prototypes are C (extern "C") so that kern_ctx.c can call them;
 * the rest is CUDA only.
 */
#ifndef KERN_CUDA_INTERNAL_H
#define KERN_CUDA_INTERNAL_H

#include <errno.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "kern_bn_args.h"
#include "kern_internal.h"
#ifdef __cplusplus
}
#endif
#include "kern_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Context hooks for kernels/ref/kern_ctx.c (same contracts as the public calls they serve).
 * kern_cuda_ctx_create: makes a CUDA context from checked options: -KERN_EBACKEND when the build
 * has no CUDA or no device is visible, -EINVAL for a device ordinal out of range, -ENOMEM, -EIO.
 * kern_cuda_ctx_destroy frees the stream, handles, scratch and an owned workspace (accepts NULL).
 * kern_cuda_ctx_reserve / kern_cuda_ctx_set_workspace: device-memory versions of
 * kern_ctx_reserve / kern_ctx_set_workspace.
 */
int kern_cuda_ctx_create(const struct kern_ctx_opts *o, struct kern_ctx **out);
void kern_cuda_ctx_destroy(struct kern_ctx *ctx);
int kern_cuda_ctx_reserve(struct kern_ctx *ctx, size_t bytes);
int kern_cuda_ctx_set_workspace(struct kern_ctx *ctx, void *buf, size_t bytes);
/* Device-memory versions of kern_mem_alloc / free / copy / zero (kern.h). */
int kern_cuda_mem_alloc(struct kern_ctx *ctx, size_t bytes, void **out);
void kern_cuda_mem_free(struct kern_ctx *ctx, void *p);
int kern_cuda_mem_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir);
int kern_cuda_mem_zero(struct kern_ctx *ctx, void *p, size_t bytes);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>

/* Device scratch for reductions: per-(channel, chunk) partial sums, BCE partials, the loss. */
#define KERN_CUDA_SCRATCH_BYTES ((size_t)8 << 20)
#define KERN_CUDA_ERRLEN        256

struct kern_conv_plan; /* kern_cuda_conv.cu: one cuDNN plan per conv2d shape */

struct kern_cuda_state {
    cudaStream_t stream;          /* every op runs here; created non-blocking */
    cudaStream_t copy_stream;     /* KERN_QUEUE_COPY (kern_cuda_stream.cu); non-blocking, made
                                     with the context so a second thread never races to make it */
    void *cudnn;                  /* cudnnHandle_t bound to stream; NULL until the first conv */
    void *scratch;                /* KERN_CUDA_SCRATCH_BYTES of device memory, 256-aligned */
    float *host_loss;             /* pinned host float: the BCE loss comes back through it */
    struct kern_conv_plan *plans; /* linked list of cached conv plans (setup-time mallocs) */
    void (*conv_release)(struct kern_ctx *); /* frees cudnn and plans; set by the first plan */
    char err[KERN_CUDA_ERRLEN];              /* the last CUDA/cuDNN failure, "" when none */
    bool any_algo; /* kern_ctx_opts.any_algo: conv plans may take non-deterministic algorithms */
    bool tune;     /* kern_ctx_opts.tune: passes the table lacks are timed, not ranked */
    struct kern_plan *plan_table; /* kern_ctx_opts.plans (borrowed), or NULL */
    char gpu_key[64];             /* the device's name as plan keys hold it (kern_plan_gpu_name) */
    int sms, cudnn_version;       /* the rest of the keys' device part; set with the handle */
    int plan_how[3];              /* passes planned, by KERN_PLAN_HOW_* */
};

/* The state of a CUDA context (never NULL once kern_cuda_ctx_create succeeded). */
static inline struct kern_cuda_state *kern_cuda_st(struct kern_ctx *ctx)
{
    return (struct kern_cuda_state *)ctx->backend_state;
}

/* Records err (with where) in ctx and maps it to -ENOMEM or -EIO. */
int kern_cuda_fail(struct kern_ctx *ctx, cudaError_t err, const char *where);

/* After launches: returns 0 or the mapped error of cudaGetLastError. */
static inline int kern_cuda_launched(struct kern_ctx *ctx, const char *where)
{
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : kern_cuda_fail(ctx, e, where);
}

/* The CUDA ops need a live CUDA context. */
#define KERN_CHECK_CUDA_CTX(ctx)                                        \
    do {                                                                \
        if (!(ctx)) return -EINVAL;                                     \
        if ((ctx)->backend != KERN_BACKEND_CUDA) return -KERN_EBACKEND; \
    } while (0)

#define KERN_CUDA_THREADS 256

/* Blocks for a grid-stride loop over count items: enough to fill the device, never 0. */
static inline unsigned kern_cuda_blocks(size_t count)
{
    const size_t b = (count + KERN_CUDA_THREADS - 1) / KERN_CUDA_THREADS;
    return b == 0 ? 1u : b > 65535u * 8u ? 65535u * 8u : (unsigned)b;
}

/* Sums two doubles over the block; thread 0 gets the totals. blockDim.x == KERN_CUDA_THREADS. */
static __device__ __forceinline__ void kern_cuda_block_sum2(double &a, double &b)
{
    __shared__ double sa[KERN_CUDA_THREADS / 32], sb[KERN_CUDA_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sa[warp] = a;
        sb[warp] = b;
    }
    __syncthreads();
    if (warp == 0) {
        a = lane < KERN_CUDA_THREADS / 32 ? sa[lane] : 0.0;
        b = lane < KERN_CUDA_THREADS / 32 ? sb[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_down_sync(0xffffffffu, a, o);
            b += __shfl_down_sync(0xffffffffu, b, o);
        }
    }
}

/* Batch norm (kern_cuda_bn.cu, kern_cuda_bn_sync.cu): the shared argument check, the number of
 * chunks each channel's reduction is split into, and the per-channel launch width. */
#define KERN_CUDA_BN_TARGET_BLOCKS 1024
#define KERN_CUDA_BN_MIN_CHUNK     2048 /* elements per block, at least */

/* kern_bn_check, and the per-channel scratch this backend needs. */
static inline int kern_cuda_bn_check(const struct kern_bn *d)
{
    const int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    /* partials (2 doubles per chunk) and coefficients (at most 3 floats) of every channel */
    if ((size_t)d->c * 16u > KERN_CUDA_SCRATCH_BYTES / 2) return -EINVAL;
    return 0;
}

/* kern_cuda_bn_check, and *ysn: the step from one image to the next in y and dy. */
static inline int kern_cuda_bn_check_ysn(const struct kern_bn *d, size_t *ysn)
{
    const int rc = kern_cuda_bn_check(d);
    if (rc < 0) return rc;
    *ysn = kern_bn_y_nstride(d);
    return 0;
}

static inline int kern_cuda_bn_chunks(const struct kern_bn *d)
{
    const size_t cnt = (size_t)d->n * (size_t)d->hw;
    size_t k = (KERN_CUDA_BN_TARGET_BLOCKS + (size_t)d->c - 1) / (size_t)d->c;
    const size_t by_size = (cnt + KERN_CUDA_BN_MIN_CHUNK - 1) / KERN_CUDA_BN_MIN_CHUNK;
    const size_t by_scratch = KERN_CUDA_SCRATCH_BYTES / 2 / ((size_t)d->c * 16u);
    if (k > by_size) k = by_size;
    if (k > by_scratch) k = by_scratch;
    return k < 1 ? 1 : (int)k;
}

static inline unsigned kern_cuda_chan_blocks(int c)
{
    return (unsigned)((c + KERN_CUDA_THREADS - 1) / KERN_CUDA_THREADS);
}

static __device__ __forceinline__ float kern_cuda_sigmoid(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

static __device__ __forceinline__ float kern_cuda_silu_grad(float v)
{
    const float s = kern_cuda_sigmoid(v);
    return s * (1.0f + v * (1.0f - s));
}

/*
 * The BN forward's per-channel coefficients (a, b: bn(x) = x a + b) into the scratch, for ops
 * that apply them with a kernel of their own (kern_cuda_resadd.cu): the training forward's
 * passes 1 and 2 (statistics, saves, running update; kern_cuda_bn.cu), the eval coefficients
 * (kern_cuda_bn.cu), SyncBatchNorm's apply phase (kern_cuda_bn_sync.cu). Enqueued on ctx's
 * stream; *coef: c floats of a then c of b, valid until the next BN op on ctx. Arguments are
 * the caller's to check (kern_cuda_bn_check). Returns 0 or the launch error.
 */
int kern_cuda_bn_coef_train(struct kern_ctx *ctx, const struct kern_bn *d, float *save_mean,
                            float *save_invstd, float *running_mean, float *running_var,
                            const float *x, const float *gamma, const float *beta,
                            const float **coef);
int kern_cuda_bn_coef_eval(struct kern_ctx *ctx, const struct kern_bn *d, const float *gamma,
                           const float *beta, const float *running_mean, const float *running_var,
                           const float **coef);
int kern_cuda_bn_coef_sums(struct kern_ctx *ctx, const struct kern_bn *d, float *save_mean,
                           float *save_invstd, float *running_mean, float *running_var,
                           const float *gamma, const float *beta, const double *sums,
                           const float **coef);

#define KERN_CUDA_LOOP(i, count)                                                \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); \
         i += (size_t)blockDim.x * gridDim.x)
#endif

#endif
