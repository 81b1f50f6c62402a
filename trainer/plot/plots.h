/*
 * plots: the pictures ultralytics/yolov5 writes during training, drawn with cairo and written as
 * JPEG with TurboJPEG. For now: train_batchK.jpg / val_batchK_labels.jpg, a grid of the first
 * images of a batch with their labels, and val_batchK_pred.jpg with predictions (utils/plots.py
 * plot_images, v7.0), so a user can see that labels and predictions follow pixels.
 *
 * plot_images, as reproduced here: at most 16 images (max_subplots) on an ns x ns grid,
 * ns = ceil(sqrt(n)), filled column by column (image i at column i / ns, row i % ns) on a white
 * canvas; when ns * max(h, w) > 1920 (max_size) the canvas is resized (INTER_LINEAR) so each cell
 * is ceil(scale * w) x ceil(scale * h), scale = 1920 / ns / max(h, w); font size
 * fs = int((h + w) * ns * 0.01) and line width round(fs / 10) (at least 2 when that is 0, as
 * the Annotator's default); a white 2-pixel frame around each cell and the record number at its
 * top-left (ultralytics prints the file name, which records do not keep); each label as a box in
 * its class colour (the 20-colour Colors palette) stroked inward from its rounded corners, as
 * PIL's rectangle(width=lw), with the class name on a filled tag above the box (inside it when
 * there is no room above). Differences: the font is cairo's sans-serif, not Arial.ttf.
 *
 * Errors are negative errno values: -EINVAL (bad argument), -ENOMEM, -EIO (TurboJPEG or cairo
 * failed), -errno from writing the file. Thread safety: the functions share no state, but cairo's
 * toy font API keeps a process-wide font cache (thread-safe in cairo).
 */
#ifndef TRN_PLOTS_H
#define TRN_PLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "loader.h"
#include "metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRN_PLOT_MAX_SIZE     1920 /* plot_images max_size: longest side of the grid, pixels */
#define TRN_PLOT_MAX_SUBPLOTS 16   /* plot_images max_subplots: images drawn per batch */
#define TRN_PLOT_JPEG_QUALITY 75   /* PIL's default JPEG quality (ultralytics saves with PIL) */

/* Class cls's colour as 0xRRGGBB from ultralytics' 20-colour palette (cls mod 20; < 0 -> 0). */
uint32_t trn_plot_color(int cls);

/* Class names of a dataset. */
struct trn_plot_names {
    char **names; /* n strings (malloc'd), printable as UTF-8; NULL entries for gaps */
    int n;        /* entries */
};

/*
 * Read the class names from a dataset's metadata text (ffr_reader_metadata: YAML with `names:`
 * as a list in class order or as ultralytics' {id: name} mapping). Names that are not valid
 * UTF-8 get '?' for their bad bytes and control characters. Metadata without names, or not
 * YAML, gives no names (n = 0) and returns 0: plots then show class numbers.
 * meta, len: borrowed for the call. out: out; free with trn_plot_names_free.
 * Returns 0, -EINVAL (NULL out), or -ENOMEM.
 */
int trn_plot_names_parse(const char *meta, size_t len, struct trn_plot_names *out);

/* Free the names (not the struct); the struct becomes empty. NULL is a no-op. */
void trn_plot_names_free(struct trn_plot_names *names);

/*
 * Draw a batch as plot_images does (see the top of this file) into a new RGB8 HWC image.
 * b: a loader batch (u8 or f32 pixels; targets as the loader gives them). names: class names
 * (NULL or n = 0: class numbers are printed). rgb: out, *h * *w * 3 bytes, malloc'd, the
 * caller frees it. w, h: out, the image size. Returns 0, -EINVAL (b NULL or empty, a target with
 * an image index outside the batch), -ENOMEM, or -EIO (cairo failed).
 */
int trn_plot_batch_render(const struct trn_batch *b, const struct trn_plot_names *names,
                          uint8_t **rgb, int *w, int *h);

/*
 * Write an RGB8 HWC image (w x h, rows of 3w bytes) to path as a baseline JPEG at `quality`
 * (1..100), 4:2:0 as PIL, all or nothing (trn_write_file: an existing picture stays whole when
 * writing fails). err: out, err_cap bytes, one line naming the path on error (may be NULL).
 * Returns 0, -EINVAL, -ENOMEM, -EIO (TurboJPEG) or -errno from creating or writing the file.
 */
int trn_plot_jpeg_write(const uint8_t *rgb, int w, int h, int quality, const char *path, char *err,
                        size_t err_cap);

/* The same as a PNG (cairo's encoder, lossless), all or nothing. Returns 0, -ENOMEM, -EIO or
 * -errno. */
int trn_plot_png_write(const uint8_t *rgb, int w, int h, const char *path, char *err,
                       size_t err_cap);

/* A cairo RGB24 surface (cairo_surface_t) holding the RGB8 image (w x h) to draw on, or NULL
 * without memory. Declared with cairo's struct tag so that this header needs no cairo.h. */
struct _cairo_surface;
struct _cairo_surface *trn_plot_rgb_surface(const uint8_t *rgb, int w, int h);

/*
 * trn_plot_batch_render, then trn_plot_jpeg_write at TRN_PLOT_JPEG_QUALITY to path (e.g.
 * "runs/train/exp/train_batch0.jpg"). Returns as those two.
 */
int trn_plot_batch(const struct trn_batch *b, const struct trn_plot_names *names, const char *path,
                   char *err, size_t err_cap);

/*
 * As trn_plot_batch_render, with predictions instead of the batch's labels (val_batchK_pred.jpg):
 * preds: n_preds rows [image index in b, class, cx, cy, w, h, conf] (ultralytics'
 * output_to_target), boxes in the batch's pixels; rows with conf <= 0.25 are not drawn (as
 * plot_images); each box is labelled "name conf" (conf to one decimal). Returns as
 * trn_plot_batch_render (-EINVAL also for a row with an image index outside the batch).
 */
int trn_plot_preds_render(const struct trn_batch *b, const float *preds, size_t n_preds,
                          const struct trn_plot_names *names, uint8_t **rgb, int *w, int *h);

/* trn_plot_preds_render, then trn_plot_jpeg_write at TRN_PLOT_JPEG_QUALITY. Returns as those. */
int trn_plot_preds(const struct trn_batch *b, const float *preds, size_t n_preds,
                   const struct trn_plot_names *names, const char *path, char *err, size_t err_cap);

/*
 * results.png as ultralytics' plot_results: the results.csv at csv_path (ultralytics' header and
 * columns, spaces around fields allowed; column 0 the epoch) drawn as a 2 x 5 grid of panels,
 * 2400 x 1200 pixels (12 x 6 inches at 200 dpi), in the order train/box_loss, train/obj_loss,
 * train/cls_loss, metrics/precision, metrics/recall, val/box_loss, val/obj_loss, val/cls_loss,
 * metrics/mAP_0.5, metrics/mAP_0.5:0.95 (csv columns 1 2 3 4 5 8 9 10 6 7), each the series
 * against the epoch as a line with '.' markers and its gaussian_filter1d(sigma 3, mode
 * 'reflect') smoothing dotted, titled with the column name; the legend in the second panel.
 * Written as PNG to png_path. err: out, one line naming the file on error (may be NULL).
 * Returns 0, -EINVAL (NULL path; a csv with fewer than 11 columns, a row with another field
 * count or a field that is not a number, no rows), -ENOMEM, -EIO (cairo or a read error) or
 * -errno opening the csv. Thread-safe as the other functions here.
 */
int trn_plot_results(const char *csv_path, const char *png_path, char *err, size_t err_cap);

/* ---------------------------------------------------------------------------------------- */
/* Validation curves and the confusion matrix (val.py with plots=True; utils/metrics.py v7.0)  */

#define TRN_PLOT_CURVE_W 2250 /* PR / F1 / P / R curves: figsize (9, 6) at dpi 250, pixels */
#define TRN_PLOT_CURVE_H 1500
#define TRN_PLOT_CM_W    3000 /* confusion_matrix.png: figsize (12, 9) at dpi 250, pixels */
#define TRN_PLOT_CM_H    2250

