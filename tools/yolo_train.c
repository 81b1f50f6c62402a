/*
 * yolo-train: the YOLOv5 trainer program, with ultralytics' train.py flag names.
 *
 * Training (trainer/train/train.h) on the CPU reference path, into ultralytics' run directories
 * (PROJECT/NAME, NAME2, ...: results.csv, hyp.yaml, opt.yaml, weights/last.ckpt and best.ckpt);
 * --summary (the model table of --cfg), --bench-data (the loader alone, timed) and --plot
 * (train_batch0..2.jpg in the run directory) as tools.
 *
 * Signals: SIGINT (Ctrl-C), SIGTERM and SIGUSR1 let the current batch finish (on every rank: the
 * ranks agree after each batch), save weights/last.ckpt at the next batch's position (so --resume
 * continues exactly there) and exit: 130 for SIGINT (the shell's 128 + signal), 0 for SIGTERM and
 * SIGUSR1, which clusters send before preempting a job (Slurm's --signal, scancel, HFAI's
 * suspend): the job was saved, not failed. A second SIGINT ends the process at once; repeated
 * SIGTERM / SIGUSR1 are absorbed (a launcher and the cluster may both deliver one).
 *
 * Ranks (docs/distributed.md): torchrun's, Slurm's or Open MPI's variables make this process one
 * rank of a job (trainer/dist/dist.h); --nproc-per-node N starts N local ranks itself (fork + exec
 * of this program with torchrun's variables, the TCP backend on 127.0.0.1), forwards the stop
 * signals to them, and ends the others when one fails. A rank whose job fails (a peer died or
 * hung past --dist-timeout, a file error on rank 0) prints why and ends the job (MPI_Abort under
 * mpirun).
 *
 * Exit status: 0 done or preempted (SIGTERM / SIGUSR1, last.ckpt saved), 1 failure (a file, the
 * dataset, a checkpoint that cannot be written, a failed rank), 2 bad command line, 130 stopped
 * by SIGINT with last.ckpt saved.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "argparse.h"
#include "data_pack.h"
#include "device.h"
#include "progress.h"
#include "amp.h"
#include "bench_data.h"
#include "cli.h"
#include "bench_step.h"
#include "kern_cuda.h"
#include "dist.h"
#include "ffio.h"
#include "ffr.h"
#include "hyp.h"
#include "loader.h"
#include "model.h"
#include "net.h"
#include "plots.h"
#include "rundir.h"
#include "train.h"
#include "evolve.h"
#include "ckpt.h"
#include "weights.h"
#include "errors.h"

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

#define PROG "yolo-train"

struct args {
    const char *records, *val_records, *cfg, *weights, *hyp, *device, *resume;
    const char *data, *pack_dir; /* --data DATA.yaml through the pack cache, --pack-dir */
    const char *pack_codec;      /* --pack-codec raw|zstd */
    const char *project, *name, *optimizer, *dist_backend, *cache_dir;
    const char *amp;        /* --amp: bf16, fp16, fp32, or NULL for the device's default */
    const char *val_amp;    /* --val-amp (--val-half: "fp16"), or NULL: the training's on a GPU */
    const char *cpu_engine; /* --cpu-engine: the validation's CPU inference */
    long amp_inf_at;        /* --amp-test-inf-at NI (-1: not given) */
    unsigned long long cache_max;
    long img, batch, epochs, workers, threads, nc, patience, save_period, seed, stop_after;
    long nproc, bench_steps, bench_warmup;
    bool bench_step;
    double seconds, dist_timeout;
    bool summary, bench, json, plot, exist_ok, cos_lr, noval, nosave, page_cache, sync_bn;
    bool resume_other_data;
    bool direct, no_read_ahead;
    bool no_grad_overlap;   /* --no-grad-overlap: all-reduce the gradients after backward */
    bool device_path;       /* --device-path: the GPU path on the CPU ops (tests) */
    bool host_aug;          /* --host-aug: no GPU augmentation */
    bool cuda_graph;        /* --cuda-graph: the step captured once and replayed */
    bool any_algo;          /* --cudnn-any-algo */
    const char *cudnn_plan; /* --cudnn-plan FILE */
    bool cudnn_tune;        /* --cudnn-tune */
    bool noautoanchor;      /* --noautoanchor */
    bool noplots;           /* --noplots */
    double label_smoothing; /* --label-smoothing */
    bool single_cls;        /* --single-cls */
    bool image_weights;     /* --image-weights */
    bool rect, multi_scale; /* --rect, --multi-scale */
    const char *evolve;     /* --evolve [N]: "" for the default 300 */
    const char *cache;      /* --cache [ram|disk]: "" for ram; NULL: not given */
    long freeze[64];        /* --freeze N | R [R ...] */
    int n_freeze;
    bool cuda_graph_fail; /* --cuda-graph-test-fail: the capture acts as failed (tests) */
    double bucket_cap_mb; /* --bucket-cap-mb: gradient bucket cap, MiB (DDP's bucket_cap_mb) */
};

static bool device_ok(const char *d)
{
    if (!strcmp(d, "cpu") || !strcmp(d, "")) return true;
    bool digit = false;
    for (const char *p = d; *p; p++) {
        if (*p >= '0' && *p <= '9')
            digit = true;
        else if (*p != ',' || !digit)
            return false;
        else
            digit = false;
    }
    return digit;
}

/* --cache-max SIZE: bytes, or with K, M, G, T. */
static int parse_size(const char *v, void *dst, char *why, size_t cap)
{
    char *end = NULL;
    errno = 0;
    const double x = strtod(v, &end);
    const double mul = !end || !*end       ? 1
                       : !strcmp(end, "K") ? 1e3
                       : !strcmp(end, "M") ? 1e6
                       : !strcmp(end, "G") ? 1e9
                       : !strcmp(end, "T") ? 1e12
                                           : -1;
    if (errno || end == v || mul < 0 || !(x > 0) || x * mul > 1.8e19) {
        snprintf(why, cap, "is not a size (bytes, or with K, M, G, T)");
        return -EINVAL;
    }
    *(unsigned long long *)dst = (unsigned long long)(x * mul);
    return 0;
}

static int parse_amp(const char *v, void *dst, char *why, size_t cap)
{
    enum trn_amp_dtype t;
    if (trn_amp_dtype_parse(v, &t) < 0) {
        snprintf(why, cap, "is not one of bf16, fp16, fp32");
        return -EINVAL;
    }
    *(const char **)dst = v;
    return 0;
}

static int parse_device(const char *v, void *dst, char *why, size_t cap)
{
    if (!device_ok(v)) {
        snprintf(why, cap, "is not cpu or a list of device numbers (0 or 0,1)");
        return -EINVAL;
    }
    *(const char **)dst = v;
    return 0;
}

static int parse_backend(const char *v, void *dst, char *why, size_t cap)
{
    enum trn_dist_backend b;
    if (trn_dist_backend_parse(v, &b) < 0 || b == TRN_DIST_SINGLE) {
        snprintf(why, cap, "is not one of auto, tcp, mpi, nccl");
        return -EINVAL;
    }
    *(const char **)dst = v;
    return 0;
}

static const char *const EPILOG =
    "Exit status: 0 done, or stopped by SIGTERM/SIGUSR1 (preemption); 1 failure; 2 bad command "
    "line; 130 stopped by SIGINT (weights/last.ckpt saved in every stop; --resume continues from "
    "it).";

