/*
 * The CPU inference forward and training step on oneDNN (priv/net_onednn.h). The walks over the
 * rows (row, trow) mirror net.c's layer_fwd, so both run the same network; what differs is where
 * activations live (oneDNN's blocked layout, never converted between layers: a reorder around
 * each conv gives back most of the gain, docs/benchmarks.md "bench_onednn_conv") and who
 * computes them. One executor holds its steps in two lists: the forward's, and a training
 * executor's backward, built by walking the forward's nodes in reverse. A step is a oneDNN
 * primitive or a pass of our own over the blocked tensors: concat copies, max pools, upsamples,
 * and in training the BN + SiLU (+ residual) passes (kern_bnblk: oneDNN's BN, eltwise and binary
 * primitives took more passes over memory), the Detect convs' output into the head (unless the
 * loss reads it where it is: trn_dnn_train_raw_head), and the hooks of multi-process training. A
 * training C3's cv1 and cv2, which read the same input, run as one conv of both's channels, each BN
 * over its slice of the output (tc3): one GEMM twice as wide instead of two narrow ones, and one
 * backward data instead of two and their sum.
 *
 * oneDNN 2.6 details that shape it (measured for issue 25; docs/design.md): a
 * residual written as a sum post-op after the swish, a convolution from a blocked source into an
 * NCHW destination, and backward data given the forward's weight layout, all fall to its
 * reference implementation; so the residual is a binary add post-op, the inference Detect convs
 * write blocked and then reorder into the net's NCHW buffer, and backward data gets the weights
 * in the layout it asks for.
 */
#include "priv/net_onednn.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

#include "errors.h"
#include "kern.h"

/* What a step runs: a oneDNN primitive, or one of the executor's own passes. */
enum step_kind {
    STEP_PRIM,
    /* a concatenation of whole channel blocks (cat_blocks), sources args[0 .. nargs - 1),
       destination args[nargs - 1]; with split, the other way: the destination's slices copied
       into the sources, or added where bit i of acc is set */
    STEP_CAT,
    STEP_BN_FWD,  /* the training BN + SiLU (+ residual) of node nd (bn_fwd) */
    STEP_BN_BWD,  /* its backward (bn_bwd) */
    STEP_DET_FWD, /* Detect conv node nd's output into the head, reshaped (det_fwd) */
    STEP_DET_BWD, /* its gradient from the head's (det_bwd) */
    STEP_ROW,     /* the backward is done with row `row`: the gradient-ready hook */
    /* a max pool of our own (pool_run): args[0] its source, args[1] its destination, window k,
       the winners in idx (NULL: inference, none kept); POOL_BWD: args[0] the output's gradient,
       args[1] the input's, added into where acc is 1 */
    STEP_POOL_FWD,
    STEP_POOL_BWD,
    /* a nearest x2 upsample of our own (up_run), as the pools: args[0] the source, args[1] the
       destination; UP_BWD adds into it where acc is 1 */
    STEP_UP_FWD,
    STEP_UP_BWD,
};

struct tnode;

/* A primitive with its arguments, or a pass of the executor's own. */
struct step {
    dnnl_primitive_t p;
    enum step_kind kind;
    int nargs;
    bool split;
    unsigned acc;
    int row;
    struct tnode *nd;
    int k;
    uint8_t *idx;
    dnnl_exec_arg_t args[TRN_MODEL_MAX_FROM + 3];
};

/* One conv's weights: the primitive's copy (its layout), the bias, and the reorder that fills
 * the copy from the folded OIHW staging. */
struct wconv {
    int conv; /* model conv index */
    dnnl_memory_t w, b, user;
    dnnl_primitive_t reorder;
};

struct trn_dnn {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    int threads;
    struct step *steps[2]; /* the forward's; a training executor's backward */
    int n_steps[2], cap_steps[2];
    int phase;           /* which list push() appends to */
    dnnl_memory_t *mems; /* every memory object made, destroyed at the end */
    int n_mems, cap_mems;
    struct wconv *wc;
    int n_wc;
    float *stage; /* folded OIHW weights of one conv */
    dnnl_memory_t input;
    dnnl_memory_t det[TRN_MODEL_MAX_LEVELS]; /* an inference executor's Detect convs' outputs */
    int n_det;
    /* Every primitive takes its scratch from one buffer made once (the user scratchpad mode):
       in oneDNN's own mode the 1x1 convs' scratch was allocated at each run, and clearing
       those fresh pages was 28% of the forward (perf, yolov5n 320 b32). */
    dnnl_primitive_attr_t attr; /* scratchpad user, no post-ops: pools, resampling, reorders */
    size_t scratch;             /* bytes of the largest scratchpad */
    dnnl_memory_t scratch_mem;
    dnnl_format_tag_t tag; /* the activations' layout */
    int blk;               /* its channel block (16 or 8) */
    size_t layout;         /* its index in layouts[] */
    bool ref_conv;         /* a conv got only oneDNN's reference code in this layout */
    const char *tag_name;
    size_t bytes;
    /* training (trn_dnn_train_*): activations with their gradients, the forward's nodes for
       building the backward, and what each step adds into the grad arena */
    struct tt *tt;
    int n_tt, cap_tt;
    struct tnode *nodes;
    int n_nodes;
    dnnl_primitive_attr_t attr_sum; /* user scratchpad and a sum post-op: reorders that add */
    void *tmp;                      /* a gradient that adds goes here first (largest act) */
    size_t tmp_bytes;
    double *sums; /* the BN passes' per-slice sums: two per (image, channel) of the widest */
    size_t n_sums;
    const float *dhead[TRN_MODEL_MAX_LEVELS]; /* the backward's head gradients (per call) */
    bool raw_head; /* the Detect outputs left blocked for the loss (trn_dnn_train_raw_head) */
    int cur_row;   /* the row being built (tnode.row) */
    /* trn_dnn_train_hooks: SyncBatchNorm's all-reduce over gsums, and the row-done hook */
    int (*bn_allreduce)(void *, double *, size_t);
    void *bn_ctx;
    int (*row_done)(void *, int);
    void *row_ctx;
    double *gsums; /* KERN_BN_SUMS_LEN of the widest BN */
    int max_c;
    struct gbuf *gb; /* the backward's gradient buffers (tt_dx) */
    int n_gb, cap_gb;
    struct hblock *hb; /* the host blocks behind them and the activations (host_block) */
    int n_hb, cap_hb;
    bool huge; /* host blocks on huge pages (a training executor) */
    int rc;    /* the first failure while building */
    char *err;
    size_t err_cap;
};

/* A training activation and its gradient (made when the backward first needs it). */
struct tt {
    dnnl_memory_t x, dx;
    bool written;  /* backward build: its gradient has had a first writer */
    int producers; /* nodes that write it (two for C3's concat); its gradient dies after them */
    int gb;        /* dx's buffer in trn_dnn.gb */
};

/* A buffer the backward's gradients live in, one after another: a tensor's gradient lives from
 * its first writer (a consumer's backward) to its producers' backward, so at most a few are
 * alive at once; reusing buffers keeps the backward's working set a few tensors wide, and its
 * memory a few tensors instead of one per activation. */
struct gbuf {
    void *p;
    size_t bytes;
    bool busy;
};

/* A block of host memory the executor made (host_block): mapped when len != 0, else malloc'd. */
struct hblock {
    void *p;
    size_t len;
};

/* One forward node of a training executor, with what its backward needs. */
struct tnode {
    /* 0 Conv (conv, BN, SiLU), 1 Detect conv, 2 concat, 3 max pool, 4 upsample, 5 two model
       convs of one input as one (C3's cv1 and cv2: tc3), their BNs two type-0 nodes (bn_only) */
    int type;
    int conv, conv2; /* model conv (types 0, 1, 5); type 5's second, whose channels follow */
    struct tt *in[TRN_MODEL_MAX_FROM], *out, *c, *res;
    int k;
    dnnl_primitive_desc_t pd; /* the backward's hint; freed after it */
    dnnl_memory_t w, ws;
    uint8_t *idx; /* type 3 on our own pool (pool_step): the forward's winners */
    /* type 0's BN + SiLU (kern_bnblk), its per-channel arrays in bn; bn_only: its conv is a type
       5 node's, c that node's output, this conv's channels x_off floats into an image */
    struct kern_bnblk bp;
    bool bn_only;
    size_t x_off;
    float *wstage;  /* type 5: the two convs' weights, one OIHW tensor (and their gradient) */
    size_t out_off; /* out is a concat this node writes a slice of, from this float of an image */
    bool radd;      /* the residual's gradient is added (else the first: copied) */
    int row;        /* the model row it belongs to */
    double count;   /* type 0: the values its batch statistics covered (all ranks' with SyncBN) */
    /* type 1: its level, shape and output in the head (bs, na, ny, nx, no) */
    int level;
    struct kern_detect det;
    float *head;
    float *bn;
    const float *gamma, *beta; /* the PARAM arena's */
    float *dgamma, *dbeta;     /* the grad arena's (added into) */
};

static int run_steps(struct trn_dnn *d, int ph);

bool trn_dnn_built(void)
{
    return true;
}

/* Records the first failure, naming the call. Returns whether st was a success. */
static bool ok(struct trn_dnn *d, dnnl_status_t st, const char *what)
{
    if (st == dnnl_success) return true;
    if (!d->rc) {
        d->rc = st == dnnl_out_of_memory ? -ENOMEM : -TRN_MODEL_EONEDNN;
        if (d->err && d->err_cap)
            snprintf(d->err, d->err_cap, "oneDNN: %s failed (status %d)", what, (int)st);
    }
    return false;
}

#define DN(d, call) ok((d), (call), #call)

/* The executor's lists grow by doubling: arr (of *cap elements of elem bytes) reallocated, *cap
 * updated; NULL (arr kept, d->rc set) when memory runs out. */
static void *grow(struct trn_dnn *d, void *arr, int *cap, size_t elem)
{
    const int c = *cap ? 2 * *cap : 64;
    void *p = realloc(arr, (size_t)c * elem);
    if (!p) {
        if (!d->rc) d->rc = -ENOMEM;
        return NULL;
    }
    *cap = c;
    return p;
}

static dnnl_memory_t keep(struct trn_dnn *d, dnnl_memory_t m)
{
    if (!m) return NULL;
    if (d->n_mems == d->cap_mems) {
        dnnl_memory_t *p = grow(d, d->mems, &d->cap_mems, sizeof *p);
        if (!p) {
            dnnl_memory_destroy(m);
            return NULL;
        }
        d->mems = p;
    }
    d->mems[d->n_mems++] = m;
    return m;
}

static const dnnl_memory_desc_t *md_of(dnnl_memory_t m)
{
    const dnnl_memory_desc_t *md = NULL;
    dnnl_memory_get_memory_desc(m, &md);
    return md;
}

/*
 * Host memory for activations, gradients and scratch, freed with the executor; smaller blocks
 * than HB_MAP from the heap. A training executor's (d->huge) are mappings of their own on 2 MiB
 * boundaries, asked to be backed by transparent huge pages: the step's passes stream through
 * hundreds of MiB, a TLB miss per 4 KiB page, and on huge pages the yolov5n 320 b16 step ran
 * 2.5% faster (2 threads, Xeon VM). Not an inference executor's: their first touch costs more
 * (that VM cleared 400 MiB of fresh huge pages in 0.6 s more system time than small pages),
 * which a training run pays once and an inference run on each start, for a forward that gained
 * nothing measurable.
 */
#define HB_MAP  ((size_t)1 << 20)
#define HB_HUGE ((size_t)2 << 20)

