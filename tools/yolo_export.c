/*
 * yolo-export: a trained model for other runtimes, as ultralytics' export.py for ONNX and as a
 * plain PyTorch state dict (trainer/weights/export.h).
 *
 *   yolo-export --weights W [--cfg MODEL] --include onnx|pt [--include ...] [--img N | H W]
 *               [--batch N] [--dynamic] [--half] [--nms] [--conf-thres X] [--iou-thres X]
 *               [--max-det N] [--opset N] [-o OUT]
 *
 * W: our checkpoint (best.ckpt / last.ckpt), an ultralytics .pt, or (with --cfg) a plain state
 * dict such as `--include pt` writes. Outputs beside W unless -o: <stem>.onnx and
 * <stem>_state_dict.pt (never the weights file itself). Class names: the checkpoint's metadata,
 * else COCO's when nc is 80, else "class<i>".
 *
 * Exit: 0, 1 (weights unreadable, export or write failed), 2 (bad arguments).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "argparse.h"
#include "cli.h"
#include "dataset.h"
#include "export.h"
#include "model.h"
#include "plots.h"
#include "ptload.h"
#include "weights.h"
#include "errors.h"

#define PROG    "yolo-export"
#define STR_(x) #x
#define XSTR(x) STR_(x)

struct args {
    const char *weights, *cfg, *out;
    bool onnx, pt, dynamic, half, nms;
    long img[2]; /* --img N or H W */
    int n_img;
    long img_h, img_w, batch, max_det, opset;
    double conf, iou;
};

/* --include: "onnx", "pt" or "onnx,pt" (repeatable) into A. */
static int parse_include(const char *v, void *dst, char *why, size_t cap)
{
    struct args *A = dst;
    char buf[64];
    int n = 0;
    if (strlen(v) < sizeof buf) {
        snprintf(buf, sizeof buf, "%s", v);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), n++) {
            if (!strcasecmp(t, "onnx")) {
                A->onnx = true;
            } else if (!strcasecmp(t, "pt") || !strcasecmp(t, "torch")) {
                A->pt = true;
            } else {
                n = 0;
                break;
            }
        }
    }
    if (n) return 0;
    snprintf(why, cap, "is not onnx or pt (or onnx,pt)");
    return -EINVAL;
}

/* Returns 0 to run, 2 on bad arguments (message printed). */
static int parse_args(int argc, char **argv, struct args *A)
{
    memset(A, 0, sizeof *A);
    A->batch = 1;
    A->conf = 0.25;
    A->iou = 0.45;
    A->max_det = 100;
    A->opset = TRN_EXPORT_OPSET_DEFAULT;
    const struct ap_opt t[] = {
        AP_OPT("--weights", AP_STR, &A->weights, "W",
               "our checkpoint (.ckpt), an ultralytics .pt, or with --cfg a plain state dict .pt"),
        AP_OPT("--cfg", AP_STR, &A->cfg, "MODEL",
               "model yaml (path or yolov5n/s/...) replacing W's own"),
        { .names = "--include",
          .kind = AP_CALL,
          .dst = A,
          .metavar = "F",
          .help = "onnx or pt; repeat or comma-separate for both",
          .call = parse_include },
        { .names = "--img|--imgsz|--img-size",
          .kind = AP_LONGS,
          .dst = A->img,
          .metavar = "N | H W",
          .help = "ONNX input size, pixels (default 640)",
          .lo = 32,
          .hi = 16384,
          .max_n = 2,
          .n = &A->n_img },
        AP_RANGE("--batch|--batch-size", AP_LONG, &A->batch, "N", "ONNX batch size (default 1)", 1,
                 65536),
        AP_OPT("--dynamic", AP_FLAG, &A->dynamic, NULL, "ONNX: symbolic batch, height and width"),
        AP_OPT("--half", AP_FLAG, &A->half, NULL, "fp16 weights (and ONNX input/outputs)"),
        AP_OPT("--nms", AP_FLAG, &A->nms, NULL,
               "ONNX: append NonMaxSuppression, output 'detections' [n, 7]: batch x1 y1 x2 y2 "
               "conf class"),
        AP_RANGE("--conf-thres", AP_DOUBLE, &A->conf, "X", "--nms score threshold (default 0.25)",
                 0, 1),
        AP_RANGE("--iou-thres", AP_DOUBLE, &A->iou, "X", "--nms IoU threshold (default 0.45)", 0,
                 1),
        AP_RANGE("--max-det", AP_LONG, &A->max_det, "N",
                 "--nms boxes per image and class (default 100)", 1, 100000),
        AP_RANGE("--opset", AP_LONG, &A->opset, "N",
                 "ONNX opset (default " XSTR(TRN_EXPORT_OPSET_DEFAULT) ")", TRN_EXPORT_OPSET_MIN,
                 TRN_EXPORT_OPSET_MAX),
        AP_OPT("-o|--output", AP_STR, &A->out, "OUT",
               "output file (one --include only); default beside W: <stem>.onnx, "
               "<stem>_state_dict.pt"),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = PROG,
        .usage = "--weights W --include onnx|pt [options]",
        .about = "Export a model as ONNX (inference graph, Detect decode inside) or as a PyTorch "
                 "state dict with ultralytics' parameter names.",
        .opts = t,
        .n_opts = sizeof t / sizeof t[0],
    };
    const int rc = ap_parse(&sp, argc, argv);
    if (rc) return rc;
    A->img_h = A->n_img ? A->img[0] : 640;
    A->img_w = A->n_img == 2 ? A->img[1] : A->img_h;
    if (!A->weights) return ap_usage_error(&sp, "--weights W is required");
    if (!A->onnx && !A->pt) return ap_usage_error(&sp, "--include onnx|pt is required");
    if (A->out && A->onnx && A->pt)
        return ap_usage_error(&sp, "-o names one file: give one --include");
    if (A->nms && !A->onnx) return ap_usage_error(&sp, "--nms applies to --include onnx");
    return 0;
}

