/*
 * Geometric pixel operations of augment.h, reproducing OpenCV 4.x's uint8 arithmetic
 * (modules/imgproc/src/imgwarp.cpp, resize.cpp; the non-IPP CPU path that Debian's build and, for
 * these calls, the opencv-python wheels run):
 *
 * warpAffine / warpPerspective, INTER_LINEAR, BORDER_CONSTANT:
 *   - The forward matrix is inverted first (affine: D = 1/(m0*m4 - m1*m3) and the explicit
 *     2x2 + offset formulas; perspective: cv::invert with DECOMP_LU, which for 3x3 is the
 *     cofactor formula with a double determinant).
 *   - Affine source coordinates are fixed point with AB_BITS = 10: per destination row
 *     X0 = round((m1*y + m2) * 1024) + 16, per column adelta = round(m0*x*1024), then
 *     X = (X0 + adelta) >> 5 gives 5 fractional bits (INTER_TAB_SIZE = 32). round() is cvRound:
 *     nearest, ties to even (the current FP mode). Perspective: per 64-column block
 *     X0 = m0*x + m1*y + m2 (W0, Y0 alike), then W = 32 / (W0 + m6*x1) and
 *     X = round(clamp((X0 + m0*x1) * W)) in double.
 *   - Integer source pixel sx = X >> 5 (saturated to int16), fraction fx = X & 31 (fy alike).
 *     The interpolation table (initInterTab2D) holds weights (32-fy)(32-fx)*32, (32-fy)fx*32,
 *     fy(32-fx)*32, fy*fx*32 (exact in float, summing to 32768), and a pixel is
 *     (sum of tap * weight + 16384) >> 15. Taps outside the source take the border value; a
 *     pixel whose 4 taps are all outside (sx >= w, sx + 1 < 0, or the same for y) is the border
 *     value.
 *
 * resize INTER_LINEAR (11-bit separable fixed point) and its exact-2x downscale, which OpenCV
 * runs as INTER_AREA: see trn_aug_resize_linear below.
 */
#include "augment.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define INTER_BITS     5
#define INTER_TAB_SIZE (1 << INTER_BITS)
#define AB_BITS        10
#define AB_SCALE       (1 << AB_BITS)
#define MAX_SIDE       32767

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

static inline int cv_floorf(float v)
{
    const int i = (int)v;
    return i - (i > v);
}

static inline int sat_s16(int v)
{
    return v < SHRT_MIN ? SHRT_MIN : v > SHRT_MAX ? SHRT_MAX : v;
}

static bool bad_size(int w, int h)
{
    return w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE;
}

/*
 * One destination pixel from integer source position (sx, sy) and fractions (fx, fy) in
 * 0..31, as remapBilinear with BORDER_CONSTANT. The weights here are the table's divided by 32
 * (its entries are (32-fy)(32-fx)*32 and so on), so (sum*32 + 2^14) >> 15 is (sum + 2^9) >> 10.
 * This is the path of pixels with a tap outside the source; bilinear_in() is the inside one.
 */
static void bilinear_border(const uint8_t *src, int sw, int sh, size_t sstep, int sx, int sy,
                            int fx, int fy, uint8_t bv, uint8_t *d)
{
    if (sx >= sw || sx + 1 < 0 || sy >= sh || sy + 1 < 0) {
        d[0] = d[1] = d[2] = bv;
        return;
    }
    const int w0 = (INTER_TAB_SIZE - fy) * (INTER_TAB_SIZE - fx);
    const int w1 = (INTER_TAB_SIZE - fy) * fx;
    const int w2 = fy * (INTER_TAB_SIZE - fx);
    const int w3 = fy * fx;
    const bool x0in = sx >= 0, x1in = sx + 1 < sw, y0in = sy >= 0, y1in = sy + 1 < sh;
    const uint8_t bvs[3] = { bv, bv, bv };
    const uint8_t *row0 = src + (size_t)(y0in ? sy : 0) * sstep;
    const uint8_t *row1 = src + (size_t)(y1in ? sy + 1 : 0) * sstep;
    const uint8_t *v0 = x0in && y0in ? row0 + (size_t)sx * 3 : bvs;
    const uint8_t *v1 = x1in && y0in ? row0 + (size_t)(sx + 1) * 3 : bvs;
    const uint8_t *v2 = x0in && y1in ? row1 + (size_t)sx * 3 : bvs;
    const uint8_t *v3 = x1in && y1in ? row1 + (size_t)(sx + 1) * 3 : bvs;
    for (int k = 0; k < 3; k++)
        d[k] = (uint8_t)((v0[k] * w0 + v1[k] * w1 + v2[k] * w2 + v3[k] * w3 + 512) >> 10);
}

