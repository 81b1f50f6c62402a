/* The TCP star (the top of dist.c says how it works): waits, messages, rendezvous, the
 * reduce and broadcast over rank 0. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include "priv/dist_internal.h"
#include "util.h"
#include "errors.h"

/* Wait for ev on fd until the deadline. 0, -ETIMEDOUT, -ECONNRESET (error or hang-up without
 * data), or -errno of poll. */
static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        const double left = deadline - dist_now_s();
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
    double limit;
    __atomic_load(&d->hb_limit_s, &limit, __ATOMIC_RELAXED);
    if (__atomic_load_n(&d->hb_silent, __ATOMIC_ACQUIRE) == peer)
        return dist_fail(d, -ETIMEDOUT,
                         "rank %d sent no heartbeat for %g s during %s #%llu: it is stopped, hung "
                         "or cut off, and the job ends (--dist-timeout bounds slow collectives, "
                         "not silent ranks)",
                         peer, limit, what, (unsigned long long)seq);
    if (rc == -ETIMEDOUT)
        return dist_fail(
            d, rc,
            "no answer from rank %d within %g s during %s #%llu (is it hung, stopped or "
            "slower than --dist-timeout?)",
            peer, d->timeout_s, what, (unsigned long long)seq);
    if (rc == -ECONNRESET || rc == -EPIPE)
        return dist_fail(d, -ECONNRESET,
                         "the connection to rank %d closed during %s #%llu (rank %d exited or "
                         "crashed)",
                         peer, what, (unsigned long long)seq, peer);
    return dist_fail(d, rc, "talking to rank %d during %s #%llu: %s", peer, what,
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
    return rc < 0 ? io_fail(d, rc, peer, dist_op_name(h->op), h->seq) : 0;
}

/* Receive a header from peer that must equal *want, then its payload into payload. */
static int recv_msg(struct trn_dist *d, int peer, const struct wire_hdr *want, void *payload,
                    double deadline)
{
    struct wire_hdr h;
    const int fd = d->fd[peer];
    int rc = recv_all(fd, &h, sizeof h, deadline);
    if (rc < 0) return io_fail(d, rc, peer, dist_op_name(want->op), want->seq);
    if (h.magic != WIRE_MAGIC || h.op != want->op || h.kind != want->kind || h.seq != want->seq ||
        h.bytes != want->bytes)
        return dist_fail(d, -EPROTO,
                         "rank %d sent %s #%llu (%llu bytes) while this rank is in %s #%llu (%llu "
                         "bytes): the ranks disagree on the sequence of collectives",
                         peer, h.magic == WIRE_MAGIC ? dist_op_name(h.op) : "garbage",
                         (unsigned long long)h.seq, (unsigned long long)h.bytes,
                         dist_op_name(want->op), (unsigned long long)want->seq,
                         (unsigned long long)want->bytes);
    if (want->bytes && (rc = recv_all(fd, payload, (size_t)want->bytes, deadline)) < 0)
        return io_fail(d, rc, peer, dist_op_name(want->op), want->seq);
    return 0;
}

static void set_sock_opts(int fd)
{
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

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
        if (fd < 0) return dist_fail(d, -errno, "socket: %s", strerror(errno));
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
        return dist_fail(
            d, rc,
            "cannot listen on port %d: %s (the rendezvous uses MASTER_PORT + 1; it must "
            "be free on rank 0's host)",
            port, strerror(-rc));
    if (listen(fd, d->world < 128 ? d->world : 128) < 0) {
        rc = -errno;
        close(fd);
        return dist_fail(d, rc, "listen on port %d: %s", port, strerror(-rc));
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
    /* each rank connects twice: its collectives, then its heartbeats */
    while (joined < 2 * (d->world - 1)) {
        rc = wait_fd(d->listen_fd, POLLIN, deadline);
        if (rc == -ETIMEDOUT) {
            char missing[256] = "";
            size_t n = 0;
            for (int r = 1; r < d->world && n + 12 < sizeof missing; r++)
                if (d->fd[r] < 0 || d->hb_fd[r] < 0)
                    n +=
                        (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? ", " : "", r);
            return dist_fail(d, rc,
                             "only %d of %d ranks joined within %g s on port %d (missing: %s%s)",
                             joined / 2 + 1, d->world, d->timeout_s, port, missing,
                             strangers ? "; connections that were not ranks of this job came" : "");
        }
        if (rc < 0)
            return dist_fail(d, rc, "waiting for ranks on port %d: %s", port, strerror(-rc));
        const int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED)
                continue;
            return dist_fail(d, -errno, "accept on port %d: %s", port, strerror(errno));
        }
        set_sock_opts(fd);
        struct wire_hdr h;
        const double hello_deadline =
            deadline < dist_now_s() + HELLO_WAIT_S ? deadline : dist_now_s() + HELLO_WAIT_S;
        rc = recv_all(fd, &h, sizeof h, hello_deadline);
        if (rc < 0 || h.magic != WIRE_MAGIC || h.op != OP_HELLO) {
            close(fd); /* a port scanner or a stray client: ignore it */
            strangers++;
            continue;
        }
        int *slot = h.kind == HELLO_HEARTBEAT ? d->hb_fd : d->fd;
        if (h.bytes != (uint64_t)d->world || h.seq == 0 || h.seq >= (uint64_t)d->world ||
            h.kind > HELLO_HEARTBEAT || slot[h.seq] >= 0) {
            close(fd);
            return dist_fail(
                d, -EPROTO,
                "a process claiming rank %llu of a job of %llu joined this job of %d on "
                "port %d (another job on the same MASTER_PORT, or two ranks with the same "
                "RANK?)",
                (unsigned long long)h.seq, (unsigned long long)h.bytes, d->world, port);
        }
        slot[h.seq] = fd;
        joined++;
    }
    close(d->listen_fd);
    d->listen_fd = -1;
    const struct wire_hdr w = { WIRE_MAGIC, OP_WELCOME, 0, 0, 0 };
    for (int r = 1; r < d->world; r++)
        if ((rc = send_msg(d, r, &w, NULL, deadline)) < 0) return rc;
    return 0;
}

