/*
 * The Detect head's reshape and inference decode, CPU reference.
 *
 * Shapes (float32): raw (bs, na*no, ny, nx) is a Detect 1x1 conv output (NCHW, channel a*no + k);
 * p (bs, na, ny, nx, no) is PyTorch's raw.view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2),
 * contiguous. k: 0-1 xy, 2-3 wh, 4 objectness, 5.. classes.
 * Decode (ultralytics Detect, eval): s = sigmoid(v); xy = (2 s + (grid - 0.5)) stride;
 * wh = (2 s)^2 (anchor stride), anchors in grid units; obj, cls = s. Written in p's layout.
 *
 * Gradients: the reshape backward overwrites draw unless accum has KERN_ACCUM_DX.
 * Threads: the reshapes split their (image, anchor) blocks over the context's threads.
 */
#include <math.h>

#include "compiler.h"
#include "kern_bn_common.h"
#include "kern_internal.h"

static int detect_check(struct kern_ctx *ctx, const struct kern_detect *d, const void *a,
                        const void *b)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!d || !a || !b, -EINVAL);
    KERN_RETURN_IF(d->bs < 1 || d->na < 1 || d->no < 5 || d->ny < 1 || d->nx < 1, -EINVAL);
    return 0;
}

/* dst (cols x rows) (= or += with add) the transpose of src (rows x cols), in 16 x 16 blocks: the
 * plain loop writes one float per cache line of a stride-cols walk, a fifth of the copy's speed
 * on the Detect heads' planes (255 x 1600 at 320). */
static void transpose_add(float *restrict dst, const float *restrict src, size_t rows, size_t cols,
                          int add)
{
    enum { B = 16 };
    for (size_t r0 = 0; r0 < rows; r0 += B) {
        const size_t r1 = r0 + B < rows ? r0 + B : rows;
        for (size_t c0 = 0; c0 < cols; c0 += B) {
            const size_t c1 = c0 + B < cols ? c0 + B : cols;
            for (size_t c = c0; c < c1; c++) {
                float *const d = dst + c * rows;
                if (add) {
                    for (size_t r = r0; r < r1; r++)
                        d[r] += src[r * cols + c];
                } else {
                    for (size_t r = r0; r < r1; r++)
                        d[r] = src[r * cols + c];
                }
            }
        }
    }
}

/* One reshape call's blocks (bs na of them), shared over the context's workers. */
struct reshape_job {
    float *dst;
    const float *src;
    size_t rows, cols; /* of each source block */
    int add;
    size_t blocks;
};

static void reshape_task(void *arg, int w, int nw)
{
    const struct reshape_job *const j = arg;
    size_t lo, hi;
    kern_share(j->blocks, w, nw, &lo, &hi);
    const size_t n = j->rows * j->cols;
    for (size_t b = lo; b < hi; b++)
        transpose_add(j->dst + b * n, j->src + b * n, j->rows, j->cols, j->add);
}

static void reshape_run(struct kern_ctx *ctx, const struct kern_detect *d, float *dst,
                        const float *src, size_t rows, size_t cols, int add)
{
    struct reshape_job j = { dst, src, rows, cols, add, (size_t)d->bs * d->na };
    kern_parallel(ctx, reshape_task, &j, j.blocks * rows * cols);
}

int kern_ref_detect_reshape_fwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                float *restrict p, const float *restrict raw)
{
    const int rc = detect_check(ctx, d, p, raw);
    if (rc < 0) return rc;
    /* one (no, cells) -> (cells, no) transpose per image and anchor */
    reshape_run(ctx, d, p, raw, (size_t)d->no, (size_t)d->ny * d->nx, 0);
    return 0;
}

int kern_ref_detect_reshape_bwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                float *restrict draw, const float *restrict dp, unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = detect_check(ctx, d, draw, dp);
    if (rc < 0) return rc;
    reshape_run(ctx, d, draw, dp, (size_t)d->ny * d->nx, (size_t)d->no,
                (accum & KERN_ACCUM_DX) != 0);
    return 0;
}

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

void kern_detect_blk_fwd(const struct kern_detect *d, int blk, int b, int a, float *p,
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

void kern_detect_blk_bwd(const struct kern_detect *d, int blk, int b, int cb, float *draw,
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

/* sig[0..n) = sigmoid(v[0..n)), in lanes: kern_bn_sigmoid, the SiLU's (about 1 ulp from the
 * exact value, as PyTorch's vectorised sigmoid is; libm's expf one element at a time made the
 * decode a tenth of yolov5n's inference at 640). */
static KERN_VEC_CLONES void sigmoid_run(float *restrict sig, const float *restrict v, size_t n)
{
    for (size_t t = 0; t < n; t++)
        sig[t] = kern_bn_sigmoid(v[t]);
}

/* The box terms of decoded rows o[0 .. tn) (their sigmoids already there), cells j0 on. */
static void decode_boxes(const struct kern_detect *d, float *o0, size_t j0, size_t tn, float aw,
                         float ah)
{
    const size_t no = (size_t)d->no;
    for (size_t t = 0; t < tn; t++) {
        const size_t j = j0 + t;
        float *const o = o0 + t * no;
        const int gy = (int)(j / (size_t)d->nx), gx = (int)(j % (size_t)d->nx);
        o[0] = (o[0] * 2.0f + ((float)gx - 0.5f)) * d->stride;
        o[1] = (o[1] * 2.0f + ((float)gy - 0.5f)) * d->stride;
        const float tw = o[2] * 2.0f, th = o[3] * 2.0f;
        o[2] = tw * tw * aw;
        o[3] = th * th * ah;
    }
}

int kern_ref_detect_decode(struct kern_ctx *ctx, const struct kern_detect *d, float *restrict out,
                           const float *restrict raw, const float *restrict anchors)
{
    const int rc = detect_check(ctx, d, out, raw);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!anchors || !(d->stride > 0.0f), -EINVAL);
    const size_t cells = (size_t)d->ny * d->nx, no = (size_t)d->no;
    for (int b = 0; b < d->bs; b++) {
        for (int a = 0; a < d->na; a++) {
            const size_t blk = ((size_t)b * d->na + a) * no * cells;
            const float *const src = raw + blk;
            float *const dst = out + blk;
            /* anchor_grid = anchors * stride, as ultralytics builds it. */
            const float aw = anchors[2 * a] * d->stride, ah = anchors[2 * a + 1] * d->stride;
            /* A tile of cells at a time: each output k is read along its plane (contiguous)
             * and the tile's rows (T x no floats) stay in L1 until the box terms are done. */
            enum { T = 64 };
            for (size_t j0 = 0; j0 < cells; j0 += T) {
                const size_t tn = cells - j0 < T ? cells - j0 : T;
                float *const o0 = dst + j0 * no;
                for (size_t k = 0; k < no; k++) {
                    float sig[T];
                    sigmoid_run(sig, src + k * cells + j0, tn);
                    for (size_t t = 0; t < tn; t++)
                        o0[t * no + k] = sig[t];
                }
                decode_boxes(d, o0, j0, tn, aw, ah);
            }
        }
    }
    return 0;
}

int kern_detect_blk_decode(const struct kern_detect *d, int blk, int b, int a, float *out,
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
        sigmoid_run(o0, buf, tn * no);
        decode_boxes(d, o0, j0, tn, aw, ah);
    }
    return 0;
}
