/*
 * Concat along channels (as channel-slice copies) and the residual add, CPU reference.
 *
 * Concat (NCHW, float32): x (n, c_x, hw) <-> channels [c_off, c_off + c_x) of y (n, c_y, hw);
 * the forward writes only that slice of y; the backward reads only that slice of dy.
 * Add: y = a + b over a flat count; its backward hands dy to each input.
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX (overwritten dx is never read).
 * Threads: the add splits its range over the context's threads; concat runs on the caller.
 */
#include <string.h>

#include "kern_internal.h"

static int concat_check(struct kern_ctx *ctx, const void *a, const void *b, int n, int c_x, int hw,
                        int c_y, int c_off)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!a || !b || n < 1 || c_x < 1 || hw < 1 || c_off < 0, -EINVAL);
    KERN_RETURN_IF(c_y < 1 || c_off > c_y - c_x, -EINVAL);
    return 0;
}

int kern_ref_concat_fwd(struct kern_ctx *ctx, float *restrict y, const float *restrict x, int n,
                        int c_x, int hw, int c_y, int c_off)
{
    const int rc = concat_check(ctx, y, x, n, c_x, hw, c_y, c_off);
    if (rc < 0) return rc;
    const size_t slice = (size_t)c_x * (size_t)hw;
    for (int i = 0; i < n; i++)
        memcpy(y + ((size_t)i * c_y + c_off) * hw, x + (size_t)i * slice, slice * sizeof(float));
    return 0;
}

int kern_ref_concat_bwd(struct kern_ctx *ctx, float *restrict dx, const float *restrict dy, int n,
                        int c_x, int hw, int c_y, int c_off, unsigned accum)
{
    KERN_CHECK_ACCUM(accum);
    const int rc = concat_check(ctx, dx, dy, n, c_x, hw, c_y, c_off);
    if (rc < 0) return rc;
    const size_t slice = (size_t)c_x * (size_t)hw;
    for (int i = 0; i < n; i++) {
        const float *const src = dy + ((size_t)i * c_y + c_off) * hw;
        float *const dst = dx + (size_t)i * slice;
        if (accum & KERN_ACCUM_DX) {
            for (size_t j = 0; j < slice; j++)
                dst[j] += src[j];
        } else {
            memcpy(dst, src, slice * sizeof(float));
        }
    }
    return 0;
}

struct add_job {
    float *y;
    const float *a, *b; /* fwd: a + b; bwd: a = dy, b unused */
    size_t count;
    int mode; /* 0: y = a + b; 1: y = a; 2: y += a */
};

static void add_task(void *arg, int w, int nw)
{
    const struct add_job *const j = arg;
    size_t lo, hi;
    kern_share(j->count, w, nw, &lo, &hi);
    if (j->mode == 0) {
        for (size_t i = lo; i < hi; i++)
            j->y[i] = j->a[i] + j->b[i];
    } else if (j->mode == 1) {
        memcpy(j->y + lo, j->a + lo, (hi - lo) * sizeof(float));
    } else {
        for (size_t i = lo; i < hi; i++)
            j->y[i] += j->a[i];
    }
}

int kern_ref_add_fwd(struct kern_ctx *ctx, float *y, const float *a, const float *b, size_t count)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!y || !a || !b, -EINVAL);
    struct add_job j = { y, a, b, count, 0 };
    kern_parallel(ctx, add_task, &j, count);
    return 0;
}

int kern_ref_add_bwd(struct kern_ctx *ctx, float *restrict dx, const float *restrict dy,
                     size_t count, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dx || !dy, -EINVAL);
    struct add_job j = { dx, dy, NULL, count, (accum & KERN_ACCUM_DX) ? 2 : 1 };
    kern_parallel(ctx, add_task, &j, count);
    return 0;
}
