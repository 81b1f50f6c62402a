/*
 * kern_bn_sigmoid's clamp (kern_bn_common.h), alone in this file so that the loops using it
 * cannot see, and fold, its values (see there why that matters: an FP assist per element).
 */
#include "kern_bn_common.h"

const float kern_bn_sigmoid_lim[2] = { -87.0f, 88.0f };
