/*
 * The fused CPU pass of one training sample (kern_cpu.h's aug_sample row, and each image of
 * kern_ref_aug_batch): output pixels are computed row by row straight from the tiles (no
 * canvas is built: a tap is read from the region that holds it, KERN_AUG_FILL elsewhere), then
 * mixup, HSV, the flips and the planar write, without an intermediate image.
 *
 * Contract: the bytes equal kern_ref_aug_paste + _warp (+ the same for canvas[1] and _mixup) +
 * _hsv + _flip + _to_nchw at every SIMD level; tests/kernels/test_augment_ops.c forces each
 * level (kern_aug_simd) and compares.
 *
 * Levels. SCALAR: kern_augment_px.h's per-pixel functions (warp_px, mix_px, hsv_px). AVX2: 8
 * output pixels per step; the affine source coordinates in double lanes (the scalar code's
 * operations, one rounding each, cvtpd as cvRound), the four taps gathered as 32-bit words from
 * the region's tile when all 8 pixels' 2 x 2 taps lie inside one region (KERN_AUG_FILL when all
 * lie outside every region; per-pixel warp_px otherwise: region edges, overlapping regions,
 * tiles over 2 GiB), OpenCV's weights by 16-bit multiply-adds, mixup in double lanes, HSV with
 * table gathers and the same float products (no FMA: this file is compiled without
 * contraction and its AVX2 code with target("avx2") only), the planes written 8 elements at a
 * time. The perspective coordinates stay scalar (a double division per pixel, as OpenCV).
 * AVX-512 (F, BW, VL, DQ and VBMI): the same with 16 pixels per step, and the per-sample H and
 * S tables looked up with VBMI byte permutes (four 64-byte registers) instead of gathers.
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdatomic.h>
#include <string.h>

#include "kern_augment_px.h"
#include "kern_cpu_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AUG_HAVE_AVX2 1
#define AUG_AVX2      __attribute__((target("avx2")))
#else
#define AUG_HAVE_AVX2 0
#endif

/* ---- levels ------------------------------------------------------------------------------ */

static atomic_int g_simd_cap = KERN_AUG_SIMD_AVX512;

static int cpu_level(void)
{
#if AUG_HAVE_AVX2
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vbmi"))
        return KERN_AUG_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2")) return KERN_AUG_SIMD_AVX2;
#endif
    return KERN_AUG_SIMD_SCALAR;
}

int kern_aug_simd(int max)
{
    if (max >= 0) atomic_store(&g_simd_cap, max);
    const int cap = atomic_load(&g_simd_cap), have = cpu_level();
    return have < cap ? have : cap;
}

/* ---- one pixel, scalar --------------------------------------------------------------------- */

/* The planar store of px at (ox, oy) of an oh x ow image. */
static inline void store_px(void *dst, int dtype, size_t plane, size_t o, const uint8_t px[3])
{
    if (dtype == KERN_AUG_F32) {
        float *const img = dst;
        for (int k = 0; k < 3; k++)
            img[(size_t)k * plane + o] = kern_aug_u8_f32[px[k]];
    } else {
        uint8_t *const img = dst;
        for (int k = 0; k < 3; k++)
            img[(size_t)k * plane + o] = px[k];
    }
}

struct pass {
    void *dst;
    int dtype, oh, ow, bw0, simd_end;
    size_t plane;
    const struct kern_aug_sample *smp;
};

/* Output pixel (x, y) before the flips: warp, mixup, HSV. */
static inline void pixel(const struct pass *P, int x, int y, uint8_t px[3])
{
    const struct kern_aug_sample *smp = P->smp;
    warp_px(&smp->canvas[0], smp->inv[0], smp->perspective[0], P->bw0, x, y, px);
    if (smp->mixup) {
        uint8_t p2[3];
        warp_px(&smp->canvas[1], smp->inv[1], smp->perspective[1], P->bw0, x, y, p2);
        const double r = smp->mixup_ratio, r2 = 1 - r;
        for (int k = 0; k < 3; k++)
            px[k] = mix_px(px[k], p2[k], r, r2);
    }
    if (smp->hsv) hsv_px(px[0], px[1], px[2], &smp->lut, x < P->simd_end, px);
}

static void row_scalar(const struct pass *P, int y, int x0)
{
    const int oy = P->smp->flip_ud ? P->oh - 1 - y : y;
    for (int x = x0; x < P->ow; x++) {
        uint8_t px[3];
        pixel(P, x, y, px);
        const int ox = P->smp->flip_lr ? P->ow - 1 - x : x;
        store_px(P->dst, P->dtype, P->plane, (size_t)oy * (size_t)P->ow + (size_t)ox, px);
    }
}

#if AUG_HAVE_AVX2
/* ---- AVX2 --------------------------------------------------------------------------------- */

/* A region of a canvas prepared for gathers: canvas rectangle [x0, x1) x [y0, y1), base its
 * top-left pixel in the tile. xs1: x1, less one when the region ends at the tile's last column
 * and last row (the gather of a pixel's right tap reads 4 bytes: one past that pixel). */
struct region {
    int x0, y0, x1, y1, xs1, step;
    const uint8_t *base;
};

struct cprep {
    int n;
    bool gather; /* the fast paths may be used: no regions overlap, every tile under 2 GiB */
    struct region r[KERN_AUG_MAX_PASTE];
};

