/*
 * Pinned host memory. With CUDA builds, cudaHostAlloc is reached through dlopen("libcudart")
 * at run time instead of linking: CUDA code may only live in kernels/cuda and trainer/cuda
 * (style rule 2), and a CUDA build must still run where there is no GPU or driver (then the
 * allocator uses locked anonymous memory). The three entry points used have a stable C ABI
 * (cudaError_t is an int-sized enum, 0 = cudaSuccess), so no CUDA header is needed here.
 *
 * Where the runtime is looked for, in order: the process itself (a program linked with the
 * shared libcudart); the library path; then beside the executable (its own folder and lib/
 * next to it, as scripts/gpu-bundle lays out binaries) and /usr/local/cuda. Our CUDA programs
 * link the runtime statically and export nothing, and a lent GPU machine keeps libcudart only in
 * pip's nvidia/cu13/lib or /usr/local/cuda/lib64, often on no search path: without these steps
 * the loader would lose its overlapped uploads there. The library never prints; why pinning is
 * unavailable is kept for ffio_pinned_cuda_status(), which the programs print once.
 */
#include "ffio_internal.h"

#include "ffyolo_config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>

typedef int (*cuda_count_fn)(int *count);
typedef int (*cuda_host_alloc_fn)(void **ptr, size_t size, unsigned flags);
typedef int (*cuda_free_host_fn)(void *ptr);

#define CUDA_HOST_ALLOC_PORTABLE 1u /* cudaHostAllocPortable: pinned for every CUDA context */

static struct {
    pthread_once_t once;      /* guards the load */
    bool usable;              /* libcudart loaded and at least one device present */
    cuda_host_alloc_fn alloc; /* cudaHostAlloc */
    cuda_free_host_fn free;   /* cudaFreeHost */
    char status[256];         /* why not usable ("" when usable) */
} cuda = { PTHREAD_ONCE_INIT, false, NULL, NULL, "" };

static const char *const cudart_names[] = { "libcudart.so.13", "libcudart.so", "libcudart.so.12" };

/* The three entry points from lib (RTLD_DEFAULT: the process); false when one is missing. */
static bool cuda_bind(void *lib, cuda_count_fn *count)
{
    /* POSIX lets dlsym's void * become a function pointer; memcpy keeps ISO C quiet. */
    void *sym = dlsym(lib, "cudaGetDeviceCount");
    memcpy(count, &sym, sizeof sym);
    sym = dlsym(lib, "cudaHostAlloc");
    memcpy(&cuda.alloc, &sym, sizeof sym);
    sym = dlsym(lib, "cudaFreeHost");
    memcpy(&cuda.free, &sym, sizeof sym);
    return *count && cuda.alloc && cuda.free;
}

/* dlopen the runtime by name, then in the folders of the contract above; NULL when none. */
static void *cuda_open(char *tried, size_t cap)
{
    for (size_t i = 0; i < sizeof cudart_names / sizeof cudart_names[0]; i++) {
        void *const lib = dlopen(cudart_names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) return lib;
    }
    char exe[PATH_MAX] = "";
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *const slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    const char *const dirs[] = { exe[0] ? exe : NULL, exe[0] ? exe : NULL, "/usr/local/cuda/lib64",
                                 "/usr/local/cuda/targets/x86_64-linux/lib" };
    const char *const subs[] = { "", "/../lib", "", "" };
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        if (!dirs[d]) continue;
        for (size_t i = 0; i < 2; i++) { /* the versioned names */
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s%s/%s", dirs[d], subs[d], cudart_names[i]);
            void *const lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (lib) return lib;
        }
    }
    snprintf(tried, cap, "the library path, %s, %s/../lib and /usr/local/cuda/lib64",
             exe[0] ? exe : "(no executable path)", exe[0] ? exe : "?");
    return NULL;
}

static void cuda_load(void)
{
    cuda_count_fn count = NULL;
    void *lib = NULL;
    char tried[PATH_MAX * 2 + 128] = "";
    if (!cuda_bind(RTLD_DEFAULT, &count)) {
        lib = cuda_open(tried, sizeof tried);
        if (!lib) {
            snprintf(cuda.status, sizeof cuda.status, "libcudart.so.13 not found (looked in %s)",
                     tried);
            return;
        }
        if (!cuda_bind(lib, &count)) {
            dlclose(lib);
            snprintf(cuda.status, sizeof cuda.status, "libcudart lacks cudaHostAlloc");
            return;
        }
    }
    int n = 0;
    /* The library stays loaded either way: cudart registers exit handlers once called. */
    const int rc = count(&n);
    cuda.usable = rc == 0 && n > 0;
    if (!cuda.usable)
        snprintf(cuda.status, sizeof cuda.status,
                 rc ? "the CUDA runtime found no usable driver or device (cudaGetDeviceCount "
                      "error %d)"
                    : "no CUDA device",
                 rc);
}

static bool cuda_usable(void)
{
    pthread_once(&cuda.once, cuda_load);
    return cuda.usable;
}
#endif

const char *ffio_pinned_cuda_status(void)
{
#if HAVE_CUDA
    return cuda_usable() ? "" : cuda.status;
#else
    return "this build has no CUDA";
#endif
}

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
