/*
 * BN + SiLU + residual add fused (kern_ref_bn_silu_add_fwd_train / _eval / _apply) against the
 * unfused composition it replaces in the trainer: kern_ref_bn_silu_fwd_* into a dense buffer,
 * then kern_ref_add_fwd with the residual. Bit for bit (y, the saved statistics and the
 * running-stat updates), on YOLOv5 bottleneck shapes (planes from 4 to 6400 elements, so the
 * span loop's whole and partial spans are both taken), dense and with y and r channel slices
 * of wider tensors whose other channels are poisoned and must stay so; with one and three
 * threads; the argument checks; and finite differences for the backward the trainer uses
 * (kern_ref_bn_silu_bwd on the sum's gradient). Also the fused conv + BN + SiLU (+ r) of
 * inference against the conv followed by these ops. --seed N replays the random draws.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_testutil.h"
#include "tap.h"

enum { M_TRAIN, M_EVAL, M_APPLY };
static const char *const mode_name[] = { "train", "eval", "apply" };

static int bits_equal(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* A channel slice [off, off + c) of an (n, width, hw) buffer: *ns = width hw is its step. */
struct slice {
    float *buf;   /* the wide buffer, n * ns floats */
    size_t ns;    /* floats per image of buf */
    size_t off;   /* floats from an image's start to the slice */
    size_t plane; /* c hw: floats of the slice per image */
    int n;
};

static struct slice slice_new(int n, int c, int hw, int c_before, int c_after)
{
    struct slice s = { .n = n };
    s.plane = (size_t)c * (size_t)hw;
    s.off = (size_t)c_before * (size_t)hw;
    s.ns = s.off + s.plane + (size_t)c_after * (size_t)hw;
    s.buf = kt_alloc((size_t)n * s.ns);
    kt_poison(s.buf, (size_t)n * s.ns);
    return s;
}

/* Copies dense (n, c, hw) into the slice, or the slice out into dense. */
static void slice_put(struct slice *s, const float *dense)
{
    for (int i = 0; i < s->n; i++)
        memcpy(s->buf + (size_t)i * s->ns + s->off, dense + (size_t)i * s->plane,
               s->plane * sizeof(float));
}

static void slice_get(const struct slice *s, float *dense)
{
    for (int i = 0; i < s->n; i++)
        memcpy(dense + (size_t)i * s->plane, s->buf + (size_t)i * s->ns + s->off,
               s->plane * sizeof(float));
}

/* Every float of the wide buffer outside the slice is still the canary. */
static int slice_gaps_intact(const struct slice *s)
{
    for (int i = 0; i < s->n; i++)
        for (size_t k = 0; k < s->ns; k++)
            if ((k < s->off || k >= s->off + s->plane) &&
                !kt_is_canary(s->buf[(size_t)i * s->ns + k]))
                return 0;
    return 1;
}

/* Inputs of one case. */
struct inputs {
    struct kern_bn d;
    size_t cnt, cc;
    float *x, *r, *gamma, *beta, *rm, *rv;
    double *sums;
};

static void inputs_new(struct inputs *in, int n, int c, int hw)
{
    kern_bn_init(&in->d, n, c, hw);
    in->cnt = (size_t)n * (size_t)c * (size_t)hw;
    in->cc = (size_t)c;
    in->x = kt_alloc(in->cnt);
    in->r = kt_alloc(in->cnt);
    in->gamma = kt_alloc(in->cc);
    in->beta = kt_alloc(in->cc);
    in->rm = kt_alloc(in->cc);
    in->rv = kt_alloc(in->cc);
    /* conv outputs of a trained-ish layer: per-channel offsets, so the statistics matter */
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            const float mu = kt_uniform(-2.0f, 2.0f), sd = kt_uniform(0.2f, 3.0f);
            float *const p = in->x + ((size_t)i * c + ch) * (size_t)hw;
            for (int j = 0; j < hw; j++)
                p[j] = mu + sd * kt_uniform(-1.7f, 1.7f);
        }
    kt_fill(in->r, in->cnt, -4.0f, 4.0f); /* the bottleneck input, itself a SiLU output + ... */
    kt_fill(in->gamma, in->cc, 0.5f, 1.5f);
    kt_fill(in->beta, in->cc, -0.5f, 0.5f);
    kt_fill(in->rm, in->cc, -0.3f, 0.3f);
    kt_fill(in->rv, in->cc, 0.5f, 2.0f);
    in->sums = malloc(KERN_BN_SUMS_LEN(c) * sizeof(double));
    if (!in->sums) exit(99);
}

