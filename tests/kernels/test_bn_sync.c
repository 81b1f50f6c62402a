/*
 * Batch norm in phases for SyncBatchNorm (kern.h "Batch norm in phases", kern_ref_bn_stats,
 * kern_ref_bn[_silu]_fwd_apply, _bwd_reduce, _bwd_apply), CPU reference.
 *
 * Ranks are simulated in one process: the batch of n images is cut into per-rank sub-batches
 * (contiguous in NCHW), each "rank" runs a phase on its part, and the ranks' sums buffers are
 * added elementwise, which is what the trainer's all-reduce does. Checked:
 *   - one rank (no sum) against the fused ops kern_ref_bn[_silu]_fwd_train / _bwd: y, saved and
 *     running statistics, dx, dgamma, dbeta, overwrite and accumulate, NaN canaries;
 *   - 2 equal and 3 unequal ranks against the fused ops on the whole batch: every rank's slice of
 *     y and dx, every rank's running statistics, the ranks' dgamma and dbeta summed (they are
 *     local, as SyncBatchNorm's), the summed count;
 *   - central differences of sum(r y) over the 2-rank phased forward, for x, gamma and beta;
 *   - channels with |mean| = 1000 std: the variance survives the sum (why the sums are double);
 *   - thread counts give the same bits; the error paths; the ops table.
 * Tolerances: one rank vs fused 1e-6 + 1e-6 |ref| (the variance is recomputed from the sums,
 * differing in its last double bits); several ranks vs fused 1e-5 + 1e-5 |ref| (float chunk sums
 * in another grouping); finite differences as test_bn_silu.c (h 1e-2, 1e-3 + 1e-2 |g|).
 */
#include <errno.h>
#include <stdbool.h>

#include "kern_testutil.h"

struct sync_case {
    struct kern_bn d;
    size_t nx, cc;
    float *x, *dy, *gamma, *beta, *rm, *rv;
};

static void case_init(struct sync_case *t, int n, int c, int hw, float offset_scale)
{
    kern_bn_init(&t->d, n, c, hw);
    t->nx = (size_t)n * c * hw;
    t->cc = (size_t)c;
    t->x = kt_alloc(t->nx);
    t->dy = kt_alloc(t->nx);
    t->gamma = kt_alloc(t->cc);
    t->beta = kt_alloc(t->cc);
    t->rm = kt_alloc(t->cc);
    t->rv = kt_alloc(t->cc);
    for (int ch = 0; ch < c; ch++) {
        const float off = offset_scale * kt_uniform(-1, 1), sc = kt_uniform(0.3f, 2.0f);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++)
                t->x[((size_t)i * c + ch) * hw + j] = off + sc * kt_uniform(-1, 1);
        t->gamma[ch] = kt_uniform(0.5f, 1.5f);
        t->beta[ch] = kt_uniform(-0.5f, 0.5f);
        t->rm[ch] = kt_uniform(-0.2f, 0.2f);
        t->rv[ch] = kt_uniform(0.5f, 1.5f);
    }
    kt_fill(t->dy, t->nx, -1, 1);
}

static void case_free(struct sync_case *t)
{
    free(t->x), free(t->dy), free(t->gamma), free(t->beta), free(t->rm), free(t->rv);
}

static double *dalloc(size_t n)
{
    double *const p = calloc(n ? n : 1, sizeof(double));
    if (!p) exit(99);
    return p;
}

#define MAX_RANKS 4

/* What the phased path produced on R ranks, in the whole batch's layout where it has one. */
struct phased_out {
    float *y, *dx;                        /* (n, c, hw): every rank's slice */
    float *sm[MAX_RANKS], *si[MAX_RANKS]; /* per rank: saved mean, invstd */
    float *rm[MAX_RANKS], *rv[MAX_RANKS]; /* per rank: its running stats after the step */
    float *dg, *db;                       /* summed over the ranks' local dgamma, dbeta */
    double *fsum, *bsum;                  /* the summed forward and backward buffers */
};

static void out_alloc(struct phased_out *o, const struct sync_case *t, int R)
{
    memset(o, 0, sizeof *o);
    o->y = kt_alloc(t->nx);
    o->dx = kt_alloc(t->nx);
    for (int r = 0; r < R; r++) {
        o->sm[r] = kt_alloc(t->cc), o->si[r] = kt_alloc(t->cc);
        o->rm[r] = kt_alloc(t->cc), o->rv[r] = kt_alloc(t->cc);
        memcpy(o->rm[r], t->rm, t->cc * sizeof(float));
        memcpy(o->rv[r], t->rv, t->cc * sizeof(float));
    }
    o->dg = kt_alloc(t->cc), o->db = kt_alloc(t->cc);
    o->fsum = dalloc(KERN_BN_SUMS_LEN(t->cc));
    o->bsum = dalloc(KERN_BN_SUMS_LEN(t->cc));
}

