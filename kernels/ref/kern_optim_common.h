/*
 * Where the SGD step's 16-bit copy puts a parameter (kern_optim.h REDUCED-PRECISION COPY,
 * struct kern_lowp_order), shared by the CPU reference (kern_optim.c) and the CUDA step
 * (kern_cuda_optim.cu): under nvcc the function is also a __device__ one, so both backends write
 * every element of the copy at the same place. The order is checked by kern_optim_segs_prepare
 * before any of this runs. Private to kernels/.
 */
#ifndef KERN_OPTIM_COMMON_H
#define KERN_OPTIM_COMMON_H

#include <stddef.h>

#include "kern.h"
#include "kern_s2d_common.h"

/* The element of params_lowp that the segment's element e (0 <= e < count) goes to, the segment
 * starting at element `offset` of the buffers. */
KERN_S2D_FN size_t kern_lowp_index(const struct kern_lowp_order *L, size_t offset, size_t e)
{
    if (L->s2d > 0) {
        /* w6 -> w3 OIHW (kern_s2d_w_dst reads only c and c_out), then channels last if asked */
        const struct kern_s2d d = { 1, L->c, 2, 2, L->s2d, KERN_LAYOUT_NCHW };
        size_t w = kern_s2d_w_dst(&d, e);
        if (L->hw) {
            const size_t co = (size_t)L->s2d, per = co * 9;
            w = w / per * per + w % 9 * co + w / 9 % co;
        }
        return L->at + w;
    }
    if (L->c > 0) {
        const size_t c = (size_t)L->c, hw = (size_t)L->hw;
        const size_t o = e / (c * hw), ch = e / hw % c, p = e % hw;
        return offset + (o * hw + p) * c + ch;
    }
    return offset + e;
}

#endif
