/*
 * CUDA parity (style guide rule 25): every kern_cuda_* op against its kern_ref_* twin on the
 * same random inputs (fresh draws each run; the seed is printed, --seed N replays it), with
 * every output poisoned first (NaN canaries on both sides) and, for accumulating variants,
 * pre-filled with the same random values. A point passes when |gpu - ref| <= atol + rtol |ref|
 * everywhere; the maximum error and the first mismatches are printed.
 *
 * Tolerances (fp32), and why:
 *   exact (0, 0): copies, permutes, max pool, upsample, add, concat: same operations in the same
 *     order as the reference (the backward gathers in the reference's order), so bitwise.
 *   SiLU, detect decode: 1e-6 abs + 1e-5 rel: CUDA's expf/log1pf are within 2 ulp of glibc's.
 *   BN forward: 1e-5 + 1e-4 rel: variance as E[x^2] - mean^2 in double (reference: two passes),
 *     and FMA contraction in x a + b.
 *   BN backward: dx 2e-5 + 1e-4 rel, dgamma/dbeta 1e-4 + 1e-4 rel (double sums in another order).
 *   BCE: loss 1e-6 rel; dx 1e-9 + 1e-5 rel (its values are ~1 / (rows cols)).
 *   CIoU: forward 1e-6 + 1e-5 rel; backward 1e-5 + 1e-4 rel (atanf, divisions, contraction).
 *   conv2d (cuDNN, FMA math, no TF32): 1e-4 abs per sqrt(terms) + 1e-4 rel: sums of k_h k_w c_in
 *     (forward, backward data) or n h w (backward filter) products in another order.
 * Exits 77 with "# SKIP no CUDA device" when the build has CUDA but no device is visible.
 * --bench: times the main ops at YOLOv5s shapes (cudaEvent, 20 runs after 3 warm-ups), prints
 * ms, GB/s and TFLOP/s; no assertions on speed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_cuda_internal.h"
#include "kern_testutil.h"
#include "tap.h"
#include "cuda_testutil.h"
#include "parity.h"

/* Device copy of host h[0..n). */
static float *d_up(const float *h, size_t n)
{
    return kct_up(h, n * sizeof(float));
}

/* Device buffer of n canaries; the host twin h (if given) is poisoned too. */
static float *d_canary(float *h, size_t n)
{
    float *const tmp = kt_alloc(n);
    kt_poison(tmp, n);
    if (h) kt_poison(h, n);
    float *const d = d_up(tmp, n);
    free(tmp);
    return d;
}

/* Waits for the GPU context, then copies d[0..n) to h. */
static void d_down(float *h, const float *d, size_t n)
{
    kct_down(h, d, n * sizeof(float));
}

/* Copies the device result d[0..n) back and compares it with ref. */
static int cmp(const char *what, const float *d, const float *ref, size_t n, double atol,
               double rtol)
{
    float *const got = kt_alloc(n);
    d_down(got, d, n);
    const int r = kt_check_close_f(what, got, ref, n, atol, rtol);
    free(got);
    return r;
}

static float *rnd(size_t n, float lo, float hi)
{
    float *const p = kt_alloc(n);
    kt_fill(p, n, lo, hi);
    return p;
}

/*
 * cmp where the reference may be NaN: the device must be NaN at exactly those elements, and
 * within tolerance everywhere else. Two TAP points; returns how many NaNs the reference has.
 */
static size_t cmp_nan(const char *what, const float *d, const float *ref, size_t n, double atol,
                      double rtol)
{
    float *const got = kt_alloc(n), *const want = kt_alloc(n);
    d_down(got, d, n);
    size_t nan_ref = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        want[i] = ref[i];
        if (isnan(ref[i]) || isnan(got[i])) {
            nan_ref += isnan(ref[i]) != 0;
            if (isnan(ref[i]) != isnan(got[i])) {
                if (differ++ < 4)
                    tap_diag("%s[%zu]: got %.9g want %.9g", what, i, (double)got[i],
                             (double)ref[i]);
            } else {
                got[i] = want[i] = 0.0f;
            }
        }
    }
    ok(differ == 0, "%s: NaN exactly where the reference has one (%zu of %zu, %zu differ)", what,
       nan_ref, n, differ);
    kt_check_close_f(what, got, want, n, atol, rtol);
    free(got), free(want);
    return nan_ref;
}

/* ---- SiLU ---- */

static void test_silu(void)
{
    const size_t n = (size_t)kt_randint(1, 50000);
    float *const x = rnd(n, -8.0f, 8.0f), *const dy = rnd(n, -1.0f, 1.0f);
    float *const y = kt_alloc(n), *const dx = rnd(n, -1.0f, 1.0f);
    float *const dx_d = d_up(dx, n), *const x_d = d_up(x, n), *const dy_d = d_up(dy, n);
    float *const y_d = d_canary(y, n);
    tap_diag("silu: %zu elements", n);
    CK(kern_ref_silu_fwd(g_cpu, y, x, n));
    CK(kern_cuda_silu_fwd(g_gpu, y_d, x_d, n));
    cmp("silu_fwd y", y_d, y, n, 1e-6, 1e-5);
    CK(kern_ref_silu_bwd(g_cpu, dx, dy, x, n, KERN_ACCUM_DX));
    CK(kern_cuda_silu_bwd(g_gpu, dx_d, dy_d, x_d, n, KERN_ACCUM_DX));
    cmp("silu_bwd dx (+=)", dx_d, dx, n, 1e-6, 1e-5);
    float *const dx2_d = d_canary(dx, n);
    CK(kern_ref_silu_bwd(g_cpu, dx, dy, x, n, 0));
    CK(kern_cuda_silu_bwd(g_gpu, dx2_d, dy_d, x_d, n, 0));
    cmp("silu_bwd dx (=)", dx2_d, dx, n, 1e-6, 1e-5);
    cudaFree(dx2_d), cudaFree(dx_d), cudaFree(x_d), cudaFree(dy_d), cudaFree(y_d);
    free(x), free(dy), free(y), free(dx);
}

/* ---- BN and BN+SiLU, training and eval, forward and backward ---- */

