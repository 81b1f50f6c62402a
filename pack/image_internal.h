/*
 * Internals of pack/image shared between its source files and tests/pack (not part of the
 * pack/image.h interface).
 */
#ifndef PACK_IMAGE_INTERNAL_H
#define PACK_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"

/*
 * pack_image_exif_orientation: the EXIF orientation OpenCV's ExifReader reads from a TIFF block
 * (the APP1 payload after its 6-byte "Exif\0\0" header).
 *
 * Mirrors OpenCV 4.x (modules/imgcodecs/src/exif.cpp) so that our pixels equal cv2.imread's:
 * byte order is little-endian only for "II"; the TIFF magic 42 must match; only IFD0 is read;
 * the first Orientation entry wins and its value is read as a 16-bit value at entry+8 whatever
 * its declared type; a bounds failure while reading IFD0 (including in the string and rational
 * tags OpenCV decodes) stops the walk, keeping an orientation already found.
 *
 * tiff, len: the block, borrowed. malformed: out, set to 1 when a bounds or magic check failed,
 * else 0 (may be NULL).
 * Returns 1..8 for a valid orientation, 0 when there is none (or its value is not 1..8).
 */
int pack_image_exif_orientation(const uint8_t *tiff, size_t len, int *malformed);

/* What a file's first bytes say it is (pack_image_decode's dispatch); JPEG for anything
 * else, whose header walk then names the problem. */
enum pack_image_format {
    PACK_IMAGE_FMT_JPEG = 0,
    PACK_IMAGE_FMT_PNG = 1,
    PACK_IMAGE_FMT_BMP = 2,
    PACK_IMAGE_FMT_WEBP = 3,
};
enum pack_image_format pack_image_sniff(const void *src, size_t len);

/*
 * pack_image_decode_other (image_formats.c): a PNG, BMP or WebP file to RGB8 in *buf (grown with
 * realloc to *cap bytes), its size in *w, *h, as cv2.imread(IMREAD_COLOR) reads it. o: the
 * decoder's limits. detail: a line on failure. Returns 0, -ENOMEM, -PACK_IMAGE_ETOOBIG,
 * -PACK_IMAGE_ECORRUPT or -PACK_IMAGE_EUNSUPPORTED.
 */
int pack_image_decode_other(enum pack_image_format f, const uint8_t *p, size_t len,
                            const struct pack_image_opts *o, uint8_t **buf, size_t *cap, int *w,
                            int *h, char *detail, size_t dcap);

/* pack_image_probe's size of a PNG (IHDR), BMP (headers) or WebP (libwebp's info): the checks
 * pack_image_decode_other makes first, so a probe failure is the decoder's failure too. */
int pack_image_probe_other(enum pack_image_format f, const uint8_t *p, size_t len, int *w, int *h);

/*
 * pack_image_orient: apply EXIF orientation 2..8 the way OpenCV's ExifTransform does (flips,
 * transpose). src: coded_w x coded_h packed RGB. dst: packed RGB of the oriented size (coded
 * size, or transposed for 5..8); must not overlap src. Orientation 1 copies.
 */
void pack_image_orient(uint8_t *dst, const uint8_t *src, int coded_w, int coded_h, int orientation);

/*
 * pack_image_resize_impl: pack_image_resize with the SIMD kernels switched on (use_simd != 0,
 * where the build has them) or off, so tests can check both give the same bytes.
 */
int pack_image_resize_impl(uint8_t *dst, int dst_w, int dst_h, size_t dst_stride,
                           const uint8_t *src, int src_w, int src_h, size_t src_stride,
                           enum pack_image_interp interp, void *work, size_t work_cap,
                           int use_simd);

#endif
