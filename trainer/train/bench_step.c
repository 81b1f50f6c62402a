/*
 * `yolo-train --bench`: the training step on synthetic batches (see bench_step.h).
 */
#include "bench_step.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hyp.h"
#include "kern_cuda.h"
#include "loss.h"
#include "model.h"
#include "net.h"
#include "optim.h"
#include "plans.h"
#include "errors.h"
#include "util.h"

void trn_bench_step_opts_default(struct trn_bench_step_opts *o)
{
    memset(o, 0, sizeof *o);
    o->img = 640;
    o->batch = 16;
    o->device = -1;
    o->warmup = 3;
    o->steps = 10;
    o->boxes = 8;
    o->cpu_engine = TRN_CPU_ENGINE_AUTO;
}

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s;
}

static float unif(uint64_t *s)
{
    return (float)((double)(next(s) >> 11) * 0x1.0p-53);
}

struct bench {
    struct trn_plans plans; /* the conv plan table the net's context borrows */
    struct trn_model *m;
    struct trn_net *net;
    struct kern_ctx *cpu; /* the loss runs on the host, as in train.c */
    struct trn_loss *loss;
    struct trn_optim *opt;
    struct trn_ema *ema;
    float *images, *targets;
    float *dp[TRN_MODEL_MAX_LEVELS];
    /* the resident step: buffers in the net's backend memory */
    struct kern_ctx *dctx;
    const struct kern_ops *dK;
    struct trn_optim_dev *odev;
    float *d_ema[2], *d_targets, *d_out;
    void *d_images;  /* the batch as the step reads it (THE STEM'S INPUT: its bf16 tensor) */
    size_t in_bytes; /* bytes at d_images */
    int s2d;         /* the kern_augment.h dtype of d_images, or 0: float32 */
    int batch, img;  /* the batch's shape: batch x 3 x img x img */
    float *d_dp[TRN_MODEL_MAX_LEVELS];
    float *raw_dp[TRN_MODEL_MAX_LEVELS]; /* the net's raw head's gradients, when on */
    float *const *rdp;                   /* what the resident steps' loss writes: one of those */
    int *d_nt;
    void *d_scratch;
    size_t scratch_bytes, bytes;
    /* cuda_graph: the captured step and what it reads per step */
    struct kern_graph *g;
    struct kern_sgd_dyn *d_dyn; /* lr, momentum, first, EMA decay (backend memory) */
    size_t n_buf;               /* floats of the BUFFER arena */
};

/* Backend memory for the resident step, counted in b->bytes. */
static int dalloc(struct bench *b, size_t bytes, void **out)
{
    const int rc = kern_mem_alloc(b->dctx, bytes, out);
    if (rc == 0) b->bytes += bytes;
    return rc;
}

/* Wait for the context's queued work (CUDA); a no-op on the CPU, whose ops are synchronous. */
static int dsync(struct bench *b)
{
    return kern_ctx_backend(b->dctx) == KERN_BACKEND_CUDA ? kern_cuda_ctx_sync(b->dctx) : 0;
}

static void bench_free(struct bench *b)
{
    kern_graph_destroy(b->g);
    if (b->dctx) kern_mem_free(b->dctx, b->d_dyn);
    if (b->dctx) {
        void *const t[] = { b->d_ema[0], b->d_ema[1], b->d_targets, b->d_out,
                            b->d_images, b->d_nt,     b->d_scratch };
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
            kern_mem_free(b->dctx, t[k]);
        for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
            kern_mem_free(b->dctx, b->d_dp[l]);
    }
    trn_optim_dev_destroy(b->odev);
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
        free(b->dp[l]);
    free(b->images);
    free(b->targets);
    trn_ema_destroy(b->ema);
    trn_optim_destroy(b->opt);
    trn_loss_destroy(b->loss);
    kern_ctx_destroy(b->cpu);
    trn_net_destroy(b->net);
    trn_plans_close(&b->plans); /* after the net's context, which borrows it */
    trn_model_destroy(b->m);
}

/* Plan the resident step: the device optimizer and the loss on the net's context, the EMA, the
 * batch and the targets uploaded once. */
