/*
 * loss: YOLOv5's ComputeLoss (ultralytics v7.0 utils/loss.py; docs/recipe.md S3), forward
 * and the gradient of the total loss with respect to the three Detect outputs, in float32. The
 * computation is kern's whole-loss op (kern.h "The whole YOLOv5 loss"): trn_loss_compute runs
 * its CPU reference on host buffers; trn_loss_compute_dev runs any backend's (the CUDA twin on
 * device buffers, no host round trip) from the same configuration.
 *
 * INPUTS. p[l] (bs, na, ny_l, nx_l, no) float32, the raw Detect logits of level l permuted as
 * PyTorch's Detect returns them in training (kern_ref_detect_reshape_fwd), no = nc + 5 with
 * k: 0-1 xy, 2-3 wh, 4 objectness, 5.. classes. targets (nt, 6) float32 rows (image index, class,
 * x_centre, y_centre, w, h), xywh normalised to [0, 1] (the loader's collated labels).
 *
 * BUILD_TARGETS, exactly as loss.py:177-234: for each level, every target is paired with every
 * anchor and scaled to grid units; a pair is kept when max(r, 1/r) < anchor_t for both of
 * r = (w, h) / anchor; each kept pair yields its centre cell and the neighbour cells selected by
 * the five-offset rule (g = 0.5; left when frac(gx) < 0.5 and gx > 1, up likewise in y, right
 * when frac(nx - gx) < 0.5 and nx - gx > 1, down likewise); the cell (gi, gj) =
 * trunc(gxy - offset) is clamped to [0, nx-1] x [0, ny-1] and the box target is
 * tbox = (gx - gi, gy - gj, gw, gh) computed after the clamp. Entries come in PyTorch's order:
 * offset (centre, left, up, right, down), then anchor, then target.
 *
 * LOSS. Per level: lbox += mean(1 - CIoU(pbox, tbox)) with pxy = 2 sigmoid - 0.5 and
 * pwh = (2 sigmoid)^2 anchor; tobj[b, a, gj, gi] = max(CIoU, 0) (detached); where two entries
 * hit the same cell the LAST ENTRY IN THE ORDER ABOVE WINS (PyTorch's CPU index_put_ writes in
 * order; ultralytics calls the choice unspecified). lcls += BCE(class logits, smoothed one-hot)
 * averaged over n * nc (only when nc > 1; cp = 1 - eps/2, cn = eps/2); lobj += balance[l] *
 * BCE(objectness, tobj) averaged over bs * na * ny * nx. Then lbox *= box, lobj *= obj,
 * lcls *= cls (the gains, already scaled as train.py scales them) and
 * total = (lbox + lobj + lcls) * bs. A level with no entries adds only its objectness term.
 * Every gathered entry's gradient is added into its cell, so duplicates accumulate as
 * autograd's index backward does.
 *
 * ERRORS. int functions return >= 0 on success, or -EINVAL (bad arguments), -ENOMEM,
 * -ENOTSUP (hyp asks for focal loss or BCE positive weights), -E2BIG (more targets than the
 * workspace was planned for), -TRN_LOSS_ETARGET (a target row with a non-finite value, an
 * image index outside [0, bs), a class outside [0, nc) or a negative size).
 * trn_loss_strerror() names each. The library never prints and never allocates after
 * trn_loss_create.
 *
 * THREADS. A struct trn_loss is used by one thread at a time; distinct ones are independent.
 */
#ifndef TRN_LOSS_H
#define TRN_LOSS_H

#include <stddef.h>

#include "hyp.h"
#include "kern.h"
#include "model.h"

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A target row with bad values returns -TRN_LOSS_ETARGET (errors.h). */

/* Neighbour offsets per (target, anchor) pair: centre, left, up, right, down. */
#define TRN_LOSS_OFFSETS 5

/* Everything the loss needs, fixed for a run. */
struct trn_loss_cfg {
    int nl;                       /* detection levels, 1..TRN_MODEL_MAX_LEVELS */
    int na;                       /* anchors per level, 1..TRN_MODEL_MAX_ANCHORS */
    int nc;                       /* classes, >= 1 (no = nc + 5) */
    int bs;                       /* images per batch, >= 1 */
    int ny[TRN_MODEL_MAX_LEVELS]; /* grid height of level l (image height / stride) */
    int nx[TRN_MODEL_MAX_LEVELS]; /* grid width of level l */
    float anchors[TRN_MODEL_MAX_LEVELS][TRN_MODEL_MAX_ANCHORS][2]; /* (w, h) in grid units */
    float balance[TRN_MODEL_MAX_LEVELS]; /* objectness weight per level (4.0, 1.0, 0.4) */
    float box, obj, cls;                 /* final gains (after train.py's scaling) */
    float anchor_t;                      /* anchor-multiple threshold (4.0) */
    float label_smoothing;               /* eps in [0, 1): cp = 1 - eps/2, cn = eps/2 */
    float cls_pw, obj_pw;                /* BCE positive weights (hyp.cls_pw, obj_pw), > 0 */
    int max_targets;                     /* most target rows per call, >= 1 */
    /* Where the Detect outputs are (trn_net_raw_head's value): 0, (bs, na, ny, nx, no) float32
       (or a float32 channel block given to trn_loss_compute_blk); TRN_LOSS_HEAD_BF16_NCHW or
       _NHWC, the bf16 executor's outputs read and written in place (kern_yolo_loss.raw16). Set
       it before trn_loss_create: it sizes the scratch. */
    int head;
};

