/*
 * The op-table walk: the executor (priv/net_internal.h EXECUTORS) that runs the network's rows
 * (net_rows.c, with the steps below) on the kern ops of the net's context, kern_ops_ref() or
 * kern_ops_cuda(); net.h says what the results are.
 *
 * Tensors are NCHW float32 in the activation arena of trn_model_plan; the activation-gradient
 * arena (plan.dtotal floats) holds the gradient of act a at dact + acts[a].doff, where a
 * bottleneck input and its residual sum may share one (trn_model_plan), and concat inputs may
 * be channel slices of their buffer in either arena (trn_act.nstride, dnstride: every op that
 * touches them is given that n-stride; cat_fwd and the rows' cat backward skip them, by
 * address). The first gradient written into an activation
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
#include "priv/net_internal.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* The AMP dtype -> float32 (exact). */
static int from_lowp(const struct trn_net *net, float *dst, const uint16_t *src, size_t n)
{
    return net->amp == KERN_DT_BF16 ? net->K->cast_bf16_f32(net->ctx, dst, src, n)
                                    : net->K->cast_f16_f32(net->ctx, dst, src, n);
}

static void bn_desc(const struct trn_net *net, int ci, struct kern_bn *d)
{
    const struct trn_act *a = &net->plan.acts[net->plan.convs[ci].conv];
    kern_bn_init(d, a->n, a->c, a->h * a->w);
}

/* Act a cast to the AMP dtype into the dense scratch dst (through its slice when it has one). */
static int act_to_lowp(const struct trn_net *net, uint16_t *dst, int a)
{
    const struct trn_act *t = &net->plan.acts[a];
    if (!t->nstride) return to_lowp(net, dst, A(net, a), t->numel);
    return net->K->cast_f32_lowp_ns(net->ctx, net->amp, dst, A(net, a), t->n, img_of(net, a),
                                    t->nstride);
}

