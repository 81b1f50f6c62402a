/*
 * metrics: YOLOv5's internal validation metrics, as ultralytics/yolov5 v7.0 computes them
 * (val.py process_batch, utils/metrics.py ap_per_class, compute_ap, smooth, fitness,
 * ConfusionMatrix; recipe S6). The numbers are meant to equal ultralytics' to the last bit where
 * the reference is deterministic, so numpy's own algorithms are reproduced in double:
 *   - np.interp (binary search for the last xp <= x, the exact-hit and endpoint rules, the NaN
 *     fallbacks), np.linspace (i * step + start, the last set to stop), np.trapz (d * (y[i+1] +
 *     y[i]) / 2.0 summed with numpy's pairwise summation), and np.mean (pairwise sum / n);
 *   - f1.mean(0) is a plain sequential sum over classes (numpy reduces axis 0 of a C-contiguous
 *     array element-wise, row after row).
 * Choices where the reference is not deterministic or not reproducible (documented once here):
 *   - np.argsort's default quicksort is not stable; we sort stably: detections of equal conf
 *     keep their order of arrival (image order, then NMS order), in ap_per_class;
 *   - in process_batch, `matches[:, 2].argsort()[::-1]` is taken as a stable ascending sort then
 *     reversed, so among equal IoU the later (label, detection) pair in row-major order comes
 *     first; then np.unique(return_index) keeps the first occurrence (numpy uses a stable sort
 *     there), which makes each detection keep its highest-IoU label (ties: the highest label
 *     index) and then each label keep its LOWEST detection index among those (the re-sort by IoU
 *     between the two np.unique calls is commented out in v7.0's val.py, so it is not done);
 *   - smooth() is np.convolve, which numpy computes with BLAS ddot (summation order depends on
 *     the BLAS build); we sum the 101 products in order. Only an exact tie in the smoothed F1
 *     curve at the 1e-16 level could pick a different argmax;
 *   - the IoU is ultralytics' box_iou in float32 (nms.h trn_box_iou), and the 10 thresholds are
 *     torch.linspace(0.5, 0.95, 10) in float32 (start + step * i for i < 5, end - step * (9 - i)
 *     after, step = (0.95f - 0.5f) / 9), compared with >=.
 *
 * Thread safety: the free functions share no state; a struct trn_val_stats or trn_confusion is
 * used by one thread at a time.
 */
#ifndef TRN_METRICS_H
#define TRN_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "nms.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_NIOU   10   /* IoU thresholds 0.50:0.05:0.95 */
#define TRN_AP_NPX 1000 /* ap_per_class's plotting grid px = np.linspace(0, 1, 1000) */

/* One ground-truth box in the same pixel space as the detections it is matched with. */
struct trn_label {
    int cls;              /* class index in [0, nc) */
    float x1, y1, x2, y2; /* corners, pixels */
};

/* ---------------------------------------------------------------------------------------- */
/* numpy reproductions (double), exposed for the tests and for the plots                     */

/* numpy's pairwise summation of n doubles a[0], a[stride], ... (add.reduce's inner loop:
 * blocks of 8 accumulators up to 128 elements, halves above), plus the reduction's 0.0. */
double trn_np_sum(const double *a, size_t n, size_t stride);

/* np.mean of n contiguous doubles: trn_np_sum / n. n == 0 gives NaN, as numpy does. */
double trn_np_mean(const double *a, size_t n);

/* np.linspace(start, stop, num) into out[num] (num >= 1). */
void trn_np_linspace(double start, double stop, size_t num, double *out);

/*
 * np.interp(x, xp, fp, left, right) into out[nx]. xp must be non-decreasing (as numpy
 * assumes; not checked); nxp >= 1. Pass fp[0] / fp[nxp-1] for numpy's default left / right.
 */
void trn_np_interp(const double *x, size_t nx, const double *xp, const double *fp, size_t nxp,
                   double left, double right, double *out);

/*
 * ultralytics' smooth(y, f): a box filter of nf = round(n * f * 2) // 2 + 1 elements over y
 * padded with nf // 2 copies of its first and last values (np.convolve 'valid'; the products
 * are summed in order, see the top). y: n >= 1 values; out: n values, must not alias y.
 */
