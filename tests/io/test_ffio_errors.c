/*
 * Reads are never silently short: extents past EOF, a file truncated under an open engine,
 * injected EIO / EINTR / EAGAIN / short reads / O_DIRECT refusals, bad arguments and a full
 * queue, for every engine (uring skipped loudly when the kernel has no io_uring) and both
 * buffered and O_DIRECT.
 */
#include "ffio_internal.h"
#include "ffio_test_util.h"

#include <sys/stat.h>

static const char *g_dir;

static struct ffio_engine *engine(enum ffio_engine_kind kind, enum ffio_direct direct, unsigned qd,
                                  struct tu_log *log)
{
    struct ffio_opts o;
    ffio_opts_default(&o);
    o.engine = kind;
    o.direct = direct;
    o.queue_depth = qd;
    if (log) {
        o.log = tu_log_fn;
        o.log_ctx = log;
    }
    struct ffio_engine *e = NULL;
    const int rc = ffio_engine_create(&o, &e);
    if (rc < 0) {
        printf("Bail out! ffio_engine_create(%s): %s\n", ffio_engine_kind_name(kind),
               ffio_strerror(rc));
        exit(99);
    }
    return e;
}

static void hooks_reset(void)
{
    atomic_store(&ffio_test_hooks_on, false);
    ffio_test_hooks.refuse_direct_open = false;
    ffio_test_hooks.refuse_direct_read = false;
    ffio_test_hooks.fail_mlock = false;
    ffio_test_hooks.eagain_every = 0;
    ffio_test_hooks.eintr_every = 0;
    ffio_test_hooks.short_read_max = 0;
    ffio_test_hooks.eio_offset_plus1 = 0;
    atomic_store(&ffio_test_hooks.counter, 0);
}

/* Extents that end past EOF complete with -ENODATA and the bytes that exist. */
static void test_eof(enum ffio_engine_kind kind, enum ffio_direct direct, const char *cfg)
{
    const uint64_t S = 3 * 4096 + 100;
    char path[4096];
    tu_make_file(g_dir, "eof", S, 7, path);
    unsigned char *const ref = tu_pread_all(path, S);
    struct ffio_engine *const e = engine(kind, direct, 8, NULL);
    const int fh = ffio_engine_add_file(e, path);
    unsigned char *const buf = aligned_alloc(4096, 8 * 16384);
    memset(buf, 0, 8 * 16384);
    const struct {
        uint64_t off, len;
        int64_t res;
        uint64_t done;
    } cases[] = {
        { S - 50, 100, -ENODATA, 50 },                     /* straddles EOF */
        { S + 10, 100, -ENODATA, 0 },                      /* starts past EOF */
        { 0, S, (int64_t)S, S },                           /* the whole file */
        { S, 0, 0, 0 },                                    /* empty, at EOF */
        { 12288, 4096, -ENODATA, 100 },                    /* aligned block holding EOF */
        { 8192, 4096, 4096, 4096 },                        /* aligned, inside */
        { 4000, S - 4000, (int64_t)(S - 4000), S - 4000 }, /* ends exactly at EOF */
        { S, 1, -ENODATA, 0 },                             /* one byte at EOF */
    };
    const size_t n = sizeof cases / sizeof cases[0];
    struct ffio_extent ext[8];
    struct ffio_completion comp[8];
    for (size_t i = 0; i < n; i++)
        ext[i] = (struct ffio_extent){ .dst = buf + i * 16384,
                                       .offset = cases[i].off,
                                       .length = cases[i].len,
                                       .tag = 100 + i,
                                       .file = (uint32_t)fh };
    is_int(ffio_engine_read(e, ext, n, comp), 4, "%s: 4 of 8 EOF cases fail", cfg);
    int good = 1;
    for (size_t i = 0; i < n; i++) {
        if (comp[i].res != cases[i].res || comp[i].done != cases[i].done ||
            comp[i].tag != 100 + i ||
            memcmp(ext[i].dst, ref + (cases[i].off < S ? cases[i].off : 0), comp[i].done)) {
            char what[300];
            ffio_engine_describe(e, &comp[i], what, sizeof what);
            tap_diag("case %zu: %s", i, what);
            good = 0;
        }
    }
    ok(good, "%s: results, byte counts and landed bytes at EOF", cfg);
    char what[8192], want[8192];
    ffio_engine_describe(e, &comp[0], what, sizeof what);
    snprintf(want, sizeof want, "file %s offset %llu: short read past end of file (got 50 of 100",
             path, (unsigned long long)(S - 50));
    ok(strstr(what, want) != NULL, "%s: error names file and offset: %s", cfg, what);
    free(buf);
    ffio_engine_destroy(e);
    free(ref);
    unlink(path);
}

