/*
 * The loader's GPU augmentation hand-off (trn_loader_opts.pix_ctx) on a CPU kern context with
 * the reference ops, against the plain host loader on the same seed, on datasets made here with
 * yolo-synth and yolo-pack: device_images equals the host images byte for byte (uint8 and float),
 * targets and per-image info identical, over two epochs; 1 and 3 workers, a threaded context,
 * Sub-filtered records; resume at a position and set_position; records whose letterbox must
 * resize (packed one pixel larger) built on the host and still identical; validation (plain and
 * rect) untouched by pix_ctx; copy_paste's pasting samples built on the host, same bytes; bad
 * records reported and skipped or failing as on the host path; the bf16 space-to-depth batches
 * (the float32 batches cast, bit for bit; trn_batch_pixel); option errors. The CUDA ops equal
 * the same reference (tests/kernels/test_cuda_parity_augment.c), so this is the whole of the
 * loader's side. Usage: test_loader_gpu_aug YOLO_SYNTH YOLO_PACK
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ffr.h"
#include "kern.h"
#include "loader.h"
#include "run_testutil.h"
#include "tap.h"
#define LOADER_TEST_BATCH 5
#include "loader_testutil.h"
#include "errors.h"

#define IMG         128
#define N_TRAIN     24
#define N_VAL       11
#define BATCH       5
#define EPOCH_STEPS 5 /* ceil(24 / 5) */
#define RUN         (2 * EPOCH_STEPS)

struct logbuf {
    char text[8192];
};

static void log_cb(void *ctx, const char *msg)
{
    struct logbuf *b = ctx;
    const size_t used = strlen(b->text);
    snprintf(b->text + used, sizeof b->text - used, "%s\n", msg);
}

/* Batches i of a and b equal for i < n, and b's pixels came from device_images (want_dev). */
static int all_same(const struct saved *a, const struct saved *b, int n, int want_dev,
                    size_t *bytes)
{
    int eq = 1;
    *bytes = 0;
    for (int i = 0; i < n; i++) {
        eq &= same(&a[i], &b[i]) && b[i].on_device == want_dev;
        *bytes += a[i].bytes;
    }
    return eq;
}

static void train_opts(struct trn_loader_opts *o, unsigned workers)
{
    trn_loader_opts_default(o);
    o->img_size = IMG;
    o->batch_size = BATCH;
    o->workers = workers;
    o->seed = 11;
    o->hyp.mixup = 0.5; /* 8-tile samples next to 4-tile ones */
    o->hyp.degrees = 5;
    o->hyp.shear = 2;
    o->hyp.perspective = 0.0005; /* warpPerspective as well as warpAffine */
    o->hyp.flipud = 0.3;
    o->io.io.direct = FFIO_DIRECT_OFF; /* the test directory may be on tmpfs */
}

static struct kern_ctx *cpu_ctx(int threads)
{
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.threads = threads;
    struct kern_ctx *k = NULL;
    return kern_ctx_create(&ko, &k) == 0 ? k : NULL;
}

/* What a collect() run saw besides the batches. */
struct run_info {
    struct trn_loader_info info;
    int rc_at; /* batch index of the error, or -1 */
};

/* Run a loader for `count` batches into out[]; returns 0 or the first error. */
static int collect(const char *ds, const struct trn_loader_opts *o, struct saved *out, int count,
                   struct logbuf *lb, struct run_info *ri, char *err, size_t cap)
{
    struct ffr_reader *r = open_ds(ds);
    if (!r) return -ENOENT;
    struct trn_loader_opts oo = *o;
    if (lb) {
        oo.log = log_cb;
        oo.log_ctx = lb;
    }
    struct trn_loader *l = NULL;
    int rc = trn_loader_create(r, &oo, &l, err, cap);
    if (ri) ri->rc_at = -1;
    for (int i = 0; rc == 0 && i < count; i++) {
        struct trn_batch b;
        rc = trn_loader_next(l, &b);
        if (rc == 0) {
            save_batch(&out[i], &b, NULL);
        } else {
            snprintf(err, cap, "%s", trn_loader_error(l));
            if (ri) ri->rc_at = i;
        }
    }
    if (ri) trn_loader_info(l, &ri->info);
    trn_loader_destroy(l);
    ffr_reader_close(r);
    return rc;
}

