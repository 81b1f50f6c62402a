/*
 * What the trainer's program-level tests share: a scratch directory, running a command with its
 * output captured there, and reading a file whole. Header-only (static), like tests/tap.h; a test
 * includes it once, makes `dir` with mkdtemp in main, then calls run() and slurp().
 */
#ifndef RUN_TESTUTIL_H
#define RUN_TESTUTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The test's scratch directory ("/tmp/test_xxx_XXXXXX" before mkdtemp). */
static char dir[256];

/* Runs the printf-formatted command with stdout and stderr in dir/stdout.txt and dir/stderr.txt.
 * Returns its exit status, or 128 when it did not exit normally. */
static inline int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int run(const char *fmt, ...)
{
    char cmd[4096], full[4700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s >%s/stdout.txt 2>%s/stderr.txt", cmd, dir, dir);
    const int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The whole file, NUL-terminated (malloc'd; free it), or NULL when it cannot be opened. len: out,
 * the byte count (may be NULL). */
static inline char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    size_t n = 0, cap = 0, got;
    char buf[65536];
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (n + got + 1 > cap) {
            cap = 2 * (n + got + 1);
            char *g = realloc(s, cap);
            if (!g) break;
            s = g;
        }
        memcpy(s + n, buf, got);
        n += got;
    }
    fclose(f);
    if (!s) s = calloc(1, 1);
    if (s) s[n] = '\0';
    if (len) *len = n;
    return s;
}

#endif
