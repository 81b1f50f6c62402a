/*
 * ffio engine core: options, files, slots, submit/wait, and the per-extent read state machine
 * (plan / account) shared by the io_uring and pread backends. See ffio_internal.h for the life of
 * an extent and the threading invariants.
 */
#include "ffio_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ffio_test_hooks ffio_test_hooks;
atomic_bool ffio_test_hooks_on;
#ifndef NDEBUG
_Thread_local const char *ffio_err_where;
#endif

#define FFIO_MAX_QD      4096u
#define FFIO_MAX_FILES   65536u
#define FFIO_MAX_THREADS 256u

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

void ffio_log(const struct ffio_engine *e, enum ffio_log_level level, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    if (!e->opts.log) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    e->opts.log(e->opts.log_ctx, level, line);
}

void ffio_opts_default(struct ffio_opts *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->engine = FFIO_ENGINE_AUTO;
    opts->direct = FFIO_DIRECT_AUTO;
    opts->queue_depth = 64;
    opts->max_files = 64;
    opts->threads = 0;
    opts->direct_align = 4096;
    opts->bounce_bytes = 256 * 1024;
    opts->register_files = true;
    opts->register_buffers = true;
    opts->sqpoll = false;
    opts->sqpoll_idle_ms = 50;
    opts->force_no_uring = false;
}

static bool is_pow2(uint64_t x)
{
    return x && !(x & (x - 1));
}

static int opts_validate(const struct ffio_opts *o)
{
    RETURN_IF((unsigned)o->engine > FFIO_ENGINE_MMAP, -EINVAL, "engine kind");
    RETURN_IF((unsigned)o->direct > FFIO_DIRECT_OFF, -EINVAL, "direct mode");
    RETURN_IF(o->queue_depth < 1 || o->queue_depth > FFIO_MAX_QD, -EINVAL, "queue depth");
    RETURN_IF(o->max_files < 1 || o->max_files > FFIO_MAX_FILES, -EINVAL, "max files");
    RETURN_IF(o->threads > FFIO_MAX_THREADS, -EINVAL, "threads");
    RETURN_IF(!is_pow2(o->direct_align) || o->direct_align < 512 || o->direct_align > 65536,
              -EINVAL, "direct_align");
    RETURN_IF(o->bounce_bytes < 2 * (size_t)o->direct_align || o->bounce_bytes % o->direct_align ||
                  o->bounce_bytes > FFIO_MAX_OP_BYTES,
              -EINVAL, "bounce_bytes");
    return 0;
}

/* ---- slots ---- */

/* Point the slot at the file's current descriptors (engine thread). */
static void slot_view(const struct ffio_engine *e, struct ffio_slot *s)
{
    const struct ffio_file *f = &e->files[s->ext.file];
    if (f->dfd >= 0 && !f->direct_off) {
        s->dfd = f->dfd;
        s->dreg = f->dreg;
        s->bfd = -1;
        s->breg = -1;
    } else {
        s->dfd = -1;
        s->dreg = -1;
        s->bfd = f->bfd;
        s->breg = f->breg;
    }
}

int ffio_slot_plan(const struct ffio_engine *e, struct ffio_slot *s)
{
    const uint64_t pos = s->ext.offset + s->done;
    const uint64_t rem = s->ext.length - s->done;
    unsigned char *const d = (unsigned char *)s->ext.dst + s->done;
    struct ffio_op *const op = &s->op;
    const uint64_t mask = e->align - 1;

    op->skip = 0;
    op->bounce = false;
    op->buf = d;
    op->off = pos;
    op->buf_index = s->buf_index;
    if (s->dfd < 0) {
        op->fd = s->bfd;
        op->reg = s->breg;
        op->direct = false;
        op->len = (size_t)min_u64(rem, FFIO_MAX_OP_BYTES);
        return 0;
    }
    op->fd = s->dfd;
    op->reg = s->dreg;
    op->direct = true;
    if (!(pos & mask) && !((uintptr_t)d & mask) && rem >= e->align) {
        /* Zero-copy: the aligned body straight into the destination. FFIO_MAX_OP_BYTES is a
         * multiple of every allowed alignment, so the cap keeps the length aligned. */
        op->len = (size_t)min_u64(rem & ~mask, FFIO_MAX_OP_BYTES);
        return 0;
    }
    if (!s->bounce) {
        s->bounce = aligned_alloc(e->align, e->bounce_bytes);
        if (!s->bounce) return -ENOMEM;
    }
    const uint64_t a0 = pos & ~mask;
    size_t n;
    if (!(((uintptr_t)d - pos) & mask)) {
        /* Destination aligned like the file offset: bounce only up to the next block boundary,
         * after which the body goes straight to the destination. */
        n = e->align;
    } else {
        const uint64_t end = (pos + rem + mask) & ~mask;
        n = (size_t)min_u64(end - a0, e->bounce_bytes);
    }
    op->buf = s->bounce;
    op->off = a0;
    op->len = n;
    op->skip = (size_t)(pos - a0);
    op->bounce = true;
    op->buf_index = -1;
    return 0;
}

