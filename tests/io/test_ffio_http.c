/*
 * ffio over HTTP against a small misbehaving server in this program (a thread on loopback):
 * a server that drops connections mid-body, answers 503 or closes without answering makes the
 * client retry and resume, and every record still reads back equal to the local reader's; a
 * server that always cuts the body short, ignores Range, or has no such file makes the read
 * fail with an error naming the URL and offset, and a short body is never accepted.
 * Hostile servers (issue 20): one claiming an 8 GiB file whose trailer points at a huge index
 * (with a broken or a correct locator hash) is refused before the index is fetched or memory is
 * taken for it (peak RSS and requests asserted); one that trickles a byte per answer and stalls
 * fails the read at its deadline (wall time asserted); a killed open's temporary folder is
 * removed by the next open.
 * argv[1]: a scratch directory (the build directory). The nginx test is test_ffio_nginx.c.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ffio.h"
#include "tap.h"

enum serve_mode {
    SERVE_GOOD = 0,      /* answers every range correctly */
    SERVE_FLAKY = 1,     /* 3 requests in 8 fail: cut body, 503, or closed without a word */
    SERVE_SHORT = 2,     /* never sends the last 16 bytes asked for, and closes */
    SERVE_NORANGE = 3,   /* 200 and the whole file, ignoring Range */
    SERVE_LIAR = 4,      /* an 8 GiB file: the real header, a trailer locating an 8 GiB index */
    SERVE_LIAR_HASH = 5, /* the same trailer with a correct locator hash */
    SERVE_TRICKLE = 6,   /* one byte of each body, then silence until the client gives up */
    SERVE_BADRANGE = 7   /* 206 with a Content-Range one byte off the range asked for */
};

#define LIAR_SIZE ((uint64_t)8 << 30)

struct server {
    _Atomic uint64_t index_requests; /* LIAR: ranges asked inside the claimed index */
    int fd;
    int port;
    const uint8_t *data;
    size_t size;
    _Atomic int mode;
    atomic_int stop;
    atomic_int requests;
    pthread_t th;
};

static void send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        const ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        b += k;
        n -= (size_t)k;
    }
}

