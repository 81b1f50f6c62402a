/*
 * Dataset scanning for yolo-pack: turns a detection dataset on disk into a sorted list of samples
 * (image path + cleaned label rows + optional polygons) that the packer decodes and writes.
 *
 * Inputs understood (see pack_ds_scan):
 *   - the YOLO layout ROOT/images/<split>/... with ROOT/labels/<split>/<stem>.txt, or any image
 *     directory or image list file whose labels follow ultralytics' img2label_paths rule (the last
 *     "/images/" becomes "/labels/", the extension becomes ".txt");
 *   - an ultralytics dataset yaml (path, train, val, test, names, nc);
 *   - COCO's layout ROOT/annotations/instances_<split>.json with images in ROOT/<split>/ or
 *     ROOT/images/<split>/, or an instances_*.json file named directly. The JSON is parsed
 *     streaming (yajl), so memory is bounded by the boxes and polygons kept.
 *
 * Label cleaning follows ultralytics/yolov5 v7.0 verify_image_label (utils/dataloaders.py):
 *   - a file with any row of more than 6 columns is a segment file: each row is "class x1 y1 x2 y2
 *     ..." and its box is the polygon's bounding box (segments2boxes, float32);
 *   - otherwise every row must have exactly 5 columns; all values must be >= 0 and the four
 *     coordinates <= 1. Any violation (also a non-numeric token, a ragged file, a non-finite value)
 *     rejects the WHOLE image, as ultralytics does ("ignoring corrupt image/label"): the sample is
 *     dropped, counted in `corrupt`, and a warning names the file and the first bad line;
 *   - exact duplicate rows are removed. When a file has duplicates its rows come out sorted
 *     lexicographically (class, cx, cy, w, h as float32), first occurrence kept: that is the order
 *     np.unique(axis=0, return_index=True) gives ultralytics. Files without duplicates keep their
 *     order. Each removed row is a warning naming its line and the line it duplicates.
 *   Stricter than ultralytics (it would only fail later, at training): a class that is not an
 *   integer below 2^24, or (when the class names are known) not below the class count, also
 *   rejects the image. Tokens are parsed as Python's float() does for ASCII text (decimal,
 *   exponent, inf/nan), then rounded to float32 as numpy does (via double); digit-group
 *   underscores, hex floats and non-ASCII bytes reject the file. Polygon points are kept as
 *   written (ultralytics checks only the box made from them).
 *
 * COCO conversion follows ultralytics' JSON2YOLO convert_coco_json (the tool that made
 * coco2017labels*.zip): iscrowd annotations are skipped (counted); bbox [x, y, w, h] in pixels
 * becomes cx = (x + w/2)/W, cy = (y + h/2)/H, w/W, h/H computed in double, then float32; boxes
 * with w <= 0 or h <= 0 are dropped (counted, warned); an exact duplicate (class, box) within an
 * image is dropped as JSON2YOLO's `box not in bboxes` does. Class ids: when every category of the
 * file is one of COCO's 80 (same id and name) the coco91->coco80 table gives 0..79 and the names
 * are COCO's 80; otherwise category ids are mapped to 0..K-1 in ascending id order and the names
 * are the categories' names in that order. Polygons: a one-part polygon is kept as is; several
 * parts are merged into one as JSON2YOLO's merge_multi_segment does (in pixel space, double). The
 * rows then go through the same cleaning as label files. Images with no (non-crowd) annotation
 * are backgrounds. Where JSON2YOLO would crash or write a row that ultralytics then rejects with
 * the whole image, we drop less and say so: an unusable polygon (odd count, empty part, RLE on a
 * non-crowd annotation) loses only the polygon; a bad annotation, or an image entry without
 * usable id/file_name/size, is dropped alone; a missing iscrowd means 0; a duplicate box drops
 * its whole annotation (JSON2YOLO dedupes boxes and polygons separately, which can misalign them).
 *
 * Paths, where ultralytics depends on its working directory or install: a list-file line that is
 * neither absolute nor "./..." is relative to the list file; a relative yaml `path:` is the first
 * directory that exists of: beside the yaml file, beside the yaml's folder (ultralytics resolves
 * it against its checkout, whose data/ holds the yamls: `../datasets/coco128` next to it), the
 * working directory. Directories are searched recursively (hidden entries skipped, symlinks
 * followed), images recognised by suffix (bmp dng jpeg jpg mpo png tif tiff webp, any case).
 *
 * Sample order: sorted by image path (byte order, as Python sorts str paths), so the same input
 * gives the same order whatever the thread count of the consumer.
 *
 * Errors are negative: -errno for system/argument errors, -PACK_DS_E* below for dataset errors.
 * Every public function is safe to call from several threads on different handles; a finished
 * struct pack_ds is read-only, so any number of threads may read the same one concurrently.
 */
