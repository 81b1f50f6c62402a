/*
 * ffio: batched random reads of file extents into caller (pinned) buffers.
 *
 * Layer L2 (docs/design.md): ffio knows extents (file, offset, length, destination), not records.
 * The ffr record reader and `ffr bench` are built on top of it.
 *
 * DESIGN SUMMARY
 *
 * API. An engine (struct ffio_engine) owns one io_uring ring, or one pread thread pool, or the
 * mmap state. Create it with ffio_engine_create() from options filled by ffio_opts_default();
 * add files (ffio_engine_add_file / ffio_engine_add_fd return small integer handles); optionally
 * register destination memory (ffio_engine_register_buffer); then loop:
 *
 *     size_t next = 0, landed = 0;
 *     while (landed < n) {
 *         if (next < n) {                                 // as many as there are free slots
 *             const int k = ffio_engine_submit(e, ext + next, n - next);
 *             if (k < 0) goto fail;
 *             next += (size_t)k;
 *         }
 *         const int got = ffio_engine_wait(e, comp, cap, 1);  // >= 1 completion, any order
 *         if (got < 0) goto fail;
 *         for (int i = 0; i < got; i++) check_and_decompress(&comp[i]);  // comp[i].tag says which
 *         landed += (size_t)got;
 *     }
 *
 * One submit call is one io_uring_submit; completions are reaped with io_uring_peek_batch_cqe and
 * one io_uring_cq_advance per batch; nothing is allocated per extent (bounce buffers are made once
 * per slot, the first time a slot needs one). ffio_engine_read() wraps the loop for simple callers.
 *
 * Engines. FFIO_ENGINE_URING: io_uring (liburing 2.3 API), one ring per engine, registered files
 * and buffers when enabled, SQPOLL on request, SINGLE_ISSUER|DEFER_TASKRUN when the kernel has them
 * (probed, falling back silently to plain rings). FFIO_ENGINE_PREAD: a small pool of threads doing
 * pread(2). FFIO_ENGINE_MMAP: memcpy from a read-only mapping of each file (page cache only).
 *
 * Fallback rules. FFIO_ENGINE_AUTO tries io_uring; if the ring cannot be created (ENOSYS on old
 * kernels, EPERM from seccomp or kernel.io_uring_disabled, ENOMEM), it uses the pread pool and
 * reports exactly one line through opts.log. The environment variable FFIO_FORCE_NO_URING=1 (or
 * opts.force_no_uring) makes the probe fail as if the kernel had no io_uring, to test that path.
 * FFIO_ENGINE_URING never falls back: it fails with the ring's error. A refused SQPOLL ring is
 * retried without SQPOLL (one log line); refused file or buffer registration is logged once and the
 * engine reads without it. The library never prints; without a log callback these lines are
 * dropped.
 *
 * O_DIRECT rules. With FFIO_DIRECT_AUTO (the default) and FFIO_DIRECT_ON, files are opened with
 * O_DIRECT. An extent whose file offset and destination address are multiples of
 * opts.direct_align (4096 by default: safe for every logical block size) is read straight into
 * the destination, in lengths that are multiples of the alignment. Whatever is left (an unaligned
 * head or tail, or a destination whose address is not aligned like the offset) is read as the
 * covering aligned range into a per-slot bounce buffer and copied out, so O_DIRECT files never
 * touch the page cache and the caller never sees the rounding. Where open(O_DIRECT) is refused
 * (EINVAL: tmpfs on older kernels, some network filesystems) FFIO_DIRECT_AUTO uses buffered reads
 * for that file with one log line, and FFIO_DIRECT_ON fails with -EINVAL. A read that the kernel
 * refuses with EINVAL on an O_DIRECT descriptor moves that file to buffered reads the same way.
 * FFIO_DIRECT_OFF always reads through the page cache. The mmap engine ignores O_DIRECT.
 * Records aligned to 4096 in the file (the ffr default) and destinations carved at 4096-aligned
 * addresses from ffio_pinned_alloc() memory take the zero-copy path; the first extent of an engine
 * that needs the bounce buffer logs one INFO line saying so. O_DIRECT pays off when the data set
 * is much larger than RAM (measured: ~3x the bytes at ~1/8 the CPU of buffered cold reads); when
 * it fits in RAM or several jobs share a node, FFIO_DIRECT_OFF lets the page cache serve repeats.
 *
 * Reads are never silently short. Short reads are continued, EINTR and EAGAIN are retried, and an
 * extent that ends past the end of the file completes with -ENODATA (also after the file was
 * truncated under an open engine); every other error (EIO...) is reported in the completion with
 * the file, offset, length and bytes read; ffio_engine_describe() formats it as one line:
 * "file data.ffr offset 4096: short read past end of file (got 100 of 8192 bytes)".
 *
 * Pinned memory. ffio_pinned_alloc() returns page-aligned memory: cudaHostAlloc memory when the
 * build has CUDA (HAVE_CUDA) and a GPU is present at run time, otherwise an anonymous mapping,
 * mlock'ed when RLIMIT_MEMLOCK allows and left unlocked when not (the kind says which;
 * ffio_pinned_cuda_status() says why CUDA's was not had). libcudart is loaded
 * with dlopen() at run time rather than linked, because (1) CUDA code may only live in
 * kernels/cuda and trainer/cuda (style rule 2) and this module is plain C with no CUDA headers,
 * (2) a CUDA build must still start and pass its tests on machines without a GPU or a driver
 * (CI, this VM), where linking libcudart would either fail to load or drag in driver
 * initialisation, and (3) only three entry points with a stable C ABI are needed.
 *
 * Threads. An engine is used by one thread at a time: create it, add files and register buffers
 * in any thread, but once the first extent is submitted every call on it (destroy included)
 * must come from that same thread (io_uring SINGLE_ISSUER / DEFER_TASKRUN rings require it). A
 * reader makes one engine per reader thread. The log callback runs in the thread calling into the
 * engine. Engines share nothing; different engines may be used concurrently. ffio_pinned_*,
 * ffio_strerror, ffio_uring_probe and the name/parse helpers are thread-safe.
 *
 * Errors. Functions return int: >= 0 success (may carry a count), < 0 a negative errno value.
 * ffio_strerror() names them.
 */