static void inputs_free(struct inputs *in)
{
    free(in->x), free(in->r), free(in->gamma), free(in->beta), free(in->rm), free(in->rv);
    free(in->sums);
}

/* Outputs of one run (y dense, the stats). */
struct outputs {
    float *y, *sm, *si, *rm, *rv;
};

static void outputs_new(struct outputs *o, const struct inputs *in)
{
    o->y = kt_alloc(in->cnt);
    o->sm = kt_alloc(in->cc), o->si = kt_alloc(in->cc);
    o->rm = kt_alloc(in->cc), o->rv = kt_alloc(in->cc);
    kt_poison(o->y, in->cnt);
    kt_poison(o->sm, in->cc), kt_poison(o->si, in->cc);
    memcpy(o->rm, in->rm, in->cc * sizeof(float));
    memcpy(o->rv, in->rv, in->cc * sizeof(float));
}

static void outputs_free(struct outputs *o)
{
    free(o->y), free(o->sm), free(o->si), free(o->rm), free(o->rv);
}

/* The unfused composition: BN+SiLU into y, then y = y + r. */
static int run_unfused(struct kern_ctx *ctx, int mode, const struct inputs *in, struct outputs *o)
{
    const struct kern_bn *d = &in->d;
    int rc;
    if (mode == M_TRAIN)
        rc = kern_ref_bn_silu_fwd_train(ctx, d, o->y, o->sm, o->si, o->rm, o->rv, in->x, in->gamma,
                                        in->beta);
    else if (mode == M_EVAL)
        rc = kern_ref_bn_silu_fwd_eval(ctx, d, o->y, in->x, in->gamma, in->beta, o->rm, o->rv);
    else
        rc = kern_ref_bn_silu_fwd_apply(ctx, d, o->y, o->sm, o->si, o->rm, o->rv, in->x, in->gamma,
                                        in->beta, in->sums);
    if (rc < 0) return rc;
    return kern_ref_add_fwd(ctx, o->y, o->y, in->r, in->cnt);
}

/* The fused op writing y_out (step d.y_nstride) from r_in (step d.r_nstride). */
static int run_fused(struct kern_ctx *ctx, int mode, const struct kern_bn *d,
                     const struct inputs *in, struct outputs *o, float *y_out, const float *r_in)
{
    if (mode == M_TRAIN)
        return kern_ref_bn_silu_add_fwd_train(ctx, d, y_out, o->sm, o->si, o->rm, o->rv, in->x,
                                              in->gamma, in->beta, r_in);
    if (mode == M_EVAL)
        return kern_ref_bn_silu_add_fwd_eval(ctx, d, y_out, in->x, in->gamma, in->beta, o->rm,
                                             o->rv, r_in);
    return kern_ref_bn_silu_add_fwd_apply(ctx, d, y_out, o->sm, o->si, o->rm, o->rv, in->x,
                                          in->gamma, in->beta, in->sums, r_in);
}

