/*
 * Three full training steps against the PyTorch parity dump (tests/trainer/make_parity_ref.py:
 * yolov5n, nc 80, 128x128, batch 2, weights trn_model_init(seed 0), images
 * trn_model_init_uniform(0, 1000, j), the dump's targets). Each step is what trainer/train/train.c
 * does per batch: training forward (BN batch statistics, running stats updated), ComputeLoss,
 * backward into the gradient arena, trn_optim_after_batch at epoch 0, ni = 0, 1, 2 with nb = 100
 * (warmup lr per group, momentum, accumulate 1, clip at 10, nesterov SGD, zero grads), and the
 * EMA update. Compared:
 *   - per step: the losses at the weights before the step (step.loss), the gradient norm
 *     (step.gradnorm), no clipping (step.clip_coef), the schedule (step.lr, step.momentum) and
 *     the weight deltas step<s>.delta.* element by element;
 *   - after step 3: every parameter (step3.param.*), every EMA tensor (step3.ema.*, parameters
 *     and BN running stats), the model's BN running stats (step3.buffer.*) and every
 *     num_batches_tracked (step3.num_batches_tracked).
 * Tensors are judged as the issue states it: per tensor, max |C - ref| <= 1e-4 max |ref| at the
 * stored elements, and the L2 norm of the whole tensor within 1e-4. A delta is below float32
 * resolution of its weight (parity_dump.h), so deltas are judged per element against a few ulp
 * of the weight plus 1e-4 of the delta tensor's largest value (which bounds what the gradient
 * error, itself <= 1e-4 of each gradient tensor's largest value, can move).
 *
 * MODES (flags after the dump path; one program, the same comparisons):
 *   (none)          the CPU net, the host loss, optimizer and EMA (train.c's train_batch);
 *   --device-path   the net on the device data path over the CPU ops (trn_net_opts.device_path):
 *                   separate device copies, every transfer through kern_mem_copy;
 *   --resident      train.c's train_batch_resident: parameters, gradients, momentum, EMA and the
 *                   loss in the net's backend memory (trn_net_set_resident, trn_loss_compute_dev,
 *                   trn_optim_dev_step, K->ema_update for the buffers); the losses, the sum of
 *                   squares and (for the deltas) the model are copied down for the comparisons
 *                   only. Needs --device-path or --cuda;
 *   --cuda          the net on CUDA device 0 (trn_net_opts.device = 0); exits 77 with a
 *                   "1..0 # SKIP" line when kern_cuda_device_count() is 0;
 *   --amp bf16      autocast convs (trn_net_opts.amp = KERN_DT_BF16) against the float32 dump.
 * On the device data path the same steps also run on the host CPU net in the same process, and
 * the final parameters, buffers, EMA and per-step losses must be bit-identical to it (the device
 * path runs the same CPU ops on separate copies).
 *
 * TOLERANCES per dtype and backend (struct tols; loss and gradient norm relative, tensors as a
 * fraction of the reference tensor's largest magnitude and of its L2 norm, deltas as a fraction
 * of the delta tensor's largest value on top of DELTA_ULPS ulp of the weight, the weight-decay
 * slope as a fraction of the decay's own):
 *   - float32 on the CPU ops (host or device path): 1e-4 everywhere, decay slope 0.1.
 *   - float32 on CUDA: cuDNN picks its own algorithms (Winograd, FFT, TF32 tensor cores), so
 *     the bounds are test_net_cuda.c's for one forward and backward, which this step is:
 *     outputs (losses) and BN statistics 2e-3, gradients (norm, deltas, BN-bias deltas) 1e-2;
 *     tensors after three steps (parameters, EMA, running stats) 2e-3; decay slope 0.1. Not yet
 *     run on a GPU: if a first run shows more, say so with the measured values here.
 *   - bf16 autocast (CPU ops, --device-path), per step (tol_bf16): about 3x what the
 *     --device-path --amp bf16 run measured on this dump (the same bits on the host and resident
 *     paths), steps 1 / 2 / 3: loss 9.98e-3 / 6.72e-3 / 6.04e-2, grad norm 3.59e-2 / 6.78e-2 /
 *     2.24e-1, BN-bias deltas L2 6.36e-1 / 4.70e-1 / 5.37e-1, worst delta element 0.787 / 0.768
 *     / 1.02 of its tensor's max, decay slope - / 0.233 / 0.402; after step 3 (params and EMA)
 *     biases 0.697, conv weights 2.53e-4, BN weights 7.93e-6, BN running stats 6.53e-2. The
 *     errors grow with the steps because the warmup moves the biases at lr 0.1 on a random net;
 *     the BN-bias gradients are sums over the batch with heavy cancellation, so bf16's rounding
 *     of the conv dx shows there most. These bounds catch a 3x bias lr, a 4x weight decay or 2%
 *     brighter images, not a 2x bias lr (the schedule check does): the bit-identity with the host
 *     bf16 net is what holds the device path exactly.
 *   - bf16 on CUDA: the larger of the bf16 and the CUDA float32 bounds (cuDNN's bf16 convs
 *     accumulate in float32, but in another order).
 *   - bf16 against PyTorch's own bf16 AMP step (data_parity/yolov5n_128_b2_bf16.bin,
 *     make_parity_ref.py --dtype bf16: bf16 convs and bf16 activations between layers, channels
 *     last): tol_bf16 holds. Measured, steps 1 / 2 / 3: loss 1.33e-2 / 5.06e-3 / 1.57e-2, grad
 *     norm 6.89e-2 / 1.83e-1 / 1.66e-1. PyTorch's bf16 step is itself that far from the float64
 *     one (grad norm 5.134 against 4.615 at step 1, 11%), further than ours (float32 activations
 *     between the bf16 convs): this reference is for the bf16 NHWC executor, whose activations
 *     are bf16 as PyTorch's.
 *   - --act nhwc (bf16 activations between layers, net.h ACTIVATIONS) against that same PyTorch
 *     bf16 step (tol_x16, 3x the larger of what two machines measured on the CPU ops). Which
 *     elements round up to the next bf16 depends on the order of the float32 sums before them,
 *     and OpenBLAS picks its sgemm kernel by CPU, so the figures move with the machine: steps
 *     1 / 2 / 3, loss 3.94e-3 / 5.65e-3 / 5.09e-3 and grad norm 7.65e-2 / 1.55e-1 / 6.39e-2 on
 *     machine G, an AVX2 Zen 1 (the stem as a plain 6x6 conv), and loss 1.36e-2 / 1.12e-2 /
 *     6.68e-3 and grad norm 7.50e-2 / 1.29e-1 / 9.97e-2 on machine E, an AVX-512 Zen 4 (the
 *     plain stem gives the same step-1 loss there, so the stem's space-to-depth is not what
 *     moved it); after step 3 biases 1.27 / 0.974, conv weights 2.50e-4 / 2.16e-4, BN weights
 *     7.87e-6 / 7.39e-6, running stats 6.52e-2 / 6.00e-2; decay slope - / 0.738 / 0.217.
 *     On the CPU ops the same run with --act nchw must give the same bits, which this checks in
 *     the same process.
 * Exits 77 (skip) when the dump is absent.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kern.h"
#include "kern_cuda.h"
#include "loss.h"
#include "model.h"
#include "net.h"
#include "optim.h"
#include "parity_dump.h"
#include "tap.h"
#include "errors.h"

#define BATCH 2
#define IMG   128
#define STEPS 3
/* Ulps of |w| a delta may be off: each step rounds the weight once (half an ulp), and the
 * reference subtracts exact initial weights. */
