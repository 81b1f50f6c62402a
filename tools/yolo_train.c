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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

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
#include "plots.h"
#include "rundir.h"
#include "train.h"

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

#define PROG "yolo-train"
#define HINT "hint: " PROG " --help lists the options"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: " PROG " --records FILE [options]\n"
        "Train YOLOv5 from ffr record files (yolo-pack output). Flags follow ultralytics'\n"
        "train.py where it has them.\n\n"
        "Data and model:\n"
        "  --records FILE        training dataset (ffr, packed at --img)\n"
        "  --val-records FILE    validation dataset (ffr)\n"
        "  --cache-dir DIR       copy the datasets' shards into DIR (node-local disk) first,\n"
        "                        verified, reused by later runs; FILE may then be an http(s)\n"
        "                        URL (docs/sharing.md)\n"
        "  --cache-max SIZE      keep DIR under SIZE bytes (K, M, G, T), least recently used\n"
        "                        shards evicted\n"
        "  --cfg MODEL           model yaml: a path or a name (yolov5n/s/m/l/x) looked up in\n"
        "                        $FFYOLO_MODELS_DIR, ./models, " TRN_MODELS_DIR "\n"
        "  --nc N                override the yaml's number of classes\n"
        "  --weights FILE        initial weights: an ultralytics .pt or our .ckpt (its EMA)\n"
        "  --hyp FILE            hyperparameter yaml (default: hyp.scratch-low values)\n"
        "Training:\n"
        "  --img N               train and val image size, pixels (default 640; also --imgsz)\n"
        "  --batch-size N        total batch size (default 16)\n"
        "  --epochs N            epochs (default 100)\n"
        "  --optimizer O         SGD, Adam or AdamW (default SGD)\n"
        "  --cos-lr              cosine learning-rate schedule\n"
        "  --patience N          stop after N epochs without improvement (default 100)\n"
        "  --device D            cpu, or CUDA devices: 0 or 0,1,2,3 (default: 0 if present)\n"
        "  --workers N           loader threads (default 0 = min(cores, 8))\n"
        "  --threads N           compute threads of the CPU path (default 0: one per core; each\n"
        "                        op splits N ways, BLAS single-threaded)\n"
        "  --seed S              global seed (default 0)\n"
        "  --resume [DIR]        resume the most recent run under --project, or the given run\n"
        "                        directory or .ckpt, bit-exactly from where it stopped (on any\n"
        "                        number of ranks that divides --batch-size)\n"
        "  --noval               validate only after the final epoch\n"
        "  --nosave              save only the final checkpoint\n"
        "  --save-period N       save a checkpoint every N epochs (default -1: off)\n"
        "Distributed (docs/distributed.md; ranks from torchrun, Slurm or mpirun variables):\n"
        "  --nproc-per-node N    start N local ranks (TCP on 127.0.0.1; default 1)\n"
        "  --dist-backend B      auto, tcp or mpi (default auto: mpi under mpirun, else tcp)\n"
        "  --dist-timeout S      seconds a rank waits for the others in a collective before the\n"
        "                        job fails (default 1800); also bounds the rendezvous\n"
        "  --sync-bn             SyncBatchNorm: BatchNorm statistics over the global batch\n"
        "                        (all ranks), as PyTorch's; no effect on one rank\n"
        "  --bucket-cap-mb MB    gradient all-reduce bucket cap in MiB (default 25, as DDP's; the\n"
        "                        first bucket of a backward closes at min(1, MB))\n"
        "  --no-grad-overlap     all-reduce the gradients after backward instead of in buckets\n"
        "                        during it (the same sums; for comparison)\n");
    fprintf(
        f,
        "  --device-path         with --device cpu: run the GPU training path (device arenas,\n"
        "                        the resident step, GPU augmentation) on the CPU ops; a test\n"
        "                        mode\n"
        "  --host-aug            with the resident step (GPU, SGD): augment on the host\n"
        "                        instead of in kernels on the device (the same batches)\n"
        "  --cuda-graph          capture the resident step of the full batches once as a CUDA\n"
        "                        graph and replay it (one rank, SGD; else a log line and the\n"
        "                        direct step); with --device-path the same code on the CPU;\n"
        "                        with --bench the timed steps are replays\n"
        "  --amp T               the convolutions' dtype: bf16, fp16 (with the dynamic loss\n"
        "                        scaler) or fp32 (default: fp32 on --device cpu, bf16 on a GPU;\n"
        "                        a resume keeps the checkpoint's)\n"
        "  --val-amp T           the validation's convolutions: bf16, fp16 or fp32 (default:\n"
        "                        the training's --amp on a GPU, as train.py's half=amp; fp32\n"
        "                        on --device cpu)\n"
        "  --val-half            --val-amp fp16 (val.py --half)\n");
    /* several strings: one would pass the 4095 characters C11 compilers must take */
    fprintf(
        f,
        "Output:\n"
        "  --project DIR         save to DIR/NAME (default runs/train)\n"
        "  --name NAME           run name (default exp; exp2, exp3, ... when taken)\n"
        "  --exist-ok            reuse DIR/NAME instead of incrementing\n"
        "Testing:\n"
        "  --stop-after-steps K  stop after K batches: save weights/last.ckpt and exit 0\n"
        "  --cuda-graph-test-fail  with --cuda-graph: act as if the capture failed (fallback)\n"
        "  --amp-test-inf-at NI  with --amp fp16: put an Inf into batch NI's loss gradient (the\n"
        "                        scaler must skip that step and halve its scale)\n"
        "Tools:\n"
        "  --summary             print the model summary of --cfg and exit\n"
        "  --bench               time the training step alone on synthetic batches of --cfg at\n"
        "                        --img and --batch-size on --device (no records): img/s, ms per\n"
        "                        phase, TFLOP/s, memory; --json for one object\n"
        "  --bench-steps N       --bench: timed steps (default 10); --bench-warmup N (default 3)\n"
        "  --bench-data          run only the loader at full augmentation; print images/s\n"
        "  --seconds S           --bench-data measuring time (default 10)\n"
        "  --page-cache          --bench-data: buffered reads instead of O_DIRECT\n"
        "  --json                --bench-data: print {\"images_per_s\": ...}\n"
        "  --plot                write train_batch0..2.jpg (batches with labels) to the run\n"
        "                        directory and exit\n"
        "  -h, --help            this help\n\n"
        "Exit status: 0 done, or stopped by SIGTERM/SIGUSR1 (preemption); 1 failure; 2 bad\n"
        "command line; 130 stopped by SIGINT (weights/last.ckpt saved in every stop; --resume\n"
        "continues from it).\n");
}

