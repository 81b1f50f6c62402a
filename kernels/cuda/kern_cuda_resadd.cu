/*
 * BN + SiLU + residual add, fused (the YOLOv5 bottleneck's x + cv2(cv1(x))), CUDA. Contracts in
 * kern.h, "BN + SiLU + residual add", and kern_cuda.h.
 *
 * Shapes (NCHW, float32, device memory): x (n, c, hw) dense; y and r (n, c, hw) stepping
 * d->y_nstride and d->r_nstride elements per image (0: c hw, dense); gamma, beta, running_mean,
 * running_var, save_mean, save_invstd (c); sums (KERN_BN_SUMS_LEN(c) doubles).
 *
 * The per-channel coefficients come from the BN forward's own kernels (kern_cuda_bn_coef_*,
 * kern_cuda_internal.h): training is bn_fwd_train's passes 1 and 2, eval and SyncBatchNorm's
 * apply their coefficient kernels. Then one launch, one block per (image, channel) plane, writes
 * y = silu(x a + b) + r: x and r read once, y written once, the SiLU output never stored.
 * z = x a + b and silu(z) are computed as bn_apply_fwd does, and the product is rounded before
 * the add (__fmul_rn keeps nvcc from fusing it with the add into an FMA), so y is bit for bit
 * kern_cuda_bn_silu_fwd_* followed by kern_cuda_add_fwd.
 * No gradients (forward only). Also the fused conv + BN + SiLU of inference, as its unfused ops.
 */
#include "kern_cuda_internal.h"

/* y = silu(x a + b) + r, one block per plane; coef[ch] = a, coef[c + ch] = b. */
static __global__ void resadd_apply(float *__restrict__ y, const float *__restrict__ x,
                                    const float *__restrict__ r, const float *__restrict__ coef,
                                    int c, int hw, size_t ysn, size_t rsn)
{
    const size_t plane = blockIdx.x, img = plane / (size_t)c;
    const int ch = (int)(plane % (size_t)c);
    const float a = coef[ch], b = coef[c + ch];
    const float *const xp = x + plane * (size_t)hw;
    const float *const rp = r + img * rsn + (size_t)ch * (size_t)hw;
    float *const yp = y + img * ysn + (size_t)ch * (size_t)hw;
    for (int j = threadIdx.x; j < hw; j += blockDim.x) {
        const float z = xp[j] * a + b;
        yp[j] = __fmul_rn(z, kern_cuda_sigmoid(z)) + rp[j];
    }
}

/* The checks every variant shares; *ysn, *rsn: the image steps of y and r. */
static int resadd_check(struct kern_ctx *ctx, const struct kern_bn *d, const float *y,
                        const float *x, const float *gamma, const float *beta, const float *r,
                        size_t *ysn, size_t *rsn)
{
    KERN_CHECK_CUDA_CTX(ctx);
    const int rc = kern_cuda_bn_check_ysn(d, ysn);
    if (rc < 0) return rc;
    const size_t dense = (size_t)d->c * (size_t)d->hw;
    if (d->r_nstride && d->r_nstride < dense) return -EINVAL;
    if (!y || !x || !gamma || !beta || !r) return -EINVAL;
    *rsn = d->r_nstride ? d->r_nstride : dense;
    return 0;
}

static int resadd_launch(struct kern_ctx *ctx, const struct kern_bn *d, float *y, const float *x,
                         const float *r, const float *coef, size_t ysn, size_t rsn)
{
    resadd_apply<<<(unsigned)((size_t)d->n * (size_t)d->c), KERN_CUDA_THREADS, 0,
                   kern_cuda_st(ctx)->stream>>>(y, x, r, coef, d->c, d->hw, ysn, rsn);
    return kern_cuda_launched(ctx, "bn_silu_add_fwd");
}