static void prep_canvas(const struct kern_aug_canvas *c, struct cprep *cp)
{
    cp->n = 0;
    cp->gather = true;
    for (int i = 0; i < c->n_paste; i++) {
        const struct kern_aug_paste *p = &c->paste[i];
        if (p->w == 0 || p->h == 0) continue;
        struct region *r = &cp->r[cp->n++];
        r->x0 = p->dst_x, r->y0 = p->dst_y, r->x1 = p->dst_x + p->w, r->y1 = p->dst_y + p->h;
        r->step = p->src_w * 3;
        r->base = p->src + ((size_t)p->src_y * (size_t)p->src_w + (size_t)p->src_x) * 3;
        const bool corner = p->src_x + p->w == p->src_w && p->src_y + p->h == p->src_h;
        r->xs1 = r->x1 - (corner ? 1 : 0);
        if ((long long)p->src_w * p->src_h * 3 >= INT32_MAX - 8) cp->gather = false;
    }
    for (int i = 0; i < cp->n; i++)
        for (int j = i + 1; j < cp->n; j++) {
            const struct region *a = &cp->r[i], *b = &cp->r[j];
            if (a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1)
                cp->gather = false;
        }
}

struct lanes {
    __m256i c[3]; /* R, G, B of 8 pixels, one per 32-bit lane (0..255) */
};

AUG_AVX2 static inline __m256i clamp_s16(__m256i v)
{
    return _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(SHRT_MAX)),
                            _mm256_set1_epi32(SHRT_MIN));
}

/* cvRound(m * x * AB_SCALE) for x = x0 .. x0 + 7: the scalar affine_col, lane by lane. */
AUG_AVX2 static inline __m256i affine_col8(double m, int x0)
{
    const __m256d vm = _mm256_set1_pd(m), sc = _mm256_set1_pd(AB_SCALE);
    const __m256d lo = _mm256_set_pd(x0 + 3, x0 + 2, x0 + 1, x0);
    const __m256d hi = _mm256_set_pd(x0 + 7, x0 + 6, x0 + 5, x0 + 4);
    const __m128i a = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_mul_pd(vm, lo), sc));
    const __m128i b = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_mul_pd(vm, hi), sc));
    return _mm256_set_m128i(b, a);
}

/* The byte-c-of-each-word shuffles, per channel c: into the low 16 bits of the word (first
 * tap of a pair) or the high 16 (second tap). */
#define Z_ (-128)
#define SEL_LO(c)                                                                               \
    {                                                                                           \
        c, Z_, Z_, Z_, 4 + c, Z_, Z_, Z_, 8 + c, Z_, Z_, Z_, 12 + c, Z_, Z_, Z_, c, Z_, Z_, Z_, \
            4 + c, Z_, Z_, Z_, 8 + c, Z_, Z_, Z_, 12 + c, Z_, Z_, Z_                            \
    }
#define SEL_HI(c)                                                                               \
    {                                                                                           \
        Z_, Z_, c, Z_, Z_, Z_, 4 + c, Z_, Z_, Z_, 8 + c, Z_, Z_, Z_, 12 + c, Z_, Z_, Z_, c, Z_, \
            Z_, Z_, 4 + c, Z_, Z_, Z_, 8 + c, Z_, Z_, Z_, 12 + c, Z_                            \
    }
static const _Alignas(32) int8_t g_sel[2][3][32] = { { SEL_LO(0), SEL_LO(1), SEL_LO(2) },
                                                     { SEL_HI(0), SEL_HI(1), SEL_HI(2) } };
#undef SEL_LO
#undef SEL_HI
#undef Z_

/*
 * 8 warped pixels at source coordinates X, Y (1/32 px) for output columns x .. x + 7 of row y.
 * Exactly warp_px's bytes: the fast paths are taken only where warp_px would read one region's
 * tile (or only fill) for all four taps of all eight pixels. Returns true when all 8 are the
 * fill by the fill path.
 */