static void test_bn(int silu, int n, int c, int hw, unsigned accum)
{
    struct kern_bn d;
    kern_bn_init(&d, n, c, hw);
    const size_t cnt = (size_t)n * c * hw, cc = (size_t)c;
    const char *const nm = silu ? "bn_silu" : "bn";
    tap_diag("%s: n %d c %d hw %d accum %u", nm, n, c, hw, accum);
    float *const x = rnd(cnt, -3.0f, 5.0f), *const dy = rnd(cnt, -1.0f, 1.0f);
    float *const gamma = rnd(cc, 0.5f, 1.5f), *const beta = rnd(cc, -0.5f, 0.5f);
    float *const rm = rnd(cc, -0.2f, 0.2f), *const rv = rnd(cc, 0.5f, 2.0f);
    float *const y = kt_alloc(cnt), *const sm = kt_alloc(cc), *const si = kt_alloc(cc);
    float *const dx = rnd(cnt, -1.0f, 1.0f), *const dg = rnd(cc, -1.0f, 1.0f);
    float *const db = rnd(cc, -1.0f, 1.0f);
    float *const x_d = d_up(x, cnt), *const dy_d = d_up(dy, cnt), *const g_d = d_up(gamma, cc);
    float *const b_d = d_up(beta, cc), *const rm_d = d_up(rm, cc), *const rv_d = d_up(rv, cc);
    float *const y_d = d_canary(y, cnt), *const sm_d = d_canary(sm, cc);
    float *const si_d = d_canary(si, cc);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(dx, cnt);
    if (!(accum & KERN_ACCUM_DPARAM)) kt_poison(dg, cc), kt_poison(db, cc);
    float *const dx_d = d_up(dx, cnt), *const dg_d = d_up(dg, cc), *const db_d = d_up(db, cc);
    char what[96];

    if (silu) {
        CK(kern_ref_bn_silu_fwd_train(g_cpu, &d, y, sm, si, rm, rv, x, gamma, beta));
        CK(kern_cuda_bn_silu_fwd_train(g_gpu, &d, y_d, sm_d, si_d, rm_d, rv_d, x_d, g_d, b_d));
    } else {
        CK(kern_ref_bn_fwd_train(g_cpu, &d, y, sm, si, rm, rv, x, gamma, beta));
        CK(kern_cuda_bn_fwd_train(g_gpu, &d, y_d, sm_d, si_d, rm_d, rv_d, x_d, g_d, b_d));
    }
    snprintf(what, sizeof(what), "%s_fwd_train y", nm);
    cmp(what, y_d, y, cnt, 1e-5, 1e-4);
    snprintf(what, sizeof(what), "%s_fwd_train save_mean", nm);
    cmp(what, sm_d, sm, cc, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "%s_fwd_train save_invstd", nm);
    cmp(what, si_d, si, cc, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "%s_fwd_train running_mean", nm);
    cmp(what, rm_d, rm, cc, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "%s_fwd_train running_var", nm);
    cmp(what, rv_d, rv, cc, 1e-6, 1e-5);

    /* Backward from the reference's saved stats (uploaded, so both sides use the same). */
    float *const sm2_d = d_up(sm, cc), *const si2_d = d_up(si, cc);
    if (silu) {
        CK(kern_ref_bn_silu_bwd(g_cpu, &d, dx, dg, db, dy, x, gamma, beta, sm, si, accum));
        CK(kern_cuda_bn_silu_bwd(g_gpu, &d, dx_d, dg_d, db_d, dy_d, x_d, g_d, b_d, sm2_d, si2_d,
                                 accum));
    } else {
        CK(kern_ref_bn_bwd(g_cpu, &d, dx, dg, db, dy, x, gamma, sm, si, accum));
        CK(kern_cuda_bn_bwd(g_gpu, &d, dx_d, dg_d, db_d, dy_d, x_d, g_d, sm2_d, si2_d, accum));
    }
    snprintf(what, sizeof(what), "%s_bwd dx", nm);
    cmp(what, dx_d, dx, cnt, 2e-5, 1e-4);
    snprintf(what, sizeof(what), "%s_bwd dgamma", nm);
    cmp(what, dg_d, dg, cc, 1e-4, 1e-4);
    snprintf(what, sizeof(what), "%s_bwd dbeta", nm);
    cmp(what, db_d, db, cc, 1e-4, 1e-4);

    /* Eval with the updated running stats. */
    float *const y2_d = d_canary(y, cnt);
    if (silu) {
        CK(kern_ref_bn_silu_fwd_eval(g_cpu, &d, y, x, gamma, beta, rm, rv));
        CK(kern_cuda_bn_silu_fwd_eval(g_gpu, &d, y2_d, x_d, g_d, b_d, rm_d, rv_d));
    } else {
        CK(kern_ref_bn_fwd_eval(g_cpu, &d, y, x, gamma, beta, rm, rv));
        CK(kern_cuda_bn_fwd_eval(g_gpu, &d, y2_d, x_d, g_d, b_d, rm_d, rv_d));
    }
    snprintf(what, sizeof(what), "%s_fwd_eval y", nm);
    cmp(what, y2_d, y, cnt, 1e-5, 1e-4);

    float *const frees_d[] = { x_d,  dy_d, g_d,  b_d,  rm_d,  rv_d,  y_d, sm_d,
                               si_d, dx_d, dg_d, db_d, sm2_d, si2_d, y2_d };
    for (size_t i = 0; i < sizeof(frees_d) / sizeof(frees_d[0]); i++)
        cudaFree(frees_d[i]);
    float *const frees[] = { x, dy, gamma, beta, rm, rv, y, sm, si, dx, dg, db };
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++)
        free(frees[i]);
}

/* ---- batch norm in phases (SyncBatchNorm): kern_cuda_bn_stats and friends ---- */

/* Device copy of host doubles h[0..n). */
static double *d_up_f64(const double *h, size_t n)
{
    return kct_up(h, n * sizeof(double));
}

/* The device sums d[0..n) against the reference's: |gpu - ref| <= atol + rtol |ref|. */
static void cmp_f64(const char *what, const double *d, const double *ref, size_t n, double atol,
                    double rtol)
{
    double *const got = malloc(n * sizeof(double));
    if (!got || kern_cuda_ctx_sync(g_gpu) < 0 ||
        cudaMemcpy(got, d, n * sizeof(double), cudaMemcpyDeviceToHost) != cudaSuccess) {
        printf("Bail out! copying sums back\n");
        exit(99);
    }
    double worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs(got[i] - ref[i]);
        if (!(e <= atol + rtol * fabs(ref[i]))) {
            if (bad++ < 4) printf("#   %s[%zu]: got %.17g want %.17g\n", what, i, got[i], ref[i]);
        }
        if (!(e <= worst)) worst = e;
    }
    ok(bad == 0, "%s: %zu sums, atol %.1e rtol %.1e (max abs err %.3g)", what, n, atol, rtol,
       worst);
    free(got);
}

