/*
 * CUDA parity of the optimizer ops (kern.h "Optimizer step, ..."): every kern_cuda_* op against
 * its kern_ref_* twin on fresh random draws (seed printed; --seed N replays), over random segment
 * tables whose padding holds NaN canaries on both sides, outputs poisoned first.
 *
 * Tolerances, and why:
 *   sgd_step given the same *sumsq, ema_update, amp_unscale, every cast: bitwise (compared as
 *     bits, canaries included): the CUDA kernels round each product and sum separately
 *     (__fmul_rn / __fadd_rn, no FMA) in the reference's order, and the casts are the same
 *     integer code.
 *   optim_sumsq: 1e-12 relative: double sums in another order (exact squares).
 *   sgd_step with the device's own sumsq and clipping: 1e-6 relative + 1e-7 absolute: the clip
 *     factor may differ in its last float bit when the two sums do.
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

/* The device result d (bytes) equals the host reference bit for bit (NaN canaries included). */
static int cmp_bits(const char *what, const void *d, const void *ref, size_t bytes, size_t elem)
{
    unsigned char *const got = malloc(bytes ? bytes : 1);
    if (!got) exit(99);
    kct_down(got, d, bytes);
    size_t bad = 0, first = (size_t)-1;
    for (size_t i = 0; i < bytes / elem; i++) {
        if (memcmp(got + i * elem, (const unsigned char *)ref + i * elem, elem)) {
            if (first == (size_t)-1) first = i;
            bad++;
        }
    }
    const int r = ok(bad == 0, "%s: %zu values bitwise equal", what, bytes / elem);
    if (!r) printf("#   %zu differ, first at %zu\n", bad, first);
    free(got);
    return r;
}

