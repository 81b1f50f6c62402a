/* The data part of a run (priv/run.h): the training records and their label table, the class
 * names, the loader, validation's records, and --image-weights' draws. */
#include "priv/run.h"

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
    if (R->dist.world > 1 && R->dist.rank != 0 && R->o.log) {
        char line[1024];
        snprintf(line, sizeof line, "rank %d: loader: %s", R->dist.rank, msg);
        R->o.log(R->o.log_ctx, line);
        return;
    }
    run_log(R, "loader: %s", msg);
}

/* Class names and count from the dataset metadata (pack writes nc and names). */
static int dataset_names(struct run *R, bool single_cls)
{
    size_t mlen = 0;
    const char *mt = ffr_reader_metadata(R->data.reader, &mlen);
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
    R->data.names = pn.names;
    R->data.n_names = pn.n;
    for (int k = 0; k < R->data.n_names; k++)
        if (!R->data.names[k]) {
            char b[32];
            snprintf(b, sizeof b, "class%d", k);
            if (!(R->data.names[k] = strdup(b))) return -ENOMEM;
        }
    return 0;
}

/* --image-weights: the classes of every image's labels from the index summaries (no record
 * reads), train.py's maps at 0 until the first validation. */
int run_data_iw_setup(struct run *R, char *err, size_t cap)
{
    if (!R->o.image_weights) return 0;
    if (R->dist.world > 1)
        return trn_fail(err, cap, -EINVAL,
                        "--image-weights is not compatible with multi-process (DDP) training, "
                        "as in train.py");
    const uint64_t n = ffr_reader_count(R->data.reader);
    const int nc = R->nets.info->nc;
    R->data.iw_image = calloc(n + 1, sizeof *R->data.iw_image);
    R->data.iw_draw = calloc(n + 1, sizeof *R->data.iw_draw);
    R->data.iw_class = calloc((size_t)nc, sizeof *R->data.iw_class);
    R->data.maps = calloc((size_t)nc, sizeof *R->data.maps);
    if (!R->data.iw_image || !R->data.iw_draw || !R->data.iw_class || !R->data.maps)
        return trn_fail(err, cap, -ENOMEM, "--image-weights: out of memory");
    const struct det_labels *t = R->data.labels;
    const uint64_t rows = t->first[n];
    if (!(R->data.iw_cls = malloc((rows + 1) * sizeof *R->data.iw_cls)))
        return trn_fail(err, cap, -ENOMEM, "--image-weights: out of memory");
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t k = t->first[i]; k < t->first[i + 1]; k++) {
            const float c = R->o.single_cls ? 0.0f : t->rows[i][5 * (k - t->first[i])];
            if (!(c >= 0 && c < (float)nc))
                return trn_fail(err, cap, -EINVAL,
                                "%s: record %" PRIu64 " has class %g, the model has nc=%d",
                                R->o.records, i, (double)c, nc);
            R->data.iw_cls[k] = (int32_t)c;
        }
    return 0;
}

/* Before epoch `epoch` with a node cache smaller than the dataset: the epoch's shards made
 * readable while the loader's gate holds its workers, then the gate opened. */
int run_data_epoch(struct run *R, int epoch, char *err, size_t cap)
{
    if (!R->o.epoch_data) return 0;
    char e[768] = "";
    int rc = R->o.epoch_data(R->o.epoch_data_ctx, R->data.reader, epoch, e, sizeof e);
    if (rc < 0) return trn_fail(err, cap, rc, "%s: epoch %d's shards: %s", R->o.records, epoch, e);
    if ((rc = trn_loader_open_epoch(R->data.loader, (uint32_t)epoch)) < 0)
        return trn_fail(err, cap, rc, "%s: opening epoch %d: %s", R->o.records, epoch,
                        strerror(-rc));
    return 0;
}

/* train.py at the start of each epoch with --image-weights: the epoch's images drawn with
 * replacement by weight (random.choices), the loader moved to (epoch, step) with them. */
int run_data_iw_apply(struct run *R, int epoch, int64_t step, char *err, size_t cap)
{
    if (!R->o.image_weights) return 0;
    const uint64_t n = ffr_reader_count(R->data.reader);
    int rc = trn_image_weights(R->data.labels->first, R->data.iw_cls, n, R->nets.info->nc,
                               R->data.maps, R->data.iw_class, R->data.iw_image);
    if (rc == 0)
        rc = trn_sampler_weighted_indices(R->data.iw_image, n, R->o.seed, (uint32_t)epoch,
                                          R->data.iw_draw);
    if (rc == -EINVAL)
        return trn_fail(err, cap, rc, "--image-weights: no image of %s has a label", R->o.records);
    if (rc == 0)
        rc = trn_loader_set_indices(R->data.loader, R->data.iw_draw, (uint32_t)epoch,
                                    (uint64_t)step);
    return rc < 0 ? trn_fail(err, cap, rc, "--image-weights: %s", strerror(-rc)) : 0;
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

/* The training records: opened, checked against the checkpoint when resuming, their label table
 * built once (the loader, AutoAnchor, image weights and the plots share it), the class names. */
int run_data_open(struct run *R, char *err, size_t cap)
{
    const struct trn_train_opts *o = &R->o;
    char e[768] = "";
    int rc = ffr_reader_open(&R->data.reader, o->records, NULL, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s", e[0] ? e : ffr_strerror(rc));
        return rc;
    }
    R->data.data_hash = ffr_reader_content_hash(R->data.reader);
    if ((rc = check_resumed_data(R, o->records, R->data.data_hash, R->data.ckpt_data_hash,
                                 "records", err, cap)) < 0)
        return rc;
    if ((rc = det_labels_build(R->data.reader, o->records, &R->data.labels, e, sizeof e)) < 0)
        return trn_fail(err, cap, rc, "%s", e);
    if ((rc = dataset_names(R, o->single_cls)) < 0) {
        trn_seterr(err, cap, "out of memory");
        return rc;
    }
    return 0;
}

/* The loader over the records, at the checkpoint's position when resuming (C), on the nets'
 * contexts (run_nets_contexts) and grid (run_nets_model); sets the state's batches per epoch. */
int run_data_loader(struct run *R, const struct trn_ckpt *C, char *err, size_t cap)
{
    const struct trn_train_opts *o = &R->o;
    struct trn_loader_opts lo;
    trn_loader_opts_default(&lo);
    lo.img_size = o->img;
    lo.single_cls = o->single_cls;
    lo.batch_size = R->dist.local_bs;
    lo.world_size = (uint32_t)R->dist.world;
    lo.rank = (uint32_t)R->dist.rank;
    lo.workers = o->workers;
    if (o->page_cache) lo.io.io.direct = FFIO_DIRECT_OFF;
    if (o->direct) lo.io.io.direct = FFIO_DIRECT_ON;
    lo.seed = o->seed;
    lo.pixels = R->nets.pixels = TRN_PIXELS_F32;
    lo.hyp = o->hyp;
    lo.labels = R->data.labels;
    lo.log = loader_log;
    lo.log_ctx = R;
    /* train.py's train loader: rect with pad 0.0 at the grid size max(stride, 32) */
    lo.rect = o->rect;
    lo.rect_pad = 0.0;
    lo.cache_ram = o->cache_ram;
    lo.ram_share_key = o->ram_share_key;
    lo.ram_share_ranks = o->ram_share_ranks > 1 ? (uint32_t)o->ram_share_ranks : 0;
    lo.stride = R->nets.grid;
    if (o->cache_dir) {
        lo.damaged = loader_damaged;
        lo.damaged_ctx = R;
    }
    /* The resident step builds its batches on the device (GPU augmentation): the workers decode
       tiles, the device pastes, warps and colours them into the batch tensor. Same bytes as the
       host path; the host step (Adam, AdamW) reads host images, so it keeps the host path. */
    if ((R->nets.gpu_ctx || R->dev.device_path) && o->optimizer == TRN_OPTIM_SGD && !o->host_aug &&
        !o->multi_scale && !o->rect) {
        lo.pix_ctx = R->nets.gpu_ctx ? R->nets.gpu_ctx : R->nets.ctx;
        lo.pix_ops = R->nets.gpu_ctx ? kern_ops_cuda() : kern_ops_ref();
        /* in the stem's bf16 layout where the nets read it as it is: no cast in the step */
        lo.pixels = R->nets.pixels = run_nets_pixels(R);
    }
    if (o->resume) {
        int64_t ep, st;
        if (trn_ckpt_i64(C, "epoch", 0, 1000000, &ep) ||
            trn_ckpt_i64(C, "step", 0, INT64_MAX, &st)) {
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
    char e[768] = "";
    if (o->epoch_data) {
        lo.epoch_gate = true;
        lo.local_world_size = o->local_world_size > 0 ? (uint32_t)o->local_world_size : 0;
        const int rc = o->epoch_data(o->epoch_data_ctx, R->data.reader, (int)lo.epoch, e, sizeof e);
        if (rc < 0)
            return trn_fail(err, cap, rc, "%s: epoch %u's shards: %s", o->records, lo.epoch, e);
    }
    const int rc = trn_loader_create(R->data.reader, &lo, &R->data.loader, e, sizeof e);
    if (rc < 0) {
        /* the loader's message carries the repack hint when the packing size is the cause */
        trn_seterr(err, cap, "%s: %s", o->records, e);
        return rc;
    }
    struct trn_loader_info li;
    trn_loader_info(R->data.loader, &li);
    /* counted, so that a test can check the defaults by counting rather than by timing */
    char line[200];
    run_log(R, "%s", trn_cli_compute_line(line, sizeof line, o->threads, li.workers));
    if (R->nets.gpu_ctx && li.pinned_kind != FFIO_PINNED_CUDA)
        run_log(R,
                "WARNING: the loader's buffers are not CUDA-pinned (%s; they are %s): every "
                "upload is a staged synchronous copy and loading will not overlap the step",
                ffio_pinned_cuda_status()[0] ? ffio_pinned_cuda_status() : "cudaHostAlloc failed",
                ffio_pinned_kind_name(li.pinned_kind));
    R->state.nb = (int64_t)li.steps;
    R->state.last_bs = (int)(li.rank_samples - (li.steps - 1) * (uint64_t)R->dist.local_bs);
    return 0;
}

/* Rank 0's validation records (--val-records, unless a hook validates): checked against the
 * checkpoint when resuming; their class names for the per-class rows. */
int run_data_val_open(struct run *R, char *err, size_t cap)
{
    if (R->dist.rank != 0 || R->o.validate || !R->o.val_records) return 0;
    char e[768] = "";
    int rc = ffr_reader_open(&R->data.val, R->o.val_records, NULL, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s", e[0] ? e : ffr_strerror(rc));
        return rc;
    }
    R->data.val_hash = ffr_reader_content_hash(R->data.val);
    if ((rc = check_resumed_data(R, R->o.val_records, R->data.val_hash, R->data.ckpt_val_hash,
                                 "validation records", err, cap)) < 0)
        return rc;
    size_t ml = 0;
    const char *meta = ffr_reader_metadata(R->data.val, &ml);
    if (meta && (rc = trn_plot_names_parse(meta, ml, &R->data.val_names)) < 0) return rc;
    return 0;
}

void run_data_free(struct run *R)
{
    struct run_data *d = &R->data;
    trn_loader_destroy(d->loader);
    det_labels_free(d->labels);
    ffr_reader_close(d->reader);
    ffr_reader_close(d->val);
    trn_plot_names_free(&d->val_names);
    for (int k = 0; k < d->n_names; k++)
        free(d->names[k]);
    free(d->names);
    free(d->iw_cls);
    free(d->iw_class);
    free(d->iw_image);
    free(d->maps);
    free(d->iw_draw);
    memset(d, 0, sizeof *d);
}
