/*
 * cv2.resize for 3-channel uint8 images, bit-exact with OpenCV 4.x (modules/imgproc/src/
 * resize.cpp, the CPU path without IPP, which is what Debian's build and, for these cases, the
 * opencv-python wheels run). Facts taken from OpenCV and reproduced here:
 *
 * - Same size: a copy. scale = 1/(dst/src) in double per axis; "integer scale" means
 *   |scale - round(scale)| < DBL_EPSILON on both axes.
 * - INTER_LINEAR with an integer scale of exactly 2 on both axes runs INTER_AREA instead.
 * - INTER_AREA with both scales >= 1: with integer scales, block averages: for 2x2
 *   (a+b+c+d+2)>>2, otherwise round_half_even(sum * (1.f/area)); with other scales, the float
 *   "decimate" tables (computeResizeAreaTab) applied row by row, horizontal sums in table order,
 *   then sum += beta * row, rounded half-even and saturated.
 * - INTER_LINEAR (and INTER_AREA with a scale < 1, through its "area_mode" coefficients):
 *   separable, 11-bit fixed point. Per destination column x: f = (float)((x+0.5)*scale - 0.5)
 *   (area_mode: sx = floor(x*scale), f = (float)((x+1) - (sx+1)/scale), wrapped to [0,1)),
 *   sx = floor(f), f -= sx, clamped at the borders; weights are round_half_even((1-f)*2048) and
 *   round_half_even(f*2048) from the float values. A horizontal pass gives int32 rows
 *   s0*a0 + s1*a1; rows are then combined as (((b0*(r0>>4))>>16) + ((b1*(r1>>4))>>16) + 2)>>2
 *   with the rows' indices clamped (weights are not changed at the top and bottom borders).
 *
 * All arithmetic stays exact integer or the same sequence of float operations as OpenCV (C11
 * float evaluation, no contraction), so every pixel matches. The SSE2 kernels compute the
 * same integers and floats lane by lane; tests compare them with the scalar code.
 */
#include "image.h"
#include "image_internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define IMAGE_HAVE_SSE2 1
#else
#define IMAGE_HAVE_SSE2 0
#endif
/* AVX2 versions of the two INTER_LINEAR passes, picked at run time (the build targets plain
 * x86-64): the same integer operations lane by lane, so the same bytes as SSE2 and scalar. */
#if IMAGE_HAVE_SSE2 && defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define IMAGE_HAVE_AVX2 1
#define IMAGE_AVX2      __attribute__((target("avx2")))
#else
#define IMAGE_HAVE_AVX2 0
#endif

#define COEF_BITS  11
#define COEF_SCALE (1 << COEF_BITS)
#define ALIGN      64

enum kind { K_COPY, K_LINEAR, K_AREA_MODE_LINEAR, K_AREA_FAST2, K_AREA_FAST, K_AREA };

struct plan {
    enum kind kind;
    double scale_x, scale_y;         /* src/dst per axis: 1/(dst/src) as OpenCV computes it */
    double inv_scale_x, inv_scale_y; /* dst/src */
    int iscale_x, iscale_y;          /* round(scale) for the integer-scale paths */
};

/* OpenCV's cvRound / saturate_cast<int>(double): nearest, ties to even (default FP mode). */
static int round_even_d(double v)
{
    return (int)lrint(v);
}

static int cv_floor_d(double v)
{
    const int i = (int)v;
    return i - (i > v);
}

static int cv_floor_f(float v)
{
    const int i = (int)v;
    return i - (i > v);
}

static int cv_ceil_d(double v)
{
    const int i = (int)v;
    return i + (i < v);
}

/* cvRound(float): nearest, ties to even. OpenCV uses cvtss2si on x86; so do we (lrintf is a
 * libm call at -O2), with lrintf elsewhere. Inputs here are far inside the int range. */
static int round_even_f(float v)
{
#if IMAGE_HAVE_SSE2
    return _mm_cvtss_si32(_mm_set_ss(v));
#else
    return (int)lrintf(v);
#endif
}

/* saturate_cast<short>(float) */
static int16_t sat_s16(float v)
{
    const int r = round_even_f(v);
    return (int16_t)(r < INT16_MIN ? INT16_MIN : r > INT16_MAX ? INT16_MAX : r);
}

