/* det's private helpers: the byte order of the sample format, and the Sub filter for tests and
 * benchmarks. The format is little-endian whatever the host (docs/format.md section 2). */
#ifndef DET_INTERNAL_H
#define DET_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "det.h"

static inline uint16_t det_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t det_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t det_rd64(const uint8_t *p)
{
    return (uint64_t)det_rd32(p) | (uint64_t)det_rd32(p + 4) << 32;
}

static inline void det_wr(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline int det_is_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* The Sub filter of the sample encoding (det.c). */
void det_sub_filter(uint8_t *dst, const uint8_t *src, uint32_t h, uint32_t w);
void det_sub_unfilter(uint8_t *dst, const uint8_t *src, uint32_t h, uint32_t w);

#endif
