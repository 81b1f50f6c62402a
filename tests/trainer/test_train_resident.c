/*
 * The resident training step (train.c, net.h RESIDENT): yolo-train on the GPU nets' data path run
 * on the CPU ops (yolo-train --device-path: device arenas, kern_mem copies, the device loss,
 * the device SGD + EMA, no per-step parameter upload or gradient download) must give the plain
 * CPU path's run byte for byte: the kern CPU references are the same code. Modes:
 *   single  one rank: straight runs (2 epochs, a short last batch, accumulation) compared, then
 *           the device path stopped mid-epoch with gradients pending and resumed
 *   dist    2 ranks over TCP (--nproc-per-node 2): bucketed all-reduce overlapped with backward
 *           and after backward (--no-grad-overlap), both against the CPU path's 2-rank run
 * Compared: model, BN buffers, counters, EMA, momentum, pending gradients (checkpoint records),
 * the loss sums, counters and results.csv.
 * usage: test_train_resident YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR MODE
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffr.h"
#include "run_testutil.h"
#include "tap.h"

static const char *train, *synth, *pack, *models;

static void show_stderr(void)
{
    char p[300];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    char *e = slurp(p, NULL);
    if (e && e[0]) tap_diag("stderr: %s", e);
    free(e);
}

static bool file_has(const char *name, const char *needle)
{
    char p[300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *t = slurp(p, NULL);
    const bool has = t && strstr(t, needle);
    free(t);
    return has;
}

static int make_data(const char *name, int n, int img)
{
    return run("%s %s/synth_%s --split train2017=%d --seed 11 --min-side %d --max-side %d "
               "--format yolo --classes 3 --max-objects 4",
               synth, dir, name, n, img / 2, img * 2) == 0 &&
           run("%s %s/synth_%s/synth.yaml -o %s/%s.ffr --size %d -q -j 1", pack, dir, name, dir,
               name, img) == 0;
}

/* Records 0 .. 7 of a checkpoint (model, buffers, counts, EMA x2, optimizer x2, gradients). */
static char *ckpt_state(const char *path, size_t *len)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return NULL;
    size_t total = 0;
    const uint64_t n = ffr_reader_count(r) < 8 ? ffr_reader_count(r) : 8;
    for (uint64_t i = 0; i < n; i++) {
        struct ffr_record_info ri;
        ffr_reader_info(r, i, &ri);
        total += ri.raw_len;
    }
    char *buf = malloc(total + 1);
    size_t at = 0;
    for (uint64_t i = 0; buf && i < n; i++) {
        struct ffr_record_info ri;
        ffr_reader_info(r, i, &ri);
        if (ffr_reader_read(r, NULL, i, buf + at, ri.raw_len) != (int64_t)ri.raw_len) {
            free(buf);
            buf = NULL;
            break;
        }
        at += ri.raw_len;
    }
    ffr_reader_close(r);
    *len = total;
    return buf;
}

/* The checkpoint's metadata lines of the counters and loss sums, concatenated. */
static char *ckpt_counters(const char *path)
{
    static const char *const keys[] = { "epoch",        "step",          "ema_updates",
                                        "optim_steps",  "last_opt_step", "loss_sum_box",
                                        "loss_sum_obj", "loss_sum_cls",  "loss_batches",
                                        "best_fitness" };
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return NULL;
    size_t ml = 0;
    const char *m = ffr_reader_metadata(r, &ml);
    char *t = strndup(m, ml), *out = calloc(1, 4096);
    for (size_t k = 0; t && out && k < sizeof keys / sizeof keys[0]; k++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\n%s: ", keys[k]);
        const char *at = strstr(t, pat);
        const char *end = at ? strchr(at + 1, '\n') : NULL;
        if (at && end && strlen(out) + (size_t)(end - at) < 4000)
            strncat(out, at, (size_t)(end - at));
        else
            strcat(out, "\n(missing)");
    }
    free(t);
    ffr_reader_close(r);
    return out;
}

