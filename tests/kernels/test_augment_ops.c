/*
 * The augmentation pixel ops of the CPU reference (kern_ref_aug_*), on realistic images:
 *   - against OpenCV 4.6 (cv2.warpAffine, warpPerspective, augment_hsv's cvtColor + LUT, mixup's
 *     numpy blend) from tests/trainer/data_augment/refs.bin (make_augment_refs.py; argv[1]),
 *     through kern_aug_warp_invert + kern_ref_aug_warp and kern_aug_hsv_lut_init +
 *     kern_ref_aug_hsv: every value within 1 (today all equal);
 *   - the warp against a plain per-pixel restatement of its documented fixed-point rules (no SSE,
 *     no column blocks, no border fast path): identity, scale 0.5 and 1.5, rotation with
 *     borders, translations by 1 px, perspective, 1-pixel images; must be equal;
 *   - paste with regions touching the canvas borders, empty and overlapping regions;
 *   - flips (once against mirrored indexing, twice = identity, odd and even sizes), mixup
 *     (r = 0, 1 and between), the NCHW layout (uint8, float / 255);
 *   - the fused batch op against the unfused ops composed (paste, warp, mixup, HSV, flip, NCHW)
 *     on random samples with s = 200 (the HSV row tail that rounds) and 64, both dtypes, threads;
 *   - argument errors.
 * Random draws come from --seed N (default 1, printed).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_testutil.h"
#include "tap.h"

static struct kern_ctx *g_ctx;

/* ---- OpenCV reference file (format: tests/trainer/make_augment_refs.py) ---------------- */

struct entry {
    char name[64];
    int type; /* 1 u8, 2 f32, 3 f64, 4 i32 */
    uint32_t dims[4];
    size_t count;
    const uint8_t *data;
};

static struct entry *g_ent;
static int g_n_ent;
static uint8_t *g_file;

static int load_refs(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    g_file = malloc((size_t)len);
    const bool got = g_file && fread(g_file, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    if (!got || len < 12 || memcmp(g_file, "AUGREF01", 8)) return -1;
    uint32_t n;
    memcpy(&n, g_file + 8, 4);
    g_ent = calloc(n, sizeof *g_ent);
    if (!g_ent) return -1;
    size_t off = 12;
    for (uint32_t i = 0; i < n; i++) {
        struct entry *e = &g_ent[i];
        uint16_t nl;
        if (off + 2 > (size_t)len) return -1;
        memcpy(&nl, g_file + off, 2);
        off += 2;
        if (nl >= sizeof e->name || off + nl + 2 > (size_t)len) return -1;
        memcpy(e->name, g_file + off, nl);
        off += nl;
        e->type = g_file[off];
        const int ndim = g_file[off + 1];
        off += 2;
        if (ndim > 4 || off + 4 * (size_t)ndim > (size_t)len) return -1;
        e->count = 1;
        for (int d = 0; d < ndim; d++, off += 4) {
            memcpy(&e->dims[d], g_file + off, 4);
            e->count *= e->dims[d];
        }
        const size_t bytes = e->count * (e->type == 1 ? 1 : e->type == 3 ? 8 : 4);
        if (off + bytes > (size_t)len) return -1;
        e->data = g_file + off;
        off += bytes;
    }
    g_n_ent = (int)n;
    return 0;
}

static const struct entry *need(const char *fmt, int k)
{
    char name[96];
    snprintf(name, sizeof name, fmt, k);
    for (int i = 0; i < g_n_ent; i++)
        if (!strcmp(g_ent[i].name, name)) return &g_ent[i];
    printf("Bail out! reference entry missing: %s\n", name);
    exit(99);
}

static int32_t i32(const struct entry *e, size_t i)
{
    int32_t v;
    memcpy(&v, e->data + 4 * i, 4);
    return v;
}

static double f64(const struct entry *e, size_t i)
{
    double v;
    memcpy(&v, e->data + 8 * i, 8);
    return v;
}

/* make_augment_refs.py's gen_image, bit for bit */
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
                const uint32_t grad = (x * 255u / (uint32_t)(w > 1 ? w - 1 : 1) +
                                       y * 128u / (uint32_t)(h > 1 ? h - 1 : 1) + c * 60u) %
                                      256u;
                const bool block = ((x / 8 + y / 8 + (uint32_t)seed) % 3) == 0;
                img[((size_t)y * (size_t)w + x) * 3 + c] = (uint8_t)(block ? (v & 255) : grad);
            }
    return img;
}

/* Largest |got - want| over n bytes; reports the first difference. */
static int max_diff(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
    int maxd = 0;
    size_t first = (size_t)-1, nd = 0;
    for (size_t i = 0; i < n; i++) {
        const int d = abs((int)got[i] - (int)want[i]);
        if (d && !nd++) first = i;
        maxd = d > maxd ? d : maxd;
    }
    if (nd)
        tap_diag("%s: %zu of %zu differ, first at %zu: got %d want %d", what, nd, n, first,
                 got[first], want[first]);
    return maxd;
}

