/*
 * PNG, BMP and WebP decoding for pack_image_decode (image.h), as cv2.imread(IMREAD_COLOR) reads
 * them and then BGR -> RGB: PNG with libpng (palette and low-bit grey expanded, grey replicated,
 * 16-bit samples cut to their high byte, alpha dropped: OpenCV's transforms for an 8-bit
 * 3-channel read), WebP with libwebp (alpha dropped), BMP here (OpenCV's own reader: 24- and
 * 32-bit BI_RGB, 8-bit palettes, bottom-up or top-down rows). Lossless formats give the file's
 * pixels, so these match OpenCV exactly; a lossy WebP is libwebp's on both sides.
 * Every size is checked against the decoder's limits before anything is allocated for it.
 */
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>

#include "image_internal.h"

enum pack_image_format pack_image_sniff(const void *src, size_t len)
{
    const uint8_t *p = src;
    if (len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return PACK_IMAGE_FMT_JPEG;
    if (len >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return PACK_IMAGE_FMT_PNG;
    if (len >= 2 && p[0] == 'B' && p[1] == 'M') return PACK_IMAGE_FMT_BMP;
    if (len >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return PACK_IMAGE_FMT_WEBP;
    return PACK_IMAGE_FMT_JPEG; /* the JPEG walk names what is wrong with anything else */
}

static void say(char *d, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *d, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d, cap, fmt, ap);
    va_end(ap);
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    uint8_t *b = realloc(*buf, need);
    if (!b) return -ENOMEM;
    *buf = b;
    *cap = need;
    return 0;
}

static int check_size(const struct pack_image_opts *o, uint64_t w, uint64_t h, char *d, size_t dc)
{
    if (w < 1 || h < 1) {
        say(d, dc, "zero width or height");
        return -PACK_IMAGE_ECORRUPT;
    }
    if (w > (uint64_t)o->max_side || h > (uint64_t)o->max_side || w * h > o->max_pixels) {
        say(d, dc, "size %llux%llu is above the limit (%d per side, %llu pixels)",
            (unsigned long long)w, (unsigned long long)h, o->max_side,
            (unsigned long long)o->max_pixels);
        return -PACK_IMAGE_ETOOBIG;
    }
    return 0;
}

/* ---- PNG ---------------------------------------------------------------------------------- */

struct png_src {
    const uint8_t *p;
    size_t len, at;
    char *detail;
    size_t dcap;
};

static void png_read_cb(png_structp png, png_bytep out, size_t n)
{
    struct png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->at) png_error(png, "the file ends early");
    memcpy(out, s->p + s->at, n);
    s->at += n;
}

static void png_error_cb(png_structp png, png_const_charp msg)
{
    struct png_src *s = png_get_error_ptr(png);
    say(s->detail, s->dcap, "libpng: %s", msg);
    png_longjmp(png, 1);
}

static void png_warning_cb(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static int decode_png(const uint8_t *p, size_t len, const struct pack_image_opts *o, uint8_t **buf,
                      size_t *cap, int *w, int *h, char *d, size_t dc)
{
    struct png_src s = { p, len, 0, d, dc };
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_error_cb, png_warning_cb);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, &info, NULL);
        return -ENOMEM;
    }
    png_bytep *rows = NULL;
    volatile int rc = 0;
    if (setjmp(png_jmpbuf(png))) {
        rc = -PACK_IMAGE_ECORRUPT;
        goto out;
    }
    png_set_read_fn(png, &s, png_read_cb);
    png_set_user_limits(png, (png_uint_32)o->max_side, (png_uint_32)o->max_side);
    png_read_info(png, info);
    const png_uint_32 pw = png_get_image_width(png, info), ph = png_get_image_height(png, info);
    if ((rc = check_size(o, pw, ph, d, dc)) < 0) goto out;
    const int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    /* OpenCV's transforms for an 8-bit BGR read (we keep RGB) */
    if (depth == 16) png_set_strip_16(png);
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (!(ct & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_rowbytes(png, info) != (size_t)pw * 3) {
        say(d, dc, "PNG of colour type %d, depth %d: not read as 8-bit RGB", ct, depth);
        rc = -PACK_IMAGE_EUNSUPPORTED;
        goto out;
    }
    if (grow(buf, cap, (size_t)pw * ph * 3) < 0 || !(rows = malloc(ph * sizeof *rows))) {
        rc = -ENOMEM;
        goto out;
    }
    for (png_uint_32 y = 0; y < ph; y++)
        rows[y] = *buf + (size_t)y * pw * 3;
    png_read_image(png, rows);
    *w = (int)pw;
    *h = (int)ph;
out:
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return rc;
}

