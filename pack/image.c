/*
 * JPEG decoding for yolo-pack: header walk, EXIF orientation, TurboJPEG decode, CMYK and
 * orientation, and the ultralytics load_image() size rule. The resize is in image_resize.c and
 * the EXIF reader in image_exif.c.
 *
 * Corrupt input policy (what cv2.imread and ultralytics do, and so what we do):
 * - libjpeg-turbo warnings (a truncated scan, bad Huffman codes, extraneous bytes) do not stop
 *   OpenCV: it returns the image as libjpeg produced it, missing blocks included. We return the
 *   same pixels and set PACK_IMAGE_WARN_DATA; TurboJPEG collects the message instead of
 *   printing it, so nothing reaches stderr from a library.
 * - ultralytics' verify_image_label() flags a JPEG whose last two bytes are not FF D9 as
 *   "corrupt" and still trains on it (re-saved); we decode it and set PACK_IMAGE_WARN_NO_EOI.
 *   (Its re-save goes through PIL at quality 100, which we cannot and do not imitate; PIL also
 *   refuses a truncated file there, so ultralytics drops those: the caller may drop an image
 *   with PACK_IMAGE_WARN_DATA to follow that.)
 * - Anything libjpeg-turbo refuses (fatal error), a header that ends before the first scan, or
 *   dimensions above the limits, is an error.
 */
#include "image.h"
#include "image_internal.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

struct pack_image_decoder {
    struct pack_image_opts opts;
    tjhandle tj;
    uint8_t *dec;     /* decoded coded-orientation pixels, 3 or 4 bytes each */
    size_t dec_cap;   /* bytes */
    uint8_t *rot;     /* oriented pixels when orientation != 1 */
    size_t rot_cap;   /* bytes */
    uint8_t *out;     /* resized pixels */
    size_t out_cap;   /* bytes */
    void *work;       /* resize workspace */
    size_t work_cap;  /* bytes */
    char detail[256]; /* message for the last error or warning */
};

/* ---- header walk ------------------------------------------------------------------------- */

/* What the markers before the first SOS say; shared by the probe and the decoder. */
struct jpeg_header {
    int width, height, components, precision, progressive, lossless, arithmetic;
    uint64_t blocks;     /* 8x8 blocks of all components at their sampling (0: factors invalid) */
    const uint8_t *app1; /* first APP1 payload (after its length), or NULL */
    size_t app1_len;
};