static void test_train(struct kern_ctx *k, struct kern_ctx *k3)
{
    struct saved a[RUN], b[RUN];
    struct trn_loader_opts o;
    struct run_info ri;
    char err[512] = "";
    size_t bytes;
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);

    for (int px = 0; px < 2; px++) {
        const char *pname = px ? "float" : "uint8";
        train_opts(&o, 1);
        o.pixels = px ? TRN_PIXELS_F32 : TRN_PIXELS_U8;
        int rc = collect("train.ffr", &o, a, RUN, NULL, &ri, err, sizeof err);
        ok(rc == 0 && ri.info.device_bytes == 0 && !a[0].on_device,
           "%s: plain loader, %d batches on the host, no device memory (%s)", pname, RUN, err);
        if (rc) return;
        size_t rows = 0;
        for (int i = 0; i < RUN; i++)
            rows += a[i].nt;

        o.pix_ctx = k;
        o.pix_ops = kern_ops_ref();
        rc = collect("train.ffr", &o, b, RUN, NULL, &ri, err, sizeof err);
        int eq = rc == 0 && all_same(a, b, RUN, 1, &bytes);
        ok(eq,
           "%s, 1 worker: device_images equal the host images byte for byte, targets (%zu "
           "rows) and info identical, over 2 epochs (%zu bytes) (%s)",
           pname, rows, bytes, err);
        /* Per ring buffer at least the image tensor and 5 samples x 8 tiles of the largest
         * record; the tiles are not larger than img_size squared. */
        const size_t elem = px ? 4 : 1, tensor = (size_t)BATCH * 3 * IMG * IMG * elem;
        ok(rc == 0 && ri.info.device_bytes > 3 * tensor &&
               ri.info.device_bytes <= 3 * (tensor + (size_t)BATCH * 8 * (IMG * IMG * 3 + 64)) &&
               ri.info.pinned_bytes >= ri.info.device_bytes - 3 * tensor,
           "%s: info reports %zu device bytes, %zu pinned (depth 3)", pname, ri.info.device_bytes,
           ri.info.pinned_bytes);
        unsave(b, RUN);

        train_opts(&o, 3);
        o.pixels = px ? TRN_PIXELS_F32 : TRN_PIXELS_U8;
        o.depth = 2;
        o.pix_ctx = k3;
        o.pix_ops = kern_ops_ref();
        rc = collect("train.ffr", &o, b, RUN, NULL, NULL, err, sizeof err);
        eq = rc == 0 && all_same(a, b, RUN, 1, &bytes);
        ok(eq, "%s, 3 workers, depth 2, a 3-thread context: the same bytes (%s)", pname, err);
        unsave(b, RUN);

        if (px == 0) {
            /* Another seed changes the batches: the comparison can see a difference. */
            train_opts(&o, 2);
            o.seed = 12;
            o.pix_ctx = k;
            o.pix_ops = kern_ops_ref();
            rc = collect("train.ffr", &o, b, 1, NULL, NULL, err, sizeof err);
            ok(rc == 0 && !same(&a[0], &b[0]) && memcmp(a[0].images, b[0].images, a[0].bytes),
               "another seed gives other device images");
            unsave(b, 1);

            train_opts(&o, 2);
            o.pix_ctx = k;
            o.pix_ops = kern_ops_ref();
            rc = collect("train-sub.ffr", &o, b, EPOCH_STEPS, NULL, NULL, err, sizeof err);
            eq = rc == 0 && all_same(a, b, EPOCH_STEPS, 1, &bytes);
            ok(eq, "Sub-filtered records on the device path: the same batches (%s)", err);
            unsave(b, EPOCH_STEPS);

            /* Resume: started at (1, 2), and moved to (0, 3) then (1, 1) by set_position. */
            train_opts(&o, 2);
            o.epoch = 1;
            o.step = 2;
            o.pix_ctx = k;
            o.pix_ops = kern_ops_ref();
            rc = collect("train.ffr", &o, b, 3, NULL, NULL, err, sizeof err);
            eq = rc == 0 && all_same(a + EPOCH_STEPS + 2, b, 3, 1, &bytes);
            ok(eq, "started at epoch 1 step 2: the plain loader's batches there (%s)", err);
            unsave(b, 3);

            struct ffr_reader *r = open_ds("train.ffr");
            struct trn_loader *l = NULL;
            train_opts(&o, 3);
            o.pix_ctx = k;
            o.pix_ops = kern_ops_ref();
            rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
            struct trn_batch bt;
            int good = rc == 0;
            for (int i = 0; good && i < 2; i++)
                good &= trn_loader_next(l, &bt) == 0;
            good &= good && trn_loader_set_position(l, 0, 3) == 0;
            for (int i = 0; good && i < 4; i++) {
                struct saved s;
                good &= trn_loader_next(l, &bt) == 0;
                if (!good) break;
                save_batch(&s, &bt, NULL);
                good &= same(&s, &a[3 + i]) && s.on_device;
                unsave(&s, 1);
            }
            good &= good && trn_loader_set_position(l, 1, 1) == 0 && trn_loader_next(l, &bt) == 0;
            if (good) {
                struct saved s;
                save_batch(&s, &bt, NULL);
                good &= same(&s, &a[EPOCH_STEPS + 1]);
                unsave(&s, 1);
            }
            ok(good, "set_position mid-epoch and across epochs: the same batches (%s)", err);
            trn_loader_destroy(l);
            ffr_reader_close(r);
        }
        unsave(a, RUN);
    }
}

