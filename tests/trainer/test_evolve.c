/*
 * --evolve's pieces (trainer/train/evolve.h) against train.py: the meta table's order, gains and
 * limits; the constraint and rounding; the parent selection and mutation (repeatable from the
 * seed, within the 0.3..3 factors, gain-0 keys untouched, the fittest parent chosen); and the
 * files as print_mutation writes them (evolve.csv's '%20s' / '%20.5g' columns, hyp_evolve.yaml's
 * best row), read back; damaged files (cut short, NaN, NUL, FIFO, 65 MiB) refused by name.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evolve.h"
#include "plots.h"
#include "tap.h"

static int find(const char *name, bool anchors)
{
    const struct trn_evolve_key *k;
    const int n = trn_evolve_keys(anchors, &k);
    for (int i = 0; i < n; i++)
        if (!strcmp(k[i].name, name)) return i;
    return -1;
}

static void test_keys(void)
{
    const struct trn_evolve_key *k;
    const int n = trn_evolve_keys(true, &k), m = trn_evolve_keys(false, NULL);
    ok(n == 29 && m == 28 && !strcmp(k[0].name, "lr0") && !strcmp(k[27].name, "copy_paste") &&
           !strcmp(k[28].name, "anchors"),
       "29 keys: hyp.scratch-low's 28 in order, anchors last (28 with --noautoanchor)");
    const int mo = find("momentum", true), an = find("anchors", true);
    ok(k[mo].gain == 0.3 && k[mo].lo == 0.6 && k[mo].hi == 0.98 && k[an].gain == 2 &&
           k[an].lo == 2 && k[an].hi == 10,
       "meta: momentum (0.3, 0.6, 0.98), anchors (2, 2, 10)");
    struct trn_hyp h;
    trn_hyp_default(&h);
    double v[TRN_EVOLVE_MAX];
    trn_evolve_from_hyp(&h, true, v);
    ok(v[0] == 0.01 && v[an] == 3, "from the default hyp: lr0 0.01, anchors 3 (train.py's)");
    v[0] = 1.0;          /* above lr0's 0.1 */
    v[mo] = 0.1;         /* below momentum's 0.6 */
    v[1] = 0.0123456789; /* lrf: 5 decimals */
    v[an] = 4.5;
    trn_evolve_constrain(v, true);
    ok(v[0] == 0.1 && v[mo] == 0.6 && v[1] == 0.01235, "clamped to the limits, 5 decimals");
    trn_evolve_to_hyp(v, true, &h);
    ok(h.lr0 == 0.1 && h.momentum == 0.6 && h.anchors == 4,
       "into the hyp, anchors rounded half to even (4.5 -> 4)");
}

static void test_mutate(void)
{
    const int n = trn_evolve_keys(true, NULL), w = TRN_EVOLVE_RESULT + n;
    enum { ROWS = 7 };
    double rows[ROWS * (TRN_EVOLVE_RESULT + TRN_EVOLVE_MAX)];
    struct trn_hyp h;
    trn_hyp_default(&h);
    for (int r = 0; r < ROWS; r++) {
        double *row = rows + r * w;
        memset(row, 0, TRN_EVOLVE_RESULT * sizeof *row);
        row[3] = r == 4 ? 0.9 : 0; /* row 4 is the fittest: the others weigh 1e-6 */
        trn_evolve_from_hyp(&h, true, row + TRN_EVOLVE_RESULT);
        row[TRN_EVOLVE_RESULT] = r == 4 ? 0.05 : 0.001; /* its lr0 marks it */
    }
    double a[TRN_EVOLVE_MAX], b[TRN_EVOLVE_MAX], c[TRN_EVOLVE_MAX];
    trn_evolve_mutate(rows, ROWS, true, 3, 7, a);
    trn_evolve_mutate(rows, ROWS, true, 3, 7, b);
    trn_evolve_mutate(rows, ROWS, true, 3, 8, c);
    ok(!memcmp(a, b, sizeof(double) * n) && memcmp(a, c, sizeof(double) * n),
       "repeatable from (seed, generation); another generation mutates otherwise");
    const double *best = rows + 4 * w + TRN_EVOLVE_RESULT;
    const struct trn_evolve_key *k;
    trn_evolve_keys(true, &k);
    int within = 1, fixed = 1, changed = 0, parent = 1;
    for (int g = 0; g < 50; g++) {
        trn_evolve_mutate(rows, ROWS, true, 9, (uint32_t)g, a);
        parent &= a[0] >= 0.05 * 0.3 - 1e-12 && a[0] <= 0.05 * 3 + 1e-12;
        for (int i = 0; i < n; i++) {
            const double f = best[i] ? a[i] / best[i] : 1;
            within &= best[i] == 0 ? a[i] == 0 : f >= 0.3 - 1e-12 && f <= 3 + 1e-12;
            if (k[i].gain == 0) fixed &= a[i] == best[i];
            changed += a[i] != best[i];
        }
    }
    ok(parent, "the fittest of the top 5 is the parent (weights fitness - min + 1e-6)");
    /* weighted, not the best alone: fitness 0.9 * (0.5, 0.45, 0...) gives the second row
     * weight 0.405 / (0.45 + 0.405) = 0.47 */
    for (int r = 0; r < ROWS; r++)
        rows[r * w + 3] = r == 4 ? 0.5 : r == 2 ? 0.45 : 0;
    rows[2 * w + TRN_EVOLVE_RESULT] = 0.002;
    int second = 0;
    for (int g = 0; g < 200; g++) {
        trn_evolve_mutate(rows, ROWS, true, 9, (uint32_t)g, a);
        second += a[0] < 0.01; /* from 0.002: <= 0.006; from 0.05: >= 0.015 */
    }
    const double p2 = 0.405 / 0.855;
    ok(fabs(second - 200 * p2) < 5 * sqrt(200 * p2 * (1 - p2)),
       "random.choices by weight: the runner-up is the parent %d of 200 times (%.0f expected)",
       second, 200 * p2);
    ok(within && fixed && changed > 50 * 5,
       "each factor in [0.3, 3], gain-0 keys (iou_t, fl_gamma, perspective, fliplr) untouched, "
       "%d of %d values mutated",
       changed, 50 * n);
}

