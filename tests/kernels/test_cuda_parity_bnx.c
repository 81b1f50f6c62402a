/*
 * CUDA parity of the ops on bf16 activations, NCHW or NHWC. BN + SiLU (+ residual)
 * (kern_cuda_bnx_*): the same bits as
 * the CPU reference (kern_bn.h "BN + SiLU (+ residual) on 16-bit activations": one order for
 * every reduction, each operation rounded alone on both backends). For NCHW and NHWC, dense and
 * as channel slices of wider tensors, with and without the residual, one chunk a channel and
 * many: the sums, y, the saves, the running statistics, dgamma, dbeta and dx are compared byte
 * for byte, the accumulating forms too. Outputs start poisoned; a slice's neighbours must keep
 * their poison. Max pool and upsample (kern_cuda_maxpool16_*, kern_cuda_upsample16_*): y, idx
 * and dx byte for byte, with NaN and ties in the windows, dense and as NHWC slices. The moves
 * of the NHWC executor (copy16, cast_f32_lowp_cl, cast_f32_lowp_s2d, detect16_*): byte for byte.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_lowp_common.h"
#include "kern_testutil.h"
#include "tap.h"
#include "cuda_testutil.h"
#include "parity.h"

static uint16_t *h16(size_t n, float lo, float hi)
{
    uint16_t *p = malloc((n ? n : 1) * 2);
    if (!p) exit(99);
    for (size_t i = 0; i < n; i++)
        p[i] = kern_bf16_from_f32(kt_uniform(lo, hi));
    return p;
}

/* Host and device copies of one case's buffers; outputs start as 0xA5 bytes on both sides. */
struct side {
    uint16_t *y, *dx;
    double *fs, *bs;
    float *sm, *si, *rm, *rv, *dg, *db;
};

static void side_host(struct side *s, size_t ey, size_t ex, int c, const float *rm, const float *rv)
{
    s->y = malloc(ey * 2), s->dx = malloc(ex * 2);
    s->fs = malloc(KERN_BN_SUMS_LEN(c) * 8), s->bs = malloc(KERN_BN_SUMS_LEN(c) * 8);
    s->sm = kt_alloc((size_t)c), s->si = kt_alloc((size_t)c), s->dg = kt_alloc((size_t)c);
    s->db = kt_alloc((size_t)c), s->rm = kt_alloc((size_t)c), s->rv = kt_alloc((size_t)c);
    if (!s->y || !s->dx || !s->fs || !s->bs) exit(99);
    memset(s->y, 0xA5, ey * 2), memset(s->dx, 0xA5, ex * 2);
    memcpy(s->rm, rm, (size_t)c * 4), memcpy(s->rv, rv, (size_t)c * 4);
    kt_fill(s->dg, (size_t)c, -1, 1), kt_fill(s->db, (size_t)c, -1, 1);
}

static void side_device(struct side *dv, const struct side *h, size_t ey, size_t ex, int c)
{
    dv->y = kct_poison(ey * 2), dv->dx = kct_poison(ex * 2);
    dv->fs = kct_poison(KERN_BN_SUMS_LEN(c) * 8), dv->bs = kct_poison(KERN_BN_SUMS_LEN(c) * 8);
    dv->sm = kct_poison((size_t)c * 4), dv->si = kct_poison((size_t)c * 4);
    dv->rm = kct_up(h->rm, (size_t)c * 4), dv->rv = kct_up(h->rv, (size_t)c * 4);
    dv->dg = kct_up(h->dg, (size_t)c * 4), dv->db = kct_up(h->db, (size_t)c * 4);
}

static bool same_down(const void *host, const void *dev, size_t bytes)
{
    void *t = malloc(bytes ? bytes : 1);
    if (!t) exit(99);
    kct_down(t, dev, bytes);
    const bool r = memcmp(host, t, bytes) == 0;
    free(t);
    return r;
}

