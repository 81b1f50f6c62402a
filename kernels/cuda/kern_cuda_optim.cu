/*
 * Optimizer ops, CUDA: the twins of kernels/ref/kern_optim.c (kern.h "Optimizer step, ...").
 *
 * Layout: flat float32 buffers in device memory sharing one layout; a device segment table
 * (offset, count, start, group) selects the elements. Updates overwrite (=) params, momentum and
 * ema in place (and the step's optional 16-bit copy of params, kern_sgd.params_lowp); grads are
 * read only, except by kern_cuda_amp_unscale (scaled in place).
 *
 * MULTI-TENSOR WALK. The segments, laid end to end, form a virtual index space [0, total)
 * (seg.start is each one's first virtual index). Block b takes the chunk [b CH, (b + 1) CH),
 * finds the segment holding its first index by binary search over the starts, and walks the
 * segments its chunk overlaps, its threads striding over each piece. One launch covers every
 * tensor of the model (about 350 for YOLOv5s) however small, and padding is never touched.
 *
 * FLOAT SEMANTICS. Every product and sum is __fmul_rn / __fadd_rn (nvcc would otherwise
 * contract them into FMAs), divisions __fdiv_rn, sqrt in double: the step, EMA, unscale and
 * casts equal the CPU reference bit for bit. The sum of squares adds exact double squares per
 * thread, then fixed per-block partials in a fixed order: deterministic, within double rounding
 * of the CPU's sequential sum.
 */
#include <math.h>
#include <stdint.h>

#include "kern_cuda_internal.h"
#include "kern_lowp_common.h"
#include "kern_optim_common.h"

#define OPTIM_CHUNK      4096 /* virtual elements per block of the step, unscale */
#define OPTIM_SUM_BLOCKS 1024 /* at most this many partials of the sum of squares */
#define OPTIM_SUM_MIN_CH 2048

