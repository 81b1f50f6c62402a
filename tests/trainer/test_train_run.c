/*
 * yolo-train's training run end to end (trainer/train/train.h), on small yolo-synth datasets packed
 * by yolo-pack. One program, five modes (each a meson test of its own): resume      K steps, save,
 * resume, the rest == all steps straight through, byte for byte (model, EMA, optimizer state,
 * gradients, counters; results.csv too) learn       a short CPU run: the mean training loss of the
 * last epoch is well below the first outputs     runs/train/exp: results.csv header and rows,
 * hyp.yaml, opt.yaml, weights/last and best that verify and load (--weights last.ckpt) sigint
 * SIGINT mid-run: exit 130, last.ckpt written at the stop position, resumable unwritable  a
 * --project that cannot be created, a weights/ that cannot be written: exit 1 with a message naming
 * the path usage: test_train_run YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR MODE
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ffr.h"
#include "hyp.h"
#include "run_testutil.h"
#include "tap.h"
#include "ckpt_testutil.h"

static const char *train, *synth, *pack, *models;

static void show_stderr(void)
{
    char p[300];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    char *e = slurp(p, NULL);
    if (e && e[0]) tap_diag("stderr: %s", e);
    free(e);
}

/* A synthetic dataset of n images packed at img into DIR/NAME.ffr. */
static int make_data(const char *name, int n, int img)
{
    return run("%s %s/synth_%s --split train2017=%d --seed 11 --min-side %d --max-side %d "
               "--format yolo --classes 3 --max-objects 4",
               synth, dir, name, n, img / 2 < 32 ? 32 : img / 2, img * 2) == 0 &&
           run("%s %s/synth_%s/synth.yaml -o %s/%s.ffr --size %d -q -j 1", pack, dir, name, dir,
               name, img) == 0;
}

/* The bytes of records 0 .. 9 of a checkpoint (all but opt.yaml, which names the run),
 * concatenated; *records: the file's record count. */
static char *ckpt_bytes(const char *path, size_t *len, uint64_t *records)
{
    return ckpt_records(path, 10, len, records);
}

/* The checkpoint opens, every byte verifies, and its metadata is ours. */
static int ckpt_ok(const char *path)
{
    struct ffr_reader *r = NULL;
    char err[512] = "";
    if (ffr_reader_open(&r, path, NULL, err, sizeof err) < 0) {
        tap_diag("%s: %s", path, err);
        return 0;
    }
    const int64_t problems = ffr_reader_verify_all(r, NULL, NULL);
    size_t ml = 0;
    const char *m = ffr_reader_metadata(r, &ml);
    const int good = problems == 0 && ffr_reader_count(r) == 11 && ml > 20 &&
                     memmem(m, ml, "format: ffyolo-ckpt-1", 21) != NULL;
    ffr_reader_close(r);
    return good;
}

/* One metadata value of a checkpoint as an integer, or -1. */
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

#define TRAIN_ARGS "--cfg %s/tiny_net.yaml --workers 1 --threads 2 --seed 3"

