/*
 * CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as Python's zlib.crc32: the tests compare
 * pixels with references made by Python scripts that store CRCs, not the pixels. Header-only.
 */
#ifndef FFYOLO_CRC32_TESTUTIL_H
#define FFYOLO_CRC32_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t test_crc32(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 255] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#endif
