/*
 * The network's plan, arenas and public API (net.h); its executors run the layers
 * (priv/net_internal.h EXECUTORS: net_walk.c, net_exec_onednn.c), chosen here, once, at creation.
 *
 * Every arena (activations, their gradients, the parameter gradients, the head and the decoded
 * boxes) is the backend's memory. On a CUDA context the net keeps device copies of the model's
 * parameter and buffer arenas (uploaded at each forward, since the optimizer and EMA still update
 * the host model; BN running statistics come back after a training forward) plus host mirrors of
 * what callers read (Detect outputs, decoded boxes, parameter gradients, views), which this file
 * fills; the walk (the one executor on a CUDA context) uploads the model and brings the running
 * statistics and gradients back.
 */
#include "net.h"

#include "kern_cuda.h"
#include "errors.h"
#include "priv/net_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/*
 * The executors (priv/net_internal.h EXECUTORS), chosen here and nowhere else: the walk for
 * everything, unless trn_net_opts.cpu_engine lets oneDNN take the kind of forward it covers (a
 * training net's training forwards and backward, an inference net's eval forwards). AUTO keeps
 * the walk where oneDNN does not apply; ONEDNN makes that an error. trn_net_opts.act_store
 * other than float32 gives a training net's training forwards and backward to the bf16
 * executor (net_exec_x16.c), on whichever backend the context is; where it cannot run them,
 * that is an error (-EINVAL, err says why), never a silent fallback.
 */
