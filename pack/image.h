/*
 * pack/image: JPEG decode and resize that give exactly the pixels ultralytics/yolov5 trains on.
 *
 * ultralytics' load_image() (utils/dataloaders.py, v7.0) does cv2.imread(path) and then, when the
 * long side is not already S, cv2.resize(im, (ceil(w0*r), ceil(h0*r))) with r = S / max(h0, w0),
 * using INTER_LINEAR when augmenting (training) or enlarging and INTER_AREA otherwise. cv2.imread
 * decodes with libjpeg (accurate integer DCT, fancy upsampling), applies the EXIF orientation,
 * expands greyscale to 3 channels and converts CMYK/YCCK with its own formula.
 *
 * This module reproduces each step: the decode with libjpeg-turbo's TurboJPEG API (the library
 * OpenCV links on Debian and in the opencv-python wheels), OpenCV's EXIF reader semantics, its
 * CMYK conversion and its resize arithmetic (11-bit fixed point for INTER_LINEAR, the 2x2 and
 * integer-factor block averages and the float area tables for INTER_AREA). The result is
 * bit-identical to OpenCV 4.x (tests/pack/test_image.c and check_opencv_coco128.py compare with
 * Debian's python3-opencv 4.6).
 *
 * Pixels are RGB (OpenCV's BGR reversed), uint8, HWC, rows packed: stride = 3 * width bytes.
 */
#ifndef PACK_IMAGE_H
#define PACK_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default decoder limits: no side above 32768 and no more than 2^28 pixels (768 MiB as RGB). */
#define PACK_IMAGE_MAX_SIDE   32768
#define PACK_IMAGE_MAX_PIXELS (UINT64_C(1) << 28)

/*
 * Format errors, returned negated (-PACK_IMAGE_ETRUNC). They sit above every errno value; the
 * numbers are pinned. pack_image_strerror() names them and falls back to strerror() for -errno.
 */
enum pack_image_error {
    PACK_IMAGE_EEMPTY = 3001,       /* zero-length input */
    PACK_IMAGE_ENOTJPEG = 3002,     /* does not start with FF D8 FF (SOI, then a marker):
                                       OpenCV's JPEG signature */
    PACK_IMAGE_ETRUNC = 3003,       /* data ends inside the header, before any image data */
    PACK_IMAGE_ECORRUPT = 3004,     /* malformed markers or data libjpeg-turbo cannot decode */
    PACK_IMAGE_ETOOBIG = 3005,      /* width, height or pixel count above the decoder limits */
    PACK_IMAGE_EUNSUPPORTED = 3006, /* a JPEG that OpenCV cannot read either (12-bit, lossless,
                                       2 components, ...) */
};

/*
 * Warning flags in pack_image.warnings: the image decoded, and cv2.imread would return the same
 * pixels, but the input is not clean. The caller decides (yolo-pack counts and reports them).
 */
/* The data does not end with FF D9. ultralytics' verify_image_label() tests exactly this and
 * calls the file a "corrupt JPEG" (it re-saves it); we decode it as cv2.imread does. */
#define PACK_IMAGE_WARN_NO_EOI 0x1u
/* libjpeg-turbo warned: corrupt or missing entropy-coded data (a truncated file decodes with its
 * missing part filled as libjpeg fills it, exactly as OpenCV returns it). */
#define PACK_IMAGE_WARN_DATA 0x2u
/* An Exif block is present but malformed; the orientation is what OpenCV would read from it. */
#define PACK_IMAGE_WARN_EXIF 0x4u

/* Interpolation, named after OpenCV's flags. */
enum pack_image_interp {
    PACK_IMAGE_INTERP_LINEAR = 0, /* cv2.INTER_LINEAR (a 2x shrink becomes INTER_AREA, as in
                                     OpenCV) */
    PACK_IMAGE_INTERP_AREA = 1,   /* cv2.INTER_AREA (enlarging uses OpenCV's bilinear
                                     emulation of it) */
    /* Policies for pack_image_load(), resolved per image as ultralytics does:
     * AUTO_TRAIN: augment=True, always INTER_LINEAR.
     * AUTO_VAL: augment=False, INTER_AREA when shrinking, INTER_LINEAR when enlarging. */
    PACK_IMAGE_INTERP_AUTO_TRAIN = 2,
    PACK_IMAGE_INTERP_AUTO_VAL = 3,
};

/* What pack_image_probe() reads from the markers before the first scan. */
struct pack_image_info {
    int width;         /* pixels, after the EXIF orientation: what cv2.imread returns */
    int height;        /* pixels, after the EXIF orientation */
    int coded_width;   /* pixels, as stored in the SOF marker */
    int coded_height;  /* pixels, as stored in the SOF marker */
    int components;    /* 1 grey, 3 YCbCr or RGB, 4 CMYK or YCCK (other counts are rejected) */
    int orientation;   /* EXIF orientation applied, 1..8; 1 when absent or not 1..8 */
    int progressive;   /* 1 for a progressive (SOF2/6/10/14) image, else 0 */
    unsigned warnings; /* PACK_IMAGE_WARN_EXIF when the Exif block is malformed, else 0 */
};

/*
 * pack_image_probe: read the JPEG header (markers up to the first SOS) without decoding (for a
 * PNG, BMP or WebP: its size from the header pack_image_decode checks first).
 *
 * Cheap (no allocation, no libjpeg call, stops at the first scan): use it to size buffers or
 * to list image shapes. A successful probe does not promise that the scan data decodes.
 *
 * src, src_len: the whole file or at least its header; borrowed for the call only.
 * out: filled on success; untouched on error.
 * Returns 0, or -EINVAL (NULL argument), -PACK_IMAGE_EEMPTY, -PACK_IMAGE_ENOTJPEG,
 * -PACK_IMAGE_ETRUNC (ends before SOS), -PACK_IMAGE_ECORRUPT (bad marker length, no or a second
 * SOF, zero width or height), -PACK_IMAGE_EUNSUPPORTED (component count not 1, 3 or 4, precision
 * not 8 bits, lossless). Thread-safe (no state).
 */
int pack_image_probe(const void *src, size_t src_len, struct pack_image_info *out);

/* How load_image rounds the resized sides (pack_image_target_size). */
enum pack_image_round {
    PACK_IMAGE_ROUND_INT = 0, /* int(w0 * r): ultralytics v7.0 (and v6.2), the default */
    PACK_IMAGE_ROUND_CEIL = 1 /* math.ceil(w0 * r): ultralytics master after v7.0 */
};

/* Decoder options; fill with pack_image_opts_default() and change what you need. */
struct pack_image_opts {
    int max_side;                /* largest accepted coded width or height, pixels (>= 1) */
    uint64_t max_pixels;         /* largest accepted coded width * height (>= 1) */
    enum pack_image_round round; /* pack_image_load's sizes; default PACK_IMAGE_ROUND_INT */
};

/* pack_image_opts_default: max_side = PACK_IMAGE_MAX_SIDE, max_pixels = PACK_IMAGE_MAX_PIXELS. */
void pack_image_opts_default(struct pack_image_opts *opts);

/*
 * A decoder: a TurboJPEG handle plus grow-only buffers for the decoded, oriented and resized
 * images and the resize tables, so that decoding a stream of images allocates only when an
 * image is bigger than all before it. Not thread-safe: use one decoder per thread.
 */
struct pack_image_decoder;

/*
 * pack_image_decoder_create: make a decoder.
 * opts: NULL for the defaults; copied.
 * out: receives the decoder, owned by the caller (free with pack_image_decoder_destroy).
 * Returns 0, -EINVAL (NULL out, limits < 1) or -ENOMEM.
 */
int pack_image_decoder_create(const struct pack_image_opts *opts, struct pack_image_decoder **out);

/* pack_image_decoder_destroy: free a decoder and its buffers; NULL is a no-op. Pointers from
 * earlier pack_image results become invalid. */
void pack_image_decoder_destroy(struct pack_image_decoder *dec);

/* A decoded (and possibly resized) image. */
struct pack_image {
    const uint8_t *pixels; /* RGB HWC, stride 3*width; owned by the decoder, valid until the next
                              call on it or its destruction */
    int width;             /* pixels in `pixels` */
    int height;
    int src_width;  /* decoded, oriented size before any resize (ultralytics' w0, h0) */
    int src_height; /* ditto */
    int resized;    /* 1 if `pixels` were resized from src_width x src_height, else 0 */
    enum pack_image_interp interp; /* LINEAR or AREA when resized (the policy resolved) */
    int orientation;               /* EXIF orientation applied, 1..8 */
    unsigned warnings;             /* PACK_IMAGE_WARN_* flags */
};

/*
 * pack_image_decode: decode a JPEG to RGB, as cv2.imread(path, IMREAD_COLOR) then BGR->RGB.
 * PNG, BMP (24/32-bit, 8-bit palettes) and WebP files, told by their first bytes, are decoded as
 * OpenCV reads them too (image_formats.c: libpng, libwebp; no EXIF orientation); the rest of
 * this comment is about JPEG.
 *
 * Accurate DCT and fancy upsampling (OpenCV's libjpeg defaults), EXIF orientation as OpenCV
 * reads it, greyscale replicated to RGB, CMYK and YCCK converted with OpenCV's formula for
 * Adobe (inverted) CMYK. Corrupt-but-decodable data (a truncated scan, garbage in the entropy
 * data) decodes exactly as OpenCV decodes it and sets PACK_IMAGE_WARN_DATA; data that does not
 * end with FF D9 sets PACK_IMAGE_WARN_NO_EOI. Data libjpeg-turbo cannot decode is an error.
 *
 * dec: the decoder. src, src_len: the JPEG file's bytes, borrowed for the call only.
 * out: filled on success (pixels owned by dec, see struct pack_image); untouched on error.
 * Returns 0, or -EINVAL, -ENOMEM, or any pack_image_probe() error, or -PACK_IMAGE_ETOOBIG
 * (limits), -PACK_IMAGE_ECORRUPT or -PACK_IMAGE_EUNSUPPORTED from libjpeg-turbo; the message
 * from pack_image_decoder_detail() then says more. A call invalidates earlier results of dec.
 */
