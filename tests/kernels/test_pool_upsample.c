/*
 * Max pool 2d and nearest x2 upsample CPU references (kern_ref_maxpool2d_*,
 * kern_ref_upsample2x_*).
 *
 * Max pool against a naive pool over the padded window (padding -inf) on SPPF's k5 s1 p2 and
 * other shapes; ties (inputs drawn from {0, 1, 2}) must pick the first maximum in scan order
 * like PyTorch; all-negative inputs prove the padding is -inf, not 0; backward against the
 * scatter of dy to the argmax, finite differences on distinct inputs, accumulate mode.
 * Upsample against out[y][x] = in[y/2][x/2]; backward against the 2x2 sums and finite
 * differences. Exact ops: results must match bit for bit, except sums of dy, checked to 1e-6;
 * finite differences (piecewise linear ops, h = 1e-3 with inputs >= 1e-2 apart): 1e-3 + 1e-3 |g|.
 * The blocked pools (kern_poolblk_*, the oneDNN executor's) against the reference, bit for bit.
 */
#include <errno.h>

#include "kern_testutil.h"

static void naive_pool(const struct kern_pool2d *d, int oh, int ow, float *y, int32_t *idx,
                       const float *x)
{
    for (int p = 0; p < d->n * d->c; p++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                float m = -INFINITY;
                int32_t at = -1;
                for (int ky = 0; ky < d->k; ky++)
                    for (int kx = 0; kx < d->k; kx++) {
                        const int iy = oy * d->stride - d->pad + ky;
                        const int ix = ox * d->stride - d->pad + kx;
                        if (iy < 0 || iy >= d->h_in || ix < 0 || ix >= d->w_in) continue;
                        const float v = x[((size_t)p * d->h_in + iy) * d->w_in + ix];
                        if (at < 0 || v > m) m = v, at = iy * d->w_in + ix;
                    }
                y[((size_t)p * oh + oy) * ow + ox] = m;
                idx[((size_t)p * oh + oy) * ow + ox] = at;
            }
}

struct fd_state {
    struct kern_ctx *ctx;
    const struct kern_pool2d *d;
    float *x, *y, *r;
    size_t ny;
};

static double fd_loss(void *p)
{
    struct fd_state *const s = p;
    kern_ref_maxpool2d_fwd(s->ctx, s->d, s->y, NULL, s->x);
    return kt_dot(s->r, s->y, s->ny);
}

static void check_pool(int n, int c, int h, int w, int k, int stride, int pad, int ties,
                       const char *label)
{
    struct kern_pool2d d = { n, c, h, w, k, stride, pad, 0, 0 };
    int oh, ow;
    struct kern_ctx *const ctx = kt_ctx(0);
    if (kern_pool2d_out_hw(&d, &oh, &ow) < 0) {
        ok(0, "%s: shape accepted", label);
        return;
    }
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * oh * ow;
    float *const x = kt_alloc(nx), *const y = kt_alloc(ny), *const ry = kt_alloc(ny);
    int32_t *const idx = malloc(ny * 4), *const ridx = malloc(ny * 4);
    float *const dy = kt_alloc(ny), *const dx = kt_alloc(nx), *const dx0 = kt_alloc(nx);
    double *const rdx = malloc(nx * 8);
    if (!idx || !ridx || !rdx) exit(99);
    if (ties) {
        for (size_t i = 0; i < nx; i++)
            x[i] = (float)kt_randint(0, 2);
    } else {
        /* Distinct values at least 1e-2 apart: a shuffled ramp, all negative so that a zero
         * padding would win and be caught. */
        for (size_t i = 0; i < nx; i++)
            x[i] = -1.0f - 0.01f * (float)i;
        for (size_t i = nx; i > 1; i--) {
            const size_t j = (size_t)kt_randint(0, (int)i - 1);
            const float t = x[i - 1];
            x[i - 1] = x[j], x[j] = t;
        }
    }
    naive_pool(&d, oh, ow, ry, ridx, x);
    kt_poison(y, ny);
    for (size_t i = 0; i < ny; i++)
        idx[i] = -7;
    is_int(kern_ref_maxpool2d_fwd(ctx, &d, y, idx, x), 0, "%s: fwd runs", label);
    ok(!memcmp(y, ry, ny * 4), "%s: y equals the naive pool bit for bit (%zu values)", label, ny);
    ok(!memcmp(idx, ridx, ny * 4), "%s: argmax indices equal the naive first-maximum", label);

    kt_fill(dy, ny, -1, 1);
    for (size_t i = 0; i < nx; i++)
        rdx[i] = 0.0;
    for (int p = 0; p < n * c; p++)
        for (int j = 0; j < oh * ow; j++)
            rdx[(size_t)p * h * w + ridx[(size_t)p * oh * ow + j]] += dy[(size_t)p * oh * ow + j];
    char what[160];
    kt_poison(dx, nx);
    is_int(kern_ref_maxpool2d_bwd(ctx, &d, dx, dy, idx, 0), 0, "%s: bwd runs", label);
    snprintf(what, sizeof(what), "%s: dx (=) vs scatter to argmax", label);
    kt_check_close(what, dx, rdx, nx, 1e-6, 1e-6);
    kt_fill(dx0, nx, -1, 1);
    memcpy(dx, dx0, nx * 4);
    kern_ref_maxpool2d_bwd(ctx, &d, dx, dy, idx, KERN_ACCUM_DX);
    for (size_t i = 0; i < nx; i++)
        rdx[i] += dx0[i];
    snprintf(what, sizeof(what), "%s: dx (+=)", label);
    kt_check_close(what, dx, rdx, nx, 1e-6, 1e-6);
    if (!ties) {
        kern_ref_maxpool2d_bwd(ctx, &d, dx, dy, idx, 0);
        struct fd_state s = { ctx, &d, x, y, dy, ny };
        snprintf(what, sizeof(what), "%s: dx", label);
        kt_check_fd(what, x, nx, dx, fd_loss, &s, 1e-3f, 1e-3, 1e-3, 1);
    }
    free(x), free(y), free(ry), free(idx), free(ridx), free(dy), free(dx), free(dx0), free(rdx);
    kern_ctx_destroy(ctx);
}

static void check_pool_special(void)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    struct kern_pool2d d = { 1, 1, 3, 3, 3, 1, 1, 0, 0 };
    float x[9], y[9];
    int32_t idx[9];
    for (int i = 0; i < 9; i++)
        x[i] = 5.0f;
    kern_ref_maxpool2d_fwd(ctx, &d, y, idx, x);
    ok(idx[0] == 0 && idx[4] == 0 && idx[8] == 4,
       "all-equal plane: argmax is the first valid element of each window (got %d %d %d)", idx[0],
       idx[4], idx[8]);
    for (int i = 0; i < 9; i++)
        x[i] = -INFINITY;
    kern_ref_maxpool2d_fwd(ctx, &d, y, idx, x);
    ok(y[4] == -INFINITY && idx[4] == 0, "all -inf: y is -inf, index the first valid element");
    for (int i = 0; i < 9; i++)
        x[i] = (float)i;
    x[2] = NAN;
    kern_ref_maxpool2d_fwd(ctx, &d, y, idx, x);
    ok(isnan(y[1]) && idx[1] == 2 && y[6] == 7.0f, "NaN propagates and is the argmax, as PyTorch");
    struct kern_pool2d bad = { 1, 1, 4, 4, 3, 1, 2, 0, 0 };
    int oh, ow;
    is_int(kern_pool2d_out_hw(&bad, &oh, &ow), -EINVAL, "pad > k/2 refused, as PyTorch");
    is_int(kern_ref_maxpool2d_bwd(ctx, &d, y, x, NULL, 0), -EINVAL, "bwd without indices refused");
    kern_ctx_destroy(ctx);
}

struct up_state {
    struct kern_ctx *ctx;
    float *x, *y, *r;
    int planes, h, w;
};

static double up_loss(void *p)
{
    struct up_state *const s = p;
    kern_ref_upsample2x_fwd(s->ctx, s->y, s->x, s->planes, s->h, s->w);
    return kt_dot(s->r, s->y, (size_t)s->planes * s->h * s->w * 4);
}

static void check_upsample(int planes, int h, int w)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const size_t nx = (size_t)planes * h * w, ny = 4 * nx;
    float *const x = kt_alloc(nx), *const y = kt_alloc(ny), *const dy = kt_alloc(ny);
    float *const dx = kt_alloc(nx), *const dx0 = kt_alloc(nx);
    double *const rdx = malloc(nx * 8);
    kt_fill(x, nx, -1, 1);
    kt_fill(dy, ny, -1, 1);
    kt_poison(y, ny);
    is_int(kern_ref_upsample2x_fwd(ctx, y, x, planes, h, w), 0, "upsample %dx%dx%d runs", planes, h,
           w);
    size_t bad = 0;
    for (int p = 0; p < planes; p++)
        for (int oy = 0; oy < 2 * h; oy++)
            for (int ox = 0; ox < 2 * w; ox++)
                bad += y[((size_t)p * 2 * h + oy) * 2 * w + ox] !=
                       x[((size_t)p * h + oy / 2) * w + ox / 2];
    ok(bad == 0, "upsample y[oy][ox] == x[oy/2][ox/2] everywhere (%zu mismatches)", bad);
    for (int p = 0; p < planes; p++)
        for (int iy = 0; iy < h; iy++)
            for (int ix = 0; ix < w; ix++) {
                double s = 0;
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++)
                        s += dy[((size_t)p * 2 * h + 2 * iy + a) * 2 * w + 2 * ix + b];
                rdx[((size_t)p * h + iy) * w + ix] = s;
            }
    kt_poison(dx, nx);
    kern_ref_upsample2x_bwd(ctx, dx, dy, planes, h, w, 0);
    kt_check_close("upsample bwd (=) vs 2x2 sums", dx, rdx, nx, 1e-6, 1e-6);
    kt_fill(dx0, nx, -1, 1);
    memcpy(dx, dx0, nx * 4);
    kern_ref_upsample2x_bwd(ctx, dx, dy, planes, h, w, KERN_ACCUM_DX);
    for (size_t i = 0; i < nx; i++)
        rdx[i] += dx0[i];
    kt_check_close("upsample bwd (+=)", dx, rdx, nx, 1e-6, 1e-6);
    kern_ref_upsample2x_bwd(ctx, dx, dy, planes, h, w, 0);
    struct up_state s = { ctx, x, y, dy, planes, h, w };
    kt_check_fd("upsample dx", x, nx, dx, up_loss, &s, 1e-2f, 1e-3, 1e-3, 1);
    is_int(kern_ref_upsample2x_fwd(ctx, y, x, 0, h, w), -EINVAL, "upsample: 0 planes refused");
    free(x), free(y), free(dy), free(dx), free(dx0), free(rdx);
    kern_ctx_destroy(ctx);
}

/* Threaded contexts split planes; results must be bit-identical to one thread. */
static void check_threads(void)
{
    struct kern_ctx *const c1 = kt_ctx_threads(1), *const c3 = kt_ctx_threads(3);
    const struct kern_pool2d d = { 2, 5, 40, 40, 5, 1, 2, 0, 0 };
    const size_t n = 2 * 5 * 40 * 40;
    float *const x = kt_alloc(n), *const y1 = kt_alloc(n), *const y3 = kt_alloc(n);
    float *const u1 = kt_alloc(4 * n), *const u3 = kt_alloc(4 * n), *const du = kt_alloc(4 * n);
    int32_t *const i1 = malloc(n * 4), *const i3 = malloc(n * 4);
    kt_fill(x, n, -1, 1);
    kt_fill(du, 4 * n, -1, 1);
    kt_poison(y3, n);
    kern_ref_maxpool2d_fwd(c1, &d, y1, i1, x);
    kern_ref_maxpool2d_fwd(c3, &d, y3, i3, x);
    ok(!memcmp(y1, y3, n * 4) && !memcmp(i1, i3, n * 4),
       "maxpool fwd with 3 threads bit-identical to 1");
    kt_poison(y3, n);
    kern_ref_maxpool2d_bwd(c1, &d, y1, x, i1, 0);
    kern_ref_maxpool2d_bwd(c3, &d, y3, x, i3, 0);
    ok(!memcmp(y1, y3, n * 4), "maxpool bwd with 3 threads bit-identical to 1");
    kt_poison(u3, 4 * n);
    kern_ref_upsample2x_fwd(c1, u1, x, 10, 40, 40);
    kern_ref_upsample2x_fwd(c3, u3, x, 10, 40, 40);
    ok(!memcmp(u1, u3, 16 * n), "upsample fwd with 3 threads bit-identical to 1");
    kt_poison(y3, n);
    kern_ref_upsample2x_bwd(c1, y1, du, 10, 40, 40, 0);
    kern_ref_upsample2x_bwd(c3, y3, du, 10, 40, 40, 0);
    ok(!memcmp(y1, y3, n * 4), "upsample bwd with 3 threads bit-identical to 1");
    free(x), free(y1), free(y3), free(u1), free(u3), free(du), free(i1), free(i3);
    kern_ctx_destroy(c1);
    kern_ctx_destroy(c3);
}

/* kern_poolblk_* on the blocked copy of an NCHW tensor against kern_ref_maxpool2d_* on it: the
 * same y and gradients bit for bit, and each idx naming the element the reference's index does.
 * Inputs with ties (drawn from {0, 1, 2}), a few NaNs and -inf, and channels that leave pad
 * lanes; dx into zeros and added to a gradient already there (as ref's into zeros, then +). */
static void check_poolblk(int n, int c, int h, int w, int k, int blk, const char *label)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const struct kern_pool2d d = { n, c, h, w, k, 1, k / 2, 0, 0 };
    const int cpad = (c + blk - 1) / blk * blk, nb = cpad / blk;
    const size_t hw = (size_t)h * (size_t)w, nx = (size_t)n * (size_t)c * hw;
    const size_t nbx = (size_t)n * (size_t)cpad * hw, plane = hw * (size_t)blk;
    float *const x = kt_alloc(nx), *const y = kt_alloc(nx), *const dy = kt_alloc(nx);
    float *const dx = kt_alloc(nx), *const dx0 = kt_alloc(nx);
    float *const bx = kt_alloc(nbx), *const by = kt_alloc(nbx), *const bdy = kt_alloc(nbx);
    float *const bdx = kt_alloc(nbx), *const want = kt_alloc(nbx);
    int32_t *const idx = malloc(nx * 4);
    uint8_t *const bidx = malloc(nbx);
    if (!idx || !bidx) exit(99);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)kt_randint(0, 2);
    x[3] = NAN, x[nx / 2] = NAN, x[nx - 1] = -INFINITY;
    for (size_t i = 0; i < nx; i++) /* magnitudes apart: the order of the sums shows in the bits */
        dy[i] = ldexpf(kt_uniform(-1, 1), kt_randint(-12, 12));
    kern_ref_maxpool2d_fwd(ctx, &d, y, idx, x);
    kt_to_blk(bx, x, n, c, cpad, blk, hw);
    kt_to_blk(bdy, dy, n, c, cpad, blk, hw);
    int rc = 0;
    for (int pl = 0; pl < n * nb; pl++)
        rc |= kern_ops_cpu()->poolblk_fwd(h, w, k, blk, by + pl * plane, bidx + pl * plane,
                                          bx + pl * plane);
    is_int(rc, 0, "%s: blocked fwd runs", label);
    kt_to_blk(want, y, n, c, cpad, blk, hw);
    /* NaN lanes: compare bits, not values (memcmp), pad lanes included (max of zeros: 0) */
    ok(!memcmp(by, want, nbx * 4), "%s: blocked y is the reference's bit for bit", label);
    size_t same = 0, named = 0;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (size_t o = 0; o < hw; o++) {
                const size_t b =
                    (((size_t)i * nb + (size_t)(ch / blk)) * hw + o) * blk + (size_t)(ch % blk);
                const int oy = (int)(o / (size_t)w), ox = (int)(o % (size_t)w);
                const int t = bidx[b], iy = oy - k / 2 + t / k, ix = ox - k / 2 + t % k;
                named++;
                same += iy * w + ix == idx[((size_t)i * c + (size_t)ch) * hw + o];
            }
    ok(same == named, "%s: each idx names the reference's argmax (%zu of %zu)", label, same, named);
    kern_ref_maxpool2d_bwd(ctx, &d, dx, dy, idx, 0);
    kt_poison(bdx, nbx);
    rc = 0;
    for (int pl = 0; pl < n * nb; pl++)
        rc |= kern_ops_cpu()->poolblk_bwd(h, w, k, blk, bdx + pl * plane, bdy + pl * plane,
                                          bidx + pl * plane, 0);
    kt_to_blk(want, dx, n, c, cpad, blk, hw);
    ok(!rc && !memcmp(bdx, want, nbx * 4), "%s: blocked dx (=) is the reference's bit for bit",
       label);
    kt_fill(dx0, nx, -1, 1);
    kt_to_blk(bdx, dx0, n, c, cpad, blk, hw);
    for (int pl = 0; pl < n * nb; pl++)
        kern_ops_cpu()->poolblk_bwd(h, w, k, blk, bdx + pl * plane, bdy + pl * plane,
                                    bidx + pl * plane, 1);
    for (size_t i = 0; i < nx; i++)
        dx[i] += dx0[i];
    kt_to_blk(want, dx, n, c, cpad, blk, hw);
    ok(!memcmp(bdx, want, nbx * 4), "%s: blocked dx (+) is the gradient there plus the reference's",
       label);
    free(x), free(y), free(dy), free(dx), free(dx0), free(bx), free(by), free(bdy), free(bdx);
    free(want), free(idx), free(bidx);
    kern_ctx_destroy(ctx);
}