/*
 * Each phase on both backends from the same inputs; the apply phases take the reference's sums
 * (uploaded) so that every phase is compared on its own. Tolerances as test_bn; the sums differ
 * by the reference's float chunk sums (the GPU adds every element in double; forward: x^2 per
 * element on the GPU, M2 + N mean^2 on the CPU), so the forward's get 1e-5 of N.
 */
static void test_bn_sync(int silu, int n, int c, int hw, unsigned accum)
{
    struct kern_bn d;
    kern_bn_init(&d, n, c, hw);
    const size_t cnt = (size_t)n * c * hw, cc = (size_t)c, ns = KERN_BN_SUMS_LEN(c);
    const char *const nm = silu ? "bn_silu" : "bn";
    tap_diag("%s phases: n %d c %d hw %d accum %u", nm, n, c, hw, accum);
    float *const x = rnd(cnt, -3.0f, 5.0f), *const dy = rnd(cnt, -1.0f, 1.0f);
    float *const gamma = rnd(cc, 0.5f, 1.5f), *const beta = rnd(cc, -0.5f, 0.5f);
    float *const rm = rnd(cc, -0.2f, 0.2f), *const rv = rnd(cc, 0.5f, 2.0f);
    float *const y = kt_alloc(cnt), *const sm = kt_alloc(cc), *const si = kt_alloc(cc);
    float *const dx = rnd(cnt, -1.0f, 1.0f), *const dg = rnd(cc, -1.0f, 1.0f);
    float *const db = rnd(cc, -1.0f, 1.0f);
    double *const fs = malloc(ns * sizeof(double)), *const bs = malloc(ns * sizeof(double));
    if (!fs || !bs) exit(99);
    float *const x_d = d_up(x, cnt), *const dy_d = d_up(dy, cnt), *const g_d = d_up(gamma, cc);
    float *const b_d = d_up(beta, cc), *const rm_d = d_up(rm, cc), *const rv_d = d_up(rv, cc);
    float *const y_d = d_canary(y, cnt), *const sm_d = d_canary(sm, cc);
    float *const si_d = d_canary(si, cc);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(dx, cnt);
    if (!(accum & KERN_ACCUM_DPARAM)) kt_poison(dg, cc), kt_poison(db, cc);
    float *const dx_d = d_up(dx, cnt), *const dg_d = d_up(dg, cc), *const db_d = d_up(db, cc);
    double *const fs_d = kct_alloc(ns * sizeof(double)), *const bs_d =
                                                             kct_alloc(ns * sizeof(double));
    char what[96];

    CK(kern_ref_bn_stats(g_cpu, &d, fs, x));
    CK(kern_cuda_bn_stats(g_gpu, &d, fs_d, x_d));
    snprintf(what, sizeof(what), "%s bn_stats sums", nm);
    /* the reference sums each L1 chunk in float lanes: ~1e-6 of the magnitude per sum */
    cmp_f64(what, fs_d, fs, ns, 1e-5 * (double)n * hw, 1e-5);
    double *const fs2_d = d_up_f64(fs, ns);
    if (silu) {
        CK(kern_ref_bn_silu_fwd_apply(g_cpu, &d, y, sm, si, rm, rv, x, gamma, beta, fs));
        CK(kern_cuda_bn_silu_fwd_apply(g_gpu, &d, y_d, sm_d, si_d, rm_d, rv_d, x_d, g_d, b_d,
                                       fs2_d));
    } else {
        CK(kern_ref_bn_fwd_apply(g_cpu, &d, y, sm, si, rm, rv, x, gamma, beta, fs));
        CK(kern_cuda_bn_fwd_apply(g_gpu, &d, y_d, sm_d, si_d, rm_d, rv_d, x_d, g_d, b_d, fs2_d));
    }
    snprintf(what, sizeof(what), "%s_fwd_apply y", nm);
    cmp(what, y_d, y, cnt, 1e-5, 1e-4);
    snprintf(what, sizeof(what), "%s_fwd_apply save_mean", nm);
    cmp(what, sm_d, sm, cc, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "%s_fwd_apply save_invstd", nm);
    cmp(what, si_d, si, cc, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "%s_fwd_apply running_mean", nm);
    cmp(what, rm_d, rm, cc, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "%s_fwd_apply running_var", nm);
    cmp(what, rv_d, rv, cc, 1e-6, 1e-5);

    float *const sm2_d = d_up(sm, cc), *const si2_d = d_up(si, cc);
    if (silu) {
        CK(kern_ref_bn_silu_bwd_reduce(g_cpu, &d, bs, dg, db, dy, x, gamma, beta, sm, si, accum));
        CK(kern_cuda_bn_silu_bwd_reduce(g_gpu, &d, bs_d, dg_d, db_d, dy_d, x_d, g_d, b_d, sm2_d,
                                        si2_d, accum));
    } else {
        CK(kern_ref_bn_bwd_reduce(g_cpu, &d, bs, dg, db, dy, x, gamma, beta, sm, si, accum));
        CK(kern_cuda_bn_bwd_reduce(g_gpu, &d, bs_d, dg_d, db_d, dy_d, x_d, g_d, b_d, sm2_d, si2_d,
                                   accum));
    }
    snprintf(what, sizeof(what), "%s_bwd_reduce sums", nm);
    cmp_f64(what, bs_d, bs, ns, 1e-4, 1e-4); /* as test_bn's dgamma, dbeta */
    snprintf(what, sizeof(what), "%s_bwd_reduce dgamma", nm);
    cmp(what, dg_d, dg, cc, 1e-4, 1e-4);
    snprintf(what, sizeof(what), "%s_bwd_reduce dbeta", nm);
    cmp(what, db_d, db, cc, 1e-4, 1e-4);
    double *const bs2_d = d_up_f64(bs, ns);
    if (silu) {
        CK(kern_ref_bn_silu_bwd_apply(g_cpu, &d, dx, dy, x, gamma, beta, sm, si, bs, accum));
        CK(kern_cuda_bn_silu_bwd_apply(g_gpu, &d, dx_d, dy_d, x_d, g_d, b_d, sm2_d, si2_d, bs2_d,
                                       accum));
    } else {
        CK(kern_ref_bn_bwd_apply(g_cpu, &d, dx, dy, x, gamma, beta, sm, si, bs, accum));
        CK(kern_cuda_bn_bwd_apply(g_gpu, &d, dx_d, dy_d, x_d, g_d, b_d, sm2_d, si2_d, bs2_d,
                                  accum));
    }
    snprintf(what, sizeof(what), "%s_bwd_apply dx", nm);
    cmp(what, dx_d, dx, cnt, 2e-5, 1e-4);
    const struct kern_ops *const K = kern_ops_cuda();
    ok(K && K->bn_stats == kern_cuda_bn_stats &&
           K->bn_silu_bwd_apply == kern_cuda_bn_silu_bwd_apply,
       "kern_ops_cuda() carries the phases");

    void *const frees_d[] = { x_d,  dy_d, g_d,  b_d,  rm_d, rv_d,  y_d,   sm_d,  si_d,
                              dx_d, dg_d, db_d, fs_d, bs_d, fs2_d, sm2_d, si2_d, bs2_d };
    for (size_t i = 0; i < sizeof(frees_d) / sizeof(frees_d[0]); i++)
        cudaFree(frees_d[i]);
    void *const frees[] = { x, dy, gamma, beta, rm, rv, y, sm, si, dx, dg, db, fs, bs };
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++)
        free(frees[i]);
}

