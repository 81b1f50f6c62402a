/*
 * yolo-val: ultralytics' val.py (task val) on ffr records, on the CPU in float32 (--half: fp16
 * convolutions with float32 accumulation, the rest float32, as val.py --half on a GPU). The CPU
 * forward runs on oneDNN where the build has it, else on our reference ops (--cpu-engine; net.h
 * enum trn_cpu_engine); a stderr line says which.
 *
 *   yolo-val --records val.ffr --weights W [W ...] [--cfg yolov5n] --img 640 --batch-size 32
 *            --conf-thres 0.001 --iou-thres 0.6 --max-det 300 [--augment] [--half] [--workers N]
 *            [--cpu-engine auto|onednn|reference]
 *            [--json]
 *            [--save-json [--annotations instances.json]] [--verbose] [--single-cls]
 *            [--project runs/val --name exp]
 *
 * W is an ultralytics .pt (its ema, else model; the architecture from the yaml it carries
 * unless --cfg) or one of our checkpoints (docs/checkpoint.md: the EMA weights). Without
 * --weights, --cfg gives a model with the deterministic initial weights (seed 0): a smoke run.
 * Several --weights form ultralytics' Ensemble (outputs concatenated before NMS; every model must
 * have the dataset's classes); --augment is val.py's test-time augmentation (trainer/eval/tta.h).
 * Prints val.py's table ("all" first; per class with --verbose or fewer than 50 classes) and
 * speed line; --json prints one object on stdout instead (the table then goes to stderr).
 * --save-json writes DIR/<weights stem>_predictions.json as val.py does (COCO 91 ids for 80-class
 * models) and, with --data, prints pycocotools' 12 summary lines from our COCOeval.
 *
 * Exit status: 0 done, 1 a file or dataset problem, 2 a bad command line.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cli.h"
#include "common_opts.h"
#include "cocoeval.h"
#include "det.h"
#include "ffr.h"
#include "kern_cuda.h"
#include "model.h"
#include "plots.h"
#include "rundir.h"
#include "argparse.h"
#include "data_pack.h"
#include "progress.h"
#include "ptload.h"
#include "tta.h"
#include "val.h"
#include "weights.h"
#include "errors.h"

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

#define PROG "yolo-val"

struct args {
    const char *records, *weights, *cfg, *data, *task, *project, *name;
    const char *annotations, *pack_dir;       /* --annotations (COCOeval), --pack-dir */
    const char *pack_codec;                   /* --pack-codec raw|zstd */
    const char *ensemble[TRN_TTA_MAX_MODELS]; /* every --weights; weights = ensemble[0] */
    int n_weights;
    long img, batch, max_det, workers, threads, micro;
    long stop_after; /* --stop-after-batches: trn_val_opts.max_batches */
    double conf, iou;
    bool json, save_json, verbose, no_plots, exist_ok, augment, single_cls;
    bool save_txt, save_conf, save_hybrid; /* --save-txt, --save-conf, --save-hybrid */
    bool half;              /* --half: fp16 convolutions (trn_val_opts.amp = KERN_DT_F16) */
    bool micro_set;         /* --micro-batch given */
    const char *device;     /* --device: "cpu", a number, or NULL (0 if present) */
    bool device_path;       /* --device-path (tests): the GPU data path on the CPU ops */
    const char *cpu_engine; /* --cpu-engine auto|onednn|reference */
};

