/*
 * kern_loss.h: losses: BCE with logits, CIoU, and the whole YOLOv5 loss (ComputeLoss) in one call.
 *
 * Part of kern.h, which includes it: include kern.h, not this file. The first part declares
 * the family's descriptors and helpers. The op rows at the end, KERN_OP(name, (parameters)),
 * are expanded by whoever defines KERN_OP: kern.h makes them the kern_ref_* prototypes and
 * struct kern_ops members, kern_cuda.h the kern_cuda_* prototypes, each backend its table
 * (kern_ops.def lists the families in table order). Each row's comment is its contract.
 */
#ifndef KERN_H
#error "include kern.h, not kern_loss.h"
#endif

#ifndef KERN_LOSS_H
#define KERN_LOSS_H

/* ---------------------------------------------------------------------------------------- */
/* The whole YOLOv5 loss (ComputeLoss) in one call: forward and gradient                    */

/*
 * ultralytics v7.0 utils/loss.py ComputeLoss (docs/recipe.md S3), build_targets included,
 * with the gradient of the total to the Detect outputs, so that the training step needs no host
 * round trip (CUDA: every result stays in device memory; the op is graph-capturable).
 *
 * p[l], dp[l]  (bs, na, ny_l, nx_l, no), no = nc + 5, the raw logits of level l as Detect
 *              returns them in training (kern_ref_detect_reshape_fwd); k: 0-1 xy, 2-3 wh,
 *              4 objectness, 5.. classes. p and dp are host arrays of nl tensor pointers.
 *              The reference also reads them where the Detect conv wrote them, channel-blocked
 *              (d.blk), with the same bits as on its output reshaped.
 * targets      (max_targets, 6) rows (image, class, x_centre, y_centre, w, h), xywh normalised
 *              to [0, 1]; the first *nt are used. nt: ONE int in tensor memory (device memory for
 *              CUDA), so a captured step reads each batch's count without a host sync.
 * out          KERN_YOLO_OUT_N floats in tensor memory (overwritten; see KERN_YOLO_OUT_*).
 *
 * BUILD_TARGETS, per level: every (target, anchor) pair in grid units is kept when
 * max(r, 1/r) < anchor_t for both r = (w, h) / anchor; each kept pair yields its centre cell and
 * the neighbours of the five-offset rule (g = 0.5: left when frac(gx) < 0.5 and gx > 1, up
 * likewise in y, right when frac(nx - gx) < 0.5 and nx - gx > 1, down likewise); the cell
 * (gi, gj) = trunc(gxy - offset) is clamped to the grid and tbox = (gx - gi, gy - gj, gw, gh) is
 * taken after the clamp. ENTRY ORDER is PyTorch's: offset (centre, left, up, right, down), then
 * anchor, then target.
 * LOSS, per level: lbox += mean(1 - CIoU(pbox, tbox)), pxy = 2 sigmoid - 0.5, pwh =
 * (2 sigmoid)^2 anchor; tobj[b, a, gj, gi] = max(CIoU, 0) (detached; (1 - gr) + gr max(CIoU, 0)
 * when gr < 1); when several entries hit one cell THE LAST ENTRY IN ENTRY ORDER WINS (PyTorch's
 * CPU index_put_ writes in order); lcls += BCE(class logits, one-hot smoothed to cp = 1 - eps/2,
 * cn = eps/2, pos_weight cls_pw) over n nc, only when nc > 1; lobj += balance[l]
 * BCE(objectness, tobj, pos_weight obj_pw) over bs na ny nx. Then lbox *= box, lobj *= obj,
 * lcls *= cls, total = (lbox + lobj + lcls) bs. BCE pos_weight w: (1 - t) x + (1 + (w - 1) t)
 * (log1p(exp(-|x|)) + max(-x, 0)); with w = 1 exactly the usual max(x, 0) - x t +
 * log1p(exp(-|x|)). Means are summed in double; everything else is float32 in PyTorch's order.
 * GRADIENT (dp may be NULL: loss only): d total / d p[l], alpha of CIoU held constant;
 * duplicates accumulate (autograd's index backward), each entry adding its contribution to its
 * cell in entry order. dp[l] (=|+=) by KERN_ACCUM_DX: overwritten, every element written, or
 * added to. dp must not alias p.
 * SCRATCH: kern_*_yolo_loss_scratch_size(ctx, d) bytes, 16-byte aligned, given as scratch, or
 * scratch NULL to use the context's workspace; -KERN_EWORKSPACE when it is smaller. The layout
 * differs between backends and is private except through kern_ref_yolo_loss_entries.
 * ERRORS: -EINVAL (bad descriptor, NULL pointers, accum bits; reference only: *nt outside
 * [0, max_targets] or a target row that is not finite, has an image outside [0, bs), a class
 * outside [0, nc) or a negative size; nothing is written), -KERN_EWORKSPACE, -KERN_EBACKEND.
 * The CUDA twin cannot see *nt or the rows at call time: it treats a bad count as 0 and skips
 * bad rows, and flags both in out[KERN_YOLO_OUT_STATUS] with NaN losses (see there).
 */
