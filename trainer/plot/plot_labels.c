/*
 * labels.jpg and labels_correlogram.jpg from the training set's labels (plots.h,
 * trn_plot_labels): train.py's plot_labels (utils/plots.py v7.0) drawn with cairo. The layout,
 * bins, colours and scales are ultralytics'; matplotlib's and seaborn's exact tick placement and
 * fonts are not reproduced.
 */
#include "priv/draw.h"

#define LAB_DPI   (200.0 / 72.0) /* plt.savefig(dpi=200), in pixels per point */
#define LAB_BINS  50             /* histplot bins */
#define LAB_PMAX  0.9            /* histplot pmax */
#define LAB_BOXES 1000           /* plot_labels draws labels[:1000] */
#define C0        0x1f77b4u      /* matplotlib's first cycle colour, seaborn's default */

/* Column k of the (class, x, y, w, h) rows as doubles; lo/hi: its range. */
static double *column(const float *labels, size_t n, int k, double *lo, double *hi)
{
    double *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    *lo = INFINITY, *hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        v[i] = labels[5 * i + k];
        *lo = fmin(*lo, v[i]), *hi = fmax(*hi, v[i]);
    }
    if (!(*lo <= *hi)) *lo = 0, *hi = 1;
    if (*hi - *lo < 1e-9) *lo -= 0.5, *hi += 0.5; /* numpy's range for a constant column */
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's bins='auto' (the larger of Sturges' and Freedman-Diaconis' bin counts). */
static int auto_bins(const double *v, size_t n, double lo, double hi)
{
    if (n < 2) return 1;
    const int sturges = (int)ceil(log2((double)n) + 1);
    double *s = malloc(n * sizeof *s);
    if (!s) return sturges;
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    const double iqr = s[(size_t)(0.75 * (double)(n - 1))] - s[(size_t)(0.25 * (double)(n - 1))];
    free(s);
    if (iqr <= 0) return sturges;
    const int fd = (int)ceil((hi - lo) / (2 * iqr / cbrt((double)n)));
    return fd > sturges ? (fd > 1000 ? 1000 : fd) : sturges;
}

/* seaborn's light_palette(C0) from near white to C0 at t in [0, 1]. */
static void light_c0(cairo_t *cr, double t)
{
    const double a[3] = { 0.925, 0.937, 0.953 };
    const double b[3] = { 0x1f / 255.0, 0x77 / 255.0, 0xb4 / 255.0 };
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    cairo_set_source_rgb(cr, a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t,
                         a[2] + (b[2] - a[2]) * t);
}

/* A plotting area: pixels (points) and the data range it shows. */
struct area {
    double l, t, w, h; /* points */
    double xlo, xhi, ylo, yhi;
};

#define AX(a, v) ((a)->l + ((v) - (a)->xlo) / ((a)->xhi - (a)->xlo) * (a)->w)
#define AY(a, v) ((a)->t + (a)->h - ((v) - (a)->ylo) / ((a)->yhi - (a)->ylo) * (a)->h)

/* Ticks and their numbers on the bottom (labels_x) and left (labels_y) edges; the axis names. */
static void ticks(cairo_t *cr, const struct area *a, bool labels_x, bool labels_y,
                  const char *xname, const char *yname, double fs)
{
    char lab[32];
    cairo_text_extents_t te;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.8);
    cairo_set_font_size(cr, fs);
    double st = plt_nice_step(a->xhi - a->xlo), ywidest = 0;
    for (double v = ceil(a->xlo / st) * st; v <= a->xhi + 1e-12; v += st) {
        cairo_move_to(cr, AX(a, v), a->t + a->h);
        cairo_line_to(cr, AX(a, v), a->t + a->h + 3.5);
        cairo_stroke(cr);
        snprintf(lab, sizeof lab, "%.3g", fabs(v) < st * 1e-6 ? 0.0 : v);
        if (labels_x) plt_show_centered(cr, AX(a, v), a->t + a->h + 3.5 + 2 + fs, lab);
    }
    st = plt_nice_step(a->yhi - a->ylo);
    for (double v = ceil(a->ylo / st) * st; v <= a->yhi + 1e-12; v += st) {
        cairo_move_to(cr, a->l, AY(a, v));
        cairo_line_to(cr, a->l - 3.5, AY(a, v));
        cairo_stroke(cr);
        snprintf(lab, sizeof lab, "%.3g", fabs(v) < st * 1e-6 ? 0.0 : v);
        cairo_text_extents(cr, lab, &te);
        ywidest = fmax(ywidest, te.x_advance);
        if (labels_y) {
            cairo_move_to(cr, a->l - 3.5 - 2 - te.x_advance, AY(a, v) + fs * 0.35);
            cairo_show_text(cr, lab);
        }
    }
    if (xname && labels_x)
        plt_show_centered(cr, a->l + a->w / 2, a->t + a->h + 8 + 2.2 * fs, xname);
    if (yname && labels_y) {
        cairo_save(cr);
        cairo_move_to(cr, a->l - 3.5 - 6 - ywidest - 0.3 * fs, a->t + a->h / 2);
        cairo_rotate(cr, -M_PI / 2);
        cairo_text_extents(cr, yname, &te);
        cairo_rel_move_to(cr, -te.x_advance / 2, 0);
        cairo_show_text(cr, yname);
        cairo_restore(cr);
    }
}

