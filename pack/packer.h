/*
 * pack/packer: the yolo-pack pipeline. Scans a dataset (pack/dataset.h), decodes and resizes each
 * image as ultralytics' load_image does (pack/image.h), encodes it with its labels as an ffr-det-1
 * sample, compresses it, and appends it to an ffr writer, in the scan's order.
 *
 * Workers decode, resize, filter and compress in parallel; one thread appends finished records in
 * sample order through a bounded reorder window, so memory stays bounded and the output is
 * byte-identical whatever the thread count.
 */
#ifndef PACK_PACKER_H
#define PACK_PACKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dataset.h"
#include "image.h"

enum pack_codec {
    PACK_CODEC_RAW = 0,  /* RGB8 pixels, stored raw */
    PACK_CODEC_ZSTD = 1, /* RGB8 pixels (Sub-filtered when sub_filter), zstd */
    PACK_CODEC_JPEG = 2, /* pixels re-encoded as JPEG at `quality` (lossy, smallest) */
};

/* The packer's pixel limit by default: 2^26 (67 MP, 192 MiB decoded), under the decoder's own
 * 2^28, because every worker decodes at once: with one budget of PACK_MAX_PIXELS * 7 bytes for
 * the images being decoded (and each worker letting a huge image's buffers go after it), the
 * packer's memory stays that of one image at the limit, whatever -j is. */
#define PACK_MAX_PIXELS (UINT64_C(1) << 26)

struct pack_opts {
    const char *input;           /* dataset root, yaml, json or list file */
    const char *output;          /* .ffr path (a manifest when shard_bytes > 0) */
    int size;                    /* long side in pixels; 0 keeps the original size */
    int interp;                  /* -1: by split (train: linear, else area when shrinking), or a
                                    PACK_IMAGE_INTERP_* value */
    enum pack_image_round round; /* resized sides: int(w0 * r) (default, ultralytics v7.0) or
                                    ceil (later master); recorded as resize_round */
    enum pack_codec codec;
    int zstd_level;            /* 1..19 */
    bool sub_filter;           /* Sub filter before zstd */
    int quality;               /* JPEG quality for PACK_CODEC_JPEG */
    int threads;               /* workers, >= 1 */
    uint64_t max_pixels;       /* largest image decoded (coded width * height); 0: the default
                                  PACK_MAX_PIXELS. A larger one is skipped as corrupt, named */
    uint64_t shard_bytes;      /* 0: one file */
    bool strict;               /* any warning fails the run */
    bool progress;             /* draw a progress line on `log` */
    size_t max_warnings_shown; /* warnings printed in full; all are counted */
    struct pack_ds_opts ds;    /* scanning options (format, split, names, drop_backgrounds, ...) */
    FILE *log;                 /* warnings, progress and the summary; NULL = stderr */
    /* Optional: a sink for the finished files (ffr_writer_opts.publish/taken/sink: the upload of
     * yolo-pack -o s3://). output is then the local staging path, and output_name (for
     * messages) what it stands for. */
    int (*publish)(void *sink, const char *tmp_path, const char *name, int last);
    bool (*taken)(void *sink, const char *name);
    void *sink;
    const char *output_name;
};

/* Counters of a run, for the summary and the metadata. */
struct pack_result {
    struct pack_ds_stats scan; /* what the scan found and dropped */
    uint64_t packed;           /* records written */
    uint64_t backgrounds;      /* of which without labels */
    uint64_t corrupt_images;   /* images that failed to decode, skipped */
    uint64_t restored_images;  /* decoded with warnings (truncated data, no EOI), kept */
    uint64_t bytes_in;         /* bytes of the image files read */
    uint64_t bytes_raw;        /* bytes of the encoded samples before compression */
    uint64_t bytes_out;        /* bytes of the output files */
    double seconds;            /* wall time of the packing until the output is complete
                                  (scan excluded, the final flush and rename included) */
    double seconds_writing;    /* of which the appending thread spent writing (records,
                                  index, the final flush) */
    double stalled;            /* fraction of the workers' time spent waiting for the writes to
                                  free a slot: near 0 when decoding is the limit; large when the
                                  writes hold the workers up (on a VM the storage's cost may show
                                  as CPU time the host takes from them instead) */
};

/* Fills *o with the defaults: size 640, interp by split, zstd level -1 without the Sub filter,
 * quality 95, all cores, one file, not strict, 20 warnings shown. */
void pack_opts_default(struct pack_opts *o);

/*
 * Runs the whole job. Returns 0 when the output was written (even if inputs were skipped and
 * reported), or a negative error (a pack_ds, pack_image, ffr or errno code) after printing why;
 * in that case no output file claims to be complete. *res (may be NULL) receives the counters.
 * `stop` (may be NULL) is polled: when it becomes non-zero (e.g. from a SIGINT handler) the run
 * is abandoned and returns -EINTR.
 */
int pack_run(const struct pack_opts *o, struct pack_result *res, volatile int *stop);

#endif
