/*
 * kern internals shared by the CPU reference files (and, later, the CUDA backend): the context
 * layout and the argument-checking macros. Not a public header: tests/kernels may include it,
 * nothing else outside kernels/ may.
 */
#ifndef KERN_INTERNAL_H
#define KERN_INTERNAL_H

#include <errno.h>
#include <stddef.h>

#include "kern.h"

struct kern_pool;

struct kern_ctx {
    int backend;            /* KERN_BACKEND_*, fixed at creation */
    int threads;            /* CPU: threads that run an op, caller included; >= 1 */
    int device;             /* CUDA device ordinal */
    void *ws;               /* workspace, ws_size bytes, 16-byte aligned; NULL when 0 */
    size_t ws_size;         /* bytes at ws */
    int ws_owned;           /* 1: ws was allocated by kern_ctx_reserve, freed by the ctx */
    struct kern_pool *pool; /* CPU: threads - 1 sleeping workers; NULL when threads == 1 */
    void *backend_state;    /* reserved for the CUDA backend (stream, handles); NULL on CPU */
};

/*
 * One share of a parallel op: worker `w` of `n` (the caller is worker 0). Work is split
 * statically by (w, n), never by arrival order, so results are identical run to run for a
 * given thread count (and, for ops without cross-element sums, for any thread count).
 */
typedef void kern_task_fn(void *arg, int w, int n);

/*
 * Runs fn on every thread of ctx and returns when all are done; runs fn(arg, 0, 1) on the
 * calling thread when ctx has one thread or `work` (elements touched) is too small to pay for
 * the wake-up.
 */
void kern_parallel(struct kern_ctx *ctx, kern_task_fn *fn, void *arg, size_t work);

/* The n that kern_parallel(ctx, ..., work) will pass to fn: 1 or the context's threads. */
int kern_parallel_width(const struct kern_ctx *ctx, size_t work);

/* The [lo, hi) share of worker w of n over count items (contiguous, sizes differ by <= 1). */
static inline void kern_share(size_t count, int w, int n, size_t *lo, size_t *hi)
{
    *lo = count * (size_t)w / (size_t)n;
    *hi = count * (size_t)(w + 1) / (size_t)n;
}

/* kern_ref_bce_logits_bwd's gradient scale, dloss / (rows cols) (kern_loss.c): one definition
 * for the ops that form it themselves (kern_yolo_loss.c). */
static inline float kern_bce_logits_scale(float dloss, size_t rows, size_t cols)
{
    return (float)((double)dloss / ((double)rows * (double)cols));
}

/* kern_ref_bce_logits_bwd's pass over rows [r0, r1) on the calling thread, scale formed. */
void kern_bce_logits_grad(float *KERN_RESTRICT dx, const float *KERN_RESTRICT x,
                          const float *KERN_RESTRICT t, size_t r0, size_t r1, size_t cols,
                          size_t ldx, float scale, int add);

/*
 * Rows of a BCE block spread over planes (the loss's objectness column in a channel-blocked
 * Detect output, kern_yolo_loss.blk): row r is in plane p = r / rows, which starts at
 * x + kern_bce_map_plane(m, p) (image p / na, anchor p % na), its rows ldx apart. One plane of
 * every row with na 1 and aoff[0] 0 is the plain block.
 */
struct kern_bce_map {
    size_t rows, ldx; /* rows per plane, the stride between them */
    size_t na, img;   /* planes per image, an image's floats */
    size_t aoff[KERN_YOLO_MAX_ANCHORS];
};

static inline size_t kern_bce_map_plane(const struct kern_bce_map *m, size_t p)
{
    return p / m->na * m->img + m->aoff[p % m->na];
}

/* kern_ref_bce_logits_fwd over a map (arguments checked by the caller): the same runs of rows,
 * so the same bits as the plain block of the same values. */
int kern_bce_map_fwd(struct kern_ctx *ctx, float *loss, const float *KERN_RESTRICT x,
                     const float *KERN_RESTRICT t, size_t rows, size_t cols,
                     const struct kern_bce_map *m);

/* Checks an argument at the API boundary: returns rc from the calling function when cond. */
#define KERN_RETURN_IF(cond, rc) \
    do {                         \
        if (cond) return (rc);   \
    } while (0)

/* The reference ops need a live CPU context. */
#define KERN_CHECK_CPU_CTX(ctx)                                        \
    do {                                                               \
        if (!(ctx)) return -EINVAL;                                    \
        if ((ctx)->backend != KERN_BACKEND_CPU) return -KERN_EBACKEND; \
    } while (0)

/* Reserved-but-unused accumulation bits are an error, so a typo cannot silently overwrite. */
#define KERN_CHECK_ACCUM(accum)                                             \
    do {                                                                    \
        if ((accum) & ~(KERN_ACCUM_DX | KERN_ACCUM_DPARAM)) return -EINVAL; \
    } while (0)

#endif
