/*
 * Optimizer ops, CPU reference: the multi-tensor SGD step (with gradient scaling, clipping and
 * the EMA fused), the squared gradient norm, the plain EMA, AMP unscale-and-check and the
 * float32 <-> bf16 / fp16 casts (kern.h "Optimizer step, ...").
 *
 * Layout: flat float32 buffers (parameters, gradients, momentum buffers, EMA) sharing one layout;
 * a segment table (offset, count, group) selects the elements; nothing else is touched.
 * Updates overwrite (=) params, momentum and ema in place (and the step's optional 16-bit copy
 * of params); grads are read only, except by kern_ref_amp_unscale, which scales them in place.
 *
 * Float semantics: each statement below is one float32 rounding, in the order PyTorch's
 * single-tensor CPU kernels use (trainer/train/optim.c calls these ops, so CPU training is these
 * loops). This file takes no KERN_VEC_CLONES: the baseline x86-64 target has no FMA, so the
 * kernels' -ffp-contract=fast cannot fuse a product into a sum here and change a rounding
 * (the CUDA twin uses __fmul_rn / __fadd_rn for the same reason). test_optim_ops checks it bit
 * for bit against a plain restatement compiled without contraction. Runs on the calling thread:
 * the step is memory bound and a few ms for YOLOv5s on one core.
 */
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kern_internal.h"
#include "kern_lowp_common.h"
#include "kern_optim_common.h"

#define OPTIM_LANES 8

/* The segment's lowp order fits its count (struct kern_lowp_order). */
static bool optim_lowp_order_ok(const struct kern_optim_seg *s)
{
    const struct kern_lowp_order *const L = &s->lowp;
    if (L->s2d) {
        if (L->s2d < 0 || L->c < 1 || L->s2d < 4 * (long long)L->c || (L->hw != 0 && L->hw != 9))
            return false;
        const size_t per = 36 * (size_t)L->c, k_out = s->count / per;
        /* the copy's range [at, at + k_out s2d 9) must not wrap */
        return s->count % per == 0 && k_out <= INT_MAX &&
               k_out <= (SIZE_MAX - L->at) / ((size_t)L->s2d * 9);
    }
    if (L->c == 0) return true;
    if (L->c < 0 || L->hw < 1) return false;
    const size_t inner = (size_t)L->c * (size_t)L->hw;
    return s->count % inner == 0 && s->count / inner <= INT_MAX;
}

/* The elements [*lo, *hi) of params_lowp that segment s writes: its own, or its stem copy's. */
static void optim_lowp_range(const struct kern_optim_seg *s, size_t *lo, size_t *hi)
{
    const struct kern_lowp_order *const L = &s->lowp;
    *lo = L->s2d ? L->at : s->offset;
    *hi =
        L->s2d ? L->at + s->count / (36 * (size_t)L->c) * (size_t)L->s2d * 9 : s->offset + s->count;
}

int kern_optim_segs_prepare(struct kern_optim_seg *seg, size_t n_seg, size_t len, int n_groups,
                            size_t *total)
{
    KERN_RETURN_IF(!seg || !total || n_seg == 0, -EINVAL);
    KERN_RETURN_IF(n_groups < 1 || n_groups > KERN_OPTIM_MAX_GROUPS, -EINVAL);
    for (size_t i = 0; i < n_seg; i++) {
        const struct kern_optim_seg *const s = &seg[i];
        KERN_RETURN_IF(s->count == 0 || s->offset > len || s->count > len - s->offset, -EINVAL);
        KERN_RETURN_IF(s->group < 0 || s->group >= n_groups, -EINVAL);
        KERN_RETURN_IF(!optim_lowp_order_ok(s), -EINVAL);
    }
    /* Overlap checks without allocating: tables are a few hundred entries, set up once. A stem
     * copy's range must miss every segment and every other copy; the other copies lie within
     * their own segments, which miss each other. */
    for (size_t i = 0; i < n_seg; i++)
        for (size_t j = 0; j < n_seg; j++) {
            KERN_RETURN_IF(i < j && seg[i].offset < seg[j].offset + seg[j].count &&
                               seg[j].offset < seg[i].offset + seg[i].count,
                           -EINVAL);
            if (!seg[i].lowp.s2d) continue;
            size_t lo, hi, lo2, hi2;
            optim_lowp_range(&seg[i], &lo, &hi);
            optim_lowp_range(&seg[j], &lo2, &hi2);
            KERN_RETURN_IF(lo < seg[j].offset + seg[j].count && seg[j].offset < hi, -EINVAL);
            KERN_RETURN_IF(i != j && lo < hi2 && lo2 < hi, -EINVAL);
        }
    size_t t = 0;
    for (size_t i = 0; i < n_seg; i++) {
        seg[i].start = t;
        seg[i].pad_ = seg[i].lowp.pad_ = 0;
        t += seg[i].count;
    }
    *total = t;
    return 0;
}

