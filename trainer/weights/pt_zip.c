/*
 * The zip side of the .pt reader: the end-of-central-directory record (zip64 too), the central
 * directory, local headers, STORED and DEFLATE entries, CRC-32. Everything is bounds-checked
 * against the file bytes; nothing is trusted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "priv/pt_internal.h"

static uint32_t rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
static uint32_t rd32(const uint8_t *p)
{
    return rd16(p) | rd16(p + 2) << 16;
}
static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int entry_cmp(const void *a, const void *b)
{
    const struct pt_entry *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Apply a central-directory zip64 extra field to the fields that were saturated. */
static int zip64_extra(const uint8_t *ex, size_t len, uint64_t *usize, uint64_t *csize,
                       uint64_t *off)
{
    while (len >= 4) {
        const uint32_t id = rd16(ex), sz = rd16(ex + 2);
        if (sz > len - 4) return -1;
        if (id == 1) {
            const uint8_t *p = ex + 4;
            uint32_t left = sz;
            uint64_t *f[3] = { usize, csize, off };
            for (int i = 0; i < 3; i++) {
                if (*f[i] != 0xffffffffu) continue;
                if (left < 8) return -1;
                *f[i] = rd64(p);
                p += 8;
                left -= 8;
            }
            return 0;
        }
        ex += 4 + sz;
        len -= 4 + sz;
    }
    return 0;
}

