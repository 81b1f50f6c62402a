/*
 * bench_image: single-thread speed of pack/image on coco128 and of the resize kernels.
 *
 * usage: bench_image [COCO128_DIR]   (meson: `meson test --benchmark --suite pack`)
 *
 * Reports images/s for: TurboJPEG alone (tjDecompress2 to RGB, the floor), pack_image_decode
 * (plus header walk, EXIF, orientation), and pack_image_load at S=640 (ultralytics' train and
 * val rules; most coco128 images already have long side 640) and at S=512 (every image
 * resized). Then milliseconds per pack_image_resize call for typical shapes. Timings, not
 * assertions: the exit status is 0 unless something fails to decode.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

#include "image.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct file {
    uint8_t *data;
    size_t len;
};

static int load(const char *path, struct file *f)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    fseek(fp, 0, SEEK_END);
    const long n = ftell(fp);
    rewind(fp);
    f->data = malloc((size_t)n);
    f->len = (size_t)n;
    const int ok = f->data && fread(f->data, 1, f->len, fp) == f->len;
    fclose(fp);
    return ok ? 0 : -1;
}

/* Run `fn` over all files for about `seconds`; returns images per second. */
typedef int (*bench_fn)(void *ctx, const struct file *f);

static double rate(bench_fn fn, void *ctx, const struct file *files, size_t n, double seconds)
{
    size_t done = 0;
    const double t0 = now();
    double t;
    do {
        for (size_t i = 0; i < n; i++)
            if (fn(ctx, &files[i]) != 0) return -1;
        done += n;
        t = now() - t0;
    } while (t < seconds);
    return (double)done / t;
}

struct tj_ctx {
    tjhandle h;
    uint8_t *buf;
};

static int run_tj(void *ctx, const struct file *f)
{
    struct tj_ctx *c = ctx;
    int w, h, ss, cs;
    if (tjDecompressHeader3(c->h, f->data, (unsigned long)f->len, &w, &h, &ss, &cs) != 0) return -1;
    const int rc = tjDecompress2(c->h, f->data, (unsigned long)f->len, c->buf, w, 0, h, TJPF_RGB,
                                 TJFLAG_ACCURATEDCT);
    return rc == 0 || tjGetErrorCode(c->h) == TJERR_WARNING ? 0 : -1;
}

struct load_ctx {
    struct pack_image_decoder *dec;
    int size;
    enum pack_image_interp interp;
};

static int run_load(void *ctx, const struct file *f)
{
    struct load_ctx *c = ctx;
    struct pack_image img;
    return pack_image_load(c->dec, c->size, c->interp, f->data, f->len, &img) < 0 ? -1 : 0;
}

static void bench_resize(int sw, int sh, int dw, int dh, enum pack_image_interp ip,
                         const char *note)
{
    uint8_t *src = malloc((size_t)sw * sh * 3), *dst = malloc((size_t)dw * dh * 3);
    uint32_t x = 1;
    for (size_t i = 0; i < (size_t)sw * sh * 3; i++)
        src[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 24);
    const size_t ws = pack_image_resize_work_size(dw, dh, sw, sh, ip);
    void *work = malloc(ws ? ws : 1);
    int reps = 0;
    const double t0 = now();
    double t;
    do {
        pack_image_resize(dst, dw, dh, 3 * (size_t)dw, src, sw, sh, 3 * (size_t)sw, ip, work, ws);
        reps++;
        t = now() - t0;
    } while (t < 0.3);
    printf("resize %4dx%-4d -> %4dx%-4d %-6s %7.3f ms  %s\n", sw, sh, dw, dh,
           ip == PACK_IMAGE_INTERP_AREA ? "area" : "linear", 1e3 * t / reps, note);
    free(work);
    free(src);
    free(dst);
}

int main(int argc, char **argv)
{
    const char *root = argc > 1 ? argv[1] : "../shared/datasets/coco128";
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s/images/*/*.jpg", root);
    glob_t g;
    struct file *files = NULL;
    size_t n = 0;
    if (glob(pattern, 0, NULL, &g) == 0) {
        files = calloc(g.gl_pathc, sizeof *files);
        for (size_t i = 0; i < g.gl_pathc; i++)
            if (load(g.gl_pathv[i], &files[n]) == 0) n++;
        globfree(&g);
    }
    printf("# pack/image benchmark, 1 thread\n");
    if (n > 0) {
        double mp = 0;
        struct pack_image_decoder *dec;
        if (pack_image_decoder_create(NULL, &dec) != 0) return 1;
        for (size_t i = 0; i < n; i++) {
            struct pack_image img;
            if (pack_image_decode(dec, files[i].data, files[i].len, &img) != 0) return 1;
            mp += (double)img.width * img.height / 1e6;
        }
        printf("coco128: %zu images, %.1f MP (%.2f MP per image)\n", n, mp, mp / (double)n);
        struct tj_ctx tj = { tjInitDecompress(), malloc((size_t)PACK_IMAGE_MAX_SIDE * 3 * 1024) };
        const double r_tj = rate(run_tj, &tj, files, n, 2.0);
        struct load_ctx c = { dec, 0, PACK_IMAGE_INTERP_LINEAR };
        const double r_dec = rate(run_load, &c, files, n, 2.0);
        c.size = 640, c.interp = PACK_IMAGE_INTERP_AUTO_TRAIN;
        const double r_train = rate(run_load, &c, files, n, 2.0);
        c.interp = PACK_IMAGE_INTERP_AUTO_VAL;
        const double r_val = rate(run_load, &c, files, n, 2.0);
        c.size = 512, c.interp = PACK_IMAGE_INTERP_LINEAR;
        const double r_512l = rate(run_load, &c, files, n, 2.0);
        c.interp = PACK_IMAGE_INTERP_AREA;
        const double r_512a = rate(run_load, &c, files, n, 2.0);
        printf("tjDecompress2 only          %7.1f img/s (%.0f MP/s)\n", r_tj, r_tj * mp / n);
        printf("pack_image_decode           %7.1f img/s (%.2fx of TurboJPEG)\n", r_dec,
               r_dec / r_tj);
        printf("load S=640 train (linear)   %7.1f img/s (%.2fx of decode)\n", r_train,
               r_train / r_dec);
        printf("load S=640 val (area)       %7.1f img/s (%.2fx of decode)\n", r_val, r_val / r_dec);
        printf("load S=512 linear (all)     %7.1f img/s (%.2fx of decode)\n", r_512l,
               r_512l / r_dec);
        printf("load S=512 area (all)       %7.1f img/s (%.2fx of decode)\n", r_512a,
               r_512a / r_dec);
        tjDestroy(tj.h);
        free(tj.buf);
        pack_image_decoder_destroy(dec);
        for (size_t i = 0; i < n; i++)
            free(files[i].data);
    } else {
        printf("# no images under %s/images: coco128 part skipped\n", root);
    }
    free(files);
    bench_resize(640, 480, 640, 480, PACK_IMAGE_INTERP_LINEAR, "same size: a copy");
    bench_resize(480, 640, 480, 640, PACK_IMAGE_INTERP_LINEAR, "same size: a copy");
    bench_resize(1280, 960, 640, 480, PACK_IMAGE_INTERP_LINEAR, "exact 2x: area-fast path");
    bench_resize(1280, 960, 640, 480, PACK_IMAGE_INTERP_AREA, "exact 2x");
    bench_resize(800, 600, 640, 480, PACK_IMAGE_INTERP_LINEAR, "shrink 1.25x");
    bench_resize(800, 600, 640, 480, PACK_IMAGE_INTERP_AREA, "shrink 1.25x, float tables");
    bench_resize(500, 375, 640, 480, PACK_IMAGE_INTERP_LINEAR, "enlarge 1.28x");
    bench_resize(500, 375, 640, 480, PACK_IMAGE_INTERP_AREA, "enlarge 1.28x");
    bench_resize(1920, 1080, 640, 360, PACK_IMAGE_INTERP_LINEAR, "shrink 3x");
    bench_resize(1920, 1080, 640, 360, PACK_IMAGE_INTERP_AREA, "exact 3x: block average");
    bench_resize(640, 480, 512, 384, PACK_IMAGE_INTERP_LINEAR, "shrink 1.25x");
    bench_resize(640, 480, 512, 384, PACK_IMAGE_INTERP_AREA, "shrink 1.25x, float tables");
    return 0;
}
