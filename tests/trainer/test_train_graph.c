/*
 * yolo-train --cuda-graph (train.c train_batch_graph, docs/design.md "One CUDA graph per training
 * step") on the GPU nets' data path run on the CPU ops (--device-path): the full batches' step
 * runs directly once per kind (accumulate only, with the optimizer step), is then captured with
 * kern_graph_capture and replayed, with the batch, the targets, their count and the SGD / EMA
 * scalars uploaded into fixed buffers before each run and num_batches_tracked, the optimizer and
 * EMA counters kept on the host. On the CPU backend a replay calls the recorded function again,
 * so every per-step value must come through those buffers exactly as on a GPU. Compared byte for
 * byte against the plain device path and the CPU path: model, BN buffers (num_batches_tracked
 * included), counters, EMA, momentum, pending gradients, loss sums, results.csv. Modes:
 *   single    2 epochs through warmup (accumulate 1 -> 2: both graphs), the short last batch,
 *             a stop with gradients pending and --resume; the capture-failure fallback
 *             (--cuda-graph-test-fail); Adam (the host step on the device nets, 2 epochs with
 *             the short batch) and the CPU path (graph off, logged); --bench --cuda-graph
 *             against --bench
 *   dist      2 ranks over TCP and 2 ranks with --sync-bn: graph off, logged, same bytes
 * usage: test_train_graph YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR MODE
 */
#include <inttypes.h>
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

static int train_run(const char *extra)
{
    const int rc = run("%s " TRAIN_ARGS " %s", train, dir, models, dir, extra);
    if (rc) show_stderr();
    return rc;
}

/* The counts of the last "cuda graph: R full batches replayed, C captured, D run directly" line
 * of the run's log; false when there is none. */
static bool graph_counts(long *replayed, long *captured, long *direct)
{
    char p[300];
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    char *t = slurp(p, NULL);
    bool found = false;
    for (const char *at = t; at && (at = strstr(at, "cuda graph: ")) != NULL; at++)
        if (sscanf(at, "cuda graph: %ld full batches replayed, %ld captured, %ld run directly",
                   replayed, captured, direct) == 3)
            found = true;
    free(t);
    return found;
}

static void test_single(void)
{
    /* 22 images at batch 4: 6 batches per epoch, the last of 2 (the short batch's own net, run
     * directly); warmup's accumulate goes 1 -> 2 over the 12 batches, so both the
     * accumulate-only and the optimizer graphs are captured and replayed */
    if (!ok(make_data(synth, pack, "r", 22, 64), "dataset made")) return;
    is_int(train_run("--epochs 2 --name cpu"), 0, "CPU path: 2 epochs");
    is_int(train_run("--epochs 2 --name dev --device-path"), 0, "device path: 2 epochs");
    ok(!file_has("stdout.txt", "cuda graph"), "without --cuda-graph no graph is mentioned");
    is_int(train_run("--epochs 2 --name graph --device-path --cuda-graph"), 0,
           "device path with --cuda-graph: 2 epochs");
    ok(file_has("stdout.txt", "cuda graph: captured the optimizer step") &&
           file_has("stdout.txt", "cuda graph: captured the accumulate-only step"),
       "both steps (accumulate only, with the optimizer) were captured");
    long rep = -1, cap = -1, dir_n = -1;
    ok(graph_counts(&rep, &cap, &dir_n) && cap == 2 && rep >= 5 && dir_n >= 2 &&
           rep + cap + dir_n == 10,
       "10 full batches: %ld replayed, %ld captured, %ld direct (the 2 short ones elsewhere)", rep,
       cap, dir_n);
    same_run("dev", "graph", "graph vs device path");
    same_run("cpu", "graph", "graph vs CPU path");

    /* stopped with gradients pending (batch 5 of 6: accumulating), resumed: the graphs are
     * captured again in the new process */
    is_int(train_run("--epochs 2 --name split --device-path --cuda-graph --stop-after-steps 5"), 0,
           "graph stopped after 5 batches");
    int rc = run("%s --resume %s/runs/split --device-path --cuda-graph", train, dir);
    if (rc) show_stderr();
    is_int(rc, 0, "graph resumed to the end");
    ok(file_has("stdout.txt", "cuda graph: captured"), "the resumed run captures its graphs");
    same_run("cpu", "split", "graph stop + resume vs CPU path");

    /* a stop right after the epoch's short batch, resumed without the graph: the same bytes */
    is_int(train_run("--epochs 2 --name split2 --device-path --cuda-graph --stop-after-steps 6"), 0,
           "graph stopped at the epoch end");
    rc = run("%s --resume %s/runs/split2 --device-path", train, dir);
    if (rc) show_stderr();
    is_int(rc, 0, "resumed without --cuda-graph");
    same_run("cpu", "split2", "graph, then the direct step after --resume");

    /* the capture fails: logged, this batch and the rest run directly, nothing changes */
    is_int(train_run("--epochs 2 --name fail --device-path --cuda-graph --cuda-graph-test-fail"), 0,
           "capture failure: trains");
    ok(file_has("stdout.txt", "failed") && file_has("stdout.txt", "runs directly from here"),
       "the failed capture is logged with the fallback");
    ok(graph_counts(&rep, &cap, &dir_n) && rep == 0 && cap == 0,
       "no graph replayed after the failure (%ld replayed, %ld captured)", rep, cap);
    same_run("cpu", "fail", "capture-failure fallback vs CPU path");

    /* Adam has no device step, the CPU path none at all: graph off, said so */
    is_int(train_run("--epochs 2 --name adam_cpu --optimizer Adam"), 0, "CPU path, Adam");
    is_int(train_run("--epochs 2 --name adam --device-path --cuda-graph --optimizer Adam"), 0,
           "device path, Adam, --cuda-graph");
    ok(file_has("stdout.txt", "cuda graph: off") && file_has("stdout.txt", "Adam has no device"),
       "Adam: graph off and logged");
    /* the host step on the device path: the backend's gradient arena follows the host's zeroing
     * after a step and the short batch's sum (train_batch) */
    same_run("adam_cpu", "adam", "Adam fallback (host step on device nets) vs CPU path");
    is_int(train_run("--epochs 1 --name cpug --cuda-graph"), 0, "CPU path with --cuda-graph");
    ok(file_has("stdout.txt", "cuda graph: off"), "CPU path: graph off and logged");
}

/* The "loss" value of the --bench --json line in stdout.txt (malloc'd text), or NULL. */
static char *bench_loss(void)
{
    char p[300];
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    char *t = slurp(p, NULL);
    const char *at = t ? strstr(t, "\"loss\": ") : NULL;
    char *v = at ? strndup(at + 8, strcspn(at + 8, ",}")) : NULL;
    free(t);
    return v;
}

/* yolo-train --bench --cuda-graph: the timed steps are replays and the updates are the direct
 * step's (the same loss after the same number of steps). */
static void test_bench(void)
{
    const char *fmt =
        "%s --bench --json --device cpu --device-path --cfg %s/tiny_net.yaml --img 64 "
        "--batch-size 4 --bench-warmup 2 --bench-steps 3 %s";
    is_int(run(fmt, train, models, ""), 0, "--bench on the device path");
    char *direct = bench_loss();
    ok(file_has("stdout.txt", "\"graph\": false"), "--bench without --cuda-graph: no graph");
    is_int(run(fmt, train, models, "--cuda-graph"), 0, "--bench --cuda-graph on the device path");
    char *graph = bench_loss();
    ok(file_has("stdout.txt", "\"graph\": true"), "--bench --cuda-graph: timed steps replayed");
    ok(direct && graph && strlen(direct) > 3 && !strcmp(direct, graph),
       "the same loss after 5 steps, direct and replayed (%s, %s)", direct ? direct : "-",
       graph ? graph : "-");
    free(direct);
    free(graph);
}

static void test_dist(void)
{
    if (!ok(make_data(synth, pack, "r", 16, 64), "dataset made")) return;
    is_int(train_run("--epochs 1 --name cpu2 --nproc-per-node 2"), 0, "CPU path: 2 ranks over TCP");
    is_int(train_run("--epochs 1 --name g2 --nproc-per-node 2 --device-path --cuda-graph"), 0,
           "device path, 2 ranks, --cuda-graph");
    ok(file_has("stdout.txt", "cuda graph: off") && file_has("stdout.txt", "2 ranks"),
       "2 ranks: graph off and logged");
    same_run("cpu2", "g2", "2 ranks fallback vs CPU path");
    is_int(train_run("--epochs 1 --name cpus --nproc-per-node 2 --sync-bn"), 0,
           "CPU path: 2 ranks, --sync-bn");
    is_int(train_run("--epochs 1 --name gs --nproc-per-node 2 --sync-bn --device-path "
                     "--cuda-graph"),
           0, "device path, 2 ranks, --sync-bn, --cuda-graph");
    ok(file_has("stdout.txt", "cuda graph: off") && file_has("stdout.txt", "--sync-bn"),
       "--sync-bn: graph off and logged");
    same_run("cpus", "gs", "--sync-bn fallback vs CPU path");
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
    snprintf(dir, sizeof dir, "/tmp/test_train_graph_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    if (!strcmp(argv[5], "single")) {
        test_single();
        test_bench();
    } else if (!strcmp(argv[5], "dist"))
        test_dist();
    else
        ok(0, "unknown mode %s", argv[5]);
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
