/* train_batchK.jpg / val_batchK_*.jpg: plot_images (plots.h), and the JPEG writer. */
#include "priv/draw.h"

/* Copy image i of b (any pixel type: trn_batch_pixel) into the HWC canvas at (x, y). */
static void paste(const struct trn_batch *b, int i, uint8_t *canvas, int cw, int x, int y)
{
    for (int r = 0; r < b->height; r++) {
        uint8_t *d = canvas + ((size_t)(y + r) * (size_t)cw + (size_t)x) * 3;
        for (int c = 0; c < b->width; c++)
            for (int ch = 0; ch < 3; ch++)
                d[3 * c + ch] = trn_batch_pixel(b, b->images, i, ch, r, c);
    }
}

/*
 * plot_images on b's pixels with boxes from rows: cols 6 (labels: image, class, normalised xywh)
 * or 7 (predictions: image, class, xywh in batch pixels, conf; only conf > 0.25 drawn, labelled
 * "name conf" with one decimal, as plot_images does for output_to_target rows).
 */
static int render(const struct trn_batch *b, const float *rows, size_t n_rows, int cols,
                  const struct trn_plot_names *names, uint8_t **rgb, int *w_out, int *h_out)
{
    if (!b || !rgb || !w_out || !h_out || b->n < 1 || b->height < 1 || b->width < 1 ||
        b->height > 16383 || b->width > 16383 || !b->images || (n_rows && !rows))
        return -EINVAL;
    *rgb = NULL;
    const int bs = b->n < TRN_PLOT_MAX_SUBPLOTS ? b->n : TRN_PLOT_MAX_SUBPLOTS;
    const int ns = (int)ceil(sqrt((double)bs));
    int h = b->height, w = b->width;
    const int mx = h > w ? h : w;
    const double scale = (double)TRN_PLOT_MAX_SIZE / ns / mx;

    /* The unscaled grid, white where no image goes. */
    const int cw0 = ns * w, ch0 = ns * h;
    uint8_t *grid = malloc((size_t)cw0 * (size_t)ch0 * 3);
    if (!grid) return -ENOMEM;
    memset(grid, 255, (size_t)cw0 * (size_t)ch0 * 3);
    for (int i = 0; i < bs; i++)
        paste(b, i, grid, cw0, w * (i / ns), h * (i % ns));
    if (scale < 1) {
        h = (int)ceil(scale * h);
        w = (int)ceil(scale * w);
        uint8_t *small = malloc((size_t)(ns * w) * (size_t)(ns * h) * 3);
        if (!small) {
            free(grid);
            return -ENOMEM;
        }
        const int rc = trn_aug_resize_linear(grid, cw0, ch0, small, ns * w, ns * h);
        free(grid);
        if (rc < 0) {
            free(small);
            return rc;
        }
        grid = small;
    }
    const int W = ns * w, H = ns * h;

    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(sf);
        free(grid);
        return -ENOMEM;
    }
    cairo_surface_flush(sf);
    uint8_t *data = cairo_image_surface_get_data(sf);
    const int stride = cairo_image_surface_get_stride(sf);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const uint8_t *p = grid + ((size_t)y * (size_t)W + (size_t)x) * 3;
            const uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
            memcpy(data + (size_t)y * (size_t)stride + 4 * (size_t)x, &v, 4);
        }
    cairo_surface_mark_dirty(sf);

    int rc = 0;
    cairo_t *cr = cairo_create(sf);
    const int fs = (int)((h + w) * ns * 0.01);
    int lw = (int)nearbyint(fs / 10.0);
    if (lw == 0) lw = (int)fmax(nearbyint((W + H) / 2.0 * 0.003), 2);
    cairo_set_antialias(cr, CAIRO_ANTIALIAS_NONE);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, fs > 1 ? fs : 1);
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    for (int i = 0; i < bs && rc == 0; i++) {
        const int x = w * (i / ns), y = h * (i % ns);
        cairo_set_source_rgb(cr, 1, 1, 1);
        plt_outline_rect(cr, x, y, x + w, y + h, 2);
        if (b->info) {
            char text[48];
            snprintf(text, sizeof text, "record %llu", (unsigned long long)b->info[i].index);
            cairo_set_source_rgb(cr, 220 / 255.0, 220 / 255.0, 220 / 255.0);
            cairo_move_to(cr, x + 5, y + 5 + fe.ascent);
            cairo_show_text(cr, text);
        }
        for (size_t t = 0; t < n_rows; t++) {
            const float *r = rows + (size_t)cols * t;
            if (!(r[0] >= 0 && r[0] < (float)b->n)) {
                rc = -EINVAL;
                break;
            }
            if ((int)r[0] != i) continue;
            if (cols == 7 && !(r[6] > 0.25f)) continue;
            const int cls = (int)r[1];
            /* Normalised xywh (the loader's targets are always <= 1.01) to cell pixels;
             * prediction pixels are scaled with the grid, as plot_images does. */
            const double sx = cols == 6 ? w : scale < 1 ? scale : 1.0;
            const double sy = cols == 6 ? h : scale < 1 ? scale : 1.0;
            const double box[4] = {
                (r[2] - r[4] / 2.0) * sx + x,
                (r[3] - r[5] / 2.0) * sy + y,
                (r[2] + r[4] / 2.0) * sx + x,
                (r[3] + r[5] / 2.0) * sy + y,
            };
            char num[16], text[160];
            const char *label = NULL;
            if (names && cls >= 0 && cls < names->n) label = names->names[cls];
            if (!label) {
                snprintf(num, sizeof num, "%d", cls);
                label = num;
            }
            if (cols == 7) {
                snprintf(text, sizeof text, "%s %.1f", label, (double)r[6]);
                label = text;
            }
            plt_box_label(cr, box, label, trn_plot_color(cls), lw, &fe);
        }
    }
    if (rc == 0 && cairo_status(cr) != CAIRO_STATUS_SUCCESS) rc = -EIO;
    cairo_destroy(cr);
    cairo_surface_flush(sf);
    for (int y = 0; y < H && rc == 0; y++)
        for (int x = 0; x < W; x++) {
            uint32_t v;
            memcpy(&v, data + (size_t)y * (size_t)stride + 4 * (size_t)x, 4);
            uint8_t *p = grid + ((size_t)y * (size_t)W + (size_t)x) * 3;
            p[0] = (uint8_t)(v >> 16);
            p[1] = (uint8_t)(v >> 8);
            p[2] = (uint8_t)v;
        }
    cairo_surface_destroy(sf);
    if (rc < 0) {
        free(grid);
        return rc;
    }
    *rgb = grid;
    *w_out = W;
    *h_out = H;
    return 0;
}