/* A file truncated after it was added: reads of the lost part fail, they do not come back short. */
static void test_truncate(enum ffio_engine_kind kind, enum ffio_direct direct, const char *cfg)
{
    char path[4096];
    tu_make_file(g_dir, "trunc", 65536, 11, path);
    unsigned char *const ref = tu_pread_all(path, 65536);
    struct ffio_engine *const e = engine(kind, direct, 4, NULL);
    const int fh = ffio_engine_add_file(e, path);
    unsigned char *const buf = aligned_alloc(4096, 3 * 16384);
    struct ffio_extent ext[3] = {
        { .dst = buf, .offset = 32768, .length = 4096, .file = (uint32_t)fh },
        { .dst = buf + 16384, .offset = 12288, .length = 8192, .file = (uint32_t)fh },
        { .dst = buf + 32768, .offset = 0, .length = 16384, .file = (uint32_t)fh },
    };
    struct ffio_completion comp[3];
    is_int(ffio_engine_read(e, ext, 3, comp), 0, "%s: reads before truncation succeed", cfg);
    if (truncate(path, 16384) != 0) {
        printf("Bail out! truncate: %s\n", strerror(errno));
        exit(99);
    }
    memset(buf, 0, 3 * 16384);
    is_int(ffio_engine_read(e, ext, 3, comp), 2, "%s: after truncation 2 of 3 fail", cfg);
    ok(comp[0].res == -ENODATA && comp[0].done == 0, "%s: extent past new EOF: ENODATA, 0 bytes",
       cfg);
    ok(comp[1].res == -ENODATA && comp[1].done == 4096 && !memcmp(buf + 16384, ref + 12288, 4096),
       "%s: extent across new EOF: ENODATA after the 4096 bytes that exist", cfg);
    ok(comp[2].res == 16384 && !memcmp(buf + 32768, ref, 16384),
       "%s: extent before new EOF still reads", cfg);
    free(buf);
    ffio_engine_destroy(e);
    free(ref);
    unlink(path);
}

/* Fault injection: retries, continued short reads, EIO reported, O_DIRECT refusal handled. */
static void test_injected(enum ffio_engine_kind kind, enum ffio_direct direct, const char *cfg)
{
    const uint64_t S = 1024 * 1024 + 777;
    char path[4096];
    tu_make_file(g_dir, "inject", S, 13, path);
    unsigned char *const ref = tu_pread_all(path, S);
    struct ffio_engine_info info;

    struct ffio_engine *e = engine(kind, direct, 16, NULL);
    int fh = ffio_engine_add_file(e, path);
    ffio_test_hooks.eagain_every = 3;
    ffio_test_hooks.eintr_every = 5;
    atomic_store(&ffio_test_hooks_on, true);
    ok(tu_check_random(e, fh, ref, S, 200, 21, 200000, NULL),
       "%s: EAGAIN/EINTR injected: bytes equal pread", cfg);
    hooks_reset();
    ffio_engine_info(e, &info);
    ok(info.retries > 0, "%s: %llu retries counted", cfg, (unsigned long long)info.retries);
    ffio_engine_destroy(e);

    e = engine(kind, direct, 16, NULL);
    fh = ffio_engine_add_file(e, path);
    ffio_test_hooks.short_read_max = 1000;
    atomic_store(&ffio_test_hooks_on, true);
    ok(tu_check_random(e, fh, ref, S, 100, 22, 100000, NULL),
       "%s: short reads injected: continued, bytes equal pread", cfg);
    hooks_reset();
    ffio_engine_info(e, &info);
    ok(info.short_reads > 0, "%s: %llu short reads continued", cfg,
       (unsigned long long)info.short_reads);
    ffio_engine_destroy(e);

    e = engine(kind, direct, 16, NULL);
    fh = ffio_engine_add_file(e, path);
    ffio_test_hooks.eio_offset_plus1 = 300000 + 1;
    atomic_store(&ffio_test_hooks_on, true);
    unsigned char *const buf = aligned_alloc(4096, 2 * 131072);
    struct ffio_extent ext[2] = {
        { .dst = buf, .offset = 290000, .length = 20000, .tag = 1, .file = (uint32_t)fh },
        { .dst = buf + 131072, .offset = 400000, .length = 20000, .tag = 2, .file = (uint32_t)fh },
    };
    struct ffio_completion comp[2];
    is_int(ffio_engine_read(e, ext, 2, comp), 1, "%s: one extent hits the injected EIO", cfg);
    hooks_reset();
    char what[8192], want[8192];
    ffio_engine_describe(e, &comp[0], what, sizeof what);
    snprintf(want, sizeof want, "file %s offset 290000 length 20000: %s", path, strerror(EIO));
    ok(comp[0].res == -EIO && strstr(what, want), "%s: EIO reported with file and offset: %s", cfg,
       what);
    ok(comp[1].res == 20000 && !memcmp(buf + 131072, ref + 400000, 20000),
       "%s: the other extent is unaffected", cfg);
    free(buf);
    ffio_engine_destroy(e);

    if (direct != FFIO_DIRECT_OFF) {
        struct tu_log log = { 0 };
        e = engine(kind, direct, 16, &log);
        fh = ffio_engine_add_file(e, path);
        struct ffio_file_info fi;
        ffio_engine_file_info(e, (uint32_t)fh, &fi);
        const bool was_direct = fi.direct;
        ffio_test_hooks.refuse_direct_read = true;
        atomic_store(&ffio_test_hooks_on, true);
        ok(tu_check_random(e, fh, ref, S, 100, 23, 100000, NULL),
           "%s: O_DIRECT reads refused with EINVAL: bytes still equal pread", cfg);
        hooks_reset();
        ffio_engine_file_info(e, (uint32_t)fh, &fi);
        ok(!was_direct ||
               (!fi.direct && strstr(log.last, "O_DIRECT read refused") && log.warn_lines == 1),
           "%s: file moved to buffered reads with one log line (%s)", cfg, log.last);
        ffio_engine_destroy(e);
    }
    free(ref);
    unlink(path);
}

