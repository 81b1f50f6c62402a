/*
 * Every engine reads thousands of random extents of a file on the real disk and each byte is
 * compared with pread, over the configuration matrix of style rule 24: engine (uring, pread,
 * mmap) x buffered / O_DIRECT x registered buffers off / on x queue depth 1 / 64. Extents are
 * aligned, ragged in length, ragged in offset, misaligned in memory, and flush with EOF; guard
 * bytes around each destination must be untouched.
 */
#include "ffio_test_util.h"

#define FILE_SIZE (4u * 1024 * 1024 + 1234) /* odd size: the last block is partial */
#define N_EXTENTS 1000                      /* per configuration (24 configurations) */
#define BATCH     64
#define MAX_LEN   (1024u * 1024)
#define GUARD     4096u
#define REGION    (MAX_LEN + 3 * GUARD) /* guard | misalignment | extent | guard */
#define CANARY    0xA5

struct config {
    enum ffio_engine_kind engine;
    enum ffio_direct direct;
    bool regbuf;
    unsigned qd;
};

static unsigned char g_canary[2 * GUARD];

static int is_canary(const unsigned char *p, size_t n)
{
    return !memcmp(p, g_canary, n);
}

static int run_config(const char *path, const unsigned char *ref, const struct config *c,
                      struct ffio_pinned *pool, uint64_t seed)
{
    struct ffio_opts o;
    ffio_opts_default(&o);
    o.engine = c->engine;
    o.direct = c->direct;
    o.queue_depth = c->qd;
    o.register_buffers = c->regbuf;
    struct tu_log log = { 0 };
    o.log = tu_log_fn;
    o.log_ctx = &log;
    struct ffio_engine *e = NULL;
    int rc = ffio_engine_create(&o, &e);
    if (rc < 0) {
        tap_diag("create: %s", ffio_strerror(rc));
        return 0;
    }
    const int fh = ffio_engine_add_file(e, path);
    if (fh < 0) {
        tap_diag("add_file: %s", ffio_strerror(fh));
        ffio_engine_destroy(e);
        return 0;
    }
    if (c->regbuf) {
        rc = ffio_engine_register_buffer(e, pool->ptr, pool->size);
        if (rc < 0) tap_diag("register_buffer: %s", ffio_strerror(rc));
    }
    uint64_t rng = seed;
    struct ffio_extent ext[BATCH];
    struct ffio_completion comp[BATCH];
    int bad = 0;
    for (int base = 0; base < N_EXTENTS && !bad; base += BATCH) {
        const int n = N_EXTENTS - base < BATCH ? N_EXTENTS - base : BATCH;
        for (int i = 0; i < n; i++) {
            const struct tu_shape x = tu_random_extent(&rng, FILE_SIZE, MAX_LEN);
            unsigned char *const region = (unsigned char *)pool->ptr + (size_t)i * REGION;
            /* Canary over guard, misalignment, extent and the guard after it. */
            memset(region, CANARY, GUARD + x.mis + x.length + GUARD);
            ext[i] = (struct ffio_extent){ .dst = region + GUARD + x.mis,
                                           .offset = x.offset,
                                           .length = x.length,
                                           .tag = (uint64_t)i,
                                           .file = (uint32_t)fh };
        }
        int next = 0, landed = 0;
        while (landed < n && !bad) {
            if (next < n) {
                const int k = ffio_engine_submit(e, ext + next, (size_t)(n - next));
                if (k < 0) {
                    tap_diag("submit: %s", ffio_strerror(k));
                    bad = 1;
                    break;
                }
                next += k;
            }
            const int got = ffio_engine_wait(e, comp, BATCH, 1);
            if (got <= 0) {
                tap_diag("wait returned %d (%s)", got, ffio_strerror(got));
                bad = 1;
                break;
            }
            for (int j = 0; j < got && !bad; j++) {
                const struct ffio_completion *const cp = &comp[j];
                const struct ffio_extent *const x = &ext[cp->tag];
                char what[300];
                ffio_engine_describe(e, cp, what, sizeof what);
                if (cp->res != (int64_t)x->length || cp->done != x->length || cp->dst != x->dst ||
                    cp->offset != x->offset) {
                    tap_diag("extent %llu: %s", (unsigned long long)(base + cp->tag), what);
                    bad = 1;
                    break;
                }
                if (memcmp(x->dst, ref + x->offset, x->length)) {
                    tap_diag("bytes differ from pread: %s", what);
                    bad = 1;
                }
                const unsigned char *const region =
                    (unsigned char *)pool->ptr + (size_t)cp->tag * REGION;
                const unsigned char *const d = x->dst;
                if (!bad && (!is_canary(region, (size_t)(d - region)) ||
                             !is_canary(d + x->length, GUARD))) {
                    tap_diag("bytes written outside the destination: %s", what);
                    bad = 1;
                }
            }
            landed += got;
        }
    }
    struct ffio_engine_info info;
    ffio_engine_info(e, &info);
    struct ffio_file_info fi;
    ffio_engine_file_info(e, (uint32_t)fh, &fi);
    if (!bad && info.kind != c->engine) {
        tap_diag("engine is %s", ffio_engine_kind_name(info.kind));
        bad = 1;
    }
    if (!bad && info.extents != N_EXTENTS) {
        tap_diag("info.extents %llu", (unsigned long long)info.extents);
        bad = 1;
    }
    /* The paths the configuration claims to take must have been taken. */
    if (!bad && c->engine != FFIO_ENGINE_MMAP && c->direct != FFIO_DIRECT_OFF && fi.direct &&
        info.bounced == 0) {
        tap_diag("O_DIRECT with unaligned extents but nothing was bounced");
        bad = 1;
    }
    if (!bad && c->engine == FFIO_ENGINE_URING && c->regbuf && info.registered_buffers &&
        info.fixed_reads == 0) {
        tap_diag("registered buffers but no read_fixed");
        bad = 1;
    }
    if (!bad && c->engine == FFIO_ENGINE_URING && !c->regbuf && info.fixed_reads) {
        tap_diag("read_fixed without registered buffers");
        bad = 1;
    }
    tap_diag("  %s direct=%d (file %s) qd=%u regbuf=%u fixed=%llu bounced=%llu short=%llu",
             ffio_engine_kind_name(info.kind), (int)c->direct, fi.direct ? "O_DIRECT" : "buffered",
             info.queue_depth, info.registered_buffers, (unsigned long long)info.fixed_reads,
             (unsigned long long)info.bounced, (unsigned long long)info.short_reads);
    ffio_engine_destroy(e);
    return !bad;
}

