/*
 * ffr: packed, checksummed, indexed record files (docs/format.md is the contract).
 *
 * A dataset is one file or several shards named by a manifest. Each record is a byte string
 * stored raw or zstd-compressed, with an xxh3-64 checksum, plus a small summary kept in the index
 * so that planning needs no record reads. What a record holds is its user's business: the
 * detection dataset (det/include/det.h) is the one this project writes.
 *
 * Errors: functions returning int give >= 0 on success and a negative code on failure: -errno
 * for system and argument errors, -FFR_E* for format errors. ffr_strerror() names both. The
 * library never prints and never exits.
 *
 * Threads: a writer is used by one thread at a time. A reader is safe for concurrent
 * ffr_reader_read/_info/_verify calls from many threads once opened, each thread with its own
 * struct ffr_decoder.
 */
#ifndef FFR_H
#define FFR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FFR_API __attribute__((visibility("default")))
#else
#define FFR_API
#endif

/* Format error codes, returned negated. Pinned: never renumber (docs/format.md section 9). */
enum {
    FFR_EBADMAGIC = 1001, /* not an ffr file or manifest */
    FFR_EVERSION = 1002,  /* written by a newer format version */
    FFR_EFLAGS = 1003,    /* uses a feature flag this reader does not know */
    FFR_ETRUNC = 1004,    /* file cut short, or bytes appended: no valid trailer */
    FFR_ECHECKSUM = 1005, /* stored bytes do not match their checksum */
    FFR_ECORRUPT = 1006,  /* a structure is inconsistent (its checksum may be fine) */
    FFR_EFOREIGN = 1007,  /* an HFAI FFRecord file, which shares the .ffr extension */
    FFR_ESHARD = 1008,    /* a manifest's shard is missing or differs from the manifest */
    FFR_ETOOBIG = 1009,   /* a size exceeds a limit (record too large, destination too small) */
    FFR_ENOTREG = 1010,   /* not a regular file: a FIFO, device or socket (refused unopened) */
};

/* Record codecs (per record, chosen by the writer). */
enum { FFR_CODEC_RAW = 0, FFR_CODEC_ZSTD = 1 };

#define FFR_FORMAT_VERSION    1u
#define FFR_FRAME_HEADER_SIZE 32u
#define FFR_TRAILER_SIZE      1536u
/* Largest stored or raw record length the format can describe (u32 fields). */
#define FFR_RECORD_MAX 0xffffffffu

/* Returns a static, human-readable description of rc (any negative code, errno or FFR_E*). */
FFR_API const char *ffr_strerror(int rc);

/*
 * open(2) for reading a file that a dataset, a manifest or a command line names: O_RDONLY |
 * O_CLOEXEC | flags. A FIFO, a device or a socket is refused without blocking (a plain open of a
 * FIFO waits for a writer for ever, and a device may never end): -FFR_ENOTREG; a directory:
 * -EISDIR. Symbolic links are followed (docs/format.md 7). Returns the descriptor, or -errno.
 */
FFR_API int ffr_open_regular(const char *path, int flags);

/* ---------------------------------------------------------------------------------------- */
/* Writer                                                                                   */

struct ffr_writer;

struct ffr_writer_opts {
    uint32_t align; /* record alignment, power of two in [1, 1 MiB]; 4096 allows O_DIRECT */
    int codec;      /* FFR_CODEC_RAW or FFR_CODEC_ZSTD (records that do not shrink stay raw) */
    int zstd_level; /* zstd level for FFR_CODEC_ZSTD (1..19) */
    uint64_t shard_bytes; /* 0: one file; else start a new shard before a file would pass this */
    int durable;          /* 1: fsync files and directory before the rename (default 1) */
    int direct_io;        /* 1: write records with O_DIRECT when align is a multiple of 4096 and
                             the file system allows it (default 0): no page-cache copy, which
                             is most of a writer's CPU time; the index and trailer are written
                             through the page cache */
    /* Optional: where finished files go instead of their final names (yolo-pack -o s3://). The
     * writer then writes under `path`'s directory as a staging area and calls
     * publish(sink, tmp_path, name, last) for each file once it is complete: each shard as soon
     * as it is finished (last = 0), and at close the single file or, after every shard, the
     * manifest (last = 1), whose publication is the commit. name is the file's name relative to
     * the manifest's directory. After publish returns 0 the writer removes tmp_path (a sink that
     * still reads it keeps a descriptor open); a negative return fails the writer with it.
     * Nothing is renamed into place and nothing of an earlier dataset at path is removed: that
     * is the sink's. taken(sink, name): whether a shard name is in use at the destination, so
     * that shards never overwrite those of the dataset being replaced (ffr_writer_open). */
    int (*publish)(void *sink, const char *tmp_path, const char *name, int last);
    bool (*taken)(void *sink, const char *name);
    void *sink;
};

