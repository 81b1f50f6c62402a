/*
 * Max pool 2d and nearest x2 upsample, CUDA.
 *
 * Max pool (NCHW, float32, device memory): x (n, c, h_in, w_in) -> y, idx (n, c, h_out, w_out),
 * h_out = (h_in + 2 pad - k) / stride + 1; idx is the argmax as ih * w_in + iw within its plane
 * (int32). Window scanned row-major, replaced only by a greater value or a NaN: the reference's
 * (and PyTorch's CPU) rule, so y and idx match it exactly.
 * Upsample: x (planes, h, w) -> y (planes, 2h, 2w), y[oy][ox] = x[oy / 2][ox / 2].
 * Channel slices: x/dx and y/dy may each step their own n-stride (kern_pool2d.x_nstride and
 * y_nstride; the _ns upsample ops), dense within an image: plane p = i c + ch starts at
 * i nstride + ch plane_size (plane_at). idx stays dense. Threads still index the dense
 * element e; only the addresses of the strided sides move.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX (overwritten dx is never read).
 * Both backwards loop over the INPUT (one thread per dx element gathers its dy terms) instead of
 * scattering with atomics: no atomics, no zeroing pass, deterministic, and the terms are added
 * in the reference's order (output scan order; 2x2 block row-major), so results are bitwise
 * equal to it. The max-pool gather visits the ceil(k / stride)^2 windows that can hold the
 * input (25 for SPPF's k5 s1 p2) and keeps the dy of those whose idx names it.
 */
#include <limits.h>
#include <math.h>

#include "kern_cuda_internal.h"

static int pool_out_hw(const struct kern_pool2d *d, int *h_out, int *w_out)
{
    if (!d || d->n < 1 || d->c < 1 || d->h_in < 1 || d->w_in < 1 || d->k < 1 || d->stride < 1)
        return -EINVAL;
    if (d->pad < 0 || d->pad > d->k / 2) return -EINVAL;
    if ((long long)d->h_in * d->w_in > INT_MAX) return -EINVAL;
    const int hp = d->h_in + 2 * d->pad, wp = d->w_in + 2 * d->pad;
    if (hp < d->k || wp < d->k) return -EINVAL;
    const int oh = (hp - d->k) / d->stride + 1, ow = (wp - d->k) / d->stride + 1;
    if (d->x_nstride && d->x_nstride < (size_t)d->c * d->h_in * d->w_in) return -EINVAL;
    if (d->y_nstride && d->y_nstride < (size_t)d->c * oh * ow) return -EINVAL;
    *h_out = oh;
    *w_out = ow;
    return 0;
}

struct pool_geom {
    int h_in, w_in, oh, ow, k, stride, pad;
    int c;             /* channels per image */
    size_t x_ns, y_ns; /* n-strides of the x and y sides (elements, never 0 here) */
};

static pool_geom pool_geom_of(const struct kern_pool2d *d, int oh, int ow)
{
    const size_t x_img = (size_t)d->c * d->h_in * d->w_in, y_img = (size_t)d->c * oh * ow;
    pool_geom g;
    g.h_in = d->h_in;
    g.w_in = d->w_in;
    g.oh = oh;
    g.ow = ow;
    g.k = d->k;
    g.stride = d->stride;
    g.pad = d->pad;
    g.c = d->c;
    g.x_ns = d->x_nstride ? d->x_nstride : x_img;
    g.y_ns = d->y_nstride ? d->y_nstride : y_img;
    return g;
}

/* Start of plane p (image p / c, channel p % c) with images ns apart and planes `plane` long. */
static __device__ __forceinline__ size_t plane_at(size_t p, int c, size_t ns, size_t plane)
{
    return p / (size_t)c * ns + p % (size_t)c * plane;
}

