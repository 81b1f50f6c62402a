/*
 * The bf16 executor (priv/net_internal.h EXECUTORS; net.h ACTIVATIONS): a training net's
 * training forwards and backward with bf16 activations between layers, NHWC or NCHW, on the ops
 * of the net's context (kern_ops_ref() or kern_ops_cuda()): the step PyTorch's channels_last
 * autocast takes, without a cast or a transpose around each conv.
 *
 * STORAGE. Its arenas mirror the plan's (trn_model_plan): act holds plan.total bf16 elements and
 * dact plan.dtotal, and every act keeps its plan offset. In NCHW a concat's channel slice is the
 * plan's own (its offset, its n-stride as the image stride). In NHWC the slice of a buffer of C
 * channels at channel c_off is the buffer's offset + c_off with pixel stride C. The plan's facts
 * (which acts are slices, which gradients share storage, which concat inputs are copied) do not
 * depend on the layout, so the walk's decisions are taken as they are (tested against the plan's
 * offsets, as net_walk.c does); only the addresses differ (struct place). The images come as
 * float32 NCHW in the input slot (net->act, as for the walk) and are cast once into act.
 *
 * WEIGHTS. The convs' parameters in bf16 live in w16 (PARAM offsets, conv weights in the convs'
 * layout: channels last in NHWC where k > 1, the stem's past the PARAM elements (THE STEM): the
 * order `order` gives per tensor, a kern_lowp_order). A forward casts them, unless the copy is
 * known current as net.h AMP WEIGHTS tracks the net's own: once trn_net_dev_params_lowp has handed
 * w16 to the SGD step (which writes it in that order, in its pass: kern_optim_seg.lowp), a resident
 * (or fixed) net casts only after a change it was told of (params_changed) or an upload. An
 * executor whose copy was not handed out (a sharing net's) casts at every forward.
 *
 * THE STEM. Where the network's input feeds one 6x6 stride-2 pad-2 conv and nothing else (every
 * YOLOv5), that conv runs as the 3x3 stride-1 conv of the images' 2x2 space-to-depth, 16
 * channels (kern_tensor.h "The stem as space-to-depth"): cuDNN takes it on tensor cores, where
 * the 3-channel 6x6 conv's weight gradient ran on a legacy engine. The images are cast straight
 * into that layout (in16; act's input slot stays unused), or come in it from the GPU
 * augmentation (net.h THE STEM'S INPUT: in16 is then the input slot). Its weights in bf16, w3_16,
 * are w16's elements past the PARAM ones (128-byte aligned, their pad channels zero): the SGD step
 * writes them rearranged (kern_lowp_order.s2d) as it writes the other convs' weights, and a
 * forward that casts rearranges them then casts (w3). The weight gradient is mapped back from
 * dw3 into the model's (k_out, 3, 6, 6).
 *
 * ORDER. The walk's: both run the rows through net_rows.c with their own steps (the same `has`
 * bookkeeping of the gradient arena: the first gradient written overwrites, later ones add);
 * parameter gradients are added into net->grad in float32 in the model's order
 * (kern_conv2d_lowp.dw_oihw), BN runs in SyncBatchNorm's phases always (kern_bnx), with the hook
 * between the phases where one is set.
 *
 * Training forwards only (create with train false is -ENOTSUP: eval forwards stay the walk's),
 * and no input gradient. The view getters show the float32 arena, which this executor does not
 * write: after its forwards they show what the last walk forward left.
 */
#include "priv/net_internal.h"

#include "loss.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where an act (or its gradient) lives in this executor's arena: the element offset of image 0's
 * first channel, and its stride as kern_bnx takes it (NHWC pixel, NCHW image; 0 dense). */
struct place {
    size_t off, ld;
};

struct x16 {
    int layout;
    uint16_t *act, *dact;          /* plan.total and plan.dtotal elements */
    uint16_t *w16;                 /* the PARAM arena in bf16, conv weights in the layout (WEIGHTS),
                                      then the stem's (THE STEM) */
    struct kern_lowp_order *order; /* per tensor: where and how w16 holds it (WEIGHTS) */
    bool handed, w_ok;             /* w16 handed to the step; its conv weights current (WEIGHTS) */
    bool raw;             /* trn_net_raw_head on: the loss reads and writes the Detect convs'
                             bf16 outputs and gradients in place (no detect16 pass) */
    uint8_t *idx;         /* SPPF pool argmax offsets, three pools a row, dense */
    size_t *idx_off;      /* per row */
    double *sums;         /* one BN layer's KERN_BN_SUMS_LEN(c) (backend memory) */
    int stem;             /* the conv run as space-to-depth (THE STEM), or -1 */
    struct kern_s2d s2d;  /* its input's map, in the layout */
    uint16_t *in16;       /* its input: the images' space-to-depth, bf16 */
    uint16_t *w3_16;      /* its weights (k_out, 16, 3, 3) in bf16, in the convs' layout: w16's
                             elements from its kern_lowp_order.at */
    float *w3, *dw3;      /* its weights rearranged, and their gradient, float32 OIHW */
    struct place *a, *d;  /* per act: its value, its gradient */
    struct kern_ctx *ctx; /* for destroy */
};

static bool is_nhwc(const struct x16 *x)
{
    return x->layout == KERN_LAYOUT_NHWC;
}

/* The place of act a in the value (grad false) or gradient arena: a slice's buffer is the dense
 * act of the same plane whose image-0 range holds the slice's first element. */
static int place_of(const struct trn_act_plan *pl, int a, bool grad, int layout, struct place *out)
{
    const struct trn_act *t = &pl->acts[a];
    const size_t off = grad ? t->doff : t->offset, ns = grad ? t->dnstride : t->nstride;
    if (!ns || layout == KERN_LAYOUT_NCHW) {
        *out = (struct place){ off, ns };
        return 0;
    }
    const size_t hw = (size_t)t->h * (size_t)t->w;
    for (int b = 0; b < pl->n_acts; b++) {
        const struct trn_act *u = &pl->acts[b];
        const size_t uoff = grad ? u->doff : u->offset, uns = grad ? u->dnstride : u->nstride;
        if (uns || u->n != t->n || u->h != t->h || u->w != t->w || (size_t)u->c * hw != ns)
            continue;
        if (off < uoff || off >= uoff + ns) continue;
        *out = (struct place){ uoff + (off - uoff) / hw, (size_t)u->c };
        return 0;
    }
    return -EINVAL;
}

static uint16_t *XA(const struct x16 *x, int a)
{
    return x->act + x->a[a].off;
}

static uint16_t *XD(const struct x16 *x, int a)
{
    return x->dact + x->d[a].off;
}

static const uint16_t *W16(const struct trn_net *net, const struct x16 *x, int t)
{
    return x->w16 + trn_model_tensor(net->m, t)->offset;
}

/* Conv ci's descriptor with its input (or input gradient) at stride x_ld; outputs are dense. The
 * stem's is the 3x3 conv of its space-to-depth input (dense). */
static struct kern_conv2d_lowp conv_desc(const struct trn_net *net, const struct x16 *x, int ci,
                                         size_t x_ld)
{
    struct kern_conv2d c = net->cd[ci];
    c.x_nstride = 0;
    if (ci == x->stem) {
        kern_conv2d_init(&c, c.n, x->s2d.c_out, c.h_in / 2, c.w_in / 2, c.c_out, 3, 1, 1);
        x_ld = 0;
    }
    struct kern_conv2d_lowp d;
    kern_conv2d_lowp_init(&d, &c, KERN_DT_BF16, x->layout);
    d.x_ld = x_ld;
    d.dw_oihw = 1;
    return d;
}

static struct kern_bnx bnx_desc(const struct trn_net *net, const struct x16 *x, int ci)
{
    const struct trn_act *a = &net->plan.acts[net->plan.convs[ci].conv];
    struct kern_bnx d;
    kern_bnx_init(&d, a->n, a->c, a->h * a->w, x->layout);
    return d;
}

/* A map of act a's shape (n, c, h, w) in the layout, dense strides. */
static struct kern_map16 map_desc(const struct trn_net *net, const struct x16 *x, int a)
{
    const struct trn_act *t = &net->plan.acts[a];
    return (struct kern_map16){
        .n = t->n, .c = t->c, .h = t->h, .w = t->w, .layout = x->layout, .dtype = KERN_DT_BF16
    };
}

/* Channels [c_off, ..) of buffer act buf in arena base at place p: the slice's first element
 * and its stride. */
