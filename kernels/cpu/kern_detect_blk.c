/*
 * The Detect head on a channel-blocked raw (kern_cpu.h): the training reshape, its backward and
 * the inference decode of the CPU oneDNN executor, copies and math bit for bit those of the NCHW
 * reference (ref/kern_detect.c; the decode's math is kern_detect_common.h, shared).
 */
#include <errno.h>
#include <stddef.h>

#include "kern_cpu_internal.h"
#include "kern_detect_common.h"

/* Blocks per image of a channel-blocked raw. */
static size_t blk_blocks(const struct kern_detect *d, int blk)
{
    return ((size_t)d->na * (size_t)d->no + (size_t)blk - 1) / (size_t)blk;
}

/* Cells per tile of kern_detect_blk_fwd: a tile's rows of p (64 x no floats) stay in L1 while
 * each run of channels that shares a block is copied into them (det_fwd of yolov5n's step at 320
 * b16: 4.95-5.0 against 5.5-6.3 ms; the same tiles in the backward changed nothing). */
#define BLK_TILE 64

/* Anchor a's rows of cells c0 .. c0 + tn of one image's blocked raw (img, of cells cells) into
 * dst, tn rows of no: k in runs that share a channel block, each a stride-B stream of img. */
static void blk_rows(const struct kern_detect *d, size_t B, int a, const float *img, size_t cells,
                     size_t c0, size_t tn, float *dst)
{
    const size_t no = (size_t)d->no;
    for (size_t k0 = 0; k0 < no;) {
        const size_t ch = (size_t)a * no + k0, l0 = ch % B;
        const size_t run = B - l0 < no - k0 ? B - l0 : no - k0;
        const float *const src = img + (ch / B) * cells * B + c0 * B + l0;
        for (size_t t = 0; t < tn; t++)
            for (size_t j = 0; j < run; j++)
                dst[t * no + k0 + j] = src[t * B + j];
        k0 += run;
    }
}

void kern_cpu_detect_blk_fwd(const struct kern_detect *d, int blk, int b, int a, float *p,
                             const float *raw)
{
    const size_t cells = (size_t)d->ny * (size_t)d->nx, no = (size_t)d->no, B = (size_t)blk;
    float *const dst = p + ((size_t)b * (size_t)d->na + (size_t)a) * cells * no;
    const float *const img = raw + (size_t)b * blk_blocks(d, blk) * cells * B;
    for (size_t c0 = 0; c0 < cells; c0 += BLK_TILE) {
        const size_t tn = cells - c0 < BLK_TILE ? cells - c0 : BLK_TILE;
        blk_rows(d, B, a, img, cells, c0, tn, dst + c0 * no);
    }
}

void kern_cpu_detect_blk_bwd(const struct kern_detect *d, int blk, int b, int cb, float *draw,
                             const float *dp)
{
    const size_t cells = (size_t)d->ny * (size_t)d->nx, no = (size_t)d->no, B = (size_t)blk;
    const size_t nch = (size_t)d->na * no;
    float *const dst = draw + ((size_t)b * blk_blocks(d, blk) + (size_t)cb) * cells * B;
    for (size_t l0 = 0; l0 < B;) {
        const size_t ch = (size_t)cb * B + l0;
        if (ch >= nch) { /* pad lanes */
            for (size_t c = 0; c < cells; c++)
                for (size_t j = l0; j < B; j++)
                    dst[c * B + j] = 0.0f;
            break;
        }
        const size_t a = ch / no, k0 = ch % no;
        const size_t run = B - l0 < no - k0 ? B - l0 : no - k0;
        const float *const src = dp + ((size_t)b * (size_t)d->na + a) * cells * no + k0;
        for (size_t c = 0; c < cells; c++)
            for (size_t j = 0; j < run; j++)
                dst[c * B + l0 + j] = src[c * no + j];
        l0 += run;
    }
}

int kern_cpu_detect_blk_decode(const struct kern_detect *d, int blk, int b, int a, float *out,
                               const float *raw, const float *anchors)
{
    if (!d || !out || !raw || !anchors || (blk != 8 && blk != 16) || d->na < 1 || d->no < 5 ||
        d->no > KERN_DETECT_BLK_MAX_NO || d->ny < 1 || d->nx < 1 || b < 0 || b >= d->bs || a < 0 ||
        a >= d->na || !(d->stride > 0.0f))
        return -EINVAL;
    const size_t cells = (size_t)d->ny * (size_t)d->nx, no = (size_t)d->no, B = (size_t)blk;
    const float *const img = raw + (size_t)b * blk_blocks(d, blk) * cells * B;
    const float aw = anchors[2 * a] * d->stride, ah = anchors[2 * a + 1] * d->stride;
    /* a tile of cells: their rows gathered from the blocks (blk_rows), then the sigmoids in one
       pass, then the box terms */
    float buf[2 * KERN_DETECT_BLK_MAX_NO];
    const size_t T = sizeof buf / sizeof *buf / no;
    for (size_t j0 = 0; j0 < cells; j0 += T) {
        const size_t tn = cells - j0 < T ? cells - j0 : T;
        blk_rows(d, B, a, img, cells, j0, tn, buf);
        float *const o0 = out + j0 * no;
        kern_detect_sigmoid_run(o0, buf, tn * no);
        kern_detect_boxes(d, o0, j0, tn, aw, ah);
    }
    return 0;
}
