/*
 * The SGD step's reduced-precision copy (kern.h "REDUCED-PRECISION COPY", kern_sgd.params_lowp):
 * on random segment tables with NaN canaries in the padding, for bf16 and fp16, a plain step, a
 * step with its scalars in memory (dyn) and a skipped step (found_inf, skip_nonfinite), the copy
 * equals the cast op run on the updated parameters afterwards, bit for bit, over the segments
 * (kern_ref_cast_f32_lowp_cl over those with a channels-last lowp order); the padding of the copy
 * is never written; a lowp order that does not fit its segment is refused; params, momentum and EMA
 * are the same bits as a step without the copy; a bad dtype is -EINVAL with nothing written.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_testutil.h"
#include "tap.h"

#define LOWP_CANARY 0x5a5au /* the copy's padding pattern: never a value the step writes there */

/* How a case runs the step. */
enum { RUN_PLAIN, RUN_DYN, RUN_FOUND_INF, RUN_SKIP_NONFINITE, RUN_CASES };
static const char *const run_name[RUN_CASES] = { "plain", "dyn", "found_inf", "skip_nonfinite" };

static void test_case(struct kern_ctx *ctx, int dtype, int run)
{
    const size_t len = (size_t)kt_randint(2000, 120000), cap = 600;
    struct kern_optim_seg *const seg = calloc(cap, sizeof *seg);
    if (!seg) exit(99);
    size_t total = 0;
    const size_t n_seg = kt_random_segs_prepared(seg, cap, len, 40, 300, 5000, 3, &total);
    kt_segs_lowp_order(seg, n_seg);
    const char *const dt = dtype == KERN_DT_BF16 ? "bf16" : "fp16";
    float *const th = kt_alloc(len), *const buf = kt_alloc(len), *const ema = kt_alloc(len);
    float *const gr = kt_alloc(len);
    kt_fill_segs(th, seg, n_seg, len, -2.0f, 2.0f);
    kt_fill_segs(buf, seg, n_seg, len, -0.5f, 0.5f);
    kt_fill_segs(ema, seg, n_seg, len, -1.0f, 1.0f);
    kt_fill_segs(gr, seg, n_seg, len, -4.0f, 4.0f);
    /* values at the edges of the 16-bit ranges: fp16 overflow, subnormals, ties */
    th[seg[0].offset] = 70000.0f;
    if (seg[0].count > 1) th[seg[0].offset + 1] = 3e-6f;
    if (seg[0].count > 2) th[seg[0].offset + 2] = 1.00390625f; /* a bf16 tie */
    /* the twin buffers: the same step without the copy, then the cast op */
    const size_t fb = len * sizeof(float);
    float *const th2 = kt_alloc(len), *const buf2 = kt_alloc(len), *const ema2 = kt_alloc(len);
    memcpy(th2, th, fb), memcpy(buf2, buf, fb), memcpy(ema2, ema, fb);
    uint16_t *const lp = malloc(len * sizeof *lp), *const want = malloc(len * sizeof *want);
    if (!lp || !want) exit(99);
    for (size_t i = 0; i < len; i++)
        lp[i] = LOWP_CANARY;

    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = n_seg, d.total = total, d.n_groups = 3, d.nesterov = 1, d.first = 0;
    d.grad_scale = 1.0f, d.max_norm = 10.0f, d.ema_decay = 0.9f, d.ema_weight = 0.1f;
    for (int g = 0; g < 3; g++) {
        d.group[g].lr = kt_uniform(0.001f, 0.1f);
        d.group[g].momentum = 0.937f;
        d.group[g].weight_decay = g == 1 ? 5e-4f : 0.0f;
    }
    struct kern_sgd_dyn dyn;
    memset(&dyn, 0, sizeof dyn);
    for (int g = 0; g < 3; g++)
        dyn.group[g] = d.group[g];
    dyn.first = 0, dyn.grad_scale = 1.0f, dyn.ema_decay = 0.9f, dyn.ema_weight = 0.1f;
    double ss = 0.0;
    if (kern_ref_optim_sumsq(ctx, &ss, gr, seg, n_seg, total) < 0) exit(99);
    if (run == RUN_SKIP_NONFINITE) {
        d.skip_nonfinite = 1;
        ss = INFINITY;
    }
    const int32_t inf_flag = run == RUN_FOUND_INF;
    struct kern_sgd dl = d;
    dl.params_lowp = lp, dl.lowp_dtype = dtype;
    if (run == RUN_DYN) dl.dyn = &dyn; /* the host fields equal dyn's: the same step */
    const int rc = kern_ref_sgd_step(ctx, &dl, th, buf, ema, gr, seg, &ss, &inf_flag);
    ok(rc == 0, "%s %s: the step with the copy returns 0 (%zu segments, %zu elements)", dt,
       run_name[run], n_seg, total);
    ok(kern_ref_sgd_step(ctx, &d, th2, buf2, ema2, gr, seg, &ss, &inf_flag) == 0,
       "%s %s: the step without the copy returns 0", dt, run_name[run]);
    ok(!memcmp(th, th2, fb) && !memcmp(buf, buf2, fb) && !memcmp(ema, ema2, fb),
       "%s %s: params, momentum and EMA are the bits of the step without the copy", dt,
       run_name[run]);
    for (size_t i = 0; i < len; i++)
        want[i] = LOWP_CANARY;
    for (size_t s = 0; s < n_seg; s++) {
        const size_t o = seg[s].offset, c = (size_t)seg[s].lowp_c, hw = (size_t)seg[s].lowp_hw;
        if (c)
            kern_ref_cast_f32_lowp_cl(ctx, dtype, want + o, th2 + o, (int)(seg[s].count / (c * hw)),
                                      (int)c, hw);
        else if (dtype == KERN_DT_BF16)
            kern_ref_cast_f32_bf16(ctx, want + o, th2 + o, seg[s].count);
        else
            kern_ref_cast_f32_f16(ctx, want + o, th2 + o, seg[s].count);
    }
    size_t bad = 0, first = SIZE_MAX;
    for (size_t i = 0; i < len; i++)
        if (lp[i] != want[i] && bad++ == 0) first = i;
    if (!ok(bad == 0,
            "%s %s: the copy is the cast of the updated params (channels last in the segments "
            "that ask), padding untouched",
            dt, run_name[run]))
        printf("#   %zu of %zu differ, first at %zu: %04x want %04x\n", bad, len, first, lp[first],
               want[first]);
    free(seg), free(th), free(buf), free(ema), free(gr), free(th2), free(buf2), free(ema2);
    free(lp), free(want);
}

