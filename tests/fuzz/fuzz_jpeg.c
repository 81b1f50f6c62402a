/*
 * Fuzz target: pack/image on arbitrary bytes: header probe, decode (markers, EXIF, libjpeg-turbo,
 * CMYK, orientation) and resize to small sizes. Beyond not crashing, checks the invariants the
 * packer relies on: errors are negative pack_image codes with a message; a decoded image has the
 * size and orientation the probe announced; resizes produce the requested size.
 *
 * The decoder's limits are lowered (4 Mpixel, 4096 per side) so a hostile header cannot make one
 * input take seconds; the default limits are exercised by tests/pack/test_image.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct pack_image_decoder *dec;
static uint8_t out[64 * 64 * 3];

static void check_error(int rc)
{
    if (rc >= 0) abort();
    if (!pack_image_strerror(rc) || !pack_image_decoder_detail(dec)[0]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dec) {
        struct pack_image_opts o;
        pack_image_opts_default(&o);
        o.max_pixels = 1 << 22;
        o.max_side = 4096;
        if (pack_image_decoder_create(&o, &dec) != 0) abort();
    }
    struct pack_image_info info;
    const int prc = pack_image_probe(data, size, &info);
    struct pack_image img;
    int rc = pack_image_decode(dec, data, size, &img);
    if (rc < 0) {
        check_error(rc);
        /* The decoder fails wherever the probe fails (it runs the same header walk first). */
        if (prc < 0 && rc != prc) abort();
        return 0;
    }
    if (prc < 0 || info.width != img.width || info.height != img.height ||
        info.orientation != img.orientation)
        abort();

    /* ultralytics-style resize of the decoded image to a small long side, both rules. */
    const int side = 1 + (size ? data[size - 1] : 0) % 64;
    rc = pack_image_load(dec, side,
                         (size & 1) ? PACK_IMAGE_INTERP_AUTO_TRAIN : PACK_IMAGE_INTERP_AUTO_VAL,
                         data, size, &img);
    if (rc < 0 || (img.width > img.height ? img.width : img.height) > side + 1) abort();

    /* An explicit odd shape, through the caller-workspace API. */
    if (pack_image_decode(dec, data, size, &img) != 0) abort();
    const int dw = 1 + data[0] % 64, dh = 1 + data[size / 2] % 64;
    const enum pack_image_interp ip =
        (data[1] & 1) ? PACK_IMAGE_INTERP_AREA : PACK_IMAGE_INTERP_LINEAR;
    const size_t ws = pack_image_resize_work_size(dw, dh, img.width, img.height, ip);
    void *work = malloc(ws ? ws : 1);
    if (!work) abort();
    rc = pack_image_resize(out, dw, dh, 3 * (size_t)dw, img.pixels, img.width, img.height,
                           3 * (size_t)img.width, ip, work, ws);
    free(work);
    if (rc != 0) abort();
    return 0;
}
