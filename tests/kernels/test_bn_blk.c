/*
 * BN + SiLU on channel blocks (kern.h "BN + SiLU on channel blocks", kern_bnblk_*), against the
 * NCHW reference ops kern_ref_bn_silu_fwd_train and kern_ref_bn_silu_bwd on the same numbers:
 * random NCHW tensors are laid out in blocks (nChw16c, nChw8c), run through the blocked passes,
 * and laid back. Checked, for blk 16 and 8, with channels that fill the last block and channels
 * that leave pad lanes, planes of one chunk and of several:
 *   - y (with and without a residual: y = silu(bn(x)) + r), the batch mean, biased variance and
 *     invstd against the reference's y, save_mean, save_invstd;
 *   - dx, and dgamma, dbeta added into nonzero buffers (the executor adds into the grad arena);
 *   - the residual's gradient given while dy streams: copied, or added to what is there;
 *   - y and dy as the middle slice of a wider tensor (a concat's, y_nstride), and x and dx as
 *     well (one conv's output two BNs share, x_nstride): the same values, the rest of the wide
 *     y and dx untouched, the rest of the wide x (values of +-1000) in no statistic;
 *   - the pad lanes of y and dx are 0, and nothing past the tensors is written (canaries);
 *   - slices run in reverse order give the same bits (the merges fix the order);
 *   - a channel whose |mean| is 1000 std keeps its variance (no float sum of squares);
 *   - SyncBatchNorm's path: the batch cut into two "ranks" whose sums buffers are added (as the
 *     all-reduce does) gives the whole batch's y and dx, the ranks' dgamma and dbeta summed.
 * Tolerance 1e-5 + 1e-5 |ref|: the same formulas, sums in another grouping. With |mean| at 1000
 * std, x a + b cancels: a mean 1e-7 apart in its last float bits moves y by 1e-4, so there the
 * outputs get 1e-3; the variance keeps 2e-5 (3e-6 measured; a float sum of squares would be
 * 6e-2 off, unshifted float chunk means 1.4e-5).
 */
#include <errno.h>
#include <stdbool.h>

#include "kern_testutil.h"

/* Blocked back into NCHW; *pad_nonzero counts pad lanes that are not 0. */
static void from_blk(float *dst, const float *src, int n, int c, int cpad, int blk, size_t hw,
                     size_t *pad_nonzero)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < cpad; ch++)
            for (size_t p = 0; p < hw; p++) {
                const float v =
                    src[(((size_t)i * (size_t)(cpad / blk) + (size_t)(ch / blk)) * hw + p) *
                            (size_t)blk +
                        (size_t)(ch % blk)];
                if (ch < c)
                    dst[((size_t)i * (size_t)c + (size_t)ch) * hw + p] = v;
                else if (v != 0.0f)
                    (*pad_nonzero)++;
            }
}

struct blk_run {
    struct kern_bnblk p;
    float *chan;
    double *sums, *bsums;
};

static void run_init(struct blk_run *r, int n, int c, int blk, size_t hw)
{
    memset(r, 0, sizeof *r);
    struct kern_bnblk *p = &r->p;
    p->n = n;
    p->c = c;
    p->blk = blk;
    p->cpad = (c + blk - 1) / blk * blk;
    p->hw = hw;
    p->eps = KERN_BN_EPS;
    r->chan = calloc(10 * (size_t)p->cpad, sizeof(float));
    r->sums = calloc(2 * (size_t)n * (size_t)p->cpad, sizeof(double));
    r->bsums = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    if (!r->chan || !r->sums || !r->bsums) exit(99);
    float **const a[10] = { &p->mean, &p->var, &p->invstd, &p->gamma, &p->beta,
                            &p->a,    &p->b,   &p->k,      &p->m1,    &p->m2 };
    for (int i = 0; i < 10; i++)
        *a[i] = r->chan + (size_t)i * (size_t)p->cpad;
    p->s1 = r->sums;
    p->s2 = r->sums + (size_t)n * (size_t)p->cpad;
}