/* ---- WebP --------------------------------------------------------------------------------- */

static int decode_webp(const uint8_t *p, size_t len, const struct pack_image_opts *o, uint8_t **buf,
                       size_t *cap, int *w, int *h, char *d, size_t dc)
{
    int ww = 0, hh = 0;
    if (!WebPGetInfo(p, len, &ww, &hh)) {
        say(d, dc, "libwebp: not a WebP image it can read");
        return -PACK_IMAGE_ECORRUPT;
    }
    int rc = check_size(o, (uint64_t)ww, (uint64_t)hh, d, dc);
    if (rc < 0) return rc;
    const size_t bytes = (size_t)ww * (size_t)hh * 3;
    if (grow(buf, cap, bytes) < 0) return -ENOMEM;
    if (!WebPDecodeRGBInto(p, len, *buf, bytes, ww * 3)) {
        say(d, dc, "libwebp: the image data does not decode");
        return -PACK_IMAGE_ECORRUPT;
    }
    *w = ww;
    *h = hh;
    return 0;
}

/* ---- BMP ---------------------------------------------------------------------------------- */

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

struct bmp_header {
    uint32_t data_off, hsize, ncolors;
    uint64_t w, h;
    int bpp;
    bool top_down;
};

/* The BMP headers, what decode_bmp checks before the limits (also pack_image_probe's answer). */
static int bmp_parse(const uint8_t *p, size_t len, struct bmp_header *b, char *d, size_t dc)
{
    if (len < 30) {
        say(d, dc, "BMP headers cut short (%zu bytes)", len);
        return -PACK_IMAGE_ECORRUPT;
    }
    b->data_off = le32(p + 10);
    b->hsize = le32(p + 14);
    if (b->hsize < 40) {
        say(d, dc, "BMP with a %u-byte info header (OS/2 bitmaps are not read)", b->hsize);
        return -PACK_IMAGE_EUNSUPPORTED;
    }
    if (14 + (uint64_t)b->hsize > len || len < 54) {
        say(d, dc, "BMP info header of %u bytes cut short (%zu bytes)", b->hsize, len);
        return -PACK_IMAGE_ECORRUPT;
    }
    const int32_t bw = (int32_t)le32(p + 18), bh = (int32_t)le32(p + 22);
    const int planes = p[26] | p[27] << 8;
    b->bpp = p[28] | p[29] << 8;
    const uint32_t comp = le32(p + 30);
    b->ncolors = le32(p + 46);
    b->top_down = bh < 0;
    b->w = (uint64_t)(bw < 0 ? -(int64_t)bw : bw);
    b->h = (uint64_t)(bh < 0 ? -(int64_t)bh : bh);
    if (bw <= 0 || b->h == 0) {
        say(d, dc, "BMP of %d x %d pixels", bw, bh);
        return -PACK_IMAGE_ECORRUPT;
    }
    /* BI_RGB, or BI_BITFIELDS with the standard 32-bit masks */
    const bool std32 = comp == 3 && b->bpp == 32 && len >= 66 && le32(p + 54) == 0x00FF0000u &&
                       le32(p + 58) == 0x0000FF00u && le32(p + 62) == 0x000000FFu;
    if (planes != 1 || (comp != 0 && !std32) || (b->bpp != 8 && b->bpp != 24 && b->bpp != 32)) {
        say(d, dc,
            "BMP of %d bits per pixel, compression %u (24/32-bit uncompressed and 8-bit palettes "
            "are read)",
            b->bpp, comp);
        return -PACK_IMAGE_EUNSUPPORTED;
    }
    return 0;
}