#define KERN_YOLO_MAX_LEVELS  8  /* detection levels */
#define KERN_YOLO_MAX_ANCHORS 16 /* anchors per level */
#define KERN_YOLO_OFFSETS     5  /* centre, left, up, right, down */

/* Indices into the op's `out` floats. */
enum {
    KERN_YOLO_OUT_LBOX = 0,    /* box loss after the gain, before x bs (what ultralytics logs) */
    KERN_YOLO_OUT_LOBJ = 1,    /* objectness loss after the gain */
    KERN_YOLO_OUT_LCLS = 2,    /* class loss after the gain */
    KERN_YOLO_OUT_TOTAL = 3,   /* (lbox + lobj + lcls) bs: what the gradient differentiates */
    KERN_YOLO_OUT_RAW_BOX = 4, /* sum over levels of mean(1 - CIoU), before the gain */
    KERN_YOLO_OUT_RAW_OBJ = 5, /* sum over levels of balance x objectness BCE, before the gain */
    KERN_YOLO_OUT_RAW_CLS = 6, /* sum over levels of the class BCE, before the gain */
    KERN_YOLO_OUT_STATUS = 7,  /* 0, or (CUDA) a sum of KERN_YOLO_BAD_*: every loss above is NaN */
    KERN_YOLO_OUT_N = 8
};
#define KERN_YOLO_BAD_COUNT 1 /* *nt outside [0, max_targets] (treated as 0) */
#define KERN_YOLO_BAD_ROW   2 /* some target row invalid (skipped) */

struct kern_yolo_loss {
    int nl;          /* levels, 1..KERN_YOLO_MAX_LEVELS */
    int na;          /* anchors per level, 1..KERN_YOLO_MAX_ANCHORS */
    int nc;          /* classes, 1..1000000 (no = nc + 5) */
    int bs;          /* images per batch, >= 1 */
    int max_targets; /* most target rows per call, >= 1: sizes the scratch (and the CUDA grid) */
    int ny[KERN_YOLO_MAX_LEVELS], nx[KERN_YOLO_MAX_LEVELS];        /* grid of level l, 1..65536 */
    float anchors[KERN_YOLO_MAX_LEVELS][KERN_YOLO_MAX_ANCHORS][2]; /* (w, h), grid units, > 0 */
    float balance[KERN_YOLO_MAX_LEVELS]; /* objectness weight per level (4.0, 1.0, 0.4) */
    float box, obj, cls;   /* loss gains, finite (train.py's scaled hyp.box, obj, cls) */
    float anchor_t;        /* anchor-multiple threshold, > 0 (4.0) */
    float label_smoothing; /* eps in [0, 1) */
    float cls_pw, obj_pw;  /* BCE positive weights, > 0 (1.0) */
    float gr;              /* iou ratio of the objectness target, in [0, 1] (1.0) */
    /* The layout of p and dp: 0, (bs, na, ny, nx, no); b in 1..64 (reference only, CUDA refuses
       it with -EINVAL), the Detect conv's output as a channel-blocked executor leaves it, (bs,
       ceil(na no / b), ny, nx, b): element k of anchor a in lane (a no + k) % b of block
       (a no + k) / b. Its pad lanes are read as nothing and, unless accumulating, written 0. */
    int blk;
    /* raw16 0: p and dp as above, float32. raw16 1: they are the bf16 executor's Detect conv
       outputs where it keeps them (the pointers cast from uint16_t), bf16 in raw_layout:
       KERN_LAYOUT_NCHW (bs, na no, ny, nx), KERN_LAYOUT_NHWC (bs, ny, nx, na no). The loss is that
       of the widened values and dp the float32 gradient rounded once, every element written
       (KERN_ACCUM_DX refused): bit for bit detect16_fwd, this op in float32, then detect16_bwd,
       without the two permutes. blk must be 0. */
    int raw16, raw_layout;
};

/*
 * Fills *d with the YOLOv5 defaults for nl levels of na anchors, nc classes, bs images and
 * max_targets rows: gains box 0.05, obj 1.0, cls 0.5, anchor_t 4, no smoothing, pos weights 1,
 * gr 1, balance [4.0, 1.0, 0.4] (three levels) or [4.0, 1.0, 0.25, 0.06, 0.02]; grids and
 * anchors zero (the caller sets them). Thread-safe.
 */
KERN_API void kern_yolo_loss_init(struct kern_yolo_loss *d, int nl, int na, int nc, int bs,
                                  int max_targets);

/* Checks a descriptor (the ranges above; entry and cell counts must fit int32). 0 or -EINVAL. */
KERN_API int kern_yolo_loss_check(const struct kern_yolo_loss *d);

/*
 * Reference only, host helpers for inspection and the trainer's tests. build_targets alone into
 * scratch (as kern_ref_yolo_loss's first phase): returns the number of entries over all levels,
 * or -EINVAL (bad arguments, nt, or rows; every level is then left with 0 entries),
 * -KERN_EWORKSPACE. scratch: as the op's (never NULL here). Thread-safe on distinct scratch.
 */
