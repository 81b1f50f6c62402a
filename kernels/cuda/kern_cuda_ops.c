/*
 * The CUDA op table, kern_ops_cuda(): the kern_cuda_* twins, one per row of kern_ops.def, by
 * name. A C file (no device code here): C has the designated initialisers that C++17 lacks.
 * Its own translation unit so that only programs that ask for the table link every CUDA op (and
 * cuDNN).
 */
#include "kern_cuda.h"

static const struct kern_ops kern_cuda_ops = {
    .backend = KERN_BACKEND_CUDA,
#define KERN_OP(name, params) .name = kern_cuda_##name,
#include "kern_ops.def"
#undef KERN_OP
};

const struct kern_ops *kern_ops_cuda(void)
{
    return &kern_cuda_ops;
}
