/*
 * The detection sample encoding ffr-det-1 (docs/format.md section 8), implemented once for the
 * packer and the trainer. Decoding trusts nothing: every size is checked against the buffer
 * length with 64-bit arithmetic before anything is read. Writers write sample version 2;
 * version 1 samples (a 64-byte header) are still read.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "det_internal.h"

static const uint8_t det_magic[4] = { 'Y', 'D', 'E', 'T' };
#define DET_HEADER    DET_PIXEL_OFFSET /* version 2 */
#define DET_HEADER_V1 64u
#define DET_VERSION   2u

static uint64_t pad4(uint64_t x)
{
    return (x + 3) & ~(uint64_t)3;
}

/* Total encoded size in 64 bits; the caller checks it fits the u32 fields and size_t. */
static uint64_t det_size64(const struct det_sample *s, uint32_t header)
{
    uint64_t n = header + pad4(s->pixel_bytes) + 20ull * s->n_labels;
    if (s->n_points) n += 4ull * s->n_labels + 8ull * s->n_points;
    return n + s->name_len;
}

size_t det_encoded_size(const struct det_sample *s)
{
    if (!s) return 0;
    const uint64_t n = det_size64(s, DET_HEADER);
    return n > FFR_RECORD_MAX ? 0 : (size_t)n;
}

static int labels_ok(const float *l, uint32_t n)
{
    for (uint64_t i = 0; i < (uint64_t)n * 5; i++)
        if (!isfinite(l[i])) return 0;
    for (uint32_t i = 0; i < n; i++) {
        const float c = l[i * 5];
        if (c < 0 || c > (float)DET_CLASS_MAX || c != floorf(c)) return 0;
    }
    return 1;
}

static int points_ok(const float *p, uint32_t n)
{
    for (uint64_t i = 0; i < (uint64_t)n * 2; i++)
        if (!isfinite(p[i])) return 0;
    return 1;
}

static int sample_ok(const struct det_sample *s)
{
    if (s->pixel_format > DET_JPEG || s->h == 0 || s->w == 0) return 0;
    if (s->pixel_format == DET_JPEG && s->pixel_bytes == 0) return 0;
    if (s->pixel_format != DET_JPEG && (uint64_t)s->h * s->w * 3 != s->pixel_bytes) return 0;
    if (s->pixel_bytes && !s->pixels) return 0;
    if (s->n_labels && !s->labels) return 0;
    if (s->n_points && (!s->seg_counts || !s->seg_points)) return 0;
    if (s->name_len && !s->name) return 0;
    if (!labels_ok(s->labels, s->n_labels) || !points_ok(s->seg_points, s->n_points)) return 0;
    if (s->n_points) {
        uint64_t t = 0;
        for (uint32_t i = 0; i < s->n_labels; i++)
            t += s->seg_counts[i];
        if (t != s->n_points) return 0;
    }
    return 1;
}

/* The checks of det_check on plain fields (shared by samples and summaries). */
static int det_semantics(uint32_t h, uint32_t w, uint32_t h0, uint32_t w0, const float *l,
                         uint32_t n, char *why, size_t cap)
{
    const uint32_t side[4] = { h, w, h0, w0 };
    static const char *const side_name[4] = { "stored height", "stored width", "original height",
                                              "original width" };
    for (int k = 0; k < 4; k++)
        if (side[k] == 0 || side[k] > DET_SIDE_MAX) {
            if (why && cap)
                snprintf(why, cap, "%s %" PRIu32 " is outside 1..%u", side_name[k], side[k],
                         DET_SIDE_MAX);
            return -FFR_ECORRUPT;
        }
    static const char *const coord[4] = { "cx", "cy", "w", "h" };
    for (uint32_t i = 0; i < n; i++)
        for (int k = 1; k < 5; k++) {
            const float v = l[5 * i + k];
            if (v >= 0.0f && v <= 1.0f) continue; /* NaN fails both */
            if (why && cap)
                snprintf(why, cap, "label %" PRIu32 ": %s = %g is not within [0, 1]", i,
                         coord[k - 1], (double)v);
            return -FFR_ECORRUPT;
        }
    return 0;
}