static void *host_block(struct trn_dnn *d, size_t bytes)
{
    if (d->rc) return NULL;
    if (d->n_hb == d->cap_hb) {
        struct hblock *h = grow(d, d->hb, &d->cap_hb, sizeof *h);
        if (!h) return NULL;
        d->hb = h;
    }
    void *p;
    size_t len = 0;
    if (bytes < HB_MAP) {
        if (!(p = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64))) d->rc = -ENOMEM;
    } else {
        /* over-map by 2 MiB and trim, so that the block starts on a huge page */
        const size_t pg = (size_t)sysconf(_SC_PAGESIZE), over = d->huge ? HB_HUGE : 0;
        len = (bytes + pg - 1) / pg * pg;
        char *m =
            mmap(NULL, len + over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            d->rc = -ENOMEM;
            return NULL;
        }
        const size_t head = over ? (over - (uintptr_t)m % over) % over : 0;
        if (head) munmap(m, head);
        if (over - head) munmap(m + head + len, over - head);
        p = m + head;
#ifdef MADV_HUGEPAGE
        if (d->huge) (void)madvise(p, len, MADV_HUGEPAGE); /* a hint: without THP, plain pages */
#endif
    }
    if (d->rc) return NULL;
    d->hb[d->n_hb++] = (struct hblock){ .p = p, .len = len };
    return p;
}

/* A memory object of md, over a new host block (handle NULL) or over the caller's buffer. */
static dnnl_memory_t mem(struct trn_dnn *d, const dnnl_memory_desc_t *md, void *handle)
{
    dnnl_memory_t m = NULL;
    if (d->rc) return NULL;
    if (!handle) {
        const size_t bytes = dnnl_memory_desc_get_size(md);
        if (!(handle = host_block(d, bytes))) return NULL;
        d->bytes += bytes;
    }
    if (!DN(d, dnnl_memory_create(&m, md, d->eng, handle))) return NULL;
    return keep(d, m);
}

static dnnl_memory_t act(struct trn_dnn *d, dnnl_dim_t n, dnnl_dim_t c, dnnl_dim_t h, dnnl_dim_t w,
                         dnnl_format_tag_t tag, void *handle)
{
    dnnl_memory_desc_t md;
    const dnnl_dims_t dims = { n, c, h, w };
    if (d->rc || !DN(d, dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, tag))) return NULL;
    return mem(d, &md, handle);
}

/* Appends a step of kind k to the current phase's list; takes ownership of pd (destroyed here
 * whatever happens), which only STEP_PRIM has. Returns the step, NULL on failure. */
static struct step *push_kind(struct trn_dnn *d, enum step_kind k, dnnl_primitive_desc_t pd,
                              int nargs, const dnnl_exec_arg_t *args)
{
    struct step *s = NULL;
    const int ph = d->phase;
    if (!d->rc && d->n_steps[ph] == d->cap_steps[ph]) {
        struct step *p = grow(d, d->steps[ph], &d->cap_steps[ph], sizeof *p);
        if (p) d->steps[ph] = p;
    }
    if (!d->rc) {
        s = &d->steps[ph][d->n_steps[ph]];
        memset(s, 0, sizeof *s);
        s->kind = k;
        if (!pd || DN(d, dnnl_primitive_create(&s->p, pd))) {
            s->nargs = nargs;
            if (nargs) memcpy(s->args, args, (size_t)nargs * sizeof *args);
            const dnnl_memory_desc_t *sp =
                pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
            const size_t bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
            if (bytes) { /* the buffer is made once the largest is known (trn_dnn_create) */
                s->args[s->nargs++] = (dnnl_exec_arg_t){ DNNL_ARG_SCRATCHPAD, NULL };
                if (bytes > d->scratch) d->scratch = bytes;
            }
            d->n_steps[ph]++;
        } else {
            s = NULL;
        }
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    return s;
}

/* A oneDNN primitive's step (pd, which it takes), or with pd NULL a cat_blocks step. */
static void push(struct trn_dnn *d, dnnl_primitive_desc_t pd, int nargs,
                 const dnnl_exec_arg_t *args)
{
    push_kind(d, pd ? STEP_PRIM : STEP_CAT, pd, nargs, args);
}

/* A pass of our own over node nd (STEP_BN_*, STEP_DET_*). */
static void push_node(struct trn_dnn *d, enum step_kind k, struct tnode *nd)
{
    struct step *st = push_kind(d, k, NULL, 0, NULL);
    if (st) st->nd = nd;
}

static const struct {
    dnnl_format_tag_t tag;
    const char *name;
    int blk;
} layouts[] = { { dnnl_nChw16c, "nChw16c", 16 }, { dnnl_nChw8c, "nChw8c", 8 } };

/* Whether oneDNN's implementation behind pd is its reference one (correct but tens of times
 * slower than the reference ops: oneDNN 2.6 on nhwc with post-ops, or on a CPU its JIT does not
 * cover). */
static bool is_ref_impl(dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
           !impl || !strncmp(impl, "ref", 3);
}

/* The first blocked layout from layouts[from] on in which a typical 3x3 conv with yolov5's
 * post-ops gets a JIT implementation: nChw16c with AVX-512, nChw8c with AVX2. Not oneDNN's own
 * pick for format_tag_any: on AVX-512 2.6 answers nhwc, where these post-ops run in its
 * reference code (measured: 60x slower). Returns false when none has one. */
static bool pick_layout(struct trn_dnn *d, size_t from)
{
    for (size_t i = from; i < sizeof layouts / sizeof layouts[0]; i++) {
        dnnl_memory_desc_t x, w, y;
        const dnnl_dims_t xd = { 1, 64, 40, 40 }, wd = { 64, 64, 3, 3 };
        const dnnl_dims_t st = { 1, 1 }, pad = { 1, 1 };
        dnnl_convolution_desc_t cd;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_primitive_desc_t pd = NULL;
        if (!dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, layouts[i].tag) &&
            !dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_format_tag_any) &&
            !dnnl_memory_desc_init_by_tag(&y, 4, xd, dnnl_f32, layouts[i].tag) &&
            !dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                dnnl_convolution_direct, &x, &w, NULL, &y, st, pad,
                                                pad) &&
            !dnnl_post_ops_create(&po) &&
            !dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f) &&
            !dnnl_post_ops_append_binary(po, dnnl_binary_add, &y) &&
            !dnnl_primitive_attr_create(&attr) && !dnnl_primitive_attr_set_post_ops(attr, po))
            dnnl_primitive_desc_create(&pd, &cd, attr, d->eng, NULL);
        if (attr) dnnl_primitive_attr_destroy(attr);
        if (po) dnnl_post_ops_destroy(po);
        const bool jit = pd && !is_ref_impl(pd);
        if (pd) dnnl_primitive_desc_destroy(pd);
        if (jit) {
            d->tag = layouts[i].tag;
            d->tag_name = layouts[i].name;
            d->blk = layouts[i].blk;
            d->layout = i;
            return true;
        }
    }
    return false;
}

/*
 * Model conv ci on x: bias, then swish when the conv has BN (Conv = conv + BN + SiLU), then
 * + add when given. The output is blocked (the Detect convs' too: trn_dnn_decode reads them so).
 */
static dnnl_memory_t conv(struct trn_dnn *d, const struct trn_model *m, int ci, dnnl_memory_t x,
                          dnnl_memory_t add)
{
    if (d->rc || !x) return NULL;
    const struct trn_conv *c = trn_model_conv(m, ci);
    const dnnl_memory_desc_t *xd = md_of(x);
    const dnnl_dim_t n = xd->dims[0], h = xd->dims[2], w = xd->dims[3];
    const dnnl_dim_t oh = (h + 2 * c->p - c->k) / c->s + 1, ow = (w + 2 * c->p - c->k) / c->s + 1;
    dnnl_memory_t y = act(d, n, c->c2, oh, ow, d->tag, NULL);
    if (!y) return NULL;
    dnnl_memory_desc_t wd, bd, ud;
    const dnnl_dims_t wdims = { c->c2, c->c1, c->k, c->k }, bdims = { c->c2 };
    const dnnl_dims_t strides = { c->s, c->s }, padl = { c->p, c->p };
    const dnnl_dims_t padr = { (oh - 1) * c->s + c->k - h - c->p,
                               (ow - 1) * c->s + c->k - w - c->p };
    dnnl_convolution_desc_t cd;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (!DN(d, dnnl_memory_desc_init_by_tag(&wd, 4, wdims, dnnl_f32, dnnl_format_tag_any)) ||
        !DN(d, dnnl_memory_desc_init_by_tag(&ud, 4, wdims, dnnl_f32, dnnl_oihw)) ||
        !DN(d, dnnl_memory_desc_init_by_tag(&bd, 1, bdims, dnnl_f32, dnnl_a)) ||
        !DN(d,
            dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                               xd, &wd, &bd, md_of(y), strides, padl, padr)) ||
        !DN(d, dnnl_post_ops_create(&po)))
        return NULL;
    if (c->bn) DN(d, dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f));
    if (add) DN(d, dnnl_post_ops_append_binary(po, dnnl_binary_add, md_of(add)));
    if (DN(d, dnnl_primitive_attr_create(&attr)) &&
        DN(d, dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) &&
        DN(d, dnnl_primitive_attr_set_post_ops(attr, po)))
        DN(d, dnnl_primitive_desc_create(&pd, &cd, attr, d->eng, NULL));
    if (attr) dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(po);
    if (!d->rc && is_ref_impl(pd)) {
        d->rc = -ENOTSUP;
        d->ref_conv = true;
        if (d->err && d->err_cap)
            snprintf(d->err, d->err_cap, "oneDNN has only its reference code for %s here", c->name);
    }
    if (d->rc) {
        if (pd) dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    struct wconv *wc = &d->wc[d->n_wc++];
    wc->conv = ci;
    wc->w = mem(d, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), NULL);
    wc->b = mem(d, &bd, NULL);
    wc->user = mem(d, &ud, d->stage);
    dnnl_primitive_desc_t rpd;
    if (wc->w && wc->user &&
        DN(d, dnnl_reorder_primitive_desc_create(&rpd, &ud, d->eng, md_of(wc->w), d->eng, NULL))) {
        DN(d, dnnl_primitive_create(&wc->reorder, rpd));
        dnnl_primitive_desc_destroy(rpd);
    }
    const dnnl_exec_arg_t a[5] = {
        { DNNL_ARG_SRC, x },
        { DNNL_ARG_WEIGHTS, wc->w },
        { DNNL_ARG_BIAS, wc->b },
        { DNNL_ARG_DST, y },
        { DNNL_ARG_ATTR_MULTIPLE_POST_OP(c->bn ? 1 : 0) | DNNL_ARG_SRC_1, add },
    };
    push(d, pd, add ? 5 : 4, a);
    return y;
}

static dnnl_memory_t concat(struct trn_dnn *d, const dnnl_memory_t *xs, int k)
{
    if (d->rc || k < 1 || k > TRN_MODEL_MAX_FROM) return NULL;
    dnnl_memory_desc_t mds[TRN_MODEL_MAX_FROM];
    dnnl_dim_t c = 0;
    for (int i = 0; i < k; i++) {
        if (!xs[i]) return NULL;
        mds[i] = *md_of(xs[i]);
        c += mds[i].dims[1];
    }
    dnnl_memory_t y = act(d, mds[0].dims[0], c, mds[0].dims[2], mds[0].dims[3], d->tag, NULL);
    if (!y) return NULL;
    dnnl_exec_arg_t a[TRN_MODEL_MAX_FROM + 1];
    for (int i = 0; i < k; i++)
        a[i] = (dnnl_exec_arg_t){ DNNL_ARG_MULTIPLE_SRC + i, xs[i] };
    a[k] = (dnnl_exec_arg_t){ DNNL_ARG_DST, y };
    bool whole = true;
    for (int i = 0; i < k; i++)
        whole = whole && mds[i].dims[1] % d->blk == 0;
    if (whole) { /* see cat_blocks */
        push(d, NULL, k + 1, a);
        return y;
    }
    dnnl_primitive_desc_t pd;
    if (!DN(d, dnnl_concat_primitive_desc_create(&pd, md_of(y), k, 1, mds, d->attr, d->eng)))
        return NULL;
    push(d, pd, k + 1, a);
    return y;
}

