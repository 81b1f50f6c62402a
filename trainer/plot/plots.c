/*
 * plots: plot_images with cairo (see plots.h). Every box and frame is filled as whole-pixel
 * rectangles without antialiasing, so box edges carry the class colour exactly (PIL's outline).
 */
#include "plots.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <turbojpeg.h>
#include <yaml.h>

#include "augment.h"
#include "util.h"

/* ultralytics utils/plots.py Colors(): its hex list in class order, as RGB. */
static const uint32_t palette[20] = {
    0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17,
    0x3DDB86, 0x1A9334, 0x00D4BB, 0x2C99A8, 0x00C2FF, 0x344593, 0x6473FF,
    0x0018EC, 0x8438FF, 0x520085, 0xCB38FF, 0xFF95C8, 0xFF37C7,
};

uint32_t trn_plot_color(int cls)
{
    return palette[cls < 0 ? 0 : cls % 20];
}

/* ---------------------------------------------------------------------------------------- */
/* Names                                                                                    */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k;
    uint32_t cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0)
        k = 2, cp = s[0] & 0x1Fu;
    else if ((s[0] & 0xF0) == 0xE0)
        k = 3, cp = s[0] & 0x0Fu;
    else if ((s[0] & 0xF8) == 0xF0)
        k = 4, cp = s[0] & 0x07u;
    else
        return 0;
    if (k > n) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

/* A printable copy: cairo stops drawing on invalid UTF-8, and control bytes would garble. */
static char *printable_dup(const unsigned char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = utf8_len(s + i, n - i);
        if (k == 0 || (k == 1 && (s[i] < 0x20 || s[i] == 0x7F))) {
            d[o++] = '?';
            i++;
        } else {
            memcpy(d + o, s + i, k);
            o += k;
            i += k;
        }
    }
    d[o] = '\0';
    return d;
}

/* Store name v at class k, growing the table. Classes above 65535 are not ffr-det-1's. */
static int names_set(struct trn_plot_names *o, long k, const yaml_node_t *v)
{
    if (k < 0 || k > 65535 || !v || v->type != YAML_SCALAR_NODE) return 0;
    if (k >= o->n) {
        char **g = realloc(o->names, (size_t)(k + 1) * sizeof *g);
        if (!g) return -ENOMEM;
        for (long j = o->n; j <= k; j++)
            g[j] = NULL;
        o->names = g;
        o->n = (int)(k + 1);
    }
    free(o->names[k]);
    o->names[k] = printable_dup(v->data.scalar.value, v->data.scalar.length);
    return o->names[k] ? 0 : -ENOMEM;
}

static int names_read(struct trn_plot_names *o, yaml_document_t *doc, const yaml_node_t *v)
{
    if (v->type == YAML_SEQUENCE_NODE) {
        long j = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
             it++, j++) {
            const int rc = names_set(o, j, yaml_document_get_node(doc, *it));
            if (rc < 0) return rc;
        }
    } else if (v->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
                k->data.scalar.length > 6)
                continue;
            char num[8], *end;
            memcpy(num, k->data.scalar.value, k->data.scalar.length);
            num[k->data.scalar.length] = '\0';
            const long id = strtol(num, &end, 10);
            if (*end) continue;
            const int rc = names_set(o, id, yaml_document_get_node(doc, p->value));
            if (rc < 0) return rc;
        }
    }
    return 0;
}

int trn_plot_names_parse(const char *meta, size_t len, struct trn_plot_names *out)
{
    if (!out) return -EINVAL;
    out->names = NULL;
    out->n = 0;
    if (!meta || len == 0) return 0;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) return -ENOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)meta, len);
    int rc = 0;
    if (yaml_parser_load(&p, &doc)) {
        const yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root && root->type == YAML_MAPPING_NODE)
            for (yaml_node_pair_t *q = root->data.mapping.pairs.start;
                 q < root->data.mapping.pairs.top && rc == 0; q++) {
                const yaml_node_t *v = yaml_document_get_node(&doc, q->value);
                if (v && trn_yaml_scalar_is(yaml_document_get_node(&doc, q->key), "names"))
                    rc = names_read(out, &doc, v);
            }
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&p);
    if (rc < 0) trn_plot_names_free(out);
    return rc;
}