static bool ends_with_ci(const char *s, const char *suf)
{
    const size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

/* The default output: W without its extension + suffix. */
static void out_path(const char *weights, const char *suffix, char *dst, size_t cap)
{
    snprintf(dst, cap, "%s", weights);
    char *slash = strrchr(dst, '/'), *dot = strrchr(dst, '.');
    if (dot && (!slash || dot > slash + 1)) *dot = '\0';
    const size_t n = strlen(dst);
    snprintf(dst + n, cap - n, "%s", suffix);
}

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* The class count of a plain state dict for the architecture of m: from the size of its first
 * Detect bias (na * (nc + 5)); 0 if it cannot tell. */
static int state_dict_nc(const char *path, const struct trn_model *m)
{
    const struct trn_model_info *I = trn_model_info(m);
    const struct trn_conv *c = trn_model_conv(m, trn_model_layer(m, I->detect)->conv0);
    const char *want = c && c->bias >= 0 ? trn_model_tensor(m, c->bias)->name : NULL;
    struct trn_pt *pt = NULL;
    if (!want || trn_pt_open(path, &pt, NULL, 0) < 0) return 0;
    const struct trn_pt_tensor *sd = NULL;
    const int n = trn_pt_state_dict(pt, "", &sd, NULL, 0);
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(sd[i].name, want) && sd[i].ndim == 1 && sd[i].numel % I->na == 0 &&
            sd[i].numel / I->na > 5 && sd[i].numel / I->na - 5 <= 65536)
            nc = (int)(sd[i].numel / I->na - 5);
    trn_pt_close(pt);
    return nc;
}

/* The model: trn_weights_load, or with --cfg a plain state dict (torch.save(state_dict()) or
 * our --include pt), which carries no architecture of its own (its class count is read from the
 * Detect bias). */
static int load(const struct args *A, struct trn_model **m, char **meta, size_t *mlen)
{
    char err[768] = "";
    int rc = trn_weights_load(A->weights, A->cfg, 0, m, meta, mlen, err, sizeof err);
    if (rc == 0) return 0;
    if (A->cfg && rc != -ENOENT && ends_with_ci(A->weights, ".pt")) {
        char err2[768] = "";
        int r2 = trn_weights_load(NULL, A->cfg, 0, m, NULL, NULL, err2, sizeof err2);
        const int nc = r2 == 0 ? state_dict_nc(A->weights, *m) : 0;
        if (r2 == 0 && nc > 0 && nc != trn_model_info(*m)->nc) {
            trn_model_destroy(*m);
            *m = NULL;
            r2 = trn_weights_load(NULL, A->cfg, nc, m, NULL, NULL, err2, sizeof err2);
        }
        if (r2 == 0) r2 = trn_pt_load_into_model(A->weights, "", *m, err2, sizeof err2);
        if (r2 == 0) return 0;
        trn_model_destroy(*m);
        *m = NULL;
        /* the state-dict reading says more than "no key 'model'" */
        if (err2[0]) snprintf(err, sizeof err, "%s", err2);
    }
    fprintf(stderr, PROG ": %s\n", err[0] ? err : strerror(-rc));
    if (rc != -ENOENT && !A->cfg && ends_with_ci(A->weights, ".pt"))
        fprintf(stderr, "hint: a plain state dict needs --cfg MODEL (its architecture)\n");
    return 1;
}