static int decode_bmp(const uint8_t *p, size_t len, const struct pack_image_opts *o, uint8_t **buf,
                      size_t *cap, int *w, int *h, char *d, size_t dc)
{
    struct bmp_header b;
    int rc = bmp_parse(p, len, &b, d, dc);
    if (rc < 0) return rc;
    if ((rc = check_size(o, b.w, b.h, d, dc)) < 0) return rc;
    const uint64_t W = b.w, H = b.h, stride = (W * (uint64_t)b.bpp + 31) / 32 * 4;
    if (b.data_off > len || stride > (len - b.data_off) / H) {
        say(d, dc, "BMP pixel data cut short: %llu rows of %llu bytes from offset %u in %zu bytes",
            (unsigned long long)H, (unsigned long long)stride, b.data_off, len);
        return -PACK_IMAGE_ECORRUPT;
    }
    uint8_t pal[256][3];
    if (b.bpp == 8) {
        const uint32_t n = b.ncolors ? b.ncolors : 256;
        const uint64_t pal_off = 14 + (uint64_t)b.hsize;
        if (n > 256 || pal_off + 4 * (uint64_t)n > b.data_off) {
            say(d, dc, "BMP palette of %u colours does not fit before the pixels", n);
            return -PACK_IMAGE_ECORRUPT;
        }
        memset(pal, 0, sizeof pal);
        for (uint32_t k = 0; k < n; k++) /* BGRx entries */
            pal[k][0] = p[pal_off + 4 * k + 2], pal[k][1] = p[pal_off + 4 * k + 1],
            pal[k][2] = p[pal_off + 4 * k];
    }
    if (grow(buf, cap, (size_t)(W * H * 3)) < 0) return -ENOMEM;
    for (uint64_t y = 0; y < H; y++) {
        const uint8_t *src = p + b.data_off + stride * (b.top_down ? y : H - 1 - y);
        uint8_t *dst = *buf + y * W * 3;
        for (uint64_t x = 0; x < W; x++) {
            if (b.bpp == 8) {
                memcpy(dst + 3 * x, pal[src[x]], 3);
            } else {
                const uint8_t *sp = src + x * (uint64_t)(b.bpp / 8);
                dst[3 * x] = sp[2], dst[3 * x + 1] = sp[1], dst[3 * x + 2] = sp[0];
            }
        }
    }
    *w = (int)W;
    *h = (int)H;
    return 0;
}

int pack_image_probe_other(enum pack_image_format f, const uint8_t *p, size_t len, int *w, int *h)
{
    char d[8];
    switch (f) {
    case PACK_IMAGE_FMT_PNG: {
        /* the signature, then IHDR first: what libpng checks before anything else */
        if (len < 24 || memcmp(p + 12, "IHDR", 4)) return -PACK_IMAGE_ECORRUPT;
        const uint32_t pw =
            (uint32_t)p[16] << 24 | (uint32_t)p[17] << 16 | (uint32_t)p[18] << 8 | p[19];
        const uint32_t ph =
            (uint32_t)p[20] << 24 | (uint32_t)p[21] << 16 | (uint32_t)p[22] << 8 | p[23];
        if (pw < 1 || ph < 1 || pw > 0x7fffffffu || ph > 0x7fffffffu) return -PACK_IMAGE_ECORRUPT;
        *w = (int)pw, *h = (int)ph;
        return 0;
    }
    case PACK_IMAGE_FMT_WEBP:
        return WebPGetInfo(p, len, w, h) ? 0 : -PACK_IMAGE_ECORRUPT;
    case PACK_IMAGE_FMT_BMP: {
        struct bmp_header b;
        const int rc = bmp_parse(p, len, &b, d, sizeof d);
        if (rc < 0) return rc;
        if (b.w > 0x7fffffff || b.h > 0x7fffffff) return -PACK_IMAGE_ETOOBIG;
        *w = (int)b.w, *h = (int)b.h;
        return 0;
    }
    default:
        return -EINVAL;
    }
}

int pack_image_decode_other(enum pack_image_format f, const uint8_t *p, size_t len,
                            const struct pack_image_opts *o, uint8_t **buf, size_t *cap, int *w,
                            int *h, char *detail, size_t dcap)
{
    switch (f) {
    case PACK_IMAGE_FMT_PNG:
        return decode_png(p, len, o, buf, cap, w, h, detail, dcap);
    case PACK_IMAGE_FMT_WEBP:
        return decode_webp(p, len, o, buf, cap, w, h, detail, dcap);
    case PACK_IMAGE_FMT_BMP:
        return decode_bmp(p, len, o, buf, cap, w, h, detail, dcap);
    default:
        return -EINVAL;
    }
}
