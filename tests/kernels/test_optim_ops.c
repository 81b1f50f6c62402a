/*
 * The optimizer ops of the CPU reference (kern.h "Optimizer step, ..."), against plain scalar
 * restatements of PyTorch: torch.optim.SGD's single-tensor step (dampening 0, nesterov or not),
 * utils.ModelEMA.update, clip_grad_norm_'s factor, GradScaler's unscale-and-check, and .to() for
 * bf16 / fp16. The restatements below are compiled with the tests' flags (C11: no FMA
 * contraction), so the comparisons are bit for bit. Random segment tables leave padding poisoned
 * with NaN canaries, which must survive untouched. --seed N replays the draws.
 */
#include <errno.h>
#include <float.h>
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

static struct kern_ctx *g_ctx;

#ifdef __FLT16_MAX__
/* The compiler's IEEE binary16 (GCC >= 12, clang on x86-64): an independent fp16 rounding. */
__extension__ typedef _Float16 test_f16;
#endif

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Number of elements whose bits differ. */
static size_t count_bit_diffs(const float *a, const float *b, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += bits_of(a[i]) != bits_of(b[i]);
    return bad;
}

/* 1 where element i belongs to some segment. */
static unsigned char *cover_mask(const struct kern_optim_seg *seg, size_t n_seg, size_t len)
{
    unsigned char *const m = calloc(len, 1);
    if (!m) exit(99);
    for (size_t s = 0; s < n_seg; s++)
        memset(m + seg[s].offset, 1, seg[s].count);
    return m;
}

/* Random values inside the segments, canaries in the padding. */
static void fill_masked(float *p, const unsigned char *mask, size_t len, float lo, float hi)
{
    for (size_t i = 0; i < len; i++)
        p[i] = mask[i] ? kt_uniform(lo, hi) : kt_canary();
}

static size_t padding_touched(const float *p, const unsigned char *mask, size_t len)
{
    size_t bad = 0;
    for (size_t i = 0; i < len; i++)
        bad += !mask[i] && !kt_is_canary(p[i]);
    return bad;
}

/* ---- PyTorch restatements (scalar, per element) ---- */

/* torch.optim.SGD._single_tensor_sgd for one element; d_p is the (clipped, unscaled) grad. */
static void torch_sgd(float *param, float *buf, int *has_buf, float d_p, float lr, float mom,
                      float wd, int nesterov)
{
    if (wd != 0.0f) d_p = d_p + wd * *param; /* d_p.add(param, alpha=wd) */
    if (!*has_buf) {
        *buf = d_p; /* torch.clone(d_p).detach() */
        *has_buf = 1;
    } else {
        *buf = *buf * mom + d_p; /* buf.mul_(momentum).add_(d_p, alpha=1 - dampening) */
    }
    d_p = nesterov ? d_p + mom * *buf : *buf;
    *param = *param + (-lr) * d_p; /* param.add_(d_p, alpha=-lr) */
}

/* ModelEMA.update: v *= d; v += (1 - d) * msd[k], d and 1 - d python floats. */
static float torch_ema(float v, float x, double d)
{
    v = v * (float)d;
    const float w = (float)(1.0 - d) * x;
    return v + w;
}

