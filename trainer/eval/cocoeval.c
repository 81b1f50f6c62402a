/*
 * cocoeval: see cocoeval.h for the algorithm and the differences from pycocotools.
 *
 * JSON: cJSON (Debian libcjson-dev), a DOM parser. Evaluation reads an annotation file once per
 * run: val2017's 25 MB instances file becomes a tree of a few hundred MB for a second, which is
 * fine for a one-off evaluation and far simpler than a streaming (yajl) reader that must track
 * keys by depth; the 450 MB train2017 file, which pack/ streams with yajl, is never evaluated.
 */
#include "cocoeval.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util.h"

#define COCO_MAX_FILE ((size_t)4 << 30) /* the largest annotation or detection json read */
#define NT            10                /* IoU thresholds */
#define NR            101               /* recall thresholds */
#define NA            4                 /* area ranges */
#define NM            3                 /* maxDets */
#define MAXDT         100               /* p.maxDets[-1] */

static const int max_dets[NM] = { 1, 10, 100 };
static const double area_rng[NA][2] = {
    { 0.0, 1e10 }, { 0.0, 32.0 * 32.0 }, { 32.0 * 32.0, 96.0 * 96.0 }, { 96.0 * 96.0, 1e10 }
};

/* ---------------------------------------------------------------------------------------- */
/* Reading                                                                                   */

static int get_num(const cJSON *obj, const char *key, double *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(it)) return -1;
    *v = it->valuedouble;
    return 0;
}

static int get_int64(const cJSON *obj, const char *key, int64_t *v)
{
    double d;
    if (get_num(obj, key, &d) || d != floor(d) || fabs(d) > 9007199254740992.0) return -1;
    *v = (int64_t)d;
    return 0;
}

static int get_int(const cJSON *obj, const char *key, int *v)
{
    int64_t x;
    if (get_int64(obj, key, &x) || x < INT32_MIN || x > INT32_MAX) return -1;
    *v = (int)x;
    return 0;
}

static int get_bbox(const cJSON *obj, double bb[4])
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, "bbox");
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 4) return -1;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsNumber(e)) return -1;
        bb[k++] = e->valuedouble;
    }
    return 0;
}

void trn_coco_gt_free(struct trn_coco_gt *gt)
{
    if (!gt) return;
    for (size_t i = 0; i < gt->n_cats; i++)
        free(gt->cats[i].name);
    free(gt->cats);
    free(gt->anns);
    free(gt->images);
    memset(gt, 0, sizeof(*gt));
}

