/*
 * bench_data: the loader alone at full augmentation, timed (see bench_data.h). Formerly the
 * yolo-bench-data program; yolo-train --bench-data calls it now.
 */
#include "bench_data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ffr.h"

void trn_bench_data_opts_default(struct trn_bench_data_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seconds = 10;
    o->batch_size = 16;
    o->img_size = 640;
    o->read_ahead = true;
    trn_hyp_default(&o->hyp);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int trn_bench_data_run(const struct trn_bench_data_opts *o, struct trn_bench_data_result *out,
                       char *err, size_t err_cap)
{
    char tmp[512];
    if (!err || err_cap == 0) err = tmp, err_cap = sizeof tmp;
    err[0] = '\0';
    if (out) memset(out, 0, sizeof *out);
    if (!o || !out || !o->records || !(o->seconds > 0) || !isfinite(o->seconds)) {
        snprintf(err, err_cap, "bench-data: records and a positive time are required");
        return -EINVAL;
    }
    struct trn_loader_opts lo;
    trn_loader_opts_default(&lo);
    lo.workers = o->workers;
    lo.batch_size = o->batch_size;
    lo.img_size = o->img_size;
    lo.seed = o->seed;
    lo.hyp = o->hyp;
    lo.log = o->log;
    lo.log_ctx = o->log_ctx;
    if (o->page_cache) lo.io.io.direct = FFIO_DIRECT_OFF;
    if (o->direct) lo.io.io.direct = FFIO_DIRECT_ON;
    lo.read_ahead = o->read_ahead;
    lo.cache_ram = o->cache_ram;

    struct ffr_reader *r = NULL;
    char why[448];
    int rc = ffr_reader_open(&r, o->records, NULL, why, sizeof why);
    if (rc < 0) {
        snprintf(err, err_cap, "%s", why[0] ? why : ffr_strerror(rc));
        return rc;
    }
    struct trn_loader *l = NULL;
    rc = trn_loader_create(r, &lo, &l, why, sizeof why);
    if (rc < 0) {
        snprintf(err, err_cap, "%s: %s", o->records, why);
        ffr_reader_close(r);
        return rc;
    }
    struct trn_batch b;
    rc = trn_loader_next(l, &b); /* warm-up: workers started, first reads done */
    const double t0 = now();
    double t = t0;
    while (rc == 0 && t - t0 < o->seconds) {
        rc = trn_loader_next(l, &b);
        if (rc == 0) out->images += (uint64_t)b.n, out->batches++;
        t = now();
    }
    if (rc < 0) {
        snprintf(err, err_cap, "%s: %s", o->records, trn_loader_error(l));
    } else {
        struct trn_loader_info info;
        trn_loader_info(l, &info);
        out->seconds = t - t0;
        out->images_per_s = out->seconds > 0 ? (double)out->images / out->seconds : 0;
        out->workers = info.workers;
        out->bad_records = info.bad_records;
        out->produced = info.images;
    }
    trn_loader_destroy(l);
    ffr_reader_close(r);
    return rc;
}