#define DELTA_ULPS 2.0

/* The bounds of one dtype and backend (see TOLERANCES above). */
struct tols {
    double loss[STEPS], gnorm[STEPS], bias_l2[STEPS], delta[STEPS], decay[STEPS];
    double param[3]; /* after step 3, parameters and their EMA, per group (biases, conv
                        weights, BN weights) */
    double stats;    /* after step 3, BN running stats and their EMA */
};

static const struct tols tol_f32 = { .loss = { 1e-4, 1e-4, 1e-4 },
                                     .gnorm = { 1e-4, 1e-4, 1e-4 },
                                     .bias_l2 = { 1e-4, 1e-4, 1e-4 },
                                     .delta = { 1e-4, 1e-4, 1e-4 },
                                     .decay = { 0.1, 0.1, 0.1 },
                                     .param = { 1e-4, 1e-4, 1e-4 },
                                     .stats = 1e-4 };
static const struct tols tol_cuda_f32 = { .loss = { 2e-3, 2e-3, 2e-3 },
                                          .gnorm = { 1e-2, 1e-2, 1e-2 },
                                          .bias_l2 = { 1e-2, 1e-2, 1e-2 },
                                          .delta = { 1e-2, 1e-2, 1e-2 },
                                          .decay = { 0.1, 0.1, 0.1 },
                                          .param = { 2e-3, 2e-3, 2e-3 },
                                          .stats = 2e-3 };
/* 3x the deviations measured with --device-path --amp bf16 (see TOLERANCES) */
static const struct tols tol_bf16 = { .loss = { 3.0e-2, 2.0e-2, 1.8e-1 },
                                      .gnorm = { 1.1e-1, 2.0e-1, 6.7e-1 },
                                      .bias_l2 = { 1.9, 1.4, 1.6 },
                                      .delta = { 2.4, 2.3, 3.1 },
                                      .decay = { 0.1, 0.7, 1.2 },
                                      .param = { 2.1, 7.6e-4, 2.4e-5 },
                                      .stats = 0.2 };

/* bf16 activations (--act) against PyTorch's bf16 step: 3x the larger of what --act nhwc
 * measured on two machines' CPU ops (see TOLERANCES). */
static const struct tols tol_x16 = { .loss = { 4.1e-2, 3.4e-2, 2.0e-2 },
                                     .gnorm = { 2.3e-1, 4.7e-1, 3.0e-1 },
                                     .bias_l2 = { 1.8, 1.7, 1.9 },
                                     .delta = { 2.5, 2.6, 7.4 },
                                     .decay = { 0.1, 2.2, 0.65 },
                                     .param = { 3.8, 7.5e-4, 2.4e-5 },
                                     .stats = 0.2 };

/* What a run does. */
struct mode {
    bool device_path, resident, cuda;
    int amp;    /* KERN_DT_F32 or KERN_DT_BF16 */
    int act;    /* trn_net_opts.act_store */
    bool quiet; /* the in-process host reference: no TAP lines */
    struct tols tol;
};

/* What a run leaves, for the bit-identity check of the device path against the host net. */
struct outcome {
    float *P, *B, *EP, *EB;
    size_t plen, blen;
    float loss[STEPS][4];
    double gnorm[STEPS];
};

/* The largest per-tensor error of a family of tensors, for the report. */
struct worst {
    double rel, l2;
    char name[128];
    int n;
};

/* The worst deviation of every compared quantity over the run, printed at the end (the bf16
 * bounds were set from these). */
struct measured {
    double loss[STEPS], gnorm[STEPS], bias_l2[STEPS], delta[STEPS], decay[STEPS];
};

static bool g_quiet;
#define CHECK(cond, ...) (g_quiet ? !!(cond) : ok((cond), __VA_ARGS__))
#define DIAG(...)                            \
    do {                                     \
        if (!g_quiet) tap_diag(__VA_ARGS__); \
    } while (0)

