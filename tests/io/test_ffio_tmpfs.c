/*
 * A file on tmpfs (/dev/shm). Kernels before 6.6 refuse open(O_DIRECT) there with EINVAL; the
 * engine must then read it buffered, automatically, with one log line (FFIO_DIRECT_AUTO) or fail
 * with -EINVAL (FFIO_DIRECT_ON). Newer kernels accept O_DIRECT on tmpfs, so the refusal is also
 * forced with a test hook to cover that path on every kernel.
 */
#include "ffio_internal.h"
#include "ffio_test_util.h"

#include <linux/magic.h>
#include <sys/vfs.h>

#define S (2u * 1024 * 1024 + 999)

static void one(const char *path, const unsigned char *ref, enum ffio_engine_kind kind, bool forced)
{
    const char *const name = ffio_engine_kind_name(kind);
    const char *const how = forced ? "forced refusal" : "real tmpfs";
    struct tu_log log = { 0 };
    struct ffio_opts o;
    ffio_opts_default(&o);
    o.engine = kind;
    o.log = tu_log_fn;
    o.log_ctx = &log;
    struct ffio_engine *e = NULL;
    if (ffio_engine_create(&o, &e) < 0) {
        printf("Bail out! create %s\n", name);
        exit(99);
    }
    const int fh = ffio_engine_add_file(e, path);
    struct ffio_file_info fi;
    const int irc = ffio_engine_file_info(e, (uint32_t)fh, &fi);
    const bool refused = strstr(log.last, "O_DIRECT refused") != NULL;
    if (forced || refused) {
        ok(fh >= 0 && irc == 0 && !fi.direct && log.warn_lines == 1 && refused,
           "%s, %s: O_DIRECT refused -> buffered, one line: %s", name, how, log.last);
    } else {
        ok(fh >= 0 && irc == 0 && fi.direct && log.warn_lines == 0,
           "%s, %s: this kernel accepts O_DIRECT on tmpfs (6.6+); used as is", name, how);
    }
    ok(tu_check_random(e, fh, ref, S, 300, 77, 200000, NULL),
       "%s, %s: 300 random extents equal pread", name, how);
    ffio_engine_destroy(e);

    if (forced) {
        o.direct = FFIO_DIRECT_ON;
        ffio_engine_create(&o, &e);
        is_int(ffio_engine_add_file(e, path), -EINVAL,
               "%s, %s: FFIO_DIRECT_ON fails instead of falling back", name, how);
        ffio_engine_destroy(e);
    }
}

int main(void)
{
    struct statfs sf;
    if (statfs("/dev/shm", &sf) != 0 || sf.f_type != TMPFS_MAGIC)
        tap_skip_all("/dev/shm is not a tmpfs here");
    char path[4096];
    tu_make_file("/dev/shm", "tmpfs", S, 5, path);
    unsigned char *const ref = tu_pread_all(path, S);
    const enum ffio_engine_kind kinds[] = { FFIO_ENGINE_URING, FFIO_ENGINE_PREAD };
    for (int forced = 0; forced < 2; forced++) {
        for (size_t k = 0; k < 2; k++) {
            if (kinds[k] == FFIO_ENGINE_URING && !tu_uring_ok()) {
                ok(1, "uring on tmpfs # SKIP io_uring unavailable");
                continue;
            }
            ffio_test_hooks.refuse_direct_open = forced;
            atomic_store(&ffio_test_hooks_on, forced != 0);
            one(path, ref, kinds[k], forced);
            atomic_store(&ffio_test_hooks_on, false);
            ffio_test_hooks.refuse_direct_open = false;
        }
    }
    free(ref);
    unlink(path);
    return tap_done();
}
