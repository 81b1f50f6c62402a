/*
 * The augmentation pixel ops on CUDA (kern.h "Augmentation pixels"), twins of
 * kernels/ref/kern_augment.c that must give the same bytes.
 *
 * Shapes: images are uint8 RGB HWC (h rows of w * 3 bytes, device memory); the batch tensor is
 * (n, 3, s, s) NCHW, uint8 or float / 255, or its bf16 space-to-depth (kern_augment.h; the
 * element maps and the rounding are the reference's own lines, kern_s2d_common.h and
 * kern_lowp_common.h). Everything is overwritten (=); no gradients.
 *
 * Exactness: the reference's arithmetic is OpenCV's integer fixed point plus a few float and
 * double operations. Here every one of those is an explicit correctly rounded intrinsic
 * (__dmul_rn, __dadd_rn, __ddiv_rn, __fmul_rn, ...) in the reference's evaluation order, so
 * nvcc cannot contract them into FMAs and each result is the IEEE value the CPU computes;
 * conversions round as cvRound (nearest even; INT_MIN out of range) or truncate as C casts.
 * One thread computes one pixel (3 channels).
 *
 * The fused batch kernel takes its per-sample descriptors as kernel parameters (chunks of
 * AUG_CHUNK samples, about 21 KB: CUDA 12.1+ allows 32 KB on sm_70 and newer), so a launch needs
 * no host-to-device copy and can be captured in a CUDA graph. Per output pixel it computes the
 * warp's source position, reads the 4 taps straight from the pasted tile regions (114 elsewhere),
 * blends, mixes up, applies HSV and writes the flipped position of every channel plane.
 */
#include <limits.h>
#include <string.h>

#include "kern_cuda_internal.h"
#include "kern_lowp_common.h"
#include "kern_s2d_common.h"

#define INTER_BITS     5
#define INTER_TAB_SIZE (1 << INTER_BITS)
#define AB_SCALE       1024
#define MAX_SIDE       32767
#define HSV_SIMD_BLOCK 32
#define AUG_CHUNK      16 /* samples per fused launch (kernel parameter space) */

static bool bad_size(int w, int h)
{
    return w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE;
}

static bool lut_ok(const struct kern_aug_hsv_lut *lut)
{
    for (int i = 0; i < 180; i++)
        if (lut->h[i] >= 180) return false;
    return true;
}

/* ---- device arithmetic, as the reference ---------------------------------------------- */

static __device__ __forceinline__ int d_cv_round(double v)
{
    if (!(v > (double)INT_MIN - 0.5 && v < (double)INT_MAX + 0.5)) return INT_MIN;
    return __double2int_rn(v);
}

static __device__ __forceinline__ int d_sat_s16(int v)
{
    return v < -32768 ? -32768 : v > 32767 ? 32767 : v;
}

static __device__ __forceinline__ unsigned char d_trunc_u8(double v)
{
    return (unsigned char)(v <= 0 ? 0 : v >= 255 ? 255 : (int)v);
}

static __device__ __forceinline__ int d_affine_row(double m_y, double m_c, int y)
{
    return d_cv_round(__dmul_rn(__dadd_rn(__dmul_rn(m_y, (double)y), m_c), (double)AB_SCALE)) +
           AB_SCALE / INTER_TAB_SIZE / 2;
}

static __device__ __forceinline__ int d_affine_col(double m_x, int x)
{
    return d_cv_round(__dmul_rn(__dmul_rn(m_x, (double)x), (double)AB_SCALE));
}

static __device__ __forceinline__ int d_affine_sum(int r, int c)
{
    return (int)((unsigned)r + (unsigned)c) >> (10 - INTER_BITS);
}

static __host__ __device__ __forceinline__ int persp_block(int dst_w, int dst_h)
{
    const int bh0 = dst_h < 16 ? dst_h : 16;
    return 1024 / bh0 < dst_w ? 1024 / bh0 : dst_w;
}

