/*
 * The whole YOLOv5 loss, CPU reference (kern_ref_yolo_loss, kern.h "The whole YOLOv5 loss"),
 * against expectations that do not come from the trainer or from the op itself:
 *   - build_targets on a hand-worked example (offsets, clamping at the border, PyTorch's order,
 *     duplicates of one cell, targets exactly on cell borders);
 *   - the loss values against an independent double-precision re-implementation of the recipe
 *     (its own build_targets, CIoU, BCE with positive weights, gr) on random small shapes;
 *   - the gradient of the total against central finite differences of that re-implementation
 *     (alpha and the detached objectness targets held, as autograd holds them), every element;
 *   - empty targets, the last-entry-wins rule on a shared cell, KERN_ACCUM_DX, the context
 *     workspace, determinism, and the errors (absurd counts, bad rows, small scratch).
 * --seed N replays the random draws (the default seed is fixed and printed).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_testutil.h"
#include "ciou_ref.h"
#include "tap.h"

static struct kern_ctx *g_ctx;

/* ---- an independent double re-implementation of ComputeLoss ---- */

struct ref_entry {
    int b, a, gj, gi, cls;
    double tb[4];
};

/* Freezing what autograd treats as constants: alpha of every CIoU, and every tobj value. */
static int g_freeze;
static double g_alpha[4096], g_tobj_val[4096];
static struct tu_alpha g_al = { .cap = 4096, .rec = g_alpha };
static int g_tobj_cell[4096], g_n_tobj;

/* trunc, then clamp to [0, hi] (the values here are small). */
static int ref_cell(float v, int hi)
{
    int c = v <= 0.0f ? 0 : (int)v;
    return c > hi ? hi : c;
}

/* The entries of level l for rows t[0..nt), in the order offset, anchor, target. */
static int ref_build(const struct kern_yolo_loss *d, int l, const float *t, int nt,
                     struct ref_entry *out)
{
    const float ox[5] = { 0, 0.5f, 0, -0.5f, 0 }, oy[5] = { 0, 0, 0.5f, 0, -0.5f };
    const float fnx = (float)d->nx[l], fny = (float)d->ny[l];
    int n = 0;
    for (int o = 0; o < 5; o++)
        for (int a = 0; a < d->na; a++)
            for (int r = 0; r < nt; r++) {
                const float *row = t + 6 * r;
                const float gx = row[2] * fnx, gy = row[3] * fny, gw = row[4] * fnx,
                            gh = row[5] * fny;
                const float rw = gw / d->anchors[l][a][0], rh = gh / d->anchors[l][a][1];
                const float m = fmaxf(fmaxf(rw, 1.0f / rw), fmaxf(rh, 1.0f / rh));
                if (!(m < d->anchor_t)) continue;
                const float fx = gx - floorf(gx), fy = gy - floorf(gy);
                const float gxi = fnx - gx, gyi = fny - gy;
                const float fxi = gxi - floorf(gxi), fyi = gyi - floorf(gyi);
                const int sel[5] = { 1, fx < 0.5f && gx > 1.0f, fy < 0.5f && gy > 1.0f,
                                     fxi < 0.5f && gxi > 1.0f, fyi < 0.5f && gyi > 1.0f };
                if (!sel[o]) continue;
                struct ref_entry *e = &out[n++];
                e->b = (int)row[0];
                e->cls = (int)row[1];
                e->a = a;
                e->gi = ref_cell(gx - ox[o], d->nx[l] - 1);
                e->gj = ref_cell(gy - oy[o], d->ny[l] - 1);
                e->tb[0] = (double)(gx - (float)e->gi);
                e->tb[1] = (double)(gy - (float)e->gj);
                e->tb[2] = gw;
                e->tb[3] = gh;
            }
    return n;
}

