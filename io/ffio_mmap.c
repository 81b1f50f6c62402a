/*
 * mmap backend: each file is mapped read-only once; an extent is a memcpy from the mapping,
 * done inside submit. The page cache is always used (O_DIRECT does not apply).
 *
 * Touching a mapped page past the end of the file raises SIGBUS, and a library must not install
 * signal handlers. So the file size is re-read with fstat once per submit call (for the files the
 * call touches) and extents are clamped to it: a file truncated between submit calls gives
 * -ENODATA, not a crash. A truncation racing with the memcpy of the same call can still SIGBUS:
 * the engine that must survive files shrinking under it is uring or pread.
 */
#include "ffio_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Extents at least this long get MADV_WILLNEED first, so cold pages are read in parallel. */
#define FFIO_MMAP_PREFETCH_MIN (64 * 1024)

static int file_fd(const struct ffio_file *f)
{
    return f->bfd >= 0 ? f->bfd : f->dfd;
}

/* Map [0, size) of the file, replacing an older mapping. */
static int remap(struct ffio_file *f, uint64_t size)
{
    ffio_mmap_file_close(f);
    if (!size) return 0;
    if (size > SIZE_MAX) return -EFBIG;
    void *const m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, file_fd(f), 0);
    if (m == MAP_FAILED) return -errno;
    /* Extents are random: readahead around a fault would mostly read bytes nobody asked for. */
    (void)madvise(m, (size_t)size, MADV_RANDOM);
    f->map = m;
    f->map_len = (size_t)size;
    return 0;
}

static int refresh(struct ffio_engine *e, struct ffio_file *f)
{
    struct stat st;
    if (f->size_gen == e->submit_gen) return 0;
    if (fstat(file_fd(f), &st) != 0) return -errno;
    f->size = (uint64_t)st.st_size;
    f->size_gen = e->submit_gen;
    if (f->size > f->map_len) return remap(f, f->size);
    return 0;
}

int ffio_mmap_file_added(struct ffio_engine *e, uint32_t file)
{
    struct ffio_file *const f = &e->files[file];
    f->size_gen = e->submit_gen - 1;
    return refresh(e, f);
}

void ffio_mmap_file_close(struct ffio_file *f)
{
    if (f->map) munmap(f->map, f->map_len);
    f->map = NULL;
    f->map_len = 0;
}

int ffio_mmap_submit(struct ffio_engine *e, const uint32_t *si, size_t n)
{
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < n; i++) {
        struct ffio_slot *const s = &e->slots[si[i]];
        struct ffio_file *const f = &e->files[s->ext.file];
        const int rc = refresh(e, f);
        if (rc < 0) {
            s->res = rc; /* marks the slot; finished in the second pass */
            continue;
        }
        s->res = 1;
        if (s->ext.length >= FFIO_MMAP_PREFETCH_MIN && s->ext.offset < f->size) {
            const uint64_t a = s->ext.offset & ~(page - 1);
            const uint64_t end =
                s->ext.offset + s->ext.length < f->size ? s->ext.offset + s->ext.length : f->size;
            (void)madvise(f->map + a, (size_t)(end - a), MADV_WILLNEED);
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct ffio_slot *const s = &e->slots[si[i]];
        const struct ffio_file *const f = &e->files[s->ext.file];
        if (s->res < 0) {
            ffio_engine_finish(e, si[i]);
            continue;
        }
        const uint64_t limit = f->size < f->map_len ? f->size : f->map_len;
        const uint64_t off = s->ext.offset;
        const uint64_t avail =
            off < limit ? (limit - off < s->ext.length ? limit - off : s->ext.length) : 0;
        if (avail) memcpy(s->ext.dst, f->map + off, (size_t)avail);
        s->done = avail;
        s->res = avail == s->ext.length ? (int64_t)avail : -ENODATA;
        ffio_engine_finish(e, si[i]);
    }
    return 0;
}
