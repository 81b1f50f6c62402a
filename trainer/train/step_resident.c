/* The resident step (docs/design.md "The network on a GPU"): with SGD and the nets on a device
 * (or the device path), parameters, gradients, momentum and EMA stay in the nets' memory. */
#include "priv/run.h"

/* One copy between host memory and the nets' backend memory (dir KERN_COPY_H2D or _D2H). */
static int dcopy(struct run *R, void *dev, void *host, size_t bytes, int dir)
{
    if (!bytes) return 0;
    return dir == KERN_COPY_H2D ? kern_mem_copy(R->dctx, dev, host, bytes, dir)
                                : kern_mem_copy(R->dctx, host, dev, bytes, dir);
}

/* The host copies <-> the backend's: model arenas, momentum, EMA and the gradients accumulated
 * since the last optimizer step (the main net's arena, or acc with several ranks). */
static int resident_sync(struct run *R, int dir)
{
    const struct trn_model_info *I = R->info;
    const size_t P = I->arena_len[TRN_ARENA_PARAM] * sizeof(float);
    const size_t B = I->arena_len[TRN_ARENA_BUFFER] * sizeof(float);
    int rc = trn_net_sync_model(R->net, dir);
    if (!rc)
        rc = dcopy(R, trn_optim_dev_buffer(R->odev, 0), trn_optim_state(R->opt, 0, NULL), P, dir);
    if (!rc && R->ema) rc = dcopy(R, R->d_ema[0], trn_ema_arena(R->ema, TRN_ARENA_PARAM), P, dir);
    if (!rc && R->ema) rc = dcopy(R, R->d_ema[1], trn_ema_arena(R->ema, TRN_ARENA_BUFFER), B, dir);
    if (!rc)
        rc = R->world > 1 ? dcopy(R, R->d_acc, R->acc, P, dir) : trn_net_sync_grad(R->net, dir);
    return rc;
}

int run_resident_download(struct run *R, char *err, size_t cap)
{
    if (!R->resident) return 0;
    const int rc = resident_sync(R, KERN_COPY_D2H);
    if (rc < 0)
        trn_seterr(err, cap, "copying the training state from the device: %s", kern_strerror(rc));
    return rc;
}

/* Plan the resident step once the host state is final (after resume and dist_start): the device
 * optimizer, the EMA and loss buffers, then one upload of everything. SGD only: Adam and AdamW
 * have no device op and keep the host step (parameters up, gradients down every step). */
int run_resident_setup(struct run *R, char *err, size_t cap)
{
    if (!R->gpu_ctx && !R->device_path) return 0;
    if (R->o.optimizer != TRN_OPTIM_SGD) {
        run_log(R,
                "%s has no device step: the optimizer and EMA run on the host (parameters go "
                "up and gradients come down every batch)",
                optim_names[R->o.optimizer]);
        return 0;
    }
    R->dK = trn_net_kern_ops(R->net);
    R->dctx = trn_net_kern_ctx(R->net);
    const struct trn_model_info *I = R->info;
    const size_t P = I->arena_len[TRN_ARENA_PARAM], B = I->arena_len[TRN_ARENA_BUFFER];
    int rc = trn_optim_dev_create(R->opt, R->dK, R->dctx, &R->odev);
    /* every device step rewrites the nets' AMP weights too (the short net shares them), so that
     * they stay current without a cast per forward (net.h AMP WEIGHTS) */
    int ldt = 0;
    void *const lowp = trn_net_dev_params_lowp(R->net, &ldt);
    if (rc == 0) rc = trn_optim_dev_set_params_lowp(R->odev, lowp, ldt);
    const struct trn_loss *const losses[2] = { R->loss, R->loss_last };
    int max_t = 1;
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (!losses[k]) continue;
        size_t b = 0;
        rc = trn_loss_dev_scratch_bytes(trn_loss_get_cfg(losses[k]), R->dK, R->dctx, &b);
        if (b > R->scratch_bytes) R->scratch_bytes = b;
        if (trn_loss_get_cfg(losses[k])->max_targets > max_t)
            max_t = trn_loss_get_cfg(losses[k])->max_targets;
    }
    if (rc == 0 && R->ema) rc = kern_mem_alloc(R->dctx, P * sizeof(float), (void **)&R->d_ema[0]);
    if (rc == 0 && R->ema) rc = kern_mem_alloc(R->dctx, B * sizeof(float), (void **)&R->d_ema[1]);
    if (rc == 0 && R->world > 1)
        rc = kern_mem_alloc(R->dctx, P * sizeof(float), (void **)&R->d_acc);
    if (rc == 0)
        rc = kern_mem_alloc(R->dctx, (size_t)max_t * 6 * sizeof(float), (void **)&R->d_targets);
    if (rc == 0) rc = kern_mem_alloc(R->dctx, sizeof(int), (void **)&R->d_nt);
    if (rc == 0) rc = kern_mem_alloc(R->dctx, KERN_YOLO_OUT_N * sizeof(float), (void **)&R->d_out);
    if (rc == 0 && R->amp) {
        struct kern_optim_seg segs[2 * TRN_MODEL_MAX_LEVELS];
        memset(segs, 0, sizeof segs);
        for (int l = 0; l < I->nl; l++) {
            segs[l].count = (size_t)trn_net_output_shape(R->net, l, NULL);
            segs[I->nl + l].count =
                (size_t)trn_net_output_shape(R->net_last ? R->net_last : R->net, l, NULL);
        }
        const size_t sb = 2 * (size_t)I->nl * sizeof *segs;
        rc = kern_mem_alloc(R->dctx, sb, (void **)&R->d_seg);
        if (rc == 0) rc = kern_mem_copy(R->dctx, R->d_seg, segs, sb, KERN_COPY_H2D);
    }
    if (rc == 0 && R->scratch_bytes) rc = kern_mem_alloc(R->dctx, R->scratch_bytes, &R->d_scratch);
    for (int l = 0; l < I->nl && rc == 0; l++) {
        rc = kern_mem_alloc(R->dctx, (size_t)trn_net_output_shape(R->net, l, NULL) * sizeof(float),
                            (void **)&R->d_dp[l]);
        if (rc == 0 && R->net_last)
            rc = kern_mem_alloc(R->dctx,
                                (size_t)trn_net_output_shape(R->net_last, l, NULL) * sizeof(float),
                                (void **)&R->d_dp_last[l]);
    }
    if (rc == 0) rc = trn_net_set_resident(R->net, true);
    if (rc == 0 && R->net_last) rc = trn_net_set_resident(R->net_last, true);
    if (rc < 0) {
        trn_seterr(err, cap, "the device training step: %s",
                   rc == -ENOTSUP || rc == -ENOMEM ? trn_optim_strerror(rc) : kern_strerror(rc));
        return rc;
    }
    R->resident = true;
    if ((rc = resident_sync(R, KERN_COPY_H2D)) < 0) {
        trn_seterr(err, cap, "copying the training state to the device: %s", kern_strerror(rc));
        return rc;
    }
    run_log(R, "resident step: parameters, gradients, momentum%s and the loss stay in %s memory",
            R->ema ? ", EMA" : "", R->gpu_ctx ? "device" : "backend (device data path)");
    if (!R->o.host_aug)
        run_log(R, "GPU augmentation: tiles go up once per batch, mosaic, affine, HSV, flips and "
                   "mixup run in kernels writing the batch tensor (--host-aug: on the host)");
    return 0;
}

/* A new net_last on the resident step: its loss gradients in dctx memory, resident, the loss
 * scratch grown to its grids, and (fp16) its gradient segments. */
