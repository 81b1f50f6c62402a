/*
 * The loader's overlapped upload (GPU augmentation, loader.c: the worker that completes a batch
 * uploads its tiles on pix_ctx's copy queue and records an event; trn_loader_next enqueues
 * aug_batch on the compute queue behind it and returns without a host wait; a slot's arena is
 * rewritten only after its upload event completed). On the CPU reference ops by default, or
 * with --cuda on a CUDA context and kern_ops_cuda() (exit 77 with a SKIP line without a device),
 * against the plain host loader on the same seed, datasets made here with yolo-synth and
 * yolo-pack:
 *   - device_images equal the host images byte for byte (read back with kern_mem_copy on the
 *     compute queue, the order the loader promises), targets and info identical, over 2 epochs:
 *     1 and 3 workers, depth 2 and 8, uint8 and float;
 *   - the uploads run ahead of the consumer: holding batch 0, the workers upload exactly `depth`
 *     batches (trn_loader_info.uploads) and no more;
 *   - a slow consumer (every other slot of the ring uploaded before it takes the next batch) and
 *     a fast one get the same bytes;
 *   - resume: created at (epoch 1, step 2), set_position back and across epochs;
 *   - bad records: skipped (never used, the same bytes), or failing (the batches before it
 *     identical, the error at the host path's batch);
 *   - destroy with uploads in flight.
 * Usage: test_loader_stream YOLO_SYNTH YOLO_PACK [--cuda]
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ffr.h"
#include "kern.h"
#include "kern_cuda.h"
#include "loader.h"
#include "run_testutil.h"
#include "tap.h"
#define LOADER_TEST_BATCH 5
#include "loader_testutil.h"

#define IMG         128
#define N_TRAIN     24
#define BATCH       5
#define EPOCH_STEPS 5 /* ceil(24 / 5) */
#define RUN         (2 * EPOCH_STEPS)

static struct kern_ctx *g_ctx; /* pix_ctx: CPU, or CUDA with --cuda */
static const struct kern_ops *g_ops;

/* Batches [0, n) equal, b's from device_images. */
static int all_same(const struct saved *a, const struct saved *b, int n)
{
    int eq = 1;
    for (int i = 0; i < n; i++)
        eq &= same(&a[i], &b[i]) && b[i].on_device;
    return eq;
}

static void train_opts(struct trn_loader_opts *o, unsigned workers, unsigned depth, int pix)
{
    trn_loader_opts_default(o);
    o->img_size = IMG;
    o->batch_size = BATCH;
    o->workers = workers;
    o->depth = depth;
    o->seed = 23;
    o->hyp.mixup = 0.5; /* 8-tile samples next to 4-tile ones: records repeat within a batch */
    o->hyp.degrees = 5;
    o->hyp.perspective = 0.0005;
    o->hyp.flipud = 0.3;
    o->io.io.direct = FFIO_DIRECT_OFF; /* the test directory may be on tmpfs */
    if (pix) {
        o->pix_ctx = g_ctx;
        o->pix_ops = g_ops;
    }
}

/* Waits (up to ~10 s, no timing asserted) until the workers have uploaded `want` batches;
 * returns the count seen last. */
static uint64_t wait_uploads(struct trn_loader *l, uint64_t want)
{
    struct trn_loader_info in;
    for (int i = 0; i < 20000; i++) {
        trn_loader_info(l, &in);
        if (in.uploads >= want) break;
        usleep(500);
    }
    return in.uploads;
}

/*
 * Runs a loader for `count` batches into out[]. slow: before taking each next batch, wait until
 * every other slot of the ring has been uploaded. Returns 0 or the first error (at *rc_at).
 */
static int collect(const char *ds, const struct trn_loader_opts *o, struct saved *out, int count,
                   int slow, int *rc_at, char *err, size_t cap)
{
    struct ffr_reader *r = open_ds(ds);
    if (!r) return -ENOENT;
    struct trn_loader *l = NULL;
    int rc = trn_loader_create(r, o, &l, err, cap);
    if (rc_at) *rc_at = -1;
    for (int i = 0; rc == 0 && i < count; i++) {
        struct trn_batch b;
        if (slow && i > 0) (void)wait_uploads(l, (uint64_t)(i - 1 + (int)o->depth));
        rc = trn_loader_next(l, &b);
        if (rc == 0) rc = save_batch(&out[i], &b, g_ctx);
        if (rc < 0) {
            snprintf(err, cap, "%s", trn_loader_error(l));
            if (rc_at) *rc_at = i;
        }
    }
    trn_loader_destroy(l);
    ffr_reader_close(r);
    return rc;
}

