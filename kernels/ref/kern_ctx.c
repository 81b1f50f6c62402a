/*
 * The kern context (backend, threads, workspace), its worker pool, error names and the CPU op
 * table. No tensors here.
 *
 * The pool: threads - 1 workers sleep on a condition variable (no spinning, which on a small
 * machine would steal the cores from OpenBLAS and the data loader) and wake for each
 * kern_parallel call; the caller works as worker 0 and waits for the others.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cblas.h>

#include "kern_internal.h"

/* The CUDA backend's context hooks (kernels/cuda/; a stub returning -KERN_EBACKEND without CUDA).
 */
int kern_cuda_ctx_create(const struct kern_ctx_opts *o, struct kern_ctx **out);
void kern_cuda_ctx_destroy(struct kern_ctx *ctx);
int kern_cuda_ctx_reserve(struct kern_ctx *ctx, size_t bytes);
int kern_cuda_ctx_set_workspace(struct kern_ctx *ctx, void *buf, size_t bytes);
int kern_cuda_mem_alloc(struct kern_ctx *ctx, size_t bytes, void **out);
void kern_cuda_mem_free(struct kern_ctx *ctx, void *p);
int kern_cuda_mem_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir);
int kern_cuda_mem_zero(struct kern_ctx *ctx, void *p, size_t bytes);

#define KERN_WS_ALIGN 64u
/* Below this many elements an op runs on the calling thread: a wake-up costs ~10-50 us. */
#define KERN_PARALLEL_MIN_WORK 32768u
#define KERN_MAX_THREADS       256

struct kern_worker {
    struct kern_pool *pool;
    int w; /* worker index, 1.. */
};

struct kern_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers: a new generation was posted, or stop */
    pthread_cond_t done; /* caller: pending reached 0 */
    kern_task_fn *fn;    /* the current job; valid while pending > 0 */
    void *arg;
    unsigned gen;           /* incremented per job */
    int pending;            /* workers still running the current job */
    int stop;               /* 1: workers exit */
    int n;                  /* threads, caller included */
    int started;            /* workers actually created */
    pthread_t *tid;         /* n - 1 */
    struct kern_worker *wk; /* n - 1 */
};

static void *pool_main(void *p)
{
    struct kern_worker *const wk = p;
    struct kern_pool *const pool = wk->pool;
    unsigned seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->gen == seen)
            pthread_cond_wait(&pool->wake, &pool->mu);
        if (pool->stop) break;
        seen = pool->gen;
        kern_task_fn *const fn = pool->fn;
        void *const arg = pool->arg;
        pthread_mutex_unlock(&pool->mu);
        fn(arg, wk->w, pool->n);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

static void pool_destroy(struct kern_pool *pool)
{
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->started; i++)
        pthread_join(pool->tid[i], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->mu);
    free(pool->tid);
    free(pool->wk);
    free(pool);
}

static int pool_create(int n, struct kern_pool **out)
{
    struct kern_pool *const pool = calloc(1, sizeof(*pool));
    if (!pool) return -ENOMEM;
    pool->n = n;
    pool->tid = calloc((size_t)n - 1, sizeof(*pool->tid));
    pool->wk = calloc((size_t)n - 1, sizeof(*pool->wk));
    if (!pool->tid || !pool->wk) {
        free(pool->tid);
        free(pool->wk);
        free(pool);
        return -ENOMEM;
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (int i = 0; i < n - 1; i++) {
        pool->wk[i].pool = pool;
        pool->wk[i].w = i + 1;
        const int rc = pthread_create(&pool->tid[i], NULL, pool_main, &pool->wk[i]);
        if (rc) {
            pool_destroy(pool);
            return -rc;
        }
        pool->started++;
    }
    *out = pool;
    return 0;
}

int kern_parallel_width(const struct kern_ctx *ctx, size_t work)
{
    return ctx->pool && work >= KERN_PARALLEL_MIN_WORK ? ctx->pool->n : 1;
}

void kern_parallel(struct kern_ctx *ctx, kern_task_fn *fn, void *arg, size_t work)
{
    struct kern_pool *const pool = ctx->pool;
    if (!pool || work < KERN_PARALLEL_MIN_WORK) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->pending = pool->n - 1;
    pool->gen++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, pool->n);
    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}

const char *kern_strerror(int rc)
{
    switch (-rc) {
    case 0:
        return "success";
    case KERN_EWORKSPACE:
        return "kern: workspace too small for this op (reserve kern_*_workspace_size bytes)";
    case KERN_EBACKEND:
        return "kern: context of another backend, or backend not built";
    default:
        break;
    }
    if (rc > 0) return "kern: not an error code";
    return strerror(-rc);
}

void kern_ctx_opts_default(struct kern_ctx_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof(*o));
    o->backend = KERN_BACKEND_CPU;
}

/*
 * OpenBLAS's DYNAMIC_ARCH picks its kernels by CPU vendor, family and model. A CPU newer than the
 * library (Debian 12's 0.3.21 on an Intel Emerald Rapids, family 6 model 207) is not in its table,
 * and it falls back to Prescott's SSE3 kernels: sgemm at 28 GFLOP/s per core where its SkylakeX
 * kernels reach 150 on the same core. When OpenBLAS fell back that way on a CPU whose AVX-512 or
 * AVX2 the OS enables, and the user chose no core (OPENBLAS_CORETYPE), the core is chosen again by
 * instruction set, through OpenBLAS's own selection (gotoblas_dynamic_quit and _init read
 * OPENBLAS_CORETYPE again and initialise the new core's parameters), once, before this library's
 * first GEMM. Both are looked up at run time: another BLAS, or an OpenBLAS without them, is left
 * as it is. OPENBLAS_CORETYPE is put back as it was afterwards, so children choose for themselves.
 */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_core[128];

static void blas_choose(void)
{
#ifdef OPENBLAS_VERSION
    const char *const chosen = openblas_get_corename();
    snprintf(blas_core, sizeof blas_core, "%s", chosen ? chosen : "?");
#if defined(__x86_64__) && defined(__GNUC__)
    if (!chosen || strcmp(chosen, "Prescott") || getenv("OPENBLAS_CORETYPE")) return;
    __builtin_cpu_init();
    const char *want = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    /* ISO C has no object-to-function pointer cast; POSIX guarantees the representation */
    void (*quit)(void), (*init)(void);
    void *const q = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    void *const i = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    if (!want || !q || !i) return;
    memcpy(&quit, &q, sizeof quit);
    memcpy(&init, &i, sizeof init);
    setenv("OPENBLAS_CORETYPE", want, 1);
    quit();
    init();
    unsetenv("OPENBLAS_CORETYPE");
    const char *const now = openblas_get_corename();
    if (now && !strcmp(now, want)) {
        snprintf(blas_core, sizeof blas_core, "%s (OpenBLAS fell back to Prescott on this CPU)",
                 now);
    } else { /* not taken: back to OpenBLAS's own choice */
        quit();
        init();
    }
#endif
#else
    snprintf(blas_core, sizeof blas_core, "not OpenBLAS");
#endif
}

const char *kern_blas_core(void)
{
    pthread_once(&blas_once, blas_choose);
    return blas_core;
}

int kern_ctx_create(const struct kern_ctx_opts *opts, struct kern_ctx **out)
{
    struct kern_ctx_opts o;
    if (!out) return -EINVAL;
    *out = NULL;
    if (opts)
        o = *opts;
    else
        kern_ctx_opts_default(&o);
    if (o.threads < 0 || o.threads > KERN_MAX_THREADS || o.device < 0) return -EINVAL;
    if (!o.workspace != !o.workspace_size) return -EINVAL;
    if ((uintptr_t)o.workspace % 16u) return -EINVAL;
    /* -KERN_EBACKEND from the hook when the build has no CUDA or no device is visible. */
    if (o.backend == KERN_BACKEND_CUDA) return kern_cuda_ctx_create(&o, out);
    if (o.backend != KERN_BACKEND_CPU) return -EINVAL;
    pthread_once(&blas_once, blas_choose);
    struct kern_ctx *const ctx = calloc(1, sizeof(*ctx));
    if (!ctx) return -ENOMEM;
    ctx->backend = o.backend;
    ctx->threads = o.threads > 1 ? o.threads : 1;
    ctx->device = o.device;
    ctx->ws = o.workspace;
    ctx->ws_size = o.workspace_size;
    if (ctx->threads > 1) {
        const int rc = pool_create(ctx->threads, &ctx->pool);
        if (rc < 0) {
            free(ctx);
            return rc;
        }
#ifdef OPENBLAS_VERSION
        /* The ops split the batch over their own threads; BLAS calls inside run single. */
        openblas_set_num_threads(1);
#endif
    }
    *out = ctx;
    return 0;
}

void kern_ctx_destroy(struct kern_ctx *ctx)
{
    if (!ctx) return;
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kern_cuda_ctx_destroy(ctx);
        return;
    }
    pool_destroy(ctx->pool);
    if (ctx->ws_owned) free(ctx->ws);
    free(ctx);
}

int kern_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n < KERN_MAX_THREADS ? n : KERN_MAX_THREADS) : 1;
}

int kern_blas_threads(void)
{
#ifdef OPENBLAS_VERSION
    return openblas_get_num_threads();
#else
    return 1;
#endif
}

int kern_ctx_backend(const struct kern_ctx *ctx)
{
    return ctx ? ctx->backend : -EINVAL;
}

int kern_ctx_threads(const struct kern_ctx *ctx)
{
    return ctx ? ctx->threads : -EINVAL;
}

