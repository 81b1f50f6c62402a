/*
 * ffr export: a detection record's stored image, bit for bit, and its labels as a YOLO txt.
 *
 * RGB records become PPM (default) or PNG; both are lossless, so the pixels written are exactly
 * the ones stored (after undoing RGB8-SUB's filter). PNG goes through libpng rather than cairo:
 * cairo would first convert the pixels into its native 32-bit xRGB surface, and libpng writes our
 * RGB8 rows as they are, with nothing in between to get wrong. JPEG records are written as the
 * JPEG bytes stored, which is exactly what the packer kept.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>

#include "ffr_tool.h"

/* Creates dir when missing; fine when it is already a directory. */
static int make_dir(const char *dir)
{
    if (mkdir(dir, 0777) == 0) return 0;
    if (errno != EEXIST) return -errno;
    struct stat st;
    if (stat(dir, &st) < 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int write_file(const char *path, const void *a, size_t na, const void *b, size_t nb)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -errno;
    int rc = ffrt_write_all(f, a, na);
    if (rc == 0) rc = ffrt_write_all(f, b, nb);
    if (fclose(f) != 0 && rc == 0) rc = errno ? -errno : -EIO;
    if (rc < 0) unlink(path);
    return rc;
}

static int write_ppm(const char *path, const uint8_t *rgb, uint32_t h, uint32_t w)
{
    char head[64];
    const int n = snprintf(head, sizeof head, "P6\n%" PRIu32 " %" PRIu32 "\n255\n", w, h);
    return write_file(path, head, (size_t)n, rgb, (size_t)h * w * 3);
}

struct png_err {
    jmp_buf jmp;
    char msg[200];
};

static void png_on_error(png_structp png, png_const_charp msg)
{
    struct png_err *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jmp, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* Returns 0, -errno, or -EIO with *why set from libpng. */
static int write_png(const char *path, const uint8_t *rgb, uint32_t h, uint32_t w, char *why,
                     size_t why_cap)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -errno;
    struct png_err e = { .msg = "" };
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &e, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* volatile: read after longjmp. */
    volatile int rc = -ENOMEM;
    if (!png || !info) goto out;
    if (setjmp(e.jmp)) {
        rc = -EIO;
        snprintf(why, why_cap, "libpng: %s", e.msg);
        goto out;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (uint32_t y = 0; y < h; y++)
        png_write_row(png, rgb + (size_t)y * w * 3);
    png_write_end(png, info);
    rc = 0;
out:
    png_destroy_write_struct(png ? &png : NULL, info ? &info : NULL);
    if (fclose(f) != 0 && rc == 0) rc = errno ? -errno : -EIO;
    if (rc < 0) unlink(path);
    return rc;
}

/* Appends a formatted row to a growing text buffer. */
struct text {
    char *p;
    size_t len, cap;
    int oom;
};

static void text_put(struct text *t, const char *src, size_t n)
{
    if (t->oom) return;
    if (t->len + n + 1 > t->cap) {
        const size_t cap = (t->cap ? t->cap * 2 : 4096) + n;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, src, n);
    t->len += n;
    t->p[t->len] = '\0';
}

/* " %.6f": six decimals, as ultralytics and YOLOv5 write their label files. */
static void text_coord(struct text *t, double v)
{
    char tmp[64];
    const int n = snprintf(tmp, sizeof tmp, " %.6f", v);
    if (n > 0) text_put(t, tmp, (size_t)n);
}

/*
 * YOLO rows. With segments, ultralytics' loader reads every row as a polygon once any row is
 * longer than a box row, so a label without a polygon is written as its box's four corners
 * rather than as a box row that would be misread as two points.
 */
static void labels_text(struct text *t, const struct det_sample *s, int boxes)
{
    const int segs = s->n_points > 0 && !boxes;
    uint64_t at = 0; /* first point of label j */
    for (uint32_t j = 0; j < s->n_labels; j++) {
        const float *l = s->labels + 5 * (size_t)j;
        char cls[16];
        /* A whole number in [0, 65535]: det_decode checked it. */
        const int n = snprintf(cls, sizeof cls, "%d", (int)l[0]);
        text_put(t, cls, (size_t)n);
        if (!segs) {
            for (int k = 1; k < 5; k++)
                text_coord(t, l[k]);
        } else if (s->seg_counts[j] == 0) {
            const double x0 = l[1] - l[3] / 2.0, x1 = l[1] + l[3] / 2.0;
            const double y0 = l[2] - l[4] / 2.0, y1 = l[2] + l[4] / 2.0;
            const double c[8] = { x0, y0, x1, y0, x1, y1, x0, y1 };
            for (int k = 0; k < 8; k++)
                text_coord(t, c[k]);
        } else {
            for (uint64_t k = 0; k < 2ull * s->seg_counts[j]; k++)
                text_coord(t, s->seg_points[2 * at + k]);
        }
        if (segs) at += s->seg_counts[j];
        text_put(t, "\n", 1);
    }
}

int ffrt_cmd_export(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    const char *dir = NULL, *format = "ppm";
    int boxes = 0;
    const struct ffrt_opt opts[] = { { "output", 'o', NULL, &dir },
                                     { "format", 0, NULL, &format },
                                     { "boxes", 0, &boxes, NULL },
                                     { NULL, 0, NULL, NULL } };
    struct ffrt_args a;
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 2, 2, &a);
    if (rc != FFRT_PROCEED) return rc;
    if (!dir) return ffrt_usage_error(cmd, "missing -o DIR");
    if (!dir[0]) return ffrt_usage_error(cmd, "-o DIR is empty");
    const int png = strcmp(format, "png") == 0;
    if (!png && strcmp(format, "ppm") != 0)
        return ffrt_usage_error(cmd, "--format must be ppm or png, not '%s'", format);

    struct ffrt_ds ds;
    if ((rc = ffrt_ds_open(cmd, &ds, a.pos[0])) != FFRT_EXIT_OK) return rc;
    uint64_t i;
    uint8_t *rgb = NULL;
    struct text t = { 0 };
    char *img_path = NULL, *txt_path = NULL;
    char where[600];
    rc = ffrt_record_arg(cmd, &ds, a.pos[1], &i);
    if (rc != FFRT_PROCEED) goto out;
    struct det_sample s;
    if ((rc = ffrt_ds_read_det(cmd, &ds, i, &s)) != FFRT_EXIT_OK) goto out;
    ffrt_where(&ds, i, where, sizeof where);
    rc = FFRT_EXIT_FAIL;
    char stem[256];
    ffrt_sample_stem(&s, i, stem, sizeof stem);
    const int jpeg = s.pixel_format == DET_JPEG;
    const char *ext = jpeg ? "jpg" : png ? "png" : "ppm";
    if (asprintf(&img_path, "%s/%s.%s", dir, stem, ext) < 0) img_path = NULL;
    if (asprintf(&txt_path, "%s/%s.txt", dir, stem) < 0) txt_path = NULL;
    if (!img_path || !txt_path) {
        ffrt_fail(cmd, "out of memory");
        goto out;
    }
    if (!jpeg && ((uint64_t)s.h * s.w == 0)) {
        ffrt_fail(cmd, "%s: the image is empty (%" PRIu32 "x%" PRIu32 "), nothing to write", where,
                  s.h, s.w);
        goto out;
    }
    int e = make_dir(dir);
    if (e < 0) {
        ffrt_fail(cmd, "%s: cannot create the directory: %s", dir, strerror(-e));
        goto out;
    }
    char why[240] = "";
    if (jpeg) {
        e = write_file(img_path, s.pixels, s.pixel_bytes, NULL, 0);
    } else {
        const size_t n = (size_t)s.h * s.w * 3;
        rgb = malloc(n);
        if (!rgb) {
            ffrt_fail(cmd, "%s: out of memory for a %" PRIu32 "x%" PRIu32 " image", where, s.h,
                      s.w);
            goto out;
        }
        const int64_t got = det_pixels(&s, rgb, n);
        if (got < 0) {
            ffrt_fail(cmd, "%s: pixels: %s", where, ffr_strerror((int)got));
            goto out;
        }
        e = png ? write_png(img_path, rgb, s.h, s.w, why, sizeof why)
                : write_ppm(img_path, rgb, s.h, s.w);
    }
    if (e < 0) {
        ffrt_fail(cmd, "%s: %s", img_path, why[0] ? why : strerror(-e));
        goto out;
    }
    labels_text(&t, &s, boxes);
    if (t.oom) {
        ffrt_fail(cmd, "out of memory");
        goto out;
    }
    if ((e = write_file(txt_path, t.p ? t.p : "", t.len, NULL, 0)) < 0) {
        ffrt_fail(cmd, "%s: %s", txt_path, strerror(-e));
        goto out;
    }
    printf("%s\n%s\n", img_path, txt_path);
    rc = fflush(stdout) == 0 ? FFRT_EXIT_OK : FFRT_EXIT_FAIL;
out:
    free(t.p);
    free(img_path);
    free(txt_path);
    free(rgb);
    ffrt_ds_close(&ds);
    return rc;
}