static double sigd(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* PyTorch's BCE-with-logits with pos_weight. */
static double bced(double x, double t, double pw)
{
    const double lw = 1.0 + (pw - 1.0) * t;
    return (1.0 - t) * x + lw * (log1p(exp(-fabs(x))) + fmax(-x, 0.0));
}

/* out[KERN_YOLO_OUT_N] in double (status 0). */
static void ref_loss(const struct kern_yolo_loss *d, const float *const *p, const float *t, int nt,
                     double *out)
{
    const int no = d->nc + 5;
    double lbox = 0, lobj = 0, lcls = 0;
    static struct ref_entry ent[4096];
    g_al.mode = g_freeze;
    if (g_freeze) g_al.n = 0;
    if (g_freeze == 1) g_n_tobj = 0;
    int tobj_i = 0;
    for (int l = 0; l < d->nl; l++) {
        const int n = ref_build(d, l, t, nt, ent);
        const size_t cells = (size_t)d->bs * d->na * d->ny[l] * d->nx[l];
        double *tobj = calloc(cells, sizeof *tobj);
        double sb = 0, sc = 0;
        for (int e = 0; e < n; e++) {
            const size_t cell =
                (((size_t)ent[e].b * d->na + ent[e].a) * d->ny[l] + ent[e].gj) * d->nx[l] +
                ent[e].gi;
            const float *ps = p[l] + cell * no;
            const double pb[4] = { 2 * sigd(ps[0]) - 0.5, 2 * sigd(ps[1]) - 0.5,
                                   pow(2 * sigd(ps[2]), 2) * d->anchors[l][ent[e].a][0],
                                   pow(2 * sigd(ps[3]), 2) * d->anchors[l][ent[e].a][1] };
            const double ci = tu_ciou_ref(pb, ent[e].tb, &g_al);
            sb += 1 - ci;
            const double io = fmax(ci, 0.0);
            tobj[cell] = d->gr < 1 ? (1 - (double)d->gr) + (double)d->gr * io : io;
            if (d->nc > 1)
                for (int k = 0; k < d->nc; k++)
                    sc += bced(ps[5 + k],
                               k == ent[e].cls ? 1 - 0.5 * d->label_smoothing
                                               : 0.5 * d->label_smoothing,
                               d->cls_pw);
        }
        /* Detached targets: recorded once, replayed while differentiating. */
        for (size_t c = 0; c < cells; c++) {
            if (g_freeze == 1 && tobj[c] != 0.0 && g_n_tobj < 4096) {
                g_tobj_cell[g_n_tobj] = (int)(c + (size_t)l * 100000);
                g_tobj_val[g_n_tobj++] = tobj[c];
            }
        }
        if (g_freeze == 2) {
            memset(tobj, 0, cells * sizeof *tobj);
            for (int i = 0; i < g_n_tobj; i++)
                if (g_tobj_cell[i] / 100000 == l) tobj[g_tobj_cell[i] % 100000] = g_tobj_val[i];
        }
        (void)tobj_i;
        if (n) {
            lbox += sb / n;
            if (d->nc > 1) lcls += sc / ((double)n * d->nc);
        }
        double so = 0;
        for (size_t c = 0; c < cells; c++)
            so += bced(p[l][c * no + 4], tobj[c], d->obj_pw);
        lobj += d->balance[l] * so / (double)cells;
        free(tobj);
    }
    out[KERN_YOLO_OUT_RAW_BOX] = lbox;
    out[KERN_YOLO_OUT_RAW_OBJ] = lobj;
    out[KERN_YOLO_OUT_RAW_CLS] = lcls;
    out[KERN_YOLO_OUT_LBOX] = lbox * d->box;
    out[KERN_YOLO_OUT_LOBJ] = lobj * d->obj;
    out[KERN_YOLO_OUT_LCLS] = lcls * d->cls;
    out[KERN_YOLO_OUT_TOTAL] = (lbox * d->box + lobj * d->obj + lcls * d->cls) * d->bs;
    out[KERN_YOLO_OUT_STATUS] = 0;
}

/* ---- helpers ---- */

struct problem {
    struct kern_yolo_loss d;
    float *p[KERN_YOLO_MAX_LEVELS], *dp[KERN_YOLO_MAX_LEVELS];
    size_t len[KERN_YOLO_MAX_LEVELS];
    float t[6 * 64];
    int nt;
    void *scratch;
    size_t bytes;
};

static void *alloc16(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        printf("Bail out! out of memory\n");
        exit(99);
    }
    return p;
}

static void problem_alloc(struct problem *P, float scale)
{
    for (int l = 0; l < P->d.nl; l++) {
        P->len[l] = (size_t)P->d.bs * P->d.na * P->d.ny[l] * P->d.nx[l] * (P->d.nc + 5);
        P->p[l] = kt_alloc(P->len[l]);
        P->dp[l] = kt_alloc(P->len[l]);
        kt_fill(P->p[l], P->len[l], -scale, scale);
        kt_poison(P->dp[l], P->len[l]);
    }
    if (kern_ref_yolo_loss_scratch_size(g_ctx, &P->d, &P->bytes) < 0) {
        printf("Bail out! scratch size\n");
        exit(99);
    }
    P->scratch = alloc16(P->bytes);
}

static void problem_free(struct problem *P)
{
    for (int l = 0; l < P->d.nl; l++) {
        free(P->p[l]);
        free(P->dp[l]);
    }
    free(P->scratch);
}

/* A random small problem: shapes, gains, targets (a share of them on cell borders). */
static void problem_random(struct problem *P, int weighted)
{
    memset(P, 0, sizeof *P);
    const int nl = kt_randint(1, 3), na = kt_randint(1, 3), nc = kt_randint(1, 4);
    const int bs = kt_randint(1, 2);
    kern_yolo_loss_init(&P->d, nl, na, nc, bs, 12);
    for (int l = 0; l < nl; l++) {
        P->d.ny[l] = kt_randint(2, 6);
        P->d.nx[l] = kt_randint(2, 6);
        P->d.balance[l] = kt_uniform(0.2f, 4.0f);
        for (int a = 0; a < na; a++) {
            P->d.anchors[l][a][0] = kt_uniform(0.3f, 3.0f);
            P->d.anchors[l][a][1] = kt_uniform(0.3f, 3.0f);
        }
    }
    P->d.box = kt_uniform(0.02f, 0.1f);
    P->d.obj = kt_uniform(0.5f, 1.5f);
    P->d.cls = kt_uniform(0.2f, 0.8f);
    P->d.label_smoothing = kt_randint(0, 1) ? 0.1f : 0.0f;
    if (weighted) {
        P->d.cls_pw = kt_uniform(0.5f, 2.0f);
        P->d.obj_pw = kt_uniform(0.5f, 2.0f);
        P->d.gr = kt_uniform(0.2f, 0.9f);
    }
    P->nt = kt_randint(1, 12);
    for (int r = 0; r < P->nt; r++) {
        float *row = P->t + 6 * r;
        row[0] = (float)kt_randint(0, bs - 1);
        row[1] = (float)kt_randint(0, nc - 1);
        /* A third on the quarter grid lines (exact cell borders on grids of 2, 4). */
        row[2] = kt_randint(0, 2) ? kt_uniform(0.0f, 1.0f) : (float)kt_randint(0, 4) / 4.0f;
        row[3] = kt_randint(0, 2) ? kt_uniform(0.0f, 1.0f) : (float)kt_randint(0, 4) / 4.0f;
        row[4] = kt_uniform(0.05f, 0.6f);
        row[5] = kt_uniform(0.05f, 0.6f);
    }
}

static int run(struct problem *P, float *out, unsigned accum, int with_grad)
{
    return kern_ref_yolo_loss(g_ctx, &P->d, with_grad ? P->dp : NULL, out,
                              (const float *const *)P->p, P->t, &P->nt, P->scratch, P->bytes,
                              accum);
}

static int close_d(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fabs(want) + 1e-7;
}

/* ---- the tests ---- */

struct want {
    int b, a, gj, gi, cls;
    float tx, ty;
};

