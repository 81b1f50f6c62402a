/* evolve.png (plots.h, trn_plot_evolve): train.py's plot_evolve after an --evolve run. */
#include "priv/draw.h"

#define EVO_DPI  (200.0 / 72.0) /* figsize (10, 12) at dpi 200 */
#define EVO_COLS 5
#define EVO_BINS 20 /* ultralytics' hist2d(v, f, 20) */

/* matplotlib's viridis at t in [0, 1], from five of its stops. */
static void viridis(cairo_t *cr, double t, double alpha)
{
    static const double stop[5][3] = { { 0.267, 0.005, 0.329 },
                                       { 0.231, 0.322, 0.545 },
                                       { 0.129, 0.569, 0.549 },
                                       { 0.369, 0.788, 0.384 },
                                       { 0.993, 0.906, 0.144 } };
    t = !(t > 0) ? 0 : t > 1 ? 1 : t;
    const int k = t >= 1 ? 3 : (int)(t * 4);
    const double f = t * 4 - k;
    cairo_set_source_rgba(cr, stop[k][0] + (stop[k + 1][0] - stop[k][0]) * f,
                          stop[k][1] + (stop[k + 1][1] - stop[k][1]) * f,
                          stop[k][2] + (stop[k + 1][2] - stop[k][2]) * f, alpha);
}

/* The bin of v among n - 1 bins over [lo, hi] (np.digitize on linspace(lo, hi, n), clipped). */
static int bin_of(double v, double lo, double hi)
{
    if (!(hi > lo)) return 0;
    const int b = (int)floor((v - lo) / (hi - lo) * (EVO_BINS - 1));
    return b < 0 ? 0 : b > EVO_BINS - 2 ? EVO_BINS - 2 : b;
}