/* Returns 0 or the exit status 2. */
static int parse_args(int argc, char **argv, struct args *A)
{
    memset(A, 0, sizeof *A);
    A->project = "runs/train";
    A->name = "exp";
    A->optimizer = "SGD";
    A->img = 640;
    A->batch = 16;
    A->bench_steps = 10;
    A->bench_warmup = 3;
    A->epochs = 100;
    A->patience = 100;
    A->save_period = -1;
    A->seconds = 10;
    A->nproc = 1;
    A->dist_timeout = 1800;
    A->dist_backend = "auto";
    A->bucket_cap_mb = 25;
    A->amp_inf_at = -1;
    const struct ap_opt t[] = {
        AP_SECTION("Data and model"),
        AP_OPT("--data", AP_STR, &A->data, "DATA.yaml",
               "dataset yaml (ultralytics' form: path, train, val, names): each split is packed at "
               "--img on first use into the pack cache and reused while its files are unchanged"),
        DATA_PACK_ARGS(&A->pack_dir, &A->pack_codec),
        AP_OPT("--records", AP_STR, &A->records, "FILE", "training dataset (ffr, packed at --img)"),
        AP_OPT("--val-records", AP_STR, &A->val_records, "FILE", "validation dataset (ffr)"),
        AP_OPT("--cache-dir", AP_STR, &A->cache_dir, "DIR",
               "copy the datasets' shards into DIR (node-local disk) first, verified, reused by "
               "later runs; FILE may then be an http(s) URL (docs/sharing.md)"),
        { .names = "--cache-max",
          .kind = AP_CALL,
          .dst = &A->cache_max,
          .metavar = "SIZE",
          .help = "keep DIR under SIZE bytes (K, M, G, T), least recently used shards evicted",
          .call = parse_size },
        AP_OPT("--cfg", AP_STR, &A->cfg, "MODEL",
               "model yaml: a path or a name (yolov5n/s/m/l/x) looked up in $FFYOLO_MODELS_DIR, "
               "./models, " TRN_MODELS_DIR),
        AP_RANGE("--nc", AP_LONG, &A->nc, "N", "override the yaml's number of classes", 1, 65536),
        AP_OPT("--weights", AP_STR, &A->weights, "FILE",
               "pretrained weights: an ultralytics .pt or our .ckpt (its EMA); alone it gives the "
               "model too (its own yaml, the dataset's classes); every tensor whose name and "
               "shape fit is transferred, as train.py"),
        AP_OPT("--hyp", AP_STR, &A->hyp, "FILE",
               "hyperparameter yaml (default: hyp.scratch-low values)"),
        AP_SECTION("Training"),
        AP_RANGE("--img|--imgsz|--img-size", AP_LONG, &A->img, "N",
                 "train and val image size, pixels (default 640)", 32, 16383),
        AP_RANGE("--batch-size", AP_LONG, &A->batch, "N",
                 "total batch size (default 16); -1: AutoBatch, the largest that fits 60% of the "
                 "GPU's memory (train.py's; 16 on the CPU)",
                 -1, 65536),
        AP_RANGE("--epochs", AP_LONG, &A->epochs, "N", "epochs (default 100)", 1, 1000000),
        { .names = "--optimizer",
          .kind = AP_CHOICE,
          .dst = &A->optimizer,
          .metavar = "O",
          .help = "SGD, Adam or AdamW (default SGD)",
          .choices = "SGD|Adam|AdamW" },
        AP_OPT("--cos-lr", AP_FLAG, &A->cos_lr, NULL, "cosine learning-rate schedule"),
        AP_RANGE("--patience", AP_LONG, &A->patience, "N",
                 "stop after N epochs without improvement (default 100)", 0, 1000000),
        { .names = "--device",
          .kind = AP_CALL,
          .dst = &A->device,
          .metavar = "D",
          .help = "cpu, or CUDA devices: 0 or 0,1,2,3 (default: 0 if present)",
          .call = parse_device },
        AP_RANGE("--workers", AP_LONG, &A->workers, "N",
                 "loader threads (default 0 = min(cores, 8))", 0, 256),
        AP_RANGE("--threads", AP_LONG, &A->threads, "N",
                 "compute threads of the CPU path (default 0: one per core; each op splits N ways, "
                 "BLAS single-threaded)",
                 0, 256),
        AP_RANGE("--seed", AP_LONG, &A->seed, "S", "global seed (default 0)", 0, (double)LONG_MAX),
        AP_OPT(
            "--resume", AP_OPTSTR, &A->resume, "[DIR]",
            "resume the most recent run under --project, or the given run directory or .ckpt, "
            "bit-exactly from where it stopped (on any number of ranks that divides --batch-size); "
            "with --data or --records, on those (which must hold the records it trained on)"),
        AP_OPT("--resume-other-data", AP_FLAG, &A->resume_other_data, NULL,
               "--resume: continue on records other than those the checkpoint trained on"),
        AP_OPT("--noval", AP_FLAG, &A->noval, NULL, "validate only after the final epoch"),
        AP_OPT("--nosave", AP_FLAG, &A->nosave, NULL, "save only the final checkpoint"),
        AP_RANGE("--save-period", AP_LONG, &A->save_period, "N",
                 "save a checkpoint every N epochs (default -1: off)", -1, 1000000),
        AP_SECTION(
            "Distributed (docs/distributed.md; ranks from torchrun, Slurm or mpirun variables)"),
        AP_RANGE("--nproc-per-node", AP_LONG, &A->nproc, "N",
                 "start N local ranks (TCP on 127.0.0.1; default 1)", 1, 1024),
        { .names = "--dist-backend",
          .kind = AP_CALL,
          .dst = &A->dist_backend,
          .metavar = "B",
          .help = "auto, tcp or mpi (default auto: mpi under mpirun, else tcp)",
          .call = parse_backend },
        { .names = "--dist-timeout",
          .kind = AP_DOUBLE,
          .dst = &A->dist_timeout,
          .metavar = "S",
          .help = "seconds a rank waits for the others in a collective before the job fails "
                  "(default 1800); also bounds the rendezvous",
          .lo = 0,
          .hi = 604800,
          .open_lo = true },
        AP_OPT("--sync-bn", AP_FLAG, &A->sync_bn, NULL,
               "SyncBatchNorm: BatchNorm statistics over the global batch (all ranks), as "
               "PyTorch's; no effect on one rank"),
        AP_RANGE("--bucket-cap-mb", AP_DOUBLE, &A->bucket_cap_mb, "MB",
                 "gradient all-reduce bucket cap in MiB (default 25, as DDP's; the first bucket of "
                 "a backward closes at min(1, MB))",
                 4096.0 / 1048576.0, 65536),
        AP_OPT("--no-grad-overlap", AP_FLAG, &A->no_grad_overlap, NULL,
               "all-reduce the gradients after backward instead of in buckets during it (the same "
               "sums; for comparison)"),
        AP_SECTION("Device path and precision"),
        AP_OPT("--device-path", AP_FLAG, &A->device_path, NULL,
               "with --device cpu: run the GPU training path (device arenas, the resident step, "
               "GPU augmentation) on the CPU ops; a test mode"),
        AP_OPT("--host-aug", AP_FLAG, &A->host_aug, NULL,
               "with the resident step (GPU, SGD): augment on the host instead of in kernels on "
               "the device (the same batches)"),
        AP_OPT("--cuda-graph", AP_FLAG, &A->cuda_graph, NULL,
               "capture the resident step of the full batches once as a CUDA graph and replay it "
               "(one rank, SGD; else a log line and the direct step); with --device-path the same "
               "code on the CPU; with --bench the timed steps are replays"),
        { .names = "--freeze",
          .kind = AP_LONGS,
          .dst = A->freeze,
          .metavar = "N [R ...]",
          .help = "freeze layers: one number N freezes yaml rows 0..N-1 (backbone of yolov5: 10), "
                  "several freeze those rows (train.py's --freeze; default 0: none)",
          .lo = 0,
          .hi = TRN_MODEL_MAX_LAYERS - 1,
          .max_n = 64,
          .n = &A->n_freeze },
        AP_OPT("--single-cls", AP_FLAG, &A->single_cls, NULL,
               "train multi-class data as single-class (every label is class 0, \"item\")"),
        AP_OPT("--evolve", AP_OPTSTR, &A->evolve, "[N]",
               "evolve hyperparameters for N generations (default 300; train.py's): each trains "
               "--epochs with a mutation of the best earlier results, into runs/evolve/NAME "
               "(evolve.csv, hyp_evolve.yaml, evolve.png)"),
        AP_OPT("--rect", AP_FLAG, &A->rect, NULL,
               "rectangular training (train.py's): batches of images of like aspect ratio, each "
               "letterboxed to its own shape; no mosaic, no shuffle; one process only"),
        AP_OPT("--multi-scale", AP_FLAG, &A->multi_scale, NULL,
               "vary img-size +/- 50% (train.py's): each batch resized to a random multiple of "
               "the grid in [0.5, 1.5] x --img"),
        AP_OPT("--image-weights", AP_FLAG, &A->image_weights, NULL,
               "use weighted image selection for training: each epoch draws its images with "
               "replacement, weighted by the rarity of their classes and (1 - mAP)^2 of the "
               "last validation (train.py's; one process only)"),
        AP_RANGE("--label-smoothing", AP_DOUBLE, &A->label_smoothing, "EPS",
                 "label smoothing epsilon (train.py's; default 0.0)", 0.0, 0.999999),
        AP_OPT("--noplots|--no-plots", AP_FLAG, &A->noplots, NULL,
               "save no plot files (train_batch0..2.jpg, results.png, the final validation's "
               "curves, confusion matrix and batches)"),
        AP_OPT("--noautoanchor", AP_FLAG, &A->noautoanchor, NULL,
               "disable AutoAnchor (train.py's check_anchors: below 0.98 best possible recall "
               "the anchors are evolved for the data before training)"),
        AP_OPT("--cudnn-any-algo", AP_FLAG, &A->any_algo, NULL,
               "GPU: let each convolution take an algorithm that is not deterministic (PyTorch's "
               "cudnn.deterministic False): the heuristics' first, or with --cudnn-tune the "
               "fastest timed; the default takes a deterministic one, as train.py's "
               "init_seeds(deterministic=True)"),
        AP_OPT("--cudnn-plan", AP_STR, &A->cudnn_plan, "FILE",
               "GPU: the convolutions' algorithms from FILE (written by --cudnn-tune; a key of "
               "another GPU or cuDNN falls back to the heuristics); without it each takes the "
               "first deterministic algorithm cuDNN's heuristics rank, untimed, the same in "
               "every run; the run directory keeps the used entries (cudnn_plans.txt)"),
        AP_OPT("--cudnn-tune", AP_FLAG, &A->cudnn_tune, NULL,
               "GPU: time the algorithms of every convolution the plan file lacks (cudnnFind*, "
               "as PyTorch's cudnn.benchmark) and write them to --cudnn-plan FILE, so that "
               "later runs read them and never time"),
        { .names = "--amp",
          .kind = AP_CALL,
          .dst = &A->amp,
          .metavar = "T",
          .help = "the convolutions' dtype: bf16, fp16 (with the dynamic loss scaler) or fp32 "
                  "(default: fp32 on --device cpu, bf16 on a GPU; a resume keeps the checkpoint's)",
          .call = parse_amp },
        { .names = "--val-amp",
          .kind = AP_CALL,
          .dst = &A->val_amp,
          .metavar = "T",
          .help = "the validation's convolutions: bf16, fp16 or fp32 (default: the training's "
                  "--amp on a GPU, as train.py's half=amp; fp32 on --device cpu)",
          .call = parse_amp },
        { .names = "--val-half",
          .kind = AP_SET,
          .dst = &A->val_amp,
          .metavar = NULL,
          .help = "--val-amp fp16 (val.py --half)",
          .choices = "fp16" },
        TOOL_CPU_ENGINE_OPT(&A->cpu_engine),
        AP_SECTION("Output"),
        AP_OPT("--project", AP_STR, &A->project, "DIR", "save to DIR/NAME (default runs/train)"),
        AP_OPT("--name", AP_STR, &A->name, "NAME",
               "run name (default exp; exp2, exp3, ... when taken)"),
        AP_OPT("--exist-ok", AP_FLAG, &A->exist_ok, NULL, "reuse DIR/NAME instead of incrementing"),
        AP_SECTION("Testing"),
        AP_RANGE("--stop-after-steps", AP_LONG, &A->stop_after, "K",
                 "stop after K batches: save weights/last.ckpt and exit 0", 1, (double)LONG_MAX),
        AP_OPT("--cuda-graph-test-fail", AP_FLAG, &A->cuda_graph_fail, NULL,
               "with --cuda-graph: act as if the capture failed (fallback)"),
        AP_RANGE("--amp-test-inf-at", AP_LONG, &A->amp_inf_at, "NI",
                 "with --amp fp16: put an Inf into batch NI's loss gradient (the scaler must skip "
                 "that step and halve its scale)",
                 0, (double)LONG_MAX),
        AP_SECTION("Tools"),
        AP_OPT("--summary", AP_FLAG, &A->summary, NULL,
               "print the model summary of --cfg and exit"),
        AP_OPT("--bench", AP_FLAG, &A->bench_step, NULL,
               "time the training step alone on synthetic batches of --cfg at --img and "
               "--batch-size on --device (no records): img/s, ms per phase, TFLOP/s, memory; "
               "--json for one object"),
        AP_RANGE("--bench-steps", AP_LONG, &A->bench_steps, "N",
                 "--bench: timed steps (default 10)", 1, 100000),
        AP_RANGE("--bench-warmup", AP_LONG, &A->bench_warmup, "N",
                 "--bench: untimed steps first (default 3)", 0, 100000),
        AP_OPT("--bench-data", AP_FLAG, &A->bench, NULL,
               "run only the loader at full augmentation; print images/s"),
        { .names = "--seconds",
          .kind = AP_DOUBLE,
          .dst = &A->seconds,
          .metavar = "S",
          .help = "--bench-data measuring time (default 10)",
          .lo = 0,
          .hi = 86400,
          .open_lo = true },
        AP_OPT("--cache", AP_OPTSTR, &A->cache, "[ram|disk]",
               "train.py's --cache: ram (the default value) keeps the decoded training images in "
               "RAM as they are first read (refused with a warning when they would not fit); "
               "disk: the records already are the decoded images on disk, nothing to do"),
        AP_OPT("--page-cache", AP_FLAG, &A->page_cache, NULL,
               "--bench-data: buffered reads instead of O_DIRECT"),
        AP_OPT("--direct", AP_FLAG, &A->direct, NULL,
               "--bench-data: O_DIRECT reads even when the dataset fits in a quarter of RAM "
               "(where the loader reads through the page cache by default)"),
        AP_OPT("--no-read-ahead", AP_FLAG, &A->no_read_ahead, NULL,
               "--bench-data: each loader worker reads a sample's records only when it builds "
               "it, instead of while it builds the one before (to measure the overlap)"),
        AP_OPT("--json", AP_FLAG, &A->json, NULL, "--bench and --bench-data: one JSON object"),
        AP_OPT("--plot", AP_FLAG, &A->plot, NULL,
               "write train_batch0..2.jpg (batches with labels) to the run directory and exit"),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = PROG,
        .usage = "--records FILE [options]",
        .about = "Train YOLOv5 from ffr record files (yolo-pack output). Flags follow "
                 "ultralytics' train.py where it has them.",
        .epilog = EPILOG,
        .opts = t,
        .n_opts = sizeof t / sizeof t[0],
    };
    const int rc = ap_parse(&sp, argc, argv);
    if (rc) return rc;
    if (!A->project[0] || !A->name[0])
        return ap_usage_error(&sp, "--project and --name must not be empty");
    if (A->cache && A->cache[0] && strcmp(A->cache, "ram") && strcmp(A->cache, "disk"))
        return ap_usage_error(&sp, "--cache: ram or disk, not '%s'", A->cache);
    if (A->direct && A->page_cache)
        return ap_usage_error(&sp, "--direct and --page-cache exclude each other");
    if (A->batch == 0) return ap_usage_error(&sp, "--batch-size: 1 or more, or -1 (AutoBatch)");
    if (A->batch == -1 && (A->bench_step || A->bench || A->plot || A->nproc > 1))
        return ap_usage_error(&sp, "--batch-size -1 (AutoBatch) is for training on one process");
    return 0;
}

