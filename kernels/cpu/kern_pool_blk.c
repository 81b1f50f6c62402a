/*
 * Max pool and nearest x2 upsample on channel-blocked planes (kern_cpu.h): SPPF's pools and the
 * neck's upsamples in the CPU oneDNN executor's layout, each the bits of its NCHW reference
 * (ref/kern_pool.c), with an AVX-512 pool where the CPU has it.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kern_cpu_internal.h"
#include "kern_internal.h"
#include "kern_pool_common.h"

/* ---- Max pool on channel blocks (kern_cpu.h "kern_poolblk") ---- */

/* inlined into each lane count's instance, so that the lane loops have a constant trip count */
#define POOLBLK_INLINE static inline __attribute__((always_inline))
#define POOLBLK_MAX    16

static int poolblk_check(int h, int w, int k, int blk, const void *a, const void *b)
{
    KERN_RETURN_IF(!a || !b || h < 1 || w < 1 || w > KERN_POOLBLK_MAX_W, -EINVAL);
    KERN_RETURN_IF(blk != 8 && blk != 16, -EINVAL);
    KERN_RETURN_IF(k < 1 || k > KERN_POOLBLK_MAX_K || !(k & 1), -EINVAL);
    KERN_RETURN_IF((long long)h * w > INT_MAX / 16, -EINVAL);
    return 0;
}

/*
 * The forward is the direct window scan of maxpool_fwd_task: each lane's rule (POOL_TAKE), start
 * and order are that code's (whose separable form gives the same winner), so y and the element
 * idx names are its. The backward: each input gathers the outputs whose window holds it, in
 * row-major output order, adding the lanes whose winner it is: per element the additions of
 * maxpool_bwd_task's scatter, in its order, from 0.
 *
 * Two forms of each. Plain C on L lanes for any CPU. And for 16 lanes where the CPU has AVX-512,
 * one zmm per position, a row at a time with the window's elements outer and the outputs inner,
 * so that one output's compare and select chain does not wait on the last. The vectoriser left
 * the plain form's backward scalar (3.2 ms for yolov5n's SPPF pool at 320 b16, one thread), and
 * GCC's generic 64-byte vectors came out as 256-bit halves shuffled together (worse still).
 */
POOLBLK_INLINE void poolblk_fwd_l(int h, int w, int k, const int L, float *restrict y,
                                  uint8_t *restrict idx, const float *restrict x)
{
    const int p = k / 2;
    for (int oy = 0; oy < h; oy++) {
        const int y0 = oy - p < 0 ? 0 : oy - p, y1 = oy - p + k > h ? h : oy - p + k;
        for (int ox = 0; ox < w; ox++) {
            const int x0 = ox - p < 0 ? 0 : ox - p, x1 = ox - p + k > w ? w : ox - p + k;
            float m[POOLBLK_MAX];
            uint8_t t[POOLBLK_MAX];
            for (int l = 0; l < L; l++) {
                m[l] = -INFINITY;
                t[l] = (uint8_t)((y0 - oy + p) * k + x0 - ox + p);
            }
            for (int iy = y0; iy < y1; iy++)
                for (int ix = x0; ix < x1; ix++) {
                    const float *const v = x + ((size_t)iy * (size_t)w + (size_t)ix) * (size_t)L;
                    for (int l = 0; l < L; l++)
                        if (POOL_TAKE(v[l], m[l])) {
                            m[l] = v[l];
                            t[l] = (uint8_t)((iy - oy + p) * k + ix - ox + p);
                        }
                }
            const size_t o = ((size_t)oy * (size_t)w + (size_t)ox) * (size_t)L;
            memcpy(y + o, m, (size_t)L * sizeof *m);
            if (idx) memcpy(idx + o, t, (size_t)L);
        }
    }
}

POOLBLK_INLINE void poolblk_bwd_l(int h, int w, int k, const int L, float *restrict dx,
                                  const float *restrict dy, const uint8_t *restrict idx, int add)
{
    const int p = k / 2;
    for (int iy = 0; iy < h; iy++) {
        const int oy0 = iy + p - k + 1 < 0 ? 0 : iy + p - k + 1;
        const int oy1 = iy + p + 1 > h ? h : iy + p + 1;
        for (int ix = 0; ix < w; ix++) {
            const int ox0 = ix + p - k + 1 < 0 ? 0 : ix + p - k + 1;
            const int ox1 = ix + p + 1 > w ? w : ix + p + 1;
            float s[POOLBLK_MAX] = { 0 };
            for (int oy = oy0; oy < oy1; oy++)
                for (int ox = ox0; ox < ox1; ox++) {
                    const size_t o = ((size_t)oy * (size_t)w + (size_t)ox) * (size_t)L;
                    const int tt = (iy - oy + p) * k + ix - ox + p;
                    for (int l = 0; l < L; l++)
                        if (idx[o + (size_t)l] == tt) s[l] += dy[o + (size_t)l];
                }
            float *const g = dx + ((size_t)iy * (size_t)w + (size_t)ix) * (size_t)L;
            for (int l = 0; l < L; l++)
                g[l] = add ? g[l] + s[l] : s[l];
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define POOLBLK_AVX512     __attribute__((target("avx512f")))
#define POOLBLK_HAS_AVX512 1

POOLBLK_AVX512 static void poolblk_fwd16_avx512(int h, int w, int k, float *y, uint8_t *idx,
                                                const float *x)
{
    const int p = k / 2;
    __m512 m[KERN_POOLBLK_MAX_W];
    __m512i t[KERN_POOLBLK_MAX_W];
    for (int oy = 0; oy < h; oy++) {
        const int y0 = oy - p < 0 ? 0 : oy - p, y1 = oy - p + k > h ? h : oy - p + k;
        for (int ox = 0; ox < w; ox++) {
            const int x0 = ox - p < 0 ? 0 : ox - p;
            m[ox] = _mm512_set1_ps(-INFINITY);
            t[ox] = _mm512_set1_epi32((y0 - oy + p) * k + x0 - ox + p);
        }
        for (int iy = y0; iy < y1; iy++)
            for (int kw = 0; kw < k; kw++) { /* ix = ox - p + kw */
                const int o0 = kw < p ? p - kw : 0, o1 = kw < p ? w : w + p - kw;
                const __m512i tt = _mm512_set1_epi32((iy - oy + p) * k + kw);
                const float *const xr = x + ((long)iy * w - p + kw) * 16;
                for (int ox = o0; ox < o1; ox++) {
                    const __m512 v = _mm512_loadu_ps(xr + (size_t)ox * 16);
                    const __mmask16 take = _mm512_cmp_ps_mask(v, m[ox], _CMP_GT_OQ) |
                                           _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                    m[ox] = _mm512_mask_mov_ps(m[ox], take, v);
                    t[ox] = _mm512_mask_mov_epi32(t[ox], take, tt);
                }
            }
        for (int ox = 0; ox < w; ox++) {
            const size_t o = ((size_t)oy * (size_t)w + (size_t)ox) * 16;
            _mm512_storeu_ps(y + o, m[ox]);
            if (idx) _mm_storeu_si128((__m128i *)(idx + o), _mm512_cvtepi32_epi8(t[ox]));
        }
    }
}

POOLBLK_AVX512 static void poolblk_bwd16_avx512(int h, int w, int k, float *dx, const float *dy,
                                                const uint8_t *idx, int add)
{
    const int p = k / 2;
    __m512 s[KERN_POOLBLK_MAX_W];
    for (int iy = 0; iy < h; iy++) {
        const int oy0 = iy + p - k + 1 < 0 ? 0 : iy + p - k + 1;
        const int oy1 = iy + p + 1 > h ? h : iy + p + 1;
        for (int ix = 0; ix < w; ix++)
            s[ix] = _mm512_setzero_ps();
        for (int oy = oy0; oy < oy1; oy++)
            for (int kw = k - 1; kw >= 0; kw--) { /* ox = ix + p - kw, rising */
                const int i0 = kw > p ? kw - p : 0, i1 = kw > p ? w : w + kw - p;
                const __m512i tt = _mm512_set1_epi32((iy - oy + p) * k + kw);
                const long r = ((long)oy * w + p - kw) * 16;
                for (int ix = i0; ix < i1; ix++) {
                    const size_t o = (size_t)(r + (long)ix * 16);
                    const __m512i t =
                        _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(idx + o)));
                    const __mmask16 hit = _mm512_cmpeq_epi32_mask(t, tt);
                    s[ix] = _mm512_mask_add_ps(s[ix], hit, s[ix], _mm512_loadu_ps(dy + o));
                }
            }
        for (int ix = 0; ix < w; ix++) {
            float *const g = dx + ((size_t)iy * (size_t)w + (size_t)ix) * 16;
            _mm512_storeu_ps(g, add ? _mm512_add_ps(_mm512_loadu_ps(g), s[ix]) : s[ix]);
        }
    }
}
#else
#define POOLBLK_HAS_AVX512 0
#endif

static bool poolblk_avx512(int blk)
{
#if POOLBLK_HAS_AVX512
    return blk == 16 && __builtin_cpu_supports("avx512f");
#else
    (void)blk;
    return false;
#endif
}

int kern_cpu_poolblk_fwd(int h, int w, int k, int blk, float *y, uint8_t *idx, const float *x)
{
    const int rc = poolblk_check(h, w, k, blk, y, x);
    if (rc < 0) return rc;
#if POOLBLK_HAS_AVX512
    if (poolblk_avx512(blk)) {
        poolblk_fwd16_avx512(h, w, k, y, idx, x);
        return 0;
    }
#endif
    if (blk == 16)
        poolblk_fwd_l(h, w, k, 16, y, idx, x);
    else
        poolblk_fwd_l(h, w, k, 8, y, idx, x);
    return 0;
}

int kern_cpu_poolblk_bwd(int h, int w, int k, int blk, float *dx, const float *dy,
                         const uint8_t *idx, int add)
{
    const int rc = poolblk_check(h, w, k, blk, dx, dy);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!idx, -EINVAL);
#if POOLBLK_HAS_AVX512
    if (poolblk_avx512(blk)) {
        poolblk_bwd16_avx512(h, w, k, dx, dy, idx, add);
        return 0;
    }
#endif
    if (blk == 16)
        poolblk_bwd_l(h, w, k, 16, dx, dy, idx, add);
    else
        poolblk_bwd_l(h, w, k, 8, dx, dy, idx, add);
    return 0;
}

/*
 * Nearest x2 on one channel-blocked plane: each input position's L lanes to its 2x2 outputs, and
 * back as the 2x2 block's sum in upsample_bwd_task's order per lane. L a constant at each call
 * (POOLBLK_INLINE), so the lane loops become vector moves and adds.
 */
POOLBLK_INLINE void upblk_fwd_l(int h, int w, const int L, float *restrict y,
                                const float *restrict x)
{
    const size_t row = 2 * (size_t)w * (size_t)L; /* one output row's floats */
    for (int iy = 0; iy < h; iy++) {
        float *const o = y + 2 * (size_t)iy * row;
        const float *const in = x + (size_t)iy * (size_t)w * (size_t)L;
        for (int ix = 0; ix < w; ix++)
            for (int l = 0; l < L; l++) {
                const float v = in[(size_t)ix * (size_t)L + (size_t)l];
                o[2 * (size_t)ix * (size_t)L + (size_t)l] = v;
                o[(2 * (size_t)ix + 1) * (size_t)L + (size_t)l] = v;
            }
        memcpy(o + row, o, row * sizeof *o);
    }
}

POOLBLK_INLINE void upblk_bwd_l(int h, int w, const int L, float *restrict dx,
                                const float *restrict dy, int add)
{
    const size_t row = 2 * (size_t)w * (size_t)L;
    for (int iy = 0; iy < h; iy++) {
        const float *const r0 = dy + 2 * (size_t)iy * row, *const r1 = r0 + row;
        float *const g = dx + (size_t)iy * (size_t)w * (size_t)L;
        for (int ix = 0; ix < w; ix++) {
            const size_t a = 2 * (size_t)ix * (size_t)L, b = a + (size_t)L;
            float *const gi = g + (size_t)ix * (size_t)L;
            for (int l = 0; l < L; l++) {
                const float v = ((r0[a + (size_t)l] + r0[b + (size_t)l]) + r1[a + (size_t)l]) +
                                r1[b + (size_t)l];
                gi[l] = add ? gi[l] + v : v;
            }
        }
    }
}

static int upblk_check(int h, int w, int blk, const void *a, const void *b)
{
    KERN_RETURN_IF(!a || !b || h < 1 || w < 1 || (blk != 8 && blk != 16), -EINVAL);
    KERN_RETURN_IF((long long)h * w > INT_MAX / 64, -EINVAL);
    return 0;
}

int kern_cpu_upblk_fwd(int h, int w, int blk, float *y, const float *x)
{
    const int rc = upblk_check(h, w, blk, y, x);
    if (rc < 0) return rc;
    if (blk == 16)
        upblk_fwd_l(h, w, 16, y, x);
    else
        upblk_fwd_l(h, w, 8, y, x);
    return 0;
}

int kern_cpu_upblk_bwd(int h, int w, int blk, float *dx, const float *dy, int add)
{
    const int rc = upblk_check(h, w, blk, dx, dy);
    if (rc < 0) return rc;
    if (blk == 16)
        upblk_bwd_l(h, w, 16, dx, dy, add);
    else
        upblk_bwd_l(h, w, 8, dx, dy, add);
    return 0;
}

/* Also the n-strides: the x side's >= c h w, the y side's >= 4 c h w (0: dense). */
