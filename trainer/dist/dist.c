/*
 * dist: the launcher's variables, the TCP star, the MPI backend, and the NCCL backend's
 * bootstrap (dist.h has the contract; docs/distributed.md the launch recipes).
 *
 * The TCP star: rank 0 holds one connection per other rank. A collective is a sequence of
 * messages, each a 24-byte header (magic, operation, element type and reduction, the
 * communicator's collective number, payload bytes) and its payload; a receiver checks the header
 * against what it expects, so ranks that disagree on the order of collectives fail with a line
 * saying so instead of mixing buffers. Sockets are non-blocking and every wait is a poll() against
 * the collective's deadline: a dead peer shows as end-of-file or a reset at once, a hung one as a
 * timeout. Headers travel in host byte order: every rank of a job runs the same little-endian
 * build (the trainer's checkpoints assume the same).
 *
 * The communication thread (dist.h OVERLAP): started at the first trn_dist_grad_begin, it runs a
 * FIFO of jobs, and from then on every collective goes through it: gradient buckets are queued
 * and not waited for, every other call queues its job and waits for it. So the communicator's
 * state (sockets, seq, tmp, err, broken; MPI; NCCL) is touched by one thread at a time (the
 * caller's before the thread starts, the thread's after), and the order of collectives is the
 * order in which the caller issued them, the same on every rank.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include "priv/dist_internal.h"
#include "util.h"
#include "errors.h"

static int sync_init(struct trn_dist *d);
static void comm_stop(struct trn_dist *d);

double dist_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int dist_fail(struct trn_dist *d, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int dist_fail(struct trn_dist *d, int rc, const char *fmt, ...)
{
    int n = snprintf(d->err, sizeof d->err, "rank %d: ", d->rank);
    if (n < 0 || (size_t)n >= sizeof d->err) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err + n, sizeof d->err - (size_t)n, fmt, ap);
    va_end(ap);
    d->broken = true;
    return rc;
}

const char *dist_op_name(int op)
{
    switch (op) {
    case OP_HELLO:
        return "hello";
    case OP_WELCOME:
        return "welcome";
    case OP_ALLREDUCE:
        return "all-reduce";
    case OP_BROADCAST:
        return "broadcast";
    case OP_EXCHANGE_N:
        return "exchange";
    default:
        return "unknown message";
    }
}

int trn_dist_create(const struct trn_dist_env *env, const struct trn_dist_opts *opts,
                    struct trn_dist **out, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    struct trn_dist_opts o;
    if (opts)
        o = *opts;
    else
        trn_dist_opts_default(&o);
    if (!env || !out || env->world_size < 1 || env->rank < 0 || env->rank >= env->world_size ||
        !(o.timeout_s > 0) || o.bucket_bytes < 4096 || o.port_offset < 0 ||
        (unsigned)o.backend > TRN_DIST_NCCL) {
        trn_seterr(err, err_cap, "bad communicator options");
        return -EINVAL;
    }
    struct trn_dist *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->rank = env->rank;
    d->world = env->world_size;
    d->local_rank = env->local_rank;
    d->timeout_s = o.timeout_s;
    /* a deadline as short as the heartbeat's limit ends waits on a silent rank itself */
    d->hb_limit_s = o.heartbeat_s > 0 && o.heartbeat_s < o.timeout_s ? o.heartbeat_s : 0;
    d->hb_opt_s = o.heartbeat_s;
    d->bucket_bytes = o.bucket_bytes & ~(size_t)7;
    d->listen_fd = -1;
    d->overlap = o.overlap;
    d->first_bucket_bytes = o.first_bucket_bytes >= 4 && o.first_bucket_bytes < d->bucket_bytes
                                ? o.first_bucket_bytes
                                : d->bucket_bytes;
    d->thread_ok = true; /* TCP and NCCL; MPI decides in dist_mpi_open */
    enum trn_dist_backend b = o.backend;
    if (b == TRN_DIST_AUTO)
        b = env->source == TRN_DIST_SRC_OMPI && dist_mpi_backend() ? TRN_DIST_MPI : TRN_DIST_TCP;
    if (d->world == 1 && b != TRN_DIST_NCCL) b = TRN_DIST_SINGLE;
    d->backend = b;
    int rc = 0;
    if (!trn_dist_backend_available(b)) {
        rc = dist_fail(d, -ENOTSUP,
                       "the %s backend is not built into this program (%s); world size %d needs it",
                       trn_dist_backend_name(b),
                       b == TRN_DIST_MPI
                           ? "configure found no Open MPI: apt-get install libopenmpi-dev"
                           : "configure found no CUDA toolkit with nccl.h and libnccl",
                       d->world);
    } else {
        d->be = b == TRN_DIST_MPI    ? dist_mpi_backend()
                : b == TRN_DIST_NCCL ? dist_nccl_backend()
                                     : dist_tcp_backend();
        const int port = env->master_port + o.port_offset;
        if (d->be->star && d->world > 1 &&
            (!env->master_addr[0] || !env->master_port || port > 65535))
            rc = dist_fail(d, -EINVAL,
                           "world size %d over %s needs MASTER_ADDR and MASTER_PORT (rank 0's host "
                           "and a free port; port + %d is used too)",
                           d->world, trn_dist_backend_name(b), o.port_offset);
        else if (d->be->star && d->world > 1)
            rc = dist_star_open(d, env->master_addr, port);
        if (rc == 0 && d->be->open) rc = d->be->open(d, env, &o);
    }
    if (rc < 0) {
        trn_seterr(err, err_cap, "%s", d->err);
        d->broken = true;
        trn_dist_destroy(d);
        return rc;
    }
    d->broken = false;
    d->err[0] = '\0';
    if (d->be->star && d->world > 1 && (rc = dist_star_heartbeat(d)) < 0) {
        trn_seterr(err, err_cap, "cannot start the heartbeat thread: %s", strerror(-rc));
        trn_dist_destroy(d);
        return rc;
    }
    if (d->world > 1 && (rc = sync_init(d)) < 0) {
        trn_seterr(err, err_cap, "cannot create the communication thread's locks: %s",
                   strerror(-rc));
        trn_dist_destroy(d);
        return rc;
    }
    *out = d;
    return 0;
}

