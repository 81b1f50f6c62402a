/*
 * conv2d, CPU reference: im2col + OpenBLAS sgemm, one image at a time.
 *
 * Shapes (NCHW, float32, dense but for x_nstride):
 *   x  (n, c_in, h_in, w_in)     w  (c_out, c_in, k_h, k_w)     bias, db  (c_out)
 *   (x and dx: image i at i * x_nstride when set, a concat's channel slice read in place; every
 *   per-image step is then just that pointer offset)
 *   y  (n, c_out, h_out, w_out)  with h_out = (h_in + 2 pad_h - k_h) / stride_h + 1
 * Per image, with K = c_in k_h k_w and P = h_out w_out:
 *   col (K, P) = im2col(x[i]),   y[i] (c_out, P) = w (c_out, K) . col
 *   dcol (K, P) = w^T . dy[i],   dx[i] = col2im(dcol)
 *   dw (c_out, K) += dy[i] . col^T
 * A 1x1, stride-1, unpadded conv uses x[i] as col directly and needs no workspace.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dw and db overwrite unless accum has
 * KERN_ACCUM_DPARAM. An overwritten buffer is never read (NaN in it does not leak).
 * Threads: with a one-thread context every image runs on the caller and the GEMMs use
 * OpenBLAS's own threads; with n threads, worker w takes images w, w + n, ... (im2col, GEMM,
 * col2im all inside the worker, OpenBLAS single-threaded), and dw is summed from per-worker
 * partials in worker order, so results are bitwise reproducible for a given thread count.
 * Strided convs (stride_w 2..8) first split each input row into its stride phases, so that
 * im2col copies runs instead of gathering every element (the stem and every downsampling conv).
 * Workspace, per worker: K * P floats for col (none for pointwise convs), c_in h_in w_in floats
 * for the phase split (strided convs), and c_out * K floats of partial dw when threaded:
 * kern_ref_conv2d_workspace_size. Nothing is allocated here.
 */
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include <cblas.h>

#include "kern_bn_common.h"
#include "kern_internal.h"
#include "kern_lowp_common.h"

void kern_conv2d_init(struct kern_conv2d *d, int n, int c_in, int h_in, int w_in, int c_out, int k,
                      int stride, int pad)
{
    if (!d) return;
    d->n = n;
    d->c_in = c_in;
    d->h_in = h_in;
    d->w_in = w_in;
    d->c_out = c_out;
    d->k_h = d->k_w = k;
    d->stride_h = d->stride_w = stride;
    d->pad_h = d->pad_w = pad;
    d->x_nstride = 0;
}

int kern_conv2d_out_hw(const struct kern_conv2d *d, int *h_out, int *w_out)
{
    if (!d || !h_out || !w_out) return -EINVAL;
    if (d->n < 1 || d->c_in < 1 || d->h_in < 1 || d->w_in < 1 || d->c_out < 1) return -EINVAL;
    if (d->k_h < 1 || d->k_w < 1 || d->stride_h < 1 || d->stride_w < 1) return -EINVAL;
    if (d->pad_h < 0 || d->pad_w < 0) return -EINVAL;
    /* Sizes are products of ints; keep every GEMM dimension and plane within int. */
    const long long hp = (long long)d->h_in + 2LL * d->pad_h,
                    wp = (long long)d->w_in + 2LL * d->pad_w;
    if (hp < d->k_h || wp < d->k_w) return -EINVAL;
    const long long oh = (hp - d->k_h) / d->stride_h + 1, ow = (wp - d->k_w) / d->stride_w + 1;
    const long long kk = (long long)d->c_in * d->k_h * d->k_w;
    if (oh * ow > INT_MAX || kk > INT_MAX || (long long)d->h_in * d->w_in > INT_MAX) return -EINVAL;
    *h_out = (int)oh;
    *w_out = (int)ow;
    return 0;
}

double kern_conv2d_flops(const struct kern_conv2d *d)
{
    int oh, ow;
    if (kern_conv2d_out_hw(d, &oh, &ow) < 0) return 0.0;
    return 2.0 * d->n * d->c_out * (double)oh * ow * d->c_in * d->k_h * d->k_w;
}

static int conv_is_pointwise(const struct kern_conv2d *d)
{
    return d->k_h == 1 && d->k_w == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 &&
           d->pad_w == 0;
}

/* Phases a split row can have; wider strides use the gathering path. */
#define CONV_MAX_PHASES 8

/* Strided convs with im2col gather through a phase-split copy of the image (see im2col). */
static int conv_phase_split(const struct kern_conv2d *d)
{
    return !conv_is_pointwise(d) && d->stride_w > 1 && d->stride_w <= CONV_MAX_PHASES;
}

static size_t round16(size_t n)
{
    return (n + 15) / 16 * 16;
}

/* Element access by dtype and layout, defined with the lowp ops below; with KERN_DT_F32 and
 * KERN_LAYOUT_NCHW they are plain float32 loads, so the float32 ops share code through them. */
static float lp_get(int dt, const void *p, size_t i);
static float lp_round(int dt, float v);
static size_t lp_index(int layout, size_t base, int ch, size_t s, size_t ld, size_t hw);
static size_t lp_img(int layout, size_t i, int c, size_t hw, size_t ld);
static size_t lp_px(int c, size_t ld);

/*
 * How one call splits its work. Worker w of nw takes images w, w + nw, ...; it owns workspace
 * slot w: col (K x P floats, unless pointwise) and, for bwd_filter with nw > 1 and w > 0, a
 * partial dw (c_out x K floats). Slots are 64-byte aligned. The lowp ops (below) put a shared
 * area before the slots and two float32 images at the end of each slot; the float32 ops have
 * none of these (zero sizes), so both share one layout.
 */
struct conv_plan {
    int oh, ow;          /* output plane */
    int kk, p;           /* GEMM sizes: K = c_in k_h k_w, P = oh ow */
    size_t x_img, y_img; /* floats per image of x and y */
    size_t x_ns;         /* floats from one image of x (and dx) to the next: x_nstride or x_img */
    size_t col, dw;      /* floats per slot for col and the partial dw */
    size_t xs;           /* floats per slot for the phase-split image (strided convs) */
    size_t xf, yf;       /* floats per slot: widened input, float32 output image (lowp, else 0) */
    size_t yb;           /* floats per slot: one band of the fused forward's conv output (float32
                            ops, else 0; conv2d_bn_silu_fwd_eval) */
    size_t shared;       /* floats before the slots: widened w or the float32 dw sum (lowp) */
    size_t slot;         /* floats per slot in all */
    int slots;           /* workers that can have images: min(threads, n) */
};

