/*
 * CUDA parity of BN + SiLU + residual add fused (kern_cuda_bn_silu_add_fwd_train / _eval /
 * _apply, style guide rule 25): against the CPU reference on the same random inputs (fresh
 * draws each run; the seed is printed, --seed N replays it), every output poisoned first, dense
 * and with y and r channel slices of wider buffers (the channels outside y's slice must keep
 * their poison); and against the CUDA unfused composition (kern_cuda_bn_silu_fwd_* then
 * kern_cuda_add_fwd), which it must equal bit for bit (kern_cuda.h). Also the fused conv + BN +
 * SiLU (+ r) of inference (kern_cuda_conv2d_bn_silu_fwd_eval), see test_conv_bn.
 * Tolerances (fp32) vs the CPU: y 1e-5 + 1e-4 rel, the BN+SiLU forward's (variance as
 * E[x^2] - mean^2 in double, FMA in x a + b, CUDA's expf); the sum adds no error of its own.
 * Saved statistics and running stats 1e-6 + 1e-5 rel, as the BN ops.
 * Exits 77 with "# SKIP no CUDA device" when the build has CUDA but no device is visible.
 */
#include <errno.h>
#include <math.h>
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

enum { M_TRAIN, M_EVAL, M_APPLY };
static const char *const mode_name[] = { "train", "eval", "apply" };

static float *rnd(size_t n, float lo, float hi)
{
    float *const p = kt_alloc(n);
    kt_fill(p, n, lo, hi);
    return p;
}

static float *d_up(const float *h, size_t n)
{
    return kct_up(h, n * sizeof(float));
}

/* n device floats of canary (0x7fc0beef), as kt_poison. */
static float *d_canary(size_t n)
{
    float *const tmp = kt_alloc(n);
    kt_poison(tmp, n);
    float *const d = d_up(tmp, n);
    free(tmp);
    return d;
}

static void d_down(float *h, const float *d, size_t n)
{
    kct_down(h, d, n * sizeof(float));
}

/* Device tensors of one case; the host inputs are kept for the reference. */
struct dev {
    float *x, *r, *g, *b, *rm, *rv, *sm, *si;
    double *sums;
};

