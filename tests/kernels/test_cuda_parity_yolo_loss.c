/*
 * CUDA parity of the whole YOLOv5 loss (style guide rule 25): kern_cuda_yolo_loss against
 * kern_ref_yolo_loss on the same random problems (fresh draws each run; the seed is printed and
 * --seed N replays it), with every output poisoned first (NaN canaries), or pre-filled with the
 * same random values for KERN_ACCUM_DX.
 *
 * Problems: random shapes (1-3 levels, 1-3 anchors, 1-80 classes, grids up to 20), targets with
 * a third on cell borders and duplicates on purpose (repeated rows), pos weights and gr on half,
 * an empty batch, and a YOLOv5s-like one (3 levels of 80/40/20 at bs 4, 80 classes, 300 rows).
 * Also: bitwise repeatability of the GPU (fixed-order sums, sort-ordered gradient gathers), the
 * context workspace as scratch, a CUDA graph capture replayed for a new count (no host sync in
 * the op), and bad counts / rows reported through out[KERN_YOLO_OUT_STATUS]. raw16 (bf16 Detect
 * outputs in place, NCHW and NHWC) against the GPU's own float32 loss and detect16_bwd, bit for
 * bit.
 *
 * Tolerances (fp32), and why:
 *   out (the loss values): 1e-6 abs + 2e-5 rel: double sums in another order (tree vs
 *     sequential), CUDA's expf/log1pf/atanf within 2 ulp of glibc's, FMA contraction.
 *   dp: 1e-5 x max|dp_ref| abs + 1e-4 rel: the same per-entry arithmetic and the same order of
 *     additions per element as the reference, so only the CIoU backward's rounding (FMA,
 *     atanf) and the level scales derived from the sums differ; the absolute part is relative
 *     to the tensor's largest gradient because objectness gradients near 0 carry cancellation.
 *   status: exact.
 * Exits 77 with "# SKIP no CUDA device" when no device is visible (registered with the
 * exit-code protocol, suite cuda).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_testutil.h"
#include "tap.h"
#include "cuda_testutil.h"
#include "parity.h"

struct prob {
    struct kern_yolo_loss d;
    size_t len[KERN_YOLO_MAX_LEVELS];
    float *p[KERN_YOLO_MAX_LEVELS], *dp[KERN_YOLO_MAX_LEVELS];     /* host, reference */
    float *p_d[KERN_YOLO_MAX_LEVELS], *dp_d[KERN_YOLO_MAX_LEVELS]; /* device */
    float *t;                                                      /* (max_targets, 6) host */
    float *t_d;
    int nt;
    int *nt_d;
    float *out_d;
    void *s_cpu, *s_gpu;
    size_t b_cpu, b_gpu;
};

static void prob_fill(struct prob *P, int nt_max);

static void prob_make(struct prob *P, int nl, int na, int nc, int bs, int maxg, int nt_max,
                      int weighted)
{
    memset(P, 0, sizeof *P);
    kern_yolo_loss_init(&P->d, nl, na, nc, bs, nt_max > 0 ? nt_max : 1);
    for (int l = 0; l < nl; l++) {
        P->d.ny[l] = kt_randint(2, maxg >> l > 2 ? maxg >> l : 2);
        P->d.nx[l] = kt_randint(2, maxg >> l > 2 ? maxg >> l : 2);
        P->d.balance[l] = kt_uniform(0.2f, 4.0f);
        for (int a = 0; a < na; a++) {
            P->d.anchors[l][a][0] = kt_uniform(0.3f, 4.0f);
            P->d.anchors[l][a][1] = kt_uniform(0.3f, 4.0f);
        }
    }
    P->d.label_smoothing = kt_randint(0, 1) ? 0.1f : 0.0f;
    if (weighted) {
        P->d.cls_pw = kt_uniform(0.5f, 2.0f);
        P->d.obj_pw = kt_uniform(0.5f, 2.0f);
        P->d.gr = kt_uniform(0.2f, 0.9f);
    }
    prob_fill(P, nt_max);
}

/* Targets (up to nt_max rows, a sixth repeated with a smaller width), tensors and scratch for
 * the descriptor P->d. */