int trn_coco_gt_parse(const char *json, size_t len, const char *name, struct trn_coco_gt *gt,
                      char *err, size_t cap)
{
    if (!gt) return -EINVAL;
    memset(gt, 0, sizeof(*gt));
    if (!json || !name) return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    int rc = -EINVAL;
    if (!root) {
        trn_seterr(err, cap, "%s: not valid json", name);
        return -EINVAL;
    }
    const cJSON *images = cJSON_GetObjectItemCaseSensitive(root, "images");
    const cJSON *anns = cJSON_GetObjectItemCaseSensitive(root, "annotations");
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(root, "categories");
    if (!cJSON_IsArray(images) || !cJSON_IsArray(anns) || !cJSON_IsArray(cats)) {
        trn_seterr(err, cap, "%s: needs arrays 'images', 'annotations' and 'categories'", name);
        goto out;
    }
    const size_t ni = (size_t)cJSON_GetArraySize(images), na = (size_t)cJSON_GetArraySize(anns),
                 nc = (size_t)cJSON_GetArraySize(cats);
    gt->images = calloc(ni ? ni : 1, sizeof(*gt->images));
    gt->anns = calloc(na ? na : 1, sizeof(*gt->anns));
    gt->cats = calloc(nc ? nc : 1, sizeof(*gt->cats));
    if (!gt->images || !gt->anns || !gt->cats) {
        rc = -ENOMEM;
        trn_seterr(err, cap, "%s: out of memory", name);
        goto out;
    }
    const cJSON *e;
    size_t i = 0;
    cJSON_ArrayForEach(e, images)
    {
        struct trn_coco_image *im = &gt->images[i];
        if (!cJSON_IsObject(e) || get_int64(e, "id", &im->id)) {
            trn_seterr(err, cap, "%s: images[%zu]: missing or non-integer 'id'", name, i);
            goto out;
        }
        if (get_int(e, "width", &im->width)) im->width = 0;
        if (get_int(e, "height", &im->height)) im->height = 0;
        gt->n_images = ++i;
    }
    i = 0;
    cJSON_ArrayForEach(e, anns)
    {
        struct trn_coco_ann *a = &gt->anns[i];
        const char *bad = NULL;
        if (!cJSON_IsObject(e))
            bad = "not an object";
        else if (get_int64(e, "id", &a->id))
            bad = "missing or non-integer 'id'";
        else if (get_int64(e, "image_id", &a->image_id))
            bad = "missing or non-integer 'image_id'";
        else if (get_int(e, "category_id", &a->category_id))
            bad = "missing or non-integer 'category_id'";
        else if (get_bbox(e, a->bbox))
            bad = "'bbox' is not 4 numbers";
        else if (get_num(e, "area", &a->area))
            bad = "missing or non-numeric 'area'";
        if (!bad) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "iscrowd");
            if (c && !cJSON_IsNumber(c) && !cJSON_IsBool(c))
                bad = "'iscrowd' is not a number";
            else
                a->iscrowd = c ? (cJSON_IsBool(c) ? cJSON_IsTrue(c) : c->valuedouble != 0) : 0;
        }
        if (bad) {
            trn_seterr(err, cap, "%s: annotations[%zu]: %s", name, i, bad);
            goto out;
        }
        gt->n_anns = ++i;
    }
    i = 0;
    cJSON_ArrayForEach(e, cats)
    {
        struct trn_coco_cat *c = &gt->cats[i];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (!cJSON_IsObject(e) || get_int(e, "id", &c->id)) {
            trn_seterr(err, cap, "%s: categories[%zu]: missing or non-integer 'id'", name, i);
            goto out;
        }
        c->name = strdup(cJSON_IsString(nm) ? nm->valuestring : "");
        gt->n_cats = ++i;
        if (!c->name) {
            rc = -ENOMEM;
            trn_seterr(err, cap, "%s: out of memory", name);
            goto out;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc < 0) trn_coco_gt_free(gt);
    return rc;
}

int trn_coco_gt_load(const char *path, struct trn_coco_gt *gt, char *err, size_t cap)
{
    if (!gt) return -EINVAL;
    memset(gt, 0, sizeof(*gt));
    if (!path) return -EINVAL;
    char *buf = NULL;
    size_t len = 0;
    int rc = trn_read_file(path, COCO_MAX_FILE, &buf, &len, err, cap);
    if (rc < 0) return rc;
    rc = trn_coco_gt_parse(buf, len, path, gt, err, cap);
    free(buf);
    return rc;
}

int trn_coco_dets_load(const char *path, struct trn_coco_det **dets, size_t *n, char *err,
                       size_t cap)
{
    if (!path || !dets || !n) return -EINVAL;
    *dets = NULL;
    *n = 0;
    char *buf = NULL;
    size_t len = 0;
    int rc = trn_read_file(path, COCO_MAX_FILE, &buf, &len, err, cap);
    if (rc < 0) return rc;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    rc = -EINVAL;
    if (!cJSON_IsArray(root)) {
        trn_seterr(err, cap, "%s: not a json list of detections", path);
        goto out;
    }
    const size_t nd = (size_t)cJSON_GetArraySize(root);
    struct trn_coco_det *d = calloc(nd ? nd : 1, sizeof(*d));
    if (!d) {
        rc = -ENOMEM;
        trn_seterr(err, cap, "%s: out of memory", path);
        goto out;
    }
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root)
    {
        if (!cJSON_IsObject(e) || get_int64(e, "image_id", &d[i].image_id) ||
            get_int(e, "category_id", &d[i].category_id) || get_bbox(e, d[i].bbox) ||
            get_num(e, "score", &d[i].score)) {
            trn_seterr(err, cap,
                       "%s: [%zu]: needs integer image_id, category_id, 4-number bbox, score", path,
                       i);
            free(d);
            goto out;
        }
        i++;
    }
    *dets = d;
    *n = nd;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Writing                                                                                   */

