/*
 * S3 requests other than range reads (ffio.h, "writing to S3"): PUT and multipart uploads,
 * ListObjectsV2, DeleteObject, and the dataset upload sink behind yolo-pack -o s3://.
 *
 * One runner (run) carries every request: up to max_in_flight at once on the client's curl multi
 * handle, each retried from its first byte after the same doubling backoff as a range read,
 * within a deadline of read_deadline_s plus one second per 64 KiB of body. An answer succeeds
 * only with a 2xx status and no <Error> in its body (CompleteMultipartUpload can answer 200 and
 * fail). Bodies sent are signed with their SHA-256, so S3 refuses any byte changed on the way.
 * A multipart upload's parts are read from the file as their turn comes (fill), so memory is
 * max_in_flight parts whatever the file's size; a failed upload is aborted before returning.
 */
#include "ffio_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(FFIO_HAVE_CURL)
#include <openssl/evp.h>
#include <pthread.h>
#endif

#define S3_MIN_PART     ((uint64_t)5 << 20)
#define S3_MAX_PARTS    10000u
#define S3_ERR_KEEP     4096u      /* bytes of an error answer kept for its <Error> */
#define S3_ANSWER_MAX   (8u << 20) /* a list page or a completion answer, at most */
#define S3_SINK_QUEUE   2u         /* finished shards waiting for the sink's thread */
#define S3_SINK_MAX_OBJ 2000000u   /* objects listed under a sink's destination, at most */

void ffio_s3_objects_free(struct ffio_s3_object *o, size_t n)
{
    for (size_t i = 0; o && i < n; i++)
        free(o[i].key);
    free(o);
}

int ffio_s3_list_parse(const char *xml, size_t n, struct ffio_s3_object **objs, size_t *n_objs,
                       size_t max, char *token, size_t tcap, bool *truncated)
{
    char flag[16] = "";
    size_t pos = 0;
    *truncated = false;
    if (ffio_xml_next(xml, n, &pos, "IsTruncated", flag, sizeof flag) >= 0 &&
        !strcmp(flag, "true")) {
        *truncated = true;
        pos = 0;
        const int tl = ffio_xml_next(xml, n, &pos, "NextContinuationToken", token, tcap);
        if (tl <= 0 || (size_t)tl >= tcap) return -EPROTO; /* more, but no way to ask for it */
    }
    pos = 0;
    size_t b, l;
    while (ffio_xml_span(xml, n, &pos, "Contents", &b, &l) == 0) {
        char key[1100], size[32] = "";
        size_t kp = 0, sp = 0;
        const int kl = ffio_xml_next(xml + b, l, &kp, "Key", key, sizeof key);
        const int sl = ffio_xml_next(xml + b, l, &sp, "Size", size, sizeof size);
        if (kl <= 0 || (size_t)kl >= sizeof key || sl <= 0 || (size_t)sl >= sizeof size)
            return -EPROTO;
        char *end;
        errno = 0;
        const unsigned long long v = strtoull(size, &end, 10);
        if (errno || *end || size[0] == '-') return -EPROTO;
        if (*n_objs >= max) return -EOVERFLOW;
        /* capacity 16, then doubled at each power of two: derived from the count, not kept */
        if (!*n_objs || (*n_objs >= 16 && !(*n_objs & (*n_objs - 1)))) {
            const size_t cap = *n_objs ? 2 * *n_objs : 16;
            struct ffio_s3_object *g = realloc(*objs, cap * sizeof *g);
            if (!g) return -ENOMEM;
            *objs = g;
        }
        struct ffio_s3_object *g = *objs;
        if (!(g[*n_objs].key = strdup(key))) return -ENOMEM;
        g[*n_objs].size = v;
        (*n_objs)++;
    }
    return 0;
}

#if !defined(FFIO_HAVE_CURL)

int ffio_s3_put(struct ffio_http *h, const char *url, int fd, uint64_t size)
{
    (void)h, (void)url, (void)fd, (void)size;
    return -ENOTSUP;
}
int ffio_s3_delete(struct ffio_http *h, const char *url)
{
    (void)h, (void)url;
    return -ENOTSUP;
}
int ffio_s3_list(struct ffio_http *h, const char *url_prefix, size_t max,
                 struct ffio_s3_object **out, size_t *n)
{
    (void)h, (void)url_prefix, (void)max;
    if (out) *out = NULL;
    if (n) *n = 0;
    return -ENOTSUP;
}
int ffio_s3_sink_open(const struct ffio_http_opts *opts, const char *url, struct ffio_s3_sink **out,
                      char *err, size_t err_cap)
{
    (void)opts;
    if (out) *out = NULL;
    if (err && err_cap)
        snprintf(err, err_cap, "%s: this build has no libcurl (install libcurl4-openssl-dev)",
                 url ? url : "");
    return -ENOTSUP;
}
int ffio_s3_sink_publish(void *sink, const char *tmp_path, const char *name, int last)
{
    (void)sink, (void)tmp_path, (void)name, (void)last;
    return -ENOTSUP;
}
bool ffio_s3_sink_taken(void *sink, const char *name)
{
    (void)sink, (void)name;
    return false;
}
int ffio_s3_sink_finish(struct ffio_s3_sink *s, struct ffio_s3_sink_stats *st, char *err,
                        size_t err_cap)
{
    (void)s, (void)err, (void)err_cap;
    if (st) memset(st, 0, sizeof *st);
    return -ENOTSUP;
}
void ffio_s3_sink_abort(struct ffio_s3_sink *s)
{
    (void)s;
}
const char *ffio_s3_sink_error(const struct ffio_s3_sink *s)
{
    (void)s;
    return "built without libcurl";
}

#else