void trn_plot_names_free(struct trn_plot_names *names)
{
    if (!names) return;
    for (int k = 0; k < names->n; k++)
        free(names->names[k]);
    free(names->names);
    names->names = NULL;
    names->n = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Drawing                                                                                  */

static void set_rgb(cairo_t *cr, uint32_t c)
{
    cairo_set_source_rgb(cr, ((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0,
                         (c & 255) / 255.0);
}

/* PIL's rectangle(xy, outline, width): the outline drawn inward, corners inclusive. */
static void outline_rect(cairo_t *cr, int x0, int y0, int x1, int y1, int lw)
{
    if (x1 < x0 || y1 < y0) return;
    const int w = x1 - x0 + 1, h = y1 - y0 + 1;
    if (2 * lw >= w || 2 * lw >= h) {
        cairo_rectangle(cr, x0, y0, w, h);
    } else {
        cairo_rectangle(cr, x0, y0, w, lw);
        cairo_rectangle(cr, x0, y1 - lw + 1, w, lw);
        cairo_rectangle(cr, x0, y0 + lw, lw, h - 2 * lw);
        cairo_rectangle(cr, x1 - lw + 1, y0 + lw, lw, h - 2 * lw);
    }
    cairo_fill(cr);
}

/* Annotator.box_label (PIL mode): box, then the label on a filled tag, white text. */
static void box_label(cairo_t *cr, const double box[4], const char *label, uint32_t color, int lw,
                      const cairo_font_extents_t *fe)
{
    /* PIL casts the coordinates to int. */
    const int x0 = (int)box[0], y0 = (int)box[1], x1 = (int)box[2], y1 = (int)box[3];
    set_rgb(cr, color);
    outline_rect(cr, x0, y0, x1, y1, lw);
    cairo_text_extents_t te;
    cairo_text_extents(cr, label, &te);
    const int tw = (int)ceil(te.x_advance), th = (int)ceil(fe->ascent + fe->descent);
    const bool outside = y0 - th >= 0;
    const int ty = outside ? y0 - th : y0;
    cairo_rectangle(cr, x0, ty, tw + 2, th + 2);
    cairo_fill(cr);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_move_to(cr, x0, ty + fe->ascent);
    cairo_show_text(cr, label);
}

/* Copy image i of b (NCHW, u8 or f32 in [0, 1]) into the HWC canvas at (x, y). */
static void paste(const struct trn_batch *b, int i, uint8_t *canvas, int cw, int x, int y)
{
    const size_t plane = (size_t)b->height * (size_t)b->width;
    for (int r = 0; r < b->height; r++) {
        uint8_t *d = canvas + ((size_t)(y + r) * (size_t)cw + (size_t)x) * 3;
        for (int c = 0; c < b->width; c++) {
            const size_t at = (size_t)r * (size_t)b->width + (size_t)c;
            for (int ch = 0; ch < 3; ch++) {
                const size_t k = ((size_t)i * 3 + (size_t)ch) * plane + at;
                if (b->pixels == TRN_PIXELS_F32) {
                    const float v = ((const float *)b->images)[k] * 255.0f;
                    d[3 * c + ch] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : lrintf(v));
                } else {
                    d[3 * c + ch] = ((const uint8_t *)b->images)[k];
                }
            }
        }
    }
}

/*
 * plot_images on b's pixels with boxes from rows: cols 6 (labels: image, class, normalised xywh)
 * or 7 (predictions: image, class, xywh in batch pixels, conf; only conf > 0.25 drawn, labelled
 * "name conf" with one decimal, as plot_images does for output_to_target rows).
 */
static int render(const struct trn_batch *b, const float *rows, size_t n_rows, int cols,
                  const struct trn_plot_names *names, uint8_t **rgb, int *w_out, int *h_out)
{
    if (!b || !rgb || !w_out || !h_out || b->n < 1 || b->height < 1 || b->width < 1 ||
        b->height > 16383 || b->width > 16383 || !b->images || (n_rows && !rows))
        return -EINVAL;
    *rgb = NULL;
    const int bs = b->n < TRN_PLOT_MAX_SUBPLOTS ? b->n : TRN_PLOT_MAX_SUBPLOTS;
    const int ns = (int)ceil(sqrt((double)bs));
    int h = b->height, w = b->width;
    const int mx = h > w ? h : w;
    const double scale = (double)TRN_PLOT_MAX_SIZE / ns / mx;

    /* The unscaled grid, white where no image goes. */
    const int cw0 = ns * w, ch0 = ns * h;
    uint8_t *grid = malloc((size_t)cw0 * (size_t)ch0 * 3);
    if (!grid) return -ENOMEM;
    memset(grid, 255, (size_t)cw0 * (size_t)ch0 * 3);
    for (int i = 0; i < bs; i++)
        paste(b, i, grid, cw0, w * (i / ns), h * (i % ns));
    if (scale < 1) {
        h = (int)ceil(scale * h);
        w = (int)ceil(scale * w);
        uint8_t *small = malloc((size_t)(ns * w) * (size_t)(ns * h) * 3);
        if (!small) {
            free(grid);
            return -ENOMEM;
        }
        const int rc = trn_aug_resize_linear(grid, cw0, ch0, small, ns * w, ns * h);
        free(grid);
        if (rc < 0) {
            free(small);
            return rc;
        }
        grid = small;
    }
    const int W = ns * w, H = ns * h;

    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(sf);
        free(grid);
        return -ENOMEM;
    }
    cairo_surface_flush(sf);
    uint8_t *data = cairo_image_surface_get_data(sf);
    const int stride = cairo_image_surface_get_stride(sf);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const uint8_t *p = grid + ((size_t)y * (size_t)W + (size_t)x) * 3;
            const uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
            memcpy(data + (size_t)y * (size_t)stride + 4 * (size_t)x, &v, 4);
        }
    cairo_surface_mark_dirty(sf);

    int rc = 0;
    cairo_t *cr = cairo_create(sf);
    const int fs = (int)((h + w) * ns * 0.01);
    int lw = (int)nearbyint(fs / 10.0);
    if (lw == 0) lw = (int)fmax(nearbyint((W + H) / 2.0 * 0.003), 2);
    cairo_set_antialias(cr, CAIRO_ANTIALIAS_NONE);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, fs > 1 ? fs : 1);
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    for (int i = 0; i < bs && rc == 0; i++) {
        const int x = w * (i / ns), y = h * (i % ns);
        cairo_set_source_rgb(cr, 1, 1, 1);
        outline_rect(cr, x, y, x + w, y + h, 2);
        if (b->info) {
            char text[48];
            snprintf(text, sizeof text, "record %llu", (unsigned long long)b->info[i].index);
            cairo_set_source_rgb(cr, 220 / 255.0, 220 / 255.0, 220 / 255.0);
            cairo_move_to(cr, x + 5, y + 5 + fe.ascent);
            cairo_show_text(cr, text);
        }
        for (size_t t = 0; t < n_rows; t++) {
            const float *r = rows + (size_t)cols * t;
            if (!(r[0] >= 0 && r[0] < (float)b->n)) {
                rc = -EINVAL;
                break;
            }
            if ((int)r[0] != i) continue;
            if (cols == 7 && !(r[6] > 0.25f)) continue;
            const int cls = (int)r[1];
            /* Normalised xywh (the loader's targets are always <= 1.01) to cell pixels;
             * prediction pixels are scaled with the grid, as plot_images does. */
            const double sx = cols == 6 ? w : scale < 1 ? scale : 1.0;
            const double sy = cols == 6 ? h : scale < 1 ? scale : 1.0;
            const double box[4] = {
                (r[2] - r[4] / 2.0) * sx + x,
                (r[3] - r[5] / 2.0) * sy + y,
                (r[2] + r[4] / 2.0) * sx + x,
                (r[3] + r[5] / 2.0) * sy + y,
            };
            char num[16], text[160];
            const char *label = NULL;
            if (names && cls >= 0 && cls < names->n) label = names->names[cls];
            if (!label) {
                snprintf(num, sizeof num, "%d", cls);
                label = num;
            }
            if (cols == 7) {
                snprintf(text, sizeof text, "%s %.1f", label, (double)r[6]);
                label = text;
            }
            box_label(cr, box, label, trn_plot_color(cls), lw, &fe);
        }
    }
    if (rc == 0 && cairo_status(cr) != CAIRO_STATUS_SUCCESS) rc = -EIO;
    cairo_destroy(cr);
    cairo_surface_flush(sf);
    for (int y = 0; y < H && rc == 0; y++)
        for (int x = 0; x < W; x++) {
            uint32_t v;
            memcpy(&v, data + (size_t)y * (size_t)stride + 4 * (size_t)x, 4);
            uint8_t *p = grid + ((size_t)y * (size_t)W + (size_t)x) * 3;
            p[0] = (uint8_t)(v >> 16);
            p[1] = (uint8_t)(v >> 8);
            p[2] = (uint8_t)v;
        }
    cairo_surface_destroy(sf);
    if (rc < 0) {
        free(grid);
        return rc;
    }
    *rgb = grid;
    *w_out = W;
    *h_out = H;
    return 0;
}

