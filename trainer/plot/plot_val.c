/* The validation figures: PR / F1 / P / R curves and confusion_matrix.png (plots.h). */
#include "priv/draw.h"

#define DPI_SCALE (250.0 / 72.0) /* matplotlib points to pixels at dpi 250 */

/* matplotlib's default colour cycle (tab10), for the per-class lines. */
static const uint32_t tab10[10] = { 0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                    0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf };

/* Legend entry: a line sample of colour c and width lw, then the text. */
struct legend_entry {
    char text[192];
    uint32_t color;
    double lw;
};

static const char *class_label(const struct trn_plot_names *names, int c, char *buf, size_t cap)
{
    if (names && c >= 0 && c < names->n && names->names[c]) return names->names[c];
    snprintf(buf, cap, "%d", c);
    return buf;
}

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
        plt_show_centered(cr, CX(v), b + 3.5 + 3.5 + fs * 0.75, buf);
        cairo_text_extents_t te;
        cairo_text_extents(cr, buf, &te);
        cairo_move_to(cr, l - 3.5 - 3.5 - te.x_advance, CY(v) + fs * 0.35);
        cairo_show_text(cr, buf);
    }
    plt_show_centered(cr, l + pw / 2, H - 8, which == TRN_PLOT_CURVE_PR ? "Recall" : "Confidence");
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
    plt_show_centered(cr, l + pw / 2, t - 7, buf);
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
        plt_set_rgb(cr, legend_classes ? tab10[drawn % 10] : 0x808080);
        drawn++;
        cairo_set_line_width(cr, 1);
        for (int k = 0; k < TRN_AP_NPX; k++)
            (k ? cairo_line_to : cairo_move_to)(cr, CX(px[k]),
                                                CY(rows[(size_t)c * TRN_AP_NPX + (size_t)k]));
        cairo_stroke(cr);
    }
    plt_set_rgb(cr, 0x0000ff);
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
            plt_set_rgb(cr, leg[i].color);
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
    int rc = plt_figure_new(TRN_PLOT_CURVE_W, TRN_PLOT_CURVE_H, DPI_SCALE, &sf, &cr);
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
    rc = plt_surface_rgb(sf, rgb, w, h);
    cairo_surface_destroy(sf);
    return rc;
}

static void draw_error(char *err, size_t err_cap, const char *path, int rc)
{
    if (err && err_cap)
        snprintf(err, err_cap, "%s: drawing: %s", path ? path : "(null)",
                 rc == -ENOMEM   ? "out of memory"
                 : rc == -EINVAL ? "bad input"
                                 : "cairo failed");
}

/* A drawn surface (rc: its drawing's status) written to png_path and released. */
static int surface_png(int rc, cairo_surface_t *sf, const char *png_path, char *err, size_t err_cap)
{
    if (rc < 0) {
        draw_error(err, err_cap, png_path, rc);
        return rc;
    }
    rc = plt_png_write(sf, png_path, err, err_cap);
    cairo_surface_destroy(sf);
    return rc;
}

int trn_plot_curve(const struct trn_ap_result *ap, enum trn_plot_curve which,
                   const struct trn_plot_names *names, const char *png_path, char *err,
                   size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!png_path) return -EINVAL;
    cairo_surface_t *sf = NULL;
    const int rc = curve_surface(ap, which, names, &sf, NULL);
    return surface_png(rc, sf, png_path, err, err_cap);
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
    int rc = plt_figure_new(TRN_PLOT_CM_W, TRN_PLOT_CM_H, DPI_SCALE, &sf, &cr);
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
            plt_set_rgb(cr, blues(v / vmax));
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
                plt_show_centered(cr, hx + cell * ((double)j + 0.5),
                                  hy + cell * ((double)i + 0.5) + 3, buf);
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
            plt_show_centered(cr, cx, hy + hw + 4 + fs, s);
        }
    }
    const double below = hy + hw + 4 + (vertical ? tw : fs) + 6;
    cairo_set_font_size(cr, 10);
    plt_show_centered(cr, hx + hw / 2, below + 10, "True");
    cairo_save(cr);
    cairo_move_to(cr, 14, hy + hw / 2);
    cairo_rotate(cr, -M_PI / 2);
    cairo_text_extents_t te;
    cairo_text_extents(cr, "Predicted", &te);
    cairo_rel_move_to(cr, -te.x_advance / 2, 0);
    cairo_show_text(cr, "Predicted");
    cairo_restore(cr);
    cairo_set_font_size(cr, 12);
    plt_show_centered(cr, hx + hw / 2, top - 10, "Confusion Matrix");
    /* Colour bar: 0 at the bottom to vmax at the top, 5 ticks. */
    const double bx = hx + hw + 14, bw = 12;
    for (int y = 0; y < 256; y++) {
        plt_set_rgb(cr, blues(1.0 - y / 255.0));
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
    rc = plt_surface_rgb(sf, rgb, w, h);
    cairo_surface_destroy(sf);
    return rc;
}

int trn_plot_confusion(const double *matrix, int nc, const struct trn_plot_names *names,
                       const char *png_path, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!png_path) return -EINVAL;
    cairo_surface_t *sf = NULL;
    const int rc = confusion_surface(matrix, nc, names, &sf, NULL);
    return surface_png(rc, sf, png_path, err, err_cap);
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
