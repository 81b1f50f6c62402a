/*
 * kern_graph_* on the CPU backend (kern.h "Graphs") and the in-memory per-step scalars of the
 * SGD step and the EMA (struct kern_sgd_dyn):
 *   - a training step (conv, BN+SiLU, their backward, gradient norm, SGD with clipping and EMA,
 *     EMA of the running stats; graph_testutil.h) captured once and replayed with new scalars
 *     every step equals the same ops called directly with the scalars as host fields, bit for
 *     bit, over several steps (canaries in the padding intact);
 *   - sgd_step with dyn equals sgd_step with the same host fields bit for bit, for changing lr,
 *     momentum, first, grad_scale and EMA decay, and reads none of the host fields;
 *   - ema_update_dyn equals ema_update; capture runs fn once and each replay once more;
 *   - errors: NULL arguments, fn's error passed through, destroy(NULL), a wrong backend.
 * Fresh random draws each run (seed printed; --seed N replays one).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kern.h"
#include "kern_testutil.h"
#include "tap.h"
#include "graph_testutil.h"

#define STEPS 6

static size_t bit_diffs(const void *a, const void *b, size_t n_floats)
{
    size_t bad = 0;
    for (size_t i = 0; i < n_floats; i++)
        bad += memcmp((const float *)a + i, (const float *)b + i, sizeof(float)) != 0;
    return bad;
}

static size_t padding_changed(const float *p)
{
    size_t bad = 0;
    for (size_t i = 0; i < GT_LEN; i++) {
        const int in = i < GT_W_OFF + GT_WN || (i >= GT_G_OFF && i < GT_G_OFF + GT_COUT) ||
                       (i >= GT_B_OFF && i < GT_B_OFF + GT_COUT);
        bad += !in && !kt_is_canary(p[i]);
    }
    return bad;
}

/* The step captured and replayed with scalars in memory == the step called directly. */
static void test_step_graph(struct kern_ctx *ctx)
{
    static struct gt_host h0, hd, hg;
    gt_host_init(&h0);
    struct gt_step D, G;
    gt_step_init(&D, kern_ops_ref(), ctx, &h0, 0);
    gt_step_init(&G, kern_ops_ref(), ctx, &h0, 1);
    struct kern_sgd_dyn stage;
    struct kern_graph *graph = NULL;
    int rc_d = 0, rc_g = 0;
    for (int k = 0; k < STEPS; k++) {
        gt_step_prepare(&D, k, &stage);
        rc_d |= gt_step_fn(&D);
        gt_step_prepare(&G, k, &stage);
        rc_g |= k == 0 ? kern_graph_capture(ctx, gt_step_fn, &G, &graph) : kern_graph_replay(graph);
    }
    is_int(rc_d, 0, "direct step returns 0 on every step");
    is_int(rc_g, 0, "capture and %d replays return 0", STEPS - 1);
    ok(graph != NULL, "capture gives a graph");
    gt_download(&D, &hd);
    gt_download(&G, &hg);
    ok(bit_diffs(hd.params, h0.params, GT_LEN) > GT_WN, "the steps moved the parameters");
    ok(hd.sumsq > 0.0 && isfinite(hd.sumsq), "gradient norm^2 %.4g finite and > 0", hd.sumsq);
    size_t n;
    n = bit_diffs(hg.params, hd.params, GT_LEN);
    ok(n == 0, "%d steps: params bitwise equal, graph vs direct (%zu differ)", STEPS, n);
    n = bit_diffs(hg.mom, hd.mom, GT_LEN);
    ok(n == 0, "momentum buffers bitwise equal (%zu differ)", n);
    n = bit_diffs(hg.ema, hd.ema, GT_LEN);
    ok(n == 0, "parameter EMA bitwise equal (%zu differ)", n);
    n = bit_diffs(hg.grads, hd.grads, GT_LEN);
    ok(n == 0, "last gradients bitwise equal (%zu differ)", n);
    n = bit_diffs(hg.stats, hd.stats, 2 * GT_COUT) +
        bit_diffs(hg.ema_stats, hd.ema_stats, 2 * GT_COUT);
    ok(n == 0, "BN running stats and their EMA bitwise equal (%zu differ)", n);
    ok(memcmp(&hg.sumsq, &hd.sumsq, sizeof hd.sumsq) == 0, "last sumsq bitwise equal");
    ok(padding_changed(hg.params) + padding_changed(hg.mom) + padding_changed(hg.ema) +
               padding_changed(hg.grads) ==
           0,
       "padding never touched (canaries intact)");
    /* The EMA of the stats really used the changing decay (not a constant). */
    ok(bit_diffs(hg.ema_stats, h0.ema_stats, 2 * GT_COUT) > 0, "EMA of the running stats moved");
    kern_graph_destroy(graph);
    gt_step_free(&D);
    gt_step_free(&G);
}