#ifndef FFIO_H
#define FFIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ffr.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FFIO_API __attribute__((visibility("default")))
#else
#define FFIO_API
#endif

/* An I/O engine: opaque; one per reader thread (see "Threads" above). */
struct ffio_engine;

/* Which I/O engine to use. */
enum ffio_engine_kind {
    FFIO_ENGINE_AUTO = 0,  /* io_uring, else the pread pool (with one log line) */
    FFIO_ENGINE_URING = 1, /* io_uring only; creation fails if the kernel refuses a ring */
    FFIO_ENGINE_PREAD = 2, /* a pool of threads doing pread(2) */
    FFIO_ENGINE_MMAP = 3,  /* memcpy from a read-only mapping; page cache only */
};

/* Whether files are opened with O_DIRECT (see "O_DIRECT rules" above). */
enum ffio_direct {
    FFIO_DIRECT_AUTO = 0, /* O_DIRECT where the filesystem accepts it, buffered where refused */
    FFIO_DIRECT_ON = 1,   /* O_DIRECT or fail with -EINVAL */
    FFIO_DIRECT_OFF = 2,  /* buffered (page cache) reads */
};

/* Severity of a log line. */
enum ffio_log_level {
    FFIO_LOG_INFO = 0, /* a choice the engine made that the user may want to know about */
    FFIO_LOG_WARN = 1, /* a fallback: something asked for is not in effect */
};

/*
 * Log callback: one line per call, no trailing newline, e.g.
 * "ffio: io_uring unavailable (...); using the pread thread pool (8 threads)".
 * ctx: opts.log_ctx. msg is valid only during the call. Called in the thread that called into
 * the engine (never from the pread pool's threads).
 */
typedef void (*ffio_log_fn)(void *ctx, enum ffio_log_level level, const char *msg);

/* Engine options; fill with ffio_opts_default() and then change fields. */
struct ffio_opts {
    enum ffio_engine_kind engine; /* default FFIO_ENGINE_AUTO */
    enum ffio_direct direct;      /* default FFIO_DIRECT_AUTO */
    unsigned queue_depth;         /* extents in flight (and ring size), 1..4096; default 64 */
    unsigned max_files;           /* files an engine can hold, 1..65536; default 64 */
    unsigned threads;             /* pread pool threads, 0 = min(queue_depth, 8); max 256 */
    unsigned direct_align;        /* O_DIRECT alignment in bytes, power of two 512..65536;
                                     default 4096 */
    size_t bounce_bytes;          /* per-slot bounce buffer for unaligned O_DIRECT reads, a
                                     multiple of direct_align, >= 2*direct_align; default 256 KiB.
                                     Larger unaligned extents are bounced in several steps. */
    bool register_files;          /* io_uring: use a registered (fixed) file table; default true */
    bool register_buffers;        /* io_uring: register memory passed to
                                     ffio_engine_register_buffer (read_fixed); default true */
    bool sqpoll;                  /* io_uring: kernel submission thread (IORING_SETUP_SQPOLL);
                                     default false */
    unsigned sqpoll_idle_ms;      /* SQPOLL thread idle time before it sleeps; default 50 */
    bool force_no_uring;          /* make the io_uring probe fail as if ENOSYS (tests; same as
                                     FFIO_FORCE_NO_URING=1 in the environment); default false */
    ffio_log_fn log;              /* optional log callback; NULL drops the lines */
    void *log_ctx;                /* passed to log */
};

/* One read: `length` bytes at `offset` of `file` into `dst`. */
struct ffio_extent {
    void *dst;       /* destination, >= length bytes; borrowed from the caller and written until
                        the extent's completion has been returned by ffio_engine_wait() */
    uint64_t offset; /* byte offset in the file; offset + length <= INT64_MAX */
    uint64_t length; /* bytes to read; 0 completes at once with res 0 */
    uint64_t tag;    /* opaque caller value, returned in the completion */
    uint32_t file;   /* handle from ffio_engine_add_file() / ffio_engine_add_fd() */
    uint32_t flags;  /* reserved, must be 0 */
};

/* The outcome of one extent. */
struct ffio_completion {
    uint64_t tag;    /* the extent's tag */
    int64_t res;     /* == length on success; otherwise a negative error: -ENODATA when the
                        extent ends past the end of the file, -EIO etc. from the kernel */
    void *dst;       /* the extent's destination */
    uint64_t offset; /* the extent's offset */
    uint64_t length; /* the extent's length */
    uint64_t done;   /* bytes that landed at dst[0, done); == length on success */
    uint32_t file;   /* the extent's file handle */
    uint32_t flags;  /* reserved, 0 */
};

/* What an engine actually does after the fallbacks, and its counters. */
struct ffio_engine_info {
    enum ffio_engine_kind kind;  /* engine in use: URING, PREAD or MMAP (never AUTO) */
    int uring_rc;                /* 0, or why io_uring is not used (negative errno) */
    unsigned queue_depth;        /* extents in flight at most */
    unsigned threads;            /* pread pool threads; 0 for other engines */
    unsigned direct_align;       /* O_DIRECT alignment in bytes */
    bool sqpoll;                 /* SQPOLL ring in use */
    bool defer_taskrun;          /* SINGLE_ISSUER|DEFER_TASKRUN ring in use */
    bool registered_files;       /* fixed file table in use */
    unsigned registered_buffers; /* iovecs registered with the ring (0 = none) */
    uint32_t uring_flags;        /* IORING_SETUP_* flags of the ring; 0 when not io_uring */
    uint64_t extents;            /* extents completed (returned by wait) */
    uint64_t bytes;              /* bytes landed in destinations */
    uint64_t errors;             /* extents completed with res < 0 */
    uint64_t short_reads;        /* reads that returned less than asked and were continued */
    uint64_t retries;            /* reads retried after EINTR or EAGAIN */
    uint64_t bounced;            /* reads that went through a bounce buffer */
    uint64_t fixed_reads;        /* reads into registered buffers (read_fixed) */
};

