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
#include "dist.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "priv/dist_internal.h"
#include "util.h"
#include "errors.h"

#ifndef TRN_HAVE_MPI
#define TRN_HAVE_MPI 0
#endif
#ifndef TRN_HAVE_NCCL
#define TRN_HAVE_NCCL 0
#endif
#if TRN_HAVE_MPI
#include <mpi.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the TCP star sends headers in host order; every rank must be little-endian"
#endif

#define WIRE_MAGIC   0x31445946u /* "FYD1" */
#define HELLO_WAIT_S 10.0        /* a connection must say who it is within this */

enum wire_op {
    OP_HELLO = 1,  /* rank -> 0: seq = rank, bytes = world */
    OP_WELCOME,    /* 0 -> rank: everyone has joined */
    OP_ALLREDUCE,  /* a bucket of an all-reduce */
    OP_BROADCAST,  /* a bucket of a broadcast */
    OP_EXCHANGE_N, /* trn_dist_tcp_exchange's blob */
};

enum dtype { DT_F32 = 0, DT_F64, DT_I64 };

struct wire_hdr {
    uint32_t magic; /* WIRE_MAGIC */
    uint16_t op;    /* enum wire_op */
    uint16_t kind;  /* dtype << 8 | trn_dist_op (reductions), 0 otherwise */
    uint64_t seq;   /* collective number on this communicator (HELLO: the rank) */
    uint64_t bytes; /* payload bytes that follow (HELLO: the world size) */
};

/* A collective for the communication thread. */
enum job_kind { JOB_REDUCE = 1, JOB_BCAST, JOB_GRAD };

struct job {
    enum job_kind kind;
    void *buf;           /* REDUCE / BCAST: the caller's buffer */
    size_t n;            /* REDUCE, GRAD: elements; BCAST: bytes */
    enum dtype dt;       /* REDUCE */
    enum trn_dist_op op; /* REDUCE */
    bool device;         /* BCAST: device memory (NCCL) */
    float *host;         /* GRAD: the bucket (host memory) */
    float *dev;          /* GRAD, NCCL: the bucket in device memory */
    void *event;         /* GRAD, NCCL: recorded on the producer's stream at launch */
};

struct trn_dist {
    enum trn_dist_backend backend;
    int rank, world, local_rank;
    double timeout_s;
    size_t bucket_bytes;
    int listen_fd;              /* rank 0 of a star: the listening socket until all joined */
    int *fd;                    /* star: rank 0 holds fd[1..world), the others fd[0]; -1 unused */
    uint64_t seq;               /* collectives started on this communicator */
    unsigned char *tmp;         /* rank 0's receive bucket */
    size_t tmp_cap;             /* bytes at tmp */
    bool broken;                /* a collective failed: refuse further ones */
    bool mpi_finalize;          /* we called MPI_Init, so we finalize */
    struct trn_dist_nccl *nccl; /* NCCL backend state */
    char err[640];

    /* Communication thread (see the top of the file). Fields below `mu` are guarded by it. */
    bool thread_ok; /* the backend may run on another thread than the creator's */
    bool thread_on; /* started: every collective goes through the queue */
    bool sync_init; /* mu and the condition variables exist */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_job;  /* a job was queued, or quit */
    pthread_cond_t cv_done; /* a job completed */
    struct job *q;          /* ring of q_cap jobs; job k (k counts from 0) at q[k % q_cap] */
    size_t q_cap;
    uint64_t q_head; /* the oldest job not completed (the thread's current one) */
    uint64_t q_tail; /* jobs queued so far */
    bool quit;       /* destroy: the thread ends once the queue is empty */
    int sync_rc;     /* result of the last job the caller waits for */
    int grad_rc;     /* first error of this backward's buckets (0: none) */
    bool waiting;    /* trn_dist_grad_wait has begun for this backward */
    struct trn_dist_grad_stats st;

    /* Bucketing (caller's thread only). */
    bool overlap;              /* opts.overlap */
    size_t first_bucket_bytes; /* opts.first_bucket_bytes, at most bucket_bytes */
    bool in_step;              /* between trn_dist_grad_begin and trn_dist_grad_wait */
    size_t step_len;           /* floats the ranges must cover */
    size_t step_seen;          /* floats reported so far */
    float *b_host, *b_dev;     /* the open bucket's start (the lowest address) */
    void *b_stream;            /* the producer stream of its last range */
    size_t b_n;                /* floats in the open bucket (0: none open) */
    int b_index;               /* buckets launched in this backward */

    void *stream; /* trn_dist_set_stream: the producer of device buffers (NULL: the device) */
};

static int sync_init(struct trn_dist *d);
static void comm_stop(struct trn_dist *d);

/* ---------------------------------------------------------------------------------------- */
/* Names                                                                                     */

static const char *const backend_names[] = { "auto", "single", "tcp", "mpi", "nccl" };

