/*
 * CIoU of a box pair and its gradient, shared by the CPU reference (kern_loss.c) and the CUDA
 * ops (kern_cuda_loss.cu, kern_cuda_yolo_loss.cu), so that the formulas, the order of the float
 * operations and autograd's tie rules exist once. Boxes are (x, y, w, h); alpha is a constant
 * of the backward (ultralytics computes it under torch.no_grad()). Private to kernels/.
 */
#ifndef KERN_CIOU_COMMON_H
#define KERN_CIOU_COMMON_H

#include <math.h>

#include "kern.h"

#ifdef __CUDACC__
#define KERN_CIOU_FN static __device__ __forceinline__
#else
#define KERN_CIOU_FN static inline
#endif

#define KERN_CIOU_KV ((float)(4.0 / (M_PI * M_PI)))

/* Everything the backward needs from one forward evaluation. */
struct kern_ciou_terms {
    float b1x1, b1x2, b1y1, b1y2, b2x1, b2x2, b2y1, b2y2; /* corners */
    float iw_raw, ih_raw, iw, ih;                         /* overlap before / after clamp(0) */
    float inter, uni, iou;
    float cw, ch, c2;
    float ddx, ddy, rho2; /* ddx = sum of box2 x corners - sum of box1 x corners */
    float r1, r2, dd, v, alpha;
    float ciou;
};

KERN_CIOU_FN void kern_ciou_eval(const float *p, const float *q, struct kern_ciou_terms *s)
{
    const float eps = KERN_CIOU_EPS;
    const float x1 = p[0], y1 = p[1], w1 = p[2], h1 = p[3];
    const float x2 = q[0], y2 = q[1], w2 = q[2], h2 = q[3];
    const float w1_ = w1 / 2.0f, h1_ = h1 / 2.0f, w2_ = w2 / 2.0f, h2_ = h2 / 2.0f;
    s->b1x1 = x1 - w1_;
    s->b1x2 = x1 + w1_;
    s->b1y1 = y1 - h1_;
    s->b1y2 = y1 + h1_;
    s->b2x1 = x2 - w2_;
    s->b2x2 = x2 + w2_;
    s->b2y1 = y2 - h2_;
    s->b2y2 = y2 + h2_;
    s->iw_raw = fminf(s->b1x2, s->b2x2) - fmaxf(s->b1x1, s->b2x1);
    s->ih_raw = fminf(s->b1y2, s->b2y2) - fmaxf(s->b1y1, s->b2y1);
    s->iw = s->iw_raw > 0.0f ? s->iw_raw : 0.0f;
    s->ih = s->ih_raw > 0.0f ? s->ih_raw : 0.0f;
    s->inter = s->iw * s->ih;
    s->uni = w1 * h1 + w2 * h2 - s->inter + eps;
    s->iou = s->inter / s->uni;
    s->cw = fmaxf(s->b1x2, s->b2x2) - fminf(s->b1x1, s->b2x1);
    s->ch = fmaxf(s->b1y2, s->b2y2) - fminf(s->b1y1, s->b2y1);
    s->c2 = s->cw * s->cw + s->ch * s->ch + eps;
    s->ddx = s->b2x1 + s->b2x2 - s->b1x1 - s->b1x2;
    s->ddy = s->b2y1 + s->b2y2 - s->b1y1 - s->b1y2;
    s->rho2 = (s->ddx * s->ddx + s->ddy * s->ddy) / 4.0f;
    s->r1 = w1 / h1;
    s->r2 = w2 / h2;
    s->dd = atanf(s->r2) - atanf(s->r1);
    s->v = KERN_CIOU_KV * (s->dd * s->dd);
    s->alpha = s->v / (s->v - s->iou + (1.0f + eps));
    s->ciou = s->iou - (s->rho2 / s->c2 + s->v * s->alpha);
}

/* Gradient of min(a, b) (lo = 1) or max(a, b) (lo = 0) to a and b, autograd's tie rule. */
KERN_CIOU_FN void kern_ciou_minmax_grad(float a, float b, float g, int lo, float *ga, float *gb)
{
    if (a == b) {
        *ga += g / 2.0f;
        *gb += g / 2.0f;
    } else if ((a < b) == (lo != 0)) {
        *ga += g;
    } else {
        *gb += g;
    }
}

