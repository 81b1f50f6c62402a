/*
 * What the distributed-training tests (test_dist_train.c, test_dist_syncbn.c,
 * test_dist_overlap.c) share beyond run_testutil.h: a file of the scratch directory as text, a
 * no-augmentation hyp, the float records of a run's last checkpoint compared between two runs,
 * and the paired dataset on which 2 ranks x batch 2 equals 1 rank x batch 4. Header-only
 * (static inline). Include after run_testutil.h, ffr.h, sampler.h and tap.h.
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

/* yolo-synth (program synth) makes dir/synth_NAME: n small images of 3 classes, YOLO layout. */
static inline int dist_make_synth(const char *synth, const char *name, int n)
{
    return run("%s %s/synth_%s --split train2017=%d --seed 5 --min-side 48 --max-side 128 "
               "--format yolo --classes 3 --max-objects 3",
               synth, dir, name, n) == 0;
}

/*
 * dir/NAME.ffr (packed by the program pack): 2n records from n synth images, each image twice,
 * placed so that for seed `seed` the epoch-0 positions 4k, 4k+1 (rank 0 and rank 1 of global
 * step k at 2 ranks) hold the same image, and so do 4k+2, 4k+3: per-rank BatchNorm statistics
 * then equal the global batch's. yolo-pack orders a folder's files by name, so record i is file i.
 */
static inline int dist_make_paired(const char *synth, const char *pack, const char *name, int n,
                                   uint64_t seed)
{
    if (!dist_make_synth(synth, name, n)) return 0;
    struct trn_sampler s;
    struct trn_sampler_opts so;
    trn_sampler_opts_default(&so);
    so.n = (uint64_t)2 * (uint64_t)n;
    so.seed = seed;
    if (trn_sampler_init(&s, &so) < 0) return 0;
    trn_sampler_set_epoch(&s, 0);
    if (run("mkdir -p %s/%s/images/train %s/%s/labels/train", dir, name, dir, name)) return 0;
    for (int g = 0; g < 2 * n; g++) {
        const int src = g / 2 + 1; /* positions 2j and 2j+1 share synth image j */
        const uint64_t rec = trn_sampler_index(&s, (uint64_t)g);
        if (run("cp %s/synth_%s/images/train2017/%012d.jpg %s/%s/images/train/%03llu.jpg && "
                "(cp %s/synth_%s/labels/train2017/%012d.txt %s/%s/labels/train/%03llu.txt "
                "2>/dev/null || true)",
                dir, name, src, dir, name, (unsigned long long)rec, dir, name, src, dir, name,
                (unsigned long long)rec))
            return 0;
    }
    return run("%s %s/%s -o %s/%s.ffr --size 64 -q -j 1 --names a,b,c", pack, dir, name, dir,
               name) == 0;
}

#endif