/* saturate_cast<uchar>(float) */
static uint8_t sat_u8f(float v)
{
    const int r = round_even_f(v);
    return (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
}

static void make_plan(struct plan *p, int dw, int dh, int sw, int sh, enum pack_image_interp interp)
{
    memset(p, 0, sizeof *p);
    if (dw == sw && dh == sh) {
        p->kind = K_COPY;
        return;
    }
    p->inv_scale_x = (double)dw / sw;
    p->inv_scale_y = (double)dh / sh;
    p->scale_x = 1. / p->inv_scale_x;
    p->scale_y = 1. / p->inv_scale_y;
    p->iscale_x = round_even_d(p->scale_x);
    p->iscale_y = round_even_d(p->scale_y);
    const bool area_fast = fabs(p->scale_x - p->iscale_x) < DBL_EPSILON &&
                           fabs(p->scale_y - p->iscale_y) < DBL_EPSILON;
    if (interp == PACK_IMAGE_INTERP_LINEAR && area_fast && p->iscale_x == 2 && p->iscale_y == 2)
        interp = PACK_IMAGE_INTERP_AREA;
    if (interp == PACK_IMAGE_INTERP_AREA && p->scale_x >= 1 && p->scale_y >= 1) {
        /* An integer scale within DBL_EPSILON means the sizes divide exactly (a remainder r
         * would move the ratio by r/dst >= 2^-15), so the blocks are always whole. */
        if (area_fast)
            p->kind = p->iscale_x == 2 && p->iscale_y == 2 ? K_AREA_FAST2 : K_AREA_FAST;
        else
            p->kind = K_AREA;
        return;
    }
    p->kind = interp == PACK_IMAGE_INTERP_AREA ? K_AREA_MODE_LINEAR : K_LINEAR;
}

/* ---- workspace layout ---------------------------------------------------------------------- */

struct bump {
    uint8_t *base; /* NULL when only measuring */
    size_t used;
};

static void *take(struct bump *b, size_t bytes)
{
    b->used = (b->used + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    void *p = b->base ? b->base + b->used : NULL;
    b->used += bytes;
    return p;
}

/* Upper bound on decimate-table entries for one axis: each destination cell covers its whole
 * source pixels plus at most two partial ones (OpenCV asserts k < 2*ssize). */
static size_t area_tab_cap(int s, int d)
{
    return 2 * (size_t)s + 3 * (size_t)d + 4;
}

struct linear_ws {
    int32_t *xo0, *xo1; /* byte offsets of the two source pixels of each destination column */
    int32_t *xa;        /* (a0 & 0xffff) | a1 << 16 per column */
    int32_t *yr0, *yr1; /* clamped source rows of each destination row */
    int16_t *yb;        /* b0, b1 per destination row */
    int16_t *rows[2];   /* horizontally resized rows, 3*dw + 8 (the column stores spill) */
    /* The AVX2 horizontal pass by shuffle tables: output values (3 per column) in groups of
     * four, each group's sources within the 16 source bytes at gbase[g]; gmask picks its
     * (s0, s1) byte pairs as 16-bit lanes, gw holds the column weights for madd. */
    int32_t *gbase;
    uint8_t *gmask;
    int32_t *gw;
    int gpairs; /* pairs of groups covered, counted from the row start (the groups that the byte
                 * tables below cover are not built); the rest go column by column */
    /* Ahead of those, where eight output values take their sources from 16 bytes (enlarging,
     * and shrinking by up to ~1.5x: every image of a train split that is resized up), byte
     * tables for maddubs. Each weight a (0..2048) is split as a = 32*hi + lo, so s0*a0 + s1*a1
     * = 32*H + L with H = s0*hi0 + s1*hi1 and L = s0*lo0 + s1*lo1, both within int16, and the
     * stored (s0*a0 + s1*a1) >> 4 is exactly 2*H + (L >> 4) (32*H is a multiple of 16, L >=
     * 0): one shuffle and two maddubs per eight values, no widening to 32 bits and back. */
    int32_t *obase;
    uint8_t *omask, *ohi, *olo; /* 16 bytes per octet: (o0, o1) / (hi0, hi1) / (lo0, lo1) */
    int oblocks;                /* leading pairs of octets the byte tables cover */
};

#define AREA_PAD_MAX 4

struct area_ws {
    int32_t *xstart, *xsi; /* per column: entries [xstart[x], xstart[x+1]) of (xsi, xal) */
    float *xal;
    int32_t *ystart, *ysi;
    float *yal;
    float *buf, *sum; /* 3*dw + 4 floats each */
    /* The columns' entries padded to AREA_PAD_MAX each with weight 0 (adding 0 * s to a sum of
     * non-negative terms leaves it bit for bit), so the AVX2 pass runs a fixed count per column:
     * byte offsets and weights, pm entries per column; pm = 0 when a column has more. */
    int32_t *pxo;
    float *pal;
    int pm;
    int pend; /* first column whose 4-byte loads would pass the row end */
};

static void layout_linear(struct bump *b, struct linear_ws *w, int dw, int dh)
{
    w->xo0 = take(b, sizeof(int32_t) * (size_t)dw);
    w->xo1 = take(b, sizeof(int32_t) * (size_t)dw);
    w->xa = take(b, sizeof(int32_t) * (size_t)dw);
    w->yr0 = take(b, sizeof(int32_t) * (size_t)dh);
    w->yr1 = take(b, sizeof(int32_t) * (size_t)dh);
    w->yb = take(b, sizeof(int16_t) * 2 * (size_t)dh);
    for (int k = 0; k < 2; k++)
        w->rows[k] = take(b, sizeof(int16_t) * (3 * (size_t)dw + 8));
    const size_t groups = (3 * (size_t)dw + 3) / 4;
    w->gbase = take(b, sizeof(int32_t) * groups);
    w->gmask = take(b, 16 * groups);
    w->gw = take(b, sizeof(int32_t) * 4 * groups);
    const size_t octets = (3 * (size_t)dw + 7) / 8;
    w->obase = take(b, sizeof(int32_t) * octets);
    w->omask = take(b, 16 * octets);
    w->ohi = take(b, 16 * octets);
    w->olo = take(b, 16 * octets);
}

static void layout_area(struct bump *b, struct area_ws *w, int dw, int dh, int sw, int sh)
{
    const size_t xc = area_tab_cap(sw, dw), yc = area_tab_cap(sh, dh);
    w->xstart = take(b, sizeof(int32_t) * ((size_t)dw + 1));
    w->xsi = take(b, sizeof(int32_t) * xc);
    w->xal = take(b, sizeof(float) * xc);
    w->ystart = take(b, sizeof(int32_t) * ((size_t)dh + 1));
    w->ysi = take(b, sizeof(int32_t) * yc);
    w->yal = take(b, sizeof(float) * yc);
    w->buf = take(b, sizeof(float) * (3 * (size_t)dw + 4));
    w->sum = take(b, sizeof(float) * (3 * (size_t)dw + 4));
    w->pxo = take(b, sizeof(int32_t) * AREA_PAD_MAX * (size_t)dw);
    w->pal = take(b, sizeof(float) * AREA_PAD_MAX * (size_t)dw);
}

static size_t plan_work(const struct plan *p, int dw, int dh, int sw, int sh)
{
    struct bump b = { NULL, 0 };
    struct linear_ws lw;
    struct area_ws aw;
    switch (p->kind) {
    case K_LINEAR:
    case K_AREA_MODE_LINEAR:
        layout_linear(&b, &lw, dw, dh);
        break;
    case K_AREA:
        layout_area(&b, &aw, dw, dh, sw, sh);
        break;
    case K_AREA_FAST2:
    case K_AREA_FAST:
        take(&b, sizeof(uint16_t) * 3 * (size_t)sw);
        take(&b, sizeof(int32_t) * 3 * (size_t)dw);
        break;
    default:
        return 0;
    }
    return b.used + ALIGN; /* room to align the caller's pointer */
}

size_t pack_image_resize_work_size(int dst_w, int dst_h, int src_w, int src_h,
                                   enum pack_image_interp interp)
{
    if (dst_w < 1 || dst_h < 1 || src_w < 1 || src_h < 1) return 0;
    if (interp != PACK_IMAGE_INTERP_LINEAR && interp != PACK_IMAGE_INTERP_AREA) return 0;
    struct plan p;
    make_plan(&p, dst_w, dst_h, src_w, src_h, interp);
    return plan_work(&p, dst_w, dst_h, src_w, src_h);
}

/* ---- INTER_LINEAR (fixed point) ---------------------------------------------------------- */

/* Source position and fraction of destination index d, as OpenCV computes them. */
static void linear_pos(int d, double scale, double inv_scale, bool area_mode, int *s, float *f)
{
    if (!area_mode) {
        float fx = (float)((d + 0.5) * scale - 0.5);
        const int sx = cv_floor_f(fx);
        fx -= (float)sx;
        *s = sx, *f = fx;
    } else {
        const int sx = cv_floor_d(d * scale);
        float fx = (float)((d + 1) - (sx + 1) * inv_scale);
        fx = fx <= 0 ? 0.f : fx - (float)cv_floor_f(fx);
        *s = sx, *f = fx;
    }
}

/* The lowest source byte of output values [v0, v0 + n) of a row (value v is channel v % 3 of
 * column v / 3): not always the first value's, as (x, c=1) may follow (x', c=0). */
static int window_base(const struct linear_ws *w, int v0, int n)
{
    int base = INT32_MAX;
    for (int v = v0; v < v0 + n; v++) {
        const int o = w->xo0[v / 3] + v % 3;
        base = o < base ? o : base;
    }
    return base;
}

/* Value v's two source bytes relative to base; whether both lie in the 16 bytes from base. */
static bool window_offsets(const struct linear_ws *w, int v, int base, int *o0, int *o1)
{
    *o0 = w->xo0[v / 3] + v % 3 - base;
    *o1 = w->xo1[v / 3] + v % 3 - base;
    return *o0 >= 0 && *o1 >= 0 && *o0 < 16 && *o1 < 16;
}

static void linear_tables(const struct plan *p, struct linear_ws *w, int dw, int dh, int sw, int sh)
{
    const bool am = p->kind == K_AREA_MODE_LINEAR;
    for (int dx = 0; dx < dw; dx++) {
        int sx;
        float fx;
        linear_pos(dx, p->scale_x, p->inv_scale_x, am, &sx, &fx);
        int sx1 = sx + 1;
        if (sx < 0) fx = 0, sx = 0, sx1 = 1;
        if (sx >= sw - 1) fx = 0, sx = sw - 1, sx1 = sw - 1; /* single tap: S[sx] * 2048 */
        const int16_t a0 = sat_s16((1.f - fx) * COEF_SCALE), a1 = sat_s16(fx * COEF_SCALE);
        w->xo0[dx] = 3 * sx;
        w->xo1[dx] = 3 * sx1;
        w->xa[dx] = (int32_t)((uint32_t)(uint16_t)a0 | (uint32_t)(uint16_t)a1 << 16);
    }
    /* The byte tables first; the four-value tables only for the values they leave. */
    const int nv = 3 * dw, row = 3 * sw;
    w->oblocks = 0;
    for (int g = 0; 8 * g + 8 <= nv; g++) {
        const int base = window_base(w, 8 * g, 8);
        int ok = base + 16 <= row;
        for (int k = 0; k < 8 && ok; k++) {
            const int dx = (8 * g + k) / 3;
            int o0, o1;
            ok = window_offsets(w, 8 * g + k, base, &o0, &o1);
            const int a0 = (int16_t)(w->xa[dx] & 0xffff), a1 = (int16_t)((uint32_t)w->xa[dx] >> 16);
            /* Weights outside 0..2048 (none that OpenCV's formulas give) keep the 32-bit path. */
            ok = ok && a0 >= 0 && a1 >= 0 && a0 <= COEF_SCALE && a1 <= COEF_SCALE &&
                 (a0 >> 5) + (a1 >> 5) <= 64;
            const size_t at = 16 * (size_t)g + 2 * (size_t)k;
            w->omask[at] = (uint8_t)o0, w->omask[at + 1] = (uint8_t)o1;
            w->ohi[at] = (uint8_t)(a0 >> 5), w->ohi[at + 1] = (uint8_t)(a1 >> 5);
            w->olo[at] = (uint8_t)(a0 & 31), w->olo[at + 1] = (uint8_t)(a1 & 31);
        }
        if (!ok) break;
        w->obase[g] = base;
        if (g % 2 == 1) w->oblocks = (g + 1) / 2;
    }
    /* Shuffle tables: a pair of groups is usable while both groups' sources lie within 16
     * bytes that end inside the row (enlarging and mild shrinking; a shrink by more than about
     * 2.5x spreads four values over more than 16 bytes and stops the tables there). */
    w->gpairs = 2 * w->oblocks;
    for (int g = 4 * w->oblocks; 4 * g + 4 <= nv; g++) {
        const int base = window_base(w, 4 * g, 4);
        int ok = base + 16 <= row;
        for (int k = 0; k < 4 && ok; k++) {
            int o0, o1;
            ok = window_offsets(w, 4 * g + k, base, &o0, &o1);
            uint8_t *m = w->gmask + 16 * (size_t)g + 4 * k;
            m[0] = (uint8_t)o0, m[1] = 0x80, m[2] = (uint8_t)o1, m[3] = 0x80;
            w->gw[4 * g + k] = w->xa[(4 * g + k) / 3];
        }
        if (!ok) break;
        w->gbase[g] = base;
        if (g % 2 == 1) w->gpairs = (g + 1) / 2;
    }
    for (int dy = 0; dy < dh; dy++) {
        int sy;
        float fy;
        linear_pos(dy, p->scale_y, p->inv_scale_y, am, &sy, &fy);
        /* Only the row indices are clamped; the weights stay as computed. */
        w->yr0[dy] = sy < 0 ? 0 : sy > sh - 1 ? sh - 1 : sy;
        w->yr1[dy] = sy + 1 < 0 ? 0 : sy + 1 > sh - 1 ? sh - 1 : sy + 1;
        w->yb[2 * dy] = sat_s16((1.f - fy) * COEF_SCALE);
        w->yb[2 * dy + 1] = sat_s16(fy * COEF_SCALE);
    }
}

/*
 * The horizontal pass keeps each value as OpenCV's vertical pass first uses it, (s0*a0 + s1*a1)
 * >> 4 (at most 255 * 2048 >> 4 = 32640, an int16), computed once per source row instead of
 * once per use: an enlarged image uses most source rows twice.
 */
static void hline_scalar(int16_t *restrict D, const uint8_t *restrict S, const struct linear_ws *w,
                         int x_begin, int x_end)
{
    for (int dx = x_begin; dx < x_end; dx++) {
        const uint8_t *s0 = S + w->xo0[dx], *s1 = S + w->xo1[dx];
        const int a0 = (int16_t)(w->xa[dx] & 0xffff), a1 = (int16_t)((uint32_t)w->xa[dx] >> 16);
        int16_t *d = D + 3 * dx;
        d[0] = (int16_t)((s0[0] * a0 + s1[0] * a1) >> 4);
        d[1] = (int16_t)((s0[1] * a0 + s1[1] * a1) >> 4);
        d[2] = (int16_t)((s0[2] * a0 + s1[2] * a1) >> 4);
    }
}

#if IMAGE_HAVE_AVX2
/* Two columns per step: both pixels' 4-byte pairs widened in one register, each half
 * multiplied by its column's weights; the second store overwrites the first's 4th lane. Returns
 * the first column not done. */
IMAGE_AVX2 static int hline_avx2(int16_t *restrict D, const uint8_t *restrict S,
                                 const int32_t *restrict xo0, const int32_t *restrict xo1,
                                 const int32_t *restrict xa, int dw, int32_t limit)
{
    const __m256i rep = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    int dx = 0;
    for (; dx + 1 < dw && xo1[dx] <= limit && xo1[dx + 1] <= limit; dx += 2) {
        int32_t a, b, c, d;
        int64_t wts;
        memcpy(&a, S + xo0[dx], 4);
        memcpy(&b, S + xo1[dx], 4);
        memcpy(&c, S + xo0[dx + 1], 4);
        memcpy(&d, S + xo1[dx + 1], 4);
        memcpy(&wts, xa + dx, 8);
        const __m128i p0 = _mm_unpacklo_epi8(_mm_cvtsi32_si128(a), _mm_cvtsi32_si128(b));
        const __m128i p1 = _mm_unpacklo_epi8(_mm_cvtsi32_si128(c), _mm_cvtsi32_si128(d));
        const __m256i v = _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(p0, p1));
        const __m256i wv =
            _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(_mm_cvtsi64_si128(wts)), rep);
        const __m256i r = _mm256_srai_epi32(_mm256_madd_epi16(v, wv), 4);
        /* packs works per 128-bit lane: column dx's four words land in the low 64 bits of the
         * low lane, column dx+1's in the low 64 bits of the high lane. */
        const __m256i h = _mm256_packs_epi32(r, r);
        _mm_storel_epi64((__m128i *)(D + 3 * dx), _mm256_castsi256_si128(h));
        _mm_storel_epi64((__m128i *)(D + 3 * dx + 3), _mm256_extracti128_si256(h, 1));
    }
    return dx;
}