/* Whether x is a whole tensor in the activations' layout, not a slice of a wider one. */
static bool dense_blk(const struct trn_dnn *d, const dnnl_memory_desc_t *xd)
{
    dnnl_memory_desc_t dense;
    return xd && xd->ndims == 4 &&
           dnnl_memory_desc_init_by_tag(&dense, 4, xd->dims, dnnl_f32, d->tag) == dnnl_success &&
           dnnl_memory_desc_equal(&dense, xd);
}

/* Whether kern_poolblk runs a k x k stride-1 max pool on x: a dense tensor in the 16-lane
 * layout, a window and rows it takes. oneDNN's pooling took 0.4 ms for each of SPPF's training
 * passes over 0.8 MB (yolov5n 320 b16), ours about half of that on AVX-512, which the 16-lane
 * layout implies; on 8 lanes its plain C is the slower of the two. */
static bool own_pool(const struct trn_dnn *d, dnnl_memory_t x, int k)
{
    const dnnl_memory_desc_t *xd = md_of(x);
    return d->blk == 16 && k >= 1 && k <= KERN_POOLBLK_MAX_K && (k & 1) && dense_blk(d, xd) &&
           xd->dims[3] <= KERN_POOLBLK_MAX_W;
}

/* Whether kern_upblk runs the upsample of x by f: x2 of a dense tensor, in either layout.
 * oneDNN's resampling took 1.6 ms of yolov5n's 320 b16 step (its two passes each way), its
 * backward into a scratch buffer and a binary add where the input has another reader (both
 * neck upsamples' inputs do); ours adds in place, in the reference's order. */
static bool own_up(const struct trn_dnn *d, dnnl_memory_t x, int f)
{
    return f == 2 && dense_blk(d, md_of(x));
}

/* Our pool's step (STEP_POOL_FWD or _BWD) from a to b; idx: the winners, acc: b added into.
 * Also our upsample's (STEP_UP_*, k and idx unused). */
static void pool_step(struct trn_dnn *d, enum step_kind kind, dnnl_memory_t a, dnnl_memory_t b,
                      int k, uint8_t *idx, bool acc)
{
    const dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, a }, { DNNL_ARG_TO, b } };
    struct step *st = push_kind(d, kind, NULL, 2, args);
    if (!st) return;
    st->k = k;
    st->idx = idx;
    st->acc = acc;
}

static dnnl_memory_t maxpool(struct trn_dnn *d, dnnl_memory_t x, int k)
{
    if (d->rc || !x) return NULL;
    const dnnl_memory_desc_t *xd = md_of(x);
    dnnl_memory_t y = act(d, xd->dims[0], xd->dims[1], xd->dims[2], xd->dims[3], d->tag, NULL);
    if (y && own_pool(d, x, k)) {
        pool_step(d, STEP_POOL_FWD, x, y, k, NULL, false);
        return y;
    }
    const dnnl_dims_t s = { 1, 1 }, kk = { k, k }, p = { k / 2, k / 2 };
    dnnl_pooling_desc_t pdesc;
    dnnl_primitive_desc_t pd;
    if (!y ||
        !DN(d, dnnl_pooling_forward_desc_init(&pdesc, dnnl_forward_inference, dnnl_pooling_max, xd,
                                              md_of(y), s, kk, p, p)) ||
        !DN(d, dnnl_primitive_desc_create(&pd, &pdesc, d->attr, d->eng, NULL)))
        return NULL;
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_SRC, x }, { DNNL_ARG_DST, y } };
    push(d, pd, 2, a);
    return y;
}

static dnnl_memory_t upsample(struct trn_dnn *d, dnnl_memory_t x, int f)
{
    if (d->rc || !x) return NULL;
    const dnnl_memory_desc_t *xd = md_of(x);
    dnnl_memory_t y =
        act(d, xd->dims[0], xd->dims[1], f * xd->dims[2], f * xd->dims[3], d->tag, NULL);
    if (y && own_up(d, x, f)) {
        pool_step(d, STEP_UP_FWD, x, y, 0, NULL, false);
        return y;
    }
    dnnl_resampling_desc_t rd;
    dnnl_primitive_desc_t pd;
    if (!y ||
        !DN(d, dnnl_resampling_forward_desc_init(&rd, dnnl_forward_inference,
                                                 dnnl_resampling_nearest, NULL, xd, md_of(y))) ||
        !DN(d, dnnl_primitive_desc_create(&pd, &rd, d->attr, d->eng, NULL)))
        return NULL;
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_SRC, x }, { DNNL_ARG_DST, y } };
    push(d, pd, 2, a);
    return y;
}

/* A bottleneck of convs cv1, cv1 + 1 on x; the residual where the plan has one (net.c). */
static dnnl_memory_t bottleneck(struct trn_dnn *d, const struct trn_model *m,
                                const struct trn_act_plan *pl, int cv1, dnnl_memory_t x)
{
    dnnl_memory_t t = conv(d, m, cv1, x, NULL);
    return conv(d, m, cv1 + 1, t, pl->convs[cv1 + 1].add >= 0 ? x : NULL);
}

/* Row i on its inputs; returns its output (level 0's for Detect, NULL on failure). */
static dnnl_memory_t row(struct trn_dnn *d, const struct trn_model *m,
                         const struct trn_act_plan *pl, int i, const dnnl_memory_t *out)
{
    const struct trn_layer *L = trn_model_layer(m, i);
    const int c0 = L->conv0;
    dnnl_memory_t ins[TRN_MODEL_MAX_FROM];
    for (int j = 0; j < L->n_from; j++)
        ins[j] = L->from[j] < 0 ? d->input : out[L->from[j]];
    dnnl_memory_t x = ins[0];
    switch (L->type) {
    case TRN_MOD_CONV:
        for (int j = 0; j < L->n; j++)
            x = conv(d, m, c0 + j, x, NULL);
        return x;
    case TRN_MOD_BOTTLENECK:
        for (int j = 0; j < L->n; j++)
            x = bottleneck(d, m, pl, c0 + 2 * j, x);
        return x;
    case TRN_MOD_C3: {
        dnnl_memory_t cat[2];
        cat[0] = conv(d, m, c0, x, NULL);
        for (int j = 0; j < L->n; j++)
            cat[0] = bottleneck(d, m, pl, c0 + 3 + 2 * j, cat[0]);
        cat[1] = conv(d, m, c0 + 1, x, NULL);
        return conv(d, m, c0 + 2, concat(d, cat, 2), NULL);
    }
    case TRN_MOD_SPPF: {
        dnnl_memory_t cat[4];
        cat[0] = conv(d, m, c0, x, NULL);
        for (int j = 1; j < 4; j++)
            cat[j] = maxpool(d, cat[j - 1], L->k);
        return conv(d, m, c0 + 1, concat(d, cat, 4), NULL);
    }
    case TRN_MOD_UPSAMPLE:
        return upsample(d, x, L->scale);
    case TRN_MOD_CONCAT:
        return concat(d, ins, L->n_from);
    case TRN_MOD_DETECT: {
        dnnl_memory_t y0 = NULL;
        for (int l = 0; l < L->n_conv; l++) {
            dnnl_memory_t y = conv(d, m, c0 + l, ins[l], NULL);
            if (!l) y0 = y;
            if (y && d->n_det < TRN_MODEL_MAX_LEVELS) d->det[d->n_det++] = y;
        }
        return y0;
    }
    }
    return NULL;
}

/* --- training ------------------------------------------------------------------------------ */

/* The forward primitive descriptors kept as the backward's hints. */
static void free_hints(struct trn_dnn *d)
{
    for (int i = 0; d->nodes && i < d->n_nodes; i++) {
        struct tnode *nd = &d->nodes[i];
        if (nd->pd) {
            dnnl_primitive_desc_destroy(nd->pd);
            nd->pd = NULL;
        }
    }
}

/* What a training executor is built over: the model's arenas the primitives read and write in
 * place, and the net's NCHW Detect buffers. */
struct tspec {
    float *param, *grad;      /* PARAM arena, and the grad arena in its layout (adds into it) */
    const struct trn_act *in; /* the images */
};

static struct tt *tt_new(struct trn_dnn *d, dnnl_dim_t n, dnnl_dim_t c, dnnl_dim_t h, dnnl_dim_t w,
                         dnnl_format_tag_t tag, void *handle)
{
    if (d->rc) return NULL;
    if (d->n_tt == d->cap_tt) { /* sized at build: nodes keep pointers into the array */
        d->rc = -EINVAL;
        return NULL;
    }
    struct tt *t = &d->tt[d->n_tt];
    if (!(t->x = act(d, n, c, h, w, tag, handle))) return NULL;
    d->n_tt++;
    const size_t b = dnnl_memory_desc_get_size(md_of(t->x));
    if (b > d->tmp_bytes) d->tmp_bytes = b;
    return t;
}

/* t's gradient, made at its first writer in the smallest free buffer that fits, or a new one. */
static dnnl_memory_t tt_dx(struct trn_dnn *d, struct tt *t)
{
    if (!t || t->dx || d->rc) return t ? t->dx : NULL;
    const size_t need = dnnl_memory_desc_get_size(md_of(t->x));
    int best = -1;
    for (int i = 0; i < d->n_gb; i++)
        if (!d->gb[i].busy && d->gb[i].bytes >= need &&
            (best < 0 || d->gb[i].bytes < d->gb[best].bytes))
            best = i;
    if (best < 0) {
        if (d->n_gb == d->cap_gb) {
            struct gbuf *g = grow(d, d->gb, &d->cap_gb, sizeof *g);
            if (!g) return NULL;
            d->gb = g;
        }
        const size_t bytes = (need + 63) / 64 * 64;
        void *p = host_block(d, bytes);
        if (!p) return NULL;
        d->gb[d->n_gb] = (struct gbuf){ .p = p, .bytes = bytes };
        d->bytes += bytes;
        best = d->n_gb++;
    }
    d->gb[best].busy = true;
    t->gb = best;
    t->dx = mem(d, md_of(t->x), d->gb[best].p);
    return t->dx;
}

/* One of t's producers has had its backward built: after the last, t's gradient is dead. */
static void tt_produced(struct trn_dnn *d, struct tt *t)
{
    if (t && --t->producers == 0 && t->dx) d->gb[t->gb].busy = false;
}

static struct tnode *tnode_new(struct trn_dnn *d, int type, struct tt *x)
{
    if (d->rc || !x) return NULL;
    struct tnode *nd = &d->nodes[d->n_nodes++];
    nd->type = type;
    nd->row = d->cur_row;
    nd->in[0] = x;
    nd->k = 1;
    return nd;
}

/* A 1-D or OIHW user memory over floats of an arena. */
static dnnl_memory_t user(struct trn_dnn *d, float *at, const dnnl_dim_t *dims, int nd)
{
    dnnl_memory_desc_t md;
    if (d->rc ||
        !DN(d, dnnl_memory_desc_init_by_tag(&md, nd, dims, dnnl_f32, nd == 1 ? dnnl_a : dnnl_oihw)))
        return NULL;
    return mem(d, &md, at);
}

/* Pushes a primitive of pd (checked for oneDNN's reference code when it is a conv) and keeps pd
 * for the backward's hints (the caller frees it). */
static void push_keep(struct trn_dnn *d, dnnl_primitive_desc_t pd, int nargs,
                      const dnnl_exec_arg_t *a, const struct trn_conv *conv)
{
    dnnl_primitive_desc_t c = NULL;
    if (d->rc || !pd) return;
    if (conv && is_ref_impl(pd)) {
        d->rc = -ENOTSUP;
        d->ref_conv = true;
        if (d->err && d->err_cap)
            snprintf(d->err, d->err_cap, "oneDNN has only its reference code for %s here",
                     conv->name);
        return;
    }
    if (DN(d, dnnl_primitive_desc_clone(&c, pd))) push(d, c, nargs, a);
}

