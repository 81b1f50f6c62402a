/*
 * augment.h against reference outputs of the recipe's augmentations, computed with OpenCV and
 * numpy by tests/trainer/make_augment_refs.py (data_augment/refs.bin): warpAffine,
 * warpPerspective, the random_perspective matrix, load_mosaic + random_perspective (boxes and
 * segments), augment_hsv, mixup, letterbox (resize and padding), the rect batch shapes, and whole
 * training and validation samples.
 *
 * Pixels must agree within +-1 per channel value (the test prints the largest difference and
 * how many values differ), boxes within 1e-4 after normalisation, classes exactly.
 * Also copy_paste and its polygon fill against data_augment/copypaste.bin
 * (make_copypaste_refs.py: cv2.drawContours and ultralytics' copy_paste), bit for bit.
 * Usage: test_augment PATH/refs.bin [PATH/copypaste.bin]
 */
#include "augment.h"
#include "kern.h"
#include "tap.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reference file --------------------------------------------------------------------- */

enum { T_U8 = 1, T_F32 = 2, T_F64 = 3, T_I32 = 4 };

struct entry {
    char name[64];
    int type;
    int ndim;
    uint32_t dims[4];
    size_t count;
    const void *data;
};

static struct entry *g_entries;
static int g_n_entries;
static uint8_t *g_file;

static size_t type_size(int t)
{
    return t == T_U8 ? 1 : t == T_F64 ? 8 : 4;
}

static int load_refs(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    g_file = malloc((size_t)len);
    if (!g_file || fread(g_file, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        return -1;
    }
    fclose(f);
    if (len < 12 || memcmp(g_file, "AUGREF01", 8)) return -1;
    uint32_t n;
    memcpy(&n, g_file + 8, 4);
    g_entries = calloc(n, sizeof *g_entries);
    if (!g_entries) return -1;
    size_t off = 12;
    for (uint32_t i = 0; i < n; i++) {
        struct entry *e = &g_entries[i];
        uint16_t nl;
        if (off + 2 > (size_t)len) return -1;
        memcpy(&nl, g_file + off, 2);
        off += 2;
        if (nl >= sizeof e->name || off + nl + 2 > (size_t)len) return -1;
        memcpy(e->name, g_file + off, nl);
        off += nl;
        e->type = g_file[off];
        e->ndim = g_file[off + 1];
        off += 2;
        if (e->ndim > 4 || off + 4 * (size_t)e->ndim > (size_t)len) return -1;
        e->count = 1;
        for (int d = 0; d < e->ndim; d++) {
            memcpy(&e->dims[d], g_file + off, 4);
            off += 4;
            e->count *= e->dims[d];
        }
        const size_t bytes = e->count * type_size(e->type);
        if (off + bytes > (size_t)len) return -1;
        e->data = g_file + off;
        off += bytes;
    }
    g_n_entries = (int)n;
    return 0;
}

static const struct entry *find(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const struct entry *find(const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = 0; i < g_n_entries; i++)
        if (!strcmp(g_entries[i].name, name)) return &g_entries[i];
    return NULL;
}

/* The value of an entry that must exist (missing ones are a broken reference file). */
static const struct entry *need(const struct entry *e, const char *what)
{
    if (!e) {
        printf("Bail out! reference entry missing: %s\n", what);
        exit(99);
    }
    return e;
}
#define NEED(...) need(find(__VA_ARGS__), #__VA_ARGS__)

static int32_t i32(const struct entry *e, size_t i)
{
    int32_t v;
    memcpy(&v, (const uint8_t *)e->data + 4 * i, 4);
    return v;
}

static double f64(const struct entry *e, size_t i)
{
    double v;
    memcpy(&v, (const uint8_t *)e->data + 8 * i, 8);
    return v;
}

static float f32(const struct entry *e, size_t i)
{
    float v;
    memcpy(&v, (const uint8_t *)e->data + 4 * i, 4);
    return v;
}

/* ---- inputs (mirror of make_augment_refs.py's gen_image) -------------------------------- */

static uint8_t *gen_image(int w, int h, int seed)
{
    uint8_t *img = malloc((size_t)w * (size_t)h * 3);
    const uint32_t s = (uint32_t)((uint64_t)seed * 2654435761u);
    for (uint32_t y = 0; y < (uint32_t)h; y++)
        for (uint32_t x = 0; x < (uint32_t)w; x++)
            for (uint32_t c = 0; c < 3; c++) {
                uint32_t v = (x * 73856093u) ^ (y * 19349663u) ^ (c * 83492791u) ^ s;
                v ^= v >> 13;
                v *= 0x5BD1E995u;
                v ^= v >> 15;
                const uint32_t noise = v & 255;
                const uint32_t grad = (x * 255u / (uint32_t)(w > 1 ? w - 1 : 1) +
                                       y * 128u / (uint32_t)(h > 1 ? h - 1 : 1) + c * 60u) %
                                      256u;
                const bool block = ((x / 8 + y / 8 + (uint32_t)seed) % 3) == 0;
                img[((size_t)y * (size_t)w + x) * 3 + c] = (uint8_t)(block ? noise : grad);
            }
    return img;
}

struct tile_buf {
    struct trn_aug_tile t;
    uint8_t *pixels;
    float *labels;
    uint32_t *seg_n;
    float *seg_xy;
};

static void load_tile(struct tile_buf *b, const char *prefix)
{
    memset(b, 0, sizeof *b);
    const struct entry *img = NEED("%s/img", prefix), *lab = NEED("%s/labels", prefix);
    const struct entry *sn = find("%s/seg_n", prefix), *sxy = find("%s/seg_xy", prefix);
    b->t.w = i32(img, 1);
    b->t.h = i32(img, 2);
    b->pixels = gen_image(b->t.w, b->t.h, i32(img, 0));
    b->t.pixels = b->pixels;
    b->t.n_labels = (int)(lab->count / 5);
    b->labels = malloc(sizeof(float) * (lab->count + 1));
    for (size_t i = 0; i < lab->count; i++)
        b->labels[i] = f32(lab, i);
    b->t.labels = b->labels;
    if (sn) {
        b->seg_n = malloc(sizeof(uint32_t) * (sn->count + 1));
        for (size_t i = 0; i < sn->count; i++)
            b->seg_n[i] = (uint32_t)i32(sn, i);
        b->seg_xy = malloc(sizeof(float) * (sxy->count + 1));
        for (size_t i = 0; i < sxy->count; i++)
            b->seg_xy[i] = f32(sxy, i);
        b->t.seg_n = b->seg_n;
        b->t.seg_xy = b->seg_xy;
    }
}

static void free_tile(struct tile_buf *b)
{
    free(b->pixels);
    free(b->labels);
    free(b->seg_n);
    free(b->seg_xy);
}

static void get_draws(const struct entry *e, bool persp, struct trn_aug_persp_draws *d)
{
    d->persp_x = f64(e, 0);
    d->persp_y = f64(e, 1);
    d->angle = f64(e, 2);
    d->scale = f64(e, 3);
    d->shear_x = f64(e, 4);
    d->shear_y = f64(e, 5);
    d->translate_x = f64(e, 6);
    d->translate_y = f64(e, 7);
    d->perspective = persp;
}

/* ---- comparisons ------------------------------------------------------------------------ */

static int g_worst[16]; /* largest pixel difference per group, for the summary */
static const char *g_group_names[16];

static int pix_cmp(const uint8_t *got, const struct entry *want, size_t n, int group,
                   const char *what)
{
    if (want->count != n) {
        ok(0, "%s: size %zu, reference %zu", what, n, want->count);
        return 0;
    }
    const uint8_t *w = want->data;
    int maxd = 0;
    size_t ndiff = 0, first = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        const int d = abs((int)got[i] - (int)w[i]);
        if (d) {
            ndiff++;
            if (first == (size_t)-1) first = i;
        }
        maxd = d > maxd ? d : maxd;
    }
    if (maxd > g_worst[group]) g_worst[group] = maxd;
    ok(maxd <= 1, "%s: max |diff| %d, %zu of %zu values differ", what, maxd, ndiff, n);
    if (maxd > 1)
        tap_diag("first difference at value %zu: got %d want %d", first, got[first], w[first]);
    return maxd;
}