/* clip_grad_norm_'s clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, in float32. */
static float torch_clip_coef(double total_norm, float max_norm)
{
    const float c = max_norm / ((float)total_norm + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

/* ---- segment tables ---- */

static void test_segs(void)
{
    struct kern_optim_seg seg[4];
    size_t total = 0;
    memset(seg, 0, sizeof seg);
    seg[0] = (struct kern_optim_seg){ .offset = 10, .count = 5, .group = 1 };
    seg[1] = (struct kern_optim_seg){ .offset = 0, .count = 8, .group = 0 };
    seg[2] = (struct kern_optim_seg){ .offset = 16, .count = 4, .group = 2 };
    is_int(kern_optim_segs_prepare(seg, 3, 20, 3, &total), 0, "prepare a valid table");
    is_int((long long)total, 17, "total is the sum of the counts");
    ok(seg[0].start == 0 && seg[1].start == 5 && seg[2].start == 13,
       "starts are running sums in table order");
    seg[2].offset = 17;
    is_int(kern_optim_segs_prepare(seg, 3, 20, 3, &total), -EINVAL, "segment past the end");
    seg[2].offset = 16;
    seg[1].count = 11;
    is_int(kern_optim_segs_prepare(seg, 3, 20, 3, &total), -EINVAL, "overlapping segments");
    seg[1].count = 8;
    seg[2].group = 3;
    is_int(kern_optim_segs_prepare(seg, 3, 20, 3, &total), -EINVAL, "group out of range");
    seg[2].group = 2;
    seg[0].count = 0;
    is_int(kern_optim_segs_prepare(seg, 3, 20, 3, &total), -EINVAL, "empty segment");
    seg[0].count = 5;
    is_int(kern_optim_segs_prepare(seg, 0, 20, 3, &total), -EINVAL, "no segments");
    is_int(kern_optim_segs_prepare(seg, 3, 20, KERN_OPTIM_MAX_GROUPS + 1, &total), -EINVAL,
           "too many groups");
    is_int(kern_optim_segs_prepare(seg, 3, 20, 3, NULL), -EINVAL, "NULL total");
}

/* ---- SGD + EMA over random tables, several steps, against torch_sgd / torch_ema ---- */

static void test_sgd(int nesterov, int with_ema, int steps)
{
    const size_t len = (size_t)kt_randint(200, 20000), cap = 400;
    const int n_groups = kt_randint(1, KERN_OPTIM_MAX_GROUPS);
    struct kern_optim_seg *const seg = calloc(cap, sizeof *seg);
    if (!seg) exit(99);
    const size_t n_seg = kt_random_segs(seg, cap, len, 40, 300, 300, n_groups);
    size_t total = 0;
    const int rc = kern_optim_segs_prepare(seg, n_seg, len, n_groups, &total);
    if (rc < 0 || n_seg == 0) {
        ok(0, "random table (%zu segments): %s", n_seg, kern_strerror(rc));
        free(seg);
        return;
    }
    unsigned char *const mask = cover_mask(seg, n_seg, len);
    float *const th = kt_alloc(len), *const buf = kt_alloc(len), *const ema = kt_alloc(len);
    float *const gr = kt_alloc(len), *const r_th = kt_alloc(len), *const r_buf = kt_alloc(len);
    float *const r_ema = kt_alloc(len);
    int *const has_buf = calloc(len, sizeof(int));
    if (!has_buf) exit(99);
    /* Group of each element, for the restatement. */
    int *const grp = calloc(len, sizeof(int));
    if (!grp) exit(99);
    for (size_t s = 0; s < n_seg; s++)
        for (size_t i = 0; i < seg[s].count; i++)
            grp[seg[s].offset + i] = seg[s].group;
    fill_masked(th, mask, len, -1.0f, 1.0f);
    fill_masked(ema, mask, len, -1.0f, 1.0f);
    kt_poison(buf, len); /* the first step must not read the buffers */
    memcpy(r_th, th, len * sizeof(float));
    memcpy(r_ema, ema, len * sizeof(float));
    memcpy(r_buf, buf, len * sizeof(float));
    tap_diag("sgd: len %zu, %zu segments, %zu elements, %d groups, nesterov %d, ema %d", len, n_seg,
             total, n_groups, nesterov, with_ema);

    size_t bad = 0, bad_buf = 0, bad_ema = 0;
    int rcs = 0;
    for (int k = 0; k < steps; k++) {
        fill_masked(gr, mask, len, -3.0f, 3.0f);
        struct kern_sgd d;
        memset(&d, 0, sizeof d);
        d.n_seg = n_seg;
        d.total = total;
        d.n_groups = n_groups;
        d.nesterov = nesterov;
        d.first = k == 0;
        d.grad_scale = 1.0f;
        const double ed = 0.9999 * (1.0 - exp(-(double)(k + 1) / 2000.0));
        d.ema_decay = (float)ed;
        d.ema_weight = (float)(1.0 - ed);
        for (int g = 0; g < n_groups; g++) {
            d.group[g].lr = kt_uniform(0.0f, 0.1f);
            d.group[g].momentum = kt_uniform(0.6f, 0.95f);
            d.group[g].weight_decay = g == 1 ? kt_uniform(1e-4f, 1e-2f) : 0.0f;
        }
        rcs |= kern_ref_sgd_step(g_ctx, &d, th, buf, with_ema ? ema : NULL, gr, seg, NULL, NULL);
        for (size_t i = 0; i < len; i++) {
            if (!mask[i]) continue;
            const struct kern_sgd_group *const G = &d.group[grp[i]];
            torch_sgd(&r_th[i], &r_buf[i], &has_buf[i], gr[i], G->lr, G->momentum, G->weight_decay,
                      nesterov);
            if (with_ema) r_ema[i] = torch_ema(r_ema[i], r_th[i], ed);
        }
    }
    bad = count_bit_diffs(th, r_th, len);
    bad_buf = count_bit_diffs(buf, r_buf, len);
    bad_ema = count_bit_diffs(ema, r_ema, len);
    is_int(rcs, 0, "sgd_step returns 0 on every step");
    ok(bad == 0, "%d steps: params bitwise equal to torch SGD (%zu differ)", steps, bad);
    ok(bad_buf == 0, "momentum buffers bitwise equal (%zu differ)", bad_buf);
    ok(bad_ema == 0, "EMA %s (%zu differ)", with_ema ? "bitwise equal to ModelEMA" : "untouched",
       bad_ema);
    ok(padding_touched(th, mask, len) + padding_touched(buf, mask, len) +
               padding_touched(ema, mask, len) ==
           0,
       "padding never touched (canaries intact)");
    free(seg), free(mask), free(th), free(buf), free(ema), free(gr), free(r_th), free(r_buf);
    free(r_ema), free(has_buf), free(grp);
}

/* ---- norm, clip factor, grad_scale, found_inf ---- */

static void test_norm_clip(void)
{
    const size_t len = (size_t)kt_randint(5000, 60000), cap = 600;
    struct kern_optim_seg *const seg = calloc(cap, sizeof *seg);
    if (!seg) exit(99);
    const size_t n_seg = kt_random_segs(seg, cap, len, 30, 500, 500, 3);
    size_t total = 0;
    if (kern_optim_segs_prepare(seg, n_seg, len, 3, &total) < 0 || n_seg == 0) exit(99);
    unsigned char *const mask = cover_mask(seg, n_seg, len);
    float *const gr = kt_alloc(len);
    fill_masked(gr, mask, len, -2.0f, 2.0f);
    tap_diag("norm: len %zu, %zu segments, %zu elements", len, n_seg, total);

    /* The squared norm against a long double sum in memory order (another order). */
    double ss = -1.0;
    is_int(kern_ref_optim_sumsq(g_ctx, &ss, gr, seg, n_seg, total), 0, "optim_sumsq returns 0");
    long double want = 0.0L;
    for (size_t i = 0; i < len; i++)
        if (mask[i]) want += (long double)gr[i] * (long double)gr[i];
    const double rel = fabs((double)((long double)ss - want)) / (double)want;
    /* A double sum of n positive terms in any order is within n * 2^-53 (relative) of the
     * exact one: the bound, not a typical error (1e-13 was seen to fail once in ~50 draws with
     * 52,305 terms: 1.01e-13); a float accumulation would be off by ~1e-7. */
    const double tol = (double)total * 0x1p-53;
    ok(rel <= tol, "sumsq vs long double sum: rel err %.3g <= n * 2^-53 = %.3g", rel, tol);
    const double norm = sqrt(ss);

    /* Clipping through the step: with momentum 0, lr 1, wd 0, first step, theta 0, the step
     * writes theta = -g mult and buf = g mult, so buf shows the multiplier each element got. */
    float *const th = kt_alloc(len), *const buf = kt_alloc(len);
    const float max_norms[3] = { (float)(norm * 0.25), (float)(norm * 4.0), 0.0f };
    const float scales[2] = { 1.0f, 0x1p-10f };
    for (int sc = 0; sc < 2; sc++) {
        /* gs: the gradients as stored (scaled by 1 / grad_scale, exact: a power of two). */
        float *const gs = kt_alloc(len);
        for (size_t i = 0; i < len; i++)
            gs[i] = mask[i] ? gr[i] / scales[sc] : gr[i];
        double ss_s = 0.0;
        kern_ref_optim_sumsq(g_ctx, &ss_s, gs, seg, n_seg, total);
        for (int k = 0; k < 3; k++) {
            struct kern_sgd d;
            memset(&d, 0, sizeof d);
            d.n_seg = n_seg, d.total = total, d.n_groups = 3, d.nesterov = 1, d.first = 1;
            d.grad_scale = scales[sc];
            d.max_norm = max_norms[k];
            for (int g = 0; g < 3; g++)
                d.group[g].lr = 1.0f;
            fill_masked(th, mask, len, 0.0f, 0.0f);
            kt_poison(buf, len);
            is_int(kern_ref_sgd_step(g_ctx, &d, th, buf, NULL, gs, seg, &ss_s, NULL), 0,
                   "sgd_step with clipping returns 0");
            /* PyTorch: unscale_ (g * inv_scale), then clip_grad_norm_ on the unscaled grads. */
            const float coef = k == 2 ? 1.0f : torch_clip_coef(norm, max_norms[k]);
            size_t bad = 0;
            for (size_t i = 0; i < len; i++) {
                if (!mask[i]) continue;
                float g = gs[i] * scales[sc];
                if (coef < 1.0f) g = g * coef;
                bad += bits_of(buf[i]) != bits_of(g);
            }
            ok(bad == 0 && padding_touched(buf, mask, len) == 0,
               "grad_scale 2^%d, max_norm %s: every gradient times %.6g as unscale_ + "
               "clip_grad_norm_ (%zu differ)",
               (int)log2(scales[sc]),
               k == 0   ? "norm/4"
               : k == 1 ? "4 norm"
                        : "0 (off)",
               (double)coef, bad);
        }
        free(gs);
    }

    /* found_inf set: params and buffers untouched, the EMA still moves toward theta. */
    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = n_seg, d.total = total, d.n_groups = 3, d.nesterov = 1, d.grad_scale = 1.0f;
    d.ema_decay = 0.5f, d.ema_weight = 0.5f;
    for (int g = 0; g < 3; g++)
        d.group[g].lr = 0.1f, d.group[g].momentum = 0.9f;
    float *const ema = kt_alloc(len), *const th0 = kt_alloc(len), *const buf0 = kt_alloc(len);
    fill_masked(th, mask, len, -1.0f, 1.0f);
    fill_masked(buf, mask, len, -1.0f, 1.0f);
    fill_masked(ema, mask, len, -1.0f, 1.0f);
    memcpy(th0, th, len * sizeof(float));
    memcpy(buf0, buf, len * sizeof(float));
    float *const ema_want = kt_alloc(len);
    for (size_t i = 0; i < len; i++)
        ema_want[i] = mask[i] ? torch_ema(ema[i], th[i], 0.5) : ema[i];
    const int32_t inf_flag = 1;
    is_int(kern_ref_sgd_step(g_ctx, &d, th, buf, ema, gr, seg, NULL, &inf_flag), 0,
           "sgd_step with found_inf returns 0");
    ok(count_bit_diffs(th, th0, len) == 0 && count_bit_diffs(buf, buf0, len) == 0,
       "found_inf: params and momentum untouched (the skipped step)");
    ok(count_bit_diffs(ema, ema_want, len) == 0, "found_inf: EMA updated with theta unchanged");
    /* skip_nonfinite: a non-finite sum of squares is the overflow check. */
    memcpy(ema_want, ema, len * sizeof(float));
    for (size_t i = 0; i < len; i++)
        if (mask[i]) ema_want[i] = torch_ema(ema[i], th[i], 0.5);
    const double inf_ss = INFINITY, fin_ss = 1.0;
    d.skip_nonfinite = 1;
    kern_ref_sgd_step(g_ctx, &d, th, buf, ema, gr, seg, &inf_ss, NULL);
    ok(count_bit_diffs(th, th0, len) == 0 && count_bit_diffs(ema, ema_want, len) == 0,
       "skip_nonfinite with sumsq Inf: step skipped, EMA updated");
    kern_ref_sgd_step(g_ctx, &d, th, buf, NULL, gr, seg, &fin_ss, NULL);
    ok(count_bit_diffs(th, th0, len) > 0, "skip_nonfinite with a finite sumsq: the step runs");
    memcpy(th, th0, len * sizeof(float));
    memcpy(buf, buf0, len * sizeof(float));
    d.skip_nonfinite = 0;
    const int32_t no_flag = 0;
    kern_ref_sgd_step(g_ctx, &d, th, buf, NULL, gr, seg, NULL, &no_flag);
    ok(count_bit_diffs(th, th0, len) > 0, "found_inf 0: the step runs");

    /* Bad descriptors: nothing written. */
    memcpy(th0, th, len * sizeof(float));
    d.total = total + 1;
    is_int(kern_ref_sgd_step(g_ctx, &d, th, buf, NULL, gr, seg, NULL, NULL), -EINVAL,
           "total that does not match the table: -EINVAL");
    d.total = total;
    d.group[0].lr = NAN;
    is_int(kern_ref_sgd_step(g_ctx, &d, th, buf, NULL, gr, seg, NULL, NULL), -EINVAL,
           "NaN lr: -EINVAL");
    d.group[0].lr = 0.1f;
    is_int(kern_ref_sgd_step(g_ctx, &d, th, NULL, NULL, gr, seg, NULL, NULL), -EINVAL,
           "NULL momentum: -EINVAL");
    ok(count_bit_diffs(th, th0, len) == 0, "failed calls wrote nothing");
    free(seg), free(mask), free(gr), free(th), free(buf), free(ema), free(th0), free(buf0);
    free(ema_want);
}

/* ---- plain EMA and unscale ---- */

/* ---- per-step scalars in memory (kern_sgd.dyn) on the skipped-step paths ---- */

static void test_sgd_dyn_skip(void)
{
    enum { LEN = 2000 };
    struct kern_optim_seg seg[2] = { { .offset = 5, .count = 900, .group = 0 },
                                     { .offset = 1000, .count = 990, .group = 1 } };
    size_t total = 0;
    if (kern_optim_segs_prepare(seg, 2, LEN, 2, &total) < 0) exit(99);
    static float th[LEN], th0[LEN], buf[LEN], buf0[LEN], ema[LEN], r_ema[LEN], gr[LEN];
    kt_fill(th, LEN, -1.0f, 1.0f);
    kt_fill(buf, LEN, -1.0f, 1.0f);
    kt_fill(ema, LEN, -1.0f, 1.0f);
    kt_fill(gr, LEN, -1.0f, 1.0f);
    memcpy(th0, th, sizeof th);
    memcpy(buf0, buf, sizeof buf);
    memcpy(r_ema, ema, sizeof ema);
    const double ed = kt_uniform(0.5f, 0.999f);
    struct kern_sgd_dyn dyn;
    memset(&dyn, 0, sizeof dyn);
    dyn.group[0].lr = dyn.group[1].lr = 0.01f;
    dyn.group[0].momentum = dyn.group[1].momentum = 0.9f;
    dyn.grad_scale = 1.0f;
    dyn.ema_decay = (float)ed;
    dyn.ema_weight = (float)(1.0 - ed);
    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = 2, d.total = total, d.n_groups = 2, d.nesterov = 1, d.skip_nonfinite = 1;
    d.ema_decay = d.ema_weight = NAN; /* ignored with dyn */
    d.dyn = &dyn;
    const int32_t found = 1;
    const double nan_ss = NAN;
    int rc = kern_ref_sgd_step(g_ctx, &d, th, buf, ema, gr, seg, NULL, &found);
    rc |= kern_ref_sgd_step(g_ctx, &d, th, buf, ema, gr, seg, &nan_ss, NULL);
    for (int k = 0; k < 2; k++)
        for (size_t s = 0; s < 2; s++)
            for (size_t i = seg[s].offset; i < seg[s].offset + seg[s].count; i++)
                r_ema[i] = torch_ema(r_ema[i], th0[i], ed);
    is_int(rc, 0, "dyn, found_inf and non-finite sumsq steps return 0");
    ok(count_bit_diffs(th, th0, LEN) + count_bit_diffs(buf, buf0, LEN) == 0,
       "skipped steps with dyn leave params and momentum alone");
    const size_t bad = count_bit_diffs(ema, r_ema, LEN);
    ok(bad == 0, "their EMA uses dyn's decay, bitwise (%zu differ)", bad);
}

static void test_ema_unscale(void)
{
    const size_t n = (size_t)kt_randint(1, 30000);
    float *const v = kt_alloc(n), *const x = kt_alloc(n), *const want = kt_alloc(n);
    kt_fill(v, n, -2.0f, 2.0f);
    kt_fill(x, n, -2.0f, 2.0f);
    const double d = 0.9999 * (1.0 - exp(-(double)kt_randint(1, 10000) / 2000.0));
    for (size_t i = 0; i < n; i++)
        want[i] = torch_ema(v[i], x[i], d);
    is_int(kern_ref_ema_update(g_ctx, v, x, n, (float)d, (float)(1.0 - d)), 0, "ema_update");
    ok(count_bit_diffs(v, want, n) == 0, "ema_update: %zu values bitwise equal to ModelEMA", n);
    is_int(kern_ref_ema_update(g_ctx, NULL, x, n, 0.5f, 0.5f), -EINVAL, "ema_update NULL");

    /* Unscale: finite -> flag untouched; an Inf or NaN inside a segment -> 1; a NaN in the
     * padding is ignored (never read). */
    const size_t len = 4000;
    struct kern_optim_seg seg[64];
    memset(seg, 0, sizeof seg);
    const size_t n_seg = kt_random_segs(seg, 64, len, 20, 100, 100, 1);
    size_t total = 0;
    if (kern_optim_segs_prepare(seg, n_seg, len, 1, &total) < 0 || n_seg == 0) exit(99);
    unsigned char *const mask = cover_mask(seg, n_seg, len);
    float *const g = kt_alloc(len), *const g0 = kt_alloc(len);
    fill_masked(g, mask, len, -1000.0f, 1000.0f);
    memcpy(g0, g, len * sizeof(float));
    int32_t flag = 0;
    const float inv = 1.0f / 65536.0f;
    is_int(kern_ref_amp_unscale(g_ctx, g, seg, n_seg, total, inv, &flag), 0, "amp_unscale");
    size_t bad = 0;
    for (size_t i = 0; i < len; i++)
        bad += mask[i] ? bits_of(g[i]) != bits_of(g0[i] * inv) : !kt_is_canary(g[i]);
    ok(bad == 0, "amp_unscale: grads * 1/65536 exactly, padding untouched");
    is_int(flag, 0, "amp_unscale: finite gradients (NaN padding ignored) leave the flag 0");
    const size_t at = seg[n_seg / 2].offset + seg[n_seg / 2].count - 1;
    g[at] = INFINITY;
    is_int(kern_ref_amp_unscale(g_ctx, g, seg, n_seg, total, inv, &flag), 0, "amp_unscale Inf");
    is_int(flag, 1, "amp_unscale: an Inf sets the flag");
    g[at] = NAN;
    flag = 7;
    kern_ref_amp_unscale(g_ctx, g, seg, n_seg, total, 1.0f, &flag);
    is_int(flag, 1, "amp_unscale: a NaN sets the flag to 1");
    g[at] = 1.0f;
    flag = 1;
    kern_ref_amp_unscale(g_ctx, g, seg, n_seg, total, 1.0f, &flag);
    is_int(flag, 1, "amp_unscale never clears the flag");
    free(v), free(x), free(want), free(mask), free(g), free(g0);
}

/* ---- casts ---- */

static uint16_t to_bf16(float f)
{
    uint16_t h = 0;
    kern_ref_cast_f32_bf16(g_ctx, &h, &f, 1);
    return h;
}

static uint16_t to_f16(float f)
{
    uint16_t h = 0;
    kern_ref_cast_f32_f16(g_ctx, &h, &f, 1);
    return h;
}

/* Independent bf16 rounding: the nearest of the two bf16 neighbours by double arithmetic,
 * ties to the even mantissa. Finite inputs only. */
static uint16_t bf16_by_double(float f)
{
    const uint32_t u = bits_of(f);
    const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    const double x = fabs((double)f);
    const double a = fabs((double)float_of((uint32_t)lo << 16));
    /* hi may be the Inf pattern: its value as the next binade step. */
    const double b =
        (hi & 0x7fffu) == 0x7f80u ? ldexp(1.0, 128) : fabs((double)float_of((uint32_t)hi << 16));
    if (x - a < b - x) return lo;
    if (x - a > b - x) return hi;
    return (lo & 1u) ? hi : lo;
}

static void test_casts(void)
{
    struct {
        float f;
        uint16_t bf, h;
    } const known[] = {
        { 1.0f, 0x3f80, 0x3c00 },         { -2.0f, 0xc000, 0xc000 },
        { 0.0f, 0x0000, 0x0000 },         { -0.0f, 0x8000, 0x8000 },
        { 1.0f / 3.0f, 0x3eab, 0x3555 },  { 65504.0f, 0x4780, 0x7bff }, /* largest fp16 */
        { 65519.99f, 0x4780, 0x7bff },                                  /* just below the tie */
        { 65520.0f, 0x4780, 0x7c00 },                                   /* tie -> even -> Inf */
        { 1e6f, 0x4974, 0x7c00 },                                       /* fp16 overflow */
        { 0x1p-14f, 0x3880, 0x0400 },                                   /* smallest fp16 normal */
        { 0x1p-24f, 0x3380, 0x0001 },     /* smallest fp16 subnormal */
        { 0x1p-25f, 0x3300, 0x0000 },     /* tie -> even 0 */
        { 0x1.8p-25f, 0x3340, 0x0001 },   /* above the tie */
        { 0x1.8p-24f, 0x33c0, 0x0002 },   /* 1.5 units: tie -> even 2 */
        { 0x1.ffcp-15f, 0x3880, 0x0400 }, /* subnormal rounding up into the normals */
        { 1.00390625f, 0x3f80, 0x3c04 },  /* 1 + 2^-8: bf16 tie -> even (down) */
        { 1.01171875f, 0x3f82, 0x3c0c },  /* 1 + 3 2^-8: bf16 tie -> even (up) */
        { FLT_MAX, 0x7f80, 0x7c00 },      /* bf16 overflow by rounding */
        { 0x1.fep127f, 0x7f7f, 0x7c00 },  /* largest bf16 */
        { INFINITY, 0x7f80, 0x7c00 },     { -INFINITY, 0xff80, 0xfc00 },
        { NAN, 0x7fc0, 0x7e00 },          { -NAN, 0x7fc0, 0xfe00 },
        { 0x1p-149f, 0x0000, 0x0000 }, /* float32 subnormal */
        { 0x1p-133f, 0x0001, 0x0000 }, /* smallest bf16 subnormal */
    };
    size_t bad_bf = 0, bad_h = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        const uint16_t b = to_bf16(known[k].f), h = to_f16(known[k].f);
        if (b != known[k].bf) {
            printf("#   bf16(%a) = 0x%04x, want 0x%04x\n", (double)known[k].f, b, known[k].bf);
            bad_bf++;
        }
        if (h != known[k].h) {
            printf("#   fp16(%a) = 0x%04x, want 0x%04x\n", (double)known[k].f, h, known[k].h);
            bad_h++;
        }
    }
    ok(bad_bf == 0, "f32 -> bf16: %zu known patterns (ties, overflow, NaN, subnormals)",
       sizeof known / sizeof known[0]);
    ok(bad_h == 0, "f32 -> fp16: %zu known patterns (ties, overflow, NaN, subnormals)",
       sizeof known / sizeof known[0]);

    /* Widening: every 16-bit pattern; narrowing it back gives the same bits (NaN canonical). */
    uint16_t *const all = malloc(65536 * sizeof(uint16_t)), *const back = malloc(65536 * 2);
    float *const wide = kt_alloc(65536);
    if (!all || !back) exit(99);
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    size_t bad = 0;
    kern_ref_cast_bf16_f32(g_ctx, wide, all, 65536);
    kern_ref_cast_f32_bf16(g_ctx, back, wide, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        bad += bits_of(wide[i]) != i << 16;
        bad += isnan(wide[i]) ? back[i] != 0x7fc0 : back[i] != i;
    }
    ok(bad == 0, "bf16 -> f32 exact (bits << 16) and back, all 65536 patterns");
    bad = 0;
    kern_ref_cast_f16_f32(g_ctx, wide, all, 65536);
    kern_ref_cast_f32_f16(g_ctx, back, wide, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        const uint32_t e = (i >> 10) & 31u, m = i & 1023u;
        double want = e == 0    ? ldexp((double)m, -24)
                      : e == 31 ? (m ? NAN : INFINITY)
                                : ldexp(1024.0 + m, (int)e - 25);
        if (i & 0x8000u) want = -want;
        bad += isnan(want) ? !isnan(wide[i]) : (double)wide[i] != want;
        bad += isnan(want) ? back[i] != ((i & 0x8000u) | 0x7e00u) : back[i] != i;
    }
    ok(bad == 0, "fp16 -> f32 exact (by the IEEE formula) and back, all 65536 patterns");

    /* Random float32 across the whole range, and the midpoints between neighbours. */
    size_t bad_b = 0, bad_f = 0, n_f = 0;
    for (int k = 0; k < 400000; k++) {
        const uint32_t u = (uint32_t)kt_next();
        float f = float_of(u);
        if ((k & 3) == 1) /* exactly halfway between two bf16 values */
            f = float_of((u & 0xffff0000u) | 0x8000u);
        if ((k & 3) == 3) /* halfway between two fp16 values (normal range) */
            f = float_of((bits_of(wide[kt_randint(0, 65535)]) & ~0x1fffu) | 0x1000u);
        if (isnan(f)) continue;
        bad_b += to_bf16(f) != bf16_by_double(f);
#ifdef __FLT16_MAX__
        /* The compiler's _Float16 conversion (round to nearest even) is the reference. */
        const test_f16 hf = (test_f16)f;
        uint16_t hb;
        memcpy(&hb, &hf, sizeof hb);
        bad_f += to_f16(f) != hb;
        n_f++;
#endif
    }
    ok(bad_b == 0, "f32 -> bf16 on 400000 random floats and ties = nearest by double (%zu bad)",
       bad_b);
#ifdef __FLT16_MAX__
    ok(bad_f == 0, "f32 -> fp16 on %zu random floats and ties = the compiler's _Float16 (%zu bad)",
       n_f, bad_f);
#else
    (void)bad_f, (void)n_f;
    tap_diag("no _Float16 in this compiler: fp16 covered by the known patterns and round trips");
#endif
    is_int(kern_ref_cast_f32_f16(g_ctx, NULL, wide, 3), -EINVAL, "cast NULL: -EINVAL");
    is_int(kern_ref_cast_f32_f16(g_ctx, NULL, NULL, 0), 0, "cast of 0 elements: 0");
    free(all), free(back), free(wide);
}

static void test_table(void)
{
    const struct kern_ops *const K = kern_ops_ref();
    ok(K->sgd_step == kern_ref_sgd_step && K->optim_sumsq == kern_ref_optim_sumsq &&
           K->ema_update == kern_ref_ema_update && K->amp_unscale == kern_ref_amp_unscale &&
           K->cast_f32_bf16 == kern_ref_cast_f32_bf16 &&
           K->cast_bf16_f32 == kern_ref_cast_bf16_f32 && K->cast_f32_f16 == kern_ref_cast_f32_f16 &&
           K->cast_f16_f32 == kern_ref_cast_f16_f32,
       "kern_ops_ref() carries the optim ops");
}

int main(int argc, char **argv)
{
    int have_seed = 0;
    for (int i = 1; i < argc; i++)
        have_seed |= !strcmp(argv[i], "--seed");
    kt_seed_from_args(argc, argv,
                      have_seed ? 0 : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid());
    g_ctx = kt_ctx(0);
    test_table();
    test_segs();
    test_sgd(1, 1, 1);
    test_sgd(1, 1, 5);
    test_sgd(0, 0, 4);
    test_sgd(1, 0, 3);
    test_norm_clip();
    test_ema_unscale();
    test_sgd_dyn_skip();
    test_casts();
    kern_ctx_destroy(g_ctx);
    return tap_done();
}