struct args {
    const char *records, *val_records, *cfg, *weights, *hyp, *device, *resume;
    const char *project, *name, *optimizer, *dist_backend, *cache_dir;
    const char *amp;     /* --amp: bf16, fp16, fp32, or NULL for the device's default */
    const char *val_amp; /* --val-amp (--val-half: "fp16"), or NULL: the training's on a GPU */
    long amp_inf_at;     /* --amp-test-inf-at NI, plus 1 (0: not given) */
    unsigned long long cache_max;
    long img, batch, epochs, workers, threads, nc, patience, save_period, seed, stop_after;
    long nproc, bench_steps, bench_warmup;
    bool bench_step;
    double seconds, dist_timeout;
    bool summary, bench, json, plot, exist_ok, cos_lr, noval, nosave, page_cache, help, sync_bn;
    bool no_grad_overlap; /* --no-grad-overlap: all-reduce the gradients after backward */
    bool device_path;     /* --device-path: the GPU path on the CPU ops (tests) */
    bool host_aug;        /* --host-aug: no GPU augmentation */
    bool cuda_graph;      /* --cuda-graph: the step captured once and replayed */
    bool cuda_graph_fail; /* --cuda-graph-test-fail: the capture acts as failed (tests) */
    double bucket_cap_mb; /* --bucket-cap-mb: gradient bucket cap, MiB (DDP's bucket_cap_mb) */
};

static int bad(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n" HINT "\n");
    return 2;
}

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