static void test_opencv(void)
{
    int worst = 0;
    for (int persp = 0; persp < 2; persp++) {
        const char *grp = persp ? "persp" : "affine";
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%s/count", grp);
        const int n = i32(need(fmt, 0), 0);
        for (int k = 0; k < n; k++) {
            snprintf(fmt, sizeof fmt, "%s/%%d/src", grp);
            const struct entry *src = need(fmt, k);
            snprintf(fmt, sizeof fmt, "%s/%%d/M", grp);
            const struct entry *Me = need(fmt, k);
            snprintf(fmt, sizeof fmt, "%s/%%d/out", grp);
            const struct entry *want = need(fmt, k);
            const int sw = i32(src, 1), sh = i32(src, 2), dw = i32(src, 3), dh = i32(src, 4);
            uint8_t *in = gen_image(sw, sh, i32(src, 0)), *out = malloc((size_t)dw * dh * 3);
            double M[9] = { 0, 0, 0, 0, 0, 0, 0, 0, 1 }, inv[9];
            for (int i = 0; i < (persp ? 9 : 6); i++)
                M[i] = f64(Me, (size_t)i);
            kern_aug_warp_invert(M, persp, inv);
            const int rc = kern_ref_aug_warp(g_ctx, out, dw, dh, in, sw, sh, inv, persp, 114);
            const int d = max_diff(out, want->data, want->count, grp);
            ok(rc == 0 && want->count == (size_t)dw * dh * 3 && d <= 1,
               "%s %d (%dx%d -> %dx%d) vs OpenCV: max |diff| %d", grp, k, sw, sh, dw, dh, d);
            worst = d > worst ? d : worst;
            free(in);
            free(out);
        }
    }
    const struct entry *src = need("hsv/src", 0);
    const int n = i32(need("hsv/count", 0), 0);
    uint8_t *img = malloc(src->count);
    for (int k = 0; k < n; k++) {
        const struct entry *g = need("hsv/%d/gain", k);
        const double gain[3] = { f64(g, 0), f64(g, 1), f64(g, 2) };
        struct kern_aug_hsv_lut lut;
        kern_aug_hsv_lut_init(&lut, gain);
        memcpy(img, src->data, src->count);
        const int rc = kern_ref_aug_hsv(g_ctx, img, (int)src->dims[1], (int)src->dims[0], &lut);
        const int d = max_diff(img, need("hsv/%d/out", k)->data, src->count, "hsv");
        ok(rc == 0 && d <= 1, "hsv %d (%ux%u, gains %.3f %.3f %.3f) vs OpenCV: max |diff| %d", k,
           src->dims[1], src->dims[0], gain[0], gain[1], gain[2], d);
        worst = d > worst ? d : worst;
    }
    free(img);
    uint8_t *a = gen_image(48, 40, 401), *b = gen_image(48, 40, 402);
    const int rc = kern_ref_aug_mixup(g_ctx, a, b, 48 * 40 * 3, f64(need("mixup/r", 0), 0));
    const int d = max_diff(a, need("mixup/out", 0)->data, 48 * 40 * 3, "mixup");
    ok(rc == 0 && d <= 1, "mixup vs numpy: max |diff| %d", d);
    worst = d > worst ? d : worst;
    tap_diag("largest difference from OpenCV over all cases: %d", worst);
    free(a);
    free(b);
}

/* ---- random inputs ------------------------------------------------------------------------ */

/* A photo-like image: smooth gradients with noisy 8x8 blocks and flat runs. */
static uint8_t *rand_image(int w, int h)
{
    uint8_t *img = malloc((size_t)w * (size_t)h * 3);
    const int k = kt_randint(0, 255), flat = kt_randint(0, 255);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                const int blk = (x / 8 + y / 8 + k) % 4;
                const int v = blk == 0   ? (int)(kt_next() & 255)
                              : blk == 1 ? flat
                                         : x * 255 / w + y * 128 / h + c * 60 + k;
                img[((size_t)y * w + x) * 3 + c] = (uint8_t)v;
            }
    return img;
}

/* Forward matrix mapping a src_w x src_h image to dst: random scale, rotation, shear,
 * translation and (persp) perspective, around the centres, as random_perspective builds it. */
static void rand_matrix(int src_w, int src_h, int dst_w, int dst_h, int persp, double M[9])
{
    const double sc = kt_uniform(0.5f, 1.5f), a = kt_uniform(-30, 30) * M_PI / 180;
    const double sh = tan(kt_uniform(-5, 5) * M_PI / 180);
    const double px = persp ? kt_uniform(-1e-3f, 1e-3f) : 0,
                 py = persp ? kt_uniform(-1e-3f, 1e-3f) : 0;
    const double tx = kt_uniform(0.3f, 0.7f) * dst_w, ty = kt_uniform(0.3f, 0.7f) * dst_h;
    const double cx = -src_w / 2.0, cy = -src_h / 2.0;
    /* A = R S (rotation-scale then shear), then P (perspective), C and T */
    const double r00 = cos(a) * sc, r01 = sin(a) * sc, r10 = -sin(a) * sc, r11 = cos(a) * sc;
    const double a00 = r00 + sh * r10, a01 = r01 + sh * r11, a10 = r10, a11 = r11;
    double P[9] = { a00, a01, 0, a10, a11, 0, px, py, 1 };
    /* M = T * P * C */
    for (int i = 0; i < 3; i++) {
        const double r0 = P[3 * i], r1 = P[3 * i + 1], r2 = P[3 * i + 2];
        P[3 * i + 2] = r0 * cx + r1 * cy + r2;
    }
    for (int j = 0; j < 3; j++) {
        M[j] = P[j] + tx * P[6 + j];
        M[3 + j] = P[3 + j] + ty * P[6 + j];
        M[6 + j] = P[6 + j];
    }
}