static void out_free(struct phased_out *o)
{
    free(o->y), free(o->dx), free(o->dg), free(o->db), free(o->fsum), free(o->bsum);
    for (int r = 0; r < MAX_RANKS; r++)
        free(o->sm[r]), free(o->si[r]), free(o->rm[r]), free(o->rv[r]);
}

/*
 * The SyncBatchNorm step of t on R ranks holding parts[r] images each: stats on every rank,
 * buffers summed, apply; then reduce, sum, apply. dx of every rank overwrites (accum_dx 0) or
 * adds to the given o->dx; the ranks' dgamma/dbeta overwrite, then add up in o->dg, o->db.
 * Returns the first error code.
 */
static int run_phased(struct kern_ctx *ctx, const struct sync_case *t, int silu, const int *parts,
                      int R, struct phased_out *o, unsigned accum_dx, bool running)
{
    const struct kern_ops *K = kern_ops_ref();
    const size_t cc = t->cc, plane = cc * (size_t)t->d.hw, len = KERN_BN_SUMS_LEN(cc);
    double *const mine = dalloc(len);
    float *const dg = kt_alloc(cc), *const db = kt_alloc(cc);
    struct kern_bn d[MAX_RANKS];
    size_t at[MAX_RANKS];
    int rc = 0;
    size_t off = 0;
    for (int r = 0; r < R; r++) {
        kern_bn_init(&d[r], parts[r], t->d.c, t->d.hw);
        at[r] = off;
        off += (size_t)parts[r] * plane;
    }
    memset(o->fsum, 0, len * sizeof(double));
    for (int r = 0; r < R && !rc; r++) {
        rc = K->bn_stats(ctx, &d[r], mine, t->x + at[r]);
        for (size_t k = 0; k < len; k++)
            o->fsum[k] += mine[k];
    }
    for (int r = 0; r < R && !rc; r++)
        rc = (silu ? K->bn_silu_fwd_apply : K->bn_fwd_apply)(
            ctx, &d[r], o->y + at[r], o->sm[r], o->si[r], running ? o->rm[r] : NULL,
            running ? o->rv[r] : NULL, t->x + at[r], t->gamma, t->beta, o->fsum);
    memset(o->bsum, 0, len * sizeof(double));
    for (size_t k = 0; k < cc; k++)
        o->dg[k] = o->db[k] = 0.0f;
    for (int r = 0; r < R && !rc; r++) {
        kt_poison(dg, cc), kt_poison(db, cc);
        rc = (silu ? K->bn_silu_bwd_reduce
                   : K->bn_bwd_reduce)(ctx, &d[r], mine, dg, db, t->dy + at[r], t->x + at[r],
                                       t->gamma, t->beta, o->sm[r], o->si[r], 0);
        for (size_t k = 0; k < len; k++)
            o->bsum[k] += mine[k];
        for (size_t k = 0; k < cc; k++)
            o->dg[k] += dg[k], o->db[k] += db[k];
    }
    for (int r = 0; r < R && !rc; r++)
        rc = (silu ? K->bn_silu_bwd_apply
                   : K->bn_bwd_apply)(ctx, &d[r], o->dx + at[r], t->dy + at[r], t->x + at[r],
                                      t->gamma, t->beta, o->sm[r], o->si[r], o->bsum, accum_dx);
    free(mine), free(dg), free(db);
    return rc;
}

/* The fused ops on the whole batch: y, saved stats, running stats, dx, dgamma, dbeta. */
struct fused_out {
    float *y, *sm, *si, *rm, *rv, *dx, *dg, *db;
};

