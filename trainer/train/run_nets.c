/* The nets part of a run (priv/run.h): the model (built, initialised, given its pretrained
 * weights and anchors), the contexts the nets run on, the training nets with their losses, the
 * net of another batch shape, and the checks a batch passes before a step. */
#include "priv/run.h"

/* The model as train.py's Model() prints it: the nc override, the layer table, the summary.
 * yaml_nc > 0: the nc the model's yaml stands for (a checkpoint's: its yaml text predates the
 * override it was trained with, where ultralytics' saved yaml carries it). */
static void log_summary(struct run *R, int yaml_nc)
{
    if (R->dist.rank != 0 || !R->o.log) return;
    const int n = trn_model_summary(R->nets.m, NULL, 0);
    char *s = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return;
    trn_model_summary(R->nets.m, s, (size_t)n + 1);
    char *from = s;
    static const char over[] = "Overriding model.yaml nc=";
    if (!strncmp(s, over, sizeof over - 1)) {
        from = strchr(s, '\n');
        from = from ? from + 1 : s + strlen(s);
        if (yaml_nc <= 0) run_log(R, "%.*s", (int)(from - s - 1), s);
    }
    if (yaml_nc > 0 && yaml_nc != R->nets.info->nc)
        run_log(R, "%s%d with nc=%d", over, yaml_nc, R->nets.info->nc);
    if (R->job.anchors_override > 0)
        run_log(R, "Overriding model.yaml anchors with anchors=%d", R->job.anchors_override);
    for (char *line = from, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        run_log(R, "%s", line);
    }
    free(s);
}

static void autoanchor_log(void *ctx, const char *line)
{
    run_log(ctx, "%s", line);
}

/* train.py's check_anchors on the training set's labels and original sizes, from the index
 * summaries (no record reads): every rank computes the same anchors from the same seed. */
static int run_autoanchor(struct run *R, char *err, size_t cap)
{
    const struct det_labels *t = R->data.labels;
    const uint64_t n = t->n, nl = t->first[n];
    float *shape = malloc(((size_t)n + 1) * 2 * sizeof *shape);
    size_t *first = malloc(((size_t)n + 1) * sizeof *first);
    float *wh = malloc(((size_t)nl + 1) * 2 * sizeof *wh);
    if (!shape || !first || !wh) {
        free(shape), free(first), free(wh);
        return trn_fail(err, cap, -ENOMEM, "AutoAnchor: out of memory");
    }
    for (uint64_t i = 0; i < n; i++) {
        shape[2 * i] = (float)t->image[i].w0, shape[2 * i + 1] = (float)t->image[i].h0;
        first[i] = (size_t)t->first[i];
    }
    first[n] = (size_t)nl;
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t k = t->first[i], q = 0; k < t->first[i + 1]; k++, q++)
            wh[2 * k] = t->rows[i][5 * q + 3], wh[2 * k + 1] = t->rows[i][5 * q + 4];
    const struct trn_anchor_data d = { (size_t)n, shape, first, wh };
    struct trn_autoanchor_result res;
    const int rc = trn_autoanchor(R->nets.m, &d, R->o.img, R->o.hyp.anchor_t, R->o.seed,
                                  R->dist.rank == 0 ? autoanchor_log : NULL, R, &res);
    free(shape), free(first), free(wh);
    return rc < 0 ? trn_fail(err, cap, rc, "AutoAnchor: %s", strerror(-rc)) : 0;
}

/* The training nets' options, hooks and sharing aside. */
static void train_net_opts(const struct run *R, struct trn_net_opts *no)
{
    trn_net_opts_default(no);
    no->ctx = R->nets.gpu_ctx ? R->nets.gpu_ctx : R->nets.ctx;
    no->device_path = R->dev.device_path;
    no->amp = R->o.amp;
    no->cpu_engine = R->o.cpu_engine;
    no->act_store = R->o.act_store;
}

enum trn_pixel_type run_nets_pixels(const struct run *R)
{
    struct trn_net_opts no;
    train_net_opts(R, &no);
    switch (trn_net_s2d_input(R->nets.m, R->o.img, R->o.img, &no)) {
    case KERN_AUG_BF16_S2D_NHWC:
        return TRN_PIXELS_BF16_S2D_NHWC;
    case KERN_AUG_BF16_S2D_NCHW:
        return TRN_PIXELS_BF16_S2D_NCHW;
    default:
        return TRN_PIXELS_F32;
    }
}

