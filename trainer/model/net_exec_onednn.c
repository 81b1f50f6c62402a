/*
 * The oneDNN executor (priv/net_internal.h EXECUTORS) over net_onednn.c's primitives: the CPU
 * inference forward or the CPU training step in oneDNN's blocked layout (priv/net_onednn.h,
 * docs/design.md). A training net runs its training forwards and backward here and its eval
 * forwards on the walk; an inference net the other way round.
 *
 * It applies to CPU nets in float32 whose training forwards need no input gradient; elsewhere
 * create says why and returns -ENOTSUP (so does a build without oneDNN, net_onednn_none.c).
 */
#include "priv/net_internal.h"
#include "priv/net_onednn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct dnn_exec {
    struct trn_dnn *d;
    bool train;    /* a training executor (trn_dnn_train_create) */
    bool loaded;   /* (inference, fixed nets) d holds the current parameters */
    char name[32]; /* "oneDNN" and the activation layout, for trn_net_engine */
};

/* The training executor's row-done hook: the gradient-ready hook of row i. */
static int row_done(void *ctx, int i)
{
    return net_row_ready(ctx, i);
}

static int dnn_create(struct trn_net *net, const struct trn_net_opts *o, bool train, void **self,
                      char *err, size_t err_cap)
{
    const char *why = !trn_dnn_built() ? "this build has no oneDNN"
                      : net->gpu || kern_ctx_backend(net->ctx) != KERN_BACKEND_CPU ? "not a CPU net"
                      : net->amp != KERN_DT_F32                                    ? "autocast"
                      : train && o->input_grad ? "input gradients"
                                               : NULL;
    if (why) {
        if (err && err_cap) snprintf(err, err_cap, "cpu_engine oneDNN: %s", why);
        return -ENOTSUP;
    }
    struct dnn_exec *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    /* as many threads as the reference ops' GEMMs would use: the context's, or OpenBLAS's own
       when the context runs on the caller alone */
    const int ct = kern_ctx_threads(net->ctx);
    int threads = ct > 1 ? ct : kern_blas_threads();
    if (threads < 1) threads = 1;
    /* training: the Detect convs write the head itself, reshaped as the loss reads it */
    float *head[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < net->I->nl; l++)
        head[l] = net->head + net->head_off[l];
    const int rc = train ? trn_dnn_train_create(net->m, &net->plan, threads, net->grad, head, &e->d,
                                                err, err_cap)
                         : trn_dnn_create(net->m, &net->plan, threads, &e->d, err, err_cap);
    if (rc < 0) {
        free(e);
        return rc;
    }
    if (train)
        trn_dnn_train_hooks(e->d, net->bn_allreduce, net->bn_allreduce_ctx,
                            net->grad_ready ? row_done : NULL, net);
    net->mem += trn_dnn_bytes(e->d);
    e->train = train;
    snprintf(e->name, sizeof e->name, "oneDNN %s", trn_dnn_layout(e->d));
    *self = e;
    return 0;
}

/* Images are host memory here (a CPU net): images_dev changes nothing. */
static int dnn_forward(struct trn_net *net, void *self, const void *images, bool images_dev,
                       bool train)
{
    (void)images_dev;
    struct dnn_exec *e = self;
    if (train != e->train) return -EINVAL; /* the choice sends only its own kind here */
    /* writes the head, or leaves it in the Detect convs' outputs (raw head) */
    if (train) return trn_dnn_train_forward(e->d, net->m, images, !net->no_count);
    /* A fixed net folds its weights once, and again after trn_net_params_changed; another at
       every call. */
    if (!net->fixed || !e->loaded) TRY(trn_dnn_load(e->d, net->m));
    e->loaded = true;
    return trn_dnn_run(e->d, images);
}

/* The inference executor keeps the Detect convs' outputs blocked: the head is read from there. */
static int dnn_head(struct trn_net *net, void *self)
{
    struct dnn_exec *e = self;
    float *head[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < net->I->nl; l++)
        head[l] = net->head + net->head_off[l];
    return trn_dnn_head(e->d, net->det, net->I->nl, head);
}

static int dnn_decode(struct trn_net *net, void *self, const float *anchors)
{
    struct dnn_exec *e = self;
    return trn_dnn_decode(e->d, net->det, net->I->nl, anchors, net->dec, (size_t)net->dec_rows);
}

/* The head's gradients are read in their own layout; with the raw head on, they must be the
 * buffers trn_net_raw_dhead handed out. */
static int dnn_backward(struct trn_net *net, void *self, const float *const *dout)
{
    struct dnn_exec *e = self;
    if (net->raw_blk)
        for (int l = 0; l < net->I->nl; l++)
            if (dout[l] != net->raw_dp[l]) return -EINVAL;
    return trn_dnn_train_backward(e->d, dout, net->I->nl);
}

static int dnn_raw_head(struct trn_net *net, void *self, bool on)
{
    struct dnn_exec *e = self;
    const int blk = trn_dnn_train_raw_head(e->d, on);
    if (!on || blk <= 0) return blk < 0 ? blk : 0;
    for (int l = 0; l < net->I->nl; l++) {
        const int rc = trn_dnn_train_raw(e->d, l, &net->raw_p[l], &net->raw_dp[l]);
        if (rc < 0) {
            trn_dnn_train_raw_head(e->d, false);
            return rc;
        }
    }
    return blk;
}

static void dnn_params_changed(void *self)
{
    ((struct dnn_exec *)self)->loaded = false;
}

static const char *dnn_name(const struct trn_net *net, void *self)
{
    (void)net;
    return ((struct dnn_exec *)self)->name;
}

static void dnn_destroy(void *self)
{
    struct dnn_exec *e = self;
    if (!e) return;
    trn_dnn_destroy(e->d);
    free(e);
}

const struct trn_net_exec trn_net_exec_onednn = {
    .create = dnn_create,
    .forward = dnn_forward,
    .head = dnn_head,
    .decode = dnn_decode,
    .backward = dnn_backward,
    .raw_head = dnn_raw_head,
    .params_changed = dnn_params_changed,
    .name = dnn_name,
    .destroy = dnn_destroy,
};
