/*
 * CPU reference of the augmentation pixel ops (kern.h "Augmentation pixels"); the CUDA twins are
 * in kernels/cuda/kern_cuda_augment.cu and must give the same bytes.
 *
 * Shapes: images are uint8 RGB HWC (h rows of w * 3 bytes); the batch tensor is (n, 3, s, s)
 * NCHW, uint8 or float / 255, or its bf16 space-to-depth (kern_augment.h). Everything is
 * overwritten (=), nothing accumulates; no gradients.
 *
 * The arithmetic reproduces OpenCV 4.x's uint8 code paths (modules/imgproc imgwarp.cpp,
 * color_hsv.simd.hpp), as trainer/data/augment.h documents and tests/trainer/test_augment.c checks
 * against OpenCV 4.6:
 *   warp, INTER_LINEAR, BORDER_CONSTANT: affine source coordinates are fixed point with
 *     AB_BITS = 10: per destination row X0 = round((m1*y + m2) * 1024) + 16, per column
 *     adelta = round(m0*x*1024), X = (X0 + adelta) >> 5 (5 fraction bits); round() is cvRound
 *     (nearest, ties to even). Perspective: per block of bw0 = 1024 / min(h, 16) columns
 *     X0 = m0*x + m1*y + m2 (W0, Y0 alike) at the block's first column, then per pixel
 *     W = 32 / (W0 + m6*x1), X = round(clamp((X0 + m0*x1) * W)). Integer source pixel sx = X >> 5
 *     (saturated to int16), fraction fx = X & 31; weights (32-fy)(32-fx), (32-fy)fx, fy(32-fx),
 *     fy fx (OpenCV's table divided by 32) and (sum + 512) >> 10. Taps outside the source read
 *     the border value.
 *   HSV: RGB -> HSV integer (hsv_shift 12, tables sdiv, hdiv), LUTs, HSV -> RGB in float with
 *     OpenCV's AVX2 build's fused multiply-adds (computed exactly in double here, rounded once)
 *     and its SIMD loop's truncation on each row's first w / 32 * 32 pixels, rounding after.
 * The float and double code must not be contracted into FMAs (the kern library is built with
 * -ffp-contract=fast for its other loops): the pragmas below turn contraction off in this file.
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kern_augment_px.h"
#include "kern_lowp_common.h"
#include "kern_s2d_common.h"

/* ---- argument checks shared with the CUDA twins ----------------------------------------- */

int kern_aug_canvas_check(const struct kern_aug_canvas *c)
{
    if (!c || bad_size(c->w, c->h) || c->n_paste < 0 || c->n_paste > KERN_AUG_MAX_PASTE)
        return -EINVAL;
    for (int i = 0; i < c->n_paste; i++) {
        const struct kern_aug_paste *p = &c->paste[i];
        if (p->w < 0 || p->h < 0) return -EINVAL;
        if (p->w == 0 || p->h == 0) continue;
        /* widened: a hostile descriptor must not overflow the sums */
        if (!p->src || bad_size(p->src_w, p->src_h) || p->src_x < 0 || p->src_y < 0 ||
            p->dst_x < 0 || p->dst_y < 0 || (long long)p->src_x + p->w > p->src_w ||
            (long long)p->src_y + p->h > p->src_h || (long long)p->dst_x + p->w > c->w ||
            (long long)p->dst_y + p->h > c->h)
            return -EINVAL;
    }
    return 0;
}

int kern_aug_sample_check(const struct kern_aug_sample *smp, int s)
{
    if (!smp || bad_size(s, s) || (smp->mixup != 0 && smp->mixup != 1)) return -EINVAL;
    for (int k = 0; k < 1 + smp->mixup; k++) {
        if (kern_aug_canvas_check(&smp->canvas[k]) < 0) return -EINVAL;
        for (int i = 0; i < 9; i++)
            if (!isfinite(smp->inv[k][i])) return -EINVAL;
    }
    if (smp->mixup && !(smp->mixup_ratio >= 0 && smp->mixup_ratio <= 1)) return -EINVAL;
    return 0;
}