/* sgd_step with dyn == with the same host fields, bit for bit; no host field read. */
static void test_sgd_dyn(struct kern_ctx *ctx)
{
    enum { LEN = 3000 };
    struct kern_optim_seg seg[4] = { { .offset = 10, .count = 900, .group = 0 },
                                     { .offset = 950, .count = 1200, .group = 1 },
                                     { .offset = 2200, .count = 30, .group = 2 },
                                     { .offset = 2300, .count = 650, .group = 0 } };
    size_t total = 0;
    if (kern_optim_segs_prepare(seg, 4, LEN, 3, &total) < 0) exit(99);
    static float th[2][LEN], buf[2][LEN], ema[2][LEN], gr[LEN];
    kt_fill(th[0], LEN, -1.0f, 1.0f);
    kt_fill(ema[0], LEN, -1.0f, 1.0f);
    kt_poison(buf[0], LEN);
    memcpy(th[1], th[0], sizeof th[0]);
    memcpy(ema[1], ema[0], sizeof ema[0]);
    memcpy(buf[1], buf[0], sizeof buf[0]);
    int rcs = 0, scale_seen = 0;
    for (int k = 0; k < 5; k++) {
        kt_fill(gr, LEN, -2.0f, 2.0f);
        double ss = 0.0;
        rcs |= kern_ref_optim_sumsq(ctx, &ss, gr, seg, 4, total);
        struct kern_sgd_dyn dyn;
        gt_scalars(k, &dyn);
        dyn.group[1].weight_decay = kt_uniform(1e-4f, 1e-2f);
        scale_seen |= dyn.grad_scale != 1.0f;
        struct kern_sgd a, b;
        memset(&a, 0, sizeof a);
        a.n_seg = 4, a.total = total, a.n_groups = 3, a.nesterov = k % 2;
        a.max_norm = k == 2 ? (float)(sqrt(ss) * 0.3) : 0.0f;
        b = a;
        gt_sgd_set_host(&a, &dyn);
        for (int g = 0; g < KERN_OPTIM_MAX_GROUPS; g++) /* must be ignored */
            b.group[g].lr = b.group[g].momentum = b.group[g].weight_decay = NAN;
        b.grad_scale = b.ema_decay = b.ema_weight = NAN;
        b.first = !dyn.first;
        b.dyn = &dyn;
        rcs |= kern_ref_sgd_step(ctx, &a, th[0], buf[0], ema[0], gr, seg, &ss, NULL);
        rcs |= kern_ref_sgd_step(ctx, &b, th[1], buf[1], ema[1], gr, seg, &ss, NULL);
    }
    is_int(rcs, 0, "sgd_step with and without dyn returns 0 on 5 steps");
    ok(scale_seen, "grad_scale changed between steps");
    size_t n = bit_diffs(th[0], th[1], LEN) + bit_diffs(buf[0], buf[1], LEN) +
               bit_diffs(ema[0], ema[1], LEN);
    ok(n == 0, "params, momentum, EMA bitwise equal with dyn (%zu differ)", n);

    /* dyn values are checked on the CPU; the host ones are not read. */
    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = 4, d.total = total, d.n_groups = 3;
    struct kern_sgd_dyn bad;
    gt_scalars(1, &bad);
    bad.group[2].lr = INFINITY;
    d.dyn = &bad;
    memcpy(th[1], th[0], sizeof th[0]);
    is_int(kern_ref_sgd_step(ctx, &d, th[0], buf[0], NULL, gr, seg, NULL, NULL), -EINVAL,
           "non-finite lr in dyn: -EINVAL");
    ok(bit_diffs(th[0], th[1], LEN) == 0, "nothing written on -EINVAL");
    is_int(kern_ref_sgd_step(ctx, NULL, th[0], buf[0], NULL, gr, seg, NULL, NULL), -EINVAL,
           "NULL descriptor: -EINVAL");
}