/* ---- the warp against its rules, written plainly ------------------------------------------ */

static int plain_round(double v)
{
    if (!(v > -2147483648.5 && v < 2147483647.5)) return INT32_MIN;
    return (int)lrint(v); /* round to nearest even, as cvRound */
}

static void plain_warp(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh,
                       const double *M, int persp, uint8_t bv)
{
    const int bh0 = dh < 16 ? dh : 16, bw0 = 1024 / bh0 < dw ? 1024 / bh0 : dw;
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++) {
            int X, Y;
            if (persp) {
                const int x0 = x / bw0 * bw0, x1 = x - x0;
                const double X0 = M[0] * x0 + M[1] * y + M[2], Y0 = M[3] * x0 + M[4] * y + M[5];
                const double W0 = M[6] * x0 + M[7] * y + M[8];
                double W = W0 + M[6] * x1;
                W = W != 0 ? 32 / W : 0;
                X = plain_round(fmax(-2147483648.0, fmin(2147483647.0, (X0 + M[0] * x1) * W)));
                Y = plain_round(fmax(-2147483648.0, fmin(2147483647.0, (Y0 + M[3] * x1) * W)));
            } else {
                const unsigned xr = (unsigned)(plain_round((M[1] * y + M[2]) * 1024) + 16);
                const unsigned yr = (unsigned)(plain_round((M[4] * y + M[5]) * 1024) + 16);
                X = (int)(xr + (unsigned)plain_round(M[0] * x * 1024)) >> 5;
                Y = (int)(yr + (unsigned)plain_round(M[3] * x * 1024)) >> 5;
            }
            int sx = X >> 5, sy = Y >> 5;
            sx = sx < -32768 ? -32768 : sx > 32767 ? 32767 : sx;
            sy = sy < -32768 ? -32768 : sy > 32767 ? 32767 : sy;
            const int fx = X & 31, fy = Y & 31;
            const int w[4] = { (32 - fy) * (32 - fx), (32 - fy) * fx, fy * (32 - fx), fy * fx };
            for (int c = 0; c < 3; c++) {
                int sum = 512;
                for (int t = 0; t < 4; t++) {
                    const int tx = sx + (t & 1), ty = sy + (t >> 1);
                    const int v = tx >= 0 && ty >= 0 && tx < sw && ty < sh
                                      ? src[((size_t)ty * sw + tx) * 3 + c]
                                      : bv;
                    sum += v * w[t];
                }
                dst[((size_t)y * dw + x) * 3 + c] = (uint8_t)(sum >> 10);
            }
        }
}

static void warp_case(const char *what, int sw, int sh, int dw, int dh, const double M[9],
                      int persp, uint8_t bv)
{
    uint8_t *src = rand_image(sw, sh);
    uint8_t *got = malloc((size_t)dw * dh * 3), *want = malloc((size_t)dw * dh * 3);
    memset(got, 0xA5, (size_t)dw * dh * 3);
    double inv[9];
    kern_aug_warp_invert(M, persp, inv);
    const int rc = kern_ref_aug_warp(g_ctx, got, dw, dh, src, sw, sh, inv, persp, bv);
    plain_warp(want, dw, dh, src, sw, sh, inv, persp, bv);
    const int d = max_diff(got, want, (size_t)dw * dh * 3, what);
    ok(rc == 0 && d == 0, "warp %s (%dx%d -> %dx%d, %s): equals the plain rules", what, sw, sh, dw,
       dh, persp ? "perspective" : "affine");
    free(src);
    free(got);
    free(want);
}