int pack_image_decode(struct pack_image_decoder *dec, const void *src, size_t src_len,
                      struct pack_image *out);

/*
 * pack_image_load: pack_image_decode, then ultralytics' load_image() resize: when
 * max(w0, h0) != size, resize to pack_image_target_size() with the interpolation `interp`
 * (a fixed one or an AUTO_* policy).
 *
 * size: target long side in pixels (> 0), or 0 for no resize.
 * Returns as pack_image_decode, and -EINVAL for a bad size or interp.
 */
int pack_image_load(struct pack_image_decoder *dec, int size, enum pack_image_interp interp,
                    const void *src, size_t src_len, struct pack_image *out);

/*
 * pack_image_load_into: pack_image_load with the resulting pixels written to dst instead of the
 * decoder's buffers, so that yolo-pack decodes or resizes straight into a record (without the
 * copy into it). When no resize, EXIF turn or CMYK conversion is needed, libjpeg-turbo decodes
 * into dst directly. dst: dst_cap bytes, at least width * height * 3 of the result (probe the
 * header and use pack_image_target_size to size it). out->pixels == dst on success.
 * Returns as pack_image_load, and -EINVAL for a NULL dst, -ENOSPC when the result does not fit
 * (dst's contents are then undefined).
 */
int pack_image_load_into(struct pack_image_decoder *dec, int size, enum pack_image_interp interp,
                         const void *src, size_t src_len, uint8_t *dst, size_t dst_cap,
                         struct pack_image *out);

/*
 * pack_image_decoder_detail: a message about the last error or warning of dec ("" if none),
 * e.g. libjpeg-turbo's "Premature end of JPEG file" or "coded size 40000x300 is above the limit
 * 32768". Owned by dec; valid until the next call on it.
 */
const char *pack_image_decoder_detail(const struct pack_image_decoder *dec);

/* Frees the decoder's buffers larger than keep bytes (they grow to the largest image seen), so
 * that a worker that met one huge image does not hold its memory for the rest of a run. */
void pack_image_decoder_trim(struct pack_image_decoder *dec, size_t keep);

/*
 * pack_image_strerror for an error of decoding src (len bytes), naming src's format: a PNG, BMP
 * or WebP file that fails is "corrupt PNG", "PNG dimensions above the decoder limits", never a
 * JPEG's message. Writes one line into buf (cap bytes) and returns buf.
 */
const char *pack_image_error_line(int rc, const void *src, size_t len, char *buf, size_t cap);

/*
 * pack_image_target_size: ultralytics' size rule. r = size / max(w0, h0) in double; when
 * r == 1 the size is unchanged, else (int(w0*r), int(h0*r)) with a double multiply, as v7.0's
 * load_image (round PACK_IMAGE_ROUND_CEIL: math.ceil(w0 * r), as later master), at least 1
 * (ultralytics refuses images under 10 pixels before they get here).
 * Returns 0, or -EINVAL when w0, h0 or size is < 1, round is unknown or a pointer is NULL.
 * Thread-safe.
 */
int pack_image_target_size(int w0, int h0, int size, enum pack_image_round round, int *out_w,
                           int *out_h);

/*
 * pack_image_interp_resolve: turn an interp or AUTO_* policy into LINEAR or AREA for an image
 * of w0 x h0 going to long side `size` (ultralytics: LINEAR if augment or r > 1, else AREA).
 * Returns the interpolation, or -EINVAL for an unknown value. Thread-safe.
 */
int pack_image_interp_resolve(enum pack_image_interp interp, int w0, int h0, int size);

/*
 * pack_image_resize_work_size: bytes of workspace pack_image_resize() needs for this shape and
 * interpolation (0 when none is needed). Sizes must be >= 1; returns 0 for invalid arguments.
 */
size_t pack_image_resize_work_size(int dst_w, int dst_h, int src_w, int src_h,
                                   enum pack_image_interp interp);

/*
 * pack_image_resize: resize an RGB (any 3-channel) uint8 image as cv2.resize(src, (dst_w,
 * dst_h), interpolation) does, bit for bit.
 *
 * dst: dst_h rows of dst_stride bytes (>= 3*dst_w), written. src: src_h rows of src_stride
 * bytes (>= 3*src_w), read only; must not overlap dst. interp: LINEAR or AREA only.
 * work, work_cap: workspace of at least pack_image_resize_work_size() bytes, or NULL/0 to let
 * the call allocate (and free) it. Same sizes copy the image, as cv2.resize does.
 * Returns 0, -EINVAL (bad size, stride, interp, or work_cap too small) or -ENOMEM.
 * Thread-safe for distinct dst and work buffers.
 */
int pack_image_resize(uint8_t *dst, int dst_w, int dst_h, size_t dst_stride, const uint8_t *src,
                      int src_w, int src_h, size_t src_stride, enum pack_image_interp interp,
                      void *work, size_t work_cap);

/* pack_image_strerror: a static string naming rc (a pack_image error, -errno, or 0). */
const char *pack_image_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif
