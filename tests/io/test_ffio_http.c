/*
 * ffio over HTTP against a small misbehaving server in this program (a thread on loopback):
 * a server that drops connections mid-body, answers 503 or closes without answering makes the
 * client retry and resume, and every record still reads back equal to the local reader's; a
 * server that always cuts the body short, ignores Range, or has no such file makes the read
 * fail with an error naming the URL and offset, and a short body is never accepted.
 * argv[1]: a scratch directory (the build directory). The nginx test is test_ffio_nginx.c.
 */
#include <arpa/inet.h>
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ffio.h"
#include "tap.h"

enum serve_mode {
    SERVE_GOOD = 0,   /* answers every range correctly */
    SERVE_FLAKY = 1,  /* 3 requests in 8 fail: cut body, 503, or closed without a word */
    SERVE_SHORT = 2,  /* never sends the last 16 bytes asked for, and closes */
    SERVE_NORANGE = 3 /* 200 and the whole file, ignoring Range */
};

struct server {
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
    if (head) {
        const int n = snprintf(hdr, sizeof hdr,
                               "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nAccept-Ranges: "
                               "bytes\r\nConnection: close\r\n\r\n",
                               s->size);
        send_all(c, hdr, (size_t)n);
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
    const int n = snprintf(hdr, sizeof hdr,
                           "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\nContent-Range: "
                           "bytes %llu-%llu/%zu\r\nConnection: close\r\n\r\n",
                           len, a, b, s->size);
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
