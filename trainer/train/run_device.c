/* The device part of a run (priv/run.h): the resident step's device state (docs/design.md): its
 * setup, the device buffers of a net of another batch shape, the copies to the host where the
 * host reads them, and the part's memory. The steps that use it are step_resident.c and
 * step_graph.c. */
#include "priv/run.h"

/* One copy between host memory and the nets' backend memory (dir KERN_COPY_H2D or _D2H). */
int run_dev_copy(struct run *R, void *dev, void *host, size_t bytes, int dir)
{
    if (!bytes) return 0;
    return dir == KERN_COPY_H2D ? kern_mem_copy(R->dev.dctx, dev, host, bytes, dir)
                                : kern_mem_copy(R->dev.dctx, host, dev, bytes, dir);
}

/* The host copies <-> the backend's: model arenas, momentum, EMA and the gradients accumulated
 * since the last optimizer step (the main net's arena, or acc with several ranks). */
static int resident_sync(struct run *R, int dir)
{
    const struct trn_model_info *I = R->nets.info;
    const size_t P = I->arena_len[TRN_ARENA_PARAM] * sizeof(float);
    const size_t B = I->arena_len[TRN_ARENA_BUFFER] * sizeof(float);
    int rc = trn_net_sync_model(R->nets.net, dir);
    if (!rc)
        rc = run_dev_copy(R, trn_optim_dev_buffer(R->dev.odev, 0),
                          trn_optim_state(R->state.opt, 0, NULL), P, dir);
    if (!rc && R->state.ema)
        rc = run_dev_copy(R, R->dev.d_ema[0], trn_ema_arena(R->state.ema, TRN_ARENA_PARAM), P, dir);
    if (!rc && R->state.ema)
        rc =
            run_dev_copy(R, R->dev.d_ema[1], trn_ema_arena(R->state.ema, TRN_ARENA_BUFFER), B, dir);
    if (!rc)
        rc = R->dist.world > 1 ? run_dev_copy(R, R->dev.d_acc, R->dist.acc, P, dir)
                               : trn_net_sync_grad(R->nets.net, dir);
    return rc;
}

int run_resident_download(struct run *R, char *err, size_t cap)
{
    if (!R->dev.resident) return 0;
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
    if (!R->nets.gpu_ctx && !R->dev.device_path) return 0;
    if (R->o.optimizer != TRN_OPTIM_SGD) {
        run_log(R,
                "%s has no device step: the optimizer and EMA run on the host (parameters go "
                "up and gradients come down every batch)",
                optim_names[R->o.optimizer]);
        return 0;
    }
    R->dev.dK = trn_net_kern_ops(R->nets.net);
    R->dev.dctx = trn_net_kern_ctx(R->nets.net);
    const struct trn_model_info *I = R->nets.info;
    const size_t P = I->arena_len[TRN_ARENA_PARAM], B = I->arena_len[TRN_ARENA_BUFFER];
    int rc = trn_optim_dev_create(R->state.opt, R->dev.dK, R->dev.dctx, &R->dev.odev);
    /* every device step rewrites the nets' AMP weights too (the short net shares them), so that
     * they stay current without a cast per forward (net.h AMP WEIGHTS) */
    int ldt = 0;
    void *const lowp = trn_net_dev_params_lowp(R->nets.net, &ldt);
    if (rc == 0)
        rc = trn_optim_dev_set_params_lowp(R->dev.odev, lowp, ldt,
                                           trn_net_params_lowp_order(R->nets.net));
    const struct trn_loss *const losses[2] = { R->nets.loss, R->nets.loss_last };
    int max_t = 1;
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (!losses[k]) continue;
        size_t b = 0;
        rc = trn_loss_dev_scratch_bytes(trn_loss_get_cfg(losses[k]), R->dev.dK, R->dev.dctx, &b);
        if (b > R->dev.scratch_bytes) R->dev.scratch_bytes = b;
        if (trn_loss_get_cfg(losses[k])->max_targets > max_t)
            max_t = trn_loss_get_cfg(losses[k])->max_targets;
    }
    if (rc == 0 && R->state.ema)
        rc = kern_mem_alloc(R->dev.dctx, P * sizeof(float), (void **)&R->dev.d_ema[0]);
    if (rc == 0 && R->state.ema)
        rc = kern_mem_alloc(R->dev.dctx, B * sizeof(float), (void **)&R->dev.d_ema[1]);
    if (rc == 0 && R->dist.world > 1)
        rc = kern_mem_alloc(R->dev.dctx, P * sizeof(float), (void **)&R->dev.d_acc);
    if (rc == 0)
        rc = kern_mem_alloc(R->dev.dctx, (size_t)max_t * 6 * sizeof(float),
                            (void **)&R->dev.d_targets);
    if (rc == 0) rc = kern_mem_alloc(R->dev.dctx, sizeof(int), (void **)&R->dev.d_nt);
    if (rc == 0)
        rc = kern_mem_alloc(R->dev.dctx, KERN_YOLO_OUT_N * sizeof(float), (void **)&R->dev.d_out);
    if (rc == 0 && R->state.amp) {
        struct kern_optim_seg segs[2 * TRN_MODEL_MAX_LEVELS];
        memset(segs, 0, sizeof segs);
        for (int l = 0; l < I->nl; l++) {
            segs[l].count = (size_t)trn_net_output_shape(R->nets.net, l, NULL);
            segs[I->nl + l].count = (size_t)trn_net_output_shape(
                R->nets.net_last ? R->nets.net_last : R->nets.net, l, NULL);
        }
        const size_t sb = 2 * (size_t)I->nl * sizeof *segs;
        rc = kern_mem_alloc(R->dev.dctx, sb, (void **)&R->dev.d_seg);
        if (rc == 0) rc = kern_mem_copy(R->dev.dctx, R->dev.d_seg, segs, sb, KERN_COPY_H2D);
    }
    if (rc == 0 && R->dev.scratch_bytes)
        rc = kern_mem_alloc(R->dev.dctx, R->dev.scratch_bytes, &R->dev.d_scratch);
    for (int l = 0; l < I->nl && rc == 0; l++) {
        rc = kern_mem_alloc(R->dev.dctx,
                            (size_t)trn_net_output_shape(R->nets.net, l, NULL) * sizeof(float),
                            (void **)&R->dev.d_dp[l]);
        if (rc == 0 && R->nets.net_last)
            rc = kern_mem_alloc(R->dev.dctx,
                                (size_t)trn_net_output_shape(R->nets.net_last, l, NULL) *
                                    sizeof(float),
                                (void **)&R->dev.d_dp_last[l]);
    }
    if (rc == 0) rc = trn_net_set_resident(R->nets.net, true);
    if (rc == 0 && R->nets.net_last) rc = trn_net_set_resident(R->nets.net_last, true);
    if (rc < 0) {
        trn_seterr(err, cap, "the device training step: %s",
                   rc == -ENOTSUP || rc == -ENOMEM ? trn_optim_strerror(rc) : kern_strerror(rc));
        return rc;
    }
    R->dev.resident = true;
    if ((rc = resident_sync(R, KERN_COPY_H2D)) < 0) {
        trn_seterr(err, cap, "copying the training state to the device: %s", kern_strerror(rc));
        return rc;
    }
    run_log(R, "resident step: parameters, gradients, momentum%s and the loss stay in %s memory",
            R->state.ema ? ", EMA" : "", R->nets.gpu_ctx ? "device" : "backend (device data path)");
    /* the batches in the stem's layout where the nets take them so (THE STEM'S INPUT) */
    const bool s2d = R->nets.pixels >= TRN_PIXELS_BF16_S2D_NHWC;
    if (!R->o.host_aug)
        run_log(R,
                "GPU augmentation: tiles go up once per batch, mosaic, affine, HSV, flips and "
                "mixup run in kernels writing the batch tensor%s%s%s (--host-aug: on the host)",
                s2d ? " in bf16 as the stem's " : "",
                !s2d                                         ? ""
                : R->nets.pixels == TRN_PIXELS_BF16_S2D_NHWC ? "NHWC"
                                                             : "NCHW",
                s2d ? " space-to-depth input, which the step reads as it is" : "");
    return 0;
}

