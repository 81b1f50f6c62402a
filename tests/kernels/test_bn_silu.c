/*
 * Batch norm, SiLU and fused BN+SiLU CPU references (kern_ref_bn_*, kern_ref_silu_*,
 * kern_ref_bn_silu_*).
 *
 * Forward against a hand computation in double (batch mean, biased variance, eps 1e-3; running
 * stats with momentum 0.03 and the unbiased variance; eval with running stats); backward against
 * the closed form in double and against central differences; fused against the composition of
 * the separate ops; overwrite and accumulate modes with NaN canaries; the error paths.
 *
 * Tolerances: forward vs double 1e-5 + 1e-5 |ref|; backward vs double closed form 1e-5 + 1e-4;
 * fused vs composed 1e-5 + 1e-5 (same float math up to ordering); finite differences with
 * h = 1e-2 (x of magnitude <= 3): 1e-3 + 1e-2 |g| (truncation O(h^2) plus fp32 rounding of the
 * double-summed loss, about 1e-6 / h).
 */
#include <errno.h>

#include "kern_testutil.h"

struct bn_case {
    struct kern_bn d;
    size_t nx;
    float *x, *gamma, *beta, *rm, *rv;
};

static void case_init(struct bn_case *t, int n, int c, int hw)
{
    kern_bn_init(&t->d, n, c, hw);
    t->nx = (size_t)n * c * hw;
    t->x = kt_alloc(t->nx);
    t->gamma = kt_alloc((size_t)c);
    t->beta = kt_alloc((size_t)c);
    t->rm = kt_alloc((size_t)c);
    t->rv = kt_alloc((size_t)c);
    /* Per-channel offsets and scales, like real activations. */
    for (int ch = 0; ch < c; ch++) {
        const float off = kt_uniform(-1, 1), sc = kt_uniform(0.3f, 2.0f);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++)
                t->x[((size_t)i * c + ch) * hw + j] = off + sc * kt_uniform(-1, 1);
        t->gamma[ch] = kt_uniform(0.5f, 1.5f);
        t->beta[ch] = kt_uniform(-0.5f, 0.5f);
        t->rm[ch] = kt_uniform(-0.2f, 0.2f);
        t->rv[ch] = kt_uniform(0.5f, 1.5f);
    }
}

static void case_free(struct bn_case *t)
{
    free(t->x), free(t->gamma), free(t->beta), free(t->rm), free(t->rv);
}

/* Hand computation in double: y, mean, var (biased) per channel. */
static void hand_bn(const struct bn_case *t, double *y, double *mean, double *var)
{
    const struct kern_bn *d = &t->d;
    for (int c = 0; c < d->c; c++) {
        double s = 0, q = 0;
        const double cnt = (double)d->n * d->hw;
        for (int i = 0; i < d->n; i++)
            for (int j = 0; j < d->hw; j++)
                s += t->x[((size_t)i * d->c + c) * d->hw + j];
        mean[c] = s / cnt;
        for (int i = 0; i < d->n; i++)
            for (int j = 0; j < d->hw; j++) {
                const double e = t->x[((size_t)i * d->c + c) * d->hw + j] - mean[c];
                q += e * e;
            }
        var[c] = q / cnt;
        for (int i = 0; i < d->n; i++)
            for (int j = 0; j < d->hw; j++) {
                const size_t k = ((size_t)i * d->c + c) * d->hw + j;
                y[k] = (t->x[k] - mean[c]) / sqrt(var[c] + 1e-3) * t->gamma[c] + t->beta[c];
            }
    }
}

static double silu_d(double v)
{
    return v / (1.0 + exp(-v));
}

static double silu_grad_d(double v)
{
    const double s = 1.0 / (1.0 + exp(-v));
    return s * (1.0 + v * (1.0 - s));
}