const char *trn_dist_backend_name(enum trn_dist_backend b)
{
    return (unsigned)b < sizeof backend_names / sizeof backend_names[0] ? backend_names[b] : "?";
}

int trn_dist_backend_parse(const char *name, enum trn_dist_backend *out)
{
    for (unsigned k = 0; name && k < sizeof backend_names / sizeof backend_names[0]; k++)
        if (!strcmp(name, backend_names[k])) {
            *out = (enum trn_dist_backend)k;
            return 0;
        }
    return -EINVAL;
}

bool trn_dist_backend_available(enum trn_dist_backend b)
{
    switch (b) {
    case TRN_DIST_AUTO:
    case TRN_DIST_SINGLE:
    case TRN_DIST_TCP:
        return true;
    case TRN_DIST_MPI:
        return TRN_HAVE_MPI;
    case TRN_DIST_NCCL:
        return TRN_HAVE_NCCL;
    }
    return false;
}

const char *trn_dist_strerror(int rc)
{
    switch (rc) {
    case -ETIMEDOUT:
        return "a peer did not answer before the deadline (hung, stopped, or slower than "
               "--dist-timeout)";
    case -ECONNRESET:
        return "a peer closed its connection (it exited or crashed)";
    case -EPROTO:
        return "the ranks disagree (different collectives, or another job on the port)";
    case -ENOTSUP:
        return "backend not built into this program";
    default:
        return trn_strerror(rc);
    }
}

void trn_dist_opts_default(struct trn_dist_opts *o)
{
    memset(o, 0, sizeof *o);
    o->backend = TRN_DIST_AUTO;
    o->timeout_s = 1800;
    o->bucket_bytes = (size_t)25 << 20;
    o->port_offset = 1;
    o->device = -1;
    o->overlap = true;
    o->first_bucket_bytes = (size_t)1 << 20;
}

/* ---------------------------------------------------------------------------------------- */
/* Environment (pure)                                                                        */

static const char *env_get(const char *const *env, const char *key)
{
    const size_t kl = strlen(key);
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], key, kl) && env[i][kl] == '=') return env[i] + kl + 1;
    return NULL;
}

/* A whole decimal number in [lo, hi] (surrounding blanks refused). */
static int parse_int(const char *s, long lo, long hi, int *out)
{
    if (!s || !*s) return -EINVAL;
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -EINVAL;
    *out = (int)v;
    return 0;
}

/* Read key as an int in [lo, hi] into *out; a missing key leaves *out. */
static int env_int(const char *const *env, const char *key, long lo, long hi, int *out, char *err,
                   size_t cap)
{
    const char *v = env_get(env, key);
    if (!v) return 0;
    if (parse_int(v, lo, hi, out) < 0) {
        trn_seterr(err, cap, "%s='%s' is not a whole number in [%ld, %ld]", key, v, lo, hi);
        return -EINVAL;
    }
    return 0;
}

int trn_dist_nodelist_first(char *dst, size_t dst_cap, const char *list)
{
    if (!list || !*list) return -EINVAL;
    size_t n = 0;
    int depth = 0;
    for (const char *p = list; *p; p++) {
        if (*p == ',' && depth == 0) break; /* the first host ends at a top-level comma */
        if (*p == '[') {
            if (depth++) return -EINVAL;
            /* the group's first value: up to the first ',' or '-' or ']' */
            const char *q = p + 1;
            size_t len = strcspn(q, ",-]");
            if (len == 0) return -EINVAL;
            if (n + len >= dst_cap) return -ENAMETOOLONG;
            memcpy(dst + n, q, len);
            n += len;
            p = strchr(q, ']');
            if (!p) return -EINVAL;
            depth = 0;
            continue;
        }
        if (*p == ']') return -EINVAL;
        if (n + 1 >= dst_cap) return -ENAMETOOLONG;
        dst[n++] = *p;
    }
    if (n == 0) return -EINVAL;
    dst[n] = '\0';
    return (int)n;
}

