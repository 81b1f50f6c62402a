/*
 * yolo-bench-data: run the training loader alone, at full augmentation, and print images/s.
 * It becomes `yolo-train --records FILE --bench-data` once the trainer program exists; the
 * options are the same.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hyp.h"
#include "loader.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: yolo-bench-data --records FILE [options]\n"
            "Runs the training data loader alone (mosaic, random_perspective, mixup, HSV, flips\n"
            "as the hyp file says) and prints the images/s it sustains.\n\n"
            "  --records FILE     ffr detection dataset (yolo-pack output)\n"
            "  --workers N        loader threads (default: min(cores, 8))\n"
            "  --seconds S        how long to measure, after the first batch (default 10)\n"
            "  --batch-size B     images per batch (default 16)\n"
            "  --img N            image size; records must be packed at this long side "
            "(default 640)\n"
            "  --hyp FILE         hyperparameter yaml (default: hyp.scratch-low values)\n"
            "  --seed S           sampling seed (default 0)\n"
            "  --page-cache       buffered reads instead of O_DIRECT\n"
            "  --json             print {\"images_per_s\": ...} instead of text\n"
            "  -h, --help         this help\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || !end || *end || end == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void log_cb(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "yolo-bench-data: %s\n", msg);
}

int main(int argc, char **argv)
{
    const char *records = NULL, *hyp_path = NULL;
    long workers = 0, seconds = 10, batch = 16, img = 640, seed = 0;
    int json = 0, page_cache = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *num = NULL, lo = 0, hi = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        } else if (!strcmp(a, "--page-cache")) {
            page_cache = 1;
            continue;
        } else if (!strcmp(a, "--records") && v) {
            records = v;
            i++;
            continue;
        } else if (!strcmp(a, "--hyp") && v) {
            hyp_path = v;
            i++;
            continue;
        } else if (!strcmp(a, "--workers")) {
            num = &workers, lo = 0, hi = 256;
        } else if (!strcmp(a, "--seconds")) {
            num = &seconds, lo = 1, hi = 86400;
        } else if (!strcmp(a, "--batch-size")) {
            num = &batch, lo = 1, hi = 65536;
        } else if (!strcmp(a, "--img")) {
            num = &img, lo = 32, hi = 16383;
        } else if (!strcmp(a, "--seed")) {
            num = &seed, lo = 0, hi = LONG_MAX;
        } else {
            fprintf(stderr, "yolo-bench-data: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!v || parse_long(v, lo, hi, num) < 0) {
            fprintf(stderr, "yolo-bench-data: %s needs a whole number in [%ld, %ld]\n", a, lo, hi);
            return 2;
        }
        i++;
    }
    if (!records) {
        fprintf(stderr, "yolo-bench-data: --records FILE is required\n");
        usage(stderr);
        return 2;
    }

    struct trn_loader_opts o;
    trn_loader_opts_default(&o);
    o.workers = (unsigned)workers;
    o.batch_size = (int)batch;
    o.img_size = (int)img;
    o.seed = (uint64_t)seed;
    o.log = log_cb;
    if (page_cache) o.io.io.direct = FFIO_DIRECT_OFF;
    char err[512];
    if (hyp_path && trn_hyp_load(hyp_path, log_cb, NULL, &o.hyp, err, sizeof err) < 0) {
        fprintf(stderr, "yolo-bench-data: %s\n", err);
        return 1;
    }

    struct ffr_reader *r = NULL;
    int rc = ffr_reader_open(&r, records, NULL, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "yolo-bench-data: %s\nhint: make a dataset with yolo-pack\n", err);
        return 1;
    }
    struct trn_loader *l = NULL;
    rc = trn_loader_create(r, &o, &l, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "yolo-bench-data: %s: %s\n", records, err);
        ffr_reader_close(r);
        return 1;
    }
    struct trn_batch b;
    rc = trn_loader_next(l, &b); /* warm-up: workers started, first reads done */
    const double t0 = now();
    double t = t0;
    uint64_t images = 0, batches = 0;
    while (rc == 0 && t - t0 < (double)seconds) {
        rc = trn_loader_next(l, &b);
        if (rc == 0) images += (uint64_t)b.n, batches++;
        t = now();
    }
    if (rc < 0) {
        fprintf(stderr, "yolo-bench-data: %s\n", trn_loader_error(l));
        trn_loader_destroy(l);
        ffr_reader_close(r);
        return 1;
    }
    struct trn_loader_info info;
    trn_loader_info(l, &info);
    const double rate = (double)images / (t - t0);
    if (json)
        printf("{\"images_per_s\": %.2f, \"workers\": %u, \"batch_size\": %ld, \"img\": %ld, "
               "\"seconds\": %.3f, \"images\": %llu, \"bad_records\": %llu, "
               "\"mosaic\": %g, \"mixup\": %g}\n",
               rate, info.workers, batch, img, t - t0, (unsigned long long)images,
               (unsigned long long)info.bad_records, o.hyp.mosaic, o.hyp.mixup);
    else
        printf("%.1f images/s (%u workers, batch %ld, img %ld, %llu images in %.1f s, mosaic %g, "
               "mixup %g)\n",
               rate, info.workers, batch, img, (unsigned long long)images, t - t0, o.hyp.mosaic,
               o.hyp.mixup);
    trn_loader_destroy(l);
    ffr_reader_close(r);
    return 0;
}