/* The forward and backward over every slice, in order or reversed. */
static void run_blk(struct blk_run *r, float *y, float *dx, const float *x, const float *res,
                    const float *dy, const float *gamma, const float *beta, float *dg, float *db,
                    float *rdx, int radd, bool reverse)
{
    const struct kern_bnblk *p = &r->p;
    const long ns = (long)p->n * (p->cpad / p->blk);
    for (long k = 0; k < ns; k++)
        kern_ops_cpu()->bnblk_moments(p, reverse ? ns - 1 - k : k, x);
    kern_ops_cpu()->bnblk_fwd_coef(p, gamma, beta, NULL);
    for (long k = 0; k < ns; k++)
        kern_ops_cpu()->bnblk_silu_fwd(p, reverse ? ns - 1 - k : k, y, x, res);
    for (long k = 0; k < ns; k++)
        kern_ops_cpu()->bnblk_silu_bwd_sums(p, reverse ? ns - 1 - k : k, dy, x, rdx, radd);
    kern_ops_cpu()->bnblk_bwd_sums(p, r->bsums, dg, db);
    kern_ops_cpu()->bnblk_bwd_coef(p, r->bsums);
    for (long k = 0; k < ns; k++)
        kern_ops_cpu()->bnblk_silu_bwd_dx(p, reverse ? ns - 1 - k : k, dx, dy, x);
}