KERN_API int kern_ref_yolo_build_targets(const struct kern_yolo_loss *d, void *scratch,
                                         size_t scratch_bytes, const float *targets, int nt);

/* The entries of one level left in a reference scratch by the last build, in entry order. */
struct kern_yolo_entries {
    int n;             /* entries */
    const int *b;      /* (n) image index */
    const int *a;      /* (n) anchor index */
    const int *gj;     /* (n) cell row, clamped */
    const int *gi;     /* (n) cell column, clamped */
    const int *cls;    /* (n) class */
    const float *tbox; /* (n, 4) gx - gi, gy - gj, gw, gh in grid units */
    const float *ciou; /* (n) CIoU of the prediction, after kern_ref_yolo_loss (else stale) */
};

/*
 * Views of level l (0 <= l < nl) of a reference scratch into *out, valid while the scratch is
 * and until the next build into it. Errors: -EINVAL, -KERN_EWORKSPACE (scratch too small).
 */
KERN_API int kern_ref_yolo_loss_entries(const struct kern_yolo_loss *d, const void *scratch,
                                        size_t scratch_bytes, int l, struct kern_yolo_entries *out);

#endif /* KERN_LOSS_H */

/* The rows, laid out by hand: clang-format would read them as one statement. */
/* clang-format off */
#ifdef KERN_OP

/* --- Losses: BCE with logits, CIoU --- */

/*
 * BCE-with-logits, mean reduction, pos_weight 1, over a rows x cols block: element (r, c) of
 * the logits is x[r * ldx + c] (ldx >= cols lets the block be the class or objectness columns
 * of (.., no) rows), and its target t[r * cols + c] (dense). Per element, numerically stable:
 * max(x, 0) - x t + log1p(exp(-|x|)). *loss (host) = sum / (rows * cols), summed in double
 * (on the CPU in at most 64 runs of rows fixed by the shape, then the runs in order: the same
 * bits on any thread count).
 */
KERN_OP(bce_logits_fwd, (struct kern_ctx *ctx, float *loss, const float *KERN_RESTRICT x,
                         const float *KERN_RESTRICT t, size_t rows, size_t cols, size_t ldx))

/*
 * dx[r * ldx + c] (=|+=) dloss * (sigmoid(x) - t) / (rows * cols); dx has x's layout, and its
 * elements outside the block are not touched. dloss (host) is dL/dloss. KERN_ACCUM_DX.
 */
KERN_OP(bce_logits_bwd, (struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                         const float *KERN_RESTRICT x, const float *KERN_RESTRICT t, size_t rows,
                         size_t cols, size_t ldx, float dloss, unsigned accum))

/*
 * Complete IoU of n box pairs, as ultralytics' bbox_iou(box1, box2, xywh=True, CIoU=True):
 * b1, b2 (n, 4) as (x_centre, y_centre, w, h), any consistent unit (b1 the prediction, b2 the
 * target); ciou (n) (overwritten). eps = KERN_CIOU_EPS in the union and in c^2 only;
 * v = 4/pi^2 (atan(w2/h2) - atan(w1/h1))^2; alpha = v / (v - iou + 1 + eps).
 */
KERN_OP(ciou_fwd, (struct kern_ctx *ctx, float *KERN_RESTRICT ciou, const float *KERN_RESTRICT b1,
                   const float *KERN_RESTRICT b2, size_t n))

/*
 * Backward of kern_ref_ciou_fwd, with alpha a constant (no gradient through it, as PyTorch's
 * no_grad block). db1, db2 (n, 4) (=|+=) dciou[i] * dCIoU_i/db; db2 may be NULL (targets need
 * none). Ties of min/max split the gradient in halves and clamp(0) passes it at 0, as autograd.
 * KERN_ACCUM_DX.
 */
KERN_OP(ciou_bwd, (struct kern_ctx *ctx, float *KERN_RESTRICT db1, float *KERN_RESTRICT db2,
                   const float *KERN_RESTRICT dciou, const float *KERN_RESTRICT b1,
                   const float *KERN_RESTRICT b2, size_t n, unsigned accum))

/* --- The whole YOLOv5 loss (ComputeLoss) in one call: forward and gradient --- */

/*
 * Bytes of scratch the op needs for d on ctx's backend into *bytes. ctx may be NULL (the size
 * depends on the backend only). Errors: -EINVAL, -KERN_EBACKEND.
 */
KERN_OP(yolo_loss_scratch_size, (struct kern_ctx *ctx, const struct kern_yolo_loss *d,
                                 size_t *bytes))

/* The whole loss and its gradient (see above). nt, targets, out, dp, p: host memory here. */
KERN_OP(yolo_loss, (struct kern_ctx *ctx, const struct kern_yolo_loss *d, float *const *dp,
                    float *KERN_RESTRICT out, const float *const *p,
                    const float *KERN_RESTRICT targets, const int *KERN_RESTRICT nt, void *scratch,
                    size_t scratch_bytes, unsigned accum))
#endif /* KERN_OP */
/* clang-format on */