/* Fills *o with the defaults: align 4096, codec FFR_CODEC_RAW (zstd_level 1 when a caller picks
 * FFR_CODEC_ZSTD), one file, durable. */
FFR_API void ffr_writer_opts_default(struct ffr_writer_opts *o);

/*
 * Creates a writer for `path`. Single file: records go to a temporary file next to `path`,
 * renamed to `path` by ffr_writer_close. Sharded (opts->shard_bytes > 0): `path` becomes the
 * manifest and shards are written beside it as STEM-00000.ffr, ... (STEM is path without .ffr),
 * or STEM.TAG-00000.ffr, ... (TAG: 8 hex digits) when STEM-00000.ffr already exists, so that a
 * dataset being replaced is never touched before the new one is complete.
 *
 * Atomic, sharded or not: nothing carries a final name until ffr_writer_close; shards are
 * written under temporary names, renamed into place at close just before the manifest, and the
 * manifest's rename commits the dataset; the shards of the dataset it replaced (named by the
 * old manifest at `path`) are removed only after that. A job killed at any point leaves the old
 * dataset as it was. Temporaries left by dead processes of this host (PATH.tmp.PID.HOST, or
 * PATH.tmp.PID of older writers) are removed when a writer opens (ffr_remove_stale_tmp).
 * opts may be NULL for the defaults. On success *out owns the writer; returns 0.
 * Errors: -EINVAL (bad options), -errno from creating the file.
 */
FFR_API int ffr_writer_open(struct ffr_writer **out, const char *path,
                            const struct ffr_writer_opts *opts);

/*
 * Appends one record and its summary (copied; the caller keeps its buffers). The record is
 * compressed here when the writer's codec asks for it. Record numbers are consecutive from 0.
 * Returns 0. Errors: -FFR_ETOOBIG (len > FFR_RECORD_MAX), -ENOMEM, -errno from write. After an
 * error the writer can only be aborted.
 */
FFR_API int ffr_writer_append(struct ffr_writer *w, const void *data, size_t len,
                              const void *summary, size_t summary_len);

/*
 * Appends a record already encoded by ffr_encode() (e.g. in worker threads): `stored` is written
 * as is. Same returns as ffr_writer_append, plus -EINVAL for an unknown codec.
 */
FFR_API int ffr_writer_append_encoded(struct ffr_writer *w, int codec, const void *stored,
                                      size_t stored_len, size_t raw_len, const void *data_hash_opt,
                                      const void *summary, size_t summary_len);

/* One frame for ffr_writer_append_frames: the arguments of ffr_writer_append_frame. */
struct ffr_frame_in {
    int codec;
    void *frame; /* laid out as for ffr_writer_append_frame */
    size_t frame_cap;
    size_t stored_len;
    size_t raw_len;
    uint64_t hash; /* the xxh3 of the stored bytes when hash_set */
    int hash_set;
    const void *summary;
    size_t summary_len;
};

/*
 * Appends n frames in order, as n calls of ffr_writer_append_frame would, but with one writev
 * per run of frames (at most 64, cut at shard boundaries): one system call and one wait for the
 * device per run instead of per record. Returns 0 or the first error (the writer is then failed;
 * records before the failing one may have been written).
 */
FFR_API int ffr_writer_append_frames(struct ffr_writer *w, const struct ffr_frame_in *in, size_t n);

/*
 * Appends a record whose frame the caller laid out in place: `frame` has FFR_FRAME_HEADER_SIZE
 * free bytes, then the stored_len stored bytes, and room up to frame_cap, at least the record's
 * extent (FFR_FRAME_HEADER_SIZE + stored_len rounded up to the writer's align). The writer fills
 * in the frame header and the zero padding and writes the extent with one call: with
 * opts.direct_io and a 4096-aligned frame, without copying the bytes at all. data_hash_opt, when
 * not NULL, is the xxh3 of the stored bytes (e.g. computed in a worker thread). Same returns as
 * ffr_writer_append_encoded, plus -EINVAL when frame_cap is too small.
 */
