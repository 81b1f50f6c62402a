/*
 * cocoeval: COCO detection evaluation (pycocotools' COCOeval for iouType 'bbox'), the COCO
 * results json that val.py --save-json writes, and a reader of COCO annotation files.
 *
 * COCOeval, as published (cocoapi PythonAPI/pycocotools/cocoeval.py + maskApi.c bbIou), reproduced
 * step by step in double precision:
 *   - images: the given ids, sorted and made unique (np.unique(p.imgIds)); categories: every
 *     category of the annotation file, sorted; GT and detections are grouped per (image, category)
 *     keeping their file order; a GT is 'ignore' exactly when it is a crowd (iscrowd);
 *   - per (image, category): detections sorted by score, descending, stable (mergesort), the first
 *     100 kept; IoU of xywh boxes as bbIou (for a crowd GT the union is the detection's area);
 *   - per area range (all [0, 1e10], small [0, 32^2], medium [32^2, 96^2], large [96^2, 1e10],
 *     bounds inclusive; the GT's 'area' field, the detection's w * h): GTs outside the range or
 *     crowd are ignored and sorted last (stable); for each IoU threshold (np.linspace(.5, .95,
 *     10)) each detection in score order takes the best-IoU GT with IoU >= threshold (min(t,
 *     1 - 1e-10)), skipping GTs already matched unless crowd, and stopping at the first ignored
 *     GT once it holds a match to a regular one; a detection matched to an ignored GT is ignored;
 *     an unmatched detection outside the area range is ignored;
 *   - accumulate per (category, area, maxDets 1/10/100): the first maxDets detections of each
 *     image, concatenated in image order and sorted stably by score; cumulative TP / FP over the
 *     non-ignored ones; recall = TP / (non-ignored GTs), precision = TP / (TP + FP + eps) with
 *     eps = np.spacing(1); the precision envelope; at each of the 101 recall thresholds
 *     (np.linspace(0, 1, 101)) the precision at the first index whose recall >= the threshold
 *     (np.searchsorted side='left'), 0 past the end; -1 where the category has no non-ignored GT
 *     over the images (precision and recall), or no image with GT or detections;
 *   - summarize(): the 12 stats, each np.mean over the entries > -1 (numpy's pairwise sum, in
 *     C order: IoU, recall threshold, category), -1 when there are none.
 * Differences from pycocotools, none of which changes a result on valid input: a detection's
 * match is kept as a flag rather than the matched id (pycocotools' `dtm == 0` would also treat a
 * match to an annotation with id 0 as unmatched; COCO ids start at 1); a missing 'iscrowd' reads
 * as 0 (pycocotools raises); a detection on an image not in the annotation file is an error, as
 * loadRes's assertion.
 *
 * Errors: negative errno values (-EINVAL bad argument or bad json, -ENOMEM, -EIO / -errno from
 * reading or writing); functions taking (err, err_cap) also write a one-line message naming the
 * file and the offending entry. Thread safety: no shared state; objects are not locked.
 */
#ifndef TRN_COCOEVAL_H
#define TRN_COCOEVAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nms.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_COCO_NSTATS 12 /* COCOeval.stats */

/* One COCO image entry. */
struct trn_coco_image {
    int64_t id;
    int width, height; /* pixels; 0 when the file omits them */
};

/* One COCO ground-truth annotation (the fields COCOeval reads). */
struct trn_coco_ann {
    int64_t id;       /* annotation id */
    int64_t image_id; /* image it belongs to */
    int category_id;  /* COCO category id (1..90 for COCO) */
    double bbox[4];   /* x, y (top-left), width, height, pixels */
    double area;      /* the 'area' field (segment area for COCO), used for the area ranges */
    int iscrowd;      /* 1: crowd region (never a false negative, matched by intersection) */
};

/* One COCO category. */
struct trn_coco_cat {
    int id;
    char *name; /* owned by the trn_coco_gt */
};

