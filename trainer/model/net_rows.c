/*
 * The network's rows in order (priv/net_internal.h ROWS): what each row type does, and in which
 * order, written once for every executor that runs the rows on kern ops (the walk, net_walk.c,
 * and the bf16 executor, net_exec_x16.c), which differ only in the steps they are given. A new
 * row type, or a change in the order of a C3's or SPPF's parts, is made here, so that the
 * executors cannot drift apart.
 *
 * Forward: the rows in order; a C3 runs its cv1, its bottlenecks, cv2, the concat (the
 * bottleneck branch first, as common.py's C3.forward) and cv3; an SPPF its cv1, three pools each
 * copied into the concat, and cv2; a Detect row each level's conv, then its head unless
 * net->no_head. Backward: the rows in reverse, every consumer of a row having a larger index, so
 * a row's output gradient is complete when the row is reached; the `has` bookkeeping of the
 * gradient arena (priv/net_internal.h accum_for) is shared with the steps.
 */
#include "priv/net_internal.h"

#include <string.h>

/* A bottleneck made of convs cv1, cv1 + 1; with a shortcut cv2's forward adds cv1's input. */
static int bottleneck_fwd(struct trn_net *net, const struct net_row_ops *o, void *self, int cv1,
                          bool train)
{
    TRY(o->conv_fwd(net, self, cv1, train));
    return o->conv_fwd(net, self, cv1 + 1, train);
}

static int row_fwd(struct trn_net *net, const struct net_row_ops *o, void *self, int i, bool train)
{
    const struct trn_layer *L = trn_model_layer(net->m, i);
    const struct trn_act_layer *al = &net->plan.layers[i];
    const int c0 = L->conv0;
    switch (L->type) {
    case TRN_MOD_CONV:
        for (int j = 0; j < L->n; j++)
            TRY(o->conv_fwd(net, self, c0 + j, train));
        break;
    case TRN_MOD_BOTTLENECK:
        for (int j = 0; j < L->n; j++)
            TRY(bottleneck_fwd(net, o, self, c0 + 2 * j, train));
        break;
    case TRN_MOD_C3:
        TRY(o->conv_fwd(net, self, c0, train));
        for (int j = 0; j < L->n; j++)
            TRY(bottleneck_fwd(net, o, self, c0 + 3 + 2 * j, train));
        TRY(o->conv_fwd(net, self, c0 + 1, train));
        /* Bottleneck branch first (common.py C3.forward). */
        TRY(o->cat_fwd(net, self, al->cat,
                       L->n ? conv_out(net, c0 + 4 + 2 * (L->n - 1)) : conv_out(net, c0), 0));
        TRY(o->cat_fwd(net, self, al->cat, conv_out(net, c0 + 1), L->hidden));
        TRY(o->conv_fwd(net, self, c0 + 2, train));
        break;
    case TRN_MOD_SPPF: {
        TRY(o->conv_fwd(net, self, c0, train));
        int src = conv_out(net, c0);
        TRY(o->cat_fwd(net, self, al->cat, src, 0));
        for (int j = 0; j < 3; j++) {
            TRY(o->pool_fwd(net, self, i, j, src));
            src = al->pool[j];
            TRY(o->cat_fwd(net, self, al->cat, src, (j + 1) * L->hidden));
        }
        TRY(o->conv_fwd(net, self, c0 + 1, train));
        break;
    }
    case TRN_MOD_UPSAMPLE:
        TRY(o->up_fwd(net, self, layer_in(net, L->from[0]), al->out));
        break;
    case TRN_MOD_CONCAT: {
        int off = 0;
        for (int j = 0; j < L->n_from; j++) {
            const int src = layer_in(net, L->from[j]);
            TRY(o->cat_fwd(net, self, al->cat, src, off));
            off += net->plan.acts[src].c;
        }
        break;
    }
    case TRN_MOD_DETECT:
        for (int l = 0; l < L->n_conv; l++) {
            TRY(o->conv_fwd(net, self, c0 + l, train));
            if (!net->no_head) TRY(o->head_fwd(net, self, l, net->plan.convs[c0 + l].conv));
        }
        break;
    }
    return 0;
}

int net_rows_forward(struct trn_net *net, const struct net_row_ops *o, void *self, bool train)
{
    for (int i = 0; i < net->I->n_layers; i++)
        TRY(row_fwd(net, o, self, i, train));
    return 0;
}

/*
 * With a shortcut, cv2's backward reads the sum's gradient as its own (the SiLU output is not
 * stored), and the input x gets the sum's gradient plus cv1's: where the plan gives x the sum's
 * gradient storage (nothing else reads x) that is no copy, only x's `has` following the sum's,
 * so that cv1's bwd_data, which runs after cv2's backward has read the sum's gradient, adds into
 * it (or overwrites it when the sum got no gradient); elsewhere the sum's gradient is passed on.
 */
static int bottleneck_bwd(struct trn_net *net, const struct net_row_ops *o, void *self, int cv1)
{
    const struct trn_act_conv *ac = &net->plan.convs[cv1 + 1];
    if (ac->add >= 0) {
        const int x = net->plan.convs[cv1].in;
        if (net->plan.acts[x].doff == net->plan.acts[ac->add].doff)
            net->has[x] = net->has[ac->add];
        else if (net->has[ac->add])
            TRY(o->pass_bwd(net, self, x, ac->add));
    }
    TRY(o->conv_bwd(net, self, cv1 + 1));
    return o->conv_bwd(net, self, cv1);
}

/* Act dst's share of concat buffer cat's gradient: where dst's gradient is the buffer's slice
 * (the plan made sure nothing wrote it earlier), no copy, only `has` following the buffer's. */
static int cat_bwd(struct trn_net *net, const struct net_row_ops *o, void *self, int dst, int cat,
                   int c_off)
{
    const struct trn_act *y = &net->plan.acts[cat], *x = &net->plan.acts[dst];
    if (x->dnstride && x->doff == y->doff + (size_t)c_off * x->h * x->w) {
        net->has[dst] = net->has[cat];
        return 0;
    }
    if (!net->has[cat]) return 0;
    return o->cat_bwd(net, self, dst, cat, c_off);
}

static int row_bwd(struct trn_net *net, const struct net_row_ops *o, void *self, int i,
                   const float *const *dout)
{
    const struct trn_layer *L = trn_model_layer(net->m, i);
    const struct trn_act_layer *al = &net->plan.layers[i];
    const int c0 = L->conv0;
    switch (L->type) {
    case TRN_MOD_CONV:
        for (int j = L->n - 1; j >= 0; j--)
            TRY(o->conv_bwd(net, self, c0 + j));
        break;
    case TRN_MOD_BOTTLENECK:
        for (int j = L->n - 1; j >= 0; j--)
            TRY(bottleneck_bwd(net, o, self, c0 + 2 * j));
        break;
    case TRN_MOD_C3: {
        TRY(o->conv_bwd(net, self, c0 + 2));
        const int y = L->n ? conv_out(net, c0 + 4 + 2 * (L->n - 1)) : conv_out(net, c0);
        TRY(cat_bwd(net, o, self, y, al->cat, 0));
        TRY(cat_bwd(net, o, self, conv_out(net, c0 + 1), al->cat, L->hidden));
        TRY(o->conv_bwd(net, self, c0 + 1));
        for (int j = L->n - 1; j >= 0; j--)
            TRY(bottleneck_bwd(net, o, self, c0 + 3 + 2 * j));
        TRY(o->conv_bwd(net, self, c0));
        break;
    }
    case TRN_MOD_SPPF: {
        TRY(o->conv_bwd(net, self, c0 + 1));
        const int x1 = conv_out(net, c0);
        TRY(cat_bwd(net, o, self, x1, al->cat, 0));
        for (int j = 0; j < 3; j++)
            TRY(cat_bwd(net, o, self, al->pool[j], al->cat, (j + 1) * L->hidden));
        for (int j = 2; j >= 0; j--)
            if (net->has[al->pool[j]]) TRY(o->pool_bwd(net, self, i, j, j ? al->pool[j - 1] : x1));
        TRY(o->conv_bwd(net, self, c0));
        break;
    }
    case TRN_MOD_UPSAMPLE: {
        const int x = layer_in(net, L->from[0]);
        if (net->has[al->out] && (x != 0 || net->input_grad)) TRY(o->up_bwd(net, self, x, al->out));
        break;
    }
    case TRN_MOD_CONCAT: {
        int off = 0;
        for (int j = 0; j < L->n_from; j++) {
            const int src = layer_in(net, L->from[j]);
            if (src != 0 || net->input_grad) TRY(cat_bwd(net, o, self, src, al->cat, off));
            off += net->plan.acts[src].c;
        }
        break;
    }
    case TRN_MOD_DETECT:
        for (int l = L->n_conv - 1; l >= 0; l--) {
            const int raw = net->plan.convs[c0 + l].conv;
            net->has[raw] = 1;
            TRY(o->head_bwd(net, self, l, raw, dout[l]));
            TRY(o->conv_bwd(net, self, c0 + l));
        }
        break;
    }
    return 0;
}

int net_rows_backward(struct trn_net *net, const struct net_row_ops *o, void *self,
                      const float *const *dout)
{
    memset(net->has, 0, (size_t)net->plan.n_acts);
    for (int i = net->I->n_layers - 1; i >= 0; i--) {
        TRY(row_bwd(net, o, self, i, dout));
        if (net->grad_ready) TRY(net_row_ready(net, i));
    }
    return 0;
}
