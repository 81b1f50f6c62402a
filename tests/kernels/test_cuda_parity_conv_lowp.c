/*
 * CUDA parity of the reduced-precision convs (kern_cuda_conv2d_lowp_* against kern_ref_*, kern.h
 * "conv2d in reduced precision"): bf16 and fp16 (and float32 NHWC), NCHW and NHWC, on fresh
 * random draws (seed printed; --seed N replays), outputs poisoned first, every op with and
 * without accumulation, YOLOv5-like shapes up to 64 channels so that cuDNN picks tensor-core
 * algorithms. Each value is widened and checked as |gpu - ref| <= rtol |ref| + atol max|ref|.
 *
 * Tolerances, and why: each side is within about half a unit of the dtype of the exact sum (the
 * reference rounds S once; cuDNN rounds its own float32 sum once, in another order, and fwd
 * with bias rounds twice: y = r(r(S) + b)), so they may differ by up to about two units at the
 * value's magnitude, plus the float32 order differences, which are tiny next to a 16-bit unit
 * except where the sum cancels (hence the atol term, relative to the tensor's largest value).
 *   bf16: rtol 1e-2 (a unit is 2^-8 = 3.9e-3 relative), atol 2e-3.
 *   fp16: rtol 4e-3 (a unit is 2^-11 = 4.9e-4; left room for algorithms that transform in
 *         fp16), atol 2e-3.
 *   float32 (FMA math, no TF32): rtol 1e-5, atol 1e-5.
 * Strides (x_ld, y_ld) and dw_oihw: the device's own dense bits (check_strided).
 * Registered with the exit-code protocol; exits 77 with "# SKIP no CUDA device" without a GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_testutil.h"
#include "tap.h"
#include "cuda_testutil.h"
#include "parity.h"

static size_t esize(int dt)
{
    return dt == KERN_DT_F32 ? 4 : 2;
}

/* n random values in [lo, hi], stored in dtype (host). */
static void *draw(int dt, size_t n, float lo, float hi)
{
    float *const f = kt_alloc(n);
    kt_fill(f, n, lo, hi);
    if (dt == KERN_DT_F32) return f;
    uint16_t *const h = malloc(n * 2 + 2);
    if (!h) exit(99);
    CK(dt == KERN_DT_BF16 ? kern_ref_cast_f32_bf16(g_cpu, h, f, n)
                          : kern_ref_cast_f32_f16(g_cpu, h, f, n));
    free(f);
    return h;
}

/* Host dtype values widened to a new float array. */
static float *widen(int dt, const void *p, size_t n)
{
    float *const f = kt_alloc(n);
    if (dt == KERN_DT_F32)
        memcpy(f, p, n * 4);
    else
        CK(dt == KERN_DT_BF16 ? kern_ref_cast_bf16_f32(g_cpu, f, p, n)
                              : kern_ref_cast_f16_f32(g_cpu, f, p, n));
    return f;
}

static const char *dt_name(int dt)
{
    return dt == KERN_DT_BF16 ? "bf16" : dt == KERN_DT_F16 ? "fp16" : "f32";
}

/* Device result d (elements of type dt, or float32 when f32 is set) against the host ref. */
static void cmp(const char *what, int dt, int f32, const void *d, const void *ref, size_t n)
{
    const int t = f32 ? KERN_DT_F32 : dt;
    void *const host = malloc(n * esize(t) + 4);
    if (!host) exit(99);
    kct_down(host, d, n * esize(t));
    float *const g = widen(t, host, n), *const r = widen(t, ref, n);
    const double rtol = dt == KERN_DT_BF16 ? 1e-2 : dt == KERN_DT_F16 ? 4e-3 : 1e-5;
    const double atol_rel = dt == KERN_DT_F32 ? 1e-5 : 2e-3;
    double mx = 0, worst = 0;
    size_t bad = 0, first = (size_t)-1;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(r[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)g[i] - r[i]), tol = rtol * fabs(r[i]) + atol_rel * mx;
        if (!(e <= tol)) {
            if (!bad) first = i;
            bad++;
        }
        if (isfinite(e)) worst = fmax(worst, e / (fabs(r[i]) + atol_rel * mx));
    }
    ok(bad == 0, "%s: %zu of %zu outside (rtol %g, atol %g max|ref|), max scaled err %.2e", what,
       bad, n, rtol, atol_rel, worst);
    if (bad)
        tap_diag("first mismatch at %zu: gpu %.9g ref %.9g", first, (double)g[first],
                 (double)r[first]);
    free(host), free(g), free(r);
}