/* A COCO annotation file in memory. Filled by trn_coco_gt_load/parse, freed by trn_coco_gt_free.
 * Arrays are in file order. */
struct trn_coco_gt {
    struct trn_coco_image *images;
    size_t n_images;
    struct trn_coco_ann *anns;
    size_t n_anns;
    struct trn_coco_cat *cats;
    size_t n_cats;
};

/*
 * Reads an instances_*.json annotation file (images, annotations, categories; segmentation and
 * other fields are skipped). gt: out (zeroed first; free with trn_coco_gt_free, also on error).
 * err: out, a message naming path and the bad entry. Returns 0, -errno (open/read), -EINVAL
 * (not json, or a missing or mistyped field), -ENOMEM.
 */
int trn_coco_gt_load(const char *path, struct trn_coco_gt *gt, char *err, size_t err_cap);

/* As trn_coco_gt_load from json text (len bytes, need not be NUL-terminated); name is used in
 * messages. */
int trn_coco_gt_parse(const char *json, size_t len, const char *name, struct trn_coco_gt *gt,
                      char *err, size_t err_cap);

/* Frees what trn_coco_gt_load filled and zeroes *gt; NULL is a no-op. */
void trn_coco_gt_free(struct trn_coco_gt *gt);

/* One detection in COCO results form. */
struct trn_coco_det {
    int64_t image_id;
    int category_id; /* COCO category id */
    double bbox[4];  /* x, y (top-left), width, height, pixels */
    double score;
};

/* ultralytics' coco80_to_coco91_class: class index 0..79 to COCO id 1..90; -1 outside. */
int trn_coco80_to_coco91(int cls);

/*
 * val.py save_one_json for one detection (xyxy in the original image's pixels): xywh computed
 * in float32 as xyxy2xywh then `xy -= wh / 2`, the four values rounded to 3 decimals and the
 * score to 5 (Python's round: nearest, ties to even, on the exact binary value), so *out holds
 * exactly what the json file will hold. category_id: already mapped (trn_coco80_to_coco91 for
 * COCO, the class index otherwise).
 */
void trn_coco_det_from(const struct trn_det *d, int64_t image_id, int category_id,
                       struct trn_coco_det *out);

/*
 * Writes n detections as json.dump(jdict) does: [{"image_id": 42, "category_id": 18,
 * "bbox": [258.15, 41.29, 348.26, 243.78], "score": 0.236}, ...] (bbox to 3 decimals, score to
 * 5, shortest form, at least one decimal as Python prints floats). Returns 0, -EINVAL, -EIO.
 */
int trn_coco_dets_write(FILE *f, const struct trn_coco_det *dets, size_t n);

/* Reads a COCO results json (a list of {image_id, category_id, bbox, score}). *dets: out,
 * malloc'ed, the caller frees it; *n: out. Returns 0, -errno, -EINVAL (message in err), -ENOMEM. */
int trn_coco_dets_load(const char *path, struct trn_coco_det **dets, size_t *n, char *err,
                       size_t err_cap);

/*
 * COCOeval(gt, dets, 'bbox') with params.imgIds = img_ids (NULL: every image of gt), then
 * evaluate(), accumulate(), summarize(). stats: out, the 12 numbers in summarize()'s order:
 * AP@[.5:.95], AP@.5, AP@.75, AP small, medium, large (maxDets 100), AR@1, AR@10, AR@100,
 * AR small, medium, large (maxDets 100); -1 where undefined. Detections of categories not in gt
 * or of images outside img_ids are ignored, as in pycocotools. Returns 0, -EINVAL (NULL
 * arguments, a detection whose image is not in gt: message in err), -ENOMEM.
 */
int trn_coco_eval(const struct trn_coco_gt *gt, const int64_t *img_ids, size_t n_img,
                  const struct trn_coco_det *dets, size_t n_det, double stats[TRN_COCO_NSTATS],
                  char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif
