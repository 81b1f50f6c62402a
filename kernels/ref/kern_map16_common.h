/*
 * Each element's steps of the 16-bit max pool and upsample (kern_tensor.h "Max pool and nearest
 * upsample on 16-bit activations"), written once for the CPU reference (kern_map16.c) and the
 * CUDA twins (kern_cuda_map16.cu): under nvcc every function is also a __device__ one. The only
 * arithmetic is float sums, one operation per add, so both backends round alike; the pool's
 * backward is a gather in one order, not a scatter. Private to kernels/.
 */
#ifndef KERN_MAP16_COMMON_H
#define KERN_MAP16_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "kern_bnx_common.h"
#include "kern_lowp_common.h"

/* Element (image i, channel ch, row y, column x) of a map of h x w pixels with stride ld. */
KERN_BNX_FN size_t kern_map16_at(int layout, int c, int h, int w, size_t ld, size_t i, size_t ch,
                                 int y, int x)
{
    return kern_bnx_at(layout, c, h * w, ld, i, ch, (size_t)y * (size_t)w + (size_t)x);
}

KERN_BNX_FN int kern_map16_check(int n, int c, int h, int w, int k, int layout, int dtype,
                                 size_t x_ld, size_t y_ld, int pool)
{
    if (n < 1 || c < 1 || h < 1 || w < 1 || (layout != 0 && layout != 1) || dtype != 1)
        return -EINVAL;
    if (pool && (k < 1 || k > 15 || !(k & 1))) return -EINVAL;
    const size_t in = layout == 1 ? (size_t)c : (size_t)c * (size_t)h * (size_t)w;
    const size_t out = pool || layout == 1 ? in : 4 * in;
    if ((x_ld && x_ld < in) || (y_ld && y_ld < out)) return -EINVAL;
    return 0;
}

/* The window of output (oy, ox): its winner's bits into *y, its offset (kh k + kw) returned. x:
 * the channel's element at (0, 0) of image i; dy, dx the element steps of a row and a column. */
KERN_BNX_FN int kern_map16_pool_px(const uint16_t *x, size_t sy, size_t sx, int h, int w, int k,
                                   int oy, int ox, uint16_t *y)
{
    const int p = k / 2;
    int best = -1;
    float m = 0.0f;
    uint16_t bits = 0;
    for (int kh = 0; kh < k; kh++) {
        const int iy = oy - p + kh;
        if (iy < 0 || iy >= h) continue;
        for (int kw = 0; kw < k; kw++) {
            const int ix = ox - p + kw;
            if (ix < 0 || ix >= w) continue;
            const uint16_t b = x[(size_t)iy * sy + (size_t)ix * sx];
            const float v = kern_bf16_to_f32(b);
            if (best < 0 || v > m || v != v) { /* v != v: NaN wins, as PyTorch's CPU pool */
                best = kh * k + kw, m = v, bits = b;
            }
        }
    }
    *y = bits;
    return best;
}

/* dx at input (iy, ix): the dy of every output whose window chose it, in row-major output order,
 * plus the old dx with add; rounded once. dy, idx: the channel's (0, 0) output elements and
 * their steps (idx dense: sy_i, sx_i). */
KERN_BNX_FN uint16_t kern_map16_pool_dx(const uint16_t *dy, size_t sy, size_t sx,
                                        const uint8_t *idx, size_t iy_s, size_t ix_s, int h, int w,
                                        int k, int iy, int ix, int add, uint16_t old)
{
    const int p = k / 2;
    float s = 0.0f;
    for (int oy = iy - p; oy <= iy + p; oy++) {
        if (oy < 0 || oy >= h) continue;
        for (int ox = ix - p; ox <= ix + p; ox++) {
            if (ox < 0 || ox >= w) continue;
            const int off = (iy - oy + p) * k + (ix - ox + p);
            if (idx[(size_t)oy * iy_s + (size_t)ox * ix_s] == off)
                s = BNX_FADD(s, kern_bf16_to_f32(dy[(size_t)oy * sy + (size_t)ox * sx]));
        }
    }
    if (add) s = BNX_FADD(kern_bf16_to_f32(old), s);
    return kern_bf16_from_f32(s);
}

/* dx at input (iy, ix) of the upsample: dy's 2 x 2 block, row-major, plus the old dx with add. */
KERN_BNX_FN uint16_t kern_map16_up_dx(const uint16_t *dy, size_t sy, size_t sx, int iy, int ix,
                                      int add, uint16_t old)
{
    const size_t y0 = 2 * (size_t)iy, x0 = 2 * (size_t)ix;
    float s = kern_bf16_to_f32(dy[y0 * sy + x0 * sx]);
    s = BNX_FADD(s, kern_bf16_to_f32(dy[y0 * sy + (x0 + 1) * sx]));
    s = BNX_FADD(s, kern_bf16_to_f32(dy[(y0 + 1) * sy + x0 * sx]));
    s = BNX_FADD(s, kern_bf16_to_f32(dy[(y0 + 1) * sy + (x0 + 1) * sx]));
    if (add) s = BNX_FADD(kern_bf16_to_f32(old), s);
    return kern_bf16_from_f32(s);
}

/* copy16's element: x's bits, or with add r(old + x). */
KERN_BNX_FN uint16_t kern_map16_copy(uint16_t x, int add, uint16_t old)
{
    if (!add) return x;
    return kern_bf16_from_f32(BNX_FADD(kern_bf16_to_f32(old), kern_bf16_to_f32(x)));
}

#endif
