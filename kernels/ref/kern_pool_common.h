/*
 * The max pool's window rule, shared by the NCHW reference (kern_pool.c) and the channel-blocked
 * pools (cpu/kern_pool_blk.c), so that both pick the same element.
 */
#ifndef KERN_POOL_COMMON_H
#define KERN_POOL_COMMON_H

#include <math.h>

/* The window rule of PyTorch's CPU max_pool2d, scanning row-major: take v when v > m or v is
 * NaN. So the result is the last NaN of the window if it has one, else its first maximum. */
#define POOL_TAKE(v, m) ((v) > (m) || isnan(v))

#endif
