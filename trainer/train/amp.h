/*
 * amp: mixed precision policy and the dynamic loss scaler of fp16 training, with
 * torch.cuda.amp.GradScaler's semantics (torch 1.13, amp/grad_scaler.py and the
 * _amp_update_scale_ kernel).
 *
 * DTYPES. bf16 (the default) has float32's exponent range: gradients do not underflow, so no
 * scaler runs (scale 1, never a skipped step), as GradScaler(enabled=False) under
 * autocast(dtype=torch.bfloat16). fp16 needs the scaler: the loss is multiplied by `scale`
 * before backward, the gradients are unscaled by 1 / scale (kern amp_unscale, or the grad_scale
 * of the fused SGD step), and when any of them is Inf or NaN the optimizer step is skipped.
 * TRN_AMP_OFF is plain float32.
 *
 * SCALER. After every optimizer step (taken or skipped) trn_amp_update(found_inf):
 *   found_inf:  scale = scale * backoff_factor; growth_tracker = 0
 *   otherwise:  growth_tracker += 1; when it reaches growth_interval,
 *               scale = scale * growth_factor if that is finite (else unchanged), tracker = 0.
 * scale is a float32 (the products are taken in double and rounded, as the CUDA kernel does);
 * 1 / scale is (float)(1.0 / (double)scale), as GradScaler.unscale_. Defaults: init_scale 65536,
 * growth_factor 2, backoff_factor 0.5, growth_interval 2000.
 *
 * ERRORS. -EINVAL for bad arguments; trn_strerror names them. Never prints.
 * THREADS. A scaler is used by one thread at a time; the pure functions are thread-safe.
 */
#ifndef TRN_AMP_H
#define TRN_AMP_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Compute dtype of the forward and backward. */
enum trn_amp_dtype {
    TRN_AMP_BF16 = 0, /* bfloat16 autocast, no scaler (the default) */
    TRN_AMP_FP16,     /* float16 autocast with the dynamic loss scaler */
    TRN_AMP_OFF,      /* float32 throughout */
};

/* Scaler settings (GradScaler's constructor arguments). */
struct trn_amp_opts {
    enum trn_amp_dtype dtype; /* [TRN_AMP_BF16] */
    double init_scale;        /* first scale, finite > 0 [65536] */
    double growth_factor;     /* > 1 [2] */
    double backoff_factor;    /* in (0, 1) [0.5] */
    int growth_interval;      /* clean steps between growths, >= 1 [2000] */
};

/* Fill o with the defaults in brackets above. Thread-safe. */
void trn_amp_opts_default(struct trn_amp_opts *o);

/*
 * Parse a dtype name: "bf16" / "bfloat16", "fp16" / "float16" / "half", "fp32" / "float32" /
 * "off". out: out. Returns 0 or -EINVAL (unknown name, NULL). Thread-safe.
 */
int trn_amp_dtype_parse(const char *name, enum trn_amp_dtype *out);

/* The canonical name of a dtype ("bf16", "fp16", "fp32"); "?" for others. Thread-safe. */
const char *trn_amp_dtype_name(enum trn_amp_dtype t);

struct trn_amp;

/*
 * Create a scaler with options o (copied; NULL for the defaults). out: on success the scaler
 * (free with trn_amp_destroy). Returns 0, -EINVAL (bad options), -ENOMEM.
 */
int trn_amp_create(const struct trn_amp_opts *o, struct trn_amp **out);

/* Free a scaler. NULL is allowed. */
void trn_amp_destroy(struct trn_amp *a);

/* True when the scaler runs (fp16). */
bool trn_amp_uses_scaler(const struct trn_amp *a);

/* The loss multiplier: the scale for fp16, 1 otherwise (and for NULL). */
float trn_amp_scale(const struct trn_amp *a);

/* The gradient multiplier 1 / scale, rounded as GradScaler.unscale_; 1 without a scaler. */
float trn_amp_inv_scale(const struct trn_amp *a);

/*
 * After the backward and the overflow check of one optimizer step: found_inf is whether any
 * gradient was Inf or NaN. Updates the scale as SCALER says (nothing without a scaler).
 * Returns 1 when the optimizer step must be (or was) skipped (fp16 and found_inf), 0 when it
 * runs, -EINVAL for NULL.
 */
int trn_amp_update(struct trn_amp *a, bool found_inf);

/* The scaler state, for checkpoints (GradScaler.state_dict's "scale" and "_growth_tracker"). */
struct trn_amp_state {
    float scale;            /* current scale (1 without a scaler) */
    int64_t growth_tracker; /* clean steps since the last growth or backoff */
};

/* Read or restore the state. set: scale finite > 0, 0 <= tracker < growth_interval.
 * Returns 0 or -EINVAL. */
int trn_amp_get_state(const struct trn_amp *a, struct trn_amp_state *out);
int trn_amp_set_state(struct trn_amp *a, const struct trn_amp_state *st);

#ifdef __cplusplus
}
#endif

#endif /* TRN_AMP_H */