/* The table matches the descriptor: starts are the running sums, totals agree, groups exist. */
static int optim_segs_check(const struct kern_optim_seg *seg, size_t n_seg, size_t total,
                            int n_groups)
{
    KERN_RETURN_IF(!seg || n_seg == 0, -EINVAL);
    size_t t = 0;
    for (size_t i = 0; i < n_seg; i++) {
        KERN_RETURN_IF(seg[i].start != t || seg[i].count == 0, -EINVAL);
        KERN_RETURN_IF(seg[i].group < 0 || seg[i].group >= n_groups, -EINVAL);
        KERN_RETURN_IF(!optim_lowp_order_ok(&seg[i]), -EINVAL);
        t += seg[i].count;
    }
    KERN_RETURN_IF(t != total, -EINVAL);
    return 0;
}

/* *e = d with the per-step scalars of d->dyn (host memory here) in place of the host fields,
 * and dyn cleared: the step below then runs the same statements on the same values, so a step
 * with dyn is bit for bit the step with those host fields. */
static void sgd_desc_effective(const struct kern_sgd *d, struct kern_sgd *e)
{
    *e = *d;
    const struct kern_sgd_dyn *const y = d->dyn;
    if (!y) return;
    for (int g = 0; g < KERN_OPTIM_MAX_GROUPS; g++)
        e->group[g] = y->group[g];
    e->first = y->first;
    e->grad_scale = y->grad_scale;
    e->ema_decay = y->ema_decay;
    e->ema_weight = y->ema_weight;
    e->dyn = NULL;
}

static int sgd_desc_check(const struct kern_sgd *d)
{
    KERN_RETURN_IF(!d || d->n_seg == 0 || d->total == 0, -EINVAL);
    KERN_RETURN_IF(d->n_groups < 1 || d->n_groups > KERN_OPTIM_MAX_GROUPS, -EINVAL);
    KERN_RETURN_IF(!isfinite(d->grad_scale) || !isfinite(d->max_norm), -EINVAL);
    KERN_RETURN_IF(!isfinite(d->ema_decay) || !isfinite(d->ema_weight), -EINVAL);
    for (int g = 0; g < d->n_groups; g++) {
        const struct kern_sgd_group *const G = &d->group[g];
        KERN_RETURN_IF(!isfinite(G->lr) || !isfinite(G->momentum) || !isfinite(G->weight_decay),
                       -EINVAL);
    }
    return 0;
}

/* The gradient multiplier: grad_scale, times the clip factor of clip_grad_norm_ when it is < 1.
 * The factor is computed as PyTorch does on float32 tensors: max_norm / (norm + 1e-6). */
static float sgd_grad_mult(const struct kern_sgd *d, const double *sumsq)
{
    float mult = d->grad_scale;
    if (sumsq && d->max_norm > 0.0f) {
        const double norm = sqrt(*sumsq) * (double)d->grad_scale;
        const float coef = d->max_norm / ((float)norm + 1e-6f);
        if (coef < 1.0f) mult = d->grad_scale * coef;
    }
    return mult;
}

/* The EMA of a skipped step: theta unchanged. */
static void sgd_segment_ema_only(float *restrict ema, const float *restrict th, size_t n,
                                 const struct kern_sgd *d)
{
    for (size_t i = 0; i < n; i++) {
        const float a = ema[i] * d->ema_decay;
        const float c = d->ema_weight * th[i];
        ema[i] = a + c;
    }
}