/* dst = src in dst's layout, or dst += src with d->attr_sum. */
static void reorder(struct trn_dnn *d, dnnl_memory_t src, dnnl_memory_t dst,
                    dnnl_primitive_attr_t attr)
{
    dnnl_primitive_desc_t pd;
    if (d->rc || !src || !dst ||
        !DN(d,
            dnnl_reorder_primitive_desc_create(&pd, md_of(src), d->eng, md_of(dst), d->eng, attr)))
        return;
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_FROM, src }, { DNNL_ARG_TO, dst } };
    push(d, pd, 2, a);
}

/* dst += src, in place. */
static void add_into(struct trn_dnn *d, dnnl_memory_t dst, dnnl_memory_t src)
{
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    if (d->rc || !dst || !src ||
        !DN(d, dnnl_binary_desc_init(&bd, dnnl_binary_add, md_of(dst), md_of(src), md_of(dst))) ||
        !DN(d, dnnl_primitive_desc_create(&pd, &bd, d->attr, d->eng, NULL)))
        return;
    const dnnl_exec_arg_t a[3] = { { DNNL_ARG_SRC_0, dst },
                                   { DNNL_ARG_SRC_1, src },
                                   { DNNL_ARG_DST, dst } };
    push(d, pd, 3, a);
}

/* The forward conv of node nd on x (train mode), of geometry c, into a new nd->c: its weights
 * reordered at every step from wsrc (OIHW; the optimizer moves them), with bias when c has no BN.
 * Returns whether it was built. */
static bool tconv_prim(struct trn_dnn *d, struct tnode *nd, const struct trn_conv *c, struct tt *x,
                       dnnl_memory_t wsrc, dnnl_memory_t bias)
{
    const dnnl_memory_desc_t *xd = md_of(x->x);
    const dnnl_dim_t n = xd->dims[0], h = xd->dims[2], w = xd->dims[3];
    const dnnl_dim_t oh = (h + 2 * c->p - c->k) / c->s + 1, ow = (w + 2 * c->p - c->k) / c->s + 1;
    if (!(nd->c = tt_new(d, n, c->c2, oh, ow, d->tag, NULL))) return false;
    dnnl_memory_desc_t wd, bd;
    const dnnl_dims_t wdims = { c->c2, c->c1, c->k, c->k }, bdims = { c->c2 };
    const dnnl_dims_t strides = { c->s, c->s }, padl = { c->p, c->p };
    const dnnl_dims_t padr = { (oh - 1) * c->s + c->k - h - c->p,
                               (ow - 1) * c->s + c->k - w - c->p };
    dnnl_convolution_desc_t cd;
    if (!DN(d, dnnl_memory_desc_init_by_tag(&wd, 4, wdims, dnnl_f32, dnnl_format_tag_any)) ||
        !DN(d, dnnl_memory_desc_init_by_tag(&bd, 1, bdims, dnnl_f32, dnnl_a)) ||
        !DN(d, dnnl_convolution_forward_desc_init(
                   &cd, dnnl_forward_training, dnnl_convolution_direct, xd, &wd, c->bn ? NULL : &bd,
                   md_of(nd->c->x), strides, padl, padr)) ||
        !DN(d, dnnl_primitive_desc_create(&nd->pd, &cd, d->attr, d->eng, NULL)))
        return false;
    nd->w = mem(d, dnnl_primitive_desc_query_md(nd->pd, dnnl_query_weights_md, 0), NULL);
    reorder(d, wsrc, nd->w, d->attr);
    const dnnl_exec_arg_t a[4] = { { DNNL_ARG_SRC, x->x },
                                   { DNNL_ARG_WEIGHTS, nd->w },
                                   { DNNL_ARG_DST, nd->c->x },
                                   { DNNL_ARG_BIAS, bias } };
    push_keep(d, nd->pd, c->bn ? 3 : 4, a, c);
    return !d->rc;
}

static struct tt *tbn(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                      struct tnode *nd, struct tt *into, size_t into_off);

/* Conv ci on x (train mode): with BN, conv -> BN (batch statistics) -> swish (+ res, in place);
 * Detect, conv with bias, then into the head at plain, reshaped (det_fwd). */
static struct tt *tconv_into(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                             int ci, struct tt *x, struct tt *res, float *plain, struct tt *into,
                             size_t into_off)
{
    const struct trn_conv *c = trn_model_conv(m, ci);
    struct tnode *nd = tnode_new(d, c->bn ? 0 : 1, x);
    if (!nd) return NULL;
    nd->conv = ci;
    nd->res = res;
    const dnnl_dims_t wdims = { c->c2, c->c1, c->k, c->k }, bdims = { c->c2 };
    dnnl_memory_t bias =
        c->bn ? NULL : user(d, ts->param + trn_model_tensor(m, c->bias)->offset, bdims, 1);
    if (!tconv_prim(d, nd, c, x,
                    user(d, ts->param + trn_model_tensor(m, c->weight)->offset, wdims, 4), bias))
        return NULL;
    if (!c->bn) { /* Detect: straight into the head's layout, no NCHW tensor between */
        const struct trn_model_info *I = trn_model_info(m);
        const dnnl_memory_desc_t *yd = md_of(nd->c->x);
        const dnnl_dim_t n = yd->dims[0], oh = yd->dims[2], ow = yd->dims[3];
        nd->level = ci - trn_model_layer(m, I->detect)->conv0;
        nd->det = (struct kern_detect){
            .bs = (int)n, .na = I->na, .no = I->no, .ny = (int)oh, .nx = (int)ow, .stride = 1
        };
        nd->head = plain;
        if ((size_t)I->na * (size_t)I->no != (size_t)c->c2) {
            d->rc = -EINVAL;
            return NULL;
        }
        push_node(d, STEP_DET_FWD, nd);
        return nd->out = nd->c;
    }
    return tbn(d, ts, m, nd, into, into_off);
}

/* The BN + SiLU (+ residual) of type-0 node nd, whose conv nd->conv wrote nd->c (bp.x_nstride
 * and x_off set when it is a slice of it).
 * BN with batch statistics, SiLU and the residual in one pass of the executor's own (bn_fwd):
 * oneDNN 2.6's BN and eltwise primitives and a binary add were three passes over the
 * activation, and a stored BN output that the backward reads again. With into, the output is a
 * slice of a concat (C3's), written in place: no copy either way. */
static struct tt *tbn(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                      struct tnode *nd, struct tt *into, size_t into_off)
{
    const struct trn_conv *c = trn_model_conv(m, nd->conv);
    if (d->rc || !nd->c) return NULL;
    const dnnl_memory_desc_t *yd = md_of(nd->c->x);
    const dnnl_dim_t n = yd->dims[0], oh = yd->dims[2], ow = yd->dims[3];
    if (into) {
        const dnnl_memory_desc_t *id = md_of(into->x);
        nd->out = into;
        nd->out_off = into_off;
        nd->bp.y_nstride = (size_t)id->dims[1] * (size_t)id->dims[2] * (size_t)id->dims[3];
    } else if (!(nd->out = tt_new(d, n, c->c2, oh, ow, d->tag, NULL))) {
        return NULL;
    }
    struct kern_bnblk *bp = &nd->bp;
    bp->n = (int)n;
    bp->c = c->c2;
    bp->cpad = (c->c2 + d->blk - 1) / d->blk * d->blk;
    bp->blk = d->blk;
    bp->hw = (size_t)oh * (size_t)ow;
    bp->eps = TRN_MODEL_BN_EPS;
    float **const arrays[] = { &bp->mean, &bp->var, &bp->invstd, &bp->gamma, &bp->beta,
                               &bp->a,    &bp->b,   &bp->k,      &bp->m1,    &bp->m2 };
    const size_t na = sizeof arrays / sizeof arrays[0];
    if (!(nd->bn = calloc(na * (size_t)bp->cpad, sizeof(float)))) { /* pad lanes stay 0 */
        d->rc = -ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < na; i++)
        *arrays[i] = nd->bn + i * (size_t)bp->cpad;
    nd->gamma = ts->param + trn_model_tensor(m, c->bn_weight)->offset;
    nd->beta = ts->param + trn_model_tensor(m, c->bn_bias)->offset;
    nd->dgamma = ts->grad + trn_model_tensor(m, c->bn_weight)->offset;
    nd->dbeta = ts->grad + trn_model_tensor(m, c->bn_bias)->offset;
    const size_t sums = 2 * (size_t)n * (size_t)bp->cpad;
    if (sums > d->n_sums) d->n_sums = sums;
    if (c->c2 > d->max_c) d->max_c = c->c2;
    push_node(d, STEP_BN_FWD, nd);
    return nd->out;
}

static struct tt *tconv(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                        int ci, struct tt *x, struct tt *res, float *plain)
{
    return tconv_into(d, ts, m, ci, x, res, plain, NULL, 0);
}

static struct tt *tconcat(struct trn_dnn *d, struct tt *const *xs, int k)
{
    if (d->rc) return NULL;
    dnnl_dim_t c = 0;
    for (int i = 0; i < k; i++) {
        if (!xs[i]) return NULL;
        c += md_of(xs[i]->x)->dims[1];
        if (md_of(xs[i]->x)->dims[1] % d->blk) { /* the block copies need whole blocks */
            d->rc = -ENOTSUP;
            d->ref_conv = true;
            if (d->err && d->err_cap)
                snprintf(d->err, d->err_cap, "a concat input of %d channels",
                         (int)md_of(xs[i]->x)->dims[1]);
            return NULL;
        }
    }
    const dnnl_memory_desc_t *x0 = md_of(xs[0]->x);
    struct tnode *nd = tnode_new(d, 2, xs[0]);
    if (!nd || !(nd->out = tt_new(d, x0->dims[0], c, x0->dims[2], x0->dims[3], d->tag, NULL)))
        return NULL;
    nd->k = k;
    dnnl_exec_arg_t a[TRN_MODEL_MAX_FROM + 1];
    for (int i = 0; i < k; i++) {
        nd->in[i] = xs[i];
        a[i] = (dnnl_exec_arg_t){ DNNL_ARG_MULTIPLE_SRC + i, xs[i]->x };
    }
    a[k] = (dnnl_exec_arg_t){ DNNL_ARG_DST, nd->out->x };
    push(d, NULL, k + 1, a);
    return nd->out;
}

static struct tt *tpool(struct trn_dnn *d, struct tt *x, int k)
{
    struct tnode *nd = tnode_new(d, 3, x);
    if (!nd) return NULL;
    nd->k = k;
    const dnnl_memory_desc_t *xd = md_of(x->x);
    const dnnl_dims_t st = { 1, 1 }, kk = { k, k }, p = { k / 2, k / 2 };
    dnnl_pooling_desc_t pdesc;
    if (!(nd->out = tt_new(d, xd->dims[0], xd->dims[1], xd->dims[2], xd->dims[3], d->tag, NULL)))
        return NULL;
    if (own_pool(d, x->x, k)) { /* one winner a lane: the size of the output in bytes */
        if (!(nd->idx = host_block(d, dnnl_memory_desc_get_size(xd) / sizeof(float)))) return NULL;
        pool_step(d, STEP_POOL_FWD, x->x, nd->out->x, k, nd->idx, false);
        return nd->out;
    }
    if (!DN(d, dnnl_pooling_forward_desc_init(&pdesc, dnnl_forward_training, dnnl_pooling_max, xd,
                                              md_of(nd->out->x), st, kk, p, p)) ||
        !DN(d, dnnl_primitive_desc_create(&nd->pd, &pdesc, d->attr, d->eng, NULL)))
        return NULL;
    nd->ws = mem(d, dnnl_primitive_desc_query_md(nd->pd, dnnl_query_workspace_md, 0), NULL);
    const dnnl_exec_arg_t a[3] = { { DNNL_ARG_SRC, x->x },
                                   { DNNL_ARG_DST, nd->out->x },
                                   { DNNL_ARG_WORKSPACE, nd->ws } };
    push_keep(d, nd->pd, 3, a, NULL);
    return nd->out;
}

