/*
 * det: the detection dataset, owned here and nowhere else (docs/format.md section 8).
 *
 * An ffr dataset is a detection dataset when its metadata says `encoding: ffr-det-1`. Three
 * things make one, and this header holds all three:
 *   - the sample: one image and its labels per record, and the index summary of each record
 *     (det.c);
 *   - the metadata: typed (struct det_meta), written by one writer (yolo-pack's) and read by one
 *     reader (every other program), both in meta.c;
 *   - the label table: every image's sizes and label rows from the index summaries, built once
 *     per dataset in CSR form (labels.c) and shared by the loader, AutoAnchor, image weights and
 *     the plots, with one rule for a bad summary: an error naming the file and the record.
 *
 * Nothing here trusts its input: the sample and summary decoders check every size against the
 * buffer, and the metadata reader bounds the class count, each name and the names' total bytes,
 * so that a hostile metadata block (an alias bomb included) costs at most DET_NAMES_BYTES_MAX.
 *
 * Errors: negative codes, -errno or ffr's -FFR_E* (ffr_strerror names both); messages go into a
 * caller's buffer, never to a stream.
 */
#ifndef DET_H
#define DET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ffr.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DET_API __attribute__((visibility("default")))
#else
#define DET_API
#endif

/* The metadata's `encoding` value that makes an ffr dataset a detection dataset. */
#define DET_ENCODING "ffr-det-1"

/* ---------------------------------------------------------------------------------------- */
/* Samples and summaries (docs/format.md 8, 8.1).                                            */

enum { DET_RGB8 = 0, DET_RGB8_SUB = 1, DET_JPEG = 2 };
/* Where the pixels start in a sample det_encode writes (right after its header, format.md
 * 8), so that a producer can decode an image straight into its place in the record and hand
 * det_encode that same pointer (no copy is then made). 8 past a multiple of 16 on purpose:
 * see format.md 8.2. Decoders also read version-1 samples, whose pixels start at 64. */
#define DET_PIXEL_OFFSET 72u

/* The largest class index a detection sample holds (docs/format.md 8). */
#define DET_CLASS_MAX 65535u

/* A detection sample. For encoding, the caller fills it; after decoding, pointers are views
 * into the decoded buffer (valid while that buffer is). */
struct det_sample {
    uint32_t h, w;         /* stored image size in pixels */
    uint32_t h0, w0;       /* original size (after EXIF orientation) */
    uint32_t pixel_format; /* DET_* */
    const uint8_t *pixels; /* pixel_bytes bytes (RGB8: h*w*3, HWC) */
    uint32_t pixel_bytes;
    uint32_t n_labels;          /* rows */
    const float *labels;        /* n_labels x 5: class, cx, cy, w, h, normalised */
    uint32_t n_points;          /* total polygon points; 0 = no segments */
    const uint32_t *seg_counts; /* n_labels entries when n_points > 0, else NULL */
    const float *seg_points;    /* n_points x 2 (x, y), normalised */
    int64_t image_id;           /* -1 when unknown */
    const char *name;           /* source file name, name_len bytes, not NUL-terminated */
    uint32_t name_len;
};

/* Bytes det_encode needs for s. Returns 0 when s is invalid (sizes overflow u32). */
DET_API size_t det_encoded_size(const struct det_sample *s);

/*
 * Serialises s into dst. With pixel_format DET_RGB8_SUB, s->pixels must hold plain RGB8
 * pixels: the filter is applied here. For the other formats s->pixels may already sit at
 * dst + DET_PIXEL_OFFSET (they are then left in place); any other overlap is not allowed.
 * Returns bytes written or -EINVAL (inconsistent sample), -FFR_ETOOBIG (dst_cap too small).
 */
DET_API int64_t det_encode(const struct det_sample *s, void *dst, size_t dst_cap);

/*
 * Parses and checks a sample: every size against len, finite coordinates, whole-number classes.
 * On success *out holds views into buf (pixels still filtered for RGB8_SUB: use
 * det_pixels). Returns 0 or -FFR_EBADMAGIC, -FFR_EVERSION, -FFR_ECORRUPT.
 */