static void sgd_segment(float *restrict th, float *restrict buf, float *restrict ema,
                        const float *restrict gr, size_t n, const struct kern_sgd_group *G,
                        const struct kern_sgd *d, float mult)
{
    const float lr = G->lr, mom = G->momentum, wd = G->weight_decay;
    const float ed = d->ema_decay, ew = d->ema_weight;
    for (size_t i = 0; i < n; i++) {
        float g = gr[i];
        if (mult != 1.0f) g = g * mult;
        if (wd != 0.0f) g = g + wd * th[i];
        const float b = d->first ? g : buf[i] * mom + g;
        buf[i] = b;
        g = d->nesterov ? g + mom * b : b;
        const float t = th[i] + (-lr) * g;
        th[i] = t;
        if (ema) {
            const float a = ema[i] * ed;
            const float c = ew * t;
            ema[i] = a + c;
        }
    }
}

int kern_ref_sgd_step(struct kern_ctx *ctx, const struct kern_sgd *desc, float *restrict params,
                      float *restrict momentum, float *restrict ema, const float *restrict grads,
                      const struct kern_optim_seg *restrict seg, const double *restrict sumsq,
                      const int32_t *restrict found_inf)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!desc, -EINVAL);
    struct kern_sgd eff;
    sgd_desc_effective(desc, &eff);
    const struct kern_sgd *const d = &eff;
    int rc = sgd_desc_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!params || !momentum || !grads, -EINVAL);
    KERN_RETURN_IF(d->params_lowp && d->lowp_dtype != KERN_DT_BF16 && d->lowp_dtype != KERN_DT_F16,
                   -EINVAL);
    if ((rc = optim_segs_check(seg, d->n_seg, d->total, d->n_groups)) < 0) return rc;
    if ((found_inf && *found_inf) || (d->skip_nonfinite && sumsq && !isfinite(*sumsq))) {
        if (ema)
            for (size_t s = 0; s < d->n_seg; s++)
                sgd_segment_ema_only(ema + seg[s].offset, params + seg[s].offset, seg[s].count, d);
    } else {
        const float mult = sgd_grad_mult(d, sumsq);
        for (size_t s = 0; s < d->n_seg; s++) {
            const size_t o = seg[s].offset;
            sgd_segment(params + o, momentum + o, ema ? ema + o : NULL, grads + o, seg[s].count,
                        &d->group[seg[s].group], d, mult);
        }
    }
    /* The reduced-precision copy of what the step left (kern.h REDUCED-PRECISION COPY): the
     * cast ops' loops over the segments, so the bits are theirs. */
    uint16_t *const lp = d->params_lowp;
    for (size_t s = 0; lp && s < d->n_seg; s++) {
        const size_t o = seg[s].offset, c = (size_t)seg[s].lowp.c;
        if (seg[s].lowp.s2d) {
            /* the stem's copy: the cast's rounding at the places kern_optim_common.h gives */
            const bool bf = d->lowp_dtype == KERN_DT_BF16;
            for (size_t e = 0; e < seg[s].count; e++) {
                const float v = params[o + e];
                lp[kern_lowp_index(&seg[s].lowp, o, e)] =
                    bf ? kern_bf16_from_f32(v) : kern_f16_from_f32(v);
            }
        } else if (c)
            rc = kern_ref_cast_f32_lowp_cl(ctx, d->lowp_dtype, lp + o, params + o,
                                           (int)(seg[s].count / (c * (size_t)seg[s].lowp.hw)),
                                           (int)c, (size_t)seg[s].lowp.hw);
        else
            rc = d->lowp_dtype == KERN_DT_BF16
                     ? kern_ref_cast_f32_bf16(ctx, lp + o, params + o, seg[s].count)
                     : kern_ref_cast_f32_f16(ctx, lp + o, params + o, seg[s].count);
        if (rc < 0) return rc;
    }
    return 0;
}

