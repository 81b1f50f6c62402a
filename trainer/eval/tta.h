/*
 * tta: test-time augmentation and model ensembles for inference, as ultralytics/yolov5 v7.0 does
 * them (models/yolo.py DetectionModel._forward_augment, models/experimental.py Ensemble), shared
 * by yolo-val (val.c) and yolo-detect.
 *
 * AUGMENT (per model, on a batch x 3 x h x w float input in [0, 1]): three branches
 *   scale 1     no flip   the input itself;
 *   scale 0.83  flip lr   x.flip(3) (columns mirrored), then scale_img;
 *   scale 0.67  no flip   scale_img;
 * scale_img(img, r, gs = int(max Detect stride)): bilinear resize (PyTorch F.interpolate,
 * align_corners=False, no antialias) to (int(h * r), int(w * r)), then padded on the right and
 * bottom with 0.447 (a float in the [0, 1] input scale: ImageNet's mean) to
 * (ceil(h * r / gs) * gs, ceil(w * r / gs) * gs); r == 1 returns the input. Each branch runs the
 * eval forward and the Detect decode; _descale_pred maps its rows back to the input's pixels:
 * x, y, w, h /= r (float32), then x = w_in - x for the flipped branch. _clip_augmented drops the
 * large-object tail of the first branch (its last (rows / g) rows, g = sum_{i<nl} 4^i: about the
 * coarsest level) and the small-object head of the last branch (its first (rows / g) * 4^(nl-1)
 * rows: about the finest level); the three are concatenated, first branch first, before NMS.
 *
 * ENSEMBLE: every model sees the same input; their (augmented) outputs are concatenated along
 * the box axis in model order; the stride is the largest of the models' (Ensemble.stride), the
 * class count must be the same for all (ultralytics asserts it; here -EINVAL).
 *
 * NETS: one inference net per (model, branch input shape), created on first use and kept in an
 * LRU cache of opts.max_shapes input shapes (their branches for every model); all share one kern
 * context (opts.threads). Nothing is allocated per call once the working set is built, except
 * when a new shape needs a larger output buffer.
 *
 * ERRORS: negative codes: -EINVAL (bad arguments, models that cannot form an ensemble), -ENOMEM,
 * and the net's codes (-TRN_MODEL_E*, -KERN_E*; trn_strerror names them). Functions taking
 * (err, err_cap) also write one line saying what failed. The library never prints or exits.
 *
 * THREADS: a struct trn_tta is used by one thread at a time. It reads the models' parameters and
 * buffers and writes nothing into them (eval forwards), so the models may be shared with other
 * readers; no other thread may write them during a call.
 */
#ifndef TRN_TTA_H
#define TRN_TTA_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"
#include "net.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_TTA_BRANCHES   3      /* branches of the augmented forward */
#define TRN_TTA_PAD        0.447f /* scale_img padding, in the [0, 1] input scale */
#define TRN_TTA_MAX_MODELS 16     /* models of one ensemble */

/* The branches, in ultralytics' order: scales [1, 0.83, 0.67], flips [None, 3 (lr), None]. */
extern const double trn_tta_scales[TRN_TTA_BRANCHES];
extern const bool trn_tta_flips[TRN_TTA_BRANCHES];

/*
 * scale_img's sizes for an h x w input at ratio r and grid gs: the resized size (*rh, *rw) =
 * (int(h * r), int(w * r)) and the padded size (*ph, *pw) = (ceil(h * r / gs) * gs, ...), in
 * double as Python computes them; r == 1 gives the input size for all four. All out.
 * Returns 0, or -EINVAL (a size < 1, r <= 0 or not finite, gs < 1, a result < 1 or > INT_MAX).
 */
int trn_tta_scaled_size(int h, int w, double r, int gs, int *rh, int *rw, int *ph, int *pw);

/*
 * scale_img on n x c x h x w float NCHW src (borrowed), mirrored left-right first when flip_lr
 * (x.flip(3)), into dst (out, dst_cap floats, at least n * c * ph * pw for the padded size of
 * trn_tta_scaled_size). Returns 0 or -EINVAL (bad sizes, dst too small, NULL pointers).
 */
int trn_tta_scale_img(const float *src, int n, int c, int h, int w, double r, int gs, bool flip_lr,
                      float *dst, size_t dst_cap);

/*
 * F.interpolate(src, size=(oh, ow), mode='bilinear', align_corners=False) on n x c x h x w float
 * NCHW src into dst (dst_cap floats, at least n * c * oh * ow), as scale_img's resize (train.py
 * --multi-scale resizes its batches so). Returns 0, -EINVAL or -ENOMEM.
 */
int trn_tta_interpolate(const float *src, int n, int c, int h, int w, int oh, int ow, float *dst,
                        size_t dst_cap);