static void check_forward(int n, int c, int hw)
{
    struct bn_case t;
    struct kern_ctx *const ctx = kt_ctx(0);
    case_init(&t, n, c, hw);
    const size_t nc = (size_t)c;
    double *const ry = malloc(t.nx * sizeof(double)), *const mean = malloc(nc * 8);
    double *const var = malloc(nc * 8), *const rrm = malloc(nc * 8), *const rrv = malloc(nc * 8);
    float *const y = kt_alloc(t.nx), *const sm = kt_alloc(nc), *const si = kt_alloc(nc);
    float *const y2 = kt_alloc(t.nx);
    hand_bn(&t, ry, mean, var);
    const double cnt = (double)n * hw;
    for (size_t k = 0; k < nc; k++) {
        rrm[k] = 0.97 * t.rm[k] + 0.03 * mean[k];
        rrv[k] = 0.97 * t.rv[k] + 0.03 * var[k] * cnt / (cnt - 1);
    }
    float *const rm0 = kt_alloc(nc), *const rv0 = kt_alloc(nc);
    memcpy(rm0, t.rm, nc * 4);
    memcpy(rv0, t.rv, nc * 4);
    kt_poison(y, t.nx);
    kt_poison(sm, nc);
    kt_poison(si, nc);
    char what[160];
    is_int(kern_ref_bn_fwd_train(ctx, &t.d, y, sm, si, t.rm, t.rv, t.x, t.gamma, t.beta), 0,
           "bn fwd_train %dx%dx%d runs", n, c, hw);
    snprintf(what, sizeof(what), "bn fwd_train %dx%dx%d y vs hand", n, c, hw);
    kt_check_close(what, y, ry, t.nx, 1e-5, 1e-5);
    snprintf(what, sizeof(what), "bn fwd_train save_mean vs hand");
    kt_check_close(what, sm, mean, nc, 1e-6, 1e-6);
    for (size_t k = 0; k < nc; k++)
        var[k] = 1.0 / sqrt(var[k] + 1e-3);
    kt_check_close("bn fwd_train save_invstd vs hand", si, var, nc, 1e-6, 1e-6);
    kt_check_close("bn running_mean after momentum 0.03", t.rm, rrm, nc, 1e-7, 1e-6);
    kt_check_close("bn running_var (unbiased) after momentum 0.03", t.rv, rrv, nc, 1e-7, 1e-6);

    /* Eval uses the running stats it is given. */
    for (int ch = 0; ch < c; ch++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                const size_t k = ((size_t)i * c + ch) * hw + j;
                ry[k] = (t.x[k] - (double)rm0[ch]) / sqrt((double)rv0[ch] + 1e-3) * t.gamma[ch] +
                        t.beta[ch];
            }
    kt_poison(y, t.nx);
    is_int(kern_ref_bn_fwd_eval(ctx, &t.d, y, t.x, t.gamma, t.beta, rm0, rv0), 0,
           "bn fwd_eval runs");
    kt_check_close("bn fwd_eval vs hand (running stats)", y, ry, t.nx, 1e-5, 1e-5);
    for (size_t k = 0; k < t.nx; k++)
        ry[k] = silu_d(ry[k]);
    kt_poison(y2, t.nx);
    kern_ref_bn_silu_fwd_eval(ctx, &t.d, y2, t.x, t.gamma, t.beta, rm0, rv0);
    kt_check_close("bn_silu fwd_eval vs silu(hand)", y2, ry, t.nx, 1e-5, 1e-5);

    /* Fused training forward = silu(bn) with identical stats and running updates. */
    float *const rm1 = kt_alloc(nc), *const rv1 = kt_alloc(nc);
    memcpy(rm1, rm0, nc * 4);
    memcpy(rv1, rv0, nc * 4);
    float *const sm2 = kt_alloc(nc), *const si2 = kt_alloc(nc);
    kern_ref_bn_fwd_train(ctx, &t.d, y, NULL, NULL, NULL, NULL, t.x, t.gamma, t.beta);
    kern_ref_silu_fwd(ctx, y, y, t.nx); /* in place */
    kt_poison(y2, t.nx);
    is_int(kern_ref_bn_silu_fwd_train(ctx, &t.d, y2, sm2, si2, rm1, rv1, t.x, t.gamma, t.beta), 0,
           "bn_silu fwd_train runs");
    kt_check_close_f("bn_silu fwd_train vs bn then silu (in place)", y2, y, t.nx, 1e-6, 1e-5);
    ok(!memcmp(sm2, sm, nc * 4) && !memcmp(si2, si, nc * 4) && !memcmp(rm1, t.rm, nc * 4) &&
           !memcmp(rv1, t.rv, nc * 4),
       "bn_silu saves and running stats bit-equal to bn's");

    free(ry), free(mean), free(var), free(rrm), free(rrv), free(y), free(sm), free(si), free(y2);
    free(rm0), free(rv0), free(rm1), free(rv1), free(sm2), free(si2);
    case_free(&t);
    kern_ctx_destroy(ctx);
}

