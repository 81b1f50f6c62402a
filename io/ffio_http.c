/*
 * Extents and ffr records over HTTP(S) range requests (ffio.h, "share" block).
 *
 * One curl multi handle per client runs up to max_in_flight transfers; each transfer is one
 * range of one job (an extent, or a chunk of a whole-file fetch written straight into an fd).
 * A job is complete only when every one of its bytes arrived inside 206 answers whose
 * Content-Range named exactly the bytes asked for; a transfer that breaks off is retried from
 * the first missing byte after a doubling backoff, so a dropped connection costs the bytes
 * still missing, never a wrong or short range.
 */
#include "ffio_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(FFIO_HAVE_CURL)
#include <curl/curl.h>
#include <pthread.h>
#endif

#define HTTP_MAX_IN_FLIGHT  256u
#define HTTP_BACKOFF_MAX_MS 5000u

bool ffio_http_is_url(const char *p)
{
    return p && (!strncmp(p, "http://", 7) || !strncmp(p, "https://", 8) || ffio_s3_is_url(p));
}

void ffio_http_opts_default(struct ffio_http_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_in_flight = 8;
    o->retries = 6;
    o->backoff_ms = 50;
    o->connect_timeout_ms = 10000;
    o->stall_timeout_s = 30;
    o->fetch_chunk = 8u << 20;
    o->read_deadline_s = 60;
    o->max_index_bytes = (uint64_t)1 << 30;
    o->tls_verify = true;
    o->put_threshold = 8u << 20;
    o->put_part = 8u << 20;
    o->list_page = 1000;
}

#if !defined(FFIO_HAVE_CURL)

/* Built without libcurl: every entry point says so. */
bool ffio_http_available(void)
{
    return false;
}
int ffio_http_create(const struct ffio_http_opts *opts, struct ffio_http **out)
{
    (void)opts;
    if (out) *out = NULL;
    return -ENOTSUP;
}
void ffio_http_destroy(struct ffio_http *h)
{
    (void)h;
}
int ffio_http_size(struct ffio_http *h, const char *url, uint64_t *size)
{
    (void)h, (void)url, (void)size;
    return -ENOTSUP;
}
int ffio_http_read(struct ffio_http *h, struct ffio_http_extent *x, size_t n)
{
    (void)h, (void)x, (void)n;
    return -ENOTSUP;
}
int ffio_http_fetch(struct ffio_http *h, const char *url, int fd, uint64_t size)
{
    (void)h, (void)url, (void)fd, (void)size;
    return -ENOTSUP;
}
const char *ffio_http_last_error(const struct ffio_http *h)
{
    (void)h;
    return "built without libcurl";
}
void ffio_http_stats(const struct ffio_http *h, struct ffio_http_stats *out)
{
    (void)h;
    if (out) memset(out, 0, sizeof *out);
}
void ffio_http_cache_source(struct ffio_http *h, struct ffr_cache_source *out)
{
    (void)h;
    if (out) memset(out, 0, sizeof *out);
}
int ffio_remote_open(struct ffio_http *h, const char *url, const struct ffr_reader_opts *opts,
                     struct ffio_remote **out, char *err, size_t err_cap)
{
    (void)h, (void)opts;
    if (out) *out = NULL;
    if (err && err_cap)
        snprintf(err, err_cap, "%s: this build has no libcurl (install libcurl4-openssl-dev)",
                 url ? url : "");
    return -ENOTSUP;
}
void ffio_remote_close(struct ffio_remote *rm)
{
    (void)rm;
}
const struct ffr_reader *ffio_remote_reader(const struct ffio_remote *rm)
{
    (void)rm;
    return NULL;
}
const char *ffio_remote_url(const struct ffio_remote *rm, uint32_t k)
{
    (void)rm, (void)k;
    return NULL;
}
int ffio_remote_read(struct ffio_remote *rm, struct ffio_record_req *reqs, size_t n)
{
    (void)rm, (void)reqs, (void)n;
    return -ENOTSUP;
}

#else

bool ffio_http_available(void)
{
    return true;
}

/* A range to read: into memory, or (fd >= 0) into a file at the same offsets. */
struct job {
    const char *url;
    uint8_t *dst;
    int fd;
    uint64_t offset, length;
    uint64_t got;      /* bytes accepted */
    int64_t res;       /* final result */
    unsigned tries;    /* requests made */
    unsigned stuck;    /* consecutive failed requests that brought no byte */
    double not_before; /* monotonic seconds: retry time */
    double deadline;   /* monotonic seconds: the whole read ends by then (read_deadline_s) */
    uint64_t total;    /* the object's size from an accepted Content-Range ("/TOTAL") */
    int state;         /* 0 waiting, 1 running, 2 done */
};

