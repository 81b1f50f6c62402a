/*
 * bench_onednn_train: what a training step in oneDNN's blocked layout would give (issue 25's
 * training goal), before it is built, as bench_onednn_net was for inference: yolov5n's forward
 * (train mode: batch statistics) and backward from oneDNN primitives, activations and their
 * gradients in the layout its convolutions run in JIT code (nChw16c on AVX-512), against our
 * trn_net_forward(train) + trn_net_backward on the same model, batch and threads, alternating
 * rounds. Random weights and a fixed output gradient; a timing, not an implementation: nothing is
 * compared, no running statistics are kept, no optimizer runs (the weight gradients are reordered
 * to OIHW, as an optimizer on our flat arena would need).
 *
 * Per Conv (conv + BN + SiLU): convolution forward_training (no bias), batch_normalization with
 * its batch statistics (scale and shift), eltwise swish, and the bottleneck residual as an
 * in-place binary add; backward: swish, batch normalization (scale and shift gradients),
 * convolution backward data and backward weights. SPPF's pools keep their workspace; the
 * upsample is resampling forward and backward. Concatenation, forward and backward, copies whole
 * channel blocks per image (every yolov5n concat has them). Where an activation feeds several
 * layers, its gradients add (binary add, in place). The Detect convs write blocked and are
 * reordered to NCHW; their output gradient is reordered back.
 *
 *   build/tests/trainer/bench_onednn_train [IMG=320] [BATCH=16] [THREADS=2] [ROUNDS=5]
 * Built where the build has oneDNN (Debian's libdnnl-dev).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "errors.h"
#include "model.h"
#include "net.h"

#define DN(call)                                                                             \
    do {                                                                                     \
        const dnnl_status_t st_ = (call);                                                    \
        if (st_ != dnnl_success) {                                                           \
            fprintf(stderr, "bench_onednn_train: %s failed (status %d)\n", #call, (int)st_); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define MAX_T     1024
#define MAX_STEPS 2048

/* An activation and its gradient (made when the backward first needs it). */
struct ten {
    dnnl_memory_t x, dx;
    int written; /* backward build: its gradient has a first writer */
};

/* A primitive, or (p NULL) a block concatenation: forward copies srcs into dst; backward
 * (bwd) copies or adds (acc[i]) dst's slices into srcs. */
struct step {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[12];
    int k, bwd;
    dnnl_memory_t cat_src[8], cat_dst;
    int acc[8];
};

/* What the backward of one forward node needs. */
struct node {
    int type; /* 0 Conv, 1 Detect conv, 2 concat, 3 max pool, 4 upsample */
    struct ten *in[8], *out, *c, *b, *res;
    int k;
    dnnl_primitive_desc_t conv_pd, bn_pd, elt_pd, pool_pd, up_pd;
    dnnl_memory_t w, bias, mean, var, scale, shift, ws, plain, dplain;
    const struct trn_conv *cv;
};