static void test_optim(int n_groups, int nesterov, int clip)
{
    const size_t len = (size_t)kt_randint(1000, 400000), cap = 2000;
    struct kern_optim_seg *const seg = calloc(cap, sizeof *seg);
    if (!seg) exit(99);
    size_t total = 0;
    const size_t n_seg = kt_random_segs_prepared(seg, cap, len, 50, 400, 20000, n_groups, &total);
    tap_diag("optim: len %zu, %zu segments, %zu elements, %d groups, nesterov %d, clip %d", len,
             n_seg, total, n_groups, nesterov, clip);
    const size_t fb = len * sizeof(float);
    float *const th = kt_alloc(len), *const buf = kt_alloc(len), *const ema = kt_alloc(len);
    float *const gr = kt_alloc(len);
    kt_fill_segs(th, seg, n_seg, len, -1.0f, 1.0f);
    kt_fill_segs(buf, seg, n_seg, len, -0.5f, 0.5f);
    kt_fill_segs(ema, seg, n_seg, len, -1.0f, 1.0f);
    kt_fill_segs(gr, seg, n_seg, len, -4.0f, 4.0f);
    struct kern_optim_seg *const seg_d = kct_up(seg, n_seg * sizeof *seg);
    float *const th_d = kct_up(th, fb), *const buf_d = kct_up(buf, fb),
                 *const ema_d = kct_up(ema, fb);
    float *const gr_d = kct_up(gr, fb);
    double *const ss_d = kct_alloc(sizeof(double));

    /* Sum of squares: relative 1e-12, and bitwise reproducible run to run. */
    double ss = 0.0, ss_g = 0.0, ss_g2 = 0.0;
    CK(kern_ref_optim_sumsq(g_cpu, &ss, gr, seg, n_seg, total));
    CK(kern_cuda_optim_sumsq(g_gpu, ss_d, gr_d, seg_d, n_seg, total));
    kct_down(&ss_g, ss_d, sizeof ss_g);
    CK(kern_cuda_optim_sumsq(g_gpu, ss_d, gr_d, seg_d, n_seg, total));
    kct_down(&ss_g2, ss_d, sizeof ss_g2);
    const double rel = fabs(ss_g - ss) / ss;
    ok(rel <= 1e-12, "optim_sumsq: rel err %.3g <= 1e-12", rel);
    ok(memcmp(&ss_g, &ss_g2, sizeof ss_g) == 0, "optim_sumsq: bitwise reproducible");

    /* The step with the CPU's sum uploaded: bitwise. Several steps, first and later. */
    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = n_seg, d.total = total, d.n_groups = n_groups, d.nesterov = nesterov;
    d.grad_scale = kt_randint(0, 1) ? 1.0f : 0x1p-12f;
    d.max_norm = clip ? (float)(sqrt(ss) * d.grad_scale * kt_uniform(0.2f, 2.0f)) : 0.0f;
    d.ema_decay = 0.9f, d.ema_weight = (float)(1.0 - 0.9);
    for (int g = 0; g < n_groups; g++) {
        d.group[g].lr = kt_uniform(0.001f, 0.1f);
        d.group[g].momentum = kt_uniform(0.8f, 0.95f);
        d.group[g].weight_decay = g == 1 ? 5e-4f : 0.0f;
    }
    double *const ss_cpu_d = kct_up(&ss, sizeof ss);
    for (int k = 0; k < 3; k++) {
        d.first = k == 0;
        CK(kern_ref_sgd_step(g_cpu, &d, th, buf, ema, gr, seg, &ss, NULL));
        CK(kern_cuda_sgd_step(g_gpu, &d, th_d, buf_d, ema_d, gr_d, seg_d, ss_cpu_d, NULL));
    }
    cmp_bits("sgd_step params (3 steps)", th_d, th, fb, 4);
    cmp_bits("sgd_step momentum", buf_d, buf, fb, 4);
    cmp_bits("sgd_step ema", ema_d, ema, fb, 4);

    /* With the device's own sum: the clip factor may differ by an ulp. */
    float *const th2 = kt_alloc(len);
    memcpy(th2, th, fb);
    float *const th2_d = kct_up(th2, fb), *const buf2_d = kct_up(buf, fb);
    float *const buf2 = kt_alloc(len);
    memcpy(buf2, buf, fb);
    d.first = 0;
    CK(kern_ref_sgd_step(g_cpu, &d, th2, buf2, NULL, gr, seg, &ss, NULL));
    CK(kern_cuda_sgd_step(g_gpu, &d, th2_d, buf2_d, NULL, gr_d, seg_d, ss_d, NULL));
    float *const got = kt_alloc(len);
    kct_down(got, th2_d, fb);
    /* Gather the segments (the padding is checked bitwise above) and compare once. */
    float *const a = kt_alloc(total), *const b = kt_alloc(total);
    for (size_t s = 0; s < n_seg; s++) {
        memcpy(a + seg[s].start, got + seg[s].offset, seg[s].count * sizeof(float));
        memcpy(b + seg[s].start, th2 + seg[s].offset, seg[s].count * sizeof(float));
    }
    kt_check_close_f("sgd_step params with the device's sumsq", a, b, total, 1e-7, 1e-6);
    free(a), free(b);

    /* found_inf / skip_nonfinite: params untouched, EMA moves. */
    int32_t one = 1;
    int32_t *const one_d = kct_up(&one, sizeof one);
    CK(kern_ref_sgd_step(g_cpu, &d, th, buf, ema, gr, seg, &ss, &one));
    CK(kern_cuda_sgd_step(g_gpu, &d, th_d, buf_d, ema_d, gr_d, seg_d, ss_cpu_d, one_d));
    cmp_bits("sgd_step found_inf: params", th_d, th, fb, 4);
    cmp_bits("sgd_step found_inf: ema", ema_d, ema, fb, 4);

    /* EMA over the whole buffer (padding canaries: NaN * d stays NaN, but which NaN is
     * implementation-defined, so the EMA runs over a canary-free copy). */
    float *const x = kt_alloc(len), *const v = kt_alloc(len);
    kt_fill(x, len, -1.0f, 1.0f);
    kt_fill(v, len, -1.0f, 1.0f);
    float *const x_d = kct_up(x, fb), *const v_d = kct_up(v, fb);
    const double ed = 0.9999 * (1.0 - exp(-(double)kt_randint(1, 5000) / 2000.0));
    CK(kern_ref_ema_update(g_cpu, v, x, len, (float)ed, (float)(1.0 - ed)));
    CK(kern_cuda_ema_update(g_gpu, v_d, x_d, len, (float)ed, (float)(1.0 - ed)));
    cmp_bits("ema_update", v_d, v, fb, 4);

    /* Unscale: values and flag, with and without an Inf. */
    int32_t flag = 0, flag_g = -1;
    int32_t *const flag_d = kct_up(&flag, sizeof flag);
    CK(kern_ref_amp_unscale(g_cpu, gr, seg, n_seg, total, 0x1p-16f, &flag));
    CK(kern_cuda_amp_unscale(g_gpu, gr_d, seg_d, n_seg, total, 0x1p-16f, flag_d));
    cmp_bits("amp_unscale grads", gr_d, gr, fb, 4);
    kct_down(&flag_g, flag_d, sizeof flag_g);
    ok(flag == 0 && flag_g == 0, "amp_unscale: finite grads leave both flags 0");
    const size_t at = seg[kt_randint(0, (int)n_seg - 1)].offset;
    gr[at] = INFINITY;
    cudaMemcpy(gr_d + at, gr + at, sizeof(float), cudaMemcpyHostToDevice);
    CK(kern_ref_amp_unscale(g_cpu, gr, seg, n_seg, total, 1.0f, &flag));
    CK(kern_cuda_amp_unscale(g_gpu, gr_d, seg_d, n_seg, total, 1.0f, flag_d));
    kct_down(&flag_g, flag_d, sizeof flag_g);
    ok(flag == 1 && flag_g == 1, "amp_unscale: an Inf sets both flags");

    cudaFree(seg_d), cudaFree(th_d), cudaFree(buf_d), cudaFree(ema_d), cudaFree(gr_d);
    cudaFree(ss_d), cudaFree(ss_cpu_d), cudaFree(th2_d), cudaFree(buf2_d), cudaFree(one_d);
    cudaFree(x_d), cudaFree(v_d), cudaFree(flag_d);
    free(seg), free(th), free(buf), free(ema), free(gr), free(th2), free(buf2), free(got);
    free(x), free(v);
}

