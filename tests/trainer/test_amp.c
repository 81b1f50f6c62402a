/*
 * trainer/amp: the dtype policy and the dynamic loss scaler against torch.cuda.amp.GradScaler's
 * documented behaviour (init 65536, x2 after 2000 clean steps, x0.5 and a skipped step on
 * overflow, no growth to Inf), then one realistic fp16 loop through the kern ops: gradients
 * scaled, cast to fp16 (overflowing to Inf when the scale is too large), widened, unscaled and
 * checked, the SGD step skipped on overflow, and the scale settling where the gradients fit.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "kern.h"
#include "tap.h"

static void test_policy(void)
{
    struct trn_amp_opts o;
    trn_amp_opts_default(&o);
    ok(o.dtype == TRN_AMP_BF16 && o.init_scale == 65536.0 && o.growth_factor == 2.0 &&
           o.backoff_factor == 0.5 && o.growth_interval == 2000,
       "defaults: bf16, GradScaler(init_scale=2**16, growth 2, backoff 0.5, interval 2000)");
    enum trn_amp_dtype t = TRN_AMP_OFF;
    ok(trn_amp_dtype_parse("bf16", &t) == 0 && t == TRN_AMP_BF16, "parse bf16");
    ok(trn_amp_dtype_parse("FP16", &t) == 0 && t == TRN_AMP_FP16, "parse FP16");
    ok(trn_amp_dtype_parse("fp32", &t) == 0 && t == TRN_AMP_OFF, "parse fp32");
    is_int(trn_amp_dtype_parse("fp8", &t), -EINVAL, "parse fp8: -EINVAL");
    ok(!strcmp(trn_amp_dtype_name(TRN_AMP_FP16), "fp16"), "name of fp16");

    struct trn_amp *a = NULL;
    is_int(trn_amp_create(NULL, &a), 0, "create with defaults (bf16)");
    ok(!trn_amp_uses_scaler(a) && trn_amp_scale(a) == 1.0f && trn_amp_inv_scale(a) == 1.0f,
       "bf16: no scaler, scale 1");
    int skipped = 0;
    for (int i = 0; i < 5; i++)
        skipped += trn_amp_update(a, i == 2);
    ok(skipped == 0 && trn_amp_scale(a) == 1.0f,
       "bf16: an Inf never skips the step (GradScaler disabled), scale stays 1");
    trn_amp_destroy(a);

    const struct {
        double init, growth, backoff;
        int interval;
    } bad[] = { { 0.0, 2.0, 0.5, 2000 },   { -1.0, 2.0, 0.5, 2000 },  { INFINITY, 2.0, 0.5, 2000 },
                { 1e39, 2.0, 0.5, 2000 },  { 65536, 1.0, 0.5, 2000 }, { 65536, 2.0, 1.0, 2000 },
                { 65536, 2.0, 0.0, 2000 }, { 65536, 2.0, 0.5, 0 } };
    int rejected = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        trn_amp_opts_default(&o);
        o.dtype = TRN_AMP_FP16;
        o.init_scale = bad[i].init, o.growth_factor = bad[i].growth;
        o.backoff_factor = bad[i].backoff, o.growth_interval = bad[i].interval;
        a = NULL;
        rejected += trn_amp_create(&o, &a) == -EINVAL && !a;
    }
    is_int(rejected, (int)(sizeof bad / sizeof bad[0]), "bad scaler options: -EINVAL");
    is_int(trn_amp_update(NULL, false), -EINVAL, "update NULL: -EINVAL");
}

static struct trn_amp *fp16_scaler(double init, int interval)
{
    struct trn_amp_opts o;
    trn_amp_opts_default(&o);
    o.dtype = TRN_AMP_FP16;
    o.init_scale = init;
    o.growth_interval = interval;
    struct trn_amp *a = NULL;
    if (trn_amp_create(&o, &a) < 0) {
        printf("Bail out! trn_amp_create\n");
        exit(99);
    }
    return a;
}

static void test_scaler(void)
{
    struct trn_amp *const a = fp16_scaler(65536.0, 2000);
    struct trn_amp_state st;
    ok(trn_amp_uses_scaler(a) && trn_amp_scale(a) == 65536.0f, "fp16: scale starts at 65536");
    ok(trn_amp_inv_scale(a) == 0x1p-16f, "inv_scale is 2^-16");
    int skipped = 0;
    for (int i = 0; i < 1999; i++)
        skipped += trn_amp_update(a, false);
    trn_amp_get_state(a, &st);
    ok(skipped == 0 && st.scale == 65536.0f && st.growth_tracker == 1999,
       "1999 clean steps: scale unchanged, tracker 1999");
    is_int(trn_amp_update(a, false), 0, "step 2000 runs");
    trn_amp_get_state(a, &st);
    ok(st.scale == 131072.0f && st.growth_tracker == 0, "2000th clean step: scale x2, tracker 0");
    for (int i = 0; i < 1000; i++)
        trn_amp_update(a, false);
    is_int(trn_amp_update(a, true), 1, "overflow: the step is skipped");
    trn_amp_get_state(a, &st);
    ok(st.scale == 65536.0f && st.growth_tracker == 0, "overflow: scale x0.5, tracker reset");
    for (int i = 0; i < 1999; i++)
        trn_amp_update(a, false);
    ok(trn_amp_scale(a) == 65536.0f, "growth needs 2000 clean steps after the backoff");
    trn_amp_update(a, false);
    ok(trn_amp_scale(a) == 131072.0f, "... and then grows");
    /* Consecutive overflows halve each time. */
    for (int i = 0; i < 5; i++)
        trn_amp_update(a, true);
    ok(trn_amp_scale(a) == 4096.0f, "5 overflows in a row: 131072 / 32 = 4096");

    /* No growth past float32's range: the scale stays, the tracker resets. */
    st.scale = 0x1p127f;
    st.growth_tracker = 1999;
    is_int(trn_amp_set_state(a, &st), 0, "set_state (2^127, 1999)");
    trn_amp_update(a, false);
    trn_amp_get_state(a, &st);
    ok(st.scale == 0x1p127f && st.growth_tracker == 0,
       "growth to Inf is refused: scale 2^127 kept, tracker 0");
    st.growth_tracker = 2000;
    is_int(trn_amp_set_state(a, &st), -EINVAL, "set_state tracker >= interval: -EINVAL");
    st.growth_tracker = 0, st.scale = NAN;
    is_int(trn_amp_set_state(a, &st), -EINVAL, "set_state NaN scale: -EINVAL");
    trn_amp_destroy(a);

    /* A non-power-of-two scale: the products round as float(float * double). */
    struct trn_amp *const b = fp16_scaler(3.0, 1);
    trn_amp_update(b, false);
    ok(trn_amp_scale(b) == 6.0f, "interval 1: every clean step grows (3 -> 6)");
    trn_amp_update(b, true);
    ok(trn_amp_scale(b) == 3.0f && trn_amp_inv_scale(b) == (float)(1.0 / 3.0),
       "inv_scale of 3 is float(1 / 3.0) (double reciprocal, rounded once)");
    trn_amp_destroy(b);
}