/* K steps, save, resume, M steps == K + M straight (epochs of 6 batches; the last is short). */
static void test_resume(void)
{
    /* 22 images at batch 4: 6 batches per epoch, the last of 2 images (the second net). */
    if (!ok(make_data("r", 22, 64), "dataset made")) return;
    const char *common = "--records %s/r.ffr --img 64 --batch-size 4 --epochs 2 " TRAIN_ARGS
                         " --project %s/runs --exist-ok";
    char fmt[1024];
    snprintf(fmt, sizeof fmt, "%%s %s --name straight", common);
    int rc = run(fmt, train, dir, models, dir);
    is_int(rc, 0, "straight run of 2 epochs (12 batches)");
    if (rc) show_stderr();
    /* stop after batch 4 of epoch 0: mid-epoch, with gradients accumulated since the last
     * optimizer step (warmup's accumulate is 2 by then), the short batch 5 next */
    snprintf(fmt, sizeof fmt, "%%s %s --name split --stop-after-steps 5", common);
    rc = run(fmt, train, dir, models, dir);
    is_int(rc, 0, "--stop-after-steps 5 exits 0");
    char p[512];
    snprintf(p, sizeof p, "%s/runs/split/weights/last.ckpt", dir);
    ok(ckpt_meta_int(p, "epoch") == 0 && ckpt_meta_int(p, "step") == 5,
       "the checkpoint is at epoch 0, batch 5");
    ok(ckpt_meta_int(p, "last_opt_step") < ckpt_meta_int(p, "ni") - 1,
       "... between optimizer steps (last step at batch %lld): gradients pending",
       ckpt_meta_int(p, "last_opt_step"));
    /* a copy whose hyp.yaml record has a flipped byte: resume names the record and the cause
     * (issue 20: it said only "cannot read") */
    char dmg[600];
    snprintf(dmg, sizeof dmg, "%s/damaged.ckpt", dir);
    size_t n = 0;
    uint8_t *bytes = (uint8_t *)slurp(p, &n);
    struct ffr_reader *rd = NULL;
    uint64_t at = 0;
    if (bytes && ffr_reader_open(&rd, p, NULL, NULL, 0) == 0) {
        for (uint64_t i = 0; i < ffr_reader_count(rd); i++) {
            struct ffr_record_info ri;
            if (ffr_reader_info(rd, i, &ri) == 0 && ri.summary_len == 8 &&
                !memcmp(ri.summary, "hyp.yaml", 8))
                at = ri.offset + 40; /* a stored byte of the record */
        }
        ffr_reader_close(rd);
    }
    FILE *f = at && at < n ? fopen(dmg, "wb") : NULL;
    if (f) {
        bytes[at] ^= 0x20;
        fwrite(bytes, 1, n, f);
        fclose(f);
    }
    free(bytes);
    rc = run("%s --resume %s", train, dmg);
    char se[512];
    char *e0 = (snprintf(se, sizeof se, "%s/stderr.txt", dir), slurp(se, NULL));
    ok(f && rc == 1 && e0 && strstr(e0, "hyp.yaml") && strstr(e0, "checksum mismatch"),
       "a damaged hyp.yaml record: resume fails naming the record and the checksum");
    if (!(e0 && strstr(e0, "checksum mismatch"))) show_stderr();
    free(e0);
    /* a second stop inside epoch 1, after the short batch and an epoch-end save */
    rc = run("%s --resume %s/runs/split --stop-after-steps 4", train, dir);
    is_int(rc, 0, "resume, 4 more batches, stop");
    ok(ckpt_meta_int(p, "epoch") == 1 && ckpt_meta_int(p, "step") == 3 &&
           ckpt_meta_int(p, "last_opt_step") < ckpt_meta_int(p, "ni") - 1,
       "the checkpoint is at epoch 1, batch 3, gradients pending");
    rc = run("%s --resume %s/runs/split/weights/last.ckpt", train, dir);
    is_int(rc, 0, "resume from the .ckpt to the end");
    if (rc) show_stderr();

    char a[512], b[512];
    snprintf(a, sizeof a, "%s/runs/straight/weights/last.ckpt", dir);
    size_t la = 0, lb = 0;
    uint64_t ra = 0, rb = 0;
    char *A = ckpt_bytes(a, &la, &ra), *B = ckpt_bytes(p, &lb, &rb);
    ok(A && B && ra == 11 && rb == 11, "both checkpoints read (11 records)");
    ok(A && B && la == lb && la > 100000 && memcmp(A, B, la) == 0,
       "model, EMA, optimizer state, gradient, model.yaml and hyp.yaml records identical (%zu "
       "bytes)",
       la);
    free(A);
    free(B);
    ok(ckpt_meta_int(a, "ema_updates") == ckpt_meta_int(p, "ema_updates") &&
           ckpt_meta_int(a, "optim_steps") == ckpt_meta_int(p, "optim_steps") &&
           ckpt_meta_int(a, "ema_updates") > 0 && ckpt_meta_int(p, "epoch") == 2,
       "same EMA updates (%lld) and optimizer steps", ckpt_meta_int(a, "ema_updates"));
    snprintf(a, sizeof a, "%s/runs/straight/results.csv", dir);
    snprintf(b, sizeof b, "%s/runs/split/results.csv", dir);
    char *ca = slurp(a, NULL), *cb = slurp(b, NULL);
    ok(ca && cb && strlen(ca) > 100 && !strcmp(ca, cb), "results.csv identical");
    free(ca);
    free(cb);
    rc = run("%s --resume %s/runs/split", train, dir);
    char *e = (snprintf(b, sizeof b, "%s/stderr.txt", dir), slurp(b, NULL));
    ok(rc == 1 && e && strstr(e, "nothing to resume"), "resuming a finished run: exit 1, says so");
    free(e);
}

/* Mean total loss (box + obj + cls) of each results.csv row; returns rows. */
static int read_losses(const char *path, double *tot, int cap)
{
    char *s = slurp(path, NULL);
    if (!s) return -1;
    int n = 0;
    char *line = strchr(s, '\n');
    while (line && line[1] && n < cap) {
        double v[4];
        if (sscanf(line + 1, "%lf,%lf,%lf,%lf", &v[0], &v[1], &v[2], &v[3]) != 4) break;
        tot[n++] = v[1] + v[2] + v[3];
        line = strchr(line + 1, '\n');
    }
    free(s);
    return n;
}