static void test_hand_build(void)
{
    /* One 4x4 level, anchors 1x1 and 3x3, two images, three classes. */
    struct kern_yolo_loss d;
    kern_yolo_loss_init(&d, 1, 2, 3, 2, 4);
    d.ny[0] = d.nx[0] = 4;
    d.anchors[0][0][0] = d.anchors[0][0][1] = 1.0f;
    d.anchors[0][1][0] = d.anchors[0][1][1] = 3.0f;
    /*
     * T1 (image 0, class 0): g = (1.2, 2.2), 1x1 -> both anchors (ratios 1, 3); frac 0.2 in x and
     * y and g > 1: left (gi 0) and up (gj 1); right, down: frac(2.8), frac(1.8) = 0.8, no.
     * T2 (image 1, class 2): the bottom-right corner g = (4, 4), 2x2 -> both anchors (2, 1.5);
     * centre trunc(4) clamps to 3; left: frac 0, g > 1: trunc(3.5) = 3, the same cell; up
     * likewise; right/down: nx - gx = 0, no. So T2 hits (b1, a, 3, 3) three times per anchor,
     * tbox (1, 1) every time.
     * T3 (image 0, class 1): exactly on a border x = 0.5 -> gx = 2.0, y = 0.0 -> gy = 0; 0.25 x
     * 0.25 (1x1 -> anchors 0 and 1). Centre gi 2, gj 0; left: frac 0, gx > 1: trunc(1.5) = 1,
     * tx 1.0; up: gy = 0, no; right: nx - gx = 2, frac 0: trunc(2.5) = 2, the centre's cell
     * again; down: ny - gy = 4, frac 0: trunc(0.5) = 0, the centre's cell.
     */
    const float t[3 * 6] = { 0,    0,    0.30f, 0.55f, 0.25f, 0.25f, 1,    2,     1.0f,
                             1.0f, 0.5f, 0.5f,  0,     1,     0.5f,  0.0f, 0.25f, 0.25f };
    const struct want w[] = {
        /* centre: a0 (T1, T2, T3), a1 (T1, T2, T3) */
        { 0, 0, 2, 1, 0, 0.2f, 0.2f },
        { 1, 0, 3, 3, 2, 1.0f, 1.0f },
        { 0, 0, 0, 2, 1, 0.0f, 0.0f },
        { 0, 1, 2, 1, 0, 0.2f, 0.2f },
        { 1, 1, 3, 3, 2, 1.0f, 1.0f },
        { 0, 1, 0, 2, 1, 0.0f, 0.0f },
        /* left */
        { 0, 0, 2, 0, 0, 1.2f, 0.2f },
        { 1, 0, 3, 3, 2, 1.0f, 1.0f },
        { 0, 0, 0, 1, 1, 1.0f, 0.0f },
        { 0, 1, 2, 0, 0, 1.2f, 0.2f },
        { 1, 1, 3, 3, 2, 1.0f, 1.0f },
        { 0, 1, 0, 1, 1, 1.0f, 0.0f },
        /* up */
        { 0, 0, 1, 1, 0, 0.2f, 1.2f },
        { 1, 0, 3, 3, 2, 1.0f, 1.0f },
        { 0, 1, 1, 1, 0, 0.2f, 1.2f },
        { 1, 1, 3, 3, 2, 1.0f, 1.0f },
        /* right: T3 only */
        { 0, 0, 0, 2, 1, 0.0f, 0.0f },
        { 0, 1, 0, 2, 1, 0.0f, 0.0f },
        /* down: T3 only */
        { 0, 0, 0, 2, 1, 0.0f, 0.0f },
        { 0, 1, 0, 2, 1, 0.0f, 0.0f },
    };
    const int nw = (int)(sizeof w / sizeof w[0]);
    size_t bytes = 0;
    kern_ref_yolo_loss_scratch_size(NULL, &d, &bytes);
    void *s = alloc16(bytes);
    is_int(kern_ref_yolo_build_targets(&d, s, bytes, t, 3), nw, "hand example: %d entries", nw);
    struct kern_yolo_entries e;
    ok(kern_ref_yolo_loss_entries(&d, s, bytes, 0, &e) == 0 && e.n == nw, "entries readable");
    int bad = 0;
    for (int i = 0; i < nw && i < e.n; i++) {
        const float *tb = e.tbox + 4 * i;
        const float wh = w[i].b == 1 ? 2.0f : 1.0f;
        if (e.b[i] != w[i].b || e.a[i] != w[i].a || e.gj[i] != w[i].gj || e.gi[i] != w[i].gi ||
            e.cls[i] != w[i].cls || fabsf(tb[0] - w[i].tx) > 1e-6f ||
            fabsf(tb[1] - w[i].ty) > 1e-6f || tb[2] != wh || tb[3] != wh) {
            if (bad++ < 4)
                tap_diag("entry %d: got b%d a%d gj%d gi%d c%d tbox %g %g %g %g", i, e.b[i], e.a[i],
                         e.gj[i], e.gi[i], e.cls[i], tb[0], tb[1], tb[2], tb[3]);
        }
    }
    ok(bad == 0, "hand example: every entry (b, a, gj, gi, cls, tbox) in PyTorch's order, "
                 "border clamps, border neighbours");
    is_int(kern_ref_yolo_build_targets(&d, s, bytes, NULL, 0), 0, "no targets: no entries");
    kern_ref_yolo_loss_entries(&d, s, bytes, 0, &e);
    is_int(e.n, 0, "the views see the empty build");
    free(s);
}