static void prob_fill(struct prob *P, int nt_max)
{
    const int nl = P->d.nl, na = P->d.na, nc = P->d.nc, bs = P->d.bs;
    P->t = kt_alloc((size_t)P->d.max_targets * 6);
    P->nt = nt_max > 0 ? kt_randint(nt_max / 2, nt_max) : 0;
    for (int r = 0; r < P->nt; r++) {
        float *row = P->t + 6 * r;
        if (r > 0 && kt_randint(0, 5) == 0) { /* a duplicate of the previous row */
            memcpy(row, row - 6, 6 * sizeof(float));
            row[4] *= 0.7f;
            continue;
        }
        row[0] = (float)kt_randint(0, bs - 1);
        row[1] = (float)kt_randint(0, nc - 1);
        row[2] = kt_randint(0, 2) ? kt_uniform(0.0f, 1.0f) : (float)kt_randint(0, 8) / 8.0f;
        row[3] = kt_randint(0, 2) ? kt_uniform(0.0f, 1.0f) : (float)kt_randint(0, 8) / 8.0f;
        row[4] = kt_uniform(0.02f, 0.5f);
        row[5] = kt_uniform(0.02f, 0.5f);
    }
    for (int r = P->nt; r < P->d.max_targets; r++)
        for (int k = 0; k < 6; k++)
            P->t[6 * r + k] = kt_canary(); /* rows past the count are never read */
    for (int l = 0; l < nl; l++) {
        P->len[l] = (size_t)bs * na * P->d.ny[l] * P->d.nx[l] * (nc + 5);
        P->p[l] = kt_alloc(P->len[l]);
        kt_fill(P->p[l], P->len[l], -4.0f, 4.0f);
        P->dp[l] = kt_alloc(P->len[l]);
        P->p_d[l] = kct_alloc(P->len[l] * sizeof(float));
        P->dp_d[l] = kct_alloc(P->len[l] * sizeof(float));
        kct_put(P->p_d[l], P->p[l], P->len[l] * sizeof(float));
    }
    P->t_d = kct_alloc((size_t)P->d.max_targets * 6 * sizeof(float));
    kct_put(P->t_d, P->t, (size_t)P->d.max_targets * 6 * sizeof(float));
    P->nt_d = kct_alloc(sizeof(int));
    kct_put(P->nt_d, &P->nt, sizeof(int));
    P->out_d = kct_alloc(KERN_YOLO_OUT_N * sizeof(float));
    if (kern_ref_yolo_loss_scratch_size(g_cpu, &P->d, &P->b_cpu) < 0 ||
        kern_cuda_yolo_loss_scratch_size(g_gpu, &P->d, &P->b_gpu) < 0) {
        printf("Bail out! scratch sizes\n");
        exit(99);
    }
    P->s_cpu = aligned_alloc(64, (P->b_cpu + 63) & ~(size_t)63);
    P->s_gpu = kct_alloc(P->b_gpu);
}

static void prob_free(struct prob *P)
{
    for (int l = 0; l < P->d.nl; l++) {
        free(P->p[l]);
        free(P->dp[l]);
        cudaFree(P->p_d[l]);
        cudaFree(P->dp_d[l]);
    }
    free(P->t);
    free(P->s_cpu);
    cudaFree(P->t_d);
    cudaFree(P->nt_d);
    cudaFree(P->out_d);
    cudaFree(P->s_gpu);
}

/* Fills dp (host and device) with canaries, or with the same random values for accum. */
static void prob_prefill(struct prob *P, unsigned accum)
{
    for (int l = 0; l < P->d.nl; l++) {
        if (accum)
            kt_fill(P->dp[l], P->len[l], -1e-2f, 1e-2f);
        else
            kt_poison(P->dp[l], P->len[l]);
        kct_put(P->dp_d[l], P->dp[l], P->len[l] * sizeof(float));
    }
    float canary[KERN_YOLO_OUT_N];
    kt_poison(canary, KERN_YOLO_OUT_N);
    kct_put(P->out_d, canary, sizeof canary);
}

static int gpu_run(struct prob *P, unsigned accum, int grad, void *scratch, size_t bytes)
{
    return kern_cuda_yolo_loss(g_gpu, &P->d, grad ? P->dp_d : NULL, P->out_d,
                               (const float *const *)P->p_d, P->t_d, P->nt_d, scratch, bytes,
                               accum);
}