static void test_warp(void)
{
    for (int persp = 0; persp < 2; persp++) {
        const double eye[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
        uint8_t *src = rand_image(83, 57), *out = malloc(83 * 57 * 3);
        double inv[9];
        kern_aug_warp_invert(eye, persp, inv);
        const int rc = kern_ref_aug_warp(g_ctx, out, 83, 57, src, 83, 57, inv, persp, 114);
        ok(rc == 0 && !memcmp(out, src, 83 * 57 * 3), "identity warp (%s) copies the image",
           persp ? "perspective" : "affine");
        /* scale 0.5 from the origin: dst(x, y) = src(2x, 2y) exactly (integer positions) */
        const double half[9] = { 0.5, 0, 0, 0, 0.5, 0, 0, 0, 1 };
        kern_aug_warp_invert(half, persp, inv);
        kern_ref_aug_warp(g_ctx, out, 41, 28, src, 83, 57, inv, persp, 114);
        bool same = true;
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 41; x++)
                same &= !memcmp(out + ((size_t)y * 41 + x) * 3,
                                src + ((size_t)2 * y * 83 + 2 * x) * 3, 3);
        ok(same, "scale 0.5 (%s) samples every second pixel", persp ? "perspective" : "affine");
        /* translation by +1 px: column 0 and row 0 are border, the rest the shifted image */
        const double shift[9] = { 1, 0, 1, 0, 1, 1, 0, 0, 1 };
        kern_aug_warp_invert(shift, persp, inv);
        kern_ref_aug_warp(g_ctx, out, 83, 57, src, 83, 57, inv, persp, 7);
        same = true;
        for (int y = 0; y < 57; y++)
            for (int x = 0; x < 83; x++)
                for (int c = 0; c < 3; c++) {
                    const uint8_t v = out[((size_t)y * 83 + x) * 3 + c];
                    same &= x == 0 || y == 0 ? v == 7
                                             : v == src[((size_t)(y - 1) * 83 + x - 1) * 3 + c];
                }
        ok(same,
           "translation by 1 px (%s): border value 7 on the first row and column, shifted "
           "pixels elsewhere",
           persp ? "perspective" : "affine");
        free(src);
        free(out);

        const double up[9] = { 1.5, 0, -3.25, 0, 1.5, 2.5, 0, 0, 1 };
        warp_case("scale 1.5", 64, 48, 100, 70, up, persp, 114);
        const double down[9] = { 0.5, 0, 10.3, 0, 0.5, -4.7, 0, 0, 1 };
        warp_case("scale 0.5 off-grid", 130, 90, 80, 60, down, persp, 114);
        for (int k = 0; k < 4; k++) {
            double M[9];
            const int sw = kt_randint(40, 300), sh = kt_randint(40, 300);
            const int dw = kt_randint(30, 260), dh = kt_randint(30, 260);
            rand_matrix(sw, sh, dw, dh, persp, M);
            warp_case("random", sw, sh, dw, dh, M, persp, (uint8_t)kt_randint(0, 255));
        }
        /* output wider than 1024 columns: the affine column blocks */
        double M[9];
        rand_matrix(300, 20, 1100, 9, persp, M);
        warp_case("wide", 300, 20, 1100, 9, M, persp, 114);
        const double one[9] = { 3, 0, 0.4, 0, 3, 0.7, 0, 0, 1 };
        warp_case("1x1 source", 1, 1, 5, 4, one, persp, 114);
        warp_case("1x1 destination", 9, 7, 1, 1, one, persp, 114);
    }
}

/* ---- paste, flips, mixup, layout ------------------------------------------------------------ */

/* A random canvas of n regions from fresh tiles (*tiles: the n allocated tiles, caller frees):
 * some regions touch the canvas edges, some are empty, some overlap. */
static void rand_canvas(struct kern_aug_canvas *c, int cw, int ch, int n, uint8_t **tiles)
{
    memset(c, 0, sizeof *c);
    c->w = cw, c->h = ch, c->n_paste = n;
    for (int i = 0; i < n; i++) {
        struct kern_aug_paste *p = &c->paste[i];
        p->src_w = kt_randint(1, cw), p->src_h = kt_randint(1, ch);
        tiles[i] = rand_image(p->src_w, p->src_h);
        p->src = tiles[i];
        p->w = kt_randint(0, p->src_w), p->h = kt_randint(0, p->src_h);
        if (kt_randint(0, 5) == 0) p->w = 0; /* empty region */
        p->src_x = kt_randint(0, p->src_w - p->w), p->src_y = kt_randint(0, p->src_h - p->h);
        const int edge = kt_randint(0, 4); /* 0: left/top, 1: right/bottom, else anywhere */
        p->dst_x = edge == 0 ? 0 : edge == 1 ? cw - p->w : kt_randint(0, cw - p->w);
        p->dst_y = edge == 1 ? ch - p->h : edge == 0 ? 0 : kt_randint(0, ch - p->h);
    }
}

static void test_paste(void)
{
    for (int k = 0; k < 6; k++) {
        struct kern_aug_canvas c;
        uint8_t *tiles[KERN_AUG_MAX_PASTE];
        const int cw = kt_randint(1, 150), ch = kt_randint(1, 150), n = kt_randint(0, 4);
        rand_canvas(&c, cw, ch, n, tiles);
        uint8_t *got = malloc((size_t)cw * ch * 3), *want = malloc((size_t)cw * ch * 3);
        memset(want, KERN_AUG_FILL, (size_t)cw * ch * 3);
        for (int i = 0; i < n; i++) /* in order: the later region wins */
            for (int y = 0; y < c.paste[i].h; y++)
                for (int x = 0; x < c.paste[i].w; x++)
                    memcpy(want + ((size_t)(c.paste[i].dst_y + y) * cw + c.paste[i].dst_x + x) * 3,
                           tiles[i] + ((size_t)(c.paste[i].src_y + y) * c.paste[i].src_w +
                                       c.paste[i].src_x + x) *
                                          3,
                           3);
        memset(got, 0xA5, (size_t)cw * ch * 3);
        const int rc = kern_ref_aug_paste(g_ctx, got, &c);
        ok(rc == 0 && !memcmp(got, want, (size_t)cw * ch * 3),
           "paste %d: %d regions on %dx%d (edges, empty, overlaps) equal the plain copy", k, n, cw,
           ch);
        /* errors: a region past the canvas, a missing tile, too many regions */
        if (n > 0 && c.paste[0].w > 0 && c.paste[0].h > 0) {
            struct kern_aug_canvas bad = c;
            bad.paste[0].dst_x = cw - bad.paste[0].w + 1;
            is_int(kern_ref_aug_paste(g_ctx, got, &bad), -EINVAL,
                   "paste %d: region past the "
                   "right edge: -EINVAL",
                   k);
            bad = c;
            bad.paste[0].src = NULL;
            is_int(kern_ref_aug_paste(g_ctx, got, &bad), -EINVAL, "paste %d: NULL tile: -EINVAL",
                   k);
        }
        for (int i = 0; i < n; i++)
            free(tiles[i]);
        free(got);
        free(want);
    }
    struct kern_aug_canvas c = { .w = 4, .h = 4, .n_paste = KERN_AUG_MAX_PASTE + 1 };
    uint8_t buf[48];
    is_int(kern_ref_aug_paste(g_ctx, buf, &c), -EINVAL, "paste: too many regions: -EINVAL");
}

