/* AutoAnchor: train.py's check_anchors and kmean_anchors (autoanchor.h). */
#include "autoanchor.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

#define AA_BPR_OK    0.98 /* check_anchors keeps anchors above this BPR */
#define AA_GENS      1000 /* kmean_anchors' gen */
#define AA_MUT_P     0.9  /* mutation probability per anchor side */
#define AA_MUT_SIGMA 0.1
#define AA_KM_ITER   30   /* scipy kmeans' restarts (iter=30) */
#define AA_KM_THRESH 1e-5 /* scipy kmeans' distortion-change stop */
#define AA_MAX_ANCH  (TRN_MODEL_MAX_LEVELS * TRN_MODEL_MAX_ANCHORS)
/* Philox streams of the three draws (sampler.h: TRN_STREAM_USER and up are free) */
#define AA_STREAM_SCALE  (TRN_STREAM_USER + 40)
#define AA_STREAM_KMEANS (TRN_STREAM_USER + 41)
#define AA_STREAM_EVOLVE (TRN_STREAM_USER + 42)

static void say(trn_autoanchor_log log, void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(trn_autoanchor_log log, void *ctx, const char *fmt, ...)
{
    if (!log) return;
    char line[1024] = "AutoAnchor: ";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + 12, sizeof line - 12, fmt, ap);
    va_end(ap);
    log(ctx, line);
}

/* x = min(r, 1/r) over both sides, r = wh / k, in float32 as torch computes it. */
static inline float ratio(const float *wh, const float *k)
{
    const float rw = wh[0] / k[0], rh = wh[1] / k[1];
    const float xw = fminf(rw, 1.0f / rw), xh = fminf(rh, 1.0f / rh);
    return fminf(xw, xh);
}

/* check_anchors' metric: BPR and anchors above threshold (thr = 1 / anchor_t). */
static void metric(const float *wh, size_t n, const float *k, int nk, float thr, double *bpr,
                   double *aat)
{
    size_t recalled = 0, above = 0;
    for (size_t i = 0; i < n; i++) {
        float best = 0.0f;
        for (int j = 0; j < nk; j++) {
            const float x = ratio(wh + 2 * i, k + 2 * j);
            above += x > thr;
            if (x > best) best = x;
        }
        recalled += best > thr;
    }
    *bpr = n ? (double)recalled / (double)n : 0.0;
    *aat = n ? (double)above / (double)n : 0.0;
}

/* kmean_anchors' anchor_fitness: mean of best x, counting only best > thr. */
static double fitness(const float *wh, size_t n, const float *k, int nk, float thr)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        float best = 0.0f;
        for (int j = 0; j < nk; j++) {
            const float x = ratio(wh + 2 * i, k + 2 * j);
            if (x > best) best = x;
        }
        s += best > thr ? best : 0.0f;
    }
    return n ? s / (double)n : 0.0;
}

/* Anchors sorted by area, small to large (print_results). */
static void sort_by_area(float *k, int nk)
{
    for (int i = 1; i < nk; i++) {
        const float w = k[2 * i], h = k[2 * i + 1];
        int j = i - 1;
        while (j >= 0 && k[2 * j] * k[2 * j + 1] > w * h) {
            k[2 * j + 2] = k[2 * j], k[2 * j + 3] = k[2 * j + 1];
            j--;
        }
        k[2 * j + 2] = w, k[2 * j + 3] = h;
    }
}

/* One k-means run from the centres in c (nk of them, 2-d), as scipy's _kmeans: assign each
 * point to its nearest centre, move centres to their points' means, drop empty ones, until the
 * mean distance changes by at most the threshold. Returns the mean distance; *nk may shrink. */
static double kmeans_run(const float *p, size_t n, double *c, int *nk, int *code)
{
    double prev = INFINITY, cur = INFINITY;
    for (;;) {
        double sum = 0.0;
        for (size_t i = 0; i < n; i++) {
            double bd = INFINITY;
            int bj = 0;
            for (int j = 0; j < *nk; j++) {
                const double dx = p[2 * i] - c[2 * j], dy = p[2 * i + 1] - c[2 * j + 1];
                const double d = dx * dx + dy * dy;
                if (d < bd) bd = d, bj = j;
            }
            code[i] = bj;
            sum += sqrt(bd);
        }
        prev = cur;
        cur = n ? sum / (double)n : 0.0;
        double acc[AA_MAX_ANCH][3] = { { 0 } };
        for (size_t i = 0; i < n; i++) {
            acc[code[i]][0] += p[2 * i];
            acc[code[i]][1] += p[2 * i + 1];
            acc[code[i]][2] += 1.0;
        }
        int m = 0;
        for (int j = 0; j < *nk; j++) {
            if (acc[j][2] == 0.0) continue;
            c[2 * m] = acc[j][0] / acc[j][2];
            c[2 * m + 1] = acc[j][1] / acc[j][2];
            m++;
        }
        *nk = m;
        if (!(prev - cur > AA_KM_THRESH)) return cur;
    }
}