/*
 * The forward builds col a band of output rows at a time, so that the band stays in L2 between
 * im2col writing it and the GEMM packing it (the whole col of a 640-pixel layer is tens of MB,
 * written to memory and read back), and the fused eval op applies BN+SiLU to each band of the
 * conv's output while that is in L2 too. Each output element is the same dot product in the
 * same order whatever the band (the GEMM splits P, never K), so the results are the same bytes.
 * A band holds at most CONV_FWD_BAND_FLOATS of col and output together, but at least
 * CONV_BAND_MIN_COLS columns (OpenBLAS packs w again for every call) and c_out x P x K of
 * CONV_BAND_MIN_MNK (twice OpenBLAS's small-matrix threshold, whose kernels sum otherwise);
 * a layer with less than that in all is one band, as the whole image's call always was.
 */
#define CONV_FWD_BAND_FLOATS (192u * 1024u)
#define CONV_BAND_MIN_COLS   512u
#define CONV_BAND_MIN_MNK    2000000u

/* Output rows per band (pl's oh, ow, kk and col set). */
static int conv_band_rows(const struct kern_conv2d *d, const struct conv_plan *pl)
{
    const size_t ow = (size_t)pl->ow;
    const size_t per_row = ((pl->col ? (size_t)pl->kk : 0) + (size_t)d->c_out) * ow;
    const size_t mnk_row = (size_t)d->c_out * (size_t)pl->kk * ow;
    size_t rows = CONV_FWD_BAND_FLOATS / per_row;
    const size_t min_mnk = (CONV_BAND_MIN_MNK + mnk_row - 1) / mnk_row;
    const size_t min_cols = (CONV_BAND_MIN_COLS + ow - 1) / ow;
    if (rows < min_mnk) rows = min_mnk;
    if (rows < min_cols) rows = min_cols;
    return rows >= (size_t)pl->oh ? pl->oh : rows < 1 ? 1 : (int)rows;
}

static int conv_plan_init(const struct kern_ctx *ctx, const struct kern_conv2d *d, int lowp,
                          struct conv_plan *pl)
{
    const int rc = kern_conv2d_out_hw(d, &pl->oh, &pl->ow);
    if (rc < 0) return rc;
    pl->kk = d->c_in * d->k_h * d->k_w;
    pl->p = pl->oh * pl->ow;
    pl->x_img = (size_t)d->c_in * d->h_in * d->w_in;
    pl->y_img = (size_t)d->c_out * pl->p;
    /* A channel slice is at least as wide as its own channels; the lowp ops are dense only. */
    if (d->x_nstride && (d->x_nstride < pl->x_img || lowp)) return -EINVAL;
    pl->x_ns = d->x_nstride ? d->x_nstride : pl->x_img;
    pl->slots = ctx->threads < d->n ? ctx->threads : d->n;
    pl->col = conv_is_pointwise(d) ? 0 : round16((size_t)pl->kk * (size_t)pl->p);
    pl->dw = pl->slots > 1 ? round16((size_t)d->c_out * (size_t)pl->kk) : 0;
    pl->xs = conv_phase_split(d) ? round16(pl->x_img) : 0;
    pl->shared = lowp ? round16((size_t)d->c_out * (size_t)pl->kk) : 0;
    pl->xf = lowp ? round16(pl->x_img) : 0;
    pl->yf = lowp ? round16(pl->y_img) : 0;
    pl->yb = 0; /* conv_plan_fused adds it: the other ops run without */
    pl->slot = pl->col + pl->dw + pl->xs + pl->xf + pl->yf;
    return 0;
}

/* The plan of conv2d_bn_silu_fwd_eval: the float32 plan with a band of conv output per slot, and
 * a slot for every thread: with fewer images than threads (yolo-detect's one) the bands of an
 * image are shared out instead. */
static void conv_plan_fused(const struct kern_ctx *ctx, const struct kern_conv2d *d,
                            struct conv_plan *pl)
{
    pl->yb = round16((size_t)d->c_out * (size_t)conv_band_rows(d, pl) * (size_t)pl->ow);
    pl->slot += pl->yb;
    if (pl->slots < ctx->threads) pl->slots = ctx->threads;
}

static size_t conv_plan_bytes(const struct conv_plan *pl)
{
    /* One slot layout for all the ops keeps the offsets simple. */
    return (pl->shared + (size_t)pl->slots * pl->slot) * sizeof(float);
}

static int lp_check(const struct kern_conv2d_lowp *d)
{
    if (!d) return -EINVAL;
    if (d->dtype < KERN_DT_F32 || d->dtype > KERN_DT_F16) return -EINVAL;
    if (d->layout != KERN_LAYOUT_NCHW && d->layout != KERN_LAYOUT_NHWC) return -EINVAL;
    return 0;
}

/* kern_conv2d_lowp STRIDES: a nonzero stride at least the dense one (x_img, y_img: c h w). */
static bool lp_strides_ok(const struct kern_conv2d_lowp *d, size_t x_img, size_t y_img)
{
    const bool nhwc = d->layout == KERN_LAYOUT_NHWC;
    const size_t x_min = nhwc ? (size_t)d->conv.c_in : x_img,
                 y_min = nhwc ? (size_t)d->conv.c_out : y_img;
    return (!d->x_ld || d->x_ld >= x_min) && (!d->y_ld || d->y_ld >= y_min);
}

/*
 * The plan of a float32 conv d (dl NULL) or of the lowp conv dl (d unused), checking ctx first
 * and then dl, as every entry point does.
 */
static int conv_plan_checked(struct kern_ctx *ctx, const struct kern_conv2d_lowp *dl,
                             const struct kern_conv2d *d, struct conv_plan *pl)
{
    KERN_CHECK_CPU_CTX(ctx);
    if (dl) {
        const int rc = lp_check(dl);
        if (rc < 0) return rc;
        d = &dl->conv;
    }
    const int rc = conv_plan_init(ctx, d, dl != NULL, pl);
    if (rc < 0 || !dl) return rc;
    return lp_strides_ok(dl, pl->x_img, pl->y_img) ? 0 : -EINVAL;
}

static int conv_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d_lowp *dl,
                               const struct kern_conv2d *d, size_t *bytes)
{
    struct conv_plan pl;
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!bytes, -EINVAL);
    const int rc = conv_plan_checked(ctx, dl, d, &pl);
    if (rc < 0) return rc;
    if (!dl) conv_plan_fused(ctx, d, &pl); /* the most any float32 op of d takes */
    *bytes = conv_plan_bytes(&pl);
    return 0;
}