int trn_plot_batch_render(const struct trn_batch *b, const struct trn_plot_names *names,
                          uint8_t **rgb, int *w_out, int *h_out)
{
    return render(b, b ? b->targets : NULL, b ? b->n_targets : 0, 6, names, rgb, w_out, h_out);
}

int trn_plot_preds_render(const struct trn_batch *b, const float *preds, size_t n_preds,
                          const struct trn_plot_names *names, uint8_t **rgb, int *w_out, int *h_out)
{
    return render(b, preds, n_preds, 7, names, rgb, w_out, h_out);
}

int trn_plot_jpeg_write(const uint8_t *rgb, int w, int h, int quality, const char *path, char *err,
                        size_t err_cap)
{
    char tmp[256];
    if (!err || err_cap == 0) err = tmp, err_cap = sizeof tmp;
    err[0] = '\0';
    if (!rgb || w < 1 || h < 1 || quality < 1 || quality > 100 || !path) {
        snprintf(err, err_cap, "%s: bad image or quality", path ? path : "(null)");
        return -EINVAL;
    }
    tjhandle tj = tjInitCompress();
    if (!tj) {
        snprintf(err, err_cap, "%s: out of memory", path);
        return -ENOMEM;
    }
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    int rc = 0;
    if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &n, TJSAMP_420, quality, 0) != 0) {
        snprintf(err, err_cap, "%s: TurboJPEG: %s", path, tjGetErrorStr2(tj));
        rc = -EIO;
    }
    tjDestroy(tj);
    if (rc == 0) {
        FILE *f = fopen(path, "wb");
        if (!f) {
            rc = -errno;
        } else {
            if (fwrite(jpg, 1, n, f) != n) rc = -(errno ? errno : EIO);
            if (fclose(f) != 0 && rc == 0) rc = -(errno ? errno : EIO);
        }
        if (rc < 0) snprintf(err, err_cap, "%s: %s", path, strerror(-rc));
    }
    tjFree(jpg);
    return rc;
}

int trn_plot_batch(const struct trn_batch *b, const struct trn_plot_names *names, const char *path,
                   char *err, size_t err_cap)
{
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    int rc = trn_plot_batch_render(b, names, &rgb, &w, &h);
    if (rc < 0) {
        if (err && err_cap)
            snprintf(err, err_cap, "%s: drawing the batch: %s", path ? path : "(null)",
                     rc == -ENOMEM ? "out of memory" : "bad batch or cairo error");
        return rc;
    }
    rc = trn_plot_jpeg_write(rgb, w, h, TRN_PLOT_JPEG_QUALITY, path, err, err_cap);
    free(rgb);
    return rc;
}

int trn_plot_preds(const struct trn_batch *b, const float *preds, size_t n_preds,
                   const struct trn_plot_names *names, const char *path, char *err, size_t err_cap)
{
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    int rc = trn_plot_preds_render(b, preds, n_preds, names, &rgb, &w, &h);
    if (rc < 0) {
        if (err && err_cap)
            snprintf(err, err_cap, "%s: drawing the predictions: %s", path ? path : "(null)",
                     rc == -ENOMEM ? "out of memory" : "bad batch or cairo error");
        return rc;
    }
    rc = trn_plot_jpeg_write(rgb, w, h, TRN_PLOT_JPEG_QUALITY, path, err, err_cap);
    free(rgb);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* results.png                                                                              */

#define RES_MAX_COLS 32
#define RES_PANELS   10

/* scipy.ndimage.gaussian_filter1d(y, sigma, mode='reflect', truncate=4.0) into out. */
static void gauss_smooth(const double *y, int n, double sigma, double *out)
{
    const int r = (int)(4.0 * sigma + 0.5);
    double w[64], ws = 0;
    for (int k = -r; k <= r; k++)
        ws += w[k + r] = exp(-0.5 * (double)k * (double)k / (sigma * sigma));
    for (int i = 0; i < n; i++) {
        double acc = 0;
        for (int k = -r; k <= r; k++) {
            int j = i + k;
            /* 'reflect' (d c b a | a b c d | d c b a), folded until inside for short series */
            while (j < 0 || j >= n)
                j = j < 0 ? -j - 1 : 2 * n - j - 1;
            acc += w[k + r] / ws * y[j];
        }
        out[i] = acc;
    }
}

/* A matplotlib-like tick step: 1, 2, 2.5 or 5 times a power of ten, about 5 ticks per span. */
static double nice_step(double span)
{
    const double raw = span / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return p * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10);
}

static void strip(char *s)
{
    char *a = s;
    while (*a == ' ' || *a == '\t')
        a++;
    size_t n = strlen(a);
    while (n && (a[n - 1] == ' ' || a[n - 1] == '\t' || a[n - 1] == '\r' || a[n - 1] == '\n'))
        n--;
    memmove(s, a, n);
    s[n] = '\0';
}

/* Split line into at most RES_MAX_COLS stripped fields (in place). Returns the field count. */
static int split_csv(char *line, char **f)
{
    int n = 0;
    for (char *p = line; n < RES_MAX_COLS;) {
        char *c = strchr(p, ',');
        if (c) *c = '\0';
        strip(p);
        f[n++] = p;
        if (!c) break;
        p = c + 1;
    }
    return n;
}

