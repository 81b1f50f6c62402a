/*
 * yolo-train on several ranks (trainer/train/train.h RANKS, trainer/dist/dist.h), on small
 * yolo-synth datasets. One program, four modes (each a meson test of its own): equiv    2 ranks x
 * batch 2 (--nproc-per-node 2, TCP) give the weights of 1 rank x batch 4 after 8 steps. BatchNorm
 * uses each rank's batch statistics (no SyncBatchNorm), so the dataset is built for it: every image
 * appears twice, placed with the epoch's shuffle (trn_sampler) so that the two ranks of each global
 * step hold the same two images; each rank's statistics then equal the global batch's and the two
 * runs are the same computation up to float summation order. A control on a dataset of distinct
 * images shows the per-rank statistics do move the weights. mpi      the same equivalence under
 * mpirun (Open MPI), bit-identical to the TCP run; and a hung rank under mpirun: the others time
 * out, MPI_Abort ends the job. Skipped without mpirun or without the MPI backend in the build.
 *   preempt  SIGUSR1 mid-run (1 rank), and SIGTERM to rank 1 only of 2: every rank finishes the
 *            step, rank 0 saves a mid-epoch checkpoint, all exit 0; --resume continues and
 *            equals a run that never stopped, byte for byte; the 2-rank checkpoint resumes on 1
 *            rank.
 *   faults   --nproc-per-node 2: rank 1 killed (rank 0 fails at once naming it, the job exits
 *            non-zero) and rank 1 stopped (rank 0 gives up at --dist-timeout naming it).
 * usage: test_dist_train YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR MPIRUN|- MPI_BUILT MODE
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ffr.h"
#include "sampler.h"
#include "run_testutil.h"
#include "tap.h"
#include "dist_testutil.h"
#include "ckpt_testutil.h"

static const char *train, *synth, *pack, *models, *mpirun;

/* Pack DIR/synth_NAME as is into DIR/NAME.ffr at 64 pixels. */
static int make_data(const char *name, int n)
{
    return dist_make_synth(synth, name, n) &&
           run("%s %s/synth_%s/synth.yaml -o %s/%s.ffr --size 64 -q -j 1", pack, dir, name, dir,
               name) == 0;
}

/* The bytes of records 0 .. 9 of a checkpoint (all but opt.yaml, which names the run). */
static char *ckpt_bytes(const char *path, size_t *len)
{
    return ckpt_records(path, 10, len, NULL);
}

static long long ckpt_meta_int(const char *path, const char *key)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return -1;
    size_t ml = 0;
    const char *m = ffr_reader_metadata(r, &ml);
    char *t = strndup(m, ml);
    long long v = -1;
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s: ", key);
    const char *at = t ? strstr(t, pat) : NULL;
    if (at) v = strtoll(at + strlen(pat), NULL, 10);
    free(t);
    ffr_reader_close(r);
    return v;
}

/* Largest |a - b| / (1e-3 + |b|) over the two runs' record `rec`; -1 when unreadable. */
static bool same_bytes(const char *run_a, const char *run_b)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/runs/%s/weights/last.ckpt", dir, run_a);
    snprintf(pb, sizeof pb, "%s/runs/%s/weights/last.ckpt", dir, run_b);
    size_t la = 0, lb = 0;
    char *a = ckpt_bytes(pa, &la), *b = ckpt_bytes(pb, &lb);
    const bool same = a && b && la == lb && la > 10000 && !memcmp(a, b, la);
    free(a);
    free(b);
    return same;
}

#define COMMON                                                                                  \
    "--img 64 --batch-size 4 --cfg %s/tiny_net.yaml --hyp %s --workers 1 --threads 2 --seed 7 " \
    "--project %s/runs --exist-ok"

/* Training tolerances: 8 SGD steps of the same computation in another summation order. */
#define EQUIV_TOL 1e-3

static bool paired_ready(void)
{
    static int state = -1;
    if (state < 0) state = dist_make_paired(synth, pack, "p", 16, 7) && make_data("u", 32);
    return state == 1;
}

