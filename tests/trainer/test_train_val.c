/*
 * Validation inside yolo-train (trainer/train/train.h VALIDATION) and yolo-val on our checkpoints,
 * on yolo-synth train / val splits packed by yolo-pack. One program, two modes (meson tests): val
 * a short run with --val-records: results.csv metric columns are numbers in [0, 1], val losses > 0,
 * best.ckpt is the epoch of the best fitness (results.csv against the checkpoint metadata),
 * results.png decodes at 2400 x 1200; yolo-val on best.ckpt prints the table and its mAPs equal
 * that epoch's row (same weights, same data) learn  a CI-sized run reaches a clearly non-trivial
 * mAP50 on the held-out split usage: test_train_val YOLO_TRAIN YOLO_VAL YOLO_SYNTH YOLO_PACK
 * MODELS_TEST_DIR MODE
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cairo.h>

#include "ffr.h"
#include "run_testutil.h"
#include "tap.h"

#define COLS 14

static const char *train, *val, *synth, *pack, *models;

static void show_output(void)
{
    char p[300];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    char *e = slurp(p, NULL);
    if (e && e[0]) tap_diag("stderr: %.2000s", e);
    free(e);
}

/* Train and val splits of simple scenes (2 classes, at most 2 objects) packed at img. */
static int make_data(int n_train, int n_val, int img)
{
    return run("%s %s/synth --split train2017=%d --split val2017=%d --seed 11 --classes 2 "
               "--max-objects 2 --min-side %d --max-side %d --format yolo",
               synth, dir, n_train, n_val, img * 2 / 3, img * 4 / 3) == 0 &&
           run("%s %s/synth/synth.yaml -o %s/tr.ffr --size %d -q -j 1", pack, dir, dir, img) == 0 &&
           run("%s %s/synth/synth.yaml --split val -o %s/va.ffr --size %d -q -j 1", pack, dir, dir,
               img) == 0;
}

/* Scratch-low with mosaic and the geometric augmentation off and lr0 0.05 (the loss test's). */
static void write_hyp(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("lr0: 0.05\nlrf: 0.01\nmomentum: 0.937\nweight_decay: 0.0005\nwarmup_epochs: 3.0\n"
          "warmup_momentum: 0.8\nwarmup_bias_lr: 0.1\nbox: 0.05\ncls: 0.5\ncls_pw: 1.0\nobj: 1.0\n"
          "obj_pw: 1.0\niou_t: 0.2\nanchor_t: 4.0\nfl_gamma: 0.0\nhsv_h: 0.015\nhsv_s: 0.7\n"
          "hsv_v: 0.4\ndegrees: 0.0\ntranslate: 0.0\nscale: 0.0\nshear: 0.0\nperspective: 0.0\n"
          "flipud: 0.0\nfliplr: 0.0\nmosaic: 0.0\nmixup: 0.0\ncopy_paste: 0.0\n",
          f);
    fclose(f);
}

/* results.csv rows into v[row][col]; returns the row count or -1 (header or a field bad). */
static int read_results(const char *path, double v[][COLS], int max_rows)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = -1;
    if (fgets(line, sizeof line, f) && strstr(line, "metrics/mAP_0.5:0.95") &&
        strstr(line, "val/cls_loss")) {
        n = 0;
        while (n < max_rows && fgets(line, sizeof line, f)) {
            char *p = line;
            for (int c = 0; c < COLS; c++) {
                char *end = NULL;
                v[n][c] = strtod(p, &end);
                if (end == p || (c < COLS - 1 && *end != ',')) {
                    fclose(f);
                    return -1;
                }
                p = end + 1;
            }
            n++;
        }
    }
    fclose(f);
    return n;
}

/* A number after "key: " in the checkpoint's metadata (first match at a line start). */
static int meta_num(const char *ckpt, const char *key, double *out)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, ckpt, NULL, NULL, 0) < 0) return -1;
    size_t len = 0;
    const char *m = ffr_reader_metadata(r, &len);
    char want[64];
    snprintf(want, sizeof want, "\n%s: ", key);
    int rc = -1;
    char *copy = m ? strndup(m, len) : NULL;
    const char *at = copy ? strstr(copy, want) : NULL;
    if (at) {
        *out = strtod(at + strlen(want), NULL);
        rc = 0;
    }
    free(copy);
    ffr_reader_close(r);
    return rc;
}

static double fitness(const double *row)
{
    return 0.1 * row[6] + 0.9 * row[7];
}

static void test_val(void)
{
    if (!ok(make_data(32, 16, 96), "train and val splits made")) return;
    char hyp[300], p[400];
    snprintf(hyp, sizeof hyp, "%s/hyp.yaml", dir);
    write_hyp(hyp);
    const int epochs = 6;
    int rc = run("%s --records %s/tr.ffr --val-records %s/va.ffr --img 96 --batch-size 8 "
                 "--epochs %d --hyp %s --cfg %s/learn_net.yaml --workers 1 --threads 2 --seed 3 "
                 "--project %s/runs --name v",
                 train, dir, dir, epochs, hyp, models, dir);
    is_int(rc, 0, "yolo-train with --val-records");
    if (rc) show_output();
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    char *out = slurp(p, NULL);
    ok(out && strstr(out, "mAP50-95") && strstr(out, "                   all"),
       "the val table is printed each epoch");
    free(out);
    double v[16][COLS];
    snprintf(p, sizeof p, "%s/runs/v/results.csv", dir);
    const int n = read_results(p, v, 16);
    if (!ok(n == epochs, "one results.csv row per epoch (%d)", n)) return;
    int in01 = 1, losses = 1, nonzero = 0, best = 0;
    for (int k = 0; k < n; k++) {
        for (int c = 4; c <= 7; c++) {
            in01 &= v[k][c] >= 0 && v[k][c] <= 1;
            nonzero |= v[k][c] > 0;
        }
        for (int c = 8; c <= 10; c++)
            losses &= isfinite(v[k][c]) && v[k][c] > 0;
        if (fitness(v[k]) >= fitness(v[best])) best = k; /* ties: the later epoch saves best */
        tap_diag("epoch %d: P %.4f R %.4f mAP50 %.4f mAP %.4f val loss %.4f %.4f %.4f", k, v[k][4],
                 v[k][5], v[k][6], v[k][7], v[k][8], v[k][9], v[k][10]);
    }
    ok(in01, "metrics/* are in [0, 1]");
    ok(nonzero, "metrics/* are computed (not the 0 placeholder)");
    ok(losses, "val/box, obj and cls losses are > 0");
    /* the val losses are ComputeLoss of the EMA weights on the val split: the same scale as the
     * training losses (within x3), not another quantity */
    ok(v[n - 1][8] < 3 * v[n - 1][1] && v[n - 1][8] > v[n - 1][1] / 3,
       "val/box_loss %.4f is of the scale of train/box_loss %.4f", v[n - 1][8], v[n - 1][1]);

    char best_ckpt[400];
    snprintf(best_ckpt, sizeof best_ckpt, "%s/runs/v/weights/best.ckpt", dir);
    double ep = -1, bf = -1;
    ok(meta_num(best_ckpt, "epoch", &ep) == 0 && meta_num(best_ckpt, "best_fitness", &bf) == 0,
       "best.ckpt has epoch and best_fitness");
    is_int((int)ep, best + 1, "best.ckpt is the epoch of the best fitness (%d)", best);
    ok(fabs(bf - fitness(v[best])) < 1e-4, "best_fitness %.6f == max fitness %.6f", bf,
       fitness(v[best]));

    snprintf(p, sizeof p, "%s/runs/v/results.png", dir);
    cairo_surface_t *s = cairo_image_surface_create_from_png(p);
    ok(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS &&
           cairo_image_surface_get_width(s) == 2400 && cairo_image_surface_get_height(s) == 1200,
       "results.png decodes, 2400 x 1200");
    cairo_surface_destroy(s);

    /* yolo-val on best.ckpt: the same EMA weights on the same records, batch 2 x 8 as in training
     */
    rc = run("%s --records %s/va.ffr --weights %s --img 96 --batch-size 16 --workers 1 --json", val,
             dir, best_ckpt);
    is_int(rc, 0, "yolo-val --weights best.ckpt");
    if (rc) show_output();
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    out = slurp(p, NULL);
    const char *m50 = out ? strstr(out, "\"map50\"") : NULL;
    const char *m95 = out ? strstr(out, "\"map50_95\"") : NULL;
    double a = m50 ? strtod(strchr(m50, ':') + 1, NULL) : -1;
    double b = m95 ? strtod(strchr(m95, ':') + 1, NULL) : -1;
    ok(m50 && fabs(a - v[best][6]) <= 1e-4 + 1e-5 * fabs(a),
       "yolo-val mAP50 %.6f == results.csv epoch %d %.6f", a, best, v[best][6]);
    ok(m95 && fabs(b - v[best][7]) <= 1e-4 + 1e-5 * fabs(b),
       "yolo-val mAP50-95 %.6f == results.csv epoch %d %.6f", b, best, v[best][7]);
    free(out);
    rc = run("%s --records %s/va.ffr --weights %s --img 96 --batch-size 16 --workers 1", val, dir,
             best_ckpt);
    out = slurp(p, NULL);
    ok(rc == 0 && out && strstr(out, "mAP50-95") && strstr(out, "rectangle"),
       "yolo-val prints the per-class table with the dataset's names");
    free(out);
}

static void test_learn(void)
{
    if (!ok(make_data(64, 32, 96), "train and val splits made")) return;
    char hyp[300], p[400];
    snprintf(hyp, sizeof hyp, "%s/hyp.yaml", dir);
    write_hyp(hyp);
    const int rc = run("%s --records %s/tr.ffr --val-records %s/va.ffr --img 96 --batch-size 16 "
                       "--epochs 60 --hyp %s --cfg %s/learn_net.yaml --workers 1 --threads 2 "
                       "--seed 3 --project %s/runs --name learn",
                       train, dir, dir, hyp, models, dir);
    is_int(rc, 0, "60 epochs with validation");
    if (rc) show_output();
    double v[64][COLS];
    snprintf(p, sizeof p, "%s/runs/learn/results.csv", dir);
    const int n = read_results(p, v, 64);
    if (!ok(n == 60, "60 rows in results.csv (%d)", n)) return;
    for (int k = 0; k < n; k += 10)
        tap_diag("epoch %d: mAP50 %.4f mAP50-95 %.4f", k, v[k][6], v[k][7]);
    const double last = (v[n - 1][6] + v[n - 2][6] + v[n - 3][6]) / 3;
    /*
     * Measured on the 2-core VM (64 train / 32 held-out val images at 96 px, 2 classes, <= 2
     * objects, learn_net.yaml, 60 epochs, ~20 s): mAP50 0.0014 after epoch 0 (the untrained
     * net: random boxes), then a steep rise between epochs 40 and 60 whose timing depends on the
     * build's floating-point summation order: the last three epochs average 0.41 in the -O2
     * build and 0.14 in the -O3 release build (same seed; the trajectories part once rounding
     * differs). The threshold 0.07 is half of the lower one and 50x the untrained value: a net
     * that does not learn, or a validator that mismatches boxes, stays far below it.
     */
    ok(v[0][6] < 0.05, "epoch 0 mAP50 %.4f is near 0 (untrained)", v[0][6]);
    ok(last > 0.07, "mean mAP50 of the last 3 epochs %.4f > 0.07 on the held-out split", last);
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        printf("usage: test_train_val YOLO_TRAIN YOLO_VAL YOLO_SYNTH YOLO_PACK MODELS_DIR MODE\n");
        return 99;
    }
    train = argv[1];
    val = argv[2];
    synth = argv[3];
    pack = argv[4];
    models = argv[5];
    const char *mode = argv[6];
    snprintf(dir, sizeof dir, "/tmp/test_train_val.%ld.XXXXXX", (long)getpid());
    if (!mkdtemp(dir)) return 99;
    if (!strcmp(mode, "val"))
        test_val();
    else if (!strcmp(mode, "learn"))
        test_learn();
    else
        return 99;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (tap_n_failed == 0 && system(cmd) != 0) tap_diag("could not remove %s", dir);
    return tap_done();
}
