/*
 * The training loop and our checkpoint format (train.h has the contract, docs/checkpoint.md the
 * layout). Arenas go to disk as raw little-endian bytes, so a save/load round trip is exact and
 * resume is bit-exact on the same path.
 */
#include "train.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "ffio.h"
#include "ffr.h"
#include "amp.h"
#include "ckpt.h"
#include "cli.h"
#include "kern.h"
#include "kern_cuda.h"
#include "loader.h"
#include "loss.h"
#include "net.h"
#include "plots.h"
#include "ptload.h"
#include "val.h"
#include "util.h"
#include "errors.h"

#define NBS          64 /* nominal batch size (train.py) */
#define RESULTS_COLS 14

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

static const char *const optim_names[] = { "SGD", "Adam", "AdamW" };

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
    o->amp_inf_ni = -1;
}

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

/* ---------------------------------------------------------------------------------------- */
/* Small text helpers                                                                        */

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
 * hyp files. */
static char *hyp_yaml(const struct trn_hyp *h, size_t *len)
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
    for (size_t k = 0; k < sizeof kv / sizeof kv[0]; k++)
        yaml_num(f, kv[k].k, kv[k].v);
    if (h->anchors != 0) yaml_num(f, "anchors", h->anchors);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Write a small file atomically (temporary, fsync, rename), checking every call. */
static int write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t cap)
{
    (void)ffr_remove_stale_tmp(path, 0); /* a killed run's leftovers (ffr.h) */
    char *const tmp = ffr_tmp_path(path);
    if (!tmp) {
        trn_seterr(err, cap, "%s: out of memory", path);
        return -ENOMEM;
    }
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        const int e = errno;
        trn_seterr(err, cap, "%s: cannot create: %s", path, strerror(e));
        free(tmp);
        return -e;
    }
    const char *p = data;
    size_t left = len;
    int rc = 0;
    while (left > 0) {
        const ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            rc = w < 0 ? -errno : -EIO;
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (rc == 0 && fsync(fd) < 0) rc = -errno;
    if (close(fd) < 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0) rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        trn_seterr(err, cap, "%s: write failed: %s", path, strerror(-rc));
    }
    free(tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* The run                                                                                   */

/* The frozen arguments of one captured step (--cuda-graph, docs/design.md "One CUDA graph per
 * training step"): everything graph_step_run reads, set once in graph_setup and never written
 * again, because a CUDA replay re-runs the recorded ops with these pointers and sizes, and a CPU
 * replay calls graph_step_run with them. What changes per step lives in the memory they point
 * to: the batch (the net's input slot), the targets and their count, the kern_sgd_dyn scalars. */
struct graph_step {
    struct trn_net *net;            /* the full batches' net */
    const struct trn_loss_cfg *cfg; /* its loss */
    const struct kern_ops *K;
    struct kern_ctx *ctx;
    const float *input;         /* trn_net_dev_input(net): the batch, uploaded before the run */
    const float *targets;       /* d_targets */
    const int *nt;              /* d_nt: their count */
    float *const *dp;           /* d_dp: the loss's gradients to the outputs */
    float *out;                 /* d_out: the loss floats, read after the run */
    void *scratch;              /* d_scratch */
    size_t scratch_bytes;       /* its size */
    bool step;                  /* false: accumulate only; true: then the optimizer step + EMA */
    struct trn_optim_dev *odev; /* the device SGD plan */
    float *params, *grad;       /* the nets' device PARAM and grad arenas */
    float *ema_param;           /* d_ema[0], or NULL without EMA */
    float *ema_buf;             /* d_ema[1], or NULL without EMA */
    const float *buf;           /* the device BUFFER arena (the BN running stats) */
    size_t n_buf;               /* its floats */
    const struct kern_sgd_dyn *dyn; /* d_dyn: lr, momentum, first, EMA decay of this step */
    const char **phase;             /* host: the phase that failed (error messages only) */
};

/* One slot of the pinned staging the per-step values are uploaded from. */
struct graph_stage {
    struct kern_sgd_dyn dyn; /* the optimizer step's scalars */
    int32_t nt;              /* the batch's target rows */
};

/* Everything a run holds; allocated once in setup. */
struct run {
    struct trn_train_opts o; /* effective options (from the checkpoint when resuming) */
    struct trn_model *m;
    const struct trn_model_info *info;
    char *model_yaml; /* the yaml text the model was built from */
    size_t model_yaml_len;
    char *hyp_text, *opt_text; /* hyp.yaml and opt.yaml as written */
    size_t hyp_len, opt_len;
    char **names; /* class names (may be fewer than nc: then numbered) */
    int n_names;
    struct ffr_reader *data;
    struct trn_loader *loader;
    struct kern_ctx *ctx;
    struct kern_ctx *gpu_ctx;       /* o.gpu >= 0: the CUDA context the nets run on */
    struct trn_net *net, *net_last; /* full batches; the epoch's short last batch (or NULL) */
    struct trn_loss *loss, *loss_last;
    float *dp[TRN_MODEL_MAX_LEVELS], *dp_last[TRN_MODEL_MAX_LEVELS];
    struct trn_optim *opt;
    struct trn_ema *ema;
    int64_t nb;   /* batches per epoch */
    int last_bs;  /* images of the epoch's last batch */
    int epoch;    /* position of the next batch */
    int64_t step; /* batch within the epoch */
    double best_fitness;
    int best_epoch;              /* EarlyStopping's best_epoch: last epoch with fitness >= best */
    struct ffr_reader *val_data; /* built-in validation's dataset, or NULL */
    struct trn_plot_names val_names;
    double msum[3]; /* loss item sums of the epoch in progress */
    int64_t mcount; /* batches in msum */
    double lr[3];   /* lr of the last batch (x/lr0..2) */
    char weights_dir[4000];
    char resume_records[4096], resume_val[4096], resume_cfg[4096]; /* strings when resuming */
    char resume_weights[4096], resume_hyp[4096], resume_project[4096], resume_name[1024];
    struct trn_dist *dist; /* the job's communicator, or NULL for one process */
    int rank, world;       /* this rank and the number of ranks (0 and 1 without dist) */
    int local_bs;          /* images per step on this rank: batch_size / world */
    float *acc;            /* world > 1: gradients summed over ranks since the last optimizer
                              step (PARAM layout); the nets' arenas then hold one batch's only */
    bool bn_sync_failed;   /* a SyncBatchNorm all-reduce failed: err gets trn_dist_error */
    bool overlap;          /* world > 1: the nets hand each row's final gradients to
                              trn_dist_grad_ready during backward (dist.h OVERLAP) */
    bool grad_sync_failed; /* a gradient bucket failed: err gets trn_dist_error */
    /* The resident step (docs/design.md): with the nets on a device (or the device data path)
       and SGD, parameters, gradients, momentum and EMA stay in the nets' backend memory; the
       host copies (model arenas, optimizer state, EMA, grad arena / acc) are refreshed by
       resident_download where the host reads them and uploaded once by resident_upload. */
    bool device_path;           /* trn_train_opts.device_path: trn_net_opts.device_path */
    bool resident;              /* the resident step runs */
    const struct kern_ops *dK;  /* the nets' table */
    struct kern_ctx *dctx;      /* the nets' context */
    struct trn_optim_dev *odev; /* the device SGD plan (momentum buffers in dctx's memory) */
    float *d_ema[2];            /* rank 0: the EMA's PARAM and BUFFER arenas (dctx memory) */
    float *d_acc;               /* world > 1: acc in dctx memory */
    float *d_targets;           /* the batch's target rows (dctx memory) */
    int *d_nt;                  /* their count (one int, dctx memory) */
    float *d_out;               /* the loss op's KERN_YOLO_OUT_N floats (dctx memory) */
    void *d_scratch;            /* the loss op's scratch (dctx memory) */
    size_t scratch_bytes;       /* its size (the larger of the two losses') */
    float *d_dp[TRN_MODEL_MAX_LEVELS], *d_dp_last[TRN_MODEL_MAX_LEVELS]; /* loss gradients */
    /* --cuda-graph: the full batches' resident step as two graphs, run directly once, then
       captured and replayed (train_batch_graph). The short last batch runs train_batch_resident. */
    bool graph;                 /* full batches take train_batch_graph */
    struct graph_step gs[2];    /* frozen arguments: [0] accumulate only, [1] with the step */
    struct kern_graph *g[2];    /* the captured graphs, or NULL */
    int64_t g_direct[2];        /* direct (uncaptured) runs of each kind since setup */
    int64_t g_replays;          /* replays since setup (the capture's own run not counted) */
    int64_t g_direct_all;       /* full batches run directly since setup */
    int64_t g_captures;         /* successful captures since setup */
    size_t g_ws;                /* dctx's workspace size when captured (a change drops them) */
    const char *g_phase;        /* the phase graph_step_run failed in */
    struct kern_sgd_dyn *d_dyn; /* the per-step SGD / EMA scalars (dctx memory) */
    struct ffio_pinned stage;   /* two struct graph_stage slots (pinned with a GPU) */
    int64_t stage_n;            /* slots used so far: slot stage_n & 1 is next */
    struct trn_amp *amp;        /* o.amp == KERN_DT_F16: the loss scaler (train.h AMP), else NULL */
    struct kern_optim_seg *d_seg; /* resident fp16: one segment per loss gradient level, the
                                     main net's then the short batch net's (dctx memory) */
};

static void logline(const struct run *R, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logline(const struct run *R, const char *fmt, ...)
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
        logline(R,
                "cache: record %" PRIu64 " of the cached shard %s fails its checksum: the shard "
                "is evicted from %s and fetched again, every byte verified, by the next run "
                "(this run skips its damaged records)",
                record, path, R->o.cache_dir);
    else
        logline(R, "cache: record %" PRIu64 " of %s fails its checksum; evicting it: %s", record,
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
    logline(R, "loader: %s", msg);
}

static char *opt_yaml(const struct run *R, size_t *len)
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
        { "hyp", o->hyp_path ? o->hyp_path : "" },
    };
    for (size_t k = 0; k < sizeof s / sizeof s[0]; k++) {
        fprintf(f, "%s: ", s[k].k);
        yaml_quote(f, s[k].v);
        fputc('\n', f);
    }
    fprintf(f, "epochs: %d\nbatch_size: %d\nimgsz: %d\n", o->epochs, o->batch_size, o->img);
    fprintf(f, "resume: %s\n", o->resume ? "true" : "false");
    fprintf(f, "device: ");
    yaml_quote(f, o->device ? o->device : "cpu");
    fprintf(f, "\noptimizer: %s\nworkers: %u\nproject: ", optim_names[o->optimizer], o->workers);
    yaml_quote(f, o->project ? o->project : "");
    fprintf(f, "\nname: ");
    yaml_quote(f, o->name ? o->name : "");
    fprintf(
        f, "\ncos_lr: %s\nlabel_smoothing: 0.0\nseed: %" PRIu64 "\nnc: %d\nsync_bn: %s\nsave_dir: ",
        o->cos_lr ? "true" : "false", o->seed, R->info->nc, o->sync_bn ? "true" : "false");
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
    trn_optim_get_counters(R->opt, &c);
    fprintf(f, "format: %s\n", TRN_CKPT_FORMAT);
    fprintf(f, "epoch: %d\nstep: %" PRId64 "\nni: %" PRId64 "\nbatches_per_epoch: %" PRId64 "\n",
            R->epoch, R->step, (int64_t)R->epoch * R->nb + R->step, R->nb);
    fprintf(f, "epochs: %d\nimg: %d\nbatch_size: %d\nseed: %" PRIu64 "\n", o->epochs, o->img,
            o->batch_size, o->seed);
    fprintf(f, "optimizer: %s\ncos_lr: %s\nnc: %d\nsync_bn: %s\n", optim_names[o->optimizer],
            o->cos_lr ? "true" : "false", R->info->nc, o->sync_bn ? "true" : "false");
    fprintf(f, "names:\n");
    for (int k = 0; k < R->n_names; k++) {
        fprintf(f, "  - ");
        yaml_quote(f, R->names[k]);
        fputc('\n', f);
    }
    const struct {
        const char *k, *v;
    } s[] = {
        { "records", o->records },
        { "val_records", o->val_records ? o->val_records : "" },
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
    yaml_num(f, "best_fitness", R->best_fitness);
    fprintf(f, "best_epoch: %d\n", R->best_epoch);
    fprintf(f, "world_size: %d\n", R->world);
    fprintf(f, "ema_updates: %" PRId64 "\noptim_steps: %" PRId64 "\nlast_opt_step: %" PRId64 "\n",
            trn_ema_updates(R->ema), c.steps, c.last_opt_step);
    fprintf(f, "amp: %s\n", amp_name(o->amp));
    if (R->amp) {
        struct trn_amp_state st;
        trn_amp_get_state(R->amp, &st);
        yaml_num(f, "amp_scale", st.scale);
        fprintf(f, "amp_growth_tracker: %" PRId64 "\n", st.growth_tracker);
    }
    yaml_num(f, "loss_sum_box", R->msum[0]);
    yaml_num(f, "loss_sum_obj", R->msum[1]);
    yaml_num(f, "loss_sum_cls", R->msum[2]);
    fprintf(f, "loss_batches: %" PRId64 "\n", R->mcount);
    fprintf(f, "arena_param: %zu\narena_buffer: %zu\narena_count: %zu\nparameters: %" PRId64 "\n",
            R->info->arena_len[TRN_ARENA_PARAM], R->info->arena_len[TRN_ARENA_BUFFER],
            R->info->arena_len[TRN_ARENA_COUNT], R->info->n_params);
    fprintf(f, "records_layout: [");
    for (int k = 0; k < TRN_CKPT_N_RECORDS; k++)
        fprintf(f, "%s%s", k ? ", " : "", trn_ckpt_record_name(k));
    fprintf(f, "]\ntensors:\n");
    static const char *const arena_names[] = { "param", "buffer", "count" };
    for (int t = 0; t < R->info->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(R->m, t);
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
    return R->acc ? R->acc : trn_net_grad(R->net);
}

/* Save the run's state to path (ffr: temporary, fsync, rename). The previous file at path stays
 * intact on any failure. */
static int resident_download(struct run *R, char *err, size_t cap);

static int ckpt_save(struct run *R, const char *path, char *err, size_t cap)
{
    const struct trn_model_info *I = R->info;
    const int drc = resident_download(R, err, cap);
    if (drc < 0) return drc;
    size_t l1 = 0;
    float *s1 = trn_optim_state(R->opt, 1, &l1);
    const struct trn_ckpt_src rec[TRN_CKPT_N_RECORDS] = {
        { trn_model_arena(R->m, TRN_ARENA_PARAM), I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { trn_model_arena(R->m, TRN_ARENA_BUFFER), I->arena_len[TRN_ARENA_BUFFER] * sizeof(float) },
        { trn_model_arena(R->m, TRN_ARENA_COUNT), I->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t) },
        { trn_ema_arena(R->ema, TRN_ARENA_PARAM), I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { trn_ema_arena(R->ema, TRN_ARENA_BUFFER), I->arena_len[TRN_ARENA_BUFFER] * sizeof(float) },
        { trn_optim_state(R->opt, 0, NULL), I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { s1, s1 ? l1 * sizeof(float) : 0 },
        { grad_arena(R), I->arena_len[TRN_ARENA_PARAM] * sizeof(float) },
        { R->model_yaml, R->model_yaml_len },
        { R->hyp_text, R->hyp_len },
        { R->opt_text, R->opt_len },
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
static int resume_opts(struct run *R, const struct trn_ckpt *C, char *err, size_t cap)
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
    /* absent in checkpoints older than AMP: those runs were float32 */
    const char *am = trn_ckpt_get(C, "amp");
    enum trn_amp_dtype adt = TRN_AMP_OFF;
    if (am && trn_amp_dtype_parse(am, &adt) < 0) {
        trn_seterr(err, cap, "%s: bad amp in the checkpoint metadata", o->resume);
        return -TRN_TRAIN_ECKPT;
    }
    o->amp = adt == TRN_AMP_BF16 ? KERN_DT_BF16 : adt == TRN_AMP_FP16 ? KERN_DT_F16 : KERN_DT_F32;
    copy_meta_str(C, "records", R->resume_records, sizeof R->resume_records, &o->records);
    copy_meta_str(C, "val_records", R->resume_val, sizeof R->resume_val, &o->val_records);
    copy_meta_str(C, "cfg", R->resume_cfg, sizeof R->resume_cfg, &o->cfg);
    copy_meta_str(C, "weights", R->resume_weights, sizeof R->resume_weights, &o->weights);
    copy_meta_str(C, "hyp", R->resume_hyp, sizeof R->resume_hyp, &o->hyp_path);
    copy_meta_str(C, "project", R->resume_project, sizeof R->resume_project, &o->project);
    copy_meta_str(C, "name", R->resume_name, sizeof R->resume_name, &o->name);
    if (!o->records) {
        trn_seterr(err, cap, "%s: checkpoint names no training records", o->resume);
        return -TRN_TRAIN_ECKPT;
    }
    const struct {
        int rec;
        const char *name;
        char **text;
        size_t *len;
    } texts[3] = { { TRN_CKPT_HYP_YAML, "hyp.yaml", &R->hyp_text, &R->hyp_len },
                   { TRN_CKPT_MODEL_YAML, "model yaml", &R->model_yaml, &R->model_yaml_len },
                   { TRN_CKPT_OPT_YAML, "opt.yaml", &R->opt_text, &R->opt_len } };
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
    rc = trn_hyp_parse(R->hyp_text, R->hyp_len, "checkpoint hyp.yaml", NULL, NULL, &o->hyp, e,
                       sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s: %s", o->resume, e);
        return -TRN_TRAIN_ECKPT;
    }
    return 0;
}

/* Restore weights, EMA, optimizer state, gradients and counters; R is fully set up. */
static int resume_state(struct run *R, const struct trn_ckpt *C, char *err, size_t cap)
{
    const struct trn_model_info *I = R->info;
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
    float *s1 = trn_optim_state(R->opt, 1, &l1);
    int rc =
        trn_ckpt_read(C, TRN_CKPT_MODEL_PARAM, trn_model_arena(R->m, TRN_ARENA_PARAM), P, err, cap);
    if (!rc)
        rc = trn_ckpt_read(C, TRN_CKPT_MODEL_BUFFER, trn_model_arena(R->m, TRN_ARENA_BUFFER), B,
                           err, cap);
    if (!rc)
        rc = trn_ckpt_read(C, TRN_CKPT_MODEL_COUNT, trn_model_arena(R->m, TRN_ARENA_COUNT),
                           I->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t), err, cap);
    if (!rc && R->ema)
        rc = trn_ckpt_read(C, TRN_CKPT_EMA_PARAM, trn_ema_arena(R->ema, TRN_ARENA_PARAM), P, err,
                           cap);
    if (!rc && R->ema)
        rc = trn_ckpt_read(C, TRN_CKPT_EMA_BUFFER, trn_ema_arena(R->ema, TRN_ARENA_BUFFER), B, err,
                           cap);
    if (!rc) rc = trn_ckpt_read(C, TRN_CKPT_OPT0, trn_optim_state(R->opt, 0, NULL), P, err, cap);
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
        trn_ckpt_f64(C, "best_fitness", &R->best_fitness) ||
        trn_ckpt_f64(C, "loss_sum_box", &R->msum[0]) ||
        trn_ckpt_f64(C, "loss_sum_obj", &R->msum[1]) ||
        trn_ckpt_f64(C, "loss_sum_cls", &R->msum[2]) ||
        trn_ckpt_i64(C, "loss_batches", 0, INT64_MAX, &R->mcount)) {
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
    R->best_epoch = (int)be;
    /* the loss scaler's state; absent (older checkpoints, or saved by a bf16 / fp32 run): the
     * default state, as a fresh GradScaler */
    if (R->amp && trn_ckpt_get(C, "amp_scale")) {
        struct trn_amp_state st = { 0 };
        double sc = 0;
        int64_t tr = 0;
        if (trn_ckpt_f64(C, "amp_scale", &sc) ||
            trn_ckpt_i64(C, "amp_growth_tracker", 0, INT64_MAX, &tr) ||
            (st.scale = (float)sc, st.growth_tracker = tr, trn_amp_set_state(R->amp, &st) < 0)) {
            trn_seterr(err, cap,
                       "%s: bad amp_scale / amp_growth_tracker in the checkpoint metadata", path);
            return -TRN_TRAIN_ECKPT;
        }
    }
    if (step >= R->nb) {
        trn_seterr(err, cap,
                   "%s: saved at batch %" PRId64 " of an epoch of %" PRId64 " (another "
                   "dataset, or a world size whose epochs are shorter?)",
                   path, step, R->nb);
        return -TRN_TRAIN_ECKPT;
    }
    c.steps = steps;
    c.last_opt_step = last;
    trn_optim_set_counters(R->opt, &c);
    if (R->ema) trn_ema_set_updates(R->ema, upd);
    R->epoch = (int)epoch;
    R->step = step;
    return 0;
}

/* --weights: an ultralytics .pt, or one of our checkpoints (its EMA, as strip_optimizer would
 * leave it). */
static int load_weights(struct run *R, const char *path, char *err, size_t cap)
{
    unsigned char magic[4] = { 0 };
    FILE *f = fopen(path, "rb");
    if (!f) {
        const int e = errno;
        trn_seterr(err, cap, "--weights %s: %s", path, strerror(e));
        return -e;
    }
    const size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && magic[0] == 'P' && magic[1] == 'K') {
        char e[512] = "";
        const int rc = trn_pt_load_into_model(path, NULL, R->m, e, sizeof e);
        if (rc < 0) trn_seterr(err, cap, "--weights %s: %s", path, e[0] ? e : trn_strerror(rc));
        return rc;
    }
    struct trn_ckpt *C = NULL;
    int rc = trn_ckpt_open(path, &C, err, cap);
    if (rc < 0) return rc;
    rc = trn_ckpt_load_ema(C, R->m, true, err, cap);
    trn_ckpt_close(C);
    return rc;
}

/* Class names and count from the dataset metadata (pack writes nc and names). */
static int dataset_names(struct run *R)
{
    size_t mlen = 0;
    const char *mt = ffr_reader_metadata(R->data, &mlen);
    struct trn_plot_names pn;
    const int rc = trn_plot_names_parse(mt, mlen, &pn);
    if (rc < 0) return rc;
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

/* Most label rows of one record, from the index summaries (no record reads). */
static int64_t max_labels(const struct ffr_reader *r)
{
    int64_t most = 0;
    const uint64_t n = ffr_reader_count(r);
    for (uint64_t i = 0; i < n; i++) {
        struct ffr_record_info ri;
        struct ffr_det_summary s;
        if (ffr_reader_info(r, i, &ri) < 0 ||
            ffr_det_summary_decode(ri.summary, ri.summary_len, &s) < 0)
            continue;
        if ((int64_t)s.n_labels > most) most = s.n_labels;
    }
    return most;
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

static int make_net_loss(struct run *R, int bs, struct trn_net **net, struct trn_loss **loss,
                         float **dp, int64_t max_t, char *err, size_t cap)
{
    struct trn_net_opts no;
    trn_net_opts_default(&no);
    no.ctx = R->gpu_ctx ? R->gpu_ctx : R->ctx;
    no.device_path = R->device_path;
    no.amp = R->o.amp;
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
    int rc = trn_net_create(R->m, bs, R->o.img, R->o.img, &no, net, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "network at batch %d, %dx%d: %s", bs, R->o.img, R->o.img,
                   e[0] ? e : trn_strerror(rc));
        return rc;
    }
    struct trn_loss_cfg lc;
    if (max_t > INT32_MAX / 64) max_t = INT32_MAX / 64;
    rc = trn_loss_cfg_from_model(R->m, &R->o.hyp, bs, R->o.img, 0.0f, (int)max_t, &lc);
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

static void run_free(struct run *R)
{
    kern_graph_destroy(R->g[0]); /* before the nets and the context they record */
    kern_graph_destroy(R->g[1]);
    if (R->dctx) kern_mem_free(R->dctx, R->d_dyn);
    ffio_pinned_free(&R->stage);
    trn_loader_destroy(R->loader);
    ffr_reader_close(R->data);
    ffr_reader_close(R->val_data);
    trn_plot_names_free(&R->val_names);
    trn_net_destroy(R->net);
    trn_net_destroy(R->net_last);
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
    trn_model_destroy(R->m);
    for (int k = 0; k < R->n_names; k++)
        free(R->names[k]);
    free(R->names);
    free(R->model_yaml);
    free(R->hyp_text);
    free(R->opt_text);
    free(R);
}

static int setup(struct run *R, struct trn_ckpt **C, char *err, size_t cap)
{
    struct trn_train_opts *o = &R->o;
    int rc;
    char e[768] = "";
    if (o->resume) {
        if ((rc = trn_ckpt_open(o->resume, C, err, cap)) < 0) return rc;
        if ((rc = resume_opts(R, *C, err, cap)) < 0) return rc;
    }
    if ((rc = trn_hyp_check(&o->hyp, e, sizeof e)) < 0) {
        trn_seterr(err, cap, "hyp: %s", e);
        return rc;
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
    if ((rc = dataset_names(R)) < 0) {
        trn_seterr(err, cap, "out of memory");
        return rc;
    }
    if (!o->resume) {
        rc = trn_read_file(o->cfg, TRN_CKPT_MAX_TEXT, &R->model_yaml, &R->model_yaml_len, e,
                           sizeof e);
        if (rc < 0) return trn_fail(err, cap, rc, "cannot read the model yaml: %s", e);
    }
    struct trn_model_opts mo;
    trn_model_opts_default(&mo);
    mo.nc = o->nc > 0 ? o->nc : R->n_names;
    rc = trn_model_parse(R->model_yaml, R->model_yaml_len, o->cfg ? o->cfg : "model.yaml", &mo,
                         &R->m, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s", e[0] ? e : trn_strerror(rc));
        return rc;
    }
    R->info = trn_model_info(R->m);
    if (R->n_names > 0 && R->n_names != R->info->nc)
        logline(R, "WARNING: the dataset names %d classes, the model has nc=%d", R->n_names,
                R->info->nc);
    /* also when resuming: it sets the anchors, which the loss reads at creation (the
     * checkpoint's weights are copied over it afterwards) */
    trn_model_init(R->m, o->seed);
    if (!o->resume) {
        if (o->weights && (rc = load_weights(R, o->weights, err, cap)) < 0) return rc;
    }

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
    lo.batch_size = R->local_bs;
    lo.world_size = (uint32_t)R->world;
    lo.rank = (uint32_t)R->rank;
    lo.workers = o->workers;
    lo.seed = o->seed;
    lo.pixels = TRN_PIXELS_F32;
    lo.hyp = o->hyp;
    lo.log = loader_log;
    lo.log_ctx = R;
    if (o->cache_dir) {
        lo.damaged = loader_damaged;
        lo.damaged_ctx = R;
    }
    /* The resident step builds its batches on the device (GPU augmentation): the workers decode
       tiles, the device pastes, warps and colours them into the batch tensor. Same bytes as the
       host path; the host step (Adam, AdamW) reads host images, so it keeps the host path. */
    if ((R->gpu_ctx || R->device_path) && o->optimizer == TRN_OPTIM_SGD && !o->host_aug) {
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
    logline(R, "%s", trn_cli_compute_line(line, sizeof line, o->threads, li.workers));
    if (R->gpu_ctx && li.pinned_kind != FFIO_PINNED_CUDA)
        logline(R,
                "WARNING: the loader's buffers are not CUDA-pinned (%s; they are %s): every "
                "upload is a staged synchronous copy and loading will not overlap the step",
                ffio_pinned_cuda_status()[0] ? ffio_pinned_cuda_status() : "cudaHostAlloc failed",
                ffio_pinned_kind_name(li.pinned_kind));
    R->nb = (int64_t)li.steps;
    R->last_bs = (int)(li.rank_samples - (li.steps - 1) * (uint64_t)R->local_bs);

    /* A mosaic holds 4 records' labels, a mixup 8; clipping only removes rows. */
    const int64_t per = max_labels(R->data) * (o->hyp.mixup > 0 ? 8 : 4) + 8;
    rc = make_net_loss(R, R->local_bs, &R->net, &R->loss, R->dp, per * R->local_bs, err, cap);
    if (rc == 0 && R->last_bs != R->local_bs)
        rc = make_net_loss(R, R->last_bs, &R->net_last, &R->loss_last, R->dp_last, per * R->last_bs,
                           err, cap);
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
    /* only rank 0 keeps the EMA (it alone validates and saves) */
    if ((rc = trn_optim_create(R->m, &oo, &R->opt)) < 0 ||
        (R->rank == 0 && (rc = trn_ema_create(R->m, &R->ema)) < 0)) {
        trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    if (o->resume) {
        if ((rc = resume_state(R, *C, err, cap)) < 0) return rc;
    } else {
        R->hyp_text = hyp_yaml(&o->hyp, &R->hyp_len);
        R->opt_text = opt_yaml(R, &R->opt_len);
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

static int write_run_files(struct run *R, char *err, size_t cap)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/hyp.yaml", R->o.run_dir);
    int rc = write_file_atomic(p, R->hyp_text, R->hyp_len, err, cap);
    if (rc < 0) return rc;
    snprintf(p, sizeof p, "%s/opt.yaml", R->o.run_dir);
    if ((rc = write_file_atomic(p, R->opt_text, R->opt_len, err, cap)) < 0) return rc;
    if (snprintf(R->weights_dir, sizeof R->weights_dir, "%s/weights", R->o.run_dir) >=
        (int)sizeof R->weights_dir) {
        trn_seterr(err, cap, "%s: path too long", R->o.run_dir);
        return -ENAMETOOLONG;
    }
    if (mkdir(R->weights_dir, 0777) < 0 && errno != EEXIST) {
        rc = -errno;
        trn_seterr(err, cap, "%s: cannot create: %s", R->weights_dir, strerror(-rc));
        return rc;
    }
    /* Find an unusable weights directory now, not after the first epoch's work. */
    snprintf(p, sizeof p, "%s/.write-test.%ld", R->weights_dir, (long)getpid());
    const int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        rc = -errno;
        trn_seterr(err, cap, "%s: cannot write checkpoints there: %s", R->weights_dir,
                   strerror(-rc));
        return rc;
    }
    close(fd);
    unlink(p);
    return 0;
}

static int results_append(struct run *R, int epoch, const double mloss[3],
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
        epoch,   mloss[0], mloss[1], mloss[2], mt->precision, mt->recall, mt->map50,
        mt->map, mt->box,  mt->obj,  mt->cls,  R->lr[0],      R->lr[1],   R->lr[2],
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

static int save_named(struct run *R, const char *which, char *err, size_t cap)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s.ckpt", R->weights_dir, which);
    return ckpt_save(R, p, err, cap);
}

/* The loader's batch has the shape the nets were built for. */
static int check_batch(const struct run *R, const struct trn_batch *b, const struct trn_net *net,
                       bool short_batch, char *err, size_t cap)
{
    if (!net || (short_batch && b->n != R->last_bs) || b->height != R->o.img ||
        b->width != R->o.img || b->pixels != TRN_PIXELS_F32) {
        trn_seterr(err, cap, "loader gave a %d x %dx%d batch; expected %d x %dx%d", b->n, b->height,
                   b->width, R->local_bs, R->o.img, R->o.img);
        return -EINVAL;
    }
    return 0;
}

/* The batch's targets fit the loss's fixed target buffers. */
static int targets_fit(const struct trn_loss_cfg *cfg, const struct trn_batch *b, char *err,
                       size_t cap)
{
    if (b->n_targets <= (size_t)cfg->max_targets) return 0;
    trn_seterr(err, cap, "loss at epoch %u batch %" PRIu64 ": %s", b->epoch, b->step,
               trn_loss_strerror(-E2BIG));
    return -E2BIG;
}

/* The device step's loss floats (raw, read back after rc, the result of the step so far) into
 * items, with the finite check. */
static int loss_from_device(int rc, const float *raw, const struct trn_batch *b,
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
static int pass_failed(const struct run *R, const struct trn_batch *b, int rc, const char *pass,
                       char *err, size_t cap)
{
    if (R->bn_sync_failed)
        trn_seterr(err, cap, "SyncBatchNorm all-reduce in the %s at epoch %u batch %" PRIu64 ": %s",
                   pass, b->epoch, b->step, trn_dist_error(R->dist));
    else
        trn_seterr(err, cap, "%s: %s", pass, trn_strerror(rc));
    return rc;
}

/*
 * The backward of a training batch (on the device arenas when dev), with the gradient buckets
 * all-reduced while it runs when R->overlap. The net's arena is zero before its backward, so the
 * buckets sum this batch's gradients alone, as the whole-arena all-reduce does; no bucket is in
 * flight when this returns, error or not.
 */
static int backward(struct run *R, struct trn_net *net, float *const *dp, bool dev,
                    const struct trn_batch *b, char *err, size_t cap)
{
    int rc;
    if (R->overlap &&
        (rc = trn_dist_grad_begin(R->dist, R->info->arena_len[TRN_ARENA_PARAM])) < 0) {
        trn_seterr(err, cap, "gradient all-reduce: cannot start (%s)", trn_dist_strerror(rc));
        return rc;
    }
    rc = dev ? trn_net_backward_dev(net, (const float *const *)dp)
             : trn_net_backward(net, (const float *const *)dp);
    const int wrc = R->overlap ? trn_dist_grad_wait(R->dist) : 0;
    if (rc >= 0 && wrc >= 0) return 0;
    if (R->grad_sync_failed || (rc >= 0 && wrc < 0)) {
        trn_seterr(err, cap, "gradient all-reduce at epoch %u batch %" PRIu64 ": %s", b->epoch,
                   b->step, trn_dist_error(R->dist));
        return rc < 0 ? rc : wrc;
    }
    return pass_failed(R, b, rc, "backward", err, cap);
}

/* fp16 (train.h AMP): the loss gradient seed times the scale, on the host (dp) or, for the
 * resident step, in the nets' memory through kern amp_unscale over segs (one per level). The
 * test hook opts.amp_inf_ni puts an Inf into batch ni's seed. */
static int amp_scale_seed(struct run *R, struct trn_net *net, float *const *dp, bool dev,
                          const struct kern_optim_seg *segs, int64_t ni)
{
    if (!R->amp) return 0;
    const float scale = trn_amp_scale(R->amp);
    for (int l = 0; l < R->info->nl; l++) {
        const size_t n = (size_t)trn_net_output_shape(net, l, NULL);
        int rc = 0;
        if (!dev) {
            for (size_t i = 0; i < n; i++)
                dp[l][i] *= scale;
        } else {
            rc = R->dK->amp_unscale(R->dctx, dp[l], segs + l, 1, n, scale,
                                    trn_optim_dev_buffer(R->odev, 2));
        }
        if (rc < 0) return rc;
    }
    if (ni != R->o.amp_inf_ni) return 0;
    float inf = INFINITY;
    if (!dev) {
        dp[0][0] = inf;
        return 0;
    }
    return kern_mem_copy(R->dctx, dp[0], &inf, sizeof inf, KERN_COPY_H2D);
}

/* After an fp16 optimizer step (taken or skipped): the scaler's update, and a log line for a
 * skipped one. */
static void amp_after_step(struct run *R, bool found_inf, const struct trn_batch *b)
{
    trn_amp_update(R->amp, found_inf);
    if (found_inf)
        logline(R,
                "fp16 loss scaler: Inf/NaN gradients at epoch %u batch %" PRIu64
                ": optimizer step skipped, scale now %g",
                b->epoch, b->step, (double)trn_amp_scale(R->amp));
}

/* trn_optim_after_batch under the fp16 loss scaler (GradScaler.unscale_, clip, step, update):
 * on a step, the gradients are multiplied by 1 / scale and checked; with an Inf or NaN the
 * parameters and momentum stay, the gradients are zeroed and the step is counted as taken for
 * the accumulation (last_opt_step), as scaler.step with optimizer.zero_grad after it. */
static int amp_host_step(struct run *R, float *params, float *grad, const struct trn_batch *b,
                         int64_t ni, struct trn_optim_report *rep)
{
    struct trn_optim_counters c;
    int rc = trn_optim_schedule(trn_optim_get_opts(R->opt), (int)b->epoch, ni, &rep->sched);
    if (rc == 0) rc = trn_optim_get_counters(R->opt, &c);
    if (rc < 0) return rc;
    rep->stepped = false;
    if (ni - c.last_opt_step < rep->sched.accumulate) return 0;
    const float inv = trn_amp_inv_scale(R->amp);
    const size_t n = R->info->arena_len[TRN_ARENA_PARAM];
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        grad[i] *= inv;
        if (!isfinite(grad[i])) found = true;
    }
    if (!found) {
        rc = trn_optim_after_batch(R->opt, params, grad, (int)b->epoch, ni, rep);
        if (rc < 0) return rc;
    } else {
        memset(grad, 0, n * sizeof(float));
        c.last_opt_step = ni;
        trn_optim_set_counters(R->opt, &c);
        rep->stepped = true;
        rep->grad_norm = NAN;
        rep->clipped = false;
    }
    amp_after_step(R, found, b);
    return 1;
}

/* One batch: forward, loss, backward, optimizer policy, EMA. */
static int train_batch(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                       char *err, size_t cap)
{
    const bool short_batch = b->n != R->local_bs;
    struct trn_net *net = short_batch ? R->net_last : R->net;
    struct trn_loss *loss = short_batch ? R->loss_last : R->loss;
    float *const *dp = short_batch ? R->dp_last : R->dp;
    int rc = check_batch(R, b, net, short_batch, err, cap);
    if (rc < 0) return rc;
    const float *out[TRN_MODEL_MAX_LEVELS];
    rc = trn_net_forward(net, b->images, true, out);
    if (rc < 0) return pass_failed(R, b, rc, "forward", err, cap);
    if (b->n_targets > (size_t)INT32_MAX) return -E2BIG;
    rc = trn_loss_compute(loss, R->ctx, out, b->targets, (int)b->n_targets, dp, items);
    if (rc < 0) {
        trn_seterr(err, cap, "loss at epoch %u batch %" PRIu64 ": %s", b->epoch, b->step,
                   trn_loss_strerror(rc));
        return rc;
    }
    if (!isfinite(items->total)) {
        trn_seterr(err, cap, "loss is not finite at epoch %u batch %" PRIu64, b->epoch, b->step);
        return -ERANGE;
    }
    const size_t n_grad = R->info->arena_len[TRN_ARENA_PARAM];
    amp_scale_seed(R, net, dp, false, NULL, (int64_t)b->epoch * R->nb + (int64_t)b->step);
    if ((rc = backward(R, net, dp, false, b, err, cap)) < 0) return rc;
    float *grad = trn_net_grad(R->net);
    if (R->world > 1) {
        /* this batch's gradients (the net's arena was zero before its backward), summed over the
         * ranks, then added to the accumulation since the last optimizer step */
        float *bg = trn_net_grad(net);
        const size_t n = n_grad;
        if (!R->overlap && (rc = trn_dist_allreduce_f32(R->dist, bg, n)) < 0) {
            trn_seterr(err, cap, "gradient all-reduce at epoch %u batch %" PRIu64 ": %s", b->epoch,
                       b->step, trn_dist_error(R->dist));
            return rc;
        }
        for (size_t i = 0; i < n; i++)
            R->acc[i] += bg[i];
        trn_net_zero_grad(net);
        grad = R->acc;
    } else if (short_batch) {
        /* the accumulated gradients live in the main net's arena */
        float *g2 = trn_net_grad(R->net_last);
        const size_t n = R->info->arena_len[TRN_ARENA_PARAM];
        for (size_t i = 0; i < n; i++)
            grad[i] += g2[i];
        trn_net_zero_grad(R->net_last);
    }
    const int64_t ni = (int64_t)b->epoch * R->nb + (int64_t)b->step;
    struct trn_optim_report rep;
    float *params = trn_model_arena(R->m, TRN_ARENA_PARAM);
    rc = R->amp ? amp_host_step(R, params, grad, b, ni, &rep)
                : trn_optim_after_batch(R->opt, params, grad, (int)b->epoch, ni, &rep);
    if (rc < 0) {
        trn_seterr(err, cap, "optimizer: %s", trn_optim_strerror(rc));
        return rc;
    }
    for (int g = 0; g < 3; g++)
        R->lr[g] = rep.sched.lr[g];
    /* a device net's backward adds into its backend arena and then copies the whole arena to the
     * host mirror: the step's zeroing of the mirror, and the short batch's sum added to it above,
     * must reach the backend arena too, or the next backward brings stale gradients back */
    if (R->world == 1 && (R->gpu_ctx || R->device_path)) {
        if (rep.stepped)
            trn_net_zero_grad(R->net);
        else if (short_batch && (rc = trn_net_sync_grad(R->net, KERN_COPY_H2D)) < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", trn_strerror(rc));
            return rc;
        }
    }
    if (rep.stepped && R->ema &&
        (rc = trn_ema_update(R->ema, params, trn_model_arena(R->m, TRN_ARENA_BUFFER))) < 0) {
        trn_seterr(err, cap, "EMA: %s", trn_optim_strerror(rc));
        return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The resident step                                                                        */

/* One copy between host memory and the nets' backend memory (dir KERN_COPY_H2D or _D2H). */
static int dcopy(struct run *R, void *dev, void *host, size_t bytes, int dir)
{
    if (!bytes) return 0;
    return dir == KERN_COPY_H2D ? kern_mem_copy(R->dctx, dev, host, bytes, dir)
                                : kern_mem_copy(R->dctx, host, dev, bytes, dir);
}

/* The host copies <-> the backend's: model arenas, momentum, EMA and the gradients accumulated
 * since the last optimizer step (the main net's arena, or acc with several ranks). */
static int resident_sync(struct run *R, int dir)
{
    const struct trn_model_info *I = R->info;
    const size_t P = I->arena_len[TRN_ARENA_PARAM] * sizeof(float);
    const size_t B = I->arena_len[TRN_ARENA_BUFFER] * sizeof(float);
    int rc = trn_net_sync_model(R->net, dir);
    if (!rc)
        rc = dcopy(R, trn_optim_dev_buffer(R->odev, 0), trn_optim_state(R->opt, 0, NULL), P, dir);
    if (!rc && R->ema) rc = dcopy(R, R->d_ema[0], trn_ema_arena(R->ema, TRN_ARENA_PARAM), P, dir);
    if (!rc && R->ema) rc = dcopy(R, R->d_ema[1], trn_ema_arena(R->ema, TRN_ARENA_BUFFER), B, dir);
    if (!rc)
        rc = R->world > 1 ? dcopy(R, R->d_acc, R->acc, P, dir) : trn_net_sync_grad(R->net, dir);
    return rc;
}

static int resident_download(struct run *R, char *err, size_t cap)
{
    if (!R->resident) return 0;
    const int rc = resident_sync(R, KERN_COPY_D2H);
    if (rc < 0)
        trn_seterr(err, cap, "copying the training state from the device: %s", kern_strerror(rc));
    return rc;
}

/* Plan the resident step once the host state is final (after resume and dist_start): the device
 * optimizer, the EMA and loss buffers, then one upload of everything. SGD only: Adam and AdamW
 * have no device op and keep the host step (parameters up, gradients down every step). */
static int resident_setup(struct run *R, char *err, size_t cap)
{
    if (!R->gpu_ctx && !R->device_path) return 0;
    if (R->o.optimizer != TRN_OPTIM_SGD) {
        logline(R,
                "%s has no device step: the optimizer and EMA run on the host (parameters go "
                "up and gradients come down every batch)",
                optim_names[R->o.optimizer]);
        return 0;
    }
    R->dK = trn_net_kern_ops(R->net);
    R->dctx = trn_net_kern_ctx(R->net);
    const struct trn_model_info *I = R->info;
    const size_t P = I->arena_len[TRN_ARENA_PARAM], B = I->arena_len[TRN_ARENA_BUFFER];
    int rc = trn_optim_dev_create(R->opt, R->dK, R->dctx, &R->odev);
    /* every device step rewrites the nets' AMP weights too (the short net shares them), so that
     * they stay current without a cast per forward (net.h AMP WEIGHTS) */
    int ldt = 0;
    void *const lowp = trn_net_dev_params_lowp(R->net, &ldt);
    if (rc == 0) rc = trn_optim_dev_set_params_lowp(R->odev, lowp, ldt);
    const struct trn_loss *const losses[2] = { R->loss, R->loss_last };
    int max_t = 1;
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (!losses[k]) continue;
        size_t b = 0;
        rc = trn_loss_dev_scratch_bytes(trn_loss_get_cfg(losses[k]), R->dK, R->dctx, &b);
        if (b > R->scratch_bytes) R->scratch_bytes = b;
        if (trn_loss_get_cfg(losses[k])->max_targets > max_t)
            max_t = trn_loss_get_cfg(losses[k])->max_targets;
    }
    if (rc == 0 && R->ema) rc = kern_mem_alloc(R->dctx, P * sizeof(float), (void **)&R->d_ema[0]);
    if (rc == 0 && R->ema) rc = kern_mem_alloc(R->dctx, B * sizeof(float), (void **)&R->d_ema[1]);
    if (rc == 0 && R->world > 1)
        rc = kern_mem_alloc(R->dctx, P * sizeof(float), (void **)&R->d_acc);
    if (rc == 0)
        rc = kern_mem_alloc(R->dctx, (size_t)max_t * 6 * sizeof(float), (void **)&R->d_targets);
    if (rc == 0) rc = kern_mem_alloc(R->dctx, sizeof(int), (void **)&R->d_nt);
    if (rc == 0) rc = kern_mem_alloc(R->dctx, KERN_YOLO_OUT_N * sizeof(float), (void **)&R->d_out);
    if (rc == 0 && R->amp) {
        struct kern_optim_seg segs[2 * TRN_MODEL_MAX_LEVELS];
        memset(segs, 0, sizeof segs);
        for (int l = 0; l < I->nl; l++) {
            segs[l].count = (size_t)trn_net_output_shape(R->net, l, NULL);
            segs[I->nl + l].count =
                (size_t)trn_net_output_shape(R->net_last ? R->net_last : R->net, l, NULL);
        }
        const size_t sb = 2 * (size_t)I->nl * sizeof *segs;
        rc = kern_mem_alloc(R->dctx, sb, (void **)&R->d_seg);
        if (rc == 0) rc = kern_mem_copy(R->dctx, R->d_seg, segs, sb, KERN_COPY_H2D);
    }
    if (rc == 0 && R->scratch_bytes) rc = kern_mem_alloc(R->dctx, R->scratch_bytes, &R->d_scratch);
    for (int l = 0; l < I->nl && rc == 0; l++) {
        rc = kern_mem_alloc(R->dctx, (size_t)trn_net_output_shape(R->net, l, NULL) * sizeof(float),
                            (void **)&R->d_dp[l]);
        if (rc == 0 && R->net_last)
            rc = kern_mem_alloc(R->dctx,
                                (size_t)trn_net_output_shape(R->net_last, l, NULL) * sizeof(float),
                                (void **)&R->d_dp_last[l]);
    }
    if (rc == 0) rc = trn_net_set_resident(R->net, true);
    if (rc == 0 && R->net_last) rc = trn_net_set_resident(R->net_last, true);
    if (rc < 0) {
        trn_seterr(err, cap, "the device training step: %s",
                   rc == -ENOTSUP || rc == -ENOMEM ? trn_optim_strerror(rc) : kern_strerror(rc));
        return rc;
    }
    R->resident = true;
    if ((rc = resident_sync(R, KERN_COPY_H2D)) < 0) {
        trn_seterr(err, cap, "copying the training state to the device: %s", kern_strerror(rc));
        return rc;
    }
    logline(R, "resident step: parameters, gradients, momentum%s and the loss stay in %s memory",
            R->ema ? ", EMA" : "", R->gpu_ctx ? "device" : "backend (device data path)");
    if (!R->o.host_aug)
        logline(R, "GPU augmentation: tiles go up once per batch, mosaic, affine, HSV, flips and "
                   "mixup run in kernels writing the batch tensor (--host-aug: on the host)");
    return 0;
}

/* One batch as train_batch, every tensor in the nets' backend memory: forward, the device loss,
 * backward into the device grad arena, the fused clip + SGD + EMA, the buffers' EMA, zero grad.
 * The host sees the 8 loss floats only (and, with several ranks over TCP or MPI, each batch's
 * gradients on their way through the all-reduce). */
static int train_batch_resident(struct run *R, const struct trn_batch *b,
                                struct trn_loss_items *items, char *err, size_t cap)
{
    const bool short_batch = b->n != R->local_bs;
    struct trn_net *net = short_batch ? R->net_last : R->net;
    const struct trn_loss *loss = short_batch ? R->loss_last : R->loss;
    float *const *dp = short_batch ? R->d_dp_last : R->d_dp;
    int rc = check_batch(R, b, net, short_batch, err, cap);
    if (rc < 0) return rc;
    const struct kern_ops *const K = R->dK;
    const float *out[TRN_MODEL_MAX_LEVELS];
    /* a batch the loader built on this context needs no upload */
    const bool on_dev = b->device_images != NULL;
    rc = trn_net_forward_dev(net, on_dev ? (const float *)b->device_images : b->images, on_dev,
                             true, out);
    if (rc < 0) return pass_failed(R, b, rc, "forward", err, cap);
    const struct trn_loss_cfg *cfg = trn_loss_get_cfg(loss);
    if ((rc = targets_fit(cfg, b, err, cap)) < 0) return rc;
    const int nt = (int)b->n_targets;
    float raw[KERN_YOLO_OUT_N];
    rc = dcopy(R, R->d_targets, (void *)b->targets, (size_t)nt * 6 * sizeof(float), KERN_COPY_H2D);
    if (!rc) rc = dcopy(R, R->d_nt, (void *)&nt, sizeof nt, KERN_COPY_H2D);
    if (!rc)
        rc = trn_loss_compute_dev(cfg, K, R->dctx, out, R->d_targets, R->d_nt, dp, 0, R->d_out,
                                  R->d_scratch, R->scratch_bytes);
    /* the one read-back of the step: what the log and the finite check need */
    if (!rc) rc = dcopy(R, R->d_out, raw, sizeof raw, KERN_COPY_D2H);
    if (!rc)
        rc = amp_scale_seed(R, net, dp, true,
                            R->d_seg ? R->d_seg + (short_batch ? R->info->nl : 0) : NULL,
                            (int64_t)b->epoch * R->nb + (int64_t)b->step);
    if ((rc = loss_from_device(rc, raw, b, items, err, cap)) < 0) return rc;
    const size_t n_grad = R->info->arena_len[TRN_ARENA_PARAM];
    if ((rc = backward(R, net, dp, true, b, err, cap)) < 0) return rc;
    float *grad = trn_net_dev_grad(R->net);
    if (R->world > 1) {
        /* as train_batch: this batch's gradients summed over the ranks, added to acc. NCCL sums
         * the device arena in place; TCP and MPI sum the host mirror (the hook's row copies, or
         * one whole download here), which then goes back up before the add. */
        float *bg = trn_net_dev_grad(net);
        const bool nccl = trn_dist_backend(R->dist) == TRN_DIST_NCCL;
        if (!R->overlap && nccl) {
            rc = trn_dist_allreduce_f32(R->dist, bg, n_grad);
        } else if (!R->overlap) {
            rc = trn_net_sync_grad(net, KERN_COPY_D2H);
            if (rc == 0) rc = trn_dist_allreduce_f32(R->dist, trn_net_grad(net), n_grad);
        }
        if (rc < 0) {
            trn_seterr(err, cap, "gradient all-reduce at epoch %u batch %" PRIu64 ": %s", b->epoch,
                       b->step, trn_dist_error(R->dist));
            return rc;
        }
        if (!nccl) rc = trn_net_sync_grad(net, KERN_COPY_H2D);
        if (rc == 0) rc = K->add_bwd(R->dctx, R->d_acc, bg, n_grad, KERN_ACCUM_DX);
        if (rc < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", kern_strerror(rc));
            return rc;
        }
        trn_net_zero_grad(net);
        grad = R->d_acc;
    } else if (short_batch) {
        rc = K->add_bwd(R->dctx, grad, trn_net_dev_grad(R->net_last), n_grad, KERN_ACCUM_DX);
        if (rc < 0) {
            trn_seterr(err, cap, "gradient accumulation: %s", kern_strerror(rc));
            return rc;
        }
        trn_net_zero_grad(R->net_last);
    }
    /* trn_optim_after_batch's policy, the step itself on the device */
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
    if (ni - c.last_opt_step < sch.accumulate) return 0;
    const int64_t upd = R->ema ? trn_ema_updates(R->ema) + 1 : 0;
    const double d = trn_ema_decay(upd);
    const struct trn_optim_dev_step_opts so = { .grad_scale = trn_amp_inv_scale(R->amp),
                                                .skip_nonfinite = R->amp != NULL,
                                                .ema = R->ema ? R->d_ema[0] : NULL,
                                                .ema_decay = d };
    float *const params = trn_net_dev_arena(R->net, TRN_ARENA_PARAM);
    rc = trn_optim_dev_step(R->odev, params, grad, &sch, &so);
    double sumsq = 0;
    /* the skip was decided on the device: its sum of squares tells the scaler */
    if (rc == 0 && R->amp)
        rc = dcopy(R, trn_optim_dev_buffer(R->odev, 1), &sumsq, sizeof sumsq, KERN_COPY_D2H);
    if (rc == 0) rc = trn_optim_dev_zero_grad(R->odev, grad);
    if (rc < 0) {
        trn_seterr(err, cap, "optimizer: %s",
                   rc == -EINVAL ? trn_optim_strerror(rc) : kern_strerror(rc));
        return rc;
    }
    if (R->ema) {
        rc = K->ema_update(R->dctx, R->d_ema[1], trn_net_dev_arena(R->net, TRN_ARENA_BUFFER),
                           R->info->arena_len[TRN_ARENA_BUFFER], (float)d, (float)(1.0 - d));
        if (rc < 0) {
            trn_seterr(err, cap, "EMA: %s", kern_strerror(rc));
            return rc;
        }
        trn_ema_set_updates(R->ema, upd);
    }
    trn_optim_get_counters(R->opt, &c); /* steps: counted by the device step */
    c.last_opt_step = ni;
    /* a skipped step leaves the momentum alone: the next one is still the first when this was */
    if (R->amp && !isfinite(sumsq)) c.steps--;
    trn_optim_set_counters(R->opt, &c);
    if (R->amp) amp_after_step(R, !isfinite(sumsq), b);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The step as a graph (--cuda-graph)                                                       */

/* The recorded step: forward, the device loss, backward and, for the step kind, the fused clip +
 * SGD + parameter EMA, zero grad and the buffers' EMA. Reads only s and the memory it points to,
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

/* After resident_setup: turn the graph step on where it can run, or say why not. */
static int graph_setup(struct run *R, char *err, size_t cap)
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
        logline(R, "cuda graph: off, the step runs directly: %s", why);
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
    /* a replay runs no host code: num_batches_tracked is counted by train_batch_graph */
    trn_net_set_count(R->net, false);
    R->graph = true;
    logline(R,
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
 * the loss floats afterwards. Results are train_batch_resident's byte for byte; only a non-finite
 * loss is found after the step rather than before it (the run fails either way). */
static int train_batch_graph(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                             char *err, size_t cap)
{
    /* full batches only: a short one is not this net's shape (NULL net: the check says so) */
    int rc = check_batch(R, b, b->n == R->local_bs ? R->net : NULL, false, err, cap);
    const struct trn_loss_cfg *cfg = R->gs[0].cfg;
    if (rc < 0 || (rc = targets_fit(cfg, b, err, cap)) < 0) return rc;
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
        logline(R, "cuda graph: the context's workspace changed; capturing the step again");
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
            logline(R, "cuda graph: captured the %s step at epoch %u batch %" PRIu64, kind[k],
                    b->epoch, b->step);
        } else if (cuda || R->o.cuda_graph_fail) {
            /* nothing ran: this batch runs directly, the following ones as before the graphs */
            logline(R,
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
    return loss_from_device(rc, raw, b, items, err, cap);
}

/* The line ultralytics' tqdm bar ends an epoch with. */
static void progress(struct run *R, int epoch, const double ml[3], size_t instances, int64_t done,
                     double secs, int64_t images)
{
    char ep[32];
    snprintf(ep, sizeof ep, "%d/%d", epoch, R->o.epochs - 1);
    logline(R,
            "%11s%11s%11.4g%11.4g%11.4g%11zu%11d: 100%% %" PRId64 "/%" PRId64
            " [%.1fs, %.2fit/s, %.1fimg/s]",
            ep, "0G", ml[0], ml[1], ml[2], instances, R->o.img, done, R->nb, secs,
            secs > 0 ? (double)done / secs : 0, secs > 0 ? (double)images / secs : 0);
}

static void val_log(void *ctx, const char *msg)
{
    logline(ctx, "%s", msg);
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
        logline(R, "%22s%11d%11" PRId64 "%11.3g%11.3g%11.3g%11.3g", name, vr->seen, vr->ap.nt[c],
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
    vo.curves_dir = best ? R->o.run_dir : NULL;
    vo.plot_dir = best ? R->o.run_dir : NULL;
    vo.log = val_log;
    vo.log_ctx = R;
    /* train.py validates with half = amp on a GPU (trn_train_opts.val_amp) */
    vo.amp = R->o.val_amp >= 0 ? R->o.val_amp : R->o.gpu >= 0 ? R->o.amp : KERN_DT_F32;
    /* on the training's GPU, forwards of up to 16 images: the inference net keeps every
       activation (no liveness reuse yet) beside the training's memory; the CPU's 4 bounds host
       memory. The micro batch never changes results. */
    vo.device = R->o.gpu;
    vo.device_path = R->o.gpu < 0 && R->o.device_path;
    if (vo.device >= 0) vo.micro_batch = vo.batch_size < 16 ? vo.batch_size : 16;
    struct trn_val_result vr;
    char e[768] = "";
    const int rc = trn_val_run(m, R->val_data, &vo, &vr, e, sizeof e);
    if (rc < 0) {
        trn_seterr(err, cap, "%s: %s", R->o.val_records, e[0] ? e : trn_strerror(rc));
    } else {
        logline(R, "%22s%11s%11s%11s%11s%11s%11s", "Class", "Images", "Instances", "P", "R",
                "mAP50", "mAP50-95");
        logline(R, "%22s%11d%11" PRId64 "%11.3g%11.3g%11.3g%11.3g", "all", vr.seen, vr.n_labels,
                vr.mp, vr.mr, vr.map50, vr.map);
        if (best) log_class_rows(R, &vr);
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
    logline(R, "Validating %s...", p);
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
        (!opts->resume && (!opts->records || !opts->cfg)) || opts->img < 32 ||
        opts->batch_size < 1 || opts->epochs < 1 || (unsigned)opts->optimizer > TRN_OPTIM_ADAMW) {
        trn_seterr(err, err_cap, "bad training options");
        return -EINVAL;
    }
    struct run *R = calloc(1, sizeof *R);
    if (!R) return -ENOMEM;
    R->o = *opts;
    R->dist = opts->dist;
    R->rank = rank;
    R->world = trn_dist_world(opts->dist);
    struct trn_ckpt *C = NULL;
    float *save_p = NULL, *save_b = NULL;
    int rc = setup(R, &C, err, err_cap);
    trn_ckpt_close(C);
    if (rc < 0) goto out;
    if (R->rank == 0 && (rc = write_run_files(R, err, err_cap)) < 0) goto out;
    if (R->rank == 0 && !R->o.validate && R->o.val_records) {
        char e[768] = "";
        if ((rc = ffr_reader_open(&R->val_data, R->o.val_records, NULL, e, sizeof e)) < 0) {
            trn_seterr(err, err_cap, "%s", e[0] ? e : ffr_strerror(rc));
            goto out;
        }
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
        logline(R, "validation: no val records; results.csv metrics/* and val/* columns are "
                   "written as 0 and best.ckpt = last.ckpt (every fitness is 0)");
    }
    if (R->world > 1 && (rc = dist_start(R, err, err_cap)) < 0) goto out;
    if ((rc = resident_setup(R, err, err_cap)) < 0) goto out;
    if ((rc = graph_setup(R, err, err_cap)) < 0) goto out;
    logline(R,
            "%s%s: %" PRId64 " batches of %d per epoch (last %d), %d epochs, img %d, "
            "accumulate %d, %s",
            R->o.resume ? "Resuming from " : "Training", R->o.resume ? R->o.resume : "", R->nb,
            R->o.batch_size, R->last_bs * R->world, R->o.epochs, R->o.img,
            trn_optim_accumulate(trn_optim_get_opts(R->opt)), optim_names[R->o.optimizer]);
    if (R->world > 1)
        logline(R,
                "DDP: %d ranks over %s, %d images per rank per batch, gradients summed%s; "
                "all-reduced %s",
                R->world, trn_dist_backend_name(trn_dist_backend(R->dist)), R->local_bs,
                R->o.sync_bn ? ", SyncBatchNorm" : "",
                R->overlap ? "in buckets overlapped with backward" : "after backward");
    logline(R, "%11s%11s%11s%11s%11s%11s%11s", "Epoch", "GPU_mem", "box_loss", "obj_loss",
            "cls_loss", "Instances", "Size");

    const double t0 = now_s();
    int64_t batches = 0, images = 0, stop_sig = 0;
    double first_loss = NAN, epoch_t0 = t0;
    int64_t epoch_images = 0, epoch_batches = 0;
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
        struct trn_loss_items it;
        if (R->graph && b.n == R->local_bs)
            rc = train_batch_graph(R, &b, &it, err, err_cap);
        else
            rc = R->resident ? train_batch_resident(R, &b, &it, err, err_cap)
                             : train_batch(R, &b, &it, err, err_cap);
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
        if (R->step == R->nb) {
            const int epoch = R->epoch;
            progress(R, epoch, mloss, b.n_targets, epoch_batches, now_s() - epoch_t0, epoch_images);
            if (first_epoch) first_loss = mloss[0] + mloss[1] + mloss[2];
            first_epoch = false;
            /* validation, the checkpoints and the ranks' weight digests read the host copies */
            int erc = resident_download(R, err, err_cap);
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
                if (!erc) erc = results_append(R, epoch, mloss, &mt, err, err_cap);
            }
            if (res) res->last_loss = mloss[0] + mloss[1] + mloss[2];
            R->epoch++;
            R->step = 0;
            memset(R->msum, 0, sizeof R->msum);
            R->mcount = 0;
            if (R->rank == 0 && !erc) erc = save_named(R, "last", err, err_cap);
            if (R->rank == 0 && !erc && fi == R->best_fitness)
                erc = save_named(R, "best", err, err_cap);
            if (R->world > 1) erc = dist_epoch_sync(R, epoch, erc, &early, err, err_cap);
            if ((rc = erc) < 0) goto out;
            epoch_t0 = now_s();
            epoch_images = epoch_batches = 0;
            if (early && R->epoch < R->o.epochs) {
                logline(R,
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
            if (R->rank == 0 && R->step != 0) src = save_named(R, "last", err, err_cap);
            if ((rc = dist_status(R, src, "saving last.ckpt at the stop", err, err_cap)) < 0)
                goto out;
            logline(R,
                    "stopped at epoch %d batch %" PRId64 "; saved %s/last.ckpt (resume with "
                    "--resume)",
                    R->epoch, R->step, R->weights_dir);
            stopped = true;
            break;
        }
    }
    if (!stopped && R->rank == 0) {
        char csv[4200], png[4200], e[512] = "";
        snprintf(csv, sizeof csv, "%s/results.csv", R->o.run_dir);
        snprintf(png, sizeof png, "%s/results.png", R->o.run_dir);
        if ((rc = trn_plot_results(csv, png, e, sizeof e)) < 0) {
            trn_seterr(err, err_cap, "results.png: %s", e);
            goto out;
        }
        logline(R, "%d epochs completed in %.3f hours.", R->epoch, (now_s() - t0) / 3600);
        if (R->val_data && (rc = validate_best(R, err, err_cap)) < 0) goto out;
        logline(R, "Results saved to %s", R->o.run_dir);
    }
    if (res) {
        const double secs = now_s() - t0;
        res->epoch = R->epoch;
        res->step = R->step;
        res->batches = batches;
        res->images_per_s = secs > 0 ? (double)images * R->world / secs : 0;
        res->first_loss = first_loss;
        res->stop_signal = stopped ? (int)stop_sig : 0;
        snprintf(res->last_path, sizeof res->last_path, "%s/last.ckpt", R->weights_dir);
    }
    if (R->gs[0].net)
        logline(R,
                "cuda graph: %" PRId64 " full batches replayed, %" PRId64 " captured, %" PRId64
                " run directly (%s)",
                R->g_replays, R->g_captures, R->g_direct_all,
                R->graph ? "graphs in use" : "fell back to the direct step");
    rc = stopped || early ? TRN_TRAIN_STOPPED : 0;
out:
    free(save_p);
    free(save_b);
    run_free(R);
    return rc;
}
