/* metrics: see metrics.h for what is reproduced and every tie or numeric choice. */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NPX         TRN_AP_NPX /* ap_per_class's confidence grid, np.linspace(0, 1, 1000) */
#define AP_EPS      1e-16      /* ap_per_class's eps */
#define PW_BLOCK    128        /* numpy's PW_BLOCKSIZE */
#define SMOOTH_FRAC 0.1        /* smooth(f1.mean(0), 0.1) */

/* ---------------------------------------------------------------------------------------- */
/* numpy                                                                                     */

static double pairwise(const double *a, size_t n, size_t s)
{
    if (n < 8) {
        double res = 0.;
        for (size_t i = 0; i < n; i++)
            res += a[i * s];
        return res;
    }
    if (n <= PW_BLOCK) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[(size_t)j * s];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (size_t j = 0; j < 8; j++)
                r[j] += a[(i + j) * s];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i * s];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2, s) + pairwise(a + n2 * s, n - n2, s);
}

double trn_np_sum(const double *a, size_t n, size_t stride)
{
    /* add.reduce starts from the identity 0.0 and adds the pairwise sum of all n. */
    double acc = 0.0;
    acc += pairwise(a, n, stride);
    return acc;
}

double trn_np_mean(const double *a, size_t n)
{
    return trn_np_sum(a, n, 1) / (double)n;
}

void trn_np_linspace(double start, double stop, size_t num, double *out)
{
    if (num == 0) return;
    const size_t div = num - 1;
    if (div == 0) {
        out[0] = start;
        return;
    }
    const double step = (stop - start) / (double)div;
    for (size_t i = 0; i < num; i++)
        out[i] = (double)i * step + start;
    out[num - 1] = stop;
}

/* Last j with xp[j] <= x, for xp[0] <= x <= xp[n-1] (numpy's binary_search_with_guess gives the
 * same index for a sorted xp, whatever its guess). */
