/*
 * Per-pixel operations of augment.h: augment_hsv, mixup and the flips.
 *
 * HSV follows OpenCV 4.x's 8-bit cvtColor (modules/imgproc/src/color_hsv.simd.hpp), checked
 * exhaustively against Debian's OpenCV 4.6 (all 2^24 colours one way, all 180*256*256 HSV
 * triples the other):
 *   RGB -> HSV (RGB2HSV_b, hrange 180): integer, hsv_shift = 12, with the tables
 *     sdiv[v] = round((255 << 12) / v) and hdiv[d] = round((180 << 12) / (6 d)); for
 *     v = max, d = v - min: S = (d * sdiv[v] + 2^11) >> 12 and
 *     H = (h * hdiv[d] + 2^11) >> 12 (+180 if negative), h = g - b (v == r), b - r + 2d
 *     (v == g), r - g + 4d otherwise. SIMD and scalar loops agree.
 *   HSV -> RGB (HSV2RGB_b): float: h = H * (6.f / 180), s = S * (1.f / 255), v = V * (1.f / 255),
 *     sector = trunc(h), f = h - sector, p = v(1 - s), q = v(1 - s f), t = v(1 - s(1 - f)).
 *     OpenCV's AVX2 build contracts 1 - s f and 1 - s(1 - f) into fused multiply-adds (one
 *     rounding: computed here exactly in double, as s*f is exact there, then rounded once). Its
 *     SIMD loop, which takes the row in blocks of 4 vectors (32 pixels with AVX2), converts
 *     x * 255.f to uint8 by truncation; the scalar loop for the rest of the row rounds to
 *     nearest. Both are reproduced; the SIMD blocks match OpenCV bit for bit, the scalar tail
 *     within 1 for 172 of the 35M HSV triples.
 * The colour of a pixel depends only on its (r, g, b), so working on RGB instead of BGR only
 * swaps which byte is read as blue.
 */
#include "augment.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline int cv_roundf(float v)
{
#if defined(__SSE2__)
    return _mm_cvtss_si32(_mm_set_ss(v));
#else
    return (int)lrintf(v);
#endif
}

static inline int cv_round(double v)
{
#if defined(__SSE2__)
    return _mm_cvtsd_si32(_mm_set_sd(v));
#else
    return (int)lrint(v);
#endif
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

/* numpy's float -> uint8 astype: C truncation (the values here are in [0, 255]). */
static uint8_t trunc_u8(double v)
{
    return (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : (int)v);
}

/* OpenCV's HSV -> RGB block: pixels per SIMD iteration of HSV2RGB_b with AVX2 (4 x 8 lanes). */
#define HSV_SIMD_BLOCK 32

/* 1 - a*b with one rounding (a fused multiply-add): a*b is exact in double. */
static inline float fused_1_minus(float a, float b)
{
    return (float)(1.0 - (double)a * (double)b);
}

/*
 * HSV -> RGB factors per (H', S'): the channel values are v * fac (one float rounding, then
 * * 255.f and a conversion), with fac = 1 (tab0), 1 - s (tab1), 1 - s f and 1 - s (1 - f)
 * (tab2, tab3; fused) picked per channel by the sector of H'. 180 x 256 x 3 floats (540 KiB),
 * built once on first use: they do not depend on the gains.
 */
static float g_hsv_fac[180][256][3];
static pthread_once_t g_hsv_once = PTHREAD_ONCE_INIT;

static void hsv_fac_init(void)
{
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
                g_hsv_fac[hh][s][c] = tab[map[c]];
        }
    }
}

/*
 * n pixels of a row. truncate: OpenCV's SIMD conversion (truncation) instead of its scalar one
 * (round to nearest). Channel values v * fac * 255.f lie in [0, 255] (v, fac <= 1), so the
 * conversions need no clamp.
 */
