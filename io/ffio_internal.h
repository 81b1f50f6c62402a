/*
 * ffio internals shared by the engine core (ffio_engine.c) and the three backends
 * (ffio_uring.c, ffio_pool.c, ffio_mmap.c). Not installed; tests/io may include it for the
 * fault-injection hooks.
 *
 * Life of an extent: ffio_engine_submit() takes a free slot, copies the extent into it, captures
 * the file's descriptors into the slot ("file view") and plans the first read (ffio_slot_plan).
 * The backend performs the read and feeds its result to ffio_slot_account(), which copies bounced
 * bytes, continues short reads, retries EINTR/EAGAIN and decides EOF. When the slot is finished,
 * the engine thread pushes it on the done ring; ffio_engine_wait() copies the completion out and
 * only then frees the slot, so outstanding extents (in flight + finished, not returned) never
 * exceed queue_depth and no queue can overflow.
 *
 * Invariants: each slot has at most one read in flight; slots are only planned/accounted by the
 * thread that owns them at that moment (engine thread, or one pool worker between dequeue and
 * finish); file state (struct ffio_file) is only changed by the engine thread.
 */
#ifndef FFIO_INTERNAL_H
#define FFIO_INTERNAL_H

#include "ffio.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One read op can move at most this much (Linux caps a read at 0x7ffff000 bytes). */
#define FFIO_MAX_OP_BYTES ((size_t)1 << 30)
/* Consecutive EINTR/EAGAIN/no-progress retries before the error is reported. */
#define FFIO_MAX_RETRIES 64
/* Registered buffer regions (after splitting at FFIO_MAX_OP_BYTES). */
#define FFIO_MAX_BUF_REGIONS 64

#ifndef NDEBUG
/* Debug builds: remember where an error was first returned (read in a debugger or by tests). */
extern _Thread_local const char *ffio_err_where;
#define FFIO_STR2_(x)    #x
#define FFIO_STR_(x)     FFIO_STR2_(x)
#define FFIO_NOTE_ERR_() (ffio_err_where = __FILE__ ":" FFIO_STR_(__LINE__))
#else
#define FFIO_NOTE_ERR_() ((void)0)
#endif

/* Return `err` (negative) from the current function when cond holds. `why` documents the cause. */
#define RETURN_IF(cond, err, why) \
    do {                          \
        if (cond) {               \
            (void)(why);          \
            FFIO_NOTE_ERR_();     \
            return (err);         \
        }                         \
    } while (0)

/* Store a negative result of expr in `rc` and jump to `out`. */
#define TRY(expr)             \
    do {                      \
        rc = (expr);          \
        if (rc < 0) {         \
            FFIO_NOTE_ERR_(); \
            goto out;         \
        }                     \
    } while (0)

/* Fault injection for tests (all zero = off). Set before creating engines; read-only afterwards. */
struct ffio_test_hooks {
    bool refuse_direct_open;   /* open(O_DIRECT) fails with EINVAL, as on tmpfs before 6.6 */
    bool refuse_direct_read;   /* reads on O_DIRECT descriptors fail with EINVAL */
    bool fail_mlock;           /* mlock fails with EPERM (pinned allocator falls back) */
    unsigned eagain_every;     /* every Nth read result is replaced by -EAGAIN */
    unsigned eintr_every;      /* every Nth read result is replaced by -EINTR */
    size_t short_read_max;     /* reads return at most this many useful bytes (> 0) */
    uint64_t eio_offset_plus1; /* a read covering byte (this - 1) fails with -EIO */
    atomic_uint counter;       /* shared by the *_every hooks */
};
extern struct ffio_test_hooks ffio_test_hooks;
extern atomic_bool ffio_test_hooks_on; /* fast check in the read path */

/* What ffio_slot_account decided. */
enum ffio_step {
    FFIO_STEP_DONE = 0,         /* finished: slot->res is set */
    FFIO_STEP_AGAIN = 1,        /* slot->op holds the next read */
    FFIO_STEP_NEED_BUFFERED = 2 /* O_DIRECT read refused: the engine thread must switch the file */
};

/* One file of an engine. */
struct ffio_file {
    char *name;         /* for messages; owned */
    int dfd;            /* O_DIRECT descriptor, or -1 */
    int bfd;            /* buffered descriptor, or -1 (opened on fallback) */
    int dreg;           /* fixed-file index of dfd, or -1 */
    int breg;           /* fixed-file index of bfd, or -1 */
    bool owns_dfd;      /* close dfd on destroy */
    bool owns_bfd;      /* close bfd on destroy */
    bool direct_off;    /* O_DIRECT reads were refused: use bfd (dfd stays open for reads in
                           flight and is closed on destroy) */
    unsigned char *map; /* mmap engine: mapping of [0, map_len), or NULL */
    size_t map_len;     /* mapped bytes */
    uint64_t size;      /* mmap engine: file size at the last check */
    uint64_t size_gen;  /* mmap engine: submit generation of that check */
};