static const struct pdump_tensor *need(const struct pdump *d, const char *name)
{
    const struct pdump_tensor *t = pdump_find(d, name);
    if (!t) DIAG("dump has no entry %s", name);
    return t;
}

/* Whole tensor x against entry name under the criterion; one TAP line. */
static int cmp_tensor(const struct pdump *d, const char *name, const float *x, size_t numel,
                      double rtol, struct worst *w)
{
    const struct pdump_tensor *t = pdump_find(d, name);
    if (!t || t->numel != numel) {
        return CHECK(0, "%s is in the dump with %zu elements", name, numel);
    }
    struct pdump_tol tol;
    pdump_tol_default(&tol);
    tol.rtol = 0;
    tol.atol = rtol * t->maxabs;
    tol.check_stats = 0;
    struct pdump_result r;
    const int bad = pdump_compare(t, x, numel, &tol, g_quiet ? NULL : stdout, &r);
    double st[4];
    pdump_stats(x, numel, st);
    const double l2_rel = t->l2 > 0 ? fabs(st[0] - t->l2) / t->l2 : st[0];
    if (r.tensor_rel >= w->rel) {
        w->rel = r.tensor_rel;
        snprintf(w->name, sizeof w->name, "%s", name);
    }
    w->l2 = fmax(w->l2, l2_rel);
    w->n++;
    return CHECK(bad == 0 && l2_rel <= rtol, "%s: rel %.2e (abs %.2e), l2 rel %.2e", name,
                 r.tensor_rel, r.max_abs_err, l2_rel);
}

/*
 * The deltas of step s (params - init) at every stored element of step<s>.delta.*, for every
 * parameter; one TAP line for the step. Reports the worst element in units of its tolerance.
 */
static void check_deltas(const struct pdump *d, const struct trn_model *m, const float *P,
                         const float *init, int s, double wd_delta, const struct tols *tl,
                         struct measured *ms)
{
    double ew = 0, ww = 0; /* sum of err * w and of w^2 over the conv weights (group 1) */
    double be = 0, bw = 0; /* sum of err^2 and of ref^2 over the BN biases (initially 0) */
    const struct trn_model_info *I = trn_model_info(m);
    int missing = 0, n_t = 0;
    size_t checked = 0, bad = 0;
    double worst = 0, worst_abs = 0;
    char worst_name[128] = "";
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *T = trn_model_tensor(m, k);
        if (T->arena != TRN_ARENA_PARAM) continue;
        char nm[128];
        snprintf(nm, sizeof nm, "step%d.delta.%s", s, T->name);
        const struct pdump_tensor *dt = pdump_find(d, nm);
        if (!dt || dt->numel != T->numel) {
            if (missing++ < 3) DIAG("missing %s", nm);
            continue;
        }
        n_t++;
        for (size_t i = 0; i < dt->n_stored; i++) {
            const size_t j = T->offset + pdump_index(dt, i);
            const double got = (double)P[j] - (double)init[j], want = dt->data[i];
            const double ulps = DELTA_ULPS * FLT_EPSILON * fmax(fabs(init[j]), fabs(P[j]));
            const double tol = ulps + tl->delta[s - 1] * dt->maxabs + 1e-12;
            const double e = fabs(got - want) / tol;
            if (e > 1.0 && bad++ < 5)
                DIAG("%s[%zu]: %.9g vs %.9g (w %.9g)", nm, pdump_index(dt, i), got, want,
                     (double)init[j]);
            /* beyond the weight's own rounding, as a fraction of the delta tensor's max */
            if (dt->maxabs > 0)
                ms->delta[s - 1] =
                    fmax(ms->delta[s - 1], fmax(fabs(got - want) - ulps, 0) / dt->maxabs);
            if (T->role == TRN_T_BN_BIAS) {
                be += (got - want) * (got - want);
                bw += want * want;
            }
            if (T->role == TRN_T_CONV_WEIGHT || T->role == TRN_T_DETECT_WEIGHT) {
                ew += (got - want) * init[j];
                ww += (double)init[j] * init[j];
            }
            if (e > worst) {
                worst = e;
                worst_abs = fabs(got - want);
                snprintf(worst_name, sizeof worst_name, "%s", nm);
            }
            checked++;
        }
    }
    /* A wrong lr or momentum moves every bias delta by its own fraction, which the L2 error of
     * all BN-bias deltas shows even where bf16 noise loosens the per-element bound. */
    const double bl2 = bw > 0 ? sqrt(be / bw) : INFINITY;
    ms->bias_l2[s - 1] = bl2;
    CHECK(bl2 <= tl->bias_l2[s - 1], "step %d: BN-bias deltas within %.2e in L2 (rel %.2e)", s,
          tl->bias_l2[s - 1], bl2);
    CHECK(missing == 0 && bad == 0 && checked > 0,
          "step %d: deltas of %d tensors at %zu elements (worst %.3g of tolerance, abs %.3g, %s)",
          s, n_t, checked, worst, worst_abs, worst_name);
    /* Weight decay moves a conv weight by about a quarter of its ulp at these lrs, too little
     * to see per element; but a wrong decay is an error proportional to w in every element, so
     * the least-squares slope of (C - ref) on w, as a fraction of the decay's own slope
     * (wd_delta), exposes it where rounding noise averages out. */
    if (wd_delta != 0) {
        const double frac = ew / ww / wd_delta;
        ms->decay[s - 1] = fabs(frac);
        CHECK(fabs(frac) <= tl->decay[s - 1],
              "step %d: conv-weight deltas carry the right weight decay (error slope on w %.3g of "
              "the decay's %.3g)",
              s, frac, wd_delta);
    }
}