static void serve_one(struct server *s, int c)
{
    char req[4096];
    size_t got = 0;
    while (got < sizeof req - 1) {
        const ssize_t k = recv(c, req + got, sizeof req - 1 - got, 0);
        if (k <= 0) return;
        got += (size_t)k;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n")) break;
    }
    const int nth = atomic_fetch_add(&s->requests, 1);
    const int mode = atomic_load(&s->mode);
    char hdr[512];
    const int head = !strncmp(req, "HEAD ", 5);
    if (strstr(req, "/missing")) {
        const int n = snprintf(hdr, sizeof hdr,
                               "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: "
                               "close\r\n\r\n");
        send_all(c, hdr, (size_t)n);
        return;
    }
    const int liar = mode == SERVE_LIAR || mode == SERVE_LIAR_HASH;
    const uint64_t size = liar ? LIAR_SIZE : s->size;
    if (head) {
        const int n = snprintf(hdr, sizeof hdr,
                               "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nAccept-Ranges: "
                               "bytes\r\nConnection: close\r\n\r\n",
                               (unsigned long long)size);
        send_all(c, hdr, (size_t)n);
        return;
    }
    if (liar) {
        unsigned long long a = 0, b = size - 1;
        const char *r = strcasestr(req, "\r\nRange: bytes=");
        if (r) sscanf(r + 15, "%llu-%llu", &a, &b);
        if (b >= size) b = size - 1;
        const uint64_t tail_at = size - 1536;
        if (a >= 4096 && a < tail_at) atomic_fetch_add(&s->index_requests, 1);
        const int n = snprintf(hdr, sizeof hdr,
                               "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\n"
                               "Content-Range: bytes %llu-%llu/%llu\r\nConnection: close\r\n\r\n",
                               b - a + 1, a, b, (unsigned long long)size);
        send_all(c, hdr, (size_t)n);
        /* bytes a..b of: the real header, zeros, and a trailer whose locator puts an index of
         * almost 8 GiB right after the header (hash broken, or right for SERVE_LIAR_HASH) */
        uint8_t tail[1536] = { 0 };
        for (int k = 0; k < 3; k++) {
            uint8_t *l = tail + 512 * k;
            memcpy(l, "FFRTAIL1", 8);
            const uint64_t f[6] = { 1, 4096, tail_at - 4096, 1, 0, size };
            memcpy(l + 8, &f[0], 4); /* version 1, flags 0 */
            for (int j = 1; j < 6; j++)
                memcpy(l + 8 + 8 * j, &f[j], 8);
            const uint64_t hsh = mode == SERVE_LIAR_HASH ? ffr_hash(l, 56) : 0x1234;
            memcpy(l + 56, &hsh, 8);
        }
        static const uint8_t zeros[65536];
        for (uint64_t at = a; at <= b;) {
            const uint8_t *src = zeros;
            uint64_t len = b - at + 1 < sizeof zeros ? b - at + 1 : sizeof zeros;
            if (at < 64) {
                src = s->data + at;
                len = 64 - at < len ? 64 - at : len;
            } else if (at >= tail_at) {
                src = tail + (at - tail_at);
            } else if (at < tail_at && at + len > tail_at) {
                len = tail_at - at;
            }
            const ssize_t k = send(c, src, (size_t)len, MSG_NOSIGNAL);
            if (k <= 0) return;
            at += (uint64_t)k;
        }
        return;
    }
    unsigned long long a = 0, b = s->size - 1;
    const char *r = strcasestr(req, "\r\nRange: bytes=");
    if (r) sscanf(r + 15, "%llu-%llu", &a, &b);
    if (b >= s->size) b = s->size - 1;
    if (mode == SERVE_NORANGE || !r) {
        const int n = snprintf(
            hdr, sizeof hdr, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
            s->size);
        send_all(c, hdr, (size_t)n);
        send_all(c, s->data, s->size);
        return;
    }
    /* Flaky: each request draws its fate (a fixed hash of its number, so runs repeat). */
    const unsigned fate = ((unsigned)nth * 2654435761u) >> 29; /* 0..7 */
    const int turn = mode == SERVE_FLAKY ? (fate < 3 ? (int)fate : 3) : mode == SERVE_SHORT ? 4 : 3;
    if (turn == 1) {
        const int n = snprintf(hdr, sizeof hdr,
                               "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n");
        send_all(c, hdr, (size_t)n);
        return;
    }
    if (turn == 2) return; /* close without a word */
    const size_t len = (size_t)(b - a + 1);
    if (mode == SERVE_TRICKLE) {
        const int n = snprintf(hdr, sizeof hdr,
                               "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\n"
                               "Content-Range: bytes %llu-%llu/%zu\r\nConnection: close\r\n\r\n",
                               len, a, b, s->size);
        send_all(c, hdr, (size_t)n);
        send_all(c, s->data + a, 1); /* progress, then nothing until the client hangs up */
        struct pollfd p = { .fd = c, .events = POLLIN };
        for (int t = 0; t < 100 && !atomic_load(&s->stop); t++) {
            char junk[64];
            if (poll(&p, 1, 50) > 0 && recv(c, junk, sizeof junk, 0) <= 0) break;
        }
        return;
    }
    const int n = snprintf(hdr, sizeof hdr,
                           "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\nContent-Range: "
                           "bytes %llu-%llu/%zu\r\nConnection: close\r\n\r\n",
                           len, a + (mode == SERVE_BADRANGE), b, s->size);
    send_all(c, hdr, (size_t)n);
    /* turn 0: the connection drops half way through the body; turn 4: the last 16 bytes of
     * the file's range never come, however often the client resumes. */
    send_all(c, s->data + a,
             turn == 0 && len >= 2 ? len / 2
             : turn == 4           ? (len > 16 ? len - 16 : 0)
                                   : len);
}

static void *server_main(void *arg)
{
    struct server *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        if (poll(&p, 1, 50) <= 0) continue;
        const int c = accept(s->fd, NULL, NULL);
        if (c < 0) continue;
        serve_one(s, c);
        close(c);
    }
    return NULL;
}

static int server_start(struct server *s, const uint8_t *data, size_t size)
{
    memset(s, 0, sizeof *s);
    s->data = data;
    s->size = size;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(s->fd, 64) < 0 ||
        getsockname(s->fd, (struct sockaddr *)&a, &al) < 0)
        return -1;
    s->port = ntohs(a.sin_port);
    return pthread_create(&s->th, NULL, server_main, s) == 0 ? 0 : -1;
}