/* Rank r > 0: one connection to rank 0 (retrying until it listens) into *out. */
static int connect_to(struct trn_dist *d, const char *host, int port, double deadline, int *out)
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
        if (g != EAI_AGAIN || dist_now_s() > deadline)
            return dist_fail(d, -EHOSTUNREACH, "cannot resolve MASTER_ADDR '%s': %s", host,
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
                const double t = dist_now_s() + 2 < deadline ? dist_now_s() + 2 : deadline;
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
        if (dist_now_s() + 0.1 > deadline) {
            freeaddrinfo(ai);
            return dist_fail(d, last == ECONNREFUSED ? -ECONNREFUSED : -ETIMEDOUT,
                             "cannot reach rank 0 at %s:%d within %g s: %s (is rank 0 running, and "
                             "MASTER_ADDR its host?)",
                             host, port, d->timeout_s, strerror(last ? last : ETIMEDOUT));
        }
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    set_sock_opts(fd);
    *out = fd;
    return 0;
}

/* Rank r > 0: connect to rank 0 twice (collectives, heartbeats), HELLO on each, wait for
 * WELCOME. */
static int star_connect(struct trn_dist *d, const char *host, int port, double deadline)
{
    int rc = connect_to(d, host, port, deadline, &d->fd[0]);
    if (rc < 0) return rc;
    const struct wire_hdr h = { WIRE_MAGIC, OP_HELLO, 0, (uint64_t)d->rank, (uint64_t)d->world };
    if ((rc = send_msg(d, 0, &h, NULL, deadline)) < 0) return rc;
    if ((rc = connect_to(d, host, port, deadline, &d->hb_fd[0])) < 0) return rc;
    const struct wire_hdr hb = { WIRE_MAGIC, OP_HELLO, HELLO_HEARTBEAT, (uint64_t)d->rank,
                                 (uint64_t)d->world };
    if ((rc = send_all(d->hb_fd[0], &hb, sizeof hb, deadline)) < 0)
        return io_fail(d, rc, 0, "hello", 0);
    const struct wire_hdr w = { WIRE_MAGIC, OP_WELCOME, 0, 0, 0 };
    return recv_msg(d, 0, &w, NULL, deadline);
}

/* The heartbeat thread: a byte to each peer every HEARTBEAT_S on its heartbeat connection, and
 * every byte from them noted. A peer heard from last more than hb_limit_s ago (when set: it
 * is 0 where the collectives' own deadline is as short, except in trn_dist_barrier_for) is taken
 * for stopped or hung (a SIGSTOP, a machine that froze, a cut network: nothing a socket reports):
 * it is named in hb_silent and its collective connection is shut down, so that a wait on it
 * ends at once and io_fail says why. A peer whose heartbeat connection closes has exited: its
 * collective connection says so itself, after whatever it sent last, so nothing is cut. */
static void *heartbeat(void *arg)
{
    struct trn_dist *d = arg;
    const int n = d->world;
    double *last = malloc((size_t)n * sizeof *last);
    struct pollfd *p = malloc((size_t)(n + 1) * sizeof *p);
    if (!last || !p) {
        free(last), free(p);
        return NULL;
    }
    for (int r = 0; r < n; r++)
        last[r] = dist_now_s();
    double next_beat = 0;
    for (;;) {
        const double now = dist_now_s();
        if (now >= next_beat) {
            for (int r = 0; r < n; r++)
                if (d->hb_fd[r] >= 0) {
                    const char beat = 'h';
                    /* a full buffer means the peer is not reading: its own silence says so */
                    (void)!send(d->hb_fd[r], &beat, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                }
            next_beat = now + HEARTBEAT_S;
        }
        int m = 0;
        p[m++] = (struct pollfd){ .fd = d->hb_wake[0], .events = POLLIN };
        for (int r = 0; r < n; r++)
            if (d->hb_fd[r] >= 0) p[m++] = (struct pollfd){ .fd = d->hb_fd[r], .events = POLLIN };
        const int ms = (int)ceil((next_beat - dist_now_s()) * 1000);
        if (poll(p, (nfds_t)m, ms > 0 ? ms : 0) < 0 && errno != EINTR) break;
        if (p[0].revents) break; /* stop */
        for (int k = 1, r = 0; k < m; k++) {
            while (d->hb_fd[r] != p[k].fd)
                r++;
            if (!p[k].revents) continue;
            char buf[256];
            const ssize_t got = recv(d->hb_fd[r], buf, sizeof buf, MSG_DONTWAIT);
            if (got > 0) {
                last[r] = dist_now_s();
            } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                close(d->hb_fd[r]); /* it exited: no more to watch */
                d->hb_fd[r] = -1;
            }
        }
        double limit;
        __atomic_load(&d->hb_limit_s, &limit, __ATOMIC_RELAXED);
        for (int r = 0; r < n && limit > 0; r++)
            if (d->hb_fd[r] >= 0 && dist_now_s() - last[r] > limit) {
                int none = -1;
                if (__atomic_compare_exchange_n(&d->hb_silent, &none, r, false, __ATOMIC_RELEASE,
                                                __ATOMIC_RELAXED) &&
                    d->fd[r] >= 0)
                    shutdown(d->fd[r], SHUT_RDWR);
                close(d->hb_fd[r]);
                d->hb_fd[r] = -1;
            }
    }
    free(last), free(p);
    return NULL;
}

int dist_star_heartbeat(struct trn_dist *d)
{
    if (!d->hb_fd || d->hb_on) return 0;
    if (pipe2(d->hb_wake, O_CLOEXEC) != 0) return -errno;
    const int rc = pthread_create(&d->hb_thread, NULL, heartbeat, d);
    if (rc != 0) {
        close(d->hb_wake[0]), close(d->hb_wake[1]);
        return -rc;
    }
    d->hb_on = true;
    return 0;
}

int dist_star_open(struct trn_dist *d, const char *host, int port)
{
    d->hb_silent = -1;
    d->fd = malloc((size_t)d->world * sizeof *d->fd);
    d->hb_fd = malloc((size_t)d->world * sizeof *d->hb_fd);
    if (!d->fd || !d->hb_fd) return dist_fail(d, -ENOMEM, "out of memory");
    for (int r = 0; r < d->world; r++)
        d->fd[r] = d->hb_fd[r] = -1;
    const double deadline = dist_now_s() + d->timeout_s;
    return d->rank == 0 ? star_accept(d, port, deadline) : star_connect(d, host, port, deadline);
}

void dist_star_close(struct trn_dist *d)
{
    if (d->hb_on) {
        close(d->hb_wake[1]); /* the thread sees the end of the pipe */
        pthread_join(d->hb_thread, NULL);
        close(d->hb_wake[0]);
        d->hb_on = false;
    }
    if (d->listen_fd >= 0) close(d->listen_fd);
    d->listen_fd = -1;
    for (int r = 0; d->fd && r < d->world; r++)
        if (d->fd[r] >= 0) close(d->fd[r]);
    for (int r = 0; d->hb_fd && r < d->world; r++)
        if (d->hb_fd[r] >= 0) close(d->hb_fd[r]);
    free(d->fd);
    free(d->hb_fd);
    d->fd = d->hb_fd = NULL;
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
int dist_star_reduce(struct trn_dist *d, void *buf, size_t count, enum dtype dt,
                     enum trn_dist_op op)
{
    const size_t esz = dt == DT_F32 ? 4 : 8;
    const size_t per = d->bucket_bytes / esz;
    const uint64_t seq = ++d->seq;
    const double deadline = dist_now_s() + d->timeout_s;
    if (d->rank == 0 && d->tmp_cap < per * esz) {
        free(d->tmp);
        d->tmp_cap = 0;
        if (!(d->tmp = malloc(per * esz))) return dist_fail(d, -ENOMEM, "out of memory");
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

int dist_star_bcast(struct trn_dist *d, void *buf, size_t bytes, int op)
{
    const uint64_t seq = ++d->seq;
    const double deadline = dist_now_s() + d->timeout_s;
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
    int rc = dist_star_open(&d, host, port);
    if (rc == 0) rc = dist_star_bcast(&d, blob, len, OP_EXCHANGE_N);
    if (rc < 0) trn_seterr(err, err_cap, "%s", d.err);
    dist_star_close(&d);
    free(d.tmp);
    return rc;
}

static int tcp_bcast(struct trn_dist *d, void *buf, size_t bytes, bool device)
{
    (void)device; /* host memory: the star has no device buffers */
    return dist_star_bcast(d, buf, bytes, OP_BROADCAST);
}

static const struct dist_backend tcp_backend = {
    .star = true,
    .reduce = dist_star_reduce,
    .bcast = tcp_bcast,
};

const struct dist_backend *dist_tcp_backend(void)
{
    return &tcp_backend;
}