/* What an engine knows about one of its files. */
struct ffio_file_info {
    const char *name; /* name given at registration; valid until the engine is destroyed */
    bool direct;      /* reads use O_DIRECT (false after a fallback to buffered) */
    int fd;           /* descriptor used for reads (borrowed view: do not close) */
};

/*
 * Fill *opts with the defaults documented in struct ffio_opts.
 * opts: out. Thread-safe.
 */
FFIO_API void ffio_opts_default(struct ffio_opts *opts);

/*
 * Create an engine.
 * opts: options (NULL = defaults); copied, need not outlive the call. out: the new engine.
 * Returns 0, or -EINVAL (bad option), -ENOMEM, -ENOSYS/-EPERM/... (engine FFIO_ENGINE_URING and
 * the kernel refused a ring; for FFIO_ENGINE_AUTO this is a fallback instead), -EAGAIN (threads).
 * On error *out is NULL. The log callback may be called during creation.
 */
FFIO_API int ffio_engine_create(const struct ffio_opts *opts, struct ffio_engine **out);

/*
 * Destroy an engine: waits for extents still in flight (their destinations are no longer written
 * when this returns; their completions are dropped), closes the files it opened, unmaps, frees.
 * e: NULL is accepted. Borrowed descriptors (ffio_engine_add_fd) are not closed.
 */
FFIO_API void ffio_engine_destroy(struct ffio_engine *e);

/*
 * Open `path` read-only (O_DIRECT per opts.direct) and add it to the engine.
 * Returns the file handle (>= 0, small and dense: 0, 1, 2...) for struct ffio_extent.file, or
 * -ENOSPC (opts.max_files reached), -EINVAL (O_DIRECT refused with FFIO_DIRECT_ON, or a path
 * longer than PATH_MAX), -EISDIR, -ENOMEM, or the error of open(2)/fstat/mmap (-ENOENT,
 * -EACCES...).
 * The engine owns the descriptor and closes it in ffio_engine_destroy. `path` is copied and is
 * the name used in error messages.
 */
FFIO_API int ffio_engine_add_file(struct ffio_engine *e, const char *path);

/*
 * Add an already open descriptor. The engine borrows fd (never closes it; it must stay open until
 * the engine is destroyed) and reads it as it is: O_DIRECT when fd was opened with O_DIRECT, else
 * buffered. If reads on an O_DIRECT fd are refused with EINVAL, the engine reopens the file
 * buffered through /proc/self/fd and owns that second descriptor.
 * name: for error messages (copied; NULL = "fd N"). Returns the handle or -EBADF, -ENOSPC, -ENOMEM.
 */
FFIO_API int ffio_engine_add_fd(struct ffio_engine *e, int fd, const char *name);

/*
 * Register [base, base + len) as a destination region: with the io_uring engine and
 * opts.register_buffers, extents whose destination lies inside it use read_fixed (no per-read page
 * pinning). Typically the memory comes from ffio_pinned_alloc(). Regions over 1 GiB are split.
 * The memory is borrowed and must stay mapped until the engine is destroyed.
 * Returns 1 if the ring registered it, 0 if it was accepted without registration (other engines,
 * option off, or the kernel refused: logged once), -EBUSY if extents are in flight, -EINVAL (NULL
 * or empty), -ENOSPC (more than 64 regions after splitting).
 */
FFIO_API int ffio_engine_register_buffer(struct ffio_engine *e, void *base, size_t len);

/*
 * Queue up to n extents and start reading them (one io_uring_submit for the whole call).
 * Accepts min(n, free slots) extents, in order, where free slots = queue_depth minus extents
 * submitted and not yet returned by ffio_engine_wait.
 * Returns the number accepted (0 when the queue is full: call ffio_engine_wait), or -EBADF (an
 * extent names an unknown file), -EINVAL (NULL dst with length > 0, nonzero flags, offset + length
 * past INT64_MAX), in which case no extent of the call was queued, or an error of the ring.
 * Errors of the reads themselves (EOF, EIO) are reported in completions, not here.
 * The extent array is copied; the destinations are borrowed until their completions are returned.
 */
FFIO_API int ffio_engine_submit(struct ffio_engine *e, const struct ffio_extent *ext, size_t n);

/*
 * Return finished extents, in completion order, into out[0, cap).
 * Blocks until at least min(min_complete, cap, extents outstanding) completions are available;
 * min_complete = 0 only polls. Returns the number written (0 when nothing is outstanding, or none
 * finished while polling), or a negative error of the ring itself (not of a read): the engine is
 * then unusable, every later submit/wait returns the same error, and it should be destroyed.
 * Once returned, an extent's destination is no longer touched by the engine.
 */
FFIO_API int ffio_engine_wait(struct ffio_engine *e, struct ffio_completion *out, size_t cap,
                              size_t min_complete);

/*
 * Read n extents and wait for all of them: submit and wait in a loop.
 * comp: out, n entries; comp[i] belongs to ext[i]. Extents submitted earlier by the caller must
 * all have been waited for (-EBUSY otherwise).
 * Returns the number of extents that failed (0 = all complete; see comp[i].res), or a negative
 * error as from ffio_engine_submit / ffio_engine_wait.
 */
FFIO_API int ffio_engine_read(struct ffio_engine *e, const struct ffio_extent *ext, size_t n,
                              struct ffio_completion *comp);

/*
 * Format a completion as one line, e.g. "file a.ffr offset 8192: short read past end of file
 * (got 100 of 4096 bytes)" or "file a.ffr offset 0 length 4096: Input/output error (after 0 of
 * 4096 bytes)"; successes read "file a.ffr offset 0: ok (4096 bytes)".
 * buf: out, cap bytes, always NUL-terminated when cap > 0. Returns what snprintf returns.
 */
FFIO_API int ffio_engine_describe(const struct ffio_engine *e, const struct ffio_completion *c,
                                  char *buf, size_t cap);

/* Fill *out with the engine's configuration and counters. out: out. */
FFIO_API void ffio_engine_info(const struct ffio_engine *e, struct ffio_engine_info *out);

/* Fill *out for file handle `file`. Returns 0 or -EBADF. out: out. */
FFIO_API int ffio_engine_file_info(const struct ffio_engine *e, uint32_t file,
                                   struct ffio_file_info *out);

