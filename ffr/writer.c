/*
 * Append-only ffr writer (docs/format.md sections 2-7). Never seeks back: header, frames as they
 * come, then index and trailer. Each file is written under a temporary name and renamed only
 * once its trailer is durable, so nothing incomplete ever carries a final name. Sharded writers
 * close a shard when the next record would push it past shard_bytes, keep finished shards under
 * their temporary names, and at close rename them (to names no existing file has) and then the
 * manifest, whose rename is the commit: before it the dataset being replaced is untouched, after
 * it that dataset's shards are removed (ffr.h, ffr_writer_open). With a sink (opts.publish, the
 * upload of yolo-pack -o s3://) the same order holds at the destination: each shard is handed
 * over as it is finished, the manifest last, and the sink, not the writer, tidies what it held.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ffr_internal.h"
#include "ffr_manifest.h"

struct row {
    uint64_t offset;
    uint32_t stored_len, raw_len;
    uint64_t data_hash;
    uint32_t summary_offset;
    uint8_t codec;
};

struct done_shard {
    char *name;  /* file name relative to the manifest's directory */
    char *tmp;   /* its path while uncommitted */
    char *final; /* its path once renamed at close */
    bool renamed;
    bool published; /* handed to opts.publish: no local file left */
    uint64_t bytes, records, index_hash;
};

struct ffr_writer {
    struct ffr_writer_opts o;
    char *path;       /* final path: the file, or the manifest when sharded */
    char *stem;       /* sharded: path without ".ffr" */
    char *shard_stem; /* sharded: stem, or stem.TAG when stem-00000.ffr exists */
    int sharded;
    /* the file being written */
    int fd;
    char *cur_final; /* its final name */
    char *cur_tmp;   /* its temporary name */
    uint64_t pos;    /* bytes written to it */
    struct row *rows;
    size_t n_rows, cap_rows;
    uint8_t *heap;
    size_t heap_len, heap_cap;
    /* dataset-wide */
    char *meta;
    size_t meta_len;
    uint64_t total;
    struct done_shard *shards;
    size_t n_shards;
    struct ffr_codec *codec;
    uint8_t *scratch; /* compression output, grown as needed */
    size_t scratch_cap;
    uint8_t *stage; /* 4096-aligned frame staging for O_DIRECT appends of caller bytes */
    size_t stage_cap;
    int direct; /* the current file descriptor has O_DIRECT */
    int failed;
};

void ffr_writer_opts_default(struct ffr_writer_opts *o)
{
    memset(o, 0, sizeof *o);
    o->align = 4096;
    o->codec = FFR_CODEC_RAW;
    o->zstd_level = 1;
    o->shard_bytes = 0;
    o->durable = 1;
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        const ssize_t k = write(fd, b, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Aligned so that O_DIRECT writes may use it. */
_Alignas(4096) static const uint8_t zeros[4096];

#define FFR_DIRECT_ALIGN 4096u

/* Writes zeros so that the file position becomes a multiple of align. */
static int pad_to_align(struct ffr_writer *w)
{
    uint64_t pad = ffr_round_up(w->pos, w->o.align) - w->pos;
    while (pad) {
        const size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        const int rc = write_all(w->fd, zeros, k);
        if (rc < 0) return rc;
        pad -= k;
        w->pos += k;
    }
    return 0;
}

static char *str_printf(const char *fmt, const char *a, unsigned n)
{
    const int len = snprintf(NULL, 0, fmt, a, n);
    char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (s) snprintf(s, (size_t)len + 1, fmt, a, n);
    return s;
}

/* This machine's name as temporaries carry it: '/' (impossible) and '.' kept out of it. */
static void this_host(char *h, size_t cap)
{
    if (gethostname(h, cap) != 0 || !h[0]) snprintf(h, cap, "localhost");
    h[cap - 1] = '\0';
    for (char *p = h; *p; p++)
        if (*p == '/' || *p == '.') *p = '_';
}

char *ffr_tmp_path(const char *path)
{
    if (!path) return NULL;
    char host[256];
    this_host(host, sizeof host);
    const int len = snprintf(NULL, 0, "%s.tmp.%ld.%s", path, (long)getpid(), host);
    char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (s) snprintf(s, (size_t)len + 1, "%s.tmp.%ld.%s", path, (long)getpid(), host);
    return s;
}

/* Whether name (an entry of the directory) is a temporary of a dead process of this host:
 * BASE.tmp.PID.HOST or BASE.tmp.PID, BASE being base (or starting with it, with prefix). */
static bool stale_tmp(const char *name, const char *base, int prefix, const char *host)
{
    const size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0) return false;
    const char *t = prefix ? strstr(name + bl, ".tmp.") : name + bl;
    if (!t || strncmp(t, ".tmp.", 5) != 0) return false;
    char *end;
    errno = 0;
    const long pid = strtol(t + 5, &end, 10);
    if (errno || end == t + 5 || pid <= 0 || pid > INT_MAX) return false;
    if (*end == '.' ? strcmp(end + 1, host) != 0 : *end != '\0') return false;
    if (pid == (long)getpid()) return false;
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* A temporary directory: its regular files (it holds no others), then itself. */
static int remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -errno;
    for (struct dirent *e; (e = readdir(d));) {
        char full[PATH_MAX];
        struct stat st;
        if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) < (int)sizeof full &&
            lstat(full, &st) == 0 && S_ISREG(st.st_mode))
            unlink(full);
    }
    closedir(d);
    return rmdir(dir) < 0 ? -errno : 0;
}

int ffr_remove_stale_tmp(const char *path, int prefix)
{
    if (!path || !*path) return -EINVAL;
    char *copy = strdup(path), *copy2 = strdup(path);
    if (!copy || !copy2) {
        free(copy);
        free(copy2);
        return -ENOMEM;
    }
    const char *dir = dirname(copy), *base = basename(copy2);
    char host[256];
    this_host(host, sizeof host);
    DIR *d = opendir(dir);
    int rc = d ? 0 : -errno, n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!stale_tmp(e->d_name, base, prefix, host)) continue;
        char full[PATH_MAX];
        if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full) continue;
        struct stat st;
        if (lstat(full, &st) != 0) continue;
        if (S_ISREG(st.st_mode) && unlink(full) == 0) n++;
        if (S_ISDIR(st.st_mode) && remove_flat_dir(full) == 0) n++;
    }
    if (d) closedir(d);
    free(copy);
    free(copy2);
    return rc < 0 ? rc : n;
}

static int fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy) return -ENOMEM;
    const int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (dfd < 0) return -errno;
    const int rc = fsync(dfd) < 0 && errno != EINVAL ? -errno : 0;
    close(dfd);
    return rc;
}

static int stage_reserve(struct ffr_writer *w, size_t n)
{
    if (n <= w->stage_cap) return 0;
    void *p = NULL;
    const size_t cap = (size_t)ffr_round_up(n, 1u << 20);
    if (posix_memalign(&p, FFR_DIRECT_ALIGN, cap) != 0) return -ENOMEM;
    free(w->stage);
    w->stage = p;
    w->stage_cap = cap;
    return 0;
}

/* Leaves O_DIRECT for the rest of the current file (the index and trailer end unaligned). */
static int direct_off(struct ffr_writer *w)
{
    if (!w->direct) return 0;
    const int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) < 0) return -errno;
    w->direct = 0;
    return 0;
}

static int start_file(struct ffr_writer *w)
{
    free(w->cur_final);
    free(w->cur_tmp);
    w->cur_final = w->sharded ? str_printf("%s-%05u.ffr", w->shard_stem, (unsigned)w->n_shards)
                              : strdup(w->path);
    w->cur_tmp = w->cur_final ? ffr_tmp_path(w->cur_final) : NULL;
    if (!w->cur_final || !w->cur_tmp) return -ENOMEM;
    const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    w->direct = 0;
    if (w->o.direct_io && w->o.align % FFR_DIRECT_ALIGN == 0) {
        /* Refused on some file systems (EINVAL): then the page cache it is. */
        w->fd = open(w->cur_tmp, flags | O_DIRECT, 0644);
        w->direct = w->fd >= 0;
    }
    if (!w->direct) w->fd = open(w->cur_tmp, flags, 0644);
    if (w->fd < 0) return -errno;
    w->pos = 0;
    w->n_rows = 0;
    w->heap_len = 0;
    int rc;
    if (w->direct) {
        /* The header block, whole: header_size = align, a multiple of 4096. */
        if ((rc = stage_reserve(w, w->o.align)) < 0) return rc;
        memset(w->stage, 0, w->o.align);
        ffr_header_encode(w->stage, w->o.align);
        if ((rc = write_all(w->fd, w->stage, w->o.align)) < 0) return rc;
        w->pos = w->o.align;
        return 0;
    }
    uint8_t hdr[FFR_HEADER_SIZE];
    ffr_header_encode(hdr, w->o.align);
    rc = write_all(w->fd, hdr, sizeof hdr);
    if (rc < 0) return rc;
    w->pos = sizeof hdr;
    return pad_to_align(w);
}

/* Whether the sink says a file name (path's base name) is in use at the destination. */
static bool sink_taken(const struct ffr_writer *w, const char *path)
{
    const char *slash = strrchr(path, '/');
    return w->o.taken && w->o.taken(w->o.sink, slash ? slash + 1 : path);
}