/* Index of the segment holding virtual index v: the last s with seg[s].start <= v. */
static __device__ __forceinline__ size_t seg_find(const kern_optim_seg *__restrict__ seg,
                                                  size_t n_seg, size_t v)
{
    size_t lo = 0, hi = n_seg; /* seg[lo].start <= v < seg[hi].start (hi == n_seg: end) */
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        if (seg[mid].start <= v)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/*
 * Calls f(s, offset of the element) for every element of this block's chunk, threads striding.
 * ch: chunk size; total: the table's total.
 */
template <typename F>
static __device__ __forceinline__ void seg_walk(const kern_optim_seg *__restrict__ seg,
                                                size_t n_seg, size_t total, size_t ch, F f)
{
    const size_t v0 = (size_t)blockIdx.x * ch;
    if (v0 >= total) return;
    const size_t v1 = v0 + ch < total ? v0 + ch : total;
    for (size_t s = seg_find(seg, n_seg, v0); s < n_seg && seg[s].start < v1; s++) {
        const size_t st = seg[s].start, lo = v0 > st ? v0 : st;
        const size_t end = st + seg[s].count, hi = v1 < end ? v1 : end;
        const size_t base = seg[s].offset - st;
        for (size_t v = lo + threadIdx.x; v < hi; v += blockDim.x)
            f(s, base + v);
    }
}

static int optim_check_table(size_t n_seg, size_t total, const void *seg)
{
    return !seg || n_seg == 0 || total == 0 ? -EINVAL : 0;
}

static unsigned optim_blocks(size_t total, size_t ch)
{
    return (unsigned)((total + ch - 1) / ch);
}

/* ---- SGD step ---- */

/* The casts' roundings (defined with the cast kernels below), for the step's 16-bit copy. */

/* params_lowp at element i of segment *S = params[i] cast to dtype (kern_sgd.params_lowp), at the
 * place the segment's lowp order gives (kern_optim_common.h); nothing when lp is NULL. */
static __device__ __forceinline__ void sgd_store_lowp(uint16_t *__restrict__ lp, int dtype,
                                                      const kern_optim_seg *__restrict__ S,
                                                      size_t i, float t)
{
    if (!lp) return;
    i = kern_lowp_index(&S->lowp, S->offset, i - S->offset);
    lp[i] = dtype == KERN_DT_BF16 ? kern_bf16_from_f32(t) : kern_f16_from_f32(t);
}

__global__ void sgd_step_kernel(kern_sgd d, float *__restrict__ th, float *__restrict__ buf,
                                float *__restrict__ ema, const float *__restrict__ gr,
                                const kern_optim_seg *__restrict__ seg,
                                const double *__restrict__ sumsq,
                                const int32_t *__restrict__ found_inf)
{
    /* The per-step scalars: the descriptor's (kernel parameters), or those in device memory at
     * d.dyn, which a replayed graph reads afresh each step. One load per block; the same float
     * values either way, so the results are bitwise the same. */
    __shared__ kern_sgd_dyn sc;
    if (threadIdx.x == 0) {
        if (d.dyn) {
            sc = *d.dyn;
        } else {
            for (int g = 0; g < KERN_OPTIM_MAX_GROUPS; g++)
                sc.group[g] = d.group[g];
            sc.first = d.first;
            sc.grad_scale = d.grad_scale;
            sc.ema_decay = d.ema_decay;
            sc.ema_weight = d.ema_weight;
        }
    }
    __syncthreads();
    uint16_t *const lp = (uint16_t *)d.params_lowp;
    if ((found_inf && *found_inf) ||
        (d.skip_nonfinite && sumsq &&
         !isfinite(*sumsq))) { /* skipped step: theta unchanged, the EMA still moves */
        if (ema || lp)
            seg_walk(seg, d.n_seg, d.total, OPTIM_CHUNK, [&](size_t s, size_t i) {
                const float t = th[i];
                if (ema)
                    ema[i] =
                        __fadd_rn(__fmul_rn(ema[i], sc.ema_decay), __fmul_rn(sc.ema_weight, t));
                sgd_store_lowp(lp, d.lowp_dtype, &seg[s], i, t);
            });
        return;
    }
    float mult = sc.grad_scale;
    if (sumsq && d.max_norm > 0.0f) {
        const double norm = sqrt(*sumsq) * (double)sc.grad_scale;
        const float coef = __fdiv_rn(d.max_norm, __fadd_rn((float)norm, 1e-6f));
        if (coef < 1.0f) mult = __fmul_rn(sc.grad_scale, coef);
    }
    seg_walk(seg, d.n_seg, d.total, OPTIM_CHUNK, [&](size_t s, size_t i) {
        const kern_sgd_group G = sc.group[seg[s].group];
        float g = gr[i];
        const float t0 = th[i];
        if (mult != 1.0f) g = __fmul_rn(g, mult);
        if (G.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(G.weight_decay, t0));
        const float b = sc.first ? g : __fadd_rn(__fmul_rn(buf[i], G.momentum), g);
        buf[i] = b;
        g = d.nesterov ? __fadd_rn(g, __fmul_rn(G.momentum, b)) : b;
        const float t = __fadd_rn(t0, __fmul_rn(-G.lr, g));
        th[i] = t;
        if (ema) ema[i] = __fadd_rn(__fmul_rn(ema[i], sc.ema_decay), __fmul_rn(sc.ema_weight, t));
        sgd_store_lowp(lp, d.lowp_dtype, &seg[s], i, t);
    });
}

static int sgd_desc_check(const kern_sgd *d)
{
    if (!d || d->n_seg == 0 || d->total == 0) return -EINVAL;
    if (d->n_groups < 1 || d->n_groups > KERN_OPTIM_MAX_GROUPS) return -EINVAL;
    if (!isfinite(d->max_norm)) return -EINVAL;
    if (d->params_lowp && d->lowp_dtype != KERN_DT_BF16 && d->lowp_dtype != KERN_DT_F16)
        return -EINVAL;
    if (d->dyn) return 0; /* the per-step scalars are on the device: the kernel reads them */
    if (!isfinite(d->grad_scale)) return -EINVAL;
    if (!isfinite(d->ema_decay) || !isfinite(d->ema_weight)) return -EINVAL;
    for (int g = 0; g < d->n_groups; g++)
        if (!isfinite(d->group[g].lr) || !isfinite(d->group[g].momentum) ||
            !isfinite(d->group[g].weight_decay))
            return -EINVAL;
    return 0;
}

int kern_cuda_sgd_step(struct kern_ctx *ctx, const struct kern_sgd *d, float *__restrict__ params,
                       float *__restrict__ momentum, float *__restrict__ ema,
                       const float *__restrict__ grads,
                       const struct kern_optim_seg *__restrict__ seg,
                       const double *__restrict__ sumsq, const int32_t *__restrict__ found_inf)
{
    KERN_CHECK_CUDA_CTX(ctx);
    int rc = sgd_desc_check(d);
    if (rc < 0) return rc;
    if (!params || !momentum || !grads || (rc = optim_check_table(d->n_seg, d->total, seg)) < 0)
        return -EINVAL;
    sgd_step_kernel<<<optim_blocks(d->total, OPTIM_CHUNK), KERN_CUDA_THREADS, 0,
                      kern_cuda_st(ctx)->stream>>>(*d, params, momentum, ema, grads, seg, sumsq,
                                                   found_inf);
    return kern_cuda_launched(ctx, "sgd_step");
}

/* ---- sum of squares ---- */

__global__ void sumsq_partial(double *__restrict__ part, const float *__restrict__ gr,
                              const kern_optim_seg *__restrict__ seg, size_t n_seg, size_t total,
                              size_t ch)
{
    double s = 0.0, unused = 0.0;
    seg_walk(seg, n_seg, total, ch, [&](size_t, size_t i) {
        const double v = (double)gr[i];
        s = __dadd_rn(s, __dmul_rn(v, v));
    });
    kern_cuda_block_sum2(s, unused);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void sumsq_final(double *__restrict__ out, const double *__restrict__ part, int nparts)
{
    double s = 0.0, unused = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        s += part[i];
    kern_cuda_block_sum2(s, unused);
    if (threadIdx.x == 0) *out = s;
}

int kern_cuda_optim_sumsq(struct kern_ctx *ctx, double *__restrict__ sumsq,
                          const float *__restrict__ grads,
                          const struct kern_optim_seg *__restrict__ seg, size_t n_seg, size_t total)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!sumsq || !grads || optim_check_table(n_seg, total, seg) < 0) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    size_t ch = (total + OPTIM_SUM_BLOCKS - 1) / OPTIM_SUM_BLOCKS;
    ch = ch < OPTIM_SUM_MIN_CH ? OPTIM_SUM_MIN_CH : ch;
    const unsigned nb = optim_blocks(total, ch);
    double *const part = (double *)st->scratch;
    sumsq_partial<<<nb, KERN_CUDA_THREADS, 0, st->stream>>>(part, grads, seg, n_seg, total, ch);
    sumsq_final<<<1, KERN_CUDA_THREADS, 0, st->stream>>>(sumsq, part, (int)nb);
    return kern_cuda_launched(ctx, "optim_sumsq");
}

/* ---- EMA ---- */

__global__ void ema_kernel(float *__restrict__ ema, const float *__restrict__ x, size_t count,
                           float decay, float weight)
{
    KERN_CUDA_LOOP(i, count)
    {
        ema[i] = __fadd_rn(__fmul_rn(ema[i], decay), __fmul_rn(weight, x[i]));
    }
}

int kern_cuda_ema_update(struct kern_ctx *ctx, float *__restrict__ ema, const float *__restrict__ x,
                         size_t count, float decay, float weight)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (count && (!ema || !x)) return -EINVAL;
    if (count == 0) return 0;
    ema_kernel<<<kern_cuda_blocks(count), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        ema, x, count, decay, weight);
    return kern_cuda_launched(ctx, "ema_update");
}

__global__ void ema_dyn_kernel(float *__restrict__ ema, const float *__restrict__ x, size_t count,
                               const kern_sgd_dyn *__restrict__ dyn)
{
    const float decay = dyn->ema_decay, weight = dyn->ema_weight;
    KERN_CUDA_LOOP(i, count)
    {
        ema[i] = __fadd_rn(__fmul_rn(ema[i], decay), __fmul_rn(weight, x[i]));
    }
}

int kern_cuda_ema_update_dyn(struct kern_ctx *ctx, float *__restrict__ ema,
                             const float *__restrict__ x, size_t count,
                             const struct kern_sgd_dyn *__restrict__ dyn)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!dyn || (count && (!ema || !x))) return -EINVAL;
    if (count == 0) return 0;
    ema_dyn_kernel<<<kern_cuda_blocks(count), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>(
        ema, x, count, dyn);
    return kern_cuda_launched(ctx, "ema_update_dyn");
}