/* The device-resident state of one run (train.c's resident_setup), NULLs when not resident. */
struct dev_state {
    const struct kern_ops *K;
    struct kern_ctx *ctx;
    struct trn_optim_dev *odev;
    float *ema[2]; /* PARAM, BUFFER */
    float *targets, *out, *dp[3];
    int *nt;
    void *scratch;
    size_t scratch_bytes;
};

static int dev_setup(struct trn_net *net, const struct trn_model_info *I, struct trn_optim *opt,
                     struct trn_ema *ema, const struct trn_loss *L, int max_t, struct dev_state *ds)
{
    ds->K = trn_net_kern_ops(net);
    ds->ctx = trn_net_kern_ctx(net);
    const size_t P = I->arena_len[TRN_ARENA_PARAM], B = I->arena_len[TRN_ARENA_BUFFER];
    int rc = trn_optim_dev_create(opt, ds->K, ds->ctx, &ds->odev);
    int ldt = 0;
    void *const lowp = trn_net_dev_params_lowp(net, &ldt);
    if (rc == 0)
        rc = trn_optim_dev_set_params_lowp(ds->odev, lowp, ldt, trn_net_params_lowp_order(net));
    if (rc == 0)
        rc = trn_loss_dev_scratch_bytes(trn_loss_get_cfg(L), ds->K, ds->ctx, &ds->scratch_bytes);
    if (rc == 0) rc = kern_mem_alloc(ds->ctx, P * sizeof(float), (void **)&ds->ema[0]);
    if (rc == 0) rc = kern_mem_alloc(ds->ctx, B * sizeof(float), (void **)&ds->ema[1]);
    if (rc == 0)
        rc = kern_mem_alloc(ds->ctx, (size_t)max_t * 6 * sizeof(float), (void **)&ds->targets);
    if (rc == 0) rc = kern_mem_alloc(ds->ctx, sizeof(int), (void **)&ds->nt);
    if (rc == 0) rc = kern_mem_alloc(ds->ctx, KERN_YOLO_OUT_N * sizeof(float), (void **)&ds->out);
    if (rc == 0 && ds->scratch_bytes) rc = kern_mem_alloc(ds->ctx, ds->scratch_bytes, &ds->scratch);
    for (int l = 0; l < 3 && rc == 0; l++)
        rc = kern_mem_alloc(ds->ctx, (size_t)trn_net_output_shape(net, l, NULL) * sizeof(float),
                            (void **)&ds->dp[l]);
    if (rc == 0) rc = trn_net_set_resident(net, true);
    /* one upload of the whole training state, as resident_sync(H2D) */
    if (rc == 0) rc = trn_net_sync_model(net, KERN_COPY_H2D);
    if (rc == 0)
        rc = kern_mem_copy(ds->ctx, trn_optim_dev_buffer(ds->odev, 0),
                           trn_optim_state(opt, 0, NULL), P * sizeof(float), KERN_COPY_H2D);
    if (rc == 0)
        rc = kern_mem_copy(ds->ctx, ds->ema[0], trn_ema_arena(ema, TRN_ARENA_PARAM),
                           P * sizeof(float), KERN_COPY_H2D);
    if (rc == 0)
        rc = kern_mem_copy(ds->ctx, ds->ema[1], trn_ema_arena(ema, TRN_ARENA_BUFFER),
                           B * sizeof(float), KERN_COPY_H2D);
    if (rc == 0) rc = trn_net_sync_grad(net, KERN_COPY_H2D);
    return rc;
}

static void dev_free(struct dev_state *ds)
{
    if (!ds->ctx) return;
    kern_mem_free(ds->ctx, ds->ema[0]);
    kern_mem_free(ds->ctx, ds->ema[1]);
    kern_mem_free(ds->ctx, ds->targets);
    kern_mem_free(ds->ctx, ds->nt);
    kern_mem_free(ds->ctx, ds->out);
    kern_mem_free(ds->ctx, ds->scratch);
    for (int l = 0; l < 3; l++)
        kern_mem_free(ds->ctx, ds->dp[l]);
    trn_optim_dev_destroy(ds->odev);
}

/*
 * train_batch_resident's step: forward, device loss, backward, the device SGD + parameter EMA,
 * zero grad, the buffers' EMA. it: the loss items (downloaded); *sumsq: the step's sum of squares.
 */
static int dev_step(struct trn_net *net, const struct trn_model_info *I, struct trn_optim *opt,
                    struct trn_ema *ema, const struct trn_loss *L, struct dev_state *ds,
                    const float *img, const float *tg, int nt, int64_t ni,
                    struct trn_loss_items *it, struct trn_optim_sched *sch, double *sumsq)
{
    const float *out[3];
    int rc = trn_net_forward_dev(net, img, false, true, out);
    float raw[KERN_YOLO_OUT_N];
    if (!rc)
        rc = kern_mem_copy(ds->ctx, ds->targets, (void *)tg, (size_t)nt * 6 * sizeof(float),
                           KERN_COPY_H2D);
    if (!rc) rc = kern_mem_copy(ds->ctx, ds->nt, &nt, sizeof nt, KERN_COPY_H2D);
    if (!rc)
        rc = trn_loss_compute_dev(trn_loss_get_cfg(L), ds->K, ds->ctx, out, ds->targets, ds->nt,
                                  ds->dp, 0, ds->out, ds->scratch, ds->scratch_bytes);
    if (!rc) rc = kern_mem_copy(ds->ctx, raw, ds->out, sizeof raw, KERN_COPY_D2H);
    if (!rc) rc = trn_loss_items_from_out(raw, it);
    if (!rc) rc = trn_net_backward_dev(net, (const float *const *)ds->dp);
    struct trn_optim_counters c;
    if (!rc) rc = trn_optim_schedule(trn_optim_get_opts(opt), 0, ni, sch);
    if (!rc) rc = trn_optim_get_counters(opt, &c);
    if (rc) return rc;
    if (ni - c.last_opt_step < sch->accumulate) return -EAGAIN; /* every step steps here */
    const int64_t upd = trn_ema_updates(ema) + 1;
    const double dec = trn_ema_decay(upd);
    const struct trn_optim_dev_step_opts so = { .grad_scale = 1.0f,
                                                .ema = ds->ema[0],
                                                .ema_decay = dec };
    float *const grad = trn_net_dev_grad(net);
    rc = trn_optim_dev_step(ds->odev, trn_net_dev_arena(net, TRN_ARENA_PARAM), grad, sch, &so);
    if (!rc)
        rc = kern_mem_copy(ds->ctx, sumsq, trn_optim_dev_buffer(ds->odev, 1), sizeof *sumsq,
                           KERN_COPY_D2H);
    if (!rc) rc = trn_optim_dev_zero_grad(ds->odev, grad);
    if (!rc)
        rc = ds->K->ema_update(ds->ctx, ds->ema[1], trn_net_dev_arena(net, TRN_ARENA_BUFFER),
                               I->arena_len[TRN_ARENA_BUFFER], (float)dec, (float)(1.0 - dec));
    if (rc) return rc;
    trn_ema_set_updates(ema, upd);
    trn_optim_get_counters(opt, &c);
    c.last_opt_step = ni;
    trn_optim_set_counters(opt, &c);
    return 0;
}