static struct tt *tup(struct trn_dnn *d, struct tt *x, int f)
{
    struct tnode *nd = tnode_new(d, 4, x);
    if (!nd) return NULL;
    const dnnl_memory_desc_t *xd = md_of(x->x);
    dnnl_resampling_desc_t rd;
    if (!(nd->out =
              tt_new(d, xd->dims[0], xd->dims[1], f * xd->dims[2], f * xd->dims[3], d->tag, NULL)))
        return NULL;
    if (own_up(d, x->x, f)) { /* no primitive: node_bwd takes ours too */
        pool_step(d, STEP_UP_FWD, x->x, nd->out->x, 0, NULL, false);
        return nd->out;
    }
    if (!DN(d,
            dnnl_resampling_forward_desc_init(&rd, dnnl_forward_training, dnnl_resampling_nearest,
                                              NULL, xd, md_of(nd->out->x))) ||
        !DN(d, dnnl_primitive_desc_create(&nd->pd, &rd, d->attr, d->eng, NULL)))
        return NULL;
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_SRC, x->x }, { DNNL_ARG_DST, nd->out->x } };
    push_keep(d, nd->pd, 2, a, NULL);
    return nd->out;
}

/* A bottleneck (its output into a concat's slice with into, as tconv_into). */
static struct tt *tbottleneck(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                              const struct trn_act_plan *pl, int cv1, struct tt *x, struct tt *into,
                              size_t into_off)
{
    struct tt *t = tconv(d, ts, m, cv1, x, NULL, NULL);
    return tconv_into(d, ts, m, cv1 + 1, t, pl->convs[cv1 + 1].add >= 0 ? x : NULL, NULL, into,
                      into_off);
}

/* The BN + SiLU of conv ci, whose output is the slice of type-5 node mc's from x_off floats into
 * each image (of img floats); into the concat as tbn. */
static struct tt *bn_slice(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                           struct tnode *mc, int ci, size_t x_off, size_t img, struct tt *into,
                           size_t into_off)
{
    struct tnode *nd = tnode_new(d, 0, mc->in[0]);
    if (!nd) return NULL;
    nd->conv = ci;
    nd->bn_only = true;
    nd->c = mc->c;
    nd->x_off = x_off;
    nd->bp.x_nstride = img;
    return tbn(d, ts, m, nd, into, into_off);
}

/* C3 on x: cv1 -> bottlenecks and cv2 write their halves of the concat in place, cv3 reads it.
 * Needs cv1's and cv2's channels in whole blocks (yolov5's all are); otherwise the concat is a
 * copy. With them, cv1 and cv2 run as one conv (node type 5). */
static struct tt *tc3(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                      const struct trn_act_plan *pl, const struct trn_layer *L, struct tt *x)
{
    const int c0 = L->conv0;
    const struct trn_conv *a = trn_model_conv(m, c0), *b = trn_model_conv(m, c0 + 1);
    struct tt *cat[2];
    if (d->rc || !x) return NULL;
    const dnnl_memory_desc_t *xd = md_of(x->x);
    const dnnl_dim_t oh = (xd->dims[2] + 2 * a->p - a->k) / a->s + 1;
    const dnnl_dim_t ow = (xd->dims[3] + 2 * a->p - a->k) / a->s + 1;
    if (a->c2 % d->blk || b->c2 % d->blk || !a->bn || !b->bn || a->k != b->k || a->s != b->s ||
        a->p != b->p) {
        cat[0] = tconv(d, ts, m, c0, x, NULL, NULL);
        for (int j = 0; j < L->n; j++)
            cat[0] = tbottleneck(d, ts, m, pl, c0 + 3 + 2 * j, cat[0], NULL, 0);
        cat[1] = tconv(d, ts, m, c0 + 1, x, NULL, NULL);
        return tconv(d, ts, m, c0 + 2, tconcat(d, cat, 2), NULL, NULL);
    }
    struct tt *both = tt_new(d, xd->dims[0], a->c2 + b->c2, oh, ow, d->tag, NULL);
    const size_t second = (size_t)a->c2 * (size_t)oh * (size_t)ow; /* floats into an image */
    /* cv1 and cv2 as one conv of a->c2 + b->c2 channels (node type 5), its output's two slices
       each a BN of its own: one GEMM of twice the width instead of two narrow ones, and one
       backward data, so no sum of two gradients of x (docs/benchmarks.md "C3's two convs as
       one") */
    struct tnode *mc = tnode_new(d, 5, x);
    if (!mc) return NULL;
    mc->conv = c0;
    mc->conv2 = c0 + 1;
    struct trn_conv g = *a;
    g.c2 = a->c2 + b->c2;
    const size_t per = (size_t)a->c1 * (size_t)a->k * (size_t)a->k;
    if (!(mc->wstage = host_block(d, (size_t)g.c2 * per * sizeof(float)))) return NULL;
    const dnnl_dims_t ad = { a->c2, a->c1, a->k, a->k }, bd = { b->c2, b->c1, b->k, b->k };
    const dnnl_dims_t gd = { g.c2, g.c1, g.k, g.k };
    reorder(d, user(d, ts->param + trn_model_tensor(m, a->weight)->offset, ad, 4),
            user(d, mc->wstage, ad, 4), d->attr);
    reorder(d, user(d, ts->param + trn_model_tensor(m, b->weight)->offset, bd, 4),
            user(d, mc->wstage + (size_t)a->c2 * per, bd, 4), d->attr);
    if (!tconv_prim(d, mc, &g, x, user(d, mc->wstage, gd, 4), NULL)) return NULL;
    mc->out = mc->c;
    /* the BNs in the reference's order (cv1's, the bottlenecks', cv2's): SyncBatchNorm's
       all-reduces pair up by sequence across ranks, whichever engine each runs on */
    const size_t img = (size_t)g.c2 * (size_t)oh * (size_t)ow;
    struct tt *t = bn_slice(d, ts, m, mc, c0, 0, img, L->n ? NULL : both, 0);
    for (int j = 0; j < L->n; j++)
        t = tbottleneck(d, ts, m, pl, c0 + 3 + 2 * j, t, j == L->n - 1 ? both : NULL, 0);
    bn_slice(d, ts, m, mc, c0 + 1, second, img, both, second);
    return tconv(d, ts, m, c0 + 2, both, NULL, NULL);
}

/* Row i in train mode (as row() for inference). */
static struct tt *trow(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                       const struct trn_act_plan *pl, int i, struct tt *const *out, struct tt *in,
                       float *const *det_out)
{
    const struct trn_layer *L = trn_model_layer(m, i);
    const int c0 = L->conv0;
    struct tt *ins[TRN_MODEL_MAX_FROM], *x, *cat[4];
    for (int j = 0; j < L->n_from; j++)
        ins[j] = L->from[j] < 0 ? in : out[L->from[j]];
    x = ins[0];
    switch (L->type) {
    case TRN_MOD_CONV:
        for (int j = 0; j < L->n; j++)
            x = tconv(d, ts, m, c0 + j, x, NULL, NULL);
        return x;
    case TRN_MOD_BOTTLENECK:
        for (int j = 0; j < L->n; j++)
            x = tbottleneck(d, ts, m, pl, c0 + 2 * j, x, NULL, 0);
        return x;
    case TRN_MOD_C3:
        return tc3(d, ts, m, pl, L, x);
    case TRN_MOD_SPPF:
        cat[0] = tconv(d, ts, m, c0, x, NULL, NULL);
        for (int j = 1; j < 4; j++)
            cat[j] = cat[j - 1] ? tpool(d, cat[j - 1], L->k) : NULL;
        return tconv(d, ts, m, c0 + 1, tconcat(d, cat, 4), NULL, NULL);
    case TRN_MOD_UPSAMPLE:
        return x ? tup(d, x, L->scale) : NULL;
    case TRN_MOD_CONCAT:
        return tconcat(d, ins, L->n_from);
    case TRN_MOD_DETECT: {
        struct tt *y0 = NULL;
        for (int l = 0; l < L->n_conv; l++) {
            struct tt *y = ins[l] ? tconv(d, ts, m, c0 + l, ins[l], NULL, det_out[l]) : NULL;
            if (!l) y0 = y;
        }
        return y0;
    }
    }
    return NULL;
}

/* Where a gradient of t goes: its dx when it is the first, else the scratch (*add: then add it
 * into dx). */
static dnnl_memory_t grad_dst(struct trn_dnn *d, struct tt *t, bool *add)
{
    *add = t->written;
    t->written = true;
    return *add ? mem(d, md_of(t->x), d->tmp) : tt_dx(d, t);
}

/* The backward of conv node nd: its output's gradient is in nd->c's dx. */
static void conv_bwd(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                     struct tnode *nd, const struct tt *images)
{
    const struct trn_conv *c1 = trn_model_conv(m, nd->conv);
    const struct trn_conv *c2 = nd->type == 5 ? trn_model_conv(m, nd->conv2) : NULL;
    struct trn_conv g = *c1; /* the geometry: with type 5, both convs' output channels */
    if (c2) g.c2 += c2->c2;
    const struct trn_conv *c = &g;
    struct tt *x = nd->in[0];
    const dnnl_memory_desc_t *xd = md_of(x->x), *yd = md_of(nd->c->x);
    const dnnl_dims_t wdims = { c->c2, c->c1, c->k, c->k }, bdims = { c->c2 };
    const dnnl_dims_t strides = { c->s, c->s }, padl = { c->p, c->p };
    const dnnl_dims_t padr = { (yd->dims[2] - 1) * c->s + c->k - xd->dims[2] - c->p,
                               (yd->dims[3] - 1) * c->s + c->k - xd->dims[3] - c->p };
    dnnl_memory_desc_t wany, bd;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    if (!DN(d, dnnl_memory_desc_init_by_tag(&wany, 4, wdims, dnnl_f32, dnnl_format_tag_any)) ||
        !DN(d, dnnl_memory_desc_init_by_tag(&bd, 1, bdims, dnnl_f32, dnnl_a)))
        return;
    if (x != images) { /* no gradient for the images (trn_net_opts.input_grad off) */
        /* backward data has JIT code only with the weights in its own layout (given the
           forward's, 2.6 runs its reference code): reordered from the forward's each step */
        if (!DN(d, dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, xd, &wany,
                                                            yd, strides, padl, padr)) ||
            !DN(d, dnnl_primitive_desc_create(&pd, &cd, d->attr, d->eng, nd->pd)))
            return;
        dnnl_memory_t wb = nd->w;
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (!dnnl_memory_desc_equal(want, md_of(nd->w))) {
            wb = mem(d, want, NULL);
            reorder(d, nd->w, wb, d->attr);
        }
        bool add;
        dnnl_memory_t dx = grad_dst(d, x, &add);
        const dnnl_exec_arg_t a[3] = { { DNNL_ARG_DIFF_DST, nd->c->dx },
                                       { DNNL_ARG_WEIGHTS, wb },
                                       { DNNL_ARG_DIFF_SRC, dx } };
        push_keep(d, pd, 3, a, c);
        dnnl_primitive_desc_destroy(pd);
        if (add) add_into(d, x->dx, dx);
    }
    if (!DN(d, dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, xd, &wany,
                                                           c->bn ? NULL : &bd, yd, strides, padl,
                                                           padr)) ||
        !DN(d, dnnl_primitive_desc_create(&pd, &cd, d->attr, d->eng, nd->pd)))
        return;
    dnnl_memory_t dw =
        mem(d, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0), NULL);
    dnnl_memory_t db = c->bn ? NULL : mem(d, &bd, NULL);
    const dnnl_exec_arg_t a[4] = { { DNNL_ARG_SRC, x->x },
                                   { DNNL_ARG_DIFF_DST, nd->c->dx },
                                   { DNNL_ARG_DIFF_WEIGHTS, dw },
                                   { DNNL_ARG_DIFF_BIAS, db } };
    push_keep(d, pd, c->bn ? 3 : 4, a, c);
    dnnl_primitive_desc_destroy(pd);
    /* into the grad arena, adding (trn_net_backward adds); type 5's through its staging, in
       OIHW, from which each conv's rows are its gradient */
    if (c2) {
        const size_t per = (size_t)c->c1 * (size_t)c->k * (size_t)c->k;
        const dnnl_dims_t d1 = { c1->c2, c->c1, c->k, c->k }, d2 = { c2->c2, c->c1, c->k, c->k };
        reorder(d, dw, user(d, nd->wstage, wdims, 4), d->attr);
        reorder(d, user(d, nd->wstage, d1, 4),
                user(d, ts->grad + trn_model_tensor(m, c1->weight)->offset, d1, 4), d->attr_sum);
        reorder(d, user(d, nd->wstage + (size_t)c1->c2 * per, d2, 4),
                user(d, ts->grad + trn_model_tensor(m, c2->weight)->offset, d2, 4), d->attr_sum);
    } else {
        reorder(d, dw, user(d, ts->grad + trn_model_tensor(m, c->weight)->offset, wdims, 4),
                d->attr_sum);
    }
    if (db)
        reorder(d, db, user(d, ts->grad + trn_model_tensor(m, c->bias)->offset, bdims, 1),
                d->attr_sum);
}

