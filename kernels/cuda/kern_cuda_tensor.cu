/*
 * Concat along channels (channel-slice copies) and the residual add, CUDA.
 *
 * Concat (NCHW, float32, device memory): x (n, c_x, hw) <-> channels [c_off, c_off + c_x) of
 * y (n, c_y, hw); the forward writes only that slice of y, the backward reads only that slice
 * of dy. The trainer avoids most concat copies by letting producers write into y's slice
 * directly; these ops cover the rest. Add: y = a + b over a flat count; its backward hands dy
 * to an input.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX (overwritten dx is never read).
 */
#include "kern_cuda_internal.h"

static int concat_check(struct kern_ctx *ctx, const void *a, const void *b, int n, int c_x, int hw,
                        int c_y, int c_off)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!a || !b || n < 1 || c_x < 1 || hw < 1 || c_off < 0) return -EINVAL;
    if (c_y < 1 || c_off > c_y - c_x) return -EINVAL;
    return 0;
}

/* mode 0: fwd copy into the slice; 1: bwd copy out of it; 2: bwd add out of it. */
__global__ void concat_kernel(float *__restrict__ dst, const float *__restrict__ src, size_t total,
                              size_t slice, size_t ld, size_t off, int mode)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t i = e / slice, j = e - i * slice;
        const size_t big = i * ld + off + j; /* index in the (n, c_y, hw) tensor */
        if (mode == 0)
            dst[big] = src[e];
        else if (mode == 1)
            dst[e] = src[big];
        else
            dst[e] += src[big];
    }
}

int kern_cuda_concat_fwd(struct kern_ctx *ctx, float *__restrict__ y, const float *__restrict__ x,
                         int n, int c_x, int hw, int c_y, int c_off)
{
    const int rc = concat_check(ctx, y, x, n, c_x, hw, c_y, c_off);
    if (rc < 0) return rc;
    const size_t slice = (size_t)c_x * hw, total = slice * (size_t)n;
    concat_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        y, x, total, slice, (size_t)c_y * hw, (size_t)c_off * hw, 0);
    return kern_cuda_launched(ctx, "concat_fwd");
}

int kern_cuda_concat_bwd(struct kern_ctx *ctx, float *__restrict__ dx, const float *__restrict__ dy,
                         int n, int c_x, int hw, int c_y, int c_off, unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = concat_check(ctx, dx, dy, n, c_x, hw, c_y, c_off);
    if (rc < 0) return rc;
    const size_t slice = (size_t)c_x * hw, total = slice * (size_t)n;
    concat_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        dx, dy, total, slice, (size_t)c_y * hw, (size_t)c_off * hw,
        (accum & KERN_ACCUM_DX) ? 2 : 1);
    return kern_cuda_launched(ctx, "concat_bwd");
}

/* y may equal a or b (in place), so no __restrict__ here. mode 0: y = a + b; 1: y = a; 2: +=. */
__global__ void add_kernel(float *y, const float *a, const float *b, size_t count, int mode)
{
    KERN_CUDA_LOOP(i, count)
    {
        if (mode == 0)
            y[i] = a[i] + b[i];
        else if (mode == 1)
            y[i] = a[i];
        else
            y[i] += a[i];
    }
}

int kern_cuda_add_fwd(struct kern_ctx *ctx, float *y, const float *a, const float *b, size_t count)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!y || !a || !b) return -EINVAL;
    if (count == 0) return 0;
    add_kernel<<<kern_cuda_blocks(count), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        y, a, b, count, 0);
    return kern_cuda_launched(ctx, "add_fwd");
}

int kern_cuda_add_bwd(struct kern_ctx *ctx, float *__restrict__ dx, const float *__restrict__ dy,
                      size_t count, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!dx || !dy) return -EINVAL;
    if (count == 0) return 0;
    add_kernel<<<kern_cuda_blocks(count), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        dx, dy, NULL, count, (accum & KERN_ACCUM_DX) ? 2 : 1);
    return kern_cuda_launched(ctx, "add_bwd");
}
