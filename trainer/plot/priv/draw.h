/*
 * draw: the drawing helpers the plot files share (plots.c, plot_mosaic.c, plot_val.c), private
 * to trainer/plot/.
 */
#ifndef TRN_PLOT_DRAW_H
#define TRN_PLOT_DRAW_H

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
#include "plots.h"
#include "util.h"

void plt_set_rgb(cairo_t *cr, uint32_t c);
/* A new white w x h RGB24 surface and its context, scaled by `scale` (matplotlib points to
 * pixels: dpi / 72), sans-serif selected. Returns 0, -ENOMEM or -EIO (nothing to free). */
int plt_figure_new(int w, int h, double scale, cairo_surface_t **sf, cairo_t **cr);
/* The surface as a malloc'd RGB8 HWC image. Returns 0 or -ENOMEM. */
int plt_surface_rgb(cairo_surface_t *sf, uint8_t **rgb, int *w_out, int *h_out);
/* Write sf as PNG to path; err names the file. Returns 0, -ENOMEM or -EIO. */
int plt_png_write(cairo_surface_t *sf, const char *path, char *err, size_t err_cap);
/* Text centred on x, baseline at y. */
void plt_show_centered(cairo_t *cr, double x, double y, const char *s);
/* A matplotlib-like tick step: 1, 2, 2.5 or 5 times a power of ten, about 5 ticks per span. */
double plt_nice_step(double span);
void plt_outline_rect(cairo_t *cr, int x0, int y0, int x1, int y1, int lw);
void plt_box_label(cairo_t *cr, const double box[4], const char *label, uint32_t color, int lw,
                   const cairo_font_extents_t *fe);

#endif
