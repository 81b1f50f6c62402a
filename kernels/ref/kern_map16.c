/*
 * Max pool, nearest upsample and the concat's copies on 16-bit activations, NCHW or NHWC, CPU
 * reference. Contracts in
 * kern_tensor.h, "Max pool and nearest upsample on 16-bit activations"; each element's steps are
 * kern_map16_common.h's, which the CUDA twins (kern_cuda_map16.cu) run too. Built without FP
 * contraction, as kern_bnx.c (the sums must round as the device's do).
 * Threads: the (image, channel) planes are split over the context's threads.
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdbool.h>

#include "kern_internal.h"
#include "kern_map16_common.h"

/* A plane's view of a tensor: its (0, 0) element and the steps of a row and a column. */
struct plane {
    size_t base, sy, sx;
};

static struct plane plane_of(const struct kern_map16 *d, size_t ld, int h, int w, size_t i,
                             size_t ch)
{
    const size_t at0 = kern_map16_at(d->layout, d->c, h, w, ld, i, ch, 0, 0);
    const size_t sx = d->layout == KERN_LAYOUT_NHWC ? (ld ? ld : (size_t)d->c) : 1;
    return (struct plane){ at0, sx * (size_t)w, sx };
}

struct map_job {
    const struct kern_map16 *d;
    uint16_t *out;
    uint8_t *idx_out;
    const uint16_t *in;
    const uint8_t *idx;
    bool add;
    int kind; /* 0 pool fwd, 1 pool bwd, 2 upsample fwd, 3 upsample bwd, 4 copy */
};

static void plane_task(const struct map_job *j, size_t i, size_t ch)
{
    const struct kern_map16 *const d = j->d;
    const bool up = j->kind == 2 || j->kind == 3;
    const int h = d->h, w = d->w, oh = up ? 2 * h : h, ow = up ? 2 * w : w;
    const struct plane X = plane_of(d, d->x_ld, h, w, i, ch),
                       Y = plane_of(d, d->y_ld, oh, ow, i, ch);
    const struct kern_map16 dense = { .c = d->c, .layout = d->layout };
    const struct plane I = plane_of(&dense, 0, h, w, i, ch);
    switch (j->kind) {
    case 0:
        for (int oy = 0; oy < h; oy++)
            for (int ox = 0; ox < w; ox++) {
                uint16_t *const y = j->out + Y.base + (size_t)oy * Y.sy + (size_t)ox * Y.sx;
                j->idx_out[I.base + (size_t)oy * I.sy + (size_t)ox * I.sx] =
                    (uint8_t)kern_map16_pool_px(j->in + X.base, X.sy, X.sx, h, w, d->k, oy, ox, y);
            }
        break;
    case 1:
        for (int iy = 0; iy < h; iy++)
            for (int ix = 0; ix < w; ix++) {
                uint16_t *const dx = j->out + X.base + (size_t)iy * X.sy + (size_t)ix * X.sx;
                *dx = kern_map16_pool_dx(j->in + Y.base, Y.sy, Y.sx, j->idx + I.base, I.sy, I.sx, h,
                                         w, d->k, iy, ix, j->add, j->add ? *dx : 0);
            }
        break;
    case 2:
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                j->out[Y.base + (size_t)oy * Y.sy + (size_t)ox * Y.sx] =
                    j->in[X.base + (size_t)(oy / 2) * X.sy + (size_t)(ox / 2) * X.sx];
        break;
    case 4:
        for (int iy = 0; iy < h; iy++)
            for (int ix = 0; ix < w; ix++) {
                uint16_t *const y = j->out + Y.base + (size_t)iy * Y.sy + (size_t)ix * Y.sx;
                *y = kern_map16_copy(j->in[X.base + (size_t)iy * X.sy + (size_t)ix * X.sx], j->add,
                                     j->add ? *y : 0);
            }
        break;
    default:
        for (int iy = 0; iy < h; iy++)
            for (int ix = 0; ix < w; ix++) {
                uint16_t *const dx = j->out + X.base + (size_t)iy * X.sy + (size_t)ix * X.sx;
                *dx =
                    kern_map16_up_dx(j->in + Y.base, Y.sy, Y.sx, iy, ix, j->add, j->add ? *dx : 0);
            }
    }
}

static void map_task(void *arg, int w, int nw)
{
    const struct map_job *const j = arg;
    size_t lo, hi;
    kern_share((size_t)j->d->n * (size_t)j->d->c, w, nw, &lo, &hi);
    for (size_t p = lo; p < hi; p++)
        plane_task(j, p / (size_t)j->d->c, p % (size_t)j->d->c);
}

static int map_run(struct kern_ctx *ctx, struct map_job *j, bool args_ok)
{
    KERN_CHECK_CPU_CTX(ctx);
    const struct kern_map16 *const d = j->d;
    if (!d || !args_ok) return -EINVAL;
    /* a pool's map and a copy's keep their size (the copy's k unchecked) */
    if (kern_map16_check(d->n, d->c, d->h, d->w, j->kind == 4 ? 1 : d->k, d->layout, d->dtype,
                         d->x_ld, d->y_ld, j->kind < 2 || j->kind == 4) < 0)
        return -EINVAL;
    kern_parallel(ctx, map_task, j, (size_t)d->n * d->c * (size_t)d->h * (size_t)d->w);
    return 0;
}

int kern_ref_maxpool16_fwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *restrict y,
                           uint8_t *restrict idx, const uint16_t *restrict x)
{
    struct map_job j = { .d = d, .out = y, .idx_out = idx, .in = x, .kind = 0 };
    return map_run(ctx, &j, y && idx && x);
}

int kern_ref_maxpool16_bwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *restrict dx,
                           const uint16_t *restrict dy, const uint8_t *restrict idx, unsigned accum)
{
    struct map_job j = {
        .d = d, .out = dx, .in = dy, .idx = idx, .add = (accum & KERN_ACCUM_DX) != 0, .kind = 1
    };
    return map_run(ctx, &j, dx && dy && idx);
}

int kern_ref_upsample16_fwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *restrict y,
                            const uint16_t *restrict x)
{
    struct map_job j = { .d = d, .out = y, .in = x, .kind = 2 };
    return map_run(ctx, &j, y && x);
}

int kern_ref_upsample16_bwd(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *restrict dx,
                            const uint16_t *restrict dy, unsigned accum)
{
    struct map_job j = {
        .d = d, .out = dx, .in = dy, .add = (accum & KERN_ACCUM_DX) != 0, .kind = 3
    };
    return map_run(ctx, &j, dx && dy);
}

int kern_ref_copy16(struct kern_ctx *ctx, const struct kern_map16 *d, uint16_t *restrict y,
                    const uint16_t *restrict x, unsigned accum)
{
    struct map_job j = {
        .d = d, .out = y, .in = x, .add = (accum & KERN_ACCUM_DX) != 0, .kind = 4
    };
    return map_run(ctx, &j, y && x);
}