/*
 * Three steps in mode md against the dump; res (may be NULL) receives copies of the final state.
 * Returns 0, or -1 when something could not even be set up (a Bail out was printed or a check
 * failed).
 */
static int run(const struct mode *md, const struct pdump *d, struct outcome *res)
{
    g_quiet = md->quiet;
    const struct tols *tl = &md->tol;
    int ret = -1;
    char err[256], yaml[4200];
    struct trn_model *m = NULL;
    /* FFYOLO_MODELS_DIR: a checkout at another path (a lent GPU machine: scripts/gpu-check) */
    const char *dir = getenv("FFYOLO_MODELS_DIR");
    snprintf(yaml, sizeof yaml, "%s/yolov5n.yaml", dir && *dir ? dir : TRN_TEST_MODELS_DIR);
    int rc = trn_model_load(yaml, NULL, &m, err, sizeof err);
    if (rc) {
        printf("Bail out! %s\n", err);
        return -1;
    }
    trn_model_init(m, 0);
    const struct trn_model_info *I = trn_model_info(m);
    const size_t plen = I->arena_len[TRN_ARENA_PARAM], blen = I->arena_len[TRN_ARENA_BUFFER];
    float *P = trn_model_arena(m, TRN_ARENA_PARAM);
    float *B = trn_model_arena(m, TRN_ARENA_BUFFER);
    const int64_t *C = trn_model_arena(m, TRN_ARENA_COUNT);

    struct kern_ctx *ctx = NULL;
    struct trn_net *net = NULL;
    struct trn_loss *L = NULL;
    struct trn_optim *opt = NULL;
    struct trn_ema *ema = NULL;
    struct dev_state ds;
    memset(&ds, 0, sizeof ds);
    struct measured ms = { 0 };
    const size_t n_img = (size_t)BATCH * 3 * IMG * IMG;
    float *img = malloc(n_img * sizeof(float));
    float *init = malloc(plen * sizeof(float));
    float *dp[3] = { NULL, NULL, NULL };
    if (!img || !init) {
        printf("Bail out! out of memory\n");
        goto out;
    }
    memcpy(init, P, plen * sizeof(float));
    for (size_t j = 0; j < n_img; j++)
        img[j] = trn_model_init_uniform(0, 1000, j);

    struct trn_net_opts no;
    trn_net_opts_default(&no);
    /* the CPU context also runs the host loss of a non-resident CUDA step */
    rc = kern_ctx_create(NULL, &ctx);
    if (!CHECK(rc == 0, "kern context")) goto out;
    if (md->cuda) {
        no.device = 0;
    } else {
        no.ctx = ctx;
        no.device_path = md->device_path;
    }
    no.amp = md->amp;
    no.act_store = md->act;
    rc = trn_net_create(m, BATCH, IMG, IMG, &no, &net, err, sizeof err);
    if (!CHECK(rc == 0, "create net (%s%s%s%s): %s", md->cuda ? "CUDA device 0" : "CPU ops",
               md->device_path ? ", device data path" : "", md->resident ? ", resident" : "",
               md->amp == KERN_DT_BF16 ? ", bf16 autocast" : "", rc ? err : "ok"))
        goto out;
    if (!md->quiet) tap_diag("net engine: %s", trn_net_engine(net));
    struct trn_hyp h;
    trn_hyp_default(&h);
    struct trn_loss_cfg lc;
    rc = trn_loss_cfg_from_model(m, &h, BATCH, IMG, 0.0f, 64, &lc);
    if (!rc) rc = trn_loss_create(&lc, &L);
    if (!CHECK(rc == 0, "loss for yolov5n at %d, bs %d: %s", IMG, BATCH, trn_loss_strerror(rc)))
        goto out;
    struct trn_optim_opts oo;
    trn_optim_opts_default(&oo);
    trn_optim_opts_from_hyp(&oo, &h);
    oo.batch_size = BATCH;
    oo.nb = 100;
    oo.epochs = 300;
    rc = trn_optim_create(m, &oo, &opt);
    if (!rc) rc = trn_ema_create(m, &ema);
    if (!CHECK(rc == 0, "optimizer and EMA: %s", trn_optim_strerror(rc))) goto out;
    for (int l = 0; l < 3; l++) {
        dp[l] = malloc((size_t)trn_net_output_shape(net, l, NULL) * sizeof(float));
        if (!dp[l]) goto out;
    }

    const struct pdump_tensor *tg = need(d, "targets"), *sl = need(d, "step.loss");
    const struct pdump_tensor *gn = need(d, "step.gradnorm"), *cc = need(d, "step.clip_coef");
    const struct pdump_tensor *lr = need(d, "step.lr"), *mo = need(d, "step.momentum");
    const struct pdump_tensor *ed = need(d, "step.ema_decay");
    if (!CHECK(tg && tg->numel % 6 == 0 && sl && sl->numel == 4 * STEPS && gn && cc && lr &&
                   lr->numel == 3 * STEPS && mo && ed,
               "dump has targets and the step.* entries"))
        goto out;
    const int nt = (int)(tg->numel / 6);
    if (md->resident) {
        rc = dev_setup(net, I, opt, ema, L, lc.max_targets, &ds);
        if (!CHECK(rc == 0 && trn_net_resident(net),
                   "resident step set up (device optimizer, EMA, loss buffers, one upload): %s",
                   rc == -ENOTSUP || rc == -ENOMEM || rc == -EINVAL ? trn_optim_strerror(rc)
                                                                    : kern_strerror(rc)))
            goto out;
    }

    double w_sched = 0, w_decay = 0;
    /* The decay's share of a conv weight's delta: wd * w * sum of what SGD does to a unit
     * gradient held constant (nesterov: buf = m buf + 1, step lr (1 + m buf)). */
    double unit_buf = 0, unit_delta = 0;
    trn_net_zero_grad(net);
    for (int s = 0; s < STEPS; s++) {
        struct trn_loss_items it;
        struct trn_optim_sched sch;
        double gnorm = 0;
        bool stepped = false, clipped = false;
        if (md->resident) {
            double sumsq = NAN;
            rc = dev_step(net, I, opt, ema, L, &ds, img, tg->data, nt, s, &it, &sch, &sumsq);
            if (!CHECK(rc == 0, "step %d: resident step: %s", s + 1,
                       rc == -EAGAIN ? "did not step" : trn_strerror(rc)))
                goto out;
            stepped = true;
            gnorm = sqrt(sumsq);
            clipped = !(gnorm <= oo.max_grad_norm);
            /* the model down for the deltas (train.c does so for checkpoints and validation) */
            rc = trn_net_sync_model(net, KERN_COPY_D2H);
            if (!CHECK(rc == 0, "step %d: parameters down: %s", s + 1, kern_strerror(rc))) goto out;
        } else {
            const float *outs[3];
            rc = trn_net_forward(net, img, true, outs);
            if (!CHECK(rc == 0, "step %d: train forward: %s", s + 1, trn_strerror(rc))) goto out;
            rc = trn_loss_compute(L, ctx, outs, tg->data, nt, dp, &it);
            if (!CHECK(rc == 0, "step %d: loss: %s", s + 1, trn_loss_strerror(rc))) goto out;
        }
        const float got[4] = { it.raw_box, it.raw_obj, it.raw_cls, it.total };
        double e = 0;
        for (int k = 0; k < 4; k++) {
            e = fmax(e, fabs(got[k] - sl->data[4 * s + k]) / fabs(sl->data[4 * s + k]));
            if (res) res->loss[s][k] = got[k];
        }
        ms.loss[s] = e;
        CHECK(e <= tl->loss[s],
              "step %d: loss before the step: lbox %.8g lobj %.8g lcls %.8g total %.8g vs %.8g "
              "%.8g %.8g %.8g (rel %.2e)",
              s + 1, got[0], got[1], got[2], got[3], sl->data[4 * s], sl->data[4 * s + 1],
              sl->data[4 * s + 2], sl->data[4 * s + 3], e);
        if (!md->resident) {
            rc = trn_net_backward(net, (const float *const *)dp);
            if (!CHECK(rc == 0, "step %d: backward: %s", s + 1, trn_strerror(rc))) goto out;
            struct trn_optim_report rep;
            rc = trn_optim_after_batch(opt, P, trn_net_grad(net), 0, s, &rep);
            stepped = rc == 1 && rep.stepped;
            clipped = rep.clipped;
            gnorm = rep.grad_norm;
            sch = rep.sched;
            /* the device grad arena is not the host mirror the optimizer zeroed (net.h DEVICES) */
            trn_net_zero_grad(net);
            rc = trn_ema_update(ema, P, B);
            if (!CHECK(rc == 0, "step %d: EMA update", s + 1)) goto out;
        }
        const double ne = fabs(gnorm - gn->data[s]) / gn->data[s];
        ms.gnorm[s] = ne;
        if (res) res->gnorm[s] = gnorm;
        CHECK(stepped && !clipped && cc->data[s] == 1.0f && ne <= tl->gnorm[s],
              "step %d: stepped at ni %d (accumulate %d), grad norm %.7g vs %.7g (rel %.2e), not "
              "clipped",
              s + 1, s, sch.accumulate, gnorm, gn->data[s], ne);
        double se = fabs(sch.momentum - mo->data[s]);
        for (int g = 0; g < 3; g++)
            se = fmax(se, fabs(sch.lr[g] - lr->data[3 * s + g]));
        w_sched = fmax(w_sched, se);
        /* the dump's float32 rounding of python's doubles is all that may differ */
        CHECK(se <= 1e-7, "step %d: lr %.7g %.7g %.7g, momentum %.7g equal step.lr / step.momentum",
              s + 1, sch.lr[0], sch.lr[1], sch.lr[2], sch.momentum);
        const double de = fabs(trn_ema_decay(trn_ema_updates(ema)) - ed->data[s]);
        w_decay = fmax(w_decay, de);
        CHECK(trn_ema_updates(ema) == s + 1 && de <= 1e-9,
              "step %d: EMA update %lld, decay %.9g vs %.9g", s + 1,
              (long long)trn_ema_updates(ema), trn_ema_decay(trn_ema_updates(ema)), ed->data[s]);
        unit_buf = s == 0 ? 1.0 : sch.momentum * unit_buf + 1.0;
        unit_delta -= sch.lr[1] * (1.0 + sch.momentum * unit_buf);
        check_deltas(d, m, P, init, s + 1, trn_optim_weight_decay(&oo) * unit_delta, tl, &ms);
    }
    if (md->resident) {
        /* the EMA down, as resident_sync(D2H) before a checkpoint */
        rc = kern_mem_copy(ds.ctx, trn_ema_arena(ema, TRN_ARENA_PARAM), ds.ema[0],
                           plen * sizeof(float), KERN_COPY_D2H);
        if (!rc)
            rc = kern_mem_copy(ds.ctx, trn_ema_arena(ema, TRN_ARENA_BUFFER), ds.ema[1],
                               blen * sizeof(float), KERN_COPY_D2H);
        if (!CHECK(rc == 0, "EMA down: %s", kern_strerror(rc))) goto out;
    }

    /* The model and its EMA after step 3. */
    struct worst wp[3] = { { 0 } }, we = { 0 }, web = { 0 }, wb = { 0 };
    const float *EP = trn_ema_arena(ema, TRN_ARENA_PARAM);
    const float *EB = trn_ema_arena(ema, TRN_ARENA_BUFFER);
    for (int g = 0; g < 3; g++) {
        const int *idx;
        const int n = trn_model_group(m, g, &idx);
        for (int k = 0; k < n; k++) {
            const struct trn_tensor *T = trn_model_tensor(m, idx[k]);
            char nm[128];
            snprintf(nm, sizeof nm, "step3.param.%s", T->name);
            cmp_tensor(d, nm, P + T->offset, T->numel, tl->param[g], &wp[g]);
            snprintf(nm, sizeof nm, "step3.ema.%s", T->name);
            cmp_tensor(d, nm, EP + T->offset, T->numel, tl->param[g], &we);
        }
    }
    const struct pdump_tensor *nbt = need(d, "step3.num_batches_tracked");
    int n_count = 0, count_bad = 0, n_param = 0;
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *T = trn_model_tensor(m, k);
        char nm[128];
        n_param += T->arena == TRN_ARENA_PARAM;
        if (T->role == TRN_T_BN_MEAN || T->role == TRN_T_BN_VAR) {
            snprintf(nm, sizeof nm, "step3.buffer.%s", T->name);
            cmp_tensor(d, nm, B + T->offset, T->numel, tl->stats, &wb);
            snprintf(nm, sizeof nm, "step3.ema.%s", T->name);
            cmp_tensor(d, nm, EB + T->offset, T->numel, tl->stats, &web);
        } else if (T->role == TRN_T_BN_COUNT) {
            n_count++;
            if (!nbt || (double)C[T->offset] != nbt->data[0]) {
                if (count_bad++ < 3) DIAG("%s = %lld", T->name, (long long)C[T->offset]);
            }
        }
    }
    CHECK(wp[0].n + wp[1].n + wp[2].n == n_param && we.n == n_param,
          "every parameter compared (%d), and its EMA", n_param);
    CHECK(nbt && n_count > 0 && count_bad == 0, "num_batches_tracked of all %d BNs = %g", n_count,
          nbt ? nbt->data[0] : NAN);

    DIAG("schedule: worst abs %.2e; EMA decay: worst abs %.2e", w_sched, w_decay);
    for (int s = 0; s < STEPS; s++)
        DIAG("step %d measured: loss rel %.2e, grad norm rel %.2e, BN-bias deltas L2 rel %.2e, "
             "worst delta %.2e of its tensor's max beyond %g ulp, decay slope %.2e",
             s + 1, ms.loss[s], ms.gnorm[s], ms.bias_l2[s], ms.delta[s], DELTA_ULPS, ms.decay[s]);
    static const char *const gname[3] = { "biases (group 0)", "conv weights (group 1)",
                                          "BN weights (group 2)" };
    for (int g = 0; g < 3; g++)
        DIAG("step3.param %s: %d tensors, worst rel %.2e (%s), worst l2 rel %.2e", gname[g],
             wp[g].n, wp[g].rel, wp[g].name, wp[g].l2);
    DIAG("step3.ema params: %d tensors, worst rel %.2e (%s), worst l2 rel %.2e", we.n, we.rel,
         we.name, we.l2);
    DIAG("step3.buffer BN running stats: %d tensors, worst rel %.2e (%s), worst l2 rel %.2e", wb.n,
         wb.rel, wb.name, wb.l2);
    DIAG("step3.ema BN running stats: %d tensors, worst rel %.2e (%s), worst l2 rel %.2e", web.n,
         web.rel, web.name, web.l2);
    if (res) {
        res->plen = plen;
        res->blen = blen;
        res->P = malloc(plen * sizeof(float));
        res->EP = malloc(plen * sizeof(float));
        res->B = malloc(blen * sizeof(float));
        res->EB = malloc(blen * sizeof(float));
        if (!res->P || !res->EP || !res->B || !res->EB) goto out;
        memcpy(res->P, P, plen * sizeof(float));
        memcpy(res->EP, EP, plen * sizeof(float));
        memcpy(res->B, B, blen * sizeof(float));
        memcpy(res->EB, EB, blen * sizeof(float));
    }
    ret = 0;
