/*
 * train: the YOLOv5 training loop as a library call (train.py's train(), CPU reference path):
 * model, loader, net, loss, optimizer and EMA wired together, ultralytics' run directory
 * (results.csv, hyp.yaml, opt.yaml, weights/last.ckpt, weights/best.ckpt) and our checkpoint
 * format, with bit-exact resume from any step.
 *
 * THE LOOP (recipe S4). For every batch ni = epoch * nb + i: forward (BN in training mode),
 * ComputeLoss (its total already includes x bs), backward into the gradient arena, then
 * trn_optim_after_batch (accumulate to the nominal batch 64, warmup by ni, clip at norm 10,
 * step, zero grads, EMA update). The lr schedule is a function of the epoch, applied inside
 * trn_optim_after_batch. The epoch's last batch may be short: it runs on a second net planned
 * for that size, whose gradients are added into the main gradient arena before the step.
 * Everything is allocated before the first batch; nothing is allocated per step (checkpoint
 * saves allocate, at epoch ends and at a stop).
 *
 * VALIDATION (train.py's per-epoch val.run). After every epoch the EMA weights (ultralytics
 * validates ema.ema) are copied into the model and validated, then the training weights are put
 * back. With opts.validate set, that hook does it; otherwise, with opts.val_records, the run does
 * it itself with trn_val_run (val.h) as train.py calls val.run: batch 2 x batch_size, img, conf
 * 0.001, IoU 0.6, rect batches, max_det 300, and the val losses from ComputeLoss on the rect
 * batches (same hyp gains). With opts.noval only the final epoch is validated (train.py's
 * `if not noval or final_epoch`). Each validation logs val.py's header and its "all" line.
 * fitness = 0.1 mAP@0.5 + 0.9 mAP@0.5:0.95; best_fitness = max; best.ckpt is written whenever
 * fitness == best_fitness (so ties save best again, as ultralytics does). Without validation
 * the metric columns of results.csv are 0, every fitness is 0 and best.ckpt = last.ckpt; the
 * log says so once. EARLY STOP (ultralytics' EarlyStopping): an epoch with fitness >=
 * the best so far is the best epoch; when epoch - best_epoch >= patience the run logs why and
 * stops after that epoch's saves (returns TRN_TRAIN_STOPPED). At the end of a finished or early-
 * stopped run results.png is drawn from results.csv (trn_plot_results), and then, with the
 * built-in validation, best.ckpt's EMA weights are validated once more as train.py does with
 * best.pt: val.py's table with a row per class, and the plots (PR / F1 / P / R curves,
 * confusion_matrix.png, val_batchK_labels/pred.jpg) in the run directory. The per-epoch
 * validations write no plots (train.py passes plots=False there).
 *
 * CHECKPOINT FORMAT (docs/checkpoint.md): one ffr file (ffr/include/ffr.h: written to a
 * temporary, fsynced, renamed into place; every record checksummed; an index), raw codec,
 * little-endian. Each record's summary is its name (ASCII, no NUL); records in this order:
 *    0 "model.param"   float32[arena_len[PARAM]]  the model's parameters (TRN_ARENA_PARAM layout)
 *    1 "model.buffer"  float32[arena_len[BUFFER]] BN running mean/var, Detect anchors
 *    2 "model.count"   int64[arena_len[COUNT]]    BN num_batches_tracked
 *    3 "ema.param"     float32[arena_len[PARAM]]  the EMA's parameters
 *    4 "ema.buffer"    float32[arena_len[BUFFER]] the EMA's buffers
 *    5 "optim.state0"  float32[arena_len[PARAM]]  SGD momentum buffer / Adam exp_avg
 *    6 "optim.state1"  float32[arena_len[PARAM]]  Adam exp_avg_sq (0 bytes for SGD)
 *    7 "grad"          float32[arena_len[PARAM]]  gradients accumulated since the last step
 *                                                 (non-zero when saved between steps)
 *    8 "model.yaml"    text                       the model yaml the run was built from
 *    9 "hyp.yaml"      text                       hyperparameters (trn_hyp_parse reads it)
 *   10 "opt.yaml"      text                       the run's options, as opt.yaml
 * The index metadata is a YAML mapping (format: ffyolo-ckpt-1; epoch, step and ni of the NEXT
 * batch; epochs, img, batch_size, seed, optimizer, cos_lr, nc, names, records, val_records,
 * best_fitness, best_epoch, ema_updates, optim_steps, last_opt_step, the running loss sums of the
 * epoch in progress, arena lengths, and the tensor table: name, arena, offset and shape of every
 * state-dict entry). No random state is stored: the loader's draws are a pure function of
 * (seed, epoch, position) and model init is keyed by the seed.
 *
 * STOPPING. opts.stop (set from a signal handler) and opts.stop_after are checked after each
 * completed batch: the batch's update is finished, last.ckpt is saved at the position of the
 * next batch, and trn_train_run returns TRN_TRAIN_STOPPED. With several ranks the ranks first
 * agree (an all-reduce of every rank's *stop, so a signal delivered to one rank stops all of them
 * after the same batch), rank 0 saves, and every rank learns whether the save succeeded.
 *
 * RANKS (opts.dist, recipe S7; docs/distributed.md). batch_size is the GLOBAL batch: each of the
 * W ranks loads batch_size / W images per step (refused when W does not divide it), ranks take
 * DistributedSampler's disjoint partitions (loader.h), and the optimizer's accumulate and weight
 * decay use the global batch as train.py does. Rank 0's parameters and buffers are broadcast
 * before the first batch, so all ranks start equal. After each backward the batch's gradients
 * (of the per-rank loss, which includes x per-rank batch) are summed over the ranks in buckets
 * (DDP averages the gradients of loss x W: the same sum) and added to the accumulated
 * gradients; every rank then runs the same optimizer step on the same bytes. The all-reduce runs
 * after the whole backward: the net does not expose per-layer gradient readiness, and on the CPU
 * path compute and the collective would share the same cores anyway. BatchNorm uses each rank's
 * own batch statistics (DDP without SyncBatchNorm) unless opts.sync_bn: then the training nets
 * sum every BN layer's statistics, and in backward its (sum dz, sum dz xhat), over the ranks
 * (trn_net_opts.bn_allreduce over trn_dist_allreduce_f64), which is PyTorch's SyncBatchNorm
 * (docs/distributed.md: 2 ranks x batch 2 then train as 1 rank x batch 4 to float rounding when
 * the ranks match as many targets, the losses being per-rank means). Only rank 0 validates,
 * keeps the EMA, logs, and writes results.csv, plots and checkpoints (run_dir may be NULL on the
 * other ranks); at every epoch end the ranks exchange rank 0's early-stop decision and status and
 * check that their weights are still the same bytes (a mismatch is an error, not a silent
 * divergence). A checkpoint holds the summed pending gradients, so it resumes on any world size
 * that divides the batch.
 *
 * AMP (opts.amp). bf16 and fp16 run every conv of the training nets in that dtype (net.h
 * AUTOCAST) with float32 master weights, gradients and optimizer. fp16 adds the dynamic loss
 * scaler (trainer/train/amp.h, GradScaler's defaults): the loss gradient that seeds backward is
 * multiplied by the scale; at each optimizer step the accumulated gradients are multiplied by
 * 1 / scale and checked for Inf / NaN (host step: in place before the clip; resident step: the
 * fused step's grad_scale and skip_nonfinite); with an overflow the parameters and momentum are
 * left alone (the EMA still updates and the gradients are zeroed, as train.py with
 * scaler.step), then the scale is updated (halved on an overflow, doubled after 2000 clean
 * steps). The scale and growth tracker are saved in the checkpoint metadata (amp_scale,
 * amp_growth_tracker) and restored by a resume; checkpoints without them start from the
 * default state. fp16 turns cuda_graph off (the scale and the skip are host decisions per step).
 *
 * ERRORS. int functions return >= 0 on success or a negative code: -errno (-EINVAL bad options,
 * -ENOMEM, -ENOENT, -EACCES, -ENOSPC, -EIO from files), -TRN_TRAIN_ECKPT (a checkpoint that
 * does not parse or does not fit the model), or the codes of the modules below (ffr, model, net,
 * loss, optim, loader, ptload). `err` always gets one line naming the file or the stage.
 * trn_strerror names the codes. The library never prints (lines go to opts.log) and never
 * exits.
 *
 * THREADS. One call at a time per run directory; the function uses the calling thread, the
 * loader's worker threads and the kern context's threads.
 */
