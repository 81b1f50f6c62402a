/*
 * ffr reader: open (header, trailer, index of each file; docs/format.md 3-7), random reads,
 * and a whole-file verifier. Everything read from disk is checked before it is used: sizes
 * against the file size and limits before any allocation, hashes before contents are trusted.
 * After open the reader is immutable, so reads from many threads only share pread on the fds,
 * with one exception that readers must keep apart from reads: ffr_reader_swap_shard, which puts
 * another copy of a shard (checked to have the same index) under the same descriptor number.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ffr_internal.h"
#include "ffr_manifest.h"

struct shard {
    char *path;
    int fd;
    dev_t dev; /* the file's identity: one file listed twice is refused */
    ino_t ino;
    uint64_t size;
    uint64_t first, count; /* global number of record 0; records */
    uint32_t align, header_size;
    uint64_t index_offset, index_size, index_hash;
    uint8_t *index; /* the whole index, hash-checked */
    const uint8_t *rows, *heap, *meta;
    uint64_t heap_size, meta_size;
    uint8_t tail[FFR_TRAILER_SIZE]; /* as read, for verify */
};

struct ffr_reader {
    struct ffr_reader_opts o;
    struct shard *shards;
    uint32_t n_shards;
    uint64_t total;
};

struct ffr_decoder {
    struct ffr_codec *codec;
    uint8_t *buf;
    size_t cap;
};

void ffr_reader_opts_default(struct ffr_reader_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_record_bytes = FFR_DEFAULT_MAX_RECORD;
}

