/*
 * BN + SiLU (+ residual) on bf16 activations, NCHW or NHWC (kern_bn.h "BN + SiLU (+ residual) on
 * 16-bit activations"), CPU reference:
 *   - NCHW and NHWC give the same bits (sums, y, saves, running stats, dgamma, dbeta, dx), with
 *     several chunks per channel and without;
 *   - against the float32 phases (kern_ref_bn_stats, _bn_silu_fwd_apply, _bn_silu_bwd_reduce,
 *     _bn_silu_bwd_apply) on the same (widened) numbers: y and dx within bf16's rounding, the
 *     statistics and parameter gradients close;
 *   - channel slices of wider tensors (NHWC pixel strides, NCHW image strides): the same bits as
 *     dense, nothing written outside the slice;
 *   - 1 and 2 threads give the same bits; the accumulate bits; two ranks' summed statistics
 *     agree with the whole batch's; bad descriptors refused.
 * The CUDA twins' bits are checked against these in test_cuda_parity_bnx.c.
 * Usage: test_kern_bnx [--seed N]
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_lowp_common.h"
#include "kern_testutil.h"
#include "tap.h"

static struct kern_ctx *g_ctx, *g_ctx1;

static uint16_t *bf16_rand(size_t n, float lo, float hi)
{
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) exit(99);
    for (size_t i = 0; i < n; i++)
        p[i] = kern_bf16_from_f32(kt_uniform(lo, hi));
    return p;
}

static uint16_t *bf16_fill(size_t n, uint16_t v)
{
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) exit(99);
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

/* The inputs of one case, dense NCHW. */
struct inputs {
    int n, c, hw;
    uint16_t *x, *dy, *r;
    float *gamma, *beta, *rm, *rv;
};

/* Every output of the four phases. */
struct outputs {
    double *fsums, *bsums;
    uint16_t *y, *dx;
    float *sm, *si, *rm, *rv, *dg, *db;
};

static void inputs_make(struct inputs *in, int n, int c, int hw)
{
    const size_t cnt = (size_t)n * c * hw;
    in->n = n, in->c = c, in->hw = hw;
    in->x = bf16_rand(cnt, -2.0f, 3.0f);
    in->dy = bf16_rand(cnt, -1.0f, 1.0f);
    in->r = bf16_rand(cnt, -1.0f, 1.0f);
    in->gamma = kt_alloc((size_t)c), in->beta = kt_alloc((size_t)c);
    in->rm = kt_alloc((size_t)c), in->rv = kt_alloc((size_t)c);
    kt_fill(in->gamma, (size_t)c, 0.5f, 1.5f);
    kt_fill(in->beta, (size_t)c, -0.5f, 0.5f);
    kt_fill(in->rm, (size_t)c, -0.1f, 0.1f);
    kt_fill(in->rv, (size_t)c, 0.5f, 1.5f);
}

static void inputs_free(struct inputs *in)
{
    free(in->x), free(in->dy), free(in->r), free(in->gamma), free(in->beta), free(in->rm);
    free(in->rv);
}

static void outputs_make(struct outputs *o, int c, size_t elems)
{
    o->fsums = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    o->bsums = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    o->y = bf16_fill(elems, 0x7fc1), o->dx = bf16_fill(elems, 0x7fc1);
    o->sm = kt_alloc((size_t)c), o->si = kt_alloc((size_t)c);
    o->rm = kt_alloc((size_t)c), o->rv = kt_alloc((size_t)c);
    o->dg = kt_alloc((size_t)c), o->db = kt_alloc((size_t)c);
    if (!o->fsums || !o->bsums) exit(99);
}

static void outputs_free(struct outputs *o)
{
    free(o->fsums), free(o->bsums), free(o->y), free(o->dx), free(o->sm), free(o->si);
    free(o->rm), free(o->rv), free(o->dg), free(o->db);
}

/* The four phases on tensors laid out as d says (x, dy, r, y, dx given in that layout). */
static int run_phases(struct kern_ctx *ctx, const struct kern_bnx *d, const uint16_t *x,
                      const uint16_t *dy, const uint16_t *r, const struct inputs *in,
                      struct outputs *o)
{
    memcpy(o->rm, in->rm, (size_t)d->c * sizeof(float));
    memcpy(o->rv, in->rv, (size_t)d->c * sizeof(float));
    int rc = kern_ref_bnx_stats(ctx, d, o->fsums, x);
    if (!rc)
        rc = kern_ref_bnx_silu_apply(ctx, d, o->y, o->sm, o->si, o->rm, o->rv, x, in->gamma,
                                     in->beta, o->fsums, r);
    if (!rc)
        rc = kern_ref_bnx_silu_bwd_reduce(ctx, d, o->bsums, o->dg, o->db, dy, x, in->gamma,
                                          in->beta, o->sm, o->si, 0);
    if (!rc)
        rc = kern_ref_bnx_silu_bwd_apply(ctx, d, o->dx, dy, x, in->gamma, in->beta, o->sm, o->si,
                                         o->bsums, 0);
    return rc;
}

/* NCHW (n, c, hw) -> NHWC (n, hw, c) with pixel stride ld, and back. */
static void to_nhwc(uint16_t *dst, const uint16_t *src, int n, int c, int hw, size_t ld)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++)
                dst[((size_t)i * hw + p) * ld + ch] = src[((size_t)i * c + ch) * hw + p];
}

static void from_nhwc(uint16_t *dst, const uint16_t *src, int n, int c, int hw, size_t ld)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++)
                dst[((size_t)i * c + ch) * hw + p] = src[((size_t)i * hw + p) * ld + ch];
}

static bool same(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

static int same_outputs(const struct outputs *a, const struct outputs *b, int c, size_t elems)
{
    const size_t fc = (size_t)c * sizeof(float), sc = KERN_BN_SUMS_LEN(c) * sizeof(double);
    return same(a->fsums, b->fsums, sc) && same(a->bsums, b->bsums, sc) &&
           same(a->y, b->y, elems * 2) && same(a->dx, b->dx, elems * 2) && same(a->sm, b->sm, fc) &&
           same(a->si, b->si, fc) && same(a->rm, b->rm, fc) && same(a->rv, b->rv, fc) &&
           same(a->dg, b->dg, fc) && same(a->db, b->db, fc);
}

/* NCHW, NHWC and NHWC slices with 1 or 2 threads: one set of bits. */
static void test_layouts(int n, int c, int hw, bool with_r)
{
    struct inputs in;
    inputs_make(&in, n, c, hw);
    const size_t elems = (size_t)n * c * hw;
    const uint16_t *r = with_r ? in.r : NULL;
    struct kern_bnx d;
    kern_bnx_init(&d, n, c, hw, KERN_LAYOUT_NCHW);
    struct outputs a, b, s, t;
    outputs_make(&a, c, elems);
    is_int(run_phases(g_ctx, &d, in.x, in.dy, r, &in, &a), 0, "n%d c%d hw%d%s: NCHW runs", n, c, hw,
           with_r ? " +r" : "");

    /* NHWC dense */
    uint16_t *xh = bf16_fill(elems, 0), *dyh = bf16_fill(elems, 0), *rh = bf16_fill(elems, 0);
    to_nhwc(xh, in.x, n, c, hw, (size_t)c), to_nhwc(dyh, in.dy, n, c, hw, (size_t)c);
    to_nhwc(rh, in.r, n, c, hw, (size_t)c);
    kern_bnx_init(&d, n, c, hw, KERN_LAYOUT_NHWC);
    outputs_make(&b, c, elems);
    int rc = run_phases(g_ctx, &d, xh, dyh, with_r ? rh : NULL, &in, &b);
    uint16_t *tmp = bf16_fill(elems, 0);
    from_nhwc(tmp, b.y, n, c, hw, (size_t)c), memcpy(b.y, tmp, elems * 2);
    from_nhwc(tmp, b.dx, n, c, hw, (size_t)c), memcpy(b.dx, tmp, elems * 2);
    ok(rc == 0 && same_outputs(&a, &b, c, elems),
       "n%d c%d hw%d: NHWC gives NCHW's bits (sums, y, saves, running, dgamma, dbeta, dx)", n, c,
       hw);

    /* NHWC channel slices: x and dx in a pixel stride of c + 3 at channel 1, y and dy c + 5 at
       channel 2, r c + 2 at 0; every other element keeps its poison */
    const size_t lx = (size_t)c + 3, ly = (size_t)c + 5, lr = (size_t)c + 2;
    const size_t np = (size_t)n * hw;
    uint16_t *xs = bf16_fill(np * lx, 0x7fc1), *dys = bf16_fill(np * ly, 0x7fc1);
    uint16_t *rs = bf16_fill(np * lr, 0x7fc1), *ys = bf16_fill(np * ly, 0x7fc1);
    uint16_t *dxs = bf16_fill(np * lx, 0x7fc1);
    to_nhwc(xs + 1, in.x, n, c, hw, lx), to_nhwc(dys + 2, in.dy, n, c, hw, ly);
    to_nhwc(rs, in.r, n, c, hw, lr);
    d.x_ld = lx, d.y_ld = ly, d.r_ld = lr;
    outputs_make(&s, c, elems);
    free(s.y), free(s.dx);
    s.y = ys + 2, s.dx = dxs + 1;
    rc = run_phases(g_ctx, &d, xs + 1, dys + 2, with_r ? rs : NULL, &in, &s);
    from_nhwc(tmp, ys + 2, n, c, hw, ly);
    uint16_t *tmp2 = bf16_fill(elems, 0);
    from_nhwc(tmp2, dxs + 1, n, c, hw, lx);
    s.y = tmp, s.dx = tmp2;
    size_t touched = 0;
    for (size_t p = 0; p < np; p++) {
        for (size_t k = 0; k < ly; k++)
            touched += (k < 2 || k >= 2 + (size_t)c) && ys[p * ly + k] != 0x7fc1;
        for (size_t k = 0; k < lx; k++)
            touched += (k < 1 || k >= 1 + (size_t)c) && dxs[p * lx + k] != 0x7fc1;
    }
    ok(rc == 0 && same_outputs(&a, &s, c, elems) && touched == 0,
       "n%d c%d hw%d: NHWC slices of wider tensors give the same bits, nothing outside written "
       "(%zu)",
       n, c, hw, touched);
    s.y = s.dx = NULL;

    /* one thread */
    kern_bnx_init(&d, n, c, hw, KERN_LAYOUT_NCHW);
    outputs_make(&t, c, elems);
    rc = run_phases(g_ctx1, &d, in.x, in.dy, r, &in, &t);
    ok(rc == 0 && same_outputs(&a, &t, c, elems), "n%d c%d hw%d: 1 and 2 threads, the same bits", n,
       c, hw);

    outputs_free(&a), outputs_free(&b), outputs_free(&s), outputs_free(&t);
    free(xh), free(dyh), free(rh), free(tmp), free(tmp2), free(xs), free(dys), free(rs), free(ys);
    free(dxs);
    inputs_free(&in);
}

static float *widen(const uint16_t *h, size_t n)
{
    float *f = kt_alloc(n);
    for (size_t i = 0; i < n; i++)
        f[i] = kern_bf16_to_f32(h[i]);
    return f;
}

/* Against the float32 phases on the widened numbers. */
static void test_vs_f32(int n, int c, int hw)
{
    struct inputs in;
    inputs_make(&in, n, c, hw);
    const size_t elems = (size_t)n * c * hw;
    struct kern_bnx d;
    kern_bnx_init(&d, n, c, hw, KERN_LAYOUT_NHWC);
    uint16_t *xh = bf16_fill(elems, 0), *dyh = bf16_fill(elems, 0), *rh = bf16_fill(elems, 0);
    to_nhwc(xh, in.x, n, c, hw, (size_t)c), to_nhwc(dyh, in.dy, n, c, hw, (size_t)c);
    to_nhwc(rh, in.r, n, c, hw, (size_t)c);
    struct outputs o;
    outputs_make(&o, c, elems);
    int rc = run_phases(g_ctx, &d, xh, dyh, rh, &in, &o);
    uint16_t *tmp = bf16_fill(elems, 0);
    from_nhwc(tmp, o.y, n, c, hw, (size_t)c);
    float *y = widen(tmp, elems);
    from_nhwc(tmp, o.dx, n, c, hw, (size_t)c);
    float *dx = widen(tmp, elems);

    struct kern_bn b;
    kern_bn_init(&b, n, c, hw);
    float *xf = widen(in.x, elems), *dyf = widen(in.dy, elems), *rf = widen(in.r, elems);
    float *y32 = kt_alloc(elems), *dx32 = kt_alloc(elems);
    float *sm = kt_alloc((size_t)c), *si = kt_alloc((size_t)c), *rm = kt_alloc((size_t)c);
    float *rv = kt_alloc((size_t)c), *dg = kt_alloc((size_t)c), *db = kt_alloc((size_t)c);
    double *fs = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    double *bs = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    memcpy(rm, in.rm, (size_t)c * 4), memcpy(rv, in.rv, (size_t)c * 4);
    if (!rc) rc = kern_ref_bn_stats(g_ctx, &b, fs, xf);
    if (!rc)
        rc = kern_ref_bn_silu_fwd_apply(g_ctx, &b, y32, sm, si, rm, rv, xf, in.gamma, in.beta, fs);
    if (!rc)
        rc = kern_ref_bn_silu_bwd_reduce(g_ctx, &b, bs, dg, db, dyf, xf, in.gamma, in.beta, sm, si,
                                         0);
    if (!rc)
        rc = kern_ref_bn_silu_bwd_apply(g_ctx, &b, dx32, dyf, xf, in.gamma, in.beta, sm, si, bs, 0);
    is_int(rc, 0, "n%d c%d hw%d: bf16 NHWC and float32 NCHW phases run", n, c, hw);
    for (size_t i = 0; i < elems; i++)
        y32[i] += rf[i];
    char w[96];
    /* one bf16 rounding of a value the float path computes to ~1e-6 */
    snprintf(w, sizeof w, "n%d c%d hw%d: y (+r) against float32, bf16's rounding", n, c, hw);
    kt_check_close_f(w, y, y32, elems, 1e-3, 1.0 / 256);
    snprintf(w, sizeof w, "n%d c%d hw%d: dx against float32", n, c, hw);
    kt_check_close_f(w, dx, dx32, elems, 2e-3, 1.0 / 128);
    snprintf(w, sizeof w, "n%d c%d hw%d: save_mean, save_invstd", n, c, hw);
    kt_check_close_f(w, o.sm, sm, (size_t)c, 1e-6, 1e-5);
    kt_check_close_f(w, o.si, si, (size_t)c, 1e-6, 1e-5);
    snprintf(w, sizeof w, "n%d c%d hw%d: running mean and var", n, c, hw);
    kt_check_close_f(w, o.rm, rm, (size_t)c, 1e-6, 1e-5);
    kt_check_close_f(w, o.rv, rv, (size_t)c, 1e-6, 1e-5);
    snprintf(w, sizeof w, "n%d c%d hw%d: dgamma, dbeta", n, c, hw);
    kt_check_close_f(w, o.dg, dg, (size_t)c, 1e-4, 1e-4);
    kt_check_close_f(w, o.db, db, (size_t)c, 1e-4, 1e-4);
    free(xh), free(dyh), free(rh), free(tmp), free(y), free(dx), free(xf), free(dyf), free(rf);
    free(y32), free(dx32), free(sm), free(si), free(rm), free(rv), free(dg), free(db), free(fs);
    free(bs);
    outputs_free(&o);
    inputs_free(&in);
}

/* dx and the parameter gradients accumulate; two ranks' summed statistics. */
static void test_accum_ranks(void)
{
    const int n = 4, c = 6, hw = 300;
    struct inputs in;
    inputs_make(&in, n, c, hw);
    const size_t elems = (size_t)n * c * hw;
    struct kern_bnx d;
    kern_bnx_init(&d, n, c, hw, KERN_LAYOUT_NHWC);
    struct outputs o;
    outputs_make(&o, c, elems);
    int rc = run_phases(g_ctx, &d, in.x, in.dy, NULL, &in, &o);
    uint16_t *acc = bf16_rand(elems, -0.5f, 0.5f), *old = malloc(elems * 2);
    float *dg = kt_alloc((size_t)c), *db = kt_alloc((size_t)c);
    double *bs = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    memcpy(old, acc, elems * 2);
    kt_fill(dg, (size_t)c, -1, 1), kt_fill(db, (size_t)c, -1, 1);
    float *dg0 = kt_alloc((size_t)c), *db0 = kt_alloc((size_t)c);
    memcpy(dg0, dg, (size_t)c * 4), memcpy(db0, db, (size_t)c * 4);
    if (!rc)
        rc = kern_ref_bnx_silu_bwd_reduce(g_ctx, &d, bs, dg, db, in.dy, in.x, in.gamma, in.beta,
                                          o.sm, o.si, KERN_ACCUM_DPARAM);
    if (!rc)
        rc = kern_ref_bnx_silu_bwd_apply(g_ctx, &d, acc, in.dy, in.x, in.gamma, in.beta, o.sm, o.si,
                                         bs, KERN_ACCUM_DX);
    size_t pbad = 0, xbad = 0;
    for (int ch = 0; ch < c; ch++)
        pbad += dg[ch] != dg0[ch] + o.dg[ch] || db[ch] != db0[ch] + o.db[ch];
    for (size_t i = 0; i < elems; i++) {
        /* old + dx rounded once, against old + the rounded dx: two bf16 roundings apart */
        const float a = kern_bf16_to_f32(old[i]), b = kern_bf16_to_f32(o.dx[i]);
        xbad += fabsf(kern_bf16_to_f32(acc[i]) - (a + b)) > (fabsf(a) + fabsf(b)) / 128 + 1e-6f;
    }
    ok(rc == 0 && pbad == 0 && xbad == 0,
       "KERN_ACCUM_DPARAM adds the sums to dgamma, dbeta (%zu off); KERN_ACCUM_DX adds dx, "
       "rounded once (%zu off)",
       pbad, xbad);

    /* two ranks of two images each: their sums added equal the whole batch's */
    struct kern_bnx h = d;
    h.n = n / 2;
    const size_t half = elems / 2;
    double *s0 = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    double *s1 = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    if (!rc) rc = kern_ref_bnx_stats(g_ctx, &h, s0, in.x);
    if (!rc) rc = kern_ref_bnx_stats(g_ctx, &h, s1, in.x + half);
    double worst = 0;
    for (size_t k = 0; k < KERN_BN_SUMS_LEN(c); k++)
        worst = fmax(worst, fabs(s0[k] + s1[k] - o.fsums[k]) / (fabs(o.fsums[k]) + 1e-9));
    /* other chunks (each rank's pixels), so float sums of another grouping: close, not equal */
    ok(rc == 0 && worst < 1e-5, "two ranks' statistics add up to the whole batch's (rel %.3g)",
       worst);
    free(acc), free(old), free(dg), free(db), free(bs), free(dg0), free(db0), free(s0), free(s1);
    outputs_free(&o);
    inputs_free(&in);
}

static void test_errors(void)
{
    struct kern_bnx d;
    kern_bnx_init(&d, 2, 4, 9, KERN_LAYOUT_NHWC);
    uint16_t x[72] = { 0 };
    double sums[9];
    struct kern_bnx b = d;
    b.layout = 2;
    is_int(kern_ref_bnx_stats(g_ctx, &b, sums, x), -EINVAL, "an unknown layout refused");
    b = d, b.dtype = KERN_DT_F32;
    is_int(kern_ref_bnx_stats(g_ctx, &b, sums, x), -EINVAL, "a float32 descriptor refused");
    b = d, b.x_ld = 3;
    is_int(kern_ref_bnx_stats(g_ctx, &b, sums, x), -EINVAL, "NHWC pixel stride below c refused");
    b = d, b.layout = KERN_LAYOUT_NCHW, b.y_ld = 35;
    is_int(kern_ref_bnx_stats(g_ctx, &b, sums, x), -EINVAL, "NCHW image stride below c hw refused");
    b = d, b.hw = 0;
    is_int(kern_ref_bnx_stats(g_ctx, &b, sums, x), -EINVAL, "an empty shape refused");
    is_int(kern_ref_bnx_stats(g_ctx, &d, NULL, x), -EINVAL, "NULL sums refused");
    float g[4] = { 1, 1, 1, 1 }, m[4] = { 0 };
    uint16_t y[72];
    is_int(kern_ref_bnx_silu_apply(g_ctx, &d, y, NULL, NULL, m, NULL, x, g, g, sums, NULL), -EINVAL,
           "a running mean without a running var refused");
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 41);
    g_ctx = kt_ctx_threads(2);
    g_ctx1 = kt_ctx_threads(1);
    test_layouts(2, 5, 63, true);
    test_layouts(3, 17, 16, false);
    test_layouts(1, 33, 143, true);
    test_layouts(4, 3, 2304, true); /* 9,216 pixels a channel: 9 chunks */
    test_vs_f32(2, 8, 400);
    test_vs_f32(3, 5, 1600);
    test_accum_ranks();
    test_errors();
    kern_ctx_destroy(g_ctx);
    kern_ctx_destroy(g_ctx1);
    return tap_done();
}