static void node_bwd(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                     struct tnode *nd, const struct tt *images)
{
    dnnl_primitive_desc_t pd = NULL;
    bool add;
    if (nd->type != 1 && nd->type != 5 && !nd->out->written) { /* nobody reads it: not in YOLOv5 */
        d->rc = -ENOTSUP;
        return;
    }
    switch (nd->type) {
    case 0: {
        if (nd->res) { /* the residual's share: in bn_bwd's first pass */
            nd->radd = nd->res->written;
            nd->res->written = true;
            tt_dx(d, nd->res);
        }
        /* the conv output's gradient from the output's (bn_bwd) */
        if (tt_dx(d, nd->c)) push_node(d, STEP_BN_BWD, nd);
        if (!nd->bn_only) conv_bwd(d, ts, m, nd, images);
        break;
    }
    case 5: /* its gradient from its BN nodes, which came before in this reversed walk */
        conv_bwd(d, ts, m, nd, images);
        break;
    case 1: { /* the loss's gradient of the head into the blocked layout (det_bwd) */
        if (tt_dx(d, nd->c)) push_node(d, STEP_DET_BWD, nd);
        conv_bwd(d, ts, m, nd, images);
        break;
    }
    case 2: {
        dnnl_exec_arg_t a[TRN_MODEL_MAX_FROM + 1];
        unsigned acc = 0;
        for (int i = 0; i < nd->k; i++) {
            a[i] = (dnnl_exec_arg_t){ DNNL_ARG_MULTIPLE_SRC + i, tt_dx(d, nd->in[i]) };
            if (nd->in[i]->written) acc |= 1u << i;
            nd->in[i]->written = true;
        }
        a[nd->k] = (dnnl_exec_arg_t){ DNNL_ARG_DST, nd->out->dx };
        if (d->rc) return;
        const int at = d->n_steps[1];
        push(d, NULL, nd->k + 1, a);
        if (!d->rc) {
            d->steps[1][at].split = true;
            d->steps[1][at].acc = acc;
        }
        break;
    }
    case 3: {
        if (nd->idx) { /* our pool's: a gradient already there is added into in place */
            add = nd->in[0]->written;
            nd->in[0]->written = true;
            pool_step(d, STEP_POOL_BWD, nd->out->dx, tt_dx(d, nd->in[0]), nd->k, nd->idx, add);
            break;
        }
        const dnnl_memory_desc_t *xd = md_of(nd->in[0]->x);
        const dnnl_dims_t st = { 1, 1 }, kk = { nd->k, nd->k }, p = { nd->k / 2, nd->k / 2 };
        dnnl_pooling_desc_t pdesc;
        if (!DN(d, dnnl_pooling_backward_desc_init(&pdesc, dnnl_pooling_max, xd, md_of(nd->out->x),
                                                   st, kk, p, p)) ||
            !DN(d, dnnl_primitive_desc_create(&pd, &pdesc, d->attr, d->eng, nd->pd)))
            return;
        dnnl_memory_t dx = grad_dst(d, nd->in[0], &add);
        const dnnl_exec_arg_t a[3] = { { DNNL_ARG_DIFF_DST, nd->out->dx },
                                       { DNNL_ARG_WORKSPACE, nd->ws },
                                       { DNNL_ARG_DIFF_SRC, dx } };
        push(d, pd, 3, a);
        if (add) add_into(d, nd->in[0]->dx, dx);
        break;
    }
    case 4: {
        if (!nd->pd) { /* our upsample's (tup): a gradient already there is added into in place */
            add = nd->in[0]->written;
            nd->in[0]->written = true;
            pool_step(d, STEP_UP_BWD, nd->out->dx, tt_dx(d, nd->in[0]), 0, NULL, add);
            break;
        }
        dnnl_resampling_desc_t rd;
        if (!DN(d, dnnl_resampling_backward_desc_init(&rd, dnnl_resampling_nearest, NULL,
                                                      md_of(nd->in[0]->x), md_of(nd->out->x))) ||
            !DN(d, dnnl_primitive_desc_create(&pd, &rd, d->attr, d->eng, nd->pd)))
            return;
        dnnl_memory_t dx = grad_dst(d, nd->in[0], &add);
        const dnnl_exec_arg_t a[2] = { { DNNL_ARG_DIFF_DST, nd->out->dx },
                                       { DNNL_ARG_DIFF_SRC, dx } };
        push(d, pd, 2, a);
        if (add) add_into(d, nd->in[0]->dx, dx);
        break;
    }
    }
}

/* The training graph: forward (phase 0) from the rows, then its backward (phase 1), nodes in
 * reverse (every reader of an activation comes after its producer, so its gradient is whole
 * when the producer's node is reached). */
static void build_train(struct trn_dnn *d, const struct tspec *ts, const struct trn_model *m,
                        const struct trn_act_plan *pl, float *const *det_out)
{
    const struct trn_model_info *I = trn_model_info(m);
    const int cap = 6 * I->n_convs + 8 * I->n_layers + 8;
    struct tt **outs = calloc((size_t)I->n_layers, sizeof *outs);
    d->tt = calloc((size_t)cap, sizeof *d->tt);
    d->nodes = calloc((size_t)cap, sizeof *d->nodes);
    dnnl_post_ops_t po = NULL;
    if (!outs || !d->tt || !d->nodes) d->rc = -ENOMEM;
    d->cap_tt = cap;
    if (DN(d, dnnl_primitive_attr_create(&d->attr_sum)) &&
        DN(d, dnnl_primitive_attr_set_scratchpad_mode(d->attr_sum, dnnl_scratchpad_mode_user)) &&
        DN(d, dnnl_post_ops_create(&po)) && DN(d, dnnl_post_ops_append_sum(po, 1.0f)))
        DN(d, dnnl_primitive_attr_set_post_ops(d->attr_sum, po));
    if (po) dnnl_post_ops_destroy(po);
    struct tt *images = tt_new(d, ts->in->n, ts->in->c, ts->in->h, ts->in->w, dnnl_nchw, d->stage);
    if (images) d->input = images->x;
    d->phase = 0;
    for (int i = 0; i < I->n_layers && !d->rc; i++) {
        d->cur_row = i;
        if (!(outs[i] = trow(d, ts, m, pl, i, outs, images, det_out)) && !d->rc) d->rc = -EINVAL;
    }
    if (!d->rc) d->tmp = host_block(d, d->tmp_bytes);
    if (!d->rc && d->n_sums && !(d->sums = malloc(d->n_sums * sizeof *d->sums))) d->rc = -ENOMEM;
    if (!d->rc && !(d->gsums = malloc(KERN_BN_SUMS_LEN(d->max_c) * sizeof *d->gsums)))
        d->rc = -ENOMEM;
    for (int i = 0; i < d->n_nodes && !d->rc; i++) {
        struct tnode *nd = &d->nodes[i];
        if (nd->out) nd->out->producers++;
        if (nd->c && nd->c != nd->out) nd->c->producers++;
        if (!nd->type) { /* every BN pass's per-slice sums share one buffer */
            nd->bp.s1 = d->sums;
            nd->bp.s2 = d->sums + (size_t)nd->bp.n * (size_t)nd->bp.cpad;
        }
    }
    /* the backward, with a row step once every node of a row is done (rows n - 1 down to 0,
       each once, as the reference backward calls the gradient-ready hook) */
    d->phase = 1;
    /* The Detect convs' gradient buffers first, so that none shares memory with another's or
       with a gradient written before its own conv's backward: a loss that writes them all
       before the backward (trn_dnn_train_raw) finds them intact. */
    for (int i = d->n_nodes - 1; i >= 0; i--)
        if (d->nodes[i].type == 1) tt_dx(d, d->nodes[i].c);
    int next = I->n_layers - 1;
    for (int i = d->n_nodes - 1; i >= -1 && !d->rc; i--) {
        const int row = i >= 0 ? d->nodes[i].row : -1;
        for (; next > row && !d->rc; next--) {
            struct step *st = push_kind(d, STEP_ROW, NULL, 0, NULL);
            if (st) st->row = next;
        }
        if (i < 0) continue;
        struct tnode *nd = &d->nodes[i];
        node_bwd(d, ts, m, nd, images);
        tt_produced(d, nd->out);
        if (nd->c && nd->c != nd->out) tt_produced(d, nd->c);
    }
    d->phase = 0;
    free(outs);
    free_hints(d);
}

/* Every step's scratchpad argument: the one buffer, made once the largest need is known. */
static void set_scratch(struct trn_dnn *d)
{
    for (int ph = 0; ph < 2; ph++)
        for (int i = 0; i < d->n_steps[ph]; i++)
            for (int j = 0; j < d->steps[ph][i].nargs; j++)
                if (d->steps[ph][i].args[j].arg == DNNL_ARG_SCRATCHPAD)
                    d->steps[ph][i].args[j].memory = d->scratch_mem;
}

/* trn_dnn_create in the first usable layout from layouts[from] on; *ref_conv: failed because
 * a conv had only oneDNN's reference code there, *used: that layout. */
static int build(const struct trn_model *m, const struct trn_act_plan *pl, int threads,
                 float *const *det_out, const struct tspec *ts, size_t from, struct trn_dnn **out,
                 char *err, size_t err_cap, bool *ref_conv, size_t *used)
{
    const struct trn_model_info *I = trn_model_info(m);
    struct trn_dnn *d = calloc(1, sizeof *d);
    dnnl_memory_t *outs = calloc((size_t)I->n_layers, sizeof *outs);
    size_t stage = 0;
    for (int ci = 0; ci < I->n_convs; ci++) {
        const struct trn_conv *c = trn_model_conv(m, ci);
        const size_t n = (size_t)c->c2 * (size_t)c->c1 * (size_t)c->k * (size_t)c->k;
        if (n > stage) stage = n;
    }
    if (!d || !outs) {
        free(d);
        free(outs);
        return -ENOMEM;
    }
    d->threads = threads;
    d->huge = ts != NULL;
    d->err = err;
    d->err_cap = err_cap;
    d->wc = calloc((size_t)I->n_convs, sizeof *d->wc);
    d->stage = malloc(stage * sizeof(float));
    if (!d->wc || !d->stage) d->rc = -ENOMEM;
    /* The primitives are made here once and kept; oneDNN's global cache of them would only
       hold a second reference until exit. */
    dnnl_set_primitive_cache_capacity(0);
    if (!d->rc && DN(d, dnnl_engine_create(&d->eng, dnnl_cpu, 0)) &&
        DN(d, dnnl_stream_create(&d->st, d->eng, dnnl_stream_default_flags)) &&
        DN(d, dnnl_primitive_attr_create(&d->attr)) &&
        DN(d, dnnl_primitive_attr_set_scratchpad_mode(d->attr, dnnl_scratchpad_mode_user))) {
        if (!pick_layout(d, from)) {
            d->rc = -ENOTSUP;
            if (err && err_cap)
                snprintf(err, err_cap, "oneDNN has no JIT convolution for this CPU");
        }
        const struct trn_act *in = &pl->acts[0];
        if (ts) {
            build_train(d, ts, m, pl, det_out);
        } else {
            d->input = act(d, in->n, in->c, in->h, in->w, dnnl_nchw, d->stage /* set per run */);
            for (int i = 0; i < I->n_layers && !d->rc; i++)
                if (!(outs[i] = row(d, m, pl, i, outs)) && !d->rc) d->rc = -EINVAL;
        }
        dnnl_memory_desc_t sd;
        const dnnl_dims_t sdim = { (dnnl_dim_t)d->scratch };
        if (!d->rc && d->scratch &&
            DN(d, dnnl_memory_desc_init_by_tag(&sd, 1, sdim, dnnl_u8, dnnl_a)) &&
            (d->scratch_mem = mem(d, &sd, NULL)))
            set_scratch(d);
    }
    free(outs);
    d->err = NULL;
    d->err_cap = 0;
    const int rc = d->rc;
    *ref_conv = d->ref_conv;
    *used = d->layout;
    if (rc) {
        trn_dnn_destroy(d);
        return rc;
    }
    *out = d;
    return 0;
}