/* A new net_last on the resident step: its loss gradients in dctx memory, resident, the loss
 * scratch grown to its grids, and (fp16) its gradient segments. */
int run_resident_alt(struct run *R, char *err, size_t cap)
{
    const struct trn_model_info *I = R->nets.info;
    size_t b = 0;
    int rc =
        trn_loss_dev_scratch_bytes(trn_loss_get_cfg(R->nets.loss_last), R->dev.dK, R->dev.dctx, &b);
    if (rc == 0 && b > R->dev.scratch_bytes) {
        if (R->dev.d_scratch) kern_mem_free(R->dev.dctx, R->dev.d_scratch);
        R->dev.d_scratch = NULL;
        R->dev.scratch_bytes = 0;
        rc = kern_mem_alloc(R->dev.dctx, b, &R->dev.d_scratch);
        if (rc == 0) R->dev.scratch_bytes = b;
    }
    for (int l = 0; l < I->nl && rc == 0; l++)
        rc = kern_mem_alloc(R->dev.dctx,
                            (size_t)trn_net_output_shape(R->nets.net_last, l, NULL) * sizeof(float),
                            (void **)&R->dev.d_dp_last[l]);
    if (rc == 0 && R->dev.d_seg) {
        struct kern_optim_seg segs[TRN_MODEL_MAX_LEVELS];
        memset(segs, 0, sizeof segs);
        for (int l = 0; l < I->nl; l++)
            segs[l].count = (size_t)trn_net_output_shape(R->nets.net_last, l, NULL);
        rc = kern_mem_copy(R->dev.dctx, R->dev.d_seg + I->nl, segs, (size_t)I->nl * sizeof *segs,
                           KERN_COPY_H2D);
    }
    if (rc == 0) rc = trn_net_set_resident(R->nets.net_last, true);
    if (rc < 0)
        trn_seterr(err, cap, "the device training step at a %d x %dx%d batch: %s", R->nets.alt_n,
                   R->nets.alt_h, R->nets.alt_w, kern_strerror(rc));
    return rc;
}

void run_device_free(struct run *R)
{
    struct run_device *D = &R->dev;
    kern_graph_destroy(D->g[0]); /* before the nets and the context they record */
    kern_graph_destroy(D->g[1]);
    ffio_pinned_free(&D->stage);
    trn_optim_dev_destroy(D->odev);
    if (D->dctx) {
        void *const t[] = { D->d_dyn, D->d_ema[0], D->d_ema[1],  D->d_acc, D->d_targets,
                            D->d_nt,  D->d_out,    D->d_scratch, D->d_seg };
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
            kern_mem_free(D->dctx, t[k]);
        for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++) {
            kern_mem_free(D->dctx, D->d_dp[l]);
            kern_mem_free(D->dctx, D->d_dp_last[l]);
        }
    }
    memset(D, 0, sizeof *D);
}