/*
 * The bf16 space-to-depth batches (TRN_PIXELS_BF16_S2D_*): each batch's device_images is the
 * float32 run's batch through kern_ref_cast_f32_lowp_s2d bit for bit, with the same targets and
 * info; trn_batch_pixel reads the uint8 run's values back from it, every one; 3 workers and a
 * threaded context give the same bits. Also the U8 and F32 batches through trn_batch_pixel.
 */
static void test_s2d(struct kern_ctx *k, struct kern_ctx *k3)
{
    struct saved f[RUN], u[RUN], b[RUN];
    struct trn_loader_opts o;
    char err[512] = "";
    memset(f, 0, sizeof f), memset(u, 0, sizeof u), memset(b, 0, sizeof b);
    train_opts(&o, 2);
    o.pix_ctx = k;
    o.pix_ops = kern_ops_ref();
    o.pixels = TRN_PIXELS_F32;
    int rc = collect("train.ffr", &o, f, RUN, NULL, NULL, err, sizeof err);
    o.pixels = TRN_PIXELS_U8;
    if (rc == 0) rc = collect("train.ffr", &o, u, RUN, NULL, NULL, err, sizeof err);
    ok(rc == 0, "float32 and uint8 runs on the CPU context (%s)", err);
    if (rc) return;
    for (int lay = 0; lay < 2; lay++) {
        const char *name = lay ? "NCHW" : "NHWC";
        const int layout = lay ? KERN_LAYOUT_NCHW : KERN_LAYOUT_NHWC;
        train_opts(&o, lay ? 3 : 2);
        o.pix_ctx = lay ? k3 : k;
        o.pix_ops = kern_ops_ref();
        o.pixels = lay ? TRN_PIXELS_BF16_S2D_NCHW : TRN_PIXELS_BF16_S2D_NHWC;
        rc = collect("train.ffr", &o, b, RUN, NULL, NULL, err, sizeof err);
        int eq = rc == 0, px = rc == 0;
        size_t bytes = 0, values = 0;
        for (int i = 0; eq && i < RUN; i++) {
            const size_t want = (size_t)b[i].n * IMG * IMG * 8; /* 16 bf16 per 2x2 pixels */
            uint16_t *cast = malloc(want);
            const struct kern_s2d d = { f[i].n, 3, IMG, IMG, 16, layout };
            eq &= b[i].on_device && b[i].bytes == want && cast &&
                  kern_ref_cast_f32_lowp_s2d(k, &d, KERN_DT_BF16, cast,
                                             (const float *)(void *)f[i].images) == 0 &&
                  memcmp(cast, b[i].images, want) == 0 && b[i].nt == f[i].nt &&
                  memcmp(b[i].targets, f[i].targets, f[i].nt * 6 * sizeof(float)) == 0 &&
                  memcmp(b[i].info, f[i].info, (size_t)f[i].n * sizeof f[i].info[0]) == 0;
            free(cast);
            bytes += want;
            const struct trn_batch bt = {
                .n = b[i].n, .height = IMG, .width = IMG, .pixels = o.pixels
            };
            for (int j = 0; j < b[i].n; j++)
                for (int ch = 0; ch < 3; ch++)
                    for (int y = 0; y < IMG; y++)
                        for (int x = 0; x < IMG; x++, values++)
                            px &= trn_batch_pixel(&bt, b[i].images, j, ch, y, x) ==
                                  u[i].images[(((size_t)j * 3 + ch) * IMG + y) * IMG + x];
        }
        ok(eq,
           "bf16 space-to-depth %s (%s): every batch is the float32 batch's cast_f32_lowp_s2d bit "
           "for bit, same targets and info, over 2 epochs (%zu bytes) (%s)",
           name, lay ? "3 workers, a 3-thread context" : "2 workers", bytes, err);
        ok(px, "%s: trn_batch_pixel gives back all %zu uint8 values of the uint8 run", name,
           values);
        unsave(b, RUN);
    }
    int px = 1;
    for (int i = 0; i < 2; i++) {
        const struct trn_batch bf = {
            .n = f[i].n, .height = IMG, .width = IMG, .pixels = TRN_PIXELS_F32
        };
        const struct trn_batch bu = {
            .n = u[i].n, .height = IMG, .width = IMG, .pixels = TRN_PIXELS_U8
        };
        for (int j = 0; j < f[i].n; j++)
            for (int y = 0; y < IMG; y += 7)
                for (int x = 0; x < IMG; x += 3)
                    px &= trn_batch_pixel(&bf, f[i].images, j, 2, y, x) ==
                              trn_batch_pixel(&bu, u[i].images, j, 2, y, x) &&
                          trn_batch_pixel(&bu, u[i].images, j, 2, y, x) ==
                              u[i].images[(((size_t)j * 3 + 2) * IMG + y) * IMG + x];
    }
    ok(px, "trn_batch_pixel on float32 and uint8 batches: the uint8 values");
    unsave(f, RUN);
    unsave(u, RUN);
}

/*
 * Records packed at long side IMG + 1 pass the loader's packing check for IMG, but their
 * letterbox (no-mosaic samples) must resize, which has no GPU plan: those samples are built on
 * the host. With mosaic 0.5 a batch mixes planned and host-built samples.
 */
static void test_host_built(struct kern_ctx *k)
{
    struct saved a[EPOCH_STEPS], b[EPOCH_STEPS];
    struct trn_loader_opts o;
    struct logbuf lb;
    char err[512] = "";
    size_t bytes;
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    memset(&lb, 0, sizeof lb);
    for (int px = 0; px < 2; px++) {
        train_opts(&o, 2);
        o.hyp.mosaic = 0.5;
        o.pixels = px ? TRN_PIXELS_F32 : TRN_PIXELS_U8;
        int rc = collect("train-129.ffr", &o, a, EPOCH_STEPS, NULL, NULL, err, sizeof err);
        ok(rc == 0, "records at long side %d, mosaic 0.5: plain loader (%s)", IMG + 1, err);
        o.pix_ctx = k;
        o.pix_ops = kern_ops_ref();
        rc = collect("train-129.ffr", &o, b, EPOCH_STEPS, &lb, NULL, err, sizeof err);
        const int eq = rc == 0 && all_same(a, b, EPOCH_STEPS, 1, &bytes);
        ok(eq, "%s: host-built letterbox samples and planned mosaics, the same bytes (%s)",
           px ? "float" : "uint8", err);
        unsave(a, EPOCH_STEPS);
        unsave(b, EPOCH_STEPS);
    }
    ok(count(lb.text, "augmented on the CPU") == 2 && strstr(lb.text, "needs a resize"),
       "the fallback is reported once per loader: %.*s", (int)strcspn(lb.text, "\n"), lb.text);

    /* Without mosaic every sample is a letterbox: all host-built, all identical. */
    train_opts(&o, 1);
    o.hyp.mosaic = 0;
    o.hyp.mixup = 0;
    int rc = collect("train-129.ffr", &o, a, 2, NULL, NULL, err, sizeof err);
    o.pix_ctx = k;
    o.pix_ops = kern_ops_ref();
    if (rc == 0) rc = collect("train-129.ffr", &o, b, 2, NULL, NULL, err, sizeof err);
    ok(rc == 0 && all_same(a, b, 2, 1, &bytes), "mosaic 0: every sample host-built, same (%s)",
       err);
    unsave(a, 2);
    unsave(b, 2);

    /* Records packed at IMG: letterboxes are pastes and have plans; the only fallback is a
     * record whose int(w0 * r) fell a pixel short of IMG (ultralytics v7.0's sizing), then
     * resized on the host, as the line says. */
    memset(&lb, 0, sizeof lb);
    rc = collect("train.ffr", &o, b, 2, &lb, NULL, err, sizeof err);
    train_opts(&o, 1);
    o.hyp.mosaic = 0;
    o.hyp.mixup = 0;
    if (rc == 0) rc = collect("train.ffr", &o, a, 2, NULL, NULL, err, sizeof err);
    ok(rc == 0 && all_same(a, b, 2, 1, &bytes) &&
           (lb.text[0] == '\0' || strstr(lb.text, "needs a resize")),
       "records at %d, mosaic 0: planned letterboxes, same bytes, at most the short-side "
       "fallback logged (%s)",
       IMG, err);
    unsave(a, 2);
    unsave(b, 2);
}