static inline void hsv_span(uint8_t *p, int n, bool truncate, const uint8_t *lut_h,
                            const uint8_t *lut_s, const float *lut_v, const int *sdiv,
                            const int *hdiv)
{
    /* The previous pixel's colour and result: runs of one colour (the 114 border, flat
     * regions) cost a compare. */
    int last = -1;
    uint8_t last_out[3] = { 0, 0, 0 };
    for (int x = 0; x < n; x++, p += 3) {
        const int r = p[0], g = p[1], b = p[2];
        const int key = r << 16 | g << 8 | b;
        if (key == last) {
            p[0] = last_out[0], p[1] = last_out[1], p[2] = last_out[2];
            continue;
        }
        last = key;
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
        /* hh is in [0, 180): it indexes the LUT as OpenCV's uint8 H does */
        const float *fac = g_hsv_fac[lut_h[hh]][lut_s[s]];
        const float vv = lut_v[v];
        const float o0 = vv * fac[0] * 255.0f, o1 = vv * fac[1] * 255.0f, o2 = vv * fac[2] * 255.0f;
        if (truncate) {
            p[0] = (uint8_t)(int)o0, p[1] = (uint8_t)(int)o1, p[2] = (uint8_t)(int)o2;
        } else {
            p[0] = (uint8_t)cv_roundf(o0), p[1] = (uint8_t)cv_roundf(o1);
            p[2] = (uint8_t)cv_roundf(o2);
        }
        last_out[0] = p[0], last_out[1] = p[1], last_out[2] = p[2];
    }
}

void trn_aug_hsv(uint8_t *rgb, int w, int h, const struct trn_aug_hsv_draws *d)
{
    if (!rgb || !d || !d->apply || w < 1 || h < 1) return;
    pthread_once(&g_hsv_once, hsv_fac_init);
    uint8_t lut_h[256], lut_s[256];
    float lut_v[256]; /* V' / 255 as the float OpenCV multiplies with */
    for (int x = 0; x < 256; x++) {
        lut_h[x] = trunc_u8(py_fmod((double)x * d->gain[0], 180.0));
        lut_s[x] = trunc_u8(fmin(fmax((double)x * d->gain[1], 0.0), 255.0));
        lut_v[x] =
            (float)trunc_u8(fmin(fmax((double)x * d->gain[2], 0.0), 255.0)) * (1.0f / 255.0f);
    }
    int sdiv[256], hdiv[256];
    sdiv[0] = hdiv[0] = 0;
    for (int i = 1; i < 256; i++) {
        sdiv[i] = cv_round((255 << 12) / (1. * i));
        hdiv[i] = cv_round((180 << 12) / (6. * i));
    }
    const int simd_end = w / HSV_SIMD_BLOCK * HSV_SIMD_BLOCK;
    for (int y = 0; y < h; y++) {
        uint8_t *row = rgb + (size_t)y * (size_t)w * 3;
        hsv_span(row, simd_end, true, lut_h, lut_s, lut_v, sdiv, hdiv);
        hsv_span(row + (size_t)simd_end * 3, w - simd_end, false, lut_h, lut_s, lut_v, sdiv, hdiv);
    }
}

void trn_aug_mixup(uint8_t *img, const uint8_t *img2, size_t n, double r)
{
    const double r2 = 1 - r;
    for (size_t i = 0; i < n; i++)
        img[i] = trunc_u8(img[i] * r + img2[i] * r2);
}

void trn_aug_flip_lr(uint8_t *img, int w, int h, float *rows, int n)
{
    if (img && w > 0 && h > 0) {
        for (int y = 0; y < h; y++) {
            uint8_t *a = img + (size_t)y * (size_t)w * 3, *b = a + (size_t)(w - 1) * 3;
            for (; a < b; a += 3, b -= 3) {
                uint8_t t[3];
                memcpy(t, a, 3);
                memcpy(a, b, 3);
                memcpy(b, t, 3);
            }
        }
    }
    for (int i = 0; i < n; i++)
        rows[5 * i + 1] = 1 - rows[5 * i + 1];
}

void trn_aug_flip_ud(uint8_t *img, int w, int h, float *rows, int n)
{
    if (img && w > 0 && h > 0) {
        const size_t step = (size_t)w * 3;
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
    for (int i = 0; i < n; i++)
        rows[5 * i + 2] = 1 - rows[5 * i + 2];
}