int trn_dnn_create(const struct trn_model *m, const struct trn_act_plan *pl, int threads,
                   struct trn_dnn **out, char *err, size_t err_cap)
{
    if (!m || !pl || !out || threads < 1) return -EINVAL;
    /* A model with narrow convs (under 16 channels) has no JIT code in nChw16c: the next
       layout may have it. */
    size_t from = 0;
    for (;;) {
        bool ref_conv = false;
        size_t used = 0;
        const int rc = build(m, pl, threads, NULL, NULL, from, out, err, err_cap, &ref_conv, &used);
        if (!ref_conv || used + 1 >= sizeof layouts / sizeof layouts[0]) return rc;
        from = used + 1;
    }
}

int trn_dnn_train_create(struct trn_model *m, const struct trn_act_plan *pl, int threads,
                         float *grad, float *const *head, struct trn_dnn **out, char *err,
                         size_t err_cap)
{
    if (!m || !pl || !grad || !head || !out || threads < 1) return -EINVAL;
    for (int l = 0; l < trn_model_info(m)->nl; l++)
        if (!head[l]) return -EINVAL;
    const struct tspec ts = { .param = trn_model_arena(m, TRN_ARENA_PARAM),
                              .grad = grad,
                              .in = &pl->acts[0] };
    size_t from = 0;
    for (;;) {
        bool ref_conv = false;
        size_t used = 0;
        const int rc = build(m, pl, threads, head, &ts, from, out, err, err_cap, &ref_conv, &used);
        if (!ref_conv || used + 1 >= sizeof layouts / sizeof layouts[0]) return rc;
        from = used + 1;
    }
}

int trn_dnn_train_forward(struct trn_dnn *d, struct trn_model *m, const float *images, bool count)
{
    if (dnnl_memory_set_data_handle(d->input, (void *)images)) return -TRN_MODEL_EONEDNN;
    const int rc = run_steps(d, 0);
    if (rc < 0) return rc;
    /* the running statistics as PyTorch's train mode moves them: the batch variance unbiased */
    float *B = trn_model_arena(m, TRN_ARENA_BUFFER);
    int64_t *cnt = trn_model_arena(m, TRN_ARENA_COUNT);
    const float mom = TRN_MODEL_BN_MOMENTUM;
    for (int i = 0; i < d->n_nodes; i++) {
        const struct tnode *nd = &d->nodes[i];
        if (nd->type) continue;
        const struct trn_conv *c = trn_model_conv(m, nd->conv);
        const double n = nd->count;
        const float *mean = nd->bp.mean, *var = nd->bp.var;
        float *rm = B + trn_model_tensor(m, c->bn_mean)->offset;
        float *rv = B + trn_model_tensor(m, c->bn_var)->offset;
        for (int k = 0; k < c->c2; k++) {
            rm[k] = (1.0f - mom) * rm[k] + mom * mean[k];
            rv[k] = (1.0f - mom) * rv[k] + mom * (float)((double)var[k] * n / (n > 1 ? n - 1 : 1));
        }
        if (count) cnt[trn_model_tensor(m, c->bn_count)->offset] += 1;
    }
    return 0;
}

void trn_dnn_train_hooks(struct trn_dnn *d, int (*bn_allreduce)(void *, double *, size_t),
                         void *bn_ctx, int (*row_done)(void *, int), void *row_ctx)
{
    d->bn_allreduce = bn_allreduce;
    d->bn_ctx = bn_ctx;
    d->row_done = row_done;
    d->row_ctx = row_ctx;
}

int trn_dnn_train_backward(struct trn_dnn *d, const float *const *dhead, int levels)
{
    if (levels < 1 || levels > TRN_MODEL_MAX_LEVELS) return -EINVAL;
    for (int l = 0; l < levels; l++)
        if (!(d->dhead[l] = dhead[l])) return -EINVAL;
    return run_steps(d, 1);
}

int trn_dnn_train_raw_head(struct trn_dnn *d, bool on)
{
    d->raw_head = on;
    return d->blk;
}

int trn_dnn_train_raw(struct trn_dnn *d, int l, const float **p, float **dp)
{
    if (!p || !dp || l < 0) return -EINVAL;
    for (int i = 0; i < d->n_nodes; i++) {
        const struct tnode *nd = &d->nodes[i];
        if (nd->type != 1 || nd->level != l) continue;
        if (!nd->c->dx || dnnl_memory_get_data_handle(nd->c->x, (void **)p) ||
            dnnl_memory_get_data_handle(nd->c->dx, (void **)dp))
            return -EINVAL;
        return 0;
    }
    return -EINVAL;
}

int trn_dnn_load(struct trn_dnn *d, const struct trn_model *m)
{
    const float *P = trn_model_arena_const(m, TRN_ARENA_PARAM);
    const float *B = trn_model_arena_const(m, TRN_ARENA_BUFFER);
    for (int i = 0; i < d->n_wc; i++) {
        const struct wconv *wc = &d->wc[i];
        const struct trn_conv *c = trn_model_conv(m, wc->conv);
        const float *w = P + trn_model_tensor(m, c->weight)->offset;
        const size_t per = (size_t)c->c1 * (size_t)c->k * (size_t)c->k;
        float *b;
        if (dnnl_memory_get_data_handle(wc->b, (void **)&b)) return -TRN_MODEL_EONEDNN;
        if (c->bn) {
            /* val.py's fuse_conv_and_bn: w * gamma / sqrt(var + eps), and
               beta - gamma * mean / sqrt(var + eps) for the bias */
            const float *g = P + trn_model_tensor(m, c->bn_weight)->offset;
            const float *be = P + trn_model_tensor(m, c->bn_bias)->offset;
            const float *mu = B + trn_model_tensor(m, c->bn_mean)->offset;
            const float *var = B + trn_model_tensor(m, c->bn_var)->offset;
            for (int o = 0; o < c->c2; o++) {
                const float sd = sqrtf(var[o] + TRN_MODEL_BN_EPS), s = g[o] / sd;
                for (size_t j = 0; j < per; j++)
                    d->stage[(size_t)o * per + j] = w[(size_t)o * per + j] * s;
                b[o] = be[o] - g[o] * mu[o] / sd;
            }
        } else {
            memcpy(d->stage, w, (size_t)c->c2 * per * sizeof(float));
            memcpy(b, P + trn_model_tensor(m, c->bias)->offset, (size_t)c->c2 * sizeof(float));
        }
        dnnl_exec_arg_t a[2] = { { DNNL_ARG_FROM, wc->user }, { DNNL_ARG_TO, wc->w } };
        if (dnnl_primitive_execute(wc->reorder, d->st, 2, a) || dnnl_stream_wait(d->st))
            return -TRN_MODEL_EONEDNN;
    }
    return 0;
}

/*
 * Concatenation along channels when every source has whole channel blocks: in nChw16c an image's
 * channels are blocks of 16 stored one after another, so each source's image is one contiguous
 * run and the concatenation is a copy per (image, source). oneDNN 2.6's own concat ("simple")
 * took 40% of the forward's time on these (yolov5n 320 b32, 2 threads), and a producer cannot
 * write into a slice instead: every JIT kernel refuses a sub-memory, leaving its reference code.
 */
static int cat_blocks(const struct step *s)
{
    const int k = s->nargs - 1;
    const float *src[TRN_MODEL_MAX_FROM];
    size_t per[TRN_MODEL_MAX_FROM], off[TRN_MODEL_MAX_FROM];
    float *dst;
    if (dnnl_memory_get_data_handle(s->args[k].memory, (void **)&dst)) return -TRN_MODEL_EONEDNN;
    const dnnl_memory_desc_t *yd = md_of(s->args[k].memory);
    const size_t hw = (size_t)yd->dims[2] * (size_t)yd->dims[3];
    size_t at = 0;
    for (int i = 0; i < k; i++) {
        if (dnnl_memory_get_data_handle(s->args[i].memory, (void **)&src[i]))
            return -TRN_MODEL_EONEDNN;
        per[i] = (size_t)md_of(s->args[i].memory)->dims[1] * hw;
        off[i] = at;
        at += per[i];
    }
    const long n = (long)yd->dims[0], tasks = n * k;
    const bool split = s->split;
    const unsigned acc = s->acc;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++) {
        const long b = t / k;
        const int i = (int)(t % k);
        float *cat = dst + (size_t)b * at + off[i], *x = (float *)src[i] + (size_t)b * per[i];
        if (!split)
            memcpy(cat, x, per[i] * sizeof(float));
        else if (!(acc >> i & 1))
            memcpy(x, cat, per[i] * sizeof(float));
        else
            for (size_t j = 0; j < per[i]; j++)
                x[j] += cat[j];
    }
    return 0;
}

/* The data of a node's tensors. */
struct bn_data {
    float *x, *y, *r;     /* the conv output, the node's output, the residual (or NULL) */
    float *dx, *dy, *rdx; /* their gradients (backward) */
    long slices;
};

static int bn_data(const struct tnode *nd, bool bwd, struct bn_data *v)
{
    memset(v, 0, sizeof *v);
    v->slices = (long)nd->bp.n * (nd->bp.cpad / nd->bp.blk);
    if (dnnl_memory_get_data_handle(nd->c->x, (void **)&v->x) ||
        dnnl_memory_get_data_handle(nd->out->x, (void **)&v->y) ||
        (nd->res && dnnl_memory_get_data_handle(nd->res->x, (void **)&v->r)) ||
        (bwd && (dnnl_memory_get_data_handle(nd->c->dx, (void **)&v->dx) ||
                 dnnl_memory_get_data_handle(nd->out->dx, (void **)&v->dy) ||
                 (nd->res && dnnl_memory_get_data_handle(nd->res->dx, (void **)&v->rdx)))))
        return -TRN_MODEL_EONEDNN;
    v->y += nd->out_off;
    if (v->dy) v->dy += nd->out_off;
    v->x += nd->x_off;
    if (v->dx) v->dx += nd->x_off;
    return 0;
}

/* The training forward's BN + SiLU (+ residual) of node nd (kern_bnblk): the batch statistics
 * stay in nd->bp for the backward and the running statistics. */
static int bn_fwd(struct trn_dnn *d, struct tnode *nd)
{
    struct bn_data v;
    const int rc = bn_data(nd, false, &v);
    if (rc < 0) return rc;
    const struct kern_bnblk *bp = &nd->bp;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < v.slices; t++)
        kern_ops_cpu()->bnblk_moments(bp, t, v.x);
    if (d->bn_allreduce) { /* SyncBatchNorm: the statistics of every rank's batch */
        kern_ops_cpu()->bnblk_fwd_sums(bp, d->gsums);
        const int r = d->bn_allreduce(d->bn_ctx, d->gsums, KERN_BN_SUMS_LEN(bp->c));
        if (r < 0) return r;
    }
    nd->count =
        kern_ops_cpu()->bnblk_fwd_coef(bp, nd->gamma, nd->beta, d->bn_allreduce ? d->gsums : NULL);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < v.slices; t++)
        kern_ops_cpu()->bnblk_silu_fwd(bp, t, v.y, v.x, v.r);
    return 0;
}

