/* nms: see nms.h for what is reproduced and every numeric choice. */
#include "nms.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One (row, class) candidate before NMS. seq is its generation order, the stable tie-break. */
struct cand {
    float box[4]; /* xyxy, no class offset */
    float conf;
    int cls;
    uint32_t seq;
};

struct trn_nms {
    struct cand *cand; /* candidates, cap_cand entries */
    size_t cap_cand;
    float *obox;         /* offset boxes for the NMS, 4 per kept candidate */
    float *area;         /* their areas */
    unsigned char *supp; /* suppressed flags */
    uint32_t *next;      /* the next candidate of the same class, in sorted order */
    size_t cap_nms;      /* entries of obox/area/supp/next */
    uint32_t *head;      /* per class: its first candidate not yet linked (building next) */
    size_t cap_head;
};

void trn_nms_opts_default(struct trn_nms_opts *o)
{
    o->conf_thres = 0.001f;
    o->iou_thres = 0.6;
    o->max_det = TRN_NMS_MAX_DET;
    o->max_nms = TRN_NMS_MAX_NMS;
    o->multi_label = 1;
    o->agnostic = 0;
}

int trn_nms_create(struct trn_nms **out)
{
    if (!out) return -EINVAL;
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : -ENOMEM;
}

void trn_nms_destroy(struct trn_nms *nms)
{
    if (!nms) return;
    free(nms->cand);
    free(nms->obox);
    free(nms->area);
    free(nms->supp);
    free(nms->next);
    free(nms->head);
    free(nms);
}