static void test_flip_mixup_layout(void)
{
    const int sizes[3][2] = { { 1, 1 }, { 7, 5 }, { 64, 33 } };
    for (int k = 0; k < 3; k++) {
        const int w = sizes[k][0], h = sizes[k][1];
        const size_t n = (size_t)w * h * 3;
        uint8_t *src = rand_image(w, h), *img = malloc(n);
        for (int mode = 1; mode < 4; mode++) {
            const int lr = mode & 1, ud = mode >> 1;
            memcpy(img, src, n);
            kern_ref_aug_flip(g_ctx, img, w, h, lr, ud);
            bool mirrored = true;
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    mirrored &= !memcmp(
                        img + ((size_t)y * w + x) * 3,
                        src + ((size_t)(ud ? h - 1 - y : y) * w + (lr ? w - 1 - x : x)) * 3, 3);
            kern_ref_aug_flip(g_ctx, img, w, h, lr, ud);
            ok(mirrored && !memcmp(img, src, n),
               "flip lr=%d ud=%d on %dx%d: mirrors; twice is "
               "the identity",
               lr, ud, w, h);
        }
        free(src);
        free(img);
    }
    const size_t n = 40 * 30 * 3;
    uint8_t *a = rand_image(40, 30), *b = rand_image(40, 30), *m = malloc(n);
    memcpy(m, a, n);
    kern_ref_aug_mixup(g_ctx, m, b, n, 1.0);
    ok(!memcmp(m, a, n), "mixup r = 1 keeps the first image");
    memcpy(m, a, n);
    kern_ref_aug_mixup(g_ctx, m, b, n, 0.0);
    ok(!memcmp(m, b, n), "mixup r = 0 gives the second image");
    const double r = kt_uniform(0.3f, 0.7f);
    memcpy(m, a, n);
    kern_ref_aug_mixup(g_ctx, m, b, n, r);
    bool same = true;
    for (size_t i = 0; i < n; i++)
        same &= m[i] == (uint8_t)(a[i] * r + b[i] * (1 - r));
    ok(same, "mixup r = %.4f truncates a r + b (1 - r)", r);
    is_int(kern_ref_aug_mixup(g_ctx, m, b, n, 1.5), -EINVAL, "mixup r = 1.5: -EINVAL");

    uint8_t *u8 = malloc(n);
    float *f32 = malloc(n * sizeof(float));
    kern_ref_aug_to_nchw(g_ctx, u8, KERN_AUG_U8, a, 40, 30);
    kern_ref_aug_to_nchw(g_ctx, f32, KERN_AUG_F32, a, 40, 30);
    bool lay = true;
    for (size_t i = 0; i < 40 * 30; i++)
        for (int c = 0; c < 3; c++) {
            lay &= u8[(size_t)c * 1200 + i] == a[3 * i + c];
            lay &= f32[(size_t)c * 1200 + i] == (float)a[3 * i + c] / 255.0f;
        }
    ok(lay, "to_nchw: planes R, G, B; uint8 and float / 255");
    is_int(kern_ref_aug_to_nchw(g_ctx, u8, 7, a, 40, 30), -EINVAL, "to_nchw: bad dtype: -EINVAL");
    struct kern_aug_hsv_lut lut;
    const double g1[3] = { 1, 1, 1 };
    kern_aug_hsv_lut_init(&lut, g1);
    lut.h[3] = 180;
    is_int(kern_ref_aug_hsv(g_ctx, a, 40, 30, &lut), -EINVAL,
           "hsv: a LUT mapping H to 180: -EINVAL");
    free(a);
    free(b);
    free(m);
    free(u8);
    free(f32);
}

/* ---- the fused batch against the ops composed ---------------------------------------------- */

/* A mosaic's canvas as load_mosaic builds it (2s x 2s, four tiles around a centre, each cut
 * at the canvas edge): regions that never overlap and that end at their tiles' corners. */
static void mosaic_canvas(struct kern_aug_canvas *c, int s, uint8_t **tiles)
{
    memset(c, 0, sizeof *c);
    c->w = c->h = 2 * s, c->n_paste = 4;
    const int xc = kt_randint(s / 2, 3 * s / 2), yc = kt_randint(s / 2, 3 * s / 2);
    for (int i = 0; i < 4; i++) {
        struct kern_aug_paste *p = &c->paste[i];
        p->src_w = kt_randint(1, s), p->src_h = kt_randint(1, s);
        tiles[i] = rand_image(p->src_w, p->src_h);
        p->src = tiles[i];
        const bool right = i & 1, bottom = i & 2;
        p->w = right ? (p->src_w < 2 * s - xc ? p->src_w : 2 * s - xc)
                     : (p->src_w < xc ? p->src_w : xc);
        p->h = bottom ? (p->src_h < 2 * s - yc ? p->src_h : 2 * s - yc)
                      : (p->src_h < yc ? p->src_h : yc);
        p->dst_x = right ? xc : xc - p->w, p->dst_y = bottom ? yc : yc - p->h;
        p->src_x = right ? 0 : p->src_w - p->w, p->src_y = bottom ? 0 : p->src_h - p->h;
    }
}