static void test_learn(void)
{
    if (!ok(make_data("l", 64, 96), "dataset made")) return;
    /*
     * Scratch-low with the geometric augmentation off (mosaic, scale, translate, flips) and lr0
     * 0.05, at 96 pixels: 64 images seen 60 times at batch 16 (240 batches; with the nominal
     * batch 64 about 60 optimizer steps), so that the loss visibly falls in a few CPU seconds.
     */
    char p[512];
    snprintf(p, sizeof p, "%s/hyp.learn.yaml", dir);
    FILE *f = fopen(p, "w");
    fputs("lr0: 0.05\nlrf: 0.01\nmomentum: 0.937\nweight_decay: 0.0005\nwarmup_epochs: 3.0\n"
          "warmup_momentum: 0.8\nwarmup_bias_lr: 0.1\nbox: 0.05\ncls: 0.5\ncls_pw: 1.0\nobj: 1.0\n"
          "obj_pw: 1.0\niou_t: 0.2\nanchor_t: 4.0\nfl_gamma: 0.0\nhsv_h: 0.015\nhsv_s: 0.7\n"
          "hsv_v: 0.4\ndegrees: 0.0\ntranslate: 0.0\nscale: 0.0\nshear: 0.0\nperspective: 0.0\n"
          "flipud: 0.0\nfliplr: 0.0\nmosaic: 0.0\nmixup: 0.0\ncopy_paste: 0.0\n",
          f);
    fclose(f);
    const int rc = run("%s --records %s/l.ffr --img 96 --batch-size 16 --epochs 60 --hyp %s "
                       "--cfg %s/learn_net.yaml --workers 1 --threads 2 --seed 3 --project %s/runs "
                       "--name learn",
                       train, dir, p, models, dir);
    is_int(rc, 0, "60 epochs on 64 images");
    if (rc) show_stderr();
    snprintf(p, sizeof p, "%s/runs/learn/results.csv", dir);
    double tot[64];
    const int n = read_losses(p, tot, 64);
    is_int(n, 60, "60 rows in results.csv");
    if (n < 60) return;
    for (int k = 0; k < n; k += 10)
        tap_diag("epoch %d: mean train loss (box+obj+cls) %.4f", k, tot[k]);
    tap_diag("epoch %d: mean train loss (box+obj+cls) %.4f", n - 1, tot[n - 1]);
    /*
     * Measured on the 2-core VM: epoch 0 0.173, epoch 30 0.143, epoch 59 0.109 (x0.63), the
     * box and class losses falling, objectness flat; in 11-15 s. The bound 0.75 leaves margin
     * for other BLAS builds and thread counts, while a run that does not learn stays near x0.9
     * (the warmup's bias lr alone moves the first epochs by that much).
     */
    ok(isfinite(tot[n - 1]) && tot[n - 1] < 0.75 * tot[0],
       "last epoch's loss %.4f < 0.75 x the first epoch's %.4f (ratio %.3f)", tot[n - 1], tot[0],
       tot[n - 1] / tot[0]);
    const double late = (tot[n - 1] + tot[n - 2] + tot[n - 3]) / 3;
    const double mid = (tot[n / 2] + tot[n / 2 + 1] + tot[n / 2 + 2]) / 3;
    ok(late < mid, "still falling in the second half (%.4f < %.4f)", late, mid);
}

static void test_outputs(void)
{
    if (!ok(make_data("o", 12, 64), "dataset made")) return;
    const char *hyp_text = "lr0: 0.02\nlrf: 0.1\nmomentum: 0.9\nweight_decay: 0.0005\n"
                           "warmup_epochs: 1.0\nwarmup_momentum: 0.8\nwarmup_bias_lr: 0.1\n"
                           "box: 0.05\ncls: 0.5\ncls_pw: 1.0\nobj: 1.0\nobj_pw: 1.0\niou_t: 0.2\n"
                           "anchor_t: 4.0\nfl_gamma: 0.0\nhsv_h: 0.015\nhsv_s: 0.7\nhsv_v: 0.4\n"
                           "degrees: 0.0\ntranslate: 0.1\nscale: 0.5\nshear: 0.0\n"
                           "perspective: 0.0\nflipud: 0.0\nfliplr: 0.5\nmosaic: 1.0\n"
                           "mixup: 0.0\ncopy_paste: 0.0\n";
    char p[512];
    snprintf(p, sizeof p, "%s/hyp.custom.yaml", dir);
    FILE *f = fopen(p, "w");
    fputs(hyp_text, f);
    fclose(f);
    /* from the dataset folder, default --project runs/train, twice: exp then exp2 */
    for (int k = 0; k < 2; k++) {
        const int rc = run("cd %s && %s --records o.ffr --img 64 --batch-size 4 --epochs 3 "
                           "--hyp hyp.custom.yaml --cos-lr --optimizer AdamW " TRAIN_ARGS,
                           dir, train, models);
        is_int(rc, 0, "run %d exits 0", k + 1);
        if (rc) show_stderr();
    }
    struct stat st;
    snprintf(p, sizeof p, "%s/runs/train/exp2/results.csv", dir);
    ok(stat(p, &st) == 0, "the second run went to runs/train/exp2");

    snprintf(p, sizeof p, "%s/runs/train/exp/results.csv", dir);
    char *csv = slurp(p, NULL);
    char want[1024] = "";
    static const char *const keys[] = {
        "epoch",
        "train/box_loss",
        "train/obj_loss",
        "train/cls_loss",
        "metrics/precision",
        "metrics/recall",
        "metrics/mAP_0.5",
        "metrics/mAP_0.5:0.95",
        "val/box_loss",
        "val/obj_loss",
        "val/cls_loss",
        "x/lr0",
        "x/lr1",
        "x/lr2",
    };
    for (int k = 0; k < 14; k++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%20s", k ? "," : "", keys[k]);
    strcat(want, "\n");
    ok(csv && !strncmp(csv, want, strlen(want)), "results.csv starts with ultralytics' header");
    int rows = 0, good_rows = 0;
    for (char *l = csv ? strchr(csv, '\n') : NULL; l && l[1]; l = strchr(l + 1, '\n')) {
        double v[14];
        const int got = sscanf(l + 1, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf",
                               &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
                               &v[10], &v[11], &v[12], &v[13]);
        /* 20-wide fields; metrics 0 until validation exists; lrs of AdamW > 0 */
        good_rows += got == 14 && v[0] == rows && v[1] > 0 && v[2] > 0 && v[4] == 0 && v[6] == 0 &&
                     v[11] > 0 && v[12] > 0 && l[21] == ',';
        rows++;
    }
    is_int(rows, 3, "one row per epoch");
    is_int(good_rows, 3, "rows: epoch number, losses > 0, metrics 0 (no validation yet), lr > 0");
    free(csv);

    snprintf(p, sizeof p, "%s/runs/train/exp/hyp.yaml", dir);
    struct trn_hyp h, want_h;
    char err[256];
    ok(trn_hyp_load(p, NULL, NULL, &h, err, sizeof err) == 0, "hyp.yaml parses");
    trn_hyp_parse(hyp_text, strlen(hyp_text), "custom", NULL, NULL, &want_h, err, sizeof err);
    ok(!memcmp(&h, &want_h, sizeof h), "hyp.yaml holds the --hyp values exactly");
    snprintf(p, sizeof p, "%s/runs/train/exp/opt.yaml", dir);
    char *opt = slurp(p, NULL);
    ok(opt && strstr(opt, "epochs: 3\n") && strstr(opt, "batch_size: 4\n") &&
           strstr(opt, "imgsz: 64\n") && strstr(opt, "optimizer: AdamW\n") &&
           strstr(opt, "cos_lr: true\n") && strstr(opt, "save_dir: "),
       "opt.yaml has the run's options");
    free(opt);
    snprintf(p, sizeof p, "%s/runs/train/exp/weights/last.ckpt", dir);
    ok(ckpt_ok(p), "weights/last.ckpt verifies (every record checksum) and is a checkpoint");
    ok(ckpt_meta_int(p, "epoch") == 3 && ckpt_meta_int(p, "step") == 0, "... at epoch 3, batch 0");
    char q[512];
    snprintf(q, sizeof q, "%s/runs/train/exp/weights/best.ckpt", dir);
    ok(ckpt_ok(q), "weights/best.ckpt verifies");
    const int rc = run("%s --records %s/o.ffr --img 64 --batch-size 4 --epochs 1 " TRAIN_ARGS
                       " --weights %s --project %s/runs --name fromckpt --stop-after-steps 1",
                       train, dir, models, p, dir);
    is_int(rc, 0, "--weights last.ckpt loads into a new run");
    if (rc) show_stderr();
    /* train.py's intersect_dicts: what fits moves, the rest starts fresh, and it is said */
    const int other = run("%s --records %s/o.ffr --img 64 --batch-size 4 --epochs 1 --cfg yolov5n "
                          "--weights %s --project %s/runs --name wrongmodel --stop-after-steps 1",
                          train, dir, p, dir);
    char *e = (snprintf(q, sizeof q, "%s/stdout.txt", dir), slurp(q, NULL));
    ok(other == 0 && e && strstr(e, "/349 items from ") && strstr(e, "last.ckpt"),
       "--weights of another model: trains, saying how many of yolov5n's 349 items came from it");
    free(e);
}

static void test_sigint(void)
{
    if (!ok(make_data("s", 16, 64), "dataset made")) return;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec %s --records %s/s.ffr --img 64 --batch-size 4 --epochs 1000 " TRAIN_ARGS
             " --project %s/runs --name sig >%s/stdout.txt 2>%s/stderr.txt",
             train, dir, models, dir, dir, dir);
    const pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/runs/sig/results.csv", dir);
    /* wait for the first epoch to finish (a row in results.csv), then interrupt mid-epoch 1 */
    struct stat st;
    int waited = 0;
    while (waited < 3000 && (stat(p, &st) != 0 || st.st_size < 400)) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        waited++;
    }
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 130, "SIGINT: exit status 130 (status %d)",
       status);
    snprintf(p, sizeof p, "%s/runs/sig/weights/last.ckpt", dir);
    ok(ckpt_ok(p), "last.ckpt was written and verifies");
    const long long ep = ckpt_meta_int(p, "epoch"), step = ckpt_meta_int(p, "step");
    ok(ep >= 1 && ep < 1000 && step >= 0 && step < 4,
       "at a position of the run (epoch %lld, "
       "batch %lld)",
       ep, step);
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    char *o = slurp(p, NULL);
    ok(o && strstr(o, "stopped at epoch"), "says where it stopped");
    free(o);
    const int rc = run("%s --resume %s/runs/sig --stop-after-steps 1", train, dir);
    is_int(rc, 0, "the interrupted run resumes");
    snprintf(p, sizeof p, "%s/runs/sig/weights/last.ckpt", dir);
    ok(ckpt_meta_int(p, "epoch") * 4 + ckpt_meta_int(p, "step") == ep * 4 + step + 1,
       "one batch further");
}

static void test_unwritable(void)
{
    if (!ok(make_data("u", 8, 64), "dataset made")) return;
    char p[512];
    snprintf(p, sizeof p, "%s/afile", dir);
    FILE *f = fopen(p, "w");
    fputs("x", f);
    fclose(f);
    /* a project below a regular file cannot be created (root ignores mode bits, so not chmod) */
    int rc = run("%s --records %s/u.ffr --img 64 --batch-size 4 --epochs 1 " TRAIN_ARGS
                 " --project %s/afile/runs",
                 train, dir, models, dir);
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    char *e = slurp(p, NULL);
    ok(rc == 1 && e && strstr(e, "afile/runs") && strstr(e, "Not a directory"),
       "unusable --project: exit 1 naming it (rc %d)", rc);
    free(e);
    /* a run directory whose weights/ is a file: refused before any training */
    snprintf(p, sizeof p, "%s/runs/w", dir);
    mkdir(dir, 0777);
    run("mkdir -p %s/runs/w && touch %s/runs/w/weights", dir, dir);
    rc = run("%s --records %s/u.ffr --img 64 --batch-size 4 --epochs 1 " TRAIN_ARGS
             " --project %s/runs --name w --exist-ok",
             train, dir, models, dir);
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    e = slurp(p, NULL);
    ok(rc == 1 && e && strstr(e, "weights") && strstr(e, "cannot write checkpoints"),
       "weights/ not a directory: exit 1 before training (rc %d)", rc);
    free(e);
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    char *o = slurp(p, NULL);
    ok(o && !strstr(o, "0/0"), "no epoch ran");
    free(o);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        printf("usage: test_train_run YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR MODE\n");
        return 99;
    }
    static char abs_train[PATH_MAX];
    if (!realpath(argv[1], abs_train)) return 99;
    train = abs_train;
    synth = argv[2];
    pack = argv[3];
    models = argv[4];
    snprintf(dir, sizeof dir, "/tmp/test_train_run_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    const char *mode = argv[5];
    if (!strcmp(mode, "resume"))
        test_resume();
    else if (!strcmp(mode, "learn"))
        test_learn();
    else if (!strcmp(mode, "outputs"))
        test_outputs();
    else if (!strcmp(mode, "sigint"))
        test_sigint();
    else if (!strcmp(mode, "unwritable"))
        test_unwritable();
    else
        return 99;
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
