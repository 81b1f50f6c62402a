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
#include "resident_testutil.h"

static const char *train, *synth, *pack, *models;

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
    if (!ok(make_data(synth, pack, "r", 22, 64), "dataset made")) return;
    is_int(train_run(false, "--epochs 2 --name cpu"), 0, "CPU path: 2 epochs");
    ok(!file_has("stdout.txt", "resident step"), "the CPU path does not run the resident step");
    is_int(train_run(true, "--epochs 2 --name dev"), 0, "device path: 2 epochs");
    ok(file_has("stdout.txt", "resident step"), "the device path logs the resident step");
    ok(file_has("stdout.txt", "GPU augmentation"),
       "the device path builds its batches with the GPU augmentation ops");
    same_run("cpu", "dev", "straight");
    is_int(train_run(true, "--epochs 2 --name hostaug --host-aug"), 0,
           "device path, --host-aug: 2 epochs");
    ok(!file_has("stdout.txt", "GPU augmentation"), "--host-aug: the host augmentation runs");
    same_run("cpu", "hostaug", "--host-aug");

    is_int(train_run(true, "--epochs 2 --name split --stop-after-steps 5"), 0,
           "device path stopped after 5 batches (gradients pending)");
    int rc = run("%s --resume %s/runs/split --device-path", train, dir);
    is_int(rc, 0, "device path resumed to the end");
    if (rc) show_stderr();
    same_run("cpu", "split", "stop + resume");

    /* Adam has no device step: the host step runs, and says so */
    is_int(train_run(true, "--epochs 1 --name adam --optimizer Adam"), 0, "device path, Adam");
    ok(file_has("stdout.txt", "no device step"), "Adam keeps the host step and logs it");
    ok(!file_has("stdout.txt", "GPU augmentation"), "Adam's host step takes host batches");
}

static void test_dist(void)
{
    if (!ok(make_data(synth, pack, "r", 16, 64), "dataset made")) return;
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
