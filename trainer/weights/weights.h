/*
 * weights: the model and weights for inference (yolo-val, yolo-detect) from an ultralytics .pt
 * (its EMA, else its model, as attempt_load picks) or from one of our checkpoints (its EMA;
 * docs/checkpoint.md), or the initial weights of a model yaml. One place that knows both
 * formats, so the programs do not each carry a copy.
 */
#ifndef TRN_WEIGHTS_H
#define TRN_WEIGHTS_H

#include <stddef.h>

#include "model.h"

/*
 * Builds *out.
 * weights: a .pt or checkpoint path; NULL: the model of `cfg` with trn_model_init(seed 0).
 * cfg: a model yaml path or name (models) that replaces the weights' own architecture,
 *      or NULL (required when weights is NULL).
 * nc: the class count of a model built from cfg without weights (0: the yaml's); a checkpoint
 *     brings its own, a .pt its yaml's.
 * meta, meta_len: out, optional: a malloc'd, NUL-terminated copy of a checkpoint's metadata
 *     (class names...), NULL for a .pt or no weights. The caller frees it.
 * Returns 0, or a negative error with one line in err naming the file (and a hint).
 */
int trn_weights_load(const char *weights, const char *cfg, int nc, struct trn_model **out,
                     char **meta, size_t *meta_len, char *err, size_t err_cap);

/*
 * Pretrained weights for training, as train.py reads them: *src is the checkpoint's own model
 * (the architecture and class count it was saved with) holding its weights (a .pt's `model`, as
 * train.py's ckpt['model'], else its `ema`; our checkpoint's EMA), and *yaml (malloc'd,
 * NUL-terminated, *yaml_len bytes) the model yaml it carries, from which the trainer builds its
 * own model when no --cfg is given; trn_model_transfer then moves what fits. Returns 0, or a
 * negative error with one line in err naming the file; nothing to free then.
 */
int trn_weights_pretrained(const char *weights, struct trn_model **src, char **yaml,
                           size_t *yaml_len, char *err, size_t err_cap);

/* The value of a top-level "key: value" line of metadata text into dst ("" when absent). */
void trn_meta_value(const char *meta, size_t len, const char *key, char *dst, size_t cap);

#endif