/* One request and its answer. */
struct req {
    const char *method; /* GET, PUT, POST or DELETE */
    const char *url;    /* s3://BUCKET/KEY (borrowed) */
    const char *query;  /* sorted and encoded, or NULL (borrowed) */
    const uint8_t *body;
    size_t body_len;
    size_t keep;    /* answer bytes kept on success (0: none needed) */
    unsigned part;  /* multipart: the part number (1-based), for fill and messages */
    char sha[65];   /* the body's SHA-256, hex, once computed */
    size_t sent;    /* read callback position */
    long status;    /* of the current answer */
    char etag[160]; /* its ETag header, quotes included */
    char *ans;      /* its body, leading blanks skipped, up to max(keep, S3_ERR_KEEP) */
    size_t ans_n, ans_cap;
    bool ans_over; /* the body was longer than that */
    int res;       /* 0 or a negative errno */
    int state;     /* 0 waiting, 1 running, 2 done */
    unsigned tries, stuck;
    double not_before, deadline;
};

/* Supplies a request's body as its turn comes (multipart parts), and takes it back. */
struct feed {
    int (*fill)(void *ctx, struct req *r);
    void (*done)(void *ctx, struct req *r);
    void *ctx;
};

struct slot {
    CURL *easy;
    struct req *r;
    struct curl_slist *hdrs;
    char real[3200];
    char why[300];
    char errbuf[CURL_ERROR_SIZE];
};

static int sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned len = 0;
    if (EVP_Digest(p, n, md, &len, EVP_sha256(), NULL) != 1 || len != 32) return -EIO;
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
    return 0;
}

static size_t on_read(char *dst, size_t size, size_t n, void *arg)
{
    struct req *r = arg;
    size_t k = size * n, left = r->body_len - r->sent;
    if (k > left) k = left;
    if (k) memcpy(dst, r->body + r->sent, k);
    r->sent += k;
    return k;
}

static int on_seek(void *arg, curl_off_t off, int origin)
{
    struct req *r = arg;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->body_len) return CURL_SEEKFUNC_FAIL;
    r->sent = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

static size_t on_head(char *line, size_t size, size_t n, void *arg)
{
    struct req *r = arg;
    const size_t len = size * n;
    if (len > 5 && !strncmp(line, "HTTP/", 5)) { /* a new answer (100 Continue first) */
        const char *sp = memchr(line, ' ', len);
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->etag[0] = '\0';
        r->ans_n = 0;
        r->ans_over = false;
    } else if (len > 5 && !strncasecmp(line, "ETag:", 5)) {
        const char *v = line + 5;
        size_t l = len - 5;
        while (l && (*v == ' ' || *v == '\t'))
            v++, l--;
        while (l && (v[l - 1] == '\r' || v[l - 1] == '\n' || v[l - 1] == ' '))
            l--;
        if (l < sizeof r->etag) {
            memcpy(r->etag, v, l);
            r->etag[l] = '\0';
        }
    }
    return len;
}

static size_t on_answer(char *p, size_t size, size_t n, void *arg)
{
    struct req *r = arg;
    const size_t len = size * n;
    size_t skip = 0;
    /* S3 may send blanks before a slow answer's XML (CompleteMultipartUpload keeps the
     * connection alive so): they are not kept, so they cannot fill the bound. */
    while (!r->ans_n && skip < len && (p[skip] == ' ' || p[skip] == '\n' || p[skip] == '\r'))
        skip++;
    const size_t lim = r->keep > S3_ERR_KEEP ? r->keep : S3_ERR_KEEP;
    size_t k = len - skip;
    if (k > lim - r->ans_n) {
        k = lim - r->ans_n;
        r->ans_over = true;
    }
    if (r->ans_n + k > r->ans_cap) {
        size_t c = r->ans_cap ? r->ans_cap : 4096;
        while (c < r->ans_n + k)
            c *= 2;
        if (c > lim) c = lim;
        char *a = realloc(r->ans, c);
        if (!a) return 0; /* aborts the transfer: seen as a failed write */
        r->ans = a;
        r->ans_cap = c;
    }
    if (k) memcpy(r->ans + r->ans_n, p + skip, k);
    r->ans_n += k;
    return len;
}

/* Whether an answer's body is S3's <Error> (its root element). */
static bool is_error_body(const struct req *r)
{
    size_t i = 0;
    while (i < r->ans_n) {
        const char *lt = memchr(r->ans + i, '<', r->ans_n - i);
        if (!lt) return false;
        i = (size_t)(lt - r->ans) + 1;
        if (i < r->ans_n && (r->ans[i] == '?' || r->ans[i] == '!')) continue; /* <?xml, <!-- */
        return r->ans_n - i >= 6 && !memcmp(r->ans + i, "Error>", 6);
    }
    return false;
}

static int start(struct ffio_http *h, struct slot *s, struct req *r)
{
    s->why[0] = s->errbuf[0] = '\0';
    if (!s->easy && !(s->easy = curl_easy_init())) return -ENOMEM;
    CURL *e = s->easy;
    curl_easy_reset(e);
    curl_slist_free_all(s->hdrs);
    s->hdrs = NULL;
    ffio_http_easy_common(h, e);
    const bool upload = !strcmp(r->method, "PUT") || !strcmp(r->method, "POST");
    if (upload && !r->sha[0] &&
        sha256_hex(r->body ? (const void *)r->body : "", r->body_len, r->sha) < 0) {
        snprintf(s->why, sizeof s->why, "hashing the body (OpenSSL)");
        return -EIO;
    }
    int rc = ffio_http_s3_prepare(h, e, r->url, r->query, upload ? r->sha : NULL, &s->hdrs, s->real,
                                  sizeof s->real, s->why, sizeof s->why);
    if (rc < 0) return rc;
    if (upload) {
        /* A type S3 stores as the object's. No "Expect:" to turn 100-continue off: curl 7.88
         * signs the empty header it then does not send, and S3 (rightly) refuses the request;
         * a server that answers 100 lets a refused upload stop before its body. */
        struct curl_slist *l = curl_slist_append(
            s->hdrs, !strcmp(r->method, "PUT") ? "Content-Type: application/octet-stream"
                                               : "Content-Type: application/xml");
        if (!l) return -ENOMEM;
        s->hdrs = l;
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->hdrs);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, r);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, r);
        if (!strcmp(r->method, "PUT")) {
            curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
        } else {
            curl_easy_setopt(e, CURLOPT_POST, 1L);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
        }
    } else if (!strcmp(r->method, "DELETE")) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_head);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_answer);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->errbuf);
    if (r->tries == 0)
        r->deadline = ffio_mono_s() + (double)h->o.read_deadline_s +
                      (double)(r->body_len / (64u << 10)) + (double)(r->keep / (64u << 10));
    const double left = r->deadline - ffio_mono_s();
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left > 0.001 ? (long)(left * 1000) : 1L);
    r->sent = 0;
    r->status = 0;
    r->etag[0] = '\0';
    r->ans_n = 0;
    r->ans_over = false;
    if (curl_multi_add_handle(h->multi, e) != CURLM_OK) return -ENOMEM;
    s->r = r;
    r->state = 1;
    r->tries++;
    h->st.requests++;
    return 0;
}

