/*
 * The SGD step's reduced-precision copy (kern.h "REDUCED-PRECISION COPY", kern_sgd.params_lowp):
 * on random segment tables with NaN canaries in the padding, for bf16 and fp16, a plain step, a
 * step with its scalars in memory (dyn) and a skipped step (found_inf, skip_nonfinite), the copy
 * equals the cast op run on the updated parameters afterwards, bit for bit, over the segments
 * (kern_ref_cast_f32_lowp_cl over those with a channels-last lowp order; kern_ref_s2d_weight_fwd
 * then the cast, at their place, over two stem weights, kern_lowp_order.s2d, NHWC and NCHW); the
 * padding of the copy, the stem copies' pad channels and the stems' own elements included, is
 * never written; a lowp order that does not fit its segment, or a stem copy that overlaps a
 * segment or another copy, is refused; params, momentum and EMA
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

/* The stem copy of segment *S into want: the float32 rearrangement, then the cast (channels last
 * when asked), its non-pad channels at S->lowp.at. */
static void want_s2d(struct kern_ctx *ctx, int dtype, uint16_t *want, const float *th,
                     const struct kern_optim_seg *S)
{
    const struct kern_lowp_order *const L = &S->lowp;
    const int k_out = (int)(S->count / (36 * (size_t)L->c));
    const size_t n3 = (size_t)k_out * (size_t)L->s2d * 9;
    const struct kern_s2d d = { 1, L->c, 2, 2, L->s2d, KERN_LAYOUT_NCHW };
    float *const w3 = kt_alloc(n3);
    uint16_t *const h3 = malloc(n3 * sizeof *h3);
    if (!h3 || kern_ref_s2d_weight_fwd(ctx, &d, k_out, w3, th + S->offset) < 0) exit(99);
    int rc;
    if (L->hw)
        rc = kern_ref_cast_f32_lowp_cl(ctx, dtype, h3, w3, k_out, L->s2d, 9);
    else
        rc = dtype == KERN_DT_BF16 ? kern_ref_cast_f32_bf16(ctx, h3, w3, n3)
                                   : kern_ref_cast_f32_f16(ctx, h3, w3, n3);
    if (rc < 0) exit(99);
    for (size_t i = 0; i < n3; i++) {
        const size_t ch = L->hw ? i % (size_t)L->s2d : i / 9 % (size_t)L->s2d;
        if (ch < 4 * (size_t)L->c) want[L->at + i] = h3[i];
    }
    free(w3), free(h3);
}

static void test_case(struct kern_ctx *ctx, int dtype, int run)
{
    const size_t len0 = (size_t)kt_randint(2000, 120000), cap = 600;
    struct kern_optim_seg *const seg = calloc(cap, sizeof *seg);
    if (!seg) exit(99);
    size_t total = 0;
    size_t n_seg = kt_random_segs_prepared(seg, cap - 2, len0, 40, 300, 5000, 3, &total);
    kt_segs_lowp_order(seg, n_seg);
    const size_t len = kt_segs_add_s2d(seg, &n_seg, len0, 3, &total);
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
        const size_t o = seg[s].offset, c = (size_t)seg[s].lowp.c, hw = (size_t)seg[s].lowp.hw;
        if (seg[s].lowp.s2d)
            want_s2d(ctx, dtype, want, th2, &seg[s]);
        else if (c)
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
        seg[0].lowp = (struct kern_lowp_order){ .c = bad[k][0], .hw = bad[k][1] };
        size_t total = 0;
        ok(kern_optim_segs_prepare(seg, 2, 64, 1, &total) == -EINVAL,
           "lowp order c %d hw %d on 30 elements: -EINVAL", bad[k][0], bad[k][1]);
    }
    struct kern_optim_seg seg[1] = {
        { .offset = 0, .count = 30, .group = 0, .lowp = { .c = 5, .hw = 3 } }
    };
    size_t total = 0;
    ok(kern_optim_segs_prepare(seg, 1, 30, 1, &total) == 0 && total == 30,
       "lowp order c 5 hw 3 on 30 elements: accepted");

    /* stem orders: segment 0 is w6 (2, 3, 6, 6), 216 elements, its copy 2 x 16 x 9 = 288;
     * segment 1 is 36 elements at 220 */
    static const struct {
        struct kern_lowp_order o0, o1; /* the two segments' orders */
        int want;
        const char *what;
    } st[] = {
        { { 3, 9, 16, 0, 300 }, { 0 }, 0, "(c 3, hw 9, s2d 16) at 300, past both: accepted" },
        { { 3, 0, 12, 0, 300 }, { 0 }, 0, "s2d 12 = 4 c, OIHW: accepted" },
        { { 3, 9, 8, 0, 300 }, { 0 }, -EINVAL, "s2d 8 < 4 c" },
        { { 0, 9, 16, 0, 300 }, { 0 }, -EINVAL, "c 0" },
        { { 3, 5, 16, 0, 300 }, { 0 }, -EINVAL, "hw 5 (neither 9 nor 0)" },
        { { 4, 9, 16, 0, 300 }, { 0 }, -EINVAL, "c 4: 216 is no multiple of 144" },
        { { 3, 9, -16, 0, 300 }, { 0 }, -EINVAL, "s2d negative" },
        { { 3, 9, 16, 0, 0 }, { 0 }, -EINVAL, "the copy over the stem's own elements" },
        { { 3, 9, 16, 0, 218 }, { 0 }, -EINVAL, "the copy over segment 1 only" },
        { { 3, 9, 16, 0, 256 }, { 0 }, 0, "the copy just past segment 1: accepted" },
        { { 3, 9, 16, 0, 300 }, { 1, 0, 4, 0, 587 }, -EINVAL, "two copies overlapping" },
        { { 3, 9, 16, 0, 300 }, { 1, 0, 4, 0, 588 }, 0, "two copies side by side: accepted" },
        { { 3, 9, 16, 0, 300 }, { 1, 0, 4, 0, 100 }, -EINVAL, "segment 1's copy over segment 0" },
        { { 3, 9, 16, 0, SIZE_MAX - 100 }, { 0 }, -EINVAL, "a copy past SIZE_MAX" },
    };
    for (size_t k = 0; k < sizeof st / sizeof st[0]; k++) {
        struct kern_optim_seg sg[2] = {
            { .offset = 0, .count = 216, .group = 0, .lowp = st[k].o0 },
            { .offset = 220, .count = 36, .group = 0, .lowp = st[k].o1 },
        };
        is_int(kern_optim_segs_prepare(sg, 2, 256, 1, &total), st[k].want, "stem order: %s",
               st[k].what);
    }
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