struct shape {
    int n, c_in, h, w, c_out, k, s, p;
};

static void check(const struct shape *sh, int dt, int layout)
{
    struct kern_conv2d c;
    struct kern_conv2d_lowp d;
    int oh, ow;
    size_t ws_c, ws_g;
    kern_conv2d_init(&c, sh->n, sh->c_in, sh->h, sh->w, sh->c_out, sh->k, sh->s, sh->p);
    kern_conv2d_out_hw(&c, &oh, &ow);
    kern_conv2d_lowp_init(&d, &c, dt, layout);
    const size_t es = esize(dt);
    const size_t nx = (size_t)sh->n * sh->c_in * sh->h * sh->w;
    const size_t nw = (size_t)sh->c_out * sh->c_in * sh->k * sh->k;
    const size_t ny = (size_t)sh->n * sh->c_out * oh * ow, nb = (size_t)sh->c_out;
    CK(kern_ref_conv2d_lowp_workspace_size(g_cpu, &d, &ws_c));
    CK(kern_ctx_reserve(g_cpu, ws_c));
    CK(kern_cuda_conv2d_lowp_workspace_size(g_gpu, &d, &ws_g));
    CK(kern_ctx_reserve(g_gpu, ws_g));
    void *const x = draw(dt, nx, -2, 2), *const w = draw(dt, nw, -0.3f, 0.3f);
    void *const b = draw(dt, nb, -1, 1), *const dy = draw(dt, ny, -1, 1);
    void *const dx_old = draw(dt, nx, -1, 1);
    float *const dw_old = kt_alloc(nw), *const db_old = kt_alloc(nb);
    kt_fill(dw_old, nw, -1, 1), kt_fill(db_old, nb, -1, 1);
    /* Host references. */
    void *const y = malloc(ny * es), *const dx = malloc(nx * es), *const dxa = malloc(nx * es);
    float *const dw = kt_alloc(nw), *const dwa = kt_alloc(nw), *const db = kt_alloc(nb),
                 *const dba = kt_alloc(nb);
    memcpy(dxa, dx_old, nx * es), memcpy(dwa, dw_old, nw * 4), memcpy(dba, db_old, nb * 4);
    CK(kern_ref_conv2d_lowp_fwd(g_cpu, &d, y, x, w, b));
    CK(kern_ref_conv2d_lowp_bwd_data(g_cpu, &d, dx, dy, w, 0));
    CK(kern_ref_conv2d_lowp_bwd_data(g_cpu, &d, dxa, dy, w, KERN_ACCUM_DX));
    CK(kern_ref_conv2d_lowp_bwd_filter(g_cpu, &d, dw, dy, x, 0));
    CK(kern_ref_conv2d_lowp_bwd_filter(g_cpu, &d, dwa, dy, x, KERN_ACCUM_DPARAM));
    CK(kern_ref_conv2d_lowp_bwd_bias(g_cpu, &d, db, dy, 0));
    CK(kern_ref_conv2d_lowp_bwd_bias(g_cpu, &d, dba, dy, KERN_ACCUM_DPARAM));
    /* Device. */
    void *const x_d = kct_up(x, nx * es), *const w_d = kct_up(w, nw * es),
                *const b_d = kct_up(b, nb * es), *const dy_d = kct_up(dy, ny * es);
    void *const y_d = kct_poison(ny * es), *const dx_d = kct_poison(nx * es),
                *const dxa_d = kct_up(dx_old, nx * es);
    void *const dw_d = kct_poison(nw * 4), *const dwa_d = kct_up(dw_old, nw * 4),
                *const db_d = kct_poison(nb * 4), *const dba_d = kct_up(db_old, nb * 4);
    CK(kern_cuda_conv2d_lowp_fwd(g_gpu, &d, y_d, x_d, w_d, b_d));
    CK(kern_cuda_conv2d_lowp_bwd_data(g_gpu, &d, dx_d, dy_d, w_d, 0));
    CK(kern_cuda_conv2d_lowp_bwd_data(g_gpu, &d, dxa_d, dy_d, w_d, KERN_ACCUM_DX));
    CK(kern_cuda_conv2d_lowp_bwd_filter(g_gpu, &d, dw_d, dy_d, x_d, 0));
    CK(kern_cuda_conv2d_lowp_bwd_filter(g_gpu, &d, dwa_d, dy_d, x_d, KERN_ACCUM_DPARAM));
    CK(kern_cuda_conv2d_lowp_bwd_bias(g_gpu, &d, db_d, dy_d, 0));
    CK(kern_cuda_conv2d_lowp_bwd_bias(g_gpu, &d, dba_d, dy_d, KERN_ACCUM_DPARAM));
    char what[160];
    const char *const lay = layout == KERN_LAYOUT_NHWC ? "NHWC" : "NCHW";
#define CMP(name, f32, dev, ref, cnt)                                                        \
    do {                                                                                     \
        snprintf(what, sizeof(what), "%s %s n%d c%d->%d %dx%d k%d s%d %s", dt_name(dt), lay, \
                 sh->n, sh->c_in, sh->c_out, sh->h, sh->w, sh->k, sh->s, name);              \
        cmp(what, dt, f32, dev, ref, cnt);                                                   \
    } while (0)
    CMP("fwd + bias", 0, y_d, y, ny);
    CMP("bwd_data", 0, dx_d, dx, nx);
    CMP("bwd_data accum", 0, dxa_d, dxa, nx);
    CMP("bwd_filter (f32 dw)", 1, dw_d, dw, nw);
    CMP("bwd_filter accum", 1, dwa_d, dwa, nw);
    CMP("bwd_bias (f32 db)", 1, db_d, db, nb);
    CMP("bwd_bias accum", 1, dba_d, dba, nb);
#undef CMP
    /* The cached plan gives the same bits again (deterministic algorithms preferred). */
    void *const y2_d = kct_poison(ny * es);
    CK(kern_cuda_conv2d_lowp_fwd(g_gpu, &d, y2_d, x_d, w_d, b_d));
    unsigned char *const y1 = malloc(ny * es), *const y2 = malloc(ny * es);
    kct_down(y1, y_d, ny * es), kct_down(y2, y2_d, ny * es);
    ok(!memcmp(y1, y2, ny * es), "%s %s k%d s%d: fwd repeated with the cached plan, same bits",
       dt_name(dt), lay, sh->k, sh->s);
    free(y1), free(y2), cudaFree(y2_d);
    free(x), free(w), free(b), free(dy), free(dx_old), free(dw_old), free(db_old), free(y);
    free(dx), free(dxa), free(dw), free(dwa), free(db), free(dba);
    cudaFree(x_d), cudaFree(w_d), cudaFree(b_d), cudaFree(dy_d), cudaFree(y_d), cudaFree(dx_d);
    cudaFree(dxa_d), cudaFree(dw_d), cudaFree(dwa_d), cudaFree(db_d), cudaFree(dba_d);
}