/* ---- matrices and LUTs (host) ----------------------------------------------------------- */

void kern_aug_warp_invert(const double M0[9], int perspective, double t[9])
{
    if (!perspective) {
        double M[6];
        memcpy(M, M0, sizeof M);
        /* cv::warpAffine without WARP_INVERSE_MAP */
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
        memcpy(t, M, sizeof M);
        t[6] = 0, t[7] = 0, t[8] = 1;
        return;
    }
    /* cv::invert(DECOMP_LU) of a 3x3: cofactors over a double determinant */
    const double *m = M0;
#define S(i, j) m[(i)*3 + (j)]
    double d = S(0, 0) * (S(1, 1) * S(2, 2) - S(1, 2) * S(2, 1)) -
               S(0, 1) * (S(1, 0) * S(2, 2) - S(1, 2) * S(2, 0)) +
               S(0, 2) * (S(1, 0) * S(2, 1) - S(1, 1) * S(2, 0));
    if (d == 0) {
        memset(t, 0, 9 * sizeof *t);
        return;
    }
    d = 1. / d;
    double r[9];
    r[0] = (S(1, 1) * S(2, 2) - S(1, 2) * S(2, 1)) * d;
    r[1] = (S(0, 2) * S(2, 1) - S(0, 1) * S(2, 2)) * d;
    r[2] = (S(0, 1) * S(1, 2) - S(0, 2) * S(1, 1)) * d;
    r[3] = (S(1, 2) * S(2, 0) - S(1, 0) * S(2, 2)) * d;
    r[4] = (S(0, 0) * S(2, 2) - S(0, 2) * S(2, 0)) * d;
    r[5] = (S(0, 2) * S(1, 0) - S(0, 0) * S(1, 2)) * d;
    r[6] = (S(1, 0) * S(2, 1) - S(1, 1) * S(2, 0)) * d;
    r[7] = (S(0, 1) * S(2, 0) - S(0, 0) * S(2, 1)) * d;
    r[8] = (S(0, 0) * S(1, 1) - S(0, 1) * S(1, 0)) * d;
#undef S
    memcpy(t, r, sizeof r); /* t may alias M0 */
}

/* numpy's float remainder: fmod, moved to the divisor's sign. */
static double py_fmod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0) {
        if ((b < 0) != (m < 0)) m += b;
    } else {
        m = copysign(0.0, b);
    }
    return m;
}

void kern_aug_hsv_lut_init(struct kern_aug_hsv_lut *lut, const double gain[3])
{
    for (int x = 0; x < 256; x++) {
        lut->h[x] = trunc_u8(py_fmod((double)x * gain[0], 180.0));
        lut->s[x] = trunc_u8(fmin(fmax((double)x * gain[1], 0.0), 255.0));
        lut->v[x] = trunc_u8(fmin(fmax((double)x * gain[2], 0.0), 255.0));
    }
}

/* ---- paste ------------------------------------------------------------------------------- */

int kern_ref_aug_paste(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT canvas,
                       const struct kern_aug_canvas *c)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!canvas || kern_aug_canvas_check(c) < 0, -EINVAL);
    const size_t cstep = (size_t)c->w * 3;
    memset(canvas, KERN_AUG_FILL, cstep * (size_t)c->h);
    for (int i = 0; i < c->n_paste; i++) {
        const struct kern_aug_paste *p = &c->paste[i];
        const size_t tstep = (size_t)p->src_w * 3, len = (size_t)p->w * 3;
        for (int y = 0; y < p->h; y++)
            memcpy(canvas + (size_t)(p->dst_y + y) * cstep + (size_t)p->dst_x * 3,
                   p->src + (size_t)(p->src_y + y) * tstep + (size_t)p->src_x * 3, len);
    }
    return 0;
}

