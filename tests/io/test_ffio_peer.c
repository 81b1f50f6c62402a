/*
 * The peer server and the cache's peers (io/ffio_peer.c), on loopback:
 *  - the server, spoken to byte for byte: whole files, the three range forms, a range past the
 *    end, HEAD, pipelined requests on one connection; what it refuses (another method, a body,
 *    a head too large, HTTP/2, a traversal, a name that is not a shard entry's, a symlink, a
 *    directory, a temporary); a client that never finishes its head is closed at its deadline
 *    while others are served; past max_conns a connection is closed at once;
 *  - a cache asking a peer first, its origin one of these servers counting what it sends: a
 *    good peer serves every shard and the origin only the manifest; a peer missing one shard
 *    and corrupting another is avoided after the bad bytes and the origin serves both; a dead
 *    peer and one that accepts and never answers cost seconds, not the fill. Every fill reads
 *    back record for record equal to the dataset.
 * argv[1]: a scratch directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ffio.h"
#include "remote_test_util.h"
#include "tap.h"

static char scratch[512];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A connection to the loopback address of family (AF_INET or AF_INET6) at port. */
static int connect_fam(int family, int port)
{
    const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6,
                               .sin6_port = htons((uint16_t)port),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT };
    const int c = family == AF_INET6 ? connect(fd, (struct sockaddr *)&a6, sizeof a6)
                                     : connect(fd, (struct sockaddr *)&a, sizeof a);
    if (c < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int connect_to(int port)
{
    return connect_fam(AF_INET, port);
}

/* Reads until the peer closes or nothing comes for quiet_s; returns the bytes read. */
static size_t read_all(int fd, char *out, size_t cap, double quiet_s)
{
    size_t n = 0;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, (int)(quiet_s * 1000)) <= 0) break;
        const ssize_t g = recv(fd, out + n, cap - 1 - n, 0);
        if (g <= 0) break;
        n += (size_t)g;
        if (n == cap - 1) break;
    }
    out[n] = '\0';
    return n;
}

/* Sends req on a new connection and reads the answer until the server closes (or 2 s of
 * quiet); returns its length. */
static size_t ask(int port, const char *req, size_t len, char *out, size_t cap)
{
    const int fd = connect_to(port);
    if (fd < 0) return 0;
    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
        close(fd);
        return 0;
    }
    const size_t n = read_all(fd, out, cap, 2.0);
    close(fd);
    return n;
}

static const char *body_of(const char *answer)
{
    const char *b = strstr(answer, "\r\n\r\n");
    return b ? b + 4 : "";
}

#define ENTRY "0123456789abcdef-100-data-00000.ffr"

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        printf("Bail out! cannot write %s\n", path);
        exit(99);
    }
}

static long peak_rss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* 200 clients that each send 8000 bytes of a head that never ends: the server holds at most
 * max_conns (64) of them, each in one head buffer (8 KiB), closes the rest at once, and serves
 * again once they hang up. (The head deadline is tested in test_server.) Run first, before
 * anything else in this process has raised its peak RSS. */