int trn_dist_env_parse(const char *const *env, struct trn_dist_env *out, char *err, size_t cap)
{
    if (err && cap) err[0] = '\0';
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    out->world_size = 1;
    out->local_world_size = 1;
    const char *rank_key = NULL, *world_key = NULL, *local_key = NULL, *lworld_key = NULL;
    if (env_get(env, "RANK") && env_get(env, "WORLD_SIZE")) {
        out->source = TRN_DIST_SRC_TORCHRUN;
        rank_key = "RANK";
        world_key = "WORLD_SIZE";
        local_key = "LOCAL_RANK";
        lworld_key = "LOCAL_WORLD_SIZE";
    } else if (env_get(env, "SLURM_PROCID") && env_get(env, "SLURM_NTASKS") &&
               !env_get(env, "OMPI_COMM_WORLD_RANK")) {
        out->source = TRN_DIST_SRC_SLURM;
        rank_key = "SLURM_PROCID";
        world_key = env_get(env, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        local_key = "SLURM_LOCALID";
        lworld_key = NULL; /* SLURM_TASKS_PER_NODE is a compressed list: not needed */
    } else if (env_get(env, "OMPI_COMM_WORLD_RANK") && env_get(env, "OMPI_COMM_WORLD_SIZE")) {
        out->source = TRN_DIST_SRC_OMPI;
        rank_key = "OMPI_COMM_WORLD_RANK";
        world_key = "OMPI_COMM_WORLD_SIZE";
        local_key = "OMPI_COMM_WORLD_LOCAL_RANK";
        lworld_key = "OMPI_COMM_WORLD_LOCAL_SIZE";
    }
    int rc = 0;
    if (out->source != TRN_DIST_SRC_NONE) {
        rc = env_int(env, world_key, 1, 1 << 20, &out->world_size, err, cap);
        if (!rc) rc = env_int(env, rank_key, 0, out->world_size - 1, &out->rank, err, cap);
        out->local_world_size = out->world_size;
        if (!rc && lworld_key)
            rc = env_int(env, lworld_key, 1, out->world_size, &out->local_world_size, err, cap);
        out->local_rank = out->local_world_size == out->world_size ? out->rank : 0;
        if (!rc && local_key)
            rc = env_int(env, local_key, 0, out->local_world_size - 1, &out->local_rank, err, cap);
        if (rc) return rc;
    }
    const char *addr = env_get(env, "MASTER_ADDR");
    if (addr) {
        if (!*addr || strlen(addr) >= sizeof out->master_addr) {
            trn_seterr(err, cap, "MASTER_ADDR='%s' is empty or too long", addr);
            return -EINVAL;
        }
        snprintf(out->master_addr, sizeof out->master_addr, "%s", addr);
    } else if (out->source == TRN_DIST_SRC_SLURM) {
        static const char *const lists[] = { "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                             "SLURM_NODELIST" };
        for (int k = 0; k < 3 && !out->master_addr[0]; k++) {
            const char *l = env_get(env, lists[k]);
            if (!l) continue;
            if (trn_dist_nodelist_first(out->master_addr, sizeof out->master_addr, l) < 0) {
                trn_seterr(err, cap, "%s='%s' is not a Slurm node list", lists[k], l);
                out->master_addr[0] = '\0';
                return -EINVAL;
            }
        }
    }
    if ((rc = env_int(env, "MASTER_PORT", 1, 65534, &out->master_port, err, cap)) < 0) return rc;
    if (!out->master_port && out->source == TRN_DIST_SRC_SLURM && env_get(env, "SLURM_JOB_ID")) {
        /* one port per job, the same on every node of it */
        int job = 0;
        if (env_int(env, "SLURM_JOB_ID", 0, INT_MAX, &job, err, cap) < 0) return -EINVAL;
        out->master_port = 20000 + job % 20000;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Errors and time                                                                           */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(struct trn_dist *d, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct trn_dist *d, int rc, const char *fmt, ...)
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

static const char *op_name(int op)
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

/* ---------------------------------------------------------------------------------------- */
/* TCP: waiting, sending, receiving                                                          */

/* Wait for ev on fd until the deadline. 0, -ETIMEDOUT, -ECONNRESET (error or hang-up without
 * data), or -errno of poll. */
static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        const double left = deadline - now_s();
        if (left <= 0) return -ETIMEDOUT;
        struct pollfd p = { .fd = fd, .events = ev };
        const int ms = left > 3600 ? 3600 * 1000 : (int)ceil(left * 1000);
        const int r = poll(&p, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) continue;
        if (p.revents & (POLLERR | POLLNVAL)) return -ECONNRESET;
        if ((p.revents & POLLHUP) && !(p.revents & POLLIN)) return -ECONNRESET;
        return 0;
    }
}

static int io_fail(struct trn_dist *d, int rc, int peer, const char *what, uint64_t seq)
{
    if (rc == -ETIMEDOUT)
        return fail(d, rc,
                    "no answer from rank %d within %g s during %s #%llu (is it hung, stopped or "
                    "slower than --dist-timeout?)",
                    peer, d->timeout_s, what, (unsigned long long)seq);
    if (rc == -ECONNRESET || rc == -EPIPE)
        return fail(d, -ECONNRESET,
                    "the connection to rank %d closed during %s #%llu (rank %d exited or "
                    "crashed)",
                    peer, what, (unsigned long long)seq, peer);
    return fail(d, rc, "talking to rank %d during %s #%llu: %s", peer, what,
                (unsigned long long)seq, strerror(-rc));
}

static int send_all(int fd, const void *buf, size_t n, double deadline)
{
    const unsigned char *p = buf;
    while (n > 0) {
        const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            const int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc < 0) return rc;
            continue;
        }
        return w < 0 ? -errno : -ECONNRESET;
    }
    return 0;
}

