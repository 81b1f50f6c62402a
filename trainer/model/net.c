/*
 * Forward and backward of the YOLOv5 network (see net.h).
 *
 * Tensors are NCHW float32 in the activation arena of trn_model_plan; the activation-gradient
 * arena (plan.dtotal floats) holds the gradient of act a at dact + acts[a].doff, where a
 * bottleneck input and its residual sum may share one (trn_model_plan), and concat inputs may
 * be channel slices of their buffer in either arena (trn_act.nstride, dnstride: every op that
 * touches them is given that n-stride; cat_fwd / cat_bwd skip them, by address). Backward
 * walks the rows in reverse: every consumer of a row has a larger index, so a row's output
 * gradient is complete when the row is reached. The first gradient written into an activation
 * overwrites it (kern accum bit clear) and later ones add (KERN_ACCUM_DX), tracked per act by
 * `has`, so the gradient arena is never cleared. Parameter gradients always add
 * (KERN_ACCUM_DPARAM).
 *
 * On a CUDA context every arena above is device memory and the net keeps device copies of the
 * model's parameter and buffer arenas (uploaded at each forward, since the optimizer and EMA still
 * update the host model; BN running statistics come back after a training forward) plus host
 * mirrors of what callers read (Detect outputs, decoded boxes, parameter gradients, views). The
 * ops and the order of calls are the same on both backends: only where memory lives differs.
 */
#include "net.h"

#include "kern_cuda.h"
#include "errors.h"
#include "priv/net_onednn.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct trn_net {
    struct trn_model *m;
    const struct trn_model_info *I;
    const struct kern_ops *K;
    struct kern_ctx *ctx;
    bool own_ctx;
    bool gpu;       /* the device data path: a CUDA context (the arenas below are device
                       memory), or trn_net_opts.device_path on the CPU ops */
    float *d_param; /* gpu: device copy of the model's TRN_ARENA_PARAM arena */
    float *d_buf;   /* gpu: device copy of TRN_ARENA_BUFFER (BN running stats, anchors) */
    float *d_dout;  /* gpu: the callers' d_outputs staged on the device (head layout) */
    float *h_head;  /* gpu: host mirror of head */
    float *h_dec;   /* gpu: host mirror of dec */
    float *h_grad;  /* gpu: host mirror of grad, refreshed after each backward */
    float *h_view;  /* gpu: host copy of one activation for the view getters */
    float **sview;  /* CPU net: per act, NULL or a dense copy of a concat slice for the view
                       getters (made at the first call, refreshed by each) */
    size_t n_head;  /* floats in head */
    size_t n_dec;   /* floats in dec */
    size_t n_view;  /* floats in h_view (the largest activation) */
    size_t mem;     /* bytes of tensor memory allocated through alloc_tensor */
    bool input_grad;
    bool trained;  /* the last forward was a training forward: backward may run */
    bool no_head;  /* this forward is trn_net_infer's: the decode reads the Detect convs' raw
                      outputs, so the (bs, na, ny, nx, no) head layout is not written */
    bool resident; /* gpu: d_param / d_buf are the master copies (net.h RESIDENT) */
    bool shared;   /* gpu: d_param / d_buf belong to another net (trn_net_opts.share) */
    bool no_count; /* training forwards leave num_batches_tracked alone (trn_net_set_count) */
    struct trn_act_plan plan;
    int batch;
    float *act;              /* plan.total floats */
    float *dact;             /* plan.dtotal floats, or NULL (inference net) */
    unsigned char *has;      /* per act: its gradient has been written in this backward */
    float *grad;             /* arena_len[PARAM] floats, or NULL */
    struct kern_conv2d *cd;  /* per conv; x_nstride: its input act's (forward, bwd_filter) */
    struct kern_conv2d *cdb; /* per conv: cd[ci] with x_nstride of the input's gradient
                                (bwd_data), which differs where only one is a concat slice */
    size_t *bn_off;          /* per conv: offset of its save_mean in bn_stat (invstd follows) */
    float *bn_stat;          /* BN batch mean and invstd for backward */
    size_t *pool_off;        /* per row: offset of its 3 pools' indices in pool_idx */
    int32_t *pool_idx;       /* SPPF max-pool argmax indices */
    float *head;             /* Detect outputs, permuted, all levels */
    size_t head_off[TRN_MODEL_MAX_LEVELS];
    struct kern_detect det[TRN_MODEL_MAX_LEVELS];
    const float *out_view[TRN_MODEL_MAX_LEVELS];
    float *dec;     /* decoded boxes, (bs, dec_rows, no) */
    int dec_rows;   /* sum over levels of na * ny * nx */
    size_t anchors; /* offset of the anchors tensor in the buffer arena */
    int (*bn_allreduce)(void *, double *, size_t); /* SyncBatchNorm hook, or NULL */
    void *bn_allreduce_ctx;
    double *bn_sums; /* SyncBatchNorm: one layer's KERN_BN_SUMS_LEN(c) sums (backend memory) */
    double *h_sums;  /* SyncBatchNorm on the device path: their host staging for the hook */
    int (*grad_ready)(void *, const struct trn_net_grad_range *); /* or NULL (net.h GRADIENTS) */
    void *grad_ready_ctx;
    size_t *row_start; /* grad_ready: row i's gradients are [row_start[i], row_start[i + 1]) of
                          the PARAM arena; n_layers + 1 entries, 0 .. arena_len */
    /* AMP (net.h AUTOCAST): every conv in amp's dtype through these scratch tensors (backend
       memory, allocated once); all NULL with amp == KERN_DT_F32. */
    int amp;                     /* KERN_DT_*: the convs' compute type */
    struct kern_conv2d_lowp *lp; /* per conv: cd[ci] with amp's dtype, NCHW */
    uint16_t *w16;               /* the PARAM arena cast to amp (net.h AMP WEIGHTS); the
                                    share's when it has the same amp (w16_own false) */
    uint16_t *x16;               /* a conv's input (forward, bwd_filter) or its dx (bwd_data) */
    uint16_t *y16;               /* a conv's output (forward) or its dy (backward) */
    float *dx32;                 /* bwd_data's widened dx when it adds into an existing gradient */
    /* --- wcast --- */
    struct trn_net *pown; /* the net owning the parameter storage the ops read (the share on the
                             device data path, else this net): its w16_ok tracks its w16 */
    bool w16_own;         /* w16 was allocated by this net */
    bool w16_ok;          /* (pown only) w16 holds the cast of the current parameters */
    bool fixed;           /* trn_net_opts.fixed_params */
    bool up_ok;           /* fixed non-resident device net: d_param / d_buf hold the host model */
    int64_t n_casts;      /* whole-arena casts of the parameters so far (trn_net_lowp_casts) */
    /* the oneDNN inference forward (net.h cpu_engine); NULL on the reference ops */
    struct trn_dnn *dnn;
    bool dnn_ok;      /* (fixed nets) dnn holds the current parameters */
    bool dnn_train;   /* dnn is a training executor: it runs training forwards and backward,
                         and eval forwards stay on the reference ops */
    bool dnn_trained; /* the last forward was dnn's training forward: backward runs there */
    int raw_blk;      /* trn_net_raw_head on: the Detect outputs' channel block; else 0 */
    const float *raw_p[TRN_MODEL_MAX_LEVELS]; /* with raw_blk: the Detect convs' outputs */
    float *raw_dp[TRN_MODEL_MAX_LEVELS];      /* and their gradients' buffers */
    char engine_name[32];                     /* trn_net_engine's answer for a oneDNN net */
};

#define TRY(x)                           \
    do {                                 \
        const int try_rc_ = (x);         \
        if (try_rc_ < 0) return try_rc_; \
    } while (0)

static void set_err(char *err, size_t cap, const char *msg, int rc)
{
    if (err && cap) snprintf(err, cap, "%s: %s", msg, trn_strerror(rc));
}

void trn_net_opts_default(struct trn_net_opts *o)
{
    memset(o, 0, sizeof *o);
    o->train = true;
    o->device = -1;
    o->amp = KERN_DT_F32;
}