/* Sixteen output values per step from two 16-byte windows (the byte tables). Returns the
 * number of values done, a multiple of 16. */
IMAGE_AVX2 static int hline_avx2_oct(int16_t *restrict D, const uint8_t *restrict S,
                                     const struct linear_ws *w)
{
    const int32_t *restrict obase = w->obase;
    int b = 0;
    for (; b < w->oblocks; b++) {
        const __m256i src = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(S + obase[2 * b]))),
            _mm_loadu_si128((const __m128i *)(S + obase[2 * b + 1])), 1);
        const size_t t = 32 * (size_t)b;
        const __m256i p =
            _mm256_shuffle_epi8(src, _mm256_loadu_si256((const __m256i *)(w->omask + t)));
        const __m256i hi =
            _mm256_maddubs_epi16(p, _mm256_loadu_si256((const __m256i *)(w->ohi + t)));
        const __m256i lo =
            _mm256_maddubs_epi16(p, _mm256_loadu_si256((const __m256i *)(w->olo + t)));
        _mm256_storeu_si256((__m256i *)(D + 16 * (size_t)b),
                            _mm256_add_epi16(_mm256_add_epi16(hi, hi), _mm256_srli_epi16(lo, 4)));
    }
    return 16 * b;
}

/* Sixteen output values per step from four 16-byte windows: a shuffle and a madd per eight,
 * from value 8*q on (q even). Returns the first column not done (the column holding the next
 * value: the column code redoes its values already written, with the same results). */