static void test_case(int n, int c, int h, int w, int strided)
{
    const int hw = h * w;
    const size_t cnt = (size_t)n * c * hw, cc = (size_t)c, plane = (size_t)c * hw;
    const size_t ysn = strided ? plane + 5 * (size_t)hw : plane, yoff = strided ? 2 * hw : 0;
    const size_t rsn = strided ? plane + 3 * (size_t)hw : plane, roff = strided ? 3 * hw : 0;
    tap_diag("n %d c %d %dx%d %s", n, c, h, w, strided ? "strided" : "dense");
    struct kern_bn d;
    kern_bn_init(&d, n, c, hw);
    if (strided) d.y_nstride = ysn, d.r_nstride = rsn;
    struct kern_bn dense = d;
    dense.y_nstride = dense.r_nstride = 0;

    float *const x = kt_alloc(cnt);
    for (size_t p = 0; p < (size_t)n * cc; p++) {
        const float mu = kt_uniform(-2.0f, 2.0f), sd = kt_uniform(0.2f, 3.0f);
        for (int j = 0; j < hw; j++)
            x[p * hw + j] = mu + sd * kt_uniform(-1.7f, 1.7f);
    }
    float *const r = rnd(cnt, -4.0f, 4.0f), *const gamma = rnd(cc, 0.5f, 1.5f);
    float *const beta = rnd(cc, -0.5f, 0.5f), *const rm0 = rnd(cc, -0.3f, 0.3f);
    float *const rv0 = rnd(cc, 0.5f, 2.0f);
    /* r in its wide layout (gaps random: they must not be read into y either way) */
    float *const rw = rnd((size_t)n * rsn, -9.0f, 9.0f);
    for (int i = 0; i < n; i++)
        memcpy(rw + i * rsn + roff, r + i * plane, plane * sizeof(float));
    double *const sums = malloc(KERN_BN_SUMS_LEN(c) * sizeof(double));
    float *const y = kt_alloc(cnt), *const sm = kt_alloc(cc), *const si = kt_alloc(cc);
    float *const rm = kt_alloc(cc), *const rv = kt_alloc(cc);
    float *const yw = kt_alloc((size_t)n * ysn), *const yg = kt_alloc(cnt);
    float *const yc = kt_alloc(cnt), *const h_sm = kt_alloc(cc), *const h_si = kt_alloc(cc);
    float *const h_rm = kt_alloc(cc), *const h_rv = kt_alloc(cc);
    if (!sums) exit(99);
    CK(kern_ref_bn_stats(g_cpu, &dense, sums, x));

    struct dev D = { d_up(x, cnt),
                     d_up(rw, (size_t)n * rsn),
                     d_up(gamma, cc),
                     d_up(beta, cc),
                     NULL,
                     NULL,
                     NULL,
                     NULL,
                     kct_up(sums, KERN_BN_SUMS_LEN(c) * sizeof(double)) };
    float *const r_dense = d_up(r, cnt);
    for (int mode = M_TRAIN; mode <= M_APPLY; mode++) {
        memcpy(rm, rm0, cc * sizeof(float)), memcpy(rv, rv0, cc * sizeof(float));
        kt_poison(y, cnt), kt_poison(sm, cc), kt_poison(si, cc);
        D.rm = d_up(rm0, cc), D.rv = d_up(rv0, cc), D.sm = d_canary(cc), D.si = d_canary(cc);
        float *const y_d = d_canary((size_t)n * ysn);
        int rc;
        if (mode == M_TRAIN) {
            CK(kern_ref_bn_silu_add_fwd_train(g_cpu, &dense, y, sm, si, rm, rv, x, gamma, beta, r));
            rc = kern_cuda_bn_silu_add_fwd_train(g_gpu, &d, y_d + yoff, D.sm, D.si, D.rm, D.rv, D.x,
                                                 D.g, D.b, D.r + roff);
        } else if (mode == M_EVAL) {
            CK(kern_ref_bn_silu_add_fwd_eval(g_cpu, &dense, y, x, gamma, beta, rm, rv, r));
            rc = kern_cuda_bn_silu_add_fwd_eval(g_gpu, &d, y_d + yoff, D.x, D.g, D.b, D.rm, D.rv,
                                                D.r + roff);
        } else {
            CK(kern_ref_bn_silu_add_fwd_apply(g_cpu, &dense, y, sm, si, rm, rv, x, gamma, beta,
                                              sums, r));
            rc = kern_cuda_bn_silu_add_fwd_apply(g_gpu, &d, y_d + yoff, D.sm, D.si, D.rm, D.rv, D.x,
                                                 D.g, D.b, D.sums, D.r + roff);
        }
        ok(rc == 0, "%s: kern_cuda_bn_silu_add_fwd_%s returns 0", mode_name[mode], mode_name[mode]);
        d_down(yw, y_d, (size_t)n * ysn);
        size_t gaps_bad = 0;
        for (int i = 0; i < n; i++) {
            memcpy(yg + i * plane, yw + i * ysn + yoff, plane * sizeof(float));
            for (size_t k = 0; k < ysn; k++)
                gaps_bad += (k < yoff || k >= yoff + plane) && !kt_is_canary(yw[i * ysn + k]);
        }
        char what[96];
        snprintf(what, sizeof what, "%s y vs the CPU", mode_name[mode]);
        kt_check_close_f(what, yg, y, cnt, 1e-5, 1e-4);
        ok(gaps_bad == 0, "%s: channels outside y's slice untouched (%zu changed)", mode_name[mode],
           gaps_bad);
        d_down(h_rm, D.rm, cc), d_down(h_rv, D.rv, cc);
        snprintf(what, sizeof what, "%s running_mean", mode_name[mode]);
        kt_check_close_f(what, h_rm, rm, cc, 1e-6, 1e-5);
        snprintf(what, sizeof what, "%s running_var", mode_name[mode]);
        kt_check_close_f(what, h_rv, rv, cc, 1e-6, 1e-5);
        if (mode != M_EVAL) {
            d_down(h_sm, D.sm, cc), d_down(h_si, D.si, cc);
            snprintf(what, sizeof what, "%s save_mean", mode_name[mode]);
            kt_check_close_f(what, h_sm, sm, cc, 1e-6, 1e-5);
            snprintf(what, sizeof what, "%s save_invstd", mode_name[mode]);
            kt_check_close_f(what, h_si, si, cc, 1e-6, 1e-5);
        }

        /* The CUDA composition it replaces, dense, from the same inputs: bit for bit. */
        float *const rm2 = d_up(rm0, cc), *const rv2 = d_up(rv0, cc), *const u_d = d_canary(cnt);
        if (mode == M_TRAIN)
            CK(kern_cuda_bn_silu_fwd_train(g_gpu, &dense, u_d, D.sm, D.si, rm2, rv2, D.x, D.g,
                                           D.b));
        else if (mode == M_EVAL)
            CK(kern_cuda_bn_silu_fwd_eval(g_gpu, &dense, u_d, D.x, D.g, D.b, rm2, rv2));
        else
            CK(kern_cuda_bn_silu_fwd_apply(g_gpu, &dense, u_d, D.sm, D.si, rm2, rv2, D.x, D.g, D.b,
                                           D.sums));
        CK(kern_cuda_add_fwd(g_gpu, u_d, u_d, r_dense, cnt));
        d_down(yc, u_d, cnt);
        ok(memcmp(yc, yg, cnt * sizeof(float)) == 0,
           "%s: bit for bit kern_cuda_bn_silu_fwd_%s then kern_cuda_add_fwd", mode_name[mode],
           mode_name[mode]);
        cudaFree(rm2), cudaFree(rv2), cudaFree(u_d), cudaFree(y_d);
        cudaFree(D.rm), cudaFree(D.rv), cudaFree(D.sm), cudaFree(D.si);
    }
    cudaFree(D.x), cudaFree(D.r), cudaFree(D.g), cudaFree(D.b), cudaFree(D.sums);
    cudaFree(r_dense);
    free(x), free(r), free(gamma), free(beta), free(rm0), free(rv0), free(rw), free(sums);
    free(y), free(sm), free(si), free(rm), free(rv), free(yw), free(yg), free(yc);
    free(h_sm), free(h_si), free(h_rm), free(h_rv);
}

