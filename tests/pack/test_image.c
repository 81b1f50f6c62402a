/*
 * pack/image: decode + resize against OpenCV references, EXIF orientation, error handling.
 *
 * usage: test_image DATA_DIR   (tests/pack/data, made by make_image_refs.py with python3-opencv)
 *
 * 1. Every case of img_refs.txt (decode, ultralytics load at size S, explicit resize; grey,
 *    CMYK/YCCK, progressive, truncated, EXIF variants) against the pixels cv2.imread +
 *    cv2.resize produced: max |diff| must be <= 1 (reported with the count of differing
 *    values), and is also checked to be 0, which the implementation achieves.
 * 2. ultralytics' size rule (img_sizes.txt, computed by Python).
 * 3. All 8 orientations built here by writing an Exif block into a JPEG, checked against the
 *    unrotated decode with the EXIF definitions (independent of pack_image_orient).
 * 4. SIMD and scalar resize kernels give the same bytes on random images and many shapes.
 * 5. Errors: empty, not JPEG, truncated headers, absurd sizes, bad markers, unsupported
 *    formats, bad Exif blocks (every prefix of a valid one), workspace checks.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "image_internal.h"
#include "tap.h"

static const char *data_dir;

static uint8_t *load_file(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)(n > 0 ? n : 0) + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

struct diff {
    int max;
    size_t count;
};

static struct diff compare(const uint8_t *a, const uint8_t *b, size_t n)
{
    struct diff d = { 0, 0 };
    for (size_t i = 0; i < n; i++) {
        const int e = abs((int)a[i] - (int)b[i]);
        if (e > d.max) d.max = e;
        if (e) d.count++;
    }
    return d;
}

/* ---- 1. OpenCV references ------------------------------------------------------------------ */

static int parse_interp(const char *s)
{
    if (!strcmp(s, "linear")) return PACK_IMAGE_INTERP_LINEAR;
    if (!strcmp(s, "area")) return PACK_IMAGE_INTERP_AREA;
    return -1;
}

static struct pack_image_decoder *g_ceil; /* made on first use by a loadceil case */