static void test_ema_dyn(struct kern_ctx *ctx)
{
    enum { N = 777 };
    static float a[N], b[N], x[N];
    kt_fill(a, N, -3.0f, 3.0f);
    kt_fill(x, N, -3.0f, 3.0f);
    memcpy(b, a, sizeof a);
    struct kern_sgd_dyn dyn;
    gt_scalars(kt_randint(0, 20), &dyn);
    int rc = kern_ref_ema_update(ctx, a, x, N, dyn.ema_decay, dyn.ema_weight);
    rc |= kern_ops_ref()->ema_update_dyn(ctx, b, x, N, &dyn);
    is_int(rc, 0, "ema_update and ema_update_dyn (through the table) return 0");
    ok(bit_diffs(a, b, N) == 0 && bit_diffs(a, x, N) > 0, "ema_update_dyn bitwise equal");
    ok(kern_ops_ref()->ema_update_dyn == kern_ref_ema_update_dyn, "table member is the ref op");
    is_int(kern_ref_ema_update_dyn(ctx, a, x, N, NULL), -EINVAL, "NULL dyn: -EINVAL");
    dyn.ema_weight = NAN;
    is_int(kern_ref_ema_update_dyn(ctx, a, x, N, &dyn), -EINVAL, "NaN weight: -EINVAL");
    is_int(kern_ref_ema_update_dyn(ctx, NULL, NULL, 0, &dyn), -EINVAL,
           "count 0 with a NaN dyn: still -EINVAL");
}

struct counter {
    int calls;
    int fail_at; /* call number that fails with -EDOM, 0: never */
};

static int count_fn(void *arg)
{
    struct counter *const c = arg;
    c->calls++;
    return c->calls == c->fail_at ? -EDOM : 0;
}

static void test_api(struct kern_ctx *ctx)
{
    struct counter c = { 0, 0 };
    struct kern_graph *g = (struct kern_graph *)&c;
    is_int(kern_graph_capture(NULL, count_fn, &c, &g), -EINVAL, "NULL ctx: -EINVAL");
    ok(g == NULL, "*out cleared on error");
    is_int(kern_graph_capture(ctx, NULL, &c, &g), -EINVAL, "NULL fn: -EINVAL");
    is_int(kern_graph_capture(ctx, count_fn, &c, NULL), -EINVAL, "NULL out: -EINVAL");
    is_int(c.calls, 0, "fn not called on argument errors");
    is_int(kern_graph_capture(ctx, count_fn, &c, &g), 0, "capture returns 0");
    is_int(c.calls, 1, "capture runs fn once");
    for (int i = 0; i < 3; i++)
        kern_graph_replay(g);
    is_int(c.calls, 4, "each replay runs fn once more");
    c.fail_at = 5;
    is_int(kern_graph_replay(g), -EDOM, "replay returns fn's error");
    kern_graph_destroy(g);
    kern_graph_destroy(NULL);
    ok(1, "destroy(NULL) is a no-op");
    is_int(kern_graph_replay(NULL), -EINVAL, "replay(NULL): -EINVAL");
    struct counter f = { 0, 1 };
    g = (struct kern_graph *)&f;
    is_int(kern_graph_capture(ctx, count_fn, &f, &g), -EDOM, "capture returns fn's error");
    ok(g == NULL && f.calls == 1, "no graph when fn fails");
}

int main(int argc, char **argv)
{
    int have_seed = 0;
    for (int i = 1; i < argc; i++)
        have_seed |= !strcmp(argv[i], "--seed");
    kt_seed_from_args(argc, argv,
                      have_seed ? 0 : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid());
    struct kern_ctx *const ctx = kt_ctx(0);
    test_api(ctx);
    test_sgd_dyn(ctx);
    test_ema_dyn(ctx);
    test_step_graph(ctx);
    kern_ctx_destroy(ctx);
    struct kern_ctx *const ctx2 = kt_ctx_threads(2);
    tap_diag("again with 2 threads per op");
    test_step_graph(ctx2);
    kern_ctx_destroy(ctx2);
    return tap_done();
}
