/* The resident step as two CUDA graphs, captured once and replayed (--cuda-graph;
 * docs/design.md "One CUDA graph per training step"). */
#include "priv/run.h"

/* The recorded step: forward, the device loss, backward and, for the step kind, the fused clip
 * + SGD + parameter EMA, zero grad and the buffers' EMA. Reads only s and the memory it points to,
 * takes the same path at every call and never waits for the device (kern.h "Graphs"). */
static int graph_step_run(void *arg)
{
    const struct graph_step *s = arg;
    const float *out[TRN_MODEL_MAX_LEVELS];
    *s->phase = "forward";
    int rc = trn_net_forward_dev(s->net, s->input, true, true, out);
    if (rc < 0) return rc;
    *s->phase = "loss";
    rc = trn_loss_compute_dev(s->cfg, s->K, s->ctx, out, s->targets, s->nt, s->dp, 0, s->out,
                              s->scratch, s->scratch_bytes);
    if (rc < 0) return rc;
    *s->phase = "backward";
    if ((rc = trn_net_backward_dev(s->net, (const float *const *)s->dp)) < 0 || !s->step) return rc;
    *s->phase = "optimizer";
    const struct trn_optim_dev_step_opts so = { .grad_scale = 1.0f, .ema = s->ema_param };
    rc = trn_optim_dev_step_dyn(s->odev, s->params, s->grad, s->dyn, &so);
    if (rc == 0) rc = trn_optim_dev_zero_grad(s->odev, s->grad);
    if (rc == 0 && s->ema_buf) {
        *s->phase = "EMA";
        rc = s->K->ema_update_dyn(s->ctx, s->ema_buf, s->buf, s->n_buf, s->dyn);
    }
    return rc;
}

/* After run_resident_setup: turn the graph step on where it can run, or say why not. */
int run_graph_setup(struct run *R, char *err, size_t cap)
{
    if (!R->o.cuda_graph) return 0;
    const char *why = NULL;
    char what[128];
    if (!R->nets.gpu_ctx && !R->dev.device_path) {
        why = "the CPU path has no device step (use --device N, or --device-path to test)";
    } else if (!R->dev.resident) {
        snprintf(what, sizeof what, "%s has no device step", optim_names[R->o.optimizer]);
        why = what;
    } else if (R->state.amp) {
        why = "fp16 loss scaling (the scale and the skip are host decisions at every step)";
    } else if (R->dist.world > 1 && R->o.sync_bn) {
        why = "--sync-bn (its all-reduce is a host round trip inside the forward and backward)";
    } else if (R->dist.world > 1) {
        snprintf(what, sizeof what,
                 "%d ranks (the gradient all-reduce runs between backward and the step)",
                 R->dist.world);
        why = what;
    } else if (!R->dev.dK->ema_update_dyn || !R->dev.dK->sgd_step) {
        why = "the backend has no per-step scalars in memory";
    }
    if (why) {
        run_log(R, "cuda graph: off, the step runs directly: %s", why);
        return 0;
    }
    int rc = kern_mem_alloc(R->dev.dctx, sizeof(struct kern_sgd_dyn), (void **)&R->dev.d_dyn);
    if (rc == 0)
        rc = ffio_pinned_alloc(2 * sizeof(struct graph_stage),
                               R->nets.gpu_ctx ? 0u : FFIO_PINNED_HOST_ONLY, &R->dev.stage);
    if (rc < 0) {
        trn_seterr(err, cap, "cuda graph buffers: %s", kern_strerror(rc));
        return rc;
    }
    for (int k = 0; k < 2; k++) {
        R->dev.gs[k] = (struct graph_step){
            .net = R->nets.net,
            .cfg = trn_loss_get_cfg(R->nets.loss),
            .K = R->dev.dK,
            .ctx = R->dev.dctx,
            .input = trn_net_dev_input(R->nets.net),
            .targets = R->dev.d_targets,
            .nt = R->dev.d_nt,
            .dp = trn_net_raw_dhead(R->nets.net, R->dev.raw_dp) > 0 ? R->dev.raw_dp : R->dev.d_dp,
            .out = R->dev.d_out,
            .scratch = R->dev.d_scratch,
            .scratch_bytes = R->dev.scratch_bytes,
            .step = k == 1,
            .odev = R->dev.odev,
            .params = trn_net_dev_arena(R->nets.net, TRN_ARENA_PARAM),
            .grad = trn_net_dev_grad(R->nets.net),
            .ema_param = R->state.ema ? R->dev.d_ema[0] : NULL,
            .ema_buf = R->state.ema ? R->dev.d_ema[1] : NULL,
            .buf = trn_net_dev_arena(R->nets.net, TRN_ARENA_BUFFER),
            .n_buf = R->nets.info->arena_len[TRN_ARENA_BUFFER],
            .dyn = R->dev.d_dyn,
            .phase = &R->dev.g_phase,
        };
    }
    /* a replay runs no host code: num_batches_tracked is counted by run_train_batch_graph */
    trn_net_set_count(R->nets.net, false);
    R->dev.graph = true;
    run_log(R,
            "cuda graph: the full batches' step (forward, loss, backward, optimizer, EMA) runs "
            "directly once, then as %s graphs (accumulate only / with the optimizer step); the "
            "short last batch runs directly",
            R->nets.gpu_ctx ? "CUDA" : "CPU-backend");
    return 0;
}

