/*
 * Benchmark of trainer/eval/nms.c on saved predictions: trn_nms_run (val.py's settings: conf
 * 0.001, multi-label, max_det 300, max_nms 30000) over every image of a dump written by
 * tests/trainer/bench_torch_nms.py dump, the same rows that script times torchvision's NMS on.
 * Usage: bench_nms DUMP [ITERS [IOU]]; defaults 5, 0.6. Prints the best pass over all images as
 * ms per image and the total detection count, which must equal the Python side's (the same
 * boxes kept): scripts/bench-cpu compares them. Not a test (no timing is asserted).
 *
 * DUMP: "NMSP", int32 images, int32 row width (5 + nc), then per image int32 rows and rows x width
 * float32 (cx, cy, w, h, obj, classes: the Detect decode in network-input pixels), little endian.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nms.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int read_i32(FILE *f, int32_t *v)
{
    return fread(v, sizeof *v, 1, f) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_nms DUMP [ITERS [IOU]]\n");
        return 2;
    }
    const int iters = argc > 2 ? atoi(argv[2]) : 5;
    struct trn_nms_opts o;
    trn_nms_opts_default(&o);
    if (argc > 3) o.iou_thres = atof(argv[3]);
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    char magic[4];
    int32_t n, width;
    if (fread(magic, 1, 4, f) != 4 || memcmp(magic, "NMSP", 4) || read_i32(f, &n) ||
        read_i32(f, &width) || n < 1 || n > 100000 || width < 6 || width > 100000) {
        fprintf(stderr, "%s: not a bench_torch_nms.py dump\n", argv[1]);
        return 1;
    }
    float **pred = calloc((size_t)n, sizeof *pred);
    int32_t *rows = calloc((size_t)n, sizeof *rows);
    if (!pred || !rows) return 1;
    for (int i = 0; i < n; i++) {
        if (read_i32(f, &rows[i]) || rows[i] < 0 || rows[i] > 10000000) {
            fprintf(stderr, "%s: image %d: bad row count\n", argv[1], i);
            return 1;
        }
        const size_t k = (size_t)rows[i] * (size_t)width;
        if (!(pred[i] = malloc(k * sizeof(float) + 1)) ||
            fread(pred[i], sizeof(float), k, f) != k) {
            fprintf(stderr, "%s: image %d: truncated\n", argv[1], i);
            return 1;
        }
    }
    fclose(f);
    struct trn_nms *nms = NULL;
    struct trn_det *dets = malloc(TRN_NMS_MAX_DET * sizeof *dets);
    if (trn_nms_create(&nms) || !dets) return 1;
    double best = 1e30;
    long total = 0;
    for (int it = 0; it <= iters; it++) { /* pass 0 warms up (and sizes the workspace) */
        long kept = 0;
        const double t0 = now_ms();
        for (int i = 0; i < n; i++) {
            const int r = trn_nms_run(nms, pred[i], (size_t)rows[i], (size_t)width, width - 5, &o,
                                      dets, TRN_NMS_MAX_DET);
            if (r < 0) {
                fprintf(stderr, "image %d: nms failed (%d)\n", i, r);
                return 1;
            }
            kept += r;
        }
        const double t1 = now_ms();
        if (it && t1 - t0 < best) best = t1 - t0;
        total = kept;
    }
    printf("nms %.3f ms per image over %d images, %ld detections, iou %g (best of %d)\n", best / n,
           n, total, o.iou_thres, iters);
    for (int i = 0; i < n; i++)
        free(pred[i]);
    free(pred);
    free(rows);
    free(dets);
    trn_nms_destroy(nms);
    return 0;
}