/* Argument errors are returned by submit and queue nothing; a full queue accepts nothing. */
static void test_arguments(enum ffio_engine_kind kind, const char *cfg)
{
    char path[4096];
    tu_make_file(g_dir, "args", 40000, 17, path);
    unsigned char *const ref = tu_pread_all(path, 40000);
    struct ffio_engine *const e = engine(kind, FFIO_DIRECT_AUTO, 4, NULL);
    const int fh = ffio_engine_add_file(e, path);
    is_int(fh, 0, "%s: first file handle is 0", cfg);
    unsigned char buf[10][1000];
    struct ffio_extent ext[10];
    for (int i = 0; i < 10; i++)
        ext[i] = (struct ffio_extent){
            .dst = buf[i], .offset = (uint64_t)i * 3000, .length = 1000, .tag = 50 + (uint64_t)i
        };
    struct ffio_extent bad = ext[0];
    bad.file = 7;
    is_int(ffio_engine_submit(e, &bad, 1), -EBADF, "%s: unknown file handle", cfg);
    bad = ext[0];
    bad.flags = 1;
    is_int(ffio_engine_submit(e, &bad, 1), -EINVAL, "%s: reserved flags", cfg);
    bad = ext[0];
    bad.dst = NULL;
    is_int(ffio_engine_submit(e, &bad, 1), -EINVAL, "%s: NULL destination", cfg);
    bad = ext[0];
    bad.offset = (uint64_t)INT64_MAX - 10;
    is_int(ffio_engine_submit(e, &bad, 1), -EINVAL, "%s: offset + length overflow", cfg);
    struct ffio_extent two[2] = { ext[0], bad };
    is_int(ffio_engine_submit(e, two, 2), -EINVAL, "%s: one bad extent rejects the call", cfg);
    struct ffio_completion comp[10];
    is_int(ffio_engine_wait(e, comp, 10, 0), 0, "%s: nothing was queued by rejected calls", cfg);

    is_int(ffio_engine_submit(e, ext, 10), 4, "%s: queue depth 4 accepts 4 of 10", cfg);
    is_int(ffio_engine_submit(e, ext + 4, 6), 0, "%s: full queue accepts none", cfg);
    /* mmap finishes inside submit, so nothing is in flight there. */
    is_int(ffio_engine_register_buffer(e, buf, sizeof buf), kind == FFIO_ENGINE_MMAP ? 0 : -EBUSY,
           "%s: register_buffer refuses while reads are in flight", cfg);
    is_int(ffio_engine_read(e, ext, 1, comp), -EBUSY, "%s: read refuses while outstanding", cfg);
    int got = ffio_engine_wait(e, comp, 2, 2);
    is_int(got, 2, "%s: wait(cap 2, min 2) returns 2", cfg);
    int total = got, next = 4, good = 1;
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < got; i++) {
            const uint64_t t = comp[i].tag - 50;
            good &= comp[i].res == 1000 && t < 10 && !(seen >> t & 1) &&
                    !memcmp(buf[t], ref + t * 3000, 1000);
            seen |= 1ull << t;
        }
        if (total == 10) break;
        if (next < 10) {
            const int k = ffio_engine_submit(e, ext + next, (size_t)(10 - next));
            next += k > 0 ? k : 0;
        }
        got = ffio_engine_wait(e, comp, 10, 1);
        if (got <= 0) break;
        total += got;
    }
    ok(good && total == 10 && seen == 0x3ff, "%s: all 10 tags complete once with their bytes", cfg);
    is_int(ffio_engine_wait(e, comp, 10, 1), 0, "%s: wait with nothing outstanding returns 0", cfg);
    const struct ffio_extent empty = { .dst = NULL, .offset = 123, .length = 0, .tag = 9 };
    ok(ffio_engine_read(e, &empty, 1, comp) == 0 && comp[0].res == 0 && comp[0].tag == 9,
       "%s: an empty extent with no buffer completes with 0", cfg);

    is_int(ffio_engine_add_file(e, "/nonexistent/ffio"), -ENOENT, "%s: missing file", cfg);
    is_int(ffio_engine_add_file(e, g_dir), -EISDIR, "%s: a directory is refused", cfg);
    is_int(ffio_engine_add_fd(e, -1, NULL), -EBADF, "%s: negative fd", cfg);
    const int fd = open(path, O_RDONLY);
    const int h2 = ffio_engine_add_fd(e, fd, NULL);
    struct ffio_file_info fi;
    ok(h2 == 1 && ffio_engine_file_info(e, 1, &fi) == 0 && fi.fd == fd && !fi.direct &&
           !strncmp(fi.name, "fd ", 3),
       "%s: borrowed buffered fd is read as it is", cfg);
    const struct ffio_extent viafd = { .dst = buf[0], .offset = 5, .length = 1000, .file = 1 };
    ok(ffio_engine_read(e, &viafd, 1, comp) == 0 && !memcmp(buf[0], ref + 5, 1000),
       "%s: read through a borrowed fd", cfg);
    is_int(ffio_engine_file_info(e, 2, &fi), -EBADF, "%s: file_info of unknown handle", cfg);
    ffio_engine_destroy(e);
    ok(fcntl(fd, F_GETFD) >= 0, "%s: borrowed fd still open after destroy", cfg);
    close(fd);
    free(ref);
    unlink(path);
}