static void test_flood(void)
{
    char dir[600], path[800];
    snprintf(dir, sizeof dir, "%s/peer-flood", scratch);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, ENTRY);
    write_file(path, "0123456789", 10);
    struct ffio_peer_server_opts o;
    ffio_peer_server_opts_default(&o);
    o.bind_host = "127.0.0.1"; /* the default 10 s head deadline: none passes during the flood */
    struct ffio_peer_server *s = NULL;
    char err[256];
    if (!ok(ffio_peer_serve(dir, &o, &s, err, sizeof err) == 0, "flood: the server starts (%s)",
            err))
        return;
    const int port = ffio_peer_server_port(s);
    const long rss0 = peak_rss_kb();
    enum { N = 200 };
    int fd[N];
    static char junk[8000];
    const int pre = snprintf(junk, sizeof junk, "GET /ffr/%s HTTP/1.1\r\nX-Pad: ", ENTRY);
    memset(junk + pre, 'a', sizeof junk - (size_t)pre);
    for (int i = 0; i < N; i++) {
        fd[i] = connect_to(port);
        if (fd[i] >= 0) send(fd[i], junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    usleep(500 * 1000); /* the server reads what was sent */
    const long grew = peak_rss_kb() - rss0;
    for (int i = 0; i < N; i++)
        if (fd[i] >= 0) close(fd[i]);
    struct ffio_peer_server_stats st;
    ffio_peer_server_stats(s, &st);
#if defined(__SANITIZE_ADDRESS__)
    const long bound = LONG_MAX; /* ASan's shadow and quarantine are not the server's */
#else
    const long bound = 2048;
#endif
    ok(st.conns == 64 && st.conns_refused == N - 64 && grew < bound,
       "flood of %d unfinished heads: %" PRIu64 " held, %" PRIu64
       " closed at once; peak RSS +%ld KiB (bound 2 MiB: 64 head buffers of 8 KiB; none under "
       "ASan)",
       N, st.conns, st.conns_refused, grew);
    static char out[4096];
    const char req[] = "GET /ffr/" ENTRY " HTTP/1.1\r\nConnection: close\r\n\r\n";
    /* the server sees the hang-ups on its next poll: a few tries at most */
    for (int t = 0; t < 50; t++) {
        out[0] = '\0';
        ask(port, req, sizeof req - 1, out, sizeof out);
        if (!strncmp(out, "HTTP/1.1 200 ", 13)) break;
        usleep(100 * 1000);
    }
    ok(!strncmp(out, "HTTP/1.1 200 ", 13) && !strcmp(body_of(out), "0123456789"),
       "flood: served again once the clients hang up");
    ffio_peer_server_stop(s);
}

static void test_server(void)
{
    char dir[600], path[800];
    snprintf(dir, sizeof dir, "%s/peer-srv", scratch);
    mkdir(dir, 0755);
    char content[100];
    for (int i = 0; i < 100; i++)
        content[i] = (char)('A' + i % 26);
    snprintf(path, sizeof path, "%s/%s", dir, ENTRY);
    write_file(path, content, sizeof content);
    snprintf(path, sizeof path, "%s/plain.txt", dir);
    write_file(path, "private", 7);
    snprintf(path, sizeof path, "%s/.tmp-%s-1-0", dir, ENTRY);
    write_file(path, content, sizeof content);
    snprintf(path, sizeof path, "%s/0123456789abcdef-100-link.ffr", dir);
    if (symlink(ENTRY, path) < 0 && errno != EEXIST) tap_diag("symlink: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/0123456789abcdef-1-dir.ffr", dir);
    mkdir(path, 0755);

    struct ffio_peer_server_opts o;
    ffio_peer_server_opts_default(&o);
    o.bind_host = "127.0.0.1";
    o.max_conns = 3;
    o.head_timeout_s = 1;
    o.idle_timeout_s = 2;
    struct ffio_peer_server *s = NULL;
    char err[256];
    if (!ok(ffio_peer_serve(dir, &o, &s, err, sizeof err) == 0, "the server starts (%s)", err))
        return;
    const int port = ffio_peer_server_port(s);
    static char out[65536];
    char req[12000];
#define GET(extra) "GET /ffr/" ENTRY " HTTP/1.1\r\nHost: x\r\n" extra "Connection: close\r\n\r\n"
    size_t n = ask(port, GET(""), strlen(GET("")), out, sizeof out);
    ok(n > 0 && !strncmp(out, "HTTP/1.1 200 ", 13) && strstr(out, "Content-Length: 100\r\n") &&
           !memcmp(body_of(out), content, 100) && strlen(body_of(out)) == 100,
       "GET: 200, the whole file");
    n = ask(port, GET("Range: bytes=10-19\r\n"), strlen(GET("Range: bytes=10-19\r\n")), out,
            sizeof out);
    ok(!strncmp(out, "HTTP/1.1 206 ", 13) && strstr(out, "Content-Range: bytes 10-19/100\r\n") &&
           strlen(body_of(out)) == 10 && !memcmp(body_of(out), content + 10, 10),
       "bytes=10-19: 206 and those 10 bytes");
    n = ask(port, GET("Range: bytes=-5\r\n"), strlen(GET("Range: bytes=-5\r\n")), out, sizeof out);
    ok(strstr(out, "Content-Range: bytes 95-99/100\r\n") && !memcmp(body_of(out), content + 95, 5),
       "bytes=-5: the last 5 bytes");
    n = ask(port, GET("Range: bytes=90-\r\n"), strlen(GET("Range: bytes=90-\r\n")), out,
            sizeof out);
    ok(strstr(out, "Content-Range: bytes 90-99/100\r\n") && strlen(body_of(out)) == 10,
       "bytes=90-: to the end");
    n = ask(port, GET("Range: bytes=95-5000\r\n"), strlen(GET("Range: bytes=95-5000\r\n")), out,
            sizeof out);
    ok(strstr(out, "Content-Range: bytes 95-99/100\r\n") && strlen(body_of(out)) == 5,
       "bytes=95-5000: cut at the end");
    n = ask(port, GET("Range: bytes=100-\r\n"), strlen(GET("Range: bytes=100-\r\n")), out,
            sizeof out);
    ok(!strncmp(out, "HTTP/1.1 416 ", 13) && strstr(out, "Content-Range: bytes */100\r\n"),
       "bytes=100-: 416 naming the size");
    n = ask(port, GET("Range: bytes=0-1,5-6\r\n"), strlen(GET("Range: bytes=0-1,5-6\r\n")), out,
            sizeof out);
    ok(!strncmp(out, "HTTP/1.1 200 ", 13) && strlen(body_of(out)) == 100,
       "two ranges: ignored, the whole file (RFC 9110 allows it)");
    snprintf(req, sizeof req, "HEAD /ffr/%s HTTP/1.1\r\nConnection: close\r\n\r\n", ENTRY);
    n = ask(port, req, strlen(req), out, sizeof out);
    ok(!strncmp(out, "HTTP/1.1 200 ", 13) && strstr(out, "Content-Length: 100\r\n") &&
           body_of(out)[0] == '\0',
       "HEAD: the size, no body");
    /* pipelined: two requests in one write, answered in order on one connection */
    snprintf(req, sizeof req,
             "GET /ffr/%s HTTP/1.1\r\nRange: bytes=0-2\r\n\r\nGET /ffr/%s HTTP/1.1\r\nRange: "
             "bytes=3-5\r\nConnection: close\r\n\r\n",
             ENTRY, ENTRY);
    n = ask(port, req, strlen(req), out, sizeof out);
    const char *second = strstr(body_of(out), "HTTP/1.1 206 ");
    ok(!strncmp(body_of(out), "ABC", 3) && second && !strncmp(body_of(second), "DEF", 3),
       "two pipelined requests: both answered, in order");

    struct {
        const char *req, *want, *what;
    } refused[] = {
        { "POST /ffr/" ENTRY " HTTP/1.1\r\n\r\n", "HTTP/1.1 405 ", "POST: 405" },
        { "GET /ffr/" ENTRY " HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "HTTP/1.1 400 ",
          "a request with a body: 400" },
        { "GET /ffr/" ENTRY " HTTP/2.0\r\n\r\n", "HTTP/1.1 505 ", "HTTP/2.0: 505" },
        { "GET /ffr/../peer-srv/" ENTRY " HTTP/1.1\r\nConnection: close\r\n\r\n", "HTTP/1.1 404 ",
          "a path with ..: 404" },
        { "GET /ffr/plain.txt HTTP/1.1\r\nConnection: close\r\n\r\n", "HTTP/1.1 404 ",
          "a file not shaped like a shard entry: 404" },
        { "GET /ffr/0123456789abcdef-100-link.ffr HTTP/1.1\r\nConnection: close\r\n\r\n",
          "HTTP/1.1 404 ", "a symlink: 404" },
        { "GET /ffr/0123456789abcdef-1-dir.ffr HTTP/1.1\r\nConnection: close\r\n\r\n",
          "HTTP/1.1 404 ", "a directory: 404" },
        { "GET /ffr/.tmp-" ENTRY "-1-0 HTTP/1.1\r\nConnection: close\r\n\r\n", "HTTP/1.1 404 ",
          "a temporary: 404" },
        { "GET /other/" ENTRY " HTTP/1.1\r\nConnection: close\r\n\r\n", "HTTP/1.1 404 ",
          "outside /ffr/: 404" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        n = ask(port, refused[i].req, strlen(refused[i].req), out, sizeof out);
        ok(n > 0 && !strncmp(out, refused[i].want, strlen(refused[i].want)), "%s", refused[i].what);
    }
    /* a head past the limit */
    int k = snprintf(req, sizeof req, "GET /ffr/%s HTTP/1.1\r\n", ENTRY);
    while (k < 9500)
        k += snprintf(req + k, sizeof req - (size_t)k, "X-Pad: %0100d\r\n", 0);
    n = ask(port, req, (size_t)k, out, sizeof out);
    ok(!strncmp(out, "HTTP/1.1 431 ", 13), "a head over 8 KiB: 431");

    /* A client that never ends its head holds a slot until its deadline (1 s), and meanwhile
     * another is served. */
    const int slow = connect_to(port);
    send(slow, "GET /ffr/", 9, MSG_NOSIGNAL);
    n = ask(port, GET(""), strlen(GET("")), out, sizeof out);
    ok(!strncmp(out, "HTTP/1.1 200 ", 13), "served while a slow client holds a connection");
    const double t0 = now_s();
    char tmp[64];
    read_all(slow, tmp, sizeof tmp, 5.0);
    const double waited = now_s() - t0;
    ok(waited < 3.5, "the unfinished head is closed at its deadline (%.1f s, deadline 1 s)",
       waited);
    close(slow);

    /* max_conns 3: the fourth is closed at once; after the three go, a new one is served */
    int held[3];
    for (int i = 0; i < 3; i++)
        held[i] = connect_to(port);
    usleep(200 * 1000);
    const int extra = connect_to(port);
    const double t1 = now_s();
    const size_t got = extra >= 0 ? read_all(extra, tmp, sizeof tmp, 3.0) : 0;
    ok(extra >= 0 && got == 0 && now_s() - t1 < 1.5, "past max_conns: closed at once");
    if (extra >= 0) close(extra);
    for (int i = 0; i < 3; i++)
        close(held[i]);
    usleep(700 * 1000);
    n = ask(port, GET(""), strlen(GET("")), out, sizeof out);
    ok(!strncmp(out, "HTTP/1.1 200 ", 13), "once they close, a new connection is served");

    /* A client that asks for 16 MiB and hangs up without reading: the server's sendfile meets
     * a closed connection (SIGPIPE, were it not blocked in its thread), and goes on serving. */
    snprintf(path, sizeof path, "%s/0123456789abcdef-16777216-big.ffr", dir);
    {
        char *big = calloc(1, 16u << 20);
        write_file(path, big, 16u << 20);
        free(big);
    }
    const int rude = connect_to(port);
    snprintf(req, sizeof req,
             "GET /ffr/0123456789abcdef-16777216-big.ffr HTTP/1.1\r\nConnection: close\r\n\r\n");
    send(rude, req, strlen(req), MSG_NOSIGNAL);
    close(rude); /* before the answer: its bytes meet a reset, and the next write EPIPE */
    usleep(300 * 1000);
    n = ask(port, GET(""), strlen(GET("")), out, sizeof out);
    ok(!strncmp(out, "HTTP/1.1 200 ", 13),
       "a client that hangs up mid-body leaves the server (and this process) serving");

    struct ffio_peer_server_stats st;
    ffio_peer_server_stats(s, &st);
    ok(st.bytes >= 100 * 5 + 10 + 5 + 10 + 5 + 3 + 3 && st.conns_refused == 1 &&
           st.not_found == 6 && st.refused >= 4,
       "stats: %" PRIu64 " body bytes, %" PRIu64 " refused connection(s), %" PRIu64
       " not found, %" PRIu64 " refused",
       st.bytes, st.conns_refused, st.not_found, st.refused);
    ffio_peer_server_stop(s);
    ok(connect_to(port) < 0, "stopped: nothing listens");
#undef GET
}

/* ---- a cache asking peers ---------------------------------------------------------------- */

struct node {
    char dir[700];
    struct ffio_http *origin;
    struct ffio_peers *peers;
    struct ffr_cache *cache;
    struct ffr_cache_stats st;
    char local[1024];
    int rc;
};

static int n_logged;
static void log_line(void *ctx, enum ffio_log_level l, const char *msg)
{
    (void)ctx;
    (void)l;
    n_logged++;
    tap_diag("log: %s", msg);
}

/* Fills a cache at scratch/NAME from url, asking `peers` (NULL: none) first. */
static void fill(struct node *nd, const char *name, const char *url, struct ffio_peers *peers)
{
    snprintf(nd->dir, sizeof nd->dir, "%s/%s", scratch, name);
    nd->rc = ffio_http_create(NULL, &nd->origin);
    struct ffr_cache_source src;
    ffio_http_cache_source(nd->origin, &src);
    struct ffr_cache_peers hooks;
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.durable = 0;
    co.source = &src;
    if (peers) {
        ffio_peers_cache_hooks(peers, &hooks);
        co.peers = &hooks;
    }
    char err[1024] = "";
    if (nd->rc == 0) nd->rc = ffr_cache_open(&nd->cache, nd->dir, &co, err, sizeof err);
    if (nd->rc == 0)
        nd->rc = ffr_cache_dataset(nd->cache, url, nd->local, sizeof nd->local, err, sizeof err);
    if (nd->rc < 0) tap_diag("%s: %s", name, err);
    if (nd->cache) ffr_cache_stats(nd->cache, &nd->st);
    ffr_cache_close(nd->cache);
    nd->cache = NULL;
    ffio_http_destroy(nd->origin);
}

static uint64_t dir_bytes(const char *dir, int *files)
{
    DIR *d = opendir(dir);
    uint64_t sum = 0;
    *files = 0;
    struct dirent *e;
    char p[1200];
    while (d && (e = readdir(d))) {
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            sum += (uint64_t)st.st_size;
            (*files)++;
        }
    }
    if (d) closedir(d);
    return sum;
}

/* The shard entries of a manifest at path, in its order. */
static uint32_t entries_of(const char *path, char names[][256], uint32_t cap)
{
    FILE *f = fopen(path, "rb");
    static char text[1 << 16];
    const size_t n = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    struct ffr_cache_shard *sh = NULL;
    uint32_t k = 0;
    char err[256];
    if (ffr_manifest_shards(text, n, &sh, &k, err, sizeof err) < 0) return 0;
    for (uint32_t i = 0; i < k && i < cap; i++)
        ffr_cache_entry_name(&sh[i], names[i], 256);
    ffr_manifest_shards_free(sh, k);
    return k < cap ? k : cap;
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0)
        fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

/* Without a bind_host the server listens on every interface of both families (one dual-stack
 * socket), so a node announcing an IPv6 address is reached, and an IPv4 one too. */
static void test_dual_stack(void)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/dual", scratch);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, ENTRY);
    static const char content[100] = "dual stack";
    write_file(path, content, sizeof content);
    struct ffio_peer_server *s = NULL;
    char err[256] = "";
    if (!ok(ffio_peer_serve(dir, NULL, &s, err, sizeof err) == 0,
            "the server starts on every interface (%s)", err))
        return;
    const int port = ffio_peer_server_port(s);
    static const char req[] = "GET /ffr/" ENTRY " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    static char out[4096];
    for (int k = 0; k < 2; k++) {
        const int fam = k ? AF_INET6 : AF_INET;
        if (fam == AF_INET6) {
            /* is there an IPv6 loopback here at all? */
            const int t = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            struct sockaddr_in6 a6 = { .sin6_family = AF_INET6,
                                       .sin6_addr = IN6ADDR_LOOPBACK_INIT };
            const int b = t >= 0 ? bind(t, (struct sockaddr *)&a6, sizeof a6) : -1;
            if (t >= 0) close(t);
            if (b < 0) {
                tap_skip(2, "no IPv6 loopback (::1) on this machine");
                break;
            }
        }
        const int fd = connect_fam(fam, port);
        size_t n = 0;
        if (fd >= 0 && send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req))
            n = read_all(fd, out, sizeof out, 2.0);
        if (fd >= 0) close(fd);
        ok(n > 0 && !strncmp(out, "HTTP/1.1 200 ", 13) && !memcmp(body_of(out), content, 100),
           "GET over %s: 200, the whole file", k ? "::1" : "127.0.0.1");
        if (!k) continue;
        if (!ffio_http_available()) {
            tap_skip(1, "built without libcurl");
            continue;
        }
        struct ffio_http *h = NULL;
        uint64_t size = 0;
        char url[200];
        snprintf(url, sizeof url, "http://[::1]:%d/ffr/%s", port, ENTRY);
        int rc = ffio_http_create(NULL, &h);
        if (rc == 0) rc = ffio_http_size(h, url, &size);
        ok(rc == 0 && size == 100,
           "the HTTP client reaches it at [::1] (HEAD: %d, %" PRIu64 " bytes)", rc, size);
        ffio_http_destroy(h);
    }
    ffio_peer_server_stop(s);
    unlink(path);
}

