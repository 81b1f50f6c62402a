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
    if (!R->gpu_ctx && !R->device_path) {
        why = "the CPU path has no device step (use --device N, or --device-path to test)";
    } else if (!R->resident) {
        snprintf(what, sizeof what, "%s has no device step", optim_names[R->o.optimizer]);
        why = what;
    } else if (R->amp) {
        why = "fp16 loss scaling (the scale and the skip are host decisions at every step)";
    } else if (R->world > 1 && R->o.sync_bn) {
        why = "--sync-bn (its all-reduce is a host round trip inside the forward and backward)";
    } else if (R->world > 1) {
        snprintf(what, sizeof what,
                 "%d ranks (the gradient all-reduce runs between backward and the step)", R->world);
        why = what;
    } else if (!R->dK->ema_update_dyn || !R->dK->sgd_step) {
        why = "the backend has no per-step scalars in memory";
    }
    if (why) {
        run_log(R, "cuda graph: off, the step runs directly: %s", why);
        return 0;
    }
    int rc = kern_mem_alloc(R->dctx, sizeof(struct kern_sgd_dyn), (void **)&R->d_dyn);
    if (rc == 0)
        rc = ffio_pinned_alloc(2 * sizeof(struct graph_stage),
                               R->gpu_ctx ? 0u : FFIO_PINNED_HOST_ONLY, &R->stage);
    if (rc < 0) {
        trn_seterr(err, cap, "cuda graph buffers: %s", kern_strerror(rc));
        return rc;
    }
    for (int k = 0; k < 2; k++) {
        R->gs[k] = (struct graph_step){
            .net = R->net,
            .cfg = trn_loss_get_cfg(R->loss),
            .K = R->dK,
            .ctx = R->dctx,
            .input = trn_net_dev_input(R->net),
            .targets = R->d_targets,
            .nt = R->d_nt,
            .dp = R->d_dp,
            .out = R->d_out,
            .scratch = R->d_scratch,
            .scratch_bytes = R->scratch_bytes,
            .step = k == 1,
            .odev = R->odev,
            .params = trn_net_dev_arena(R->net, TRN_ARENA_PARAM),
            .grad = trn_net_dev_grad(R->net),
            .ema_param = R->ema ? R->d_ema[0] : NULL,
            .ema_buf = R->ema ? R->d_ema[1] : NULL,
            .buf = trn_net_dev_arena(R->net, TRN_ARENA_BUFFER),
            .n_buf = R->info->arena_len[TRN_ARENA_BUFFER],
            .dyn = R->d_dyn,
            .phase = &R->g_phase,
        };
    }
    /* a replay runs no host code: num_batches_tracked is counted by run_train_batch_graph */
    trn_net_set_count(R->net, false);
    R->graph = true;
    run_log(R,
            "cuda graph: the full batches' step (forward, loss, backward, optimizer, EMA) runs "
            "directly once, then as %s graphs (accumulate only / with the optimizer step); the "
            "short last batch runs directly",
            R->gpu_ctx ? "CUDA" : "CPU-backend");
    return 0;
}

