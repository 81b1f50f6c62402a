/*
 * The reduced-precision conv2d reference (kern_ref_conv2d_lowp_*, kern.h "conv2d in reduced
 * precision") against its definition and against PyTorch.
 *
 *  - Definition: a direct convolution in double of the same 16-bit inputs gives the exact S; every
 *    output must lie within one rounding of it: |got - S| <= ulp(|S| + e) + e, where e bounds
 *    the float32 summation error ((terms + 2) 2^-24 sum |products|) and ulp is the dtype's unit
 *    at that magnitude (the test's own rounding, written with rint/ldexp, not the library's).
 *    bf16 and fp16, NCHW and NHWC, 1 and 3 threads, five YOLOv5-like shapes (3x3 s1, 3x3 s2,
 *    pointwise, 1x1 s2, the k6 s2 stem). Outputs are poisoned first.
 *  - NHWC gives bit for bit the values of NCHW; the float32 lowp op equals the float32 ops bit for
 *    bit; accumulation adds exactly the overwritten result (float32 dw, db) or rounds once
 *    (dx); single rounding of conv + bias and ties to even on hand-made values; fp16 overflow
 *    gives Inf (the loss scaler's signal).
 *  - Strides (kern_conv2d_lowp STRIDES): channel slices in either layout give the dense bits and
 *    write nothing outside; dw_oihw makes the NHWC dw the NCHW dw bit for bit.
 *  - PyTorch 1.13 CPU autocast bf16 (data/lowp_refs.bin from make_lowp_refs.py): y, dx, dw, db
 *    within 2^-7 |ref| + 1e-3 max|ref| (each side is within about one bf16 rounding of the exact
 *    value, so two bf16 units of 2^-8 relative, plus slack for cancellation near zero).
 * --seed N replays the random draws.
 */
#include <errno.h>
#include <math.h>

#include "kern_testutil.h"

/* ---- 16-bit values, written independently of the library ---- */

static double ulp_of(int dt, double a)
{
    const int mant = dt == KERN_DT_BF16 ? 7 : dt == KERN_DT_F16 ? 10 : 23;
    const int emin = dt == KERN_DT_F16 ? -14 : -126;
    int e = a > 0 ? ilogb(a) : emin;
    if (e < emin) e = emin;
    return ldexp(1.0, e - mant);
}

/* v rounded to dtype, nearest even (rint in the default mode), overflow to Inf. */
static double round_to(int dt, double v)
{
    if (v == 0 || !isfinite(v) || dt == KERN_DT_F32) return dt == KERN_DT_F32 ? (float)v : v;
    const double q = ulp_of(dt, fabs(v)), r = rint(v / q) * q;
    const double max = dt == KERN_DT_BF16 ? 0x1.fep127 : 65504.0;
    return fabs(r) > max ? copysign(INFINITY, v) : r;
}

static float widen(int dt, const uint16_t *p, size_t i)
{
    const uint16_t h = p[i];
    if (dt == KERN_DT_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    const int e = (h >> 10) & 31, m = h & 1023;
    const float s = (h & 0x8000) ? -1.0f : 1.0f;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexpf((float)m, -24);
    return s * ldexpf(1.0f + (float)m / 1024.0f, e - 15);
}

/* Bits of v, which must be exactly representable in dtype. */
static uint16_t encode(int dt, float v)
{
    if (dt == KERN_DT_BF16) {
        uint32_t u;
        memcpy(&u, &v, 4);
        return (uint16_t)(u >> 16);
    }
    const uint16_t sign = signbit(v) ? 0x8000 : 0;
    const double a = fabs((double)v);
    if (a == 0) return sign;
    if (isinf(a)) return sign | 0x7c00;
    const int e = ilogb(a);
    if (e < -14) return (uint16_t)(sign | (uint16_t)ldexp(a, 24));
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((ldexp(a, -e) - 1.0) * 1024));
}

/* ---- tensors: logical NCHW doubles, stored in dtype and layout ---- */

/* Index in the layout of logical element (i, c, s) of a (n, ch, hw) tensor. */
static size_t at(int layout, int i, int c, size_t s, int ch, size_t hw)
{
    return layout == KERN_LAYOUT_NHWC ? ((size_t)i * hw + s) * (size_t)ch + (size_t)c
                                      : ((size_t)i * (size_t)ch + (size_t)c) * hw + s;
}

/* Random dtype values into logical v[n ch hw] and their bits into dst (layout). */
static void draw(int dt, int layout, uint16_t *dst, float *v, int n, int ch, size_t hw, float lo,
                 float hi)
{
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ch; c++)
            for (size_t s = 0; s < hw; s++) {
                const float f = (float)round_to(dt, kt_uniform(lo, hi));
                v[((size_t)i * ch + c) * hw + s] = f;
                dst[at(layout, i, c, s, ch, hw)] = encode(dt, f);
            }
}

/* Logical value of element (i, c, s) of a dtype tensor in layout. */
static float get16(int dt, int layout, const uint16_t *p, int i, int c, size_t s, int ch, size_t hw)
{
    return widen(dt, p, at(layout, i, c, s, ch, hw));
}

struct shape {
    int n, c_in, h, w, c_out, k, s, p;
};

/* Exact results in double: y (with b), dx, dw, db, and sum |products| of each (for e). */
struct exact {
    double *y, *ya, *dx, *dxa, *dw, *dwa, *db;
};

