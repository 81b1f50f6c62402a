/*
 * val curves: the PR / F1 / P / R curves trn_ap_per_class exports (issue 7), on a hand-built case
 * whose precision / recall points are known, and the pictures drawn from them (PR_curve.png ...,
 * confusion_matrix.png): their sizes, that they decode, and that the mean PR curve is drawn blue
 * where it must be.
 *
 * The case: class 0 has 2 labels and 3 detections (conf 0.9 TP, 0.6 FP, 0.3 TP at every IoU):
 * recall 0.5 0.5 1, precision 1 1/2 2/3, so the envelope is 1 up to recall 0.5 and 2/3 after;
 * class 1 has 1 label and 1 TP at conf 0.8 (precision 1 up to recall 1); class 2 has a label and
 * no detection (its row is zero and it has no PR row).
 */
#include <cairo.h>
#include <errno.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "plots.h"
#include "tap.h"

static int near(double a, double b, double tol)
{
    return fabs(a - b) <= tol;
}

/* px[k] = k / 999 (np.linspace(0, 1, 1000)) */
static double pxk(int k)
{
    return k == TRN_AP_NPX - 1 ? 1.0 : k * (1.0 / (TRN_AP_NPX - 1));
}

static int build(struct trn_ap_result *res)
{
    enum { N = 4 };
    uint8_t tp[N * TRN_NIOU];
    const float conf[N] = { 0.9f, 0.6f, 0.3f, 0.8f };
    const int pcls[N] = { 0, 0, 0, 1 };
    const int tcls[4] = { 0, 0, 1, 2 };
    memset(tp, 1, sizeof tp);
    memset(tp + 1 * TRN_NIOU, 0, TRN_NIOU); /* detection 1 is a FP */
    return trn_ap_per_class(tp, conf, pcls, N, tcls, 4, 3, res);
}

static void test_curves(const struct trn_ap_result *r)
{
    ok(r->n_cls == 3 && r->curve_pr && r->curve_p && r->curve_r && r->curve_f1, "curves exported");
    if (r->n_cls != 3 || !r->curve_pr) return;
    const double *pr0 = r->curve_pr, *pr1 = r->curve_pr + TRN_AP_NPX;
    ok(r->pr_valid[0] && r->pr_valid[1] && !r->pr_valid[2] && r->n_pr == 2,
       "a class without detections has no PR row (ultralytics' py)");
    /* envelope of class 0: 1 for recall <= 0.5, 2/3 after, 0 at recall 1 (the sentinel) */
    ok(pr0[0] == 1.0 && pr0[250] == 1.0 && pr0[499] == 1.0, "class 0 PR: 1 up to recall 0.5");
    ok(near(pr0[500], 2.0 / 3, 1e-12) && near(pr0[998], 2.0 / 3, 1e-12),
       "class 0 PR: 2/3 between recall 0.5 and 1 (%.6f %.6f)", pr0[500], pr0[998]);
    ok(pr0[999] == 0.0 && pr1[999] == 0.0, "PR at recall 1 is the sentinel's 0");
    ok(pr1[0] == 1.0 && pr1[700] == 1.0, "class 1 PR: precision 1");
    ok(near(r->mean_pr[700], (2.0 / 3 + 1.0) / 2, 1e-12) && r->mean_pr[100] == 1.0,
       "mean PR over the classes with detections: %.6f", r->mean_pr[700]);

    /* P and R against confidence, class 0: np.interp(-px, -conf, .) with left 1 / 0 */
    const double *p0 = r->curve_p, *r0 = r->curve_r;
    ok(near(r0[0], 1.0, 1e-12) && near(p0[0], 2.0 / 3, 1e-12),
       "conf 0: recall 1, precision 2/3 (all detections)");
    ok(r0[999] == 0.0 && p0[999] == 1.0, "conf 1: recall 0 (left), precision 1 (left)");
    /* conf in (0.6, 0.9): recall 0.5, precision linear from 1/2 at 0.6 to 1 at 0.9 */
    const int k = 749;
    const double t = (pxk(k) - (double)0.6f) / ((double)0.9f - (double)0.6f);
    ok(near(r0[k], 0.5, 1e-12), "recall 0.5 at conf %.4f", pxk(k));
    ok(near(p0[k], 0.5 + 0.5 * t, 1e-9), "precision interpolated at conf %.4f: %.6f want %.6f",
       pxk(k), p0[k], 0.5 + 0.5 * t);
    /* conf in (0.3, 0.6): recall linear from 1 at 0.3 to 0.5 at 0.6 */
    const int k2 = 450;
    const double t2 = (pxk(k2) - (double)0.3f) / ((double)0.6f - (double)0.3f);
    ok(near(r0[k2], 1.0 - 0.5 * t2, 1e-9), "recall interpolated at conf %.4f: %.6f", pxk(k2),
       r0[k2]);
    const double f = 2 * p0[k] * r0[k] / (p0[k] + r0[k] + 1e-16);
    ok(near(r->curve_f1[k], f, 1e-15), "F1 = 2pr / (p + r)");
    const double *p2 = r->curve_p + 2 * TRN_AP_NPX;
    ok(p2[0] == 0 && p2[500] == 0, "a class without detections has zero curves");
    ok(near(r->mean_p[k], (p0[k] + r->curve_p[TRN_AP_NPX + k] + 0) / 3, 1e-15) &&
           near(r->mean_f1[k],
                (r->curve_f1[k] + r->curve_f1[TRN_AP_NPX + k] + r->curve_f1[2 * TRN_AP_NPX + k]) /
                    3,
                1e-15),
       "P and F1 means over all classes");
    /* the max-F1 confidence the summary used is the argmax of smooth(mean_f1, 0.1) */
    double sm[TRN_AP_NPX];
    trn_np_smooth(r->mean_f1, TRN_AP_NPX, 0.1, sm);
    int best = 0;
    for (int i = 1; i < TRN_AP_NPX; i++)
        if (sm[i] > sm[best]) best = i;
    ok(best == r->conf_index && r->p[0] == p0[best], "summary taken at the smoothed F1 maximum");
}

