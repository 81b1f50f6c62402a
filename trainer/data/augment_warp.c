/*
 * Geometric pixel operations of augment.h, reproducing OpenCV 4.x's uint8 arithmetic
 * (modules/imgproc/src/imgwarp.cpp, resize.cpp; the non-IPP CPU path that Debian's build and, for
 * these calls, the opencv-python wheels run):
 *
 * warpAffine / warpPerspective, INTER_LINEAR, BORDER_CONSTANT: the forward matrix is inverted
 * (kern_aug_warp_invert) and the image sampled by the kern op kern_ref_aug_warp, whose comment
 * (kernels/ref/kern_augment.c) has the fixed-point rules; the CUDA twin gives the same bytes.
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

#define MAX_SIDE 32767

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

int trn_aug_warp_affine(const uint8_t *src, int src_w, int src_h, const double M0[6], uint8_t *dst,
                        int dst_w, int dst_h, uint8_t border_value)
{
    if (!src || !M0 || !dst || bad_size(src_w, src_h) || bad_size(dst_w, dst_h)) return -EINVAL;
    struct kern_ctx *const k = trn_aug_cpu_ctx();
    if (!k) return -ENOMEM;
    double M[9] = { M0[0], M0[1], M0[2], M0[3], M0[4], M0[5], 0, 0, 1 }, inv[9];
    kern_aug_warp_invert(M, 0, inv);
    return kern_ref_aug_warp(k, dst, dst_w, dst_h, src, src_w, src_h, inv, 0, border_value);
}

int trn_aug_warp_perspective(const uint8_t *src, int src_w, int src_h, const double M0[9],
                             uint8_t *dst, int dst_w, int dst_h, uint8_t border_value)
{
    if (!src || !M0 || !dst || bad_size(src_w, src_h) || bad_size(dst_w, dst_h)) return -EINVAL;
    struct kern_ctx *const k = trn_aug_cpu_ctx();
    if (!k) return -ENOMEM;
    double inv[9];
    kern_aug_warp_invert(M0, 1, inv);
    return kern_ref_aug_warp(k, dst, dst_w, dst_h, src, src_w, src_h, inv, 1, border_value);
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