static void test_case(int n, int c, int hw, int layout, bool slices, bool with_r, bool accum)
{
    struct kern_bnx d;
    kern_bnx_init(&d, n, c, hw, layout);
    const size_t np = (size_t)n * hw;
    if (slices) {
        if (layout == KERN_LAYOUT_NHWC)
            d.x_ld = (size_t)c + 3, d.y_ld = (size_t)c + 5, d.r_ld = (size_t)c + 1;
        else
            d.x_ld = (size_t)(c + 1) * hw, d.y_ld = (size_t)(c + 2) * hw, d.r_ld = (size_t)c * hw;
    }
    /* elements of each tensor's buffer (the whole stride), and the slice offsets */
    const size_t dense = layout == KERN_LAYOUT_NHWC ? (size_t)c : (size_t)c * hw;
    const size_t lx = d.x_ld ? d.x_ld : dense, ly = d.y_ld ? d.y_ld : dense;
    const size_t lr = d.r_ld ? d.r_ld : dense;
    const size_t ex = layout == KERN_LAYOUT_NHWC ? np * lx : (size_t)n * lx;
    const size_t ey = layout == KERN_LAYOUT_NHWC ? np * ly : (size_t)n * ly;
    const size_t er = layout == KERN_LAYOUT_NHWC ? np * lr : (size_t)n * lr;
    const size_t ox = slices ? (layout == KERN_LAYOUT_NHWC ? 2 : (size_t)hw) : 0;
    const size_t oy = slices ? (layout == KERN_LAYOUT_NHWC ? 4 : 2 * (size_t)hw) : 0;
    tap_diag("n %d c %d hw %d %s%s%s%s", n, c, hw, layout == KERN_LAYOUT_NHWC ? "NHWC" : "NCHW",
             slices ? " slices" : "", with_r ? " +r" : "", accum ? " accum" : "");
    uint16_t *x = h16(ex, -2, 3), *dy = h16(ey, -1, 1), *r = h16(er, -1, 1);
    float *g = kt_alloc((size_t)c), *b = kt_alloc((size_t)c), *rm = kt_alloc((size_t)c);
    float *rv = kt_alloc((size_t)c);
    kt_fill(g, (size_t)c, 0.5f, 1.5f), kt_fill(b, (size_t)c, -0.5f, 0.5f);
    kt_fill(rm, (size_t)c, -0.1f, 0.1f), kt_fill(rv, (size_t)c, 0.5f, 1.5f);
    struct side H, D;
    side_host(&H, ey, ex, c, rm, rv);
    side_device(&D, &H, ey, ex, c);
    if (accum) { /* a dx to add into, the same on both sides */
        uint16_t *old = h16(ex, -0.5f, 0.5f);
        memcpy(H.dx, old, ex * 2);
        kct_put(D.dx, old, ex * 2);
        free(old);
    }
    uint16_t *xd = kct_up(x, ex * 2), *dyd = kct_up(dy, ey * 2), *rd = kct_up(r, er * 2);
    float *gd = kct_up(g, (size_t)c * 4), *bd = kct_up(b, (size_t)c * 4);
    const uint16_t *rh = with_r ? r : NULL, *rdv = with_r ? rd : NULL;
    const unsigned pa = accum ? KERN_ACCUM_DPARAM : 0, xa = accum ? KERN_ACCUM_DX : 0;

    CK(kern_ref_bnx_stats(g_cpu, &d, H.fs, x + ox));
    CK(kern_cuda_bnx_stats(g_gpu, &d, D.fs, xd + ox));
    CK(kern_ref_bnx_silu_apply(g_cpu, &d, H.y + oy, H.sm, H.si, H.rm, H.rv, x + ox, g, b, H.fs,
                               rh));
    CK(kern_cuda_bnx_silu_apply(g_gpu, &d, D.y + oy, D.sm, D.si, D.rm, D.rv, xd + ox, gd, bd, D.fs,
                                rdv));
    CK(kern_ref_bnx_silu_bwd_reduce(g_cpu, &d, H.bs, H.dg, H.db, dy + oy, x + ox, g, b, H.sm, H.si,
                                    pa));
    CK(kern_cuda_bnx_silu_bwd_reduce(g_gpu, &d, D.bs, D.dg, D.db, dyd + oy, xd + ox, gd, bd, D.sm,
                                     D.si, pa));
    CK(kern_ref_bnx_silu_bwd_apply(g_cpu, &d, H.dx + ox, dy + oy, x + ox, g, b, H.sm, H.si, H.bs,
                                   xa));
    CK(kern_cuda_bnx_silu_bwd_apply(g_gpu, &d, D.dx + ox, dyd + oy, xd + ox, gd, bd, D.sm, D.si,
                                    D.bs, xa));
    const size_t sb = KERN_BN_SUMS_LEN(c) * 8, cb = (size_t)c * 4;
    ok(same_down(H.fs, D.fs, sb), "forward sums: the same bits");
    ok(same_down(H.y, D.y, ey * 2), "y (and the poison around a slice): the same bits");
    ok(same_down(H.sm, D.sm, cb) && same_down(H.si, D.si, cb), "save_mean, save_invstd");
    ok(same_down(H.rm, D.rm, cb) && same_down(H.rv, D.rv, cb), "running mean and var");
    ok(same_down(H.bs, D.bs, sb), "backward sums: the same bits");
    ok(same_down(H.dg, D.dg, cb) && same_down(H.db, D.db, cb), "dgamma, dbeta");
    ok(same_down(H.dx, D.dx, ex * 2), "dx (and the poison around a slice): the same bits");
    void *const dev[] = { D.y,  D.dx, D.fs, D.bs, D.sm, D.si, D.rm, D.rv,
                          D.dg, D.db, xd,   dyd,  rd,   gd,   bd };
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        cudaFree(dev[k]);
    free(H.y), free(H.dx), free(H.fs), free(H.bs), free(H.sm), free(H.si), free(H.rm), free(H.rv);
    free(H.dg), free(H.db), free(x), free(dy), free(r), free(g), free(b), free(rm), free(rv);
}

