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

#include "kern_ciou_common.h"
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

int kern_ref_ciou_fwd(struct kern_ctx *ctx, float *restrict ciou, const float *restrict b1,
                      const float *restrict b2, size_t n)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!ciou || !b1 || !b2, -EINVAL);
    for (size_t i = 0; i < n; i++) {
        struct kern_ciou_terms s;
        kern_ciou_eval(b1 + 4 * i, b2 + 4 * i, &s);
        ciou[i] = s.ciou;
    }
    return 0;
}

int kern_ref_ciou_bwd(struct kern_ctx *ctx, float *restrict db1, float *restrict db2,
                      const float *restrict dciou, const float *restrict b1,
                      const float *restrict b2, size_t n, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!db1 || !dciou || !b1 || !b2, -EINVAL);
    const int add = (accum & KERN_ACCUM_DX) != 0;
    for (size_t i = 0; i < n; i++) {
        float o1[4], o2[4];
        kern_ciou_grad(b1 + 4 * i, b2 + 4 * i, dciou[i], o1, db2 ? o2 : NULL);
        float *const d1 = db1 + 4 * i;
        for (int k = 0; k < 4; k++)
            d1[k] = add ? d1[k] + o1[k] : o1[k];
        if (db2) {
            float *const d2 = db2 + 4 * i;
            for (int k = 0; k < 4; k++)
                d2[k] = add ? d2[k] + o2[k] : o2[k];
        }
    }
    return 0;
}