static int run_fused(struct kern_ctx *ctx, const struct sync_case *t, int silu, struct fused_out *f,
                     unsigned accum)
{
    f->y = kt_alloc(t->nx), f->dx = kt_alloc(t->nx);
    f->sm = kt_alloc(t->cc), f->si = kt_alloc(t->cc), f->rm = kt_alloc(t->cc);
    f->rv = kt_alloc(t->cc), f->dg = kt_alloc(t->cc), f->db = kt_alloc(t->cc);
    memcpy(f->rm, t->rm, t->cc * sizeof(float));
    memcpy(f->rv, t->rv, t->cc * sizeof(float));
    int rc = silu ? kern_ref_bn_silu_fwd_train(ctx, &t->d, f->y, f->sm, f->si, f->rm, f->rv, t->x,
                                               t->gamma, t->beta)
                  : kern_ref_bn_fwd_train(ctx, &t->d, f->y, f->sm, f->si, f->rm, f->rv, t->x,
                                          t->gamma, t->beta);
    if (rc) return rc;
    return silu ? kern_ref_bn_silu_bwd(ctx, &t->d, f->dx, f->dg, f->db, t->dy, t->x, t->gamma,
                                       t->beta, f->sm, f->si, accum)
                : kern_ref_bn_bwd(ctx, &t->d, f->dx, f->dg, f->db, t->dy, t->x, t->gamma, f->sm,
                                  f->si, accum);
}

static void fused_free(struct fused_out *f)
{
    free(f->y), free(f->sm), free(f->si), free(f->rm), free(f->rv), free(f->dx), free(f->dg);
    free(f->db);
}

/* The phased step on R ranks against the fused ops on the whole batch. */
static void check_vs_fused(int silu, int n, int c, int hw, const int *parts, int R, double tol)
{
    struct kern_ctx *ctx = kt_ctx(0);
    struct sync_case t;
    case_init(&t, n, c, hw, 1.0f);
    const char *nm = silu ? "bn_silu" : "bn";
    char what[128], shape[64];
    snprintf(shape, sizeof shape, "n %d c %d hw %d, %d rank%s", n, c, hw, R, R > 1 ? "s" : "");
    /* accumulate mode: dx holds the same random values on both sides first */
    for (unsigned acc = 0; acc < 2; acc++) {
        const unsigned accum = acc ? KERN_ACCUM_DX | KERN_ACCUM_DPARAM : 0;
        struct fused_out f;
        struct phased_out o;
        out_alloc(&o, &t, R);
        float *const seed_dx = kt_alloc(t.nx), *const seed_dp = kt_alloc(t.cc * 2);
        kt_fill(seed_dx, t.nx, -1, 1);
        kt_fill(seed_dp, 2 * t.cc, -1, 1);
        kt_poison(o.y, t.nx);
        if (acc)
            memcpy(o.dx, seed_dx, t.nx * sizeof(float));
        else
            kt_poison(o.dx, t.nx);
        /* run_fused overwrites; the accumulate mode runs its backward again on the seeds */
        int rc_f = run_fused(ctx, &t, silu, &f, 0);
        if (acc && !rc_f) {
            memcpy(f.dx, seed_dx, t.nx * sizeof(float));
            memcpy(f.dg, seed_dp, t.cc * sizeof(float));
            memcpy(f.db, seed_dp + t.cc, t.cc * sizeof(float));
            rc_f = silu ? kern_ref_bn_silu_bwd(ctx, &t.d, f.dx, f.dg, f.db, t.dy, t.x, t.gamma,
                                               t.beta, f.sm, f.si, accum)
                        : kern_ref_bn_bwd(ctx, &t.d, f.dx, f.dg, f.db, t.dy, t.x, t.gamma, f.sm,
                                          f.si, accum);
        }
        const int rc = run_phased(ctx, &t, silu, parts, R, &o, acc ? KERN_ACCUM_DX : 0, true);
        ok(rc == 0 && rc_f == 0, "%s phased, %s, accum %u: every phase returns 0", nm, shape,
           accum);
        if (acc)
            for (size_t k = 0; k < t.cc; k++) /* the ranks' sums added to the same old values */
                o.dg[k] += seed_dp[k], o.db[k] += seed_dp[t.cc + k];
        if (!acc) {
            snprintf(what, sizeof what, "%s %s: y", nm, shape);
            kt_check_close_f(what, o.y, f.y, t.nx, tol, tol);
            int same_stats = 1;
            for (int r = 0; r < R; r++) {
                snprintf(what, sizeof what, "%s %s: rank %d save_mean", nm, shape, r);
                kt_check_close_f(what, o.sm[r], f.sm, t.cc, tol, tol);
                snprintf(what, sizeof what, "%s %s: rank %d save_invstd", nm, shape, r);
                kt_check_close_f(what, o.si[r], f.si, t.cc, tol, tol);
                snprintf(what, sizeof what, "%s %s: rank %d running_mean", nm, shape, r);
                kt_check_close_f(what, o.rm[r], f.rm, t.cc, tol, tol);
                snprintf(what, sizeof what, "%s %s: rank %d running_var (unbiased, global N)", nm,
                         shape, r);
                kt_check_close_f(what, o.rv[r], f.rv, t.cc, tol, tol);
                same_stats &= !memcmp(o.rm[r], o.rm[0], t.cc * sizeof(float)) &&
                              !memcmp(o.rv[r], o.rv[0], t.cc * sizeof(float));
            }
            ok(same_stats, "%s %s: every rank's running statistics are the same bytes", nm, shape);
            ok(o.fsum[2 * t.cc] == (double)n * hw && o.bsum[2 * t.cc] == (double)n * hw,
               "%s %s: the summed count is n hw = %d", nm, shape, n * hw);
        }
        snprintf(what, sizeof what, "%s %s accum %u: dx", nm, shape, accum);
        kt_check_close_f(what, o.dx, f.dx, t.nx, tol, tol);
        snprintf(what, sizeof what, "%s %s accum %u: sum over ranks of dgamma", nm, shape, accum);
        kt_check_close_f(what, o.dg, f.dg, t.cc, tol, tol);
        snprintf(what, sizeof what, "%s %s accum %u: sum over ranks of dbeta", nm, shape, accum);
        kt_check_close_f(what, o.db, f.db, t.cc, tol, tol);
        free(seed_dx), free(seed_dp);
        fused_free(&f);
        out_free(&o);
    }
    case_free(&t);
    kern_ctx_destroy(ctx);
}