static void *alloc_floats(size_t n, size_t elem)
{
    /* 64-byte aligned for the GEMMs and vector loops; at least one line so NULL means failure. */
    size_t bytes = (n ? n : 1) * elem;
    bytes = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

/* Zeroed tensor memory of the net's backend (device memory on CUDA); at least one element. */
static void *alloc_tensor(struct trn_net *net, size_t n, size_t elem)
{
    void *p = NULL;
    if (kern_mem_alloc(net->ctx, (n ? n : 1) * elem, &p) < 0) return NULL;
    net->mem += (n ? n : 1) * elem;
    return p;
}

static size_t arena_bytes(const struct trn_net *net, int arena)
{
    return net->I->arena_len[arena] * sizeof(float);
}

static float *A(const struct trn_net *net, int a)
{
    return net->act + net->plan.acts[a].offset;
}

static float *D(const struct trn_net *net, int a)
{
    return net->dact + net->plan.acts[a].doff;
}

static float *P(const struct trn_net *net, int t)
{
    float *p = net->gpu ? net->d_param : (float *)trn_model_arena(net->m, TRN_ARENA_PARAM);
    return p + trn_model_tensor(net->m, t)->offset;
}

static float *B(const struct trn_net *net, int t)
{
    float *p = net->gpu ? net->d_buf : (float *)trn_model_arena(net->m, TRN_ARENA_BUFFER);
    return p + trn_model_tensor(net->m, t)->offset;
}

static float *G(const struct trn_net *net, int t)
{
    return net->grad + trn_model_tensor(net->m, t)->offset;
}

/* Tensor t of the parameters cast to the AMP dtype (w16, same offsets as the PARAM arena). */
static const uint16_t *P16(const struct trn_net *net, int t)
{
    return net->w16 + trn_model_tensor(net->m, t)->offset;
}

/* float32 -> the AMP dtype, n elements (autocast's cast of a conv's operands). */
static int to_lowp(const struct trn_net *net, uint16_t *dst, const float *src, size_t n)
{
    return net->amp == KERN_DT_BF16 ? net->K->cast_f32_bf16(net->ctx, dst, src, n)
                                    : net->K->cast_f32_f16(net->ctx, dst, src, n);
}

/* The AMP dtype -> float32 (exact). */
static int from_lowp(const struct trn_net *net, float *dst, const uint16_t *src, size_t n)
{
    return net->amp == KERN_DT_BF16 ? net->K->cast_bf16_f32(net->ctx, dst, src, n)
                                    : net->K->cast_f16_f32(net->ctx, dst, src, n);
}

/* The accum bit for the next gradient written into act a: overwrite first, add afterwards. */
static unsigned accum_for(struct trn_net *net, int a)
{
    const unsigned bit = net->has[a] ? KERN_ACCUM_DX : 0u;
    net->has[a] = 1;
    return bit;
}

/* What conv ci hands to the next op: the residual sum, the SiLU output, or the Detect output. */
static int conv_out(const struct trn_net *net, int ci)
{
    const struct trn_act_conv *ac = &net->plan.convs[ci];
    return ac->add >= 0 ? ac->add : ac->act >= 0 ? ac->act : ac->conv;
}

static int layer_in(const struct trn_net *net, int from)
{
    return from < 0 ? 0 : net->plan.layers[from].out;
}

static void bn_desc(const struct trn_net *net, int ci, struct kern_bn *d)
{
    const struct trn_act *a = &net->plan.acts[net->plan.convs[ci].conv];
    kern_bn_init(d, a->n, a->c, a->h * a->w);
}

/* Elements per image of act a, and its n-strides (0: dense; trn_act.nstride, dnstride): a concat
 * input that lives in its concat buffer's channel slice (model.h CONCAT SLICES). */
static size_t img_of(const struct trn_net *net, int a)
{
    const struct trn_act *t = &net->plan.acts[a];
    return (size_t)t->c * (size_t)t->h * (size_t)t->w;
}

static size_t NS(const struct trn_net *net, int a)
{
    return net->plan.acts[a].nstride;
}

static size_t DNS(const struct trn_net *net, int a)
{
    return net->plan.acts[a].dnstride;
}

/* Act a cast to the AMP dtype into the dense scratch dst (through its slice when it has one). */
static int act_to_lowp(const struct trn_net *net, uint16_t *dst, int a)
{
    const struct trn_act *t = &net->plan.acts[a];
    if (!t->nstride) return to_lowp(net, dst, A(net, a), t->numel);
    return net->K->cast_f32_lowp_ns(net->ctx, net->amp, dst, A(net, a), t->n, img_of(net, a),
                                    t->nstride);
}

/* ---------------------------------------------------------------------------------------- */
/* Creation                                                                                 */

/* The gradient-ready hook's row ranges (net.h GRADIENTS): each row's PARAM tensors must lie in
 * one stretch, the stretches in row order; a row's range runs to the next row's first tensor, so
 * the ranges tile the arena (padding included) and a row without parameters gets an empty one. */
static int row_ranges(struct trn_net *net, char *err, size_t err_cap)
{
    const struct trn_model_info *I = net->I;
    const int nr = I->n_layers;
    const size_t len = I->arena_len[TRN_ARENA_PARAM];
    size_t *lo = malloc(((size_t)nr + 1) * sizeof *lo), *hi = calloc((size_t)nr + 1, sizeof *hi);
    net->row_start = lo;
    if (!lo || !hi) {
        free(hi);
        return -ENOMEM;
    }
    for (int i = 0; i <= nr; i++)
        lo[i] = SIZE_MAX;
    int bad = -1;
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(net->m, t);
        if (T->arena != TRN_ARENA_PARAM) continue;
        if (T->layer < 0 || T->layer >= nr) {
            if (err && err_cap)
                snprintf(err, err_cap, "gradient-ready hook: tensor %s has no row", T->name);
            free(hi);
            return -EINVAL;
        }
        if (T->offset < lo[T->layer]) lo[T->layer] = T->offset;
        if (T->offset + T->numel > hi[T->layer]) hi[T->layer] = T->offset + T->numel;
    }
    lo[nr] = len;
    for (int i = nr - 1; i >= 0 && bad < 0; i--) {
        if (lo[i] == SIZE_MAX) lo[i] = lo[i + 1]; /* no parameters: an empty range */
        if (hi[i] > lo[i + 1]) bad = i;           /* overlaps a later row */
    }
    lo[0] = 0; /* any leading padding goes with row 0 */
    free(hi);
    if (bad >= 0) {
        if (err && err_cap)
            snprintf(err, err_cap,
                     "gradient-ready hook: the parameters of row %d are not one stretch of the "
                     "arena in row order",
                     bad);
        return -EINVAL;
    }
    return 0;
}

static int row_ready(struct trn_net *net, int i);

/* The oneDNN training executor's row-done hook: the gradient-ready hook of row i. */
static int dnn_row_done(void *ctx, int i)
{
    return row_ready(ctx, i);
}

/* The oneDNN executor where o->cpu_engine asks for it and it applies (net.h trn_cpu_engine):
 * an inference executor's Detect convs write into the acts the decode reads, a training one's into
 * the head, already reshaped. */
static int dnn_create(struct trn_net *net, const struct trn_net_opts *o, char *err, size_t err_cap)
{
    /* training nets without the options the training executor does not cover */
    const bool train = o->train;
    const char *why = !trn_dnn_built() ? "this build has no oneDNN"
                      : net->gpu || kern_ctx_backend(net->ctx) != KERN_BACKEND_CPU ? "not a CPU net"
                      : net->amp != KERN_DT_F32                                    ? "autocast"
                      : train && o->input_grad ? "input gradients"
                                               : NULL;
    if (why) {
        if (o->cpu_engine == TRN_CPU_ENGINE_AUTO) return 0;
        if (err && err_cap) snprintf(err, err_cap, "cpu_engine oneDNN: %s", why);
        return -ENOTSUP;
    }
    /* as many threads as the reference ops' GEMMs would use: the context's, or OpenBLAS's own
       when the context runs on the caller alone */
    const int ct = kern_ctx_threads(net->ctx);
    const int threads = ct > 1 ? ct : kern_blas_threads();
    /* training: the Detect convs write the head itself, reshaped as the loss reads it */
    float *head[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < net->I->nl; l++)
        head[l] = net->head + net->head_off[l];
    const int rc = train ? trn_dnn_train_create(net->m, &net->plan, threads > 0 ? threads : 1,
                                                net->grad, head, &net->dnn, err, err_cap)
                         : trn_dnn_create(net->m, &net->plan, threads > 0 ? threads : 1, &net->dnn,
                                          err, err_cap);
    if (rc == -ENOTSUP && o->cpu_engine == TRN_CPU_ENGINE_AUTO) { /* only its slow code here */
        if (err && err_cap) err[0] = '\0';
        return 0;
    }
    if (rc < 0) return rc;
    if (train)
        trn_dnn_train_hooks(net->dnn, net->bn_allreduce, net->bn_allreduce_ctx,
                            net->grad_ready ? dnn_row_done : NULL, net);
    net->mem += trn_dnn_bytes(net->dnn);
    snprintf(net->engine_name, sizeof net->engine_name, "oneDNN %s", trn_dnn_layout(net->dnn));
    net->dnn_train = train;
    return 0;
}