/* Values against the double re-implementation, random shapes; weighted: pos weights and gr. */
static void test_values(int weighted)
{
    struct problem P;
    problem_random(&P, weighted);
    problem_alloc(&P, 3.0f);
    float out[KERN_YOLO_OUT_N];
    kt_poison(out, KERN_YOLO_OUT_N);
    double want[KERN_YOLO_OUT_N];
    const int rc = run(&P, out, 0, 1);
    ref_loss(&P.d, (const float *const *)P.p, P.t, P.nt, want);
    tap_diag("values: nl %d na %d nc %d bs %d nt %d%s", P.d.nl, P.d.na, P.d.nc, P.d.bs, P.nt,
             weighted ? ", pos weights and gr" : "");
    int good = rc == 0;
    for (int k = 0; k < KERN_YOLO_OUT_N; k++) {
        if (!close_d(out[k], want[k], 2e-5)) {
            good = 0;
            tap_diag("out[%d]: got %.9g want %.9g", k, (double)out[k], want[k]);
        }
    }
    ok(good, "%s: the eight outputs match the double re-implementation (rel 2e-5)",
       weighted ? "weighted" : "plain");
    size_t nonfin = 0;
    for (int l = 0; l < P.d.nl; l++)
        nonfin += kt_count_nonfinite(P.dp[l], P.len[l]);
    ok(nonfin == 0, "every gradient element written (no canary left)");
    problem_free(&P);
}

/* Central differences of the double re-implementation (alpha and tobj held) vs the gradient. */
static void test_grad(int weighted)
{
    struct problem P;
    problem_random(&P, weighted);
    problem_alloc(&P, 1.5f);
    float out[KERN_YOLO_OUT_N];
    ok(run(&P, out, 0, 1) == 0, "gradient run");
    double base[KERN_YOLO_OUT_N];
    g_freeze = 1;
    ref_loss(&P.d, (const float *const *)P.p, P.t, P.nt, base);
    g_freeze = 2;
    double num = 0, den = 0, worst = 0, amax = 0;
    size_t checked = 0, bad = 0, kinks = 0;
    for (int l = 0; l < P.d.nl; l++) {
        for (size_t i = 0; i < P.len[l]; i++) {
            /* Two step sizes: where they disagree a min/max or clamp of CIoU switches within the
             * step (a kink, where autograd's one-sided choice is as right as any): skipped and
             * counted. Elsewhere the smaller step's estimate is the reference. */
            double fd[2];
            for (int k = 0; k < 2; k++) {
                const float keep = P.p[l][i], h = k ? 2.5e-5f : 1e-4f;
                double lp[KERN_YOLO_OUT_N], lm[KERN_YOLO_OUT_N];
                P.p[l][i] = keep + h;
                ref_loss(&P.d, (const float *const *)P.p, P.t, P.nt, lp);
                P.p[l][i] = keep - h;
                ref_loss(&P.d, (const float *const *)P.p, P.t, P.nt, lm);
                P.p[l][i] = keep;
                fd[k] = (lp[KERN_YOLO_OUT_TOTAL] - lm[KERN_YOLO_OUT_TOTAL]) /
                        ((double)(keep + h) - (double)(keep - h));
            }
            if (!(fabs(fd[0] - fd[1]) <= 1e-5 * fabs(fd[1]) + 1e-8)) {
                kinks++;
                continue;
            }
            const double an = P.dp[l][i], e = fabs(fd[1] - an);
            num += e * e;
            den += fd[1] * fd[1];
            worst = fmax(worst, e);
            amax = fmax(amax, fabs(fd[1]));
            checked++;
            if (!(e <= 1e-4 * fabs(fd[1]) + 2e-7) && bad++ < 4)
                tap_diag("level %d element %zu (column %zu): fd %.9g analytic %.9g", l, i,
                         i % (size_t)(P.d.nc + 5), fd[1], an);
        }
    }
    g_freeze = 0;
    const double rel = sqrt(num / (den > 0 ? den : 1));
    ok(den > 0 && rel < 1e-5 && bad == 0 && kinks * 50 <= checked,
       "%s: d total / d p vs central differences on %zu elements (rel L2 %.3g, max abs %.3g of "
       "%.3g, %zu beyond 2e-7 + 1e-4 rel; %zu at kinks skipped, at most 2%%)",
       weighted ? "weighted" : "plain", checked, rel, worst, amax, bad, kinks);
    problem_free(&P);
}

static void test_empty(void)
{
    struct problem P;
    problem_random(&P, 0);
    P.nt = 0;
    problem_alloc(&P, 2.0f);
    float out[KERN_YOLO_OUT_N];
    double want[KERN_YOLO_OUT_N];
    ok(run(&P, out, 0, 1) == 0, "empty targets: runs");
    ref_loss(&P.d, (const float *const *)P.p, P.t, 0, want);
    ok(out[KERN_YOLO_OUT_LBOX] == 0.0f && out[KERN_YOLO_OUT_LCLS] == 0.0f &&
           close_d(out[KERN_YOLO_OUT_LOBJ], want[KERN_YOLO_OUT_LOBJ], 2e-5) &&
           close_d(out[KERN_YOLO_OUT_TOTAL], want[KERN_YOLO_OUT_TOTAL], 2e-5),
       "empty targets: only the objectness term (%.7g vs %.7g)", (double)out[KERN_YOLO_OUT_LOBJ],
       want[KERN_YOLO_OUT_LOBJ]);
    int zero = 1;
    for (int l = 0; l < P.d.nl; l++)
        for (size_t i = 0; i < P.len[l]; i++)
            if (i % (size_t)(P.d.nc + 5) != 4) zero &= P.dp[l][i] == 0.0f;
    ok(zero, "empty targets: box and class gradients are zero");
    problem_free(&P);
}