/* copy_paste (polygon records): pasting canvases are built on the host, planned ones on the
 * context, and the batches equal the plain loader's; the copies add rows. */
static void test_copy_paste(struct kern_ctx *k)
{
    struct saved a[EPOCH_STEPS], b[EPOCH_STEPS], c[EPOCH_STEPS];
    struct trn_loader_opts o;
    struct logbuf lb;
    char err[512] = "";
    size_t bytes;
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    memset(c, 0, sizeof c);
    memset(&lb, 0, sizeof lb);
    train_opts(&o, 2);
    o.hyp.copy_paste = 0.5;
    int rc = collect("train-seg.ffr", &o, a, EPOCH_STEPS, NULL, NULL, err, sizeof err);
    o.pix_ctx = k;
    o.pix_ops = kern_ops_ref();
    if (rc == 0) rc = collect("train-seg.ffr", &o, b, EPOCH_STEPS, &lb, NULL, err, sizeof err);
    ok(rc == 0 && all_same(a, b, EPOCH_STEPS, 1, &bytes) &&
           count(lb.text, "copy_paste pasted on its mosaic canvas") == 1,
       "copy_paste 0.5: host-built pasting samples and planned ones, the same bytes, said once "
       "(%s)",
       err);
    train_opts(&o, 2);
    if (rc == 0) rc = collect("train-seg.ffr", &o, c, EPOCH_STEPS, NULL, NULL, err, sizeof err);
    size_t with = 0, without = 0;
    for (int i = 0; rc == 0 && i < EPOCH_STEPS; i++)
        with += a[i].nt, without += c[i].nt;
    ok(rc == 0 && with > without, "the mirrored copies add target rows: %zu, %zu without", with,
       without);
    unsave(a, EPOCH_STEPS);
    unsave(b, EPOCH_STEPS);
    unsave(c, EPOCH_STEPS);
}