/* scipy.cluster.vq.kmeans(p, nk, iter=30): the best of 30 runs from nk random distinct points.
 * Returns the number of centres found (< nk when clusters emptied). */
static int kmeans(const float *p, size_t n, int nk, struct trn_rng *rng, double *best, int *code)
{
    double bestd = INFINITY;
    int bestn = 0;
    size_t *idx = malloc(n * sizeof *idx);
    if (!idx) return -ENOMEM;
    for (int it = 0; it < AA_KM_ITER; it++) {
        for (size_t i = 0; i < n; i++)
            idx[i] = i;
        double c[2 * AA_MAX_ANCH];
        for (int j = 0; j < nk; j++) { /* a partial Fisher-Yates: nk distinct rows */
            const size_t r = (size_t)j + (size_t)trn_rng_below(rng, n - (size_t)j);
            const size_t t = idx[j];
            idx[j] = idx[r], idx[r] = t;
            c[2 * j] = p[2 * idx[j]], c[2 * j + 1] = p[2 * idx[j] + 1];
        }
        int m = nk;
        const double d = kmeans_run(p, n, c, &m, code);
        if (d < bestd) {
            bestd = d, bestn = m;
            memcpy(best, c, (size_t)m * 2 * sizeof *c);
        }
    }
    free(idx);
    return bestn;
}

/* print_results: the two report lines for anchors k (sorted), on the unfiltered wh0. */
static void report(const float *wh0, size_t n0, const float *k, int nk, float thr, int img,
                   trn_autoanchor_log log, void *ctx)
{
    size_t recalled = 0, past = 0;
    double xsum = 0.0, bsum = 0.0, psum = 0.0;
    for (size_t i = 0; i < n0; i++) {
        float best = 0.0f;
        for (int j = 0; j < nk; j++) {
            const float x = ratio(wh0 + 2 * i, k + 2 * j);
            xsum += x;
            if (x > thr) past++, psum += x;
            if (x > best) best = x;
        }
        bsum += best;
        recalled += best > thr;
    }
    const double N = n0 ? (double)n0 : 1.0;
    say(log, ctx, "thr=%.2f: %.4f best possible recall, %.2f anchors past thr", thr,
        (double)recalled / N, (double)past / N);
    char s[768];
    int o = snprintf(s, sizeof s,
                     "n=%d, img_size=%d, metric_all=%.3f/%.3f-mean/best, past_thr=%.3f-mean: ", nk,
                     img, xsum / (N * nk), bsum / N, past ? psum / (double)past : 0.0);
    for (int j = 0; j < nk && o < (int)sizeof s; j++)
        o += snprintf(s + o, sizeof s - (size_t)o, "%s%d,%d", j ? ", " : "",
                      (int)nearbyint(k[2 * j]), (int)nearbyint(k[2 * j + 1]));
    say(log, ctx, "%s", s);
}

