/*
 * Writing to S3 (io/ffio_s3_ops.c): uploads, listings, deletions, and the dataset upload sink
 * behind yolo-pack -o s3://, in two parts.
 *
 * 1. A server of this test's own, for what moto cannot do. It checks every body against the
 *    SHA-256 it was signed with (x-amz-content-sha256) and keeps the parts it accepts:
 *    - a PUT answered 503 SlowDown, then accepted;
 *    - a multipart upload whose parts meet a stall (no answer), a connection reset mid-body and
 *      a 500, and whose completion first answers 200 with an <Error> (retried): the object
 *      assembled from the parts equals the file, and nothing is aborted;
 *    - a completion refused (InvalidPart), and a part refused for good (AccessDenied): the
 *      error names the code and the part, and the upload is aborted (DELETE ?uploadId=);
 *    - a completion whose answer is cut short, and whose retry meets NoSuchUpload: the object's
 *      size shows the first attempt completed, so the upload succeeds;
 *    - a 64 MiB file in 5 MiB parts, 2 in flight: peak RSS grows by less than 24 MiB.
 * 2. moto_server on loopback (it checks every signature; skipped, saying so, without moto):
 *    single and multipart uploads read back equal; ListObjectsV2 over four pages under a prefix
 *    with '/', and its bound; a deletion; a multipart upload whose file ends early leaves no
 *    object; a wrong secret named; and the dataset sink: a sharded dataset uploaded and read
 *    back record for record, replaced by another while the first stays readable until the new
 *    manifest is in place (then its shards are deleted), an upload aborted half-way leaves
 *    the dataset and the bucket as they were, and a shard no manifest names is reported.
 * argv[1]: a scratch directory; argv[2]: tests/io/s3_moto.py.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ffio_internal.h"
#include "moto_util.h"
#include "remote_test_util.h"
#include "tap.h"

#define MiB (1u << 20)

static long peak_rss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* A file of n pseudo-random bytes, written 1 MiB at a time (also returned in *data when data is
 * not NULL; without it, the file never is in memory whole). */
static int make_file(const char *path, size_t n, uint8_t **data)
{
    uint8_t *b = data ? malloc(n ? n : 1) : NULL, *chunk = malloc(MiB);
    FILE *f = fopen(path, "wb");
    bool good = f && chunk && (b || !data);
    uint64_t x = n * 0x9e3779b97f4a7c15ull;
    for (size_t at = 0; good && at < n;) {
        const size_t k = n - at < MiB ? n - at : MiB;
        for (size_t i = 0; i < k; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            chunk[i] = (uint8_t)x;
        }
        if (b) memcpy(b + at, chunk, k);
        good = fwrite(chunk, 1, k, f) == k;
        at += k;
    }
    if (f) fclose(f);
    free(chunk);
    if (data)
        *data = b;
    else
        free(b);
    return good ? 0 : -1;
}

static struct ffio_http *client(const struct ffio_s3_config *c, unsigned in_flight)
{
    struct ffio_http_opts o;
    ffio_http_opts_default(&o);
    o.retries = 3;
    o.backoff_ms = 10;
    o.stall_timeout_s = 1;
    o.put_threshold = 5 * MiB;
    o.put_part = 5 * MiB;
    o.max_in_flight = in_flight;
    o.s3 = c;
    struct ffio_http *h = NULL;
    ffio_http_create(&o, &h);
    return h;
}

static int put_path(struct ffio_http *h, const char *url, const char *path, uint64_t size)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    const int rc = ffio_s3_put(h, url, fd, size);
    close(fd);
    return rc;
}

/* ---- part 1: the test's own server ---- */

#define MAX_PARTS 16

struct srv {
    int fd;
    atomic_int stop;
    pthread_t th;
    const char *mode;
    bool keep; /* keep the bytes received (off for the memory test) */
    /* what it saw; read by the test after the call returns (the call's requests are done) */
    int puts, creates, completes, aborts, bad_sha, parked[32], n_parked;
    int part_tries[MAX_PARTS + 1];
    uint8_t *part[MAX_PARTS + 1];
    size_t part_len[MAX_PARTS + 1];
    uint8_t *obj;
    size_t obj_len;
    char complete_body[4096];
    char upload_query[128];
};

