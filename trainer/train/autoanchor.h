/*
 * AutoAnchor: train.py's check_anchors (ultralytics v7.0 utils/autoanchor.py; recipe S3), run
 * once before training unless --noautoanchor.
 *
 * CHECK. Each image's original size is scaled so its long side is img (the letterbox) and then by
 * a random factor in [0.9, 1.1) (one per image); every label's box (w, h) in those pixels is
 * compared with every anchor by r = wh / anchor, x = min(r, 1/r) over both sides. A label is
 * "recalled" when its best x exceeds 1 / anchor_t; BPR is the recalled fraction and "anchors per
 * target" the mean count of anchors past the threshold. BPR > 0.98 keeps the anchors.
 *
 * EVOLVE (kmean_anchors). Otherwise: the labels' (w, h) at img without the random scale, those
 * under 2 px on both sides dropped (a warning counts those under 3), whitened by their standard
 * deviation, clustered into nl * na centres by k-means (scipy.cluster.vq.kmeans: 30 restarts from
 * random observations, each to a distortion change below 1e-5, the lowest mean distance kept;
 * random anchors when it cannot give that many), then 1000 generations of mutation: each anchor
 * side is multiplied, with probability 0.9, by 1 + u * N(0, 1) * 0.1 (u one uniform draw per
 * generation), clipped to [0.3, 3] and the anchors to >= 2 px, kept when the fitness (the mean of
 * the best x over labels, counting only x > 1 / anchor_t) improves. The result, sorted by area,
 * replaces the model's anchors when its BPR on the scaled labels beats the old one; the levels
 * are then put in stride order (check_anchor_order), divided by the strides, and rounded to fp16
 * as train.py's model.half().float() does.
 *
 * The messages are ultralytics', prefixed "AutoAnchor: ". Draws come from the project's Philox
 * streams under the run's seed, so a run is repeatable; they are not numpy's, so an evolved set
 * differs from train.py's in its digits, not in its quality.
 */
#ifndef TRN_AUTOANCHOR_H
#define TRN_AUTOANCHOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The training set's labels: image i has original size shape[2i] x shape[2i+1] (w0, h0) and the
 * labels first[i] .. first[i+1] - 1 of wh (normalised w, h pairs). */
struct trn_anchor_data {
    size_t n_img;
    const float *shape;  /* n_img x 2 */
    const size_t *first; /* n_img + 1 */
    const float *wh;     /* first[n_img] x 2 */
};

struct trn_autoanchor_result {
    double bpr, aat; /* the model's anchors on the data */
    bool evolved;    /* BPR <= 0.98: k-means and evolution ran */
    double new_bpr;  /* the evolved anchors' BPR (evolved only) */
    bool replaced;   /* the model's anchors were replaced */
};

/* One line of the report (no newline), for the caller to print. */
typedef void (*trn_autoanchor_log)(void *ctx, const char *line);

/*
 * Checks (and, below 0.98 BPR, evolves and replaces) m's anchors for data at image size img with
 * hyp anchor_t thr. seed: the run's. Returns 0 (r filled), -EINVAL, -ENOMEM. With no labels it
 * logs nothing and returns 0 with bpr 0.
 */
int trn_autoanchor(struct trn_model *m, const struct trn_anchor_data *data, int img, double thr,
                   uint64_t seed, trn_autoanchor_log log, void *log_ctx,
                   struct trn_autoanchor_result *r);

#ifdef __cplusplus
}
#endif

#endif