int kern_cuda_bn_silu_add_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d,
                                    float *__restrict__ y, float *__restrict__ save_mean,
                                    float *__restrict__ save_invstd,
                                    float *__restrict__ running_mean,
                                    float *__restrict__ running_var, const float *__restrict__ x,
                                    const float *__restrict__ gamma, const float *__restrict__ beta,
                                    const float *__restrict__ r)
{
    size_t ysn = 0, rsn = 0;
    int rc = resadd_check(ctx, d, y, x, gamma, beta, r, &ysn, &rsn);
    if (rc < 0) return rc;
    if (kern_bn_check_running(d, running_mean, running_var) < 0) return -EINVAL;
    const float *coef = NULL;
    rc = kern_cuda_bn_coef_train(ctx, d, save_mean, save_invstd, running_mean, running_var, x,
                                 gamma, beta, &coef);
    if (rc < 0) return rc;
    return resadd_launch(ctx, d, y, x, r, coef, ysn, rsn);
}

int kern_cuda_bn_silu_add_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d,
                                   float *__restrict__ y, const float *__restrict__ x,
                                   const float *__restrict__ gamma, const float *__restrict__ beta,
                                   const float *__restrict__ running_mean,
                                   const float *__restrict__ running_var,
                                   const float *__restrict__ r)
{
    size_t ysn = 0, rsn = 0;
    int rc = resadd_check(ctx, d, y, x, gamma, beta, r, &ysn, &rsn);
    if (rc < 0) return rc;
    if (!running_mean || !running_var) return -EINVAL;
    const float *coef = NULL;
    rc = kern_cuda_bn_coef_eval(ctx, d, gamma, beta, running_mean, running_var, &coef);
    if (rc < 0) return rc;
    return resadd_launch(ctx, d, y, x, r, coef, ysn, rsn);
}

int kern_cuda_bn_silu_add_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d,
                                    float *__restrict__ y, float *__restrict__ save_mean,
                                    float *__restrict__ save_invstd,
                                    float *__restrict__ running_mean,
                                    float *__restrict__ running_var, const float *__restrict__ x,
                                    const float *__restrict__ gamma, const float *__restrict__ beta,
                                    const double *__restrict__ sums, const float *__restrict__ r)
{
    size_t ysn = 0, rsn = 0;
    int rc = resadd_check(ctx, d, y, x, gamma, beta, r, &ysn, &rsn);
    if (rc < 0) return rc;
    if (!sums) return -EINVAL;
    if (kern_bn_check_running(d, running_mean, running_var) < 0) return -EINVAL;
    const float *coef = NULL;
    rc = kern_cuda_bn_coef_sums(ctx, d, save_mean, save_invstd, running_mean, running_var, gamma,
                                beta, sums, &coef);
    if (rc < 0) return rc;
    return resadd_launch(ctx, d, y, x, r, coef, ysn, rsn);
}

/* The fused conv + BN + SiLU (+ r) of inference, unfused here: cuDNN's forward into tmp, then
 * the BN+SiLU op (with r, the fused add above), so the result is theirs bit for bit. */
int kern_cuda_conv2d_bn_silu_fwd_eval(struct kern_ctx *ctx, const struct kern_conv2d *c,
                                      const struct kern_bn *d, float *__restrict__ y,
                                      float *__restrict__ tmp, const float *__restrict__ x,
                                      const float *__restrict__ w, const float *__restrict__ gamma,
                                      const float *__restrict__ beta,
                                      const float *__restrict__ running_mean,
                                      const float *__restrict__ running_var,
                                      const float *__restrict__ r)
{
    int oh = 0, ow = 0;
    if (!c || !d || !tmp || kern_conv2d_out_hw(c, &oh, &ow) < 0) return -EINVAL;
    if (d->n != c->n || d->c != c->c_out || d->hw != oh * ow) return -EINVAL;
    const int rc = kern_cuda_conv2d_fwd(ctx, c, tmp, x, w, NULL);
    if (rc < 0) return rc;
    if (r)
        return kern_cuda_bn_silu_add_fwd_eval(ctx, d, y, tmp, gamma, beta, running_mean,
                                              running_var, r);
    return kern_cuda_bn_silu_fwd_eval(ctx, d, y, tmp, gamma, beta, running_mean, running_var);
}