/* kmean_anchors(n=nk, img_size=img, thr, gen=1000, verbose=False) into k (nk x 2, sorted). */
static int kmean_anchors(const struct trn_anchor_data *d, int img, float thr, int nk, uint64_t seed,
                         float *k, trn_autoanchor_log log, void *ctx)
{
    const size_t n0 = d->first[d->n_img];
    float *wh0 = malloc(n0 * 2 * sizeof *wh0), *wh = malloc(n0 * 2 * sizeof *wh);
    int *code = malloc((n0 ? n0 : 1) * sizeof *code);
    if (!wh0 || !wh || !code) {
        free(wh0), free(wh), free(code);
        return -ENOMEM;
    }
    size_t tiny = 0, n = 0;
    for (size_t i = 0; i < d->n_img; i++) {
        const double sw = d->shape[2 * i], sh = d->shape[2 * i + 1], mx = sw > sh ? sw : sh;
        const double s[2] = { img * sw / mx, img * sh / mx };
        for (size_t l = d->first[i]; l < d->first[i + 1]; l++) {
            const double w = d->wh[2 * l] * s[0], h = d->wh[2 * l + 1] * s[1];
            wh0[2 * l] = (float)w, wh0[2 * l + 1] = (float)h;
            tiny += w < 3.0 || h < 3.0;
            if (w >= 2.0 || h >= 2.0) wh[2 * n] = (float)w, wh[2 * n + 1] = (float)h, n++;
        }
    }
    if (tiny)
        say(log, ctx,
            "WARNING \u26a0\ufe0f Extremely small objects found: %zu of %zu labels are "
            "<3 pixels in size",
            tiny, n0);
    say(log, ctx, "Running kmeans for %d anchors on %zu points...", nk, n);
    struct trn_rng rng;
    trn_rng_init(&rng, seed, 0, 0, AA_STREAM_KMEANS);
    int got = 0;
    if ((size_t)nk <= n) {
        double mean[2] = { 0, 0 }, sd[2] = { 0, 0 };
        for (size_t i = 0; i < n; i++)
            mean[0] += wh[2 * i], mean[1] += wh[2 * i + 1];
        mean[0] /= (double)n, mean[1] /= (double)n;
        for (size_t i = 0; i < n; i++) {
            const double a = wh[2 * i] - mean[0], b = wh[2 * i + 1] - mean[1];
            sd[0] += a * a, sd[1] += b * b;
        }
        sd[0] = sqrt(sd[0] / (double)n), sd[1] = sqrt(sd[1] / (double)n);
        float *p = malloc(n * 2 * sizeof *p);
        double c[2 * AA_MAX_ANCH];
        if (!p) {
            free(wh0), free(wh), free(code);
            return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
            p[2 * i] = (float)(wh[2 * i] / sd[0]), p[2 * i + 1] = (float)(wh[2 * i + 1] / sd[1]);
        got = sd[0] > 0.0 && sd[1] > 0.0 ? kmeans(p, n, nk, &rng, c, code) : 0;
        free(p);
        if (got < 0) {
            free(wh0), free(wh), free(code);
            return got;
        }
        for (int j = 0; j < got && got == nk; j++)
            k[2 * j] = (float)(c[2 * j] * sd[0]), k[2 * j + 1] = (float)(c[2 * j + 1] * sd[1]);
    }
    if (got != nk) {
        say(log, ctx, "WARNING \u26a0\ufe0f switching strategies from kmeans to random init");
        float r[2 * AA_MAX_ANCH];
        for (int j = 0; j < 2 * nk; j++)
            r[j] = (float)trn_rng_uniform(&rng);
        for (int j = 1; j < 2 * nk; j++) /* np.sort(rand(2n)).reshape(n, 2) * img */
            for (int i = j; i > 0 && r[i - 1] > r[i]; i--) {
                const float t = r[i];
                r[i] = r[i - 1], r[i - 1] = t;
            }
        for (int j = 0; j < 2 * nk; j++)
            k[j] = r[j] * (float)img;
    }
    sort_by_area(k, nk);

    /* evolve */
    trn_rng_init(&rng, seed, 0, 0, AA_STREAM_EVOLVE);
    double f = fitness(wh, n, k, nk, thr);
    float kg[2 * AA_MAX_ANCH], v[2 * AA_MAX_ANCH];
    for (int g = 0; g < AA_GENS; g++) {
        bool changed = false;
        while (!changed) { /* mutate until a change occurs */
            float m[2 * AA_MAX_ANCH];
            for (int j = 0; j < 2 * nk; j++)
                m[j] = trn_rng_uniform(&rng) < AA_MUT_P ? 1.0f : 0.0f;
            const double u = trn_rng_uniform(&rng);
            for (int j = 0; j < 2 * nk; j++) {
                double x = m[j] * u * trn_rng_normal(&rng) * AA_MUT_SIGMA + 1.0;
                x = x < 0.3 ? 0.3 : x > 3.0 ? 3.0 : x;
                v[j] = (float)x;
                changed |= v[j] != 1.0f;
            }
        }
        for (int j = 0; j < 2 * nk; j++)
            kg[j] = fmaxf(k[j] * v[j], 2.0f);
        const double fg = fitness(wh, n, kg, nk, thr);
        if (fg > f) {
            f = fg;
            memcpy(k, kg, (size_t)nk * 2 * sizeof *k);
        }
    }
    say(log, ctx, "Evolving anchors with Genetic Algorithm: fitness = %.4f: 100%% %d/%d", f,
        AA_GENS, AA_GENS);
    sort_by_area(k, nk);
    report(wh0, n0, k, nk, thr, img, log, ctx);
    free(wh0), free(wh), free(code);
    return 0;
}

int trn_autoanchor(struct trn_model *m, const struct trn_anchor_data *d, int img, double thr,
                   uint64_t seed, trn_autoanchor_log log, void *ctx,
                   struct trn_autoanchor_result *r)
{
    if (!m || !d || !r || img < 1 || !(thr >= 1.0) || (d->n_img && (!d->shape || !d->first)))
        return -EINVAL;
    memset(r, 0, sizeof *r);
    const size_t n = d->n_img ? d->first[d->n_img] : 0;
    if (n == 0) return 0;
    const struct trn_model_info *I = trn_model_info(m);
    const int nk = I->nl * I->na;
    int ai = -1;
    for (int i = 0; ai < 0 && i < I->n_tensors; i++)
        if (trn_model_tensor(m, i)->role == TRN_T_ANCHORS) ai = i;
    if (ai < 0 || nk > AA_MAX_ANCH) return -EINVAL;
    const struct trn_tensor *at = trn_model_tensor(m, ai);
    float *grid = (float *)trn_model_arena(m, at->arena) + at->offset;

    /* check_anchors: the labels at img, each image scaled by U(0.9, 1.1) */
    float *wh = malloc(n * 2 * sizeof *wh);
    if (!wh) return -ENOMEM;
    struct trn_rng rng;
    trn_rng_init(&rng, seed, 0, 0, AA_STREAM_SCALE);
    for (size_t i = 0; i < d->n_img; i++) {
        const double sw = d->shape[2 * i], sh = d->shape[2 * i + 1], mx = sw > sh ? sw : sh;
        const double sc = trn_rng_uniform_range(&rng, 0.9, 1.1);
        for (size_t l = d->first[i]; l < d->first[i + 1]; l++) {
            wh[2 * l] = (float)(d->wh[2 * l] * (img * sw / mx * sc));
            wh[2 * l + 1] = (float)(d->wh[2 * l + 1] * (img * sh / mx * sc));
        }
    }
    float px[2 * AA_MAX_ANCH];
    for (int l = 0; l < I->nl; l++)
        for (int a = 0; a < I->na; a++)
            for (int c = 0; c < 2; c++)
                px[(l * I->na + a) * 2 + c] = grid[(l * I->na + a) * 2 + c] * (float)I->stride[l];
    const float th = (float)(1.0 / thr);
    metric(wh, n, px, nk, th, &r->bpr, &r->aat);
    if (r->bpr > AA_BPR_OK) {
        say(log, ctx,
            "%.2f anchors/target, %.3f Best Possible Recall (BPR). Current anchors are "
            "a good fit to dataset \u2705",
            r->aat, r->bpr);
        free(wh);
        return 0;
    }
    say(log, ctx,
        "%.2f anchors/target, %.3f Best Possible Recall (BPR). Anchors are a poor fit "
        "to dataset \u26a0\ufe0f, attempting to improve...",
        r->aat, r->bpr);
    r->evolved = true;
    float k[2 * AA_MAX_ANCH];
    int rc = kmean_anchors(d, img, th, nk, seed, k, log, ctx);
    if (rc < 0) {
        free(wh);
        return rc;
    }
    double aat;
    metric(wh, n, k, nk, th, &r->new_bpr, &aat);
    free(wh);
    if (!(r->new_bpr > r->bpr)) {
        say(log, ctx,
            "Done \u26a0\ufe0f (original anchors better than new anchors, proceeding "
            "with original anchors)");
        return 0;
    }
    /* check_anchor_order: mean anchor area per level must grow with the stride */
    double a0 = 0.0, a1 = 0.0;
    for (int a = 0; a < I->na; a++) {
        a0 += (double)k[2 * a] * k[2 * a + 1];
        a1 += (double)k[2 * ((I->nl - 1) * I->na + a)] * k[2 * ((I->nl - 1) * I->na + a) + 1];
    }
    const double da = a1 - a0, ds = I->stride[I->nl - 1] - I->stride[0];
    if (da != 0.0 && (da > 0) != (ds > 0)) {
        say(log, ctx, "Reversing anchor order");
        float flip[2 * AA_MAX_ANCH];
        for (int l = 0; l < I->nl; l++)
            memcpy(flip + 2 * l * I->na, k + 2 * (I->nl - 1 - l) * I->na,
                   (size_t)I->na * 2 * sizeof *k);
        memcpy(k, flip, (size_t)nk * 2 * sizeof *k);
    }
    for (int l = 0; l < I->nl; l++)
        for (int a = 0; a < I->na; a++)
            for (int c = 0; c < 2; c++) {
                const int i = (l * I->na + a) * 2 + c;
                grid[i] = trn_model_round_fp16(k[i] / (float)I->stride[l]);
            }
    r->replaced = true;
    say(log, ctx, "Done \u2705 (optional: update model *.yaml to use these anchors in the future)");
    return 0;
}