static int recv_all(int fd, void *buf, size_t n, double deadline)
{
    unsigned char *p = buf;
    while (n > 0) {
        const ssize_t r = recv(fd, p, n, 0);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) return -ECONNRESET;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            const int rc = wait_fd(fd, POLLIN, deadline);
            if (rc < 0) return rc;
            continue;
        }
        return -errno;
    }
    return 0;
}

static int send_msg(struct trn_dist *d, int peer, const struct wire_hdr *h, const void *payload,
                    double deadline)
{
    const int fd = d->fd[peer];
    int rc = send_all(fd, h, sizeof *h, deadline);
    if (!rc && h->bytes && h->op != OP_HELLO) /* HELLO's bytes is the world size */
        rc = send_all(fd, payload, (size_t)h->bytes, deadline);
    return rc < 0 ? io_fail(d, rc, peer, op_name(h->op), h->seq) : 0;
}

/* Receive a header from peer that must equal *want, then its payload into payload. */
static int recv_msg(struct trn_dist *d, int peer, const struct wire_hdr *want, void *payload,
                    double deadline)
{
    struct wire_hdr h;
    const int fd = d->fd[peer];
    int rc = recv_all(fd, &h, sizeof h, deadline);
    if (rc < 0) return io_fail(d, rc, peer, op_name(want->op), want->seq);
    if (h.magic != WIRE_MAGIC || h.op != want->op || h.kind != want->kind || h.seq != want->seq ||
        h.bytes != want->bytes)
        return fail(d, -EPROTO,
                    "rank %d sent %s #%llu (%llu bytes) while this rank is in %s #%llu (%llu "
                    "bytes): the ranks disagree on the sequence of collectives",
                    peer, h.magic == WIRE_MAGIC ? op_name(h.op) : "garbage",
                    (unsigned long long)h.seq, (unsigned long long)h.bytes, op_name(want->op),
                    (unsigned long long)want->seq, (unsigned long long)want->bytes);
    if (want->bytes && (rc = recv_all(fd, payload, (size_t)want->bytes, deadline)) < 0)
        return io_fail(d, rc, peer, op_name(want->op), want->seq);
    return 0;
}

static void set_sock_opts(int fd)
{
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

/* ---------------------------------------------------------------------------------------- */
/* TCP: the star                                                                             */

static int listen_on(struct trn_dist *d, int port)
{
    /* IPv6 with v4-mapped addresses when the host has IPv6, else IPv4 */
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1, zero = 0;
    int rc = 0;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        if (bind(fd, (const struct sockaddr *)&a, sizeof a) < 0) {
            rc = -errno;
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0 && rc != -EADDRINUSE) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) return fail(d, -errno, "socket: %s", strerror(errno));
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        rc = bind(fd, (const struct sockaddr *)&a, sizeof a) < 0 ? -errno : 0;
        if (rc < 0) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0)
        return fail(d, rc,
                    "cannot listen on port %d: %s (the rendezvous uses MASTER_PORT + 1; it must "
                    "be free on rank 0's host)",
                    port, strerror(-rc));
    if (listen(fd, d->world < 128 ? d->world : 128) < 0) {
        rc = -errno;
        close(fd);
        return fail(d, rc, "listen on port %d: %s", port, strerror(-rc));
    }
    d->listen_fd = fd;
    return 0;
}

/* Rank 0: accept world - 1 ranks, each introducing itself with HELLO, then WELCOME them all. */
static int star_accept(struct trn_dist *d, int port, double deadline)
{
    int rc = listen_on(d, port);
    if (rc < 0) return rc;
    int joined = 0, strangers = 0;
    while (joined < d->world - 1) {
        rc = wait_fd(d->listen_fd, POLLIN, deadline);
        if (rc == -ETIMEDOUT) {
            char missing[256] = "";
            size_t n = 0;
            for (int r = 1; r < d->world && n + 12 < sizeof missing; r++)
                if (d->fd[r] < 0)
                    n +=
                        (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? ", " : "", r);
            return fail(d, rc, "only %d of %d ranks joined within %g s on port %d (missing: %s%s)",
                        joined + 1, d->world, d->timeout_s, port, missing,
                        strangers ? "; connections that were not ranks of this job came" : "");
        }
        if (rc < 0) return fail(d, rc, "waiting for ranks on port %d: %s", port, strerror(-rc));
        const int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED)
                continue;
            return fail(d, -errno, "accept on port %d: %s", port, strerror(errno));
        }
        set_sock_opts(fd);
        struct wire_hdr h;
        const double hello_deadline =
            deadline < now_s() + HELLO_WAIT_S ? deadline : now_s() + HELLO_WAIT_S;
        rc = recv_all(fd, &h, sizeof h, hello_deadline);
        if (rc < 0 || h.magic != WIRE_MAGIC || h.op != OP_HELLO) {
            close(fd); /* a port scanner or a stray client: ignore it */
            strangers++;
            continue;
        }
        if (h.bytes != (uint64_t)d->world || h.seq == 0 || h.seq >= (uint64_t)d->world ||
            d->fd[h.seq] >= 0) {
            close(fd);
            return fail(d, -EPROTO,
                        "a process claiming rank %llu of a job of %llu joined this job of %d on "
                        "port %d (another job on the same MASTER_PORT, or two ranks with the same "
                        "RANK?)",
                        (unsigned long long)h.seq, (unsigned long long)h.bytes, d->world, port);
        }
        d->fd[h.seq] = fd;
        joined++;
    }
    close(d->listen_fd);
    d->listen_fd = -1;
    const struct wire_hdr w = { WIRE_MAGIC, OP_WELCOME, 0, 0, 0 };
    for (int r = 1; r < d->world; r++)
        if ((rc = send_msg(d, r, &w, NULL, deadline)) < 0) return rc;
    return 0;
}