/* Two targets on one cell and anchor: the later one's CIoU is the objectness target. */
static void test_duplicates(void)
{
    struct problem P;
    memset(&P, 0, sizeof P);
    kern_yolo_loss_init(&P.d, 1, 1, 3, 1, 4);
    P.d.ny[0] = P.d.nx[0] = 4;
    P.d.anchors[0][0][0] = P.d.anchors[0][0][1] = 1.0f;
    /* Same centre, cell (2, 2) and no left/up neighbour (frac 0.6); different sizes. */
    const float t[12] = { 0, 0, 0.65f, 0.65f, 0.30f, 0.30f, 0, 1, 0.65f, 0.65f, 0.15f, 0.40f };
    memcpy(P.t, t, sizeof t);
    P.nt = 2;
    problem_alloc(&P, 1.0f);
    float out[KERN_YOLO_OUT_N];
    ok(run(&P, out, 0, 1) == 0, "duplicates: runs");
    struct kern_yolo_entries e;
    kern_ref_yolo_loss_entries(&P.d, P.scratch, P.bytes, 0, &e);
    ok(e.n >= 2 && e.gj[0] == 2 && e.gi[0] == 2 && e.gj[1] == 2 && e.gi[1] == 2 &&
           fabsf(e.ciou[0] - e.ciou[1]) > 1e-3f,
       "duplicates: entries 0 and 1 share cell (2, 2) with different CIoU (%g, %g)",
       (double)e.ciou[0], (double)e.ciou[1]);
    const size_t cell = 2 * 4 + 2, no = 8;
    const float x = P.p[0][cell * no + 4], s = 1.0f / (1.0f + expf(-x));
    const float scale = P.d.obj * P.d.balance[0] / 16.0f;
    const float want_last = (s - fmaxf(e.ciou[1], 0.0f)) * scale;
    const float want_first = (s - fmaxf(e.ciou[0], 0.0f)) * scale;
    ok(fabsf(P.dp[0][cell * no + 4] - want_last) <= 1e-6f * fabsf(want_last) + 1e-9f &&
           fabsf(want_first - want_last) > 1e-7f,
       "duplicates: the last entry in order wins tobj (%g, want %g; the first would give %g)",
       (double)P.dp[0][cell * no + 4], (double)want_last, (double)want_first);
    /* Both entries' class gradients land on the cell: class 0 sees cp once and cn once. */
    const float gcls = (float)((double)P.d.cls / ((double)e.n * 3.0));
    const float x5 = P.p[0][cell * no + 5], s5 = 1.0f / (1.0f + expf(-x5));
    const float want5 = (s5 - 1.0f) * gcls + (s5 - 0.0f) * gcls;
    ok(fabsf(P.dp[0][cell * no + 5] - want5) <= 1e-6f,
       "duplicates: class gradients accumulate on the shared cell (%g vs %g)",
       (double)P.dp[0][cell * no + 5], (double)want5);
    problem_free(&P);
}

static void test_accum_workspace_determinism(void)
{
    struct problem P;
    problem_random(&P, 1);
    problem_alloc(&P, 2.0f);
    float out[KERN_YOLO_OUT_N], out2[KERN_YOLO_OUT_N];
    run(&P, out, 0, 1);
    float *g[KERN_YOLO_MAX_LEVELS], *r[KERN_YOLO_MAX_LEVELS];
    for (int l = 0; l < P.d.nl; l++) {
        g[l] = kt_alloc(P.len[l]);
        memcpy(g[l], P.dp[l], P.len[l] * sizeof(float));
        r[l] = kt_alloc(P.len[l]);
        kt_fill(r[l], P.len[l], -1.0f, 1.0f);
        memcpy(P.dp[l], r[l], P.len[l] * sizeof(float));
    }
    ok(run(&P, out2, KERN_ACCUM_DX, 1) == 0, "accumulate: runs");
    size_t bad = 0;
    for (int l = 0; l < P.d.nl; l++)
        for (size_t i = 0; i < P.len[l]; i++) {
            const float want = r[l][i] + g[l][i];
            bad += !(fabsf(P.dp[l][i] - want) <= 1e-6f * (fabsf(r[l][i]) + fabsf(g[l][i])) + 1e-8f);
        }
    ok(bad == 0 && !memcmp(out, out2, sizeof out), "KERN_ACCUM_DX adds the gradient (%zu off)",
       bad);
    /* The context's workspace instead of a scratch argument; and bitwise repeatability. */
    struct kern_ctx *wctx = kt_ctx(P.bytes);
    for (int l = 0; l < P.d.nl; l++)
        kt_poison(P.dp[l], P.len[l]);
    ok(kern_ref_yolo_loss(wctx, &P.d, P.dp, out2, (const float *const *)P.p, P.t, &P.nt, NULL, 0,
                          0) == 0,
       "scratch NULL: the context's workspace");
    int same = !memcmp(out, out2, sizeof out);
    for (int l = 0; l < P.d.nl; l++)
        same &= !memcmp(P.dp[l], g[l], P.len[l] * sizeof(float));
    ok(same, "bitwise repeatable, and the same through the workspace");
    struct kern_ctx *bare = kt_ctx(0);
    is_int(kern_ref_yolo_loss(bare, &P.d, P.dp, out2, (const float *const *)P.p, P.t, &P.nt, NULL,
                              0, 0),
           -KERN_EWORKSPACE, "scratch NULL without a workspace: -KERN_EWORKSPACE");
    kern_ctx_destroy(bare);
    kern_ctx_destroy(wctx);
    /* Loss only (dp NULL) gives the same values. */
    ok(run(&P, out2, 0, 0) == 0 && !memcmp(out, out2, sizeof out), "dp NULL: same loss");
    for (int l = 0; l < P.d.nl; l++) {
        free(g[l]);
        free(r[l]);
    }
    problem_free(&P);
}

/* A problem of 64.5k anchor cells (batch 4, 3 anchors, 64/32/16 grids), so that the context's
 * threads take shares of the objectness passes: the same outputs and gradient bits on 1 and 3
 * threads, plain and accumulating, and the outputs still the double re-implementation's. */
