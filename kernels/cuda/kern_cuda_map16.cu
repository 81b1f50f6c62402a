/*
 * Max pool, nearest upsample and the concat's copies on 16-bit activations, NCHW or NHWC, CUDA.
 * Contracts in kern_tensor.h, "Max pool and nearest upsample on 16-bit activations"; each element
 * runs kern_map16_common.h's lines, as the CPU reference does, so the bits are the same. One thread
 * per output element (backward: per input element, a gather), the channel fastest so that NHWC
 * accesses coalesce.
 */
#include "kern_cuda_internal.h"
#include "kern_map16_common.h"

struct map16_geo {
    int n, c, h, w, k, layout;
    size_t x_ld, y_ld;
};

/* A plane's (0, 0) element and its row and column steps in a map of h x w with stride ld. */
static __device__ __forceinline__ void map16_plane(const map16_geo &g, size_t ld, int h, int w,
                                                   size_t i, size_t ch, size_t *base, size_t *sy,
                                                   size_t *sx)
{
    *base = kern_map16_at(g.layout, g.c, h, w, ld, i, ch, 0, 0);
    *sx = g.layout == 1 ? (ld ? ld : (size_t)g.c) : 1;
    *sy = *sx * (size_t)w;
}

/* kind: 0 pool fwd, 1 pool bwd, 2 upsample fwd, 3 upsample bwd, 4 copy; t runs over the elements of
 * the map the kind writes (the output, or for a backward the input), channel fastest. */
static __global__ void map16_kernel(map16_geo g, int kind, uint16_t *__restrict__ out,
                                    uint8_t *__restrict__ idx_out, const uint16_t *__restrict__ in,
                                    const uint8_t *__restrict__ idx, int add)
{
    const bool up = kind == 2 || kind == 3;
    const int oh = up ? 2 * g.h : g.h, ow = up ? 2 * g.w : g.w;
    const int th = kind == 2 ? oh : g.h, tw = kind == 2 ? ow : g.w; /* the map t runs over */
    const size_t total = (size_t)g.n * (size_t)g.c * (size_t)th * (size_t)tw;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t ch = t % (size_t)g.c, pix = t / (size_t)g.c;
        const size_t i = pix / ((size_t)th * (size_t)tw), r = pix % ((size_t)th * (size_t)tw);
        const int py = (int)(r / (size_t)tw), px = (int)(r % (size_t)tw);
        size_t xb, xsy, xsx, yb, ysy, ysx, ib, isy, isx;
        map16_plane(g, g.x_ld, g.h, g.w, i, ch, &xb, &xsy, &xsx);
        map16_plane(g, g.y_ld, oh, ow, i, ch, &yb, &ysy, &ysx);
        map16_plane(g, 0, g.h, g.w, i, ch, &ib, &isy, &isx);
        if (kind == 0) {
            uint16_t *const y = out + yb + (size_t)py * ysy + (size_t)px * ysx;
            idx_out[ib + (size_t)py * isy + (size_t)px * isx] =
                (uint8_t)kern_map16_pool_px(in + xb, xsy, xsx, g.h, g.w, g.k, py, px, y);
        } else if (kind == 1) {
            uint16_t *const dx = out + xb + (size_t)py * xsy + (size_t)px * xsx;
            *dx = kern_map16_pool_dx(in + yb, ysy, ysx, idx + ib, isy, isx, g.h, g.w, g.k, py, px,
                                     add, add ? *dx : (uint16_t)0);
        } else if (kind == 2) {
            out[yb + (size_t)py * ysy + (size_t)px * ysx] =
                in[xb + (size_t)(py / 2) * xsy + (size_t)(px / 2) * xsx];
        } else if (kind == 4) {
            uint16_t *const y = out + yb + (size_t)py * ysy + (size_t)px * ysx;
            *y = kern_map16_copy(in[xb + (size_t)py * xsy + (size_t)px * xsx], add,
                                 add ? *y : (uint16_t)0);
        } else {
            uint16_t *const dx = out + xb + (size_t)py * xsy + (size_t)px * xsx;
            *dx = kern_map16_up_dx(in + yb, ysy, ysx, py, px, add, add ? *dx : (uint16_t)0);
        }
    }
}

static int map16_run(struct kern_ctx *ctx, const struct kern_map16 *d, int kind, uint16_t *out,
                     uint8_t *idx_out, const uint16_t *in, const uint8_t *idx, unsigned accum,
                     bool args_ok)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!d || !args_ok) return -EINVAL;
    if (kern_map16_check(d->n, d->c, d->h, d->w, kind == 4 ? 1 : d->k, d->layout, d->dtype, d->x_ld,
                         d->y_ld, kind < 2 || kind == 4) < 0)
        return -EINVAL;
    const map16_geo g = { d->n, d->c, d->h, d->w, d->k, d->layout, d->x_ld, d->y_ld };
    const size_t total =
        (size_t)d->n * (size_t)d->c * (size_t)d->h * (size_t)d->w * (kind == 2 ? 4u : 1u);
    map16_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        g, kind, out, idx_out, in, idx, (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "map16");
}

int kern_cuda_maxpool16_fwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *y,
                            uint8_t *idx, const uint16_t *x)
{
    return map16_run(ctx, d, 0, y, idx, x, NULL, 0, y && idx && x);
}

int kern_cuda_maxpool16_bwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *dx,
                            const uint16_t *dy, const uint8_t *idx, unsigned accum)
{
    return map16_run(ctx, d, 1, dx, NULL, dy, idx, accum, dx && dy && idx);
}

int kern_cuda_upsample16_fwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *y,
                             const uint16_t *x)
{
    return map16_run(ctx, d, 2, y, NULL, x, NULL, 0, y && x);
}

int kern_cuda_upsample16_bwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *dx,
                             const uint16_t *dy, unsigned accum)
{
    return map16_run(ctx, d, 3, dx, NULL, dy, NULL, accum, dx && dy);
}

int kern_cuda_copy16(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *y,
                     const uint16_t *x, unsigned accum)
{
    return map16_run(ctx, d, 4, y, NULL, x, NULL, accum, y && x);
}