static int make_net_loss(struct run *R, int bs, int h, int w, struct trn_net **net,
                         struct trn_loss **loss, float **dp, int64_t max_t, char *err, size_t cap)
{
    struct trn_net_opts no;
    train_net_opts(R, &no);
    /* the short last batch's net runs on the main net's device copies of the model */
    if (R->nets.net && (R->nets.gpu_ctx || R->dev.device_path)) no.share = R->nets.net;
    if (R->dist.overlap) {
        no.grad_ready = run_dist_grad_ready;
        no.grad_ready_ctx = R;
    }
    if (R->dist.world > 1 && R->o.sync_bn) {
        /* the training nets only: validation (rank 0 alone) runs eval forwards on its own net */
        no.bn_allreduce = run_dist_bn_allreduce;
        no.bn_allreduce_ctx = R;
    }
    char e[512] = "";
    int rc = trn_net_create(R->nets.m, bs, h, w, &no, net, e, sizeof e);
    if (rc == 0 && R->nets.pixels >= TRN_PIXELS_BF16_S2D_NHWC) {
        snprintf(e, sizeof e, "the batches as the stem's space-to-depth input");
        rc = trn_net_set_s2d_input(*net, true);
    }
    if (rc < 0) {
        trn_seterr(err, cap, "network at batch %d, %dx%d: %s", bs, h, w,
                   e[0] ? e : trn_strerror(rc));
        return rc;
    }
    /* the loss reads the Detect outputs where oneDNN's convs or the bf16 executor write them (no
     * reshape), where the step's loss can: in host memory, or in the resident step's device
     * memory (run_resident_setup: SGD); the host step of a device net needs them on the host */
    const bool dev = R->nets.gpu_ctx || R->dev.device_path;
    const int head = dev && R->o.optimizer != TRN_OPTIM_SGD ? 0 : trn_net_raw_head(*net, true);
    if ((rc = head) < 0) {
        trn_seterr(err, cap, "network at batch %d, %dx%d: %s", bs, h, w, trn_strerror(rc));
        return rc;
    }
    struct trn_loss_cfg lc;
    if (max_t > INT32_MAX / 64) max_t = INT32_MAX / 64;
    rc = trn_loss_cfg_from_model(R->nets.m, &R->o.hyp, bs, R->o.img, (float)R->o.label_smoothing,
                                 (int)max_t, &lc);
    if (!rc) rc = trn_loss_cfg_set_grid(&lc, R->nets.m, h, w);
    if (head >= TRN_LOSS_HEAD_BF16_NCHW) lc.head = head; /* bf16 in place: sizes the loss */
    if (!rc) rc = trn_loss_create(&lc, loss);
    if (rc < 0) {
        trn_seterr(err, cap, "loss: %s", trn_loss_strerror(rc));
        return rc;
    }
    for (int l = 0; l < trn_net_levels(*net); l++) {
        int shape[5];
        const long n = trn_net_output_shape(*net, l, shape);
        if (n <= 0 || !(dp[l] = calloc((size_t)n, sizeof(float)))) {
            trn_seterr(err, cap, "out of memory");
            return -ENOMEM;
        }
    }
    return 0;
}

bool run_is_alt(const struct run *R, const struct trn_batch *b)
{
    return b->n != R->dist.local_bs || b->height != R->o.img || b->width != R->o.img;
}

/* net_last for batch b's shape: kept while the shape repeats (rect batches come in aspect
 * order), else made anew; its gradients are zero between batches, as the main net's. Returns 0
 * (kept), 1 (made: the resident step then gives it its device buffers, run_resident_alt) or an
 * error with err set. */
