/*
 * Loss ops, CPU reference: BCE-with-logits (mean) and CIoU of box pairs.
 *
 * BCE: logits x as a rows x cols block with row stride ldx (element (r, c) at x[r ldx + c]),
 * targets t dense (rows, cols); loss = mean of max(x, 0) - x t + log1p(exp(-|x|)), summed in
 * double; dx has x's layout: dx = dloss (sigmoid(x) - t) / (rows cols), only inside the block.
 * CIoU: b1, b2, db1, db2 (n, 4) as (x, y, w, h); ciou, dciou (n). The forward follows
 * ultralytics' bbox_iou(xywh=True, CIoU=True) op by op in float32; the backward is its autograd
 * with alpha held constant, min/max ties split in halves and clamp(0) passing its gradient at 0.
 *
 * Gradients: dx, db1, db2 overwrite unless accum has KERN_ACCUM_DX (overwritten buffers are
 * never read).
 */
#include <math.h>

#include "kern_internal.h"

int kern_ref_bce_logits_fwd(struct kern_ctx *ctx, float *loss, const float *restrict x,
                            const float *restrict t, size_t rows, size_t cols, size_t ldx)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!loss || !x || !t || rows == 0 || cols == 0 || ldx < cols, -EINVAL);
    double s = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *const xr = x + r * ldx, *const tr = t + r * cols;
        for (size_t c = 0; c < cols; c++) {
            const float v = xr[c];
            s += (double)(fmaxf(v, 0.0f) - v * tr[c] + log1pf(expf(-fabsf(v))));
        }
    }
    *loss = (float)(s / ((double)rows * (double)cols));
    return 0;
}

int kern_ref_bce_logits_bwd(struct kern_ctx *ctx, float *restrict dx, const float *restrict x,
                            const float *restrict t, size_t rows, size_t cols, size_t ldx,
                            float dloss, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dx || !x || !t || rows == 0 || cols == 0 || ldx < cols, -EINVAL);
    const float scale = (float)((double)dloss / ((double)rows * (double)cols));
    const int add = (accum & KERN_ACCUM_DX) != 0;
    for (size_t r = 0; r < rows; r++) {
        const float *const xr = x + r * ldx, *const tr = t + r * cols;
        float *const dr = dx + r * ldx;
        for (size_t c = 0; c < cols; c++) {
            const float g = (1.0f / (1.0f + expf(-xr[c])) - tr[c]) * scale;
            dr[c] = add ? dr[c] + g : g;
        }
    }
    return 0;
}

/* Everything the backward needs from one forward evaluation. */
struct ciou_terms {
    float b1x1, b1x2, b1y1, b1y2, b2x1, b2x2, b2y1, b2y2; /* corners */
    float iw_raw, ih_raw, iw, ih;                         /* overlap before / after clamp(0) */
    float inter, uni, iou;
    float cw, ch, c2;
    float ddx, ddy, rho2; /* ddx = sum of box2 x corners - sum of box1 x corners */
    float r1, r2, dd, v, alpha;
    float ciou;
};

static void ciou_eval(const float *restrict p, const float *restrict q, struct ciou_terms *s)
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
    s->v = (float)(4.0 / (M_PI * M_PI)) * (s->dd * s->dd);
    s->alpha = s->v / (s->v - s->iou + (1.0f + eps));
    s->ciou = s->iou - (s->rho2 / s->c2 + s->v * s->alpha);
}

int kern_ref_ciou_fwd(struct kern_ctx *ctx, float *restrict ciou, const float *restrict b1,
                      const float *restrict b2, size_t n)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!ciou || !b1 || !b2, -EINVAL);
    for (size_t i = 0; i < n; i++) {
        struct ciou_terms s;
        ciou_eval(b1 + 4 * i, b2 + 4 * i, &s);
        ciou[i] = s.ciou;
    }
    return 0;
}

/* Gradient of min(a, b) (lo = 1) or max(a, b) (lo = 0) to a and b, autograd's tie rule. */
static void minmax_grad(float a, float b, float g, int lo, float *ga, float *gb)
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

int kern_ref_ciou_bwd(struct kern_ctx *ctx, float *restrict db1, float *restrict db2,
                      const float *restrict dciou, const float *restrict b1,
                      const float *restrict b2, size_t n, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!db1 || !dciou || !b1 || !b2, -EINVAL);
    const int add = (accum & KERN_ACCUM_DX) != 0;
    const float kv = (float)(4.0 / (M_PI * M_PI));
    for (size_t i = 0; i < n; i++) {
        const float *const p = b1 + 4 * i, *const q = b2 + 4 * i;
        struct ciou_terms s;
        ciou_eval(p, q, &s);
        const float g = dciou[i];
        /* ciou = iou - rho2 / c2 - v alpha, alpha constant. */
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
        minmax_grad(s.b1x2, s.b2x2, g_iw, 1, &gc[1], &gc[5]);
        minmax_grad(s.b1x1, s.b2x1, -g_iw, 0, &gc[0], &gc[4]);
        minmax_grad(s.b1y2, s.b2y2, g_ih, 1, &gc[3], &gc[7]);
        minmax_grad(s.b1y1, s.b2y1, -g_ih, 0, &gc[2], &gc[6]);
        /* c2 = cw^2 + ch^2 + eps */
        const float g_cw = g_c2 * 2.0f * s.cw, g_ch = g_c2 * 2.0f * s.ch;
        minmax_grad(s.b1x2, s.b2x2, g_cw, 0, &gc[1], &gc[5]);
        minmax_grad(s.b1x1, s.b2x1, -g_cw, 1, &gc[0], &gc[4]);
        minmax_grad(s.b1y2, s.b2y2, g_ch, 0, &gc[3], &gc[7]);
        minmax_grad(s.b1y1, s.b2y1, -g_ch, 1, &gc[2], &gc[6]);
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
        const float g_dd = g_v * kv * 2.0f * s.dd;
        const float g_r1 = -g_dd / (1.0f + s.r1 * s.r1), g_r2 = g_dd / (1.0f + s.r2 * s.r2);
        gw1 += g_r1 / p[3];
        gh1 -= g_r1 * p[2] / (p[3] * p[3]);
        gw2 += g_r2 / q[3];
        gh2 -= g_r2 * q[2] / (q[3] * q[3]);
        /* corners = centre -+ size / 2 */
        const float o1[4] = { gc[0] + gc[1], gc[2] + gc[3], gw1 + (gc[1] - gc[0]) / 2.0f,
                              gh1 + (gc[3] - gc[2]) / 2.0f };
        float *const d1 = db1 + 4 * i;
        for (int k = 0; k < 4; k++)
            d1[k] = add ? d1[k] + o1[k] : o1[k];
        if (db2) {
            const float o2[4] = { gc[4] + gc[5], gc[6] + gc[7], gw2 + (gc[5] - gc[4]) / 2.0f,
                                  gh2 + (gc[7] - gc[6]) / 2.0f };
            float *const d2 = db2 + 4 * i;
            for (int k = 0; k < 4; k++)
                d2[k] = add ? d2[k] + o2[k] : o2[k];
        }
    }
    return 0;
}