/* kern_optim_segs_prepare refuses a lowp order that does not fit its segment. */
static void test_bad_order(void)
{
    static const int bad[][2] = { { 4, 5 }, { -1, 1 }, { 2, 0 }, { 4, -3 }, { 7, 1 } };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct kern_optim_seg seg[2] = { { .offset = 0, .count = 30, .group = 0 },
                                         { .offset = 40, .count = 12, .group = 0 } };
        seg[0].lowp_c = bad[k][0], seg[0].lowp_hw = bad[k][1];
        size_t total = 0;
        ok(kern_optim_segs_prepare(seg, 2, 64, 1, &total) == -EINVAL,
           "lowp order c %d hw %d on 30 elements: -EINVAL", bad[k][0], bad[k][1]);
    }
    struct kern_optim_seg seg[1] = {
        { .offset = 0, .count = 30, .group = 0, .lowp_c = 5, .lowp_hw = 3 }
    };
    size_t total = 0;
    ok(kern_optim_segs_prepare(seg, 1, 30, 1, &total) == 0 && total == 30,
       "lowp order c 5 hw 3 on 30 elements: accepted");
}

/* A dtype other than bf16 / fp16 with a copy asked for: -EINVAL, nothing written. */
static void test_bad_dtype(struct kern_ctx *ctx)
{
    struct kern_optim_seg seg[1] = { { .offset = 0, .count = 8, .group = 0 } };
    size_t total = 0;
    if (kern_optim_segs_prepare(seg, 1, 8, 1, &total) < 0) exit(99);
    float th[8], buf[8], gr[8];
    kt_fill(th, 8, -1.0f, 1.0f);
    kt_fill(buf, 8, -1.0f, 1.0f);
    kt_fill(gr, 8, -1.0f, 1.0f);
    float th0[8];
    memcpy(th0, th, sizeof th);
    uint16_t lp[8];
    for (int i = 0; i < 8; i++)
        lp[i] = LOWP_CANARY;
    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = 1, d.total = total, d.n_groups = 1, d.grad_scale = 1.0f;
    d.group[0].lr = 0.1f;
    d.params_lowp = lp;
    const int bad[] = { KERN_DT_F32, 7, -1 };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        d.lowp_dtype = bad[k];
        const int rc = kern_ref_sgd_step(ctx, &d, th, buf, NULL, gr, seg, NULL, NULL);
        int untouched = !memcmp(th, th0, sizeof th);
        for (int i = 0; i < 8; i++)
            untouched &= lp[i] == LOWP_CANARY;
        ok(rc == -EINVAL && untouched, "lowp_dtype %d: -EINVAL, nothing written (rc %d)", bad[k],
           rc);
    }
    /* the zero-initialised descriptor (no copy) ignores lowp_dtype, as before the field */
    d.params_lowp = NULL;
    d.lowp_dtype = 7;
    ok(kern_ref_sgd_step(ctx, &d, th, buf, NULL, gr, seg, NULL, NULL) == 0,
       "no copy: lowp_dtype is not read");
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 0x5eed10f0ull);
    struct kern_ctx *const ctx = kt_ctx(0);
    for (int dt = KERN_DT_BF16; dt <= KERN_DT_F16; dt++)
        for (int run = 0; run < RUN_CASES; run++)
            test_case(ctx, dt, run);
    test_bad_dtype(ctx);
    test_bad_order();
    kern_ctx_destroy(ctx);
    return tap_done();
}