/* One panel: frame, ticks, the series with '.' markers and its smoothed copy dotted. */
static void draw_panel(cairo_t *cr, double x0, double y0, double w, double h, const char *title,
                       const double *x, const double *y, const double *ys, int n)
{
    const double l = x0 + 44, t = y0 + 24, pw = w - 54, ph = h - 50;
    double lo = INFINITY, hi = -INFINITY, xlo = x[0], xhi = x[n - 1];
    for (int i = 0; i < n; i++) {
        if (isfinite(y[i])) lo = fmin(lo, y[i]), hi = fmax(hi, y[i]);
        if (isfinite(ys[i])) lo = fmin(lo, ys[i]), hi = fmax(hi, ys[i]);
    }
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (hi - lo < 1e-12) {
        const double d = fabs(lo) > 1e-12 ? fabs(lo) * 0.05 : 0.05;
        lo -= d, hi += d;
    }
    const double pad = (hi - lo) * 0.05; /* matplotlib's default margins */
    lo -= pad, hi += pad;
    if (xhi - xlo < 1e-12) xlo -= 0.5, xhi += 0.5;
    const double xpad = (xhi - xlo) * 0.05;
    xlo -= xpad, xhi += xpad;
#define PX(v) (l + ((v)-xlo) / (xhi - xlo) * pw)
#define PY(v) (t + ph - ((v)-lo) / (hi - lo) * ph)
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 12);
    cairo_text_extents_t te;
    cairo_text_extents(cr, title, &te);
    cairo_move_to(cr, l + pw / 2 - te.x_advance / 2, y0 + 16);
    cairo_show_text(cr, title);
    cairo_set_font_size(cr, 8);
    cairo_set_line_width(cr, 0.8);
    char lab[32];
    const double ys_step = nice_step(hi - lo);
    for (double v = ceil(lo / ys_step) * ys_step; v <= hi + 1e-12; v += ys_step) {
        snprintf(lab, sizeof lab, "%.4g", fabs(v) < ys_step * 1e-6 ? 0.0 : v);
        cairo_text_extents(cr, lab, &te);
        cairo_move_to(cr, l - 4, PY(v));
        cairo_line_to(cr, l, PY(v));
        cairo_stroke(cr);
        cairo_move_to(cr, l - 6 - te.x_advance, PY(v) + 3);
        cairo_show_text(cr, lab);
    }
    double xs_step = nice_step(xhi - xlo);
    if (xs_step < 1) xs_step = 1; /* epochs are whole */
    for (double v = ceil(xlo / xs_step) * xs_step; v <= xhi + 1e-12; v += xs_step) {
        snprintf(lab, sizeof lab, "%.4g", fabs(v) < 1e-9 ? 0.0 : v);
        cairo_text_extents(cr, lab, &te);
        cairo_move_to(cr, PX(v), t + ph);
        cairo_line_to(cr, PX(v), t + ph + 4);
        cairo_stroke(cr);
        cairo_move_to(cr, PX(v) - te.x_advance / 2, t + ph + 14);
        cairo_show_text(cr, lab);
    }
    cairo_rectangle(cr, l, t, pw, ph);
    cairo_stroke(cr);
    cairo_save(cr);
    cairo_rectangle(cr, l, t, pw, ph);
    cairo_clip(cr);
    cairo_set_line_width(cr, 2);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    set_rgb(cr, 0x1f77b4); /* matplotlib C0: the series */
    for (int i = 0; i < n; i++)
        if (isfinite(y[i])) (i ? cairo_line_to : cairo_move_to)(cr, PX(x[i]), PY(y[i]));
    cairo_stroke(cr);
    for (int i = 0; i < n; i++)
        if (isfinite(y[i])) {
            cairo_arc(cr, PX(x[i]), PY(y[i]), 2.5, 0, 2 * M_PI);
            cairo_fill(cr);
        }
    set_rgb(cr, 0xff7f0e); /* C1: the smoothed series, ':' */
    const double dots[2] = { 1, 3.3 };
    cairo_set_dash(cr, dots, 2, 0);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    for (int i = 0; i < n; i++)
        if (isfinite(ys[i])) (i ? cairo_line_to : cairo_move_to)(cr, PX(x[i]), PY(ys[i]));
    cairo_stroke(cr);
    cairo_restore(cr);
#undef PX
#undef PY
}

static void draw_legend(cairo_t *cr, double x, double y)
{
    static const char *const lab[2] = { "results", "smooth" };
    static const uint32_t col[2] = { 0x1f77b4, 0xff7f0e };
    cairo_set_font_size(cr, 8);
    for (int k = 0; k < 2; k++) {
        const double yy = y + 10 + 11 * k;
        set_rgb(cr, col[k]);
        cairo_set_line_width(cr, 2);
        if (k) {
            const double dots[2] = { 1, 3.3 };
            cairo_set_dash(cr, dots, 2, 0);
        }
        cairo_move_to(cr, x + 4, yy);
        cairo_line_to(cr, x + 22, yy);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, x + 26, yy + 3);
        cairo_show_text(cr, lab[k]);
    }
}

int trn_plot_results(const char *csv_path, const char *png_path, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!csv_path || !png_path) return -EINVAL;
    FILE *f = fopen(csv_path, "r");
    if (!f) {
        const int e = errno;
        if (err) snprintf(err, err_cap, "%s: %s", csv_path, strerror(e));
        return -e;
    }
    char line[4096], head[4096];
    char *hf[RES_MAX_COLS], *rf[RES_MAX_COLS];
    double *cols[RES_MAX_COLS] = { 0 };
    double *smooth = NULL;
    int rc = 0, nh = 0;
    size_t n = 0, cap = 0;
    cairo_surface_t *surf = NULL;
    cairo_t *cr = NULL;
    if (!fgets(head, sizeof head, f) || (nh = split_csv(head, hf)) < 11) {
        if (err) snprintf(err, err_cap, "%s: not a results.csv (header)", csv_path);
        rc = -EINVAL;
        goto out;
    }
    for (long ln = 2; fgets(line, sizeof line, f); ln++) {
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        const int nf = split_csv(line, rf);
        if (nf != nh) {
            if (err)
                snprintf(err, err_cap, "%s:%ld: %d fields, header has %d", csv_path, ln, nf, nh);
            rc = -EINVAL;
            goto out;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            for (int c = 0; c < nh; c++) {
                double *p = realloc(cols[c], cap * sizeof(double));
                if (!p) {
                    rc = -ENOMEM;
                    goto out;
                }
                cols[c] = p;
            }
        }
        for (int c = 0; c < nh; c++) {
            char *end = NULL;
            cols[c][n] = strtod(rf[c], &end);
            if (end == rf[c] || *end) {
                if (err)
                    snprintf(err, err_cap, "%s:%ld: field %d is not a number", csv_path, ln, c + 1);
                rc = -EINVAL;
                goto out;
            }
        }
        n++;
    }
    if (ferror(f)) {
        if (err) snprintf(err, err_cap, "%s: read error", csv_path);
        rc = -EIO;
        goto out;
    }
    if (n == 0) {
        if (err) snprintf(err, err_cap, "%s: no rows", csv_path);
        rc = -EINVAL;
        goto out;
    }
    if (!(smooth = malloc(n * sizeof(double)))) {
        rc = -ENOMEM;
        goto out;
    }
    /* plot_results: a 2 x 5 grid (12 x 6 in at 200 dpi), columns in this order */
    static const int order[RES_PANELS] = { 1, 2, 3, 4, 5, 8, 9, 10, 6, 7 };
    surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 2400, 1200);
    cr = cairo_create(surf);
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
        if (err) snprintf(err, err_cap, "%s: cairo failed", png_path);
        rc = -EIO;
        goto out;
    }
    cairo_scale(cr, 2, 2); /* draw in 1200 x 600 points */
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    for (int i = 0; i < RES_PANELS; i++) {
        const int j = order[i];
        gauss_smooth(cols[j], (int)n, 3.0, smooth);
        draw_panel(cr, (i % 5) * 240.0, (i / 5) * 300.0, 240, 300, hf[j], cols[0], cols[j], smooth,
                   (int)n);
        if (i == 1) draw_legend(cr, 240 + 50, 30);
    }
    cairo_surface_flush(surf);
    const cairo_status_t st = cairo_surface_write_to_png(surf, png_path);
    if (st != CAIRO_STATUS_SUCCESS) {
        if (err)
            snprintf(err, err_cap, "%s: cannot write: %s", png_path, cairo_status_to_string(st));
        rc = st == CAIRO_STATUS_NO_MEMORY ? -ENOMEM : -EIO;
    }