static void test_errors(void)
{
    struct kern_bn d;
    kern_bn_init(&d, 2, 4, 9);
    const size_t cnt = 2 * 4 * 9;
    float *const y = d_canary(cnt), *const x = d_canary(cnt), *const r = d_canary(cnt);
    float *const v = d_canary(4 * 4);
    d.r_nstride = cnt / 2 - 1;
    is_int(kern_cuda_bn_silu_add_fwd_eval(g_gpu, &d, y, x, v, v + 4, v + 8, v + 12, r), -EINVAL,
           "r_nstride below c hw");
    d.r_nstride = 0;
    is_int(kern_cuda_bn_silu_add_fwd_eval(g_gpu, &d, y, x, v, v + 4, v + 8, v + 12, NULL), -EINVAL,
           "NULL r");
    is_int(kern_cuda_bn_silu_add_fwd_train(g_cpu, &d, y, NULL, NULL, NULL, NULL, x, v, v + 4, r),
           -KERN_EBACKEND, "a CPU context");
    float *const h = kt_alloc(cnt);
    d_down(h, y, cnt);
    ok(kt_count_nonfinite(h, cnt) == cnt, "nothing written on an error");
    const struct kern_ops *K = kern_ops_cuda();
    ok(K && K->bn_silu_add_fwd_train == kern_cuda_bn_silu_add_fwd_train &&
           K->bn_silu_add_fwd_eval == kern_cuda_bn_silu_add_fwd_eval &&
           K->bn_silu_add_fwd_apply == kern_cuda_bn_silu_add_fwd_apply,
       "the CUDA table holds the three ops in their slots");
    free(h);
    cudaFree(y), cudaFree(x), cudaFree(r), cudaFree(v);
}

/*
 * The fused conv + BN + SiLU (+ r) of inference: kern_cuda_conv2d_bn_silu_fwd_eval against the
 * CPU's (which runs it in bands, fused) within the conv's tolerance (test_cuda_parity.c: cuDNN
 * and OpenBLAS sum in other orders) and the BN+SiLU's, and bit for bit against its own unfused
 * composition on the GPU (cuDNN's forward, then the BN op), which it is.
 */
