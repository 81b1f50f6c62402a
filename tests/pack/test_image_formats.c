/*
 * pack_image_decode on PNG (RGB, RGBA, grey, 16-bit, palette, 2-bit grey, interlaced), BMP
 * (24-bit, 32-bit, 8-bit grey palette, bottom-up and top-down) and WebP (lossless, lossy, with
 * alpha) against cv2.imread(IMREAD_COLOR) -> RGB (data/fmt/refs.txt, make_format_refs.py):
 * size and CRC-32 of the pixels equal; then damaged files (cut short, flipped bytes, absurd
 * sizes) fail with a clear error in bounded time.
 * Usage: test_image_formats DATA_DIR
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "crc32_testutil.h"
#include "tap.h"

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: test_image_formats DATA_DIR\n");
        return 99;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/fmt/refs.txt", argv[1]);
    FILE *refs = fopen(path, "r");
    if (!ok(refs != NULL, "%s", path)) return tap_done();
    struct pack_image_decoder *dec = NULL;
    pack_image_decoder_create(NULL, &dec);
    char line[512];
    uint8_t *keep_png = NULL, *keep_bmp = NULL, *keep_webp = NULL;
    size_t png_len = 0, bmp_len = 0, webp_len = 0;
    while (fgets(line, sizeof line, refs)) {
        char name[128];
        int w, h;
        unsigned crc;
        if (line[0] == '#' || sscanf(line, "%127s %d %d %x", name, &w, &h, &crc) != 4) continue;
        snprintf(path, sizeof path, "%s/fmt/%s", argv[1], name);
        size_t len = 0;
        uint8_t *data = slurp(path, &len);
        struct pack_image im;
        const int rc = data ? pack_image_decode(dec, data, len, &im) : -ENOENT;
        const bool same = rc == 0 && im.width == w && im.height == h &&
                          test_crc32(im.pixels, (size_t)w * h * 3) == crc;
        ok(same, "%s: %dx%d, the pixels cv2.imread gives (%s)", name, w, h,
           rc ? pack_image_decoder_detail(dec) : "");
        if (!strcmp(name, "rgb.png")) keep_png = data, png_len = len, data = NULL;
        if (!strcmp(name, "rgb.bmp")) keep_bmp = data, bmp_len = len, data = NULL;
        if (!strcmp(name, "lossy.webp")) keep_webp = data, webp_len = len, data = NULL;
        free(data);
    }
    fclose(refs);
    /* damaged files: every prefix, and every byte flipped in turn, decode or fail cleanly */
    struct {
        const char *what, *fmt;
        uint8_t *p;
        size_t n;
    } k[3] = { { "png", "PNG", keep_png, png_len },
               { "bmp", "BMP", keep_bmp, bmp_len },
               { "webp", "WebP", keep_webp, webp_len } };
    for (int f = 0; f < 3; f++) {
        if (!k[f].p) continue;
        int cut_fail = 0, crashes = 0;
        for (size_t n = 0; n + 1 < k[f].n; n += 7) {
            struct pack_image im;
            const int rc = pack_image_decode(dec, k[f].p, n, &im);
            cut_fail += rc < 0 && pack_image_decoder_detail(dec)[0];
            crashes += rc == 0 && (im.width < 1 || im.height < 1);
        }
        ok(cut_fail > 0 && crashes == 0, "%s cut short: refused with a message (%d cuts)",
           k[f].what, cut_fail);
        /* the line names the file's format, never a JPEG's (issue 44) */
        int jpeg_said = 0, named = 0, failed = 0;
        for (size_t n = 16; n + 1 < k[f].n; n += 13) {
            struct pack_image im;
            const int rc = pack_image_decode(dec, k[f].p, n, &im);
            if (rc >= 0 || rc == -ENOMEM) continue;
            char said[160];
            pack_image_error_line(rc, k[f].p, n, said, sizeof said);
            failed++;
            jpeg_said += strstr(said, "JPEG") != NULL;
            named += strstr(said, k[f].fmt) != NULL;
        }
        ok(failed > 0 && jpeg_said == 0 && named == failed,
           "%s cut short: every error line names %s, none says JPEG (%d of %d)", k[f].what,
           k[f].fmt, named, failed);
        uint8_t *copy = malloc(k[f].n);
        int bad = 0;
        for (size_t i = 0; i < k[f].n && i < 400; i++) {
            memcpy(copy, k[f].p, k[f].n);
            copy[i] ^= 0xA5;
            struct pack_image im;
            const int rc = pack_image_decode(dec, copy, k[f].n, &im);
            bad += rc == 0 && (im.width < 1 || im.height < 1 || im.width > 100000);
        }
        ok(bad == 0, "%s with a flipped byte: decodes to a sane size or fails", k[f].what);
        free(copy);
    }
    /* absurd sizes: a BMP claiming 60000 x 60000 is refused before any allocation */
    if (keep_bmp && bmp_len > 30) {
        uint8_t *b = malloc(bmp_len);
        memcpy(b, keep_bmp, bmp_len);
        const int32_t big = 60000;
        memcpy(b + 18, &big, 4), memcpy(b + 22, &big, 4);
        struct pack_image im;
        const int rc = pack_image_decode(dec, b, bmp_len, &im);
        char said[160];
        pack_image_error_line(rc, b, bmp_len, said, sizeof said);
        ok(rc == -PACK_IMAGE_ETOOBIG && !strcmp(said, "BMP dimensions above the decoder limits"),
           "a BMP claiming 60000x60000: too big, said as a BMP's (%s; %s)", said,
           pack_image_decoder_detail(dec));
        free(b);
    }
    free(keep_png), free(keep_bmp), free(keep_webp);
    pack_image_decoder_destroy(dec);
    return tap_done();
}
