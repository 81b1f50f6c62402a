/* The job part of a run (priv/run.h): its log, its files (hyp.yaml, opt.yaml, results.csv, the
 * plots of the labels and the first batches), and the checkpoint it saves and resumes from (the
 * record layout is weights/ckpt.h's; what goes in it is train.h's). The lowest of the run's
 * files: it calls none of the others. */
#include "priv/run.h"

void run_log(const struct run *R, const char *fmt, ...)
{
    if (!R->o.log || R->dist.rank != 0) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    R->o.log(R->o.log_ctx, line);
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

void run_plot_first_batch(struct run *R, const struct trn_batch *b)
{
    if (R->dist.rank != 0 || R->o.noplots || R->o.resume || b->epoch != 0 || b->step > 2 ||
        R->job.n_plot_threads > 3 || !R->o.run_dir || (!b->images && !b->device_images))
        return;
    struct plot_job *j = calloc(1, sizeof *j);
    void *img = malloc(b->image_bytes ? b->image_bytes : 1);
    float *t = malloc((b->n_targets + 1) * 6 * sizeof *t);
    int rc = j && img && t ? 0 : -ENOMEM;
    /* GPU augmentation leaves the batch on the device: fetch it after the queue's work */
    if (!rc && b->images)
        memcpy(img, b->images, b->image_bytes);
    else if (!rc && b->device_images)
        rc = (R->nets.gpu_ctx ? kern_cuda_ctx_sync(R->nets.gpu_ctx) : 0) < 0
                 ? -EIO
                 : kern_mem_copy(R->nets.gpu_ctx ? R->nets.gpu_ctx : R->nets.ctx, img,
                                 b->device_images, b->image_bytes, KERN_COPY_D2H);
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
    j->names.names = R->data.names;
    j->names.n = R->data.n_names;
    j->R = R;
    snprintf(j->path, sizeof j->path, "%s/train_batch%d.jpg", R->o.run_dir, (int)b->step);
    if (pthread_create(&R->job.plot_thread[R->job.n_plot_threads], NULL, plot_job_run, j) == 0)
        R->job.n_plot_threads++;
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

void run_plot_labels(struct run *R)
{
    if (R->dist.rank != 0 || R->o.noplots || R->o.resume || !R->o.run_dir) return;
    const struct det_labels *t = R->data.labels;
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
    j->names.names = R->data.names;
    j->names.n = R->data.n_names;
    j->R = R;
    run_log(R, "Plotting labels to %s/labels.jpg... ", R->o.run_dir);
    if (pthread_create(&R->job.plot_thread[R->job.n_plot_threads], NULL, labels_job_run, j) == 0)
        R->job.n_plot_threads++;
    else
        labels_job_run(j);
}

static const char *const results_keys[RESULTS_COLS] = {
    "epoch",
    "train/box_loss",
    "train/obj_loss",
    "train/cls_loss",
    "metrics/precision",
    "metrics/recall",
    "metrics/mAP_0.5",
    "metrics/mAP_0.5:0.95",
    "val/box_loss",
    "val/obj_loss",
    "val/cls_loss",
    "x/lr0",
    "x/lr1",
    "x/lr2",
};

int trn_train_results_header(char *dst, size_t dst_cap)
{
    /* snprintf-style: the length is returned even when dst is NULL or too small. */
    char scratch[1];
    size_t n = 0;
    for (int k = 0; k < RESULTS_COLS; k++) {
        char *at = dst && n < dst_cap ? dst + n : scratch;
        const size_t room = dst && n < dst_cap ? dst_cap - n : 0;
        const int w = snprintf(at, room, "%s%20s", k ? "," : "", results_keys[k]);
        if (w < 0) return -EINVAL;
        n += (size_t)w;
    }
    return (int)n;
}

/* Shortest %g that reads back as the same double (YAML and CSV both stay readable). */
static void fmt_double(char *dst, size_t cap, double v)
{
    for (int p = 6; p <= 17; p++) {
        snprintf(dst, cap, "%.*g", p, v);
        if (strtod(dst, NULL) == v) return;
    }
}

/* A YAML double-quoted scalar. */
static void yaml_quote(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void yaml_num(FILE *f, const char *key, double v)
{
    char b[40];
    fmt_double(b, sizeof b, v);
    fprintf(f, "%s: %s\n", key, b);
}

/* hyp.yaml as ultralytics writes it (yaml.safe_dump(hyp, sort_keys=False)); key order of the
 * hyp files. line: train.py's log line instead, "hyperparameters: lr0=0.01, ..., warmup_epochs=
 * 3.0, ..." (Python prints a float hyp that is whole with ".0"). */
char *run_hyp_text(const struct trn_hyp *h, bool line, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return NULL;
    const struct {
        const char *k;
        double v;
    } kv[] = {
        { "lr0", h->lr0 },
        { "lrf", h->lrf },
        { "momentum", h->momentum },
        { "weight_decay", h->weight_decay },
        { "warmup_epochs", h->warmup_epochs },
        { "warmup_momentum", h->warmup_momentum },
        { "warmup_bias_lr", h->warmup_bias_lr },
        { "box", h->box },
        { "cls", h->cls },
        { "cls_pw", h->cls_pw },
        { "obj", h->obj },
        { "obj_pw", h->obj_pw },
        { "iou_t", h->iou_t },
        { "anchor_t", h->anchor_t },
        { "fl_gamma", h->fl_gamma },
        { "hsv_h", h->hsv_h },
        { "hsv_s", h->hsv_s },
        { "hsv_v", h->hsv_v },
        { "degrees", h->degrees },
        { "translate", h->translate },
        { "scale", h->scale },
        { "shear", h->shear },
        { "perspective", h->perspective },
        { "flipud", h->flipud },
        { "fliplr", h->fliplr },
        { "mosaic", h->mosaic },
        { "mixup", h->mixup },
        { "copy_paste", h->copy_paste },
    };
    if (line) fputs("hyperparameters: ", f);
    for (size_t k = 0; k < sizeof kv / sizeof kv[0]; k++) {
        if (!line) {
            yaml_num(f, kv[k].k, kv[k].v);
            continue;
        }
        char b[40];
        fmt_double(b, sizeof b, kv[k].v);
        fprintf(f, "%s%s=%s%s", k ? ", " : "", kv[k].k, b, strpbrk(b, ".eEin") ? "" : ".0");
    }
    if (!line && h->anchors != 0) yaml_num(f, "anchors", h->anchors);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

char *run_opt_yaml(const struct run *R, size_t *len)
{
    const struct trn_train_opts *o = &R->o;
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return NULL;
    const struct {
        const char *k, *v;
    } s[] = {
        { "weights", o->weights ? o->weights : "" },
        { "cfg", o->cfg ? o->cfg : "" },
        { "records", o->records },
        { "val_records", o->val_records ? o->val_records : "" },
        { "data", o->data ? o->data : "" },
        { "hyp", o->hyp_path ? o->hyp_path : "" },
    };
    for (size_t k = 0; k < sizeof s / sizeof s[0]; k++) {
        fprintf(f, "%s: ", s[k].k);
        yaml_quote(f, s[k].v);
        fputc('\n', f);
    }
    fprintf(f, "epochs: %d\nbatch_size: %d\nimgsz: %d\n", o->epochs, o->batch_size, o->img);
    fprintf(f, "cache: %s\n", o->cache_ram ? "ram" : "null");
    fprintf(f, "resume: %s\n", o->resume ? "true" : "false");
    fprintf(f, "device: ");
    yaml_quote(f, o->device ? o->device : "cpu");
    fprintf(f, "\noptimizer: %s\nworkers: %u\nproject: ", optim_names[o->optimizer], o->workers);
    yaml_quote(f, o->project ? o->project : "");
    fprintf(f, "\nname: ");
    yaml_quote(f, o->name ? o->name : "");
    char ls[40];
    fmt_double(ls, sizeof ls, o->label_smoothing);
    fprintf(f,
            "\nsingle_cls: %s\nimage_weights: %s\nrect: %s\nmulti_scale: %s\ncos_lr: %s"
            "\nlabel_smoothing: %s\nseed: %" PRIu64 "\nnc: %d\nsync_bn: %s\nsave_dir: ",
            o->single_cls ? "true" : "false", o->image_weights ? "true" : "false",
            o->rect ? "true" : "false", o->multi_scale ? "true" : "false",
            o->cos_lr ? "true" : "false", ls, o->seed, R->nets.info->nc,
            o->sync_bn ? "true" : "false");
    yaml_quote(f, o->run_dir);
    fputc('\n', f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The checkpoint's and the log's name of an amp dtype (trn_amp_dtype_name's). */
static const char *amp_name(int dt)
{
    return dt == KERN_DT_BF16 ? "bf16" : dt == KERN_DT_F16 ? "fp16" : "fp32";
}

static char *ckpt_metadata(const struct run *R, size_t *len)
{
    const struct trn_train_opts *o = &R->o;
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return NULL;
    struct trn_optim_counters c;
    trn_optim_get_counters(R->state.opt, &c);
    fprintf(f, "format: %s\n", TRN_CKPT_FORMAT);
    fprintf(f, "epoch: %d\nstep: %" PRId64 "\nni: %" PRId64 "\nbatches_per_epoch: %" PRId64 "\n",
            R->state.epoch, R->state.step, (int64_t)R->state.epoch * R->state.nb + R->state.step,
            R->state.nb);
    fprintf(f, "epochs: %d\nimg: %d\nbatch_size: %d\nseed: %" PRIu64 "\n", o->epochs, o->img,
            o->batch_size, o->seed);
    fprintf(f,
            "optimizer: %s\ncos_lr: %s\nnc: %d\nsync_bn: %s\nlabel_smoothing: %.17g\n"
            "single_cls: %s\nimage_weights: %s\nrect: %s\nmulti_scale: %s\n",
            optim_names[o->optimizer], o->cos_lr ? "true" : "false", R->nets.info->nc,
            o->sync_bn ? "true" : "false", o->label_smoothing, o->single_cls ? "true" : "false",
            o->image_weights ? "true" : "false", o->rect ? "true" : "false",
            o->multi_scale ? "true" : "false");
    fprintf(f, "frozen: \"");
    for (int r = 0, first = 1; r < TRN_MODEL_MAX_LAYERS; r++)
        if (o->frozen[r / 64] >> (r % 64) & 1) fprintf(f, "%s%d", first ? "" : " ", r), first = 0;
    fprintf(f, "\"\n");
    fprintf(f, "names:\n");
    for (int k = 0; k < R->data.n_names; k++) {
        fprintf(f, "  - ");
        yaml_quote(f, R->data.names[k]);
        fputc('\n', f);
    }
    const struct {
        const char *k, *v;
    } s[] = {
        { "records", o->records },
        { "val_records", o->val_records ? o->val_records : "" },
        { "data", o->data ? o->data : "" },
        { "cfg", o->cfg ? o->cfg : "" },
        { "weights", o->weights ? o->weights : "" },
        { "hyp", o->hyp_path ? o->hyp_path : "" },
        { "project", o->project ? o->project : "" },
        { "name", o->name ? o->name : "" },
    };
    for (size_t k = 0; k < sizeof s / sizeof s[0]; k++) {
        fprintf(f, "%s: ", s[k].k);
        yaml_quote(f, s[k].v);
        fputc('\n', f);
    }
    /* what the records are (ffr_reader_content_hash): a resume checks it */
    fprintf(f, "records_hash: \"%016" PRIx64 "\"\n", R->data.data_hash);
    if (R->data.val_hash) fprintf(f, "val_records_hash: \"%016" PRIx64 "\"\n", R->data.val_hash);
    yaml_num(f, "best_fitness", R->state.best_fitness);
    fprintf(f, "best_epoch: %d\n", R->state.best_epoch);
    fprintf(f, "world_size: %d\n", R->dist.world);
    fprintf(f, "ema_updates: %" PRId64 "\noptim_steps: %" PRId64 "\nlast_opt_step: %" PRId64 "\n",
            trn_ema_updates(R->state.ema), c.steps, c.last_opt_step);
    fprintf(f, "amp: %s\n", amp_name(o->amp));
    /* GPU runs: which conv algorithms ran (plans.h); absent on the CPU, so CPU checkpoints keep
     * their bytes */
    const uint64_t ph = kern_plan_hash(R->nets.plans.table);
    if (ph) fprintf(f, "cudnn_plan_hash: \"%016" PRIx64 "\"\n", ph);
    if (R->state.amp) {
        struct trn_amp_state st;
        trn_amp_get_state(R->state.amp, &st);
        yaml_num(f, "amp_scale", st.scale);
        fprintf(f, "amp_growth_tracker: %" PRId64 "\n", st.growth_tracker);
    }
    yaml_num(f, "loss_sum_box", R->state.msum[0]);
    yaml_num(f, "loss_sum_obj", R->state.msum[1]);
    yaml_num(f, "loss_sum_cls", R->state.msum[2]);
    fprintf(f, "loss_batches: %" PRId64 "\n", R->state.mcount);
    fprintf(f, "arena_param: %zu\narena_buffer: %zu\narena_count: %zu\nparameters: %" PRId64 "\n",
            R->nets.info->arena_len[TRN_ARENA_PARAM], R->nets.info->arena_len[TRN_ARENA_BUFFER],
            R->nets.info->arena_len[TRN_ARENA_COUNT], R->nets.info->n_params);
    fprintf(f, "records_layout: [");
    for (int k = 0; k < TRN_CKPT_N_RECORDS; k++)
        fprintf(f, "%s%s", k ? ", " : "", trn_ckpt_record_name(k));
    fprintf(f, "]\ntensors:\n");
    static const char *const arena_names[] = { "param", "buffer", "count" };
    for (int t = 0; t < R->nets.info->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(R->nets.m, t);
        fprintf(f, "  - {name: %s, arena: %s, offset: %zu, shape: [", T->name,
                arena_names[T->arena], T->offset);
        for (int d = 0; d < T->ndim; d++)
            fprintf(f, "%s%d", d ? ", " : "", T->shape[d]);
        fprintf(f, "]}\n");
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Where the gradients accumulated since the last optimizer step live. */
static float *grad_arena(const struct run *R)
{
    return R->dist.acc ? R->dist.acc : trn_net_grad(R->nets.net);
}

static int ckpt_save(struct run *R, const char *path, char *err, size_t cap)
{
    const struct trn_model_info *I = R->nets.info;
    size_t l1 = 0;
    float *s1 = trn_optim_state(R->state.opt, 1, &l1);
    const struct trn_ckpt_src rec[TRN_CKPT_N_RECORDS] = {
        { trn_model_arena(R->nets.m, TRN_ARENA_PARAM),
          I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { trn_model_arena(R->nets.m, TRN_ARENA_BUFFER),
          I->arena_len[TRN_ARENA_BUFFER] * sizeof(float) },
        { trn_model_arena(R->nets.m, TRN_ARENA_COUNT),
          I->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t) },
        { trn_ema_arena(R->state.ema, TRN_ARENA_PARAM),
          I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { trn_ema_arena(R->state.ema, TRN_ARENA_BUFFER),
          I->arena_len[TRN_ARENA_BUFFER] * sizeof(float) },
        { trn_optim_state(R->state.opt, 0, NULL), I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { s1, s1 ? l1 * sizeof(float) : 0 },
        { grad_arena(R), I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { R->job.model_yaml, R->job.model_yaml_len },
        { R->job.hyp_text, R->job.hyp_len },
        { R->job.opt_text, R->job.opt_len },
    };
    size_t mlen = 0;
    char *meta = ckpt_metadata(R, &mlen);
    if (!meta) {
        trn_seterr(err, cap, "%s: out of memory", path);
        return -ENOMEM;
    }
    const int rc = trn_ckpt_write(path, rec, meta, mlen, err, cap);
    free(meta);
    return rc;
}

static void copy_meta_str(const struct trn_ckpt *C, const char *key, char *dst, size_t cap,
                          const char **out)
{
    const char *v = trn_ckpt_get(C, key);
    snprintf(dst, cap, "%s", v ? v : "");
    *out = dst[0] ? dst : NULL;
}

/* Resume: options, hyp and model yaml from the checkpoint. */
int run_resume_opts(struct run *R, const struct trn_ckpt *C, char *err, size_t cap)
{
    struct trn_train_opts *o = &R->o;
    int64_t v[6];
    int rc = trn_ckpt_i64(C, "epochs", 1, 1000000, &v[0]);
    if (!rc) rc = trn_ckpt_i64(C, "img", 32, 16383, &v[1]);
    if (!rc) rc = trn_ckpt_i64(C, "batch_size", 1, 65536, &v[2]);
    if (!rc) rc = trn_ckpt_i64(C, "nc", 1, 65536, &v[3]);
    if (!rc) rc = trn_ckpt_i64(C, "seed", 0, INT64_MAX, &v[4]);
    const char *opt = trn_ckpt_get(C, "optimizer"), *cos = trn_ckpt_get(C, "cos_lr");
    if (rc || !opt || !cos) {
        trn_seterr(err, cap, "%s: checkpoint metadata lacks a run setting", o->resume);
        return -TRN_TRAIN_ECKPT;
    }
    o->epochs = (int)v[0];
    o->img = (int)v[1];
    o->batch_size = (int)v[2];
    o->nc = (int)v[3];
    o->seed = (uint64_t)v[4];
    o->optimizer = !strcmp(opt, "Adam")    ? TRN_OPTIM_ADAM
                   : !strcmp(opt, "AdamW") ? TRN_OPTIM_ADAMW
                                           : TRN_OPTIM_SGD;
    o->cos_lr = !strcmp(cos, "true");
    const char *sb = trn_ckpt_get(C, "sync_bn"); /* absent in checkpoints older than the option */
    o->sync_bn = sb && !strcmp(sb, "true");
    const char *sc = trn_ckpt_get(C, "single_cls"); /* absent before the option: false */
    o->single_cls = sc && !strcmp(sc, "true");
    const char *iw = trn_ckpt_get(C, "image_weights"); /* absent before the option: false */
    o->image_weights = iw && !strcmp(iw, "true");
    const char *rt = trn_ckpt_get(C, "rect"), *ms = trn_ckpt_get(C, "multi_scale");
    o->rect = rt && !strcmp(rt, "true");
    o->multi_scale = ms && !strcmp(ms, "true");
    /* the frozen rows, "0 1 2" (absent before the option: none) */
    memset(o->frozen, 0, sizeof o->frozen);
    for (const char *p = trn_ckpt_get(C, "frozen"); p && *p;) {
        char *end;
        const long r = strtol(p, &end, 10);
        if (end == p) break;
        if (r < 0 || r >= TRN_MODEL_MAX_LAYERS) {
            trn_seterr(err, cap, "%s: bad frozen row %ld in the checkpoint metadata", o->resume, r);
            return -TRN_TRAIN_ECKPT;
        }
        o->frozen[r / 64] |= UINT64_C(1) << (r % 64);
        p = end;
    }
    /* absent in checkpoints older than the option: those runs had none */
    o->label_smoothing = 0.0;
    if (trn_ckpt_get(C, "label_smoothing") &&
        (trn_ckpt_f64(C, "label_smoothing", &o->label_smoothing) < 0 ||
         !(o->label_smoothing >= 0.0 && o->label_smoothing < 1.0))) {
        trn_seterr(err, cap, "%s: bad label_smoothing in the checkpoint metadata", o->resume);
        return -TRN_TRAIN_ECKPT;
    }
    /* absent in checkpoints older than AMP: those runs were float32 */
    const char *am = trn_ckpt_get(C, "amp");
    enum trn_amp_dtype adt = TRN_AMP_OFF;
    if (am && trn_amp_dtype_parse(am, &adt) < 0) {
        trn_seterr(err, cap, "%s: bad amp in the checkpoint metadata", o->resume);
        return -TRN_TRAIN_ECKPT;
    }
    o->amp = adt == TRN_AMP_BF16 ? KERN_DT_BF16 : adt == TRN_AMP_FP16 ? KERN_DT_F16 : KERN_DT_F32;
    /* records given with the resume are read instead (their content is checked in setup) */
    if (!o->records)
        copy_meta_str(C, "records", R->job.resume_records, sizeof R->job.resume_records,
                      &o->records);
    if (!o->val_records)
        copy_meta_str(C, "val_records", R->job.resume_val, sizeof R->job.resume_val,
                      &o->val_records);
    if (!o->data) copy_meta_str(C, "data", R->job.resume_data, sizeof R->job.resume_data, &o->data);
    /* absent in checkpoints older than the key: nothing to check against */
    const char *hx = trn_ckpt_get(C, "records_hash"), *vx = trn_ckpt_get(C, "val_records_hash");
    R->data.ckpt_data_hash = hx ? strtoull(hx, NULL, 16) : 0;
    R->data.ckpt_val_hash = vx ? strtoull(vx, NULL, 16) : 0;
    copy_meta_str(C, "cfg", R->job.resume_cfg, sizeof R->job.resume_cfg, &o->cfg);
    copy_meta_str(C, "weights", R->job.resume_weights, sizeof R->job.resume_weights, &o->weights);
    copy_meta_str(C, "hyp", R->job.resume_hyp, sizeof R->job.resume_hyp, &o->hyp_path);
    copy_meta_str(C, "project", R->job.resume_project, sizeof R->job.resume_project, &o->project);
    copy_meta_str(C, "name", R->job.resume_name, sizeof R->job.resume_name, &o->name);
    if (!o->records) {
        trn_seterr(err, cap, "%s: checkpoint names no training records", o->resume);
        return -TRN_TRAIN_ECKPT;
    }
    const struct {
        int rec;
        const char *name;
        char **text;
        size_t *len;
    } texts[3] = { { TRN_CKPT_HYP_YAML, "hyp.yaml", &R->job.hyp_text, &R->job.hyp_len },
                   { TRN_CKPT_MODEL_YAML, "model yaml", &R->job.model_yaml,
                     &R->job.model_yaml_len },
                   { TRN_CKPT_OPT_YAML, "opt.yaml", &R->job.opt_text, &R->job.opt_len } };
    for (int k = 0; k < 3; k++) {
        int trc = 0;
        *texts[k].text = trn_ckpt_text(C, texts[k].rec, texts[k].len, &trc);
        if (trc < 0) {
            trn_seterr(err, cap, "%s: the checkpoint's %s (record %lld) cannot be read: %s",
                       o->resume, texts[k].name, (long long)trn_ckpt_record_index(C, texts[k].rec),
                       ffr_strerror(trc));
            return -TRN_TRAIN_ECKPT;
        }
    }
    char e[512];
    rc = trn_hyp_parse(R->job.hyp_text, R->job.hyp_len, "checkpoint hyp.yaml", NULL, NULL, &o->hyp,
                       e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s: %s", o->resume, e);
        return -TRN_TRAIN_ECKPT;
    }
    return 0;
}

/* Restore weights, EMA, optimizer state, gradients and counters; R is fully set up. */
int run_resume_state(struct run *R, const struct trn_ckpt *C, char *err, size_t cap)
{
    const struct trn_model_info *I = R->nets.info;
    const char *path = R->o.resume;
    int64_t a[3];
    if (trn_ckpt_i64(C, "arena_param", 0, INT64_MAX, &a[0]) ||
        trn_ckpt_i64(C, "arena_buffer", 0, INT64_MAX, &a[1]) ||
        trn_ckpt_i64(C, "arena_count", 0, INT64_MAX, &a[2]) ||
        (size_t)a[0] != I->arena_len[TRN_ARENA_PARAM] ||
        (size_t)a[1] != I->arena_len[TRN_ARENA_BUFFER] ||
        (size_t)a[2] != I->arena_len[TRN_ARENA_COUNT]) {
        trn_seterr(err, cap, "%s: arena sizes do not match the model", path);
        return -TRN_TRAIN_ECKPT;
    }
    const size_t P = I->arena_len[TRN_ARENA_PARAM] * sizeof(float);
    const size_t B = I->arena_len[TRN_ARENA_BUFFER] * sizeof(float);
    size_t l1 = 0;
    float *s1 = trn_optim_state(R->state.opt, 1, &l1);
    int rc = trn_ckpt_read(C, TRN_CKPT_MODEL_PARAM, trn_model_arena(R->nets.m, TRN_ARENA_PARAM), P,
                           err, cap);
    if (!rc)
        rc = trn_ckpt_read(C, TRN_CKPT_MODEL_BUFFER, trn_model_arena(R->nets.m, TRN_ARENA_BUFFER),
                           B, err, cap);
    if (!rc)
        rc = trn_ckpt_read(C, TRN_CKPT_MODEL_COUNT, trn_model_arena(R->nets.m, TRN_ARENA_COUNT),
                           I->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t), err, cap);
    if (!rc && R->state.ema)
        rc = trn_ckpt_read(C, TRN_CKPT_EMA_PARAM, trn_ema_arena(R->state.ema, TRN_ARENA_PARAM), P,
                           err, cap);
    if (!rc && R->state.ema)
        rc = trn_ckpt_read(C, TRN_CKPT_EMA_BUFFER, trn_ema_arena(R->state.ema, TRN_ARENA_BUFFER), B,
                           err, cap);
    if (!rc)
        rc = trn_ckpt_read(C, TRN_CKPT_OPT0, trn_optim_state(R->state.opt, 0, NULL), P, err, cap);
    if (!rc) rc = trn_ckpt_read(C, TRN_CKPT_OPT1, s1, s1 ? l1 * sizeof(float) : 0, err, cap);
    if (!rc) rc = trn_ckpt_read(C, TRN_CKPT_GRAD, grad_arena(R), P, err, cap);
    if (rc) return rc;
    int64_t epoch, step, upd, steps, last;
    struct trn_optim_counters c;
    if (trn_ckpt_i64(C, "epoch", 0, 1000000, &epoch) ||
        trn_ckpt_i64(C, "step", 0, INT64_MAX, &step) ||
        trn_ckpt_i64(C, "ema_updates", 0, INT64_MAX, &upd) ||
        trn_ckpt_i64(C, "optim_steps", 0, INT64_MAX, &steps) ||
        trn_ckpt_i64(C, "last_opt_step", -1, INT64_MAX, &last) ||
        trn_ckpt_f64(C, "best_fitness", &R->state.best_fitness) ||
        trn_ckpt_f64(C, "loss_sum_box", &R->state.msum[0]) ||
        trn_ckpt_f64(C, "loss_sum_obj", &R->state.msum[1]) ||
        trn_ckpt_f64(C, "loss_sum_cls", &R->state.msum[2]) ||
        trn_ckpt_i64(C, "loss_batches", 0, INT64_MAX, &R->state.mcount)) {
        trn_seterr(err, cap, "%s: checkpoint metadata lacks a counter", path);
        return -TRN_TRAIN_ECKPT;
    }
    /* best_epoch came with validation; older checkpoints start EarlyStopping afresh (as
     * ultralytics' resume does) */
    int64_t be = 0;
    if (trn_ckpt_get(C, "best_epoch") && trn_ckpt_i64(C, "best_epoch", 0, 1000000, &be)) {
        trn_seterr(err, cap, "%s: bad best_epoch in the checkpoint metadata", path);
        return -TRN_TRAIN_ECKPT;
    }
    R->state.best_epoch = (int)be;
    /* the loss scaler's state; absent (older checkpoints, or saved by a bf16 / fp32 run): the
     * default state, as a fresh GradScaler */
    if (R->state.amp && trn_ckpt_get(C, "amp_scale")) {
        struct trn_amp_state st = { 0 };
        double sc = 0;
        int64_t tr = 0;
        if (trn_ckpt_f64(C, "amp_scale", &sc) ||
            trn_ckpt_i64(C, "amp_growth_tracker", 0, INT64_MAX, &tr) ||
            (st.scale = (float)sc, st.growth_tracker = tr,
             trn_amp_set_state(R->state.amp, &st) < 0)) {
            trn_seterr(err, cap,
                       "%s: bad amp_scale / amp_growth_tracker in the checkpoint metadata", path);
            return -TRN_TRAIN_ECKPT;
        }
    }
    if (step >= R->state.nb) {
        trn_seterr(err, cap,
                   "%s: saved at batch %" PRId64 " of an epoch of %" PRId64 " (another "
                   "dataset, or a world size whose epochs are shorter?)",
                   path, step, R->state.nb);
        return -TRN_TRAIN_ECKPT;
    }
    c.steps = steps;
    c.last_opt_step = last;
    trn_optim_set_counters(R->state.opt, &c);
    if (R->state.ema) trn_ema_set_updates(R->state.ema, upd);
    R->state.epoch = (int)epoch;
    R->state.step = step;
    return 0;
}

/* --weights: an ultralytics .pt, or one of our checkpoints (its EMA, as strip_optimizer would
 * leave it). */
int run_write_files(struct run *R, char *err, size_t cap)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/hyp.yaml", R->o.run_dir);
    int rc = trn_write_file(p, R->job.hyp_text, R->job.hyp_len, true, err, cap);
    if (rc < 0) return rc;
    snprintf(p, sizeof p, "%s/opt.yaml", R->o.run_dir);
    if ((rc = trn_write_file(p, R->job.opt_text, R->job.opt_len, true, err, cap)) < 0) return rc;
    if (snprintf(R->job.weights_dir, sizeof R->job.weights_dir, "%s/weights", R->o.run_dir) >=
        (int)sizeof R->job.weights_dir) {
        trn_seterr(err, cap, "%s: path too long", R->o.run_dir);
        return -ENAMETOOLONG;
    }
    if (mkdir(R->job.weights_dir, 0777) < 0 && errno != EEXIST) {
        rc = -errno;
        trn_seterr(err, cap, "%s: cannot create: %s", R->job.weights_dir, strerror(-rc));
        return rc;
    }
    /* Find an unusable weights directory now, not after the first epoch's work. */
    snprintf(p, sizeof p, "%s/.write-test.%ld", R->job.weights_dir, (long)getpid());
    const int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        rc = -errno;
        trn_seterr(err, cap, "%s: cannot write checkpoints there: %s", R->job.weights_dir,
                   strerror(-rc));
        return rc;
    }
    close(fd);
    unlink(p);
    return 0;
}

int run_results_append(struct run *R, int epoch, const double mloss[3],
                       const struct trn_train_metrics *mt, char *err, size_t cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/results.csv", R->o.run_dir);
    struct stat st;
    const bool fresh = stat(path, &st) != 0;
    FILE *f = fopen(path, "a");
    if (!f) {
        const int e = errno;
        trn_seterr(err, cap, "%s: %s", path, strerror(e));
        return -e;
    }
    int bad = 0;
    if (fresh) {
        char h[512];
        trn_train_results_header(h, sizeof h);
        bad |= fprintf(f, "%s\n", h) < 0;
    }
    const double v[RESULTS_COLS] = {
        epoch,   mloss[0], mloss[1], mloss[2], mt->precision,  mt->recall,     mt->map50,
        mt->map, mt->box,  mt->obj,  mt->cls,  R->state.lr[0], R->state.lr[1], R->state.lr[2],
    };
    for (int k = 0; k < RESULTS_COLS; k++)
        bad |= fprintf(f, "%s%20.5g", k ? "," : "", v[k]) < 0;
    bad |= fputc('\n', f) == EOF;
    bad |= fflush(f) != 0;
    const int e = errno;
    bad |= fclose(f) != 0;
    if (bad) {
        trn_seterr(err, cap, "%s: write failed: %s", path, strerror(e ? e : EIO));
        return e ? -e : -EIO;
    }
    return 0;
}

int run_save_named(struct run *R, const char *which, char *err, size_t cap)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s.ckpt", R->job.weights_dir, which);
    return ckpt_save(R, p, err, cap);
}

void run_job_free(struct run *R)
{
    for (int i = 0; i < R->job.n_plot_threads; i++)
        pthread_join(R->job.plot_thread[i], NULL);
    R->job.n_plot_threads = 0;
    free(R->job.model_yaml);
    free(R->job.hyp_text);
    free(R->job.opt_text);
}