/* ---- max pool, upsample ---- */

static void test_maxpool(int n, int c, int h, int w, int k, int s, int p, unsigned accum)
{
    const struct kern_pool2d d = { n, c, h, w, k, s, p, 0, 0 };
    int oh, ow;
    if (kern_pool2d_out_hw(&d, &oh, &ow) < 0) {
        ok(0, "maxpool shape");
        return;
    }
    tap_diag("maxpool: n %d c %d %dx%d k %d s %d p %d accum %u", n, c, h, w, k, s, p, accum);
    const size_t ni = (size_t)n * c * h * w, no = (size_t)n * c * oh * ow;
    float *const x = rnd(ni, -2.0f, 2.0f), *const dy = rnd(no, -1.0f, 1.0f);
    /* A few exact ties, so the first-maximum rule is exercised. */
    for (size_t i = 0; i + 1 < ni; i += 7)
        x[i + 1] = x[i];
    float *const y = kt_alloc(no), *const dx = rnd(ni, -1.0f, 1.0f);
    int32_t *const idx = malloc(no * sizeof(int32_t));
    int32_t *const idx_g = malloc(no * sizeof(int32_t));
    if (!idx || !idx_g) exit(99);
    float *const x_d = d_up(x, ni), *const dy_d = d_up(dy, no), *const y_d = d_canary(y, no);
    int32_t *const idx_d = kct_alloc(no * sizeof(int32_t));
    cudaMemset(idx_d, 0xff, no * sizeof(int32_t));
    CK(kern_ref_maxpool2d_fwd(g_cpu, &d, y, idx, x));
    CK(kern_cuda_maxpool2d_fwd(g_gpu, &d, y_d, idx_d, x_d));
    cmp("maxpool2d_fwd y", y_d, y, no, 0.0, 0.0);
    kern_cuda_ctx_sync(g_gpu);
    cudaMemcpy(idx_g, idx_d, no * sizeof(int32_t), cudaMemcpyDeviceToHost);
    size_t bad = 0;
    for (size_t i = 0; i < no; i++)
        bad += idx_g[i] != idx[i];
    ok(bad == 0, "maxpool2d_fwd idx: %zu of %zu differ", bad, no);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(dx, ni);
    float *const dx_d = d_up(dx, ni);
    CK(kern_ref_maxpool2d_bwd(g_cpu, &d, dx, dy, idx, accum));
    CK(kern_cuda_maxpool2d_bwd(g_gpu, &d, dx_d, dy_d, idx_d, accum));
    cmp(accum ? "maxpool2d_bwd dx (+=)" : "maxpool2d_bwd dx (=)", dx_d, dx, ni, 0.0, 0.0);
    cudaFree(x_d), cudaFree(dy_d), cudaFree(y_d), cudaFree(idx_d), cudaFree(dx_d);
    free(x), free(dy), free(y), free(dx), free(idx), free(idx_g);
}

static void test_upsample(int planes, int h, int w, unsigned accum)
{
    tap_diag("upsample2x: planes %d %dx%d accum %u", planes, h, w, accum);
    const size_t ni = (size_t)planes * h * w, no = 4 * ni;
    float *const x = rnd(ni, -2.0f, 2.0f), *const dy = rnd(no, -1.0f, 1.0f);
    float *const y = kt_alloc(no), *const dx = rnd(ni, -1.0f, 1.0f);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(dx, ni);
    float *const x_d = d_up(x, ni), *const dy_d = d_up(dy, no), *const y_d = d_canary(y, no);
    float *const dx_d = d_up(dx, ni);
    CK(kern_ref_upsample2x_fwd(g_cpu, y, x, planes, h, w));
    CK(kern_cuda_upsample2x_fwd(g_gpu, y_d, x_d, planes, h, w));
    cmp("upsample2x_fwd y", y_d, y, no, 0.0, 0.0);
    CK(kern_ref_upsample2x_bwd(g_cpu, dx, dy, planes, h, w, accum));
    CK(kern_cuda_upsample2x_bwd(g_gpu, dx_d, dy_d, planes, h, w, accum));
    cmp(accum ? "upsample2x_bwd dx (+=)" : "upsample2x_bwd dx (=)", dx_d, dx, ni, 0.0, 0.0);
    cudaFree(x_d), cudaFree(dy_d), cudaFree(y_d), cudaFree(dx_d);
    free(x), free(dy), free(y), free(dx);
}

/* ---- the stem as space-to-depth: copies, so bit for bit ---- */

