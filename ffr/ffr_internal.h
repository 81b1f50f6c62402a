/*
 * Internals shared by the ffr sources and its tests. Not installed, not on any other module's
 * include path. Layout constants mirror docs/format.md; keep the two in step.
 */
#ifndef FFR_INTERNAL_H
#define FFR_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "ffr.h"

#define FFR_HEADER_SIZE        64u
#define FFR_INDEX_HEADER_SIZE  64u
#define FFR_ROW_SIZE           32u
#define FFR_LOCATOR_SIZE       64u
#define FFR_TRAILER_SLOT       512u
#define FFR_ALIGN_MAX          (1u << 20)
#define FFR_DEFAULT_MAX_RECORD (1u << 30)

extern const uint8_t ffr_magic[8];
extern const uint8_t ffr_index_magic[8];
extern const uint8_t ffr_tail_magic[8];
extern const uint8_t ffr_frame_magic[4];

/* XXH3-64, seed 0, built inline (XXH_INLINE_ALL) in hash.c. */
uint64_t ffr_xxh3(const void *p, size_t n);
/* The vector builds of XXH3 (x86-64 only, FFR_HASH_X86; hash.c calls them after a CPU check)
 * and the name of the one ffr_xxh3 uses: "avx512", "avx2", "sse2" or "portable". */
uint64_t ffr_xxh3_avx2(const void *p, size_t n);
uint64_t ffr_xxh3_avx512(const void *p, size_t n);
const char *ffr_hash_impl(void);

static inline uint16_t ffr_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t ffr_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ffr_rd64(const uint8_t *p)
{
    return (uint64_t)ffr_rd32(p) | (uint64_t)ffr_rd32(p + 4) << 32;
}

static inline void ffr_wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void ffr_wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void ffr_wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t ffr_round_up(uint64_t x, uint64_t align)
{
    return (x + align - 1) & ~(align - 1);
}

static inline int ffr_is_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* Parsed header / locator, used by the reader and the writer's self-check. */
struct ffr_locator {
    uint32_t version, flags;
    uint64_t index_offset, index_size, record_count, index_hash, file_size;
};

/* Encodes the 64-byte header / locator. */
void ffr_header_encode(uint8_t out[FFR_HEADER_SIZE], uint32_t align);
void ffr_locator_encode(uint8_t out[FFR_LOCATOR_SIZE], const struct ffr_locator *l);

/* Encodes a 32-byte frame header. */
void ffr_frame_header_encode(uint8_t out[FFR_FRAME_HEADER_SIZE], int codec, uint32_t stored_len,
                             uint32_t raw_len, uint64_t data_hash, uint64_t number);

/* Writes a one-line message into err (when err and cap are set) and returns rc, so that an
 * error return and its explanation are one statement. */
int ffr_say(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Decodes one stored record (codec.c). Returns raw_len or -FFR_ECORRUPT / -FFR_ETOOBIG. */
int64_t ffr_codec_decode(struct ffr_codec *c, int codec, void *dst, size_t dst_cap, const void *src,
                         size_t src_len, uint32_t raw_len);

#endif
