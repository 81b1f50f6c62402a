/* results.png from results.csv (plots.h, trn_plot_results). */
#include "priv/draw.h"

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

/* Split line into at most RES_MAX_COLS stripped fields (in place). Returns the field count. */
static int split_csv(char *line, char **f)
{
    int n = 0;
    for (char *p = line; n < RES_MAX_COLS;) {
        char *c = strchr(p, ',');
        if (c) *c = '\0';
        trn_trim(p);
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
    const double ys_step = plt_nice_step(hi - lo);
    for (double v = ceil(lo / ys_step) * ys_step; v <= hi + 1e-12; v += ys_step) {
        snprintf(lab, sizeof lab, "%.4g", fabs(v) < ys_step * 1e-6 ? 0.0 : v);
        cairo_text_extents(cr, lab, &te);
        cairo_move_to(cr, l - 4, PY(v));
        cairo_line_to(cr, l, PY(v));
        cairo_stroke(cr);
        cairo_move_to(cr, l - 6 - te.x_advance, PY(v) + 3);
        cairo_show_text(cr, lab);
    }
    double xs_step = plt_nice_step(xhi - xlo);
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
    plt_set_rgb(cr, 0x1f77b4); /* matplotlib C0: the series */
    for (int i = 0; i < n; i++)
        if (isfinite(y[i])) (i ? cairo_line_to : cairo_move_to)(cr, PX(x[i]), PY(y[i]));
    cairo_stroke(cr);
    for (int i = 0; i < n; i++)
        if (isfinite(y[i])) {
            cairo_arc(cr, PX(x[i]), PY(y[i]), 2.5, 0, 2 * M_PI);
            cairo_fill(cr);
        }
    plt_set_rgb(cr, 0xff7f0e); /* C1: the smoothed series, ':' */
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
        plt_set_rgb(cr, col[k]);
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