/* trn_loss_cfg.head, and trn_net_raw_head's value for the bf16 executor (net.h ACTIVATIONS):
 * above every channel block (1..64). */
enum { TRN_LOSS_HEAD_BF16_NCHW = 0x100, TRN_LOSS_HEAD_BF16_NHWC = 0x101 };

/*
 * Fill cfg for a model and hyp as train.py does for a square imgsz x imgsz batch of bs images:
 * grids imgsz / stride; anchors from the model's anchor buffer (grid units); balance
 * [4.0, 1.0, 0.4] for 3 levels, else [4.0, 1.0, 0.25, 0.06, 0.02] (loss.py:112); box =
 * hyp.box * 3/nl, cls = hyp.cls * nc/80 * 3/nl, obj = hyp.obj * (imgsz/640)^2 * 3/nl (computed in
 * double, then rounded to float); anchor_t = hyp.anchor_t; cls_pw, obj_pw = the hyp's
 * (BCEWithLogitsLoss pos_weight). out: out.
 * Returns 0, -EINVAL (NULL, bs or max_targets < 1, imgsz not a multiple of every stride,
 * label_smoothing outside [0, 1), more than 5 levels), -ENOTSUP (hyp.fl_gamma != 0: focal loss
 * is not implemented). Thread-safe.
 */
int trn_loss_cfg_from_model(const struct trn_model *m, const struct trn_hyp *h, int bs, int imgsz,
                            float label_smoothing, int max_targets, struct trn_loss_cfg *out);

/*
 * The grids of an h x w batch (rect training, --multi-scale): ny[l] = h / stride, nx[l] = w /
 * stride; the gains stay those of cfg's nominal size, as train.py computes them once. Returns 0
 * or -EINVAL (h or w not a multiple of every stride, NULL).
 */
int trn_loss_cfg_set_grid(struct trn_loss_cfg *c, const struct trn_model *m, int h, int w);

struct trn_loss;

/*
 * Create a loss with its workspace planned once for cfg->max_targets target rows
 * (TRN_LOSS_OFFSETS * na * max_targets entries per level plus the objectness targets).
 * cfg is copied. out: on success the new loss (free with trn_loss_destroy); untouched on error.
 * Returns 0, -EINVAL (bad cfg), -ENOMEM.
 */
int trn_loss_create(const struct trn_loss_cfg *cfg, struct trn_loss **out);

/* Free a loss. NULL is allowed. Views from trn_loss_level become invalid. */
void trn_loss_destroy(struct trn_loss *L);

/* Bytes the workspace of trn_loss_create(cfg) takes (for memory reports); 0 for a bad cfg. */
size_t trn_loss_workspace_bytes(const struct trn_loss_cfg *cfg);

/* The configuration in use. Valid for the loss's life. */
const struct trn_loss_cfg *trn_loss_get_cfg(const struct trn_loss *L);

/*
 * build_targets alone (trn_loss_compute calls it): match targets (nt, 6) to anchors and cells
 * of every level; results through trn_loss_level. nt may be 0 (targets may then be NULL).
 * Returns the total number of entries over all levels, -EINVAL, -E2BIG (nt > max_targets),
 * -TRN_LOSS_ETARGET (nothing usable is left behind).
 */
int trn_loss_build_targets(struct trn_loss *L, const float *targets, int nt);

/* The entries build_targets made for one level, in PyTorch's order (see BUILD_TARGETS). */
struct trn_loss_level {
    int n;             /* entries */
    const int *b;      /* (n) image index */
    const int *a;      /* (n) anchor index */
    const int *gj;     /* (n) cell row, clamped */
    const int *gi;     /* (n) cell column, clamped */
    const int *cls;    /* (n) class */
    const float *tbox; /* (n, 4) gx - gi, gy - gj, gw, gh in grid units */
    const float *ciou; /* (n) CIoU of the prediction (after trn_loss_compute; else stale) */
};

/*
 * The entries of level l (0 <= l < nl) from the last build. out: out; its pointers stay valid
 * until the next call that builds targets. Returns 0 or -EINVAL.
 */
int trn_loss_level(const struct trn_loss *L, int l, struct trn_loss_level *out);