static int exec_choose(struct trn_net *net, const struct trn_net_opts *o, char *err, size_t err_cap)
{
    for (int k = 0; k < 2; k++)
        net->ex[k] = (struct trn_net_slot){ &trn_net_exec_walk, NULL };
    const struct trn_net_slot *main = &net->ex[o->train];
    if (o->cpu_engine != TRN_CPU_ENGINE_REF) {
        void *self = NULL;
        const int rc = trn_net_exec_onednn.create(net, o, o->train, &self, err, err_cap);
        if (rc == -ENOTSUP && o->cpu_engine == TRN_CPU_ENGINE_AUTO) {
            if (err && err_cap) err[0] = '\0';
        } else if (rc < 0) {
            return rc;
        } else {
            net->ex[o->train] = (struct trn_net_slot){ &trn_net_exec_onednn, self };
        }
    }
    if (o->train && o->act_store != TRN_ACT_F32) {
        void *self = NULL;
        const int rc = trn_net_exec_x16.create(net, o, true, &self, err, err_cap);
        if (rc < 0) return rc == -ENOTSUP ? -EINVAL : rc;
        if (net->ex[1].x != &trn_net_exec_walk) net->ex[1].x->destroy(net->ex[1].self);
        net->ex[1] = (struct trn_net_slot){ &trn_net_exec_x16, self };
    }
    snprintf(net->engine_name, sizeof net->engine_name, "%s", main->x->name(net, main->self));
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
    if (o.act_store < TRN_ACT_F32 || o.act_store > TRN_ACT_BF16_NCHW) {
        if (err && err_cap) snprintf(err, err_cap, "trn_net_opts.act_store: %d", o.act_store);
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
    if ((rc = exec_choose(net, &o, err, err_cap)) < 0) goto fail_quiet;
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
    for (int k = 0; k < 2; k++) /* before the context, which they may use */
        if (net->ex[k].x) net->ex[k].x->destroy(net->ex[k].self);
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
/* The AMP weights of a forward (net.h AMP WEIGHTS): the PARAM arena cast into w16 unless the
 * cast there is known to be current. uploaded: this forward has just copied the host parameters
 * over the device copy (a non-resident device net), which makes any earlier cast of it stale. */
int net_lowp_weights(struct trn_net *net, bool uploaded)
{
    struct trn_net *const o = net->pown;
    const bool follows = net->w16 == o->w16; /* the cast whose state o->w16_ok is */
    if (uploaded) o->w16_ok = false;
    if (follows && o->w16_ok && !o->w16_spare && (net->fixed || net->resident)) return 0;
    TRY(to_lowp(net, net->w16, trn_net_dev_arena(net, TRN_ARENA_PARAM),
                net->I->arena_len[TRN_ARENA_PARAM]));
    net->n_casts++;
    if (follows) o->w16_ok = true;
    return 0;
}

/* A forward on the executor for its kind, and where its outputs are (backend memory). */
static int forward(struct trn_net *net, const void *images, bool images_dev, bool train,
                   const float **outputs)
{
    const struct trn_net_slot *x = &net->ex[train];
    net->trained = false;
    TRY(x->x->forward(net, x->self, images, images_dev, train));
    net->trained = train && net->dact;
    const bool raw = train && net->raw_blk;
    if (!train && !net->no_head && x->x->head) TRY(x->x->head(net, x->self));
    for (int l = 0; l < net->I->nl && outputs; l++)
        outputs[l] = raw ? net->raw_p[l] : net->head + net->head_off[l];
    return 0;
}

int trn_net_forward(struct trn_net *net, const float *images, bool train, const float **outputs)
{
    if (!net || !images) return -EINVAL;
    /* the host's view of a raw head in device memory would be device pointers */
    if (train && net->raw_blk && kern_ctx_backend(net->ctx) == KERN_BACKEND_CUDA) return -EINVAL;
    TRY(forward(net, images, false, train, outputs));
    if (train && net->raw_blk) return 0; /* the raw head is read where the executor keeps it */
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

int trn_net_forward_dev(struct trn_net *net, const void *images, bool images_dev, bool train,
                        const float **outputs)
{
    if (!net || !images) return -EINVAL;
    return forward(net, images, images_dev, train, outputs);
}

int net_bn_sync(struct trn_net *net, double *sums, int c)
{
    const size_t n = KERN_BN_SUMS_LEN(c);
    double *host = sums;
    if (net->gpu) {
        TRY(kern_mem_copy(net->ctx, net->h_sums, sums, n * sizeof(double), KERN_COPY_D2H));
        host = net->h_sums;
    }
    TRY(net->bn_allreduce(net->bn_allreduce_ctx, host, n));
    if (net->gpu) TRY(kern_mem_copy(net->ctx, sums, host, n * sizeof(double), KERN_COPY_H2D));
    return 0;
}

int net_fwd_begin(struct trn_net *net, const void *images, bool images_dev, bool train,
                  bool *uploaded)
{
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
    *uploaded = upload;
    /* a batch already in the input slot (trn_net_dev_input) needs no copy */
    if (images && !(images_dev && images == net->act))
        TRY(kern_mem_copy(net->ctx, net->act, images, net->plan.acts[0].numel * sizeof(float),
                          images_dev ? KERN_COPY_D2D : KERN_COPY_H2D));
    return 0;
}

int net_fwd_end(struct trn_net *net, bool train)
{
    if (net->gpu && train && !net->resident)
        TRY(kern_mem_copy(net->ctx, trn_model_arena(net->m, TRN_ARENA_BUFFER), net->d_buf,
                          arena_bytes(net, TRN_ARENA_BUFFER), KERN_COPY_D2H));
    return 0;
}

int net_bwd_end(struct trn_net *net)
{
    if (net->gpu && !net->grad_ready && !net->resident)
        TRY(kern_mem_copy(net->ctx, net->h_grad, net->grad, arena_bytes(net, TRN_ARENA_PARAM),
                          KERN_COPY_D2H));
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Backward                                                                                 */

/* Row i's parameter gradients are final: on the device path bring them to the host mirror, then
 * tell the hook. */
int net_row_ready(struct trn_net *net, int i)
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

/* The backward on the executor of training forwards; dout in backend memory. */
static int backward(struct trn_net *net, const float *const *dout)
{
    const struct trn_net_slot *x = &net->ex[1];
    return x->x->backward(net, x->self, dout);
}

int trn_net_backward(struct trn_net *net, const float *const *d_outputs)
{
    if (!net || !d_outputs || !net->trained) return -EINVAL;
    const float *dout[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < net->I->nl; l++) {
        if (!(dout[l] = d_outputs[l])) return -EINVAL;
        if (net->gpu && !net->raw_blk) { /* a raw head's gradients are the net's own buffers */
            float *const at = net->d_dout + net->head_off[l];
            TRY(kern_mem_copy(net->ctx, at, d_outputs[l],
                              (size_t)trn_net_output_shape(net, l, NULL) * sizeof(float),
                              KERN_COPY_H2D));
            dout[l] = at;
        }
    }
    return backward(net, dout);
}

int trn_net_raw_head(struct trn_net *net, bool on)
{
    if (!net) return -EINVAL;
    const struct trn_net_slot *x = &net->ex[1];
    if (!net->grad || !x->x->raw_head) return 0;
    net->raw_blk = 0;
    const int blk = x->x->raw_head(net, x->self, on);
    return blk < 0 ? blk : (net->raw_blk = blk);
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
    return backward(net, d_outputs);
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
    return net ? net->engine_name : "";
}

bool trn_net_on_device(const struct trn_net *net)
{
    return net && kern_ctx_backend(net->ctx) == KERN_BACKEND_CUDA;
}

int trn_net_set_resident(struct trn_net *net, bool on)
{
    if (!net) return -EINVAL;
    if (net->gpu) net->resident = on;
    net_lowp_stale(net); /* the master copy moves: nothing known about the casts */
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

void *trn_net_dev_input(struct trn_net *net)
{
    if (!net) return NULL;
    void *slot = net->act;
    if (net->s2d_in) net->ex[1].x->s2d_slot(net, net->ex[1].self, &slot);
    return slot;
}

int trn_net_s2d_input(const struct trn_model *m, int h, int w, const struct trn_net_opts *o)
{
    if (!m || !o || !o->train || o->input_grad || o->amp != KERN_DT_BF16 ||
        trn_model_info(m)->ch != 3 || net_stem_conv(m, h, w) < 0)
        return -ENOTSUP;
    return o->act_store == TRN_ACT_BF16_NHWC   ? KERN_AUG_BF16_S2D_NHWC
           : o->act_store == TRN_ACT_BF16_NCHW ? KERN_AUG_BF16_S2D_NCHW
                                               : -ENOTSUP;
}

int trn_net_set_s2d_input(struct trn_net *net, bool on)
{
    if (!net) return -EINVAL;
    void *slot;
    const struct trn_net_slot *t = &net->ex[1];
    if (on && (!t->x->s2d_slot || t->x->s2d_slot(net, t->self, &slot) < 0)) return -ENOTSUP;
    net->s2d_in = on;
    return 0;
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
    if (dir == KERN_COPY_H2D) net_lowp_stale(net);
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
    const float *anchors =
        (net->gpu ? net->d_buf : (const float *)trn_model_arena(net->m, TRN_ARENA_BUFFER)) +
        net->anchors;
    const struct trn_net_slot *x = &net->ex[0];
    /* the decode reads the Detect convs' raw outputs: no head */
    net->no_head = true;
    const int frc = forward(net, images, false, false, NULL);
    net->no_head = false;
    TRY(frc);
    TRY(x->x->decode(net, x->self, anchors));
    if (net->gpu)
        TRY(kern_mem_copy(net->ctx, net->h_dec, net->dec, net->n_dec * sizeof(float),
                          KERN_COPY_D2H));
    *out = net->gpu ? net->h_dec : net->dec;
    if (rows) *rows = net->dec_rows;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* --- wcast --- AMP weights                                                                */

/* Every cast of the parameters of net's owner is stale: its own, and its executors' and net's. */
void net_lowp_stale(struct trn_net *net)
{
    struct trn_net *const nets[2] = { net->pown, net };
    nets[0]->w16_ok = false;
    for (int i = 0; i < (net->pown == net ? 1 : 2); i++)
        for (int k = 0; k < 2; k++)
            if (nets[i]->ex[k].x && nets[i]->ex[k].x->params_changed)
                nets[i]->ex[k].x->params_changed(nets[i]->ex[k].self);
}

int trn_net_params_changed(struct trn_net *net)
{
    if (!net) return -EINVAL;
    net_lowp_stale(net);
    net->up_ok = false;
    return 0;
}

/* The training executor's own copy (struct trn_net_exec.params_lowp) of a net owning its
 * parameters, or NULL. */
static void *exec_lowp(struct trn_net *net, bool handed, const struct kern_lowp_order **order)
{
    const struct trn_net_slot *const t = &net->ex[1];
    if (order) *order = NULL;
    if (!net->lp || net->pown != net || !t->x || !t->x->params_lowp) return NULL;
    return t->x->params_lowp(net, t->self, handed, order);
}

void *trn_net_dev_params_lowp(struct trn_net *net, int *dtype)
{
    if (!net || !net->lp) return NULL;
    void *p = exec_lowp(net, true, NULL);
    if (p) {
        /* the step keeps the executor's copy, so the net's own cast is never current again */
        net->w16_spare = true;
        net->w16_ok = false;
    } else if (net->w16 == net->pown->w16) {
        p = net->w16;
    }
    if (p && dtype) *dtype = net->amp;
    return p;
}

const struct kern_lowp_order *trn_net_params_lowp_order(struct trn_net *net)
{
    const struct kern_lowp_order *order = NULL;
    if (net) exec_lowp(net, false, &order);
    return order;
}

int trn_net_lowp_refresh(struct trn_net *net)
{
    if (!net) return -EINVAL;
    /* a net that does not track its cast recasts at every forward anyway */
    if (!net->lp || !(net->resident || (net->fixed && !net->gpu))) return 0;
    if (net->pown->w16_spare) {
        const struct trn_net_slot *const t = &net->ex[1];
        return t->x && t->x->lowp_refresh ? t->x->lowp_refresh(net, t->self) : 0;
    }
    return net_lowp_weights(net, false);
}

int64_t trn_net_lowp_casts(const struct trn_net *net)
{
    return net ? net->n_casts : 0;
}