static void test_files(void)
{
    char dir[] = "/tmp/test_evolve_XXXXXX";
    if (!ok(mkdtemp(dir) != NULL, "scratch directory")) return;
    const int n = trn_evolve_keys(false, NULL), w = TRN_EVOLVE_RESULT + n;
    struct trn_hyp h;
    trn_hyp_default(&h);
    double v[TRN_EVOLVE_MAX], *rows = NULL;
    int nr = -1;
    char err[512] = "", msg[8192] = "";
    ok(trn_evolve_csv_read(dir, false, &rows, &nr, err, sizeof err) == 0 && nr == 0 && !rows,
       "no evolve.csv: no generations yet");
    const double res[3][TRN_EVOLVE_RESULT] = { { 0.5, 0.4, 0.30, 0.10, 0.05, 0.02, 0.01 },
                                               { 0.6, 0.5, 0.45, 0.25, 0.04, 0.02, 0.01 },
                                               { 0.4, 0.3, 0.20, 0.08, 0.06, 0.03, 0.02 } };
    int rc = 0;
    for (int g = 0; g < 3 && rc == 0; g++) {
        trn_evolve_from_hyp(&h, false, v);
        v[0] = 0.01 + 0.001 * g + 1.234e-7; /* beyond %.5g */
        rc = trn_evolve_record(dir, false, res[g], v, msg, sizeof msg, err, sizeof err);
    }
    ok(rc == 0 && strstr(msg, "evolve: 3 generations finished, current result:\nevolve: ") &&
           strstr(msg, "   metrics/precision,       metrics/recall,"),
       "three generations recorded, with print_mutation's lines (%s)", err);
    char path[256], line[4096];
    snprintf(path, sizeof path, "%s/evolve.csv", dir);
    FILE *f = fopen(path, "r");
    int lines = 0, header = 0, row = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (lines == 0)
            header = !strncmp(line,
                              "   metrics/precision,      metrics/recall,     metrics/mAP_0.5,"
                              "metrics/mAP_0.5:0.95,",
                              82);
        if (lines == 1) row = !strncmp(line, "                 0.5,                 0.4,", 42);
        lines++;
    }
    if (f) fclose(f);
    ok(lines == 4 && header && row, "evolve.csv: a '%%20s' header and '%%20.5g' rows");
    rc = trn_evolve_csv_read(dir, false, &rows, &nr, err, sizeof err);
    ok(rc == 0 && nr == 3 && rows[w + 2] == 0.45 && rows[2 * w + TRN_EVOLVE_RESULT] == 0.012,
       "read back: 3 rows, values as printed (%%.5g: 0.0120001234 -> 0.012)");
    free(rows);
    snprintf(path, sizeof path, "%s/hyp_evolve.yaml", dir);
    f = fopen(path, "r");
    int best = 0, lr = 0, wu = 0;
    while (f && fgets(line, sizeof line, f)) {
        best |= !strcmp(line, "# Best generation: 1\n");
        lr |= !strcmp(line, "lr0: 0.011\n");
        wu |= !strcmp(line, "warmup_epochs: 3.0\n");
    }
    if (f) fclose(f);
    ok(best && lr && wu,
       "hyp_evolve.yaml: the fittest generation (1) and its values as yaml.safe_dump writes them");
    ok(trn_evolve_plot(dir, false, msg, sizeof msg, err, sizeof err) == 0 &&
           strstr(msg, "Best results from row 1 of") && strstr(msg, "            lr0: 0.011"),
       "evolve.png drawn, the best row named (%s)", err);
    snprintf(path, sizeof path, "%s/evolve.png", dir);
    ok(access(path, R_OK) == 0, "evolve.png exists");
    /* another run's columns (with anchors) are refused, naming the file */
    rc = trn_evolve_csv_read(dir, true, &rows, &nr, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "evolve.csv:1:"), "other columns refused: %s", err);
    snprintf(path, sizeof path, "%s/evolve.csv", dir);
    f = fopen(path, "a");
    if (f) fputs("1,2,x\n", f), fclose(f);
    rc = trn_evolve_csv_read(dir, false, &rows, &nr, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "evolve.csv:5:"), "a bad row refused by line: %s", err);
    /* damaged files: a row cut short, a NaN, a FIFO, an absurd size; each named, none read */
    f = fopen(path, "w");
    if (f) {
        char hdr[2048] = "";
        for (int c = 0; c < w; c++) {
            const struct trn_evolve_key *kk;
            trn_evolve_keys(false, &kk);
            static const char *const r7[7] = { "metrics/precision", "metrics/recall",
                                               "metrics/mAP_0.5",   "metrics/mAP_0.5:0.95",
                                               "val/box_loss",      "val/obj_loss",
                                               "val/cls_loss" };
            strcat(hdr, c < 7 ? r7[c] : kk[c - 7].name);
            strcat(hdr, c + 1 < w ? "," : "\n");
        }
        fputs(hdr, f);
        fputs("0.5,0.4,0.3\n", f); /* truncated row */
        fclose(f);
    }
    rc = trn_evolve_csv_read(dir, false, &rows, &nr, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "evolve.csv:2:"), "a row cut short: %s", err);
    f = fopen(path, "a");
    if (f) fputs("x\n", f), fclose(f);
    char text[8192];
    f = fopen(path, "r");
    size_t tl = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[tl] = '\0';
    /* the header alone parses; then a row of NaN */
    char *nl = strchr(text, '\n');
    size_t hl = nl ? (size_t)(nl - text) + 1 : 0;
    ok(trn_evolve_csv_parse(text, hl, "h.csv", false, &rows, &nr, err, sizeof err) == 0 && nr == 0,
       "the header alone: no generations");
    char nan_row[4096];
    memcpy(nan_row, text, hl);
    size_t at = hl;
    for (int c = 0; c < w; c++)
        at += (size_t)snprintf(nan_row + at, sizeof nan_row - at, "%s%s", c == 3 ? "nan" : "1",
                               c + 1 < w ? "," : "\n");
    rc = trn_evolve_csv_parse(nan_row, at, "n.csv", false, &rows, &nr, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "n.csv:2:"), "a NaN refused: %s", err);
    nan_row[hl + 1] = '\0'; /* a NUL inside a row */
    rc = trn_evolve_csv_parse(nan_row, at, "z.csv", false, &rows, &nr, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "z.csv:2:"), "a NUL byte refused: %s", err);
    unlink(path);
    ok(mkfifo(path, 0600) == 0 &&
           trn_evolve_csv_read(dir, false, &rows, &nr, err, sizeof err) < 0 &&
           strstr(err, "evolve.csv"),
       "a FIFO is refused, not waited on: %s", err);
    unlink(path);
    f = fopen(path, "w");
    if (f) fclose(f);
    ok(truncate(path, (off_t)65 << 20) == 0 &&
           trn_evolve_csv_read(dir, false, &rows, &nr, err, sizeof err) == -EFBIG,
       "a 65 MiB evolve.csv is refused unread: %s", err);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)!system(cmd);
}

int main(void)
{
    test_keys();
    test_mutate();
    test_files();
    trn_plots_cleanup();
    return tap_done();
}
