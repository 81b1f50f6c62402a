/*
 * optim: YOLOv5's optimizer, schedule and EMA (ultralytics v7.0 train.py, utils/torch_utils.py;
 * docs/recipe.md S4), over the model's flat arenas (model.h).
 *
 * GROUPS (trn_model_group): 0 biases (BN betas, Detect biases), weight decay 0; 1 conv weights,
 * weight decay weight_decay * bs * accumulate / nbs; 2 BN gammas, weight decay 0. Parameters,
 * gradients and optimizer state all use the PARAM arena's layout (same offsets); each update is
 * one loop per group over its tensors, padding is never touched.
 *
 * UPDATES, PyTorch's single-tensor CPU semantics in float32 (python's double scalars rounded to
 * float, as PyTorch's kernels do):
 *   SGD (nesterov, dampening 0): g = grad + wd theta (only when wd != 0); buf = g on the first
 *     step, else momentum buf + g; g = g + momentum buf; theta = theta - lr g.
 *   Adam: g = grad + wd theta (wd != 0); t += 1; m = m + (1 - b1)(g - m) (torch.lerp);
 *     v = b2 v + (1 - b2) g g; theta = theta - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) +
 *     eps). AdamW: theta = theta (1 - lr wd) first, then Adam without the L2 term.
 *   ultralytics' smart_optimizer gives Adam/AdamW betas (momentum, 0.999), eps 1e-8; AdamW's
 *   first group has weight decay 0 as well. Warmup does not touch Adam's beta1 (its groups have
 *   no 'momentum' key).
 *
 * SCHEDULE. lf(e) linear (1 - e/E)(1 - lrf) + lrf, or cosine ((1 - cos(pi e/E))/2)(lrf - 1) + 1;
 * lr = lr0 lf(epoch), stepped per epoch. Warmup by batch index ni = i + nb * epoch while
 * ni <= nw = max(round(warmup_epochs * nb), 100): np.interp over [0, nw] of accumulate
 * (1 -> nbs/bs, then max(1, round())), group 0's lr (warmup_bias_lr -> lr0 lf(epoch)), groups 1
 * and 2's lr (0 -> lr0 lf(epoch)) and momentum (warmup_momentum -> momentum). Roundings are
 * python's/numpy's round half to even.
 *
 * STEP POLICY (train.py:319-327): after the backward of batch ni, step when
 * ni - last_opt_step >= accumulate(ni): clip the gradients at global L2 norm max_grad_norm
 * (multiply by max_norm / (norm + 1e-6) when that is < 1; the norm is summed in double), update,
 * zero the gradients, last_opt_step = ni. Gradients are summed over the accumulated batches
 * (no division); the caller's backward must accumulate into the gradient arena.
 *
 * EMA (ModelEMA): a copy of the PARAM and BUFFER arenas (every float state-dict entry:
 * parameters, BN running mean/var, Detect anchors; not num_batches_tracked); after each
 * optimizer step updates += 1, d = 0.9999 (1 - exp(-updates / 2000)),
 * ema = ema d + (1 - d) model, in float32.
 *
 * ERRORS. -EINVAL (bad arguments), -ENOMEM. trn_optim_strerror names them. Never prints.
 * THREADS. An optimizer or EMA is used by one thread at a time; the pure functions are
 * thread-safe.
 */
#ifndef TRN_OPTIM_H
#define TRN_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hyp.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which update rule. */
enum trn_optim_kind {
    TRN_OPTIM_SGD = 0, /* SGD, nesterov (ultralytics' default) */
    TRN_OPTIM_ADAM,    /* torch.optim.Adam, L2 weight decay in the gradient */
    TRN_OPTIM_ADAMW,   /* torch.optim.AdamW, decoupled weight decay */
};

/* Run-wide optimizer settings. */
struct trn_optim_opts {
    enum trn_optim_kind kind; /* [TRN_OPTIM_SGD] */
    double lr0;               /* initial lr [0.01] */
    double lrf;               /* final lr fraction [0.01] */
    double momentum;          /* SGD momentum / Adam beta1 [0.937] */
    double weight_decay;      /* nominal, before the bs * accumulate / nbs scaling [5e-4] */
    double warmup_epochs;     /* [3.0] */
    double warmup_momentum;   /* [0.8] */
    double warmup_bias_lr;    /* [0.1] */
    int batch_size;           /* images per batch (per optimizer micro-batch), >= 1 [16] */
    int nbs;                  /* nominal batch size [64] */
    int epochs;               /* E of lf, >= 1 [300] */
    int64_t nb;               /* batches per epoch, >= 1 [1] */
    bool cos_lr;              /* cosine lf instead of linear [false] */
    double max_grad_norm;     /* clipping threshold; <= 0 disables [10.0] */
    uint64_t frozen[TRN_MODEL_MAX_LAYERS / 64]; /* yaml rows whose parameters are never
                                                   updated (train.py --freeze: requires_grad
                                                   False, so no step, decay, momentum or share
                                                   of the clipping norm): row r is bit r % 64 of
                                                   frozen[r / 64] [none] */
    double beta2;                               /* Adam beta2 [0.999] */
    double eps;                                 /* Adam eps [1e-8] */
};

