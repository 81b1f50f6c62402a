/*
 * bench_ffio: random 1 MiB reads from one file with each engine, keeping queue_depth extents in
 * flight (a completed extent is immediately replaced), and a single-threaded pread loop as the
 * baseline. Prints MB/s (MB = 10^6 bytes), extents/s and CPU use. The seed of `ffr bench`.
 *
 *   bench_ffio [--dir D | --file F] [--size MiB] [--bs KiB] [--qd N] [--seconds S]
 *              [--engine uring|pread|mmap|psync|all] [--direct|--buffered|--both] [--cold]
 *
 * --dir: create a scratch file of --size MiB there (deleted at exit). O_DIRECT runs bypass the
 * page cache, so they measure the device even on a file that is cached; --cold also drops the
 * file's cached pages (fdatasync + POSIX_FADV_DONTNEED) before each buffered run. For a file larger
 * than the page cache, point --file at a few-GiB file and use O_DIRECT.
 */
#include "ffio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct args {
    const char *dir, *file;
    uint64_t size_mib, bs;
    unsigned qd;
    double seconds;
    const char *engine;
    int direct_mode; /* 0 both, 1 direct, 2 buffered */
    int cold;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void drop_cache(const char *path)
{
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static void report(const char *name, const char *mode, unsigned qd, uint64_t bytes, uint64_t n,
                   double secs, double cpu)
{
    printf("%-6s %-9s qd=%-3u %9.1f MB/s %9.0f extents/s  cpu %5.1f%%\n", name, mode, qd,
           (double)bytes / secs / 1e6, (double)n / secs, 100.0 * cpu / secs);
    fflush(stdout);
}

static int run_psync(const struct args *a, const char *path, uint64_t fsize, bool direct)
{
    const int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) return -errno;
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, a->bs)) {
        close(fd);
        return -ENOMEM;
    }
    uint64_t rng = 12345, bytes = 0, n = 0;
    const uint64_t blocks = (fsize - a->bs) / 4096 + 1;
    const double t0 = now_s(), c0 = cpu_s();
    double t = t0;
    while (t - t0 < a->seconds) {
        const uint64_t off = rnd(&rng) % blocks * 4096;
        const ssize_t r = pread(fd, buf, a->bs, (off_t)off);
        if (r != (ssize_t)a->bs) break;
        bytes += (uint64_t)r;
        if (++n % 16 == 0) t = now_s();
    }
    t = now_s();
    report("psync", direct ? "O_DIRECT" : "buffered", 1, bytes, n, t - t0, cpu_s() - c0);
    free(buf);
    close(fd);
    return 0;
}

static int run_engine(const struct args *a, const char *path, uint64_t fsize,
                      enum ffio_engine_kind kind, bool direct)
{
    struct ffio_opts o;
    ffio_opts_default(&o);
    o.engine = kind;
    o.direct = direct ? FFIO_DIRECT_AUTO : FFIO_DIRECT_OFF;
    o.queue_depth = a->qd;
    struct ffio_engine *e = NULL;
    int rc = ffio_engine_create(&o, &e);
    if (rc < 0) {
        printf("%-6s %-9s skipped: %s\n", ffio_engine_kind_name(kind), "", ffio_strerror(rc));
        return 0;
    }
    const int fh = ffio_engine_add_file(e, path);
    struct ffio_pinned pool;
    if (fh < 0 || ffio_pinned_alloc((size_t)a->qd * a->bs, 0, &pool) < 0) {
        ffio_engine_destroy(e);
        return fh < 0 ? fh : -ENOMEM;
    }
    ffio_engine_register_buffer(e, pool.ptr, pool.size);
    struct ffio_extent *const ext = calloc(a->qd, sizeof *ext);
    struct ffio_completion *const comp = calloc(a->qd, sizeof *comp);
    uint64_t rng = 12345, bytes = 0, n = 0;
    const uint64_t blocks = (fsize - a->bs) / 4096 + 1;
    for (unsigned i = 0; i < a->qd; i++)
        ext[i] = (struct ffio_extent){ .dst = (unsigned char *)pool.ptr + (size_t)i * a->bs,
                                       .offset = rnd(&rng) % blocks * 4096,
                                       .length = a->bs,
                                       .tag = i,
                                       .file = (uint32_t)fh };
    const double t0 = now_s(), c0 = cpu_s();
    rc = ffio_engine_submit(e, ext, a->qd);
    struct ffio_extent *const again = calloc(a->qd, sizeof *again);
    while (rc >= 0) {
        const int got = ffio_engine_wait(e, comp, a->qd, 1);
        if (got <= 0) {
            rc = got < 0 ? got : -EIO;
            break;
        }
        for (int i = 0; i < got; i++) {
            if (comp[i].res < 0) {
                char what[300];
                ffio_engine_describe(e, &comp[i], what, sizeof what);
                fprintf(stderr, "bench_ffio: %s\n", what);
                rc = (int)comp[i].res;
                break;
            }
            bytes += comp[i].done;
            n++;
            again[i] = ext[comp[i].tag];
            again[i].offset = rnd(&rng) % blocks * 4096;
        }
        if (rc < 0 || now_s() - t0 >= a->seconds) break;
        rc = ffio_engine_submit(e, again, (size_t)got);
    }
    const double secs = now_s() - t0, cpu = cpu_s() - c0;
    struct ffio_engine_info info;
    ffio_engine_info(e, &info);
    struct ffio_file_info fi;
    ffio_engine_file_info(e, (uint32_t)fh, &fi);
    ffio_engine_destroy(e);
    if (rc < 0) {
        printf("%-6s failed: %s\n", ffio_engine_kind_name(kind), ffio_strerror(rc));
    } else {
        report(ffio_engine_kind_name(info.kind), fi.direct ? "O_DIRECT" : "buffered", a->qd, bytes,
               n, secs, cpu);
    }
    free(again);
    free(comp);
    free(ext);
    ffio_pinned_free(&pool);
    return rc < 0 ? rc : 0;
}