FFR_API int ffr_writer_append_frame(struct ffr_writer *w, int codec, void *frame, size_t frame_cap,
                                    size_t stored_len, size_t raw_len, const void *data_hash_opt,
                                    const void *summary, size_t summary_len);

/* XXH3-64 (seed 0) of n bytes: the records' data hash, for callers that hash in their own
 * threads. Thread-safe. */
FFR_API uint64_t ffr_hash(const void *p, size_t n);

/* Sets the metadata text stored in the index (copied; may be called again until close). */
FFR_API int ffr_writer_set_metadata(struct ffr_writer *w, const char *text, size_t len);

/* Number of records appended so far. */
FFR_API uint64_t ffr_writer_count(const struct ffr_writer *w);

/*
 * Writes the index and trailer, makes the file durable and renames it into place (shards, then
 * the manifest last). Frees the writer whatever the result. On error nothing claims to be
 * complete: temporaries are removed. Returns 0 or a negative error.
 */
FFR_API int ffr_writer_close(struct ffr_writer *w);

/* Discards everything written (temporaries removed) and frees the writer. Accepts NULL. */
FFR_API void ffr_writer_abort(struct ffr_writer *w);

/*
 * The temporary name under which a file for `path` is written before its rename:
 * "PATH.tmp.PID.HOST" (malloc'd; NULL without memory). The host keeps processes of other
 * machines sharing the directory out of ffr_remove_stale_tmp's reach.
 */
FFR_API char *ffr_tmp_path(const char *path);

/*
 * Removes the temporaries that killed processes left for `path`: entries of its directory named
 * BASE.tmp.PID.HOST with HOST this machine's name and no process PID running here, or
 * BASE.tmp.PID (no host: older writers) with no process PID running. With prefix set, BASE is
 * any name starting with path's last component (a sharded dataset's STEM-00000.ffr.tmp.* and
 * STEM.TAG-*.tmp.* as well as STEM.ffr.tmp.*). A temporary that is a directory (ffio's remote
 * skeletons) goes with the regular files in it; nothing is followed further or through links.
 * Returns the number removed, or -errno when the directory cannot be read.
 */
FFR_API int ffr_remove_stale_tmp(const char *path, int prefix);

/* ---------------------------------------------------------------------------------------- */
/* Encoding records outside the writer (thread-safe with one ffr_codec per thread)           */

struct ffr_codec;

/* Creates per-thread compression/decompression state. Returns 0 or -ENOMEM. */
FFR_API int ffr_codec_create(struct ffr_codec **out);
/* Frees it. Accepts NULL. */
FFR_API void ffr_codec_destroy(struct ffr_codec *c);

/* Upper bound of the stored size of a `len`-byte record under any codec. */
FFR_API size_t ffr_encode_bound(size_t len);

/*
 * Encodes src with `codec` (FFR_CODEC_ZSTD at `level`) into dst. If compression does not make
 * the record smaller the raw bytes are copied instead. Returns the stored length and writes the
 * codec actually used to *codec_used. Errors: -FFR_ETOOBIG (dst_cap too small), -EINVAL.
 */
FFR_API int64_t ffr_encode(struct ffr_codec *c, void *dst, size_t dst_cap, const void *src,
                           size_t src_len, int codec, int level, int *codec_used);

/* ---------------------------------------------------------------------------------------- */
/* Reader                                                                                   */

struct ffr_reader;

struct ffr_reader_opts {
    uint32_t max_record_bytes; /* refuse records whose stored or raw size is larger (0: 1 GiB) */
};

FFR_API void ffr_reader_opts_default(struct ffr_reader_opts *o);

/*
 * Opens a record file or a manifest (told apart by their first bytes). Reads the header,
 * trailer and index of every file and checks them (docs/format.md sections 3-7); records are
 * not read. opts may be NULL. On success *out owns the reader.
 * Errors: -FFR_EBADMAGIC, -FFR_EFOREIGN, -FFR_EVERSION, -FFR_EFLAGS, -FFR_ETRUNC,
 * -FFR_ECHECKSUM, -FFR_ECORRUPT, -FFR_ESHARD, -errno. ffr_reader_last_error() is not available
 * after a failed open, so the detail of a failure is written to err (may be NULL) as one line
 * naming the file (and shard, record) when err_cap > 0.
 */