int kern_ref_optim_sumsq(struct kern_ctx *ctx, double *restrict sumsq, const float *restrict grads,
                         const struct kern_optim_seg *restrict seg, size_t n_seg, size_t total)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!sumsq || !grads || total == 0, -EINVAL);
    const int rc = optim_segs_check(seg, n_seg, total, KERN_OPTIM_MAX_GROUPS);
    if (rc < 0) return rc;
    /* OPTIM_LANES independent sums, added in order at the end: one chain of dependent adds ran
       at the adder's latency (3.2 ms of the yolov5n step for its 1.9M gradients); the bound of
       a sequential sum's error holds for each lane and for their total. */
    double acc[OPTIM_LANES] = { 0 };
    for (size_t s = 0; s < n_seg; s++) {
        const float *const x = grads + seg[s].offset;
        const size_t n = seg[s].count;
        size_t i = 0;
        for (; i + OPTIM_LANES <= n; i += OPTIM_LANES)
            for (int k = 0; k < OPTIM_LANES; k++)
                acc[k] += (double)x[i + (size_t)k] * (double)x[i + (size_t)k];
        for (; i < n; i++)
            acc[0] += (double)x[i] * (double)x[i];
    }
    double ss = 0.0;
    for (int k = 0; k < OPTIM_LANES; k++)
        ss += acc[k];
    *sumsq = ss;
    return 0;
}

int kern_ref_ema_update(struct kern_ctx *ctx, float *restrict ema, const float *restrict x,
                        size_t count, float decay, float weight)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(count && (!ema || !x), -EINVAL);
    for (size_t i = 0; i < count; i++) {
        const float a = ema[i] * decay;
        const float b = weight * x[i];
        ema[i] = a + b;
    }
    return 0;
}

int kern_ref_ema_update_dyn(struct kern_ctx *ctx, float *restrict ema, const float *restrict x,
                            size_t count, const struct kern_sgd_dyn *restrict dyn)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!dyn || !isfinite(dyn->ema_decay) || !isfinite(dyn->ema_weight), -EINVAL);
    return kern_ref_ema_update(ctx, ema, x, count, dyn->ema_decay, dyn->ema_weight);
}

int kern_ref_amp_unscale(struct kern_ctx *ctx, float *restrict grads,
                         const struct kern_optim_seg *restrict seg, size_t n_seg, size_t total,
                         float scale, int32_t *restrict found_inf)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!grads || !found_inf || total == 0, -EINVAL);
    const int rc = optim_segs_check(seg, n_seg, total, KERN_OPTIM_MAX_GROUPS);
    if (rc < 0) return rc;
    int bad = 0;
    for (size_t s = 0; s < n_seg; s++) {
        float *const x = grads + seg[s].offset;
        for (size_t i = 0; i < seg[s].count; i++) {
            bad |= !isfinite(x[i]);
            x[i] = x[i] * scale;
        }
    }
    if (bad) *found_inf = 1;
    return 0;
}

/* ---- casts: integer rounding, identical in kern_cuda_optim.cu ---- */

int kern_ref_cast_f32_bf16(struct kern_ctx *ctx, uint16_t *restrict dst, const float *restrict src,
                           size_t count)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(count && (!dst || !src), -EINVAL);
    for (size_t i = 0; i < count; i++)
        dst[i] = kern_bf16_from_f32(src[i]);
    return 0;
}

int kern_ref_cast_bf16_f32(struct kern_ctx *ctx, float *restrict dst, const uint16_t *restrict src,
                           size_t count)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(count && (!dst || !src), -EINVAL);
    for (size_t i = 0; i < count; i++)
        dst[i] = kern_f32_from_bits((uint32_t)src[i] << 16);
    return 0;
}

int kern_ref_cast_f32_f16(struct kern_ctx *ctx, uint16_t *restrict dst, const float *restrict src,
                          size_t count)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(count && (!dst || !src), -EINVAL);
    for (size_t i = 0; i < count; i++)
        dst[i] = kern_f16_from_f32(src[i]);
    return 0;
}

int kern_ref_cast_f16_f32(struct kern_ctx *ctx, float *restrict dst, const uint16_t *restrict src,
                          size_t count)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(count && (!dst || !src), -EINVAL);
    for (size_t i = 0; i < count; i++)
        dst[i] = kern_f16_to_f32(src[i]);
    return 0;
}
