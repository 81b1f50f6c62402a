/*
 * bench_onednn_conv: issue 25's "consider oneDNN for the convolutions if it beats the GEMM path
 * in a side-by-side measurement". Every convolution of yolov5n's forward at one image size and
 * batch (the layer list below, from models/yolov5n.yaml), timed as a whole network's worth of
 * convolutions, in alternating rounds of three arms:
 *   ours     kern_ref_conv2d_fwd (im2col in bands + OpenBLAS sgemm), NCHW;
 *   nchw     oneDNN's forward-inference convolution on the same NCHW tensors (weights reordered
 *            once to its format, outside the timing, as constant weights would be);
 *   blocked  oneDNN with the layouts it prefers for src and dst too (nChw16c-like), reordered
 *            once outside the timing: what a network kept in oneDNN's layouts end to end gets;
 *   reorder  the blocked convolution inside an NCHW network: src reordered into its layout and
 *            dst back to NCHW around every call, in the timing (a drop-in conv op).
 * Prints per-arm medians, the ratios, and GFLOP/s. Threads: argv (ours, kern_ctx threads) and
 * OMP_NUM_THREADS (oneDNN, OpenMP), to be set the same:
 *   OMP_NUM_THREADS=2 build/tests/kernels/bench_onednn_conv [IMG=320] [BATCH=16] [THREADS=2]
 *   [ROUNDS=5]
 * Built when the oneDNN headers are installed (Debian's libdnnl-dev); nothing else uses it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "kern.h"

/* c_in, c_out, k, stride, input side as a divisor of the image (2 = img / 2, ...) */
struct layer {
    int c_in, c_out, k, s, div;
};

