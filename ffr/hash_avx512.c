/* XXH3 built for AVX512 (this file alone is compiled with -mavx512f: xxhash.h picks its
 * vector width when preprocessed). Called by hash.c only after it checked the CPU. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ffr_internal.h"

uint64_t ffr_xxh3_avx512(const void *p, size_t n)
{
    return (uint64_t)XXH3_64bits(p, n);
}