static void test_smooth(void)
{
    double y[200], s[200];
    for (int i = 0; i < 200; i++)
        y[i] = 0.5 * i;
    trn_np_smooth(y, 200, 0.05, s); /* nf = 11: a linear ramp is kept away from the edges */
    ok(near(s[100], 50.0, 1e-9) && near(s[10], 5.0, 1e-9), "smooth keeps a ramp inside");
    ok(near(s[0], (6 * 0.0 + 0.5 * (1 + 2 + 3 + 4 + 5)) / 11, 1e-12),
       "smooth pads with the first value: %.6f", s[0]);
}

static int blue(const uint8_t *rgb, int w, int x, int y)
{
    const uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
    return p[0] < 40 && p[1] < 40 && p[2] > 215;
}

static void test_pictures(const struct trn_ap_result *r)
{
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    struct trn_plot_box ax;
    int rc = trn_plot_curve_render(r, TRN_PLOT_CURVE_PR, NULL, &rgb, &w, &h, &ax);
    ok(rc == 0 && w == 2250 && h == 1500, "PR curve 2250 x 1500 (9 x 6 in at 250 dpi): %d %dx%d",
       rc, w, h);
    if (rc == 0) {
        /* recall 0.75: the mean is 5/6; at precision 0.3 there is no curve */
        const int x = (int)lrint(ax.x0 + 0.75 * (ax.x1 - ax.x0));
        const int y = (int)lrint(ax.y1 - (5.0 / 6) * (ax.y1 - ax.y0));
        const int y_off = (int)lrint(ax.y1 - 0.3 * (ax.y1 - ax.y0));
        ok(blue(rgb, w, x, y), "mean PR line blue at recall 0.75, precision 5/6 (%d, %d)", x, y);
        ok(!blue(rgb, w, x, y_off), "no blue at precision 0.3");
        int nblue = 0;
        for (int yy = (int)ax.y0; yy < (int)ax.y1; yy++)
            nblue += blue(rgb, w, x, yy);
        ok(nblue >= 6 && nblue <= 16, "the mean line is ~3 pt thick there (%d px)", nblue);
        /* class 0's line at recall 0.75, precision 2/3: not the mean's blue */
        const int yc = (int)lrint(ax.y1 - (2.0 / 3) * (ax.y1 - ax.y0));
        ok(!blue(rgb, w, x, yc), "per-class line is not drawn in the mean's blue");
        free(rgb);
    }
    struct trn_ap_result empty = { 0 };
    rgb = NULL;
    ok(trn_plot_curve_render(&empty, TRN_PLOT_CURVE_F1, NULL, &rgb, &w, &h, NULL) == -EINVAL &&
           !rgb,
       "no curves: -EINVAL");

    /* confusion matrix: 2 classes; class 0 always right, class 1 half missed */
    const double m[9] = { 4, 0, 1, 0, 2, 0, 0, 2, 0 };
    struct trn_plot_box cells;
    rc = trn_plot_confusion_render(m, 2, NULL, &rgb, &w, &h, &cells);
    ok(rc == 0 && w == 3000 && h == 2250, "confusion matrix 3000 x 2250 (12 x 9 in at 250 dpi)");
    if (rc == 0) {
        const double c = (cells.x1 - cells.x0) / 3;
        ok(near(cells.x1 - cells.x0, cells.y1 - cells.y0, 1e-6), "square cells");
        /* cell [0][0] = 4 / 4 = 1.0: the darkest blue (near a corner, away from its text) */
        const int x0 = (int)(cells.x0 + 0.1 * c), y0 = (int)(cells.y0 + 0.1 * c);
        const uint8_t *p = rgb + ((size_t)y0 * (size_t)w + (size_t)x0) * 3;
        ok(p[0] == 0x08 && p[1] == 0x30 && p[2] == 0x6b,
           "1.00 cell is Blues' darkest (%02x%02x%02x)", p[0], p[1], p[2]);
        /* cell [0][1] = 0: white (below 0.005) */
        p = rgb + ((size_t)y0 * (size_t)w + (size_t)(x0 + c)) * 3;
        ok(p[0] == 255 && p[1] == 255 && p[2] == 255, "empty cell stays white");
        /* cell [1][1] = 0.5: a middle blue, lighter than the darkest */
        p = rgb + ((size_t)(y0 + c) * (size_t)w + (size_t)(x0 + c)) * 3;
        ok(p[2] > p[0] && p[0] > 0x08 && p[0] < 0xf7, "0.50 cell is a middle blue (%02x%02x%02x)",
           p[0], p[1], p[2]);
        free(rgb);
    }

    /* The files val.py writes, decoded back. */
    char dir[] = "/tmp/test_val_curves_XXXXXX";
    if (!mkdtemp(dir)) {
        ok(0, "mkdtemp");
        return;
    }
    char err[512];
    int written = 0;
    rc = trn_plot_val(r, m, 2, NULL, dir, &written, err, sizeof err);
    ok(rc == 0 && written == 5, "trn_plot_val writes 5 pictures: %d %d %s", rc, written, err);
    static const char *const files[5] = { "PR_curve.png", "F1_curve.png", "P_curve.png",
                                          "R_curve.png", "confusion_matrix.png" };
    for (int i = 0; i < 5; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        cairo_surface_t *s = cairo_image_surface_create_from_png(path);
        const int ok_png = cairo_surface_status(s) == CAIRO_STATUS_SUCCESS;
        const int ww = ok_png ? cairo_image_surface_get_width(s) : 0;
        const int hh = ok_png ? cairo_image_surface_get_height(s) : 0;
        const int want_w = i == 4 ? TRN_PLOT_CM_W : TRN_PLOT_CURVE_W;
        const int want_h = i == 4 ? TRN_PLOT_CM_H : TRN_PLOT_CURVE_H;
        ok(ok_png && ww == want_w && hh == want_h, "%s decodes, %dx%d", files[i], ww, hh);
        cairo_surface_destroy(s);
        unlink(path);
    }
    written = 7;
    struct trn_ap_result none = { 0 };
    rc = trn_plot_val(&none, m, 2, NULL, dir, &written, err, sizeof err);
    ok(rc == 0 && written == 1, "no correct detection: only the confusion matrix (%d)", written);
    char path[256];
    snprintf(path, sizeof path, "%s/confusion_matrix.png", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/nodir", dir);
    rc = trn_plot_val(r, m, 2, NULL, path, &written, err, sizeof err);
    ok(rc < 0 && strstr(err, "nodir/PR_curve.png"), "unwritable dir: error naming the file (%s)",
       err);
    rmdir(dir);
}

int main(void)
{
    struct trn_ap_result r;
    const int rc = build(&r);
    ok(rc == 0, "ap_per_class on the hand case: %d", rc);
    if (rc == 0) {
        test_curves(&r);
        test_smooth();
        test_pictures(&r);
    }
    trn_ap_result_free(&r);
    cairo_debug_reset_static_data();
    FcFini();
    return tap_done();
}