int run_resident_alt(struct run *R, char *err, size_t cap)
{
    const struct trn_model_info *I = R->info;
    size_t b = 0;
    int rc = trn_loss_dev_scratch_bytes(trn_loss_get_cfg(R->loss_last), R->dK, R->dctx, &b);
    if (rc == 0 && b > R->scratch_bytes) {
        if (R->d_scratch) kern_mem_free(R->dctx, R->d_scratch);
        R->d_scratch = NULL;
        R->scratch_bytes = 0;
        rc = kern_mem_alloc(R->dctx, b, &R->d_scratch);
        if (rc == 0) R->scratch_bytes = b;
    }
    for (int l = 0; l < I->nl && rc == 0; l++)
        rc = kern_mem_alloc(R->dctx,
                            (size_t)trn_net_output_shape(R->net_last, l, NULL) * sizeof(float),
                            (void **)&R->d_dp_last[l]);
    if (rc == 0 && R->d_seg) {
        struct kern_optim_seg segs[TRN_MODEL_MAX_LEVELS];
        memset(segs, 0, sizeof segs);
        for (int l = 0; l < I->nl; l++)
            segs[l].count = (size_t)trn_net_output_shape(R->net_last, l, NULL);
        rc = kern_mem_copy(R->dctx, R->d_seg + I->nl, segs, (size_t)I->nl * sizeof *segs,
                           KERN_COPY_H2D);
    }
    if (rc == 0) rc = trn_net_set_resident(R->net_last, true);
    if (rc < 0)
        trn_seterr(err, cap, "the device training step at a %d x %dx%d batch: %s", R->alt_n,
                   R->alt_h, R->alt_w, kern_strerror(rc));
    return rc;
}

/* One batch as run_train_batch, every tensor in the nets' backend memory: forward, the device loss,
 * backward into the device grad arena, the fused clip + SGD + EMA, the buffers' EMA, zero grad.
 * The host sees the 8 loss floats only (and, with several ranks over TCP or MPI, each batch's
 * gradients on their way through the all-reduce). */
