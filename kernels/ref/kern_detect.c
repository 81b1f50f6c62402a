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
#include "kern_detect_common.h"
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
                    kern_detect_sigmoid_run(sig, src + k * cells + j0, tn);
                    for (size_t t = 0; t < tn; t++)
                        o0[t * no + k] = sig[t];
                }
                kern_detect_boxes(d, o0, j0, tn, aw, ah);
            }
        }
    }
    return 0;
}
