/* The one translation unit that instantiates xxHash: inlined, so the compiler can use the
 * host's vector unit (the shared libxxhash measured 2-3x slower, format-anchors 7.5). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ffr_internal.h"

uint64_t ffr_xxh3(const void *p, size_t n)
{
    return (uint64_t)XXH3_64bits(p, n);
}

uint64_t ffr_hash(const void *p, size_t n)
{
    return (uint64_t)XXH3_64bits(p, n);
}
