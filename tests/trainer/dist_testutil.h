/*
 * What the distributed-training tests (test_dist_train.c, test_dist_syncbn.c) share beyond
 * run_testutil.h: a file of the scratch directory as text, a no-augmentation hyp, and the float
 * records of a run's last checkpoint compared between two runs. Header-only (static inline).
 * Include after run_testutil.h, ffr.h and tap.h.
 */
#ifndef DIST_TESTUTIL_H
#define DIST_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dir/name as text ("" when it cannot be read; never NULL unless out of memory). Free it. */
static inline char *file_in(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *s = slurp(p, NULL);
    return s ? s : calloc(1, 1);
}

/* dir/name as a TAP comment when it is not empty. */
static inline void show(const char *name)
{
    char *e = file_in(name);
    if (e && e[0]) tap_diag("%s: %s", name, e);
    free(e);
}

/* dir/hyp.noaug.yaml: scratch-low with every augmentation off, so that each training sample is
 * its own letterboxed image. Returns its path (static), or NULL. */
static inline const char *write_hyp(void)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/hyp.noaug.yaml", dir);
    FILE *f = fopen(p, "w");
    if (!f) return NULL;
    fputs("lr0: 0.02\nlrf: 0.01\nmomentum: 0.937\nweight_decay: 0.0005\nwarmup_epochs: 3.0\n"
          "warmup_momentum: 0.8\nwarmup_bias_lr: 0.1\nbox: 0.05\ncls: 0.5\ncls_pw: 1.0\nobj: 1.0\n"
          "obj_pw: 1.0\niou_t: 0.2\nanchor_t: 4.0\nfl_gamma: 0.0\nhsv_h: 0.0\nhsv_s: 0.0\n"
          "hsv_v: 0.0\ndegrees: 0.0\ntranslate: 0.0\nscale: 0.0\nshear: 0.0\nperspective: 0.0\n"
          "flipud: 0.0\nfliplr: 0.0\nmosaic: 0.0\nmixup: 0.0\ncopy_paste: 0.0\n",
          f);
    fclose(f);
    return p;
}

/* The floats of checkpoint record `record` ("model.param", "ema.param", ...) of run NAME
 * (dir/runs/NAME/weights/last.ckpt), malloc'd, *n of them; NULL (and *n 0) when absent. */
static inline float *ckpt_floats(const char *name, const char *record, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/runs/%s/weights/last.ckpt", dir, name);
    struct ffr_reader *r = NULL;
    *n = 0;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return NULL;
    float *out = NULL;
    for (uint64_t i = 0; i < ffr_reader_count(r) && !out; i++) {
        struct ffr_record_info ri;
        if (ffr_reader_info(r, i, &ri) < 0 || ri.summary_len != strlen(record) ||
            memcmp(ri.summary, record, ri.summary_len))
            continue;
        out = malloc(ri.raw_len + 4);
        if (out && ffr_reader_read(r, NULL, i, out, ri.raw_len) == (int64_t)ri.raw_len)
            *n = ri.raw_len / 4;
    }
    ffr_reader_close(r);
    return out;
}

/* The largest |a - b| / (1e-3 + |b|) over record rec of runs run_a and run_b (NaN wins), or -1
 * when either is missing, their sizes differ or they hold no more than min_n floats. */
static inline double rel_diff(const char *run_a, const char *run_b, const char *rec, size_t min_n)
{
    size_t na = 0, nb = 0;
    float *a = ckpt_floats(run_a, rec, &na), *b = ckpt_floats(run_b, rec, &nb);
    double worst = -1;
    if (a && b && na == nb && na > min_n) {
        worst = 0;
        for (size_t i = 0; i < na; i++) {
            const double d = fabs((double)a[i] - (double)b[i]) / (1e-3 + fabs((double)b[i]));
            if (!(d <= worst)) worst = d;
        }
    }
    free(a);
    free(b);
    return worst;
}

#endif
