/*
 * The loader against loose JPEGs, in one run, mosaic on in both arms (issue 5's benchmark).
 *
 *   bench_loader_vs_jpeg RECORDS.ffr DATASET [--seconds S] [--img N] [--split NAME]
 *
 * (a) the trainer's loader with one worker thread, reading RECORDS.ffr (yolo-pack output of
 *     DATASET at --img);
 * (b) the same samples built on one thread from DATASET's JPEG files: for each position the
 *     sampler's plan and draws exactly as the loader makes them, each tile's file read and
 *     decoded and resized as ultralytics' load_image does (cv2.imread + INTER_LINEAR to long side
 *     img: pack_image_load), the labels from the label files, then trn_aug_train_sample.
 * Both run one thread, so each rate is per core. It prints augmented images/s per arm and the
 * ratio, and --json prints them as one object. Records and files are matched by position: yolo-pack
 * writes the samples in pack_ds_scan's (sorted) order; the counts and original sizes are checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "augment.h"
#include "bench_data.h"
#include "dataset.h"
#include "image.h"
#include "loader.h"
#include "sampler.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (all threads): the work done, whatever else runs. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double uniform_cb(void *ctx)
{
    return trn_rng_uniform(ctx);
}

/* Whole file into *buf (grown). Returns its size or -errno. */
static long read_file(const char *path, uint8_t **buf, size_t *cap)
{
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return -errno;
    }
    const size_t n = (size_t)st.st_size;
    if (n > *cap) {
        uint8_t *g = realloc(*buf, n);
        if (!g) {
            close(fd);
            return -ENOMEM;
        }
        *buf = g;
        *cap = n;
    }
    size_t got = 0;
    while (got < n) {
        const ssize_t r = read(fd, *buf + got, n - got);
        if (r <= 0) {
            close(fd);
            return r < 0 ? -errno : -EIO;
        }
        got += (size_t)r;
    }
    close(fd);
    return (long)n;
}

struct jpeg_arm {
    const struct pack_ds *ds;
    struct pack_image_decoder *dec[8]; /* one per tile: results live until the next call */
    float *labels[8];                  /* [cap][5] per tile */
    uint32_t label_cap[8];
    uint8_t *file;
    size_t file_cap;
};

static int load_tile(struct jpeg_arm *J, int k, uint64_t idx, int s, struct trn_aug_tile *t)
{
    const struct pack_ds_sample *sm = pack_ds_get(J->ds, (size_t)idx);
    const long n = read_file(sm->image_path, &J->file, &J->file_cap);
    if (n < 0) return (int)n;
    struct pack_image im;
    const int rc =
        pack_image_load(J->dec[k], s, PACK_IMAGE_INTERP_AUTO_TRAIN, J->file, (size_t)n, &im);
    if (rc < 0) return rc;
    if (sm->n_rows > J->label_cap[k]) {
        float *g = realloc(J->labels[k], (size_t)sm->n_rows * 5 * sizeof *g);
        if (!g) return -ENOMEM;
        J->labels[k] = g;
        J->label_cap[k] = sm->n_rows;
    }
    for (uint32_t j = 0; j < sm->n_rows; j++) {
        float *l = J->labels[k] + 5 * (size_t)j;
        l[0] = (float)sm->rows[j].cls;
        l[1] = sm->rows[j].cx;
        l[2] = sm->rows[j].cy;
        l[3] = sm->rows[j].w;
        l[4] = sm->rows[j].h;
    }
    memset(t, 0, sizeof *t);
    t->pixels = im.pixels;
    t->w = im.width;
    t->h = im.height;
    t->labels = J->labels[k];
    t->n_labels = (int)sm->n_rows;
    return 0;
}

static void hyp_to_aug(const struct trn_hyp *h, struct trn_aug_hyp *a)
{
    trn_aug_hyp_default(a);
    a->hsv_h = h->hsv_h, a->hsv_s = h->hsv_s, a->hsv_v = h->hsv_v;
    a->degrees = h->degrees, a->translate = h->translate, a->scale = h->scale;
    a->shear = h->shear, a->perspective = h->perspective;
    a->flipud = h->flipud, a->fliplr = h->fliplr, a->mosaic = h->mosaic, a->mixup = h->mixup;
}

/* Arm (b): positions 0, 1, ... of epoch 0 (the order the loader takes them), for `seconds`. */
static int run_jpeg_arm(const struct pack_ds *ds, int s, double seconds, double *rate,
                        uint64_t *images)
{
    struct trn_hyp hyp;
    trn_hyp_default(&hyp);
    struct trn_aug_hyp aug;
    hyp_to_aug(&hyp, &aug);
    const struct trn_plan_probs probs = { hyp.mosaic, hyp.mixup, hyp.flipud, hyp.fliplr };
    struct trn_sampler_opts so;
    trn_sampler_opts_default(&so);
    so.n = pack_ds_count(ds);
    struct trn_sampler sp;
    if (trn_sampler_init(&sp, &so) < 0) return -EINVAL;
    struct jpeg_arm J;
    memset(&J, 0, sizeof J);
    J.ds = ds;
    int rc = 0;
    for (int k = 0; k < 8 && rc == 0; k++)
        rc = pack_image_decoder_create(NULL, &J.dec[k]);
    struct trn_aug_ws *ws = NULL;
    if (rc == 0) rc = trn_aug_ws_create(s, 256, 0, &ws);
    uint8_t *dst = malloc((size_t)s * (size_t)s * 3);
    int cap_rows = 0;
    for (size_t i = 0; i < so.n; i++)
        if ((int)pack_ds_get(ds, i)->n_rows > cap_rows) cap_rows = (int)pack_ds_get(ds, i)->n_rows;
    cap_rows = 8 * cap_rows + 1;
    float *rows = malloc((size_t)cap_rows * 5 * sizeof *rows);
    if (rc == 0 && (!dst || !rows)) rc = -ENOMEM;
    const double t0 = now();
    uint64_t done = 0;
    for (uint64_t g = 0; rc == 0; g++) {
        if (g == so.n) g = 0; /* next epoch's order would do as well; the work is the same */
        struct trn_plan plan;
        trn_sampler_plan(&sp, g, &probs, &plan);
        uint64_t idx[8] = { plan.index };
        int n_tiles = 1;
        if (plan.mosaic) {
            n_tiles = plan.mixup ? 8 : 4;
            memcpy(idx, plan.tiles, sizeof plan.tiles);
            if (plan.mixup) memcpy(idx + 4, plan.mixup_tiles, sizeof plan.mixup_tiles);
        }
        struct trn_aug_tile tiles[8];
        for (int k = 0; k < n_tiles && rc == 0; k++)
            rc = load_tile(&J, k, idx[k], s, &tiles[k]);
        if (rc < 0) break;
        /* The draws exactly as trainer/data/loader.c makes them. */
        struct trn_aug_draws d;
        struct trn_rng r;
        memset(&d, 0, sizeof d);
        d.mosaic = plan.mosaic, d.mixup = plan.mixup;
        d.flipud = plan.flipud, d.fliplr = plan.fliplr;
        if (plan.mosaic) {
            trn_sampler_rng(&sp, g, TRN_STREAM_MOSAIC, &r);
            trn_aug_draw_mosaic(&aug, s, uniform_cb, &r, &d.mos);
        } else {
            trn_sampler_rng(&sp, g, TRN_STREAM_LETTERBOX, &r);
            trn_aug_draw_perspective(&aug, uniform_cb, &r, &d.mos.persp);
        }
        if (plan.mixup) {
            trn_sampler_rng(&sp, g, TRN_STREAM_MIXUP, &r);
            trn_aug_draw_mosaic(&aug, s, uniform_cb, &r, &d.mixmos);
        }
        trn_sampler_rng(&sp, g, TRN_STREAM_COLOR, &r);
        d.mixup_ratio = trn_rng_beta(&r, 32.0, 32.0);
        trn_aug_draw_hsv(&aug, uniform_cb, &r, &d.hsv);
        const int nr = trn_aug_train_sample(ws, &aug, &d, tiles, n_tiles, dst, rows, cap_rows);
        if (nr < 0) {
            rc = nr;
            break;
        }
        done++;
        if ((done & 7) == 0 && now() - t0 >= seconds) break;
    }
    const double dt = now() - t0;
    *rate = dt > 0 ? (double)done / dt : 0;
    *images = done;
    for (int k = 0; k < 8; k++) {
        pack_image_decoder_destroy(J.dec[k]);
        free(J.labels[k]);
    }
    free(J.file);
    free(dst);
    free(rows);
    trn_aug_ws_destroy(ws);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_loader_vs_jpeg RECORDS.ffr DATASET [--seconds S] "
                        "[--img N] [--split NAME] [--json]\n");
        return 2;
    }
    const char *records = argv[1], *dataset = argv[2], *split = NULL;
    double seconds = 10;
    int img = 640, json = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--img") && i + 1 < argc)
            img = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--split") && i + 1 < argc)
            split = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "bench_loader_vs_jpeg: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!(seconds > 0) || img < 32 || img % 2) {
        fprintf(stderr, "bench_loader_vs_jpeg: bad --seconds or --img\n");
        return 2;
    }
    struct pack_ds_opts po;
    pack_ds_opts_default(&po);
    po.split = split;
    po.keep_segments = false;
    struct pack_ds *ds = NULL;
    char err[768];
    int rc = pack_ds_scan(dataset, &po, &ds, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "bench_loader_vs_jpeg: %s\n", err);
        return 1;
    }

    /* Alternating rounds, so that load from other processes falls on both arms alike; rates
     * both per wall second and per CPU second of the process (robust to a busy machine). */
    enum { ROUNDS = 3 };
    struct trn_bench_data_opts bo;
    trn_bench_data_opts_default(&bo);
    bo.records = records;
    bo.workers = 1;
    bo.seconds = seconds / ROUNDS;
    bo.img_size = img;
    bo.page_cache = true; /* arm (b) reads through the page cache too */
    double wall_a = 0, cpu_a = 0, wall_b = 0, cpu_b = 0;
    uint64_t img_a = 0, made_a = 0, images_b = 0;
    for (int round = 0; round < ROUNDS; round++) {
        struct trn_bench_data_result a;
        double c0 = cpu_now();
        rc = trn_bench_data_run(&bo, &a, err, sizeof err);
        cpu_a += cpu_now() - c0;
        if (rc < 0) {
            fprintf(stderr, "bench_loader_vs_jpeg: %s\n", err);
            pack_ds_destroy(ds);
            return 1;
        }
        wall_a += a.seconds, img_a += a.images, made_a += a.produced;
        double rate = 0, t0 = now();
        uint64_t got = 0;
        c0 = cpu_now();
        rc = run_jpeg_arm(ds, img, seconds / ROUNDS, &rate, &got);
        cpu_b += cpu_now() - c0;
        wall_b += now() - t0;
        images_b += got;
        if (rc < 0) {
            fprintf(stderr, "bench_loader_vs_jpeg: JPEG arm: %s\n",
                    rc < -3000 ? pack_image_strerror(rc) : trn_aug_strerror(rc));
            pack_ds_destroy(ds);
            return 1;
        }
    }
    const double ra = (double)img_a / wall_a, rb = (double)images_b / wall_b;
    const double ca = (double)made_a / cpu_a, cb = (double)images_b / cpu_b;
    const size_t n = pack_ds_count(ds);
    if (json)
        printf("{\"img\": %d, \"images\": %zu, \"ffr_images_per_s_per_core\": %.2f, "
               "\"jpeg_images_per_s_per_core\": %.2f, \"ffr_images_per_cpu_s\": %.2f, "
               "\"jpeg_images_per_cpu_s\": %.2f, \"ratio_cpu\": %.3f}\n",
               img, n, ra, rb, ca, cb, ca / cb);
    else
        printf(
            "dataset %s: %zu images, augmented %dx%d, mosaic 1.0 in both arms, one thread each,\n"
            "%d alternating rounds of %.1f s per arm\n"
            "  (a) loader from the ffr file:   %7.1f images/s wall, %7.1f images per CPU s\n"
            "  (b) loose JPEGs, decode+resize: %7.1f images/s wall, %7.1f images per CPU s\n"
            "  ratio (a)/(b): %.2fx wall, %.2fx CPU\n",
            dataset, n, img, img, ROUNDS, seconds / ROUNDS, ra, ca, rb, cb, ra / rb, ca / cb);
    pack_ds_destroy(ds);
    return 0;
}