#ifndef PACK_DATASET_H
#define PACK_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Dataset error codes, returned negated. Above every errno value; pinned once released. */
#define PACK_DS_ESYNTAX   3201 /* malformed JSON / YAML / text (message has file and position) */
#define PACK_DS_ESCHEMA   3202 /* well-formed, but not the expected structure or types */
#define PACK_DS_ELAYOUT   3203 /* no recognised layout, ambiguous split, or missing directory */
#define PACK_DS_ENOIMAGES 3204 /* the input names no usable image */
#define PACK_DS_ESTRICT   3205 /* strict mode: a warning was raised (message is the warning) */

/* Which layout to read. AUTO: YOLO labels win when a root has both images/+labels/ and
 * annotations/ (ultralytics' COCO download has both). */
enum pack_ds_format {
    PACK_DS_FORMAT_AUTO = 0,
    PACK_DS_FORMAT_YOLO = 1,
    PACK_DS_FORMAT_COCO = 2,
};

/* Where the class names came from. */
enum pack_ds_names_source {
    PACK_DS_NAMES_NONE = 0,      /* no labels and no names anywhere: zero classes */
    PACK_DS_NAMES_GENERATED = 1, /* YOLO without yaml: "0".."K-1", K = max class + 1 */
    PACK_DS_NAMES_YAML = 2,      /* the dataset yaml's names */
    PACK_DS_NAMES_JSON = 3,      /* the COCO categories (or COCO's 80 names) */
    PACK_DS_NAMES_OVERRIDE = 4,  /* opts.names / opts.names_path */
};

/* Kinds of warning. All but PACK_DS_W_ORPHAN_LABEL are errors under opts.strict. */
enum pack_ds_warn_kind {
    PACK_DS_W_LABEL_CORRUPT = 0,   /* label file rejected as a whole: its image is dropped */
    PACK_DS_W_LABEL_DUPLICATE = 1, /* duplicate label row removed (line = the removed row) */
    PACK_DS_W_IMAGE_MISSING = 2,   /* an image named by a list file or the JSON does not exist */
    PACK_DS_W_LIST_ENTRY = 3,      /* list-file line that is not an image path, or a repeat */
    PACK_DS_W_ANN_INVALID = 4,     /* COCO annotation dropped (bad field, w/h <= 0, unknown
                                      category or image, duplicate box) */
    PACK_DS_W_SEGMENT_INVALID = 5, /* COCO polygon unusable (odd count, RLE on a non-crowd
                                      annotation, ...): the box is kept without polygon */
    PACK_DS_W_IMAGE_INVALID = 6,   /* COCO images[] entry unusable (id, size, file_name, repeat) */
    PACK_DS_W_ORPHAN_LABEL = 7,    /* note only: a label file with no image (ignored, as
                                      ultralytics does); never an error, even when strict */
    PACK_DS_W_NOT_A_FILE = 8,      /* a label or image path that is a directory, FIFO, device or
                                      socket: the label counts as missing (a background, as
                                      os.path.isfile), the image is skipped; never opened */
    PACK_DS_W_ROW_DROPPED = 9,     /* a label row whose class the record format cannot hold
                                      (> DET_CLASS_MAX, 65535): the row alone is dropped */
};

/* One warning. Strings are owned by the struct pack_ds (or, in the callback, valid only during
 * the call). */
struct pack_ds_warning {
    enum pack_ds_warn_kind kind;
    const char *file; /* the file concerned: label file, list file, JSON file or image */
    uint64_t line;    /* 1-based line in `file`, 0 when not applicable */
    int64_t ann_id;   /* COCO annotation (or image) id concerned, -1 when not applicable */
    const char *msg;  /* one line, English, no trailing newline; begins with "file:line: " */
};