/* Source position of output (x, y) in 1/32 px; M the inverse map (row-major, 9 doubles). */
static __device__ __forceinline__ void d_src_xy(const double *M, int perspective, int bw0, int x,
                                                int y, int *X, int *Y)
{
    if (!perspective) {
        *X = d_affine_sum(d_affine_row(M[1], M[2], y), d_affine_col(M[0], x));
        *Y = d_affine_sum(d_affine_row(M[4], M[5], y), d_affine_col(M[3], x));
        return;
    }
    const int x0 = x / bw0 * bw0, x1 = x - x0;
    const double dx0 = (double)x0, dy = (double)y, dx1 = (double)x1;
    const double X0 = __dadd_rn(__dadd_rn(__dmul_rn(M[0], dx0), __dmul_rn(M[1], dy)), M[2]);
    const double Y0 = __dadd_rn(__dadd_rn(__dmul_rn(M[3], dx0), __dmul_rn(M[4], dy)), M[5]);
    const double W0 = __dadd_rn(__dadd_rn(__dmul_rn(M[6], dx0), __dmul_rn(M[7], dy)), M[8]);
    double W = __dadd_rn(W0, __dmul_rn(M[6], dx1));
    W = W != 0 ? __ddiv_rn((double)INTER_TAB_SIZE, W) : 0;
    const double fX = fmax(
        (double)INT_MIN, fmin((double)INT_MAX, __dmul_rn(__dadd_rn(X0, __dmul_rn(M[0], dx1)), W)));
    const double fY = fmax(
        (double)INT_MIN, fmin((double)INT_MAX, __dmul_rn(__dadd_rn(Y0, __dmul_rn(M[3], dx1)), W)));
    *X = d_cv_round(fX);
    *Y = d_cv_round(fY);
}

static __device__ __forceinline__ unsigned char d_blend4(int a, int b, int c, int d, int fx, int fy)
{
    const int w0 = (INTER_TAB_SIZE - fy) * (INTER_TAB_SIZE - fx), w1 = (INTER_TAB_SIZE - fy) * fx;
    const int w2 = fy * (INTER_TAB_SIZE - fx), w3 = fy * fx;
    return (unsigned char)((a * w0 + b * w1 + c * w2 + d * w3 + 512) >> 10);
}

/* Canvas pixel (x, y): the last region holding it, KERN_AUG_FILL elsewhere (NULL). */
static __device__ __forceinline__ const uint8_t *d_canvas_px(const struct kern_aug_canvas &c, int x,
                                                             int y)
{
    if (x < 0 || y < 0 || x >= c.w || y >= c.h) return NULL;
    for (int i = c.n_paste - 1; i >= 0; i--) {
        const struct kern_aug_paste &p = c.paste[i];
        const int rx = x - p.dst_x, ry = y - p.dst_y;
        if (rx >= 0 && ry >= 0 && rx < p.w && ry < p.h)
            return p.src + ((size_t)(p.src_y + ry) * (size_t)p.src_w + (size_t)(p.src_x + rx)) * 3;
    }
    return NULL;
}

/* Bilinear value of the 4 taps at (X, Y) (1/32 px), taps given by a fetch functor. */
template <typename Fetch>
static __device__ __forceinline__ void d_bilinear(int X, int Y, Fetch fetch, uint8_t *d)
{
    const int sx = d_sat_s16(X >> INTER_BITS), sy = d_sat_s16(Y >> INTER_BITS);
    const int fx = X & (INTER_TAB_SIZE - 1), fy = Y & (INTER_TAB_SIZE - 1);
    uint8_t t[4][3];
    fetch(sx, sy, t[0]);
    fetch(sx + 1, sy, t[1]);
    fetch(sx, sy + 1, t[2]);
    fetch(sx + 1, sy + 1, t[3]);
    for (int k = 0; k < 3; k++)
        d[k] = d_blend4(t[0][k], t[1][k], t[2][k], t[3][k], fx, fy);
}

/* sdiv / hdiv of RGB -> HSV (hsv_shift 12), one entry per thread of the first 256. */
static __device__ __forceinline__ void d_hsv_tables(int *sdiv, int *hdiv)
{
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        sdiv[i] = i ? d_cv_round(__ddiv_rn((double)(255 << 12), (double)i)) : 0;
        hdiv[i] = i ? d_cv_round(__ddiv_rn((double)(180 << 12), __dmul_rn(6.0, (double)i))) : 0;
    }
    __syncthreads();
}