/* ---- backward ---- */

struct fd_state {
    struct kern_ctx *ctx;
    struct bn_case *t;
    float *y, *r;
    int silu;
};

static double fd_loss(void *p)
{
    struct fd_state *const s = p;
    if (s->silu)
        kern_ref_bn_silu_fwd_train(s->ctx, &s->t->d, s->y, NULL, NULL, NULL, NULL, s->t->x,
                                   s->t->gamma, s->t->beta);
    else
        kern_ref_bn_fwd_train(s->ctx, &s->t->d, s->y, NULL, NULL, NULL, NULL, s->t->x, s->t->gamma,
                              s->t->beta);
    return kt_dot(s->r, s->y, s->t->nx);
}

static void check_backward(int silu)
{
    struct bn_case t;
    struct kern_ctx *const ctx = kt_ctx(0);
    const int n = 3, c = 4, hw = 5;
    const char *const nm = silu ? "bn_silu" : "bn";
    case_init(&t, n, c, hw);
    const size_t nc = (size_t)c;
    float *const y = kt_alloc(t.nx), *const r = kt_alloc(t.nx), *const dx = kt_alloc(t.nx);
    float *const dg = kt_alloc(nc), *const dbt = kt_alloc(nc), *const sm = kt_alloc(nc);
    float *const si = kt_alloc(nc), *const dx0 = kt_alloc(t.nx), *const dg0 = kt_alloc(nc);
    float *const db0 = kt_alloc(nc);
    kt_fill(r, t.nx, -1, 1);
    if (silu)
        kern_ref_bn_silu_fwd_train(ctx, &t.d, y, sm, si, NULL, NULL, t.x, t.gamma, t.beta);
    else
        kern_ref_bn_fwd_train(ctx, &t.d, y, sm, si, NULL, NULL, t.x, t.gamma, t.beta);
    kt_poison(dx, t.nx);
    kt_poison(dg, nc);
    kt_poison(dbt, nc);
    int rc = silu ? kern_ref_bn_silu_bwd(ctx, &t.d, dx, dg, dbt, r, t.x, t.gamma, t.beta, sm, si, 0)
                  : kern_ref_bn_bwd(ctx, &t.d, dx, dg, dbt, r, t.x, t.gamma, sm, si, 0);
    is_int(rc, 0, "%s bwd runs", nm);
    ok(kt_count_nonfinite(dx, t.nx) == 0 && kt_count_nonfinite(dg, nc) == 0 &&
           kt_count_nonfinite(dbt, nc) == 0,
       "%s bwd overwrote every canary", nm);

    /* Closed form in double. */
    double *const rdx = malloc(t.nx * 8), *const rdg = malloc(nc * 8), *const rdb = malloc(nc * 8);
    double *const mean = malloc(nc * 8), *const var = malloc(nc * 8), *const yz = malloc(t.nx * 8);
    hand_bn(&t, yz, mean, var);
    const double cnt = (double)n * hw;
    for (int ch = 0; ch < c; ch++) {
        const double is = 1.0 / sqrt(var[ch] + 1e-3);
        double sdz = 0, sdzx = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                const size_t k = ((size_t)i * c + ch) * hw + j;
                const double dz = silu ? r[k] * silu_grad_d(yz[k]) : r[k];
                sdz += dz;
                sdzx += dz * (t.x[k] - mean[ch]) * is;
            }
        rdg[ch] = sdzx;
        rdb[ch] = sdz;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                const size_t k = ((size_t)i * c + ch) * hw + j;
                const double dz = silu ? r[k] * silu_grad_d(yz[k]) : r[k];
                const double xh = (t.x[k] - mean[ch]) * is;
                rdx[k] = t.gamma[ch] * is * (dz - sdz / cnt - xh * sdzx / cnt);
            }
    }
    char what[120];
    snprintf(what, sizeof(what), "%s bwd dx vs closed form", nm);
    kt_check_close(what, dx, rdx, t.nx, 1e-5, 1e-4);
    snprintf(what, sizeof(what), "%s bwd dgamma vs closed form", nm);
    kt_check_close(what, dg, rdg, nc, 1e-5, 1e-4);
    snprintf(what, sizeof(what), "%s bwd dbeta vs closed form", nm);
    kt_check_close(what, dbt, rdb, nc, 1e-5, 1e-4);

    struct fd_state s = { ctx, &t, y, r, silu };
    snprintf(what, sizeof(what), "%s dx", nm);
    kt_check_fd(what, t.x, t.nx, dx, fd_loss, &s, 1e-2f, 1e-3, 1e-2, 1);
    snprintf(what, sizeof(what), "%s dgamma", nm);
    kt_check_fd(what, t.gamma, nc, dg, fd_loss, &s, 1e-2f, 1e-3, 1e-2, 1);
    snprintf(what, sizeof(what), "%s dbeta", nm);
    kt_check_fd(what, t.beta, nc, dbt, fd_loss, &s, 1e-2f, 1e-3, 1e-2, 1);

    /* Accumulate both kinds, and dx alone with NULL dgamma/dbeta (frozen BN). */
    kt_fill(dx0, t.nx, -1, 1);
    kt_fill(dg0, nc, -1, 1);
    kt_fill(db0, nc, -1, 1);
    memcpy(dx, dx0, t.nx * 4);
    memcpy(dg, dg0, nc * 4);
    memcpy(dbt, db0, nc * 4);
    const unsigned both = KERN_ACCUM_DX | KERN_ACCUM_DPARAM;
    rc = silu ? kern_ref_bn_silu_bwd(ctx, &t.d, dx, dg, dbt, r, t.x, t.gamma, t.beta, sm, si, both)
              : kern_ref_bn_bwd(ctx, &t.d, dx, dg, dbt, r, t.x, t.gamma, sm, si, both);
    for (size_t k = 0; k < t.nx; k++)
        rdx[k] += dx0[k];
    for (size_t k = 0; k < nc; k++)
        rdg[k] += dg0[k], rdb[k] += db0[k];
    snprintf(what, sizeof(what), "%s bwd dx (+=)", nm);
    kt_check_close(what, dx, rdx, t.nx, 1e-5, 1e-4);
    snprintf(what, sizeof(what), "%s bwd dgamma (+=)", nm);
    kt_check_close(what, dg, rdg, nc, 1e-5, 1e-4);
    snprintf(what, sizeof(what), "%s bwd dbeta (+=)", nm);
    kt_check_close(what, dbt, rdb, nc, 1e-5, 1e-4);
    memcpy(dx, dx0, t.nx * 4);
    rc = silu ? kern_ref_bn_silu_bwd(ctx, &t.d, dx, NULL, NULL, r, t.x, t.gamma, t.beta, sm, si,
                                     KERN_ACCUM_DX)
              : kern_ref_bn_bwd(ctx, &t.d, dx, NULL, NULL, r, t.x, t.gamma, sm, si, KERN_ACCUM_DX);
    is_int(rc, 0, "%s bwd with NULL dgamma/dbeta", nm);
    snprintf(what, sizeof(what), "%s bwd dx (+=) without param grads", nm);
    kt_check_close(what, dx, rdx, t.nx, 1e-5, 1e-4);

    free(y), free(r), free(dx), free(dg), free(dbt), free(sm), free(si), free(dx0), free(dg0);
    free(db0), free(rdx), free(rdg), free(rdb), free(mean), free(var), free(yz);
    case_free(&t);
    kern_ctx_destroy(ctx);
}

