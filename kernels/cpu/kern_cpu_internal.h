/*
 * The rows of kern_cpu.h's table, one file per group (kern_bn_blk.c, kern_pool_blk.c,
 * kern_detect_blk.c); kern_cpu.c gathers them. Internal to kernels/cpu.
 */
#ifndef KERN_CPU_INTERNAL_H
#define KERN_CPU_INTERNAL_H

#include "kern_cpu.h"

#define KERN_CPU_OP(ret, name, params) ret kern_cpu_##name params;
#include "kern_cpu_ops.def"
#undef KERN_CPU_OP

#endif