/* One comparison of a problem: reference vs CUDA, out and (with grad) every dp element. */
static void compare(struct prob *P, const char *what, unsigned accum, int grad)
{
    prob_prefill(P, accum);
    float out_r[KERN_YOLO_OUT_N], out_g[KERN_YOLO_OUT_N];
    kt_poison(out_r, KERN_YOLO_OUT_N);
    const int rr =
        kern_ref_yolo_loss(g_cpu, &P->d, grad ? P->dp : NULL, out_r, (const float *const *)P->p,
                           P->t, &P->nt, P->s_cpu, P->b_cpu, accum);
    const int rg = gpu_run(P, accum, grad, P->s_gpu, P->b_gpu);
    if (!ok(rr == 0 && rg == 0, "%s: both run (ref %d, cuda %d %s)", what, rr, rg,
            kern_cuda_ctx_last_error(g_gpu)))
        return;
    kct_down(out_g, P->out_d, sizeof out_g);
    char name[200];
    snprintf(name, sizeof name, "%s: loss values", what);
    kt_check_close_f(name, out_g, out_r, KERN_YOLO_OUT_N, 1e-6, 2e-5);
    if (!grad) return;
    for (int l = 0; l < P->d.nl; l++) {
        float *got = kt_alloc(P->len[l]);
        kct_down(got, P->dp_d[l], P->len[l] * sizeof(float));
        double amax = 0.0;
        for (size_t i = 0; i < P->len[l]; i++)
            amax = fmax(amax, fabs(P->dp[l][i]));
        snprintf(name, sizeof name, "%s: dp[%d] (%s)", what, l, accum ? "+=" : "=");
        kt_check_close_f(name, got, P->dp[l], P->len[l], 1e-5 * amax + 1e-12, 1e-4);
        free(got);
    }
}

static void test_random(int weighted, unsigned accum)
{
    struct prob P;
    const int nl = kt_randint(1, 3), na = kt_randint(1, 3);
    const int nc = kt_randint(0, 3) ? kt_randint(1, 6) : 80;
    prob_make(&P, nl, na, nc, kt_randint(1, 4), 20, kt_randint(1, 40), weighted);
    char what[160];
    snprintf(what, sizeof what, "random nl %d na %d nc %d bs %d nt %d%s", nl, na, nc, P.d.bs, P.nt,
             weighted ? " weighted" : "");
    tap_diag("%s", what);
    compare(&P, what, accum, 1);
    compare(&P, what, 0, 0);
    prob_free(&P);
}

