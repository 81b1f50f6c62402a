/*
 * The Detect head's reshape and inference decode, CUDA.
 *
 * Shapes (float32, device memory): raw, draw (bs, na*no, ny, nx) is a Detect 1x1 conv output
 * (NCHW, channel a*no + k); p, dp, out (bs, na, ny, nx, no) is PyTorch's
 * raw.view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2), contiguous; anchors (na, 2) in grid
 * units, device memory. Decode as kernels/ref/kern_detect.c (ultralytics Detect, eval).
 *
 * Gradients: the reshape backward overwrites draw unless accum has KERN_ACCUM_DX.
 * One thread per element of the (.., no)-last tensor: writes are coalesced, reads stride by
 * cells (no is 85 at most, so a tile transpose would buy little on these small heads).
 */
#include <math.h>

#include "kern_cuda_internal.h"

static int detect_check(struct kern_ctx *ctx, const struct kern_detect *d, const void *a,
                        const void *b)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!d || !a || !b) return -EINVAL;
    if (d->bs < 1 || d->na < 1 || d->no < 5 || d->ny < 1 || d->nx < 1) return -EINVAL;
    return 0;
}

/* mode 0: p = permute(raw); 1: draw = inverse(dp); 2: draw += inverse(dp). e indexes p. */
__global__ void detect_reshape_kernel(float *__restrict__ p, float *__restrict__ raw_out,
                                      const float *__restrict__ raw, const float *__restrict__ dp,
                                      size_t total, int no, size_t cells, int mode)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t blk = e / ((size_t)no * cells), r = e - blk * (size_t)no * cells;
        const size_t j = r / (size_t)no, k = r - j * (size_t)no;
        const size_t src = blk * (size_t)no * cells + k * cells + j;
        if (mode == 0)
            p[e] = raw[src];
        else if (mode == 1)
            raw_out[src] = dp[e];
        else
            raw_out[src] += dp[e];
    }
}

__global__ void detect_decode_kernel(float *__restrict__ out, const float *__restrict__ raw,
                                     const float *__restrict__ anchors, size_t total, int na,
                                     int no, int nx, size_t cells, float stride)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t blk = e / ((size_t)no * cells), r = e - blk * (size_t)no * cells;
        const size_t j = r / (size_t)no;
        const int k = (int)(r - j * (size_t)no);
        const int a = (int)(blk % (size_t)na);
        const float s =
            1.0f / (1.0f + expf(-raw[blk * (size_t)no * cells + (size_t)k * cells + j]));
        float v = s;
        if (k == 0) {
            v = (s * 2.0f + ((float)(j % (size_t)nx) - 0.5f)) * stride;
        } else if (k == 1) {
            v = (s * 2.0f + ((float)(j / (size_t)nx) - 0.5f)) * stride;
        } else if (k < 4) {
            const float t = s * 2.0f;
            v = t * t * (anchors[2 * a + (k - 2)] * stride);
        }
        out[e] = v;
    }
}

int kern_cuda_detect_reshape_fwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                 float *__restrict__ p, const float *__restrict__ raw)
{
    const int rc = detect_check(ctx, d, p, raw);
    if (rc < 0) return rc;
    const size_t cells = (size_t)d->ny * d->nx;
    const size_t total = (size_t)d->bs * d->na * (size_t)d->no * cells;
    detect_reshape_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                            kern_cuda_st(ctx)->stream>>>(p, NULL, raw, NULL, total, d->no, cells,
                                                         0);
    return kern_cuda_launched(ctx, "detect_reshape_fwd");
}

int kern_cuda_detect_reshape_bwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                 float *__restrict__ draw, const float *__restrict__ dp,
                                 unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = detect_check(ctx, d, draw, dp);
    if (rc < 0) return rc;
    const size_t cells = (size_t)d->ny * d->nx;
    const size_t total = (size_t)d->bs * d->na * (size_t)d->no * cells;
    detect_reshape_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                            kern_cuda_st(ctx)->stream>>>(NULL, draw, NULL, dp, total, d->no, cells,
                                                         (accum & KERN_ACCUM_DX) ? 2 : 1);
    return kern_cuda_launched(ctx, "detect_reshape_bwd");
}

int kern_cuda_detect_decode(struct kern_ctx *ctx, const struct kern_detect *d,
                            float *__restrict__ out, const float *__restrict__ raw,
                            const float *__restrict__ anchors)
{
    const int rc = detect_check(ctx, d, out, raw);
    if (rc < 0) return rc;
    if (!anchors || !(d->stride > 0.0f)) return -EINVAL;
    const size_t cells = (size_t)d->ny * d->nx;
    const size_t total = (size_t)d->bs * d->na * (size_t)d->no * cells;
    detect_decode_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                           kern_cuda_st(ctx)->stream>>>(out, raw, anchors, total, d->na, d->no,
                                                        d->nx, cells, d->stride);
    return kern_cuda_launched(ctx, "detect_decode");
}