static int pread_all(int fd, void *dst, size_t n, uint64_t off)
{
    uint8_t *p = dst;
    while (n) {
        const ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (k == 0) return -FFR_ETRUNC; /* the file shrank under us */
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* HFAI FFRecord: u32 crc32, u64 n, u32 checksums[n], u64 offsets[n] with offsets[0] = 12+12n. */
static int looks_like_hfai_ffrecord(int fd, uint64_t size)
{
    uint8_t b[12], o[8];
    if (size < 24 || pread_all(fd, b, sizeof b, 0) < 0) return 0;
    const uint64_t n = ffr_rd64(b + 4);
    if (n == 0 || n > (size - 12) / 12) return 0;
    if (pread_all(fd, o, sizeof o, 12 + 4 * n) < 0) return 0;
    return ffr_rd64(o) == 12 + 12 * n;
}

static int parse_locator(const uint8_t *p, struct ffr_locator *l)
{
    if (memcmp(p, ffr_tail_magic, 8) != 0) return -FFR_EBADMAGIC;
    if (ffr_rd64(p + 56) != ffr_xxh3(p, 56)) return -FFR_ECHECKSUM;
    l->version = ffr_rd32(p + 8);
    l->flags = ffr_rd32(p + 12);
    l->index_offset = ffr_rd64(p + 16);
    l->index_size = ffr_rd64(p + 24);
    l->record_count = ffr_rd64(p + 32);
    l->index_hash = ffr_rd64(p + 40);
    l->file_size = ffr_rd64(p + 48);
    return 0;
}

/* Checks the index rows (docs/format.md 5): frames sit exactly where the layout puts them, so
 * reads never need to re-check placement and every byte between them is padding. */
static int check_rows(struct shard *s, const struct ffr_reader_opts *o, char *err, size_t cap)
{
    uint64_t expect = s->header_size, prev_sum = 0;
    if (s->count == 0 && s->heap_size != 0)
        return ffr_say(err, cap, -FFR_ECORRUPT, "%s: summary heap without records", s->path);
    for (uint64_t i = 0; i < s->count; i++) {
        const uint8_t *r = s->rows + i * FFR_ROW_SIZE;
        const uint64_t off = ffr_rd64(r);
        const uint32_t stored = ffr_rd32(r + 8), raw = ffr_rd32(r + 12);
        const uint32_t sum = ffr_rd32(r + 24);
        const uint8_t codec = r[28];
        const char *why = NULL;
        if (off != expect)
            why = "frame not where the layout puts it";
        else if (s->index_offset - off < FFR_FRAME_HEADER_SIZE ||
                 s->index_offset - off - FFR_FRAME_HEADER_SIZE < stored)
            why = "frame runs into the index";
        else if (codec > FFR_CODEC_ZSTD)
            why = "unknown codec";
        else if (codec == FFR_CODEC_RAW && raw != stored)
            why = "raw record whose stored and raw lengths differ";
        else if ((i == 0 && sum != 0) || sum < prev_sum || sum > s->heap_size)
            why = "summary offset out of order or past the heap";
        else if (!ffr_is_zero(r + 29, 3))
            why = "reserved bytes not zero";
        if (why)
            return ffr_say(err, cap, -FFR_ECORRUPT, "%s: index row %" PRIu64 ": %s", s->path, i,
                           why);
        if (stored > o->max_record_bytes || raw > o->max_record_bytes)
            return ffr_say(err, cap, -FFR_ETOOBIG,
                           "%s: record %" PRIu64 " is %u bytes, over the reader's limit of %u",
                           s->path, i, stored > raw ? stored : raw, o->max_record_bytes);
        expect = ffr_round_up(off + FFR_FRAME_HEADER_SIZE + stored, s->align);
        prev_sum = sum;
    }
    if (expect != s->index_offset)
        return ffr_say(err, cap, -FFR_ECORRUPT, "%s: index not where the layout puts it", s->path);
    return 0;
}

/*
 * The checks of a file's header (after its magic) and trailer, and where its index is: the
 * part of opening that needs only the first 64 and last 1536 bytes, shared with readers that
 * fetch those bytes themselves (ffr_locate_index). tail: the last FFR_TRAILER_SIZE bytes (any
 * content when size is smaller). Fills *loc, *align and *header_size.
 */
static int locate(const uint8_t h[FFR_HEADER_SIZE], const uint8_t *tail, uint64_t size,
                  const char *name, struct ffr_locator *loc, uint32_t *align, uint32_t *header_size,
                  char *err, size_t cap)
{
    const uint32_t version = ffr_rd32(h + 8);
    /* The version comes before the hash (a newer header may keep its hash elsewhere), but a
     * version-1 hash that still matches tells a newer writer from a damaged byte. */
    if (version > FFR_FORMAT_VERSION || version == 0)
        return ffr_say(err, cap, -FFR_EVERSION,
                       ffr_rd64(h + 56) == ffr_xxh3(h, 56)
                           ? "%s: format version %u; this reader knows version %u (upgrade the "
                             "tools)"
                           : "%s: format version %u, which this reader (version %u) does not "
                             "know, and the header checksum does not match: the header is "
                             "probably damaged rather than newer",
                       name, version, FFR_FORMAT_VERSION);
    if (ffr_rd64(h + 56) != ffr_xxh3(h, 56))
        return ffr_say(err, cap, -FFR_ECHECKSUM, "%s: header checksum mismatch", name);
    const uint32_t flags = ffr_rd32(h + 12);
    if (flags)
        return ffr_say(err, cap, -FFR_EFLAGS, "%s: unknown feature flags 0x%08x", name, flags);
    *align = ffr_rd32(h + 16);
    *header_size = ffr_rd32(h + 20);
    if (*align == 0 || *align > FFR_ALIGN_MAX || (*align & (*align - 1)) ||
        *header_size != ffr_round_up(FFR_HEADER_SIZE, *align) || !ffr_is_zero(h + 24, 32))
        return ffr_say(err, cap, -FFR_ECORRUPT, "%s: inconsistent header fields", name);
    if (size < (uint64_t)*header_size + FFR_INDEX_HEADER_SIZE + FFR_TRAILER_SIZE)
        return ffr_say(err, cap, -FFR_ETRUNC,
                       "%s: truncated (%" PRIu64 " bytes, no room for index and trailer)", name,
                       size);
    struct ffr_locator l2;
    *loc = (struct ffr_locator){ 0 };
    int good = 0;
    for (unsigned k = 0; k < 3; k++) {
        if (parse_locator(tail + k * FFR_TRAILER_SLOT, &l2) < 0) continue;
        if (!good++)
            *loc = l2;
        else if (memcmp(loc, &l2, sizeof *loc) != 0)
            return ffr_say(err, cap, -FFR_ECORRUPT, "%s: trailer copies disagree", name);
    }
    if (!good)
        return ffr_say(
            err, cap, -FFR_ETRUNC,
            "%s: no valid trailer at the end: the file is incomplete (cut short or still "
            "being written), has bytes appended, or its tail is damaged",
            name);
    if (loc->version != version || loc->flags != flags)
        return ffr_say(err, cap, -FFR_ECORRUPT, "%s: trailer and header disagree", name);
    if (loc->file_size != size)
        return ffr_say(err, cap, -FFR_ETRUNC,
                       "%s: file is %" PRIu64 " bytes, its trailer says %" PRIu64, name, size,
                       loc->file_size);
    const uint64_t tail_at = size - FFR_TRAILER_SIZE;
    if (loc->index_offset < *header_size || loc->index_offset % *align ||
        loc->index_size < FFR_INDEX_HEADER_SIZE || loc->index_offset > tail_at ||
        loc->index_size > tail_at - loc->index_offset ||
        ffr_round_up(loc->index_offset + loc->index_size, FFR_TRAILER_SLOT) != tail_at)
        return ffr_say(err, cap, -FFR_ECORRUPT, "%s: trailer locates the index outside the file",
                       name);
    if (loc->index_size > SIZE_MAX / 2)
        return ffr_say(err, cap, -FFR_ETOOBIG, "%s: index too large", name);
    return 0;
}

_Static_assert(FFR_HEADER_SIZE == 64 && FFR_TRAILER_SIZE == 1536, "ffr_locate_index's bounds");

int ffr_locate_index(const uint8_t head[64], const uint8_t tail[1536], uint64_t size,
                     const char *name, struct ffr_index_extent *out, char *err, size_t err_cap)
{
    if (!head || !tail || !out) return -EINVAL;
    if (!name) name = "(file)";
    if (memcmp(head, ffr_magic, 8) != 0)
        return ffr_say(err, err_cap, -FFR_EBADMAGIC, "%s: not an ffr file (bad magic)", name);
    struct ffr_locator loc;
    uint32_t align, header_size;
    const int rc = locate(head, tail, size, name, &loc, &align, &header_size, err, err_cap);
    if (rc < 0) return rc;
    out->offset = loc.index_offset;
    out->size = loc.index_size;
    out->records = loc.record_count;
    out->index_hash = loc.index_hash;
    return 0;
}

/* Opens one record file whose descriptor is s->fd; fills s. */
static int open_file(struct shard *s, const struct ffr_reader_opts *o, char *err, size_t cap)
{
    struct stat st;
    if (fstat(s->fd, &st) < 0) return ffr_say(err, cap, -errno, "%s: %s", s->path, strerror(errno));
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
        return ffr_say(err, cap, -EINVAL, "%s: not a regular file", s->path);
    s->size = (uint64_t)st.st_size;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    uint8_t h[FFR_HEADER_SIZE] = { 0 };
    const size_t hn = s->size < sizeof h ? (size_t)s->size : sizeof h;
    int rc = pread_all(s->fd, h, hn, 0);
    if (rc < 0)
        return ffr_say(err, cap, rc, "%s: reading the header: %s", s->path, ffr_strerror(rc));
    if (hn < 8 || memcmp(h, ffr_magic, 8) != 0) {
        if (looks_like_hfai_ffrecord(s->fd, s->size))
            return ffr_say(err, cap, -FFR_EFOREIGN,
                           "%s: this is an HFAI FFRecord file (same .ffr extension, different "
                           "format); repack the source dataset with yolo-pack",
                           s->path);
        if (hn < 8 && memcmp(h, ffr_magic, hn) == 0)
            return ffr_say(err, cap, -FFR_ETRUNC, "%s: truncated to %" PRIu64 " bytes", s->path,
                           s->size);
        return ffr_say(err, cap, -FFR_EBADMAGIC, "%s: not an ffr file (bad magic)", s->path);
    }
    if (hn < sizeof h)
        return ffr_say(err, cap, -FFR_ETRUNC, "%s: truncated inside the header", s->path);
    if (s->size >= FFR_TRAILER_SIZE &&
        (rc = pread_all(s->fd, s->tail, FFR_TRAILER_SIZE, s->size - FFR_TRAILER_SIZE)) < 0)
        return ffr_say(err, cap, rc, "%s: reading the trailer: %s", s->path, ffr_strerror(rc));
    struct ffr_locator loc;
    if ((rc = locate(h, s->tail, s->size, s->path, &loc, &s->align, &s->header_size, err, cap)) < 0)
        return rc;
    s->index_offset = loc.index_offset;
    s->index_size = loc.index_size;
    s->index_hash = loc.index_hash;
    s->index = malloc((size_t)loc.index_size);
    if (!s->index) return ffr_say(err, cap, -ENOMEM, "%s: out of memory for the index", s->path);
    if ((rc = pread_all(s->fd, s->index, (size_t)loc.index_size, loc.index_offset)) < 0)
        return ffr_say(err, cap, rc, "%s: reading the index: %s", s->path, ffr_strerror(rc));
    if (ffr_xxh3(s->index, (size_t)loc.index_size) != loc.index_hash)
        return ffr_say(err, cap, -FFR_ECHECKSUM, "%s: index checksum mismatch", s->path);
    const uint8_t *x = s->index;
    s->count = ffr_rd64(x + 8);
    s->heap_size = ffr_rd64(x + 16);
    s->meta_size = ffr_rd64(x + 24);
    const uint64_t room = loc.index_size - FFR_INDEX_HEADER_SIZE;
    if (memcmp(x, ffr_index_magic, 8) != 0 || ffr_rd32(x + 32) != FFR_ROW_SIZE ||
        !ffr_is_zero(x + 36, 28) || s->count != loc.record_count ||
        s->count > room / FFR_ROW_SIZE || s->heap_size > room - s->count * FFR_ROW_SIZE ||
        s->heap_size > UINT32_MAX || s->meta_size != room - s->count * FFR_ROW_SIZE - s->heap_size)
        return ffr_say(err, cap, -FFR_ECORRUPT, "%s: inconsistent index header", s->path);
    s->rows = x + FFR_INDEX_HEADER_SIZE;
    s->heap = s->rows + s->count * FFR_ROW_SIZE;
    s->meta = s->heap + s->heap_size;
    return check_rows(s, o, err, cap);
}

static void shard_free(struct shard *s)
{
    if (s->fd >= 0) close(s->fd);
    free(s->path);
    free(s->index);
}

void ffr_reader_close(struct ffr_reader *r)
{
    if (!r) return;
    for (uint32_t k = 0; k < r->n_shards; k++)
        shard_free(&r->shards[k]);
    free(r->shards);
    free(r);
}

static int reader_new(struct ffr_reader **out, const struct ffr_reader_opts *opts, uint32_t n)
{
    struct ffr_reader *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    if (opts)
        r->o = *opts;
    else
        ffr_reader_opts_default(&r->o);
    if (!r->o.max_record_bytes) r->o.max_record_bytes = FFR_DEFAULT_MAX_RECORD;
    r->shards = calloc(n ? n : 1, sizeof *r->shards);
    if (!r->shards) {
        free(r);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < n; k++)
        r->shards[k].fd = -1;
    r->n_shards = n;
    *out = r;
    return 0;
}

int ffr_reader_open_fd(struct ffr_reader **out, int fd, const char *name,
                       const struct ffr_reader_opts *opts, char *err, size_t err_cap)
{
    if (!out || fd < 0) return -EINVAL;
    struct ffr_reader *r;
    int rc = reader_new(&r, opts, 1);
    if (rc < 0) return rc;
    struct shard *s = &r->shards[0];
    s->path = strdup(name ? name : "(fd)");
    s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (!s->path || s->fd < 0) {
        rc = s->path ? -errno : -ENOMEM;
        ffr_reader_close(r);
        return rc;
    }
    if ((rc = open_file(s, &r->o, err, err_cap)) < 0) {
        ffr_reader_close(r);
        return rc;
    }
    r->total = s->count;
    *out = r;
    return 0;
}

static int open_manifest(struct ffr_reader **out, const char *path, const uint8_t *text, size_t len,
                         const struct ffr_reader_opts *opts, char *err, size_t cap)
{
    struct ffr_manifest m;
    int rc = ffr_manifest_parse(&m, text, len, err, cap);
    if (rc < 0) return rc;
    struct ffr_reader *r;
    if ((rc = reader_new(&r, opts, m.n_shards)) < 0) {
        ffr_manifest_free(&m);
        return rc;
    }
    for (uint32_t k = 0; k < m.n_shards && rc == 0; k++) {
        const struct ffr_manifest_shard *ms = &m.shards[k];
        struct shard *s = &r->shards[k];
        /* Shards sit beside the manifest: "dir/NAME", or plain "NAME" in the current one. */
        s->path = ffr_manifest_shard_source(path, ms->file);
        if (!s->path) {
            rc = -ENOMEM;
            break;
        }
        s->fd = ffr_open_regular(s->path, 0);
        if (s->fd < 0) {
            const int e = s->fd;
            s->fd = -1;
            rc = ffr_say(err, cap, -FFR_ESHARD, "%s: shard %u (%s) %s", path, k, s->path,
                         e == -ENOENT ? "is missing" : ffr_strerror(e));
            break;
        }
        char sub[512] = "";
        rc = open_file(s, &r->o, sub, sizeof sub);
        if (rc < 0) {
            ffr_say(err, cap, rc, "%s: shard %u: %s", path, k, sub);
            break;
        }
        /* The same file twice (the same name, or two names of one file) would be read twice
         * per epoch: refused, naming both. */
        for (uint32_t j = 0; j < k && rc == 0; j++)
            if (r->shards[j].dev == s->dev && r->shards[j].ino == s->ino)
                rc = ffr_say(err, cap, -FFR_ESHARD,
                             "%s: shard %u (%s) is the same file as shard %u (%s): a dataset "
                             "lists each shard once",
                             path, k, s->path, j, r->shards[j].path);
        if (rc < 0) break;
        const char *what = s->size != ms->bytes              ? "size"
                           : s->count != ms->records         ? "record count"
                           : s->index_hash != ms->index_hash ? "index checksum"
                                                             : NULL;
        if (what) {
            rc = ffr_say(err, cap, -FFR_ESHARD,
                         "%s: shard %u (%s) was altered: its %s differs from the manifest", path, k,
                         s->path, what);
            break;
        }
        s->first = r->total;
        r->total += s->count;
    }
    if (rc == 0 && r->total != m.records)
        rc = ffr_say(err, cap, -FFR_ECORRUPT,
                     "%s: manifest says %" PRIu64 " records, its shards hold %" PRIu64, path,
                     m.records, r->total);
    ffr_manifest_free(&m);
    if (rc < 0) {
        ffr_reader_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

int ffr_reader_open(struct ffr_reader **out, const char *path, const struct ffr_reader_opts *opts,
                    char *err, size_t err_cap)
{
    if (!out || !path) return -EINVAL;
    if (err && err_cap) err[0] = '\0';
    const int fd = ffr_open_regular(path, 0);
    if (fd < 0) return ffr_say(err, err_cap, fd, "%s: %s", path, ffr_strerror(fd));
    uint8_t head[16] = { 0 };
    const ssize_t n = pread(fd, head, sizeof head, 0);
    if (n > 0 && ffr_manifest_sniff(head, (size_t)n)) {
        struct stat st;
        int rc = fstat(fd, &st) < 0 ? -errno : 0;
        if (rc == 0 && (uint64_t)st.st_size > FFR_MANIFEST_MAX)
            rc = ffr_say(err, err_cap, -FFR_ETOOBIG, "%s: manifest larger than %u bytes", path,
                         FFR_MANIFEST_MAX);
        uint8_t *text = rc == 0 ? malloc((size_t)st.st_size + 1) : NULL;
        if (rc == 0 && !text) rc = -ENOMEM;
        if (rc == 0) rc = pread_all(fd, text, (size_t)st.st_size, 0);
        close(fd);
        if (rc == 0)
            rc = open_manifest(out, path, text, (size_t)st.st_size, opts, err, err_cap);
        else if (err && err_cap && !err[0])
            ffr_say(err, err_cap, rc, "%s: %s", path, ffr_strerror(rc));
        free(text);
        return rc;
    }
    const int rc = ffr_reader_open_fd(out, fd, path, opts, err, err_cap);
    close(fd);
    return rc;
}

uint64_t ffr_reader_count(const struct ffr_reader *r)
{
    return r ? r->total : 0;
}

uint64_t ffr_reader_content_hash(const struct ffr_reader *r)
{
    uint64_t h = 0;
    const uint64_t n = ffr_reader_count(r);
    for (uint64_t i = 0; i < n; i++) {
        struct ffr_record_info ri;
        if (ffr_reader_info(r, i, &ri) < 0) return 0;
        const uint64_t v[4] = { h, ri.data_hash, ri.raw_len, ffr_hash(ri.summary, ri.summary_len) };
        h = ffr_hash(v, sizeof v);
    }
    return h;
}

uint32_t ffr_reader_shard_count(const struct ffr_reader *r)
{
    return r ? r->n_shards : 0;
}

int ffr_reader_shard(const struct ffr_reader *r, uint32_t k, struct ffr_shard_info *out)
{
    if (!r || !out || k >= r->n_shards) return -EINVAL;
    const struct shard *s = &r->shards[k];
    out->path = s->path;
    out->fd = s->fd;
    out->file_size = s->size;
    out->first = s->first;
    out->count = s->count;
    out->align = s->align;
    out->index_hash = s->index_hash;
    out->index_bytes = s->index_size;
    return 0;
}

int ffr_reader_swap_shard(struct ffr_reader *r, uint32_t k, const char *path, char *err,
                          size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!r || !path || k >= r->n_shards) return -EINVAL;
    struct shard *s = &r->shards[k];
    struct shard t = { .path = strdup(path), .fd = -1 };
    if (!t.path) return -ENOMEM;
    t.fd = ffr_open_regular(path, 0);
    int rc = t.fd < 0 ? ffr_say(err, err_cap, t.fd, "%s: %s", path, ffr_strerror(t.fd)) : 0;
    char sub[512] = "";
    if (rc == 0 && (rc = open_file(&t, &r->o, sub, sizeof sub)) < 0)
        ffr_say(err, err_cap, rc, "%s", sub);
    /* The header's fields are its alignment and header size (the rest is zero and hashed); the
     * trailer copies hold the index's place, size, count and hash; the index holds the rest. */
    if (rc == 0 &&
        (t.size != s->size || t.align != s->align || t.header_size != s->header_size ||
         memcmp(t.tail, s->tail, FFR_TRAILER_SIZE) != 0 || t.index_size != s->index_size ||
         memcmp(t.index, s->index, (size_t)s->index_size) != 0))
        rc = ffr_say(err, err_cap, -FFR_ESHARD,
                     "%s is not a copy of shard %u (%s): its size, header, trailer or index "
                     "differs",
                     path, k, s->path);
    if (rc == 0 && dup3(t.fd, s->fd, O_CLOEXEC) < 0)
        rc = ffr_say(err, err_cap, -errno, "%s: dup3: %s", path, strerror(errno));
    if (rc == 0) {
        char *old = s->path;
        s->path = t.path;
        t.path = old;
        s->dev = t.dev;
        s->ino = t.ino;
    }
    shard_free(&t);
    return rc;
}

const char *ffr_reader_metadata(const struct ffr_reader *r, size_t *len)
{
    if (!r || !r->n_shards) {
        if (len) *len = 0;
        return "";
    }
    /* The last shard is closed last, so it carries the final metadata (docs/format.md 7). */
    const struct shard *s = &r->shards[r->n_shards - 1];
    if (len) *len = (size_t)s->meta_size;
    return (const char *)s->meta;
}

static const struct shard *find_shard(const struct ffr_reader *r, uint64_t i, uint32_t *k)
{
    uint32_t lo = 0, hi = r->n_shards;
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (r->shards[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    /* Empty shards share `first` with their successor: skip to the one that holds i. */
    while (lo + 1 < r->n_shards && i - r->shards[lo].first >= r->shards[lo].count)
        lo++;
    *k = lo;
    return &r->shards[lo];
}

int ffr_reader_info(const struct ffr_reader *r, uint64_t i, struct ffr_record_info *out)
{
    if (!r || !out || i >= r->total) return -EINVAL;
    uint32_t k;
    const struct shard *s = find_shard(r, i, &k);
    const uint64_t local = i - s->first;
    const uint8_t *row = s->rows + local * FFR_ROW_SIZE;
    out->shard = k;
    out->local = local;
    out->offset = ffr_rd64(row);
    out->stored_len = ffr_rd32(row + 8);
    out->raw_len = ffr_rd32(row + 12);
    out->data_hash = ffr_rd64(row + 16);
    out->codec = row[28];
    out->frame_len = FFR_FRAME_HEADER_SIZE + (uint64_t)out->stored_len;
    out->extent_len = ffr_round_up(out->frame_len, s->align);
    const uint64_t so = ffr_rd32(row + 24);
    const uint64_t se = local + 1 < s->count ? ffr_rd32(row + FFR_ROW_SIZE + 24) : s->heap_size;
    out->summary = s->heap + so;
    out->summary_len = (uint32_t)(se - so);
    return 0;
}

int ffr_decoder_create(struct ffr_decoder **out)
{
    if (!out) return -EINVAL;
    struct ffr_decoder *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    const int rc = ffr_codec_create(&d->codec);
    if (rc < 0) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void ffr_decoder_destroy(struct ffr_decoder *d)
{
    if (!d) return;
    ffr_codec_destroy(d->codec);
    free(d->buf);
    free(d);
}

static int decoder_reserve(struct ffr_decoder *d, size_t n)
{
    if (n <= d->cap) return 0;
    uint8_t *b = realloc(d->buf, n);
    if (!b) return -ENOMEM;
    d->buf = b;
    d->cap = n;
    return 0;
}

/* Checks a frame header against the index row it should match. */
static int check_frame_header(const uint8_t *h, const struct ffr_record_info *info)
{
    if (memcmp(h, ffr_frame_magic, 4) != 0 || ffr_rd32(h + 28) != (uint32_t)ffr_xxh3(h, 28))
        return -FFR_ECORRUPT;
    if (h[4] != info->codec || !ffr_is_zero(h + 5, 3) || ffr_rd32(h + 8) != info->stored_len ||
        ffr_rd32(h + 12) != info->raw_len || ffr_rd64(h + 16) != info->data_hash ||
        ffr_rd32(h + 24) != (uint32_t)info->local)
        return -FFR_ECORRUPT;
    return 0;
}

int64_t ffr_frame_decode(struct ffr_decoder *d, const struct ffr_record_info *info,
                         const void *frame, size_t frame_len, int verify, void *dst, size_t dst_cap,
                         const void **payload)
{
    if (!info || !frame || frame_len < info->frame_len) return -EINVAL;
    const uint8_t *f = frame;
    int rc = check_frame_header(f, info);
    if (rc < 0) return rc;
    const uint8_t *data = f + FFR_FRAME_HEADER_SIZE;
    if (verify && ffr_xxh3(data, info->stored_len) != info->data_hash) return -FFR_ECHECKSUM;
    if (payload) *payload = data;
    if (!dst) return info->stored_len; /* check only: the stored bytes stay where they are */
    struct ffr_codec *c = d ? d->codec : NULL;
    struct ffr_codec *tmp = NULL;
    if (!c) {
        if ((rc = ffr_codec_create(&tmp)) < 0) return rc;
        c = tmp;
    }
    const int64_t n =
        ffr_codec_decode(c, (int)info->codec, dst, dst_cap, data, info->stored_len, info->raw_len);
    ffr_codec_destroy(tmp);
    return n;
}

int64_t ffr_reader_read(const struct ffr_reader *r, struct ffr_decoder *d, uint64_t i, void *dst,
                        size_t dst_cap)
{
    struct ffr_record_info info;
    int rc = ffr_reader_info(r, i, &info);
    if (rc < 0) return rc;
    if (!dst && info.raw_len) return -EINVAL;
    if (dst_cap < info.raw_len) return -FFR_ETOOBIG;
    const struct shard *s = &r->shards[info.shard];
    uint8_t hdr[FFR_FRAME_HEADER_SIZE];
    if (info.codec == FFR_CODEC_RAW) {
        /* Raw: header and payload read separately so the payload lands in dst, no copy. */
        if ((rc = pread_all(s->fd, hdr, sizeof hdr, info.offset)) < 0) return rc;
        if ((rc = check_frame_header(hdr, &info)) < 0) return rc;
        if ((rc = pread_all(s->fd, dst, info.stored_len, info.offset + sizeof hdr)) < 0) return rc;
        if (ffr_xxh3(dst, info.stored_len) != info.data_hash) return -FFR_ECHECKSUM;
        return info.raw_len;
    }
    struct ffr_decoder *tmp = NULL;
    if (!d) {
        if ((rc = ffr_decoder_create(&tmp)) < 0) return rc;
        d = tmp;
    }
    int64_t n = decoder_reserve(d, (size_t)info.frame_len);
    if (n == 0) n = pread_all(s->fd, d->buf, (size_t)info.frame_len, info.offset);
    if (n == 0)
        n = ffr_frame_decode(d, &info, d->buf, (size_t)info.frame_len, 1, dst, dst_cap, NULL);
    ffr_decoder_destroy(tmp);
    return n;
}

int ffr_reader_verify(const struct ffr_reader *r, struct ffr_decoder *d, uint64_t i)
{
    struct ffr_record_info info;
    int rc = ffr_reader_info(r, i, &info);
    if (rc < 0) return rc;
    struct ffr_decoder *tmp = NULL;
    if (!d) {
        if ((rc = ffr_decoder_create(&tmp)) < 0) return rc;
        d = tmp;
    }
    /* Frame and decoded bytes share one buffer: frame first, decoded after it. */
    const size_t need = (size_t)info.frame_len + info.raw_len;
    int64_t n = decoder_reserve(d, need ? need : 1);
    if (n == 0)
        n = pread_all(r->shards[info.shard].fd, d->buf, (size_t)info.frame_len, info.offset);
    if (n == 0)
        n = ffr_frame_decode(d, &info, d->buf, (size_t)info.frame_len, 1, d->buf + info.frame_len,
                             info.raw_len, NULL);
    ffr_decoder_destroy(tmp);
    return n < 0 ? (int)n : 0;
}

struct vctx {
    const struct ffr_reader *r;
    ffr_problem_fn fn;
    void *ctx;
    int64_t problems;
};

static void problem(struct vctx *v, uint32_t k, int64_t rec, uint64_t off, int code,
                    const char *what)
{
    v->problems++;
    if (!v->fn) return;
    const struct ffr_problem p = {
        .shard = k,
        .path = v->r->shards[k].path,
        .record = rec,
        .offset = off,
        .code = code,
        .what = what,
    };
    v->fn(v->ctx, &p);
}

/* Reports the first non-zero byte in [a, b) of shard k, reading in chunks. */
static int check_zero_range(struct vctx *v, uint32_t k, uint64_t a, uint64_t b, int64_t rec,
                            const char *what)
{
    uint8_t buf[65536];
    while (a < b) {
        const size_t n = b - a < sizeof buf ? (size_t)(b - a) : sizeof buf;
        const int rc = pread_all(v->r->shards[k].fd, buf, n, a);
        if (rc < 0) return rc;
        for (size_t j = 0; j < n; j++)
            if (buf[j]) {
                problem(v, k, rec, a + j, -FFR_ECORRUPT, what);
                return 0;
            }
        a += n;
    }
    return 0;
}

int64_t ffr_reader_verify_all(const struct ffr_reader *r, ffr_problem_fn fn, void *ctx)
{
    if (!r) return -EINVAL;
    struct vctx v = { r, fn, ctx, 0 };
    struct ffr_decoder *d;
    int rc = ffr_decoder_create(&d);
    if (rc < 0) return rc;
    char what[160];
    for (uint32_t k = 0; k < r->n_shards && rc >= 0; k++) {
        const struct shard *s = &r->shards[k];
        rc = check_zero_range(&v, k, FFR_HEADER_SIZE, s->header_size, -1,
                              "header padding is not zero");
        for (uint64_t j = 0; j < s->count && rc >= 0; j++) {
            const uint64_t i = s->first + j;
            struct ffr_record_info info;
            ffr_reader_info(r, i, &info);
            const int e = ffr_reader_verify(r, d, i);
            if (e < 0) {
                snprintf(what, sizeof what, "record %" PRIu64 ": %s", i,
                         e == -FFR_ECORRUPT ? "frame header damaged or not matching the index"
                                            : ffr_strerror(e));
                problem(&v, k, (int64_t)i, info.offset, e, what);
            }
            const uint64_t next =
                j + 1 < s->count ? ffr_rd64(s->rows + (j + 1) * FFR_ROW_SIZE) : s->index_offset;
            rc = check_zero_range(&v, k, info.offset + info.frame_len, next, (int64_t)i,
                                  "padding after a record is not zero");
        }
        if (s->count == 0 && rc >= 0)
            rc = check_zero_range(&v, k, s->header_size, s->index_offset, -1,
                                  "padding before the index is not zero");
        if (rc >= 0)
            rc =
                check_zero_range(&v, k, s->index_offset + s->index_size, s->size - FFR_TRAILER_SIZE,
                                 -1, "padding before the trailer is not zero");
        for (unsigned c = 0; c < 3 && rc >= 0; c++) {
            const uint8_t *slot = s->tail + c * FFR_TRAILER_SLOT;
            struct ffr_locator l;
            const uint64_t at = s->size - FFR_TRAILER_SIZE + c * FFR_TRAILER_SLOT;
            if (parse_locator(slot, &l) < 0 || l.index_hash != s->index_hash ||
                l.index_offset != s->index_offset) {
                snprintf(what, sizeof what, "trailer copy %u of 3 is damaged", c + 1);
                problem(&v, k, -1, at, -FFR_ECHECKSUM, what);
            } else if (!ffr_is_zero(slot + FFR_LOCATOR_SIZE, FFR_TRAILER_SLOT - FFR_LOCATOR_SIZE)) {
                snprintf(what, sizeof what, "trailer slot %u padding is not zero", c + 1);
                problem(&v, k, -1, at + FFR_LOCATOR_SIZE, -FFR_ECORRUPT, what);
            }
        }
    }
    ffr_decoder_destroy(d);
    return rc < 0 ? rc : v.problems;
}