static int resident_setup(struct bench *b, const struct trn_model_info *I, int nt, size_t n_img,
                          char *err, size_t err_cap)
{
    b->dctx = trn_net_kern_ctx(b->net);
    b->dK = trn_net_kern_ops(b->net);
    const size_t P = I->arena_len[TRN_ARENA_PARAM], B = I->arena_len[TRN_ARENA_BUFFER];
    int rc = trn_optim_dev_create(b->opt, b->dK, b->dctx, &b->odev);
    /* the steps keep the net's AMP weights current (net.h AMP WEIGHTS) */
    int ldt = 0;
    void *const lowp = trn_net_dev_params_lowp(b->net, &ldt);
    if (rc == 0)
        rc = trn_optim_dev_set_params_lowp(b->odev, lowp, ldt, trn_net_params_lowp_order(b->net));
    if (rc < 0) {
        snprintf(err, err_cap, "device optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    b->bytes += P * sizeof(float) + sizeof(double) + sizeof(int32_t); /* momentum, sumsq, flag */
    const struct trn_loss_cfg *cfg = trn_loss_get_cfg(b->loss);
    rc = trn_loss_dev_scratch_bytes(cfg, b->dK, b->dctx, &b->scratch_bytes);
    if (!rc) rc = dalloc(b, P * sizeof(float), (void **)&b->d_ema[0]);
    if (!rc) rc = dalloc(b, B * sizeof(float), (void **)&b->d_ema[1]);
    if (!rc) rc = dalloc(b, (size_t)cfg->max_targets * 6 * sizeof(float), (void **)&b->d_targets);
    if (!rc) rc = dalloc(b, KERN_YOLO_OUT_N * sizeof(float), (void **)&b->d_out);
    if (!rc) rc = dalloc(b, sizeof(int), (void **)&b->d_nt);
    if (!rc) rc = dalloc(b, n_img * sizeof(float), (void **)&b->d_images);
    if (!rc && b->scratch_bytes) rc = dalloc(b, b->scratch_bytes, &b->d_scratch);
    for (int l = 0; l < I->nl && !rc; l++)
        rc = dalloc(b, (size_t)trn_net_output_shape(b->net, l, NULL) * sizeof(float),
                    (void **)&b->d_dp[l]);
    b->rdp = trn_net_raw_dhead(b->net, b->raw_dp) > 0 ? b->raw_dp : b->d_dp;
    if (!rc) rc = trn_net_set_resident(b->net, true);
    if (!rc) rc = trn_net_sync_model(b->net, KERN_COPY_H2D);
    if (!rc)
        rc = kern_mem_copy(b->dctx, b->d_ema[0], trn_ema_arena(b->ema, TRN_ARENA_PARAM),
                           P * sizeof(float), KERN_COPY_H2D);
    if (!rc)
        rc = kern_mem_copy(b->dctx, b->d_ema[1], trn_ema_arena(b->ema, TRN_ARENA_BUFFER),
                           B * sizeof(float), KERN_COPY_H2D);
    if (!rc && nt > 0)
        rc = kern_mem_copy(b->dctx, b->d_targets, b->targets, (size_t)nt * 6 * sizeof(float),
                           KERN_COPY_H2D);
    if (!rc) rc = kern_mem_copy(b->dctx, b->d_nt, &nt, sizeof nt, KERN_COPY_H2D);
    /* the batch goes up once, as PyTorch's bench keeps x on the device: training's GPU loader
     * delivers its batches on the copy queue, overlapped, so a 315 MB float32 upload per step
     * (yolov5n 640 b64, pageable) would time a copy training never makes */
    if (!rc)
        rc = kern_mem_copy(b->dctx, b->d_images, b->images, n_img * sizeof(float), KERN_COPY_H2D);
    b->in_bytes = n_img * sizeof(float);
    if (!rc && b->s2d) {
        /* the stem's space-to-depth of those images, in the net's slot, then as the batch */
        const struct kern_s2d sd = {
            b->batch,       3,
            b->img,         b->img,
            KERN_AUG_S2D_C, b->s2d == KERN_AUG_BF16_S2D_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW
        };
        void *const slot = trn_net_dev_input(b->net);
        b->in_bytes = (size_t)b->batch * kern_aug_image_bytes(b->s2d, b->img, b->img);
        rc = b->dK->cast_f32_lowp_s2d(b->dctx, &sd, KERN_DT_BF16, slot, b->d_images);
        if (!rc) rc = kern_mem_copy(b->dctx, b->d_images, slot, b->in_bytes, KERN_COPY_D2D);
    }
    if (rc < 0) snprintf(err, err_cap, "resident step setup: %s", kern_strerror(rc));
    return rc;
}

/* One resident step (train.c's train_batch_resident without the accumulation policy: every
 * step is an optimizer step); t: out, the clock after each of the 5 phases. */
static int resident_step(struct bench *b, const struct trn_model_info *I, size_t n_img,
                         const struct trn_optim_sched *sch, int64_t upd, double t[5], float *loss,
                         char *err, size_t err_cap)
{
    const float *out[TRN_MODEL_MAX_LEVELS];
    (void)n_img; /* the batch is on the device since resident_setup */
    int rc = trn_net_forward_dev(b->net, b->d_images, true, true, out);
    if (!rc) rc = dsync(b);
    t[0] = trn_now_s();
    if (rc < 0) {
        snprintf(err, err_cap, "forward: %s", trn_strerror(rc));
        return rc;
    }
    float raw[KERN_YOLO_OUT_N];
    struct trn_loss_items items;
    rc = trn_loss_compute_dev(trn_loss_get_cfg(b->loss), b->dK, b->dctx, out, b->d_targets, b->d_nt,
                              b->rdp, 0, b->d_out, b->d_scratch, b->scratch_bytes);
    if (!rc) rc = kern_mem_copy(b->dctx, raw, b->d_out, sizeof raw, KERN_COPY_D2H);
    if (!rc) rc = trn_loss_items_from_out(raw, &items);
    t[1] = trn_now_s();
    if (rc < 0) {
        snprintf(err, err_cap, "loss: %s", trn_loss_strerror(rc));
        return rc;
    }
    *loss = items.total;
    rc = trn_net_backward_dev(b->net, (const float *const *)b->rdp);
    if (!rc) rc = dsync(b);
    t[2] = trn_now_s();
    if (rc < 0) {
        snprintf(err, err_cap, "backward: %s", trn_strerror(rc));
        return rc;
    }
    const double d = trn_ema_decay(upd);
    const struct trn_optim_dev_step_opts so = { 1.0f, 0, b->d_ema[0], d };
    float *grad = trn_net_dev_grad(b->net);
    rc = trn_optim_dev_step(b->odev, trn_net_dev_arena(b->net, TRN_ARENA_PARAM), grad, sch, &so);
    if (!rc) rc = trn_optim_dev_zero_grad(b->odev, grad);
    if (!rc) rc = dsync(b);
    t[3] = trn_now_s();
    if (rc < 0) {
        snprintf(err, err_cap, "optimizer: %s", kern_strerror(rc));
        return rc;
    }
    rc = b->dK->ema_update(b->dctx, b->d_ema[1], trn_net_dev_arena(b->net, TRN_ARENA_BUFFER),
                           I->arena_len[TRN_ARENA_BUFFER], (float)d, (float)(1.0 - d));
    if (!rc) rc = dsync(b);
    t[4] = trn_now_s();
    if (rc < 0) snprintf(err, err_cap, "EMA: %s", kern_strerror(rc));
    return rc;
}

/* The recorded step (train.c's graph_step_run, every step an optimizer step): reads only b's
 * fixed buffers, so a replay redoes it with the batch and scalars uploaded before. */
static int bench_graph_run(void *arg)
{
    struct bench *b = arg;
    const float *out[TRN_MODEL_MAX_LEVELS];
    float *const grad = trn_net_dev_grad(b->net);
    int rc = trn_net_forward_dev(b->net, trn_net_dev_input(b->net), true, true, out);
    if (!rc)
        rc = trn_loss_compute_dev(trn_loss_get_cfg(b->loss), b->dK, b->dctx, out, b->d_targets,
                                  b->d_nt, b->rdp, 0, b->d_out, b->d_scratch, b->scratch_bytes);
    if (!rc) rc = trn_net_backward_dev(b->net, (const float *const *)b->rdp);
    const struct trn_optim_dev_step_opts so = { .grad_scale = 1.0f, .ema = b->d_ema[0] };
    if (!rc)
        rc = trn_optim_dev_step_dyn(b->odev, trn_net_dev_arena(b->net, TRN_ARENA_PARAM), grad,
                                    b->d_dyn, &so);
    if (!rc) rc = trn_optim_dev_zero_grad(b->odev, grad);
    if (!rc)
        rc = b->dK->ema_update_dyn(b->dctx, b->d_ema[1],
                                   trn_net_dev_arena(b->net, TRN_ARENA_BUFFER), b->n_buf, b->d_dyn);
    return rc;
}

/* One step through the graph (captured on the first call): the step's scalars uploaded (the
 * batch only before the capture), the replay, the loss floats read back (which waits for the step);
 * the host counts the optimizer step a replay cannot. */
static int graph_step(struct bench *b, const struct trn_optim_sched *sch, int64_t upd, float *loss,
                      char *err, size_t err_cap)
{
    struct kern_sgd_dyn dyn;
    const struct trn_optim_dev_step_opts so = { .grad_scale = 1.0f,
                                                .ema = b->d_ema[0],
                                                .ema_decay = trn_ema_decay(upd) };
    int rc = trn_optim_dev_dyn_fill(b->odev, sch, &so, &dyn);
    if (!rc && !b->g) /* the captured forward reads the net's input, which nothing writes */
        rc = kern_mem_copy(b->dctx, trn_net_dev_input(b->net), b->d_images, b->in_bytes,
                           KERN_COPY_D2D);
    if (!rc) rc = kern_mem_copy(b->dctx, b->d_dyn, &dyn, sizeof dyn, KERN_COPY_H2D);
    const char *what = "replay";
    /* the captured forward finds the AMP weights current and records no cast (net.h) */
    if (!rc) rc = trn_net_lowp_refresh(b->net);
    if (!rc && b->g) {
        rc = kern_graph_replay(b->g);
    } else if (!rc) {
        what = "capture";
        rc = kern_graph_capture(b->dctx, bench_graph_run, b, &b->g);
    }
    float raw[KERN_YOLO_OUT_N];
    struct trn_loss_items items;
    if (!rc) rc = kern_mem_copy(b->dctx, raw, b->d_out, sizeof raw, KERN_COPY_D2H);
    if (!rc) rc = trn_loss_items_from_out(raw, &items);
    if (rc < 0) {
        snprintf(err, err_cap, "graph %s: %s", what, kern_strerror(rc));
        return rc;
    }
    struct trn_optim_counters c;
    trn_optim_get_counters(b->opt, &c);
    c.steps++;
    trn_optim_set_counters(b->opt, &c);
    *loss = items.total;
    return 0;
}

int trn_bench_step_run(const struct trn_bench_step_opts *o, struct trn_bench_step_result *r,
                       char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!o || !r || !o->cfg || o->img < 32 || o->batch < 1 || o->steps < 1 || o->warmup < 0 ||
        o->boxes < 0)
        return -EINVAL;
    memset(r, 0, sizeof *r);
    struct bench b = { 0 };
    char msg[256] = "";
    int rc = trn_model_load(o->cfg, NULL, &b.m, msg, sizeof msg);
    if (rc < 0) {
        snprintf(err, err_cap, "%s", msg);
        return rc;
    }
    trn_model_init(b.m, o->seed);
    const struct trn_model_info *I = trn_model_info(b.m);
    struct trn_net_opts no;
    trn_net_opts_default(&no);
    no.threads = o->threads;
    no.device = o->device;
    no.device_path = o->device_path != 0;
    no.amp = o->amp;
    no.any_algo = o->any_algo != 0;
    if (o->device >= 0) {
        if ((rc = trn_plans_open(&b.plans, o->cudnn_plan, o->cudnn_tune, err, err_cap)) < 0)
            goto out;
        no.plans = b.plans.table;
        no.tune = o->cudnn_tune != 0;
    }
    no.cpu_engine = o->cpu_engine;
    no.act_store = o->act_store;
    if ((rc = trn_net_create(b.m, o->batch, o->img, o->img, &no, &b.net, msg, sizeof msg)) < 0) {
        snprintf(err, err_cap, "net: %s", msg);
        goto out;
    }
    snprintf(r->engine, sizeof r->engine, "%s", trn_net_engine(b.net));
    /* the resident step reads the batch as yolo-train's GPU augmentation writes it */
    const int s2d = trn_net_s2d_input(b.m, o->img, o->img, &no);
    b.batch = o->batch, b.img = o->img;
    if ((trn_net_on_device(b.net) || o->device_path) && s2d > 0) {
        if ((rc = trn_net_set_s2d_input(b.net, true)) < 0) {
            snprintf(err, err_cap, "net: the space-to-depth input: %s", trn_strerror(rc));
            goto out;
        }
        b.s2d = s2d;
    }
    snprintf(r->input, sizeof r->input, "%s",
             !b.s2d                            ? "float32"
             : b.s2d == KERN_AUG_BF16_S2D_NHWC ? "bf16 s2d NHWC"
                                               : "bf16 s2d NCHW");
    /* the loss reads the Detect outputs in place (a device net's bench step is resident) */
    const int head = trn_net_raw_head(b.net, true);
    if ((rc = head) < 0) {
        snprintf(err, err_cap, "net: %s", trn_strerror(rc));
        goto out;
    }
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.threads = o->threads; /* the loss's threads, as train.c's context has them */
    struct trn_hyp hyp;
    trn_hyp_default(&hyp);
    const int nt = o->boxes * o->batch;
    struct trn_loss_cfg lc;
    if ((rc = kern_ctx_create(&ko, &b.cpu)) < 0 ||
        (rc = trn_loss_cfg_from_model(b.m, &hyp, o->batch, o->img, 0.0f, nt > 0 ? nt : 1, &lc)) <
            0 ||
        (lc.head = head >= TRN_LOSS_HEAD_BF16_NCHW ? head : 0,
         (rc = trn_loss_create(&lc, &b.loss)) < 0)) {
        snprintf(err, err_cap, "loss: %s", trn_loss_strerror(rc));
        goto out;
    }
    struct trn_optim_opts oo;
    trn_optim_opts_default(&oo);
    trn_optim_opts_from_hyp(&oo, &hyp);
    if ((rc = trn_optim_create(b.m, &oo, &b.opt)) < 0 || (rc = trn_ema_create(b.m, &b.ema)) < 0) {
        snprintf(err, err_cap, "optimizer: %s", trn_optim_strerror(rc));
        goto out;
    }

    const size_t n_img = (size_t)o->batch * 3 * (size_t)o->img * (size_t)o->img;
    rc = -ENOMEM;
    b.images = malloc(n_img * sizeof(float));
    b.targets = malloc((size_t)(nt > 0 ? nt : 1) * 6 * sizeof(float));
    if (!b.images || !b.targets) goto out;
    uint64_t s = o->seed ^ 0x5bd1e995u;
    for (size_t i = 0; i < n_img; i++)
        b.images[i] = unif(&s);
    for (int t = 0; t < nt; t++) {
        float *row = b.targets + 6 * (size_t)t;
        row[0] = (float)(t / (o->boxes ? o->boxes : 1)); /* image */
        row[1] = (float)(next(&s) % (uint64_t)I->nc);
        row[4] = 0.02f + 0.4f * unif(&s);
        row[5] = 0.02f + 0.4f * unif(&s);
        row[2] = row[4] / 2 + (1 - row[4]) * unif(&s);
        row[3] = row[5] / 2 + (1 - row[5]) * unif(&s);
    }
    for (int l = 0; l < I->nl; l++)
        if (!(b.dp[l] = malloc((size_t)trn_net_output_shape(b.net, l, NULL) * sizeof(float))))
            goto out;

    double t_fwd = 0, t_loss = 0, t_bwd = 0, t_opt = 0, t_ema = 0, t_graph = 0;
    struct trn_optim_sched sch;
    if ((rc = trn_optim_schedule(&oo, 0, 1000000, &sch)) < 0) goto out;
    float *params = trn_model_arena(b.m, TRN_ARENA_PARAM);
    float *buffers = trn_model_arena(b.m, TRN_ARENA_BUFFER);
    const bool resident = trn_net_on_device(b.net) || o->device_path;
    if (resident && (rc = resident_setup(&b, I, nt, n_img, err, err_cap)) < 0) goto out;
    const bool graph = resident && o->cuda_graph;
    /* the graph is captured after one direct step (cuDNN plans), and neither is timed */
    const int warmup = graph && o->warmup < 2 ? 2 : o->warmup;
    if (graph) {
        b.n_buf = I->arena_len[TRN_ARENA_BUFFER];
        if ((rc = dalloc(&b, sizeof(struct kern_sgd_dyn), (void **)&b.d_dyn)) < 0) {
            snprintf(err, err_cap, "graph buffers: %s", kern_strerror(rc));
            goto out;
        }
    }
    for (int it = 0; resident && it < warmup + o->steps; it++) {
        double t[5];
        if (it == warmup) kern_cuda_profiler_range(1);
        const double t0 = trn_now_s();
        float loss = NAN;
        if (graph && it > 0) {
            if ((rc = graph_step(&b, &sch, it + 1, &loss, err, err_cap)) < 0) goto out;
            r->loss = loss;
            if (it >= warmup) t_graph += trn_now_s() - t0;
            continue;
        }
        if ((rc = resident_step(&b, I, n_img, &sch, it + 1, t, &loss, err, err_cap)) < 0) goto out;
        r->loss = loss;
        if (it < warmup) continue;
        t_fwd += t[0] - t0;
        t_loss += t[1] - t[0];
        t_bwd += t[2] - t[1];
        t_opt += t[3] - t[2];
        t_ema += t[4] - t[3];
    }
    if (resident) kern_cuda_profiler_range(0);
    for (int it = 0; !resident && it < o->warmup + o->steps; it++) {
        const double t0 = trn_now_s();
        const float *out[TRN_MODEL_MAX_LEVELS];
        if ((rc = trn_net_forward(b.net, b.images, true, out)) < 0) {
            snprintf(err, err_cap, "forward: %s", trn_strerror(rc));
            goto out;
        }
        const double t1 = trn_now_s();
        struct trn_loss_items items;
        float *raw[TRN_MODEL_MAX_LEVELS], *const *dp = b.dp;
        const int blk = trn_net_raw_dhead(b.net, raw); /* as yolo-train's step (step_host.c) */
        if (blk > 0) dp = raw;
        rc = trn_loss_compute_blk(b.loss, b.cpu, out, blk > 0 ? blk : 0, b.targets, nt, dp, &items);
        if (rc < 0) {
            snprintf(err, err_cap, "loss: %s", trn_loss_strerror(rc));
            goto out;
        }
        const double t2 = trn_now_s();
        if ((rc = trn_net_backward(b.net, (const float *const *)dp)) < 0) {
            snprintf(err, err_cap, "backward: %s", trn_strerror(rc));
            goto out;
        }
        const double t3 = trn_now_s();
        float *grad = trn_net_grad(b.net);
        double norm = 0;
        if ((rc = trn_optim_clip(b.opt, grad, 10.0, &norm)) < 0 ||
            (rc = trn_optim_step(b.opt, params, grad, &sch)) < 0) {
            snprintf(err, err_cap, "optimizer: %s", trn_optim_strerror(rc));
            goto out;
        }
        trn_net_zero_grad(b.net);
        const double t4 = trn_now_s();
        if ((rc = trn_ema_update(b.ema, params, buffers)) < 0) {
            snprintf(err, err_cap, "EMA: %s", trn_optim_strerror(rc));
            goto out;
        }
        const double t5 = trn_now_s();
        r->loss = items.total;
        if (it < o->warmup) continue;
        t_fwd += t1 - t0;
        t_loss += t2 - t1;
        t_bwd += t3 - t2;
        t_opt += t4 - t3;
        t_ema += t5 - t4;
    }
    const double k = 1e3 / o->steps;
    r->ms_forward = t_fwd * k;
    r->ms_loss = t_loss * k;
    r->ms_backward = t_bwd * k;
    r->ms_optimizer = t_opt * k;
    r->ms_ema = t_ema * k;
    r->ms_step = r->ms_forward + r->ms_loss + r->ms_backward + r->ms_optimizer + r->ms_ema;
    if (graph) r->ms_step = t_graph * k;
    r->graph = graph;
    /* counted while the net's context and its threads still exist */
    r->threads = o->threads > 1 ? o->threads : 1;
    r->blas_threads = kern_blas_threads();
    r->os_threads = trn_cli_os_threads();
    r->img_per_s = r->ms_step > 0 ? o->batch * 1e3 / r->ms_step : 0;
    r->gflops_img = trn_model_gflops(b.m, o->img, false);
    r->tflops = r->ms_step > 0 ? 3.0 * r->gflops_img * o->batch / r->ms_step : 0;
    r->net_bytes = trn_net_memory_bytes(b.net);
    r->on_device = trn_net_on_device(b.net);
    r->resident = resident;
    r->peak_bytes = r->net_bytes + b.bytes;
    r->params = (long long)I->n_params;
    r->plan_hash = kern_plan_hash(b.plans.table);
    if (r->on_device) kern_cuda_conv_plan_counts(trn_net_kern_ctx(b.net), r->plan_counts);
    if ((rc = trn_plans_write(&b.plans, NULL, err, err_cap)) < 0) goto out;
    rc = isfinite(r->loss) ? 0 : -ERANGE;
    if (rc) snprintf(err, err_cap, "the loss is not finite");
out:
    bench_free(&b);
    return rc;
}