static void test_refs(struct pack_image_decoder *dec)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/img_refs.txt", data_dir);
    FILE *f = fopen(path, "r");
    if (!ok(f != NULL, "open %s", path)) return;
    char line[512];
    int cases = 0, exact = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char name[128], jpeg[128], op[16], arg[32], interp_s[16], expected[128];
        int w, h, orientation;
        unsigned warnings;
        if (sscanf(line, "%127s %127s %15s %31s %15s %d %d %127s %d %u", name, jpeg, op, arg,
                   interp_s, &w, &h, expected, &orientation, &warnings) != 10) {
            ok(0, "parse ref line: %s", line);
            continue;
        }
        cases++;
        size_t jlen, elen;
        uint8_t *jbuf = load_file(jpeg, &jlen), *ebuf = load_file(expected, &elen);
        if (!ok(jbuf && ebuf && elen == (size_t)w * h * 3, "%s: data files present", name)) {
            free(jbuf);
            free(ebuf);
            continue;
        }
        struct pack_image img;
        int rc;
        const int interp = parse_interp(interp_s);
        uint8_t *resized = NULL;
        const uint8_t *got = NULL;
        int gw = 0, gh = 0;
        if (!strcmp(op, "load") || !strcmp(op, "loadceil")) {
            /* loadceil: a decoder rounding as ultralytics master after v7.0 (math.ceil) */
            struct pack_image_decoder *d = dec;
            if (!strcmp(op, "loadceil")) {
                struct pack_image_opts io;
                pack_image_opts_default(&io);
                io.round = PACK_IMAGE_ROUND_CEIL;
                if (!g_ceil) pack_image_decoder_create(&io, &g_ceil);
                d = g_ceil;
            }
            rc = pack_image_load(d, atoi(arg), (enum pack_image_interp)interp, jbuf, jlen, &img);
            got = img.pixels, gw = img.width, gh = img.height;
        } else {
            rc = pack_image_decode(dec, jbuf, jlen, &img);
            got = img.pixels, gw = img.width, gh = img.height;
            if (rc == 0 && !strcmp(op, "resize")) {
                resized = malloc((size_t)w * h * 3);
                rc = pack_image_resize(resized, w, h, 3 * (size_t)w, img.pixels, img.width,
                                       img.height, 3 * (size_t)img.width,
                                       (enum pack_image_interp)interp, NULL, 0);
                got = resized, gw = w, gh = h;
            }
        }
        if (!ok(rc == 0, "%s: %s returns 0 (got %d: %s)", name, op, rc, pack_image_strerror(rc))) {
            free(jbuf);
            free(ebuf);
            free(resized);
            continue;
        }
        is_int(gw * 10000 + gh, w * 10000 + h, "%s: size %dx%d", name, w, h);
        if (gw == w && gh == h) {
            const struct diff d = compare(got, ebuf, elen);
            ok(d.max <= 1, "%s: matches OpenCV (max |diff| %d, %zu of %zu values differ)", name,
               d.max, d.count, elen);
            /* The requirement is +-1; the implementation is exact, and only this check sees an
             * off-by-one slip (a rounding, a weight, the CMYK formula). */
            ok(d.max == 0, "%s: bit-exact", name);
            if (d.max == 0) exact++;
        }
        is_int(img.warnings, warnings, "%s: warnings 0x%x", name, warnings);
        if (orientation >= 0) is_int(img.orientation, orientation, "%s: orientation", name);
        /* The probe reads the same header: oriented size and orientation. */
        struct pack_image_info info;
        rc = pack_image_probe(jbuf, jlen, &info);
        ok(rc == 0 && info.width == img.src_width && info.height == img.src_height &&
               info.orientation == img.orientation,
           "%s: probe gives %dx%d orientation %d", name, info.width, info.height, info.orientation);
        /* The scalar kernels agree with the SIMD ones on this image too. */
        if (strcmp(op, "decode") != 0) {
            uint8_t *scalar = malloc((size_t)w * h * 3);
            struct pack_image src;
            pack_image_decode(dec, jbuf, jlen, &src);
            const enum pack_image_interp ip =
                !strcmp(op, "load") ? img.interp : (enum pack_image_interp)interp;
            rc = pack_image_resize_impl(scalar, w, h, 3 * (size_t)w, src.pixels, src.width,
                                        src.height, 3 * (size_t)src.width, ip, NULL, 0, 0);
            ok(rc == 0 && compare(scalar, got, elen).max == 0,
               "%s: scalar kernels give the same pixels", name);
            free(scalar);
        }
        free(jbuf);
        free(ebuf);
        free(resized);
    }
    fclose(f);
    ok(cases >= 40, "ran %d reference cases", cases);
    tap_diag("%d of %d reference cases are bit-exact with OpenCV", exact, cases);
}

/* ---- 2. size rule ---------------------------------------------------------------------------- */

static void test_sizes(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/img_sizes.txt", data_dir);
    FILE *f = fopen(path, "r");
    if (!ok(f != NULL, "open %s", path)) return;
    char line[256];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        int w0, h0, s, w, h, wc, hc;
        char val[16];
        if (sscanf(line, "%d %d %d %d %d %15s %d %d", &w0, &h0, &s, &w, &h, val, &wc, &hc) != 8)
            continue;
        int gw = 0, gh = 0, cw = 0, ch = 0;
        const int rc = pack_image_target_size(w0, h0, s, PACK_IMAGE_ROUND_INT, &gw, &gh) |
                       pack_image_target_size(w0, h0, s, PACK_IMAGE_ROUND_CEIL, &cw, &ch);
        const int vi = pack_image_interp_resolve(PACK_IMAGE_INTERP_AUTO_VAL, w0, h0, s);
        n++;
        if (rc != 0 || gw != w || gh != h || cw != wc || ch != hc || vi != parse_interp(val) ||
            pack_image_interp_resolve(PACK_IMAGE_INTERP_AUTO_TRAIN, w0, h0, s) !=
                PACK_IMAGE_INTERP_LINEAR) {
            bad++;
            tap_diag("%dx%d -> %d: got %dx%d (ceil %dx%d) interp %d, want %dx%d (%dx%d) %s", w0, h0,
                     s, gw, gh, cw, ch, vi, w, h, wc, hc, val);
        }
    }
    fclose(f);
    ok(n >= 15 && bad == 0, "target size and interpolation rule on %d shapes (%d wrong)", n, bad);
    int a, b;
    ok(pack_image_target_size(0, 5, 640, PACK_IMAGE_ROUND_INT, &a, &b) == -EINVAL,
       "target size rejects w0 = 0");
    ok(pack_image_target_size(5, 5, 0, PACK_IMAGE_ROUND_INT, &a, &b) == -EINVAL,
       "target size rejects size 0");
    ok(pack_image_target_size(5, 5, 7, (enum pack_image_round)2, &a, &b) == -EINVAL,
       "target size rejects an unknown rounding");
    ok(pack_image_interp_resolve((enum pack_image_interp)7, 5, 5, 5) == -EINVAL,
       "unknown interp rejected");
}