/*
 * fp16 training loop in miniature: the true gradients g (|g| up to 4, a few up to 40) are
 * multiplied by the scale and cast to fp16 (the backward's dtype), widened and unscaled by the
 * kern ops; the SGD step is skipped when the unscale finds an Inf. Starting at 65536, g * scale
 * overflows fp16 (65504) until the scale drops below 65504 / 40, so the loop must back off
 * to 1024 and then step with the exact unscaled gradients.
 */
static void test_fp16_loop(void)
{
    struct kern_ctx *ctx = NULL;
    if (kern_ctx_create(NULL, &ctx) < 0) {
        printf("Bail out! kern_ctx_create\n");
        exit(99);
    }
    enum { N = 300 };
    float g[N], scaled[N], wide[N], th[N], buf[N], th0[N];
    uint16_t half[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i * 37) % 101 - 50) / 12.5f; /* -4 .. 4 */
        th[i] = (float)i / N;
    }
    g[17] = 40.0f, g[200] = -39.5f;
    memcpy(th0, th, sizeof th);
    struct kern_optim_seg seg[2] = { { .offset = 0, .count = 150, .group = 0 },
                                     { .offset = 150, .count = 150, .group = 0 } };
    size_t total = 0;
    kern_optim_segs_prepare(seg, 2, N, 1, &total);
    struct trn_amp *const a = fp16_scaler(65536.0, 2000);
    int steps = 0, skipped = 0, exact = 1;
    for (int it = 0; it < 12; it++) {
        const float s = trn_amp_scale(a);
        for (int i = 0; i < N; i++)
            scaled[i] = g[i] * s;
        kern_ref_cast_f32_f16(ctx, half, scaled, N);
        kern_ref_cast_f16_f32(ctx, wide, half, N);
        int32_t found_inf = 0;
        kern_ref_amp_unscale(ctx, wide, seg, 2, total, trn_amp_inv_scale(a), &found_inf);
        struct kern_sgd d;
        memset(&d, 0, sizeof d);
        d.n_seg = 2, d.total = total, d.n_groups = 1, d.nesterov = 1, d.first = steps == 0;
        d.grad_scale = 1.0f;
        d.group[0].lr = 0.01f, d.group[0].momentum = 0.9f;
        memcpy(th0, th, sizeof th);
        kern_ref_sgd_step(ctx, &d, th, buf, NULL, wide, seg, NULL, &found_inf);
        const int skip = trn_amp_update(a, found_inf != 0);
        if (skip) {
            skipped++;
            exact &= memcmp(th, th0, sizeof th) == 0;
        } else {
            steps++;
            /* Scale a power of two and |g s| < 65504 with g on a 1/12.5 grid: exact? Only the
             * fp16 rounding of g s can differ; check |unscaled - g| within fp16's half ulp. */
            for (int i = 0; i < N; i++)
                exact &= fabsf(wide[i] - g[i]) <= fabsf(g[i]) * 0x1p-11f;
        }
    }
    is_int(skipped, 6, "65536 .. 2048 overflow fp16 for |g| = 40: 6 skipped steps");
    ok(trn_amp_scale(a) == 1024.0f, "the scale settles at 1024 (40 x 1024 < 65504)");
    is_int(steps, 6, "the other 6 steps ran");
    ok(exact, "skipped steps leave params untouched; taken steps see g within fp16 rounding");
    trn_amp_destroy(a);
    kern_ctx_destroy(ctx);
}

int main(void)
{
    test_policy();
    test_scaler();
    test_fp16_loop();
    return tap_done();
}