/* Validation keeps the host path: pix_ctx is ignored, plain and rect. */
static void test_val(struct kern_ctx *k)
{
    struct saved a[3], b[3];
    char err[512] = "";
    size_t bytes;
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    for (int rect = 0; rect < 2; rect++) {
        struct trn_loader_opts o;
        struct run_info ri;
        trn_loader_opts_default(&o);
        o.mode = TRN_LOADER_VAL;
        o.img_size = IMG;
        o.batch_size = 4;
        o.workers = 2;
        o.rect = rect;
        o.io.io.direct = FFIO_DIRECT_OFF;
        int rc = collect("val.ffr", &o, a, 3, NULL, NULL, err, sizeof err);
        o.pix_ctx = k;
        o.pix_ops = kern_ops_ref();
        if (rc == 0) rc = collect("val.ffr", &o, b, 3, NULL, &ri, err, sizeof err);
        ok(rc == 0 && all_same(a, b, 3, 0, &bytes) && b[0].images && ri.info.device_bytes == 0,
           "validation%s with pix_ctx: host images as without, no device memory (%s)",
           rect ? " (rect)" : "", err);
        unsave(a, 3);
        unsave(b, 3);
    }
}

static void test_bad_records(struct kern_ctx *k)
{
    const uint64_t bad = 13;
    struct saved a[EPOCH_STEPS], b[EPOCH_STEPS];
    struct trn_loader_opts o;
    struct logbuf lb;
    char err[512] = "", want[64];
    size_t bytes;
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    memset(&lb, 0, sizeof lb);
    snprintf(want, sizeof want, "bad record %llu: ", (unsigned long long)bad);
    if (!ok(write_checksum_bad(bad) == 0, "a copy with record %llu's checksum broken",
            (unsigned long long)bad))
        return;

    train_opts(&o, 1);
    int rc = collect("checksum.ffr", &o, a, EPOCH_STEPS, NULL, NULL, err, sizeof err);
    train_opts(&o, 3);
    o.pix_ctx = k;
    o.pix_ops = kern_ops_ref();
    if (rc == 0) rc = collect("checksum.ffr", &o, b, EPOCH_STEPS, &lb, NULL, err, sizeof err);
    int never = rc == 0;
    for (int i = 0; never && i < EPOCH_STEPS; i++)
        for (int j = 0; j < b[i].n; j++)
            never &= b[i].info[j].index != bad;
    ok(never && all_same(a, b, EPOCH_STEPS, 1, &bytes),
       "skip: a full epoch without record %llu, the same bytes as the host path (%s)",
       (unsigned long long)bad, err);
    ok(count(lb.text, "bad record") == 1 && strstr(lb.text, want) && strstr(lb.text, "checksum"),
       "reported once by number: %.*s", (int)strcspn(lb.text, "\n"), lb.text);
    unsave(a, EPOCH_STEPS);
    unsave(b, EPOCH_STEPS);

    memset(&lb, 0, sizeof lb);
    train_opts(&o, 2);
    o.bad_records = TRN_BAD_RECORD_FAIL;
    o.pix_ctx = k;
    o.pix_ops = kern_ops_ref();
    struct run_info ri;
    rc = collect("checksum.ffr", &o, b, EPOCH_STEPS, &lb, &ri, err, sizeof err);
    ok(rc < 0 && ri.rc_at >= 0 && strstr(err, want) && strstr(lb.text, "stopping"),
       "fail: stops at batch %d with %d (%s): %s", ri.rc_at, rc, trn_strerror(rc), err);
    unsave(b, ri.rc_at > 0 ? ri.rc_at : 0);
}