/* Descending conf, ties by generation order: a stable sort, whatever qsort's algorithm. */
static int cand_cmp(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;
    if (a->conf > b->conf) return -1;
    if (a->conf < b->conf) return 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

void trn_xywh2xyxy(const float xywh[4], float xyxy[4])
{
    const float hw = xywh[2] / 2, hh = xywh[3] / 2;
    xyxy[0] = xywh[0] - hw;
    xyxy[1] = xywh[1] - hh;
    xyxy[2] = xywh[0] + hw;
    xyxy[3] = xywh[1] + hh;
}

float trn_box_iou(const float a[4], const float b[4])
{
    /* box_iou: (min(a2, b2) - max(a1, b1)).clamp(0).prod(2), then
     * inter / ((a2 - a1).prod(2) + (b2 - b1).prod(2) - inter + eps), float32. */
    float w = fminf(a[2], b[2]) - fmaxf(a[0], b[0]);
    float h = fminf(a[3], b[3]) - fmaxf(a[1], b[1]);
    w = w > 0 ? w : 0;
    h = h > 0 ? h : 0;
    const float inter = w * h;
    const float area_a = (a[2] - a[0]) * (a[3] - a[1]);
    const float area_b = (b[2] - b[0]) * (b[3] - b[1]);
    return inter / (area_a + area_b - inter + 1e-7f);
}

/* torchvision nms_kernel_impl's overlap, with the areas precomputed as there. */
static float tv_iou(const float a[4], float area_a, const float b[4], float area_b)
{
    const float xx1 = fmaxf(a[0], b[0]), yy1 = fmaxf(a[1], b[1]);
    const float xx2 = fminf(a[2], b[2]), yy2 = fminf(a[3], b[3]);
    const float w = fmaxf(0.0f, xx2 - xx1), h = fmaxf(0.0f, yy2 - yy1);
    const float inter = w * h;
    return inter / (area_a + area_b - inter);
}

float trn_nms_iou(const float a[4], const float b[4])
{
    return tv_iou(a, (a[2] - a[0]) * (a[3] - a[1]), b, (b[2] - b[0]) * (b[3] - b[1]));
}

int trn_nms_run(struct trn_nms *nms, const float *pred, size_t n_rows, size_t row_stride, int nc,
                const struct trn_nms_opts *o, struct trn_det *dets, size_t dets_cap)
{
    if (!nms || !o || nc < 1 || row_stride < 5 + (size_t)nc) return -EINVAL;
    if ((!pred && n_rows) || (!dets && dets_cap)) return -EINVAL;
    if (o->max_det < 1 || o->max_nms < 1 || !(o->iou_thres == o->iou_thres)) return -EINVAL;
    if (n_rows > UINT32_MAX / (size_t)nc) return -EINVAL;
    const int multi = o->multi_label && nc > 1; /* multi_label &= nc > 1 */
    const float thr = o->conf_thres;

    size_t n = 0;
    for (size_t r = 0; r < n_rows; r++) {
        const float *x = pred + r * row_stride;
        const float obj = x[4];
        if (!(obj > thr)) continue;
        float box[4];
        trn_xywh2xyxy(x, box);
        if (multi) {
            if (trn_grow((void **)&nms->cand, &nms->cap_cand, n + (size_t)nc, sizeof(*nms->cand)))
                return -ENOMEM;
            for (int j = 0; j < nc; j++) {
                const float conf = x[5 + j] * obj;
                if (!(conf > thr)) continue;
                struct cand *c = &nms->cand[n];
                memcpy(c->box, box, sizeof(box));
                c->conf = conf;
                c->cls = j;
                c->seq = (uint32_t)n;
                n++;
            }
        } else {
            /* conf, j = x[:, 5:].max(1): first maximum on ties; NaN never wins here. */
            float best = x[5] * obj;
            int bj = 0;
            for (int j = 1; j < nc; j++) {
                const float conf = x[5 + j] * obj;
                if (conf > best || best != best) {
                    best = conf;
                    bj = j;
                }
            }
            if (!(best > thr)) continue;
            if (trn_grow((void **)&nms->cand, &nms->cap_cand, n + 1, sizeof(*nms->cand)))
                return -ENOMEM;
            struct cand *c = &nms->cand[n];
            memcpy(c->box, box, sizeof(box));
            c->conf = best;
            c->cls = bj;
            c->seq = (uint32_t)n;
            n++;
        }
    }
    if (n == 0) return 0;
    qsort(nms->cand, n, sizeof(*nms->cand), cand_cmp);
    if (n > (size_t)o->max_nms) n = (size_t)o->max_nms;

    if (n > nms->cap_nms) {
        /* All three arrays share cap_nms; each realloc keeps the old block on failure. */
        float *a = realloc(nms->area, n * sizeof(float));
        if (!a) return -ENOMEM;
        nms->area = a;
        unsigned char *sp = realloc(nms->supp, n);
        if (!sp) return -ENOMEM;
        nms->supp = sp;
        float *ob = realloc(nms->obox, n * 4 * sizeof(float));
        if (!ob) return -ENOMEM;
        nms->obox = ob;
        uint32_t *nx = realloc(nms->next, n * sizeof(uint32_t));
        if (!nx) return -ENOMEM;
        nms->next = nx;
        nms->cap_nms = n;
    }
    if (trn_grow((void **)&nms->head, &nms->cap_head, (size_t)nc, sizeof(uint32_t))) return -ENOMEM;

    for (size_t i = 0; i < n; i++) {
        const struct cand *c = &nms->cand[i];
        /* c = x[:, 5:6] * max_wh; boxes = x[:, :4] + c, all float32. */
        const float off = o->agnostic ? 0.0f : (float)c->cls * (float)TRN_NMS_MAX_WH;
        float *b = nms->obox + 4 * i;
        for (int k = 0; k < 4; k++)
            b[k] = c->box[k] + off;
        nms->area[i] = (b[2] - b[0]) * (b[3] - b[1]);
        nms->supp[i] = 0;
    }
    /*
     * Which pairs can suppress. batched_nms's offsets put each class max_wh apart, so boxes of
     * two classes never intersect when all boxes span less than max_wh in x (less a margin for
     * the float rounding of the offset sums): their IoU is 0, which suppresses nothing when
     * iou_thres >= 0. Then only pairs of one class need an IoU: each candidate links to the next
     * of its class (next[]), and the sweep below compares along that chain, the same decisions
     * as comparing with every later candidate. Otherwise (agnostic, NaN or huge boxes, a
     * negative threshold) the chain is every later candidate.
     */
    const uint32_t none = UINT32_MAX;
    bool by_class = !o->agnostic && o->iou_thres >= 0 && nc > 1;
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n && by_class; i++) {
        const float *b = nms->cand[i].box;
        if (!(fabsf(b[0]) <= 1e30f && fabsf(b[2]) <= 1e30f)) by_class = false; /* NaN, inf */
        /* both x coordinates: a box of negative width has x2 < x1 */
        lo = fminf(lo, fminf(b[0], b[2]));
        hi = fmaxf(hi, fmaxf(b[0], b[2]));
    }
    if (by_class && !((double)hi - (double)lo < TRN_NMS_MAX_WH - 1.0)) by_class = false;
    for (int c = 0; c < nc; c++)
        nms->head[c] = none;
    for (size_t i = n; i-- > 0;) {
        const int c = by_class ? nms->cand[i].cls : 0;
        nms->next[i] = by_class ? nms->head[c] : (i + 1 < n ? (uint32_t)(i + 1) : none);
        nms->head[c] = (uint32_t)i;
    }
    /* torchvision sorts the scores again (descending); our order already is that order. */
    size_t kept = 0;
    const size_t max_keep = (size_t)o->max_det < dets_cap ? (size_t)o->max_det : dets_cap;
    for (size_t i = 0; i < n && kept < max_keep; i++) {
        if (nms->supp[i]) continue;
        const struct cand *c = &nms->cand[i];
        dets[kept].x1 = c->box[0];
        dets[kept].y1 = c->box[1];
        dets[kept].x2 = c->box[2];
        dets[kept].y2 = c->box[3];
        dets[kept].conf = c->conf;
        dets[kept].cls = c->cls;
        kept++;
        const float *bi = nms->obox + 4 * i;
        for (uint32_t j = nms->next[i]; j != none; j = nms->next[j]) {
            if (nms->supp[j]) continue;
            const float ovr = tv_iou(bi, nms->area[i], nms->obox + 4 * j, nms->area[j]);
            /* float promoted to double against the double threshold, as in torchvision. */
            if ((double)ovr > o->iou_thres) nms->supp[j] = 1;
        }
    }
    return (int)kept;
}

