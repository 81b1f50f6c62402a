/* The host step: forward, loss and backward on the nets' context, the optimizer on the host
 * arenas (any optimizer, any backend; the path every other one is checked against). */
#include "priv/run.h"

/* The device step's loss floats (raw, read back after rc, the result of the step so far) into
 * items, with the finite check. */
int run_loss_from_device(int rc, const float *raw, const struct trn_batch *b,
                         struct trn_loss_items *items, char *err, size_t cap)
{
    if (!rc) rc = trn_loss_items_from_out(raw, items);
    if (rc < 0) {
        trn_seterr(err, cap, "loss at epoch %u batch %" PRIu64 ": %s", b->epoch, b->step,
                   trn_loss_strerror(rc));
        return rc;
    }
    if (!isfinite(items->total)) {
        trn_seterr(err, cap, "loss is not finite at epoch %u batch %" PRIu64, b->epoch, b->step);
        return -ERANGE;
    }
    return 0;
}

/* Says why a training forward or backward (pass) failed (a SyncBatchNorm all-reduce names the
 * rank); returns rc. */
int run_pass_failed(const struct run *R, const struct trn_batch *b, int rc, const char *pass,
                    char *err, size_t cap)
{
    if (R->dist.bn_sync_failed)
        trn_seterr(err, cap, "SyncBatchNorm all-reduce in the %s at epoch %u batch %" PRIu64 ": %s",
                   pass, b->epoch, b->step, trn_dist_error(R->dist.comm));
    else
        trn_seterr(err, cap, "%s: %s", pass, trn_strerror(rc));
    return rc;
}

/*
 * The backward of a training batch (on the device arenas when dev), with the gradient buckets
 * all-reduced while it runs when R->dist.overlap. The net's arena is zero before its backward, so
 * the buckets sum this batch's gradients alone, as the whole-arena all-reduce does; no bucket is in
 * flight when this returns, error or not.
 */
int run_backward(struct run *R, struct trn_net *net, float *const *dp, bool dev,
                 const struct trn_batch *b, char *err, size_t cap)
{
    int rc;
    if (R->dist.overlap &&
        (rc = trn_dist_grad_begin(R->dist.comm, R->nets.info->arena_len[TRN_ARENA_PARAM])) < 0) {
        trn_seterr(err, cap, "gradient all-reduce: cannot start (%s)", trn_dist_strerror(rc));
        return rc;
    }
    rc = dev ? trn_net_backward_dev(net, (const float *const *)dp)
             : trn_net_backward(net, (const float *const *)dp);
    const int wrc = R->dist.overlap ? trn_dist_grad_wait(R->dist.comm) : 0;
    if (rc >= 0 && wrc >= 0) return 0;
    if (R->dist.grad_sync_failed || (rc >= 0 && wrc < 0)) {
        trn_seterr(err, cap, "gradient all-reduce at epoch %u batch %" PRIu64 ": %s", b->epoch,
                   b->step, trn_dist_error(R->dist.comm));
        return rc < 0 ? rc : wrc;
    }
    return run_pass_failed(R, b, rc, "backward", err, cap);
}

/* fp16 (train.h AMP): the loss gradient seed times the scale, on the host (dp) or, for the
 * resident step, in the nets' memory through kern amp_unscale over segs (one per level). The
 * test hook opts.amp_inf_ni puts an Inf into batch ni's seed. */
int run_amp_scale_seed(struct run *R, struct trn_net *net, float *const *dp, bool dev,
                       const struct kern_optim_seg *segs, int64_t ni)
{
    if (!R->state.amp) return 0;
    const float scale = trn_amp_scale(R->state.amp);
    for (int l = 0; l < R->nets.info->nl; l++) {
        const size_t n = (size_t)trn_net_output_shape(net, l, NULL);
        int rc = 0;
        if (!dev) {
            for (size_t i = 0; i < n; i++)
                dp[l][i] *= scale;
        } else {
            rc = R->dev.dK->amp_unscale(R->dev.dctx, dp[l], segs + l, 1, n, scale,
                                        trn_optim_dev_buffer(R->dev.odev, 2));
        }
        if (rc < 0) return rc;
    }
    if (ni != R->o.amp_inf_ni) return 0;
    float inf = INFINITY;
    if (!dev) {
        dp[0][0] = inf;
        return 0;
    }
    return kern_mem_copy(R->dev.dctx, dp[0], &inf, sizeof inf, KERN_COPY_H2D);
}

/* After an fp16 optimizer step (taken or skipped): the scaler's update, and a log line for a
 * skipped one. */
void run_amp_after_step(struct run *R, bool found_inf, const struct trn_batch *b)
{
    trn_amp_update(R->state.amp, found_inf);
    if (found_inf)
        run_log(R,
                "fp16 loss scaler: Inf/NaN gradients at epoch %u batch %" PRIu64
                ": optimizer step skipped, scale now %g",
                b->epoch, b->step, (double)trn_amp_scale(R->state.amp));
}

/* trn_optim_after_batch under the fp16 loss scaler (GradScaler.unscale_, clip, step, update):
 * on a step, the gradients are multiplied by 1 / scale and checked; with an Inf or NaN the
 * parameters and momentum stay, the gradients are zeroed and the step is counted as taken for
 * the accumulation (last_opt_step), as scaler.step with optimizer.zero_grad after it. */