struct g {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    struct ten t[MAX_T];
    int nt;
    struct step fwd[MAX_STEPS], bwd[MAX_STEPS];
    int nf, nb;
    struct node nodes[MAX_STEPS];
    int nn;
    dnnl_format_tag_t tag;
    unsigned seed;
    size_t max_bytes;
    void *tmp; /* one activation's worth: a gradient that adds goes here first */
    double flops;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const dnnl_memory_desc_t *md_of(dnnl_memory_t m)
{
    const dnnl_memory_desc_t *md;
    DN(dnnl_memory_get_memory_desc(m, &md));
    return md;
}

static void fill(struct g *g, dnnl_memory_t m, float lo, float hi)
{
    float *p;
    DN(dnnl_memory_get_data_handle(m, (void **)&p));
    const size_t n = dnnl_memory_desc_get_size(md_of(m)) / sizeof(float);
    for (size_t i = 0; i < n; i++)
        p[i] =
            lo + (hi - lo) * (float)((g->seed = g->seed * 1664525u + 1013904223u) >> 8) * 0x1p-24f;
}

static dnnl_memory_t mem(struct g *g, const dnnl_memory_desc_t *md, void *handle)
{
    dnnl_memory_t m;
    DN(dnnl_memory_create(&m, md, g->eng, handle ? handle : DNNL_MEMORY_ALLOCATE));
    if (!handle) {
        fill(g, m, -0.05f, 0.05f); /* touched, and no denormals */
        if (dnnl_memory_desc_get_size(md) > g->max_bytes)
            g->max_bytes = dnnl_memory_desc_get_size(md);
    }
    return m;
}

static struct ten *ten(struct g *g, dnnl_dim_t n, dnnl_dim_t c, dnnl_dim_t h, dnnl_dim_t w,
                       dnnl_format_tag_t tag)
{
    if (g->nt == MAX_T) exit(1);
    dnnl_memory_desc_t md;
    const dnnl_dims_t d = { n, c, h, w };
    DN(dnnl_memory_desc_init_by_tag(&md, 4, d, dnnl_f32, tag));
    struct ten *t = &g->t[g->nt++];
    t->x = mem(g, &md, NULL);
    return t;
}

static dnnl_memory_t dx_of(struct g *g, struct ten *t)
{
    if (!t->dx) t->dx = mem(g, md_of(t->x), NULL);
    return t->dx;
}

static struct step *push(struct step *list, int *n, dnnl_primitive_desc_t pd, int nargs,
                         const dnnl_exec_arg_t *args)
{
    if (*n == MAX_STEPS) exit(1);
    struct step *s = &list[(*n)++];
    memset(s, 0, sizeof *s);
    if (pd) DN(dnnl_primitive_create(&s->p, pd));
    s->nargs = nargs;
    if (nargs) memcpy(s->args, args, (size_t)nargs * sizeof *args);
    return s;
}

static void run(const struct step *s, dnnl_stream_t st)
{
    if (s->p) {
        DN(dnnl_primitive_execute(s->p, st, s->nargs, s->args));
        return;
    }
    float *dst;
    DN(dnnl_memory_get_data_handle(s->cat_dst, (void **)&dst));
    const dnnl_memory_desc_t *yd = md_of(s->cat_dst);
    const size_t hw = (size_t)yd->dims[2] * (size_t)yd->dims[3];
    float *src[8];
    size_t per[8], off[8], at = 0;
    for (int i = 0; i < s->k; i++) {
        DN(dnnl_memory_get_data_handle(s->cat_src[i], (void **)&src[i]));
        per[i] = (size_t)md_of(s->cat_src[i])->dims[1] * hw;
        off[i] = at;
        at += per[i];
    }
    const long n = (long)yd->dims[0], tasks = n * s->k;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++) {
        const long b = t / s->k;
        const int i = (int)(t % s->k);
        float *cat = dst + (size_t)b * at + off[i], *x = src[i] + (size_t)b * per[i];
        if (!s->bwd)
            memcpy(cat, x, per[i] * sizeof(float));
        else if (!s->acc[i])
            memcpy(x, cat, per[i] * sizeof(float));
        else
            for (size_t j = 0; j < per[i]; j++)
                x[j] += cat[j];
    }
}

/* --- forward ------------------------------------------------------------------------------- */

