/*
 * The net's insides, shared by net.c (the plan, the arenas, the public API) and the executors
 * that run a forward and a backward on them. Internal to the model module.
 *
 * EXECUTORS. An executor is a way to run the net's layers: the op-table walk (net_walk.c: the
 * rows in order on the kern ops of the net's context, the CPU reference or CUDA) and oneDNN's
 * blocked-layout primitives (net_exec_onednn.c over net_onednn.c). trn_net_create chooses them
 * once, from trn_net_opts (the context's backend, amp, cpu_engine, train): one for eval forwards
 * and one for training forwards, since an executor may cover only one of them (oneDNN's training
 * executor leaves eval forwards to the walk, its inference executor training forwards). Nothing
 * else in the module branches on which one runs: the public calls go through the slots. The
 * third, net_exec_x16.c, keeps a training net's activations in bf16, NHWC (or NCHW for the CPU's
 * bit-for-bit check of the layouts), between layers (trn_net_opts.act_store).
 *
 * An executor reads the net's plan and model and writes its results where the public API reads
 * them: a forward leaves the head in net->head (at head_off[l], (bs, na, ny, nx, no)) unless
 * net->no_head (trn_net_infer's forward, where decode follows) or a raw head is on (raw_p);
 * decode writes net->dec (batch, dec_rows, no); backward ADDS into net->grad (PARAM layout),
 * calls net_row_ready(net, i) for each row when net->grad_ready is set, and writes the input
 * gradient when net->input_grad. All in the net's backend memory.
 */
#ifndef TRN_NET_INTERNAL_H
#define TRN_NET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kern.h"
#include "model.h"
#include "net.h"

struct trn_net;

struct trn_net_exec {
    /*
     * The executor for net (its plan, arenas and options set) and for train (training forwards
     * and backward) or eval forwards; its state in *self (NULL if it needs none). Returns 0,
     * -ENOTSUP where it does not apply (err says why; the choice then keeps the walk unless the
     * options asked for this executor), or another negative code (err says what failed).
     */
    int (*create)(struct trn_net *net, const struct trn_net_opts *o, bool train, void **self,
                  char *err, size_t err_cap);
    /* The forward on images (backend memory when images_dev, else host memory). */
    int (*forward)(struct trn_net *net, void *self, const void *images, bool images_dev,
                   bool train);
    /* After an eval forward: the head into net->head. NULL: the forward wrote it. */
    int (*head)(struct trn_net *net, void *self);
    /* After an eval forward with net->no_head: the decoded boxes into net->dec; anchors: the
     * buffer arena's anchors in backend memory. */
    int (*decode)(struct trn_net *net, void *self, const float *anchors);
    /* The backward of the last training forward from dout[l] (backend memory). */
    int (*backward)(struct trn_net *net, void *self, const float *const *dout);
    /* trn_net_raw_head: turns the raw head on or off, filling net->raw_p and raw_dp; returns the
     * channel block (0: off). NULL: this executor always writes the head. */
    int (*raw_head)(struct trn_net *net, void *self, bool on);
    /* The model's parameters changed (trn_net_params_changed). NULL: nothing kept. */
    void (*params_changed)(void *self);
    /* A training executor with its own 16-bit copy of the parameters: that copy for
     * trn_net_dev_params_lowp (handed: from now on a step rewrites it, so the executor may trust
     * it as net.h AMP WEIGHTS says), and its order per tensor in *order (one struct
     * kern_lowp_order a tensor, trn_net_params_lowp_order; NULL: the PARAM order). NULL hook or
     * result: the net's cast. */
    void *(*params_lowp)(struct trn_net *net, void *self, bool handed,
                         const struct kern_lowp_order **order);
    /* trn_net_lowp_refresh for that copy: cast it now if stale. */
    int (*lowp_refresh)(struct trn_net *net, void *self);
    /* THE STEM'S INPUT (net.h): a training executor that can take the space-to-depth tensor
     * gives its slot (backend memory) and returns 0, else -ENOTSUP. NULL: never. */
    int (*s2d_slot)(struct trn_net *net, void *self, void **slot);
    /* For trn_net_engine: what runs the net ("reference", "CUDA", "oneDNN nChw8c"). */
    const char *(*name)(const struct trn_net *net, void *self);
    void (*destroy)(void *self);
};

struct trn_net_slot {
    const struct trn_net_exec *x;
    void *self;
};

extern const struct trn_net_exec trn_net_exec_walk;
extern const struct trn_net_exec trn_net_exec_onednn;
extern const struct trn_net_exec trn_net_exec_x16;

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
    bool s2d_in;   /* training forwards take the space-to-depth tensor (THE STEM'S INPUT) */
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
    bool w16_spare;       /* (pown only) a step rewrites the training executor's copy instead
                             (trn_net_dev_params_lowp): w16 is never trusted, always recast */
    bool fixed;           /* trn_net_opts.fixed_params */
    bool up_ok;           /* fixed non-resident device net: d_param / d_buf hold the host model */
    int64_t n_casts;      /* whole-arena casts of the parameters so far (trn_net_lowp_casts) */
    /* the executors (EXECUTORS above), chosen once by trn_net_create: ex[0] runs eval forwards
       and trn_net_infer, ex[1] training forwards and their backward */
    struct trn_net_slot ex[2];
    int raw_blk; /* trn_net_raw_head on: the Detect outputs' channel block; else 0 */
    const float *raw_p[TRN_MODEL_MAX_LEVELS]; /* with raw_blk: the Detect convs' outputs */
    float *raw_dp[TRN_MODEL_MAX_LEVELS];      /* and their gradients' buffers */
    char engine_name[32];                     /* trn_net_engine's answer */
};

#define TRY(x)                           \
    do {                                 \
        const int try_rc_ = (x);         \
        if (try_rc_ < 0) return try_rc_; \
    } while (0)

static inline size_t arena_bytes(const struct trn_net *net, int arena)
{
    return net->I->arena_len[arena] * sizeof(float);
}

static inline float *A(const struct trn_net *net, int a)
{
    return net->act + net->plan.acts[a].offset;
}

static inline float *D(const struct trn_net *net, int a)
{
    return net->dact + net->plan.acts[a].doff;
}

static inline float *P(const struct trn_net *net, int t)
{
    float *p = net->gpu ? net->d_param : (float *)trn_model_arena(net->m, TRN_ARENA_PARAM);
    return p + trn_model_tensor(net->m, t)->offset;
}

static inline float *B(const struct trn_net *net, int t)
{
    float *p = net->gpu ? net->d_buf : (float *)trn_model_arena(net->m, TRN_ARENA_BUFFER);
    return p + trn_model_tensor(net->m, t)->offset;
}

static inline float *G(const struct trn_net *net, int t)
{
    return net->grad + trn_model_tensor(net->m, t)->offset;
}

/* Tensor t of the parameters cast to the AMP dtype (w16, same offsets as the PARAM arena). */
static inline const uint16_t *P16(const struct trn_net *net, int t)
{
    return net->w16 + trn_model_tensor(net->m, t)->offset;
}

/* float32 -> the AMP dtype, n elements (autocast's cast of a conv's operands). */
static inline int to_lowp(const struct trn_net *net, uint16_t *dst, const float *src, size_t n)
{
    return net->amp == KERN_DT_BF16 ? net->K->cast_f32_bf16(net->ctx, dst, src, n)
                                    : net->K->cast_f32_f16(net->ctx, dst, src, n);
}

/* Elements per image of act a, and its n-strides (0: dense; trn_act.nstride, dnstride): a concat
 * input that lives in its concat buffer's channel slice (model.h CONCAT SLICES). */
static inline size_t img_of(const struct trn_net *net, int a)
{
    const struct trn_act *t = &net->plan.acts[a];
    return (size_t)t->c * (size_t)t->h * (size_t)t->w;
}

static inline size_t NS(const struct trn_net *net, int a)
{
    return net->plan.acts[a].nstride;
}

static inline size_t DNS(const struct trn_net *net, int a)
{
    return net->plan.acts[a].dnstride;
}

/* The accum bit for the next gradient written into act a: overwrite first, add afterwards. */
static inline unsigned accum_for(struct trn_net *net, int a)
{
    const unsigned bit = net->has[a] ? KERN_ACCUM_DX : 0u;
    net->has[a] = 1;
    return bit;
}

/* What conv ci hands to the next op: the residual sum, the SiLU output, or the Detect output. */
static inline int conv_out(const struct trn_net *net, int ci)
{
    const struct trn_act_conv *ac = &net->plan.convs[ci];
    return ac->add >= 0 ? ac->add : ac->act >= 0 ? ac->act : ac->conv;
}

/* The act a row reads from row `from` (-1: the image). */
static inline int layer_in(const struct trn_net *net, int from)
{
    return from < 0 ? 0 : net->plan.layers[from].out;
}

/*
 * ROWS (net_rows.c): the network's rows in order, written once for the executors that run them
 * on kern ops, each giving the steps below on its own arenas and ops (self: its state). The row
 * code decides what runs when, and keeps the `has` bookkeeping where no step runs (a gradient
 * that is a concat's slice, a bottleneck input sharing its sum's); the steps write gradients
 * with accum_for. Backward steps are called only where their gradient is there to pass on.
 */
struct net_row_ops {
    int (*conv_fwd)(struct trn_net *net, void *self, int ci, bool train);
    /* act src into channels [c_off, ..) of concat buffer dst (a no-op where src is in place) */
    int (*cat_fwd)(struct trn_net *net, void *self, int dst, int src, int c_off);
    /* SPPF row i's pool j, reading act src, writing plan.layers[i].pool[j] */
    int (*pool_fwd)(struct trn_net *net, void *self, int i, int j, int src);
    int (*up_fwd)(struct trn_net *net, void *self, int in, int out);
    /* Detect level l's head from its conv output act raw, into net->head */
    int (*head_fwd)(struct trn_net *net, void *self, int l, int raw);
    /* conv ci's backward from the gradient at its SiLU output (Detect: its raw output) */
    int (*conv_bwd)(struct trn_net *net, void *self, int ci);
    /* act src's gradient (=|+=) into act dst's */
    int (*pass_bwd)(struct trn_net *net, void *self, int dst, int src);
    /* the gradient of channels [c_off, ..) of buffer cat (=|+=) into act dst's */
    int (*cat_bwd)(struct trn_net *net, void *self, int dst, int cat, int c_off);
    int (*pool_bwd)(struct trn_net *net, void *self, int i, int j, int src);
    int (*up_bwd)(struct trn_net *net, void *self, int in, int out);
    /* Detect level l: the raw output's gradient (overwritten) from dout (head layout) */
    int (*head_bwd)(struct trn_net *net, void *self, int l, int raw, const float *dout);
};

int net_rows_forward(struct trn_net *net, const struct net_row_ops *o, void *self, bool train);
/* Clears `has`, runs the rows in reverse, and tells the gradient-ready hook of each row. */
int net_rows_backward(struct trn_net *net, const struct net_row_ops *o, void *self,
                      const float *const *dout);

/* Row i's parameter gradients are final: tell the gradient-ready hook (net.h GRADIENTS). */
int net_row_ready(struct trn_net *net, int i);

/* The AMP weights of a forward (net.h AMP WEIGHTS), where the walk casts them. */
int net_lowp_weights(struct trn_net *net, bool uploaded);
/* Every cast of the parameters of net's owner is stale (the owner's w16 and the executors'). */
void net_lowp_stale(struct trn_net *net);

/* The conv that reads model m's images as THE STEM (net_exec_x16.c) at h x w: the one conv
 * reading them, 6x6 stride 2 pad 2, on an even-sized input that nothing else reads; or -1. */
int net_stem_conv(const struct trn_model *m, int h, int w);

/* SyncBatchNorm: sums (a c-channel layer's KERN_BN_SUMS_LEN(c), backend memory) summed over the
 * ranks through the hook, which takes host memory (on the device path through h_sums). */
int net_bn_sync(struct trn_net *net, double *sums, int c);

/* What every executor's forward does around its layers: the model's parameters and buffers
 * uploaded where the device copies are stale (*uploaded says so), the images (unless NULL: the
 * executor takes them itself) into the input slot (net->act); at the end the running statistics
 * brought back after a training forward. */
int net_fwd_begin(struct trn_net *net, const void *images, bool images_dev, bool train,
                  bool *uploaded);
int net_fwd_end(struct trn_net *net, bool train);

/* After a backward: the parameter gradients to the host mirror, where no hook took them. */
int net_bwd_end(struct trn_net *net);

#endif