IMAGE_AVX2 static int hline_avx2_tab(int16_t *restrict D, const uint8_t *restrict S,
                                     const struct linear_ws *w, int q)
{
    const int32_t *restrict gbase = w->gbase;
    for (; q + 2 <= w->gpairs; q += 2) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            const int g = 2 * (q + h);
            const __m256i src = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(S + gbase[g]))),
                _mm_loadu_si128((const __m128i *)(S + gbase[g + 1])), 1);
            const __m256i m = _mm256_loadu_si256((const __m256i *)(w->gmask + 16 * (size_t)g));
            const __m256i wt = _mm256_loadu_si256((const __m256i *)(w->gw + 4 * (size_t)g));
            r[h] = _mm256_srai_epi32(_mm256_madd_epi16(_mm256_shuffle_epi8(src, m), wt), 4);
        }
        /* packs gives (r0 0-3, r1 0-3 | r0 4-7, r1 4-7); the permute restores the order. */
        _mm256_storeu_si256((__m256i *)(D + 8 * q),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(r[0], r[1]), 0xD8));
    }
    return (8 * q) / 3;
}
#endif

static void hline(int16_t *restrict D, const uint8_t *restrict S, const struct linear_ws *w, int dw,
                  int sw, bool simd)
{
    int dx = 0;
#if IMAGE_HAVE_SSE2
    if (simd) {
        /* Each column loads 4 bytes at both source pixels (the 4th byte is the next pixel's,
         * weighted into a 4th lane that the next column overwrites), so stop where that would
         * read past the row. */
        const int32_t limit = 3 * sw - 4;
        const int32_t *restrict xo0 = w->xo0, *restrict xo1 = w->xo1, *restrict xa = w->xa;
        const __m128i z = _mm_setzero_si128();
#if IMAGE_HAVE_AVX2
        if (__builtin_cpu_supports("avx2")) {
            const int done = hline_avx2_oct(D, S, w);
            dx = done / 8 < w->gpairs ? hline_avx2_tab(D, S, w, done / 8) : done / 3;
            dx += hline_avx2(D + 3 * dx, S, xo0 + dx, xo1 + dx, xa + dx, dw - dx, limit);
        }
#endif
        for (; dx < dw && xo1[dx] <= limit; dx++) {
            int32_t v0, v1;
            memcpy(&v0, S + xo0[dx], 4);
            memcpy(&v1, S + xo1[dx], 4);
            const __m128i p = _mm_unpacklo_epi8(_mm_cvtsi32_si128(v0), _mm_cvtsi32_si128(v1));
            const __m128i r =
                _mm_srai_epi32(_mm_madd_epi16(_mm_unpacklo_epi8(p, z), _mm_set1_epi32(xa[dx])), 4);
            _mm_storel_epi64((__m128i *)(D + 3 * dx), _mm_packs_epi32(r, r));
        }
    }
#else
    (void)simd;
    (void)sw;
#endif
    hline_scalar(D, S, w, dx, dw);
}

