/*
 * Loss ops, CPU reference: BCE-with-logits (mean) and CIoU of box pairs.
 *
 * BCE: logits x as a rows x cols block with row stride ldx (element (r, c) at x[r ldx + c]),
 * targets t dense (rows, cols); loss = mean of max(x, 0) - x t + log1p(exp(-|x|)), summed in
 * double over runs of rows fixed by the shape (BCE_PARTS), the runs on the context's threads and
 * added in order; dx has x's layout: dx = dloss (sigmoid(x) - t) / (rows cols), only inside the
 * block, rows shared among the threads.
 * CIoU: b1, b2, db1, db2 (n, 4) as (x, y, w, h); ciou, dciou (n). The forward follows
 * ultralytics' bbox_iou(xywh=True, CIoU=True) op by op in float32; the backward is its autograd
 * with alpha held constant, min/max ties split in halves and clamp(0) passing its gradient at 0.
 *
 * Gradients: dx, db1, db2 overwrite unless accum has KERN_ACCUM_DX (overwritten buffers are
 * never read).
 */
#include <math.h>

#include "compiler.h"
#include "kern_ciou_common.h"
#include "kern_internal.h"

/* Rows ahead whose logits are asked for (KERN_PREFETCH): the loss's objectness column is one
 * value per row of 85, a cache line each, and the libm calls between leave too few loads in flight
 * for the hardware prefetcher. */
#define BCE_AHEAD 16

/* The BCE forward's terms of rows [r0, r1), summed in double in row order; row r of plane
 * r / m->rows (kern_bce_map). */
static double bce_sum(const float *restrict x, const float *restrict t,
                      const struct kern_bce_map *m, size_t r0, size_t r1, size_t cols)
{
    double s = 0.0;
    for (size_t r = r0; r < r1;) {
        const size_t p = r / m->rows, end = (p + 1) * m->rows < r1 ? (p + 1) * m->rows : r1;
        const float *xr = x + kern_bce_map_plane(m, p) + (r - p * m->rows) * m->ldx;
        for (; r < end; r++, xr += m->ldx) {
            const float *const tr = t + r * cols;
            KERN_PREFETCH(xr, BCE_AHEAD * m->ldx * sizeof *xr);
            for (size_t c = 0; c < cols; c++) {
                const float v = xr[c];
                s += (double)(fmaxf(v, 0.0f) - v * tr[c] + log1pf(expf(-fabsf(v))));
            }
        }
    }
    return s;
}

void kern_bce_logits_grad(float *restrict dx, const float *restrict x, const float *restrict t,
                          size_t r0, size_t r1, size_t cols, size_t ldx, float scale, int add)
{
    for (size_t r = r0; r < r1; r++) {
        const float *const xr = x + r * ldx, *const tr = t + r * cols;
        float *const dr = dx + r * ldx;
        KERN_PREFETCH(xr, BCE_AHEAD * ldx * sizeof *xr);
        for (size_t c = 0; c < cols; c++) {
            const float g = (1.0f / (1.0f + expf(-xr[c])) - tr[c]) * scale;
            dr[c] = add ? dr[c] + g : g;
        }
    }
}

/*
 * The rows in at most BCE_PARTS runs, fixed by the shape alone: the forward sums each run, then
 * the runs in order, so the loss is the same for any thread count. The loss's objectness term
 * covers every anchor cell (100,800 at 320, batch 16: libm's expf and log1pf took 5.3 ms of the
 * training step on one thread while the other waited).
 */
#define BCE_PARTS 64

struct bce_job {
    const float *x, *t;
    float *dx;
    const struct kern_bce_map *m;
    size_t rows, cols, ldx, per;
    float scale;
    int add;
    double part[BCE_PARTS];
};