/* wide: y, dy, x and dx as the middle of tensors with a block more on each side of every image. */
static void check_case(int n, int c, int hw_, int blk, bool residual, float offset, bool wide)
{
    const double tol = offset > 10 ? 1e-3 : 1e-5;
    const size_t hw = (size_t)hw_, nx = (size_t)n * (size_t)c * hw;
    const int cpad = (c + blk - 1) / blk * blk;
    const size_t nb = (size_t)n * (size_t)cpad * hw;
    char what[160];
    snprintf(what, sizeof what, "n%d c%d hw%d blk%d%s%s offset %g", n, c, hw_, blk,
             residual ? " residual" : "", wide ? " in a wider tensor" : "", (double)offset);
    float *x = kt_alloc(nx), *dy = kt_alloc(nx), *r = kt_alloc(nx);
    float *gamma = kt_alloc((size_t)c), *beta = kt_alloc((size_t)c);
    for (int ch = 0; ch < c; ch++) {
        const float off = offset * kt_uniform(-1, 1), sc = kt_uniform(0.3f, 2.0f);
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < hw; j++)
                x[((size_t)i * (size_t)c + (size_t)ch) * hw + j] = off + sc * kt_uniform(-1, 1);
        gamma[ch] = kt_uniform(0.5f, 1.5f);
        beta[ch] = kt_uniform(-0.5f, 0.5f);
    }
    kt_fill(dy, nx, -1, 1);
    kt_fill(r, nx, -1, 1);

    /* the reference: NCHW ops, then + r */
    struct kern_bn d;
    kern_bn_init(&d, n, c, (int)hw);
    float *yr = kt_alloc(nx), *dxr = kt_alloc(nx), *sm = kt_alloc((size_t)c);
    float *si = kt_alloc((size_t)c), *dgr = kt_alloc((size_t)c), *dbr = kt_alloc((size_t)c);
    struct kern_ctx *ctx = kt_ctx(0);
    if (kern_ref_bn_silu_fwd_train(ctx, &d, yr, sm, si, NULL, NULL, x, gamma, beta) ||
        kern_ref_bn_silu_bwd(ctx, &d, dxr, dgr, dbr, dy, x, gamma, beta, sm, si, 0))
        exit(98);
    if (residual)
        for (size_t i = 0; i < nx; i++)
            yr[i] += r[i];

    /* blocked, with a canary float past each tensor */
    float *xb = kt_alloc(nb), *dyb = kt_alloc(nb), *rb = kt_alloc(nb);
    float *yb = kt_alloc(nb + 1), *dxb = kt_alloc(nb + 1), *yb2 = kt_alloc(nb + 1);
    float *dxb2 = kt_alloc(nb + 1);
    kt_to_blk(xb, x, n, c, cpad, blk, hw);
    kt_to_blk(dyb, dy, n, c, cpad, blk, hw);
    kt_to_blk(rb, r, n, c, cpad, blk, hw);
    kt_poison(yb, nb + 1), kt_poison(dxb, nb + 1), kt_poison(yb2, nb + 1), kt_poison(dxb2, nb + 1);
    float *dg = kt_alloc((size_t)c), *db = kt_alloc((size_t)c);
    float *dg2 = kt_alloc((size_t)c), *db2 = kt_alloc((size_t)c);
    for (int ch = 0; ch < c; ch++) /* added into: start from values a step left there */
        dg[ch] = dg2[ch] = 0.25f * (float)ch, db[ch] = db2[ch] = -0.5f;
    struct blk_run run, run2;
    run_init(&run, n, c, blk, hw);
    run_init(&run2, n, c, blk, hw);
    /* the residual's gradient: copied in the first run, added onto 1 in the second */
    float *rdx = kt_alloc(nb), *rdx2 = kt_alloc(nb);
    for (size_t i = 0; i < nb; i++)
        rdx2[i] = 1.0f;
    /* wide: images of cpad + 2 blk channels, the tensor at one block in */
    const size_t img = (size_t)cpad * hw, wimg = img + 2 * (size_t)blk * hw;
    const size_t nw = (size_t)n * wimg, in = (size_t)blk * hw;
    float *yw = kt_alloc(nw), *dyw = kt_alloc(nw), *xw = kt_alloc(nw), *dxw = kt_alloc(nw);
    kt_poison(yw, nw);
    kt_poison(dxw, nw);
    kt_fill(dyw, nw, -1, 1);
    kt_fill(xw, nw, -1e3f, 1e3f); /* values no statistic may see */
    for (int i = 0; i < n; i++) {
        memcpy(dyw + (size_t)i * wimg + in, dyb + (size_t)i * img, img * sizeof *dyb);
        memcpy(xw + (size_t)i * wimg + in, xb + (size_t)i * img, img * sizeof *xb);
    }
    if (wide) { /* x and dx too: a slice of a conv output two BNs share (x_nstride) */
        run.p.y_nstride = run.p.x_nstride = wimg;
        run_blk(&run, yw + in, dxw + in, xw + in, residual ? rb : NULL, dyw + in, gamma, beta, dg,
                db, residual ? rdx : NULL, 0, false);
        for (int i = 0; i < n; i++) {
            memcpy(yb + (size_t)i * img, yw + (size_t)i * wimg + in, img * sizeof *yb);
            memcpy(dxb + (size_t)i * img, dxw + (size_t)i * wimg + in, img * sizeof *dxb);
        }
        size_t touched = 0;
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < wimg; j++)
                if ((j < in || j >= in + img) && (!kt_is_canary(yw[(size_t)i * wimg + j]) ||
                                                  !kt_is_canary(dxw[(size_t)i * wimg + j])))
                    touched++;
        ok(touched == 0, "%s: nothing of the wider y and dx outside the slices written (%zu)", what,
           touched);
    } else {
        run_blk(&run, yb, dxb, xb, residual ? rb : NULL, dyb, gamma, beta, dg, db,
                residual ? rdx : NULL, 0, false);
    }
    run_blk(&run2, yb2, dxb2, xb, residual ? rb : NULL, dyb, gamma, beta, dg2, db2,
            residual ? rdx2 : NULL, 1, true);
    if (residual) {
        size_t bad = 0;
        for (size_t i = 0; i < nb; i++)
            bad += rdx[i] != dyb[i] || rdx2[i] != 1.0f + dyb[i];
        ok(bad == 0, "%s: the residual's gradient copied, and added (%zu wrong)", what, bad);
    }

    float *y = kt_alloc(nx), *dx = kt_alloc(nx);
    size_t pad_nonzero = 0;
    from_blk(y, yb, n, c, cpad, blk, hw, &pad_nonzero);
    from_blk(dx, dxb, n, c, cpad, blk, hw, &pad_nonzero);
    char w[200];
    snprintf(w, sizeof w, "%s: y", what);
    kt_check_close_f(w, y, yr, nx, tol, tol);
    snprintf(w, sizeof w, "%s: batch mean", what);
    kt_check_close_f(w, run.p.mean, sm, (size_t)c, 1e-5, 1e-5);
    snprintf(w, sizeof w, "%s: invstd", what);
    kt_check_close_f(w, run.p.invstd, si, (size_t)c, 1e-5, 1e-5);
    float *var = kt_alloc((size_t)c);
    for (int ch = 0; ch < c; ch++)
        var[ch] = (float)(1.0 / ((double)si[ch] * si[ch]) - (double)KERN_BN_EPS);
    snprintf(w, sizeof w, "%s: biased variance", what);
    kt_check_close_f(w, run.p.var, var, (size_t)c, 2e-5, 2e-5);
    snprintf(w, sizeof w, "%s: dx", what);
    kt_check_close_f(w, dx, dxr, nx, tol, tol);
    for (int ch = 0; ch < c; ch++)
        dgr[ch] += 0.25f * (float)ch, dbr[ch] += -0.5f;
    snprintf(w, sizeof w, "%s: dgamma added", what);
    kt_check_close_f(w, dg, dgr, (size_t)c, 10 * tol, tol);
    snprintf(w, sizeof w, "%s: dbeta added", what);
    kt_check_close_f(w, db, dbr, (size_t)c, 10 * tol, tol);
    ok(pad_nonzero == 0 && kt_is_canary(yb[nb]) && kt_is_canary(dxb[nb]),
       "%s: pad lanes of y and dx are 0 (%zu not), nothing written past the tensors", what,
       pad_nonzero);
    ok(!memcmp(yb, yb2, nb * sizeof *yb) && !memcmp(dxb, dxb2, nb * sizeof *dxb) &&
           !memcmp(dg, dg2, (size_t)c * sizeof *dg) && !memcmp(db, db2, (size_t)c * sizeof *db),
       "%s: slices in reverse order give the same bits", what);

    free(run.chan), free(run.sums), free(run2.chan), free(run2.sums), free(run.bsums),
        free(run2.bsums);
    free(x), free(dy), free(r), free(gamma), free(beta), free(yr), free(dxr), free(sm), free(si);
    free(dgr), free(dbr), free(xb), free(dyb), free(rb), free(yb), free(dxb), free(yb2), free(dxb2);
    free(dg), free(db), free(dg2), free(db2), free(y), free(dx), free(var), free(rdx), free(rdx2);
    free(yw), free(dyw), free(xw), free(dxw);
    kern_ctx_destroy(ctx);
}