/* Two runs' last.ckpt state, counters and results.csv are the same bytes. */
static void same_run(const char *a, const char *b, const char *what)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/runs/%s/weights/last.ckpt", dir, a);
    snprintf(pb, sizeof pb, "%s/runs/%s/weights/last.ckpt", dir, b);
    size_t la = 0, lb = 0;
    char *A = ckpt_state(pa, &la), *B = ckpt_state(pb, &lb);
    ok(A && B && la == lb && la > 10000 && memcmp(A, B, la) == 0,
       "%s: weights, BN buffers, EMA, momentum and pending gradients identical (%zu bytes)", what,
       la);
    free(A);
    free(B);
    char *ca = ckpt_counters(pa), *cb = ckpt_counters(pb);
    ok(ca && cb && !strstr(ca, "missing") && !strcmp(ca, cb),
       "%s: loss sums and counters identical", what);
    if (ca && cb && strcmp(ca, cb)) tap_diag("%s\n  vs\n%s", ca, cb);
    free(ca);
    free(cb);
    snprintf(pa, sizeof pa, "%s/runs/%s/results.csv", dir, a);
    snprintf(pb, sizeof pb, "%s/runs/%s/results.csv", dir, b);
    ca = slurp(pa, NULL);
    cb = slurp(pb, NULL);
    ok(ca && cb && strlen(ca) > 100 && !strcmp(ca, cb), "%s: results.csv identical", what);
    free(ca);
    free(cb);
}

#define TRAIN_ARGS                                                                               \
    "--records %s/r.ffr --img 64 --batch-size 4 --cfg %s/tiny_net.yaml --workers 1 --threads 2 " \
    "--seed 3 --project %s/runs --exist-ok"

static int train_run(bool device, const char *extra)
{
    const int rc = run("%s " TRAIN_ARGS " %s %s", train, dir, models, dir,
                       device ? "--device-path" : "", extra);
    if (rc) show_stderr();
    return rc;
}

static void test_single(void)
{
    /* 22 images at batch 4: 6 batches per epoch, the last of 2 (the second, sharing net);
     * warmup's accumulate makes optimizer steps every second batch or so */
    if (!ok(make_data("r", 22, 64), "dataset made")) return;
    is_int(train_run(false, "--epochs 2 --name cpu"), 0, "CPU path: 2 epochs");
    ok(!file_has("stdout.txt", "resident step"), "the CPU path does not run the resident step");
    is_int(train_run(true, "--epochs 2 --name dev"), 0, "device path: 2 epochs");
    ok(file_has("stdout.txt", "resident step"), "the device path logs the resident step");
    same_run("cpu", "dev", "straight");

    is_int(train_run(true, "--epochs 2 --name split --stop-after-steps 5"), 0,
           "device path stopped after 5 batches (gradients pending)");
    int rc = run("%s --resume %s/runs/split --device-path", train, dir);
    is_int(rc, 0, "device path resumed to the end");
    if (rc) show_stderr();
    same_run("cpu", "split", "stop + resume");

    /* Adam has no device step: the host step runs, and says so */
    is_int(train_run(true, "--epochs 1 --name adam --optimizer Adam"), 0, "device path, Adam");
    ok(file_has("stdout.txt", "no device step"), "Adam keeps the host step and logs it");
}

static void test_dist(void)
{
    if (!ok(make_data("r", 16, 64), "dataset made")) return;
    is_int(train_run(false, "--epochs 1 --name cpu2 --nproc-per-node 2"), 0,
           "CPU path: 2 ranks over TCP");
    is_int(train_run(true, "--epochs 1 --name dev2 --nproc-per-node 2"), 0,
           "device path: 2 ranks, buckets overlapped with backward");
    ok(file_has("stdout.txt", "resident step"), "rank 0 logs the resident step");
    same_run("cpu2", "dev2", "2 ranks, overlap");
    is_int(train_run(true, "--epochs 1 --name dev2n --nproc-per-node 2 --no-grad-overlap"), 0,
           "device path: 2 ranks, all-reduce after backward");
    same_run("cpu2", "dev2n", "2 ranks, no overlap");
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR MODE\n",
                argv[0]);
        return 2;
    }
    train = argv[1];
    synth = argv[2];
    pack = argv[3];
    models = argv[4];
    snprintf(dir, sizeof dir, "/tmp/test_train_resident_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    if (!strcmp(argv[5], "single"))
        test_single();
    else if (!strcmp(argv[5], "dist"))
        test_dist();
    else
        ok(0, "unknown mode %s", argv[5]);
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