static int stats_equal(int mode, const struct inputs *in, const struct outputs *a,
                       const struct outputs *b)
{
    if (mode == M_EVAL)
        return bits_equal(a->rm, b->rm, in->cc) && bits_equal(a->rv, b->rv, in->cc) &&
               kt_is_canary(b->sm[0]) && kt_is_canary(b->si[0]);
    return bits_equal(a->sm, b->sm, in->cc) && bits_equal(a->si, b->si, in->cc) &&
           bits_equal(a->rm, b->rm, in->cc) && bits_equal(a->rv, b->rv, in->cc);
}

static void test_case(struct kern_ctx *ctx, struct kern_ctx *ctx3, int n, int c, int h, int w)
{
    const int hw = h * w;
    struct inputs in;
    inputs_new(&in, n, c, hw);
    if (kern_ref_bn_stats(ctx, &in.d, in.sums, in.x) < 0) exit(99);
    for (int mode = M_TRAIN; mode <= M_APPLY; mode++) {
        struct outputs want, got, got3, gs;
        outputs_new(&want, &in), outputs_new(&got, &in), outputs_new(&got3, &in);
        outputs_new(&gs, &in);
        const int rc0 = run_unfused(ctx, mode, &in, &want);
        /* dense, one thread and three */
        const int rc1 = run_fused(ctx, mode, &in.d, &in, &got, got.y, in.r);
        const int rc3 = run_fused(ctx3, mode, &in.d, &in, &got3, got3.y, in.r);
        ok(rc0 == 0 && rc1 == 0 && rc3 == 0 && bits_equal(want.y, got.y, in.cnt) &&
               stats_equal(mode, &in, &want, &got),
           "%s n %d c %d %dx%d dense: y and stats bit for bit the unfused BN+SiLU then add",
           mode_name[mode], n, c, h, w);
        ok(rc3 == 0 && bits_equal(want.y, got3.y, in.cnt) && stats_equal(mode, &in, &want, &got3),
           "%s n %d c %d %dx%d dense, 3 threads: the same bits", mode_name[mode], n, c, h, w);
        /* y a slice of a concat-like buffer, r a slice of another of a different width */
        struct slice ys = slice_new(n, c, hw, 3, 2), rs = slice_new(n, c, hw, 1, 4);
        slice_put(&rs, in.r);
        struct kern_bn ds = in.d;
        ds.y_nstride = ys.ns;
        ds.r_nstride = rs.ns;
        const int rc2 = run_fused(ctx3, mode, &ds, &in, &gs, ys.buf + ys.off, rs.buf + rs.off);
        float *const flat = kt_alloc(in.cnt);
        slice_get(&ys, flat);
        ok(rc2 == 0 && bits_equal(want.y, flat, in.cnt) && stats_equal(mode, &in, &want, &gs),
           "%s n %d c %d %dx%d, y and r channel slices (strides %zu, %zu): the same bits",
           mode_name[mode], n, c, h, w, ys.ns, rs.ns);
        ok(slice_gaps_intact(&ys), "%s: the channels of y's buffer outside the slice are untouched",
           mode_name[mode]);
        free(flat), free(ys.buf), free(rs.buf);
        outputs_free(&want), outputs_free(&got), outputs_free(&got3), outputs_free(&gs);
    }
    inputs_free(&in);
}

