/* The shared helpers (util.h). */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "ffr.h"

static void vseterr(char *err, size_t cap, const char *fmt, va_list ap)
{
    if (err && cap) vsnprintf(err, cap, fmt, ap);
}

void trn_seterr(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vseterr(err, cap, fmt, ap);
    va_end(ap);
}

int trn_fail(char *err, size_t cap, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vseterr(err, cap, fmt, ap);
    va_end(ap);
    return rc;
}

int trn_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2) return -ENOMEM;
        n *= 2;
    }
    if (elem && n > SIZE_MAX / elem) return -ENOMEM;
    void *q = realloc(*p, n * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

int trn_write_file(const char *path, const void *data, size_t len, bool durable, char *err,
                   size_t cap)
{
    (void)ffr_remove_stale_tmp(path, 0); /* a killed run's leftovers (ffr.h) */
    char *const tmp = ffr_tmp_path(path);
    if (!tmp) {
        trn_seterr(err, cap, "%s: out of memory", path);
        return -ENOMEM;
    }
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        const int e = errno;
        trn_seterr(err, cap, "%s: cannot create: %s", path, strerror(e));
        free(tmp);
        return -e;
    }
    const char *p = data;
    size_t left = len;
    int rc = 0;
    while (left > 0) {
        const ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            rc = w < 0 ? -errno : -EIO;
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (rc == 0 && durable && fsync(fd) < 0) rc = -errno;
    if (close(fd) < 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0) rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        trn_seterr(err, cap, "%s: write failed: %s", path, strerror(-rc));
    }
    free(tmp);
    return rc;
}

int trn_read_file(const char *path, size_t max, char **buf, size_t *len, char *err, size_t cap)
{
    const int fd = ffr_open_regular(path, 0);
    if (fd < 0) return trn_fail(err, cap, fd, "%s: %s", path, trn_strerror(fd));
    char *b = NULL;
    size_t n = 0, c = 0;
    int rc = 0;
    for (;;) {
        if (n + 1 >= c && (rc = trn_grow((void **)&b, &c, n + 65536, 1)) < 0) break;
        const ssize_t got = read(fd, b + n, c - n - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            rc = -errno;
            break;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > max) {
            rc = -EFBIG;
            break;
        }
    }
    close(fd);
    if (rc < 0) {
        free(b);
        if (rc == -EFBIG) return trn_fail(err, cap, rc, "%s: larger than %zu bytes", path, max);
        return trn_fail(err, cap, rc, "%s: %s", path, trn_strerror(rc));
    }
    b[n] = '\0'; /* the first pass of the loop allocated b */
    *buf = b;
    *len = n;
    return 0;
}

bool trn_yaml_scalar_is(const yaml_node_t *n, const char *s)
{
    /* by length: a scalar with a NUL inside is not equal to its prefix */
    return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length == strlen(s) &&
           memcmp(n->data.scalar.value, s, n->data.scalar.length) == 0;
}

void trn_trim(char *s)
{
    char *a = s;
    while (*a == ' ' || *a == '\t')
        a++;
    size_t n = strlen(a);
    while (n && (a[n - 1] == ' ' || a[n - 1] == '\t' || a[n - 1] == '\r' || a[n - 1] == '\n'))
        n--;
    memmove(s, a, n);
    s[n] = '\0';
}

double trn_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