void trn_scale_box(float xyxy[4], double gain, double padw, double padh, int w0, int h0)
{
    const float g = (float)gain, pw = (float)padw, ph = (float)padh;
    const float lim[4] = { (float)w0, (float)h0, (float)w0, (float)h0 };
    for (int k = 0; k < 4; k++) {
        float v = (xyxy[k] - ((k & 1) ? ph : pw)) / g;
        /* clamp_(0, w): NaN stays NaN as in torch.clamp. */
        if (v < 0) v = 0;
        if (v > lim[k]) v = lim[k];
        xyxy[k] = v;
    }
}

int trn_scale_dets(struct trn_det *dets, size_t n, double gain, double padw, double padh, int w0,
                   int h0)
{
    if ((!dets && n) || !(gain > 0) || !isfinite(gain) || w0 < 1 || h0 < 1) return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        float b[4] = { dets[i].x1, dets[i].y1, dets[i].x2, dets[i].y2 };
        trn_scale_box(b, gain, padw, padh, w0, h0);
        dets[i].x1 = b[0];
        dets[i].y1 = b[1];
        dets[i].x2 = b[2];
        dets[i].y2 = b[3];
    }
    return 0;
}

int trn_ratio_pad(int w1, int h1, int w0, int h0, double *gain, double *padw, double *padh)
{
    if (w1 < 1 || h1 < 1 || w0 < 1 || h0 < 1 || !gain || !padw || !padh) return -EINVAL;
    const double gh = (double)h1 / h0, gw = (double)w1 / w0;
    *gain = gh < gw ? gh : gw; /* Python's min returns the first of equal values; same value */
    *padw = (w1 - w0 * *gain) / 2;
    *padh = (h1 - h0 * *gain) / 2;
    return 0;
}
