/*
 * ffr_hash's run-time pick (AVX-512, AVX2 or SSE2 builds of XXH3) against Debian's libxxhash
 * (the shared library, built separately): every length 0..4100 and some large ones, at odd
 * alignments, on each vector build this CPU can run. A wrong dispatch or a miscompiled vector
 * path would make records written on one machine fail verification on another.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ffr.h"
#include "ffr_internal.h"
#include "tap.h"

static int check_all(const char *name, uint64_t (*fn)(const void *, size_t), const uint8_t *buf)
{
    static const size_t big[] = { 65536, 921600, 921600 + 17, 3u << 20 };
    size_t bad = 0, first = 0;
    for (size_t off = 0; off < 3; off++)
        for (size_t n = 0; n <= 4100; n++)
            if (fn(buf + off, n) != (uint64_t)XXH3_64bits(buf + off, n) && !bad++) first = n;
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
        if (fn(buf + 1, big[k]) != (uint64_t)XXH3_64bits(buf + 1, big[k]) && !bad++) first = big[k];
    return ok(bad == 0,
              "%s: equals libxxhash's XXH3_64bits on 12,307 inputs (%zu differ, first "
              "at length %zu)",
              name, bad, first);
}

int main(void)
{
    const size_t cap = (3u << 20) + 64;
    uint8_t *buf = malloc(cap);
    uint64_t s = 1;
    for (size_t i = 0; i < cap; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(s >> 56);
    }
    tap_diag("ffr_hash uses the %s build", ffr_hash_impl());
    check_all("ffr_hash (as dispatched)", ffr_hash, buf);
#if FFR_HASH_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        check_all("AVX2 build", ffr_xxh3_avx2, buf);
    else
        tap_diag("no AVX2 on this CPU: its build not run");
    if (__builtin_cpu_supports("avx512f"))
        check_all("AVX-512 build", ffr_xxh3_avx512, buf);
    else
        tap_diag("no AVX-512 on this CPU: its build not run");
    ok(strcmp(ffr_hash_impl(), __builtin_cpu_supports("avx512f") ? "avx512"
                               : __builtin_cpu_supports("avx2")  ? "avx2"
                                                                 : "sse2") == 0,
       "the widest build the CPU runs is picked (%s)", ffr_hash_impl());
#endif
    free(buf);
    return tap_done();
}