/* One transfer in flight. */
struct xfer {
    CURL *easy;
    struct job *job;
    struct ffio_http *h;
    uint64_t req_off;      /* first byte asked for */
    uint64_t got_at_start; /* the job's bytes when this request started */
    long status;           /* HTTP status of the current answer */
    bool range_ok;         /* its Content-Range names exactly the bytes asked for */
    char got_range[64];    /* the Content-Range value it sent ("" when none), for messages */
    int bad;               /* a protocol error seen in a callback (negative), or 0 */
    char why[256];         /* what bad means */
    char range[64];
    char errbuf[CURL_ERROR_SIZE];
    struct curl_slist *hdrs; /* s3: the signing headers, alive while the transfer is */
    size_t ebody_n;          /* bytes of an error answer's body kept (S3's <Error>) */
    char ebody[4096];
    char real_url[3072]; /* s3: the http(s) URL requested */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

double ffio_mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void ffio_str_copy(char *dst, size_t cap, const char *src)
{
    if (!cap) return;
    size_t l = strlen(src);
    if (l >= cap) l = cap - 1;
    memcpy(dst, src, l);
    dst[l] = '\0';
}

int ffio_http_create(const struct ffio_http_opts *opts, struct ffio_http **out)
{
    if (!out) return -EINVAL;
    *out = NULL;
    struct ffio_http_opts o;
    if (opts)
        o = *opts;
    else
        ffio_http_opts_default(&o);
    if (!o.max_in_flight || o.max_in_flight > HTTP_MAX_IN_FLIGHT || !o.fetch_chunk) return -EINVAL;
    /* options added later: zero (a caller that filled the struct itself) is the default */
    if (!o.put_threshold) o.put_threshold = 8u << 20;
    if (!o.put_part) o.put_part = 8u << 20;
    if (!o.list_page) o.list_page = 1000;
    if (o.put_part < (5u << 20) || o.put_part > (5ull << 30) || o.list_page > 1000) return -EINVAL;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) return -ENOMEM;
    struct ffio_http *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->o = o;
    if (o.s3) {
        h->s3 = *o.s3;
        h->s3_state = 1;
    }
    h->o.s3 = NULL; /* copied: the caller's may go */
    h->jitter = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)h;
    h->multi = curl_multi_init();
    h->x = calloc(o.max_in_flight, sizeof *h->x);
    if (!h->multi || !h->x) {
        ffio_http_destroy(h);
        return -ENOMEM;
    }
    curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o.max_in_flight);
    *out = h;
    return 0;
}

void ffio_http_destroy(struct ffio_http *h)
{
    if (!h) return;
    for (unsigned i = 0; h->x && i < h->o.max_in_flight; i++) {
        if (!h->x[i].easy) continue;
        if (h->x[i].job) curl_multi_remove_handle(h->multi, h->x[i].easy);
        curl_easy_cleanup(h->x[i].easy);
        curl_slist_free_all(h->x[i].hdrs);
    }
    if (h->multi) curl_multi_cleanup(h->multi);
    free(h->x);
    free(h);
}

const char *ffio_http_last_error(const struct ffio_http *h)
{
    return h ? h->last_error : "";
}

void ffio_http_stats(const struct ffio_http *h, struct ffio_http_stats *out)
{
    if (!out) return;
    if (h)
        *out = h->st;
    else
        memset(out, 0, sizeof *out);
}

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    const size_t len = size * n;
    char buf[256];
    const size_t k = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, line, k);
    buf[k] = '\0';
    if (!strncmp(buf, "HTTP/", 5)) {
        /* A new answer (after a redirect or 100 Continue): its own status and range. */
        const char *sp = strchr(buf, ' ');
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->range_ok = false;
        x->got_range[0] = '\0';
    } else if (!strncasecmp(buf, "Content-Range:", 14)) {
        unsigned long long a, b;
        const struct job *j = x->job;
        const char *v = buf + 14 + strspn(buf + 14, " \t");
        snprintf(x->got_range, sizeof x->got_range, "%.*s", (int)strcspn(v, "\r\n"), v);
        unsigned long long total = 0;
        const int got = sscanf(buf + 14, " bytes %llu-%llu/%llu", &a, &b, &total);
        if (got >= 2) x->range_ok = a == x->req_off && b == j->offset + j->length - 1;
        if (got == 3 && x->range_ok) x->job->total = total;
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    struct job *j = x->job;
    const size_t len = size * n;
    if (x->status != 206) {
        if (x->status == 200) {
            x->bad = -EPROTO;
            snprintf(x->why, sizeof x->why,
                     "the server ignores Range requests (200 instead of 206)");
            return 0; /* abort: do not download the whole file */
        }
        /* A redirect's or an error's body: the status decides, but S3 says why in it (its
         * <Error>), so its start is kept; the rest is read and dropped, bounded by the
         * transfer's deadline. */
        const size_t k = len < sizeof x->ebody - x->ebody_n ? len : sizeof x->ebody - x->ebody_n;
        memcpy(x->ebody + x->ebody_n, p, k);
        x->ebody_n += k;
        return len;
    }
    if (!x->range_ok) {
        x->bad = -EPROTO;
        if (x->got_range[0])
            snprintf(x->why, sizeof x->why,
                     "206 answer whose Content-Range '%s' is not the bytes asked for (%" PRIu64
                     "-%" PRIu64 ")",
                     x->got_range, x->req_off, j->offset + j->length - 1);
        else
            snprintf(x->why, sizeof x->why,
                     "206 answer without a Content-Range for bytes %" PRIu64 "-%" PRIu64,
                     x->req_off, j->offset + j->length - 1);
        return 0;
    }
    if (len > j->length - j->got) {
        x->bad = -EPROTO;
        snprintf(x->why, sizeof x->why, "the server sent more bytes than asked for");
        return 0;
    }
    if (j->fd >= 0) {
        for (size_t done = 0; done < len;) {
            const ssize_t w =
                pwrite(j->fd, p + done, len - done, (off_t)(j->offset + j->got + done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                x->bad = w < 0 ? -errno : -EIO;
                snprintf(x->why, sizeof x->why, "writing the file: %s", strerror(-x->bad));
                return 0;
            }
            done += (size_t)w;
        }
    } else {
        memcpy(j->dst + j->got, p, len);
    }
    j->got += len;
    return len;
}

void ffio_http_easy_common(struct ffio_http *h, CURL *e)
{
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)h->o.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)h->o.stall_timeout_s);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, h->o.tls_verify ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, h->o.tls_verify ? 2L : 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
}

