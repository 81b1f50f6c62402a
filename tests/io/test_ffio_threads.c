/*
 * Threading contract: an engine created (files added, buffers registered) on one thread is used
 * by another (the io_uring ring is SINGLE_ISSUER and starts disabled so the first submitter
 * becomes its owner), and several engines run concurrently, one per thread, as a reader does.
 * Also SQPOLL and unregistered-file rings. Run it under TSan as well (style rule 28).
 */
#include "ffio_test_util.h"

#include <pthread.h>

#define S (4u * 1024 * 1024 + 55)

static const unsigned char *g_ref;

struct job {
    struct ffio_engine *e; /* engine to use (created by main), or NULL: create one here */
    enum ffio_engine_kind kind;
    const char *path;
    int fh;
    uint64_t seed;
    int result; /* out: 1 = all bytes equal pread */
};

static void *run(void *arg)
{
    struct job *const j = arg;
    struct ffio_engine *e = j->e;
    int fh = j->fh;
    if (!e) {
        struct ffio_opts o;
        ffio_opts_default(&o);
        o.engine = j->kind;
        o.queue_depth = 32;
        if (ffio_engine_create(&o, &e) < 0) return NULL;
        fh = ffio_engine_add_file(e, j->path);
    }
    j->result = tu_check_random(e, fh, g_ref, S, 600, j->seed, 200000, NULL);
    if (!j->e) ffio_engine_destroy(e);
    return NULL;
}

static int one_engine(const char *path, enum ffio_engine_kind kind, bool sqpoll, bool regfiles,
                      bool direct, struct ffio_engine_info *info)
{
    struct ffio_opts o;
    ffio_opts_default(&o);
    o.engine = kind;
    o.sqpoll = sqpoll;
    o.register_files = regfiles;
    o.direct = direct ? FFIO_DIRECT_AUTO : FFIO_DIRECT_OFF;
    struct ffio_engine *e = NULL;
    if (ffio_engine_create(&o, &e) < 0) return 0;
    const int fh = ffio_engine_add_file(e, path);
    const int good = tu_check_random(e, fh, g_ref, S, 500, 8, 300000, NULL);
    ffio_engine_info(e, info);
    ffio_engine_destroy(e);
    return good;
}

int main(int argc, char **argv)
{
    const char *const dir = tu_dir(argc, argv);
    char path[4096];
    tu_make_file(dir, "threads", S, 123, path);
    unsigned char *const ref = tu_pread_all(path, S);
    g_ref = ref;
    const bool uring = tu_uring_ok();
    const enum ffio_engine_kind kinds[] = { FFIO_ENGINE_URING, FFIO_ENGINE_PREAD,
                                            FFIO_ENGINE_MMAP };

    for (size_t k = 0; k < 3; k++) {
        if (kinds[k] == FFIO_ENGINE_URING && !uring) {
            ok(1, "uring handed to another thread # SKIP io_uring unavailable");
            continue;
        }
        struct ffio_opts o;
        ffio_opts_default(&o);
        o.engine = kinds[k];
        struct ffio_engine *e = NULL;
        const int rc = ffio_engine_create(&o, &e);
        struct job j = { .e = e, .kind = kinds[k], .path = path, .seed = 3 };
        j.fh = rc == 0 ? ffio_engine_add_file(e, path) : -1;
        pthread_t t;
        if (rc == 0 && j.fh >= 0 && pthread_create(&t, NULL, run, &j) == 0) pthread_join(t, NULL);
        struct ffio_engine_info info;
        ffio_engine_info(e, &info);
        ok(j.result, "%s: created on main, used on another thread (flags 0x%x%s)",
           ffio_engine_kind_name(kinds[k]), info.uring_flags,
           info.defer_taskrun ? ", DEFER_TASKRUN" : "");
        ffio_engine_destroy(e); /* from main again: nothing in flight */
    }

    struct job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct job){ .kind = uring ? kinds[i % 3] : kinds[1 + i % 2],
                                .path = path,
                                .seed = 100 + (uint64_t)i };
        pthread_create(&th[i], NULL, run, &jobs[i]);
    }
    int all = 1;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        all &= jobs[i].result;
    }
    ok(all, "4 threads, one engine each (%s), read concurrently and correctly",
       uring ? "uring, pread, mmap, uring" : "pread, mmap");

    if (uring) {
        struct ffio_engine_info info;
        int good = one_engine(path, FFIO_ENGINE_URING, true, true, true, &info);
        ok(good, "SQPOLL ring, O_DIRECT: bytes equal pread (sqpoll %s)",
           info.sqpoll ? "in use" : "refused, plain ring");
        good = one_engine(path, FFIO_ENGINE_URING, false, false, false, &info);
        ok(good && !info.registered_files, "unregistered files, buffered: bytes equal pread");
        good = one_engine(path, FFIO_ENGINE_URING, false, true, true, &info);
        ok(good && info.registered_files, "registered files, O_DIRECT: bytes equal pread");
    } else {
        ok(1, "SQPOLL and file registration # SKIP io_uring unavailable");
    }
    free(ref);
    unlink(path);
    return tap_done();
}
