/*
 * The node-local shard cache (ffr_cache_*): a sharded dataset is cached and read back equal to
 * the source; reuse, damaged entries detected and fetched again, a killed copy and a short or
 * damaged source never visible under a final name, LRU eviction under the size limit, and
 * several processes fetching the same shards at once (each shard fetched exactly once).
 * argv[1]: a scratch directory on a real disk (the build directory).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ffr.h"
#include "tap.h"

static char root[4096];

/* A dataset of `n` records of 2500..3500 random bytes, sharded at `shard_bytes`. */
static int make_dataset(const char *path, uint32_t n, uint64_t shard_bytes, uint64_t seed)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.shard_bytes = shard_bytes;
    o.durable = 0;
    struct ffr_writer *w;
    if (ffr_writer_open(&w, path, &o) < 0) return -1;
    uint8_t buf[4000];
    for (uint32_t i = 0; i < n; i++) {
        const size_t len = 2500 + (size_t)((seed + i * 7919) % 1000);
        for (size_t k = 0; k < len; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            buf[k] = (uint8_t)(seed >> 56);
        }
        if (ffr_writer_append(w, buf, len, &i, sizeof i) < 0) {
            ffr_writer_abort(w);
            return -1;
        }
    }
    return ffr_writer_close(w);
}

/* 1 when both paths open and hold the same records. */
static int same_records(const char *a, const char *b)
{
    struct ffr_reader *ra = NULL, *rb = NULL;
    int same = ffr_reader_open(&ra, a, NULL, NULL, 0) == 0 &&
               ffr_reader_open(&rb, b, NULL, NULL, 0) == 0 &&
               ffr_reader_count(ra) == ffr_reader_count(rb);
    static uint8_t x[8192], y[8192];
    for (uint64_t i = 0; same && i < ffr_reader_count(ra); i++) {
        const int64_t nx = ffr_reader_read(ra, NULL, i, x, sizeof x);
        const int64_t ny = ffr_reader_read(rb, NULL, i, y, sizeof y);
        same = nx > 0 && nx == ny && !memcmp(x, y, (size_t)nx);
    }
    ffr_reader_close(ra);
    ffr_reader_close(rb);
    return same;
}

static int flip_byte(const char *path, off_t off)
{
    const int fd = open(path, O_RDWR);
    uint8_t b = 0;
    int rc = fd >= 0 && pread(fd, &b, 1, off) == 1 ? 0 : -1;
    b ^= 0x5a;
    if (rc == 0 && pwrite(fd, &b, 1, off) != 1) rc = -1;
    if (fd >= 0) close(fd);
    return rc;
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Files in dir: total, and how many are temporaries. */
static void count_dir(const char *dir, int *finals, int *temps, uint64_t *bytes)
{
    *finals = *temps = 0;
    if (bytes) *bytes = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strncmp(e->d_name, ".tmp-", 5)) {
            (*temps)++;
        } else if (e->d_name[0] != '.') {
            (*finals)++;
            if (bytes) {
                char p[8192];
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                *bytes += (uint64_t)file_size(p);
            }
        }
    }
    if (d) closedir(d);
}

/* A test source: copies a local file, optionally short, dying half way, or slowly with a log. */
struct src_ctx {
    int mode;          /* 0 copy, 1 write half then SIGKILL self, 2 write half and claim success */
    const char *log;   /* append "fetch SRC" here (mode 0), or NULL */
    unsigned delay_ms; /* sleep before copying */
    unsigned long calls; /* fetches made by this process */
};

static int src_size(void *ctx, const char *src, uint64_t *size, char *err, size_t cap)
{
    (void)ctx;
    const off_t n = file_size(src);
    if (n < 0) {
        snprintf(err, cap, "%s: missing", src);
        return -ENOENT;
    }
    *size = (uint64_t)n;
    return 0;
}

static int src_fetch(void *ctx, const char *src, int fd, uint64_t size, char *err, size_t cap)
{
    struct src_ctx *s = ctx;
    s->calls++;
    if (s->delay_ms) {
        const struct timespec t = { 0, (long)s->delay_ms * 1000000L };
        nanosleep(&t, NULL);
    }
    if (s->log) {
        const int lf = open(s->log, O_WRONLY | O_APPEND | O_CREAT, 0644);
        char line[4200];
        const int n = snprintf(line, sizeof line, "fetch %s\n", src);
        if (lf >= 0) {
            const ssize_t wr = write(lf, line, (size_t)n);
            (void)wr; /* a lost log line shows up as a wrong count below */
            close(lf);
        }
    }
    const int in = open(src, O_RDONLY);
    if (in < 0) {
        snprintf(err, cap, "%s: cannot open", src);
        return -ENOENT;
    }
    uint8_t *buf = malloc((size_t)size);
    int rc = buf && pread(in, buf, (size_t)size, 0) == (ssize_t)size ? 0 : -EIO;
    close(in);
    const size_t give = s->mode ? (size_t)size / 2 : (size_t)size;
    if (rc == 0 && pwrite(fd, buf, give, 0) != (ssize_t)give) rc = -EIO;
    free(buf);
    if (s->mode == 1) raise(SIGKILL); /* a copy killed half way */
    return rc;
}

static int open_cache(struct ffr_cache **c, const char *dir, uint64_t max_bytes, int full,
                      const struct ffr_cache_source *src)
{
    struct ffr_cache_opts o;
    ffr_cache_opts_default(&o);
    o.max_bytes = max_bytes;
    o.full_verify = full;
    o.source = src;
    o.durable = 0; /* the scratch disk is shared with other builds: spare it the fsyncs */
    char err[512];
    const int rc = ffr_cache_open(c, dir, &o, err, sizeof err);
    if (rc < 0) tap_diag("ffr_cache_open: %s", err);
    return rc;
}

/* Shard k's manifest description (from a reader of the source). */
static void shard_want(struct ffr_reader *r, uint32_t k, struct ffr_cache_shard *w, char *src,
                       size_t cap)
{
    struct ffr_shard_info si;
    ffr_reader_shard(r, k, &si);
    snprintf(src, cap, "%s", si.path);
    const char *slash = strrchr(si.path, '/');
    w->file = slash ? slash + 1 : si.path;
    w->bytes = si.file_size;
    w->records = si.count;
    w->index_hash = si.index_hash;
}

/* ffr_cache_discard (issue 20): removes a cached shard by path, and nothing else; entry names
 * whose index hash begins with 'f' (like a single file's "f" prefix) are entries too (a
 * parallel run drew one: "not a cached shard"). */
static void test_discard(const char *dir)
{
    struct ffr_cache *c = NULL;
    char err[512];
    if (ffr_cache_open(&c, dir, NULL, err, sizeof err) < 0) return;
    static const char *const entries[] = { "fe360069f7700156-76800-train-00001.ffr",
                                           "0123456789abcdef-4096-a.ffr",
                                           "ffe360069f7700156-100-data.ffr" };
    for (size_t k = 0; k < 3; k++) {
        char p[9000];
        snprintf(p, sizeof p, "%s/%s", dir, entries[k]);
        FILE *f = fopen(p, "w");
        if (f) fclose(f);
        const int rc = ffr_cache_discard(c, p, err, sizeof err);
        ok(rc == 0 && access(p, F_OK) != 0, "discard %s: removed (%d %s)", entries[k], rc,
           rc ? err : "");
    }
    char p[9000];
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
    ok(ffr_cache_discard(c, p, err, sizeof err) == -ENOENT && access(p, F_OK) == 0,
       "a file that is no entry is refused and kept: %s", err);
    snprintf(p, sizeof p, "%s/../0123456789abcdef-4096-a.ffr", dir);
    f = fopen(p, "w");
    if (f) fclose(f);
    ok(ffr_cache_discard(c, p, err, sizeof err) == -ENOENT && access(p, F_OK) == 0,
       "an entry-shaped file outside the cache is refused and kept");
    ffr_cache_close(c);
}

/* The eviction policy alone (ffr_cache_lru_order, which make_room and scripts/sim-sharing both
 * use): oldest use first, ties by name, just enough to fit, -ENOSPC when nothing is enough. */
static void test_lru_order(void)
{
    struct ffr_cache_use e[5] = {
        { "c", 30, 300, 0 }, { "a", 10, 100, 1 }, { "e", 50, 100, 2 },
        { "b", 20, 200, 3 }, { "d", 40, 50, 4 },
    };
    /* 150 bytes in use, limit 160: room for 10 more without evicting. */
    int64_t k = ffr_cache_lru_order(e, 5, 150, 10, 160);
    ok(k == 0, "fits: nothing evicted (%" PRId64 ")", k);
    k = ffr_cache_lru_order(e, 5, 150, 60, 160);
    ok(k == 2 && !strcmp(e[0].name, "d") && !strcmp(e[1].name, "a") && !strcmp(e[2].name, "e") &&
           !strcmp(e[3].name, "b") && !strcmp(e[4].name, "c"),
       "60 more under 160: the two oldest go (d at 50, then a at 100, before e at 100 by name): "
       "%" PRId64 ", order %s %s %s %s %s",
       k, e[0].name, e[1].name, e[2].name, e[3].name, e[4].name);
    ok(ffr_cache_lru_order(e, 5, 150, 10, 0) == 0, "no limit: nothing evicted");
    ok(ffr_cache_lru_order(e, 5, 150 + 101, 60, 160) == -ENOSPC &&
           ffr_cache_lru_order(e, 5, 150 + 100, 60, 160) == 5,
       "101 unevictable bytes (pinned, temporaries) leave no room for 60 (-ENOSPC); 100 do, all 5 "
       "evicted");
    ok(ffr_cache_lru_order(e, 5, 150, 161, 160) == -ENOSPC, "a need over the limit: -ENOSPC");
    ok(ffr_cache_lru_order(NULL, 0, 0, 160, 160) == 0 &&
           ffr_cache_lru_order(NULL, 0, 1, 160, 160) == -ENOSPC,
       "no entries: fits exactly, or -ENOSPC");
}

