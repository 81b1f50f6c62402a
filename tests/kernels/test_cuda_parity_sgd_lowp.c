/*
 * CUDA parity of the SGD step's reduced-precision copy (kern_sgd.params_lowp): kern_cuda_sgd_step
 * against kern_ref_sgd_step on fresh random draws (seed printed; --seed N replays), bf16 and
 * fp16, a plain step, a step with its scalars in device memory (dyn) and a skipped one, tables
 * with channels-last and stem (kern_lowp_order.s2d) orders: the copy, its untouched padding
 * (poisoned first) and the parameters are compared bit for bit (the
 * kernels round as the CPU, kern_cuda_optim.cu). Registered with the exit-code protocol; exits 77
 * with "# SKIP no CUDA device" without a GPU.
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

static int same_bits(const char *what, const void *d, const void *ref, size_t bytes)
{
    unsigned char *const got = malloc(bytes ? bytes : 1);
    if (!got) exit(99);
    kct_down(got, d, bytes);
    const int r = ok(!memcmp(got, ref, bytes), "%s: bitwise equal (%zu bytes)", what, bytes);
    free(got);
    return r;
}

static void test_lowp(int dtype, int run)
{
    static const char *const name[3] = { "plain", "dyn", "skipped" };
    const size_t len0 = (size_t)kt_randint(5000, 300000), cap = 1500;
    struct kern_optim_seg *const seg = calloc(cap, sizeof *seg);
    if (!seg) exit(99);
    size_t total = 0;
    size_t n = kt_random_segs_prepared(seg, cap - 2, len0, 40, 400, 20000, 3, &total);
    kt_segs_lowp_order(seg, n); /* every third segment written channels last */
    /* and two stem weights written as their space-to-depth, NHWC and NCHW, past the others */
    const size_t len = kt_segs_add_s2d(seg, &n, len0, 3, &total);
    const size_t fb = len * sizeof(float), hb = len * sizeof(uint16_t);
    float *const th = kt_alloc(len), *const buf = kt_alloc(len), *const gr = kt_alloc(len);
    kt_fill(th, len, -2.0f, 2.0f);
    kt_fill(buf, len, -0.5f, 0.5f);
    kt_fill(gr, len, -4.0f, 4.0f);
    th[seg[0].offset] = 70000.0f; /* fp16 overflow */
    uint16_t *const lp = malloc(hb);
    if (!lp) exit(99);
    memset(lp, 0xA5, hb); /* kct_poison's pattern, so the padding compares equal untouched */
    struct kern_optim_seg *const seg_d = kct_up(seg, n * sizeof *seg);
    float *const th_d = kct_up(th, fb), *const buf_d = kct_up(buf, fb),
                 *const gr_d = kct_up(gr, fb);
    uint16_t *const lp_d = kct_poison(hb);
    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = n, d.total = total, d.n_groups = 3, d.nesterov = 1, d.grad_scale = 1.0f;
    for (int g = 0; g < 3; g++) {
        d.group[g].lr = kt_uniform(0.001f, 0.1f);
        d.group[g].momentum = 0.937f;
        d.group[g].weight_decay = g == 1 ? 5e-4f : 0.0f;
    }
    struct kern_sgd_dyn dyn;
    memset(&dyn, 0, sizeof dyn);
    for (int g = 0; g < 3; g++)
        dyn.group[g] = d.group[g];
    dyn.grad_scale = 1.0f, dyn.ema_weight = 1.0f;
    struct kern_sgd_dyn *const dyn_d = kct_up(&dyn, sizeof dyn);
    const int32_t flag = run == 2;
    int32_t *const flag_d = kct_up(&flag, sizeof flag);
    struct kern_sgd dc = d, dg = d;
    dc.params_lowp = lp, dg.params_lowp = lp_d;
    dc.lowp_dtype = dg.lowp_dtype = dtype;
    if (run == 1) dc.dyn = &dyn, dg.dyn = dyn_d;
    tap_diag("%s %s: len %zu, %zu segments", dtype == KERN_DT_BF16 ? "bf16" : "fp16", name[run],
             len, n);
    CK(kern_ref_sgd_step(g_cpu, &dc, th, buf, NULL, gr, seg, NULL, &flag));
    CK(kern_cuda_sgd_step(g_gpu, &dg, th_d, buf_d, NULL, gr_d, seg_d, NULL, flag_d));
    same_bits("params", th_d, th, fb);
    same_bits("params_lowp (segments and padding)", lp_d, lp, hb);
    cudaFree(seg_d), cudaFree(th_d), cudaFree(buf_d), cudaFree(gr_d), cudaFree(lp_d);
    cudaFree(dyn_d), cudaFree(flag_d);
    free(seg), free(th), free(buf), free(gr), free(lp);
}

void parity_sgd_lowp(int bench)
{
    (void)bench; /* no benchmark in this suite */
    struct kern_sgd d;
    memset(&d, 0, sizeof d);
    d.n_seg = 1, d.total = 1, d.n_groups = 1, d.grad_scale = 1.0f;
    uint16_t *const lp_d = kct_alloc(2);
    float *const th_d = kct_alloc(4), *const buf_d = kct_alloc(4), *const gr_d = kct_alloc(4);
    struct kern_optim_seg *const seg_d = kct_alloc(sizeof(struct kern_optim_seg));
    d.params_lowp = lp_d, d.lowp_dtype = KERN_DT_F32;
    is_int(kern_cuda_sgd_step(g_gpu, &d, th_d, buf_d, NULL, gr_d, seg_d, NULL, NULL), -EINVAL,
           "lowp_dtype f32 with a copy: -EINVAL");
    cudaFree(lp_d), cudaFree(th_d), cudaFree(buf_d), cudaFree(gr_d), cudaFree(seg_d);
    for (int dt = KERN_DT_BF16; dt <= KERN_DT_F16; dt++)
        for (int run = 0; run < 3; run++)
            test_lowp(dt, run);
}
