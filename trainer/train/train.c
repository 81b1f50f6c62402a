/*
 * The training loop (train.h has the contract): a run's setup and teardown, the epochs with
 * their validation, early stop and the ranks' agreement. What a step does is in the step files
 * (priv/run.h, struct run_step); what a run writes and resumes from is in run_files.c, whose
 * checkpoints hold the arenas as raw little-endian bytes, so resume is bit-exact on the same path.
 */
#include "priv/run.h"
#include "util.h"

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

/* The parts go in this order: the job's plot threads, which read the names and the contexts,
 * first; the device's graphs and buffers before the nets and contexts they record and live in;
 * the loader (which may run on the nets' context) before the contexts. */
static void run_free(struct run *R)
{
    run_job_free(R);
    run_device_free(R);
    run_data_free(R);
    run_state_free(R);
    run_dist_free(R);
    run_nets_free(R);
    free(R);
}

/* The run's parts, in their order (priv/run.h); C: the checkpoint when resuming. */
static int setup(struct run *R, struct trn_ckpt **C, char *err, size_t cap)
{
    struct trn_train_opts *o = &R->o;
    int rc;
    if (o->resume) {
        if ((rc = trn_ckpt_open(o->resume, C, err, cap)) < 0) return rc;
        if ((rc = run_resume_opts(R, *C, err, cap)) < 0) return rc;
    }
    char e[768] = "";
    if ((rc = trn_hyp_check(&o->hyp, e, sizeof e)) < 0) {
        trn_seterr(err, cap, "hyp: %s", e);
        return rc;
    }
    if (!o->resume && R->dist.rank == 0) {
        size_t hl = 0;
        char *ht = run_hyp_text(&o->hyp, true, &hl);
        if (ht) run_log(R, "%s", ht);
        free(ht);
    }
    if ((rc = run_dist_setup(R, err, cap)) < 0 || (rc = run_data_open(R, err, cap)) < 0 ||
        (rc = run_nets_model(R, *C, err, cap)) < 0)
        return rc;
    run_plot_labels(R);
    if ((rc = run_nets_contexts(R, err, cap)) < 0 || (rc = run_data_loader(R, *C, err, cap)) < 0 ||
        (rc = run_nets_create(R, err, cap)) < 0)
        return rc;
    return run_state_setup(R, *C, err, cap);
}

/* ultralytics' tqdm bar after each batch: epoch, device memory, mean losses, the batch's
 * targets and size; the epoch's last one goes to the log too when nobody draws the bar. */
static void progress(struct run *R, int epoch, const double ml[3], size_t instances, int64_t done,
                     double secs, int64_t images, int size)
{
    if (R->dist.rank != 0) return;
    const bool final = done == R->state.nb;
    if (!R->o.progress && !final) return;
    char ep[32], mem[32], desc[160], line[512];
    snprintf(ep, sizeof ep, "%d/%d", epoch, R->o.epochs - 1);
    size_t used = 0, total = 0;
    /* train.py: torch.cuda.memory_reserved() / 1E9 on a GPU, 0 on the CPU */
    if (R->nets.gpu_ctx && kern_cuda_mem_info(&used, &total) == 0)
        snprintf(mem, sizeof mem, "%.3gG", (double)used / 1e9);
    else
        snprintf(mem, sizeof mem, "0G");
    snprintf(desc, sizeof desc, "%11s%11s%11.4g%11.4g%11.4g%11.4g%11.4g", ep, mem, ml[0], ml[1],
             ml[2], (double)instances, (double)size);
    trn_cli_bar(line, sizeof line, desc, done, R->state.nb, secs);
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
    for (int i = 0; i < R->job.n_val_seen; i++)
        if (R->job.val_seen[i] == h) return;
    if (R->job.n_val_seen < (int)(sizeof R->job.val_seen / sizeof R->job.val_seen[0]))
        R->job.val_seen[R->job.n_val_seen++] = h;
    run_log(R, "%s", msg);
}