static inline void bilinear_in(const uint8_t *s0, size_t sstep, int fx, int fy, uint8_t *d)
{
    const int w0 = (INTER_TAB_SIZE - fy) * (INTER_TAB_SIZE - fx);
    const int w1 = (INTER_TAB_SIZE - fy) * fx;
    const int w2 = fy * (INTER_TAB_SIZE - fx);
    const int w3 = fy * fx;
    const uint8_t *s1 = s0 + sstep;
    d[0] = (uint8_t)((s0[0] * w0 + s0[3] * w1 + s1[0] * w2 + s1[3] * w3 + 512) >> 10);
    d[1] = (uint8_t)((s0[1] * w0 + s0[4] * w1 + s1[1] * w2 + s1[4] * w3 + 512) >> 10);
    d[2] = (uint8_t)((s0[2] * w0 + s0[5] * w1 + s1[2] * w2 + s1[5] * w3 + 512) >> 10);
}

#if defined(__SSE2__)
/*
 * bilinear_in with SSE2 (the same integers): channel k's taps (s0[k], s0[k+3]) and
 * (s1[k], s1[k+3]) as 16-bit pairs against (w0, w1) and (w2, w3) with madd, as OpenCV's
 * RemapVec_8u. Reads 7 bytes per row, so the caller keeps sx <= sw - 3. Writes 4 bytes: the
 * 4th is the next pixel's first, which the caller writes afterwards (never at a row's end).
 */
static inline void bilinear_in4(const uint8_t *s0, size_t sstep, int fx, int fy, uint8_t *d)
{
    const int w0 = (INTER_TAB_SIZE - fy) * (INTER_TAB_SIZE - fx);
    const int w1 = (INTER_TAB_SIZE - fy) * fx;
    const int w2 = fy * (INTER_TAB_SIZE - fx);
    const int w3 = fy * fx;
    const uint8_t *s1 = s0 + sstep;
    int32_t a0, a1, b0, b1;
    memcpy(&a0, s0, 4);
    memcpy(&a1, s0 + 3, 4);
    memcpy(&b0, s1, 4);
    memcpy(&b1, s1 + 3, 4);
    const __m128i z = _mm_setzero_si128();
    const __m128i ta =
        _mm_unpacklo_epi8(_mm_unpacklo_epi8(_mm_cvtsi32_si128(a0), _mm_cvtsi32_si128(a1)), z);
    const __m128i tb =
        _mm_unpacklo_epi8(_mm_unpacklo_epi8(_mm_cvtsi32_si128(b0), _mm_cvtsi32_si128(b1)), z);
    __m128i sum = _mm_add_epi32(_mm_madd_epi16(ta, _mm_set1_epi32(w0 | w1 << 16)),
                                _mm_madd_epi16(tb, _mm_set1_epi32(w2 | w3 << 16)));
    sum = _mm_srai_epi32(_mm_add_epi32(sum, _mm_set1_epi32(512)), 10);
    sum = _mm_packus_epi16(_mm_packs_epi32(sum, z), z);
    const int32_t out = _mm_cvtsi128_si32(sum);
    memcpy(d, &out, 4);
}
#endif

/*
 * The pixel at source (X, Y) in 1/32 px (integer part saturated to int16 as OpenCV's map).
 * last: d is the row's last pixel (no 4-byte store).
 */
