/*
 * The conv plan file of a GPU run (kernels/include/kern_plan.h), for yolo-train and its --bench:
 * --cudnn-plan FILE is read before the first convolution is planned, and every pass then takes
 * its entry there when one fits; --cudnn-tune times the passes the file lacks and writes the
 * file back (atomically) when the run has planned them. The run directory keeps a copy of the
 * entries the run used (cudnn_plans.txt), and the hash of those entries (kern_plan_hash) is what
 * --bench --json reports: equal hashes, equal algorithms.
 *
 * Without --cudnn-plan the table still exists: it collects the heuristics' choices, for the copy
 * and the hash. On the CPU nothing is planned, the copy is not written and the hash is 0.
 */
#ifndef TRN_PLANS_H
#define TRN_PLANS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kern_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_PLANS_COPY "cudnn_plans.txt" /* the run directory's copy */

struct trn_plans {
    struct kern_plan *table; /* owned; kern_ctx_opts.plans */
    const char *path;        /* --cudnn-plan (borrowed), or NULL */
    bool tune;               /* --cudnn-tune */
};

/*
 * Makes p's table and reads path into it when given. A missing file is an error unless tune
 * (then the run makes it). Returns 0, or a negative code with err naming the file and line.
 */
int trn_plans_open(struct trn_plans *p, const char *path, bool tune, char *err, size_t err_cap);

/*
 * After the convolutions are planned: with tune and a path, the whole table to path; with a
 * run_dir, the used entries to run_dir/cudnn_plans.txt (nothing when none was used: a CPU run).
 * Returns 0 or a negative errno with err saying which write failed.
 */
int trn_plans_write(struct trn_plans *p, const char *run_dir, char *err, size_t err_cap);

/* Frees the table (p may be zeroed). */
void trn_plans_close(struct trn_plans *p);

#ifdef __cplusplus
}
#endif

#endif