static int amp_host_step(struct run *R, float *params, float *grad, const struct trn_batch *b,
                         int64_t ni, struct trn_optim_report *rep)
{
    struct trn_optim_counters c;
    int rc = trn_optim_schedule(trn_optim_get_opts(R->state.opt), (int)b->epoch, ni, &rep->sched);
    if (rc == 0) rc = trn_optim_get_counters(R->state.opt, &c);
    if (rc < 0) return rc;
    rep->stepped = false;
    if (ni - c.last_opt_step < rep->sched.accumulate) return 0;
    const float inv = trn_amp_inv_scale(R->state.amp);
    const size_t n = R->nets.info->arena_len[TRN_ARENA_PARAM];
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        grad[i] *= inv;
        if (!isfinite(grad[i])) found = true;
    }
    if (!found) {
        rc = trn_optim_after_batch(R->state.opt, params, grad, (int)b->epoch, ni, rep);
        if (rc < 0) return rc;
    } else {
        memset(grad, 0, n * sizeof(float));
        c.last_opt_step = ni;
        trn_optim_set_counters(R->state.opt, &c);
        rep->stepped = true;
        rep->grad_norm = NAN;
        rep->clipped = false;
    }
    run_amp_after_step(R, found, b);
    return 1;
}

/* One batch: forward, loss, backward, optimizer policy, EMA. */
int run_train_batch(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                    char *err, size_t cap)
{
    const bool short_batch = run_is_alt(R, b); /* another shape: net_last */
    int rc = short_batch ? run_alt_net(R, b, err, cap) : 0;
    if (rc < 0) return rc;
    struct trn_net *net = short_batch ? R->nets.net_last : R->nets.net;
    struct trn_loss *loss = short_batch ? R->nets.loss_last : R->nets.loss;
    float *const *dp = short_batch ? R->nets.dp_last : R->nets.dp;
    if ((rc = run_check_batch(R, b, net, short_batch, err, cap)) < 0) return rc;
    const float *out[TRN_MODEL_MAX_LEVELS];
    rc = trn_net_forward(net, b->images, true, out);
    if (rc < 0) return run_pass_failed(R, b, rc, "forward", err, cap);
    if (b->n_targets > (size_t)INT32_MAX) return -E2BIG;
    /* a oneDNN net's outputs as its Detect convs wrote them, and its own gradient buffers */
    float *raw[TRN_MODEL_MAX_LEVELS];
    const int blk = trn_net_raw_dhead(net, raw);
    if (blk > 0) dp = raw;
    rc = trn_loss_compute_blk(loss, R->nets.ctx, out, blk > 0 ? blk : 0, b->targets,
                              (int)b->n_targets, dp, items);
    if (rc < 0) {
        trn_seterr(err, cap, "loss at epoch %u batch %" PRIu64 ": %s", b->epoch, b->step,
                   trn_loss_strerror(rc));
        return rc;
    }
    if (!isfinite(items->total)) {
        trn_seterr(err, cap, "loss is not finite at epoch %u batch %" PRIu64, b->epoch, b->step);
        return -ERANGE;
    }
    const size_t n_grad = R->nets.info->arena_len[TRN_ARENA_PARAM];
    run_amp_scale_seed(R, net, dp, false, NULL, (int64_t)b->epoch * R->state.nb + (int64_t)b->step);
    if ((rc = run_backward(R, net, dp, false, b, err, cap)) < 0) return rc;
    float *grad = trn_net_grad(R->nets.net);
    if (R->dist.world > 1) {
        /* this batch's gradients (the net's arena was zero before its backward), summed over
         * the ranks, then added to the accumulation since the last optimizer step */
        float *bg = trn_net_grad(net);
        const size_t n = n_grad;
        if (!R->dist.overlap && (rc = trn_dist_allreduce_f32(R->dist.comm, bg, n)) < 0) {
            trn_seterr(err, cap, "gradient all-reduce at epoch %u batch %" PRIu64 ": %s", b->epoch,
                       b->step, trn_dist_error(R->dist.comm));
            return rc;
        }
        for (size_t i = 0; i < n; i++)
            R->dist.acc[i] += bg[i];
        trn_net_zero_grad(net);
        grad = R->dist.acc;
    } else if (short_batch) {
        /* the accumulated gradients live in the main net's arena */
        float *g2 = trn_net_grad(R->nets.net_last);
        const size_t n = R->nets.info->arena_len[TRN_ARENA_PARAM];
        for (size_t i = 0; i < n; i++)
            grad[i] += g2[i];
        trn_net_zero_grad(R->nets.net_last);
    }
    const int64_t ni = (int64_t)b->epoch * R->state.nb + (int64_t)b->step;
    struct trn_optim_report rep;
    float *params = trn_model_arena(R->nets.m, TRN_ARENA_PARAM);
    rc = R->state.amp ? amp_host_step(R, params, grad, b, ni, &rep)
                      : trn_optim_after_batch(R->state.opt, params, grad, (int)b->epoch, ni, &rep);
    if (rc < 0) {
        trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    for (int g = 0; g < 3; g++)
        R->state.lr[g] = rep.sched.lr[g];
    /* a device net's backward adds into its backend arena and then copies the whole arena to
     * the host mirror: the step's zeroing of the mirror, and the short batch's sum added to it
     * above, must reach the backend arena too, or the next backward brings stale gradients back
     */
    if (R->dist.world == 1 && (R->nets.gpu_ctx || R->dev.device_path)) {
        if (rep.stepped)
            trn_net_zero_grad(R->nets.net);
        else if (short_batch && (rc = trn_net_sync_grad(R->nets.net, KERN_COPY_H2D)) < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", trn_strerror(rc));
            return rc;
        }
    }
    if (rep.stepped && R->state.ema &&
        (rc = trn_ema_update(R->state.ema, params, trn_model_arena(R->nets.m, TRN_ARENA_BUFFER))) <
            0) {
        trn_seterr(err, cap, "EMA: %s", trn_optim_strerror(rc));
        return rc;
    }
    return 0;
}

const struct run_step run_step_host = { "host", run_train_batch };