static inline void bilinear_px(const uint8_t *src, int sw, int sh, size_t sstep, int X, int Y,
                               uint8_t bv, uint8_t *d, bool last)
{
    const int sx = sat_s16(X >> INTER_BITS), sy = sat_s16(Y >> INTER_BITS);
    const int fx = X & (INTER_TAB_SIZE - 1), fy = Y & (INTER_TAB_SIZE - 1);
    if ((unsigned)sx < (unsigned)(sw - 1) && (unsigned)sy < (unsigned)(sh - 1)) {
        const uint8_t *s0 = src + (size_t)sy * sstep + (size_t)sx * 3;
#if defined(__SSE2__)
        if (!last && sx < sw - 2) {
            bilinear_in4(s0, sstep, fx, fy, d);
            return;
        }
#else
        (void)last;
#endif
        bilinear_in(s0, sstep, fx, fy, d);
    } else {
        bilinear_border(src, sw, sh, sstep, sx, sy, fx, fy, bv, d);
    }
}

int trn_aug_warp_affine(const uint8_t *src, int src_w, int src_h, const double M0[6], uint8_t *dst,
                        int dst_w, int dst_h, uint8_t border_value)
{
    if (!src || !M0 || !dst || bad_size(src_w, src_h) || bad_size(dst_w, dst_h)) return -EINVAL;
    double M[6];
    memcpy(M, M0, sizeof M);
    /* Invert as cv::warpAffine does without WARP_INVERSE_MAP. */
    double D = M[0] * M[4] - M[1] * M[3];
    D = D != 0 ? 1. / D : 0;
    const double A11 = M[4] * D, A22 = M[0] * D;
    M[0] = A11;
    M[1] *= -D;
    M[3] *= -D;
    M[4] = A22;
    const double b1 = -M[0] * M[2] - M[1] * M[5];
    const double b2 = -M[3] * M[2] - M[4] * M[5];
    M[2] = b1;
    M[5] = b2;

    const size_t sstep = (size_t)src_w * 3;
    const int round_delta = AB_SCALE / INTER_TAB_SIZE / 2;
    /* adelta/bdelta per column, in blocks that fit on the stack */
    enum { COLS = 1024 };
    int adelta[COLS], bdelta[COLS];
    for (int xb = 0; xb < dst_w; xb += COLS) {
        const int nx = dst_w - xb < COLS ? dst_w - xb : COLS;
        for (int i = 0; i < nx; i++) {
            adelta[i] = cv_round(M[0] * (xb + i) * AB_SCALE);
            bdelta[i] = cv_round(M[3] * (xb + i) * AB_SCALE);
        }
        for (int y = 0; y < dst_h; y++) {
            const int X0 = cv_round((M[1] * y + M[2]) * AB_SCALE) + round_delta;
            const int Y0 = cv_round((M[4] * y + M[5]) * AB_SCALE) + round_delta;
            uint8_t *d = dst + ((size_t)y * dst_w + xb) * 3;
            for (int i = 0; i < nx; i++, d += 3) {
                /* OpenCV's int sums wrap for absurd matrices; unsigned keeps that defined. */
                const int X = (int)((unsigned)X0 + (unsigned)adelta[i]) >> (AB_BITS - INTER_BITS);
                const int Y = (int)((unsigned)Y0 + (unsigned)bdelta[i]) >> (AB_BITS - INTER_BITS);
                bilinear_px(src, src_w, src_h, sstep, X, Y, border_value, d, xb + i == dst_w - 1);
            }
        }
    }
    return 0;
}

/* cv::invert(DECOMP_LU) of a 3x3 double matrix: cofactors over a double determinant; a
 * singular matrix gives zeros (OpenCV leaves dst zeroed and returns 0). */
