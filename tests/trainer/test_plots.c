/*
 * plots: plot_images' grid layout, scaling and box drawing, checked on the rendered pixels
 * (before JPEG), and the class names read from dataset metadata.
 */
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plots.h"
#include "tap.h"

static uint32_t px(const uint8_t *rgb, int w, int x, int y)
{
    const uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
    return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static void test_boxes(void)
{
    enum { N = 4, S = 64 };
    static uint8_t img[N * 3 * S * S];
    for (int i = 0; i < N; i++)
        memset(img + (size_t)i * 3 * S * S, 40 + 40 * i, 3 * S * S); /* grey per image */
    /* image 0: class 3 box x, y in [16, 48]; image 1: class 0 box x in [8, 40], y in [16, 48] */
    const float targets[2][6] = { { 0, 3, 0.5f, 0.5f, 0.5f, 0.5f },
                                  { 1, 0, 0.375f, 0.5f, 0.5f, 0.5f } };
    struct trn_batch_image info[N];
    memset(info, 0, sizeof info);
    const struct trn_batch b = { .n = N,
                                 .height = S,
                                 .width = S,
                                 .pixels = TRN_PIXELS_U8,
                                 .images = img,
                                 .image_bytes = sizeof img,
                                 .targets = &targets[0][0],
                                 .n_targets = 2,
                                 .info = info };
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    int rc = trn_plot_batch_render(&b, NULL, &rgb, &w, &h);
    is_int(rc, 0, "render a 4-image batch");
    if (rc) return;
    is_int(w, 2 * S, "2x2 grid width (no scaling below 1920)");
    is_int(h, 2 * S, "2x2 grid height");
    const uint32_t c3 = trn_plot_color(3), c0 = trn_plot_color(0);
    is_int(c3, 0xFFB21D, "class 3 colour from ultralytics' palette");
    /* Line width: fs = int(128 * 2 * 0.01) = 2, round(0.2) = 0 -> max(round(128*.003), 2) = 2. */
    ok(px(rgb, w, 16, 32) == c3 && px(rgb, w, 17, 32) == c3, "left edge of image 0's box: %06x",
       px(rgb, w, 16, 32));
    ok(px(rgb, w, 48, 32) == c3 && px(rgb, w, 47, 32) == c3, "right edge (inward, 2 px): %06x",
       px(rgb, w, 48, 32));
    ok(px(rgb, w, 32, 48) == c3, "bottom edge: %06x", px(rgb, w, 32, 48));
    ok(px(rgb, w, 18, 32) == 0x282828 && px(rgb, w, 32, 32) == 0x282828,
       "inside the box the image is untouched: %06x", px(rgb, w, 32, 32));
    ok(px(rgb, w, 15, 32) == 0x282828 && px(rgb, w, 49, 32) == 0x282828,
       "outside the box too: %06x %06x", px(rgb, w, 15, 32), px(rgb, w, 49, 32));
    /* Column-major grid: image 1 sits below image 0, image 2 to its right. */
    ok(px(rgb, w, 8, S + 32) == c0 && px(rgb, w, 40, S + 32) == c0,
       "image 1's box is in the cell below (column-major, as plot_images)");
    ok(px(rgb, w, 20, S + 32) == 0x505050, "image 1's pixels below image 0");
    ok(px(rgb, w, S + 32, 32) == 0x787878, "image 2 to the right of image 0");
    ok(px(rgb, w, S + 32, S + 32) == 0xA0A0A0, "image 3 bottom right");
    ok(px(rgb, w, S, 32) == 0xFFFFFF && px(rgb, w, 0, 32) == 0xFFFFFF, "white cell frames");
    free(rgb);

    const float bad[6] = { 7, 0, 0.5f, 0.5f, 0.1f, 0.1f };
    struct trn_batch b2 = b;
    b2.targets = bad;
    b2.n_targets = 1;
    is_int(trn_plot_batch_render(&b2, NULL, &rgb, &w, &h), -22,
           "a target naming image 7 of a 4-image batch is refused");
}

static void test_scaling(void)
{
    /* 16 float images of 640: ns = 4, scale = 0.75, cells 480, grid 1920. */
    enum { N = 17, S = 640 };
    float *img = malloc((size_t)N * 3 * S * S * sizeof *img);
    if (!ok(img != NULL, "alloc")) return;
    for (size_t i = 0; i < (size_t)N * 3 * S * S; i++)
        img[i] = 0.5f;
    const struct trn_batch b = { .n = N,
                                 .height = S,
                                 .width = S,
                                 .pixels = TRN_PIXELS_F32,
                                 .images = img,
                                 .image_bytes = (size_t)N * 3 * S * S * 4 };
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    const int rc = trn_plot_batch_render(&b, NULL, &rgb, &w, &h);
    ok(rc == 0 && w == 1920 && h == 1920, "17 images of 640: 16 drawn, grid 1920x1920 (%dx%d)", w,
       h);
    if (rc == 0)
        ok(px(rgb, w, 100, 100) == 0x808080, "float pixels * 255: %06x", px(rgb, w, 100, 100));
    free(rgb);
    /* 2 images of 1000x600: ns = 2, scale 0.96: cells ceil(960) x ceil(576). */
    const struct trn_batch b3 = {
        .n = 2, .height = 600, .width = 1000, .pixels = TRN_PIXELS_F32, .images = img
    };
    const int rc3 = trn_plot_batch_render(&b3, NULL, &rgb, &w, &h);
    ok(rc3 == 0 && w == 1920 && h == 1152, "2 images of 1000x600: grid 1920x1152 (%dx%d)", w, h);
    free(rgb);
    free(img);
}

static void test_names(void)
{
    struct trn_plot_names n;
    const char *list = "encoding: ffr-det-1\nnc: 3\nnames:\n  - \"person\"\n  - car\n  - dog\n";
    ok(trn_plot_names_parse(list, strlen(list), &n) == 0 && n.n == 3 &&
           !strcmp(n.names[0], "person") && !strcmp(n.names[2], "dog"),
       "names as a list");
    trn_plot_names_free(&n);
    const char *map = "names: {0: person, 5: \"bus\\x01\"}\n";
    ok(trn_plot_names_parse(map, strlen(map), &n) == 0 && n.n == 6 && !n.names[1] &&
           !strcmp(n.names[5], "bus?"),
       "names as a mapping; a control byte becomes '?'");
    trn_plot_names_free(&n);
    const char *bad = "names: [a, b\n";
    ok(trn_plot_names_parse(bad, strlen(bad), &n) == 0 && n.n == 0,
       "metadata that is not YAML gives no names");
    const char utf[] = "names: [\"caf\xc3\xa9\", x]\n";
    ok(trn_plot_names_parse(utf, strlen(utf), &n) == 0 && n.n == 2 &&
           !strcmp(n.names[0], "caf\xc3\xa9"),
       "valid UTF-8 names are kept");
    trn_plot_names_free(&n);
}

/* Pixels in [x0, x1) x [y0, y1) equal to c (c = UINT32_MAX: not white); rows holding one. */
static int count_px(const uint8_t *rgb, int w, int x0, int y0, int x1, int y1, uint32_t c,
                    int *rows)
{
    int n = 0;
    *rows = 0;
    for (int y = y0; y < y1; y++) {
        int in_row = 0;
        for (int x = x0; x < x1; x++) {
            const uint32_t v = px(rgb, w, x, y);
            in_row += c == UINT32_MAX ? v != 0xFFFFFF : v == c;
        }
        n += in_row;
        *rows += in_row > 0;
    }
    return n;
}

/* labels.jpg / labels_correlogram.jpg: class bars in class colours and to scale, boxes drawn,
 * histograms where the labels are, the correlogram's upper triangle empty. */
static void test_labels(void)
{
    const float rows[6][5] = { { 0, 0.2f, 0.2f, 0.1f, 0.1f }, { 0, 0.3f, 0.2f, 0.1f, 0.2f },
                               { 0, 0.4f, 0.3f, 0.2f, 0.1f }, { 2, 0.6f, 0.7f, 0.3f, 0.3f },
                               { 5, 0.5f, 0.5f, 0.5f, 0.5f }, { 5, 0.8f, 0.8f, 0.2f, 0.2f } };
    uint8_t *rgb = NULL;
    int w = 0, h = 0, r0 = 0, r2 = 0, r1 = 0, rn = 0;
    int rc = trn_plot_labels_render(&rows[0][0], 6, NULL, &rgb, &w, &h);
    ok(rc == 0 && w == 1600 && h == 1600, "labels.jpg renders 1600 x 1600 (8 in at dpi 200)");
    if (rc) return;
    count_px(rgb, w, 0, 0, 800, 800, trn_plot_color(0), &r0);
    count_px(rgb, w, 0, 0, 800, 800, trn_plot_color(2), &r2);
    const int n1 = count_px(rgb, w, 0, 0, 800, 800, trn_plot_color(1), &r1);
    ok(r2 > 50 && fabs((double)r0 / r2 - 3.0) < 0.05 && n1 == 0,
       "class bars in class colours, to scale: class 0 %d px tall, class 2 %d (3:1), class 1 "
       "absent",
       r0, r2);
    const int boxes = count_px(rgb, w, 800, 0, 1600, 800, UINT32_MAX, &rn);
    ok(boxes > 500 && px(rgb, w, 1200, 400) == 0xFFFFFF,
       "the boxes are outlined around the panel's centre (%d px), their inside blank", boxes);
    const int xy = count_px(rgb, w, 150, 830, 500, 1450, UINT32_MAX, &rn);
    const int wh = count_px(rgb, w, 950, 830, 1350, 1450, UINT32_MAX, &rn);
    ok(xy > 150 && wh > 150, "x-y and width-height histograms drawn (%d, %d px)", xy, wh);
    free(rgb);
    rc = trn_plot_correlogram_render(&rows[0][0], 6, &rgb, &w, &h);
    ok(rc == 0 && w == 2000 && h == 2000, "labels_correlogram.jpg renders 2000 x 2000");
    if (rc) return;
    const int upper = count_px(rgb, w, 1000, 0, 2000, 480, UINT32_MAX, &rn);
    const int diag = count_px(rgb, w, 0, 0, 500, 480, UINT32_MAX, &rn);
    const int lower = count_px(rgb, w, 0, 1500, 1500, 2000, UINT32_MAX, &rn);
    ok(upper == 0 && diag > 1000 && lower > 1000,
       "corner pairplot: upper triangle empty, diagonal and lower cells drawn (%d %d %d)", upper,
       diag, lower);
    free(rgb);
    ok(trn_plot_labels_render(NULL, 3, NULL, &rgb, &w, &h) == -EINVAL, "NULL labels refused");
}

int main(void)
{
    test_boxes();
    test_scaling();
    test_names();
    test_labels();
    cairo_debug_reset_static_data();
    FcFini();
    return tap_done();
}