/* Its backward: the conv output's gradient from the node output's (the residual's share went to
 * the residual before); dgamma and dbeta added into the grad arena. */
static int bn_bwd(struct trn_dnn *d, struct tnode *nd)
{
    struct bn_data v;
    const int rc = bn_data(nd, true, &v);
    if (rc < 0) return rc;
    const struct kern_bnblk *bp = &nd->bp;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < v.slices; t++)
        kern_ops_cpu()->bnblk_silu_bwd_sums(bp, t, v.dy, v.x, v.rdx, nd->radd);
    kern_ops_cpu()->bnblk_bwd_sums(bp, d->gsums, nd->dgamma,
                                   nd->dbeta); /* dgamma, dbeta: this batch's */
    if (d->bn_allreduce) {
        const int r = d->bn_allreduce(d->bn_ctx, d->gsums, KERN_BN_SUMS_LEN(bp->c));
        if (r < 0) return r;
    }
    kern_ops_cpu()->bnblk_bwd_coef(bp, d->gsums);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < v.slices; t++)
        kern_ops_cpu()->bnblk_silu_bwd_dx(bp, t, v.dx, v.dy, v.x);
    return 0;
}

/* A Detect level's blocked raw into its head (bs, na, ny, nx, no), one (image, anchor) a task
 * (kern_detect_blk_fwd). */
static void head_fwd(const struct trn_dnn *d, const struct kern_detect *det, float *head,
                     const float *raw)
{
    const long tasks = (long)det->bs * det->na;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++)
        kern_ops_cpu()->detect_blk_fwd(det, d->blk, (int)(t / det->na), (int)(t % det->na), head,
                                       raw);
}

/* Detect conv node nd's output into its level of the head, reshaped (kern_detect_blk_fwd). */
static int det_fwd(struct trn_dnn *d, const struct tnode *nd)
{
    if (d->raw_head) return 0;
    const float *raw;
    if (dnnl_memory_get_data_handle(nd->c->x, (void **)&raw)) return -TRN_MODEL_EONEDNN;
    head_fwd(d, &nd->det, nd->head, raw);
    return 0;
}

/* Its gradient, blocked, from the head's (kern_detect_blk_bwd). */
static int det_bwd(struct trn_dnn *d, const struct tnode *nd)
{
    float *draw;
    if (dnnl_memory_get_data_handle(nd->c->dx, (void **)&draw)) return -TRN_MODEL_EONEDNN;
    if (d->dhead[nd->level] == draw) return 0; /* the loss wrote it there (trn_dnn_train_raw) */
    const int nb = (nd->det.na * nd->det.no + d->blk - 1) / d->blk;
    const long tasks = (long)nd->det.bs * nb;
    const float *const dp = d->dhead[nd->level];
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++)
        kern_ops_cpu()->detect_blk_bwd(&nd->det, d->blk, (int)(t / nb), (int)(t % nb), draw, dp);
    return 0;
}

/* A max pool of our own (STEP_POOL_*), one (image, channel block) plane a task. */
static int pool_run(const struct trn_dnn *d, const struct step *s)
{
    float *a, *b;
    if (dnnl_memory_get_data_handle(s->args[0].memory, (void **)&a) ||
        dnnl_memory_get_data_handle(s->args[1].memory, (void **)&b))
        return -TRN_MODEL_EONEDNN;
    const dnnl_memory_desc_t *md = md_of(s->args[0].memory);
    const int h = (int)md->dims[2], w = (int)md->dims[3];
    const long planes = (long)md->dims[0] * (long)(md->padded_dims[1] / d->blk);
    const size_t plane = (size_t)h * (size_t)w * (size_t)d->blk;
    const bool bwd = s->kind == STEP_POOL_BWD;
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (long t = 0; t < planes; t++) {
        const size_t at = (size_t)t * plane;
        uint8_t *const idx = s->idx ? s->idx + at : NULL;
        bad |=
            (bwd ? kern_ops_cpu()->poolblk_bwd(h, w, s->k, d->blk, b + at, a + at, idx, (int)s->acc)
                 : kern_ops_cpu()->poolblk_fwd(h, w, s->k, d->blk, b + at, idx, a + at)) < 0;
    }
    return bad ? -EINVAL : 0;
}

/* An upsample of our own (STEP_UP_*), one (image, channel block) plane a task. */
static int up_run(const struct trn_dnn *d, const struct step *s)
{
    float *a, *b;
    if (dnnl_memory_get_data_handle(s->args[0].memory, (void **)&a) ||
        dnnl_memory_get_data_handle(s->args[1].memory, (void **)&b))
        return -TRN_MODEL_EONEDNN;
    const bool bwd = s->kind == STEP_UP_BWD;
    const dnnl_memory_desc_t *md = md_of(s->args[bwd ? 1 : 0].memory); /* the small side */
    const int h = (int)md->dims[2], w = (int)md->dims[3];
    const long planes = (long)md->dims[0] * (long)(md->padded_dims[1] / d->blk);
    const size_t plane = (size_t)h * (size_t)w * (size_t)d->blk;
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (long t = 0; t < planes; t++) {
        const size_t at = (size_t)t * plane;
        bad |= (bwd ? kern_ops_cpu()->upblk_bwd(h, w, d->blk, b + at, a + 4 * at, (int)s->acc)
                    : kern_ops_cpu()->upblk_fwd(h, w, d->blk, b + 4 * at, a + at)) < 0;
    }
    return bad ? -EINVAL : 0;
}

/* Runs the steps of phase ph. */
static int run_steps(struct trn_dnn *d, int ph)
{
    omp_set_num_threads(d->threads);
    for (int i = 0; i < d->n_steps[ph]; i++) {
        const struct step *s = &d->steps[ph][i];
        int rc = 0;
        switch (s->kind) {
        case STEP_PRIM:
            if (dnnl_primitive_execute(s->p, d->st, s->nargs, s->args)) rc = -TRN_MODEL_EONEDNN;
            break;
        case STEP_CAT:
            rc = cat_blocks(s);
            break;
        case STEP_BN_FWD:
            rc = bn_fwd(d, s->nd);
            break;
        case STEP_BN_BWD:
            rc = bn_bwd(d, s->nd);
            break;
        case STEP_DET_FWD:
            rc = det_fwd(d, s->nd);
            break;
        case STEP_DET_BWD:
            rc = det_bwd(d, s->nd);
            break;
        case STEP_ROW:
            if (d->row_done) rc = d->row_done(d->row_ctx, s->row);
            break;
        case STEP_POOL_FWD:
        case STEP_POOL_BWD:
            rc = pool_run(d, s);
            break;
        case STEP_UP_FWD:
        case STEP_UP_BWD:
            rc = up_run(d, s);
            break;
        }
        if (rc < 0) return rc;
    }
    return dnnl_stream_wait(d->st) ? -TRN_MODEL_EONEDNN : 0;
}

int trn_dnn_run(struct trn_dnn *d, const float *images)
{
    if (dnnl_memory_set_data_handle(d->input, (void *)images)) return -TRN_MODEL_EONEDNN;
    return run_steps(d, 0);
}

/* The Detect level l of the last run, blocked, with geometry det checked against it. */
static const float *det_raw(const struct trn_dnn *d, int l, const struct kern_detect *det)
{
    const float *raw;
    if (l >= d->n_det || dnnl_memory_get_data_handle(d->det[l], (void **)&raw)) return NULL;
    const dnnl_memory_desc_t *md = md_of(d->det[l]);
    const bool fits = md->dims[0] == det->bs && md->dims[1] == (dnnl_dim_t)det->na * det->no &&
                      md->dims[2] == det->ny && md->dims[3] == det->nx;
    return fits ? raw : NULL;
}

int trn_dnn_decode(struct trn_dnn *d, const struct kern_detect *det, int levels,
                   const float *anchors, float *out, size_t rows)
{
    if (!d || !det || !anchors || !out || levels != d->n_det) return -EINVAL;
    const float *raw[TRN_MODEL_MAX_LEVELS];
    size_t first[TRN_MODEL_MAX_LEVELS + 1] = { 0 }; /* each level's first row in an image */
    for (int l = 0; l < levels; l++) {
        if (!(raw[l] = det_raw(d, l, &det[l])) || det[l].bs != det[0].bs ||
            det[l].na != det[0].na || det[l].no != det[0].no)
            return -EINVAL;
        first[l + 1] = first[l] + (size_t)det[l].na * (size_t)det[l].ny * (size_t)det[l].nx;
    }
    if (first[levels] != rows) return -EINVAL;
    /* one (image, level, anchor) a task; images in order, so a thread's rows are contiguous */
    const int na = det[0].na;
    const long tasks = (long)det[0].bs * levels * na;
    const size_t no = (size_t)det[0].no;
    int rc = 0;
    omp_set_num_threads(d->threads);
#pragma omp parallel for schedule(static) reduction(| : rc)
    for (long t = 0; t < tasks; t++) {
        const int b = (int)(t / ((long)levels * na)), l = (int)(t / na % levels), a = (int)(t % na);
        const size_t cells = (size_t)det[l].ny * (size_t)det[l].nx;
        float *const o = out + ((size_t)b * rows + first[l] + (size_t)a * cells) * no;
        rc |= kern_ops_cpu()->detect_blk_decode(&det[l], d->blk, b, a, o, raw[l],
                                                anchors + 2 * (size_t)na * l);
    }
    return rc ? -EINVAL : 0;
}

int trn_dnn_head(struct trn_dnn *d, const struct kern_detect *det, int levels, float *const *head)
{
    if (!d || !det || !head || levels != d->n_det) return -EINVAL;
    omp_set_num_threads(d->threads);
    for (int l = 0; l < levels; l++) {
        const float *const raw = det_raw(d, l, &det[l]);
        if (!raw || !head[l]) return -EINVAL;
        head_fwd(d, &det[l], head[l], raw);
    }
    return 0;
}

size_t trn_dnn_bytes(const struct trn_dnn *d)
{
    return d ? d->bytes : 0;
}

const char *trn_dnn_layout(const struct trn_dnn *d)
{
    return d ? d->tag_name : "";
}

void trn_dnn_destroy(struct trn_dnn *d)
{
    if (!d) return;
    for (int ph = 0; ph < 2; ph++) {
        for (int i = 0; i < d->n_steps[ph]; i++)
            if (d->steps[ph][i].p) dnnl_primitive_destroy(d->steps[ph][i].p);
        free(d->steps[ph]);
    }
    for (int i = 0; d->wc && i < d->n_wc; i++)
        if (d->wc[i].reorder) dnnl_primitive_destroy(d->wc[i].reorder);
    for (int i = 0; i < d->n_mems; i++)
        dnnl_memory_destroy(d->mems[i]);
    free_hints(d);
    if (d->attr) dnnl_primitive_attr_destroy(d->attr);
    if (d->attr_sum) dnnl_primitive_attr_destroy(d->attr_sum);
    if (d->st) dnnl_stream_destroy(d->st);
    if (d->eng) dnnl_engine_destroy(d->eng);
    free(d->mems);
    free(d->wc);
    free(d->stage);
    free(d->tt);
    for (int i = 0; d->nodes && i < d->n_nodes; i++)
        free(d->nodes[i].bn);
    free(d->nodes);
    for (int i = 0; i < d->n_hb; i++) {
        if (d->hb[i].len)
            munmap(d->hb[i].p, d->hb[i].len);
        else
            free(d->hb[i].p);
    }
    free(d->hb);
    free(d->gb);
    free(d->sums);
    free(d->gsums);
    free(d);
}