/* Fill o with the defaults in brackets above. Thread-safe. */
void trn_optim_opts_default(struct trn_optim_opts *o);

/* Copy lr0, lrf, momentum, weight_decay, warmup_epochs, warmup_momentum, warmup_bias_lr from h
 * into o (the other fields are left alone). */
void trn_optim_opts_from_hyp(struct trn_optim_opts *o, const struct trn_hyp *h);

/* accumulate = max(round(nbs / batch_size), 1) (train.py:153). 0 for bad opts. */
int trn_optim_accumulate(const struct trn_optim_opts *o);

/* Group 1's weight decay: weight_decay * batch_size * accumulate / nbs (train.py:154). */
double trn_optim_weight_decay(const struct trn_optim_opts *o);

/* nw = max(round(warmup_epochs * nb), 100) (train.py:246). */
int64_t trn_optim_warmup_iters(const struct trn_optim_opts *o);

/* lf(epoch) of the linear or cosine schedule. */
double trn_optim_lf(const struct trn_optim_opts *o, int epoch);

/* The settings in force for one batch. */
struct trn_optim_sched {
    double lr[3];    /* per group */
    double momentum; /* SGD momentum (Adam: beta1, constant) */
    int accumulate;  /* batches per optimizer step */
    bool warmup;     /* ni <= nw */
};

/*
 * What train.py sets before batch ni of epoch (0-based; ni = i + nb * epoch): the warmup
 * interpolation while ni <= nw, else lr0 lf(epoch), momentum and the initial accumulate.
 * out: out. Returns 0 or -EINVAL (NULL, epoch or ni < 0). Thread-safe.
 */
int trn_optim_schedule(const struct trn_optim_opts *o, int epoch, int64_t ni,
                       struct trn_optim_sched *out);

struct trn_optim;

/*
 * Create an optimizer for model m (its groups and tensor layout are read now and must not
 * change; m must outlive the optimizer). Its state (SGD momentum buffers; Adam exp_avg and
 * exp_avg_sq) is allocated once, arena_len[PARAM] floats each, zeroed. o is copied.
 * out: on success the new optimizer (free with trn_optim_destroy). Returns 0, -EINVAL, -ENOMEM.
 */
int trn_optim_create(const struct trn_model *m, const struct trn_optim_opts *o,
                     struct trn_optim **out);

/* Free an optimizer. NULL is allowed. */
void trn_optim_destroy(struct trn_optim *opt);

/* The options in use. Valid for the optimizer's life. */
const struct trn_optim_opts *trn_optim_get_opts(const struct trn_optim *opt);

/*
 * Global L2 norm of the gradients of every group tensor (summed in double), and when max_norm > 0
 * and max_norm / (norm + 1e-6) < 1, scale them all by that factor (clip_grad_norm_).
 * grads: PARAM-arena layout. norm: out (may be NULL), the norm before clipping.
 * Returns 1 if scaled, 0 if not, -EINVAL.
 */
int trn_optim_clip(const struct trn_optim *opt, float *grads, double max_norm, double *norm);

/*
 * One update of every group tensor of params from grads with the lr and momentum of s
 * (s->accumulate is not used), then steps += 1. Grads are read, not cleared.
 * Returns 0 or -EINVAL.
 */
int trn_optim_step(struct trn_optim *opt, float *params, const float *grads,
                   const struct trn_optim_sched *s);

/* Zero the gradients of every group tensor. Returns 0 or -EINVAL. */
int trn_optim_zero_grad(const struct trn_optim *opt, float *grads);

/* What trn_optim_after_batch did. */
struct trn_optim_report {
    struct trn_optim_sched sched; /* the settings of this batch */
    bool stepped;                 /* an optimizer step ran */
    double grad_norm;             /* before clipping (stepped only) */
    bool clipped;                 /* the gradients were scaled (stepped only) */
};

/*
 * Call after the backward of batch ni (of epoch): computes the schedule and, when
 * ni - last_opt_step >= accumulate, clips, steps, zeroes grads and sets last_opt_step = ni.
 * rep: out (may be NULL). Returns 1 if it stepped, 0 if it only accumulated, -EINVAL.
 */