ssize_t ffio_hook_result(const struct ffio_slot *s, ssize_t res)
{
    struct ffio_test_hooks *const h = &ffio_test_hooks;
    if (h->eio_offset_plus1) {
        const uint64_t x = h->eio_offset_plus1 - 1;
        if (x >= s->op.off && x < s->op.off + s->op.len) return -EIO;
    }
    if (res < 0) return res;
    if (h->refuse_direct_read && s->op.direct) return -EINVAL;
    if (h->eagain_every || h->eintr_every) {
        const unsigned c = atomic_fetch_add(&h->counter, 1) + 1;
        if (h->eagain_every && c % h->eagain_every == 0) return -EAGAIN;
        if (h->eintr_every && c % h->eintr_every == 0) return -EINTR;
    }
    /* Cut after at least one useful byte, so a fake short read still makes progress. */
    if (h->short_read_max && (size_t)res > s->op.skip + h->short_read_max)
        res = (ssize_t)(s->op.skip + h->short_read_max);
    return res;
}

/* Whether the file behind fd ends at or before `pos` (a read returned nothing useful). */
static bool at_eof(int fd, uint64_t pos)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return false;
    return (uint64_t)st.st_size <= pos;
}

enum ffio_step ffio_slot_account(const struct ffio_engine *e, struct ffio_slot *s, ssize_t res)
{
    if (atomic_load_explicit(&ffio_test_hooks_on, memory_order_relaxed))
        res = ffio_hook_result(s, res);
    if (res < 0) {
        if ((res == -EINTR || res == -EAGAIN) && s->retries < FFIO_MAX_RETRIES) {
            s->retries++;
            s->n_retry++;
            return FFIO_STEP_AGAIN; /* same op again */
        }
        if (res == -EINVAL && s->op.direct) return FFIO_STEP_NEED_BUFFERED;
        s->res = res;
        return FFIO_STEP_DONE;
    }
    const uint64_t rem = s->ext.length - s->done;
    uint64_t got;
    if (s->op.bounce) {
        s->n_bounce++;
        got = (size_t)res > s->op.skip ? min_u64((size_t)res - s->op.skip, rem) : 0;
        if (got) memcpy((unsigned char *)s->ext.dst + s->done, s->op.buf + s->op.skip, got);
    } else {
        got = min_u64((uint64_t)res, rem);
    }
    if (!got) {
        const uint64_t pos = s->ext.offset + s->done;
        /* res == 0 is end of file. A bounced read that stopped before the extent's next byte is
         * EOF only if the file really ends there; otherwise it was a short read: try again. */
        if (res == 0 || at_eof(s->op.fd, pos) || s->retries >= FFIO_MAX_RETRIES) {
            s->res = -ENODATA;
            return FFIO_STEP_DONE;
        }
        s->retries++;
        s->n_short++;
        return FFIO_STEP_AGAIN;
    }
    s->done += got;
    if (s->done == s->ext.length) {
        s->res = (int64_t)s->ext.length;
        return FFIO_STEP_DONE;
    }
    if ((size_t)res < s->op.len) s->n_short++;
    s->retries = 0;
    const int rc = ffio_slot_plan(e, s);
    if (rc < 0) {
        s->res = rc;
        return FFIO_STEP_DONE;
    }
    return FFIO_STEP_AGAIN;
}

void ffio_engine_finish(struct ffio_engine *e, uint32_t si)
{
    e->done_ring[(e->done_head + e->done_count) % e->qd] = si;
    e->done_count++;
}

