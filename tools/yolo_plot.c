/*
 * yolo-plot: draws the first batches of a packed dataset as training (or validation) sees them,
 * with their labels, as ultralytics' train_batchK.jpg: the standalone twin of yolo-train --plot.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hyp.h"
#include "plot_batches.h"
#include "plots.h"

static void usage(FILE *f)
{
    fputs(
        "usage: yolo-plot --records FILE.ffr [-o DIR] [--batch-size 16] [--img 640] [--batches 3]\n"
        "                 [--hyp hyp.yaml] [--seed S] [--val]\n"
        "\n"
        "Writes DIR/train_batch0.jpg... (--val: val_batch0.jpg..., letterboxed rect batches)\n"
        "with each image's boxes and class names, from the same loader and augmentation as\n"
        "yolo-train, so you can see that labels follow the pixels. DIR defaults to '.'.\n",
        f);
}

static void say_written(void *ctx, const char *path)
{
    (void)ctx;
    printf("%s\n", path);
}

static int bad(const char *what, const char *v)
{
    fprintf(stderr, "yolo-plot: bad %s '%s'\nhint: yolo-plot --help\n", what, v);
    return 2;
}

static int num(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        { "records", required_argument, 0, 'r' },
        { "output", required_argument, 0, 'o' },
        { "batch-size", required_argument, 0, 'b' },
        { "img", required_argument, 0, 'i' },
        { "batches", required_argument, 0, 'n' },
        { "hyp", required_argument, 0, 'y' },
        { "seed", required_argument, 0, 's' },
        { "val", no_argument, 0, 'v' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    const char *records = NULL, *dir = ".", *hyp_path = NULL;
    long batch = 16, img = 640, batches = 3, seed = 0;
    int val = 0, c;
    while ((c = getopt_long(argc, argv, "r:o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'r':
            records = optarg;
            break;
        case 'o':
            dir = optarg;
            break;
        case 'b':
            if (num(optarg, 1, 1024, &batch)) return bad("--batch-size", optarg);
            break;
        case 'i':
            if (num(optarg, 32, 8192, &img)) return bad("--img", optarg);
            break;
        case 'n':
            if (num(optarg, 1, 100, &batches)) return bad("--batches", optarg);
            break;
        case 'y':
            hyp_path = optarg;
            break;
        case 's':
            if (num(optarg, 0, 1L << 30, &seed)) return bad("--seed", optarg);
            break;
        case 'v':
            val = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "hint: yolo-plot --help\n");
            return 2;
        }
    }
    if (!records || optind != argc) {
        fprintf(stderr, "yolo-plot: %s\nhint: yolo-plot --help\n",
                records ? "unexpected argument" : "missing --records FILE.ffr");
        return 2;
    }
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
