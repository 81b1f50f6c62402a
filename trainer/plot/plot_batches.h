/*
 * plot_batches: the first batches of a dataset, augmented as training sees them, drawn as
 * ultralytics' train_batchK.jpg (plots.h), so a user can check that labels follow pixels. Shared
 * by `yolo-train --plot` and the standalone `yolo-plot`.
 */
#ifndef TRN_PLOT_BATCHES_H
#define TRN_PLOT_BATCHES_H

#include <stddef.h>

#include "loader.h"

/*
 * Opens the records at `records`, runs the loader with `lo` (its mode decides train or val
 * augmentation) and writes the first `count` batches to DIR/PREFIX0.jpg, DIR/PREFIX1.jpg, ...
 * (PREFIX "train_batch" as ultralytics). Stops early at the end of a one-batch epoch. Each path
 * written is passed to `written` (may be NULL) with ctx.
 * Returns the number of pictures written, or a negative error with one line in err naming the
 * file (records, batch or picture).
 */
int trn_plot_batches(const char *records, const struct trn_loader_opts *lo, const char *dir,
                     const char *prefix, int count, void (*written)(void *ctx, const char *path),
                     void *ctx, char *err, size_t err_cap);

#endif
