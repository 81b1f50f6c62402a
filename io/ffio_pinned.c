/*
 * Pinned host memory. With CUDA builds, cudaHostAlloc is reached through dlopen("libcudart")
 * at run time instead of linking: CUDA code may only live in kernels/cuda and trainer/cuda
 * (style rule 2), and a CUDA build must still run where there is no GPU or driver (then the
 * allocator quietly uses locked anonymous memory). The three entry points used have a stable C
 * ABI (cudaError_t is an int-sized enum, 0 = cudaSuccess), so no CUDA header is needed here.
 */
#include "ffio_internal.h"

#include "ffyolo_config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if HAVE_CUDA
#include <dlfcn.h>
#include <pthread.h>

typedef int (*cuda_count_fn)(int *count);
typedef int (*cuda_host_alloc_fn)(void **ptr, size_t size, unsigned flags);
typedef int (*cuda_free_host_fn)(void *ptr);

#define CUDA_HOST_ALLOC_PORTABLE 1u /* cudaHostAllocPortable: pinned for every CUDA context */

static struct {
    pthread_once_t once;      /* guards the load */
    bool usable;              /* libcudart loaded and at least one device present */
    cuda_host_alloc_fn alloc; /* cudaHostAlloc */
    cuda_free_host_fn free;   /* cudaFreeHost */
} cuda = { PTHREAD_ONCE_INIT, false, NULL, NULL };

static void cuda_load(void)
{
    static const char *const names[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *const lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) continue;
        /* POSIX lets dlsym's void * become a function pointer; memcpy keeps ISO C quiet. */
        cuda_count_fn count = NULL;
        void *sym = dlsym(lib, "cudaGetDeviceCount");
        memcpy(&count, &sym, sizeof sym);
        sym = dlsym(lib, "cudaHostAlloc");
        memcpy(&cuda.alloc, &sym, sizeof sym);
        sym = dlsym(lib, "cudaFreeHost");
        memcpy(&cuda.free, &sym, sizeof sym);
        if (!count || !cuda.alloc || !cuda.free) {
            dlclose(lib);
            continue;
        }
        int n = 0;
        /* The library stays loaded either way: cudart registers exit handlers once called. */
        cuda.usable = count(&n) == 0 && n > 0;
        return;
    }
}

static bool cuda_usable(void)
{
    pthread_once(&cuda.once, cuda_load);
    return cuda.usable;
}
#endif

const char *ffio_pinned_kind_name(enum ffio_pinned_kind kind)
{
    switch (kind) {
    case FFIO_PINNED_CUDA:
        return "cuda";
    case FFIO_PINNED_LOCKED:
        return "locked";
    case FFIO_PINNED_PAGEABLE:
        return "pageable";
    }
    return "?";
}

int ffio_pinned_alloc(size_t size, unsigned flags, struct ffio_pinned *out)
{
    RETURN_IF(!out, -EINVAL, "NULL out");
    memset(out, 0, sizeof *out);
    RETURN_IF(!size || (flags & ~FFIO_PINNED_HOST_ONLY), -EINVAL, "size 0 or unknown flags");
    long page = sysconf(_SC_PAGESIZE);
    if (page < 4096) page = 4096;
    RETURN_IF(size > SIZE_MAX - (size_t)page, -ENOMEM, "size overflows");
    const size_t sz = (size + (size_t)page - 1) & ~((size_t)page - 1);
#if HAVE_CUDA
    if (!(flags & FFIO_PINNED_HOST_ONLY) && cuda_usable()) {
        void *p = NULL;
        if (cuda.alloc(&p, sz, CUDA_HOST_ALLOC_PORTABLE) == 0 && p) {
            memset(p, 0, sz);
            out->ptr = p;
            out->size = sz;
            out->kind = FFIO_PINNED_CUDA;
            return 0;
        }
        /* Driver out of pinned memory: host memory below is still better than failing. */
    }
#endif
    void *const p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    RETURN_IF(p == MAP_FAILED, -ENOMEM, "mmap");
    bool locked = false;
    if (!(atomic_load(&ffio_test_hooks_on) && ffio_test_hooks.fail_mlock))
        locked = mlock(p, sz) == 0; /* EPERM / ENOMEM past RLIMIT_MEMLOCK: stay pageable */
    out->ptr = p;
    out->size = sz;
    out->kind = locked ? FFIO_PINNED_LOCKED : FFIO_PINNED_PAGEABLE;
    return 0;
}

void ffio_pinned_free(struct ffio_pinned *p)
{
    if (!p || !p->ptr) return;
#if HAVE_CUDA
    if (p->kind == FFIO_PINNED_CUDA) {
        if (cuda.free) cuda.free(p->ptr);
        memset(p, 0, sizeof *p);
        return;
    }
#endif
    munmap(p->ptr, p->size); /* also unlocks */
    memset(p, 0, sizeof *p);
}
