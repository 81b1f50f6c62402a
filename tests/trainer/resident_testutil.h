/*
 * What the tests of the GPU training path on the CPU ops share (test_train_resident.c,
 * test_train_graph.c): a synthetic dataset, the run's stderr as diagnostics, and two runs
 * compared byte for byte (last.ckpt's state records, its counters and loss sums, results.csv).
 * Header-only (static inline). Include after run_testutil.h, ffr.h and tap.h.
 */
#ifndef RESIDENT_TESTUTIL_H
#define RESIDENT_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_testutil.h"

static inline void show_stderr(void)
{
    char p[300];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    char *e = slurp(p, NULL);
    for (char *l = e ? strtok(e, "\n") : NULL; l; l = strtok(NULL, "\n"))
        tap_diag("stderr: %s", l);
    free(e);
}

static inline bool file_has(const char *name, const char *needle)
{
    char p[300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *t = slurp(p, NULL);
    const bool has = t && strstr(t, needle);
    free(t);
    return has;
}

/* dir/NAME.ffr: n synth images of 3 classes packed at img (programs synth and pack). */
static inline int make_data(const char *synth, const char *pack, const char *name, int n, int img)
{
    return run("%s %s/synth_%s --split train2017=%d --seed 11 --min-side %d --max-side %d "
               "--format yolo --classes 3 --max-objects 4",
               synth, dir, name, n, img / 2, img * 2) == 0 &&
           run("%s %s/synth_%s/synth.yaml -o %s/%s.ffr --size %d -q -j 1", pack, dir, name, dir,
               name, img) == 0;
}

/* Records 0 .. 7 of a checkpoint (model, buffers, counts, EMA x2, optimizer x2, gradients). */
static inline char *ckpt_state(const char *path, size_t *len)
{
    return ckpt_records(path, 8, len, NULL);
}

/* The checkpoint's metadata lines of the counters and loss sums, concatenated. */
static inline char *ckpt_counters(const char *path)
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
static inline void same_run(const char *a, const char *b, const char *what)
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
    if (ca && cb && strcmp(ca, cb)) {
        for (char *l = strtok(ca, "\n"); l; l = strtok(NULL, "\n"))
            tap_diag("  %s: %s", a, l);
        for (char *l = strtok(cb, "\n"); l; l = strtok(NULL, "\n"))
            tap_diag("  %s: %s", b, l);
    }
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

#endif