static void test_equiv(void)
{
    const char *hyp = write_hyp();
    if (!ok(hyp && paired_ready(), "datasets made (32 records as 16 pairs; 32 distinct)")) return;
    int rc =
        run("%s --records %s/p.ffr --epochs 1 " COMMON " --name one", train, dir, models, hyp, dir);
    is_int(rc, 0, "1 rank x batch 4: one epoch, 8 steps");
    if (rc) show("stderr.txt");
    rc = run("%s --records %s/p.ffr --epochs 1 " COMMON " --name two --nproc-per-node 2", train,
             dir, models, hyp, dir);
    is_int(rc, 0, "2 ranks x batch 2 (--nproc-per-node 2, TCP)");
    if (rc) show("stderr.txt");
    char *out = file_in("stdout.txt");
    ok(strstr(out, "DDP: 2 ranks over tcp, 2 images per rank") && strstr(out, "0/0"),
       "rank 0 logs the DDP setup and the epoch");
    free(out);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/runs/two2", dir);
    ok(stat(p, &st) != 0, "one run directory for the job (the other rank made none)");
    const double dm = rel_diff("two", "one", "model.param", 1000),
                 de = rel_diff("two", "one", "ema.param", 1000);
    tap_diag("largest relative difference, 2x2 vs 1x4: weights %.3g, EMA %.3g", dm, de);
    ok(dm >= 0 && dm < EQUIV_TOL && de >= 0 && de < EQUIV_TOL,
       "the weights and the EMA agree to %g (got %.3g, %.3g)", EQUIV_TOL, dm, de);
    ok(!same_bytes("two", "one"), "... through a different computation (not the same bytes)");

    /* control: distinct images, so each rank's BatchNorm statistics differ from the batch's */
    rc = run("%s --records %s/u.ffr --epochs 1 " COMMON " --name uone", train, dir, models, hyp,
             dir);
    rc |= run("%s --records %s/u.ffr --epochs 1 " COMMON " --name utwo --nproc-per-node 2", train,
              dir, models, hyp, dir);
    const double du = rel_diff("utwo", "uone", "model.param", 1000);
    tap_diag("control, distinct images: largest relative difference %.3g", du);
    ok(rc == 0 && du > 10 * EQUIV_TOL,
       "control: with distinct images per-rank BatchNorm moves the weights by %.3g (> %g)", du,
       10 * EQUIV_TOL);
}

