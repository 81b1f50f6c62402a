/*
 * Loss ops, CUDA: BCE-with-logits (mean) and CIoU of box pairs.
 *
 * BCE (float32, device memory): logits x as a rows x cols block with row stride ldx (element
 * (r, c) at x[r ldx + c]), targets t dense (rows, cols); dx has x's layout and only the block
 * is written. *loss and dloss are host floats. The forward sums per element terms (computed in
 * float as the reference) in double: per-block partials into the context scratch, then one
 * block adds them in a fixed order (deterministic), and the result comes back through a pinned
 * float, so kern_cuda_bce_logits_fwd waits for its stream. A device-resident loss (no host
 * round trip, graph-capturable) belongs to the fused loss kernel of the training step.
 * CIoU: b1, b2, db1, db2 (n, 4) as (x, y, w, h); ciou, dciou (n). Formulas, order of float
 * operations, tie and clamp rules as kernels/ref/kern_loss.c, one thread per box pair.
 *
 * Gradients: dx, db1, db2 overwrite unless accum has KERN_ACCUM_DX (overwritten buffers are
 * never read).
 */
#include <math.h>

#include "kern_cuda_internal.h"

#define BCE_MAX_BLOCKS 1024

__global__ void bce_partial(double *__restrict__ part, const float *__restrict__ x,
                            const float *__restrict__ t, size_t rows, size_t cols, size_t ldx)
{
    const size_t count = rows * cols;
    double s = 0.0, unused = 0.0;
    KERN_CUDA_LOOP(e, count)
    {
        const size_t r = e / cols, c = e - r * cols;
        const float v = x[r * ldx + c];
        s += (double)(fmaxf(v, 0.0f) - v * t[e] + log1pf(expf(-fabsf(v))));
    }
    kern_cuda_block_sum2(s, unused);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void bce_final(float *__restrict__ loss, const double *__restrict__ part, int nparts,
                          double count)
{
    double s = 0.0, unused = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        s += part[i];
    kern_cuda_block_sum2(s, unused);
    if (threadIdx.x == 0) *loss = (float)(s / count);
}

int kern_cuda_bce_logits_fwd(struct kern_ctx *ctx, float *loss, const float *__restrict__ x,
                             const float *__restrict__ t, size_t rows, size_t cols, size_t ldx)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!loss || !x || !t || rows == 0 || cols == 0 || ldx < cols) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    double *const part = (double *)st->scratch;
    float *const dloss = (float *)((char *)st->scratch + KERN_CUDA_SCRATCH_BYTES / 2);
    unsigned nb = kern_cuda_blocks(rows * cols);
    nb = nb > BCE_MAX_BLOCKS ? BCE_MAX_BLOCKS : nb;
    bce_partial<<<nb, KERN_CUDA_THREADS, 0, st->stream>>>(part, x, t, rows, cols, ldx);
    bce_final<<<1, KERN_CUDA_THREADS, 0, st->stream>>>(dloss, part, (int)nb,
                                                       (double)rows * (double)cols);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(st->host_loss, dloss, sizeof(float), cudaMemcpyDeviceToHost,
                            st->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream);
    if (e != cudaSuccess) return kern_cuda_fail(ctx, e, "bce_logits_fwd");
    *loss = *st->host_loss;
    return 0;
}

__global__ void bce_bwd_kernel(float *__restrict__ dx, const float *__restrict__ x,
                               const float *__restrict__ t, size_t rows, size_t cols, size_t ldx,
                               float scale, int add)
{
    const size_t count = rows * cols;
    KERN_CUDA_LOOP(e, count)
    {
        const size_t r = e / cols, c = e - r * cols, at = r * ldx + c;
        const float g = (1.0f / (1.0f + expf(-x[at])) - t[e]) * scale;
        dx[at] = add ? dx[at] + g : g;
    }
}

int kern_cuda_bce_logits_bwd(struct kern_ctx *ctx, float *__restrict__ dx,
                             const float *__restrict__ x, const float *__restrict__ t, size_t rows,
                             size_t cols, size_t ldx, float dloss, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!dx || !x || !t || rows == 0 || cols == 0 || ldx < cols) return -EINVAL;
    const float scale = (float)((double)dloss / ((double)rows * (double)cols));
    bce_bwd_kernel<<<kern_cuda_blocks(rows * cols), KERN_CUDA_THREADS, 0,
                     kern_cuda_st(ctx)->stream>>>(dx, x, t, rows, cols, ldx, scale,
                                                  (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "bce_logits_bwd");
}

