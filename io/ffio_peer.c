/*
 * ffio_peer.c: the nodes of a job serve their shard caches to each other, and ask each other
 * before the origin (issue 43 part 3; docs/sharing.md section 7).
 *
 * CONTRACT, the server (ffio_peer_serve):
 * - Answers `GET` and `HEAD` of `/ffr/NAME`, NAME a regular file directly in its directory:
 *   one `Range: bytes=A-B | A- | -N` gives 206 with Content-Range, none 200, a range past the
 *   end 416. A Range it cannot honour (several ranges, garbage) is ignored, as RFC 9110 allows.
 *   Anything else: 404 (no such file, a name that is not a cache entry's, a symlink, a
 *   directory), 405 (another method), 400 (a malformed head, a request with a body), 431 (a head
 *   over FFIO_PEER_HEAD_MAX bytes), 505 (not HTTP/1.x).
 * - Read-only: it opens files O_RDONLY | O_NOFOLLOW relative to the directory, never creates,
 *   renames or deletes anything, and never serves a name with a '/', a leading '.', or (with
 *   entries_only) one not shaped like a shard entry (INDEXHASH-BYTES-FILE): a cache's
 *   temporaries, locks and manifests stay private.
 * - Bounded: one thread, poll(2), non-blocking sockets and sendfile(2); at most max_conns
 *   connections (one more is accepted and closed at once), each holding FFIO_PEER_HEAD_MAX +
 *   a few hundred bytes and at most one open file. A head must arrive within head_timeout_s of
 *   its first byte and a connection that moves nothing for idle_timeout_s is closed, so a slow
 *   or silent client costs a slot for a bounded time and never blocks another.
 * - Nothing it serves is trusted: the asking cache checks every byte against its manifest.
 *
 * CONTRACT, the client (ffio_peers_*, below the server): a shard is asked of the peers listed as
 * holding it (ffio_peers_hold), in an order that spreads the askers over the holders; a 404 (the
 * shard was evicted, or not fetched yet) moves on to the next holder; any other failure, or
 * bytes the cache then finds damaged (the `bad` hook), avoids that peer until ffio_peers_epoch,
 * with one log line. When no holder gives the shard, the cache fetches it from the origin.
 */
#include "ffio_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ffr.h"

/* ---- the request head ------------------------------------------------------------------ */

static bool name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

/* ffr_cache's shard entries: 16 hex digits, '-', decimal bytes, '-', the manifest's name. */
static bool entry_shaped(const char *n)
{
    for (int i = 0; i < 16; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
    if (n[16] != '-' || !(n[17] >= '0' && n[17] <= '9')) return false;
    const char *p = n + 17;
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == '-' && p[1] != '\0';
}

/* Parses a decimal u64 at *p (at least one digit, no overflow); advances *p. */
static bool parse_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (s >= end || *s < '0' || *s > '9') return false;
    while (s < end && *s >= '0' && *s <= '9') {
        const unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
        s++;
    }
    *p = s;
    *out = v;
    return true;
}

static bool header_is(const char *line, const char *end, const char *name, const char **value)
{
    const size_t n = strlen(name);
    if ((size_t)(end - line) <= n || strncasecmp(line, name, n) != 0 || line[n] != ':')
        return false;
    const char *v = line + n + 1;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    *value = v;
    return true;
}