DET_API int det_decode(const void *buf, size_t len, struct det_sample *out);

/*
 * Writes the sample's image as plain RGB8 (h*w*3 bytes) into dst, undoing the Sub filter.
 * Returns bytes written, -FFR_ETOOBIG, or -ENOTSUP for JPEG samples (decode those with a JPEG
 * library: they hold a JPEG file in pixels).
 */
DET_API int64_t det_pixels(const struct det_sample *s, uint8_t *dst, size_t dst_cap);

/* The index summary of a detection record (docs/format.md 8.1). */
struct det_summary {
    uint32_t h, w, h0, w0; /* stored and original image sizes */
    uint32_t n_labels;
    const float *labels; /* n_labels x 5, a view into the summary bytes (4-byte aligned) */
};

/* The largest image side a consumer accepts (stored and original sizes). */
#define DET_SIDE_MAX 65535u

/*
 * What every consumer of detection samples requires beyond the encoding (det_decode): the
 * stored and original sizes in 1..DET_SIDE_MAX, and every label box normalised (cx, cy, w,
 * h within [0, 1]: what yolo-pack writes and ultralytics asserts of a label file). The training
 * and validation loaders and `ffr verify` apply exactly these checks, so a dataset that verify
 * passes is one that training accepts and reads as written. Returns 0, or -FFR_ECORRUPT with one
 * line in why (may be NULL) naming the first offending field.
 */
DET_API int det_check(const struct det_sample *s, char *why, size_t why_cap);
/* The same checks of an index summary (its sizes and labels). */
DET_API int det_summary_check(const struct det_summary *m, char *why, size_t why_cap);

/* Bytes of the summary of s: 20 + 20 * n_labels. */
DET_API size_t det_summary_size(const struct det_sample *s);
/* Writes the summary of s. Returns bytes written or -FFR_ETOOBIG. */
DET_API int64_t det_summary_encode(const struct det_sample *s, void *dst, size_t dst_cap);
/* Parses a summary (views into buf). Returns 0 or -FFR_ECORRUPT. */
DET_API int det_summary_decode(const void *buf, size_t len, struct det_summary *out);

/* ---------------------------------------------------------------------------------------- */
/* Metadata (docs/format.md 8.3).                                                            */

/* Bounds the reader enforces (and the writer respects): a name's bytes, and all names' bytes.
 * COCO's 80 names take 600 bytes and Open Images' 601 about 9 KB. */
#define DET_NAME_MAX        4096u
#define DET_NAMES_BYTES_MAX (16u << 20)

/* How the packer resized (yolo-pack --interp). UNKNOWN: absent or not one of these. */
enum det_interp {
    DET_INTERP_UNKNOWN = 0,
    DET_INTERP_LINEAR,
    DET_INTERP_AREA,
    DET_INTERP_TRAIN, /* by split, train: always linear (train.py's augment=True) */
    DET_INTERP_VAL,   /* by split, val: area when shrinking, linear when enlarging (val.py) */
};
/* How the packer rounded the resized sides. UNKNOWN: a pack older than the key. */
enum det_round { DET_ROUND_UNKNOWN = 0, DET_ROUND_INT, DET_ROUND_CEIL };
enum det_codec { DET_CODEC_UNKNOWN = 0, DET_CODEC_RAW, DET_CODEC_ZSTD, DET_CODEC_JPEG };
enum det_format { DET_FORMAT_UNKNOWN = 0, DET_FORMAT_YOLO, DET_FORMAT_COCO };

/* What the packer found and did (the metadata's `counts`). */
struct det_counts {
    uint64_t found, packed, backgrounds, corrupt_skipped, missing_skipped, restored, label_rows,
        label_rows_dropped, crowd_skipped;
};

/*
 * A detection dataset's metadata. det_meta_parse fills it (strings malloc'd, freed by
 * det_meta_free); det_meta_write reads it (strings borrowed). Absent keys read as 0, NULL or
 * UNKNOWN.
 */