AUG_AVX2 static bool warp8(const struct kern_aug_canvas *c, const struct cprep *cp, __m256i X,
                           __m256i Y, struct lanes *out)
{
    const __m256i sx = clamp_s16(_mm256_srai_epi32(X, INTER_BITS));
    const __m256i sy = clamp_s16(_mm256_srai_epi32(Y, INTER_BITS));
    if (cp->gather) {
        const int sx0 = _mm256_cvtsi256_si32(sx), sy0 = _mm256_cvtsi256_si32(sy);
        int k = -1;
        for (int i = 0; i < cp->n; i++) {
            const struct region *r = &cp->r[i];
            if (sx0 >= r->x0 && sx0 + 1 < r->xs1 && sy0 >= r->y0 && sy0 + 1 < r->y1) {
                k = i;
                break;
            }
        }
        if (k >= 0) {
            const struct region *r = &cp->r[k];
            const __m256i in = _mm256_and_si256(
                _mm256_and_si256(_mm256_cmpgt_epi32(sx, _mm256_set1_epi32(r->x0 - 1)),
                                 _mm256_cmpgt_epi32(_mm256_set1_epi32(r->xs1 - 1), sx)),
                _mm256_and_si256(_mm256_cmpgt_epi32(sy, _mm256_set1_epi32(r->y0 - 1)),
                                 _mm256_cmpgt_epi32(_mm256_set1_epi32(r->y1 - 1), sy)));
            if (_mm256_movemask_epi8(in) == -1) {
                /* OpenCV's weights (32 - fy)(32 - fx), (32 - fy) fx, fy (32 - fx), fy fx as 16-bit
                 * pairs (w0, w1) and (w2, w3) of each word: one 16-bit multiply per pair */
                const __m256i m31 = _mm256_set1_epi32(INTER_TAB_SIZE - 1);
                const __m256i fx = _mm256_and_si256(X, m31), fy = _mm256_and_si256(Y, m31);
                const __m256i one = _mm256_set1_epi32(INTER_TAB_SIZE);
                const __m256i gxfx =
                    _mm256_or_si256(_mm256_sub_epi32(one, fx), _mm256_slli_epi32(fx, 16));
                const __m256i gy = _mm256_sub_epi32(one, fy);
                const __m256i w01 =
                    _mm256_mullo_epi16(_mm256_or_si256(gy, _mm256_slli_epi32(gy, 16)), gxfx);
                const __m256i w23 =
                    _mm256_mullo_epi16(_mm256_or_si256(fy, _mm256_slli_epi32(fy, 16)), gxfx);
                const __m256i dx = _mm256_sub_epi32(sx, _mm256_set1_epi32(r->x0));
                const __m256i off = _mm256_add_epi32(
                    _mm256_mullo_epi32(_mm256_sub_epi32(sy, _mm256_set1_epi32(r->y0)),
                                       _mm256_set1_epi32(r->step)),
                    _mm256_add_epi32(dx, _mm256_add_epi32(dx, dx)));
                const int *b = (const int *)(const void *)r->base;
                const __m256i three = _mm256_set1_epi32(3), st = _mm256_set1_epi32(r->step);
                const __m256i A = _mm256_i32gather_epi32(b, off, 1);
                const __m256i B = _mm256_i32gather_epi32(b, _mm256_add_epi32(off, three), 1);
                const __m256i offc = _mm256_add_epi32(off, st);
                const __m256i C = _mm256_i32gather_epi32(b, offc, 1);
                const __m256i D = _mm256_i32gather_epi32(b, _mm256_add_epi32(offc, three), 1);
                const __m256i half = _mm256_set1_epi32(1 << (2 * INTER_BITS - 1));
                for (int ch = 0; ch < 3; ch++) {
                    const __m256i lo =
                        _mm256_load_si256((const __m256i *)(const void *)g_sel[0][ch]);
                    const __m256i hi =
                        _mm256_load_si256((const __m256i *)(const void *)g_sel[1][ch]);
                    const __m256i ab =
                        _mm256_or_si256(_mm256_shuffle_epi8(A, lo), _mm256_shuffle_epi8(B, hi));
                    const __m256i cd =
                        _mm256_or_si256(_mm256_shuffle_epi8(C, lo), _mm256_shuffle_epi8(D, hi));
                    const __m256i sum =
                        _mm256_add_epi32(_mm256_madd_epi16(ab, w01), _mm256_madd_epi16(cd, w23));
                    out->c[ch] = _mm256_srli_epi32(_mm256_add_epi32(sum, half), 2 * INTER_BITS);
                }
                return false;
            }
        } else {
            /* every tap outside every region: the fill, whatever the weights */
            __m256i outside = _mm256_set1_epi32(-1);
            const __m256i sx1 = _mm256_add_epi32(sx, _mm256_set1_epi32(1));
            const __m256i sy1 = _mm256_add_epi32(sy, _mm256_set1_epi32(1));
            for (int i = 0; i < cp->n; i++) {
                const struct region *r = &cp->r[i];
                const __m256i o = _mm256_or_si256(
                    _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(r->x0), sx1),
                                    _mm256_cmpgt_epi32(sx, _mm256_set1_epi32(r->x1 - 1))),
                    _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(r->y0), sy1),
                                    _mm256_cmpgt_epi32(sy, _mm256_set1_epi32(r->y1 - 1))));
                outside = _mm256_and_si256(outside, o);
            }
            if (_mm256_movemask_epi8(outside) == -1) {
                out->c[0] = out->c[1] = out->c[2] = _mm256_set1_epi32(KERN_AUG_FILL);
                return true;
            }
        }
    }
    /* the taps straddle regions or the fill: each pixel alone, from its coordinates */
    int xs[8], ys[8], v[3][8];
    _mm256_storeu_si256((__m256i *)(void *)xs, X);
    _mm256_storeu_si256((__m256i *)(void *)ys, Y);
    for (int i = 0; i < 8; i++) {
        uint8_t px[3];
        warp_tap(c, xs[i], ys[i], px);
        v[0][i] = px[0], v[1][i] = px[1], v[2][i] = px[2];
    }
    for (int ch = 0; ch < 3; ch++)
        out->c[ch] = _mm256_loadu_si256((const __m256i *)(const void *)v[ch]);
    return false;
}

/* The source coordinates of output columns x .. x + 7 of row y under inv M. */
AUG_AVX2 static inline void coords8(const double *M, int persp, int bw0, int x, int y, int X0,
                                    int Y0, __m256i *X, __m256i *Y)
{
    if (!persp) {
        *X = _mm256_srai_epi32(_mm256_add_epi32(_mm256_set1_epi32(X0), affine_col8(M[0], x)),
                               AB_BITS - INTER_BITS);
        *Y = _mm256_srai_epi32(_mm256_add_epi32(_mm256_set1_epi32(Y0), affine_col8(M[3], x)),
                               AB_BITS - INTER_BITS);
        return;
    }
    int xs[8], ys[8];
    for (int i = 0; i < 8; i++) {
        const int xb = (x + i) / bw0 * bw0;
        persp_xy(M, xb, y, x + i - xb, &xs[i], &ys[i]);
    }
    *X = _mm256_loadu_si256((const __m256i *)(const void *)xs);
    *Y = _mm256_loadu_si256((const __m256i *)(const void *)ys);
}