#if IMAGE_HAVE_AVX2
/* 32 bytes per step. packus works within 128-bit lanes, so the words come out as (0-7, 16-23 |
 * 8-15, 24-31) and one permute restores the order. Returns the first byte not done. */
IMAGE_AVX2 static int vline_avx2(uint8_t *restrict D, const int16_t *restrict r0,
                                 const int16_t *restrict r1, int b0, int b1, int n)
{
    const __m256i vb0 = _mm256_set1_epi16((int16_t)b0), vb1 = _mm256_set1_epi16((int16_t)b1);
    const __m256i two = _mm256_set1_epi16(2);
    int x = 0;
    for (; x + 32 <= n; x += 32) {
        __m256i out[2];
        for (int h = 0; h < 2; h++) {
            const __m256i s0 = _mm256_loadu_si256((const __m256i *)(r0 + x + 16 * h));
            const __m256i s1 = _mm256_loadu_si256((const __m256i *)(r1 + x + 16 * h));
            const __m256i t =
                _mm256_add_epi16(_mm256_mulhi_epi16(s0, vb0), _mm256_mulhi_epi16(s1, vb1));
            out[h] = _mm256_srai_epi16(_mm256_add_epi16(t, two), 2);
        }
        _mm256_storeu_si256((__m256i *)(D + x),
                            _mm256_permute4x64_epi64(_mm256_packus_epi16(out[0], out[1]), 0xD8));
    }
    return x;
}
#endif

static void vline(uint8_t *restrict D, const int16_t *restrict r0, const int16_t *restrict r1,
                  int b0, int b1, int n, bool simd)
{
    int x = 0;
#if IMAGE_HAVE_SSE2
    if (simd) {
#if IMAGE_HAVE_AVX2
        if (__builtin_cpu_supports("avx2")) x = vline_avx2(D, r0, r1, b0, b1, n);
#endif
        const __m128i vb0 = _mm_set1_epi16((int16_t)b0), vb1 = _mm_set1_epi16((int16_t)b1);
        const __m128i two = _mm_set1_epi16(2);
        for (; x + 16 <= n; x += 16) {
            __m128i out[2];
            for (int h = 0; h < 2; h++) {
                const __m128i s0 = _mm_loadu_si128((const __m128i *)(r0 + x + 8 * h));
                const __m128i s1 = _mm_loadu_si128((const __m128i *)(r1 + x + 8 * h));
                const __m128i t = _mm_add_epi16(_mm_mulhi_epi16(s0, vb0), _mm_mulhi_epi16(s1, vb1));
                out[h] = _mm_srai_epi16(_mm_add_epi16(t, two), 2);
            }
            _mm_storeu_si128((__m128i *)(D + x), _mm_packus_epi16(out[0], out[1]));
        }
    }
#else
    (void)simd;
#endif
    for (; x < n; x++)
        D[x] = (uint8_t)((((b0 * r0[x]) >> 16) + ((b1 * r1[x]) >> 16) + 2) >> 2);
}

static void resize_linear(const struct plan *p, struct linear_ws *w, uint8_t *dst, int dw, int dh,
                          size_t dstride, const uint8_t *src, int sw, int sh, size_t sstride,
                          bool simd)
{
    linear_tables(p, w, dw, dh, sw, sh);
    int have[2] = { -1, -1 }; /* source row held by rows[k] */
    for (int dy = 0; dy < dh; dy++) {
        const int r0 = w->yr0[dy], r1 = w->yr1[dy];
        int s0 = have[0] == r0 ? 0 : have[1] == r0 ? 1 : -1;
        if (s0 < 0) { /* compute r0 where it does not evict r1 */
            s0 = have[0] == r1 ? 1 : 0;
            hline(w->rows[s0], src + (size_t)r0 * sstride, w, dw, sw, simd);
            have[s0] = r0;
        }
        int s1 = have[s0] == r1 ? s0 : 1 - s0;
        if (have[s1] != r1) {
            hline(w->rows[s1], src + (size_t)r1 * sstride, w, dw, sw, simd);
            have[s1] = r1;
        }
        const int16_t *use[2] = { w->rows[s0], w->rows[s1] };
        vline(dst + (size_t)dy * dstride, use[0], use[1], w->yb[2 * dy], w->yb[2 * dy + 1], 3 * dw,
              simd);
    }
}

/* ---- INTER_AREA --------------------------------------------------------------------------- */

/*
 * INTER_AREA with integer scales kx, ky (resizeAreaFast): block sums, then for 2x2
 * (sum + 2) >> 2 (ResizeAreaFastVec) and otherwise round_even(sum * (1.f/area)). The sums are
 * integers, so any order gives OpenCV's values: rows are first added as 16-bit words (SIMD),
 * then each block's kx columns. ky > 257 could overflow 16 bits; those go through 32-bit sums.
 */
/* d[x] = round_even(acc[x] * scale) saturated, as sat_u8f does one value at a time: the SIMD
 * conversion rounds to nearest even like cvtss2si and saturates through the two packs. */
static void area_scale_store(uint8_t *restrict d, const int32_t *restrict acc, float scale, int n,
                             bool simd)
{
    int x = 0;
#if IMAGE_HAVE_SSE2
    if (simd) {
        const __m128 vs = _mm_set1_ps(scale);
        for (; x + 16 <= n; x += 16) {
            __m128i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm_cvtps_epi32(_mm_mul_ps(
                    _mm_cvtepi32_ps(_mm_loadu_si128((const __m128i *)(acc + x + 4 * k))), vs));
            _mm_storeu_si128((__m128i *)(d + x), _mm_packus_epi16(_mm_packs_epi32(q[0], q[1]),
                                                                  _mm_packs_epi32(q[2], q[3])));
        }
    }
#else
    (void)simd;
#endif
    for (; x < n; x++)
        d[x] = sat_u8f((float)acc[x] * scale);
}