static void log_cb(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, PROG ": %s\n", msg);
}

/* The CUDA device this process uses for --device D: -1 for the CPU. D is "cpu", a list "0,1"
 * (local rank k takes the k-th, wrapping), or empty/absent: device 0 when one is visible.
 * Returns -2 (after saying why) when a device is asked for and none is usable. */
static int pick_gpu(const char *d, int local_rank)
{
    const int count = kern_cuda_device_count();
    if (!d || !d[0]) return count > 0 ? local_rank % count : -1;
    if (!strcmp(d, "cpu")) return -1;
    int ids[64], n = 0;
    for (const char *p = d; *p && n < 64;) {
        ids[n++] = (int)strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    const int id = n ? ids[local_rank % n] : 0;
    if (id >= count) {
        fprintf(stderr,
                PROG ": --device %s: CUDA device %d is not there (%d visible%s)\n"
                     "hint: --device cpu runs the CPU reference path\n",
                d, id, count, count ? "" : "; or this build has no CUDA");
        return -2;
    }
    return id;
}

/* --amp as a kern dtype; without it fp32 on the CPU, bf16 on a GPU (gpu >= 0). */
static int amp_dtype(const struct args *A, int gpu)
{
    enum trn_amp_dtype t = gpu >= 0 ? TRN_AMP_BF16 : TRN_AMP_OFF;
    if (A->amp) trn_amp_dtype_parse(A->amp, &t);
    return t == TRN_AMP_BF16 ? KERN_DT_BF16 : t == TRN_AMP_FP16 ? KERN_DT_F16 : KERN_DT_F32;
}

static int do_bench_step(const struct args *A)
{
    char path[4096];
    if (trn_model_cfg_find(A->cfg, TRN_MODELS_DIR, path, sizeof path)) {
        fprintf(stderr, PROG ": %s: model yaml not found\n", A->cfg);
        return 1;
    }
    const int gpu = pick_gpu(A->device, 0);
    if (gpu == -2) return 1;
    struct trn_bench_step_opts o;
    trn_bench_step_opts_default(&o);
    o.cfg = path;
    o.img = (int)A->img;
    o.batch = (int)A->batch;
    o.device = gpu;
    o.device_path = gpu < 0 && A->device_path;
    o.threads = trn_cli_threads(A->threads, 1); /* as the training loop: never oversubscribed */
    o.steps = (int)A->bench_steps;
    o.warmup = (int)A->bench_warmup;
    o.seed = (uint64_t)A->seed;
    o.cuda_graph = A->cuda_graph;
    o.any_algo = A->any_algo;
    o.cudnn_plan = A->cudnn_plan;
    o.cudnn_tune = A->cudnn_tune;
    o.amp = amp_dtype(A, gpu);
    o.cpu_engine = tool_cpu_engine(A->cpu_engine);
    struct trn_bench_step_result r;
    char err[512] = "";
    const int rc = trn_bench_step_run(&o, &r, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": --bench: %s\n", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    const char *slash = strrchr(path, '/');
    if (A->json)
        printf("{\"impl\": \"ffyolo\", \"model\": \"%s\", \"device\": \"%s\", \"img\": %d, "
               "\"batch\": %d, \"img_per_s\": %.3f, \"ms_step\": %.4f, \"ms_forward\": %.4f, "
               "\"ms_loss\": %.4f, \"ms_backward\": %.4f, \"ms_optimizer\": %.4f, "
               "\"ms_ema\": %.4f, \"gflops_img\": %.4f, \"tflops\": %.4f, \"net_bytes\": %zu, "
               "\"peak_bytes\": %zu, \"resident\": %s, \"graph\": %s, \"params\": %lld, "
               "\"loss\": %.9g, \"steps\": %d, \"threads\": %d, \"blas_threads\": %d, "
               "\"os_threads\": %d, \"engine\": \"%s\", \"plan_hash\": \"%016llx\", "
               "\"plans_table\": %d, \"plans_heur\": %d, \"plans_find\": %d}\n",
               slash ? slash + 1 : path, r.on_device ? "cuda" : "cpu", o.img, o.batch, r.img_per_s,
               r.ms_step, r.ms_forward, r.ms_loss, r.ms_backward, r.ms_optimizer, r.ms_ema,
               r.gflops_img, r.tflops, r.net_bytes, r.peak_bytes, r.resident ? "true" : "false",
               r.graph ? "true" : "false", r.params, r.loss, o.steps, r.threads, r.blas_threads,
               r.os_threads, r.engine, (unsigned long long)r.plan_hash,
               r.plan_counts[KERN_PLAN_HOW_TABLE], r.plan_counts[KERN_PLAN_HOW_HEUR],
               r.plan_counts[KERN_PLAN_HOW_FIND]);
    else
        printf("%s img %d batch %d on %s: %.1f img/s, %.2f ms/step (forward %.2f, loss %.2f, "
               "backward %.2f, optimizer %.2f, EMA %.2f), %.3f TFLOP/s, net %.0f MiB, peak %.0f "
               "MiB%s%s; %s\n",
               slash ? slash + 1 : path, o.img, o.batch, r.on_device ? "cuda" : "cpu", r.img_per_s,
               r.ms_step, r.ms_forward, r.ms_loss, r.ms_backward, r.ms_optimizer, r.ms_ema,
               r.tflops, (double)r.net_bytes / (1 << 20), (double)r.peak_bytes / (1 << 20),
               r.resident ? " (resident step)" : "",
               r.graph ? " (graph replays: phases not split)" : "", r.engine);
    return 0;
}

static int do_summary(const struct args *A)
{
    char path[4096];
    if (trn_model_cfg_find(A->cfg, TRN_MODELS_DIR, path, sizeof path)) {
        fprintf(stderr,
                PROG ": %s: model yaml not found\n"
                     "hint: give a path, or a name from models (yolov5n/s/m/l/x), or set "
                     "FFYOLO_MODELS_DIR\n",
                A->cfg);
        return 1;
    }
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    o.nc = (int)A->nc;
    struct trn_model *m = NULL;
    char err[512] = "";
    const int rc = trn_model_load(path, &o, &m, err, sizeof err);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    const int need = trn_model_summary(m, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (!text) {
        fprintf(stderr, PROG ": out of memory\n");
        trn_model_destroy(m);
        return 1;
    }
    trn_model_summary(m, text, (size_t)need + 1);
    if (trn_model_info(m)->anchors_reversed) printf("AutoAnchor: Reversing anchor order\n");
    fputs(text, stdout);
    free(text);
    trn_model_destroy(m);
    return 0;
}

static int do_bench(const struct args *A, const struct trn_hyp *hyp)
{
    struct trn_bench_data_opts o;
    trn_bench_data_opts_default(&o);
    o.records = A->records;
    o.workers = (unsigned)A->workers;
    o.seconds = A->seconds;
    o.batch_size = (int)A->batch;
    o.img_size = (int)A->img;
    o.seed = (uint64_t)A->seed;
    o.page_cache = A->page_cache;
    o.direct = A->direct;
    o.read_ahead = !A->no_read_ahead;
    o.cache_ram = A->cache && strcmp(A->cache, "disk") != 0;
    o.hyp = *hyp;
    o.log = log_cb;
    struct trn_bench_data_result r;
    char err[768];
    const int rc = trn_bench_data_run(&o, &r, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s\n", err); /* a repack hint is in it when size is the cause */
        return 1;
    }
    if (A->json)
        printf("{\"images_per_s\": %.2f, \"workers\": %u, \"batch_size\": %ld, \"img\": %ld, "
               "\"seconds\": %.3f, \"images\": %llu, \"bad_records\": %llu, "
               "\"mosaic\": %g, \"mixup\": %g, \"cache\": \"%s\"}\n",
               r.images_per_s, r.workers, A->batch, A->img, r.seconds, (unsigned long long)r.images,
               (unsigned long long)r.bad_records, hyp->mosaic, hyp->mixup,
               o.cache_ram ? "ram" : "none");
    else
        printf("%.1f images/s (%u workers, batch %ld, img %ld, %llu images in %.1f s, mosaic %g, "
               "mixup %g)\n",
               r.images_per_s, r.workers, A->batch, A->img, (unsigned long long)r.images, r.seconds,
               hyp->mosaic, hyp->mixup);
    return 0;
}

static int do_plot(const struct args *A, const struct trn_hyp *hyp)
{
    char dir[PATH_MAX - 32];
    int rc = trn_run_dir(A->project, A->name, A->exist_ok, dir, sizeof dir);
    if (rc < 0) {
        fprintf(stderr, PROG ": cannot create the run directory %s/%s...: %s\n", A->project,
                A->name, strerror(-rc));
        return 1;
    }
    struct ffr_reader *r = NULL;
    char err[768];
    rc = ffr_reader_open(&r, A->records, NULL, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s\n", err[0] ? err : ffr_strerror(rc));
        return 1;
    }
    size_t mlen = 0;
    const char *meta = ffr_reader_metadata(r, &mlen);
    struct trn_plot_names names;
    if (trn_plot_names_parse(meta, mlen, &names) < 0) {
        fprintf(stderr, PROG ": out of memory\n");
        ffr_reader_close(r);
        return 1;
    }
    struct trn_loader_opts lo;
    trn_loader_opts_default(&lo);
    lo.workers = (unsigned)A->workers;
    lo.batch_size = (int)A->batch;
    lo.img_size = (int)A->img;
    lo.seed = (uint64_t)A->seed;
    lo.hyp = *hyp;
    lo.log = log_cb;
    struct trn_loader *l = NULL;
    rc = trn_loader_create(r, &lo, &l, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s: %s\n", A->records, err);
    }
    for (int k = 0; k < 3 && rc == 0; k++) {
        struct trn_batch b;
        rc = trn_loader_next(l, &b);
        if (rc < 0) {
            fprintf(stderr, PROG ": %s\n", trn_loader_error(l));
            break;
        }
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/train_batch%d.jpg", dir, k);
        rc = trn_plot_batch(&b, &names, path, err, sizeof err);
        if (rc < 0)
            fprintf(stderr, PROG ": %s\n", err);
        else
            printf("%s\n", path);
        if (b.step + 1 == b.steps) break; /* a one-batch epoch: ultralytics plots what exists */
    }
    trn_loader_destroy(l);
    trn_plot_names_free(&names);
    ffr_reader_close(r);
    return rc < 0 ? 1 : 0;
}

static volatile sig_atomic_t stop_signal;

/*
 * SIGINT, SIGTERM and SIGUSR1: the first asks for a clean stop; a second SIGINT ends the process
 * at once (a checkpoint being written then is still a temporary: the previous last.ckpt stays
 * intact), repeated SIGTERM / SIGUSR1 are absorbed (see the top). They are blocked in the threads
 * the run creates (the loader's workers and the compute threads inherit the mask, so none of
 * their io_uring waits or reads is interrupted) and taken by a sigwait thread; threads that
 * existed before (OpenBLAS starts its pool at load time) run the same logic as a handler. Only
 * async-signal-safe work: one store to a sig_atomic_t, or _exit.
 */
static void on_stop_signal(int sig)
{
    if (sig == SIGINT && stop_signal) _exit(128 + sig);
    if (!stop_signal) stop_signal = sig;
}

static void *signal_thread(void *arg)
{
    const sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) == 0) on_stop_signal(sig);
    }
    return NULL;
}

static void print_line(void *ctx, const char *line)
{
    (void)ctx;
    printf("%s\n", line);
    fflush(stdout);
}

/* --resume: "" = the newest PROJECT/NAME/weights/last.ckpt; a .ckpt file; or a run directory. */
static int find_resume(const struct args *A, char *ckpt, size_t cap, char *dir, size_t dcap)
{
    struct stat st;
    if (A->resume[0]) {
        if (stat(A->resume, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (snprintf(ckpt, cap, "%s/weights/last.ckpt", A->resume) >= (int)cap)
                return -ENAMETOOLONG;
        } else if (snprintf(ckpt, cap, "%s", A->resume) >= (int)cap) {
            return -ENAMETOOLONG;
        }
    } else {
        DIR *d = opendir(A->project);
        if (!d) return -errno;
        double newest = -1;
        const struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[PATH_MAX];
            if (snprintf(p, sizeof p, "%s/%s/weights/last.ckpt", A->project, e->d_name) >=
                (int)sizeof p)
                continue;
            if (stat(p, &st) != 0) continue;
            const double t = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
            if (t > newest && strlen(p) < cap) {
                newest = t;
                snprintf(ckpt, cap, "%s", p);
            }
        }
        closedir(d);
        if (newest < 0) return -ENOENT;
    }
    if (stat(ckpt, &st) != 0) return -errno;
    /* the run directory: .../weights/last.ckpt -> ... */
    if (snprintf(dir, dcap, "%s", ckpt) >= (int)dcap) return -ENAMETOOLONG;
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, dcap, ".");
    }
    return 0;
}

/* --resume: the records to read instead of the checkpoint's, into rec and val (empty: the
 * checkpoint's), and the dataset yaml they come from in *data. --data given: its packs at the
 * checkpoint's img. Else, when the checkpoint's records are gone (a newer pack of its dataset
 * replaced them once the job that held them ended) and it names its --data: packed again from
 * that (the same source gives the same records; the trainer checks their content either way).
 * Returns 0 or 1 (after saying why). */
static int resume_records(const struct args *A, const char *ckpt, char *rec, char *val, size_t cap,
                          const char **data)
{
    rec[0] = val[0] = '\0';
    *data = A->data;
    if (!A->data && A->records) return 0;
    struct trn_ckpt *C = NULL;
    char err[768] = "";
    if (trn_ckpt_open(ckpt, &C, err, sizeof err) < 0) return 0; /* the trainer says why */
    int64_t img = 0;
    const char *from = trn_ckpt_get(C, "data"), *ck_rec = trn_ckpt_get(C, "records");
    static char src[PATH_MAX], was[PATH_MAX];
    /* copies: the checkpoint's strings go with it */
    snprintf(was, sizeof was, "%s", ck_rec ? ck_rec : "");
    snprintf(src, sizeof src, "%s",
             A->data                                               ? A->data
             : from && from[0] && was[0] && access(was, F_OK) != 0 ? from
                                                                   : "");
    const int ok_img = trn_ckpt_i64(C, "img", 32, 16383, &img) == 0;
    trn_ckpt_close(C);
    if (!src[0] || !ok_img) return 0;
    if (!A->data)
        fprintf(stderr, PROG ": --resume: %s is gone; packing it again from %s\n", was, src);
    *data = src;
    int rc = data_pack(PROG, src, "train", (int)img, A->pack_dir, A->pack_codec, false, rec, cap);
    if (rc == 1) fprintf(stderr, PROG ": --data %s: no train split\n", src);
    if (rc) return 1;
    rc = data_pack(PROG, src, "val", (int)img, A->pack_dir, A->pack_codec, false, val, cap);
    return rc < 0;
}

/* --cache-dir: the dataset's shards copied (or, for an http(s) URL, downloaded) into the
 * node-local cache, verified, and the cached manifest's path in local. Every local rank calls
 * it; the cache's locks fetch each shard once per node. Returns 0 or 1 (after saying why). */
static int cache_dataset(const struct args *A, const char *src, char *local, size_t cap)
{
    struct ffio_http *h = NULL;
    struct ffr_cache_source cs;
    char err[1024] = "";
    int rc = 0;
    if (ffio_http_is_url(src)) {
        if ((rc = ffio_http_create(NULL, &h)) < 0) {
            fprintf(stderr, PROG ": %s: %s\n", src,
                    rc == -ENOTSUP ? "this build reads no URLs (built without libcurl)"
                                   : strerror(-rc));
            return 1;
        }
        ffio_http_cache_source(h, &cs);
    }
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.source = h ? &cs : NULL;
    co.max_bytes = A->cache_max;
    struct ffr_cache *c = NULL;
    rc = ffr_cache_open(&c, A->cache_dir, &co, err, sizeof err);
    if (rc >= 0) rc = ffr_cache_dataset(c, src, local, cap, err, sizeof err);
    ffr_cache_close(c);
    ffio_http_destroy(h);
    if (rc < 0) {
        fprintf(stderr, PROG ": --cache-dir %s: %s\n", A->cache_dir,
                err[0] ? err : ffr_strerror(rc));
        return 1;
    }
    if (rc > 0)
        fprintf(stderr, PROG ": %s: %d shard(s) fetched into %s, every byte verified\n", src, rc,
                A->cache_dir);
    else
        fprintf(stderr,
                PROG ": %s: every shard reused from %s (size, trailer and index checked; each "
                     "record is checked as it is read, and a shard with a damaged record is "
                     "evicted)\n",
                src, A->cache_dir);
    return 0;
}

/*
 * --batch-size -1, train.py's check_train_batch_size -> autobatch: on a GPU, the net's device
 * memory at batch 1 and 2 (trn_net_memory_bytes, the training net as the run builds it) gives
 * a line, and the batch is the largest whose memory fits AUTOBATCH_FRACTION of the device's
 * free memory; on the CPU ultralytics' default 16. Returns the batch, or -1 after saying why.
 */
#define AUTOBATCH_FRACTION 0.6
static long autobatch(const struct args *A, const char *cfg_path, int gpu)
{
    if (gpu < 0) {
        printf("AutoBatch: CUDA not detected, using default CPU batch-size 16\n");
        return 16;
    }
    struct trn_model *m = NULL;
    char err[512] = "";
    if (trn_weights_load(A->weights, A->weights ? NULL : cfg_path, (int)A->nc, &m, NULL, NULL, err,
                         sizeof err) < 0) {
        fprintf(stderr, PROG ": AutoBatch: %s\n", err);
        return -1;
    }
    size_t bytes[2] = { 0, 0 }, used = 0, total = 0;
    int rc = 0;
    for (int b = 1; b <= 2 && rc == 0; b++) {
        struct trn_net_opts no;
        trn_net_opts_default(&no);
        no.device = gpu;
        no.train = true;
        struct trn_net *net = NULL;
        rc = trn_net_create(m, b, (int)A->img, (int)A->img, &no, &net, err, sizeof err);
        if (rc == 0) bytes[b - 1] = trn_net_memory_bytes(net);
        trn_net_destroy(net);
    }
    trn_model_destroy(m);
    if (rc == 0) rc = kern_cuda_mem_info(&used, &total);
    if (rc < 0 || bytes[1] <= bytes[0]) {
        fprintf(stderr, PROG ": AutoBatch: cannot measure the net on CUDA device %d (%s)\n", gpu,
                err[0] ? err : trn_strerror(rc));
        return -1;
    }
    const double gb = 1 << 30, per = (double)(bytes[1] - bytes[0]), fixed = (double)bytes[0] - per;
    const double freeb = (double)(total - used);
    printf("AutoBatch: CUDA:%d %.2fG total, %.2fG used, %.2fG free\n", gpu, total / gb, used / gb,
           freeb / gb);
    long b = (long)((freeb * AUTOBATCH_FRACTION - fixed) / per);
    if (b < 1) {
        printf("AutoBatch: WARNING: the model does not fit at batch 1 within %.0f%%; using "
               "batch-size 16\n",
               AUTOBATCH_FRACTION * 100);
        return 16;
    }
    if (b > 65536) b = 65536;
    const double frac = (fixed + per * (double)b + (double)used) / (double)total;
    printf("AutoBatch: Using batch-size %ld for CUDA:%d %.2fG/%.2fG (%.0f%%)\n", b, gpu,
           frac * total / gb, total / gb, frac * 100);
    return b;
}

static int do_train(const struct args *A, const struct trn_hyp *hyp, const char *cfg_path,
                    struct trn_dist *dist, int local_world, const char *evolve_dir,
                    struct trn_train_result *res_out)
{
    struct trn_train_opts o;
    trn_train_opts_default(&o);
    char dir[PATH_MAX - 64], ckpt[PATH_MAX];
    int rc;
    const int rank = trn_dist_rank(dist);
    if (A->resume) {
        rc = find_resume(A, ckpt, sizeof ckpt, dir, sizeof dir);
        if (rc < 0) {
            fprintf(stderr,
                    PROG ": --resume: no checkpoint at %s: %s\n"
                         "hint: give the run directory (runs/train/exp) or its "
                         "weights/last.ckpt\n",
                    A->resume[0] ? A->resume : A->project, strerror(-rc));
            return 1;
        }
        o.resume = ckpt;
        o.resume_other_data = A->resume_other_data;
    } else if (evolve_dir) {
        snprintf(dir, sizeof dir, "%s", evolve_dir);
        o.evolve = true;
    } else if (rank == 0) {
        rc = trn_run_dir(A->project, A->name, A->exist_ok, dir, sizeof dir);
        if (rc < 0) {
            fprintf(stderr,
                    PROG ": cannot create the run directory %s/%s: %s\n"
                         "hint: choose a writable --project\n",
                    A->project, A->name, strerror(-rc));
            return 1;
        }
    }
    if (rank != 0) {
        /* rank 0 speaks for the job; the others only report their own failures */
    } else if (A->nosave || A->save_period != -1)
        fprintf(stderr, PROG ": note: --nosave and --save-period are not used yet\n");
    if (rank == 0 && A->noval && !A->val_records)
        fprintf(stderr, PROG ": note: --noval without --val-records: nothing to validate\n");
    o.gpu = pick_gpu(A->device, dist ? trn_dist_local_rank(dist) : 0);
    if (o.gpu == -2) return 1;
    if (rank == 0 && o.gpu >= 0)
        fprintf(stderr,
                PROG ": the network runs on CUDA device %d; with SGD the loss, optimizer and "
                     "EMA too (the resident step); validation on the CPU\n",
                o.gpu);
    o.records = A->records;
    o.val_records = A->val_records;
    o.data = A->data;
    static char repacked[2][PATH_MAX];
    if (A->resume) {
        if (resume_records(A, ckpt, repacked[0], repacked[1], sizeof repacked[0], &o.data))
            return 1;
        if (repacked[0][0]) o.records = repacked[0];
        if (repacked[1][0]) o.val_records = repacked[1];
    }
    static char cached[2][PATH_MAX];
    if (A->cache_dir && A->records) {
        if (cache_dataset(A, A->records, cached[0], sizeof cached[0])) return 1;
        o.records = cached[0];
        o.cache_dir = A->cache_dir; /* a damaged cached shard is evicted (train.h) */
    }
    if (A->cache_dir && A->val_records) {
        if (cache_dataset(A, A->val_records, cached[1], sizeof cached[1])) return 1;
        o.val_records = cached[1];
    }
    if (!A->cache_dir && ((o.records && ffio_http_is_url(o.records)) ||
                          (o.val_records && ffio_http_is_url(o.val_records)))) {
        fprintf(stderr, PROG ": reading records by URL needs --cache-dir DIR (a node-local copy, "
                             "verified)\n");
        return 1;
    }
    o.cfg = cfg_path;
    o.weights = A->weights;
    o.run_dir = rank == 0 || A->resume ? dir : NULL; /* only rank 0 writes */
    o.dist = dist;
    o.hyp_path = A->hyp;
    o.project = A->project;
    o.name = A->name;
    o.device = A->device ? A->device : "cpu";
    o.hyp = *hyp;
    o.img = (int)A->img;
    o.batch_size = (int)A->batch;
    if (A->batch == -1 && !A->resume) {
        /* train.py: RANK == -1 and batch_size == -1 only: every rank must agree on it */
        if (trn_dist_world(dist) > 1) {
            fprintf(stderr, PROG ": --batch-size -1 (AutoBatch) is for one process; give the "
                                 "global batch with several ranks\n");
            return 1;
        }
        const long b = autobatch(A, cfg_path, o.gpu);
        if (b < 0) return 1;
        o.batch_size = (int)b;
    }
    o.epochs = (int)A->epochs;
    o.nc = (int)A->nc;
    o.workers = (unsigned)A->workers;
    /* one compute thread per core (shared by the ranks of this node): OpenBLAS's own threads
     * beside the loader's oversubscribe */
    o.threads = trn_cli_threads(A->threads, local_world);
    o.seed = (uint64_t)A->seed;
    o.optimizer = !strcmp(A->optimizer, "Adam")    ? TRN_OPTIM_ADAM
                  : !strcmp(A->optimizer, "AdamW") ? TRN_OPTIM_ADAMW
                                                   : TRN_OPTIM_SGD;
    o.cos_lr = A->cos_lr;
    o.sync_bn = A->sync_bn; /* when resuming, the checkpoint's setting wins */
    o.device_path = A->device_path;
    o.host_aug = A->host_aug;
    o.cuda_graph = A->cuda_graph;
    o.any_algo = A->any_algo;
    o.cudnn_plan = A->cudnn_plan;
    o.cudnn_tune = A->cudnn_tune;
    o.noautoanchor = A->noautoanchor;
    o.noplots = A->noplots;
    o.cache_ram = A->cache && strcmp(A->cache, "disk") != 0;
    if (A->cache && !strcmp(A->cache, "disk"))
        fprintf(stderr, PROG ": --cache disk: the records are already the decoded images on disk "
                             "(train.py's .npy cache); nothing more to cache\n");
    o.label_smoothing = A->label_smoothing;
    o.single_cls = A->single_cls;
    o.image_weights = A->image_weights;
    o.rect = A->rect;
    o.multi_scale = A->multi_scale;
    /* train.py: freeze = [f'model.{x}.' for x in (freeze if len(freeze) > 1 else
     * range(freeze[0]))] */
    for (int i = 0; A->n_freeze == 1 && i < A->freeze[0]; i++)
        o.frozen[i / 64] |= UINT64_C(1) << (i % 64);
    for (int i = 0; A->n_freeze > 1 && i < A->n_freeze; i++)
        o.frozen[A->freeze[i] / 64] |= UINT64_C(1) << (A->freeze[i] % 64);
    o.cuda_graph_fail = A->cuda_graph_fail;
    o.amp = amp_dtype(A, o.gpu); /* when resuming, the checkpoint's */
    if (A->val_amp) {
        enum trn_amp_dtype v = TRN_AMP_OFF;
        trn_amp_dtype_parse(A->val_amp, &v);
        o.val_amp = v == TRN_AMP_BF16   ? KERN_DT_BF16
                    : v == TRN_AMP_FP16 ? KERN_DT_F16
                                        : KERN_DT_F32;
    }
    o.val_cpu_engine = tool_cpu_engine(A->cpu_engine);
    o.cpu_engine = o.val_cpu_engine; /* the training step and the validation alike */
    o.noval = A->noval;
    o.patience = (int)A->patience;
    o.stop_after = A->stop_after;
    o.amp_inf_ni = A->amp_inf_at;
    o.stop = &stop_signal;
    o.log = print_line;
    o.progress = tool_progress;
    o.progress_ctx = stdout;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    static sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGUSR1);
    pthread_t sig_thread;
    if (pthread_sigmask(SIG_BLOCK, &stop_set, NULL) != 0 ||
        pthread_create(&sig_thread, NULL, signal_thread, &stop_set) != 0) {
        fprintf(stderr, PROG ": cannot set up the signal handling thread\n");
        return 1;
    }
    pthread_detach(sig_thread);
    struct trn_train_result res;
    char err[1024] = "";
    rc = trn_train_run(&o, &res, err, sizeof err);
    if (rc < 0) {
        if (trn_dist_world(dist) > 1) {
            fprintf(stderr, PROG ": rank %d: %s\n" PROG ": rank %d: ending the job\n", rank,
                    err[0] ? err : trn_strerror(rc), rank);
            trn_dist_abort(dist, 1);
        }
        fprintf(stderr, PROG ": %s\n", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    if (rank == 0 && !evolve_dir)
        printf("%lld batches, %.2f img/s training (%.2f img/s with validation and saving); %s\n",
               (long long)res.batches, res.train_images_per_s, res.images_per_s, res.last_path);
    if (res_out) *res_out = res;
    /* SIGTERM / SIGUSR1 are preemption: saved, so success; SIGINT is the user's stop */
    if (rc == TRN_TRAIN_STOPPED && res.stop_signal == SIGINT) return 128 + SIGINT;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* --evolve: train.py's hyperparameter evolution (trainer/train/evolve.h)                     */

static int do_evolve(const struct args *A, const struct trn_hyp *hyp, const char *cfg_path,
                     struct trn_dist *dist, int local_world)
{
    long gens = 300;
    char *end = NULL;
    if (A->evolve[0] && ((gens = strtol(A->evolve, &end, 10)) < 1 || *end || gens > 100000))
        return ap_error(PROG, "--evolve: '%s' is not a generation count (1..100000)", A->evolve);
    if (trn_dist_world(dist) > 1)
        return ap_error(PROG, "--evolve is not compatible with multi-process (DDP) training, as "
                              "in train.py");
    if (A->resume)
        return ap_error(PROG, "--evolve continues an evolution with --exist-ok, not "
                              "--resume");
    /* train.py: the default project becomes runs/evolve */
    struct args B = *A;
    if (!strcmp(B.project, "runs/train")) B.project = "runs/evolve";
    char dir[PATH_MAX - 64];
    int rc = trn_run_dir(B.project, B.name, B.exist_ok, dir, sizeof dir);
    if (rc < 0) {
        fprintf(stderr, PROG ": cannot create the run directory %s/%s: %s\n", B.project, B.name,
                strerror(-rc));
        return 1;
    }
    const bool anchors = !A->noautoanchor; /* train.py: del hyp['anchors'] with --noautoanchor */
    char err[1024] = "", msg[8192];
    for (long g = 0; g < gens; g++) {
        double *rows = NULL, v[TRN_EVOLVE_MAX];
        int nr = 0;
        if ((rc = trn_evolve_csv_read(dir, anchors, &rows, &nr, err, sizeof err)) < 0) break;
        if (nr > 0)
            trn_evolve_mutate(rows, nr, anchors, (uint64_t)A->seed, (uint32_t)nr, v);
        else
            trn_evolve_from_hyp(hyp, anchors, v);
        free(rows);
        trn_evolve_constrain(v, anchors);
        struct trn_hyp h = *hyp;
        trn_evolve_to_hyp(v, anchors, &h);
        struct trn_train_result res;
        if (do_train(&B, &h, cfg_path, dist, local_world, dir, &res) != 0) return 1;
        if (res.epoch < A->epochs) {
            fprintf(stderr,
                    PROG ": --evolve: generation %d stopped before its last epoch; "
                         "evolve.csv keeps the %d finished (continue with --exist-ok)\n",
                    nr, nr);
            return 1;
        }
        const struct trn_train_metrics *m = &res.results;
        const double r[TRN_EVOLVE_RESULT] = { m->precision, m->recall, m->map50, m->map,
                                              m->box,       m->obj,    m->cls };
        if ((rc = trn_evolve_record(dir, anchors, r, v, msg, sizeof msg, err, sizeof err)) < 0)
            break;
        printf("%s\n\n", msg);
    }
    if (rc == 0 && (rc = trn_evolve_plot(dir, anchors, msg, sizeof msg, err, sizeof err)) == 0)
        printf("%s\nHyperparameter evolution finished %ld generations\nResults saved to %s\n"
               "Usage example: $ yolo-train --hyp %s/hyp_evolve.yaml\n",
               msg, gens, dir, dir);
    if (rc < 0) {
        fprintf(stderr, PROG ": --evolve: %s\n", err);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* --nproc-per-node: local ranks started by this process                                    */

#define RANKS_GRACE_S 5.0 /* after a rank fails, the others' time to end before SIGKILL */

static void launch_log(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, PROG ": %s\n", line);
}

/* --nproc-per-node N: this command line without the option, run N times (dist.h). --data was
 * resolved here, once: the ranks get the packs it names (--records, --val-records) instead, so
 * that none checks the pack cache again or could find another pack than its peers. */
static int spawn_local_ranks(const struct args *A, int argc, char **argv)
{
    char **cargv = calloc((size_t)argc + 5, sizeof *cargv);
    if (!cargv) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    const bool resolved = A->data && !A->resume;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--nproc-per-node") || (resolved && !strcmp(argv[i], "--data"))) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--nproc-per-node=", 17) ||
            (resolved && !strncmp(argv[i], "--data=", 7)))
            continue;
        cargv[n++] = argv[i];
    }
    if (resolved) {
        cargv[n++] = "--records";
        cargv[n++] = (char *)A->records;
        if (A->val_records) {
            cargv[n++] = "--val-records";
            cargv[n++] = (char *)A->val_records;
        }
    }
    const int rc = trn_dist_launch_local((int)A->nproc, cargv, RANKS_GRACE_S, launch_log, NULL);
    free(cargv);
    return rc;
}

/* Join the job the launcher's variables describe (a communicator of one without them). */
static int join_job(const struct args *A, struct trn_dist **dist, int *local_world)
{
    extern char **environ;
    struct trn_dist_env env;
    char err[768] = "";
    if (trn_dist_env_parse((const char *const *)environ, &env, err, sizeof err) < 0) {
        fprintf(stderr, PROG ": launcher environment: %s\n", err);
        return 1;
    }
    *local_world = env.local_world_size;
    struct trn_dist_opts o;
    trn_dist_opts_default(&o);
    trn_dist_backend_parse(A->dist_backend, &o.backend);
    o.timeout_s = A->dist_timeout;
    o.bucket_bytes = (size_t)(A->bucket_cap_mb * 1048576.0);
    o.overlap = !A->no_grad_overlap;
    const int rc = trn_dist_create(&env, &o, dist, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": rank %d of %d: cannot join the job: %s\n", env.rank, env.world_size,
                err[0] ? err : trn_dist_strerror(rc));
        return 1;
    }
    if (env.world_size > 1)
        fprintf(stderr, PROG ": rank %d of %d (local %d, pid %ld) joined over %s\n", env.rank,
                env.world_size, env.local_rank, (long)getpid(),
                trn_dist_backend_name(trn_dist_backend(*dist)));
    return 0;
}

int main(int argc, char **argv)
{
    tool_omp_wait(argv);
    struct args A;
    int rc = parse_args(argc, argv, &A);
    if (rc) return rc == AP_HELPED ? 0 : rc;
    if (A.summary) {
        if (!A.cfg) return ap_error(PROG, "--summary needs --cfg MODEL (e.g. --cfg yolov5s)");
        return do_summary(&A);
    }
    if (A.bench_step) {
        if (!A.cfg) return ap_error(PROG, "--bench needs --cfg MODEL (e.g. --cfg yolov5s)");
        return do_bench_step(&A);
    }
    static char data_train[4096], data_val[4096];
    if (A.data && (A.records || A.val_records))
        return ap_error(PROG, "--data packs the records itself: give --data or --records");
    if (A.data && !A.resume) {
        rc = data_pack(PROG, A.data, "train", (int)A.img, A.pack_dir, A.pack_codec, false,
                       data_train, sizeof data_train);
        if (rc == 1) fprintf(stderr, PROG ": --data %s: no train split\n", A.data);
        if (rc) return 1;
        A.records = data_train;
        rc = data_pack(PROG, A.data, "val", (int)A.img, A.pack_dir, A.pack_codec, false, data_val,
                       sizeof data_val);
        if (rc < 0) return 1;
        if (rc == 0) A.val_records = data_val;
        rc = 0;
    }
    if (!A.records && !A.resume)
        return ap_error(PROG, "--data DATA.yaml or --records FILE is required");

    struct trn_hyp hyp;
    trn_hyp_default(&hyp);
    if (A.hyp) {
        char err[512];
        if (trn_hyp_load(A.hyp, log_cb, NULL, &hyp, err, sizeof err) < 0) {
            fprintf(stderr, PROG ": %s\n", err);
            return 1;
        }
    }
    if (A.bench || A.plot) {
        if (!A.records) return ap_error(PROG, "--bench-data and --plot need --records FILE");
        if (A.plot) rc = do_plot(&A, &hyp);
        if (rc == 0 && A.bench) rc = do_bench(&A, &hyp);
        /* cairo's and fontconfig's caches, so that leak checkers see a clean exit */
        trn_plots_cleanup();
        return rc;
    }
    if (A.nproc > 1) {
        if (getenv("RANK") || getenv("SLURM_PROCID") || getenv("OMPI_COMM_WORLD_RANK"))
            return ap_error(PROG,
                            "--nproc-per-node: this process is already a rank of a job (RANK, "
                            "SLURM_PROCID or OMPI_COMM_WORLD_RANK is set)");
        return spawn_local_ranks(&A, argc, argv);
    }
    struct trn_dist *dist = NULL;
    int local_world = 1;
    if ((rc = join_job(&A, &dist, &local_world)) != 0) return rc;
    if (A.cfg && !A.resume) {
        char path[PATH_MAX];
        if (trn_model_cfg_find(A.cfg, TRN_MODELS_DIR, path, sizeof path)) {
            fprintf(stderr,
                    PROG ": %s: model yaml not found\n"
                         "hint: give a path, or a name from models (yolov5n/s/m/l/x)\n",
                    A.cfg);
            trn_dist_destroy(dist);
            return 1;
        }
        rc = A.evolve ? do_evolve(&A, &hyp, path, dist, local_world)
                      : do_train(&A, &hyp, path, dist, local_world, NULL, NULL);
    } else if (A.resume || A.weights) {
        rc = A.evolve ? do_evolve(&A, &hyp, NULL, dist, local_world)
                      : do_train(&A, &hyp, NULL, dist, local_world, NULL, NULL);
    } else {
        trn_dist_destroy(dist);
        return ap_error(PROG, "training needs --cfg MODEL (e.g. --cfg yolov5n), --weights FILE "
                              "or --resume");
    }
    trn_dist_destroy(dist);
    /* results.png drew text: cairo's and fontconfig's caches, for a clean exit under leak checks */
    trn_plots_cleanup();
    return rc;
}