/* Open a second, buffered descriptor for the file behind fd. Returns the fd or -errno. */
static int reopen_buffered(const struct ffio_file *f, int fd)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int nfd = open(proc, O_RDONLY | O_CLOEXEC);
    if (nfd < 0 && f->owns_dfd) nfd = open(f->name, O_RDONLY | O_CLOEXEC);
    return nfd < 0 ? -errno : nfd;
}

int ffio_engine_switch_buffered(struct ffio_engine *e, uint32_t si)
{
    struct ffio_slot *const s = &e->slots[si];
    struct ffio_file *const f = &e->files[s->ext.file];
    int rc = 0;
    if (!f->direct_off) {
        if (f->bfd < 0) {
            const int fd = reopen_buffered(f, f->dfd);
            TRY(fd);
            f->bfd = fd;
            f->owns_bfd = true;
            if (e->kind == FFIO_ENGINE_URING) ffio_uring_file_added(e, s->ext.file);
        }
        f->direct_off = true;
        ffio_log(e, FFIO_LOG_WARN,
                 "ffio: %s: O_DIRECT read refused (EINVAL); using buffered reads for this file",
                 f->name);
    }
    slot_view(e, s);
    s->retries = 0;
    TRY(ffio_slot_plan(e, s));
out:
    if (rc < 0) {
        s->res = rc;
        ffio_engine_finish(e, si);
    }
    return rc;
}

/* ---- create / destroy ---- */

static int reap(struct ffio_engine *e, bool block);

int ffio_engine_create(const struct ffio_opts *opts, struct ffio_engine **out)
{
    struct ffio_engine *e = NULL;
    int rc = 0;
    RETURN_IF(!out, -EINVAL, "out is NULL");
    *out = NULL;
    struct ffio_opts o;
    if (opts)
        o = *opts;
    else
        ffio_opts_default(&o);
    TRY(opts_validate(&o));

    e = calloc(1, sizeof *e);
    RETURN_IF(!e, -ENOMEM, "engine");
    e->opts = o;
    e->qd = o.queue_depth;
    e->align = o.direct_align;
    e->bounce_bytes = o.bounce_bytes;
    e->slots = calloc(e->qd, sizeof *e->slots);
    e->free_stack = calloc(e->qd, sizeof *e->free_stack);
    e->done_ring = calloc(e->qd, sizeof *e->done_ring);
    e->scratch = calloc(e->qd, sizeof *e->scratch);
    e->files = calloc(o.max_files, sizeof *e->files);
    if (!e->slots || !e->free_stack || !e->done_ring || !e->scratch || !e->files) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < e->qd; i++)
        e->free_stack[i] = e->qd - 1 - i;
    e->n_free = e->qd;

    if (o.engine == FFIO_ENGINE_AUTO || o.engine == FFIO_ENGINE_URING) {
        rc = ffio_uring_create(e);
        if (rc == 0) {
            e->kind = FFIO_ENGINE_URING;
        } else if (o.engine == FFIO_ENGINE_URING) {
            goto out;
        } else {
            e->uring_rc = rc;
            e->kind = FFIO_ENGINE_PREAD;
            rc = 0;
        }
    } else {
        e->kind = o.engine;
    }
    if (e->kind == FFIO_ENGINE_PREAD) TRY(ffio_pool_create(e));
    if (e->uring_rc) {
        const bool forced = ffio_uring_forced_off(&o);
        const char *hint = forced                   ? " (forced off by FFIO_FORCE_NO_URING)"
                           : e->uring_rc == -EPERM  ? " (seccomp or kernel.io_uring_disabled?)"
                           : e->uring_rc == -ENOSYS ? " (kernel without io_uring?)"
                                                    : "";
        ffio_log(e, FFIO_LOG_WARN,
                 "ffio: io_uring unavailable: io_uring_queue_init: %s%s; using the pread thread "
                 "pool (%u threads)",
                 ffio_strerror(e->uring_rc), hint, e->stats.threads);
    }
    *out = e;
    e = NULL;
out:
    ffio_engine_destroy(e);
    return rc;
}