/* ---- warp -------------------------------------------------------------------------------- */

/* A pixel with a tap outside the source (remapBilinear's BORDER_CONSTANT path). */
static void bilinear_border(const uint8_t *src, int sw, int sh, size_t sstep, int sx, int sy,
                            int fx, int fy, uint8_t bv, uint8_t *d)
{
    if (sx >= sw || sx + 1 < 0 || sy >= sh || sy + 1 < 0) {
        d[0] = d[1] = d[2] = bv;
        return;
    }
    const struct taps_w w = taps_weights(fx, fy);
    const bool x0in = sx >= 0, x1in = sx + 1 < sw, y0in = sy >= 0, y1in = sy + 1 < sh;
    const uint8_t bvs[3] = { bv, bv, bv };
    const uint8_t *row0 = src + (size_t)(y0in ? sy : 0) * sstep;
    const uint8_t *row1 = src + (size_t)(y1in ? sy + 1 : 0) * sstep;
    const uint8_t *v0 = x0in && y0in ? row0 + (size_t)sx * 3 : bvs;
    const uint8_t *v1 = x1in && y0in ? row0 + (size_t)(sx + 1) * 3 : bvs;
    const uint8_t *v2 = x0in && y1in ? row1 + (size_t)sx * 3 : bvs;
    const uint8_t *v3 = x1in && y1in ? row1 + (size_t)(sx + 1) * 3 : bvs;
    for (int k = 0; k < 3; k++)
        d[k] = blend4(v0[k], v1[k], v2[k], v3[k], w);
}

static inline void bilinear_in(const uint8_t *s0, size_t sstep, int fx, int fy, uint8_t *d)
{
    const struct taps_w w = taps_weights(fx, fy);
    const uint8_t *s1 = s0 + sstep;
    d[0] = blend4(s0[0], s0[3], s1[0], s1[3], w);
    d[1] = blend4(s0[1], s0[4], s1[1], s1[4], w);
    d[2] = blend4(s0[2], s0[5], s1[2], s1[5], w);
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
    const struct taps_w w = taps_weights(fx, fy);
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
    __m128i sum = _mm_add_epi32(_mm_madd_epi16(ta, _mm_set1_epi32(w.w0 | w.w1 << 16)),
                                _mm_madd_epi16(tb, _mm_set1_epi32(w.w2 | w.w3 << 16)));
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

int kern_ref_aug_warp(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT dst, int dst_w, int dst_h,
                      const uint8_t *KERN_RESTRICT src, int src_w, int src_h, const double inv[9],
                      int perspective, uint8_t border)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!dst || !src || !inv || bad_size(src_w, src_h) || bad_size(dst_w, dst_h),
                   -EINVAL);
    const double *M = inv;
    const size_t sstep = (size_t)src_w * 3;
    if (perspective) {
        const int bw0 = persp_block(dst_w, dst_h);
        for (int y = 0; y < dst_h; y++) {
            uint8_t *d = dst + (size_t)y * dst_w * 3;
            for (int x = 0; x < dst_w; x += bw0) {
                const int bw = dst_w - x < bw0 ? dst_w - x : bw0;
                for (int x1 = 0; x1 < bw; x1++, d += 3) {
                    int X, Y;
                    persp_xy(M, x, y, x1, &X, &Y);
                    bilinear_px(src, src_w, src_h, sstep, X, Y, border, d, x + x1 == dst_w - 1);
                }
            }
        }
        return 0;
    }
    /* adelta/bdelta per column, in blocks that fit on the stack */
    enum { COLS = 1024 };
    int adelta[COLS], bdelta[COLS];
    for (int xb = 0; xb < dst_w; xb += COLS) {
        const int nx = dst_w - xb < COLS ? dst_w - xb : COLS;
        for (int i = 0; i < nx; i++) {
            adelta[i] = affine_col(M[0], xb + i);
            bdelta[i] = affine_col(M[3], xb + i);
        }
        for (int y = 0; y < dst_h; y++) {
            const int X0 = affine_row(M[1], M[2], y), Y0 = affine_row(M[4], M[5], y);
            uint8_t *d = dst + ((size_t)y * dst_w + xb) * 3;
            for (int i = 0; i < nx; i++, d += 3)
                bilinear_px(src, src_w, src_h, sstep, affine_sum(X0, adelta[i]),
                            affine_sum(Y0, bdelta[i]), border, d, xb + i == dst_w - 1);
        }
    }
    return 0;
}