static void test_same(void)
{
    struct saved a[RUN], b[RUN];
    struct trn_loader_opts o;
    char err[512] = "";
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    for (int px = 0; px < 2; px++) {
        const char *pname = px ? "float" : "uint8";
        train_opts(&o, 1, 3, 0);
        o.pixels = px ? TRN_PIXELS_F32 : TRN_PIXELS_U8;
        int rc = collect("train.ffr", &o, a, RUN, 0, NULL, err, sizeof err);
        if (!ok(rc == 0, "%s: host loader, %d batches (%s)", pname, RUN, err)) return;
        static const unsigned cfg[3][2] = { { 1, 2 }, { 3, 2 }, { 3, 8 } };
        for (int c = 0; c < 3; c++)
            for (int slow = 0; slow < 2; slow++) {
                if (px && (c != 1 || slow)) continue; /* float: one configuration is enough */
                train_opts(&o, cfg[c][0], cfg[c][1], 1);
                o.pixels = px ? TRN_PIXELS_F32 : TRN_PIXELS_U8;
                rc = collect("train.ffr", &o, b, RUN, slow, NULL, err, sizeof err);
                ok(rc == 0 && all_same(a, b, RUN),
                   "%s, %u workers, depth %u, %s consumer: the host loader's bytes over 2 epochs "
                   "(%s)",
                   pname, cfg[c][0], cfg[c][1], slow ? "slow" : "fast", err);
                unsave(b, RUN);
            }
        if (px == 0) {
            /* Another seed gives other batches: the comparison sees a difference. */
            train_opts(&o, 2, 3, 1);
            o.seed = 24;
            rc = collect("train.ffr", &o, b, 1, 0, NULL, err, sizeof err);
            ok(rc == 0 && !same(&a[0], &b[0]), "another seed: other device images");
            unsave(b, 1);

            train_opts(&o, 2, 3, 1);
            o.epoch = 1;
            o.step = 2;
            rc = collect("train.ffr", &o, b, 3, 0, NULL, err, sizeof err);
            ok(rc == 0 && all_same(a + EPOCH_STEPS + 2, b, 3),
               "created at epoch 1 step 2: the host loader's batches there (%s)", err);
            unsave(b, 3);

            struct ffr_reader *r = open_ds("train.ffr");
            struct trn_loader *l = NULL;
            train_opts(&o, 3, 2, 1);
            rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
            struct trn_batch bt;
            int good = rc == 0;
            for (int i = 0; good && i < 2; i++)
                good &= trn_loader_next(l, &bt) == 0;
            /* Both slots uploaded (one held), then moved: in-flight work is dropped. */
            if (good) wait_uploads(l, 3);
            good &= good && trn_loader_set_position(l, 0, 3) == 0;
            for (int i = 0; good && i < 4; i++) {
                struct saved s;
                good &= trn_loader_next(l, &bt) == 0 && save_batch(&s, &bt, g_ctx) == 0;
                if (!good) break;
                good &= same(&s, &a[3 + i]) && s.on_device;
                unsave(&s, 1);
            }
            good &= good && trn_loader_set_position(l, 1, 1) == 0 && trn_loader_next(l, &bt) == 0;
            if (good) {
                struct saved s;
                good &= save_batch(&s, &bt, g_ctx) == 0 && same(&s, &a[EPOCH_STEPS + 1]);
                unsave(&s, 1);
            }
            ok(good,
               "set_position after uploads ran ahead, mid-epoch and across epochs: the "
               "same batches (%s)",
               err);
            trn_loader_destroy(l);
            ffr_reader_close(r);
        }
        unsave(a, RUN);
    }
}

