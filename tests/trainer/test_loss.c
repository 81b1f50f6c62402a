/*
 * ComputeLoss (trainer/model/loss.h): build_targets on a hand-worked example (cells, neighbours,
 * borders, clamping, PyTorch's order), CIoU and the class BCE against a double-precision
 * re-derivation, the duplicate-cell rule, stability at large logits, the gradient against
 * central finite differences for each term, target validation, the gains train.py derives, and
 * the device entry (trn_loss_compute_dev) run through the CPU op table.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "loss.h"
#include "model_testutil.h"
#include "ciou_ref.h"
#include "tap.h"

static struct kern_ctx *ctx;

/* Deterministic uniform in [-1, 1). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* Two levels (4x4, 2x2), two anchors, three classes, two images. */
static struct trn_loss_cfg small_cfg(void)
{
    struct trn_loss_cfg c;
    memset(&c, 0, sizeof c);
    c.nl = 2;
    c.na = 2;
    c.nc = 3;
    c.bs = 2;
    c.ny[0] = c.nx[0] = 4;
    c.ny[1] = c.nx[1] = 2;
    c.anchors[0][0][0] = c.anchors[0][0][1] = 1.0f;
    c.anchors[0][1][0] = c.anchors[0][1][1] = 3.0f;
    c.anchors[1][0][0] = c.anchors[1][0][1] = 0.5f;
    c.anchors[1][1][0] = c.anchors[1][1][1] = 1.5f;
    c.balance[0] = 4.0f;
    c.balance[1] = 1.0f;
    c.box = 0.05f;
    c.obj = 1.0f;
    c.cls = 0.5f;
    c.anchor_t = 4.0f;
    c.label_smoothing = 0.0f;
    c.max_targets = 8;
    return c;
}

/* Target A: image 0, class 1, centre (0.3, 0.6), 0.25 x 0.25. Target B: image 1, class 2, on the
 * right border x = 1.0, y = 0.5, 0.5 x 1.0. Worked out by hand in check_build. */
static const float AB[2 * 6] = {
    0, 1, 0.3f, 0.6f, 0.25f, 0.25f, 1, 2, 1.0f, 0.5f, 0.5f, 1.0f,
};

struct want_entry {
    int b, a, gj, gi;
    float tx, ty;
};

static void expect_level(const struct trn_loss *L, int l, const struct want_entry *w, int n,
                         const float wh[][2])
{
    struct trn_loss_level lv;
    ok(trn_loss_level(L, l, &lv) == 0, "level %d readable", l);
    is_int(lv.n, n, "level %d: entry count", l);
    if (lv.n != n) return;
    int bad = 0;
    for (int e = 0; e < n; e++) {
        const float *tb = lv.tbox + 4 * e;
        const int want_cls = w[e].b == 0 ? 1 : 2;
        if (lv.b[e] != w[e].b || lv.a[e] != w[e].a || lv.gj[e] != w[e].gj || lv.gi[e] != w[e].gi ||
            lv.cls[e] != want_cls || fabsf(tb[0] - w[e].tx) > 1e-6f ||
            fabsf(tb[1] - w[e].ty) > 1e-6f || fabsf(tb[2] - wh[w[e].b][0]) > 1e-6f ||
            fabsf(tb[3] - wh[w[e].b][1]) > 1e-6f) {
            if (bad++ < 4)
                tap_diag("level %d entry %d: got b%d a%d gj%d gi%d c%d tbox %g %g %g %g", l, e,
                         lv.b[e], lv.a[e], lv.gj[e], lv.gi[e], lv.cls[e], tb[0], tb[1], tb[2],
                         tb[3]);
        }
    }
    ok(bad == 0, "level %d: every entry (b, a, gj, gi, cls, tbox) in PyTorch's order", l);
}

