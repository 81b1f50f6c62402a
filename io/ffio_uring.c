/*
 * io_uring backend: one ring per engine, sized to the queue depth so that with at most one read
 * per slot in flight the SQ can never be full and the CQ can never overflow.
 *
 * Ring setup tries, in order: SQPOLL (when asked), SINGLE_ISSUER|DEFER_TASKRUN (kernel >= 6.1:
 * completions run in the submitting task, no IPIs), COOP_TASKRUN (5.19), a plain ring. The ring
 * starts disabled (R_DISABLED) when SINGLE_ISSUER is used so that the thread that submits first
 * becomes its issuer, whichever thread created the engine.
 */
#include "ffio_internal.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

struct ffio_uring {
    struct io_uring ring;       /* the ring */
    struct io_uring_cqe **cqes; /* qd entries for io_uring_peek_batch_cqe */
    unsigned pending;           /* SQEs prepared since the last io_uring_submit */
    bool disabled;              /* created with R_DISABLED and not enabled yet */
    bool files_registered;      /* a sparse fixed-file table of 2 * max_files entries exists */
    bool logged_files;          /* the "file registration failed" line was logged */
    bool logged_buffers;        /* the "buffer registration failed" line was logged */
};

bool ffio_uring_forced_off(const struct ffio_opts *opts)
{
    if (opts && opts->force_no_uring) return true;
    const char *const env = getenv("FFIO_FORCE_NO_URING");
    return env && *env && strcmp(env, "0") != 0;
}

int ffio_uring_probe(void)
{
    struct io_uring ring;
    if (ffio_uring_forced_off(NULL)) return -ENOSYS;
    const int rc = io_uring_queue_init(2, &ring, 0);
    if (rc < 0) return rc;
    io_uring_queue_exit(&ring);
    return 0;
}

int ffio_uring_create(struct ffio_engine *e)
{
    if (ffio_uring_forced_off(&e->opts)) return -ENOSYS;
    struct ffio_uring *const u = calloc(1, sizeof *u);
    if (!u) return -ENOMEM;
    u->cqes = calloc(e->qd, sizeof *u->cqes);
    if (!u->cqes) {
        free(u);
        return -ENOMEM;
    }
    const uint32_t tries[] = {
        IORING_SETUP_SQPOLL,
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED |
            IORING_SETUP_SUBMIT_ALL,
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL,
        0,
    };
    int rc = -ENOSYS, sqpoll_rc = 0;
    uint32_t flags = 0;
    for (size_t i = e->opts.sqpoll ? 0 : 1; i < sizeof tries / sizeof tries[0]; i++) {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        p.flags = tries[i];
        if (p.flags & IORING_SETUP_SQPOLL) p.sq_thread_idle = e->opts.sqpoll_idle_ms;
        rc = io_uring_queue_init_params(e->qd, &u->ring, &p);
        if (rc == 0) {
            flags = p.flags;
            break;
        }
        if (i == 0) sqpoll_rc = rc;
    }
    if (rc < 0) {
        free(u->cqes);
        free(u);
        return rc;
    }
    e->uring = u;
    u->disabled = flags & IORING_SETUP_R_DISABLED;
    e->stats.uring_flags = flags;
    e->stats.sqpoll = flags & IORING_SETUP_SQPOLL;
    e->stats.defer_taskrun = flags & IORING_SETUP_DEFER_TASKRUN;
    if (sqpoll_rc)
        ffio_log(e, FFIO_LOG_WARN, "ffio: SQPOLL ring refused (%s); submitting without it",
                 ffio_strerror(sqpoll_rc));
    if (e->opts.register_files) {
        /* Two entries per file: the O_DIRECT descriptor and a buffered fallback. */
        rc = io_uring_register_files_sparse(&u->ring, 2 * e->opts.max_files);
        if (rc == 0) {
            u->files_registered = true;
            e->stats.registered_files = true;
        } else {
            u->logged_files = true;
            ffio_log(e, FFIO_LOG_INFO,
                     "ffio: registered files unavailable (%s); using plain descriptors",
                     ffio_strerror(rc));
        }
    }
    return 0;
}

void ffio_uring_destroy(struct ffio_engine *e)
{
    struct ffio_uring *const u = e->uring;
    if (!u) return;
    io_uring_queue_exit(&u->ring);
    free(u->cqes);
    free(u);
    e->uring = NULL;
}

static int reg_one(struct ffio_engine *e, int fd, unsigned idx)
{
    struct ffio_uring *const u = e->uring;
    const int rc = io_uring_register_files_update(&u->ring, idx, &fd, 1);
    if (rc == 1) return (int)idx;
    if (!u->logged_files) {
        u->logged_files = true;
        ffio_log(e, FFIO_LOG_INFO, "ffio: registering a file failed (%s); using its descriptor",
                 ffio_strerror(rc < 0 ? rc : -EIO));
    }
    return -1;
}

int ffio_uring_file_added(struct ffio_engine *e, uint32_t file)
{
    struct ffio_file *const f = &e->files[file];
    if (!e->uring || !e->uring->files_registered) return 0;
    if (f->dfd >= 0 && f->dreg < 0) f->dreg = reg_one(e, f->dfd, 2 * file);
    if (f->bfd >= 0 && f->breg < 0) f->breg = reg_one(e, f->bfd, 2 * file + 1);
    return 0;
}

