/*
 * The stem as space-to-depth on the GPU: the twins of kernels/ref/kern_s2d.c, with the same index
 * maps (kern_s2d_common.h), so the same floats land in the same places (bit-identical; the
 * accumulating forms add one float each, as the reference). Shapes, layouts and accumulation as
 * kern_tensor.h "The stem as space-to-depth": the forward ops overwrite every element;
 * s2d_bwd's dx (=|+=) by KERN_ACCUM_DX, s2d_weight_bwd's dw6 by KERN_ACCUM_DPARAM.
 * cast_f32_lowp_s2d rounds with kern_lowp_common.h's integer lines, the reference's own.
 */
#include <stdint.h>

#include "kern_cuda_internal.h"
#include "kern_lowp_common.h"
#include "kern_s2d_common.h"

/* mode 0: y[i] = x[src(i)] or 0 (data); 1: the weights' map. */
__global__ static void s2d_gather_kernel(float *__restrict__ y, const float *__restrict__ x,
                                         size_t count, struct kern_s2d d, int weights)
{
    KERN_CUDA_LOOP(i, count)
    {
        const ptrdiff_t s = weights ? kern_s2d_w_src(&d, i) : kern_s2d_src(&d, i);
        y[i] = s < 0 ? 0.0f : x[s];
    }
}

__global__ static void s2d_scatter_kernel(float *__restrict__ dx, const float *__restrict__ dy,
                                          size_t count, struct kern_s2d d, int weights, int add)
{
    KERN_CUDA_LOOP(i, count)
    {
        const float g = dy[weights ? kern_s2d_w_dst(&d, i) : kern_s2d_dst(&d, i)];
        dx[i] = add ? dx[i] + g : g;
    }
}

int kern_cuda_s2d_fwd(struct kern_ctx *ctx, const struct kern_s2d *d, float *__restrict__ y,
                      const float *__restrict__ x)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (kern_s2d_check(d) < 0 || !y || !x) return -EINVAL;
    const size_t ny = kern_s2d_out_count(d);
    s2d_gather_kernel<<<kern_cuda_blocks(ny), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        y, x, ny, *d, 0);
    return kern_cuda_launched(ctx, "s2d_fwd");
}

int kern_cuda_s2d_bwd(struct kern_ctx *ctx, const struct kern_s2d *d, float *__restrict__ dx,
                      const float *__restrict__ dy, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (kern_s2d_check(d) < 0 || !dx || !dy) return -EINVAL;
    const size_t nx = kern_s2d_count(d);
    s2d_scatter_kernel<<<kern_cuda_blocks(nx), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        dx, dy, nx, *d, 0, (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "s2d_bwd");
}

int kern_cuda_s2d_weight_fwd(struct kern_ctx *ctx, const struct kern_s2d *d, int k_out,
                             float *__restrict__ w3, const float *__restrict__ w6)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (kern_s2d_check(d) < 0 || k_out < 1 || !w3 || !w6) return -EINVAL;
    const size_t n3 = (size_t)k_out * d->c_out * 9;
    s2d_gather_kernel<<<kern_cuda_blocks(n3), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        w3, w6, n3, *d, 1);
    return kern_cuda_launched(ctx, "s2d_weight_fwd");
}

int kern_cuda_s2d_weight_bwd(struct kern_ctx *ctx, const struct kern_s2d *d, int k_out,
                             float *__restrict__ dw6, const float *__restrict__ dw3, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (kern_s2d_check(d) < 0 || k_out < 1 || !dw6 || !dw3) return -EINVAL;
    const size_t n6 = (size_t)k_out * d->c * 36;
    s2d_scatter_kernel<<<kern_cuda_blocks(n6), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        dw6, dw3, n6, *d, 1, (accum & KERN_ACCUM_DPARAM) != 0);
    return kern_cuda_launched(ctx, "s2d_weight_bwd");
}

/* One thread per element of dst (d's layout): coalesced 16-bit writes; the NCHW reads of one
 * warp hit 2 rows of a few planes. */
__global__ static void cast_s2d_kernel(uint16_t *__restrict__ y, const float *__restrict__ x,
                                       size_t count, struct kern_s2d d, int bf16)
{
    KERN_CUDA_LOOP(i, count)
    {
        const ptrdiff_t s = kern_s2d_src_in(&d, i, KERN_LAYOUT_NCHW);
        const float v = s < 0 ? 0.0f : x[s];
        y[i] = bf16 ? kern_bf16_from_f32(v) : kern_f16_from_f32(v);
    }
}

int kern_cuda_cast_f32_lowp_s2d(struct kern_ctx *ctx, const struct kern_s2d *d, int dtype,
                                uint16_t *__restrict__ dst, const float *__restrict__ src)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (kern_s2d_check(d) < 0 || !dst || !src) return -EINVAL;
    if (dtype != KERN_DT_BF16 && dtype != KERN_DT_F16) return -EINVAL;
    const size_t ny = kern_s2d_out_count(d);
    cast_s2d_kernel<<<kern_cuda_blocks(ny), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        dst, src, ny, *d, dtype == KERN_DT_BF16);
    return kern_cuda_launched(ctx, "cast_f32_lowp_s2d");
}