/* ---- HSV --------------------------------------------------------------------------------- */

/* 1 - a*b with one rounding (OpenCV's fused multiply-add): a*b is exact in double. */
static inline float fused_1_minus(float a, float b)
{
    return (float)(1.0 - (double)a * (double)b);
}

/* The tables of kern_augment_px.h */
int kern_aug_sdiv[256], kern_aug_hdiv[256];
float kern_aug_hsv_fac[180][256][3];
float kern_aug_u8_f32[256];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void)
{
    for (int i = 0; i < 256; i++)
        kern_aug_u8_f32[i] = (float)i / 255.0f;
    kern_aug_sdiv[0] = kern_aug_hdiv[0] = 0;
    for (int i = 1; i < 256; i++) {
        kern_aug_sdiv[i] = cv_round((255 << 12) / (1. * i));
        kern_aug_hdiv[i] = cv_round((180 << 12) / (6. * i));
    }
    /* tab index per sector for (r, g, b): OpenCV's sector_data with blue and red swapped */
    static const uint8_t sector_rgb[6][3] = { { 0, 3, 1 }, { 2, 0, 1 }, { 1, 0, 3 },
                                              { 1, 2, 0 }, { 3, 1, 0 }, { 0, 1, 2 } };
    const float hscale = 6.0f / 180;
    for (int hh = 0; hh < 180; hh++) {
        /* H' < 180, so h * hscale < 6: the sector needs no wrap */
        const float hf = (float)hh * hscale;
        const float sector = truncf(hf), f = hf - sector;
        const uint8_t *map = sector_rgb[(int)sector];
        for (int s = 0; s < 256; s++) {
            const float ss = (float)s * (1.0f / 255.0f);
            const float tab[4] = { 1.f, 1.f - ss, fused_1_minus(ss, f),
                                   fused_1_minus(ss, 1.f - f) };
            for (int c = 0; c < 3; c++)
                kern_aug_hsv_fac[hh][s][c] = tab[map[c]];
        }
    }
}

void kern_aug_tables_init(void)
{
    pthread_once(&g_tables_once, tables_init);
}

/* n pixels of a row in place. Runs of one colour (the 114 border, flat regions) cost a compare. */
static void hsv_span(uint8_t *p, int n, bool truncate, const struct kern_aug_hsv_lut *lut)
{
    int last = -1;
    uint8_t last_out[3] = { 0, 0, 0 };
    for (int x = 0; x < n; x++, p += 3) {
        const int key = p[0] << 16 | p[1] << 8 | p[2];
        if (key != last) {
            last = key;
            hsv_px(p[0], p[1], p[2], lut, truncate, last_out);
        }
        p[0] = last_out[0], p[1] = last_out[1], p[2] = last_out[2];
    }
}

bool kern_aug_lut_ok(const struct kern_aug_hsv_lut *lut)
{
    for (int i = 0; i < 180; i++)
        if (lut->h[i] >= 180) return false;
    return true;
}

int kern_ref_aug_hsv(struct kern_ctx *ctx, uint8_t *img, int w, int h,
                     const struct kern_aug_hsv_lut *lut)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!img || !lut || bad_size(w, h) || !kern_aug_lut_ok(lut), -EINVAL);
    kern_aug_tables_init();
    const int simd_end = w / HSV_SIMD_BLOCK * HSV_SIMD_BLOCK;
    for (int y = 0; y < h; y++) {
        uint8_t *row = img + (size_t)y * (size_t)w * 3;
        hsv_span(row, simd_end, true, lut);
        hsv_span(row + (size_t)simd_end * 3, w - simd_end, false, lut);
    }
    return 0;
}