static uint16_t *slice_of(const struct trn_net *net, const struct x16 *x, uint16_t *base,
                          const struct place *p, int buf, int c_off, size_t *ld)
{
    const struct trn_act *t = &net->plan.acts[buf];
    const size_t hw = (size_t)t->h * (size_t)t->w;
    if (is_nhwc(x)) {
        *ld = p->ld ? p->ld : (size_t)t->c;
        return base + p->off + (size_t)c_off;
    }
    *ld = p->ld ? p->ld : (size_t)t->c * hw;
    return base + p->off + (size_t)c_off * hw;
}

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                  */

static int conv_fwd(struct trn_net *net, void *self, int ci, bool train)
{
    (void)train; /* always a training forward (create) */
    struct x16 *const x = self;
    const struct kern_ops *K = net->K;
    const struct trn_conv *c = trn_model_conv(net->m, ci);
    const struct trn_act_conv *ac = &net->plan.convs[ci];
    const struct kern_conv2d_lowp d = conv_desc(net, x, ci, x->a[ac->in].ld);
    const bool stem = ci == x->stem;
    TRY(K->conv2d_lowp_fwd(net->ctx, &d, XA(x, ac->conv), stem ? x->in16 : XA(x, ac->in),
                           stem ? x->w3_16 : W16(net, x, c->weight),
                           c->bias >= 0 ? W16(net, x, c->bias) : NULL));
    if (!c->bn) return 0;
    /* a shortcut bottleneck's cv2 writes silu(bn) + the bottleneck input into the sum */
    const bool sum = ac->add >= 0;
    const int out = sum ? ac->add : ac->act, r = sum ? net->plan.convs[ci - 1].in : -1;
    struct kern_bnx b = bnx_desc(net, x, ci);
    b.y_ld = x->a[out].ld;
    if (sum) b.r_ld = x->a[r].ld;
    float *const mean = net->bn_stat + net->bn_off[ci];
    TRY(K->bnx_stats(net->ctx, &b, x->sums, XA(x, ac->conv)));
    if (net->bn_allreduce) TRY(net_bn_sync(net, x->sums, c->c2));
    TRY(K->bnx_silu_apply(net->ctx, &b, XA(x, out), mean, mean + c->c2, B(net, c->bn_mean),
                          B(net, c->bn_var), XA(x, ac->conv), P(net, c->bn_weight),
                          P(net, c->bn_bias), x->sums, sum ? XA(x, r) : NULL));
    if (!net->no_count) {
        int64_t *cnt = trn_model_arena(net->m, TRN_ARENA_COUNT);
        cnt[trn_model_tensor(net->m, c->bn_count)->offset] += 1;
    }
    return 0;
}

/* Act src into channels [c_off, ..) of act dst, unless its producer wrote it there. */
static int cat_fwd(struct trn_net *net, void *self, int dst, int src, int c_off)
{
    struct x16 *const x = self;
    const struct trn_act *y = &net->plan.acts[dst], *s = &net->plan.acts[src];
    if (s->nstride && s->offset == y->offset + (size_t)c_off * s->h * s->w) return 0;
    struct kern_map16 d = map_desc(net, x, src);
    d.x_ld = x->a[src].ld;
    uint16_t *const at = slice_of(net, x, x->act, &x->a[dst], dst, c_off, &d.y_ld);
    return net->K->copy16(net->ctx, &d, at, XA(x, src), 0);
}

static uint8_t *pool_idx(const struct trn_net *net, const struct x16 *x, int i, int j)
{
    const int p = net->plan.layers[i].pool[j];
    return x->idx + x->idx_off[i] + (size_t)j * net->plan.acts[p].numel;
}

static int pool_fwd(struct trn_net *net, void *self, int i, int j, int src)
{
    struct x16 *const x = self;
    const int p = net->plan.layers[i].pool[j];
    struct kern_map16 d = map_desc(net, x, src);
    d.k = trn_model_layer(net->m, i)->k;
    d.x_ld = x->a[src].ld;
    d.y_ld = x->a[p].ld;
    return net->K->maxpool16_fwd(net->ctx, &d, XA(x, p), pool_idx(net, x, i, j), XA(x, src));
}

