/*
 * Loss CPU references: BCE-with-logits (kern_ref_bce_logits_*) and CIoU (kern_ref_ciou_*).
 *
 * BCE: forward against log(1 + e^x) - x t in double over logits up to |x| = 100 (no overflow, no
 * NaN), on a strided block as the objectness column of (.., 85) rows; backward against
 * (sigmoid(x) - t) / N and finite differences; elements outside the block keep their canaries.
 * CIoU: forward against a hand example and an independent double implementation of ultralytics'
 * bbox_iou(CIoU=True); backward against central differences (h = 1e-6) of that double
 * implementation with alpha frozen at its unperturbed value (alpha carries no gradient), on
 * overlapping, nested and disjoint boxes drawn away from the min/max kinks; also the gradient of
 * identical boxes (ties split in halves).
 *
 * Over 50,000 rows (the context's threads take shares) the same bits on 1 and 3 threads.
 *
 * Tolerances: BCE forward 1e-6 + 1e-6 |ref|; BCE backward 1e-7 + 1e-5; BCE finite differences
 * (h 1e-2) 1e-4 + 1e-2; CIoU forward 2e-6 + 1e-5 (fp32 vs double); CIoU backward vs double
 * finite differences 1e-5 + 1e-3 |g| (fp32 analytic gradient).
 */
#include <errno.h>

#include "ciou_ref.h"
#include "kern_testutil.h"

/* ---- BCE ---- */

struct bce_state {
    struct kern_ctx *ctx;
    float *x, *t;
    size_t rows, cols, ldx;
};

static double bce_loss(void *p)
{
    struct bce_state *const s = p;
    float l = 0;
    kern_ref_bce_logits_fwd(s->ctx, &l, s->x, s->t, s->rows, s->cols, s->ldx);
    return l;
}

static void check_bce(size_t rows, size_t cols, size_t ldx, size_t off, float span)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const size_t nbuf = rows * ldx + off, nt = rows * cols;
    float *const x = kt_alloc(nbuf), *const t = kt_alloc(nt), *const dx = kt_alloc(nbuf);
    float *const dx0 = kt_alloc(nbuf);
    double *const rdx = malloc(nt * 8);
    kt_fill(x, nbuf, -span, span);
    kt_fill(t, nt, 0, 1);
    for (size_t i = 0; i < nt; i += 3)
        t[i] = (float)(i % 2); /* hard targets too */
    if (nt > 2) x[off] = 100.0f, x[off + 1] = -100.0f;
    double s = 0;
    const double sc = 0.7 / (double)nt;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const double v = x[off + r * ldx + c], tt = t[r * cols + c];
            s += (v > 0 ? v + log1p(exp(-v)) : log1p(exp(v))) - v * tt;
            rdx[r * cols + c] = (1.0 / (1.0 + exp(-v)) - tt) * sc;
        }
    float loss = NAN;
    is_int(kern_ref_bce_logits_fwd(ctx, &loss, x + off, t, rows, cols, ldx), 0,
           "bce %zux%zu ld %zu runs", rows, cols, ldx);
    const double want = s / (double)nt;
    kt_check_close("bce fwd vs double", &loss, &want, 1, 1e-6, 1e-6);
    kt_poison(dx, nbuf);
    is_int(kern_ref_bce_logits_bwd(ctx, dx + off, x + off, t, rows, cols, ldx, 0.7f, 0), 0,
           "bce bwd runs");
    float *const blk = kt_alloc(nt);
    size_t outside = 0, inside_canary = 0;
    for (size_t i = 0; i < nbuf; i++) {
        const int in = i >= off && (i - off) % ldx < cols && (i - off) / ldx < rows;
        if (in)
            inside_canary += kt_is_canary(dx[i]);
        else
            outside += !kt_is_canary(dx[i]);
    }
    ok(outside == 0 && inside_canary == 0,
       "bce bwd writes exactly the block (%zu outside touched, %zu inside left)", outside,
       inside_canary);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            blk[r * cols + c] = dx[off + r * ldx + c];
    kt_check_close("bce bwd (=) vs (sigmoid - t) * dloss / N", blk, rdx, nt, 1e-7, 1e-5);
    kt_fill(dx0, nbuf, -1, 1);
    memcpy(dx, dx0, nbuf * 4);
    kern_ref_bce_logits_bwd(ctx, dx + off, x + off, t, rows, cols, ldx, 0.7f, KERN_ACCUM_DX);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            blk[r * cols + c] = dx[off + r * ldx + c];
            rdx[r * cols + c] += dx0[off + r * ldx + c];
        }
    kt_check_close("bce bwd (+=)", blk, rdx, nt, 1e-7, 1e-5);

    /* Finite differences of the mean loss (dloss = 1), away from the saturated entries. */
    kern_ref_bce_logits_bwd(ctx, dx + off, x + off, t, rows, cols, ldx, 1.0f, 0);
    struct bce_state st = { ctx, x + off, t, rows, cols, ldx };
    if (nt > 8) {
        /* Compare row 1 onwards (dense in x when ldx == cols; else the block's first column). */
        float *const xs = x + off + ldx, *const gs = dx + off + ldx;
        kt_check_fd("bce dx", xs, (rows - 1) * ldx - (ldx - cols), gs, bce_loss, &st, 1e-2f, 1e-4,
                    1e-2, ldx == cols ? 1 : ldx);
    }
    free(x), free(t), free(dx), free(dx0), free(rdx), free(blk);
    kern_ctx_destroy(ctx);
}