int trn_net_create(struct trn_model *m, int batch, int h, int w, const struct trn_net_opts *opts,
                   struct trn_net **out, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!m || !out || batch < 1 || h < 1 || w < 1) return -EINVAL;
    struct trn_net_opts o;
    if (opts)
        o = *opts;
    else
        trn_net_opts_default(&o);
    const struct trn_model_info *I = trn_model_info(m);
    if (I->nl > TRN_MODEL_MAX_LEVELS) return -EINVAL;
    if (o.cpu_engine < TRN_CPU_ENGINE_REF || o.cpu_engine > TRN_CPU_ENGINE_ONEDNN) {
        if (err && err_cap) snprintf(err, err_cap, "trn_net_opts.cpu_engine: %d", o.cpu_engine);
        return -EINVAL;
    }
    if (o.amp != KERN_DT_F32 && o.amp != KERN_DT_BF16 && o.amp != KERN_DT_F16) {
        if (err && err_cap) snprintf(err, err_cap, "trn_net_opts.amp: unknown dtype %d", o.amp);
        return -EINVAL;
    }
    struct trn_net *net = calloc(1, sizeof *net);
    if (!net) return -ENOMEM;
    net->m = m;
    net->amp = o.amp;
    net->I = I;
    net->batch = batch;
    net->input_grad = o.train && o.input_grad;
    int rc = trn_model_plan(m, batch, h, w, &net->plan, err, err_cap);
    if (rc) goto fail_quiet;
    const struct trn_act_plan *pl = &net->plan;

    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = trn_model_layer(m, i);
        if (L->type == TRN_MOD_UPSAMPLE && L->scale != 2) {
            rc = -TRN_MODEL_EUNSUPPORTED;
            if (err && err_cap)
                snprintf(err, err_cap, "layer %d: Upsample scale %d (only 2 is supported)", i,
                         L->scale);
            goto fail_quiet;
        }
    }

    if (o.ctx) {
        net->ctx = o.ctx;
    } else {
        struct kern_ctx_opts ko;
        kern_ctx_opts_default(&ko);
        ko.threads = o.threads;
        if (o.device >= 0) {
            ko.backend = KERN_BACKEND_CUDA;
            ko.device = o.device;
            ko.any_algo = o.any_algo;
            ko.plans = o.plans;
            ko.tune = o.tune;
        }
        if ((rc = kern_ctx_create(&ko, &net->ctx))) {
            set_err(err, err_cap, o.device >= 0 ? "CUDA context" : "kern context", rc);
            goto fail_quiet;
        }
        net->own_ctx = true;
    }
    const bool cuda = kern_ctx_backend(net->ctx) == KERN_BACKEND_CUDA;
    net->gpu = cuda || o.device_path;
    net->K = cuda ? kern_ops_cuda() : kern_ops_ref();
    if (!net->K) {
        rc = -KERN_EBACKEND;
        set_err(err, err_cap, "CUDA ops", rc);
        goto fail_quiet;
    }

    rc = -ENOMEM;
    net->act = alloc_tensor(net, pl->total, sizeof(float));
    net->has = calloc((size_t)pl->n_acts + 1, 1);
    net->cd = calloc((size_t)I->n_convs + 1, sizeof *net->cd);
    net->cdb = calloc((size_t)I->n_convs + 1, sizeof *net->cdb);
    net->bn_off = calloc((size_t)I->n_convs + 1, sizeof *net->bn_off);
    net->pool_off = calloc((size_t)I->n_layers + 1, sizeof *net->pool_off);
    if (!net->act || !net->has || !net->cd || !net->cdb || !net->bn_off || !net->pool_off)
        goto fail;
    if (o.train) {
        net->dact = alloc_tensor(net, pl->dtotal, sizeof(float));
        net->grad = alloc_tensor(net, I->arena_len[TRN_ARENA_PARAM], sizeof(float));
        if (!net->dact || !net->grad) goto fail;
    }
    if (o.share && (o.share->m != m || o.share->ctx != net->ctx || o.share->gpu != net->gpu ||
                    o.share->shared)) {
        rc = -EINVAL;
        set_err(err, err_cap, "trn_net_opts.share: not a net of this model and context", rc);
        goto fail_quiet;
    }
    if (net->gpu && o.share) {
        net->shared = true;
        net->d_param = o.share->d_param;
        net->d_buf = o.share->d_buf;
        for (int a = 0; a < pl->n_acts; a++)
            if (pl->acts[a].numel > net->n_view) net->n_view = pl->acts[a].numel;
        net->h_view = alloc_floats(net->n_view, sizeof(float));
        if (!net->h_view) goto fail;
        if (o.train && !(net->h_grad = alloc_floats(I->arena_len[TRN_ARENA_PARAM], sizeof(float))))
            goto fail;
    } else if (net->gpu) {
        net->d_param = alloc_tensor(net, I->arena_len[TRN_ARENA_PARAM], sizeof(float));
        net->d_buf = alloc_tensor(net, I->arena_len[TRN_ARENA_BUFFER], sizeof(float));
        for (int a = 0; a < pl->n_acts; a++)
            if (pl->acts[a].numel > net->n_view) net->n_view = pl->acts[a].numel;
        net->h_view = alloc_floats(net->n_view, sizeof(float));
        if (!net->d_param || !net->d_buf || !net->h_view) goto fail;
        if (o.train && !(net->h_grad = alloc_floats(I->arena_len[TRN_ARENA_PARAM], sizeof(float))))
            goto fail;
    }
    if (!net->gpu && !(net->sview = calloc((size_t)pl->n_acts + 1, sizeof *net->sview))) goto fail;

    size_t ws = 0, n_stat = 0, n_x = 0, n_y = 0;
    if (net->amp != KERN_DT_F32 && !(net->lp = calloc((size_t)I->n_convs + 1, sizeof *net->lp)))
        goto fail;
    for (int ci = 0; ci < I->n_convs; ci++) {
        const struct trn_conv *c = trn_model_conv(m, ci);
        const struct trn_act *x = &pl->acts[pl->convs[ci].in];
        kern_conv2d_init(&net->cd[ci], batch, c->c1, x->h, x->w, c->c2, c->k, c->s, c->p);
        net->cdb[ci] = net->cd[ci];
        net->cd[ci].x_nstride = x->nstride;
        net->cdb[ci].x_nstride = x->dnstride;
        size_t b = 0;
        if ((rc = net->K->conv2d_workspace_size(net->ctx, &net->cd[ci], &b))) goto fail;
        if (b > ws) ws = b;
        if (o.train && x->dnstride != x->nstride) { /* its own plan on CUDA */
            if ((rc = net->K->conv2d_workspace_size(net->ctx, &net->cdb[ci], &b))) goto fail;
            if (b > ws) ws = b;
        }
        if (net->lp) {
            /* the lowp convs are dense: slices go through the _ns casts and the scratch */
            kern_conv2d_lowp_init(&net->lp[ci], &net->cdb[ci], net->amp, KERN_LAYOUT_NCHW);
            net->lp[ci].conv.x_nstride = 0;
            if ((rc = net->K->conv2d_lowp_workspace_size(net->ctx, &net->lp[ci], &b))) goto fail;
            if (b > ws) ws = b;
            if (x->numel > n_x) n_x = x->numel;
            if (pl->acts[pl->convs[ci].conv].numel > n_y) n_y = pl->acts[pl->convs[ci].conv].numel;
        }
        net->bn_off[ci] = n_stat;
        if (c->bn) n_stat += 2 * (size_t)c->c2;
    }
    if ((rc = kern_ctx_reserve(net->ctx, ws))) goto fail;
    rc = -ENOMEM;
    /* a net on another's parameters also reads that net's cast of them (same dtype) */
    net->pown = net->shared ? o.share : net;
    net->fixed = o.fixed_params;
    if (net->lp && net->pown != net && net->pown->amp == net->amp) net->w16 = net->pown->w16;
    if (net->lp) {
        if (!net->w16) {
            net->w16 = alloc_tensor(net, I->arena_len[TRN_ARENA_PARAM], sizeof(uint16_t));
            net->w16_own = true;
        }
        net->x16 = alloc_tensor(net, n_x, sizeof(uint16_t));
        net->y16 = alloc_tensor(net, n_y, sizeof(uint16_t));
        if (!net->w16 || !net->x16 || !net->y16) goto fail;
        if (o.train && !(net->dx32 = alloc_tensor(net, n_x, sizeof(float)))) goto fail;
    }
    if (!(net->bn_stat = alloc_tensor(net, n_stat, sizeof(float)))) goto fail;

    size_t n_idx = 0;
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = trn_model_layer(m, i);
        net->pool_off[i] = n_idx;
        if (L->type == TRN_MOD_SPPF) n_idx += 3 * pl->acts[pl->layers[i].pool[0]].numel;
    }
    if (!(net->pool_idx = alloc_tensor(net, n_idx, sizeof(int32_t)))) goto fail;

    const struct trn_layer *Ld = trn_model_layer(m, I->detect);
    size_t n_head = 0;
    net->dec_rows = 0;
    for (int l = 0; l < I->nl; l++) {
        const struct trn_act *r = &pl->acts[pl->convs[Ld->conv0 + l].conv];
        net->det[l] = (struct kern_detect){ .bs = batch,
                                            .na = I->na,
                                            .no = I->no,
                                            .ny = r->h,
                                            .nx = r->w,
                                            .stride = (float)I->stride[l] };
        net->head_off[l] = n_head;
        n_head += (r->numel + TRN_MODEL_ALIGN - 1) / TRN_MODEL_ALIGN * TRN_MODEL_ALIGN;
        net->dec_rows += I->na * r->h * r->w;
    }
    net->n_head = n_head;
    net->n_dec = (size_t)batch * (size_t)net->dec_rows * (size_t)I->no;
    net->head = alloc_tensor(net, n_head, sizeof(float));
    net->dec = alloc_tensor(net, net->n_dec, sizeof(float));
    if (!net->head || !net->dec) goto fail;
    if (net->gpu) {
        net->h_head = alloc_floats(n_head, sizeof(float));
        net->h_dec = alloc_floats(net->n_dec, sizeof(float));
        if (!net->h_head || !net->h_dec) goto fail;
        if (o.train && !(net->d_dout = alloc_tensor(net, n_head, sizeof(float)))) goto fail;
    }
    if (o.bn_allreduce) {
        int c_max = 0;
        for (int ci = 0; ci < I->n_convs; ci++) {
            const struct trn_conv *c = trn_model_conv(m, ci);
            if (c->bn && c->c2 > c_max) c_max = c->c2;
        }
        net->bn_allreduce = o.bn_allreduce;
        net->bn_allreduce_ctx = o.bn_allreduce_ctx;
        net->bn_sums = alloc_tensor(net, KERN_BN_SUMS_LEN(c_max), sizeof(double));
        if (!net->bn_sums) goto fail;
        if (net->gpu && !(net->h_sums = alloc_floats(KERN_BN_SUMS_LEN(c_max), sizeof(double))))
            goto fail;
    }
    if (o.grad_ready && o.train && (rc = row_ranges(net, err, err_cap)) < 0) goto fail_quiet;
    net->grad_ready = o.train ? o.grad_ready : NULL;
    net->grad_ready_ctx = o.grad_ready_ctx;
    for (int t = 0; t < I->n_tensors; t++)
        if (trn_model_tensor(m, t)->role == TRN_T_ANCHORS)
            net->anchors = trn_model_tensor(m, t)->offset;
    if (o.cpu_engine != TRN_CPU_ENGINE_REF && (rc = dnn_create(net, &o, err, err_cap)) < 0)
        goto fail_quiet;
    *out = net;
    return 0;