static void test_errors(struct kern_ctx *k)
{
    struct ffr_reader *r = open_ds("train.ffr");
    struct trn_loader_opts o;
    struct trn_loader *l = NULL;
    char err[256] = "";
    train_opts(&o, 1);
    o.pix_ctx = k;
    int rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l && strstr(err, "pix_ops"), "pix_ctx without pix_ops: -EINVAL (%s)", err);
    struct kern_ops other = *kern_ops_ref();
    other.backend = KERN_BACKEND_CUDA;
    o.pix_ops = &other;
    rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l && strstr(err, "another backend"),
       "pix_ops of another backend than pix_ctx: -EINVAL (%s)", err);
    other = *kern_ops_ref();
    other.aug_batch = NULL;
    rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l, "pix_ops without aug_batch: -EINVAL (%s)", err);
    o.pix_ops = kern_ops_ref();
    o.pixels = TRN_PIXELS_BF16_S2D_NHWC;
    o.pix_ctx = NULL;
    rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l && strstr(err, "space-to-depth"),
       "space-to-depth pixels without pix_ctx: -EINVAL (%s)", err);
    o.pix_ctx = k;
    o.rect = true;
    rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l, "space-to-depth pixels with rect: -EINVAL");
    o.rect = false;
    o.img_size = IMG + 1;
    rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l, "space-to-depth pixels at an odd size: -EINVAL");
    o.img_size = IMG;
    o.mode = TRN_LOADER_VAL;
    rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l, "space-to-depth pixels for validation: -EINVAL");
    o.mode = TRN_LOADER_TRAIN;
    o.pixels = (enum trn_pixel_type)4;
    rc = r ? trn_loader_create(r, &o, &l, err, sizeof err) : -ENOENT;
    ok(rc == -EINVAL && !l && strstr(err, "pixel type"), "pixel type 4: -EINVAL (%s)", err);
    ffr_reader_close(r);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        printf("usage: test_loader_gpu_aug YOLO_SYNTH YOLO_PACK\n");
        return 99;
    }
    const char *synth = argv[1], *pack = argv[2];
    snprintf(dir, sizeof dir, "/tmp/test_loader_gpu_aug_XXXXXX");
    if (!mkdtemp(dir)) {
        printf("# mkdtemp failed\n");
        return 99;
    }
    const int made =
        run("%s %s/synth --split train2017=%d --split val2017=%d --seed 5 --min-side 48 "
            "--max-side 200 --format yolo --classes 4 --max-objects 5",
            synth, dir, N_TRAIN, N_VAL) == 0 &&
        run("%s %s/synth -o %s/train.ffr --size %d --split train2017 -q -j 1", pack, dir, dir,
            IMG) == 0 &&
        run("%s %s/synth -o %s/train-sub.ffr --size %d --split train2017 -q -j 1 --filter sub",
            pack, dir, dir, IMG) == 0 &&
        run("%s %s/synth -o %s/train-129.ffr --size %d --split train2017 -q -j 1", pack, dir, dir,
            IMG + 1) == 0 &&
        run("%s %s/synth -o %s/val.ffr --size %d --split val2017 -q -j 1", pack, dir, dir, IMG) ==
            0 &&
        run("%s %s/synthc --split train2017=%d --seed 6 --min-side 48 --max-side 200 --format "
            "coco --classes 4 --max-objects 5",
            synth, dir, N_TRAIN) == 0 &&
        run("%s %s/synthc -o %s/train-seg.ffr --size %d --split train2017 -q -j 1", pack, dir, dir,
            IMG) == 0;
    if (!ok(made, "yolo-synth and yolo-pack made the datasets in %s", dir)) {
        printf("# see %s/stderr.txt\n", dir);
        return tap_done();
    }
    struct kern_ctx *k = cpu_ctx(0), *k3 = cpu_ctx(3);
    if (!ok(k && k3, "CPU kern contexts (1 and 3 threads)")) return tap_done();
    test_train(k, k3);
    test_s2d(k, k3);
    test_host_built(k);
    test_copy_paste(k);
    test_val(k);
    test_bad_records(k);
    test_errors(k);
    kern_ctx_destroy(k);
    kern_ctx_destroy(k3);
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