/* ---- AMP unscale and check ---- */

__global__ void unscale_kernel(float *__restrict__ gr, const kern_optim_seg *__restrict__ seg,
                               size_t n_seg, size_t total, float scale,
                               int32_t *__restrict__ found_inf)
{
    int bad = 0;
    seg_walk(seg, n_seg, total, OPTIM_CHUNK, [&](size_t, size_t i) {
        const float v = gr[i];
        bad |= !isfinite(v);
        gr[i] = __fmul_rn(v, scale);
    });
    /* Every writer stores the same 1: no atomics needed. */
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1;
}

int kern_cuda_amp_unscale(struct kern_ctx *ctx, float *__restrict__ grads,
                          const struct kern_optim_seg *__restrict__ seg, size_t n_seg, size_t total,
                          float scale, int32_t *__restrict__ found_inf)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!grads || !found_inf || optim_check_table(n_seg, total, seg) < 0) return -EINVAL;
    unscale_kernel<<<optim_blocks(total, OPTIM_CHUNK), KERN_CUDA_THREADS, 0,
                     kern_cuda_st(ctx)->stream>>>(grads, seg, n_seg, total, scale, found_inf);
    return kern_cuda_launched(ctx, "amp_unscale");
}

/* ---- casts (the integer rounding of kern_optim.c: kern_lowp_common.h) ---- */

__global__ void cast_f32_bf16_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src,
                                     size_t count)
{
    KERN_CUDA_LOOP(i, count)
    {
        dst[i] = kern_bf16_from_f32(src[i]);
    }
}

__global__ void cast_bf16_f32_kernel(float *__restrict__ dst, const uint16_t *__restrict__ src,
                                     size_t count)
{
    KERN_CUDA_LOOP(i, count)
    {
        dst[i] = kern_bf16_to_f32(src[i]);
    }
}

__global__ void cast_f32_f16_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src,
                                    size_t count)
{
    KERN_CUDA_LOOP(i, count)
    {
        dst[i] = kern_f16_from_f32(src[i]);
    }
}

__global__ void cast_f16_f32_kernel(float *__restrict__ dst, const uint16_t *__restrict__ src,
                                    size_t count)
{
    KERN_CUDA_LOOP(i, count)
    {
        dst[i] = kern_f16_to_f32(src[i]);
    }
}

#define OPTIM_CAST_OP(name, kernel, dst_t, src_t)                                             \
    int kern_cuda_##name(struct kern_ctx *ctx, dst_t *__restrict__ dst,                       \
                         const src_t *__restrict__ src, size_t count)                         \
    {                                                                                         \
        KERN_CHECK_CUDA_CTX(ctx);                                                             \
        if (count && (!dst || !src)) return -EINVAL;                                          \
        if (count == 0) return 0;                                                             \
        kernel<<<kern_cuda_blocks(count), KERN_CUDA_THREADS, 0, kern_cuda_st(ctx)->stream>>>( \
            dst, src, count);                                                                 \
        return kern_cuda_launched(ctx, #name);                                                \
    }

OPTIM_CAST_OP(cast_f32_bf16, cast_f32_bf16_kernel, uint16_t, float)
OPTIM_CAST_OP(cast_bf16_f32, cast_bf16_f32_kernel, float, uint16_t)
OPTIM_CAST_OP(cast_f32_f16, cast_f32_f16_kernel, uint16_t, float)
OPTIM_CAST_OP(cast_f16_f32, cast_f16_f32_kernel, float, uint16_t)