static void server_stop(struct server *s)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    close(s->fd);
}

static int make_file(const char *path, uint32_t n)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.durable = 0;
    o.codec = FFR_CODEC_ZSTD;
    struct ffr_writer *w;
    if (ffr_writer_open(&w, path, &o) < 0) return -1;
    uint8_t buf[6000];
    uint64_t seed = 77;
    for (uint32_t i = 0; i < n; i++) {
        const size_t len = 1000 + (i * 613) % 5000;
        for (size_t k = 0; k < len; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            buf[k] = (uint8_t)((seed >> 60) + (k % 7)); /* compressible, not trivially */
        }
        if (ffr_writer_append(w, buf, len, &i, sizeof i) < 0) {
            ffr_writer_abort(w);
            return -1;
        }
    }
    return ffr_writer_close(w);
}

/* Reads every record of rm and compares with the local reader; returns records equal. */
static uint64_t compare_all(struct ffio_remote *rm, struct ffr_reader *local, int *errors,
                            char *first, size_t cap)
{
    const uint64_t n = ffr_reader_count(local);
    enum { B = 16 };
    static uint8_t ext[B][16384], dst[B][16384], want[16384];
    uint64_t same = 0;
    *errors = 0;
    for (uint64_t i0 = 0; i0 < n; i0 += B) {
        struct ffio_record_req q[B];
        const size_t m = n - i0 < B ? (size_t)(n - i0) : B;
        for (size_t k = 0; k < m; k++)
            q[k] = (struct ffio_record_req){ .index = i0 + k,
                                             .extent = ext[k],
                                             .extent_cap = sizeof ext[k],
                                             .dst = dst[k],
                                             .dst_cap = sizeof dst[k] };
        const int bad = ffio_remote_read(rm, q, m);
        for (size_t k = 0; k < m; k++) {
            if (q[k].result < 0) {
                if (!(*errors)++)
                    snprintf(first, cap, "record %" PRIu64 ": %s", i0 + k,
                             q[k].result <= -1000 ? ffr_strerror((int)q[k].result)
                                                  : ffio_strerror((int)q[k].result));
                continue;
            }
            const int64_t wn = ffr_reader_read(local, NULL, i0 + k, want, sizeof want);
            same += wn == q[k].result && !memcmp(want, q[k].payload, (size_t)wn);
        }
        (void)bad;
    }
    return same;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long peak_rss_mb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024;
}