static void check_poolblk_bad(void)
{
    float a[16] = { 0 }, b[16] = { 0 };
    uint8_t i[16] = { 0 };
    is_int(kern_ops_cpu()->poolblk_fwd(1, 1, 4, 16, a, i, b), -EINVAL, "poolblk: even k refused");
    is_int(kern_ops_cpu()->poolblk_fwd(1, 1, 17, 16, a, i, b), -EINVAL,
           "poolblk: k over the limit refused");
    is_int(kern_ops_cpu()->poolblk_fwd(1, 1, 5, 4, a, i, b), -EINVAL, "poolblk: blk 4 refused");
    is_int(kern_ops_cpu()->poolblk_bwd(1, 1, 5, 16, a, b, NULL, 0), -EINVAL,
           "poolblk: bwd without idx");
    is_int(kern_ops_cpu()->poolblk_fwd(1, 1, 5, 16, a, NULL, b), 0,
           "poolblk: fwd without idx runs");
}

/* kern_upblk against kern_ref_upsample2x on the same values in NCHW: y, dx (=) and dx (+) bit
 * for bit, pad lanes included (zeros in, zeros out). */
static void check_upblk(int n, int c, int h, int w, int blk, const char *label)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const int cpad = (c + blk - 1) / blk * blk, nb = cpad / blk;
    const size_t hw = (size_t)h * (size_t)w, nx = (size_t)n * (size_t)c * hw, ny = 4 * nx;
    const size_t nbx = (size_t)n * (size_t)cpad * hw, nby = 4 * nbx, plane = hw * (size_t)blk;
    float *const x = kt_alloc(nx), *const y = kt_alloc(ny), *const dy = kt_alloc(ny);
    float *const dx = kt_alloc(nx), *const dx0 = kt_alloc(nx);
    float *const bx = kt_alloc(nbx), *const by = kt_alloc(nby), *const bdy = kt_alloc(nby);
    float *const bdx = kt_alloc(nbx), *const want = kt_alloc(nby);
    kt_fill(x, nx, -1, 1);
    /* magnitudes 2^-12 .. 2^12: the 2x2 sums round, so their order shows in the bits (values
       on one grid would add exactly in any order) */
    for (size_t i = 0; i < ny; i++)
        dy[i] = ldexpf(kt_uniform(-1, 1), kt_randint(-12, 12));
    kern_ref_upsample2x_fwd(ctx, y, x, n * c, h, w);
    kt_to_blk(bx, x, n, c, cpad, blk, hw);
    kt_to_blk(bdy, dy, n, c, cpad, blk, 4 * hw);
    kt_poison(by, nby);
    int rc = 0;
    for (int pl = 0; pl < n * nb; pl++)
        rc |= kern_ops_cpu()->upblk_fwd(h, w, blk, by + 4 * pl * plane, bx + pl * plane);
    kt_to_blk(want, y, n, c, cpad, blk, 4 * hw);
    ok(!rc && !memcmp(by, want, nby * 4), "%s: blocked y is the reference's bit for bit", label);
    kern_ref_upsample2x_bwd(ctx, dx, dy, n * c, h, w, 0);
    kt_poison(bdx, nbx);
    rc = 0;
    for (int pl = 0; pl < n * nb; pl++)
        rc |= kern_ops_cpu()->upblk_bwd(h, w, blk, bdx + pl * plane, bdy + 4 * pl * plane, 0);
    kt_to_blk(want, dx, n, c, cpad, blk, hw);
    ok(!rc && !memcmp(bdx, want, nbx * 4), "%s: blocked dx (=) is the reference's bit for bit",
       label);
    kt_fill(dx0, nx, -1, 1);
    kt_to_blk(bdx, dx0, n, c, cpad, blk, hw);
    for (int pl = 0; pl < n * nb; pl++)
        kern_ops_cpu()->upblk_bwd(h, w, blk, bdx + pl * plane, bdy + 4 * pl * plane, 1);
    kern_ref_upsample2x_bwd(ctx, dx0, dy, n * c, h, w, KERN_ACCUM_DX);
    kt_to_blk(want, dx0, n, c, cpad, blk, hw);
    ok(!memcmp(bdx, want, nbx * 4), "%s: blocked dx (+) is the reference's accumulate bit for bit",
       label);
    free(x), free(y), free(dy), free(dx), free(dx0), free(bx), free(by), free(bdy), free(bdx);
    free(want);
    kern_ctx_destroy(ctx);
}

