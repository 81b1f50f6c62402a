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
#include "kern_pool_common.h"

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