/* Names a request in messages: its method, URL and part. */
static void describe(const struct req *r, char *out, size_t cap)
{
    if (r->part)
        snprintf(out, cap, "%s %.900s part %u", r->method, r->url, r->part);
    else
        snprintf(out, cap, "%s %.900s%s%.200s", r->method, r->url, r->query ? "?" : "",
                 r->query ? r->query : "");
}

static void fail(struct ffio_http *h, struct req *r, int err, const char *cause)
{
    r->res = err;
    r->state = 2;
    if (!h->last_error[0]) {
        char what[1200];
        describe(r, what, sizeof what);
        snprintf(h->last_error, sizeof h->last_error, "%s: %.700s, after %u attempt%s", what, cause,
                 r->tries, r->tries == 1 ? "" : "s");
    }
}

/* A request's answer came: accept it, schedule a retry, or fail it. */
static void finish(struct ffio_http *h, struct slot *s, CURLcode rc)
{
    struct req *r = s->r;
    curl_multi_remove_handle(h->multi, s->easy);
    s->r = NULL;
    const bool err_body = is_error_body(r);
    if (rc == CURLE_OK && r->status >= 200 && r->status < 300 && !err_body &&
        !(r->ans_over && r->keep)) {
        r->res = 0;
        r->state = 2;
        h->st.bytes_sent += r->body_len;
        return;
    }
    char cause[1400];
    int err;
    bool again;
    if (rc != CURLE_OK) {
        err = rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
              : rc == CURLE_COULDNT_CONNECT  ? -ECONNREFUSED
                                             : -EIO;
        again = ffio_http_transient(rc);
        snprintf(cause, sizeof cause, "%s%s%s (%zu of %zu bytes sent)", curl_easy_strerror(rc),
                 s->errbuf[0] ? ": " : "", s->errbuf, r->sent, r->body_len);
    } else if (r->status >= 200 && r->status < 300 && !err_body) {
        err = -E2BIG;
        again = false;
        snprintf(cause, sizeof cause, "an answer larger than %zu bytes", r->keep);
    } else {
        /* an error status, or a 2xx carrying an <Error>: S3's code and the status decide
         * (every URL here is s3://, so ffio_http_s3_cause sets both) */
        err = -EIO;
        again = false;
        snprintf(cause, sizeof cause, "HTTP status %ld", r->status);
        ffio_http_s3_cause(h, r->url, r->status, r->ans, r->ans_n, &err, &again, cause,
                           sizeof cause);
    }
    r->stuck++;
    const bool late = ffio_mono_s() >= r->deadline;
    if (late) {
        err = -ETIMEDOUT;
        snprintf(cause + strlen(cause), sizeof cause - strlen(cause),
                 "; the request's deadline passed (%u s + 1 s per 64 KiB)", h->o.read_deadline_s);
    }
    if (again && !late && r->stuck <= h->o.retries) {
        const unsigned ms = ffio_http_backoff_ms(h, r->stuck);
        r->not_before = ffio_mono_s() + ms / 1000.0;
        r->state = 0;
        h->st.retries++;
        if (h->o.log) {
            char what[1200], line[2800];
            describe(r, what, sizeof what);
            snprintf(line, sizeof line, "ffio s3: %s: %.1400s; retry %u of %u in %u ms", what,
                     cause, r->tries, h->o.retries, ms);
            h->o.log(h->o.log_ctx, FFIO_LOG_WARN, line);
        }
        return;
    }
    fail(h, r, err, cause);
}

/*
 * Runs n requests, up to max_in_flight at once, retrying each as finish decides. feed (may be
 * NULL) fills a request's body just before its first attempt and takes it back once it is done.
 * After the first request that fails for good, those not yet started fail with -ECANCELED.
 * Returns the number of failed requests (h->last_error names the first), or -ENOMEM.
 */