/* ---- 3. orientation ------------------------------------------------------------------------- */

/* An APP1 Exif segment with one IFD0 entry Orientation (SHORT) = o, little-endian. */
static size_t exif_segment(uint8_t *seg, int o)
{
    static const uint8_t tmpl[] = { 0xFF, 0xE1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0,
                                    0,    'I',  'I',  42,   0,   8,   0,   0,   0,
                                    1,    0,    0x12, 0x01, 3,   0,   1,   0,   0,
                                    0,    0,    0,    0,    0,   0,   0,   0,   0 };
    memcpy(seg, tmpl, sizeof tmpl);
    seg[28] = (uint8_t)o;
    return sizeof tmpl;
}

/* EXIF 2.3: where pixel (x, y) of the displayed image comes from in the stored W x H one. */
static void exif_source(int o, int x, int y, int W, int H, int *sx, int *sy)
{
    switch (o) {
    case 2:
        *sx = W - 1 - x, *sy = y;
        break; /* mirrored horizontally */
    case 3:
        *sx = W - 1 - x, *sy = H - 1 - y;
        break; /* rotated 180 */
    case 4:
        *sx = x, *sy = H - 1 - y;
        break; /* mirrored vertically */
    case 5:
        *sx = y, *sy = x;
        break; /* transposed */
    case 6:
        *sx = y, *sy = H - 1 - x;
        break; /* rotated 90 CW to display */
    case 7:
        *sx = W - 1 - y, *sy = H - 1 - x;
        break; /* transversed */
    case 8:
        *sx = W - 1 - y, *sy = x;
        break; /* rotated 90 CCW to display */
    default:
        *sx = x, *sy = y;
        break;
    }
}

static void test_orientations(struct pack_image_decoder *dec)
{
    size_t blen;
    uint8_t *base = load_file("img_l101x37.jpg", &blen);
    if (!ok(base != NULL, "orientation base image")) return;
    struct pack_image img;
    if (!ok(pack_image_decode(dec, base, blen, &img) == 0, "decode unrotated")) {
        free(base);
        return;
    }
    const int W = img.width, H = img.height;
    uint8_t *ref = malloc((size_t)W * H * 3);
    memcpy(ref, img.pixels, (size_t)W * H * 3);
    uint8_t *jpeg = malloc(blen + 64);
    for (int o = 1; o <= 8; o++) {
        uint8_t seg[64];
        const size_t sl = exif_segment(seg, o);
        memcpy(jpeg, base, 2);
        memcpy(jpeg + 2, seg, sl);
        memcpy(jpeg + 2 + sl, base + 2, blen - 2);
        const int rc = pack_image_decode(dec, jpeg, blen + sl, &img);
        const int ow = o >= 5 ? H : W, oh = o >= 5 ? W : H;
        if (!ok(rc == 0 && img.width == ow && img.height == oh && img.orientation == o,
                "orientation %d: decodes to %dx%d", o, ow, oh))
            continue;
        size_t wrong = 0;
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                int sx, sy;
                exif_source(o, x, y, W, H, &sx, &sy);
                wrong += memcmp(img.pixels + 3 * ((size_t)y * ow + x),
                                ref + 3 * ((size_t)sy * W + sx), 3) != 0;
            }
        ok(wrong == 0, "orientation %d: every pixel where EXIF puts it (%zu wrong)", o, wrong);
        struct pack_image_info info;
        ok(pack_image_probe(jpeg, blen + sl, &info) == 0 && info.width == ow && info.height == oh &&
               info.coded_width == W && info.orientation == o,
           "orientation %d: probe reports %dx%d", o, info.width, info.height);
        /* Resizing happens after orientation, on the displayed shape. */
        struct pack_image r;
        ok(pack_image_load(dec, 64, PACK_IMAGE_INTERP_AUTO_VAL, jpeg, blen + sl, &r) == 0 &&
               (o >= 5 ? r.height : r.width) == 64 && r.src_width == ow,
           "orientation %d: long side 64 after orientation", o);
    }
    free(jpeg);
    free(ref);
    free(base);
}