/* Two ranks of n / 2 images each, their sums added between the phases, against one run on n. */
static void check_sync(int n, int c, int hw_, int blk)
{
    const size_t hw = (size_t)hw_;
    const int cpad = (c + blk - 1) / blk * blk, h = n / 2;
    const size_t nb = (size_t)n * (size_t)cpad * hw, half = nb / 2;
    float *x = kt_alloc(nb), *dy = kt_alloc(nb), *y = kt_alloc(nb), *dx = kt_alloc(nb);
    float *ys = kt_alloc(nb), *dxs = kt_alloc(nb);
    float *gamma = kt_alloc((size_t)c), *beta = kt_alloc((size_t)c);
    float *dg = kt_alloc((size_t)c), *db = kt_alloc((size_t)c);
    float *dgs = kt_alloc((size_t)c), *dbs = kt_alloc((size_t)c);
    kt_fill(x, nb, -2, 3);
    kt_fill(dy, nb, -1, 1);
    for (int ch = 0; ch < c; ch++) {
        gamma[ch] = kt_uniform(0.5f, 1.5f), beta[ch] = kt_uniform(-0.5f, 0.5f);
        dg[ch] = db[ch] = dgs[ch] = dbs[ch] = 0;
    }
    for (size_t i = 0; i < nb; i++) /* pad lanes of inputs are 0, as the executor's */
        if ((int)((i / hw / (size_t)blk) % (size_t)(cpad / blk)) * blk + (int)(i % (size_t)blk) >=
            c)
            x[i] = dy[i] = 0;
    struct blk_run whole, rk[2];
    run_init(&whole, n, c, blk, hw);
    run_blk(&whole, y, dx, x, NULL, dy, gamma, beta, dg, db, NULL, 0, false);
    double *sum = calloc(KERN_BN_SUMS_LEN(c), sizeof(double));
    double *part[2] = { calloc(KERN_BN_SUMS_LEN(c), sizeof(double)),
                        calloc(KERN_BN_SUMS_LEN(c), sizeof(double)) };
    if (!sum || !part[0] || !part[1]) exit(99);
    const long ns = (long)h * (cpad / blk);
    for (int r = 0; r < 2; r++) {
        run_init(&rk[r], h, c, blk, hw);
        for (long k = 0; k < ns; k++)
            kern_ops_cpu()->bnblk_moments(&rk[r].p, k, x + (size_t)r * half);
        kern_ops_cpu()->bnblk_fwd_sums(&rk[r].p, part[r]);
    }
    for (size_t i = 0; i < KERN_BN_SUMS_LEN(c); i++)
        sum[i] = part[0][i] + part[1][i];
    for (int r = 0; r < 2; r++) {
        kern_ops_cpu()->bnblk_fwd_coef(&rk[r].p, gamma, beta, sum);
        for (long k = 0; k < ns; k++) {
            kern_ops_cpu()->bnblk_silu_fwd(&rk[r].p, k, ys + (size_t)r * half, x + (size_t)r * half,
                                           NULL);
            kern_ops_cpu()->bnblk_silu_bwd_sums(&rk[r].p, k, dy + (size_t)r * half,
                                                x + (size_t)r * half, NULL, 0);
        }
        kern_ops_cpu()->bnblk_bwd_sums(&rk[r].p, part[r], dgs, dbs); /* both ranks' add up */
    }
    for (size_t i = 0; i < KERN_BN_SUMS_LEN(c); i++)
        sum[i] = part[0][i] + part[1][i];
    for (int r = 0; r < 2; r++) {
        kern_ops_cpu()->bnblk_bwd_coef(&rk[r].p, sum);
        for (long k = 0; k < ns; k++)
            kern_ops_cpu()->bnblk_silu_bwd_dx(&rk[r].p, k, dxs + (size_t)r * half,
                                              dy + (size_t)r * half, x + (size_t)r * half);
    }
    char w[160];
    snprintf(w, sizeof w, "two ranks of n%d c%d hw%d blk%d, sums added: y", h, c, hw_, blk);
    kt_check_close_f(w, ys, y, nb, 1e-5, 1e-5);
    snprintf(w, sizeof w, "two ranks of n%d c%d hw%d blk%d, sums added: dx", h, c, hw_, blk);
    kt_check_close_f(w, dxs, dx, nb, 1e-5, 1e-5);
    snprintf(w, sizeof w, "two ranks of n%d c%d hw%d blk%d: dgamma summed", h, c, hw_, blk);
    kt_check_close_f(w, dgs, dg, (size_t)c, 1e-4, 1e-5);
    snprintf(w, sizeof w, "two ranks of n%d c%d hw%d blk%d: dbeta summed", h, c, hw_, blk);
    kt_check_close_f(w, dbs, db, (size_t)c, 1e-4, 1e-5);
    free(x), free(dy), free(y), free(dx), free(ys), free(dxs), free(gamma), free(beta), free(dg);
    free(db), free(dgs), free(dbs), free(sum), free(part[0]), free(part[1]);
    free(whole.chan), free(whole.sums), free(whole.bsums);
    for (int r = 0; r < 2; r++)
        free(rk[r].chan), free(rk[r].sums), free(rk[r].bsums);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 25);
    check_case(3, 32, 37, 16, false, 1.0f, false);
    check_case(3, 32, 37, 16, true, 1.0f, false);
    check_case(2, 20, 150, 16, true, 1.0f, false); /* pad lanes, three chunks per plane */
    check_case(3, 32, 50, 16, true, 1.0f, true);
    check_case(4, 24, 64, 8, false, 1.0f, false);
    check_case(2, 13, 200, 8, true, 1.0f, false);
    check_case(2, 16, 40, 8, false, 1.0f, true);
    check_case(2, 16, 300, 16, false, 1000.0f, false); /* |mean| up to 1000 std */
    check_sync(4, 20, 90, 16);
    check_sync(6, 24, 40, 8);
    return tap_done();
}