/* A random sample for an oh x ow output: mosaic canvases (as load_mosaic, or random regions that
 * may overlap) or letterbox-like (1 region), random warps, mixup, HSV gains, flips. tiles: out,
 * 8 allocations (NULL where unused). */
static void rand_sample_shape(struct kern_aug_sample *p, int oh, int ow, uint8_t **tiles)
{
    memset(p, 0, sizeof *p);
    memset(tiles, 0, 8 * sizeof *tiles);
    p->mixup = kt_randint(0, 2) == 0;
    const int s = oh > ow ? oh : ow;
    for (int k = 0; k < 1 + p->mixup; k++) {
        const int kind = kt_randint(0, 3); /* 0, 1: load_mosaic; 2: random regions; 3: one */
        const int cs = kind < 3 ? 2 * s : s;
        if (kind < 2)
            mosaic_canvas(&p->canvas[k], s, tiles + 4 * k);
        else
            rand_canvas(&p->canvas[k], cs, cs, kind == 2 ? 4 : 1, tiles + 4 * k);
        p->perspective[k] = kt_randint(0, 3) == 0;
        double M[9];
        rand_matrix(cs, cs, ow, oh, p->perspective[k], M);
        kern_aug_warp_invert(M, p->perspective[k], p->inv[k]);
    }
    p->mixup_ratio = kt_uniform(0.3f, 0.7f);
    p->hsv = kt_randint(0, 4) != 0;
    const double gain[3] = { 1 + kt_uniform(-1, 1) * 0.015, 1 + kt_uniform(-1, 1) * 0.7,
                             1 + kt_uniform(-1, 1) * 0.4 };
    kern_aug_hsv_lut_init(&p->lut, gain);
    p->flip_lr = kt_randint(0, 1), p->flip_ud = kt_randint(0, 3) == 0;
}

static void rand_sample(struct kern_aug_sample *p, int s, uint8_t **tiles)
{
    rand_sample_shape(p, s, s, tiles);
}

static void composed_shape(const struct kern_aug_sample *p, int oh, int ow, int dtype, void *dst)
{
    const int s = oh > ow ? oh : ow;
    uint8_t *canvas = malloc((size_t)4 * s * s * 3), *img = malloc((size_t)oh * ow * 3);
    uint8_t *img2 = malloc((size_t)oh * ow * 3);
    kern_ref_aug_paste(g_ctx, canvas, &p->canvas[0]);
    kern_ref_aug_warp(g_ctx, img, ow, oh, canvas, p->canvas[0].w, p->canvas[0].h, p->inv[0],
                      p->perspective[0], KERN_AUG_FILL);
    if (p->mixup) {
        kern_ref_aug_paste(g_ctx, canvas, &p->canvas[1]);
        kern_ref_aug_warp(g_ctx, img2, ow, oh, canvas, p->canvas[1].w, p->canvas[1].h, p->inv[1],
                          p->perspective[1], KERN_AUG_FILL);
        kern_ref_aug_mixup(g_ctx, img, img2, (size_t)oh * ow * 3, p->mixup_ratio);
    }
    if (p->hsv) kern_ref_aug_hsv(g_ctx, img, ow, oh, &p->lut);
    kern_ref_aug_flip(g_ctx, img, ow, oh, p->flip_lr, p->flip_ud);
    kern_ref_aug_to_nchw(g_ctx, dst, dtype, img, ow, oh);
    free(canvas);
    free(img);
    free(img2);
}

static void composed(const struct kern_aug_sample *p, int s, int dtype, void *dst)
{
    composed_shape(p, s, s, dtype, dst);
}

/* kern_ops_cpu()->aug_sample at the current SIMD level against the ops composed, on n samples. */
static void test_sample_cpu(int oh, int ow, int n, int dtype, int level)
{
    const size_t img = (size_t)3 * oh * ow * (dtype == KERN_AUG_F32 ? 4 : 1);
    uint8_t *got = malloc(img), *want = malloc(img);
    size_t bad = 0;
    int rc = 0, mix = 0, persp = 0, mos = 0;
    for (int i = 0; i < n; i++) {
        struct kern_aug_sample p;
        uint8_t *tiles[8];
        rand_sample_shape(&p, oh, ow, tiles);
        composed_shape(&p, oh, ow, dtype, want);
        memset(got, 0xA5, img);
        rc |= kern_ops_cpu()->aug_sample(got, dtype, oh, ow, &p);
        for (size_t k = 0; k < img; k++)
            bad += got[k] != want[k];
        mix += p.mixup, persp += p.perspective[0], mos += p.canvas[0].n_paste == 4;
        for (int k = 0; k < 8; k++)
            free(tiles[k]);
    }
    ok(rc == 0 && bad == 0,
       "sample_cpu, SIMD level %d, %s: %dx%d, %d samples (%d 4-region, %d mixup, %d perspective) "
       "equal paste+warp+mixup+hsv+flip+nchw (%zu bytes differ)",
       level, dtype == KERN_AUG_F32 ? "f32" : "u8", oh, ow, n, mos, mix, persp, bad);
    free(got);
    free(want);
}