static void invert3(const double m[9], double t[9])
{
#define S(i, j) m[(i)*3 + (j)]
    double d = S(0, 0) * (S(1, 1) * S(2, 2) - S(1, 2) * S(2, 1)) -
               S(0, 1) * (S(1, 0) * S(2, 2) - S(1, 2) * S(2, 0)) +
               S(0, 2) * (S(1, 0) * S(2, 1) - S(1, 1) * S(2, 0));
    if (d == 0) {
        memset(t, 0, 9 * sizeof *t);
        return;
    }
    d = 1. / d;
    t[0] = (S(1, 1) * S(2, 2) - S(1, 2) * S(2, 1)) * d;
    t[1] = (S(0, 2) * S(2, 1) - S(0, 1) * S(2, 2)) * d;
    t[2] = (S(0, 1) * S(1, 2) - S(0, 2) * S(1, 1)) * d;
    t[3] = (S(1, 2) * S(2, 0) - S(1, 0) * S(2, 2)) * d;
    t[4] = (S(0, 0) * S(2, 2) - S(0, 2) * S(2, 0)) * d;
    t[5] = (S(0, 2) * S(1, 0) - S(0, 0) * S(1, 2)) * d;
    t[6] = (S(1, 0) * S(2, 1) - S(1, 1) * S(2, 0)) * d;
    t[7] = (S(0, 1) * S(2, 0) - S(0, 0) * S(2, 1)) * d;
    t[8] = (S(0, 0) * S(1, 1) - S(0, 1) * S(1, 0)) * d;
#undef S
}

int trn_aug_warp_perspective(const uint8_t *src, int src_w, int src_h, const double M0[9],
                             uint8_t *dst, int dst_w, int dst_h, uint8_t border_value)
{
    if (!src || !M0 || !dst || bad_size(src_w, src_h) || bad_size(dst_w, dst_h)) return -EINVAL;
    double M[9];
    invert3(M0, M);
    const size_t sstep = (size_t)src_w * 3;
    /* WarpPerspectiveInvoker's blocks (BLOCK_SZ 32): X0 is computed at each block's first
     * column, so the block width changes the rounding and must match. */
    const int bh0 = dst_h < 16 ? dst_h : 16;
    const int bw0 = 1024 / bh0 < dst_w ? 1024 / bh0 : dst_w;
    for (int y = 0; y < dst_h; y++) {
        uint8_t *d = dst + (size_t)y * dst_w * 3;
        for (int x = 0; x < dst_w; x += bw0) {
            const int bw = dst_w - x < bw0 ? dst_w - x : bw0;
            const double X0 = M[0] * x + M[1] * y + M[2];
            const double Y0 = M[3] * x + M[4] * y + M[5];
            const double W0 = M[6] * x + M[7] * y + M[8];
            for (int x1 = 0; x1 < bw; x1++, d += 3) {
                double W = W0 + M[6] * x1;
                W = W != 0 ? INTER_TAB_SIZE / W : 0;
                const double fX =
                    fmax((double)INT_MIN, fmin((double)INT_MAX, (X0 + M[0] * x1) * W));
                const double fY =
                    fmax((double)INT_MIN, fmin((double)INT_MAX, (Y0 + M[3] * x1) * W));
                const int X = cv_round(fX), Y = cv_round(fY);
                bilinear_px(src, src_w, src_h, sstep, X, Y, border_value, d, x + x1 == dst_w - 1);
            }
        }
    }
    return 0;
}

/* ---- resize ----------------------------------------------------------------------------- */

/*
 * INTER_LINEAR source position of destination index d (resize.cpp, not area mode): f =
 * (float)((d + 0.5) * scale - 0.5), s = floor(f), f -= s; clamped at the borders to a single
 * tap with weight 1. Weights are round((1 - f) * 2048) and round(f * 2048) from floats.
 */
static void linear_coef(int d, double scale, int n, int *s0, int *s1, int *a0, int *a1)
{
    float f = (float)((d + 0.5) * scale - 0.5);
    int s = cv_floorf(f);
    f -= (float)s;
    int t = s + 1;
    if (s < 0) f = 0, s = 0, t = 1;
    if (s >= n - 1) f = 0, s = n - 1, t = n - 1;
    *s0 = s;
    *s1 = t < n ? t : n - 1;
    *a0 = sat_s16(cv_roundf((1.f - f) * 2048));
    *a1 = sat_s16(cv_roundf(f * 2048));
}