/* Drop the graphs (they are captured again after one more direct run). */
static void graph_drop(struct run *R)
{
    for (int k = 0; k < 2; k++) {
        kern_graph_destroy(R->dev.g[k]);
        R->dev.g[k] = NULL;
        R->dev.g_direct[k] = 0;
    }
}

/* A full batch through the graph step: the batch, the targets, their count and the step's
 * scalars uploaded into the fixed buffers graph_step_run reads, then the step run directly (the
 * first time of each kind: cuDNN plans, workspaces), captured (the second) or replayed; the host
 * keeps the counters a replay cannot (optimizer steps, EMA updates, num_batches_tracked) and reads
 * the loss floats afterwards. Results are run_train_batch_resident's byte for byte; only a
 * non-finite loss is found after the step rather than before it (the run fails either way). */
int run_train_batch_graph(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                          char *err, size_t cap)
{
    /* full batches only: a short one is not this net's shape (NULL net: the check says so) */
    int rc = run_check_batch(R, b, b->n == R->dist.local_bs ? R->nets.net : NULL, false, err, cap);
    const struct trn_loss_cfg *cfg = R->dev.gs[0].cfg;
    if (rc < 0 || (rc = run_targets_fit(cfg, b, err, cap)) < 0) return rc;
    /* trn_optim_after_batch's policy: which of the two graphs this batch runs */
    int64_t ni;
    struct trn_optim_sched sch;
    struct trn_optim_counters c;
    const int k = run_state_schedule(R, b, &sch, &c, &ni, err, cap);
    if (k < 0) return k;
    const int64_t upd = R->state.ema ? trn_ema_updates(R->state.ema) + 1 : 0;
    struct graph_stage *const st = (struct graph_stage *)R->dev.stage.ptr + (R->dev.stage_n++ & 1);
    st->nt = (int32_t)b->n_targets;
    if (k) {
        const struct trn_optim_dev_step_opts so = { .grad_scale = 1.0f,
                                                    .ema = R->state.ema ? R->dev.d_ema[0] : NULL,
                                                    .ema_decay = trn_ema_decay(upd) };
        if ((rc = trn_optim_dev_dyn_fill(R->dev.odev, &sch, &so, &st->dyn)) < 0) {
            trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
            return rc;
        }
    }
    /* the uploads, enqueued before the run that reads them (pinned sources on CUDA: the loader's
     * batch and targets, this slot, which the next batch does not reuse) */
    const bool on_dev = b->device_images != NULL;
    /* the net's input slot, in the batch's pixel type (run_check_batch) */
    rc = kern_mem_copy(R->dev.dctx, (void *)R->dev.gs[0].input,
                       on_dev ? b->device_images : b->images, b->image_bytes,
                       on_dev ? KERN_COPY_D2D : KERN_COPY_H2D);
    if (!rc && b->n_targets)
        rc = kern_mem_copy(R->dev.dctx, R->dev.d_targets, b->targets,
                           b->n_targets * 6 * sizeof(float), KERN_COPY_H2D);
    if (!rc) rc = kern_mem_copy(R->dev.dctx, R->dev.d_nt, &st->nt, sizeof st->nt, KERN_COPY_H2D);
    if (!rc && k)
        rc = kern_mem_copy(R->dev.dctx, R->dev.d_dyn, &st->dyn, sizeof st->dyn, KERN_COPY_H2D);
    if (rc < 0) {
        trn_seterr(err, cap, "uploading the batch: %s", kern_strerror(rc));
        return rc;
    }
    /* a workspace that grew since the capture is a new buffer: the graphs' pointers are stale */
    if ((R->dev.g[0] || R->dev.g[1]) && kern_ctx_workspace_size(R->dev.dctx) != R->dev.g_ws) {
        run_log(R, "cuda graph: the context's workspace changed; capturing the step again");
        graph_drop(R);
    }
    static const char *const kind[2] = { "accumulate-only", "optimizer" };
    R->dev.g_phase = "step";
    /* the AMP weights made current outside the graph, so that no capture depends on whether
     * they were stale then (net.h AMP WEIGHTS) */
    if ((rc = trn_net_lowp_refresh(R->nets.net)) < 0) {
        trn_seterr(err, cap, "AMP weights: %s", trn_strerror(rc));
        return rc;
    }
    bool ran = false;
    if (R->dev.g[k]) {
        rc = kern_graph_replay(R->dev.g[k]);
        R->dev.g_replays++;
        ran = true;
    } else if (R->dev.g_direct[k] > 0) {
        rc = R->o.cuda_graph_fail
                 ? -ENOTSUP
                 : kern_graph_capture(R->dev.dctx, graph_step_run, &R->dev.gs[k], &R->dev.g[k]);
        const bool cuda = kern_ctx_backend(R->dev.dctx) == KERN_BACKEND_CUDA;
        if (rc == 0) {
            ran = true;
            R->dev.g_captures++;
            R->dev.g_ws = kern_ctx_workspace_size(R->dev.dctx);
            run_log(R, "cuda graph: captured the %s step at epoch %u batch %" PRIu64, kind[k],
                    b->epoch, b->step);
        } else if (cuda || R->o.cuda_graph_fail) {
            /* nothing ran: this batch runs directly, the following ones as before the graphs */
            run_log(R,
                    "cuda graph: capturing the %s step failed (%s); the step runs directly from "
                    "here",
                    kind[k], kern_strerror(rc));
            graph_drop(R);
            R->dev.graph = false;
            rc = 0;
        }
        /* else the CPU backend's capture ran the step, which failed: rc is its error */
    }
    if (!ran && rc == 0) {
        rc = graph_step_run(&R->dev.gs[k]);
        R->dev.g_direct[k]++;
        R->dev.g_direct_all++;
    }
    if (rc < 0) {
        trn_seterr(err, cap, "%s at epoch %u batch %" PRIu64 ": %s", R->dev.g_phase, b->epoch,
                   b->step,
                   !strcmp(R->dev.g_phase, "loss")        ? trn_loss_strerror(rc)
                   : !strcmp(R->dev.g_phase, "optimizer") ? trn_optim_strerror(rc)
                                                          : trn_strerror(rc));
        return rc;
    }
    /* the host's share of the step */
    trn_net_count_batches(R->nets.net, 1);
    if (!R->dev.graph) trn_net_set_count(R->nets.net, true);
    if (k) {
        trn_optim_get_counters(R->state.opt, &c);
        c.steps++;
        c.last_opt_step = ni;
        trn_optim_set_counters(R->state.opt, &c);
        if (R->state.ema) trn_ema_set_updates(R->state.ema, upd);
    }
    float raw[KERN_YOLO_OUT_N];
    rc = kern_mem_copy(R->dev.dctx, raw, R->dev.d_out, sizeof raw, KERN_COPY_D2H);
    return run_loss_from_device(rc, raw, b, items, err, cap);
}

const struct run_step run_step_graph = { "graph", run_train_batch_graph };