static int run(struct ffio_http *h, struct req *reqs, size_t n, const struct feed *feed)
{
    h->last_error[0] = '\0';
    const unsigned m = h->o.max_in_flight;
    struct slot *sl = calloc(m, sizeof *sl);
    if (!sl) return -ENOMEM;
    size_t done = 0;
    bool failed = false;
    for (size_t i = 0; i < n; i++) {
        reqs[i].state = 0;
        reqs[i].res = 0;
        reqs[i].tries = reqs[i].stuck = 0;
        reqs[i].not_before = 0;
    }
    while (done < n) {
        const double now = ffio_mono_s();
        double wake = now + 0.1;
        unsigned running = 0;
        for (unsigned k = 0; k < m; k++)
            running += sl[k].r != NULL;
        for (size_t i = 0; i < n && running < m; i++) {
            struct req *r = &reqs[i];
            if (r->state != 0) continue;
            if (failed && r->tries == 0) {
                r->res = -ECANCELED;
                r->state = 2;
                done++;
                continue;
            }
            if (r->not_before > now) {
                if (r->not_before < wake) wake = r->not_before;
                continue;
            }
            unsigned k = 0;
            while (sl[k].r)
                k++;
            int rc = 0;
            sl[k].why[0] = '\0';
            if (r->tries == 0 && feed && feed->fill && (rc = feed->fill(feed->ctx, r)) < 0)
                snprintf(sl[k].why, sizeof sl[k].why, "reading the file to upload: %s",
                         strerror(-rc));
            if (rc == 0) rc = start(h, &sl[k], r);
            if (rc < 0) {
                fail(h, r, rc, sl[k].why[0] ? sl[k].why : strerror(-rc));
                if (feed && feed->done) feed->done(feed->ctx, r);
                failed = true;
                done++;
                continue;
            }
            running++;
        }
        if (!running) {
            if (done >= n) break;
            ffio_sleep_until(wake);
            continue;
        }
        int still = 0;
        curl_multi_perform(h->multi, &still);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(h->multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            for (unsigned k = 0; k < m; k++)
                if (sl[k].r && sl[k].easy == msg->easy_handle) {
                    struct req *r = sl[k].r;
                    finish(h, &sl[k], msg->data.result);
                    if (r->state == 2) {
                        done++;
                        failed |= r->res < 0;
                        if (feed && feed->done) feed->done(feed->ctx, r);
                    }
                    break;
                }
        }
        if (still) ffio_http_poll(h, wake);
    }
    for (unsigned k = 0; k < m; k++) {
        if (sl[k].r) curl_multi_remove_handle(h->multi, sl[k].easy);
        if (sl[k].easy) curl_easy_cleanup(sl[k].easy);
        curl_slist_free_all(sl[k].hdrs);
    }
    free(sl);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += reqs[i].res < 0;
    return (int)bad;
}

/* One request, run alone; returns its result (answer in r->ans). */
static int run1(struct ffio_http *h, struct req *r)
{
    const int rc = run(h, r, 1, NULL);
    return rc < 0 ? rc : r->res;
}