static void test_special(void)
{
    struct prob P;
    /* YOLOv5s-like: 3 levels 80/40/20 (640 / 8, 16, 32) at bs 4, 80 classes, 300 rows, the
     * yolov5s anchors in grid units. */
    const int g[3] = { 80, 40, 20 };
    const float anc[3][3][2] = {
        { { 1.25f, 1.625f }, { 2.0f, 3.75f }, { 4.125f, 2.875f } },
        { { 1.875f, 3.8125f }, { 3.875f, 2.8125f }, { 3.6875f, 7.4375f } },
        { { 3.625f, 2.8125f }, { 4.875f, 6.1875f }, { 11.65625f, 10.1875f } },
    };
    memset(&P, 0, sizeof P);
    kern_yolo_loss_init(&P.d, 3, 3, 80, 4, 300);
    for (int l = 0; l < 3; l++) {
        P.d.ny[l] = P.d.nx[l] = g[l];
        memcpy(P.d.anchors[l], anc[l], sizeof anc[l]);
    }
    prob_fill(&P, 300);
    tap_diag("yolov5s-like: 80/40/20 at bs 4, 80 classes, %d rows, scratch %zu bytes on the GPU",
             P.nt, P.b_gpu);
    compare(&P, "yolov5s-like", 0, 1);

    /* Repeatability: a second GPU run gives the same bits. */
    float o1[KERN_YOLO_OUT_N], o2[KERN_YOLO_OUT_N];
    float *g1 = kt_alloc(P.len[0]), *g2 = kt_alloc(P.len[0]);
    kct_down(o1, P.out_d, sizeof o1);
    kct_down(g1, P.dp_d[0], P.len[0] * sizeof(float));
    prob_prefill(&P, 0);
    gpu_run(&P, 0, 1, P.s_gpu, P.b_gpu);
    kct_down(o2, P.out_d, sizeof o2);
    kct_down(g2, P.dp_d[0], P.len[0] * sizeof(float));
    ok(!memcmp(o1, o2, sizeof o1) && !memcmp(g1, g2, P.len[0] * sizeof(float)),
       "GPU runs are bitwise repeatable (loss and dp[0])");

    /* The context's workspace as scratch. */
    ok(kern_ctx_reserve(g_gpu, P.b_gpu) == 0, "workspace reserved");
    prob_prefill(&P, 0);
    ok(gpu_run(&P, 0, 1, NULL, 0) == 0, "scratch NULL: the context's workspace");
    kct_down(o2, P.out_d, sizeof o2);
    kct_down(g2, P.dp_d[0], P.len[0] * sizeof(float));
    ok(!memcmp(o1, o2, sizeof o1) && !memcmp(g1, g2, P.len[0] * sizeof(float)),
       "the same bits through the workspace");

    /* A CUDA graph of the op, replayed after the count changed in device memory. */
    cudaStream_t s = (cudaStream_t)kern_cuda_ctx_stream(g_gpu);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    kern_cuda_ctx_sync(g_gpu);
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    int rc = e == cudaSuccess ? gpu_run(&P, 0, 1, P.s_gpu, P.b_gpu) : -1;
    if (e == cudaSuccess) e = cudaStreamEndCapture(s, &graph);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    ok(e == cudaSuccess && rc == 0, "the op captures into a CUDA graph (%s)",
       cudaGetErrorString(e));
    if (e == cudaSuccess && rc == 0) {
        P.nt = P.nt / 3;
        kct_put(P.nt_d, &P.nt, sizeof(int));
        prob_prefill(&P, 0);
        e = cudaGraphLaunch(exec, s);
        ok(e == cudaSuccess, "graph replay launches");
        float out_r[KERN_YOLO_OUT_N], out_g[KERN_YOLO_OUT_N];
        kern_ref_yolo_loss(g_cpu, &P.d, P.dp, out_r, (const float *const *)P.p, P.t, &P.nt, P.s_cpu,
                           P.b_cpu, 0);
        kct_down(out_g, P.out_d, sizeof out_g);
        kt_check_close_f("graph replay with a new count: loss values", out_g, out_r,
                         KERN_YOLO_OUT_N, 1e-6, 2e-5);
        float *got = kt_alloc(P.len[1]);
        kct_down(got, P.dp_d[1], P.len[1] * sizeof(float));
        double amax = 0.0;
        for (size_t i = 0; i < P.len[1]; i++)
            amax = fmax(amax, fabs(P.dp[1][i]));
        kt_check_close_f("graph replay with a new count: dp[1]", got, P.dp[1], P.len[1],
                         1e-5 * amax + 1e-12, 1e-4);
        free(got);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);

    /* Bad counts and rows: flagged on the device, losses NaN. */
    float o[KERN_YOLO_OUT_N];
    const int bad_counts[2] = { -3, 301 };
    for (int i = 0; i < 2; i++) {
        kct_put(P.nt_d, &bad_counts[i], sizeof(int));
        gpu_run(&P, 0, 1, P.s_gpu, P.b_gpu);
        kct_down(o, P.out_d, sizeof o);
        ok(o[KERN_YOLO_OUT_STATUS] == (float)KERN_YOLO_BAD_COUNT && isnan(o[KERN_YOLO_OUT_TOTAL]),
           "count %d: status BAD_COUNT, total NaN", bad_counts[i]);
    }
    kct_put(P.nt_d, &P.nt, sizeof(int));
    P.t[1] = 80.0f; /* class out of range in row 0 */
    kct_put(P.t_d, P.t, 6 * sizeof(float));
    gpu_run(&P, 0, 1, P.s_gpu, P.b_gpu);
    kct_down(o, P.out_d, sizeof o);
    ok(o[KERN_YOLO_OUT_STATUS] == (float)KERN_YOLO_BAD_ROW && isnan(o[KERN_YOLO_OUT_LBOX]),
       "a bad row: status BAD_ROW, losses NaN");
    is_int(kern_ref_yolo_loss(g_cpu, &P.d, P.dp, o, (const float *const *)P.p, P.t, &P.nt, P.s_cpu,
                              P.b_cpu, 0),
           -EINVAL, "the reference refuses the same row with -EINVAL");
    is_int(gpu_run(&P, 0, 1, P.s_gpu, P.b_gpu - 256 - 1), -KERN_EWORKSPACE,
           "scratch too small: -KERN_EWORKSPACE");
    is_int(kern_cuda_yolo_loss(g_cpu, &P.d, P.dp_d, P.out_d, (const float *const *)P.p_d, P.t_d,
                               P.nt_d, P.s_gpu, P.b_gpu, 0),
           -KERN_EBACKEND, "a CPU context: -KERN_EBACKEND");
    ok(kern_ops_cuda()->yolo_loss == kern_cuda_yolo_loss, "the CUDA ops table carries the op");
    free(g1);
    free(g2);
    prob_free(&P);
}

static void test_empty(void)
{
    struct prob P;
    prob_make(&P, 3, 3, 5, 2, 16, 0, 0);
    tap_diag("empty batch");
    compare(&P, "no targets", 0, 1);
    prob_free(&P);
}