static void check_build(void)
{
    const struct trn_loss_cfg c = small_cfg();
    struct trn_loss *L = NULL;
    ok(trn_loss_create(&c, &L) == 0, "create");
    /*
     * Level 0 (4x4; anchors 1x1, 3x3). A: g = (1.2, 2.4), wh 1x1: both anchors match (ratios 1
     * and 3); frac(gx) = 0.2 -> left cell gi 0; frac(gy) = 0.4 -> up cell gj 1; right/down not.
     * B: g = (4.0, 2.0), wh 2x4: anchor 0 has ratio 4 (not < 4) and drops; anchor 1 matches.
     * Centre gi = 4 clamps to 3; left (frac 0, gx > 1) trunc(3.5) = 3; up (frac 0, gy = 2 > 1)
     * gj 1; right: nx - gx = 0, no; down: ny - gy = 2.0, frac 0 and > 1 -> trunc(2.5) = 2.
     * tbox = g - cell after the clamp: B's x target is 1.0 everywhere.
     */
    const struct want_entry l0[] = {
        { 0, 0, 2, 1, 0.2f, 0.4f }, /* centre, a0, A */
        { 0, 1, 2, 1, 0.2f, 0.4f }, /* centre, a1, A */
        { 1, 1, 2, 3, 1.0f, 0.0f }, /* centre, a1, B (clamped) */
        { 0, 0, 2, 0, 1.2f, 0.4f }, /* left, a0, A */
        { 0, 1, 2, 0, 1.2f, 0.4f }, /* left, a1, A */
        { 1, 1, 2, 3, 1.0f, 0.0f }, /* left, a1, B */
        { 0, 0, 1, 1, 0.2f, 1.4f }, /* up, a0, A */
        { 0, 1, 1, 1, 0.2f, 1.4f }, /* up, a1, A */
        { 1, 1, 1, 3, 1.0f, 1.0f }, /* up, a1, B */
        { 1, 1, 2, 3, 1.0f, 0.0f }, /* down, a1, B */
    };
    const float wh0[2][2] = { { 1.0f, 1.0f }, { 2.0f, 4.0f } };
    /*
     * Level 1 (2x2; anchors 0.5, 1.5). A: g = (0.6, 1.2), wh 0.5: both anchors; left no
     * (gx < 1); up: frac 0.2, gy > 1 -> gj 0; right: nx - gx = 1.4, frac 0.4 -> gi 1; down no.
     * B: g = (2, 1), wh 1x2: anchor 0 ratio 4 drops; centre clamps to gi 1, gj 1; left (frac 0,
     * gx > 1) trunc(1.5) = 1; up: gy = 1 is not > 1.
     */
    const struct want_entry l1[] = {
        { 0, 0, 1, 0, 0.6f, 0.2f },  { 0, 1, 1, 0, 0.6f, 0.2f },  { 1, 1, 1, 1, 1.0f, 0.0f },
        { 1, 1, 1, 1, 1.0f, 0.0f },  { 0, 0, 0, 0, 0.6f, 1.2f },  { 0, 1, 0, 0, 0.6f, 1.2f },
        { 0, 0, 1, 1, -0.4f, 0.2f }, { 0, 1, 1, 1, -0.4f, 0.2f },
    };
    const float wh1[2][2] = { { 0.5f, 0.5f }, { 1.0f, 2.0f } };
    is_int(trn_loss_build_targets(L, AB, 2), 18, "build_targets: 10 + 8 entries");
    expect_level(L, 0, l0, 10, wh0);
    expect_level(L, 1, l1, 8, wh1);
    is_int(trn_loss_build_targets(L, NULL, 0), 0, "no targets: no entries");
    trn_loss_destroy(L);
}

/* alpha is a constant in PyTorch (no_grad): finite differences must hold it too. g_al.mode 1
 * records alpha of each call in order, 2 replays the recorded values, 0 computes it. */
static double alpha_rec[256];
static struct tu_alpha g_al = { .cap = 256, .rec = alpha_rec };

static double sig(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static double softplus_bce(double x, double t)
{
    return fmax(x, 0.0) - x * t + log1p(exp(-fabs(x)));
}

/* Random outputs for cfg c into p[l] (allocated). */
static void random_outputs(const struct trn_loss_cfg *c, float **p, size_t *len, float scale)
{
    for (int l = 0; l < c->nl; l++) {
        len[l] = (size_t)c->bs * c->na * c->ny[l] * c->nx[l] * (c->nc + 5);
        p[l] = malloc(len[l] * sizeof(float));
        for (size_t i = 0; i < len[l]; i++)
            p[l][i] = urand() * scale;
    }
}

/* The whole loss recomputed in double from the entries trn_loss_build_targets made. */
static void loss_ref(const struct trn_loss *L, const float *const *p, double *rbox, double *robj,
                     double *rcls)
{
    const struct trn_loss_cfg *c = trn_loss_get_cfg(L);
    const int no = c->nc + 5;
    *rbox = *robj = *rcls = 0.0;
    for (int l = 0; l < c->nl; l++) {
        struct trn_loss_level lv;
        trn_loss_level(L, l, &lv);
        const size_t cells = (size_t)c->bs * c->na * c->ny[l] * c->nx[l];
        double *tobj = calloc(cells, sizeof *tobj);
        double sb = 0.0, sc = 0.0;
        for (int e = 0; e < lv.n; e++) {
            const size_t cell =
                (((size_t)lv.b[e] * c->na + lv.a[e]) * c->ny[l] + lv.gj[e]) * c->nx[l] + lv.gi[e];
            const float *ps = p[l] + cell * no;
            const double pb[4] = { sig(ps[0]) * 2 - 0.5, sig(ps[1]) * 2 - 0.5,
                                   pow(sig(ps[2]) * 2, 2) * c->anchors[l][lv.a[e]][0],
                                   pow(sig(ps[3]) * 2, 2) * c->anchors[l][lv.a[e]][1] };
            const double tb[4] = { lv.tbox[4 * e], lv.tbox[4 * e + 1], lv.tbox[4 * e + 2],
                                   lv.tbox[4 * e + 3] };
            const double ci = tu_ciou_ref(pb, tb, &g_al);
            sb += 1.0 - ci;
            tobj[cell] = fmax(ci, 0.0);
            for (int k = 0; k < c->nc; k++) {
                const double t =
                    k == lv.cls[e] ? 1.0 - 0.5 * c->label_smoothing : 0.5 * c->label_smoothing;
                sc += softplus_bce(ps[5 + k], t);
            }
        }
        if (lv.n) {
            *rbox += sb / lv.n;
            if (c->nc > 1) *rcls += sc / ((double)lv.n * c->nc);
        }
        double so = 0.0;
        for (size_t i = 0; i < cells; i++)
            so += softplus_bce(p[l][i * no + 4], tobj[i]);
        *robj += c->balance[l] * so / (double)cells;
        free(tobj);
    }
}

static void check_values(void)
{
    struct trn_loss_cfg c = small_cfg();
    c.label_smoothing = 0.1f;
    struct trn_loss *L = NULL;
    trn_loss_create(&c, &L);
    float *p[2];
    size_t len[2];
    random_outputs(&c, p, len, 2.0f);
    struct trn_loss_items it;
    ok(trn_loss_compute(L, ctx, (const float *const *)p, AB, 2, NULL, &it) == 0, "compute");
    double rb, ro, rc;
    loss_ref(L, (const float *const *)p, &rb, &ro, &rc);
    ok(fabs(it.raw_box - rb) <= 1e-5 * fabs(rb) + 1e-6, "box term (CIoU) vs double: %.7g %.7g",
       it.raw_box, rb);
    ok(fabs(it.raw_obj - ro) <= 1e-5 * fabs(ro) + 1e-6, "obj term vs double: %.7g %.7g", it.raw_obj,
       ro);
    ok(fabs(it.raw_cls - rc) <= 1e-5 * fabs(rc) + 1e-6, "cls term (smoothed) vs double: %.7g %.7g",
       it.raw_cls, rc);
    ok(it.lbox == it.raw_box * c.box && it.lobj == it.raw_obj * c.obj &&
           it.lcls == it.raw_cls * c.cls,
       "logged items carry the gains");
    ok(fabsf(it.total - (it.lbox + it.lobj + it.lcls) * 2.0f) <= 1e-6f * it.total,
       "total = (lbox + lobj + lcls) * bs");
    /* Per-entry CIoU exposed by trn_loss_level matches the double formula. */
    struct trn_loss_level lv;
    trn_loss_level(L, 0, &lv);
    double worst = 0.0;
    for (int e = 0; e < lv.n; e++) {
        const size_t cell =
            (((size_t)lv.b[e] * c.na + lv.a[e]) * c.ny[0] + lv.gj[e]) * c.nx[0] + lv.gi[e];
        const float *ps = p[0] + cell * 8;
        const double pb[4] = { sig(ps[0]) * 2 - 0.5, sig(ps[1]) * 2 - 0.5,
                               pow(sig(ps[2]) * 2, 2) * c.anchors[0][lv.a[e]][0],
                               pow(sig(ps[3]) * 2, 2) * c.anchors[0][lv.a[e]][1] };
        const double tb[4] = { lv.tbox[4 * e], lv.tbox[4 * e + 1], lv.tbox[4 * e + 2],
                               lv.tbox[4 * e + 3] };
        worst = fmax(worst, fabs(lv.ciou[e] - tu_ciou_ref(pb, tb, &g_al)));
    }
    ok(worst < 2e-6, "per-entry CIoU vs double (max err %.3g)", worst);

    /* nc = 1: no class term. */
    struct trn_loss_cfg c1 = small_cfg();
    c1.nc = 1;
    struct trn_loss *L1 = NULL;
    trn_loss_create(&c1, &L1);
    float *q[2];
    size_t qlen[2];
    random_outputs(&c1, q, qlen, 1.0f);
    const float t1[6] = { 1, 0, 0.5f, 0.5f, 0.3f, 0.2f };
    ok(trn_loss_compute(L1, ctx, (const float *const *)q, t1, 1, NULL, &it) == 0 &&
           it.lcls == 0.0f && it.lbox > 0.0f,
       "nc = 1: no class loss");
    trn_loss_destroy(L1);
    free(q[0]);
    free(q[1]);
    free(p[0]);
    free(p[1]);
    trn_loss_destroy(L);
}

/* Two targets on the same cell and anchor: the later one's CIoU is the objectness target. */
static void check_duplicates(void)
{
    struct trn_loss_cfg c = small_cfg();
    c.nl = 1;
    struct trn_loss *L = NULL;
    trn_loss_create(&c, &L);
    float *p[1];
    size_t len[1];
    random_outputs(&c, p, len, 1.0f);
    /* Same centre (cell gi 2, gj 2, frac 0.6 -> no left/up), different sizes. */
    const float t[12] = { 0, 0, 0.65f, 0.65f, 0.30f, 0.30f, 0, 1, 0.65f, 0.65f, 0.20f, 0.40f };
    float *dp[1] = { malloc(len[0] * sizeof(float)) };
    struct trn_loss_items it;
    trn_loss_compute(L, ctx, (const float *const *)p, t, 2, dp, &it);
    struct trn_loss_level lv;
    trn_loss_level(L, 0, &lv);
    /* Entries: centre a0 t0, a0 t1, a1 t0, a1 t1; right and down a0/a1 t0/t1. */
    int last = -1, first = -1;
    for (int e = 0; e < lv.n; e++)
        if (lv.a[e] == 0 && lv.gj[e] == 2 && lv.gi[e] == 2) {
            if (first < 0) first = e;
            last = e;
        }
    ok(first >= 0 && last > first && fabsf(lv.ciou[first] - lv.ciou[last]) > 1e-3f,
       "two entries share (b0, a0, 2, 2) with different CIoU");
    const size_t cell = ((size_t)(0 * 2 + 0) * 4 + 2) * 4 + 2;
    const float x = p[0][cell * 8 + 4];
    const float s = 1.0f / (1.0f + expf(-x));
    const float scale = 2.0f * c.obj * c.balance[0] / (2.0f * 2 * 4 * 4);
    const float want_last = (s - fmaxf(lv.ciou[last], 0.0f)) * scale;
    const float want_first = (s - fmaxf(lv.ciou[first], 0.0f)) * scale;
    ok(fabsf(dp[0][cell * 8 + 4] - want_last) <= 1e-6f * fabsf(want_last) + 1e-9f &&
           fabsf(want_first - want_last) > 1e-7f,
       "last write wins: objectness gradient uses the later entry's CIoU (%g vs %g)",
       dp[0][cell * 8 + 4], want_last);
    free(dp[0]);
    free(p[0]);
    trn_loss_destroy(L);
}

static void check_large_logits(void)
{
    struct trn_loss_cfg c = small_cfg();
    struct trn_loss *L = NULL;
    trn_loss_create(&c, &L);
    float *p[2], *dp[2];
    size_t len[2];
    random_outputs(&c, p, len, 1.0f);
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < len[l]; i++)
            if (i % 8 >= 4) p[l][i] = (i / 8) % 2 ? 100.0f : -100.0f;
        dp[l] = malloc(len[l] * sizeof(float));
    }
    struct trn_loss_items it;
    ok(trn_loss_compute(L, ctx, (const float *const *)p, AB, 2, dp, &it) == 0, "compute at +-100");
    double rb, ro, rc;
    loss_ref(L, (const float *const *)p, &rb, &ro, &rc);
    int finite = isfinite(it.total);
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < len[l]; i++)
            finite &= isfinite(dp[l][i]);
    ok(finite, "loss and gradient finite for logits of +-100");
    ok(fabs(it.raw_obj - ro) <= 1e-5 * ro && fabs(it.raw_cls - rc) <= 1e-5 * rc,
       "BCE at +-100 equals the stable double form (obj %g/%g, cls %g/%g)", it.raw_obj, ro,
       it.raw_cls, rc);
    free(p[0]);
    free(p[1]);
    free(dp[0]);
    free(dp[1]);
    trn_loss_destroy(L);
}