/* Pool (k > 0) or upsample forward and backward, CPU against CUDA, byte for byte. */
static void test_map16(int n, int c, int h, int w, int k, int layout, bool slices, bool accum)
{
    struct kern_map16 d = {
        .n = n, .c = c, .h = h, .w = w, .k = k, .layout = layout, .dtype = KERN_DT_BF16
    };
    const bool pool = k > 0;
    const int oh = pool ? h : 2 * h, ow = pool ? w : 2 * w;
    if (slices && layout == KERN_LAYOUT_NHWC) d.x_ld = (size_t)c + 3, d.y_ld = (size_t)c + 2;
    const size_t lx = d.x_ld ? d.x_ld : (size_t)c, ly = d.y_ld ? d.y_ld : (size_t)c;
    const size_t ex = (size_t)n * h * w * lx, ey = (size_t)n * oh * ow * ly;
    const size_t ei = (size_t)n * c * oh * ow;
    tap_diag("%s k %d n %d c %d %dx%d %s%s%s", pool ? "maxpool16" : "upsample16", k, n, c, h, w,
             layout == KERN_LAYOUT_NHWC ? "NHWC" : "NCHW", slices ? " slices" : "",
             accum ? " accum" : "");
    uint16_t *x = h16(ex, -2, 2), *dy = h16(ey, -1, 1);
    for (size_t i = 0; i < ex; i += 37) /* ties and NaN in the windows */
        x[i] = i % 3 ? x[i / 2] : 0x7fc0;
    uint16_t *yh = malloc(ey * 2), *dxh = h16(ex, -1, 1);
    uint8_t *ih = malloc(ei ? ei : 1);
    if (!yh || !ih) exit(99);
    memset(yh, 0xA5, ey * 2), memset(ih, 0xA5, ei);
    uint16_t *xd = kct_up(x, ex * 2), *dyd = kct_up(dy, ey * 2), *yd = kct_poison(ey * 2);
    uint16_t *dxd = kct_up(dxh, ex * 2);
    uint8_t *id = kct_poison(ei);
    const unsigned a = accum ? KERN_ACCUM_DX : 0;
    if (pool) {
        CK(kern_ref_maxpool16_fwd(g_cpu, &d, yh, ih, x));
        CK(kern_cuda_maxpool16_fwd(g_gpu, &d, yd, id, xd));
        CK(kern_ref_maxpool16_bwd(g_cpu, &d, dxh, dy, ih, a));
        CK(kern_cuda_maxpool16_bwd(g_gpu, &d, dxd, dyd, id, a));
        ok(same_down(ih, id, ei), "idx: the same bytes");
    } else {
        CK(kern_ref_upsample16_fwd(g_cpu, &d, yh, x));
        CK(kern_cuda_upsample16_fwd(g_gpu, &d, yd, xd));
        CK(kern_ref_upsample16_bwd(g_cpu, &d, dxh, dy, a));
        CK(kern_cuda_upsample16_bwd(g_gpu, &d, dxd, dyd, a));
    }
    ok(same_down(yh, yd, ey * 2), "y (and the poison around a slice): the same bits");
    ok(same_down(dxh, dxd, ex * 2), "dx: the same bits");
    cudaFree(xd), cudaFree(dyd), cudaFree(yd), cudaFree(dxd), cudaFree(id);
    free(x), free(dy), free(yh), free(dxh), free(ih);
}