static int up_fwd(struct trn_net *net, void *self, int in, int out)
{
    struct x16 *const x = self;
    struct kern_map16 d = map_desc(net, x, in);
    d.x_ld = x->a[in].ld;
    d.y_ld = x->a[out].ld;
    return net->K->upsample16_fwd(net->ctx, &d, XA(x, out), XA(x, in));
}

static int head_fwd(struct trn_net *net, void *self, int l, int raw)
{
    struct x16 *const x = self;
    if (x->raw) return 0; /* read in place (net->raw_p) */
    return net->K->detect16_fwd(net->ctx, &net->det[l], x->layout, net->head + net->head_off[l],
                                XA(x, raw));
}

static const struct net_row_ops x16_rows;

/* Whether w16 may be trusted without a cast (WEIGHTS), as net_lowp_weights decides for the
 * net's own. */
static bool tracked(const struct trn_net *net, const struct x16 *x)
{
    return x->handed && (net->fixed || net->resident);
}

/* The convs' parameters in bf16: each weight once, channels last in NHWC where k > 1 (a 1x1
 * weight is the same in both layouts), and the Detect biases; BN's stay float32. */
static int cast_weights(struct trn_net *net, struct x16 *x)
{
    const struct kern_ops *K = net->K;
    for (int ci = 0; ci < net->I->n_convs; ci++) {
        const struct trn_conv *c = trn_model_conv(net->m, ci);
        const struct trn_tensor *w = trn_model_tensor(net->m, c->weight);
        if (ci == x->stem) continue; /* stem_weights */
        if (x->order[c->weight].c)
            TRY(K->cast_f32_lowp_cl(net->ctx, KERN_DT_BF16, x->w16 + w->offset, P(net, c->weight),
                                    c->c2, c->c1, (size_t)c->k * (size_t)c->k));
        else
            TRY(K->cast_f32_bf16(net->ctx, x->w16 + w->offset, P(net, c->weight), w->numel));
        if (c->bias >= 0)
            TRY(K->cast_f32_bf16(net->ctx, x->w16 + trn_model_tensor(net->m, c->bias)->offset,
                                 P(net, c->bias), trn_model_tensor(net->m, c->bias)->numel));
    }
    return 0;
}

/* The stem's weights rearranged for its 3x3 conv, then cast: two small passes, where a forward
 * casts (the step given w16 writes them in its own pass). */
static int stem_weights(struct trn_net *net, struct x16 *x)
{
    if (x->stem < 0) return 0;
    const struct kern_ops *K = net->K;
    const struct trn_conv *c = trn_model_conv(net->m, x->stem);
    TRY(K->s2d_weight_fwd(net->ctx, &x->s2d, c->c2, x->w3, P(net, c->weight)));
    if (is_nhwc(x))
        return K->cast_f32_lowp_cl(net->ctx, KERN_DT_BF16, x->w3_16, x->w3, c->c2, x->s2d.c_out, 9);
    return K->cast_f32_bf16(net->ctx, x->w3_16, x->w3, (size_t)c->c2 * x->s2d.c_out * 9);
}

/* w16 cast unless it is known current (WEIGHTS): a forward's, and trn_net_lowp_refresh's. */
static int cast_if_stale(struct trn_net *net, struct x16 *x)
{
    if (x->w_ok && tracked(net, x)) return 0;
    TRY(cast_weights(net, x));
    TRY(stem_weights(net, x));
    net->n_casts++;
    x->w_ok = tracked(net, x);
    return 0;
}

/* The weights of a forward: w16 cast unless current. */
static int x16_weights(struct trn_net *net, struct x16 *x, bool uploaded)
{
    if (uploaded) x->w_ok = false;
    return cast_if_stale(net, x);
}

/* Bytes of the stem's input (in16). */
static size_t in16_bytes(const struct x16 *x)
{
    return (size_t)x->s2d.n * x->s2d.c_out * (x->s2d.h / 2) * (x->s2d.w / 2) * sizeof(uint16_t);
}