int ffio_http_s3_prepare(struct ffio_http *h, CURL *e, const char *url, const char *query,
                         const char *payload_sha256, struct curl_slist **hdrs, char *real,
                         size_t cap, char *why, size_t wcap)
{
    if (h->s3_state == 0) {
        const int rc = ffio_s3_config_load(&h->s3, h->s3_err, sizeof h->s3_err);
        h->s3_state = rc < 0 ? rc : 1;
    }
    if (h->s3_state < 0) {
        snprintf(why, wcap, "the S3 configuration: %.220s", h->s3_err);
        return h->s3_state;
    }
    int rc = ffio_s3_http_url(&h->s3, url, real, cap);
    if (rc == 0 && query) {
        const size_t l = strlen(real);
        if (snprintf(real + l, cap - l, "?%s", query) >= (int)(cap - l)) rc = -ENAMETOOLONG;
    }
    if (rc < 0) {
        snprintf(why, wcap, "%s",
                 rc == -EINVAL ? "not an s3://BUCKET/KEY URL with a valid bucket name"
                               : "too long for a URL");
        return rc;
    }
    curl_easy_setopt(e, CURLOPT_URL, real);
    /* A signed request is signed for one host: S3's redirects (another region) are reported,
     * not followed unsigned. */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    if (!h->s3.access_key_id[0]) return 0; /* no keys: unsigned, as for a public bucket */
    char provider[96], line[4200];
    snprintf(provider, sizeof provider, "aws:amz:%s:s3", h->s3.region);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, provider);
    curl_easy_setopt(e, CURLOPT_USERNAME, h->s3.access_key_id);
    curl_easy_setopt(e, CURLOPT_PASSWORD, h->s3.secret_access_key);
    /* curl 7.88 signs this header's value as the payload hash (S3 requires the header, and
     * checks an upload's bytes against it). */
    snprintf(line, sizeof line, "x-amz-content-sha256: %s",
             payload_sha256 ? payload_sha256 : "UNSIGNED-PAYLOAD");
    struct curl_slist *l = curl_slist_append(NULL, line);
    if (l && h->s3.session_token[0]) {
        snprintf(line, sizeof line, "x-amz-security-token: %s", h->s3.session_token);
        struct curl_slist *l2 = curl_slist_append(l, line);
        if (!l2) {
            curl_slist_free_all(l);
            l = NULL;
        }
    }
    if (!l) return -ENOMEM;
    *hdrs = l;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, l);
    return 0;
}

static int start(struct ffio_http *h, struct xfer *x, struct job *j)
{
    x->why[0] = '\0'; /* a failed start's cause, read by run_jobs */
    if (!x->easy && !(x->easy = curl_easy_init())) return -ENOMEM;
    CURL *e = x->easy;
    curl_easy_reset(e);
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    x->ebody_n = 0;
    ffio_http_easy_common(h, e);
    x->job = j;
    x->h = h;
    x->req_off = j->offset + j->got;
    x->got_at_start = j->got;
    x->status = 0;
    x->range_ok = false;
    x->got_range[0] = '\0';
    x->bad = 0;
    x->why[0] = x->errbuf[0] = '\0';
    snprintf(x->range, sizeof x->range, "%" PRIu64 "-%" PRIu64, x->req_off,
             j->offset + j->length - 1);
    curl_easy_setopt(e, CURLOPT_URL, j->url);
    if (ffio_s3_is_url(j->url)) {
        const int rc = ffio_http_s3_prepare(h, e, j->url, NULL, NULL, &x->hdrs, x->real_url,
                                            sizeof x->real_url, x->why, sizeof x->why);
        if (rc < 0) {
            x->job = NULL;
            return rc;
        }
    }
    curl_easy_setopt(e, CURLOPT_RANGE, x->range);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    /* The read's clock starts with its first attempt (not while it queues behind others);
     * this attempt may use what is left of it, no more. */
    if (j->tries == 0)
        j->deadline =
            ffio_mono_s() + (double)h->o.read_deadline_s + (double)(j->length / (64u << 10));
    const double left = j->deadline - ffio_mono_s();
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left > 0.001 ? (long)(left * 1000) : 1L);
    if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
        x->job = NULL;
        return -ENOMEM;
    }
    j->state = 1;
    j->tries++;
    h->st.requests++;
    return 0;
}

