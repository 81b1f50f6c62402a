/*
 * The training loop (train.h has the contract): a run's setup and teardown, the epochs with
 * their validation, early stop and the ranks' agreement. What a step does is in the step files
 * (priv/run.h, struct run_step); what a run writes and resumes from is in run_files.c, whose
 * checkpoints hold the arenas as raw little-endian bytes, so resume is bit-exact on the same path.
 */
#include "priv/run.h"

void trn_train_opts_default(struct trn_train_opts *o)
{
    memset(o, 0, sizeof *o);
    trn_hyp_default(&o->hyp);
    o->img = 640;
    o->batch_size = 16;
    o->epochs = 100;
    o->optimizer = TRN_OPTIM_SGD;
    o->device = "cpu";
    o->gpu = -1;
    o->patience = 100;
    o->amp = KERN_DT_F32;
    o->val_amp = -1;
    o->val_cpu_engine = TRN_CPU_ENGINE_AUTO;
    o->cpu_engine = TRN_CPU_ENGINE_AUTO;
    o->amp_inf_ni = -1;
}

void run_log(const struct run *R, const char *fmt, ...)
{
    if (!R->o.log || R->rank != 0) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    R->o.log(R->o.log_ctx, line);
}

/* A cached shard with a damaged record (the cache's cheap reuse check cannot see one): evict
 * it so that the next run fetches and verifies it again. Worker threads: a cache handle each. */
static void loader_damaged(void *ctx, const char *path, uint64_t record)
{
    const struct run *R = ctx;
    struct ffr_cache *c = NULL;
    char e[512] = "";
    int rc = ffr_cache_open(&c, R->o.cache_dir, NULL, e, sizeof e);
    if (rc == 0) rc = ffr_cache_discard(c, path, e, sizeof e);
    ffr_cache_close(c);
    if (rc == 0)
        run_log(R,
                "cache: record %" PRIu64 " of the cached shard %s fails its checksum: the shard "
                "is evicted from %s and fetched again, every byte verified, by the next run "
                "(this run skips its damaged records)",
                record, path, R->o.cache_dir);
    else
        run_log(R, "cache: record %" PRIu64 " of %s fails its checksum; evicting it: %s", record,
                path, e);
}

static void loader_log(void *ctx, const char *msg)
{
    const struct run *R = ctx;
    if (R->world > 1 && R->rank != 0 && R->o.log) {
        char line[1024];
        snprintf(line, sizeof line, "rank %d: loader: %s", R->rank, msg);
        R->o.log(R->o.log_ctx, line);
        return;
    }
    run_log(R, "loader: %s", msg);
}

/* Class names and count from the dataset metadata (pack writes nc and names). */
static int dataset_names(struct run *R, bool single_cls)
{
    size_t mlen = 0;
    const char *mt = ffr_reader_metadata(R->data, &mlen);
    struct trn_plot_names pn;
    const int rc = trn_plot_names_parse(mt, mlen, &pn);
    if (rc < 0) return rc;
    /* train.py: names = ['item'] if single_cls and len(data_dict['names']) != 1 */
    if (single_cls && pn.n != 1) {
        trn_plot_names_free(&pn);
        if (!(pn.names = calloc(1, sizeof *pn.names)) || !(pn.names[0] = strdup("item"))) {
            free(pn.names);
            return -ENOMEM;
        }
        pn.n = 1;
    }
    R->names = pn.names;
    R->n_names = pn.n;
    for (int k = 0; k < R->n_names; k++)
        if (!R->names[k]) {
            char b[32];
            snprintf(b, sizeof b, "class%d", k);
            if (!(R->names[k] = strdup(b))) return -ENOMEM;
        }
    return 0;
}

/* The model as train.py's Model() prints it: the nc override, the layer table, the summary.
 * yaml_nc > 0: the nc the model's yaml stands for (a checkpoint's: its yaml text predates the
 * override it was trained with, where ultralytics' saved yaml carries it). */
static void log_summary(struct run *R, int yaml_nc)
{
    if (R->rank != 0 || !R->o.log) return;
    const int n = trn_model_summary(R->m, NULL, 0);
    char *s = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return;
    trn_model_summary(R->m, s, (size_t)n + 1);
    char *from = s;
    static const char over[] = "Overriding model.yaml nc=";
    if (!strncmp(s, over, sizeof over - 1)) {
        from = strchr(s, '\n');
        from = from ? from + 1 : s + strlen(s);
        if (yaml_nc <= 0) run_log(R, "%.*s", (int)(from - s - 1), s);
    }
    if (yaml_nc > 0 && yaml_nc != R->info->nc)
        run_log(R, "%s%d with nc=%d", over, yaml_nc, R->info->nc);
    if (R->anchors_override > 0)
        run_log(R, "Overriding model.yaml anchors with anchors=%d", R->anchors_override);
    for (char *line = from, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        run_log(R, "%s", line);
    }
    free(s);
}

/* smart_optimizer's line: "optimizer: SGD(lr=0.01) with parameter groups 57 weight(decay=0.0),
 * 60 weight(decay=0.0005), 60 bias". */
static void log_optimizer(struct run *R, const struct trn_optim_opts *oo)
{
    static const char *const kind[] = { "SGD", "Adam", "AdamW" };
    run_log(R,
            "optimizer: %s(lr=%g) with parameter groups %d weight(decay=0.0), %d "
            "weight(decay=%g), %d bias",
            kind[oo->kind], oo->lr0, trn_model_group(R->m, 2, NULL), trn_model_group(R->m, 1, NULL),
            trn_optim_weight_decay(oo), trn_model_group(R->m, 0, NULL));
}

/* train_batchK.jpg: a copy of batch K and its targets, drawn and written on its own thread as
 * train.py's Thread(target=plot_images) does, so the first steps do not wait for cairo. */
struct plot_job {
    struct trn_batch b;
    struct trn_plot_names names; /* borrowed views of the run's names */
    char path[4200];
    const struct run *R;
};

static void *plot_job_run(void *arg)
{
    struct plot_job *j = arg;
    char e[512] = "";
    if (trn_plot_batch(&j->b, &j->names, j->path, e, sizeof e) < 0)
        run_log(j->R, "WARNING: %s: %s", j->path, e);
    free((void *)j->b.images);
    free((void *)j->b.targets);
    free(j);
    return NULL;
}

static void plot_first_batch(struct run *R, const struct trn_batch *b)
{
    if (R->rank != 0 || R->o.noplots || R->o.resume || b->epoch != 0 || b->step > 2 ||
        R->n_plot_threads > 3 || !R->o.run_dir || (!b->images && !b->device_images))
        return;
    struct plot_job *j = calloc(1, sizeof *j);
    void *img = malloc(b->image_bytes ? b->image_bytes : 1);
    float *t = malloc((b->n_targets + 1) * 6 * sizeof *t);
    int rc = j && img && t ? 0 : -ENOMEM;
    /* GPU augmentation leaves the batch on the device: fetch it after the queue's work */
    if (!rc && b->images)
        memcpy(img, b->images, b->image_bytes);
    else if (!rc && b->device_images)
        rc = (R->gpu_ctx ? kern_cuda_ctx_sync(R->gpu_ctx) : 0) < 0
                 ? -EIO
                 : kern_mem_copy(R->gpu_ctx ? R->gpu_ctx : R->ctx, img, b->device_images,
                                 b->image_bytes, KERN_COPY_D2H);
    if (rc < 0) {
        free(j), free(img), free(t);
        return;
    }
    memcpy(t, b->targets, b->n_targets * 6 * sizeof *t);
    j->b = *b;
    j->b.images = img;
    j->b.device_images = NULL;
    j->b.targets = t;
    j->b.info = NULL;
    j->names.names = R->names;
    j->names.n = R->n_names;
    j->R = R;
    snprintf(j->path, sizeof j->path, "%s/train_batch%d.jpg", R->o.run_dir, (int)b->step);
    if (pthread_create(&R->plot_thread[R->n_plot_threads], NULL, plot_job_run, j) == 0)
        R->n_plot_threads++;
    else
        plot_job_run(j);
}