/* argparse style: --flag VALUE or --flag=VALUE. Returns 0 or the exit status 2. */
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
    static const struct {
        const char *name;
        int kind; /* 0 flag, 1 string, 2 integer */
        long lo, hi;
    } opts[] = {
        { "--records", 1, 0, 0 },
        { "--val-records", 1, 0, 0 },
        { "--cfg", 1, 0, 0 },
        { "--weights", 1, 0, 0 },
        { "--hyp", 1, 0, 0 },
        { "--device", 1, 0, 0 },
        { "--project", 1, 0, 0 },
        { "--name", 1, 0, 0 },
        { "--optimizer", 1, 0, 0 },
        { "--amp", 1, 0, 0 },
        { "--val-amp", 1, 0, 0 },
        { "--val-half", 0, 0, 0 },
        { "--seconds", 1, 0, 0 },
        { "--dist-timeout", 1, 0, 0 },
        { "--dist-backend", 1, 0, 0 },
        { "--nproc-per-node", 2, 1, 1024 },
        { "--sync-bn", 0, 0, 0 },
        { "--no-grad-overlap", 0, 0, 0 },
        { "--device-path", 0, 0, 0 },
        { "--host-aug", 0, 0, 0 },
        { "--cuda-graph", 0, 0, 0 },
        { "--cuda-graph-test-fail", 0, 0, 0 },
        { "--bucket-cap-mb", 1, 0, 0 },
        { "--img", 2, 32, 16383 },
        { "--imgsz", 2, 32, 16383 },
        { "--img-size", 2, 32, 16383 },
        { "--batch-size", 2, 1, 65536 },
        { "--epochs", 2, 1, 1000000 },
        { "--workers", 2, 0, 256 },
        { "--threads", 2, 0, 256 },
        { "--nc", 2, 1, 65536 },
        { "--patience", 2, 0, 1000000 },
        { "--save-period", 2, -1, 1000000 },
        { "--seed", 2, 0, LONG_MAX },
        { "--stop-after-steps", 2, 1, LONG_MAX },
        { "--amp-test-inf-at", 2, 0, LONG_MAX },
        { "--summary", 0, 0, 0 },
        { "--bench-data", 0, 0, 0 },
        { "--bench", 0, 0, 0 },
        { "--bench-steps", 2, 1, 100000 },
        { "--bench-warmup", 2, 0, 100000 },
        { "--json", 0, 0, 0 },
        { "--plot", 0, 0, 0 },
        { "--exist-ok", 0, 0, 0 },
        { "--cos-lr", 0, 0, 0 },
        { "--noval", 0, 0, 0 },
        { "--nosave", 0, 0, 0 },
        { "--page-cache", 0, 0, 0 },
        { "--cache-dir", 1, 0, 0 },
        { "--cache-max", 1, 0, 0 },
        { "--help", 0, 0, 0 },
        { "-h", 0, 0, 0 },
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char key[64];
        const char *eq = strchr(a, '=');
        const char *val = NULL;
        if (eq && !strncmp(a, "--", 2) && (size_t)(eq - a) < sizeof key) {
            memcpy(key, a, (size_t)(eq - a));
            key[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a);
        }
        if (!strcmp(key, "--resume")) {
            /* nargs='?': a run directory may follow */
            if (val)
                A->resume = val;
            else if (i + 1 < argc && argv[i + 1][0] != '-')
                A->resume = argv[++i];
            else
                A->resume = "";
            continue;
        }
        size_t k = 0;
        while (k < sizeof opts / sizeof opts[0] && strcmp(opts[k].name, key))
            k++;
        if (k == sizeof opts / sizeof opts[0]) return bad("unknown option '%s'%s", a, "");
        if (opts[k].kind == 0) {
            if (val) return bad("%s takes no value%s", key, "");
            if (!strcmp(key, "--summary")) A->summary = true;
            if (!strcmp(key, "--bench-data")) A->bench = true;
            if (!strcmp(key, "--bench")) A->bench_step = true;
            if (!strcmp(key, "--json")) A->json = true;
            if (!strcmp(key, "--plot")) A->plot = true;
            if (!strcmp(key, "--exist-ok")) A->exist_ok = true;
            if (!strcmp(key, "--cos-lr")) A->cos_lr = true;
            if (!strcmp(key, "--noval")) A->noval = true;
            if (!strcmp(key, "--nosave")) A->nosave = true;
            if (!strcmp(key, "--page-cache")) A->page_cache = true;
            if (!strcmp(key, "--sync-bn")) A->sync_bn = true;
            if (!strcmp(key, "--no-grad-overlap")) A->no_grad_overlap = true;
            if (!strcmp(key, "--device-path")) A->device_path = true;
            if (!strcmp(key, "--host-aug")) A->host_aug = true;
            if (!strcmp(key, "--cuda-graph")) A->cuda_graph = true;
            if (!strcmp(key, "--cuda-graph-test-fail")) A->cuda_graph_fail = true;
            if (!strcmp(key, "--val-half")) A->val_amp = "fp16";
            if (!strcmp(key, "--help") || !strcmp(key, "-h")) A->help = true;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) return bad("%s needs a value%s", key, "");
            val = argv[++i];
        }
        if (opts[k].kind == 2) {
            long v;
            if (trn_cli_long(val, opts[k].lo, opts[k].hi, &v) < 0) {
                char range[64];
                snprintf(range, sizeof range, " (a whole number in [%ld, %ld])", opts[k].lo,
                         opts[k].hi);
                fprintf(stderr, PROG ": %s: bad value '%s'%s\n" HINT "\n", key, val, range);
                return 2;
            }
            if (!strncmp(key, "--img", 5)) A->img = v;
            if (!strcmp(key, "--batch-size")) A->batch = v;
            if (!strcmp(key, "--epochs")) A->epochs = v;
            if (!strcmp(key, "--workers")) A->workers = v;
            if (!strcmp(key, "--threads")) A->threads = v;
            if (!strcmp(key, "--nc")) A->nc = v;
            if (!strcmp(key, "--patience")) A->patience = v;
            if (!strcmp(key, "--save-period")) A->save_period = v;
            if (!strcmp(key, "--seed")) A->seed = v;
            if (!strcmp(key, "--stop-after-steps")) A->stop_after = v;
            if (!strcmp(key, "--amp-test-inf-at")) A->amp_inf_at = v + 1;
            if (!strcmp(key, "--nproc-per-node")) A->nproc = v;
            if (!strcmp(key, "--bench-steps")) A->bench_steps = v;
            if (!strcmp(key, "--bench-warmup")) A->bench_warmup = v;
            continue;
        }
        if (!strcmp(key, "--records")) A->records = val;
        if (!strcmp(key, "--val-records")) A->val_records = val;
        if (!strcmp(key, "--cfg")) A->cfg = val;
        if (!strcmp(key, "--weights")) A->weights = val;
        if (!strcmp(key, "--hyp")) A->hyp = val;
        if (!strcmp(key, "--device")) A->device = val;
        if (!strcmp(key, "--project")) A->project = val;
        if (!strcmp(key, "--name")) A->name = val;
        if (!strcmp(key, "--optimizer")) A->optimizer = val;
        if (!strcmp(key, "--amp")) A->amp = val;
        if (!strcmp(key, "--val-amp")) A->val_amp = val;
        if (!strcmp(key, "--dist-backend")) A->dist_backend = val;
        if (!strcmp(key, "--cache-dir")) A->cache_dir = val;
        if (!strcmp(key, "--cache-max")) {
            char *end = NULL;
            errno = 0;
            const double v = strtod(val, &end);
            const double mul = !end || !*end       ? 1
                               : !strcmp(end, "K") ? 1e3
                               : !strcmp(end, "M") ? 1e6
                               : !strcmp(end, "G") ? 1e9
                               : !strcmp(end, "T") ? 1e12
                                                   : -1;
            if (errno || end == val || mul < 0 || !(v > 0) || v * mul > 1.8e19)
                return bad("--cache-max: bad size '%s'%s (bytes, or with K, M, G, T)", val, "");
            A->cache_max = (unsigned long long)(v * mul);
        }
        /* at least 4096 bytes, the communicator's smallest bucket */
        if (!strcmp(key, "--bucket-cap-mb") &&
            (trn_cli_double(val, 4096.0 / 1048576.0, 65536, &A->bucket_cap_mb) < 0))
            return bad("--bucket-cap-mb: bad value '%s'%s (MiB in [0.00390625, 65536])", val, "");
        if (!strcmp(key, "--dist-timeout") &&
            (trn_cli_double(val, 0, 604800, &A->dist_timeout) < 0 || !(A->dist_timeout > 0)))
            return bad("--dist-timeout: bad value '%s'%s (seconds in (0, 604800])", val, "");
        if (!strcmp(key, "--seconds") &&
            (trn_cli_double(val, 0, 86400, &A->seconds) < 0 || !(A->seconds > 0)))
            return bad("--seconds: bad value '%s'%s (a number of seconds in (0, 86400])", val, "");
    }
    if (strcmp(A->optimizer, "SGD") && strcmp(A->optimizer, "Adam") &&
        strcmp(A->optimizer, "AdamW"))
        return bad("--optimizer: '%s' is not one of SGD, Adam, AdamW%s", A->optimizer, "");
    enum trn_amp_dtype adt;
    if (A->amp && trn_amp_dtype_parse(A->amp, &adt) < 0)
        return bad("--amp: '%s' is not one of bf16, fp16, fp32%s", A->amp, "");
    if (A->val_amp && trn_amp_dtype_parse(A->val_amp, &adt) < 0)
        return bad("--val-amp: '%s' is not one of bf16, fp16, fp32%s", A->val_amp, "");
    if (A->device && !device_ok(A->device))
        return bad("--device: '%s' is not cpu or a list of device numbers (0 or 0,1)%s", A->device,
                   "");
    enum trn_dist_backend db;
    if (trn_dist_backend_parse(A->dist_backend, &db) < 0 || db == TRN_DIST_SINGLE)
        return bad("--dist-backend: '%s' is not one of auto, tcp, mpi, nccl%s", A->dist_backend,
                   "");
    if (!A->project[0] || !A->name[0])
        return bad("--project and --name must not be empty%s%s", "", "");
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
    o.amp = amp_dtype(A, gpu);
    struct trn_bench_step_result r;
    char err[512] = "";
    const int rc = trn_bench_step_run(&o, &r, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": --bench: %s\n", err[0] ? err : trn_train_strerror(rc));
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
               "\"os_threads\": %d}\n",
               slash ? slash + 1 : path, r.on_device ? "cuda" : "cpu", o.img, o.batch, r.img_per_s,
               r.ms_step, r.ms_forward, r.ms_loss, r.ms_backward, r.ms_optimizer, r.ms_ema,
               r.gflops_img, r.tflops, r.net_bytes, r.peak_bytes, r.resident ? "true" : "false",
               r.graph ? "true" : "false", r.params, r.loss, o.steps, r.threads, r.blas_threads,
               r.os_threads);
    else
        printf("%s img %d batch %d on %s: %.1f img/s, %.2f ms/step (forward %.2f, loss %.2f, "
               "backward %.2f, optimizer %.2f, EMA %.2f), %.3f TFLOP/s, net %.0f MiB, peak %.0f "
               "MiB%s%s\n",
               slash ? slash + 1 : path, o.img, o.batch, r.on_device ? "cuda" : "cpu", r.img_per_s,
               r.ms_step, r.ms_forward, r.ms_loss, r.ms_backward, r.ms_optimizer, r.ms_ema,
               r.tflops, (double)r.net_bytes / (1 << 20), (double)r.peak_bytes / (1 << 20),
               r.resident ? " (resident step)" : "",
               r.graph ? " (graph replays: phases not split)" : "");
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
        fprintf(stderr, PROG ": %s\n", err[0] ? err : trn_model_strerror(rc));
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
               "\"mosaic\": %g, \"mixup\": %g}\n",
               r.images_per_s, r.workers, A->batch, A->img, r.seconds, (unsigned long long)r.images,
               (unsigned long long)r.bad_records, hyp->mosaic, hyp->mixup);
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

