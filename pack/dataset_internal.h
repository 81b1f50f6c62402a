/*
 * Internals of the dataset scanner (pack/dataset.c, yolo_labels.c, coco_json.c, dsyaml.c),
 * shared with tests/pack and the fuzz targets. Not part of the pack_ds API.
 */
#ifndef PACK_DATASET_INTERNAL_H
#define PACK_DATASET_INTERNAL_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "det.h"

/* ---------------------------------------------------------------------------------------------
 * Numbers
 * ------------------------------------------------------------------------------------------- */

/* Parses s[0..len) as Python's float() does for ASCII: optional sign, then digits with an
 * optional '.', optional exponent; or inf/infinity/nan (any case). Correctly rounded (fast exact
 * path, strtod_l in the "C" locale otherwise). Returns 0 and writes *out, or -1 if the text is
 * not such a number (nothing else accepted: no spaces, no underscores, no hex). */
int pack_ds_parse_number(const char *s, size_t len, double *out);

/* Room for `need` elements of `elem` bytes in *p (capacity *cap): doubles from 16. Returns 0 or
 * -ENOMEM (the array left as it was). */
int pack_ds_grow(void **p, size_t *cap, size_t need, size_t elem);

/* ---------------------------------------------------------------------------------------------
 * Label rows and their cleaning (yolo_labels.c)
 * ------------------------------------------------------------------------------------------- */

/* One row before cleaning: class and box as float32, as ultralytics holds them. */
struct pack_lbl_row {
    float v[5];       /* class, cx, cy, w, h */
    uint32_t seg_off; /* first point in pack_lbl.pts */
    uint32_t seg_n;   /* points; 0 = no polygon */
    uint32_t line;    /* 1-based source line (label file or JSON), 0 unknown */
    int64_t ann_id;   /* COCO annotation id, -1 for label files */
};

/* A row dropped for a class the record format cannot hold (> DET_CLASS_MAX). */
struct pack_lbl_drop {
    uint32_t line;
    int64_t ann_id;
    float cls;
};

/* A removed duplicate: which row went, and which identical row stayed. */
struct pack_lbl_dup {
    uint32_t line, kept_line;
    int64_t ann_id, kept_ann_id;
};

enum pack_lbl_status {
    PACK_LBL_OK = 0,      /* rows hold the cleaned rows (at least one) */
    PACK_LBL_EMPTY = 1,   /* no row at all: a background */
    PACK_LBL_CORRUPT = 2, /* the whole file is rejected: reason and bad_line say why */
};

/* Parser state and result, reused across files to avoid allocations (not thread-safe). */
struct pack_lbl {
    struct pack_lbl_row *rows; /* n_rows rows; after cleaning, in output order */
    size_t n_rows, cap_rows;
    float *pts; /* polygon points, x y pairs; n_pts points */
    size_t n_pts, cap_pts;
    struct pack_lbl_dup *dups; /* duplicates removed by the last clean */
    size_t n_dups, cap_dups;
    struct pack_lbl_drop *drops; /* rows dropped by the last clean: class too large */
    size_t n_drops, cap_drops;
    size_t *order; /* scratch for sorting */
    size_t cap_order;
    void *spans; /* scratch: one entry per text row (defined in yolo_labels.c) */
    size_t cap_spans;
    enum pack_lbl_status status;
    size_t n_in;       /* rows before cleaning (rows lost when corrupt) */
    uint32_t bad_line; /* first offending line when CORRUPT (0 unknown) */
    char reason[200];  /* why CORRUPT, one line */
};

/* Frees the buffers of L (not L itself) and zeroes it. */
void pack_lbl_free(struct pack_lbl *L);

/* Empties L (keeps buffers). */
void pack_lbl_reset(struct pack_lbl *L);

/* Appends a row (copying `n_pts` points from xy when xy is not NULL). Returns 0 or -ENOMEM. */
int pack_lbl_push(struct pack_lbl *L, const float v[5], const float *xy, size_t n_pts,
                  uint32_t line, int64_t ann_id);

/* Parses the text of one YOLO label file (buf need not be NUL-terminated) into L and cleans it
 * (pack_lbl_clean). nc: class count when known, else -1. Returns 0 (see L->status) or -ENOMEM. */
int pack_lbl_parse(struct pack_lbl *L, const char *buf, size_t len, int64_t nc);

/* Cleans the rows in L as verify_image_label does (range checks, then duplicate removal with
 * np.unique's ordering; see dataset.h) and sets L->status. Returns 0 or -ENOMEM. */
int pack_lbl_clean(struct pack_lbl *L, int64_t nc);

/* ---------------------------------------------------------------------------------------------
 * The result being built (dataset.c)
 * ------------------------------------------------------------------------------------------- */