/* Returns 0 or the exit status 2. */
static int parse_args(int argc, char **argv, struct args *A)
{
    memset(A, 0, sizeof *A);
    A->project = "runs/val";
    A->name = "exp";
    A->task = "val";
    A->img = 640;
    A->batch = 32;
    A->max_det = 300;
    A->conf = 0.001;
    A->iou = 0.6;
    const struct ap_opt t[] = {
        AP_OPT("--records", AP_STR, &A->records, "FILE",
               "validation dataset (ffr, packed at --img; --interp val)"),
        TOOL_OPT_WEIGHTS(A->ensemble, &A->n_weights, TRN_TTA_MAX_MODELS,
                         "; without it, --cfg with the deterministic initial weights"),
        TOOL_OPT_CFG(&A->cfg, "; default: from W"),
        TOOL_OPT_IMG(&A->img, "image size the records were packed at (default 640)"),
        AP_RANGE("--batch-size", AP_LONG, &A->batch, "N", "rect batch size (default 32)", 1, 4096),
        { .names = "--conf-thres",
          .kind = AP_DOUBLE,
          .dst = &A->conf,
          .metavar = "X",
          .help = "confidence threshold (default 0.001)",
          .lo = 0,
          .hi = 1,
          .open_hi = true },
        AP_RANGE("--iou-thres", AP_DOUBLE, &A->iou, "X", "NMS IoU threshold (default 0.6)", 0, 1),
        AP_RANGE("--max-det", AP_LONG, &A->max_det, "N", "detections per image (default 300)", 1,
                 100000),
        AP_OPT("--augment", AP_FLAG, &A->augment, NULL,
               "test-time augmentation (scales 1, 0.83, 0.67; lr flip)"),
        AP_OPT("--half", AP_FLAG, &A->half, NULL,
               "FP16 half-precision inference (val.py --half): the convolutions in fp16 with fp32 "
               "accumulation, the rest fp32"),
        AP_RANGE("--workers", AP_LONG, &A->workers, "N",
                 "loader threads (default 0 = min(cores, 8))", 0, 256),
        AP_RANGE("--threads", AP_LONG, &A->threads, "N",
                 "compute threads (default 0: one per core; each op splits N ways, BLAS "
                 "single-threaded)",
                 0, 256),
        AP_RANGE("--micro-batch", AP_LONG, &A->micro, "N",
                 "images per forward (memory only; default 4 on the CPU, --batch-size on a GPU)", 1,
                 256),
        AP_RANGE("--stop-after-batches", AP_LONG, &A->stop_after, "K",
                 "validate only the first K batches (start-up timing; the metrics are those "
                 "batches')",
                 1, INT_MAX),
        TOOL_OPT_DEVICE(&A->device),
        AP_OPT("--device-path", AP_FLAG, &A->device_path, NULL, NULL),
        TOOL_OPT_CPU_ENGINE(&A->cpu_engine),
        { .names = "--task",
          .kind = AP_CHOICE,
          .dst = &A->task,
          .metavar = "T",
          .help = "val (default), train or test: the --data split to validate (--records: val); "
                  "speed: val.py's speed run (conf 0.25, iou 0.45, no json, no plots)",
          .choices = "train|val|test|speed" },
        AP_OPT("--json", AP_FLAG, &A->json, NULL, "print the metrics as one JSON object on stdout"),
        AP_OPT("--save-json", AP_FLAG, &A->save_json, NULL,
               "write DIR/<weights>_predictions.json (COCO results)"),
        AP_OPT("--save-txt", AP_FLAG, &A->save_txt, NULL,
               "write DIR/labels/<image>.txt: each image's detections, 'cls cx cy w h' "
               "normalised to the image"),
        AP_OPT("--save-conf", AP_FLAG, &A->save_conf, NULL,
               "add the confidence to --save-txt rows"),
        AP_OPT("--save-hybrid", AP_FLAG, &A->save_hybrid, NULL,
               "save label+prediction hybrid results to *.txt: the labels join the predictions "
               "before NMS (the metrics come out high, as val.py's)"),
        DATA_PACK_OPTS(&A->data, &A->pack_dir, &A->pack_codec,
                       "the --task split is packed at --img on first use into the pack cache and "
                       "reused (a .json here means --annotations)"),
        AP_OPT("--annotations", AP_STR, &A->annotations, "FILE",
               "with --save-json: COCO annotations (instances_val2017.json); run COCOeval"),
        AP_OPT("--verbose", AP_FLAG, &A->verbose, NULL, "per-class rows for any number of classes"),
        AP_OPT("--single-cls", AP_FLAG, &A->single_cls, NULL,
               "treat as single-class: every label's and every prediction's class is 0"),
        AP_OPT("--noplots|--no-plots", AP_FLAG, &A->no_plots, NULL,
               "do not write val_batchK_labels.jpg / _pred.jpg, the PR / F1 / P / R curves and "
               "confusion_matrix.png"),
        TOOL_OPT_RUN_DIR(&A->project, &A->name, &A->exist_ok, "runs/val"),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = PROG,
        .usage = "--data DATA.yaml | --records FILE --weights W [options]",
        .about =
            "Validate a YOLOv5 model on ffr records (yolo-pack output) as ultralytics' val.py.",
        .opts = t,
        .n_opts = sizeof t / sizeof t[0],
    };
    int rc = ap_parse(&sp, argc, argv);
    if (rc) return rc;
    A->weights = A->n_weights ? A->ensemble[0] : NULL;
    A->micro_set = A->micro > 0;
    if (!A->micro_set) A->micro = 4;
    /* before --annotations existed, --data named the COCO json */
    const size_t dl = A->data ? strlen(A->data) : 0;
    if (dl > 5 && !strcmp(A->data + dl - 5, ".json") && !A->annotations)
        A->annotations = A->data, A->data = NULL;
    if (A->data && A->records)
        return ap_usage_error(&sp, "--data packs the records itself: give --data or --records");
    if (!A->records && !A->data)
        return ap_usage_error(&sp, "--data DATA.yaml or --records FILE is required");
    if (!strcmp(A->task, "speed")) { /* val.py: speed benchmarks on the val split */
        A->conf = 0.25, A->iou = 0.45, A->save_json = false, A->no_plots = true;
        A->task = "val";
    }
    A->save_txt |= A->save_hybrid; /* val.py: opt.save_txt |= opt.save_hybrid */
    if (A->records && strcmp(A->task, "val"))
        return ap_usage_error(&sp, "--task train/test needs --data (with --records, pass "
                                   "that split's records)");
    if (!A->weights && !A->cfg)
        return ap_usage_error(&sp, "--weights W (or --cfg MODEL for initial weights)");
    if (A->annotations && !A->save_json)
        return ap_usage_error(&sp, "--annotations needs --save-json");
    if (A->micro > A->batch) A->micro = A->batch;
    return 0;
}