int ffio_peer_parse(const char *buf, size_t n, struct ffio_peer_req *r)
{
    memset(r, 0, sizeof *r);
    const size_t lim = n < FFIO_PEER_HEAD_MAX ? n : FFIO_PEER_HEAD_MAX;
    const char *head_end = NULL;
    for (size_t i = 0; i + 3 < lim; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
            head_end = buf + i + 2; /* the last header line's CRLF is kept */
            break;
        }
    if (!head_end) return n >= FFIO_PEER_HEAD_MAX ? -431 : 0;
    const int used = (int)(head_end + 2 - buf);
    const char *p = buf, *eol = memchr(p, '\r', (size_t)(head_end - p));
    if (!eol || eol[1] != '\n') return -400;
    /* request line: METHOD SP /ffr/NAME SP HTTP/1.x */
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (!sp1) return -400;
    if (sp1 - p == 3 && !memcmp(p, "GET", 3))
        r->head = false;
    else if (sp1 - p == 4 && !memcmp(p, "HEAD", 4))
        r->head = true;
    else
        return -405;
    const char *target = sp1 + 1, *sp2 = memchr(target, ' ', (size_t)(eol - target));
    if (!sp2) return -400;
    if (eol - sp2 != 9 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0) return -505;
    if (sp2[8] == '1')
        r->keep_alive = true;
    else if (sp2[8] == '0')
        r->keep_alive = false;
    else
        return -505;
    static const char prefix[] = "/ffr/";
    const size_t tl = (size_t)(sp2 - target), pl = sizeof prefix - 1;
    r->not_found = true;
    if (tl > pl && tl - pl < sizeof r->name && !memcmp(target, prefix, pl) && target[pl] != '.') {
        bool ok = true;
        for (size_t i = pl; i < tl && ok; i++)
            ok = name_char(target[i]);
        if (ok) {
            memcpy(r->name, target + pl, tl - pl);
            r->name[tl - pl] = '\0';
            r->not_found = false;
        }
    }
    /* headers */
    p = eol + 2;
    while (p < head_end) {
        eol = memchr(p, '\r', (size_t)(head_end - p));
        if (!eol || eol[1] != '\n') return -400;
        const char *v;
        if (header_is(p, eol, "Range", &v)) {
            static const char unit[] = "bytes=";
            const char *q = v;
            uint64_t a = 0, b = 0;
            r->range = FFIO_PEER_RANGE_NONE; /* an unusable Range is ignored */
            if ((size_t)(eol - q) > sizeof unit - 1 && !memcmp(q, unit, sizeof unit - 1)) {
                q += sizeof unit - 1;
                if (*q == '-') {
                    q++;
                    if (parse_u64(&q, eol, &b) && q == eol) {
                        r->range = FFIO_PEER_RANGE_SUFFIX;
                        r->last = b;
                    }
                } else if (parse_u64(&q, eol, &a) && q < eol && *q == '-') {
                    q++;
                    if (q == eol) {
                        r->range = FFIO_PEER_RANGE_FROM;
                        r->first = a;
                    } else if (parse_u64(&q, eol, &b) && q == eol && a <= b) {
                        r->range = FFIO_PEER_RANGE_SPAN;
                        r->first = a;
                        r->last = b;
                    }
                }
            }
        } else if (header_is(p, eol, "Connection", &v)) {
            if ((size_t)(eol - v) >= 5 && !strncasecmp(v, "close", 5)) r->keep_alive = false;
            if ((size_t)(eol - v) >= 10 && !strncasecmp(v, "keep-alive", 10)) r->keep_alive = true;
        } else if (header_is(p, eol, "Content-Length", &v)) {
            /* no request here has a body; one we do not read would desynchronise the
             * connection */
            if (!(eol - v == 1 && *v == '0')) return -400;
        } else if (header_is(p, eol, "Transfer-Encoding", &v)) {
            return -400;
        }
        p = eol + 2;
    }
    return used;
}

/* ---- the server ------------------------------------------------------------------------ */

enum conn_state { C_FREE = 0, C_READ, C_WRITE };

struct conn {
    int fd;
    enum conn_state state;
    char in[FFIO_PEER_HEAD_MAX];
    size_t n_in;
    char out[384];
    size_t out_n, out_off;
    int file;           /* the file being sent, or -1 */
    off_t file_off;     /* next byte of it to send */
    uint64_t file_left; /* bytes of it still to send */
    bool close_after;   /* close once the answer is out */
    double t_move;      /* last time a byte moved */
    double t_head;      /* when the current head's first byte came (0: none yet) */
};

struct ffio_peer_server {
    int dfd;    /* the served directory */
    int lfd;    /* listening socket */
    int wake_r; /* stop pipe */
    int wake_w;
    int port;
    struct ffio_peer_server_opts o;
    pthread_t thread;
    bool started;
    struct conn *conns;
    pthread_mutex_t mu; /* st */
    struct ffio_peer_server_stats st;
};