/* A sample while building: offsets instead of pointers, fixed up by pack_ds_finish. */
struct pack_ds_bsample {
    char *image_path;
    char *label_path;
    int64_t image_id;
    uint32_t width, height;
    size_t row_off; /* first row in ds->rows */
    uint32_t n_rows;
    size_t pt_off; /* first point in ds->pts */
    uint32_t n_pts;
    size_t seq; /* insertion order: ties in the path sort keep it */
};

struct pack_ds {
    struct pack_ds_opts opts; /* copy; its pointers are borrowed during the scan only */
    struct pack_ds_bsample *bs;
    size_t n_bs, cap_bs;
    struct pack_ds_sample *samples; /* built by pack_ds_finish */
    struct pack_ds_row *rows;
    size_t n_rows, cap_rows;
    float *pts; /* x y pairs */
    size_t n_pts, cap_pts;
    char **names;
    size_t n_names;
    struct pack_ds_warning *warns;
    size_t n_warns, cap_warns;
    struct pack_ds_stats st;
    struct pack_ds_info info;
    char *root, *split, *source; /* owned strings behind info */
    int64_t nc;                  /* class count to check rows against, -1 when unknown */
    int32_t max_cls;             /* largest class index returned, -1 none */
    char *err;                   /* caller's error buffer (may be NULL) */
    size_t err_cap;
    struct pack_lbl lbl; /* scratch for label files */
};

/* Allocates an empty result with a copy of opts (NULL = defaults). Returns NULL on ENOMEM. */
struct pack_ds *pack_ds_new(const struct pack_ds_opts *opts, char *err, size_t err_cap);

