/*
 * kern_cpu.h's table, built from kern_cpu_ops.def with designated initialisers, so that a member
 * can only hold the function of its own name.
 */
#include "kern_cpu_internal.h"

static const struct kern_cpu_ops ops = {
#define KERN_CPU_OP(ret, name, params) .name = kern_cpu_##name,
#include "kern_cpu_ops.def"
#undef KERN_CPU_OP
};

const struct kern_cpu_ops *kern_ops_cpu(void)
{
    return &ops;
}