static void check_upblk_bad(void)
{
    float a[64] = { 0 }, b[64] = { 0 };
    is_int(kern_ops_cpu()->upblk_fwd(1, 1, 4, a, b), -EINVAL, "upblk: blk 4 refused");
    is_int(kern_ops_cpu()->upblk_fwd(0, 1, 16, a, b), -EINVAL, "upblk: empty plane refused");
    is_int(kern_ops_cpu()->upblk_bwd(1, 1, 16, NULL, b, 0), -EINVAL, "upblk: NULL refused");
    is_int(kern_ops_cpu()->upblk_fwd(1, 1, 16, a, b), 0, "upblk: one position runs");
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 11);
    check_pool(2, 3, 7, 6, 5, 1, 2, 0, "SPPF k5 s1 p2");
    check_pool(2, 3, 7, 6, 5, 1, 2, 1, "SPPF k5 s1 p2, ties");
    check_pool(1, 2, 8, 8, 2, 2, 0, 0, "k2 s2 p0");
    check_pool(1, 2, 9, 7, 3, 2, 1, 0, "k3 s2 p1");
    check_pool(1, 2, 9, 7, 3, 2, 1, 1, "k3 s2 p1, ties");
    check_pool(2, 1, 5, 5, 4, 3, 2, 0, "k4 s3 p2");
    check_pool(1, 1, 1, 1, 5, 1, 2, 0, "single pixel k5 p2");
    check_pool_special();
    check_upsample(3, 4, 5);
    check_upsample(1, 1, 1);
    check_threads();
    check_poolblk(2, 20, 7, 6, 5, 16, "poolblk k5 blk16, pad lanes");
    check_poolblk(3, 16, 10, 10, 5, 8, "poolblk k5 blk8 10x10");
    check_poolblk(1, 5, 1, 3, 3, 16, "poolblk k3 one row");
    check_poolblk(1, 16, 4, 4, 9, 16, "poolblk k9 wider than the plane");
    check_poolblk_bad();
    check_upblk(2, 20, 5, 3, 16, "upblk blk16, pad lanes");
    check_upblk(3, 16, 10, 10, 8, "upblk blk8 10x10");
    check_upblk(1, 16, 1, 7, 16, "upblk one row");
    check_upblk_bad();
    return tap_done();
}
