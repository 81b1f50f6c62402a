/*
 * kern_optim.h: the optimizer over flat parameter buffers: SGD step, gradient norm, EMA, AMP
 * unscale.
 *
 * Part of kern.h, which includes it: include kern.h, not this file. The first part declares
 * the family's descriptors and helpers. The op rows at the end, KERN_OP(name, (parameters)),
 * are expanded by whoever defines KERN_OP: kern.h makes them the kern_ref_* prototypes and
 * struct kern_ops members, kern_cuda.h the kern_cuda_* prototypes, each backend its table
 * (kern_ops.def lists the families in table order). Each row's comment is its contract.
 */
#ifndef KERN_H
#error "include kern.h, not kern_optim.h"
#endif

#ifndef KERN_OPTIM_H
#define KERN_OPTIM_H

/* ---------------------------------------------------------------------------------------- */
/* Optimizer step, gradient norm, EMA and AMP casts over flat parameter buffers             */

/*
 * FLAT BUFFERS. The trainer keeps every parameter in one arena (float32, tensors at fixed
 * offsets, padding between them); the gradients, the SGD momentum buffers and the EMA copy use
 * the same layout (same offsets). A SEGMENT TABLE names the tensors an op touches: elements
 * [offset, offset + count) of every buffer, with the index of its parameter group (its lr,
 * momentum and weight decay). Elements outside the segments (padding, frozen tensors) are never
 * read or written. Segments must not overlap; their order is the order of the double sums of
 * kern_*_optim_sumsq on the CPU. The table lives in the backend's tensor memory (device memory
 * for CUDA: build it once at setup with kern_optim_segs_prepare, then kern_mem_copy it over),
 * so a step launches one kernel however many tensors the model has (docs/design.md).
 */
#define KERN_OPTIM_MAX_GROUPS 4

/* The order and place of a segment's params_lowp copy (REDUCED-PRECISION COPY): how the convs
 * of the bf16 executor read the tensor. All zero: the buffers' own order at the segment's own
 * elements. */
struct kern_lowp_order {
    /* c > 0 and s2d 0: the segment is a conv weight (count / (c hw), c, hw) whose copy is
       written channels last, (.., hw, c), the order the NHWC convs take (count a multiple of
       c hw, hw >= 1). */
    int c, hw;
    /* s2d > 0: the segment is a stem weight w6 (k_out, c, 6, 6) (count a multiple of 36 c), whose
       copy is its space-to-depth w3 (k_out, s2d, 3, 3) (kern_tensor.h "The stem as
       space-to-depth", s2d >= 4 c) at elements [at, at + k_out s2d 9) of params_lowp: channels
       last, (k_out, 3, 3, s2d), when hw is 9, OIHW when hw is 0. That range lies outside every
       segment and every other such copy; its pad channels are never written (their owner zeroes
       them once), so the 3x3 conv reads a copy no pass rearranges. */
    int s2d;
    int pad_;  /* zero; keeps the layout the same for host and device compilers */
    size_t at; /* s2d > 0: see s2d; else ignored */
};

struct kern_optim_seg {
    size_t offset; /* first element of the tensor in every flat buffer */
    size_t count;  /* elements, >= 1 */
    size_t start;  /* sum of the counts of the segments before it (kern_optim_segs_prepare) */
    int group;     /* parameter group, 0 <= group < the descriptor's n_groups */
    int pad_;      /* zero; keeps the layout the same for host and device compilers */
    struct kern_lowp_order lowp; /* its params_lowp copy's order (zero: the buffers' own) */
};

/*
 * Checks a host segment table for buffers of `len` elements and `n_groups` groups, and fills
 * every seg[i].start (and pad_). Pure host function, no context: call it at setup, before
 * copying the table to the device. total: out, the sum of the counts (the `total` argument of
 * the ops). Returns 0; -EINVAL for NULL pointers, n_seg 0, a count of 0, a segment past len, a
 * group out of [0, n_groups), n_groups out of [1, KERN_OPTIM_MAX_GROUPS], a lowp order that
 * does not fit its count, two segments that overlap, or a stem copy's range (kern_lowp_order.s2d)
 * that overlaps a segment or another's (nothing is written then). Thread-safe on
 * distinct tables.
 */
KERN_API int kern_optim_segs_prepare(struct kern_optim_seg *seg, size_t n_seg, size_t len,
                                     int n_groups, size_t *total);

/* The settings of one parameter group, as PyTorch's param_groups hold them (rounded to float). */
struct kern_sgd_group {
    float lr;           /* learning rate, >= 0 */
    float momentum;     /* in [0, 1) */
    float weight_decay; /* L2 term added to the gradient (0: none), >= 0 */
};