/* The hostile servers of issue 20 (s runs SERVE_GOOD on return). */
static void hostile(struct server *s, struct ffio_http_opts ho, const char *scratch)
{
    char url[128], err[1024] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data.ffr", s->port);
    ho.retries = 6;
    ho.stall_timeout_s = 1;
    ho.read_deadline_s = 2;
    struct ffio_http *h;
    if (ffio_http_create(&ho, &h) < 0) return;

    /* a killed open's skeleton folder (dead PID, this host) is removed by the next open */
    char host[256] = "", stale[600], inner[700];
    gethostname(host, sizeof host);
    for (char *p = host; *p; p++)
        if (*p == '.' || *p == '/') *p = '_';
    snprintf(stale, sizeof stale, "%s/ffio-remote-7.tmp.999999.%s", scratch, host);
    mkdir(stale, 0700);
    snprintf(inner, sizeof inner, "%s/data.ffr", stale);
    fclose(fopen(inner, "w"));
    setenv("TMPDIR", scratch, 1);

    /* 8 GiB claimed, trailer hash broken: refused on the trailer alone */
    atomic_store(&s->mode, SERVE_LIAR);
    const long rss0 = peak_rss_mb();
    double t = now_s();
    struct ffio_remote *rm = NULL;
    int rc = ffio_remote_open(h, url, NULL, &rm, err, sizeof err);
    ok(rc == -FFR_ETRUNC && strstr(err, url) && strstr(err, "no valid trailer"),
       "8 GiB claimed, trailer hash broken: refused (%d): %s", rc, err);
    ok(access(stale, F_OK) != 0, "the dead open's folder %s was removed", stale);
    /* ... and with a correct locator hash: the index bound refuses it */
    atomic_store(&s->mode, SERVE_LIAR_HASH);
    rc = ffio_remote_open(h, url, NULL, &rm, err, sizeof err);
    ok(rc == -FFR_ETOOBIG && strstr(err, "max_index_bytes"),
       "8 GiB claimed, a well-hashed trailer locating an 8 GiB index: refused (%d): %s", rc, err);
    const long grew = peak_rss_mb() - rss0;
    ok(atomic_load(&s->index_requests) == 0, "not one byte of the claimed index was asked for");
    ok(grew < 64 && now_s() - t < 10, "peak RSS grew %ld MB (< 64), %.1f s (< 10)", grew,
       now_s() - t);
    ffio_remote_close(rm);
    DIR *d = opendir(scratch);
    int left = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        left += !strncmp(e->d_name, "ffio-remote-", 12);
    if (d) closedir(d);
    is_int(left, 0, "no skeleton folder is left behind");

    /* a byte per answer, then silence: each answer is progress, the deadline still ends it */
    atomic_store(&s->mode, SERVE_TRICKLE);
    uint8_t buf[1536];
    struct ffio_http_extent x = { .url = url, .dst = buf, .offset = 0, .length = sizeof buf };
    t = now_s();
    rc = ffio_http_read(h, &x, 1);
    const double took = now_s() - t;
    ok(rc == 1 && x.res == -ETIMEDOUT && strstr(ffio_http_last_error(h), "deadline"),
       "a trickling server: the read fails at its deadline (%lld): %s", (long long)x.res,
       ffio_http_last_error(h));
    ok(took >= 1.5 && took < 8, "after %.1f s (deadline 2 s; without it, retries for minutes)",
       took);
    atomic_store(&s->mode, SERVE_GOOD);
    ffio_http_destroy(h);
}

static void dbg_log(void *ctx, enum ffio_log_level l, const char *m)
{
    (void)ctx, (void)l;
    fprintf(stderr, "%s\n", m);
}