static void test_s2d(int layout, unsigned accum)
{
    const struct kern_s2d d = { kt_randint(1, 3),      3,  2 * kt_randint(1, 20),
                                2 * kt_randint(1, 20), 16, layout };
    const int k_out = 16;
    tap_diag("s2d: n %d %dx%d %s accum %u", d.n, d.h, d.w, layout ? "nhwc" : "nchw", accum);
    const size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = nx / 3 * 4;
    const size_t n6 = (size_t)k_out * 3 * 36, n3 = (size_t)k_out * 16 * 9;
    float *const x = rnd(nx, -2.0f, 2.0f), *const dy = rnd(ny, -1.0f, 1.0f);
    float *const w6 = rnd(n6, -1.0f, 1.0f), *const dw3 = rnd(n3, -1.0f, 1.0f);
    float *const y = kt_alloc(ny), *const w3 = kt_alloc(n3);
    float *const dx = rnd(nx, -1.0f, 1.0f), *const dw6 = rnd(n6, -1.0f, 1.0f);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(dx, nx);
    if (!(accum & KERN_ACCUM_DPARAM)) kt_poison(dw6, n6);
    float *const x_d = d_up(x, nx), *const dy_d = d_up(dy, ny), *const y_d = d_canary(y, ny);
    float *const w6_d = d_up(w6, n6), *const dw3_d = d_up(dw3, n3), *const w3_d = d_canary(w3, n3);
    float *const dx_d = d_up(dx, nx), *const dw6_d = d_up(dw6, n6);
    CK(kern_ref_s2d_fwd(g_cpu, &d, y, x));
    CK(kern_cuda_s2d_fwd(g_gpu, &d, y_d, x_d));
    cmp("s2d_fwd y", y_d, y, ny, 0.0, 0.0);
    CK(kern_ref_s2d_bwd(g_cpu, &d, dx, dy, accum));
    CK(kern_cuda_s2d_bwd(g_gpu, &d, dx_d, dy_d, accum));
    cmp("s2d_bwd dx", dx_d, dx, nx, 0.0, 0.0);
    CK(kern_ref_s2d_weight_fwd(g_cpu, &d, k_out, w3, w6));
    CK(kern_cuda_s2d_weight_fwd(g_gpu, &d, k_out, w3_d, w6_d));
    cmp("s2d_weight_fwd w3", w3_d, w3, n3, 0.0, 0.0);
    CK(kern_ref_s2d_weight_bwd(g_cpu, &d, k_out, dw6, dw3, accum));
    CK(kern_cuda_s2d_weight_bwd(g_gpu, &d, k_out, dw6_d, dw3_d, accum));
    cmp("s2d_weight_bwd dw6", dw6_d, dw6, n6, 0.0, 0.0);
    cudaFree(x_d), cudaFree(dy_d), cudaFree(y_d), cudaFree(w6_d), cudaFree(dw3_d);
    cudaFree(w3_d), cudaFree(dx_d), cudaFree(dw6_d);
    free(x), free(dy), free(w6), free(dw3), free(y), free(w3), free(dx), free(dw6);
}

/* ---- concat, add ---- */

static void test_concat_add(unsigned accum)
{
    const int n = kt_randint(1, 4), hw = kt_randint(1, 700), c_y = kt_randint(2, 48);
    const int c_x = kt_randint(1, c_y - 1), c_off = kt_randint(0, c_y - c_x);
    tap_diag("concat: n %d c_x %d c_y %d c_off %d hw %d accum %u", n, c_x, c_y, c_off, hw, accum);
    const size_t nx = (size_t)n * c_x * hw, ny = (size_t)n * c_y * hw;
    float *const x = rnd(nx, -1.0f, 1.0f), *const y = rnd(ny, -1.0f, 1.0f);
    float *const dy = rnd(ny, -1.0f, 1.0f), *const dx = rnd(nx, -1.0f, 1.0f);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(dx, nx);
    /* y outside the slice keeps its (random) contents on both sides. */
    float *const x_d = d_up(x, nx), *const y_d = d_up(y, ny), *const dy_d = d_up(dy, ny);
    float *const dx_d = d_up(dx, nx);
    CK(kern_ref_concat_fwd(g_cpu, y, x, n, c_x, hw, c_y, c_off));
    CK(kern_cuda_concat_fwd(g_gpu, y_d, x_d, n, c_x, hw, c_y, c_off));
    cmp("concat_fwd y", y_d, y, ny, 0.0, 0.0);
    CK(kern_ref_concat_bwd(g_cpu, dx, dy, n, c_x, hw, c_y, c_off, accum));
    CK(kern_cuda_concat_bwd(g_gpu, dx_d, dy_d, n, c_x, hw, c_y, c_off, accum));
    cmp(accum ? "concat_bwd dx (+=)" : "concat_bwd dx (=)", dx_d, dx, nx, 0.0, 0.0);
    cudaFree(x_d), cudaFree(y_d), cudaFree(dy_d), cudaFree(dx_d);
    free(x), free(y), free(dy), free(dx);

    const size_t cnt = (size_t)kt_randint(1, 100000);
    float *const a = rnd(cnt, -1.0f, 1.0f), *const b = rnd(cnt, -1.0f, 1.0f);
    float *const s = kt_alloc(cnt), *const g = rnd(cnt, -1.0f, 1.0f);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(g, cnt);
    float *const a_d = d_up(a, cnt), *const b_d = d_up(b, cnt), *const s_d = d_canary(s, cnt);
    float *const g_d = d_up(g, cnt);
    CK(kern_ref_add_fwd(g_cpu, s, a, b, cnt));
    CK(kern_cuda_add_fwd(g_gpu, s_d, a_d, b_d, cnt));
    cmp("add_fwd y", s_d, s, cnt, 0.0, 0.0);
    CK(kern_ref_add_fwd(g_cpu, a, a, b, cnt)); /* in place */
    CK(kern_cuda_add_fwd(g_gpu, a_d, a_d, b_d, cnt));
    cmp("add_fwd y == a (in place)", a_d, a, cnt, 0.0, 0.0);
    CK(kern_ref_add_bwd(g_cpu, g, b, cnt, accum));
    CK(kern_cuda_add_bwd(g_gpu, g_d, b_d, cnt, accum));
    cmp(accum ? "add_bwd dx (+=)" : "add_bwd dx (=)", g_d, g, cnt, 0.0, 0.0);
    cudaFree(a_d), cudaFree(b_d), cudaFree(s_d), cudaFree(g_d);
    free(a), free(b), free(s), free(g);
}

/* ---- Detect ---- */

