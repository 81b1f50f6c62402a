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

#include "kern_ciou_common.h"
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

__global__ void ciou_fwd_kernel(float *__restrict__ ciou, const float *__restrict__ b1,
                                const float *__restrict__ b2, size_t n)
{
    KERN_CUDA_LOOP(i, n)
    {
        kern_ciou_terms s;
        kern_ciou_eval(b1 + 4 * i, b2 + 4 * i, &s);
        ciou[i] = s.ciou;
    }
}

__global__ void ciou_bwd_kernel(float *__restrict__ db1, float *__restrict__ db2,
                                const float *__restrict__ dciou, const float *__restrict__ b1,
                                const float *__restrict__ b2, size_t n, int add)
{
    KERN_CUDA_LOOP(i, n)
    {
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