/* Rows (class + 4 coordinates), coordinates compared after dividing by `norm`. */
static void rows_cmp(const float *got, int n, const struct entry *want, double norm,
                     const char *what)
{
    const int wn = (int)(want->count / 5);
    if (n != wn) {
        ok(0, "%s: %d rows, reference %d", what, n, wn);
        for (int i = 0; i < wn; i++)
            tap_diag("ref %g %g %g %g %g", f32(want, 5 * i), f32(want, 5 * i + 1),
                     f32(want, 5 * i + 2), f32(want, 5 * i + 3), f32(want, 5 * i + 4));
        for (int i = 0; i < n; i++)
            tap_diag("got %g %g %g %g %g", got[5 * i], got[5 * i + 1], got[5 * i + 2],
                     got[5 * i + 3], got[5 * i + 4]);
        return;
    }
    double maxd = 0;
    bool cls = true;
    for (int i = 0; i < n; i++) {
        cls = cls && got[5 * i] == f32(want, 5 * i);
        for (int k = 1; k < 5; k++) {
            const double d = fabs((double)got[5 * i + k] - f32(want, 5 * i + k)) / norm;
            maxd = d > maxd ? d : maxd;
        }
    }
    ok(cls && maxd <= 1e-4, "%s: %d rows, classes %s, max |diff| %.3g (normalised)", what, n,
       cls ? "equal" : "DIFFER", maxd);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_affine(void)
{
    const int n = i32(NEED("affine/count"), 0);
    for (int k = 0; k < n; k++) {
        const struct entry *src = NEED("affine/%d/src", k), *M = NEED("affine/%d/M", k);
        const int sw = i32(src, 1), sh = i32(src, 2), dw = i32(src, 3), dh = i32(src, 4);
        uint8_t *in = gen_image(sw, sh, i32(src, 0));
        uint8_t *out = malloc((size_t)dw * dh * 3);
        double m[6];
        for (int i = 0; i < 6; i++)
            m[i] = f64(M, (size_t)i);
        char what[64];
        snprintf(what, sizeof what, "warp_affine %d (%dx%d -> %dx%d)", k, sw, sh, dw, dh);
        is_int(trn_aug_warp_affine(in, sw, sh, m, out, dw, dh, 114), 0, "%s returns 0", what);
        pix_cmp(out, NEED("affine/%d/out", k), (size_t)dw * dh * 3, 0, what);
        free(in);
        free(out);
    }
    g_group_names[0] = "warp_affine";
}

static void test_persp(void)
{
    const int n = i32(NEED("persp/count"), 0);
    for (int k = 0; k < n; k++) {
        const struct entry *src = NEED("persp/%d/src", k), *M = NEED("persp/%d/M", k);
        const int sw = i32(src, 1), sh = i32(src, 2), dw = i32(src, 3), dh = i32(src, 4);
        uint8_t *in = gen_image(sw, sh, i32(src, 0));
        uint8_t *out = malloc((size_t)dw * dh * 3);
        double m[9];
        for (int i = 0; i < 9; i++)
            m[i] = f64(M, (size_t)i);
        char what[64];
        snprintf(what, sizeof what, "warp_perspective %d (%dx%d -> %dx%d)", k, sw, sh, dw, dh);
        is_int(trn_aug_warp_perspective(in, sw, sh, m, out, dw, dh, 114), 0, "%s returns 0", what);
        pix_cmp(out, NEED("persp/%d/out", k), (size_t)dw * dh * 3, 1, what);
        free(in);
        free(out);
    }
    g_group_names[1] = "warp_perspective";
}

static void test_matrix(void)
{
    const int n = i32(NEED("matrix/count"), 0);
    for (int k = 0; k < n; k++) {
        struct trn_aug_persp_draws d;
        get_draws(NEED("matrix/%d/draws", k), true, &d);
        const struct entry *want = NEED("matrix/%d/M", k);
        double M[9], maxd = 0;
        trn_aug_perspective_matrix(1280, 960, 640, 480, &d, M);
        for (int i = 0; i < 9; i++) {
            const double w = f64(want, (size_t)i);
            const double e = fabs(M[i] - w) / (fabs(w) > 1 ? fabs(w) : 1);
            maxd = e > maxd ? e : maxd;
        }
        ok(maxd < 1e-12, "perspective matrix %d: max relative diff %.3g", k, maxd);
    }
}

static void test_mosaic(void)
{
    const int n = i32(NEED("mosaic/count"), 0);
    for (int k = 0; k < n; k++) {
        const struct entry *cfg = NEED("mosaic/%d/cfg", k);
        const int s = i32(cfg, 0), xc = i32(cfg, 1), yc = i32(cfg, 2);
        const bool persp = i32(cfg, 4) != 0;
        struct tile_buf tb[4];
        struct trn_aug_tile tiles[4];
        int rows_cap = 0;
        size_t pts = 0;
        for (int t = 0; t < 4; t++) {
            char p[32];
            snprintf(p, sizeof p, "mosaic/%d/tile%d", k, t);
            load_tile(&tb[t], p);
            tiles[t] = tb[t].t;
            rows_cap += tiles[t].n_labels;
            for (int j = 0; tiles[t].seg_n && j < tiles[t].n_labels; j++)
                pts += tiles[t].seg_n[j];
        }
        uint8_t *canvas = malloc((size_t)4 * s * s * 3), *out = malloc((size_t)s * s * 3);
        float *rows = malloc(sizeof(float) * 5 * (size_t)(rows_cap + 1));
        uint32_t *seg_n = malloc(sizeof(uint32_t) * (size_t)(rows_cap + 1));
        float *seg_xy = malloc(sizeof(float) * 2 * (pts + 1));
        struct trn_aug_boxes b = {
            .rows = rows, .seg_n = seg_n, .seg_xy = seg_xy, .cap_rows = rows_cap, .cap_points = pts
        };
        char what[80];
        snprintf(what, sizeof what, "mosaic %d (%s, %s)", k, i32(cfg, 3) ? "segments" : "boxes",
                 persp ? "warpPerspective" : "warpAffine");
        const int rc = trn_aug_mosaic4(s, xc, yc, tiles, canvas, &b);
        is_int(rc, rows_cap, "%s: mosaic4 keeps every row before the warp", what);
        long long sum = 0;
        for (size_t i = 0; i < (size_t)4 * s * s * 3; i++)
            sum += canvas[i];
        is_int(sum & 0x7fffffff, i32(NEED("mosaic/%d/canvas_crc", k), 0),
               "%s: canvas pixel sum matches", what);
        struct trn_aug_persp_draws d;
        get_draws(NEED("mosaic/%d/draws", k), persp, &d);
        const int kept = trn_aug_random_perspective(canvas, 2 * s, 2 * s, out, s, s, &d, &b);
        ok(kept >= 0 && b.n == kept, "%s: random_perspective returns %d", what, kept);
        pix_cmp(out, NEED("mosaic/%d/out", k), (size_t)s * s * 3, 2, what);
        rows_cmp(rows, kept, NEED("mosaic/%d/labels", k), s, what);
        for (int t = 0; t < 4; t++)
            free_tile(&tb[t]);
        free(canvas);
        free(out);
        free(rows);
        free(seg_n);
        free(seg_xy);
    }
    g_group_names[2] = "mosaic+random_perspective";
}

static void test_hsv(void)
{
    const struct entry *src = NEED("hsv/src");
    const int n = i32(NEED("hsv/count"), 0);
    uint8_t *img = malloc(src->count);
    for (int k = 0; k < n; k++) {
        const struct entry *g = NEED("hsv/%d/gain", k);
        memcpy(img, src->data, src->count);
        struct trn_aug_hsv_draws d = { .apply = true, .gain = { f64(g, 0), f64(g, 1), f64(g, 2) } };
        trn_aug_hsv(img, (int)src->dims[1], (int)src->dims[0], &d);
        char what[80];
        snprintf(what, sizeof what, "hsv %d (gains %.3f %.3f %.3f)", k, d.gain[0], d.gain[1],
                 d.gain[2]);
        pix_cmp(img, NEED("hsv/%d/out", k), src->count, 3, what);
    }
    /* apply == false leaves the image alone (ultralytics skips the conversion) */
    memcpy(img, src->data, src->count);
    struct trn_aug_hsv_draws off = { .apply = false, .gain = { 2, 2, 2 } };
    trn_aug_hsv(img, (int)src->dims[1], (int)src->dims[0], &off);
    ok(!memcmp(img, src->data, src->count), "hsv with apply=false is a no-op");
    free(img);
    g_group_names[3] = "hsv";
}

static void test_mixup(void)
{
    uint8_t *a = gen_image(48, 40, 401), *b = gen_image(48, 40, 402);
    trn_aug_mixup(a, b, 48 * 40 * 3, f64(NEED("mixup/r"), 0));
    pix_cmp(a, NEED("mixup/out"), 48 * 40 * 3, 4, "mixup");
    free(a);
    free(b);
    g_group_names[4] = "mixup";
}

static void test_letterbox(void)
{
    const int n = i32(NEED("letterbox/count"), 0);
    for (int k = 0; k < n; k++) {
        const struct entry *cfg = NEED("letterbox/%d/cfg", k), *pl = NEED("letterbox/%d/plan", k);
        const struct entry *want = NEED("letterbox/%d/out", k);
        const int w = i32(cfg, 1), h = i32(cfg, 2);
        struct trn_aug_letterbox_opts o;
        trn_aug_letterbox_opts_default(&o);
        o.auto_pad = i32(cfg, 5), o.scale_fill = i32(cfg, 6), o.scaleup = i32(cfg, 7);
        struct trn_aug_letterbox_plan p;
        char what[96];
        snprintf(what, sizeof what, "letterbox %d (%dx%d -> %dx%d%s%s%s)", k, w, h, i32(cfg, 4),
                 i32(cfg, 3), o.auto_pad ? " auto" : "", o.scale_fill ? " scaleFill" : "",
                 o.scaleup ? "" : " no-scaleup");
        is_int(trn_aug_letterbox_plan(w, h, i32(cfg, 3), i32(cfg, 4), &o, &p), 0, "%s: plan", what);
        ok(p.out_h == (int)want->dims[0] && p.out_w == (int)want->dims[1] &&
               p.ratio_w == f64(pl, 0) && p.ratio_h == f64(pl, 1) && p.pad_w == f64(pl, 2) &&
               p.pad_h == f64(pl, 3) && p.left == (int)f64(pl, 4) && p.top == (int)f64(pl, 5),
           "%s: size %dx%d, ratio %g %g, pad %g %g, left %d top %d as ultralytics", what, p.out_w,
           p.out_h, p.ratio_w, p.ratio_h, p.pad_w, p.pad_h, p.left, p.top);
        uint8_t *in = gen_image(w, h, i32(cfg, 0));
        const size_t cap = (size_t)p.out_w * p.out_h * 3;
        uint8_t *out = malloc(cap);
        is_int(trn_aug_letterbox(in, w, h, &p, out, cap - 1), -ENOSPC, "%s: small dst refused",
               what);
        is_int(trn_aug_letterbox(in, w, h, &p, out, cap), 0, "%s: applied", what);
        pix_cmp(out, want, cap, 5, what);
        free(in);
        free(out);
    }
    g_group_names[5] = "letterbox/resize";
}

static void test_rect(void)
{
    const struct entry *hw = NEED("rect/hw"), *want = NEED("rect/shapes");
    const int64_t n = (int64_t)(hw->count / 2);
    int32_t *h = malloc(sizeof(int32_t) * 2 * (size_t)n);
    int64_t *order = malloc(sizeof(int64_t) * (size_t)n);
    int32_t *shapes = malloc(sizeof(int32_t) * 2 * (size_t)n);
    for (size_t i = 0; i < hw->count; i++)
        h[i] = i32(hw, i);
    const int nb = trn_aug_rect_shapes(h, n, 8, 640, 32, 0.5, order, shapes);
    is_int(nb, (int)(want->count / 2), "rect shapes: %d batches", nb);
    bool same = nb == (int)(want->count / 2), sorted = true;
    for (int i = 0; same && i < 2 * nb; i++)
        same = shapes[i] == i32(want, (size_t)i);
    for (int64_t i = 1; i < n; i++)
        sorted = sorted && (double)h[2 * order[i - 1]] / h[2 * order[i - 1] + 1] <=
                               (double)h[2 * order[i]] / h[2 * order[i] + 1];
    ok(same, "rect shapes equal ultralytics' (ceil(shape * 640 / 32 + 0.5) * 32)");
    ok(sorted, "rect order sorted by aspect ratio h/w");
    free(h);
    free(order);
    free(shapes);
}

/*
 * trn_aug_train_sample_planar (the loader's fused pass) against trn_aug_train_sample_shape and
 * the planar layout, at every SIMD level the CPU has and for uint8 and float: the same bytes and
 * the same rows. Returns the number of (level, dtype) runs that differ.
 */
static int planar_check(struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                        const struct trn_aug_draws *d, const struct trn_aug_tile *tiles, int nt,
                        int oh, int ow, int cap_rows)
{
    const size_t plane = (size_t)oh * ow;
    uint8_t *hwc = malloc(plane * 3), *u8 = malloc(plane * 3);
    float *f32 = malloc(plane * 3 * sizeof *f32), *rows = malloc(5 * (size_t)cap_rows * 4);
    float *rows2 = malloc(5 * (size_t)cap_rows * 4);
    const int n = trn_aug_train_sample_shape(ws, hyp, d, tiles, nt, oh, ow, hwc, rows, cap_rows);
    int bad = n < 0;
    const int top = kern_aug_simd(KERN_AUG_SIMD_AVX512);
    for (int level = 0; level <= top && n >= 0; level++) {
        kern_aug_simd(level);
        for (int dt = 0; dt < 2; dt++) {
            memset(u8, 0xA5, plane * 3);
            memset(f32, 0xA5, plane * 3 * sizeof *f32);
            const int n2 = trn_aug_train_sample_planar(
                ws, hyp, d, tiles, nt, oh, ow, dt ? KERN_AUG_F32 : KERN_AUG_U8,
                dt ? (void *)f32 : (void *)u8, rows2, cap_rows);
            int same = n2 == n && !memcmp(rows, rows2, 5 * (size_t)n * sizeof *rows);
            for (size_t i = 0; same && i < plane; i++)
                for (int c = 0; c < 3; c++)
                    same &= dt ? f32[(size_t)c * plane + i] == (float)hwc[3 * i + c] / 255.0f
                               : u8[(size_t)c * plane + i] == hwc[3 * i + c];
            bad += !same;
        }
    }
    kern_aug_simd(KERN_AUG_SIMD_AVX512);
    free(hwc), free(u8), free(f32), free(rows), free(rows2);
    return bad;
}

static void test_samples(void)
{
    const int n = i32(NEED("sample/count"), 0);
    struct trn_aug_hyp hyp;
    trn_aug_hyp_default(&hyp);
    for (int k = 0; k < n; k++) {
        const struct entry *cfg = NEED("sample/%d/cfg", k), *g = NEED("sample/%d/gain", k);
        const int s = i32(cfg, 0);
        const bool mix = i32(cfg, 2);
        struct trn_aug_draws d;
        memset(&d, 0, sizeof d);
        d.mosaic = true;
        d.mixup = mix;
        d.mixup_ratio = f64(NEED("sample/%d/mix_r", k), 0);
        struct trn_aug_mosaic_draws *m[2] = { &d.mos, &d.mixmos };
        for (int j = 0; j < (mix ? 2 : 1); j++) {
            const struct entry *c = NEED("sample/%d/centre%d", k, j);
            m[j]->xc = i32(c, 0);
            m[j]->yc = i32(c, 1);
            get_draws(NEED("sample/%d/draws%d", k, j), false, &m[j]->persp);
        }
        d.hsv.apply = true;
        for (int c = 0; c < 3; c++)
            d.hsv.gain[c] = f64(g, (size_t)c);
        d.flipud = i32(cfg, 3);
        d.fliplr = i32(cfg, 4);
        const int nt = mix ? 8 : 4;
        struct tile_buf tb[8];
        struct trn_aug_tile tiles[8];
        int total = 0;
        for (int t = 0; t < nt; t++) {
            char p[64];
            snprintf(p, sizeof p, "sample/%d/tile%d", k, t);
            load_tile(&tb[t], p);
            tiles[t] = tb[t].t;
            total += tiles[t].n_labels;
        }
        struct trn_aug_ws *ws = NULL;
        /* start small: the workspace must grow by itself */
        is_int(trn_aug_ws_create(s, 1, 1, &ws), 0, "sample %d: workspace", k);
        uint8_t *out = malloc((size_t)s * s * 3);
        float *rows = malloc(sizeof(float) * 5 * (size_t)total);
        char what[80];
        snprintf(what, sizeof what, "train sample %d (%s%s%s%s)", k,
                 i32(cfg, 1) ? "segments" : "boxes", mix ? " mixup" : "", d.flipud ? " flipud" : "",
                 d.fliplr ? " fliplr" : "");
        is_int(trn_aug_train_sample(ws, &hyp, &d, tiles, nt, out, rows, total - 1), -ENOSPC,
               "%s: too few output rows refused", what);
        const int got = trn_aug_train_sample(ws, &hyp, &d, tiles, nt, out, rows, total);
        ok(got >= 0, "%s: returns %d", what, got);
        pix_cmp(out, NEED("sample/%d/out", k), (size_t)s * s * 3, 6, what);
        rows_cmp(rows, got, NEED("sample/%d/labels", k), 1.0, what);
        is_int(planar_check(ws, &hyp, &d, tiles, nt, s, s, total), 0,
               "%s: the fused planar pass gives the same bytes and rows at every SIMD level, "
               "uint8 and float",
               what);
        /* the same with copy_paste drawing on the canvases (built, then read in place) */
        struct trn_aug_hyp cp = hyp;
        cp.copy_paste = 0.5;
        d.copy_paste_key[0] = 0x1234u + (unsigned)k, d.copy_paste_key[1] = 0x5678u;
        is_int(planar_check(ws, &cp, &d, tiles, nt, s, s, 2 * total), 0,
               "%s, copy_paste 0.5: the fused planar pass gives the same bytes and rows", what);
        d.copy_paste_key[0] = d.copy_paste_key[1] = 0;
        for (int t = 0; t < nt; t++)
            free_tile(&tb[t]);
        free(out);
        free(rows);
        trn_aug_ws_destroy(ws);
    }

    /* the non-mosaic path: letterbox + random_perspective without segments */
    struct tile_buf tb;
    load_tile(&tb, "single/tile");
    struct trn_aug_draws d;
    memset(&d, 0, sizeof d);
    get_draws(NEED("single/draws"), false, &d.mos.persp);
    struct trn_aug_ws *ws = NULL;
    trn_aug_ws_create(48, 8, 0, &ws);
    uint8_t out[48 * 48 * 3];
    float rows[5 * 8];
    const int got = trn_aug_train_sample(ws, &hyp, &d, &tb.t, 1, out, rows, 8);
    pix_cmp(out, NEED("single/out"), sizeof out, 6, "train sample without mosaic");
    rows_cmp(rows, got, NEED("single/labels"), 1.0, "train sample without mosaic");
    is_int(planar_check(ws, &hyp, &d, &tb.t, 1, 48, 48, 8), 0,
           "train sample without mosaic: the fused planar pass gives the same bytes and rows");
    is_int(planar_check(ws, &hyp, &d, &tb.t, 1, 32, 48, 8) +
               planar_check(ws, &hyp, &d, &tb.t, 1, 48, 24, 8),
           0,
           "rect shapes 32x48 and 48x24 (resizing letterboxes): the same through the planar pass");
    trn_aug_ws_destroy(ws);
    free_tile(&tb);
    g_group_names[6] = "whole train samples";

    /* validation */
    load_tile(&tb, "val/tile");
    const struct entry *shp = NEED("val/shape");
    const int vh = i32(shp, 0), vw = i32(shp, 1);
    uint8_t *vout = malloc((size_t)vh * vw * 3);
    struct trn_aug_letterbox_plan plan;
    const int vn = trn_aug_val_sample(&tb.t, vh, vw, vout, (size_t)vh * vw * 3, rows, 8, &plan);
    pix_cmp(vout, NEED("val/out"), (size_t)vh * vw * 3, 5, "val sample");
    rows_cmp(rows, vn, NEED("val/labels"), 1.0, "val sample");
    free(vout);
    free_tile(&tb);
}

static double xs_uniform(void *ctx)
{
    uint64_t *x = ctx;
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (double)(*x >> 11) * (1.0 / 9007199254740992.0);
}

/* A uniform source returning 0.0, 0.1, 0.2, ... (mod 1), to pin the draw order. */
static double seq_uniform(void *ctx)
{
    int *i = ctx;
    return fmod(0.1 * (*i)++, 1.0);
}

static void test_draws(void)
{
    struct trn_aug_hyp hyp;
    trn_aug_hyp_default(&hyp);
    hyp.degrees = 10, hyp.shear = 2, hyp.perspective = 0.001, hyp.mixup = 0.5;
    int i = 0;
    struct trn_aug_draws d;
    trn_aug_draws_fill(&hyp, 640, seq_uniform, &i, &d);
    /* u0 = 0 < mosaic; yc = int(320 + 640 * 0.1), xc = int(320 + 640 * 0.2); then P, angle,
     * scale, shear, translate from u3..u10; u11 = 0.1 < mixup */
    ok(d.mosaic && d.mos.yc == 384 && d.mos.xc == 448, "draws: mosaic, centre yc then xc");
    ok(fabs(d.mos.persp.persp_x - (-0.001 + 0.002 * 0.3)) < 1e-12 &&
           fabs(d.mos.persp.angle - (-10 + 20 * 0.5)) < 1e-12 &&
           fabs(d.mos.persp.scale - (0.5 + 1.0 * 0.6)) < 1e-12 &&
           fabs(d.mos.persp.shear_y - (-2 + 4 * 0.8)) < 1e-12 &&
           fabs(d.mos.persp.translate_y - (0.4 + 0.2 * 0.0)) < 1e-9 && d.mos.persp.perspective,
       "draws: random_perspective in ultralytics' order P(x, y), angle, scale, shear, T");
    ok(d.mixup && d.mixup_ratio > 0 && d.mixup_ratio < 1, "draws: mixup with ratio %.3f",
       d.mixup_ratio);
    hyp.hsv_h = hyp.hsv_s = hyp.hsv_v = 0;
    struct trn_aug_hsv_draws h;
    i = 5;
    trn_aug_draw_hsv(&hyp, seq_uniform, &i, &h);
    ok(!h.apply && i == 5, "draws: no HSV draws when every gain is 0");
    /* Beta(32, 32): mean 1/2, sd 0.062 */
    double sum = 0, sq = 0;
    uint64_t st = 12345;
    for (int k = 0; k < 2000; k++) {
        const double b = trn_aug_draw_beta(32, 32, xs_uniform, &st);
        sum += b, sq += b * b;
    }
    const double mean = sum / 2000, sd = sqrt(sq / 2000 - mean * mean);
    ok(fabs(mean - 0.5) < 0.01 && fabs(sd - 0.0620) < 0.006, "Beta(32, 32): mean %.4f sd %.4f",
       mean, sd);
    ok(isnan(trn_aug_draw_beta(0, 1, xs_uniform, &st)), "Beta(0, 1) is NAN");
}

static void test_errors(void)
{
    struct trn_aug_hyp hyp;
    trn_aug_hyp_default(&hyp);
    is_int(trn_aug_hyp_validate(&hyp), 0, "scratch-low hyp is valid");
    hyp.copy_paste = 0.1;
    is_int(trn_aug_hyp_validate(&hyp), 0, "copy_paste 0.1 is valid");
    hyp.copy_paste = 1.5;
    is_int(trn_aug_hyp_validate(&hyp), -EINVAL, "copy_paste 1.5 is not a fraction");
    hyp.copy_paste = 0, hyp.fliplr = 1.5;
    is_int(trn_aug_hyp_validate(&hyp), -EINVAL, "a probability > 1 is refused");
    hyp.fliplr = NAN;
    is_int(trn_aug_hyp_validate(&hyp), -EINVAL, "a NaN hyp value is refused");
    trn_aug_hyp_default(&hyp);
    struct trn_aug_ws *ws = (struct trn_aug_ws *)&hyp;
    is_int(trn_aug_ws_create(63, 1, 1, &ws), -EINVAL, "odd img_size refused");
    ok(ws == NULL, "failed create leaves NULL");
    trn_aug_ws_destroy(NULL);
    is_int(trn_aug_ws_create(64, 4, 0, &ws), 0, "workspace for 64");
    uint8_t px[32 * 32 * 3], out[64 * 64 * 3];
    memset(px, 7, sizeof px);
    float lab[5] = { 3, 0.5f, 0.5f, 0.5f, 0.5f }, rows[5 * 8];
    struct trn_aug_tile t = { px, 32, 32, lab, 1, NULL, NULL };
    struct trn_aug_tile tiles[4] = { t, t, t, t };
    struct trn_aug_draws d;
    memset(&d, 0, sizeof d);
    d.mosaic = true;
    d.mos.xc = d.mos.yc = 64;
    d.mos.persp.scale = 1, d.mos.persp.translate_x = d.mos.persp.translate_y = 0.5;
    is_int(trn_aug_train_sample(ws, &hyp, &d, tiles, 1, out, rows, 8), -EINVAL,
           "mosaic with 1 tile refused");
    is_int(trn_aug_train_sample(ws, &hyp, &d, tiles, 4, out, rows, 3), -ENOSPC,
           "4 labels into 3 rows refused");
    const int n = trn_aug_train_sample(ws, &hyp, &d, tiles, 4, out, rows, 8);
    is_int(n, 4, "4 centred tiles keep their 4 labels");
    /* scale 1, centred: canvas x maps to x - s/2, so tile 0's box [40, 56] (its 32 px placed
     * with the bottom-right corner at the centre 64, label centred, half size) lands at
     * [8, 24]: cx = cy = 16 / 64, w = h = 16 / 64 */
    ok(n == 4 && fabsf(rows[1] - 0.25f) < 1e-6f && fabsf(rows[2] - 0.25f) < 1e-6f &&
           fabsf(rows[3] - 0.25f) < 1e-6f && fabsf(rows[4] - 0.25f) < 1e-6f,
       "tile 0's box lands at (0.25, 0.25, 0.25, 0.25)");
    struct trn_aug_tile bad = t;
    bad.w = 0;
    tiles[2] = bad;
    is_int(trn_aug_train_sample(ws, &hyp, &d, tiles, 4, out, rows, 8), -EINVAL,
           "a tile of width 0 refused");
    ok(strcmp(trn_aug_strerror(-ENOSPC), trn_aug_strerror(-EINVAL)) != 0, "strerror names errors");
    trn_aug_ws_destroy(ws);
    double M[6] = { 1, 0, 0, 0, 1, 0 };
    is_int(trn_aug_warp_affine(px, 32, 32, M, out, 0, 32, 114), -EINVAL, "warp to width 0 refused");
}

/* np.argsort (numpy 1.24, val.py's ar.argsort()) against the references make_argsort_refs.py
 * wrote beside refs.bin: ties in numpy's order, which decides val.py's rect batches (issue 24). */
static void test_argsort(const char *refs_bin)
{
    char path[4096];
    snprintf(path, sizeof path, "%.*s/argsort_refs.txt",
             (int)(strrchr(refs_bin, '/') ? strrchr(refs_bin, '/') - refs_bin : 1),
             strrchr(refs_bin, '/') ? refs_bin : ".");
    FILE *f = fopen(path, "r");
    if (!ok(f != NULL, "argsort references %s", path)) return;
    int arrays = 0, same = 0, differs_from_stable = 0, heaps = 0;
    long n;
    char kind[2];
    while (fscanf(f, "%1s %ld", kind, &n) == 2 && n > 0 && n < 100000) {
        double *v = malloc((size_t)n * sizeof *v);
        int64_t *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
        int good = v && want && got;
        for (long i = 0; good && i < n; i++)
            good = fscanf(f, "%lf", &v[i]) == 1;
        char colon[2];
        good = good && fscanf(f, "%1s", colon) == 1 && colon[0] == ':';
        for (long i = 0; good && i < n; i++)
            good = fscanf(f, "%" SCNd64, &want[i]) == 1;
        if (good) {
            trn_aug_argsort_np(v, n, got, kind[0] == 'h');
            heaps += kind[0] == 'h';
            arrays++;
            same += !memcmp(got, want, (size_t)n * sizeof *got);
            /* would index order for ties (a stable sort) have given the same? */
            for (long i = 1; i < n; i++)
                if (v[want[i - 1]] == v[want[i]] && want[i - 1] > want[i]) {
                    differs_from_stable++;
                    break;
                }
        }
        free(v);
        free(want);
        free(got);
        if (!good) break;
    }
    fclose(f);
    ok(arrays >= 50 && heaps >= 6 && same == arrays,
       "np.argsort order reproduced for %d of %d arrays (%d of them kind='heapsort', the "
       "introsort's fallback)",
       same, arrays, heaps);
    ok(differs_from_stable > 10,
       "(%d of them put ties out of index order, as a stable sort "
       "would not)",
       differs_from_stable);
}

/* ---- copy_paste (data_augment/copypaste.bin, make_copypaste_refs.py) ------------------ */

static void test_copy_paste(const char *path)
{
    free(g_entries);
    free(g_file);
    g_entries = NULL;
    g_file = NULL;
    if (load_refs(path) < 0) {
        ok(0, "cannot read %s", path);
        return;
    }
    /* cv2.drawContours(FILLED) of polygons of every kind, clipping included */
    const int np = i32(NEED("poly/count"), 0);
    int same = 0, worst = -1, worst_diff = 0;
    for (int k = 0; k < np; k++) {
        const struct entry *pe = NEED("poly/%d/pts", k), *me = NEED("poly/%d/mask", k);
        const int h = (int)me->dims[0], w = (int)me->dims[1], n = (int)pe->dims[0];
        uint8_t *m = calloc((size_t)w * h, 1);
        int32_t *xy = malloc(2 * (size_t)n * sizeof *xy);
        for (int i = 0; i < 2 * n; i++)
            xy[i] = i32(pe, (size_t)i);
        trn_aug_fill_poly(m, w, h, xy, n, 1);
        int diff = 0;
        for (size_t i = 0; i < (size_t)w * h; i++)
            diff += m[i] != ((const uint8_t *)me->data)[i];
        if (diff == 0)
            same++;
        else if (diff > worst_diff)
            worst = k, worst_diff = diff;
        free(m);
        free(xy);
    }
    ok(same == np,
       "fillPoly: %d of %d polygons (convex, concave, self-intersecting, clipped) "
       "equal OpenCV 4.6's pixels (worst: polygon %d, %d pixels)",
       same, np, worst, worst_diff);

    /* copy_paste on canvases with the reference's random.sample draw */
    const int nc = i32(NEED("cp/count"), 0);
    int pix_ok = 0, lab_ok = 0, seg_ok = 0, pasted = 0;
    for (int k = 0; k < nc; k++) {
        const struct entry *ie = NEED("cp/%d/img", k), *le = NEED("cp/%d/labels", k);
        const struct entry *sne = NEED("cp/%d/seg_n", k), *sxe = NEED("cp/%d/seg_xy", k);
        const struct entry *oe = NEED("cp/%d/order", k), *out = NEED("cp/%d/out", k);
        const struct entry *ole = NEED("cp/%d/out_labels", k);
        const struct entry *osn = NEED("cp/%d/out_seg_n", k), *osx = NEED("cp/%d/out_seg_xy", k);
        const int w = i32(ie, 1), h = i32(ie, 2), n = (int)le->dims[0], kk = (int)oe->dims[0];
        uint8_t *img = gen_image(w, h, i32(ie, 0)), *mask = malloc((size_t)w * h);
        float *rows = malloc(10 * (size_t)n * sizeof *rows);
        uint32_t *seg_n = malloc(2 * (size_t)n * sizeof *seg_n);
        float *seg_xy = malloc(2 * 2 * sxe->dims[0] * sizeof *seg_xy);
        int *sel = malloc((size_t)kk * sizeof *sel);
        for (size_t i = 0; i < 5 * (size_t)n; i++)
            rows[i] = f32(le, i);
        for (int i = 0; i < n; i++)
            seg_n[i] = (uint32_t)i32(sne, (size_t)i);
        for (size_t i = 0; i < 2 * sxe->dims[0]; i++)
            seg_xy[i] = f32(sxe, i);
        for (int i = 0; i < kk; i++)
            sel[i] = i32(oe, (size_t)i);
        struct trn_aug_boxes b = { .rows = rows,
                                   .seg_n = seg_n,
                                   .seg_xy = seg_xy,
                                   .n = n,
                                   .cap_rows = 2 * n,
                                   .n_points = sxe->dims[0],
                                   .cap_points = 2 * sxe->dims[0] };
        const int added = trn_aug_copy_paste_labels(&b, w, h, sel, kk, mask);
        if (added > 0) trn_aug_copy_paste_pixels(img, w, h, mask);
        pasted += added > 0 ? added : 0;
        pix_ok += added >= 0 && !memcmp(img, out->data, (size_t)w * h * 3);
        int lab = added >= 0 && b.n == (int)ole->dims[0];
        for (size_t i = 0; lab && i < 5 * (size_t)b.n; i++)
            lab &= rows[i] == f32(ole, i);
        lab_ok += lab;
        int sg = lab && b.n_points == osx->dims[0];
        for (int i = 0; sg && i < b.n; i++)
            sg &= seg_n[i] == (uint32_t)i32(osn, (size_t)i);
        for (size_t i = 0; sg && i < 2 * b.n_points; i++)
            sg &= seg_xy[i] == f32(osx, i);
        seg_ok += sg;
        free(img), free(mask), free(rows), free(seg_n), free(seg_xy), free(sel);
    }
    ok(pix_ok == nc, "copy_paste: %d of %d canvases equal ultralytics' + OpenCV's bytes", pix_ok,
       nc);
    ok(lab_ok == nc && seg_ok == nc,
       "copy_paste: labels (%d of %d) and polygons (%d) equal, bit for bit; %d copies pasted",
       lab_ok, nc, seg_ok, pasted);

    /* random.sample: k = round(p * n) half to even, distinct indices, repeatable */
    int sel[64], sel2[64];
    ok(trn_aug_copy_paste_select(7, 5, 0.5, sel) == 2 &&
           trn_aug_copy_paste_select(7, 3, 0.5, sel) == 2 &&
           trn_aug_copy_paste_select(7, 1, 0.5, sel) == 0 &&
           trn_aug_copy_paste_select(7, 8, 1.0, sel) == 8,
       "k = round(p * n): 2.5 -> 2, 1.5 -> 2, 0.5 -> 0, 8 -> 8");
    trn_aug_copy_paste_select(11, 64, 0.5, sel);
    trn_aug_copy_paste_select(11, 64, 0.5, sel2);
    int distinct = 1;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < i; j++)
            distinct &= sel[i] != sel[j];
    ok(distinct && !memcmp(sel, sel2, sizeof sel), "a permutation, the same for the same key");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("Bail out! usage: test_augment PATH/refs.bin\n");
        return 99;
    }
    if (load_refs(argv[1]) < 0) {
        printf("Bail out! cannot read reference file %s\n", argv[1]);
        return 99;
    }
    test_affine();
    test_persp();
    test_matrix();
    test_mosaic();
    test_hsv();
    test_mixup();
    test_letterbox();
    test_rect();
    test_argsort(argv[1]);
    test_samples();
    test_draws();
    test_errors();
    if (argc > 2) test_copy_paste(argv[2]);
    for (int g = 0; g < 16; g++)
        if (g_group_names[g])
            tap_diag("max pixel |diff| vs OpenCV, %s: %d", g_group_names[g], g_worst[g]);
    free(g_entries);
    free(g_file);
    return tap_done();
}