static void test_detect(unsigned accum)
{
    const struct kern_detect d = { kt_randint(1, 3),  3,
                                   kt_randint(5, 85), kt_randint(1, 20),
                                   kt_randint(1, 20), (float)(8 << kt_randint(0, 2)) };
    tap_diag("detect: bs %d na %d no %d %dx%d stride %g accum %u", d.bs, d.na, d.no, d.ny, d.nx,
             (double)d.stride, accum);
    const size_t cnt = (size_t)d.bs * d.na * d.no * d.ny * d.nx;
    float *const raw = rnd(cnt, -4.0f, 4.0f), *const dp = rnd(cnt, -1.0f, 1.0f);
    float *const p = kt_alloc(cnt), *const draw = rnd(cnt, -1.0f, 1.0f);
    float *const anchors = rnd(6, 0.5f, 8.0f);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(draw, cnt);
    float *const raw_d = d_up(raw, cnt), *const dp_d = d_up(dp, cnt), *const p_d = d_canary(p, cnt);
    float *const draw_d = d_up(draw, cnt), *const an_d = d_up(anchors, 6);
    float *const out_d = d_canary(NULL, cnt);
    CK(kern_ref_detect_reshape_fwd(g_cpu, &d, p, raw));
    CK(kern_cuda_detect_reshape_fwd(g_gpu, &d, p_d, raw_d));
    cmp("detect_reshape_fwd p", p_d, p, cnt, 0.0, 0.0);
    CK(kern_ref_detect_reshape_bwd(g_cpu, &d, draw, dp, accum));
    CK(kern_cuda_detect_reshape_bwd(g_gpu, &d, draw_d, dp_d, accum));
    cmp(accum ? "detect_reshape_bwd draw (+=)" : "detect_reshape_bwd draw (=)", draw_d, draw, cnt,
        0.0, 0.0);
    kt_poison(p, cnt);
    CK(kern_ref_detect_decode(g_cpu, &d, p, raw, anchors));
    CK(kern_cuda_detect_decode(g_gpu, &d, out_d, raw_d, an_d));
    cmp("detect_decode out", out_d, p, cnt, 1e-4, 1e-5);
    cudaFree(raw_d), cudaFree(dp_d), cudaFree(p_d), cudaFree(draw_d), cudaFree(an_d);
    cudaFree(out_d);
    free(raw), free(dp), free(p), free(draw), free(anchors);
}

/* ---- losses ---- */

static void test_bce(unsigned accum)
{
    const size_t rows = (size_t)kt_randint(1, 3000), cols = (size_t)kt_randint(1, 80);
    const size_t ldx = cols + (size_t)kt_randint(0, 5), nx = rows * ldx, nt = rows * cols;
    tap_diag("bce: rows %zu cols %zu ldx %zu accum %u", rows, cols, ldx, accum);
    float *const x = rnd(nx, -10.0f, 10.0f), *const t = rnd(nt, 0.0f, 1.0f);
    float *const dx = rnd(nx, -1.0f, 1.0f);
    if (!(accum & KERN_ACCUM_DX)) /* only the block is written: keep the gaps equal */
        for (size_t r = 0; r < rows; r++)
            kt_poison(dx + r * ldx, cols);
    float *const x_d = d_up(x, nx), *const t_d = d_up(t, nt), *const dx_d = d_up(dx, nx);
    float lr = kt_canary(), lg = kt_canary();
    CK(kern_ref_bce_logits_fwd(g_cpu, &lr, x, t, rows, cols, ldx));
    CK(kern_cuda_bce_logits_fwd(g_gpu, &lg, x_d, t_d, rows, cols, ldx));
    kt_check_close_f("bce_logits_fwd loss", &lg, &lr, 1, 1e-7, 1e-6);
    const float dloss = kt_uniform(0.1f, 3.0f);
    CK(kern_ref_bce_logits_bwd(g_cpu, dx, x, t, rows, cols, ldx, dloss, accum));
    CK(kern_cuda_bce_logits_bwd(g_gpu, dx_d, x_d, t_d, rows, cols, ldx, dloss, accum));
    cmp(accum ? "bce_logits_bwd dx (+=)" : "bce_logits_bwd dx (=)", dx_d, dx, nx, 1e-9, 1e-5);
    cudaFree(x_d), cudaFree(t_d), cudaFree(dx_d);
    free(x), free(t), free(dx);
}

static void test_ciou(unsigned accum)
{
    const size_t n = (size_t)kt_randint(1, 5000);
    tap_diag("ciou: %zu pairs accum %u", n, accum);
    float *const b1 = kt_alloc(4 * n), *const b2 = kt_alloc(4 * n);
    for (size_t i = 0; i < n; i++) {
        /* Overlapping, disjoint and identical pairs (ties in min/max). */
        b2[4 * i] = kt_uniform(0.0f, 20.0f), b2[4 * i + 1] = kt_uniform(0.0f, 20.0f);
        b2[4 * i + 2] = kt_uniform(0.5f, 8.0f), b2[4 * i + 3] = kt_uniform(0.5f, 8.0f);
        for (int k = 0; k < 4; k++)
            b1[4 * i + k] = i % 17 == 0 ? b2[4 * i + k]
                                        : b2[4 * i + k] * kt_uniform(0.6f, 1.4f) +
                                              (k < 2 ? kt_uniform(-3.0f, 3.0f) : 0.0f);
    }
    float *const dc = rnd(n, -1.0f, 1.0f), *const c = kt_alloc(n);
    float *const db1 = rnd(4 * n, -1.0f, 1.0f), *const db2 = rnd(4 * n, -1.0f, 1.0f);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(db1, 4 * n), kt_poison(db2, 4 * n);
    float *const b1_d = d_up(b1, 4 * n), *const b2_d = d_up(b2, 4 * n), *const dc_d = d_up(dc, n);
    float *const c_d = d_canary(c, n), *const db1_d = d_up(db1, 4 * n);
    float *const db2_d = d_up(db2, 4 * n);
    /* An identical pair can give NaN on both sides, as in ultralytics' float32 bbox_iou: the
     * corners' rounding can make iou exactly the float 1 + eps, and with v = 0 alpha is then
     * 0 / 0 (kern_ciou_common.h keeps that formula). Only those pairs may be NaN. */
    CK(kern_ref_ciou_fwd(g_cpu, c, b1, b2, n));
    CK(kern_cuda_ciou_fwd(g_gpu, c_d, b1_d, b2_d, n));
    size_t nan_off = 0;
    for (size_t i = 0; i < n; i++)
        nan_off += isnan(c[i]) && i % 17 != 0;
    ok(nan_off == 0, "ciou_fwd: the reference is NaN only on identical pairs (%zu others)",
       nan_off);
    cmp_nan("ciou_fwd", c_d, c, n, 1e-6, 1e-5);
    CK(kern_ref_ciou_bwd(g_cpu, db1, db2, dc, b1, b2, n, accum));
    CK(kern_cuda_ciou_bwd(g_gpu, db1_d, db2_d, dc_d, b1_d, b2_d, n, accum));
    cmp_nan(accum ? "ciou_bwd db1 (+=)" : "ciou_bwd db1 (=)", db1_d, db1, 4 * n, 1e-5, 1e-4);
    cmp_nan(accum ? "ciou_bwd db2 (+=)" : "ciou_bwd db2 (=)", db2_d, db2, 4 * n, 1e-5, 1e-4);
    cudaFree(b1_d), cudaFree(b2_d), cudaFree(dc_d), cudaFree(c_d), cudaFree(db1_d);
    cudaFree(db2_d);
    free(b1), free(b2), free(dc), free(c), free(db1), free(db2);
}