static int make_file(const char *dir, uint64_t size, char *path)
{
    snprintf(path, 4096, "%s/bench_ffio-XXXXXX", dir);
    const int fd = mkstemp(path);
    if (fd < 0) return -errno;
    enum { CHUNK = 1 << 20 };
    unsigned char *const buf = malloc(CHUNK);
    uint64_t s = 88172645463325252ull;
    for (uint64_t done = 0; buf && done < size; done += CHUNK) {
        for (size_t i = 0; i < CHUNK; i += 8) {
            const uint64_t r = rnd(&s);
            memcpy(buf + i, &r, 8);
        }
        if (write(fd, buf, CHUNK) != CHUNK) {
            free(buf);
            close(fd);
            return -EIO;
        }
    }
    free(buf);
    fdatasync(fd);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    struct args a = {
        .dir = ".", .size_mib = 256, .bs = 1024 * 1024, .qd = 32, .seconds = 2.0, .engine = "all"
    };
    for (int i = 1; i < argc; i++) {
        const char *const v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--dir"))
            a.dir = v, i++;
        else if (!strcmp(argv[i], "--file"))
            a.file = v, i++;
        else if (!strcmp(argv[i], "--size"))
            a.size_mib = strtoull(v, NULL, 10), i++;
        else if (!strcmp(argv[i], "--bs"))
            a.bs = strtoull(v, NULL, 10) * 1024, i++;
        else if (!strcmp(argv[i], "--qd"))
            a.qd = (unsigned)strtoul(v, NULL, 10), i++;
        else if (!strcmp(argv[i], "--seconds"))
            a.seconds = strtod(v, NULL), i++;
        else if (!strcmp(argv[i], "--engine"))
            a.engine = v, i++;
        else if (!strcmp(argv[i], "--direct"))
            a.direct_mode = 1;
        else if (!strcmp(argv[i], "--buffered"))
            a.direct_mode = 2;
        else if (!strcmp(argv[i], "--both"))
            a.direct_mode = 0;
        else if (!strcmp(argv[i], "--cold"))
            a.cold = 1;
        else {
            fprintf(stderr,
                    "bench_ffio: unknown argument %s\nhint: see the comment at the top "
                    "of tests/io/bench_ffio.c\n",
                    argv[i]);
            return 2;
        }
    }
    if (!a.bs || a.bs % 4096 || !a.qd || a.qd > 4096 || a.seconds <= 0) {
        fprintf(stderr,
                "bench_ffio: --bs must be a multiple of 4 KiB, --qd 1..4096, --seconds > 0\n");
        return 2;
    }
    char path[4096];
    bool made = false;
    if (a.file) {
        snprintf(path, sizeof path, "%s", a.file);
    } else {
        const int rc = make_file(a.dir, a.size_mib << 20, path);
        if (rc < 0) {
            fprintf(stderr, "bench_ffio: cannot create a %llu MiB file in %s: %s\n",
                    (unsigned long long)a.size_mib, a.dir, ffio_strerror(rc));
            return 1;
        }
        made = true;
    }
    struct stat st;
    if (stat(path, &st) != 0 || (uint64_t)st.st_size < a.bs) {
        fprintf(stderr, "bench_ffio: %s: missing or smaller than one block\n", path);
        return 1;
    }
    const uint64_t fsize = (uint64_t)st.st_size;
    printf("# %s: %.1f MiB, random %llu KiB reads, %.1f s per run, io_uring %s\n", path,
           (double)fsize / 1048576.0, (unsigned long long)(a.bs / 1024), a.seconds,
           ffio_uring_probe() == 0 ? "available" : "unavailable");
    const char *const names[] = { "uring", "pread", "mmap", "psync" };
    int rc = 0;
    for (int d = 0; d < 2 && !rc; d++) {
        const bool direct = d == 0;
        if ((a.direct_mode == 1 && !direct) || (a.direct_mode == 2 && direct)) continue;
        for (int k = 0; k < 4 && !rc; k++) {
            if (strcmp(a.engine, "all") && strcmp(a.engine, names[k])) continue;
            if (direct && k == 2) continue; /* mmap has no O_DIRECT */
            if (!direct && a.cold) drop_cache(path);
            if (k == 3) {
                rc = run_psync(&a, path, fsize, direct);
            } else {
                enum ffio_engine_kind kind;
                ffio_engine_kind_parse(names[k], &kind);
                rc = run_engine(&a, path, fsize, kind, direct);
            }
        }
    }
    if (made) unlink(path);
    return rc < 0 ? 1 : 0;
}
