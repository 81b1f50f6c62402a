/* The one translation unit that instantiates xxHash for the portable path: inlined, so the
 * compiler can use the host's vector unit (the shared libxxhash measured 2-3x slower,
 * format-anchors 7.5). On x86-64 the same XXH3 is also built for AVX2 and AVX-512 (hash_avx2.c,
 * hash_avx512.c) and picked at run time: SSE2 hashes ~12 GB/s per core in cache, AVX2 ~46, AVX-512
 * ~76 (docs/benchmarks.md), which matters when every record is hashed when written and read. The
 * digest is the same on every path (XXH3 is defined by its output, not its vector width). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ffr_internal.h"

static uint64_t xxh3_portable(const void *p, size_t n)
{
    return (uint64_t)XXH3_64bits(p, n);
}

#if FFR_HASH_X86
typedef uint64_t (*hash_fn)(const void *, size_t);

/* Resolved once; a benign race: every thread computes the same pointer. */
static hash_fn pick(void)
{
    static hash_fn fn;
    hash_fn f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
    if (f) return f;
    __builtin_cpu_init();
    f = __builtin_cpu_supports("avx512f") ? ffr_xxh3_avx512
        : __builtin_cpu_supports("avx2")  ? ffr_xxh3_avx2
                                          : xxh3_portable;
    __atomic_store_n(&fn, f, __ATOMIC_RELAXED);
    return f;
}

uint64_t ffr_xxh3(const void *p, size_t n)
{
    /* Short inputs never reach the vector loop: skip the indirect call. */
    return n <= 240 ? xxh3_portable(p, n) : pick()(p, n);
}

const char *ffr_hash_impl(void)
{
    const hash_fn f = pick();
    return f == ffr_xxh3_avx512 ? "avx512" : f == ffr_xxh3_avx2 ? "avx2" : "sse2";
}
#else
uint64_t ffr_xxh3(const void *p, size_t n)
{
    return xxh3_portable(p, n);
}

const char *ffr_hash_impl(void)
{
    return "portable";
}
#endif

uint64_t ffr_hash(const void *p, size_t n)
{
    return ffr_xxh3(p, n);
}