static void test_ahead(void)
{
    for (unsigned depth = 2; depth <= 4; depth += 2) {
        struct ffr_reader *r = open_ds("train.ffr");
        struct trn_loader *l = NULL;
        struct trn_loader_opts o;
        char err[512] = "";
        train_opts(&o, 3, depth, 1);
        int rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
        struct trn_batch bt;
        if (rc == 0) rc = trn_loader_next(l, &bt);
        const uint64_t got = rc == 0 ? wait_uploads(l, depth) : 0;
        usleep(20000); /* time for a wrong extra upload to show; nothing waits on it */
        struct trn_loader_info in;
        trn_loader_info(l, &in);
        const size_t cap = (size_t)depth * BATCH * 8 * ((size_t)IMG * IMG * 3 + 64);
        ok(rc == 0 && got == depth && in.uploads == depth && in.upload_bytes > 0 &&
               in.upload_bytes <= cap,
           "depth %u, the consumer holding batch 0: the workers uploaded %llu batches (%zu "
           "bytes) ahead of it, and no more (%s)",
           depth, (unsigned long long)in.uploads, in.upload_bytes, err);
        /* Destroyed with the ring full and, for all it knows, uploads in flight. */
        trn_loader_destroy(l);
        ffr_reader_close(r);
    }
    /* And right after creation, the first uploads certainly in flight. */
    struct ffr_reader *r = open_ds("train.ffr");
    struct trn_loader *l = NULL;
    struct trn_loader_opts o;
    char err[512] = "";
    train_opts(&o, 3, 8, 1);
    const int rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    trn_loader_destroy(l);
    ffr_reader_close(r);
    ok(rc == 0, "destroyed right after creation, while the workers upload (%s)", err);
}

static void test_bad_records(void)
{
    const uint64_t bad = 13;
    struct saved a[RUN], b[RUN];
    struct trn_loader_opts o;
    char err[512] = "", err2[512] = "", want[64];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    snprintf(want, sizeof want, "bad record %llu: ", (unsigned long long)bad);
    if (!ok(write_checksum_bad(bad) == 0, "a copy with record %llu's checksum broken",
            (unsigned long long)bad))
        return;
    train_opts(&o, 1, 3, 0);
    int rc = collect("checksum.ffr", &o, a, RUN, 0, NULL, err, sizeof err);
    train_opts(&o, 3, 2, 1);
    if (rc == 0) rc = collect("checksum.ffr", &o, b, RUN, 0, NULL, err, sizeof err);
    int never = rc == 0;
    for (int i = 0; never && i < RUN; i++)
        for (int j = 0; j < b[i].n; j++)
            never &= b[i].info[j].index != bad;
    ok(never && all_same(a, b, RUN),
       "skip: 2 epochs without record %llu, the host loader's bytes (%s)", (unsigned long long)bad,
       err);
    unsave(a, RUN);
    unsave(b, RUN);

    /* Failing: without mosaic each sample reads its own record only, once per epoch, so the
     * record at batch 3's first place breaks batch 3 and nothing before it. One worker each:
     * which batch meets a bad record first is then fixed. */
    train_opts(&o, 1, 3, 0);
    o.hyp.mosaic = 0;
    o.hyp.mixup = 0;
    rc = collect("train.ffr", &o, a, 4, 0, NULL, err, sizeof err);
    const uint64_t late = rc == 0 ? a[3].info[0].index : 0;
    unsave(a, rc == 0 ? 4 : 0);
    snprintf(want, sizeof want, "bad record %llu: ", (unsigned long long)late);
    if (!ok(rc == 0 && write_checksum_bad(late) == 0,
            "without mosaic, batch 3 starts with record %llu: a copy with its checksum broken",
            (unsigned long long)late))
        return;
    int at_host = -1, at_pix = -1;
    o.bad_records = TRN_BAD_RECORD_FAIL;
    const int rc_host = collect("checksum.ffr", &o, a, RUN, 0, &at_host, err, sizeof err);
    train_opts(&o, 1, 3, 1);
    o.hyp.mosaic = 0;
    o.hyp.mixup = 0;
    o.bad_records = TRN_BAD_RECORD_FAIL;
    const int rc_pix = collect("checksum.ffr", &o, b, RUN, 0, &at_pix, err2, sizeof err2);
    ok(rc_host < 0 && rc_pix == rc_host && at_host == 3 && at_pix == 3 && all_same(a, b, 3) &&
           strstr(err2, want),
       "fail: stops at batch %d as the host loader (%d), the 3 batches before identical: %s",
       at_pix, at_host, err2);
    unsave(a, at_host > 0 ? at_host : 0);
    unsave(b, at_pix > 0 ? at_pix : 0);
}

