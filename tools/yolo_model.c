/*
 * yolo-model: build a model from its yaml and print the summary ultralytics prints, then exit.
 * It is the `--cfg X --summary` part of yolo-train, kept as its own small program until the
 * trainer's main takes it over.
 *
 *   yolo-model --cfg yolov5s [--nc N] [--img N] [--fuse] [--summary] [--verbose [--seed S]]
 *
 * --cfg takes a path, or a bare name (yolov5s, yolov5s.yaml) looked up in $FFYOLO_MODELS_DIR,
 * ./models and the source tree's models (TRN_MODELS_DIR, set by meson).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argparse.h"
#include "model.h"
#include "errors.h"

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

/* The parameter table of ultralytics' model_info(verbose=True), on freshly initialised weights. */
static void print_params(struct trn_model *m, uint64_t seed)
{
    trn_model_init(m, seed);
    const struct trn_model_info *I = trn_model_info(m);
    const float *P = trn_model_arena(m, TRN_ARENA_PARAM);
    printf("%5s %40s %9s %12s %20s %10s %10s\n", "layer", "name", "gradient", "parameters", "shape",
           "mu", "sigma");
    int row = 0;
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *t = trn_model_tensor(m, k);
        if (t->arena != TRN_ARENA_PARAM) continue;
        double s = 0, s2 = 0;
        for (size_t j = 0; j < t->numel; j++)
            s += P[t->offset + j];
        const double mu = s / (double)t->numel;
        for (size_t j = 0; j < t->numel; j++)
            s2 += (P[t->offset + j] - mu) * (P[t->offset + j] - mu);
        const double sd = t->numel > 1 ? sqrt(s2 / (double)(t->numel - 1)) : NAN;
        char shape[40] = "[";
        for (int d = 0; d < t->ndim; d++) {
            char x[16];
            snprintf(x, sizeof x, "%s%d", d ? ", " : "", t->shape[d]);
            strncat(shape, x, sizeof shape - strlen(shape) - 2);
        }
        strcat(shape, "]");
        printf("%5d %40s %9s %12zu %20s %10.3g %10.3g\n", row++, t->name, "True", t->numel, shape,
               mu, sd);
    }
}

int main(int argc, char **argv)
{
    const char *cfg = NULL;
    long nc = 0, seed = 0, img = 640;
    bool verbose = false, summary = false, fuse = false;
    const struct ap_opt opts[] = {
        AP_OPT("--cfg", AP_STR, &cfg, "MODEL",
               "model yaml: a path, or a name (yolov5n, yolov5s.yaml) looked up in "
               "$FFYOLO_MODELS_DIR, ./models, " TRN_MODELS_DIR),
        AP_RANGE("--nc", AP_LONG, &nc, "N",
                 "override the yaml's number of classes (changes only Detect)", 1, 100000),
        AP_OPT("--summary", AP_FLAG, &summary, NULL,
               "print the layer table and summary line (the default)"),
        AP_RANGE("--img|--imgsz|--img-size", AP_LONG, &img, "N",
                 "image size the summary's GFLOPs are given at (default 640)", 32, 16384),
        AP_OPT("--fuse", AP_FLAG, &fuse, NULL,
               "also print the summary after Conv+BN fusion, as val.py and detect.py print it "
               "(\"Fusing layers... \")"),
        AP_OPT("--verbose", AP_FLAG, &verbose, NULL,
               "also list every parameter (name, shape, mean, std of the initial weights), as "
               "ultralytics' model.info(verbose=True)"),
        AP_RANGE("--seed", AP_LONG, &seed, "S",
                 "seed of the initial weights for --verbose (default 0)", 0, 2147483647.0),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = "yolo-model",
        .usage = "--cfg MODEL [--nc N] [--img N] [--fuse] [--summary] [--verbose [--seed S]]",
        .about = "Build a model from its yaml and print the summary ultralytics prints.",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
    };
    const int arc = ap_parse(&sp, argc, argv);
    if (arc) return arc == AP_HELPED ? 0 : arc;
    if (!cfg) return ap_usage_error(&sp, "--cfg is required (e.g. --cfg yolov5s)");
    char path[4096];
    int rc = trn_model_cfg_find(cfg, TRN_MODELS_DIR, path, sizeof path);
    if (rc) {
        fprintf(stderr,
                "yolo-model: %s: model yaml not found\n"
                "hint: give a path, or a name from models (yolov5n/s/m/l/x), or set "
                "FFYOLO_MODELS_DIR\n",
                cfg);
        return 1;
    }
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    o.nc = (int)nc;
    struct trn_model *m = NULL;
    char err[512];
    rc = trn_model_load(path, &o, &m, err, sizeof err);
    if (rc) {
        fprintf(stderr, "yolo-model: %s\n", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    const int need = trn_model_summary(m, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (!text) {
        fprintf(stderr, "yolo-model: out of memory\n");
        trn_model_destroy(m);
        return 1;
    }
    trn_model_summary(m, text, (size_t)need + 1);
    if (trn_model_info(m)->anchors_reversed) printf("AutoAnchor: Reversing anchor order\n");
    /* the table, then the summary line at --img (the table's own line is at 640) */
    char *last = text[0] ? strrchr(text, '\n') : NULL;
    if (last) {
        *last = '\0';
        last = strrchr(text, '\n');
        if (last) last[1] = '\0';
    }
    fputs(text, stdout);
    free(text);
    char line[256];
    trn_model_summary_line(m, (int)img, false, false, line, sizeof line);
    printf("%s\n", line);
    if (fuse) {
        trn_model_summary_line(m, (int)img, true, false, line, sizeof line);
        printf("Fusing layers... \n%s\n", line);
    }
    if (verbose) print_params(m, (uint64_t)seed);
    trn_model_destroy(m);
    return 0;
}