/* Level l's Detect head of P as kern_detect describes it. */
static struct kern_detect det_of(const struct prob *P, int l)
{
    return (struct kern_detect){ .bs = P->d.bs,
                                 .na = P->d.na,
                                 .no = P->d.nc + 5,
                                 .ny = P->d.ny[l],
                                 .nx = P->d.nx[l],
                                 .stride = 8 };
}

/* raw16 (kern_loss.h) on the GPU: the loss read from and written to bf16 Detect outputs in
 * place gives the bits of the GPU's own float32 loss on the widened head followed by
 * detect16_bwd (the same float additions per element, rounded once), every element written. */
static void test_raw16(int layout)
{
    struct prob P;
    prob_make(&P, 3, 3, kt_randint(0, 1) ? 80 : kt_randint(1, 6), 2, 20, 40, layout);
    tap_diag("raw16 %s: nc %d", layout ? "NHWC" : "NCHW", P.d.nc);
    uint16_t *raw_d[KERN_YOLO_MAX_LEVELS], *want_d[KERN_YOLO_MAX_LEVELS],
        *got_d[KERN_YOLO_MAX_LEVELS];
    for (int l = 0; l < P.d.nl; l++) {
        const struct kern_detect det = det_of(&P, l);
        uint16_t *const raw = malloc(P.len[l] * 2);
        if (!raw) exit(99);
        CK(kern_ref_cast_f32_bf16(g_cpu, raw, P.p[l], P.len[l]));    /* the raw head, any bf16 */
        CK(kern_ref_detect16_fwd(g_cpu, &det, layout, P.p[l], raw)); /* its widened permute */
        kct_put(P.p_d[l], P.p[l], P.len[l] * sizeof(float));
        raw_d[l] = kct_up(raw, P.len[l] * 2);
        want_d[l] = kct_poison(P.len[l] * 2);
        got_d[l] = kct_poison(P.len[l] * 2);
        free(raw);
    }
    prob_prefill(&P, 0);
    float out_w[KERN_YOLO_OUT_N], out_g[KERN_YOLO_OUT_N];
    CK(gpu_run(&P, 0, 1, P.s_gpu, P.b_gpu));
    kct_down(out_w, P.out_d, sizeof out_w);
    for (int l = 0; l < P.d.nl; l++) {
        const struct kern_detect det = det_of(&P, l);
        CK(kern_cuda_detect16_bwd(g_gpu, &det, layout, want_d[l], P.dp_d[l]));
    }
    struct kern_yolo_loss d = P.d;
    d.raw16 = 1;
    d.raw_layout = layout;
    size_t need = 0;
    CK(kern_cuda_yolo_loss_scratch_size(g_gpu, &d, &need));
    const int rc = need <= P.b_gpu ? kern_cuda_yolo_loss(g_gpu, &d, (float *const *)got_d, P.out_d,
                                                         (const float *const *)raw_d, P.t_d, P.nt_d,
                                                         P.s_gpu, P.b_gpu, 0)
                                   : -KERN_EWORKSPACE;
    kct_down(out_g, P.out_d, sizeof out_g);
    int same = rc == 0 && !memcmp(out_w, out_g, sizeof out_w);
    for (int l = 0; l < P.d.nl; l++) {
        uint16_t *const a = malloc(P.len[l] * 2), *const b = malloc(P.len[l] * 2);
        if (!a || !b) exit(99);
        kct_down(a, want_d[l], P.len[l] * 2);
        kct_down(b, got_d[l], P.len[l] * 2);
        same &= !memcmp(a, b, P.len[l] * 2);
        free(a), free(b);
    }
    ok(same, "raw16 %s: the loss and gradient bits of the float32 loss then detect16_bwd (rc %d)",
       layout ? "NHWC" : "NCHW", rc);
    is_int(kern_cuda_yolo_loss(g_gpu, &d, (float *const *)got_d, P.out_d,
                               (const float *const *)raw_d, P.t_d, P.nt_d, P.s_gpu, P.b_gpu,
                               KERN_ACCUM_DX),
           -EINVAL, "raw16 %s: KERN_ACCUM_DX refused", layout ? "NHWC" : "NCHW");
    for (int l = 0; l < P.d.nl; l++)
        cudaFree(raw_d[l]), cudaFree(want_d[l]), cudaFree(got_d[l]);
    prob_free(&P);
}

void parity_yolo_loss(int bench)
{
    (void)bench; /* no benchmark in this suite */
    for (int i = 0; i < 6; i++)
        test_random(i % 2, i % 3 == 2 ? KERN_ACCUM_DX : 0);
    test_empty();
    test_special();
    test_raw16(KERN_LAYOUT_NCHW);
    test_raw16(KERN_LAYOUT_NHWC);
}
