/*
 * evolve: train.py's hyperparameter evolution (--evolve N; ultralytics v7.0 train.py main() and
 * utils/general.py print_mutation), the parts that are not training.
 *
 * A generation trains with a hyperparameter vector and appends its results and the vector to
 * evolve.csv. The next vector: the best min(5, rows) rows of evolve.csv by fitness
 * (0.1 mAP@0.5 + 0.9 mAP@0.5:0.95), one chosen with weights fitness - min + 1e-6
 * (random.choices), each value multiplied by v = clip(gain * (u < 0.8) * N(0, 1) * u' * 0.2 + 1,
 * 0.3, 3.0) (u per value, u' one per try; redrawn while every v is 1); then every value is
 * clamped to its [lower, upper] limits and rounded to 5 decimals. The first generation (no
 * evolve.csv) uses the given hyperparameters, clamped and rounded. Keys, gains and limits are
 * train.py's `meta` table; the order is hyp.scratch-low.yaml's with `anchors` last (train.py
 * appends it, 3, when the hyp file has none), and without `anchors` under --noautoanchor.
 * Draws come from the project's Philox stream TRN_STREAM_EVOLVE of (seed, generation), so an
 * evolution is repeatable; train.py seeds numpy with the time.
 *
 * The files are print_mutation's: evolve.csv (header of '%20s' keys, rows of '%20.5g' values,
 * comma-separated: the 7 results metrics/precision, metrics/recall, metrics/mAP_0.5,
 * metrics/mAP_0.5:0.95, val/box_loss, val/obj_loss, val/cls_loss, then the hyperparameters) and
 * hyp_evolve.yaml (the best row's hyperparameters under a comment header), rewritten each
 * generation. Errors are negative errno values with a line in err naming the file.
 */
#ifndef TRN_EVOLVE_H
#define TRN_EVOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hyp.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_EVOLVE_MAX    32 /* most evolved values */
#define TRN_EVOLVE_RESULT 7  /* result columns before the hyperparameters */

/* One evolved hyperparameter: train.py's meta entry. */
struct trn_evolve_key {
    const char *name;
    double gain;   /* mutation scale, 0..2 (0: never mutated, still clamped) */
    double lo, hi; /* limits */
};

/*
 * The keys in column order: 29 with anchors, 28 without (--noautoanchor). keys: out, the
 * static table. Returns the count.
 */
int trn_evolve_keys(bool anchors, const struct trn_evolve_key **keys);

/* ultralytics' fitness of a results row: 0.1 mAP@0.5 + 0.9 mAP@0.5:0.95. */
double trn_evolve_fitness(const double results[TRN_EVOLVE_RESULT]);

/* The vector of h in key order (anchors: h->anchors, or 3 when 0, as train.py). v: out.
 * Returns the count. */
int trn_evolve_from_hyp(const struct trn_hyp *h, bool anchors, double *v);

/* v (key order) into h, anchors rounded half to even to a whole count (the model's
 * round(anchors)); other fields of h unchanged. */
void trn_evolve_to_hyp(const double *v, bool anchors, struct trn_hyp *h);

/* Clamp each value to its limits, then round to 5 decimals (train.py's round(x, 5)). */
void trn_evolve_constrain(double *v, bool anchors);

/*
 * Choose a parent among rows (n_rows x (TRN_EVOLVE_RESULT + n) values, row-major, as read from
 * evolve.csv) and mutate it into v, with the draws of (seed, generation). n_rows >= 1.
 */
void trn_evolve_mutate(const double *rows, int n_rows, bool anchors, uint64_t seed,
                       uint32_t generation, double *v);

/*
 * Parse an evolve.csv held in memory (text, len; name for messages): *rows (malloc'd, caller
 * frees; NULL with 0 rows) and *n_rows. The header's keys must be this run's (results, then
 * trn_evolve_keys(anchors)), every row that many finite numbers. Returns 0, -EINVAL (another
 * header, a field that is not a finite number, a wrong field count, a NUL byte), -EFBIG (over a
 * million rows) or -ENOMEM, with err "NAME:LINE: why". Thread-safe.
 */
int trn_evolve_csv_parse(const char *text, size_t len, const char *name, bool anchors,
                         double **rows, int *n_rows, char *err, size_t err_cap);

/*
 * Read DIR/evolve.csv with trn_evolve_csv_parse; a missing file is 0 rows (*rows NULL). Returns
 * as trn_evolve_csv_parse, or the errors of reading (-EFBIG over 64 MiB, -errno) naming the
 * file.
 */
int trn_evolve_csv_read(const char *dir, bool anchors, double **rows, int *n_rows, char *err,
                        size_t err_cap);

/*
 * print_mutation: append the generation's row to DIR/evolve.csv (its header first when new),
 * rewrite DIR/hyp_evolve.yaml from the best row, and write the two "evolve: " lines train.py
 * prints into msg (msg_cap bytes; may be NULL). results: the generation's 7 results; v: its
 * hyperparameters. Returns 0 or -errno with err naming the file.
 */
int trn_evolve_record(const char *dir, bool anchors, const double results[TRN_EVOLVE_RESULT],
                      const double *v, char *msg, size_t msg_cap, char *err, size_t err_cap);

/*
 * plot_evolve: DIR/evolve.png from DIR/evolve.csv (plots.h trn_plot_evolve), and into msg
 * (msg_cap bytes; may be NULL) train.py's "Best results from row J of PATH:" and one
 * "KEY: VALUE" line per hyperparameter. Returns 0 or the errors of trn_evolve_csv_read and
 * trn_plot_evolve (-EINVAL also for an empty evolve.csv).
 */
int trn_evolve_plot(const char *dir, bool anchors, char *msg, size_t msg_cap, char *err,
                    size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* TRN_EVOLVE_H */