int kern_ref_conv2d_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d *d, size_t *bytes)
{
    return conv_workspace_size(ctx, NULL, d, bytes);
}

/* Output columns [*lo, *hi) whose input index o * s - p + k lies inside [0, size). */
static void conv_valid_range(int size, int s, int p, int k, int out, int *lo, int *hi)
{
    const int first = p - k; /* o * s >= first */
    const int last = size - 1 + p - k;
    int l = first <= 0 ? 0 : (first + s - 1) / s;
    int h = last < 0 ? 0 : last / s + 1;
    if (l > out) l = out;
    if (h > out) h = out;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/*
 * Phase split, for stride s > 1: every input row is stored as its s phases back to back
 * (elements 0, s, 2s, ..., then 1, 1 + s, ...). An im2col row then reads one phase at
 * consecutive positions, so the strided gather over the (much larger) col becomes a copy, and
 * the gather is paid once over the image instead.
 */
static void phase_offsets(int w, int s, size_t *off)
{
    off[0] = 0;
    for (int q = 1; q < s; q++)
        off[q] = off[q - 1] + (size_t)((w - (q - 1) + s - 1) / s);
}

static void phase_split(float *restrict xs, const float *restrict x, size_t rows, int w, int s)
{
    for (size_t r = 0; r < rows; r++) {
        const float *const src = x + r * (size_t)w;
        float *dst = xs + r * (size_t)w;
        for (int ph = 0; ph < s; ph++)
            for (int i = ph; i < w; i += s)
                *dst++ = src[i];
    }
}

/* dx (=|+=) the phase-split xs put back in order. */
static void phase_merge(float *restrict dx, const float *restrict xs, size_t rows, int w, int s,
                        int add)
{
    for (size_t r = 0; r < rows; r++) {
        const float *src = xs + r * (size_t)w;
        float *const dst = dx + r * (size_t)w;
        for (int ph = 0; ph < s; ph++) {
            if (add) {
                for (int i = ph; i < w; i += s)
                    dst[i] += *src++;
            } else {
                for (int i = ph; i < w; i += s)
                    dst[i] = *src++;
            }
        }
    }
}

/*
 * Where im2col row (kx) reads its input row: for output columns [lo, hi), the input column is
 * ox * s - pad + kx. Unsplit: index base + ox * s. Split: phase (kx - pad) mod s, at position
 * ox + shift inside that phase. Both give the offset of column lo (never a pointer before the
 * row: lo is the first valid column).
 */
struct row_map {
    int lo, hi;   /* valid output columns */
    size_t first; /* offset in the (split) input row of column lo's input */
    int step;     /* 1 when split (or stride 1), else the stride */
};

static void row_map_init(const struct kern_conv2d *d, int ow, int kx, int split, const size_t *off,
                         struct row_map *m)
{
    const int s = d->stride_w;
    conv_valid_range(d->w_in, s, d->pad_w, kx, ow, &m->lo, &m->hi);
    const int ix_lo = m->lo * s - d->pad_w + kx; /* >= 0 when lo < hi */
    if (m->lo >= m->hi) {
        m->first = 0;
        m->step = 1;
    } else if (split) {
        const int ph = ix_lo % s;
        m->first = off[ph] + (size_t)(ix_lo / s);
        m->step = 1;
    } else {
        m->first = (size_t)ix_lo;
        m->step = s;
    }
}

/* col (K, P) from one image: x itself, or its phase split xs when xs != NULL; output rows
 * [oy0, oy1) only, so that col is K x (oy1 - oy0) ow (the forward builds it a band at a time). */
static void im2col_rows(const struct kern_conv2d *d, int oy0, int oy1, int ow, float *restrict col,
                        const float *restrict x, const float *restrict xs)
{
    const size_t p = (size_t)(oy1 - oy0) * (size_t)ow, plane = (size_t)d->h_in * d->w_in;
    size_t off[CONV_MAX_PHASES];
    const float *src_img = x;
    if (xs) {
        phase_offsets(d->w_in, d->stride_w, off);
        src_img = xs;
    }
    for (int c = 0; c < d->c_in; c++) {
        const float *const xc = src_img + (size_t)c * plane;
        for (int ky = 0; ky < d->k_h; ky++) {
            for (int kx = 0; kx < d->k_w; kx++) {
                float *const row = col + ((size_t)(c * d->k_h + ky) * d->k_w + kx) * p;
                struct row_map m;
                row_map_init(d, ow, kx, xs != NULL, off, &m);
                const size_t n = (size_t)(m.hi - m.lo);
                for (int oy = oy0; oy < oy1; oy++) {
                    float *const dst = row + (size_t)(oy - oy0) * ow;
                    const int iy = oy * d->stride_h - d->pad_h + ky;
                    if (iy < 0 || iy >= d->h_in || n == 0) {
                        memset(dst, 0, (size_t)ow * sizeof(float));
                        continue;
                    }
                    const float *const src = xc + (size_t)iy * d->w_in + m.first;
                    memset(dst, 0, (size_t)m.lo * sizeof(float));
                    if (m.step == 1) {
                        memcpy(dst + m.lo, src, n * sizeof(float));
                    } else {
                        for (size_t k = 0; k < n; k++)
                            dst[m.lo + k] = src[k * (size_t)m.step];
                    }
                    memset(dst + m.hi, 0, (size_t)(ow - m.hi) * sizeof(float));
                }
            }
        }
    }
}

static void im2col(const struct kern_conv2d *d, int oh, int ow, float *restrict col,
                   const float *restrict x, const float *restrict xs)
{
    im2col_rows(d, 0, oh, ow, col, x, xs);
}

/* dx += col2im(col) (dx is the phase-split layout when split); dx initialised by the caller. */
static void col2im_add(const struct kern_conv2d *d, int oh, int ow, float *restrict dx,
                       const float *restrict col, int split)
{
    const size_t p = (size_t)oh * (size_t)ow, plane = (size_t)d->h_in * d->w_in;
    size_t off[CONV_MAX_PHASES];
    if (split) phase_offsets(d->w_in, d->stride_w, off);
    for (int c = 0; c < d->c_in; c++) {
        float *const xc = dx + (size_t)c * plane;
        for (int ky = 0; ky < d->k_h; ky++) {
            for (int kx = 0; kx < d->k_w; kx++) {
                const float *const row = col + ((size_t)(c * d->k_h + ky) * d->k_w + kx) * p;
                struct row_map m;
                row_map_init(d, ow, kx, split, off, &m);
                const size_t n = (size_t)(m.hi - m.lo);
                if (n == 0) continue;
                for (int oy = 0; oy < oh; oy++) {
                    const int iy = oy * d->stride_h - d->pad_h + ky;
                    if (iy < 0 || iy >= d->h_in) continue;
                    const float *const src = row + (size_t)oy * ow + m.lo;
                    float *const dst = xc + (size_t)iy * d->w_in + m.first;
                    if (m.step == 1) {
                        for (size_t k = 0; k < n; k++)
                            dst[k] += src[k];
                    } else {
                        for (size_t k = 0; k < n; k++)
                            dst[k * (size_t)m.step] += src[k];
                    }
                }
            }
        }
    }
}

/* Entry checks shared by the ops: the plan (see conv_plan_checked), and a big enough workspace. */
static int conv_prepare(struct kern_ctx *ctx, const struct kern_conv2d_lowp *dl,
                        const struct kern_conv2d *d, struct conv_plan *pl)
{
    const int rc = conv_plan_checked(ctx, dl, d, pl);
    if (rc < 0) return rc;
    if (conv_plan_bytes(pl) > ctx->ws_size) return -KERN_EWORKSPACE;
    return 0;
}

/* Slot w's areas (xs NULL for unstrided convs; xf, yf empty for the float32 ops). */
struct conv_slot {
    float *col, *dw, *xs, *xf, *yf, *yb;
};

static struct conv_slot conv_slot_of(float *ws, const struct conv_plan *pl, int w)
{
    float *const base = ws + pl->shared + (size_t)w * pl->slot;
    const struct conv_slot s = { base,
                                 base + pl->col,
                                 pl->xs ? base + pl->col + pl->dw : NULL,
                                 base + pl->col + pl->dw + pl->xs,
                                 base + pl->col + pl->dw + pl->xs + pl->xf,
                                 base + pl->col + pl->dw + pl->xs + pl->xf + pl->yf };
    return s;
}

/* The GEMM's right operand for image x: col built from x (through sl.xs when strided), or x
 * itself for pointwise convs. */
static const float *conv_cols(const struct kern_conv2d *d, const struct conv_plan *pl,
                              const struct conv_slot *sl, const float *x)
{
    if (!pl->col) return x;
    if (sl->xs) phase_split(sl->xs, x, (size_t)d->c_in * d->h_in, d->w_in, d->stride_w);
    im2col(d, pl->oh, pl->ow, sl->col, x, sl->xs);
    return sl->col;
}

/* Output rows [oy0, oy1) of one float32 image's conv, out (c_out, (oy1 - oy0) ow) with row
 * stride ldc: w . col(x) for those rows, col built into the slot (x itself for pointwise convs;
 * strided convs read the phase split the caller made in sl->xs). */
static void conv_band_gemm(const struct kern_conv2d *d, const struct conv_plan *pl,
                           const struct conv_slot *sl, const float *x, const float *w, int oy0,
                           int oy1, float *out, int ldc)
{
    const int pn = (oy1 - oy0) * pl->ow;
    const float *b = x + (size_t)oy0 * (size_t)pl->ow;
    int ldb = pl->p;
    if (pl->col) {
        im2col_rows(d, oy0, oy1, pl->ow, sl->col, x, sl->xs);
        b = sl->col;
        ldb = pn;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->c_out, pn, pl->kk, 1.0f, w, pl->kk, b,
                ldb, 0.0f, out, ldc);
}

/* y (c_out, P) = w . col(x), one float32 image, no bias. */
static void conv_fwd_image(const struct kern_conv2d *d, const struct conv_plan *pl,
                           const struct conv_slot *sl, float *y, const float *x, const float *w)
{
    const int band = conv_band_rows(d, pl);
    if (!pl->col || band >= pl->oh) {
        const float *const b = conv_cols(d, pl, sl, x);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->c_out, pl->p, pl->kk, 1.0f, w,
                    pl->kk, b, pl->p, 0.0f, y, pl->p);
        return;
    }
    if (sl->xs) phase_split(sl->xs, x, (size_t)d->c_in * d->h_in, d->w_in, d->stride_w);
    for (int oy0 = 0; oy0 < pl->oh; oy0 += band)
        conv_band_gemm(d, pl, sl, x, w, oy0, oy0 + band < pl->oh ? oy0 + band : pl->oh,
                       y + (size_t)oy0 * pl->ow, pl->p);
}