out:
    if (cr) cairo_destroy(cr);
    if (surf) cairo_surface_destroy(surf);
    for (int c = 0; c < RES_MAX_COLS; c++)
        free(cols[c]);
    free(smooth);
    fclose(f);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Validation curves and the confusion matrix                                               */

#define DPI_SCALE (250.0 / 72.0) /* matplotlib points to pixels at dpi 250 */

/* matplotlib's default colour cycle (tab10), for the per-class lines. */
static const uint32_t tab10[10] = { 0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                    0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf };

static const char *class_label(const struct trn_plot_names *names, int c, char *buf, size_t cap)
{
    if (names && c >= 0 && c < names->n && names->names[c]) return names->names[c];
    snprintf(buf, cap, "%d", c);
    return buf;
}

/* A new white RGB24 surface and its context scaled to points; -ENOMEM / -EIO on failure. */
static int figure_new(int w, int h, cairo_surface_t **sf, cairo_t **cr)
{
    *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    *cr = cairo_create(*sf);
    if (cairo_status(*cr) != CAIRO_STATUS_SUCCESS) {
        const int rc = cairo_status(*cr) == CAIRO_STATUS_NO_MEMORY ? -ENOMEM : -EIO;
        cairo_destroy(*cr);
        cairo_surface_destroy(*sf);
        *cr = NULL;
        *sf = NULL;
        return rc;
    }
    cairo_set_source_rgb(*cr, 1, 1, 1);
    cairo_paint(*cr);
    cairo_scale(*cr, DPI_SCALE, DPI_SCALE);
    cairo_select_font_face(*cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    return 0;
}

/* The surface as a malloc'd RGB8 HWC image. */
static int surface_rgb(cairo_surface_t *sf, uint8_t **rgb, int *w_out, int *h_out)
{
    cairo_surface_flush(sf);
    const int W = cairo_image_surface_get_width(sf), H = cairo_image_surface_get_height(sf);
    const int stride = cairo_image_surface_get_stride(sf);
    const uint8_t *data = cairo_image_surface_get_data(sf);
    uint8_t *out = malloc((size_t)W * (size_t)H * 3);
    if (!out) return -ENOMEM;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint32_t v;
            memcpy(&v, data + (size_t)y * (size_t)stride + 4 * (size_t)x, 4);
            uint8_t *p = out + ((size_t)y * (size_t)W + (size_t)x) * 3;
            p[0] = (uint8_t)(v >> 16);
            p[1] = (uint8_t)(v >> 8);
            p[2] = (uint8_t)v;
        }
    *rgb = out;
    *w_out = W;
    *h_out = H;
    return 0;
}

static void show_centered(cairo_t *cr, double x, double y, const char *s)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    cairo_move_to(cr, x - te.x_advance / 2, y);
    cairo_show_text(cr, s);
}

/* Legend entry: a line sample of colour c and width lw, then the text. */
struct legend_entry {
    char text[192];
    uint32_t color;
    double lw;
};