void trn_dist_destroy(struct trn_dist *d)
{
    if (!d) return;
    comm_stop(d);
    if (d->be && d->be->close) d->be->close(d);
    dist_star_close(d);
    free(d->tmp);
    free(d->q);
    if (d->sync_init) {
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv_job);
        pthread_cond_destroy(&d->cv_done);
    }
    free(d);
}

_Noreturn void trn_dist_abort(struct trn_dist *d, int code)
{
    fflush(stdout);
    fflush(stderr);
    if (d && d->be && d->be->abort) d->be->abort(d, code);
    _exit(code);
}

int trn_dist_rank(const struct trn_dist *d)
{
    return d ? d->rank : 0;
}

int trn_dist_world(const struct trn_dist *d)
{
    return d ? d->world : 1;
}

int trn_dist_local_rank(const struct trn_dist *d)
{
    return d ? d->local_rank : 0;
}

enum trn_dist_backend trn_dist_backend(const struct trn_dist *d)
{
    return d ? d->backend : TRN_DIST_SINGLE;
}

const char *trn_dist_error(const struct trn_dist *d)
{
    return d ? d->err : "";
}

static int usable(struct trn_dist *d, const void *buf, size_t n)
{
    if (!d || (!buf && n)) return -EINVAL;
    if (d->broken)
        return d->err[0]
                   ? -EPROTO
                   : dist_fail(d, -EPROTO, "the communicator failed earlier and cannot be used");
    return 0;
}

static int reduce(struct trn_dist *d, void *buf, size_t n, enum dtype dt, enum trn_dist_op op)
{
    int rc = usable(d, buf, n);
    if (rc < 0 || d->world == 1) return rc;
    if ((unsigned)op > TRN_DIST_MIN) return -EINVAL;
    return d->be->reduce(d, buf, n, dt, op);
}

/* A float32 sum of a whole arena: the backend's own (NCCL: device memory, also on one rank), or
 * the host reduce. */
static int exec_allreduce_f32(struct trn_dist *d, float *buf, size_t n)
{
    if (!d->be->allreduce_f32) return reduce(d, buf, n, DT_F32, TRN_DIST_SUM);
    const int rc = usable(d, buf, n);
    return rc < 0 ? rc : d->be->allreduce_f32(d, buf, n);
}

static int exec_broadcast(struct trn_dist *d, void *buf, size_t bytes, bool device)
{
    int rc = usable(d, buf, bytes);
    if (rc < 0 || d->world == 1) return rc;
    return d->be->bcast(d, buf, bytes, device);
}

/* A gradient bucket: the same all-reduce as a whole arena's, on a slice of it. */
static int exec_grad(struct trn_dist *d, const struct job *j)
{
    if (!d->be->grad) return reduce(d, j->host, j->n, DT_F32, TRN_DIST_SUM);
    const int rc = usable(d, j->dev, j->n);
    return rc < 0 ? rc : d->be->grad(d, j);
}

static int exec_job(struct trn_dist *d, const struct job *j)
{
    switch (j->kind) {
    case JOB_REDUCE:
        return j->dt == DT_F32 ? exec_allreduce_f32(d, j->buf, j->n)
                               : reduce(d, j->buf, j->n, j->dt, j->op);
    case JOB_BCAST:
        return exec_broadcast(d, j->buf, j->n, j->device);
    case JOB_GRAD:
        return exec_grad(d, j);
    }
    return -EINVAL;
}

static int sync_init(struct trn_dist *d)
{
    pthread_condattr_t ca;
    int e = pthread_condattr_init(&ca);
    if (e) return -e;
    /* the caller's bounded waits measure monotonic time, like every deadline here */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    e = pthread_mutex_init(&d->mu, NULL);
    if (!e && (e = pthread_cond_init(&d->cv_job, &ca)) != 0) pthread_mutex_destroy(&d->mu);
    if (!e && (e = pthread_cond_init(&d->cv_done, &ca)) != 0) {
        pthread_cond_destroy(&d->cv_job);
        pthread_mutex_destroy(&d->mu);
    }
    pthread_condattr_destroy(&ca);
    if (e) return -e;
    d->sync_init = true;
    return 0;
}

static void *comm_main(void *arg)
{
    struct trn_dist *const d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->q_head == d->q_tail && !d->quit)
            pthread_cond_wait(&d->cv_job, &d->mu);
        if (d->q_head == d->q_tail) break; /* quit with nothing left */
        /* a copy: the caller may grow (move) the ring while this job runs */
        const struct job j = d->q[d->q_head % d->q_cap];
        if (j.kind == JOB_GRAD) d->st.started++;
        pthread_mutex_unlock(&d->mu);
        const int rc = exec_job(d, &j);
        pthread_mutex_lock(&d->mu);
        d->q_head++;
        if (j.kind == JOB_GRAD) {
            if (rc < 0 && !d->grad_rc) d->grad_rc = rc;
            d->st.done++;
            if (!d->waiting) d->st.done_early++;
        } else {
            d->sync_rc = rc;
        }
        pthread_cond_broadcast(&d->cv_done);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Start the thread (once). Signals stay with the caller's threads: the trainer's SIGTERM and
 * SIGUSR1 handlers must run there, not interrupt a collective. Without a thread (a backend that
 * cannot, or pthread_create failed) the caller runs everything itself. */
