/*
 * The CPU inference forward on oneDNN (priv/net_onednn.h). The walk over the rows mirrors
 * net.c's layer_fwd, so the two run the same network; what differs is where activations live
 * (oneDNN's blocked layout, never converted between layers: a reorder around each conv gives
 * back most of the gain, docs/benchmarks.md "bench_onednn_conv") and who computes them.
 *
 * Two oneDNN 2.6 details shape it (measured in tests/trainer/bench_onednn_net.c): a residual
 * written as a sum post-op after the swish, and a convolution from a blocked source into an
 * NCHW destination, both fall to its reference implementation; so the residual is a binary add
 * post-op and the Detect convs write blocked, then reorder into the net's NCHW buffer.
 */
#include "priv/net_onednn.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "errors.h"

/* A primitive with its arguments; p NULL: a concatenation of whole channel blocks (cat_blocks),
 * sources args[0 .. nargs - 1), destination args[nargs - 1]. */
struct step {
    dnnl_primitive_t p;
    int nargs;
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
    struct step *steps;
    int n_steps, cap_steps;
    dnnl_memory_t *mems; /* every memory object made, destroyed at the end */
    int n_mems, cap_mems;
    struct wconv *wc;
    int n_wc;
    float *stage; /* folded OIHW weights of one conv */
    dnnl_memory_t input;
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
    int rc; /* the first failure while building */
    char *err;
    size_t err_cap;
};

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

static dnnl_memory_t keep(struct trn_dnn *d, dnnl_memory_t m)
{
    if (!m) return NULL;
    if (d->n_mems == d->cap_mems) {
        const int cap = d->cap_mems ? 2 * d->cap_mems : 64;
        dnnl_memory_t *p = realloc(d->mems, (size_t)cap * sizeof *p);
        if (!p) {
            dnnl_memory_destroy(m);
            if (!d->rc) d->rc = -ENOMEM;
            return NULL;
        }
        d->mems = p;
        d->cap_mems = cap;
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

/* A memory object of md, allocated by oneDNN (handle NULL) or over the caller's buffer. */
static dnnl_memory_t mem(struct trn_dnn *d, const dnnl_memory_desc_t *md, void *handle)
{
    dnnl_memory_t m = NULL;
    if (d->rc || !DN(d, dnnl_memory_create(&m, md, d->eng, handle ? handle : DNNL_MEMORY_ALLOCATE)))
        return NULL;
    if (!handle) d->bytes += dnnl_memory_desc_get_size(md);
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

/* Takes ownership of pd (destroyed here whatever happens); NULL pushes a cat_blocks step. */
static void push(struct trn_dnn *d, dnnl_primitive_desc_t pd, int nargs,
                 const dnnl_exec_arg_t *args)
{
    if (!d->rc && d->n_steps == d->cap_steps) {
        const int cap = d->cap_steps ? 2 * d->cap_steps : 64;
        struct step *p = realloc(d->steps, (size_t)cap * sizeof *p);
        if (p) {
            d->steps = p;
            d->cap_steps = cap;
        } else {
            d->rc = -ENOMEM;
        }
    }
    if (!d->rc) {
        struct step *s = &d->steps[d->n_steps];
        s->p = NULL;
        if (!pd || DN(d, dnnl_primitive_create(&s->p, pd))) {
            s->nargs = nargs;
            memcpy(s->args, args, (size_t)nargs * sizeof *args);
            const dnnl_memory_desc_t *sp =
                pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
            const size_t bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
            if (bytes) { /* the buffer is made once the largest is known (trn_dnn_create) */
                s->args[s->nargs++] = (dnnl_exec_arg_t){ DNNL_ARG_SCRATCHPAD, NULL };
                if (bytes > d->scratch) d->scratch = bytes;
            }
            d->n_steps++;
        }
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
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
 * + add when given. The output is blocked; with plain, also reordered into NCHW at `plain`.
 */
static dnnl_memory_t conv(struct trn_dnn *d, const struct trn_model *m, int ci, dnnl_memory_t x,
                          dnnl_memory_t add, float *plain)
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
    if (!plain || d->rc) return y;
    dnnl_memory_t yp = act(d, n, c->c2, oh, ow, dnnl_nchw, plain);
    if (yp && DN(d, dnnl_reorder_primitive_desc_create(&pd, md_of(y), d->eng, md_of(yp), d->eng,
                                                       d->attr))) {
        const dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, y }, { DNNL_ARG_TO, yp } };
        push(d, pd, 2, r);
    }
    return yp;
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

static dnnl_memory_t maxpool(struct trn_dnn *d, dnnl_memory_t x, int k)
{
    if (d->rc || !x) return NULL;
    const dnnl_memory_desc_t *xd = md_of(x);
    dnnl_memory_t y = act(d, xd->dims[0], xd->dims[1], xd->dims[2], xd->dims[3], d->tag, NULL);
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
    dnnl_memory_t t = conv(d, m, cv1, x, NULL, NULL);
    return conv(d, m, cv1 + 1, t, pl->convs[cv1 + 1].add >= 0 ? x : NULL, NULL);
}

/* Row i on its inputs; returns its output (level 0's for Detect, NULL on failure). */
static dnnl_memory_t row(struct trn_dnn *d, const struct trn_model *m,
                         const struct trn_act_plan *pl, int i, const dnnl_memory_t *out,
                         float *const *det_out)
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
            x = conv(d, m, c0 + j, x, NULL, NULL);
        return x;
    case TRN_MOD_BOTTLENECK:
        for (int j = 0; j < L->n; j++)
            x = bottleneck(d, m, pl, c0 + 2 * j, x);
        return x;
    case TRN_MOD_C3: {
        dnnl_memory_t cat[2];
        cat[0] = conv(d, m, c0, x, NULL, NULL);
        for (int j = 0; j < L->n; j++)
            cat[0] = bottleneck(d, m, pl, c0 + 3 + 2 * j, cat[0]);
        cat[1] = conv(d, m, c0 + 1, x, NULL, NULL);
        return conv(d, m, c0 + 2, concat(d, cat, 2), NULL, NULL);
    }
    case TRN_MOD_SPPF: {
        dnnl_memory_t cat[4];
        cat[0] = conv(d, m, c0, x, NULL, NULL);
        for (int j = 1; j < 4; j++)
            cat[j] = maxpool(d, cat[j - 1], L->k);
        return conv(d, m, c0 + 1, concat(d, cat, 4), NULL, NULL);
    }
    case TRN_MOD_UPSAMPLE:
        return upsample(d, x, L->scale);
    case TRN_MOD_CONCAT:
        return concat(d, ins, L->n_from);
    case TRN_MOD_DETECT: {
        dnnl_memory_t y0 = NULL;
        for (int l = 0; l < L->n_conv; l++) {
            dnnl_memory_t y = conv(d, m, c0 + l, ins[l], NULL, det_out[l]);
            if (!l) y0 = y;
        }
        return y0;
    }
    }
    return NULL;
}

/* trn_dnn_create in the first usable layout from layouts[from] on; *ref_conv: failed because
 * a conv had only oneDNN's reference code there, *used: that layout. */
static int build(const struct trn_model *m, const struct trn_act_plan *pl, int threads,
                 float *const *det_out, size_t from, struct trn_dnn **out, char *err,
                 size_t err_cap, bool *ref_conv, size_t *used)
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
        d->input = act(d, in->n, in->c, in->h, in->w, dnnl_nchw, d->stage /* set per run */);
        for (int i = 0; i < I->n_layers && !d->rc; i++)
            if (!(outs[i] = row(d, m, pl, i, outs, det_out)) && !d->rc) d->rc = -EINVAL;
        dnnl_memory_desc_t sd;
        const dnnl_dims_t sdim = { (dnnl_dim_t)d->scratch };
        if (!d->rc && d->scratch &&
            DN(d, dnnl_memory_desc_init_by_tag(&sd, 1, sdim, dnnl_u8, dnnl_a)) &&
            (d->scratch_mem = mem(d, &sd, NULL)))
            for (int i = 0; i < d->n_steps; i++)
                for (int j = 0; j < d->steps[i].nargs; j++)
                    if (d->steps[i].args[j].arg == DNNL_ARG_SCRATCHPAD)
                        d->steps[i].args[j].memory = d->scratch_mem;
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
                   float *const *det_out, struct trn_dnn **out, char *err, size_t err_cap)
{
    if (!m || !pl || !det_out || !out || threads < 1) return -EINVAL;
    /* A model with narrow convs (under 16 channels) has no JIT code in nChw16c: the next
       layout may have it. */
    size_t from = 0;
    for (;;) {
        bool ref_conv = false;
        size_t used = 0;
        const int rc = build(m, pl, threads, det_out, from, out, err, err_cap, &ref_conv, &used);
        if (!ref_conv || used + 1 >= sizeof layouts / sizeof layouts[0]) return rc;
        from = used + 1;
    }
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
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++) {
        const long b = t / k;
        const int i = (int)(t % k);
        memcpy(dst + (size_t)b * at + off[i], src[i] + (size_t)b * per[i], per[i] * sizeof(float));
    }
    return 0;
}