int main(int argc, char **argv)
{
    if (!ffio_http_available()) tap_skip_all("built without libcurl");
    char path[4200];
    snprintf(path, sizeof path, "%s/test_ffio_http.%ld.ffr", argc > 1 ? argv[1] : "/tmp",
             (long)getpid());
    if (make_file(path, 90) < 0) {
        printf("# cannot write %s\n", path);
        return 99;
    }
    struct ffr_reader *local;
    if (ffr_reader_open(&local, path, NULL, NULL, 0) < 0) return 99;
    struct stat st;
    stat(path, &st);
    uint8_t *data = malloc((size_t)st.st_size);
    const int fd = open(path, O_RDONLY);
    if (!data || pread(fd, data, (size_t)st.st_size, 0) != st.st_size) return 99;
    close(fd);
    unlink(path);

    struct server s;
    if (server_start(&s, data, (size_t)st.st_size) < 0) {
        printf("# cannot start the loopback server\n");
        return 99;
    }
    char url[128], err[1024] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data.ffr", s.port);
    struct ffio_http_opts ho;
    ffio_http_opts_default(&ho);
    ho.backoff_ms = 1;
    ho.retries = 10;
    ho.max_in_flight = 4;
    if (getenv("HTTP_DEBUG")) ho.log = dbg_log;
    struct ffio_http *h;
    ok(ffio_http_create(&ho, &h) == 0, "client created");

    /* A well-behaved server: the baseline. */
    struct ffio_remote *rm = NULL;
    int rc = ffio_remote_open(h, url, NULL, &rm, err, sizeof err);
    ok(rc == 0 && ffr_reader_count(ffio_remote_reader(rm)) == 90, "remote open: %s",
       rc ? err : "90 records");
    int errors = 0;
    char first[512] = "";
    uint64_t same = rm ? compare_all(rm, local, &errors, first, sizeof first) : 0;
    ok(same == 90 && errors == 0, "every record read over HTTP equals the local one (%s)", first);

    /* Dropped connections, 503s and silent closes: retried, resumed, still exact. */
    atomic_store(&s.mode, SERVE_FLAKY);
    struct ffio_http_stats before, after;
    ffio_http_stats(h, &before);
    same = rm ? compare_all(rm, local, &errors, first, sizeof first) : 0;
    ffio_http_stats(h, &after);
    ok(same == 90 && errors == 0,
       "a server dropping connections mid-body: every record still equal (%s)", first);
    ok(after.retries - before.retries >= 30,
       "... after %" PRIu64 " retries over %" PRIu64 " requests", after.retries - before.retries,
       after.requests - before.requests);

    /* A server that always cuts the body short: the range fails, never accepted. */
    atomic_store(&s.mode, SERVE_SHORT);
    uint8_t buf[8192];
    memset(buf, 0xee, sizeof buf);
    struct ffio_http_extent x = { .url = url, .dst = buf, .offset = 4096, .length = 8192 };
    ffio_http_stats(h, &before);
    rc = ffio_http_read(h, &x, 1);
    ffio_http_stats(h, &after);
    const char *le = ffio_http_last_error(h);
    ok(rc == 1 && x.res < 0 && after.requests - before.requests >= ho.retries + 1,
       "always-short bodies: the range fails after %" PRIu64 " attempts (res %lld)",
       after.requests - before.requests, (long long)x.res);
    ok(strstr(le, url) && strstr(le, "offset 4096"), "the error names URL and offset: %s", le);
    struct ffio_record_req q = { .index = 3,
                                 .extent = buf,
                                 .extent_cap = sizeof buf,
                                 .dst = data /* unused: must stay untouched on failure */,
                                 .dst_cap = 0 };
    rc = rm ? ffio_remote_read(rm, &q, 1) : -1;
    ok(rc == 1 && q.result < 0 && q.payload == NULL,
       "a record over the always-short server fails: %lld", (long long)q.result);

    /* A Content-Range that is not the range asked for: said as such (it used to be reported as
     * a missing Content-Range). */
    atomic_store(&s.mode, SERVE_BADRANGE);
    rc = ffio_http_read(h, &x, 1);
    ok(rc == 1 && x.res == -EPROTO &&
           strstr(ffio_http_last_error(h), "Content-Range 'bytes 4097-") &&
           strstr(ffio_http_last_error(h), "not the bytes asked for (4096-"),
       "a wrong Content-Range is named: %s", ffio_http_last_error(h));

    /* Ignoring Range, and a missing file. */
    atomic_store(&s.mode, SERVE_NORANGE);
    rc = ffio_http_read(h, &x, 1);
    ok(rc == 1 && x.res == -EPROTO && strstr(ffio_http_last_error(h), "Range"),
       "a server ignoring Range: %s", ffio_http_last_error(h));
    atomic_store(&s.mode, SERVE_GOOD);
    char missing[160];
    snprintf(missing, sizeof missing, "http://127.0.0.1:%d/missing.ffr", s.port);
    struct ffio_remote *rm2 = NULL;
    rc = ffio_remote_open(h, missing, NULL, &rm2, err, sizeof err);
    ok(rc == -ENOENT && strstr(err, missing), "a missing URL: %s", err);
    uint64_t size = 0;
    rc = ffio_http_size(h, url, &size);
    ok(rc == 0 && size == (uint64_t)st.st_size, "size by HEAD: %" PRIu64, size);
    hostile(&s, ho, argc > 1 ? argv[1] : "/tmp");
    server_stop(&s);

    /* Nobody listening any more: refused, retried, then a clear error. */
    x.offset = 0;
    x.length = 100;
    ho.retries = 2;
    struct ffio_http *h2;
    ffio_http_create(&ho, &h2);
    rc = ffio_http_read(h2, &x, 1);
    ok(rc == 1 && x.res == -ECONNREFUSED && strstr(ffio_http_last_error(h2), "3 attempts"),
       "connection refused: %s", ffio_http_last_error(h2));
    struct ffio_http_opts bad = ho;
    bad.max_in_flight = 0;
    struct ffio_http *h3 = NULL;
    is_int(ffio_http_create(&bad, &h3), -EINVAL, "max_in_flight 0 is refused");
    ok(ffio_http_is_url("https://x/y") && ffio_http_is_url("http://x") &&
           !ffio_http_is_url("/data/x.ffr") && !ffio_http_is_url("ftp://x"),
       "URL detection");

    ffio_http_destroy(h2);
    ffio_remote_close(rm);
    ffio_http_destroy(h);
    ffr_reader_close(local);
    free(data);
    return tap_done();
}