FFR_API int ffr_reader_open(struct ffr_reader **out, const char *path,
                            const struct ffr_reader_opts *opts, char *err, size_t err_cap);

/* Where a record file's index lies, from its first and last bytes alone. */
struct ffr_index_extent {
    uint64_t offset, size; /* the index's bytes in the file */
    uint64_t records;      /* the trailer's record count */
    uint64_t index_hash;   /* the trailer's index checksum */
};

/*
 * The checks ffr_reader_open makes of a file's header and trailer, for readers that fetch the
 * bytes themselves (ffio's remote reads): head holds the first 64 bytes (the header), tail the
 * last FFR_TRAILER_SIZE, size is the file's length. Checks the magic, version, header checksum,
 * flags, each trailer copy's own checksum and their agreement, and that the sizes agree with
 * each other (the index inside the file, ending where the trailer starts), so that a lying
 * server is refused before anything is allocated for it. name is used in messages.
 * Returns 0 and fills *out, or the error ffr_reader_open would give, with a line in err.
 */
FFR_API int ffr_locate_index(const uint8_t head[64], const uint8_t tail[1536], uint64_t size,
                             const char *name, struct ffr_index_extent *out, char *err,
                             size_t err_cap);

/* ffr_reader_open for an already-open file descriptor (not a manifest); `name` is used in
 * messages. The reader duplicates fd; the caller keeps its own. */
FFR_API int ffr_reader_open_fd(struct ffr_reader **out, int fd, const char *name,
                               const struct ffr_reader_opts *opts, char *err, size_t err_cap);

/* Closes the reader and its files. Accepts NULL. */
FFR_API void ffr_reader_close(struct ffr_reader *r);

/* Records in the dataset (all shards). */
FFR_API uint64_t ffr_reader_count(const struct ffr_reader *r);

/* Number of files: 1 for a single file, the shard count for a manifest. */
FFR_API uint32_t ffr_reader_shard_count(const struct ffr_reader *r);

/*
 * What the records are, as one number: a chain of xxh3 over every record's stored-bytes hash,
 * raw length and summary, in order. The index is in memory, so no record is read. Equal for
 * the same records however they are sharded, named or described (the metadata is left out);
 * different when any record's bytes, order or count differ. A checkpoint keeps it so that a
 * resume can tell whether it is reading what it trained on.
 */
FFR_API uint64_t ffr_reader_content_hash(const struct ffr_reader *r);

struct ffr_shard_info {
    const char *path;     /* path as opened (valid while the reader lives, or until the shard
                             is swapped: ffr_reader_swap_shard) */
    int fd;               /* read-only descriptor owned by the reader */
    uint64_t file_size;   /* bytes */
    uint64_t first;       /* global number of the shard's first record */
    uint64_t count;       /* records in the shard */
    uint32_t align;       /* the shard's record alignment */
    uint64_t index_hash;  /* xxh3 of the shard's index, as in its trailer */
    uint64_t index_bytes; /* index size */
};

/* Describes shard k (0-based). Returns 0 or -EINVAL when k is out of range. */
FFR_API int ffr_reader_shard(const struct ffr_reader *r, uint32_t k, struct ffr_shard_info *out);

/*
 * Reads shard k from the file at `path` from now on: another copy of the same shard, as a node
 * cache holds them (ffr_cache_skeletons: the skeleton that holds no record, and the complete
 * entry from ffr_cache_shard). The file is opened and checked as at open, and must have the
 * shard's size, alignment, trailer and index byte for byte, so that every index entry, summary
 * and count the reader handed out stays true; record bytes are checked as they are read, as
 * always. The new file then takes the shard's descriptor number (dup3), so that a read sees the
 * old file or the new one, never neither. The caller must not run it while shard k is read or
 * described (ffr_reader_shard's path changes), and engines that opened the shard by path open
 * it again. Returns 0, -FFR_ESHARD (another shard: what differs is in err), the errors of
 * ffr_reader_open for that file, or -EINVAL; on error shard k is unchanged.
 */
FFR_API int ffr_reader_swap_shard(struct ffr_reader *r, uint32_t k, const char *path, char *err,
                                  size_t err_cap);

