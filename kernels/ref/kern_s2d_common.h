/*
 * The index maps of the stem's space-to-depth (kern_tensor.h "The stem as space-to-depth"),
 * shared by the CPU reference (kern_s2d.c) and the CUDA twins (kern_cuda_s2d.cu): under nvcc
 * every function is also a __device__ one, so both backends compute the same indices and move
 * the same floats (bit-identical results; accumulation is one float add per element on both).
 * The descriptor is checked by the ops before any of these runs. Private to kernels/.
 */
#ifndef KERN_S2D_COMMON_H
#define KERN_S2D_COMMON_H

#include <errno.h>
#include <stddef.h>

#include "kern.h"

#ifdef __CUDACC__
#define KERN_S2D_FN static __host__ __device__ __forceinline__
#else
#define KERN_S2D_FN static inline
#endif

/* 0 when d describes a stem space-to-depth (kern_tensor.h), else -EINVAL. */
KERN_S2D_FN int kern_s2d_check(const struct kern_s2d *d)
{
    if (!d || d->n < 1 || d->c < 1 || d->h < 2 || d->w < 2 || d->h % 2 || d->w % 2) return -EINVAL;
    if (d->c_out < 4 * (long long)d->c ||
        (d->layout != KERN_LAYOUT_NCHW && d->layout != KERN_LAYOUT_NHWC))
        return -EINVAL;
    return 0;
}

/* Elements of x (and dx). */
KERN_S2D_FN size_t kern_s2d_count(const struct kern_s2d *d)
{
    return (size_t)d->n * d->c * d->h * d->w;
}

/* Elements of y (and dy). */
KERN_S2D_FN size_t kern_s2d_out_count(const struct kern_s2d *d)
{
    return (size_t)d->n * d->c_out * (d->h / 2) * (d->w / 2);
}

/* The element of x that y's element i (linear, in d->layout) copies, or -1 for a pad channel,
 * with x in x_layout (the fused cast reads float32 NCHW images for either y layout). */
KERN_S2D_FN ptrdiff_t kern_s2d_src_in(const struct kern_s2d *d, size_t i, int x_layout)
{
    const size_t ho = (size_t)d->h / 2, wo = (size_t)d->w / 2, co = (size_t)d->c_out;
    size_t b, ch, r, s;
    if (d->layout == KERN_LAYOUT_NHWC) {
        ch = i % co, s = i / co % wo, r = i / co / wo % ho, b = i / co / wo / ho;
    } else {
        s = i % wo, r = i / wo % ho, ch = i / wo / ho % co, b = i / wo / ho / co;
    }
    const size_t c = (size_t)d->c;
    if (ch >= 4 * c) return -1;
    const size_t q = ch / c, xc = ch % c; /* q = dy 2 + dx */
    const size_t xr = 2 * r + q / 2, xs = 2 * s + q % 2, h = (size_t)d->h, w = (size_t)d->w;
    return (ptrdiff_t)(x_layout == KERN_LAYOUT_NHWC ? ((b * h + xr) * w + xs) * c + xc
                                                    : ((b * c + xc) * h + xr) * w + xs);
}

/* The element of x that y's element i copies, both in d->layout, or -1 for a pad channel. */
KERN_S2D_FN ptrdiff_t kern_s2d_src(const struct kern_s2d *d, size_t i)
{
    return kern_s2d_src_in(d, i, d->layout);
}

/* The element of one image's y (h/2 x w/2, c_out channels, in layout) that its pixel (xr, xs)'s
 * channel xc (of c) goes to: also where the GPU augmentation writes a pixel of its
 * space-to-depth batch (kern_augment.h KERN_AUG_BF16_S2D_*). */
KERN_S2D_FN size_t kern_s2d_px(int layout, size_t h, size_t w, size_t c, size_t c_out, size_t xr,
                               size_t xs, size_t xc)
{
    const size_t ch = (2 * (xr % 2) + xs % 2) * c + xc, r = xr / 2, s = xs / 2;
    const size_t ho = h / 2, wo = w / 2;
    return layout == KERN_LAYOUT_NHWC ? (r * wo + s) * c_out + ch : (ch * ho + r) * wo + s;
}

/* The element of y that x's element i (linear, in d->layout) went to. */
KERN_S2D_FN size_t kern_s2d_dst(const struct kern_s2d *d, size_t i)
{
    const size_t h = (size_t)d->h, w = (size_t)d->w, c = (size_t)d->c;
    size_t b, xc, xr, xs;
    if (d->layout == KERN_LAYOUT_NHWC) {
        xc = i % c, xs = i / c % w, xr = i / c / w % h, b = i / c / w / h;
    } else {
        xs = i % w, xr = i / w % h, xc = i / w / h % c, b = i / w / h / c;
    }
    const size_t co = (size_t)d->c_out;
    return b * co * (h / 2) * (w / 2) + kern_s2d_px(d->layout, h, w, c, co, xr, xs, xc);
}

/* The element of w6 (k_out, c, 6, 6) that w3's element i ((k_out, c_out, 3, 3)) copies, or -1
 * for a pad channel. */
KERN_S2D_FN ptrdiff_t kern_s2d_w_src(const struct kern_s2d *d, size_t i)
{
    const size_t j = i % 3, ii = i / 3 % 3, ch = i / 9 % (size_t)d->c_out,
                 o = i / 9 / (size_t)d->c_out, c = (size_t)d->c;
    if (ch >= 4 * c) return -1;
    const size_t q = ch / c, xc = ch % c;
    return (ptrdiff_t)(((o * c + xc) * 6 + 2 * ii + q / 2) * 6 + 2 * j + q % 2);
}

/* The element of w3 that w6's element i went to. */
KERN_S2D_FN size_t kern_s2d_w_dst(const struct kern_s2d *d, size_t i)
{
    const size_t kw = i % 6, kh = i / 6 % 6, xc = i / 36 % (size_t)d->c, o = i / 36 / (size_t)d->c;
    const size_t ch = (2 * (kh % 2) + kw % 2) * (size_t)d->c + xc;
    return ((o * (size_t)d->c_out + ch) * 3 + kh / 2) * 3 + kw / 2;
}

#endif
