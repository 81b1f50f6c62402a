/* The state part of a run (priv/run.h): the optimizer, the EMA, fp16's loss scaler, and where
 * the run stands (its position and best fitness, set from the checkpoint when resuming). */
#include "priv/run.h"

/* smart_optimizer's line: "optimizer: SGD(lr=0.01) with parameter groups 57 weight(decay=0.0),
 * 60 weight(decay=0.0005), 60 bias". */
static void log_optimizer(struct run *R, const struct trn_optim_opts *oo)
{
    static const char *const kind[] = { "SGD", "Adam", "AdamW" };
    run_log(R,
            "optimizer: %s(lr=%g) with parameter groups %d weight(decay=0.0), %d "
            "weight(decay=%g), %d bias",
            kind[oo->kind], oo->lr0, trn_model_group(R->nets.m, 2, NULL),
            trn_model_group(R->nets.m, 1, NULL), trn_optim_weight_decay(oo),
            trn_model_group(R->nets.m, 0, NULL));
}

/* The optimizer (train.py's smart_optimizer and scheduler), the EMA (rank 0 alone: it alone
 * validates and saves), the fp16 loss scaler, several ranks' gradient sum; then the checkpoint's
 * state (C) when resuming, else the hyp.yaml and opt.yaml texts the run saves. */
int run_state_setup(struct run *R, struct trn_ckpt *C, char *err, size_t cap)
{
    const struct trn_train_opts *o = &R->o;
    const struct trn_model_info *I = R->nets.info;
    int rc;
    if (o->amp == KERN_DT_F16) {
        struct trn_amp_opts ao;
        trn_amp_opts_default(&ao);
        ao.dtype = TRN_AMP_FP16;
        if ((rc = trn_amp_create(&ao, &R->state.amp)) < 0) {
            trn_seterr(err, cap, "amp: %s", trn_strerror(rc));
            return rc;
        }
    }
    if (R->dist.world > 1 &&
        !(R->dist.acc = calloc(I->arena_len[TRN_ARENA_PARAM] + 1, sizeof *R->dist.acc))) {
        trn_seterr(err, cap, "out of memory");
        return -ENOMEM;
    }
    struct trn_optim_opts oo;
    trn_optim_opts_default(&oo);
    trn_optim_opts_from_hyp(&oo, &o->hyp);
    oo.kind = o->optimizer;
    oo.batch_size = o->batch_size;
    oo.nbs = NBS;
    oo.epochs = o->epochs;
    oo.nb = R->state.nb;
    oo.cos_lr = o->cos_lr;
    memcpy(oo.frozen, o->frozen, sizeof oo.frozen);
    /* train.py logs each parameter it freezes, in named_parameters() order */
    for (int k = 0; !o->resume && k < I->n_tensors; k++) {
        const struct trn_tensor *T = trn_model_tensor(R->nets.m, k);
        if (T->arena == TRN_ARENA_PARAM && T->layer >= 0 &&
            (o->frozen[T->layer / 64] >> (T->layer % 64) & 1))
            run_log(R, "freezing %s", T->name);
    }
    if ((rc = trn_optim_create(R->nets.m, &oo, &R->state.opt)) < 0 ||
        (R->dist.rank == 0 && (rc = trn_ema_create(R->nets.m, &R->state.ema)) < 0)) {
        trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    if (!o->resume) log_optimizer(R, &oo);
    if (o->resume) return run_resume_state(R, C, err, cap);
    R->job.hyp_text = run_hyp_text(&o->hyp, false, &R->job.hyp_len);
    R->job.opt_text = run_opt_yaml(R, &R->job.opt_len);
    if (!R->job.hyp_text || !R->job.opt_text) {
        trn_seterr(err, cap, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

int run_state_schedule(struct run *R, const struct trn_batch *b, struct trn_optim_sched *sch,
                       struct trn_optim_counters *c, int64_t *ni, char *err, size_t cap)
{
    *ni = (int64_t)b->epoch * R->state.nb + (int64_t)b->step;
    int rc;
    if ((rc = trn_optim_schedule(trn_optim_get_opts(R->state.opt), (int)b->epoch, *ni, sch)) < 0 ||
        (rc = trn_optim_get_counters(R->state.opt, c)) < 0) {
        trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    for (int g = 0; g < 3; g++)
        R->state.lr[g] = sch->lr[g];
    return *ni - c->last_opt_step >= sch->accumulate;
}

void run_state_free(struct run *R)
{
    trn_amp_destroy(R->state.amp);
    trn_optim_destroy(R->state.opt);
    trn_ema_destroy(R->state.ema);
    memset(&R->state, 0, sizeof R->state);
}