/* Counters of one scan. Every input the scan skips is counted in exactly one field. */
struct pack_ds_stats {
    uint64_t images_found;        /* candidate images: files found, list entries, JSON images[] */
    uint64_t samples;             /* samples returned (= labelled + backgrounds) */
    uint64_t labelled;            /* samples with at least one label row */
    uint64_t backgrounds;         /* samples returned with no row (missing/empty label file, no
                                     annotation or only crowd ones) */
    uint64_t label_missing;       /* YOLO: images without a label file (backgrounds) */
    uint64_t label_empty;         /* YOLO: images with an empty label file (backgrounds) */
    uint64_t backgrounds_dropped; /* backgrounds dropped because opts.drop_backgrounds */
    uint64_t images_missing;      /* listed images that do not exist (not returned) */
    uint64_t images_invalid;      /* COCO images[] entries unusable, repeated list entries, and
                                     image names that are not regular files (FIFOs, devices) */
    uint64_t corrupt;             /* images dropped because their labels are corrupt ("nc") */
    uint64_t rows;                /* label rows returned */
    uint64_t rows_with_segment;   /* of `rows`, those carrying a polygon */
    uint64_t rows_corrupt;        /* rows lost with the corrupt images above */
    uint64_t rows_duplicate;      /* duplicate rows removed (label files and COCO) */
    uint64_t rows_bad_box;        /* COCO boxes with w <= 0 or h <= 0, or a malformed bbox */
    uint64_t rows_bad_category;   /* COCO annotations with an unknown category id, and rows whose
                                     class is beyond DET_CLASS_MAX (dropped) */
    uint64_t rows_no_image;       /* COCO annotations whose image_id is not in images[], or whose
                                     image was unusable or missing on disk */
    uint64_t crowd_skipped;       /* COCO iscrowd annotations skipped */
    uint64_t segments_dropped;    /* COCO polygons dropped with the box kept */
    uint64_t orphan_labels;       /* label files with no image (notes, not returned) */
    uint64_t non_image_files;     /* files in image directories without an image extension */
    uint64_t warnings;            /* warnings raised (stored or not), notes included */
};

/* One label row: class index and normalised box (fractions of the image width/height), plus an
 * optional polygon. */
struct pack_ds_row {
    int32_t cls;        /* class index, 0 <= cls < class count */
    float cx, cy, w, h; /* box centre and size, normalised to [0, 1] */
    uint32_t seg_first; /* index of the polygon's first point in the sample's seg_xy */
    uint32_t seg_count; /* polygon points; 0 = this row has no polygon */
};

/* One image of the dataset. All pointers are owned by the struct pack_ds and stay valid until
 * pack_ds_destroy. */
struct pack_ds_sample {
    const char *image_path;         /* path of the image file, as built from the input */
    const char *label_path;         /* YOLO label file (may not exist), or the COCO JSON */
    int64_t image_id;               /* COCO id; else the file stem when all digits; else -1 */
    uint32_t width, height;         /* original size from the COCO JSON; 0 when unknown */
    uint32_t n_rows;                /* label rows; 0 = background */
    const struct pack_ds_row *rows; /* n_rows rows */
    uint32_t n_seg_points;          /* points in seg_xy (all rows of this sample) */
    const float *seg_xy;            /* 2 * n_seg_points floats: x0 y0 x1 y1 ..., normalised */
};

/* Facts about the scan, for the packed file's metadata. Strings owned by the struct pack_ds. */
struct pack_ds_info {
    enum pack_ds_format format; /* the layout that was read (never AUTO) */
    enum pack_ds_names_source names_source;
    const char *root;   /* dataset root (or the directory of the list file / JSON / yaml) */
    const char *split;  /* split read ("train2017", "train", ...); "" when none applies */
    const char *source; /* what was read: image directory, list file, JSON or yaml path */
};

/* Called for each warning as it is raised (stored or not), in scan order, on the scanning
 * thread. `w` and its strings are valid only during the call. */
typedef void (*pack_ds_warn_fn)(void *user, const struct pack_ds_warning *w);

/* Options. Fill with pack_ds_opts_default, then change fields. */
struct pack_ds_opts {
    enum pack_ds_format format; /* AUTO (default), YOLO or COCO */
    const char *split;          /* NULL (default): the only split there is; for a yaml, "train" */
    const char *const *names;   /* class names override (n_names entries), or NULL */
    size_t n_names;
    const char *names_path; /* names override from a file: a yaml with `names:`, or one name a
                               line; ignored when `names` is set. NULL = none */
    const char *image_dir;  /* COCO: directory holding the images (overrides ROOT/<split>/ and
                               ROOT/images/<split>/). NULL = detect */
    bool strict;            /* any warning (not notes) fails the scan with -PACK_DS_ESTRICT */
    bool drop_backgrounds;  /* drop samples with no row (counted in backgrounds_dropped) */
    bool keep_segments;     /* return polygons (default true) */
    bool coco_boxes_from_segments; /* COCO: box = polygon's bounding box (as ultralytics trains
                                      on coco2017labels-segments), where a polygon exists.
                                      Default false: the JSON bbox, as coco2017labels.zip */
    unsigned threads;              /* threads reading label files (0 = one per core, at least
                                      8, at most 16) and parsing a COCO JSON (0 = one per core,
                                      at most 16); the result is the same for any value */
    size_t max_warnings;           /* warnings stored in the result (default 1000); all are counted
                                      and all reach warn_fn */
    pack_ds_warn_fn warn_fn;       /* optional, see pack_ds_warn_fn */
    void *warn_user;               /* passed to warn_fn */
};