/* A source read that counts the bytes it gives, for ffr_cache_skeletons (ranges only). */
static uint64_t range_bytes;
static int range_read(void *ctx, const char *src, void *dst, uint64_t off, uint64_t len, char *err,
                      size_t cap)
{
    (void)ctx;
    const int fd = open(src, O_RDONLY | O_CLOEXEC);
    const ssize_t k = fd >= 0 ? pread(fd, dst, (size_t)len, (off_t)off) : -1;
    if (fd >= 0) close(fd);
    if (k != (ssize_t)len) {
        snprintf(err, cap, "%s: short read", src);
        return -EIO;
    }
    range_bytes += len;
    return 0;
}

/*
 * A cache smaller than the dataset (ffr_cache_skeletons, ffr_reader_swap_shard): a view of
 * skeletons opens with every count and summary, reads nothing from a skeleton, reads a shard
 * swapped in byte for byte as the source, and refuses another shard's file, a damaged index or
 * an index above the cache's limit.
 */
static void test_skeletons(const char *src, const char *dir)
{
    struct src_ctx sc = { 0 };
    struct ffr_cache_source rs = { src_size, src_fetch, &sc, range_read };
    struct ffr_cache *c = NULL;
    if (open_cache(&c, dir, 0, 0, &rs) < 0) return;
    char view[4200], err[1024];
    range_bytes = 0;
    int rc = ffr_cache_skeletons(c, src, view, sizeof view, err, sizeof err);
    struct ffr_reader *sr = NULL, *v = NULL;
    ffr_reader_open(&sr, src, NULL, NULL, 0);
    const uint32_t ns = ffr_reader_shard_count(sr);
    uint64_t data = 0, index = 0;
    for (uint32_t k = 0; k < ns; k++) {
        struct ffr_shard_info si;
        ffr_reader_shard(sr, k, &si);
        data += si.file_size;
        index += si.index_bytes;
    }
    ok(rc == (int)ns, "%u skeletons made (%d %s)", ns, rc, rc < 0 ? err : "");
    ok(range_bytes <= index + ns * (64 + 1536) && range_bytes < data / 10,
       "they read %" PRIu64 " bytes by range: the indexes (%" PRIu64 ") and each header and "
       "trailer, not the %" PRIu64 " of the dataset",
       range_bytes, index, data);
    range_bytes = 0;
    ok(ffr_cache_skeletons(c, src, view, sizeof view, err, sizeof err) == 0 && range_bytes == 0,
       "a second call reuses them all and reads nothing");
    rc = ffr_reader_open(&v, view, NULL, err, sizeof err);
    ok(rc == 0 && ffr_reader_count(v) == ffr_reader_count(sr) &&
           ffr_reader_content_hash(v) == ffr_reader_content_hash(sr),
       "the view opens: the dataset's counts and summaries (%s)", rc ? err : "");
    static uint8_t x[8192], y[8192];
    struct ffr_shard_info s1;
    ffr_reader_shard(v, 1, &s1);
    const int64_t bad = v ? ffr_reader_read(v, NULL, s1.first, x, sizeof x) : 0;
    ok(bad < 0, "a record of a skeleton does not read (%s)", ffr_strerror((int)bad));
    /* shard 1 in: its cached entry */
    struct ffr_cache_shard w;
    char from[4200], entry[4200];
    shard_want(sr, 1, &w, from, sizeof from);
    rc = ffr_cache_shard(c, from, &w, entry, sizeof entry, err, sizeof err);
    int swap = rc >= 0 ? ffr_reader_swap_shard(v, 1, entry, err, sizeof err) : rc;
    bool same = swap == 0;
    for (uint64_t i = s1.first; same && i < s1.first + s1.count; i++) {
        const int64_t a = ffr_reader_read(v, NULL, i, x, sizeof x);
        same = a > 0 && a == ffr_reader_read(sr, NULL, i, y, sizeof y) && !memcmp(x, y, (size_t)a);
    }
    struct ffr_shard_info t;
    ffr_reader_shard(v, 1, &t);
    ok(same && !strcmp(t.path, entry) && t.fd == s1.fd,
       "shard 1 swapped in: its %" PRIu64 " records read as the source's, under the same "
       "descriptor (%d %s)",
       s1.count, swap, swap ? err : "");
    /* another shard's file, and a copy whose index is damaged, are refused; shard 1 is kept */
    char other[4200];
    struct ffr_cache_shard w2;
    shard_want(sr, 2, &w2, other, sizeof other);
    rc = ffr_reader_swap_shard(v, 1, other, err, sizeof err);
    ok(rc == -FFR_ESHARD && strstr(err, "not a copy of shard 1"), "shard 2's file for shard 1: %s",
       err);
    char bent[4300];
    snprintf(bent, sizeof bent, "%s/bent.ffr", root);
    static char cp[9000];
    snprintf(cp, sizeof cp, "cp '%s' '%s'", from, bent);
    if (system(cp) != 0) tap_diag("cp failed");
    struct ffr_index_extent ix;
    uint8_t head[64], tail[1536];
    int fd = open(bent, O_RDWR);
    const off_t end = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
    if (fd >= 0 && pread(fd, head, 64, 0) == 64 && pread(fd, tail, 1536, end - 1536) == 1536 &&
        ffr_locate_index(head, tail, (uint64_t)end, bent, &ix, NULL, 0) == 0) {
        uint8_t b;
        if (pread(fd, &b, 1, (off_t)(ix.offset + ix.size - 1)) == 1) {
            b ^= 0x40;
            if (pwrite(fd, &b, 1, (off_t)(ix.offset + ix.size - 1)) != 1) tap_diag("pwrite");
        }
    }
    if (fd >= 0) close(fd);
    rc = ffr_reader_swap_shard(v, 1, bent, err, sizeof err);
    ffr_reader_shard(v, 1, &t);
    ok(rc == -FFR_ECHECKSUM && !strcmp(t.path, entry), "a copy with a flipped index byte: %s",
       ffr_strerror(rc));
    /* out again: the skeleton, whose records do not read */
    static char skel[9000];
    snprintf(skel, sizeof skel, "%s/.skel-%s", dir, strrchr(entry, '/') + 1);
    swap = ffr_reader_swap_shard(v, 1, skel, err, sizeof err);
    ok(swap == 0 && ffr_reader_read(v, NULL, s1.first, x, sizeof x) < 0,
       "shard 1 back to its skeleton: its records do not read (%s)", swap ? err : "");
    /* skeletons count by their blocks: a limit of the data alone is enough for every shard */
    struct stat st;
    const int sr_rc = stat(skel, &st);
    ok(sr_rc == 0 && (uint64_t)st.st_size == w.bytes && (uint64_t)st.st_blocks * 512 < w.bytes,
       "a skeleton has the shard's size (%" PRIu64 ") and takes %" PRIu64 " bytes of disk",
       (uint64_t)st.st_size, (uint64_t)st.st_blocks * 512);
    ffr_reader_close(v);
    ffr_reader_close(sr);
    ffr_cache_close(c);
    /* a single record file is no dataset to leave records out of */
    if (open_cache(&c, dir, 0, 0, &rs) == 0) {
        char one[4300];
        snprintf(one, sizeof one, "%s/one.ffr", root);
        make_dataset(one, 3, 0, 4);
        ok(ffr_cache_skeletons(c, one, view, sizeof view, err, sizeof err) == -EINVAL,
           "a single file: %s", err);
        ffr_cache_close(c);
    }
    /* A source whose shard 0 is not the one its manifest describes (the manifest's index hash
     * altered): refused after its header and trailer, before any index byte is read, and
     * nothing is left under a final or temporary name. */
    static char liar[4600], cmd[9800], cdir2[4600];
    const char *base = strrchr(src, '/');
    snprintf(liar, sizeof liar, "%s/liar", root);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%.*s'/* '%s'", liar, (int)(base - src), src,
             liar);
    int lied = system(cmd) == 0 ? -1 : -2;
    snprintf(liar + strlen(liar), sizeof liar - strlen(liar), "%s", base);
    FILE *f = fopen(liar, "r+");
    static char text[1 << 16];
    const size_t tn = f ? fread(text, 1, sizeof text - 1, f) : 0;
    char *h = tn ? strstr(text, "index_hash: 0x") : NULL;
    if (h) {
        h += strlen("index_hash: 0x") + 15;
        *h = *h == '0' ? '1' : '0';
        rewind(f);
        lied = fwrite(text, 1, tn, f) == tn ? 0 : -3;
    }
    if (f) fclose(f);
    snprintf(cdir2, sizeof cdir2, "%s/liar-cache", root);
    if (lied == 0 && open_cache(&c, cdir2, 0, 0, &rs) == 0) {
        range_bytes = 0;
        rc = ffr_cache_skeletons(c, liar, view, sizeof view, err, sizeof err);
        snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '^\\.skel-\\|^\\.tmp-'", cdir2);
        FILE *ls = popen(cmd, "r");
        int left = -1;
        if (ls) {
            if (fscanf(ls, "%d", &left) != 1) left = -1;
            pclose(ls);
        }
        ok(rc == -FFR_ESHARD && range_bytes == 64 + 1536 && left == 0,
           "a shard that is not the manifest's: %s; %" PRIu64 " bytes read (the header and "
           "trailer), %d skeletons or temporaries left",
           err, range_bytes, left);
        ffr_cache_close(c);
    } else {
        ok(0, "a copy of the source with its manifest altered (%d)", lied);
    }
    /* An index above the cache's limit (here one byte below shard 0's, where the default is
     * 1 GiB): refused from the trailer's claim, before any index byte is read. */
    struct ffr_cache_opts lo;
    ffr_cache_opts_default(&lo);
    lo.source = &rs;
    lo.durable = 0;
    struct ffr_shard_info s0 = { 0 };
    struct ffr_reader *r0 = NULL;
    if (ffr_reader_open(&r0, src, NULL, NULL, 0) == 0) ffr_reader_shard(r0, 0, &s0);
    ffr_reader_close(r0);
    const bool dflt = lo.max_index_bytes == (1ull << 30);
    lo.max_index_bytes = s0.index_bytes - 1;
    snprintf(cdir2, sizeof cdir2, "%s/small-index-cache", root);
    if (s0.index_bytes && ffr_cache_open(&c, cdir2, &lo, err, sizeof err) == 0) {
        range_bytes = 0;
        rc = ffr_cache_skeletons(c, src, view, sizeof view, err, sizeof err);
        ok(rc == -FFR_ETOOBIG && dflt && range_bytes == 64 + 1536 && strstr(err, "index"),
           "an index of %" PRIu64 " bytes above a limit of %" PRIu64 " (default 1 GiB: %d): %s; "
           "%" PRIu64 " bytes read",
           s0.index_bytes, lo.max_index_bytes, dflt, err, range_bytes);
        ffr_cache_close(c);
    } else {
        ok(0, "a cache with a small index limit");
    }
}