/* ---- conv2d (cuDNN) ---- */

static void test_conv(int n, int c_in, int h, int w, int c_out, int k, int s, int p, unsigned accum)
{
    struct kern_conv2d d;
    int oh, ow;
    kern_conv2d_init(&d, n, c_in, h, w, c_out, k, s, p);
    if (kern_conv2d_out_hw(&d, &oh, &ow) < 0) {
        ok(0, "conv2d shape");
        return;
    }
    tap_diag("conv2d: n %d %d->%d %dx%d k %d s %d p %d accum %u", n, c_in, c_out, h, w, k, s, p,
             accum);
    const size_t nx = (size_t)n * c_in * h * w, nw = (size_t)c_out * c_in * k * k;
    const size_t ny = (size_t)n * c_out * oh * ow, nb = (size_t)c_out;
    size_t ws_ref = 0, ws_gpu = 0;
    CK(kern_ref_conv2d_workspace_size(g_cpu, &d, &ws_ref));
    CK(kern_cuda_conv2d_workspace_size(g_gpu, &d, &ws_gpu));
    CK(kern_ctx_reserve(g_cpu, ws_ref));
    CK(kern_cuda_ctx_reserve(g_gpu, ws_gpu));
    float *const x = rnd(nx, -1.0f, 1.0f), *const wt = rnd(nw, -0.5f, 0.5f);
    float *const bias = rnd(nb, -0.5f, 0.5f), *const dy = rnd(ny, -1.0f, 1.0f);
    float *const y = kt_alloc(ny), *const dx = rnd(nx, -1.0f, 1.0f);
    float *const dw = rnd(nw, -1.0f, 1.0f), *const db = rnd(nb, -1.0f, 1.0f);
    if (!(accum & KERN_ACCUM_DX)) kt_poison(dx, nx);
    if (!(accum & KERN_ACCUM_DPARAM)) kt_poison(dw, nw), kt_poison(db, nb);
    float *const x_d = d_up(x, nx), *const w_d = d_up(wt, nw), *const b_d = d_up(bias, nb);
    float *const dy_d = d_up(dy, ny), *const y_d = d_canary(y, ny), *const dx_d = d_up(dx, nx);
    float *const dw_d = d_up(dw, nw), *const db_d = d_up(db, nb);
    const double t_fwd = sqrt((double)c_in * k * k), t_filt = sqrt((double)n * oh * ow);
    CK(kern_ref_conv2d_fwd(g_cpu, &d, y, x, wt, bias));
    CK(kern_cuda_conv2d_fwd(g_gpu, &d, y_d, x_d, w_d, b_d));
    cmp("conv2d_fwd y (+bias)", y_d, y, ny, 1e-5 * t_fwd, 1e-4);
    CK(kern_ref_conv2d_bwd_data(g_cpu, &d, dx, dy, wt, accum));
    CK(kern_cuda_conv2d_bwd_data(g_gpu, &d, dx_d, dy_d, w_d, accum));
    cmp("conv2d_bwd_data dx", dx_d, dx, nx, 1e-5 * sqrt((double)c_out * k * k), 1e-4);
    CK(kern_ref_conv2d_bwd_filter(g_cpu, &d, dw, dy, x, accum));
    CK(kern_cuda_conv2d_bwd_filter(g_gpu, &d, dw_d, dy_d, x_d, accum));
    cmp("conv2d_bwd_filter dw", dw_d, dw, nw, 1e-5 * t_filt, 1e-4);
    CK(kern_ref_conv2d_bwd_bias(g_cpu, &d, db, dy, accum));
    CK(kern_cuda_conv2d_bwd_bias(g_gpu, &d, db_d, dy_d, accum));
    cmp("conv2d_bwd_bias db", db_d, db, nb, 1e-5 * t_filt, 1e-4);
    cudaFree(x_d), cudaFree(w_d), cudaFree(b_d), cudaFree(dy_d), cudaFree(y_d);
    cudaFree(dx_d), cudaFree(dw_d), cudaFree(db_d);
    free(x), free(wt), free(bias), free(dy), free(y), free(dx), free(dw), free(db);
}

/* Argument and backend checks that need no numbers. */
static void test_contracts(void)
{
    float f = 0.0f, v[6] = { 0 };
    ok(kern_ops_cuda() != NULL && kern_ops_cuda()->backend == KERN_BACKEND_CUDA,
       "kern_ops_cuda() is the CUDA table");
    is_int(kern_cuda_silu_fwd(g_cpu, &f, &f, 1), -KERN_EBACKEND, "CUDA op on a CPU context");
    is_int(kern_ref_silu_fwd(g_gpu, &f, &f, 1), -KERN_EBACKEND, "CPU op on a CUDA context");
    is_int(kern_cuda_silu_bwd(g_gpu, &f, &f, &f, 1, 4u), -EINVAL, "unknown accum bit");
    struct kern_bn d;
    kern_bn_init(&d, 1, 1, 1);
    is_int(kern_cuda_bn_fwd_train(g_gpu, &d, v, NULL, NULL, v + 1, v + 2, v + 3, v + 4, v + 5),
           -EINVAL, "BN running update with N = 1");
    ok(kern_cuda_ctx_stream(g_gpu) != NULL, "the CUDA context has a stream");
}

/* ---- bench ---- */

static double bench_ms(cudaEvent_t e0, cudaEvent_t e1, int reps)
{
    float ms = 0.0f;
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    return (double)ms / reps;
}

#define BENCH(name, bytes, flops, call)                                         \
    do {                                                                        \
        for (int r_ = 0; r_ < 3; r_++)                                          \
            (void)(call);                                                       \
        cudaEventRecord(e0, st);                                                \
        int bad_ = 0;                                                           \
        for (int r_ = 0; r_ < 20; r_++)                                         \
            bad_ |= (call) < 0;                                                 \
        cudaEventRecord(e1, st);                                                \
        const double ms_ = bench_ms(e0, e1, 20);                                \
        ok(!bad_, "bench %-28s %8.3f ms  %7.1f GB/s  %6.2f TFLOP/s", name, ms_, \
           (double)(bytes) / ms_ / 1e6, (double)(flops) / ms_ / 1e9);           \
    } while (0)

static void run_bench(void)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaStream_t st = (cudaStream_t)kern_cuda_ctx_stream(g_gpu);
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    tap_diag("device: %s, %d SMs", prop.name, prop.multiProcessorCount);
    /* YOLOv5s at 640, batch 64: the 160x160 stage (64 channels) and the SPPF (20x20). */
    const int n = 64, c = 64, hw = 160 * 160;
    const size_t cnt = (size_t)n * c * hw;
    float *const x = kct_alloc(cnt * 4), *const y = kct_alloc(cnt * 4),
                 *const dy = kct_alloc(cnt * 4);
    float *const dx = kct_alloc(cnt * 4), *const v = kct_alloc(4096 * 4);
    cudaMemset(x, 0, cnt * 4), cudaMemset(dy, 0, cnt * 4), cudaMemset(v, 0, 4096 * 4);
    struct kern_bn bn;
    kern_bn_init(&bn, n, c, hw);
    BENCH("silu_fwd 64x64x160x160", cnt * 8, 0, kern_cuda_silu_fwd(g_gpu, y, x, cnt));
    BENCH("bn_silu_fwd_train", cnt * 12, 0,
          kern_cuda_bn_silu_fwd_train(g_gpu, &bn, y, v, v + 64, v + 128, v + 192, x, v + 256,
                                      v + 320));
    BENCH("bn_silu_bwd", cnt * 20, 0,
          kern_cuda_bn_silu_bwd(g_gpu, &bn, dx, v + 384, v + 448, dy, x, v + 256, v + 320, v,
                                v + 64, 0));
    BENCH("upsample2x_fwd", cnt * 4 * 5 / 4, 0,
          kern_cuda_upsample2x_fwd(g_gpu, y, x, n * c / 4, 160, 160));
    const struct kern_pool2d pd = { 64, 256, 20, 20, 5, 1, 2, 0, 0 };
    int32_t *const idx = kct_alloc((size_t)64 * 256 * 400 * 4);
    BENCH("maxpool2d_fwd SPPF", (size_t)64 * 256 * 400 * 12, 0,
          kern_cuda_maxpool2d_fwd(g_gpu, &pd, y, idx, x));
    BENCH("maxpool2d_bwd SPPF", (size_t)64 * 256 * 400 * 12, 0,
          kern_cuda_maxpool2d_bwd(g_gpu, &pd, dx, dy, idx, 0));
    struct kern_conv2d cd;
    kern_conv2d_init(&cd, 64, 64, 160, 160, 64, 3, 1, 1);
    size_t ws = 0;
    if (kern_cuda_conv2d_workspace_size(g_gpu, &cd, &ws) == 0 &&
        kern_cuda_ctx_reserve(g_gpu, ws) == 0) {
        float *const wt = kct_alloc((size_t)64 * 64 * 9 * 4);
        cudaMemset(wt, 0, (size_t)64 * 64 * 9 * 4);
        const double fl = kern_conv2d_flops(&cd);
        BENCH("conv2d_fwd 3x3 64->64 fp32", cnt * 8, fl,
              kern_cuda_conv2d_fwd(g_gpu, &cd, y, x, wt, NULL));
        BENCH("conv2d_bwd_data", cnt * 8, fl, kern_cuda_conv2d_bwd_data(g_gpu, &cd, dx, dy, wt, 0));
        BENCH("conv2d_bwd_filter", cnt * 8, fl,
              kern_cuda_conv2d_bwd_filter(g_gpu, &cd, v, dy, x, 0));
        cudaFree(wt);
    } else {
        ok(0, "conv2d bench plan: %s", kern_cuda_ctx_last_error(g_gpu));
    }
    cudaFree(x), cudaFree(y), cudaFree(dy), cudaFree(dx), cudaFree(v), cudaFree(idx);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

void parity_ops(int bench)
{
    if (bench) {
        run_bench();
    } else {
        test_contracts();
        test_silu();
        for (unsigned accum = 0; accum < 4; accum += 3) {
            test_bn(0, kt_randint(1, 4), kt_randint(1, 40), kt_randint(2, 900), accum);
            test_bn(1, kt_randint(1, 4), kt_randint(1, 40), kt_randint(2, 900), accum);
        }
        test_bn(1, 2, 3, 80 * 80, KERN_ACCUM_DX);         /* many chunks per channel */
        test_bn(0, 2, 5, 1, 0);                           /* N = 2, one pixel per plane */
        for (unsigned accum = 0; accum < 4; accum += 3) { /* SyncBatchNorm's phases */
            test_bn_sync(0, kt_randint(1, 4), kt_randint(1, 40), kt_randint(2, 900), accum);
            test_bn_sync(1, kt_randint(1, 4), kt_randint(1, 40), kt_randint(2, 900), accum);
        }
        test_bn_sync(1, 2, 3, 80 * 80, 0); /* many chunks per channel */
        for (unsigned accum = 0; accum < 2; accum++) {
            test_maxpool(2, 3, 20, 20, 5, 1, 2, accum); /* SPPF */
            test_maxpool(1, 2, 13, 11, 3, 2, 1, accum);
            test_upsample(kt_randint(1, 30), kt_randint(1, 40), kt_randint(1, 40), accum);
            test_concat_add(accum);
            test_detect(accum);
            test_bce(accum);
            test_ciou(accum);
        }
        for (int layout = 0; layout < 2; layout++)
            for (unsigned accum = 0; accum < 4; accum += 3)
                test_s2d(layout, accum);
        test_conv(2, 3, 32, 32, 16, 6, 2, 2, 0); /* the stem */
        test_conv(2, 16, 16, 16, 32, 3, 2, 1, KERN_ACCUM_DX | KERN_ACCUM_DPARAM);
        test_conv(3, 32, 10, 12, 32, 3, 1, 1, 0);
        test_conv(2, 32, 9, 9, 24, 1, 1, 0, KERN_ACCUM_DPARAM);
    }
}