/* labels.jpg and labels_correlogram.jpg (train.py's plot_labels) from the index summaries'
 * label rows, on a thread of their own. */
struct labels_job {
    float *rows;
    size_t n;
    struct trn_plot_names names; /* borrowed views of the run's names */
    const struct run *R;
};

static void *labels_job_run(void *arg)
{
    struct labels_job *j = arg;
    char e[512] = "";
    if (trn_plot_labels(j->rows, j->n, &j->names, j->R->o.run_dir, e, sizeof e) < 0)
        run_log(j->R, "WARNING: %s", e);
    free(j->rows);
    free(j);
    return NULL;
}

static void plot_labels(struct run *R)
{
    if (R->rank != 0 || R->o.noplots || R->o.resume || !R->o.run_dir) return;
    const struct det_labels *t = R->labels;
    const size_t nl = (size_t)t->first[t->n];
    struct labels_job *j = calloc(1, sizeof *j);
    if (!j || !(j->rows = malloc((nl + 1) * 20))) {
        free(j);
        run_log(R, "WARNING: labels.jpg: out of memory");
        return;
    }
    for (uint64_t i = 0; i < t->n; i++)
        if (t->first[i + 1] > t->first[i])
            memcpy(j->rows + 5 * t->first[i], t->rows[i], (t->first[i + 1] - t->first[i]) * 20);
    for (size_t k = 0; R->o.single_cls && k < nl; k++)
        j->rows[5 * k] = 0;
    j->n = nl;
    j->names.names = R->names;
    j->names.n = R->n_names;
    j->R = R;
    run_log(R, "Plotting labels to %s/labels.jpg... ", R->o.run_dir);
    if (pthread_create(&R->plot_thread[R->n_plot_threads], NULL, labels_job_run, j) == 0)
        R->n_plot_threads++;
    else
        labels_job_run(j);
}

/* --image-weights: the classes of every image's labels from the index summaries (no record
 * reads), train.py's maps at 0 until the first validation. */
static int image_weights_setup(struct run *R, char *err, size_t cap)
{
    if (!R->o.image_weights) return 0;
    if (R->world > 1)
        return trn_fail(err, cap, -EINVAL,
                        "--image-weights is not compatible with multi-process (DDP) training, "
                        "as in train.py");
    const uint64_t n = ffr_reader_count(R->data);
    const int nc = R->info->nc;
    R->iw_image = calloc(n + 1, sizeof *R->iw_image);
    R->iw_draw = calloc(n + 1, sizeof *R->iw_draw);
    R->iw_class = calloc((size_t)nc, sizeof *R->iw_class);
    R->maps = calloc((size_t)nc, sizeof *R->maps);
    if (!R->iw_image || !R->iw_draw || !R->iw_class || !R->maps)
        return trn_fail(err, cap, -ENOMEM, "--image-weights: out of memory");
    const struct det_labels *t = R->labels;
    const uint64_t rows = t->first[n];
    if (!(R->iw_cls = malloc((rows + 1) * sizeof *R->iw_cls)))
        return trn_fail(err, cap, -ENOMEM, "--image-weights: out of memory");
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t k = t->first[i]; k < t->first[i + 1]; k++) {
            const float c = R->o.single_cls ? 0.0f : t->rows[i][5 * (k - t->first[i])];
            if (!(c >= 0 && c < (float)nc))
                return trn_fail(err, cap, -EINVAL,
                                "%s: record %" PRIu64 " has class %g, the model has nc=%d",
                                R->o.records, i, (double)c, nc);
            R->iw_cls[k] = (int32_t)c;
        }
    return 0;
}

/* train.py at the start of each epoch with --image-weights: the epoch's images drawn with
 * replacement by weight (random.choices), the loader moved to (epoch, step) with them. */
static int image_weights_apply(struct run *R, int epoch, int64_t step, char *err, size_t cap)
{
    if (!R->o.image_weights) return 0;
    const uint64_t n = ffr_reader_count(R->data);
    int rc = trn_image_weights(R->labels->first, R->iw_cls, n, R->info->nc, R->maps, R->iw_class,
                               R->iw_image);
    if (rc == 0)
        rc = trn_sampler_weighted_indices(R->iw_image, n, R->o.seed, (uint32_t)epoch, R->iw_draw);
    if (rc == -EINVAL)
        return trn_fail(err, cap, rc, "--image-weights: no image of %s has a label", R->o.records);
    if (rc == 0)
        rc = trn_loader_set_indices(R->loader, R->iw_draw, (uint32_t)epoch, (uint64_t)step);
    return rc < 0 ? trn_fail(err, cap, rc, "--image-weights: %s", strerror(-rc)) : 0;
}

static void autoanchor_log(void *ctx, const char *line)
{
    run_log(ctx, "%s", line);
}

/* train.py's check_anchors on the training set's labels and original sizes, from the index
 * summaries (no record reads): every rank computes the same anchors from the same seed. */
static int run_autoanchor(struct run *R, char *err, size_t cap)
{
    const struct det_labels *t = R->labels;
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
    const int rc = trn_autoanchor(R->m, &d, R->o.img, R->o.hyp.anchor_t, R->o.seed,
                                  R->rank == 0 ? autoanchor_log : NULL, R, &res);
    free(shape), free(first), free(wh);
    return rc < 0 ? trn_fail(err, cap, rc, "AutoAnchor: %s", strerror(-rc)) : 0;
}

/* SyncBatchNorm (opts.sync_bn): a BN layer's sums from the net, summed over the ranks. */
static int bn_allreduce(void *ctx, double *buf, size_t n)
{
    struct run *const R = ctx;
    const int rc = trn_dist_allreduce_f64(R->dist, buf, n);
    if (rc < 0) R->bn_sync_failed = true;
    return rc;
}

/* Overlapped gradient all-reduce: a row's gradients are final, so its bucket may fill and go. */
static int grad_ready(void *ctx, const struct trn_net_grad_range *g)
{
    struct run *const R = ctx;
    const int rc = trn_dist_grad_ready(R->dist, g->host, g->dev, g->stream, g->count);
    if (rc < 0) R->grad_sync_failed = true;
    return rc;
}

static int make_net_loss(struct run *R, int bs, int h, int w, struct trn_net **net,
                         struct trn_loss **loss, float **dp, int64_t max_t, char *err, size_t cap)
{
    struct trn_net_opts no;
    trn_net_opts_default(&no);
    no.ctx = R->gpu_ctx ? R->gpu_ctx : R->ctx;
    no.device_path = R->device_path;
    no.amp = R->o.amp;
    no.cpu_engine = R->o.cpu_engine;
    /* the short last batch's net runs on the main net's device copies of the model */
    if (R->net && (R->gpu_ctx || R->device_path)) no.share = R->net;
    if (R->overlap) {
        no.grad_ready = grad_ready;
        no.grad_ready_ctx = R;
    }
    if (R->world > 1 && R->o.sync_bn) {
        /* the training nets only: validation (rank 0 alone) runs eval forwards on its own net */
        no.bn_allreduce = bn_allreduce;
        no.bn_allreduce_ctx = R;
    }
    char e[512] = "";
    int rc = trn_net_create(R->m, bs, h, w, &no, net, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "network at batch %d, %dx%d: %s", bs, h, w,
                   e[0] ? e : trn_strerror(rc));
        return rc;
    }
    /* the loss reads the Detect outputs where oneDNN's convs write them (no reshape) */
    if ((rc = trn_net_raw_head(*net, true)) < 0) {
        trn_seterr(err, cap, "network at batch %d, %dx%d: %s", bs, h, w, trn_strerror(rc));
        return rc;
    }
    struct trn_loss_cfg lc;
    if (max_t > INT32_MAX / 64) max_t = INT32_MAX / 64;
    rc = trn_loss_cfg_from_model(R->m, &R->o.hyp, bs, R->o.img, (float)R->o.label_smoothing,
                                 (int)max_t, &lc);
    if (!rc) rc = trn_loss_cfg_set_grid(&lc, R->m, h, w);
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
    return b->n != R->local_bs || b->height != R->o.img || b->width != R->o.img;
}