/* Rank r > 0: connect to rank 0 (retrying until it listens), HELLO, wait for WELCOME. */
static int star_connect(struct trn_dist *d, const char *host, int port, double deadline)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int last = 0;
    for (;;) {
        const int g = getaddrinfo(host, ps, &hints, &ai);
        if (g == 0) break;
        /* a name service that is briefly unreachable: retry; a name that does not exist: stop */
        if (g != EAI_AGAIN || now_s() > deadline)
            return fail(d, -EHOSTUNREACH, "cannot resolve MASTER_ADDR '%s': %s", host,
                        gai_strerror(g));
        struct timespec ts = { 0, 200 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    int fd = -1;
    while (fd < 0) {
        for (const struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
            fd =
                socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) {
                last = errno;
                continue;
            }
            int rc = connect(fd, a->ai_addr, a->ai_addrlen) < 0 ? -errno : 0;
            if (rc == -EINPROGRESS) {
                const double t = now_s() + 2 < deadline ? now_s() + 2 : deadline;
                rc = wait_fd(fd, POLLOUT, t);
                if (rc == 0 || rc == -ECONNRESET) {
                    int e = 0;
                    socklen_t el = sizeof e;
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
                    rc = -e;
                }
            }
            if (rc < 0) {
                last = -rc;
                close(fd);
                fd = -1;
            }
        }
        if (fd >= 0) break;
        if (now_s() + 0.1 > deadline) {
            freeaddrinfo(ai);
            return fail(d, last == ECONNREFUSED ? -ECONNREFUSED : -ETIMEDOUT,
                        "cannot reach rank 0 at %s:%d within %g s: %s (is rank 0 running, and "
                        "MASTER_ADDR its host?)",
                        host, port, d->timeout_s, strerror(last ? last : ETIMEDOUT));
        }
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    set_sock_opts(fd);
    d->fd[0] = fd;
    const struct wire_hdr h = { WIRE_MAGIC, OP_HELLO, 0, (uint64_t)d->rank, (uint64_t)d->world };
    int rc = send_msg(d, 0, &h, NULL, deadline);
    if (rc < 0) return rc;
    const struct wire_hdr w = { WIRE_MAGIC, OP_WELCOME, 0, 0, 0 };
    return recv_msg(d, 0, &w, NULL, deadline);
}

static int star_open(struct trn_dist *d, const char *host, int port)
{
    d->fd = malloc((size_t)d->world * sizeof *d->fd);
    if (!d->fd) return fail(d, -ENOMEM, "out of memory");
    for (int r = 0; r < d->world; r++)
        d->fd[r] = -1;
    const double deadline = now_s() + d->timeout_s;
    return d->rank == 0 ? star_accept(d, port, deadline) : star_connect(d, host, port, deadline);
}

static void star_close(struct trn_dist *d)
{
    if (d->listen_fd >= 0) close(d->listen_fd);
    d->listen_fd = -1;
    for (int r = 0; d->fd && r < d->world; r++)
        if (d->fd[r] >= 0) close(d->fd[r]);
    free(d->fd);
    d->fd = NULL;
}

static void combine(void *acc, const void *in, size_t n, enum dtype dt, enum trn_dist_op op)
{
    if (dt == DT_F32) {
        float *a = acc;
        const float *b = in;
        for (size_t i = 0; i < n; i++)
            a[i] += b[i];
    } else if (dt == DT_F64) {
        double *a = acc;
        const double *b = in;
        for (size_t i = 0; i < n; i++)
            a[i] += b[i];
    } else {
        int64_t *a = acc;
        const int64_t *b = in;
        for (size_t i = 0; i < n; i++)
            a[i] = op == TRN_DIST_SUM   ? (int64_t)((uint64_t)a[i] + (uint64_t)b[i])
                   : op == TRN_DIST_MAX ? (a[i] > b[i] ? a[i] : b[i])
                                        : (a[i] < b[i] ? a[i] : b[i]);
    }
}

/* Rank 0 sums each bucket in rank order (0, 1, 2, ...), so the result is the same bytes on every
 * rank and does not depend on which peer answered first. */
static int star_reduce(struct trn_dist *d, void *buf, size_t count, enum dtype dt,
                       enum trn_dist_op op)
{
    const size_t esz = dt == DT_F32 ? 4 : 8;
    const size_t per = d->bucket_bytes / esz;
    const uint64_t seq = ++d->seq;
    const double deadline = now_s() + d->timeout_s;
    if (d->rank == 0 && d->tmp_cap < per * esz) {
        free(d->tmp);
        d->tmp_cap = 0;
        if (!(d->tmp = malloc(per * esz))) return fail(d, -ENOMEM, "out of memory");
        d->tmp_cap = per * esz;
    }
    for (size_t off = 0; off < count || (count == 0 && off == 0); off += per) {
        const size_t n = count - off < per ? count - off : per;
        unsigned char *p = (unsigned char *)buf + off * esz;
        const struct wire_hdr h = { WIRE_MAGIC, OP_ALLREDUCE, (uint16_t)(dt << 8 | op), seq,
                                    n * esz };
        int rc;
        if (d->rank == 0) {
            for (int r = 1; r < d->world; r++) {
                if ((rc = recv_msg(d, r, &h, d->tmp, deadline)) < 0) return rc;
                combine(p, d->tmp, n, dt, op);
            }
            for (int r = 1; r < d->world; r++)
                if ((rc = send_msg(d, r, &h, p, deadline)) < 0) return rc;
        } else {
            if ((rc = send_msg(d, 0, &h, p, deadline)) < 0) return rc;
            if ((rc = recv_msg(d, 0, &h, p, deadline)) < 0) return rc;
        }
        if (count == 0) break;
    }
    return 0;
}

static int star_bcast(struct trn_dist *d, void *buf, size_t bytes, int op)
{
    const uint64_t seq = ++d->seq;
    const double deadline = now_s() + d->timeout_s;
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += d->bucket_bytes) {
        const size_t n = bytes - off < d->bucket_bytes ? bytes - off : d->bucket_bytes;
        const struct wire_hdr h = { WIRE_MAGIC, (uint16_t)op, 0, seq, n };
        unsigned char *p = (unsigned char *)buf + off;
        int rc;
        if (d->rank == 0) {
            for (int r = 1; r < d->world; r++)
                if ((rc = send_msg(d, r, &h, p, deadline)) < 0) return rc;
        } else if ((rc = recv_msg(d, 0, &h, p, deadline)) < 0) {
            return rc;
        }
        if (bytes == 0) break;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* MPI                                                                                       */

#if TRN_HAVE_MPI
static int mpi_fail(struct trn_dist *d, int mrc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(mrc, s, &len);
    return fail(d, -EIO, "MPI %s: %s", what, s);
}

/* Poll the requests until done or the deadline: a yield at first (fast collectives), then short
 * sleeps (a rank waiting for a slow one should not burn a core). */
static int mpi_wait(struct trn_dist *d, int n, MPI_Request *req, double deadline, const char *what,
                    uint64_t seq)
{
    for (long spin = 0;; spin++) {
        int flag = 0;
        const int mrc = MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
        if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, what);
        if (flag) return 0;
        if (now_s() > deadline)
            return fail(d, -ETIMEDOUT,
                        "MPI %s #%llu did not complete within %g s (a rank is hung, stopped, or "
                        "slower than --dist-timeout)",
                        what, (unsigned long long)seq, d->timeout_s);
        if (spin < 1000) {
            sched_yield();
        } else {
            struct timespec ts = { 0, 200 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
}

static int mpi_reduce(struct trn_dist *d, void *buf, size_t count, enum dtype dt,
                      enum trn_dist_op op)
{
    const MPI_Datatype t = dt == DT_F32 ? MPI_FLOAT : dt == DT_F64 ? MPI_DOUBLE : MPI_INT64_T;
    const MPI_Op o = op == TRN_DIST_SUM ? MPI_SUM : op == TRN_DIST_MAX ? MPI_MAX : MPI_MIN;
    const size_t esz = dt == DT_F32 ? 4 : 8;
    size_t per = d->bucket_bytes / esz;
    if (per > INT_MAX) per = INT_MAX;
    const uint64_t seq = ++d->seq;
    const double deadline = now_s() + d->timeout_s;
    /* every bucket in flight at once; at most 64 outstanding requests */
    MPI_Request req[64];
    size_t off = 0;
    while (off < count) {
        int k = 0;
        for (; k < 64 && off < count; k++) {
            const size_t n = count - off < per ? count - off : per;
            const int mrc = MPI_Iallreduce(MPI_IN_PLACE, (unsigned char *)buf + off * esz, (int)n,
                                           t, o, MPI_COMM_WORLD, &req[k]);
            if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, "all-reduce");
            off += n;
        }
        const int rc = mpi_wait(d, k, req, deadline, "all-reduce", seq);
        if (rc < 0) return rc;
    }
    return 0;
}

static int mpi_bcast(struct trn_dist *d, void *buf, size_t bytes)
{
    size_t per = d->bucket_bytes > INT_MAX ? INT_MAX : d->bucket_bytes;
    const uint64_t seq = ++d->seq;
    const double deadline = now_s() + d->timeout_s;
    for (size_t off = 0; off < bytes; off += per) {
        const size_t n = bytes - off < per ? bytes - off : per;
        MPI_Request r;
        const int mrc =
            MPI_Ibcast((unsigned char *)buf + off, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &r);
        if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, "broadcast");
        const int rc = mpi_wait(d, 1, &r, deadline, "broadcast", seq);
        if (rc < 0) return rc;
    }
    return 0;
}

static int mpi_open(struct trn_dist *d, const struct trn_dist_env *env)
{
    int inited = 0, mrc;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        /* one thread calls MPI at a time: the caller's, then the communication thread's */
        mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, "init");
        d->mpi_finalize = true;
    }
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    d->thread_ok = level >= MPI_THREAD_SERIALIZED;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != env->rank || size != env->world_size)
        return fail(d, -EINVAL,
                    "MPI says rank %d of %d but the launcher's variables say rank %d of %d "
                    "(start the MPI backend with mpirun, or use --dist-backend tcp)",
                    rank, size, env->rank, env->world_size);
    return 0;
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* The communicator                                                                          */

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
    d->bucket_bytes = o.bucket_bytes & ~(size_t)7;
    d->listen_fd = -1;
    d->overlap = o.overlap;
    d->first_bucket_bytes = o.first_bucket_bytes >= 4 && o.first_bucket_bytes < d->bucket_bytes
                                ? o.first_bucket_bytes
                                : d->bucket_bytes;
    d->thread_ok = true; /* TCP and NCCL; MPI decides in mpi_open */
    enum trn_dist_backend b = o.backend;
    if (b == TRN_DIST_AUTO)
        b = env->source == TRN_DIST_SRC_OMPI && TRN_HAVE_MPI ? TRN_DIST_MPI : TRN_DIST_TCP;
    if (d->world == 1 && b != TRN_DIST_NCCL) b = TRN_DIST_SINGLE;
    d->backend = b;
    int rc = 0;
    if (!trn_dist_backend_available(b)) {
        rc = fail(d, -ENOTSUP,
                  "the %s backend is not built into this program (%s); world size %d needs it",
                  trn_dist_backend_name(b),
                  b == TRN_DIST_MPI ? "configure found no Open MPI: apt-get install libopenmpi-dev"
                                    : "configure found no CUDA toolkit with nccl.h and libnccl",
                  d->world);
    } else if (b == TRN_DIST_TCP || b == TRN_DIST_NCCL) {
        const int port = env->master_port + o.port_offset;
        if (d->world > 1 && (!env->master_addr[0] || !env->master_port || port > 65535))
            rc = fail(d, -EINVAL,
                      "world size %d over %s needs MASTER_ADDR and MASTER_PORT (rank 0's host "
                      "and a free port; port + %d is used too)",
                      d->world, trn_dist_backend_name(b), o.port_offset);
        else if (d->world > 1)
            rc = star_open(d, env->master_addr, port);
#if TRN_HAVE_NCCL
        if (rc == 0 && b == TRN_DIST_NCCL) {
            unsigned char id[TRN_DIST_NCCL_ID_BYTES];
            memset(id, 0, sizeof id);
            char e[512] = "";
            if (d->rank == 0 && (rc = trn_dist_nccl_unique_id(id, e, sizeof e)) < 0)
                rc = fail(d, rc, "%s", e);
            if (rc == 0 && d->world > 1) rc = star_bcast(d, id, sizeof id, OP_BROADCAST);
            const int dev = o.device >= 0 ? o.device : env->local_rank;
            if (rc == 0 && (rc = trn_dist_nccl_create(id, d->rank, d->world, dev, d->timeout_s,
                                                      &d->nccl, e, sizeof e)) < 0)
                rc = fail(d, rc, "%s", e);
        }
#endif
    } else if (b == TRN_DIST_MPI) {
#if TRN_HAVE_MPI
        rc = mpi_open(d, env);
#endif
    }
    if (rc < 0) {
        trn_seterr(err, err_cap, "%s", d->err);
        d->broken = true;
        trn_dist_destroy(d);
        return rc;
    }
    d->broken = false;
    d->err[0] = '\0';
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
#if TRN_HAVE_NCCL
    if (d->broken)
        trn_dist_nccl_abort(d->nccl);
    else
        trn_dist_nccl_destroy(d->nccl);
