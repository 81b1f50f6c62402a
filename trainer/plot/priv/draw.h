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
void plt_outline_rect(cairo_t *cr, int x0, int y0, int x1, int y1, int lw);
void plt_box_label(cairo_t *cr, const double box[4], const char *label, uint32_t color, int lw,
                   const cairo_font_extents_t *fe);

#endif