/* y[c] += bias[c] (bias of dtype dt) over one float32 image. */
static void conv_add_bias(int dt, const struct kern_conv2d *d, const struct conv_plan *pl, float *y,
                          const void *bias)
{
    for (int c = 0; c < d->c_out; c++) {
        float *const yc = y + (size_t)c * pl->p;
        const float bc = lp_get(dt, bias, (size_t)c);
        for (int k = 0; k < pl->p; k++)
            yc[k] += bc;
    }
}

/* dx (=|+=) col2im(w^T . dy), one float32 image. */
static void conv_bwd_data_image(const struct kern_conv2d *d, const struct conv_plan *pl,
                                const struct conv_slot *sl, float *dx, const float *dy,
                                const float *w, int add)
{
    if (!pl->col) {
        /* Pointwise: dcol is dx itself; beta 0 makes BLAS ignore the old contents. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, pl->kk, pl->p, d->c_out, 1.0f, w,
                    pl->kk, dy, pl->p, add ? 1.0f : 0.0f, dx, pl->p);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, pl->kk, pl->p, d->c_out, 1.0f, w, pl->kk,
                dy, pl->p, 0.0f, sl->col, pl->p);
    if (sl->xs) {
        memset(sl->xs, 0, pl->x_img * sizeof(float));
        col2im_add(d, pl->oh, pl->ow, sl->xs, sl->col, 1);
        phase_merge(dx, sl->xs, (size_t)d->c_in * d->h_in, d->w_in, d->stride_w, add);
    } else {
        if (!add) memset(dx, 0, pl->x_img * sizeof(float));
        col2im_add(d, pl->oh, pl->ow, dx, sl->col, 0);
    }
}

/* dw (c_out, K) = beta dw + dy . col(x)^T, one float32 image. */
static void conv_dw_image(const struct kern_conv2d *d, const struct conv_plan *pl,
                          const struct conv_slot *sl, float *dw, const float *dy, const float *x,
                          float beta)
{
    const float *const b = conv_cols(d, pl, sl, x);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->c_out, pl->kk, pl->p, 1.0f, dy, pl->p,
                b, pl->p, beta, dw, (int)pl->kk);
}

struct conv_job {
    const struct kern_conv2d *d;
    const struct conv_plan *pl;
    float *ws;          /* the context's workspace */
    float *out;         /* y, dx or dw */
    const float *a, *b; /* fwd: x, w; bwd_data: dy, w; bwd_filter: dy, x */
    const float *bias;  /* fwd only, may be NULL */
    unsigned accum;
    int nw; /* workers taking part (kern_parallel_width) */
};

static void conv_fwd_task(void *arg, int w, int nw)
{
    const struct conv_job *const j = arg;
    const struct kern_conv2d *const d = j->d;
    const struct conv_plan *const pl = j->pl;
    const struct conv_slot sl = conv_slot_of(j->ws, pl, w);
    for (int i = w; i < d->n; i += nw) {
        float *const yi = j->out + (size_t)i * pl->y_img;
        conv_fwd_image(d, pl, &sl, yi, j->a + (size_t)i * pl->x_ns, j->b);
        if (j->bias) conv_add_bias(KERN_DT_F32, d, pl, yi, j->bias);
    }
}

int kern_ref_conv2d_fwd(struct kern_ctx *ctx, const struct kern_conv2d *d, float *restrict y,
                        const float *restrict x, const float *restrict w,
                        const float *restrict bias)
{
    struct conv_plan pl;
    KERN_RETURN_IF(!y || !x || !w, -EINVAL);
    const int rc = conv_prepare(ctx, NULL, d, &pl);
    if (rc < 0) return rc;
    const size_t work = (size_t)d->n * (pl.x_img + pl.y_img);
    struct conv_job j = { d, &pl, ctx->ws, y, x, w, bias, 0, kern_parallel_width(ctx, work) };
    kern_parallel(ctx, conv_fwd_task, &j, work);
    return 0;
}

/* conv2d_bn_silu_fwd_eval's job: the conv's, the BN's and the residual's. */
struct conv_bn_job {
    const struct kern_conv2d *d;
    const struct kern_bn *bn;
    const struct conv_plan *pl;
    float *ws, *y;
    const float *x, *w, *gamma, *beta, *mean, *var, *r;
};

/* One band of output rows [oy0, oy1) of one image: its conv output into slot yb, then
 * silu(bn) (+ r) from there into y through the residual op's own span loop (kern_resadd.c), so
 * each element is rounded as the unfused ops round it. */
static void conv_bn_band(const struct conv_bn_job *j, const struct conv_slot *sl, float *yi,
                         const float *ri, const float *xi, int oy0, int oy1)
{
    const struct kern_conv2d *const d = j->d;
    const struct conv_plan *const pl = j->pl;
    const size_t pn = (size_t)(oy1 - oy0) * (size_t)pl->ow;
    const size_t p0 = (size_t)oy0 * (size_t)pl->ow, hw = (size_t)pl->p;
    conv_band_gemm(d, pl, sl, xi, j->w, oy0, oy1, sl->yb, (int)pn);
    for (int c = 0; c < d->c_out; c++) {
        float a, b;
        kern_bn_eval_coef(j->gamma[c], j->beta[c], j->mean[c], j->var[c], j->bn->eps, &a, &b);
        kern_bn_silu_add_span(yi + (size_t)c * hw + p0, sl->yb + (size_t)c * pn,
                              ri ? ri + (size_t)c * hw + p0 : NULL, pn, a, b);
    }
}

/* Worker w of nw takes (image, band) items w, w + nw, ... in image-major order: whole images
 * when there are at least as many as workers, else the bands of each image. A band is computed
 * the same whoever takes it, so the bytes do not depend on the split. */
static void conv_bn_task(void *arg, int w, int nw)
{
    const struct conv_bn_job *const j = arg;
    const struct kern_conv2d *const d = j->d;
    const struct conv_plan *const pl = j->pl;
    const struct conv_slot sl = conv_slot_of(j->ws, pl, w);
    const size_t plane = (size_t)j->bn->c * (size_t)j->bn->hw;
    const size_t ysn = kern_bn_y_nstride(j->bn), rsn = j->bn->r_nstride ? j->bn->r_nstride : plane;
    const int band = conv_band_rows(d, pl), bands = (pl->oh + band - 1) / band;
    const int per = d->n >= nw ? 1 : bands; /* items per image */
    int split = -1;                         /* the image whose phase split sl.xs holds */
    for (long it = w; it < (long)d->n * per; it += nw) {
        const int i = (int)(it / per);
        const float *const xi = j->x + (size_t)i * pl->x_ns;
        if (sl.xs && split != i) {
            phase_split(sl.xs, xi, (size_t)d->c_in * d->h_in, d->w_in, d->stride_w);
            split = i;
        }
        const int b0 = per == 1 ? 0 : (int)(it % per), b1 = per == 1 ? bands : b0 + 1;
        for (int b = b0; b < b1; b++) {
            const int oy0 = b * band;
            conv_bn_band(j, &sl, j->y + (size_t)i * ysn, j->r ? j->r + (size_t)i * rsn : NULL, xi,
                         oy0, oy0 + band < pl->oh ? oy0 + band : pl->oh);
        }
    }
}

int kern_ref_conv2d_bn_silu_fwd_eval(struct kern_ctx *ctx, const struct kern_conv2d *c,
                                     const struct kern_bn *d, float *restrict y,
                                     float *restrict tmp, const float *restrict x,
                                     const float *restrict w, const float *restrict gamma,
                                     const float *restrict beta, const float *restrict running_mean,
                                     const float *restrict running_var, const float *restrict r)
{
    struct conv_plan pl;
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!c || !y || !tmp || !x || !w || !gamma || !beta, -EINVAL);
    KERN_RETURN_IF(!running_mean || !running_var, -EINVAL);
    int rc = kern_bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(d->r_nstride && d->r_nstride < (size_t)d->c * (size_t)d->hw, -EINVAL);
    if ((rc = conv_plan_checked(ctx, NULL, c, &pl)) < 0) return rc;
    conv_plan_fused(ctx, c, &pl);
    if (conv_plan_bytes(&pl) > ctx->ws_size) return -KERN_EWORKSPACE;
    KERN_RETURN_IF(d->n != c->n || d->c != c->c_out || d->hw != pl.p, -EINVAL);
    struct conv_bn_job j = {
        c, d, &pl, ctx->ws, y, x, w, gamma, beta, running_mean, running_var, r
    };
    kern_parallel(ctx, conv_bn_task, &j, (size_t)c->n * (pl.x_img + pl.y_img));
    return 0;
}

static void conv_bwd_data_task(void *arg, int w, int nw)
{
    const struct conv_job *const j = arg;
    const struct kern_conv2d *const d = j->d;
    const struct conv_plan *const pl = j->pl;
    const struct conv_slot sl = conv_slot_of(j->ws, pl, w);
    const int add = (j->accum & KERN_ACCUM_DX) != 0;
    for (int i = w; i < d->n; i += nw)
        conv_bwd_data_image(d, pl, &sl, j->out + (size_t)i * pl->x_ns, j->a + (size_t)i * pl->y_img,
                            j->b, add);
}

int kern_ref_conv2d_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d *d, float *restrict dx,
                             const float *restrict dy, const float *restrict w, unsigned accum)
{
    struct conv_plan pl;
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dx || !dy || !w, -EINVAL);
    const int rc = conv_prepare(ctx, NULL, d, &pl);
    if (rc < 0) return rc;
    const size_t work = (size_t)d->n * (pl.x_img + pl.y_img);
    struct conv_job j = { d, &pl, ctx->ws, dx, dy, w, NULL, accum, kern_parallel_width(ctx, work) };
    kern_parallel(ctx, conv_bwd_data_task, &j, work);
    return 0;
}

/*
 * Worker 0 accumulates its images straight into dw; worker w > 0 into its slot's partial dw,
 * which conv_reduce_task then adds to dw in worker order (deterministic for a thread count).
 */