/*
 * Bytes of destination memory a caller needs to place each of the n extents at an address
 * aligned to `align` (a power of two; e.g. info.direct_align), i.e. the sum of the lengths each
 * rounded up to `align`; the size to carve from a pinned pool for a batch. Saturates at SIZE_MAX.
 */
FFIO_API size_t ffio_batch_bytes(const struct ffio_extent *ext, size_t n, size_t align);

/*
 * Whether this process can create an io_uring ring now: 0, or the negative errno of
 * io_uring_queue_init (-ENOSYS when forced off by FFIO_FORCE_NO_URING). Thread-safe.
 */
FFIO_API int ffio_uring_probe(void);

/* "auto", "uring", "pread", "mmap"; "?" for other values. Thread-safe. */
FFIO_API const char *ffio_engine_kind_name(enum ffio_engine_kind kind);

/* Parse a name from ffio_engine_kind_name into *out. Returns 0 or -EINVAL. out: out. */
FFIO_API int ffio_engine_kind_parse(const char *name, enum ffio_engine_kind *out);

/*
 * A static string for an error code from this module: "read past end of file (short read)" for
 * -ENODATA, otherwise the system's description of -rc; "success" for rc >= 0. Thread-safe.
 */
FFIO_API const char *ffio_strerror(int rc);

/* How a pinned region was obtained. */
enum ffio_pinned_kind {
    FFIO_PINNED_CUDA = 0,     /* cudaHostAlloc (page-locked, registered with the CUDA driver) */
    FFIO_PINNED_LOCKED = 1,   /* anonymous mapping locked with mlock */
    FFIO_PINNED_PAGEABLE = 2, /* anonymous mapping; mlock was not allowed (RLIMIT_MEMLOCK) */
};

/* Flags for ffio_pinned_alloc. */
#define FFIO_PINNED_HOST_ONLY 1u /* never use cudaHostAlloc, even with a GPU present */

/* A page-aligned region from ffio_pinned_alloc. Owned by the caller; free with ffio_pinned_free. */
struct ffio_pinned {
    void *ptr;                  /* start, page-aligned (>= 4096); NULL when empty */
    size_t size;                /* usable bytes: the request rounded up to the page size */
    enum ffio_pinned_kind kind; /* how it was obtained */
};

/*
 * Allocate `size` bytes of pinned (or at least page-aligned) host memory, zero-filled.
 * flags: 0 or FFIO_PINNED_HOST_ONLY. out: out; zeroed on error.
 * Returns 0, -EINVAL (size 0), or -ENOMEM. A refused mlock is not an error (kind says so).
 * Thread-safe; the first call may load libcudart (CUDA builds only) and initialise the driver.
 */
FFIO_API int ffio_pinned_alloc(size_t size, unsigned flags, struct ffio_pinned *out);

/* Free a region from ffio_pinned_alloc and zero *p. NULL or an empty region is accepted. */
FFIO_API void ffio_pinned_free(struct ffio_pinned *p);

/* Name of a pinned kind: "cuda", "locked", "pageable". Thread-safe. */
FFIO_API const char *ffio_pinned_kind_name(enum ffio_pinned_kind kind);

/*
 * Whether ffio_pinned_alloc can return CUDA-pinned memory in this process: "" when it can, else
 * one line saying why not ("libcudart.so.13 not found (looked in ...)", "no CUDA device", "this
 * build has no CUDA"). Loads the runtime on the first call; thread-safe. Programs that upload
 * to a GPU print it once when it is not "": without pinned memory every upload is a synchronous
 * staged copy and loading no longer overlaps compute.
 */
FFIO_API const char *ffio_pinned_cuda_status(void);

/* ---------------------------------------------------------------------------------------- */
/* ffr records over an engine: the trainer's data path.                                     */
/*
 * Reads whole records of an open ffr dataset (ffr.h) through one engine: each record's frame
 * extent (offset and extent_len from ffr_reader_info, aligned for O_DIRECT by the format) lands
 * in a caller buffer, and as each completion arrives its frame header is checked against the
 * index, its data hash verified (xxh3, at memory speed) and, for zstd records, decoded into the
 * caller's destination. Raw records can stay where they landed (zero copy).
 * Same threading rule as the engine: one ffio_records per reader thread.
 */
struct ffio_records;

struct ffio_records_opts {
    struct ffio_opts io; /* engine options (ffio_opts_default) */
    bool verify;         /* check each record's data hash as it lands (default true) */
    bool decode;         /* decode records (default true); false: check only, and `payload`
                            points at the stored bytes, `result` is the stored length */
};

/* Fills *o: ffio_opts_default for the engine, verify and decode on. */
FFIO_API void ffio_records_opts_default(struct ffio_records_opts *o);

/*
 * Creates a record reader over `r` (borrowed: it must outlive the result) with its own engine,
 * to which every shard of r is added by path. Returns 0 or an ffio_engine_create /
 * ffio_engine_add_file error.
 */
FFIO_API int ffio_records_open(const struct ffr_reader *r, const struct ffio_records_opts *o,
                               struct ffio_records **out);

/* Destroys it (and its engine). Accepts NULL. */
FFIO_API void ffio_records_close(struct ffio_records *rr);

/* The engine underneath, e.g. for ffio_engine_info or ffio_engine_register_buffer. */
FFIO_API struct ffio_engine *ffio_records_engine(struct ffio_records *rr);

/* One record to read. */
struct ffio_record_req {
    uint64_t index;      /* in: global record number */
    void *extent;        /* in: receives the frame extent, >= extent_len bytes (ffr_reader_info);
                            4096-aligned memory (ffio_pinned_alloc) takes the O_DIRECT zero-copy path */
    size_t extent_cap;   /* in: bytes at extent */
    void *dst;           /* in: decoded record destination, or NULL to leave raw records in place
                            (zstd records then fail with -EINVAL) */
    size_t dst_cap;      /* in: bytes at dst */
    const void *payload; /* out: the decoded record: dst, or inside extent for a raw record read
                            with dst == NULL */
    int64_t result;      /* out: raw length, or a negative error (-ENODATA, -EIO, -FFR_ECHECKSUM,
                            -FFR_ECORRUPT, -FFR_ETOOBIG when a buffer is too small, -EINVAL) */
};