void ffio_engine_destroy(struct ffio_engine *e)
{
    if (!e) return;
    /* Drain: the kernel or a worker may still be writing into caller buffers. */
    while (e->slots && !e->broken && e->n_free + e->done_count < e->qd) {
        if (reap(e, true) < 0) break;
    }
    if (e->uring) ffio_uring_destroy(e);
    if (e->pool) ffio_pool_destroy(e);
    for (uint32_t i = 0; e->files && i < e->n_files; i++) {
        struct ffio_file *const f = &e->files[i];
        ffio_mmap_file_close(f);
        if (f->owns_dfd && f->dfd >= 0) close(f->dfd);
        if (f->owns_bfd && f->bfd >= 0) close(f->bfd);
        free(f->name);
    }
    for (uint32_t i = 0; e->slots && i < e->qd; i++)
        free(e->slots[i].bounce);
    free(e->files);
    free(e->scratch);
    free(e->done_ring);
    free(e->free_stack);
    free(e->slots);
    free(e);
}

/* ---- files ---- */

static int file_finish_add(struct ffio_engine *e, struct ffio_file *f)
{
    struct stat st;
    const int fd = f->dfd >= 0 ? f->dfd : f->bfd;
    RETURN_IF(fstat(fd, &st) != 0, -errno, "fstat");
    RETURN_IF(S_ISDIR(st.st_mode), -EISDIR, "a directory");
    const uint32_t idx = e->n_files;
    if (e->kind == FFIO_ENGINE_MMAP) {
        const int rc = ffio_mmap_file_added(e, idx);
        if (rc < 0) return rc;
    }
    if (e->kind == FFIO_ENGINE_URING) ffio_uring_file_added(e, idx);
    e->n_files++;
    return (int)idx;
}

static void file_release(struct ffio_file *f)
{
    if (f->owns_dfd && f->dfd >= 0) close(f->dfd);
    if (f->owns_bfd && f->bfd >= 0) close(f->bfd);
    free(f->name);
    memset(f, 0, sizeof *f);
}

static struct ffio_file *file_slot_new(struct ffio_engine *e)
{
    struct ffio_file *const f = &e->files[e->n_files];
    memset(f, 0, sizeof *f);
    f->dfd = f->bfd = f->dreg = f->breg = -1;
    return f;
}

int ffio_engine_add_file(struct ffio_engine *e, const char *path)
{
    int rc = 0;
    RETURN_IF(!e || !path, -EINVAL, "NULL argument");
    RETURN_IF(e->n_files >= e->opts.max_files, -ENOSPC, "file table full");
    RETURN_IF(strnlen(path, PATH_MAX) >= PATH_MAX, -EINVAL, "path too long");
    struct ffio_file *const f = file_slot_new(e);
    f->name = strdup(path);
    if (!f->name) {
        rc = -ENOMEM;
        goto out;
    }
    if (e->kind != FFIO_ENGINE_MMAP && e->opts.direct != FFIO_DIRECT_OFF) {
        int fd = -EINVAL; /* the hook: as a filesystem that refuses O_DIRECT */
        if (!(atomic_load(&ffio_test_hooks_on) && ffio_test_hooks.refuse_direct_open))
            fd = ffr_open_regular(path, O_DIRECT); /* never blocks on a FIFO */
        if (fd >= 0) {
            f->dfd = fd;
            f->owns_dfd = true;
        } else if (fd != -EINVAL) {
            rc = fd;
            goto out;
        } else if (e->opts.direct == FFIO_DIRECT_ON) {
            rc = -EINVAL;
            goto out;
        } else if (!e->logged_direct) {
            e->logged_direct = true;
            ffio_log(e, FFIO_LOG_WARN,
                     "ffio: %s: O_DIRECT refused by the filesystem (EINVAL: tmpfs or a network "
                     "filesystem?); using buffered reads for it and any other such file",
                     path);
        }
    }
    if (f->dfd < 0) {
        const int fd = ffr_open_regular(path, 0);
        if (fd < 0) {
            rc = fd;
            goto out;
        }
        f->bfd = fd;
        f->owns_bfd = true;
    }
    rc = file_finish_add(e, f);
out:
    if (rc < 0) file_release(f);
    return rc;
}

int ffio_engine_add_fd(struct ffio_engine *e, int fd, const char *name)
{
    int rc = 0;
    RETURN_IF(!e, -EINVAL, "NULL engine");
    RETURN_IF(fd < 0, -EBADF, "negative fd");
    RETURN_IF(e->n_files >= e->opts.max_files, -ENOSPC, "file table full");
    const int fl = fcntl(fd, F_GETFL);
    RETURN_IF(fl < 0, -EBADF, "fd not open");
    struct ffio_file *const f = file_slot_new(e);
    char label[32];
    if (!name) {
        snprintf(label, sizeof label, "fd %d", fd);
        name = label;
    }
    f->name = strdup(name);
    if (!f->name) {
        rc = -ENOMEM;
        goto out;
    }
    if ((fl & O_DIRECT) && e->kind != FFIO_ENGINE_MMAP)
        f->dfd = fd;
    else
        f->bfd = fd;
    rc = file_finish_add(e, f);
out:
    if (rc < 0) file_release(f);
    return rc;
}