/* The read a slot is doing now. */
struct ffio_op {
    unsigned char *buf; /* destination of this read: dst + done, or the slot's bounce buffer */
    uint64_t off;       /* file offset */
    size_t len;         /* bytes asked for */
    size_t skip;        /* bounce: bytes of buf before the extent's next byte */
    int fd;             /* descriptor */
    int reg;            /* fixed-file index of fd, or -1 */
    int buf_index;      /* registered buffer index for read_fixed, or -1 */
    bool bounce;        /* buf is the bounce buffer */
    bool direct;        /* fd is O_DIRECT */
};

/* An extent being read (or finished and waiting to be returned). */
struct ffio_slot {
    struct ffio_extent ext; /* copy of the caller's extent */
    uint64_t done;          /* bytes landed in ext.dst */
    int64_t res;            /* final result once finished */
    struct ffio_op op;      /* current read */
    /* File view captured on the engine thread when the slot is (re)queued. */
    int dfd, dreg;         /* O_DIRECT descriptor and fixed index, or -1 */
    int bfd, breg;         /* buffered descriptor and fixed index, or -1 (exactly one fd >= 0) */
    int buf_index;         /* registered region holding [dst, dst + length), or -1 */
    unsigned char *bounce; /* bounce buffer (engine bounce_bytes), allocated on first need */
    unsigned retries;      /* consecutive retries without progress */
    size_t user_index;     /* ffio_engine_read: position in the caller's arrays */
    enum ffio_step step;   /* pool: what the worker decided (DONE or NEED_BUFFERED) */
    /* Counters folded into the engine's when the completion is returned. */
    uint32_t n_short, n_retry, n_bounce, n_fixed;
};

struct ffio_uring;
struct ffio_pool;

struct ffio_engine {
    struct ffio_opts opts;      /* validated copy */
    enum ffio_engine_kind kind; /* URING, PREAD or MMAP */
    int uring_rc;               /* why AUTO did not get io_uring, or 0 */
    unsigned qd;                /* slots */
    size_t align;               /* direct_align */
    size_t bounce_bytes;        /* bounce buffer size per slot */
    struct ffio_slot *slots;    /* qd slots */
    uint32_t *free_stack;       /* free slot indices, n_free of them */
    uint32_t n_free;
    uint32_t *done_ring; /* finished slots not yet returned, FIFO, capacity qd */
    uint32_t done_head, done_count;
    uint32_t *scratch;       /* qd indices: slots handed to a backend in one call */
    struct ffio_file *files; /* max_files entries, n_files used */
    uint32_t n_files;
    void *buf_base[FFIO_MAX_BUF_REGIONS]; /* registered regions (split at 1 GiB) */
    size_t buf_len[FFIO_MAX_BUF_REGIONS];
    unsigned n_bufs;
    bool bufs_registered;          /* the ring holds buf_* as fixed buffers */
    bool started;                  /* an extent was submitted (ring enabled) */
    uint64_t submit_gen;           /* submit calls so far (mmap size checks) */
    struct ffio_uring *uring;      /* io_uring backend state */
    struct ffio_pool *pool;        /* pread pool backend state */
    struct ffio_engine_info stats; /* counters (extents, bytes, ...) */
    bool logged_bounce;            /* the "unaligned extents are bounced" line was logged */
    bool logged_direct;            /* the "O_DIRECT refused" line was logged */
    int broken;                    /* a fatal ring error (negative): every later call returns it */
};

/* The one place this module uses a compiler extension (style rule 1): printf format checks. */
#if defined(__GNUC__) || defined(__clang__)
#define FFIO_PRINTF(fmt_idx, args_idx) __attribute__((format(printf, fmt_idx, args_idx)))
#else
#define FFIO_PRINTF(fmt_idx, args_idx)
#endif

/* Log one formatted line through opts.log (engine thread only). */
void ffio_log(const struct ffio_engine *e, enum ffio_log_level level, const char *fmt, ...)
    FFIO_PRINTF(3, 4);

/*
 * Plan the next read of a slot from its progress and file view. Allocates the slot's bounce
 * buffer the first time it needs one (once per slot for the engine's life). Safe in a pool
 * worker: touches only the slot. Returns 0 or -ENOMEM.
 */
int ffio_slot_plan(const struct ffio_engine *e, struct ffio_slot *s);

/*
 * Feed the result of the slot's current read (bytes, or negative errno) to the slot; copies bounced
 * bytes, plans the next read when needed. Safe to call from a pool worker: touches only the slot.
 */