static void sendall(int c, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        const ssize_t k = send(c, s, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static void answer(int c, int status, const char *extra, const char *body)
{
    char head[600];
    const int hn = snprintf(head, sizeof head,
                            "HTTP/1.1 %d X\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n",
                            status, extra ? extra : "", body ? strlen(body) : 0);
    sendall(c, head, (size_t)hn);
    if (body) sendall(c, body, strlen(body));
}

static void answer_error(int c, int status, const char *code)
{
    char body[300];
    snprintf(body, sizeof body,
             "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>the "
             "test server says %s</Message></Error>",
             code, code);
    answer(c, status, "Content-Type: application/xml\r\n", body);
}

static bool sha_ok(const uint8_t *b, size_t n, const char *hex)
{
    unsigned char md[32];
    unsigned len = 0;
    char h[65];
    EVP_Digest(b, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(h + 2 * i, 3, "%02x", md[i]);
    return !strncmp(h, hex, 64);
}

/* Parts 1..n assembled in the order the completion body names them. */
static void assemble(struct srv *s)
{
    free(s->obj);
    s->obj = NULL;
    s->obj_len = 0;
    size_t total = 0;
    for (int k = 1; k <= MAX_PARTS; k++)
        total += s->part_len[k];
    if (!s->keep) { /* the memory test: sizes only */
        s->obj_len = total;
        return;
    }
    s->obj = malloc(total ? total : 1);
    const char *p = s->complete_body;
    unsigned num;
    while ((p = strstr(p, "<PartNumber>")) && sscanf(p, "<PartNumber>%u", &num) == 1) {
        p++;
        if (num >= 1 && num <= MAX_PARTS && s->part[num]) {
            memcpy(s->obj + s->obj_len, s->part[num], s->part_len[num]);
            s->obj_len += s->part_len[num];
        }
    }
}

static void serve(struct srv *s, int c)
{
    char req[8192];
    size_t got = 0;
    char *end = NULL;
    while (got < sizeof req - 1 && !end) {
        const ssize_t k = recv(c, req + got, sizeof req - 1 - got, 0);
        if (k <= 0) return;
        got += (size_t)k;
        req[got] = '\0';
        end = strstr(req, "\r\n\r\n");
    }
    if (!end) return;
    char method[16] = "", target[2048] = "", sha[80] = "";
    sscanf(req, "%15s %2047s", method, target);
    const char *q = strchr(target, '?');
    const char *cl = strcasestr(req, "\r\nContent-Length:");
    const size_t blen = cl ? strtoull(cl + 17, NULL, 10) : 0;
    const char *hs = strcasestr(req, "\r\nx-amz-content-sha256:");
    if (hs) sscanf(hs + 23, " %79s", sha);
    const bool put = !strcmp(method, "PUT"), post = !strcmp(method, "POST");
    unsigned part = 0;
    if (q && strstr(q, "partNumber=")) sscanf(strstr(q, "partNumber=") + 11, "%u", &part);
    if (part > MAX_PARTS) part = 0;
    const int attempt = part ? ++s->part_tries[part] : 0;
    if (strcasestr(req, "\r\nExpect: 100-continue"))
        sendall(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    /* the body: what came with the headers, then the rest */
    uint8_t *body = malloc(blen ? blen : 1);
    size_t have = got - (size_t)(end + 4 - req);
    if (have > blen) have = blen;
    memcpy(body, end + 4, have);
    const bool reset = !strcmp(s->mode, "mp") && part == 2 && attempt == 1;
    while (have < (reset ? blen / 2 : blen)) {
        const ssize_t k = recv(c, body + have, (reset ? blen / 2 : blen) - have, 0);
        if (k <= 0) break;
        have += (size_t)k;
    }
    if (reset) { /* a reset in the middle of the part's body */
        struct linger lg = { 1, 0 };
        setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        free(body);
        return;
    }
    if ((put || post) && have == blen && blen && !sha_ok(body, blen, sha)) s->bad_sha++;
    if (put && !part) { /* a single PUT */
        if (++s->puts == 1 && !strcmp(s->mode, "slowdown")) {
            answer_error(c, 503, "SlowDown");
        } else {
            free(s->obj);
            s->obj = NULL;
            s->obj_len = have;
            if (s->keep) {
                s->obj = body;
                body = NULL;
            }
            answer(c, 200, "ETag: \"single\"\r\n", NULL);
        }
    } else if (put) {
        if (!strcmp(s->mode, "mp") && part == 1 && attempt == 1 && s->n_parked < 32) {
            s->parked[s->n_parked++] = dup(c); /* a stall: never answered */
        } else if (!strcmp(s->mode, "mp") && part == 3 && attempt == 1) {
            answer_error(c, 500, "InternalError");
        } else if (!strcmp(s->mode, "partdenied") && part == 2) {
            answer_error(c, 403, "AccessDenied");
        } else {
            free(s->part[part]);
            s->part[part] = NULL;
            s->part_len[part] = have;
            if (s->keep) {
                s->part[part] = body;
                body = NULL;
            }
            char etag[64];
            snprintf(etag, sizeof etag, "ETag: \"p%u\"\r\n", part);
            answer(c, 200, etag, NULL);
        }
    } else if (post && q && !strcmp(q, "?uploads=")) {
        s->creates++;
        answer(c, 200, NULL,
               "<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>bkt</Bucket>"
               "<Key>k</Key><UploadId>up/1+2=</UploadId></InitiateMultipartUploadResult>");
    } else if (post && q && !strncmp(q, "?uploadId=", 10)) {
        const int n = ++s->completes;
        snprintf(s->upload_query, sizeof s->upload_query, "%s", q);
        if (have < sizeof s->complete_body) {
            memcpy(s->complete_body, body, have);
            s->complete_body[have] = '\0';
        }
        if (!strcmp(s->mode, "mp") && n == 1) {
            /* S3's way: 200 at once (blanks keep the connection alive), then an <Error> */
            answer(c, 200, NULL,
                   "  \n  \n<?xml version=\"1.0\"?><Error><Code>InternalError</Code>"
                   "<Message>We encountered an internal error. Please try again.</Message>"
                   "</Error>");
        } else if (!strcmp(s->mode, "invalidpart")) {
            answer_error(c, 400, "InvalidPart");
        } else if (!strcmp(s->mode, "lost") && n == 1) {
            assemble(s); /* it completed ... */
            const char *head = "HTTP/1.1 200 OK\r\nContent-Length: 400\r\nConnection: close\r\n\r\n"
                               "<?xml version=\"1.0\"?><Compl";
            sendall(c, head, strlen(head)); /* ... but the answer breaks off */
        } else if (!strcmp(s->mode, "lost")) {
            answer_error(c, 404, "NoSuchUpload");
        } else {
            assemble(s);
            answer(c, 200, NULL,
                   "<?xml version=\"1.0\"?><CompleteMultipartUploadResult><Bucket>bkt</Bucket>"
                   "<Key>k</Key><ETag>\"whole-3\"</ETag></CompleteMultipartUploadResult>");
        }
    } else if (!strcmp(method, "DELETE")) {
        if (q && strstr(q, "uploadId=")) s->aborts++;
        answer(c, 204, NULL, NULL);
    } else if (!strcmp(method, "GET") && s->obj) { /* the size probe */
        char extra[120];
        snprintf(extra, sizeof extra, "Content-Range: bytes 0-0/%zu\r\n", s->obj_len);
        char head[300];
        const int hn = snprintf(head, sizeof head,
                                "HTTP/1.1 206 Partial\r\n%sContent-Length: 1\r\nConnection: "
                                "close\r\n\r\n",
                                extra);
        sendall(c, head, (size_t)hn);
        sendall(c, s->obj, 1);
    } else {
        answer_error(c, 404, "NoSuchKey");
    }
    free(body);
}

static void *srv_main(void *arg)
{
    struct srv *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        if (poll(&p, 1, 50) <= 0) continue;
        const int c = accept(s->fd, NULL, NULL);
        if (c < 0) continue;
        serve(s, c);
        close(c);
    }
    return NULL;
}

static void srv_reset(struct srv *s, const char *mode, bool keep)
{
    s->mode = mode;
    s->keep = keep;
    s->puts = s->creates = s->completes = s->aborts = s->bad_sha = 0;
    for (int k = 0; k <= MAX_PARTS; k++) {
        free(s->part[k]);
        s->part[k] = NULL;
        s->part_len[k] = 0;
        s->part_tries[k] = 0;
    }
    free(s->obj);
    s->obj = NULL;
    s->obj_len = 0;
    s->complete_body[0] = s->upload_query[0] = '\0';
}

static void test_faults(const char *dir)
{
    struct srv s = { .mode = "", .keep = true };
    int port = 0;
    s.fd = rt_listen(64, &port);
    if (s.fd < 0 || pthread_create(&s.th, NULL, srv_main, &s)) {
        ok(0, "the fault server starts");
        return;
    }
    struct ffio_s3_config c;
    rt_s3_config(&c, port);
    char small[600], big[600], huge[600];
    snprintf(small, sizeof small, "%s/put-small.bin", dir);
    snprintf(big, sizeof big, "%s/put-big.bin", dir);
    snprintf(huge, sizeof huge, "%s/put-huge.bin", dir);
    /* memory first, before anything else has raised the peak: a 64 MiB file in 5 MiB parts,
     * 2 in flight, holds 2 parts, not the file */
    if (make_file(huge, 64 * MiB, NULL) < 0) {
        ok(0, "making the file to upload in %s", dir);
        return;
    }
    struct ffio_http *h = client(&c, 2);
    srv_reset(&s, "discard", false);
    const long rss0 = peak_rss_kb();
    int rc = put_path(h, "s3://bkt/huge.bin", huge, 64 * MiB);
    const long grew = peak_rss_kb() - rss0;
    /* the bound without ASan only: its quarantine keeps every freed part of the server's */
#if defined(__SANITIZE_ADDRESS__)
    const long bound = LONG_MAX;
#else
    const long bound = 24 * 1024;
#endif
    ok(rc == 0 && s.completes == 1 && s.bad_sha == 0 && s.obj_len == 64 * MiB && grew < bound,
       "fault server: 64 MiB in 13 parts, 2 in flight: peak RSS +%ld KiB (bound 24 MiB: 2 "
       "parts and the server's one; none under ASan): %s",
       grew, ffio_http_last_error(h));
    ffio_http_destroy(h);
    unlink(huge);

    uint8_t *sd = NULL, *bd = NULL;
    const size_t bn = 13 * MiB + 12345;
    if (make_file(small, 300000, &sd) < 0 || make_file(big, bn, &bd) < 0) {
        ok(0, "making the files to upload in %s", dir);
        return;
    }
    h = client(&c, 3);

    srv_reset(&s, "slowdown", true);
    rc = put_path(h, "s3://bkt/one.bin", small, 300000);
    ok(rc == 0 && s.puts == 2 && s.bad_sha == 0 && s.obj_len == 300000 &&
           !memcmp(s.obj, sd, 300000),
       "fault server: a PUT met with SlowDown is sent again, its body signed with its SHA-256 "
       "(%d PUTs, %d bad hashes): %s",
       s.puts, s.bad_sha, ffio_http_last_error(h));

    srv_reset(&s, "mp", true);
    struct ffio_http_stats st0, st1;
    ffio_http_stats(h, &st0);
    rc = put_path(h, "s3://bkt/big.bin", big, bn);
    ffio_http_stats(h, &st1);
    ok(rc == 0 && s.creates == 1 && s.completes == 2 && s.aborts == 0 && s.bad_sha == 0 &&
           s.obj_len == bn && !memcmp(s.obj, bd, bn) && s.part_tries[1] == 2 &&
           s.part_tries[2] == 2 && s.part_tries[3] == 2 &&
           strstr(s.upload_query, "uploadId=up%2F1%2B2%3D"),
       "fault server: multipart, 3 parts through a stall, a reset mid-body, a 500 and a "
       "200-with-<Error> completion: the object equals the file (%" PRIu64 " retries; part "
       "attempts %d %d %d; %d bad hashes): %s",
       st1.retries - st0.retries, s.part_tries[1], s.part_tries[2], s.part_tries[3], s.bad_sha,
       ffio_http_last_error(h));
    ok(strstr(s.complete_body, "<Part><ETag>\"p1\"</ETag><PartNumber>1</PartNumber></Part><Part>"
                               "<ETag>\"p2\"</ETag><PartNumber>2</PartNumber></Part>") != NULL,
       "fault server: the completion names every part's number and ETag, in order");

    srv_reset(&s, "invalidpart", true);
    rc = put_path(h, "s3://bkt/bad.bin", big, bn);
    ok(rc < 0 && s.aborts == 1 && strstr(ffio_http_last_error(h), "InvalidPart") &&
           strstr(ffio_http_last_error(h), "bad.bin"),
       "fault server: a refused completion is named and the upload aborted (%d aborts): %s",
       s.aborts, ffio_http_last_error(h));

    srv_reset(&s, "partdenied", true);
    rc = put_path(h, "s3://bkt/denied.bin", big, bn);
    ok(rc == -EACCES && s.aborts == 1 && s.completes == 0 &&
           strstr(ffio_http_last_error(h), "part 2") &&
           strstr(ffio_http_last_error(h), "AccessDenied"),
       "fault server: a part refused for good fails the upload, named, and aborts it: %s",
       ffio_http_last_error(h));

    srv_reset(&s, "lost", true);
    rc = put_path(h, "s3://bkt/lost.bin", big, bn);
    ok(rc == 0 && s.completes == 2 && s.aborts == 0 && s.obj_len == bn,
       "fault server: a completion whose answer broke off, then NoSuchUpload: the object at its "
       "full size says it completed (%d completions): %s",
       s.completes, ffio_http_last_error(h));
    ffio_http_destroy(h);

    atomic_store(&s.stop, 1);
    pthread_join(s.th, NULL);
    for (int k = 0; k < s.n_parked; k++)
        close(s.parked[k]);
    close(s.fd);
    srv_reset(&s, "", false);
    free(sd);
    free(bd);
}

/* ---- part 2: moto ---- */

static int64_t read_all(struct ffio_http *h, const char *url, uint8_t *dst, uint64_t len)
{
    struct ffio_http_extent x = { .url = url, .dst = dst, .offset = 0, .length = len };
    const int bad = ffio_http_read(h, &x, 1);
    return bad < 0 ? bad : x.res;
}

/* A writer that hands its files to the sink, for rt_append. */
static int sink_writer(const char *stage_path, struct ffio_s3_sink *sink, struct ffr_writer **w)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.durable = 0;
    o.shard_bytes = 256 << 10;
    o.publish = ffio_s3_sink_publish;
    o.taken = ffio_s3_sink_taken;
    o.sink = sink;
    return ffr_writer_open(w, stage_path, &o);
}

/* As yolo-pack ends an upload: closed and finished after rc == 0, else both aborted. */
static int sink_close(struct ffr_writer *w, struct ffio_s3_sink *sink, int rc,
                      struct ffio_s3_sink_stats *st, char *err, size_t cap)
{
    if (rc == 0)
        rc = ffr_writer_close(w);
    else
        ffr_writer_abort(w);
    if (rc == 0) return ffio_s3_sink_finish(sink, st, err, cap);
    ffio_s3_sink_abort(sink);
    return rc;
}

static size_t count_keys(struct ffio_http *h, const char *prefix, const char *containing)
{
    struct ffio_s3_object *o = NULL;
    size_t n = 0, k = 0;
    if (ffio_s3_list(h, prefix, 100000, &o, &n) < 0) return (size_t)-1;
    for (size_t i = 0; i < n; i++)
        k += strstr(o[i].key, containing) != NULL;
    ffio_s3_objects_free(o, n);
    return k;
}

static void test_moto(const char *dir, const char *script)
{
    char up[600], why[512] = "", cmd[4200];
    snprintf(up, sizeof up, "%s/s3-put-seed", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && echo seed > '%s/readme'", up, up,
             up);
    if (system(cmd) != 0) {
        ok(0, "making %s", up);
        return;
    }
    struct moto m = { .to = -1 };
    if (moto_start(&m, script, "ffio-put", up, why, sizeof why)) {
        tap_diag("SKIP the moto part: %s", why);
        if (m.pid > 0) moto_stop(&m);
        return;
    }
    struct ffio_s3_config c;
    moto_s3_config(&m, &c);
    struct ffio_http *h = client(&c, 3);

    char small[600], big[600];
    snprintf(small, sizeof small, "%s/put-small.bin", dir);
    snprintf(big, sizeof big, "%s/put-big.bin", dir);
    uint8_t *sd = NULL, *bd = NULL;
    const size_t bn = 13 * MiB + 12345;
    if (make_file(small, 300000, &sd) < 0 || make_file(big, bn, &bd) < 0) {
        ok(0, "making the files to upload");
        moto_stop(&m);
        return;
    }
    uint8_t *back = malloc(bn);
    int rc = put_path(h, "s3://ffio-put/up/small.bin", small, 300000);
    ok(rc == 0 && read_all(h, "s3://ffio-put/up/small.bin", back, 300000) == 300000 &&
           !memcmp(back, sd, 300000),
       "moto: a single PUT reads back equal (%s)", ffio_http_last_error(h));
    struct ffio_http_stats st0, st1;
    ffio_http_stats(h, &st0);
    rc = put_path(h, "s3://ffio-put/up/big.bin", big, bn);
    ffio_http_stats(h, &st1);
    uint64_t size = 0;
    ok(rc == 0 && st1.requests - st0.requests == 5 &&
           ffio_http_size(h, "s3://ffio-put/up/big.bin", &size) == 0 && size == bn &&
           read_all(h, "s3://ffio-put/up/big.bin", back, bn) == (int64_t)bn &&
           !memcmp(back, bd, bn),
       "moto: a multipart upload (3 parts, 5 requests) reads back equal (%s)",
       ffio_http_last_error(h));

    /* ListObjectsV2, 2 keys a page, under a prefix with '/' (sent as %2F) */
    for (int k = 0; k < 7; k++) {
        char u[200];
        snprintf(u, sizeof u, "s3://ffio-put/up/lst/obj-%d", k);
        put_path(h, u, small, 1000 + (uint64_t)k);
    }
    put_path(h, "s3://ffio-put/up/lsx", small, 10);
    struct ffio_http_opts o;
    ffio_http_opts_default(&o);
    o.list_page = 2;
    o.s3 = &c;
    struct ffio_http *h2 = NULL;
    ffio_http_create(&o, &h2);
    struct ffio_s3_object *obj = NULL;
    size_t n = 0;
    ffio_http_stats(h2, &st0);
    rc = ffio_s3_list(h2, "s3://ffio-put/up/lst/", 100, &obj, &n);
    ffio_http_stats(h2, &st1);
    bool good = rc == 0 && n == 7 && st1.requests - st0.requests == 4;
    for (size_t k = 0; good && k < n; k++) {
        char want[40];
        snprintf(want, sizeof want, "up/lst/obj-%zu", k);
        good = !strcmp(obj[k].key, want) && obj[k].size == 1000 + k;
    }
    ok(good,
       "moto: ListObjectsV2 over 4 pages finds the 7 keys under up/lst/ with their sizes "
       "(%zu found): %s",
       n, ffio_http_last_error(h2));
    ffio_s3_objects_free(obj, n);
    rc = ffio_s3_list(h2, "s3://ffio-put/up/lst/", 3, &obj, &n);
    ok(rc == -EOVERFLOW && n == 0 && strstr(ffio_http_last_error(h2), "more than 3"),
       "moto: a listing past its bound fails, named: %s", ffio_http_last_error(h2));
    ffio_http_destroy(h2);

    rc = ffio_s3_delete(h, "s3://ffio-put/up/lst/obj-3");
    ok(rc == 0 && ffio_http_size(h, "s3://ffio-put/up/lst/obj-3", &size) == -ENOENT &&
           ffio_s3_delete(h, "s3://ffio-put/up/lst/obj-3") == 0,
       "moto: a deleted key is gone, and deleting it again is no error");

    /* a file that ends before the size given: the part that cannot be read fails the upload */
    rc = put_path(h, "s3://ffio-put/up/short.bin", small, 11 * MiB);
    ok(rc < 0 && strstr(ffio_http_last_error(h), "reading the file") &&
           ffio_http_size(h, "s3://ffio-put/up/short.bin", &size) == -ENOENT,
       "moto: a multipart upload that fails leaves no object: %s", ffio_http_last_error(h));

    struct ffio_s3_config bad = c;
    snprintf(bad.secret_access_key, sizeof bad.secret_access_key, "wrong");
    struct ffio_http *hb = client(&bad, 2);
    rc = put_path(hb, "s3://ffio-put/up/nope.bin", small, 300000);
    ok(rc == -EKEYREJECTED && strstr(ffio_http_last_error(hb), "SignatureDoesNotMatch") &&
           strstr(ffio_http_last_error(hb), "key up/nope.bin"),
       "moto: an upload with a wrong secret is named: %s", ffio_http_last_error(hb));
    ffio_http_destroy(hb);

    /* the dataset sink */
    char stage[600], path[700], local_a[700], local_b[700], err[2048] = "";
    snprintf(stage, sizeof stage, "%s/s3-put-stage", dir);
    snprintf(path, sizeof path, "%s/set.ffr", stage);
    snprintf(local_a, sizeof local_a, "%s/s3-put-local-a/set.ffr", dir);
    snprintf(local_b, sizeof local_b, "%s/s3-put-local-b/set.ffr", dir);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' '%s/s3-put-local-a' '%s/s3-put-local-b' && mkdir -p '%s' "
             "'%s/s3-put-local-a' '%s/s3-put-local-b'",
             stage, dir, dir, stage, dir, dir);
    if (system(cmd) != 0 || rt_make_dataset(local_a, 300, 256 << 10) < 0 ||
        rt_make_dataset(local_b, 200, 256 << 10) < 0) {
        ok(0, "making the local datasets");
        moto_stop(&m);
        return;
    }
    struct ffio_http_opts so;
    ffio_http_opts_default(&so);
    so.s3 = &c;
    so.put_threshold = so.put_part = 5 * MiB;
    const char *url = "s3://ffio-put/sets/set.ffr";
    struct ffio_s3_sink *sink = NULL;
    struct ffr_writer *w = NULL;
    struct ffio_s3_sink_stats sst = { 0 };
    rc = ffio_s3_sink_open(&so, url, &sink, err, sizeof err);
    if (rc == 0) rc = sink_writer(path, sink, &w);
    if (rc == 0) rc = rt_append(w, 300, 0, 300);
    rc = sink_close(w, sink, rc, &sst, err, sizeof err);
    uint64_t rn = 0;
    uint64_t same = rc == 0 ? rt_compare_remote(h, url, local_a, &rn, err, sizeof err) : 0;
    ok(rc == 0 && same == 300 && rn == 300 && sst.files > 4,
       "moto: a sharded dataset through the sink (%" PRIu64 " objects) reads back record for "
       "record: %" PRIu64 " of 300 (%s)",
       sst.files, same, err[0] ? err : ffio_http_last_error(h));
    const size_t a_shards = count_keys(h, "s3://ffio-put/sets/", "set-0");

    /* replaced by another: readable as it was until the new manifest is in place */
    rc = ffio_s3_sink_open(&so, url, &sink, err, sizeof err);
    if (rc == 0) rc = sink_writer(path, sink, &w);
    if (rc == 0) rc = rt_append(w, 200, 0, 150); /* several shards published */
    size_t tagged_mid = 0; /* new shards up (the manifest set.ffr aside), waited for */
    for (int t = 0; t < 200 && tagged_mid < 1; t++, usleep(50000))
        tagged_mid = count_keys(h, "s3://ffio-put/sets/", "set.") - 1;
    same = rt_compare_remote(h, url, local_a, &rn, err, sizeof err);
    if (rc == 0) rc = rt_append(w, 200, 150, 200);
    rc = sink_close(w, sink, rc, &sst, err, sizeof err);
    ok(same == 300 && tagged_mid >= 1,
       "moto: while its replacement uploads (%zu shards up), the dataset reads as before: %" PRIu64
       " of 300",
       tagged_mid, same);
    uint64_t same_b = rc == 0 ? rt_compare_remote(h, url, local_b, &rn, err, sizeof err) : 0;
    ok(rc == 0 && same_b == 200 && sst.deleted == a_shards && a_shards >= 4 &&
           count_keys(h, "s3://ffio-put/sets/", "set-0") == 0,
       "moto: after the new manifest, the new dataset reads (%" PRIu64 " of 200) and the %zu "
       "shards of the old one are deleted (%" PRIu64 ")",
       same_b, a_shards, sst.deleted);

    /* an upload given up half-way: the dataset and the bucket as they were */
    const size_t keys_before = count_keys(h, "s3://ffio-put/sets/", "set");
    rc = ffio_s3_sink_open(&so, url, &sink, err, sizeof err);
    if (rc == 0) rc = sink_writer(path, sink, &w);
    if (rc == 0) rc = rt_append(w, 300, 0, 150);
    ffr_writer_abort(w);
    ffio_s3_sink_abort(sink);
    same_b = rt_compare_remote(h, url, local_b, &rn, err, sizeof err);
    const size_t keys_after = count_keys(h, "s3://ffio-put/sets/", "set");
    DIR *d = opendir(stage);
    size_t left = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        left += e->d_name[0] != '.';
    if (d) closedir(d);
    ok(rc == 0 && same_b == 200 && keys_after == keys_before && left == 0,
       "moto: an aborted upload leaves the dataset (%" PRIu64 " of 200), the bucket (%zu keys, "
       "%zu before) and the staging directory (%zu files) as they were",
       same_b, keys_after, keys_before, left);

    /* what a killed upload left is reported, never deleted; another dataset's shards with the
     * same first letters are not counted */
    put_path(h, "s3://ffio-put/sets/set.0badf00d-00000.ffr", small, 100);
    put_path(h, "s3://ffio-put/sets/settle-00000.ffr", small, 100);
    rc = ffio_s3_sink_open(&so, url, &sink, err, sizeof err);
    if (rc == 0) rc = ffio_s3_sink_finish(sink, &sst, err, sizeof err);
    ok(rc == 0 && sst.unnamed == 1 && sst.deleted == 0 &&
           ffio_http_size(h, "s3://ffio-put/sets/set.0badf00d-00000.ffr", &size) == 0,
       "moto: a shard no manifest names is reported (%" PRIu64 "), not deleted", sst.unnamed);

    ffio_http_destroy(h);
    free(back);
    free(sd);
    free(bd);
    moto_stop(&m);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SCRATCH_DIR s3_moto.py\n", argv[0]);
        return 2;
    }
    if (!ffio_http_available()) tap_skip_all("built without libcurl");
    signal(SIGPIPE, SIG_IGN);
    test_faults(argv[1]);
    test_moto(argv[1], argv[2]);
    return tap_done();
}