/* ---- flips, mixup, layout ---------------------------------------------------------------- */

int kern_ref_aug_flip(struct kern_ctx *ctx, uint8_t *img, int w, int h, int lr, int ud)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!img || bad_size(w, h), -EINVAL);
    const size_t step = (size_t)w * 3;
    if (ud) {
        uint8_t tmp[256 * 3];
        for (int y = 0; y < h / 2; y++) {
            uint8_t *a = img + (size_t)y * step, *b = img + (size_t)(h - 1 - y) * step;
            for (size_t o = 0; o < step; o += sizeof tmp) {
                const size_t len = step - o < sizeof tmp ? step - o : sizeof tmp;
                memcpy(tmp, a + o, len);
                memcpy(a + o, b + o, len);
                memcpy(b + o, tmp, len);
            }
        }
    }
    if (lr) {
        for (int y = 0; y < h; y++) {
            uint8_t *a = img + (size_t)y * step, *b = a + (size_t)(w - 1) * 3;
            for (; a < b; a += 3, b -= 3) {
                uint8_t t[3];
                memcpy(t, a, 3);
                memcpy(a, b, 3);
                memcpy(b, t, 3);
            }
        }
    }
    return 0;
}

int kern_ref_aug_mixup(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT img,
                       const uint8_t *KERN_RESTRICT img2, size_t n, double r)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!img || !img2 || !(r >= 0 && r <= 1), -EINVAL);
    const double r2 = 1 - r;
    for (size_t i = 0; i < n; i++)
        img[i] = mix_px(img[i], img2[i], r, r2);
    return 0;
}

int kern_ref_aug_to_nchw(struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype,
                         const uint8_t *KERN_RESTRICT hwc, int w, int h)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(
        !dst || !hwc || bad_size(w, h) || (dtype != KERN_AUG_U8 && dtype != KERN_AUG_F32), -EINVAL);
    const size_t plane = (size_t)h * (size_t)w;
    if (dtype == KERN_AUG_F32) {
        kern_aug_tables_init();
        float *r = dst, *g = r + plane, *b = g + plane;
        for (size_t i = 0; i < plane; i++) {
            r[i] = kern_aug_u8_f32[hwc[3 * i]];
            g[i] = kern_aug_u8_f32[hwc[3 * i + 1]];
            b[i] = kern_aug_u8_f32[hwc[3 * i + 2]];
        }
    } else {
        uint8_t *r = dst, *g = r + plane, *b = g + plane;
        for (size_t i = 0; i < plane; i++) {
            r[i] = hwc[3 * i];
            g[i] = hwc[3 * i + 1];
            b[i] = hwc[3 * i + 2];
        }
    }
    return 0;
}

/* ---- fused batch ------------------------------------------------------------------------- */

size_t kern_aug_image_bytes(int dtype, int h, int w)
{
    if (bad_size(w, h)) return 0;
    const size_t px = (size_t)h * (size_t)w;
    switch (dtype) {
    case KERN_AUG_U8:
        return 3 * px;
    case KERN_AUG_F32:
        return 3 * px * sizeof(float);
    case KERN_AUG_BF16_S2D_NHWC:
    case KERN_AUG_BF16_S2D_NCHW:
        return h % 2 || w % 2 ? 0 : px / 4 * KERN_AUG_S2D_C * sizeof(uint16_t);
    default:
        return 0;
    }
}

static bool is_s2d(int dtype)
{
    return dtype == KERN_AUG_BF16_S2D_NHWC || dtype == KERN_AUG_BF16_S2D_NCHW;
}