static void test_batch(struct kern_ctx *ctx, int s, int n, int dtype, const char *what)
{
    struct kern_aug_sample *p = calloc((size_t)n, sizeof *p);
    uint8_t **tiles = calloc((size_t)n * 8, sizeof *tiles);
    const size_t img = (size_t)3 * s * s * (dtype == KERN_AUG_F32 ? 4 : 1);
    uint8_t *got = malloc(img * n), *want = malloc(img * n);
    int mix = 0, persp = 0;
    for (int i = 0; i < n; i++) {
        rand_sample(&p[i], s, tiles + 8 * i);
        composed(&p[i], s, dtype, want + img * i);
        mix += p[i].mixup, persp += p[i].perspective[0];
    }
    memset(got, 0xA5, img * n);
    const int rc = kern_ref_aug_batch(ctx, got, dtype, s, p, n);
    size_t bad = 0;
    for (size_t i = 0; i < img * n; i++)
        bad += got[i] != want[i];
    ok(rc == 0 && bad == 0,
       "batch %s: s %d, %d samples (%d mixup, %d perspective) equal paste+warp+mixup+hsv+flip+nchw "
       "(%zu bytes differ)",
       what, s, n, mix, persp, bad);
    if (n > 0) {
        struct kern_aug_sample bad_smp = p[0];
        bad_smp.mixup = 1, bad_smp.mixup_ratio = 2;
        is_int(kern_ref_aug_batch(ctx, got, dtype, s, &bad_smp, 1), -EINVAL,
               "batch %s: mixup ratio 2: -EINVAL", what);
        bad_smp = p[0];
        bad_smp.inv[0][4] = NAN;
        is_int(kern_ref_aug_batch(ctx, got, dtype, s, &bad_smp, 1), -EINVAL,
               "batch %s: NaN matrix: -EINVAL", what);
    }
    for (int i = 0; i < n * 8; i++)
        free(tiles[i]);
    free(tiles);
    free(p);
    free(got);
    free(want);
}

/* The space-to-depth dtypes: the bits of the float32 batch then kern_ref_cast_f32_lowp_s2d, every
 * element written (the output starts poisoned), on ctx's threads. */