int ffio_engine_register_buffer(struct ffio_engine *e, void *base, size_t len)
{
    RETURN_IF(!e || !base || !len, -EINVAL, "empty region");
    RETURN_IF(e->n_free + e->done_count < e->qd, -EBUSY, "extents in flight");
    const size_t pieces = (len + FFIO_MAX_OP_BYTES - 1) / FFIO_MAX_OP_BYTES;
    RETURN_IF(pieces > FFIO_MAX_BUF_REGIONS - e->n_bufs, -ENOSPC, "too many regions");
    for (size_t i = 0; i < pieces; i++) {
        const size_t off = i * FFIO_MAX_OP_BYTES;
        e->buf_base[e->n_bufs] = (unsigned char *)base + off;
        e->buf_len[e->n_bufs] = len - off < FFIO_MAX_OP_BYTES ? len - off : FFIO_MAX_OP_BYTES;
        e->n_bufs++;
    }
    if (e->kind != FFIO_ENGINE_URING || !e->opts.register_buffers) return 0;
    return ffio_uring_buffers_changed(e);
}

/* ---- submit / wait ---- */

static int buf_lookup(const struct ffio_engine *e, const void *dst, uint64_t len)
{
    const uintptr_t a = (uintptr_t)dst;
    for (unsigned i = 0; i < e->n_bufs; i++) {
        const uintptr_t b = (uintptr_t)e->buf_base[i];
        if (a >= b && a - b <= e->buf_len[i] && len <= e->buf_len[i] - (a - b)) return (int)i;
    }
    return -1;
}

static int extent_check(const struct ffio_engine *e, const struct ffio_extent *x)
{
    RETURN_IF(x->file >= e->n_files, -EBADF, "unknown file handle");
    RETURN_IF(x->flags != 0, -EINVAL, "reserved flags");
    RETURN_IF(x->length && !x->dst, -EINVAL, "NULL destination");
    RETURN_IF(x->offset > (uint64_t)INT64_MAX || x->length > (uint64_t)INT64_MAX - x->offset,
              -EINVAL, "offset + length overflows");
    return 0;
}

static void note_unaligned(struct ffio_engine *e, const struct ffio_slot *s)
{
    const uint64_t mask = e->align - 1;
    if (e->logged_bounce || s->dfd < 0) return;
    if (!((s->ext.offset | s->ext.length | (uintptr_t)s->ext.dst) & mask)) return;
    e->logged_bounce = true;
    ffio_log(e, FFIO_LOG_INFO,
             "ffio: %s: unaligned O_DIRECT extent (offset %llu, length %llu, dst %p) read through "
             "a bounce buffer; align offsets, lengths and buffers to %zu bytes for zero-copy",
             e->files[s->ext.file].name, (unsigned long long)s->ext.offset,
             (unsigned long long)s->ext.length, s->ext.dst, e->align);
}

