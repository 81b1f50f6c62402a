/*
 * The per-pixel arithmetic of the CPU augmentation ops (kern_augment.c, the reference;
 * cpu/kern_augment_cpu.c, the fused sample pass and its SIMD levels), written once so that every
 * path computes the same bytes. Private to kernels/ref: OpenCV's rounding, the bilinear taps,
 * the affine and perspective source coordinates, the HSV tables and pixel, mixup, and a
 * warped pixel read straight from a canvas's regions. The float and double code here must not
 * be contracted into FMAs: includers turn contraction off (see kern_augment.c).
 */
#ifndef KERN_AUGMENT_PX_H
#define KERN_AUGMENT_PX_H

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kern_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>

#endif

#define INTER_BITS     5
#define INTER_TAB_SIZE (1 << INTER_BITS)
#define AB_BITS        10
#define AB_SCALE       (1 << AB_BITS)
#define MAX_SIDE       32767
#define HSV_SIMD_BLOCK 32 /* pixels per iteration of OpenCV's AVX2 HSV2RGB_b loop */

/* ---- rounding as OpenCV ------------------------------------------------------------------ */

/* cvRound(double): nearest, ties to even; out-of-range values give INT_MIN as cvtsd2si does. */
static inline int cv_round(double v)
{
#if defined(__SSE2__)
    return _mm_cvtsd_si32(_mm_set_sd(v));
#else
    if (!(v > (double)INT_MIN - 0.5 && v < (double)INT_MAX + 0.5)) return INT_MIN;
    return (int)lrint(v);
#endif
}

/* cvRound(float) */
static inline int cv_roundf(float v)
{
#if defined(__SSE2__)
    return _mm_cvtss_si32(_mm_set_ss(v));
#else
    return (int)lrintf(v);
#endif
}

static inline int sat_s16(int v)
{
    return v < SHRT_MIN ? SHRT_MIN : v > SHRT_MAX ? SHRT_MAX : v;
}

/* numpy's float -> uint8 astype: C truncation (the values here are in [0, 255]). */
static inline uint8_t trunc_u8(double v)
{
    return (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : (int)v);
}

static inline bool bad_size(int w, int h)
{
    return w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE;
}

/* ---- bilinear taps ------------------------------------------------------------------------ */

/*
 * The four weights of fraction (fx, fy): OpenCV's interpolation table (initInterTab2D, entries
 * summing to 32768) divided by 32, so (sum*32 + 2^14) >> 15 is (sum + 2^9) >> 10.
 */
struct taps_w {
    int w0, w1, w2, w3;
};

static inline struct taps_w taps_weights(int fx, int fy)
{
    const struct taps_w t = { (INTER_TAB_SIZE - fy) * (INTER_TAB_SIZE - fx),
                              (INTER_TAB_SIZE - fy) * fx, fy * (INTER_TAB_SIZE - fx), fy * fx };
    return t;
}

static inline uint8_t blend4(int a, int b, int c, int d, struct taps_w w)
{
    return (uint8_t)((a * w.w0 + b * w.w1 + c * w.w2 + d * w.w3 + 512) >> 10);
}

/* ---- source coordinates ------------------------------------------------------------------ */

/* Affine source coordinates: the row part X0 (rounding delta included) and the column part. */
static inline int affine_row(double m_y, double m_c, int y)
{
    return cv_round((m_y * y + m_c) * AB_SCALE) + AB_SCALE / INTER_TAB_SIZE / 2;
}

static inline int affine_col(double m_x, int x)
{
    return cv_round(m_x * x * AB_SCALE);
}

/* OpenCV's int sums wrap for absurd matrices; unsigned keeps that defined. */
static inline int affine_sum(int r, int c)
{
    return (int)((unsigned)r + (unsigned)c) >> (AB_BITS - INTER_BITS);
}

/* WarpPerspectiveInvoker's column block width (BLOCK_SZ 32): X0 is computed at each block's
 * first column, so the block width changes the rounding and must match. */
static inline int persp_block(int dst_w, int dst_h)
{
    const int bh0 = dst_h < 16 ? dst_h : 16;
    return 1024 / bh0 < dst_w ? 1024 / bh0 : dst_w;
}

/* Perspective source coordinates of column x0 + x1 of row y, x0 a block's first column. */
static inline void persp_xy(const double *M, int x0, int y, int x1, int *X, int *Y)
{
    const double X0 = M[0] * x0 + M[1] * y + M[2];
    const double Y0 = M[3] * x0 + M[4] * y + M[5];
    const double W0 = M[6] * x0 + M[7] * y + M[8];
    double W = W0 + M[6] * x1;
    W = W != 0 ? INTER_TAB_SIZE / W : 0;
    const double fX = fmax((double)INT_MIN, fmin((double)INT_MAX, (X0 + M[0] * x1) * W));
    const double fY = fmax((double)INT_MIN, fmin((double)INT_MAX, (Y0 + M[3] * x1) * W));
    *X = cv_round(fX);
    *Y = cv_round(fY);
}

/* ---- HSV, mixup, layout ------------------------------------------------------------------- */

/*
 * Constant tables, built once by kern_aug_tables_init: sdiv[v] = round((255 << 12) / v),
 * hdiv[d] = round((180 << 12) / (6 d)), and the HSV -> RGB factors per (H', S'): channel values
 * are v * fac (one float rounding, then * 255.f), fac = 1, 1 - s, 1 - s f or 1 - s (1 - f) per
 * channel by H's sector (180 x 256 x 3 floats, 540 KiB); u8_f32[i] = i / 255.0f.
 */
extern int kern_aug_sdiv[256], kern_aug_hdiv[256];
extern float kern_aug_hsv_fac[180][256][3];
extern float kern_aug_u8_f32[256];

/* Builds the tables once per process (pthread_once); any thread. */
void kern_aug_tables_init(void);

/* HSV lookup tables must map H into [0, 180): a wrong LUT would index past the factors. */
bool kern_aug_lut_ok(const struct kern_aug_hsv_lut *lut);

/* One pixel (r, g, b) through the HSV LUTs into d. truncate: the SIMD loop's conversion. */
static inline void hsv_px(int r, int g, int b, const struct kern_aug_hsv_lut *lut, bool truncate,
                          uint8_t *d)
{
    int v = b, vmin = b;
    v = v > g ? v : g;
    v = v > r ? v : r;
    vmin = vmin < g ? vmin : g;
    vmin = vmin < r ? vmin : r;
    const int diff = v - vmin;
    const int vr = v == r ? -1 : 0, vg = v == g ? -1 : 0;
    const int s = (diff * kern_aug_sdiv[v] + (1 << 11)) >> 12;
    int hh = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + (~vg & (r - g + 4 * diff))));
    hh = (hh * kern_aug_hdiv[diff] + (1 << 11)) >> 12;
    hh += hh < 0 ? 180 : 0;
    /* hh is in [0, 180): it indexes the LUT as OpenCV's uint8 H does; LUT H' < 180 too */
    const float *fac = kern_aug_hsv_fac[lut->h[hh]][lut->s[s]];
    const float vv = (float)lut->v[v] * (1.0f / 255.0f);
    const float o0 = vv * fac[0] * 255.0f, o1 = vv * fac[1] * 255.0f, o2 = vv * fac[2] * 255.0f;
    /* v, fac <= 1: the values lie in [0, 255] and need no clamp */
    if (truncate) {
        d[0] = (uint8_t)(int)o0, d[1] = (uint8_t)(int)o1, d[2] = (uint8_t)(int)o2;
    } else {
        d[0] = (uint8_t)cv_roundf(o0), d[1] = (uint8_t)cv_roundf(o1);
        d[2] = (uint8_t)cv_roundf(o2);
    }
}

static inline uint8_t mix_px(int a, int b, double r, double r2)
{
    return trunc_u8(a * r + b * r2);
}

/* ---- a canvas sampled in place ----------------------------------------------------------- */

/* Canvas pixel (x, y) of c: the last region holding it, KERN_AUG_FILL elsewhere and outside. */
static inline const uint8_t *canvas_px(const struct kern_aug_canvas *c, int x, int y,
                                       const uint8_t *fill)
{
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return fill;
    for (int i = c->n_paste - 1; i >= 0; i--) {
        const struct kern_aug_paste *p = &c->paste[i];
        const int rx = x - p->dst_x, ry = y - p->dst_y;
        if (rx >= 0 && ry >= 0 && rx < p->w && ry < p->h)
            return p->src +
                   ((size_t)(p->src_y + ry) * (size_t)p->src_w + (size_t)(p->src_x + rx)) * 3;
    }
    return fill;
}

/*
 * Output pixel (x, y) of one warp of the sample, sampling the canvas directly. With border ==
 * fill (114), a pixel whose taps are all outside is the border value either way, and the
 * weights of 4 equal taps sum to the value, so this equals warping the pasted canvas.
 */
/* The warped pixel at source (X, Y) in 1/32 px, its taps read from the canvas's regions. */
static inline void warp_tap(const struct kern_aug_canvas *c, int X, int Y, uint8_t *d)
{
    static const uint8_t fill[3] = { KERN_AUG_FILL, KERN_AUG_FILL, KERN_AUG_FILL };
    const int sx = sat_s16(X >> INTER_BITS), sy = sat_s16(Y >> INTER_BITS);
    const struct taps_w w = taps_weights(X & (INTER_TAB_SIZE - 1), Y & (INTER_TAB_SIZE - 1));
    const uint8_t *v0 = canvas_px(c, sx, sy, fill), *v1 = canvas_px(c, sx + 1, sy, fill);
    const uint8_t *v2 = canvas_px(c, sx, sy + 1, fill), *v3 = canvas_px(c, sx + 1, sy + 1, fill);
    for (int k = 0; k < 3; k++)
        d[k] = blend4(v0[k], v1[k], v2[k], v3[k], w);
}

static inline void warp_px(const struct kern_aug_canvas *c, const double *M, int perspective,
                           int bw0, int x, int y, uint8_t *d)
{
    int X, Y;
    if (perspective) {
        const int x0 = x / bw0 * bw0;
        persp_xy(M, x0, y, x - x0, &X, &Y);
    } else {
        X = affine_sum(affine_row(M[1], M[2], y), affine_col(M[0], x));
        Y = affine_sum(affine_row(M[4], M[5], y), affine_col(M[3], x));
    }
    warp_tap(c, X, Y, d);
}

/*
 * The fused pass of one sample (cpu/kern_augment_cpu.c): every output pixel of the oh x ow image
 * (warp of canvas[0], mixup with canvas[1], HSV, flips) written to dst, 3 planes of oh * ow
 * elements (dtype), at the SIMD level kern_aug_simd allows. Arguments checked by the caller;
 * tables built (kern_aug_tables_init). Any thread; no allocation.
 */
void kern_aug_sample_run(void *dst, int dtype, int oh, int ow, const struct kern_aug_sample *smp);

#endif