int trn_optim_after_batch(struct trn_optim *opt, float *params, float *grads, int epoch, int64_t ni,
                          struct trn_optim_report *rep);

/* Counters, for checkpoints and resume. */
struct trn_optim_counters {
    int64_t steps;         /* optimizer steps taken (Adam's t; SGD: 0 = buffers not yet set) */
    int64_t last_opt_step; /* ni of the last step, -1 before the first */
};

/* Read / restore the counters. Returns 0 or -EINVAL. */
int trn_optim_get_counters(const struct trn_optim *opt, struct trn_optim_counters *out);
int trn_optim_set_counters(struct trn_optim *opt, const struct trn_optim_counters *c);

/*
 * State buffer k in PARAM-arena layout: k = 0 SGD momentum_buffer / Adam exp_avg, k = 1 Adam
 * exp_avg_sq (NULL for SGD). len: out, floats (may be NULL). Owned by the optimizer; valid for
 * its life; the caller may write it (checkpoint restore).
 */
float *trn_optim_state(struct trn_optim *opt, int k, size_t *len);

/* ---------------------------------------------------------------------------------------- */
/* EMA                                                                                      */

struct trn_ema;

/*
 * Create an EMA of model m, copying its PARAM and BUFFER arenas now; updates = 0. m must
 * outlive it. out: on success the new EMA (free with trn_ema_destroy). Returns 0, -EINVAL,
 * -ENOMEM.
 */
int trn_ema_create(const struct trn_model *m, struct trn_ema **out);

/* Free an EMA. NULL is allowed. */
void trn_ema_destroy(struct trn_ema *e);

/* d(updates) = 0.9999 (1 - exp(-updates / 2000)). Thread-safe. */
double trn_ema_decay(int64_t updates);

/*
 * updates += 1, then ema = ema d + (1 - d) model over every element of both arenas.
 * params, buffers: the model's arenas (PARAM and BUFFER layout). Returns 0 or -EINVAL.
 */
int trn_ema_update(struct trn_ema *e, const float *params, const float *buffers);

/* The EMA's PARAM or BUFFER arena (NULL for another); owned by e, valid for its life,
 * writable (checkpoint restore). */
float *trn_ema_arena(struct trn_ema *e, enum trn_arena a);

/* Updates so far; set for resume. */
int64_t trn_ema_updates(const struct trn_ema *e);
void trn_ema_set_updates(struct trn_ema *e, int64_t updates);

/* ---------------------------------------------------------------------------------------- */
/* The step on a kern backend (device buffers)                                              */

/*
 * The SGD step of an optimizer with parameters, gradients and EMA in a kern backend's memory
 * (device memory for CUDA): per step one sum-of-squares launch and one multi-tensor launch that
 * scales, clips, steps and updates the EMA (kern.h "Optimizer step"); nothing waits for the
 * host. Bitwise the CPU path's update given the same norm (the norm's double sum may differ
 * in its last bits on CUDA). SGD only: Adam/AdamW stay on the host (-ENOTSUP).
 *
 * struct kern_ctx and struct kern_ops come from kern.h; only pointers are used here.
 */
struct kern_ctx;
struct kern_ops;
struct kern_sgd_dyn;
struct kern_lowp_order;
struct trn_optim_dev;

/*
 * Plan the device step of opt on ctx with table K (kern_ops_ref() or kern_ops_cuda(), matching
 * ctx's backend): uploads the segment table and allocates the momentum buffers (arena_len[PARAM]
 * floats, zeroed), the sum of squares (1 double) and an overflow flag (1 int32), all with
 * kern_mem_alloc. opt, K and ctx are borrowed and must outlive it; opt's counters (steps) are
 * shared with the host path. out: on success the plan (free with trn_optim_dev_destroy).
 * Returns 0, -EINVAL, -ENOTSUP (Adam/AdamW), -ENOMEM, -EIO, -KERN_EBACKEND.
 */
int trn_optim_dev_create(struct trn_optim *opt, const struct kern_ops *K, struct kern_ctx *ctx,
                         struct trn_optim_dev **out);

/* Free a plan and its device memory (waits for ctx's work). NULL is allowed. */
void trn_optim_dev_destroy(struct trn_optim_dev *dv);

/* How one device step treats the gradients. */
struct trn_optim_dev_step_opts {
    float grad_scale;   /* 1 / loss scale under fp16 AMP (trn_amp_inv_scale), else 1 */
    int skip_nonfinite; /* 1: skip params and momentum when a gradient is Inf / NaN (fp16) */
    float *ema;         /* EMA copy of the PARAM arena in backend memory, or NULL for none */
    double ema_decay;   /* trn_ema_decay(updates after this step); read when ema != NULL */
};