static __device__ __forceinline__ float d_fused_1_minus(float a, float b)
{
    return __double2float_rn(__dsub_rn(1.0, __dmul_rn((double)a, (double)b)));
}

/* OpenCV's sector_data with blue and red swapped: tab index per sector for (r, g, b) */
__constant__ unsigned char c_sector_rgb[6][3] = { { 0, 3, 1 }, { 2, 0, 1 }, { 1, 0, 3 },
                                                  { 1, 2, 0 }, { 3, 1, 0 }, { 0, 1, 2 } };

/* The HSV -> RGB factor of channel c (0 r, 1 g, 2 b) for (H', S'), as the reference's table. */
static __device__ __forceinline__ float d_hsv_fac(int hh, int s, int c)
{
    const float hf = __fmul_rn((float)hh, __fdiv_rn(6.0f, 180.0f));
    const float sector = truncf(hf), f = __fsub_rn(hf, sector);
    const float ss = __fmul_rn((float)s, __fdiv_rn(1.0f, 255.0f));
    switch (c_sector_rgb[(int)sector][c]) {
    case 0:
        return 1.f;
    case 1:
        return __fsub_rn(1.f, ss);
    case 2:
        return d_fused_1_minus(ss, f);
    default:
        return d_fused_1_minus(ss, __fsub_rn(1.f, f));
    }
}

static __device__ __forceinline__ void d_hsv_px(const uint8_t *in,
                                                const struct kern_aug_hsv_lut &lut, bool truncate,
                                                const int *sdiv, const int *hdiv, uint8_t *d)
{
    const int r = in[0], g = in[1], b = in[2];
    int v = b, vmin = b;
    v = v > g ? v : g;
    v = v > r ? v : r;
    vmin = vmin < g ? vmin : g;
    vmin = vmin < r ? vmin : r;
    const int diff = v - vmin;
    const int vr = v == r ? -1 : 0, vg = v == g ? -1 : 0;
    const int s = (diff * sdiv[v] + (1 << 11)) >> 12;
    int hh = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + (~vg & (r - g + 4 * diff))));
    hh = (hh * hdiv[diff] + (1 << 11)) >> 12;
    hh += hh < 0 ? 180 : 0;
    const int h2 = lut.h[hh], s2 = lut.s[s];
    const float vv = __fmul_rn((float)lut.v[v], __fdiv_rn(1.0f, 255.0f));
    for (int c = 0; c < 3; c++) {
        const float o = __fmul_rn(__fmul_rn(vv, d_hsv_fac(h2, s2, c)), 255.0f);
        d[c] = (uint8_t)(truncate ? __float2int_rz(o) : __float2int_rn(o));
    }
}

/* ---- paste -------------------------------------------------------------------------------- */

__global__ void aug_paste_kernel(uint8_t *__restrict__ canvas, const struct kern_aug_canvas c)
{
    const size_t total = (size_t)c.w * (size_t)c.h;
    KERN_CUDA_LOOP(i, total)
    {
        const int y = (int)(i / (size_t)c.w), x = (int)(i - (size_t)y * c.w);
        const uint8_t *p = d_canvas_px(c, x, y);
        uint8_t *d = canvas + 3 * i;
        d[0] = p ? p[0] : KERN_AUG_FILL;
        d[1] = p ? p[1] : KERN_AUG_FILL;
        d[2] = p ? p[2] : KERN_AUG_FILL;
    }
}

int kern_cuda_aug_paste(struct kern_ctx *ctx, uint8_t *__restrict__ canvas,
                        const struct kern_aug_canvas *c)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!canvas || kern_aug_canvas_check(c) < 0) return -EINVAL;
    const size_t total = (size_t)c->w * (size_t)c->h;
    aug_paste_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        canvas, *c);
    return kern_cuda_launched(ctx, "aug_paste");
}

/* ---- warp --------------------------------------------------------------------------------- */

struct aug_mat {
    double m[9];
};