static void log_cb(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, PROG ": %s\n", msg);
}

static const char *class_name(const struct trn_plot_names *names, int c, char *buf, size_t cap)
{
    if (c >= 0 && c < names->n && names->names[c]) return names->names[c];
    snprintf(buf, cap, "%d", c);
    return buf;
}

/* val.py's table: header, "all", per class when verbose or nc < 50 (and nc > 1), speed. */
static void print_table(FILE *f, const struct args *A, const struct trn_val_result *res,
                        const struct trn_plot_names *names, bool header)
{
    if (header) fprintf(f, "%s\n", TRN_VAL_HEADER);
    fprintf(f, "%22s%11d%11" PRId64 "%11.3g%11.3g%11.3g%11.3g\n", "all", res->seen, res->n_labels,
            res->mp, res->mr, res->map50, res->map);
    if (res->n_labels == 0)
        fprintf(f, "WARNING: no labels found in val set, can not compute metrics without labels\n");
    if ((A->verbose || res->nc < 50) && res->nc > 1) {
        for (int i = 0; i < res->ap.n_cls; i++) {
            char buf[16];
            const int c = res->ap.cls[i];
            fprintf(f, "%22s%11d%11" PRId64 "%11.3g%11.3g%11.3g%11.3g\n",
                    class_name(names, c, buf, sizeof buf), res->seen, res->ap.nt[c], res->ap.p[i],
                    res->ap.r[i], res->ap.ap50[i], res->ap.ap5095[i]);
        }
    }
    fprintf(f,
            "Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (%ld, 3, "
            "%ld, %ld)\n",
            res->ms_pre, res->ms_infer, res->ms_nms, A->batch, A->img, A->img);
}