int det_check(const struct det_sample *s, char *why, size_t why_cap)
{
    if (!s || (s->n_labels && !s->labels)) return -EINVAL;
    return det_semantics(s->h, s->w, s->h0, s->w0, s->labels, s->n_labels, why, why_cap);
}

int det_summary_check(const struct det_summary *m, char *why, size_t why_cap)
{
    if (!m || (m->n_labels && !m->labels)) return -EINVAL;
    return det_semantics(m->h, m->w, m->h0, m->w0, m->labels, m->n_labels, why, why_cap);
}

void det_sub_filter(uint8_t *dst, const uint8_t *src, uint32_t h, uint32_t w)
{
    const size_t row = (size_t)w * 3;
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *s = src + y * row;
        uint8_t *d = dst + y * row;
        if (!row) continue;
        memcpy(d, s, 3 < row ? 3 : row);
        for (size_t x = 3; x < row; x++)
            d[x] = (uint8_t)(s[x] - s[x - 3]);
    }
}

void det_sub_unfilter(uint8_t *dst, const uint8_t *src, uint32_t h, uint32_t w)
{
    const size_t row = (size_t)w * 3;
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *s = src + y * row;
        uint8_t *d = dst + y * row;
        if (!row) continue;
        /* Three running sums, one per channel: the loop carries a dependency only every 3. */
        uint8_t r = s[0], g = s[1], b = s[2];
        d[0] = r;
        d[1] = g;
        d[2] = b;
        for (size_t x = 3; x + 2 < row; x += 3) {
            r = (uint8_t)(r + s[x]);
            g = (uint8_t)(g + s[x + 1]);
            b = (uint8_t)(b + s[x + 2]);
            d[x] = r;
            d[x + 1] = g;
            d[x + 2] = b;
        }
    }
}

int64_t det_encode(const struct det_sample *s, void *dst, size_t dst_cap)
{
    if (!s || !dst || !sample_ok(s)) return -EINVAL;
    const uint64_t n = det_size64(s, DET_HEADER);
    if (n > FFR_RECORD_MAX) return -EINVAL;
    if (n > dst_cap) return -FFR_ETOOBIG;
    uint8_t *p = dst;
    memset(p, 0, DET_HEADER);
    memcpy(p, det_magic, 4);
    det_wr(p + 4, DET_VERSION, 2);
    p[6] = (uint8_t)s->pixel_format;
    p[7] = 3;
    det_wr(p + 8, s->h, 4);
    det_wr(p + 12, s->w, 4);
    det_wr(p + 16, s->h0, 4);
    det_wr(p + 20, s->w0, 4);
    det_wr(p + 24, s->pixel_bytes, 4);
    det_wr(p + 28, s->n_labels, 4);
    det_wr(p + 32, s->n_points, 4);
    det_wr(p + 36, s->name_len, 4);
    det_wr(p + 40, (uint64_t)s->image_id, 8);
    p += DET_HEADER;
    if (s->pixel_format == DET_RGB8_SUB)
        det_sub_filter(p, s->pixels, s->h, s->w);
    else if (s->pixel_bytes && s->pixels != p)
        memcpy(p, s->pixels, s->pixel_bytes);
    memset(p + s->pixel_bytes, 0, (size_t)(pad4(s->pixel_bytes) - s->pixel_bytes));
    p += pad4(s->pixel_bytes);
    /* Floats and counts are stored little-endian; this code assumes a little-endian host, as
     * the trainer does when it hands the rows to the loss as floats. */
    if (s->n_labels) memcpy(p, s->labels, 20ull * s->n_labels);
    p += 20ull * s->n_labels;
    if (s->n_points) {
        memcpy(p, s->seg_counts, 4ull * s->n_labels);
        p += 4ull * s->n_labels;
        memcpy(p, s->seg_points, 8ull * s->n_points);
        p += 8ull * s->n_points;
    }
    if (s->name_len) memcpy(p, s->name, s->name_len);
    return (int64_t)n;
}