fail:
    set_err(err, err_cap, "creating the network", rc);
fail_quiet:
    trn_net_destroy(net);
    return rc;
}

void trn_net_destroy(struct trn_net *net)
{
    if (!net) return;
    if (net->ctx) {
        /* Tensor memory goes back through the backend that gave it, before the context. */
        void *const t[] = { net->act,
                            net->dact,
                            net->grad,
                            net->bn_stat,
                            net->pool_idx,
                            net->head,
                            net->dec,
                            net->shared ? NULL : net->d_param,
                            net->shared ? NULL : net->d_buf,
                            net->d_dout,
                            net->bn_sums,
                            net->w16_own ? net->w16 : NULL,
                            net->x16,
                            net->y16,
                            net->dx32 };
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
            kern_mem_free(net->ctx, t[k]);
    }
    if (net->own_ctx) kern_ctx_destroy(net->ctx);
    if (net->sview)
        for (int a = 0; a < net->plan.n_acts; a++)
            free(net->sview[a]);
    free(net->sview);
    trn_act_plan_free(&net->plan);
    free(net->has);
    free(net->cd);
    free(net->cdb);
    free(net->lp);
    free(net->bn_off);
    free(net->pool_off);
    free(net->h_head);
    free(net->h_dec);
    free(net->h_grad);
    free(net->h_view);
    free(net->h_sums);
    free(net->row_start);
    trn_dnn_destroy(net->dnn);
    free(net);
}

const struct trn_act_plan *trn_net_plan(const struct trn_net *net)
{
    return net ? &net->plan : NULL;
}

int trn_net_levels(const struct trn_net *net)
{
    return net ? net->I->nl : -EINVAL;
}

long trn_net_output_shape(const struct trn_net *net, int level, int shape[5])
{
    if (!net || level < 0 || level >= net->I->nl) return -EINVAL;
    const struct kern_detect *d = &net->det[level];
    if (shape) {
        shape[0] = d->bs;
        shape[1] = d->na;
        shape[2] = d->ny;
        shape[3] = d->nx;
        shape[4] = d->no;
    }
    return (long)d->bs * d->na * d->ny * d->nx * d->no;
}

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                  */

/* SyncBatchNorm: sum bn_sums (a c-channel layer's) over the ranks through the hook, which
 * takes host memory: on the device path the sums go through h_sums. */
static int bn_sync(struct trn_net *net, int c)
{
    const size_t n = KERN_BN_SUMS_LEN(c);
    double *host = net->bn_sums;
    if (net->gpu) {
        TRY(kern_mem_copy(net->ctx, net->h_sums, net->bn_sums, n * sizeof(double), KERN_COPY_D2H));
        host = net->h_sums;
    }
    TRY(net->bn_allreduce(net->bn_allreduce_ctx, host, n));
    if (net->gpu)
        TRY(kern_mem_copy(net->ctx, net->bn_sums, host, n * sizeof(double), KERN_COPY_H2D));
    return 0;
}

static int conv_fwd(struct trn_net *net, int ci, bool train)
{
    const struct kern_ops *K = net->K;
    const struct trn_conv *c = trn_model_conv(net->m, ci);
    const struct trn_act_conv *ac = &net->plan.convs[ci];
    struct kern_bn d;
    /* A shortcut bottleneck's cv2 writes silu(bn) + the bottleneck input (cv1's input) straight
     * into the sum: its SiLU output is never stored (trn_act_conv.act). */
    const bool sum = c->bn && ac->add >= 0;
    float *const y = c->bn ? A(net, sum ? ac->add : ac->act) : NULL;
    const float *const r = sum ? A(net, net->plan.convs[ci - 1].in) : NULL;
    if (c->bn) {
        bn_desc(net, ci, &d);
        d.y_nstride = NS(net, sum ? ac->add : ac->act); /* a concat slice writes in place */
        if (sum) d.r_nstride = NS(net, net->plan.convs[ci - 1].in);
    }
    if (!train && !net->lp && c->bn && c->bias < 0)
        /* inference: conv, BN, SiLU (and the sum) in one op; the CPU keeps the conv's output
         * in L2, a band at a time (A(conv) is the scratch a backend that does not fuse uses) */
        return K->conv2d_bn_silu_fwd_eval(
            net->ctx, &net->cd[ci], &d, y, A(net, ac->conv), A(net, ac->in), P(net, c->weight),
            P(net, c->bn_weight), P(net, c->bn_bias), B(net, c->bn_mean), B(net, c->bn_var), r);
    if (net->lp) {
        /* autocast: the input cast to the dtype, the lowp conv, its output widened back */
        TRY(act_to_lowp(net, net->x16, ac->in));
        TRY(K->conv2d_lowp_fwd(net->ctx, &net->lp[ci], net->y16, net->x16, P16(net, c->weight),
                               c->bias >= 0 ? P16(net, c->bias) : NULL));
        TRY(from_lowp(net, A(net, ac->conv), net->y16, net->plan.acts[ac->conv].numel));
    } else {
        TRY(K->conv2d_fwd(net->ctx, &net->cd[ci], A(net, ac->conv), A(net, ac->in),
                          P(net, c->weight), c->bias >= 0 ? P(net, c->bias) : NULL));
    }
    if (!c->bn) return 0;
    if (train) {
        float *mean = net->bn_stat + net->bn_off[ci];
        if (net->bn_allreduce) {
            TRY(K->bn_stats(net->ctx, &d, net->bn_sums, A(net, ac->conv)));
            TRY(bn_sync(net, c->c2));
            if (sum)
                TRY(K->bn_silu_add_fwd_apply(
                    net->ctx, &d, y, mean, mean + c->c2, B(net, c->bn_mean), B(net, c->bn_var),
                    A(net, ac->conv), P(net, c->bn_weight), P(net, c->bn_bias), net->bn_sums, r));
            else
                TRY(K->bn_silu_fwd_apply(net->ctx, &d, y, mean, mean + c->c2, B(net, c->bn_mean),
                                         B(net, c->bn_var), A(net, ac->conv), P(net, c->bn_weight),
                                         P(net, c->bn_bias), net->bn_sums));
        } else if (sum) {
            TRY(K->bn_silu_add_fwd_train(net->ctx, &d, y, mean, mean + c->c2, B(net, c->bn_mean),
                                         B(net, c->bn_var), A(net, ac->conv), P(net, c->bn_weight),
                                         P(net, c->bn_bias), r));
        } else {
            TRY(K->bn_silu_fwd_train(net->ctx, &d, y, mean, mean + c->c2, B(net, c->bn_mean),
                                     B(net, c->bn_var), A(net, ac->conv), P(net, c->bn_weight),
                                     P(net, c->bn_bias)));
        }
        if (!net->no_count) {
            int64_t *cnt = trn_model_arena(net->m, TRN_ARENA_COUNT);
            cnt[trn_model_tensor(net->m, c->bn_count)->offset] += 1;
        }
    } else if (sum) {
        TRY(K->bn_silu_add_fwd_eval(net->ctx, &d, y, A(net, ac->conv), P(net, c->bn_weight),
                                    P(net, c->bn_bias), B(net, c->bn_mean), B(net, c->bn_var), r));
    } else {
        TRY(K->bn_silu_fwd_eval(net->ctx, &d, y, A(net, ac->conv), P(net, c->bn_weight),
                                P(net, c->bn_bias), B(net, c->bn_mean), B(net, c->bn_var)));
    }
    return 0;
}