out:
    dev_free(&ds);
    for (int l = 0; l < 3; l++)
        free(dp[l]);
    trn_ema_destroy(ema);
    trn_optim_destroy(opt);
    trn_loss_destroy(L);
    trn_net_destroy(net);
    kern_ctx_destroy(ctx);
    free(init);
    free(img);
    trn_model_destroy(m);
    g_quiet = false;
    return ret;
}

static void outcome_free(struct outcome *o)
{
    free(o->P);
    free(o->B);
    free(o->EP);
    free(o->EB);
}

static int usage(void)
{
    printf("Bail out! usage: test_train_parity DUMP [--device-path] [--resident] [--cuda] "
           "[--amp bf16|fp32] [--act nhwc|nchw]\n");
    return 99;
}

int main(int argc, char **argv)
{
    struct mode md = { .amp = KERN_DT_F32 };
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--device-path")) {
            md.device_path = true;
        } else if (!strcmp(argv[i], "--resident")) {
            md.resident = true;
        } else if (!strcmp(argv[i], "--cuda")) {
            md.cuda = true;
        } else if (!strcmp(argv[i], "--act") && i + 1 < argc) {
            i++;
            if (!strcmp(argv[i], "nhwc"))
                md.act = TRN_ACT_BF16_NHWC;
            else if (!strcmp(argv[i], "nchw"))
                md.act = TRN_ACT_BF16_NCHW;
            else
                return usage();
        } else if (!strcmp(argv[i], "--amp") && i + 1 < argc) {
            i++;
            if (!strcmp(argv[i], "bf16"))
                md.amp = KERN_DT_BF16;
            else if (strcmp(argv[i], "fp32"))
                return usage();
        } else {
            return usage();
        }
    }
    if ((md.resident && !md.device_path && !md.cuda) || (md.cuda && md.device_path)) return usage();
    if (md.cuda && kern_cuda_device_count() < 1) {
        printf("1..0 # SKIP no CUDA device (kern_cuda_device_count() = 0): the training-step "
               "parity on CUDA did not run\n");
        fprintf(stderr, "test_train_parity: SKIPPED: no CUDA device\n");
        return 77;
    }
    if (argc < 2 || access(argv[1], R_OK) != 0) tap_skip_all("no parity dump (make_parity_ref.py)");
    if (md.act != TRN_ACT_F32 && md.amp != KERN_DT_BF16) return usage();
    if (md.amp == KERN_DT_BF16) {
        md.tol = md.act != TRN_ACT_F32 ? tol_x16 : tol_bf16;
        if (md.cuda) {
            const struct tols *c = &tol_cuda_f32;
            for (int s = 0; s < STEPS; s++) {
                md.tol.loss[s] = fmax(md.tol.loss[s], c->loss[s]);
                md.tol.gnorm[s] = fmax(md.tol.gnorm[s], c->gnorm[s]);
                md.tol.bias_l2[s] = fmax(md.tol.bias_l2[s], c->bias_l2[s]);
                md.tol.delta[s] = fmax(md.tol.delta[s], c->delta[s]);
                md.tol.decay[s] = fmax(md.tol.decay[s], c->decay[s]);
            }
            for (int g = 0; g < 3; g++)
                md.tol.param[g] = fmax(md.tol.param[g], c->param[g]);
            md.tol.stats = fmax(md.tol.stats, c->stats);
        }
    } else {
        md.tol = md.cuda ? tol_cuda_f32 : tol_f32;
    }
    struct pdump *d = NULL;
    int rc = pdump_open(argv[1], &d);
    if (rc) {
        printf("Bail out! %s: %s\n", argv[1], pdump_strerror(rc));
        return 99;
    }
    struct outcome got = { 0 }, ref = { 0 }, lay = { 0 };
    const bool layouts = md.act == TRN_ACT_BF16_NHWC && !md.cuda;
    const int rrc = run(&md, d, md.device_path || layouts ? &got : NULL);
    if (rrc == 0 && layouts) {
        /* the same executor in NCHW: on the CPU ops the layouts give the same bits */
        struct mode nchw = md;
        nchw.act = TRN_ACT_BF16_NCHW;
        nchw.quiet = true;
        nchw.device_path = nchw.resident = false;
        const int nrc = run(&nchw, d, &lay);
        if (ok(nrc == 0, "NCHW run")) {
            const size_t pb = got.plen * sizeof(float), bb = got.blen * sizeof(float);
            ok(!memcmp(got.P, lay.P, pb) && !memcmp(got.EP, lay.EP, pb) &&
                   !memcmp(got.B, lay.B, bb) && !memcmp(got.EB, lay.EB, bb) &&
                   !memcmp(got.loss, lay.loss, sizeof got.loss) &&
                   !memcmp(got.gnorm, lay.gnorm, sizeof got.gnorm),
               "bf16 NHWC and NCHW activations: parameters, EMA, BN stats, losses and gradient "
               "norms of three steps bit-identical");
        }
    }
    if (rrc == 0 && md.device_path) {
        /* the host CPU net, in this process, with the same dtype: the device path must give
           its bits */
        struct mode host = md;
        host.device_path = host.resident = false;
        host.quiet = true;
        const int hrc = run(&host, d, &ref);
        if (ok(hrc == 0, "host reference run")) {
            const size_t pb = got.plen * sizeof(float), bb = got.blen * sizeof(float);
            ok(!memcmp(got.P, ref.P, pb) && !memcmp(got.EP, ref.EP, pb),
               "device path: parameters and their EMA after step 3 bit-identical to the host net");
            ok(!memcmp(got.B, ref.B, bb) && !memcmp(got.EB, ref.EB, bb),
               "device path: BN running stats and their EMA bit-identical to the host net");
            ok(!memcmp(got.loss, ref.loss, sizeof got.loss) &&
                   !memcmp(got.gnorm, ref.gnorm, sizeof got.gnorm),
               "device path: losses and gradient norms of every step bit-identical to the host "
               "net");
        }
    }
    outcome_free(&got);
    outcome_free(&ref);
    outcome_free(&lay);
    pdump_close(d);
    return tap_done();
}