static void test_cache_peers(void)
{
    if (!ffio_http_available()) {
        tap_diag("SKIP the cache part: built without libcurl, so no peers");
        return;
    }
    char odir[600], ds[700], url[256], err[256];
    snprintf(odir, sizeof odir, "%s/peer-origin", scratch);
    mkdir(odir, 0755);
    snprintf(ds, sizeof ds, "%s/ds.ffr", odir);
    if (rt_make_dataset(ds, 600, 256 << 10) < 0) {
        printf("Bail out! cannot write %s\n", ds);
        exit(99);
    }
    int n_files = 0;
    const uint64_t ds_bytes = dir_bytes(odir, &n_files);
    struct ffio_peer_server_opts so;
    ffio_peer_server_opts_default(&so);
    so.bind_host = "127.0.0.1";
    so.entries_only = false; /* the origin serves the dataset's own names */
    struct ffio_peer_server *origin = NULL;
    if (ffio_peer_serve(odir, &so, &origin, err, sizeof err) < 0) {
        printf("Bail out! origin: %s\n", err);
        exit(99);
    }
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ffr/ds.ffr", ffio_peer_server_port(origin));
    struct ffio_peer_server_stats o0, o1;

    /* A: no peers, everything from the origin */
    struct node a = { 0 };
    fill(&a, "peer-a", url, NULL);
    ffio_peer_server_stats(origin, &o0);
    ok(a.rc > 1 && o0.bytes >= ds_bytes && rt_same_records(a.local, ds),
       "node A fills from the origin alone: %d shards, %" PRIu64 " bytes served for a %" PRIu64
       "-byte dataset",
       a.rc, o0.bytes, ds_bytes);
    static char names[64][256];
    const uint32_t n_sh = entries_of(ds, names, 64);
    ok(n_sh == (uint32_t)a.rc && n_sh + 1 == (uint32_t)n_files, "%u shards, one manifest", n_sh);
    so.entries_only = true;
    struct ffio_peer_server *serve_a = NULL;
    ok(ffio_peer_serve(a.dir, &so, &serve_a, err, sizeof err) == 0, "A serves its cache");
    const int port_a = ffio_peer_server_port(serve_a);

    /* B: A holds every shard: the origin sends only the manifest */
    struct ffio_peers *pb = NULL;
    ffio_peers_create(NULL, log_line, NULL, &pb);
    const int ia = ffio_peers_add(pb, "127.0.0.1", port_a);
    for (uint32_t i = 0; i < n_sh; i++)
        ffio_peers_hold(pb, names[i], ia);
    struct node b = { 0 };
    fill(&b, "peer-b", url, pb);
    ffio_peer_server_stats(origin, &o1);
    struct ffio_peer_stats ps;
    ffio_peers_stats(pb, ia, &ps);
    ok(b.rc == (int)n_sh && b.st.peer_fetches == n_sh && ps.fetched == n_sh &&
           rt_same_records(b.local, ds),
       "node B: all %u shards from peer A, every record equal", n_sh);
    ok(o1.bytes - o0.bytes < 4096,
       "node B cost the origin %" PRIu64 " bytes (the manifest), not %" PRIu64, o1.bytes - o0.bytes,
       ds_bytes);
    ffio_peers_destroy(pb);

    /* C: a peer serving a copy of A's cache with the first shard missing and a byte of the
     * last one flipped: 404 moves on, the bad bytes are caught and the peer avoided; the
     * origin serves exactly those two shards. */
    char cdir[700], p1[1200], p2[1200];
    snprintf(cdir, sizeof cdir, "%s/peer-corrupt", scratch);
    mkdir(cdir, 0755);
    for (uint32_t i = 1; i < n_sh; i++) {
        snprintf(p1, sizeof p1, "%s/%s", a.dir, names[i]);
        snprintf(p2, sizeof p2, "%s/%s", cdir, names[i]);
        copy_file(p1, p2);
    }
    snprintf(p2, sizeof p2, "%s/%s", cdir, names[n_sh - 1]);
    const int fd = open(p2, O_RDWR);
    struct stat stc;
    fstat(fd, &stc);
    uint8_t byte;
    const off_t at = stc.st_size / 2; /* a record's bytes or padding: both are checked */
    pread(fd, &byte, 1, at);
    byte ^= 0x10;
    pwrite(fd, &byte, 1, at);
    close(fd);
    struct ffio_peer_server *serve_c = NULL;
    ffio_peer_serve(cdir, &so, &serve_c, err, sizeof err);
    struct ffio_peers *pc = NULL;
    ffio_peers_create(NULL, log_line, NULL, &pc);
    const int ic = ffio_peers_add(pc, "127.0.0.1", ffio_peer_server_port(serve_c));
    for (uint32_t i = 0; i < n_sh; i++)
        ffio_peers_hold(pc, names[i], ic);
    n_logged = 0;
    struct node c = { 0 };
    ffio_peer_server_stats(origin, &o0);
    fill(&c, "peer-c", url, pc);
    ffio_peer_server_stats(origin, &o1);
    ffio_peers_stats(pc, ic, &ps);
    ok(c.rc == (int)n_sh && c.st.peer_fetches == n_sh - 2 && c.st.peer_bad == 1 &&
           ps.missing == 1 && ps.bad == 1 && ps.avoided && n_logged == 1,
       "node C: %" PRIu64 " shards from the peer, 1 missing there, 1 with bad bytes (peer "
       "avoided, one log line)",
       c.st.peer_fetches);
    ok(rt_same_records(c.local, ds), "node C: every record equal despite the corrupt peer");
    ok(o1.bytes - o0.bytes > 0 && o1.bytes - o0.bytes < ds_bytes / 2,
       "the origin served C the two shards and the manifest (%" PRIu64 " bytes)",
       o1.bytes - o0.bytes);
    ffio_peers_epoch(pc);
    ffio_peers_stats(pc, ic, &ps);
    ok(!ps.avoided, "a new epoch asks the avoided peer again");
    ffio_peers_destroy(pc);
    ffio_peer_server_stop(serve_c);

    /* D: a dead peer (A stopped) and one that accepts but never answers. */
    ffio_peer_server_stop(serve_a);
    int mute_port = 0;
    const int mute = rt_listen(16, &mute_port);
    struct ffio_http_opts ho;
    ffio_http_opts_default(&ho);
    ho.retries = 0;
    ho.connect_timeout_ms = 1000;
    ho.stall_timeout_s = 1;
    ho.read_deadline_s = 2;
    struct ffio_peers *pd = NULL;
    ffio_peers_create(&ho, log_line, NULL, &pd);
    const int id_dead = ffio_peers_add(pd, "127.0.0.1", port_a);
    const int id_mute = ffio_peers_add(pd, "127.0.0.1", mute_port);
    for (uint32_t i = 0; i < n_sh; i++) {
        ffio_peers_hold(pd, names[i], id_dead);
        ffio_peers_hold(pd, names[i], id_mute);
    }
    n_logged = 0;
    const double t0 = now_s();
    struct node d = { 0 };
    fill(&d, "peer-d", url, pd);
    const double took = now_s() - t0;
    struct ffio_peer_stats sd, sm;
    ffio_peers_stats(pd, id_dead, &sd);
    ffio_peers_stats(pd, id_mute, &sm);
    ok(d.rc == (int)n_sh && d.st.peer_fetches == 0 && sd.failed == 1 && sm.failed == 1 &&
           sd.avoided && sm.avoided && n_logged == 2,
       "node D: the dead and the mute peer each failed once, then were avoided");
    ok(rt_same_records(d.local, ds) && took < 15,
       "node D: filled from the origin, every record equal, in %.1f s", took);
    ffio_peers_destroy(pd);
    close(mute);
    ffio_peer_server_stop(origin);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("Bail out! usage: test_ffio_peer SCRATCH\n");
        return 99;
    }
    snprintf(scratch, sizeof scratch, "%s/peer.%d", argv[1], (int)getpid());
    mkdir(scratch, 0755);
    test_flood();
    test_server();
    test_dual_stack();
    test_cache_peers();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0) tap_diag("could not remove %s", scratch);
    return tap_done();
}