/* yolov5n (depth 0.33, width 0.25): backbone, SPPF, head, Detect; repeated blocks listed out. */
static const struct layer yolov5n[] = {
    { 3, 16, 6, 2, 1 },                                                     /* stem */
    { 16, 32, 3, 2, 2 },                                                    /* P2 */
    { 32, 16, 1, 1, 4 },    { 32, 16, 1, 1, 4 },    { 16, 16, 1, 1, 4 },    /* C3 1 */
    { 16, 16, 3, 1, 4 },    { 32, 32, 1, 1, 4 },                            /* */
    { 32, 64, 3, 2, 4 },                                                    /* P3 */
    { 64, 32, 1, 1, 8 },    { 64, 32, 1, 1, 8 },    { 32, 32, 1, 1, 8 },    /* C3 2 */
    { 32, 32, 3, 1, 8 },    { 32, 32, 1, 1, 8 },    { 32, 32, 3, 1, 8 },    /* */
    { 64, 64, 1, 1, 8 },                                                    /* */
    { 64, 128, 3, 2, 8 },                                                   /* P4 */
    { 128, 64, 1, 1, 16 },  { 128, 64, 1, 1, 16 },  { 64, 64, 1, 1, 16 },   /* C3 3 */
    { 64, 64, 3, 1, 16 },   { 64, 64, 1, 1, 16 },   { 64, 64, 3, 1, 16 },   /* */
    { 64, 64, 1, 1, 16 },   { 64, 64, 3, 1, 16 },   { 128, 128, 1, 1, 16 }, /* */
    { 128, 256, 3, 2, 16 },                                                 /* P5 */
    { 256, 128, 1, 1, 32 }, { 256, 128, 1, 1, 32 }, { 128, 128, 1, 1, 32 }, /* C3 4 */
    { 128, 128, 3, 1, 32 }, { 256, 256, 1, 1, 32 },                         /* */
    { 256, 128, 1, 1, 32 }, { 512, 256, 1, 1, 32 },                         /* SPPF */
    { 256, 128, 1, 1, 32 },                                                 /* head */
    { 256, 64, 1, 1, 16 },  { 256, 64, 1, 1, 16 },  { 64, 64, 1, 1, 16 },   /* C3 */
    { 64, 64, 3, 1, 16 },   { 128, 128, 1, 1, 16 },                         /* */
    { 128, 64, 1, 1, 16 },                                                  /* */
    { 128, 32, 1, 1, 8 },   { 128, 32, 1, 1, 8 },   { 32, 32, 1, 1, 8 },    /* C3 */
    { 32, 32, 3, 1, 8 },    { 64, 64, 1, 1, 8 },                            /* */
    { 64, 64, 3, 2, 8 },                                                    /* */
    { 128, 64, 1, 1, 16 },  { 128, 64, 1, 1, 16 },  { 64, 64, 1, 1, 16 },   /* C3 */
    { 64, 64, 3, 1, 16 },   { 128, 128, 1, 1, 16 },                         /* */
    { 128, 128, 3, 2, 16 },                                                 /* */
    { 256, 128, 1, 1, 32 }, { 256, 128, 1, 1, 32 }, { 128, 128, 1, 1, 32 }, /* C3 */
    { 128, 128, 3, 1, 32 }, { 256, 256, 1, 1, 32 },                         /* */
    { 64, 255, 1, 1, 8 },   { 128, 255, 1, 1, 16 }, { 256, 255, 1, 1, 32 }, /* Detect */
};
#define N_LAYERS (int)(sizeof yolov5n / sizeof yolov5n[0])

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define DN(call)                                                                            \
    do {                                                                                    \
        const dnnl_status_t st_ = (call);                                                   \
        if (st_ != dnnl_success) {                                                          \
            fprintf(stderr, "bench_onednn_conv: %s failed (status %d)\n", #call, (int)st_); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* One layer's tensors and primitives. */
struct run {
    struct kern_conv2d d;
    int oh, ow;
    float *x, *w, *y;                     /* NCHW / OIHW, ours and oneDNN's nchw arm */
    dnnl_primitive_t conv[2];             /* [0] nchw src/dst, [1] blocked */
    dnnl_memory_t src[2], wei[2], dst[2]; /* per arm, in the primitive's formats */
    dnnl_memory_t xm, ym;                 /* x and y as NCHW oneDNN memories */
    dnnl_primitive_t to_blk, from_blk;    /* x -> src[1], dst[1] -> y */
    double flops;
};

static float *fill(size_t n, unsigned *seed)
{
    float *p = malloc(n * sizeof *p);
    if (!p) exit(1);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((*seed = *seed * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
    return p;
}

/* A memory of md: `plain`'s data reordered into it (plain NULL: scratch). */
static dnnl_memory_t in_format(dnnl_engine_t eng, dnnl_stream_t st, const dnnl_memory_desc_t *md,
                               dnnl_memory_t plain)
{
    dnnl_memory_t m;
    DN(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    if (!plain) return m;
    const dnnl_memory_desc_t *pmd;
    DN(dnnl_memory_get_memory_desc(plain, &pmd));
    dnnl_primitive_desc_t rpd;
    DN(dnnl_reorder_primitive_desc_create(&rpd, pmd, eng, md, eng, NULL));
    dnnl_primitive_t r;
    DN(dnnl_primitive_create(&r, rpd));
    const dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, plain }, { DNNL_ARG_TO, m } };
    DN(dnnl_primitive_execute(r, st, 2, args));
    DN(dnnl_stream_wait(st));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    return m;
}

static void setup(struct run *r, const struct layer *L, int img, int batch, dnnl_engine_t eng,
                  dnnl_stream_t st, unsigned *seed)
{
    const int h = img / L->div, pad = L->k / 2 - (L->k == 6 ? 1 : 0);
    kern_conv2d_init(&r->d, batch, L->c_in, h, h, L->c_out, L->k, L->s, L->k == 6 ? 2 : pad);
    kern_conv2d_out_hw(&r->d, &r->oh, &r->ow);
    const size_t xn = (size_t)batch * L->c_in * h * h,
                 wn = (size_t)L->c_out * L->c_in * L->k * L->k;
    const size_t yn = (size_t)batch * L->c_out * r->oh * r->ow;
    r->x = fill(xn, seed);
    r->w = fill(wn, seed);
    r->y = fill(yn, seed);
    r->flops = 2.0 * (double)yn * (double)L->c_in * L->k * L->k;

    const dnnl_dims_t sd = { batch, L->c_in, h, h }, wd = { L->c_out, L->c_in, L->k, L->k };
    const dnnl_dims_t dd = { batch, L->c_out, r->oh, r->ow };
    const dnnl_dims_t strides = { L->s, L->s }, padl = { r->d.pad_h, r->d.pad_w };
    /* padding_r so that the output is PyTorch's size */
    const dnnl_dims_t padr = { (r->oh - 1) * L->s + L->k - h - r->d.pad_h,
                               (r->ow - 1) * L->s + L->k - h - r->d.pad_w };
    dnnl_memory_desc_t s_plain, w_plain, d_plain, s_any, w_any, d_any;
    DN(dnnl_memory_desc_init_by_tag(&s_plain, 4, sd, dnnl_f32, dnnl_nchw));
    DN(dnnl_memory_desc_init_by_tag(&w_plain, 4, wd, dnnl_f32, dnnl_oihw));
    DN(dnnl_memory_desc_init_by_tag(&d_plain, 4, dd, dnnl_f32, dnnl_nchw));
    DN(dnnl_memory_desc_init_by_tag(&s_any, 4, sd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&d_any, 4, dd, dnnl_f32, dnnl_format_tag_any));
    dnnl_memory_t xm, wm;
    DN(dnnl_memory_create(&xm, &s_plain, eng, r->x));
    DN(dnnl_memory_create(&r->ym, &d_plain, eng, r->y));
    DN(dnnl_memory_create(&wm, &w_plain, eng, r->w));
    for (int a = 0; a < 2; a++) {
        dnnl_convolution_desc_t cd;
        DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                              a ? &s_any : &s_plain, &w_any, NULL,
                                              a ? &d_any : &d_plain, strides, padl, padr));
        dnnl_primitive_desc_t pd;
        DN(dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL));
        DN(dnnl_primitive_create(&r->conv[a], pd));
        r->src[a] = in_format(eng, st, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), xm);
        r->wei[a] =
            in_format(eng, st, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), wm);
        r->dst[a] =
            in_format(eng, st, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), NULL);
        dnnl_primitive_desc_destroy(pd);
    }
    const dnnl_memory_desc_t *bs, *bd;
    DN(dnnl_memory_get_memory_desc(r->src[1], &bs));
    DN(dnnl_memory_get_memory_desc(r->dst[1], &bd));
    dnnl_primitive_desc_t rpd;
    DN(dnnl_reorder_primitive_desc_create(&rpd, &s_plain, eng, bs, eng, NULL));
    DN(dnnl_primitive_create(&r->to_blk, rpd));
    dnnl_primitive_desc_destroy(rpd);
    DN(dnnl_reorder_primitive_desc_create(&rpd, bd, eng, &d_plain, eng, NULL));
    DN(dnnl_primitive_create(&r->from_blk, rpd));
    dnnl_primitive_desc_destroy(rpd);
    r->xm = xm;
    dnnl_memory_destroy(wm);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const int img = argc > 1 ? atoi(argv[1]) : 320, batch = argc > 2 ? atoi(argv[2]) : 16;
    const int threads = argc > 3 ? atoi(argv[3]) : 2, rounds = argc > 4 ? atoi(argv[4]) : 5;
    if (img < 64 || img % 32 || batch < 1 || threads < 1 || rounds < 1 || rounds > 99) {
        fprintf(stderr, "usage: bench_onednn_conv [IMG=320] [BATCH=16] [THREADS=2] [ROUNDS=5]\n");
        return 2;
    }
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!omp || atoi(omp) != threads)
        fprintf(stderr,
                "bench_onednn_conv: OMP_NUM_THREADS is %s, not %d: oneDNN's threads differ\n",
                omp ? omp : "unset", threads);

    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.threads = threads;
    struct kern_ctx *ctx;
    if (kern_ctx_create(&ko, &ctx) < 0) return 1;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));

    static struct run runs[N_LAYERS];
    unsigned seed = 1;
    double flops = 0;
    size_t ws = 0;
    for (int i = 0; i < N_LAYERS; i++) {
        setup(&runs[i], &yolov5n[i], img, batch, eng, st, &seed);
        flops += runs[i].flops;
        size_t b = 0;
        if (kern_ref_conv2d_workspace_size(ctx, &runs[i].d, &b) < 0) return 1;
        if (b > ws) ws = b;
    }
    if (kern_ctx_reserve(ctx, ws) < 0) return 1;

    static const char *const names[4] = { "ours (im2col + OpenBLAS, NCHW)", "oneDNN, NCHW",
                                          "oneDNN, its blocked layouts",
                                          "oneDNN blocked, reordered per call" };
    double t[4][99];
    for (int r = -1; r < rounds; r++) { /* round -1 warms every arm up */
        for (int a = 0; a < 4; a++) {
            const double t0 = now();
            for (int i = 0; i < N_LAYERS; i++) {
                struct run *R = &runs[i];
                if (a == 0) {
                    if (kern_ref_conv2d_fwd(ctx, &R->d, R->y, R->x, R->w, NULL) < 0) return 1;
                    continue;
                }
                const int c = a == 3 ? 1 : a - 1;
                if (a == 3) {
                    const dnnl_exec_arg_t ra[2] = { { DNNL_ARG_FROM, R->xm },
                                                    { DNNL_ARG_TO, R->src[1] } };
                    DN(dnnl_primitive_execute(R->to_blk, st, 2, ra));
                }
                const dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, R->src[c] },
                                                  { DNNL_ARG_WEIGHTS, R->wei[c] },
                                                  { DNNL_ARG_DST, R->dst[c] } };
                DN(dnnl_primitive_execute(R->conv[c], st, 3, args));
                if (a == 3) {
                    const dnnl_exec_arg_t ra[2] = { { DNNL_ARG_FROM, R->dst[1] },
                                                    { DNNL_ARG_TO, R->ym } };
                    DN(dnnl_primitive_execute(R->from_blk, st, 2, ra));
                }
            }
            DN(dnnl_stream_wait(st));
            if (r >= 0) t[a][r] = now() - t0;
        }
    }
    dnnl_version_t const *v = dnnl_version();
    printf("yolov5n convolutions, forward, img %d batch %d, %d thread(s); %.2f GFLOP per pass; "
           "BLAS %s; oneDNN %d.%d.%d (%s)\n",
           img, batch, threads, flops * 1e-9, kern_blas_core(), v->major, v->minor, v->patch,
           v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
    double med[4];
    for (int a = 0; a < 4; a++) {
        qsort(t[a], (size_t)rounds, sizeof(double), cmp_double);
        med[a] = t[a][rounds / 2];
        printf("%-32s %8.1f ms  %6.1f GFLOP/s  (sorted rounds:", names[a], med[a] * 1e3,
               flops / med[a] * 1e-9);
        for (int r = 0; r < rounds; r++)
            printf(" %.1f", t[a][r] * 1e3);
        printf(")\n");
    }
    printf("ratio ours / oneDNN time: %.2f (NCHW), %.2f (blocked), %.2f (reordered per call)\n",
           med[0] / med[1], med[0] / med[2], med[0] / med[3]);
    for (int i = 0; i < N_LAYERS; i++) {
        for (int a = 0; a < 2; a++) {
            dnnl_primitive_destroy(runs[i].conv[a]);
            dnnl_memory_destroy(runs[i].src[a]);
            dnnl_memory_destroy(runs[i].wei[a]);
            dnnl_memory_destroy(runs[i].dst[a]);
        }
        dnnl_primitive_destroy(runs[i].to_blk);
        dnnl_primitive_destroy(runs[i].from_blk);
        dnnl_memory_destroy(runs[i].xm);
        dnnl_memory_destroy(runs[i].ym);
        free(runs[i].x), free(runs[i].w), free(runs[i].y);
    }
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    kern_ctx_destroy(ctx);
    return 0;
}