/* A bottleneck made of convs cv1, cv1 + 1; with a shortcut cv2's forward adds cv1's input. */
static int bottleneck_fwd(struct trn_net *net, int cv1, bool train)
{
    TRY(conv_fwd(net, cv1, train));
    return conv_fwd(net, cv1 + 1, train);
}

/* Copy act src into channels [c_off, ..) of act dst. */
static int cat_fwd(struct trn_net *net, int dst, int src, int c_off)
{
    const struct trn_act *y = &net->plan.acts[dst], *x = &net->plan.acts[src];
    /* placed in its slice by the plan: its producer has written it there */
    if (x->nstride && A(net, src) == A(net, dst) + (size_t)c_off * x->h * x->w) return 0;
    return net->K->concat_fwd(net->ctx, A(net, dst), A(net, src), x->n, x->c, x->h * x->w, y->c,
                              c_off);
}

static int pool_desc(const struct trn_net *net, int layer, struct kern_pool2d *d)
{
    const struct trn_layer *L = trn_model_layer(net->m, layer);
    const struct trn_act *p = &net->plan.acts[net->plan.layers[layer].pool[0]];
    *d = (struct kern_pool2d){
        .n = p->n, .c = p->c, .h_in = p->h, .w_in = p->w, .k = L->k, .stride = 1, .pad = L->k / 2
    };
    return 0;
}

static int layer_fwd(struct trn_net *net, int i, bool train)
{
    const struct kern_ops *K = net->K;
    const struct trn_layer *L = trn_model_layer(net->m, i);
    const struct trn_act_layer *al = &net->plan.layers[i];
    const int c0 = L->conv0;
    const int x = layer_in(net, L->from[0]);
    switch (L->type) {
    case TRN_MOD_CONV:
        for (int j = 0; j < L->n; j++)
            TRY(conv_fwd(net, c0 + j, train));
        break;
    case TRN_MOD_BOTTLENECK:
        for (int j = 0; j < L->n; j++)
            TRY(bottleneck_fwd(net, c0 + 2 * j, train));
        break;
    case TRN_MOD_C3: {
        TRY(conv_fwd(net, c0, train));
        for (int j = 0; j < L->n; j++) {
            const int b1 = c0 + 3 + 2 * j;
            TRY(bottleneck_fwd(net, b1, train));
        }
        TRY(conv_fwd(net, c0 + 1, train));
        /* Bottleneck branch first (common.py C3.forward). */
        TRY(cat_fwd(net, al->cat, L->n ? conv_out(net, c0 + 4 + 2 * (L->n - 1)) : conv_out(net, c0),
                    0));
        TRY(cat_fwd(net, al->cat, conv_out(net, c0 + 1), L->hidden));
        TRY(conv_fwd(net, c0 + 2, train));
        break;
    }
    case TRN_MOD_SPPF: {
        TRY(conv_fwd(net, c0, train));
        struct kern_pool2d d;
        pool_desc(net, i, &d);
        int src = conv_out(net, c0);
        TRY(cat_fwd(net, al->cat, src, 0));
        for (int j = 0; j < 3; j++) {
            d.x_nstride = NS(net, src);
            d.y_nstride = NS(net, al->pool[j]);
            TRY(K->maxpool2d_fwd(net->ctx, &d, A(net, al->pool[j]),
                                 net->pool_idx + net->pool_off[i] +
                                     (size_t)j * net->plan.acts[al->pool[j]].numel,
                                 A(net, src)));
            src = al->pool[j];
            TRY(cat_fwd(net, al->cat, src, (j + 1) * L->hidden));
        }
        TRY(conv_fwd(net, c0 + 1, train));
        break;
    }
    case TRN_MOD_UPSAMPLE: {
        const struct trn_act *a = &net->plan.acts[x];
        TRY(K->upsample2x_ns_fwd(net->ctx, A(net, al->out), A(net, x), a->n, a->c, a->h, a->w,
                                 NS(net, al->out), NS(net, x)));
        break;
    }
    case TRN_MOD_CONCAT: {
        int off = 0;
        for (int j = 0; j < L->n_from; j++) {
            const int src = layer_in(net, L->from[j]);
            TRY(cat_fwd(net, al->cat, src, off));
            off += net->plan.acts[src].c;
        }
        break;
    }
    case TRN_MOD_DETECT:
        for (int l = 0; l < L->n_conv; l++) {
            TRY(conv_fwd(net, c0 + l, train));
            if (!net->no_head)
                TRY(K->detect_reshape_fwd(net->ctx, &net->det[l], net->head + net->head_off[l],
                                          A(net, net->plan.convs[c0 + l].conv)));
        }
        break;
    }
    return 0;
}

/* The AMP weights of a forward (net.h AMP WEIGHTS): the PARAM arena cast into w16 unless the
 * cast there is known to be current. uploaded: this forward has just copied the host parameters
 * over the device copy (a non-resident device net), which makes any earlier cast of it stale. */
static int lowp_weights(struct trn_net *net, bool uploaded)
{
    struct trn_net *const o = net->pown;
    const bool follows = net->w16 == o->w16; /* the cast whose state o->w16_ok is */
    if (uploaded) o->w16_ok = false;
    if (follows && o->w16_ok && (net->fixed || net->resident)) return 0;
    TRY(to_lowp(net, net->w16, trn_net_dev_arena(net, TRN_ARENA_PARAM),
                net->I->arena_len[TRN_ARENA_PARAM]));
    net->n_casts++;
    if (follows) o->w16_ok = true;
    return 0;
}

/* The forward's own part, leaving its results where the backend keeps them. images: host
 * memory, or backend memory when images_dev. */
static int forward_dev(struct trn_net *net, const float *images, bool images_dev, bool train)
{
    net->trained = net->dnn_trained = false;
    /* The optimizer and EMA update the host model between steps; a fixed_params net's model
       changes only where trn_net_params_changed says so (validation uploads once). */
    const bool upload = net->gpu && !net->resident && !(net->fixed && net->up_ok);
    if (upload) {
        TRY(kern_mem_copy(net->ctx, net->d_param, trn_model_arena(net->m, TRN_ARENA_PARAM),
                          arena_bytes(net, TRN_ARENA_PARAM), KERN_COPY_H2D));
        TRY(kern_mem_copy(net->ctx, net->d_buf, trn_model_arena(net->m, TRN_ARENA_BUFFER),
                          arena_bytes(net, TRN_ARENA_BUFFER), KERN_COPY_H2D));
        net->up_ok = net->fixed && !net->shared && !train;
    }
    /* a batch already in the input slot (trn_net_dev_input) needs no copy */
    if (!(images_dev && images == net->act))
        TRY(kern_mem_copy(net->ctx, net->act, images, net->plan.acts[0].numel * sizeof(float),
                          images_dev ? KERN_COPY_D2D : KERN_COPY_H2D));
    if (net->lp) TRY(lowp_weights(net, upload));
    for (int i = 0; i < net->I->n_layers; i++)
        TRY(layer_fwd(net, i, train));
    if (net->gpu && train && !net->resident)
        TRY(kern_mem_copy(net->ctx, trn_model_arena(net->m, TRN_ARENA_BUFFER), net->d_buf,
                          arena_bytes(net, TRN_ARENA_BUFFER), KERN_COPY_D2H));
    net->trained = train && net->dact;
    return 0;
}