/* mix_px lane by lane: (uint8)(a r + b (1 - r)) in double, truncated. */
AUG_AVX2 static inline __m256i mix8(__m256i a, __m256i b, double r, double r2)
{
    const __m256d vr = _mm256_set1_pd(r), vr2 = _mm256_set1_pd(r2);
    const __m256d alo = _mm256_cvtepi32_pd(_mm256_castsi256_si128(a));
    const __m256d ahi = _mm256_cvtepi32_pd(_mm256_extracti128_si256(a, 1));
    const __m256d blo = _mm256_cvtepi32_pd(_mm256_castsi256_si128(b));
    const __m256d bhi = _mm256_cvtepi32_pd(_mm256_extracti128_si256(b, 1));
    const __m128i lo =
        _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_mul_pd(alo, vr), _mm256_mul_pd(blo, vr2)));
    const __m128i hi =
        _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_mul_pd(ahi, vr), _mm256_mul_pd(bhi, vr2)));
    const __m256i v = _mm256_set_m128i(hi, lo);
    return _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(255)), _mm256_setzero_si256());
}

/* The per-sample HSV tables as 32-bit words for gathers: by V, sdiv[V] << 8 | V' (one gather
 * for both); by H and S, H' and S'. */
struct hsv_tabs {
    int v[256], h[256], s[256];
};

static void hsv_tabs_init(struct hsv_tabs *t, const struct kern_aug_hsv_lut *lut)
{
    for (int i = 0; i < 256; i++) {
        t->v[i] = kern_aug_sdiv[i] << 8 | lut->v[i];
        t->h[i] = lut->h[i];
        t->s[i] = lut->s[i];
    }
}

/* hsv_px lane by lane. trunc: the row's first w / 32 * 32 pixels (OpenCV's SIMD loop). */
AUG_AVX2 static inline void hsv8(struct lanes *p, const struct hsv_tabs *t, bool trunc)
{
    const __m256i r = p->c[0], g = p->c[1], b = p->c[2];
    const __m256i v = _mm256_max_epi32(_mm256_max_epi32(b, g), r);
    const __m256i vmin = _mm256_min_epi32(_mm256_min_epi32(b, g), r);
    const __m256i diff = _mm256_sub_epi32(v, vmin);
    const __m256i vr = _mm256_cmpeq_epi32(v, r), vg = _mm256_cmpeq_epi32(v, g);
    const __m256i round = _mm256_set1_epi32(1 << 11);
    const __m256i tv = _mm256_i32gather_epi32(t->v, v, 4);
    const __m256i s = _mm256_srai_epi32(
        _mm256_add_epi32(_mm256_mullo_epi32(diff, _mm256_srli_epi32(tv, 8)), round), 12);
    const __m256i d2 = _mm256_add_epi32(diff, diff);
    const __m256i h_r = _mm256_sub_epi32(g, b);
    const __m256i h_g = _mm256_add_epi32(_mm256_sub_epi32(b, r), d2);
    const __m256i h_b = _mm256_add_epi32(_mm256_sub_epi32(r, g), _mm256_add_epi32(d2, d2));
    __m256i hh = _mm256_blendv_epi8(_mm256_blendv_epi8(h_b, h_g, vg), h_r, vr);
    hh = _mm256_srai_epi32(
        _mm256_add_epi32(_mm256_mullo_epi32(hh, _mm256_i32gather_epi32(kern_aug_hdiv, diff, 4)),
                         round),
        12);
    hh = _mm256_add_epi32(hh, _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), hh),
                                               _mm256_set1_epi32(180)));
    const __m256i H = _mm256_i32gather_epi32(t->h, hh, 4), S = _mm256_i32gather_epi32(t->s, s, 4);
    /* (float)V' * (1 / 255.f), as hsv_px */
    const __m256 vv =
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(tv, _mm256_set1_epi32(255))),
                      _mm256_set1_ps(1.0f / 255.0f));
    const __m256i idx =
        _mm256_mullo_epi32(_mm256_add_epi32(_mm256_slli_epi32(H, 8), S), _mm256_set1_epi32(3));
    const float *fac = &kern_aug_hsv_fac[0][0][0];
    const __m256 k255 = _mm256_set1_ps(255.0f);
    for (int ch = 0; ch < 3; ch++) {
        const __m256 f = _mm256_i32gather_ps(fac + ch, idx, 4);
        const __m256 o = _mm256_mul_ps(_mm256_mul_ps(vv, f), k255);
        p->c[ch] = trunc ? _mm256_cvttps_epi32(o) : _mm256_cvtps_epi32(o);
    }
}

/* 8 pixels into the planes at row oy, columns x .. x + 7 (reversed to ow - 8 - x .. when lr). */
AUG_AVX2 static inline void store8(const struct pass *P, const struct lanes *p, int oy, int x)
{
    const bool lr = P->smp->flip_lr;
    const size_t o = (size_t)oy * (size_t)P->ow + (size_t)(lr ? P->ow - 8 - x : x);
    const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    for (int ch = 0; ch < 3; ch++) {
        __m256i v = p->c[ch];
        if (lr) v = _mm256_permutevar8x32_epi32(v, rev);
        if (P->dtype == KERN_AUG_F32) {
            const __m256 f = _mm256_div_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(255.0f));
            _mm256_storeu_ps((float *)P->dst + (size_t)ch * P->plane + o, f);
        } else {
            const __m256i pick =
                _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4,
                                 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
            const __m256i bytes = _mm256_shuffle_epi8(v, pick);
            const __m128i eight = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes),
                                                     _mm256_extracti128_si256(bytes, 1));
            _mm_storel_epi64((__m128i *)(void *)((uint8_t *)P->dst + (size_t)ch * P->plane + o),
                             eight);
        }
    }
}