static int submit_impl(struct ffio_engine *e, const struct ffio_extent *ext, size_t n,
                       size_t base_index)
{
    RETURN_IF(!e || (n && !ext), -EINVAL, "NULL argument");
    RETURN_IF(e->broken, e->broken, "engine broken by an earlier ring error");
    for (size_t i = 0; i < n; i++) {
        const int rc = extent_check(e, &ext[i]);
        if (rc < 0) return rc;
    }
    const size_t k = n < e->n_free ? n : e->n_free;
    if (!k) return 0;
    e->submit_gen++;
    size_t cnt = 0;
    for (size_t i = 0; i < k; i++) {
        const uint32_t si = e->free_stack[--e->n_free];
        struct ffio_slot *const s = &e->slots[si];
        s->ext = ext[i];
        s->done = 0;
        s->res = 0;
        s->retries = 0;
        s->user_index = base_index + i;
        s->n_short = s->n_retry = s->n_bounce = s->n_fixed = 0;
        s->step = FFIO_STEP_AGAIN;
        if (!s->ext.length) {
            ffio_engine_finish(e, si);
            continue;
        }
        slot_view(e, s);
        s->buf_index = e->bufs_registered ? buf_lookup(e, s->ext.dst, s->ext.length) : -1;
        if (e->kind != FFIO_ENGINE_MMAP) {
            note_unaligned(e, s);
            const int rc = ffio_slot_plan(e, s);
            if (rc < 0) {
                s->res = rc;
                ffio_engine_finish(e, si);
                continue;
            }
        }
        e->scratch[cnt++] = si;
    }
    int rc = 0;
    if (cnt) {
        switch (e->kind) {
        case FFIO_ENGINE_URING:
            rc = ffio_uring_submit(e, e->scratch, cnt);
            break;
        case FFIO_ENGINE_PREAD:
            rc = ffio_pool_submit(e, e->scratch, cnt);
            break;
        default:
            rc = ffio_mmap_submit(e, e->scratch, cnt);
            break;
        }
    }
    if (rc < 0) {
        e->broken = rc;
        return rc;
    }
    return (int)k;
}

int ffio_engine_submit(struct ffio_engine *e, const struct ffio_extent *ext, size_t n)
{
    return submit_impl(e, ext, n, 0);
}

static int reap(struct ffio_engine *e, bool block)
{
    int rc;
    switch (e->kind) {
    case FFIO_ENGINE_URING:
        rc = ffio_uring_reap(e, block);
        if (rc < 0) e->broken = rc; /* the ring itself failed; its reads are in an unknown state */
        return rc;
    case FFIO_ENGINE_PREAD:
        return ffio_pool_reap(e, block);
    default:
        return 0; /* mmap finishes every extent inside submit */
    }
}

/* Move finished slots to out; returns how many. by_index: out[s->user_index]. */
static size_t drain_done(struct ffio_engine *e, struct ffio_completion *out, size_t cap, size_t got,
                         bool by_index)
{
    while (e->done_count && got < cap) {
        const uint32_t si = e->done_ring[e->done_head];
        e->done_head = (e->done_head + 1) % e->qd;
        e->done_count--;
        struct ffio_slot *const s = &e->slots[si];
        struct ffio_completion *const c = &out[by_index ? s->user_index : got];
        c->tag = s->ext.tag;
        c->res = s->res;
        c->dst = s->ext.dst;
        c->offset = s->ext.offset;
        c->length = s->ext.length;
        c->done = s->done;
        c->file = s->ext.file;
        c->flags = 0;
        struct ffio_engine_info *const st = &e->stats;
        st->extents++;
        st->bytes += s->done;
        st->errors += s->res < 0;
        st->short_reads += s->n_short;
        st->retries += s->n_retry;
        st->bounced += s->n_bounce;
        st->fixed_reads += s->n_fixed;
        e->free_stack[e->n_free++] = si;
        got++;
    }
    return got;
}

static int wait_impl(struct ffio_engine *e, struct ffio_completion *out, size_t cap,
                     size_t min_complete, bool by_index)
{
    RETURN_IF(!e || (cap && !out), -EINVAL, "NULL argument");
    RETURN_IF(e->broken, e->broken, "engine broken by an earlier ring error");
    const size_t outstanding = e->qd - e->n_free;
    if (min_complete > cap) min_complete = cap;
    if (min_complete > outstanding) min_complete = outstanding;
    size_t got = drain_done(e, out, cap, 0, by_index);
    if (got >= min_complete) {
        /* Polling, or already satisfied: add whatever else is ready without blocking. (A blocking
         * reap below collects every completion that is ready when it wakes, so it needs no
         * extra poll: with DEFER_TASKRUN that poll would cost a system call.) */
        if (got < cap && e->n_free + e->done_count < e->qd) {
            const int rc = reap(e, false);
            if (rc < 0) return rc;
            got = drain_done(e, out, cap, got, by_index);
        }
        return (int)got;
    }
    while (got < min_complete) {
        const int rc = reap(e, true);
        if (rc < 0) return rc;
        got = drain_done(e, out, cap, got, by_index);
    }
    return (int)got;
}

int ffio_engine_wait(struct ffio_engine *e, struct ffio_completion *out, size_t cap,
                     size_t min_complete)
{
    return wait_impl(e, out, cap, min_complete, false);
}

