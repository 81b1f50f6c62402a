/*
 * Helpers shared by the tests that read datasets from servers on loopback (test_ffio_nginx.c,
 * test_ffio_s3.c): a sharded dataset of pseudo-random records, a free port, and a record-by-record
 * comparison of a remote open against the local reader.
 */
#ifndef REMOTE_TEST_UTIL_H
#define REMOTE_TEST_UTIL_H

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ffio.h"

/* Record i of a dataset of n records: 500..8499 pseudo-random bytes (a function of n and i). */
static inline size_t rt_record(uint32_t n, uint32_t i, uint8_t buf[9000])
{
    uint64_t seed = (uint64_t)n * 1315423911u + (uint64_t)i * 2654435761u;
    const size_t len = 500 + (i * 877) % 8000;
    for (size_t k = 0; k < len; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        buf[k] = (uint8_t)(seed >> 56);
    }
    return len;
}

/* Writes records [0, n) through an open writer (records as rt_record, summaries their index). */
static inline int rt_append(struct ffr_writer *w, uint32_t n, uint32_t from, uint32_t to)
{
    uint8_t buf[9000];
    for (uint32_t i = from; i < to; i++) {
        const size_t len = rt_record(n, i, buf);
        if (ffr_writer_append(w, buf, len, &i, sizeof i) < 0) return -1;
    }
    return 0;
}

static inline int rt_make_dataset(const char *path, uint32_t n, uint64_t shard_bytes)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.durable = 0;
    o.shard_bytes = shard_bytes;
    struct ffr_writer *w;
    if (ffr_writer_open(&w, path, &o) < 0) return -1;
    if (rt_append(w, n, 0, n) < 0) {
        ffr_writer_abort(w);
        return -1;
    }
    return ffr_writer_close(w);
}

/* Every record of the file or manifest at path a equals b's (as rt_record writes them: at most
 * 12 KiB each). */
static inline bool rt_same_records(const char *a_path, const char *b_path)
{
    struct ffr_reader *a = NULL, *b = NULL;
    char err[256];
    bool same = ffr_reader_open(&a, a_path, NULL, err, sizeof err) == 0 &&
                ffr_reader_open(&b, b_path, NULL, err, sizeof err) == 0 &&
                ffr_reader_count(a) == ffr_reader_count(b);
    static uint8_t x[12288], y[12288];
    for (uint64_t i = 0; same && i < ffr_reader_count(b); i++) {
        const int64_t nx = ffr_reader_read(a, NULL, i, x, sizeof x);
        const int64_t ny = ffr_reader_read(b, NULL, i, y, sizeof y);
        same = nx >= 0 && nx == ny && !memcmp(x, y, (size_t)nx);
    }
    ffr_reader_close(a);
    ffr_reader_close(b);
    return same;
}

/* A TCP socket listening on 127.0.0.1 at a free port (*port): the fd, or -1. */
static inline int rt_listen(int backlog, int *port)
{
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, backlog) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* Keys for a test's own S3 server on 127.0.0.1:port (path-style, us-east-1). */
static inline void rt_s3_config(struct ffio_s3_config *c, int port)
{
    memset(c, 0, sizeof *c);
    snprintf(c->region, sizeof c->region, "us-east-1");
    c->path_style = true;
    snprintf(c->access_key_id, sizeof c->access_key_id, "AKIAFAULT");
    snprintf(c->secret_access_key, sizeof c->secret_access_key, "secret");
    snprintf(c->source, sizeof c->source, "the test");
    snprintf(c->endpoint, sizeof c->endpoint, "http://127.0.0.1:%d", port);
}

static inline int rt_free_port(void)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* Reads every record of url remotely and compares with the local file; returns equal count. */
static inline uint64_t rt_compare_remote(struct ffio_http *h, const char *url,
                                         const char *local_path, uint64_t *n_out, char *err,
                                         size_t cap)
{
    struct ffio_remote *rm = NULL;
    struct ffr_reader *local = NULL;
    *n_out = 0;
    if (ffio_remote_open(h, url, NULL, &rm, err, cap) < 0) return 0;
    if (ffr_reader_open(&local, local_path, NULL, err, cap) < 0) {
        ffio_remote_close(rm);
        return 0;
    }
    const uint64_t n = ffr_reader_count(local);
    *n_out = ffr_reader_count(ffio_remote_reader(rm));
    enum { B = 24 };
    static uint8_t ext[B][12288], dst[B][12288], want[12288];
    uint64_t same = 0;
    for (uint64_t i0 = 0; i0 < n && *n_out == n; i0 += B) {
        struct ffio_record_req q[B];
        const size_t m = n - i0 < B ? (size_t)(n - i0) : B;
        for (size_t k = 0; k < m; k++)
            q[k] = (struct ffio_record_req){ .index = i0 + k,
                                             .extent = ext[k],
                                             .extent_cap = sizeof ext[k],
                                             .dst = dst[k],
                                             .dst_cap = sizeof dst[k] };
        ffio_remote_read(rm, q, m);
        for (size_t k = 0; k < m; k++) {
            const int64_t wn = ffr_reader_read(local, NULL, i0 + k, want, sizeof want);
            same +=
                q[k].result >= 0 && wn == q[k].result && !memcmp(want, q[k].payload, (size_t)wn);
        }
    }
    ffr_reader_close(local);
    ffio_remote_close(rm);
    return same;
}

#endif /* REMOTE_TEST_UTIL_H */
