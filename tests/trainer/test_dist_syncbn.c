/*
 * yolo-train --sync-bn (SyncBatchNorm, trainer/train/train.h RANKS, trainer/model/net.h BATCH NORM)
 * on a small yolo-synth dataset of DISTINCT images, no augmentation, tiny_net at 64 pixels, 8 SGD
 * steps (one epoch of 32 images at global batch 4):
 *   - 2 ranks x batch 2 with --sync-bn (--nproc-per-node 2, TCP on loopback) give the weights,
 *     the EMA and the BN running statistics of 1 rank x batch 4;
 *   - the same 2 ranks without --sync-bn differ (per-rank BatchNorm statistics), so the first
 *     check can fail;
 *   - the setting is kept in the checkpoint: a 2-rank --sync-bn run stopped after 3 steps and
 *     resumed WITHOUT the flag ends with the bytes of the uninterrupted --sync-bn run.
 * Mode "net" checks the net's hook alone (trainer/model/net.h, trn_net_opts.bn_allreduce), in one
 * process: two threads, each with its own copy of tiny_net and a net at batch 2 (on the CPU data
 * path and on the GPU net's data path, trn_net_opts.device_path), sum their BN buffers through a
 * barrier; their Detect outputs, summed parameter gradients and BN running statistics match one
 * net at batch 4 on the same 4 images, and without the hook they do not. Also with the two nets
 * on the CPU oneDNN executor (trn_cpu_engine ONEDNN, dnn_net.yaml, against the reference ops at
 * batch 4, within the executor's parity tolerances; skipped without oneDNN), and with one on
 * oneDNN and the other on the reference ops: the two call the hook in the same sequence.
 * usage: test_dist_syncbn YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR
 *        test_dist_syncbn net MODELS_TEST_DIR
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ffr.h"
#include "model.h"
#include "net.h"
#include "run_testutil.h"
#include "sampler.h"
#include "tap.h"
#include "dist_testutil.h"

static const char *train, *synth, *pack, *models;

/*
 * n distinct yolo-synth images of 64 x 64 pixels, all given the label file of the first, packed
 * into DIR/u.ffr. The labels are shared because YOLOv5's box and class losses are means over
 * the targets a rank matched: x bs_local and summed over ranks they equal the global batch's
 * only when every rank matched as many targets (the same holds for PyTorch's DDP). Same size,
 * same boxes: the same matches per image. The pixels, and so BatchNorm's statistics, differ.
 */
static int make_data(int n)
{
    if (run("%s %s/synth --split train2017=%d --seed 5 --min-side 64 --max-side 64 "
            "--format yolo --classes 3 --max-objects 3",
            synth, dir, n))
        return 0;
    for (int i = 2; i <= n; i++)
        if (run("cp %s/synth/labels/train2017/%012d.txt %s/synth/labels/train2017/%012d.txt", dir,
                1, dir, i))
            return 0;
    return run("%s %s/synth/synth.yaml -o %s/u.ffr --size 64 -q -j 1", pack, dir, dir) == 0;
}

/* Largest |a - b| / (1e-3 + |b|) over a record of two runs; -1 when unreadable or empty. */
/* The same bytes in the weights, buffers, counters, EMA, optimizer state and gradients. */
static bool same_state(const char *run_a, const char *run_b)
{
    static const char *const recs[] = { "model.param", "model.buffer", "ema.param",
                                        "ema.buffer",  "optim.state0", "grad" };
    bool same = true;
    for (size_t k = 0; k < sizeof recs / sizeof recs[0]; k++) {
        size_t na = 0, nb = 0;
        float *a = ckpt_floats(run_a, recs[k], &na), *b = ckpt_floats(run_b, recs[k], &nb);
        same = same && a && b && na == nb && na > 0 && !memcmp(a, b, na * sizeof(float));
        free(a);
        free(b);
    }
    return same;
}

/* The checkpoint metadata of a run contains `line` (a whole "key: value" line). */
static bool meta_has(const char *name, const char *line)
{
    char path[512];
    snprintf(path, sizeof path, "%s/runs/%s/weights/last.ckpt", dir, name);
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return false;
    size_t ml = 0;
    const char *m = ffr_reader_metadata(r, &ml);
    char *t = strndup(m, ml);
    char want[128];
    snprintf(want, sizeof want, "\n%s\n", line);
    const bool has = t && strstr(t, want);
    free(t);
    ffr_reader_close(r);
    return has;
}

