/*
 * EXIF orientation as OpenCV reads it (see pack_image_exif_orientation in image_internal.h).
 *
 * The block is hostile input: every read is bounds-checked against len in 64-bit arithmetic,
 * and a failed check ends the walk exactly where OpenCV's ExifReader would throw. Offsets that
 * OpenCV keeps in uint32_t (IFD walk, rational arrays) wrap the same way here.
 */
#include "image_internal.h"

#include <stdbool.h>

/* The IFD0 tags OpenCV decodes; reading any of them can fail and end the walk. */
enum {
    TAG_IMAGE_DESCRIPTION = 0x010E,
    TAG_MAKE = 0x010F,
    TAG_MODEL = 0x0110,
    TAG_ORIENTATION = 0x0112,
    TAG_XRESOLUTION = 0x011A,
    TAG_YRESOLUTION = 0x011B,
    TAG_RESOLUTION_UNIT = 0x0128,
    TAG_SOFTWARE = 0x0131,
    TAG_DATE_TIME = 0x0132,
    TAG_WHITE_POINT = 0x013E,
    TAG_PRIMARY_CHROMATICITIES = 0x013F,
    TAG_YCBCR_COEFFICIENTS = 0x0211,
    TAG_YCBCR_POSITIONING = 0x0213,
    TAG_REFERENCE_BLACK_WHITE = 0x0214,
    TAG_COPYRIGHT = 0x8298,
};

#define TIFF_ENTRY_SIZE 12
#define TIFF_INLINE_MAX 4 /* values up to 4 bytes sit in the entry itself */

struct tiff {
    const uint8_t *p;
    uint64_t len;
    bool little;
};

static bool rd16(const struct tiff *t, uint64_t off, uint32_t *v)
{
    if (off + 1 >= t->len) return false;
    const uint8_t *b = t->p + off;
    *v = t->little ? (uint32_t)b[0] | (uint32_t)b[1] << 8 : (uint32_t)b[0] << 8 | b[1];
    return true;
}

static bool rd32(const struct tiff *t, uint64_t off, uint32_t *v)
{
    if (off + 3 >= t->len) return false;
    const uint8_t *b = t->p + off;
    *v = t->little
             ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24
             : (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return true;
}

/* A string tag: OpenCV copies `count` bytes from offset 8 of the block (sic: of the block, not
 * of the entry) when they fit inline, else from the stored offset, and fails past the end. */
static bool check_string(const struct tiff *t, uint64_t entry)
{
    uint32_t count, data_off = 8;
    if (!rd32(t, entry + 4, &count)) return false;
    if (count > TIFF_INLINE_MAX && !rd32(t, entry + 8, &data_off)) return false;
    return (uint64_t)data_off <= t->len && (uint64_t)data_off + count <= t->len;
}

/* `n` unsigned rationals at the stored offset; the running offset is 32-bit as in OpenCV. */
static bool check_rationals(const struct tiff *t, uint64_t entry, unsigned n)
{
    uint32_t off, v;
    if (!rd32(t, entry + 8, &off)) return false;
    for (unsigned i = 0; i < n; i++, off += 8)
        if (!rd32(t, off, &v) || !rd32(t, (uint64_t)off + 4, &v)) return false;
    return true;
}

int pack_image_exif_orientation(const uint8_t *tiff, size_t len, int *malformed)
{
    struct tiff t = { tiff, len, len >= 2 && tiff[0] == 'I' && tiff[1] == 'I' };
    int orientation = 0; /* first Orientation entry wins (OpenCV inserts into a std::map) */
    bool found = false, ok = true;
    uint32_t magic, ifd, count, tag, v;

    if (malformed) *malformed = 0;
    if (!tiff || !rd16(&t, 2, &magic) || magic != 42) {
        if (malformed) *malformed = 1;
        return 0;
    }
    if (!rd32(&t, 4, &ifd) || !rd16(&t, ifd, &count)) {
        if (malformed) *malformed = 1;
        return 0;
    }
    uint64_t entry = (uint64_t)ifd + 2;
    for (uint32_t i = 0; i < count && ok; i++, entry += TIFF_ENTRY_SIZE) {
        if (!rd16(&t, entry, &tag)) {
            ok = false;
            break;
        }
        switch (tag) {
        case TAG_IMAGE_DESCRIPTION:
        case TAG_MAKE:
        case TAG_MODEL:
        case TAG_SOFTWARE:
        case TAG_DATE_TIME:
        case TAG_COPYRIGHT:
            ok = check_string(&t, entry);
            break;
        case TAG_ORIENTATION:
            ok = rd16(&t, entry + 8, &v);
            if (ok && !found) {
                found = true;
                orientation = (int)v;
            }
            break;
        case TAG_RESOLUTION_UNIT:
        case TAG_YCBCR_POSITIONING:
            ok = rd16(&t, entry + 8, &v);
            break;
        case TAG_XRESOLUTION:
        case TAG_YRESOLUTION:
            ok = check_rationals(&t, entry, 1);
            break;
        case TAG_WHITE_POINT:
            ok = check_rationals(&t, entry, 2);
            break;
        case TAG_YCBCR_COEFFICIENTS:
            ok = check_rationals(&t, entry, 3);
            break;
        case TAG_PRIMARY_CHROMATICITIES:
        case TAG_REFERENCE_BLACK_WHITE:
            ok = check_rationals(&t, entry, 6);
            break;
        default:
            break;
        }
    }
    if (!ok && malformed) *malformed = 1;
    return orientation >= 1 && orientation <= 8 ? orientation : 0;
}