__global__ void maxpool_fwd_kernel(float *__restrict__ y, int32_t *__restrict__ idx,
                                   const float *__restrict__ x, size_t total, pool_geom g)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t plane = e / ((size_t)g.oh * g.ow);
        const int r = (int)(e - plane * (size_t)g.oh * g.ow);
        const int oy = r / g.ow, ox = r - oy * g.ow;
        int y0 = oy * g.stride - g.pad, y1 = y0 + g.k, x0 = ox * g.stride - g.pad, x1 = x0 + g.k;
        y0 = y0 < 0 ? 0 : y0;
        y1 = y1 > g.h_in ? g.h_in : y1;
        x0 = x0 < 0 ? 0 : x0;
        x1 = x1 > g.w_in ? g.w_in : x1;
        const float *const xp = x + plane_at(plane, g.c, g.x_ns, (size_t)g.h_in * g.w_in);
        int best = y0 * g.w_in + x0;
        float m = -INFINITY;
        for (int iy = y0; iy < y1; iy++)
            for (int ix = x0; ix < x1; ix++) {
                const int at = iy * g.w_in + ix;
                const float v = xp[at];
                if (v > m || isnan(v)) {
                    m = v;
                    best = at;
                }
            }
        y[plane_at(plane, g.c, g.y_ns, (size_t)g.oh * g.ow) + (size_t)r] = m;
        if (idx) idx[e] = best;
    }
}

__global__ void maxpool_bwd_kernel(float *__restrict__ dx, const float *__restrict__ dy,
                                   const int32_t *__restrict__ idx, size_t total, pool_geom g,
                                   int add)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t in_plane = (size_t)g.h_in * g.w_in, out_plane = (size_t)g.oh * g.ow;
        const size_t plane = e / in_plane;
        const int at = (int)(e - plane * in_plane);
        const int iy = at / g.w_in, ix = at - iy * g.w_in;
        /* windows oy with oy s - p <= iy < oy s - p + k */
        int oy0 = iy + g.pad - g.k + 1, ox0 = ix + g.pad - g.k + 1;
        oy0 = oy0 <= 0 ? 0 : (oy0 + g.stride - 1) / g.stride;
        ox0 = ox0 <= 0 ? 0 : (ox0 + g.stride - 1) / g.stride;
        int oy1 = (iy + g.pad) / g.stride, ox1 = (ix + g.pad) / g.stride;
        oy1 = oy1 >= g.oh ? g.oh - 1 : oy1;
        ox1 = ox1 >= g.ow ? g.ow - 1 : ox1;
        const float *const dyp = dy + plane_at(plane, g.c, g.y_ns, out_plane);
        const int32_t *const ip = idx + plane * out_plane;
        float *const dxe = dx + plane_at(plane, g.c, g.x_ns, in_plane) + (size_t)at;
        float s = add ? *dxe : 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                const int o = oy * g.ow + ox;
                if (ip[o] == at) s += dyp[o];
            }
        *dxe = s;
    }
}

int kern_cuda_maxpool2d_fwd(struct kern_ctx *ctx, const struct kern_pool2d *d,
                            float *__restrict__ y, int32_t *__restrict__ idx,
                            const float *__restrict__ x)
{
    int oh, ow;
    KERN_CHECK_CUDA_CTX(ctx);
    const int rc = pool_out_hw(d, &oh, &ow);
    if (rc < 0) return rc;
    if (!y || !x) return -EINVAL;
    const pool_geom g = pool_geom_of(d, oh, ow);
    const size_t total = (size_t)d->n * d->c * (size_t)oh * ow;
    maxpool_fwd_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                         kern_cuda_st(ctx)->stream>>>(y, idx, x, total, g);
    return kern_cuda_launched(ctx, "maxpool2d_fwd");
}

int kern_cuda_maxpool2d_bwd(struct kern_ctx *ctx, const struct kern_pool2d *d,
                            float *__restrict__ dx, const float *__restrict__ dy,
                            const int32_t *__restrict__ idx, unsigned accum)
{
    int oh, ow;
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    const int rc = pool_out_hw(d, &oh, &ow);
    if (rc < 0) return rc;
    if (!dx || !dy || !idx) return -EINVAL;
    const pool_geom g = pool_geom_of(d, oh, ow);
    const size_t total = (size_t)d->n * d->c * (size_t)d->h_in * d->w_in;
    maxpool_bwd_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                         kern_cuda_st(ctx)->stream>>>(dx, dy, idx, total, g,
                                                      (accum & KERN_ACCUM_DX) != 0);
    return kern_cuda_launched(ctx, "maxpool2d_bwd");
}

/* Also the n-strides: the x side's >= c h w, the y side's >= 4 c h w (0: dense). */
static int upsample_check(struct kern_ctx *ctx, const void *a, const void *b, int n, int c, int h,
                          int w, size_t x_ns, size_t y_ns)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!a || !b || n < 1 || c < 1 || h < 1 || w < 1) return -EINVAL;
    if ((long long)h * w * 4 > INT_MAX || (long long)n * c > INT_MAX) return -EINVAL;
    const size_t img = (size_t)c * (size_t)h * (size_t)w;
    if ((x_ns && x_ns < img) || (y_ns && y_ns < 4 * img)) return -EINVAL;
    return 0;
}

/* One thread per input pixel writes its 2x2 block (two float2 stores). */
__global__ void upsample_fwd_kernel(float *__restrict__ y, const float *__restrict__ x,
                                    size_t total, int h, int w, int c, size_t x_ns, size_t y_ns)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t plane = e / ((size_t)h * w);
        const int r = (int)(e - plane * (size_t)h * w);
        const int iy = r / w, ix = r - iy * w;
        const float v = x[plane_at(plane, c, x_ns, (size_t)h * w) + (size_t)r];
        float *const row =
            y + plane_at(plane, c, y_ns, 4 * (size_t)h * w) + (size_t)(2 * iy) * (2 * w) + 2 * ix;
        row[0] = v;
        row[1] = v;
        row[2 * w] = v;
        row[2 * w + 1] = v;
    }
}

__global__ void upsample_bwd_kernel(float *__restrict__ dx, const float *__restrict__ dy,
                                    size_t total, int h, int w, int add, int c, size_t x_ns,
                                    size_t y_ns)
{
    KERN_CUDA_LOOP(e, total)
    {
        const size_t plane = e / ((size_t)h * w);
        const int r = (int)(e - plane * (size_t)h * w);
        const int iy = r / w, ix = r - iy * w;
        const float *const r0 =
            dy + plane_at(plane, c, y_ns, 4 * (size_t)h * w) + (size_t)(2 * iy) * (2 * w) + 2 * ix;
        const float *const r1 = r0 + 2 * w;
        const float s = ((r0[0] + r0[1]) + r1[0]) + r1[1];
        float *const o = dx + plane_at(plane, c, x_ns, (size_t)h * w) + (size_t)r;
        *o = add ? *o + s : s;
    }
}

int kern_cuda_upsample2x_fwd(struct kern_ctx *ctx, float *__restrict__ y,
                             const float *__restrict__ x, int planes, int h, int w)
{
    return kern_cuda_upsample2x_ns_fwd(ctx, y, x, planes, 1, h, w, 0, 0);
}

int kern_cuda_upsample2x_bwd(struct kern_ctx *ctx, float *__restrict__ dx,
                             const float *__restrict__ dy, int planes, int h, int w, unsigned accum)
{
    return kern_cuda_upsample2x_ns_bwd(ctx, dx, dy, planes, 1, h, w, 0, 0, accum);
}

/* --- stride --- */
int kern_cuda_upsample2x_ns_fwd(struct kern_ctx *ctx, float *__restrict__ y,
                                const float *__restrict__ x, int n, int c, int h, int w,
                                size_t y_nstride, size_t x_nstride)
{
    const int rc = upsample_check(ctx, y, x, n, c, h, w, x_nstride, y_nstride);
    if (rc < 0) return rc;
    const size_t img = (size_t)c * h * w, total = (size_t)n * img;
    upsample_fwd_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                          kern_cuda_st(ctx)->stream>>>(
        y, x, total, h, w, c, x_nstride ? x_nstride : img, y_nstride ? y_nstride : 4 * img);
    return kern_cuda_launched(ctx, "upsample2x_fwd");
}

int kern_cuda_upsample2x_ns_bwd(struct kern_ctx *ctx, float *__restrict__ dx,
                                const float *__restrict__ dy, int n, int c, int h, int w,
                                size_t x_nstride, size_t y_nstride, unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = upsample_check(ctx, dx, dy, n, c, h, w, x_nstride, y_nstride);
    if (rc < 0) return rc;
    const size_t img = (size_t)c * h * w, total = (size_t)n * img;
    upsample_bwd_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0,
                          kern_cuda_st(ctx)->stream>>>(
        dx, dy, total, h, w, (accum & KERN_ACCUM_DX) != 0, c, x_nstride ? x_nstride : img,
        y_nstride ? y_nstride : 4 * img);
    return kern_cuda_launched(ctx, "upsample2x_bwd");
}