/* Zeroes every record byte of the ffr file at path (header, index and trailer stay). */
static int zero_records(const char *path)
{
    const int fd = open(path, O_RDWR);
    uint8_t head[64], tail[1536], z[4096] = { 0 };
    struct ffr_index_extent ix;
    const off_t end = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
    int rc = fd >= 0 && pread(fd, head, 64, 0) == 64 && pread(fd, tail, 1536, end - 1536) == 1536 &&
                     ffr_locate_index(head, tail, (uint64_t)end, path, &ix, NULL, 0) == 0
                 ? 0
                 : -1;
    for (uint64_t at = 64; rc == 0 && at < ix.offset;) {
        const size_t n = ix.offset - at < sizeof z ? (size_t)(ix.offset - at) : sizeof z;
        rc = pwrite(fd, z, n, (off_t)at) == (ssize_t)n ? 0 : -1;
        at += n;
    }
    if (fd >= 0) close(fd);
    return rc;
}

/*
 * The epoch gate (a node cache smaller than the dataset, trainer/data/node_cache.c): over a view
 * of skeletons with every shard swapped in, a gated loader gives epoch 0's batches and then
 * -EAGAIN rather than read on; after every shard is swapped to a copy (half of them then
 * unlinked, as an eviction would) and the files the workers had open are zeroed,
 * trn_loader_open_epoch makes them read the copies: epoch 1's batches are the plain loader's,
 * with no bad record.
 */