static struct ten *conv(struct g *g, const struct trn_conv *cv, struct ten *x, struct ten *res)
{
    const dnnl_memory_desc_t *xd = md_of(x->x);
    const dnnl_dim_t n = xd->dims[0], h = xd->dims[2], w = xd->dims[3];
    const dnnl_dim_t oh = (h + 2 * cv->p - cv->k) / cv->s + 1,
                     ow = (w + 2 * cv->p - cv->k) / cv->s + 1;
    struct node *nd = &g->nodes[g->nn++];
    memset(nd, 0, sizeof *nd);
    nd->type = cv->bn ? 0 : 1;
    nd->cv = cv;
    nd->in[0] = x;
    nd->k = 1;
    nd->res = res;
    nd->c = ten(g, n, cv->c2, oh, ow, g->tag);
    dnnl_memory_desc_t wd, bd;
    const dnnl_dims_t wdims = { cv->c2, cv->c1, cv->k, cv->k }, bdims = { cv->c2 };
    DN(dnnl_memory_desc_init_by_tag(&wd, 4, wdims, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&bd, 1, bdims, dnnl_f32, dnnl_a));
    const dnnl_dims_t strides = { cv->s, cv->s }, padl = { cv->p, cv->p };
    const dnnl_dims_t padr = { (oh - 1) * cv->s + cv->k - h - cv->p,
                               (ow - 1) * cv->s + cv->k - w - cv->p };
    dnnl_convolution_desc_t cd;
    DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, xd,
                                          &wd, cv->bn ? NULL : &bd, md_of(nd->c->x), strides, padl,
                                          padr));
    DN(dnnl_primitive_desc_create(&nd->conv_pd, &cd, NULL, g->eng, NULL));
    nd->w = mem(g, dnnl_primitive_desc_query_md(nd->conv_pd, dnnl_query_weights_md, 0), NULL);
    g->flops += 2.0 * (double)(n * cv->c2 * oh * ow) * (double)(cv->c1 * cv->k * cv->k);
    if (!cv->bn) {
        nd->bias = mem(g, &bd, NULL);
        const dnnl_exec_arg_t a[4] = { { DNNL_ARG_SRC, x->x },
                                       { DNNL_ARG_WEIGHTS, nd->w },
                                       { DNNL_ARG_BIAS, nd->bias },
                                       { DNNL_ARG_DST, nd->c->x } };
        push(g->fwd, &g->nf, nd->conv_pd, 4, a);
        /* NCHW for the loss, and its gradient back */
        dnnl_memory_desc_t pd_md;
        const dnnl_dims_t d = { n, cv->c2, oh, ow };
        DN(dnnl_memory_desc_init_by_tag(&pd_md, 4, d, dnnl_f32, dnnl_nchw));
        nd->plain = mem(g, &pd_md, NULL);
        nd->dplain = mem(g, &pd_md, NULL);
        fill(g, nd->dplain, -1e-3f, 1e-3f);
        dnnl_primitive_desc_t rpd;
        DN(dnnl_reorder_primitive_desc_create(&rpd, md_of(nd->c->x), g->eng, &pd_md, g->eng, NULL));
        const dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, nd->c->x }, { DNNL_ARG_TO, nd->plain } };
        push(g->fwd, &g->nf, rpd, 2, r);
        DN(dnnl_primitive_desc_destroy(rpd));
        nd->out = nd->c;
        return nd->out;
    }
    const dnnl_exec_arg_t a[3] = { { DNNL_ARG_SRC, x->x },
                                   { DNNL_ARG_WEIGHTS, nd->w },
                                   { DNNL_ARG_DST, nd->c->x } };
    push(g->fwd, &g->nf, nd->conv_pd, 3, a);
    /* BN with batch statistics */
    nd->b = ten(g, n, cv->c2, oh, ow, g->tag);
    dnnl_batch_normalization_desc_t bn;
    DN(dnnl_batch_normalization_forward_desc_init(&bn, dnnl_forward_training, md_of(nd->c->x),
                                                  1e-3f, dnnl_use_scale | dnnl_use_shift));
    DN(dnnl_primitive_desc_create(&nd->bn_pd, &bn, NULL, g->eng, NULL));
    nd->mean = mem(g, dnnl_primitive_desc_query_md(nd->bn_pd, dnnl_query_dst_md, 1), NULL);
    nd->var = mem(g, dnnl_primitive_desc_query_md(nd->bn_pd, dnnl_query_dst_md, 2), NULL);
    nd->scale = mem(g, &bd, NULL);
    nd->shift = mem(g, &bd, NULL);
    fill(g, nd->scale, 0.5f, 1.5f);
    const dnnl_exec_arg_t b[6] = { { DNNL_ARG_SRC, nd->c->x },    { DNNL_ARG_DST, nd->b->x },
                                   { DNNL_ARG_MEAN, nd->mean },   { DNNL_ARG_VARIANCE, nd->var },
                                   { DNNL_ARG_SCALE, nd->scale }, { DNNL_ARG_SHIFT, nd->shift } };
    push(g->fwd, &g->nf, nd->bn_pd, 6, b);
    /* SiLU */
    nd->out = ten(g, n, cv->c2, oh, ow, g->tag);
    dnnl_eltwise_desc_t ed;
    DN(dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_training, dnnl_eltwise_swish,
                                      md_of(nd->b->x), 1.0f, 0.0f));
    DN(dnnl_primitive_desc_create(&nd->elt_pd, &ed, NULL, g->eng, NULL));
    const dnnl_exec_arg_t e[2] = { { DNNL_ARG_SRC, nd->b->x }, { DNNL_ARG_DST, nd->out->x } };
    push(g->fwd, &g->nf, nd->elt_pd, 2, e);
    if (res) { /* out += residual, in place */
        dnnl_binary_desc_t bd2;
        dnnl_primitive_desc_t pd;
        DN(dnnl_binary_desc_init(&bd2, dnnl_binary_add, md_of(nd->out->x), md_of(res->x),
                                 md_of(nd->out->x)));
        DN(dnnl_primitive_desc_create(&pd, &bd2, NULL, g->eng, NULL));
        const dnnl_exec_arg_t r[3] = { { DNNL_ARG_SRC_0, nd->out->x },
                                       { DNNL_ARG_SRC_1, res->x },
                                       { DNNL_ARG_DST, nd->out->x } };
        push(g->fwd, &g->nf, pd, 3, r);
        DN(dnnl_primitive_desc_destroy(pd));
    }
    return nd->out;
}