static void bce_fwd_task(void *arg, int w, int n)
{
    struct bce_job *const j = arg;
    size_t lo, hi;
    kern_share((j->rows + j->per - 1) / j->per, w, n, &lo, &hi);
    for (size_t k = lo; k < hi; k++) {
        const size_t r1 = (k + 1) * j->per < j->rows ? (k + 1) * j->per : j->rows;
        j->part[k] = bce_sum(j->x, j->t, j->m, k * j->per, r1, j->cols);
    }
}

static void bce_bwd_task(void *arg, int w, int n)
{
    const struct bce_job *const j = arg;
    size_t lo, hi;
    kern_share(j->rows, w, n, &lo, &hi);
    kern_bce_logits_grad(j->dx, j->x, j->t, lo, hi, j->cols, j->ldx, j->scale, j->add);
}

int kern_bce_map_fwd(struct kern_ctx *ctx, float *loss, const float *restrict x,
                     const float *restrict t, size_t rows, size_t cols,
                     const struct kern_bce_map *m)
{
    struct bce_job j = { .x = x, .t = t, .m = m, .rows = rows, .cols = cols };
    j.per = (rows + BCE_PARTS - 1) / BCE_PARTS;
    kern_parallel(ctx, bce_fwd_task, &j, rows * cols);
    double s = 0.0;
    for (size_t k = 0; k * j.per < rows; k++)
        s += j.part[k];
    *loss = (float)(s / ((double)rows * (double)cols));
    return 0;
}

int kern_ref_bce_logits_fwd(struct kern_ctx *ctx, float *loss, const float *restrict x,
                            const float *restrict t, size_t rows, size_t cols, size_t ldx)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!loss || !x || !t || rows == 0 || cols == 0 || ldx < cols, -EINVAL);
    const struct kern_bce_map m = { .rows = rows, .ldx = ldx, .na = 1 };
    return kern_bce_map_fwd(ctx, loss, x, t, rows, cols, &m);
}

int kern_ref_bce_logits_bwd(struct kern_ctx *ctx, float *restrict dx, const float *restrict x,
                            const float *restrict t, size_t rows, size_t cols, size_t ldx,
                            float dloss, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dx || !x || !t || rows == 0 || cols == 0 || ldx < cols, -EINVAL);
    struct bce_job j = { .x = x, .t = t, .dx = dx, .rows = rows, .cols = cols, .ldx = ldx };
    j.scale = kern_bce_logits_scale(dloss, rows, cols);
    j.add = (accum & KERN_ACCUM_DX) != 0;
    kern_parallel(ctx, bce_bwd_task, &j, rows * cols);
    return 0;
}

int kern_ref_ciou_fwd(struct kern_ctx *ctx, float *restrict ciou, const float *restrict b1,
                      const float *restrict b2, size_t n)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!ciou || !b1 || !b2, -EINVAL);
    for (size_t i = 0; i < n; i++) {
        struct kern_ciou_terms s;
        kern_ciou_eval(b1 + 4 * i, b2 + 4 * i, &s);
        ciou[i] = s.ciou;
    }
    return 0;
}

int kern_ref_ciou_bwd(struct kern_ctx *ctx, float *restrict db1, float *restrict db2,
                      const float *restrict dciou, const float *restrict b1,
                      const float *restrict b2, size_t n, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!db1 || !dciou || !b1 || !b2, -EINVAL);
    const int add = (accum & KERN_ACCUM_DX) != 0;
    for (size_t i = 0; i < n; i++) {
        float o1[4], o2[4];
        kern_ciou_grad(b1 + 4 * i, b2 + 4 * i, dciou[i], o1, db2 ? o2 : NULL);
        float *const d1 = db1 + 4 * i;
        for (int k = 0; k < 4; k++)
            d1[k] = add ? d1[k] + o1[k] : o1[k];
        if (db2) {
            float *const d2 = db2 + 4 * i;
            for (int k = 0; k < 4; k++)
                d2[k] = add ? d2[k] + o2[k] : o2[k];
        }
    }
    return 0;
}
