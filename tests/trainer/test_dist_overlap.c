/*
 * The gradient all-reduce overlapped with backward (trainer/dist/dist.h OVERLAP,
 * trainer/model/net.h gradient-ready hook). Modes (each a meson test of its own): net      two
 * processes as ranks over the TCP star on loopback, each with tiny_net at batch 2 on its own
 * images: 4 SGD steps with the gradients all-reduced after backward (the whole arena) and, on a
 * second copy of the model, in 4 KiB buckets through the hook: the weights are the same bytes after
 * every step, and the same on both ranks. Counters (not timings) show the overlap: several buckets,
 * the first launched long before the backward's last row, and one completed by the communication
 * thread while the backward was still running (the last row's hook waits for it). Variants: with
 *            SyncBatchNorm on the same communicator (its sums run during backward between the
 *            buckets), on the GPU net's data path (trn_net_opts.device_path, CPU ops), and
 *            (net-onednn) both hooks on the CPU oneDNN executor (trn_cpu_engine ONEDNN,
 *            dnn_net.yaml, whose convs oneDNN has JIT code for; skipped without oneDNN).
 *   faults   rank 1 dies (SIGKILL) inside its backward while buckets are in flight: rank 0 fails
 *            naming rank 1 and exits non-zero; rank 1 hangs (SIGSTOP) there: rank 0 gives up at
 *            its 2 s deadline naming rank 1.
 *   train    yolo-train: 2 ranks x batch 2 with 4 KiB buckets give the bytes of the same run with
 *            --no-grad-overlap, and the weights of 1 rank x batch 4 (the paired dataset of
 *            test_dist_train.c); likewise with --sync-bn; rank 0 logs the overlap.
 *   mpi      the 4 KiB-bucket run under mpirun (Open MPI) gives the bytes of the TCP one.
 *            Skipped without mpirun or the MPI backend.
 *   bench    not a test (meson benchmark 'dist_overlap'): one-epoch runs of 2 ranks x batch 2,
 *            alternately with and without overlap, and the ratio of their step times.
 * usage: test_dist_overlap net|net-syncbn|net-device|net-onednn|faults MODELS_TEST_DIR
 *        test_dist_overlap train|mpi MODELS_TEST_DIR YOLO_TRAIN YOLO_SYNTH YOLO_PACK MPIRUN|-
 *                          MPI_BUILT
 *        test_dist_overlap bench ... (as train) [CFG [IMG [STEPS [REPS]]]]
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"
#include "ffr.h"
#include "model.h"
#include "net.h"
#include "sampler.h"
#include "run_testutil.h"
#include "port_testutil.h"
#include "tap.h"
#include "dist_testutil.h"

static const char *models, *train, *synth, *pack, *mpirun;

/* ---------------------------------------------------------------------------------------- */
/* Ranks as processes                                                                        */

static int port;

static int join(int rank, double timeout, struct trn_dist **d, char *err, size_t cap)
{
    char r[32], p[32];
    snprintf(r, sizeof r, "RANK=%d", rank);
    snprintf(p, sizeof p, "MASTER_PORT=%d", port);
    const char *env[] = { r, "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", p, NULL };
    struct trn_dist_env e;
    int rc = trn_dist_env_parse(env, &e, err, cap);
    if (rc < 0) return rc;
    struct trn_dist_opts o;
    trn_dist_opts_default(&o);
    o.backend = TRN_DIST_TCP;
    o.timeout_s = timeout;
    o.bucket_bytes = 4096; /* tiny_net's ~100 KB of gradients: a few dozen buckets */
    return trn_dist_create(&e, &o, d, err, cap);
}

/* A line for the parent (port_testutil.h). */
#define note(rank, ...) tu_note(dir, rank, __VA_ARGS__)

static char *read_note(int rank)
{
    char p[300];
    snprintf(p, sizeof p, "%s/r%d.txt", dir, rank);
    char *s = slurp(p, NULL);
    return s ? s : calloc(1, 1);
}