#ifndef TRN_TRAIN_H
#define TRN_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "cli.h"
#include "dist.h"
#include "hyp.h"
#include "model.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A checkpoint that does not parse or does not fit the model (returned negated). Pinned. */
#define TRN_TRAIN_ECKPT TRN_CKPT_EBAD

/* trn_train_run's positive return: stopped early (opts.stop or stop_after), last saved. */
#define TRN_TRAIN_STOPPED 1

/* The checkpoint's format tag in its metadata. */
#define TRN_TRAIN_CKPT_FORMAT TRN_CKPT_FORMAT

/* One progress or notice line, no newline, valid during the call. */
typedef void (*trn_train_log_fn)(void *ctx, const char *line);

/* Validation results of one epoch (ultralytics' results tuple). */
struct trn_train_metrics {
    double precision, recall, map50, map; /* metrics/precision .. metrics/mAP_0.5:0.95 */
    double box, obj, cls;                 /* val/box_loss, val/obj_loss, val/cls_loss */
};

/*
 * Per-epoch validation hook (replaces the built-in validation; see VALIDATION). m: the model
 * with the EMA weights copied in (borrowed for the call; its arenas may be read, not kept).
 * epoch: 0-based. out: out. Returns 0 or a negative code (the run then stops with that error).
 */
typedef int (*trn_train_val_fn)(void *ctx, struct trn_model *m, int epoch,
                                struct trn_train_metrics *out);

struct ffr_reader; /* ffr.h */

/* Options of a run; fill with trn_train_opts_default. Strings are borrowed for the call. */
struct trn_train_opts {
    const char *records;   /* training dataset (ffr, packed at img) */
    const char *cache_dir; /* NULL, or the node cache (ffr_cache) records was filled into: a
                              shard whose record fails its checksum is evicted from it, said
                              once, and fetched again (every byte verified) by the next run */
    /* A node cache smaller than the dataset (yolo-train --cache-max; docs/sharing.md section
     * 9): records is a view in which shards may hold no record (ffr_cache_skeletons), and
     * every rank calls epoch_data(ctx, reader, e, err, cap) before epoch e's first record is
     * read (at the start, and after each epoch's last batch; the loader's epoch gate holds its
     * workers meanwhile): it makes the node's shards of epoch e readable (ffr_reader_swap_shard)
     * and returns 0, or a negative error with one line in err, which ends the run. The loader
     * then uses the shard-aware partition with local_world_size ranks per node, so that each
     * node reads only its shards. NULL (default): every shard is readable at all times. */
    int (*epoch_data)(void *ctx, struct ffr_reader *r, int epoch, char *err, size_t err_cap);
    void *epoch_data_ctx;
    int local_world_size;    /* with epoch_data: ranks per node (consecutive ranks share one) */
    const char *val_records; /* validation dataset (ffr packed at img) or NULL: see VALIDATION */
    const char *data;        /* NULL, or the dataset yaml (--data) records was packed from:
                                recorded in the checkpoint, so that a resume whose pack is gone
                                can pack it again; and in opt.yaml, as train.py's data */
    const char *cfg;         /* model yaml path (resolved), or NULL with weights: the weights'
                                own yaml; ignored when resuming */
    const char *weights;     /* NULL, or pretrained weights as train.py loads them
                                (trn_weights_pretrained: a .pt's model, else its ema; our
                                checkpoint's EMA): every tensor whose name and shape match the
                                model's is transferred (trn_model_transfer), the anchors too
                                unless cfg is given, and "Transferred N/M items" logged */
    const char *resume;      /* NULL, or a checkpoint to continue: every setting below except
                                workers, threads, stop, stop_after, log and validate then comes
                                from the checkpoint, and run_dir must be its run directory */
    const char *run_dir;     /* existing, writable run directory (runs/train/expN); may be
                                NULL on ranks other than 0 */
    const char *hyp_path;    /* recorded in opt.yaml only */
    const char *project, *name, *device; /* recorded in opt.yaml only */
    int gpu; /* -1 [default]: the CPU reference ops; >= 0: the network runs on this CUDA device
                (with SGD the resident step: loss, optimizer and EMA on the device too;
                Adam/AdamW keep the host optimizer; docs/design.md) */
    bool device_path;   /* gpu < 0: run the GPU path (device arenas, kern_mem copies, the resident
                           step) on the CPU ops, bit for bit with the CPU path: a test mode for
                           machines without a GPU [false] */
    bool host_aug;      /* the resident step (a GPU, or device_path, with SGD) takes its batches
                           from the host augmentation instead of building them on the device
                           (trn_loader_opts.pix_ctx: tiles uploaded, mosaic/affine/HSV/flips/
                           mixup in kernels writing the batch tensor); the same bytes [false] */
    struct trn_hyp hyp; /* hyperparameters [scratch-low] */
    int img;            /* image size, multiple of the max stride [640] */
    int batch_size;     /* images per global batch (all ranks) [16] */
    int epochs;         /* [100] */
    int nc;             /* > 0: classes (override the yaml); 0: from the
                           dataset's metadata nc/names, else the yaml's */
    unsigned workers;   /* loader threads, 0 = auto */
    bool page_cache;    /* the loader reads through the page cache even for a dataset larger
                           than half of MemAvailable (where it uses O_DIRECT by default) */
    bool direct;        /* the loader reads with O_DIRECT even for a dataset within half of
                           MemAvailable (where it uses the page cache by default) */
    int threads;        /* kern threads (0 = caller + OpenBLAS's own) */
    uint64_t seed;      /* model init, shuffle, augmentation [0] */
    enum trn_optim_kind optimizer;     /* [SGD] */
    bool cos_lr;                       /* cosine lr schedule */
    int64_t stop_after;                /* > 0: stop after this many batches of this call
                                          (tests and debugging) */
    const volatile sig_atomic_t *stop; /* non-NULL: stop when *stop becomes non-zero */
    trn_train_val_fn validate;         /* NULL: built-in validation on val_records */
    void *validate_ctx;
    bool noval;           /* validate the final epoch only [false] */
    int patience;         /* early stop after this many epochs without
                             improvement; <= 0: never [100] */
    trn_train_log_fn log; /* progress lines; NULL drops them (only rank 0 logs) */
    void *log_ctx;
    struct trn_dist *dist;    /* NULL: one process; else the job's communicator (borrowed; see
                                 RANKS). On a collective's failure the run returns its code and
                                 err has trn_dist_error's line: the caller then aborts the job */
    bool sync_bn;             /* SyncBatchNorm over the ranks (see RANKS); no effect with one rank
                                 (ultralytics converts only under DDP). Recorded in the checkpoint
                                 and opt.yaml; when resuming it comes from the checkpoint [false] */
    bool cuda_graph;          /* the resident step's full batches captured once as a graph and
                                 replayed (kern_graph_*: a CUDA graph on a GPU; on the device data
                                 path the same code with the CPU backend's graphs, which call again).
                                 Falls back to the direct step, with a log line, where it cannot:
                                 several ranks, SyncBatchNorm, Adam/AdamW, a failed capture. Not
                                 recorded: a resume takes the caller's [false] */
    bool cuda_graph_fail;     /* tests: with cuda_graph, act as if the capture failed (-ENOTSUP) */
    bool resume_other_data;   /* a resume continues on records (or val_records) whose content
                                 (ffr_reader_content_hash) is not the checkpoint's; without it
                                 that is an error naming both. Given records (with resume) are
                                 read instead of the checkpoint's either way [false] */
    trn_progress_fn progress; /* NULL, or the tqdm bar after every batch (cli.h); the last of
                                 an epoch then goes there and not to log */
    void *progress_ctx;
    double label_smoothing; /* train.py --label-smoothing: BCE targets cp = 1 - eps/2, cn = eps/2
                               for the classes (smooth_BCE), eps in [0, 1) [0]; recorded */
    uint64_t frozen[TRN_MODEL_MAX_LAYERS / 64]; /* train.py --freeze: yaml rows whose
                                                   parameters are not trained (trn_optim_opts.
                                                   frozen), row r bit r % 64 of frozen[r / 64];
                                                   each is logged ("freezing NAME"); recorded */
    bool single_cls;    /* train.py --single-cls: one class, "item" (unless the dataset has
                           one name), every label's class 0, validation likewise; recorded */
    bool rect;          /* train.py --rect: rect training batches (trn_loader_opts.rect: aspect
                           order, no shuffle, no mosaic, pad 0.0), each batch at its own shape;
                           one process only; recorded [false] */
    bool multi_scale;   /* train.py --multi-scale: each batch resized (bilinear, as
                           F.interpolate) to a random side in [0.5, 1.5] x img, rounded to the
                           grid, from the seed; the loader then builds batches on the host;
                           recorded [false] */
    bool evolve;        /* one generation of train.py --evolve: only the final epoch is
                           validated, no checkpoint is written, no final validation of
                           best.ckpt, no pictures [false] */
    bool image_weights; /* train.py --image-weights: each epoch's images drawn with replacement,
                           weighted by their labels' classes' rarity and (1 - last mAP)^2
                           (trn_image_weights, trn_loader_set_indices); one process only;
                           recorded [false] */
    bool cache_ram;     /* train.py --cache ram: the training images decoded once and kept
                           in RAM (trn_loader_opts.cache_ram); recorded [false] */
    const char *ram_share_key; /* cache_ram with several ranks on this node: one copy for them
                                  all under this job key (trn_loader_opts.ram_share_key); NULL:
                                  one per rank, as train.py [NULL] */
    int ram_share_ranks;       /* the node's ranks sharing it [1] */
    bool noplots;              /* train.py --noplots: no train_batch0..2.jpg, results.png, nor the
                                  final validation's pictures [false] */
    bool noautoanchor;         /* skip AutoAnchor (autoanchor.h: train.py's check_anchors, which
                                  runs by default before the first epoch) [false] */
    bool any_algo;             /* GPU: the convs may take non-deterministic cuDNN algorithms
                                  (kern_ctx_opts.any_algo) [false: deterministic, as train.py] */
    const char *cudnn_plan;    /* GPU: the conv plan file read first (plans.h) [NULL: heuristics] */
    bool cudnn_tune;           /* GPU: time what the plan file lacks and write it back [false] */
    int amp;                   /* the training nets' convs (net.h AUTOCAST): KERN_DT_F32 [default],
                                  KERN_DT_BF16, or KERN_DT_F16 with the dynamic loss scaler of
                                  trainer/train/amp.h (see AMP). Validation: val_amp. Recorded in the
                                  checkpoint; when resuming it comes from there (fp32 when absent) */
    int val_amp;               /* the built-in validation's convs (trn_val_opts.amp): -1 [default]:
                                  the training's amp on a GPU (val.py's half = amp), KERN_DT_F32 on
                                  the CPU; else KERN_DT_F32, KERN_DT_F16 or KERN_DT_BF16. The
                                  validation itself runs on the CPU ops (val.h). Not recorded */
    int cpu_engine;            /* what runs the training nets on the CPU (trn_net_opts.cpu_engine):
                                  TRN_CPU_ENGINE_AUTO [default]: oneDNN where the build has it and the
                                  step is float32 without SyncBatchNorm or the overlapped all-reduce,
                                  else the reference ops; TRN_CPU_ENGINE_ONEDNN: oneDNN or an error;
                                  TRN_CPU_ENGINE_REF: the reference ops */
    int act_store;      /* the training nets' activations between layers (trn_net_opts.act_store,
                           net.h ACTIVATIONS): TRN_ACT_F32 [default], TRN_ACT_BF16_NHWC or
                           TRN_ACT_BF16_NCHW (both need amp KERN_DT_BF16). Not recorded */
    int val_cpu_engine; /* what runs the built-in validation's CPU inference (trn_val_opts.
                           cpu_engine, net.h enum trn_cpu_engine) [TRN_CPU_ENGINE_AUTO] */
    int64_t amp_inf_ni; /* tests: >= 0 with fp16: batch ni's loss gradient gets an Inf, so the
                           optimizer step that includes it is skipped [-1] */
};

/* Fill o with the defaults in brackets. o: out. Thread-safe. */
void trn_train_opts_default(struct trn_train_opts *o);

/* What a run did. */
struct trn_train_result {
    int epoch;           /* epoch of the next batch (== epochs when finished) */
    int64_t step;        /* batch within that epoch */
    int64_t batches;     /* batches run by this call */
    double images_per_s; /* images / wall second of this call, validation and saving included */
    double train_images_per_s; /* images / second of the batches alone (loading, augmentation,
                                  the step): the training throughput */
    double first_loss;         /* mean total loss (box + obj + cls) of this call's first epoch */
    double last_loss;          /* mean total loss of this call's last (possibly partial) epoch */
    int stop_signal;           /* the *stop value that stopped the run, agreed over the ranks (the
                                  largest); 0 when not stopped by opts.stop */
    char last_path[4096];      /* weights/last.ckpt */
    struct trn_train_metrics results; /* the last validated epoch's metrics (train.py's
                                         `results`); zeros when none was validated */
};

/*
 * Train as the options say, writing into o->run_dir: hyp.yaml and opt.yaml at the start,
 * results.csv (one row per finished epoch, appended), weights/last.ckpt after every epoch,
 * weights/best.ckpt after every epoch whose fitness equals the best, weights/last.ckpt when
 * stopped, and results.png at the end (not when stopped by opts.stop / stop_after). A failed
 * checkpoint write leaves the previous file intact (temporary + rename) and fails the run. res: out
 * (may be NULL). err: out, one line on failure (may be NULL). Returns 0 (all epochs done),
 * TRN_TRAIN_STOPPED, or a negative code (see ERRORS).
 */
int trn_train_run(const struct trn_train_opts *o, struct trn_train_result *res, char *err,
                  size_t err_cap);

/*
 * Write ultralytics' results.csv header (no newline): 14 names, each right-aligned in 20
 * columns, comma-separated, as '%20s,' * n rstrip(','). dst: out. Returns the length (like
 * snprintf).
 */
int trn_train_results_header(char *dst, size_t dst_cap);

#ifdef __cplusplus
}
#endif

#endif /* TRN_TRAIN_H */