/* Draw one curve figure on cr (in points, 648 x 432). axes: out, in points. */
static void curve_draw(cairo_t *cr, const struct trn_ap_result *ap, enum trn_plot_curve which,
                       const double *mean, const struct legend_entry *leg, int n_leg,
                       struct trn_plot_box *axes)
{
    static const char *const ylab[4] = { "Precision", "F1", "Precision", "Recall" };
    const double W = 648, H = 432, fs = 10;
    const int K = ap->n_cls;
    const double *rows = which == TRN_PLOT_CURVE_PR   ? ap->curve_pr
                         : which == TRN_PLOT_CURVE_F1 ? ap->curve_f1
                         : which == TRN_PLOT_CURVE_P  ? ap->curve_p
                                                      : ap->curve_r;
    cairo_set_font_size(cr, fs);
    /* The legend's width decides the axes' right edge (tight_layout keeps it in the figure). */
    double lw_text = 0;
    for (int i = 0; i < n_leg; i++) {
        cairo_text_extents_t te;
        cairo_text_extents(cr, leg[i].text, &te);
        lw_text = fmax(lw_text, te.x_advance);
    }
    const double leg_w = n_leg ? lw_text + 2 * fs + 0.8 * fs + 1.2 * fs : 0;
    const double l = 48, t = 24, b = H - 40;
    double r = W - 8 - leg_w - (n_leg ? 0.04 * 400 : 0);
    if (r < l + 100) r = l + 100;
    const double pw = r - l, ph = b - t;
    axes->x0 = l, axes->y0 = t, axes->x1 = r, axes->y1 = b;
#define CX(v) (l + (v)*pw)
#define CY(v) (b - (v)*ph)
    char buf[64];
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.8);
    for (int k = 0; k <= 5; k++) {
        const double v = k * 0.2;
        snprintf(buf, sizeof buf, "%.1f", v);
        cairo_move_to(cr, CX(v), b);
        cairo_line_to(cr, CX(v), b + 3.5);
        cairo_move_to(cr, l, CY(v));
        cairo_line_to(cr, l - 3.5, CY(v));
        cairo_stroke(cr);
        show_centered(cr, CX(v), b + 3.5 + 3.5 + fs * 0.75, buf);
        cairo_text_extents_t te;
        cairo_text_extents(cr, buf, &te);
        cairo_move_to(cr, l - 3.5 - 3.5 - te.x_advance, CY(v) + fs * 0.35);
        cairo_show_text(cr, buf);
    }
    show_centered(cr, l + pw / 2, H - 8, which == TRN_PLOT_CURVE_PR ? "Recall" : "Confidence");
    cairo_save(cr);
    cairo_move_to(cr, 14, t + ph / 2);
    cairo_rotate(cr, -M_PI / 2);
    cairo_text_extents_t te;
    cairo_text_extents(cr, ylab[which], &te);
    cairo_rel_move_to(cr, -te.x_advance / 2, 0);
    cairo_show_text(cr, ylab[which]);
    cairo_restore(cr);
    cairo_set_font_size(cr, 12);
    if (which == TRN_PLOT_CURVE_PR)
        snprintf(buf, sizeof buf, "Precision-Recall Curve");
    else
        snprintf(buf, sizeof buf, "%s-Confidence Curve", ylab[which]);
    show_centered(cr, l + pw / 2, t - 7, buf);
    cairo_set_font_size(cr, fs);

    double px[TRN_AP_NPX];
    trn_np_linspace(0.0, 1.0, TRN_AP_NPX, px);
    cairo_save(cr);
    cairo_rectangle(cr, l, t, pw, ph);
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    const bool legend_classes = K < 21;
    int drawn = 0;
    for (int c = 0; c < K; c++) {
        if (which == TRN_PLOT_CURVE_PR && !ap->pr_valid[c]) continue;
        set_rgb(cr, legend_classes ? tab10[drawn % 10] : 0x808080);
        drawn++;
        cairo_set_line_width(cr, 1);
        for (int k = 0; k < TRN_AP_NPX; k++)
            (k ? cairo_line_to : cairo_move_to)(cr, CX(px[k]),
                                                CY(rows[(size_t)c * TRN_AP_NPX + (size_t)k]));
        cairo_stroke(cr);
    }
    set_rgb(cr, 0x0000ff);
    cairo_set_line_width(cr, 3);
    for (int k = 0; k < TRN_AP_NPX; k++)
        (k ? cairo_line_to : cairo_move_to)(cr, CX(px[k]), CY(mean[k]));
    cairo_stroke(cr);
    cairo_restore(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.8);
    cairo_rectangle(cr, l, t, pw, ph);
    cairo_stroke(cr);

    if (n_leg) { /* bbox_to_anchor=(1.04, 1), loc='upper left' */
        const double lx = r + 0.04 * pw, ly = t, row = fs * 1.25;
        const double lh = n_leg * row + fs * 0.6;
        cairo_rectangle(cr, lx, ly, leg_w, lh);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_fill_preserve(cr);
        cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
        cairo_stroke(cr);
        for (int i = 0; i < n_leg; i++) {
            const double yy = ly + fs * 0.3 + row * (i + 0.5);
            set_rgb(cr, leg[i].color);
            cairo_set_line_width(cr, leg[i].lw);
            cairo_move_to(cr, lx + 0.4 * fs, yy);
            cairo_line_to(cr, lx + 2.4 * fs, yy);
            cairo_stroke(cr);
            cairo_set_source_rgb(cr, 0, 0, 0);
            cairo_move_to(cr, lx + 3.2 * fs, yy + fs * 0.35);
            cairo_show_text(cr, leg[i].text);
        }
    }
#undef CX
#undef CY
}

/* The curve figure on a new surface. */
static int curve_surface(const struct trn_ap_result *ap, enum trn_plot_curve which,
                         const struct trn_plot_names *names, cairo_surface_t **sf_out,
                         struct trn_plot_box *axes)
{
    if (!ap || ap->n_cls < 1 || (unsigned)which > TRN_PLOT_CURVE_R || !ap->curve_pr ||
        !ap->curve_p || !ap->curve_r || !ap->curve_f1 || !ap->pr_valid || !ap->mean_pr ||
        !ap->mean_p || !ap->mean_r || !ap->mean_f1 || !ap->cls)
        return -EINVAL;
    const int K = ap->n_cls;
    double mean[TRN_AP_NPX], px[TRN_AP_NPX];
    trn_np_linspace(0.0, 1.0, TRN_AP_NPX, px);
    struct legend_entry *leg = calloc((size_t)K + 1, sizeof *leg);
    if (!leg) return -ENOMEM;
    int n_leg = 0;
    char nb[16];
    if (K < 21)
        for (int c = 0; c < K; c++) {
            if (which == TRN_PLOT_CURVE_PR && !ap->pr_valid[c]) continue;
            const char *nm = class_label(names, ap->cls[c], nb, sizeof nb);
            if (which == TRN_PLOT_CURVE_PR)
                snprintf(leg[n_leg].text, sizeof leg[n_leg].text, "%.160s %.3f", nm, ap->ap50[c]);
            else
                snprintf(leg[n_leg].text, sizeof leg[n_leg].text, "%.160s", nm);
            leg[n_leg].color = tab10[n_leg % 10];
            leg[n_leg].lw = 1;
            n_leg++;
        }
    if (which == TRN_PLOT_CURVE_PR) {
        memcpy(mean, ap->mean_pr, sizeof mean);
        snprintf(leg[n_leg].text, sizeof leg[n_leg].text, "all classes %.3f mAP@0.5", ap->map50);
    } else {
        const double *m = which == TRN_PLOT_CURVE_F1  ? ap->mean_f1
                          : which == TRN_PLOT_CURVE_P ? ap->mean_p
                                                      : ap->mean_r;
        trn_np_smooth(m, TRN_AP_NPX, 0.05, mean);
        int best = 0;
        for (int k = 1; k < TRN_AP_NPX; k++)
            if (mean[k] > mean[best]) best = k;
        snprintf(leg[n_leg].text, sizeof leg[n_leg].text, "all classes %.2f at %.3f", mean[best],
                 px[best]);
    }
    leg[n_leg].color = 0x0000ff;
    leg[n_leg].lw = 3;
    n_leg++;
    cairo_surface_t *sf;
    cairo_t *cr;
    int rc = figure_new(TRN_PLOT_CURVE_W, TRN_PLOT_CURVE_H, &sf, &cr);
    if (rc == 0) {
        struct trn_plot_box b;
        curve_draw(cr, ap, which, mean, leg, n_leg, &b);
        if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) rc = -EIO;
        cairo_destroy(cr);
        if (rc == 0) {
            if (axes)
                *axes = (struct trn_plot_box){ b.x0 * DPI_SCALE, b.y0 * DPI_SCALE, b.x1 * DPI_SCALE,
                                               b.y1 * DPI_SCALE };
            *sf_out = sf;
        } else {
            cairo_surface_destroy(sf);
        }
    }
    free(leg);
    return rc;
}