/* Hands a finished file to the sink, then removes the staging copy. */
static int publish(struct ffr_writer *w, const char *tmp, const char *final, int last)
{
    const char *slash = strrchr(final, '/');
    const int rc = w->o.publish(w->o.sink, tmp, slash ? slash + 1 : final, last);
    if (rc < 0) return rc;
    unlink(tmp);
    return 0;
}

/* The shards' stem: STEM, unless STEM-00000.ffr exists (a dataset being replaced, or files of
 * someone else's); then STEM.TAG with a TAG whose first shard name is free. */
static int pick_shard_stem(struct ffr_writer *w)
{
    struct stat st;
    char *first = str_printf("%s-%05u.ffr", w->stem, 0);
    if (!first) return -ENOMEM;
    const bool taken = lstat(first, &st) == 0 || sink_taken(w, first);
    free(first);
    if (!taken) return (w->shard_stem = strdup(w->stem)) ? 0 : -ENOMEM;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t tag = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec * 2654435761u ^ (uint32_t)getpid();
    for (int tries = 0; tries < 64; tries++, tag = tag * 1664525u + 1013904223u) {
        char *stem = str_printf("%s.%08x", w->stem, tag);
        char *probe = stem ? str_printf("%s-%05u.ffr", stem, 0) : NULL;
        const bool free_name =
            probe && lstat(probe, &st) != 0 && errno == ENOENT && !sink_taken(w, probe);
        free(probe);
        if (free_name) {
            w->shard_stem = stem;
            return 0;
        }
        free(stem);
        if (!probe) return -ENOMEM;
    }
    return -EEXIST;
}