AUG_AVX2 static void run_avx2(const struct pass *P)
{
    const struct kern_aug_sample *smp = P->smp;
    struct cprep cp[2];
    prep_canvas(&smp->canvas[0], &cp[0]);
    if (smp->mixup) prep_canvas(&smp->canvas[1], &cp[1]);
    struct hsv_tabs tabs;
    /* the fill through HSV, once per sample, for groups that are all fill (without mixup) */
    struct lanes fill_hsv[2];
    if (smp->hsv) {
        hsv_tabs_init(&tabs, &smp->lut);
        for (int t = 0; t < 2; t++) {
            fill_hsv[t].c[0] = fill_hsv[t].c[1] = fill_hsv[t].c[2] =
                _mm256_set1_epi32(KERN_AUG_FILL);
            hsv8(&fill_hsv[t], &tabs, t == 1);
        }
    }
    const double r = smp->mixup_ratio, r2 = 1 - r;
    const int ow8 = P->ow / 8 * 8;
    for (int y = 0; y < P->oh; y++) {
        const int oy = smp->flip_ud ? P->oh - 1 - y : y;
        int X0[2], Y0[2];
        for (int k = 0; k < 1 + smp->mixup; k++) {
            X0[k] = affine_row(smp->inv[k][1], smp->inv[k][2], y);
            Y0[k] = affine_row(smp->inv[k][4], smp->inv[k][5], y);
        }
        for (int x = 0; x < ow8; x += 8) {
            struct lanes p, q;
            __m256i X, Y;
            coords8(smp->inv[0], smp->perspective[0], P->bw0, x, y, X0[0], Y0[0], &X, &Y);
            const bool fill = warp8(&smp->canvas[0], &cp[0], X, Y, &p);
            if (smp->mixup) {
                coords8(smp->inv[1], smp->perspective[1], P->bw0, x, y, X0[1], Y0[1], &X, &Y);
                warp8(&smp->canvas[1], &cp[1], X, Y, &q);
                for (int ch = 0; ch < 3; ch++)
                    p.c[ch] = mix8(p.c[ch], q.c[ch], r, r2);
            }
            /* simd_end is a multiple of 32: a group of 8 is wholly on one side */
            if (smp->hsv && fill && !smp->mixup)
                p = fill_hsv[x < P->simd_end];
            else if (smp->hsv)
                hsv8(&p, &tabs, x < P->simd_end);
            store8(P, &p, oy, x);
        }
        row_scalar(P, y, ow8);
    }
}

/* ---- AVX-512 (F, BW, VL, DQ, VBMI) -------------------------------------------------------- */

#define AUG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2")))

struct lanes16 {
    __m512i c[3];
};

AUG_AVX512 static inline __m512i clamp16_s16(__m512i v)
{
    return _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(SHRT_MAX)),
                            _mm512_set1_epi32(SHRT_MIN));
}