static void exact_conv(const struct kern_conv2d *d, int oh, int ow, const float *x, const float *w,
                       const float *b, const float *dy, struct exact *r)
{
    const size_t nx = (size_t)d->n * d->c_in * d->h_in * d->w_in;
    const size_t nw = (size_t)d->c_out * d->c_in * d->k_h * d->k_w;

    memset(r->dx, 0, nx * sizeof(double)), memset(r->dxa, 0, nx * sizeof(double));
    memset(r->dw, 0, nw * sizeof(double)), memset(r->dwa, 0, nw * sizeof(double));
    memset(r->db, 0, (size_t)d->c_out * sizeof(double));
    for (int i = 0; i < d->n; i++)
        for (int o = 0; o < d->c_out; o++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    const size_t yi = (((size_t)i * d->c_out + o) * oh + oy) * ow + ox;
                    double s = b ? b[o] : 0.0, sa = b ? fabs(b[o]) : 0.0;
                    const double g = dy[yi];
                    r->db[o] += g;
                    for (int c = 0; c < d->c_in; c++)
                        for (int ky = 0; ky < d->k_h; ky++)
                            for (int kx = 0; kx < d->k_w; kx++) {
                                const int iy = oy * d->stride_h - d->pad_h + ky;
                                const int ix = ox * d->stride_w - d->pad_w + kx;
                                if (iy < 0 || iy >= d->h_in || ix < 0 || ix >= d->w_in) continue;
                                const size_t xi =
                                    (((size_t)i * d->c_in + c) * d->h_in + iy) * d->w_in + ix;
                                const size_t wi =
                                    (((size_t)o * d->c_in + c) * d->k_h + ky) * d->k_w + kx;
                                s += (double)x[xi] * w[wi];
                                sa += fabs((double)x[xi] * w[wi]);
                                r->dx[xi] += g * w[wi];
                                r->dxa[xi] += fabs(g * w[wi]);
                                r->dw[wi] += g * x[xi];
                                r->dwa[wi] += fabs(g * x[xi]);
                            }
                    r->y[yi] = s;
                    r->ya[yi] = sa;
                }
}

/* One output within one rounding of the exact value (see the top). Counts exact roundings. */
static int within(int dt, double got, double want, double absum, int terms, int *exact_hits)
{
    const double e = (terms + 2) * ldexp(absum, -24);
    if (got == round_to(dt, want)) (*exact_hits)++;
    return isfinite(got) && fabs(got - want) <= ulp_of(dt, fabs(want) + e) + e;
}

static const char *dt_name(int dt)
{
    return dt == KERN_DT_BF16 ? "bf16" : dt == KERN_DT_F16 ? "fp16" : "f32";
}