/* ---- 4. SIMD vs scalar -------------------------------------------------------------------- */

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

static void test_kernels(void)
{
    static const int shapes[][4] = {
        { 640, 480, 320, 240 },
        { 640, 480, 213, 160 },
        { 333, 500, 427, 640 },
        { 97, 61, 64, 41 },
        { 1, 1, 7, 5 },
        { 5, 1, 640, 128 },
        { 61, 97, 41, 64 },
        { 100, 100, 99, 101 },
        { 96, 60, 32, 20 },
        { 48, 36, 96, 72 },
        { 50, 40, 150, 120 },
        { 7, 300, 2, 640 },
        { 64, 64, 17, 3 },
        { 3, 3, 2, 2 },
        { 2, 2, 1, 1 },
        { 1000, 10, 640, 7 },
        /* The AVX2 shuffle tables: COCO's enlargement, mild shrinks, and shrinks around 2.6x
         * where four values stop fitting in 16 source bytes. */
        { 500, 375, 640, 480 },
        { 800, 600, 640, 480 },
        { 1600, 120, 640, 48 },
        { 1700, 100, 640, 40 },
        { 1919, 30, 640, 10 },
        /* The byte tables (eight values from 16 source bytes) ahead of the four-value ones:
         * a large enlargement, shrinks near 1.5x where the byte tables stop part way along the
         * row and the four-value tables go on, 1.6x where the second octet needs 17 bytes (the
         * window's bound), and a width that leaves a partial block. */
        { 100, 50, 640, 320 },
        { 930, 40, 640, 28 },
        { 1024, 48, 640, 30 },
        { 970, 30, 640, 20 },
        { 37, 20, 53, 29 },
        /* Exact halves, the 2x2 block path: wide, and narrow enough that few or no vector
         * steps run. */
        { 1280, 720, 640, 360 },
        { 14, 6, 7, 3 },
        { 10, 4, 5, 2 },
        /* Integer block averages with the 16-bit horizontal sums (kx * ky <= 257) and
         * without (16 * 17 > 257). */
        { 1920, 1080, 640, 360 },
        { 24, 8, 6, 2 },
        { 256, 34, 16, 2 },
    };
    size_t bad = 0, runs = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int sw = shapes[s][0], sh = shapes[s][1], dw = shapes[s][2], dh = shapes[s][3];
        const size_t sstride = 3 * (size_t)sw + 5; /* padded rows exercise the strides */
        uint8_t *src = malloc(sstride * sh), *a = malloc((size_t)dw * dh * 3),
                *b = malloc((size_t)dw * dh * 3);
        for (size_t i = 0; i < sstride * sh; i++)
            src[i] = (uint8_t)rnd();
        for (int ip = 0; ip < 2; ip++) {
            const size_t ws = pack_image_resize_work_size(dw, dh, sw, sh, ip);
            void *work = malloc(ws ? ws : 1);
            const int r1 = pack_image_resize_impl(a, dw, dh, 3 * (size_t)dw, src, sw, sh, sstride,
                                                  ip, work, ws, 1);
            const int r2 = pack_image_resize_impl(b, dw, dh, 3 * (size_t)dw, src, sw, sh, sstride,
                                                  ip, NULL, 0, 0);
            runs++;
            if (r1 || r2 || memcmp(a, b, (size_t)dw * dh * 3)) {
                bad++;
                tap_diag("%dx%d -> %dx%d interp %d: rc %d/%d, max diff %d", sw, sh, dw, dh, ip, r1,
                         r2, compare(a, b, (size_t)dw * dh * 3).max);
            }
            free(work);
        }
        free(src);
        free(a);
        free(b);
    }
    ok(bad == 0, "SIMD and scalar resize agree on %zu random cases", runs);

    /* Integer-factor INTER_AREA against the formula itself: round_even(block sum * (1.f/area)),
     * including blocks taller than 257 rows (32-bit sums). */
    static const int blocks[][4] = {
        { 6, 4, 2, 2 }, { 600, 600, 2, 2 }, { 2, 600, 1, 2 }, { 12, 9, 4, 3 }
    };
    int formula_ok = 1;
    for (size_t s = 0; s < sizeof blocks / sizeof blocks[0]; s++) {
        const int sw = blocks[s][0], sh = blocks[s][1], dw = blocks[s][2], dh = blocks[s][3];
        const int kx = sw / dw, ky = sh / dh;
        uint8_t *src = malloc((size_t)sw * sh * 3), *dst = malloc((size_t)dw * dh * 3);
        for (size_t i = 0; i < (size_t)sw * sh * 3; i++)
            src[i] = (uint8_t)rnd();
        pack_image_resize(dst, dw, dh, 3 * (size_t)dw, src, sw, sh, 3 * (size_t)sw,
                          PACK_IMAGE_INTERP_AREA, NULL, 0);
        for (int y = 0; y < dh; y++)
            for (int x = 0; x < dw; x++)
                for (int c = 0; c < 3; c++) {
                    long sum = 0;
                    for (int j = 0; j < ky; j++)
                        for (int i = 0; i < kx; i++)
                            sum += src[3 * ((size_t)(y * ky + j) * sw + (size_t)(x * kx + i)) + c];
                    long want = lrintf((float)sum * (1.f / (float)(kx * ky)));
                    if (kx == 2 && ky == 2) want = (sum + 2) >> 2;
                    formula_ok &= dst[3 * ((size_t)y * dw + x) + c] == want;
                }
        free(src);
        free(dst);
    }
    ok(formula_ok,
       "integer-factor INTER_AREA equals OpenCV's block formula (incl. 300-row blocks)");

    /* A constant image stays constant through every path (catches weight-sum slips). */
    uint8_t *src = malloc(90 * 70 * 3), *dst = malloc(200 * 200 * 3);
    memset(src, 200, 90 * 70 * 3);
    int flat = 1;
    static const int sizes[][2] = { { 45, 35 }, { 30, 70 }, { 200, 13 }, { 91, 71 }, { 89, 69 } };
    for (int k = 0; k < 5; k++)
        for (int ip = 0; ip < 2; ip++) {
            pack_image_resize(dst, sizes[k][0], sizes[k][1], 3 * (size_t)sizes[k][0], src, 90, 70,
                              270, ip, NULL, 0);
            for (int i = 0; i < sizes[k][0] * sizes[k][1] * 3; i++)
                flat &= dst[i] == 200;
        }
    ok(flat, "a flat image stays flat for every shape and interpolation");
    free(src);
    free(dst);
}