static void test_threads(void)
{
    struct problem P;
    problem_random(&P, 0);
    const int g[3] = { 64, 32, 16 };
    P.d.nl = 3;
    P.d.na = 3;
    P.d.bs = 4;
    for (int l = 0; l < 3; l++) {
        P.d.ny[l] = P.d.nx[l] = g[l];
        P.d.balance[l] = kt_uniform(0.2f, 4.0f);
        for (int a = 0; a < 3; a++) {
            P.d.anchors[l][a][0] = kt_uniform(0.3f, 3.0f);
            P.d.anchors[l][a][1] = kt_uniform(0.3f, 3.0f);
        }
    }
    for (int r = 0; r < P.nt; r++) {
        P.t[6 * r] = (float)kt_randint(0, 3);
        P.t[6 * r + 1] = (float)kt_randint(0, P.d.nc - 1);
    }
    problem_alloc(&P, 3.0f);
    struct kern_ctx *const c3 = kt_ctx_threads(3);
    float out1[KERN_YOLO_OUT_N], out3[KERN_YOLO_OUT_N];
    float *d1[KERN_YOLO_MAX_LEVELS], *d3[KERN_YOLO_MAX_LEVELS];
    for (int acc = 0; acc < 2; acc++) {
        const unsigned accum = acc ? KERN_ACCUM_DX : 0;
        for (int l = 0; l < 3; l++) {
            d1[l] = kt_alloc(P.len[l]);
            d3[l] = kt_alloc(P.len[l]);
            kt_fill(d1[l], P.len[l], -1.0f, 1.0f);
            memcpy(d3[l], d1[l], P.len[l] * sizeof(float));
        }
        const int r1 = kern_ref_yolo_loss(g_ctx, &P.d, d1, out1, (const float *const *)P.p, P.t,
                                          &P.nt, P.scratch, P.bytes, accum);
        const int r3 = kern_ref_yolo_loss(c3, &P.d, d3, out3, (const float *const *)P.p, P.t, &P.nt,
                                          P.scratch, P.bytes, accum);
        int same = r1 == 0 && r3 == 0 && !memcmp(out1, out3, sizeof out1);
        for (int l = 0; l < 3; l++) {
            same &= !memcmp(d1[l], d3[l], P.len[l] * sizeof(float));
            free(d1[l]);
            free(d3[l]);
        }
        ok(same, "64.5k cells%s: the same outputs and gradient bits on 1 and 3 threads",
           acc ? ", accumulating" : "");
    }
    double want[KERN_YOLO_OUT_N];
    ref_loss(&P.d, (const float *const *)P.p, P.t, P.nt, want);
    int good = 1;
    for (int k = 0; k < KERN_YOLO_OUT_N; k++)
        if (!close_d(out3[k], want[k], 2e-5)) {
            good = 0;
            tap_diag("out[%d]: got %.9g want %.9g", k, (double)out3[k], want[k]);
        }
    ok(good, "64.5k cells, 3 threads: the outputs match the double re-implementation (rel 2e-5)");
    kern_ctx_destroy(c3);
    problem_free(&P);
}

/* Element (b, a, cell, k) of a level in the channel-blocked layout (kern_yolo_loss.blk), and
 * that layout's floats: written out here from the contract, not from the op's code. */
static size_t blk_at(const struct kern_yolo_loss *d, int l, int blk, size_t b, size_t a,
                     size_t cell, size_t k)
{
    const size_t hw = (size_t)d->ny[l] * (size_t)d->nx[l], no = (size_t)d->nc + 5;
    const size_t nb = ((size_t)d->na * no + (size_t)blk - 1) / (size_t)blk;
    const size_t ch = a * no + k;
    return ((b * nb + ch / (size_t)blk) * hw + cell) * (size_t)blk + ch % (size_t)blk;
}

static size_t blk_len(const struct kern_yolo_loss *d, int l, int blk)
{
    const size_t hw = (size_t)d->ny[l] * (size_t)d->nx[l], no = (size_t)d->nc + 5;
    return (size_t)d->bs * (((size_t)d->na * no + (size_t)blk - 1) / (size_t)blk) * hw *
           (size_t)blk;
}

/* Copies a level from (bs, na, ny, nx, no) into the blocked layout (to 1) or back (to 0); the
 * blocked pad lanes are left as they are. */
static void blk_copy(const struct kern_yolo_loss *d, int l, int blk, float *std, float *bl, int to)
{
    const size_t hw = (size_t)d->ny[l] * (size_t)d->nx[l], no = (size_t)d->nc + 5;
    size_t i = 0;
    for (size_t b = 0; b < (size_t)d->bs; b++)
        for (size_t a = 0; a < (size_t)d->na; a++)
            for (size_t c = 0; c < hw; c++)
                for (size_t k = 0; k < no; k++, i++) {
                    float *const q = bl + blk_at(d, l, blk, b, a, c, k);
                    if (to)
                        *q = std[i];
                    else
                        std[i] = *q;
                }
}

/*
 * The loss on the Detect outputs in a channel-blocked layout (blk 16, 8 and 5, the last leaving
 * a block that straddles two anchors' rows): the same outputs and gradient bits as on the same
 * values in (bs, na, ny, nx, no), NaN in the pad lanes not read, the pad lanes of the gradient
 * written 0 (or left as they were, accumulating); with weighted BCEs, 1 and 3 threads, and at
 * yolov5's 80 classes.
 */