int run_alt_net(struct run *R, const struct trn_batch *b, char *err, size_t cap)
{
    if (b->n < 1 || b->n > R->dist.local_bs || b->height < 32 || b->width < 32) {
        trn_seterr(err, cap, "loader gave a %d x %dx%d batch (local batch %d)", b->n, b->height,
                   b->width, R->dist.local_bs);
        return -EINVAL;
    }
    if (R->nets.net_last && R->nets.alt_n == b->n && R->nets.alt_h == b->height &&
        R->nets.alt_w == b->width)
        return 0;
    trn_net_destroy(R->nets.net_last);
    trn_loss_destroy(R->nets.loss_last);
    R->nets.net_last = NULL;
    R->nets.loss_last = NULL;
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++) {
        free(R->nets.dp_last[l]);
        R->nets.dp_last[l] = NULL;
        if (R->dev.dctx && R->dev.d_dp_last[l]) kern_mem_free(R->dev.dctx, R->dev.d_dp_last[l]);
        R->dev.d_dp_last[l] = NULL;
    }
    R->nets.alt_n = R->nets.alt_h = R->nets.alt_w = 0;
    const int rc =
        make_net_loss(R, b->n, b->height, b->width, &R->nets.net_last, &R->nets.loss_last,
                      R->nets.dp_last, R->nets.per_image_t * b->n, err, cap);
    if (rc < 0) return rc;
    trn_net_zero_grad(R->nets.net_last);
    R->nets.alt_n = b->n, R->nets.alt_h = b->height, R->nets.alt_w = b->width;
    return 1;
}

/* train.py --multi-scale: sz = randrange(int(img * 0.5), int(img * 1.5) + gs) // gs * gs, the
 * batch interpolated (bilinear, align_corners=False) to ceil(side * sz / max(h, w) / gs) * gs
 * per side, Python's double arithmetic; the draw from the seed and the batch's position. The
 * targets are normalised, so they stay. */
int run_nets_multi_scale(struct run *R, const struct trn_batch *b, struct trn_batch *out, char *err,
                         size_t cap)
{
    const int gs = R->nets.grid, img = R->o.img;
    struct trn_rng r;
    trn_rng_init(&r, R->o.seed, b->epoch, b->step, TRN_STREAM_MULTISCALE);
    const int lo = (int)(img * 0.5), hi = (int)(img * 1.5) + gs;
    const int sz = (lo + (int)trn_rng_below(&r, (uint64_t)(hi - lo))) / gs * gs;
    const double sf = (double)sz / (b->height > b->width ? b->height : b->width);
    if (sf == 1.0) return 0;
    if (!b->images) {
        trn_seterr(err, cap, "--multi-scale needs the batch on the host");
        return -EINVAL;
    }
    const int nh = (int)ceil(b->height * sf / gs) * gs, nw = (int)ceil(b->width * sf / gs) * gs;
    const size_t need = (size_t)b->n * 3 * (size_t)nh * (size_t)nw;
    if (need > R->nets.ms_cap) {
        float *p = realloc(R->nets.ms_buf, need * sizeof *p);
        if (!p) {
            trn_seterr(err, cap, "--multi-scale: out of memory for a %dx%d batch", nh, nw);
            return -ENOMEM;
        }
        R->nets.ms_buf = p;
        R->nets.ms_cap = need;
    }
    const int rc = trn_tta_interpolate(b->images, b->n, 3, b->height, b->width, nh, nw,
                                       R->nets.ms_buf, R->nets.ms_cap);
    if (rc < 0) {
        trn_seterr(err, cap, "--multi-scale: resizing to %dx%d: %s", nh, nw, strerror(-rc));
        return rc;
    }
    out->images = R->nets.ms_buf;
    out->height = nh;
    out->width = nw;
    out->image_bytes = need * sizeof(float);
    return 0;
}

/* The loader's batch has the shape the nets were built for. */
int run_check_batch(const struct run *R, const struct trn_batch *b, const struct trn_net *net,
                    bool short_batch, char *err, size_t cap)
{
    const int n = short_batch ? R->nets.alt_n : R->dist.local_bs,
              h = short_batch ? R->nets.alt_h : R->o.img,
              w = short_batch ? R->nets.alt_w : R->o.img;
    if (!net || b->n != n || b->height != h || b->width != w || b->pixels != R->nets.pixels) {
        trn_seterr(err, cap, "loader gave a %d x %dx%d batch; expected %d x %dx%d", b->n, b->height,
                   b->width, n, h, w);
        return -EINVAL;
    }
    return 0;
}

/* The batch's targets fit the loss's fixed target buffers. */
int run_targets_fit(const struct trn_loss_cfg *cfg, const struct trn_batch *b, char *err,
                    size_t cap)
{
    if (b->n_targets <= (size_t)cfg->max_targets) return 0;
    trn_seterr(err, cap, "loss at epoch %u batch %" PRIu64 ": %s", b->epoch, b->step,
               trn_loss_strerror(-E2BIG));
    return -E2BIG;
}

