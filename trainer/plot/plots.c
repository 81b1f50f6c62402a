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

void trn_plots_cleanup(void)
{
    cairo_debug_reset_static_data();
    FcFini();
}