AUG_AVX512 static inline __m512i affine_col16(double m, int x0)
{
    const __m512d vm = _mm512_set1_pd(m), sc = _mm512_set1_pd(AB_SCALE);
    const __m512d lo = _mm512_add_pd(_mm512_set1_pd(x0), _mm512_setr_pd(0, 1, 2, 3, 4, 5, 6, 7));
    const __m512d hi = _mm512_add_pd(lo, _mm512_set1_pd(8));
    const __m256i a = _mm512_cvtpd_epi32(_mm512_mul_pd(_mm512_mul_pd(vm, lo), sc));
    const __m256i b = _mm512_cvtpd_epi32(_mm512_mul_pd(_mm512_mul_pd(vm, hi), sc));
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

AUG_AVX512 static inline void coords16(const double *M, int persp, int bw0, int x, int y, int X0,
                                       int Y0, __m512i *X, __m512i *Y)
{
    if (!persp) {
        *X = _mm512_srai_epi32(_mm512_add_epi32(_mm512_set1_epi32(X0), affine_col16(M[0], x)),
                               AB_BITS - INTER_BITS);
        *Y = _mm512_srai_epi32(_mm512_add_epi32(_mm512_set1_epi32(Y0), affine_col16(M[3], x)),
                               AB_BITS - INTER_BITS);
        return;
    }
    int xs[16], ys[16];
    for (int i = 0; i < 16; i++) {
        const int xb = (x + i) / bw0 * bw0;
        persp_xy(M, xb, y, x + i - xb, &xs[i], &ys[i]);
    }
    *X = _mm512_loadu_si512(xs);
    *Y = _mm512_loadu_si512(ys);
}

/* warp8 for 16 pixels; returns true when all 16 are the fill by the fill path. */
AUG_AVX512 static bool warp16(const struct kern_aug_canvas *c, const struct cprep *cp, __m512i X,
                              __m512i Y, struct lanes16 *out)
{
    const __m512i sx = clamp16_s16(_mm512_srai_epi32(X, INTER_BITS));
    const __m512i sy = clamp16_s16(_mm512_srai_epi32(Y, INTER_BITS));
    if (cp->gather) {
        const int sx0 = _mm_cvtsi128_si32(_mm512_castsi512_si128(sx));
        const int sy0 = _mm_cvtsi128_si32(_mm512_castsi512_si128(sy));
        int k = -1;
        for (int i = 0; i < cp->n; i++) {
            const struct region *r = &cp->r[i];
            if (sx0 >= r->x0 && sx0 + 1 < r->xs1 && sy0 >= r->y0 && sy0 + 1 < r->y1) {
                k = i;
                break;
            }
        }
        if (k >= 0) {
            const struct region *r = &cp->r[k];
            const __mmask16 in = _mm512_cmpge_epi32_mask(sx, _mm512_set1_epi32(r->x0)) &
                                 _mm512_cmplt_epi32_mask(sx, _mm512_set1_epi32(r->xs1 - 1)) &
                                 _mm512_cmpge_epi32_mask(sy, _mm512_set1_epi32(r->y0)) &
                                 _mm512_cmplt_epi32_mask(sy, _mm512_set1_epi32(r->y1 - 1));
            if (in == 0xFFFF) {
                const __m512i m31 = _mm512_set1_epi32(INTER_TAB_SIZE - 1);
                const __m512i fx = _mm512_and_si512(X, m31), fy = _mm512_and_si512(Y, m31);
                const __m512i one = _mm512_set1_epi32(INTER_TAB_SIZE);
                const __m512i gxfx =
                    _mm512_or_si512(_mm512_sub_epi32(one, fx), _mm512_slli_epi32(fx, 16));
                const __m512i gy = _mm512_sub_epi32(one, fy);
                const __m512i w01 =
                    _mm512_mullo_epi16(_mm512_or_si512(gy, _mm512_slli_epi32(gy, 16)), gxfx);
                const __m512i w23 =
                    _mm512_mullo_epi16(_mm512_or_si512(fy, _mm512_slli_epi32(fy, 16)), gxfx);
                const __m512i half = _mm512_set1_epi32(1 << (2 * INTER_BITS - 1));
                const int sx_min = _mm512_reduce_min_epi32(sx);
                const int span = (_mm512_reduce_max_epi32(sx) - sx_min + 2) * 3;
                if (_mm512_cmpeq_epi32_mask(sy, _mm512_set1_epi32(sy0)) == 0xFFFF && span <= 128) {
                    /* One source row pair and a short span of it (no rotation, shear or
                     * perspective: every YOLOv5 hyp): the span's bytes in two registers per
                     * row, each tap's byte put in place by a byte permute (VBMI) instead of
                     * four gathers. The same bytes and weights, so the same sums. */
                    const uint8_t *const row0 = r->base + (size_t)(sy0 - r->y0) * (size_t)r->step +
                                                (size_t)(sx_min - r->x0) * 3;
                    const uint8_t *const row1 = row0 + r->step;
                    const __mmask64 mlo = span >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << span) - 1);
                    const __mmask64 mhi =
                        span > 64
                            ? (span >= 128 ? ~(__mmask64)0 : (((__mmask64)1 << (span - 64)) - 1))
                            : 0;
                    const __m512i a0 = _mm512_maskz_loadu_epi8(mlo, row0);
                    const __m512i a1 = _mm512_maskz_loadu_epi8(mhi, row0 + 64);
                    const __m512i c0 = _mm512_maskz_loadu_epi8(mlo, row1);
                    const __m512i c1 = _mm512_maskz_loadu_epi8(mhi, row1 + 64);
                    const __m512i rel = _mm512_sub_epi32(sx, _mm512_set1_epi32(sx_min));
                    const __m512i rel3 = _mm512_add_epi32(rel, _mm512_add_epi32(rel, rel));
                    /* bytes 0 and 2 of each lane: the left and right tap, as 16-bit halves */
                    const __mmask64 even = 0x5555555555555555ull;
                    for (int ch = 0; ch < 3; ch++) {
                        const __m512i b0 = _mm512_add_epi32(rel3, _mm512_set1_epi32(ch));
                        const __m512i idx = _mm512_or_si512(
                            b0, _mm512_slli_epi32(_mm512_add_epi32(b0, _mm512_set1_epi32(3)), 16));
                        const __m512i ab = _mm512_maskz_permutex2var_epi8(even, a0, idx, a1);
                        const __m512i cd = _mm512_maskz_permutex2var_epi8(even, c0, idx, c1);
                        const __m512i sum = _mm512_add_epi32(_mm512_madd_epi16(ab, w01),
                                                             _mm512_madd_epi16(cd, w23));
                        out->c[ch] = _mm512_srli_epi32(_mm512_add_epi32(sum, half), 2 * INTER_BITS);
                    }
                    return false;
                }
                const __m512i dx = _mm512_sub_epi32(sx, _mm512_set1_epi32(r->x0));
                const __m512i off = _mm512_add_epi32(
                    _mm512_mullo_epi32(_mm512_sub_epi32(sy, _mm512_set1_epi32(r->y0)),
                                       _mm512_set1_epi32(r->step)),
                    _mm512_add_epi32(dx, _mm512_add_epi32(dx, dx)));
                const void *b = r->base;
                const __m512i three = _mm512_set1_epi32(3), st = _mm512_set1_epi32(r->step);
                const __m512i A = _mm512_i32gather_epi32(off, b, 1);
                const __m512i B = _mm512_i32gather_epi32(_mm512_add_epi32(off, three), b, 1);
                const __m512i offc = _mm512_add_epi32(off, st);
                const __m512i C = _mm512_i32gather_epi32(offc, b, 1);
                const __m512i D = _mm512_i32gather_epi32(_mm512_add_epi32(offc, three), b, 1);
                for (int ch = 0; ch < 3; ch++) {
                    const __m512i lo = _mm512_broadcast_i64x4(
                        _mm256_load_si256((const __m256i *)(const void *)g_sel[0][ch]));
                    const __m512i hi = _mm512_broadcast_i64x4(
                        _mm256_load_si256((const __m256i *)(const void *)g_sel[1][ch]));
                    const __m512i ab =
                        _mm512_or_si512(_mm512_shuffle_epi8(A, lo), _mm512_shuffle_epi8(B, hi));
                    const __m512i cd =
                        _mm512_or_si512(_mm512_shuffle_epi8(C, lo), _mm512_shuffle_epi8(D, hi));
                    const __m512i sum =
                        _mm512_add_epi32(_mm512_madd_epi16(ab, w01), _mm512_madd_epi16(cd, w23));
                    out->c[ch] = _mm512_srli_epi32(_mm512_add_epi32(sum, half), 2 * INTER_BITS);
                }
                return false;
            }
        } else {
            __mmask16 outside = 0xFFFF;
            const __m512i sx1 = _mm512_add_epi32(sx, _mm512_set1_epi32(1));
            const __m512i sy1 = _mm512_add_epi32(sy, _mm512_set1_epi32(1));
            for (int i = 0; i < cp->n; i++) {
                const struct region *r = &cp->r[i];
                outside &= _mm512_cmplt_epi32_mask(sx1, _mm512_set1_epi32(r->x0)) |
                           _mm512_cmpge_epi32_mask(sx, _mm512_set1_epi32(r->x1)) |
                           _mm512_cmplt_epi32_mask(sy1, _mm512_set1_epi32(r->y0)) |
                           _mm512_cmpge_epi32_mask(sy, _mm512_set1_epi32(r->y1));
            }
            if (outside == 0xFFFF) {
                out->c[0] = out->c[1] = out->c[2] = _mm512_set1_epi32(KERN_AUG_FILL);
                return true;
            }
        }
    }
    int xs[16], ys[16], v[3][16];
    _mm512_storeu_si512(xs, X);
    _mm512_storeu_si512(ys, Y);
    for (int i = 0; i < 16; i++) {
        uint8_t px[3];
        warp_tap(c, xs[i], ys[i], px);
        v[0][i] = px[0], v[1][i] = px[1], v[2][i] = px[2];
    }
    for (int ch = 0; ch < 3; ch++)
        out->c[ch] = _mm512_loadu_si512(v[ch]);
    return false;
}