static void test_errors(struct kern_ctx *ctx)
{
    struct inputs in;
    inputs_new(&in, 2, 4, 9);
    struct outputs o;
    outputs_new(&o, &in);
    struct kern_bn d = in.d;
    d.r_nstride = in.cc * 9 - 1;
    is_int(run_fused(ctx, M_TRAIN, &d, &in, &o, o.y, in.r), -EINVAL, "r_nstride below c hw");
    d = in.d;
    d.y_nstride = 1;
    is_int(run_fused(ctx, M_EVAL, &d, &in, &o, o.y, in.r), -EINVAL, "y_nstride below c hw");
    is_int(run_fused(ctx, M_APPLY, &in.d, &in, &o, o.y, NULL), -EINVAL, "NULL r");
    is_int(kern_ref_bn_silu_add_fwd_apply(ctx, &in.d, o.y, NULL, NULL, NULL, NULL, in.x, in.gamma,
                                          in.beta, NULL, in.r),
           -EINVAL, "apply without sums");
    is_int(kern_ref_bn_silu_add_fwd_train(ctx, &in.d, o.y, NULL, NULL, o.rm, NULL, in.x, in.gamma,
                                          in.beta, in.r),
           -EINVAL, "running_mean without running_var");
    ok(kt_count_nonfinite(o.y, in.cnt) == in.cnt, "nothing written on an error");
    const struct kern_ops *K = kern_ops_ref();
    ok(K->bn_silu_add_fwd_train == kern_ref_bn_silu_add_fwd_train &&
           K->bn_silu_add_fwd_eval == kern_ref_bn_silu_add_fwd_eval &&
           K->bn_silu_add_fwd_apply == kern_ref_bn_silu_add_fwd_apply,
       "the ref table holds the three ops");
    outputs_free(&o);
    inputs_free(&in);
}

/* Backward: d(sum)/dx through kern_ref_bn_silu_bwd with dy = the sum's gradient, and
 * d(sum)/dr = that gradient itself, against finite differences of the fused forward. */
struct fd_state {
    struct kern_ctx *ctx;
    struct inputs *in;
    const float *wgt;
    float *y;
};

static double fd_loss(void *arg)
{
    struct fd_state *s = arg;
    struct inputs *in = s->in;
    if (kern_ref_bn_silu_add_fwd_train(s->ctx, &in->d, s->y, NULL, NULL, NULL, NULL, in->x,
                                       in->gamma, in->beta, in->r) < 0)
        exit(99);
    return kt_dot(s->y, s->wgt, in->cnt);
}

static void test_backward(struct kern_ctx *ctx)
{
    struct inputs in;
    inputs_new(&in, 2, 3, 10);
    float *const wgt = kt_alloc(in.cnt), *const y = kt_alloc(in.cnt), *const dx = kt_alloc(in.cnt);
    float *const sm = kt_alloc(in.cc), *const si = kt_alloc(in.cc);
    kt_fill(wgt, in.cnt, -1.0f, 1.0f);

    ok(kern_ref_bn_silu_add_fwd_train(ctx, &in.d, y, sm, si, NULL, NULL, in.x, in.gamma, in.beta,
                                      in.r) == 0 &&
           kern_ref_bn_silu_bwd(ctx, &in.d, dx, NULL, NULL, wgt, in.x, in.gamma, in.beta, sm, si,
                                0) == 0,
       "forward, then bn_silu_bwd on the sum's gradient");
    struct fd_state s = { ctx, &in, wgt, y };
    kt_check_fd("d(sum)/dx by bn_silu_bwd", in.x, in.cnt, dx, fd_loss, &s, 1e-2f, 2e-3, 2e-2, 1);
    kt_check_fd("d(sum)/dr is the sum's gradient", in.r, in.cnt, wgt, fd_loss, &s, 1e-2f, 2e-3,
                2e-2, 1);
    free(wgt), free(y), free(dx), free(sm), free(si);
    inputs_free(&in);
}

/*
 * The fused conv + BN + SiLU (+ r) of inference (kern_ref_conv2d_bn_silu_fwd_eval) against
 * kern_ref_conv2d_fwd into a buffer, then the eval BN+SiLU op (with r, the fused add): the same
 * bytes, y and r as channel slices of wider tensors, bands of output rows taken whole and
 * partial (shapes chosen so that several bands run), pointwise, strided and the k6 stem, one and
 * three threads (one image over three threads: its bands shared out); the scratch tmp is never
 * touched on the CPU.
 */