uint8_t kern_aug_pixel(const void *img, int dtype, int h, int w, int ch, int y, int x)
{
    const size_t plane = (size_t)h * (size_t)w, at = (size_t)ch * plane + (size_t)y * w + x;
    float v;
    if (dtype == KERN_AUG_U8) return ((const uint8_t *)img)[at];
    if (dtype == KERN_AUG_F32) {
        v = ((const float *)img)[at];
    } else {
        const int layout = dtype == KERN_AUG_BF16_S2D_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
        v = kern_bf16_to_f32(((const uint16_t *)img)[kern_s2d_px(
            layout, (size_t)h, (size_t)w, 3, KERN_AUG_S2D_C, (size_t)y, (size_t)x, (size_t)ch)]);
    }
    v *= 255.0f;
    return (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : lrintf(v));
}

struct batch_job {
    void *dst;
    int dtype, s;
    const struct kern_aug_sample *samples;
    int n;
    uint8_t *scratch; /* space-to-depth: a uint8 image per thread */
};

/* A (3, s, s) uint8 image into its bf16 space-to-depth, every element written: the bits of
 * kern_ref_cast_f32_lowp_s2d over the float32 image. */
static void store_s2d(uint16_t *dst, int dtype, int s, const uint8_t *planes)
{
    const int layout = dtype == KERN_AUG_BF16_S2D_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
    const size_t n = (size_t)s * (size_t)s, ss = (size_t)s;
    memset(dst, 0, n / 4 * KERN_AUG_S2D_C * sizeof *dst); /* the pad channels */
    for (size_t k = 0; k < 3; k++)
        for (size_t y = 0; y < ss; y++)
            for (size_t x = 0; x < ss; x++)
                dst[kern_s2d_px(layout, ss, ss, 3, KERN_AUG_S2D_C, y, x, k)] =
                    kern_bf16_from_f32(kern_aug_u8_f32[planes[(k * ss + y) * ss + x]]);
}

static void batch_one(const struct batch_job *j, int i, uint8_t *scratch)
{
    void *const dst = (uint8_t *)j->dst + (size_t)i * kern_aug_image_bytes(j->dtype, j->s, j->s);
    if (!is_s2d(j->dtype)) {
        kern_aug_sample_run(dst, j->dtype, j->s, j->s, &j->samples[i]);
        return;
    }
    kern_aug_sample_run(scratch, KERN_AUG_U8, j->s, j->s, &j->samples[i]);
    store_s2d(dst, j->dtype, j->s, scratch);
}

static void batch_task(void *arg, int w, int nw)
{
    const struct batch_job *j = arg;
    size_t lo, hi;
    kern_share((size_t)j->n, w, nw, &lo, &hi);
    uint8_t *const scratch = j->scratch ? j->scratch + (size_t)w * 3 * j->s * j->s : NULL;
    for (size_t i = lo; i < hi; i++)
        batch_one(j, (int)i, scratch);
}

int kern_ref_aug_batch(struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype, int s,
                       const struct kern_aug_sample *samples, int n)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!dst || !samples || n < 1 || !kern_aug_image_bytes(dtype, s, s), -EINVAL);
    for (int i = 0; i < n; i++) {
        KERN_RETURN_IF(kern_aug_sample_check(&samples[i], s) < 0, -EINVAL);
        KERN_RETURN_IF(samples[i].hsv && !kern_aug_lut_ok(&samples[i].lut), -EINVAL);
    }
    kern_aug_tables_init();
    const size_t work = (size_t)n * (size_t)s * (size_t)s;
    struct batch_job j = { dst, dtype, s, samples, n, NULL };
    if (is_s2d(dtype)) {
        j.scratch = malloc((size_t)kern_parallel_width(ctx, work) * 3 * (size_t)s * (size_t)s);
        KERN_RETURN_IF(!j.scratch, -ENOMEM);
    }
    /* images are independent: the split never changes a byte */
    kern_parallel(ctx, batch_task, &j, work);
    free(j.scratch);
    return 0;
}