static int evolve_surface(const char *const *names, int n_keys, const double *values,
                          const double *fitness, int n_rows, cairo_surface_t **out)
{
    if (!names || n_keys < 1 || n_keys > 60 || !values || !fitness || n_rows < 1) return -EINVAL;
    cairo_surface_t *sf = NULL;
    cairo_t *cr = NULL;
    const int rows =
        (n_keys + EVO_COLS - 1) / EVO_COLS > 6 ? (n_keys + EVO_COLS - 1) / EVO_COLS : 6;
    int rc = plt_figure_new(2000, (int)(400 * rows), EVO_DPI, &sf, &cr);
    if (rc) return rc;
    int best = 0;
    double flo = fitness[0], fhi = fitness[0];
    for (int i = 1; i < n_rows; i++) {
        if (fitness[i] > fitness[best]) best = i;
        flo = fmin(flo, fitness[i]), fhi = fmax(fhi, fitness[i]);
    }
    const double cw = 720.0 / EVO_COLS, ch = 144, fs = 8;
    for (int k = 0; k < n_keys; k++) {
        const int col = k % EVO_COLS, row = k / EVO_COLS;
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < n_rows; i++)
            lo = fmin(lo, values[(size_t)i * n_keys + k]),
            hi = fmax(hi, values[(size_t)i * n_keys + k]);
        /* log of each point's 2-D histogram count: denser points are yellower */
        int count[EVO_BINS][EVO_BINS] = { { 0 } };
        for (int i = 0; i < n_rows; i++)
            count[bin_of(values[(size_t)i * n_keys + k], lo, hi)][bin_of(fitness[i], flo, fhi)]++;
        double clo = INFINITY, chi = -INFINITY;
        for (int i = 0; i < n_rows; i++) {
            const double c = log(count[bin_of(values[(size_t)i * n_keys + k], lo, hi)]
                                      [bin_of(fitness[i], flo, fhi)]);
            clo = fmin(clo, c), chi = fmax(chi, c);
        }
        const double pad_x = hi > lo ? (hi - lo) * 0.05 : fmax(fabs(lo) * 0.05, 0.05);
        const double pad_y = fhi > flo ? (fhi - flo) * 0.05 : fmax(fabs(flo) * 0.05, 0.05);
        const double xl = lo - pad_x, xh = hi + pad_x, yl = flo - pad_y, yh = fhi + pad_y;
        const double l = col * cw + (col == 0 ? 34 : 10), t = row * ch + 18;
        const double pw = (col + 1) * cw - 8 - l, ph = ch - 34;
#define PX(v) (l + ((v)-xl) / (xh - xl) * pw)
#define PY(v) (t + ph - ((v)-yl) / (yh - yl) * ph)
        for (int i = 0; i < n_rows; i++) {
            const double v = values[(size_t)i * n_keys + k];
            const double c = log(count[bin_of(v, lo, hi)][bin_of(fitness[i], flo, fhi)]);
            viridis(cr, chi > clo ? (c - clo) / (chi - clo) : 0, 0.8);
            cairo_arc(cr, PX(v), PY(fitness[i]), 2.2, 0, 2 * M_PI);
            cairo_fill(cr);
        }
        /* the best row: 'k+', markersize 15 */
        const double bx = PX(values[(size_t)best * n_keys + k]), by = PY(fitness[best]);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_set_line_width(cr, 1.2);
        cairo_move_to(cr, bx - 7.5, by);
        cairo_line_to(cr, bx + 7.5, by);
        cairo_move_to(cr, bx, by - 7.5);
        cairo_line_to(cr, bx, by + 7.5);
        cairo_stroke(cr);
        cairo_set_line_width(cr, 0.8);
        cairo_rectangle(cr, l, t, pw, ph);
        cairo_stroke(cr);
        cairo_set_font_size(cr, fs);
        char lab[96];
        double st = plt_nice_step(xh - xl);
        for (double v = ceil(xl / st) * st; v <= xh + 1e-12; v += st) {
            snprintf(lab, sizeof lab, "%.3g", fabs(v) < st * 1e-6 ? 0.0 : v);
            cairo_move_to(cr, PX(v), t + ph);
            cairo_line_to(cr, PX(v), t + ph + 3);
            cairo_stroke(cr);
            plt_show_centered(cr, PX(v), t + ph + 3 + fs, lab);
        }
        st = plt_nice_step(yh - yl);
        for (double v = ceil(yl / st) * st; col == 0 && v <= yh + 1e-12; v += st) {
            snprintf(lab, sizeof lab, "%.3g", fabs(v) < st * 1e-6 ? 0.0 : v);
            cairo_text_extents_t te;
            cairo_text_extents(cr, lab, &te);
            cairo_move_to(cr, l, PY(v));
            cairo_line_to(cr, l - 3, PY(v));
            cairo_stroke(cr);
            cairo_move_to(cr, l - 5 - te.x_advance, PY(v) + fs * 0.35);
            cairo_show_text(cr, lab);
        }
        cairo_set_font_size(cr, 9);
        snprintf(lab, sizeof lab, "%s = %.3g", names[k], values[(size_t)best * n_keys + k]);
        plt_show_centered(cr, l + pw / 2, t - 4, lab);
#undef PX
#undef PY
    }
    rc = cairo_status(cr) == CAIRO_STATUS_SUCCESS ? 0 : -EIO;
    cairo_destroy(cr);
    if (rc < 0)
        cairo_surface_destroy(sf);
    else
        *out = sf;
    return rc;
}

int trn_plot_evolve_render(const char *const *names, int n_keys, const double *values,
                           const double *fitness, int n_rows, uint8_t **rgb, int *w, int *h)
{
    if (!rgb || !w || !h) return -EINVAL;
    *rgb = NULL;
    cairo_surface_t *sf = NULL;
    int rc = evolve_surface(names, n_keys, values, fitness, n_rows, &sf);
    if (rc < 0) return rc;
    rc = plt_surface_rgb(sf, rgb, w, h);
    cairo_surface_destroy(sf);
    return rc;
}

int trn_plot_evolve(const char *const *names, int n_keys, const double *values,
                    const double *fitness, int n_rows, const char *png_path, char *err,
                    size_t err_cap)
{
    cairo_surface_t *sf = NULL;
    int rc = evolve_surface(names, n_keys, values, fitness, n_rows, &sf);
    if (rc < 0) return trn_fail(err, err_cap, rc, "%s: drawing: %s", png_path, strerror(-rc));
    rc = plt_png_write(sf, png_path, err, err_cap);
    cairo_surface_destroy(sf);
    return rc;
}