enum ffio_step ffio_slot_account(const struct ffio_engine *e, struct ffio_slot *s, ssize_t res);

/* Engine thread: the slot is finished; queue it for ffio_engine_wait. */
void ffio_engine_finish(struct ffio_engine *e, uint32_t si);

/*
 * Engine thread: after FFIO_STEP_NEED_BUFFERED, move the slot's file to buffered reads (opening
 * a buffered descriptor if needed), refresh the slot's file view and replan. Returns 0, or a
 * negative error, in which case the slot has been finished with that error.
 */
int ffio_engine_switch_buffered(struct ffio_engine *e, uint32_t si);

/* Apply test hooks to a read result (only when ffio_test_hooks_on). */
ssize_t ffio_hook_result(const struct ffio_slot *s, ssize_t res);

/* Backends. Each returns 0 or a negative errno. */
int ffio_uring_create(struct ffio_engine *e);
void ffio_uring_destroy(struct ffio_engine *e);
int ffio_uring_file_added(struct ffio_engine *e, uint32_t file);
int ffio_uring_buffers_changed(struct ffio_engine *e);
int ffio_uring_submit(struct ffio_engine *e, const uint32_t *si, size_t n);
int ffio_uring_reap(struct ffio_engine *e, bool block);
bool ffio_uring_forced_off(const struct ffio_opts *opts);

int ffio_pool_create(struct ffio_engine *e);
void ffio_pool_destroy(struct ffio_engine *e);
int ffio_pool_submit(struct ffio_engine *e, const uint32_t *si, size_t n);
int ffio_pool_reap(struct ffio_engine *e, bool block);

int ffio_mmap_file_added(struct ffio_engine *e, uint32_t file);
void ffio_mmap_file_close(struct ffio_file *f);
int ffio_mmap_submit(struct ffio_engine *e, const uint32_t *si, size_t n);

/* ---- S3 (ffio_s3.c): the two small parsers, here for the tests and fuzz targets ---- */

/*
 * The next element <tag ...>TEXT</tag> of xml[0, n) at or after *pos (no NUL needed). The
 * text's entities (&amp; &lt; &gt; &quot; &apos; &#N; &#xH;) are decoded into out, at most
 * cap - 1 bytes and NUL-terminated; *pos moves past the element. <tag/> is an empty text. An
 * element nested inside the text is copied as it stands. Returns the decoded length (before
 * truncation), or -1 when there is no complete element. One pass over the bytes: O(n), no
 * allocation, so an S3 answer cannot make it slow or large.
 */
int ffio_xml_next(const char *xml, size_t n, size_t *pos, const char *tag, char *out, size_t cap);

/* As ffio_xml_next, but gives the raw text's offset and length in xml (for nested lookups). */
int ffio_xml_span(const char *xml, size_t n, size_t *pos, const char *tag, size_t *begin,
                  size_t *len);

/*
 * The value of `key` in `[section]` of an AWS-style INI text[0, n): "key = value" lines, '#'
 * and ';' comments, a "parent =" line followed by indented "sub = value" lines found as
 * "parent.sub". The last assignment in the section wins, as in botocore. Writes at most cap - 1
 * bytes and a NUL. Returns the value's length, -1 when absent, or -ENAMETOOLONG when it does not
 * fit (nothing silently cut: a cut secret would sign wrongly).
 */
int ffio_ini_get(const char *text, size_t n, const char *section, const char *key, char *out,
                 size_t cap);

/* s[0, l) RFC 3986-encoded into out (unreserved bytes kept, '/' too when keep_slash), as
 * SigV4 wants keys and query values. Returns 0 or -ENAMETOOLONG. */
int ffio_s3_encode(const char *s, size_t l, bool keep_slash, char *out, size_t cap);

/* One ListObjectsV2 answer xml[0, n): its <Contents> (Key, Size) appended to *objs (*n_objs of
 * them, at most max: -EOVERFLOW beyond), and whether more follow (<IsTruncated>true, with the
 * <NextContinuationToken> copied into token[tcap]). *objs must be NULL or an array this
 * function grew (its capacity follows from *n_objs). Returns 0, -EPROTO (an element missing,
 * too long or malformed), -EOVERFLOW or -ENOMEM; what was appended stays for the caller to free
 * (ffio_s3_objects_free). */
int ffio_s3_list_parse(const char *xml, size_t n, struct ffio_s3_object **objs, size_t *n_objs,
                       size_t max, char *token, size_t tcap, bool *truncated);

/* What an S3 answer means: *err (negative errno), whether to retry, and a hint for the user
 * (NULL when none) from its <Code> (NULL when the body had none) and HTTP status. */
void ffio_s3_error_of(const char *code, long status, int *err, bool *retry, const char **hint);