typedef int (*child_fn)(int rank);

static int wait_status(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Fork ranks 0 and 1 running fn. With wait_all, status[r] gets the exit code or 128 + signal. */
static void spawn(child_fn fn, int *status, pid_t *pids, bool wait_all)
{
    char p[300];
    for (int r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/r%d.txt", dir, r);
        unlink(p);
    }
    port = free_port_pair(29500);
    for (int r = 0; r < 2; r++) {
        const pid_t pid = fork();
        if (pid == 0) {
            alarm(40); /* never outlive the test: a hang shows as status 128 + SIGALRM */
            _exit(fn(r));
        }
        pids[r] = pid;
    }
    for (int r = 0; wait_all && r < 2; r++)
        status[r] = wait_status(pids[r]);
}

/* ---------------------------------------------------------------------------------------- */
/* net: one rank's training steps, whole-arena vs bucketed                                   */

#define NET_IMG 64
#define STEPS   4
#define LR      0.01f

enum variant { V_PLAIN, V_SYNCBN, V_DEVICE, V_ONEDNN };
static enum variant variant;

/* What the hook of the bucketed net needs. */
struct hook_ctx {
    struct trn_dist *d;
    int rows;                  /* the model's rows: the hook's last call is row 0 */
    int rank;                  /* faults: which rank misbehaves */
    int fault;                 /* 0 none, SIGKILL or SIGSTOP: raised in rank 1's hook */
    bool done_before_last_row; /* a bucket had completed when row 0's hook came */
    uint64_t first_launch_at;  /* the stats at the end of the last backward */
    uint64_t buckets, ranges;
};

static int hook(void *ctx, const struct trn_net_grad_range *g)
{
    struct hook_ctx *const h = ctx;
    int rc = trn_dist_grad_ready(h->d, g->host, g->dev, g->stream, g->count);
    struct trn_dist_grad_stats st;
    trn_dist_grad_stats(h->d, &st);
    if (h->fault && h->rank == 1 && st.buckets >= 2) raise(h->fault); /* buckets in flight */
    if (rc == 0 && g->layer == 0) {
        /* the last row: the communication thread must have finished a bucket by now or soon,
         * while this backward has not returned (bounded: 10 s, then the check fails) */
        for (int k = 0; k < 10000 && st.done < 1; k++) {
            struct timespec ts = { 0, 1000 * 1000 };
            nanosleep(&ts, NULL);
            trn_dist_grad_stats(h->d, &st);
        }
        h->done_before_last_row = st.done >= 1;
    }
    return rc;
}

static int bn_sum(void *ctx, double *buf, size_t n)
{
    return trn_dist_allreduce_f64(ctx, buf, n);
}

static uint64_t rng_state;
static float urand(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

static struct trn_model *tiny(void)
{
    struct trn_model *m = NULL;
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", models,
             variant == V_ONEDNN ? "dnn_net.yaml" : "tiny_net.yaml");
    if (trn_model_load(path, NULL, &m, err, sizeof err) < 0) return NULL;
    trn_model_init(m, 7);
    return m;
}

static void sgd(struct trn_model *m, const float *g)
{
    float *p = trn_model_arena(m, TRN_ARENA_PARAM);
    const size_t n = trn_model_info(m)->arena_len[TRN_ARENA_PARAM];
    for (size_t i = 0; i < n; i++)
        p[i] -= LR * g[i];
}

/* Exit codes: 0 all good, 1 a check failed (see the note), 2 setup, 3 a collective failed. */
static int child_net(int rank, int fault, double timeout)
{
    struct trn_dist *d = NULL;
    char err[512] = "";
    if (join(rank, timeout, &d, err, sizeof err) < 0) {
        note(rank, "join: %s", err);
        return 2;
    }
    struct trn_model *m_ref = tiny(), *m_ovl = tiny();
    if (!m_ref || !m_ovl) return 2;
    const struct trn_model_info *I = trn_model_info(m_ref);
    struct hook_ctx h = { .d = d, .rows = I->n_layers, .rank = rank, .fault = fault };
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    if (variant == V_SYNCBN || variant == V_ONEDNN) {
        o.bn_allreduce = bn_sum;
        o.bn_allreduce_ctx = d;
    }
    if (variant == V_ONEDNN) o.cpu_engine = TRN_CPU_ENGINE_ONEDNN;
    struct trn_net *ref = NULL, *ovl = NULL;
    int rc = trn_net_create(m_ref, 2, NET_IMG, NET_IMG, &o, &ref, err, sizeof err);
    o.grad_ready = hook;
    o.grad_ready_ctx = &h;
    o.device_path = variant == V_DEVICE;
    if (!rc) rc = trn_net_create(m_ovl, 2, NET_IMG, NET_IMG, &o, &ovl, err, sizeof err);
    if (rc) {
        note(rank, "net: %s", err);
        return 2;
    }
    const size_t img = (size_t)3 * NET_IMG * NET_IMG, np = I->arena_len[TRN_ARENA_PARAM];
    float *images = malloc(2 * img * sizeof(float)), *dout[4] = { NULL };
    const int nl = trn_net_levels(ref);
    int bad = 0, step = 0;
    for (; step < STEPS && !bad; step++) {
        /* each rank's own images and output gradients, new every step */
        rng_state = 0x9e3779b97f4a7c15ull * (uint64_t)(1 + rank + 2 * step);
        for (size_t i = 0; i < 2 * img; i++)
            images[i] = urand();
        for (int l = 0; l < nl; l++) {
            const long n = trn_net_output_shape(ref, l, NULL);
            if (!dout[l]) dout[l] = malloc((size_t)n * sizeof(float));
            for (long i = 0; i < n; i++)
                dout[l][i] = 0.05f * (urand() - 0.5f);
        }
        /* the whole arena after backward, as train.c without overlap */
        trn_net_zero_grad(ref);
        rc = trn_net_forward(ref, images, true, NULL);
        if (!rc) rc = trn_net_backward(ref, (const float *const *)dout);
        if (!rc) rc = trn_dist_allreduce_f32(d, trn_net_grad(ref), np);
        if (rc) break;
        sgd(m_ref, trn_net_grad(ref));
        /* buckets during backward */
        trn_net_zero_grad(ovl);
        h.done_before_last_row = false;
        rc = trn_net_forward(ovl, images, true, NULL);
        if (!rc) rc = trn_dist_grad_begin(d, np);
        if (!rc) {
            const int brc = trn_net_backward(ovl, (const float *const *)dout);
            const int wrc = trn_dist_grad_wait(d); /* drains, error or not */
            rc = brc ? brc : wrc;
        }
        if (rc) break;
        sgd(m_ovl, trn_net_grad(ovl));
        struct trn_dist_grad_stats st;
        trn_dist_grad_stats(d, &st);
        if (memcmp(trn_model_arena(m_ref, TRN_ARENA_PARAM), trn_model_arena(m_ovl, TRN_ARENA_PARAM),
                   np * sizeof(float)))
            bad |= 1;
        if (!(st.buckets >= 4 && st.done == st.buckets && st.ranges == (uint64_t)I->n_layers &&
              st.first_launch_at >= 1 && st.first_launch_at < st.ranges / 2))
            bad |= 2;
        if (!h.done_before_last_row) bad |= 4;
        note(rank,
             "step %d: buckets %llu, first launched at row report %llu of %llu, done before "
             "the wait %llu, a bucket done before the last row %d, bad %d",
             step, (unsigned long long)st.buckets, (unsigned long long)st.first_launch_at,
             (unsigned long long)st.ranges, (unsigned long long)st.done_early,
             h.done_before_last_row, bad);
    }
    if (rc) {
        note(rank, "step %d failed: %s", step, trn_dist_error(d));
        fflush(NULL);
        /* as yolo-train does after a collective error: end this process without waiting */
        trn_dist_abort(d, 3);
    }
    /* the weights for the parent to compare between ranks */
    char p[300];
    snprintf(p, sizeof p, "%s/w%d.bin", dir, rank);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(trn_model_arena(m_ovl, TRN_ARENA_PARAM), sizeof(float), np, f);
        fclose(f);
    }
    for (int l = 0; l < nl; l++)
        free(dout[l]);
    free(images);
    trn_net_destroy(ref);
    trn_net_destroy(ovl);
    trn_model_destroy(m_ref);
    trn_model_destroy(m_ovl);
    trn_dist_destroy(d);
    return bad ? 1 : 0;
}

static int child_plain(int rank)
{
    return child_net(rank, 0, 20);
}

static void test_net(void)
{
    static const char *const names[] = { "CPU path",
                                         "CPU path, SyncBatchNorm on the same "
                                         "communicator",
                                         "GPU net's data path (device_path)",
                                         "oneDNN executor, SyncBatchNorm on the same "
                                         "communicator" };
    const char *what = names[variant];
    int st[2];
    pid_t pids[2];
    spawn(child_plain, st, pids, true);
    for (int r = 0; r < 2; r++) {
        char *n = read_note(r);
        tap_diag("rank %d (status %d):", r, st[r]);
        for (char *line = n ? strtok(n, "\n") : NULL; line; line = strtok(NULL, "\n"))
            tap_diag("  %s", line); /* one "# " per line: TAP has no multi-line comments */
        free(n);
    }
    ok(st[0] == 0 && st[1] == 0,
       "%s: %d steps on 2 ranks; after each, bucketed == whole-arena all-reduce, byte for byte; "
       "several buckets, the first launched before half of the rows were done, one completed "
       "before the last row's hook",
       what, STEPS);
    char p0[300], p1[300];
    snprintf(p0, sizeof p0, "%s/w0.bin", dir);
    snprintf(p1, sizeof p1, "%s/w1.bin", dir);
    size_t l0 = 0, l1 = 0;
    char *a = slurp(p0, &l0), *b = slurp(p1, &l1);
    ok(a && b && l0 == l1 && l0 > 10000 && !memcmp(a, b, l0),
       "%s: both ranks hold the same weights (%zu bytes)", what, l0);
    free(a);
    free(b);
}

/* ---------------------------------------------------------------------------------------- */
/* faults                                                                                    */

static int child_kill(int rank)
{
    return child_net(rank, SIGKILL, 600);
}

static int child_stop(int rank)
{
    return child_net(rank, SIGSTOP, 2);
}

static void test_faults(void)
{
    int st[2];
    pid_t pids[2];
    spawn(child_kill, st, pids, true);
    char *n = read_note(0);
    tap_diag("rank 0: status %d: %s", st[0], n);
    ok(st[1] == 128 + SIGKILL && st[0] == 3 && strstr(n, "rank 1 exited or crashed"),
       "rank 1 killed in its backward with buckets in flight: rank 0 fails at once (timeout "
       "600 s) naming rank 1, exit 3");
    free(n);

    spawn(child_stop, st, pids, false);
    st[0] = wait_status(pids[0]);
    kill(pids[1], SIGKILL);
    kill(pids[1], SIGCONT);
    st[1] = wait_status(pids[1]);
    n = read_note(0);
    tap_diag("rank 0: status %d: %s", st[0], n);
    ok(st[0] == 3 && strstr(n, "no answer from rank 1 within 2 s"),
       "rank 1 stopped in its backward: rank 0 gives up at its 2 s deadline naming rank 1, "
       "exit 3 (not killed by the 40 s alarm)");
    free(n);
}

/* ---------------------------------------------------------------------------------------- */
/* train / mpi: yolo-train                                                                   */

/* Records 0 .. 9 of two runs' last.ckpt (all but opt.yaml, which names the run) are equal. */
static bool ckpt_same(const char *run_a, const char *run_b)
{
    static const char *const recs[] = { "model.param",  "model.buffer", "ema.param", "ema.buffer",
                                        "optim.state0", "optim.state1", "grad" };
    bool same = true;
    size_t total = 0;
    for (size_t k = 0; k < sizeof recs / sizeof recs[0] && same; k++) {
        size_t na = 0, nb = 0;
        float *a = ckpt_floats(run_a, recs[k], &na), *b = ckpt_floats(run_b, recs[k], &nb);
        /* a record this checkpoint does not have must be missing from both */
        same = na == nb && (!na || (a && b && !memcmp(a, b, na * sizeof(float))));
        total += na;
        free(a);
        free(b);
    }
    return same && total > 10000;
}

#define COMMON                                                                                  \
    "--img 64 --batch-size 4 --cfg %s/tiny_net.yaml --hyp %s --workers 1 --threads 2 --seed 7 " \
    "--project %s/runs --exist-ok --epochs 1"
#define SMALL     "--bucket-cap-mb 0.00390625" /* 4 KiB buckets */
#define EQUIV_TOL 1e-3

static void test_train(void)
{
    const char *hyp = write_hyp();
    if (!ok(hyp && dist_make_paired(synth, pack, "p", 16, 7),
            "dataset made (32 records as 16 pairs)"))
        return;
    int rc = run("%s --records %s/p.ffr " COMMON " --name one", train, dir, models, hyp, dir);
    is_int(rc, 0, "1 rank x batch 4");
    rc = run("%s --records %s/p.ffr " COMMON " --name ovl --nproc-per-node 2 " SMALL, train, dir,
             models, hyp, dir);
    is_int(rc, 0, "2 ranks x batch 2, 4 KiB buckets overlapped with backward");
    if (rc) show("stderr.txt");
    char *out = file_in("stdout.txt");
    ok(strstr(out, "; all-reduced in buckets overlapped with backward") != NULL,
       "rank 0 logs the overlap");
    free(out);
    rc = run("%s --records %s/p.ffr " COMMON
             " --name off --nproc-per-node 2 --no-grad-overlap " SMALL,
             train, dir, models, hyp, dir);
    is_int(rc, 0, "the same with --no-grad-overlap");
    out = file_in("stdout.txt");
    ok(strstr(out, "; all-reduced after backward") != NULL, "... which rank 0 logs");
    free(out);
    rc = run("%s --records %s/p.ffr " COMMON " --name big --nproc-per-node 2", train, dir, models,
             hyp, dir);
    is_int(rc, 0, "the same with the default buckets (25 MiB, first 1 MiB: one bucket here)");
    ok(ckpt_same("ovl", "off"),
       "4 KiB buckets overlapped == all-reduce after backward: the same bytes (weights, "
       "buffers, EMA, optimizer, gradients)");
    ok(ckpt_same("big", "off"), "default buckets == after backward: the same bytes");
    const double dm = rel_diff("ovl", "one", "model.param", 1000);
    tap_diag("2x2 overlapped vs 1x4: largest relative difference %.3g", dm);
    ok(dm >= 0 && dm < EQUIV_TOL, "2x2 overlapped vs 1x4: weights agree to %g", EQUIV_TOL);

    rc = run("%s --records %s/p.ffr " COMMON " --name sovl --nproc-per-node 2 --sync-bn " SMALL,
             train, dir, models, hyp, dir);
    rc |= run("%s --records %s/p.ffr " COMMON
              " --name soff --nproc-per-node 2 --sync-bn --no-grad-overlap " SMALL,
              train, dir, models, hyp, dir);
    is_int(rc, 0, "--sync-bn, with and without overlap");
    ok(ckpt_same("sovl", "soff"),
       "--sync-bn: BN sums between the buckets on one communicator; the same bytes as without "
       "overlap");
}

static void test_mpi(bool mpi_built)
{
    if (!strcmp(mpirun, "-") || access(mpirun, X_OK) != 0)
        tap_skip_all("mpirun not found (apt-get install openmpi-bin)");
    if (!mpi_built) tap_skip_all("yolo-train built without Open MPI (libopenmpi-dev)");
    const char *hyp = write_hyp();
    if (!ok(hyp && dist_make_paired(synth, pack, "p", 16, 7), "dataset made")) return;
    /* one GEMM thread everywhere, as test_dist_train.c's mpi mode: the same bits per launcher */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    int rc = run("%s --records %s/p.ffr " COMMON " --name tcp --nproc-per-node 2 " SMALL, train,
                 dir, models, hyp, dir);
    is_int(rc, 0, "TCP, 2 ranks, 4 KiB buckets overlapped");
    rc = run("%s --oversubscribe -np 2 %s --records %s/p.ffr " COMMON " --name mpi " SMALL, mpirun,
             train, dir, models, hyp, dir);
    is_int(rc, 0, "mpirun -np 2, 4 KiB buckets overlapped (the communication thread calls MPI)");
    if (rc) show("stderr.txt");
    char *e = file_in("stderr.txt"), *o = file_in("stdout.txt");
    ok(strstr(e, "joined over mpi") && strstr(o, "in buckets overlapped with backward"),
       "the MPI backend, overlapped");
    free(e);
    free(o);
    ok(ckpt_same("mpi", "tcp"), "MPI == TCP, byte for byte");
}

/* ---------------------------------------------------------------------------------------- */
/* bench (a meson benchmark, not a test): step time with and without overlap                 */

/* Seconds of the epoch from rank 0's last progress line ("| 6/6 [00:12<00:00,  0.50it/s"):
 * batches / rate, or -1. */
static double epoch_secs(void)
{
    char *o = file_in("stdout.txt");
    const char *at = strstr(o, ": 100%|");
    at = at ? strstr(at, "| ") : NULL;
    const double n = at ? strtod(at + 2, NULL) : 0;
    const char *r = at ? strchr(at, ',') : NULL;
    char *unit = NULL;
    const double rate = r ? strtod(r + 1, &unit) : 0;
    const bool per_it = unit && !strncmp(unit, "s/it", 4); /* tqdm's form below 1 it/s */
    free(o);
    return n > 0 && rate > 0 ? (per_it ? n * rate : n / rate) : -1;
}

