/*
 * Node-local shard cache (ffr.h, "share" block; docs/sharing.md).
 *
 * Directory layout: cached shards "HHHHHHHHHHHHHHHH-BYTES-FILE" (index hash, size, manifest
 * name), single files "fHHHHHHHHHHHHHHHH-BYTES-BASENAME" (hash of the source name), manifests
 * "mHHHHHHHHHHHHHHHH-BASENAME" (hash of their text) and views "vHHHHHHHHHHHHHHHH-BASENAME" (a
 * manifest of skeletons), skeletons ".skel-ENTRY" (a shard's header, index and trailer in a
 * sparse file of its size: ffr_cache_skeletons), temporaries ".tmp-NAME-PID-N", and lock files
 * ".lock" (the directory: eviction and creation of temporaries) and ".lock-NN" (64 stripes:
 * whoever holds an entry's stripe is the only writer of that entry and its temporaries, so
 * temporaries found under the stripe lock are stale and can go).
 *
 * Invariant: a file under a final name was fully verified before the rename (a skeleton: its
 * header, index and trailer, all it holds), and is only ever
 * replaced by rename or removed by unlink, so readers never see a partial file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ffr_internal.h"
#include "ffr_manifest.h"

#define CACHE_STRIPES   64u
#define COPY_CHUNK      (1u << 20)
#define CACHE_MAX_INDEX (1ull << 30) /* ffio_http_opts.max_index_bytes's default */

struct ffr_cache {
    char *dir;
    int dfd; /* the directory, for *at() calls */
    struct ffr_cache_opts o;
    struct ffr_cache_stats st;
    unsigned tmp_seq; /* makes temporary names unique within this process */
    char **pins;      /* entries ffr_cache_dataset must not evict (its own shards) */
    size_t n_pins, cap_pins;
};

void ffr_cache_opts_default(struct ffr_cache_opts *o)
{
    memset(o, 0, sizeof *o);
    o->durable = 1;
    o->max_index_bytes = CACHE_MAX_INDEX;
}

void ffr_cache_stats(const struct ffr_cache *c, struct ffr_cache_stats *out)
{
    if (!out) return;
    if (c)
        *out = c->st;
    else
        memset(out, 0, sizeof *out);
}

/* ---- locks ---- */

/* Takes an exclusive flock on dir/name (created when missing). Returns the fd or -errno. */
static int lock_take(const struct ffr_cache *c, const char *name)
{
    const int fd = openat(c->dfd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    while (flock(fd, LOCK_EX) < 0) {
        if (errno == EINTR) continue;
        const int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

static void lock_drop(int fd)
{
    if (fd >= 0) close(fd); /* closing the last descriptor releases the flock */
}

static int stripe_take(const struct ffr_cache *c, const char *entry)
{
    char name[32];
    snprintf(name, sizeof name, ".lock-%02x",
             (unsigned)(ffr_xxh3(entry, strlen(entry)) % CACHE_STRIPES));
    return lock_take(c, name);
}

/* ---- helpers ---- */

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int pin_add(struct ffr_cache *c, const char *name)
{
    if (c->n_pins == c->cap_pins) {
        const size_t n = c->cap_pins ? 2 * c->cap_pins : 16;
        char **p = realloc(c->pins, n * sizeof *p);
        if (!p) return -ENOMEM;
        c->pins = p;
        c->cap_pins = n;
    }
    if (!(c->pins[c->n_pins] = strdup(name))) return -ENOMEM;
    c->n_pins++;
    return 0;
}

static void pins_clear(struct ffr_cache *c)
{
    for (size_t i = 0; i < c->n_pins; i++)
        free(c->pins[i]);
    c->n_pins = 0;
}

static int pinned(const struct ffr_cache *c, const char *name)
{
    for (size_t i = 0; i < c->n_pins; i++)
        if (!strcmp(c->pins[i], name)) return 1;
    return 0;
}

/* Marks an entry as used now. The time is set explicitly from CLOCK_REALTIME: the kernel's own
 * file times come from a coarse clock, so two uses a millisecond apart could tie. */
static void touch(const struct ffr_cache *c, const char *name)
{
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[1] = t[0];
    (void)utimensat(c->dfd, name, t, 0);
}

static int is_temp_of(const char *dname, const char *entry)
{
    const size_t n = strlen(entry);
    return !strncmp(dname, ".tmp-", 5) && !strncmp(dname + 5, entry, n) && dname[5 + n] == '-';
}

#define SKEL_PREFIX ".skel-"

static bool is_skeleton(const char *dname)
{
    const size_t n = sizeof SKEL_PREFIX - 1;
    return !strncmp(dname, SKEL_PREFIX, n) ||
           (!strncmp(dname, ".tmp-", 5) && !strncmp(dname + 5, SKEL_PREFIX, n));
}

/* Removes temporaries of `entry` (caller holds its stripe: they are stale), or with entry NULL
 * the temporaries whose process is gone. */
static void remove_stale_temps(const struct ffr_cache *c, const char *entry)
{
    const int fd = fcntl(c->dfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    rewinddir(d); /* the duplicate shares the directory offset with c->dfd */
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, ".tmp-", 5) != 0) continue;
        if (entry) {
            if (is_temp_of(e->d_name, entry)) (void)unlinkat(c->dfd, e->d_name, 0);
            continue;
        }
        /* ".tmp-NAME-PID-N": the pid is the second last field. */
        const char *last = strrchr(e->d_name, '-');
        if (!last || last == e->d_name) continue;
        const char *p = last - 1;
        while (p > e->d_name && *p != '-')
            p--;
        const long pid = strtol(p + 1, NULL, 10);
        if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH)
            (void)unlinkat(c->dfd, e->d_name, 0);
    }
    closedir(d);
}

static int cmp_use(const void *a, const void *b)
{
    const struct ffr_cache_use *x = a, *y = b;
    if (x->used_ns != y->used_ns) return x->used_ns < y->used_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

int64_t ffr_cache_lru_order(struct ffr_cache_use *e, size_t n, uint64_t used, uint64_t need,
                            uint64_t max_bytes)
{
    if (!max_bytes || (need <= max_bytes && used <= max_bytes - need)) return 0;
    if (n) qsort(e, n, sizeof *e, cmp_use);
    size_t k = 0;
    for (; k < n && (need > max_bytes || used > max_bytes - need); k++)
        used -= e[k].bytes < used ? e[k].bytes : used;
    if (need > max_bytes || used > max_bytes - need) return -ENOSPC;
    return (int64_t)k;
}

/* Evicts least recently used entries (not pinned, not `keep`) until `need` more bytes fit
 * under max_bytes (ffr_cache_lru_order chooses). Temporaries count (they are created at full
 * size) but are never evicted. Caller holds the directory lock. With dry, evicts nothing and
 * returns 0 or -ENOSPC (no line in err) as the eviction would end. */
static int make_room(struct ffr_cache *c, const char *keep, uint64_t need, bool dry, char *err,
                     size_t cap)
{
    if (!c->o.max_bytes) return 0;
    if (need > c->o.max_bytes)
        return ffr_say(err, cap, -ENOSPC,
                       "%s: %s needs %" PRIu64 " bytes, over the cache limit of %" PRIu64, c->dir,
                       keep, need, c->o.max_bytes);
    const int fd = fcntl(c->dfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    rewinddir(d); /* the duplicate shares the directory offset with c->dfd */
    struct ffr_cache_use *v = NULL;
    char(*names)[NAME_MAX + 1] = NULL;
    size_t nv = 0, capv = 0;
    uint64_t used = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (fstatat(c->dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        /* A skeleton (or its temporary) is sparse: what it takes is its index. */
        used += is_skeleton(e->d_name) ? (uint64_t)st.st_blocks * 512 : (uint64_t)st.st_size;
        if (e->d_name[0] == '.' || !strcmp(e->d_name, keep) || pinned(c, e->d_name)) continue;
        if (nv == capv) {
            capv = capv ? 2 * capv : 64;
            struct ffr_cache_use *nvp = realloc(v, capv * sizeof *v);
            if (nvp) v = nvp;
            char(*nnp)[NAME_MAX + 1] = realloc(names, capv * sizeof *names);
            if (nnp) names = nnp;
            if (!nvp || !nnp) {
                rc = -ENOMEM;
                break;
            }
        }
        snprintf(names[nv], sizeof names[nv], "%s", e->d_name);
        v[nv].bytes = (uint64_t)st.st_size;
        v[nv].used_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        nv++;
    }
    closedir(d);
    for (size_t i = 0; i < nv; i++) /* names may have moved while the arrays grew */
        v[i].name = names[i];
    const int64_t k = rc == 0 ? ffr_cache_lru_order(v, nv, used, need, c->o.max_bytes) : 0;
    if (dry) {
        free(v);
        free(names);
        return rc < 0 ? rc : k < 0 ? (int)k : 0;
    }
    /* Evict in the policy's order; an entry that cannot be unlinked (gone already) is skipped
     * and the next one taken, so -ENOSPC from the policy still evicts everything it can. */
    for (size_t i = 0; k != 0 && i < nv && used + need > c->o.max_bytes; i++) {
        if (unlinkat(c->dfd, v[i].name, 0) < 0) continue;
        used -= v[i].bytes;
        c->st.evicted++;
        c->st.evicted_bytes += v[i].bytes;
    }
    if (rc == 0 && used + need > c->o.max_bytes)
        rc = ffr_say(err, cap, -ENOSPC,
                     "%s: no room for %s (%" PRIu64 " bytes) under the cache limit of %" PRIu64
                     " bytes: the entries in use take %" PRIu64,
                     c->dir, keep, need, c->o.max_bytes, used);
    free(v);
    free(names);
    return rc;
}

/* Copies [0, size) of a local file into fd. */
static int copy_local(const char *src, int fd, uint64_t size, char *err, size_t cap)
{
    const int in = ffr_open_regular(src, 0);
    if (in < 0) return ffr_say(err, cap, in, "%s: %s", src, ffr_strerror(in));
    struct stat st;
    int rc = fstat(in, &st) < 0 ? -errno : 0;
    if (rc == 0 && (uint64_t)st.st_size < size)
        rc = ffr_say(err, cap, -FFR_ETRUNC, "%s: %" PRIu64 " bytes, expected %" PRIu64, src,
                     (uint64_t)st.st_size, size);
    loff_t off_in = 0, off_out = 0;
    int plain = 0;
    uint8_t *buf = NULL;
    while (rc == 0 && (uint64_t)off_out < size) {
        const size_t want =
            size - (uint64_t)off_out > COPY_CHUNK ? COPY_CHUNK : (size_t)(size - (uint64_t)off_out);
        ssize_t k;
        if (!plain) {
            k = copy_file_range(in, &off_in, fd, &off_out, want, 0);
            if (k < 0 &&
                (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                plain = 1;
                continue;
            }
        } else {
            if (!buf && !(buf = malloc(COPY_CHUNK))) {
                rc = -ENOMEM;
                break;
            }
            k = pread(in, buf, want, off_in);
            if (k > 0) {
                size_t done = 0;
                while (done < (size_t)k) {
                    const ssize_t w = pwrite(fd, buf + done, (size_t)k - done, off_out);
                    if (w < 0 && errno == EINTR) continue;
                    if (w <= 0) {
                        rc = w < 0 ? -errno : -EIO;
                        break;
                    }
                    done += (size_t)w;
                    off_out += w;
                }
                off_in += k;
            }
        }
        if (rc < 0) break;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rc = -errno;
        if (k == 0)
            rc = ffr_say(err, cap, -FFR_ETRUNC, "%s: ends at byte %lld, expected %" PRIu64, src,
                         (long long)off_in, size);
    }
    if (rc < 0 && err && cap && !err[0]) ffr_say(err, cap, rc, "%s: copy: %s", src, strerror(-rc));
    free(buf);
    close(in);
    return rc;
}

/* Checks the file behind fd against the manifest's description (want->file NULL: only that
 * it is a complete ffr file of `bytes`), and every byte when `full`. */
static int check_file(int fd, const char *name, const struct ffr_cache_shard *want, int full,
                      char *err, size_t cap)
{
    struct ffr_reader *r = NULL;
    char sub[512] = "";
    int rc = ffr_reader_open_fd(&r, fd, name, NULL, sub, sizeof sub);
    if (rc < 0) return ffr_say(err, cap, rc, "%s", sub[0] ? sub : ffr_strerror(rc));
    struct ffr_shard_info si;
    ffr_reader_shard(r, 0, &si);
    const char *what = si.file_size != want->bytes                       ? "size"
                       : want->file && si.count != want->records         ? "record count"
                       : want->file && si.index_hash != want->index_hash ? "index checksum"
                                                                         : NULL;
    if (what) {
        rc = ffr_say(err, cap, -FFR_ESHARD, "%s: its %s differs from the manifest", name, what);
    } else if (full) {
        const int64_t p = ffr_reader_verify_all(r, NULL, NULL);
        if (p != 0)
            rc = ffr_say(err, cap, p < 0 ? (int)p : -FFR_ECHECKSUM, "%s: %s", name,
                         p < 0 ? ffr_strerror((int)p) : "damaged (ffr verify finds problems)");
    }
    ffr_reader_close(r);
    return rc;
}

static int check_entry(const struct ffr_cache *c, const char *name,
                       const struct ffr_cache_shard *want, int full, char *err, size_t cap)
{
    const int fd = openat(c->dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    const int rc = check_file(fd, name, want, full, err, cap);
    close(fd);
    return rc;
}

static int fsync_dir(const struct ffr_cache *c)
{
    return fsync(c->dfd) < 0 && errno != EINVAL ? -errno : 0;
}

/* The body of ffr_cache_shard for one entry name. want->file NULL: a single file. */
static int get_entry(struct ffr_cache *c, const char *src, const char *name,
                     const struct ffr_cache_shard *want, char *err, size_t cap)
{
    char why[512] = "";
    int rc, stripe = stripe_take(c, name);
    if (stripe < 0) return ffr_say(err, cap, stripe, "%s: lock: %s", c->dir, strerror(-stripe));
    struct stat st;
    if (fstatat(c->dfd, name, &st, 0) == 0) {
        rc = check_entry(c, name, want, c->o.full_verify, why, sizeof why);
        if (rc == 0) {
            touch(c, name);
            c->st.hits++;
            lock_drop(stripe);
            return 0;
        }
        /* Damaged or stale: it goes, and is fetched again below. */
        (void)unlinkat(c->dfd, name, 0);
        c->st.damaged++;
    }
    remove_stale_temps(c, name);
    char tmp[NAME_MAX + 64];
    const int tn = snprintf(tmp, sizeof tmp, ".tmp-%s-%ld-%u", name, (long)getpid(), c->tmp_seq++);
    if (tn < 0 || tn > NAME_MAX) {
        lock_drop(stripe);
        return ffr_say(err, cap, -ENAMETOOLONG, "%s: cache entry name too long", src);
    }
    /* Room and the temporary are made under the directory lock, and the temporary is created
     * at full size, so concurrent fetches see each other's space. */
    int fd = -1;
    const int dl = lock_take(c, ".lock");
    rc = dl < 0 ? dl : make_room(c, name, want->bytes, false, err, cap);
    if (rc == 0) {
        fd = openat(c->dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 || ftruncate(fd, (off_t)want->bytes) < 0)
            rc = ffr_say(err, cap, -errno, "%s/%s: %s", c->dir, tmp, strerror(errno));
    }
    lock_drop(dl);
    bool from_peer = false;
    if (rc == 0 && c->o.peers && want->file) {
        /* A peer first. Its bytes are checked in full here; whatever went wrong, the source
         * then writes every byte of the same temporary again. */
        int who = -1;
        why[0] = '\0';
        if (c->o.peers->fetch(c->o.peers->ctx, name, fd, want->bytes, &who, why, sizeof why) == 0) {
            const int chk = check_file(fd, name, want, 1, why, sizeof why);
            if (chk == 0) {
                from_peer = true;
            } else {
                c->st.peer_bad++;
                if (c->o.peers->bad) c->o.peers->bad(c->o.peers->ctx, who, why);
            }
        }
    }
    if (rc == 0 && !from_peer) {
        why[0] = '\0';
        rc = c->o.source && c->o.source->fetch
                 ? c->o.source->fetch(c->o.source->ctx, src, fd, want->bytes, why, sizeof why)
                 : copy_local(src, fd, want->bytes, why, sizeof why);
        if (rc < 0) ffr_say(err, cap, rc, "%s", why[0] ? why : ffr_strerror(rc));
    }
    if (rc == 0 && c->o.durable && fsync(fd) < 0)
        rc = ffr_say(err, cap, -errno, "%s/%s: fsync: %s", c->dir, tmp, strerror(errno));
    if (rc == 0 && !from_peer) {
        /* Every byte, whatever the reuse policy: this is the only time it is read in full
         * before it is trusted. (A peer's bytes were checked above.) */
        rc = check_file(fd, src, want, 1, why, sizeof why);
        if (rc < 0) ffr_say(err, cap, rc, "%s", why);
    }
    if (rc == 0 && renameat(c->dfd, tmp, c->dfd, name) < 0)
        rc = ffr_say(err, cap, -errno, "%s/%s: rename: %s", c->dir, name, strerror(errno));
    if (rc < 0) (void)unlinkat(c->dfd, tmp, 0);
    if (fd >= 0) close(fd);
    if (rc == 0 && c->o.durable) rc = fsync_dir(c);
    if (rc == 0) {
        touch(c, name);
        c->st.fetches++;
        c->st.fetched_bytes += want->bytes;
        if (from_peer) {
            c->st.peer_fetches++;
            c->st.peer_bytes += want->bytes;
        }
        rc = 1;
    }
    lock_drop(stripe);
    return rc;
}

/* Bytes [off, off + len) of a shard's source: the source's range read, or a local file. */
static int source_read(const struct ffr_cache *c, const char *src, void *dst, uint64_t off,
                       uint64_t len, char *err, size_t cap)
{
    if (c->o.source) {
        if (!c->o.source->read)
            return ffr_say(err, cap, -ENOTSUP, "%s: this cache's source reads no ranges", src);
        return c->o.source->read(c->o.source->ctx, src, dst, off, len, err, cap);
    }
    const int fd = ffr_open_regular(src, 0);
    if (fd < 0) return ffr_say(err, cap, fd, "%s: %s", src, ffr_strerror(fd));
    int rc = 0;
    for (uint64_t got = 0; rc == 0 && got < len;) {
        const ssize_t k = pread(fd, (uint8_t *)dst + got, (size_t)(len - got), (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) rc = k < 0 ? -errno : -FFR_ETRUNC;
        got += k > 0 ? (uint64_t)k : 0;
    }
    close(fd);
    return rc < 0 ? ffr_say(err, cap, rc, "%s: %s", src, ffr_strerror(rc)) : 0;
}

static int pwrite_full(int fd, const void *p, size_t n, uint64_t off)
{
    for (const uint8_t *b = p; n;) {
        const ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* Writes the skeleton of `want` into fd (a fresh file of its size): the header and trailer, and
 * the index they locate, in chunks through one bounded buffer. The trailer's count and index
 * hash must be the manifest's, and the index within max_index_bytes, before the index is read
 * at all, so a source cannot make us read more than the shard it claims to be, nor the reader
 * that opens the skeleton hold an index it would refuse from the remote reader. */
static int write_skeleton(const struct ffr_cache *c, const char *src,
                          const struct ffr_cache_shard *want, int fd, char *err, size_t cap)
{
    uint8_t head[FFR_HEADER_SIZE], tail[FFR_TRAILER_SIZE];
    if (want->bytes < sizeof head + sizeof tail)
        return ffr_say(err, cap, -FFR_ETRUNC,
                       "%s: %" PRIu64 " bytes: no room for a header and trailer", src, want->bytes);
    int rc = source_read(c, src, head, 0, sizeof head, err, cap);
    if (rc == 0) rc = source_read(c, src, tail, want->bytes - sizeof tail, sizeof tail, err, cap);
    struct ffr_index_extent ix;
    if (rc == 0) rc = ffr_locate_index(head, tail, want->bytes, src, &ix, err, cap);
    if (rc == 0 && (ix.records != want->records || ix.index_hash != want->index_hash))
        rc = ffr_say(err, cap, -FFR_ESHARD, "%s: its %s differs from the manifest", src,
                     ix.records != want->records ? "record count" : "index checksum");
    const uint64_t max_index = c->o.max_index_bytes ? c->o.max_index_bytes : CACHE_MAX_INDEX;
    if (rc == 0 && ix.size > max_index)
        rc = ffr_say(err, cap, -FFR_ETOOBIG,
                     "%s: its trailer claims a %" PRIu64
                     "-byte index, above the cache's limit of %" PRIu64 " bytes",
                     src, ix.size, max_index);
    if (rc == 0) rc = pwrite_full(fd, head, sizeof head, 0);
    if (rc == 0) rc = pwrite_full(fd, tail, sizeof tail, want->bytes - sizeof tail);
    uint8_t *buf = rc == 0 ? malloc(COPY_CHUNK) : NULL;
    if (rc == 0 && !buf) rc = -ENOMEM;
    for (uint64_t at = 0; rc == 0 && at < ix.size;) {
        const size_t n = ix.size - at < COPY_CHUNK ? (size_t)(ix.size - at) : COPY_CHUNK;
        rc = source_read(c, src, buf, ix.offset + at, n, err, cap);
        if (rc == 0) rc = pwrite_full(fd, buf, n, ix.offset + at);
        at += n;
    }
    free(buf);
    if (rc < 0 && err && cap && !err[0]) ffr_say(err, cap, rc, "%s: %s", src, ffr_strerror(rc));
    return rc;
}

/* Makes skeleton `name` of shard `want` present: reused when it checks out as the shard's
 * header, index and trailer, else written from src under a temporary, checked, renamed.
 * Returns 1 when made, 0 when reused, or a negative error. */
static int get_skeleton(struct ffr_cache *c, const char *src, const char *name,
                        const struct ffr_cache_shard *want, char *err, size_t cap)
{
    char why[512] = "";
    const int stripe = stripe_take(c, name);
    if (stripe < 0) return ffr_say(err, cap, stripe, "%s: lock: %s", c->dir, strerror(-stripe));
    if (check_entry(c, name, want, 0, why, sizeof why) == 0) {
        lock_drop(stripe);
        return 0;
    }
    (void)unlinkat(c->dfd, name, 0);
    remove_stale_temps(c, name);
    char tmp[NAME_MAX + 64];
    const int tn = snprintf(tmp, sizeof tmp, ".tmp-%s-%ld-%u", name, (long)getpid(), c->tmp_seq++);
    int rc = tn < 0 || tn > NAME_MAX
                 ? ffr_say(err, cap, -ENAMETOOLONG, "%s: cache entry name too long", src)
                 : 0;
    const int fd = rc == 0 ? openat(c->dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    if (rc == 0 && (fd < 0 || ftruncate(fd, (off_t)want->bytes) < 0))
        rc = ffr_say(err, cap, -errno, "%s/%s: %s", c->dir, tmp, strerror(errno));
    if (rc == 0) rc = write_skeleton(c, src, want, fd, err, cap);
    if (rc == 0 && c->o.durable && fsync(fd) < 0)
        rc = ffr_say(err, cap, -errno, "%s/%s: fsync: %s", c->dir, tmp, strerror(errno));
    /* What the reader will check at open, checked before the name is given. */
    if (rc == 0 && (rc = check_file(fd, src, want, 0, why, sizeof why)) < 0)
        ffr_say(err, cap, rc, "%s", why);
    if (rc == 0 && renameat(c->dfd, tmp, c->dfd, name) < 0)
        rc = ffr_say(err, cap, -errno, "%s/%s: rename: %s", c->dir, name, strerror(errno));
    if (rc < 0 && fd >= 0) (void)unlinkat(c->dfd, tmp, 0);
    if (fd >= 0) close(fd);
    if (rc == 0 && c->o.durable) rc = fsync_dir(c);
    lock_drop(stripe);
    return rc < 0 ? rc : 1;
}

static int entry_path(const struct ffr_cache *c, const char *name, char *path, size_t cap)
{
    if (!path || !cap) return 0;
    const int n = snprintf(path, cap, "%s/%s", c->dir, name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

void ffr_cache_entry_name(const struct ffr_cache_shard *w, char *name, size_t cap)
{
    /* Long manifest names are replaced by their hash, so the entry stays under NAME_MAX with
     * room for the temporary's suffix. */
    if (strlen(w->file) > 160)
        snprintf(name, cap, "%016" PRIx64 "-%" PRIu64 "-%016" PRIx64 ".ffr", w->index_hash,
                 w->bytes, ffr_xxh3(w->file, strlen(w->file)));
    else
        snprintf(name, cap, "%016" PRIx64 "-%" PRIu64 "-%s", w->index_hash, w->bytes, w->file);
}

int ffr_cache_shard(struct ffr_cache *c, const char *src, const struct ffr_cache_shard *want,
                    char *path, size_t path_cap, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!c || !src || !want || !want->file || !*want->file || strchr(want->file, '/'))
        return -EINVAL;
    char name[NAME_MAX + 1];
    ffr_cache_entry_name(want, name, sizeof name);
    const int rc = get_entry(c, src, name, want, err, err_cap);
    if (rc < 0) return rc;
    const int prc = entry_path(c, name, path, path_cap);
    return prc < 0 ? prc : rc;
}

/* ---- open / close ---- */

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    const int n = snprintf(tmp, sizeof tmp, "%s", dir);
    if (n < 0 || (size_t)n >= sizeof tmp) return -ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -errno;
    return 0;
}

int ffr_cache_open(struct ffr_cache **out, const char *dir, const struct ffr_cache_opts *opts,
                   char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!out || !dir || !*dir) return -EINVAL;
    *out = NULL;
    int rc = mkdir_p(dir);
    if (rc < 0)
        return ffr_say(err, err_cap, rc, "%s: cannot create the cache: %s", dir, strerror(-rc));
    struct ffr_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = strdup(dir))) {
        free(c);
        return -ENOMEM;
    }
    if (opts)
        c->o = *opts;
    else
        ffr_cache_opts_default(&c->o);
    c->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->dfd < 0) {
        rc = ffr_say(err, err_cap, -errno, "%s: %s", dir, strerror(errno));
        ffr_cache_close(c);
        return rc;
    }
    const int dl = lock_take(c, ".lock");
    if (dl < 0) {
        rc = ffr_say(err, err_cap, dl, "%s: cannot lock the cache: %s", dir, strerror(-dl));
        ffr_cache_close(c);
        return rc;
    }
    remove_stale_temps(c, NULL);
    lock_drop(dl);
    *out = c;
    return 0;
}

void ffr_cache_close(struct ffr_cache *c)
{
    if (!c) return;
    pins_clear(c);
    free(c->pins);
    if (c->dfd >= 0 && c->dir) close(c->dfd);
    free(c->dir);
    free(c);
}

/* A cached shard's name: "HHHHHHHHHHHHHHHH-BYTES-FILE" or "fHHHHHHHHHHHHHHHH-BYTES-BASE". */
static bool entry_shaped_at(const char *n)
{
    if (strspn(n, "0123456789abcdef") < 16 || n[16] != '-') return false;
    const size_t d = strspn(n + 17, "0123456789");
    return d > 0 && n[17 + d] == '-' && n[18 + d];
}

/* (An index hash may itself start with 'f': both readings are tried.) */
static bool entry_shaped(const char *n)
{
    return entry_shaped_at(n) || (*n == 'f' && entry_shaped_at(n + 1));
}

int ffr_cache_discard(struct ffr_cache *c, const char *path, char *err, size_t err_cap)
{
    if (!c || !path) return -EINVAL;
    const char *name = base_name(path);
    struct stat in_dir, given;
    /* the same file as the entry of that name in this cache: nothing else can be removed */
    if (!entry_shaped(name) || fstatat(c->dfd, name, &in_dir, AT_SYMLINK_NOFOLLOW) < 0 ||
        stat(path, &given) < 0 || in_dir.st_dev != given.st_dev || in_dir.st_ino != given.st_ino)
        return ffr_say(err, err_cap, -ENOENT, "%s: not a cached shard of %s", path, c->dir);
    const int lk = stripe_take(c, name); /* no fetch of this entry is half done meanwhile */
    if (lk < 0) return ffr_say(err, err_cap, lk, "%s: lock: %s", c->dir, strerror(-lk));
    int rc = 0;
    struct stat now;
    /* only the damaged copy: another process may have fetched a fresh one in the meantime */
    if (fstatat(c->dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == given.st_ino &&
        now.st_dev == given.st_dev && unlinkat(c->dfd, name, 0) < 0)
        rc = ffr_say(err, err_cap, -errno, "%s: %s", path, strerror(errno));
    lock_drop(lk);
    if (rc == 0) c->st.damaged++;
    return rc;
}

/* ---- whole datasets ---- */

/* Reads the whole of a (small) source into memory: a local file, or through the source into an
 * anonymous file. *text is malloc'ed (NUL-terminated). */
static int read_small(struct ffr_cache *c, const char *src, uint64_t size, uint8_t **text,
                      char *err, size_t cap)
{
    *text = malloc((size_t)size + 1);
    if (!*text) return -ENOMEM;
    int fd, rc = 0;
    if (c->o.source && c->o.source->fetch) {
        fd = memfd_create("ffr-cache-manifest", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)size) < 0) rc = -errno;
        if (rc == 0) rc = c->o.source->fetch(c->o.source->ctx, src, fd, size, err, cap);
    } else {
        fd = ffr_open_regular(src, 0);
        if (fd < 0) rc = ffr_say(err, cap, fd, "%s: %s", src, ffr_strerror(fd));
    }
    for (uint64_t got = 0; rc == 0 && got < size;) {
        const ssize_t k = pread(fd, *text + got, (size_t)(size - got), (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) rc = k < 0 ? -errno : -FFR_ETRUNC;
        got += k > 0 ? (uint64_t)k : 0;
    }
    if (fd >= 0) close(fd);
    if (rc < 0) {
        free(*text);
        *text = NULL;
        if (err && cap && !err[0]) ffr_say(err, cap, rc, "%s: %s", src, ffr_strerror(rc));
        return rc;
    }
    (*text)[size] = 0;
    return 0;
}

static int source_size(struct ffr_cache *c, const char *src, uint64_t *size, char *err, size_t cap)
{
    if (c->o.source && c->o.source->size)
        return c->o.source->size(c->o.source->ctx, src, size, err, cap);
    struct stat st;
    if (stat(src, &st) < 0) return ffr_say(err, cap, -errno, "%s: %s", src, strerror(errno));
    if (!S_ISREG(st.st_mode)) return ffr_say(err, cap, -EINVAL, "%s: not a regular file", src);
    *size = (uint64_t)st.st_size;
    return 0;
}

/* Writes `text` as the entry `name` (temporary, fsync, rename) unless it is there already. */
static int put_text(struct ffr_cache *c, const char *name, const char *text, size_t len, char *err,
                    size_t cap)
{
    struct stat st;
    if (fstatat(c->dfd, name, &st, 0) == 0 && (uint64_t)st.st_size == len) {
        touch(c, name); /* content-addressed: the same name holds the same text */
        return 0;
    }
    char tmp[NAME_MAX + 64];
    const int tn = snprintf(tmp, sizeof tmp, ".tmp-%s-%ld-%u", name, (long)getpid(), c->tmp_seq++);
    if (tn < 0 || tn > NAME_MAX)
        return ffr_say(err, cap, -ENAMETOOLONG, "%s: cache entry name too long", name);
    const int fd = openat(c->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ffr_say(err, cap, -errno, "%s/%s: %s", c->dir, tmp, strerror(errno));
    int rc = 0;
    for (size_t done = 0; rc == 0 && done < len;) {
        const ssize_t k = write(fd, text + done, len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) rc = k < 0 ? -errno : -EIO;
        done += k > 0 ? (size_t)k : 0;
    }
    if (rc == 0 && c->o.durable && fsync(fd) < 0) rc = -errno;
    close(fd);
    if (rc == 0 && renameat(c->dfd, tmp, c->dfd, name) < 0) rc = -errno;
    if (rc < 0) {
        (void)unlinkat(c->dfd, tmp, 0);
        return ffr_say(err, cap, rc, "%s/%s: %s", c->dir, name, strerror(-rc));
    }
    touch(c, name);
    return c->o.durable ? fsync_dir(c) : 0;
}

/* Appends formatted text to a growing buffer. */
struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        const int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        const size_t want = (b->cap ? 2 * b->cap : 4096) + (size_t)k + 1;
        char *np = realloc(b->p, want);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = want;
    }
}

/* The body of ffr_cache_dataset (skel false) and ffr_cache_skeletons (skel true) for a
 * manifest: each shard made present as an entry or a skeleton, then the manifest naming them. */
static int cache_manifest(struct ffr_cache *c, const char *src, const uint8_t *text, size_t len,
                          bool skel, char *path, size_t path_cap, char *err, size_t cap)
{
    struct ffr_manifest m;
    char why[512] = "";
    int rc = ffr_manifest_parse(&m, text, len, why, sizeof why);
    if (rc < 0) return ffr_say(err, cap, rc, "%s: %s", src, why);
    struct sbuf b = { 0 };
    sb_printf(&b,
              "# ffr manifest\n# cached from %s\nffr_manifest: 1\nrecords: %" PRIu64 "\nshards:\n",
              src, m.records);
    int fetched = 0;
    char *shard_src = NULL;
    for (uint32_t k = 0; k < m.n_shards && rc >= 0; k++) {
        const struct ffr_manifest_shard *ms = &m.shards[k];
        free(shard_src);
        if (!(shard_src = ffr_manifest_shard_source(src, ms->file))) {
            rc = -ENOMEM;
            break;
        }
        const struct ffr_cache_shard want = { ms->file, ms->bytes, ms->records, ms->index_hash };
        char name[NAME_MAX + 1];
        const size_t pre = skel ? sizeof SKEL_PREFIX - 1 : 0;
        memcpy(name, SKEL_PREFIX, pre);
        ffr_cache_entry_name(&want, name + pre, sizeof name - pre);
        if (skel)
            rc = get_skeleton(c, shard_src, name, &want, err, cap);
        else if ((rc = pin_add(c, name)) == 0)
            rc = get_entry(c, shard_src, name, &want, err, cap);
        if (rc < 0) break;
        fetched += rc;
        sb_printf(&b,
                  "  - file: \"%s\"\n    bytes: %" PRIu64 "\n    records: %" PRIu64
                  "\n    index_hash: 0x%016" PRIx64 "\n",
                  name, ms->bytes, ms->records, ms->index_hash);
    }
    free(shard_src);
    if (rc >= 0 && b.oom) rc = -ENOMEM;
    if (rc >= 0) {
        char name[NAME_MAX + 1];
        const char *base = base_name(src);
        snprintf(name, sizeof name, "%c%016" PRIx64 "-%.180s", skel ? 'v' : 'm', ffr_xxh3(b.p, b.n),
                 *base ? base : "manifest.ffr");
        rc = put_text(c, name, b.p, b.n, err, cap);
        if (rc == 0) rc = entry_path(c, name, path, path_cap);
        if (rc == 0) rc = fetched;
    }
    free(b.p);
    ffr_manifest_free(&m);
    return rc;
}

int ffr_cache_manifest_shards(struct ffr_cache *c, const char *src, struct ffr_cache_shard **out,
                              uint32_t *n, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!c || !src || !*src || !out || !n) return -EINVAL;
    *out = NULL;
    *n = 0;
    uint64_t size = 0;
    int rc = source_size(c, src, &size, err, err_cap);
    if (rc < 0 || size > FFR_MANIFEST_MAX) return rc < 0 ? rc : 0;
    uint8_t *text = NULL;
    if ((rc = read_small(c, src, size, &text, err, err_cap)) < 0) return rc;
    if (ffr_manifest_sniff(text, (size_t)size)) {
        char why[512] = "";
        rc = ffr_manifest_shards(text, (size_t)size, out, n, why, sizeof why);
        if (rc < 0) ffr_say(err, err_cap, rc, "%s: %s", src, why);
    }
    free(text);
    return rc;
}

int ffr_cache_dataset(struct ffr_cache *c, const char *src, char *path, size_t path_cap, char *err,
                      size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!c || !src || !*src) return -EINVAL;
    uint64_t size = 0;
    int rc = source_size(c, src, &size, err, err_cap);
    if (rc < 0) return rc;
    pins_clear(c);
    if (size <= FFR_MANIFEST_MAX) {
        uint8_t *text = NULL;
        if ((rc = read_small(c, src, size, &text, err, err_cap)) < 0) return rc;
        if (ffr_manifest_sniff(text, (size_t)size))
            rc = cache_manifest(c, src, text, (size_t)size, false, path, path_cap, err, err_cap);
        else
            rc = INT_MIN; /* a record file: below */
        free(text);
        if (rc != INT_MIN) {
            pins_clear(c);
            return rc;
        }
    }
    /* A single record file: there is no manifest to name its hash, so it is keyed by its
     * source and size and checked as a complete ffr file of that size. */
    const char *base = base_name(src);
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, "f%016" PRIx64 "-%" PRIu64 "-%.160s", ffr_xxh3(src, strlen(src)),
             size, *base ? base : "data.ffr");
    const struct ffr_cache_shard want = { NULL, size, 0, 0 };
    rc = get_entry(c, src, name, &want, err, err_cap);
    if (rc >= 0) {
        const int prc = entry_path(c, name, path, path_cap);
        if (prc < 0) rc = prc;
    }
    return rc;
}

int ffr_cache_skeletons(struct ffr_cache *c, const char *src, char *path, size_t path_cap,
                        char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!c || !src || !*src) return -EINVAL;
    uint64_t size = 0;
    int rc = source_size(c, src, &size, err, err_cap);
    if (rc < 0) return rc;
    uint8_t *text = NULL;
    if (size > FFR_MANIFEST_MAX || (rc = read_small(c, src, size, &text, err, err_cap)) < 0 ||
        !ffr_manifest_sniff(text, (size_t)size)) {
        free(text);
        return rc < 0
                   ? rc
                   : ffr_say(err, err_cap, -EINVAL,
                             "%s: a single record file: a cache holds it whole or not at all", src);
    }
    rc = cache_manifest(c, src, text, (size_t)size, true, path, path_cap, err, err_cap);
    free(text);
    return rc;
}

/* ---- manifest access for other modules ---- */

int ffr_manifest_shards(const void *text, size_t len, struct ffr_cache_shard **out, uint32_t *n,
                        char *err, size_t err_cap)
{
    if (!text || !out || !n) return -EINVAL;
    *out = NULL;
    *n = 0;
    struct ffr_manifest m;
    int rc = ffr_manifest_parse(&m, text, len, err, err_cap);
    if (rc < 0) return rc;
    struct ffr_cache_shard *s = calloc(m.n_shards, sizeof *s);
    if (!s) {
        ffr_manifest_free(&m);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < m.n_shards; k++) {
        s[k].file = m.shards[k].file; /* ownership moves to the list */
        m.shards[k].file = NULL;
        s[k].bytes = m.shards[k].bytes;
        s[k].records = m.shards[k].records;
        s[k].index_hash = m.shards[k].index_hash;
    }
    *n = m.n_shards;
    *out = s;
    ffr_manifest_free(&m);
    return 0;
}

char *ffr_manifest_shard_source(const char *manifest, const char *file)
{
    const char *slash = strrchr(manifest, '/');
    const int dirlen = slash ? (int)(slash - manifest) : 0;
    const size_t need = (size_t)dirlen + strlen(file) + 2;
    char *s = malloc(need);
    if (s && slash)
        snprintf(s, need, "%.*s/%s", dirlen, manifest, file);
    else if (s)
        snprintf(s, need, "%s", file);
    return s;
}

void ffr_manifest_shards_free(struct ffr_cache_shard *s, uint32_t n)
{
    if (!s) return;
    for (uint32_t k = 0; k < n; k++)
        free((char *)s[k].file);
    free(s);
}

int ffr_manifest_sniff_text(const void *head, size_t n)
{
    return head ? ffr_manifest_sniff(head, n) : 0;
}

int ffr_cache_pin(struct ffr_cache *c, const struct ffr_cache_shard *w)
{
    if (!c || !w || !w->file) return -EINVAL;
    char name[NAME_MAX + 1];
    ffr_cache_entry_name(w, name, sizeof name);
    return pinned(c, name) ? 0 : pin_add(c, name);
}

void ffr_cache_unpin_all(struct ffr_cache *c)
{
    if (c) pins_clear(c);
}

int ffr_cache_fits(struct ffr_cache *c, uint64_t bytes)
{
    if (!c) return -EINVAL;
    const int rc = make_room(c, "", bytes, true, NULL, 0);
    return rc == 0 ? 1 : rc == -ENOSPC ? 0 : rc;
}