int trn_plot_curve_render(const struct trn_ap_result *ap, enum trn_plot_curve which,
                          const struct trn_plot_names *names, uint8_t **rgb, int *w, int *h,
                          struct trn_plot_box *axes)
{
    if (!rgb || !w || !h) return -EINVAL;
    cairo_surface_t *sf;
    int rc = curve_surface(ap, which, names, &sf, axes);
    if (rc < 0) return rc;
    rc = surface_rgb(sf, rgb, w, h);
    cairo_surface_destroy(sf);
    return rc;
}

static int png_write(cairo_surface_t *sf, const char *path, char *err, size_t err_cap)
{
    cairo_surface_flush(sf);
    const cairo_status_t st = cairo_surface_write_to_png(sf, path);
    if (st == CAIRO_STATUS_SUCCESS) return 0;
    if (err && err_cap)
        snprintf(err, err_cap, "%s: cannot write: %s", path, cairo_status_to_string(st));
    return st == CAIRO_STATUS_NO_MEMORY ? -ENOMEM : -EIO;
}

static void draw_error(char *err, size_t err_cap, const char *path, int rc)
{
    if (err && err_cap)
        snprintf(err, err_cap, "%s: drawing: %s", path ? path : "(null)",
                 rc == -ENOMEM   ? "out of memory"
                 : rc == -EINVAL ? "bad input"
                                 : "cairo failed");
}

int trn_plot_curve(const struct trn_ap_result *ap, enum trn_plot_curve which,
                   const struct trn_plot_names *names, const char *png_path, char *err,
                   size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!png_path) return -EINVAL;
    cairo_surface_t *sf;
    int rc = curve_surface(ap, which, names, &sf, NULL);
    if (rc < 0) {
        draw_error(err, err_cap, png_path, rc);
        return rc;
    }
    rc = png_write(sf, png_path, err, err_cap);
    cairo_surface_destroy(sf);
    return rc;
}

/* matplotlib's 'Blues' (ColorBrewer's 9 colours, linearly interpolated), v in [0, 1]. */
static uint32_t blues(double v)
{
    static const uint32_t c[9] = { 0xf7fbff, 0xdeebf7, 0xc6dbef, 0x9ecae1, 0x6baed6,
                                   0x4292c6, 0x2171b5, 0x08519c, 0x08306b };
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    const double f = v * 8;
    const int i = f >= 8 ? 7 : (int)f;
    const double t = f - i;
    uint32_t out = 0;
    for (int s = 16; s >= 0; s -= 8) {
        const double a = (c[i] >> s) & 255, b = (c[i + 1] >> s) & 255;
        out |= (uint32_t)lrint(a + (b - a) * t) << s;
    }
    return out;
}

/* seaborn's annotation colour: dark on light cells (relative luminance > 0.408), else white. */
static bool light_cell(uint32_t c)
{
    double lum = 0;
    static const double wgt[3] = { 0.2126, 0.7152, 0.0722 };
    for (int k = 0; k < 3; k++) {
        const double v = ((c >> (16 - 8 * k)) & 255) / 255.0;
        lum += wgt[k] * (v <= 0.03928 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4));
    }
    return lum > 0.408;
}