/* Per shape, dtype: results of both layouts and both thread counts must agree bit for bit. */
static void check_shape(const struct shape *sh, int dt)
{
    struct kern_conv2d c;
    int oh, ow;
    kern_conv2d_init(&c, sh->n, sh->c_in, sh->h, sh->w, sh->c_out, sh->k, sh->s, sh->p);
    kern_conv2d_out_hw(&c, &oh, &ow);
    const size_t hw = (size_t)sh->h * sh->w, p = (size_t)oh * ow, khw = (size_t)sh->k * sh->k;
    const size_t nx = (size_t)sh->n * sh->c_in * hw, nw = (size_t)sh->c_out * sh->c_in * khw;
    const size_t ny = (size_t)sh->n * sh->c_out * p;
    float *const xv = kt_alloc(nx), *const wv = kt_alloc(nw), *const bv = kt_alloc(sh->c_out);
    float *const dyv = kt_alloc(ny);
    struct exact r = { malloc(ny * 8),
                       malloc(ny * 8),
                       malloc(nx * 8),
                       malloc(nx * 8),
                       malloc(nw * 8),
                       malloc(nw * 8),
                       malloc((size_t)sh->c_out * 8) };
    uint16_t *x16[2], *w16[2], *dy16[2], *b16 = malloc((size_t)sh->c_out * 2);
    for (int l = 0; l < 2; l++) {
        x16[l] = malloc(nx * 2), w16[l] = malloc(nw * 2), dy16[l] = malloc(ny * 2);
    }
    /* Same logical values in both layouts (drawn once, stored twice). */
    draw(dt, KERN_LAYOUT_NCHW, x16[0], xv, sh->n, sh->c_in, hw, -2.0f, 2.0f);
    draw(dt, KERN_LAYOUT_NCHW, w16[0], wv, sh->c_out, sh->c_in, khw, -0.5f, 0.5f);
    draw(dt, KERN_LAYOUT_NCHW, b16, bv, 1, sh->c_out, 1, -1.0f, 1.0f);
    draw(dt, KERN_LAYOUT_NCHW, dy16[0], dyv, sh->n, sh->c_out, p, -1.0f, 1.0f);
    for (int i = 0; i < sh->n; i++)
        for (int ch = 0; ch < sh->c_in; ch++)
            for (size_t s = 0; s < hw; s++)
                x16[1][at(1, i, ch, s, sh->c_in, hw)] = x16[0][at(0, i, ch, s, sh->c_in, hw)];
    for (int o = 0; o < sh->c_out; o++)
        for (int ch = 0; ch < sh->c_in; ch++)
            for (size_t s = 0; s < khw; s++)
                w16[1][at(1, o, ch, s, sh->c_in, khw)] = w16[0][at(0, o, ch, s, sh->c_in, khw)];
    for (int i = 0; i < sh->n; i++)
        for (int ch = 0; ch < sh->c_out; ch++)
            for (size_t s = 0; s < p; s++)
                dy16[1][at(1, i, ch, s, sh->c_out, p)] = dy16[0][at(0, i, ch, s, sh->c_out, p)];
    exact_conv(&c, oh, ow, xv, wv, bv, dyv, &r);

    uint16_t *y16[4], *dx16[4];
    float *dw[4], *db[4];
    int fails[4] = { 0 }, hits = 0, count = 0;
    for (int run = 0; run < 4; run++) {
        const int layout = run & 1, threads = run < 2 ? 1 : 3;
        struct kern_ctx *const ctx = kt_ctx_threads(threads);
        struct kern_conv2d_lowp d;
        size_t ws;
        kern_conv2d_lowp_init(&d, &c, dt, layout);
        is_int(kern_ref_conv2d_lowp_workspace_size(ctx, &d, &ws), 0, "workspace size");
        kern_ctx_reserve(ctx, ws);
        y16[run] = malloc(ny * 2), dx16[run] = malloc(nx * 2);
        dw[run] = kt_alloc(nw), db[run] = kt_alloc(sh->c_out);
        memset(y16[run], 0xff, ny * 2), memset(dx16[run], 0xff, nx * 2); /* NaN canaries */
        kt_poison(dw[run], nw), kt_poison(db[run], sh->c_out);
        int rc = kern_ref_conv2d_lowp_fwd(ctx, &d, y16[run], x16[layout], w16[layout], b16);
        rc |= kern_ref_conv2d_lowp_bwd_data(ctx, &d, dx16[run], dy16[layout], w16[layout], 0);
        rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &d, dw[run], dy16[layout], x16[layout], 0);
        rc |= kern_ref_conv2d_lowp_bwd_bias(ctx, &d, db[run], dy16[layout], 0);
        is_int(rc, 0, "%s k%d s%d %s threads %d: ops return 0", dt_name(dt), sh->k, sh->s,
               layout ? "NHWC" : "NCHW", threads);
        for (int i = 0; i < sh->n; i++)
            for (int o = 0; o < sh->c_out; o++)
                for (size_t s = 0; s < p; s++) {
                    const size_t li = ((size_t)i * sh->c_out + o) * p + s;
                    count++;
                    fails[0] += !within(dt, get16(dt, layout, y16[run], i, o, s, sh->c_out, p),
                                        r.y[li], r.ya[li], sh->c_in * sh->k * sh->k + 1, &hits);
                }
        for (int i = 0; i < sh->n; i++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < hw; s++) {
                    const size_t li = ((size_t)i * sh->c_in + ch) * hw + s;
                    count++;
                    fails[1] += !within(dt, get16(dt, layout, dx16[run], i, ch, s, sh->c_in, hw),
                                        r.dx[li], r.dxa[li], sh->c_out * sh->k * sh->k, &hits);
                }
        for (int o = 0; o < sh->c_out; o++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < khw; s++) {
                    const size_t li = ((size_t)o * sh->c_in + ch) * khw + s;
                    count++;
                    fails[2] += !within(dt, dw[run][at(layout, o, ch, s, sh->c_in, khw)], r.dw[li],
                                        r.dwa[li], (int)((size_t)sh->n * p), &hits);
                }
        for (int o = 0; o < sh->c_out; o++) {
            count++;
            fails[3] += !within(dt, db[run][o], r.db[o], fabs(r.db[o]), 1, &hits);
        }
        kern_ctx_destroy(ctx);
    }
    ok(!fails[0] && !fails[1] && !fails[2] && !fails[3],
       "%s n%d c%d->%d %dx%d k%d s%d p%d: y, dx, dw, db within one rounding of the exact "
       "values (2 layouts x 2 thread counts; %d/%d/%d/%d outside)",
       dt_name(dt), sh->n, sh->c_in, sh->c_out, sh->h, sh->w, sh->k, sh->s, sh->p, fails[0],
       fails[1], fails[2], fails[3]);
    /* Most values are the exact result correctly rounded (the rest sit next to a tie). */
    ok(hits >= count * 9 / 10, "%s k%d s%d: %d of %d outputs are the exact value correctly rounded",
       dt_name(dt), sh->k, sh->s, hits, count);
    int same_layout = 1, same_threads = 1;
    for (int run = 1; run < 4; run++) {
        const int layout = run & 1;
        int eq = 1;
        for (int i = 0; i < sh->n && eq; i++)
            for (int o = 0; o < sh->c_out; o++)
                for (size_t s = 0; s < p; s++)
                    eq &= y16[run][at(layout, i, o, s, sh->c_out, p)] ==
                          y16[0][at(0, i, o, s, sh->c_out, p)];
        for (int i = 0; i < sh->n && eq; i++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < hw; s++)
                    eq &= dx16[run][at(layout, i, ch, s, sh->c_in, hw)] ==
                          dx16[0][at(0, i, ch, s, sh->c_in, hw)];
        for (int o = 0; o < sh->c_out && run == 1; o++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < khw; s++)
                    eq &= dw[1][at(1, o, ch, s, sh->c_in, khw)] ==
                          dw[0][at(0, o, ch, s, sh->c_in, khw)];
        if (run == 1)
            same_layout = eq;
        else if (run == 2)
            same_threads = eq; /* dw partial sums may differ across threads */
    }
    ok(same_layout, "%s k%d s%d: NHWC gives the NCHW values bit for bit", dt_name(dt), sh->k,
       sh->s);
    ok(same_threads, "%s k%d s%d: y and dx the same with 3 threads", dt_name(dt), sh->k, sh->s);
    for (int run = 0; run < 4; run++)
        free(y16[run]), free(dx16[run]), free(dw[run]), free(db[run]);
    for (int l = 0; l < 2; l++)
        free(x16[l]), free(w16[l]), free(dy16[l]);
    free(b16), free(xv), free(wv), free(bv), free(dyv);
    free(r.y), free(r.ya), free(r.dx), free(r.dxa), free(r.dw), free(r.dwa), free(r.db);
}

/* Rows of `len` elements, `rows` of them, from dense src into dst with a row step of step
 * (placed at dst, the slice's first element), or back (out != 0). */
static void rows_copy(uint16_t *dst, const uint16_t *src, size_t rows, size_t len, size_t step,
                      int out)
{
    for (size_t r = 0; r < rows; r++)
        memcpy(out ? dst + r * len : dst + r * step, out ? src + r * step : src + r * len, len * 2);
}

/* Elements of a strided buffer of `total` outside the slices [off + r step, + len) changed. */
static size_t outside(const uint16_t *buf, size_t total, size_t off, size_t rows, size_t len,
                      size_t step)
{
    size_t bad = 0;
    for (size_t e = 0; e < total; e++) {
        const int in = e >= off && (e - off) / step < rows && (e - off) % step < len;
        bad += !in && buf[e] != 0x7fc1;
    }
    return bad;
}

/*
 * STRIDES and dw_oihw: x and dx, y and dy as channel slices of wider tensors (NHWC: a pixel
 * stride; NCHW: an image stride) give the dense call's bits, with nothing outside the slices
 * written; the NHWC dw with dw_oihw is the NCHW dw bit for bit; db reads a strided dy.
 */
