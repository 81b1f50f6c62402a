/*
 * CUDA graphs (kern.h "Graphs"): the training step of graph_testutil.h (conv3x3, BN+SiLU, their
 * backward, gradient norm, SGD with clipping and the fused EMA, EMA of the running stats)
 *   - captured once on the GPU and replayed, with the per-step scalars (lr, momentum, first,
 *     grad_scale, EMA decay) uploaded to device memory from pinned memory before each replay,
 *   - equals the same ops called directly on the GPU with the scalars as host fields: bitwise
 *     (the same kernels and cuDNN algorithms on the same data; reductions in a fixed order);
 *   - equals the CPU reference within 1e-4 relative + 1e-5 absolute after the steps (fp32
 *     convolutions without TF32, double BN sums in another order, the clip factor's last bit:
 *     the tolerances of test_cuda_parity.c and test_cuda_parity_optim.c, widened for 6 chained
 *     steps).
 * Errors: capturing kern_cuda_bce_logits_fwd (it waits for a host float) fails with -ENOTSUP and
 * the CUDA text, and leaves the context usable; kern_mem_alloc inside a capture fails; a nested
 * capture gives -EBUSY. Fresh random draws each run (seed printed; --seed N replays one).
 * Registered with the exit-code protocol; exits 77 with "# SKIP no CUDA device" without a GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
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
#include "graph_testutil.h"

#define STEPS 6

static size_t bit_diffs(const void *a, const void *b, size_t n_floats)
{
    size_t bad = 0;
    for (size_t i = 0; i < n_floats; i++)
        bad += memcmp((const float *)a + i, (const float *)b + i, sizeof(float)) != 0;
    return bad;
}

/* got vs want over the three tensors of the flat layout (the padding holds NaN canaries). */
static void close_flat(const char *what, const float *got, const float *want)
{
    static const size_t off[3] = { GT_W_OFF, GT_G_OFF, GT_B_OFF };
    static const size_t cnt[3] = { GT_WN, GT_COUT, GT_COUT };
    static const char *const name[3] = { "w", "gamma", "beta" };
    for (int t = 0; t < 3; t++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s %s vs CPU", what, name[t]);
        kt_check_close_f(buf, got + off[t], want + off[t], cnt[t], 1e-5, 1e-4);
    }
}

static void test_step(void)
{
    static struct gt_host h0, hc, hd, hg;
    gt_host_init(&h0);
    const struct kern_ops *const KC = kern_ops_cuda();
    struct gt_step C, D, G;
    gt_step_init(&C, kern_ops_ref(), g_cpu, &h0, 0);
    gt_step_init(&D, KC, g_gpu, &h0, 0);
    gt_step_init(&G, KC, g_gpu, &h0, 1);
    struct kern_sgd_dyn *stage = NULL; /* pinned, as the trainer's staging */
    if (cudaMallocHost((void **)&stage, sizeof *stage) != cudaSuccess) kct_bail("pinned", "alloc");
    struct kern_sgd_dyn host_stage;
    struct kern_graph *graph = NULL;
    int rc_c = 0, rc_d = 0, rc_g = 0;
    for (int k = 0; k < STEPS; k++) {
        gt_step_prepare(&C, k, &host_stage);
        rc_c |= gt_step_fn(&C);
        gt_step_prepare(&D, k, &host_stage);
        rc_d |= gt_step_fn(&D);
        /* The previous replay may still read *stage's upload: wait before rewriting pinned
         * memory (the trainer double-buffers it instead). */
        if (k) kern_cuda_ctx_sync(g_gpu);
        gt_step_prepare(&G, k, stage);
        const int rc =
            k == 0 ? kern_graph_capture(g_gpu, gt_step_fn, &G, &graph) : kern_graph_replay(graph);
        if (rc < 0)
            printf("#   step %d: %s (%s)\n", k, kern_strerror(rc), kern_cuda_ctx_last_error(g_gpu));
        rc_g |= rc;
    }
    is_int(rc_c, 0, "CPU step returns 0 on every step");
    is_int(rc_d, 0, "GPU direct step returns 0 on every step");
    is_int(rc_g, 0, "GPU capture and %d replays return 0", STEPS - 1);
    gt_download(&C, &hc);
    gt_download(&D, &hd);
    gt_download(&G, &hg);
    ok(bit_diffs(hg.params, h0.params, GT_LEN) > GT_WN, "the steps moved the parameters");
    size_t n = bit_diffs(hg.params, hd.params, GT_LEN) + bit_diffs(hg.mom, hd.mom, GT_LEN) +
               bit_diffs(hg.ema, hd.ema, GT_LEN) + bit_diffs(hg.grads, hd.grads, GT_LEN);
    ok(n == 0, "%d steps: params, momentum, EMA, grads bitwise equal, graph vs direct (%zu)", STEPS,
       n);
    n = bit_diffs(hg.stats, hd.stats, 2 * GT_COUT) +
        bit_diffs(hg.ema_stats, hd.ema_stats, 2 * GT_COUT);
    ok(n == 0, "BN running stats and their EMA bitwise equal, graph vs direct (%zu)", n);
    ok(memcmp(&hg.sumsq, &hd.sumsq, sizeof hd.sumsq) == 0, "last sumsq bitwise equal");
    close_flat("params", hg.params, hc.params);
    close_flat("momentum", hg.mom, hc.mom);
    close_flat("EMA", hg.ema, hc.ema);
    kt_check_close_f("running stats vs CPU", hg.stats, hc.stats, 2 * GT_COUT, 1e-5, 1e-4);
    kt_check_close_f("stats EMA vs CPU", hg.ema_stats, hc.ema_stats, 2 * GT_COUT, 1e-5, 1e-4);
    const double rel = fabs(hg.sumsq - hc.sumsq) / hc.sumsq;
    ok(rel <= 1e-4, "last sumsq vs CPU: rel err %.3g <= 1e-4", rel);
    size_t canaries = 0;
    for (size_t i = GT_W_OFF + GT_WN; i < GT_G_OFF; i++)
        canaries += kt_is_canary(hg.params[i]) && kt_is_canary(hg.mom[i]);
    ok(canaries == GT_G_OFF - GT_WN, "padding canaries intact on the GPU");
    kern_graph_destroy(graph);
    cudaFreeHost(stage);
    gt_step_free(&C);
    gt_step_free(&D);
    gt_step_free(&G);
}