static void test_conv_bn(struct kern_ctx *ctx, int threads, int n, int c_in, int h, int w,
                         int c_out, int k, int stride, int pad, int residual)
{
    struct kern_conv2d cd;
    kern_conv2d_init(&cd, n, c_in, h, w, c_out, k, stride, pad);
    int oh = 0, ow = 0;
    kern_conv2d_out_hw(&cd, &oh, &ow);
    size_t ws = 0;
    if (kern_ref_conv2d_workspace_size(ctx, &cd, &ws) < 0 || kern_ctx_reserve(ctx, ws) < 0) {
        ok(0, "conv+bn workspace");
        return;
    }
    const size_t hw = (size_t)oh * (size_t)ow, cnt = (size_t)n * c_out * hw;
    const size_t xcnt = (size_t)n * c_in * (size_t)h * (size_t)w;
    const size_t wcnt = (size_t)c_out * c_in * (size_t)k * (size_t)k;
    float *x = kt_alloc(xcnt), *wt = kt_alloc(wcnt), *tmp = kt_alloc(cnt), *ref = kt_alloc(cnt);
    float *g = kt_alloc((size_t)c_out), *b = kt_alloc((size_t)c_out);
    float *rm = kt_alloc((size_t)c_out), *rv = kt_alloc((size_t)c_out);
    float *got = kt_alloc(cnt), *rd = kt_alloc(cnt);
    kt_fill(x, xcnt, -2.0f, 2.0f);
    kt_fill(wt, wcnt, -0.3f, 0.3f);
    kt_fill(g, (size_t)c_out, 0.5f, 1.5f);
    kt_fill(b, (size_t)c_out, -0.5f, 0.5f);
    kt_fill(rm, (size_t)c_out, -0.3f, 0.3f);
    kt_fill(rv, (size_t)c_out, 0.5f, 2.0f);
    kt_fill(rd, cnt, -4.0f, 4.0f);
    struct kern_bn d;
    kern_bn_init(&d, n, c_out, (int)hw);
    /* the reference: the two ops the trainer ran before, on dense tensors */
    int rc = kern_ref_conv2d_fwd(ctx, &cd, tmp, x, wt, NULL);
    if (rc == 0)
        rc = residual ? kern_ref_bn_silu_add_fwd_eval(ctx, &d, ref, tmp, g, b, rm, rv, rd)
                      : kern_ref_bn_silu_fwd_eval(ctx, &d, ref, tmp, g, b, rm, rv);
    /* the fused op, y and r as slices of wider tensors */
    struct slice ys = slice_new(n, c_out, (int)hw, 2, 1), rs = slice_new(n, c_out, (int)hw, 1, 3);
    slice_put(&rs, rd);
    d.y_nstride = ys.ns;
    d.r_nstride = residual ? rs.ns : 0;
    kt_poison(tmp, cnt);
    if (rc == 0)
        rc = kern_ref_conv2d_bn_silu_fwd_eval(ctx, &cd, &d, ys.buf + ys.off, tmp, x, wt, g, b, rm,
                                              rv, residual ? rs.buf + rs.off : NULL);
    slice_get(&ys, got);
    size_t untouched = 0;
    for (size_t i = 0; i < cnt; i++)
        untouched += kt_is_canary(tmp[i]);
    ok(rc == 0 && bits_equal(got, ref, cnt) && slice_gaps_intact(&ys) && untouched == cnt,
       "conv %dx%d s%d %d->%d on %dx%dx%d%s, %d thread(s): fused conv+BN+SiLU%s equals conv then "
       "BN+SiLU%s bit for bit, slice gaps and tmp untouched (rc %d)",
       k, k, stride, c_in, c_out, n, h, w, residual ? " (+r)" : "", threads, residual ? "+r" : "",
       residual ? "+r" : "", rc);
    free(ys.buf), free(rs.buf);
    free(x), free(wt), free(tmp), free(ref), free(g), free(b), free(rm), free(rv), free(got);
    free(rd);
}