/*
 * Central differences of the total on the columns `lo..hi` of every row (box columns with
 * obj gain 0, since the objectness target is detached from them).
 */
static void check_grad(const char *what, float box, float obj, float cls, int lo, int hi)
{
    struct trn_loss_cfg c = small_cfg();
    c.box = box;
    c.obj = obj;
    c.cls = cls;
    c.label_smoothing = 0.2f;
    struct trn_loss *L = NULL;
    trn_loss_create(&c, &L);
    float *p[2], *dp[2];
    size_t len[2];
    random_outputs(&c, p, len, 1.0f);
    dp[0] = malloc(len[0] * sizeof(float));
    dp[1] = malloc(len[1] * sizeof(float));
    const float t[3 * 6] = { 0,     1,    0.3f, 0.6f, 0.25f, 0.25f, 1,    2,     0.7f,
                             0.45f, 0.5f, 0.6f, 1,    0,     0.2f,  0.8f, 0.15f, 0.35f };
    struct trn_loss_items it;
    trn_loss_compute(L, ctx, (const float *const *)p, t, 3, dp, &it);
    (void)it;
    double rb0, ro0, rc0;
    g_al.mode = 1;
    g_al.n = 0;
    loss_ref(L, (const float *const *)p, &rb0, &ro0, &rc0);
    g_al.mode = 2;
    double num = 0.0, den = 0.0, worst = 0.0;
    int checked = 0;
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < len[l]; i++) {
            const int k = (int)(i % 8);
            if (k < lo || k > hi) continue;
            /* Differences of the double re-derivation (checked against the float forward in
             * check_values), so that float rounding does not swamp the small per-element terms. */
            const float keep = p[l][i], h = 1e-3f * fmaxf(1.0f, fabsf(keep));
            double ab[2];
            for (int side = 0; side < 2; side++) {
                p[l][i] = side ? keep - h : keep + h;
                double rb, ro, rc;
                g_al.n = 0;
                loss_ref(L, (const float *const *)p, &rb, &ro, &rc);
                ab[side] = c.bs * ((double)c.box * rb + (double)c.obj * ro + (double)c.cls * rc);
            }
            const double step = (double)(keep + h) - (double)(keep - h);
            p[l][i] = keep;
            const double fd = (ab[0] - ab[1]) / step;
            const double d = fd - dp[l][i];
            num += d * d;
            den += fd * fd;
            worst = fmax(worst, fabs(d));
            checked++;
        }
    }
    g_al.mode = 0;
    const double rel = sqrt(num / (den > 0 ? den : 1));
    ok(den > 0 && rel < 1e-3,
       "%s: gradient vs finite differences over %d elements (rel %.3g, max "
       "abs %.3g)",
       what, checked, rel, worst);
    free(p[0]);
    free(p[1]);
    free(dp[0]);
    free(dp[1]);
    trn_loss_destroy(L);
}

