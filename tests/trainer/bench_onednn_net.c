/*
 * bench_onednn_net: trn_net_infer on the reference ops against the same call on oneDNN
 * (trn_net_opts.cpu_engine, net.h), yolov5n with its initial weights, alternating rounds in one
 * invocation; the median per image of each and the ratio. Both include the Detect decode.
 *
 *   build/tests/trainer/bench_onednn_net [IMG=320] [BATCH=32] [THREADS=2] [ROUNDS=5]
 * Built where the build has oneDNN (Debian's libdnnl-dev).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "errors.h"
#include "model.h"
#include "net.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const int img = argc > 1 ? atoi(argv[1]) : 320, batch = argc > 2 ? atoi(argv[2]) : 32;
    const int threads = argc > 3 ? atoi(argv[3]) : 2, rounds = argc > 4 ? atoi(argv[4]) : 5;
    if (img < 64 || img % 32 || batch < 1 || threads < 1 || rounds < 1 || rounds > 99) {
        fprintf(stderr, "usage: bench_onednn_net [IMG=320] [BATCH=32] [THREADS=2] [ROUNDS=5]\n");
        return 2;
    }
    char err[256];
    struct trn_model *m = NULL;
    if (trn_model_load(TRN_TEST_MODELS_DIR "/yolov5n.yaml", NULL, &m, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    trn_model_init(m, 0);
    struct trn_net *net[2] = { NULL, NULL };
    double t_create[2], t_first[2];
    for (int a = 0; a < 2; a++) {
        const double t0 = now();
        struct trn_net_opts o;
        trn_net_opts_default(&o);
        o.threads = threads;
        o.train = false;
        o.fixed_params = true;
        o.cpu_engine = a ? TRN_CPU_ENGINE_ONEDNN : TRN_CPU_ENGINE_REF;
        const int rc = trn_net_create(m, batch, img, img, &o, &net[a], err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, "bench_onednn_net: %s (%s)\n", err, trn_strerror(rc));
            return 1;
        }
        t_create[a] = now() - t0;
    }
    const size_t n_img = (size_t)batch * 3 * (size_t)img * (size_t)img;
    float *x = malloc(n_img * sizeof(float));
    if (!x) return 1;
    for (size_t i = 0; i < n_img; i++)
        x[i] = (float)(i % 251) / 251.0f;

    double t[2][99];
    for (int r = -1; r < rounds; r++) /* round -1 warms both up */
        for (int a = 0; a < 2; a++) {
            const double t0 = now();
            const float *out = NULL;
            int rows = 0;
            const int rc = trn_net_infer(net[a], x, &out, &rows);
            if (rc < 0) {
                fprintf(stderr, "bench_onednn_net: %s\n", trn_strerror(rc));
                return 1;
            }
            if (r >= 0)
                t[a][r] = now() - t0;
            else
                t_first[a] = now() - t0;
        }
    printf("yolov5n trn_net_infer, img %d batch %d, %d thread(s), %.2f GFLOP per image; BLAS %s\n",
           img, batch, threads, trn_model_gflops(m, img, true), kern_blas_core());
    double med[2];
    for (int a = 0; a < 2; a++) {
        qsort(t[a], (size_t)rounds, sizeof(double), cmp_double);
        med[a] = t[a][rounds / 2];
        printf("%-20s %8.3f ms per image  %6.1f GFLOP/s  (sorted rounds, ms per batch:",
               trn_net_engine(net[a]), med[a] * 1e3 / batch,
               trn_model_gflops(m, img, true) * batch / med[a]);
        for (int r = 0; r < rounds; r++)
            printf(" %.1f", t[a][r] * 1e3);
        printf(")\n");
    }
    for (int a = 0; a < 2; a++)
        printf("%-20s created in %.1f ms, first call %.1f ms\n", trn_net_engine(net[a]),
               t_create[a] * 1e3, t_first[a] * 1e3);
    printf("ratio reference / oneDNN time: %.2f\n", med[0] / med[1]);
    free(x);
    trn_net_destroy(net[0]);
    trn_net_destroy(net[1]);
    trn_model_destroy(m);
    return 0;
}
