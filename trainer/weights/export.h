/*
 * export: a model (trainer/model/model.h, with its weights in the arenas) written for other
 * runtimes.
 *
 * ONNX (trn_export_onnx). The inference graph as ultralytics' export.py writes it for YOLOv5
 * (Detect in export mode), built node by node from the model description and serialised with
 * protobuf-c against ONNX's published schema (trainer/weights/onnx/onnx.proto, ONNX 1.12.0):
 *   input  "images"  [B, ch, H, W] float32 (fp16 with half), pixels / 255, RGB, NCHW;
 *   output "output0" [B, N, nc + 5] float32 (fp16 with half), N = sum over levels of
 *          na * (H / stride) * (W / stride), level 0's anchors first; each row x, y, w, h (box
 *          centre and size in input pixels), objectness, class probabilities (all sigmoid'ed);
 *          the same numbers as trn_net_infer.
 * Ops: Conv (BatchNorm folded into the weights and a bias), Sigmoid + Mul (SiLU), Add, Concat,
 * MaxPool, Resize (nearest), and for the Detect decode Reshape, Transpose, Slice, Sigmoid, Mul,
 * Add, Concat; with dynamic axes also Shape, Gather, ReduceProd, Range, Div, Sub, Cast (the grid
 * is computed from the feature map's runtime size). With nms, appended after output0:
 *   scores = obj * cls, kept only for each box's best class (detect.py's multi_label=False),
 *   boxes as x1, y1, x2, y2, then NonMaxSuppression per image and class (max_det boxes per
 *   class, IoU > iou_thres suppressed, scores below conf_thres dropped: the spec keeps a score
 *   equal to it, ultralytics does not) and a second output
 *   "detections" [K, 7] float32 (fp16 with half): batch index, x1, y1, x2, y2, confidence,
 *          class, one row per kept box, ordered by image, class, then confidence.
 * Metadata (ModelProto.metadata_props): "stride" (largest stride, "32"), "names" (a Python dict
 * literal "{0: 'person', ...}", as ultralytics writes it), "imgsz" ("[H, W]"), "batch",
 * "dynamic", "half", "nms" ("True"/"False"), "nc", "ffyolo_version", "outputs" (one line
 * describing the outputs).
 *
 * PYTORCH (trn_export_pt). A plain state dict as torch.save(model.state_dict()) writes it (zip
 * archive "archive/": data.pkl, data/<k>, version, byteorder; stored entries whose data start
 * at 64-byte boundaries; pickle protocol 2 of an OrderedDict name -> tensor built with
 * torch._utils._rebuild_tensor_v2 on torch.FloatStorage / HalfStorage / LongStorage), with
 * ultralytics' names and order (trn_model_tensor): load_state_dict(strict=True) into
 * ultralytics' Model of the same yaml takes it; num_batches_tracked is int64, model.24.anchors
 * in grid units as ultralytics keeps it.
 *
 * ERRORS. Functions return 0 or a negative code: -EINVAL (bad options, an image size that is not
 * a multiple of the largest stride), -ENOMEM, -EFBIG (a file too large for the format), -errno
 * of creating or writing the file (-ENOENT, -EACCES, -ENOSPC, -EIO, ...), -TRN_EXPORT_E*.
 * trn_strerror names each. (err, err_cap) get one line naming the file. The library never
 * prints and never exits. Files are written to a temporary beside the target and renamed, so a
 * failed export leaves no partial file.
 *
 * THREADS. The model is only read; exports of one model may run at once.
 */
#ifndef TRN_EXPORT_H
#define TRN_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (TRN_EXPORT_E*, returned negated) are in errors.h, named by trn_strerror. */

/* ONNX opsets the graph is written for (the ops used mean the same in each). */
#define TRN_EXPORT_OPSET_MIN     12
#define TRN_EXPORT_OPSET_MAX     17
#define TRN_EXPORT_OPSET_DEFAULT 17

/* Options of trn_export_onnx. */
struct trn_export_opts {
    int img_h, img_w; /* input size in pixels, multiples of the largest stride; with dynamic the
                         nominal size written to the metadata */
    int batch;        /* fixed batch size (>= 1); with dynamic a symbolic "batch" instead */
    bool dynamic;     /* symbolic batch, height and width ("batch", "height", "width") */
    bool half;        /* fp16 initializers, input and outputs */
    bool nms;         /* append NonMaxSuppression and the "detections" output */
    float conf_thres; /* nms: drop scores below this (0.25) */
    float iou_thres;  /* nms: suppress IoU > this (0.45) */
    int max_det;      /* nms: boxes kept per image and class (100) */
    int opset;        /* TRN_EXPORT_OPSET_MIN .. MAX */
    const char *const *names; /* class names (borrowed), n_names of them; NULL: "class<i>" */
    int n_names;              /* must equal the model's nc when names is set */
    const char *source;       /* where the weights came from, for doc_string; may be NULL */
};

/* Fill o with the defaults: 640 x 640, batch 1, static, fp32, no NMS (0.25, 0.45, 100),
 * opset TRN_EXPORT_OPSET_DEFAULT, no names, no source. */
void trn_export_opts_default(struct trn_export_opts *o);

/*
 * Serialise the inference graph of m (its current weights) as an ONNX ModelProto.
 * buf, len: out, a malloc'd buffer the caller frees; untouched on error.
 * Returns 0, -EINVAL, -ENOMEM, -TRN_EXPORT_EPROTOBUF, -TRN_EXPORT_EMODEL; err says why.
 */
int trn_export_onnx_mem(const struct trn_model *m, const struct trn_export_opts *o, uint8_t **buf,
                        size_t *len, char *err, size_t err_cap);

/* As trn_export_onnx_mem, written to path (temporary + rename). Adds the file errors. */
int trn_export_onnx(const struct trn_model *m, const struct trn_export_opts *o, const char *path,
                    char *err, size_t err_cap);

/*
 * Write m's state dict as a PyTorch checkpoint at path (temporary + rename). half: float
 * tensors as fp16 (HalfStorage, rounded to nearest even), else fp32 (FloatStorage), exactly.
 * Returns 0, -EINVAL, -ENOMEM, -EFBIG (over 4 GiB: zip64 is not written), file errors.
 */
int trn_export_pt(const struct trn_model *m, bool half, const char *path, char *err,
                  size_t err_cap);

/* As trn_export_pt into a malloc'd buffer (buf, len: out; the caller frees). */
int trn_export_pt_mem(const struct trn_model *m, bool half, uint8_t **buf, size_t *len, char *err,
                      size_t err_cap);

/*
 * Write len bytes to path atomically: a temporary "<path>.tmp<pid>" beside it, fsync, rename.
 * Returns 0 or -errno (the temporary is removed on failure); err gets "path: why".
 */
int trn_export_write_file(const char *path, const void *buf, size_t len, char *err, size_t err_cap);

/* The fp16 bits of x, rounded to nearest even (overflow to inf, NaN kept). */
uint16_t trn_export_f16_bits(float x);

#ifdef __cplusplus
}
#endif

#endif
