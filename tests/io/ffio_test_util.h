/*
 * Helpers shared by the ffio tests: a scratch directory on the real disk (the build directory,
 * passed as argv[1]; /tmp may be tmpfs, where O_DIRECT behaves differently), files of
 * pseudo-random bytes, a pread reference, a random extent generator and a log collector.
 */
#ifndef FFIO_TEST_UTIL_H
#define FFIO_TEST_UTIL_H

#include "ffio.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TU_ALIGN 4096u

/* xorshift64*: deterministic test randomness. */
static inline uint64_t tu_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Uniform in [0, n) (n > 0). */
static inline uint64_t tu_below(uint64_t *s, uint64_t n)
{
    return tu_rand(s) % n;
}

/* The scratch directory: argv[1], else $FFIO_TEST_DIR, else ".". */
static inline const char *tu_dir(int argc, char **argv)
{
    if (argc > 1) return argv[1];
    const char *const env = getenv("FFIO_TEST_DIR");
    return env && *env ? env : ".";
}

/*
 * Create dir/<tag>-XXXXXX filled with `size` pseudo-random bytes from `seed`; path: out (PATH_MAX).
 * Exits 99 (setup error) on failure.
 */
static inline void tu_make_file(const char *dir, const char *tag, uint64_t size, uint64_t seed,
                                char *path)
{
    snprintf(path, 4096, "%s/ffio-%s-XXXXXX", dir, tag);
    const int fd = mkstemp(path);
    if (fd < 0) {
        printf("Bail out! mkstemp %s: %s\n", path, strerror(errno));
        exit(99);
    }
    unsigned char buf[65536];
    uint64_t s = seed | 1, left = size;
    while (left) {
        const size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        for (size_t i = 0; i < n; i += 8) {
            const uint64_t r = tu_rand(&s);
            memcpy(buf + i, &r, n - i < 8 ? n - i : 8);
        }
        if (write(fd, buf, n) != (ssize_t)n) {
            printf("Bail out! write %s: %s\n", path, strerror(errno));
            exit(99);
        }
        left -= n;
    }
    close(fd);
}

/* The whole file read with plain pread: the reference every engine is compared with. */
static inline unsigned char *tu_pread_all(const char *path, uint64_t size)
{
    unsigned char *const ref = malloc(size ? size : 1);
    const int fd = open(path, O_RDONLY);
    if (!ref || fd < 0) {
        printf("Bail out! reference read of %s\n", path);
        exit(99);
    }
    uint64_t done = 0;
    while (done < size) {
        const ssize_t r = pread(fd, ref + done, size - done, (off_t)done);
        if (r <= 0) {
            printf("Bail out! pread %s\n", path);
            exit(99);
        }
        done += (uint64_t)r;
    }
    close(fd);
    return ref;
}

/* Log callback that keeps a count and the last line. */
struct tu_log {
    int lines;      /* lines seen */
    int warn_lines; /* of which FFIO_LOG_WARN */
    char last[512]; /* last line */
};

static inline void tu_log_fn(void *ctx, enum ffio_log_level level, const char *msg)
{
    struct tu_log *const l = ctx;
    l->lines++;
    l->warn_lines += level == FFIO_LOG_WARN;
    snprintf(l->last, sizeof l->last, "%s", msg);
}

/* Whether io_uring works here; prints the loud skip line once when it does not. */
static inline int tu_uring_ok(void)
{
    static int state; /* 0 unknown, 1 ok, 2 missing */
    if (!state) {
        const int rc = ffio_uring_probe();
        state = rc == 0 ? 1 : 2;
        if (rc)
            printf("# SKIP io_uring configurations: io_uring unavailable (%s)\n",
                   ffio_strerror(rc));
    }
    return state == 1;
}

/* A random extent inside a file of `size` bytes, of one of several alignment shapes. */
struct tu_shape {
    uint64_t offset; /* file offset */
    uint64_t length; /* bytes */
    size_t mis;      /* destination misalignment in [0, TU_ALIGN) */
};

static inline struct tu_shape tu_random_extent(uint64_t *rng, uint64_t size, uint64_t max_len)
{
    struct tu_shape x;
    const unsigned kind = (unsigned)tu_below(rng, 10);
    const unsigned lk = (unsigned)tu_below(rng, 20);
    uint64_t len = lk < 14   ? 1 + tu_below(rng, 65536)
                   : lk < 19 ? 1 + tu_below(rng, 262144)
                             : 1 + tu_below(rng, max_len);
    if (len > max_len) len = max_len;
    if (len > size) len = size;
    uint64_t off = tu_below(rng, size - len + 1);
    x.mis = 0;
    if (kind < 4) { /* all aligned: the zero-copy path */
        len = (len + TU_ALIGN - 1) / TU_ALIGN * TU_ALIGN;
        if (len > size / TU_ALIGN * TU_ALIGN) len = size / TU_ALIGN * TU_ALIGN;
        off = tu_below(rng, (size - len) / TU_ALIGN + 1) * TU_ALIGN;
    } else if (kind < 6) { /* aligned start and destination, ragged length */
        off = tu_below(rng, (size - len) / TU_ALIGN + 1) * TU_ALIGN;
    } else if (kind < 8) { /* ragged start, destination aligned like the offset */
        x.mis = (size_t)(off % TU_ALIGN);
    } else if (kind < 9) { /* anything */
        x.mis = (size_t)tu_below(rng, TU_ALIGN);
    } else { /* ends exactly at end of file */
        off = size - len;
        x.mis = (size_t)tu_below(rng, 2) ? (size_t)(off % TU_ALIGN) : (size_t)tu_below(rng, 64);
    }
    x.offset = off;
    x.length = len;
    return x;
}

/*
 * Read n random extents (up to max_len bytes each) of file handle fh with ffio_engine_read, in
 * batches of 32, and compare every byte with ref. If `out` is not NULL, the bytes read are also
 * appended there (n * max_len bytes) so two engines' outputs can be compared. Returns 1 if all
 * matched, else 0 with a diagnostic.
 */
static inline int tu_check_random(struct ffio_engine *e, int fh, const unsigned char *ref,
                                  uint64_t size, int n, uint64_t seed, uint64_t max_len,
                                  unsigned char *out)
{
    enum { B = 32 };
    const size_t region = ((size_t)max_len + 2 * TU_ALIGN) / TU_ALIGN * TU_ALIGN;
    unsigned char *const pool = aligned_alloc(TU_ALIGN, B * region);
    struct ffio_extent ext[B];
    struct ffio_completion comp[B];
    uint64_t rng = seed;
    int good = pool != NULL;
    for (int base = 0; base < n && good; base += B) {
        const int k = n - base < B ? n - base : B;
        for (int i = 0; i < k; i++) {
            const struct tu_shape x = tu_random_extent(&rng, size, max_len);
            ext[i] = (struct ffio_extent){ .dst = pool + (size_t)i * region + x.mis,
                                           .offset = x.offset,
                                           .length = x.length,
                                           .tag = (uint64_t)(base + i),
                                           .file = (uint32_t)fh };
        }
        const int rc = ffio_engine_read(e, ext, (size_t)k, comp);
        if (rc != 0) {
            tap_diag("ffio_engine_read returned %d (%s)", rc, ffio_strerror(rc));
            good = 0;
        }
        for (int i = 0; i < k && good; i++) {
            char what[300];
            ffio_engine_describe(e, &comp[i], what, sizeof what);
            if (comp[i].tag != ext[i].tag || comp[i].res != (int64_t)ext[i].length ||
                memcmp(ext[i].dst, ref + ext[i].offset, ext[i].length)) {
                tap_diag("extent %d: %s%s", base + i, what,
                         comp[i].res >= 0 ? " but the bytes differ from pread" : "");
                good = 0;
            }
            if (out) memcpy(out + (size_t)(base + i) * max_len, ext[i].dst, ext[i].length);
        }
    }
    free(pool);
    return good;
}

#endif