/* o1 = g dciou/d(box p), and o2 = g dciou/d(box q) unless o2 is NULL; alpha held constant. */
KERN_CIOU_FN void kern_ciou_grad(const float *p, const float *q, float g, float o1[4], float *o2)
{
    struct kern_ciou_terms s;
    kern_ciou_eval(p, q, &s);
    /* ciou = iou - rho2 / c2 - v alpha */
    const float g_iou = g, g_rho2 = -g / s.c2, g_c2 = g * s.rho2 / (s.c2 * s.c2);
    const float g_v = -g * s.alpha;
    /* corner gradients: [b1x1, b1x2, b1y1, b1y2, b2x1, b2x2, b2y1, b2y2] */
    float gc[8] = { 0 };
    float gw1 = 0.0f, gh1 = 0.0f, gw2 = 0.0f, gh2 = 0.0f;
    /* iou = inter / union, union = w1 h1 + w2 h2 - inter + eps */
    const float g_uni = -g_iou * s.inter / (s.uni * s.uni);
    const float g_inter = g_iou / s.uni - g_uni;
    gw1 += g_uni * p[3];
    gh1 += g_uni * p[2];
    gw2 += g_uni * q[3];
    gh2 += g_uni * q[2];
    const float g_iw = s.iw_raw >= 0.0f ? g_inter * s.ih : 0.0f;
    const float g_ih = s.ih_raw >= 0.0f ? g_inter * s.iw : 0.0f;
    kern_ciou_minmax_grad(s.b1x2, s.b2x2, g_iw, 1, &gc[1], &gc[5]);
    kern_ciou_minmax_grad(s.b1x1, s.b2x1, -g_iw, 0, &gc[0], &gc[4]);
    kern_ciou_minmax_grad(s.b1y2, s.b2y2, g_ih, 1, &gc[3], &gc[7]);
    kern_ciou_minmax_grad(s.b1y1, s.b2y1, -g_ih, 0, &gc[2], &gc[6]);
    /* c2 = cw^2 + ch^2 + eps */
    const float g_cw = g_c2 * 2.0f * s.cw, g_ch = g_c2 * 2.0f * s.ch;
    kern_ciou_minmax_grad(s.b1x2, s.b2x2, g_cw, 0, &gc[1], &gc[5]);
    kern_ciou_minmax_grad(s.b1x1, s.b2x1, -g_cw, 1, &gc[0], &gc[4]);
    kern_ciou_minmax_grad(s.b1y2, s.b2y2, g_ch, 0, &gc[3], &gc[7]);
    kern_ciou_minmax_grad(s.b1y1, s.b2y1, -g_ch, 1, &gc[2], &gc[6]);
    /* rho2 = (ddx^2 + ddy^2) / 4 */
    const float g_ddx = g_rho2 * s.ddx / 2.0f, g_ddy = g_rho2 * s.ddy / 2.0f;
    gc[4] += g_ddx;
    gc[5] += g_ddx;
    gc[0] -= g_ddx;
    gc[1] -= g_ddx;
    gc[6] += g_ddy;
    gc[7] += g_ddy;
    gc[2] -= g_ddy;
    gc[3] -= g_ddy;
    /* v = kv (atan(w2 / h2) - atan(w1 / h1))^2 */
    const float g_dd = g_v * KERN_CIOU_KV * 2.0f * s.dd;
    const float g_r1 = -g_dd / (1.0f + s.r1 * s.r1), g_r2 = g_dd / (1.0f + s.r2 * s.r2);
    gw1 += g_r1 / p[3];
    gh1 -= g_r1 * p[2] / (p[3] * p[3]);
    gw2 += g_r2 / q[3];
    gh2 -= g_r2 * q[2] / (q[3] * q[3]);
    /* corners = centre -+ size / 2 */
    o1[0] = gc[0] + gc[1];
    o1[1] = gc[2] + gc[3];
    o1[2] = gw1 + (gc[1] - gc[0]) / 2.0f;
    o1[3] = gh1 + (gc[3] - gc[2]) / 2.0f;
    if (o2) {
        o2[0] = gc[4] + gc[5];
        o2[1] = gc[6] + gc[7];
        o2[2] = gw2 + (gc[5] - gc[4]) / 2.0f;
        o2[3] = gh2 + (gc[7] - gc[6]) / 2.0f;
    }
}

#endif