static void test_mpi(bool mpi_built)
{
    if (!strcmp(mpirun, "-") || access(mpirun, X_OK) != 0)
        tap_skip_all("mpirun not found (apt-get install openmpi-bin)");
    if (!mpi_built) tap_skip_all("yolo-train built without Open MPI (libopenmpi-dev)");
    const char *hyp = write_hyp();
    if (!ok(hyp && paired_ready(), "datasets made")) return;
    /* mpirun binds each rank to a core, and OpenBLAS sizes its pool from the cores it may use:
     * one GEMM thread everywhere, so that the launchers compute the same bits */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    int rc =
        run("%s --records %s/p.ffr --epochs 1 " COMMON " --name one", train, dir, models, hyp, dir);
    rc |= run("%s --records %s/p.ffr --epochs 1 " COMMON " --name two --nproc-per-node 2", train,
              dir, models, hyp, dir);
    is_int(rc, 0, "reference runs: 1 rank x 4 and 2 TCP ranks x 2");
    rc = run("%s --oversubscribe -np 2 %s --records %s/p.ffr --epochs 1 " COMMON " --name mpi",
             mpirun, train, dir, models, hyp, dir);
    is_int(rc, 0, "mpirun -np 2: 2 ranks x batch 2 over Open MPI");
    if (rc) show("stderr.txt");
    char *err = file_in("stderr.txt");
    ok(strstr(err, "rank 1 of 2") && strstr(err, "joined over mpi"),
       "the ranks come from Open MPI's variables and use the MPI backend");
    free(err);
    const double dm = rel_diff("mpi", "one", "model.param", 1000);
    ok(dm >= 0 && dm < EQUIV_TOL, "MPI 2x2 vs 1x4: weights agree to %g (got %.3g)", EQUIV_TOL, dm);
    ok(same_bytes("mpi", "two"),
       "MPI and TCP runs give the same bytes (one GEMM thread each; a sum of two values does not "
       "depend on its order)");

    /* a hung rank under mpirun: rank 0's all-reduce gives up at --dist-timeout, MPI_Abort */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec %s --oversubscribe -np 2 %s --records %s/p.ffr --epochs 100000 " COMMON
             " --name mpihang --dist-timeout 2 >%s/stdout.txt 2>%s/stderr.txt",
             mpirun, train, dir, models, hyp, dir, dir, dir);
    const pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* Every wait is bounded (30 s to find rank 1, 40 s for the job to end; the test's limit is
     * 120 s): a job left running (rank 1 never found, or an abort that does not end it) must
     * fail this point and print rank 0's stderr, not hang the suite: --epochs 100000 never ends
     * by itself. */
    long victim = 0;
    for (int waited = 0; waited < 3000 && !victim; waited++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        char *e = file_in("stderr.txt");
        const char *at = strstr(e, "rank 1 of 2 (local 1, pid ");
        if (at) victim = strtol(at + strlen("rank 1 of 2 (local 1, pid "), NULL, 10);
        free(e);
    }
    struct timespec ts = { 0, 300 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    if (victim > 0) kill((pid_t)victim, SIGSTOP);
    int status = 0;
    pid_t got = 0;
    for (int waited = 0; waited < 4000 && (got = waitpid(pid, &status, WNOHANG)) == 0; waited++) {
        struct timespec t10 = { 0, 10 * 1000 * 1000 };
        nanosleep(&t10, NULL);
    }
    if (got == 0) { /* still running 40 s on: end it (SIGTERM, then SIGKILL), fail the point */
        if (victim > 0) kill((pid_t)victim, SIGCONT);
        kill(pid, SIGTERM);
        for (int waited = 0; waited < 1000 && (got = waitpid(pid, &status, WNOHANG)) == 0;
             waited++) {
            struct timespec t10 = { 0, 10 * 1000 * 1000 };
            nanosleep(&t10, NULL);
        }
        if (got == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        status = 0;
        tap_diag("the job still ran 40 s after the stop (victim pid %ld): ended", victim);
    }
    if (victim > 0) kill((pid_t)victim, SIGKILL);
    char *e = file_in("stderr.txt");
    const bool ended = victim > 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
                       strstr(e, "did not complete");
    ok(ended,
       "rank 1 stopped under mpirun: the job ends non-zero after the 2 s deadline (status %d)",
       status);
    if (!ended) tap_diag("stderr: %s", e);
    free(e);
}

/* Start yolo-train with the shell command cmd (output to DIR/stdout.txt, stderr.txt). */
static pid_t start(const char *cmd)
{
    char full[4096];
    snprintf(full, sizeof full, "exec %s >%s/stdout.txt 2>%s/stderr.txt", cmd, dir, dir);
    const pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Wait until the run's results.csv has its first row (epoch 0 done), then a little more. */
static void wait_first_epoch(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/runs/%s/results.csv", dir, name);
    struct stat st;
    for (int waited = 0; waited < 1500 && (stat(p, &st) != 0 || st.st_size < 400); waited++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    struct timespec ts = { 0, 30 * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

/* The pid --nproc-per-node reported for rank r. */
static long rank_pid(int r)
{
    char *e = file_in("stderr.txt"), pat[64];
    snprintf(pat, sizeof pat, "started rank %d of 2 (pid ", r);
    const char *at = strstr(e, pat);
    const long pid = at ? strtol(at + strlen(pat), NULL, 10) : 0;
    free(e);
    return pid;
}

/* Stop a long run with sig (to the process, or to rank 1 only), resume 3 steps, and compare with
 * a run that went straight to the same position. */
static void preempt_case(const char *name, const char *ranks, int sig, bool to_rank1)
{
    const char *hyp = write_hyp();
    char cmd[2048];
    /* 48 records at batch 4: 12 steps per epoch; a long schedule so the signal lands mid-run */
    snprintf(cmd, sizeof cmd, "%s --records %s/u.ffr --epochs 200 " COMMON " --name %s %s", train,
             dir, models, hyp, dir, name, ranks);
    const pid_t pid = start(cmd);
    wait_first_epoch(name);
    const long victim = to_rank1 ? rank_pid(1) : (long)pid;
    ok(victim > 0, "%s: found the process to signal (pid %ld)", name, victim);
    if (victim > 0) kill((pid_t)victim, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: %s%s: every rank exits 0 (status %d)",
       name, strsignal(sig), to_rank1 ? " to rank 1 only" : "", status);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) show("stderr.txt");
    char p[512];
    snprintf(p, sizeof p, "%s/runs/%s/weights/last.ckpt", dir, name);
    const long long ep = ckpt_meta_int(p, "epoch"), step = ckpt_meta_int(p, "step");
    const long long pos = ep * 12 + step;
    ok(ep >= 1 && ep < 200 && step >= 0 && step < 12, "%s: last.ckpt at epoch %lld batch %lld%s",
       name, ep, step, step ? " (mid-epoch)" : " (an epoch boundary this time)");
    char *o = file_in("stdout.txt");
    ok(strstr(o, "stopped at epoch"), "%s: rank 0 says where it stopped", name);
    free(o);
    /* --threads as before: kern's conv2d differs in the last bits between thread counts, and
     * the default depends on the ranks per node */
    int rc =
        run("%s --resume %s/runs/%s --stop-after-steps 3 --threads 2 %s", train, dir, name, ranks);
    is_int(rc, 0, "%s: --resume, 3 more steps", name);
    if (rc) show("stderr.txt");
    char straight[64];
    snprintf(straight, sizeof straight, "%s_straight", name);
    rc = run("%s --records %s/u.ffr --epochs 200 " COMMON " --name %s %s --stop-after-steps %lld",
             train, dir, models, hyp, dir, straight, ranks, pos + 3);
    is_int(rc, 0, "%s: an uninterrupted run to the same position (%lld steps)", name, pos + 3);
    ok(same_bytes(name, straight),
       "%s: stopped + resumed == uninterrupted, byte for byte (model, buffers, EMA, optimizer, "
       "pending gradients)",
       name);
}

static void test_preempt(void)
{
    if (!ok(make_data("u", 48), "dataset made")) return;
    preempt_case("one", "", SIGUSR1, false);
    preempt_case("two", "--nproc-per-node 2", SIGTERM, true);
    /* the 2-rank checkpoint on 1 rank (same global batch) */
    char p[512];
    snprintf(p, sizeof p, "%s/runs/two/weights/last.ckpt", dir);
    const long long before = ckpt_meta_int(p, "epoch") * 12 + ckpt_meta_int(p, "step");
    const int rc = run("%s --resume %s/runs/two --stop-after-steps 2", train, dir);
    is_int(rc, 0, "a 2-rank checkpoint resumes on 1 rank");
    ok(ckpt_meta_int(p, "epoch") * 12 + ckpt_meta_int(p, "step") == before + 2 &&
           ckpt_meta_int(p, "world_size") == 1,
       "... two steps further, saved by a world of 1");
}

static void test_faults(void)
{
    const char *hyp = write_hyp();
    if (!ok(hyp && make_data("u", 16), "dataset made")) return;
    /* rank 1 killed: rank 0 sees the closed connection at once (the timeout is 600 s) */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s --records %s/u.ffr --epochs 100000 " COMMON
             " --name dies --nproc-per-node 2 --dist-timeout 600",
             train, dir, models, hyp, dir);
    pid_t pid = start(cmd);
    wait_first_epoch("dies");
    long victim = rank_pid(1);
    if (victim > 0) kill((pid_t)victim, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    char *e = file_in("stderr.txt");
    ok(victim > 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0,
       "rank 1 killed: the job exits non-zero (status %d) long before the 600 s timeout", status);
    ok(strstr(e, "rank 0:") && strstr(e, "rank 1 exited or crashed") && strstr(e, "ending the job"),
       "rank 0 says rank 1 exited or crashed, and ends the job");
    if (!strstr(e, "rank 1 exited")) tap_diag("stderr: %s", e);
    free(e);

    /* rank 1 stopped (SIGSTOP): rank 0 gives up after --dist-timeout 2 naming it */
    snprintf(cmd, sizeof cmd,
             "%s --records %s/u.ffr --epochs 100000 " COMMON
             " --name hangs --nproc-per-node 2 --dist-timeout 2",
             train, dir, models, hyp, dir);
    pid = start(cmd);
    wait_first_epoch("hangs");
    victim = rank_pid(1);
    if (victim > 0) kill((pid_t)victim, SIGSTOP);
    waitpid(pid, &status, 0);
    if (victim > 0) kill((pid_t)victim, SIGKILL);
    e = file_in("stderr.txt");
    ok(victim > 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
           strstr(e, "no answer from rank 1 within 2 s"),
       "rank 1 hung: rank 0 times out after 2 s naming rank 1; the job exits non-zero (status "
       "%d)",
       status);
    if (!strstr(e, "no answer from rank 1")) tap_diag("stderr: %s", e);
    free(e);

    /* bad configurations are refused before any work */
    int rc = run("%s --records %s/u.ffr --epochs 1 --img 64 --batch-size 3 --cfg %s/tiny_net.yaml "
                 "--project %s/runs --name odd --nproc-per-node 2",
                 train, dir, models, dir);
    e = file_in("stderr.txt");
    ok(rc != 0 && strstr(e, "divisible by the world size 2"),
       "--batch-size 3 on 2 ranks: refused, saying why");
    free(e);
    rc = run("RANK=0 WORLD_SIZE=2 %s --records %s/u.ffr --epochs 1 --img 64 --batch-size 4 --cfg "
             "%s/tiny_net.yaml --project %s/runs --name noaddr",
             train, dir, models, dir);
    e = file_in("stderr.txt");
    ok(rc == 1 && strstr(e, "MASTER_ADDR"),
       "RANK/WORLD_SIZE without MASTER_ADDR: exit 1 naming it");
    free(e);
    rc = run("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 %s --records %s/u.ffr "
             "--epochs 1 --img 64 --batch-size 4 --cfg %s/tiny_net.yaml --project %s/runs "
             "--dist-timeout 1 --name norank0",
             train, dir, models, dir);
    e = file_in("stderr.txt");
    ok(rc == 1 && strstr(e, "cannot reach rank 0"),
       "a rank whose rank 0 never listens: exit 1 after --dist-timeout, saying so");
    free(e);
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        printf("usage: test_dist_train YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR MPIRUN|- "
               "MPI_BUILT MODE\n");
        return 99;
    }
    static char abs_train[PATH_MAX];
    if (!realpath(argv[1], abs_train)) return 99;
    train = abs_train;
    synth = argv[2];
    pack = argv[3];
    models = argv[4];
    mpirun = argv[5];
    const bool mpi_built = !strcmp(argv[6], "true") || !strcmp(argv[6], "1");
    snprintf(dir, sizeof dir, "/tmp/test_dist_train_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    const char *mode = argv[7];
    if (!strcmp(mode, "equiv"))
        test_equiv();
    else if (!strcmp(mode, "mpi"))
        test_mpi(mpi_built);
    else if (!strcmp(mode, "preempt"))
        test_preempt();
    else if (!strcmp(mode, "faults"))
        test_faults();
    else
        return 99;
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