/* The model: --weights' checkpoint and (without --cfg) the yaml ours is built from, as train.py's
 * Model(cfg or ckpt['model'].yaml, nc=nc); the hyp's anchors; initialised and transferred;
 * AutoAnchor, or when resuming the checkpoint's buffers (C). */
int run_nets_model(struct run *R, struct trn_ckpt *C, char *err, size_t cap)
{
    const struct trn_train_opts *o = &R->o;
    struct run_job *J = &R->job;
    char e[768] = "";
    int rc;
    struct trn_model *src = NULL;
    if (!o->resume && o->weights) {
        char *wy = NULL;
        size_t wl = 0;
        if ((rc = trn_weights_pretrained(o->weights, &src, &wy, &wl, e, sizeof e)) < 0)
            return trn_fail(err, cap, rc, "%s", e);
        if (!o->cfg)
            J->model_yaml = wy, J->model_yaml_len = wl;
        else
            free(wy);
    }
    if (!o->resume && o->cfg) {
        rc = trn_read_file(o->cfg, TRN_CKPT_MAX_TEXT, &J->model_yaml, &J->model_yaml_len, e,
                           sizeof e);
        if (rc < 0) {
            trn_model_destroy(src);
            return trn_fail(err, cap, rc, "cannot read the model yaml: %s", e);
        }
    }
    /* the hyp's anchors (train.py's Model(..., anchors=hyp.get('anchors'))): the yaml's anchors
     * become that many placeholders per level for AutoAnchor; appended, since a repeated key's
     * last value wins, so the checkpoint's yaml rebuilds this model */
    if (!o->resume && o->hyp.anchors > 0) {
        J->anchors_override = (int)o->hyp.anchors;
        char *t = malloc(J->model_yaml_len + 32);
        if (!t) {
            trn_model_destroy(src);
            return trn_fail(err, cap, -ENOMEM, "out of memory");
        }
        memcpy(t, J->model_yaml, J->model_yaml_len);
        J->model_yaml_len +=
            (size_t)snprintf(t + J->model_yaml_len, 32, "\nanchors: %d\n", J->anchors_override);
        free(J->model_yaml);
        J->model_yaml = t;
    }
    struct trn_model_opts mo;
    trn_model_opts_default(&mo);
    mo.nc = o->single_cls ? 1 : o->nc > 0 ? o->nc : R->data.n_names;
    /* Model(ckpt['model'].yaml) has no yaml_file: ultralytics calls it "Model" */
    if (src && !o->cfg) mo.name = "Model";
    rc = trn_model_parse(J->model_yaml, J->model_yaml_len,
                         o->cfg       ? o->cfg
                         : o->weights ? o->weights
                                      : "model.yaml",
                         &mo, &R->nets.m, e, sizeof e);
    if (rc < 0) {
        trn_model_destroy(src);
        trn_seterr(err, cap, "%s", e[0] ? e : trn_strerror(rc));
        return rc;
    }
    const struct trn_model_info *I = R->nets.info = trn_model_info(R->nets.m);
    R->nets.grid = 32;
    for (int l = 0; l < I->nl; l++)
        if (I->stride[l] > R->nets.grid) R->nets.grid = I->stride[l];
    if (!o->resume) log_summary(R, src && !o->cfg ? trn_model_info(src)->nc : 0);
    if (R->data.n_names > 0 && R->data.n_names != I->nc)
        run_log(R, "WARNING: the dataset names %d classes, the model has nc=%d", R->data.n_names,
                I->nc);
    /* also when resuming: it sets the anchors, which the loss reads at creation (the
     * checkpoint's weights are copied over it afterwards) */
    trn_model_init(R->nets.m, o->seed);
    if (src) {
        /* anchors too unless --cfg or the hyp's anchors gave them (train.py's exclude) */
        const int n = trn_model_transfer(R->nets.m, src, !o->cfg && !(o->hyp.anchors > 0));
        trn_model_destroy(src);
        run_log(R, "Transferred %d/%d items from %s", n, I->n_tensors, o->weights);
        if (n == 0)
            run_log(R,
                    "WARNING: no tensor of %s fits this model (another architecture?): "
                    "training starts from the initial weights",
                    o->weights);
    }
    /* before the loss, which reads the anchors at its creation: AutoAnchor's, or when resuming
     * the checkpoint's buffers (its anchors; run_resume_state reads them again, with the rest) */
    if (!o->resume && !o->noautoanchor && (rc = run_autoanchor(R, err, cap)) < 0) return rc;
    if (o->resume &&
        (rc = trn_ckpt_read(C, TRN_CKPT_MODEL_BUFFER, trn_model_arena(R->nets.m, TRN_ARENA_BUFFER),
                            I->arena_len[TRN_ARENA_BUFFER] * sizeof(float), err, cap)) < 0)
        return rc;
    return 0;
}