/*
 * seaborn's bivariate histplot(bins, pmax): counts on a bins x bins grid over the data's range,
 * empty cells left blank, the rest coloured by light_palette(C0) from 0 to the count below which
 * pmax of all the counts lie.
 */
static int hist2d(cairo_t *cr, const struct area *a, const double *x, const double *y, size_t n,
                  int bx, int by)
{
    uint32_t *c = calloc((size_t)bx * (size_t)by, sizeof *c);
    if (!c) return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int ix = (int)((x[i] - a->xlo) / (a->xhi - a->xlo) * bx);
        int iy = (int)((y[i] - a->ylo) / (a->yhi - a->ylo) * by);
        ix = ix < 0 ? 0 : ix >= bx ? bx - 1 : ix; /* numpy puts the maximum in the last bin */
        iy = iy < 0 ? 0 : iy >= by ? by - 1 : iy;
        c[(size_t)iy * bx + ix]++;
    }
    /* _quantile_to_level: the smallest count whose cells, largest first, hold (1 - pmax) of
     * the mass is the colour scale's top. */
    uint32_t top = 0;
    for (size_t k = 0; k < (size_t)bx * by; k++)
        top = c[k] > top ? c[k] : top;
    uint64_t above = 0;
    for (uint32_t lev = top; lev > 0; lev--) {
        uint64_t at = 0;
        for (size_t k = 0; k < (size_t)bx * by; k++)
            at += c[k] == lev ? lev : 0;
        if ((double)(above + at) > (1.0 - LAB_PMAX) * (double)n) {
            top = lev;
            break;
        }
        above += at;
    }
    const double cw = a->w / bx, ch = a->h / by;
    for (int iy = 0; iy < by; iy++)
        for (int ix = 0; ix < bx; ix++) {
            const uint32_t v = c[(size_t)iy * bx + ix];
            if (!v) continue;
            light_c0(cr, top ? (double)v / top : 1);
            cairo_rectangle(cr, a->l + ix * cw, a->t + a->h - (iy + 1) * ch, cw + 0.05, ch + 0.05);
            cairo_fill(cr);
        }
    free(c);
    return 0;
}

/* A univariate histogram of v over [lo, hi] in `bins` bars, C0. */
static int hist1d(cairo_t *cr, struct area *a, const double *v, size_t n, int bins)
{
    uint32_t *c = calloc((size_t)bins, sizeof *c);
    if (!c) return -ENOMEM;
    uint32_t top = 1;
    for (size_t i = 0; i < n; i++) {
        int k = (int)((v[i] - a->xlo) / (a->xhi - a->xlo) * bins);
        k = k < 0 ? 0 : k >= bins ? bins - 1 : k;
        c[k]++;
        top = c[k] > top ? c[k] : top;
    }
    a->ylo = 0, a->yhi = top * 1.05;
    const double bw = a->w / bins;
    for (int k = 0; k < bins; k++) {
        if (!c[k]) continue;
        const double y0 = AY(a, c[k]);
        cairo_rectangle(cr, a->l + k * bw, y0, bw, a->t + a->h - y0);
        cairo_set_source_rgba(cr, 0x1f / 255.0, 0x77 / 255.0, 0xb4 / 255.0, 0.5);
        cairo_fill_preserve(cr);
        plt_set_rgb(cr, C0);
        cairo_set_line_width(cr, 0.4);
        cairo_stroke(cr);
    }
    free(c);
    return 0;
}