#if IMAGE_HAVE_AVX2
/*
 * 2x2 block averages, four output pixels per step: each 128-bit lane takes 16 source bytes
 * holding two output pixels' four source pixels, pairs each channel's two bytes (shuffle), adds
 * each pair (maddubs by 1) and then the two rows. Each lane's 8-byte store writes its 6 values and
 * 2 bytes that the next store overwrites, so the loop leaves at least one pixel to the caller.
 * Returns the first output pixel not done.
 */
IMAGE_AVX2 static int area2x2_avx2(uint8_t *restrict d, const uint8_t *restrict r0,
                                   const uint8_t *restrict r1, int dw)
{
    const __m256i pairs = _mm256_setr_epi8(0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11, -1, -1, -1, -1, 0,
                                           3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11, -1, -1, -1, -1);
    const __m256i one = _mm256_set1_epi8(1), two = _mm256_set1_epi16(2);
    int dx = 0;
    for (; dx + 5 <= dw; dx += 4) {
        const size_t o = 6 * (size_t)dx;
        const __m256i a = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(r0 + o))),
            _mm_loadu_si128((const __m128i *)(r0 + o + 12)), 1);
        const __m256i b = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(r1 + o))),
            _mm_loadu_si128((const __m128i *)(r1 + o + 12)), 1);
        const __m256i sa = _mm256_maddubs_epi16(_mm256_shuffle_epi8(a, pairs), one);
        const __m256i sb = _mm256_maddubs_epi16(_mm256_shuffle_epi8(b, pairs), one);
        const __m256i avg = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(sa, sb), two), 2);
        const __m256i p = _mm256_packus_epi16(avg, avg);
        _mm_storel_epi64((__m128i *)(d + 3 * (size_t)dx), _mm256_castsi256_si128(p));
        _mm_storel_epi64((__m128i *)(d + 3 * (size_t)dx + 6), _mm256_extracti128_si256(p, 1));
    }
    return dx;
}
#endif

static void resize_area_block(uint8_t *dst, int dw, int dh, size_t dstride, const uint8_t *src,
                              size_t sstride, int kx, int ky, uint16_t *vsum, int32_t *acc,
                              bool simd)
{
    const float scale = 1.f / (float)(kx * ky);
    const int n = 3 * dw * kx; /* source bytes per row */
    const bool wide = ky > 257;
    for (int dy = 0; dy < dh; dy++) {
        const uint8_t *rows = src + (size_t)dy * ky * sstride;
        uint8_t *d = dst + (size_t)dy * dstride;
        if (kx == 2 && ky == 2) { /* (a + b + c + d + 2) >> 2 straight from the two rows */
            const uint8_t *r0 = rows, *r1 = rows + sstride;
            int dx = 0;
#if IMAGE_HAVE_AVX2
            if (simd && __builtin_cpu_supports("avx2")) dx = area2x2_avx2(d, r0, r1, dw);
#endif
            for (; dx < dw; dx++)
                for (int c = 0; c < 3; c++) {
                    const size_t x = 6 * (size_t)dx + (size_t)c;
                    d[3 * dx + c] = (uint8_t)((r0[x] + r0[x + 3] + r1[x] + r1[x + 3] + 2) >> 2);
                }
            continue;
        }
        if (wide) {
            memset(acc, 0, sizeof *acc * 3 * (size_t)dw);
            for (int j = 0; j < ky; j++) {
                const uint8_t *r = rows + (size_t)j * sstride;
                for (int x = 0; x < n; x++)
                    acc[(x / (3 * kx)) * 3 + x % 3] += r[x];
            }
            area_scale_store(d, acc, scale, 3 * dw, simd);
            continue;
        }
        int i = 0;
#if IMAGE_HAVE_SSE2
        if (simd) {
            const __m128i z = _mm_setzero_si128();
            for (; i + 16 <= n; i += 16) {
                __m128i lo = z, hi = z;
                for (int j = 0; j < ky; j++) {
                    const __m128i a =
                        _mm_loadu_si128((const __m128i *)(rows + (size_t)j * sstride + i));
                    lo = _mm_add_epi16(lo, _mm_unpacklo_epi8(a, z));
                    hi = _mm_add_epi16(hi, _mm_unpackhi_epi8(a, z));
                }
                _mm_storeu_si128((__m128i *)(vsum + i), lo);
                _mm_storeu_si128((__m128i *)(vsum + i + 8), hi);
            }
        }
#else
        (void)simd;
#endif
        for (; i < n; i++) {
            unsigned v = 0;
            for (int j = 0; j < ky; j++)
                v += rows[(size_t)j * sstride + i];
            vsum[i] = (uint16_t)v;
        }
#if IMAGE_HAVE_SSE2
        if (simd && kx * ky <= 257) {
            /* Block sums still fit 16 bits: vsum[i] += vsum[i + 3k] for k < kx, eight at a time
             * and in place (each step reads only values not yet overwritten), then each block's
             * sum is the value at its first column: no short inner loop per pixel. */
            const int last = n - 3 * kx + 3; /* the sums needed lie below it */
            int x = 0;
            for (; x < last && x + 8 + 3 * (kx - 1) <= n; x += 8) {
                __m128i h = _mm_loadu_si128((const __m128i *)(vsum + x));
                for (int k = 1; k < kx; k++)
                    h = _mm_add_epi16(h, _mm_loadu_si128((const __m128i *)(vsum + x + 3 * k)));
                _mm_storeu_si128((__m128i *)(vsum + x), h);
            }
            for (; x < last; x++) {
                unsigned v = 0;
                for (int k = 0; k < kx; k++)
                    v += vsum[x + 3 * k];
                vsum[x] = (uint16_t)v;
            }
            for (int dx = 0; dx < dw; dx++) {
                const uint16_t *v = vsum + 3 * (size_t)dx * kx;
                acc[3 * dx] = v[0], acc[3 * dx + 1] = v[1], acc[3 * dx + 2] = v[2];
            }
            area_scale_store(d, acc, scale, 3 * dw, simd);
            continue;
        }
#endif
        for (int dx = 0; dx < dw; dx++) {
            const uint16_t *v = vsum + 3 * (size_t)dx * kx;
            int32_t s0 = 0, s1 = 0, s2 = 0;
            for (int k = 0; k < kx; k++, v += 3)
                s0 += v[0], s1 += v[1], s2 += v[2];
            acc[3 * dx] = s0, acc[3 * dx + 1] = s1, acc[3 * dx + 2] = s2;
        }
        area_scale_store(d, acc, scale, 3 * dw, simd);
    }
}