static void comm_start(struct trn_dist *d)
{
    if (d->thread_on || !d->thread_ok || !d->sync_init || d->world == 1) return;
    if (!d->q) {
        d->q_cap = 64;
        if (!(d->q = malloc(d->q_cap * sizeof *d->q))) {
            d->q_cap = 0;
            return;
        }
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    d->thread_on = pthread_create(&d->thread, NULL, comm_main, d) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void comm_stop(struct trn_dist *d)
{
    if (!d->thread_on) return;
    pthread_mutex_lock(&d->mu);
    d->quit = true;
    pthread_cond_broadcast(&d->cv_job);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    d->thread_on = false;
}

/* Queue j (the caller holds mu). Returns its ticket (jobs queued up to and including it). */
static int enqueue_locked(struct trn_dist *d, const struct job *j, uint64_t *ticket)
{
    if (d->q_tail - d->q_head == d->q_cap) {
        /* grows only while a backward has more buckets in flight than any before it */
        const size_t cap = 2 * d->q_cap;
        struct job *q = malloc(cap * sizeof *q);
        if (!q) return -ENOMEM;
        for (uint64_t k = d->q_head; k < d->q_tail; k++)
            q[k % cap] = d->q[k % d->q_cap];
        free(d->q);
        d->q = q;
        d->q_cap = cap;
    }
    d->q[d->q_tail % d->q_cap] = *j;
    *ticket = ++d->q_tail;
    pthread_cond_signal(&d->cv_job);
    return 0;
}

/* Wait (the caller holds mu) until the first `ticket` jobs are done. Each job ends by its own
 * deadline; this bound only catches a thread that stopped making progress at all. */
static int wait_ticket_locked(struct trn_dist *d, uint64_t ticket)
{
    uint64_t seen = d->q_head;
    double limit = dist_now_s() + d->timeout_s + 60;
    while (d->q_head < ticket) {
        const double t = limit < dist_now_s() + 3600 ? limit : dist_now_s() + 3600;
        struct timespec ts = { (time_t)t, (long)((t - floor(t)) * 1e9) };
        pthread_cond_timedwait(&d->cv_done, &d->mu, &ts);
        if (d->q_head != seen) {
            seen = d->q_head;
            limit = dist_now_s() + d->timeout_s + 60;
        } else if (dist_now_s() > limit) {
            /* the thread may still write d->err: report here, through the caller's own line */
            return -ETIMEDOUT;
        }
    }
    return 0;
}

/* Run a collective the caller waits for: on the thread when it runs, else here. */
static int run_job(struct trn_dist *d, const struct job *j)
{
    if (!d || !d->thread_on) return d ? exec_job(d, j) : -EINVAL;
    uint64_t ticket = 0;
    pthread_mutex_lock(&d->mu);
    int rc = enqueue_locked(d, j, &ticket);
    if (rc == 0) rc = wait_ticket_locked(d, ticket);
    if (rc == 0) rc = d->sync_rc;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

int trn_dist_allreduce_f32(struct trn_dist *d, float *buf, size_t n)
{
    const struct job j = { .kind = JOB_REDUCE, .buf = buf, .n = n, .dt = DT_F32 };
    return run_job(d, &j);
}

int trn_dist_allreduce_f64(struct trn_dist *d, double *buf, size_t n)
{
    const struct job j = { .kind = JOB_REDUCE, .buf = buf, .n = n, .dt = DT_F64 };
    return run_job(d, &j);
}

int trn_dist_allreduce_i64(struct trn_dist *d, int64_t *buf, size_t n, enum trn_dist_op op)
{
    if ((unsigned)op > TRN_DIST_MIN) return -EINVAL;
    const struct job j = { .kind = JOB_REDUCE, .buf = buf, .n = n, .dt = DT_I64, .op = op };
    return run_job(d, &j);
}

int trn_dist_broadcast(struct trn_dist *d, void *buf, size_t bytes, bool device)
{
    const struct job j = { .kind = JOB_BCAST, .buf = buf, .n = bytes, .device = device };
    return run_job(d, &j);
}

void trn_dist_set_stream(struct trn_dist *d, void *stream)
{
    if (d) d->stream = stream;
}

bool trn_dist_overlap(const struct trn_dist *d)
{
    return d && d->world > 1 && d->overlap && d->thread_ok && d->sync_init;
}

int trn_dist_grad_begin(struct trn_dist *d, size_t len)
{
    if (!d || len == 0 || d->in_step) return -EINVAL;
    if (d->world == 1) return 0;
    if (d->overlap) comm_start(d);
    d->in_step = true;
    d->step_len = len;
    d->step_seen = 0;
    d->b_n = 0;
    d->b_index = 0;
    if (d->sync_init) pthread_mutex_lock(&d->mu);
    const uint64_t steps = d->st.steps;
    memset(&d->st, 0, sizeof d->st);
    d->st.steps = steps;
    d->grad_rc = 0;
    d->waiting = false;
    if (d->sync_init) pthread_mutex_unlock(&d->mu);
    return 0;
}

/* Launch the open bucket: queue it for the thread, or reduce it here. */
static int bucket_launch(struct trn_dist *d)
{
    if (d->b_n == 0) return 0;
    struct job j = { .kind = JOB_GRAD, .n = d->b_n, .host = d->b_host, .dev = d->b_dev };
    const int slot = d->b_index++;
    d->b_n = 0;
    int rc = 0;
    /* NCCL: an event recorded here, on the producer's thread; the comm stream waits for it */
    if (d->be->bucket_event && (rc = d->be->bucket_event(d, &j, slot)) < 0) return rc;
    if (!d->thread_on) {
        /* no thread: the same sums now, on the caller's thread */
        rc = exec_job(d, &j);
        if (d->sync_init) pthread_mutex_lock(&d->mu);
        d->st.buckets++;
        d->st.started++;
        d->st.done++;
        d->st.last_bucket_bytes = j.n * sizeof(float);
        if (d->st.first_launch_at == 0) d->st.first_launch_at = d->st.ranges;
        if (rc < 0 && !d->grad_rc) d->grad_rc = rc;
        if (!d->waiting) d->st.done_early++;
        if (d->sync_init) pthread_mutex_unlock(&d->mu);
        return rc;
    }
    uint64_t ticket = 0;
    pthread_mutex_lock(&d->mu);
    rc = enqueue_locked(d, &j, &ticket);
    if (rc == 0) {
        d->st.buckets++;
        d->st.last_bucket_bytes = j.n * sizeof(float);
        if (d->st.first_launch_at == 0) d->st.first_launch_at = d->st.ranges;
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

int trn_dist_grad_ready(struct trn_dist *d, float *host, float *dev, void *stream, size_t count)
{
    if (d && d->world == 1) return 0;
    if (!d || !d->in_step || (!host && count)) return -EINVAL;
    if (d->backend == TRN_DIST_NCCL && count && !dev) {
        snprintf(d->err, sizeof d->err,
                 "rank %d: the NCCL backend all-reduces device memory: the net must run on the "
                 "GPU",
                 d->rank);
        return -EINVAL;
    }
    if (count > d->step_len - d->step_seen) return -EINVAL;
    if (d->sync_init) pthread_mutex_lock(&d->mu);
    d->st.ranges++;
    const int failed = d->grad_rc;
    if (d->sync_init) pthread_mutex_unlock(&d->mu);
    if (failed) return failed; /* stop the backward: the job is over */
    if (count == 0) return 0;
    d->step_seen += count;
    /* a bucket is one run of memory: a range that does not continue it closes it */
    int rc = 0;
    if (d->b_n && host + count == d->b_host && (!dev || dev + count == d->b_dev)) {
        d->b_host = host;
        d->b_dev = dev;
        d->b_n += count;
    } else if (d->b_n && d->b_host + d->b_n == host && (!dev || d->b_dev + d->b_n == dev)) {
        d->b_n += count;
    } else {
        if ((rc = bucket_launch(d)) < 0) return rc;
        d->b_host = host;
        d->b_dev = dev;
        d->b_n = count;
    }
    d->b_stream = stream;
    const size_t cap = d->b_index == 0 ? d->first_bucket_bytes : d->bucket_bytes;
    if (d->b_n * sizeof(float) >= cap) rc = bucket_launch(d);
    return rc;
}

int trn_dist_grad_wait(struct trn_dist *d)
{
    if (d && d->world == 1) return 0;
    if (!d || !d->in_step) return -EINVAL;
    int rc = 0;
    if (d->step_seen == d->step_len) rc = bucket_launch(d);
    d->b_n = 0; /* an incomplete backward: its last bucket is not reduced (the run is over) */
    if (d->sync_init) pthread_mutex_lock(&d->mu);
    d->waiting = true;
    int wrc = d->thread_on ? wait_ticket_locked(d, d->q_tail) : 0;
    if (d->grad_rc) rc = d->grad_rc;
    if (!rc) rc = wrc;
    d->st.steps++;
    if (d->sync_init) pthread_mutex_unlock(&d->mu);
    d->in_step = false;
    if (rc == -ETIMEDOUT && wrc == -ETIMEDOUT && !d->grad_rc)
        snprintf(d->err, sizeof d->err,
                 "rank %d: the communication thread made no progress for %g s (gradient buckets)",
                 d->rank, d->timeout_s + 60);
    if (!rc && d->step_seen != d->step_len) {
        snprintf(d->err, sizeof d->err,
                 "rank %d: the gradient ranges covered %zu of %zu floats (a backward reported "
                 "too few)",
                 d->rank, d->step_seen, d->step_len);
        rc = -EINVAL;
    }
    return rc;
}

int trn_dist_grad_stats(struct trn_dist *d, struct trn_dist_grad_stats *out)
{
    if (!d || !out) return -EINVAL;
    if (d->sync_init) pthread_mutex_lock(&d->mu);
    *out = d->st;
    if (d->sync_init) pthread_mutex_unlock(&d->mu);
    return 0;
}

int trn_dist_barrier(struct trn_dist *d)
{
    int64_t one = 1;
    return trn_dist_allreduce_i64(d, &one, 1, TRN_DIST_SUM);
}

int trn_dist_barrier_for(struct trn_dist *d, double timeout_s)
{
    if (!d || !(timeout_s > d->timeout_s)) return trn_dist_barrier(d);
    /* The collective reads timeout_s on the communication thread after it takes the job from
     * the queue, under the mutex, and no other collective runs meanwhile: the plain writes are
     * ordered. The heartbeat thread reads its limit at any time. */
    const double t = d->timeout_s;
    double hb, wait = d->hb_opt_s > 0 && d->hb_opt_s < timeout_s ? d->hb_opt_s : 0;
    __atomic_load(&d->hb_limit_s, &hb, __ATOMIC_RELAXED);
    d->timeout_s = timeout_s;
    __atomic_store(&d->hb_limit_s, &wait, __ATOMIC_RELAXED);
    const int rc = trn_dist_barrier(d);
    d->timeout_s = t;
    __atomic_store(&d->hb_limit_s, &hb, __ATOMIC_RELAXED);
    return rc;
}