/* Everything the backward needs from one forward evaluation (as the reference's). */
struct ciou_terms {
    float b1x1, b1x2, b1y1, b1y2, b2x1, b2x2, b2y1, b2y2;
    float iw_raw, ih_raw, iw, ih;
    float inter, uni, iou;
    float cw, ch, c2;
    float ddx, ddy, rho2;
    float r1, r2, dd, v, alpha;
    float ciou;
};

#define CIOU_KV ((float)(4.0 / (M_PI * M_PI)))

__device__ void ciou_eval(const float *__restrict__ p, const float *__restrict__ q, ciou_terms *s)
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
    s->v = CIOU_KV * (s->dd * s->dd);
    s->alpha = s->v / (s->v - s->iou + (1.0f + eps));
    s->ciou = s->iou - (s->rho2 / s->c2 + s->v * s->alpha);
}

__device__ __forceinline__ void minmax_grad(float a, float b, float g, int lo, float *ga, float *gb)
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

__global__ void ciou_fwd_kernel(float *__restrict__ ciou, const float *__restrict__ b1,
                                const float *__restrict__ b2, size_t n)
{
    KERN_CUDA_LOOP(i, n)
    {
        ciou_terms s;
        ciou_eval(b1 + 4 * i, b2 + 4 * i, &s);
        ciou[i] = s.ciou;
    }
}

__global__ void ciou_bwd_kernel(float *__restrict__ db1, float *__restrict__ db2,
                                const float *__restrict__ dciou, const float *__restrict__ b1,
                                const float *__restrict__ b2, size_t n, int add)
{
    KERN_CUDA_LOOP(i, n)
    {
        const float *const p = b1 + 4 * i, *const q = b2 + 4 * i;
        ciou_terms s;
        ciou_eval(p, q, &s);
        const float g = dciou[i];
        const float g_iou = g, g_rho2 = -g / s.c2, g_c2 = g * s.rho2 / (s.c2 * s.c2);
        const float g_v = -g * s.alpha;
        float gc[8] = { 0 };
        float gw1 = 0.0f, gh1 = 0.0f, gw2 = 0.0f, gh2 = 0.0f;
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
        const float g_cw = g_c2 * 2.0f * s.cw, g_ch = g_c2 * 2.0f * s.ch;
        minmax_grad(s.b1x2, s.b2x2, g_cw, 0, &gc[1], &gc[5]);
        minmax_grad(s.b1x1, s.b2x1, -g_cw, 1, &gc[0], &gc[4]);
        minmax_grad(s.b1y2, s.b2y2, g_ch, 0, &gc[3], &gc[7]);
        minmax_grad(s.b1y1, s.b2y1, -g_ch, 1, &gc[2], &gc[6]);
        const float g_ddx = g_rho2 * s.ddx / 2.0f, g_ddy = g_rho2 * s.ddy / 2.0f;
        gc[4] += g_ddx;
        gc[5] += g_ddx;
        gc[0] -= g_ddx;
        gc[1] -= g_ddx;
        gc[6] += g_ddy;
        gc[7] += g_ddy;
        gc[2] -= g_ddy;
        gc[3] -= g_ddy;
        const float g_dd = g_v * CIOU_KV * 2.0f * s.dd;
        const float g_r1 = -g_dd / (1.0f + s.r1 * s.r1), g_r2 = g_dd / (1.0f + s.r2 * s.r2);
        gw1 += g_r1 / p[3];
        gh1 -= g_r1 * p[2] / (p[3] * p[3]);
        gw2 += g_r2 / q[3];
        gh2 -= g_r2 * q[2] / (q[3] * q[3]);
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
}

int kern_cuda_ciou_fwd(struct kern_ctx *ctx, float *__restrict__ ciou, const float *__restrict__ b1,
                       const float *__restrict__ b2, size_t n)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!ciou || !b1 || !b2) return -EINVAL;
    if (n == 0) return 0;
    ciou_fwd_kernel<<<kern_cuda_blocks(n), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        ciou, b1, b2, n);
    return kern_cuda_launched(ctx, "ciou_fwd");
}

int kern_cuda_ciou_bwd(struct kern_ctx *ctx, float *__restrict__ db1, float *__restrict__ db2,
                       const float *__restrict__ dciou, const float *__restrict__ b1,
                       const float *__restrict__ b2, size_t n, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!db1 || !dciou || !b1 || !b2) return -EINVAL;
    if (n == 0) return 0;
    ciou_bwd_kernel<<<kern_cuda_blocks(n), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        db1, db2, dciou, b1, b2, n, (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "ciou_bwd");
}