int ffr_writer_open(struct ffr_writer **out, const char *path, const struct ffr_writer_opts *opts)
{
    if (!out || !path || !*path) return -EINVAL;
    struct ffr_writer_opts o;
    if (opts)
        o = *opts;
    else
        ffr_writer_opts_default(&o);
    if (o.align == 0 || o.align > FFR_ALIGN_MAX || (o.align & (o.align - 1))) return -EINVAL;
    if (o.codec != FFR_CODEC_RAW && o.codec != FFR_CODEC_ZSTD) return -EINVAL;
    struct ffr_writer *w = calloc(1, sizeof *w);
    if (!w) return -ENOMEM;
    w->o = o;
    w->fd = -1;
    w->sharded = o.shard_bytes > 0;
    w->path = strdup(path);
    int rc = w->path ? ffr_codec_create(&w->codec) : -ENOMEM;
    if (rc == 0 && w->sharded) {
        const size_t n = strlen(path);
        w->stem = strdup(path);
        if (!w->stem)
            rc = -ENOMEM;
        else if (n > 4 && strcmp(path + n - 4, ".ffr") == 0)
            w->stem[n - 4] = '\0';
        /* Shard names go into the manifest unescaped (docs/format.md 7). */
        const char *base = w->stem ? strrchr(w->stem, '/') : NULL;
        for (const char *p = base ? base + 1 : w->stem; rc == 0 && p && *p; p++)
            if ((unsigned char)*p < 0x20 || strchr("\"\\'#", *p)) rc = -EINVAL;
    }
    /* what killed writers left here; never anything another live process may still write */
    if (rc == 0) (void)ffr_remove_stale_tmp(w->sharded ? w->stem : w->path, w->sharded);
    if (rc == 0 && w->sharded) rc = pick_shard_stem(w);
    if (rc == 0) rc = start_file(w);
    if (rc < 0) {
        ffr_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

uint64_t ffr_writer_count(const struct ffr_writer *w)
{
    return w ? w->total : 0;
}

int ffr_writer_set_metadata(struct ffr_writer *w, const char *text, size_t len)
{
    if (!w || (!text && len)) return -EINVAL;
    char *m = malloc(len ? len : 1);
    if (!m) return -ENOMEM;
    if (len) memcpy(m, text, len);
    free(w->meta);
    w->meta = m;
    w->meta_len = len;
    return 0;
}

static uint64_t index_bytes(const struct ffr_writer *w, size_t extra_rows, size_t extra_heap)
{
    return FFR_INDEX_HEADER_SIZE + (uint64_t)(w->n_rows + extra_rows) * FFR_ROW_SIZE + w->heap_len +
           extra_heap + w->meta_len;
}

/* Writes index and trailer of the current file and makes it durable; a single file is renamed
 * into place here, a shard only at close (commit). */
static int finish_file(struct ffr_writer *w, uint64_t *index_hash_out)
{
    int rc = direct_off(w);
    if (rc < 0) return rc;
    rc = pad_to_align(w);
    if (rc < 0) return rc;
    const uint64_t index_offset = w->pos;
    const uint64_t isize = index_bytes(w, 0, 0);
    uint8_t *idx = malloc(isize);
    if (!idx) return -ENOMEM;
    memset(idx, 0, FFR_INDEX_HEADER_SIZE);
    memcpy(idx, ffr_index_magic, 8);
    ffr_wr64(idx + 8, w->n_rows);
    ffr_wr64(idx + 16, w->heap_len);
    ffr_wr64(idx + 24, w->meta_len);
    ffr_wr32(idx + 32, FFR_ROW_SIZE);
    uint8_t *p = idx + FFR_INDEX_HEADER_SIZE;
    for (size_t i = 0; i < w->n_rows; i++, p += FFR_ROW_SIZE) {
        const struct row *r = &w->rows[i];
        memset(p, 0, FFR_ROW_SIZE);
        ffr_wr64(p, r->offset);
        ffr_wr32(p + 8, r->stored_len);
        ffr_wr32(p + 12, r->raw_len);
        ffr_wr64(p + 16, r->data_hash);
        ffr_wr32(p + 24, r->summary_offset);
        p[28] = r->codec;
    }
    if (w->heap_len) memcpy(p, w->heap, w->heap_len);
    p += w->heap_len;
    if (w->meta_len) memcpy(p, w->meta, w->meta_len);
    const struct ffr_locator loc = {
        .version = FFR_FORMAT_VERSION,
        .flags = 0,
        .index_offset = index_offset,
        .index_size = isize,
        .record_count = w->n_rows,
        .index_hash = ffr_xxh3(idx, isize),
        .file_size = ffr_round_up(index_offset + isize, FFR_TRAILER_SLOT) + FFR_TRAILER_SIZE,
    };
    rc = write_all(w->fd, idx, isize);
    free(idx);
    if (rc < 0) return rc;
    w->pos += isize;
    /* Zero padding so that each trailer slot is exactly one 512-byte sector. */
    const uint64_t gap = ffr_round_up(w->pos, FFR_TRAILER_SLOT) - w->pos;
    if (gap && (rc = write_all(w->fd, zeros, (size_t)gap)) < 0) return rc;
    uint8_t tail[FFR_TRAILER_SIZE];
    memset(tail, 0, sizeof tail);
    for (unsigned k = 0; k < 3; k++)
        ffr_locator_encode(tail + k * FFR_TRAILER_SLOT, &loc);
    rc = write_all(w->fd, tail, sizeof tail);
    if (rc < 0) return rc;
    w->pos = loc.file_size;
    if (w->o.durable && fsync(w->fd) < 0) return -errno;
    if (close(w->fd) < 0) {
        w->fd = -1;
        return -errno;
    }
    w->fd = -1;
    if (index_hash_out) *index_hash_out = loc.index_hash;
    if (w->sharded) return 0; /* finish_shard keeps it under its temporary name */
    if (w->o.publish) {
        if ((rc = publish(w, w->cur_tmp, w->cur_final, 1)) < 0) return rc;
        free(w->cur_tmp);
        w->cur_tmp = NULL;
        return 0;
    }
    if (rename(w->cur_tmp, w->cur_final) < 0) return -errno;
    free(w->cur_tmp);
    w->cur_tmp = NULL;
    if (w->o.durable && (rc = fsync_dir_of(w->cur_final)) < 0) return rc;
    return 0;
}

static int finish_shard(struct ffr_writer *w)
{
    struct done_shard d = { 0 };
    d.records = w->n_rows;
    int rc = finish_file(w, &d.index_hash);
    if (rc < 0) return rc;
    d.bytes = w->pos;
    const char *slash = strrchr(w->cur_final, '/');
    d.name = strdup(slash ? slash + 1 : w->cur_final);
    struct done_shard *s = realloc(w->shards, (w->n_shards + 1) * sizeof *s);
    if (!d.name || !s) {
        free(d.name);
        if (s) w->shards = s;
        return -ENOMEM;
    }
    d.tmp = w->cur_tmp; /* the shard now owns its names */
    d.final = w->cur_final;
    w->cur_tmp = w->cur_final = NULL;
    w->shards = s;
    w->shards[w->n_shards++] = d;
    if (!w->o.publish) return 0;
    struct done_shard *sh = &w->shards[w->n_shards - 1];
    if ((rc = publish(w, sh->tmp, sh->final, 0)) < 0) return rc;
    sh->published = true;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* True when a record of stored_len + summary_len would not fit in the current shard, so that
 * append_prepare starts a new one. */
static bool shard_full(const struct ffr_writer *w, size_t stored_len, size_t summary_len)
{
    if (!w->sharded || w->n_rows == 0) return false;
    const uint64_t frame = FFR_FRAME_HEADER_SIZE + (uint64_t)stored_len;
    const uint64_t end = ffr_round_up(w->pos + frame, w->o.align) + index_bytes(w, 1, summary_len) +
                         FFR_TRAILER_SLOT + FFR_TRAILER_SIZE;
    return end > w->o.shard_bytes;
}

/* Checks the arguments of an append and makes room: a new shard if this record would not fit,
 * a row and summary space. Returns 0 or an error (the writer is then failed). */
static int append_prepare(struct ffr_writer *w, int codec, size_t stored_len, size_t raw_len,
                          size_t summary_len)
{
    if (w->failed) return -EINVAL;
    if (codec != FFR_CODEC_RAW && codec != FFR_CODEC_ZSTD) return -EINVAL;
    if (codec == FFR_CODEC_RAW && raw_len != stored_len) return -EINVAL;
    if (stored_len > FFR_RECORD_MAX || raw_len > FFR_RECORD_MAX) return -FFR_ETOOBIG;
    int rc = 0;
    if (shard_full(w, stored_len, summary_len) &&
        ((rc = finish_shard(w)) < 0 || (rc = start_file(w)) < 0))
        goto fail;
    if (w->heap_len + summary_len > UINT32_MAX) {
        rc = -FFR_ETOOBIG; /* summary offsets are u32 (docs/format.md 5) */
        goto fail;
    }
    if ((rc = grow((void **)&w->rows, &w->cap_rows, w->n_rows + 1, sizeof *w->rows)) < 0 ||
        (rc = grow((void **)&w->heap, &w->heap_cap, w->heap_len + summary_len, 1)) < 0)
        goto fail;
    return 0;
fail:
    w->failed = 1;
    return rc;
}

/* Records the row of a frame just written at w->pos, then moves pos past its padding. */
static void append_commit(struct ffr_writer *w, int codec, size_t stored_len, size_t raw_len,
                          uint64_t hash, const void *summary, size_t summary_len)
{
    struct row *r = &w->rows[w->n_rows++];
    r->offset = w->pos;
    r->stored_len = (uint32_t)stored_len;
    r->raw_len = (uint32_t)raw_len;
    r->data_hash = hash;
    r->summary_offset = (uint32_t)w->heap_len;
    r->codec = (uint8_t)codec;
    w->pos = ffr_round_up(w->pos + FFR_FRAME_HEADER_SIZE + stored_len, w->o.align);
    if (summary_len) memcpy(w->heap + w->heap_len, summary, summary_len);
    w->heap_len += summary_len;
    w->total++;
}

int ffr_writer_append_frame(struct ffr_writer *w, int codec, void *frame, size_t frame_cap,
                            size_t stored_len, size_t raw_len, const void *data_hash_opt,
                            const void *summary, size_t summary_len)
{
    if (!w || !frame || (!summary && summary_len)) return -EINVAL;
    const uint64_t extent = ffr_round_up(FFR_FRAME_HEADER_SIZE + (uint64_t)stored_len, w->o.align);
    if (frame_cap < extent || extent > SIZE_MAX) return -EINVAL;
    int rc = append_prepare(w, codec, stored_len, raw_len, summary_len);
    if (rc < 0) return rc;
    uint8_t *f = frame;
    uint64_t hash;
    if (data_hash_opt)
        memcpy(&hash, data_hash_opt, sizeof hash);
    else
        hash = ffr_xxh3(f + FFR_FRAME_HEADER_SIZE, stored_len);
    ffr_frame_header_encode(f, codec, (uint32_t)stored_len, (uint32_t)raw_len, hash, w->n_rows);
    const size_t used = FFR_FRAME_HEADER_SIZE + stored_len;
    memset(f + used, 0, (size_t)extent - used);
    /* One write of whole aligned blocks: with O_DIRECT the pages go to the device without a copy
     * into the page cache (the cost that dominated packing). An unaligned buffer cannot. */
    if (w->direct && ((uintptr_t)f % FFR_DIRECT_ALIGN) && (rc = direct_off(w)) < 0) goto fail;
    if ((rc = write_all(w->fd, f, (size_t)extent)) < 0) goto fail;
    append_commit(w, codec, stored_len, raw_len, hash, summary, summary_len);
    return 0;
fail:
    w->failed = 1;
    return rc;
}

/* Writes iov[0..n) in order at the file's current offset. */
static int writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        const ssize_t k = writev(fd, iov, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        size_t left = (size_t)k;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int ffr_writer_append_frames(struct ffr_writer *w, const struct ffr_frame_in *in, size_t n)
{
    if (!w || (!in && n)) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!in[i].frame || (!in[i].summary && in[i].summary_len)) return -EINVAL;
    /* One writev per run of frames: one system call and one wait for the device instead of one
     * per record. A run ends where a shard fills up (its index must follow its records) or where
     * a frame cannot go through O_DIRECT. */
    enum { MAX_RUN = 64 };
    struct iovec iov[MAX_RUN];
    int k = 0, rc = 0;
    for (size_t i = 0; i < n; i++) {
        const struct ffr_frame_in *f = &in[i];
        const uint64_t extent =
            ffr_round_up(FFR_FRAME_HEADER_SIZE + (uint64_t)f->stored_len, w->o.align);
        if (f->frame_cap < extent || extent > SIZE_MAX) {
            rc = -EINVAL;
            goto fail;
        }
        const bool misaligned = w->direct && ((uintptr_t)f->frame % FFR_DIRECT_ALIGN);
        if (k && (k == MAX_RUN || misaligned || shard_full(w, f->stored_len, f->summary_len))) {
            if ((rc = writev_all(w->fd, iov, k)) < 0) goto fail;
            k = 0;
        }
        if ((rc = append_prepare(w, f->codec, f->stored_len, f->raw_len, f->summary_len)) < 0)
            return rc;
        uint8_t *const b = f->frame;
        const uint64_t hash =
            f->hash_set ? f->hash : ffr_xxh3(b + FFR_FRAME_HEADER_SIZE, f->stored_len);
        ffr_frame_header_encode(b, f->codec, (uint32_t)f->stored_len, (uint32_t)f->raw_len, hash,
                                w->n_rows);
        const size_t used = FFR_FRAME_HEADER_SIZE + f->stored_len;
        memset(b + used, 0, (size_t)extent - used);
        if (misaligned && (rc = direct_off(w)) < 0) goto fail;
        iov[k].iov_base = b;
        iov[k].iov_len = (size_t)extent;
        k++;
        /* The row is recorded now; the bytes follow in this run's writev, before anything else
         * is written to the file. */
        append_commit(w, f->codec, f->stored_len, f->raw_len, hash, f->summary, f->summary_len);
    }
    if (k && (rc = writev_all(w->fd, iov, k)) < 0) goto fail;
    return 0;
fail:
    w->failed = 1;
    return rc;
}

int ffr_writer_append_encoded(struct ffr_writer *w, int codec, const void *stored,
                              size_t stored_len, size_t raw_len, const void *data_hash_opt,
                              const void *summary, size_t summary_len)
{
    if (!w || (!stored && stored_len) || (!summary && summary_len)) return -EINVAL;
    int rc = append_prepare(w, codec, stored_len, raw_len, summary_len);
    if (rc < 0) return rc;
    uint64_t hash;
    if (data_hash_opt)
        memcpy(&hash, data_hash_opt, sizeof hash);
    else
        hash = ffr_xxh3(stored, stored_len);
    if (w->direct) {
        /* O_DIRECT needs one aligned buffer: stage the frame (a copy, but no page cache). */
        const uint64_t extent =
            ffr_round_up(FFR_FRAME_HEADER_SIZE + (uint64_t)stored_len, w->o.align);
        if ((rc = stage_reserve(w, (size_t)extent)) < 0) goto fail;
        if (stored_len) memcpy(w->stage + FFR_FRAME_HEADER_SIZE, stored, stored_len);
        return ffr_writer_append_frame(w, codec, w->stage, w->stage_cap, stored_len, raw_len, &hash,
                                       summary, summary_len);
    }
    uint8_t hdr[FFR_FRAME_HEADER_SIZE];
    ffr_frame_header_encode(hdr, codec, (uint32_t)stored_len, (uint32_t)raw_len, hash, w->n_rows);
    const uint64_t frame = FFR_FRAME_HEADER_SIZE + (uint64_t)stored_len;
    const uint64_t pad = ffr_round_up(w->pos + frame, w->o.align) - (w->pos + frame);
    struct iovec iov[3] = {
        { hdr, sizeof hdr },
        { (void *)(uintptr_t)stored, stored_len },
        { (void *)(uintptr_t)zeros, 0 },
    };
    int iovcnt = 2;
    if (pad && pad <= sizeof zeros) {
        iov[2].iov_len = (size_t)pad;
        iovcnt = 3;
    }
    /* writev may write less than asked; finish the rest with plain writes. */
    size_t want = 0;
    for (int k = 0; k < iovcnt; k++)
        want += iov[k].iov_len;
    ssize_t got;
    do
        got = writev(w->fd, iov, iovcnt);
    while (got < 0 && errno == EINTR);
    if (got < 0) {
        rc = -errno;
        goto fail;
    }
    size_t done = (size_t)got;
    for (int k = 0; k < iovcnt && done < want; k++) {
        if (done >= iov[k].iov_len) {
            done -= iov[k].iov_len;
            want -= iov[k].iov_len;
            continue;
        }
        if ((rc = write_all(w->fd, (const uint8_t *)iov[k].iov_base + done,
                            iov[k].iov_len - done)) < 0)
            goto fail;
        want -= iov[k].iov_len;
        done = 0;
    }
    if (iovcnt == 2) {
        /* Padding larger than the zero block: written separately, position after it. */
        const uint64_t at = w->pos;
        w->pos += frame;
        rc = pad_to_align(w);
        w->pos = at;
        if (rc < 0) goto fail;
    }
    append_commit(w, codec, stored_len, raw_len, hash, summary, summary_len);
    return 0;
fail:
    w->failed = 1;
    return rc;
}

int ffr_writer_append(struct ffr_writer *w, const void *data, size_t len, const void *summary,
                      size_t summary_len)
{
    if (!w || (!data && len)) return -EINVAL;
    if (len > FFR_RECORD_MAX) return -FFR_ETOOBIG;
    if (w->o.codec == FFR_CODEC_RAW)
        return ffr_writer_append_encoded(w, FFR_CODEC_RAW, data, len, len, NULL, summary,
                                         summary_len);
    const size_t bound = ffr_encode_bound(len);
    int rc = grow((void **)&w->scratch, &w->scratch_cap, bound, 1);
    if (rc < 0) return rc;
    int used;
    const int64_t n = ffr_encode(w->codec, w->scratch, w->scratch_cap, data, len, w->o.codec,
                                 w->o.zstd_level, &used);
    if (n < 0) return (int)n;
    return ffr_writer_append_encoded(w, used, w->scratch, (size_t)n, len, NULL, summary,
                                     summary_len);
}

static int write_manifest(struct ffr_writer *w)
{
    char *tmp = ffr_tmp_path(w->path);
    if (!tmp) return -ENOMEM;
    FILE *f = fopen(tmp, "w");
    int rc = 0;
    if (!f) {
        rc = -errno;
        free(tmp);
        return rc;
    }
    fprintf(f, "# ffr manifest: the shards of one dataset (docs/format.md section 7)\n");
    fprintf(f, "ffr_manifest: 1\nrecords: %" PRIu64 "\nshards:\n", w->total);
    for (size_t k = 0; k < w->n_shards; k++)
        fprintf(f,
                "  - file: \"%s\"\n    bytes: %" PRIu64 "\n    records: %" PRIu64
                "\n    index_hash: 0x%016" PRIx64 "\n",
                w->shards[k].name, w->shards[k].bytes, w->shards[k].records,
                w->shards[k].index_hash);
    if (fflush(f) != 0 || ferror(f)) rc = -EIO;
    if (rc == 0 && w->o.durable && fsync(fileno(f)) < 0) rc = -errno;
    if (fclose(f) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && w->o.publish) {
        rc = publish(w, tmp, w->path, 1);
        if (rc < 0) unlink(tmp);
        free(tmp);
        return rc;
    }
    if (rc == 0 && rename(tmp, w->path) < 0) rc = -errno;
    if (rc < 0) unlink(tmp);
    free(tmp);
    if (rc == 0 && w->o.durable) rc = fsync_dir_of(w->path);
    return rc;
}

static void writer_free(struct ffr_writer *w)
{
    if (w->fd >= 0) close(w->fd);
    for (size_t k = 0; k < w->n_shards; k++) {
        free(w->shards[k].name);
        free(w->shards[k].tmp);
        free(w->shards[k].final);
    }
    free(w->shards);
    free(w->path);
    free(w->stem);
    free(w->shard_stem);
    free(w->cur_final);
    free(w->cur_tmp);
    free(w->rows);
    free(w->heap);
    free(w->meta);
    free(w->scratch);
    free(w->stage);
    ffr_codec_destroy(w->codec);
    free(w);
}

void ffr_writer_abort(struct ffr_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (w->cur_tmp) unlink(w->cur_tmp);
    /* Finished shards are uncommitted (no manifest names them): a shard renamed by a close that
     * then failed carries a name no earlier dataset used (pick_shard_stem), so both go. */
    for (size_t k = 0; k < w->n_shards; k++)
        if (!w->shards[k].published)
            unlink(w->shards[k].renamed ? w->shards[k].final : w->shards[k].tmp);
    writer_free(w);
}

/* The shard paths of the manifest at path, if path is one (NULL otherwise, or on any error:
 * then nothing of the old dataset is removed). */
static char **old_shards(const char *path, size_t *n)
{
    *n = 0;
    const int fd = ffr_open_regular(path, 0);
    if (fd < 0) return NULL;
    struct stat st;
    uint8_t *text = NULL;
    char **out = NULL;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= FFR_MANIFEST_MAX &&
        (text = malloc((size_t)st.st_size)) &&
        pread(fd, text, (size_t)st.st_size, 0) == (ssize_t)st.st_size &&
        ffr_manifest_sniff(text, (size_t)st.st_size)) {
        struct ffr_manifest m;
        char err[256];
        if (ffr_manifest_parse(&m, text, (size_t)st.st_size, err, sizeof err) == 0) {
            char *dir = strdup(path);
            out = dir ? calloc(m.n_shards ? m.n_shards : 1, sizeof *out) : NULL;
            const char *dn = out ? dirname(dir) : NULL;
            for (uint32_t k = 0; out && k < m.n_shards; k++) {
                const int len = snprintf(NULL, 0, "%s/%s", dn, m.shards[k].file);
                if ((out[k] = malloc((size_t)len + 1)))
                    snprintf(out[k], (size_t)len + 1, "%s/%s", dn, m.shards[k].file);
            }
            if (out) *n = m.n_shards;
            free(dir);
            ffr_manifest_free(&m);
        }
    }
    free(text);
    close(fd);
    return out;
}

/* After the commit: the replaced dataset's shards that the new one does not use. */
static void remove_old_shards(const struct ffr_writer *w, char **old, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        /* by identity, not by name: "./a-00001.ffr" and "a-00001.ffr" are one file, and a new
         * shard may carry a name the old manifest listed (an old dataset missing its first
         * shard, where pick_shard_stem saw no clash) */
        struct stat os, ns;
        bool ours = !old[i] || lstat(old[i], &os) != 0;
        for (size_t k = 0; !ours && k < w->n_shards; k++)
            ours = stat(w->shards[k].final, &ns) == 0 && ns.st_dev == os.st_dev &&
                   ns.st_ino == os.st_ino;
        if (!ours) unlink(old[i]);
        free(old[i]);
    }
    free(old);
}

/*
 * A dataset that replaced one with the plain shard names was written as STEM.TAG-NNNNN.ffr; once
 * the old shards are gone, give it the plain names back without an unsafe moment: hard links
 * under the plain names, a second manifest commit naming them, then the tagged names unlinked.
 * Killed at any point, the manifest names files that exist. Where a plain name is taken or the
 * file system has no hard links, the tagged names stay (the dataset is complete either way).
 */
static void plain_names(struct ffr_writer *w)
{
    const size_t n = w->n_shards;
    char **plain = calloc(n, sizeof *plain), **names = calloc(n, sizeof *names);
    size_t linked = 0;
    while (plain && names && linked < n) {
        char *p = str_printf("%s-%05u.ffr", w->stem, (unsigned)linked);
        const char *slash = p ? strrchr(p, '/') : NULL;
        names[linked] = p ? strdup(slash ? slash + 1 : p) : NULL;
        plain[linked] = p;
        if (!p || !names[linked] || link(w->shards[linked].final, p) < 0) break;
        linked++;
    }
    if (linked == n) {
        for (size_t k = 0; k < n; k++) { /* the shards take the plain names; plain[] the tagged */
            char *t = w->shards[k].final;
            w->shards[k].final = plain[k];
            plain[k] = t;
            free(w->shards[k].name);
            w->shards[k].name = names[k];
            names[k] = NULL;
        }
        const bool committed = write_manifest(w) == 0;
        for (size_t k = 0; k < n; k++) /* the names the manifest does not use */
            unlink(committed ? plain[k] : w->shards[k].final);
    } else {
        for (size_t k = 0; k < linked; k++)
            unlink(plain[k]);
    }
    for (size_t k = 0; plain && names && k < n; k++) {
        free(plain[k]);
        free(names[k]);
    }
    free(plain);
    free(names);
}

int ffr_writer_close(struct ffr_writer *w)
{
    if (!w) return -EINVAL;
    int rc = w->failed ? -EIO : 0;
    size_t n_old = 0;
    char **old = NULL;
    if (rc == 0) rc = w->sharded ? finish_shard(w) : 0;
    /* read before the commit replaces it; a sink's destination is the sink's to tidy */
    if (rc == 0 && !w->o.publish) old = old_shards(w->path, &n_old);
    if (rc == 0 && !w->sharded) rc = finish_file(w, NULL);
    for (size_t k = 0; rc == 0 && !w->o.publish && k < w->n_shards; k++) {
        if (rename(w->shards[k].tmp, w->shards[k].final) < 0)
            rc = -errno;
        else
            w->shards[k].renamed = true;
    }
    if (rc == 0 && w->sharded && w->o.durable && w->n_shards && !w->o.publish)
        rc = fsync_dir_of(w->shards[0].final);
    if (rc == 0 && w->sharded) rc = write_manifest(w); /* the commit */
    if (rc < 0) {
        for (size_t i = 0; i < n_old; i++)
            free(old[i]);
        free(old);
        ffr_writer_abort(w);
        return rc;
    }
    remove_old_shards(w, old, n_old);
    if (w->sharded && !w->o.publish && strcmp(w->shard_stem, w->stem) != 0) plain_names(w);
    writer_free(w);
    return 0;
}