#endif
    star_close(d);
#if TRN_HAVE_MPI
    if (d->mpi_finalize) MPI_Finalize();
#endif
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
#if TRN_HAVE_NCCL
    if (d) trn_dist_nccl_abort(d->nccl);
#endif
#if TRN_HAVE_MPI
    if (d && d->backend == TRN_DIST_MPI) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    (void)d;
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
        return d->err[0] ? -EPROTO
                         : fail(d, -EPROTO, "the communicator failed earlier and cannot be used");
    return 0;
}

static int reduce(struct trn_dist *d, void *buf, size_t n, enum dtype dt, enum trn_dist_op op)
{
    int rc = usable(d, buf, n);
    if (rc < 0 || d->world == 1) return rc;
    if ((unsigned)op > TRN_DIST_MIN) return -EINVAL;
#if TRN_HAVE_MPI
    if (d->backend == TRN_DIST_MPI) return mpi_reduce(d, buf, n, dt, op);
#endif
    return star_reduce(d, buf, n, dt, op);
}

static int exec_allreduce_f32(struct trn_dist *d, float *buf, size_t n)
{
#if TRN_HAVE_NCCL
    if (d->backend == TRN_DIST_NCCL) {
        const int rc = usable(d, buf, n);
        if (rc < 0) return rc;
        char e[512] = "";
        const int r = trn_dist_nccl_allreduce_f32(d->nccl, buf, n, d->bucket_bytes / 4, d->stream,
                                                  d->timeout_s, e, sizeof e);
        return r < 0 ? fail(d, r, "%s", e) : 0;
    }
#endif
    return reduce(d, buf, n, DT_F32, TRN_DIST_SUM);
}