/* ---- finite differences through the 2-rank phased forward ---- */

struct fd_state {
    struct kern_ctx *ctx;
    struct sync_case *t;
    const float *r; /* the loss weights */
    int silu;
    struct phased_out *o;
};

static const int fd_parts[2] = { 1, 2 };

static double fd_loss(void *arg)
{
    struct fd_state *const s = arg;
    if (run_phased(s->ctx, s->t, s->silu, fd_parts, 2, s->o, 0, false)) return NAN;
    return kt_dot(s->r, s->o->y, s->t->nx);
}

static void check_fd(int silu)
{
    struct kern_ctx *ctx = kt_ctx(0);
    struct sync_case t;
    case_init(&t, 3, 3, 5, 1.0f);
    float *const r = kt_alloc(t.nx);
    kt_fill(r, t.nx, -1, 1);
    memcpy(t.dy, r, t.nx * sizeof(float)); /* dL/dy of L = sum r y */
    struct phased_out o;
    out_alloc(&o, &t, 2);
    const int rc = run_phased(ctx, &t, silu, fd_parts, 2, &o, 0, false);
    ok(rc == 0, "%s: 2 ranks (1 + 2 images): the phased step runs", silu ? "bn_silu" : "bn");
    float *const dx = kt_alloc(t.nx), *const dg = kt_alloc(t.cc), *const db = kt_alloc(t.cc);
    memcpy(dx, o.dx, t.nx * sizeof(float));
    memcpy(dg, o.dg, t.cc * sizeof(float));
    memcpy(db, o.db, t.cc * sizeof(float));
    struct fd_state s = { ctx, &t, r, silu, &o };
    char what[96];
    snprintf(what, sizeof what, "%s 2 ranks: dx", silu ? "bn_silu" : "bn");
    kt_check_fd(what, t.x, t.nx, dx, fd_loss, &s, 1e-2f, 1e-3, 1e-2, 1);
    snprintf(what, sizeof what, "%s 2 ranks: dgamma summed over ranks", silu ? "bn_silu" : "bn");
    kt_check_fd(what, t.gamma, t.cc, dg, fd_loss, &s, 1e-2f, 1e-3, 1e-2, 1);
    snprintf(what, sizeof what, "%s 2 ranks: dbeta summed over ranks", silu ? "bn_silu" : "bn");
    kt_check_fd(what, t.beta, t.cc, db, fd_loss, &s, 1e-2f, 1e-3, 1e-2, 1);
    free(r), free(dx), free(dg), free(db);
    out_free(&o);
    case_free(&t);
    kern_ctx_destroy(ctx);
}