static void test_casts(void)
{
    const size_t n = (size_t)kt_randint(1, 200000) + 65536;
    float *const f = kt_alloc(n);
    uint16_t *const h = malloc(n * 2), *const h2 = malloc(n * 2);
    if (!h || !h2) exit(99);
    /* Random bit patterns (NaN, Inf, subnormals included) and every 16-bit pattern widened. */
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)kt_next();
        memcpy(&f[i], &u, 4);
    }
    for (uint32_t i = 0; i < 65536; i++)
        h2[i] = (uint16_t)i;
    float *const f_d = kct_up(f, n * 4), *const w_d = kct_alloc(n * 4);
    uint16_t *const h_d = kct_alloc(n * 2), *const all_d = kct_up(h2, 65536 * 2);
    float *const w = kt_alloc(65536);
    cudaMemset(h_d, 0xa5, n * 2), memset(h, 0xa5, n * 2);
    CK(kern_ref_cast_f32_bf16(g_cpu, h, f, n));
    CK(kern_cuda_cast_f32_bf16(g_gpu, h_d, f_d, n));
    cmp_bits("cast_f32_bf16 (random bits)", h_d, h, n * 2, 2);
    CK(kern_ref_cast_f32_f16(g_cpu, h, f, n));
    CK(kern_cuda_cast_f32_f16(g_gpu, h_d, f_d, n));
    cmp_bits("cast_f32_f16 (random bits)", h_d, h, n * 2, 2);
    kt_poison(w, 65536);
    cudaMemset(w_d, 0xff, 65536 * 4);
    CK(kern_ref_cast_bf16_f32(g_cpu, w, h2, 65536));
    CK(kern_cuda_cast_bf16_f32(g_gpu, w_d, all_d, 65536));
    cmp_bits("cast_bf16_f32 (all patterns)", w_d, w, 65536 * 4, 4);
    CK(kern_ref_cast_f16_f32(g_cpu, w, h2, 65536));
    CK(kern_cuda_cast_f16_f32(g_gpu, w_d, all_d, 65536));
    cmp_bits("cast_f16_f32 (all patterns)", w_d, w, 65536 * 4, 4);
    cudaFree(f_d), cudaFree(w_d), cudaFree(h_d), cudaFree(all_d);
    free(f), free(h), free(h2), free(w);
}

static void test_contracts(void)
{
    const struct kern_ops *const K = kern_ops_cuda();
    ok(K && K->sgd_step == kern_cuda_sgd_step && K->optim_sumsq == kern_cuda_optim_sumsq &&
           K->ema_update == kern_cuda_ema_update && K->amp_unscale == kern_cuda_amp_unscale &&
           K->cast_f32_bf16 == kern_cuda_cast_f32_bf16 &&
           K->cast_bf16_f32 == kern_cuda_cast_bf16_f32 &&
           K->cast_f32_f16 == kern_cuda_cast_f32_f16 && K->cast_f16_f32 == kern_cuda_cast_f16_f32,
       "kern_ops_cuda() carries the optim ops in order");
    is_int(kern_cuda_sgd_step(g_cpu, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
           -KERN_EBACKEND, "CPU context on a CUDA op: -KERN_EBACKEND");
    is_int(kern_cuda_optim_sumsq(g_gpu, NULL, NULL, NULL, 0, 0), -EINVAL, "sumsq NULL: -EINVAL");
}

void parity_optim(int bench)
{
    (void)bench; /* no benchmark in this suite */
    test_contracts();
    test_optim(3, 1, 1);
    test_optim(1, 0, 0);
    test_optim(4, 1, 1);
    test_optim(2, 1, 0);
    test_casts();
}
