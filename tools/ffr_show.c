/*
 * ffr show: a detection record drawn the way YOLOv5's plots draw labels: one colour per class
 * from its 20-colour palette, boxes stroked with a width that grows with the image, the class
 * name on a filled tag above the box's top-left corner (inside the box when there is no room
 * above). Polygons (segments) are filled translucently under the boxes. Drawing uses cairo;
 * JPEG output goes through TurboJPEG, PNG through cairo's writer.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <turbojpeg.h>

#include "ffr_tool.h"

/* YOLOv5's utils/plots.py Colors() palette, in class order (RGB). */
static const uint32_t palette[20] = {
    0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17,
    0x3DDB86, 0x1A9334, 0x00D4BB, 0x2C99A8, 0x00C2FF, 0x344593, 0x6473FF,
    0x0018EC, 0x8438FF, 0x520085, 0xCB38FF, 0xFF95C8, 0xFF37C7,
};

static void set_rgb(cairo_t *cr, uint32_t c, double alpha)
{
    cairo_set_source_rgba(cr, ((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0,
                          (c & 255) / 255.0, alpha);
}

/* Dark text on light tags, white on dark ones, so every class name stays readable. */
static int is_light(uint32_t c)
{
    return 0.299 * ((c >> 16) & 255) + 0.587 * ((c >> 8) & 255) + 0.114 * (c & 255) > 160;
}

/* The image as packed RGB8 (h*w*3, malloc'd): pixels undone from RGB8-SUB, or JPEG decoded. */
static int sample_rgb(const struct det_sample *s, uint8_t **out, uint32_t *h, uint32_t *w,
                      char *why, size_t cap)
{
    *out = NULL;
    if (s->pixel_format != DET_JPEG) {
        const size_t n = (size_t)s->h * s->w * 3;
        uint8_t *rgb = malloc(n ? n : 1);
        if (!rgb) return -ENOMEM;
        const int64_t got = det_pixels(s, rgb, n);
        if (got < 0) {
            free(rgb);
            snprintf(why, cap, "pixels: %s", ffr_strerror((int)got));
            return (int)got;
        }
        *out = rgb;
        *h = s->h;
        *w = s->w;
        return 0;
    }
    tjhandle tj = tjInitDecompress();
    if (!tj) return -ENOMEM;
    int jw = 0, jh = 0, sub = 0, cs = 0, rc = 0;
    uint8_t *rgb = NULL;
    if (tjDecompressHeader3(tj, s->pixels, s->pixel_bytes, &jw, &jh, &sub, &cs) != 0 || jw <= 0 ||
        jh <= 0) {
        snprintf(why, cap, "the stored JPEG does not decode: %s", tjGetErrorStr2(tj));
        rc = -FFR_ECORRUPT;
    } else if (!(rgb = malloc((size_t)jw * (size_t)jh * 3))) {
        rc = -ENOMEM;
    } else if (tjDecompress2(tj, s->pixels, s->pixel_bytes, rgb, jw, 0, jh, TJPF_RGB, 0) != 0 &&
               tjGetErrorCode(tj) == TJERR_FATAL) {
        snprintf(why, cap, "the stored JPEG does not decode: %s", tjGetErrorStr2(tj));
        rc = -FFR_ECORRUPT;
    }
    tjDestroy(tj);
    if (rc < 0) {
        free(rgb);
        return rc;
    }
    *out = rgb;
    *h = (uint32_t)jh;
    *w = (uint32_t)jw;
    return 0;
}

static void draw_polygons(cairo_t *cr, const struct det_sample *s, double W, double H)
{
    uint64_t at = 0;
    for (uint32_t j = 0; j < s->n_labels && s->n_points; j++) {
        const uint32_t n = s->seg_counts[j];
        const uint32_t c = palette[(uint32_t)s->labels[5 * (size_t)j] % 20];
        for (uint32_t k = 0; k < n; k++) {
            const float *p = s->seg_points + 2 * (at + k);
            if (k == 0)
                cairo_move_to(cr, p[0] * W, p[1] * H);
            else
                cairo_line_to(cr, p[0] * W, p[1] * H);
        }
        at += n;
        if (n < 3) {
            cairo_new_path(cr);
            continue;
        }
        cairo_close_path(cr);
        set_rgb(cr, c, 0.35);
        cairo_fill_preserve(cr);
        set_rgb(cr, c, 1.0);
        cairo_set_line_width(cr, 1.0);
        cairo_stroke(cr);
    }
}

static void draw_labels(cairo_t *cr, const struct ffrt_ds *ds, const struct det_sample *s, double W,
                        double H)
{
    /* YOLOv5's Annotator: lw = max(round((h + w) / 2 * 0.003), 2). */
    const double lw = fmax(round((W + H) / 2 * 0.003), 2);
    const double font = fmax(round((W + H) / 2 * 0.025), 10);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, font);
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    for (uint32_t j = 0; j < s->n_labels; j++) {
        const float *l = s->labels + 5 * (size_t)j;
        const uint32_t cls = (uint32_t)l[0];
        const uint32_t c = palette[cls % 20];
        /* Whole pixels and no antialiasing: crisp edges in the class colour exactly. */
        const double x0 = round((l[1] - l[3] / 2) * W), x1 = round((l[1] + l[3] / 2) * W);
        const double y0 = round((l[2] - l[4] / 2) * H), y1 = round((l[2] + l[4] / 2) * H);
        cairo_set_antialias(cr, CAIRO_ANTIALIAS_NONE);
        set_rgb(cr, c, 1.0);
        cairo_set_line_width(cr, lw);
        cairo_rectangle(cr, x0, y0, x1 - x0, y1 - y0);
        cairo_stroke(cr);

        char idbuf[16];
        const char *name = ffrt_class_name(ds, cls);
        if (!name) {
            snprintf(idbuf, sizeof idbuf, "%" PRIu32, cls);
            name = idbuf;
        }
        char *text = ffrt_text_dup(name, strlen(name), FFRT_TEXT_LINE);
        if (!text) continue;
        cairo_text_extents_t te;
        cairo_text_extents(cr, text, &te);
        const double pad = fmax(round(font / 6), 1);
        const double tw = te.x_advance + 2 * pad, th = fe.ascent + fe.descent + pad;
        const double tx = x0 - lw / 2;
        /* Above the box when it fits, else just inside its top edge. */
        const double ty = y0 - lw / 2 - th >= 0 ? y0 - lw / 2 - th : y0 + lw / 2;
        cairo_rectangle(cr, tx, ty, tw, th);
        cairo_fill(cr);
        cairo_set_antialias(cr, CAIRO_ANTIALIAS_DEFAULT);
        cairo_set_source_rgb(cr, is_light(c) ? 0 : 1, is_light(c) ? 0 : 1, is_light(c) ? 0 : 1);
        cairo_move_to(cr, tx + pad, ty + pad / 2 + fe.ascent);
        cairo_show_text(cr, text);
        free(text);
    }
}

/* Writes the surface's pixels as JPEG through TurboJPEG. Returns 0 or a negative error. */
static int write_jpeg(cairo_surface_t *sf, const char *path, int quality, char *why, size_t cap)
{
    const int w = cairo_image_surface_get_width(sf), h = cairo_image_surface_get_height(sf);
    const int stride = cairo_image_surface_get_stride(sf);
    const uint8_t *data = cairo_image_surface_get_data(sf);
    uint8_t *rgb = malloc((size_t)w * (size_t)h * 3);
    if (!rgb) return -ENOMEM;
    /* cairo's RGB24 is a native-endian 32-bit 0x00RRGGBB per pixel. */
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint32_t v;
            memcpy(&v, data + (size_t)y * (size_t)stride + 4 * (size_t)x, 4);
            uint8_t *d = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
            d[0] = (uint8_t)(v >> 16);
            d[1] = (uint8_t)(v >> 8);
            d[2] = (uint8_t)v;
        }
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    int rc = 0;
    if (!tj) {
        rc = -ENOMEM;
    } else if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &n, TJSAMP_444, quality,
                           TJFLAG_ACCURATEDCT) != 0) {
        snprintf(why, cap, "TurboJPEG: %s", tjGetErrorStr2(tj));
        rc = -EIO;
    }
    free(rgb);
    if (rc == 0) {
        FILE *f = fopen(path, "wb");
        if (!f) rc = -errno;
        if (f) {
            rc = ffrt_write_all(f, jpg, n);
            if (fclose(f) != 0 && rc == 0) rc = errno ? -errno : -EIO;
        }
    }
    tjFree(jpg);
    if (tj) tjDestroy(tj);
    return rc;
}