static bool is_sof(unsigned m)
{
    /* SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC). */
    return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

/* Blocks coded per image: component i covers ceil(w * Hi / Hmax) x ceil(h * Vi / Vmax) pixels
 * (libjpeg's downsampled_width/height), in 8x8 blocks. 0 when a factor is outside 1..4. */
static uint64_t count_blocks(const struct jpeg_header *h, const uint8_t *comp)
{
    int hmax = 0, vmax = 0;
    for (int i = 0; i < h->components; i++) {
        const int hs = comp[3 * i + 1] >> 4, vs = comp[3 * i + 1] & 15;
        if (hs < 1 || hs > 4 || vs < 1 || vs > 4) return 0;
        hmax = hs > hmax ? hs : hmax;
        vmax = vs > vmax ? vs : vmax;
    }
    uint64_t n = 0;
    for (int i = 0; i < h->components; i++) {
        const uint64_t hs = comp[3 * i + 1] >> 4, vs = comp[3 * i + 1] & 15;
        const uint64_t cw = ((uint64_t)h->width * hs + (uint64_t)hmax - 1) / (uint64_t)hmax;
        const uint64_t ch = ((uint64_t)h->height * vs + (uint64_t)vmax - 1) / (uint64_t)vmax;
        n += (cw + 7) / 8 * ((ch + 7) / 8);
    }
    return n;
}

/*
 * Walk the markers from SOI to the first SOS, as libjpeg's read_markers does: bytes that are not
 * a marker are skipped (libjpeg warns), fill bytes FF are skipped, RSTn/TEM stand alone. Every
 * length is checked against the data. Returns 0 or a negative pack_image error.
 */
static int walk_header(const uint8_t *p, size_t n, struct jpeg_header *h)
{
    memset(h, 0, sizeof *h);
    if (n == 0) return -PACK_IMAGE_EEMPTY;
    /* OpenCV recognises a JPEG by FF D8 FF; libjpeg would skip other bytes after SOI, but
     * cv2.imread never hands such a file to it. */
    if (n < 2 || p[0] != 0xFF || p[1] != 0xD8 || (n > 2 && p[2] != 0xFF))
        return -PACK_IMAGE_ENOTJPEG;
    bool have_sof = false;
    size_t pos = 2;
    for (;;) {
        while (pos < n && p[pos] != 0xFF)
            pos++; /* extraneous bytes */
        while (pos < n && p[pos] == 0xFF)
            pos++; /* fill bytes */
        if (pos >= n) return -PACK_IMAGE_ETRUNC;
        const unsigned m = p[pos++];
        if (m == 0x00) continue; /* a stuffed FF 00 is not a marker here; libjpeg skips it too */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;
        if (m == 0xD8) return -PACK_IMAGE_ECORRUPT; /* second SOI */
        if (m == 0xD9) return -PACK_IMAGE_ECORRUPT; /* EOI before any scan: no image */
        if (n - pos < 2) return -PACK_IMAGE_ETRUNC;
        const size_t len = (size_t)p[pos] << 8 | p[pos + 1];
        if (len < 2) return -PACK_IMAGE_ECORRUPT;
        if (m == 0xDA) { /* SOS: the header is complete */
            if (!have_sof) return -PACK_IMAGE_ECORRUPT;
            if (n - pos < len) return -PACK_IMAGE_ETRUNC;
            return 0;
        }
        if (n - pos < len) return -PACK_IMAGE_ETRUNC;
        const uint8_t *seg = p + pos + 2;
        const size_t seg_len = len - 2;
        if (is_sof(m)) {
            if (have_sof) return -PACK_IMAGE_ECORRUPT; /* libjpeg: JERR_SOF_DUPLICATE */
            if (seg_len < 6) return -PACK_IMAGE_ECORRUPT;
            h->precision = seg[0];
            h->height = seg[1] << 8 | seg[2];
            h->width = seg[3] << 8 | seg[4];
            h->components = seg[5];
            h->progressive = (m & 0x3) == 0x2;
            h->lossless = (m & 0x3) == 0x3;
            h->arithmetic = m >= 0xC9; /* SOF9..SOF15 (DAC, 0xCC, is not an SOF) */
            if (seg_len < 6 + 3 * (size_t)h->components) return -PACK_IMAGE_ECORRUPT;
            if (h->width == 0 || h->height == 0 || h->components == 0) return -PACK_IMAGE_ECORRUPT;
            h->blocks = count_blocks(h, seg + 6);
            have_sof = true;
        } else if (m == 0xE1 && !h->app1) {
            h->app1 = seg;
            h->app1_len = seg_len;
        }
        pos += len;
    }
}

/* OpenCV hands the first APP1's payload after 6 bytes to its EXIF reader, whatever it is. */
static int header_orientation(const struct jpeg_header *h, unsigned *warnings)
{
    const size_t exif_hdr = 6;
    if (!h->app1 || h->app1_len <= exif_hdr) return 1;
    int malformed = 0;
    const int o =
        pack_image_exif_orientation(h->app1 + exif_hdr, h->app1_len - exif_hdr, &malformed);
    /* Only an APP1 that says it is Exif can be a malformed Exif block (XMP is also APP1). */
    if (malformed && memcmp(h->app1, "Exif\0", 5) == 0) *warnings |= PACK_IMAGE_WARN_EXIF;
    return o ? o : 1;
}

static int check_supported(const struct jpeg_header *h)
{
    if (h->precision != 8 || h->lossless) return -PACK_IMAGE_EUNSUPPORTED;
    if (h->components != 1 && h->components != 3 && h->components != 4)
        return -PACK_IMAGE_EUNSUPPORTED;
    return 0;
}

int pack_image_probe(const void *src, size_t src_len, struct pack_image_info *out)
{
    if (!out || (!src && src_len)) return -EINVAL;
    const enum pack_image_format fmt = pack_image_sniff(src, src_len);
    if (fmt != PACK_IMAGE_FMT_JPEG) {
        int w = 0, hh = 0;
        const int prc = pack_image_probe_other(fmt, src, src_len, &w, &hh);
        if (prc < 0) return prc;
        *out = (struct pack_image_info){ .width = w,
                                         .height = hh,
                                         .coded_width = w,
                                         .coded_height = hh,
                                         .components = 3,
                                         .orientation = 1 };
        return 0;
    }
    struct jpeg_header h;
    int rc = walk_header(src, src_len, &h);
    if (rc < 0) return rc;
    if ((rc = check_supported(&h)) < 0) return rc;
    unsigned warnings = 0;
    const int o = header_orientation(&h, &warnings);
    const bool swap = o >= 5;
    *out = (struct pack_image_info){
        .width = swap ? h.height : h.width,
        .height = swap ? h.width : h.height,
        .coded_width = h.width,
        .coded_height = h.height,
        .components = h.components,
        .orientation = o,
        .progressive = h.progressive,
        .warnings = warnings,
    };
    return 0;
}

/* ---- orientation --------------------------------------------------------------------------- */

void pack_image_orient(uint8_t *dst, const uint8_t *src, int coded_w, int coded_h, int orientation)
{
    const ptrdiff_t W = coded_w, H = coded_h, row = 3 * W;
    /* Output pixel (x, y) reads src at base + x*step_x + y*step_y (bytes). OpenCV: 2 flips
     * horizontally, 3 both ways, 4 vertically; 5 transposes, 6/7/8 transpose then flip
     * horizontally / both / vertically. */
    ptrdiff_t base = 0, step_x = 3, step_y = row;
    int out_w = coded_w, out_h = coded_h;
    switch (orientation) {
    case 2:
        base = 3 * (W - 1), step_x = -3;
        break;
    case 3:
        base = (H - 1) * row + 3 * (W - 1), step_x = -3, step_y = -row;
        break;
    case 4:
        base = (H - 1) * row, step_y = -row;
        break;
    case 5:
        step_x = row, step_y = 3;
        break;
    case 6:
        base = (H - 1) * row, step_x = -row, step_y = 3;
        break;
    case 7:
        base = (H - 1) * row + 3 * (W - 1), step_x = -row, step_y = -3;
        break;
    case 8:
        base = 3 * (W - 1), step_x = row, step_y = -3;
        break;
    default:
        memcpy(dst, src, (size_t)row * (size_t)H);
        return;
    }
    if (orientation >= 5) out_w = coded_h, out_h = coded_w;
    /* Tiles keep both the strided reads and the writes of a transpose inside the cache. */
    enum { TILE = 32 };
    const size_t out_row = 3 * (size_t)out_w;
    for (int ty = 0; ty < out_h; ty += TILE) {
        const int y1 = ty + TILE < out_h ? ty + TILE : out_h;
        for (int tx = 0; tx < out_w; tx += TILE) {
            const int x1 = tx + TILE < out_w ? tx + TILE : out_w;
            for (int y = ty; y < y1; y++) {
                uint8_t *d = dst + (size_t)y * out_row + 3 * (size_t)tx;
                /* An offset, not a moving pointer: it may step past the row after the last
                 * pixel, which a pointer may not. */
                ptrdiff_t o = base + (ptrdiff_t)y * step_y + (ptrdiff_t)tx * step_x;
                for (int x = tx; x < x1; x++, d += 3, o += step_x) {
                    d[0] = src[o];
                    d[1] = src[o + 1];
                    d[2] = src[o + 2];
                }
            }
        }
    }
}

/* ---- decoder ------------------------------------------------------------------------------- */

void pack_image_opts_default(struct pack_image_opts *opts)
{
    if (!opts) return;
    opts->max_side = PACK_IMAGE_MAX_SIDE;
    opts->max_pixels = PACK_IMAGE_MAX_PIXELS;
    opts->round = PACK_IMAGE_ROUND_INT;
}

int pack_image_decoder_create(const struct pack_image_opts *opts, struct pack_image_decoder **out)
{
    if (!out) return -EINVAL;
    *out = NULL;
    struct pack_image_opts o;
    pack_image_opts_default(&o);
    if (opts) o = *opts;
    if (o.max_side < 1 || o.max_pixels < 1 || (unsigned)o.round > PACK_IMAGE_ROUND_CEIL)
        return -EINVAL;
    struct pack_image_decoder *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->opts = o;
    d->tj = tjInitDecompress();
    if (!d->tj) {
        free(d);
        return -ENOMEM;
    }
    *out = d;
    return 0;
}

void pack_image_decoder_destroy(struct pack_image_decoder *dec)
{
    if (!dec) return;
    tjDestroy(dec->tj);
    free(dec->dec);
    free(dec->rot);
    free(dec->out);
    free(dec->work);
    free(dec);
}

void pack_image_decoder_trim(struct pack_image_decoder *dec, size_t keep)
{
    if (!dec) return;
    void **bufs[4] = { (void **)&dec->dec, (void **)&dec->rot, (void **)&dec->out, &dec->work };
    size_t *caps[4] = { &dec->dec_cap, &dec->rot_cap, &dec->out_cap, &dec->work_cap };
    for (int k = 0; k < 4; k++)
        if (*caps[k] > keep) {
            free(*bufs[k]);
            *bufs[k] = NULL;
            *caps[k] = 0;
        }
}

const char *pack_image_decoder_detail(const struct pack_image_decoder *dec)
{
    return dec ? dec->detail : "";
}

/* Grow-only buffer: contents are not kept. */
static int reserve(void **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    free(*buf);
    *buf = malloc(need);
    *cap = *buf ? need : 0;
    return *buf ? 0 : -ENOMEM;
}

#define DETAIL(d, ...) snprintf((d)->detail, sizeof(d)->detail, __VA_ARGS__)

/* OpenCV's CMYK -> BGR for Adobe (inverted) CMYK, icvCvt_CMYK2BGR_8u_C4C3R, written as RGB:
 * channel = k - ((255 - c) * k >> 8). In place: pixel i moves from 4i to 3i <= 4i. */
static void cmyk_to_rgb(uint8_t *p, size_t pixels)
{
    for (size_t i = 0; i < pixels; i++) {
        const uint8_t *s = p + 4 * i;
        const int c = s[0], m = s[1], y = s[2], k = s[3];
        uint8_t *d = p + 3 * i;
        d[0] = (uint8_t)(k - ((255 - c) * k >> 8));
        d[1] = (uint8_t)(k - ((255 - m) * k >> 8));
        d[2] = (uint8_t)(k - ((255 - y) * k >> 8));
    }
}

int pack_image_decode(struct pack_image_decoder *dec, const void *src, size_t src_len,
                      struct pack_image *out)
{
    if (!dec || !out || (!src && src_len)) return -EINVAL;
    dec->detail[0] = '\0';
    const uint8_t *p = src;
    const enum pack_image_format fmt = pack_image_sniff(p, src_len);
    if (fmt != PACK_IMAGE_FMT_JPEG) {
        int w = 0, hh = 0;
        const int orc =
            pack_image_decode_other(fmt, p, src_len, &dec->opts, &dec->dec, &dec->dec_cap, &w, &hh,
                                    dec->detail, sizeof dec->detail);
        if (orc < 0) return orc;
        *out = (struct pack_image){ .pixels = dec->dec,
                                    .width = w,
                                    .height = hh,
                                    .src_width = w,
                                    .src_height = hh,
                                    .interp = PACK_IMAGE_INTERP_LINEAR,
                                    .orientation = 1 };
        return 0;
    }
    struct jpeg_header h;
    int rc = walk_header(p, src_len, &h);
    if (rc < 0) {
        DETAIL(dec, "%s", pack_image_strerror(rc));
        return rc;
    }
    if ((rc = check_supported(&h)) < 0) {
        DETAIL(dec, "%d-bit %s JPEG with %d components", h.precision,
               h.lossless ? "lossless" : "DCT", h.components);
        return rc;
    }
    if (h.width > dec->opts.max_side || h.height > dec->opts.max_side ||
        (uint64_t)h.width * (uint64_t)h.height > dec->opts.max_pixels) {
        DETAIL(dec, "coded size %dx%d is above the limit (%d per side, %llu pixels)", h.width,
               h.height, dec->opts.max_side, (unsigned long long)dec->opts.max_pixels);
        return -PACK_IMAGE_ETOOBIG;
    }
    /* What the data can hold: Huffman coding spends at least one bit on every 8x8 block (its DC
     * code, in a sequential or a progressive file), so a header claiming more blocks than the
     * file has bits is a lie that would make us allocate for it (16000x16000 in 62 KB: 768 MB
     * per worker). Skipped, never allocated. Arithmetic coding can go below a bit per block:
     * only the limits above; invalid sampling factors are libjpeg's to refuse. */
    if (!h.arithmetic && h.blocks > (uint64_t)src_len * 8) {
        DETAIL(dec,
               "header claims %dx%d, more 8x8 blocks than its %zu bytes can code (at least "
               "one bit each)",
               h.width, h.height, src_len);
        return -PACK_IMAGE_ETOOBIG;
    }
    unsigned warnings = 0;
    const int orientation = header_orientation(&h, &warnings);
    if (src_len < 4 || p[src_len - 2] != 0xFF || p[src_len - 1] != 0xD9)
        warnings |= PACK_IMAGE_WARN_NO_EOI;

    /* Decode at the coded size. width/height/pitch are passed explicitly, so even if libjpeg
     * read other dimensions than our walk, TurboJPEG scales down to fit rather than overrun. */
    const int cmyk = h.components == 4;
    const size_t px = (size_t)h.width * (size_t)h.height;
    if (reserve((void **)&dec->dec, &dec->dec_cap, px * (cmyk ? 4 : 3)) < 0) return -ENOMEM;
    /* Accurate DCT and fancy upsampling are libjpeg's defaults, which OpenCV keeps; the scan
     * limit stops progressive files with absurd scan counts (OpenCV would spin on them). */
    const int flags = TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS;
    if (tjDecompress2(dec->tj, p, (unsigned long)src_len, dec->dec, h.width,
                      h.width * (cmyk ? 4 : 3), h.height, cmyk ? TJPF_CMYK : TJPF_RGB,
                      flags) != 0) {
        const char *msg = tjGetErrorStr2(dec->tj);
        if (tjGetErrorCode(dec->tj) != TJERR_WARNING) {
            DETAIL(dec, "libjpeg-turbo: %s", msg ? msg : "decode failed");
            return -PACK_IMAGE_ECORRUPT;
        }
        warnings |= PACK_IMAGE_WARN_DATA;
        DETAIL(dec, "libjpeg-turbo warning: %s", msg ? msg : "corrupt data");
    }
    if (cmyk) cmyk_to_rgb(dec->dec, px);

    const uint8_t *pixels = dec->dec;
    int w = h.width, hh = h.height;
    if (orientation != 1) {
        if (reserve((void **)&dec->rot, &dec->rot_cap, px * 3) < 0) return -ENOMEM;
        pack_image_orient(dec->rot, dec->dec, h.width, h.height, orientation);
        pixels = dec->rot;
        if (orientation >= 5) w = h.height, hh = h.width;
    }
    if ((warnings & PACK_IMAGE_WARN_NO_EOI) && !dec->detail[0])
        DETAIL(dec, "data does not end with the EOI marker FF D9");
    if ((warnings & PACK_IMAGE_WARN_EXIF) && !dec->detail[0]) DETAIL(dec, "malformed Exif block");
    *out = (struct pack_image){
        .pixels = pixels,
        .width = w,
        .height = hh,
        .src_width = w,
        .src_height = hh,
        .resized = 0,
        .interp = PACK_IMAGE_INTERP_LINEAR,
        .orientation = orientation,
        .warnings = warnings,
    };
    return 0;
}

int pack_image_target_size(int w0, int h0, int size, enum pack_image_round round, int *out_w,
                           int *out_h)
{
    if (w0 < 1 || h0 < 1 || size < 1 || !out_w || !out_h || (unsigned)round > PACK_IMAGE_ROUND_CEIL)
        return -EINVAL;
    const double r = (double)size / (double)(w0 > h0 ? w0 : h0);
    if (r == 1.0) {
        *out_w = w0, *out_h = h0;
        return 0;
    }
    /* Python: int(w0 * r) (or math.ceil), int * float is a double multiply. */
    const double w = round == PACK_IMAGE_ROUND_CEIL ? ceil((double)w0 * r) : floor((double)w0 * r);
    const double h = round == PACK_IMAGE_ROUND_CEIL ? ceil((double)h0 * r) : floor((double)h0 * r);
    if (w > PACK_IMAGE_MAX_SIDE || h > PACK_IMAGE_MAX_SIDE) return -EINVAL;
    *out_w = w < 1 ? 1 : (int)w;
    *out_h = h < 1 ? 1 : (int)h;
    return 0;
}

int pack_image_interp_resolve(enum pack_image_interp interp, int w0, int h0, int size)
{
    switch (interp) {
    case PACK_IMAGE_INTERP_LINEAR:
    case PACK_IMAGE_INTERP_AREA:
        return (int)interp;
    case PACK_IMAGE_INTERP_AUTO_TRAIN:
        return PACK_IMAGE_INTERP_LINEAR;
    case PACK_IMAGE_INTERP_AUTO_VAL: {
        if (w0 < 1 || h0 < 1 || size < 1) return -EINVAL;
        const double r = (double)size / (double)(w0 > h0 ? w0 : h0);
        return r > 1.0 ? PACK_IMAGE_INTERP_LINEAR : PACK_IMAGE_INTERP_AREA;
    }
    }
    return -EINVAL;
}

/* pack_image_load, with a resize written to dst (dst_cap bytes) when dst is given. */
static int load_impl(struct pack_image_decoder *dec, int size, enum pack_image_interp interp,
                     const void *src, size_t src_len, uint8_t *dst, size_t dst_cap,
                     struct pack_image *out)
{
    if (!dec || !out || size < 0 || (unsigned)interp > PACK_IMAGE_INTERP_AUTO_VAL) return -EINVAL;
    struct pack_image img;
    int rc = pack_image_decode(dec, src, src_len, &img);
    if (rc < 0) return rc;
    if (size == 0) {
        *out = img;
        return 0;
    }
    int dw, dh;
    if ((rc = pack_image_target_size(img.width, img.height, size, dec->opts.round, &dw, &dh)) < 0) {
        DETAIL(dec, "cannot resize %dx%d to long side %d", img.width, img.height, size);
        return rc;
    }
    const int ip = pack_image_interp_resolve(interp, img.width, img.height, size);
    if (ip < 0) return ip;
    img.interp = (enum pack_image_interp)ip;
    if (dw == img.width && dh == img.height) { /* r == 1, or cv2.resize's same-size copy */
        *out = img;
        return 0;
    }
    const size_t work = pack_image_resize_work_size(dw, dh, img.width, img.height, img.interp);
    const size_t bytes = (size_t)dw * (size_t)dh * 3;
    if (dst && bytes > dst_cap) return -ENOSPC;
    if ((!dst && reserve((void **)&dec->out, &dec->out_cap, bytes) < 0) ||
        reserve(&dec->work, &dec->work_cap, work ? work : 1) < 0)
        return -ENOMEM;
    uint8_t *const to = dst ? dst : dec->out;
    rc = pack_image_resize(to, dw, dh, 3 * (size_t)dw, img.pixels, img.width, img.height,
                           3 * (size_t)img.width, img.interp, dec->work, dec->work_cap);
    if (rc < 0) return rc;
    img.pixels = to;
    img.width = dw;
    img.height = dh;
    img.resized = 1;
    *out = img;
    return 0;
}

int pack_image_load(struct pack_image_decoder *dec, int size, enum pack_image_interp interp,
                    const void *src, size_t src_len, struct pack_image *out)
{
    return load_impl(dec, size, interp, src, src_len, NULL, 0, out);
}

int pack_image_load_into(struct pack_image_decoder *dec, int size, enum pack_image_interp interp,
                         const void *src, size_t src_len, uint8_t *dst, size_t dst_cap,
                         struct pack_image *out)
{
    if (!dec || !out || !dst) return -EINVAL;
    /* When the decoded image is already the result (no resize, no EXIF turn, no CMYK
     * conversion), libjpeg-turbo writes it straight into dst: the decoder's own buffer is
     * swapped for dst for the one call. The header is walked twice; it is tiny. */
    struct pack_image_info info;
    int direct = 0;
    if (pack_image_probe(src, src_len, &info) == 0 && info.orientation == 1 &&
        info.components != 4) {
        int dw = info.width, dh = info.height;
        const int same = size == 0 || (pack_image_target_size(info.width, info.height, size,
                                                              dec->opts.round, &dw, &dh) == 0 &&
                                       dw == info.width && dh == info.height);
        direct = same && (size_t)dw * (size_t)dh * 3 <= dst_cap;
    }
    int rc;
    if (direct) {
        uint8_t *const own = dec->dec;
        const size_t own_cap = dec->dec_cap;
        dec->dec = dst;
        dec->dec_cap = dst_cap;
        rc = load_impl(dec, size, interp, src, src_len, NULL, 0, out);
        dec->dec = own;
        dec->dec_cap = own_cap;
    } else {
        rc = load_impl(dec, size, interp, src, src_len, dst, dst_cap, out);
    }
    if (rc < 0) return rc;
    if (out->pixels != dst) {
        const size_t bytes = (size_t)out->width * (size_t)out->height * 3;
        if (bytes > dst_cap) return -ENOSPC;
        memcpy(dst, out->pixels, bytes);
        out->pixels = dst;
    }
    return 0;
}

const char *pack_image_error_line(int rc, const void *src, size_t len, char *buf, size_t cap)
{
    static const char *const names[] = { "JPEG", "PNG", "BMP", "WebP" };
    const enum pack_image_format f = src && len ? pack_image_sniff(src, len) : PACK_IMAGE_FMT_JPEG;
    const char *name = names[f];
    switch (f == PACK_IMAGE_FMT_JPEG ? 0 : -rc) {
    case PACK_IMAGE_ETRUNC:
        snprintf(buf, cap, "truncated %s (data ends inside the header)", name);
        break;
    case PACK_IMAGE_ECORRUPT:
        snprintf(buf, cap, "corrupt %s (its decoder cannot read it)", name);
        break;
    case PACK_IMAGE_ETOOBIG:
        snprintf(buf, cap, "%s dimensions above the decoder limits", name);
        break;
    case PACK_IMAGE_EUNSUPPORTED:
        snprintf(buf, cap, "unsupported %s", name);
        break;
    default:
        snprintf(buf, cap, "%s", pack_image_strerror(rc));
    }
    return buf;
}

const char *pack_image_strerror(int rc)
{
    switch (-rc) {
    case 0:
        return "success";
    case PACK_IMAGE_EEMPTY:
        return "empty input (zero bytes)";
    case PACK_IMAGE_ENOTJPEG:
        return "not a JPEG (does not start with FF D8 FF)";
    case PACK_IMAGE_ETRUNC:
        return "truncated JPEG (data ends inside the header)";
    case PACK_IMAGE_ECORRUPT:
        return "corrupt JPEG (libjpeg-turbo cannot decode it)";
    case PACK_IMAGE_ETOOBIG:
        return "JPEG dimensions above the decoder limits";
    case PACK_IMAGE_EUNSUPPORTED:
        return "unsupported JPEG (not 8-bit DCT with 1, 3 or 4 components)";
    default:
        break;
    }
    return rc < 0 ? strerror(-rc) : "success";
}