void trn_np_smooth(const double *y, size_t n, double f, double *out);

/* np.trapz(y, x) for n >= 2 points (0 for n < 2; NaN if its scratch allocation fails). */
double trn_np_trapz(const double *y, const double *x, size_t n);

/*
 * compute_ap(recall, precision): sentinels (recall 0 ... 1, precision 1 ... 0), the precision
 * envelope, and the 101-point np.interp integrated with np.trapz. n >= 0 points. ap: out.
 * Returns 0, -EINVAL (NULL with n > 0, or ap NULL), -ENOMEM.
 */
int trn_compute_ap(const double *recall, const double *precision, size_t n, double *ap);

/* Fitness of (P, R, mAP@0.5, mAP@0.5:0.95): 0.0 P + 0.0 R + 0.1 mAP@0.5 + 0.9 mAP@0.5:0.95,
 * summed in that order as numpy's (x * w).sum(1) over 4 elements. */
double trn_fitness(double mp, double mr, double map50, double map);

/* ---------------------------------------------------------------------------------------- */
/* Matching and AP                                                                           */

/* torch.linspace(0.5, 0.95, 10) in float32 (see the top of this file). */
void trn_iouv(float iouv[TRN_NIOU]);

/*
 * val.py process_batch: correct[i * TRN_NIOU + t] = 1 when detection i is matched at IoU
 * threshold t (same class, IoU >= iouv[t], then unique per detection, then unique per label as
 * described at the top). dets: n detections; labels: m labels; correct: out, n * TRN_NIOU bytes.
 * Returns 0 or -EINVAL (NULL with a non-zero count), -ENOMEM.
 */
int trn_process_batch(const struct trn_det *dets, size_t n, const struct trn_label *labels,
                      size_t m, uint8_t *correct);

/* The result of ap_per_class and the val.py summary. All arrays are owned by the result and
 * freed by trn_ap_result_free. */
struct trn_ap_result {
    int nc;                /* number of dataset classes */
    int n_cls;             /* classes with at least one label (rows below), ascending */
    int *cls;              /* [n_cls] class index of each row */
    double *p, *r;         /* [n_cls] precision, recall at the max-F1 confidence */
    double *f1;            /* [n_cls] F1 there */
    double *tp, *fp;       /* [n_cls] (r * nt).round(), (tp / (p + eps) - tp).round() */
    double *ap;            /* [n_cls * TRN_NIOU] AP per class and IoU threshold */
    double *ap50;          /* [n_cls] ap[:, 0] */
    double *ap5095;        /* [n_cls] ap.mean(1) */
    int64_t *nt;           /* [nc] labels per class (np.bincount(tcls, minlength=nc)) */
    int64_t n_labels;      /* sum of nt */
    int conf_index;        /* index into the 1000-point confidence grid of the max smoothed F1 */
    double mp, mr;         /* mean P, R over the rows */
    double map50, map5095; /* mean AP@0.5, AP@0.5:0.95 over the rows */
    /* The curves ultralytics plots (plot_pr_curve, plot_mc_curve), on the grid
     * px[k] = np.linspace(0, 1, TRN_AP_NPX)[k]; NULL when n_cls == 0. */
    double *curve_p;   /* [n_cls * TRN_AP_NPX] precision at confidence px[k] (IoU 0.5) */
    double *curve_r;   /* [n_cls * TRN_AP_NPX] recall at confidence px[k] (IoU 0.5) */
    double *curve_f1;  /* [n_cls * TRN_AP_NPX] 2 p r / (p + r + 1e-16) */
    double *curve_pr;  /* [n_cls * TRN_AP_NPX] py: compute_ap's precision envelope at IoU 0.5
                          interpolated at recall px[k]; 0 on rows without detections */
    uint8_t *pr_valid; /* [n_cls] 1 when the class has detections: ultralytics only appends a
                          py row for those, so only they enter mean_pr */
    int n_pr;          /* rows with pr_valid (>= 1 whenever n_cls > 0) */
    double *mean_pr;   /* [TRN_AP_NPX] py.mean(1) over the pr_valid rows */
    double *mean_p, *mean_r, *mean_f1; /* [TRN_AP_NPX] mean(0) over all rows, unsmoothed (the
                                          plots smooth with trn_np_smooth(.., 0.05)) */
};