int ffio_engine_read(struct ffio_engine *e, const struct ffio_extent *ext, size_t n,
                     struct ffio_completion *comp)
{
    RETURN_IF(!e || (n && (!ext || !comp)), -EINVAL, "NULL argument");
    RETURN_IF(e->n_free != e->qd, -EBUSY, "extents outstanding");
    for (size_t i = 0; i < n; i++) {
        const int rc = extent_check(e, &ext[i]);
        if (rc < 0) return rc;
    }
    size_t next = 0, landed = 0;
    while (landed < n) {
        if (next < n) {
            const int k = submit_impl(e, ext + next, n - next, next);
            if (k < 0) return k;
            next += (size_t)k;
        }
        const int got = wait_impl(e, comp, n, 1, true);
        if (got < 0) return got;
        landed += (size_t)got;
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += comp[i].res < 0;
    return failed;
}

/* ---- queries and names ---- */

int ffio_engine_describe(const struct ffio_engine *e, const struct ffio_completion *c, char *buf,
                         size_t cap)
{
    if (!c) return snprintf(buf, cap, "(no completion)");
    const char *name = e && c->file < e->n_files ? e->files[c->file].name : "?";
    const unsigned long long off = c->offset, len = c->length, done = c->done;
    if (c->res >= 0)
        return snprintf(buf, cap, "file %s offset %llu: ok (%llu bytes)", name, off, len);
    if (c->res == -ENODATA)
        return snprintf(buf, cap,
                        "file %s offset %llu: short read past end of file (got %llu of %llu bytes)",
                        name, off, done, len);
    return snprintf(buf, cap, "file %s offset %llu length %llu: %s (after %llu of %llu bytes)",
                    name, off, len, ffio_strerror((int)c->res), done, len);
}

void ffio_engine_info(const struct ffio_engine *e, struct ffio_engine_info *out)
{
    if (!out) return;
    if (!e) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = e->stats;
    out->kind = e->kind;
    out->uring_rc = e->uring_rc;
    out->queue_depth = e->qd;
    out->direct_align = (unsigned)e->align;
}

int ffio_engine_file_info(const struct ffio_engine *e, uint32_t file, struct ffio_file_info *out)
{
    RETURN_IF(!e || !out, -EINVAL, "NULL argument");
    RETURN_IF(file >= e->n_files, -EBADF, "unknown file handle");
    const struct ffio_file *const f = &e->files[file];
    out->name = f->name;
    out->direct = f->dfd >= 0 && !f->direct_off && e->kind != FFIO_ENGINE_MMAP;
    out->fd = out->direct ? f->dfd : (f->bfd >= 0 ? f->bfd : f->dfd);
    return 0;
}

size_t ffio_batch_bytes(const struct ffio_extent *ext, size_t n, size_t align)
{
    if (!align || !is_pow2(align)) align = 1;
    size_t sum = 0;
    for (size_t i = 0; ext && i < n; i++) {
        const uint64_t r = ext[i].length > UINT64_MAX - (align - 1)
                               ? UINT64_MAX
                               : (ext[i].length + align - 1) & ~(uint64_t)(align - 1);
        if (r > SIZE_MAX - sum) return SIZE_MAX;
        sum += (size_t)r;
    }
    return sum;
}

const char *ffio_engine_kind_name(enum ffio_engine_kind kind)
{
    switch (kind) {
    case FFIO_ENGINE_AUTO:
        return "auto";
    case FFIO_ENGINE_URING:
        return "uring";
    case FFIO_ENGINE_PREAD:
        return "pread";
    case FFIO_ENGINE_MMAP:
        return "mmap";
    }
    return "?";
}

int ffio_engine_kind_parse(const char *name, enum ffio_engine_kind *out)
{
    RETURN_IF(!name || !out, -EINVAL, "NULL argument");
    for (int k = FFIO_ENGINE_AUTO; k <= FFIO_ENGINE_MMAP; k++) {
        if (!strcmp(name, ffio_engine_kind_name((enum ffio_engine_kind)k))) {
            *out = (enum ffio_engine_kind)k;
            return 0;
        }
    }
    return -EINVAL;
}

const char *ffio_strerror(int rc)
{
    if (rc >= 0) return "success";
    if (rc == -ENODATA) return "read past end of file (short read)";
    if (rc <= -1000) return ffr_strerror(rc);
    const char *s = strerrordesc_np(-rc);
    return s ? s : "unknown error";
}