AUG_AVX512 static inline __m512i mix16(__m512i a, __m512i b, double r, double r2)
{
    const __m512d vr = _mm512_set1_pd(r), vr2 = _mm512_set1_pd(r2);
    const __m512d alo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(a));
    const __m512d ahi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(a, 1));
    const __m512d blo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(b));
    const __m512d bhi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(b, 1));
    const __m256i lo =
        _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_mul_pd(alo, vr), _mm512_mul_pd(blo, vr2)));
    const __m256i hi =
        _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_mul_pd(ahi, vr), _mm512_mul_pd(bhi, vr2)));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(255)), _mm512_setzero_si512());
}

/* A 256-entry byte table as four 64-byte registers, looked up with VBMI permutes. */
struct lut512 {
    __m512i t[4];
};

AUG_AVX512 static inline void lut512_load(struct lut512 *L, const uint8_t tab[256])
{
    for (int i = 0; i < 4; i++)
        L->t[i] = _mm512_loadu_si512(tab + 64 * i);
}

/* tab[i] for 16 indices 0..255 (one per 32-bit lane), as 32-bit lanes. */
AUG_AVX512 static inline __m512i lut512_get(const struct lut512 *L, __m512i idx)
{
    const __m512i b = _mm512_castsi128_si512(_mm512_cvtepi32_epi8(idx));
    const __m512i lo = _mm512_permutex2var_epi8(L->t[0], b, L->t[1]);
    const __m512i hi = _mm512_permutex2var_epi8(L->t[2], b, L->t[3]);
    const __m512i v = _mm512_mask_blend_epi8(_mm512_movepi8_mask(b), lo, hi);
    return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(v));
}

AUG_AVX512 static inline void hsv16(struct lanes16 *p, const struct hsv_tabs *t,
                                    const struct lut512 *lh, const struct lut512 *ls, bool trunc)
{
    const __m512i r = p->c[0], g = p->c[1], b = p->c[2];
    const __m512i v = _mm512_max_epi32(_mm512_max_epi32(b, g), r);
    const __m512i vmin = _mm512_min_epi32(_mm512_min_epi32(b, g), r);
    const __m512i diff = _mm512_sub_epi32(v, vmin);
    const __mmask16 vr = _mm512_cmpeq_epi32_mask(v, r), vg = _mm512_cmpeq_epi32_mask(v, g);
    const __m512i round = _mm512_set1_epi32(1 << 11);
    const __m512i tv = _mm512_i32gather_epi32(v, t->v, 4);
    const __m512i s = _mm512_srai_epi32(
        _mm512_add_epi32(_mm512_mullo_epi32(diff, _mm512_srli_epi32(tv, 8)), round), 12);
    const __m512i d2 = _mm512_add_epi32(diff, diff);
    const __m512i h_r = _mm512_sub_epi32(g, b);
    const __m512i h_g = _mm512_add_epi32(_mm512_sub_epi32(b, r), d2);
    const __m512i h_b = _mm512_add_epi32(_mm512_sub_epi32(r, g), _mm512_add_epi32(d2, d2));
    __m512i hh = _mm512_mask_blend_epi32(vr, _mm512_mask_blend_epi32(vg, h_b, h_g), h_r);
    hh = _mm512_srai_epi32(
        _mm512_add_epi32(_mm512_mullo_epi32(hh, _mm512_i32gather_epi32(diff, kern_aug_hdiv, 4)),
                         round),
        12);
    hh = _mm512_mask_add_epi32(hh, _mm512_cmplt_epi32_mask(hh, _mm512_setzero_si512()), hh,
                               _mm512_set1_epi32(180));
    const __m512i H = lut512_get(lh, hh), S = lut512_get(ls, s);
    const __m512 vv =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(tv, _mm512_set1_epi32(255))),
                      _mm512_set1_ps(1.0f / 255.0f));
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_add_epi32(_mm512_slli_epi32(H, 8), S), _mm512_set1_epi32(3));
    const float *fac = &kern_aug_hsv_fac[0][0][0];
    const __m512 k255 = _mm512_set1_ps(255.0f);
    for (int ch = 0; ch < 3; ch++) {
        const __m512 f = _mm512_i32gather_ps(idx, fac + ch, 4);
        const __m512 o = _mm512_mul_ps(_mm512_mul_ps(vv, f), k255);
        p->c[ch] = trunc ? _mm512_cvttps_epi32(o) : _mm512_cvtps_epi32(o);
    }
}