int trn_dnn_run(struct trn_dnn *d, const float *images)
{
    omp_set_num_threads(d->threads);
    if (dnnl_memory_set_data_handle(d->input, (void *)images)) return -TRN_MODEL_EONEDNN;
    for (int i = 0; i < d->n_steps; i++) {
        const struct step *s = &d->steps[i];
        if (!s->p) {
            const int rc = cat_blocks(s);
            if (rc < 0) return rc;
        } else if (dnnl_primitive_execute(s->p, d->st, s->nargs, s->args)) {
            return -TRN_MODEL_EONEDNN;
        }
    }
    return dnnl_stream_wait(d->st) ? -TRN_MODEL_EONEDNN : 0;
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
    for (int i = 0; i < d->n_steps; i++)
        if (d->steps[i].p) dnnl_primitive_destroy(d->steps[i].p);
    for (int i = 0; d->wc && i < d->n_wc; i++)
        if (d->wc[i].reorder) dnnl_primitive_destroy(d->wc[i].reorder);
    for (int i = 0; i < d->n_mems; i++)
        dnnl_memory_destroy(d->mems[i]);
    if (d->attr) dnnl_primitive_attr_destroy(d->attr);
    if (d->st) dnnl_stream_destroy(d->st);
    if (d->eng) dnnl_engine_destroy(d->eng);
    free(d->steps);
    free(d->mems);
    free(d->wc);
    free(d->stage);
    free(d);
}