static void test_gate(void)
{
    struct saved ref[RUN];
    struct trn_loader_opts o;
    char err[1024] = "", man[600], cdir[600], view[4200];
    train_opts(&o, 2, 3, 1);
    int rc = collect("sharded/train.ffr", &o, ref, RUN, 0, NULL, err, sizeof err);
    if (!ok(rc == 0, "the sharded dataset: %d batches, ungated (%s)", RUN, err)) return;
    snprintf(man, sizeof man, "%s/sharded/train.ffr", dir);
    snprintf(cdir, sizeof cdir, "%s/cache", dir);
    struct ffr_cache *c = NULL;
    struct ffr_reader *v = NULL, *src = NULL;
    rc = ffr_cache_open(&c, cdir, NULL, err, sizeof err);
    if (rc == 0) rc = ffr_cache_skeletons(c, man, view, sizeof view, err, sizeof err) < 0 ? -1 : 0;
    if (rc == 0) rc = ffr_reader_open(&v, view, NULL, err, sizeof err);
    if (rc == 0) rc = ffr_reader_open(&src, man, NULL, err, sizeof err);
    const uint32_t ns = ffr_reader_shard_count(src);
    static char entry[64][4200];
    for (uint32_t k = 0; rc == 0 && k < ns && k < 64; k++) {
        struct ffr_shard_info si;
        ffr_reader_shard(src, k, &si);
        const char *slash = strrchr(si.path, '/');
        const struct ffr_cache_shard w = { slash ? slash + 1 : si.path, si.file_size, si.count,
                                           si.index_hash };
        rc = ffr_cache_shard(c, si.path, &w, entry[k], sizeof entry[k], err, sizeof err);
        if (rc >= 0) rc = ffr_reader_swap_shard(v, k, entry[k], err, sizeof err);
    }
    if (!ok(rc == 0 && ns > 1 && ns <= 64, "a view of %u skeletons, every shard swapped in (%s)",
            ns, err)) {
        ffr_reader_close(v);
        ffr_reader_close(src);
        ffr_cache_close(c);
        unsave(ref, RUN);
        return;
    }
    struct trn_loader *l = NULL;
    train_opts(&o, 2, 3, 1);
    o.epoch_gate = true;
    rc = trn_loader_create(v, &o, &l, err, sizeof err);
    int good = rc == 0;
    struct trn_batch b;
    for (int i = 0; good && i < EPOCH_STEPS; i++) {
        struct saved sv;
        good = trn_loader_next(l, &b) == 0 && save_batch(&sv, &b, g_ctx) == 0 && same(&sv, &ref[i]);
        unsave(&sv, 1);
    }
    ok(good, "gated: epoch 0's batches are the plain loader's (%s)", err);
    ok(good && trn_loader_next(l, &b) == -EAGAIN && trn_loader_open_epoch(l, 0) == -EINVAL,
       "past the gate -EAGAIN, not a wait; opening the open epoch again: -EINVAL");
    /* every shard to a copy; the files the workers opened are zeroed */
    for (uint32_t k = 0; good && k < ns; k++) {
        char cp[9000], copy[4300];
        snprintf(copy, sizeof copy, "%s/copy-%u.ffr", dir, k);
        snprintf(cp, sizeof cp, "cp '%s' '%s'", entry[k], copy);
        good = system(cp) == 0 && ffr_reader_swap_shard(v, k, copy, err, sizeof err) == 0 &&
               zero_records(entry[k]) == 0 && (k % 2 || unlink(copy) == 0);
    }
    struct ffr_reader *z = NULL;
    uint8_t buf[1 << 16];
    ok(good && ffr_reader_open(&z, entry[0], NULL, NULL, 0) == 0 &&
           ffr_reader_read(z, NULL, 0, buf, sizeof buf) < 0,
       "every shard swapped to a copy (every other one's name then removed, as an eviction "
       "does); the old files' records are zeroes (%s)",
       err);
    ffr_reader_close(z);
    good = good && trn_loader_open_epoch(l, 1) == 0;
    for (int i = EPOCH_STEPS; good && i < RUN; i++) {
        struct saved sv;
        good = trn_loader_next(l, &b) == 0 && save_batch(&sv, &b, g_ctx) == 0 && same(&sv, &ref[i]);
        unsave(&sv, 1);
    }
    struct trn_loader_info li;
    trn_loader_info(l, &li);
    ok(good && li.bad_records == 0,
       "after trn_loader_open_epoch the workers read the copies: epoch 1's batches are the "
       "plain loader's, %" PRIu64 " bad records",
       li.bad_records);
    trn_loader_destroy(l);
    ffr_reader_close(v);
    ffr_reader_close(src);
    ffr_cache_close(c);
    unsave(ref, RUN);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        printf("usage: test_loader_stream YOLO_SYNTH YOLO_PACK [--cuda]\n");
        return 99;
    }
    const int cuda = argc > 3 && !strcmp(argv[3], "--cuda");
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    if (cuda) {
        if (kern_cuda_device_count() <= 0) {
            printf("1..0 # SKIP no CUDA device\n");
            return 77;
        }
        ko.backend = KERN_BACKEND_CUDA;
        g_ops = kern_ops_cuda();
    } else {
        ko.threads = 2;
        g_ops = kern_ops_ref();
    }
    const char *synth = argv[1], *pack = argv[2];
    snprintf(dir, sizeof dir, "/tmp/test_loader_stream_XXXXXX");
    if (!mkdtemp(dir)) {
        printf("# mkdtemp failed\n");
        return 99;
    }
    const int made =
        run("%s %s/synth --split train2017=%d --seed 7 --min-side 48 --max-side 200 --format yolo "
            "--classes 4 --max-objects 5",
            synth, dir, N_TRAIN) == 0 &&
        run("%s %s/synth -o %s/train.ffr --size %d --split train2017 -q -j 1", pack, dir, dir,
            IMG) == 0 &&
        run("mkdir -p %s/sharded && %s %s/synth -o %s/sharded/train.ffr --size %d --split "
            "train2017 -q -j 1 --shard-size 64K",
            dir, pack, dir, dir, IMG) == 0;
    if (!ok(made, "yolo-synth and yolo-pack made the dataset in %s", dir)) {
        printf("# see %s/stderr.txt\n", dir);
        return tap_done();
    }
    const int crc = kern_ctx_create(&ko, &g_ctx);
    if (!ok(crc == 0 && g_ops, "a %s kern context for pix_ctx (%s)", cuda ? "CUDA" : "CPU",
            kern_strerror(crc)))
        return tap_done();
    test_same();
    test_ahead();
    test_bad_records();
    test_gate();
    kern_ctx_destroy(g_ctx);
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