static void conv_bwd_filter_task(void *arg, int w, int nw)
{
    const struct conv_job *const j = arg;
    const struct kern_conv2d *const d = j->d;
    const struct conv_plan *const pl = j->pl;
    const struct conv_slot sl = conv_slot_of(j->ws, pl, w);
    float *const dw = w == 0 ? j->out : sl.dw;
    int first = 1;
    for (int i = w; i < d->n; i += nw) {
        const int keep = !first || (w == 0 && (j->accum & KERN_ACCUM_DPARAM));
        conv_dw_image(d, pl, &sl, dw, j->a + (size_t)i * pl->y_img, j->b + (size_t)i * pl->x_ns,
                      keep ? 1.0f : 0.0f);
        first = 0;
    }
}

static void conv_reduce_task(void *arg, int w, int nw)
{
    const struct conv_job *const j = arg;
    const size_t total = (size_t)j->d->c_out * (size_t)j->pl->kk;
    const int parts = j->nw < j->d->n ? j->nw : j->d->n;
    size_t lo, hi;
    kern_share(total, w, nw, &lo, &hi);
    for (int s = 1; s < parts; s++) {
        const float *const part = conv_slot_of(j->ws, j->pl, s).dw;
        for (size_t k = lo; k < hi; k++)
            j->out[k] += part[k];
    }
}

int kern_ref_conv2d_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d *d,
                               float *restrict dw, const float *restrict dy,
                               const float *restrict x, unsigned accum)
{
    struct conv_plan pl;
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dw || !dy || !x, -EINVAL);
    const int rc = conv_prepare(ctx, NULL, d, &pl);
    if (rc < 0) return rc;
    const size_t work = (size_t)d->n * (pl.x_img + pl.y_img);
    struct conv_job j = { d, &pl, ctx->ws, dw, dy, x, NULL, accum, kern_parallel_width(ctx, work) };
    if (j.nw > pl.slots) j.nw = pl.slots; /* workers past the batch have no images */
    kern_parallel(ctx, conv_bwd_filter_task, &j, work);
    if (j.nw > 1) kern_parallel(ctx, conv_reduce_task, &j, (size_t)d->c_out * (size_t)pl.kk);
    return 0;
}

struct conv_bias_job {
    const struct kern_conv2d *d;
    int dtype, layout; /* of dy (float32 NCHW for the float32 op) */
    float *db;
    const void *dy;
    size_t p;
    unsigned accum;
    size_t ld; /* dy's stride (kern_conv2d_lowp STRIDES; 0 dense) */
};

/* db[c] (=|+=) r((float)(sum of dy[., c] in double)), images in order. */
static void conv_bias_task(void *arg, int w, int nw)
{
    const struct conv_bias_job *const j = arg;
    const struct kern_conv2d *const d = j->d;
    const int plain = j->dtype == KERN_DT_F32 && j->layout == KERN_LAYOUT_NCHW;
    size_t lo, hi;
    kern_share((size_t)d->c_out, w, nw, &lo, &hi);
    for (size_t c = lo; c < hi; c++) {
        double s = 0.0;
        for (int i = 0; i < d->n; i++) {
            const size_t base = (size_t)i * (size_t)d->c_out * j->p;
            if (plain) { /* the float32 op's hot case, without the per-element dispatch */
                const float *const dyc = (const float *)j->dy + base + c * j->p;
                for (size_t k = 0; k < j->p; k++)
                    s += dyc[k];
                continue;
            }
            const size_t at = lp_img(j->layout, (size_t)i, d->c_out, j->p, j->ld);
            for (size_t k = 0; k < j->p; k++)
                s += lp_get(j->dtype, j->dy,
                            lp_index(j->layout, at, (int)c, k, lp_px(d->c_out, j->ld), j->p));
        }
        const float v = lp_round(j->dtype, (float)s);
        j->db[c] = (j->accum & KERN_ACCUM_DPARAM) ? j->db[c] + v : v;
    }
}

/* bwd_bias of a float32 conv d (dl NULL) or of the lowp conv dl, with the same entry checks. */
static int conv_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d_lowp *dl,
                         const struct kern_conv2d *d, float *db, const void *dy, unsigned accum)
{
    int oh, ow;
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!db || !dy, -EINVAL);
    struct conv_bias_job j = { d, KERN_DT_F32, KERN_LAYOUT_NCHW, db, dy, 0, accum, 0 };
    if (dl) {
        const int rc = lp_check(dl);
        if (rc < 0) return rc;
        j.d = &dl->conv;
        j.dtype = dl->dtype;
        j.layout = dl->layout;
        j.ld = dl->y_ld;
    }
    const int rc = kern_conv2d_out_hw(j.d, &oh, &ow);
    if (rc < 0) return rc;
    j.p = (size_t)oh * (size_t)ow;
    if (dl && !lp_strides_ok(dl, 0, (size_t)dl->conv.c_out * j.p)) return -EINVAL;
    kern_parallel(ctx, conv_bias_task, &j, (size_t)j.d->n * j.d->c_out * j.p);
    return 0;
}

int kern_ref_conv2d_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d *d, float *restrict db,
                             const float *restrict dy, unsigned accum)
{
    return conv_bwd_bias(ctx, NULL, d, db, dy, accum);
}

/* --- lowp --- */
/*
 * Reduced-precision conv2d (kern.h "conv2d in reduced precision"): the float32 machinery above
 * on widened copies. Per image a worker widens x[i] (or dy[i]) from dtype and layout into a
 * float32 NCHW image of its slot, runs the float32 im2col + sgemm into a float32 output image,
 * and rounds that once into dtype and layout (adding the old contents first when accumulating).
 * Weights are widened once per call into the shared area, which bwd_filter uses instead as
 * the float32 dw sum (worker 0's; the others' partials are added to it in worker order, then
 * the sum is rounded to dtype, widened back and stored or added to dw).
 * Workspace: shared c_out K floats, then per slot col, partial dw, phase split (as above), the
 * widened input image (c_in h_in w_in floats) and the float32 output image (c_out P floats).
 */
static float lp_get(int dt, const void *p, size_t i)
{
    if (dt == KERN_DT_BF16) return kern_f32_from_bits((uint32_t)((const uint16_t *)p)[i] << 16);
    if (dt == KERN_DT_F16) return kern_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores r(v) at element i of a dtype array. */
static void lp_set(int dt, void *p, size_t i, float v)
{
    if (dt == KERN_DT_BF16)
        ((uint16_t *)p)[i] = kern_bf16_from_f32(v);
    else if (dt == KERN_DT_F16)
        ((uint16_t *)p)[i] = kern_f16_from_f32(v);
    else
        ((float *)p)[i] = v;
}

/* r(v) widened back to float32 (exact). */
static float lp_round(int dt, float v)
{
    if (dt == KERN_DT_BF16) return kern_f32_from_bits((uint32_t)kern_bf16_from_f32(v) << 16);
    if (dt == KERN_DT_F16) return kern_f16_to_f32(kern_f16_from_f32(v));
    return v;
}

/* Element index, in a layout, of element (ch, s) of an image of hw positions starting at base;
 * ld: NHWC's pixel stride (the image's channels when dense; unused for NCHW). */
static size_t lp_index(int layout, size_t base, int ch, size_t s, size_t ld, size_t hw)
{
    return layout == KERN_LAYOUT_NHWC ? base + s * ld + (size_t)ch : base + (size_t)ch * hw + s;
}

/* Where image i of a tensor of c channels and hw positions with stride ld (kern_conv2d_lowp
 * STRIDES; 0 dense) starts, and NHWC's pixel step for lp_index. */
static size_t lp_img(int layout, size_t i, int c, size_t hw, size_t ld)
{
    if (layout == KERN_LAYOUT_NHWC) return i * hw * (ld ? ld : (size_t)c);
    return i * (ld ? ld : (size_t)c * hw);
}

static size_t lp_px(int c, size_t ld)
{
    return ld ? ld : (size_t)c;
}

/* dst (c, hw) float32 NCHW = the image at base of src (dtype, layout, NHWC pixel stride ld),
 * widened. */
static void lp_load(int dt, int layout, float *restrict dst, const void *restrict src, size_t base,
                    int c, size_t hw, size_t ld)
{
    for (int ch = 0; ch < c; ch++)
        for (size_t s = 0; s < hw; s++)
            dst[(size_t)ch * hw + s] = lp_get(dt, src, lp_index(layout, base, ch, s, ld, hw));
}

/* The image at base of dst (dtype, layout, NHWC pixel stride ld) = r(src) or r(dst + src); src
 * (c, hw) NCHW. */
static void lp_store(int dt, int layout, void *restrict dst, size_t base, const float *restrict src,
                     int c, size_t hw, size_t ld, int add)
{
    for (int ch = 0; ch < c; ch++) {
        for (size_t s = 0; s < hw; s++) {
            const size_t at = lp_index(layout, base, ch, s, ld, hw);
            const float v = src[(size_t)ch * hw + s];
            lp_set(dt, dst, at, add ? lp_get(dt, dst, at) + v : v);
        }
    }
}

void kern_conv2d_lowp_init(struct kern_conv2d_lowp *d, const struct kern_conv2d *conv, int dtype,
                           int layout)
{
    if (!d || !conv) return;
    *d = (struct kern_conv2d_lowp){ .conv = *conv, .dtype = dtype, .layout = layout };
}

int kern_ref_conv2d_lowp_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                        size_t *bytes)
{
    return conv_workspace_size(ctx, d, NULL, bytes);
}

struct lp_job {
    const struct kern_conv2d_lowp *d;
    const struct conv_plan *pl;
    float *ws;         /* shared area, then the slots */
    void *out;         /* y, dx (dtype) or dw (float32) */
    const void *a, *b; /* fwd: x, bias; bwd_data: dy; bwd_filter: dy, x */
    unsigned accum;
    int nw;
};

/* Widens the weights (c_out images of c_in x k_h k_w, in the layout) into the shared area. */
static void lp_load_weights(const struct lp_job *j, const void *w)
{
    const struct kern_conv2d *const c = &j->d->conv;
    const size_t khw = (size_t)c->k_h * c->k_w, kk = (size_t)j->pl->kk;
    for (int o = 0; o < c->c_out; o++)
        lp_load(j->d->dtype, j->d->layout, j->ws + (size_t)o * kk, w, (size_t)o * kk, c->c_in, khw,
                (size_t)c->c_in);
}

static void lp_fwd_task(void *arg, int w, int nw)
{
    const struct lp_job *const j = arg;
    const struct kern_conv2d *const d = &j->d->conv;
    const struct conv_plan *const pl = j->pl;
    const struct conv_slot sl = conv_slot_of(j->ws, pl, w);
    const size_t hw_in = (size_t)d->h_in * d->w_in;
    const struct kern_conv2d_lowp *const dl = j->d;
    for (int i = w; i < d->n; i += nw) {
        lp_load(dl->dtype, dl->layout, sl.xf, j->a, lp_img(dl->layout, i, d->c_in, hw_in, dl->x_ld),
                d->c_in, hw_in, lp_px(d->c_in, dl->x_ld));
        conv_fwd_image(d, pl, &sl, sl.yf, sl.xf, j->ws);
        if (j->b) conv_add_bias(dl->dtype, d, pl, sl.yf, j->b);
        lp_store(dl->dtype, dl->layout, j->out,
                 lp_img(dl->layout, i, d->c_out, (size_t)pl->p, dl->y_ld), sl.yf, d->c_out,
                 (size_t)pl->p, lp_px(d->c_out, dl->y_ld), 0);
    }
}

