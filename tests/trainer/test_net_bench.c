/*
 * Benchmark of trainer/model/net.c: forward + backward (train mode) of a model, ms per step.
 * Usage: test_net_bench [MODEL_YAML [IMG [BATCH [THREADS [ITERS]]]]]; defaults yolov5n, 320,
 * 8, 1, 3. THREADS is trn_net_opts.threads (kern's own split; with 1, OpenBLAS uses
 * OPENBLAS_NUM_THREADS). Prints one line per phase; not a test (no timing is asserted).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model.h"
#include "net.h"
#include "errors.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv)
{
    const char *cfg = argc > 1 ? argv[1] : TRN_TEST_MODELS_DIR "/yolov5n.yaml";
    const int img = argc > 2 ? atoi(argv[2]) : 320;
    const int batch = argc > 3 ? atoi(argv[3]) : 8;
    const int threads = argc > 4 ? atoi(argv[4]) : 1;
    const int iters = argc > 5 ? atoi(argv[5]) : 3;
    char err[256];
    struct trn_model *m = NULL;
    int rc = trn_model_load(cfg, NULL, &m, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    trn_model_init(m, 0);
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.threads = threads;
    struct trn_net *net = NULL;
    if ((rc = trn_net_create(m, batch, img, img, &o, &net, err, sizeof err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const size_t n_img = (size_t)batch * 3 * (size_t)img * (size_t)img;
    float *x = malloc(n_img * sizeof(float));
    uint32_t s = 1;
    for (size_t i = 0; i < n_img; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) * 0x1.0p-24f;
    }
    const int nl = trn_net_levels(net);
    float *d[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < nl; l++) {
        const long n = trn_net_output_shape(net, l, NULL);
        d[l] = malloc((size_t)n * sizeof(float));
        for (long i = 0; i < n; i++)
            d[l][i] = 1e-4f * (float)((i % 7) - 3);
    }
    const float *dc[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < nl; l++)
        dc[l] = d[l];
    printf("model %s img %d batch %d threads %d; activations %.1f MiB (x2 with gradients)\n", cfg,
           img, batch, threads, (double)trn_net_plan(net)->total * 4.0 / 1048576.0);
    double best_f = 1e30, best_b = 1e30, best_e = 1e30;
    for (int it = 0; it <= iters; it++) { /* iteration 0 warms up */
        const double t0 = now_ms();
        if ((rc = trn_net_forward(net, x, true, NULL))) break;
        const double t1 = now_ms();
        trn_net_zero_grad(net);
        if ((rc = trn_net_backward(net, dc))) break;
        const double t2 = now_ms();
        if ((rc = trn_net_forward(net, x, false, NULL))) break;
        const double t3 = now_ms();
        if (it == 0) continue;
        if (t1 - t0 < best_f) best_f = t1 - t0;
        if (t2 - t1 < best_b) best_b = t2 - t1;
        if (t3 - t2 < best_e) best_e = t3 - t2;
    }
    if (rc) {
        fprintf(stderr, "%s\n", trn_strerror(rc));
        return 1;
    }
    printf("train forward %.1f ms, backward %.1f ms, forward+backward %.1f ms (%.2f img/s); eval "
           "forward %.1f ms (best of %d)\n",
           best_f, best_b, best_f + best_b, batch * 1e3 / (best_f + best_b), best_e, iters);
    for (int l = 0; l < nl; l++)
        free(d[l]);
    free(x);
    trn_net_destroy(net);
    trn_model_destroy(m);
    return 0;
}