int trn_coco80_to_coco91(int cls)
{
    static const unsigned char map[80] = { 1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 13, 14, 15,
                                           16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32,
                                           33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47,
                                           48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61,
                                           62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79,
                                           80, 81, 82, 84, 85, 86, 87, 88, 89, 90 };
    return cls >= 0 && cls < 80 ? map[cls] : -1;
}

/* Python's round(x, nd): the decimal string correctly rounded (glibc printf rounds the exact
 * binary value, ties to even, as CPython's dtoa does), read back. */
static double py_round(double x, int nd)
{
    char s[64];
    if (!isfinite(x)) return x;
    snprintf(s, sizeof(s), "%.*f", nd, x);
    return strtod(s, NULL);
}

void trn_coco_det_from(const struct trn_det *d, int64_t image_id, int category_id,
                       struct trn_coco_det *out)
{
    /* xyxy2xywh: cx = (x1 + x2) / 2, w = x2 - x1; then box[:, :2] -= box[:, 2:] / 2; float32. */
    const float w = d->x2 - d->x1, h = d->y2 - d->y1;
    const float cx = (d->x1 + d->x2) / 2, cy = (d->y1 + d->y2) / 2;
    const float x = cx - w / 2, y = cy - h / 2;
    out->image_id = image_id;
    out->category_id = category_id;
    out->bbox[0] = py_round(x, 3);
    out->bbox[1] = py_round(y, 3);
    out->bbox[2] = py_round(w, 3);
    out->bbox[3] = py_round(h, 3);
    out->score = py_round(d->conf, 5);
}

/* A float as Python's repr would print a value already rounded to nd decimals: the %.{nd}f
 * digits without trailing zeros, at least one decimal. */
static void fmt_dec(char *s, size_t cap, double v, int nd)
{
    snprintf(s, cap, "%.*f", nd, v);
    char *dot = strchr(s, '.');
    if (!dot) return;
    char *end = s + strlen(s) - 1;
    while (end > dot + 1 && *end == '0')
        *end-- = '\0';
}

int trn_coco_dets_write(FILE *f, const struct trn_coco_det *dets, size_t n)
{
    if (!f || (!dets && n)) return -EINVAL;
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        char b[4][48], sc[48];
        for (int k = 0; k < 4; k++)
            fmt_dec(b[k], sizeof(b[k]), dets[i].bbox[k], 3);
        fmt_dec(sc, sizeof(sc), dets[i].score, 5);
        fprintf(f,
                "%s{\"image_id\": %" PRId64 ", \"category_id\": %d, \"bbox\": [%s, %s, %s, %s], "
                "\"score\": %s}",
                i ? ", " : "", dets[i].image_id, dets[i].category_id, b[0], b[1], b[2], b[3], sc);
    }
    fputc(']', f);
    return ferror(f) ? -EIO : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Evaluation                                                                                */

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_int(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static size_t uniq_i64(int64_t *a, size_t n)
{
    qsort(a, n, sizeof(*a), cmp_i64);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || a[i] != a[k - 1]) a[k++] = a[i];
    return k;
}

static long find_i64(const int64_t *a, size_t n, int64_t v)
{
    const int64_t *p = bsearch(&v, a, n, sizeof(*a), cmp_i64);
    return p ? (long)(p - a) : -1;
}

static long find_int(const int *a, size_t n, int v)
{
    const int *p = bsearch(&v, a, n, sizeof(*a), cmp_int);
    return p ? (long)(p - a) : -1;
}

/* A scored index: sorting by descending score with the index as tie-break is mergesort's
 * stable order of np.argsort(-score, kind='mergesort'). */
struct sidx {
    double score;
    uint32_t idx;
};