AUG_AVX512 static inline void store16(const struct pass *P, const struct lanes16 *p, int oy, int x)
{
    const bool lr = P->smp->flip_lr;
    const size_t o = (size_t)oy * (size_t)P->ow + (size_t)(lr ? P->ow - 16 - x : x);
    const __m512i rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int ch = 0; ch < 3; ch++) {
        __m512i v = p->c[ch];
        if (lr) v = _mm512_permutexvar_epi32(rev, v);
        if (P->dtype == KERN_AUG_F32)
            _mm512_storeu_ps((float *)P->dst + (size_t)ch * P->plane + o,
                             _mm512_div_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(255.0f)));
        else
            _mm_storeu_si128((__m128i *)(void *)((uint8_t *)P->dst + (size_t)ch * P->plane + o),
                             _mm512_cvtepi32_epi8(v));
    }
}

AUG_AVX512 static void run_avx512(const struct pass *P)
{
    const struct kern_aug_sample *smp = P->smp;
    struct cprep cp[2];
    prep_canvas(&smp->canvas[0], &cp[0]);
    if (smp->mixup) prep_canvas(&smp->canvas[1], &cp[1]);
    struct hsv_tabs tabs;
    struct lut512 lh, ls;
    struct lanes16 fill_hsv[2];
    if (smp->hsv) {
        hsv_tabs_init(&tabs, &smp->lut);
        lut512_load(&lh, smp->lut.h);
        lut512_load(&ls, smp->lut.s);
        for (int t = 0; t < 2; t++) {
            fill_hsv[t].c[0] = fill_hsv[t].c[1] = fill_hsv[t].c[2] =
                _mm512_set1_epi32(KERN_AUG_FILL);
            hsv16(&fill_hsv[t], &tabs, &lh, &ls, t == 1);
        }
    }
    const double r = smp->mixup_ratio, r2 = 1 - r;
    const int ow16 = P->ow / 16 * 16;
    for (int y = 0; y < P->oh; y++) {
        const int oy = smp->flip_ud ? P->oh - 1 - y : y;
        int X0[2], Y0[2];
        for (int k = 0; k < 1 + smp->mixup; k++) {
            X0[k] = affine_row(smp->inv[k][1], smp->inv[k][2], y);
            Y0[k] = affine_row(smp->inv[k][4], smp->inv[k][5], y);
        }
        for (int x = 0; x < ow16; x += 16) {
            struct lanes16 p, q;
            __m512i X, Y;
            coords16(smp->inv[0], smp->perspective[0], P->bw0, x, y, X0[0], Y0[0], &X, &Y);
            const bool fill = warp16(&smp->canvas[0], &cp[0], X, Y, &p);
            if (smp->mixup) {
                coords16(smp->inv[1], smp->perspective[1], P->bw0, x, y, X0[1], Y0[1], &X, &Y);
                warp16(&smp->canvas[1], &cp[1], X, Y, &q);
                for (int ch = 0; ch < 3; ch++)
                    p.c[ch] = mix16(p.c[ch], q.c[ch], r, r2);
            }
            /* simd_end is a multiple of 32: a group of 16 is wholly on one side */
            if (smp->hsv && fill && !smp->mixup)
                p = fill_hsv[x < P->simd_end];
            else if (smp->hsv)
                hsv16(&p, &tabs, &lh, &ls, x < P->simd_end);
            store16(P, &p, oy, x);
        }
        row_scalar(P, y, ow16);
    }
}
#endif

void kern_aug_sample_run(void *dst, int dtype, int oh, int ow, const struct kern_aug_sample *smp)
{
    const struct pass P = { .dst = dst,
                            .dtype = dtype,
                            .oh = oh,
                            .ow = ow,
                            .bw0 = persp_block(ow, oh),
                            .simd_end = ow / HSV_SIMD_BLOCK * HSV_SIMD_BLOCK,
                            .plane = (size_t)oh * (size_t)ow,
                            .smp = smp };
#if AUG_HAVE_AVX2
    const int level = kern_aug_simd(-1);
    if (level >= KERN_AUG_SIMD_AVX512) {
        run_avx512(&P);
        return;
    }
    if (level >= KERN_AUG_SIMD_AVX2) {
        run_avx2(&P);
        return;
    }
#endif
    for (int y = 0; y < oh; y++)
        row_scalar(&P, y, 0);
}

int kern_cpu_aug_sample(void *dst, int dtype, int oh, int ow, const struct kern_aug_sample *smp)
{
    if (!dst || !smp || bad_size(ow, oh) || (dtype != KERN_AUG_U8 && dtype != KERN_AUG_F32) ||
        kern_aug_sample_check(smp, oh) < 0 || (smp->hsv && !kern_aug_lut_ok(&smp->lut)))
        return -EINVAL;
    kern_aug_tables_init();
    kern_aug_sample_run(dst, dtype, oh, ow, smp);
    return 0;
}