int trn_plot_batch_render(const struct trn_batch *b, const struct trn_plot_names *names,
                          uint8_t **rgb, int *w_out, int *h_out)
{
    return render(b, b ? b->targets : NULL, b ? b->n_targets : 0, 6, names, rgb, w_out, h_out);
}

int trn_plot_preds_render(const struct trn_batch *b, const float *preds, size_t n_preds,
                          const struct trn_plot_names *names, uint8_t **rgb, int *w_out, int *h_out)
{
    return render(b, preds, n_preds, 7, names, rgb, w_out, h_out);
}

int trn_plot_jpeg_write(const uint8_t *rgb, int w, int h, int quality, const char *path, char *err,
                        size_t err_cap)
{
    char tmp[256];
    if (!err || err_cap == 0) err = tmp, err_cap = sizeof tmp;
    err[0] = '\0';
    if (!rgb || w < 1 || h < 1 || quality < 1 || quality > 100 || !path) {
        snprintf(err, err_cap, "%s: bad image or quality", path ? path : "(null)");
        return -EINVAL;
    }
    tjhandle tj = tjInitCompress();
    if (!tj) {
        snprintf(err, err_cap, "%s: out of memory", path);
        return -ENOMEM;
    }
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    int rc = 0;
    if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &n, TJSAMP_420, quality, 0) != 0) {
        snprintf(err, err_cap, "%s: TurboJPEG: %s", path, tjGetErrorStr2(tj));
        rc = -EIO;
    }
    tjDestroy(tj);
    /* all or nothing: a full disk or a killed run leaves the last picture, not half of one */
    if (rc == 0) rc = trn_write_file(path, jpg, n, false, err, err_cap);
    tjFree(jpg);
    return rc;
}

int trn_plot_batch(const struct trn_batch *b, const struct trn_plot_names *names, const char *path,
                   char *err, size_t err_cap)
{
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    int rc = trn_plot_batch_render(b, names, &rgb, &w, &h);
    if (rc < 0) {
        if (err && err_cap)
            snprintf(err, err_cap, "%s: drawing the batch: %s", path ? path : "(null)",
                     rc == -ENOMEM ? "out of memory" : "bad batch or cairo error");
        return rc;
    }
    rc = trn_plot_jpeg_write(rgb, w, h, TRN_PLOT_JPEG_QUALITY, path, err, err_cap);
    free(rgb);
    return rc;
}

int trn_plot_preds(const struct trn_batch *b, const float *preds, size_t n_preds,
                   const struct trn_plot_names *names, const char *path, char *err, size_t err_cap)
{
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    int rc = trn_plot_preds_render(b, preds, n_preds, names, &rgb, &w, &h);
    if (rc < 0) {
        if (err && err_cap)
            snprintf(err, err_cap, "%s: drawing the predictions: %s", path ? path : "(null)",
                     rc == -ENOMEM ? "out of memory" : "bad batch or cairo error");
        return rc;
    }
    rc = trn_plot_jpeg_write(rgb, w, h, TRN_PLOT_JPEG_QUALITY, path, err, err_cap);
    free(rgb);
    return rc;
}