/* ---- the HTTP client's state, shared by ffio_http.c (reads) and ffio_s3_ops.c (writes,
 * listings, deletions): one curl multi handle, so both reuse the same connections ---- */
#if defined(FFIO_HAVE_CURL)
#include <curl/curl.h>

struct xfer;

struct ffio_http {
    struct ffio_http_opts o;
    CURLM *multi;
    struct xfer *x; /* max_in_flight slots; easy handles kept between calls */
    struct ffio_http_stats st;
    uint64_t jitter; /* xorshift state for the backoff jitter */
    char last_error[2048];
    int s3_state; /* 0: not loaded yet, 1: h->s3 holds it, < 0: loading failed (s3_err) */
    struct ffio_s3_config s3;
    char s3_err[512];
};

/* Seconds on the monotonic clock. */
double ffio_mono_s(void);

/* The options every transfer has: timeouts, stall limit, TLS checks, http(s) only. */
void ffio_http_easy_common(struct ffio_http *h, CURL *e);

/*
 * Points e at the http(s) URL of s3_url (with "?query" appended when query is not NULL: already
 * sorted and RFC 3986-encoded, as SigV4 wants it) and signs it with libcurl's SigV4, the payload
 * hash being payload_sha256 (64 hex digits) or UNSIGNED-PAYLOAD when NULL. The header list goes
 * to *hdrs (NULL when unsigned), which must live while the transfer does; a caller adding
 * headers appends to it and sets CURLOPT_HTTPHEADER again. Returns 0, or an error with the
 * cause in why.
 */
int ffio_http_s3_prepare(struct ffio_http *h, CURL *e, const char *s3_url, const char *query,
                         const char *payload_sha256, struct curl_slist **hdrs, char *real,
                         size_t cap, char *why, size_t wcap);

/* Whether a curl failure is worth another attempt (the network, not the request). */
bool ffio_http_transient(CURLcode rc);

/* The delay before the next attempt of a request that failed `stuck` times in a row: doubling
 * from opts.backoff_ms up to 5 s, half of it random so that failures together do not come back
 * together. */
unsigned ffio_http_backoff_ms(struct ffio_http *h, unsigned stuck);

/* An S3 answer (to an s3:// URL, or any answer carrying S3's <Error>) that failed with status:
 * what its <Code> in body[0, body_n) means (*err, *again), and in cause a line naming the code,
 * the server's message, what to do, the bucket and key, and where the credentials came from.
 * Leaves *err, *again and cause alone for a non-S3 URL whose body has no <Code>. */
void ffio_http_s3_cause(const struct ffio_http *h, const char *url, long status, const char *body,
                        size_t body_n, int *err, bool *again, char *cause, size_t cap);

/* Sleeps until the monotonic time wake (ffio_mono_s), if it is ahead. */
void ffio_sleep_until(double wake);

/* Waits on the client's transfers until one has news, wake comes, or 100 ms pass. */
void ffio_http_poll(struct ffio_http *h, double wake);

/* Copies src into dst[cap], cut to fit: a message, where cutting is fine. */
void ffio_str_copy(char *dst, size_t cap, const char *src);
#endif

/* ---- the peer server's request head (ffio_peer.c; fuzzed by tests/fuzz/fuzz_peer_http.c) ---- */

#define FFIO_PEER_HEAD_MAX 8192 /* bytes of a request head, CRLF CRLF included */

enum ffio_peer_range {
    FFIO_PEER_RANGE_NONE = 0, /* the whole file */
    FFIO_PEER_RANGE_SPAN,     /* bytes=first-last */
    FFIO_PEER_RANGE_FROM,     /* bytes=first- */
    FFIO_PEER_RANGE_SUFFIX,   /* bytes=-last: the last `last` bytes */
};

struct ffio_peer_req {
    bool head;       /* HEAD, else GET */
    bool keep_alive; /* HTTP/1.1 without "Connection: close", or 1.0 with keep-alive */
    bool not_found;  /* the target is not /ffr/NAME with a servable NAME */
    char name[256];  /* NAME, NUL-terminated, [A-Za-z0-9._-], not starting with '.' */
    enum ffio_peer_range range;
    uint64_t first, last;
};

/*
 * Parses the request head at the start of buf[0, n). Returns its length in bytes (> 0) when
 * complete, 0 when more bytes are needed, or -STATUS for an answer to give and close with:
 * -400 (malformed, or a body announced), -405 (not GET or HEAD), -431 (no end within
 * FFIO_PEER_HEAD_MAX bytes), -505 (not HTTP/1.0 or 1.1). Reads at most FFIO_PEER_HEAD_MAX bytes.
 */
int ffio_peer_parse(const char *buf, size_t n, struct ffio_peer_req *r);

#endif /* FFIO_INTERNAL_H */