static const char *const var_name[4] = { "x", "y", "width", "height" };

int trn_plot_labels_render(const float *labels, size_t n, const struct trn_plot_names *names,
                           uint8_t **rgb, int *w, int *h)
{
    if (!rgb || !w || !h || (n && !labels)) return -EINVAL;
    *rgb = NULL;
    int nc = 1;
    for (size_t i = 0; i < n; i++)
        if (labels[5 * i] + 1 > nc && labels[5 * i] < 1e6f) nc = (int)labels[5 * i] + 1;
    double lo[5], hi[5];
    double *col[5] = { NULL };
    for (int k = 0; k < 5; k++)
        col[k] = column(labels, n, k, &lo[k], &hi[k]);
    uint32_t *count = calloc((size_t)nc, sizeof *count);
    cairo_surface_t *sf = NULL;
    cairo_t *cr = NULL;
    int rc = count && col[0] && col[1] && col[2] && col[3] && col[4] ? 0 : -ENOMEM;
    if (!rc) rc = plt_figure_new(1600, 1600, LAB_DPI, &sf, &cr);
    if (rc) goto out;
    const double P = 288, fs = 10; /* 8 x 8 in: four 4 x 4 in panels, in points */

    /* Class histogram: bars of width 0.8 centred on the classes, in the class colours. */
    uint32_t top = 1;
    for (size_t i = 0; i < n; i++) {
        const int c = (int)col[0][i];
        if (c >= 0 && c < nc) top = ++count[c] > top ? count[c] : top;
    }
    const bool named = names && names->n > 0 && names->n < 30;
    double name_w = 0;
    cairo_set_font_size(cr, fs);
    for (int c = 0; named && c < names->n; c++) {
        cairo_text_extents_t te;
        cairo_text_extents(cr, names->names[c] ? names->names[c] : "", &te);
        name_w = fmax(name_w, te.x_advance);
    }
    const double bottom = named ? fmin(name_w + 10, 140) : 36;
    struct area a0 = {
        52, 10, P - 62, P - 10 - bottom, -0.5 - 0.05 * nc, nc - 0.5 + 0.05 * nc, 0, top * 1.05
    };
    for (int c = 0; c < nc; c++) {
        plt_set_rgb(cr, trn_plot_color(c));
        const double x0 = AX(&a0, c - 0.4), x1 = AX(&a0, c + 0.4), y0 = AY(&a0, count[c]);
        cairo_rectangle(cr, x0, y0, x1 - x0, a0.t + a0.h - y0);
        cairo_fill(cr);
    }
    if (named) {
        /* set_xticks(range(len(names))), names rotated 90 degrees */
        struct area ay = a0;
        ticks(cr, &ay, false, true, NULL, "instances", fs);
        for (int c = 0; c < names->n; c++) {
            cairo_set_source_rgb(cr, 0, 0, 0);
            cairo_move_to(cr, AX(&a0, c), a0.t + a0.h);
            cairo_line_to(cr, AX(&a0, c), a0.t + a0.h + 3.5);
            cairo_stroke(cr);
            const char *s = names->names[c] ? names->names[c] : "";
            cairo_text_extents_t te;
            cairo_text_extents(cr, s, &te);
            cairo_save(cr);
            cairo_move_to(cr, AX(&a0, c) + fs * 0.35, a0.t + a0.h + 6 + te.x_advance);
            cairo_rotate(cr, -M_PI / 2);
            cairo_show_text(cr, s);
            cairo_restore(cr);
        }
    } else {
        ticks(cr, &a0, true, true, "classes", "instances", fs);
    }

    /* labels[:1000] as boxes centred on a 2000 x 2000 white image, outlined in class colours. */
    const double side = P - 20, ox = P + 10, oy = 10;
    for (size_t i = 0; i < n && i < LAB_BOXES; i++) {
        const double bw = col[3][i] * side, bh = col[4][i] * side;
        plt_set_rgb(cr, trn_plot_color((int)col[0][i]));
        cairo_set_line_width(cr, side / 2000.0 * 1.5);
        cairo_rectangle(cr, ox + side / 2 - bw / 2, oy + side / 2 - bh / 2, bw, bh);
        cairo_stroke(cr);
    }

    /* x-y and width-height: bivariate histograms, 50 bins. */
    for (int p = 0; p < 2; p++) {
        const int kx = 1 + 2 * p, ky = 2 + 2 * p;
        struct area a = { p * P + 52, P + 10, P - 62, P - 46, lo[kx], hi[kx], lo[ky], hi[ky] };
        if ((rc = hist2d(cr, &a, col[kx], col[ky], n, LAB_BINS, LAB_BINS)) < 0) goto out;
        ticks(cr, &a, true, true, var_name[kx - 1], var_name[ky - 1], fs);
    }
    rc = cairo_status(cr) == CAIRO_STATUS_SUCCESS ? plt_surface_rgb(sf, rgb, w, h) : -EIO;
out:
    if (cr) cairo_destroy(cr);
    if (sf) cairo_surface_destroy(sf);
    for (int k = 0; k < 5; k++)
        free(col[k]);
    free(count);
    return rc;
}

int trn_plot_correlogram_render(const float *labels, size_t n, uint8_t **rgb, int *w, int *h)
{
    if (!rgb || !w || !h || (n && !labels)) return -EINVAL;
    *rgb = NULL;
    double lo[4], hi[4];
    double *col[4] = { NULL };
    int rc = 0;
    for (int k = 0; k < 4; k++)
        if (!(col[k] = column(labels, n, k + 1, &lo[k], &hi[k]))) rc = -ENOMEM;
    cairo_surface_t *sf = NULL;
    cairo_t *cr = NULL;
    if (!rc) rc = plt_figure_new(2000, 2000, LAB_DPI, &sf, &cr);
    if (rc) goto out;
    /* pairplot(corner=True): height 2.5 in per variable, the lower triangle; histograms on the
     * diagonal (50 bins), bivariate histograms below it (bins 'auto', pmax 0.9). */
    const double P = 180, fs = 9;
    int bins[4];
    for (int k = 0; k < 4; k++)
        bins[k] = auto_bins(col[k], n, lo[k], hi[k]);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j <= i; j++) {
            struct area a = { j * P + 44, i * P + 8, P - 52, P - 44, lo[j], hi[j], lo[i], hi[i] };
            if (i == j)
                rc = hist1d(cr, &a, col[i], n, LAB_BINS);
            else
                rc = hist2d(cr, &a, col[j], col[i], n, bins[j], bins[i]);
            if (rc < 0) goto out;
            /* seaborn's despine: the left and bottom spines only */
            cairo_set_source_rgb(cr, 0, 0, 0);
            cairo_set_line_width(cr, 0.8);
            cairo_move_to(cr, a.l, a.t);
            cairo_line_to(cr, a.l, a.t + a.h);
            cairo_line_to(cr, a.l + a.w, a.t + a.h);
            cairo_stroke(cr);
            ticks(cr, &a, i == 3, j == 0 && i > 0, var_name[j], var_name[i], fs);
        }
    rc = cairo_status(cr) == CAIRO_STATUS_SUCCESS ? plt_surface_rgb(sf, rgb, w, h) : -EIO;
out:
    if (cr) cairo_destroy(cr);
    if (sf) cairo_surface_destroy(sf);
    for (int k = 0; k < 4; k++)
        free(col[k]);
    return rc;
}

int trn_plot_labels(const float *labels, size_t n, const struct trn_plot_names *names,
                    const char *dir, char *err, size_t err_cap)
{
    if (!dir) return trn_fail(err, err_cap, -EINVAL, "no directory for labels.jpg");
    char path[4200];
    for (int k = 0; k < 2; k++) {
        uint8_t *rgb = NULL;
        int w = 0, h = 0;
        int rc = k == 0 ? trn_plot_correlogram_render(labels, n, &rgb, &w, &h)
                        : trn_plot_labels_render(labels, n, names, &rgb, &w, &h);
        snprintf(path, sizeof path, "%s/%s", dir, k == 0 ? "labels_correlogram.jpg" : "labels.jpg");
        if (rc == 0)
            rc = trn_plot_jpeg_write(rgb, w, h, TRN_PLOT_JPEG_QUALITY, path, err, err_cap);
        else
            trn_fail(err, err_cap, rc, "%s: %s", path, strerror(-rc));
        free(rgb);
        if (rc < 0) return rc;
    }
    return 0;
}
