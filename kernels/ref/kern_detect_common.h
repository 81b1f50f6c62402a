/*
 * The Detect decode's per-element math, shared by the NCHW reference (kern_detect.c) and the
 * channel-blocked decode (cpu/kern_detect_blk.c), so that both give the same bits.
 */
#ifndef KERN_DETECT_COMMON_H
#define KERN_DETECT_COMMON_H

#include <stddef.h>

#include "compiler.h"
#include "kern_bn_common.h"
#include "kern_tensor.h"

/* sig[0..n) = sigmoid(v[0..n)), in lanes: kern_bn_sigmoid, the SiLU's (about 1 ulp from the
 * exact value, as PyTorch's vectorised sigmoid is; libm's expf one element at a time made the
 * decode a tenth of yolov5n's inference at 640). */
static inline KERN_VEC_CLONES void kern_detect_sigmoid_run(float *restrict sig,
                                                           const float *restrict v, size_t n)
{
    for (size_t t = 0; t < n; t++)
        sig[t] = kern_bn_sigmoid(v[t]);
}

/* The box terms of decoded rows o[0 .. tn) (their sigmoids already there), cells j0 on. */
static inline void kern_detect_boxes(const struct kern_detect *d, float *o0, size_t j0, size_t tn,
                                     float aw, float ah)
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

#endif