static void test_blocked(void)
{
    struct kern_ctx *const c3 = kt_ctx_threads(3);
    const int blks[3] = { 16, 8, 5 };
    int n_same = 0, n_runs = 0, pads = 1;
    for (int it = 0; it < 12; it++) {
        struct problem P;
        problem_random(&P, it % 2);
        if (it >= 8) { /* yolov5's head: 3 anchors of 85 */
            P.d.na = 3;
            P.d.nc = 80;
            for (int l = 0; l < P.d.nl; l++)
                for (int a = 0; a < 3; a++) {
                    P.d.anchors[l][a][0] = kt_uniform(0.3f, 3.0f);
                    P.d.anchors[l][a][1] = kt_uniform(0.3f, 3.0f);
                }
            for (int r = 0; r < P.nt; r++)
                P.t[6 * r + 1] = (float)kt_randint(0, 79);
        }
        if (it % 4 == 3) { /* enough cells for the threads to share the objectness passes */
            P.d.bs = 2;
            for (int l = 0; l < P.d.nl; l++)
                P.d.ny[l] = P.d.nx[l] = 24 >> l;
        }
        problem_alloc(&P, 3.0f);
        const int blk = blks[it % 3];
        const unsigned accum = it % 3 == 1 ? KERN_ACCUM_DX : 0;
        struct kern_ctx *const ctx = it % 2 ? c3 : g_ctx;
        float *bp[KERN_YOLO_MAX_LEVELS], *bd[KERN_YOLO_MAX_LEVELS], *back[KERN_YOLO_MAX_LEVELS];
        size_t bl[KERN_YOLO_MAX_LEVELS];
        for (int l = 0; l < P.d.nl; l++) {
            bl[l] = blk_len(&P.d, l, blk);
            bp[l] = kt_alloc(bl[l]);
            bd[l] = kt_alloc(bl[l]);
            back[l] = kt_alloc(P.len[l]);
            for (size_t i = 0; i < bl[l]; i++) {
                bp[l][i] = NAN;  /* pad lanes: never read */
                bd[l][i] = 7.0f; /* pad lanes: 0 unless accumulating */
            }
            kt_fill(P.dp[l], P.len[l], -1.0f, 1.0f);
            blk_copy(&P.d, l, blk, P.p[l], bp[l], 1);
            blk_copy(&P.d, l, blk, P.dp[l], bd[l], 1);
        }
        float out0[KERN_YOLO_OUT_N], out1[KERN_YOLO_OUT_N];
        const int r0 = kern_ref_yolo_loss(ctx, &P.d, P.dp, out0, (const float *const *)P.p, P.t,
                                          &P.nt, P.scratch, P.bytes, accum);
        struct kern_yolo_loss d = P.d;
        d.blk = blk;
        size_t need = 0;
        int r1 = kern_ref_yolo_loss_scratch_size(g_ctx, &d, &need);
        if (r1 == 0 && need <= P.bytes)
            r1 = kern_ref_yolo_loss(ctx, &d, bd, out1, (const float *const *)bp, P.t, &P.nt,
                                    P.scratch, P.bytes, accum);
        int same = r0 == 0 && r1 == 0 && !memcmp(out0, out1, sizeof out0);
        for (int l = 0; l < P.d.nl; l++) {
            blk_copy(&P.d, l, blk, back[l], bd[l], 0);
            same &= !memcmp(back[l], P.dp[l], P.len[l] * sizeof(float));
            /* the pad lanes: every element not named by the copy */
            for (size_t i = 0; i < bl[l]; i++)
                bp[l][i] = 0.0f;
            for (size_t i = 0; i < P.len[l]; i++)
                back[l][i] = 1.0f;
            blk_copy(&P.d, l, blk, back[l], bp[l], 1);
            for (size_t i = 0; i < bl[l]; i++)
                if (bp[l][i] == 0.0f && bd[l][i] != (accum ? 7.0f : 0.0f)) pads = 0;
            free(bp[l]);
            free(bd[l]);
            free(back[l]);
        }
        if (!same)
            tap_diag("run %d: blk %d na %d nc %d accum %u rc %d %d", it, blk, P.d.na, P.d.nc, accum,
                     r0, r1);
        n_same += same;
        n_runs++;
        problem_free(&P);
    }
    ok(n_same == n_runs,
       "blocked layout (16, 8, 5 lanes): the same outputs and gradient bits as "
       "the reshaped tensors, %d of %d problems",
       n_same, n_runs);
    ok(pads, "blocked layout: pad lanes of the gradient written 0, or kept when accumulating");
    struct kern_yolo_loss d;
    kern_yolo_loss_init(&d, 1, 1, 3, 1, 4);
    d.ny[0] = d.nx[0] = 2;
    d.anchors[0][0][0] = d.anchors[0][0][1] = 1.0f;
    d.blk = 65;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "blk 65 refused");
    d.blk = -1;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "blk -1 refused");
    kern_ctx_destroy(c3);
}

/*
 * raw16 (kern_loss.h): the loss read from and written to the bf16 executor's Detect outputs in
 * place, NCHW and NHWC: the same outputs and gradient bits as detect16_fwd, the float32 op and
 * detect16_bwd; every gradient element written; accumulation, a blocked layout and an unknown
 * layout refused.
 */