__global__ void aug_warp_kernel(uint8_t *__restrict__ dst, int dw, int dh,
                                const uint8_t *__restrict__ src, int sw, int sh,
                                const struct aug_mat M, int perspective, uint8_t border)
{
    const size_t total = (size_t)dw * (size_t)dh;
    const int bw0 = persp_block(dw, dh);
    KERN_CUDA_LOOP(i, total)
    {
        const int y = (int)(i / (size_t)dw), x = (int)(i - (size_t)y * dw);
        int X, Y;
        d_src_xy(M.m, perspective, bw0, x, y, &X, &Y);
        d_bilinear(
            X, Y,
            [&](int tx, int ty, uint8_t *t) {
                if (tx >= 0 && ty >= 0 && tx < sw && ty < sh) {
                    const uint8_t *p = src + ((size_t)ty * (size_t)sw + (size_t)tx) * 3;
                    t[0] = p[0], t[1] = p[1], t[2] = p[2];
                } else {
                    t[0] = t[1] = t[2] = border;
                }
            },
            dst + 3 * i);
    }
}

int kern_cuda_aug_warp(struct kern_ctx *ctx, uint8_t *__restrict__ dst, int dst_w, int dst_h,
                       const uint8_t *__restrict__ src, int src_w, int src_h, const double inv[9],
                       int perspective, uint8_t border)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!dst || !src || !inv || bad_size(src_w, src_h) || bad_size(dst_w, dst_h)) return -EINVAL;
    struct aug_mat M;
    for (int i = 0; i < 9; i++)
        M.m[i] = inv[i];
    const size_t total = (size_t)dst_w * (size_t)dst_h;
    aug_warp_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        dst, dst_w, dst_h, src, src_w, src_h, M, perspective, border);
    return kern_cuda_launched(ctx, "aug_warp");
}

/* ---- HSV ---------------------------------------------------------------------------------- */

__global__ void aug_hsv_kernel(uint8_t *img, int w, int h, const struct kern_aug_hsv_lut lut)
{
    __shared__ int sdiv[256], hdiv[256];
    d_hsv_tables(sdiv, hdiv);
    const size_t total = (size_t)w * (size_t)h;
    const int simd_end = w / HSV_SIMD_BLOCK * HSV_SIMD_BLOCK;
    KERN_CUDA_LOOP(i, total)
    {
        const int y = (int)(i / (size_t)w), x = (int)(i - (size_t)y * w);
        uint8_t *p = img + 3 * i;
        d_hsv_px(p, lut, x < simd_end, sdiv, hdiv, p);
    }
}

int kern_cuda_aug_hsv(struct kern_ctx *ctx, uint8_t *img, int w, int h,
                      const struct kern_aug_hsv_lut *lut)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!img || !lut || bad_size(w, h) || !lut_ok(lut)) return -EINVAL;
    const size_t total = (size_t)w * (size_t)h;
    aug_hsv_kernel<<<kern_cuda_blocks(total), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        img, w, h, *lut);
    return kern_cuda_launched(ctx, "aug_hsv");
}

/* ---- flips, mixup, layout ----------------------------------------------------------------- */

/* Swaps pixel pairs: lr only (x < w/2 with w-1-x), ud only (y < h/2 with h-1-y), both (the
 * pixel order reversed: i < total/2 with total-1-i). Each pair is owned by one thread. */
__global__ void aug_flip_kernel(uint8_t *img, int w, int h, int lr, int ud)
{
    const size_t total = (size_t)w * (size_t)h;
    const size_t pairs = lr && ud ? total / 2 : lr ? (size_t)(w / 2) * h : (size_t)w * (h / 2);
    KERN_CUDA_LOOP(i, pairs)
    {
        size_t a, b;
        if (lr && ud) {
            a = i, b = total - 1 - i;
        } else if (lr) {
            const size_t y = i / (size_t)(w / 2), x = i - y * (size_t)(w / 2);
            a = y * w + x, b = y * w + (w - 1 - x);
        } else {
            const size_t y = i / (size_t)w, x = i - y * (size_t)w;
            a = y * w + x, b = (h - 1 - y) * w + x;
        }
        for (int k = 0; k < 3; k++) {
            const uint8_t t = img[3 * a + k];
            img[3 * a + k] = img[3 * b + k];
            img[3 * b + k] = t;
        }
    }
}