/* A JSON number (non-finite as null). */
static void jnum(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void print_json(FILE *f, const struct args *A, const struct trn_val_result *res,
                       const struct trn_plot_names *names, const double *coco)
{
    fprintf(f, "{\"images\": %d, \"instances\": %" PRId64 ", \"precision\": ", res->seen,
            res->n_labels);
    jnum(f, res->mp);
    fputs(", \"recall\": ", f);
    jnum(f, res->mr);
    fputs(", \"map50\": ", f);
    jnum(f, res->map50);
    fputs(", \"map50_95\": ", f);
    jnum(f, res->map);
    fputs(", \"fitness\": ", f);
    jnum(f, res->fitness);
    fprintf(f, ", \"img\": %ld, \"conf_thres\": ", A->img);
    jnum(f, A->conf);
    fputs(", \"iou_thres\": ", f);
    jnum(f, A->iou);
    fprintf(f, ", \"detections\": %" PRId64 ", \"ms_per_image\": {\"pre\": ", res->n_dets);
    jnum(f, res->ms_pre);
    fputs(", \"inference\": ", f);
    jnum(f, res->ms_infer);
    fputs(", \"nms\": ", f);
    jnum(f, res->ms_nms);
    fputs("}, \"classes\": [", f);
    for (int i = 0; i < res->ap.n_cls; i++) {
        char buf[16];
        const int c = res->ap.cls[i];
        fprintf(f, "%s{\"class\": %d, \"name\": ", i ? ", " : "", c);
        jstr(f, class_name(names, c, buf, sizeof buf));
        fprintf(f, ", \"instances\": %" PRId64 ", \"precision\": ", res->ap.nt[c]);
        jnum(f, res->ap.p[i]);
        fputs(", \"recall\": ", f);
        jnum(f, res->ap.r[i]);
        fputs(", \"map50\": ", f);
        jnum(f, res->ap.ap50[i]);
        fputs(", \"map50_95\": ", f);
        jnum(f, res->ap.ap5095[i]);
        fputc('}', f);
    }
    fputc(']', f);
    if (coco) {
        fputs(", \"coco\": [", f);
        for (int k = 0; k < TRN_COCO_NSTATS; k++) {
            if (k) fputs(", ", f);
            jnum(f, coco[k]);
        }
        fputc(']', f);
    }
    fputs("}\n", f);
}

/* pycocotools' COCOeval.summarize() lines. */
static void print_coco(FILE *f, const double *s)
{
    static const struct {
        bool ap;
        const char *iou, *area;
        int dets;
    } rows[TRN_COCO_NSTATS] = {
        { true, "0.50:0.95", "all", 100 },     { true, "0.50", "all", 100 },
        { true, "0.75", "all", 100 },          { true, "0.50:0.95", "small", 100 },
        { true, "0.50:0.95", "medium", 100 },  { true, "0.50:0.95", "large", 100 },
        { false, "0.50:0.95", "all", 1 },      { false, "0.50:0.95", "all", 10 },
        { false, "0.50:0.95", "all", 100 },    { false, "0.50:0.95", "small", 100 },
        { false, "0.50:0.95", "medium", 100 }, { false, "0.50:0.95", "large", 100 },
    };
    for (int k = 0; k < TRN_COCO_NSTATS; k++)
        fprintf(f, " %-18s %s @[ IoU=%-9s | area=%6s | maxDets=%3d ] = %0.3f\n",
                rows[k].ap ? "Average Precision" : "Average Recall", rows[k].ap ? "(AP)" : "(AR)",
                rows[k].iou, rows[k].area, rows[k].dets, s[k]);
}

/* val.py's save_json part: write the results list, then COCOeval with --data. */
static int save_json(const struct args *A, const char *dir, const struct trn_val_result *res,
                     FILE *out, double *stats, bool *have_stats)
{
    const char *base = A->weights ? strrchr(A->weights, '/') : NULL;
    base = base ? base + 1 : A->weights ? A->weights : "init";
    char stem[256];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot && dot != stem) *dot = '\0';
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s_predictions.json", dir, stem);
    FILE *f = fopen(path, "w");
    int rc = f ? trn_coco_dets_write(f, res->coco, res->n_coco) : -errno;
    if (f && fclose(f) != 0 && rc == 0) rc = -EIO;
    if (rc < 0) {
        fprintf(stderr, PROG ": %s: %s\n", path, strerror(-rc));
        return 1;
    }
    fprintf(out, "\nsaved %zu detections to %s\n", res->n_coco, path);
    if (!A->annotations) return 0;
    struct trn_coco_gt gt;
    char err[512] = "";
    rc = trn_coco_gt_load(A->annotations, &gt, err, sizeof err);
    if (rc == 0)
        rc = trn_coco_eval(&gt, res->image_ids, res->n_image_ids, res->coco, res->n_coco, stats,
                           err, sizeof err);
    trn_coco_gt_free(&gt);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s\n", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    fprintf(out, "COCOeval on %s (%zu images):\n", A->annotations, res->n_image_ids);
    print_coco(out, stats);
    *have_stats = true;
    return 0;
}

