/*
 * What every CUDA parity test (tests/kernels/test_cuda_parity*.c) shares: the CPU and GPU
 * contexts, device buffers that end the TAP run ("Bail out!", exit 99) on any CUDA error, the CK
 * check, and the start: exit 77 with "# SKIP no CUDA device" where no device is visible (the
 * tests are registered with meson's exit-code protocol, for which 77 is a skip), fresh random
 * draws each run unless --seed N replays one. Include after kern.h, kern_cuda.h,
 * kern_testutil.h and tap.h.
 */
#ifndef CUDA_TESTUTIL_H
#define CUDA_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#ifdef TESTS_SHARED_STATE /* the contexts of every unit of a program (tap.h) */
extern struct kern_ctx *g_cpu, *g_gpu;
#ifdef TESTS_DEFINE_STATE
struct kern_ctx *g_cpu, *g_gpu;
#endif
#else
static struct kern_ctx *g_cpu, *g_gpu;
#endif

static inline void kct_bail(const char *what, const char *why)
{
    printf("Bail out! %s: %s\n", what, why);
    exit(99);
}

static inline void *kct_alloc(size_t bytes)
{
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 4);
    if (e != cudaSuccess) kct_bail("cudaMalloc", cudaGetErrorString(e));
    return p;
}

/* Copies h into device memory d. Pageable copies may still be in flight when cudaMemcpy returns
 * and the context's stream does not wait for the legacy one: synchronise before an op reads d. */
static inline void kct_put(void *d, const void *h, size_t bytes)
{
    cudaError_t e = cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) kct_bail("cudaMemcpy up", cudaGetErrorString(e));
}

/* A new device buffer holding a copy of h. */
static inline void *kct_up(const void *h, size_t bytes)
{
    void *const d = kct_alloc(bytes);
    kct_put(d, h, bytes);
    return d;
}

/* A new device buffer of 0xA5 bytes (NaN-like for floats), for outputs that must be written. */
static inline void *kct_poison(size_t bytes)
{
    void *const d = kct_alloc(bytes);
    cudaError_t e = cudaMemset(d, 0xA5, bytes ? bytes : 4);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) kct_bail("cudaMemset", cudaGetErrorString(e));
    return d;
}

/* Waits for g_gpu's work, then copies device memory d to h. */
static inline void kct_down(void *h, const void *d, size_t bytes)
{
    const int rc = kern_cuda_ctx_sync(g_gpu);
    if (rc < 0) kct_bail(kern_strerror(rc), kern_cuda_ctx_last_error(g_gpu));
    const cudaError_t e = cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) kct_bail("cudaMemcpy down", cudaGetErrorString(e));
}

#define CK(expr)                                                     \
    do {                                                             \
        const int rc_ = (expr);                                      \
        if (rc_ < 0)                                                 \
            printf("#   %s -> %s (%s)\n", #expr, kern_strerror(rc_), \
                   kern_cuda_ctx_last_error(g_gpu));                 \
        ok(rc_ == 0, "%s returns 0", #expr);                         \
    } while (0)

/* Skips (exit 77) without a device, seeds the draws, creates g_cpu and g_gpu. Returns whether
 * --bench was given. */
static inline int kct_start(int argc, char **argv)
{
    int bench = 0, have_seed = 0;
    for (int i = 1; i < argc; i++) {
        bench |= !strcmp(argv[i], "--bench");
        have_seed |= !strcmp(argv[i], "--seed");
    }
    if (kern_cuda_device_count() <= 0) {
        printf("1..0 # SKIP no CUDA device\n");
        exit(77);
    }
    kt_seed_from_args(argc, argv,
                      have_seed ? 0 : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid());
    struct kern_ctx_opts o;
    kern_ctx_opts_default(&o);
    o.backend = KERN_BACKEND_CUDA;
    int rc = kern_ctx_create(NULL, &g_cpu);
    if (rc == 0) rc = kern_ctx_create(&o, &g_gpu);
    if (rc < 0) kct_bail("context", kern_strerror(rc));
    return bench;
}

static inline void kct_end(void)
{
    kern_ctx_destroy(g_gpu);
    kern_ctx_destroy(g_cpu);
}

#endif
