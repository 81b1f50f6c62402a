/*
 * bench_data: run the training loader alone, at full augmentation, and measure the images/s it
 * sustains (`yolo-train --records FILE --bench-data`). Library code: it never prints; the
 * program formats the result.
 */
#ifndef TRN_BENCH_DATA_H
#define TRN_BENCH_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hyp.h"
#include "loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to measure; fill with trn_bench_data_opts_default(), then set records. */
struct trn_bench_data_opts {
    const char *records;   /* ffr detection dataset (yolo-pack output); borrowed; required */
    unsigned workers;      /* loader threads, 0 = the loader's default (min(cores, 8)) */
    double seconds;        /* measuring time after the first batch, > 0; default 10 */
    int batch_size;        /* images per batch, 1..65536; default 16 */
    int img_size;          /* output side; records must be packed at this long side; default 640 */
    uint64_t seed;         /* sampling seed; default 0 */
    bool page_cache;       /* buffered reads instead of O_DIRECT; default false */
    bool direct;           /* O_DIRECT even for a dataset that fits in memory (the loader's
                              FFIO_DIRECT_AUTO picks the page cache then); default false */
    bool read_ahead;       /* trn_loader_opts.read_ahead; default true */
    bool cache_ram;        /* decoded tiles kept in RAM (trn_loader_opts.cache_ram); default
                              false */
    struct trn_hyp hyp;    /* augmentation; default hyp.scratch-low (trn_hyp_default) */
    trn_loader_log_fn log; /* loader log lines (bad records, I/O fallbacks); NULL drops them */
    void *log_ctx;         /* passed to log */
};

/* Fill *o with the defaults above (records = NULL). o: out. Thread-safe. */
void trn_bench_data_opts_default(struct trn_bench_data_opts *o);

/* What was measured. */
struct trn_bench_data_result {
    double images_per_s;  /* augmented images per second over the measured time */
    double seconds;       /* measured time, s (>= opts.seconds, ends at a batch boundary) */
    uint64_t images;      /* images delivered in that time (the warm-up batch not counted) */
    uint64_t batches;     /* batches delivered in that time */
    unsigned workers;     /* loader threads that ran */
    uint64_t bad_records; /* distinct bad records met (skipped) */
    uint64_t produced;    /* samples the workers made in the whole call (warm-up and read-ahead
                             included): the work behind the process's CPU time */
};

/*
 * Open o->records, start a training loader on it (mosaic, random_perspective, mixup, HSV, flips
 * as o->hyp says), take one warm-up batch, then take batches for o->seconds and report the rate.
 * out: out (zeroed on error). err: out, err_cap bytes, one line naming the file on error (may be
 * NULL). Returns 0, or -EINVAL (bad option), or the error of ffr_reader_open,
 * trn_loader_create or trn_loader_next (trn_strerror names it). Blocks for about
 * o->seconds. Thread-safe on distinct arguments.
 */
int trn_bench_data_run(const struct trn_bench_data_opts *o, struct trn_bench_data_result *out,
                       char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* TRN_BENCH_DATA_H */