static void test_max_files(void)
{
    char path[4096];
    tu_make_file(g_dir, "max", 100, 3, path);
    struct ffio_opts o;
    ffio_opts_default(&o);
    o.engine = FFIO_ENGINE_PREAD;
    o.max_files = 2;
    struct ffio_engine *e = NULL;
    ffio_engine_create(&o, &e);
    ok(ffio_engine_add_file(e, path) == 0 && ffio_engine_add_file(e, path) == 1 &&
           ffio_engine_add_file(e, path) == -ENOSPC,
       "max_files 2: the third file gets ENOSPC");
    ffio_engine_destroy(e);
    unlink(path);
}

int main(int argc, char **argv)
{
    g_dir = tu_dir(argc, argv);
    const enum ffio_engine_kind engines[] = { FFIO_ENGINE_URING, FFIO_ENGINE_PREAD,
                                              FFIO_ENGINE_MMAP };
    for (size_t ei = 0; ei < 3; ei++) {
        if (engines[ei] == FFIO_ENGINE_URING && !tu_uring_ok()) {
            ok(1, "uring error handling # SKIP io_uring unavailable");
            continue;
        }
        for (int d = 0; d < 2; d++) {
            const enum ffio_direct direct = d ? FFIO_DIRECT_AUTO : FFIO_DIRECT_OFF;
            char cfg[64];
            snprintf(cfg, sizeof cfg, "%s %s", ffio_engine_kind_name(engines[ei]),
                     d ? "O_DIRECT" : "buffered");
            test_eof(engines[ei], direct, cfg);
            test_truncate(engines[ei], direct, cfg);
            if (engines[ei] != FFIO_ENGINE_MMAP) test_injected(engines[ei], direct, cfg);
        }
        test_arguments(engines[ei], ffio_engine_kind_name(engines[ei]));
    }
    test_max_files();
    return tap_done();
}