int kern_ctx_reserve(struct kern_ctx *ctx, size_t bytes)
{
    if (!ctx) return -EINVAL;
    if (ctx->backend == KERN_BACKEND_CUDA) return kern_cuda_ctx_reserve(ctx, bytes);
    if (bytes <= ctx->ws_size) return 0;
    const size_t rounded = (bytes + KERN_WS_ALIGN - 1) / KERN_WS_ALIGN * KERN_WS_ALIGN;
    if (rounded < bytes) return -ENOMEM;
    void *const p = aligned_alloc(KERN_WS_ALIGN, rounded);
    if (!p) return -ENOMEM;
    if (ctx->ws_owned) free(ctx->ws);
    ctx->ws = p;
    ctx->ws_size = rounded;
    ctx->ws_owned = 1;
    return 0;
}

int kern_ctx_set_workspace(struct kern_ctx *ctx, void *buf, size_t bytes)
{
    if (!ctx || (!buf && bytes) || (buf && !bytes)) return -EINVAL;
    if (ctx->backend == KERN_BACKEND_CUDA) return kern_cuda_ctx_set_workspace(ctx, buf, bytes);
    if ((uintptr_t)buf % 16u) return -EINVAL;
    if (ctx->ws_owned) free(ctx->ws);
    ctx->ws = buf;
    ctx->ws_size = bytes;
    ctx->ws_owned = 0;
    return 0;
}

size_t kern_ctx_workspace_size(const struct kern_ctx *ctx)
{
    return ctx ? ctx->ws_size : 0;
}

static const struct kern_ops kern_ref_ops = {
    .backend = KERN_BACKEND_CPU,
#define KERN_OP(name, params) .name = kern_ref_##name,
#include "kern_ops.def"
#undef KERN_OP
};

const struct kern_ops *kern_ops_ref(void)
{
    return &kern_ref_ops;
}

/*
 * Host tensor memory: one KERN_WS_ALIGN-byte header (how it was obtained, and the mapping's
 * length), then the zeroed bytes. From MEM_MAP_MIN on it is an anonymous mapping, which the
 * kernel hands out zeroed and backs with pages only where they are touched: a net's arenas are
 * planned for every activation, and an inference net on oneDNN touches almost none of its
 * reference arena (memset made creating one cost as much as several forwards: 340 ms at 640,
 * batch 4). Smaller blocks come from the heap and are cleared.
 */
#define MEM_MAP_MIN ((size_t)1 << 20)

struct mem_head {
    size_t map_len; /* 0: from aligned_alloc */
};

int kern_mem_alloc(struct kern_ctx *ctx, size_t bytes, void **out)
{
    if (!ctx || !out) return -EINVAL;
    *out = NULL;
    if (!bytes) return 0;
    if (ctx->backend == KERN_BACKEND_CUDA) return kern_cuda_mem_alloc(ctx, bytes, out);
    const size_t rounded = (bytes + KERN_WS_ALIGN - 1) / KERN_WS_ALIGN * KERN_WS_ALIGN;
    const size_t total = rounded + KERN_WS_ALIGN;
    if (rounded < bytes || total < rounded) return -ENOMEM;
    unsigned char *p;
    if (total >= MEM_MAP_MIN) {
        void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return -ENOMEM;
        p = m;
        ((struct mem_head *)p)->map_len = total;
    } else {
        if (!(p = aligned_alloc(KERN_WS_ALIGN, total))) return -ENOMEM;
        memset(p, 0, total);
    }
    *out = p + KERN_WS_ALIGN;
    return 0;
}

void kern_mem_free(struct kern_ctx *ctx, void *p)
{
    if (!p) return;
    if (ctx && ctx->backend == KERN_BACKEND_CUDA) {
        kern_cuda_mem_free(ctx, p);
        return;
    }
    unsigned char *const base = (unsigned char *)p - KERN_WS_ALIGN;
    const size_t map_len = ((const struct mem_head *)(void *)base)->map_len;
    if (map_len)
        munmap(base, map_len);
    else
        free(base);
}

int kern_mem_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir)
{
    if (!ctx || (bytes && (!dst || !src)) || dir < KERN_COPY_H2D || dir > KERN_COPY_D2D)
        return -EINVAL;
    if (!bytes) return 0;
    if (ctx->backend == KERN_BACKEND_CUDA) return kern_cuda_mem_copy(ctx, dst, src, bytes, dir);
    memmove(dst, src, bytes);
    return 0;
}

int kern_mem_zero(struct kern_ctx *ctx, void *p, size_t bytes)
{
    if (!ctx || (bytes && !p)) return -EINVAL;
    if (!bytes) return 0;
    if (ctx->backend == KERN_BACKEND_CUDA) return kern_cuda_mem_zero(ctx, p, bytes);
    memset(p, 0, bytes);
    return 0;
}