static struct ten *concat(struct g *g, struct ten *const *xs, int k)
{
    const dnnl_memory_desc_t *x0 = md_of(xs[0]->x);
    dnnl_dim_t c = 0;
    for (int i = 0; i < k; i++)
        c += md_of(xs[i]->x)->dims[1];
    struct node *nd = &g->nodes[g->nn++];
    memset(nd, 0, sizeof *nd);
    nd->type = 2;
    nd->k = k;
    nd->out = ten(g, x0->dims[0], c, x0->dims[2], x0->dims[3], g->tag);
    struct step *s = push(g->fwd, &g->nf, NULL, 0, NULL);
    s->k = k;
    s->cat_dst = nd->out->x;
    for (int i = 0; i < k; i++) {
        nd->in[i] = xs[i];
        s->cat_src[i] = xs[i]->x;
    }
    return nd->out;
}

static struct ten *maxpool(struct g *g, struct ten *x, int kk)
{
    const dnnl_memory_desc_t *xd = md_of(x->x);
    struct node *nd = &g->nodes[g->nn++];
    memset(nd, 0, sizeof *nd);
    nd->type = 3;
    nd->in[0] = x;
    nd->k = kk;
    nd->out = ten(g, xd->dims[0], xd->dims[1], xd->dims[2], xd->dims[3], g->tag);
    const dnnl_dims_t s = { 1, 1 }, k = { kk, kk }, p = { kk / 2, kk / 2 };
    dnnl_pooling_desc_t d;
    DN(dnnl_pooling_forward_desc_init(&d, dnnl_forward_training, dnnl_pooling_max, xd,
                                      md_of(nd->out->x), s, k, p, p));
    DN(dnnl_primitive_desc_create(&nd->pool_pd, &d, NULL, g->eng, NULL));
    nd->ws = mem(g, dnnl_primitive_desc_query_md(nd->pool_pd, dnnl_query_workspace_md, 0), NULL);
    const dnnl_exec_arg_t a[3] = { { DNNL_ARG_SRC, x->x },
                                   { DNNL_ARG_DST, nd->out->x },
                                   { DNNL_ARG_WORKSPACE, nd->ws } };
    push(g->fwd, &g->nf, nd->pool_pd, 3, a);
    return nd->out;
}

static struct ten *upsample(struct g *g, struct ten *x)
{
    const dnnl_memory_desc_t *xd = md_of(x->x);
    struct node *nd = &g->nodes[g->nn++];
    memset(nd, 0, sizeof *nd);
    nd->type = 4;
    nd->in[0] = x;
    nd->out = ten(g, xd->dims[0], xd->dims[1], 2 * xd->dims[2], 2 * xd->dims[3], g->tag);
    dnnl_resampling_desc_t d;
    DN(dnnl_resampling_forward_desc_init(&d, dnnl_forward_training, dnnl_resampling_nearest, NULL,
                                         xd, md_of(nd->out->x)));
    DN(dnnl_primitive_desc_create(&nd->up_pd, &d, NULL, g->eng, NULL));
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_SRC, x->x }, { DNNL_ARG_DST, nd->out->x } };
    push(g->fwd, &g->nf, nd->up_pd, 2, a);
    return nd->out;
}

/* --- backward ------------------------------------------------------------------------------ */

/* Where a gradient of t is written: its dx when it is the first, else the scratch (then *add). */
static dnnl_memory_t grad_dst(struct g *g, struct ten *t, int *add)
{
    dx_of(g, t);
    *add = t->written;
    t->written = 1;
    if (!*add) return t->dx;
    dnnl_memory_t m;
    DN(dnnl_memory_create(&m, md_of(t->x), g->eng, g->tmp));
    return m;
}

/* t's gradient += src */
static void grad_add(struct g *g, struct ten *t, dnnl_memory_t src)
{
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, md_of(t->dx), md_of(src), md_of(t->dx)));
    DN(dnnl_primitive_desc_create(&pd, &bd, NULL, g->eng, NULL));
    const dnnl_exec_arg_t a[3] = { { DNNL_ARG_SRC_0, t->dx },
                                   { DNNL_ARG_SRC_1, src },
                                   { DNNL_ARG_DST, t->dx } };
    push(g->bwd, &g->nb, pd, 3, a);
    DN(dnnl_primitive_desc_destroy(pd));
}

/* t's gradient gets src: copied when it is the first, else added. */
static void grad_from(struct g *g, struct ten *t, dnnl_memory_t src)
{
    dx_of(g, t);
    if (t->written) {
        grad_add(g, t, src);
        return;
    }
    t->written = 1;
    dnnl_primitive_desc_t pd;
    DN(dnnl_reorder_primitive_desc_create(&pd, md_of(src), g->eng, md_of(t->dx), g->eng, NULL));
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_FROM, src }, { DNNL_ARG_TO, t->dx } };
    push(g->bwd, &g->nb, pd, 2, a);
    DN(dnnl_primitive_desc_destroy(pd));
}

static void conv_bwd(struct g *g, struct node *nd, dnnl_memory_t dc, struct ten *input0)
{
    const struct trn_conv *cv = nd->cv;
    struct ten *x = nd->in[0];
    const dnnl_memory_desc_t *xd = md_of(x->x), *cd_md = md_of(nd->c->x);
    const dnnl_dims_t strides = { cv->s, cv->s }, padl = { cv->p, cv->p };
    const dnnl_dims_t padr = { (cd_md->dims[2] - 1) * cv->s + cv->k - xd->dims[2] - cv->p,
                               (cd_md->dims[3] - 1) * cv->s + cv->k - xd->dims[3] - cv->p };
    const dnnl_memory_desc_t *wmd = md_of(nd->w);
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    g->flops += 2 * 2.0 *
                (double)(cd_md->dims[0] * cd_md->dims[1] * cd_md->dims[2] * cd_md->dims[3]) *
                (double)(cv->c1 * cv->k * cv->k);
    if (x != input0) { /* no image gradient, as train.py */
        int add;
        dnnl_memory_t dx = grad_dst(g, x, &add);
        /* the weights in the layout backward data wants (its JIT kernels take another blocking
           than the forward's; given the forward's, 2.6 falls to its reference code), reordered
           from the forward's at each step, as the optimizer changes them */
        dnnl_memory_desc_t wany;
        const dnnl_dims_t wd = { cv->c2, cv->c1, cv->k, cv->k };
        DN(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any));
        DN(dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, xd, &wany, cd_md,
                                                    strides, padl, padr));
        DN(dnnl_primitive_desc_create(&pd, &cd, NULL, g->eng, nd->conv_pd));
        dnnl_memory_t wb = nd->w;
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (!dnnl_memory_desc_equal(want, wmd)) {
            wb = mem(g, want, NULL);
            dnnl_primitive_desc_t rpd;
            DN(dnnl_reorder_primitive_desc_create(&rpd, wmd, g->eng, want, g->eng, NULL));
            const dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, nd->w }, { DNNL_ARG_TO, wb } };
            push(g->bwd, &g->nb, rpd, 2, r);
            DN(dnnl_primitive_desc_destroy(rpd));
        }
        const dnnl_exec_arg_t a[3] = { { DNNL_ARG_DIFF_DST, dc },
                                       { DNNL_ARG_WEIGHTS, wb },
                                       { DNNL_ARG_DIFF_SRC, dx } };
        push(g->bwd, &g->nb, pd, 3, a);
        DN(dnnl_primitive_desc_destroy(pd));
        if (add) grad_add(g, x, dx);
    } else {
        g->flops -= 2.0 *
                    (double)(cd_md->dims[0] * cd_md->dims[1] * cd_md->dims[2] * cd_md->dims[3]) *
                    (double)(cv->c1 * cv->k * cv->k);
    }
    dnnl_memory_desc_t dwd, dbd;
    const dnnl_dims_t wdims = { cv->c2, cv->c1, cv->k, cv->k }, bdims = { cv->c2 };
    DN(dnnl_memory_desc_init_by_tag(&dwd, 4, wdims, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&dbd, 1, bdims, dnnl_f32, dnnl_a));
    DN(dnnl_convolution_backward_weights_desc_init(
        &cd, dnnl_convolution_direct, xd, &dwd, cv->bn ? NULL : &dbd, cd_md, strides, padl, padr));
    DN(dnnl_primitive_desc_create(&pd, &cd, NULL, g->eng, nd->conv_pd));
    dnnl_memory_t dw =
        mem(g, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0), NULL);
    dnnl_memory_t db = cv->bn ? NULL : mem(g, &dbd, NULL);
    const dnnl_exec_arg_t a[4] = { { DNNL_ARG_SRC, x->x },
                                   { DNNL_ARG_DIFF_DST, dc },
                                   { DNNL_ARG_DIFF_WEIGHTS, dw },
                                   { DNNL_ARG_DIFF_BIAS, db } };
    push(g->bwd, &g->nb, pd, cv->bn ? 3 : 4, a);
    DN(dnnl_primitive_desc_destroy(pd));
    /* to OIHW for the optimizer on the flat arena */
    dnnl_memory_desc_t od;
    DN(dnnl_memory_desc_init_by_tag(&od, 4, wdims, dnnl_f32, dnnl_oihw));
    dnnl_memory_t ow = mem(g, &od, NULL);
    DN(dnnl_reorder_primitive_desc_create(&pd, md_of(dw), g->eng, &od, g->eng, NULL));
    const dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, dw }, { DNNL_ARG_TO, ow } };
    push(g->bwd, &g->nb, pd, 2, r);
    DN(dnnl_primitive_desc_destroy(pd));
}

static void node_bwd(struct g *g, struct node *nd, struct ten *input0)
{
    int add;
    dnnl_primitive_desc_t pd;
    switch (nd->type) {
    case 0: {
        dnnl_memory_t dout = dx_of(g, nd->out);
        if (nd->res) grad_from(g, nd->res, dout);
        /* swish */
        dnnl_eltwise_desc_t ed;
        DN(dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_swish, md_of(nd->b->x),
                                           md_of(nd->b->x), 1.0f, 0.0f));
        DN(dnnl_primitive_desc_create(&pd, &ed, NULL, g->eng, nd->elt_pd));
        const dnnl_exec_arg_t e[3] = { { DNNL_ARG_SRC, nd->b->x },
                                       { DNNL_ARG_DIFF_DST, dout },
                                       { DNNL_ARG_DIFF_SRC, dx_of(g, nd->b) } };
        push(g->bwd, &g->nb, pd, 3, e);
        DN(dnnl_primitive_desc_destroy(pd));
        /* BN */
        dnnl_batch_normalization_desc_t bn;
        DN(dnnl_batch_normalization_backward_desc_init(&bn, dnnl_backward, md_of(nd->c->x),
                                                       md_of(nd->c->x), 1e-3f,
                                                       dnnl_use_scale | dnnl_use_shift));
        DN(dnnl_primitive_desc_create(&pd, &bn, NULL, g->eng, nd->bn_pd));
        dnnl_memory_t dsc = mem(g, md_of(nd->scale), NULL), dsh = mem(g, md_of(nd->shift), NULL);
        const dnnl_exec_arg_t b[9] = {
            { DNNL_ARG_SRC, nd->c->x },
            { DNNL_ARG_MEAN, nd->mean },
            { DNNL_ARG_VARIANCE, nd->var },
            { DNNL_ARG_DIFF_DST, nd->b->dx },
            { DNNL_ARG_SCALE, nd->scale },
            { DNNL_ARG_SHIFT, nd->shift },
            { DNNL_ARG_DIFF_SRC, dx_of(g, nd->c) },
            { DNNL_ARG_DIFF_SCALE, dsc },
            { DNNL_ARG_DIFF_SHIFT, dsh },
        };
        push(g->bwd, &g->nb, pd, 9, b);
        DN(dnnl_primitive_desc_destroy(pd));
        conv_bwd(g, nd, nd->c->dx, input0);
        break;
    }
    case 1: { /* Detect: the loss's NCHW gradient into the blocked layout */
        DN(dnnl_reorder_primitive_desc_create(&pd, md_of(nd->dplain), g->eng, md_of(nd->c->x),
                                              g->eng, NULL));
        const dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, nd->dplain },
                                       { DNNL_ARG_TO, dx_of(g, nd->c) } };
        push(g->bwd, &g->nb, pd, 2, r);
        DN(dnnl_primitive_desc_destroy(pd));
        conv_bwd(g, nd, nd->c->dx, input0);
        break;
    }
    case 2: {
        struct step *s = push(g->bwd, &g->nb, NULL, 0, NULL);
        s->bwd = 1;
        s->k = nd->k;
        s->cat_dst = dx_of(g, nd->out);
        for (int i = 0; i < nd->k; i++) {
            s->cat_src[i] = dx_of(g, nd->in[i]);
            s->acc[i] = nd->in[i]->written;
            nd->in[i]->written = 1;
        }
        break;
    }
    case 3: {
        const dnnl_memory_desc_t *xd = md_of(nd->in[0]->x);
        const dnnl_dims_t s = { 1, 1 }, k = { nd->k, nd->k }, p = { nd->k / 2, nd->k / 2 };
        dnnl_pooling_desc_t d;
        DN(dnnl_pooling_backward_desc_init(&d, dnnl_pooling_max, xd, md_of(nd->out->x), s, k, p,
                                           p));
        DN(dnnl_primitive_desc_create(&pd, &d, NULL, g->eng, nd->pool_pd));
        dnnl_memory_t dx = grad_dst(g, nd->in[0], &add);
        const dnnl_exec_arg_t a[3] = { { DNNL_ARG_DIFF_DST, dx_of(g, nd->out) },
                                       { DNNL_ARG_WORKSPACE, nd->ws },
                                       { DNNL_ARG_DIFF_SRC, dx } };
        push(g->bwd, &g->nb, pd, 3, a);
        DN(dnnl_primitive_desc_destroy(pd));
        if (add) grad_add(g, nd->in[0], dx);
        break;
    }
    case 4: {
        dnnl_resampling_desc_t d;
        DN(dnnl_resampling_backward_desc_init(&d, dnnl_resampling_nearest, NULL,
                                              md_of(nd->in[0]->x), md_of(nd->out->x)));
        DN(dnnl_primitive_desc_create(&pd, &d, NULL, g->eng, nd->up_pd));
        dnnl_memory_t dx = grad_dst(g, nd->in[0], &add);
        const dnnl_exec_arg_t a[2] = { { DNNL_ARG_DIFF_DST, dx_of(g, nd->out) },
                                       { DNNL_ARG_DIFF_SRC, dx } };
        push(g->bwd, &g->nb, pd, 2, a);
        DN(dnnl_primitive_desc_destroy(pd));
        if (add) grad_add(g, nd->in[0], dx);
        break;
    }
    }
}