/* Formats an error message into the caller's buffer and returns rc (negative). */
int pack_ds_fail(struct pack_ds *ds, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Raises a warning: counts it, stores it (up to max_warnings), calls warn_fn. msg is prefixed
 * with "file:line: " (or "file: "). Returns 0, -ENOMEM, or -PACK_DS_ESTRICT (with the message in
 * the error buffer) when opts.strict and the kind is not a note. */
int pack_ds_warn(struct pack_ds *ds, enum pack_ds_warn_kind kind, const char *file, uint64_t line,
                 int64_t ann_id, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Adds a sample with the cleaned rows of L (status OK or EMPTY), converting classes to int32 and
 * copying polygons unless opts.keep_segments is false. Counts labelled/backgrounds/rows, and
 * drops backgrounds when opts.drop_backgrounds. Takes ownership of image_path and label_path
 * (freed on error too). Returns 0 or -ENOMEM. */
int pack_ds_add_sample(struct pack_ds *ds, char *image_path, char *label_path, int64_t image_id,
                       uint32_t width, uint32_t height, const struct pack_lbl *L);

/* Reports the duplicates and corruption recorded in L for `file` (warnings, counters). Returns
 * 0, -ENOMEM or -PACK_DS_ESTRICT. */
int pack_ds_report_lbl(struct pack_ds *ds, const struct pack_lbl *L, const char *file,
                       const char *image_path);

/* Sorts the samples by image path and builds the public arrays. Returns 0 or -ENOMEM. */
int pack_ds_finish(struct pack_ds *ds);

/* Sets the class names (copies them). Returns 0 or -ENOMEM. */
int pack_ds_set_names(struct pack_ds *ds, const char *const *names, size_t n);

/* A polygon's box as ultralytics' segments2boxes + xyxy2xywh compute it on float32 arrays:
 * out = centre x, centre y, width, height. n >= 1 points. */
static inline void pack_ds_poly_box(const float *xy, size_t n, float out[4])
{
    float x0 = xy[0], x1 = xy[0], y0 = xy[1], y1 = xy[1];
    for (size_t k = 1; k < n; k++) {
        x0 = fminf(x0, xy[2 * k]);
        x1 = fmaxf(x1, xy[2 * k]);
        y0 = fminf(y0, xy[2 * k + 1]);
        y1 = fmaxf(y1, xy[2 * k + 1]);
    }
    out[0] = (x0 + x1) / 2.0f;
    out[1] = (y0 + y1) / 2.0f;
    out[2] = x1 - x0;
    out[3] = y1 - y0;
}

/* ---------------------------------------------------------------------------------------------
 * COCO JSON (coco_json.c)
 * ------------------------------------------------------------------------------------------- */

struct pack_coco;

/* Starts a streaming parse of a COCO annotation file named `json_path` (used in messages) whose
 * warnings and counters go to ds. Returns 0 or -ENOMEM. */
int pack_coco_create(struct pack_coco **out, struct pack_ds *ds, const char *json_path);

/* Feeds the next len bytes. Returns 0, or -PACK_DS_ESYNTAX / -PACK_DS_ESCHEMA / -ENOMEM /
 * -PACK_DS_ESTRICT with the message (file, byte offset, line) in ds's error buffer. */
int pack_coco_feed(struct pack_coco *c, const void *buf, size_t len);

/* Ends the input (detects truncation). Same returns as pack_coco_feed. */
int pack_coco_finish(struct pack_coco *c);

/* Reads the file at json_path through feed/finish, the annotations array cut into regions parsed
 * by several threads (see coco_json.c); the result, warnings and errors are the sequential
 * parse's. Returns as feed, or -errno. */
int pack_coco_parse_file(struct pack_coco *c);

/* Threads for pack_coco_parse_file (default: ds's opts.threads; 0 = one per core, at most 16),
 * the least bytes a region gets (default 4 MiB) and the main parser's read size (0: 256 KiB).
 * Tests cut small files with less; the result is the same for any values, except that a syntax
 * error's byte offset can depend on the read size (yajl's), never on the threads. */
void pack_coco_set_threads(struct pack_coco *c, unsigned threads, uint64_t min_region,
                           size_t read_bytes);

/* Regions whose parallel result the last pack_coco_parse_file took (the rest it parsed itself). */
size_t pack_coco_regions_taken(const struct pack_coco *c);

/* Converts what was parsed into samples of ds: class mapping, names, box conversion, polygons,
 * cleaning. image_dir: directory the file_names are relative to; NULL = do not look at the
 * filesystem (paths are the bare file_names). Returns 0, -ENOMEM, -PACK_DS_ESCHEMA or
 * -PACK_DS_ESTRICT. */
int pack_coco_emit(struct pack_coco *c, const char *image_dir);

/* Frees c. Accepts NULL. */
void pack_coco_destroy(struct pack_coco *c);

/* The canonical COCO category id (1..90) of class c (0..79), and its name. */
extern const uint8_t pack_coco80_ids[80];

/* ---------------------------------------------------------------------------------------------
 * Dataset yaml (dsyaml.c)
 * ------------------------------------------------------------------------------------------- */

/* Split keys of a dataset yaml. */
enum { PACK_DSYAML_TRAIN = 0, PACK_DSYAML_VAL = 1, PACK_DSYAML_TEST = 2, PACK_DSYAML_NSPLIT = 3 };

/* The parts of an ultralytics dataset yaml that we use. */
struct pack_dsyaml {
    char *path;                       /* `path:` as written, or NULL */
    char **split[PACK_DSYAML_NSPLIT]; /* entries of train/val/test (one for a string) */
    size_t n_split[PACK_DSYAML_NSPLIT];
    char **names; /* names in class order; NULL when absent */
    size_t n_names;
    int64_t nc;    /* `nc:`, or -1 */
    size_t copied; /* bytes of strings copied so far (PACK_DSYAML_COPY_MAX) */
};

/* The dataset yaml's bounds (dsyaml.c): all strings copied out, aliases expanded; one path. */
#define PACK_DSYAML_COPY_MAX (16u << 20)
#define PACK_DSYAML_PATH_MAX 4096u

/* Parses a dataset yaml from memory. file is used in messages. Returns 0, -ENOMEM,
 * -PACK_DS_ESYNTAX or -PACK_DS_ESCHEMA with a message in err (may be NULL). */
int pack_dsyaml_parse(const char *buf, size_t len, const char *file, struct pack_dsyaml *out,
                      char *err, size_t err_cap);

/* Frees the fields of y and zeroes it. */
void pack_dsyaml_free(struct pack_dsyaml *y);

/* Index of a split key ("train", "val", "test"), or -1. */
int pack_dsyaml_split_index(const char *name);

/* ---------------------------------------------------------------------------------------------
 * Small helpers shared by the files (dataset.c)
 * ------------------------------------------------------------------------------------------- */

/* One message into err (may be NULL / 0), printf-style; returns rc. The pack files' error line. */
__attribute__((format(printf, 4, 5))) int pack_errf(char *err, size_t cap, int rc, const char *fmt,
                                                    ...);

/* Reads a whole regular file into a new NUL-terminated buffer (at most max_len bytes, else
 * -EFBIG). Returns 0 and sets *out and *len, or -errno. */
int pack_ds_read_file(const char *path, size_t max_len, char **out, size_t *len);

/* "a" + "/" + "b" (b alone when absolute, a alone when b is empty). NULL on ENOMEM. */
char *pack_ds_join(const char *a, const char *b);

/* True when the text after the last '.' of path is an ultralytics image suffix (any case). */
bool pack_ds_is_image_name(const char *path);

#endif