static void check_strided(const struct shape *sh)
{
    const int dt = KERN_DT_BF16;
    struct kern_conv2d c;
    int oh, ow;
    kern_conv2d_init(&c, sh->n, sh->c_in, sh->h, sh->w, sh->c_out, sh->k, sh->s, sh->p);
    kern_conv2d_out_hw(&c, &oh, &ow);
    const size_t hw = (size_t)sh->h * sh->w, p = (size_t)oh * ow, khw = (size_t)sh->k * sh->k;
    const size_t nx = (size_t)sh->n * sh->c_in * hw, nw = (size_t)sh->c_out * sh->c_in * khw;
    const size_t ny = (size_t)sh->n * sh->c_out * p;
    struct kern_ctx *const ctx = kt_ctx_threads(1);
    for (int layout = 0; layout < 2; layout++) {
        const int nhwc = layout == KERN_LAYOUT_NHWC;
        float *const tmp = kt_alloc(nx + nw + ny);
        uint16_t *x = malloc(nx * 2), *w = malloc(nw * 2), *dy = malloc(ny * 2);
        draw(dt, layout, x, tmp, sh->n, sh->c_in, hw, -2.0f, 2.0f);
        draw(dt, layout, w, tmp, sh->c_out, sh->c_in, khw, -0.5f, 0.5f);
        draw(dt, layout, dy, tmp, sh->n, sh->c_out, p, -1.0f, 1.0f);
        struct kern_conv2d_lowp d;
        kern_conv2d_lowp_init(&d, &c, dt, layout);
        d.dw_oihw = 1;
        size_t ws;
        kern_ref_conv2d_lowp_workspace_size(ctx, &d, &ws);
        kern_ctx_reserve(ctx, ws);
        uint16_t *y = malloc(ny * 2), *dx = malloc(nx * 2);
        float *dw = kt_alloc(nw), *db = kt_alloc(sh->c_out);
        int rc = kern_ref_conv2d_lowp_fwd(ctx, &d, y, x, w, NULL);
        rc |= kern_ref_conv2d_lowp_bwd_data(ctx, &d, dx, dy, w, 0);
        rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &d, dw, dy, x, 0);
        rc |= kern_ref_conv2d_lowp_bwd_bias(ctx, &d, db, dy, 0);
        /* the dense NCHW dw of the same logical tensors, for dw_oihw */
        float *dw_nchw = kt_alloc(nw);
        if (nhwc) {
            uint16_t *xn = malloc(nx * 2), *dyn = malloc(ny * 2);
            for (int i = 0; i < sh->n; i++)
                for (int ch = 0; ch < sh->c_in; ch++)
                    for (size_t q = 0; q < hw; q++)
                        xn[at(0, i, ch, q, sh->c_in, hw)] = x[at(1, i, ch, q, sh->c_in, hw)];
            for (int i = 0; i < sh->n; i++)
                for (int ch = 0; ch < sh->c_out; ch++)
                    for (size_t q = 0; q < p; q++)
                        dyn[at(0, i, ch, q, sh->c_out, p)] = dy[at(1, i, ch, q, sh->c_out, p)];
            struct kern_conv2d_lowp dn;
            kern_conv2d_lowp_init(&dn, &c, dt, KERN_LAYOUT_NCHW);
            rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &dn, dw_nchw, dyn, xn, 0);
            free(xn), free(dyn);
        }
        /* the slices: NHWC rows are pixels (x at channel 2 of c_in + 5, y at channel 1 of c_out
           + 3); NCHW rows are images (x 3 elements in, image step x_img + 11; y 1 in, + 6) */
        const size_t xrows = nhwc ? (size_t)sh->n * hw : (size_t)sh->n,
                     xlen = nhwc ? (size_t)sh->c_in : (size_t)sh->c_in * hw,
                     xstep = nhwc ? xlen + 5 : xlen + 11, xoff = nhwc ? 2 : 3;
        const size_t yrows = nhwc ? (size_t)sh->n * p : (size_t)sh->n,
                     ylen = nhwc ? (size_t)sh->c_out : (size_t)sh->c_out * p,
                     ystep = nhwc ? ylen + 3 : ylen + 6, yoff = 1;
        const size_t xt = xrows * xstep + xoff, yt = yrows * ystep + yoff;
        uint16_t *xs = malloc(xt * 2), *dxs = malloc(xt * 2), *ys = malloc(yt * 2),
                 *dys = malloc(yt * 2);
        memset(xs, 0, xt * 2), memset(dys, 0, yt * 2);
        for (size_t e = 0; e < xt; e++)
            dxs[e] = 0x7fc1;
        for (size_t e = 0; e < yt; e++)
            ys[e] = 0x7fc1;
        rows_copy(xs + xoff, x, xrows, xlen, xstep, 0);
        rows_copy(dys + yoff, dy, yrows, ylen, ystep, 0);
        struct kern_conv2d_lowp ds = d;
        ds.x_ld = xstep, ds.y_ld = ystep;
        float *dws = kt_alloc(nw), *dbs = kt_alloc(sh->c_out);
        rc |= kern_ref_conv2d_lowp_fwd(ctx, &ds, ys + yoff, xs + xoff, w, NULL);
        rc |= kern_ref_conv2d_lowp_bwd_data(ctx, &ds, dxs + xoff, dys + yoff, w, 0);
        rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &ds, dws, dys + yoff, xs + xoff, 0);
        rc |= kern_ref_conv2d_lowp_bwd_bias(ctx, &ds, dbs, dys + yoff, 0);
        uint16_t *yb = malloc(ny * 2), *dxb = malloc(nx * 2);
        rows_copy(yb, ys + yoff, yrows, ylen, ystep, 1);
        rows_copy(dxb, dxs + xoff, xrows, xlen, xstep, 1);
        const size_t spill =
            outside(ys, yt, yoff, yrows, ylen, ystep) + outside(dxs, xt, xoff, xrows, xlen, xstep);
        ok(rc == 0 && !memcmp(y, yb, ny * 2) && !memcmp(dx, dxb, nx * 2) &&
               !memcmp(dw, dws, nw * 4) && !memcmp(db, dbs, (size_t)sh->c_out * 4) && spill == 0,
           "bf16 %s k%d s%d: strided x, y, dx, dy give the dense bits (%zu written outside)",
           nhwc ? "NHWC" : "NCHW", sh->k, sh->s, spill);
        if (nhwc)
            ok(!memcmp(dw, dw_nchw, nw * 4), "bf16 NHWC k%d s%d: dw_oihw is NCHW's dw bit for bit",
               sh->k, sh->s);
        struct kern_conv2d_lowp bad = ds;
        bad.x_ld = nhwc ? (size_t)sh->c_in - 1 : (size_t)sh->c_in * hw - 1;
        is_int(kern_ref_conv2d_lowp_fwd(ctx, &bad, ys + yoff, xs + xoff, w, NULL), -EINVAL,
               "%s: an x stride below the dense one is -EINVAL", nhwc ? "NHWC" : "NCHW");
        bad = ds;
        bad.y_ld = nhwc ? (size_t)sh->c_out - 1 : (size_t)sh->c_out * p - 1;
        is_int(kern_ref_conv2d_lowp_bwd_bias(ctx, &bad, dbs, dys + yoff, 0), -EINVAL,
               "%s: a y stride below the dense one is -EINVAL (bwd_bias)", nhwc ? "NHWC" : "NCHW");
        free(tmp), free(x), free(w), free(dy), free(y), free(dx), free(dw), free(db), free(dw_nchw);
        free(xs), free(dxs), free(ys), free(dys), free(dws), free(dbs), free(yb), free(dxb);
    }
    kern_ctx_destroy(ctx);
}

