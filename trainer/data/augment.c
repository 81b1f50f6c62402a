/*
 * augment.h: hyperparameters, draws, mosaic, random_perspective's geometry and labels, the
 * output label conversion, rect batch shapes and the whole-sample pipelines. The pixel work is
 * the kern library's augmentation ops (kernels/ref/kern_augment.c, and its CUDA twin): a sample
 * is first planned (plan_sample: labels on the host, a struct kern_aug_sample for the pixels),
 * then either run op by op on the CPU (trn_aug_train_sample: paste, warp, mixup, HSV, flips) or
 * fused for a whole batch on any kern context (trn_aug_train_batch). augment_warp.c keeps the
 * OpenCV-compatible warp entry points, resize and letterbox; augment_color.c HSV, mixup, flips.
 *
 * Label arithmetic follows numpy's types in ultralytics: label arrays are float32 and numpy
 * (1.x value-based casting and 2.x NEP 50 alike) keeps float32 when they meet Python ints and
 * floats, so those steps are float operations here; matrices, transformed points and the new
 * boxes are float64 until they are stored back into the float32 rows.
 */
#include "augment.h"
#include "errors.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIDE 16383

/* ---- the CPU kern context ------------------------------------------------------------- */

static struct kern_ctx *g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void cpu_ctx_init(void)
{
    /* caller-only threads, no workspace: the augmentation ops need neither */
    if (kern_ctx_create(NULL, &g_cpu) < 0) g_cpu = NULL;
}

struct kern_ctx *trn_aug_cpu_ctx(void)
{
    pthread_once(&g_cpu_once, cpu_ctx_init);
    return g_cpu;
}

/* ---- hyperparameters and draws ---------------------------------------------------------- */

void trn_aug_hyp_default(struct trn_aug_hyp *hyp)
{
    hyp->hsv_h = 0.015;
    hyp->hsv_s = 0.7;
    hyp->hsv_v = 0.4;
    hyp->degrees = 0.0;
    hyp->translate = 0.1;
    hyp->scale = 0.5;
    hyp->shear = 0.0;
    hyp->perspective = 0.0;
    hyp->flipud = 0.0;
    hyp->fliplr = 0.5;
    hyp->mosaic = 1.0;
    hyp->mixup = 0.0;
    hyp->copy_paste = 0.0;
}

int trn_aug_hyp_validate(const struct trn_aug_hyp *hyp)
{
    if (!hyp) return -EINVAL;
    const double all[] = { hyp->hsv_h,  hyp->hsv_s, hyp->hsv_v,       hyp->degrees, hyp->translate,
                           hyp->scale,  hyp->shear, hyp->perspective, hyp->flipud,  hyp->fliplr,
                           hyp->mosaic, hyp->mixup, hyp->copy_paste };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!isfinite(all[i]) || all[i] < 0) return -EINVAL;
    const double probs[] = { hyp->flipud, hyp->fliplr, hyp->mosaic, hyp->mixup, hyp->copy_paste };
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++)
        if (probs[i] > 1) return -EINVAL;
    return 0;
}

/* Python's random.uniform(a, b): a + (b - a) * random(). */
static double uniform_ab(trn_aug_uniform_fn u, void *ctx, double a, double b)
{
    return a + (b - a) * u(ctx);
}

void trn_aug_draw_perspective(const struct trn_aug_hyp *hyp, trn_aug_uniform_fn uniform, void *ctx,
                              struct trn_aug_persp_draws *out)
{
    out->persp_x = uniform_ab(uniform, ctx, -hyp->perspective, hyp->perspective);
    out->persp_y = uniform_ab(uniform, ctx, -hyp->perspective, hyp->perspective);
    out->angle = uniform_ab(uniform, ctx, -hyp->degrees, hyp->degrees);
    out->scale = uniform_ab(uniform, ctx, 1 - hyp->scale, 1 + hyp->scale);
    out->shear_x = uniform_ab(uniform, ctx, -hyp->shear, hyp->shear);
    out->shear_y = uniform_ab(uniform, ctx, -hyp->shear, hyp->shear);
    out->translate_x = uniform_ab(uniform, ctx, 0.5 - hyp->translate, 0.5 + hyp->translate);
    out->translate_y = uniform_ab(uniform, ctx, 0.5 - hyp->translate, 0.5 + hyp->translate);
    out->perspective = hyp->perspective != 0;
}

void trn_aug_draw_mosaic(const struct trn_aug_hyp *hyp, int img_size, trn_aug_uniform_fn uniform,
                         void *ctx, struct trn_aug_mosaic_draws *out)
{
    /* mosaic_border = -s // 2; the centre is int(uniform(-border, 2s + border)), y first. */
    const int b = img_size / 2;
    out->yc = (int)uniform_ab(uniform, ctx, b, 2.0 * img_size - b);
    out->xc = (int)uniform_ab(uniform, ctx, b, 2.0 * img_size - b);
    trn_aug_draw_perspective(hyp, uniform, ctx, &out->persp);
}

void trn_aug_draw_hsv(const struct trn_aug_hyp *hyp, trn_aug_uniform_fn uniform, void *ctx,
                      struct trn_aug_hsv_draws *out)
{
    const double g[3] = { hyp->hsv_h, hyp->hsv_s, hyp->hsv_v };
    out->apply = g[0] != 0 || g[1] != 0 || g[2] != 0;
    for (int k = 0; k < 3; k++)
        out->gain[k] = out->apply ? uniform_ab(uniform, ctx, -1, 1) * g[k] + 1 : 1.0;
}

/* A standard normal by Box-Muller from two uniforms (the second variate is dropped so that
 * every call is self-contained). */