/* The contexts: the CPU's (the loader's pixels, the host step) and, with --device, the CUDA
 * context the nets run on with its conv plan table. */
int run_nets_contexts(struct run *R, char *err, size_t cap)
{
    const struct trn_train_opts *o = &R->o;
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.threads = o->threads;
    int rc;
    if ((rc = kern_ctx_create(&ko, &R->nets.ctx)) < 0) {
        trn_seterr(err, cap, "kern context: %s", kern_strerror(rc));
        return rc;
    }
    R->dev.device_path = o->gpu < 0 && o->device_path;
    if (o->amp != KERN_DT_F32 && o->amp != KERN_DT_BF16 && o->amp != KERN_DT_F16) {
        trn_seterr(err, cap, "amp: unknown dtype %d", o->amp);
        return -EINVAL;
    }
    if (o->gpu < 0) return 0;
    kern_ctx_opts_default(&ko);
    ko.backend = KERN_BACKEND_CUDA;
    ko.device = o->gpu;
    ko.any_algo = o->any_algo;
    if ((rc = trn_plans_open(&R->nets.plans, o->cudnn_plan, o->cudnn_tune, err, cap)) < 0)
        return rc;
    ko.plans = R->nets.plans.table;
    ko.tune = o->cudnn_tune;
    if ((rc = kern_ctx_create(&ko, &R->nets.gpu_ctx)) < 0) {
        trn_seterr(err, cap, "CUDA device %d: %s", o->gpu,
                   rc == -KERN_EBACKEND ? "no such device, or this build has no CUDA"
                                        : kern_strerror(rc));
        return rc;
    }
    /* NCCL's collectives on the device arenas are ordered after this context's work */
    trn_dist_set_stream(R->dist.comm, kern_cuda_ctx_stream(R->nets.gpu_ctx));
    return 0;
}

/* The training nets and their losses: the full batch's, and the epoch's short last batch's
 * where it has another size (rect and --multi-scale batches make theirs as they come). */
int run_nets_create(struct run *R, char *err, size_t cap)
{
    const struct trn_train_opts *o = &R->o;
    struct run_nets *N = &R->nets;
    const int bs = R->dist.local_bs, last = R->state.last_bs;
    /* A mosaic holds 4 records' labels, a mixup 8, copy_paste up to twice that; clipping only
     * removes rows. */
    const int64_t per = (int64_t)R->data.labels->max_rows * (o->hyp.mixup > 0 ? 8 : 4) *
                            (o->hyp.copy_paste > 0 ? 2 : 1) +
                        8;
    N->per_image_t = per;
    int rc = make_net_loss(R, bs, o->img, o->img, &N->net, &N->loss, N->dp, per * bs, err, cap);
    if (rc == 0 && last != bs && !o->rect && !o->multi_scale) {
        rc = make_net_loss(R, last, o->img, o->img, &N->net_last, &N->loss_last, N->dp_last,
                           per * last, err, cap);
        N->alt_n = last, N->alt_h = N->alt_w = o->img;
    }
    if (rc < 0) return rc;
    trn_net_zero_grad(N->net);
    trn_net_zero_grad(N->net_last);
    return 0;
}

void run_nets_free(struct run *R)
{
    struct run_nets *N = &R->nets;
    trn_net_destroy(N->net);
    trn_net_destroy(N->net_last);
    free(N->ms_buf);
    trn_loss_destroy(N->loss);
    trn_loss_destroy(N->loss_last);
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++) {
        free(N->dp[l]);
        free(N->dp_last[l]);
    }
    kern_ctx_destroy(N->ctx);
    kern_ctx_destroy(N->gpu_ctx); /* after the nets, whose memory it holds */
    trn_plans_close(&N->plans);   /* after the context that borrows it */
    trn_model_destroy(N->m);
    memset(N, 0, sizeof *N);
}