/* val.py's per-class rows (verbose), names from the val dataset's metadata. */
static void log_class_rows(struct run *R, const struct trn_val_result *vr)
{
    if (vr->nc <= 1) return;
    for (int i = 0; i < vr->ap.n_cls; i++) {
        const int c = vr->ap.cls[i];
        char num[16];
        const char *name = c < R->data.val_names.n && R->data.val_names.names[c]
                               ? R->data.val_names.names[c]
                           : c < R->data.n_names ? R->data.names[c]
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
    vo.batch_size = R->dist.local_bs * 2; /* train.py: batch_size // WORLD_SIZE * 2 */
    vo.micro_batch = vo.batch_size < 4 ? vo.batch_size : 4;
    vo.workers = R->o.workers;
    vo.threads = R->o.threads;
    vo.conf_thres = 0.001f;
    vo.iou_thres = 0.6;
    vo.max_det = 300;
    vo.rect = true;
    vo.loss_hyp = &R->o.hyp;
    vo.loss_img = R->o.img;
    vo.names = &R->data.val_names;
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
    const int rc = trn_val_run(m, R->data.val, &vo, &vr, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s: %s", R->o.val_records, e[0] ? e : trn_strerror(rc));
    } else {
        if (!vo.progress) run_log(R, "%s", TRN_VAL_HEADER);
        run_log(R, "%22s%11d%11" PRId64 "%11.3g%11.3g%11.3g%11.3g", "all", vr.seen, vr.n_labels,
                vr.mp, vr.mr, vr.map50, vr.map);
        if (best) log_class_rows(R, &vr);
        /* train.py's maps: the overall mAP, then each class's own where it has one */
        for (int c = 0; R->data.maps && !best && c < R->nets.info->nc; c++)
            R->data.maps[c] = vr.map;
        for (int i = 0; R->data.maps && !best && i < vr.ap.n_cls; i++)
            if (vr.ap.cls[i] >= 0 && vr.ap.cls[i] < R->nets.info->nc)
                R->data.maps[vr.ap.cls[i]] = vr.ap.ap5095[i];
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
    if (!run || (!R->o.validate && !R->data.val)) return 0;
    const size_t P = R->nets.info->arena_len[TRN_ARENA_PARAM],
                 B = R->nets.info->arena_len[TRN_ARENA_BUFFER];
    float *mp = trn_model_arena(R->nets.m, TRN_ARENA_PARAM),
          *mb = trn_model_arena(R->nets.m, TRN_ARENA_BUFFER);
    memcpy(save_p, mp, P * sizeof(float));
    memcpy(save_b, mb, B * sizeof(float));
    memcpy(mp, trn_ema_arena(R->state.ema, TRN_ARENA_PARAM), P * sizeof(float));
    memcpy(mb, trn_ema_arena(R->state.ema, TRN_ARENA_BUFFER), B * sizeof(float));
    int rc;
    if (R->o.validate) {
        rc = R->o.validate(R->o.validate_ctx, R->nets.m, epoch, mt);
        if (rc < 0)
            trn_seterr(err, cap, "validation of epoch %d failed: %s", epoch, trn_strerror(rc));
    } else {
        rc = builtin_val(R, R->nets.m, false, mt, err, cap);
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
    snprintf(p, sizeof p, "%s/best.ckpt", R->job.weights_dir);
    run_log(R, "Validating %s...", p);
    struct trn_ckpt *C = NULL;
    int rc = trn_ckpt_open(p, &C, err, cap);
    if (rc < 0) return rc;
    rc = trn_ckpt_load_ema(C, R->nets.m, false, err, cap);
    trn_ckpt_close(C);
    struct trn_train_metrics mt;
    if (!rc) rc = builtin_val(R, R->nets.m, true, &mt, err, cap);
    return rc;
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
    R->dist.comm = opts->dist;
    R->dist.rank = rank;
    R->dist.world = trn_dist_world(opts->dist);
    struct trn_ckpt *C = NULL;
    float *save_p = NULL, *save_b = NULL;
    int rc = setup(R, &C, err, err_cap);
    trn_ckpt_close(C);
    if (rc < 0) goto out;
    if (R->dist.rank == 0 && (rc = run_write_files(R, err, err_cap)) < 0) goto out;
    if ((rc = run_data_val_open(R, err, err_cap)) < 0) goto out;
    if (R->dist.rank == 0 && (R->o.validate || R->data.val)) {
        save_p = malloc(R->nets.info->arena_len[TRN_ARENA_PARAM] * sizeof(float) + 1);
        save_b = malloc(R->nets.info->arena_len[TRN_ARENA_BUFFER] * sizeof(float) + 1);
        if (!save_p || !save_b) {
            rc = -ENOMEM;
            goto out;
        }
    } else {
        run_log(R, "validation: no val records; results.csv metrics/* and val/* columns are "
                   "written as 0 and best.ckpt = last.ckpt (every fitness is 0)");
    }
    if (R->dist.world > 1 && (rc = run_dist_start(R, err, err_cap)) < 0) goto out;
    if ((rc = run_data_iw_setup(R, err, err_cap)) < 0 ||
        (rc = run_data_iw_apply(R, R->state.epoch, R->state.step, err, err_cap)) < 0)
        goto out;
    if ((rc = run_resident_setup(R, err, err_cap)) < 0) goto out;
    if ((rc = run_graph_setup(R, err, err_cap)) < 0) goto out;
    run_log(R,
            "%s%s: %" PRId64 " batches of %d per epoch (last %d), %d epochs, img %d, "
            "accumulate %d, %s",
            R->o.resume ? "Resuming from " : "Training", R->o.resume ? R->o.resume : "",
            R->state.nb, R->o.batch_size, R->state.last_bs * R->dist.world, R->o.epochs, R->o.img,
            trn_optim_accumulate(trn_optim_get_opts(R->state.opt)), optim_names[R->o.optimizer]);
    if (R->dist.world > 1)
        run_log(R,
                "DDP: %d ranks over %s, %d images per rank per batch, gradients summed%s; "
                "all-reduced %s",
                R->dist.world, trn_dist_backend_name(trn_dist_backend(R->dist.comm)),
                R->dist.local_bs, R->o.sync_bn ? ", SyncBatchNorm" : "",
                R->dist.overlap ? "in buckets overlapped with backward" : "after backward");
    run_log(R, "%11s%11s%11s%11s%11s%11s%11s", "Epoch", "GPU_mem", "box_loss", "obj_loss",
            "cls_loss", "Instances", "Size");

    const double t0 = trn_now_s();
    int64_t batches = 0, images = 0, stop_sig = 0;
    double first_loss = NAN, epoch_t0 = t0;
    int64_t epoch_images = 0, epoch_batches = 0;
    double train_secs = 0.0; /* the batches' wall time: validation and saving excluded */
    bool first_epoch = true;
    bool stopped = false, early = false, possible_stop = false;
    const int patience = R->o.patience > 0 ? R->o.patience : INT_MAX;
    while (R->state.epoch < R->o.epochs) {
        struct trn_batch b;
        if ((rc = trn_loader_next(R->data.loader, &b)) < 0) {
            trn_seterr(err, err_cap, "%s: %s", R->o.records, trn_loader_error(R->data.loader));
            goto out;
        }
        if (b.epoch != (uint32_t)R->state.epoch || b.step != (uint64_t)R->state.step) {
            trn_seterr(err, err_cap, "loader out of step (epoch %u batch %" PRIu64 ")", b.epoch,
                       b.step);
            rc = -EIO;
            goto out;
        }
        run_plot_first_batch(R, &b);
        struct trn_batch mb = b; /* the batch the step sees (--multi-scale resizes it) */
        if (R->o.multi_scale && (rc = run_nets_multi_scale(R, &b, &mb, err, err_cap)) < 0) goto out;
        struct trn_loss_items it;
        const struct run_step *path = R->dev.graph && !run_is_alt(R, &mb) ? &run_step_graph
                                      : R->dev.resident                   ? &run_step_resident
                                                                          : &run_step_host;
        rc = path->batch(R, &mb, &it, err, err_cap);
        if (rc < 0) goto out;
        R->state.msum[0] += it.lbox;
        R->state.msum[1] += it.lobj;
        R->state.msum[2] += it.lcls;
        R->state.mcount++;
        batches++;
        images += b.n;
        epoch_images += b.n;
        epoch_batches++;
        R->state.step++;
        const double mloss[3] = { R->state.msum[0] / (double)R->state.mcount,
                                  R->state.msum[1] / (double)R->state.mcount,
                                  R->state.msum[2] / (double)R->state.mcount };
        progress(R, R->state.epoch, mloss, b.n_targets, epoch_batches, trn_now_s() - epoch_t0,
                 epoch_images, mb.width);
        if (R->state.step == R->state.nb) {
            train_secs += trn_now_s() - epoch_t0;
            const int epoch = R->state.epoch;
            if (first_epoch) first_loss = mloss[0] + mloss[1] + mloss[2];
            first_epoch = false;
            /* validation, the checkpoints and the ranks' weight digests read the host copies */
            int erc = run_resident_download(R, err, err_cap);
            double fi = 0;
            if (R->dist.rank == 0 && !erc) {
                struct trn_train_metrics mt;
                /* train.py: final_epoch = epoch + 1 == epochs or stopper.possible_stop */
                const bool final = epoch + 1 == R->o.epochs || possible_stop;
                erc = validate_epoch(R, epoch, !R->o.noval || final, &mt, save_p, save_b, err,
                                     err_cap);
                fi = 0.1 * mt.map50 + 0.9 * mt.map; /* ultralytics' fitness */
                /* EarlyStopping.__call__: >= counts as an improvement */
                if (fi >= R->state.best_fitness) R->state.best_epoch = epoch;
                possible_stop = epoch - R->state.best_epoch >= patience - 1;
                early = epoch - R->state.best_epoch >= patience;
                if (fi > R->state.best_fitness) R->state.best_fitness = fi;
                if (!erc) erc = run_results_append(R, epoch, mloss, &mt, err, err_cap);
                if (res && (!R->o.noval || final)) res->results = mt;
            }
            if (res) res->last_loss = mloss[0] + mloss[1] + mloss[2];
            R->state.epoch++;
            R->state.step = 0;
            memset(R->state.msum, 0, sizeof R->state.msum);
            R->state.mcount = 0;
            if (R->dist.rank == 0 && !erc && !R->o.evolve)
                erc = run_save_named(R, "last", err, err_cap);
            if (R->dist.rank == 0 && !erc && !R->o.evolve && fi == R->state.best_fitness)
                erc = run_save_named(R, "best", err, err_cap);
            if (R->dist.world > 1) erc = run_dist_epoch_sync(R, epoch, erc, &early, err, err_cap);
            if (!erc && !early && R->state.epoch < R->o.epochs)
                erc = run_data_epoch(R, R->state.epoch, err, err_cap);
            if (!erc && !early && R->state.epoch < R->o.epochs)
                erc = run_data_iw_apply(R, R->state.epoch, 0, err, err_cap);
            if ((rc = erc) < 0) goto out;
            epoch_t0 = trn_now_s();
            epoch_images = epoch_batches = 0;
            if (early && R->state.epoch < R->o.epochs) {
                run_log(R,
                        "Stopping training early as no improvement observed in last %d epochs. "
                        "Best results observed at epoch %d, best model saved as best.ckpt.",
                        patience, R->state.best_epoch);
                break;
            }
        } else if (res) {
            res->last_loss = mloss[0] + mloss[1] + mloss[2];
        }
        /* preemption: every rank finishes this batch, the ranks agree, rank 0 saves */
        stop_sig = R->o.stop ? (int64_t)*R->o.stop : 0;
        if ((rc = run_dist_stop_vote(R, &stop_sig, err, err_cap)) < 0) goto out;
        const bool stop = stop_sig != 0 || (R->o.stop_after > 0 && batches >= R->o.stop_after);
        if (stop && R->state.epoch < R->o.epochs) {
            int src = 0;
            /* the checkpoint reads the host copies */
            if (R->dist.rank == 0 && R->state.step != 0 && !R->o.evolve &&
                (src = run_resident_download(R, err, err_cap)) == 0)
                src = run_save_named(R, "last", err, err_cap);
            if ((rc = run_dist_status(R, src, "saving last.ckpt at the stop", err, err_cap)) < 0)
                goto out;
            run_log(R,
                    "stopped at epoch %d batch %" PRId64 "; saved %s/last.ckpt (resume with "
                    "--resume)",
                    R->state.epoch, R->state.step, R->job.weights_dir);
            stopped = true;
            break;
        }
    }
    /* every conv is planned by now: the tuned file and the run's copy (rank 0 writes) */
    if (R->dist.rank == 0 && (rc = trn_plans_write(&R->nets.plans, R->o.run_dir, err, err_cap)) < 0)
        goto out;
    if (!stopped && R->dist.rank == 0) {
        char csv[4200], png[4200], e[512] = "";
        snprintf(csv, sizeof csv, "%s/results.csv", R->o.run_dir);
        snprintf(png, sizeof png, "%s/results.png", R->o.run_dir);
        if (!R->o.noplots && (rc = trn_plot_results(csv, png, e, sizeof e)) < 0) {
            trn_seterr(err, err_cap, "results.png: %s", e);
            goto out;
        }
        run_log(R, "%d epochs completed in %.3f hours.", R->state.epoch, (trn_now_s() - t0) / 3600);
        if (R->data.val && !R->o.evolve && (rc = validate_best(R, err, err_cap)) < 0) goto out;
        run_log(R, "Results saved to %s", R->o.run_dir);
    }
    if (res) {
        const double secs = trn_now_s() - t0;
        res->epoch = R->state.epoch;
        res->step = R->state.step;
        res->batches = batches;
        res->images_per_s = secs > 0 ? (double)images * R->dist.world / secs : 0;
        if (R->state.step > 0) train_secs += trn_now_s() - epoch_t0; /* a stop mid-epoch */
        res->train_images_per_s =
            train_secs > 0 ? (double)images * R->dist.world / train_secs : res->images_per_s;
        res->first_loss = first_loss;
        res->stop_signal = stopped ? (int)stop_sig : 0;
        snprintf(res->last_path, sizeof res->last_path, "%s/last.ckpt", R->job.weights_dir);
    }
    if (R->dev.gs[0].net)
        run_log(R,
                "cuda graph: %" PRId64 " full batches replayed, %" PRId64 " captured, %" PRId64
                " run directly (%s)",
                R->dev.g_replays, R->dev.g_captures, R->dev.g_direct_all,
                R->dev.graph ? "graphs in use" : "fell back to the direct step");
    rc = stopped || early ? TRN_TRAIN_STOPPED : 0;
out:
    free(save_p);
    free(save_b);
    run_free(R);
    return rc;
}