int main(int argc, char **argv)
{
    const char *const dir = tu_dir(argc, argv);
    memset(g_canary, CANARY, sizeof g_canary);
    char path[4096];
    tu_make_file(dir, "extents", FILE_SIZE, 42, path);
    unsigned char *const ref = tu_pread_all(path, FILE_SIZE);
    struct ffio_pinned pool;
    if (ffio_pinned_alloc((size_t)BATCH * REGION, FFIO_PINNED_HOST_ONLY, &pool) < 0) {
        printf("Bail out! pinned alloc\n");
        return 99;
    }
    const enum ffio_engine_kind engines[] = { FFIO_ENGINE_URING, FFIO_ENGINE_PREAD,
                                              FFIO_ENGINE_MMAP };
    const enum ffio_direct directs[] = { FFIO_DIRECT_OFF, FFIO_DIRECT_AUTO };
    const unsigned qds[] = { 1, 64 };
    uint64_t seed = 1000;
    for (size_t ei = 0; ei < 3; ei++)
        for (size_t di = 0; di < 2; di++)
            for (int rb = 0; rb < 2; rb++)
                for (size_t qi = 0; qi < 2; qi++) {
                    const struct config c = { engines[ei], directs[di], rb != 0, qds[qi] };
                    seed++;
                    if (c.engine == FFIO_ENGINE_URING && !tu_uring_ok()) {
                        ok(1, "uring direct=%d regbuf=%d qd=%u # SKIP io_uring unavailable",
                           (int)c.direct, rb, c.qd);
                        continue;
                    }
                    ok(run_config(path, ref, &c, &pool, seed),
                       "%s %s regbuf=%d qd=%u: %d random extents equal pread",
                       ffio_engine_kind_name(c.engine),
                       c.direct == FFIO_DIRECT_OFF ? "buffered" : "O_DIRECT", rb, c.qd, N_EXTENTS);
                }
    ffio_pinned_free(&pool);
    free(ref);
    unlink(path);
    return tap_done();
}