/*
 * Reads n records, keeping up to the engine's queue depth in flight, and checks and decodes each
 * as it lands. Returns the number of requests that failed (their `result` says why; 0 = all good)
 * or a negative error when the engine itself failed (then results are not meaningful).
 */
FFIO_API int ffio_records_read(struct ffio_records *rr, struct ffio_record_req *reqs, size_t n);

/*
 * ffio_records_read in two halves, so that a thread can keep records in flight while it works:
 * submit starts reading reqs[0, n) (as many extents as the queue takes; the rest follow as room
 * frees) and returns; wait, with the same reqs and n, blocks until all of them have landed and
 * been checked, and returns what ffio_records_read returns. Up to 8 batches may be outstanding;
 * waits may come in any order, and completions of other batches that land meanwhile are checked
 * and decoded into their own requests. reqs and every buffer it names are borrowed until its
 * wait returns. Requests that fail before reading (an unknown record, a small buffer) get their
 * result at once and are counted by the wait.
 * submit returns 0, -EINVAL (n == 0, NULL reqs), -EBUSY (8 batches outstanding, or reqs already
 * is one), -ENOMEM, or the engine's error (then the reader is unusable: every later call returns
 * it); wait returns -EINVAL when reqs/n name no outstanding batch. ffio_records_close lets
 * extents in flight land before it frees anything.
 */
FFIO_API int ffio_records_submit(struct ffio_records *rr, struct ffio_record_req *reqs, size_t n);
FFIO_API int ffio_records_wait(struct ffio_records *rr, struct ffio_record_req *reqs, size_t n);

/* Formats a failed request as one line naming the file, shard, record and offset. */
FFIO_API int ffio_records_describe(const struct ffio_records *rr, const struct ffio_record_req *req,
                                   char *buf, size_t cap);

/* ---------------------------------------------------------------------------------------- */
/* --- share: extents and records over HTTP(S) (ffio_http.c; docs/sharing.md) ---             */
/*
 * Reads byte ranges of URLs with HTTP Range requests (libcurl; the build may leave it out:
 * ffio_http_available() says), several in flight at once on one curl multi handle, which keeps
 * connections alive between requests. A transfer that fails on the way (refused or dropped
 * connection, timeout, a 5xx or 408/429 answer, a body shorter than asked) is retried after a
 * backoff that doubles each time (opts.backoff_ms, up to 5 s), resuming after the bytes already
 * received; a range is complete only when exactly its bytes arrived in a 206 answer whose
 * Content-Range names them, so a truncated body is never accepted. Other answers fail at once:
 * 404 -ENOENT, 401/403 -EACCES, 416 -ENODATA (past the end), a server that ignores Range
 * -EPROTO. ffio_http_last_error() then gives one line with the URL, offset, length and cause.
 *
 * The remote reader (ffio_remote_*) opens an ffr file or manifest by URL: it fetches each
 * file's header, trailer and index with range requests into a sparse local skeleton that
 * ffr_reader_open checks as it checks any file (hashes, layout), then reads records as extents
 * over HTTP and checks and decodes each with ffr_frame_decode, like ffio_records_read.
 *
 * s3://BUCKET/KEY URLs are read the same way, signed with AWS Signature V4 by libcurl
 * (CURLOPT_AWS_SIGV4; the project computes no HMAC) with the credentials, region and endpoint of
 * a struct ffio_s3_config (opts.s3, or the AWS environment and files, loaded at the first s3://
 * URL). An S3 answer's <Error> body is read: RequestTimeout, SlowDown, InternalError and
 * ServiceUnavailable are retried like a 5xx; NoSuchKey and NoSuchBucket are -ENOENT,
 * SignatureDoesNotMatch, InvalidAccessKeyId and InvalidToken -EKEYREJECTED, ExpiredToken
 * -EKEYEXPIRED, AccessDenied and RequestTimeTooSkewed -EACCES; the error line names the bucket,
 * the key, the server's code and message, and what to do. Presigned https URLs stay plain URLs.
 *
 * Threads: a struct ffio_http (and a struct ffio_remote, which uses one) is used by one thread
 * at a time. ffio_http_available and ffio_http_opts_default are thread-safe.
 */

/*
 * Where S3 requests go and how they are signed. ffio_s3_config_load fills it as the AWS CLI
 * would, first found wins:
 *   keys    AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the profile's
 *           aws_access_key_id, aws_secret_access_key, aws_session_token in
 *           AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), then in AWS_CONFIG_FILE
 *           (~/.aws/config); the profile is AWS_PROFILE, else AWS_DEFAULT_PROFILE, else
 *           "default" ("[NAME]" in the credentials file, "[profile NAME]" in the config file);
 *           none at all: requests go unsigned (public buckets).
 *   region  AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1. curl cannot
 *           infer it from a custom endpoint, so it is always passed.
 *   endpoint AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url; else AWS.
 *   style   the profile's "s3 =" sub-section addressing_style (path | virtual); else path-style
 *           (ENDPOINT/BUCKET/KEY) for a custom endpoint, and for AWS virtual-hosted
 *           (https://BUCKET.s3.REGION.amazonaws.com/KEY) unless the bucket name has a dot.
 */
struct ffio_s3_config {
    char access_key_id[128];
    char secret_access_key[256];
    char session_token[4096]; /* sent as x-amz-security-token */
    char region[64];
    char endpoint[512]; /* "" = AWS; else scheme://host[:port] (a path is kept as a prefix) */
    bool path_style;
    char source[600]; /* where the keys came from, for messages ("environment", a file and
                         profile, or "none: requests are unsigned") */
};

/* Fills *c as above. Returns 0, or -EINVAL (a value too long, a malformed file: err says which
 * file and line) or -errno reading a file that exists (a FIFO or device is refused). A file that
 * does not exist is not an error. Thread-safe (reads the environment). */
FFIO_API int ffio_s3_config_load(struct ffio_s3_config *c, char *err, size_t err_cap);

/* 1 when path is an s3:// URL. Thread-safe. */
FFIO_API bool ffio_s3_is_url(const char *path);