/* n rows of len 16-bit elements into a wide host buffer at element off with row step step. */
static uint16_t *widen_rows(const uint16_t *src, size_t rows, size_t len, size_t step, size_t off)
{
    uint16_t *const w = malloc((rows * step + off) * 2);
    if (!w) exit(99);
    memset(w, 0xA5, (rows * step + off) * 2);
    for (size_t r = 0; r < rows; r++)
        memcpy(w + off + r * step, src + r * len, len * 2);
    return w;
}

/*
 * STRIDES and dw_oihw on the device, bf16 NHWC (the NHWC executor's case): x, dx, y and dy as
 * channel slices of wider tensors (pixel strides, offsets of 8 channels: 16-byte aligned, as the
 * executor's concats are) give the dense call's bits and leave the rest of the buffers alone;
 * dw_oihw is the NHWC dw permuted, bit for bit; db from a strided dy is the dense db.
 */
static void check_strided(const struct shape *sh)
{
    const int dt = KERN_DT_BF16;
    struct kern_conv2d c;
    struct kern_conv2d_lowp d, ds;
    int oh, ow;
    size_t ws;
    kern_conv2d_init(&c, sh->n, sh->c_in, sh->h, sh->w, sh->c_out, sh->k, sh->s, sh->p);
    kern_conv2d_out_hw(&c, &oh, &ow);
    kern_conv2d_lowp_init(&d, &c, dt, KERN_LAYOUT_NHWC);
    ds = d;
    ds.x_ld = (size_t)sh->c_in + 16, ds.y_ld = (size_t)sh->c_out + 24, ds.dw_oihw = 1;
    CK(kern_cuda_conv2d_lowp_workspace_size(g_gpu, &d, &ws));
    CK(kern_ctx_reserve(g_gpu, ws));
    CK(kern_cuda_conv2d_lowp_workspace_size(g_gpu, &ds, &ws));
    CK(kern_ctx_reserve(g_gpu, ws));
    const size_t px = (size_t)sh->n * sh->h * sh->w, py = (size_t)sh->n * oh * ow;
    const size_t nx = px * sh->c_in, ny = py * sh->c_out, khw = (size_t)sh->k * sh->k;
    const size_t nw = (size_t)sh->c_out * sh->c_in * khw;
    uint16_t *const x = draw(dt, nx, -2, 2), *const w = draw(dt, nw, -0.3f, 0.3f),
                    *const dy = draw(dt, ny, -1, 1);
    uint16_t *const xw = widen_rows(x, px, sh->c_in, ds.x_ld, 8), *const dyw =
                                                                      widen_rows(dy, py, sh->c_out,
                                                                                 ds.y_ld, 8);
    const size_t exw = px * ds.x_ld + 8, eyw = py * ds.y_ld + 8;
    void *const x_d = kct_up(x, nx * 2), *const w_d = kct_up(w, nw * 2),
                *const dy_d = kct_up(dy, ny * 2);
    void *const xw_d = kct_up(xw, exw * 2), *const dyw_d = kct_up(dyw, eyw * 2);
    void *const y_d = kct_poison(ny * 2), *const dx_d = kct_poison(nx * 2);
    float *const dw_d = kct_poison(nw * 4), *const db_d = kct_poison((size_t)sh->c_out * 4);
    uint16_t *const ywh = malloc(eyw * 2), *const dxwh = malloc(exw * 2);
    memset(ywh, 0xA5, eyw * 2), memset(dxwh, 0xA5, exw * 2);
    void *const yw_d = kct_up(ywh, eyw * 2), *const dxw_d = kct_up(dxwh, exw * 2);
    float *const dws_d = kct_poison(nw * 4), *const dbs_d = kct_poison((size_t)sh->c_out * 4);
    CK(kern_cuda_conv2d_lowp_fwd(g_gpu, &d, y_d, x_d, w_d, NULL));
    CK(kern_cuda_conv2d_lowp_bwd_data(g_gpu, &d, dx_d, dy_d, w_d, 0));
    CK(kern_cuda_conv2d_lowp_bwd_filter(g_gpu, &d, dw_d, dy_d, x_d, 0));
    CK(kern_cuda_conv2d_lowp_bwd_bias(g_gpu, &d, db_d, dy_d, 0));
    CK(kern_cuda_conv2d_lowp_fwd(g_gpu, &ds, (uint16_t *)yw_d + 8, (uint16_t *)xw_d + 8, w_d,
                                 NULL));
    CK(kern_cuda_conv2d_lowp_bwd_data(g_gpu, &ds, (uint16_t *)dxw_d + 8, (uint16_t *)dyw_d + 8, w_d,
                                      0));
    CK(kern_cuda_conv2d_lowp_bwd_filter(g_gpu, &ds, dws_d, (uint16_t *)dyw_d + 8,
                                        (uint16_t *)xw_d + 8, 0));
    CK(kern_cuda_conv2d_lowp_bwd_bias(g_gpu, &ds, dbs_d, (uint16_t *)dyw_d + 8, 0));
    uint16_t *const y = malloc(ny * 2), *const dx = malloc(nx * 2);
    float *const dw = kt_alloc(nw), *const dws = kt_alloc(nw), *const db = kt_alloc(sh->c_out),
                 *const dbs = kt_alloc(sh->c_out);
    kct_down(y, y_d, ny * 2), kct_down(dx, dx_d, nx * 2), kct_down(dw, dw_d, nw * 4);
    kct_down(ywh, yw_d, eyw * 2), kct_down(dxwh, dxw_d, exw * 2), kct_down(dws, dws_d, nw * 4);
    kct_down(db, db_d, (size_t)sh->c_out * 4), kct_down(dbs, dbs_d, (size_t)sh->c_out * 4);
    size_t ybad = 0, dxbad = 0, spill = 0, dwbad = 0;
    for (size_t r = 0; r < py; r++)
        for (size_t q = 0; q < ds.y_ld; q++) {
            const uint16_t v = ywh[8 + r * ds.y_ld + q];
            if (q < (size_t)sh->c_out)
                ybad += v != y[r * sh->c_out + q];
            else
                spill += v != 0xA5A5;
        }
    for (size_t r = 0; r < px; r++)
        for (size_t q = 0; q < ds.x_ld; q++) {
            const uint16_t v = dxwh[8 + r * ds.x_ld + q];
            if (q < (size_t)sh->c_in)
                dxbad += v != dx[r * sh->c_in + q];
            else
                spill += v != 0xA5A5;
        }
    for (size_t e = 0; e < 8; e++)
        spill += (ywh[e] != 0xA5A5) + (dxwh[e] != 0xA5A5);
    for (size_t o = 0; o < (size_t)sh->c_out; o++)
        for (size_t ci = 0; ci < (size_t)sh->c_in; ci++)
            for (size_t k = 0; k < khw; k++)
                dwbad += memcmp(&dws[(o * sh->c_in + ci) * khw + k],
                                &dw[(o * khw + k) * sh->c_in + ci], 4) != 0;
    ok(ybad == 0 && dxbad == 0 && spill == 0 && dwbad == 0 &&
           !memcmp(db, dbs, (size_t)sh->c_out * 4),
       "bf16 NHWC n%d c%d->%d %dx%d k%d s%d strided: y, dx the dense bits (%zu, %zu off), %zu "
       "written outside; dw_oihw the permuted dw (%zu off); db the same",
       sh->n, sh->c_in, sh->c_out, sh->h, sh->w, sh->k, sh->s, ybad, dxbad, spill, dwbad);
    free(x), free(w), free(dy), free(xw), free(dyw), free(ywh), free(dxwh), free(y), free(dx);
    free(dw), free(dws), free(db), free(dbs);
    void *const dev[] = { x_d,  w_d,  dy_d, xw_d,  dyw_d, y_d,  dx_d,
                          dw_d, db_d, yw_d, dxw_d, dws_d, dbs_d };
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        cudaFree(dev[k]);
}