int kern_cuda_aug_flip(struct kern_ctx *ctx, uint8_t *img, int w, int h, int lr, int ud)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!img || bad_size(w, h)) return -EINVAL;
    if (!lr && !ud) return 0;
    const size_t total = (size_t)w * (size_t)h;
    aug_flip_kernel<<<kern_cuda_blocks(total / 2 + 1), KERN_CUDA_THREADS, 0,
                      kern_cuda_st(ctx)->stream>>>(img, w, h, lr != 0, ud != 0);
    return kern_cuda_launched(ctx, "aug_flip");
}

__global__ void aug_mixup_kernel(uint8_t *__restrict__ img, const uint8_t *__restrict__ img2,
                                 size_t n, double r, double r2)
{
    KERN_CUDA_LOOP(i, n)
    img[i] = d_trunc_u8(__dadd_rn(__dmul_rn((double)img[i], r), __dmul_rn((double)img2[i], r2)));
}

int kern_cuda_aug_mixup(struct kern_ctx *ctx, uint8_t *__restrict__ img,
                        const uint8_t *__restrict__ img2, size_t n, double r)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!img || !img2 || !(r >= 0 && r <= 1)) return -EINVAL;
    if (n == 0) return 0;
    aug_mixup_kernel<<<kern_cuda_blocks(n), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        img, img2, n, r, 1 - r);
    return kern_cuda_launched(ctx, "aug_mixup");
}

__global__ void aug_to_nchw_kernel(void *__restrict__ dst, int dtype,
                                   const uint8_t *__restrict__ hwc, size_t plane)
{
    KERN_CUDA_LOOP(i, plane)
    {
        for (int k = 0; k < 3; k++) {
            const uint8_t v = hwc[3 * i + k];
            if (dtype == KERN_AUG_F32)
                ((float *)dst)[(size_t)k * plane + i] = __fdiv_rn((float)v, 255.0f);
            else
                ((uint8_t *)dst)[(size_t)k * plane + i] = v;
        }
    }
}

int kern_cuda_aug_to_nchw(struct kern_ctx *ctx, void *__restrict__ dst, int dtype,
                          const uint8_t *__restrict__ hwc, int w, int h)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!dst || !hwc || bad_size(w, h) || (dtype != KERN_AUG_U8 && dtype != KERN_AUG_F32))
        return -EINVAL;
    const size_t plane = (size_t)w * (size_t)h;
    aug_to_nchw_kernel<<<kern_cuda_blocks(plane), KERN_CUDA_THREADS, 0,
                         kern_cuda_st(ctx)->stream>>>(dst, dtype, hwc, plane);
    return kern_cuda_launched(ctx, "aug_to_nchw");
}

/* ---- fused batch -------------------------------------------------------------------------- */

struct aug_chunk {
    struct kern_aug_sample smp[AUG_CHUNK];
};

static __device__ __forceinline__ void d_warp_canvas(const struct kern_aug_canvas &c,
                                                     const double *M, int perspective, int bw0,
                                                     int x, int y, uint8_t *d)
{
    int X, Y;
    d_src_xy(M, perspective, bw0, x, y, &X, &Y);
    d_bilinear(
        X, Y,
        [&](int tx, int ty, uint8_t *t) {
            const uint8_t *p = d_canvas_px(c, tx, ty);
            t[0] = p ? p[0] : KERN_AUG_FILL;
            t[1] = p ? p[1] : KERN_AUG_FILL;
            t[2] = p ? p[2] : KERN_AUG_FILL;
        },
        d);
}

/* blockIdx.y: the sample within the chunk; x: a grid-stride loop over its s * s pixels. The
 * chunk is read in place from parameter space (__grid_constant__: no per-thread copy). */