/*
 * _descale_pred in place on `rows` rows of `no` floats (x, y, w, h, ...): the first four divided
 * by float32(r), then x = float32(img_w) - x when flip_lr. Returns 0 or -EINVAL (pred NULL with
 * rows > 0, no < 4, r <= 0 or not finite).
 */
int trn_tta_descale(float *pred, size_t rows, int no, double r, bool flip_lr, int img_w);

/*
 * _clip_augmented's cuts for a model with nl detection levels: from the first branch's
 * rows_first rows keep the first *keep_first (Python's y[0][:, :-i], i = rows_first / g; i == 0
 * keeps nothing, as the slice [:-0] does); from the last branch's rows_last rows skip the first
 * *skip_last (i = (rows_last / g) * 4^(nl-1), at most rows_last). Returns 0 or -EINVAL (nl < 1
 * or > TRN_MODEL_MAX_LEVELS, NULL outputs).
 */
int trn_tta_clip_counts(int nl, size_t rows_first, size_t rows_last, size_t *keep_first,
                        size_t *skip_last);

/* Runner options; fill with trn_tta_opts_default(). */
struct trn_tta_opts {
    bool augment;      /* true: the three branches per model; false: one plain forward (default) */
    int threads;       /* threads of the shared kern context (kern_ctx_opts.threads); default 0 */
    int max_shapes;    /* input shapes whose nets stay cached (LRU), >= 1; default 1 */
    int amp;           /* the nets' convs (trn_net_opts.amp, net.h AUTOCAST): KERN_DT_F32 (default),
                          KERN_DT_F16 (val.py --half) or KERN_DT_BF16 */
    bool fixed_params; /* the models' parameters do not change during the runner's life
                          (trn_net_opts.fixed_params): each net casts them for amp once, not at
                          every call; default false */
    int device;        /* -1 (default): the CPU; >= 0: the nets on a CUDA context of this device
                          (inputs and outputs stay host memory: the nets copy them) */
    bool device_path;  /* CPU only: the nets run the device data path on the CPU ops
                          (trn_net_opts.device_path; tests); default false */
    int cpu_engine;    /* what runs the nets' inference on the CPU (trn_net_opts.cpu_engine,
                          enum trn_cpu_engine); default TRN_CPU_ENGINE_AUTO */
};

/* Fill *o with the defaults above. Thread-safe. */
void trn_tta_opts_default(struct trn_tta_opts *o);

/* An ensemble of models with optional TTA, and its nets. Opaque. */
struct trn_tta;

/*
 * Creates a runner for n_models models (borrowed; must outlive the runner and keep their
 * architecture) at `batch` images per call, with options o (NULL: defaults). out: the new runner
 * on success (free with trn_tta_destroy), untouched on error. Returns 0, -EINVAL (n_models < 1
 * or > TRN_TTA_MAX_MODELS, batch < 1, a NULL model, class or channel counts that differ: err
 * names them), -ENOMEM, or a kern code creating the context.
 */
int trn_tta_create(struct trn_model *const *models, int n_models, int batch,
                   const struct trn_tta_opts *o, struct trn_tta **out, char *err, size_t err_cap);

/* Frees the runner and its nets (never the models). NULL is a no-op. */
void trn_tta_destroy(struct trn_tta *t);

/* The ensemble's stride: the largest Detect stride of any model (Ensemble.stride.max()). */
int trn_tta_stride(const struct trn_tta *t);

/* Outputs per row of the merged prediction (nc + 5, the same for every model). */
int trn_tta_no(const struct trn_tta *t);

/*
 * The plain (scale 1, no flip) inference net of model `model` for batch x 3 x h x w inputs, from
 * the cache or new; the same net trn_tta_infer's first branch runs, so a caller can run its own
 * forward on it (val.py's raw outputs for the val loss). *net: out, borrowed, valid until the
 * next call on t. Returns 0 or a code of trn_net_create (err says which shape failed).
 */
int trn_tta_net(struct trn_tta *t, int model, int h, int w, struct trn_net **net, char *err,
                size_t err_cap);

/*
 * Runs every model (every branch with augment) on images (borrowed: batch x 3 x h x w float NCHW,
 * the runner's batch) and merges the outputs: *out (out) is (batch, *rows, no) floats, each row
 * x, y, w, h in the input's pixels, then objectness and class scores, per image the models in
 * order and, per model, branch 1 (clipped), 2, 3 (clipped); valid until the next call on t.
 * Returns 0, -EINVAL, -ENOMEM, or a net code (err says which model and shape).
 */
int trn_tta_infer(struct trn_tta *t, const float *images, int h, int w, const float **out,
                  int *rows, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* TRN_TTA_H */