static int x16_forward(struct trn_net *net, void *self, const void *images, bool images_dev,
                       bool train)
{
    struct x16 *const x = self;
    if (!train) return -EINVAL; /* eval forwards are the walk's (create) */
    bool uploaded;
    /* the space-to-depth tensor goes straight to the stem's input (THE STEM'S INPUT) */
    const bool s2d = net->s2d_in && x->stem >= 0;
    TRY(net_fwd_begin(net, s2d ? NULL : images, images_dev, train, &uploaded));
    TRY(x16_weights(net, x, uploaded));
    const struct trn_act *in = &net->plan.acts[0];
    if (s2d) {
        if (images != x->in16)
            TRY(kern_mem_copy(net->ctx, x->in16, images, in16_bytes(x),
                              images_dev ? KERN_COPY_D2D : KERN_COPY_H2D));
    } else if (x->stem >= 0)
        TRY(net->K->cast_f32_lowp_s2d(net->ctx, &x->s2d, KERN_DT_BF16, x->in16, A(net, 0)));
    else if (is_nhwc(x))
        TRY(net->K->cast_f32_lowp_cl(net->ctx, KERN_DT_BF16, XA(x, 0), A(net, 0), in->n, in->c,
                                     (size_t)in->h * (size_t)in->w));
    else
        TRY(net->K->cast_f32_bf16(net->ctx, XA(x, 0), A(net, 0), in->numel));
    TRY(net_rows_forward(net, &x16_rows, x, train));
    return net_fwd_end(net, train);
}

/* ---------------------------------------------------------------------------------------- */
/* Backward                                                                                 */

/* Backward of conv ci from the gradient at its SiLU output (Detect: its raw output). */
static int conv_bwd(struct trn_net *net, void *self, int ci)
{
    struct x16 *const x = self;
    const struct kern_ops *K = net->K;
    const struct trn_conv *c = trn_model_conv(net->m, ci);
    const struct trn_act_conv *ac = &net->plan.convs[ci];
    /* a shortcut bottleneck cv2's SiLU-output gradient is its sum's (net_walk.c conv_bwd) */
    const int top = !c->bn ? ac->conv : ac->act >= 0 ? ac->act : ac->add;
    if (!net->has[top]) return 0; /* nothing downstream used it: zero gradient */
    if (c->bn) {
        struct kern_bnx b = bnx_desc(net, x, ci);
        b.y_ld = x->d[top].ld;
        const float *mean = net->bn_stat + net->bn_off[ci];
        net->has[ac->conv] = 1;
        TRY(K->bnx_silu_bwd_reduce(net->ctx, &b, x->sums, G(net, c->bn_weight), G(net, c->bn_bias),
                                   XD(x, top), XA(x, ac->conv), P(net, c->bn_weight),
                                   P(net, c->bn_bias), mean, mean + c->c2, KERN_ACCUM_DPARAM));
        if (net->bn_allreduce) TRY(net_bn_sync(net, x->sums, c->c2));
        TRY(K->bnx_silu_bwd_apply(net->ctx, &b, XD(x, ac->conv), XD(x, top), XA(x, ac->conv),
                                  P(net, c->bn_weight), P(net, c->bn_bias), mean, mean + c->c2,
                                  x->sums, 0));
    }
    const struct kern_conv2d_lowp d = conv_desc(net, x, ci, x->a[ac->in].ld);
    if (!c->bn && c->bias >= 0)
        TRY(K->conv2d_lowp_bwd_bias(net->ctx, &d, G(net, c->bias), XD(x, ac->conv),
                                    KERN_ACCUM_DPARAM));
    if (ci == x->stem) {
        TRY(K->conv2d_lowp_bwd_filter(net->ctx, &d, x->dw3, XD(x, ac->conv), x->in16, 0));
        TRY(K->s2d_weight_bwd(net->ctx, &x->s2d, c->c2, G(net, c->weight), x->dw3,
                              KERN_ACCUM_DPARAM));
    } else {
        TRY(K->conv2d_lowp_bwd_filter(net->ctx, &d, G(net, c->weight), XD(x, ac->conv),
                                      XA(x, ac->in), KERN_ACCUM_DPARAM));
    }
    if (ac->in == 0) return 0; /* no input gradient (create) */
    const struct kern_conv2d_lowp dd = conv_desc(net, x, ci, x->d[ac->in].ld);
    return K->conv2d_lowp_bwd_data(net->ctx, &dd, XD(x, ac->in), XD(x, ac->conv),
                                   W16(net, x, c->weight), accum_for(net, ac->in));
}

