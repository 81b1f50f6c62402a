/* NMS, IoU and scale_boxes on hand cases; every expected value is derived in a comment. And the
 * NMS against a plain restatement of non_max_suppression + torchvision's batched NMS (every
 * later candidate compared) on random crowded predictions: the per-class sweep must give the
 * same detections, also when it must not be used (agnostic, a negative threshold, NaN or huge
 * boxes). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nms.h"
#include "tap.h"

#define NC 2

/* One Detect row: cx, cy, w, h, obj, cls0, cls1. */
static void row(float *r, float cx, float cy, float w, float h, float obj, float c0, float c1)
{
    r[0] = cx;
    r[1] = cy;
    r[2] = w;
    r[3] = h;
    r[4] = obj;
    r[5] = c0;
    r[6] = c1;
}

/* ---- the plain restatement ---------------------------------------------------------------- */

struct rc {
    float box[4], conf;
    int cls, seq;
};

static int rc_cmp(const void *pa, const void *pb)
{
    const struct rc *a = pa, *b = pb;
    if (a->conf != b->conf) return a->conf > b->conf ? -1 : 1;
    return a->seq - b->seq;
}

static float plain_iou(const float *a, const float *b)
{
    const float aa = (a[2] - a[0]) * (a[3] - a[1]), ab = (b[2] - b[0]) * (b[3] - b[1]);
    const float w = fmaxf(0.0f, fminf(a[2], b[2]) - fmaxf(a[0], b[0]));
    const float h = fmaxf(0.0f, fminf(a[3], b[3]) - fmaxf(a[1], b[1]));
    return w * h / (aa + ab - w * h);
}

static int plain_nms(const float *pred, int rows, int nc, const struct trn_nms_opts *o,
                     struct trn_det *out, int cap)
{
    struct rc *c = malloc(sizeof *c * (size_t)rows * (size_t)nc);
    int n = 0;
    for (int r = 0; r < rows; r++) {
        const float *x = pred + (size_t)r * (5 + (size_t)nc);
        if (!(x[4] > o->conf_thres)) continue;
        const float hw = x[2] / 2, hh = x[3] / 2;
        const float b[4] = { x[0] - hw, x[1] - hh, x[0] + hw, x[1] + hh };
        for (int j = 0; j < nc; j++) {
            const float conf = x[5 + j] * x[4];
            if (!(conf > o->conf_thres)) continue;
            memcpy(c[n].box, b, sizeof b);
            c[n].conf = conf, c[n].cls = j, c[n].seq = n;
            n++;
        }
    }
    qsort(c, (size_t)n, sizeof *c, rc_cmp);
    if (n > o->max_nms) n = o->max_nms;
    float *ob = malloc(sizeof(float) * 4 * (size_t)(n ? n : 1));
    char *supp = calloc((size_t)(n ? n : 1), 1);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            ob[4 * i + k] = c[i].box[k] + (o->agnostic ? 0.0f : (float)c[i].cls * 7680.0f);
    int kept = 0;
    for (int i = 0; i < n && kept < cap && kept < o->max_det; i++) {
        if (supp[i]) continue;
        out[kept] = (struct trn_det){ c[i].box[0], c[i].box[1], c[i].box[2],
                                      c[i].box[3], c[i].conf,   c[i].cls };
        kept++;
        for (int j = i + 1; j < n; j++)
            if (!supp[j] && (double)plain_iou(ob + 4 * i, ob + 4 * j) > o->iou_thres) supp[j] = 1;
    }
    free(c), free(ob), free(supp);
    return kept;
}

static uint64_t g_x = 0x9E3779B97F4A7C15ull;

static float urand(void)
{
    g_x ^= g_x << 13, g_x ^= g_x >> 7, g_x ^= g_x << 17;
    return (float)(g_x >> 40) / (float)(1 << 24);
}

/* rows crowded around a few centres, so that boxes of one class and of different classes
 * overlap; twist: 1 a NaN box, 2 a box 9000 px wide, 3 a box of negative width. */
static int plain_case(struct trn_nms *nms, const struct trn_nms_opts *o, int twist)
{
    enum { ROWS = 600, C = 5 };
    static float pred[ROWS * (5 + C)];
    for (int r = 0; r < ROWS; r++) {
        float *x = pred + r * (5 + C);
        const int k = r % 7;
        x[0] = 50.0f + 60.0f * (float)k + 20.0f * urand();
        x[1] = 80.0f + 20.0f * urand();
        x[2] = 30.0f + 40.0f * urand();
        x[3] = 30.0f + 40.0f * urand();
        x[4] = urand();
        for (int j = 0; j < C; j++)
            x[5 + j] = urand();
    }
    if (twist == 1) pred[5 * (5 + C) + 2] = NAN;
    if (twist == 2) pred[7 * (5 + C) + 2] = 9000.0f;
    if (twist == 3) pred[9 * (5 + C) + 2] = -50.0f;
    static struct trn_det a[400], b[400];
    const int na = trn_nms_run(nms, pred, ROWS, 5 + C, C, o, a, 400);
    const int nb = plain_nms(pred, ROWS, C, o, b, 400);
    int same = na == nb;
    for (int i = 0; same && i < na; i++)
        same = !memcmp(&a[i], &b[i], sizeof a[i]) || (isnan(a[i].x1) && isnan(b[i].x1));
    return same ? na : -1;
}