static int confusion_surface(const double *matrix, int nc, const struct trn_plot_names *names,
                             cairo_surface_t **sf_out, struct trn_plot_box *cells)
{
    if (!matrix || nc < 1 || nc > 65535) return -EINVAL;
    const size_t N = (size_t)nc + 1;
    double *a = malloc(N * N * sizeof *a);
    if (!a) return -ENOMEM;
    double vmax = NAN;
    for (size_t j = 0; j < N; j++) { /* normalise each column (true class) */
        double s = 0;
        for (size_t i = 0; i < N; i++)
            s += matrix[i * N + j];
        for (size_t i = 0; i < N; i++) {
            double v = matrix[i * N + j] / (s + 1e-9);
            if (!(v >= 0.005)) v = NAN; /* "don't annotate (would appear as 0.00)" */
            a[i * N + j] = v;
            if (!isnan(v) && !(v <= vmax)) vmax = v;
        }
    }
    if (!(vmax > 0)) vmax = 1;
    cairo_surface_t *sf;
    cairo_t *cr;
    int rc = figure_new(TRN_PLOT_CM_W, TRN_PLOT_CM_H, &sf, &cr);
    if (rc < 0) {
        free(a);
        return rc;
    }
    const double W = 864, H = 648;
    const bool named = names && names->n == nc && nc < 99;
    char buf[32];
    /* Tick labels: the widest decides the margins; the font shrinks with the cells. */
    const double fs0 = nc < 50 ? 10 : 8;
    cairo_set_font_size(cr, fs0);
    double tw = 0;
    for (size_t k = 0; k < N; k++) {
        const char *s = k == (size_t)nc
                            ? (named ? "background" : "")
                            : class_label(named ? names : NULL, (int)k, buf, sizeof buf);
        if (!named && k == (size_t)nc) {
            snprintf(buf, sizeof buf, "%d", nc);
            s = buf;
        }
        cairo_text_extents_t te;
        cairo_text_extents(cr, s, &te);
        tw = fmax(tw, te.x_advance);
    }
    const double cbar = 60; /* colour bar and its labels */
    const double left = 30 + tw + 8, top = 28;
    double cell = fmin((W - left - cbar - 20) / (double)N, (H - top - 30 - tw - 8) / (double)N);
    if (cell <= 0) cell = 1;
    const double fs = fmin(fs0, cell * 0.9);
    const double hx = left, hy = top, hw = cell * (double)N;
    /* The heatmap; NaN cells keep the white face colour. */
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < N; j++) {
            const double v = a[i * N + j];
            if (isnan(v)) continue;
            set_rgb(cr, blues(v / vmax));
            cairo_rectangle(cr, hx + cell * (double)j, hy + cell * (double)i, cell + 0.02,
                            cell + 0.02);
            cairo_fill(cr);
        }
    if (nc < 30) {
        cairo_set_font_size(cr, fmin(8, cell * 0.35));
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < N; j++) {
                const double v = a[i * N + j];
                if (isnan(v)) continue;
                if (light_cell(blues(v / vmax)))
                    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
                else
                    cairo_set_source_rgb(cr, 1, 1, 1);
                snprintf(buf, sizeof buf, "%.2f", v);
                show_centered(cr, hx + cell * ((double)j + 0.5), hy + cell * ((double)i + 0.5) + 3,
                              buf);
            }
    }
    /* Tick labels: x vertical when a label is wider than a cell, y horizontal. */
    cairo_set_font_size(cr, fs);
    cairo_set_source_rgb(cr, 0, 0, 0);
    bool vertical = false;
    for (size_t k = 0; k < N && !vertical; k++) {
        const char *s = k == (size_t)nc && named
                            ? "background"
                            : class_label(named ? names : NULL, (int)k, buf, sizeof buf);
        cairo_text_extents_t te;
        cairo_text_extents(cr, s, &te);
        vertical = te.x_advance > cell * 0.95;
    }
    for (size_t k = 0; k < N; k++) {
        const char *s = k == (size_t)nc && named
                            ? "background"
                            : class_label(named ? names : NULL, (int)k, buf, sizeof buf);
        cairo_text_extents_t te;
        cairo_text_extents(cr, s, &te);
        const double cy = hy + cell * ((double)k + 0.5);
        cairo_move_to(cr, hx - 4 - te.x_advance, cy + fs * 0.35);
        cairo_show_text(cr, s);
        const double cx = hx + cell * ((double)k + 0.5);
        if (vertical) {
            cairo_save(cr);
            cairo_move_to(cr, cx + fs * 0.35, hy + hw + 4 + te.x_advance);
            cairo_rotate(cr, -M_PI / 2);
            cairo_show_text(cr, s);
            cairo_restore(cr);
        } else {
            show_centered(cr, cx, hy + hw + 4 + fs, s);
        }
    }
    const double below = hy + hw + 4 + (vertical ? tw : fs) + 6;
    cairo_set_font_size(cr, 10);
    show_centered(cr, hx + hw / 2, below + 10, "True");
    cairo_save(cr);
    cairo_move_to(cr, 14, hy + hw / 2);
    cairo_rotate(cr, -M_PI / 2);
    cairo_text_extents_t te;
    cairo_text_extents(cr, "Predicted", &te);
    cairo_rel_move_to(cr, -te.x_advance / 2, 0);
    cairo_show_text(cr, "Predicted");
    cairo_restore(cr);
    cairo_set_font_size(cr, 12);
    show_centered(cr, hx + hw / 2, top - 10, "Confusion Matrix");
    /* Colour bar: 0 at the bottom to vmax at the top, 5 ticks. */
    const double bx = hx + hw + 14, bw = 12;
    for (int y = 0; y < 256; y++) {
        set_rgb(cr, blues(1.0 - y / 255.0));
        cairo_rectangle(cr, bx, hy + hw * y / 256.0, bw, hw / 256.0 + 0.05);
        cairo_fill(cr);
    }
    cairo_set_font_size(cr, 8);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.6);
    for (int k = 0; k <= 4; k++) {
        const double v = vmax * k / 4.0, yy = hy + hw * (1 - k / 4.0);
        cairo_move_to(cr, bx + bw, yy);
        cairo_line_to(cr, bx + bw + 3, yy);
        cairo_stroke(cr);
        snprintf(buf, sizeof buf, "%.2f", v);
        cairo_move_to(cr, bx + bw + 5, yy + 3);
        cairo_show_text(cr, buf);
    }
    free(a);
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) rc = -EIO;
    cairo_destroy(cr);
    if (rc < 0) {
        cairo_surface_destroy(sf);
        return rc;
    }
    if (cells)
        *cells = (struct trn_plot_box){ hx * DPI_SCALE, hy * DPI_SCALE, (hx + hw) * DPI_SCALE,
                                        (hy + hw) * DPI_SCALE };
    *sf_out = sf;
    return 0;
}

int trn_plot_confusion_render(const double *matrix, int nc, const struct trn_plot_names *names,
                              uint8_t **rgb, int *w, int *h, struct trn_plot_box *cells)
{
    if (!rgb || !w || !h) return -EINVAL;
    cairo_surface_t *sf;
    int rc = confusion_surface(matrix, nc, names, &sf, cells);
    if (rc < 0) return rc;
    rc = surface_rgb(sf, rgb, w, h);
    cairo_surface_destroy(sf);
    return rc;
}

int trn_plot_confusion(const double *matrix, int nc, const struct trn_plot_names *names,
                       const char *png_path, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!png_path) return -EINVAL;
    cairo_surface_t *sf;
    int rc = confusion_surface(matrix, nc, names, &sf, NULL);
    if (rc < 0) {
        draw_error(err, err_cap, png_path, rc);
        return rc;
    }
    rc = png_write(sf, png_path, err, err_cap);
    cairo_surface_destroy(sf);
    return rc;
}

int trn_plot_val(const struct trn_ap_result *ap, const double *matrix, int nc,
                 const struct trn_plot_names *names, const char *dir, int *written, char *err,
                 size_t err_cap)
{
    static const char *const file[4] = { "PR_curve.png", "F1_curve.png", "P_curve.png",
                                         "R_curve.png" };
    if (written) *written = 0;
    if (err && err_cap) err[0] = '\0';
    if (!dir || !ap) return -EINVAL;
    char path[4200];
    int rc = 0;
    for (int k = 0; k < 4 && ap->n_cls > 0; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, file[k]);
        if ((rc = trn_plot_curve(ap, (enum trn_plot_curve)k, names, path, err, err_cap)) < 0)
            return rc;
        if (written) (*written)++;
    }
    if (matrix) {
        snprintf(path, sizeof path, "%s/confusion_matrix.png", dir);
        if ((rc = trn_plot_confusion(matrix, nc, names, path, err, err_cap)) < 0) return rc;
        if (written) (*written)++;
    }
    return 0;
}

void trn_plots_cleanup(void)
{
    cairo_debug_reset_static_data();
    FcFini();
}
