/*
 * The CUDA op table, kern_ops_cuda(): the kern_cuda_* twins in struct kern_ops order. Its own
 * translation unit so that only programs that ask for the table link every CUDA op (and
 * cuDNN). No tensors here; no gradients.
 */
#include "kern_cuda_internal.h"

static const struct kern_ops kern_cuda_ops = {
    KERN_BACKEND_CUDA,
    kern_cuda_conv2d_workspace_size,
    kern_cuda_conv2d_fwd,
    kern_cuda_conv2d_bwd_data,
    kern_cuda_conv2d_bwd_filter,
    kern_cuda_conv2d_bwd_bias,
    kern_cuda_bn_fwd_train,
    kern_cuda_bn_fwd_eval,
    kern_cuda_bn_bwd,
    kern_cuda_silu_fwd,
    kern_cuda_silu_bwd,
    kern_cuda_bn_silu_fwd_train,
    kern_cuda_bn_silu_fwd_eval,
    kern_cuda_bn_silu_bwd,
    kern_cuda_maxpool2d_fwd,
    kern_cuda_maxpool2d_bwd,
    kern_cuda_upsample2x_fwd,
    kern_cuda_upsample2x_bwd,
    kern_cuda_concat_fwd,
    kern_cuda_concat_bwd,
    kern_cuda_add_fwd,
    kern_cuda_add_bwd,
    kern_cuda_detect_reshape_fwd,
    kern_cuda_detect_reshape_bwd,
    kern_cuda_detect_decode,
    kern_cuda_bce_logits_fwd,
    kern_cuda_bce_logits_bwd,
    kern_cuda_ciou_fwd,
    kern_cuda_ciou_bwd,
    kern_cuda_bn_stats,
    kern_cuda_bn_fwd_apply,
    kern_cuda_bn_silu_fwd_apply,
    kern_cuda_bn_bwd_reduce,
    kern_cuda_bn_silu_bwd_reduce,
    kern_cuda_bn_bwd_apply,
    kern_cuda_bn_silu_bwd_apply,
    /* --- optim --- */
    /* --- yololoss --- */
    /* --- augment --- */
};

const struct kern_ops *kern_ops_cuda(void)
{
    return &kern_cuda_ops;
}