static void test_conv_bn_errors(struct kern_ctx *ctx)
{
    struct kern_conv2d cd;
    kern_conv2d_init(&cd, 1, 4, 8, 8, 6, 3, 1, 1);
    size_t ws = 0;
    kern_ref_conv2d_workspace_size(ctx, &cd, &ws);
    kern_ctx_reserve(ctx, ws);
    float *buf = kt_alloc(4096);
    struct kern_bn d;
    kern_bn_init(&d, 1, 6, 64);
    is_int(kern_ref_conv2d_bn_silu_fwd_eval(ctx, &cd, &d, buf, NULL, buf + 512, buf + 1024,
                                            buf + 2048, buf + 2100, buf + 2200, buf + 2300, NULL),
           -EINVAL, "conv+bn: NULL tmp refused");
    kern_bn_init(&d, 1, 5, 64);
    is_int(kern_ref_conv2d_bn_silu_fwd_eval(ctx, &cd, &d, buf, buf + 3000, buf + 512, buf + 1024,
                                            buf + 2048, buf + 2100, buf + 2200, buf + 2300, NULL),
           -EINVAL, "conv+bn: BN channels other than the conv's refused");
    kern_bn_init(&d, 1, 6, 63);
    is_int(kern_ref_conv2d_bn_silu_fwd_eval(ctx, &cd, &d, buf, buf + 3000, buf + 512, buf + 1024,
                                            buf + 2048, buf + 2100, buf + 2200, buf + 2300, NULL),
           -EINVAL, "conv+bn: BN plane other than the conv's output refused");
    struct kern_ctx *bare = kt_ctx(0);
    kern_bn_init(&d, 1, 6, 64);
    is_int(kern_ref_conv2d_bn_silu_fwd_eval(bare, &cd, &d, buf, buf + 3000, buf + 512, buf + 1024,
                                            buf + 2048, buf + 2100, buf + 2200, buf + 2300, NULL),
           -KERN_EWORKSPACE, "conv+bn: no workspace refused");
    kern_ctx_destroy(bare);
    free(buf);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 20240611);
    struct kern_ctx *ctx = kt_ctx(0), *ctx3 = kt_ctx_threads(3);
    /* YOLOv5n bottleneck planes at --img 160..640 (c 16..128), plus odd and tiny ones */
    test_case(ctx, ctx3, 2, 16, 80, 80);
    test_case(ctx, ctx3, 3, 32, 40, 40);
    test_case(ctx, ctx3, 4, 64, 20, 20);
    test_case(ctx, ctx3, 2, 128, 10, 10);
    test_case(ctx, ctx3, 1, 24, 33, 31);
    test_case(ctx, ctx3, 5, 3, 2, 2);
    test_errors(ctx);
    test_backward(ctx);
    struct kern_ctx *const cx[2] = { ctx, ctx3 };
    for (int t = 0; t < 2; t++) {
        test_conv_bn(cx[t], t ? 3 : 1, 2, 16, 40, 40, 16, 3, 1, 1,
                     1); /* a bottleneck's cv2, one band */
        test_conv_bn(cx[t], t ? 3 : 1, 1, 16, 160, 160, 16, 1, 1, 0, 0); /* pointwise, 3 bands */
        test_conv_bn(cx[t], t ? 3 : 1, 2, 16, 160, 160, 32, 3, 2, 1,
                     0); /* k3 s2, 7 bands, the last short */
        test_conv_bn(cx[t], t ? 3 : 1, 1, 3, 320, 320, 16, 6, 2, 2, 0); /* the k6 s2 stem, banded */
        test_conv_bn(cx[t], t ? 3 : 1, 3, 16, 96, 96, 16, 3, 1, 1, 1);  /* +r across bands */
        test_conv_bn(cx[t], t ? 3 : 1, 3, 4, 6, 5, 3, 3, 1, 1, 1);      /* tiny: one band */
    }
    test_conv_bn_errors(ctx);
    kern_ctx_destroy(ctx3);
    kern_ctx_destroy(ctx);
    return tap_done();
}