/* Which curve: PR_curve.png (plot_pr_curve) or F1_ / P_ / R_curve.png (plot_mc_curve). */
enum trn_plot_curve {
    TRN_PLOT_CURVE_PR = 0, /* precision vs recall at IoU 0.5 (trn_ap_result.curve_pr) */
    TRN_PLOT_CURVE_F1 = 1, /* F1 vs confidence (curve_f1) */
    TRN_PLOT_CURVE_P = 2,  /* precision vs confidence (curve_p) */
    TRN_PLOT_CURVE_R = 3,  /* recall vs confidence (curve_r) */
};

/* A pixel rectangle of a rendered plot. For a curve: the data area, value (0, 0) at (x0, y1) and
 * (1, 1) at (x1, y0). For the confusion matrix: the heatmap, (nc + 1) square cells, row k
 * (predicted class k, nc = background) from the top, column k (true class k) from the left. */
struct trn_plot_box {
    double x0, y0; /* top-left corner, pixels */
    double x1, y1; /* bottom-right corner, pixels */
};

/*
 * Draw one curve of ap (as trn_ap_per_class fills it; n_cls >= 1) as ultralytics does, into a
 * new TRN_PLOT_CURVE_W x TRN_PLOT_CURVE_H RGB8 image: axes 0..1, one thin line per class in
 * matplotlib's colour cycle with a legend entry ("name 0.xyz" with its AP@0.5 for PR, "name"
 * otherwise) when n_cls < 21, else grey lines without entries; the class mean as a thick blue
 * (#0000FF) line: for PR the mean over classes with detections, labelled "all classes %.3f
 * mAP@0.5" (ap->map50); for F1 / P / R the mean smoothed by trn_np_smooth(.., 0.05), labelled
 * "all classes %.2f at %.3f" (its maximum and the first confidence reaching it). Legend right of
 * the axes; title and axis labels as ultralytics'. Font: cairo's sans-serif, not DejaVu.
 * names: class names (NULL or n = 0: numbers). rgb: out, malloc'd, caller frees; w, h: out;
 * axes: out, the data area (may be NULL). Returns 0, -EINVAL (NULL ap / out pointer, n_cls < 1,
 * an unknown curve), -ENOMEM, -EIO (cairo failed).
 */
int trn_plot_curve_render(const struct trn_ap_result *ap, enum trn_plot_curve which,
                          const struct trn_plot_names *names, uint8_t **rgb, int *w, int *h,
                          struct trn_plot_box *axes);

/* trn_plot_curve_render's picture written as PNG to png_path. err: out, one line naming the file
 * on error (may be NULL). Returns as trn_plot_curve_render, or -EIO when the PNG cannot be
 * written. */
int trn_plot_curve(const struct trn_ap_result *ap, enum trn_plot_curve which,
                   const struct trn_plot_names *names, const char *png_path, char *err,
                   size_t err_cap);

/*
 * ConfusionMatrix.plot(normalize=True) into a new TRN_PLOT_CM_W x TRN_PLOT_CM_H RGB8 image:
 * matrix ((nc + 1)^2 counts, row-major [pred][true] as trn_confusion_matrix) divided by its
 * column sums + 1e-9 (columns are the true classes), values < 0.005 left white and unprinted,
 * the rest coloured with matplotlib's 'Blues' map (white to dark blue) from 0 to the largest
 * value, printed "%.2f" when nc < 30 (dark text on light cells, white on dark, as seaborn);
 * tick labels are the class names plus "background" when names has exactly nc names (and
 * nc < 99), else numbers; x axis "True", y axis "Predicted"; a colour bar on the right.
 * rgb: out, malloc'd, caller frees; w, h: out; cells: out, the heatmap (may be NULL).
 * Returns 0, -EINVAL (NULL matrix / out pointer, nc < 1), -ENOMEM, -EIO (cairo failed).
 */
int trn_plot_confusion_render(const double *matrix, int nc, const struct trn_plot_names *names,
                              uint8_t **rgb, int *w, int *h, struct trn_plot_box *cells);