/* Rows: only the indices are clamped; the weights stay as computed. */
static void linear_coef_y(int d, double scale, int n, int *s0, int *s1, int *b0, int *b1)
{
    float f = (float)((d + 0.5) * scale - 0.5);
    const int s = cv_floorf(f);
    f -= (float)s;
    *s0 = s < 0 ? 0 : s > n - 1 ? n - 1 : s;
    *s1 = s + 1 < 0 ? 0 : s + 1 > n - 1 ? n - 1 : s + 1;
    *b0 = sat_s16(cv_roundf((1.f - f) * 2048));
    *b1 = sat_s16(cv_roundf(f * 2048));
}

/*
 * The resize into a destination with its own row stride (letterbox writes into the padded
 * image). Per destination row, both source rows are interpolated horizontally as OpenCV's
 * HResizeLinear (int32 s0*a0 + s1*a1), then combined as its SSE2 VResizeLinearVec_32s8u:
 * (((b0 * (r0 >> 4)) >> 16) + ((b1 * (r1 >> 4)) >> 16) + 2) >> 2. The horizontal values are
 * recomputed per row instead of cached: the same integers, and no workspace (letterbox resizes
 * are rare: records are stored at the training size).
 */
static void resize_into(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh,
                        size_t dstep)
{
    const size_t sstep = (size_t)sw * 3;
    if (sw == dw && sh == dh) {
        for (int y = 0; y < dh; y++)
            memcpy(dst + (size_t)y * dstep, src + (size_t)y * sstep, sstep);
        return;
    }
    const double inv_x = (double)dw / sw, inv_y = (double)dh / sh;
    const double scale_x = 1. / inv_x, scale_y = 1. / inv_y;
    const int ix = cv_round(scale_x), iy = cv_round(scale_y);
    if (fabs(scale_x - ix) < DBL_EPSILON && fabs(scale_y - iy) < DBL_EPSILON && ix == 2 &&
        iy == 2) {
        /* INTER_LINEAR at exactly half size runs INTER_AREA's 2x2 mean: (a+b+c+d+2) >> 2. */
        for (int y = 0; y < dh; y++) {
            const uint8_t *r0 = src + (size_t)(2 * y) * sstep, *r1 = r0 + sstep;
            uint8_t *d = dst + (size_t)y * dstep;
            for (int x = 0; x < dw; x++)
                for (int k = 0; k < 3; k++) {
                    const size_t o = (size_t)(2 * x) * 3 + (size_t)k;
                    d[3 * x + k] = (uint8_t)((r0[o] + r0[o + 3] + r1[o] + r1[o + 3] + 2) >> 2);
                }
        }
        return;
    }
    for (int y = 0; y < dh; y++) {
        int y0, y1, b0, b1;
        linear_coef_y(y, scale_y, sh, &y0, &y1, &b0, &b1);
        const uint8_t *r0 = src + (size_t)y0 * sstep, *r1 = src + (size_t)y1 * sstep;
        uint8_t *d = dst + (size_t)y * dstep;
        for (int x = 0; x < dw; x++) {
            int x0, x1, a0, a1;
            linear_coef(x, scale_x, sw, &x0, &x1, &a0, &a1);
            for (int k = 0; k < 3; k++) {
                const int h0 = r0[3 * x0 + k] * a0 + r0[3 * x1 + k] * a1;
                const int h1 = r1[3 * x0 + k] * a0 + r1[3 * x1 + k] * a1;
                int v = (((b0 * (h0 >> 4)) >> 16) + ((b1 * (h1 >> 4)) >> 16) + 2) >> 2;
                d[3 * x + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
}

int trn_aug_resize_linear(const uint8_t *src, int src_w, int src_h, uint8_t *dst, int dst_w,
                          int dst_h)
{
    if (!src || !dst || bad_size(src_w, src_h) || bad_size(dst_w, dst_h)) return -EINVAL;
    resize_into(src, src_w, src_h, dst, dst_w, dst_h, (size_t)dst_w * 3);
    return 0;
}

/* ---- letterbox -------------------------------------------------------------------------- */

void trn_aug_letterbox_opts_default(struct trn_aug_letterbox_opts *o)
{
    o->auto_pad = false;
    o->scale_fill = false;
    o->scaleup = true;
    o->stride = 32;
}

/* Python's round(): nearest, ties to even. */
static int py_round(double v)
{
    return (int)nearbyint(v);
}

int trn_aug_letterbox_plan(int w, int h, int new_h, int new_w,
                           const struct trn_aug_letterbox_opts *opts,
                           struct trn_aug_letterbox_plan *plan)
{
    if (!opts || !plan || bad_size(w, h) || bad_size(new_w, new_h) || opts->stride < 1)
        return -EINVAL;
    double r = fmin((double)new_h / h, (double)new_w / w);
    if (!opts->scaleup) r = fmin(r, 1.0);
    double ratio_w = r, ratio_h = r;
    int unpad_w = py_round(w * r), unpad_h = py_round(h * r);
    double dw = new_w - unpad_w, dh = new_h - unpad_h;
    if (opts->auto_pad) {
        /* np.mod: the result takes the divisor's sign */
        int mw = (new_w - unpad_w) % opts->stride, mh = (new_h - unpad_h) % opts->stride;
        if (mw < 0) mw += opts->stride;
        if (mh < 0) mh += opts->stride;
        dw = mw, dh = mh;
    } else if (opts->scale_fill) {
        dw = 0.0, dh = 0.0;
        unpad_w = new_w, unpad_h = new_h;
        ratio_w = (double)new_w / w, ratio_h = (double)new_h / h;
    }
    dw /= 2;
    dh /= 2;
    const int top = py_round(dh - 0.1), bottom = py_round(dh + 0.1);
    const int left = py_round(dw - 0.1), right = py_round(dw + 0.1);
    if (unpad_w < 1 || unpad_h < 1 || top < 0 || bottom < 0 || left < 0 || right < 0)
        return -EINVAL; /* only reachable for shapes smaller than the image with auto_pad */
    plan->new_w = unpad_w;
    plan->new_h = unpad_h;
    plan->left = left;
    plan->top = top;
    plan->out_w = unpad_w + left + right;
    plan->out_h = unpad_h + top + bottom;
    plan->ratio_w = ratio_w;
    plan->ratio_h = ratio_h;
    plan->pad_w = dw;
    plan->pad_h = dh;
    if (bad_size(plan->out_w, plan->out_h)) return -EINVAL;
    return 0;
}

int trn_aug_letterbox(const uint8_t *src, int w, int h, const struct trn_aug_letterbox_plan *plan,
                      uint8_t *dst, size_t dst_cap)
{
    if (!src || !plan || !dst || bad_size(w, h) || bad_size(plan->out_w, plan->out_h) ||
        plan->new_w < 1 || plan->new_h < 1 || plan->left < 0 || plan->top < 0 ||
        plan->left + plan->new_w > plan->out_w || plan->top + plan->new_h > plan->out_h)
        return -EINVAL;
    const size_t dstep = (size_t)plan->out_w * 3;
    if (dst_cap < dstep * (size_t)plan->out_h) return -ENOSPC;
    memset(dst, TRN_AUG_FILL, dstep * (size_t)plan->top);
    const size_t below = (size_t)(plan->top + plan->new_h);
    memset(dst + dstep * below, TRN_AUG_FILL, dstep * ((size_t)plan->out_h - below));
    const size_t lb = (size_t)plan->left * 3, rb = dstep - lb - (size_t)plan->new_w * 3;
    for (int y = 0; y < plan->new_h; y++) {
        uint8_t *row = dst + dstep * (size_t)(plan->top + y);
        memset(row, TRN_AUG_FILL, lb);
        memset(row + lb + (size_t)plan->new_w * 3, TRN_AUG_FILL, rb);
    }
    resize_into(src, w, h, dst + dstep * (size_t)plan->top + lb, plan->new_w, plan->new_h, dstep);
    return 0;
}