/*
 * One SGD step (torch.optim.SGD, dampening 0, single-tensor float32 semantics) over the segments,
 * with gradient scaling, clipping and the EMA fused in the same pass:
 *   mult = grad_scale, times c = max_norm / (norm + 1e-6) when sumsq is given, max_norm > 0 and
 *     c < 1 (clip_grad_norm_); norm = sqrt(*sumsq) * grad_scale: the norm of the scaled gradients
 *     as PyTorch computes it after GradScaler.unscale_ (grad_scale a power of two);
 *   g = grad * mult (skipped when mult == 1); g = g + wd theta (wd != 0);
 *   buf = g on the first step, else momentum buf + g;
 *   g = nesterov ? g + momentum buf : buf;  theta = theta - lr g;
 *   ema (when given) = ema ema_decay + ema_weight theta (the updated theta; ModelEMA).
 * Every operation is one float32 rounding in this order (no fused multiply-add), so the CPU and
 * CUDA ops agree bit for bit given the same *sumsq.
 *
 * PER-STEP SCALARS IN MEMORY (dyn). A captured graph (kern_graph_capture) bakes every kernel
 * argument, but warmup changes lr and momentum every step, ModelEMA's decay grows every step,
 * `first` holds on the first step only and an fp16 scaler changes grad_scale. With dyn != NULL
 * the op reads those from *dyn (one struct kern_sgd_dyn of the backend's memory: device memory
 * on CUDA, read by the kernel when it runs) instead of from this descriptor: group[g].lr,
 * .momentum, .weight_decay (g < n_groups), first, grad_scale, ema_decay, ema_weight; the host
 * copies of those fields are then ignored (not read, not checked). The caller updates *dyn
 * before each replay (kern_mem_copy H2D, enqueued on the context's stream, so it is ordered
 * before the replay that reads it). The values and their rounding are the same, so a step with
 * dyn equals the step with the same host fields bit for bit, on either backend. The CPU op
 * checks the dyn values as it checks the host fields (-EINVAL for non-finite ones); the CUDA op
 * cannot (they are on the device): non-finite values there give non-finite parameters.
 *
 * REDUCED-PRECISION COPY (params_lowp). Under AMP every forward reads the parameters cast to
 * bf16 / fp16; casting the whole arena before each forward re-reads every parameter. With
 * params_lowp set the op also writes, for every element of the segments, params_lowp[i] = the
 * cast of the float32 params[i] it leaves (updated, or unchanged on a skipped step), rounded as
 * kern_*_cast_f32_bf16 / _f16 round: bit for bit the cast run after the step, over the
 * segments; a segment with a lowp order (kern_lowp_order) writes it in that order: channels last
 * within the segment, bit for bit kern_*_cast_f32_lowp_cl over it (the bf16 NHWC executor's conv
 * weights, cast by no pass), or as the stem's space-to-depth weights at lowp.at, bit for bit
 * kern_*_s2d_weight_fwd then that cast over the copy's non-pad elements.
 * Elements outside the segments are not written (they are not updated either, so a copy cast once
 * stays current there). params_lowp must not overlap the other buffers. lowp_dtype is a host field
 * (never in dyn): it is fixed for a buffer, so a captured graph may bake it.
 */
struct kern_sgd_dyn {
    struct kern_sgd_group group[KERN_OPTIM_MAX_GROUPS]; /* lr, momentum, weight decay per group */
    int32_t first;                                      /* as kern_sgd.first */
    float grad_scale;                                   /* as kern_sgd.grad_scale */
    float ema_decay;                                    /* as kern_sgd.ema_decay */
    float ema_weight;                                   /* as kern_sgd.ema_weight */
};

struct kern_sgd {
    size_t n_seg;       /* segments in the table, >= 1 */
    size_t total;       /* sum of their counts (kern_optim_segs_prepare's total) */
    int n_groups;       /* groups used, 1..KERN_OPTIM_MAX_GROUPS */
    int nesterov;       /* 1: nesterov momentum (YOLOv5) */
    int first;          /* 1: the momentum buffers are not set yet (buf = g, never read) */
    int skip_nonfinite; /* 1: a non-finite *sumsq acts as found_inf (fp16 AMP: the norm pass is
                           the overflow check, no separate unscale pass) */
    float grad_scale;   /* gradient multiplier applied first: 1 / loss scale under AMP, else 1 */
    float max_norm;     /* clipping threshold on the unscaled norm; <= 0: no clipping */
    float ema_decay;    /* EMA d (float of ModelEMA's double d) */
    float ema_weight;   /* EMA 1 - d, rounded from double (not 1 - ema_decay in float) */
    struct kern_sgd_group group[KERN_OPTIM_MAX_GROUPS]; /* indexed by kern_optim_seg.group */
    void *params_lowp; /* NULL: none; else the reduced-precision copy of params (same layout,
                          16-bit elements of lowp_dtype, backend memory) that the op writes in
                          the same pass (see REDUCED-PRECISION COPY) */
    int lowp_dtype;    /* KERN_DT_BF16 or KERN_DT_F16 (kern.h "lowp"): params_lowp's type; read
                          only when params_lowp is set */
    const struct kern_sgd_dyn *dyn; /* NULL: the host fields above; else the per-step scalars
                                       in backend memory (see dyn above); last, so that
                                       zero-initialised descriptors keep today's behaviour */
};