/* Loss values of one batch. */
struct trn_loss_items {
    float lbox, lobj, lcls; /* what ultralytics returns and logs: after the gains, before x bs */
    float total;            /* (lbox + lobj + lcls) * bs: what backward differentiates */
    float raw_box;          /* sum over levels of mean(1 - CIoU), before the box gain */
    float raw_obj;          /* sum over levels of balance * objectness BCE, before the gain */
    float raw_cls;          /* sum over levels of the class BCE, before the gain */
};

/*
 * The loss of one batch and its gradient. ctx: a CPU kern context (for the BCE and CIoU ops).
 * p: nl pointers to the outputs (shapes above). targets (nt, 6); nt may be 0. dp: nl caller
 * buffers of the same shapes, or NULL to skip the gradient; when given, dp[l] is overwritten
 * with d(total)/d(p[l]) (every element written; none may alias p). items: out.
 * Returns 0, -EINVAL, -E2BIG, -TRN_LOSS_ETARGET, or a kern error (see kern_strerror).
 */
int trn_loss_compute(struct trn_loss *L, struct kern_ctx *ctx, const float *const *p,
                     const float *targets, int nt, float *const *dp, struct trn_loss_items *items);

/*
 * trn_loss_compute on outputs in a channel-blocked layout (blk 1..64; 0 is trn_loss_compute):
 * p and dp as a training net with trn_net_raw_head on gives them, (bs, ceil(na no / blk), ny,
 * nx, blk) per level (kern_yolo_loss.blk), the pad lanes of dp written 0. The same loss and
 * gradient bits as on the same values in (bs, na, ny, nx, no). blk may also be the loss's own
 * cfg.head (TRN_LOSS_HEAD_BF16_*: p and dp bf16 in place, the pointers cast), nothing else
 * above 64.
 */
int trn_loss_compute_blk(struct trn_loss *L, struct kern_ctx *ctx, const float *const *p, int blk,
                         const float *targets, int nt, float *const *dp,
                         struct trn_loss_items *items);

/*
 * cfg as kern's descriptor (struct kern_yolo_loss; positive weights and gr 1). out: out.
 * Returns 0 or -EINVAL (bad cfg, or one kern refuses: more than 2^29 entry slots or cells).
 */
int trn_loss_kern_desc(const struct trn_loss_cfg *cfg, struct kern_yolo_loss *out);

/*
 * Copies the op's KERN_YOLO_OUT_N floats (host memory: download them first on a device) into
 * *items. Returns 0, -EINVAL (NULL), or -TRN_LOSS_ETARGET when the status slot flags a bad
 * target count or row (the device path checks them on the device; the losses are then NaN).
 */
int trn_loss_items_from_out(const float *out, struct trn_loss_items *items);

/*
 * THE DEVICE PATH. The whole loss and its gradient through K->yolo_loss on ctx (K = kern_ops_cuda()
 * with a CUDA context, or kern_ops_ref() with a CPU one), for a training step that stays on the
 * device and can be captured in a CUDA graph: no host sync, no allocation, nothing read back.
 *
 * trn_loss_dev_scratch_bytes: the scratch size for cfg on K / ctx into *bytes; allocate it once
 * at setup (kern_mem_alloc on ctx, or kern_ctx_reserve and pass scratch NULL to use the
 * context's workspace). Returns 0, -EINVAL, or a kern error.
 * trn_loss_compute_dev: p, dp: nl tensor pointers of ctx's memory (host arrays of device
 * pointers on CUDA); dp NULL skips the gradient, else dp[l] is overwritten (accum 0) or added to
 * (KERN_ACCUM_DX). targets: (cfg->max_targets, 6) rows in ctx's memory, of which the first *nt
 * are used; nt: ONE int in ctx's memory (the loader's upload of the batch's count). out:
 * KERN_YOLO_OUT_N floats in ctx's memory (overwritten), for trn_loss_items_from_out after a
 * download. scratch, scratch_bytes: as above (scratch NULL: the context's workspace).
 * Returns 0, -EINVAL, or a kern error (kern_strerror): on CUDA the op is only enqueued, and bad
 * counts or rows show in out's status (-E2BIG and -TRN_LOSS_ETARGET come only from
 * trn_loss_compute). Thread safety: as ctx (one thread at a time).
 */
int trn_loss_dev_scratch_bytes(const struct trn_loss_cfg *cfg, const struct kern_ops *K,
                               struct kern_ctx *ctx, size_t *bytes);
int trn_loss_compute_dev(const struct trn_loss_cfg *cfg, const struct kern_ops *K,
                         struct kern_ctx *ctx, const float *const *p, const float *targets,
                         const int *nt, float *const *dp, unsigned accum, float *out, void *scratch,
                         size_t scratch_bytes);

/* A message for any code returned above (falls back to strerror / kern_strerror). */
const char *trn_loss_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif /* TRN_LOSS_H */
