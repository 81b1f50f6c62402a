/*
 * run: what the training loop's files share, private to trainer/train/. struct run is a run's
 * options and its parts (the job, the ranks, the data, the nets, the state, the device), each
 * set up and freed by its own file, allocated once in setup. A training step takes one of three
 * paths behind one interface (struct run_step): the host step, the resident step, and the
 * resident step as a CUDA graph; the loop picks one per batch.
 */
#ifndef TRN_RUN_H
#define TRN_RUN_H

#include "train.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "det.h"
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
#include "plans.h"
#include "plots.h"
#include "ptload.h"
#include "sampler.h"
#include "weights.h"
#include "autoanchor.h"
#include "tta.h"
#include "val.h"
#include "util.h"
#include "errors.h"

#define NBS          64 /* nominal batch size (train.py) */
#define RESULTS_COLS 14

static const char *const optim_names[] = { "SGD", "Adam", "AdamW" };

/* ---------------------------------------------------------------------------------------- */
/* The run                                                                                   */

/* The frozen arguments of one captured step (--cuda-graph, docs/design.md "One CUDA graph per
 * training step"): everything graph_step_run reads, set once in run_graph_setup and never written
 * again, because a CUDA replay re-runs the recorded ops with these pointers and sizes, and a CPU
 * replay calls graph_step_run with them. What changes per step lives in the memory they point
 * to: the batch (the net's input slot), the targets and their count, the kern_sgd_dyn scalars. */
struct graph_step {
    struct trn_net *net;            /* the full batches' net */
    const struct trn_loss_cfg *cfg; /* its loss */
    const struct kern_ops *K;
    struct kern_ctx *ctx;
    const void *input;          /* trn_net_dev_input(net): the batch, uploaded before the run */
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

/*
 * A run is its options and five owned parts, each with its own file; the files stand in one
 * order (lowest first: run_files.c, run_dist.c, run_data.c, run_nets.c, run_state.c,
 * run_device.c, step_host.c, step_resident.c, step_graph.c, train.c) and each calls only the
 * files before it (scripts/check-layers refuses a circle).
 */

/* The job (run_files.c): what the run writes and says: the texts it saves, the resume strings,
 * the log's memory, the plot threads. */
struct run_job {
    int anchors_override;  /* hyp.anchors > 0: the yaml's anchors replaced by that many per level */
    uint64_t val_seen[32]; /* hashes of validation log lines already printed (val_log) */
    int n_val_seen;
    char *model_yaml; /* the yaml text the model was built from */
    size_t model_yaml_len;
    char *hyp_text, *opt_text; /* hyp.yaml and opt.yaml as written */
    size_t hyp_len, opt_len;
    char weights_dir[4000];
    char resume_records[4096], resume_val[4096], resume_cfg[4096]; /* strings when resuming */
    char resume_data[4096];
    char resume_weights[4096], resume_hyp[4096], resume_project[4096], resume_name[1024];
    pthread_t plot_thread[4]; /* labels.jpg, train_batch0..2.jpg, drawn beside the first batches */
    int n_plot_threads;
};

/* The ranks (run_dist.c). */
struct run_dist {
    struct trn_dist *comm; /* the job's communicator, or NULL for one process */
    int rank, world;       /* this rank and the number of ranks (0 and 1 without dist) */
    int local_bs;          /* images per step on this rank: batch_size / world */
    float *acc;            /* world > 1: gradients summed over ranks since the last optimizer
                              step (PARAM layout); the nets' arenas then hold one batch's only */
    bool bn_sync_failed;   /* a SyncBatchNorm all-reduce failed: err gets trn_dist_error */
    bool overlap;          /* world > 1: the nets hand each row's final gradients to
                              trn_dist_grad_ready during backward (dist.h OVERLAP) */
    bool grad_sync_failed; /* a gradient bucket failed: err gets trn_dist_error */
};

/* The data (run_data.c): the records, their label table and names, the loader, validation's
 * records, and --image-weights' state. */
struct run_data {
    struct ffr_reader *reader;
    struct det_labels *labels;    /* reader's label table (det_labels_build), built once */
    uint64_t data_hash, val_hash; /* ffr_reader_content_hash of reader and val (0: none) */
    uint64_t ckpt_data_hash, ckpt_val_hash; /* resuming: the checkpoint's (0: it has none) */
    struct trn_loader *loader;
    struct ffr_reader *val; /* built-in validation's dataset, or NULL */
    struct trn_plot_names val_names;
    char **names; /* class names (may be fewer than nc: then numbered) */
    int n_names;
    /* --image-weights: each image's label classes (CSR over labels->first), the class and image
     * weights, the last validation's per-class mAP@0.5:0.95 (train.py's maps), the epoch's draw. */
    int32_t *iw_cls;
    double *iw_class, *iw_image, *maps;
    uint64_t *iw_draw;
};

/* The nets (run_nets.c): the model, the contexts the nets run on, the training nets and their
 * losses, the odd-batch-shape net. */
struct run_nets {
    struct trn_model *m;
    const struct trn_model_info *info;
    struct kern_ctx *ctx;
    struct kern_ctx *gpu_ctx;       /* o.gpu >= 0: the CUDA context the nets run on */
    struct trn_plans plans;         /* o.gpu >= 0: its conv plan table (plans.h) */
    struct trn_net *net, *net_last; /* full img x img batches; another shape (the epoch's short
                                       last batch, a rect or --multi-scale batch) or NULL */
    int alt_n, alt_h, alt_w;        /* net_last's batch shape (run_alt_net) */
    enum trn_pixel_type pixels;     /* the loader's batches (run_data_loader); the nets take
                                       space-to-depth ones as they are (THE STEM'S INPUT) */
    int grid;                       /* train.py's gs: max(int(model.stride.max()), 32) */
    int64_t per_image_t;            /* most target rows one image gives (the losses' sizing) */
    float *ms_buf;                  /* --multi-scale: the resized batch */
    size_t ms_cap;                  /* floats at ms_buf */
    struct trn_loss *loss, *loss_last;
    float *dp[TRN_MODEL_MAX_LEVELS], *dp_last[TRN_MODEL_MAX_LEVELS];
};

/* The state (run_state.c): optimizer, EMA, AMP scaler, position and fitness. */
struct run_state {
    struct trn_optim *opt;
    struct trn_ema *ema;
    struct trn_amp *amp; /* o.amp == KERN_DT_F16: the loss scaler (train.h AMP), else NULL */
    int64_t nb;          /* batches per epoch */
    int last_bs;         /* images of the epoch's last batch */
    int epoch;           /* position of the next batch */
    int64_t step;        /* batch within the epoch */
    double best_fitness;
    int best_epoch; /* EarlyStopping's best_epoch: last epoch with fitness >= best */
    double msum[3]; /* loss item sums of the epoch in progress */
    int64_t mcount; /* batches in msum */
    double lr[3];   /* lr of the last batch (x/lr0..2) */
};

/* The device (run_device.c; the steps in step_resident.c and step_graph.c). The resident step
 * (docs/design.md): with the nets on a device (or the device data path) and SGD, parameters,
 * gradients, momentum and EMA stay in the nets' backend memory; the host copies (model arenas,
 * optimizer state, EMA, grad arena / acc) are refreshed by run_resident_download where the host
 * reads them and uploaded once by resident_upload. */
struct run_device {
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
    float *raw_dp[TRN_MODEL_MAX_LEVELS]; /* the graph step's: the net's raw head, when on */
    struct kern_optim_seg *d_seg;        /* resident fp16: one segment per loss gradient level, the
                                            main net's then the short batch net's (dctx memory) */
    /* --cuda-graph: the full batches' resident step as two graphs, run directly once, then
       captured and replayed (run_train_batch_graph). The short last batch runs
       run_train_batch_resident. */
    bool graph;                 /* full batches take run_train_batch_graph */
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
};

/* Everything a run holds: its options and its parts; allocated once in setup. */
struct run {
    struct trn_train_opts o; /* effective options (from the checkpoint when resuming) */
    struct run_job job;
    struct run_dist dist;
    struct run_data data;
    struct run_nets nets;
    struct run_state state;
    struct run_device dev;
};

/* One training step path: run batch b (its update included when the accumulation policy says
 * so) and return its loss items. */
struct run_step {
    const char *name;
    int (*batch)(struct run *R, const struct trn_batch *b, struct trn_loss_items *items, char *err,
                 size_t cap);
};
extern const struct run_step run_step_host, run_step_resident, run_step_graph;

/* run_files.c: the job. run_log writes a line of rank 0's log. run_save_named writes
 * weights/WHICH.ckpt from the host copies (the caller brings a resident run's state home first,
 * run_resident_download). */
void run_log(const struct run *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *run_hyp_text(const struct trn_hyp *h, bool line, size_t *len);
char *run_opt_yaml(const struct run *R, size_t *len);
int run_resume_opts(struct run *R, const struct trn_ckpt *C, char *err, size_t cap);
int run_resume_state(struct run *R, const struct trn_ckpt *C, char *err, size_t cap);
int run_write_files(struct run *R, char *err, size_t cap);
int run_results_append(struct run *R, int epoch, const double mloss[3],
                       const struct trn_train_metrics *mt, char *err, size_t cap);
int run_save_named(struct run *R, const char *which, char *err, size_t cap);
void run_plot_labels(struct run *R);
void run_plot_first_batch(struct run *R, const struct trn_batch *b);
void run_job_free(struct run *R);

/* run_dist.c: the ranks. The two hooks are trn_net_opts' bn_allreduce and grad_ready. */
int run_dist_setup(struct run *R, char *err, size_t cap);
int run_dist_bn_allreduce(void *ctx, double *buf, size_t n);
int run_dist_grad_ready(void *ctx, const struct trn_net_grad_range *g);
int run_dist_start(struct run *R, char *err, size_t cap);
int run_dist_epoch_sync(struct run *R, int epoch, int rc0, bool *early, char *err, size_t cap);
int run_dist_stop_vote(struct run *R, int64_t *sig, char *err, size_t cap);
int run_dist_status(struct run *R, int rc0, const char *what, char *err, size_t cap);
void run_dist_free(struct run *R);

/* run_data.c: the data. */
int run_data_open(struct run *R, char *err, size_t cap);
int run_data_loader(struct run *R, const struct trn_ckpt *C, char *err, size_t cap);
int run_data_val_open(struct run *R, char *err, size_t cap);
int run_data_iw_setup(struct run *R, char *err, size_t cap);
int run_data_iw_apply(struct run *R, int epoch, int64_t step, char *err, size_t cap);
int run_data_epoch(struct run *R, int epoch, char *err, size_t cap);
void run_data_free(struct run *R);

/* run_nets.c: the nets. run_is_alt: whether batch b has another shape than the main net's
 * (local_bs x img x img); run_alt_net then makes net_last (loss_last, dp_last) that shape:
 * returns 0 (the net of that shape is kept), 1 (made anew) or an error with err set. */
int run_nets_model(struct run *R, struct trn_ckpt *C, char *err, size_t cap);
int run_nets_contexts(struct run *R, char *err, size_t cap);
int run_nets_create(struct run *R, char *err, size_t cap);
bool run_is_alt(const struct run *R, const struct trn_batch *b);
int run_alt_net(struct run *R, const struct trn_batch *b, char *err, size_t cap);
int run_nets_multi_scale(struct run *R, const struct trn_batch *b, struct trn_batch *out, char *err,
                         size_t cap);
/* run_nets_pixels: the loader's pixel type for GPU augmentation: the bf16 space-to-depth tensor
 * where the training nets will take it (net.h THE STEM'S INPUT), else float32. */
enum trn_pixel_type run_nets_pixels(const struct run *R);
int run_check_batch(const struct run *R, const struct trn_batch *b, const struct trn_net *net,
                    bool short_batch, char *err, size_t cap);
int run_targets_fit(const struct trn_loss_cfg *cfg, const struct trn_batch *b, char *err,
                    size_t cap);
void run_nets_free(struct run *R);

/* run_state.c: the state. run_state_schedule: trn_optim_after_batch's policy for batch b, for
 * the device steps: its position ni, schedule and the optimizer's counters, the lr logged;
 * returns 1 when the optimizer steps after it, 0 when it only accumulates, or an error. */
int run_state_setup(struct run *R, struct trn_ckpt *C, char *err, size_t cap);
int run_state_schedule(struct run *R, const struct trn_batch *b, struct trn_optim_sched *sch,
                       struct trn_optim_counters *c, int64_t *ni, char *err, size_t cap);
void run_state_free(struct run *R);

/* run_device.c: the device. run_resident_alt gives a new net_last its device buffers. */
int run_dev_copy(struct run *R, void *dev, void *host, size_t bytes, int dir);
int run_resident_setup(struct run *R, char *err, size_t cap);
int run_resident_alt(struct run *R, char *err, size_t cap);
int run_resident_download(struct run *R, char *err, size_t cap);
void run_device_free(struct run *R);

/* step_host.c, step_resident.c, step_graph.c: the steps. */
int run_loss_from_device(int rc, const float *raw, const struct trn_batch *b,
                         struct trn_loss_items *items, char *err, size_t cap);
int run_pass_failed(const struct run *R, const struct trn_batch *b, int rc, const char *pass,
                    char *err, size_t cap);
int run_backward(struct run *R, struct trn_net *net, float *const *dp, bool dev,
                 const struct trn_batch *b, char *err, size_t cap);
int run_amp_scale_seed(struct run *R, struct trn_net *net, float *const *dp, bool dev,
                       const struct kern_optim_seg *segs, int64_t ni);
void run_amp_after_step(struct run *R, bool found_inf, const struct trn_batch *b);
int run_train_batch(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                    char *err, size_t cap);
int run_train_batch_resident(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                             char *err, size_t cap);
int run_graph_setup(struct run *R, char *err, size_t cap);
int run_train_batch_graph(struct run *R, const struct trn_batch *b, struct trn_loss_items *items,
                          char *err, size_t cap);

#endif