static int pread_all(int fd, void *dst, size_t n, uint64_t off)
{
    for (size_t done = 0; done < n;) {
        const ssize_t k = pread(fd, (char *)dst + done, n - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? -errno : -ENODATA;
        done += (size_t)k;
    }
    return 0;
}

/* A multipart upload in progress: the file, its parts' size, and the buffers in use. */
struct upload {
    int fd;
    uint64_t size, part;
    uint8_t **buf; /* max_in_flight buffers of `part` bytes */
    bool *busy;
    unsigned nbuf;
};

static int part_fill(void *ctx, struct req *r)
{
    struct upload *u = ctx;
    unsigned b = 0;
    while (b < u->nbuf && u->busy[b])
        b++;
    if (b == u->nbuf) return -EAGAIN; /* not reached: one buffer per slot */
    const uint64_t off = (uint64_t)(r->part - 1) * u->part;
    const size_t len = (size_t)(u->size - off < u->part ? u->size - off : u->part);
    const int rc = pread_all(u->fd, u->buf[b], len, off);
    if (rc < 0) return rc;
    u->busy[b] = true;
    r->body = u->buf[b];
    r->body_len = len;
    r->sha[0] = '\0';
    return 0;
}

static void part_done(void *ctx, struct req *r)
{
    struct upload *u = ctx;
    for (unsigned b = 0; b < u->nbuf; b++)
        if (r->body == u->buf[b]) u->busy[b] = false;
    r->body = NULL;
}

static int put_single(struct ffio_http *h, const char *url, int fd, uint64_t size)
{
    uint8_t *buf = malloc(size ? (size_t)size : 1);
    if (!buf) return -ENOMEM;
    int rc = pread_all(fd, buf, (size_t)size, 0);
    if (rc < 0) {
        free(buf);
        snprintf(h->last_error, sizeof h->last_error, "%.900s: reading the file to upload: %s", url,
                 strerror(-rc));
        return rc;
    }
    struct req r = { .method = "PUT", .url = url, .body = buf, .body_len = (size_t)size };
    rc = run1(h, &r);
    free(buf);
    free(r.ans);
    return rc;
}

/* CompleteMultipartUpload's body: every part's number and ETag, in order. */
static char *complete_body(const struct req *parts, unsigned n, size_t *len)
{
    size_t cap = 64 + (size_t)n * (sizeof parts->etag + 64), at = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    at += (size_t)snprintf(b, cap, "<CompleteMultipartUpload>");
    for (unsigned i = 0; i < n; i++)
        at += (size_t)snprintf(b + at, cap - at,
                               "<Part><ETag>%s</ETag><PartNumber>%u</PartNumber></Part>",
                               parts[i].etag, parts[i].part);
    at += (size_t)snprintf(b + at, cap - at, "</CompleteMultipartUpload>");
    *len = at;
    return b;
}

static int put_multipart(struct ffio_http *h, const char *url, int fd, uint64_t size)
{
    uint64_t part = h->o.put_part;
    if ((size + part - 1) / part > S3_MAX_PARTS) /* whole MiB, so that 10,000 parts hold it */
        part = ((size + S3_MAX_PARTS - 1) / S3_MAX_PARTS + (1u << 20) - 1) & ~(uint64_t)0xfffff;
    else if (size / part < h->o.max_in_flight) /* smaller parts, down to S3's minimum, so that
                                                  a file of a few parts still fills the slots */
        part = ((size + h->o.max_in_flight - 1) / h->o.max_in_flight + (1u << 20) - 1) &
               ~(uint64_t)0xfffff;
    if (part < S3_MIN_PART) part = S3_MIN_PART;
    const unsigned n = (unsigned)((size + part - 1) / part);
    char upload_id[1100], qid[3400];
    struct req cr = { .method = "POST", .url = url, .query = "uploads=", .keep = 64u << 10 };
    int rc = run1(h, &cr);
    if (rc == 0) {
        size_t pos = 0;
        const int l =
            ffio_xml_next(cr.ans, cr.ans_n, &pos, "UploadId", upload_id, sizeof upload_id);
        if (l <= 0 || (size_t)l >= sizeof upload_id ||
            ffio_s3_encode(upload_id, (size_t)l, false, qid, sizeof qid) < 0) {
            rc = -EPROTO;
            snprintf(h->last_error, sizeof h->last_error,
                     "POST %.900s?uploads=: the answer has no usable <UploadId>", url);
        }
    }
    free(cr.ans);
    if (rc < 0) return rc;

    struct upload u = { .fd = fd, .size = size, .part = part };
    u.nbuf = h->o.max_in_flight < n ? h->o.max_in_flight : n;
    struct req *parts = calloc(n, sizeof *parts);
    const size_t qlen = strlen(qid) + 32;
    char *queries = malloc((size_t)n * qlen);
    u.buf = calloc(u.nbuf, sizeof *u.buf);
    u.busy = calloc(u.nbuf, sizeof *u.busy);
    rc = parts && queries && u.buf && u.busy ? 0 : -ENOMEM;
    for (unsigned b = 0; rc == 0 && b < u.nbuf; b++)
        if (!(u.buf[b] = malloc((size_t)part))) rc = -ENOMEM;
    if (rc == 0) {
        for (unsigned i = 0; i < n; i++) {
            char *q = queries + (size_t)i * qlen;
            snprintf(q, qlen, "partNumber=%u&uploadId=%s", i + 1, qid);
            parts[i] = (struct req){ .method = "PUT", .url = url, .query = q, .part = i + 1 };
        }
        const struct feed f = { part_fill, part_done, &u };
        const int bad = run(h, parts, n, &f);
        if (bad < 0) rc = bad;
        for (unsigned i = 0; rc == 0 && i < n; i++)
            if (parts[i].res < 0) rc = parts[i].res;
        for (unsigned i = 0; rc == 0 && i < n; i++)
            if (!parts[i].etag[0]) {
                rc = -EPROTO;
                snprintf(h->last_error, sizeof h->last_error,
                         "PUT %.900s part %u: the answer has no ETag", url, i + 1);
            }
    }
    if (rc == 0) {
        size_t blen;
        char *body = complete_body(parts, n, &blen);
        char q[sizeof qid + 16];
        snprintf(q, sizeof q, "uploadId=%s", qid);
        struct req done = { .method = "POST",
                            .url = url,
                            .query = q,
                            .body = (const uint8_t *)body,
                            .body_len = blen,
                            .keep = 64u << 10 };
        rc = body ? run1(h, &done) : -ENOMEM;
        size_t pos = 0, b, l;
        /* The result's root is CompleteMultipartUploadResult at AWS (...Response at moto): the
         * object's <ETag> is what both carry. A cut answer has none. */
        if (rc == 0 && ffio_xml_span(done.ans, done.ans_n, &pos, "ETag", &b, &l) < 0) {
            rc = -EPROTO;
            snprintf(h->last_error, sizeof h->last_error,
                     "POST %.900s?uploadId=...: CompleteMultipartUpload answered %ld without the "
                     "object's <ETag> (%zu bytes)",
                     url, done.status, done.ans_n);
        }
        if (rc == -ENOENT) {
            /* NoSuchUpload after a retry: an earlier attempt completed it and its answer was
             * lost. The object at its full size says so. */
            uint64_t have = 0;
            char keep[sizeof h->last_error];
            ffio_str_copy(keep, sizeof keep, h->last_error);
            if (ffio_http_size(h, url, &have) == 0 && have == size && done.tries > 1)
                rc = 0;
            else
                ffio_str_copy(h->last_error, sizeof h->last_error, keep);
        }
        free(done.ans);
        free(body);
    }
    for (unsigned i = 0; parts && i < n; i++)
        free(parts[i].ans);
    for (unsigned b = 0; u.buf && b < u.nbuf; b++)
        free(u.buf[b]);
    free(u.buf);
    free(u.busy);
    free(queries);
    free(parts);
    if (rc < 0) {
        /* No parts left behind to be billed: abort, keeping the first error's message. */
        char keep[sizeof h->last_error], q[sizeof qid + 16];
        ffio_str_copy(keep, sizeof keep, h->last_error);
        snprintf(q, sizeof q, "uploadId=%s", qid);
        struct req ab = { .method = "DELETE", .url = url, .query = q };
        (void)run1(h, &ab);
        free(ab.ans);
        ffio_str_copy(h->last_error, sizeof h->last_error, keep);
    }
    return rc;
}

int ffio_s3_put(struct ffio_http *h, const char *url, int fd, uint64_t size)
{
    if (!h || !ffio_s3_is_url(url) || fd < 0) return -EINVAL;
    if (size > SIZE_MAX / 2) return -EFBIG;
    return size <= h->o.put_threshold ? put_single(h, url, fd, size)
                                      : put_multipart(h, url, fd, size);
}

int ffio_s3_delete(struct ffio_http *h, const char *url)
{
    if (!h || !ffio_s3_is_url(url)) return -EINVAL;
    struct req r = { .method = "DELETE", .url = url };
    int rc = run1(h, &r);
    free(r.ans);
    if (rc == -ENOENT) { /* some stores say 404 for an absent key: it is gone either way */
        h->last_error[0] = '\0';
        rc = 0;
    }
    return rc;
}

int ffio_s3_list(struct ffio_http *h, const char *url_prefix, size_t max,
                 struct ffio_s3_object **out, size_t *n)
{
    if (!h || !out || !n || !ffio_s3_is_url(url_prefix)) return -EINVAL;
    *out = NULL;
    *n = 0;
    const char *bk = url_prefix + 5, *slash = strchr(bk, '/');
    const char *prefix = slash ? slash + 1 : "";
    char bucket_url[300], pfx[3200], token[1100] = "", tok[3400], query[7000];
    const int bl = slash ? (int)(slash - bk) : (int)strlen(bk);
    if (bl >= 256 || ffio_s3_encode(prefix, strlen(prefix), false, pfx, sizeof pfx) < 0)
        return -ENAMETOOLONG;
    snprintf(bucket_url, sizeof bucket_url, "s3://%.*s/", bl, bk);
    const unsigned page = h->o.list_page; /* 1..1000: ffio_http_create saw to it */
    int rc = 0;
    for (unsigned pages = 0;; pages++) {
        tok[0] = '\0';
        if (token[0] && ffio_s3_encode(token, strlen(token), false, tok, sizeof tok) < 0) {
            rc = -ENAMETOOLONG;
            break;
        }
        /* names in order: SigV4 signs the query sorted, and curl 7.88 does not sort it */
        snprintf(query, sizeof query, "%s%s%slist-type=2&max-keys=%u&prefix=%s",
                 token[0] ? "continuation-token=" : "", tok, token[0] ? "&" : "", page, pfx);
        struct req r = {
            .method = "GET", .url = bucket_url, .query = query, .keep = S3_ANSWER_MAX
        };
        rc = run1(h, &r);
        bool more = false;
        if (rc == 0) {
            rc = ffio_s3_list_parse(r.ans, r.ans_n, out, n, max, token, sizeof token, &more);
            if (rc == -EPROTO)
                snprintf(h->last_error, sizeof h->last_error,
                         "%.900s: a ListObjectsV2 answer that is not one (page %u)", url_prefix,
                         pages + 1);
            else if (rc == -EOVERFLOW)
                snprintf(h->last_error, sizeof h->last_error,
                         "%.900s: more than %zu objects under this prefix", url_prefix, max);
        }
        free(r.ans);
        if (rc < 0 || !more) break;
    }
    if (rc < 0) {
        ffio_s3_objects_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- the dataset upload sink ---- */

struct item {
    int fd;
    uint64_t size;
    char *name;
};

/* An object the sink uploads (or started to). */
struct sent {
    char *name; /* beside the manifest */
    uint64_t size;
    bool shard; /* not the manifest (or single file) */
    bool done;  /* uploaded */
};

struct ffio_s3_sink {
    struct ffio_http *h; /* used by the thread while it uploads, else by the caller */
    char *url;           /* s3://BUCKET/DIR/NAME.ffr */
    size_t dir_len;      /* url's bytes up to and including the last '/' */
    const char *key_dir; /* in url: DIR/, the keys' part before a name beside it */
    size_t key_dir_len;
    struct ffio_s3_object *have; /* under DIR/STEM at open */
    size_t n_have;
    struct ffr_cache_shard *old; /* the replaced manifest's shards */
    uint32_t n_old;
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct item q[S3_SINK_QUEUE];
    unsigned q_head, q_n;
    bool busy, stop, committed;
    int err;
    char errmsg[2048];
    struct sent *sent; /* every upload started, in order: an abort deletes all the shards,
                          done or not, since a failed one may still have completed (a lost
                          CompleteMultipartUpload answer), and no dataset used these names
                          before (taken) */
    size_t n_sent;
    struct ffio_s3_sink_stats st;
};

/* The name of key (a listed object) when it lies directly beside the manifest, else NULL. */
static const char *name_in_dir(const struct ffio_s3_sink *s, const char *key)
{
    if (strncmp(key, s->key_dir, s->key_dir_len) != 0) return NULL;
    return strchr(key + s->key_dir_len, '/') ? NULL : key + s->key_dir_len;
}

/* s3://BUCKET/DIR/name, malloc'ed. */
static char *object_url(const struct ffio_s3_sink *s, const char *name)
{
    const size_t l = s->dir_len + strlen(name) + 1;
    char *u = malloc(l);
    if (u) snprintf(u, l, "%.*s%s", (int)s->dir_len, s->url, name);
    return u;
}

static int upload(struct ffio_s3_sink *s, int fd, uint64_t size, const char *name, bool shard)
{
    char *u = object_url(s, name), *nm = strdup(name);
    pthread_mutex_lock(&s->mu);
    struct sent *g = u && nm ? realloc(s->sent, (s->n_sent + 1) * sizeof *g) : NULL;
    if (g) {
        s->sent = g;
        g[s->n_sent] = (struct sent){ .name = nm, .size = size, .shard = shard };
    }
    const size_t k = s->n_sent;
    s->n_sent += g != NULL;
    pthread_mutex_unlock(&s->mu);
    if (!g) {
        free(u);
        free(nm);
        return -ENOMEM;
    }
    const double t0 = ffio_mono_s();
    const int rc = ffio_s3_put(s->h, u, fd, size);
    const double dt = ffio_mono_s() - t0;
    pthread_mutex_lock(&s->mu);
    s->st.upload_s += dt;
    if (rc < 0 && !s->err) {
        s->err = rc;
        ffio_str_copy(s->errmsg, sizeof s->errmsg, ffio_http_last_error(s->h));
    }
    if (rc == 0) {
        s->sent[k].done = true;
        s->st.files++;
        s->st.bytes += size;
    }
    pthread_mutex_unlock(&s->mu);
    free(u);
    return rc;
}

static void *sink_main(void *arg)
{
    struct ffio_s3_sink *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->q_n && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->q_n && s->stop) break;
        struct item it = s->q[s->q_head];
        s->q_head = (s->q_head + 1) % S3_SINK_QUEUE;
        s->q_n--;
        const bool skip = s->err || s->stop; /* after a failure nothing more goes up */
        s->busy = !skip;
        pthread_mutex_unlock(&s->mu);
        if (!skip) upload(s, it.fd, it.size, it.name, true);
        close(it.fd);
        free(it.name);
        pthread_mutex_lock(&s->mu);
        s->busy = false;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int ffio_s3_sink_open(const struct ffio_http_opts *opts, const char *url, struct ffio_s3_sink **out,
                      char *err, size_t err_cap)
{
    if (!out || !url || !err || !err_cap) return -EINVAL;
    *out = NULL;
    err[0] = '\0';
    const char *bk = ffio_s3_is_url(url) ? url + 5 : NULL;
    const char *slash = bk ? strchr(bk, '/') : NULL;
    const char *last = slash ? strrchr(url, '/') : NULL;
    if (!slash || !last[1] || strlen(url) > 1000) {
        snprintf(err, err_cap, "%.900s: not s3://BUCKET/[PREFIX/]NAME.ffr", url);
        return -EINVAL;
    }
    struct ffio_s3_sink *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->url = strdup(url);
    s->dir_len = (size_t)(last - url) + 1;
    if (s->url) {
        s->key_dir = s->url + (slash + 1 - url);
        s->key_dir_len = (size_t)(last - slash);
    }
    int rc = s->url ? ffio_http_create(opts, &s->h) : -ENOMEM;
    if (rc < 0) snprintf(err, err_cap, "%.900s: the HTTP client: %s", url, strerror(-rc));
    char *stem = NULL;
    if (rc == 0 && !(stem = strdup(url))) rc = -ENOMEM;
    if (rc == 0) {
        const size_t l = strlen(stem);
        if (l > 4 && !strcmp(stem + l - 4, ".ffr")) stem[l - 4] = '\0';
        /* what is there already: shard names to avoid, and the manifest being replaced */
        rc = ffio_s3_list(s->h, stem, S3_SINK_MAX_OBJ, &s->have, &s->n_have);
        if (rc < 0)
            snprintf(err, err_cap, "listing the destination: %.1500s", ffio_http_last_error(s->h));
    }
    free(stem);
    const char *key = slash + 1;
    for (size_t i = 0; rc == 0 && i < s->n_have; i++) {
        if (strcmp(s->have[i].key, key) != 0) continue;
        if (s->have[i].size > (64u << 20)) break; /* not a manifest (ffr's bound): a record file */
        uint8_t *text = malloc(s->have[i].size ? (size_t)s->have[i].size : 1);
        struct ffio_http_extent x = {
            .url = url, .dst = text, .offset = 0, .length = s->have[i].size
        };
        if (!text) {
            rc = -ENOMEM;
        } else if (ffio_http_read(s->h, &x, 1) != 0) {
            rc = x.res < 0 ? (int)x.res : -EIO;
            snprintf(err, err_cap, "reading the dataset being replaced: %.1500s",
                     ffio_http_last_error(s->h));
        } else if (ffr_manifest_sniff_text(text, (size_t)x.length)) {
            char why[300];
            if (ffr_manifest_shards(text, (size_t)x.length, &s->old, &s->n_old, why, sizeof why) <
                0) {
                /* a damaged manifest names nothing to delete; the upload replaces it */
                s->old = NULL;
                s->n_old = 0;
            }
        }
        free(text);
        break;
    }
    /* objects named like this dataset's shards (NAME-N.ffr, NAME.TAG-N.ffr) that its manifest
     * does not list: what an interrupted upload left */
    const char *name = url + s->dir_len;
    const size_t nl = strlen(name) > 4 && !strcmp(name + strlen(name) - 4, ".ffr")
                          ? strlen(name) - 4
                          : strlen(name);
    for (size_t i = 0; rc == 0 && i < s->n_have; i++) {
        const char *base = name_in_dir(s, s->have[i].key);
        const size_t l = base ? strlen(base) : 0;
        const bool shard_like = l > nl + 4 && !strncmp(base, name, nl) &&
                                (base[nl] == '-' || base[nl] == '.') &&
                                !strcmp(base + l - 4, ".ffr") && strchr(base + nl, '-');
        bool named = !shard_like;
        for (uint32_t j = 0; !named && j < s->n_old; j++)
            named = !strcmp(base, s->old[j].file);
        s->st.unnamed += !named;
    }
    if (rc == 0) {
        if (pthread_create(&s->th, NULL, sink_main, s) != 0)
            rc = -EAGAIN;
        else
            s->th_started = true;
    }
    if (rc < 0) {
        if (!err[0]) snprintf(err, err_cap, "%.900s: %s", url, strerror(-rc));
        ffio_s3_sink_abort(s);
        return rc;
    }
    *out = s;
    return 0;
}

bool ffio_s3_sink_taken(void *sink, const char *name)
{
    const struct ffio_s3_sink *s = sink;
    for (size_t i = 0; i < s->n_have; i++) {
        const char *b = name_in_dir(s, s->have[i].key);
        if (b && !strcmp(b, name)) return true;
    }
    return false;
}

/* Waits until the thread has uploaded everything queued; returns the first error. */
static int drain(struct ffio_s3_sink *s)
{
    const double t0 = ffio_mono_s();
    pthread_mutex_lock(&s->mu);
    while ((s->q_n || s->busy) && !s->err)
        pthread_cond_wait(&s->cv, &s->mu);
    const int rc = s->err;
    s->st.wait_s += ffio_mono_s() - t0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Before the commit: every shard listed at the size uploaded (a store that lost one, or kept a
 * short object, is caught before a manifest names it). */
static int check_listed(struct ffio_s3_sink *s)
{
    if (!s->n_sent) return 0; /* drained without error: every one is a shard, done */
    /* under the names' common prefix (DIR/NAME.TAG-): not every object beside them */
    const char *first = s->sent[0].name;
    size_t lcp = strlen(first);
    for (size_t k = 1; k < s->n_sent; k++)
        for (size_t i = 0; i < lcp; i++)
            if (s->sent[k].name[i] != first[i]) {
                lcp = i;
                break;
            }
    char *pfx = object_url(s, first);
    if (pfx) pfx[s->dir_len + lcp] = '\0';
    struct ffio_s3_object *o = NULL;
    size_t n = 0;
    int rc = pfx ? ffio_s3_list(s->h, pfx, S3_SINK_MAX_OBJ, &o, &n) : -ENOMEM;
    free(pfx);
    if (rc < 0) {
        snprintf(s->errmsg, sizeof s->errmsg, "listing the uploaded shards: %.1900s",
                 ffio_http_last_error(s->h));
        return rc;
    }
    for (size_t k = 0; rc == 0 && k < s->n_sent; k++) {
        const struct sent *e = &s->sent[k];
        bool seen = false;
        for (size_t i = 0; !seen && i < n; i++) {
            const char *b = name_in_dir(s, o[i].key);
            seen = b && !strcmp(b, e->name) && o[i].size == e->size;
        }
        if (!seen) {
            rc = -EIO;
            snprintf(s->errmsg, sizeof s->errmsg,
                     "%.*s%s: uploaded (%" PRIu64 " bytes), but the listing does not show it at "
                     "that size; the manifest is not uploaded",
                     (int)s->dir_len, s->url, e->name, e->size);
        }
    }
    ffio_s3_objects_free(o, n);
    return rc;
}

int ffio_s3_sink_publish(void *sink, const char *tmp_path, const char *name, int last)
{
    struct ffio_s3_sink *s = sink;
    if (!s || !tmp_path || !name || strchr(name, '/')) return -EINVAL;
    const int fd = ffr_open_regular(tmp_path, 0);
    struct stat st;
    if (fd < 0) return fd;
    if (fstat(fd, &st) < 0) {
        const int e = -errno;
        close(fd);
        return e;
    }
    if (!last) {
        char *nm = strdup(name);
        const double t0 = ffio_mono_s();
        pthread_mutex_lock(&s->mu);
        while (s->q_n == S3_SINK_QUEUE && !s->err)
            pthread_cond_wait(&s->cv, &s->mu);
        s->st.wait_s += ffio_mono_s() - t0;
        int rc = s->err ? s->err : nm ? 0 : -ENOMEM;
        if (rc == 0) {
            s->q[(s->q_head + s->q_n) % S3_SINK_QUEUE] =
                (struct item){ .fd = fd, .size = (uint64_t)st.st_size, .name = nm };
            s->q_n++;
            pthread_cond_broadcast(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        if (rc < 0) {
            free(nm);
            close(fd);
        }
        return rc;
    }
    int rc = drain(s);
    if (rc == 0) rc = check_listed(s);
    if (rc < 0 && !s->err) {
        pthread_mutex_lock(&s->mu);
        s->err = rc;
        pthread_mutex_unlock(&s->mu);
    }
    const double t0 = ffio_mono_s();
    if (rc == 0 && (rc = upload(s, fd, (uint64_t)st.st_size, name, false)) == 0)
        s->committed = true;
    pthread_mutex_lock(&s->mu);
    s->st.wait_s += ffio_mono_s() - t0;
    pthread_mutex_unlock(&s->mu);
    close(fd);
    return rc;
}

const char *ffio_s3_sink_error(const struct ffio_s3_sink *s)
{
    return s ? s->errmsg : "";
}

/* Stops the thread after its current upload; what is still queued is dropped. */
static void stop_thread(struct ffio_s3_sink *s)
{
    if (!s->th_started) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->th_started = false;
}

/* Stops the thread and frees everything. */
static void sink_free(struct ffio_s3_sink *s)
{
    stop_thread(s);
    for (unsigned k = 0; k < s->q_n; k++) {
        close(s->q[(s->q_head + k) % S3_SINK_QUEUE].fd);
        free(s->q[(s->q_head + k) % S3_SINK_QUEUE].name);
    }
    for (size_t k = 0; k < s->n_sent; k++)
        free(s->sent[k].name);
    free(s->sent);
    ffio_s3_objects_free(s->have, s->n_have);
    if (s->old) ffr_manifest_shards_free(s->old, s->n_old);
    ffio_http_destroy(s->h);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->url);
    free(s);
}

int ffio_s3_sink_finish(struct ffio_s3_sink *s, struct ffio_s3_sink_stats *st, char *err,
                        size_t err_cap)
{
    if (!s) return -EINVAL;
    if (err && err_cap) err[0] = '\0';
    int first = 0;
    for (uint32_t i = 0; s->committed && i < s->n_old; i++) {
        const char *f = s->old[i].file;
        /* only names beside the manifest are ours to delete, never the manifest itself nor a
         * name the new dataset took */
        bool keep = strchr(f, '/') != NULL || !strcmp(f, s->url + s->dir_len);
        for (size_t k = 0; !keep && k < s->n_sent; k++)
            keep = s->sent[k].done && !strcmp(s->sent[k].name, f);
        if (keep) continue;
        char *u = object_url(s, f);
        const int rc = u ? ffio_s3_delete(s->h, u) : -ENOMEM;
        free(u);
        if (rc == 0) {
            s->st.deleted++;
        } else {
            s->st.not_deleted++;
            if (!first) {
                first = rc;
                if (err && err_cap)
                    snprintf(err, err_cap, "deleting the replaced dataset's shard %.200s: %.1500s",
                             f, ffio_http_last_error(s->h));
            }
        }
    }
    if (st) *st = s->st;
    sink_free(s);
    return first;
}

void ffio_s3_sink_abort(struct ffio_s3_sink *s)
{
    if (!s) return;
    stop_thread(s);
    /* Uncommitted shards are named by no manifest: they go. A committed dataset stays. */
    for (size_t k = 0; !s->committed && k < s->n_sent; k++) {
        if (!s->sent[k].shard) continue;
        char *u = object_url(s, s->sent[k].name);
        if (u) (void)ffio_s3_delete(s->h, u);
        free(u);
    }
    sink_free(s);
}

#endif