/* Opaque scan result. */
struct pack_ds;

/* Sets `o` to the defaults: AUTO format, auto split, no overrides, not strict, backgrounds kept,
 * segments kept, 1000 warnings stored, no callback. */
void pack_ds_opts_default(struct pack_ds_opts *o);

/*
 * Scans the dataset at `path` and writes the result to *out.
 *
 * path: a dataset root directory, an image directory, a dataset yaml (.yaml/.yml), a COCO
 *       annotation file (.json) or an image list file (any other regular file).
 * opts: options, or NULL for the defaults.
 * out:  on success a new struct pack_ds, owned by the caller (pack_ds_destroy); on error NULL.
 * err, err_cap: optional buffer (may be NULL/0) that receives a one-line English message naming
 *       the file (and line or byte offset) on error; untouched on success.
 *
 * Returns 0 on success, or a negative error:
 *   -EINVAL bad arguments or option values (e.g. names override shorter than the classes used);
 *   -ENOENT path (or a directory the layout needs) does not exist; -ENOMEM; -EIO and other
 *   -errno from reading; -PACK_DS_ESYNTAX malformed JSON/YAML; -PACK_DS_ESCHEMA wrong structure;
 *   -PACK_DS_ELAYOUT unrecognised layout or ambiguous split; -PACK_DS_ENOIMAGES nothing to pack;
 *   -PACK_DS_ESTRICT a warning under opts->strict.
 * Thread safety: reentrant; the callback runs on the calling thread.
 */
int pack_ds_scan(const char *path, const struct pack_ds_opts *opts, struct pack_ds **out, char *err,
                 size_t err_cap);

/* Frees a result. Accepts NULL. Invalidates every pointer obtained from it. */
void pack_ds_destroy(struct pack_ds *ds);

/* Number of samples. */
size_t pack_ds_count(const struct pack_ds *ds);

/* Sample i (0 <= i < pack_ds_count), in the stable sorted order; NULL when i is out of range.
 * Valid until pack_ds_destroy; safe to call from many threads at once. */
const struct pack_ds_sample *pack_ds_get(const struct pack_ds *ds, size_t i);

/* Class names: returns the array (n entries, written to *n), owned by ds. */
const char *const *pack_ds_names(const struct pack_ds *ds, size_t *n);

/* Counters of the scan (owned by ds). */
const struct pack_ds_stats *pack_ds_stats(const struct pack_ds *ds);

/* Layout, root, split and source of the scan (owned by ds). */
const struct pack_ds_info *pack_ds_info(const struct pack_ds *ds);

/* Stored warnings: how many (at most opts.max_warnings), and the i-th (NULL if out of range). */
size_t pack_ds_warning_count(const struct pack_ds *ds);
const struct pack_ds_warning *pack_ds_warning_get(const struct pack_ds *ds, size_t i);

/*
 * Writes a one-line summary of `st` (no newline) into dst, e.g.
 * "128 found, 128 samples (126 labelled, 2 backgrounds), 0 missing, 0 corrupt; 929 rows kept,
 *  0 dropped (0 duplicate, 0 corrupt, 0 bad box, 0 bad category, 0 no image), 0 crowd skipped,
 *  2 orphan labels, 2 warnings". Returns the length it needed (as snprintf), or -EINVAL.
 */
int pack_ds_stats_format(const struct pack_ds_stats *st, char *dst, size_t dst_cap);

/* Name of a warning kind ("label-corrupt", ...), "unknown" for other values. */
const char *pack_ds_warn_kind_name(enum pack_ds_warn_kind kind);

/* COCO's 80 detection class names in ultralytics' class order (0 = person ... 79 =
 * toothbrush), e.g. for models trained on COCO whose weights carry no names. */
extern const char *const pack_coco80_names[80];

/* Message for a return code of this module (PACK_DS_E* and errno values). Never NULL. */
const char *pack_ds_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif
