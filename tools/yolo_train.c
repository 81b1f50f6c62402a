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
 * This file is the option table and its checks, the hooks the launcher calls (what it says, --data
 * through the pack cache, the stop signals) and one call: the program's work is
 * trainer/train/launch.h's.
 *
 * Exit status: 0 done or preempted (SIGTERM / SIGUSR1, last.ckpt saved), 1 failure (a file, the
 * dataset, a checkpoint that cannot be written, a failed rank), 2 bad command line, 130 stopped
 * by SIGINT with last.ckpt saved.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argparse.h"
#include "common_opts.h"
#include "data_pack.h"
#include "progress.h"
#include "amp.h"
#include "dist.h"
#include "launch.h"
#include "model.h"

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

#define PROG "yolo-train"

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
static int parse_args(int argc, char **argv, struct trn_launch_opts *A)
{
    trn_launch_opts_default(A);
    A->models_dir = TRN_MODELS_DIR;
    const struct ap_opt t[] = {
        AP_SECTION("Data and model"),
        DATA_PACK_OPTS(&A->data, &A->pack_dir, &A->pack_codec,
                       "each split is packed at --img on first use into the pack cache and "
                       "reused while its files are unchanged"),
        AP_OPT("--data-source", AP_STR, &A->data_source, "DATA.yaml", NULL),
        AP_OPT("--records", AP_STR, &A->records, "FILE", "training dataset (ffr, packed at --img)"),
        AP_OPT("--val-records", AP_STR, &A->val_records, "FILE", "validation dataset (ffr)"),
        AP_OPT("--cache-dir", AP_STR, &A->cache_dir, "DIR",
               "copy the datasets' shards into DIR (node-local disk) first, verified, reused by "
               "later runs; FILE may then be an http(s) URL (docs/sharing.md)"),
        { .names = "--cache-max",
          .kind = AP_CALL,
          .dst = &A->cache_max,
          .metavar = "SIZE",
          .help = "keep DIR under SIZE bytes (K, M, G, T), least recently used shards evicted; "
                  "below the dataset on several nodes, each node caches the shards it reads "
                  "epoch by epoch, fetching the next epoch's while one trains as far as SIZE "
                  "allows (docs/sharing.md section 9)",
          .call = parse_size },
        { .names = "--peers",
          .kind = AP_CHOICE,
          .dst = &A->peers,
          .metavar = "P",
          .help = "--cache-dir on several nodes: auto (default: each node serves its cache to "
                  "the others, and every shard leaves the origin once) or off (each node fetches "
                  "from the origin)",
          .choices = "auto|off" },
        AP_OPT("--peer-host", AP_STR, &A->peer_host, "ADDR",
               "the IPv4 or IPv6 address the other nodes reach this one at (default: the one "
               "that routes to MASTER_ADDR)"),
        AP_RANGE("--peer-port", AP_LONG, &A->peer_port, "N",
                 "the port this node serves its cache on (default 0: any free one)", 0, 65535),
        TOOL_OPT_CFG(&A->cfg, ""),
        AP_RANGE("--nc", AP_LONG, &A->nc, "N", "override the yaml's number of classes", 1, 65536),
        AP_OPT("--weights", AP_STR, &A->weights, "FILE",
               "pretrained weights: an ultralytics .pt or our .ckpt (its EMA); alone it gives the "
               "model too (its own yaml, the dataset's classes); every tensor whose name and "
               "shape fit is transferred, as train.py"),
        AP_OPT("--hyp", AP_STR, &A->hyp, "FILE",
               "hyperparameter yaml (default: hyp.scratch-low values)"),
        AP_SECTION("Training"),
        TOOL_OPT_IMG(&A->img, "train and val image size, pixels (default 640)"),
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
        TOOL_OPT_DEVICE(&A->device),
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
                  "(default 1800); also bounds the rendezvous. Waits for --cache-dir fills "
                  "last longer: S plus the dataset at 64 KiB/s",
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
        TOOL_OPT_CPU_ENGINE(&A->cpu_engine),
        { .names = "--activations",
          .kind = AP_CHOICE,
          .dst = &A->activations,
          .metavar = "A",
          .help = "what the training step keeps between layers: fp32 (default: float32 NCHW, "
                  "each conv casting in and out under --amp), bf16-nhwc (bf16 channels-last, as "
                  "PyTorch's channels_last autocast; needs --amp bf16) or bf16-nchw (the same in "
                  "NCHW, which gives bf16-nhwc's bits on the CPU)",
          .choices = "fp32|bf16-nhwc|bf16-nchw" },
        AP_SECTION("Output"),
        TOOL_OPT_RUN_DIR(&A->project, &A->name, &A->exist_ok, "runs/train"),
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
        { .names = "--cache-share",
          .kind = AP_CHOICE,
          .dst = &A->cache_share,
          .metavar = "S",
          .help = "--cache ram with several ranks on a node: node (default: one copy in shared "
                  "memory that the node's ranks fill and read together) or rank (a copy per "
                  "rank, as train.py)",
          .choices = "node|rank" },
        AP_OPT("--page-cache", AP_FLAG, &A->page_cache, NULL,
               "the loader reads through the page cache even when the dataset is larger than "
               "half of the memory available (where it reads with O_DIRECT by default)"),
        AP_OPT("--direct", AP_FLAG, &A->direct, NULL,
               "the loader reads with O_DIRECT even when the dataset fits in half of the "
               "memory available (where it reads through the page cache by default)"),
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

/* --data: a split through the pack cache (data_pack.h), as --pack-dir and --pack-codec say. */
static int pack(void *ctx, const char *data, const char *split, int img, char *out, size_t cap)
{
    const struct trn_launch_opts *A = ctx;
    return data_pack(PROG, data, split, img, A->pack_dir, A->pack_codec, false, out, cap);
}

int main(int argc, char **argv)
{
    tool_omp_wait(argv);
    struct trn_launch_opts A;
    const int rc = parse_args(argc, argv, &A);
    if (rc) return rc == AP_HELPED ? 0 : rc;
    A.say = tool_say;
    A.say_ctx = PROG;
    A.pack = pack;
    A.pack_ctx = &A;
    A.stop_arm = tool_stop_arm;
    A.progress = tool_progress;
    A.progress_ctx = stdout;
    return trn_launch(&A, argc, argv);
}
