/*
 * `yolo-train --bench`: the training step on synthetic batches (see bench_step.h).
 */
#include "bench_step.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hyp.h"
#include "loss.h"
#include "model.h"
#include "net.h"
#include "optim.h"

void trn_bench_step_opts_default(struct trn_bench_step_opts *o)
{
    memset(o, 0, sizeof *o);
    o->img = 640;
    o->batch = 16;
    o->device = -1;
    o->warmup = 3;
    o->steps = 10;
    o->boxes = 8;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
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
    struct trn_model *m;
    struct trn_net *net;
    struct kern_ctx *cpu; /* the loss runs on the host, as in train.c */
    struct trn_loss *loss;
    struct trn_optim *opt;
    struct trn_ema *ema;
    float *images, *targets;
    float *dp[TRN_MODEL_MAX_LEVELS];
};

static void bench_free(struct bench *b)
{
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
        free(b->dp[l]);
    free(b->images);
    free(b->targets);
    trn_ema_destroy(b->ema);
    trn_optim_destroy(b->opt);
    trn_loss_destroy(b->loss);
    kern_ctx_destroy(b->cpu);
    trn_net_destroy(b->net);
    trn_model_destroy(b->m);
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
    if ((rc = trn_net_create(b.m, o->batch, o->img, o->img, &no, &b.net, msg, sizeof msg)) < 0) {
        snprintf(err, err_cap, "net: %s", msg);
        goto out;
    }
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    struct trn_hyp hyp;
    trn_hyp_default(&hyp);
    const int nt = o->boxes * o->batch;
    struct trn_loss_cfg lc;
    if ((rc = kern_ctx_create(&ko, &b.cpu)) < 0 ||
        (rc = trn_loss_cfg_from_model(b.m, &hyp, o->batch, o->img, 0.0f, nt > 0 ? nt : 1, &lc)) <
            0 ||
        (rc = trn_loss_create(&lc, &b.loss)) < 0) {
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

    double t_fwd = 0, t_loss = 0, t_bwd = 0, t_opt = 0, t_ema = 0;
    struct trn_optim_sched sch;
    if ((rc = trn_optim_schedule(&oo, 0, 1000000, &sch)) < 0) goto out;
    float *params = trn_model_arena(b.m, TRN_ARENA_PARAM);
    float *buffers = trn_model_arena(b.m, TRN_ARENA_BUFFER);
    for (int it = 0; it < o->warmup + o->steps; it++) {
        const double t0 = now_s();
        const float *out[TRN_MODEL_MAX_LEVELS];
        if ((rc = trn_net_forward(b.net, b.images, true, out)) < 0) {
            snprintf(err, err_cap, "forward: %s", trn_net_strerror(rc));
            goto out;
        }
        const double t1 = now_s();
        struct trn_loss_items items;
        if ((rc = trn_loss_compute(b.loss, b.cpu, out, b.targets, nt, b.dp, &items)) < 0) {
            snprintf(err, err_cap, "loss: %s", trn_loss_strerror(rc));
            goto out;
        }
        const double t2 = now_s();
        if ((rc = trn_net_backward(b.net, (const float *const *)b.dp)) < 0) {
            snprintf(err, err_cap, "backward: %s", trn_net_strerror(rc));
            goto out;
        }
        const double t3 = now_s();
        float *grad = trn_net_grad(b.net);
        double norm = 0;
        if ((rc = trn_optim_clip(b.opt, grad, 10.0, &norm)) < 0 ||
            (rc = trn_optim_step(b.opt, params, grad, &sch)) < 0) {
            snprintf(err, err_cap, "optimizer: %s", trn_optim_strerror(rc));
            goto out;
        }
        trn_net_zero_grad(b.net);
        const double t4 = now_s();
        if ((rc = trn_ema_update(b.ema, params, buffers)) < 0) {
            snprintf(err, err_cap, "EMA: %s", trn_optim_strerror(rc));
            goto out;
        }
        const double t5 = now_s();
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
    r->img_per_s = r->ms_step > 0 ? o->batch * 1e3 / r->ms_step : 0;
    r->gflops_img = trn_model_gflops(b.m, o->img, false);
    r->tflops = r->ms_step > 0 ? 3.0 * r->gflops_img * o->batch / r->ms_step : 0;
    r->net_bytes = trn_net_memory_bytes(b.net);
    r->on_device = trn_net_on_device(b.net);
    r->params = (long long)I->n_params;
    rc = isfinite(r->loss) ? 0 : -ERANGE;
    if (rc) snprintf(err, err_cap, "the loss is not finite");
out:
    bench_free(&b);
    return rc;
}