static int conv_fwd(struct trn_net *net, void *self, int ci, bool train)
{
    (void)self;
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
            TRY(net_bn_sync(net, net->bn_sums, c->c2));
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

/* Copy act src into channels [c_off, ..) of act dst. */
static int cat_fwd(struct trn_net *net, void *self, int dst, int src, int c_off)
{
    (void)self;
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

static int pool_fwd(struct trn_net *net, void *self, int i, int j, int src)
{
    (void)self;
    const int p = net->plan.layers[i].pool[j];
    struct kern_pool2d d;
    pool_desc(net, i, &d);
    d.x_nstride = NS(net, src);
    d.y_nstride = NS(net, p);
    return net->K->maxpool2d_fwd(
        net->ctx, &d, A(net, p),
        net->pool_idx + net->pool_off[i] + (size_t)j * net->plan.acts[p].numel, A(net, src));
}

static int up_fwd(struct trn_net *net, void *self, int in, int out)
{
    (void)self;
    const struct trn_act *a = &net->plan.acts[in];
    return net->K->upsample2x_ns_fwd(net->ctx, A(net, out), A(net, in), a->n, a->c, a->h, a->w,
                                     NS(net, out), NS(net, in));
}

static int head_fwd(struct trn_net *net, void *self, int l, int raw)
{
    (void)self;
    return net->K->detect_reshape_fwd(net->ctx, &net->det[l], net->head + net->head_off[l],
                                      A(net, raw));
}

static const struct net_row_ops walk_rows;

static int walk_forward(struct trn_net *net, void *self, const void *images, bool images_dev,
                        bool train)
{
    (void)self;
    bool upload;
    TRY(net_fwd_begin(net, images, images_dev, train, &upload));
    if (net->lp) TRY(net_lowp_weights(net, upload));
    TRY(net_rows_forward(net, &walk_rows, self, train));
    return net_fwd_end(net, train);
}

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
static int conv_bwd(struct trn_net *net, void *self, int ci)
{
    (void)self;
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
            TRY(net_bn_sync(net, net->bn_sums, c->c2));
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
static int pass_bwd(struct trn_net *net, void *self, int dst, int src)
{
    (void)self;
    return net->K->add_bwd(net->ctx, D(net, dst), D(net, src), net->plan.acts[src].numel,
                           accum_for(net, dst));
}

static int cat_bwd(struct trn_net *net, void *self, int dst, int cat, int c_off)
{
    (void)self;
    const struct trn_act *y = &net->plan.acts[cat], *x = &net->plan.acts[dst];
    return net->K->concat_bwd(net->ctx, D(net, dst), D(net, cat), x->n, x->c, x->h * x->w, y->c,
                              c_off, accum_for(net, dst));
}

static int pool_bwd(struct trn_net *net, void *self, int i, int j, int src)
{
    (void)self;
    const int p = net->plan.layers[i].pool[j];
    struct kern_pool2d d;
    pool_desc(net, i, &d);
    d.x_nstride = DNS(net, src);
    d.y_nstride = DNS(net, p);
    return net->K->maxpool2d_bwd(net->ctx, &d, D(net, src), D(net, p),
                                 net->pool_idx + net->pool_off[i] +
                                     (size_t)j * net->plan.acts[p].numel,
                                 accum_for(net, src));
}

static int up_bwd(struct trn_net *net, void *self, int in, int out)
{
    (void)self;
    const struct trn_act *a = &net->plan.acts[in];
    return net->K->upsample2x_ns_bwd(net->ctx, D(net, in), D(net, out), a->n, a->c, a->h, a->w,
                                     DNS(net, in), DNS(net, out), accum_for(net, in));
}

static int head_bwd(struct trn_net *net, void *self, int l, int raw, const float *dout)
{
    (void)self;
    return net->K->detect_reshape_bwd(net->ctx, &net->det[l], D(net, raw), dout, 0);
}

static const struct net_row_ops walk_rows = {
    .conv_fwd = conv_fwd,
    .cat_fwd = cat_fwd,
    .pool_fwd = pool_fwd,
    .up_fwd = up_fwd,
    .head_fwd = head_fwd,
    .conv_bwd = conv_bwd,
    .pass_bwd = pass_bwd,
    .cat_bwd = cat_bwd,
    .pool_bwd = pool_bwd,
    .up_bwd = up_bwd,
    .head_bwd = head_bwd,
};

static int walk_backward(struct trn_net *net, void *self, const float *const *dout)
{
    TRY(net_rows_backward(net, &walk_rows, self, dout));
    if (net->input_grad && !net->has[0])
        TRY(kern_mem_zero(net->ctx, D(net, 0), net->plan.acts[0].numel * sizeof(float)));
    return net_bwd_end(net);
}

/* Each image's rows of all levels contiguous, as torch.cat makes them. */
static int walk_decode(struct trn_net *net, void *self, const float *anchors)
{
    (void)self;
    const struct trn_model_info *I = net->I;
    const struct trn_layer *Ld = trn_model_layer(net->m, I->detect);
    const size_t no = (size_t)I->no;
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
    return 0;
}

static int walk_create(struct trn_net *net, const struct trn_net_opts *o, bool train, void **self,
                       char *err, size_t err_cap)
{
    (void)net, (void)o, (void)train, (void)err, (void)err_cap;
    *self = NULL; /* the net's plan and arenas are its state */
    return 0;
}

static const char *walk_name(const struct trn_net *net, void *self)
{
    (void)self;
    return kern_ctx_backend(net->ctx) == KERN_BACKEND_CUDA ? "CUDA" : "reference";
}

static void walk_destroy(void *self)
{
    (void)self;
}

const struct trn_net_exec trn_net_exec_walk = {
    .create = walk_create,
    .forward = walk_forward,
    .decode = walk_decode,
    .backward = walk_backward,
    .name = walk_name,
    .destroy = walk_destroy,
};