static int sidx_cmp(const void *pa, const void *pb)
{
    const struct sidx *a = pa, *b = pb;
    /* -score ascending; NaN sorts last in numpy. */
    const int na = isnan(a->score), nb = isnan(b->score);
    if (na != nb) return na - nb;
    if (!na) {
        if (a->score > b->score) return -1;
        if (a->score < b->score) return 1;
    }
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* maskApi.c bbIou for one (detection, GT) pair of xywh boxes. */
static double bb_iou(const double d[4], const double g[4], int crowd)
{
    const double ga = g[2] * g[3], da = d[2] * d[3];
    const double w = fmin(d[2] + d[0], g[2] + g[0]) - fmax(d[0], g[0]);
    if (w <= 0) return 0;
    const double h = fmin(d[3] + d[1], g[3] + g[1]) - fmax(d[1], g[1]);
    if (h <= 0) return 0;
    const double i = w * h, u = crowd ? da : da + ga - i;
    return i / u;
}

/* Per-detection result of evaluateImg for one area range. */
struct drec {
    double score;
    uint8_t matched[NT]; /* dtMatches != 0 */
    uint8_t ignore[NT];  /* dtIgnore */
};

/* The evaluateImg results of one (category, area) over the images, in image order. */
struct area_acc {
    struct drec *d;
    size_t n, cap;
    size_t *img_start, *img_n; /* per non-None image: first record and count */
    size_t n_img, cap_img;
    size_t npig; /* GTs not ignored, over the images */
};

static int acc_push_img(struct area_acc *a, size_t nd)
{
    if (a->n_img == a->cap_img) {
        const size_t c = a->cap_img ? 2 * a->cap_img : 256;
        size_t *s = realloc(a->img_start, c * sizeof(size_t));
        if (!s) return -ENOMEM;
        a->img_start = s;
        size_t *m = realloc(a->img_n, c * sizeof(size_t));
        if (!m) return -ENOMEM;
        a->img_n = m;
        a->cap_img = c;
    }
    if (a->n + nd > a->cap) {
        size_t c = a->cap ? a->cap : 1024;
        while (c < a->n + nd)
            c *= 2;
        struct drec *d = realloc(a->d, c * sizeof(*d));
        if (!d) return -ENOMEM;
        a->d = d;
        a->cap = c;
    }
    a->img_start[a->n_img] = a->n;
    a->img_n[a->n_img] = nd;
    a->n_img++;
    a->n += nd;
    return 0;
}

/* accumulate() for one (category, area) and every maxDets; writes precision / recall entries. */
static int accumulate(const struct area_acc *a, const double *rec_thrs, double *prec_out,
                      double *rec_out, size_t k, size_t ai, size_t K)
{
    if (a->n_img == 0 || a->npig == 0) return 0; /* stays -1 */
    struct sidx *s = malloc((a->n ? a->n : 1) * sizeof(*s));
    double *rc = malloc((a->n ? a->n : 1) * sizeof(double));
    double *pr = malloc((a->n ? a->n : 1) * sizeof(double));
    int ret = -ENOMEM;
    if (!s || !rc || !pr) goto out;
    for (int mi = 0; mi < NM; mi++) {
        size_t nd = 0;
        for (size_t e = 0; e < a->n_img; e++) {
            const size_t take =
                a->img_n[e] < (size_t)max_dets[mi] ? a->img_n[e] : (size_t)max_dets[mi];
            for (size_t j = 0; j < take; j++) {
                s[nd].score = a->d[a->img_start[e] + j].score;
                s[nd].idx = (uint32_t)(a->img_start[e] + j);
                nd++;
            }
        }
        /* idx grows with concatenation order, so the tie-break is mergesort's stability. */
        qsort(s, nd, sizeof(*s), sidx_cmp);
        for (int t = 0; t < NT; t++) {
            double tp = 0, fp = 0;
            for (size_t i = 0; i < nd; i++) {
                const struct drec *r = &a->d[s[i].idx];
                if (!r->ignore[t]) {
                    if (r->matched[t])
                        tp += 1;
                    else
                        fp += 1;
                }
                rc[i] = tp / (double)a->npig;
                pr[i] = tp / (fp + tp + 2.220446049250313e-16); /* np.spacing(1) */
            }
            rec_out[(((size_t)t * K + k) * NA + ai) * NM + (size_t)mi] = nd ? rc[nd - 1] : 0;
            for (size_t i = nd; i-- > 1;)
                if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
            size_t idx = 0;
            for (int r = 0; r < NR; r++) {
                /* np.searchsorted(rc, recThrs, side='left'): first rc[idx] >= thr. */
                while (idx < nd && rc[idx] < rec_thrs[r])
                    idx++;
                const double q = idx < nd ? pr[idx] : 0.0;
                prec_out[((((size_t)t * NR + (size_t)r) * K + k) * NA + ai) * NM + (size_t)mi] = q;
            }
        }
    }
    ret = 0;
out:
    free(s);
    free(rc);
    free(pr);
    return ret;
}

/* summarize()'s _summarize: np.mean of the entries > -1, else -1. */
static double summ(const double *prec, const double *rec, size_t K, int ap, int t_sel, size_t ai,
                   size_t mi, double *buf)
{
    size_t n = 0;
    for (int t = 0; t < NT; t++) {
        if (t_sel >= 0 && t != t_sel) continue;
        if (ap) {
            for (size_t r = 0; r < NR; r++)
                for (size_t k = 0; k < K; k++) {
                    const double v = prec[((((size_t)t * NR + r) * K + k) * NA + ai) * NM + mi];
                    if (v > -1) buf[n++] = v;
                }
        } else {
            for (size_t k = 0; k < K; k++) {
                const double v = rec[(((size_t)t * K + k) * NA + ai) * NM + mi];
                if (v > -1) buf[n++] = v;
            }
        }
    }
    return n ? trn_np_mean(buf, n) : -1.0;
}

int trn_coco_eval(const struct trn_coco_gt *gt, const int64_t *img_ids, size_t n_img,
                  const struct trn_coco_det *dets, size_t n_det, double stats[TRN_COCO_NSTATS],
                  char *err, size_t cap)
{
    if (!gt || !stats || (!img_ids && n_img) || (!dets && n_det)) return -EINVAL;
    if (n_det > UINT32_MAX || gt->n_anns > UINT32_MAX) return -EINVAL;
    int rc = -ENOMEM;
    int64_t *imgs = NULL, *gt_imgs = NULL;
    int *cats = NULL;
    size_t *g_off = NULL, *d_off = NULL, *g_ord = NULL, *d_ord = NULL, *cur = NULL;
    double *prec = NULL, *rec = NULL, *ious = NULL, *buf = NULL;
    struct sidx *ds = NULL;
    size_t *gidx = NULL;
    uint8_t *gtm = NULL, *g_ig = NULL;
    struct area_acc acc[NA];
    memset(acc, 0, sizeof(acc));

    /* loadRes: every result image must be in the annotation file. */
    gt_imgs = malloc((gt->n_images ? gt->n_images : 1) * sizeof(int64_t));
    if (!gt_imgs) goto out;
    for (size_t i = 0; i < gt->n_images; i++)
        gt_imgs[i] = gt->images[i].id;
    const size_t n_gt_imgs = uniq_i64(gt_imgs, gt->n_images);
    for (size_t i = 0; i < n_det; i++)
        if (find_i64(gt_imgs, n_gt_imgs, dets[i].image_id) < 0) {
            trn_seterr(err, cap, "detections[%zu]: image_id %" PRId64 " is not in the annotations",
                       i, dets[i].image_id);
            rc = -EINVAL;
            goto out;
        }

    /* p.imgIds = np.unique(imgIds); p.catIds = sorted(getCatIds()). */
    size_t I;
    if (img_ids) {
        imgs = malloc((n_img ? n_img : 1) * sizeof(int64_t));
        if (!imgs) goto out;
        memcpy(imgs, img_ids, n_img * sizeof(int64_t));
        I = uniq_i64(imgs, n_img);
    } else {
        imgs = gt_imgs;
        gt_imgs = NULL;
        I = n_gt_imgs;
    }
    cats = malloc((gt->n_cats ? gt->n_cats : 1) * sizeof(int));
    if (!cats) goto out;
    size_t K = 0;
    for (size_t i = 0; i < gt->n_cats; i++)
        cats[K++] = gt->cats[i].id;
    qsort(cats, K, sizeof(int), cmp_int);
    {
        size_t u = 0;
        for (size_t i = 0; i < K; i++)
            if (u == 0 || cats[i] != cats[u - 1]) cats[u++] = cats[i];
        K = u;
    }

    /* Group GT and detections per (category, image) bucket, stable (file order). */
    const size_t NB = K * I;
    g_off = calloc(NB + 1, sizeof(size_t));
    d_off = calloc(NB + 1, sizeof(size_t));
    cur = malloc((NB + 1) * sizeof(size_t));
    g_ord = malloc((gt->n_anns ? gt->n_anns : 1) * sizeof(size_t));
    d_ord = malloc((n_det ? n_det : 1) * sizeof(size_t));
    if (!g_off || !d_off || !cur || !g_ord || !d_ord) goto out;
    for (int pass = 0; pass < 2; pass++) {
        const size_t cnt = pass ? n_det : gt->n_anns;
        size_t *off = pass ? d_off : g_off, *ord = pass ? d_ord : g_ord;
        for (size_t i = 0; i < cnt; i++) {
            const int64_t im = pass ? dets[i].image_id : gt->anns[i].image_id;
            const int ca = pass ? dets[i].category_id : gt->anns[i].category_id;
            const long ii = find_i64(imgs, I, im), kk = find_int(cats, K, ca);
            if (ii >= 0 && kk >= 0) off[(size_t)kk * I + (size_t)ii + 1]++;
        }
        for (size_t b = 0; b < NB; b++)
            off[b + 1] += off[b];
        memcpy(cur, off, (NB + 1) * sizeof(size_t));
        for (size_t i = 0; i < cnt; i++) {
            const int64_t im = pass ? dets[i].image_id : gt->anns[i].image_id;
            const int ca = pass ? dets[i].category_id : gt->anns[i].category_id;
            const long ii = find_i64(imgs, I, im), kk = find_int(cats, K, ca);
            if (ii >= 0 && kk >= 0) ord[cur[(size_t)kk * I + (size_t)ii]++] = i;
        }
    }

    const size_t np_ = (size_t)NT * NR * K * NA * NM, nr_ = (size_t)NT * K * NA * NM;
    prec = malloc((np_ ? np_ : 1) * sizeof(double));
    rec = malloc((nr_ ? nr_ : 1) * sizeof(double));
    if (!prec || !rec) goto out;
    for (size_t i = 0; i < np_; i++)
        prec[i] = -1;
    for (size_t i = 0; i < nr_; i++)
        rec[i] = -1;

    double iou_thrs[NT], rec_thrs[NR];
    trn_np_linspace(0.5, 0.95, NT, iou_thrs);
    trn_np_linspace(0.0, 1.0, NR, rec_thrs);

    size_t max_g = 1, max_d = 1;
    for (size_t b = 0; b < NB; b++) {
        if (g_off[b + 1] - g_off[b] > max_g) max_g = g_off[b + 1] - g_off[b];
        if (d_off[b + 1] - d_off[b] > max_d) max_d = d_off[b + 1] - d_off[b];
    }
    ds = malloc(max_d * sizeof(*ds));
    ious = malloc((max_d < MAXDT ? max_d : MAXDT) * max_g * sizeof(double));
    gidx = malloc(max_g * sizeof(size_t));
    gtm = malloc(NT * max_g);
    g_ig = malloc(max_g);
    if (!ds || !ious || !gidx || !gtm || !g_ig) goto out;

    for (size_t k = 0; k < K; k++) {
        for (int a = 0; a < NA; a++) {
            acc[a].n = 0;
            acc[a].n_img = 0;
            acc[a].npig = 0;
        }
        for (size_t ii = 0; ii < I; ii++) {
            const size_t b = k * I + ii;
            const size_t G = g_off[b + 1] - g_off[b], D0 = d_off[b + 1] - d_off[b];
            if (G == 0 && D0 == 0) continue; /* evaluateImg returns None */
            for (size_t j = 0; j < D0; j++) {
                ds[j].score = dets[d_ord[d_off[b] + j]].score;
                ds[j].idx = (uint32_t)d_ord[d_off[b] + j];
            }
            qsort(ds, D0, sizeof(*ds), sidx_cmp);
            const size_t D = D0 < MAXDT ? D0 : MAXDT;
            for (size_t a = 0; a < NA; a++) {
                /* _ignore, then GT sorted ignore-last (stable). */
                size_t ng = 0;
                for (int pass = 0; pass < 2; pass++)
                    for (size_t j = 0; j < G; j++) {
                        const struct trn_coco_ann *g = &gt->anns[g_ord[g_off[b] + j]];
                        const int ig =
                            g->iscrowd || g->area < area_rng[a][0] || g->area > area_rng[a][1];
                        if (ig != pass) continue;
                        gidx[ng] = g_ord[g_off[b] + j];
                        g_ig[ng] = (uint8_t)ig;
                        ng++;
                    }
                for (size_t d = 0; d < D; d++)
                    for (size_t g = 0; g < G; g++) {
                        const struct trn_coco_ann *ga = &gt->anns[gidx[g]];
                        ious[d * G + g] = bb_iou(dets[ds[d].idx].bbox, ga->bbox, ga->iscrowd);
                    }
                const size_t base = acc[a].n;
                if (acc_push_img(&acc[a], D) < 0) goto out;
                for (size_t g = 0; g < G; g++)
                    acc[a].npig += !g_ig[g];
                memset(gtm, 0, NT * G);
                for (size_t d = 0; d < D; d++) {
                    struct drec *r = &acc[a].d[base + d];
                    const struct trn_coco_det *dt = &dets[ds[d].idx];
                    r->score = dt->score;
                    const double darea = dt->bbox[2] * dt->bbox[3];
                    const int out_rng = darea < area_rng[a][0] || darea > area_rng[a][1];
                    for (int t = 0; t < NT; t++) {
                        double iou = iou_thrs[t] < 1 - 1e-10 ? iou_thrs[t] : 1 - 1e-10;
                        long m = -1;
                        for (size_t g = 0; g < G; g++) {
                            const int crowd = gt->anns[gidx[g]].iscrowd;
                            if (gtm[(size_t)t * G + g] && !crowd) continue;
                            if (m > -1 && !g_ig[m] && g_ig[g]) break;
                            if (ious[d * G + g] < iou) continue;
                            iou = ious[d * G + g];
                            m = (long)g;
                        }
                        if (m == -1) {
                            r->matched[t] = 0;
                            r->ignore[t] = (uint8_t)out_rng;
                        } else {
                            r->matched[t] = 1;
                            r->ignore[t] = g_ig[m];
                            gtm[(size_t)t * G + (size_t)m] = 1;
                        }
                    }
                }
            }
        }
        for (size_t a = 0; a < NA; a++)
            if (accumulate(&acc[a], rec_thrs, prec, rec, k, a, K) < 0) goto out;
    }

    buf = malloc((np_ ? np_ : 1) * sizeof(double));
    if (!buf) goto out;
    int t50 = -1, t75 = -1;
    for (int t = 0; t < NT; t++) {
        if (iou_thrs[t] == .5) t50 = t;
        if (iou_thrs[t] == .75) t75 = t;
    }
    /* np.where(iouThr == p.iouThrs) finding nothing selects nothing: -1. */
    stats[0] = summ(prec, rec, K, 1, -1, 0, 2, buf);
    stats[1] = t50 < 0 ? -1 : summ(prec, rec, K, 1, t50, 0, 2, buf);
    stats[2] = t75 < 0 ? -1 : summ(prec, rec, K, 1, t75, 0, 2, buf);
    stats[3] = summ(prec, rec, K, 1, -1, 1, 2, buf);
    stats[4] = summ(prec, rec, K, 1, -1, 2, 2, buf);
    stats[5] = summ(prec, rec, K, 1, -1, 3, 2, buf);
    stats[6] = summ(prec, rec, K, 0, -1, 0, 0, buf);
    stats[7] = summ(prec, rec, K, 0, -1, 0, 1, buf);
    stats[8] = summ(prec, rec, K, 0, -1, 0, 2, buf);
    stats[9] = summ(prec, rec, K, 0, -1, 1, 2, buf);
    stats[10] = summ(prec, rec, K, 0, -1, 2, 2, buf);
    stats[11] = summ(prec, rec, K, 0, -1, 3, 2, buf);
    rc = 0;
out:
    if (rc == -ENOMEM) trn_seterr(err, cap, "cocoeval: out of memory");
    for (int a = 0; a < NA; a++) {
        free(acc[a].d);
        free(acc[a].img_start);
        free(acc[a].img_n);
    }
    free(imgs);
    free(gt_imgs);
    free(cats);
    free(g_off);
    free(d_off);
    free(cur);
    free(g_ord);
    free(d_ord);
    free(prec);
    free(rec);
    free(ious);
    free(buf);
    free(ds);
    free(gidx);
    free(gtm);
    free(g_ig);
    return rc;
}
