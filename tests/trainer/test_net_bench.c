/*
 * Benchmark of trainer/model/net.c: forward + backward (train mode) of a model, ms per step, or
 * (MODE infer) validation inference: an inference-only net's trn_net_infer (eval forward and the
 * Detect decode), as yolo-val runs it (cpu_engine AUTO: oneDNN where the build has it), ms per
 * image; MODE infer-ref: the same on the reference ops. MODE train (the default) runs the
 * training step as yolo-train does (cpu_engine AUTO: oneDNN where the build has it), train-ref
 * on the reference ops; train-step the same as train without the eval forward (for profiling the
 * step alone).
 *
 * Usage: test_net_bench [MODEL_YAML [IMG [BATCH [THREADS [ITERS [MODE]]]]]]; defaults yolov5n,
 * 320, 8, 1, 3, train. THREADS is trn_net_opts.threads (kern's own split; with 1, OpenBLAS uses
 * OPENBLAS_NUM_THREADS). Prints one line per phase and the model's fused GFLOPs per image, which
 * scripts/bench-cpu turns into GFLOP/s; not a test (no timing is asserted).
 *
 * test_net_bench clock [THREADS]: the cores' clock as measured, and the fp32 FMA throughput of
 * THREADS threads at once (default 1), measured (the peak of scripts/bench-cpu).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "net.h"
#include "errors.h"
#include "kern.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The core clock now, in GHz: a chain of dependent integer multiplies runs one per 3 cycles on
 * every x86-64 core since Sandy Bridge and Zen, so the chain's length over its time is the clock
 * the cores really run at (turbo included), which /proc/cpuinfo's nominal "cpu MHz" is not. Not
 * a chain of 1-cycle adds: Intel's newer cores (Golden Cove on) fold immediate adds at rename,
 * where such a chain measured 21 GHz on a 2.6 GHz Xeon. 0 where there is no x86-64 asm. */
static double clock_ghz(void)
{
    double best = 1e30;
#if defined(__x86_64__) && defined(__GNUC__)
    /* the best of several short chains: a shared VM's vCPU may be descheduled during one; ten
       multiplies per iteration keep the loop's own branch off the chain's pace */
    const long n = 30000000;
    for (int r = 0; r < 9; r++) {
        long i = n / 10, x = 3;
        const double t0 = now_ms();
        __asm__ volatile("1:\n\t"
                         "imul %1, %1\n\timul %1, %1\n\timul %1, %1\n\timul %1, %1\n\t"
                         "imul %1, %1\n\timul %1, %1\n\timul %1, %1\n\timul %1, %1\n\t"
                         "imul %1, %1\n\timul %1, %1\n\t"
                         "dec %0\n\tjnz 1b"
                         : "+r"(i), "+r"(x));
        const double t = now_ms() - t0;
        if (t < best) best = t;
    }
    return 3.0 * (double)n / (best * 1e6);
#else
    (void)best;
    return 0;
#endif
}

/* Twelve independent chains of fused multiply-adds on the widest vectors the CPU has: twelve
 * cover two FMA pipes at up to 6 cycles of latency, so the loop runs at the pipes' throughput and
 * at the clock the cores hold under that load, which on Intel's AVX-512 cores is below the
 * integer chain's (the AVX-512 frequency license: 3.36 against 3.77 GHz on a Xeon here). Returns
 * the fp32 FLOPs it did, 0 where there is no FMA asm. */
static void *fma_run(void *arg)
{
    long n = *(const long *)arg, flops = 0;
#if defined(__x86_64__) && defined(__GNUC__)
#define FMA12(r)                                                                                   \
    "vfmadd231ps %%" r "14, %%" r "15, %%" r "0\n\tvfmadd231ps %%" r "14, %%" r "15, %%" r "1\n\t" \
    "vfmadd231ps %%" r "14, %%" r "15, %%" r "2\n\tvfmadd231ps %%" r "14, %%" r "15, %%" r "3\n\t" \
    "vfmadd231ps %%" r "14, %%" r "15, %%" r "4\n\tvfmadd231ps %%" r "14, %%" r "15, %%" r "5\n\t" \
    "vfmadd231ps %%" r "14, %%" r "15, %%" r "6\n\tvfmadd231ps %%" r "14, %%" r "15, %%" r "7\n\t" \
    "vfmadd231ps %%" r "14, %%" r "15, %%" r "8\n\tvfmadd231ps %%" r "14, %%" r "15, %%" r "9\n\t" \
    "vfmadd231ps %%" r "14, %%" r "15, %%" r "10\n\tvfmadd231ps %%" r "14, %%" r "15, %%" r        \
    "11\n\t"
#define ZERO12(r)                                                                                 \
    "vxorps %%" r "0, %%" r "0, %%" r "0\n\tvmovaps %%" r "0, %%" r "1\n\t"                       \
    "vmovaps %%" r "0, %%" r "2\n\tvmovaps %%" r "0, %%" r "3\n\tvmovaps %%" r "0, %%" r "4\n\t"  \
    "vmovaps %%" r "0, %%" r "5\n\tvmovaps %%" r "0, %%" r "6\n\tvmovaps %%" r "0, %%" r "7\n\t"  \
    "vmovaps %%" r "0, %%" r "8\n\tvmovaps %%" r "0, %%" r "9\n\tvmovaps %%" r "0, %%" r "10\n\t" \
    "vmovaps %%" r "0, %%" r "11\n\t"
    /* normal numbers throughout: whatever the registers held could be subnormal, and an FMA on
       subnormals takes a microcode assist (the first version ran 150 times slower) */
    const float small = 1e-3f;
#define FMA_LOOP(r)                                                                            \
    __asm__ volatile(ZERO12(r) "vbroadcastss %1, %%" r "14\n\tvbroadcastss %1, %%" r "15\n\t"  \
                               "1:\n\t" FMA12(r) "dec %0\n\tjnz 1b"                            \
                     : "+r"(n)                                                                 \
                     : "m"(small)                                                              \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                       "xmm9", "xmm10", "xmm11", "xmm14", "xmm15", "cc")
    if (__builtin_cpu_supports("avx512f")) {
        flops = n * 12 * 16 * 2;
        FMA_LOOP("zmm");
    } else if (__builtin_cpu_supports("fma")) {
        flops = n * 12 * 8 * 2;
        FMA_LOOP("ymm");
    }
#undef FMA_LOOP
#undef FMA12
#undef ZERO12
#endif
    return (void *)(intptr_t)flops;
}

/* The fp32 FMA throughput of `threads` threads running fma_run at once, GFLOP/s: the best of
 * several rounds (a shared VM's vCPU may be descheduled in one), 0 without FMA asm. */
static double fma_gflops(int threads)
{
    enum { MAXT = 256 };
    if (threads < 1) threads = 1;
    if (threads > MAXT) threads = MAXT;
    long n = 20000000;
    double best = 0;
    for (int r = 0; r < 7; r++) {
        pthread_t t[MAXT];
        int started = 0;
        const double t0 = now_ms();
        while (started < threads && !pthread_create(&t[started], NULL, fma_run, &n))
            started++;
        double flops = 0;
        for (int i = 0; i < started; i++) {
            void *ret;
            pthread_join(t[i], &ret);
            flops += (double)(intptr_t)ret;
        }
        const double gf = started == threads ? flops / ((now_ms() - t0) * 1e6) : 0;
        if (gf > best) best = gf;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "clock")) {
        const int threads = argc > 2 ? atoi(argv[2]) : 1;
        printf("clock %.2f GHz\n", clock_ghz());
        printf("fma %d threads %.1f GFLOP/s\n", threads, fma_gflops(threads));
        return 0;
    }
    const char *cfg = argc > 1 ? argv[1] : TRN_TEST_MODELS_DIR "/yolov5n.yaml";
    const int img = argc > 2 ? atoi(argv[2]) : 320;
    const int batch = argc > 3 ? atoi(argv[3]) : 8;
    const int threads = argc > 4 ? atoi(argv[4]) : 1;
    const int iters = argc > 5 ? atoi(argv[5]) : 3;
    const bool ref = argc > 6 && !strcmp(argv[6], "infer-ref");
    const bool infer = ref || (argc > 6 && !strcmp(argv[6], "infer"));
    const bool no_eval = argc > 6 && !strcmp(argv[6], "train-step");
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
    o.train = !infer;
    o.fixed_params = infer; /* yolo-val's runner: the weights do not change between batches */
    o.cpu_engine = ref || (argc > 6 && !strcmp(argv[6], "train-ref")) ? TRN_CPU_ENGINE_REF
                                                                      : TRN_CPU_ENGINE_AUTO;
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
    printf("model %s img %d batch %d threads %d; %.4f GFLOPs per image (fused); BLAS kernels %s\n",
           cfg, img, batch, threads, trn_model_gflops(m, img, true), kern_blas_core());
    if (infer) {
        double best = 1e30;
        const float *out = NULL;
        int rows = 0;
        for (int it = 0; it <= iters && !rc; it++) { /* iteration 0 warms up */
            const double t0 = now_ms();
            rc = trn_net_infer(net, x, &out, &rows);
            const double t1 = now_ms();
            if (it && t1 - t0 < best) best = t1 - t0;
        }
        if (rc) {
            fprintf(stderr, "%s\n", trn_strerror(rc));
            return 1;
        }
        /* FNV-1a of the output's bytes: two builds computing the same predictions print the same
         * hash (the random weights and input are fixed) */
        uint64_t h = 1469598103934665603ull;
        const unsigned char *ob = (const unsigned char *)out;
        const size_t no = (size_t)trn_model_info(m)->nc + 5;
        for (size_t i = 0; i < (size_t)batch * (size_t)rows * no * sizeof(float); i++)
            h = (h ^ ob[i]) * 1099511628211ull;
        printf("infer %.1f ms per batch, %.3f ms per image (best of %d); output hash %016llx; "
               "engine %s\n",
               best, best / batch, iters, (unsigned long long)h, trn_net_engine(net));
        free(x);
        trn_net_destroy(net);
        trn_model_destroy(m);
        return 0;
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
    printf("activations %.1f MiB (x2 with gradients)\n",
           (double)trn_net_plan(net)->total * 4.0 / 1048576.0);
    double best_f = 1e30, best_b = 1e30, best_e = 1e30;
    for (int it = 0; it <= iters; it++) { /* iteration 0 warms up */
        const double t0 = now_ms();
        if ((rc = trn_net_forward(net, x, true, NULL))) break;
        const double t1 = now_ms();
        trn_net_zero_grad(net);
        if ((rc = trn_net_backward(net, dc))) break;
        const double t2 = now_ms();
        if (!no_eval && (rc = trn_net_forward(net, x, false, NULL))) break;
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
           "forward %.1f ms (best of %d); engine %s\n",
           best_f, best_b, best_f + best_b, batch * 1e3 / (best_f + best_b), best_e, iters,
           trn_net_engine(net));
    for (int l = 0; l < nl; l++)
        free(d[l]);
    free(x);
    trn_net_destroy(net);
    trn_model_destroy(m);
    return 0;
}