int pt_zip_parse(struct trn_pt *pt)
{
    const uint8_t *b = pt->file;
    const size_t n = pt->file_len;
    if (n < 22) return pt_fail(pt, -TRN_PT_EZIP, "too short for a zip archive (%zu bytes)", n);
    /* The EOCD is the last 22 bytes plus a comment of at most 65535 bytes. */
    size_t eocd = SIZE_MAX;
    const size_t lo = n > 22 + 65535 ? n - 22 - 65535 : 0;
    for (size_t i = n - 22 + 1; i-- > lo;) {
        if (rd32(b + i) == 0x06054b50u && i + 22 + rd16(b + i + 20) == n) {
            eocd = i;
            break;
        }
    }
    if (eocd == SIZE_MAX)
        return pt_fail(pt, -TRN_PT_EZIP, "not a zip archive (no end of central directory)");
    uint64_t count = rd16(b + eocd + 10), cd_size = rd32(b + eocd + 12),
             cd_off = rd32(b + eocd + 16);
    if (count == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
        /* zip64: the locator sits just before the EOCD and points at the zip64 EOCD. */
        if (eocd < 20 || rd32(b + eocd - 20) != 0x07064b50u)
            return pt_fail(pt, -TRN_PT_EZIP, "zip64 end of central directory locator missing");
        const uint64_t z = rd64(b + eocd - 12);
        if (z > n || n - z < 56 || rd32(b + z) != 0x06064b50u)
            return pt_fail(pt, -TRN_PT_EZIP, "bad zip64 end of central directory");
        count = rd64(b + z + 32);
        cd_size = rd64(b + z + 40);
        cd_off = rd64(b + z + 48);
    }
    if (cd_off > n || cd_size > n - cd_off)
        return pt_fail(pt, -TRN_PT_EZIP, "central directory outside the file");
    if (count > TRN_PT_MAX_ENTRIES)
        return pt_fail(pt, -TRN_PT_ELIMIT, "%llu zip entries (limit %d)", (unsigned long long)count,
                       TRN_PT_MAX_ENTRIES);
    if (count == 0) return pt_fail(pt, -TRN_PT_EZIP, "empty zip archive");
    pt->entries = calloc((size_t)count, sizeof *pt->entries);
    if (!pt->entries) return pt_fail(pt, -ENOMEM, "out of memory");
    const uint8_t *p = b + cd_off;
    const uint8_t *const end = p + cd_size;
    for (uint64_t i = 0; i < count; i++) {
        if (end - p < 46 || rd32(p) != 0x02014b50u)
            return pt_fail(pt, -TRN_PT_EZIP, "central directory entry %llu malformed",
                           (unsigned long long)i);
        struct pt_entry *e = &pt->entries[i];
        const uint32_t flags = rd16(p + 8), method = rd16(p + 10);
        uint64_t csize = rd32(p + 20), usize = rd32(p + 24), off = rd32(p + 42);
        const uint32_t nlen = rd16(p + 28), xlen = rd16(p + 30), clen = rd16(p + 32);
        if ((size_t)(end - p) - 46 < (size_t)nlen + xlen + clen)
            return pt_fail(pt, -TRN_PT_EZIP, "central directory entry %llu truncated",
                           (unsigned long long)i);
        if (zip64_extra(p + 46 + nlen, xlen, &usize, &csize, &off) != 0)
            return pt_fail(pt, -TRN_PT_EZIP, "entry %llu: bad zip64 extra field",
                           (unsigned long long)i);
        e->name = malloc(nlen + 1u);
        if (!e->name) return pt_fail(pt, -ENOMEM, "out of memory");
        memcpy(e->name, p + 46, nlen);
        e->name[nlen] = '\0';
        pt->n_entries = (size_t)i + 1;
        if (memchr(e->name, '\0', nlen))
            return pt_fail(pt, -TRN_PT_EZIP, "entry %llu: NUL in its name", (unsigned long long)i);
        if (flags & 1u) return pt_fail(pt, -TRN_PT_EUNSUPPORTED, "%s: encrypted entry", e->name);
        if (method != 0 && method != 8)
            return pt_fail(pt, -TRN_PT_EUNSUPPORTED, "%s: compression method %u", e->name, method);
        e->method = method;
        e->crc = rd32(p + 16);
        e->csize = csize;
        e->usize = usize;
        /* The data follows the local header, whose name and extra lengths may differ. */
        if (off > n || n - off < 30 || rd32(b + off) != 0x04034b50u)
            return pt_fail(pt, -TRN_PT_EZIP, "%s: bad local header", e->name);
        const uint64_t data = off + 30 + rd16(b + off + 26) + rd16(b + off + 28);
        if (data > n || csize > n - data)
            return pt_fail(pt, -TRN_PT_EZIP, "%s: data outside the file (truncated?)", e->name);
        if (method == 0 && csize != usize)
            return pt_fail(pt, -TRN_PT_EZIP, "%s: stored entry with different sizes", e->name);
        e->data_off = data;
        p += 46 + nlen + xlen + clen;
    }
    qsort(pt->entries, pt->n_entries, sizeof *pt->entries, entry_cmp);
    for (size_t i = 1; i < pt->n_entries; i++)
        if (strcmp(pt->entries[i - 1].name, pt->entries[i].name) == 0)
            return pt_fail(pt, -TRN_PT_EZIP, "duplicate zip entry %s", pt->entries[i].name);
    return 0;
}

struct pt_entry *pt_zip_find(struct trn_pt *pt, const char *name)
{
    struct pt_entry key = { .name = (char *)name };
    return bsearch(&key, pt->entries, pt->n_entries, sizeof key, entry_cmp);
}

int pt_zip_get(struct trn_pt *pt, struct pt_entry *e, uint64_t max, const uint8_t **out)
{
    if (e->usize > max)
        return pt_fail(pt, -TRN_PT_ELIMIT, "%s: %llu bytes (limit %llu)", e->name,
                       (unsigned long long)e->usize, (unsigned long long)max);
    return pt_zip_get_prefix(pt, e, e->usize, out);
}

/* Inflates e whole through a window, keeping its first `keep` bytes in buf; the CRC of all of it
 * in *crc. Returns 0 or a pt_fail code. */
