/*
 * nms: YOLOv5's validation post-processing on the CPU, as ultralytics/yolov5 v7.0 does it
 * (utils/general.py non_max_suppression, xywh2xyxy, box_iou, scale_boxes, clip_boxes; recipe S6).
 *
 * Per image, from the Detect output rows (cx, cy, w, h, obj, cls_0..cls_{nc-1}), already decoded:
 *   1. rows with obj > conf_thres survive; conf = cls * obj (float32, as `x[:, 5:] *= x[:, 4:5]`);
 *   2. multi_label (and nc > 1): every (row, class) pair with conf > conf_thres is a candidate,
 *      generated row-major (row, then class), as torch's nonzero(); otherwise one candidate per
 *      row with the best class (first maximum on ties), kept if its conf > conf_thres;
 *   3. candidates sorted by conf, descending, keeping at most max_nms;
 *   4. class-aware greedy NMS: boxes shifted by cls * max_wh (0 when agnostic), then
 *      torchvision's CPU nms: in score order, keep a box and suppress every later box whose IoU
 *      with it is > iou_thres (strictly greater; IoU == iou_thres survives). When the offsets
 *      keep the classes apart (every box spans < max_wh - 1 in x, iou_thres >= 0, not agnostic)
 *      boxes of two classes have IoU 0, so only later boxes of the same class are compared: the
 *      same decisions, in a fraction of the pairs;
 *   5. keep the first max_det.
 * No wall-clock limit (ultralytics' time_limit is deliberately not copied, recipe S6).
 *
 * Numerics (every choice documented, as bit-exactness with PyTorch is the goal where possible):
 *   - all box and score arithmetic is float32 with the same operation order as the PyTorch code
 *     (x1 = cx - w / 2; the class offset is added in float32 before the IoU, as torchvision sees
 *     the offset boxes; IoU = inter / (area_i + area_j - inter) in float32, compared against the
 *     double iou_thres after promotion, as torchvision's C++ kernel does);
 *   - conf_thres is compared in float32 (a Python float compared with a float32 tensor is cast
 *     to float32 by PyTorch);
 *   - tie order: torch.sort/argsort are not guaranteed stable; we sort stably, so candidates of
 *     equal conf keep their generation order (row-major row, class). The same order is used for
 *     the max_nms cut and by the NMS itself.
 *
 * Thread safety: a struct trn_nms is used by one thread at a time; distinct ones are independent.
 * The free functions share no state.
 */
#ifndef TRN_NMS_H
#define TRN_NMS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_NMS_MAX_WH  7680  /* class offset in pixels (ultralytics max_wh) */
#define TRN_NMS_MAX_NMS 30000 /* candidates kept before NMS (ultralytics max_nms) */
#define TRN_NMS_MAX_DET 300   /* detections kept per image (ultralytics max_det) */

/* One detection: an xyxy box in pixels, its confidence and its class. */
struct trn_det {
    float x1, y1, x2, y2; /* corners, pixels; x1 <= x2 and y1 <= y2 for sane input */
    float conf;           /* obj * cls, in (conf_thres, 1] */
    int cls;              /* class index in [0, nc) */
};

/* NMS settings; trn_nms_opts_default() gives ultralytics' validation values. */
struct trn_nms_opts {
    float conf_thres; /* candidates need obj > conf_thres and obj*cls > conf_thres (0.001) */
    double iou_thres; /* suppress IoU > iou_thres (0.6 in-training val, 0.65 final COCO val) */
    int max_det;      /* detections kept per image, > 0 (300) */
    int max_nms;      /* candidates kept before NMS, > 0 (30000) */
    int multi_label;  /* 1: every (box, class) pair above conf_thres (val.py), 0: best class */
    int agnostic;     /* 1: class-agnostic NMS (no class offset; single_cls), 0: class-aware */
};

/* Fills *o with the validation defaults: 0.001, 0.6, 300, 30000, multi_label 1, agnostic 0. */
void trn_nms_opts_default(struct trn_nms_opts *o);

/* Workspace for trn_nms_run: grows as needed and is reused, so per-image calls do not allocate
 * once it has reached its working size. Opaque. */
struct trn_nms;

/* Creates a workspace in *out. Returns 0 or -EINVAL (out NULL), -ENOMEM. The caller owns it and
 * frees it with trn_nms_destroy. */
int trn_nms_create(struct trn_nms **out);

/* Frees a workspace; NULL is a no-op. */
void trn_nms_destroy(struct trn_nms *nms);

/*
 * NMS of one image's predictions (steps 1-5 above).
 * pred: n_rows rows of row_stride floats (row_stride >= 5 + nc): cx, cy, w, h, obj, then nc
 * class scores, in pixels of the network input. dets: out, dets_cap entries (at most max_det
 * are ever written), sorted by conf descending, boxes in the same pixels (xyxy, no offset).
 * Returns the number of detections (>= 0), or -EINVAL (NULL pointer with a non-zero count,
 * nc < 1, row_stride < 5 + nc, bad opts), -ENOMEM. NaN scores never pass the thresholds.
 * dets_cap smaller than the result truncates it (the first dets_cap, by conf).
 */
int trn_nms_run(struct trn_nms *nms, const float *pred, size_t n_rows, size_t row_stride, int nc,
                const struct trn_nms_opts *opts, struct trn_det *dets, size_t dets_cap);

/* ultralytics' box_iou for one pair of xyxy boxes: inter / (area_a + area_b - inter + 1e-7),
 * float32, in that operation order. Used by the validation matching (metrics.h). */
float trn_box_iou(const float a[4], const float b[4]);

/* The IoU torchvision's CPU nms uses (no eps): inter / (area_a + area_b - inter), float32;
 * 0/0 gives NaN, which never suppresses. */
float trn_nms_iou(const float a[4], const float b[4]);

/* xywh (centre, size) to xyxy, float32: x1 = cx - w / 2, x2 = cx + w / 2 (same for y). */
void trn_xywh2xyxy(const float xywh[4], float xyxy[4]);

/*
 * Maps one xyxy box (in place) from the letterboxed network input back to the original image, as
 * scale_boxes(img1_shape, boxes, img0_shape, ratio_pad) with ratio_pad = ((gain, _), (padw,
 * padh)) from the loader: x = (x - padw) / gain, y = (y - padh) / gain in float32 (gain and pads
 * cast to float32 first, as PyTorch's CPU ops on a float32 tensor do; on CUDA PyTorch multiplies
 * by a float32 reciprocal instead, which can differ in the last bit), then clip_boxes: x clamped
 * to [0, w0], y to [0, h0]. The caller checks gain > 0.
 */
void trn_scale_box(float xyxy[4], double gain, double padw, double padh, int w0, int h0);

/* trn_scale_box on the boxes of n detections. Returns 0, or -EINVAL (dets NULL with n > 0,
 * gain <= 0 or not finite, w0 or h0 < 1). */
int trn_scale_dets(struct trn_det *dets, size_t n, double gain, double padw, double padh, int w0,
                   int h0);

/*
 * The ratio_pad=None form of scale_boxes: from the network input size (w1, h1) and the original
 * size (w0, h0): gain = min(h1 / h0, w1 / w0), padw = (w1 - w0 * gain) / 2,
 * padh = (h1 - h0 * gain) / 2, in double as Python computes them. All out. Returns 0 or -EINVAL
 * (a size < 1, or an output NULL).
 */
int trn_ratio_pad(int w1, int h1, int w0, int h0, double *gain, double *padw, double *padh);

#ifdef __cplusplus
}
#endif

#endif