#define COMMON                                                                                  \
    "--img 64 --batch-size 4 --cfg %s/tiny_net.yaml --hyp %s --workers 1 --threads 2 --seed 7 " \
    "--project %s/runs --exist-ok --records %s/u.ffr --epochs 1"

/* 8 SGD steps of the same computation with the batch statistics summed in another grouping and
 * the convolutions in other batch splits: float rounding, amplified by training (see
 * docs/distributed.md for the measured value) */
#define EQUIV_TOL 5e-4

/* ---------------------------------------------------------------------------------------- */
/* net: the hook in one process                                                             */

#define NET_BS   4 /* the reference batch; each of the 2 "ranks" holds half */
#define NET_IMG  64
#define SUMS_MAX 1024

/* An all-reduce (sum) of two threads' buffers: what trn_dist does between processes. */
struct pair_sum {
    pthread_barrier_t bar;
    double *buf[2];
    double tmp[SUMS_MAX];
    size_t n[2];
    int calls[2];
};

struct rank_ctx {
    struct pair_sum *S;
    int r;
};

static int pair_allreduce(void *ctx, double *buf, size_t n)
{
    struct rank_ctx *const c = ctx;
    struct pair_sum *const S = c->S;
    if (n > SUMS_MAX) return -EINVAL;
    S->buf[c->r] = buf;
    S->n[c->r] = n;
    S->calls[c->r]++;
    pthread_barrier_wait(&S->bar);
    const int rc = S->n[0] == S->n[1] ? 0 : -EPROTO;
    if (c->r == 0)
        for (size_t i = 0; i < n && !rc; i++)
            S->tmp[i] = S->buf[0][i] + S->buf[1][i];
    pthread_barrier_wait(&S->bar);
    memcpy(buf, S->tmp, n * sizeof(double));
    pthread_barrier_wait(&S->bar); /* tmp, buf[], n[] are not reused before both are done */
    return rc;
}

struct rank_job {
    struct trn_net *net;
    const float *images;  /* this rank's 2 images */
    const float *dout[4]; /* this rank's slices of the output gradients */
    const float *out[4];  /* out: the forward's outputs */
    int rc;
};

static void *rank_main(void *arg)
{
    struct rank_job *const j = arg;
    j->rc = trn_net_forward(j->net, j->images, true, j->out);
    if (!j->rc) j->rc = trn_net_backward(j->net, j->dout);
    return NULL;
}

static struct trn_model *tiny_named(const char *name)
{
    struct trn_model *m = NULL;
    char err[256];
    char path[512];
    snprintf(path, sizeof path, "%s/%s", models, name);
    if (trn_model_load(path, NULL, &m, err, sizeof err)) {
        printf("Bail out! %s\n", err);
        exit(99);
    }
    trn_model_init(m, 7);
    return m;
}

/* max |a - b| / max |b| over n values (a scale-free float comparison of whole tensors). */
static double rel_max(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d;
        if (fabs((double)b[i]) > s) s = fabs((double)b[i]);
    }
    return s > 0 ? e / s : e;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0));
}

/* 2 threads x batch 2 (hook on or off; device_path; onednn: 0 neither, 1 both, 2 rank 0 on
 * oneDNN) against 1 net x batch 4. */