/* --- the model ----------------------------------------------------------------------------- */

static struct ten *bottleneck(struct g *g, const struct trn_model *m, int cv1, struct ten *x,
                              bool sc)
{
    struct ten *t = conv(g, trn_model_conv(m, cv1), x, NULL);
    return conv(g, trn_model_conv(m, cv1 + 1), t, sc ? x : NULL);
}

static void build(struct g *g, const struct trn_model *m, int batch, int img)
{
    const struct trn_model_info *I = trn_model_info(m);
    struct ten *input = ten(g, batch, 3, img, img, dnnl_nchw);
    struct ten *out[TRN_MODEL_MAX_LAYERS];
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = trn_model_layer(m, i);
        struct ten *ins[TRN_MODEL_MAX_FROM];
        for (int j = 0; j < L->n_from; j++)
            ins[j] = L->from[j] < 0 ? input : out[L->from[j]];
        struct ten *x = ins[0], *cat[4];
        const int c0 = L->conv0;
        const bool sc = L->shortcut && L->c_in == L->c_out;
        switch (L->type) {
        case TRN_MOD_CONV:
            for (int j = 0; j < L->n; j++)
                x = conv(g, trn_model_conv(m, c0 + j), x, NULL);
            break;
        case TRN_MOD_BOTTLENECK:
            for (int j = 0; j < L->n; j++)
                x = bottleneck(g, m, c0 + 2 * j, x, sc);
            break;
        case TRN_MOD_C3:
            cat[0] = conv(g, trn_model_conv(m, c0), x, NULL);
            for (int j = 0; j < L->n; j++)
                cat[0] = bottleneck(g, m, c0 + 3 + 2 * j, cat[0], L->shortcut);
            cat[1] = conv(g, trn_model_conv(m, c0 + 1), x, NULL);
            x = conv(g, trn_model_conv(m, c0 + 2), concat(g, cat, 2), NULL);
            break;
        case TRN_MOD_SPPF:
            cat[0] = conv(g, trn_model_conv(m, c0), x, NULL);
            for (int j = 1; j < 4; j++)
                cat[j] = maxpool(g, cat[j - 1], L->k);
            x = conv(g, trn_model_conv(m, c0 + 1), concat(g, cat, 4), NULL);
            break;
        case TRN_MOD_UPSAMPLE:
            x = upsample(g, x);
            break;
        case TRN_MOD_CONCAT:
            x = concat(g, ins, L->n_from);
            break;
        case TRN_MOD_DETECT:
            for (int l = 0; l < L->n_conv; l++)
                x = conv(g, trn_model_conv(m, c0 + l), ins[l], NULL);
            break;
        }
        out[i] = x;
    }
    g->tmp = aligned_alloc(64, (g->max_bytes + 63) / 64 * 64);
    if (!g->tmp) exit(1);
    for (int i = g->nn - 1; i >= 0; i--)
        node_bwd(g, &g->nodes[i], input);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const int img = argc > 1 ? atoi(argv[1]) : 320, batch = argc > 2 ? atoi(argv[2]) : 16;
    const int threads = argc > 3 ? atoi(argv[3]) : 2, rounds = argc > 4 ? atoi(argv[4]) : 5;
    if (img < 64 || img % 32 || batch < 1 || threads < 1 || rounds < 1 || rounds > 99) {
        fprintf(stderr, "usage: bench_onednn_train [IMG=320] [BATCH=16] [THREADS=2] [ROUNDS=5]\n");
        return 2;
    }
    char err[256];
    struct trn_model *m = NULL;
    if (trn_model_load(TRN_TEST_MODELS_DIR "/yolov5n.yaml", NULL, &m, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    trn_model_init(m, 0);
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.threads = threads;
    struct trn_net *net = NULL;
    if (trn_net_create(m, batch, img, img, &o, &net, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const size_t n_img = (size_t)batch * 3 * (size_t)img * (size_t)img;
    float *x = malloc(n_img * sizeof(float));
    if (!x) return 1;
    for (size_t i = 0; i < n_img; i++)
        x[i] = (float)(i % 251) / 251.0f;
    const int nl = trn_net_levels(net);
    float *d[TRN_MODEL_MAX_LEVELS];
    const float *dc[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < nl; l++) {
        const long n = trn_net_output_shape(net, l, NULL);
        d[l] = malloc((size_t)n * sizeof(float));
        if (!d[l]) return 1;
        for (long i = 0; i < n; i++)
            d[l][i] = 1e-4f * (float)((i % 7) - 3);
        dc[l] = d[l];
    }

    static struct g g;
    DN(dnnl_engine_create(&g.eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&g.st, g.eng, dnnl_stream_default_flags));
    g.seed = 1;
    g.tag = dnnl_nChw16c;
    build(&g, m, batch, img);
    omp_set_num_threads(threads);

    double t[3][99];
    for (int r = -1; r < rounds; r++) { /* round -1 warms both up */
        double t0 = now();
        if (trn_net_forward(net, x, true, NULL) < 0) return 1;
        trn_net_zero_grad(net);
        if (trn_net_backward(net, dc) < 0) return 1;
        if (r >= 0) t[0][r] = now() - t0;
        t0 = now();
        for (int i = 0; i < g.nf; i++)
            run(&g.fwd[i], g.st);
        const double t1 = now();
        for (int i = 0; i < g.nb; i++)
            run(&g.bwd[i], g.st);
        DN(dnnl_stream_wait(g.st));
        if (r >= 0) {
            t[1][r] = now() - t0;
            t[2][r] = t1 - t0;
        }
    }
    printf("yolov5n training step (forward + backward), img %d batch %d, %d thread(s); %.2f GFLOP "
           "per step in the convolutions; %d forward and %d backward oneDNN steps; BLAS %s\n",
           img, batch, threads, g.flops * 1e-9, g.nf, g.nb, kern_blas_core());
    static const char *const names[2] = { "ours (reference ops, NCHW)", "oneDNN, nChw16c" };
    double med[3];
    for (int a = 0; a < 3; a++) {
        qsort(t[a], (size_t)rounds, sizeof(double), cmp_double);
        med[a] = t[a][rounds / 2];
    }
    for (int a = 0; a < 2; a++) {
        printf("%-28s %8.1f ms per step  %6.1f img/s  %6.1f GFLOP/s  (sorted rounds, ms:", names[a],
               med[a] * 1e3, batch / med[a], g.flops / med[a] * 1e-9);
        for (int r = 0; r < rounds; r++)
            printf(" %.1f", t[a][r] * 1e3);
        printf(")\n");
    }
    printf("oneDNN forward alone: %.1f ms\n", med[2] * 1e3);
    printf("ratio ours / oneDNN time: %.2f\n", med[0] / med[1]);
    for (int l = 0; l < nl; l++)
        free(d[l]);
    free(x);
    trn_net_destroy(net);
    trn_model_destroy(m);
    return 0;
}