/* computeResizeAreaTab for one axis, grouped by destination index. Returns entries or -1. */
static int area_tab(int ssize, int dsize, double scale, int32_t *start, int32_t *si, float *al,
                    size_t cap)
{
    size_t k = 0;
#define AREA_PUSH(s_, a_)                \
    do {                                 \
        if (k >= cap) return -1;         \
        si[k] = (s_), al[k] = (a_), k++; \
    } while (0)
    for (int dx = 0; dx < dsize; dx++) {
        start[dx] = (int32_t)k;
        const double fsx1 = dx * scale, fsx2 = fsx1 + scale;
        const double cell = fmin(scale, ssize - fsx1);
        int sx1 = cv_ceil_d(fsx1), sx2 = cv_floor_d(fsx2);
        sx2 = sx2 < ssize - 1 ? sx2 : ssize - 1;
        sx1 = sx1 < sx2 ? sx1 : sx2;
        if (sx1 - fsx1 > 1e-3) AREA_PUSH(sx1 - 1, (float)((sx1 - fsx1) / cell));
        for (int sx = sx1; sx < sx2; sx++)
            AREA_PUSH(sx, (float)(1.0 / cell));
        if (fsx2 - sx2 > 1e-3) AREA_PUSH(sx2, (float)(fmin(fmin(fsx2 - sx2, 1.), cell) / cell));
    }
#undef AREA_PUSH
    start[dsize] = (int32_t)k;
    return (int)k;
}

/* One source row through the horizontal table: buf[3x+c] = sum over entries of S*alpha, in
 * table order, starting from 0 (OpenCV adds into a zeroed buffer). */
/* The padded tables from the grouped ones (see struct area_ws). */
static void area_pad(struct area_ws *w, int dw, int sw)
{
    int m = 0;
    for (int dx = 0; dx < dw; dx++)
        m = w->xstart[dx + 1] - w->xstart[dx] > m ? w->xstart[dx + 1] - w->xstart[dx] : m;
    w->pm = m <= AREA_PAD_MAX ? m : 0;
    w->pend = 0;
    if (!w->pm) return;
    for (int dx = 0; dx < dw; dx++) {
        const int32_t k0 = w->xstart[dx], k1 = w->xstart[dx + 1];
        for (int j = 0; j < m; j++) {
            const bool real = k0 + j < k1;
            w->pxo[m * dx + j] = 3 * (real ? w->xsi[k0 + j] : w->xsi[k0]);
            w->pal[m * dx + j] = real ? w->xal[k0 + j] : 0.f;
        }
        if (w->pend == dx && w->xsi[k1 - 1] < sw - 1) w->pend = dx + 1;
    }
}

#if IMAGE_HAVE_AVX2
/* Two columns per step, each a fixed pm entries: 4-byte loads as in the SSE2 loop, the second
 * store overwriting the first's 4th lane. Returns the first column not done. */
IMAGE_AVX2 static int area_hrow_avx2(float *restrict buf, const uint8_t *restrict S,
                                     const struct area_ws *w)
{
    const int m = w->pm;
    const int32_t *restrict xo = w->pxo;
    const float *restrict al = w->pal;
    int dx = 0;
    for (; dx + 1 < w->pend; dx += 2) {
        __m256 acc = _mm256_setzero_ps();
        for (int j = 0; j < m; j++) {
            int32_t a, b;
            memcpy(&a, S + xo[m * dx + j], 4);
            memcpy(&b, S + xo[m * (dx + 1) + j], 4);
            const __m256i v = _mm256_cvtepu8_epi32(
                _mm_unpacklo_epi32(_mm_cvtsi32_si128(a), _mm_cvtsi32_si128(b)));
            const __m256 wt =
                _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(al[m * dx + j])),
                                     _mm_set1_ps(al[m * (dx + 1) + j]), 1);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(v), wt));
        }
        _mm_storeu_ps(buf + 3 * dx, _mm256_castps256_ps128(acc));
        _mm_storeu_ps(buf + 3 * dx + 3, _mm256_extractf128_ps(acc, 1));
    }
    return dx;
}
#endif

static void area_hrow(float *restrict buf, const uint8_t *restrict S, const struct area_ws *w,
                      int dw, int sw, bool simd)
{
    int dx = 0;
#if IMAGE_HAVE_SSE2
    if (simd) {
#if IMAGE_HAVE_AVX2
        if (w->pm && __builtin_cpu_supports("avx2")) dx = area_hrow_avx2(buf, S, w);
#endif
        /* 4-byte loads give [c0 c1 c2 next] per entry; the 4th lane lands in the next column's
         * slot (or the slack) and is overwritten. Stop before a load would pass the row end. */
        const int32_t last = sw - 1;
        const int32_t *restrict start = w->xstart, *restrict si = w->xsi;
        const float *restrict al = w->xal;
        const __m128i z = _mm_setzero_si128();
        for (; dx < dw; dx++) {
            const int32_t k0 = start[dx], k1 = start[dx + 1];
            if (k1 > k0 && si[k1 - 1] >= last) break;
            __m128 acc = _mm_setzero_ps();
            for (int32_t k = k0; k < k1; k++) {
                int32_t v;
                memcpy(&v, S + 3 * (size_t)si[k], 4);
                const __m128i b = _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(v), z), z);
                acc = _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(b), _mm_set1_ps(al[k])));
            }
            _mm_storeu_ps(buf + 3 * dx, acc);
        }
    }
#else
    (void)simd;
    (void)sw;
#endif
    for (; dx < dw; dx++) {
        float t0 = 0, t1 = 0, t2 = 0;
        for (int32_t k = w->xstart[dx]; k < w->xstart[dx + 1]; k++) {
            const uint8_t *s = S + 3 * (size_t)w->xsi[k];
            const float a = w->xal[k];
            t0 = t0 + (float)s[0] * a;
            t1 = t1 + (float)s[1] * a;
            t2 = t2 + (float)s[2] * a;
        }
        buf[3 * dx] = t0, buf[3 * dx + 1] = t1, buf[3 * dx + 2] = t2;
    }
}