static double draw_normal(trn_aug_uniform_fn u, void *ctx)
{
    const double u1 = 1.0 - u(ctx); /* (0, 1] */
    const double u2 = u(ctx);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Gamma(a, 1), Marsaglia and Tsang (2000); a < 1 via Gamma(a + 1) * U^(1/a). */
static double draw_gamma(double a, trn_aug_uniform_fn u, void *ctx)
{
    if (a < 1) {
        const double uu = 1.0 - u(ctx);
        return draw_gamma(a + 1, u, ctx) * pow(uu, 1.0 / a);
    }
    const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = draw_normal(u, ctx);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        const double uu = 1.0 - u(ctx);
        if (uu < 1.0 - 0.0331 * (x * x) * (x * x)) return d * v;
        if (log(uu) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}

double trn_aug_draw_beta(double a, double b, trn_aug_uniform_fn uniform, void *ctx)
{
    if (!(a > 0) || !(b > 0) || !isfinite(a) || !isfinite(b)) return NAN;
    const double x = draw_gamma(a, uniform, ctx);
    const double y = draw_gamma(b, uniform, ctx);
    return x + y > 0 ? x / (x + y) : 0.5;
}

void trn_aug_draws_fill(const struct trn_aug_hyp *hyp, int img_size, trn_aug_uniform_fn uniform,
                        void *ctx, struct trn_aug_draws *out)
{
    memset(out, 0, sizeof *out);
    out->mosaic = uniform(ctx) < hyp->mosaic;
    if (out->mosaic) {
        trn_aug_draw_mosaic(hyp, img_size, uniform, ctx, &out->mos);
        out->mixup = uniform(ctx) < hyp->mixup;
        if (out->mixup) {
            trn_aug_draw_mosaic(hyp, img_size, uniform, ctx, &out->mixmos);
            out->mixup_ratio = trn_aug_draw_beta(32.0, 32.0, uniform, ctx);
        }
    } else {
        trn_aug_draw_perspective(hyp, uniform, ctx, &out->mos.persp);
    }
    trn_aug_draw_hsv(hyp, uniform, ctx, &out->hsv);
    out->flipud = uniform(ctx) < hyp->flipud;
    out->fliplr = uniform(ctx) < hyp->fliplr;
}

/* ---- tiles and mosaic ------------------------------------------------------------------- */

static bool tile_ok(const struct trn_aug_tile *t)
{
    return t && t->pixels && t->w >= 1 && t->h >= 1 && t->w <= 32767 && t->h <= 32767 &&
           t->n_labels >= 0 && (t->n_labels == 0 || t->labels);
}

/* Total points of a tile (0 without segments); -1 when points are missing. */
static long long tile_points(const struct trn_aug_tile *t)
{
    if (!t->seg_n) return 0;
    long long n = 0;
    for (int i = 0; i < t->n_labels; i++)
        n += t->seg_n[i];
    if (n > 0 && !t->seg_xy) return -1;
    return n;
}

/*
 * load_mosaic's placement: tile 0's bottom-right corner at (xc, yc), tile 1's bottom-left,
 * tile 2's top-right, tile 3's top-left, each cropped to the 2s x 2s canvas. pix: the pixel
 * pointers to put in the regions (NULL: the tiles' own).
 */
static void mosaic_canvas(int s, int xc, int yc, const struct trn_aug_tile tiles[4],
                          const uint8_t *const *pix, struct kern_aug_canvas *c)
{
    const int s2 = 2 * s;
    memset(c, 0, sizeof *c);
    c->w = c->h = s2;
    c->n_paste = 4;
    for (int i = 0; i < 4; i++) {
        const int w = tiles[i].w, h = tiles[i].h;
        int xa0, ya0, xa1, ya1, xb0, yb0;
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
        if (i == 0) { /* bottom-right corner at the centre */
            xa0 = MAX(xc - w, 0), ya0 = MAX(yc - h, 0), xa1 = xc, ya1 = yc;
            xb0 = w - (xa1 - xa0), yb0 = h - (ya1 - ya0);
        } else if (i == 1) { /* bottom-left corner at the centre */
            xa0 = xc, ya0 = MAX(yc - h, 0), xa1 = MIN(xc + w, s2), ya1 = yc;
            xb0 = 0, yb0 = h - (ya1 - ya0);
        } else if (i == 2) { /* top-right */
            xa0 = MAX(xc - w, 0), ya0 = yc, xa1 = xc, ya1 = MIN(s2, yc + h);
            xb0 = w - (xa1 - xa0), yb0 = 0;
        } else { /* top-left */
            xa0 = xc, ya0 = yc, xa1 = MIN(xc + w, s2), ya1 = MIN(s2, yc + h);
            xb0 = 0, yb0 = 0;
        }
#undef MAX
#undef MIN
        c->paste[i] = (struct kern_aug_paste){
            .src = pix ? pix[i] : tiles[i].pixels,
            .src_w = w,
            .src_h = h,
            .src_x = xb0,
            .src_y = yb0,
            .dst_x = xa0,
            .dst_y = ya0,
            .w = xa1 - xa0,
            .h = ya1 - ya0,
        };
    }
}

/* The rows and points of 4 checked tiles (capacities checked by the caller); -EINVAL when a
 * tile's points are missing. */
static int mosaic_count(const struct trn_aug_tile tiles[4], long long *rows, long long *points,
                        bool *segs)
{
    *rows = 0, *points = 0, *segs = false;
    for (int i = 0; i < 4; i++) {
        if (!tile_ok(&tiles[i])) return -EINVAL;
        const long long p = tile_points(&tiles[i]);
        if (p < 0) return -EINVAL;
        *rows += tiles[i].n_labels;
        *points += p;
        *segs = *segs || tiles[i].seg_n != NULL;
    }
    return 0;
}

/*
 * The mosaic's labels: xywhn2xyxy with each tile's size and offset (padw = canvas x - tile x of
 * its region), then clipped to [0, 2s], all float32. Capacities were checked.
 */
static int mosaic_labels(int s, const struct trn_aug_tile tiles[4], const struct kern_aug_canvas *c,
                         bool segs, struct trn_aug_boxes *out)
{
    const float hi = (float)(2 * s);
    int n = 0;
    size_t np = 0;
    for (int i = 0; i < 4; i++) {
        const struct trn_aug_tile *t = &tiles[i];
        const float w = (float)t->w, h = (float)t->h;
        const struct kern_aug_paste *p = &c->paste[i];
        const float padw = (float)(p->dst_x - p->src_x), padh = (float)(p->dst_y - p->src_y);
        size_t tp = 0;
        for (int j = 0; j < t->n_labels; j++, n++) {
            const float *l = t->labels + 5 * (size_t)j;
            float *r = out->rows + 5 * (size_t)n;
            r[0] = l[0];
            r[1] = w * (l[1] - l[3] / 2) + padw;
            r[2] = h * (l[2] - l[4] / 2) + padh;
            r[3] = w * (l[1] + l[3] / 2) + padw;
            r[4] = h * (l[2] + l[4] / 2) + padh;
            for (int k = 1; k < 5; k++)
                r[k] = fminf(fmaxf(r[k], 0.f), hi);
            const uint32_t k = t->seg_n ? t->seg_n[j] : 0;
            if (out->seg_n) out->seg_n[n] = k;
            for (uint32_t q = 0; q < k; q++, tp++, np++) {
                const float *pt = t->seg_xy + 2 * tp;
                float *o = out->seg_xy + 2 * np;
                o[0] = fminf(fmaxf(w * pt[0] + padw, 0.f), hi);
                o[1] = fminf(fmaxf(h * pt[1] + padh, 0.f), hi);
            }
        }
    }
    if (!segs) out->seg_n = NULL;
    out->n = n;
    out->n_points = np;
    return n;
}

int trn_aug_mosaic4(int s, int xc, int yc, const struct trn_aug_tile tiles[4], uint8_t *canvas,
                    struct trn_aug_boxes *out)
{
    if (s < 1 || s > MAX_SIDE || !tiles || !canvas || !out || xc < 0 || yc < 0 || xc > 2 * s ||
        yc > 2 * s || (out->cap_rows > 0 && !out->rows))
        return -EINVAL;
    long long rows, points;
    bool segs;
    if (mosaic_count(tiles, &rows, &points, &segs) < 0) return -EINVAL;
    if (segs && !out->seg_n) return -EINVAL;
    if (points > 0 && !out->seg_xy) return -EINVAL;
    struct kern_ctx *const k = trn_aug_cpu_ctx();
    if (!k) return -ENOMEM;
    struct kern_aug_canvas c;
    mosaic_canvas(s, xc, yc, tiles, NULL, &c);
    const int rc = kern_ref_aug_paste(k, canvas, &c);
    if (rc < 0) return rc;
    if (rows > out->cap_rows || (size_t)points > out->cap_points) return -ENOSPC;
    return mosaic_labels(s, tiles, &c, segs, out);
}

/* ---- random_perspective ----------------------------------------------------------------- */

static void mat3_mul(const double a[9], const double b[9], double c[9])
{
    double t[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            t[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
    memcpy(c, t, sizeof t);
}

void trn_aug_perspective_matrix(int src_w, int src_h, int dst_w, int dst_h,
                                const struct trn_aug_persp_draws *d, double M[9])
{
    double C[9] = { 1, 0, -src_w / 2.0, 0, 1, -src_h / 2.0, 0, 0, 1 };
    double P[9] = { 1, 0, 0, 0, 1, 0, d->persp_x, d->persp_y, 1 };
    /* cv2.getRotationMatrix2D(center=(0, 0), angle, scale): angle *= CV_PI/180. */
    const double ang = d->angle * (M_PI / 180);
    const double alpha = cos(ang) * d->scale, beta = sin(ang) * d->scale;
    double R[9] = { alpha, beta, 0, -beta, alpha, 0, 0, 0, 1 };
    double S[9] = {
        1, tan(d->shear_x * M_PI / 180), 0, tan(d->shear_y * M_PI / 180), 1, 0, 0, 0, 1
    };
    double T[9] = { 1, 0, d->translate_x * dst_w, 0, 1, d->translate_y * dst_h, 0, 0, 1 };
    /* M = T @ S @ R @ P @ C, evaluated left to right as numpy does. */
    mat3_mul(T, S, M);
    mat3_mul(M, R, M);
    mat3_mul(M, P, M);
    mat3_mul(M, C, M);
}

bool trn_aug_box_candidate(const float before[4], double scale, const double after[4],
                           double area_thr)
{
    /* box1 = targets[:, 1:5].T * s is float32 (the Python float becomes float32) */
    const float sf = (float)scale;
    const float w1 = before[2] * sf - before[0] * sf, h1 = before[3] * sf - before[1] * sf;
    const double w2 = after[2] - after[0], h2 = after[3] - after[1];
    const double eps = 1e-16;
    const double ar = fmax(w2 / (h2 + eps), h2 / (w2 + eps));
    const float a1 = w1 * h1 + (float)eps;
    return w2 > 2 && h2 > 2 && w2 * h2 / (double)a1 > area_thr && ar < 100;
}

static inline void xform(const double M[9], bool persp, double x, double y, double *ox, double *oy)
{
    const double tx = x * M[0] + y * M[1] + M[2];
    const double ty = x * M[3] + y * M[4] + M[5];
    if (persp) {
        const double tw = x * M[6] + y * M[7] + M[8];
        *ox = tx / tw, *oy = ty / tw;
    } else {
        *ox = tx, *oy = ty;
    }
}

/*
 * The box of a polygon after the warp: resample_segments (close the polygon, np.interp at
 * np.linspace(0, k, 1000)), transform, and segment2box: the extent of the points inside
 * [0, w] x [0, h], or zeros when no inside point has x != 0 (its `any(x)`).
 */
static void segment_box(const float *pts, uint32_t k, const double M[9], bool persp, int w, int h,
                        double box[4])
{
    const double step = (double)k / (TRN_AUG_SEG_POINTS - 1);
    double x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
    bool any = false;
    for (int i = 0; i < TRN_AUG_SEG_POINTS; i++) {
        const double t = i == TRN_AUG_SEG_POINTS - 1 ? (double)k : i * step;
        /* fp has k + 1 entries: the k points and the first again */
        uint32_t j = (uint32_t)t;
        double px, py;
        if (j >= k) {
            px = pts[0], py = pts[1];
        } else if ((double)j == t) {
            px = pts[2 * j], py = pts[2 * j + 1];
        } else {
            const uint32_t jn = j + 1 < k ? j + 1 : 0;
            const double ax = pts[2 * j], ay = pts[2 * j + 1];
            const double bx = pts[2 * jn], by = pts[2 * jn + 1];
            px = (bx - ax) * (t - j) + ax;
            py = (by - ay) * (t - j) + ay;
        }
        double ox, oy;
        xform(M, persp, px, py, &ox, &oy);
        if (ox >= 0 && oy >= 0 && ox <= w && oy <= h) {
            any = any || ox != 0;
            x0 = fmin(x0, ox), y0 = fmin(y0, oy);
            x1 = fmax(x1, ox), y1 = fmax(y1, oy);
        }
    }
    if (!any) {
        box[0] = box[1] = box[2] = box[3] = 0;
        return;
    }
    box[0] = x0, box[1] = y0, box[2] = x1, box[3] = y1;
}

static void corner_box(const float *r, const double M[9], bool persp, int w, int h, double box[4])
{
    const double cx[4] = { r[1], r[3], r[1], r[3] }, cy[4] = { r[2], r[4], r[4], r[2] };
    double x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
    for (int c = 0; c < 4; c++) {
        double ox, oy;
        xform(M, persp, cx[c], cy[c], &ox, &oy);
        x0 = fmin(x0, ox), y0 = fmin(y0, oy);
        x1 = fmax(x1, ox), y1 = fmax(y1, oy);
    }
    box[0] = fmin(fmax(x0, 0), w);
    box[1] = fmin(fmax(y0, 0), h);
    box[2] = fmin(fmax(x1, 0), w);
    box[3] = fmin(fmax(y1, 0), h);
}

/* random_perspective's labels, given its matrix M (forward) and output size. */
static int perspective_labels(const double M[9], const struct trn_aug_persp_draws *d, int dst_w,
                              int dst_h, struct trn_aug_boxes *boxes)
{
    const int n = boxes->n;
    bool use_seg = false;
    if (boxes->seg_n && boxes->seg_xy)
        for (size_t i = 0; i < 2 * boxes->n_points && !use_seg; i++)
            use_seg = boxes->seg_xy[i] != 0;
    const double area_thr = use_seg ? 0.01 : 0.10;
    int kept = 0;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const float *r = boxes->rows + 5 * (size_t)i;
        const uint32_t k = boxes->seg_n ? boxes->seg_n[i] : 0;
        double box[4];
        if (use_seg && k > 0)
            segment_box(boxes->seg_xy + 2 * off, k, M, d->perspective, dst_w, dst_h, box);
        else
            corner_box(r, M, d->perspective, dst_w, dst_h, box);
        off += k;
        if (!trn_aug_box_candidate(r + 1, d->scale, box, area_thr)) continue;
        float *o = boxes->rows + 5 * (size_t)kept++;
        o[0] = r[0];
        for (int c = 0; c < 4; c++)
            o[1 + c] = (float)box[c];
    }
    boxes->n = kept;
    boxes->seg_n = NULL;
    boxes->n_points = 0;
    return kept;
}

int trn_aug_random_perspective(const uint8_t *src, int src_w, int src_h, uint8_t *dst, int dst_w,
                               int dst_h, const struct trn_aug_persp_draws *d,
                               struct trn_aug_boxes *boxes)
{
    if (!src || !dst || !d || !boxes || src_w < 1 || src_h < 1 || dst_w < 1 || dst_h < 1 ||
        src_w > 32767 || src_h > 32767 || dst_w > 32767 || dst_h > 32767 || boxes->n < 0 ||
        (boxes->n > 0 && !boxes->rows))
        return -EINVAL;
    double M[9];
    trn_aug_perspective_matrix(src_w, src_h, dst_w, dst_h, d, M);
    static const double eye[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    bool changed = src_w != dst_w || src_h != dst_h;
    for (int i = 0; i < 9; i++)
        changed = changed || M[i] != eye[i];
    int rc;
    if (!changed)
        memcpy(dst, src, (size_t)src_w * (size_t)src_h * 3), rc = 0;
    else if (d->perspective)
        rc = trn_aug_warp_perspective(src, src_w, src_h, M, dst, dst_w, dst_h, TRN_AUG_FILL);
    else
        rc = trn_aug_warp_affine(src, src_w, src_h, M, dst, dst_w, dst_h, TRN_AUG_FILL);
    if (rc < 0) return rc;
    return perspective_labels(M, d, dst_w, dst_h, boxes);
}

/* ---- output labels and rect shapes ------------------------------------------------------ */

void trn_aug_xyxy_to_xywhn(float *rows, int n, int w, int h, double eps)
{
    const float xmax = (float)(w - eps), ymax = (float)(h - eps);
    const float fw = (float)w, fh = (float)h;
    for (int i = 0; i < n; i++) {
        float *r = rows + 5 * (size_t)i;
        const float x1 = fminf(fmaxf(r[1], 0.f), xmax), x2 = fminf(fmaxf(r[3], 0.f), xmax);
        const float y1 = fminf(fmaxf(r[2], 0.f), ymax), y2 = fminf(fmaxf(r[4], 0.f), ymax);
        r[1] = (x1 + x2) / 2 / fw;
        r[2] = (y1 + y2) / 2 / fh;
        r[3] = (x2 - x1) / fw;
        r[4] = (y2 - y1) / fh;
    }
}

/* numpy's order for doubles: NaN last (aspect ratios are finite, the rule is kept whole). */
static bool np_less(double a, double b)
{
    return a < b || (b != b && a == a);
}

/* numpy 1.24's aheapsort_ for doubles (the introsort's fallback): tosort[0..n) by v. */
static void np_aheapsort(const double *v, int64_t *tosort, int64_t n)
{
    int64_t *a = tosort - 1; /* 1-based heap indexing, as numpy's */
    int64_t i, j, l, tmp;
    for (l = n >> 1; l > 0; --l) {
        tmp = a[l];
        for (i = l, j = l << 1; j <= n;) {
            if (j < n && np_less(v[a[j]], v[a[j + 1]])) j += 1;
            if (!np_less(v[tmp], v[a[j]])) break;
            a[i] = a[j];
            i = j;
            j += j;
        }
        a[i] = tmp;
    }
    for (; n > 1;) {
        tmp = a[n];
        a[n] = a[1];
        n -= 1;
        for (i = 1, j = 2; j <= n;) {
            if (j < n && np_less(v[a[j]], v[a[j + 1]])) j++;
            if (!np_less(v[tmp], v[a[j]])) break;
            a[i] = a[j];
            i = j;
            j += j;
        }
        a[i] = tmp;
    }
}

#define NP_SMALL_QUICKSORT 15
#define NP_QS_STACK        128 /* 2 * bits of npy_intp: numpy's PYA_QS_STACK */

/*
 * np.argsort(v) as numpy 1.24 computes it for float64 (kind 'quicksort', its default: the
 * introsort of npysort/quicksort.cpp, aquicksort_): median-of-3 quicksort of partitions of more
 * than 16 elements (SMALL_QUICKSORT 15), insertion sort of the rest, heapsort (aheapsort_, also
 * numpy's kind='heapsort') past a depth of 2 * floor(log2 n). The order of equal values is
 * that algorithm's, not index order, and ultralytics' val.py takes it from here (irect =
 * ar.argsort()), so which image lands in which rect batch depends on it. numpy 1.25+ on AVX-512
 * CPUs and 2.x use another sort (x86-simd-sort) whose tie order differs: this reproduces 1.24,
 * Debian bookworm's, which tests/trainer/make_argsort_refs.py's references come from.
 */
static void np_argsort(const double *v, int64_t *tosort, int64_t num)
{
    for (int64_t i = 0; i < num; i++)
        tosort[i] = i;
    if (num < 2) return;
    int64_t *pl = tosort, *pr = tosort + num - 1;
    int64_t *stack[NP_QS_STACK], **sptr = stack;
    int depth[NP_QS_STACK], *psdepth = depth;
    int cdepth = 0;
    for (uint64_t u = (uint64_t)num; u >>= 1;)
        cdepth++;
    cdepth *= 2;
    int64_t *pm, *pi, *pj, *pk, vi, t;
#define NP_SWAP(a, b) (t = (a), (a) = (b), (b) = t)
    for (;;) {
        if (cdepth < 0) {
            np_aheapsort(v, pl, pr - pl + 1);
            goto stack_pop;
        }
        while ((pr - pl) > NP_SMALL_QUICKSORT) {
            pm = pl + ((pr - pl) >> 1);
            if (np_less(v[*pm], v[*pl])) NP_SWAP(*pm, *pl);
            if (np_less(v[*pr], v[*pm])) NP_SWAP(*pr, *pm);
            if (np_less(v[*pm], v[*pl])) NP_SWAP(*pm, *pl);
            const double vp = v[*pm];
            pi = pl;
            pj = pr - 1;
            NP_SWAP(*pm, *pj);
            for (;;) {
                do
                    ++pi;
                while (np_less(v[*pi], vp));
                do
                    --pj;
                while (np_less(vp, v[*pj]));
                if (pi >= pj) break;
                NP_SWAP(*pi, *pj);
            }
            pk = pr - 1;
            NP_SWAP(*pi, *pk);
            /* the larger partition goes on the stack */
            if (pi - pl < pr - pi) {
                *sptr++ = pi + 1;
                *sptr++ = pr;
                pr = pi - 1;
            } else {
                *sptr++ = pl;
                *sptr++ = pi - 1;
                pl = pi + 1;
            }
            *psdepth++ = --cdepth;
        }
        for (pi = pl + 1; pi <= pr; ++pi) { /* insertion sort */
            vi = *pi;
            const double vp = v[vi];
            pj = pi;
            pk = pi - 1;
            while (pj > pl && np_less(vp, v[*pk]))
                *pj-- = *pk--;
            *pj = vi;
        }
    stack_pop:
        if (sptr == stack) break;
        pr = *(--sptr);
        pl = *(--sptr);
        cdepth = *(--psdepth);
    }
#undef NP_SWAP
}

int trn_aug_argsort_np(const double *v, int64_t n, int64_t *order, bool heapsort)
{
    if (!v || !order || n < 0) return -EINVAL;
    if (!heapsort) {
        np_argsort(v, order, n);
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (n > 1) np_aheapsort(v, order, n);
    return 0;
}

int trn_aug_rect_shapes(const int32_t *hw, int64_t n, int batch, int img_size, int stride,
                        double pad, int64_t *order, int32_t *shapes)
{
    if (!hw || n < 1 || batch < 1 || img_size < 1 || stride < 1 || !isfinite(pad) || !order ||
        !shapes)
        return -EINVAL;
    if ((n + batch - 1) / batch > 0x7fffffff) return -EINVAL;
    double *ar = malloc((size_t)n * sizeof *ar);
    if (!ar) return -ENOMEM;
    for (int64_t i = 0; i < n; i++) {
        if (hw[2 * i] < 1 || hw[2 * i + 1] < 1) {
            free(ar);
            return -EINVAL;
        }
        ar[i] = (double)hw[2 * i] / hw[2 * i + 1]; /* s[:, 1] / s[:, 0], float64 */
    }
    np_argsort(ar, order, n); /* irect = ar.argsort(): val.py's batches, ties included */
    free(ar);
    const int nb = (int)((n + batch - 1) / batch);
    for (int b = 0; b < nb; b++) {
        double mini = INFINITY, maxi = -INFINITY;
        for (int64_t i = (int64_t)b * batch; i < n && i < (int64_t)(b + 1) * batch; i++) {
            const int64_t k = order[i];
            const double a = (double)hw[2 * k] / hw[2 * k + 1];
            mini = fmin(mini, a), maxi = fmax(maxi, a);
        }
        double rel_h = 1, rel_w = 1;
        if (maxi < 1)
            rel_h = maxi;
        else if (mini > 1)
            rel_w = 1 / mini;
        const double sh = ceil(rel_h * img_size / stride + pad) * stride;
        const double sw = ceil(rel_w * img_size / stride + pad) * stride;
        if (!(sh >= 1 && sh <= 32767 && sw >= 1 && sw <= 32767)) return -EINVAL;
        shapes[2 * b] = (int32_t)sh;
        shapes[2 * b + 1] = (int32_t)sw;
    }
    return nb;
}

/* ---- workspace and whole samples -------------------------------------------------------- */

struct trn_aug_ws {
    int s;               /* img_size */
    uint8_t *cp_mask[2]; /* copy_paste: each mosaic's 2s x 2s mask (allocated on first use) */
    bool cp_on[2];       /* the last plan pasted on canvas k */
    int *cp_sel;         /* [cap_rows] copy_paste's draw */
    uint8_t *canvas;     /* 2s * 2s * 3: mosaic canvas, or the letterboxed image */
    uint8_t *mix;        /* s * s * 3: the mixup mosaic after its warp */
    uint8_t *canvas2;    /* 2s * 2s * 3: the mixup canvas with copy_paste (on first use) */
    uint32_t *seg_n;     /* [cap_rows] */
    int cap_rows;        /* rows seg_n holds */
    float *seg_xy;       /* [cap_points][2] */
    size_t cap_points;   /* points seg_xy holds */
};

size_t trn_aug_ws_bytes(int img_size, int max_labels, size_t max_points)
{
    if (img_size < 1 || img_size > MAX_SIDE || max_labels < 0 || max_points > SIZE_MAX / 16)
        return 0;
    const size_t s = (size_t)img_size;
    return sizeof(struct trn_aug_ws) + 4 * s * s * 3 + s * s * 3 +
           (size_t)max_labels * sizeof(uint32_t) + max_points * 2 * sizeof(float);
}

static int ws_reserve(struct trn_aug_ws *ws, long long rows, long long points)
{
    if (rows > 0x7fffffff || points > (long long)(SIZE_MAX / 16)) return -ENOMEM;
    if (rows > ws->cap_rows) {
        const int cap = rows > 2LL * ws->cap_rows ? (int)rows : 2 * ws->cap_rows;
        uint32_t *p = realloc(ws->seg_n, sizeof *p * (size_t)(cap > 0 ? cap : 1));
        if (!p) return -ENOMEM;
        ws->seg_n = p;
        int *q = realloc(ws->cp_sel, sizeof *q * (size_t)(cap > 0 ? cap : 1));
        if (!q) return -ENOMEM;
        ws->cp_sel = q;
        ws->cap_rows = cap;
    }
    if ((size_t)points > ws->cap_points) {
        const size_t cap =
            (size_t)points > 2 * ws->cap_points ? (size_t)points : 2 * ws->cap_points;
        float *p = realloc(ws->seg_xy, sizeof *p * 2 * (cap > 0 ? cap : 1));
        if (!p) return -ENOMEM;
        ws->seg_xy = p;
        ws->cap_points = cap;
    }
    return 0;
}

int trn_aug_ws_create(int img_size, int max_labels, size_t max_points, struct trn_aug_ws **out)
{
    if (!out) return -EINVAL;
    *out = NULL;
    if (img_size < 2 || img_size > MAX_SIDE || img_size % 2 || max_labels < 0) return -EINVAL;
    struct trn_aug_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return -ENOMEM;
    const size_t s = (size_t)img_size;
    ws->s = img_size;
    ws->canvas = malloc(4 * s * s * 3);
    ws->mix = malloc(s * s * 3);
    if (!ws->canvas || !ws->mix || ws_reserve(ws, max_labels, (long long)max_points) < 0) {
        trn_aug_ws_destroy(ws);
        return -ENOMEM;
    }
    *out = ws;
    return 0;
}

void trn_aug_ws_destroy(struct trn_aug_ws *ws)
{
    if (!ws) return;
    free(ws->canvas);
    free(ws->mix);
    free(ws->canvas2);
    free(ws->seg_n);
    free(ws->seg_xy);
    free(ws->cp_sel);
    free(ws->cp_mask[0]);
    free(ws->cp_mask[1]);
    free(ws);
}

/* copy_paste on mosaic k's canvas labels b (before the warp): the draw from key, the accepted
 * rows appended to b, their mask in ws->cp_mask[k] and ws->cp_on[k] set when any. */
static int mosaic_copy_paste(struct trn_aug_ws *ws, double p, uint64_t key, int k,
                             struct trn_aug_boxes *b)
{
    if (!(p > 0) || !b->seg_n) return 0;
    const int W = 2 * ws->s;
    int n = 0;
    for (int r = 0; r < b->n; r++)
        if (b->seg_n[r] > 0) ws->cp_sel[n++] = r; /* the rows with polygons, in order */
    if (n == 0) return 0;
    int *pick = ws->cp_sel + n; /* cap_rows >= 2 * rows: room for the permutation */
    const int kk = trn_aug_copy_paste_select(key, n, p, pick);
    if (kk < 0) return kk;
    for (int i = 0; i < kk; i++)
        pick[i] = ws->cp_sel[pick[i]];
    if (!ws->cp_mask[k] && !(ws->cp_mask[k] = malloc((size_t)W * (size_t)W))) return -ENOMEM;
    const int added = trn_aug_copy_paste_labels(b, W, W, pick, kk, ws->cp_mask[k]);
    if (added < 0) return added;
    ws->cp_on[k] = added > 0;
    return 0;
}

/*
 * The plan of one mosaic (tiles[0..4) + random_perspective into s x s): canvas and inverse
 * warp into the plan's slot k, labels at `rows`.
 */
static int mosaic_plan(struct trn_aug_ws *ws, const struct trn_aug_mosaic_draws *m,
                       const struct trn_aug_tile *tiles, const uint8_t *const *pix,
                       struct kern_aug_sample *p, int k, double cp, uint64_t cp_key, float *rows,
                       int cap_rows)
{
    const int s = ws->s;
    if (m->xc < 0 || m->yc < 0 || m->xc > 2 * s || m->yc > 2 * s) return -EINVAL;
    struct trn_aug_boxes b = {
        .rows = rows,
        .seg_n = ws->seg_n,
        .seg_xy = ws->seg_xy,
        .cap_rows = cap_rows,
        .cap_points = ws->cap_points,
    };
    long long nrows, points;
    bool segs;
    if (mosaic_count(tiles, &nrows, &points, &segs) < 0) return -EINVAL;
    if (nrows > b.cap_rows || (size_t)points > b.cap_points) return -ENOSPC;
    mosaic_canvas(s, m->xc, m->yc, tiles, pix, &p->canvas[k]);
    mosaic_labels(s, tiles, &p->canvas[k], segs, &b);
    const int rc = mosaic_copy_paste(ws, cp, cp_key, k, &b);
    if (rc < 0) return rc;
    /* border -s/2 on each side: the 2s canvas becomes s */
    double M[9];
    trn_aug_perspective_matrix(2 * s, 2 * s, s, s, &m->persp, M);
    kern_aug_warp_invert(M, m->persp.perspective, p->inv[k]);
    p->perspective[k] = m->persp.perspective;
    return perspective_labels(M, &m->persp, s, s, &b);
}

/* letterbox's geometry and the labels it gives (class, x1, y1, x2, y2 in pixels of oh x ow). */
static int letterbox_plan(const struct trn_aug_tile *t, int oh, int ow,
                          struct trn_aug_letterbox_plan *p, float *rows)
{
    struct trn_aug_letterbox_opts o;
    trn_aug_letterbox_opts_default(&o);
    const int rc = trn_aug_letterbox_plan(t->w, t->h, oh, ow, &o, p);
    if (rc < 0) return rc;
    if (p->out_w != ow || p->out_h != oh) return -EINVAL;
    const float fw = (float)(p->ratio_w * t->w), fh = (float)(p->ratio_h * t->h);
    const float pw = (float)p->pad_w, ph = (float)p->pad_h;
    for (int j = 0; j < t->n_labels; j++) {
        const float *l = t->labels + 5 * (size_t)j;
        float *r = rows + 5 * (size_t)j;
        r[0] = l[0];
        r[1] = fw * (l[1] - l[3] / 2) + pw;
        r[2] = fh * (l[2] - l[4] / 2) + ph;
        r[3] = fw * (l[1] + l[3] / 2) + pw;
        r[4] = fh * (l[2] + l[4] / 2) + ph;
    }
    return 0;
}

/*
 * trn_aug_train_sample's planning: labels into rows, pixels into *p. gpu: every pixel must be
 * described by p (a resizing letterbox is -ENOTSUP); otherwise a letterbox sample's canvas is
 * left empty and trn_aug_train_sample letterboxes on the host.
 */
static int plan_sample(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                       const struct trn_aug_draws *d, const struct trn_aug_tile *tiles, int n_tiles,
                       const uint8_t *const *pix, bool gpu, int oh, int ow,
                       struct kern_aug_sample *p, float *rows, int cap_rows)
{
    if (!ws || !hyp || !d || !tiles || !p || (cap_rows > 0 && !rows) || cap_rows < 0)
        return -EINVAL;
    /* a mosaic is s x s; a letterboxed sample any shape up to it (rect training) */
    if (oh < 1 || ow < 1 || oh > ws->s || ow > ws->s || (d->mosaic && (oh != ws->s || ow != ws->s)))
        return -EINVAL;
    if (gpu && (oh != ws->s || ow != ws->s)) return -ENOTSUP;
    int rc = trn_aug_hyp_validate(hyp);
    if (rc < 0) return rc;
    const int want = !d->mosaic ? 1 : d->mixup ? 8 : 4;
    if (n_tiles != want || (d->mixup && !d->mosaic)) return -EINVAL;
    long long total = 0, pts[2] = { 0, 0 };
    ws->cp_on[0] = ws->cp_on[1] = false;
    for (int i = 0; i < n_tiles; i++) {
        if (!tile_ok(&tiles[i])) return -EINVAL;
        if (pix && !pix[i]) return -EINVAL;
        const long long q = tile_points(&tiles[i]);
        if (q < 0) return -EINVAL;
        total += tiles[i].n_labels;
        pts[i / 4] += q;
    }
    /* copy_paste appends at most one row (and polygon) per row */
    const int grow = hyp->copy_paste > 0 && d->mosaic ? 2 : 1;
    if (total * grow > cap_rows) return -ENOSPC;
    rc = ws_reserve(ws, total * grow, (pts[0] > pts[1] ? pts[0] : pts[1]) * grow);
    if (rc < 0) return rc;
    memset(p, 0, sizeof *p);
    int n;
    if (d->mosaic) {
        n = mosaic_plan(ws, &d->mos, tiles, pix, p, 0, hyp->copy_paste, d->copy_paste_key[0], rows,
                        cap_rows);
        if (n < 0) return n;
        if (d->mixup) {
            if (!(d->mixup_ratio >= 0 && d->mixup_ratio <= 1)) return -EINVAL;
            const int n2 =
                mosaic_plan(ws, &d->mixmos, tiles + 4, pix ? pix + 4 : NULL, p, 1, hyp->copy_paste,
                            d->copy_paste_key[1], rows + 5 * (size_t)n, cap_rows - n);
            if (n2 < 0) return n2;
            p->mixup = 1;
            p->mixup_ratio = d->mixup_ratio;
            n += n2;
        }
        /* a pasting canvas is not a paste list: the host builds it */
        if (gpu && (ws->cp_on[0] || ws->cp_on[1])) return -ENOTSUP;
    } else {
        /* letterbox(img, s, auto=False, scaleup=True), labels by ratio and pad, then
         * random_perspective with border 0 and no segments (as ultralytics calls it). */
        const struct trn_aug_tile *t = &tiles[0];
        struct trn_aug_letterbox_plan lp;
        rc = letterbox_plan(t, oh, ow, &lp, rows);
        if (rc < 0) return rc;
        p->canvas[0].w = ow;
        p->canvas[0].h = oh;
        if (lp.new_w == t->w && lp.new_h == t->h) {
            /* no resize: letterbox is a paste onto the 114 canvas */
            p->canvas[0].n_paste = 1;
            p->canvas[0].paste[0] = (struct kern_aug_paste){
                .src = pix ? pix[0] : t->pixels,
                .src_w = t->w,
                .src_h = t->h,
                .dst_x = lp.left,
                .dst_y = lp.top,
                .w = t->w,
                .h = t->h,
            };
        } else if (gpu) {
            return -ENOTSUP;
        }
        double M[9];
        trn_aug_perspective_matrix(ow, oh, ow, oh, &d->mos.persp, M);
        kern_aug_warp_invert(M, d->mos.persp.perspective, p->inv[0]);
        p->perspective[0] = d->mos.persp.perspective;
        struct trn_aug_boxes b = { .rows = rows, .n = t->n_labels, .cap_rows = cap_rows };
        n = perspective_labels(M, &d->mos.persp, ow, oh, &b);
        if (n < 0) return n;
    }
    trn_aug_xyxy_to_xywhn(rows, n, ow, oh, 1e-3);
    p->hsv = d->hsv.apply;
    if (d->hsv.apply) kern_aug_hsv_lut_init(&p->lut, d->hsv.gain);
    p->flip_ud = d->flipud;
    p->flip_lr = d->fliplr;
    if (d->flipud) trn_aug_flip_ud(NULL, ow, oh, rows, n);
    if (d->fliplr) trn_aug_flip_lr(NULL, ow, oh, rows, n);
    return n;
}

int trn_aug_plan_sample(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                        const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                        int n_tiles, const uint8_t *const *pixels, struct kern_aug_sample *plan,
                        float *rows, int cap_rows)
{
    return plan_sample(ws, hyp, d, tiles, n_tiles, pixels, true, ws ? ws->s : 0, ws ? ws->s : 0,
                       plan, rows, cap_rows);
}

/* letterbox(auto=False, scaleup=True) of tile t to oh x ow into ws->canvas (a sample whose
 * letterbox must resize: plan_sample leaves its canvas empty). */
static int letterbox_canvas(struct trn_aug_ws *ws, const struct trn_aug_tile *t, int oh, int ow)
{
    struct trn_aug_letterbox_opts o;
    trn_aug_letterbox_opts_default(&o);
    struct trn_aug_letterbox_plan lp;
    const int rc = trn_aug_letterbox_plan(t->w, t->h, oh, ow, &o, &lp);
    return rc < 0 ? rc
                  : trn_aug_letterbox(t->pixels, t->w, t->h, &lp, ws->canvas,
                                      4 * (size_t)ws->s * ws->s * 3);
}

/* Paste canvas k of p onto ws->canvas and warp it into dst (s x s), on the CPU. */
static int cpu_warp(struct kern_ctx *k, struct trn_aug_ws *ws, const struct kern_aug_sample *p,
                    int i, uint8_t *dst, int oh, int ow)
{
    const struct kern_aug_canvas *c = &p->canvas[i];
    int rc = kern_ref_aug_paste(k, ws->canvas, c);
    if (rc < 0) return rc;
    if (ws->cp_on[i]) trn_aug_copy_paste_pixels(ws->canvas, c->w, c->h, ws->cp_mask[i]);
    return kern_ref_aug_warp(k, dst, ow, oh, ws->canvas, c->w, c->h, p->inv[i], p->perspective[i],
                             TRN_AUG_FILL);
}

int trn_aug_train_sample_shape(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                               const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                               int n_tiles, int oh, int ow, uint8_t *dst, float *rows, int cap_rows)
{
    if (!dst) return -EINVAL;
    struct kern_aug_sample p;
    const int n = plan_sample(ws, hyp, d, tiles, n_tiles, NULL, false, oh, ow, &p, rows, cap_rows);
    if (n < 0) return n;
    struct kern_ctx *const k = trn_aug_cpu_ctx();
    if (!k) return -ENOMEM;
    int rc;
    if (!d->mosaic && p.canvas[0].n_paste == 0) {
        /* a resizing letterbox: done here, then warped from ws->canvas */
        rc = letterbox_canvas(ws, &tiles[0], oh, ow);
        if (rc == 0)
            rc = kern_ref_aug_warp(k, dst, ow, oh, ws->canvas, ow, oh, p.inv[0], p.perspective[0],
                                   TRN_AUG_FILL);
    } else {
        rc = cpu_warp(k, ws, &p, 0, dst, oh, ow);
    }
    if (rc == 0 && p.mixup) {
        rc = cpu_warp(k, ws, &p, 1, ws->mix, oh, ow);
        if (rc == 0) rc = kern_ref_aug_mixup(k, dst, ws->mix, (size_t)oh * ow * 3, p.mixup_ratio);
    }
    if (rc == 0 && p.hsv) rc = kern_ref_aug_hsv(k, dst, ow, oh, &p.lut);
    if (rc == 0 && (p.flip_lr || p.flip_ud))
        rc = kern_ref_aug_flip(k, dst, ow, oh, p.flip_lr, p.flip_ud);
    return rc < 0 ? rc : n;
}

/* Canvas k of p as one region of buf (w x h, already holding its pixels). */
static void canvas_of_buffer(struct kern_aug_canvas *c, const uint8_t *buf)
{
    c->n_paste = 1;
    c->paste[0] =
        (struct kern_aug_paste){ .src = buf, .src_w = c->w, .src_h = c->h, .w = c->w, .h = c->h };
}

int trn_aug_train_sample_planar(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                                const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                                int n_tiles, int oh, int ow, int dtype, void *dst, float *rows,
                                int cap_rows)
{
    if (!dst) return -EINVAL;
    struct kern_aug_sample p;
    const int n = plan_sample(ws, hyp, d, tiles, n_tiles, NULL, false, oh, ow, &p, rows, cap_rows);
    if (n < 0) return n;
    int rc = 0;
    if (!d->mosaic && p.canvas[0].n_paste == 0) {
        /* a resizing letterbox: done into ws->canvas, which the pass then reads */
        rc = letterbox_canvas(ws, &tiles[0], oh, ow);
        if (rc < 0) return rc;
        canvas_of_buffer(&p.canvas[0], ws->canvas);
    }
    /* copy_paste draws on a built canvas: build it, then read it as one region */
    for (int k = 0; k < 1 + p.mixup; k++) {
        if (!ws->cp_on[k]) continue;
        if (k == 1 && !ws->canvas2 && !(ws->canvas2 = malloc(4 * (size_t)ws->s * ws->s * 3)))
            return -ENOMEM;
        uint8_t *const buf = k == 0 ? ws->canvas : ws->canvas2;
        rc = kern_ref_aug_paste(trn_aug_cpu_ctx(), buf, &p.canvas[k]);
        if (rc < 0) return rc;
        trn_aug_copy_paste_pixels(buf, p.canvas[k].w, p.canvas[k].h, ws->cp_mask[k]);
        canvas_of_buffer(&p.canvas[k], buf);
    }
    rc = kern_ops_cpu()->aug_sample(dst, dtype, oh, ow, &p);
    return rc < 0 ? rc : n;
}

int trn_aug_train_sample(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                         const struct trn_aug_draws *d, const struct trn_aug_tile *tiles,
                         int n_tiles, uint8_t *dst, float *rows, int cap_rows)
{
    if (!ws) return -EINVAL;
    return trn_aug_train_sample_shape(ws, hyp, d, tiles, n_tiles, ws->s, ws->s, dst, rows,
                                      cap_rows);
}

int trn_aug_train_batch(struct kern_ctx *ctx, const struct kern_ops *K, struct trn_aug_ws *ws,
                        const struct trn_aug_hyp *hyp, struct trn_aug_batch_item *items, int n,
                        struct kern_aug_sample *plans, int dtype, void *dst)
{
    if (!ctx || !K || !K->aug_batch || !ws || !items || n < 1 || !plans || !dst ||
        K->backend != kern_ctx_backend(ctx))
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        struct trn_aug_batch_item *it = &items[i];
        it->n_rows = 0;
        const int nr = plan_sample(ws, hyp, it->d, it->tiles, it->n_tiles, it->pixels, true, ws->s,
                                   ws->s, &plans[i], it->rows, it->cap_rows);
        if (nr < 0) return nr;
        it->n_rows = nr;
    }
    return K->aug_batch(ctx, dst, dtype, ws->s, plans, n);
}

int trn_aug_val_sample(const struct trn_aug_tile *tile, int shape_h, int shape_w, uint8_t *dst,
                       size_t dst_cap, float *rows, int cap_rows,
                       struct trn_aug_letterbox_plan *plan)
{
    if (!tile_ok(tile) || !dst || cap_rows < 0 || (cap_rows > 0 && !rows)) return -EINVAL;
    struct trn_aug_letterbox_opts o;
    trn_aug_letterbox_opts_default(&o);
    o.scaleup = false;
    struct trn_aug_letterbox_plan p;
    int rc = trn_aug_letterbox_plan(tile->w, tile->h, shape_h, shape_w, &o, &p);
    if (rc < 0) return rc;
    if (tile->n_labels > cap_rows) return -ENOSPC;
    rc = trn_aug_letterbox(tile->pixels, tile->w, tile->h, &p, dst, dst_cap);
    if (rc < 0) return rc;
    const float fw = (float)(p.ratio_w * tile->w), fh = (float)(p.ratio_h * tile->h);
    const float pw = (float)p.pad_w, ph = (float)p.pad_h;
    for (int j = 0; j < tile->n_labels; j++) {
        const float *l = tile->labels + 5 * (size_t)j;
        float *r = rows + 5 * (size_t)j;
        r[0] = l[0];
        r[1] = fw * (l[1] - l[3] / 2) + pw;
        r[2] = fh * (l[2] - l[4] / 2) + ph;
        r[3] = fw * (l[1] + l[3] / 2) + pw;
        r[4] = fh * (l[2] + l[4] / 2) + ph;
    }
    trn_aug_xyxy_to_xywhn(rows, tile->n_labels, p.out_w, p.out_h, 1e-3);
    if (plan) *plan = p;
    return tile->n_labels;
}

const char *trn_aug_strerror(int rc)
{
    switch (rc) {
    case 0:
        return "success";
    case -EINVAL:
        return "augment: invalid argument";
    case -ENOSPC:
        return "augment: output capacity too small";
    case -ENOMEM:
        return "augment: out of memory";
    case -ENOTSUP:
        return "augment: not supported (a GPU plan of a resizing letterbox or of a copy_paste "
               "canvas)";
    default:
        return rc < 0 ? trn_strerror(rc) : "augment: unknown status";
    }
}