static size_t last_le(double x, const double *xp, size_t n)
{
    size_t lo = 0, hi = n; /* invariant: xp[lo - 1] <= x < xp[hi] */
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (x >= xp[mid])
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

void trn_np_interp(const double *x, size_t nx, const double *xp, const double *fp, size_t nxp,
                   double left, double right, double *out)
{
    for (size_t i = 0; i < nx; i++) {
        const double v = x[i];
        if (isnan(v)) {
            out[i] = v;
            continue;
        }
        if (nxp == 1) {
            out[i] = v < xp[0] ? left : (v > xp[0] ? right : fp[0]);
            continue;
        }
        if (v > xp[nxp - 1]) {
            out[i] = right;
            continue;
        }
        if (v < xp[0]) {
            out[i] = left;
            continue;
        }
        const size_t j = last_le(v, xp, nxp);
        if (j == nxp - 1 || xp[j] == v) {
            out[i] = fp[j];
            continue;
        }
        const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
        double r = slope * (v - xp[j]) + fp[j];
        if (isnan(r)) {
            r = slope * (v - xp[j + 1]) + fp[j + 1];
            if (isnan(r) && fp[j] == fp[j + 1]) r = fp[j];
        }
        out[i] = r;
    }
}

void trn_np_smooth(const double *y, size_t n, double f, double *out)
{
    /* nf = round(n * f * 2) // 2 + 1 (odd); yp = [y[0]] * half + y + [y[-1]] * half, read
     * through clamped indices instead of a padded copy; the products summed in order. */
    const size_t nf = (size_t)nearbyint((double)n * f * 2) / 2 + 1, half = nf / 2;
    const double w = 1.0 / (double)nf;
    for (size_t k = 0; k < n; k++) {
        double s = 0.0;
        for (size_t j = 0; j < nf; j++) {
            const size_t at = k + j; /* index into yp */
            const double v = at < half        ? 1.0 * y[0]
                             : at >= half + n ? 1.0 * y[n - 1]
                                              : y[at - half];
            s += v * w;
        }
        out[k] = s;
    }
}

double trn_np_trapz(const double *y, const double *x, size_t n)
{
    if (n < 2) return 0.0;
    double *t = malloc((n - 1) * sizeof(*t));
    if (!t) return NAN;
    for (size_t i = 0; i + 1 < n; i++)
        t[i] = (x[i + 1] - x[i]) * (y[i + 1] + y[i]) / 2.0;
    const double s = trn_np_sum(t, n - 1, 1);
    free(t);
    return s;
}

/* compute_ap; py: NULL, or out[NPX]: np.interp(px, mrec, mpre) on the envelope (the PR curve
 * ap_per_class plots), px the NPX grid. */
static int compute_ap_py(const double *recall, const double *precision, size_t n, double *ap,
                         const double *px, double *py)
{
    double *mrec = malloc((n + 2) * sizeof(double));
    double *mpre = malloc((n + 2) * sizeof(double));
    double x[101], y[101];
    int rc = -ENOMEM;
    if (!mrec || !mpre) goto out;
    mrec[0] = 0.0;
    mpre[0] = 1.0;
    for (size_t i = 0; i < n; i++) {
        mrec[i + 1] = recall[i];
        mpre[i + 1] = precision[i];
    }
    mrec[n + 1] = 1.0;
    mpre[n + 1] = 0.0;
    /* np.flip(np.maximum.accumulate(np.flip(mpre))); np.maximum propagates NaN. */
    for (size_t i = n + 1; i-- > 0;) {
        const double a = mpre[i], b = mpre[i + 1];
        mpre[i] = (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    }
    if (py) trn_np_interp(px, NPX, mrec, mpre, n + 2, mpre[0], mpre[n + 1], py);
    trn_np_linspace(0.0, 1.0, 101, x);
    trn_np_interp(x, 101, mrec, mpre, n + 2, mpre[0], mpre[n + 1], y);
    double t[100];
    for (size_t i = 0; i < 100; i++)
        t[i] = (x[i + 1] - x[i]) * (y[i + 1] + y[i]) / 2.0;
    *ap = trn_np_sum(t, 100, 1);
    rc = 0;
out:
    free(mrec);
    free(mpre);
    return rc;
}

int trn_compute_ap(const double *recall, const double *precision, size_t n, double *ap)
{
    if (!ap || ((!recall || !precision) && n)) return -EINVAL;
    return compute_ap_py(recall, precision, n, ap, NULL, NULL);
}

double trn_fitness(double mp, double mr, double map50, double map)
{
    /* (x * w).sum(1) over 4 elements: pairwise_sum's n < 8 branch, sequential from 0. */
    const double v[4] = { mp * 0.0, mr * 0.0, map50 * 0.1, map * 0.9 };
    return trn_np_sum(v, 4, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Matching                                                                                  */

void trn_iouv(float iouv[TRN_NIOU])
{
    /* torch.linspace CPU kernel: step in float, the first half from start, the rest from end. */
    const float start = 0.5f, end = 0.95f;
    const float step = (end - start) / (float)(TRN_NIOU - 1);
    for (int i = 0; i < TRN_NIOU; i++)
        iouv[i] =
            i < TRN_NIOU / 2 ? start + step * (float)i : end - step * (float)(TRN_NIOU - i - 1);
}

static void det_box(const struct trn_det *d, float b[4])
{
    b[0] = d->x1;
    b[1] = d->y1;
    b[2] = d->x2;
    b[3] = d->y2;
}

static void label_box(const struct trn_label *l, float b[4])
{
    b[0] = l->x1;
    b[1] = l->y1;
    b[2] = l->x2;
    b[3] = l->y2;
}

/* iou[l * n + d] = box_iou(labels, dets). */
static float *iou_matrix(const struct trn_det *dets, size_t n, const struct trn_label *labels,
                         size_t m)
{
    const size_t cells = m * n;
    float *iou = malloc((cells ? cells : 1) * sizeof(float));
    if (!iou) return NULL;
    for (size_t l = 0; l < m; l++) {
        float lb[4];
        label_box(&labels[l], lb);
        for (size_t d = 0; d < n; d++) {
            float db[4];
            det_box(&dets[d], db);
            iou[l * n + d] = trn_box_iou(lb, db);
        }
    }
    return iou;
}

int trn_process_batch(const struct trn_det *dets, size_t n, const struct trn_label *labels,
                      size_t m, uint8_t *correct)
{
    if ((!dets || !correct) && n) return -EINVAL;
    if (!labels && m) return -EINVAL;
    if (n) memset(correct, 0, n * TRN_NIOU);
    if (!n || !m) return 0;
    if (m > SIZE_MAX / n / sizeof(float)) return -ENOMEM;
    float *iou = iou_matrix(dets, n, labels, m);
    long *best = malloc(n * sizeof(long));
    uint8_t *taken = malloc(m);
    int rc = -ENOMEM;
    if (!iou || !best || !taken) goto out;
    float iouv[TRN_NIOU];
    trn_iouv(iouv);
    for (int t = 0; t < TRN_NIOU; t++) {
        /* Per detection: its highest-IoU valid label; ties go to the later label, as the
         * reversed stable argsort puts it first. */
        size_t count = 0;
        for (size_t d = 0; d < n; d++) {
            best[d] = -1;
            float bi = 0;
            for (size_t l = 0; l < m; l++) {
                const float v = iou[l * n + d];
                if (!(v >= iouv[t]) || labels[l].cls != dets[d].cls) continue;
                count++;
                if (best[d] < 0 || v >= bi) {
                    bi = v;
                    best[d] = (long)l;
                }
            }
        }
        if (!count) continue;
        /* Per label: the first detection in ascending index order (np.unique's order), which
         * with a single pair is that pair. */
        memset(taken, 0, m);
        for (size_t d = 0; d < n; d++) {
            if (best[d] < 0 || taken[best[d]]) continue;
            taken[best[d]] = 1;
            correct[d * TRN_NIOU + (size_t)t] = 1;
        }
    }
    rc = 0;
out:
    free(iou);
    free(best);
    free(taken);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* ap_per_class                                                                              */

void trn_ap_result_free(struct trn_ap_result *res)
{
    if (!res) return;
    free(res->cls);
    free(res->p);
    free(res->r);
    free(res->f1);
    free(res->tp);
    free(res->fp);
    free(res->ap);
    free(res->ap50);
    free(res->ap5095);
    free(res->nt);
    free(res->curve_p);
    free(res->curve_r);
    free(res->curve_f1);
    free(res->curve_pr);
    free(res->pr_valid);
    free(res->mean_pr);
    free(res->mean_p);
    free(res->mean_r);
    free(res->mean_f1);
    memset(res, 0, sizeof(*res));
}

struct order {
    float conf;
    uint32_t idx;
};

/* np.argsort(-conf), made stable: descending conf, NaN last (as -NaN sorts last), then index. */
static int order_cmp(const void *pa, const void *pb)
{
    const struct order *a = pa, *b = pb;
    const int na = isnan(a->conf), nb = isnan(b->conf);
    if (na != nb) return na - nb;
    if (!na) {
        if (a->conf > b->conf) return -1;
        if (a->conf < b->conf) return 1;
    }
    return (a->idx > b->idx) - (a->idx < b->idx);
}

int trn_ap_per_class(const uint8_t *tp, const float *conf, const int *pred_cls, size_t n,
                     const int *target_cls, size_t m, int nc, struct trn_ap_result *res)
{
    if (!res) return -EINVAL;
    memset(res, 0, sizeof(*res));
    if (nc < 1 || ((!tp || !conf || !pred_cls) && n) || (!target_cls && m)) return -EINVAL;
    if (n > UINT32_MAX) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (pred_cls[i] < 0 || pred_cls[i] >= nc) return -EINVAL;
    for (size_t i = 0; i < m; i++)
        if (target_cls[i] < 0 || target_cls[i] >= nc) return -EINVAL;

    res->nc = nc;
    res->nt = calloc((size_t)nc, sizeof(int64_t));
    if (!res->nt) return -ENOMEM;
    for (size_t i = 0; i < m; i++)
        res->nt[target_cls[i]]++;
    res->n_labels = (int64_t)m;

    int any = 0;
    for (size_t i = 0; i < n * TRN_NIOU && !any; i++)
        any = tp[i] != 0;
    if (!any) return 0; /* val.py: `if len(stats) and stats[0].any()` */

    int n_cls = 0;
    for (int c = 0; c < nc; c++)
        n_cls += res->nt[c] > 0;
    const size_t K = (size_t)n_cls;

    struct order *ord = malloc((n ? n : 1) * sizeof(*ord));
    double *px = malloc(NPX * sizeof(double)), *npx = malloc(NPX * sizeof(double));
    /* The curves are kept in the result for the plots (ownership moves at the end). */
    double *pc = res->curve_p = calloc(K * NPX, sizeof(double));
    double *rcv = res->curve_r = calloc(K * NPX, sizeof(double));
    double *f1 = res->curve_f1 = calloc(K * NPX, sizeof(double));
    res->curve_pr = calloc(K * NPX, sizeof(double));
    res->pr_valid = calloc(K, 1);
    res->mean_pr = calloc(NPX, sizeof(double));
    res->mean_p = calloc(NPX, sizeof(double));
    res->mean_r = calloc(NPX, sizeof(double));
    double *fm = res->mean_f1 = calloc(NPX, sizeof(double));
    double *col_pr = malloc((K ? K : 1) * sizeof(double));
    double *xp = malloc((n ? n : 1) * sizeof(double));
    double *rec = malloc((n ? n : 1) * TRN_NIOU * sizeof(double));
    double *pre = malloc((n ? n : 1) * TRN_NIOU * sizeof(double));
    double *col_r = malloc((n ? n : 1) * sizeof(double)),
           *col_p = malloc((n ? n : 1) * sizeof(double));
    int rc = -ENOMEM;
    res->n_cls = n_cls;
    res->cls = malloc(K * sizeof(int));
    res->p = calloc(K, sizeof(double));
    res->r = calloc(K, sizeof(double));
    res->f1 = calloc(K, sizeof(double));
    res->tp = calloc(K, sizeof(double));
    res->fp = calloc(K, sizeof(double));
    res->ap = calloc(K * TRN_NIOU, sizeof(double));
    res->ap50 = calloc(K, sizeof(double));
    res->ap5095 = calloc(K, sizeof(double));
    if (!ord || !px || !npx || !pc || !rcv || !f1 || !xp || !rec || !pre || !col_r || !col_p ||
        !fm || !col_pr || !res->curve_pr || !res->pr_valid || !res->mean_pr || !res->mean_p ||
        !res->mean_r || !res->cls || !res->p || !res->r || !res->f1 || !res->tp || !res->fp ||
        !res->ap || !res->ap50 || !res->ap5095)
        goto out;

    for (size_t i = 0; i < n; i++)
        ord[i] = (struct order){ conf[i], (uint32_t)i };
    qsort(ord, n, sizeof(*ord), order_cmp);
    trn_np_linspace(0.0, 1.0, NPX, px);
    for (size_t k = 0; k < NPX; k++)
        npx[k] = -px[k];

    size_t ci = 0;
    for (int c = 0; c < nc; c++) {
        if (!res->nt[c]) continue;
        res->cls[ci] = c;
        const double n_l = (double)res->nt[c];
        size_t k = 0;
        uint64_t tpc[TRN_NIOU] = { 0 }, fpc[TRN_NIOU] = { 0 };
        for (size_t s = 0; s < n; s++) {
            const uint32_t i = ord[s].idx;
            if (pred_cls[i] != c) continue;
            xp[k] = -(double)conf[i]; /* -conf in float32 then widened: the same value */
            for (int t = 0; t < TRN_NIOU; t++) {
                tpc[t] += tp[(size_t)i * TRN_NIOU + (size_t)t] != 0;
                fpc[t] += tp[(size_t)i * TRN_NIOU + (size_t)t] == 0;
                rec[(size_t)t * n + k] = (double)tpc[t] / (n_l + AP_EPS);
                pre[(size_t)t * n + k] = (double)tpc[t] / (double)(tpc[t] + fpc[t]);
            }
            k++;
        }
        if (k > 0) {
            trn_np_interp(npx, NPX, xp, rec, k, 0.0, rec[k - 1], rcv + ci * NPX);
            trn_np_interp(npx, NPX, xp, pre, k, 1.0, pre[k - 1], pc + ci * NPX);
            res->pr_valid[ci] = 1;
            res->n_pr++;
            for (int t = 0; t < TRN_NIOU; t++) {
                memcpy(col_r, rec + (size_t)t * n, k * sizeof(double));
                memcpy(col_p, pre + (size_t)t * n, k * sizeof(double));
                rc = compute_ap_py(col_r, col_p, k, &res->ap[ci * TRN_NIOU + (size_t)t], px,
                                   t == 0 ? res->curve_pr + ci * NPX : NULL);
                if (rc < 0) goto out;
            }
        }
        ci++;
    }

    /* f1 = 2 * p * r / (p + r + eps); its class mean row by row; smooth; argmax. */
    for (size_t i = 0; i < K * NPX; i++)
        f1[i] = 2 * pc[i] * rcv[i] / (pc[i] + rcv[i] + AP_EPS);
    for (size_t k = 0; k < NPX; k++) {
        double s = 0.0, sp = 0.0, sr = 0.0;
        for (size_t c = 0; c < K; c++) {
            s += f1[c * NPX + k];
            sp += pc[c * NPX + k];
            sr += rcv[c * NPX + k];
        }
        fm[k] = s / (double)K;
        res->mean_p[k] = sp / (double)K;
        res->mean_r[k] = sr / (double)K;
        /* py.mean(1) of the (NPX, n_pr) stack: a contiguous row, numpy's pairwise sum */
        size_t v = 0;
        for (size_t c = 0; c < K; c++)
            if (res->pr_valid[c]) col_pr[v++] = res->curve_pr[c * NPX + k];
        res->mean_pr[k] = trn_np_mean(col_pr, v);
    }
    /* smooth(f1.mean(0), 0.1), then its first argmax. */
    double *sm = malloc(NPX * sizeof(double));
    if (!sm) goto out;
    trn_np_smooth(fm, NPX, SMOOTH_FRAC, sm);
    size_t best = 0;
    for (size_t k = 1; k < NPX; k++)
        if (sm[k] > sm[best]) best = k;
    free(sm);
    res->conf_index = (int)best;
    for (size_t c = 0; c < K; c++) {
        res->p[c] = pc[c * NPX + best];
        res->r[c] = rcv[c * NPX + best];
        res->f1[c] = f1[c * NPX + best];
        res->tp[c] = nearbyint(res->r[c] * (double)res->nt[res->cls[c]]);
        res->fp[c] = nearbyint(res->tp[c] / (res->p[c] + AP_EPS) - res->tp[c]);
        res->ap50[c] = res->ap[c * TRN_NIOU];
        res->ap5095[c] = trn_np_mean(res->ap + c * TRN_NIOU, TRN_NIOU);
    }
    res->mp = trn_np_mean(res->p, K);
    res->mr = trn_np_mean(res->r, K);
    res->map50 = trn_np_mean(res->ap50, K);
    res->map5095 = trn_np_mean(res->ap5095, K);
    rc = 0;
out:
    free(ord);
    free(px);
    free(npx);
    free(xp);
    free(col_pr);
    free(rec);
    free(pre);
    free(col_r);
    free(col_p);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Accumulator                                                                               */

struct trn_val_stats {
    int nc;
    int seen;
    uint8_t *correct; /* n_det * TRN_NIOU */
    float *conf;
    int *pcls;
    size_t n_det, cap_det;
    int *tcls;
    size_t n_lab, cap_lab;
};

int trn_val_stats_create(int nc, struct trn_val_stats **out)
{
    if (!out || nc < 1) return -EINVAL;
    *out = calloc(1, sizeof(**out));
    if (!*out) return -ENOMEM;
    (*out)->nc = nc;
    return 0;
}

void trn_val_stats_destroy(struct trn_val_stats *st)
{
    if (!st) return;
    free(st->correct);
    free(st->conf);
    free(st->pcls);
    free(st->tcls);
    free(st);
}

void trn_val_stats_reset(struct trn_val_stats *st)
{
    st->seen = 0;
    st->n_det = 0;
    st->n_lab = 0;
}

int trn_val_stats_seen(const struct trn_val_stats *st)
{
    return st->seen;
}

int trn_val_stats_add(struct trn_val_stats *st, const struct trn_det *dets, size_t n,
                      const struct trn_label *labels, size_t m)
{
    if (!st || (!dets && n) || (!labels && m)) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (dets[i].cls < 0 || dets[i].cls >= st->nc) return -EINVAL;
    for (size_t i = 0; i < m; i++)
        if (labels[i].cls < 0 || labels[i].cls >= st->nc) return -EINVAL;
    if (st->n_det + n > st->cap_det) {
        size_t c = st->cap_det ? st->cap_det : 1024;
        while (c < st->n_det + n)
            c *= 2;
        uint8_t *a = realloc(st->correct, c * TRN_NIOU);
        if (!a) return -ENOMEM;
        st->correct = a;
        float *b = realloc(st->conf, c * sizeof(float));
        if (!b) return -ENOMEM;
        st->conf = b;
        int *d = realloc(st->pcls, c * sizeof(int));
        if (!d) return -ENOMEM;
        st->pcls = d;
        st->cap_det = c;
    }
    if (st->n_lab + m > st->cap_lab) {
        size_t c = st->cap_lab ? st->cap_lab : 1024;
        while (c < st->n_lab + m)
            c *= 2;
        int *a = realloc(st->tcls, c * sizeof(int));
        if (!a) return -ENOMEM;
        st->tcls = a;
        st->cap_lab = c;
    }
    const int rc = trn_process_batch(dets, n, labels, m, st->correct + st->n_det * TRN_NIOU);
    if (rc < 0) return rc;
    for (size_t i = 0; i < n; i++) {
        st->conf[st->n_det + i] = dets[i].conf;
        st->pcls[st->n_det + i] = dets[i].cls;
    }
    for (size_t i = 0; i < m; i++)
        st->tcls[st->n_lab + i] = labels[i].cls;
    st->n_det += n;
    st->n_lab += m;
    st->seen++;
    return 0;
}

int trn_val_stats_compute(const struct trn_val_stats *st, struct trn_ap_result *res)
{
    if (!st) return -EINVAL;
    return trn_ap_per_class(st->correct, st->conf, st->pcls, st->n_det, st->tcls, st->n_lab, st->nc,
                            res);
}

/* ---------------------------------------------------------------------------------------- */
/* Confusion matrix                                                                          */

struct trn_confusion {
    int nc;
    float conf, iou_thres;
    double *matrix; /* (nc + 1)^2, [pred][true] */
};

int trn_confusion_create(int nc, float conf, float iou_thres, struct trn_confusion **out)
{
    if (!out || nc < 1) return -EINVAL;
    struct trn_confusion *cm = calloc(1, sizeof(*cm));
    if (!cm) return -ENOMEM;
    cm->matrix = calloc((size_t)(nc + 1) * (size_t)(nc + 1), sizeof(double));
    if (!cm->matrix) {
        free(cm);
        return -ENOMEM;
    }
    cm->nc = nc;
    cm->conf = conf;
    cm->iou_thres = iou_thres;
    *out = cm;
    return 0;
}

void trn_confusion_destroy(struct trn_confusion *cm)
{
    if (!cm) return;
    free(cm->matrix);
    free(cm);
}

const double *trn_confusion_matrix(const struct trn_confusion *cm)
{
    return cm->matrix;
}

int trn_confusion_add(struct trn_confusion *cm, const struct trn_det *dets, size_t n,
                      const struct trn_label *labels, size_t m)
{
    if (!cm || (!dets && n) || (!labels && m)) return -EINVAL;
    const size_t N = (size_t)cm->nc + 1, bg = (size_t)cm->nc;
    for (size_t i = 0; i < n; i++)
        if (dets[i].cls < 0 || dets[i].cls >= cm->nc) return -EINVAL;
    for (size_t i = 0; i < m; i++)
        if (labels[i].cls < 0 || labels[i].cls >= cm->nc) return -EINVAL;
    if (!m) return 0;
    if (!n) {
        for (size_t i = 0; i < m; i++)
            cm->matrix[bg * N + (size_t)labels[i].cls] += 1;
        return 0;
    }
    /* detections[detections[:, 4] > self.conf] */
    struct trn_det *d = malloc(n * sizeof(*d));
    long *best = malloc(n * sizeof(long));
    float *best_iou = malloc(n * sizeof(float));
    long *lab_det = malloc(m * sizeof(long));
    uint8_t *det_used = calloc(n, 1);
    float *iou = NULL;
    int rc = -ENOMEM;
    if (!d || !best || !best_iou || !lab_det || !det_used) goto out;
    size_t nd = 0;
    for (size_t i = 0; i < n; i++)
        if (dets[i].conf > cm->conf) d[nd++] = dets[i];
    iou = iou_matrix(d, nd, labels, m);
    if (!iou) goto out;
    size_t count = 0, last_l = 0, last_d = 0;
    for (size_t j = 0; j < nd; j++) {
        best[j] = -1;
        best_iou[j] = 0;
        for (size_t l = 0; l < m; l++) {
            const float v = iou[l * nd + j];
            if (!(v > cm->iou_thres)) continue;
            count++;
            last_l = l;
            last_d = j;
            if (best[j] < 0 || v >= best_iou[j]) { /* ties: the later label */
                best_iou[j] = v;
                best[j] = (long)l;
            }
        }
    }
    for (size_t l = 0; l < m; l++)
        lab_det[l] = -1;
    if (count == 1) {
        lab_det[last_l] = (long)last_d;
    } else if (count > 1) {
        /* Re-sorted by IoU (reversed stable argsort), unique per label: per label the highest
         * IoU, ties to the later detection. */
        float *lab_iou = malloc(m * sizeof(float));
        if (!lab_iou) goto out;
        for (size_t j = 0; j < nd; j++) {
            if (best[j] < 0) continue;
            const size_t l = (size_t)best[j];
            if (lab_det[l] < 0 || best_iou[j] >= lab_iou[l]) {
                lab_iou[l] = best_iou[j];
                lab_det[l] = (long)j;
            }
        }
        free(lab_iou);
    }
    for (size_t l = 0; l < m; l++) {
        const size_t gc = (size_t)labels[l].cls;
        if (lab_det[l] >= 0) {
            cm->matrix[(size_t)d[lab_det[l]].cls * N + gc] += 1;
            det_used[lab_det[l]] = 1;
        } else {
            cm->matrix[bg * N + gc] += 1;
        }
    }
    if (count)
        for (size_t j = 0; j < nd; j++)
            if (!det_used[j]) cm->matrix[(size_t)d[j].cls * N + bg] += 1;
    rc = 0;
out:
    free(d);
    free(best);
    free(best_iou);
    free(lab_det);
    free(det_used);
    free(iou);
    return rc;
}