struct silu_state {
    struct kern_ctx *ctx;
    float *x, *y, *r;
    size_t n;
};

static double silu_loss(void *p)
{
    struct silu_state *const s = p;
    kern_ref_silu_fwd(s->ctx, s->y, s->x, s->n);
    return kt_dot(s->r, s->y, s->n);
}

static void check_silu(void)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const size_t n = 257;
    float *const x = kt_alloc(n), *const y = kt_alloc(n), *const r = kt_alloc(n);
    float *const dx = kt_alloc(n), *const dx0 = kt_alloc(n);
    double *const ry = malloc(n * 8), *const rdx = malloc(n * 8);
    kt_fill(x, n, -8, 8);
    x[0] = -100.0f; /* exp overflow side: silu -> -0, gradient -> 0, never NaN */
    x[1] = 100.0f;
    x[2] = 0.0f;
    kt_fill(r, n, -1, 1);
    for (size_t i = 0; i < n; i++)
        ry[i] = silu_d(x[i]), rdx[i] = r[i] * silu_grad_d(x[i]);
    kt_poison(y, n);
    is_int(kern_ref_silu_fwd(ctx, y, x, n), 0, "silu fwd runs");
    kt_check_close("silu fwd vs double", y, ry, n, 1e-6, 1e-6);
    kt_poison(dx, n);
    is_int(kern_ref_silu_bwd(ctx, dx, r, x, n, 0), 0, "silu bwd runs");
    kt_check_close("silu bwd vs double", dx, rdx, n, 1e-6, 1e-5);
    kt_fill(dx0, n, -1, 1);
    memcpy(dx, dx0, n * 4);
    kern_ref_silu_bwd(ctx, dx, r, x, n, KERN_ACCUM_DX);
    for (size_t i = 0; i < n; i++)
        rdx[i] += dx0[i];
    kt_check_close("silu bwd (+=)", dx, rdx, n, 1e-6, 1e-5);
    /* In place backward (dx == dy) overwrites. */
    memcpy(dx, r, n * 4);
    kern_ref_silu_bwd(ctx, dx, dx, x, n, 0);
    for (size_t i = 0; i < n; i++)
        rdx[i] -= dx0[i];
    kt_check_close("silu bwd in place (dx == dy)", dx, rdx, n, 1e-6, 1e-5);

    kern_ref_silu_bwd(ctx, dx, r, x, n, 0);
    struct silu_state s = { ctx, x + 3, y, r + 3, 64 };
    kt_check_fd("silu dx", x + 3, 64, dx + 3, silu_loss, &s, 1e-2f, 1e-3, 1e-2, 1);
    free(x), free(y), free(r), free(dx), free(dx0), free(ry), free(rdx);
    kern_ctx_destroy(ctx);
}