int main(void)
{
    struct trn_nms *nms = NULL;
    struct trn_nms_opts o;
    struct trn_det d[16];
    float p[8 * 7];
    if (trn_nms_create(&nms) != 0) return 99;
    trn_nms_opts_default(&o);

    /* IoU: [0,0,10,10] vs [5,0,15,10]: inter 5*10 = 50, union 100 + 100 - 50 = 150 -> 1/3. */
    const float a[4] = { 0, 0, 10, 10 }, b[4] = { 5, 0, 15, 10 }, c[4] = { 20, 20, 30, 30 };
    ok(fabsf(trn_box_iou(a, b) - 1.0f / 3) < 1e-6f, "box_iou 1/3 (%g)", trn_box_iou(a, b));
    ok(trn_nms_iou(a, b) == 50.0f / 150.0f, "torchvision iou 50/150 exactly");
    ok(trn_box_iou(a, c) == 0.0f, "disjoint boxes: IoU 0");
    ok(fabsf(trn_box_iou(a, a) - 1.0f) < 1e-6f, "identical boxes: IoU 1");

    /* Threshold: A = xywh (5,5,10,10) -> [0,0,10,10], B = (5,2.5,10,5) -> [0,0,10,5]: inter 50,
     * union 100 + 50 - 50 = 100 -> IoU exactly 0.5. conf A = 0.9*0.8 = 0.72, B = 0.8*0.8. */
    row(p, 5, 5, 10, 10, 0.9f, 0.8f, 0.0f);
    row(p + 7, 5, 2.5f, 10, 5, 0.8f, 0.8f, 0.0f);
    o.iou_thres = 0.5;
    int n = trn_nms_run(nms, p, 2, 7, NC, &o, d, 16);
    is_int(n, 2, "IoU == iou_thres is not suppressed (torchvision: IoU > thr)");
    o.iou_thres = 0.49;
    n = trn_nms_run(nms, p, 2, 7, NC, &o, d, 16);
    is_int(n, 1, "IoU 0.5 > 0.49 suppresses the lower box");
    ok(n == 1 && d[0].conf == 0.9f * 0.8f && d[0].x1 == 0 && d[0].y2 == 10,
       "the higher-conf box A stays");

    /* Class offset: the same two boxes, B of class 1 -> offset 7680 px, no overlap, both kept. */
    row(p + 7, 5, 2.5f, 10, 5, 0.8f, 0.0f, 0.8f);
    n = trn_nms_run(nms, p, 2, 7, NC, &o, d, 16);
    is_int(n, 2, "different classes never suppress each other");
    ok(n == 2 && d[1].cls == 1 && d[1].y2 == 5.0f, "class-1 box returned without the offset");
    o.agnostic = 1;
    n = trn_nms_run(nms, p, 2, 7, NC, &o, d, 16);
    is_int(n, 1, "agnostic: the same pair suppresses");
    o.agnostic = 0;

    /* Multi-label: one box, obj 1, cls (0.5, 0.4) -> two detections (0.5 class 0, 0.4 class 1)
     * that do not suppress each other; with multi_label 0 only the best class. */
    row(p, 50, 50, 20, 20, 1.0f, 0.5f, 0.4f);
    o.iou_thres = 0.6;
    n = trn_nms_run(nms, p, 1, 7, NC, &o, d, 16);
    ok(n == 2 && d[0].cls == 0 && d[0].conf == 0.5f && d[1].cls == 1 && d[1].conf == 0.4f,
       "multi-label: one detection per class above conf_thres");
    o.multi_label = 0;
    n = trn_nms_run(nms, p, 1, 7, NC, &o, d, 16);
    ok(n == 1 && d[0].cls == 0, "single label: the best class only");
    o.multi_label = 1;

    /* conf_thres: obj == 0.001 is dropped (obj > thr); obj 0.5 * cls 0.002 = 0.001 dropped too,
     * obj 0.5 * cls 0.004 = 0.002 kept. */
    row(p, 50, 50, 20, 20, 0.001f, 1.0f, 1.0f);
    row(p + 7, 150, 50, 20, 20, 0.5f, 0.002f, 0.004f);
    n = trn_nms_run(nms, p, 2, 7, NC, &o, d, 16);
    ok(n == 1 && d[0].cls == 1 && d[0].x1 == 140, "conf_thres is strict on obj and on obj*cls");

    /* max_det: 5 disjoint boxes, confs 0.1..0.5; max_det 3 keeps 0.5, 0.4, 0.3 in that order. */
    for (int i = 0; i < 5; i++)
        row(p + 7 * i, 20.0f + 40 * i, 20, 10, 10, 0.1f * (i + 1), 1, 0);
    o.max_det = 3;
    n = trn_nms_run(nms, p, 5, 7, NC, &o, d, 16);
    ok(n == 3 && d[0].conf == 0.5f && d[1].conf == 0.4f && d[2].conf == 0.3f,
       "max_det truncates to the highest confidences");
    o.max_det = 300;
    /* max_nms 2: only the two best candidates enter NMS. */
    o.max_nms = 2;
    n = trn_nms_run(nms, p, 5, 7, NC, &o, d, 16);
    is_int(n, 2, "max_nms bounds the candidates");
    o.max_nms = TRN_NMS_MAX_NMS;

    /* Stable ties: two identical boxes with equal conf: the first row is kept. Distinguish them
     * by an invisible difference: row 0 is w = 10, row 1 w = 10 with cx shifted by 0.5 (IoU
     * 9.5/10.5 > 0.6). */
    row(p, 10, 10, 10, 10, 0.5f, 1, 0);
    row(p + 7, 10.5f, 10, 10, 10, 0.5f, 1, 0);
    n = trn_nms_run(nms, p, 2, 7, NC, &o, d, 16);
    ok(n == 1 && d[0].x1 == 5.0f, "equal conf: generation order wins (stable)");

    /* Errors. */
    ok(trn_nms_run(nms, p, 2, 6, NC, &o, d, 16) == -EINVAL, "row_stride < 5 + nc is -EINVAL");
    ok(trn_nms_run(nms, NULL, 2, 7, NC, &o, d, 16) == -EINVAL, "NULL pred is -EINVAL");

    /* scale_boxes with ratio_pad: gain 0.5, pad (10, 20): [20,30,120,220] ->
     * ((20-10)/.5, (30-20)/.5, (120-10)/.5, (220-20)/.5) = (20, 20, 220, 400), clipped to the
     * 200 x 300 image -> (20, 20, 200, 300). */
    struct trn_det s = { 20, 30, 120, 220, 0.5f, 0 };
    ok(trn_scale_dets(&s, 1, 0.5, 10, 20, 200, 300) == 0 && s.x1 == 20 && s.y1 == 20 &&
           s.x2 == 200 && s.y2 == 300,
       "scale_boxes: unpad, unscale, clip");
    float nb[4] = { 5, 5, 6, 6 };
    trn_scale_box(nb, 1.0, 10, 10, 100, 100);
    ok(nb[0] == 0 && nb[3] == 0, "clip at 0");
    /* ratio_pad None: 1280x960 into 640x640: gain = min(640/960, 640/1280) = 0.5, padw =
     * (640 - 1280*0.5)/2 = 0, padh = (640 - 960*0.5)/2 = 80. */
    double g, pw, ph;
    ok(trn_ratio_pad(640, 640, 1280, 960, &g, &pw, &ph) == 0 && g == 0.5 && pw == 0 && ph == 80,
       "ratio_pad from shapes");

    /* the per-class sweep against every later candidate compared */
    struct trn_nms_opts po;
    trn_nms_opts_default(&po);
    po.conf_thres = 0.05f;
    po.iou_thres = 0.45;
    int r1 = plain_case(nms, &po, 0), r2 = plain_case(nms, &po, 3);
    ok(r1 > 0 && r2 > 0,
       "multi-label, 5 classes, 600 crowded rows: the same %d detections as the plain NMS "
       "(and %d with a box of negative width)",
       r1, r2);
    po.agnostic = 1;
    r1 = plain_case(nms, &po, 0);
    po.agnostic = 0;
    po.iou_thres = -0.1;
    r2 = plain_case(nms, &po, 0);
    po.iou_thres = 0.45;
    const int r3 = plain_case(nms, &po, 1), r4 = plain_case(nms, &po, 2);
    ok(r1 > 0 && r2 > 0 && r3 > 0 && r4 > 0,
       "the same where the sweep must compare every pair: agnostic (%d), iou_thres -0.1 (%d), a "
       "NaN box (%d), a box 9000 px wide (%d)",
       r1, r2, r3, r4);
    po.max_det = 7;
    ok(plain_case(nms, &po, 0) == 7, "max_det 7: the first 7 of the same");

    trn_nms_destroy(nms);
    return tap_done();
}