static cairo_status_t png_chunk(void *closure, const unsigned char *data, unsigned int len)
{
    return ffrt_write_all(closure, data, len) == 0 ? CAIRO_STATUS_SUCCESS
                                                   : CAIRO_STATUS_WRITE_ERROR;
}

/* Through our own FILE so a failure reports errno, not cairo's generic write error. */
static int write_png(cairo_surface_t *sf, const char *path, char *why, size_t cap)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -errno;
    errno = 0;
    const cairo_status_t st = cairo_surface_write_to_png_stream(sf, png_chunk, f);
    int rc = 0;
    if (st != CAIRO_STATUS_SUCCESS) {
        rc = errno ? -errno : -EIO;
        if (!errno) snprintf(why, cap, "cairo: %s", cairo_status_to_string(st));
    }
    if (fclose(f) != 0 && rc == 0) rc = errno ? -errno : -EIO;
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcasecmp(s + n - m, suffix) == 0;
}

int ffrt_cmd_show(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    const char *out_path = NULL, *quality_text = NULL;
    const struct ffrt_opt opts[] = { { "output", 'o', NULL, &out_path },
                                     { "quality", 0, NULL, &quality_text },
                                     { NULL, 0, NULL, NULL } };
    struct ffrt_args a;
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 2, 2, &a);
    if (rc != FFRT_PROCEED) return rc;
    if (!out_path) return ffrt_usage_error(cmd, "missing -o OUT.jpg or -o OUT.png");
    const int png = ends_with(out_path, ".png");
    if (!png && !ends_with(out_path, ".jpg") && !ends_with(out_path, ".jpeg"))
        return ffrt_usage_error(cmd, "output must end in .jpg, .jpeg or .png: '%s'", out_path);
    uint64_t quality = 95;
    if (quality_text &&
        (rc = ffrt_parse_count(cmd, "--quality", quality_text, &quality)) != FFRT_PROCEED)
        return rc;
    if (quality < 1 || quality > 100)
        return ffrt_usage_error(cmd, "--quality must be 1..100, not %" PRIu64, quality);

    struct ffrt_ds ds;
    if ((rc = ffrt_ds_open(cmd, &ds, a.pos[0])) != FFRT_EXIT_OK) return rc;
    uint64_t i;
    uint8_t *rgb = NULL;
    cairo_surface_t *sf = NULL;
    cairo_t *cr = NULL;
    char where[600], why[240] = "";
    rc = ffrt_record_arg(cmd, &ds, a.pos[1], &i);
    if (rc != FFRT_PROCEED) goto out;
    struct det_sample s;
    if ((rc = ffrt_ds_read_det(cmd, &ds, i, &s)) != FFRT_EXIT_OK) goto out;
    ffrt_where(&ds, i, where, sizeof where);
    rc = FFRT_EXIT_FAIL;
    uint32_t h = 0, w = 0;
    int e = sample_rgb(&s, &rgb, &h, &w, why, sizeof why);
    if (e < 0) {
        ffrt_fail(cmd, "%s: %s", where, why[0] ? why : ffr_strerror(e));
        goto out;
    }
    if (h == 0 || w == 0 || h > 32767 || w > 32767) {
        /* cairo's image surfaces are limited to 32767 pixels a side. */
        ffrt_fail(cmd, "%s: cannot draw a %" PRIu32 "x%" PRIu32 " image", where, h, w);
        goto out;
    }
    sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)w, (int)h);
    if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
        ffrt_fail(cmd, "%s: cairo: %s", where, cairo_status_to_string(cairo_surface_status(sf)));
        goto out;
    }
    cairo_surface_flush(sf);
    uint8_t *data = cairo_image_surface_get_data(sf);
    const int stride = cairo_image_surface_get_stride(sf);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            const uint32_t v = 0xff000000u | (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
            memcpy(data + (size_t)y * (size_t)stride + 4 * (size_t)x, &v, 4);
        }
    cairo_surface_mark_dirty(sf);
    cr = cairo_create(sf);
    draw_polygons(cr, &s, w, h);
    draw_labels(cr, &ds, &s, w, h);
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
        ffrt_fail(cmd, "%s: cairo: %s", where, cairo_status_to_string(cairo_status(cr)));
        goto out;
    }
    cairo_surface_flush(sf);
    if (png) {
        e = write_png(sf, out_path, why, sizeof why);
    } else {
        e = write_jpeg(sf, out_path, (int)quality, why, sizeof why);
    }
    if (e < 0) {
        ffrt_fail(cmd, "%s: %s", out_path, why[0] ? why : strerror(-e));
        goto out;
    }
    printf("%s\n", out_path);
    rc = fflush(stdout) == 0 ? FFRT_EXIT_OK : FFRT_EXIT_FAIL;
out:
    if (cr) cairo_destroy(cr);
    if (sf) cairo_surface_destroy(sf);
    /* Frees cairo's and fontconfig's caches (cairo first: it holds fontconfig objects), so
     * that leak checkers (the ASan test runs) see only real leaks. */
    cairo_debug_reset_static_data();
    FcFini();
    free(rgb);
    ffrt_ds_close(&ds);
    return rc;
}