static void test_batch_s2d(struct kern_ctx *ctx, int s, int n, int layout, const char *what)
{
    const int dtype = layout == KERN_LAYOUT_NHWC ? KERN_AUG_BF16_S2D_NHWC : KERN_AUG_BF16_S2D_NCHW;
    struct kern_aug_sample *p = calloc((size_t)n, sizeof *p);
    uint8_t **tiles = calloc((size_t)n * 8, sizeof *tiles);
    const size_t img = kern_aug_image_bytes(dtype, s, s), ny = img / 2 * (size_t)n;
    float *f = malloc((size_t)n * kern_aug_image_bytes(KERN_AUG_F32, s, s));
    uint16_t *got = malloc(img * n), *want = malloc(img * n);
    for (int i = 0; i < n; i++)
        rand_sample(&p[i], s, tiles + 8 * i);
    const struct kern_s2d d = { n, 3, s, s, KERN_AUG_S2D_C, layout };
    int rc = kern_ref_aug_batch(ctx, f, KERN_AUG_F32, s, p, n);
    if (!rc) rc = kern_ref_cast_f32_lowp_s2d(ctx, &d, KERN_DT_BF16, want, f);
    memset(got, 0xA5, img * n);
    if (!rc) rc = kern_ref_aug_batch(ctx, got, dtype, s, p, n);
    size_t bad = 0, pad = 0;
    for (size_t i = 0; i < ny; i++) {
        bad += got[i] != want[i];
        pad += want[i] == 0;
    }
    ok(rc == 0 && bad == 0 && pad >= ny / 4,
       "batch bf16 space-to-depth %s, %s: s %d, %d samples equal the float32 batch's "
       "cast_f32_lowp_s2d bit for bit (%zu of %zu differ; %zu zeros)",
       layout == KERN_LAYOUT_NHWC ? "NHWC" : "NCHW", what, s, n, bad, ny, pad);
    for (int i = 0; i < n * 8; i++)
        free(tiles[i]);
    free(tiles), free(p), free(f), free(got), free(want);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 1);
    if (argc < 2 || argv[1][0] == '-' || load_refs(argv[1]) < 0) {
        printf("Bail out! usage: test_augment_ops REFS.bin [--seed N] (tests/trainer/"
               "data_augment/refs.bin)\n");
        return 99;
    }
    g_ctx = kt_ctx(0);
    struct kern_ctx *threads = kt_ctx_threads(3);
    test_opencv();
    test_warp();
    test_paste();
    test_flip_mixup_layout();
    /* every SIMD level the machine has, forced in turn: the same bytes */
    const int top = kern_aug_simd(KERN_AUG_SIMD_AVX512);
    tap_diag("augmentation SIMD levels on this CPU: 0..%d", top);
    for (int level = KERN_AUG_SIMD_SCALAR; level <= top; level++) {
        is_int(kern_aug_simd(level), level, "SIMD level %d forced", level);
        char what[64];
        snprintf(what, sizeof what, "u8, level %d", level);
        test_batch(g_ctx, 200, 3, KERN_AUG_U8, what);
        snprintf(what, sizeof what, "f32, level %d", level);
        test_batch(g_ctx, 64, 4, KERN_AUG_F32, what);
        snprintf(what, sizeof what, "3 threads, level %d", level);
        test_batch(threads, 96, 5, KERN_AUG_U8, what);
        snprintf(what, sizeof what, "level %d", level);
        test_batch_s2d(g_ctx, 64, 3, KERN_LAYOUT_NHWC, what);
        test_batch_s2d(g_ctx, 70, 2, KERN_LAYOUT_NCHW, what);
        snprintf(what, sizeof what, "3 threads, level %d", level);
        test_batch_s2d(threads, 96, 5, KERN_LAYOUT_NHWC, what);
        test_sample_cpu(640, 640, 2, KERN_AUG_U8, level);
        test_sample_cpu(203, 203, 6, KERN_AUG_U8, level);
        test_sample_cpu(128, 128, 8, KERN_AUG_F32, level);
        test_sample_cpu(96, 150, 4, KERN_AUG_U8, level);
        test_sample_cpu(150, 97, 4, KERN_AUG_F32, level);
        test_sample_cpu(7, 5, 6, KERN_AUG_U8, level);
    }
    kern_aug_simd(KERN_AUG_SIMD_AVX512);
    {
        struct kern_aug_sample p;
        uint8_t *tiles[8], out[3 * 16 * 16];
        rand_sample(&p, 16, tiles);
        is_int(kern_ops_cpu()->aug_sample(out, 9, 16, 16, &p), -EINVAL,
               "sample_cpu: bad dtype: -EINVAL");
        is_int(kern_ops_cpu()->aug_sample(out, KERN_AUG_U8, 0, 16, &p), -EINVAL,
               "sample_cpu: height 0: -EINVAL");
        p.hsv = 1, p.lut.h[5] = 200;
        is_int(kern_ops_cpu()->aug_sample(out, KERN_AUG_U8, 16, 16, &p), -EINVAL,
               "sample_cpu: a LUT mapping H past 179: -EINVAL");
        for (int k = 0; k < 8; k++)
            free(tiles[k]);
    }
    ok(kern_aug_image_bytes(KERN_AUG_U8, 5, 7) == 105 &&
           kern_aug_image_bytes(KERN_AUG_F32, 5, 7) == 420 &&
           kern_aug_image_bytes(KERN_AUG_BF16_S2D_NHWC, 640, 640) == 320 * 320 * 16 * 2 &&
           kern_aug_image_bytes(KERN_AUG_BF16_S2D_NCHW, 4, 6) == 2 * 3 * 16 * 2 &&
           !kern_aug_image_bytes(KERN_AUG_BF16_S2D_NHWC, 5, 6) &&
           !kern_aug_image_bytes(KERN_AUG_BF16_S2D_NCHW, 6, 5) && !kern_aug_image_bytes(4, 8, 8) &&
           !kern_aug_image_bytes(KERN_AUG_U8, 0, 8) && !kern_aug_image_bytes(KERN_AUG_U8, 8, 32768),
       "kern_aug_image_bytes: 3 hw, 12 hw, 8 hw bytes; odd sides in space-to-depth, unknown "
       "dtypes and bad sizes give 0");
    {
        struct kern_aug_sample p;
        uint8_t *tiles[8];
        uint16_t out16[16 * 8 * 8];
        rand_sample(&p, 15, tiles);
        is_int(kern_ref_aug_batch(g_ctx, out16, KERN_AUG_BF16_S2D_NHWC, 15, &p, 1), -EINVAL,
               "batch: space-to-depth of an odd side: -EINVAL");
        is_int(kern_ref_aug_batch(g_ctx, out16, 4, 15, &p, 1), -EINVAL,
               "batch: an unknown dtype: -EINVAL");
        for (int k = 0; k < 8; k++)
            free(tiles[k]);
    }
    const struct kern_ops *K = kern_ops_ref();
    ok(K->aug_paste == kern_ref_aug_paste && K->aug_warp == kern_ref_aug_warp &&
           K->aug_hsv == kern_ref_aug_hsv && K->aug_flip == kern_ref_aug_flip &&
           K->aug_mixup == kern_ref_aug_mixup && K->aug_to_nchw == kern_ref_aug_to_nchw &&
           K->aug_batch == kern_ref_aug_batch,
       "kern_ops_ref() holds the augmentation ops");
    uint8_t one[3], two[3];
    struct kern_aug_canvas c = { .w = 1, .h = 1 };
    is_int(kern_ref_aug_paste(NULL, one, &c), -EINVAL, "NULL context: -EINVAL");
    const double eye[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    is_int(kern_ref_aug_warp(g_ctx, one, 0, 1, two, 1, 1, eye, 0, 114), -EINVAL,
           "warp to a 0-wide image: -EINVAL");
    is_int(kern_ref_aug_warp(g_ctx, one, 1, 1, two, 32768, 1, eye, 0, 114), -EINVAL,
           "warp from a 32768-wide image: -EINVAL");
    kern_ctx_destroy(threads);
    kern_ctx_destroy(g_ctx);
    free(g_ent);
    free(g_file);
    return tap_done();
}