/* Channels whose mean is ~1000 standard deviations: E[x^2] - mean^2 after the sum. */
static void check_large_mean(void)
{
    struct kern_ctx *ctx = kt_ctx(0);
    struct sync_case t;
    case_init(&t, 4, 3, 300, 0.0f);
    for (size_t i = 0; i < t.nx; i++)
        t.x[i] = 1000.0f + t.x[i];
    struct fused_out f;
    struct phased_out o;
    out_alloc(&o, &t, 2);
    const int parts[2] = { 2, 2 };
    const int rc = run_fused(ctx, &t, 1, &f, 0) | run_phased(ctx, &t, 1, parts, 2, &o, 0, true);
    ok(rc == 0, "mean 1000 std: both paths run");
    /* in float sums the variance would be off by ~6e-8 * 1000^2 = 6% */
    kt_check_close_f("mean 1000 std, 2 ranks: save_invstd", o.si[0], f.si, t.cc, 0, 1e-5);
    kt_check_close_f("mean 1000 std, 2 ranks: running_var", o.rv[0], f.rv, t.cc, 0, 1e-5);
    kt_check_close_f("mean 1000 std, 2 ranks: y", o.y, f.y, t.nx, 1e-4, 1e-4);
    fused_free(&f);
    out_free(&o);
    case_free(&t);
    kern_ctx_destroy(ctx);
}

/* Thread counts split channels only: the same bits. */
static void check_threads(void)
{
    struct kern_ctx *c1 = kt_ctx_threads(1), *c3 = kt_ctx_threads(3);
    struct sync_case t;
    case_init(&t, 2, 13, 700, 1.0f);
    struct phased_out a, b;
    out_alloc(&a, &t, 2);
    out_alloc(&b, &t, 2);
    const int parts[2] = { 1, 1 };
    const int rc =
        run_phased(c1, &t, 1, parts, 2, &a, 0, true) | run_phased(c3, &t, 1, parts, 2, &b, 0, true);
    ok(rc == 0 && !memcmp(a.y, b.y, t.nx * sizeof(float)) &&
           !memcmp(a.dx, b.dx, t.nx * sizeof(float)) &&
           !memcmp(a.fsum, b.fsum, KERN_BN_SUMS_LEN(t.cc) * sizeof(double)) &&
           !memcmp(a.bsum, b.bsum, KERN_BN_SUMS_LEN(t.cc) * sizeof(double)) &&
           !memcmp(a.rv[1], b.rv[1], t.cc * sizeof(float)) &&
           !memcmp(a.dg, b.dg, t.cc * sizeof(float)),
       "1 and 3 threads: the same bytes (sums, y, running stats, dx, dgamma)");
    out_free(&a);
    out_free(&b);
    case_free(&t);
    kern_ctx_destroy(c1);
    kern_ctx_destroy(c3);
}