static void area_accum(float *restrict sum, const float *restrict buf, float beta, int n,
                       bool first, bool simd)
{
    int x = 0;
#if IMAGE_HAVE_SSE2
    if (simd) {
        const __m128 b = _mm_set1_ps(beta);
        if (first)
            for (; x + 4 <= n; x += 4)
                _mm_storeu_ps(sum + x, _mm_mul_ps(b, _mm_loadu_ps(buf + x)));
        else
            for (; x + 4 <= n; x += 4)
                _mm_storeu_ps(sum + x, _mm_add_ps(_mm_loadu_ps(sum + x),
                                                  _mm_mul_ps(b, _mm_loadu_ps(buf + x))));
    }
#else
    (void)simd;
#endif
    if (first)
        for (; x < n; x++)
            sum[x] = beta * buf[x];
    else
        for (; x < n; x++)
            sum[x] = sum[x] + beta * buf[x];
}

static void area_store(uint8_t *restrict D, const float *restrict sum, int n, bool simd)
{
    int x = 0;
#if IMAGE_HAVE_SSE2
    if (simd) {
        /* cvtps rounds half to even like cvRound; packs/packus saturate like saturate_cast. */
        for (; x + 8 <= n; x += 8) {
            const __m128i a = _mm_cvtps_epi32(_mm_loadu_ps(sum + x));
            const __m128i b = _mm_cvtps_epi32(_mm_loadu_ps(sum + x + 4));
            const __m128i p = _mm_packs_epi32(a, b);
            _mm_storel_epi64((__m128i *)(D + x), _mm_packus_epi16(p, p));
        }
    }
#else
    (void)simd;
#endif
    for (; x < n; x++)
        D[x] = sat_u8f(sum[x]);
}

static int resize_area(const struct plan *p, struct area_ws *w, uint8_t *dst, int dw, int dh,
                       size_t dstride, const uint8_t *src, int sw, int sh, size_t sstride,
                       bool simd)
{
    if (area_tab(sw, dw, p->scale_x, w->xstart, w->xsi, w->xal, area_tab_cap(sw, dw)) < 0 ||
        area_tab(sh, dh, p->scale_y, w->ystart, w->ysi, w->yal, area_tab_cap(sh, dh)) < 0)
        return -EINVAL; /* cannot happen: the caps bound the tables */
    area_pad(w, dw, sw);
    const int n = 3 * dw;
    int buf_row = -1; /* source row held in buf: a row shared by two cells is reused */
    for (int dy = 0; dy < dh; dy++) {
        for (int32_t k = w->ystart[dy]; k < w->ystart[dy + 1]; k++) {
            const int sy = w->ysi[k];
            if (sy != buf_row) {
                area_hrow(w->buf, src + (size_t)sy * sstride, w, dw, sw, simd);
                buf_row = sy;
            }
            area_accum(w->sum, w->buf, w->yal[k], n, k == w->ystart[dy], simd);
        }
        area_store(dst + (size_t)dy * dstride, w->sum, n, simd);
    }
    return 0;
}

/* ---- entry points -------------------------------------------------------------------------- */

int pack_image_resize_impl(uint8_t *dst, int dst_w, int dst_h, size_t dst_stride,
                           const uint8_t *src, int src_w, int src_h, size_t src_stride,
                           enum pack_image_interp interp, void *work, size_t work_cap, int use_simd)
{
    if (!dst || !src || dst_w < 1 || dst_h < 1 || src_w < 1 || src_h < 1 ||
        dst_w > PACK_IMAGE_MAX_SIDE || dst_h > PACK_IMAGE_MAX_SIDE || src_w > PACK_IMAGE_MAX_SIDE ||
        src_h > PACK_IMAGE_MAX_SIDE || dst_stride < 3 * (size_t)dst_w ||
        src_stride < 3 * (size_t)src_w)
        return -EINVAL;
    if (interp != PACK_IMAGE_INTERP_LINEAR && interp != PACK_IMAGE_INTERP_AREA) return -EINVAL;
    const bool simd = use_simd != 0;
    struct plan p;
    make_plan(&p, dst_w, dst_h, src_w, src_h, interp);
    switch (p.kind) {
    case K_COPY:
        for (int y = 0; y < dst_h; y++)
            memcpy(dst + (size_t)y * dst_stride, src + (size_t)y * src_stride, 3 * (size_t)dst_w);
        return 0;
    default:
        break;
    }
    const size_t need = plan_work(&p, dst_w, dst_h, src_w, src_h);
    void *own = NULL;
    if (!work) {
        work = own = malloc(need);
        if (!work) return -ENOMEM;
    } else if (work_cap < need) {
        return -EINVAL;
    }
    const uintptr_t a = ((uintptr_t)work + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
    struct bump b = { (uint8_t *)a, 0 };
    int rc = 0;
    if (p.kind == K_AREA_FAST || p.kind == K_AREA_FAST2) {
        uint16_t *vsum = take(&b, sizeof(uint16_t) * 3 * (size_t)src_w);
        int32_t *acc = take(&b, sizeof(int32_t) * 3 * (size_t)dst_w);
        resize_area_block(dst, dst_w, dst_h, dst_stride, src, src_stride, p.iscale_x, p.iscale_y,
                          vsum, acc, simd);
    } else if (p.kind == K_AREA) {
        struct area_ws aw;
        layout_area(&b, &aw, dst_w, dst_h, src_w, src_h);
        rc = resize_area(&p, &aw, dst, dst_w, dst_h, dst_stride, src, src_w, src_h, src_stride,
                         simd);
    } else {
        struct linear_ws lw;
        layout_linear(&b, &lw, dst_w, dst_h);
        resize_linear(&p, &lw, dst, dst_w, dst_h, dst_stride, src, src_w, src_h, src_stride, simd);
    }
    free(own);
    return rc;
}

int pack_image_resize(uint8_t *dst, int dst_w, int dst_h, size_t dst_stride, const uint8_t *src,
                      int src_w, int src_h, size_t src_stride, enum pack_image_interp interp,
                      void *work, size_t work_cap)
{
    return pack_image_resize_impl(dst, dst_w, dst_h, dst_stride, src, src_w, src_h, src_stride,
                                  interp, work, work_cap, 1);
}
