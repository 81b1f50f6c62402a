/*
 * The AMP policy and GradScaler's dynamic loss scale (see amp.h). Host state only: the scale is
 * a kernel argument of the fused step (its grad_scale), and the overflow flag comes back from
 * the device once per optimizer step, as GradScaler.step reads found_inf with .item().
 */
#include "amp.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct trn_amp {
    struct trn_amp_opts o;
    float scale;            /* current scale; 1 without a scaler */
    int64_t growth_tracker; /* clean steps since the last change */
};

void trn_amp_opts_default(struct trn_amp_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->dtype = TRN_AMP_BF16;
    o->init_scale = 65536.0;
    o->growth_factor = 2.0;
    o->backoff_factor = 0.5;
    o->growth_interval = 2000;
}

int trn_amp_dtype_parse(const char *name, enum trn_amp_dtype *out)
{
    if (!name || !out) return -EINVAL;
    static const struct {
        const char *name;
        enum trn_amp_dtype t;
    } names[] = { { "bf16", TRN_AMP_BF16 },   { "bfloat16", TRN_AMP_BF16 },
                  { "fp16", TRN_AMP_FP16 },   { "float16", TRN_AMP_FP16 },
                  { "half", TRN_AMP_FP16 },   { "fp32", TRN_AMP_OFF },
                  { "float32", TRN_AMP_OFF }, { "off", TRN_AMP_OFF } };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!strcasecmp(name, names[i].name)) {
            *out = names[i].t;
            return 0;
        }
    }
    return -EINVAL;
}

const char *trn_amp_dtype_name(enum trn_amp_dtype t)
{
    switch (t) {
    case TRN_AMP_BF16:
        return "bf16";
    case TRN_AMP_FP16:
        return "fp16";
    case TRN_AMP_OFF:
        return "fp32";
    }
    return "?";
}

static int amp_opts_check(const struct trn_amp_opts *o)
{
    if ((unsigned)o->dtype > TRN_AMP_OFF) return -EINVAL;
    if (!isfinite(o->init_scale) || !(o->init_scale > 0.0) || !((float)o->init_scale > 0.0f) ||
        !isfinite((float)o->init_scale))
        return -EINVAL;
    if (!isfinite(o->growth_factor) || !(o->growth_factor > 1.0)) return -EINVAL;
    if (!(o->backoff_factor > 0.0 && o->backoff_factor < 1.0)) return -EINVAL;
    if (o->growth_interval < 1) return -EINVAL;
    return 0;
}

int trn_amp_create(const struct trn_amp_opts *o, struct trn_amp **out)
{
    struct trn_amp_opts def;
    if (!out) return -EINVAL;
    if (!o) {
        trn_amp_opts_default(&def);
        o = &def;
    }
    const int rc = amp_opts_check(o);
    if (rc < 0) return rc;
    struct trn_amp *const a = calloc(1, sizeof *a);
    if (!a) return -ENOMEM;
    a->o = *o;
    a->scale = o->dtype == TRN_AMP_FP16 ? (float)o->init_scale : 1.0f;
    *out = a;
    return 0;
}

void trn_amp_destroy(struct trn_amp *a)
{
    free(a);
}

bool trn_amp_uses_scaler(const struct trn_amp *a)
{
    return a && a->o.dtype == TRN_AMP_FP16;
}

float trn_amp_scale(const struct trn_amp *a)
{
    return trn_amp_uses_scaler(a) ? a->scale : 1.0f;
}

float trn_amp_inv_scale(const struct trn_amp *a)
{
    /* GradScaler.unscale_: self._scale.double().reciprocal().float() */
    return trn_amp_uses_scaler(a) ? (float)(1.0 / (double)a->scale) : 1.0f;
}

int trn_amp_update(struct trn_amp *a, bool found_inf)
{
    if (!a) return -EINVAL;
    if (!trn_amp_uses_scaler(a)) return 0;
    /* _amp_update_scale_: float scale times a double factor, rounded back to float. */
    if (found_inf) {
        a->scale = (float)((double)a->scale * a->o.backoff_factor);
        a->growth_tracker = 0;
        return 1;
    }
    const int64_t successful = a->growth_tracker + 1;
    if (successful == a->o.growth_interval) {
        const float grown = (float)((double)a->scale * a->o.growth_factor);
        if (isfinite(grown)) a->scale = grown;
        a->growth_tracker = 0;
    } else {
        a->growth_tracker = successful;
    }
    return 0;
}

int trn_amp_get_state(const struct trn_amp *a, struct trn_amp_state *out)
{
    if (!a || !out) return -EINVAL;
    out->scale = trn_amp_scale(a);
    out->growth_tracker = a->growth_tracker;
    return 0;
}

int trn_amp_set_state(struct trn_amp *a, const struct trn_amp_state *st)
{
    if (!a || !st || !isfinite(st->scale) || !(st->scale > 0.0f) || st->growth_tracker < 0 ||
        st->growth_tracker >= a->o.growth_interval)
        return -EINVAL;
    if (trn_amp_uses_scaler(a)) a->scale = st->scale;
    a->growth_tracker = st->growth_tracker;
    return 0;
}