static void check_errors(void)
{
    struct kern_ctx *ctx = kt_ctx(0);
    struct sync_case t;
    case_init(&t, 2, 3, 4, 1.0f);
    float *const y = kt_alloc(t.nx), *const sm = kt_alloc(t.cc), *const si = kt_alloc(t.cc);
    float *const dg = kt_alloc(t.cc), *const db = kt_alloc(t.cc);
    double *const sums = dalloc(KERN_BN_SUMS_LEN(t.cc));
    struct kern_bn bad = t.d;
    bad.c = 0;
    is_int(kern_ref_bn_stats(ctx, &t.d, NULL, t.x), -EINVAL, "stats: NULL sums");
    is_int(kern_ref_bn_stats(ctx, &bad, sums, t.x), -EINVAL, "stats: c = 0");
    is_int(kern_ref_bn_stats(NULL, &t.d, sums, t.x), -EINVAL, "stats: NULL context");
    ok(kern_ref_bn_stats(ctx, &t.d, sums, t.x) == 0 && sums[6] == 8.0, "stats: count n hw = 8");
    is_int(kern_ref_bn_fwd_apply(ctx, &t.d, y, sm, si, t.rm, NULL, t.x, t.gamma, t.beta, sums),
           -EINVAL, "fwd_apply: running_mean without running_var");
    is_int(kern_ref_bn_silu_fwd_apply(ctx, &t.d, y, sm, si, NULL, NULL, t.x, t.gamma, t.beta, NULL),
           -EINVAL, "fwd_apply: NULL sums");
    struct kern_bn one = t.d;
    one.n = 1, one.hw = 1;
    is_int(kern_ref_bn_fwd_apply(ctx, &one, y, sm, si, t.rm, t.rv, t.x, t.gamma, t.beta, sums),
           -EINVAL, "fwd_apply: local n hw = 1 with running stats");
    ok(kern_ref_bn_fwd_apply(ctx, &t.d, y, sm, si, NULL, NULL, t.x, t.gamma, t.beta, sums) == 0,
       "fwd_apply: saves without running stats");
    is_int(kern_ref_bn_bwd_reduce(ctx, &t.d, sums, dg, NULL, t.dy, t.x, t.gamma, NULL, sm, si, 0),
           -EINVAL, "bwd_reduce: dgamma without dbeta");
    is_int(
        kern_ref_bn_silu_bwd_reduce(ctx, &t.d, sums, dg, db, t.dy, t.x, t.gamma, NULL, sm, si, 0),
        -EINVAL, "bn_silu_bwd_reduce: NULL beta");
    is_int(kern_ref_bn_bwd_reduce(ctx, &t.d, sums, NULL, NULL, t.dy, t.x, NULL, NULL, sm, si, 4),
           -EINVAL, "bwd_reduce: an unknown accum bit");
    ok(kern_ref_bn_bwd_reduce(ctx, &t.d, sums, NULL, NULL, t.dy, t.x, NULL, NULL, sm, si, 0) == 0,
       "bwd_reduce (BN): no gamma, beta or parameter gradients needed");
    is_int(kern_ref_bn_bwd_apply(ctx, &t.d, y, t.dy, t.x, NULL, NULL, sm, si, sums, 0), -EINVAL,
           "bwd_apply: NULL gamma");
    is_int(kern_ref_bn_silu_bwd_apply(ctx, &t.d, y, t.dy, t.x, t.gamma, NULL, sm, si, sums, 0),
           -EINVAL, "bn_silu_bwd_apply: NULL beta");
    /* KERN_ACCUM_DPARAM adds this rank's sums to what dgamma, dbeta held */
    float *const dg2 = kt_alloc(t.cc), *const db2 = kt_alloc(t.cc);
    kt_fill(dg2, t.cc, -1, 1);
    kt_fill(db2, t.cc, -1, 1);
    float want_g[3], want_b[3];
    int rc =
        kern_ref_bn_silu_bwd_reduce(ctx, &t.d, sums, dg, db, t.dy, t.x, t.gamma, t.beta, sm, si, 0);
    for (int k = 0; k < 3; k++)
        want_g[k] = dg2[k] + dg[k], want_b[k] = db2[k] + db[k];
    rc |= kern_ref_bn_silu_bwd_reduce(ctx, &t.d, sums, dg2, db2, t.dy, t.x, t.gamma, t.beta, sm, si,
                                      KERN_ACCUM_DPARAM);
    ok(rc == 0 && !memcmp(dg2, want_g, sizeof want_g) && !memcmp(db2, want_b, sizeof want_b),
       "bwd_reduce with KERN_ACCUM_DPARAM: dgamma, dbeta += this rank's sums");
    free(dg2), free(db2);
    const struct kern_ops *K = kern_ops_ref();
    ok(K->bn_stats == kern_ref_bn_stats && K->bn_fwd_apply == kern_ref_bn_fwd_apply &&
           K->bn_silu_fwd_apply == kern_ref_bn_silu_fwd_apply &&
           K->bn_bwd_reduce == kern_ref_bn_bwd_reduce &&
           K->bn_silu_bwd_reduce == kern_ref_bn_silu_bwd_reduce &&
           K->bn_bwd_apply == kern_ref_bn_bwd_apply &&
           K->bn_silu_bwd_apply == kern_ref_bn_silu_bwd_apply,
       "kern_ops_ref() carries the seven phases");
    free(y), free(sm), free(si), free(dg), free(db), free(sums);
    case_free(&t);
    kern_ctx_destroy(ctx);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 11);
    const int one[1] = { 3 }, two[2] = { 2, 2 }, three[3] = { 2, 1, 2 }, big[2] = { 1, 1 };
    for (int silu = 0; silu < 2; silu++) {
        check_vs_fused(silu, 3, 5, 37, one, 1, 1e-6);
        check_vs_fused(silu, 4, 4, 50, two, 2, 1e-5);
        check_vs_fused(silu, 5, 3, 29, three, 3, 1e-5);
        check_vs_fused(silu, 2, 2, 3000, big, 2, 1e-5); /* several chunks per plane */
        check_fd(silu);
    }
    check_large_mean();
    check_threads();
    check_errors();
    return tap_done();
}