/* An eval forward on the oneDNN executor (net.h trn_cpu_engine), which keeps the Detect convs'
 * outputs (trn_dnn_decode and trn_dnn_head read them). A fixed net folds its weights once, and
 * again after trn_net_params_changed; another at every call. */
static int dnn_forward(struct trn_net *net, const float *images)
{
    net->trained = net->dnn_trained = false;
    if (!net->fixed || !net->dnn_ok) TRY(trn_dnn_load(net->dnn, net->m));
    net->dnn_ok = true;
    return trn_dnn_run(net->dnn, images);
}

int trn_net_forward(struct trn_net *net, const float *images, bool train, const float **outputs)
{
    if (!net || !images) return -EINVAL;
    if (net->dnn && net->dnn_train == train) {
        net->dnn_trained = false;
        if (train) { /* writes the head, or leaves it in the Detect convs' outputs (raw_blk) */
            TRY(trn_dnn_train_forward(net->dnn, net->m, images, !net->no_count));
            net->trained = net->dnn_trained = true;
            if (net->raw_blk) {
                for (int l = 0; l < net->I->nl; l++)
                    if (outputs) outputs[l] = net->raw_p[l];
                return 0;
            }
        } else {
            TRY(dnn_forward(net, images));
            float *head[TRN_MODEL_MAX_LEVELS];
            for (int l = 0; l < net->I->nl; l++)
                head[l] = net->head + net->head_off[l];
            TRY(trn_dnn_head(net->dnn, net->det, net->I->nl, head));
        }
    } else {
        TRY(forward_dev(net, images, false, train));
    }
    const float *head = net->head;
    if (net->gpu) {
        TRY(kern_mem_copy(net->ctx, net->h_head, net->head, net->n_head * sizeof(float),
                          KERN_COPY_D2H));
        head = net->h_head;
    }
    for (int l = 0; l < net->I->nl; l++) {
        net->out_view[l] = head + net->head_off[l];
        if (outputs) outputs[l] = net->out_view[l];
    }
    return 0;
}