/* Drop the graphs (they are captured again after one more direct run). */
static void graph_drop(struct run *R)
{
    for (int k = 0; k < 2; k++) {
        kern_graph_destroy(R->g[k]);
        R->g[k] = NULL;
        R->g_direct[k] = 0;
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
    int rc = run_check_batch(R, b, b->n == R->local_bs ? R->net : NULL, false, err, cap);
    const struct trn_loss_cfg *cfg = R->gs[0].cfg;
    if (rc < 0 || (rc = run_targets_fit(cfg, b, err, cap)) < 0) return rc;
    /* trn_optim_after_batch's policy: which of the two graphs this batch runs */
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
    const int k = ni - c.last_opt_step >= sch.accumulate;
    const int64_t upd = R->ema ? trn_ema_updates(R->ema) + 1 : 0;
    struct graph_stage *const st = (struct graph_stage *)R->stage.ptr + (R->stage_n++ & 1);
    st->nt = (int32_t)b->n_targets;
    if (k) {
        const struct trn_optim_dev_step_opts so = { .grad_scale = 1.0f,
                                                    .ema = R->ema ? R->d_ema[0] : NULL,
                                                    .ema_decay = trn_ema_decay(upd) };
        if ((rc = trn_optim_dev_dyn_fill(R->odev, &sch, &so, &st->dyn)) < 0) {
            trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
            return rc;
        }
    }
    /* the uploads, enqueued before the run that reads them (pinned sources on CUDA: the loader's
     * batch and targets, this slot, which the next batch does not reuse) */
    const bool on_dev = b->device_images != NULL;
    const size_t img_bytes =
        (size_t)b->n * 3 * (size_t)b->height * (size_t)b->width * sizeof(float);
    rc = kern_mem_copy(R->dctx, (void *)R->gs[0].input, on_dev ? b->device_images : b->images,
                       img_bytes, on_dev ? KERN_COPY_D2D : KERN_COPY_H2D);
    if (!rc && b->n_targets)
        rc = kern_mem_copy(R->dctx, R->d_targets, b->targets, b->n_targets * 6 * sizeof(float),
                           KERN_COPY_H2D);
    if (!rc) rc = kern_mem_copy(R->dctx, R->d_nt, &st->nt, sizeof st->nt, KERN_COPY_H2D);
    if (!rc && k) rc = kern_mem_copy(R->dctx, R->d_dyn, &st->dyn, sizeof st->dyn, KERN_COPY_H2D);
    if (rc < 0) {
        trn_seterr(err, cap, "uploading the batch: %s", kern_strerror(rc));
        return rc;
    }
    /* a workspace that grew since the capture is a new buffer: the graphs' pointers are stale */
    if ((R->g[0] || R->g[1]) && kern_ctx_workspace_size(R->dctx) != R->g_ws) {
        run_log(R, "cuda graph: the context's workspace changed; capturing the step again");
        graph_drop(R);
    }
    static const char *const kind[2] = { "accumulate-only", "optimizer" };
    R->g_phase = "step";
    /* the AMP weights made current outside the graph, so that no capture depends on whether
     * they were stale then (net.h AMP WEIGHTS) */
    if ((rc = trn_net_lowp_refresh(R->net)) < 0) {
        trn_seterr(err, cap, "AMP weights: %s", trn_strerror(rc));
        return rc;
    }
    bool ran = false;
    if (R->g[k]) {
        rc = kern_graph_replay(R->g[k]);
        R->g_replays++;
        ran = true;
    } else if (R->g_direct[k] > 0) {
        rc = R->o.cuda_graph_fail
                 ? -ENOTSUP
                 : kern_graph_capture(R->dctx, graph_step_run, &R->gs[k], &R->g[k]);
        const bool cuda = kern_ctx_backend(R->dctx) == KERN_BACKEND_CUDA;
        if (rc == 0) {
            ran = true;
            R->g_captures++;
            R->g_ws = kern_ctx_workspace_size(R->dctx);
            run_log(R, "cuda graph: captured the %s step at epoch %u batch %" PRIu64, kind[k],
                    b->epoch, b->step);
        } else if (cuda || R->o.cuda_graph_fail) {
            /* nothing ran: this batch runs directly, the following ones as before the graphs */
            run_log(R,
                    "cuda graph: capturing the %s step failed (%s); the step runs directly from "
                    "here",
                    kind[k], kern_strerror(rc));
            graph_drop(R);
            R->graph = false;
            rc = 0;
        }
        /* else the CPU backend's capture ran the step, which failed: rc is its error */
    }
    if (!ran && rc == 0) {
        rc = graph_step_run(&R->gs[k]);
        R->g_direct[k]++;
        R->g_direct_all++;
    }
    if (rc < 0) {
        trn_seterr(err, cap, "%s at epoch %u batch %" PRIu64 ": %s", R->g_phase, b->epoch, b->step,
                   !strcmp(R->g_phase, "loss")        ? trn_loss_strerror(rc)
                   : !strcmp(R->g_phase, "optimizer") ? trn_optim_strerror(rc)
                                                      : trn_strerror(rc));
        return rc;
    }
    /* the host's share of the step */
    trn_net_count_batches(R->net, 1);
    if (!R->graph) trn_net_set_count(R->net, true);
    if (k) {
        trn_optim_get_counters(R->opt, &c);
        c.steps++;
        c.last_opt_step = ni;
        trn_optim_set_counters(R->opt, &c);
        if (R->ema) trn_ema_set_updates(R->ema, upd);
    }
    float raw[KERN_YOLO_OUT_N];
    rc = kern_mem_copy(R->dctx, raw, R->d_out, sizeof raw, KERN_COPY_D2H);
    return run_loss_from_device(rc, raw, b, items, err, cap);
}

const struct run_step run_step_graph = { "graph", run_train_batch_graph };