static int run(const struct args *A)
{
    struct trn_model *m = NULL;
    struct trn_plot_names names = { 0 };
    char *meta = NULL;
    size_t mlen = 0;
    int ret = 1;
    if (load(A, &m, &meta, &mlen)) goto out;
    if (meta && trn_plot_names_parse(meta, mlen, &names) < 0) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    const struct trn_model_info *mi = trn_model_info(m);
    const char *const *nm = NULL;
    if (names.n == mi->nc) {
        nm = (const char *const *)names.names;
        for (int c = 0; c < names.n; c++)
            if (!names.names[c]) nm = NULL; /* gaps: numbers for all, not a partial list */
    } else if (mi->nc == 80) {
        nm = pack_coco80_names;
    }
    char path[PATH_MAX];
    if (A->onnx) {
        struct trn_export_opts o;
        trn_export_opts_default(&o);
        int smax = 32;
        for (int l = 0; l < mi->nl; l++)
            if (mi->stride[l] > smax) smax = mi->stride[l];
        o.img_h = (int)((A->img_h + smax - 1) / smax * smax);
        o.img_w = (int)((A->img_w + smax - 1) / smax * smax);
        if (o.img_h != A->img_h || o.img_w != A->img_w)
            fprintf(stderr,
                    PROG ": warning: --img %ldx%ld must be a multiple of max stride %d, updating "
                         "to %dx%d\n",
                    A->img_h, A->img_w, smax, o.img_h, o.img_w);
        o.batch = (int)A->batch;
        o.dynamic = A->dynamic;
        o.half = A->half;
        o.nms = A->nms;
        o.conf_thres = (float)A->conf;
        o.iou_thres = (float)A->iou;
        o.max_det = (int)A->max_det;
        o.opset = (int)A->opset;
        o.names = nm;
        o.n_names = nm ? mi->nc : 0;
        o.source = A->weights;
        if (A->out)
            snprintf(path, sizeof path, "%s", A->out);
        else
            out_path(A->weights, ".onnx", path, sizeof path);
        if (same_file(path, A->weights)) {
            fprintf(stderr, PROG ": %s: the output would overwrite the weights\n", path);
            goto out;
        }
        char err[768] = "";
        const int rc = trn_export_onnx(m, &o, path, err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, PROG ": ONNX export failed: %s\n", err[0] ? err : trn_strerror(rc));
            goto out;
        }
        struct stat st;
        const double mb = stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0;
        char shape[96];
        if (o.dynamic)
            snprintf(shape, sizeof shape, "input [batch, %d, height, width], metadata %dx%d",
                     mi->ch, o.img_h, o.img_w);
        else
            snprintf(shape, sizeof shape, "input %dx%dx%dx%d", o.batch, mi->ch, o.img_h, o.img_w);
        printf("ONNX: %s (%.1f MB, opset %d, %s, %s%s)\n", path, mb, o.opset,
               o.half ? "fp16" : "fp32", shape, o.nms ? ", NMS" : "");
    }
    if (A->pt) {
        if (A->out)
            snprintf(path, sizeof path, "%s", A->out);
        else
            out_path(A->weights, "_state_dict.pt", path, sizeof path);
        if (same_file(path, A->weights)) {
            fprintf(stderr, PROG ": %s: the output would overwrite the weights\n", path);
            goto out;
        }
        char err[768] = "";
        const int rc = trn_export_pt(m, A->half, path, err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, PROG ": PyTorch export failed: %s\n", err[0] ? err : trn_strerror(rc));
            goto out;
        }
        struct stat st;
        const double mb = stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0;
        printf("PyTorch: %s (%.1f MB, %d tensors, %s state dict)\n", path, mb, mi->n_tensors,
               A->half ? "fp16" : "fp32");
    }
    ret = 0;
out:
    free(meta);
    trn_plot_names_free(&names);
    trn_model_destroy(m);
    return ret;
}

int main(int argc, char **argv)
{
    struct args A;
    const int rc = parse_args(argc, argv, &A);
    if (rc) return rc == AP_HELPED ? 0 : rc;
    const int ret = run(&A);
    trn_plots_cleanup(); /* fontconfig's caches (plots.h links them): clean leak checks */
    return ret;
}