/* Hand act src's gradient on to act dst (=|+=). */
static int pass_bwd(struct trn_net *net, void *self, int dst, int src)
{
    struct x16 *const x = self;
    struct kern_map16 d = map_desc(net, x, src);
    d.x_ld = x->d[src].ld;
    d.y_ld = x->d[dst].ld;
    return net->K->copy16(net->ctx, &d, XD(x, dst), XD(x, src), accum_for(net, dst));
}

static int cat_bwd(struct trn_net *net, void *self, int dst, int cat, int c_off)
{
    struct x16 *const x = self;
    struct kern_map16 d = map_desc(net, x, dst);
    d.y_ld = x->d[dst].ld;
    const uint16_t *const at = slice_of(net, x, x->dact, &x->d[cat], cat, c_off, &d.x_ld);
    return net->K->copy16(net->ctx, &d, XD(x, dst), at, accum_for(net, dst));
}

static int pool_bwd(struct trn_net *net, void *self, int i, int j, int src)
{
    struct x16 *const x = self;
    const int p = net->plan.layers[i].pool[j];
    struct kern_map16 d = map_desc(net, x, src);
    d.k = trn_model_layer(net->m, i)->k;
    d.x_ld = x->d[src].ld;
    d.y_ld = x->d[p].ld;
    return net->K->maxpool16_bwd(net->ctx, &d, XD(x, src), XD(x, p), pool_idx(net, x, i, j),
                                 accum_for(net, src));
}

static int up_bwd(struct trn_net *net, void *self, int in, int out)
{
    struct x16 *const x = self;
    struct kern_map16 d = map_desc(net, x, in);
    d.x_ld = x->d[in].ld;
    d.y_ld = x->d[out].ld;
    return net->K->upsample16_bwd(net->ctx, &d, XD(x, in), XD(x, out), accum_for(net, in));
}

static int head_bwd(struct trn_net *net, void *self, int l, int raw, const float *dout)
{
    struct x16 *const x = self;
    if (x->raw) return 0; /* the loss wrote it there (x16_backward checked) */
    return net->K->detect16_bwd(net->ctx, &net->det[l], x->layout, XD(x, raw), dout);
}

static const struct net_row_ops x16_rows = {
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

static int x16_backward(struct trn_net *net, void *self, const float *const *dout)
{
    const struct x16 *const x = self;
    for (int l = 0; x->raw && l < net->I->nl; l++)
        if (dout[l] != net->raw_dp[l]) return -EINVAL; /* the raw head's own buffers only */
    TRY(net_rows_backward(net, &x16_rows, self, dout));
    return net_bwd_end(net);
}

/* ---------------------------------------------------------------------------------------- */
/* Creation                                                                                 */

static void x16_destroy(void *self)
{
    struct x16 *const x = self;
    if (!x) return;
    void *const t[] = { x->act, x->dact, x->w16, x->idx, x->sums, x->in16, x->w3, x->dw3 };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        kern_mem_free(x->ctx, t[k]);
    free(x->idx_off);
    free(x->order);
    free(x->a);
    free(x->d);
    free(x);
}

static int x16_alloc(struct x16 *x, size_t bytes, void **out)
{
    return kern_mem_alloc(x->ctx, bytes ? bytes : 1, out);
}

/* The workspace of conv ci's passes with its input and input gradient at their places. */
static int conv_ws(struct trn_net *net, const struct x16 *x, int ci, size_t *ws)
{
    const int in = net->plan.convs[ci].in;
    const size_t lds[2] = { x->a[in].ld, x->d[in].ld };
    for (int k = 0; k < 2; k++) {
        const struct kern_conv2d_lowp d = conv_desc(net, x, ci, lds[k]);
        size_t b = 0;
        TRY(net->K->conv2d_lowp_workspace_size(net->ctx, &d, &b));
        if (b > *ws) *ws = b;
    }
    return 0;
}

int net_stem_conv(const struct trn_model *m, int h, int w)
{
    const struct trn_model_info *I = trn_model_info(m);
    if (I->n_layers < 1 || h % 2 || w % 2) return -1;
    /* only row 0, a Conv, reads the images; of its copies only the first */
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *l = trn_model_layer(m, i);
        for (int j = 0; j < l->n_from; j++)
            if (l->from[j] < 0 && (i > 0 || l->type != TRN_MOD_CONV)) return -1;
    }
    const int ci = trn_model_layer(m, 0)->conv0;
    const struct trn_conv *c = trn_model_conv(m, ci);
    return c->k == 6 && c->s == 2 && c->p == 2 ? ci : -1;
}