static int inflate_prefix(struct trn_pt *pt, struct pt_entry *e, uint8_t *buf, uint64_t keep,
                          uLong *crc)
{
    enum { WINDOW = 1 << 20 };
    uint8_t *win = malloc(WINDOW);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (!win || inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
        free(win);
        return pt_fail(pt, -ENOMEM, "%s: out of memory", e->name);
    }
    const uint8_t *src = pt->file + e->data_off;
    uint64_t in_left = e->csize, out_done = 0;
    int zr = Z_OK;
    while (zr == Z_OK) {
        if (zs.avail_in == 0 && in_left) {
            const uInt step = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            zs.next_in = (Bytef *)src;
            zs.avail_in = step;
            src += step, in_left -= step;
        }
        /* into the kept prefix while it lasts, then into the window */
        uint8_t *to = out_done < keep ? buf + out_done : win;
        const uint64_t room = out_done < keep ? keep - out_done : WINDOW;
        const uInt n = room > WINDOW ? WINDOW : (uInt)room;
        zs.next_out = to;
        zs.avail_out = n;
        zr = inflate(&zs, Z_NO_FLUSH);
        const uInt got = n - zs.avail_out;
        if (out_done + got > e->usize) break; /* more than the directory says */
        *crc = crc32(*crc, to, got);
        out_done += got;
        if (zr == Z_BUF_ERROR && got == 0 && !zs.avail_in && !in_left) break;
        if (zr == Z_BUF_ERROR) zr = Z_OK;
    }
    inflateEnd(&zs);
    free(win);
    if (zr != Z_STREAM_END || out_done != e->usize)
        return pt_fail(pt, -TRN_PT_EZIP, "%s: corrupt deflate data", e->name);
    return 0;
}

int pt_zip_get_prefix(struct trn_pt *pt, struct pt_entry *e, uint64_t keep, const uint8_t **out)
{
    if (keep > e->usize) keep = e->usize;
    if (e->bytes && e->kept >= keep) {
        *out = e->bytes;
        return 0;
    }
    const uint8_t *src = pt->file + e->data_off;
    uLong crc = crc32(0L, Z_NULL, 0);
    if (e->method == 8) {
        /* DEFLATE expands at most ~1032:1, so a declared size beyond that is a lie: refuse it
         * before anything (a fuzzer found a 2.3 GB claim for a few hundred input bytes). */
        if (e->usize > 1032 * e->csize + 64)
            return pt_fail(pt, -TRN_PT_EZIP,
                           "%s: declared size %llu impossible for %llu deflated bytes", e->name,
                           (unsigned long long)e->usize, (unsigned long long)e->csize);
        /* Every inflation counts, held or streamed through: a storage of 2^28 zeros deflated
         * to 1 MB is a gigabyte of work and, held, of memory (issue 44). */
        if (e->usize > pt->inflate_budget - pt->inflated)
            return pt_fail(pt, -TRN_PT_ELIMIT,
                           "%s: inflating %llu more bytes passes the budget of %llu for the "
                           "archive's deflated entries (%llu so far)",
                           e->name, (unsigned long long)e->usize,
                           (unsigned long long)pt->inflate_budget,
                           (unsigned long long)pt->inflated);
        pt->inflated += e->usize;
        uint8_t *buf = malloc(keep ? (size_t)keep : 1);
        if (!buf) return pt_fail(pt, -ENOMEM, "%s: out of memory", e->name);
        const int rc = inflate_prefix(pt, e, buf, keep, &crc);
        if (rc) {
            free(buf);
            return rc;
        }
        free(e->owned);
        e->owned = buf;
        src = buf;
    } else {
        /* zlib's crc32 takes uInt lengths: chunk it. */
        for (uint64_t done = 0; done < e->usize;) {
            const uint64_t left = e->usize - done;
            const uInt step = left > (1u << 30) ? (1u << 30) : (uInt)left;
            crc = crc32(crc, src + done, step);
            done += step;
        }
        keep = e->usize;
    }
    if ((uint32_t)crc != e->crc) {
        /* a later get of the same entry inflates afresh: drop this copy */
        free(e->owned);
        e->owned = NULL;
        e->bytes = NULL;
        e->kept = 0;
        return pt_fail(pt, -TRN_PT_ECRC, "%s: CRC-32 %08x, directory says %08x", e->name,
                       (unsigned)crc, (unsigned)e->crc);
    }
    e->bytes = src;
    e->kept = keep;
    *out = src;
    return 0;
}
