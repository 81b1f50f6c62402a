/*
 * Pinned allocator: page-aligned, zeroed, usable memory of the documented kind; a refused mlock
 * falls back silently to pageable memory; registered buffers over a pinned region are used by
 * io_uring (read_fixed) and give the same bytes as pread.
 */
#include "ffio_internal.h"
#include "ffio_test_util.h"

#include "ffyolo_config.h"

#include <sys/resource.h>

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

int main(int argc, char **argv)
{
    const char *const dir = tu_dir(argc, argv);
    struct ffio_pinned p;
    is_int(ffio_pinned_alloc(0, 0, &p), -EINVAL, "size 0 is refused");
    ok(p.ptr == NULL && p.size == 0, "failed alloc leaves an empty region");
    is_int(ffio_pinned_alloc(10, 0x80, &p), -EINVAL, "unknown flags are refused");

    int rc = ffio_pinned_alloc(1024 * 1024 + 1, 0, &p);
    ok(rc == 0 && p.ptr && !((uintptr_t)p.ptr % 4096) && p.size >= 1024 * 1024 + 1 &&
           p.size % 4096 == 0,
       "1 MiB + 1: page-aligned, size %zu rounded to pages", p.size);
    ok(all_zero(p.ptr, p.size), "memory is zero-filled");
    memset(p.ptr, 0x3c, p.size);
    ok(((unsigned char *)p.ptr)[p.size - 1] == 0x3c, "every byte is writable");
    struct rlimit rl;
    getrlimit(RLIMIT_MEMLOCK, &rl);
    tap_diag("kind %s (HAVE_CUDA=%d, RLIMIT_MEMLOCK %llu)", ffio_pinned_kind_name(p.kind),
             HAVE_CUDA, (unsigned long long)rl.rlim_cur);
#if HAVE_CUDA
    ok(p.kind == FFIO_PINNED_CUDA || p.kind == FFIO_PINNED_LOCKED || p.kind == FFIO_PINNED_PAGEABLE,
       "CUDA build: kind is one of cuda/locked/pageable (cuda only with a GPU)");
#else
    ok(p.kind != FFIO_PINNED_CUDA, "no CUDA build: never cudaHostAlloc");
#endif
    /* the reason the programs print once when pinning is not CUDA's (issue 19) */
    const char *const why = ffio_pinned_cuda_status();
    tap_diag("ffio_pinned_cuda_status: \"%s\"", why);
    ok((p.kind == FFIO_PINNED_CUDA) == (why[0] == '\0'),
       "the status is empty exactly when the memory is CUDA-pinned");
#if HAVE_CUDA
    if (access("/usr/local/cuda/lib64/libcudart.so.13", R_OK) == 0 && p.kind != FFIO_PINNED_CUDA)
        ok(strstr(why, "no CUDA device") || strstr(why, "no usable driver"),
           "with /usr/local/cuda's runtime and no GPU, it says there is no device (%s)", why);
#else
    ok(strcmp(why, "this build has no CUDA") == 0, "no CUDA build: says so");
#endif
    ffio_pinned_free(&p);
    ok(p.ptr == NULL && p.size == 0, "free empties the descriptor");
    ffio_pinned_free(&p);
    ok(1, "freeing an empty region is a no-op");

    rc = ffio_pinned_alloc(64 * 1024, FFIO_PINNED_HOST_ONLY, &p);
    ok(rc == 0 && p.kind != FFIO_PINNED_CUDA, "HOST_ONLY never uses CUDA (%s)",
       ffio_pinned_kind_name(p.kind));
    ffio_pinned_free(&p);

    ffio_test_hooks.fail_mlock = true;
    atomic_store(&ffio_test_hooks_on, true);
    rc = ffio_pinned_alloc(64 * 1024, FFIO_PINNED_HOST_ONLY, &p);
    atomic_store(&ffio_test_hooks_on, false);
    ffio_test_hooks.fail_mlock = false;
    ok(rc == 0 && p.kind == FFIO_PINNED_PAGEABLE && p.ptr,
       "refused mlock: silently pageable memory");
    memset(p.ptr, 1, p.size);
    ffio_pinned_free(&p);

    /* Registered buffers over a pinned region, with O_DIRECT and buffered files. */
    const uint64_t S = 3 * 1024 * 1024 + 100;
    char path[4096];
    tu_make_file(dir, "pinned", S, 31, path);
    unsigned char *const ref = tu_pread_all(path, S);
    struct ffio_pinned pool;
    if (ffio_pinned_alloc(16u * 131072, FFIO_PINNED_HOST_ONLY, &pool) < 0) {
        printf("Bail out! pinned alloc\n");
        return 99;
    }
    for (int d = 0; d < 2; d++) {
        if (!tu_uring_ok()) {
            ok(1, "registered buffers # SKIP io_uring unavailable");
            break;
        }
        struct ffio_opts o;
        ffio_opts_default(&o);
        o.engine = FFIO_ENGINE_URING;
        o.direct = d ? FFIO_DIRECT_AUTO : FFIO_DIRECT_OFF;
        o.queue_depth = 16;
        struct ffio_engine *e = NULL;
        ffio_engine_create(&o, &e);
        const int fh = ffio_engine_add_file(e, path);
        const int reg = ffio_engine_register_buffer(e, pool.ptr, pool.size);
        ok(reg == 1 || reg == 0, "register_buffer over the pinned pool: %s",
           reg == 1 ? "registered" : "kernel refused, plain reads");
        struct ffio_extent ext[16];
        struct ffio_completion comp[16];
        uint64_t rng = 5;
        int good = 1;
        for (int round = 0; round < 20 && good; round++) {
            for (int i = 0; i < 16; i++) {
                const uint64_t len = 4096 * (1 + tu_below(&rng, 32));
                const uint64_t off = 4096 * tu_below(&rng, (S - len) / 4096);
                ext[i] =
                    (struct ffio_extent){ .dst = (unsigned char *)pool.ptr + (size_t)i * 131072,
                                          .offset = off,
                                          .length = len,
                                          .file = (uint32_t)fh };
            }
            good = ffio_engine_read(e, ext, 16, comp) == 0;
            for (int i = 0; i < 16 && good; i++)
                good = !memcmp(ext[i].dst, ref + ext[i].offset, ext[i].length);
        }
        struct ffio_engine_info info;
        ffio_engine_info(e, &info);
        ok(good, "%s: 320 reads into the registered pool equal pread", d ? "O_DIRECT" : "buffered");
        ok(reg != 1 || (info.registered_buffers == 1 && info.fixed_reads >= 320),
           "%s: read_fixed used for every read (%llu)", d ? "O_DIRECT" : "buffered",
           (unsigned long long)info.fixed_reads);
        /* An extent outside the registered region still reads (without read_fixed). */
        unsigned char *const outside = aligned_alloc(4096, 8192);
        const struct ffio_extent x = { .dst = outside, .offset = 8192, .length = 8192, .file = 0 };
        const uint64_t fixed_before = info.fixed_reads;
        ok(ffio_engine_read(e, &x, 1, comp) == 0 && !memcmp(outside, ref + 8192, 8192),
           "extent outside the registered pool reads");
        ffio_engine_info(e, &info);
        is_int(info.fixed_reads, fixed_before, "and does not use read_fixed");
        free(outside);
        ffio_engine_destroy(e);
    }
    struct ffio_engine *e = NULL;
    ffio_engine_create(NULL, &e);
    static unsigned char tiny[64][64];
    int last = 0;
    for (int i = 0; i < 64; i++)
        last = ffio_engine_register_buffer(e, tiny[i], 64);
    ok(last >= 0, "64 regions fit");
    is_int(ffio_engine_register_buffer(e, tiny[0], 64), -ENOSPC, "the 65th region: ENOSPC");
    is_int(ffio_engine_register_buffer(e, NULL, 64), -EINVAL, "NULL region refused");
    ffio_engine_destroy(e);
    ffio_pinned_free(&pool);
    free(ref);
    unlink(path);
    return tap_done();
}