static void check_errors(void)
{
    struct kern_conv2d c;
    struct kern_conv2d_lowp d;
    size_t ws;
    kern_conv2d_init(&c, 1, 8, 8, 8, 8, 3, 1, 1);
    kern_conv2d_lowp_init(&d, &c, 7, KERN_LAYOUT_NCHW);
    is_int(kern_cuda_conv2d_lowp_workspace_size(g_gpu, &d, &ws), -EINVAL, "cuda: bad dtype");
    kern_conv2d_lowp_init(&d, &c, KERN_DT_BF16, KERN_LAYOUT_NCHW);
    is_int(kern_cuda_conv2d_lowp_workspace_size(g_cpu, &d, &ws), -KERN_EBACKEND,
           "cuda op on a CPU context: -KERN_EBACKEND");
    const struct kern_ops *const k = kern_ops_cuda();
    ok(k && k->conv2d_lowp_fwd == kern_cuda_conv2d_lowp_fwd &&
           k->conv2d_lowp_bwd_bias == kern_cuda_conv2d_lowp_bwd_bias,
       "kern_ops_cuda() carries the lowp ops");
}

void parity_conv_lowp(int bench)
{
    (void)bench; /* no benchmark in this suite */
    static const struct shape shapes[] = {
        { 2, 5, 9, 7, 6, 3, 1, 1 },     /* odd channel counts: cuDNN's fallback kernels */
        { 4, 32, 20, 20, 64, 3, 2, 1 }, /* downsampling conv */
        { 4, 64, 20, 20, 64, 1, 1, 0 }, /* pointwise */
        { 8, 64, 16, 16, 64, 3, 1, 1 }, /* bottleneck 3x3, tensor-core friendly */
        { 2, 3, 64, 64, 16, 6, 2, 2 },  /* the stem (3 input channels) */
    };
    for (int dt = KERN_DT_BF16; dt <= KERN_DT_F16; dt++)
        for (int layout = 0; layout < 2; layout++)
            for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
                check(&shapes[s], dt, layout);
    check(&shapes[1], KERN_DT_F32, KERN_LAYOUT_NHWC);
    for (size_t s = 1; s < sizeof(shapes) / sizeof(shapes[0]) - 1; s++)
        check_strided(&shapes[s]);
    check_errors();
}