/* The conv to run as space-to-depth (THE STEM), or -1, and its input's map. */
static int find_stem(const struct trn_net *net, struct kern_s2d *s2d)
{
    const struct trn_act *in = &net->plan.acts[0];
    const int stem = net_stem_conv(net->m, in->h, in->w);
    if (stem < 0) return -1;
    const struct kern_conv2d *d = &net->cd[stem];
    *s2d = (struct kern_s2d){ d->n, d->c_in, d->h_in, d->w_in, 16, 0 };
    /* 16 channels for RGB (tensor cores take multiples of 8); more input channels round up */
    if (4 * d->c_in > 16) s2d->c_out = (4 * d->c_in + 7) / 8 * 8;
    return stem;
}

static int x16_create(struct trn_net *net, const struct trn_net_opts *o, bool train, void **self,
                      char *err, size_t err_cap)
{
    *self = NULL;
    if (!train) return -ENOTSUP;
    if (o->amp != KERN_DT_BF16 || o->input_grad || !net->dact) {
        if (err && err_cap)
            snprintf(err, err_cap,
                     "bf16 activations (trn_net_opts.act_store) need amp bf16 and a training net "
                     "without an input gradient");
        return -EINVAL;
    }
    struct x16 *x = calloc(1, sizeof *x);
    if (!x) return -ENOMEM;
    const struct trn_act_plan *pl = &net->plan;
    x->ctx = net->ctx;
    x->layout = o->act_store == TRN_ACT_BF16_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
    x->stem = find_stem(net, &x->s2d);
    x->s2d.layout = x->layout;
    x->a = calloc((size_t)pl->n_acts, sizeof *x->a);
    x->d = calloc((size_t)pl->n_acts, sizeof *x->d);
    x->idx_off = calloc((size_t)net->I->n_layers + 1, sizeof *x->idx_off);
    x->order = calloc((size_t)net->I->n_tensors + 1, sizeof *x->order);
    int rc = -ENOMEM;
    if (!x->a || !x->d || !x->idx_off || !x->order) goto fail;
    for (int ci = 0; ci < net->I->n_convs && is_nhwc(x); ci++) {
        const struct trn_conv *c = trn_model_conv(net->m, ci);
        if (ci == x->stem || c->k == 1) continue; /* a 1x1 weight is the same in both layouts */
        x->order[c->weight] = (struct kern_lowp_order){ .c = c->c1, .hw = c->k * c->k };
    }
    /* the stem's copy past the PARAM elements, on a 128-byte boundary as the convs' weights */
    const size_t stem_at = (net->I->arena_len[TRN_ARENA_PARAM] + 63) / 64 * 64;
    size_t n3 = 0, w16_len = net->I->arena_len[TRN_ARENA_PARAM];
    if (x->stem >= 0) {
        const struct trn_conv *c = trn_model_conv(net->m, x->stem);
        n3 = (size_t)c->c2 * x->s2d.c_out * 9;
        w16_len = stem_at + n3;
        x->order[c->weight] = (struct kern_lowp_order){
            .c = c->c1, .hw = is_nhwc(x) ? 9 : 0, .s2d = x->s2d.c_out, .at = stem_at
        };
    }
    for (int a = 0; a < pl->n_acts; a++) {
        if (place_of(pl, a, false, x->layout, &x->a[a]) < 0 ||
            place_of(pl, a, true, x->layout, &x->d[a]) < 0) {
            if (err && err_cap)
                snprintf(err, err_cap, "bf16 activations: no concat buffer holds the slice %s",
                         pl->acts[a].name);
            rc = -EINVAL;
            goto fail;
        }
    }
    size_t n_idx = 0;
    int c_max = 1;
    for (int i = 0; i < net->I->n_layers; i++) {
        x->idx_off[i] = n_idx;
        if (trn_model_layer(net->m, i)->type == TRN_MOD_SPPF)
            n_idx += 3 * pl->acts[pl->layers[i].pool[0]].numel;
    }
    size_t ws = 0;
    for (int ci = 0; ci < net->I->n_convs; ci++) {
        const struct trn_conv *c = trn_model_conv(net->m, ci);
        if (c->c2 > c_max) c_max = c->c2;
        if ((rc = conv_ws(net, x, ci, &ws)) < 0) goto fail;
    }
    if ((rc = kern_ctx_reserve(net->ctx, ws)) < 0) goto fail;
    if ((rc = x16_alloc(x, pl->total * 2, (void **)&x->act)) < 0 ||
        (rc = x16_alloc(x, pl->dtotal * 2, (void **)&x->dact)) < 0 ||
        (rc = x16_alloc(x, w16_len * 2, (void **)&x->w16)) < 0 ||
        (rc = x16_alloc(x, n_idx, (void **)&x->idx)) < 0 ||
        (rc = x16_alloc(x, KERN_BN_SUMS_LEN(c_max) * sizeof(double), (void **)&x->sums)) < 0)
        goto fail;
    if (x->stem >= 0) {
        x->w3_16 = x->w16 + stem_at;
        if ((rc = x16_alloc(x, in16_bytes(x), (void **)&x->in16)) < 0 ||
            (rc = x16_alloc(x, n3 * 4, (void **)&x->w3)) < 0 ||
            (rc = x16_alloc(x, n3 * 4, (void **)&x->dw3)) < 0)
            goto fail;
    }
    *self = x;
    return 0;
fail:
    if (err && err_cap && !err[0])
        snprintf(err, err_cap, "bf16 activations: %s", rc == -ENOMEM ? "out of memory" : "setup");
    x16_destroy(x);
    return rc;
}

static void x16_params_changed(void *self)
{
    ((struct x16 *)self)->w_ok = false;
}

static void *x16_params_lowp(struct trn_net *net, void *self, bool handed,
                             const struct kern_lowp_order **order)
{
    (void)net;
    struct x16 *const x = self;
    if (handed) x->handed = true;
    if (order) *order = is_nhwc(x) || x->stem >= 0 ? x->order : NULL;
    return x->w16;
}

static int x16_lowp_refresh(struct trn_net *net, void *self)
{
    return cast_if_stale(net, self);
}

/* trn_net_raw_head: the Detect convs' outputs and gradients where this executor keeps them. */
static int x16_raw_head(struct trn_net *net, void *self, bool on)
{
    struct x16 *const x = self;
    x->raw = on;
    if (!on) return 0;
    const int c0 = trn_model_layer(net->m, net->I->detect)->conv0;
    for (int l = 0; l < net->I->nl; l++) {
        const int raw = net->plan.convs[c0 + l].conv;
        net->raw_p[l] = (const float *)(const void *)XA(x, raw);
        net->raw_dp[l] = (float *)(void *)XD(x, raw);
    }
    return is_nhwc(x) ? TRN_LOSS_HEAD_BF16_NHWC : TRN_LOSS_HEAD_BF16_NCHW;
}

/* THE STEM'S INPUT: the 3-channel stem's 16-channel input, the tensor kern_augment.h writes. */
static int x16_s2d_slot(struct trn_net *net, void *self, void **slot)
{
    (void)net;
    struct x16 *const x = self;
    if (x->stem < 0 || x->s2d.c != 3 || x->s2d.c_out != KERN_AUG_S2D_C) return -ENOTSUP;
    *slot = x->in16;
    return 0;
}

static const char *x16_name(const struct trn_net *net, void *self)
{
    const struct x16 *const x = self;
    const bool cuda = kern_ctx_backend(net->ctx) == KERN_BACKEND_CUDA;
    if (is_nhwc(x)) return cuda ? "CUDA bf16 NHWC" : "reference bf16 NHWC";
    return cuda ? "CUDA bf16 NCHW" : "reference bf16 NCHW";
}

const struct trn_net_exec trn_net_exec_x16 = {
    .create = x16_create,
    .forward = x16_forward,
    .backward = x16_backward,
    .raw_head = x16_raw_head,
    .params_changed = x16_params_changed,
    .params_lowp = x16_params_lowp,
    .lowp_refresh = x16_lowp_refresh,
    .s2d_slot = x16_s2d_slot,
    .name = x16_name,
    .destroy = x16_destroy,
};