/* Plans a lowp op, widens w (when given) into the shared area, and runs task over the images,
 * then finish (when given) over the c_out K weight elements. */
static int lp_run(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d, void *out, const void *a,
                  const void *b, const void *w, unsigned accum, void (*task)(void *, int, int),
                  void (*finish)(void *, int, int))
{
    struct conv_plan pl;
    const int rc = conv_prepare(ctx, d, NULL, &pl);
    if (rc < 0) return rc;
    const size_t work = (size_t)d->conv.n * (pl.x_img + pl.y_img);
    struct lp_job j = { d, &pl, ctx->ws, out, a, b, accum, kern_parallel_width(ctx, work) };
    if (w) lp_load_weights(&j, w);
    kern_parallel(ctx, task, &j, work);
    if (finish) kern_parallel(ctx, finish, &j, (size_t)d->conv.c_out * (size_t)pl.kk);
    return 0;
}

int kern_ref_conv2d_lowp_fwd(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                             void *restrict y, const void *restrict x, const void *restrict w,
                             const void *restrict bias)
{
    KERN_RETURN_IF(!y || !x || !w, -EINVAL);
    return lp_run(ctx, d, y, x, bias, w, 0, lp_fwd_task, NULL);
}

static void lp_bwd_data_task(void *arg, int w, int nw)
{
    const struct lp_job *const j = arg;
    const struct kern_conv2d *const d = &j->d->conv;
    const struct conv_plan *const pl = j->pl;
    const struct conv_slot sl = conv_slot_of(j->ws, pl, w);
    const size_t hw_in = (size_t)d->h_in * d->w_in;
    const struct kern_conv2d_lowp *const dl = j->d;
    for (int i = w; i < d->n; i += nw) {
        lp_load(dl->dtype, dl->layout, sl.yf, j->a,
                lp_img(dl->layout, i, d->c_out, (size_t)pl->p, dl->y_ld), d->c_out, (size_t)pl->p,
                lp_px(d->c_out, dl->y_ld));
        /* Overwrite the float32 image; accumulation happens in dtype, in lp_store. */
        conv_bwd_data_image(d, pl, &sl, sl.xf, sl.yf, j->ws, 0);
        lp_store(dl->dtype, dl->layout, j->out, lp_img(dl->layout, i, d->c_in, hw_in, dl->x_ld),
                 sl.xf, d->c_in, hw_in, lp_px(d->c_in, dl->x_ld), (j->accum & KERN_ACCUM_DX) != 0);
    }
}

int kern_ref_conv2d_lowp_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                  void *restrict dx, const void *restrict dy,
                                  const void *restrict w, unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dx || !dy || !w, -EINVAL);
    return lp_run(ctx, d, dx, dy, NULL, w, accum, lp_bwd_data_task, NULL);
}

/* Worker 0 sums into the shared area, worker w > 0 into its slot's partial dw. */
static void lp_bwd_filter_task(void *arg, int w, int nw)
{
    const struct lp_job *const j = arg;
    const struct kern_conv2d *const d = &j->d->conv;
    const struct conv_plan *const pl = j->pl;
    if (w >= pl->slots) return; /* no images, no slot */
    const struct conv_slot sl = conv_slot_of(j->ws, pl, w);
    float *const acc = w == 0 ? j->ws : sl.dw;
    const size_t hw_in = (size_t)d->h_in * d->w_in;
    int first = 1;
    const struct kern_conv2d_lowp *const dl = j->d;
    for (int i = w; i < d->n; i += nw) {
        lp_load(dl->dtype, dl->layout, sl.xf, j->b, lp_img(dl->layout, i, d->c_in, hw_in, dl->x_ld),
                d->c_in, hw_in, lp_px(d->c_in, dl->x_ld));
        lp_load(dl->dtype, dl->layout, sl.yf, j->a,
                lp_img(dl->layout, i, d->c_out, (size_t)pl->p, dl->y_ld), d->c_out, (size_t)pl->p,
                lp_px(d->c_out, dl->y_ld));
        conv_dw_image(d, pl, &sl, acc, sl.yf, sl.xf, first ? 0.0f : 1.0f);
        first = 0;
    }
}

/* Adds the partials to the sum in worker order, rounds it to dtype and stores or adds it to dw
 * (float32, in the layout, or OIHW with dw_oihw). */
static void lp_filter_finish_task(void *arg, int w, int nw)
{
    const struct lp_job *const j = arg;
    const struct kern_conv2d *const d = &j->d->conv;
    const size_t kk = (size_t)j->pl->kk, khw = (size_t)d->k_h * d->k_w;
    const size_t total = (size_t)d->c_out * kk;
    const int parts = j->nw < d->n ? j->nw : d->n;
    const int add = (j->accum & KERN_ACCUM_DPARAM) != 0;
    float *const dw = j->out;
    size_t lo, hi;
    kern_share(total, w, nw, &lo, &hi);
    for (size_t k = lo; k < hi; k++) {
        float s = j->ws[k];
        for (int p = 1; p < parts; p++)
            s += conv_slot_of(j->ws, j->pl, p).dw[k];
        const size_t o = k / kk, rem = k % kk;
        const int dw_layout = j->d->dw_oihw ? KERN_LAYOUT_NCHW : j->d->layout;
        const size_t at =
            lp_index(dw_layout, o * kk, (int)(rem / khw), rem % khw, (size_t)d->c_in, khw);
        const float v = lp_round(j->d->dtype, s);
        dw[at] = add ? dw[at] + v : v;
    }
}

int kern_ref_conv2d_lowp_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                    float *restrict dw, const void *restrict dy,
                                    const void *restrict x, unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dw || !dy || !x, -EINVAL);
    return lp_run(ctx, d, dw, dy, x, NULL, accum, lp_bwd_filter_task, lp_filter_finish_task);
}

int kern_ref_conv2d_lowp_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                  float *restrict db, const void *restrict dy, unsigned accum)
{
    return conv_bwd_bias(ctx, d, NULL, db, dy, accum);
}