bool ffio_http_transient(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

static int status_error(long status)
{
    switch (status) {
    case 404:
    case 410:
        return -ENOENT;
    case 401:
    case 403:
        return -EACCES;
    case 416:
        return -ENODATA;
    default:
        return -EIO;
    }
}

void ffio_http_s3_cause(const struct ffio_http *h, const char *url, long status, const char *body,
                        size_t body_n, int *err, bool *again, char *cause, size_t cap)
{
    char code[64] = "", msg[240] = "";
    size_t pos = 0;
    if (body_n) {
        ffio_xml_next(body, body_n, &pos, "Code", code, sizeof code);
        pos = 0;
        ffio_xml_next(body, body_n, &pos, "Message", msg, sizeof msg);
    }
    const bool s3 = ffio_s3_is_url(url);
    if (!code[0] && !s3) return;
    const char *hint;
    ffio_s3_error_of(code[0] ? code : NULL, status, err, again, &hint);
    int n = snprintf(cause, cap, "S3 %s (HTTP %ld)%s%s%s%s", code[0] ? code : "error", status,
                     msg[0] ? ": " : "", msg, hint ? "; " : "", hint ? hint : "");
    if (s3 && n >= 0 && (size_t)n < cap) {
        const char *bk = url + 5, *slash = strchr(bk, '/');
        const int bl = slash ? (int)(slash - bk) : (int)strlen(bk);
        n += snprintf(cause + n, cap - (size_t)n, " [bucket %.*s, key %.200s]", bl, bk,
                      slash ? slash + 1 : "");
    }
    const bool keys = *err == -EKEYREJECTED || *err == -EKEYEXPIRED || *err == -EACCES;
    if (s3 && keys && n >= 0 && (size_t)n < cap)
        snprintf(cause + n, cap - (size_t)n, "; credentials from %s", h->s3.source);
}

void ffio_sleep_until(double wake)
{
    const double d = wake - ffio_mono_s();
    if (d > 0) {
        const struct timespec t = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
        nanosleep(&t, NULL);
    }
}

void ffio_http_poll(struct ffio_http *h, double wake)
{
    int ms = (int)((wake - ffio_mono_s()) * 1000);
    if (ms < 1) ms = 1;
    if (ms > 100) ms = 100;
    curl_multi_poll(h->multi, NULL, 0, ms, NULL);
}

unsigned ffio_http_backoff_ms(struct ffio_http *h, unsigned stuck)
{
    unsigned ms = h->o.backoff_ms;
    for (unsigned t = 1; t < stuck && ms < HTTP_BACKOFF_MAX_MS; t++)
        ms *= 2;
    if (ms > HTTP_BACKOFF_MAX_MS) ms = HTTP_BACKOFF_MAX_MS;
    h->jitter ^= h->jitter << 13;
    h->jitter ^= h->jitter >> 7;
    h->jitter ^= h->jitter << 17;
    return ms / 2 + (unsigned)(h->jitter % (ms / 2 + 1));
}

/* A transfer ended: accept the job, schedule a retry, or fail it. */
static void finish(struct ffio_http *h, struct xfer *x, CURLcode rc, size_t *done)
{
    struct job *j = x->job;
    curl_multi_remove_handle(h->multi, x->easy);
    x->job = NULL;
    if (j->got == j->length && rc == CURLE_OK && x->status == 206 && !x->bad) {
        j->res = (int64_t)j->length;
        j->state = 2;
        h->st.bytes += j->length;
        (*done)++;
        return;
    }
    char cause[1200];
    int err;
    bool again;
    if (x->bad) {
        err = x->bad;
        again = false;
        snprintf(cause, sizeof cause, "%s", x->why);
    } else if (rc != CURLE_OK) {
        err = rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
              : rc == CURLE_COULDNT_CONNECT  ? -ECONNREFUSED
                                             : -EIO;
        again = ffio_http_transient(rc);
        snprintf(cause, sizeof cause, "%s%s%s (body ended after %" PRIu64 " of %" PRIu64 " bytes)",
                 curl_easy_strerror(rc), x->errbuf[0] ? ": " : "", x->errbuf, j->got, j->length);
    } else if (x->status == 206) {
        err = -EPROTO;
        again = true;
        snprintf(cause, sizeof cause, "short body: %" PRIu64 " of %" PRIu64 " bytes", j->got,
                 j->length);
    } else {
        err = status_error(x->status);
        again = x->status >= 500 || x->status == 408 || x->status == 429;
        snprintf(cause, sizeof cause, "HTTP status %ld", x->status);
        ffio_http_s3_cause(h, j->url, x->status, x->ebody, x->ebody_n, &err, &again, cause,
                           sizeof cause);
    }
    /* Retries count consecutive attempts that brought no new byte: a connection that drops
     * now and then still completes a large range. A hard cap stops a server that trickles. */
    if (j->got > x->got_at_start)
        j->stuck = 0;
    else
        j->stuck++;
    const bool late = ffio_mono_s() >= j->deadline;
    if (late) {
        err = -ETIMEDOUT;
        snprintf(cause + strlen(cause), sizeof cause - strlen(cause),
                 "; the read's deadline passed (%u s + 1 s per 64 KiB: a server this slow, or "
                 "one that trickles, is given up on)",
                 h->o.read_deadline_s);
    }
    if (again && !late && j->stuck <= h->o.retries && j->tries <= 8 * (h->o.retries + 1)) {
        const unsigned ms = ffio_http_backoff_ms(h, j->stuck);
        j->not_before = ffio_mono_s() + ms / 1000.0;
        j->state = 0;
        h->st.retries++;
        if (h->o.log) {
            char line[2000];
            snprintf(line, sizeof line,
                     "ffio http: %.500s offset %" PRIu64 ": %s; retry %u of %u in %u ms", j->url,
                     j->offset + j->got, cause, j->tries, h->o.retries, ms);
            h->o.log(h->o.log_ctx, FFIO_LOG_WARN, line);
        }
        return;
    }
    j->res = err;
    j->state = 2;
    (*done)++;
    if (!h->last_error[0])
        snprintf(h->last_error, sizeof h->last_error,
                 "%s offset %" PRIu64 " length %" PRIu64 ": %s, after %u attempt%s", j->url,
                 j->offset, j->length, cause, j->tries, j->tries == 1 ? "" : "s");
}

static int run_jobs(struct ffio_http *h, struct job *jobs, size_t n)
{
    h->last_error[0] = '\0';
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
        jobs[i].state = jobs[i].length ? 0 : 2;
        jobs[i].res = 0;
        jobs[i].got = 0;
        jobs[i].tries = 0;
        jobs[i].stuck = 0;
        jobs[i].not_before = 0;
        done += jobs[i].state == 2;
    }
    while (done < n) {
        const double now = ffio_mono_s();
        double wake = now + 0.1;
        unsigned running = 0;
        for (unsigned s = 0; s < h->o.max_in_flight; s++)
            running += h->x[s].job != NULL;
        /* Retries first (they are older), then new jobs in order. */
        for (size_t i = 0; i < n && running < h->o.max_in_flight; i++) {
            struct job *j = &jobs[i];
            if (j->state != 0) continue;
            if (j->not_before > now) {
                if (j->not_before < wake) wake = j->not_before;
                continue;
            }
            unsigned s = 0;
            while (h->x[s].job)
                s++;
            const int rc = start(h, &h->x[s], j);
            if (rc < 0) {
                j->res = rc;
                j->state = 2;
                done++;
                if (!h->last_error[0])
                    snprintf(h->last_error, sizeof h->last_error, "%s: %s", j->url,
                             h->x[s].why[0] ? h->x[s].why : strerror(-rc));
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
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(h->multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            for (unsigned s = 0; s < h->o.max_in_flight; s++)
                if (h->x[s].job && h->x[s].easy == m->easy_handle) {
                    finish(h, &h->x[s], m->data.result, &done);
                    break;
                }
        }
        if (still) ffio_http_poll(h, wake);
    }
    size_t failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += jobs[i].res < 0;
    return (int)failed;
}

int ffio_http_read(struct ffio_http *h, struct ffio_http_extent *x, size_t n)
{
    if (!h || (n && !x)) return -EINVAL;
    struct job *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (!jobs) return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!x[i].url || (x[i].length && !x[i].dst) || x[i].offset > UINT64_MAX - x[i].length) {
            free(jobs);
            return -EINVAL;
        }
        jobs[i] = (struct job){
            .url = x[i].url, .dst = x[i].dst, .fd = -1, .offset = x[i].offset, .length = x[i].length
        };
    }
    const int failed = run_jobs(h, jobs, n);
    for (size_t i = 0; i < n; i++)
        x[i].res = jobs[i].res;
    free(jobs);
    return failed;
}