/* copy16 (NHWC slices both ways, accumulating), cast_f32_lowp_cl, cast_f32_lowp_s2d and detect16
 * (both layouts):
 * CPU against CUDA, byte for byte. */
static void test_moves(int n, int c, int h, int w)
{
    tap_diag("copy16 / cast_f32_lowp_cl / detect16 n %d c %d %dx%d", n, c, h, w);
    const size_t hw = (size_t)h * w, e = (size_t)n * c * hw, lx = (size_t)c + 3, ly = (size_t)c + 5;
    struct kern_map16 d = {
        .n = n, .c = c, .h = h, .w = w, .layout = KERN_LAYOUT_NHWC, .dtype = KERN_DT_BF16
    };
    d.x_ld = lx, d.y_ld = ly;
    uint16_t *x = h16((size_t)n * hw * lx, -2, 2), *y = h16((size_t)n * hw * ly, -1, 1);
    uint16_t *xd = kct_up(x, (size_t)n * hw * lx * 2), *yd = kct_up(y, (size_t)n * hw * ly * 2);
    for (int acc = 0; acc < 2; acc++) {
        CK(kern_ref_copy16(g_cpu, &d, y + 2, x + 1, acc ? KERN_ACCUM_DX : 0));
        CK(kern_cuda_copy16(g_gpu, &d, yd + 2, xd + 1, acc ? KERN_ACCUM_DX : 0));
        ok(same_down(y, yd, (size_t)n * hw * ly * 2), "copy16%s: the same bits, the gaps kept",
           acc ? " accum" : "");
    }
    float *f = kt_alloc(e);
    kt_fill(f, e, -300, 300);
    float *fd = kct_up(f, e * 4);
    uint16_t *clh = malloc(e * 2), *cld = kct_poison(e * 2);
    for (int dt = KERN_DT_BF16; dt <= KERN_DT_F16; dt++) {
        CK(kern_ref_cast_f32_lowp_cl(g_cpu, dt, clh, f, n, c, hw));
        CK(kern_cuda_cast_f32_lowp_cl(g_gpu, dt, cld, fd, n, c, hw));
        ok(same_down(clh, cld, e * 2), "cast_f32_lowp_cl %s: the same bits",
           dt == KERN_DT_BF16 ? "bf16" : "f16");
    }
    /* the stem's fused space-to-depth cast: images (n, 3, 2h, 2w) float32 NCHW */
    const size_t ns = (size_t)n * 3 * 4 * hw, n16 = (size_t)n * 16 * hw;
    float *sx = kt_alloc(ns);
    kt_fill(sx, ns, -300, 300);
    float *sxd = kct_up(sx, ns * 4);
    uint16_t *sh = malloc(n16 * 2), *sd = kct_poison(n16 * 2);
    for (int layout = 0; layout < 2; layout++)
        for (int dt = KERN_DT_BF16; dt <= KERN_DT_F16; dt++) {
            const struct kern_s2d s = { n, 3, 2 * h, 2 * w, 16, layout };
            CK(kern_ref_cast_f32_lowp_s2d(g_cpu, &s, dt, sh, sx));
            CK(kern_cuda_cast_f32_lowp_s2d(g_gpu, &s, dt, sd, sxd));
            ok(same_down(sh, sd, n16 * 2), "cast_f32_lowp_s2d %s %s: the same bits",
               layout ? "NHWC" : "NCHW", dt == KERN_DT_BF16 ? "bf16" : "f16");
        }
    cudaFree(sxd), cudaFree(sd);
    free(sx), free(sh);
    /* detect16 on a head of na 3, no c / 3 (c a multiple of 3, no >= 5) */
    const struct kern_detect dd = { .bs = n, .na = 3, .no = c / 3, .ny = h, .nx = w, .stride = 8 };
    float *ph = malloc(e * 4), *pd = kct_poison(e * 4);
    uint16_t *rh = malloc(e * 2), *rd = kct_poison(e * 2);
    for (int layout = 0; layout < 2; layout++) {
        CK(kern_ref_detect16_fwd(g_cpu, &dd, layout, ph, clh));
        CK(kern_cuda_detect16_fwd(g_gpu, &dd, layout, pd, cld));
        CK(kern_ref_detect16_bwd(g_cpu, &dd, layout, rh, f));
        CK(kern_cuda_detect16_bwd(g_gpu, &dd, layout, rd, fd));
        ok(same_down(ph, pd, e * 4) && same_down(rh, rd, e * 2), "detect16 %s: the same bits",
           layout ? "NHWC" : "NCHW");
    }
    cudaFree(xd), cudaFree(yd), cudaFree(fd), cudaFree(cld), cudaFree(pd), cudaFree(rd);
    free(x), free(y), free(f), free(clh), free(ph), free(rh);
}