struct det_meta {
    bool is_det;      /* encoding is DET_ENCODING: records are det samples */
    char *encoding;   /* the `encoding` value as written, or NULL when absent */
    uint32_t nc;      /* the `nc` key (0 when absent) */
    uint32_t n_names; /* entries of names: the highest class named + 1 */
    char **names;     /* n_names entries; a class the metadata does not name is NULL */
    uint32_t size;    /* long side the images were packed at */
    char *split;      /* "" when none applied */
    enum det_format format;
    enum det_interp interp;
    enum det_round round;
    enum det_codec codec;
    int zstd_level;   /* DET_CODEC_ZSTD */
    bool sub_filter;  /* DET_CODEC_ZSTD: the Sub filter */
    int jpeg_quality; /* DET_CODEC_JPEG */
    char *source;     /* what was read */
    struct det_counts counts;
    char *packer_version;
    bool drop_backgrounds, segments, boxes_from_segments;
};

/*
 * Parses metadata text (len bytes, not NUL-terminated). Text that is not a YAML mapping, or
 * whose encoding is not DET_ENCODING, gives 0 with is_det false (an ffr file of another kind);
 * the keys are read all the same (a checkpoint's metadata names its classes the same way).
 * Returns 0, -FFR_ECORRUPT with one line in why (may be NULL) when the text is not YAML or a
 * detection key is out of bounds (a class over DET_CLASS_MAX, a name over DET_NAME_MAX, names
 * over DET_NAMES_BYTES_MAX in all), or -ENOMEM. *out is always safe to det_meta_free.
 */
DET_API int det_meta_parse(const char *text, size_t len, struct det_meta *out, char *why,
                           size_t why_cap);
/* Frees what det_meta_parse allocated and zeroes *m (NULL is fine). */
DET_API void det_meta_free(struct det_meta *m);

/*
 * Writes m as the metadata text (YAML, the keys of format.md 8.3 in a fixed order; is_det is
 * implied, nc is n_names). The same m gives the same bytes. On success *out is a malloc'd text
 * of *len bytes. Returns 0, -EINVAL (m breaks the reader's bounds: over DET_CLASS_MAX + 1
 * names, a name over DET_NAME_MAX, names over DET_NAMES_BYTES_MAX) or -ENOMEM.
 */
DET_API int det_meta_write(const struct det_meta *m, char **out, size_t *len);

/* The interp as the metadata spells it ("" for UNKNOWN). */
DET_API const char *det_interp_name(enum det_interp i);

/* ---------------------------------------------------------------------------------------- */
/* The label table.                                                                          */

struct det_image {
    uint32_t h, w;   /* stored size */
    uint32_t h0, w0; /* original size */
};

/*
 * Every record's sizes and label rows, in CSR form: image i has first[i + 1] - first[i] rows,
 * numbered first[i] onwards in the table's flat numbering, at rows[i], each class, cx, cy, w, h
 * (normalised, as in the record). The rows are views into the reader's index (its summaries),
 * not copies, so the table costs 32 bytes an image and the rows nothing more: they stay valid
 * while the reader does. Read-only once built: several threads may read it.
 */
struct det_labels {
    uint64_t n;              /* images (records) */
    struct det_image *image; /* n */
    uint64_t *first;         /* n + 1 */
    const float **rows;      /* n: image i's rows (5 floats each), in the reader's index */
    uint32_t max_rows;       /* the most rows of one image */
};

/*
 * Builds the table from the index summaries of r (no record reads); r must outlive it. A
 * summary that does not parse or fails det_summary_check stops it: -FFR_ECORRUPT with
 * "PATH: record I: why" in err (path names the dataset in messages; NULL: "record I: why").
 * Returns 0, -FFR_ECORRUPT, -ENOMEM or the reader's error.
 */
DET_API int det_labels_build(const struct ffr_reader *r, const char *path, struct det_labels **out,
                             char *err, size_t err_cap);
DET_API void det_labels_free(struct det_labels *t);

#ifdef __cplusplus
}
#endif
#endif