/* Pins (ffr_cache_pin, ffr_cache_fits): a prefetch must not evict what is being read. A limit
 * of two shards holding shards 0 and 1: with both pinned a third does not fit and asking
 * evicts nothing; with only 0 pinned it fits, and fetching it evicts 1, not 0, although 0 is
 * the older. */
static void test_pins(const char *src, const char *dir)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, src, NULL, NULL, 0) < 0) return;
    struct ffr_cache_shard w[3];
    char from[3][4200], path[4200], err[512] = "";
    for (uint32_t k = 0; k < 3; k++)
        shard_want(r, k, &w[k], from[k], sizeof from[k]);
    struct ffr_cache *c = NULL;
    int rc = open_cache(&c, dir, w[0].bytes + w[1].bytes + w[2].bytes / 2, 0, NULL);
    for (uint32_t k = 0; rc >= 0 && k < 2; k++)
        rc = ffr_cache_shard(c, from[k], &w[k], path, sizeof path, err, sizeof err);
    if (rc >= 0) rc = ffr_cache_pin(c, &w[0]);
    if (rc >= 0) rc = ffr_cache_pin(c, &w[1]);
    const int both = rc >= 0 ? ffr_cache_fits(c, w[2].bytes) : -1;
    struct ffr_cache_stats st;
    ffr_cache_stats(c, &st);
    ok(rc >= 0 && both == 0 && st.evicted == 0 && ffr_cache_fits(c, 1) == 1,
       "shards 0 and 1 pinned: shard 2 does not fit (%d), 1 byte does, nothing evicted (%d %s)",
       both, rc, rc < 0 ? err : "");
    ffr_cache_unpin_all(c);
    if (rc >= 0) rc = ffr_cache_pin(c, &w[1]);
    const int one = rc >= 0 ? ffr_cache_fits(c, w[2].bytes) : -1;
    if (rc >= 0 && one == 1)
        rc = ffr_cache_shard(c, from[2], &w[2], path, sizeof path, err, sizeof err);
    char name[2][256], p[2][9000];
    for (int k = 0; k < 2; k++) {
        ffr_cache_entry_name(&w[k], name[k], sizeof name[k]);
        snprintf(p[k], sizeof p[k], "%s/%s", dir, name[k]);
    }
    ffr_cache_stats(c, &st);
    ok(one == 1 && rc == 1 && st.evicted == 1 && access(p[0], F_OK) != 0 && access(p[1], F_OK) == 0,
       "only shard 1 pinned: shard 2 fits and its fetch evicts shard 0, the older, not 1 (%d %d "
       "%s)",
       one, rc, rc < 0 ? err : "");
    ok(ffr_cache_pin(NULL, &w[0]) == -EINVAL && ffr_cache_fits(NULL, 1) == -EINVAL,
       "no cache: -EINVAL");
    ffr_cache_close(c);
    ffr_reader_close(r);
}

int main(int argc, char **argv)
{
    const char *base = argc > 1 ? argv[1] : "/tmp";
    snprintf(root, sizeof root, "%s/ffr_cache_test.%ld", base, (long)getpid());
    if (mkdir(root, 0755) < 0) {
        printf("# cannot create %s\n", root);
        return 99;
    }
    char src[4200], cdir[4200], path[4200], err[1024], cmd[8500];
    snprintf(src, sizeof src, "%s/src/data.ffr", root);
    snprintf(cmd, sizeof cmd, "%s/src", root);
    mkdir(cmd, 0755);
    snprintf(cmd, sizeof cmd, "%s/discard", root);
    test_discard(cmd);
    test_lru_order();
    ok(make_dataset(src, 60, 48 * 1024, 1) == 0, "a sharded source dataset");
    snprintf(cmd, sizeof cmd, "%s/skel", root);
    test_skeletons(src, cmd);
    snprintf(cmd, sizeof cmd, "%s/pins", root);
    test_pins(src, cmd);
    struct ffr_reader *sr = NULL;
    ffr_reader_open(&sr, src, NULL, NULL, 0);
    const uint32_t ns = ffr_reader_shard_count(sr);
    ok(ns >= 4, "it has %u shards", ns);

    /* Cache it, read it back, reuse it. */
    snprintf(cdir, sizeof cdir, "%s/cache1/nested", root);
    struct ffr_cache *c;
    struct ffr_cache_stats st;
    ok(open_cache(&c, cdir, 0, 0, NULL) == 0, "cache directory created");
    int rc = ffr_cache_dataset(c, src, path, sizeof path, err, sizeof err);
    is_int(rc, (int)ns, "first use fetches every shard (%s)", rc < 0 ? err : path);
    ok(same_records(src, path), "the cached manifest opens and every record equals the source");
    ffr_cache_close(c);
    open_cache(&c, cdir, 0, 0, NULL);
    rc = ffr_cache_dataset(c, src, path, sizeof path, err, sizeof err);
    ffr_cache_stats(c, &st);
    ok(rc == 0 && st.hits == ns && st.fetches == 0, "a later run reuses all %u shards", ns);

    /* A damaged cached shard: its index (cheap check) is caught and fetched again. */
    struct ffr_reader *cr = NULL;
    ffr_reader_open(&cr, path, NULL, NULL, 0);
    struct ffr_shard_info si;
    ffr_reader_shard(cr, 1, &si);
    char victim[4200];
    snprintf(victim, sizeof victim, "%s", si.path);
    /* The index starts at a multiple of the alignment (4096) less than 512 bytes of padding
     * before the trailer: a byte of its first row. */
    const uint64_t index_at =
        (si.file_size - FFR_TRAILER_SIZE - si.index_bytes) / 4096 * 4096 + 64 + 8;
    ffr_reader_close(cr);
    ok(flip_byte(victim, (off_t)index_at) == 0, "damage the cached shard's index");
    rc = ffr_cache_dataset(c, src, path, sizeof path, err, sizeof err);
    ffr_cache_stats(c, &st);
    ok(rc == 1 && st.damaged == 1, "the damaged shard is detected and fetched again (rc %d)", rc);
    ok(same_records(src, path), "the records are right again");

    /* A damaged record: the cheap check does not read records (the reader's hash check on
     * every read does), full_verify catches it at reuse. */
    ok(flip_byte(victim, 4096 + 100) == 0, "damage a record of the cached shard");
    rc = ffr_cache_dataset(c, src, path, sizeof path, err, sizeof err);
    ok(rc == 0, "the cheap reuse check (size, trailer, index hash) passes over record bytes");
    ffr_reader_open(&cr, path, NULL, NULL, 0);
    ffr_reader_shard(cr, 1, &si);
    uint8_t rec[8192];
    is_int(ffr_reader_read(cr, NULL, si.first, rec, sizeof rec), -FFR_ECHECKSUM,
           "but reading the damaged record fails its checksum");
    ffr_reader_close(cr);
    ffr_cache_close(c);
    open_cache(&c, cdir, 0, 1, NULL);
    rc = ffr_cache_dataset(c, src, path, sizeof path, err, sizeof err);
    ffr_cache_stats(c, &st);
    ok(rc == 1 && st.damaged == 1, "full_verify finds the damaged record and fetches the shard");
    ok(same_records(src, path), "and the records are right");
    ffr_cache_close(c);

    /* A copy killed half way leaves only a temporary, which the next fetch removes. */
    snprintf(cdir, sizeof cdir, "%s/cache2", root);
    struct ffr_cache_shard want;
    char ssrc[4200];
    shard_want(sr, 0, &want, ssrc, sizeof ssrc);
    struct src_ctx kill_ctx = { .mode = 1 };
    const struct ffr_cache_source killer = { src_size, src_fetch, &kill_ctx, NULL };
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        struct ffr_cache *cc;
        if (open_cache(&cc, cdir, 0, 0, &killer) < 0) _exit(3);
        ffr_cache_shard(cc, ssrc, &want, NULL, 0, NULL, 0);
        _exit(4); /* not reached: the fetch kills the process */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int finals, temps;
    count_dir(cdir, &finals, &temps, NULL);
    ok(WIFSIGNALED(status) && finals == 0 && temps == 1,
       "a copy killed half way leaves no entry, only a temporary (%d, %d)", finals, temps);
    open_cache(&c, cdir, 0, 0, NULL);
    rc = ffr_cache_shard(c, ssrc, &want, path, sizeof path, err, sizeof err);
    count_dir(cdir, &finals, &temps, NULL);
    ok(rc == 1 && finals == 1 && temps == 0 && file_size(path) == (off_t)want.bytes,
       "the next fetch succeeds and removes the stale temporary");

    /* A source that sends half the bytes and claims success: refused, nothing visible. */
    ffr_cache_close(c);
    snprintf(cdir, sizeof cdir, "%s/cache3", root);
    struct src_ctx short_ctx = { .mode = 2 };
    const struct ffr_cache_source shorty = { src_size, src_fetch, &short_ctx, NULL };
    open_cache(&c, cdir, 0, 0, &shorty);
    rc = ffr_cache_shard(c, ssrc, &want, path, sizeof path, err, sizeof err);
    count_dir(cdir, &finals, &temps, NULL);
    ok(rc == -FFR_ETRUNC && finals == 0 && temps == 0,
       "a short body is refused and leaves nothing: %s", err);
    ffr_cache_close(c);

    /* The source differs from the manifest, or is damaged. */
    open_cache(&c, cdir, 0, 0, NULL);
    struct ffr_cache_shard bad = want;
    bad.index_hash ^= 1;
    rc = ffr_cache_shard(c, ssrc, &bad, path, sizeof path, err, sizeof err);
    count_dir(cdir, &finals, &temps, NULL);
    ok(rc == -FFR_ESHARD && finals == 0 && temps == 0, "a source unlike its manifest entry: %s",
       err);
    char dsrc[4200];
    snprintf(dsrc, sizeof dsrc, "%s/src/damaged.ffr", root);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", ssrc, dsrc);
    ok(system(cmd) == 0 && flip_byte(dsrc, 4096 + 200) == 0, "a copy of shard 0 with a bad byte");
    rc = ffr_cache_shard(c, dsrc, &want, path, sizeof path, err, sizeof err);
    count_dir(cdir, &finals, &temps, NULL);
    ok(rc == -FFR_ECHECKSUM && finals == 0 && temps == 0,
       "a damaged source is caught before it enters the cache: %s", err);
    ffr_cache_close(c);

    /* LRU eviction under the limit. */
    snprintf(cdir, sizeof cdir, "%s/cache4", root);
    struct ffr_cache_shard w[3];
    char wsrc[3][4200], wpath[3][4200];
    uint64_t biggest = 0;
    for (uint32_t k = 0; k < 3; k++) {
        shard_want(sr, k, &w[k], wsrc[k], sizeof wsrc[k]);
        if (w[k].bytes > biggest) biggest = w[k].bytes;
    }
    const uint64_t limit = biggest * 5 / 2;
    open_cache(&c, cdir, limit, 0, NULL);
    int good = ffr_cache_shard(c, wsrc[0], &w[0], wpath[0], sizeof wpath[0], err, sizeof err) == 1;
    good &= ffr_cache_shard(c, wsrc[1], &w[1], wpath[1], sizeof wpath[1], err, sizeof err) == 1;
    good &= ffr_cache_shard(c, wsrc[0], &w[0], wpath[0], sizeof wpath[0], err, sizeof err) == 0;
    good &= ffr_cache_shard(c, wsrc[2], &w[2], wpath[2], sizeof wpath[2], err, sizeof err) == 1;
    uint64_t used;
    count_dir(cdir, &finals, &temps, &used);
    ffr_cache_stats(c, &st);
    ok(good && st.evicted == 1 && file_size(wpath[0]) > 0 && file_size(wpath[1]) < 0 &&
           file_size(wpath[2]) > 0 && used <= limit,
       "over the limit the least recently used shard (1, not 0) is evicted: %" PRIu64
       " bytes of %" PRIu64,
       used, limit);
    ffr_cache_close(c);
    open_cache(&c, cdir, biggest / 2, 0, NULL);
    rc = ffr_cache_shard(c, wsrc[1], &w[1], path, sizeof path, err, sizeof err);
    ok(rc == -ENOSPC, "a shard larger than the limit: %s", err);
    ffr_cache_close(c);
    open_cache(&c, cdir, biggest * 2, 0, NULL);
    rc = ffr_cache_dataset(c, src, path, sizeof path, err, sizeof err);
    ok(rc == -ENOSPC, "a dataset that cannot fit: %s", err);
    ffr_cache_close(c);

    /* Four processes cache the same dataset at once: each shard is fetched exactly once. */
    snprintf(cdir, sizeof cdir, "%s/cache5", root);
    char log[4200];
    snprintf(log, sizeof log, "%s/fetch.log", root);
    struct src_ctx slow = { .mode = 0, .log = log, .delay_ms = 20 };
    const struct ffr_cache_source slow_src = { src_size, src_fetch, &slow, NULL };
    pid_t kids[4];
    fflush(stdout);
    for (int k = 0; k < 4; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            struct ffr_cache *cc;
            char p[4200], e[1024];
            if (open_cache(&cc, cdir, 0, 0, &slow_src) < 0) _exit(3);
            const int r = ffr_cache_dataset(cc, src, p, sizeof p, e, sizeof e);
            ffr_cache_close(cc);
            _exit(r >= 0 && same_records(src, p) ? 0 : 5);
        }
    }
    int all_ok = 1;
    for (int k = 0; k < 4; k++) {
        waitpid(kids[k], &status, 0);
        all_ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    int lines = 0, shard_lines = 0;
    FILE *lf = fopen(log, "r");
    for (char line[4300]; lf && fgets(line, sizeof line, lf);) {
        lines++;
        shard_lines += strstr(line, "data-0") != NULL;
    }
    if (lf) fclose(lf);
    /* ns shard fetches, plus one read of the manifest per process. */
    ok(all_ok && shard_lines == (int)ns && lines == (int)ns + 4,
       "4 processes at once: all read the right records, %d shard fetches for %u shards",
       shard_lines, ns);
    count_dir(cdir, &finals, &temps, NULL);
    ok(temps == 0 && finals == (int)ns + 1, "no temporaries left; %u shards and one manifest", ns);

    /* A single record file, and a stale temporary of a dead process removed at open. */
    snprintf(cdir, sizeof cdir, "%s/cache6", root);
    char one[4200];
    snprintf(one, sizeof one, "%s/src/one.ffr", root);
    make_dataset(one, 5, 0, 9);
    open_cache(&c, cdir, 0, 0, NULL);
    rc = ffr_cache_dataset(c, one, path, sizeof path, err, sizeof err);
    const int rc2 = ffr_cache_dataset(c, one, path, sizeof path, err, sizeof err);
    ok(rc == 1 && rc2 == 0 && same_records(one, path), "a single file is cached, then reused");
    /* The shard list a planner reads: the manifest's shards beside it, none for a single file */
    struct ffr_cache_shard *sh = (void *)1;
    uint32_t nsh = 99;
    rc = ffr_cache_manifest_shards(c, one, &sh, &nsh, err, sizeof err);
    ok(rc == 0 && nsh == 0 && sh == NULL, "manifest shards of a single file: none");
    rc = ffr_cache_manifest_shards(c, src, &sh, &nsh, err, sizeof err);
    bool same = rc == 0 && nsh == ns;
    for (uint32_t k = 0; same && k < nsh; k++) {
        struct ffr_shard_info sk;
        ffr_reader_shard(sr, k, &sk);
        char *at = ffr_manifest_shard_source(src, sh[k].file);
        same = at && sh[k].bytes == sk.file_size && sh[k].records == sk.count &&
               sh[k].index_hash == sk.index_hash && file_size(at) == (long long)sk.file_size;
        free(at);
    }
    ok(same, "manifest shards: %u, with the reader's sizes, counts and index hashes, beside it",
       nsh);
    ffr_manifest_shards_free(sh, nsh);
    char *plain = ffr_manifest_shard_source("data.ffr", "data-00001.ffr");
    ok(plain && !strcmp(plain, "data-00001.ffr"), "a manifest without a directory: the plain name");
    free(plain);
    ffr_cache_close(c);
    snprintf(cmd, sizeof cmd, "%s/.tmp-x-999999999-0", cdir);
    const int tf = open(cmd, O_WRONLY | O_CREAT, 0644);
    if (tf >= 0) close(tf);
    open_cache(&c, cdir, 0, 0, NULL);
    ok(file_size(cmd) < 0, "a temporary of a process that is gone is removed at open");
    ffr_cache_close(c);
    is_int(ffr_cache_open(&c, "", NULL, NULL, 0), -EINVAL, "empty directory name");
    ffr_cache_close(NULL);

    ffr_reader_close(sr);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) tap_diag("could not remove %s", root);
    return tap_done();
}