/* Writes the http(s) URL that s3_url ("s3://BUCKET/KEY") is requested at under c: the key
 * RFC 3986-encoded ('/' kept). Returns 0, -EINVAL (not s3://BUCKET/..., a bucket name S3 does
 * not allow) or -ENAMETOOLONG. Thread-safe. */
FFIO_API int ffio_s3_http_url(const struct ffio_s3_config *c, const char *s3_url, char *out,
                              size_t cap);

/* HTTP client options; fill with ffio_http_opts_default(). */
struct ffio_http_opts {
    unsigned max_in_flight;      /* transfers at once, 1..256; default 8 */
    unsigned retries;            /* further attempts of a transfer that fail in a row
                                    without bringing a new byte; default 6 */
    unsigned backoff_ms;         /* delay before the first retry, doubled each time, at most
                                    5000; default 50 */
    unsigned connect_timeout_ms; /* default 10000 */
    unsigned stall_timeout_s;    /* abort (and retry) a transfer that moves under 1 KiB/s for
                                    this long; default 30 */
    size_t fetch_chunk;          /* ffio_http_fetch: bytes per range request; default 8 MiB */
    unsigned read_deadline_s;    /* every range read, all its attempts together, must end within
                                    this many seconds plus one per 64 KiB of it (a minimum rate
                                    over the whole read), else it fails with -ETIMEDOUT: a server
                                    that trickles a few bytes per answer cannot reset the retry
                                    budget for ever; default 60 */
    uint64_t max_index_bytes;    /* ffio_remote_open refuses a file whose trailer claims a larger
                                    index (-FFR_ETOOBIG), before fetching it; default 1 GiB */
    bool tls_verify;             /* check https certificates and host names; default true */
    ffio_log_fn log;             /* optional: one line per retry (FFIO_LOG_WARN) */
    void *log_ctx;               /* passed to log */
    const struct ffio_s3_config *s3; /* optional (copied): how s3:// URLs are signed and where
                                        they go; NULL: ffio_s3_config_load at the first one */
    uint64_t put_threshold; /* ffio_s3_put: one PUT up to this size, multipart above; default
                               8 MiB (the AWS CLI's multipart_threshold) */
    uint64_t put_part;      /* ffio_s3_put: bytes per part, at least 5 MiB (S3's minimum), raised
                               where a file would need more than 10,000 parts; default 8 MiB.
                               A multipart upload holds max_in_flight parts in memory at once */
    unsigned list_page;     /* ffio_s3_list: keys asked for per request, 1..1000; default 1000 */
};

/* Fills *o with the defaults above. */
FFIO_API void ffio_http_opts_default(struct ffio_http_opts *o);

/* Whether this build can read URLs (it was built with libcurl). Thread-safe. */
FFIO_API bool ffio_http_available(void);

/* 1 when path is an http://, https:// or s3:// URL. Thread-safe. */
FFIO_API bool ffio_http_is_url(const char *path);

struct ffio_http;

/*
 * Creates a client. opts may be NULL (defaults; copied). Returns 0, -EINVAL (bad options),
 * -ENOMEM, or -ENOTSUP when the build has no libcurl. On success *out owns the client.
 */
FFIO_API int ffio_http_create(const struct ffio_http_opts *opts, struct ffio_http **out);

/* Frees the client and closes its connections. Accepts NULL. */
FFIO_API void ffio_http_destroy(struct ffio_http *h);

/* Sets *size to the bytes of url (a HEAD request, retried as above; for s3:// a one-byte GET,
 * whose Content-Range gives the size and whose error body says why it failed). Returns 0 or an
 * error as above (-ENOENT, -EACCES, -EIO after the retries, -EPROTO without a size). */
FFIO_API int ffio_http_size(struct ffio_http *h, const char *url, uint64_t *size);

/* One range of a URL to read. */
struct ffio_http_extent {
    const char *url; /* in: borrowed until ffio_http_read returns */
    void *dst;       /* in: receives `length` bytes */
    uint64_t offset; /* in: first byte */
    uint64_t length; /* in: bytes; 0 completes at once */
    int64_t res;     /* out: length, or a negative error (the range's bytes at dst are then not
                        meaningful) */
};

/*
 * Reads n ranges, up to opts.max_in_flight at once, retrying as above. Returns the number of
 * ranges that failed (see res; ffio_http_last_error describes the first), or -EINVAL / -ENOMEM
 * when nothing could be started.
 */
FFIO_API int ffio_http_read(struct ffio_http *h, struct ffio_http_extent *x, size_t n);

/*
 * Writes bytes [0, size) of url into fd at the same offsets, in ranges of opts.fetch_chunk
 * read in parallel. Returns 0 or the error of the first failed range.
 */
FFIO_API int ffio_http_fetch(struct ffio_http *h, const char *url, int fd, uint64_t size);

/* The last failure as one line ("URL offset O length L: cause, after N attempts"); "" when
 * none. Valid until the next call on h. */
FFIO_API const char *ffio_http_last_error(const struct ffio_http *h);

/* Counters since creation. */
struct ffio_http_stats {
    uint64_t requests;   /* HTTP requests sent, retries included */
    uint64_t retries;    /* transfers restarted after a failure */
    uint64_t bytes;      /* body bytes accepted */
    uint64_t bytes_sent; /* request body bytes S3 accepted (uploads) */
};

/* Fills *out. */
FFIO_API void ffio_http_stats(const struct ffio_http *h, struct ffio_http_stats *out);

/* Fills *out so that an ffr cache (ffr_cache_opts.source) fetches URLs through h (borrowed:
 * it must outlive the cache). Local paths given to that cache are still copied as files. */
FFIO_API void ffio_http_cache_source(struct ffio_http *h, struct ffr_cache_source *out);

/*
 * ffr_cache_dataset from any source: opens the cache at dir with *co (NULL: the defaults; its
 * source is replaced) whose source, when src is a URL (http(s):// or s3://), is an HTTP client
 * of default options; makes every shard of src present and verified; closes both. Returns what
 * ffr_cache_dataset returns (the shards fetched, or a negative error: -ENOTSUP for a URL in a
 * build without libcurl) with the cached manifest's path in local and, on failure, one line in
 * err naming the source.
 */