int trn_net_forward_dev(struct trn_net *net, const float *images, bool images_dev, bool train,
                        const float **outputs)
{
    if (!net || !images) return -EINVAL;
    TRY(forward_dev(net, images, images_dev, train));
    for (int l = 0; l < net->I->nl; l++)
        if (outputs) outputs[l] = net->head + net->head_off[l];
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Backward                                                                                 */

/* The conv's own backward under autocast, from the float32 gradient at its raw output: dy cast
 * to the dtype (the backward of the output's widening), the parameter gradients added into the
 * float32 arena as float32, dx widened and then written or added as the float32 path does. */
static int conv_bwd_lowp(struct trn_net *net, int ci)
{
    const struct kern_ops *K = net->K;
    const struct trn_conv *c = trn_model_conv(net->m, ci);
    const struct trn_act_conv *ac = &net->plan.convs[ci];
    const struct kern_conv2d_lowp *d = &net->lp[ci];
    const size_t n_in = net->plan.acts[ac->in].numel;
    TRY(to_lowp(net, net->y16, D(net, ac->conv), net->plan.acts[ac->conv].numel));
    if (!c->bn && c->bias >= 0)
        TRY(K->conv2d_lowp_bwd_bias(net->ctx, d, G(net, c->bias), net->y16, KERN_ACCUM_DPARAM));
    TRY(act_to_lowp(net, net->x16, ac->in)); /* the forward's cast, recomputed */
    TRY(K->conv2d_lowp_bwd_filter(net->ctx, d, G(net, c->weight), net->y16, net->x16,
                                  KERN_ACCUM_DPARAM));
    if (ac->in == 0 && !net->input_grad) return 0;
    TRY(K->conv2d_lowp_bwd_data(net->ctx, d, net->x16, net->y16, P16(net, c->weight), 0));
    const unsigned accum = accum_for(net, ac->in);
    if (DNS(net, ac->in)) /* a gradient slice: widened (=|+=) straight into it */
        return K->cast_lowp_f32_ns(net->ctx, net->amp, D(net, ac->in), net->x16,
                                   net->plan.acts[ac->in].n, img_of(net, ac->in), DNS(net, ac->in),
                                   accum);
    if (!accum) return from_lowp(net, D(net, ac->in), net->x16, n_in);
    TRY(from_lowp(net, net->dx32, net->x16, n_in));
    return K->add_bwd(net->ctx, D(net, ac->in), net->dx32, n_in, KERN_ACCUM_DX);
}

/* Backward of conv ci from the gradient at its SiLU output (Detect: its raw output). */
static int conv_bwd(struct trn_net *net, int ci)
{
    const struct kern_ops *K = net->K;
    const struct trn_conv *c = trn_model_conv(net->m, ci);
    const struct trn_act_conv *ac = &net->plan.convs[ci];
    /* the gradient at its SiLU output: a shortcut bottleneck cv2's is its sum's (the SiLU output
       is not stored, and d(sum) / d(silu output) = 1) */
    const int top = !c->bn ? ac->conv : ac->act >= 0 ? ac->act : ac->add;
    if (!net->has[top]) return 0; /* nothing downstream used it: zero gradient */
    if (c->bn) {
        struct kern_bn d;
        bn_desc(net, ci, &d);
        d.y_nstride = DNS(net, top);
        const float *mean = net->bn_stat + net->bn_off[ci];
        net->has[ac->conv] = 1;
        if (net->bn_allreduce) {
            TRY(K->bn_silu_bwd_reduce(net->ctx, &d, net->bn_sums, G(net, c->bn_weight),
                                      G(net, c->bn_bias), D(net, top), A(net, ac->conv),
                                      P(net, c->bn_weight), P(net, c->bn_bias), mean, mean + c->c2,
                                      KERN_ACCUM_DPARAM));
            TRY(bn_sync(net, c->c2));
            TRY(K->bn_silu_bwd_apply(net->ctx, &d, D(net, ac->conv), D(net, top), A(net, ac->conv),
                                     P(net, c->bn_weight), P(net, c->bn_bias), mean, mean + c->c2,
                                     net->bn_sums, 0));
        } else {
            TRY(K->bn_silu_bwd(net->ctx, &d, D(net, ac->conv), G(net, c->bn_weight),
                               G(net, c->bn_bias), D(net, top), A(net, ac->conv),
                               P(net, c->bn_weight), P(net, c->bn_bias), mean, mean + c->c2,
                               KERN_ACCUM_DPARAM));
        }
    }
    if (net->lp) return conv_bwd_lowp(net, ci);
    if (!c->bn && c->bias >= 0)
        TRY(K->conv2d_bwd_bias(net->ctx, &net->cd[ci], G(net, c->bias), D(net, ac->conv),
                               KERN_ACCUM_DPARAM));
    TRY(K->conv2d_bwd_filter(net->ctx, &net->cd[ci], G(net, c->weight), D(net, ac->conv),
                             A(net, ac->in), KERN_ACCUM_DPARAM));
    if (ac->in != 0 || net->input_grad)
        TRY(K->conv2d_bwd_data(net->ctx, &net->cdb[ci], D(net, ac->in), D(net, ac->conv),
                               P(net, c->weight), accum_for(net, ac->in)));
    return 0;
}

/* Hand act src's gradient on to act dst (a residual add or the identity). */
static int pass_bwd(struct trn_net *net, int dst, int src)
{
    if (!net->has[src]) return 0;
    return net->K->add_bwd(net->ctx, D(net, dst), D(net, src), net->plan.acts[src].numel,
                           accum_for(net, dst));
}

/*
 * With a shortcut, cv2's backward reads the sum's gradient as its own (conv_bwd's top), and the
 * input x gets the sum's gradient plus cv1's: where the plan gives x the sum's gradient storage
 * (nothing else reads x) that is no copy, only x's `has` following the sum's, so that cv1's
 * bwd_data, which runs after cv2's backward has read the sum's gradient, adds into it (or
 * overwrites it when the sum got no gradient); elsewhere the sum's gradient is passed on.
 */
static int bottleneck_bwd(struct trn_net *net, int cv1)
{
    const struct trn_act_conv *ac = &net->plan.convs[cv1 + 1];
    if (ac->add >= 0) {
        const int x = net->plan.convs[cv1].in;
        if (net->plan.acts[x].doff == net->plan.acts[ac->add].doff)
            net->has[x] = net->has[ac->add];
        else
            TRY(pass_bwd(net, x, ac->add));
    }
    TRY(conv_bwd(net, cv1 + 1));
    return conv_bwd(net, cv1);
}

static int cat_bwd(struct trn_net *net, int dst, int cat, int c_off)
{
    const struct trn_act *y = &net->plan.acts[cat], *x = &net->plan.acts[dst];
    /* its gradient is the slice of the buffer's (the plan made sure nothing wrote it earlier):
       no copy, only `has` following the buffer's */
    if (x->dnstride && D(net, dst) == D(net, cat) + (size_t)c_off * x->h * x->w) {
        net->has[dst] = net->has[cat];
        return 0;
    }
    if (!net->has[cat]) return 0;
    return net->K->concat_bwd(net->ctx, D(net, dst), D(net, cat), x->n, x->c, x->h * x->w, y->c,
                              c_off, accum_for(net, dst));
}

static int layer_bwd(struct trn_net *net, int i, const float *const *d_outputs)
{
    const struct kern_ops *K = net->K;
    const struct trn_layer *L = trn_model_layer(net->m, i);
    const struct trn_act_layer *al = &net->plan.layers[i];
    const int c0 = L->conv0;
    const int x = layer_in(net, L->from[0]);
    switch (L->type) {
    case TRN_MOD_CONV:
        for (int j = L->n - 1; j >= 0; j--)
            TRY(conv_bwd(net, c0 + j));
        break;
    case TRN_MOD_BOTTLENECK:
        for (int j = L->n - 1; j >= 0; j--)
            TRY(bottleneck_bwd(net, c0 + 2 * j));
        break;
    case TRN_MOD_C3: {
        TRY(conv_bwd(net, c0 + 2));
        const int y = L->n ? conv_out(net, c0 + 4 + 2 * (L->n - 1)) : conv_out(net, c0);
        TRY(cat_bwd(net, y, al->cat, 0));
        TRY(cat_bwd(net, conv_out(net, c0 + 1), al->cat, L->hidden));
        TRY(conv_bwd(net, c0 + 1));
        for (int j = L->n - 1; j >= 0; j--)
            TRY(bottleneck_bwd(net, c0 + 3 + 2 * j));
        TRY(conv_bwd(net, c0));
        break;
    }
    case TRN_MOD_SPPF: {
        struct kern_pool2d d;
        pool_desc(net, i, &d);
        TRY(conv_bwd(net, c0 + 1));
        const int x1 = conv_out(net, c0);
        TRY(cat_bwd(net, x1, al->cat, 0));
        for (int j = 0; j < 3; j++)
            TRY(cat_bwd(net, al->pool[j], al->cat, (j + 1) * L->hidden));
        for (int j = 2; j >= 0; j--) {
            const int src = j ? al->pool[j - 1] : x1;
            if (!net->has[al->pool[j]]) continue;
            d.x_nstride = DNS(net, src);
            d.y_nstride = DNS(net, al->pool[j]);
            TRY(K->maxpool2d_bwd(net->ctx, &d, D(net, src), D(net, al->pool[j]),
                                 net->pool_idx + net->pool_off[i] +
                                     (size_t)j * net->plan.acts[al->pool[j]].numel,
                                 accum_for(net, src)));
        }
        TRY(conv_bwd(net, c0));
        break;
    }
    case TRN_MOD_UPSAMPLE: {
        if (!net->has[al->out] || (x == 0 && !net->input_grad)) break;
        const struct trn_act *a = &net->plan.acts[x];
        TRY(K->upsample2x_ns_bwd(net->ctx, D(net, x), D(net, al->out), a->n, a->c, a->h, a->w,
                                 DNS(net, x), DNS(net, al->out), accum_for(net, x)));
        break;
    }
    case TRN_MOD_CONCAT: {
        int off = 0;
        for (int j = 0; j < L->n_from; j++) {
            const int src = layer_in(net, L->from[j]);
            if (src != 0 || net->input_grad) TRY(cat_bwd(net, src, al->cat, off));
            off += net->plan.acts[src].c;
        }
        break;
    }
    case TRN_MOD_DETECT:
        for (int l = L->n_conv - 1; l >= 0; l--) {
            const int raw = net->plan.convs[c0 + l].conv;
            net->has[raw] = 1;
            TRY(K->detect_reshape_bwd(net->ctx, &net->det[l], D(net, raw), d_outputs[l], 0));
            TRY(conv_bwd(net, c0 + l));
        }
        break;
    }
    return 0;
}

/* Row i's parameter gradients are final: on the device path bring them to the host mirror, then
 * tell the hook. */
static int row_ready(struct trn_net *net, int i)
{
    const size_t off = net->row_start[i], n = net->row_start[i + 1] - off;
    struct trn_net_grad_range g = {
        .layer = i, .offset = off, .count = n, .host = net->grad + off
    };
    if (net->gpu) {
        g.host = net->h_grad + off;
        g.dev = net->grad + off;
        g.stream = kern_cuda_ctx_stream(net->ctx);
        if (n) TRY(kern_mem_copy(net->ctx, g.host, g.dev, n * sizeof(float), KERN_COPY_D2H));
    }
    return net->grad_ready(net->grad_ready_ctx, &g);
}

/* The backward's own part; dout: the output gradients in backend memory. */
static int backward_dev(struct trn_net *net, const float *const *dout)
{
    memset(net->has, 0, (size_t)net->plan.n_acts);
    for (int i = net->I->n_layers - 1; i >= 0; i--) {
        TRY(layer_bwd(net, i, dout));
        if (net->grad_ready) TRY(row_ready(net, i));
    }
    if (net->input_grad && !net->has[0])
        TRY(kern_mem_zero(net->ctx, D(net, 0), net->plan.acts[0].numel * sizeof(float)));
    if (net->gpu && !net->grad_ready && !net->resident)
        TRY(kern_mem_copy(net->ctx, net->h_grad, net->grad, arena_bytes(net, TRN_ARENA_PARAM),
                          KERN_COPY_D2H));
    return 0;
}

/* The backward of a training forward on the oneDNN executor, which reads the head's gradients in
 * their own layout (CPU nets only: host memory). */
static int dnn_backward(struct trn_net *net, const float *const *d_outputs)
{
    return trn_dnn_train_backward(net->dnn, d_outputs, net->I->nl);
}

int trn_net_backward(struct trn_net *net, const float *const *d_outputs)
{
    if (!net || !d_outputs || !net->trained) return -EINVAL;
    for (int l = 0; l < net->I->nl; l++)
        if (!d_outputs[l]) return -EINVAL;
    if (net->dnn_trained && net->raw_blk)
        for (int l = 0; l < net->I->nl; l++)
            if (d_outputs[l] != net->raw_dp[l]) return -EINVAL;
    if (net->dnn_trained) return dnn_backward(net, d_outputs);
    const float *dout[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < net->I->nl; l++) {
        dout[l] = d_outputs[l];
        if (net->gpu) {
            float *const at = net->d_dout + net->head_off[l];
            TRY(kern_mem_copy(net->ctx, at, d_outputs[l],
                              (size_t)trn_net_output_shape(net, l, NULL) * sizeof(float),
                              KERN_COPY_H2D));
            dout[l] = at;
        }
    }
    return backward_dev(net, dout);
}

int trn_net_raw_head(struct trn_net *net, bool on)
{
    if (!net) return -EINVAL;
    if (!net->dnn || !net->dnn_train) return 0;
    const int blk = trn_dnn_train_raw_head(net->dnn, on);
    net->raw_blk = 0;
    if (!on || blk <= 0) return blk < 0 ? blk : 0;
    for (int l = 0; l < net->I->nl; l++) {
        const int rc = trn_dnn_train_raw(net->dnn, l, &net->raw_p[l], &net->raw_dp[l]);
        if (rc < 0) {
            trn_dnn_train_raw_head(net->dnn, false);
            return rc;
        }
    }
    return net->raw_blk = blk;
}

int trn_net_raw_dhead(struct trn_net *net, float **dp)
{
    if (!net || !dp || !net->raw_blk) return -EINVAL;
    for (int l = 0; l < net->I->nl; l++)
        dp[l] = net->raw_dp[l];
    return net->raw_blk;
}

int trn_net_backward_dev(struct trn_net *net, const float *const *d_outputs)
{
    if (!net || !d_outputs || !net->trained) return -EINVAL;
    for (int l = 0; l < net->I->nl; l++)
        if (!d_outputs[l]) return -EINVAL;
    if (net->dnn_trained) return dnn_backward(net, d_outputs);
    return backward_dev(net, d_outputs);
}

void trn_net_zero_grad(struct trn_net *net)
{
    if (!net || !net->grad) return;
    kern_mem_zero(net->ctx, net->grad, arena_bytes(net, TRN_ARENA_PARAM));
    if (net->h_grad) memset(net->h_grad, 0, arena_bytes(net, TRN_ARENA_PARAM));
}

float *trn_net_grad(struct trn_net *net)
{
    return !net ? NULL : net->gpu ? net->h_grad : net->grad;
}

size_t trn_net_memory_bytes(const struct trn_net *net)
{
    return net ? net->mem + kern_ctx_workspace_size(net->ctx) : 0;
}

const char *trn_net_engine(const struct trn_net *net)
{
    if (!net) return "";
    if (net->dnn) return net->engine_name;
    return trn_net_on_device(net) ? "CUDA" : "reference";
}

bool trn_net_on_device(const struct trn_net *net)
{
    return net && kern_ctx_backend(net->ctx) == KERN_BACKEND_CUDA;
}

int trn_net_set_resident(struct trn_net *net, bool on)
{
    if (!net) return -EINVAL;
    if (net->gpu) net->resident = on;
    net->pown->w16_ok = false; /* the master copy moves: nothing known about the cast */
    return 0;
}

int trn_net_set_count(struct trn_net *net, bool on)
{
    if (!net) return -EINVAL;
    net->no_count = !on;
    return 0;
}

int trn_net_count_batches(struct trn_net *net, int64_t n)
{
    if (!net || n < 0) return -EINVAL;
    int64_t *cnt = trn_model_arena(net->m, TRN_ARENA_COUNT);
    for (int ci = 0; ci < net->I->n_convs; ci++) {
        const struct trn_conv *c = trn_model_conv(net->m, ci);
        if (c->bn) cnt[trn_model_tensor(net->m, c->bn_count)->offset] += n;
    }
    return 0;
}

float *trn_net_dev_input(struct trn_net *net)
{
    return net ? net->act : NULL;
}

bool trn_net_resident(const struct trn_net *net)
{
    return net && net->resident;
}

float *trn_net_dev_arena(struct trn_net *net, enum trn_arena a)
{
    if (!net || (a != TRN_ARENA_PARAM && a != TRN_ARENA_BUFFER)) return NULL;
    if (net->gpu) return a == TRN_ARENA_PARAM ? net->d_param : net->d_buf;
    return trn_model_arena(net->m, a);
}

float *trn_net_dev_grad(struct trn_net *net)
{
    return net ? net->grad : NULL;
}

struct kern_ctx *trn_net_kern_ctx(const struct trn_net *net)
{
    return net ? net->ctx : NULL;
}

const struct kern_ops *trn_net_kern_ops(const struct trn_net *net)
{
    return net ? net->K : NULL;
}

int trn_net_sync_model(struct trn_net *net, int dir)
{
    if (!net || (dir != KERN_COPY_H2D && dir != KERN_COPY_D2H)) return -EINVAL;
    if (dir == KERN_COPY_H2D) net->pown->w16_ok = false;
    if (!net->gpu) return 0;
    for (int k = 0; k < 2; k++) {
        const int a = k ? TRN_ARENA_BUFFER : TRN_ARENA_PARAM;
        float *const host = trn_model_arena(net->m, a), *const dev = k ? net->d_buf : net->d_param;
        if (dir == KERN_COPY_H2D)
            TRY(kern_mem_copy(net->ctx, dev, host, arena_bytes(net, a), KERN_COPY_H2D));
        else
            TRY(kern_mem_copy(net->ctx, host, dev, arena_bytes(net, a), KERN_COPY_D2H));
    }
    return 0;
}

int trn_net_sync_grad(struct trn_net *net, int dir)
{
    if (!net || (dir != KERN_COPY_H2D && dir != KERN_COPY_D2H)) return -EINVAL;
    if (!net->gpu || !net->grad) return 0;
    if (dir == KERN_COPY_H2D)
        return kern_mem_copy(net->ctx, net->grad, net->h_grad, arena_bytes(net, TRN_ARENA_PARAM),
                             KERN_COPY_H2D);
    return kern_mem_copy(net->ctx, net->h_grad, net->grad, arena_bytes(net, TRN_ARENA_PARAM),
                         KERN_COPY_D2H);
}

/* A host view of act a's memory at p: p itself on the CPU, else a copy into h_view (the one
 * view buffer: each getter's result is valid until the next getter call on a GPU net). */
static const float *host_view(const struct trn_net *net, const float *p, int a, size_t ns)
{
    if (!net->gpu && !ns) return p;
    struct trn_net *mut = (struct trn_net *)net;
    const size_t n = net->plan.acts[a].numel;
    float *dst = net->h_view;
    if (!net->gpu) { /* a concat slice on the CPU: its own dense copy, so views stay apart */
        if (!mut->sview[a] && !(mut->sview[a] = alloc_floats(n, sizeof(float)))) return NULL;
        dst = mut->sview[a];
    } else if (n > net->n_view) {
        return NULL;
    }
    if (!ns)
        return kern_mem_copy(mut->ctx, dst, p, n * sizeof(float), KERN_COPY_D2H) < 0 ? NULL : dst;
    /* a concat slice (ns: its n-stride): gathered image by image into a dense view */
    const size_t img = img_of(net, a);
    for (int i = 0; i < net->plan.acts[a].n; i++)
        if (kern_mem_copy(mut->ctx, dst + (size_t)i * img, p + (size_t)i * ns, img * sizeof(float),
                          KERN_COPY_D2H) < 0)
            return NULL;
    return dst;
}

const float *trn_net_input_grad(const struct trn_net *net)
{
    return net && net->input_grad ? host_view(net, D(net, 0), 0, DNS(net, 0)) : NULL;
}

const float *trn_net_layer_output(const struct trn_net *net, int i, int shape[4])
{
    if (!net || i < 0 || i >= net->I->n_layers) return NULL;
    const struct trn_act *a = &net->plan.acts[net->plan.layers[i].out];
    if (shape) {
        shape[0] = a->n;
        shape[1] = a->c;
        shape[2] = a->h;
        shape[3] = a->w;
    }
    const int o = net->plan.layers[i].out;
    return host_view(net, A(net, o), o, NS(net, o));
}

const float *trn_net_act(const struct trn_net *net, int a)
{
    if (!net || a < 0 || a >= net->plan.n_acts) return NULL;
    return host_view(net, A(net, a), a, NS(net, a));
}

/* ---------------------------------------------------------------------------------------- */
/* Inference                                                                                */

int trn_net_infer(struct trn_net *net, const float *images, const float **out, int *rows)
{
    if (!net || !images || !out) return -EINVAL;
    const struct trn_model_info *I = net->I;
    const float *anchors =
        (net->gpu ? net->d_buf : (const float *)trn_model_arena(net->m, TRN_ARENA_BUFFER)) +
        net->anchors;
    if (net->dnn && !net->dnn_train) { /* the decode on the executor's blocked outputs */
        TRY(dnn_forward(net, images));
        TRY(trn_dnn_decode(net->dnn, net->det, I->nl, anchors, net->dec, (size_t)net->dec_rows));
        *out = net->dec;
        if (rows) *rows = net->dec_rows;
        return 0;
    }
    net->no_head = true;
    const int frc = forward_dev(net, images, false, false);
    net->no_head = false;
    TRY(frc);
    const struct trn_layer *Ld = trn_model_layer(net->m, I->detect);
    const size_t no = (size_t)I->no;
    /* Decoded per image so that each image's rows of all levels are contiguous (torch.cat). */
    for (int b = 0; b < net->batch; b++) {
        size_t row = 0;
        for (int l = 0; l < I->nl; l++) {
            struct kern_detect d = net->det[l];
            d.bs = 1;
            const size_t per = (size_t)d.na * (size_t)d.ny * (size_t)d.nx;
            const float *raw = A(net, net->plan.convs[Ld->conv0 + l].conv) + (size_t)b * per * no;
            float *dst = net->dec + ((size_t)b * (size_t)net->dec_rows + row) * no;
            TRY(net->K->detect_decode(net->ctx, &d, dst, raw, anchors + (size_t)l * I->na * 2));
            row += per;
        }
    }
    if (net->gpu)
        TRY(kern_mem_copy(net->ctx, net->h_dec, net->dec, net->n_dec * sizeof(float),
                          KERN_COPY_D2H));
    *out = net->gpu ? net->h_dec : net->dec;
    if (rows) *rows = net->dec_rows;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* --- wcast --- AMP weights                                                                */

int trn_net_params_changed(struct trn_net *net)
{
    if (!net) return -EINVAL;
    net->pown->w16_ok = false;
    net->dnn_ok = false;
    net->up_ok = false;
    return 0;
}

void *trn_net_dev_params_lowp(struct trn_net *net, int *dtype)
{
    if (!net || !net->lp || net->w16 != net->pown->w16) return NULL;
    if (dtype) *dtype = net->amp;
    return net->w16;
}

int trn_net_lowp_refresh(struct trn_net *net)
{
    if (!net) return -EINVAL;
    /* a net that does not track its cast recasts at every forward anyway */
    if (!net->lp || !(net->resident || (net->fixed && !net->gpu))) return 0;
    return lowp_weights(net, false);
}

int64_t trn_net_lowp_casts(const struct trn_net *net)
{
    return net ? net->n_casts : 0;
}