struct bce_arg {
    float loss;
    const float *x, *t;
};

static int bce_fn(void *arg)
{
    struct bce_arg *const a = arg;
    return kern_ops_cuda()->bce_logits_fwd(g_gpu, &a->loss, a->x, a->t, 4, 8, 8);
}

static int alloc_fn(void *arg)
{
    return kern_mem_alloc(g_gpu, 4096, (void **)arg);
}

static int nested_fn(void *arg)
{
    return kern_graph_capture(g_gpu, alloc_fn, arg, (struct kern_graph **)arg);
}

struct ema_arg {
    float *ema, *x;
    const struct kern_sgd_dyn *dyn;
};

static int ema_fn(void *arg)
{
    struct ema_arg *const a = arg;
    return kern_ops_cuda()->ema_update_dyn(g_gpu, a->ema, a->x, 1000, a->dyn);
}

static void test_errors(void)
{
    float hx[32], ht[32];
    kt_fill(hx, 32, -2.0f, 2.0f);
    for (int i = 0; i < 32; i++)
        ht[i] = (float)kt_randint(0, 1);
    struct bce_arg b = { 0.0f, kct_up(hx, sizeof hx), kct_up(ht, sizeof ht) };
    struct kern_graph *g = (struct kern_graph *)&b;
    const int rc = kern_graph_capture(g_gpu, bce_fn, &b, &g);
    const char *const msg = kern_cuda_ctx_last_error(g_gpu);
    is_int(rc, -ENOTSUP, "capturing bce_logits_fwd: -ENOTSUP");
    printf("#   %s\n", msg);
    ok(g == NULL, "no graph on failure");
    ok(strstr(msg, "kern_graph_capture") && strstr(msg, "cudaError"),
       "the CUDA error is named in kern_cuda_ctx_last_error");
    /* The context still works: the op runs directly, and a clean capture succeeds. */
    is_int(kern_ops_cuda()->bce_logits_fwd(g_gpu, &b.loss, b.x, b.t, 4, 8, 8), 0,
           "bce_logits_fwd directly after the failed capture: 0");
    ok(isfinite(b.loss) && b.loss > 0.0f, "and its loss %.4f is finite", (double)b.loss);

    void *p = NULL;
    const int ra = kern_graph_capture(g_gpu, alloc_fn, &p, &g);
    ok(ra < 0 && g == NULL, "kern_mem_alloc inside a capture fails (%s)", kern_strerror(ra));
    printf("#   %s\n", kern_cuda_ctx_last_error(g_gpu));
    kern_mem_free(g_gpu, p); /* NULL unless CUDA allowed it */

    void *slot = NULL;
    is_int(kern_graph_capture(g_gpu, nested_fn, &slot, &g), -EBUSY, "nested capture: -EBUSY");

    float hema[1000], hxe[1000], want[1000], got[1000];
    kt_fill(hema, 1000, -1.0f, 1.0f);
    kt_fill(hxe, 1000, -1.0f, 1.0f);
    struct kern_sgd_dyn dyn;
    gt_scalars(3, &dyn);
    struct ema_arg e = { kct_up(hema, sizeof hema), kct_up(hxe, sizeof hxe), NULL };
    e.dyn = kct_up(&dyn, sizeof dyn);
    struct kern_graph *ge = NULL;
    CK(kern_graph_capture(g_gpu, ema_fn, &e, &ge));
    memcpy(want, hema, sizeof want);
    kern_ref_ema_update(g_cpu, want, hxe, 1000, dyn.ema_decay, dyn.ema_weight);
    for (int k = 4; k < 7; k++) { /* new decay each replay, through device memory */
        gt_scalars(k, &dyn);
        kct_down(got, e.ema, 0); /* sync: the previous launch is done with dyn */
        kct_put((void *)e.dyn, &dyn, sizeof dyn);
        CK(kern_graph_replay(ge));
        kern_ref_ema_update(g_cpu, want, hxe, 1000, dyn.ema_decay, dyn.ema_weight);
    }
    kct_down(got, e.ema, sizeof got);
    ok(bit_diffs(got, want, 1000) == 0, "ema_update_dyn in a graph, 4 runs: bitwise = CPU");
    kern_graph_destroy(ge);
    cudaFree((void *)b.x);
    cudaFree((void *)b.t);
    cudaFree(e.ema);
    cudaFree(e.x);
    cudaFree((void *)e.dyn);
}

void parity_graph(int bench)
{
    (void)bench; /* no benchmark in this suite */
    test_step();
    test_errors();
}