static int exec_broadcast(struct trn_dist *d, void *buf, size_t bytes, bool device)
{
    int rc = usable(d, buf, bytes);
    if (rc < 0 || d->world == 1) return rc;
#if TRN_HAVE_NCCL
    if (d->backend == TRN_DIST_NCCL && device) {
        char e[512] = "";
        const int r =
            trn_dist_nccl_broadcast(d->nccl, buf, bytes, d->stream, d->timeout_s, e, sizeof e);
        return r < 0 ? fail(d, r, "%s", e) : 0;
    }
#endif
    (void)device;
#if TRN_HAVE_MPI
    if (d->backend == TRN_DIST_MPI) return mpi_bcast(d, buf, bytes);
#endif
    return star_bcast(d, buf, bytes, OP_BROADCAST);
}

/* A gradient bucket: the same all-reduce as a whole arena's, on a slice of it. */
static int exec_grad(struct trn_dist *d, const struct job *j)
{
#if TRN_HAVE_NCCL
    if (d->backend == TRN_DIST_NCCL) {
        const int rc = usable(d, j->dev, j->n);
        if (rc < 0) return rc;
        char e[512] = "";
        const int r = trn_dist_nccl_grad_bucket(d->nccl, j->event, j->dev, j->host, j->n,
                                                d->bucket_bytes / 4, d->timeout_s, e, sizeof e);
        return r < 0 ? fail(d, r, "gradient bucket: %s", e) : 0;
    }
#endif
    return reduce(d, j->host, j->n, DT_F32, TRN_DIST_SUM);
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

/* ---------------------------------------------------------------------------------------- */
/* The communication thread                                                                  */

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
    double limit = now_s() + d->timeout_s + 60;
    while (d->q_head < ticket) {
        const double t = limit < now_s() + 3600 ? limit : now_s() + 3600;
        struct timespec ts = { (time_t)t, (long)((t - floor(t)) * 1e9) };
        pthread_cond_timedwait(&d->cv_done, &d->mu, &ts);
        if (d->q_head != seen) {
            seen = d->q_head;
            limit = now_s() + d->timeout_s + 60;
        } else if (now_s() > limit) {
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

/* ---------------------------------------------------------------------------------------- */
/* Overlapped gradient all-reduce                                                            */

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
#if TRN_HAVE_NCCL
    if (d->backend == TRN_DIST_NCCL) {
        char e[512] = "";
        /* recorded here, on the producer's thread; the comm stream waits for it, not the host */
        if ((rc = trn_dist_nccl_event(d->nccl, slot, d->b_stream, &j.event, e, sizeof e)) < 0)
            return fail(d, rc, "gradient bucket %d: %s", slot, e);
    }
#else
    (void)slot;
#endif
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

int trn_dist_tcp_exchange(const char *host, int port, int rank, int world, void *blob, size_t len,
                          double timeout_s, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!host || port < 1 || port > 65535 || world < 1 || rank < 0 || rank >= world ||
        (!blob && len) || !(timeout_s > 0)) {
        trn_seterr(err, err_cap, "bad exchange arguments");
        return -EINVAL;
    }
    if (world == 1) return 0;
    struct trn_dist d;
    memset(&d, 0, sizeof d);
    d.backend = TRN_DIST_TCP;
    d.rank = rank;
    d.world = world;
    d.timeout_s = timeout_s;
    d.bucket_bytes = (size_t)25 << 20;
    d.listen_fd = -1;
    int rc = star_open(&d, host, port);
    if (rc == 0) rc = star_bcast(&d, blob, len, OP_EXCHANGE_N);
    if (rc < 0) trn_seterr(err, err_cap, "%s", d.err);
    star_close(&d);
    free(d.tmp);
    return rc;
}