static void test_conv_bn(int n, int c_in, int h, int w, int c_out, int k, int st, int pd,
                         int residual)
{
    struct kern_conv2d cd;
    kern_conv2d_init(&cd, n, c_in, h, w, c_out, k, st, pd);
    int oh = 0, ow = 0;
    kern_conv2d_out_hw(&cd, &oh, &ow);
    const size_t hw = (size_t)oh * (size_t)ow, cnt = (size_t)n * c_out * hw;
    const size_t nx = (size_t)n * c_in * h * w, nw = (size_t)c_out * c_in * k * k;
    size_t ws_ref = 0, ws_gpu = 0;
    CK(kern_ref_conv2d_workspace_size(g_cpu, &cd, &ws_ref));
    CK(kern_cuda_conv2d_workspace_size(g_gpu, &cd, &ws_gpu));
    CK(kern_ctx_reserve(g_cpu, ws_ref));
    CK(kern_ctx_reserve(g_gpu, ws_gpu));
    float *const x = rnd(nx, -1.0f, 1.0f), *const wt = rnd(nw, -0.5f, 0.5f);
    float *const g = rnd((size_t)c_out, 0.5f, 1.5f), *const b = rnd((size_t)c_out, -0.5f, 0.5f);
    float *const rm = rnd((size_t)c_out, -0.3f, 0.3f), *const rv = rnd((size_t)c_out, 0.5f, 2.0f);
    float *const r = rnd(cnt, -4.0f, 4.0f), *const y = kt_alloc(cnt), *const tmp = kt_alloc(cnt);
    float *const yg = kt_alloc(cnt), *const yu = kt_alloc(cnt);
    struct kern_bn d;
    kern_bn_init(&d, n, c_out, (int)hw);
    CK(kern_ref_conv2d_bn_silu_fwd_eval(g_cpu, &cd, &d, y, tmp, x, wt, g, b, rm, rv,
                                        residual ? r : NULL));
    float *const x_d = d_up(x, nx), *const w_d = d_up(wt, nw), *const g_d = d_up(g, c_out);
    float *const b_d = d_up(b, c_out), *const rm_d = d_up(rm, c_out), *const rv_d = d_up(rv, c_out);
    float *const r_d = d_up(r, cnt), *const y_d = d_canary(cnt), *const t_d = d_canary(cnt);
    float *const u_d = d_canary(cnt), *const t2_d = d_canary(cnt);
    CK(kern_cuda_conv2d_bn_silu_fwd_eval(g_gpu, &cd, &d, y_d, t_d, x_d, w_d, g_d, b_d, rm_d, rv_d,
                                         residual ? r_d : NULL));
    CK(kern_cuda_conv2d_fwd(g_gpu, &cd, t2_d, x_d, w_d, NULL));
    if (residual)
        CK(kern_cuda_bn_silu_add_fwd_eval(g_gpu, &d, u_d, t2_d, g_d, b_d, rm_d, rv_d, r_d));
    else
        CK(kern_cuda_bn_silu_fwd_eval(g_gpu, &d, u_d, t2_d, g_d, b_d, rm_d, rv_d));
    d_down(yg, y_d, cnt);
    d_down(yu, u_d, cnt);
    /* the conv's error, scaled by the BN's gain (at most 1.5 / sqrt(0.5)) and SiLU' (<= 1.1) */
    ok(kt_check_close_f("conv+bn+silu y", yg, y, cnt, 4e-5 * sqrt((double)c_in * k * k), 2e-4),
       "conv %dx%d s%d %d->%d%s: CUDA fused within tolerance of the CPU's", k, k, st, c_in, c_out,
       residual ? " +r" : "");
    ok(memcmp(yg, yu, cnt * sizeof(float)) == 0,
       "conv %dx%d s%d %d->%d%s: CUDA fused equals its unfused composition bit for bit", k, k, st,
       c_in, c_out, residual ? " +r" : "");
    cudaFree(x_d), cudaFree(w_d), cudaFree(g_d), cudaFree(b_d), cudaFree(rm_d), cudaFree(rv_d);
    cudaFree(r_d), cudaFree(y_d), cudaFree(t_d), cudaFree(u_d), cudaFree(t2_d);
    free(x), free(wt), free(g), free(b), free(rm), free(rv), free(r), free(y), free(tmp);
    free(yg), free(yu);
}

void parity_resadd(int bench)
{
    (void)bench; /* no benchmark in this suite */
    /* YOLOv5s bottleneck planes at 640 (batch 2) and smaller / odd ones */
    test_case(2, 32, 160, 160, 0);
    test_case(2, 64, 80, 80, 1);
    test_case(3, 128, 40, 40, 1);
    test_case(4, 256, 20, 20, 0);
    test_case(1, 24, 33, 31, 1);
    test_case(5, 3, 2, 2, 1);
    test_errors();
    test_conv_bn(2, 16, 40, 40, 16, 3, 1, 1, 1);
    test_conv_bn(1, 16, 160, 160, 16, 1, 1, 0, 0);
    test_conv_bn(2, 16, 160, 160, 32, 3, 2, 1, 0);
    test_conv_bn(1, 3, 320, 320, 16, 6, 2, 2, 0);
}