/* ---- 5. errors ------------------------------------------------------------------------------ */

/* Offset of the first marker `m` in a JPEG (scan of the header). */
static size_t find_marker(const uint8_t *p, size_t n, uint8_t m)
{
    for (size_t i = 2; i + 1 < n; i++)
        if (p[i] == 0xFF && p[i + 1] == m) return i;
    return 0;
}

static void expect(struct pack_image_decoder *dec, const void *p, size_t n, int want,
                   const char *what)
{
    struct pack_image img;
    const int rc = pack_image_decode(dec, p, n, &img);
    if (!ok(rc == want, "%s: decode gives %d (%s)", what, rc, pack_image_strerror(rc)))
        tap_diag("want %d (%s); detail: %s", want, pack_image_strerror(want),
                 pack_image_decoder_detail(dec));
    else if (want < 0)
        ok(pack_image_decoder_detail(dec)[0] != '\0', "%s: detail message \"%s\"", what,
           pack_image_decoder_detail(dec));
}

static void test_errors(struct pack_image_decoder *dec)
{
    size_t n;
    uint8_t *good = load_file("img_l97x61.jpg", &n);
    if (!ok(good != NULL, "base JPEG for error cases")) return;
    uint8_t *buf = malloc(n + 64);
    struct pack_image_info info;

    expect(dec, good, 0, -PACK_IMAGE_EEMPTY, "empty input");
    ok(pack_image_probe("", 0, &info) == -PACK_IMAGE_EEMPTY, "probe: empty input");
    expect(dec, "hello, world: not an image", 26, -PACK_IMAGE_ENOTJPEG, "text");
    /* PNG, BMP and WebP are read too (test_image_formats.c): a PNG cut inside IHDR is corrupt */
    expect(dec, "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16, -PACK_IMAGE_ECORRUPT, "PNG cut in IHDR");
    expect(dec, "\xff", 1, -PACK_IMAGE_ENOTJPEG, "one byte");
    expect(dec, "\xff\xd8", 2, -PACK_IMAGE_ETRUNC, "SOI only");
    memcpy(buf, good, 2); /* FF D8 00 ...: libjpeg would skip the byte, OpenCV rejects it */
    buf[2] = 0;
    memcpy(buf + 3, good + 2, n - 2);
    expect(dec, buf, n + 1, -PACK_IMAGE_ENOTJPEG, "FF D8 not followed by a marker");
    expect(dec, "\xff\xd8\xff\xd9", 4, -PACK_IMAGE_ECORRUPT, "SOI EOI");

    const size_t sos = find_marker(good, n, 0xDA), sof = find_marker(good, n, 0xC0);
    ok(sos > 0 && sof > 0, "base JPEG has SOF0 at %zu and SOS at %zu", sof, sos);
    /* Every cut inside the header is a clean truncation error. */
    int cuts_ok = 1;
    for (size_t cut = 3; cut < sos + 4; cut++) {
        struct pack_image img;
        const int rc = pack_image_decode(dec, good, cut, &img);
        if (rc != -PACK_IMAGE_ETRUNC) {
            cuts_ok = 0;
            tap_diag("cut at %zu: %d", cut, rc);
        }
    }
    ok(cuts_ok, "every cut inside the header (%zu of them) gives ETRUNC", sos + 1);
    /* Cut right after the scan header: no image data at all; libjpeg (and OpenCV) still
     * produce an image, flagged. */
    const size_t sos_end = sos + 2 + ((size_t)good[sos + 2] << 8 | good[sos + 3]);
    {
        struct pack_image img;
        const int rc = pack_image_decode(dec, good, sos_end, &img);
        ok(rc == 0 && (img.warnings & PACK_IMAGE_WARN_DATA) &&
               (img.warnings & PACK_IMAGE_WARN_NO_EOI),
           "no scan data: decodes with WARN_DATA|WARN_NO_EOI (rc %d, warnings 0x%x)", rc,
           rc == 0 ? img.warnings : 0);
    }

    /* Absurd sizes, patched into SOF0 (height at +5, width at +7). */
    memcpy(buf, good, n);
    buf[sof + 5] = 0x9C, buf[sof + 6] = 0x40; /* height 40000 */
    expect(dec, buf, n, -PACK_IMAGE_ETOOBIG, "height 40000");
    memcpy(buf, good, n);
    buf[sof + 5] = 0x4E, buf[sof + 6] = 0x20; /* 20000 x 20000 = 4e8 > 2^28 pixels */
    buf[sof + 7] = 0x4E, buf[sof + 8] = 0x20;
    expect(dec, buf, n, -PACK_IMAGE_ETOOBIG, "20000x20000");
    ok(pack_image_probe(buf, n, &info) == 0 && info.width == 20000,
       "probe reports the absurd size without allocating");
    /* 16000 x 16000 is within the pixel limit, but this file's few KB cannot code 4M blocks:
     * refused before anything is allocated (issue 20: 400 MB per worker before the failure) */
    memcpy(buf, good, n);
    buf[sof + 5] = 0x3E, buf[sof + 6] = 0x80; /* 16000 x 16000 */
    buf[sof + 7] = 0x3E, buf[sof + 8] = 0x80;
    expect(dec, buf, n, -PACK_IMAGE_ETOOBIG, "16000x16000 in a small file");
    ok(strstr(pack_image_decoder_detail(dec), "more 8x8 blocks than its"),
       "the detail says why: %s", pack_image_decoder_detail(dec));
    buf[sof + 1] = 0xC2; /* progressive: the same floor */
    expect(dec, buf, n, -PACK_IMAGE_ETOOBIG, "16000x16000 progressive in a small file");
    memcpy(buf, good, n);
    buf[sof + 7] = 0, buf[sof + 8] = 0; /* width 0 */
    expect(dec, buf, n, -PACK_IMAGE_ECORRUPT, "width 0");
    memcpy(buf, good, n);
    buf[sof + 4] = 12; /* 12-bit precision */
    expect(dec, buf, n, -PACK_IMAGE_EUNSUPPORTED, "12-bit precision");
    memcpy(buf, good, n);
    buf[sof + 1] = 0xC3; /* lossless */
    expect(dec, buf, n, -PACK_IMAGE_EUNSUPPORTED, "lossless SOF3");
    memcpy(buf, good, n);
    buf[sof + 3] = 0xFF; /* segment length runs past the end */
    buf[sof + 2] = 0xFF;
    expect(dec, buf, n, -PACK_IMAGE_ETRUNC, "SOF length past the end");
    memcpy(buf, good, n);
    buf[sof + 2] = 0, buf[sof + 3] = 1; /* length 1 < 2 */
    expect(dec, buf, n, -PACK_IMAGE_ECORRUPT, "marker length 1");
    memcpy(buf, good, n);
    buf[sof + 1] = 0xC1; /* SOF1 (extended sequential, 8-bit) is fine */
    expect(dec, buf, n, 0, "SOF1 8-bit decodes");
    /* SOS before any SOF: rename SOF0 to an APP segment. */
    memcpy(buf, good, n);
    buf[sof + 1] = 0xE5;
    expect(dec, buf, n, -PACK_IMAGE_ECORRUPT, "SOS without SOF");
    /* Destroy the Huffman tables: libjpeg-turbo fails, we report it. */
    memcpy(buf, good, n);
    const size_t dht = find_marker(good, n, 0xC4);
    memset(buf + dht + 4, 0xFF, 17);
    {
        struct pack_image img;
        const int rc = pack_image_decode(dec, buf, n, &img);
        ok(rc == -PACK_IMAGE_ECORRUPT, "bad Huffman table: ECORRUPT (got %d, detail \"%s\")", rc,
           pack_image_decoder_detail(dec));
    }
    /* Garbage limits: a tiny per-decoder limit. */
    struct pack_image_opts o;
    pack_image_opts_default(&o);
    o.max_pixels = 1000;
    struct pack_image_decoder *small;
    ok(pack_image_decoder_create(&o, &small) == 0, "decoder with a 1000-pixel limit");
    expect(small, good, n, -PACK_IMAGE_ETOOBIG, "97x61 above a 1000-pixel limit");
    pack_image_decoder_destroy(small);
    o.max_side = 0;
    ok(pack_image_decoder_create(&o, &small) == -EINVAL, "max_side 0 rejected");
    pack_image_decoder_destroy(NULL);

    /* Argument checks. */
    struct pack_image img;
    ok(pack_image_decode(NULL, good, n, &img) == -EINVAL, "NULL decoder");
    ok(pack_image_load(dec, -1, PACK_IMAGE_INTERP_LINEAR, good, n, &img) == -EINVAL,
       "negative size");
    ok(pack_image_load(dec, 64, (enum pack_image_interp)9, good, n, &img) == -EINVAL, "bad interp");
    ok(pack_image_resize(buf, 4, 4, 12, good, 4, 4, 11, PACK_IMAGE_INTERP_LINEAR, NULL, 0) ==
           -EINVAL,
       "resize: stride below 3*width");
    ok(pack_image_resize(buf, 4, 4, 12, good, 5, 4, 15, PACK_IMAGE_INTERP_AUTO_VAL, NULL, 0) ==
           -EINVAL,
       "resize: policies are for pack_image_load only");
    uint8_t tiny[8];
    ok(pack_image_resize(buf, 4, 4, 12, good, 5, 4, 15, PACK_IMAGE_INTERP_LINEAR, tiny, 8) ==
           -EINVAL,
       "resize: workspace too small");
    ok(pack_image_resize_work_size(4, 4, 5, 4, PACK_IMAGE_INTERP_LINEAR) > 8, "work size reported");
    ok(!strcmp(pack_image_strerror(-PACK_IMAGE_ETRUNC),
               "truncated JPEG (data ends inside the header)") &&
           !strcmp(pack_image_strerror(-ENOMEM), strerror(ENOMEM)),
       "strerror names our codes and errno codes");
    free(buf);
    free(good);
}

static void test_exif_parser(void)
{
    /* A valid block with several tags before Orientation = 6. */
    static const uint8_t blk[] = {
        'I',  'I',  42, 0, 8,   0,   0,   0,   3,   0,       /* header, 3 entries */
        0x0F, 0x01, 2,  0, 6,   0,   0,   0,   50,  0, 0, 0, /* Make, 6 bytes at 50 */
        0x1A, 0x01, 5,  0, 1,   0,   0,   0,   56,  0, 0, 0, /* XResolution at 56 */
        0x12, 0x01, 3,  0, 1,   0,   0,   0,   6,   0, 0, 0, /* Orientation 6 */
        0,    0,    0,  0, 'C', 'a', 'n', 'o', 'n', 0,       /* next IFD, Make text at 50 */
        72,   0,    0,  0, 1,   0,   0,   0
    }; /* rational at 56 */
    int bad;
    ok(pack_image_exif_orientation(blk, sizeof blk, &bad) == 6 && !bad, "valid block: 6");
    /* Every prefix: no crash, and either the right answer or none. A prefix that cuts the Make
     * text or the rational makes OpenCV stop before Orientation. */
    int sane = 1;
    for (size_t len = 0; len < sizeof blk; len++) {
        const int o = pack_image_exif_orientation(blk, len, &bad);
        if ((o != 0 && o != 6) || (o == 0 && !bad)) sane = 0;
    }
    ok(sane, "every truncation of the block is handled");
    uint8_t b2[sizeof blk];
    memcpy(b2, blk, sizeof blk);
    b2[8] = 0xFF, b2[9] = 0xFF; /* 65535 entries */
    ok(pack_image_exif_orientation(b2, sizeof b2, &bad) == 6 && bad,
       "huge entry count: stops at the end, keeps 6");
    memcpy(b2, blk, sizeof blk);
    b2[4] = 0xF8, b2[5] = 0xFF, b2[6] = 0xFF, b2[7] = 0xFF; /* IFD offset near 2^32 */
    ok(pack_image_exif_orientation(b2, sizeof b2, &bad) == 0 && bad, "IFD offset 2^32-8");
    memcpy(b2, blk, sizeof blk);
    b2[30] = 0xFC, b2[31] = 0xFF, b2[32] = 0xFF, b2[33] = 0xFF; /* XResolution's offset */
    ok(pack_image_exif_orientation(b2, sizeof b2, &bad) == 0 && bad,
       "rational offset 2^32-4 ends the walk before Orientation (as OpenCV)");
    memcpy(b2, blk, sizeof blk);
    b2[0] = 'M', b2[1] = 'M';
    ok(pack_image_exif_orientation(b2, sizeof b2, &bad) == 0, "wrong byte order: no magic");
    ok(pack_image_exif_orientation(NULL, 0, &bad) == 0 && bad, "NULL block");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_image DATA_DIR\n");
        return 99;
    }
    data_dir = argv[1];
    struct pack_image_decoder *dec;
    if (pack_image_decoder_create(NULL, &dec) != 0) {
        fprintf(stderr, "cannot create decoder\n");
        return 99;
    }
    test_refs(dec);
    test_sizes();
    test_orientations(dec);
    test_kernels();
    test_errors(dec);
    test_exif_parser();
    pack_image_decoder_destroy(dec);
    pack_image_decoder_destroy(g_ceil);
    return tap_done();
}