int det_decode(const void *buf, size_t len, struct det_sample *out)
{
    if (!buf || !out) return -EINVAL;
    const uint8_t *p = buf;
    if (len < 4 || memcmp(p, det_magic, 4) != 0) return -FFR_EBADMAGIC;
    if (len < DET_HEADER_V1) return -FFR_ECORRUPT;
    const uint16_t version = det_rd16(p + 4);
    if (version != 1 && version != 2) return -FFR_EVERSION;
    const uint32_t header = version == 1 ? DET_HEADER_V1 : DET_HEADER;
    if (len < header) return -FFR_ECORRUPT;
    /* Views of floats need 4-byte alignment; buffers from malloc or the frame are aligned. */
    if ((uintptr_t)p % 4) return -EINVAL;
    memset(out, 0, sizeof *out);
    out->pixel_format = p[6];
    out->h = det_rd32(p + 8);
    out->w = det_rd32(p + 12);
    out->h0 = det_rd32(p + 16);
    out->w0 = det_rd32(p + 20);
    out->pixel_bytes = det_rd32(p + 24);
    out->n_labels = det_rd32(p + 28);
    out->n_points = det_rd32(p + 32);
    out->name_len = det_rd32(p + 36);
    out->image_id = (int64_t)det_rd64(p + 40);
    if (p[7] != 3 || !det_is_zero(p + 48, header - 48) || det_size64(out, header) != len)
        return -FFR_ECORRUPT;
    const uint8_t *q = p + header;
    out->pixels = q;
    if (!det_is_zero(q + out->pixel_bytes, (size_t)(pad4(out->pixel_bytes) - out->pixel_bytes)))
        return -FFR_ECORRUPT;
    q += pad4(out->pixel_bytes);
    out->labels = (const float *)(const void *)q;
    q += 20ull * out->n_labels;
    if (out->n_points) {
        out->seg_counts = (const uint32_t *)(const void *)q;
        q += 4ull * out->n_labels;
        out->seg_points = (const float *)(const void *)q;
        q += 8ull * out->n_points;
    }
    out->name = (const char *)q;
    if (!sample_ok(out) || memchr(out->name, '\0', out->name_len)) return -FFR_ECORRUPT;
    return 0;
}

int64_t det_pixels(const struct det_sample *s, uint8_t *dst, size_t dst_cap)
{
    if (!s || (!dst && s->pixel_bytes)) return -EINVAL;
    if (s->pixel_format == DET_JPEG) return -ENOTSUP;
    const uint64_t n = (uint64_t)s->h * s->w * 3;
    if (n != s->pixel_bytes) return -FFR_ECORRUPT;
    if (dst_cap < n) return -FFR_ETOOBIG;
    if (s->pixel_format == DET_RGB8_SUB)
        det_sub_unfilter(dst, s->pixels, s->h, s->w);
    else if (n)
        memcpy(dst, s->pixels, (size_t)n);
    return (int64_t)n;
}

size_t det_summary_size(const struct det_sample *s)
{
    return s ? 20 + 20 * (size_t)s->n_labels : 0;
}

int64_t det_summary_encode(const struct det_sample *s, void *dst, size_t dst_cap)
{
    if (!s || !dst || (s->n_labels && !s->labels)) return -EINVAL;
    const size_t n = det_summary_size(s);
    if (dst_cap < n) return -FFR_ETOOBIG;
    uint8_t *p = dst;
    det_wr(p, s->h, 4);
    det_wr(p + 4, s->w, 4);
    det_wr(p + 8, s->h0, 4);
    det_wr(p + 12, s->w0, 4);
    det_wr(p + 16, s->n_labels, 4);
    if (s->n_labels) memcpy(p + 20, s->labels, 20 * (size_t)s->n_labels);
    return (int64_t)n;
}

int det_summary_decode(const void *buf, size_t len, struct det_summary *out)
{
    if (!buf || !out) return -EINVAL;
    const uint8_t *p = buf;
    if (len < 20 || (uintptr_t)p % 4) return -FFR_ECORRUPT;
    out->h = det_rd32(p);
    out->w = det_rd32(p + 4);
    out->h0 = det_rd32(p + 8);
    out->w0 = det_rd32(p + 12);
    out->n_labels = det_rd32(p + 16);
    if (len != 20 + 20ull * out->n_labels) return -FFR_ECORRUPT;
    out->labels = (const float *)(const void *)(p + 20);
    if (!labels_ok(out->labels, out->n_labels)) return -FFR_ECORRUPT;
    return 0;
}