FFIO_API int ffio_cache_dataset(const char *dir, const struct ffr_cache_opts *co, const char *src,
                                char *local, size_t local_cap, char *err, size_t err_cap);

/* --- share: writing to S3 (ffio_s3_ops.c; docs/sharing.md) ---
 *
 * Requests other than range reads, on the same client (connections, retries, deadlines and S3
 * error messages as above): uploads, listings, deletions. Every upload's body is signed with its
 * SHA-256 (x-amz-content-sha256), so S3 refuses bytes changed on the way (the "each
 * part's checksum"); the hash is OpenSSL's libcrypto. Each request is retried like a range read
 * (5xx, 408/429, RequestTimeout, SlowDown, InternalError, a dropped connection), from its first
 * byte, within opts.read_deadline_s plus one second per 64 KiB of its body.
 */

/*
 * Uploads the first size bytes of fd to url (s3://BUCKET/KEY), replacing any object there only
 * once complete (S3 makes an object visible whole or not at all). Up to opts.put_threshold: one
 * PUT. Above: a multipart upload, up to opts.max_in_flight parts in flight, each read with
 * pread as its turn comes (memory: max_in_flight parts); CompleteMultipartUpload's answer is
 * read in full, since S3 may answer 200 and still report an <Error> in its body. On any failure
 * the multipart upload is aborted (AbortMultipartUpload), so no parts are left to be billed.
 * Returns 0, or a negative errno with ffio_http_last_error naming the URL, part and cause.
 */
FFIO_API int ffio_s3_put(struct ffio_http *h, const char *url, int fd, uint64_t size);

/* Deletes the object at url (s3://BUCKET/KEY); an absent object is no error (S3 says 204 either
 * way). Returns 0 or a negative errno (ffio_http_last_error says why). */
FFIO_API int ffio_s3_delete(struct ffio_http *h, const char *url);

/* An object ffio_s3_list found. */
struct ffio_s3_object {
    char *key; /* the whole key (not only the part after the prefix); owned */
    uint64_t size;
};

/*
 * Lists the objects whose keys start with url_prefix's key part (s3://BUCKET/PREFIX) with
 * ListObjectsV2, following continuation tokens page after page (opts.list_page keys each). More
 * than max objects fail with -EOVERFLOW (a bound on memory: about 1 KiB an object at worst).
 * Keys come in S3's order (UTF-8 binary). On success *out (free with ffio_s3_objects_free) holds
 * *n objects. Returns 0 or a negative errno (ffio_http_last_error says why).
 */
FFIO_API int ffio_s3_list(struct ffio_http *h, const char *url_prefix, size_t max,
                          struct ffio_s3_object **out, size_t *n);
FFIO_API void ffio_s3_objects_free(struct ffio_s3_object *o, size_t n);

/*
 * A dataset upload for an ffr writer (ffr_writer_opts.publish/taken/sink): what yolo-pack -o
 * s3://BUCKET/PREFIX/NAME.ffr uses. The writer writes into a local staging directory; each
 * finished shard is handed to the sink, queued (at most two wait: a bound on staging space of
 * three shards with the one being written) and uploaded by the sink's thread while the next one
 * is written; the manifest (or the single file) is uploaded last, after every shard is in place
 * and listed at its size, so a reader never sees a partial dataset. Shards never take a name an
 * object under the prefix already has (the dataset being replaced keeps its objects until the
 * new manifest is in place); ffio_s3_sink_finish then deletes the replaced dataset's shards that
 * the new manifest does not name. ffio_s3_sink_abort deletes every shard uploaded so far.
 * Incomplete multipart uploads of a killed process are S3's to expire (a lifecycle rule with
 * AbortIncompleteMultipartUpload; docs/sharing.md).
 */
struct ffio_s3_sink;

/* Lists what is under the destination and reads the manifest being replaced, if any. opts may
 * be NULL for the defaults. Returns 0, or a negative errno with one line in err. */
FFIO_API int ffio_s3_sink_open(const struct ffio_http_opts *opts, const char *url,
                               struct ffio_s3_sink **out, char *err, size_t err_cap);
/* The hooks for ffr_writer_opts (sink = the struct ffio_s3_sink). */
FFIO_API int ffio_s3_sink_publish(void *sink, const char *tmp_path, const char *name, int last);
FFIO_API bool ffio_s3_sink_taken(void *sink, const char *name);

struct ffio_s3_sink_stats {
    uint64_t files;       /* objects uploaded, the manifest included */
    uint64_t bytes;       /* their bytes */
    double upload_s;      /* seconds the uploads took (they overlap the packing) */
    double wait_s;        /* seconds the writer waited for the queue or the last upload */
    uint64_t deleted;     /* shards of the replaced dataset deleted */
    uint64_t not_deleted; /* ... that could not be (err says the first) */
    uint64_t unnamed;     /* objects found at open that look like shards of this dataset
                             (STEM-N.ffr, STEM.TAG-N.ffr) but no manifest names: left by an
                             interrupted upload; reported, never deleted (another job may be
                             writing them now) */
};

/* After the writer's close succeeded: deletes the replaced dataset's shards that the new one
 * does not use, fills *st (may be NULL) and frees the sink. Returns 0, or the first deletion
 * error (the new dataset is complete either way) with a line in err. */
FFIO_API int ffio_s3_sink_finish(struct ffio_s3_sink *s, struct ffio_s3_sink_stats *st, char *err,
                                 size_t err_cap);
/* After a failure or an interruption: stops the uploads, deletes the shards already uploaded
 * (no manifest names them) and frees the sink. Accepts NULL. */
FFIO_API void ffio_s3_sink_abort(struct ffio_s3_sink *s);
/* The first upload error, one line ("" when none). */
FFIO_API const char *ffio_s3_sink_error(const struct ffio_s3_sink *s);

struct ffio_remote;

/*
 * Opens the ffr file or manifest at url (shards are fetched beside it: the manifest's
 * directory URL plus each file name). h is borrowed and must outlive the result. opts may be
 * NULL. Returns 0, an ffr_reader_open error (the skeleton is checked as a local file would be),
 * or an HTTP error as above; err gets one line naming the URL.
 */
