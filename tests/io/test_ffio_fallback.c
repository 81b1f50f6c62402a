/*
 * Forced io_uring failure (FFIO_FORCE_NO_URING=1, and opts.force_no_uring): engine "auto" falls
 * back to the pread pool with exactly one log line, engine "uring" fails, and the fallback reads
 * exactly the bytes that io_uring reads.
 */
#include "ffio_test_util.h"

#define S       (8u * 1024 * 1024 + 4321)
#define N       2000
#define MAX_LEN 65536u

static struct ffio_engine *make(enum ffio_engine_kind kind, bool force, struct tu_log *log, int *rc)
{
    struct ffio_opts o;
    ffio_opts_default(&o);
    o.engine = kind;
    o.force_no_uring = force;
    o.log = tu_log_fn;
    o.log_ctx = log;
    struct ffio_engine *e = NULL;
    *rc = ffio_engine_create(&o, &e);
    return e;
}

int main(int argc, char **argv)
{
    const char *const dir = tu_dir(argc, argv);
    char path[4096];
    tu_make_file(dir, "fallback", S, 99, path);
    unsigned char *const ref = tu_pread_all(path, S);
    unsigned char *const out_fb = calloc(N, MAX_LEN);
    unsigned char *const out_ur = calloc(N, MAX_LEN);
    int rc;

    setenv("FFIO_FORCE_NO_URING", "1", 1);
    is_int(ffio_uring_probe(), -ENOSYS, "probe fails when forced off by the environment");
    struct tu_log log = { 0 };
    struct ffio_engine *e = make(FFIO_ENGINE_AUTO, false, &log, &rc);
    struct ffio_engine_info info;
    ffio_engine_info(e, &info);
    ok(rc == 0 && info.kind == FFIO_ENGINE_PREAD && info.uring_rc == -ENOSYS && info.threads > 0,
       "auto falls back to the pread pool (%u threads)", info.threads);
    ok(log.lines == 1 && log.warn_lines == 1 && strstr(log.last, "io_uring unavailable") &&
           strstr(log.last, "pread") && strstr(log.last, "FFIO_FORCE_NO_URING"),
       "exactly one clear log line: %s", log.last);
    const int fh = ffio_engine_add_file(e, path);
    ok(tu_check_random(e, fh, ref, S, N, 5, MAX_LEN, out_fb),
       "fallback engine: %d random extents equal pread", N);
    is_int(log.warn_lines, 1, "no further warnings while reading");
    ffio_engine_destroy(e);

    struct tu_log log2 = { 0 };
    e = make(FFIO_ENGINE_URING, false, &log2, &rc);
    ok(rc == -ENOSYS && e == NULL, "explicit uring engine fails instead of falling back (%s)",
       ffio_strerror(rc));
    unsetenv("FFIO_FORCE_NO_URING");

    struct tu_log log3 = { 0 };
    e = make(FFIO_ENGINE_AUTO, true, &log3, &rc);
    ffio_engine_info(e, &info);
    ok(rc == 0 && info.kind == FFIO_ENGINE_PREAD && log3.lines == 1,
       "opts.force_no_uring does the same");
    ffio_engine_destroy(e);

    if (tu_uring_ok()) {
        struct tu_log log4 = { 0 };
        e = make(FFIO_ENGINE_AUTO, false, &log4, &rc);
        ffio_engine_info(e, &info);
        ok(rc == 0 && info.kind == FFIO_ENGINE_URING && log4.warn_lines == 0,
           "auto picks io_uring when it works, with no warning");
        const int fh2 = ffio_engine_add_file(e, path);
        ok(tu_check_random(e, fh2, ref, S, N, 5, MAX_LEN, out_ur),
           "io_uring engine: the same %d extents equal pread", N);
        ok(!memcmp(out_fb, out_ur, (size_t)N * MAX_LEN),
           "fallback and io_uring produced identical bytes");
        ffio_engine_destroy(e);
    } else {
        ok(1, "io_uring comparison # SKIP io_uring unavailable");
    }
    free(out_ur);
    free(out_fb);
    free(ref);
    unlink(path);
    return tap_done();
}
