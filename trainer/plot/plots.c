/*
 * plots (plots.h): the class palette, the drawing helpers the figures share (priv/draw.h) and the
 * cleanup of cairo's caches. The figures: plot_mosaic.c (train_batchK / val_batchK), plot_val.c
 * (curves, confusion matrix), plot_results.c (results.png); class names: plot_names.c. Every box
 * and frame is filled as whole-pixel rectangles without antialiasing, so box edges carry the
 * class colour exactly (PIL's outline).
 */
#include "priv/draw.h"

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

void plt_set_rgb(cairo_t *cr, uint32_t c)
{
    cairo_set_source_rgb(cr, ((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0,
                         (c & 255) / 255.0);
}

/* PIL's rectangle(xy, outline, width): the outline drawn inward, corners inclusive. */
void plt_outline_rect(cairo_t *cr, int x0, int y0, int x1, int y1, int lw)
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

/* Annotator.plt_box_label (PIL mode): box, then the label on a filled tag, white text. */
void plt_box_label(cairo_t *cr, const double box[4], const char *label, uint32_t color, int lw,
                   const cairo_font_extents_t *fe)
{
    /* PIL casts the coordinates to int. */
    const int x0 = (int)box[0], y0 = (int)box[1], x1 = (int)box[2], y1 = (int)box[3];
    plt_set_rgb(cr, color);
    plt_outline_rect(cr, x0, y0, x1, y1, lw);
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

int plt_figure_new(int w, int h, double scale, cairo_surface_t **sf, cairo_t **cr)
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
    cairo_scale(*cr, scale, scale);
    cairo_select_font_face(*cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    return 0;
}

int plt_surface_rgb(cairo_surface_t *sf, uint8_t **rgb, int *w_out, int *h_out)
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

struct png_buf {
    unsigned char *p;
    size_t n, cap;
};

static cairo_status_t png_append(void *closure, const unsigned char *data, unsigned int len)
{
    struct png_buf *b = closure;
    if (trn_grow((void **)&b->p, &b->cap, b->n + len, 1) < 0) return CAIRO_STATUS_NO_MEMORY;
    memcpy(b->p + b->n, data, len);
    b->n += len;
    return CAIRO_STATUS_SUCCESS;
}

int plt_png_write(cairo_surface_t *sf, const char *path, char *err, size_t err_cap)
{
    cairo_surface_flush(sf);
    /* encoded in memory, then written all or nothing (trn_write_file) */
    struct png_buf b = { 0 };
    const cairo_status_t st = cairo_surface_write_to_png_stream(sf, png_append, &b);
    int rc;
    if (st == CAIRO_STATUS_SUCCESS) {
        rc = trn_write_file(path, b.p, b.n, false, err, err_cap);
    } else {
        trn_seterr(err, err_cap, "%s: cannot encode: %s", path, cairo_status_to_string(st));
        rc = st == CAIRO_STATUS_NO_MEMORY ? -ENOMEM : -EIO;
    }
    free(b.p);
    return rc;
}

cairo_surface_t *trn_plot_rgb_surface(const uint8_t *rgb, int w, int h)
{
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(s);
        return NULL;
    }
    cairo_surface_flush(s);
    uint8_t *px = cairo_image_surface_get_data(s);
    const int stride = cairo_image_surface_get_stride(s);
    for (int y = 0; y < h; y++) {
        uint32_t *row = (uint32_t *)(void *)(px + (size_t)y * (size_t)stride);
        const uint8_t *src = rgb + (size_t)y * (size_t)w * 3;
        for (int x = 0; x < w; x++)
            row[x] = (uint32_t)src[3 * x] << 16 | (uint32_t)src[3 * x + 1] << 8 | src[3 * x + 2];
    }
    cairo_surface_mark_dirty(s);
    return s;
}

int trn_plot_png_write(const uint8_t *rgb, int w, int h, const char *path, char *err,
                       size_t err_cap)
{
    cairo_surface_t *sf = trn_plot_rgb_surface(rgb, w, h);
    if (!sf) return trn_fail(err, err_cap, -ENOMEM, "%s: out of memory", path);
    const int rc = plt_png_write(sf, path, err, err_cap);
    cairo_surface_destroy(sf);
    return rc;
}

void plt_show_centered(cairo_t *cr, double x, double y, const char *s)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    cairo_move_to(cr, x - te.x_advance / 2, y);
    cairo_show_text(cr, s);
}

double plt_nice_step(double span)
{
    const double raw = span / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return p * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10);
}

void trn_plots_cleanup(void)
{
    cairo_debug_reset_static_data();
    FcFini();
}