FFIO_API int ffio_remote_open(struct ffio_http *h, const char *url,
                              const struct ffr_reader_opts *opts, struct ffio_remote **out,
                              char *err, size_t err_cap);

/* Closes it. Accepts NULL. */
FFIO_API void ffio_remote_close(struct ffio_remote *rm);

/* The reader over the skeleton: count, info, summaries, metadata (its record reads are not
 * meaningful: use ffio_remote_read). Valid while rm lives. */
FFIO_API const struct ffr_reader *ffio_remote_reader(const struct ffio_remote *rm);

/* The URL of shard k, or NULL. */
FFIO_API const char *ffio_remote_url(const struct ffio_remote *rm, uint32_t k);

/*
 * Reads n records as ffio_records_read does (same request fields and results; `extent` needs
 * only frame_len bytes, any alignment). Every record's frame and data hash are checked. With
 * dst NULL nothing is decoded: `payload` points at the stored bytes in `extent` and `result`
 * is the stored length (for a raw record, the record itself). Returns the number of failed
 * requests, or a negative error when nothing could be started.
 */
FFIO_API int ffio_remote_read(struct ffio_remote *rm, struct ffio_record_req *reqs, size_t n);
/* --- end share --- */

/* --- share: peers (ffio_peer.c; docs/sharing.md section 7) ---                             */
/*
 * Each node of a job serves its shard cache to the others, read-only, and asks them before
 * the origin. The bytes a peer sends are checked by the asking cache against the manifest, as
 * the origin's are, so a peer never needs to be trusted.
 */

struct ffio_peer_server_opts {
    const char *bind_host;   /* address to listen on; NULL: every interface */
    int port;                /* 0: any free port (ffio_peer_server_port says which) */
    unsigned max_conns;      /* connections at once, 1..4096; default 64 */
    unsigned head_timeout_s; /* a request head must arrive within this; default 10 */
    unsigned idle_timeout_s; /* a connection that moves nothing this long is closed; 30 */
    bool entries_only;       /* serve only names shaped like ffr_cache shard entries
                                (INDEXHASH-BYTES-FILE); default true */
};

FFIO_API void ffio_peer_server_opts_default(struct ffio_peer_server_opts *o);

struct ffio_peer_server;

/*
 * Serves the files of dir (a cache directory) over HTTP/1.1 from a thread of its own: GET and
 * HEAD of /ffr/NAME, one byte range per request (the contract at the top of ffio_peer.c).
 * Returns 0 (*out: stop it with ffio_peer_server_stop), -EINVAL, -ENOMEM, or -errno of the
 * directory or the socket, with one line in err.
 */
FFIO_API int ffio_peer_serve(const char *dir, const struct ffio_peer_server_opts *opts,
                             struct ffio_peer_server **out, char *err, size_t err_cap);

/* The port it listens on. */
FFIO_API int ffio_peer_server_port(const struct ffio_peer_server *s);

struct ffio_peer_server_stats {
    uint64_t requests;      /* requests answered (not counting refused heads) */
    uint64_t bytes;         /* body bytes sent */
    uint64_t not_found;     /* 404 answers */
    uint64_t refused;       /* 400/405/416/431/505 answers */
    uint64_t conns;         /* connections accepted */
    uint64_t conns_refused; /* connections closed at once: max_conns were open */
};

/* Fills *out (thread-safe while it serves). */
FFIO_API void ffio_peer_server_stats(struct ffio_peer_server *s,
                                     struct ffio_peer_server_stats *out);

/* Stops the thread, closes every connection and frees s. Accepts NULL. */
FFIO_API void ffio_peer_server_stop(struct ffio_peer_server *s);

struct ffio_peers;

/*
 * A client of the other nodes' servers, to be given to an ffr cache as its peers
 * (ffio_peers_cache_hooks). http: the client's options (NULL: a peer is given up on within
 * seconds: 2 s to connect, 5 s without progress, 2 retries, 20 s per range). log gets one line
 * per peer avoided. Returns 0, -ENOMEM or -ENOTSUP (no libcurl in this build).
 */
FFIO_API int ffio_peers_create(const struct ffio_http_opts *http, ffio_log_fn log, void *log_ctx,
                               struct ffio_peers **out);

/* Frees p. Accepts NULL. */
FFIO_API void ffio_peers_destroy(struct ffio_peers *p);

/* Adds the peer serving at host:port; returns its number (0, 1, ...) or -EINVAL / -ENOMEM. */
FFIO_API int ffio_peers_add(struct ffio_peers *p, const char *host, int port);

/* Records that peer holds (or will hold) the cache entry `entry` (ffr_cache_entry_name). An
 * entry may have several holders; they are asked in turn. Returns 0, -EINVAL or -ENOMEM. */
FFIO_API int ffio_peers_hold(struct ffio_peers *p, const char *entry, int peer);

/* Forgets every holding (a new epoch's plan follows). */
FFIO_API void ffio_peers_clear(struct ffio_peers *p);

/* A new epoch: peers avoided after a failure are asked again. */
FFIO_API void ffio_peers_epoch(struct ffio_peers *p);

/* What one peer gave. */
struct ffio_peer_stats {
    uint64_t fetched; /* shards it served */
    uint64_t bytes;   /* their bytes */
    uint64_t missing; /* 404s: evicted, or not there yet */
    uint64_t failed;  /* failures (refused, reset, stalled, short) */
    uint64_t bad;     /* shards whose bytes failed verification */
    bool avoided;     /* avoided until the next epoch */
};

FFIO_API void ffio_peers_stats(const struct ffio_peers *p, int peer, struct ffio_peer_stats *out);

/* The last failure as one line; "" when none. */
FFIO_API const char *ffio_peers_last_error(const struct ffio_peers *p);

/* Fills *out so that an ffr cache (ffr_cache_opts.peers) asks p's peers first (borrowed: p
 * must outlive the cache). */
FFIO_API void ffio_peers_cache_hooks(struct ffio_peers *p, struct ffr_cache_peers *out);
/* --- end share --- */

#ifdef __cplusplus
}
#endif

#endif /* FFIO_H */