int ffio_uring_buffers_changed(struct ffio_engine *e)
{
    struct ffio_uring *const u = e->uring;
    struct iovec iov[FFIO_MAX_BUF_REGIONS];
    if (e->bufs_registered) io_uring_unregister_buffers(&u->ring);
    e->bufs_registered = false;
    e->stats.registered_buffers = 0;
    for (unsigned i = 0; i < e->n_bufs; i++) {
        iov[i].iov_base = e->buf_base[i];
        iov[i].iov_len = e->buf_len[i];
    }
    const int rc = io_uring_register_buffers(&u->ring, iov, e->n_bufs);
    if (rc < 0) {
        if (!u->logged_buffers) {
            u->logged_buffers = true;
            ffio_log(e, FFIO_LOG_WARN,
                     "ffio: registering buffers failed (%s; RLIMIT_MEMLOCK?); reading without "
                     "read_fixed",
                     ffio_strerror(rc));
        }
        return 0;
    }
    e->bufs_registered = true;
    e->stats.registered_buffers = e->n_bufs;
    return 1;
}

/* Submit everything prepared; transient errors are retried after reaping nothing. */
static int flush(struct ffio_uring *u)
{
    int spins = 0;
    while (u->pending) {
        const int rc = io_uring_submit(&u->ring);
        if (rc >= 0) {
            u->pending = 0;
            break;
        }
        if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && spins++ < 1000) continue;
        return rc;
    }
    return 0;
}

static int prep(struct ffio_engine *e, uint32_t si)
{
    struct ffio_uring *const u = e->uring;
    struct ffio_slot *const s = &e->slots[si];
    const struct ffio_op *const op = &s->op;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        /* Not expected (one SQE per slot at most); make room by submitting. */
        const int rc = flush(u);
        if (rc < 0) return rc;
        sqe = io_uring_get_sqe(&u->ring);
        if (!sqe) return -EBUSY;
    }
    const int fd = op->reg >= 0 ? op->reg : op->fd;
    if (op->buf_index >= 0) {
        io_uring_prep_read_fixed(sqe, fd, op->buf, (unsigned)op->len, op->off, op->buf_index);
        s->n_fixed++;
    } else {
        io_uring_prep_read(sqe, fd, op->buf, (unsigned)op->len, op->off);
    }
    if (op->reg >= 0) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, si);
    u->pending++;
    return 0;
}

/* liburing 2.3 declares io_uring_enable_rings but does not export it: call the kernel directly. */
static int enable_rings(struct io_uring *ring)
{
    const long rc =
        syscall(__NR_io_uring_register, ring->ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0);
    return rc < 0 ? -errno : 0;
}

int ffio_uring_submit(struct ffio_engine *e, const uint32_t *si, size_t n)
{
    struct ffio_uring *const u = e->uring;
    if (u->disabled) {
        const int rc = enable_rings(&u->ring);
        if (rc < 0) return rc;
        u->disabled = false;
        /* Registered ring fds are per task: register from the thread that will use the ring. */
        (void)io_uring_register_ring_fd(&u->ring);
    }
    for (size_t i = 0; i < n; i++) {
        const int rc = prep(e, si[i]);
        if (rc < 0) return rc;
    }
    return flush(u);
}

/* Apply one completion; returns 1 when the slot finished. */
static int complete_one(struct ffio_engine *e, uint32_t si, int res)
{
    if (si >= e->qd) return 0; /* not ours; cannot happen */
    struct ffio_slot *const s = &e->slots[si];
    int rc = 0;
    switch (ffio_slot_account(e, s, res)) {
    case FFIO_STEP_AGAIN:
        rc = prep(e, si);
        break;
    case FFIO_STEP_NEED_BUFFERED:
        if (ffio_engine_switch_buffered(e, si) < 0) return 1; /* finished with the error */
        rc = prep(e, si);
        break;
    case FFIO_STEP_DONE:
        ffio_engine_finish(e, si);
        return 1;
    }
    if (rc == 0) return 0;
    s->res = rc; /* could not queue the next read: report it on this extent */
    ffio_engine_finish(e, si);
    return 1;
}

int ffio_uring_reap(struct ffio_engine *e, bool block)
{
    struct ffio_uring *const u = e->uring;
    bool polled = false;
    for (;;) {
        const unsigned n = io_uring_peek_batch_cqe(&u->ring, u->cqes, e->qd);
        int finished = 0;
        for (unsigned i = 0; i < n; i++) {
            const struct io_uring_cqe *const cqe = u->cqes[i];
            finished += complete_one(e, (uint32_t)io_uring_cqe_get_data64(cqe), cqe->res);
        }
        if (n) io_uring_cq_advance(&u->ring, n);
        const int rc = flush(u); /* continuations of short reads, retries, bounce steps */
        if (rc < 0) return rc;
        if (finished) return 0;
        if (n) continue;
        if (!block) {
            /* DEFER_TASKRUN rings only post completions when the task enters the kernel. */
            if (polled || !(e->stats.uring_flags & IORING_SETUP_DEFER_TASKRUN)) return 0;
            polled = true;
            const int grc = io_uring_get_events(&u->ring);
            if (grc < 0 && grc != -EINTR && grc != -EAGAIN && grc != -EBUSY) return grc;
            continue;
        }
        struct io_uring_cqe *cqe = NULL;
        const int wrc = io_uring_wait_cqe(&u->ring, &cqe);
        if (wrc < 0 && wrc != -EINTR && wrc != -EAGAIN && wrc != -EBUSY && wrc != -ETIME)
            return wrc;
    }
}
