/* Helpers shared by the ffr tests: a seeded RNG, temp directories, whole-file I/O. */
#ifndef FFR_TESTUTIL_H
#define FFR_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* splitmix64: tiny, seedable, good enough to draw test sizes and bytes. */
static inline uint64_t tu_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t tu_below(uint64_t *s, uint64_t n)
{
    return n ? tu_rand(s) % n : 0;
}

/* Fills p with bytes that compress by a random amount: runs of repeats mixed with noise. */
static inline void tu_fill(uint64_t *s, uint8_t *p, size_t n, int compressible)
{
    size_t i = 0;
    while (i < n) {
        const uint64_t r = tu_rand(s);
        size_t run = compressible ? 1 + (size_t)(r % 64) : 1;
        if (run > n - i) run = n - i;
        memset(p + i, (int)(r >> 8), run);
        i += run;
    }
}

/* Makes a fresh directory under $TMPDIR (or /tmp); returns a static path. */
static inline const char *tu_tmpdir(void)
{
    static char path[512];
    const char *base = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/ffrtest.XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(path);
}

static inline void tu_rmtree(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "# could not remove %s\n", dir);
}

/* Reads a whole file into a malloc'd buffer; returns NULL on error. */
static inline uint8_t *tu_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) *len = (size_t)n;
    return b;
}

/* An anonymous in-memory file holding buf, for opening corrupted copies quickly. */
static inline int tu_memfd(const uint8_t *buf, size_t len)
{
    const int fd = memfd_create("ffrtest", MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (len && write(fd, buf, len) != (ssize_t)len) {
        close(fd);
        return -1;
    }
    return fd;
}

#endif