__global__ void aug_batch_kernel(void *__restrict__ dst, int dtype, int s,
                                 const __grid_constant__ aug_chunk ch, int first)
{
    __shared__ int sdiv[256], hdiv[256];
    d_hsv_tables(sdiv, hdiv);
    const struct kern_aug_sample &smp = ch.smp[blockIdx.y];
    const size_t plane = (size_t)s * (size_t)s;
    const size_t img = (size_t)first + blockIdx.y;
    const int bw0 = persp_block(s, s), simd_end = s / HSV_SIMD_BLOCK * HSV_SIMD_BLOCK;
    const double r = smp.mixup_ratio, r2 = __dsub_rn(1.0, r);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane;
         i += (size_t)blockDim.x * gridDim.x) {
        const int y = (int)(i / (size_t)s), x = (int)(i - (size_t)y * s);
        uint8_t px[3];
        d_warp_canvas(smp.canvas[0], smp.inv[0], smp.perspective[0], bw0, x, y, px);
        if (smp.mixup) {
            uint8_t p2[3];
            d_warp_canvas(smp.canvas[1], smp.inv[1], smp.perspective[1], bw0, x, y, p2);
            for (int k = 0; k < 3; k++)
                px[k] = d_trunc_u8(
                    __dadd_rn(__dmul_rn((double)px[k], r), __dmul_rn((double)p2[k], r2)));
        }
        if (smp.hsv) d_hsv_px(px, smp.lut, x < simd_end, sdiv, hdiv, px);
        const int ox = smp.flip_lr ? s - 1 - x : x, oy = smp.flip_ud ? s - 1 - y : y;
        if (dtype == KERN_AUG_BF16_S2D_NHWC || dtype == KERN_AUG_BF16_S2D_NCHW) {
            const int layout =
                dtype == KERN_AUG_BF16_S2D_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
            const size_t ss = (size_t)s;
            uint16_t *const d16 = (uint16_t *)dst + img * (plane / 4) * KERN_AUG_S2D_C;
            for (int k = 0; k < 3; k++)
                d16[kern_s2d_px(layout, ss, ss, 3, KERN_AUG_S2D_C, (size_t)oy, (size_t)ox,
                                (size_t)k)] = kern_bf16_from_f32(__fdiv_rn((float)px[k], 255.0f));
            /* a 2x2 block's pad channels: by the thread of its even pixel */
            if (oy % 2 == 0 && ox % 2 == 0)
                for (int k = 12; k < KERN_AUG_S2D_C; k++)
                    d16[kern_s2d_px(layout, ss, ss, 3, KERN_AUG_S2D_C, (size_t)oy, (size_t)ox, 0) +
                        (layout == KERN_LAYOUT_NHWC ? (size_t)k : (size_t)k * (plane / 4))] = 0;
            continue;
        }
        const size_t o = img * 3 * plane + (size_t)oy * (size_t)s + (size_t)ox;
        for (int k = 0; k < 3; k++) {
            if (dtype == KERN_AUG_F32)
                ((float *)dst)[o + (size_t)k * plane] = __fdiv_rn((float)px[k], 255.0f);
            else
                ((uint8_t *)dst)[o + (size_t)k * plane] = px[k];
        }
    }
}

int kern_cuda_aug_batch(struct kern_ctx *ctx, void *__restrict__ dst, int dtype, int s,
                        const struct kern_aug_sample *samples, int n)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!dst || !samples || n < 1 || !kern_aug_image_bytes(dtype, s, s)) return -EINVAL;
    for (int i = 0; i < n; i++)
        if (kern_aug_sample_check(&samples[i], s) < 0 ||
            (samples[i].hsv && !lut_ok(&samples[i].lut)))
            return -EINVAL;
    const size_t plane = (size_t)s * (size_t)s;
    /* enough blocks per image to fill the device with a batch of a few dozen */
    const unsigned bx = (unsigned)((plane + KERN_CUDA_THREADS - 1) / KERN_CUDA_THREADS);
    const unsigned blocks_x = bx > 2048 ? 2048 : bx;
    for (int first = 0; first < n; first += AUG_CHUNK) {
        const int m = n - first < AUG_CHUNK ? n - first : AUG_CHUNK;
        aug_chunk c;
        memset(&c, 0, sizeof c);
        memcpy(c.smp, samples + first, (size_t)m * sizeof *samples);
        const dim3 grid(blocks_x, (unsigned)m);
        aug_batch_kernel<<<grid, KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(dst, dtype, s,
                                                                                    c, first);
        const int rc = kern_cuda_launched(ctx, "aug_batch");
        if (rc < 0) return rc;
    }
    return 0;
}