/* net_last for batch b's shape: kept while the shape repeats (rect batches come in aspect
 * order), else made anew; its gradients are zero between batches, as the main net's. */
int run_alt_net(struct run *R, const struct trn_batch *b, char *err, size_t cap)
{
    if (b->n < 1 || b->n > R->local_bs || b->height < 32 || b->width < 32) {
        trn_seterr(err, cap, "loader gave a %d x %dx%d batch (local batch %d)", b->n, b->height,
                   b->width, R->local_bs);
        return -EINVAL;
    }
    if (R->net_last && R->alt_n == b->n && R->alt_h == b->height && R->alt_w == b->width) return 0;
    trn_net_destroy(R->net_last);
    trn_loss_destroy(R->loss_last);
    R->net_last = NULL;
    R->loss_last = NULL;
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++) {
        free(R->dp_last[l]);
        R->dp_last[l] = NULL;
        if (R->dctx && R->d_dp_last[l]) kern_mem_free(R->dctx, R->d_dp_last[l]);
        R->d_dp_last[l] = NULL;
    }
    R->alt_n = R->alt_h = R->alt_w = 0;
    int rc = make_net_loss(R, b->n, b->height, b->width, &R->net_last, &R->loss_last, R->dp_last,
                           R->per_image_t * b->n, err, cap);
    if (rc < 0) return rc;
    trn_net_zero_grad(R->net_last);
    if (R->resident && (rc = run_resident_alt(R, err, cap)) < 0) return rc;
    R->alt_n = b->n, R->alt_h = b->height, R->alt_w = b->width;
    return 0;
}

static void run_free(struct run *R)
{
    kern_graph_destroy(R->g[0]); /* before the nets and the context they record */
    kern_graph_destroy(R->g[1]);
    if (R->dctx) kern_mem_free(R->dctx, R->d_dyn);
    ffio_pinned_free(&R->stage);
    trn_loader_destroy(R->loader);
    det_labels_free(R->labels);
    ffr_reader_close(R->data);
    ffr_reader_close(R->val_data);
    trn_plot_names_free(&R->val_names);
    trn_net_destroy(R->net);
    trn_net_destroy(R->net_last);
    free(R->ms_buf);
    trn_loss_destroy(R->loss);
    trn_loss_destroy(R->loss_last);
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++) {
        free(R->dp[l]);
        free(R->dp_last[l]);
    }
    if (R->dctx) {
        void *const t[] = { R->d_ema[0], R->d_ema[1], R->d_acc,    R->d_targets,
                            R->d_nt,     R->d_out,    R->d_scratch };
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
            kern_mem_free(R->dctx, t[k]);
        for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++) {
            kern_mem_free(R->dctx, R->d_dp[l]);
            kern_mem_free(R->dctx, R->d_dp_last[l]);
        }
    }
    if (R->dctx) kern_mem_free(R->dctx, R->d_seg);
    trn_amp_destroy(R->amp);
    trn_optim_dev_destroy(R->odev);
    trn_optim_destroy(R->opt);
    trn_ema_destroy(R->ema);
    free(R->acc);
    kern_ctx_destroy(R->ctx);
    kern_ctx_destroy(R->gpu_ctx); /* after the nets, whose memory it holds */
    trn_plans_close(&R->plans);   /* after the context that borrows it */
    trn_model_destroy(R->m);
    for (int k = 0; k < R->n_names; k++)
        free(R->names[k]);
    free(R->names);
    free(R->iw_cls);
    free(R->iw_class);
    free(R->iw_image);
    free(R->maps);
    free(R->iw_draw);
    free(R->model_yaml);
    free(R->hyp_text);
    free(R->opt_text);
    free(R);
}

/* Resuming: the records at path must be those the checkpoint trained on (its content hash),
 * unless opts.resume_other_data; a checkpoint without the hash is not checked. */
static int check_resumed_data(const struct run *R, const char *path, uint64_t have, uint64_t want,
                              const char *what, char *err, size_t cap)
{
    if (!R->o.resume || !want || have == want) return 0;
    if (R->o.resume_other_data) {
        run_log(R,
                "WARNING: %s holds other %s than %s was trained on (content %016" PRIx64
                ", the checkpoint's %016" PRIx64 "): continuing on them (--resume-other-data)",
                path, what, R->o.resume, have, want);
        return 0;
    }
    return trn_fail(err, cap, -EINVAL,
                    "%s holds other %s than %s was trained on (content %016" PRIx64
                    ", the checkpoint's %016" PRIx64
                    "): resume on the same data (--data or --records), or give "
                    "--resume-other-data to continue on these",
                    path, what, R->o.resume, have, want);
}

static int setup(struct run *R, struct trn_ckpt **C, char *err, size_t cap)
{
    struct trn_train_opts *o = &R->o;
    int rc;
    char e[768] = "";
    if (o->resume) {
        if ((rc = trn_ckpt_open(o->resume, C, err, cap)) < 0) return rc;
        if ((rc = run_resume_opts(R, *C, err, cap)) < 0) return rc;
    }
    if ((rc = trn_hyp_check(&o->hyp, e, sizeof e)) < 0) {
        trn_seterr(err, cap, "hyp: %s", e);
        return rc;
    }
    if (!o->resume && R->rank == 0) {
        size_t hl = 0;
        char *ht = run_hyp_text(&o->hyp, true, &hl);
        if (ht) run_log(R, "%s", ht);
        free(ht);
    }
    /* train.py: batch_size // WORLD_SIZE per rank, which must divide exactly here (a rounded
     * batch would make the global batch, and so the optimizer's settings, depend on the world) */
    if (o->batch_size % R->world != 0) {
        trn_seterr(err, cap,
                   "--batch-size %d is the global batch and must be divisible by the world size %d "
                   "(%d ranks)",
                   o->batch_size, R->world, R->world);
        return -EINVAL;
    }
    R->local_bs = o->batch_size / R->world;
    if (R->world > 1 && !R->dist) return -EINVAL;
    R->overlap = R->world > 1 && trn_dist_overlap(R->dist);
    rc = ffr_reader_open(&R->data, o->records, NULL, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s", e[0] ? e : ffr_strerror(rc));
        return rc;
    }
    R->data_hash = ffr_reader_content_hash(R->data);
    if ((rc = check_resumed_data(R, o->records, R->data_hash, R->ckpt_data_hash, "records", err,
                                 cap)) < 0)
        return rc;
    /* the label table, once: the loader, AutoAnchor, image weights and the plots share it */
    if ((rc = det_labels_build(R->data, o->records, &R->labels, e, sizeof e)) < 0)
        return trn_fail(err, cap, rc, "%s", e);
    if ((rc = dataset_names(R, o->single_cls)) < 0) {
        trn_seterr(err, cap, "out of memory");
        return rc;
    }
    /* --weights: the checkpoint's own model, and (without --cfg) the yaml ours is built from,
     * as train.py's Model(cfg or ckpt['model'].yaml, nc=nc) */
    struct trn_model *src = NULL;
    if (!o->resume && o->weights) {
        char *wy = NULL;
        size_t wl = 0;
        if ((rc = trn_weights_pretrained(o->weights, &src, &wy, &wl, e, sizeof e)) < 0)
            return trn_fail(err, cap, rc, "%s", e);
        if (!o->cfg)
            R->model_yaml = wy, R->model_yaml_len = wl;
        else
            free(wy);
    }
    if (!o->resume && o->cfg) {
        rc = trn_read_file(o->cfg, TRN_CKPT_MAX_TEXT, &R->model_yaml, &R->model_yaml_len, e,
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
        R->anchors_override = (int)o->hyp.anchors;
        char *t = malloc(R->model_yaml_len + 32);
        if (!t) {
            trn_model_destroy(src);
            return trn_fail(err, cap, -ENOMEM, "out of memory");
        }
        memcpy(t, R->model_yaml, R->model_yaml_len);
        R->model_yaml_len +=
            (size_t)snprintf(t + R->model_yaml_len, 32, "\nanchors: %d\n", R->anchors_override);
        free(R->model_yaml);
        R->model_yaml = t;
    }
    struct trn_model_opts mo;
    trn_model_opts_default(&mo);
    mo.nc = o->single_cls ? 1 : o->nc > 0 ? o->nc : R->n_names;
    /* Model(ckpt['model'].yaml) has no yaml_file: ultralytics calls it "Model" */
    if (src && !o->cfg) mo.name = "Model";
    rc = trn_model_parse(R->model_yaml, R->model_yaml_len,
                         o->cfg       ? o->cfg
                         : o->weights ? o->weights
                                      : "model.yaml",
                         &mo, &R->m, e, sizeof e);
    if (rc < 0) {
        trn_model_destroy(src);
        trn_seterr(err, cap, "%s", e[0] ? e : trn_strerror(rc));
        return rc;
    }
    R->info = trn_model_info(R->m);
    R->grid = 32;
    for (int l = 0; l < R->info->nl; l++)
        if (R->info->stride[l] > R->grid) R->grid = R->info->stride[l];
    if (!o->resume) log_summary(R, src && !o->cfg ? trn_model_info(src)->nc : 0);
    if (R->n_names > 0 && R->n_names != R->info->nc)
        run_log(R, "WARNING: the dataset names %d classes, the model has nc=%d", R->n_names,
                R->info->nc);
    /* also when resuming: it sets the anchors, which the loss reads at creation (the
     * checkpoint's weights are copied over it afterwards) */
    trn_model_init(R->m, o->seed);
    if (src) {
        /* anchors too unless --cfg or the hyp's anchors gave them (train.py's exclude) */
        const int n = trn_model_transfer(R->m, src, !o->cfg && !(o->hyp.anchors > 0));
        trn_model_destroy(src);
        run_log(R, "Transferred %d/%d items from %s", n, R->info->n_tensors, o->weights);
        if (n == 0)
            run_log(R,
                    "WARNING: no tensor of %s fits this model (another architecture?): "
                    "training starts from the initial weights",
                    o->weights);
    }
    /* before the loss, which reads the anchors at its creation: AutoAnchor's, or when resuming
     * the checkpoint's buffers (its anchors; run_resume_state reads them again, with the rest) */
    if (!o->resume && !o->noautoanchor && (rc = run_autoanchor(R, err, cap)) < 0) return rc;
    plot_labels(R);
    if (o->resume &&
        (rc = trn_ckpt_read(*C, TRN_CKPT_MODEL_BUFFER, trn_model_arena(R->m, TRN_ARENA_BUFFER),
                            R->info->arena_len[TRN_ARENA_BUFFER] * sizeof(float), err, cap)) < 0)
        return rc;

    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.threads = o->threads;
    if ((rc = kern_ctx_create(&ko, &R->ctx)) < 0) {
        trn_seterr(err, cap, "kern context: %s", kern_strerror(rc));
        return rc;
    }
    R->device_path = o->gpu < 0 && o->device_path;
    if (o->amp != KERN_DT_F32 && o->amp != KERN_DT_BF16 && o->amp != KERN_DT_F16) {
        trn_seterr(err, cap, "amp: unknown dtype %d", o->amp);
        return -EINVAL;
    }
    if (o->amp == KERN_DT_F16) {
        struct trn_amp_opts ao;
        trn_amp_opts_default(&ao);
        ao.dtype = TRN_AMP_FP16;
        if ((rc = trn_amp_create(&ao, &R->amp)) < 0) {
            trn_seterr(err, cap, "amp: %s", trn_strerror(rc));
            return rc;
        }
    }
    if (o->gpu >= 0) {
        kern_ctx_opts_default(&ko);
        ko.backend = KERN_BACKEND_CUDA;
        ko.device = o->gpu;
        ko.any_algo = o->any_algo;
        if ((rc = trn_plans_open(&R->plans, o->cudnn_plan, o->cudnn_tune, err, cap)) < 0) return rc;
        ko.plans = R->plans.table;
        ko.tune = o->cudnn_tune;
        if ((rc = kern_ctx_create(&ko, &R->gpu_ctx)) < 0) {
            trn_seterr(err, cap, "CUDA device %d: %s", o->gpu,
                       rc == -KERN_EBACKEND ? "no such device, or this build has no CUDA"
                                            : kern_strerror(rc));
            return rc;
        }
        /* NCCL's collectives on the device arenas are ordered after this context's work */
        trn_dist_set_stream(R->dist, kern_cuda_ctx_stream(R->gpu_ctx));
    }

    struct trn_loader_opts lo;
    trn_loader_opts_default(&lo);
    lo.img_size = o->img;
    lo.single_cls = o->single_cls;
    lo.batch_size = R->local_bs;
    lo.world_size = (uint32_t)R->world;
    lo.rank = (uint32_t)R->rank;
    lo.workers = o->workers;
    lo.seed = o->seed;
    lo.pixels = TRN_PIXELS_F32;
    lo.hyp = o->hyp;
    lo.labels = R->labels;
    lo.log = loader_log;
    lo.log_ctx = R;
    /* train.py's train loader: rect with pad 0.0 at the grid size max(stride, 32) */
    lo.rect = o->rect;
    lo.rect_pad = 0.0;
    lo.cache_ram = o->cache_ram;
    lo.stride = R->grid;
    if (o->cache_dir) {
        lo.damaged = loader_damaged;
        lo.damaged_ctx = R;
    }
    /* The resident step builds its batches on the device (GPU augmentation): the workers decode
       tiles, the device pastes, warps and colours them into the batch tensor. Same bytes as the
       host path; the host step (Adam, AdamW) reads host images, so it keeps the host path. */
    if ((R->gpu_ctx || R->device_path) && o->optimizer == TRN_OPTIM_SGD && !o->host_aug &&
        !o->multi_scale && !o->rect) {
        lo.pix_ctx = R->gpu_ctx ? R->gpu_ctx : R->ctx;
        lo.pix_ops = R->gpu_ctx ? kern_ops_cuda() : kern_ops_ref();
    }
    if (o->resume) {
        int64_t ep, st;
        if (trn_ckpt_i64(*C, "epoch", 0, 1000000, &ep) ||
            trn_ckpt_i64(*C, "step", 0, INT64_MAX, &st)) {
            trn_seterr(err, cap, "%s: checkpoint metadata lacks the position", o->resume);
            return -TRN_TRAIN_ECKPT;
        }
        if (ep >= o->epochs) {
            trn_seterr(err, cap, "%s: training to %d epochs is finished, nothing to resume",
                       o->resume, o->epochs);
            return -EINVAL;
        }
        lo.epoch = (uint32_t)ep;
        lo.step = (uint64_t)st;
    }
    if (o->rect)
        run_log(R, "WARNING ⚠️ --rect is incompatible with DataLoader shuffle, setting "
                   "shuffle=False");
    rc = trn_loader_create(R->data, &lo, &R->loader, e, sizeof e);
    if (rc < 0) {
        /* the loader's message carries the repack hint when the packing size is the cause */
        trn_seterr(err, cap, "%s: %s", o->records, e);
        return rc;
    }
    struct trn_loader_info li;
    trn_loader_info(R->loader, &li);
    /* counted, so that a test can check the defaults by counting rather than by timing */
    char line[200];
    run_log(R, "%s", trn_cli_compute_line(line, sizeof line, o->threads, li.workers));
    if (R->gpu_ctx && li.pinned_kind != FFIO_PINNED_CUDA)
        run_log(R,
                "WARNING: the loader's buffers are not CUDA-pinned (%s; they are %s): every "
                "upload is a staged synchronous copy and loading will not overlap the step",
                ffio_pinned_cuda_status()[0] ? ffio_pinned_cuda_status() : "cudaHostAlloc failed",
                ffio_pinned_kind_name(li.pinned_kind));
    R->nb = (int64_t)li.steps;
    R->last_bs = (int)(li.rank_samples - (li.steps - 1) * (uint64_t)R->local_bs);

    /* A mosaic holds 4 records' labels, a mixup 8, copy_paste up to twice that; clipping only
     * removes rows. */
    const int64_t per = (int64_t)R->labels->max_rows * (o->hyp.mixup > 0 ? 8 : 4) *
                            (o->hyp.copy_paste > 0 ? 2 : 1) +
                        8;
    R->per_image_t = per;
    rc = make_net_loss(R, R->local_bs, o->img, o->img, &R->net, &R->loss, R->dp, per * R->local_bs,
                       err, cap);
    if (rc == 0 && R->last_bs != R->local_bs && !o->rect && !o->multi_scale) {
        rc = make_net_loss(R, R->last_bs, o->img, o->img, &R->net_last, &R->loss_last, R->dp_last,
                           per * R->last_bs, err, cap);
        R->alt_n = R->last_bs, R->alt_h = R->alt_w = o->img;
    }
    if (rc < 0) return rc;
    trn_net_zero_grad(R->net);
    trn_net_zero_grad(R->net_last);
    if (R->world > 1 &&
        !(R->acc = calloc(R->info->arena_len[TRN_ARENA_PARAM] + 1, sizeof *R->acc))) {
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
    oo.nb = R->nb;
    oo.cos_lr = o->cos_lr;
    memcpy(oo.frozen, o->frozen, sizeof oo.frozen);
    /* train.py logs each parameter it freezes, in named_parameters() order */
    for (int k = 0; !o->resume && k < R->info->n_tensors; k++) {
        const struct trn_tensor *T = trn_model_tensor(R->m, k);
        if (T->arena == TRN_ARENA_PARAM && T->layer >= 0 &&
            (o->frozen[T->layer / 64] >> (T->layer % 64) & 1))
            run_log(R, "freezing %s", T->name);
    }
    /* only rank 0 keeps the EMA (it alone validates and saves) */
    if ((rc = trn_optim_create(R->m, &oo, &R->opt)) < 0 ||
        (R->rank == 0 && (rc = trn_ema_create(R->m, &R->ema)) < 0)) {
        trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    if (!o->resume) log_optimizer(R, &oo);
    if (o->resume) {
        if ((rc = run_resume_state(R, *C, err, cap)) < 0) return rc;
    } else {
        R->hyp_text = run_hyp_text(&o->hyp, false, &R->hyp_len);
        R->opt_text = run_opt_yaml(R, &R->opt_len);
        if (!R->hyp_text || !R->opt_text) {
            trn_seterr(err, cap, "out of memory");
            return -ENOMEM;
        }
    }
    return 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* train.py --multi-scale: sz = randrange(int(img * 0.5), int(img * 1.5) + gs) // gs * gs, the
 * batch interpolated (bilinear, align_corners=False) to ceil(side * sz / max(h, w) / gs) * gs
 * per side, Python's double arithmetic; the draw from the seed and the batch's position. The
 * targets are normalised, so they stay. */
static int multi_scale(struct run *R, const struct trn_batch *b, struct trn_batch *out, char *err,
                       size_t cap)
{
    const int gs = R->grid, img = R->o.img;
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
    if (need > R->ms_cap) {
        float *p = realloc(R->ms_buf, need * sizeof *p);
        if (!p) {
            trn_seterr(err, cap, "--multi-scale: out of memory for a %dx%d batch", nh, nw);
            return -ENOMEM;
        }
        R->ms_buf = p;
        R->ms_cap = need;
    }
    const int rc =
        trn_tta_interpolate(b->images, b->n, 3, b->height, b->width, nh, nw, R->ms_buf, R->ms_cap);
    if (rc < 0) {
        trn_seterr(err, cap, "--multi-scale: resizing to %dx%d: %s", nh, nw, strerror(-rc));
        return rc;
    }
    out->images = R->ms_buf;
    out->height = nh;
    out->width = nw;
    out->image_bytes = need * sizeof(float);
    return 0;
}

/* ultralytics' tqdm bar after each batch: epoch, device memory, mean losses, the batch's
 * targets and size; the epoch's last one goes to the log too when nobody draws the bar. */
static void progress(struct run *R, int epoch, const double ml[3], size_t instances, int64_t done,
                     double secs, int64_t images, int size)
{
    if (R->rank != 0) return;
    const bool final = done == R->nb;
    if (!R->o.progress && !final) return;
    char ep[32], mem[32], desc[160], line[512];
    snprintf(ep, sizeof ep, "%d/%d", epoch, R->o.epochs - 1);
    size_t used = 0, total = 0;
    /* train.py: torch.cuda.memory_reserved() / 1E9 on a GPU, 0 on the CPU */
    if (R->gpu_ctx && kern_cuda_mem_info(&used, &total) == 0)
        snprintf(mem, sizeof mem, "%.3gG", (double)used / 1e9);
    else
        snprintf(mem, sizeof mem, "0G");
    snprintf(desc, sizeof desc, "%11s%11s%11.4g%11.4g%11.4g%11.4g%11.4g", ep, mem, ml[0], ml[1],
             ml[2], (double)instances, (double)size);
    trn_cli_bar(line, sizeof line, desc, done, R->nb, secs);
    /* tqdm's postfix slot: the epoch's image rate, training alone */
    const size_t l = strlen(line);
    if (l > 0 && line[l - 1] == ']')
        snprintf(line + l - 1, sizeof line - (l - 1), ", %.1fimg/s]",
                 secs > 0 ? (double)images / secs : 0.0);
    if (R->o.progress)
        R->o.progress(R->o.progress_ctx, line, final);
    else
        run_log(R, "%s", line);
}

/* Validation runs every epoch with the same loader: a line it printed once (its setup, a bad
 * record) is not printed again. FNV-1a: a collision only hides a line. */
static void val_log(void *ctx, const char *msg)
{
    struct run *R = ctx;
    uint64_t h = 1469598103934665603ull;
    for (const char *p = msg; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    for (int i = 0; i < R->n_val_seen; i++)
        if (R->val_seen[i] == h) return;
    if (R->n_val_seen < (int)(sizeof R->val_seen / sizeof R->val_seen[0]))
        R->val_seen[R->n_val_seen++] = h;
    run_log(R, "%s", msg);
}

/* val.py's per-class rows (verbose), names from the val dataset's metadata. */
static void log_class_rows(struct run *R, const struct trn_val_result *vr)
{
    if (vr->nc <= 1) return;
    for (int i = 0; i < vr->ap.n_cls; i++) {
        const int c = vr->ap.cls[i];
        char num[16];
        const char *name = c < R->val_names.n && R->val_names.names[c] ? R->val_names.names[c]
                           : c < R->n_names                            ? R->names[c]
                                                                       : NULL;
        if (!name) {
            snprintf(num, sizeof num, "%d", c);
            name = num;
        }
        run_log(R, "%22s%11d%11" PRId64 "%11.3g%11.3g%11.3g%11.3g", name, vr->seen, vr->ap.nt[c],
                vr->ap.p[i], vr->ap.r[i], vr->ap.ap50[i], vr->ap.ap5095[i]);
    }
}

/* The built-in validator: val.run as train.py calls it after each epoch (see VALIDATION).
 * best: the final validation of best.ckpt (train.py's val.run(verbose=True, plots=True) on
 * best.pt): also the per-class rows, the PR / F1 / P / R curves, confusion_matrix.png and the
 * val_batchK pictures in the run directory. */
static int builtin_val(struct run *R, struct trn_model *m, bool best, struct trn_train_metrics *mt,
                       char *err, size_t cap)
{
    struct trn_val_opts vo;
    trn_val_opts_default(&vo);
    vo.img_size = R->o.img;
    vo.batch_size = R->local_bs * 2; /* train.py: batch_size // WORLD_SIZE * 2 */
    vo.micro_batch = vo.batch_size < 4 ? vo.batch_size : 4;
    vo.workers = R->o.workers;
    vo.threads = R->o.threads;
    vo.conf_thres = 0.001f;
    vo.iou_thres = 0.6;
    vo.max_det = 300;
    vo.rect = true;
    vo.loss_hyp = &R->o.hyp;
    vo.loss_img = R->o.img;
    vo.names = &R->val_names;
    vo.curves_dir = best && !R->o.noplots ? R->o.run_dir : NULL;
    vo.plot_dir = vo.curves_dir;
    vo.log = val_log;
    vo.log_ctx = R;
    vo.single_cls = R->o.single_cls;
    vo.progress = R->o.progress;
    vo.progress_ctx = R->o.progress_ctx;
    /* train.py validates with half = amp on a GPU (trn_train_opts.val_amp) */
    vo.amp = R->o.val_amp >= 0 ? R->o.val_amp : R->o.gpu >= 0 ? R->o.amp : KERN_DT_F32;
    /* on the training's GPU, forwards of up to 16 images: the inference net keeps every
       activation (no liveness reuse yet) beside the training's memory; the CPU's 4 bounds host
       memory. The micro batch never changes results. */
    vo.device = R->o.gpu;
    vo.device_path = R->o.gpu < 0 && R->o.device_path;
    vo.cpu_engine = R->o.val_cpu_engine;
    if (vo.device >= 0) vo.micro_batch = vo.batch_size < 16 ? vo.batch_size : 16;
    struct trn_val_result vr;
    char e[768] = "";
    const int rc = trn_val_run(m, R->val_data, &vo, &vr, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s: %s", R->o.val_records, e[0] ? e : trn_strerror(rc));
    } else {
        if (!vo.progress) run_log(R, "%s", TRN_VAL_HEADER);
        run_log(R, "%22s%11d%11" PRId64 "%11.3g%11.3g%11.3g%11.3g", "all", vr.seen, vr.n_labels,
                vr.mp, vr.mr, vr.map50, vr.map);
        if (best) log_class_rows(R, &vr);
        /* train.py's maps: the overall mAP, then each class's own where it has one */
        for (int c = 0; R->maps && !best && c < R->info->nc; c++)
            R->maps[c] = vr.map;
        for (int i = 0; R->maps && !best && i < vr.ap.n_cls; i++)
            if (vr.ap.cls[i] >= 0 && vr.ap.cls[i] < R->info->nc)
                R->maps[vr.ap.cls[i]] = vr.ap.ap5095[i];
        *mt = (struct trn_train_metrics){ vr.mp,       vr.mr,       vr.map50,   vr.map,
                                          vr.loss_box, vr.loss_obj, vr.loss_cls };
    }
    trn_val_result_free(&vr);
    return rc;
}

/* Copy the EMA into the model, validate (hook or built-in), then restore the training weights.
 * run: false leaves the metrics 0 (no validation this epoch). */
static int validate_epoch(struct run *R, int epoch, bool run, struct trn_train_metrics *mt,
                          float *save_p, float *save_b, char *err, size_t cap)
{
    memset(mt, 0, sizeof *mt);
    if (!run || (!R->o.validate && !R->val_data)) return 0;
    const size_t P = R->info->arena_len[TRN_ARENA_PARAM], B = R->info->arena_len[TRN_ARENA_BUFFER];
    float *mp = trn_model_arena(R->m, TRN_ARENA_PARAM),
          *mb = trn_model_arena(R->m, TRN_ARENA_BUFFER);
    memcpy(save_p, mp, P * sizeof(float));
    memcpy(save_b, mb, B * sizeof(float));
    memcpy(mp, trn_ema_arena(R->ema, TRN_ARENA_PARAM), P * sizeof(float));
    memcpy(mb, trn_ema_arena(R->ema, TRN_ARENA_BUFFER), B * sizeof(float));
    int rc;
    if (R->o.validate) {
        rc = R->o.validate(R->o.validate_ctx, R->m, epoch, mt);
        if (rc < 0)
            trn_seterr(err, cap, "validation of epoch %d failed: %s", epoch, trn_strerror(rc));
    } else {
        rc = builtin_val(R, R->m, false, mt, err, cap);
    }
    memcpy(mp, save_p, P * sizeof(float));
    memcpy(mb, save_b, B * sizeof(float));
    return rc;
}

/* train.py's last step: validate best.ckpt's EMA weights with the per-class table and the plots
 * (the model's weights are replaced: the run is over and last.ckpt saved). */
static int validate_best(struct run *R, char *err, size_t cap)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/best.ckpt", R->weights_dir);
    run_log(R, "Validating %s...", p);
    struct trn_ckpt *C = NULL;
    int rc = trn_ckpt_open(p, &C, err, cap);
    if (rc < 0) return rc;
    rc = trn_ckpt_load_ema(C, R->m, false, err, cap);
    trn_ckpt_close(C);
    struct trn_train_metrics mt;
    if (!rc) rc = builtin_val(R, R->m, true, &mt, err, cap);
    return rc;
}

/* A digest of the parameters' bytes: at epoch ends the ranks check they still hold the same. */
static int64_t params_digest(const struct run *R)
{
    const uint32_t *w = (const uint32_t *)trn_model_arena(R->m, TRN_ARENA_PARAM);
    const size_t n = R->info->arena_len[TRN_ARENA_PARAM];
    uint64_t h = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ w[i]) * 0x100000001b3u;
        h ^= h >> 29;
    }
    return (int64_t)(h >> 1); /* non-negative: -h cannot overflow */
}

/* Start equal: rank 0's parameters, buffers and counters go to every rank (as DDP's constructor
 * broadcasts the module state). */
static int dist_start(struct run *R, char *err, size_t cap)
{
    const struct trn_model_info *I = R->info;
    static const int arena[3] = { TRN_ARENA_PARAM, TRN_ARENA_BUFFER, TRN_ARENA_COUNT };
    for (int k = 0; k < 3; k++) {
        const size_t esz = arena[k] == TRN_ARENA_COUNT ? sizeof(int64_t) : sizeof(float);
        const int rc = trn_dist_broadcast(R->dist, trn_model_arena(R->m, arena[k]),
                                          I->arena_len[arena[k]] * esz, false);
        if (rc < 0) {
            trn_seterr(err, cap, "broadcasting rank 0's weights: %s", trn_dist_error(R->dist));
            return rc;
        }
    }
    return 0;
}

/* An epoch's end on every rank: rank 0's status (it validated and saved) and early-stop
 * decision reach the others, and the ranks compare their weight digests. rc0: this rank's
 * status so far. Returns rc0 when it failed, else 0 or the error every rank then stops with. */
static int dist_epoch_sync(struct run *R, int epoch, int rc0, bool *early, char *err, size_t cap)
{
    const int64_t h = params_digest(R);
    int64_t v[4] = { rc0 < 0 ? rc0 : 0, R->rank == 0 && *early ? -1 : 0, h, -h };
    const int rc = trn_dist_allreduce_i64(R->dist, v, 4, TRN_DIST_MIN);
    if (rc < 0) {
        if (rc0 < 0) return rc0;
        trn_seterr(err, cap, "end of epoch %d: %s", epoch, trn_dist_error(R->dist));
        return rc;
    }
    if (rc0 < 0) return rc0;
    if (v[0] < 0) {
        trn_seterr(err, cap, "another rank failed at the end of epoch %d (rank 0's log says why)",
                   epoch);
        return -ECANCELED;
    }
    if (v[2] != -v[3]) {
        trn_seterr(err, cap,
                   "the ranks' weights differ after epoch %d (digest %" PRId64 " here, %" PRId64
                   " .. %" PRId64 " over the ranks)",
                   epoch, h, v[2], -v[3]);
        return -EPROTO;
    }
    *early = v[1] < 0;
    return 0;
}

/* Every rank's stop request (the largest signal number) after a batch; 0: go on. */
static int dist_stop_vote(struct run *R, int64_t *sig, char *err, size_t cap)
{
    if (R->world == 1) return 0;
    const int rc = trn_dist_allreduce_i64(R->dist, sig, 1, TRN_DIST_MAX);
    if (rc < 0) trn_seterr(err, cap, "agreeing on a stop: %s", trn_dist_error(R->dist));
    return rc;
}

/* Rank 0's status after something only it did (a save) reaches every rank. */
static int dist_status(struct run *R, int rc0, const char *what, char *err, size_t cap)
{
    if (R->world == 1) return rc0;
    int64_t v = rc0 < 0 ? rc0 : 0;
    const int rc = trn_dist_allreduce_i64(R->dist, &v, 1, TRN_DIST_MIN);
    if (rc0 < 0) return rc0;
    if (rc < 0) {
        trn_seterr(err, cap, "%s: %s", what, trn_dist_error(R->dist));
        return rc;
    }
    if (v < 0) {
        trn_seterr(err, cap, "rank 0 failed: %s (its log says why)", what);
        return -ECANCELED;
    }
    return 0;
}

int trn_train_run(const struct trn_train_opts *opts, struct trn_train_result *res, char *err,
                  size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    const int rank = opts ? trn_dist_rank(opts->dist) : 0;
    if (!opts || (!opts->run_dir && rank == 0) ||
        (!opts->resume && (!opts->records || (!opts->cfg && !opts->weights))) || opts->img < 32 ||
        opts->batch_size < 1 || opts->epochs < 1 || (unsigned)opts->optimizer > TRN_OPTIM_ADAMW) {
        trn_seterr(err, err_cap, "bad training options");
        return -EINVAL;
    }
    struct run *R = calloc(1, sizeof *R);
    if (!R) return -ENOMEM;
    if (res) memset(res, 0, sizeof *res);
    R->o = *opts;
    if (R->o.evolve) R->o.noval = R->o.noplots = true; /* train.py: evolve sets noval, nosave */
    R->dist = opts->dist;
    R->rank = rank;
    R->world = trn_dist_world(opts->dist);
    struct trn_ckpt *C = NULL;
    float *save_p = NULL, *save_b = NULL;
    int rc = setup(R, &C, err, err_cap);
    trn_ckpt_close(C);
    if (rc < 0) goto out;
    if (R->rank == 0 && (rc = run_write_files(R, err, err_cap)) < 0) goto out;
    if (R->rank == 0 && !R->o.validate && R->o.val_records) {
        char e[768] = "";
        if ((rc = ffr_reader_open(&R->val_data, R->o.val_records, NULL, e, sizeof e)) < 0) {
            trn_seterr(err, err_cap, "%s", e[0] ? e : ffr_strerror(rc));
            goto out;
        }
        R->val_hash = ffr_reader_content_hash(R->val_data);
        if ((rc = check_resumed_data(R, R->o.val_records, R->val_hash, R->ckpt_val_hash,
                                     "validation records", err, err_cap)) < 0)
            goto out;
        size_t ml = 0;
        const char *meta = ffr_reader_metadata(R->val_data, &ml);
        if (meta && (rc = trn_plot_names_parse(meta, ml, &R->val_names)) < 0) goto out;
    }
    if (R->rank == 0 && (R->o.validate || R->val_data)) {
        save_p = malloc(R->info->arena_len[TRN_ARENA_PARAM] * sizeof(float) + 1);
        save_b = malloc(R->info->arena_len[TRN_ARENA_BUFFER] * sizeof(float) + 1);
        if (!save_p || !save_b) {
            rc = -ENOMEM;
            goto out;
        }
    } else {
        run_log(R, "validation: no val records; results.csv metrics/* and val/* columns are "
                   "written as 0 and best.ckpt = last.ckpt (every fitness is 0)");
    }
    if (R->world > 1 && (rc = dist_start(R, err, err_cap)) < 0) goto out;
    if ((rc = image_weights_setup(R, err, err_cap)) < 0 ||
        (rc = image_weights_apply(R, R->epoch, R->step, err, err_cap)) < 0)
        goto out;
    if ((rc = run_resident_setup(R, err, err_cap)) < 0) goto out;
    if ((rc = run_graph_setup(R, err, err_cap)) < 0) goto out;
    run_log(R,
            "%s%s: %" PRId64 " batches of %d per epoch (last %d), %d epochs, img %d, "
            "accumulate %d, %s",
            R->o.resume ? "Resuming from " : "Training", R->o.resume ? R->o.resume : "", R->nb,
            R->o.batch_size, R->last_bs * R->world, R->o.epochs, R->o.img,
            trn_optim_accumulate(trn_optim_get_opts(R->opt)), optim_names[R->o.optimizer]);
    if (R->world > 1)
        run_log(R,
                "DDP: %d ranks over %s, %d images per rank per batch, gradients summed%s; "
                "all-reduced %s",
                R->world, trn_dist_backend_name(trn_dist_backend(R->dist)), R->local_bs,
                R->o.sync_bn ? ", SyncBatchNorm" : "",
                R->overlap ? "in buckets overlapped with backward" : "after backward");
    run_log(R, "%11s%11s%11s%11s%11s%11s%11s", "Epoch", "GPU_mem", "box_loss", "obj_loss",
            "cls_loss", "Instances", "Size");

    const double t0 = now_s();
    int64_t batches = 0, images = 0, stop_sig = 0;
    double first_loss = NAN, epoch_t0 = t0;
    int64_t epoch_images = 0, epoch_batches = 0;
    double train_secs = 0.0; /* the batches' wall time: validation and saving excluded */
    bool first_epoch = true;
    bool stopped = false, early = false, possible_stop = false;
    const int patience = R->o.patience > 0 ? R->o.patience : INT_MAX;
    while (R->epoch < R->o.epochs) {
        struct trn_batch b;
        if ((rc = trn_loader_next(R->loader, &b)) < 0) {
            trn_seterr(err, err_cap, "%s: %s", R->o.records, trn_loader_error(R->loader));
            goto out;
        }
        if (b.epoch != (uint32_t)R->epoch || b.step != (uint64_t)R->step) {
            trn_seterr(err, err_cap, "loader out of step (epoch %u batch %" PRIu64 ")", b.epoch,
                       b.step);
            rc = -EIO;
            goto out;
        }
        plot_first_batch(R, &b);
        struct trn_batch mb = b; /* the batch the step sees (--multi-scale resizes it) */
        if (R->o.multi_scale && (rc = multi_scale(R, &b, &mb, err, err_cap)) < 0) goto out;
        struct trn_loss_items it;
        const struct run_step *path = R->graph && !run_is_alt(R, &mb) ? &run_step_graph
                                      : R->resident                   ? &run_step_resident
                                                                      : &run_step_host;
        rc = path->batch(R, &mb, &it, err, err_cap);
        if (rc < 0) goto out;
        R->msum[0] += it.lbox;
        R->msum[1] += it.lobj;
        R->msum[2] += it.lcls;
        R->mcount++;
        batches++;
        images += b.n;
        epoch_images += b.n;
        epoch_batches++;
        R->step++;
        const double mloss[3] = { R->msum[0] / (double)R->mcount, R->msum[1] / (double)R->mcount,
                                  R->msum[2] / (double)R->mcount };
        progress(R, R->epoch, mloss, b.n_targets, epoch_batches, now_s() - epoch_t0, epoch_images,
                 mb.width);
        if (R->step == R->nb) {
            train_secs += now_s() - epoch_t0;
            const int epoch = R->epoch;
            if (first_epoch) first_loss = mloss[0] + mloss[1] + mloss[2];
            first_epoch = false;
            /* validation, the checkpoints and the ranks' weight digests read the host copies */
            int erc = run_resident_download(R, err, err_cap);
            double fi = 0;
            if (R->rank == 0 && !erc) {
                struct trn_train_metrics mt;
                /* train.py: final_epoch = epoch + 1 == epochs or stopper.possible_stop */
                const bool final = epoch + 1 == R->o.epochs || possible_stop;
                erc = validate_epoch(R, epoch, !R->o.noval || final, &mt, save_p, save_b, err,
                                     err_cap);
                fi = 0.1 * mt.map50 + 0.9 * mt.map; /* ultralytics' fitness */
                /* EarlyStopping.__call__: >= counts as an improvement */
                if (fi >= R->best_fitness) R->best_epoch = epoch;
                possible_stop = epoch - R->best_epoch >= patience - 1;
                early = epoch - R->best_epoch >= patience;
                if (fi > R->best_fitness) R->best_fitness = fi;
                if (!erc) erc = run_results_append(R, epoch, mloss, &mt, err, err_cap);
                if (res && (!R->o.noval || final)) res->results = mt;
            }
            if (res) res->last_loss = mloss[0] + mloss[1] + mloss[2];
            R->epoch++;
            R->step = 0;
            memset(R->msum, 0, sizeof R->msum);
            R->mcount = 0;
            if (R->rank == 0 && !erc && !R->o.evolve) erc = run_save_named(R, "last", err, err_cap);
            if (R->rank == 0 && !erc && !R->o.evolve && fi == R->best_fitness)
                erc = run_save_named(R, "best", err, err_cap);
            if (R->world > 1) erc = dist_epoch_sync(R, epoch, erc, &early, err, err_cap);
            if (!erc && !early && R->epoch < R->o.epochs)
                erc = image_weights_apply(R, R->epoch, 0, err, err_cap);
            if ((rc = erc) < 0) goto out;
            epoch_t0 = now_s();
            epoch_images = epoch_batches = 0;
            if (early && R->epoch < R->o.epochs) {
                run_log(R,
                        "Stopping training early as no improvement observed in last %d epochs. "
                        "Best results observed at epoch %d, best model saved as best.ckpt.",
                        patience, R->best_epoch);
                break;
            }
        } else if (res) {
            res->last_loss = mloss[0] + mloss[1] + mloss[2];
        }
        /* preemption: every rank finishes this batch, the ranks agree, rank 0 saves */
        stop_sig = R->o.stop ? (int64_t)*R->o.stop : 0;
        if ((rc = dist_stop_vote(R, &stop_sig, err, err_cap)) < 0) goto out;
        const bool stop = stop_sig != 0 || (R->o.stop_after > 0 && batches >= R->o.stop_after);
        if (stop && R->epoch < R->o.epochs) {
            int src = 0;
            if (R->rank == 0 && R->step != 0 && !R->o.evolve)
                src = run_save_named(R, "last", err, err_cap);
            if ((rc = dist_status(R, src, "saving last.ckpt at the stop", err, err_cap)) < 0)
                goto out;
            run_log(R,
                    "stopped at epoch %d batch %" PRId64 "; saved %s/last.ckpt (resume with "
                    "--resume)",
                    R->epoch, R->step, R->weights_dir);
            stopped = true;
            break;
        }
    }
    /* every conv is planned by now: the tuned file and the run's copy (rank 0 writes) */
    if (R->rank == 0 && (rc = trn_plans_write(&R->plans, R->o.run_dir, err, err_cap)) < 0) goto out;
    if (!stopped && R->rank == 0) {
        char csv[4200], png[4200], e[512] = "";
        snprintf(csv, sizeof csv, "%s/results.csv", R->o.run_dir);
        snprintf(png, sizeof png, "%s/results.png", R->o.run_dir);
        if (!R->o.noplots && (rc = trn_plot_results(csv, png, e, sizeof e)) < 0) {
            trn_seterr(err, err_cap, "results.png: %s", e);
            goto out;
        }
        run_log(R, "%d epochs completed in %.3f hours.", R->epoch, (now_s() - t0) / 3600);
        if (R->val_data && !R->o.evolve && (rc = validate_best(R, err, err_cap)) < 0) goto out;
        run_log(R, "Results saved to %s", R->o.run_dir);
    }
    if (res) {
        const double secs = now_s() - t0;
        res->epoch = R->epoch;
        res->step = R->step;
        res->batches = batches;
        res->images_per_s = secs > 0 ? (double)images * R->world / secs : 0;
        if (R->step > 0) train_secs += now_s() - epoch_t0; /* a stop mid-epoch */
        res->train_images_per_s =
            train_secs > 0 ? (double)images * R->world / train_secs : res->images_per_s;
        res->first_loss = first_loss;
        res->stop_signal = stopped ? (int)stop_sig : 0;
        snprintf(res->last_path, sizeof res->last_path, "%s/last.ckpt", R->weights_dir);
    }
    if (R->gs[0].net)
        run_log(R,
                "cuda graph: %" PRId64 " full batches replayed, %" PRId64 " captured, %" PRId64
                " run directly (%s)",
                R->g_replays, R->g_captures, R->g_direct_all,
                R->graph ? "graphs in use" : "fell back to the direct step");
    rc = stopped || early ? TRN_TRAIN_STOPPED : 0;
out:
    for (int i = 0; i < R->n_plot_threads; i++)
        pthread_join(R->plot_thread[i], NULL);
    free(save_p);
    free(save_b);
    run_free(R);
    return rc;
}
