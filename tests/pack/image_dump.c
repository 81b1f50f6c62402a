/*
 * image_dump: decode (and resize) JPEG files with pack/image and write the raw RGB pixels to
 * stdout, for check_opencv_coco128.py to compare with OpenCV.
 *
 * usage: image_dump [-s SIZE] [-i linear|area|auto-train|auto-val] FILE...
 * For each file, in order: a line "OK <w> <h> <w0> <h0> <orientation> <warnings>\n" followed by
 * w*h*3 bytes of RGB, or a line "ERR <rc> <message>\n". Exit status 0 unless the arguments or
 * stdout fail (a file that does not decode is reported, not fatal).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

static int read_file(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return -ENOMEM;
        }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        uint8_t *nb = realloc(b, cap);
        if (!nb) free(b);
        b = nb;
    }
    const int err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        return -EIO;
    }
    *buf = b, *len = n;
    return 0;
}

int main(int argc, char **argv)
{
    int size = 0, first = 1;
    enum pack_image_interp interp = PACK_IMAGE_INTERP_LINEAR;
    for (; first < argc && argv[first][0] == '-'; first += 2) {
        if (first + 1 >= argc) goto usage;
        if (!strcmp(argv[first], "-s")) {
            size = atoi(argv[first + 1]);
        } else if (!strcmp(argv[first], "-i")) {
            const char *v = argv[first + 1];
            if (!strcmp(v, "linear"))
                interp = PACK_IMAGE_INTERP_LINEAR;
            else if (!strcmp(v, "area"))
                interp = PACK_IMAGE_INTERP_AREA;
            else if (!strcmp(v, "auto-train"))
                interp = PACK_IMAGE_INTERP_AUTO_TRAIN;
            else if (!strcmp(v, "auto-val"))
                interp = PACK_IMAGE_INTERP_AUTO_VAL;
            else
                goto usage;
        } else {
            goto usage;
        }
    }
    struct pack_image_decoder *dec;
    if (pack_image_decoder_create(NULL, &dec) < 0) {
        fprintf(stderr, "image_dump: cannot create a decoder\n");
        return 1;
    }
    for (int i = first; i < argc; i++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        int rc = read_file(argv[i], &buf, &len);
        struct pack_image img;
        if (rc == 0) rc = pack_image_load(dec, size, interp, buf, len, &img);
        free(buf);
        if (rc < 0) {
            printf("ERR %d %s: %s\n", rc, pack_image_strerror(rc), pack_image_decoder_detail(dec));
            continue;
        }
        printf("OK %d %d %d %d %d %u\n", img.width, img.height, img.src_width, img.src_height,
               img.orientation, img.warnings);
        fwrite(img.pixels, 3, (size_t)img.width * (size_t)img.height, stdout);
    }
    pack_image_decoder_destroy(dec);
    if (fflush(stdout) != 0) return 1;
    return 0;
usage:
    fprintf(stderr, "usage: image_dump [-s SIZE] [-i linear|area|auto-train|auto-val] FILE...\n");
    return 2;
}