/* Where a record lives and what it holds, from the index (no I/O). */
struct ffr_record_info {
    uint32_t shard;       /* file holding it (ffr_reader_shard) */
    uint32_t codec;       /* FFR_CODEC_* */
    uint64_t offset;      /* byte offset of its frame in that file (a multiple of align) */
    uint64_t frame_len;   /* FFR_FRAME_HEADER_SIZE + stored_len */
    uint64_t extent_len;  /* frame_len rounded up to the shard's align: what O_DIRECT reads */
    uint32_t stored_len;  /* stored bytes */
    uint32_t raw_len;     /* bytes after decoding */
    uint64_t data_hash;   /* xxh3 of the stored bytes */
    uint64_t local;       /* record number within its shard */
    const void *summary;  /* the record's summary, valid while the reader lives */
    uint32_t summary_len; /* bytes */
};

/* Fills *out for record i. Returns 0 or -EINVAL (i >= count). */
FFR_API int ffr_reader_info(const struct ffr_reader *r, uint64_t i, struct ffr_record_info *out);

/* The dataset's metadata text (not NUL-terminated), valid while the reader lives: the file's, or
 * for a manifest the last shard's (it is closed last, with the final counts; docs/format.md 7). */
FFR_API const char *ffr_reader_metadata(const struct ffr_reader *r, size_t *len);

/* Per-thread read state: a decompression context and a scratch buffer. */
struct ffr_decoder;
FFR_API int ffr_decoder_create(struct ffr_decoder **out);
FFR_API void ffr_decoder_destroy(struct ffr_decoder *d);

/*
 * Reads record i into dst (raw bytes, decoded), checking the frame header against the index and
 * the stored bytes against their checksum. d may be NULL (a temporary is made: slower).
 * Returns the raw length. Errors: -EINVAL, -FFR_ETOOBIG (dst_cap < raw_len: query
 * ffr_reader_info first), -FFR_ECHECKSUM, -FFR_ECORRUPT, -EIO and other -errno.
 */
FFR_API int64_t ffr_reader_read(const struct ffr_reader *r, struct ffr_decoder *d, uint64_t i,
                                void *dst, size_t dst_cap);

/*
 * Decodes a frame that the caller read itself (for example with io_uring into pinned memory):
 * `frame` holds at least info->frame_len bytes starting at the frame header. Checks the header
 * against info and the data hash (unless verify == 0), then decodes into dst and returns the raw
 * length. With dst == NULL nothing is decoded or copied: *payload points at the stored bytes in
 * frame (for a raw record, the record itself) and the stored length is returned.
 */
FFR_API int64_t ffr_frame_decode(struct ffr_decoder *d, const struct ffr_record_info *info,
                                 const void *frame, size_t frame_len, int verify, void *dst,
                                 size_t dst_cap, const void **payload);

/* A problem found by ffr_reader_verify_all, passed to the callback. */
struct ffr_problem {
    uint32_t shard;   /* file it is in */
    const char *path; /* that file */
    int64_t record;   /* global record number, or -1 for file structures */
    uint64_t offset;  /* byte offset in that file */
    int code;         /* negative error code */
    const char *what; /* one line describing it */
};

typedef void (*ffr_problem_fn)(void *ctx, const struct ffr_problem *p);

/*
 * Checks every byte of every file: the header and its padding, each record's frame header,
 * data hash and decoded length, the zero padding between frames, and the three trailer copies.
 * Calls fn (may be NULL) for each problem. Returns the number of problems (0: intact) or a
 * negative error when a file could not be read at all.
 */
FFR_API int64_t ffr_reader_verify_all(const struct ffr_reader *r, ffr_problem_fn fn, void *ctx);

/* Checks record i alone (frame header, hash, decode). Returns 0 or a negative error. */
FFR_API int ffr_reader_verify(const struct ffr_reader *r, struct ffr_decoder *d, uint64_t i);