void ffio_peer_server_opts_default(struct ffio_peer_server_opts *o)
{
    memset(o, 0, sizeof *o); /* bind_host NULL (every interface), port 0 (any) */
    o->max_conns = 64;
    o->head_timeout_s = 10;
    o->idle_timeout_s = 30;
    o->entries_only = true;
}

static void conn_reset(struct conn *c)
{
    if (c->file >= 0) close(c->file);
    if (c->fd >= 0) close(c->fd);
    c->fd = c->file = -1;
    c->state = C_FREE;
    c->n_in = c->out_n = c->out_off = 0;
    c->file_left = 0;
    c->close_after = false;
    c->t_head = 0;
}

static void count(struct ffio_peer_server *s, uint64_t *field, uint64_t by)
{
    pthread_mutex_lock(&s->mu);
    *field += by;
    pthread_mutex_unlock(&s->mu);
}

static const char *reason(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 416:
        return "Range Not Satisfiable";
    case 431:
        return "Request Header Fields Too Large";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

/* An answer without a body; errors other than 404 and 416 close the connection, since what
 * follows their head cannot be trusted to be a request. */
static void answer_empty(struct ffio_peer_server *s, struct conn *c, int status, uint64_t size)
{
    const bool keep = status == 404 || status == 416;
    char range[64] = "";
    if (status == 416)
        snprintf(range, sizeof range, "Content-Range: bytes */%" PRIu64 "\r\n", size);
    const int n =
        snprintf(c->out, sizeof c->out, "HTTP/1.1 %d %s\r\n%sContent-Length: 0\r\n%s\r\n", status,
                 reason(status), range, keep && !c->close_after ? "" : "Connection: close\r\n");
    c->out_n = (size_t)n;
    c->out_off = 0;
    if (!keep) c->close_after = true;
    c->state = C_WRITE;
    count(s, status == 404 ? &s->st.not_found : &s->st.refused, 1);
}

static void answer(struct ffio_peer_server *s, struct conn *c, const struct ffio_peer_req *r)
{
    count(s, &s->st.requests, 1);
    c->close_after = !r->keep_alive;
    if (r->not_found || (s->o.entries_only && !entry_shaped(r->name))) {
        answer_empty(s, c, 404, 0);
        return;
    }
    const int f = openat(s->dfd, r->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (f >= 0) close(f);
        answer_empty(s, c, 404, 0);
        return;
    }
    const uint64_t size = (uint64_t)st.st_size;
    uint64_t a = 0, b = size ? size - 1 : 0;
    bool partial = false;
    switch (r->range) {
    case FFIO_PEER_RANGE_NONE:
        break;
    case FFIO_PEER_RANGE_SPAN:
    case FFIO_PEER_RANGE_FROM:
        if (r->first >= size) {
            close(f);
            answer_empty(s, c, 416, size);
            return;
        }
        a = r->first;
        if (r->range == FFIO_PEER_RANGE_SPAN && r->last < b) b = r->last;
        partial = true;
        break;
    case FFIO_PEER_RANGE_SUFFIX:
        if (r->last == 0 || size == 0) {
            close(f);
            answer_empty(s, c, 416, size);
            return;
        }
        a = size > r->last ? size - r->last : 0;
        partial = true;
        break;
    }
    const uint64_t len = size ? b - a + 1 : 0;
    char range[96] = "";
    if (partial)
        snprintf(range, sizeof range,
                 "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n", a, b, size);
    const int n = snprintf(c->out, sizeof c->out,
                           "HTTP/1.1 %s\r\nContent-Length: %" PRIu64
                           "\r\n%sAccept-Ranges: bytes\r\nContent-Type: "
                           "application/octet-stream\r\n%s\r\n",
                           partial ? "206 Partial Content" : "200 OK", len, range,
                           c->close_after ? "Connection: close\r\n" : "");
    c->out_n = (size_t)n;
    c->out_off = 0;
    if (r->head || len == 0) {
        close(f);
    } else {
        c->file = f;
        c->file_off = (off_t)a;
        c->file_left = len;
    }
    c->state = C_WRITE;
}

/* Parses what has arrived; answers a complete head. */
static void take_request(struct ffio_peer_server *s, struct conn *c)
{
    struct ffio_peer_req r;
    const int used = ffio_peer_parse(c->in, c->n_in, &r);
    if (used == 0) return; /* more to come */
    if (used < 0) {
        c->n_in = 0;
        answer_empty(s, c, -used, 0);
        return;
    }
    memmove(c->in, c->in + used, c->n_in - (size_t)used);
    c->n_in -= (size_t)used;
    c->t_head = c->n_in ? ffio_mono_s() : 0;
    answer(s, c, &r);
}

/* Moves what it can; returns false when the connection is to be closed. */
static bool on_write(struct ffio_peer_server *s, struct conn *c)
{
    while (c->out_off < c->out_n) {
        const ssize_t w = send(c->fd, c->out + c->out_off, c->out_n - c->out_off, MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN || errno == EINTR;
        c->out_off += (size_t)w;
        c->t_move = ffio_mono_s();
    }
    while (c->file_left) {
        const size_t want = c->file_left > (1u << 20) ? 1u << 20 : (size_t)c->file_left;
        const ssize_t w = sendfile(c->fd, c->file, &c->file_off, want);
        if (w < 0) return errno == EAGAIN || errno == EINTR;
        if (w == 0) return false; /* the file shrank under us: the asker sees a short body */
        c->file_left -= (uint64_t)w;
        count(s, &s->st.bytes, (uint64_t)w);
        c->t_move = ffio_mono_s();
    }
    if (c->file >= 0) {
        close(c->file);
        c->file = -1;
    }
    if (c->close_after) return false;
    c->state = C_READ;
    c->out_n = c->out_off = 0;
    if (c->n_in) take_request(s, c); /* a pipelined request */
    return true;
}

static bool on_read(struct ffio_peer_server *s, struct conn *c)
{
    if (c->n_in == sizeof c->in) return false; /* cannot happen: parse answers 431 first */
    const ssize_t g = recv(c->fd, c->in + c->n_in, sizeof c->in - c->n_in, 0);
    if (g == 0) return false;
    if (g < 0) return errno == EAGAIN || errno == EINTR;
    const double now = ffio_mono_s();
    if (!c->n_in) c->t_head = now;
    c->n_in += (size_t)g;
    c->t_move = now;
    take_request(s, c);
    return true;
}

static void on_accept(struct ffio_peer_server *s)
{
    for (;;) {
        const int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        struct conn *c = NULL;
        for (unsigned i = 0; i < s->o.max_conns && !c; i++)
            if (s->conns[i].state == C_FREE) c = &s->conns[i];
        if (!c) {
            close(fd); /* the asker sees a reset and goes elsewhere */
            count(s, &s->st.conns_refused, 1);
            continue;
        }
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->state = C_READ;
        c->t_move = ffio_mono_s();
        c->t_head = 0;
        count(s, &s->st.conns, 1);
    }
}

static void *serve(void *arg)
{
    struct ffio_peer_server *s = arg;
    /* sendfile(2) to a connection the client has closed raises SIGPIPE (it takes no
     * MSG_NOSIGNAL), whose default action would end the whole training process: blocked in
     * this thread, the signal stays pending here and the call fails with EPIPE instead. */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    const unsigned n = s->o.max_conns;
    struct pollfd *pf = calloc(n + 2, sizeof *pf);
    int *who = calloc(n + 2, sizeof *who);
    if (!pf || !who) {
        free(pf);
        free(who);
        return NULL;
    }
    for (;;) {
        unsigned k = 0;
        pf[k++] = (struct pollfd){ .fd = s->wake_r, .events = POLLIN };
        pf[k++] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
        for (unsigned i = 0; i < n; i++) {
            if (s->conns[i].state == C_FREE) continue;
            who[k] = (int)i;
            pf[k++] = (struct pollfd){ .fd = s->conns[i].fd,
                                       .events = s->conns[i].state == C_READ ? POLLIN : POLLOUT };
        }
        const int pr = poll(pf, k, 500);
        if (pr < 0 && errno != EINTR) break;
        if (pf[0].revents) break;
        if (pf[1].revents & POLLIN) on_accept(s);
        const double now = ffio_mono_s();
        for (unsigned j = 2; j < k; j++) {
            struct conn *c = &s->conns[who[j]];
            bool keep = true;
            if (pf[j].revents & (POLLERR | POLLNVAL))
                keep = false;
            else if (pf[j].revents & POLLIN)
                keep = on_read(s, c);
            else if (pf[j].revents & POLLOUT)
                keep = on_write(s, c);
            else if (pf[j].revents & POLLHUP)
                keep = false;
            if (keep && c->state == C_WRITE && !(pf[j].revents & POLLOUT))
                keep = on_write(s, c); /* an answer made just now goes out at once */
            if (keep && now - c->t_move > s->o.idle_timeout_s) keep = false;
            if (keep && c->t_head > 0 && c->state == C_READ &&
                now - c->t_head > s->o.head_timeout_s)
                keep = false;
            if (!keep) conn_reset(c);
        }
    }
    free(pf);
    free(who);
    return NULL;
}

/* A non-blocking listening socket on a (dual: an IPv6 one that takes IPv4 too), or -errno. */
static int listen_on(const struct addrinfo *a, bool dual)
{
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    const int one = 1, zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        (dual && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0) ||
        bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        const int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int ffio_peer_serve(const char *dir, const struct ffio_peer_server_opts *opts,
                    struct ffio_peer_server **out, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!dir || !out) return -EINVAL;
    struct ffio_peer_server_opts o;
    if (opts)
        o = *opts;
    else
        ffio_peer_server_opts_default(&o);
    if (o.max_conns < 1 || o.max_conns > 4096 || o.port < 0 || o.port > 65535 ||
        o.idle_timeout_s < 1 || o.head_timeout_s < 1)
        return -EINVAL;
    struct ffio_peer_server *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    s->dfd = s->lfd = s->wake_r = s->wake_w = -1;
    s->o = o;
    s->o.bind_host = NULL; /* borrowed only during this call */
    pthread_mutex_init(&s->mu, NULL);
    int rc = 0;
    struct addrinfo *ai = NULL;
    if (!(s->conns = calloc(o.max_conns, sizeof *s->conns))) {
        rc = -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < o.max_conns; i++)
        s->conns[i].fd = s->conns[i].file = -1;
    s->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dfd < 0) {
        rc = -errno;
        snprintf(err, err_cap, "%s: %s", dir, strerror(errno));
        goto fail;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", o.port);
    const struct addrinfo hints = { .ai_family = AF_UNSPEC,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    const int g = getaddrinfo(o.bind_host, port, &hints, &ai);
    if (g != 0) {
        rc = -EADDRNOTAVAIL;
        snprintf(err, err_cap, "%s: %s", o.bind_host ? o.bind_host : "*", gai_strerror(g));
        goto fail;
    }
    /* Every interface (no bind_host): one IPv6 socket that also takes IPv4 (IPV6_V6ONLY off),
     * so that a node announcing either family is reached; IPv4 alone where the kernel has no
     * IPv6 (EAFNOSUPPORT, EADDRNOTAVAIL). A bind_host: the first address it resolves to. */
    const struct addrinfo *v6 = NULL, *v4 = NULL;
    for (const struct addrinfo *a = ai; a && !o.bind_host; a = a->ai_next) {
        if (a->ai_family == AF_INET6 && !v6) v6 = a;
        if (a->ai_family == AF_INET && !v4) v4 = a;
    }
    s->lfd = listen_on(v6 ? v6 : ai, v6 != NULL);
    if (s->lfd < 0 && v6 && v4) s->lfd = listen_on(v4, false);
    if (s->lfd < 0) {
        rc = s->lfd;
        snprintf(err, err_cap, "listen on %s:%d: %s", o.bind_host ? o.bind_host : "*", o.port,
                 strerror(-rc));
        goto fail;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(s->lfd, (struct sockaddr *)&sa, &sl) < 0) {
        rc = -errno;
        goto fail;
    }
    s->port = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                            : ((struct sockaddr_in6 *)&sa)->sin6_port);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        rc = -errno;
        goto fail;
    }
    s->wake_r = p[0];
    s->wake_w = p[1];
    if ((rc = -pthread_create(&s->thread, NULL, serve, s)) < 0) {
        snprintf(err, err_cap, "peer server thread: %s", strerror(-rc));
        goto fail;
    }
    s->started = true;
    freeaddrinfo(ai);
    *out = s;
    return 0;
fail:
    if (ai) freeaddrinfo(ai);
    ffio_peer_server_stop(s);
    return rc;
}

int ffio_peer_server_port(const struct ffio_peer_server *s)
{
    return s ? s->port : -EINVAL;
}

void ffio_peer_server_stats(struct ffio_peer_server *s, struct ffio_peer_server_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void ffio_peer_server_stop(struct ffio_peer_server *s)
{
    if (!s) return;
    if (s->started) {
        const char x = 1;
        while (write(s->wake_w, &x, 1) < 0 && errno == EINTR) {
        }
        pthread_join(s->thread, NULL);
    }
    if (s->conns)
        for (unsigned i = 0; i < s->o.max_conns; i++)
            conn_reset(&s->conns[i]);
    free(s->conns);
    if (s->lfd >= 0) close(s->lfd);
    if (s->dfd >= 0) close(s->dfd);
    if (s->wake_r >= 0) close(s->wake_r);
    if (s->wake_w >= 0) close(s->wake_w);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- the client ------------------------------------------------------------------------ */

struct hold {
    uint64_t hash; /* of the entry name */
    int32_t peer;
    char *name;
};

struct peer {
    char *base;                /* "http://HOST:PORT" */
    struct ffio_peer_stats st; /* st.avoided: until ffio_peers_epoch */
};

struct ffio_peers {
    struct ffio_http *h;
    struct peer *peer;
    int n, cap;
    struct hold *holds;
    size_t n_holds, cap_holds;
    bool sorted;
    ffio_log_fn log;
    void *log_ctx;
    char last[512];
};

static void peers_log(struct ffio_peers *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void peers_log(struct ffio_peers *p, const char *fmt, ...)
{
    if (!p->log) return;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->log(p->log_ctx, FFIO_LOG_WARN, line);
}

int ffio_peers_create(const struct ffio_http_opts *http, ffio_log_fn log, void *log_ctx,
                      struct ffio_peers **out)
{
    if (!out) return -EINVAL;
    struct ffio_http_opts o;
    if (http) {
        o = *http;
    } else {
        /* A peer is one of ours on the same network: a dead or stuck one is given up on within
         * seconds, and the origin is asked instead. */
        ffio_http_opts_default(&o);
        o.retries = 2;
        o.backoff_ms = 20;
        o.connect_timeout_ms = 2000;
        o.stall_timeout_s = 5;
        o.read_deadline_s = 20;
    }
    struct ffio_peers *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    const int rc = ffio_http_create(&o, &p->h);
    if (rc < 0) {
        free(p);
        return rc;
    }
    p->log = log;
    p->log_ctx = log_ctx;
    *out = p;
    return 0;
}

void ffio_peers_destroy(struct ffio_peers *p)
{
    if (!p) return;
    ffio_http_destroy(p->h);
    for (int i = 0; i < p->n; i++)
        free(p->peer[i].base);
    free(p->peer);
    ffio_peers_clear(p);
    free(p->holds);
    free(p);
}

int ffio_peers_add(struct ffio_peers *p, const char *host, int port)
{
    if (!p || !host || !*host || port <= 0 || port > 65535 || strpbrk(host, "/@ \t\r\n"))
        return -EINVAL;
    if (p->n == p->cap) {
        const int cap = p->cap ? p->cap * 2 : 8;
        struct peer *q = realloc(p->peer, (size_t)cap * sizeof *q);
        if (!q) return -ENOMEM;
        p->peer = q;
        p->cap = cap;
    }
    const bool v6 = strchr(host, ':') != NULL;
    const size_t need = strlen(host) + 32;
    char *u = malloc(need);
    if (!u) return -ENOMEM;
    snprintf(u, need, v6 ? "http://[%s]:%d" : "http://%s:%d", host, port);
    p->peer[p->n] = (struct peer){ .base = u };
    return p->n++;
}

int ffio_peers_hold(struct ffio_peers *p, const char *entry, int peer)
{
    if (!p || !entry || !*entry || peer < 0 || peer >= p->n) return -EINVAL;
    if (p->n_holds == p->cap_holds) {
        const size_t cap = p->cap_holds ? p->cap_holds * 2 : 64;
        struct hold *h = realloc(p->holds, cap * sizeof *h);
        if (!h) return -ENOMEM;
        p->holds = h;
        p->cap_holds = cap;
    }
    char *name = strdup(entry);
    if (!name) return -ENOMEM;
    p->holds[p->n_holds++] = (struct hold){ ffr_hash(entry, strlen(entry)), peer, name };
    p->sorted = false;
    return 0;
}

void ffio_peers_clear(struct ffio_peers *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_holds; i++)
        free(p->holds[i].name);
    p->n_holds = 0;
}

void ffio_peers_epoch(struct ffio_peers *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++)
        p->peer[i].st.avoided = false;
}

static int cmp_hold(const void *a, const void *b)
{
    const struct hold *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->peer < y->peer ? -1 : x->peer > y->peer;
}

void ffio_peers_stats(const struct ffio_peers *p, int peer, struct ffio_peer_stats *out)
{
    memset(out, 0, sizeof *out);
    if (p && peer >= 0 && peer < p->n) *out = p->peer[peer].st;
}

const char *ffio_peers_last_error(const struct ffio_peers *p)
{
    return p ? p->last : "";
}

/* ffr_cache_peers.fetch: each holder of `entry` in turn, from a start that depends on the
 * entry's hash, so that the shards a node asks for spread over their holders. */
static int peers_fetch(void *ctx, const char *entry, int fd, uint64_t size, int *who, char *err,
                       size_t cap)
{
    struct ffio_peers *p = ctx;
    *who = -1;
    if (!p->n_holds) return -ENOENT;
    if (!p->sorted) {
        qsort(p->holds, p->n_holds, sizeof *p->holds, cmp_hold);
        p->sorted = true;
    }
    const uint64_t hash = ffr_hash(entry, strlen(entry));
    size_t lo = 0, hi = p->n_holds;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (p->holds[mid].hash < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < p->n_holds && p->holds[end].hash == hash)
        end++;
    const size_t k = end - lo;
    int rc = -ENOENT;
    for (size_t t = 0; t < k; t++) {
        const struct hold *h = &p->holds[lo + (t + hash % k) % k];
        struct peer *q = &p->peer[h->peer];
        if (strcmp(h->name, entry) != 0 || q->st.avoided) continue;
        char url[1024];
        snprintf(url, sizeof url, "%s/ffr/%s", q->base, entry);
        struct ffio_peer_stats *ps = &q->st;
        const int r = ffio_http_fetch(p->h, url, fd, size);
        if (r == 0) {
            ps->fetched++;
            ps->bytes += size;
            *who = h->peer;
            return 0;
        }
        ffio_str_copy(p->last, sizeof p->last, ffio_http_last_error(p->h));
        if (r == -ENOENT) {
            ps->missing++; /* evicted, or not there yet: the next holder */
            continue;
        }
        ps->failed++;
        ps->avoided = true;
        peers_log(p, "peer %s: %s; avoided until the next epoch, the origin serves its shards",
                  q->base, p->last);
        rc = r;
    }
    if (rc != -ENOENT && err && cap) ffio_str_copy(err, cap, p->last);
    return rc;
}

static void peers_bad(void *ctx, int who, const char *why)
{
    struct ffio_peers *p = ctx;
    if (who < 0 || who >= p->n) return;
    p->peer[who].st.bad++;
    p->peer[who].st.avoided = true;
    peers_log(p,
              "peer %s served bytes that failed verification (%s); avoided until the next "
              "epoch, the origin serves its shards",
              p->peer[who].base, why);
}

void ffio_peers_cache_hooks(struct ffio_peers *p, struct ffr_cache_peers *out)
{
    out->fetch = peers_fetch;
    out->bad = peers_bad;
    out->ctx = p;
}