static int run(const struct args *A)
{
    const int device = tool_pick_device(PROG, A->device);
    if (device == -2) return 1;
    struct ffr_reader *r = NULL;
    char err[768] = "";
    int rc = ffr_reader_open(&r, A->records, NULL, err, sizeof err);
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
    /* val.py (v7.0) sizes with int(w0 * r), shrinks with INTER_AREA and enlarges with
     * INTER_LINEAR: say so only when the pack differs */
    struct det_meta dm;
    if (det_meta_parse(meta, mlen, &dm, NULL, 0) == 0) {
        if (dm.interp != DET_INTERP_UNKNOWN && dm.interp != DET_INTERP_VAL)
            fprintf(stderr,
                    PROG ": warning: %s was packed with interp '%s'; val.py shrinks with "
                         "INTER_AREA and enlarges with INTER_LINEAR (yolo-pack --interp val)\n",
                    A->records, det_interp_name(dm.interp));
        if (dm.round != DET_ROUND_INT)
            fprintf(stderr,
                    PROG ": warning: %s was packed with sizes rounded %s; val.py (v7.0) sizes "
                         "with int(w0 * r) (yolo-pack --resize-round int, the default)\n",
                    A->records,
                    dm.round == DET_ROUND_CEIL ? "ceil" : "up (a pack older than resize_round)");
    }
    det_meta_free(&dm);
    struct trn_model *models[TRN_TTA_MAX_MODELS] = { 0 };
    const int n_models = A->n_weights ? A->n_weights : 1;
    int ret = 1;
    const struct trn_model_info *mi = NULL;
    for (int k = 0; k < n_models; k++) {
        const char *w = A->n_weights ? A->ensemble[k] : NULL;
        /* ultralytics asserts the weights' classes equal the dataset's: nc only for --cfg alone */
        char werr[768] = "";
        if (trn_weights_load(w, A->cfg, names.n, &models[k], NULL, NULL, werr, sizeof werr) < 0) {
            fprintf(stderr, PROG ": %s\n", werr);
            goto out;
        }
        /* attempt_load(fuse=True)'s lines: the Conv+BN fused model of a released checkpoint
         * (strip_optimizer froze its parameters: 0 gradients) */
        char fl[256];
        if (trn_model_summary_line(models[k], 640, true, true, fl, sizeof fl) > 0)
            fprintf(stderr, "Fusing layers... \n%s\n", fl);
        mi = trn_model_info(models[k]);
        if ((names.n > 0 && names.n != mi->nc) || mi->nc != trn_model_info(models[0])->nc) {
            fprintf(stderr,
                    PROG ": %s has %d classes, the model %s %d\nhint: weights trained on this "
                         "dataset's classes are needed%s\n",
                    A->records, names.n > 0 ? names.n : trn_model_info(models[0])->nc,
                    w ? w : "(--cfg)", mi->nc, n_models > 1 ? " (every model of an ensemble)" : "");
            goto out;
        }
    }
    if (!A->weights)
        fprintf(stderr, PROG ": no --weights: the initial weights of --cfg (seed 0)\n");
    if (n_models > 1) {
        fprintf(stderr, PROG ": Ensemble created with");
        for (int k = 0; k < n_models; k++)
            fprintf(stderr, " %s", A->ensemble[k]);
        fprintf(stderr, "\n");
    }
    mi = trn_model_info(models[0]);
    char dir[PATH_MAX - 64];
    rc = trn_run_dir(A->project, A->name, A->exist_ok, dir, sizeof dir);
    if (rc < 0) {
        fprintf(stderr, PROG ": cannot create the run directory %s/%s: %s\n", A->project, A->name,
                strerror(-rc));
        goto out;
    }
    struct trn_val_opts vo;
    trn_val_opts_default(&vo);
    vo.img_size = (int)A->img;
    vo.batch_size = (int)A->batch;
    vo.micro_batch = (int)A->micro;
    vo.workers = (unsigned)A->workers;
    vo.threads = trn_cli_threads(A->threads, 1); /* one per core, BLAS single (cli.h) */
    vo.conf_thres = (float)A->conf;
    vo.iou_thres = A->iou;
    vo.max_det = (int)A->max_det;
    vo.max_batches = (int)A->stop_after;
    vo.save_json = A->save_json;
    char labels_dir[PATH_MAX];
    if (A->save_txt) {
        snprintf(labels_dir, sizeof labels_dir, "%s/labels", dir);
        if (mkdir(labels_dir, 0777) < 0 && errno != EEXIST) {
            fprintf(stderr, PROG ": cannot create %s: %s\n", labels_dir, strerror(errno));
            goto out;
        }
        vo.save_txt_dir = labels_dir;
        vo.save_conf = A->save_conf;
        vo.save_hybrid = A->save_hybrid;
        if (A->save_hybrid)
            fprintf(stderr, PROG ": WARNING: --save-hybrid adds the labels to the predictions "
                                 "before NMS: the metrics it gives are high, not the model's\n");
    }
    vo.coco91 = mi->nc == 80;
    vo.plot_dir = A->no_plots ? NULL : dir;
    vo.curves_dir = vo.plot_dir; /* val.py plots=True: PR/F1/P/R curves, confusion matrix */
    vo.names = &names;
    vo.log = log_cb;
    /* the bar ends as the table's header; --json keeps stdout for the JSON */
    vo.progress = tool_progress;
    vo.progress_ctx = A->json ? stderr : stdout;
    struct trn_val_result res;
    vo.augment = A->augment;
    vo.single_cls = A->single_cls;
    vo.amp = A->half ? KERN_DT_F16 : KERN_DT_F32;
    vo.device = device;
    vo.device_path = vo.device < 0 && A->device_path;
    vo.cpu_engine = tool_cpu_engine(A->cpu_engine);
    /* a GPU runs the whole rect batch per forward; the CPU's 4 only bounds host memory */
    if (vo.device >= 0 && !A->micro_set) vo.micro_batch = vo.batch_size;
    rc = trn_val_run_ensemble(models, n_models, r, &vo, &res, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s: %s\nhint: pack the dataset with yolo-pack --size %ld\n",
                A->records, err[0] ? err : trn_strerror(rc), A->img);
        trn_val_result_free(&res);
        goto out;
    }
    FILE *tab = A->json ? stderr : stdout;
    print_table(tab, A, &res, &names, res.seen == 0);
    double stats[TRN_COCO_NSTATS];
    bool have_stats = false;
    ret = 0;
    if (A->save_json) ret = save_json(A, dir, &res, tab, stats, &have_stats);
    if (A->save_txt) { /* val.py: "N labels saved to DIR/labels" */
        int nf = 0;
        DIR *d = opendir(labels_dir);
        for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d))
            nf += strlen(e->d_name) > 4 && !strcmp(e->d_name + strlen(e->d_name) - 4, ".txt");
        if (d) closedir(d);
        fprintf(tab, "Results saved to %s\n%d labels saved to %s\n", dir, nf, labels_dir);
    } else if (res.plots_written) {
        fprintf(tab, "Results saved to %s\n", dir);
    }
    if (A->json && ret == 0) print_json(stdout, A, &res, &names, have_stats ? stats : NULL);
    trn_val_result_free(&res);
out:
    for (int k = 0; k < n_models; k++)
        trn_model_destroy(models[k]);
    trn_plot_names_free(&names);
    ffr_reader_close(r);
    return ret;
}

int main(int argc, char **argv)
{
    tool_omp_wait(argv);
    struct args A;
    int rc = parse_args(argc, argv, &A);
    if (rc) return rc == AP_HELPED ? 0 : rc;
    static char packed[4096];
    if (A.data) {
        rc = data_pack(PROG, A.data, A.task, (int)A.img, A.pack_dir, A.pack_codec, false, packed,
                       sizeof packed);
        if (rc == 1) fprintf(stderr, PROG ": --data %s: no %s split\n", A.data, A.task);
        if (rc) return 1;
        A.records = packed;
    }
    const int ret = run(&A);
    /* cairo's and fontconfig's caches, so that leak checkers see a clean exit */
    trn_plots_cleanup();
    return ret;
}