static void bench(const char *cfg, int img, int steps, int reps)
{
    /* 2 ranks x batch 2, one thread each: the 2-core VM's cores, one per rank */
    if (run("%s %s/synth_b --split train2017=%d --seed 5 --min-side 200 --max-side 400 "
            "--format yolo --classes 3 --max-objects 3",
            synth, dir, 4 * steps) ||
        run("%s %s/synth_b/synth.yaml -o %s/b.ffr --size %d -q -j 1", pack, dir, dir, img)) {
        printf("Bail out! cannot make the dataset\n");
        exit(99);
    }
    const char *hyp = write_hyp();
    double t[2][64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            /* alternate, so that the machine's load drifts over both alike */
            const int rc = run("%s --records %s/b.ffr --img %d --batch-size 4 --cfg %s --hyp %s "
                               "--workers 1 --threads 1 --seed 7 --project %s/runs --exist-ok "
                               "--epochs 1 --noval --nosave --name b%d --nproc-per-node 2 %s",
                               train, dir, img, cfg, hyp, dir, k, k ? "--no-grad-overlap" : "");
            const double s = epoch_secs();
            if (rc || s <= 0) {
                show("stderr.txt");
                printf("Bail out! yolo-train failed (%d)\n", rc);
                exit(99);
            }
            t[k][r] = s / steps;
            printf("# rep %d, %s: %d steps in %.2f s (%.3f s/step)\n", r,
                   k ? "after backward" : "overlapped", steps, s, s / steps);
            fflush(stdout);
        }
    /* each pair ran back to back: their ratio cancels most of the drift of the machine's load */
    double ratio[64];
    for (int r = 0; r < reps; r++)
        ratio[r] = t[0][r] / t[1][r];
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && ratio[j] < ratio[j - 1]; j--) {
            const double x = ratio[j];
            ratio[j] = ratio[j - 1];
            ratio[j - 1] = x;
        }
    const double rmed = reps % 2 ? ratio[reps / 2] : 0.5 * (ratio[reps / 2 - 1] + ratio[reps / 2]);
    double med[2], best[2];
    for (int k = 0; k < 2; k++) {
        /* insertion sort: a handful of values */
        for (int i = 1; i < reps; i++)
            for (int j = i; j > 0 && t[k][j] < t[k][j - 1]; j--) {
                const double x = t[k][j];
                t[k][j] = t[k][j - 1];
                t[k][j - 1] = x;
            }
        med[k] = reps % 2 ? t[k][reps / 2] : 0.5 * (t[k][reps / 2 - 1] + t[k][reps / 2]);
        best[k] = t[k][0];
    }
    printf("# %s at %d, 2 ranks x batch 2 (TCP on loopback, 1 compute thread each), %d steps x "
           "%d runs each:\n# overlapped: median %.3f s/step, best %.3f; after backward: median "
           "%.3f, best %.3f; overlapped / after: %.3f (median of the %d back-to-back pairs; "
           "range %.3f .. %.3f), best / best %.3f\n",
           cfg, img, steps, reps, med[0], best[0], med[1], best[1], rmed, reps, ratio[0],
           ratio[reps - 1], best[0] / best[1]);
    ok(1, "benchmark ran");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        printf("usage: test_dist_overlap net|net-syncbn|net-device|faults|train|mpi "
               "MODELS_TEST_DIR [YOLO_TRAIN YOLO_SYNTH YOLO_PACK MPIRUN|- MPI_BUILT]\n");
        return 99;
    }
    const char *mode = argv[1];
    models = argv[2];
    static char abs_train[PATH_MAX];
    const bool tools = !strcmp(mode, "train") || !strcmp(mode, "mpi") || !strcmp(mode, "bench");
    if (tools) {
        if (argc < 8 || !realpath(argv[3], abs_train)) return 99;
        train = abs_train;
        synth = argv[4];
        pack = argv[5];
        mpirun = argv[6];
    }
    snprintf(dir, sizeof dir, "/tmp/test_dist_overlap_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    if (!strcmp(mode, "net")) {
        variant = V_PLAIN;
        test_net();
    } else if (!strcmp(mode, "net-syncbn")) {
        variant = V_SYNCBN;
        test_net();
    } else if (!strcmp(mode, "net-device")) {
        variant = V_DEVICE;
        test_net();
    } else if (!strcmp(mode, "net-onednn")) {
        variant = V_ONEDNN;
        struct trn_model *m = tiny();
        struct trn_net_opts o;
        trn_net_opts_default(&o);
        o.train = true;
        o.cpu_engine = TRN_CPU_ENGINE_ONEDNN;
        struct trn_net *net = NULL;
        const int rc = m ? trn_net_create(m, 2, NET_IMG, NET_IMG, &o, &net, NULL, 0) : -EINVAL;
        trn_net_destroy(net);
        trn_model_destroy(m);
        if (rc == -ENOTSUP) tap_skip_all("no oneDNN executor for dnn_net.yaml here");
        test_net();
    } else if (!strcmp(mode, "faults")) {
        test_faults();
    } else if (!strcmp(mode, "train")) {
        test_train();
    } else if (!strcmp(mode, "bench")) {
        /* argv[8..]: cfg, img, steps, repetitions */
        bench(argc > 8 ? argv[8] : "yolov5n", argc > 9 ? atoi(argv[9]) : 320,
              argc > 10 ? atoi(argv[10]) : 12, argc > 11 ? atoi(argv[11]) : 3);
    } else if (!strcmp(mode, "mpi")) {
        test_mpi(!strcmp(argv[7], "true"));
    } else {
        return 99;
    }
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