/* trn_plot_confusion_render's picture written as PNG to png_path. err as trn_plot_curve. */
int trn_plot_confusion(const double *matrix, int nc, const struct trn_plot_names *names,
                       const char *png_path, char *err, size_t err_cap);

/*
 * What val.py writes with plots=True, into the existing directory dir: PR_curve.png,
 * F1_curve.png, P_curve.png and R_curve.png when ap->n_cls > 0 (ultralytics skips ap_per_class,
 * and so the curves, when no detection is correct), and confusion_matrix.png when matrix is not
 * NULL. written: out, pictures written (may be NULL). Returns 0 or the first error of the
 * functions above (err names the file).
 */
int trn_plot_val(const struct trn_ap_result *ap, const double *matrix, int nc,
                 const struct trn_plot_names *names, const char *dir, int *written, char *err,
                 size_t err_cap);

/* ---------------------------------------------------------------------------------------- */
/* The training set's labels (train.py's plot_labels, before the first epoch)                 */

/*
 * labels.jpg into a new 1600 x 1600 RGB8 image (figsize 8 x 8 at dpi 200): a 2 x 2 grid of the
 * instances per class as bars in the class colours (x ticks the names, rotated, when there are
 * 1..29 of them, else "classes"), the first 1000 boxes outlined in their class colours centred
 * on a square, and the bivariate histograms (50 x 50 bins, seaborn's pmax 0.9 colour scale over
 * light_palette(C0), empty bins blank) of the box centres (x, y) and sizes (width, height).
 * labels: n rows (class, cx, cy, w, h) normalised, as the dataset holds them. names may be NULL.
 * rgb: out, malloc'd, caller frees; w, h: out. Returns 0, -EINVAL, -ENOMEM or -EIO (cairo).
 */
int trn_plot_labels_render(const float *labels, size_t n, const struct trn_plot_names *names,
                           uint8_t **rgb, int *w, int *h);

/*
 * labels_correlogram.jpg into a new 2000 x 2000 RGB8 image: seaborn's pairplot(corner=True,
 * kind='hist') of x, y, width, height: 50-bin histograms on the diagonal, bivariate histograms
 * (numpy's 'auto' bins, pmax 0.9) below it. Returns as trn_plot_labels_render.
 */
int trn_plot_correlogram_render(const float *labels, size_t n, uint8_t **rgb, int *w, int *h);

/* Both pictures written as JPEG (TRN_PLOT_JPEG_QUALITY) into the existing directory dir as
 * labels_correlogram.jpg and labels.jpg. err: one line naming the file on error. Returns 0 or the
 * first error of the functions above or of trn_plot_jpeg_write. */
int trn_plot_labels(const float *labels, size_t n, const struct trn_plot_names *names,
                    const char *dir, char *err, size_t err_cap);

/*
 * evolve.png as train.py's plot_evolve: for each evolved hyperparameter k (n_keys, names), the
 * generations' values (values: n_rows x n_keys, row-major) against their fitness (n_rows) as a
 * scatter coloured by the log of its 20-bin 2-D histogram count (viridis, alpha 0.8), the best
 * generation marked '+' and named in the title ("k = value", %.3g); 5 panels per row, at least
 * 6 rows, 2000 px wide (figsize (10, 12) at dpi 200 for up to 30 keys); y ticks on the first
 * column. rgb: out, malloc'd. Returns 0, -EINVAL (n_keys outside 1..60, n_rows < 1, NULL),
 * -ENOMEM or -EIO.
 */
int trn_plot_evolve_render(const char *const *names, int n_keys, const double *values,
                           const double *fitness, int n_rows, uint8_t **rgb, int *w, int *h);

/* trn_plot_evolve_render's picture written as PNG to png_path; err names the file. */
int trn_plot_evolve(const char *const *names, int n_keys, const double *values,
                    const double *fitness, int n_rows, const char *png_path, char *err,
                    size_t err_cap);

/* Frees cairo's and fontconfig's process-wide caches (font maps, glyph caches) so that a
 * program that drew text exits clean under leak checkers. Call once, at exit, after all
 * drawing. */
void trn_plots_cleanup(void);

#ifdef __cplusplus
}
#endif

#endif /* TRN_PLOTS_H */