static void check_errors(void)
{
    struct trn_loss_cfg c = small_cfg();
    struct trn_loss *L = NULL;
    trn_loss_create(&c, &L);
    float bad[6] = { 2, 0, 0.5f, 0.5f, 0.1f, 0.1f };
    is_int(trn_loss_build_targets(L, bad, 1), -TRN_LOSS_ETARGET, "image index >= bs refused");
    bad[0] = 0;
    bad[1] = 3;
    is_int(trn_loss_build_targets(L, bad, 1), -TRN_LOSS_ETARGET, "class >= nc refused");
    bad[1] = 0;
    bad[4] = NAN;
    is_int(trn_loss_build_targets(L, bad, 1), -TRN_LOSS_ETARGET, "NaN refused");
    bad[4] = -0.1f;
    is_int(trn_loss_build_targets(L, bad, 1), -TRN_LOSS_ETARGET, "negative width refused");
    float many[9 * 6] = { 0 };
    is_int(trn_loss_build_targets(L, many, 9), -E2BIG, "more than max_targets refused");
    ok(strstr(trn_loss_strerror(-TRN_LOSS_ETARGET), "target") != NULL, "strerror names it");
    c.nl = 0;
    struct trn_loss *L2 = NULL;
    is_int(trn_loss_create(&c, &L2), -EINVAL, "bad cfg refused");
    trn_loss_destroy(L);
}

/* The device entry (trn_loss_compute_dev) through the CPU op table: the same bits as
 * trn_loss_compute, accumulation, the status slot, and the kern error for a bad count. */
static void check_device_path(void)
{
    struct trn_loss_cfg c = small_cfg();
    c.label_smoothing = 0.1f;
    struct trn_loss *L = NULL;
    trn_loss_create(&c, &L);
    float *p[2], *da[2], *db[2];
    size_t len[2];
    random_outputs(&c, p, len, 2.0f);
    for (int l = 0; l < 2; l++) {
        da[l] = malloc(len[l] * sizeof(float));
        db[l] = malloc(len[l] * sizeof(float));
        for (size_t i = 0; i < len[l]; i++)
            db[l][i] = NAN;
    }
    struct trn_loss_items ia, ib;
    ok(trn_loss_compute(L, ctx, (const float *const *)p, AB, 2, da, &ia) == 0, "host path");
    size_t bytes = 0;
    ok(trn_loss_dev_scratch_bytes(&c, kern_ops_ref(), ctx, &bytes) == 0 && bytes > 0,
       "device path: scratch size (%zu bytes)", bytes);
    void *s = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    float out[KERN_YOLO_OUT_N];
    int nt = 2;
    ok(trn_loss_compute_dev(&c, kern_ops_ref(), ctx, (const float *const *)p, AB, &nt, db, 0, out,
                            s, bytes) == 0 &&
           trn_loss_items_from_out(out, &ib) == 0,
       "device path through kern_ops_ref() runs");
    int same = !memcmp(&ia, &ib, sizeof ia);
    for (int l = 0; l < 2; l++)
        same &= !memcmp(da[l], db[l], len[l] * sizeof(float));
    ok(same, "device path: the same loss and gradient bits as trn_loss_compute");
    ok(trn_loss_compute_dev(&c, kern_ops_ref(), ctx, (const float *const *)p, AB, &nt, db,
                            KERN_ACCUM_DX, out, s, bytes) == 0,
       "device path: accumulate");
    double worst = 0.0;
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < len[l]; i++)
            worst = fmax(worst, fabs(db[l][i] - 2.0 * da[l][i]) / (1e-6 + fabs(2.0 * da[l][i])));
    ok(worst < 1e-5, "device path: KERN_ACCUM_DX adds a second gradient (rel %.3g)", worst);
    out[KERN_YOLO_OUT_STATUS] = (float)KERN_YOLO_BAD_ROW;
    is_int(trn_loss_items_from_out(out, &ib), -TRN_LOSS_ETARGET,
           "a flagged status reads as a bad target");
    nt = 9;
    is_int(trn_loss_compute_dev(&c, kern_ops_ref(), ctx, (const float *const *)p, AB, &nt, db, 0,
                                out, s, bytes),
           -EINVAL, "device path: a count above max_targets is a kern -EINVAL");
    free(s);
    for (int l = 0; l < 2; l++) {
        free(p[l]);
        free(da[l]);
        free(db[l]);
    }
    trn_loss_destroy(L);
}