int ffio_http_fetch(struct ffio_http *h, const char *url, int fd, uint64_t size)
{
    if (!h || !url || fd < 0) return -EINVAL;
    /* Ranges of fetch_chunk, but at least max_in_flight of them (down to 1 MiB): a file of a
     * few chunks would otherwise leave most of the connections idle. */
    uint64_t chunk = h->o.fetch_chunk;
    if (size / chunk < h->o.max_in_flight) {
        chunk = (size + h->o.max_in_flight - 1) / h->o.max_in_flight;
        if (chunk < (1u << 20)) chunk = 1u << 20;
        if (chunk > h->o.fetch_chunk) chunk = h->o.fetch_chunk;
    }
    const size_t n = (size_t)((size + chunk - 1) / chunk);
    struct job *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (!jobs) return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const uint64_t off = (uint64_t)i * chunk;
        jobs[i] = (struct job){
            .url = url, .fd = fd, .offset = off, .length = size - off < chunk ? size - off : chunk
        };
    }
    int rc = run_jobs(h, jobs, n);
    if (rc > 0)
        for (size_t i = 0; i < n; i++)
            if (jobs[i].res < 0) {
                rc = (int)jobs[i].res;
                break;
            }
    free(jobs);
    return rc;
}

int ffio_http_size(struct ffio_http *h, const char *url, uint64_t *size)
{
    if (!h || !url || !size) return -EINVAL;
    h->last_error[0] = '\0';
    if (ffio_s3_is_url(url)) {
        /* A one-byte GET, not a HEAD: S3 says why a request failed only in a body, and HEAD
         * answers have none. The size is Content-Range's total. */
        uint8_t one;
        struct job j = { .url = url, .dst = &one, .fd = -1, .offset = 0, .length = 1 };
        if (run_jobs(h, &j, 1) == 0) {
            if (!j.total) {
                snprintf(h->last_error, sizeof h->last_error,
                         "%s: size: the answer's Content-Range gives no total", url);
                return -EPROTO;
            }
            *size = j.total;
            return 0;
        }
        if (j.res == -ENODATA) { /* S3 answers any range of an empty object with 416 */
            h->last_error[0] = '\0';
            *size = 0;
            return 0;
        }
        /* Say "size", not the probe's "offset 0 length 1". */
        static const char probe[] = " offset 0 length 1: ";
        const char *at = strstr(h->last_error, probe);
        if (at && at - h->last_error == (ptrdiff_t)strlen(url)) {
            char tmp[sizeof h->last_error];
            ffio_str_copy(tmp, sizeof tmp, at + sizeof probe - 1);
            snprintf(h->last_error, sizeof h->last_error, "%.500s: size: %.1500s", url, tmp);
        }
        return (int)j.res;
    }
    CURL *e = curl_easy_init();
    if (!e) return -ENOMEM;
    int rc = -EIO;
    char cause[400] = "";
    char errbuf[CURL_ERROR_SIZE];
    unsigned ms = h->o.backoff_ms, tries = 0;
    for (;;) {
        curl_easy_reset(e);
        ffio_http_easy_common(h, e);
        errbuf[0] = '\0';
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
        tries++;
        h->st.requests++;
        const CURLcode c = curl_easy_perform(e);
        long status = 0;
        curl_off_t len = -1;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
        bool again;
        if (c == CURLE_OK && status == 200 && len >= 0) {
            *size = (uint64_t)len;
            rc = 0;
            break;
        } else if (c != CURLE_OK) {
            again = ffio_http_transient(c);
            rc = c == CURLE_COULDNT_CONNECT ? -ECONNREFUSED : -EIO;
            snprintf(cause, sizeof cause, "%s%s%s", curl_easy_strerror(c), errbuf[0] ? ": " : "",
                     errbuf);
        } else if (status == 200) {
            again = false;
            rc = -EPROTO;
            snprintf(cause, sizeof cause, "no Content-Length in the answer");
        } else {
            again = status >= 500 || status == 408 || status == 429;
            rc = status_error(status);
            snprintf(cause, sizeof cause, "HTTP status %ld", status);
        }
        if (!again || tries > h->o.retries) break;
        h->st.retries++;
        const struct timespec t = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
        nanosleep(&t, NULL);
        if (ms < HTTP_BACKOFF_MAX_MS)
            ms = ms * 2 > HTTP_BACKOFF_MAX_MS ? HTTP_BACKOFF_MAX_MS : ms * 2;
    }
    if (rc < 0)
        snprintf(h->last_error, sizeof h->last_error, "%s: size (HEAD): %s, after %u attempt%s",
                 url, cause, tries, tries == 1 ? "" : "s");
    curl_easy_cleanup(e);
    return rc;
}

/* ---- the cache's source ---- */

/* Copies [0, size) of a local file into fd (the cache source for paths that are not URLs). */
static int copy_local(const char *src, int fd, uint64_t size, char *err, size_t cap)
{
    const int in = ffr_open_regular(src, 0);
    if (in < 0) {
        snprintf(err, cap, "%s: %s", src, ffr_strerror(in));
        return in;
    }
    static const size_t chunk = 1u << 20;
    uint8_t *buf = malloc(chunk);
    int rc = buf ? 0 : -ENOMEM;
    for (uint64_t at = 0; rc == 0 && at < size;) {
        const size_t want = size - at < chunk ? (size_t)(size - at) : chunk;
        const ssize_t k = pread(in, buf, want, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            rc = k < 0 ? -errno : -FFR_ETRUNC;
            break;
        }
        for (ssize_t done = 0; rc == 0 && done < k;) {
            const ssize_t w = pwrite(fd, buf + done, (size_t)(k - done), (off_t)at + done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) rc = w < 0 ? -errno : -EIO;
            done += w > 0 ? w : 0;
        }
        at += (uint64_t)k;
    }
    if (rc < 0)
        snprintf(err, cap, "%s: copy: %s", src,
                 rc == -FFR_ETRUNC ? "file is shorter than expected" : strerror(-rc));
    free(buf);
    close(in);
    return rc;
}

static int src_size(void *ctx, const char *src, uint64_t *size, char *err, size_t cap)
{
    if (!ffio_http_is_url(src)) {
        struct stat st;
        if (stat(src, &st) < 0) {
            const int rc = -errno;
            snprintf(err, cap, "%s: %s", src, strerror(-rc));
            return rc;
        }
        *size = (uint64_t)st.st_size;
        return 0;
    }
    struct ffio_http *h = ctx;
    const int rc = ffio_http_size(h, src, size);
    if (rc < 0) snprintf(err, cap, "%s", h->last_error);
    return rc;
}

static int src_fetch(void *ctx, const char *src, int fd, uint64_t size, char *err, size_t cap)
{
    if (!ffio_http_is_url(src)) return copy_local(src, fd, size, err, cap);
    struct ffio_http *h = ctx;
    const int rc = ffio_http_fetch(h, src, fd, size);
    if (rc < 0) snprintf(err, cap, "%s", h->last_error);
    return rc;
}

static int src_read(void *ctx, const char *src, void *dst, uint64_t off, uint64_t len, char *err,
                    size_t cap)
{
    if (!ffio_http_is_url(src)) {
        const int fd = ffr_open_regular(src, 0);
        int rc = fd < 0 ? fd : 0;
        for (uint64_t got = 0; rc == 0 && got < len;) {
            const ssize_t k =
                pread(fd, (uint8_t *)dst + got, (size_t)(len - got), (off_t)(off + got));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) rc = k < 0 ? -errno : -FFR_ETRUNC;
            got += k > 0 ? (uint64_t)k : 0;
        }
        if (fd >= 0) close(fd);
        if (rc < 0) snprintf(err, cap, "%s: %s", src, ffr_strerror(rc));
        return rc;
    }
    struct ffio_http *h = ctx;
    struct ffio_http_extent x = { .url = src, .dst = dst, .offset = off, .length = len };
    const int rc = ffio_http_read(h, &x, 1) ? (int)x.res : 0;
    if (rc < 0) snprintf(err, cap, "%s", h->last_error);
    return rc;
}

void ffio_http_cache_source(struct ffio_http *h, struct ffr_cache_source *out)
{
    if (!out) return;
    out->size = src_size;
    out->fetch = src_fetch;
    out->read = src_read;
    out->ctx = h;
}

/* ---- remote datasets ---- */

struct ffio_remote {
    struct ffio_http *h;
    struct ffr_reader *r;
    char **urls; /* per shard */
    uint32_t n_urls;
    struct ffr_decoder *dec;
    struct ffio_http_extent *x;
    struct ffr_record_info *info;
    size_t *req_of; /* extent -> request */
    size_t cap;
};

static int pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n) {
        const ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* Writes a sparse local file of `size` bytes holding url's header, index and trailer (the
 * bytes a reader checks at open); records stay holes. The reader then checks these bytes as it
 * would a local file's, so nothing fetched here is trusted unchecked. */
static int skeleton(struct ffio_http *h, const char *url, uint64_t size, const char *path,
                    char *err, size_t cap)
{
    const int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        const int rc = -errno;
        snprintf(err, cap, "%s: %s", path, strerror(-rc));
        return rc;
    }
    int rc = ftruncate(fd, (off_t)size) < 0 ? -errno : 0;
    uint8_t head[64], tail[FFR_TRAILER_SIZE];
    if (rc == 0 && size < sizeof head + sizeof tail) {
        /* Too small to be complete: fetch it all and let the reader say what is wrong. */
        rc = ffio_http_fetch(h, url, fd, size);
    } else if (rc == 0) {
        struct ffio_http_extent x[2] = {
            { .url = url, .dst = head, .offset = 0, .length = sizeof head },
            { .url = url, .dst = tail, .offset = size - sizeof tail, .length = sizeof tail },
        };
        rc = ffio_http_read(h, x, 2) ? (int)(x[0].res < 0 ? x[0].res : x[1].res) : 0;
        if (rc == 0) rc = pwrite_all(fd, head, sizeof head, 0);
        if (rc == 0) rc = pwrite_all(fd, tail, sizeof tail, size - sizeof tail);
        /* Nothing more is fetched, or allocated, for a header and trailer that do not check
         * out as the reader would check them (each trailer copy's own hash, the sizes against
         * each other), nor for an index above the per-open bound: a server claiming a huge
         * file with a plausible trailer cannot make us download or hold it. */
        struct ffr_index_extent ix;
        char why[512] = "";
        if (rc == 0 && (rc = ffr_locate_index(head, tail, size, url, &ix, why, sizeof why)) < 0)
            snprintf(err, cap, "%s", why);
        if (rc == 0 && ix.size > h->o.max_index_bytes) {
            rc = -FFR_ETOOBIG;
            snprintf(err, cap,
                     "%s: its trailer says the index is %" PRIu64 " bytes, above the %" PRIu64
                     " a remote open accepts (ffio_http_opts.max_index_bytes)",
                     url, ix.size, (uint64_t)h->o.max_index_bytes);
        }
        /* In chunks through one bounded buffer, straight into the skeleton. */
        const size_t chunk = h->o.fetch_chunk;
        uint8_t *buf =
            rc == 0 && ix.size ? malloc(ix.size < chunk ? (size_t)ix.size : chunk) : NULL;
        if (rc == 0 && ix.size && !buf) rc = -ENOMEM;
        for (uint64_t at = 0; rc == 0 && at < ix.size;) {
            const size_t n = ix.size - at < chunk ? (size_t)(ix.size - at) : chunk;
            struct ffio_http_extent xi = {
                .url = url, .dst = buf, .offset = ix.offset + at, .length = n
            };
            if (ffio_http_read(h, &xi, 1)) rc = (int)xi.res;
            if (rc == 0) rc = pwrite_all(fd, buf, n, ix.offset + at);
            at += n;
        }
        free(buf);
    }
    if (rc < 0 && (!err[0]))
        ffio_str_copy(err, cap, h->last_error[0] ? h->last_error : strerror(-rc));
    close(fd);
    return rc;
}

void ffio_remote_close(struct ffio_remote *rm)
{
    if (!rm) return;
    ffr_reader_close(rm->r);
    for (uint32_t k = 0; k < rm->n_urls; k++)
        free(rm->urls[k]);
    free(rm->urls);
    ffr_decoder_destroy(rm->dec);
    free(rm->x);
    free(rm->info);
    free(rm->req_of);
    free(rm);
}

int ffio_remote_open(struct ffio_http *h, const char *url, const struct ffr_reader_opts *opts,
                     struct ffio_remote **out, char *err, size_t err_cap)
{
    char e2[1024] = "";
    if (err && err_cap) err[0] = '\0';
    if (!h || !url || !out) return -EINVAL;
    *out = NULL;
    struct ffio_remote *rm = calloc(1, sizeof *rm);
    if (!rm) return -ENOMEM;
    rm->h = h;
    const char *tmpd = getenv("TMPDIR");
    char dir[PATH_MAX], path[PATH_MAX + 300], mpath[PATH_MAX + 300];
    /* The skeleton's folder is a temporary named by ffr_tmp_path (PID and host): what a killed
     * open left is removed here by the next one, as writers remove theirs. */
    static atomic_uint remote_seq;
    snprintf(path, sizeof path, "%s/ffio-remote-", tmpd && *tmpd ? tmpd : "/tmp");
    (void)ffr_remove_stale_tmp(path, 1);
    snprintf(path + strlen(path), sizeof path - strlen(path), "%u",
             atomic_fetch_add(&remote_seq, 1));
    char *tmpname = ffr_tmp_path(path);
    if (!tmpname || strlen(tmpname) >= sizeof dir) {
        free(tmpname);
        free(rm);
        return -ENOMEM;
    }
    snprintf(dir, sizeof dir, "%s", tmpname);
    free(tmpname);
    struct ffr_cache_shard *sh = NULL;
    uint32_t ns = 0;
    uint8_t *text = NULL;
    uint64_t size = 0;
    int rc = ffio_http_size(h, url, &size);
    if (rc < 0) {
        ffio_str_copy(e2, sizeof e2, h->last_error);
        goto out;
    }
    if (mkdir(dir, 0700) < 0) {
        rc = -errno;
        snprintf(e2, sizeof e2, "%.900s: %s", dir, strerror(errno));
        dir[0] = '\0';
        goto out;
    }
    /* A manifest is small and says so in its first bytes. */
    int is_manifest = 0;
    if (size >= 14 && size <= (64u << 20)) {
        uint8_t head[16];
        struct ffio_http_extent x = {
            .url = url, .dst = head, .offset = 0, .length = size < sizeof head ? size : sizeof head
        };
        if (ffio_http_read(h, &x, 1)) {
            rc = (int)x.res;
            ffio_str_copy(e2, sizeof e2, h->last_error);
            goto out;
        }
        is_manifest = ffr_manifest_sniff_text(head, (size_t)x.length);
    }
    if (is_manifest) {
        text = malloc((size_t)size + 1);
        struct ffio_http_extent x = { .url = url, .dst = text, .offset = 0, .length = size };
        if (!text) {
            rc = -ENOMEM;
            goto out;
        }
        if (ffio_http_read(h, &x, 1)) {
            rc = (int)x.res;
            ffio_str_copy(e2, sizeof e2, h->last_error);
            goto out;
        }
        char why[512] = "";
        if ((rc = ffr_manifest_shards(text, (size_t)size, &sh, &ns, why, sizeof why)) < 0) {
            snprintf(e2, sizeof e2, "%s: %s", url, why);
            goto out;
        }
        rm->urls = calloc(ns, sizeof *rm->urls);
        if (!rm->urls) {
            rc = -ENOMEM;
            goto out;
        }
        rm->n_urls = ns;
        for (uint32_t k = 0; k < ns; k++) {
            if (!(rm->urls[k] = ffr_manifest_shard_source(url, sh[k].file))) {
                rc = -ENOMEM;
                goto out;
            }
            snprintf(path, sizeof path, "%s/%s", dir, sh[k].file);
            /* The manifest's size, not the server's: a differing shard is then refused by the
             * reader naming what differs, as for local files. */
            if ((rc = skeleton(h, rm->urls[k], sh[k].bytes, path, e2, sizeof e2)) < 0) goto out;
        }
        snprintf(mpath, sizeof mpath, "%s/manifest.ffr", dir);
        const int mfd = open(mpath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        rc = mfd < 0 ? -errno : pwrite_all(mfd, text, (size_t)size, 0);
        if (mfd >= 0) close(mfd);
        if (rc < 0) goto out;
    } else {
        rm->urls = calloc(1, sizeof *rm->urls);
        if (!rm->urls || !(rm->urls[0] = strdup(url))) {
            rc = -ENOMEM;
            goto out;
        }
        rm->n_urls = 1;
        snprintf(mpath, sizeof mpath, "%s/data.ffr", dir);
        if ((rc = skeleton(h, url, size, mpath, e2, sizeof e2)) < 0) goto out;
    }
    char why[1024] = "";
    rc = ffr_reader_open(&rm->r, mpath, opts, why, sizeof why);
    if (rc < 0) {
        /* Name the URL rather than the skeleton's temporary path. */
        const char *tail = strstr(why, dir) ? why + strlen(dir) : why;
        snprintf(e2, sizeof e2, "%.300s (remote %.200s): %.400s", url, dir, tail);
        goto out;
    }
    rc = ffr_decoder_create(&rm->dec);
out:
    /* The reader keeps its descriptors: the skeleton's names can go now. */
    if (dir[0]) {
        for (uint32_t k = 0; sh && k < ns; k++) {
            snprintf(path, sizeof path, "%s/%s", dir, sh[k].file);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/manifest.ffr", dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/data.ffr", dir);
        unlink(path);
        rmdir(dir);
    }
    free(text);
    ffr_manifest_shards_free(sh, ns);
    if (rc < 0) {
        if (err && err_cap) snprintf(err, err_cap, "%s", e2[0] ? e2 : strerror(-rc));
        ffio_remote_close(rm);
        return rc;
    }
    *out = rm;
    return 0;
}

const struct ffr_reader *ffio_remote_reader(const struct ffio_remote *rm)
{
    return rm ? rm->r : NULL;
}

const char *ffio_remote_url(const struct ffio_remote *rm, uint32_t k)
{
    return rm && k < rm->n_urls ? rm->urls[k] : NULL;
}

int ffio_remote_read(struct ffio_remote *rm, struct ffio_record_req *reqs, size_t n)
{
    if (!rm || (n && !reqs)) return -EINVAL;
    if (n > rm->cap) {
        struct ffio_http_extent *x = realloc(rm->x, n * sizeof *x);
        if (x) rm->x = x;
        struct ffr_record_info *in = realloc(rm->info, n * sizeof *in);
        if (in) rm->info = in;
        size_t *ro = realloc(rm->req_of, n * sizeof *ro);
        if (ro) rm->req_of = ro;
        if (!x || !in || !ro) return -ENOMEM;
        rm->cap = n;
    }
    size_t m = 0;
    int failed = 0;
    for (size_t k = 0; k < n; k++) {
        struct ffio_record_req *q = &reqs[k];
        struct ffr_record_info *in = &rm->info[k];
        q->payload = NULL;
        q->result = ffr_reader_info(rm->r, q->index, in);
        if (q->result == 0 && (!q->extent || q->extent_cap < in->frame_len))
            q->result = -FFR_ETOOBIG;
        if (q->result < 0) {
            failed++;
            continue;
        }
        rm->x[m] = (struct ffio_http_extent){ .url = rm->urls[in->shard],
                                              .dst = q->extent,
                                              .offset = in->offset,
                                              .length = in->frame_len };
        rm->req_of[m++] = k;
    }
    const int bad = ffio_http_read(rm->h, rm->x, m);
    if (bad < 0) return bad;
    for (size_t i = 0; i < m; i++) {
        struct ffio_record_req *q = &reqs[rm->req_of[i]];
        const struct ffr_record_info *in = &rm->info[rm->req_of[i]];
        if (rm->x[i].res < 0) {
            q->result = rm->x[i].res;
            failed++;
            continue;
        }
        const void *payload = NULL;
        q->result = ffr_frame_decode(rm->dec, in, q->extent, (size_t)in->frame_len, 1, q->dst,
                                     q->dst_cap, &payload);
        if (q->result < 0)
            failed++;
        else
            q->payload = q->dst ? q->dst : payload;
    }
    return failed;
}

#endif /* FFIO_HAVE_CURL */

int ffio_cache_dataset(const char *dir, const struct ffr_cache_opts *co, const char *src,
                       char *local, size_t local_cap, char *err, size_t err_cap)
{
    struct ffio_http *h = NULL;
    struct ffr_cache_source cs;
    struct ffr_cache_opts o;
    if (co)
        o = *co;
    else
        ffr_cache_opts_default(&o);
    o.source = NULL;
    int rc;
    if (ffio_http_is_url(src)) {
        if ((rc = ffio_http_create(NULL, &h)) < 0) {
            snprintf(err, err_cap, "%s: %s", src,
                     rc == -ENOTSUP ? "this build reads no URLs (built without libcurl)"
                                    : strerror(-rc));
            return rc;
        }
        ffio_http_cache_source(h, &cs);
        o.source = &cs;
    }
    struct ffr_cache *c = NULL;
    rc = ffr_cache_open(&c, dir, &o, err, err_cap);
    if (rc >= 0) rc = ffr_cache_dataset(c, src, local, local_cap, err, err_cap);
    ffr_cache_close(c);
    ffio_http_destroy(h);
    return rc;
}
