/*
 * yolo-plot: draws the first batches of a packed dataset as training (or validation) sees them,
 * with their labels, as ultralytics' train_batchK.jpg: the standalone twin of yolo-train --plot.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "argparse.h"
#include "hyp.h"
#include "plot_batches.h"
#include "plots.h"

static void say_written(void *ctx, const char *path)
{
    (void)ctx;
    printf("%s\n", path);
}

int main(int argc, char **argv)
{
    const char *records = NULL, *dir = ".", *hyp_path = NULL;
    long batch = 16, img = 640, batches = 3, seed = 0;
    bool val = false;
    const struct ap_opt opts[] = {
        AP_OPT("-r|--records", AP_STR, &records, "FILE.ffr", "the packed dataset"),
        AP_OPT("-o|--output", AP_STR, &dir, "DIR", "where the pictures go (default '.')"),
        AP_RANGE("--batch-size", AP_LONG, &batch, "N", "images per batch (default 16)", 1, 1024),
        AP_RANGE("--img|--imgsz|--img-size", AP_LONG, &img, "N", "image size (default 640)", 32,
                 8192),
        AP_RANGE("--batches", AP_LONG, &batches, "N", "batches drawn (default 3)", 1, 100),
        AP_OPT("--hyp", AP_STR, &hyp_path, "FILE", "hyperparameter yaml (default: scratch-low)"),
        AP_RANGE("--seed", AP_LONG, &seed, "S", "the loader's seed (default 0)", 0,
                 (double)(1L << 30)),
        AP_OPT("--val", AP_FLAG, &val, NULL,
               "val_batch0.jpg...: letterboxed rect batches instead of training batches"),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = "yolo-plot",
        .usage = "--records FILE.ffr [-o DIR] [options]",
        .about =
            "Writes DIR/train_batch0.jpg... (--val: val_batch0.jpg...) with each image's boxes "
            "and class names, from the same loader and augmentation as yolo-train, so you can "
            "see that labels follow the pixels.",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
    };
    const int arc = ap_parse(&sp, argc, argv);
    if (arc) return arc == AP_HELPED ? 0 : arc;
    if (!records) return ap_usage_error(&sp, "missing --records FILE.ffr");
    struct trn_loader_opts lo;
    trn_loader_opts_default(&lo);
    if (hyp_path) {
        char err[512];
        if (trn_hyp_load(hyp_path, NULL, NULL, &lo.hyp, err, sizeof err) < 0) {
            fprintf(stderr, "yolo-plot: %s\n", err);
            return 1;
        }
    }
    lo.batch_size = (int)batch;
    lo.img_size = (int)img;
    lo.seed = (uint64_t)seed;
    if (val) lo.mode = TRN_LOADER_VAL;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "yolo-plot: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char err[1024] = "";
    const int n = trn_plot_batches(records, &lo, dir, val ? "val_batch" : "train_batch",
                                   (int)batches, say_written, NULL, err, sizeof err);
    trn_plots_cleanup();
    if (n < 0) {
        fprintf(stderr, "yolo-plot: %s\n", err[0] ? err : strerror(-n));
        return 1;
    }
    return 0;
}
