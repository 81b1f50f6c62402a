/*
 * Batch norm argument checks and the image stride, shared by the CPU reference (kern_bn.c,
 * kern_bn_sync.c, kern_resadd.c through kern_bn_common.h) and the CUDA ops (through
 * kern_cuda_internal.h), so both backends refuse the same arguments. Plain C that nvcc also
 * compiles. Private to kernels/.
 */
#ifndef KERN_BN_ARGS_H
#define KERN_BN_ARGS_H

#include <errno.h>
#include <stddef.h>

#include "kern.h"

static inline int kern_bn_check(const struct kern_bn *d)
{
    if (!d || d->n < 1 || d->c < 1 || d->hw < 1) return -EINVAL;
    if (!(d->eps >= 0.0f) || !(d->momentum >= 0.0f && d->momentum <= 1.0f)) return -EINVAL;
    /* a channel slice is at least as wide as its own channels: images never overlap */
    if (d->y_nstride && d->y_nstride < (size_t)d->c * (size_t)d->hw) return -EINVAL;
    return 0;
}

/* Running statistics come as a pair or not at all, and their update needs at least two values
 * per channel (the unbiased variance divides by n hw - 1). */
static inline int kern_bn_check_running(const struct kern_bn *d, const float *running_mean,
                                        const float *running_var)
{
    if (!running_mean != !running_var) return -EINVAL;
    if (running_mean && (size_t)d->n * (size_t)d->hw < 2) return -EINVAL;
    return 0;
}

/* Elements from one image to the next in y and dy: d->y_nstride, or c * hw when 0 (dense). */
static inline size_t kern_bn_y_nstride(const struct kern_bn *d)
{
    return d->y_nstride ? d->y_nstride : (size_t)d->c * (size_t)d->hw;
}

#endif
