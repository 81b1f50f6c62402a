/* The resident step (docs/design.md "The network on a GPU"): with SGD and the nets on a device
 * (or the device path), parameters, gradients, momentum and EMA stay in the nets' memory. */
#include "priv/run.h"

/* One batch as run_train_batch, every tensor in the nets' backend memory: forward, the device loss,
 * backward into the device grad arena, the fused clip + SGD + EMA, the buffers' EMA, zero grad.
 * The host sees the 8 loss floats only (and, with several ranks over TCP or MPI, each batch's
 * gradients on their way through the all-reduce). */
int run_train_batch_resident(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                             char *err, size_t cap)
{
    const bool short_batch = run_is_alt(R, b); /* another shape: net_last */
    int rc = short_batch ? run_alt_net(R, b, err, cap) : 0;
    if (rc > 0) rc = run_resident_alt(R, err, cap); /* a new net_last: its device buffers */
    if (rc < 0) return rc;
    struct trn_net *net = short_batch ? R->nets.net_last : R->nets.net;
    const struct trn_loss *loss = short_batch ? R->nets.loss_last : R->nets.loss;
    float *const *dp = short_batch ? R->dev.d_dp_last : R->dev.d_dp;
    float *raw_dp[TRN_MODEL_MAX_LEVELS]; /* a raw head's gradients: the net's own buffers */
    if (trn_net_raw_dhead(net, raw_dp) > 0) dp = raw_dp;
    if ((rc = run_check_batch(R, b, net, short_batch, err, cap)) < 0) return rc;
    const struct kern_ops *const K = R->dev.dK;
    const float *out[TRN_MODEL_MAX_LEVELS];
    /* a batch the loader built on this context needs no upload */
    const bool on_dev = b->device_images != NULL;
    rc = trn_net_forward_dev(net, on_dev ? b->device_images : b->images, on_dev, true, out);
    if (rc < 0) return run_pass_failed(R, b, rc, "forward", err, cap);
    const struct trn_loss_cfg *cfg = trn_loss_get_cfg(loss);
    if ((rc = run_targets_fit(cfg, b, err, cap)) < 0) return rc;
    const int nt = (int)b->n_targets;
    float raw[KERN_YOLO_OUT_N];
    rc = run_dev_copy(R, R->dev.d_targets, (void *)b->targets, (size_t)nt * 6 * sizeof(float),
                      KERN_COPY_H2D);
    if (!rc) rc = run_dev_copy(R, R->dev.d_nt, (void *)&nt, sizeof nt, KERN_COPY_H2D);
    if (!rc)
        rc = trn_loss_compute_dev(cfg, K, R->dev.dctx, out, R->dev.d_targets, R->dev.d_nt, dp, 0,
                                  R->dev.d_out, R->dev.d_scratch, R->dev.scratch_bytes);
    /* the one read-back of the step: what the log and the finite check need */
    if (!rc) rc = run_dev_copy(R, R->dev.d_out, raw, sizeof raw, KERN_COPY_D2H);
    if (!rc)
        rc = run_amp_scale_seed(R, net, dp, true,
                                R->dev.d_seg ? R->dev.d_seg + (short_batch ? R->nets.info->nl : 0)
                                             : NULL,
                                (int64_t)b->epoch * R->state.nb + (int64_t)b->step);
    if ((rc = run_loss_from_device(rc, raw, b, items, err, cap)) < 0) return rc;
    const size_t n_grad = R->nets.info->arena_len[TRN_ARENA_PARAM];
    if ((rc = run_backward(R, net, dp, true, b, err, cap)) < 0) return rc;
    float *grad = trn_net_dev_grad(R->nets.net);
    if (R->dist.world > 1) {
        /* as run_train_batch: this batch's gradients summed over the ranks, added to acc. NCCL sums
         * the device arena in place; TCP and MPI sum the host mirror (the hook's row copies, or
         * one whole download here), which then goes back up before the add. */
        float *bg = trn_net_dev_grad(net);
        const bool nccl = trn_dist_backend(R->dist.comm) == TRN_DIST_NCCL;
        if (!R->dist.overlap && nccl) {
            rc = trn_dist_allreduce_f32(R->dist.comm, bg, n_grad);
        } else if (!R->dist.overlap) {
            rc = trn_net_sync_grad(net, KERN_COPY_D2H);
            if (rc == 0) rc = trn_dist_allreduce_f32(R->dist.comm, trn_net_grad(net), n_grad);
        }
        if (rc < 0) {
            trn_seterr(err, cap, "gradient all-reduce at epoch %u batch %" PRIu64 ": %s", b->epoch,
                       b->step, trn_dist_error(R->dist.comm));
            return rc;
        }
        if (!nccl) rc = trn_net_sync_grad(net, KERN_COPY_H2D);
        if (rc == 0) rc = K->add_bwd(R->dev.dctx, R->dev.d_acc, bg, n_grad, KERN_ACCUM_DX);
        if (rc < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", kern_strerror(rc));
            return rc;
        }
        trn_net_zero_grad(net);
        grad = R->dev.d_acc;
    } else if (short_batch) {
        rc = K->add_bwd(R->dev.dctx, grad, trn_net_dev_grad(R->nets.net_last), n_grad,
                        KERN_ACCUM_DX);
        if (rc < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", kern_strerror(rc));
            return rc;
        }
        trn_net_zero_grad(R->nets.net_last);
    }
    /* trn_optim_after_batch's policy, the step itself on the device */
    int64_t ni;
    struct trn_optim_sched sch;
    struct trn_optim_counters c;
    if ((rc = run_state_schedule(R, b, &sch, &c, &ni, err, cap)) <= 0) return rc;
    const int64_t upd = R->state.ema ? trn_ema_updates(R->state.ema) + 1 : 0;
    const double d = trn_ema_decay(upd);
    const struct trn_optim_dev_step_opts so = { .grad_scale = trn_amp_inv_scale(R->state.amp),
                                                .skip_nonfinite = R->state.amp != NULL,
                                                .ema = R->state.ema ? R->dev.d_ema[0] : NULL,
                                                .ema_decay = d };
    float *const params = trn_net_dev_arena(R->nets.net, TRN_ARENA_PARAM);
    rc = trn_optim_dev_step(R->dev.odev, params, grad, &sch, &so);
    double sumsq = 0;
    /* the skip was decided on the device: its sum of squares tells the scaler */
    if (rc == 0 && R->state.amp)
        rc = run_dev_copy(R, trn_optim_dev_buffer(R->dev.odev, 1), &sumsq, sizeof sumsq,
                          KERN_COPY_D2H);
    if (rc == 0) rc = trn_optim_dev_zero_grad(R->dev.odev, grad);
    if (rc < 0) {
        trn_seterr(err, cap, "optimizer: %s",
                   rc == -EINVAL ? trn_optim_strerror(rc) : kern_strerror(rc));
        return rc;
    }
    if (R->state.ema) {
        rc = K->ema_update(R->dev.dctx, R->dev.d_ema[1],
                           trn_net_dev_arena(R->nets.net, TRN_ARENA_BUFFER),
                           R->nets.info->arena_len[TRN_ARENA_BUFFER], (float)d, (float)(1.0 - d));
        if (rc < 0) {
            trn_seterr(err, cap, "EMA: %s", kern_strerror(rc));
            return rc;
        }
        trn_ema_set_updates(R->state.ema, upd);
    }
    trn_optim_get_counters(R->state.opt, &c); /* steps: counted by the device step */
    c.last_opt_step = ni;
    /* a skipped step leaves the momentum alone: the next one is still the first when this was */
    if (R->state.amp && !isfinite(sumsq)) c.steps--;
    trn_optim_set_counters(R->state.opt, &c);
    if (R->state.amp) run_amp_after_step(R, !isfinite(sumsq), b);
    return 0;
}

const struct run_step run_step_resident = { "resident", run_train_batch_resident };
