/*
 * The CUDA op table, kern_ops_cuda(): the kern_cuda_* twins in struct kern_ops order. Its own
 * translation unit so that only programs that ask for the table link every CUDA op (and
 * cuDNN). No tensors here; no gradients.
 */
#include "kern_cuda_internal.h"

static const struct kern_ops kern_cuda_ops = {
    KERN_BACKEND_CUDA, kern_cuda_conv2d_workspace_size, kern_cuda_conv2d_fwd,
    kern_cuda_conv2d_bwd_data, kern_cuda_conv2d_bwd_filter, kern_cuda_conv2d_bwd_bias,
    kern_cuda_bn_fwd_train, kern_cuda_bn_fwd_eval, kern_cuda_bn_bwd, kern_cuda_silu_fwd,
    kern_cuda_silu_bwd, kern_cuda_bn_silu_fwd_train, kern_cuda_bn_silu_fwd_eval,
    kern_cuda_bn_silu_bwd, kern_cuda_maxpool2d_fwd, kern_cuda_maxpool2d_bwd,
    kern_cuda_upsample2x_fwd, kern_cuda_upsample2x_bwd, kern_cuda_concat_fwd, kern_cuda_concat_bwd,
    kern_cuda_add_fwd, kern_cuda_add_bwd, kern_cuda_detect_reshape_fwd,
    kern_cuda_detect_reshape_bwd, kern_cuda_detect_decode, kern_cuda_bce_logits_fwd,
    kern_cuda_bce_logits_bwd, kern_cuda_ciou_fwd, kern_cuda_ciou_bwd, kern_cuda_bn_stats,
    kern_cuda_bn_fwd_apply, kern_cuda_bn_silu_fwd_apply, kern_cuda_bn_bwd_reduce,
    kern_cuda_bn_silu_bwd_reduce, kern_cuda_bn_bwd_apply, kern_cuda_bn_silu_bwd_apply,
    /* --- optim --- */
    kern_cuda_sgd_step, kern_cuda_optim_sumsq, kern_cuda_ema_update, kern_cuda_amp_unscale,
    kern_cuda_cast_f32_bf16, kern_cuda_cast_bf16_f32, kern_cuda_cast_f32_f16,
    kern_cuda_cast_f16_f32,
    /* --- yololoss --- */
    kern_cuda_yolo_loss_scratch_size, kern_cuda_yolo_loss,
    /* --- augment --- */
    kern_cuda_aug_paste, kern_cuda_aug_warp, kern_cuda_aug_hsv, kern_cuda_aug_flip,
    kern_cuda_aug_mixup, kern_cuda_aug_to_nchw, kern_cuda_aug_batch,
    /* --- graph --- */
    kern_cuda_ema_update_dyn,
    /* --- lowp --- */
    kern_cuda_conv2d_lowp_workspace_size, kern_cuda_conv2d_lowp_fwd, kern_cuda_conv2d_lowp_bwd_data,
    kern_cuda_conv2d_lowp_bwd_filter, kern_cuda_conv2d_lowp_bwd_bias,
    /* --- resadd --- */
    kern_cuda_bn_silu_add_fwd_train, kern_cuda_bn_silu_add_fwd_eval,
    kern_cuda_bn_silu_add_fwd_apply,
    /* --- stride --- */
    kern_cuda_upsample2x_ns_fwd, kern_cuda_upsample2x_ns_bwd, kern_cuda_cast_f32_lowp_ns,
    kern_cuda_cast_lowp_f32_ns,
    /* --- stream --- */
    /* --- wcast --- */
};

const struct kern_ops *kern_ops_cuda(void)
{
    return &kern_cuda_ops;
}