static int do_train(const struct args *A, const struct trn_hyp *hyp, const char *cfg_path,
                    struct trn_dist *dist, int local_world)
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
    o.cuda_graph_fail = A->cuda_graph_fail;
    o.amp = amp_dtype(A, o.gpu); /* when resuming, the checkpoint's */
    if (A->val_amp) {
        enum trn_amp_dtype v = TRN_AMP_OFF;
        trn_amp_dtype_parse(A->val_amp, &v);
        o.val_amp = v == TRN_AMP_BF16   ? KERN_DT_BF16
                    : v == TRN_AMP_FP16 ? KERN_DT_F16
                                        : KERN_DT_F32;
    }
    o.noval = A->noval;
    o.patience = (int)A->patience;
    o.stop_after = A->stop_after;
    o.amp_inf_ni = A->amp_inf_at - 1;
    o.stop = &stop_signal;
    o.log = print_line;
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
                    err[0] ? err : trn_train_strerror(rc), rank);
            trn_dist_abort(dist, 1);
        }
        fprintf(stderr, PROG ": %s\n", err[0] ? err : trn_train_strerror(rc));
        return 1;
    }
    if (rank == 0)
        printf("%lld batches, %.2f img/s; %s\n", (long long)res.batches, res.images_per_s,
               res.last_path);
    /* SIGTERM / SIGUSR1 are preemption: saved, so success; SIGINT is the user's stop */
    if (rc == TRN_TRAIN_STOPPED && res.stop_signal == SIGINT) return 128 + SIGINT;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* --nproc-per-node: local ranks started by this process                                    */