/* Accumulation: dw and db add exactly the overwritten result in float32; dx rounds once. */
static void check_accum(int dt)
{
    struct kern_conv2d c;
    struct kern_conv2d_lowp d;
    int oh, ow;
    size_t ws;
    kern_conv2d_init(&c, 2, 4, 7, 6, 5, 3, 2, 1);
    kern_conv2d_out_hw(&c, &oh, &ow);
    kern_conv2d_lowp_init(&d, &c, dt, KERN_LAYOUT_NHWC);
    struct kern_ctx *const ctx = kt_ctx_threads(2);
    kern_ref_conv2d_lowp_workspace_size(ctx, &d, &ws);
    kern_ctx_reserve(ctx, ws);
    const size_t nx = 2 * 4 * 42, nw = 5 * 4 * 9, ny = (size_t)2 * 5 * oh * ow;
    uint16_t *const x = malloc(nx * 2), *const w = malloc(nw * 2), *const dy = malloc(ny * 2);
    uint16_t *const dx0 = malloc(nx * 2), *const dx = malloc(nx * 2), *const dxa = malloc(nx * 2);
    float *const tmp = kt_alloc(nx > ny ? nx : ny), *const dw0 = kt_alloc(nw),
                 *const dw = kt_alloc(nw), *const db0 = kt_alloc(5), *const db = kt_alloc(5);
    draw(dt, 0, x, tmp, 1, 1, nx, -2, 2);
    draw(dt, 0, w, tmp, 1, 1, nw, -1, 1);
    draw(dt, 0, dy, tmp, 1, 1, ny, -1, 1);
    draw(dt, 0, dx0, tmp, 1, 1, nx, -4, 4);
    int rc = kern_ref_conv2d_lowp_bwd_data(ctx, &d, dx, dy, w, 0);
    memcpy(dxa, dx0, nx * 2);
    rc |= kern_ref_conv2d_lowp_bwd_data(ctx, &d, dxa, dy, w, KERN_ACCUM_DX);
    rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &d, dw0, dy, x, 0);
    rc |= kern_ref_conv2d_lowp_bwd_bias(ctx, &d, db0, dy, 0);
    kt_fill(dw, nw, -3, 3), kt_fill(db, 5, -3, 3);
    float *const dw_old = kt_alloc(nw), db_old[5];
    memcpy(dw_old, dw, nw * 4), memcpy(db_old, db, sizeof(db_old));
    rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &d, dw, dy, x, KERN_ACCUM_DPARAM);
    rc |= kern_ref_conv2d_lowp_bwd_bias(ctx, &d, db, dy, KERN_ACCUM_DPARAM);
    is_int(rc, 0, "%s accum: ops return 0", dt_name(dt));
    int exact = 1, dx_ok = 1;
    for (size_t i = 0; i < nw; i++)
        exact &= dw[i] == dw_old[i] + dw0[i];
    for (int i = 0; i < 5; i++)
        exact &= db[i] == db_old[i] + db0[i];
    ok(exact, "%s: dw, db with KERN_ACCUM_DPARAM = old + the overwritten result, in float32",
       dt_name(dt));
    /* r(old + S): S from the overwritten dx is within half a unit, so the accumulated value is
     * within a unit (at its magnitude) of old + that dx, and exactly it when that is representable
     * at both magnitudes; it must never equal the double rounding where they differ by a lot. */
    for (size_t i = 0; i < nx; i++) {
        const double o = widen(dt, dx0, i), s = widen(dt, dx, i), got = widen(dt, dxa, i);
        dx_ok &= fabs(got - (o + s)) <= ulp_of(dt, fabs(o + s)) + ulp_of(dt, fabs(s));
    }
    ok(dx_ok, "%s: dx with KERN_ACCUM_DX = r(old + S) (within the two roundings' bound)",
       dt_name(dt));
    kern_ctx_destroy(ctx);
    free(x), free(w), free(dy), free(dx0), free(dx), free(dxa), free(tmp), free(dw0), free(dw);
    free(db0), free(db), free(dw_old);
}

/* The float32 lowp op is the float32 op (same im2col and GEMMs on the same values). */
static void check_f32_equals_old(void)
{
    struct kern_conv2d c;
    struct kern_conv2d_lowp d;
    int oh, ow;
    size_t ws1, ws2;
    kern_conv2d_init(&c, 3, 5, 9, 8, 6, 3, 2, 1);
    kern_conv2d_out_hw(&c, &oh, &ow);
    kern_conv2d_lowp_init(&d, &c, KERN_DT_F32, KERN_LAYOUT_NCHW);
    struct kern_ctx *const ctx = kt_ctx_threads(1);
    kern_ref_conv2d_workspace_size(ctx, &c, &ws1);
    kern_ref_conv2d_lowp_workspace_size(ctx, &d, &ws2);
    kern_ctx_reserve(ctx, ws1 > ws2 ? ws1 : ws2);
    const size_t nx = 3 * 5 * 72, nw = 6 * 5 * 9, ny = (size_t)3 * 6 * oh * ow;
    float *const x = kt_alloc(nx), *const w = kt_alloc(nw), *const b = kt_alloc(6),
                 *const dy = kt_alloc(ny);
    float *const y1 = kt_alloc(ny), *const y2 = kt_alloc(ny), *const dx1 = kt_alloc(nx),
                 *const dx2 = kt_alloc(nx), *const dw1 = kt_alloc(nw), *const dw2 = kt_alloc(nw);
    kt_fill(x, nx, -1, 1), kt_fill(w, nw, -1, 1), kt_fill(b, 6, -1, 1), kt_fill(dy, ny, -1, 1);
    int rc = kern_ref_conv2d_fwd(ctx, &c, y1, x, w, b);
    rc |= kern_ref_conv2d_lowp_fwd(ctx, &d, y2, x, w, b);
    rc |= kern_ref_conv2d_bwd_data(ctx, &c, dx1, dy, w, 0);
    rc |= kern_ref_conv2d_lowp_bwd_data(ctx, &d, dx2, dy, w, 0);
    rc |= kern_ref_conv2d_bwd_filter(ctx, &c, dw1, dy, x, 0);
    rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &d, dw2, dy, x, 0);
    is_int(rc, 0, "f32 lowp and f32 ops return 0");
    ok(!memcmp(y1, y2, ny * 4) && !memcmp(dx1, dx2, nx * 4) && !memcmp(dw1, dw2, nw * 4),
       "KERN_DT_F32 lowp fwd, bwd_data, bwd_filter equal the float32 ops bit for bit");
    kern_ctx_destroy(ctx);
    free(x), free(w), free(b), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dw1);
    free(dw2);
}

/* Hand-made values: conv + bias rounded once, ties to even, fp16 overflow to Inf. */
static void check_rounding(void)
{
    struct kern_conv2d c;
    struct kern_conv2d_lowp d;
    kern_conv2d_init(&c, 1, 2, 1, 1, 1, 1, 1, 0);
    struct kern_ctx *const ctx = kt_ctx(1 << 16);
    const struct {
        int dt;
        float x0, x1, b, want;
        const char *what;
    } cases[] = {
        /* S = 1 + 2^-9 (r(S) = 1); S + b = 1 + 3 2^-9 -> 1 + 2^-7; rounding S first gives 1. */
        { KERN_DT_BF16, 1.0f, 0x1p-9f, 0x1p-8f, 1.0f + 0x1p-7f, "bf16 conv + bias rounded once" },
        { KERN_DT_BF16, 1.0f, 0.0f, 0x1p-8f, 1.0f, "bf16 tie 1 + 2^-8 -> 1 (even)" },
        { KERN_DT_BF16, 1.0f + 0x1p-7f, 0.0f, 0x1p-8f, 1.0f + 0x1p-6f,
          "bf16 tie 1 + 3 2^-8 -> 1 + 2^-6 (even)" },
        { KERN_DT_F16, 1.0f, 0.0f, 0x1p-11f, 1.0f, "fp16 tie 1 + 2^-11 -> 1 (even)" },
        { KERN_DT_F16, 1.0f, 0x1p-12f, 0x1p-11f, 1.0f + 0x1p-10f, "fp16 conv + bias rounded once" },
        { KERN_DT_F16, 256.0f, 256.0f, 0.0f, INFINITY, "fp16 256 * 256 * 2 = 131072 -> +Inf" },
        { KERN_DT_F16, 0x1p-14f, 0.0f, 0x1p-24f, 0x1p-14f + 0x1p-24f, "fp16 subnormal step kept" },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const int dt = cases[k].dt;
        const float w1 = cases[k].x0 == 256.0f ? 256.0f : 1.0f;
        const uint16_t x[2] = { encode(dt, cases[k].x0), encode(dt, cases[k].x1) };
        const uint16_t w[2] = { encode(dt, w1), encode(dt, w1) }, b = encode(dt, cases[k].b);
        uint16_t y = 0xffff;
        kern_conv2d_lowp_init(&d, &c, dt, KERN_LAYOUT_NCHW);
        const int rc = kern_ref_conv2d_lowp_fwd(ctx, &d, &y, x, w, &b);
        const float got = widen(dt, &y, 0);
        ok(rc == 0 && got == cases[k].want, "%s (got %a)", cases[k].what, (double)got);
    }
    /* fp16 dw overflows to Inf: the scaler's found_inf signal. */
    const uint16_t x[2] = { encode(KERN_DT_F16, 60000.0f), encode(KERN_DT_F16, 1.0f) };
    const uint16_t dy = encode(KERN_DT_F16, 2.0f);
    float dw[2] = { 0, 0 };
    kern_conv2d_lowp_init(&d, &c, KERN_DT_F16, KERN_LAYOUT_NCHW);
    const int rc = kern_ref_conv2d_lowp_bwd_filter(ctx, &d, dw, &dy, x, 0);
    ok(rc == 0 && isinf(dw[0]) && dw[0] > 0 && dw[1] == 2.0f,
       "fp16 dw: 120000 -> +Inf in the float32 dw, 2 stays 2");
    kern_ctx_destroy(ctx);
}

static void check_errors(void)
{
    struct kern_conv2d c;
    struct kern_conv2d_lowp d;
    size_t ws;
    uint16_t buf[64];
    float f[64];
    kern_conv2d_init(&c, 1, 2, 3, 3, 2, 3, 1, 1);
    struct kern_ctx *const ctx = kt_ctx(0);
    kern_conv2d_lowp_init(&d, &c, 3, KERN_LAYOUT_NCHW);
    is_int(kern_ref_conv2d_lowp_workspace_size(ctx, &d, &ws), -EINVAL, "dtype 3: -EINVAL");
    kern_conv2d_lowp_init(&d, &c, KERN_DT_BF16, 2);
    is_int(kern_ref_conv2d_lowp_fwd(ctx, &d, buf, buf + 20, buf + 40, NULL), -EINVAL,
           "layout 2: -EINVAL");
    kern_conv2d_lowp_init(&d, &c, KERN_DT_BF16, KERN_LAYOUT_NHWC);
    is_int(kern_ref_conv2d_lowp_fwd(ctx, &d, buf, buf + 20, buf + 40, NULL), -KERN_EWORKSPACE,
           "no workspace: -KERN_EWORKSPACE");
    is_int(kern_ref_conv2d_lowp_bwd_filter(ctx, &d, NULL, buf, buf + 20, 0), -EINVAL,
           "NULL dw: -EINVAL");
    is_int(kern_ref_conv2d_lowp_bwd_bias(ctx, &d, f, buf, 4), -EINVAL,
           "unknown accum bit: -EINVAL");
    is_int(kern_ref_conv2d_lowp_bwd_bias(ctx, NULL, f, buf, 0), -EINVAL,
           "NULL descriptor: -EINVAL");
    const struct kern_ops *const k = kern_ops_ref();
    ok(k->conv2d_lowp_fwd == kern_ref_conv2d_lowp_fwd &&
           k->conv2d_lowp_bwd_bias == kern_ref_conv2d_lowp_bwd_bias &&
           k->conv2d_lowp_workspace_size == kern_ref_conv2d_lowp_workspace_size,
       "kern_ops_ref() carries the lowp ops");
    kern_ctx_destroy(ctx);
}

/* ---- PyTorch autocast bf16 ---- */

struct ref_tensor {
    char name[64];
    size_t count;
    float *data;
};

static struct ref_tensor refs[64];
static int nrefs;

static void bail(const char *path, const char *why)
{
    printf("Bail out! %s: %s\n", path, why);
    exit(99);
}

/* Loads the file (format: make_lowp_refs.py); 0, or -1 when it is missing. */
static int load_refs(const char *path)
{
    FILE *const f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char hdr[16];
    if (fread(hdr, 1, 16, f) != 16 || memcmp(hdr, "KLPREF01", 8)) bail(path, "bad magic");
    uint32_t version, count;
    memcpy(&version, hdr + 8, 4), memcpy(&count, hdr + 12, 4);
    if (version != 1) bail(path, "unknown version");
    if (count > 64) bail(path, "too many tensors");
    for (uint32_t i = 0; i < count; i++) {
        uint16_t nl = 0;
        unsigned char nd = 0;
        if (fread(&nl, 2, 1, f) != 1 || nl >= 64 || fread(refs[i].name, 1, nl, f) != nl ||
            fread(&nd, 1, 1, f) != 1 || nd > 8)
            bail(path, "bad tensor header");
        refs[i].name[nl] = 0;
        size_t cnt = 1;
        for (unsigned k = 0; k < nd; k++) {
            uint32_t dim;
            if (fread(&dim, 4, 1, f) != 1 || dim > (1u << 20)) bail(path, "bad dims");
            cnt *= dim;
        }
        if (cnt > (1u << 20)) bail(path, "tensor too large");
        refs[i].count = cnt;
        refs[i].data = kt_alloc(cnt);
        if (fread(refs[i].data, 4, cnt, f) != cnt) bail(path, "truncated data");
    }
    if (fgetc(f) != EOF) bail(path, "trailing bytes");
    fclose(f);
    nrefs = (int)count;
    return 0;
}

static const float *ref(const char *case_name, const char *field, size_t count)
{
    char key[96];
    snprintf(key, sizeof(key), "%s.%s", case_name, field);
    for (int i = 0; i < nrefs; i++) {
        if (strcmp(refs[i].name, key)) continue;
        if (refs[i].count != count) bail(key, "wrong element count");
        return refs[i].data;
    }
    bail(key, "missing from the reference file");
    return NULL;
}

/* got (logical NCHW floats) against PyTorch's: 2^-7 |ref| + 1e-3 max|ref|. */
static void cmp_torch(const char *what, const float *got, const float *want, size_t n)
{
    double mx = 0, worst = 0;
    size_t bad = 0, same = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]), tol = 0x1p-7 * fabs(want[i]) + 1e-3 * mx;
        bad += !(e <= tol);
        same += got[i] == want[i];
        worst = fmax(worst, e / (fabs(want[i]) + 1e-3 * mx));
    }
    ok(bad == 0, "torch autocast bf16 %s: %zu of %zu outside, %zu identical, max rel err %.2e",
       what, bad, n, same, worst);
}