static void check_cfg_from_model(void)
{
    struct trn_model *m = NULL;
    char err[256];
    size_t tiny_len = 0;
    const char *const tiny = tu_tiny_yaml(&tiny_len);
    ok(trn_model_parse(tiny, tiny_len, "tiny.yaml", NULL, &m, err, sizeof err) == 0,
       "tiny model parses");
    if (!m) return;
    trn_model_init(m, 1);
    struct trn_hyp h;
    trn_hyp_default(&h);
    struct trn_loss_cfg c;
    ok(trn_loss_cfg_from_model(m, &h, 4, 320, 0.0f, 100, &c) == 0, "cfg from model");
    ok(c.nl == 3 && c.na == 3 && c.nc == 2 && c.bs == 4 && c.nx[0] == 40 && c.ny[2] == 10,
       "levels, grids");
    ok(c.balance[0] == 4.0f && c.balance[1] == 1.0f && c.balance[2] == 0.4f, "balance");
    ok(c.box == (float)0.05 && c.cls == (float)(0.5 * 2 / 80.0) && c.obj == (float)0.25,
       "gains: box 0.05, cls 0.5*nc/80, obj (320/640)^2 (got %g %g %g)", c.box, c.cls, c.obj);
    ok(c.anchors[0][0][0] == 1.25f && c.anchors[0][1][1] == 3.75f &&
           c.anchors[2][2][0] == 11.65625f,
       "anchors in grid units");
    ok(c.cls_pw == 1.0f && c.obj_pw == 1.0f, "positive weights 1 by default");
    h.cls_pw = 1.5;
    h.obj_pw = 0.7;
    struct kern_yolo_loss kd;
    ok(trn_loss_cfg_from_model(m, &h, 4, 320, 0.0f, 100, &c) == 0 && c.cls_pw == 1.5f &&
           c.obj_pw == 0.7f && trn_loss_kern_desc(&c, &kd) == 0 && kd.cls_pw == 1.5f &&
           kd.obj_pw == 0.7f,
       "hyp cls_pw 1.5, obj_pw 0.7 reach kern's BCE pos_weight (train.py's BCEWithLogitsLoss)");
    h.fl_gamma = 1.5;
    is_int(trn_loss_cfg_from_model(m, &h, 4, 320, 0.0f, 100, &c), -ENOTSUP, "focal refused");
    trn_hyp_default(&h);
    is_int(trn_loss_cfg_from_model(m, &h, 4, 300, 0.0f, 100, &c), -EINVAL,
           "image size not a multiple of 32 refused");
    trn_model_destroy(m);
}

int main(void)
{
    if (kern_ctx_create(NULL, &ctx) < 0) {
        printf("Bail out! no kern context\n");
        return 99;
    }
    check_build();
    check_values();
    check_duplicates();
    check_large_logits();
    check_grad("box term", 1.0f, 0.0f, 0.0f, 0, 3);
    check_grad("obj term", 0.0f, 1.0f, 0.0f, 4, 4);
    check_grad("cls term", 0.0f, 0.0f, 1.0f, 5, 7);
    check_grad("all terms, obj+cls columns", 0.05f, 1.0f, 0.5f, 4, 7);
    check_errors();
    check_device_path();
    check_cfg_from_model();
    kern_ctx_destroy(ctx);
    return tap_done();
}