static void net_case(bool sync, bool device_path, int onednn)
{
    const char *yaml = onednn ? "dnn_net.yaml" : "tiny_net.yaml";
    struct trn_model *m0 = tiny_named(yaml), *mr[2] = { tiny_named(yaml), tiny_named(yaml) };
    const struct trn_model_info *I = trn_model_info(m0);
    const size_t img = (size_t)3 * NET_IMG * NET_IMG;
    float *const images = malloc(NET_BS * img * sizeof(float));
    for (size_t i = 0; i < NET_BS * img; i++)
        images[i] = urand();
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    struct trn_net *ref = NULL, *net[2] = { NULL, NULL };
    char err[256];
    int rc = trn_net_create(m0, NET_BS, NET_IMG, NET_IMG, &o, &ref, err, sizeof err);
    struct pair_sum S;
    memset(&S, 0, sizeof S);
    pthread_barrier_init(&S.bar, NULL, 2);
    struct rank_ctx rctx[2] = { { &S, 0 }, { &S, 1 } };
    for (int r = 0; r < 2 && !rc; r++) {
        struct trn_net_opts ro = o;
        ro.device_path = device_path;
        if (onednn == 1 || (onednn == 2 && r == 0)) ro.cpu_engine = TRN_CPU_ENGINE_ONEDNN;
        if (sync) {
            ro.bn_allreduce = pair_allreduce;
            ro.bn_allreduce_ctx = &rctx[r];
        }
        rc = trn_net_create(mr[r], NET_BS / 2, NET_IMG, NET_IMG, &ro, &net[r], err, sizeof err);
    }
    if (rc == -ENOTSUP && onednn) {
        tap_diag("the oneDNN case is left out: no oneDNN executor for dnn_net.yaml here (%s)", err);
        trn_net_destroy(ref);
        trn_net_destroy(net[0]);
        trn_model_destroy(m0), trn_model_destroy(mr[0]), trn_model_destroy(mr[1]);
        pthread_barrier_destroy(&S.bar);
        return;
    }
    if (rc) {
        printf("Bail out! trn_net_create: %s\n", err);
        exit(99);
    }
    const int nl = trn_net_levels(ref);
    float *dout[4];
    long numel[4];
    struct rank_job job[2];
    memset(job, 0, sizeof job);
    for (int l = 0; l < nl; l++) {
        numel[l] = trn_net_output_shape(ref, l, NULL);
        dout[l] = malloc((size_t)numel[l] * sizeof(float));
        for (long i = 0; i < numel[l]; i++)
            dout[l][i] = 0.02f * (urand() - 0.5f);
        for (int r = 0; r < 2; r++) /* outputs are image-major: rank r's images are a slice */
            job[r].dout[l] = dout[l] + (size_t)r * (size_t)numel[l] / 2;
    }
    const float *rout[4];
    trn_net_zero_grad(ref);
    rc = trn_net_forward(ref, images, true, rout);
    if (!rc) rc = trn_net_backward(ref, (const float *const *)dout);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        trn_net_zero_grad(net[r]);
        job[r].net = net[r];
        job[r].images = images + (size_t)r * (NET_BS / 2) * img;
        pthread_create(&th[r], NULL, rank_main, &job[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    const char *what = onednn == 2   ? "oneDNN and reference ranks"
                       : onednn      ? "oneDNN"
                       : device_path ? "device path"
                                     : "CPU path";
    ok(rc == 0 && job[0].rc == 0 && job[1].rc == 0, "%s%s: forward and backward run", what,
       sync ? ", hook" : ", no hook");
    double eo = 0;
    for (int l = 0; l < nl; l++)
        for (int r = 0; r < 2; r++) {
            const double e = rel_max(job[r].out[l], rout[l] + (size_t)r * (size_t)numel[l] / 2,
                                     (size_t)numel[l] / 2);
            if (!(e <= eo)) eo = e;
        }
    const size_t np = I->arena_len[TRN_ARENA_PARAM], nb = I->arena_len[TRN_ARENA_BUFFER];
    float *const gsum = malloc(np * sizeof(float));
    const float *g0 = trn_net_grad(net[0]), *g1 = trn_net_grad(net[1]);
    for (size_t i = 0; i < np; i++)
        gsum[i] = g0[i] + g1[i];
    const double eg = rel_max(gsum, trn_net_grad(ref), np);
    const float *b0 = trn_model_arena(m0, TRN_ARENA_BUFFER);
    const double eb = fmax(rel_max(trn_model_arena(mr[0], TRN_ARENA_BUFFER), b0, nb),
                           rel_max(trn_model_arena(mr[1], TRN_ARENA_BUFFER), b0, nb));
    tap_diag("%s%s vs batch 4: outputs %.3g, summed gradients %.3g, running stats %.3g (of the "
             "largest magnitude)",
             what, sync ? " with the hook" : " without the hook", eo, eg, eb);
    if (sync) {
        /* oneDNN: its parity tolerances against the reference ops (test_net_onednn.c) */
        const double to = onednn ? 2e-4 : 1e-5, tg = onednn ? 5e-4 : 1e-4;
        ok(eo < to && eg < tg && eb < 1e-5,
           "%s: 2 x batch 2 with the hook == batch 4: outputs, summed gradients, running stats",
           what);
        ok(S.calls[0] == S.calls[1] && S.calls[0] == 2 * I->n_convs - 2 * I->nl,
           "%s: the hook ran once per BN layer in forward and backward on each rank (%d)", what,
           S.calls[0]);
    } else {
        /* running stats move by momentum 0.03 x the batch statistics from (0, 1) */
        ok(eo > 1e-2 && eg > 1e-2 && eb > 1e-4,
           "%s: without the hook the per-net statistics differ", what);
    }
    free(gsum);
    for (int l = 0; l < nl; l++)
        free(dout[l]);
    free(images);
    trn_net_destroy(ref);
    for (int r = 0; r < 2; r++) {
        trn_net_destroy(net[r]);
        trn_model_destroy(mr[r]);
    }
    trn_model_destroy(m0);
    pthread_barrier_destroy(&S.bar);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "net")) {
        models = argv[2];
        net_case(true, false, 0);
        net_case(true, true, 0);
        net_case(false, false, 0);
        net_case(true, false, 1);
        net_case(true, false, 2);
        return tap_done();
    }
    if (argc < 5) {
        printf("usage: test_dist_syncbn YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR\n");
        return 99;
    }
    static char abs_train[PATH_MAX];
    if (!realpath(argv[1], abs_train)) return 99;
    train = abs_train;
    synth = argv[2];
    pack = argv[3];
    models = argv[4];
    snprintf(dir, sizeof dir, "/tmp/test_dist_syncbn_XXXXXX");
    if (!mkdtemp(dir)) return 99;

    const char *hyp = write_hyp();
    if (!ok(hyp && make_data(32), "dataset made: 32 distinct images (one label set)"))
        return tap_done();
    int rc = run("%s " COMMON " --name one", train, models, hyp, dir, dir);
    is_int(rc, 0, "1 rank x batch 4: one epoch, 8 steps");
    if (rc) show("stderr.txt");
    rc =
        run("%s " COMMON " --name sync --nproc-per-node 2 --sync-bn", train, models, hyp, dir, dir);
    is_int(rc, 0, "2 ranks x batch 2 with --sync-bn (--nproc-per-node 2, TCP)");
    if (rc) show("stderr.txt");
    char *out = file_in("stdout.txt");
    ok(out && strstr(out, "DDP: 2 ranks over tcp, 2 images per rank per batch, gradients summed, "
                          "SyncBatchNorm"),
       "rank 0 logs the DDP setup with SyncBatchNorm");
    free(out);
    ok(meta_has("sync", "sync_bn: true") && meta_has("one", "sync_bn: false"),
       "the checkpoints record sync_bn");
    rc = run("%s " COMMON " --name nosync --nproc-per-node 2", train, models, hyp, dir, dir);
    is_int(rc, 0, "2 ranks x batch 2 without --sync-bn");

    const double dm = rel_diff("sync", "one", "model.param", 100);
    const double de = rel_diff("sync", "one", "ema.param", 100);
    const double db = rel_diff("sync", "one", "model.buffer", 100);
    tap_diag("--sync-bn 2x2 vs 1x4, largest relative difference: weights %.3g, EMA %.3g, BN "
             "running stats %.3g",
             dm, de, db);
    ok(dm >= 0 && dm < EQUIV_TOL && de >= 0 && de < EQUIV_TOL,
       "--sync-bn: weights and EMA agree with 1 rank to %g (got %.3g, %.3g)", EQUIV_TOL, dm, de);
    ok(db >= 0 && db < EQUIV_TOL,
       "--sync-bn: BN running mean and (unbiased, global-count) variance agree (got %.3g)", db);
    const double du = rel_diff("nosync", "one", "model.param", 100);
    const double dub = rel_diff("nosync", "one", "model.buffer", 100);
    tap_diag("without --sync-bn: weights %.3g, BN running stats %.3g", du, dub);
    ok(du > 10 * EQUIV_TOL && dub > 10 * EQUIV_TOL,
       "control: without --sync-bn the same 2 ranks differ (weights %.3g, running stats %.3g, "
       "both > %g): per-rank statistics",
       du, dub, 10 * EQUIV_TOL);

    /* stopped after 3 steps, resumed without the flag: the checkpoint's sync_bn carries on */
    rc = run("%s " COMMON " --name resumed --nproc-per-node 2 --sync-bn --stop-after-steps 3",
             train, models, hyp, dir, dir);
    is_int(rc, 0, "--sync-bn run stopped after 3 steps");
    rc = run("%s --resume %s/runs/resumed --threads 2 --nproc-per-node 2", train, dir);
    is_int(rc, 0, "--resume on 2 ranks, no --sync-bn on the command line");
    if (rc) show("stderr.txt");
    ok(same_state("resumed", "sync"),
       "stopped + resumed == the uninterrupted --sync-bn run, byte for byte");

    const int done = tap_done();
    if (done == 0) run("rm -rf %s", dir);
    return done;
}
