/*
 * Max pool 2d and nearest x2 upsample, CPU reference.
 *
 * Max pool (NCHW, float32): x (n, c, h_in, w_in) -> y, idx (n, c, h_out, w_out), h_out =
 * (h_in + 2 pad - k) / stride + 1. Padding is -inf, i.e. padded positions are skipped; idx is
 * the argmax as ih * w_in + iw within its plane (int32), as PyTorch's indices. The window is
 * scanned row-major and a value replaces the running max only if it is greater or NaN (PyTorch's
 * CPU rule), so ties keep the first maximum. Backward: dx[idx] += dy (windows overlap when
 * stride < k, as SPPF's MaxPool2d(5, 1, 2)).
 * Upsample: x (planes, h, w) -> y (planes, 2h, 2w), y[oy][ox] = x[oy / 2][ox / 2]; backward sums
 * each 2x2 block of dy.
 * Channel slices: x/dx and y/dy may each step their own n-stride (kern_pool2d.x_nstride and
 * y_nstride; the _ns upsample ops' arguments), dense within an image; plane p = i c + ch then
 * starts at i nstride + ch plane_size, which is p plane_size when dense. idx stays dense.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX (overwritten dx is never read).
 * Threads: planes are split over the context's threads; results do not depend on the count.
 */
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kern_internal.h"

int kern_pool2d_out_hw(const struct kern_pool2d *d, int *h_out, int *w_out)
{
    if (!d || !h_out || !w_out) return -EINVAL;
    if (d->n < 1 || d->c < 1 || d->h_in < 1 || d->w_in < 1 || d->k < 1 || d->stride < 1)
        return -EINVAL;
    if (d->pad < 0 || d->pad > d->k / 2) return -EINVAL;
    if ((long long)d->h_in * d->w_in > INT_MAX) return -EINVAL;
    const int hp = d->h_in + 2 * d->pad, wp = d->w_in + 2 * d->pad;
    if (hp < d->k || wp < d->k) return -EINVAL;
    const int oh = (hp - d->k) / d->stride + 1, ow = (wp - d->k) / d->stride + 1;
    /* a channel slice is at least as wide as its own channels */
    if (d->x_nstride && d->x_nstride < (size_t)d->c * d->h_in * d->w_in) return -EINVAL;
    if (d->y_nstride && d->y_nstride < (size_t)d->c * oh * ow) return -EINVAL;
    *h_out = oh;
    *w_out = ow;
    return 0;
}

/* Start of plane p (= image p / c, channel p % c) of a tensor whose images step ns elements
 * (0: dense) and whose planes hold `plane` elements. */
static size_t plane_at(size_t p, int c, size_t ns, size_t plane)
{
    if (!ns) return p * plane;
    return p / (size_t)c * ns + p % (size_t)c * plane;
}

struct pool_job {
    const struct kern_pool2d *d;
    int oh, ow;
    float *out;            /* fwd: y; bwd: dx */
    int32_t *idx;          /* fwd: argmax out (may be NULL) */
    const float *in;       /* fwd: x; bwd: dy */
    const int32_t *idx_in; /* bwd: argmax */
    int add;               /* bwd: dx += */
};

/* The window rule of PyTorch's CPU max_pool2d, scanning row-major: take v when v > m or v is
 * NaN. So the result is the last NaN of the window if it has one, else its first maximum. */
#define POOL_TAKE(v, m) ((v) > (m) || isnan(v))

/* Separable form of the k x k stride-1 window for planes of at most SEP_MAX row results: a
 * horizontal pass keeps each row segment's winner (value and column), a vertical pass picks
 * among the rows with the same rule. Equal to the direct scan: with no NaN the first row holding
 * the maximum wins and, in it, the first column; with NaNs the last row holding one and, in it,
 * the last. k + k comparisons per output instead of k * k (SPPF's 5x5: 10 instead of 25). */
#define SEP_MAX 16384

static void maxpool_plane_sep(const struct kern_pool2d *d, int oh, int ow, const float *xp,
                              float *yp, int32_t *ip)
{
    float rv[SEP_MAX];
    int32_t rc[SEP_MAX];
    for (int iy = 0; iy < d->h_in; iy++) {
        const float *const row = xp + (size_t)iy * d->w_in;
        for (int ox = 0; ox < ow; ox++) {
            int x0 = ox - d->pad, x1 = x0 + d->k;
            if (x0 < 0) x0 = 0;
            if (x1 > d->w_in) x1 = d->w_in;
            float m = -INFINITY;
            int best = x0;
            for (int ix = x0; ix < x1; ix++)
                if (POOL_TAKE(row[ix], m)) {
                    m = row[ix];
                    best = ix;
                }
            rv[(size_t)iy * ow + ox] = m;
            rc[(size_t)iy * ow + ox] = best;
        }
    }
    for (int oy = 0; oy < oh; oy++) {
        int y0 = oy - d->pad, y1 = y0 + d->k;
        if (y0 < 0) y0 = 0;
        if (y1 > d->h_in) y1 = d->h_in;
        for (int ox = 0; ox < ow; ox++) {
            float m = -INFINITY;
            int best = y0 * d->w_in + rc[(size_t)y0 * ow + ox];
            for (int iy = y0; iy < y1; iy++) {
                const float v = rv[(size_t)iy * ow + ox];
                if (POOL_TAKE(v, m)) {
                    m = v;
                    best = iy * d->w_in + rc[(size_t)iy * ow + ox];
                }
            }
            yp[(size_t)oy * ow + ox] = m;
            if (ip) ip[(size_t)oy * ow + ox] = best;
        }
    }
}

static void maxpool_fwd_task(void *arg, int w, int nw)
{
    const struct pool_job *const j = arg;
    const struct kern_pool2d *const d = j->d;
    const int oh = j->oh, ow = j->ow;
    const size_t in_plane = (size_t)d->h_in * d->w_in, out_plane = (size_t)oh * ow;
    size_t lo, hi;
    kern_share((size_t)d->n * (size_t)d->c, w, nw, &lo, &hi);
    const bool sep = d->stride == 1 && d->k > 2 && (size_t)d->h_in * (size_t)ow <= SEP_MAX;
    for (size_t pl = lo; pl < hi; pl++) {
        if (sep) {
            maxpool_plane_sep(d, oh, ow, j->in + plane_at(pl, d->c, d->x_nstride, in_plane),
                              j->out + plane_at(pl, d->c, d->y_nstride, out_plane),
                              j->idx ? j->idx + pl * out_plane : NULL);
            continue;
        }
        const float *const xp = j->in + plane_at(pl, d->c, d->x_nstride, in_plane);
        float *const yp = j->out + plane_at(pl, d->c, d->y_nstride, out_plane);
        int32_t *const ip = j->idx ? j->idx + pl * out_plane : NULL;
        for (int oy = 0; oy < oh; oy++) {
            int y0 = oy * d->stride - d->pad, y1 = y0 + d->k;
            if (y0 < 0) y0 = 0;
            if (y1 > d->h_in) y1 = d->h_in;
            for (int ox = 0; ox < ow; ox++) {
                int x0 = ox * d->stride - d->pad, x1 = x0 + d->k;
                if (x0 < 0) x0 = 0;
                if (x1 > d->w_in) x1 = d->w_in;
                /* pad <= k/2 guarantees y0 < y1 and x0 < x1: the window holds real inputs. */
                int best = y0 * d->w_in + x0;
                float m = -INFINITY;
                for (int iy = y0; iy < y1; iy++) {
                    for (int ix = x0; ix < x1; ix++) {
                        const int at = iy * d->w_in + ix;
                        const float v = xp[at];
                        if (POOL_TAKE(v, m)) {
                            m = v;
                            best = at;
                        }
                    }
                }
                yp[(size_t)oy * ow + ox] = m;
                if (ip) ip[(size_t)oy * ow + ox] = best;
            }
        }
    }
}

int kern_ref_maxpool2d_fwd(struct kern_ctx *ctx, const struct kern_pool2d *d, float *restrict y,
                           int32_t *restrict idx, const float *restrict x)
{
    int oh, ow;
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = kern_pool2d_out_hw(d, &oh, &ow);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!y || !x, -EINVAL);
    struct pool_job j = { d, oh, ow, y, idx, x, NULL, 0 };
    kern_parallel(ctx, maxpool_fwd_task, &j,
                  (size_t)d->n * d->c * (size_t)oh * ow * (size_t)d->k * d->k);
    return 0;
}

static void maxpool_bwd_task(void *arg, int w, int nw)
{
    const struct pool_job *const j = arg;
    const struct kern_pool2d *const d = j->d;
    const size_t in_plane = (size_t)d->h_in * d->w_in, out_plane = (size_t)j->oh * j->ow;
    size_t lo, hi;
    kern_share((size_t)d->n * (size_t)d->c, w, nw, &lo, &hi);
    for (size_t pl = lo; pl < hi; pl++) {
        float *const dxp = j->out + plane_at(pl, d->c, d->x_nstride, in_plane);
        const float *const dyp = j->in + plane_at(pl, d->c, d->y_nstride, out_plane);
        const int32_t *const ip = j->idx_in + pl * out_plane;
        if (!j->add) memset(dxp, 0, in_plane * sizeof(float));
        for (size_t k = 0; k < out_plane; k++) {
            /* An index from outside the plane is a caller bug; skip it rather than scribble. */
            if (ip[k] < 0 || (size_t)ip[k] >= in_plane) continue;
            dxp[ip[k]] += dyp[k];
        }
    }
}

int kern_ref_maxpool2d_bwd(struct kern_ctx *ctx, const struct kern_pool2d *d, float *restrict dx,
                           const float *restrict dy, const int32_t *restrict idx, unsigned accum)
{
    int oh, ow;
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    const int rc = kern_pool2d_out_hw(d, &oh, &ow);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!dx || !dy || !idx, -EINVAL);
    struct pool_job j = { d, oh, ow, dx, NULL, dy, idx, (accum & KERN_ACCUM_DX) != 0 };
    kern_parallel(ctx, maxpool_bwd_task, &j,
                  (size_t)d->n * d->c * ((size_t)oh * ow + (size_t)d->h_in * d->w_in));
    return 0;
}

/* ---- Max pool on channel blocks (kern_tensor.h "kern_poolblk") ---- */

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

int kern_poolblk_fwd(int h, int w, int k, int blk, float *y, uint8_t *idx, const float *x)
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

int kern_poolblk_bwd(int h, int w, int k, int blk, float *dx, const float *dy, const uint8_t *idx,
                     int add)
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

int kern_upblk_fwd(int h, int w, int blk, float *y, const float *x)
{
    const int rc = upblk_check(h, w, blk, y, x);
    if (rc < 0) return rc;
    if (blk == 16)
        upblk_fwd_l(h, w, 16, y, x);
    else
        upblk_fwd_l(h, w, 8, y, x);
    return 0;
}

int kern_upblk_bwd(int h, int w, int blk, float *dx, const float *dy, int add)
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
static int upsample_check(struct kern_ctx *ctx, const void *a, const void *b, int n, int c, int h,
                          int w, size_t x_ns, size_t y_ns)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!a || !b || n < 1 || c < 1 || h < 1 || w < 1, -EINVAL);
    KERN_RETURN_IF((long long)h * w * 4 > INT_MAX, -EINVAL);
    const size_t img = (size_t)c * (size_t)h * (size_t)w;
    KERN_RETURN_IF((x_ns && x_ns < img) || (y_ns && y_ns < 4 * img), -EINVAL);
    return 0;
}

struct up_job {
    float *out;
    const float *in;
    int planes, h, w;
    int add;
    int c;             /* channels per image (planes = n c) */
    size_t x_ns, y_ns; /* n-strides of the x and y sides (0: dense) */
};

static void upsample_fwd_task(void *arg, int w_, int nw)
{
    const struct up_job *const j = arg;
    const int w = j->w, h = j->h;
    const size_t wo = 2 * (size_t)w;
    size_t lo, hi;
    kern_share((size_t)j->planes, w_, nw, &lo, &hi);
    for (size_t pl = lo; pl < hi; pl++) {
        const float *const xp = j->in + plane_at(pl, j->c, j->x_ns, (size_t)h * w);
        float *const yp = j->out + plane_at(pl, j->c, j->y_ns, 4 * (size_t)h * w);
        for (int iy = 0; iy < h; iy++) {
            float *const row = yp + 2 * (size_t)iy * wo;
            for (int ix = 0; ix < w; ix++) {
                const float v = xp[(size_t)iy * w + ix];
                row[2 * ix] = v;
                row[2 * ix + 1] = v;
            }
            memcpy(row + wo, row, wo * sizeof(float));
        }
    }
}

int kern_ref_upsample2x_fwd(struct kern_ctx *ctx, float *restrict y, const float *restrict x,
                            int planes, int h, int w)
{
    return kern_ref_upsample2x_ns_fwd(ctx, y, x, planes, 1, h, w, 0, 0);
}

int kern_ref_upsample2x_ns_fwd(struct kern_ctx *ctx, float *restrict y, const float *restrict x,
                               int n, int c, int h, int w, size_t y_nstride, size_t x_nstride)
{
    const int rc = upsample_check(ctx, y, x, n, c, h, w, x_nstride, y_nstride);
    if (rc < 0) return rc;
    KERN_RETURN_IF((long long)n * c > INT_MAX, -EINVAL);
    const int planes = n * c;
    struct up_job j = { y, x, planes, h, w, 0, c, x_nstride, y_nstride };
    kern_parallel(ctx, upsample_fwd_task, &j, (size_t)planes * h * w * 5);
    return 0;
}

static void upsample_bwd_task(void *arg, int w_, int nw)
{
    const struct up_job *const j = arg;
    const int w = j->w, h = j->h;
    const size_t wo = 2 * (size_t)w;
    size_t lo, hi;
    kern_share((size_t)j->planes, w_, nw, &lo, &hi);
    for (size_t pl = lo; pl < hi; pl++) {
        float *const dxp = j->out + plane_at(pl, j->c, j->x_ns, (size_t)h * w);
        const float *const dyp = j->in + plane_at(pl, j->c, j->y_ns, 4 * (size_t)h * w);
        for (int iy = 0; iy < h; iy++) {
            const float *const r0 = dyp + 2 * (size_t)iy * wo, *const r1 = r0 + wo;
            for (int ix = 0; ix < w; ix++) {
                /* PyTorch's order: output pixels in scan order. */
                const float s = ((r0[2 * ix] + r0[2 * ix + 1]) + r1[2 * ix]) + r1[2 * ix + 1];
                float *const o = dxp + (size_t)iy * w + ix;
                *o = j->add ? *o + s : s;
            }
        }
    }
}

int kern_ref_upsample2x_bwd(struct kern_ctx *ctx, float *restrict dx, const float *restrict dy,
                            int planes, int h, int w, unsigned accum)
{
    return kern_ref_upsample2x_ns_bwd(ctx, dx, dy, planes, 1, h, w, 0, 0, accum);
}

int kern_ref_upsample2x_ns_bwd(struct kern_ctx *ctx, float *restrict dx, const float *restrict dy,
                               int n, int c, int h, int w, size_t x_nstride, size_t y_nstride,
                               unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = upsample_check(ctx, dx, dy, n, c, h, w, x_nstride, y_nstride);
    if (rc < 0) return rc;
    KERN_RETURN_IF((long long)n * c > INT_MAX, -EINVAL);
    const int planes = n * c;
    const int add = (accum & KERN_ACCUM_DX) != 0;
    struct up_job j = { dx, dy, planes, h, w, add, c, x_nstride, y_nstride };
    kern_parallel(ctx, upsample_bwd_task, &j, (size_t)planes * h * w * 5);
    return 0;
}