int run_train_batch_resident(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                             char *err, size_t cap)
{
    const bool short_batch = run_is_alt(R, b); /* another shape: net_last */
    int rc = short_batch ? run_alt_net(R, b, err, cap) : 0;
    if (rc < 0) return rc;
    struct trn_net *net = short_batch ? R->net_last : R->net;
    const struct trn_loss *loss = short_batch ? R->loss_last : R->loss;
    float *const *dp = short_batch ? R->d_dp_last : R->d_dp;
    if ((rc = run_check_batch(R, b, net, short_batch, err, cap)) < 0) return rc;
    const struct kern_ops *const K = R->dK;
    const float *out[TRN_MODEL_MAX_LEVELS];
    /* a batch the loader built on this context needs no upload */
    const bool on_dev = b->device_images != NULL;
    rc = trn_net_forward_dev(net, on_dev ? (const float *)b->device_images : b->images, on_dev,
                             true, out);
    if (rc < 0) return run_pass_failed(R, b, rc, "forward", err, cap);
    const struct trn_loss_cfg *cfg = trn_loss_get_cfg(loss);
    if ((rc = run_targets_fit(cfg, b, err, cap)) < 0) return rc;
    const int nt = (int)b->n_targets;
    float raw[KERN_YOLO_OUT_N];
    rc = dcopy(R, R->d_targets, (void *)b->targets, (size_t)nt * 6 * sizeof(float), KERN_COPY_H2D);
    if (!rc) rc = dcopy(R, R->d_nt, (void *)&nt, sizeof nt, KERN_COPY_H2D);
    if (!rc)
        rc = trn_loss_compute_dev(cfg, K, R->dctx, out, R->d_targets, R->d_nt, dp, 0, R->d_out,
                                  R->d_scratch, R->scratch_bytes);
    /* the one read-back of the step: what the log and the finite check need */
    if (!rc) rc = dcopy(R, R->d_out, raw, sizeof raw, KERN_COPY_D2H);
    if (!rc)
        rc = run_amp_scale_seed(R, net, dp, true,
                                R->d_seg ? R->d_seg + (short_batch ? R->info->nl : 0) : NULL,
                                (int64_t)b->epoch * R->nb + (int64_t)b->step);
    if ((rc = run_loss_from_device(rc, raw, b, items, err, cap)) < 0) return rc;
    const size_t n_grad = R->info->arena_len[TRN_ARENA_PARAM];
    if ((rc = run_backward(R, net, dp, true, b, err, cap)) < 0) return rc;
    float *grad = trn_net_dev_grad(R->net);
    if (R->world > 1) {
        /* as run_train_batch: this batch's gradients summed over the ranks, added to acc. NCCL sums
         * the device arena in place; TCP and MPI sum the host mirror (the hook's row copies, or
         * one whole download here), which then goes back up before the add. */
        float *bg = trn_net_dev_grad(net);
        const bool nccl = trn_dist_backend(R->dist) == TRN_DIST_NCCL;
        if (!R->overlap && nccl) {
            rc = trn_dist_allreduce_f32(R->dist, bg, n_grad);
        } else if (!R->overlap) {
            rc = trn_net_sync_grad(net, KERN_COPY_D2H);
            if (rc == 0) rc = trn_dist_allreduce_f32(R->dist, trn_net_grad(net), n_grad);
        }
        if (rc < 0) {
            trn_seterr(err, cap, "gradient all-reduce at epoch %u batch %" PRIu64 ": %s", b->epoch,
                       b->step, trn_dist_error(R->dist));
            return rc;
        }
        if (!nccl) rc = trn_net_sync_grad(net, KERN_COPY_H2D);
        if (rc == 0) rc = K->add_bwd(R->dctx, R->d_acc, bg, n_grad, KERN_ACCUM_DX);
        if (rc < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", kern_strerror(rc));
            return rc;
        }
        trn_net_zero_grad(net);
        grad = R->d_acc;
    } else if (short_batch) {
        rc = K->add_bwd(R->dctx, grad, trn_net_dev_grad(R->net_last), n_grad, KERN_ACCUM_DX);
        if (rc < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", kern_strerror(rc));
            return rc;
        }
        trn_net_zero_grad(R->net_last);
    }
    /* trn_optim_after_batch's policy, the step itself on the device */
    const int64_t ni = (int64_t)b->epoch * R->nb + (int64_t)b->step;
    struct trn_optim_sched sch;
    struct trn_optim_counters c;
    if ((rc = trn_optim_schedule(trn_optim_get_opts(R->opt), (int)b->epoch, ni, &sch)) < 0 ||
        (rc = trn_optim_get_counters(R->opt, &c)) < 0) {
        trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    for (int g = 0; g < 3; g++)
        R->lr[g] = sch.lr[g];
    if (ni - c.last_opt_step < sch.accumulate) return 0;
    const int64_t upd = R->ema ? trn_ema_updates(R->ema) + 1 : 0;
    const double d = trn_ema_decay(upd);
    const struct trn_optim_dev_step_opts so = { .grad_scale = trn_amp_inv_scale(R->amp),
                                                .skip_nonfinite = R->amp != NULL,
                                                .ema = R->ema ? R->d_ema[0] : NULL,
                                                .ema_decay = d };
    float *const params = trn_net_dev_arena(R->net, TRN_ARENA_PARAM);
    rc = trn_optim_dev_step(R->odev, params, grad, &sch, &so);
    double sumsq = 0;
    /* the skip was decided on the device: its sum of squares tells the scaler */
    if (rc == 0 && R->amp)
        rc = dcopy(R, trn_optim_dev_buffer(R->odev, 1), &sumsq, sizeof sumsq, KERN_COPY_D2H);
    if (rc == 0) rc = trn_optim_dev_zero_grad(R->odev, grad);
    if (rc < 0) {
        trn_seterr(err, cap, "optimizer: %s",
                   rc == -EINVAL ? trn_optim_strerror(rc) : kern_strerror(rc));
        return rc;
    }
    if (R->ema) {
        rc = K->ema_update(R->dctx, R->d_ema[1], trn_net_dev_arena(R->net, TRN_ARENA_BUFFER),
                           R->info->arena_len[TRN_ARENA_BUFFER], (float)d, (float)(1.0 - d));
        if (rc < 0) {
            trn_seterr(err, cap, "EMA: %s", kern_strerror(rc));
            return rc;
        }
        trn_ema_set_updates(R->ema, upd);
    }
    trn_optim_get_counters(R->opt, &c); /* steps: counted by the device step */
    c.last_opt_step = ni;
    /* a skipped step leaves the momentum alone: the next one is still the first when this was */
    if (R->amp && !isfinite(sumsq)) c.steps--;
    trn_optim_set_counters(R->opt, &c);
    if (R->amp) run_amp_after_step(R, !isfinite(sumsq), b);
    return 0;
}

const struct run_step run_step_resident = { "resident", run_train_batch_resident };