/* ---------------------------------------------------------------------------------------- */
/* --- share: node-local shard cache (ffr_cache.c; docs/sharing.md) ---                      */
/*
 * Copies the shards of a dataset from shared storage (or, through a caller-supplied source, from
 * a URL) into a directory on node-local disk, and hands back a local manifest to open with
 * ffr_reader_open. A shard enters the cache only after it was checked against the manifest
 * (size, record count, index hash: the index holds every record's data hash) and every byte of
 * it was verified (ffr_reader_verify_all); it is written under a temporary name, fsync'ed and
 * renamed, so a killed copy or a short download never becomes visible. Cached shards are named
 * by their index hash and size, so datasets with equal shard names do not collide and a changed
 * source shard is fetched anew. Reuse checks the size, header, trailer and index hash (cheap);
 * opts.full_verify checks every byte. A shard that fails the check is removed and fetched again.
 * Under opts.max_bytes the least recently used entries (modification time, set on every use)
 * are evicted before a new shard is fetched.
 *
 * Processes: several processes (the local ranks of a node) may use one directory at once. A
 * shard is fetched by one of them while the others wait on a lock (flock) and then reuse it.
 * Eviction unlinks files: a reader that has a shard open keeps reading it.
 * Threads: a struct ffr_cache is used by one thread at a time; use one per thread.
 */

/* Where shards come from when they are not local files: e.g. ffio_http_cache_source() (ffio.h)
 * for http(s) URLs. Both callbacks return 0 or a negative error, and write one line naming src
 * into err (err_cap > 0) on failure. They may be called from several processes at once. */
struct ffr_cache_source {
    /* *size = the bytes of src. */
    int (*size)(void *ctx, const char *src, uint64_t *size, char *err, size_t err_cap);
    /* Writes bytes [0, size) of src into fd at offsets [0, size) (pwrite: fd is a fresh file of
     * that size). A short source is an error (-FFR_ETRUNC); the cache checks what was written
     * whatever this returns. */
    int (*fetch)(void *ctx, const char *src, int fd, uint64_t size, char *err, size_t err_cap);
    void *ctx; /* passed to all three */
    /* Optional: bytes [off, off + len) of src into dst (ffr_cache_skeletons reads a shard's
     * header, trailer and index by range). NULL: such a source makes no skeletons. */
    int (*read)(void *ctx, const char *src, void *dst, uint64_t off, uint64_t len, char *err,
                size_t err_cap);
};

/*
 * Other nodes' caches, asked for a shard before its source (ffio_peers_cache_hooks makes one).
 * Only shards a manifest describes are asked for: their index hash and size let the cache check
 * every byte a peer sent; a single file is always fetched from its source.
 */
struct ffr_cache_peers {
    /* Writes bytes [0, size) of cache entry `entry` (ffr_cache_entry_name) into fd from a peer;
     * *who: which peer, for bad(). Returns 0, -ENOENT (no peer has it) or another error (the
     * peers failed); on any error the source is used. */
    int (*fetch)(void *ctx, const char *entry, int fd, uint64_t size, int *who, char *err,
                 size_t err_cap);
    /* The bytes from peer `who` failed the check (why: one line); the source is used next. */
    void (*bad)(void *ctx, int who, const char *why);
    void *ctx; /* passed to both */
};

struct ffr_cache_opts {
    uint64_t max_bytes; /* evict LRU entries to keep the directory under this; 0 = no limit */
    int full_verify;    /* 1: reuse verifies every byte; 0 (default): size, trailer, index hash */
    int durable;        /* 1 (default): fsync each shard and the directory before renaming */
    const struct ffr_cache_source *source; /* NULL: sources are local paths (copied); else
                                              used for every source (borrowed: must outlive the
                                              cache) */
    const struct ffr_cache_peers *peers;   /* NULL: none; else asked first for every shard
                                              (borrowed: must outlive the cache) */
    uint64_t max_index_bytes; /* ffr_cache_skeletons refuses a shard whose trailer claims a
                                 larger index (-FFR_ETOOBIG) before reading any of it, as
                                 ffio_http_opts.max_index_bytes does; 0: the default, 1 GiB */
};

/* Fills *o: no size limit, cheap reuse checks, durable, local sources, 1 GiB indexes. */
FFR_API void ffr_cache_opts_default(struct ffr_cache_opts *o);

struct ffr_cache;

/*
 * Opens (creating it, and its parent, when missing) the cache directory `dir`. opts may be NULL
 * (defaults; copied). Removes temporaries left by processes that died. On success *out owns the
 * cache. Returns 0, -EINVAL, -ENOMEM or -errno from mkdir/open (err gets one line naming dir).
 */
FFR_API int ffr_cache_open(struct ffr_cache **out, const char *dir,
                           const struct ffr_cache_opts *opts, char *err, size_t err_cap);

/* Frees the handle (the directory stays). Accepts NULL. */
FFR_API void ffr_cache_close(struct ffr_cache *c);