#define RANKS_GRACE_S 5.0

/* A port p with p and p + 1 free now (the TCP star listens on MASTER_PORT + 1). */
static int free_port_pair(void)
{
    for (int attempt = 0; attempt < 64; attempt++) {
        const int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t l = sizeof sa;
        int p = -1;
        if (a >= 0 && b >= 0 && bind(a, (struct sockaddr *)&sa, sizeof sa) == 0 &&
            getsockname(a, (struct sockaddr *)&sa, &l) == 0) {
            p = ntohs(sa.sin_port);
            sa.sin_port = htons((uint16_t)(p + 1));
            if (p >= 65534 || bind(b, (struct sockaddr *)&sa, sizeof sa) != 0) p = -1;
        }
        if (a >= 0) close(a);
        if (b >= 0) close(b);
        if (p > 0) return p;
    }
    return -1;
}

/*
 * Start n ranks of this program (torchrun's variables, TCP on 127.0.0.1), each in its own process
 * group (so a terminal's Ctrl-C reaches only this parent, which forwards it once) and ended by
 * SIGTERM if this parent dies. Forward SIGINT / SIGTERM / SIGUSR1; when a rank fails, give the
 * others RANKS_GRACE_S to end (they notice the closed connection at once; only a hung or stopped
 * rank stays), then SIGKILL them.
 * Returns the exit status: 0 when every rank exits 0, else the first failure's.
 */