static void check_torch(const char *path)
{
    static const struct {
        const char *name;
        struct shape s;
        int bias, nhwc;
    } cases[] = {
        { "k3s1", { 2, 8, 9, 7, 6, 3, 1, 1 }, 0, 0 },
        { "k3s2b", { 2, 5, 9, 8, 7, 3, 2, 1 }, 1, 0 },
        { "k3s2b_cl", { 2, 5, 9, 8, 7, 3, 2, 1 }, 1, 1 },
        { "k1b", { 2, 16, 5, 6, 12, 1, 1, 0 }, 1, 0 },
        { "stem", { 1, 3, 14, 12, 4, 6, 2, 2 }, 0, 0 },
    };
    if (load_refs(path) < 0) {
        ok(0, "%s missing (run tests/kernels/make_lowp_refs.py)", path);
        return;
    }
    const int dt = KERN_DT_BF16;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const struct shape *const sh = &cases[k].s;
        const int l = cases[k].nhwc;
        struct kern_conv2d c;
        struct kern_conv2d_lowp d;
        int oh, ow;
        size_t ws;
        kern_conv2d_init(&c, sh->n, sh->c_in, sh->h, sh->w, sh->c_out, sh->k, sh->s, sh->p);
        kern_conv2d_out_hw(&c, &oh, &ow);
        kern_conv2d_lowp_init(&d, &c, dt, l);
        const size_t hw = (size_t)sh->h * sh->w, p = (size_t)oh * ow, khw = (size_t)sh->k * sh->k;
        const size_t nx = (size_t)sh->n * sh->c_in * hw, nw = (size_t)sh->c_out * sh->c_in * khw;
        const size_t ny = (size_t)sh->n * sh->c_out * p;
        const char *const nm = cases[k].name;
        const float *const x = ref(nm, "x", nx), *const w = ref(nm, "w", nw);
        const float *const dy = ref(nm, "dy", ny);
        const float *const b = cases[k].bias ? ref(nm, "b", (size_t)sh->c_out) : NULL;
        uint16_t *const x16 = malloc(nx * 2), *const w16 = malloc(nw * 2),
                        *const dy16 = malloc(ny * 2), *const y16 = malloc(ny * 2),
                        *const dx16 = malloc(nx * 2), b16[16];
        float *const yv = kt_alloc(ny), *const dxv = kt_alloc(nx), *const dw = kt_alloc(nw),
                     *const dwv = kt_alloc(nw), db[16];
        for (int i = 0; i < sh->n; i++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < hw; s++)
                    x16[at(l, i, ch, s, sh->c_in, hw)] =
                        encode(dt, x[((size_t)i * sh->c_in + ch) * hw + s]);
        for (int o = 0; o < sh->c_out; o++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < khw; s++)
                    w16[at(l, o, ch, s, sh->c_in, khw)] =
                        encode(dt, w[((size_t)o * sh->c_in + ch) * khw + s]);
        for (int i = 0; i < sh->n; i++)
            for (int o = 0; o < sh->c_out; o++)
                for (size_t s = 0; s < p; s++)
                    dy16[at(l, i, o, s, sh->c_out, p)] =
                        encode(dt, dy[((size_t)i * sh->c_out + o) * p + s]);
        for (int o = 0; b && o < sh->c_out; o++)
            b16[o] = encode(dt, b[o]);
        struct kern_ctx *const ctx = kt_ctx_threads(2);
        kern_ref_conv2d_lowp_workspace_size(ctx, &d, &ws);
        kern_ctx_reserve(ctx, ws);
        int rc = kern_ref_conv2d_lowp_fwd(ctx, &d, y16, x16, w16, b ? b16 : NULL);
        rc |= kern_ref_conv2d_lowp_bwd_data(ctx, &d, dx16, dy16, w16, 0);
        rc |= kern_ref_conv2d_lowp_bwd_filter(ctx, &d, dw, dy16, x16, 0);
        if (b) rc |= kern_ref_conv2d_lowp_bwd_bias(ctx, &d, db, dy16, 0);
        is_int(rc, 0, "%s: ops return 0", nm);
        for (int i = 0; i < sh->n; i++)
            for (int o = 0; o < sh->c_out; o++)
                for (size_t s = 0; s < p; s++)
                    yv[((size_t)i * sh->c_out + o) * p + s] =
                        get16(dt, l, y16, i, o, s, sh->c_out, p);
        for (int i = 0; i < sh->n; i++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < hw; s++)
                    dxv[((size_t)i * sh->c_in + ch) * hw + s] =
                        get16(dt, l, dx16, i, ch, s, sh->c_in, hw);
        for (int o = 0; o < sh->c_out; o++)
            for (int ch = 0; ch < sh->c_in; ch++)
                for (size_t s = 0; s < khw; s++)
                    dwv[((size_t)o * sh->c_in + ch) * khw + s] = dw[at(l, o, ch, s, sh->c_in, khw)];
        char what[64];
        snprintf(what, sizeof(what), "%s y", nm);
        cmp_torch(what, yv, ref(nm, "y", ny), ny);
        snprintf(what, sizeof(what), "%s dx", nm);
        cmp_torch(what, dxv, ref(nm, "dx", nx), nx);
        snprintf(what, sizeof(what), "%s dw", nm);
        cmp_torch(what, dwv, ref(nm, "dw", nw), nw);
        if (b) {
            snprintf(what, sizeof(what), "%s db", nm);
            cmp_torch(what, db, ref(nm, "db", (size_t)sh->c_out), (size_t)sh->c_out);
        }
        kern_ctx_destroy(ctx);
        free(x16), free(w16), free(dy16), free(y16), free(dx16), free(yv), free(dxv), free(dw);
        free(dwv);
    }
    for (int i = 0; i < nrefs; i++)
        free(refs[i].data);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 20260522);
    static const struct shape shapes[] = {
        { 2, 5, 9, 7, 6, 3, 1, 1 },   /* 3x3 stride 1 (C3 bottlenecks) */
        { 3, 4, 11, 10, 5, 3, 2, 1 }, /* 3x3 stride 2 (downsampling, phase split) */
        { 2, 16, 6, 5, 12, 1, 1, 0 }, /* pointwise (no im2col) */
        { 1, 7, 5, 5, 3, 1, 2, 0 },   /* 1x1 stride 2 (im2col, no padding) */
        { 2, 3, 14, 12, 4, 6, 2, 2 }, /* the k6 s2 p2 stem */
    };
    for (int dt = KERN_DT_BF16; dt <= KERN_DT_F16; dt++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
            check_shape(&shapes[s], dt);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        check_strided(&shapes[s]);
    check_accum(KERN_DT_BF16);
    check_accum(KERN_DT_F16);
    check_f32_equals_old();
    check_rounding();
    check_errors();
    /* The reference file is the last argument (meson passes it), unless that is --seed's value. */
    const int has_path =
        argc > 1 && argv[argc - 1][0] != '-' && !(argc > 2 && !strcmp(argv[argc - 2], "--seed"));
    check_torch(has_path ? argv[argc - 1] : "tests/kernels/data/lowp_refs.bin");
    return tap_done();
}