/* Frees the arrays of *res and zeroes it; NULL is a no-op. */
void trn_ap_result_free(struct trn_ap_result *res);

/*
 * ap_per_class(tp, conf, pred_cls, target_cls) as ultralytics: tp: n * TRN_NIOU flags (as from
 * trn_process_batch), conf: n confidences, pred_cls: n classes, target_cls: m label classes, all
 * in [0, nc). Also fills the val.py summary (mp, mr, map50, map5095, nt, n_labels) and the
 * plotted curves (curve_*, mean_*), and, when no detection is correct at any threshold (val.py's
 * `stats[0].any()` false), leaves n_cls = 0, the curves NULL and the means 0 as val.py does.
 * res: out (zeroed first; free with trn_ap_result_free, also on error). Returns 0, -EINVAL
 * (NULL with a non-zero count, nc < 1, a class out of range), -ENOMEM.
 */
int trn_ap_per_class(const uint8_t *tp, const float *conf, const int *pred_cls, size_t n,
                     const int *target_cls, size_t m, int nc, struct trn_ap_result *res);

/*
 * Accumulates val.py's `stats` over the images of a validation run: per image, process_batch of
 * its detections against its labels (both in the original image's pixels), stored with the
 * detection confidences and classes and the label classes. Opaque.
 */
struct trn_val_stats;

/* Creates an empty accumulator for nc classes. Returns 0, -EINVAL (nc < 1, out NULL), -ENOMEM. */
int trn_val_stats_create(int nc, struct trn_val_stats **out);

/* Frees it; NULL is a no-op. */
void trn_val_stats_destroy(struct trn_val_stats *st);

/* Forgets every image (keeps the memory). */
void trn_val_stats_reset(struct trn_val_stats *st);

/*
 * Adds one image (val.py's per-image block; `seen` counts every call). An image with neither
 * detections nor labels adds nothing else, as val.py. Returns 0, -EINVAL (NULL with a non-zero
 * count, a class outside [0, nc)), -ENOMEM. The arrays are copied; the caller keeps them.
 */
int trn_val_stats_add(struct trn_val_stats *st, const struct trn_det *dets, size_t n,
                      const struct trn_label *labels, size_t m);

/* Number of images added since creation or the last reset. */
int trn_val_stats_seen(const struct trn_val_stats *st);

/* ap_per_class over everything added. res: out, as trn_ap_per_class. Returns its codes. */
int trn_val_stats_compute(const struct trn_val_stats *st, struct trn_ap_result *res);

/* ---------------------------------------------------------------------------------------- */
/* Confusion matrix                                                                          */

/* ultralytics' ConfusionMatrix: (nc + 1) x (nc + 1) counts, rows = predicted class, columns =
 * true class, index nc = background. Opaque. */
struct trn_confusion;

/* Creates one (ultralytics' defaults: conf 0.25, iou_thres 0.45; both compared in float32).
 * Returns 0, -EINVAL (nc < 1, out NULL), -ENOMEM. */
int trn_confusion_create(int nc, float conf, float iou_thres, struct trn_confusion **out);

/* Frees it; NULL is a no-op. */
void trn_confusion_destroy(struct trn_confusion *cm);

/*
 * Adds one image as val.py calls process_batch: with n == 0 and m > 0 every label is a
 * background FN (the detections=None path); with m == 0 nothing is added (val.py only calls it
 * when the image has labels); otherwise detections with conf > conf are matched class-agnostic
 * at IoU > iou_thres (highest IoU per detection, then per label, ties to the later index), a
 * matched label adds matrix[det_cls][label_cls], an unmatched label matrix[nc][label_cls], and,
 * only when at least one pair matched, every unmatched detection matrix[det_cls][nc] (ultralytics
 * counts no background FP in an image without any match). Returns 0, -EINVAL, -ENOMEM.
 */
int trn_confusion_add(struct trn_confusion *cm, const struct trn_det *dets, size_t n,
                      const struct trn_label *labels, size_t m);

/* The matrix, (nc + 1) * (nc + 1) doubles, row-major [pred][true]; valid until destroy. */
const double *trn_confusion_matrix(const struct trn_confusion *cm);

#ifdef __cplusplus
}
#endif

#endif