static int spawn_local_ranks(const struct args *A, int argc, char **argv)
{
    char **cargv = calloc((size_t)argc + 1, sizeof *cargv);
    pid_t *pid = calloc((size_t)A->nproc, sizeof *pid);
    if (!cargv || !pid) {
        fprintf(stderr, PROG ": out of memory\n");
        free(cargv);
        free(pid);
        return 1;
    }
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--nproc-per-node")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--nproc-per-node=", 17)) continue;
        cargv[n++] = argv[i];
    }
    const char *mp = getenv("MASTER_PORT");
    const int port = mp ? atoi(mp) : free_port_pair();
    if (port <= 0 || port > 65534) {
        fprintf(stderr,
                PROG ": --nproc-per-node: no free port pair on 127.0.0.1 (set MASTER_PORT)\n");
        free(cargv);
        free(pid);
        return 1;
    }
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);
    const pid_t parent = getpid();
    int alive = 0, status = 0;
    for (int r = 0; r < A->nproc; r++) {
        const pid_t p = fork();
        if (p == 0) {
            char v[5][64];
            snprintf(v[0], sizeof v[0], "%d", r);
            snprintf(v[1], sizeof v[1], "%ld", A->nproc);
            snprintf(v[2], sizeof v[2], "%d", port);
            setenv("RANK", v[0], 1);
            setenv("LOCAL_RANK", v[0], 1);
            setenv("WORLD_SIZE", v[1], 1);
            setenv("LOCAL_WORLD_SIZE", v[1], 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", v[2], 1);
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(1); /* the parent died before prctl */
            sigprocmask(SIG_SETMASK, &old, NULL);
            execv("/proc/self/exe", cargv);
            fprintf(stderr, PROG ": rank %d: cannot exec /proc/self/exe: %s\n", r, strerror(errno));
            _exit(127);
        }
        if (p < 0) {
            fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
            status = 1;
            break;
        }
        pid[r] = p;
        alive++;
        fprintf(stderr, PROG ": started rank %d of %ld (pid %ld)\n", r, A->nproc, (long)p);
    }
    double kill_at = status ? 0 : -1; /* when to SIGKILL the ranks left (after a failure) */
    while (alive > 0) {
        if (kill_at >= 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec >= kill_at) {
                for (int r = 0; r < A->nproc; r++)
                    if (pid[r] > 0) kill(pid[r], SIGKILL);
            }
        }
        struct timespec wait = { 0, 200 * 1000 * 1000 };
        const int sig = sigtimedwait(&set, NULL, &wait);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGUSR1) {
            for (int r = 0; r < A->nproc; r++)
                if (pid[r] > 0) kill(pid[r], sig);
        }
        int st = 0;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
            int r = 0;
            while (r < A->nproc && pid[r] != p)
                r++;
            if (r == A->nproc) continue;
            pid[r] = -1;
            alive--;
            const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (code != 0) {
                if (!WIFEXITED(st))
                    fprintf(stderr, PROG ": rank %d was killed by signal %d\n", r, WTERMSIG(st));
                if (!status) status = code;
                if (kill_at < 0) {
                    struct timespec t;
                    clock_gettime(CLOCK_MONOTONIC, &t);
                    kill_at = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec + RANKS_GRACE_S;
                }
            }
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(cargv);
    free(pid);
    return status;
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
    struct args A;
    int rc = parse_args(argc, argv, &A);
    if (rc) return rc;
    if (A.help) {
        usage(stdout);
        return 0;
    }
    if (A.summary) {
        if (!A.cfg) return bad("--summary needs --cfg MODEL (e.g. --cfg yolov5s)%s%s", "", "");
        return do_summary(&A);
    }
    if (A.bench_step) {
        if (!A.cfg) return bad("--bench needs --cfg MODEL (e.g. --cfg yolov5s)%s%s", "", "");
        return do_bench_step(&A);
    }
    if (!A.records && !A.resume) return bad("--records FILE is required%s%s", "", "");

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
        if (!A.records) return bad("--bench-data and --plot need --records FILE%s%s", "", "");
        if (A.plot) rc = do_plot(&A, &hyp);
        if (rc == 0 && A.bench) rc = do_bench(&A, &hyp);
        /* cairo's and fontconfig's caches, so that leak checkers see a clean exit */
        trn_plots_cleanup();
        return rc;
    }
    if (A.nproc > 1) {
        if (getenv("RANK") || getenv("SLURM_PROCID") || getenv("OMPI_COMM_WORLD_RANK"))
            return bad("--nproc-per-node: this process is already a rank of a job (RANK, "
                       "SLURM_PROCID or OMPI_COMM_WORLD_RANK is set)%s%s",
                       "", "");
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
        rc = do_train(&A, &hyp, path, dist, local_world);
    } else if (A.resume) {
        rc = do_train(&A, &hyp, NULL, dist, local_world);
    } else {
        trn_dist_destroy(dist);
        return bad("training needs --cfg MODEL (e.g. --cfg yolov5n) or --resume%s%s", "", "");
    }
    trn_dist_destroy(dist);
    /* results.png drew text: cairo's and fontconfig's caches, for a clean exit under leak checks */
    trn_plots_cleanup();
    return rc;
}