/* Rows enough for the context's threads (the objectness column of 50,000 anchor cells): the
 * same loss and gradient bits on 1 and 3 threads, and the loss still the double sum's. */
static void check_bce_threads(void)
{
    const size_t rows = 50000, ldx = 85, nbuf = rows * ldx;
    struct kern_ctx *const c1 = kt_ctx_threads(1), *const c3 = kt_ctx_threads(3);
    float *const x = kt_alloc(nbuf), *const t = kt_alloc(rows), *const d1 = kt_alloc(nbuf);
    float *const d3 = kt_alloc(nbuf);
    kt_fill(x, nbuf, -12, 12);
    kt_fill(t, rows, 0, 1);
    double s = 0;
    for (size_t r = 0; r < rows; r++) {
        const double v = x[r * ldx + 4], tt = t[r];
        s += (v > 0 ? v + log1p(exp(-v)) : log1p(exp(v))) - v * tt;
    }
    const double want = s / (double)rows;
    float l1 = NAN, l3 = NAN;
    is_int(kern_ref_bce_logits_fwd(c1, &l1, x + 4, t, rows, 1, ldx), 0, "bce 50000 rows, 1 thread");
    is_int(kern_ref_bce_logits_fwd(c3, &l3, x + 4, t, rows, 1, ldx), 0,
           "bce 50000 rows, 3 threads");
    ok(!memcmp(&l1, &l3, sizeof l1), "bce fwd: the same bits on 1 and 3 threads (%.9g, %.9g)",
       (double)l1, (double)l3);
    kt_check_close("bce fwd, 3 threads, vs double", &l3, &want, 1, 1e-6, 1e-6);
    kt_poison(d1, nbuf);
    kt_poison(d3, nbuf);
    kern_ref_bce_logits_bwd(c1, d1 + 4, x + 4, t, rows, 1, ldx, 0.7f, 0);
    kern_ref_bce_logits_bwd(c3, d3 + 4, x + 4, t, rows, 1, ldx, 0.7f, 0);
    ok(!memcmp(d1, d3, nbuf * sizeof *d1), "bce bwd: the same bits on 1 and 3 threads");
    free(x), free(t), free(d1), free(d3);
    kern_ctx_destroy(c1);
    kern_ctx_destroy(c3);
}

/* ---- CIoU: an independent double implementation; alpha_in >= 0 freezes alpha ---- */

static double ciou_d(const double *p, const double *q, double alpha_in, double *alpha_out)
{
    double a = alpha_in; /* tests/ciou_ref.h: mode 1 records alpha, mode 2 replays it */
    struct tu_alpha fr = { .mode = alpha_in >= 0 ? 2 : 1, .cap = 1, .rec = &a };
    const double r = tu_ciou_ref(p, q, &fr);
    if (alpha_out) *alpha_out = a;
    return r;
}

static void ciou_d_grad(const float *pf, const float *qf, double g[8])
{
    double p[4], q[4], alpha;
    for (int k = 0; k < 4; k++)
        p[k] = pf[k], q[k] = qf[k];
    ciou_d(p, q, -1, &alpha);
    const double h = 1e-6;
    for (int k = 0; k < 8; k++) {
        double *const v = k < 4 ? &p[k] : &q[k - 4];
        const double keep = *v;
        *v = keep + h;
        const double lp = ciou_d(p, q, alpha, NULL);
        *v = keep - h;
        const double lm = ciou_d(p, q, alpha, NULL);
        *v = keep;
        g[k] = (lp - lm) / (2 * h);
    }
}

/* True when every corner comparison the CIoU makes is decided by more than margin. */
static int away_from_kinks(const float *p, const float *q, float margin)
{
    const float a[4] = { p[0] - p[2] / 2, p[0] + p[2] / 2, p[1] - p[3] / 2, p[1] + p[3] / 2 };
    const float b[4] = { q[0] - q[2] / 2, q[0] + q[2] / 2, q[1] - q[3] / 2, q[1] + q[3] / 2 };
    for (int k = 0; k < 4; k++)
        if (fabsf(a[k] - b[k]) < margin) return 0;
    const float iw = fminf(a[1], b[1]) - fmaxf(a[0], b[0]);
    const float ih = fminf(a[3], b[3]) - fmaxf(a[2], b[2]);
    return fabsf(iw) > margin && fabsf(ih) > margin;
}

static void check_ciou(void)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    enum { N = 64 };
    float b1[4 * N], b2[4 * N], out[N], dc[N], g1[4 * N], g2[4 * N], a1[4 * N];
    double ref[N];
    /* Hand example: (0,0,2,2) vs (1,0,2,2): iou 2/6, c2 9 + 4, rho2 1, v 0. */
    const float h1[4] = { 0, 0, 2, 2 }, h2[4] = { 1, 0, 2, 2 };
    kern_ref_ciou_fwd(ctx, out, h1, h2, 1);
    const double hand = 2.0 / (6.0 + 1e-7) - 1.0 / (13.0 + 1e-7);
    kt_check_close("ciou hand example (0,0,2,2) vs (1,0,2,2) = 1/3 - 1/13", out, &hand, 1, 1e-6,
                   1e-6);
    kern_ref_ciou_fwd(ctx, out, h1, h1, 1);
    ok(fabsf(out[0] - 1.0f) < 1e-6f, "ciou of a box with itself is 1 (got %.9g)", (double)out[0]);
    const float far[4] = { 10, 10, 1, 3 };
    kern_ref_ciou_fwd(ctx, out, h1, far, 1);
    ok(out[0] < 0.0f && out[0] > -1.0f, "ciou of disjoint boxes is in (-1, 0) (got %.6g)",
       (double)out[0]);

    /* Random pairs in grid units, like build_targets' pbox/tbox: overlapping, nested, disjoint. */
    for (int i = 0; i < N; i++) {
        float *const p = b1 + 4 * i, *const q = b2 + 4 * i;
        do {
            q[0] = kt_uniform(-0.5f, 1.5f), q[1] = kt_uniform(-0.5f, 1.5f);
            q[2] = kt_uniform(0.2f, 6), q[3] = kt_uniform(0.2f, 6);
            const float spread = i % 3 == 0 ? 0.3f : i % 3 == 1 ? 2.0f : 8.0f;
            p[0] = q[0] + kt_uniform(-spread, spread), p[1] = q[1] + kt_uniform(-spread, spread);
            p[2] = q[2] * kt_uniform(0.25f, 4), p[3] = q[3] * kt_uniform(0.25f, 4);
        } while (!away_from_kinks(p, q, 1e-3f));
        double pd[4], qd[4];
        for (int k = 0; k < 4; k++)
            pd[k] = p[k], qd[k] = q[k];
        ref[i] = ciou_d(pd, qd, -1, NULL);
        dc[i] = kt_uniform(-1, 1);
    }
    kt_poison(out, N);
    is_int(kern_ref_ciou_fwd(ctx, out, b1, b2, N), 0, "ciou fwd runs");
    kt_check_close("ciou fwd vs double implementation", out, ref, N, 2e-6, 1e-5);

    kt_poison(g1, 4 * N);
    kt_poison(g2, 4 * N);
    is_int(kern_ref_ciou_bwd(ctx, g1, g2, dc, b1, b2, N, 0), 0, "ciou bwd runs");
    double *const r1 = malloc(4 * N * 8), *const r2 = malloc(4 * N * 8);
    for (int i = 0; i < N; i++) {
        double g[8];
        ciou_d_grad(b1 + 4 * i, b2 + 4 * i, g);
        for (int k = 0; k < 4; k++)
            r1[4 * i + k] = dc[i] * g[k], r2[4 * i + k] = dc[i] * g[4 + k];
    }
    kt_check_close("ciou db1 vs double finite differences, alpha frozen", g1, r1, 4 * N, 1e-5,
                   1e-3);
    kt_check_close("ciou db2 vs double finite differences, alpha frozen", g2, r2, 4 * N, 1e-5,
                   1e-3);
    /* Accumulate, and db2 = NULL. */
    kt_fill(a1, 4 * N, -1, 1);
    memcpy(g1, a1, sizeof(a1));
    is_int(kern_ref_ciou_bwd(ctx, g1, NULL, dc, b1, b2, N, KERN_ACCUM_DX), 0,
           "ciou bwd without db2");
    for (int i = 0; i < 4 * N; i++)
        r1[i] += a1[i];
    kt_check_close("ciou db1 (+=)", g1, r1, 4 * N, 1e-4, 1e-3);

    /* Identical boxes: every min/max ties and each side gets half (autograd's rule); by symmetry
     * the xy gradients of the two boxes are opposite. Exact values: tests/kernels/data refs. */
    const float same[4] = { 0.5f, 0.5f, 2.0f, 3.0f };
    const float one = 1.0f;
    kern_ref_ciou_bwd(ctx, g1, g2, &one, same, same, 1, 0);
    ok(kt_count_nonfinite(g1, 4) == 0 && fabsf(g1[0] + g2[0]) < 1e-6f &&
           fabsf(g1[1] + g2[1]) < 1e-6f,
       "identical boxes: finite gradients, xy gradients opposite between the boxes");
    free(r1), free(r2);
    kern_ctx_destroy(ctx);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 19);
    check_bce(37, 1, 1, 0, 8);  /* dense */
    check_bce(12, 1, 85, 4, 8); /* objectness column of (.., 85) rows */
    check_bce(9, 80, 85, 5, 8); /* class block of gathered rows */
    check_bce(50, 3, 3, 0, 30); /* large logits */
    check_bce_threads();
    check_ciou();
    return tap_done();
}