#endif /* KERN_OPTIM_H */

/* The rows, laid out by hand: clang-format would read them as one statement. */
/* clang-format off */
#ifdef KERN_OP

/* --- Optimizer step, gradient norm, EMA and AMP casts over flat parameter buffers --- */

/*
 * The SGD step above. params, momentum (the buffers), ema: flat buffers, updated in place (=);
 * ema may be NULL (no EMA). grads: read only (a clip does not write them). seg: the segment
 * table (d->n_seg entries, backend memory). sumsq: NULL, or one double of backend memory (from
 * kern_*_optim_sumsq, on the same stream: no host round trip); read when d->max_norm > 0 or
 * d->skip_nonfinite.
 * found_inf: NULL, or one int32 of backend memory: when it is nonzero params and momentum are
 * left alone (GradScaler's skipped step, decided on the device) and only the EMA is updated
 * (train.py runs ema.update after a skipped scaler.step too). Momentum buffers that start
 * zeroed make a skipped first step harmless: buf = momentum 0 + g is g. The buffers must not
 * overlap each other.
 * Errors: -EINVAL (NULL buffers, bad descriptor, params_lowp with a lowp_dtype other than
 * KERN_DT_BF16 / KERN_DT_F16; on the CPU also a segment table that does not match d); nothing is
 * written then.
 */
KERN_OP(sgd_step, (struct kern_ctx *ctx, const struct kern_sgd *d, float *KERN_RESTRICT params,
                   float *KERN_RESTRICT momentum, float *KERN_RESTRICT ema,
                   const float *KERN_RESTRICT grads, const struct kern_optim_seg *KERN_RESTRICT seg,
                   const double *KERN_RESTRICT sumsq, const int32_t *KERN_RESTRICT found_inf))

/*
 * *sumsq (one double of backend memory, overwritten) = sum over the segments of grads^2, each
 * square exact in double. The CPU sums in table order, element by element; CUDA sums fixed
 * per-block partials in a fixed order: deterministic run to run, equal to the CPU's within
 * double rounding. Non-finite gradients give a non-finite sum. total: as kern_sgd.total.
 * Errors: -EINVAL.
 */
KERN_OP(optim_sumsq, (struct kern_ctx *ctx, double *KERN_RESTRICT sumsq,
                      const float *KERN_RESTRICT grads,
                      const struct kern_optim_seg *KERN_RESTRICT seg, size_t n_seg, size_t total))

/*
 * ema = ema decay + weight x over count elements (two float32 products and a sum, no FMA), for
 * the EMA of the buffer arena (BN running stats, anchors) and of whole arenas. decay, weight:
 * ModelEMA's d and 1 - d, each rounded from double. Errors: -EINVAL (NULL with count > 0).
 */
KERN_OP(ema_update, (struct kern_ctx *ctx, float *KERN_RESTRICT ema, const float *KERN_RESTRICT x,
                     size_t count, float decay, float weight))

/*
 * kern_ref_ema_update with decay and weight read from dyn->ema_decay and dyn->ema_weight (one
 * struct kern_sgd_dyn of backend memory, the buffer kern_sgd.dyn points to), for the EMA of the
 * buffer arena inside a captured step, where ModelEMA's d changes every step. Bit for bit the
 * same as kern_ref_ema_update with those values. Errors: -EINVAL (NULL dyn, NULL with
 * count > 0; on the CPU also non-finite dyn values).
 */
KERN_OP(ema_update_dyn, (struct kern_ctx *ctx, float *KERN_RESTRICT ema,
                         const float *KERN_RESTRICT x, size_t count,
                         const struct kern_sgd_dyn *KERN_RESTRICT dyn))

/*
 * AMP unscale and check over the segments (torch._amp_foreach_non_finite_check_and_unscale_):
 * grads *= scale in place; *found_inf (one int32 of backend memory) is set to 1 when any
 * gradient is Inf or NaN, and left alone otherwise (zero it before the first op of a step).
 * Also the in-place clip of the CPU trainer (scale = the clip factor). Errors: -EINVAL.
 */
KERN_OP(amp_unscale, (struct kern_ctx *ctx, float *KERN_RESTRICT grads,
                      const struct kern_optim_seg *KERN_RESTRICT seg, size_t n_seg, size_t total,
                      float scale, int32_t *KERN_RESTRICT found_inf))
#endif /* KERN_OP */
/* clang-format on */