/* One shard as the manifest describes it. */
struct ffr_cache_shard {
    const char *file;    /* the shard's file name in the manifest */
    uint64_t bytes;      /* its size */
    uint64_t records;    /* its record count */
    uint64_t index_hash; /* its index hash */
};

/*
 * Makes shard `want` present and verified in the cache, fetching it from `src` (a local path
 * or, with a source, e.g. a URL) when it is missing or fails its check, and writes its cached
 * path into path (path_cap bytes). Returns 1 when it was fetched, 0 when the cached copy was
 * reused. Errors: -FFR_ESHARD (the source differs from `want`: size, records or index hash),
 * -FFR_ETRUNC (the source is shorter than `want`), -FFR_ECHECKSUM / -FFR_ECORRUPT (the fetched
 * bytes are damaged), -ENOSPC (the shard does not fit under max_bytes even with every other
 * entry evicted), -ENAMETOOLONG, -errno, or the source's error; err gets one line naming src.
 * Nothing is left under the final name on error.
 */
FFR_API int ffr_cache_shard(struct ffr_cache *c, const char *src,
                            const struct ffr_cache_shard *want, char *path, size_t path_cap,
                            char *err, size_t err_cap);

/*
 * Caches a whole dataset: `src` is a manifest or a single record file (local path, or a URL
 * with a source). Every shard is fetched or reused as ffr_cache_shard does, then a manifest
 * naming the cached shards is written into the cache (atomically) and its path written to path:
 * open it with ffr_reader_open. A single file is cached under a name made from src and its size.
 * The dataset's own shards are never evicted to make room for each other. Returns the number of
 * shards fetched (0: all reused) or the errors of ffr_cache_shard, plus -FFR_EBADMAGIC /
 * -FFR_ECORRUPT / -FFR_EVERSION for a bad manifest.
 */
FFR_API int ffr_cache_dataset(struct ffr_cache *c, const char *src, char *path, size_t path_cap,
                              char *err, size_t err_cap);

/*
 * The dataset of the manifest at src with no record present, for a cache smaller than the
 * dataset: each shard as a skeleton, a sparse file ".skel-ENTRY" in the cache holding only the
 * shard's header, index and trailer (read by range through the source's read, or from a local
 * path), checked as a reader checks them and against the manifest before it takes its name.
 * A manifest naming the skeletons is written into the cache and its path into path:
 * ffr_reader_open gives every index, count and summary, and ffr_reader_swap_shard then puts a
 * shard's records in (ffr_cache_shard's path) and takes them out again (the skeleton's path, as
 * the reader named the shard at open) while the cache evicts and fetches. Skeletons are reused
 * when they check out, never evicted, and count towards max_bytes by the blocks they take (their
 * index). Returns the number of skeletons made (0: all reused), -EINVAL (src is a single record
 * file: there is nothing to leave out), -ENOTSUP (a source without read), or the errors of
 * ffr_cache_dataset (err: one line naming the shard).
 */
FFR_API int ffr_cache_skeletons(struct ffr_cache *c, const char *src, char *path, size_t path_cap,
                                char *err, size_t err_cap);

/*
 * Removes a cached shard that a reader found damaged (a record failing its checksum: the cheap
 * reuse check cannot see that), so that the next ffr_cache_dataset or ffr_cache_shard fetches
 * it again and verifies every byte. path is the shard's path as the cached manifest names it;
 * only that file, if it is still the one in the cache, is removed (a copy fetched since stays).
 * A reader that has it open keeps reading its old bytes. Returns 0, -ENOENT (path is not a
 * cached shard of c), or -errno, with a line in err.
 */
FFR_API int ffr_cache_discard(struct ffr_cache *c, const char *path, char *err, size_t err_cap);

/*
 * Parses manifest text (docs/format.md 7) into its shard list, for callers that fetch shards
 * themselves (ffio's remote reader). On success *out is a malloc'ed array of *n entries whose
 * `file` strings it owns: free with ffr_manifest_shards_free. Returns 0, or -FFR_EBADMAGIC,
 * -FFR_EVERSION, -FFR_ECORRUPT, -FFR_ETOOBIG, -ENOMEM with one line in err.
 */
FFR_API int ffr_manifest_shards(const void *text, size_t len, struct ffr_cache_shard **out,
                                uint32_t *n, char *err, size_t err_cap);

/* Frees a list from ffr_manifest_shards. Accepts NULL. */
FFR_API void ffr_manifest_shards_free(struct ffr_cache_shard *s, uint32_t n);

/* Where shard `file` of the manifest at `manifest` (a path or URL) is: beside it ("dir/FILE"),
 * or plain "FILE" when the manifest's name has no directory. malloc'ed; NULL when out of
 * memory. */
FFR_API char *ffr_manifest_shard_source(const char *manifest, const char *file);

/*
 * The shards of the manifest at src, read through the cache's source as ffr_cache_dataset
 * reads it (for callers that plan which shards to fetch): *out and *n as ffr_manifest_shards
 * gives them. A single record file (not a manifest) gives 0 with *n = 0 and *out NULL. Returns
 * 0 or the errors of ffr_cache_dataset's read and ffr_manifest_shards (err: one line).
 */
FFR_API int ffr_cache_manifest_shards(struct ffr_cache *c, const char *src,
                                      struct ffr_cache_shard **out, uint32_t *n, char *err,
                                      size_t err_cap);

/* 1 when the first n bytes of a file say "manifest" rather than "record file". */
FFR_API int ffr_manifest_sniff_text(const void *head, size_t n);

/* Counters of one handle since ffr_cache_open. */
struct ffr_cache_stats {
    uint64_t hits;          /* shards reused */
    uint64_t fetches;       /* shards fetched (including re-fetches) */
    uint64_t fetched_bytes; /* bytes fetched */
    uint64_t damaged;       /* cached shards that failed their check and were removed */
    uint64_t evicted;       /* entries evicted */
    uint64_t evicted_bytes; /* their bytes */
    uint64_t peer_fetches;  /* shards (of fetches) that a peer gave, verified */
    uint64_t peer_bytes;    /* their bytes (the rest of fetched_bytes came from sources) */
    uint64_t peer_bad;      /* shards a peer sent that failed verification */
};

/* The name a shard takes in a cache directory (the name peers are asked for), at most
 * NAME_MAX - 63 bytes: "INDEXHASH-BYTES-FILE" (FILE replaced by its hash when long). */
FFR_API void ffr_cache_entry_name(const struct ffr_cache_shard *w, char *name, size_t cap);

/* Fills *out. */
FFR_API void ffr_cache_stats(const struct ffr_cache *c, struct ffr_cache_stats *out);

/* Pins shard w's entry in this handle: its evictions never choose it, as ffr_cache_dataset
 * keeps the shards it made present. For a fill that must not evict what is being read (a
 * prefetch of the next epoch's shards during this one). Returns 0, -EINVAL or -ENOMEM. */
FFR_API int ffr_cache_pin(struct ffr_cache *c, const struct ffr_cache_shard *w);

/* Forgets this handle's pins. */
FFR_API void ffr_cache_unpin_all(struct ffr_cache *c);

/* 1 when `bytes` more would fit under max_bytes now, evicting only entries this handle has not
 * pinned (always, without a limit), 0 when not, or a negative error; nothing is evicted. The
 * answer is advice: other processes may change the directory after it. */
FFR_API int ffr_cache_fits(struct ffr_cache *c, uint64_t bytes);

/* One evictable cache entry, as the eviction policy sees it. */
struct ffr_cache_use {
    const char *name; /* ties between equal times are broken by name (strcmp) */
    uint64_t bytes;
    int64_t used_ns; /* time of the last use (the entry's mtime, in ns) */
    uint64_t tag;    /* the caller's (the policy does not read it) */
};

/*
 * The cache's eviction policy, without files, so that a simulation (scripts/sim-sharing) runs
 * the same choice as a real cache: puts e[0, n) in eviction order (least recently used first)
 * and returns how many of the first must go for `need` more bytes to fit under `max_bytes`
 * when `used` bytes are in the directory now (entries not in e count in `used` but are never
 * chosen: temporaries, pinned shards). Returns 0 when they fit (or max_bytes is 0: no limit),
 * -ENOSPC when evicting every entry of e is not enough.
 */
FFR_API int64_t ffr_cache_lru_order(struct ffr_cache_use *e, size_t n, uint64_t used, uint64_t need,
                                    uint64_t max_bytes);
/* --- end share --- */

#ifdef __cplusplus
}
#endif

#endif /* FFR_H */