void parity_bnx(int bench)
{
    (void)bench; /* no benchmark in this suite */
    for (int layout = 0; layout < 2; layout++) {
        test_case(2, 5, 63, layout, false, true, false);
        test_case(3, 17, 16, layout, true, false, false);
        test_case(4, 3, 2304, layout, true, true, true); /* 9 chunks a channel */
    }
    /* yolov5s shapes at 640, batch 4: the stem's output, a C3's, SPPF's input */
    test_case(4, 32, 320 * 320, KERN_LAYOUT_NHWC, false, false, false);
    test_case(4, 64, 160 * 160, KERN_LAYOUT_NHWC, true, true, true);
    test_case(4, 512, 20 * 20, KERN_LAYOUT_NHWC, false, false, false);
    for (int layout = 0; layout < 2; layout++) {
        test_map16(2, 5, 9, 7, 5, layout, layout == 1, false);
        test_map16(2, 5, 6, 7, 0, layout, layout == 1, true);
    }
    /* yolov5s' SPPF (512 channels at 20x20) and its last upsample (256 at 40x40), batch 4 */
    test_map16(4, 256, 20, 20, 5, KERN_LAYOUT_NHWC, false, true);
    test_map16(4, 128, 40, 40, 0, KERN_LAYOUT_NHWC, true, false);
    test_moves(2, 18, 5, 7);
    test_moves(4, 255, 20, 20); /* yolov5s' Detect at 640, batch 4, level 3 */
}