static void test_raw16(void)
{
    int n_same = 0, n_runs = 0;
    for (int it = 0; it < 8; it++) {
        struct problem P;
        problem_random(&P, it % 2);
        problem_alloc(&P, 3.0f);
        const int layout = it % 2 ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
        uint16_t *raw[KERN_YOLO_MAX_LEVELS], *want[KERN_YOLO_MAX_LEVELS],
            *got[KERN_YOLO_MAX_LEVELS];
        struct kern_detect det[KERN_YOLO_MAX_LEVELS];
        int rc = 0;
        for (int l = 0; l < P.d.nl; l++) {
            det[l] = (struct kern_detect){ .bs = P.d.bs,
                                           .na = P.d.na,
                                           .no = P.d.nc + 5,
                                           .ny = P.d.ny[l],
                                           .nx = P.d.nx[l],
                                           .stride = 8 };
            raw[l] = alloc16(P.len[l] * 2);
            want[l] = alloc16(P.len[l] * 2);
            got[l] = alloc16(P.len[l] * 2);
            rc |= kern_ref_cast_f32_bf16(g_ctx, raw[l], P.p[l], P.len[l]); /* any bf16 values */
            memset(got[l], 0xff, P.len[l] * 2);
            rc |= kern_ref_detect16_fwd(g_ctx, &det[l], layout, P.p[l], raw[l]);
        }
        float out0[KERN_YOLO_OUT_N], out1[KERN_YOLO_OUT_N];
        rc |= run(&P, out0, 0, 1);
        for (int l = 0; l < P.d.nl; l++)
            rc |= kern_ref_detect16_bwd(g_ctx, &det[l], layout, want[l], P.dp[l]);
        struct kern_yolo_loss d = P.d;
        d.raw16 = 1;
        d.raw_layout = layout;
        size_t need = 0;
        rc |= kern_ref_yolo_loss_scratch_size(g_ctx, &d, &need);
        void *const sc = alloc16(need);
        if (!rc)
            rc = kern_ref_yolo_loss(g_ctx, &d, (float *const *)got, out1, (const float *const *)raw,
                                    P.t, &P.nt, sc, need, 0);
        int same = !rc && !memcmp(out0, out1, sizeof out0);
        for (int l = 0; l < P.d.nl; l++)
            same &= !memcmp(want[l], got[l], P.len[l] * 2);
        if (!same) tap_diag("raw16 run %d: layout %d rc %d", it, layout, rc);
        n_same += same;
        n_runs++;
        if (it == 0) {
            is_int(kern_ref_yolo_loss(g_ctx, &d, (float *const *)got, out1,
                                      (const float *const *)raw, P.t, &P.nt, sc, need,
                                      KERN_ACCUM_DX),
                   -EINVAL, "raw16: KERN_ACCUM_DX refused");
            is_int(kern_ref_yolo_loss(g_ctx, &d, (float *const *)got, out1,
                                      (const float *const *)raw, P.t, &P.nt, sc, need - 64, 0),
                   -KERN_EWORKSPACE, "raw16: a scratch without room for the float32 head refused");
        }
        free(sc);
        for (int l = 0; l < P.d.nl; l++)
            free(raw[l]), free(want[l]), free(got[l]);
        problem_free(&P);
    }
    ok(n_same == n_runs,
       "raw16 (bf16 NCHW and NHWC in place): the outputs and gradient bits of detect16, the "
       "float32 "
       "loss and detect16_bwd, every element written, %d of %d problems",
       n_same, n_runs);
    struct kern_yolo_loss d;
    kern_yolo_loss_init(&d, 1, 1, 3, 1, 4);
    d.ny[0] = d.nx[0] = 2;
    d.anchors[0][0][0] = d.anchors[0][0][1] = 1.0f;
    d.raw16 = 1;
    d.raw_layout = 2;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "raw16 with an unknown layout refused");
    d.raw_layout = KERN_LAYOUT_NHWC;
    d.blk = 8;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "raw16 with a blocked layout refused");
    d.blk = 0;
    d.raw16 = 2;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "raw16 2 refused");
}

static void test_errors(void)
{
    struct problem P;
    problem_random(&P, 0);
    problem_alloc(&P, 1.0f);
    float out[KERN_YOLO_OUT_N];
    kt_poison(out, KERN_YOLO_OUT_N);
    const int good_nt = P.nt;
    const int counts[4] = { -1, P.d.max_targets + 1, INT_MAX, INT_MIN };
    int all = 1;
    for (int i = 0; i < 4; i++) {
        P.nt = counts[i];
        all &= run(&P, out, 0, 1) == -EINVAL;
    }
    P.nt = good_nt;
    ok(all && kt_is_canary(out[0]) && kt_is_canary(P.dp[0][0]),
       "absurd counts (-1, max + 1, INT_MAX, INT_MIN) rejected with -EINVAL, nothing written");
    is_int(kern_ref_yolo_build_targets(&P.d, P.scratch, P.bytes, P.t, P.d.max_targets + 1), -EINVAL,
           "build_targets: count above max_targets rejected");
    const float keep = P.t[1];
    P.t[1] = (float)P.d.nc;
    is_int(run(&P, out, 0, 1), -EINVAL, "class >= nc rejected");
    P.t[1] = keep;
    P.t[0] = (float)P.d.bs;
    is_int(run(&P, out, 0, 1), -EINVAL, "image >= bs rejected");
    P.t[0] = 0;
    P.t[4] = NAN;
    is_int(run(&P, out, 0, 1), -EINVAL, "NaN in a row rejected");
    P.t[4] = -0.1f;
    is_int(run(&P, out, 0, 1), -EINVAL, "negative size rejected");
    P.t[4] = 0.2f;
    ok(kt_is_canary(out[0]), "nothing written on bad rows");
    is_int(kern_ref_yolo_loss(g_ctx, &P.d, P.dp, out, (const float *const *)P.p, P.t, &P.nt,
                              P.scratch, P.bytes - 1, 0),
           -KERN_EWORKSPACE, "scratch one byte short: -KERN_EWORKSPACE");
    is_int(kern_ref_yolo_loss(g_ctx, &P.d, P.dp, out, (const float *const *)P.p, P.t, &P.nt,
                              (char *)P.scratch + 4, P.bytes - 4, 0),
           -EINVAL, "misaligned scratch: -EINVAL");
    is_int(run(&P, out, 4u, 1), -EINVAL, "unknown accum bit: -EINVAL");
    struct kern_yolo_loss d = P.d;
    d.nl = 0;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "nl 0 refused");
    d = P.d;
    d.max_targets = INT_MAX / 2;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "max_targets beyond int32 slots refused");
    d = P.d;
    d.anchors[0][0][0] = 0.0f;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "zero anchor refused");
    d = P.d;
    d.gr = 1.5f;
    ok(kern_yolo_loss_check(&d) == -EINVAL, "gr > 1 refused");
    is_int(run(&P, out, 0, 1), 0, "the good problem still runs");
    ok(kern_ops_ref()->yolo_loss == kern_ref_yolo_loss &&
           kern_ops_ref()->yolo_loss_scratch_size == kern_ref_yolo_loss_scratch_size,
       "ops table carries the op");
    problem_free(&P);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 20261122u);
    g_ctx = kt_ctx(0);
    test_hand_build();
    for (int i = 0; i < 4; i++) {
        test_values(0);
        test_values(1);
    }
    for (int i = 0; i < 3; i++) {
        test_grad(0);
        test_grad(1);
    }
    test_empty();
    test_duplicates();
    test_accum_workspace_determinism();
    test_threads();
    test_blocked();
    test_raw16();
    test_errors();
    kern_ctx_destroy(g_ctx);
    return tap_done();
}