/*
 * From now on every step of the plan (trn_optim_dev_step, trn_optim_dev_step_dyn) also rewrites
 * params_lowp, a 16-bit copy of the parameters it updates (PARAM layout, backend memory, dtype
 * KERN_DT_BF16 or KERN_DT_F16), in the same pass, so that it stays their cast (kern_sgd
 * params_lowp): the net's AMP weights (trn_net_dev_params_lowp). NULL: no copy (the default).
 * order: NULL, the copy in the PARAM order; else one struct kern_lowp_order per tensor of the
 * model (trn_net_params_lowp_order): a tensor written channels last, or the stem's weights
 * written as their space-to-depth past the PARAM elements, or (all zero) in the PARAM order.
 * Borrowed: must stay valid while steps run. Returns 0, -EINVAL (NULL dv, a bad dtype, an order
 * that does not fit its tensor or whose stem copy overlaps a tensor), -ENOMEM or the backend's
 * error.
 */
int trn_optim_dev_set_params_lowp(struct trn_optim_dev *dv, void *params_lowp, int dtype,
                                  const struct kern_lowp_order *order);

/*
 * One step as trn_optim_step after trn_optim_clip (max_grad_norm of the options): sum of
 * squares of grads into the plan's device double, then the fused step on params (PARAM layout,
 * backend memory) with the lr and momentum of s, the EMA when o->ema is given, then steps += 1.
 * Enqueued on ctx's stream; grads are read, not cleared (trn_optim_dev_zero_grad). o may be
 * NULL (grad_scale 1, no skip, no EMA). Returns 0, -EINVAL, or a kern error (-EIO).
 */
int trn_optim_dev_step(struct trn_optim_dev *dv, float *params, const float *grads,
                       const struct trn_optim_sched *s, const struct trn_optim_dev_step_opts *o);

/*
 * The per-step scalars of trn_optim_dev_step (lr, momentum and weight decay of each group, first,
 * grad_scale, the EMA's decay and 1 - decay) as a struct kern_sgd_dyn (kern.h), for a step that
 * reads them from backend memory (trn_optim_dev_step_dyn inside a captured graph). Host only: out
 * is host memory, which the caller copies into its backend buffer before the step runs. The values
 * are rounded exactly as trn_optim_dev_step rounds them (first = no step taken yet), so the two
 * steps agree bit for bit. o: as trn_optim_dev_step's (ema_decay read when o->ema != NULL, else
 * decay 0). Returns 0 or -EINVAL (NULL, non-finite lr, grad_scale or decay).
 */
int trn_optim_dev_dyn_fill(const struct trn_optim_dev *dv, const struct trn_optim_sched *s,
                           const struct trn_optim_dev_step_opts *o, struct kern_sgd_dyn *out);

/*
 * trn_optim_dev_step with the per-step scalars read from dyn (one struct kern_sgd_dyn of the
 * plan's backend memory, filled by trn_optim_dev_dyn_fill and copied in before the step runs):
 * the ops' arguments are the same at every call, so the call can be captured once in a graph
 * (kern_graph_capture) and replayed. o: ema and skip_nonfinite as trn_optim_dev_step's (its
 * grad_scale and ema_decay are ignored: dyn has them); may be NULL. Unlike trn_optim_dev_step it
 * does NOT count the step (a replay runs no host code): the caller adds 1 to the optimizer's
 * steps (trn_optim_set_counters) for every step that runs. Enqueued on ctx's stream. Returns 0,
 * -EINVAL, or a kern error (the CPU op also checks dyn's values: -EINVAL).
 */
int trn_optim_dev_step_dyn(struct trn_optim_dev *dv, float *params, const float *grads,
                           const struct kern_sgd_dyn *dyn, const struct trn_optim_dev_step_opts *o);

/* Zero the whole gradient arena (padding included, which is zero anyway). Enqueued. */
int trn_optim_dev_zero_grad(struct trn_optim_dev *dv, float *grads);

/*
 * The plan's device buffers, owned by dv, valid for its life: k = 0 the momentum buffers
 * (arena_len[PARAM] floats, for checkpoints), k = 1 the sum of squares of the last step (one
 * double: copy it back to log the norm or, with skip_nonfinite, to learn whether the step was
 * skipped: !isfinite), k = 2 an int32 overflow flag for the caller's own kern amp_unscale calls.
 * NULL for other k.
 */
void *trn_optim_dev_buffer(struct trn_optim_dev *dv, int k);

/* A message for any code returned above. */
const char *trn_optim_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif /* TRN_OPTIM_H */