static void check_errors(void)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    struct kern_bn d;
    float x[4] = { 1, 2, 3, 4 }, y[4], g[1] = { 1 }, b[1] = { 0 }, rm[1] = { 0 }, rv[1] = { 1 };
    kern_bn_init(&d, 1, 1, 1);
    is_int(kern_ref_bn_fwd_train(ctx, &d, y, NULL, NULL, rm, rv, x, g, b), -EINVAL,
           "one value per channel refused when running stats are updated (PyTorch errors too)");
    kern_bn_init(&d, 1, 0, 4);
    is_int(kern_ref_bn_fwd_train(ctx, &d, y, NULL, NULL, NULL, NULL, x, g, b), -EINVAL,
           "zero channels refused");
    kern_bn_init(&d, 1, 1, 4);
    is_int(kern_ref_bn_fwd_train(ctx, &d, y, NULL, NULL, rm, NULL, x, g, b), -EINVAL,
           "running_mean without running_var refused");
    ok(d.eps == 1e-3f && d.momentum == 0.03f, "kern_bn_init sets eps 1e-3, momentum 0.03");
    kern_ctx_destroy(ctx);
}

/* Threaded contexts split channels / ranges; every value must be bit-identical to one thread. */
static void check_threads(void)
{
    struct kern_ctx *const c1 = kt_ctx_threads(1), *const c3 = kt_ctx_threads(3);
    struct bn_case t;
    case_init(&t, 4, 5, 2000);
    float *const y1 = kt_alloc(t.nx), *const y3 = kt_alloc(t.nx), *const r = kt_alloc(t.nx);
    float *const dx1 = kt_alloc(t.nx), *const dx3 = kt_alloc(t.nx);
    float sm1[5], si1[5], sm3[5], si3[5], dg1[5], db1[5], dg3[5], db3[5];
    float rm3[5], rv3[5];
    memcpy(rm3, t.rm, sizeof(rm3));
    memcpy(rv3, t.rv, sizeof(rv3));
    kt_fill(r, t.nx, -1, 1);
    for (int silu = 0; silu < 2; silu++) {
        kt_poison(y3, t.nx);
        kt_poison(dx3, t.nx);
        if (silu) {
            kern_ref_bn_silu_fwd_train(c1, &t.d, y1, sm1, si1, t.rm, t.rv, t.x, t.gamma, t.beta);
            kern_ref_bn_silu_fwd_train(c3, &t.d, y3, sm3, si3, rm3, rv3, t.x, t.gamma, t.beta);
            kern_ref_bn_silu_bwd(c1, &t.d, dx1, dg1, db1, r, t.x, t.gamma, t.beta, sm1, si1, 0);
            kern_ref_bn_silu_bwd(c3, &t.d, dx3, dg3, db3, r, t.x, t.gamma, t.beta, sm3, si3, 0);
        } else {
            kern_ref_bn_fwd_train(c1, &t.d, y1, sm1, si1, t.rm, t.rv, t.x, t.gamma, t.beta);
            kern_ref_bn_fwd_train(c3, &t.d, y3, sm3, si3, rm3, rv3, t.x, t.gamma, t.beta);
            kern_ref_bn_bwd(c1, &t.d, dx1, dg1, db1, r, t.x, t.gamma, sm1, si1, 0);
            kern_ref_bn_bwd(c3, &t.d, dx3, dg3, db3, r, t.x, t.gamma, sm3, si3, 0);
        }
        ok(!memcmp(y1, y3, t.nx * 4) && !memcmp(sm1, sm3, sizeof(sm1)) &&
               !memcmp(si1, si3, sizeof(si1)) && !memcmp(t.rm, rm3, sizeof(rm3)) &&
               !memcmp(t.rv, rv3, sizeof(rv3)),
           "%s fwd_train with 3 threads bit-identical to 1 (y, saves, running stats)",
           silu ? "bn_silu" : "bn");
        ok(!memcmp(dx1, dx3, t.nx * 4) && !memcmp(dg1, dg3, sizeof(dg1)) &&
               !memcmp(db1, db3, sizeof(db1)),
           "%s bwd with 3 threads bit-identical to 1", silu ? "bn_silu" : "bn");
        kt_poison(y3, t.nx);
        if (silu) {
            kern_ref_bn_silu_fwd_eval(c1, &t.d, y1, t.x, t.gamma, t.beta, t.rm, t.rv);
            kern_ref_bn_silu_fwd_eval(c3, &t.d, y3, t.x, t.gamma, t.beta, t.rm, t.rv);
        } else {
            kern_ref_bn_fwd_eval(c1, &t.d, y1, t.x, t.gamma, t.beta, t.rm, t.rv);
            kern_ref_bn_fwd_eval(c3, &t.d, y3, t.x, t.gamma, t.beta, t.rm, t.rv);
        }
        ok(!memcmp(y1, y3, t.nx * 4), "%s fwd_eval with 3 threads bit-identical to 1",
           silu ? "bn_silu" : "bn");
    }
    kt_poison(y3, t.nx);
    kt_poison(dx3, t.nx);
    kern_ref_silu_fwd(c1, y1, t.x, t.nx);
    kern_ref_silu_fwd(c3, y3, t.x, t.nx);
    kern_ref_silu_bwd(c1, dx1, r, t.x, t.nx, 0);
    kern_ref_silu_bwd(c3, dx3, r, t.x, t.nx, 0);
    ok(!memcmp(y1, y3, t.nx * 4) && !memcmp(dx1, dx3, t.nx * 4),
       "silu fwd/bwd with 3 threads bit-identical to 1");
    free(y1), free(y3), free(r), free(dx1), free(dx3);
    case_free(&t);
    kern_ctx_destroy(c1);
    kern_ctx_destroy(c3);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 7);
    check_forward(3, 4, 5);
    check_forward(2, 3, 400);
    check_forward(8, 2, 1);
    check_backward(0);
    check_backward(1);
    check_silu();
    check_errors();
    check_threads();
    return tap_done();
}
