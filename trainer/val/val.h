/*
 * val: YOLOv5 validation of a model on an ffr detection dataset, as ultralytics/yolov5 v7.0's
 * val.py run() does it (recipe S6), on the CPU, in float32 or, with opts.amp, with every conv in
 * fp16 (val.py --half) or bf16 and the rest in float32 (net.h AUTOCAST):
 *   - the loader in VAL mode with rect batches (images sorted by aspect ratio, ultralytics'
 *     batch shapes with pad 0.5 and stride max(model stride, 32)), letterbox with 114 padding,
 *     pixels / 255 in float32;
 *   - an eval forward and the Detect decode (trn_net_infer; with `augment` or several models,
 *     ultralytics' TTA and Ensemble through tta.h), run in chunks of `micro_batch` images
 * (eval-mode BatchNorm makes every image independent, so chunking changes nothing but memory); one
 * net per distinct batch shape, rebuilt when the shape changes;
 *   - multi-label, class-aware NMS (trn_nms_run with the conf / iou / max_det given);
 *   - predictions and labels mapped back to the ORIGINAL image (h0, w0) as val.py does with
 *     `shapes`: gain = h / h0 (the load_image resize the records hold; the letterbox ratio is 1
 *     because letterbox never scales up in val and the rect shapes hold every image), pads from
 *     the letterbox, then clipped;
 *   - val.py's per-image stats (process_batch matching at 10 IoU thresholds), ap_per_class,
 *     fitness, and ultralytics' confusion matrix (conf 0.25, IoU 0.45);
 *   - optionally the COCO results list val.py --save-json writes (image ids from the records;
 *     category ids through coco80_to_coco91 when asked) and the val_batchK_labels.jpg /
 *     val_batchK_pred.jpg pictures of the first batches.
 * Records whose image cannot be read stop the run with an error (a validation that silently
 * replaced an image would report numbers for another dataset).
 *
 * Errors: negative codes: -EINVAL (bad argument, a label class outside the model's classes),
 * -ENOMEM, and the codes of the loader, the net, NMS / metrics and the plots (trn_strerror
 * names them all); functions taking (err, err_cap) write one line naming the dataset and the
 * record or step. The library never prints and never exits.
 *
 * Threads: trn_val_run uses the model read-only (an eval forward writes nothing into it), the
 * reader read-only, and its own loader workers, net and NMS threads (OpenMP: `threads` of them
 * on the CPU, else one per CPU; each image's NMS on one, the rest in image order); it may run
 * while no other thread writes the model. The log callback is called from the calling thread and
 * the loader's workers, one call at a time.
 */
#ifndef TRN_VAL_H
#define TRN_VAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cocoeval.h"
#include "ffr.h"
#include "hyp.h"
#include "metrics.h"
#include "cli.h"
#include "model.h"
#include "plots.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_VAL_PLOT_BATCHES 3 /* val.py plots batches 0, 1 and 2 */

/* One log line (no newline), valid during the call. */
typedef void (*trn_val_log_fn)(void *ctx, const char *msg);

/* Validation options; fill with trn_val_opts_default(), then change fields. */
struct trn_val_opts {
    int img_size;           /* records must be packed at this long side; default 640 */
    int batch_size;         /* images per rect batch (only shapes the batches); default 32 */
    int micro_batch;        /* images per forward, 1..batch_size; default 4 (memory only) */
    unsigned workers;       /* loader threads, 0 = the loader's default */
    int threads;            /* kern context threads of the net (trn_net_opts.threads) */
    float conf_thres;       /* default 0.001 */
    double iou_thres;       /* NMS IoU; default 0.6 (0.65 for the final COCO numbers) */
    int max_det;            /* detections per image; default 300 */
    bool rect;              /* rect batches; default true (val.py's in-training and CLI val) */
    bool save_json;         /* collect the COCO results list in the result; default false */
    bool coco91;            /* save_json: category_id = coco80_to_coco91(cls) (needs nc <= 80);
                               false: category_id = cls; default false */
    int max_batches;        /* > 0: stop after this many batches (smoke runs); default 0: all */
    const char *plot_dir;   /* non-NULL: write val_batchK_labels.jpg / _pred.jpg for the first
                               TRN_VAL_PLOT_BATCHES batches there (borrowed); default NULL */
    const char *curves_dir; /* non-NULL: write PR_curve.png, F1_curve.png, P_curve.png,
                               R_curve.png and confusion_matrix.png there at the end (val.py
                               with plots=True; trn_plot_val) (borrowed); default NULL */
    const struct trn_plot_names *names; /* class names for the plots (borrowed, may be NULL) */
    const struct trn_hyp *loss_hyp;     /* non-NULL: also compute val.py's val losses with
                                           ComputeLoss (loss.h) on each rect batch's raw Detect
                                           outputs (eval mode) and the loader's targets, gains
                                           scaled as train.py does for loss_img (borrowed);
                                           default NULL */
    int loss_img;                       /* loss_hyp: the TRAINING image size (obj gain scale);
                                           0: img_size */
    bool augment;                       /* val.py --augment: ultralytics' test-time
                                           augmentation (tta.h) for every model; ignored with
                                           loss_hyp, as val.py's compute_loss path ignores it;
                                           default false */
    int amp;                            /* the convs' dtype (net.h AUTOCAST; kern.h KERN_DT_*):
                                           KERN_DT_F32 (default), KERN_DT_F16 (val.py --half:
                                           fp16 convs with float32 accumulation, BN, SiLU and
                                           decode in float32) or KERN_DT_BF16; the weights are
                                           cast once per net, not per batch */
    int device;                         /* -1 (default): the nets on the CPU; >= 0: on this
                                           CUDA device (val.py's --device; set micro_batch to
                                           batch_size there: the default 4 only saves host
                                           memory) */
    bool device_path;                   /* CPU only: the device data path on the CPU ops
                                           (trn_net_opts.device_path; tests); default false */
    int cpu_engine;                     /* what runs inference on the CPU (net.h enum
                                           trn_cpu_engine); default TRN_CPU_ENGINE_AUTO: oneDNN
                                           where the build has it */
    bool single_cls;                    /* val.py --single-cls: every label's class and every
                                           prediction's class is 0; default false */
    const char *save_txt_dir;           /* val.py --save-txt: for every image with predictions,
                                           DIR/<file stem>.txt (existing dir, borrowed) gets
                                           "cls cx cy w h" per detection, normalised to the
                                           original image, '%g' as save_one_txt; NULL: none */
    bool save_conf;                     /* --save-conf: the confidence after each row */
    bool save_hybrid;                   /* --save-hybrid: each image's labels join its
                                           predictions before NMS as confidence-1 candidates
                                           (val.py's labels= to non_max_suppression: the
                                           metrics then come out high, as val.py warns) */
    trn_progress_fn progress;           /* NULL, or val.py's tqdm bar after every batch (cli.h),
                                           its description the table's header */
    void *progress_ctx;
    trn_val_log_fn log; /* optional; NULL drops the lines */
    void *log_ctx;      /* passed to log */
};

/* val.py's table header ('%22s' + '%11s' * 6): the bar's description and the callers' first line.
 */
#define TRN_VAL_HEADER \
    "                 Class     Images  Instances          P          R      mAP50   mAP50-95"

/* Fill *o with the defaults above. Thread-safe. */
void trn_val_opts_default(struct trn_val_opts *o);

/* What a validation run found. Arrays are owned by the result (trn_val_result_free). */
struct trn_val_result {
    int seen;                            /* images validated (val.py's `seen`) */
    int64_t n_labels;                    /* labels over those images (nt.sum()) */
    struct trn_ap_result ap;             /* ap_per_class: per-class rows and the means */
    double mp, mr;                       /* mean precision, recall (ap.mp, ap.mr) */
    double map50, map;                   /* mAP@0.5, mAP@0.5:0.95 */
    double fitness;                      /* 0.1 mAP@0.5 + 0.9 mAP@0.5:0.95 */
    double loss_box, loss_obj, loss_cls; /* loss_hyp: ComputeLoss items (after the gains,
                                            before x bs) averaged over batches, as val.py's
                                            loss / len(dataloader); else 0 */
    double *confusion;                   /* (nc + 1)^2 counts, row-major [pred][true] (metrics.h) */
    int nc;                              /* the model's classes */
    int64_t n_dets;                      /* detections kept after NMS, over all images */
    double ms_pre;                       /* per image: waiting for the loader (pre-process), ms */
    double ms_infer;                     /* per image: forward + decode, ms */
    double ms_nms;                       /* per image: NMS, mapping back, matching, ms */
    int plots_written;                   /* pictures written to plot_dir and curves_dir */
    struct trn_coco_det *coco; /* save_json: the results list in val.py's order, else NULL */
    size_t n_coco;             /* entries of coco */
    int64_t *image_ids;        /* save_json: the image id of every validated record (sorted,
                                  unique), for trn_coco_eval's img_ids; else NULL */
    size_t n_image_ids;        /* entries of image_ids */
};

/* Free the arrays of *res and zero it. NULL is a no-op. */
void trn_val_result_free(struct trn_val_result *res);

/*
 * Validate model m (borrowed; read-only during the call) on the open dataset r (borrowed)
 * with options o (NULL: defaults). res: out, zeroed first; free with trn_val_result_free, also
 * on error. err: out, err_cap bytes, one line on error (may be NULL).
 * Returns 0, -EINVAL (bad options, not a detection dataset at img_size, a label class >= the
 * model's nc, coco91 with nc > 80), -ENOMEM, or a code of the loader (-FFR_E*, -EIO...), the
 * net (-TRN_MODEL_E*, -KERN_E*) or the plots (-EIO, -errno writing a picture).
 */
int trn_val_run(struct trn_model *m, const struct ffr_reader *r, const struct trn_val_opts *o,
                struct trn_val_result *res, char *err, size_t err_cap);

/*
 * trn_val_run for an ensemble (ultralytics' Ensemble, tta.h): the n_models models (borrowed,
 * read-only) run on every batch and their outputs are concatenated before NMS; the loader's
 * stride is the largest of theirs; models[0] gives nc (every model must have it). n_models == 1
 * is trn_val_run. Returns what trn_val_run returns, and -EINVAL for models of different class
 * counts or loss_hyp with more than one model (err says which).
 */
int trn_val_run_ensemble(struct trn_model *const *models, int n_models, const struct ffr_reader *r,
                         const struct trn_val_opts *o, struct trn_val_result *res, char *err,
                         size_t err_cap);

/*
 * ultralytics' output_to_target for a plot: n detections of batch image `image` (xyxy, batch
 * pixels) as rows [image, cls, cx, cy, w, h, conf] (float32) into rows (7 * n floats, out).
 */
void trn_val_dets_to_rows(const struct trn_det *dets, size_t n, int image, float *rows);

#ifdef __cplusplus
}
#endif

#endif /* TRN_VAL_H */
