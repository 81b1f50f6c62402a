/*
 * conv2d through cuDNN 9 (its own translation unit, style guide rule 30).
 *
 * Shapes (NCHW, float32, dense, device memory): x, dx (n, c_in, h_in, w_in); w, dw (c_out, c_in,
 * k_h, k_w) (PyTorch Conv2d layout); y, dy (n, c_out, h_out, w_out); bias, db (c_out). x and dx
 * may step x_nstride elements per image (a concat's channel slice): the plan's x descriptor is
 * then NCHW with that n-stride (cudnnSetTensor4dDescriptorEx), part of the plan's key; such a
 * plan runs the dense plan's algorithms, so a slice's results equal a dense tensor's bit for bit.
 * Groups 1, dilation 1, zero padding; cross-correlation as PyTorch (CUDNN_CROSS_CORRELATION).
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dw and db overwrite unless accum has
 * KERN_ACCUM_DPARAM. Accumulation is cuDNN's beta (1 adds, 0 overwrites without reading, so a
 * NaN-filled output is fine).
 *
 * API choice: the legacy cudnnConvolution* calls, not the graph (backend) API. They still ship,
 * complete, in cuDNN 9 (marked deprecated only under CUDNN_WARN_DEPRECATED); they cover fwd,
 * bwd-data and bwd-filter for fp32 NCHW and for bf16/fp16 NHWC with fp32 compute; and they give
 * per-shape algorithm search (Find) and exact workspace sizes in a few hundred lines. The graph
 * API earns its verbosity only for fusions (conv + bias + SiLU, conv + BN statistics): that is
 * the next step, and it slots in behind the same struct kern_conv_plan.
 *
 * Plans: one per distinct (struct kern_conv2d, data type, layout), made at setup by
 * kern_cuda_conv2d_workspace_size (or lazily by the first op on a new shape): descriptors, the
 * three algorithms and their workspace sizes. The algorithms come from kern_plan_choose
 * (kern_plan.h): the context's plan table when it holds a fitting entry, else cuDNN's heuristics
 * (cudnnGet*_v7: ranked from the shape alone, so every process on the same GPU model and cuDNN
 * takes the same algorithm, deterministic unless kern_ctx_opts.any_algo), or with
 * kern_ctx_opts.tune a timed cudnnFind*. Every choice is put into the table, whose hash then
 * names what ran. The caller reserves the maximum workspace once (kern_ctx_reserve); the ops then
 * never allocate. Planning may allocate (Find), so plan every shape before capturing a CUDA
 * graph.
 *
 * Math, a deliberate choice: every float32 convolution runs in true FP32 (CUDNN_FMA_MATH, never
 * TF32, on Hopper as anywhere), so that it matches the fp32 CPU reference to fp32 tolerances.
 * The descriptor's math type alone does not guarantee it: cuDNN reports each algorithm
 * with the math type it ran, and CUDNN_DEFAULT_MATH permits TF32 on Ampere and later; so the
 * choice keeps only FMA- or default-math results for float32 (cands() below) and runs them with
 * CUDNN_FMA_MATH set (math_of()), so an algorithm that could only run in TF32 fails the call
 * rather than quietly computing in TF32. PyTorch's default differs (torch.backends.cudnn.
 * allow_tf32 is True): its fp32 comparisons (tests/trainer/bench_torch_step.py with --amp off,
 * make_parity_ref.py) turn TF32 off to compare like with like; the speed path is bf16 AMP, where
 * the question does not arise. The bf16/fp16 path (kern_cuda_conv2d_lowp_*, "lowp" below) sets
 * the data type per plan with CUDNN_DATA_FLOAT compute and CUDNN_TENSOR_OP_MATH (tensor cores,
 * fp32 sums), in NCHW or NHWC.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda_internal.h"
#include "kern_plan.h"

void kern_cuda_conv_release(struct kern_ctx *ctx);

#if KERN_HAVE_CUDNN
#include <cudnn.h>

/* Largest workspace one algorithm may ask for; bigger ones are passed over (kern_plan.h). */
#define KERN_CONV_WS_CAP KERN_PLAN_WS_CAP
#define KERN_CONV_NALGO  16

struct kern_conv_plan {
    struct kern_conv_plan *next;
    struct kern_conv2d d;  /* the key (conv_key_eq: the shape and the effective x n-stride) ... */
    cudnnDataType_t dtype; /* ... with the tensor data type (FLOAT, BFLOAT16, HALF) ... */
    int layout;            /* ... and the layout (KERN_LAYOUT_*: cuDNN format NCHW or NHWC) ... */
    size_t x_ld, y_ld;     /* ... and the lowp strides (kern_conv2d_lowp STRIDES; 0 dense) */
    int h_out, w_out;      /* output plane */
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t fwd_math, data_math, filter_math; /* from the search */
    size_t ws_fwd, ws_data, ws_filter;                /* bytes each algorithm needs */
};

static int cudnn_fail(struct kern_ctx *ctx, cudnnStatus_t s, const char *where)
{
    snprintf(kern_cuda_st(ctx)->err, KERN_CUDA_ERRLEN, "%s: %s", where, cudnnGetErrorString(s));
    return s == CUDNN_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

#define CUDNN_TRY(ctx, expr)                                               \
    do {                                                                   \
        const cudnnStatus_t s_ = (expr);                                   \
        if (s_ != CUDNN_STATUS_SUCCESS) return cudnn_fail(ctx, s_, #expr); \
    } while (0)

/* Elements from one image of x to the next: x_nstride, or c_in h_in w_in when 0 (dense). */
static size_t conv_x_nstride(const struct kern_conv2d *d)
{
    return d->x_nstride ? d->x_nstride : (size_t)d->c_in * d->h_in * d->w_in;
}

/* Plan keys compare field by field (x_nstride after the ints leaves padding that memcmp would
 * read), with the effective stride: 0 and the dense stride are one plan. */
static bool conv_key_eq(const struct kern_conv2d *a, const struct kern_conv2d *b)
{
    return a->n == b->n && a->c_in == b->c_in && a->h_in == b->h_in && a->w_in == b->w_in &&
           a->c_out == b->c_out && a->k_h == b->k_h && a->k_w == b->k_w &&
           a->stride_h == b->stride_h && a->stride_w == b->stride_w && a->pad_h == b->pad_h &&
           a->pad_w == b->pad_w && conv_x_nstride(a) == conv_x_nstride(b);
}

static int conv_out_hw(const struct kern_conv2d *d, int *oh, int *ow)
{
    if (!d || d->n < 1 || d->c_in < 1 || d->h_in < 1 || d->w_in < 1 || d->c_out < 1) return -EINVAL;
    if (d->k_h < 1 || d->k_w < 1 || d->stride_h < 1 || d->stride_w < 1) return -EINVAL;
    if (d->pad_h < 0 || d->pad_w < 0) return -EINVAL;
    if (d->x_nstride && d->x_nstride < (size_t)d->c_in * d->h_in * d->w_in) return -EINVAL;
    const long long hp = (long long)d->h_in + 2LL * d->pad_h,
                    wp = (long long)d->w_in + 2LL * d->pad_w;
    if (hp < d->k_h || wp < d->k_w) return -EINVAL;
    *oh = (int)((hp - d->k_h) / d->stride_h + 1);
    *ow = (int)((wp - d->k_w) / d->stride_w + 1);
    return 0;
}

static void plan_free(struct kern_conv_plan *p)
{
    if (!p) return;
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->bd) cudnnDestroyTensorDescriptor(p->bd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
    free(p);
}

void kern_cuda_conv_release(struct kern_ctx *ctx)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    for (struct kern_conv_plan *p = st->plans, *nx; p; p = nx) {
        nx = p->next;
        plan_free(p);
    }
    st->plans = NULL;
    if (st->cudnn) cudnnDestroy((cudnnHandle_t)st->cudnn);
    st->cudnn = NULL;
}

static int handle_get(struct kern_ctx *ctx, cudnnHandle_t *h)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    if (!st->cudnn) {
        cudnnHandle_t nh;
        CUDNN_TRY(ctx, cudnnCreate(&nh));
        const cudnnStatus_t s = cudnnSetStream(nh, st->stream);
        if (s != CUDNN_STATUS_SUCCESS) {
            cudnnDestroy(nh);
            return cudnn_fail(ctx, s, "cudnnSetStream");
        }
        st->cudnn = nh;
        /* the device part of every plan key (kern_plan.h "THE KEY") */
        cudaDeviceProp prop;
        const cudaError_t e = cudaGetDeviceProperties(&prop, ctx->device);
        if (e != cudaSuccess) return kern_cuda_fail(ctx, e, "cudaGetDeviceProperties");
        kern_plan_gpu_name(st->gpu_key, prop.name);
        st->sms = prop.multiProcessorCount;
        st->cudnn_version = (int)cudnnGetVersion();
    }
    *h = (cudnnHandle_t)st->cudnn;
    return 0;
}

/* The math type to run a chosen algorithm with: FMA for float32 whatever cuDNN reported. */
static cudnnMathType_t math_of(const struct kern_conv_plan *p, cudnnMathType_t found)
{
    return p->dtype == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : found;
}

/* cuDNN's perf results as kern_plan candidates, in cuDNN's order; float32 takes only FMA- or
 * default-math results (no TF32: see "Math" above). */
template <typename Perf>
static int cands(const Perf *r, int n, cudnnDataType_t dt, struct kern_plan_cand *c, int cap)
{
    int m = 0;
    for (int i = 0; i < n && m < cap; i++, m++) {
        c[m].algo = (int)r[i].algo;
        c[m].math = (int)r[i].mathType;
        c[m].det = r[i].determinism == CUDNN_DETERMINISTIC;
        c[m].ok = r[i].status == CUDNN_STATUS_SUCCESS;
        c[m].math_ok = dt != CUDNN_DATA_FLOAT || r[i].mathType == CUDNN_FMA_MATH ||
                       r[i].mathType == CUDNN_DEFAULT_MATH;
        c[m].memory = r[i].memory;
        c[m].ms = r[i].time;
    }
    return m;
}

/* What kern_plan_choose asks of cuDNN for one plan (struct kern_plan_backend's arg). */
struct choose_arg {
    struct kern_ctx *ctx;
    cudnnHandle_t h;
    struct kern_conv_plan *p;
};

/* Heuristics (find false: cudnnGet*_v7, ranked, nothing run) or a timed search (cudnnFind*:
 * runs every algorithm, allocates). The descriptor's math type is the plan's default
 * (plan_describe), so both see the same math as a later run of the same shape. */
static int ask_cudnn(void *arg, int op, struct kern_plan_cand *c, int cap, bool find)
{
    const struct choose_arg *a = (const struct choose_arg *)arg;
    const struct kern_conv_plan *p = a->p;
    const cudnnMathType_t m0 = p->dtype == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    int got = 0;
    cudnnStatus_t s = cudnnSetConvolutionMathType(p->cd, m0);
    if (s != CUDNN_STATUS_SUCCESS) return cudnn_fail(a->ctx, s, "cudnnSetConvolutionMathType");
    if (op == KERN_PLAN_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[KERN_CONV_NALGO];
        s = find ? cudnnFindConvolutionForwardAlgorithm(a->h, p->xd, p->wd, p->cd, p->yd,
                                                        KERN_CONV_NALGO, &got, r)
                 : cudnnGetConvolutionForwardAlgorithm_v7(a->h, p->xd, p->wd, p->cd, p->yd,
                                                          KERN_CONV_NALGO, &got, r);
        if (s == CUDNN_STATUS_SUCCESS) return cands(r, got, p->dtype, c, cap);
    } else if (op == KERN_PLAN_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[KERN_CONV_NALGO];
        s = find ? cudnnFindConvolutionBackwardDataAlgorithm(a->h, p->wd, p->yd, p->cd, p->xd,
                                                             KERN_CONV_NALGO, &got, r)
                 : cudnnGetConvolutionBackwardDataAlgorithm_v7(a->h, p->wd, p->yd, p->cd, p->xd,
                                                               KERN_CONV_NALGO, &got, r);
        if (s == CUDNN_STATUS_SUCCESS) return cands(r, got, p->dtype, c, cap);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[KERN_CONV_NALGO];
        s = find ? cudnnFindConvolutionBackwardFilterAlgorithm(a->h, p->xd, p->yd, p->cd, p->wd,
                                                               KERN_CONV_NALGO, &got, r)
                 : cudnnGetConvolutionBackwardFilterAlgorithm_v7(a->h, p->xd, p->yd, p->cd, p->wd,
                                                                 KERN_CONV_NALGO, &got, r);
        if (s == CUDNN_STATUS_SUCCESS) return cands(r, got, p->dtype, c, cap);
    }
    return cudnn_fail(a->ctx, s, find ? "cudnnFind*Algorithm" : "cudnnGet*Algorithm_v7");
}

static int cb_heur(void *arg, int op, struct kern_plan_cand *c, int cap)
{
    return ask_cudnn(arg, op, c, cap, false);
}

static int cb_find(void *arg, int op, struct kern_plan_cand *c, int cap)
{
    return ask_cudnn(arg, op, c, cap, true);
}

/* Whether a table entry runs on this shape here: cuDNN sizes its workspace (an algorithm it
 * does not support for the shape fails the query). float32 entries must be FMA math. */
static int cb_check(void *arg, int op, const struct kern_plan_val *v, size_t *ws)
{
    const struct choose_arg *a = (const struct choose_arg *)arg;
    const struct kern_conv_plan *p = a->p;
    const cudnnMathType_t m = (cudnnMathType_t)v->math;
    if (p->dtype == CUDNN_DATA_FLOAT && m != CUDNN_FMA_MATH && m != CUDNN_DEFAULT_MATH)
        return -EINVAL;
    if (cudnnSetConvolutionMathType(p->cd, math_of(p, m)) != CUDNN_STATUS_SUCCESS) return -EINVAL;
    cudnnStatus_t s;
    if (op == KERN_PLAN_FWD)
        s = cudnnGetConvolutionForwardWorkspaceSize(a->h, p->xd, p->wd, p->cd, p->yd,
                                                    (cudnnConvolutionFwdAlgo_t)v->algo, ws);
    else if (op == KERN_PLAN_DATA)
        s = cudnnGetConvolutionBackwardDataWorkspaceSize(
            a->h, p->wd, p->yd, p->cd, p->xd, (cudnnConvolutionBwdDataAlgo_t)v->algo, ws);
    else
        s = cudnnGetConvolutionBackwardFilterWorkspaceSize(
            a->h, p->xd, p->yd, p->cd, p->wd, (cudnnConvolutionBwdFilterAlgo_t)v->algo, ws);
    return s == CUDNN_STATUS_SUCCESS ? 0 : -ENOTSUP;
}

static int kern_dt_of(cudnnDataType_t dt)
{
    return dt == CUDNN_DATA_BFLOAT16 ? KERN_DT_BF16
           : dt == CUDNN_DATA_HALF   ? KERN_DT_F16
                                     : KERN_DT_F32;
}

/* The key of pass op of plan p on this context's device (kern_plan.h "THE KEY"). */
static void plan_key(const struct kern_cuda_state *st, const struct kern_conv_plan *p, int op,
                     struct kern_plan_key *k)
{
    memset(k, 0, sizeof(*k));
    memcpy(k->gpu, st->gpu_key, sizeof(k->gpu));
    k->sms = st->sms;
    k->cudnn = st->cudnn_version;
    k->op = op;
    k->d = p->d;
    k->dtype = kern_dt_of(p->dtype);
    k->layout = p->layout;
}

/* The three algorithms of p (kern_plan_choose for each pass). */
static int plan_choose(struct kern_ctx *ctx, cudnnHandle_t h, struct kern_conv_plan *p)
{
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    struct choose_arg a = { ctx, h, p };
    const struct kern_plan_backend b = { &a, cb_check, cb_heur, cb_find };
    for (int op = 0; op < 3; op++) {
        struct kern_plan_key k;
        struct kern_plan_val v;
        size_t ws = 0;
        int how = 0;
        plan_key(st, p, op, &k);
        const int rc = kern_plan_choose(st->plan_table, &k, st->any_algo, st->tune,
                                        KERN_CONV_WS_CAP, &b, &v, &ws, &how);
        if (rc == -ENOTSUP) {
            snprintf(st->err, KERN_CUDA_ERRLEN, "conv %s: no algorithm of cuDNN fits",
                     kern_plan_op_name(op));
            return -EIO;
        }
        if (rc < 0) return rc;
        st->plan_how[how]++;
        const cudnnMathType_t m = math_of(p, (cudnnMathType_t)v.math);
        if (op == KERN_PLAN_FWD)
            p->fwd = (cudnnConvolutionFwdAlgo_t)v.algo, p->fwd_math = m, p->ws_fwd = ws;
        else if (op == KERN_PLAN_DATA)
            p->bwd_data = (cudnnConvolutionBwdDataAlgo_t)v.algo, p->data_math = m, p->ws_data = ws;
        else
            p->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)v.algo, p->filter_math = m,
            p->ws_filter = ws;
    }
    return 0;
}

/*
 * A channel slice runs the algorithms of the dense plan of its shape where cuDNN takes them on
 * the slice's descriptor (each reports a workspace size), so that where a producer writes (its
 * own buffer or a concat's slice) never changes a bit of the result: a search of its own times
 * the algorithms anew and may pick another, which sums dw in another order (seen on an H200:
 * k1 bwd_filter, 2.72706890 vs 2.72706556). Returns 0, or 1 to search instead.
 */
static int plan_inherit(cudnnHandle_t h, struct kern_conv_plan *p,
                        const struct kern_conv_plan *dense)
{
    size_t f = 0, dd = 0, w = 0;
    if (cudnnSetConvolutionMathType(p->cd, dense->fwd_math) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionForwardWorkspaceSize(h, p->xd, p->wd, p->cd, p->yd, dense->fwd, &f) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnSetConvolutionMathType(p->cd, dense->data_math) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->wd, p->yd, p->cd, p->xd, dense->bwd_data,
                                                     &dd) != CUDNN_STATUS_SUCCESS ||
        cudnnSetConvolutionMathType(p->cd, dense->filter_math) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, p->xd, p->yd, p->cd, p->wd, dense->bwd_filter, &w) != CUDNN_STATUS_SUCCESS ||
        f > KERN_CONV_WS_CAP || dd > KERN_CONV_WS_CAP || w > KERN_CONV_WS_CAP)
        return 1;
    p->fwd = dense->fwd, p->fwd_math = dense->fwd_math, p->ws_fwd = f;
    p->bwd_data = dense->bwd_data, p->data_math = dense->data_math, p->ws_data = dd;
    p->bwd_filter = dense->bwd_filter, p->filter_math = dense->filter_math, p->ws_filter = w;
    return 0;
}

#define TRY(x)                           \
    do {                                 \
        const int try_rc_ = (x);         \
        if (try_rc_ < 0) return try_rc_; \
    } while (0)

/* A (n, c, h, w) tensor of p's type in p's layout with stride ld (kern_conv2d_lowp STRIDES; 0:
 * packed in fmt). */
static int lp_describe(struct kern_ctx *ctx, cudnnTensorDescriptor_t t,
                       const struct kern_conv_plan *p, int c, int h, int w, size_t ld,
                       cudnnTensorFormat_t fmt)
{
    const int n = p->d.n;
    if (!ld) {
        CUDNN_TRY(ctx, cudnnSetTensor4dDescriptor(t, fmt, p->dtype, n, c, h, w));
        return 0;
    }
    const bool nhwc = p->layout == KERN_LAYOUT_NHWC;
    const size_t img = nhwc ? (size_t)h * w * ld : ld;
    if (img > (size_t)INT_MAX) return cudnn_fail(ctx, CUDNN_STATUS_BAD_PARAM, "lowp stride");
    if (nhwc)
        CUDNN_TRY(ctx, cudnnSetTensor4dDescriptorEx(t, p->dtype, n, c, h, w, (int)img, 1,
                                                    w * (int)ld, (int)ld));
    else
        CUDNN_TRY(ctx,
                  cudnnSetTensor4dDescriptorEx(t, p->dtype, n, c, h, w, (int)img, h * w, w, 1));
    return 0;
}

/* p's descriptors, from p->d, dtype, layout and strides; the math type is the plan's default. */
static int plan_describe(struct kern_ctx *ctx, struct kern_conv_plan *p)
{
    const struct kern_conv2d *const d = &p->d;
    const cudnnTensorFormat_t fmt =
        p->layout == KERN_LAYOUT_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_TRY(ctx, cudnnCreateTensorDescriptor(&p->xd));
    CUDNN_TRY(ctx, cudnnCreateTensorDescriptor(&p->yd));
    CUDNN_TRY(ctx, cudnnCreateTensorDescriptor(&p->bd));
    CUDNN_TRY(ctx, cudnnCreateFilterDescriptor(&p->wd));
    CUDNN_TRY(ctx, cudnnCreateConvolutionDescriptor(&p->cd));
    if (conv_x_nstride(d) != (size_t)d->c_in * d->h_in * d->w_in) {
        /* a channel slice: NCHW strides with a wider image step (float32 NCHW only) */
        if (conv_x_nstride(d) > (size_t)INT_MAX)
            return cudnn_fail(ctx, CUDNN_STATUS_BAD_PARAM, "x_nstride");
        CUDNN_TRY(ctx, cudnnSetTensor4dDescriptorEx(p->xd, p->dtype, d->n, d->c_in, d->h_in,
                                                    d->w_in, (int)conv_x_nstride(d),
                                                    d->h_in * d->w_in, d->w_in, 1));
    } else {
        TRY(lp_describe(ctx, p->xd, p, d->c_in, d->h_in, d->w_in, p->x_ld, fmt));
    }
    TRY(lp_describe(ctx, p->yd, p, d->c_out, p->h_out, p->w_out, p->y_ld, fmt));
    CUDNN_TRY(ctx,
              cudnnSetTensor4dDescriptor(p->bd, CUDNN_TENSOR_NCHW, p->dtype, 1, d->c_out, 1, 1));
    CUDNN_TRY(ctx,
              cudnnSetFilter4dDescriptor(p->wd, p->dtype, fmt, d->c_out, d->c_in, d->k_h, d->k_w));
    CUDNN_TRY(ctx,
              cudnnSetConvolution2dDescriptor(p->cd, d->pad_h, d->pad_w, d->stride_h, d->stride_w,
                                              1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    /* float32: no TF32 (matches the fp32 reference); 16-bit types: tensor cores, fp32 sums (the
     * compute type above is FLOAT: cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configurations). */
    CUDNN_TRY(ctx, cudnnSetConvolutionMathType(p->cd, p->dtype == CUDNN_DATA_FLOAT
                                                          ? CUDNN_FMA_MATH
                                                          : CUDNN_TENSOR_OP_MATH));
    int n, c, oh, ow;
    CUDNN_TRY(ctx, cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &n, &c, &oh, &ow));
    if (n != d->n || c != d->c_out || oh != p->h_out || ow != p->w_out)
        return cudnn_fail(ctx, CUDNN_STATUS_BAD_PARAM, "output shape");
    return 0;
}

/* dense: the plan of the same shape on dense x, whose algorithms a slice's plan takes. */
static int plan_build(struct kern_ctx *ctx, cudnnHandle_t h, struct kern_conv_plan *p,
                      const struct kern_conv_plan *dense)
{
    const int rc = plan_describe(ctx, p);
    if (rc < 0) return rc;
    if (dense && plan_inherit(h, p, dense) == 0) return 0;
    return plan_choose(ctx, h, p);
}

/* The cached plan of shape d, data type dt and layout, made on first use. */
static int plan_get(struct kern_ctx *ctx, const struct kern_conv2d *d, cudnnDataType_t dt,
                    int layout, size_t x_ld, size_t y_ld, struct kern_conv_plan **out)
{
    int oh, ow;
    if (conv_out_hw(d, &oh, &ow) < 0) return -EINVAL;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    for (struct kern_conv_plan *p = st->plans; p; p = p->next) {
        if (conv_key_eq(&p->d, d) && p->dtype == dt && p->layout == layout && p->x_ld == x_ld &&
            p->y_ld == y_ld) {
            *out = p;
            return 0;
        }
    }
    struct kern_conv_plan *dense = NULL;
    if (conv_x_nstride(d) != (size_t)d->c_in * d->h_in * d->w_in || x_ld || y_ld) {
        struct kern_conv2d dd = *d;
        dd.x_nstride = 0;
        const int rd = plan_get(ctx, &dd, dt, layout, 0, 0, &dense);
        if (rd < 0) return rd;
    }
    cudnnHandle_t h;
    st->conv_release = kern_cuda_conv_release;
    int rc = handle_get(ctx, &h);
    if (rc < 0) return rc;
    struct kern_conv_plan *const p = (struct kern_conv_plan *)calloc(1, sizeof(*p));
    if (!p) return -ENOMEM;
    p->d = *d;
    p->dtype = dt;
    p->layout = layout;
    p->x_ld = x_ld;
    p->y_ld = y_ld;
    p->h_out = oh;
    p->w_out = ow;
    rc = plan_build(ctx, h, p, dense);
    if (rc < 0) {
        plan_free(p);
        return rc;
    }
    p->next = st->plans;
    st->plans = p;
    *out = p;
    return 0;
}

/* The largest workspace of the plan's three ops, bwd_filter's after head bytes of its own. */
static size_t plan_ws_bytes(const struct kern_conv_plan *p, size_t head)
{
    const size_t m = p->ws_fwd > p->ws_data ? p->ws_fwd : p->ws_data;
    const size_t f = head + p->ws_filter;
    return m > f ? m : f;
}

/* y = conv(x, w), no bias, in the plan's data type and layout. */
static int plan_fwd(struct kern_ctx *ctx, struct kern_conv_plan *p, void *y, const void *x,
                    const void *w)
{
    if (p->ws_fwd > ctx->ws_size) return -KERN_EWORKSPACE;
    const cudnnHandle_t h = (cudnnHandle_t)kern_cuda_st(ctx)->cudnn;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY(ctx, cudnnSetConvolutionMathType(p->cd, p->fwd_math));
    CUDNN_TRY(ctx, cudnnConvolutionForward(h, &one, p->xd, x, p->wd, w, p->cd, p->fwd, ctx->ws,
                                           p->ws_fwd, &zero, p->yd, y));
    return 0;
}

/* dx (=|+=) conv^T(dy, w), in the plan's data type and layout. */
static int plan_bwd_data(struct kern_ctx *ctx, struct kern_conv_plan *p, void *dx, const void *dy,
                         const void *w, unsigned accum)
{
    if (p->ws_data > ctx->ws_size) return -KERN_EWORKSPACE;
    const cudnnHandle_t h = (cudnnHandle_t)kern_cuda_st(ctx)->cudnn;
    const float one = 1.0f, beta = (accum & KERN_ACCUM_DX) ? 1.0f : 0.0f;
    CUDNN_TRY(ctx, cudnnSetConvolutionMathType(p->cd, p->data_math));
    CUDNN_TRY(ctx, cudnnConvolutionBackwardData(h, &one, p->wd, w, p->yd, dy, p->cd, p->bwd_data,
                                                ctx->ws, p->ws_data, &beta, p->xd, dx));
    return 0;
}

/* out = beta out + dw(x, dy) in the plan's data type; cuDNN's workspace starts head bytes into
 * ctx's (the lowp path keeps its reduced-type dw there). */
static int plan_bwd_filter(struct kern_ctx *ctx, struct kern_conv_plan *p, void *out,
                           const void *dy, const void *x, size_t head, float beta)
{
    if (head + p->ws_filter > ctx->ws_size) return -KERN_EWORKSPACE;
    const cudnnHandle_t h = (cudnnHandle_t)kern_cuda_st(ctx)->cudnn;
    const float one = 1.0f;
    CUDNN_TRY(ctx, cudnnSetConvolutionMathType(p->cd, p->filter_math));
    CUDNN_TRY(ctx, cudnnConvolutionBackwardFilter(h, &one, p->xd, x, p->yd, dy, p->cd,
                                                  p->bwd_filter, (char *)ctx->ws + head,
                                                  p->ws_filter, &beta, p->wd, out));
    return 0;
}

int kern_cuda_conv2d_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                    size_t *bytes)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!bytes) return -EINVAL;
    struct kern_conv_plan *p;
    const int rc = plan_get(ctx, d, CUDNN_DATA_FLOAT, KERN_LAYOUT_NCHW, 0, 0, &p);
    if (rc < 0) return rc;
    *bytes = plan_ws_bytes(p, 0);
    return 0;
}

int kern_cuda_conv2d_fwd(struct kern_ctx *ctx, const struct kern_conv2d *d, float *__restrict__ y,
                         const float *__restrict__ x, const float *__restrict__ w,
                         const float *__restrict__ bias)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!y || !x || !w) return -EINVAL;
    struct kern_conv_plan *p;
    int rc = plan_get(ctx, d, CUDNN_DATA_FLOAT, KERN_LAYOUT_NCHW, 0, 0, &p);
    if (rc < 0) return rc;
    rc = plan_fwd(ctx, p, y, x, w);
    if (rc < 0 || !bias) return rc;
    const cudnnHandle_t h = (cudnnHandle_t)kern_cuda_st(ctx)->cudnn;
    const float one = 1.0f;
    CUDNN_TRY(ctx, cudnnAddTensor(h, &one, p->bd, bias, &one, p->yd, y));
    return 0;
}

int kern_cuda_conv2d_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d *d,
                              float *__restrict__ dx, const float *__restrict__ dy,
                              const float *__restrict__ w, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!dx || !dy || !w) return -EINVAL;
    struct kern_conv_plan *p;
    const int rc = plan_get(ctx, d, CUDNN_DATA_FLOAT, KERN_LAYOUT_NCHW, 0, 0, &p);
    if (rc < 0) return rc;
    return plan_bwd_data(ctx, p, dx, dy, w, accum);
}

int kern_cuda_conv2d_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                float *__restrict__ dw, const float *__restrict__ dy,
                                const float *__restrict__ x, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!dw || !dy || !x) return -EINVAL;
    struct kern_conv_plan *p;
    const int rc = plan_get(ctx, d, CUDNN_DATA_FLOAT, KERN_LAYOUT_NCHW, 0, 0, &p);
    if (rc < 0) return rc;
    return plan_bwd_filter(ctx, p, dw, dy, x, 0, (accum & KERN_ACCUM_DPARAM) ? 1.0f : 0.0f);
}

int kern_cuda_conv2d_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d *d,
                              float *__restrict__ db, const float *__restrict__ dy, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!db || !dy) return -EINVAL;
    struct kern_conv_plan *p;
    const int rc = plan_get(ctx, d, CUDNN_DATA_FLOAT, KERN_LAYOUT_NCHW, 0, 0, &p);
    if (rc < 0) return rc;
    const cudnnHandle_t h = (cudnnHandle_t)kern_cuda_st(ctx)->cudnn;
    const float one = 1.0f, beta = (accum & KERN_ACCUM_DPARAM) ? 1.0f : 0.0f;
    CUDNN_TRY(ctx, cudnnConvolutionBackwardBias(h, &one, p->yd, dy, &beta, p->bd, db));
    return 0;
}

/* --- lowp --- */
/*
 * Reduced-precision convs (kern.h "conv2d in reduced precision"). cuDNN does the three
 * convolutions in the plan's data type with float32 compute. Its legacy API takes dw in the
 * input type (no mixed x/dy bf16 with dw float32), so bwd_filter writes r(S) to the head of
 * the workspace and lp_widen_kernel widens it into (or adds it to) the float32 dw; the bias of
 * fwd and the whole of bwd_bias are small kernels of our own (same formula for every dtype and
 * layout, no dependence on which types cudnnAddTensor / BackwardBias accept).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* Offset of cuDNN's workspace after the reduced-type dw at the head of ctx's workspace. */
#define LP_ALIGN 256

static size_t lp_round_up(size_t n)
{
    return (n + LP_ALIGN - 1) / LP_ALIGN * LP_ALIGN;
}

static __device__ __forceinline__ float lp_load(int dt, const void *p, size_t i)
{
    if (dt == KERN_DT_BF16) return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
    if (dt == KERN_DT_F16) return __half2float(__ushort_as_half(((const unsigned short *)p)[i]));
    return ((const float *)p)[i];
}

static __device__ __forceinline__ void lp_store(int dt, void *p, size_t i, float v)
{
    if (dt == KERN_DT_BF16)
        ((unsigned short *)p)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    else if (dt == KERN_DT_F16)
        ((unsigned short *)p)[i] = __half_as_ushort(__float2half_rn(v));
    else
        ((float *)p)[i] = v;
}

/* r(v) widened back to float32. */
static __device__ __forceinline__ float lp_round(int dt, float v)
{
    if (dt == KERN_DT_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    if (dt == KERN_DT_F16) return __half2float(__float2half_rn(v));
    return v;
}

/* dst (=|+=) widen(src), n elements: dw in the same layout on both sides, or with c_in > 0 src
 * (c_out, khw, c_in) into dst (c_out, c_in, khw) (kern_conv2d_lowp.dw_oihw). */
static __global__ void lp_widen_kernel(float *__restrict__ dst, const void *__restrict__ src,
                                       size_t n, int dt, int add, int c_in, int khw)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t from = i;
        if (c_in > 0) {
            const size_t kk = (size_t)c_in * (size_t)khw, o = i / kk, rem = i % kk;
            from = o * kk + (rem % (size_t)khw) * (size_t)c_in + rem / (size_t)khw;
        }
        const float v = lp_load(dt, src, from);
        dst[i] = add ? dst[i] + v : v;
    }
}

/* Element (image i, channel ch, position q) of a tensor of c channels and pos positions with
 * stride ld (kern_conv2d_lowp STRIDES). */
static __device__ __forceinline__ size_t lp_at(int nhwc, size_t ld, int c, size_t pos, size_t i,
                                               size_t ch, size_t q)
{
    if (nhwc) return (i * pos + q) * (ld ? ld : (size_t)c) + ch;
    return i * (ld ? ld : (size_t)c * pos) + ch * pos + q;
}

/* y = r(y + b[channel]) over n elements: images of c channels and p positions, stride ld. */
static __global__ void lp_bias_kernel(void *__restrict__ y, const void *__restrict__ b, size_t n,
                                      int c, size_t p, int dt, int nhwc, size_t ld)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t img = i / ((size_t)c * p), r = i % ((size_t)c * p);
        const size_t ch = nhwc ? r % (size_t)c : r / p, q = nhwc ? r / (size_t)c : r % p;
        const size_t at = lp_at(nhwc, ld, c, p, img, ch, q);
        lp_store(dt, y, at, lp_load(dt, y, at) + lp_load(dt, b, ch));
    }
}

/* One block per channel: db[c] (=|+=) r((float)(sum of dy in double)), fixed order. */
static __global__ void lp_bwd_bias_kernel(float *__restrict__ db, const void *__restrict__ dy,
                                          int n, int c, size_t p, int dt, int nhwc, int add,
                                          size_t ld)
{
    const int ch = blockIdx.x;
    const size_t per = (size_t)n * p;
    double s = 0.0, unused = 0.0;
    for (size_t k = threadIdx.x; k < per; k += blockDim.x)
        s += (double)lp_load(dt, dy, lp_at(nhwc, ld, c, p, k / p, (size_t)ch, k % p));
    kern_cuda_block_sum2(s, unused);
    if (threadIdx.x == 0) {
        const float v = lp_round(dt, (float)s);
        db[ch] = add ? db[ch] + v : v;
    }
}

static int lp_check(const struct kern_conv2d_lowp *d, cudnnDataType_t *dt)
{
    if (!d || (d->layout != KERN_LAYOUT_NCHW && d->layout != KERN_LAYOUT_NHWC)) return -EINVAL;
    switch (d->dtype) {
    case KERN_DT_F32:
        *dt = CUDNN_DATA_FLOAT;
        return 0;
    case KERN_DT_BF16:
        *dt = CUDNN_DATA_BFLOAT16;
        return 0;
    case KERN_DT_F16:
        *dt = CUDNN_DATA_HALF;
        return 0;
    default:
        return -EINVAL;
    }
}

static int lp_plan(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                   struct kern_conv_plan **p)
{
    cudnnDataType_t dt;
    const int rc = lp_check(d, &dt);
    if (rc < 0) return rc;
    if (d->conv.x_nstride) return -EINVAL; /* kern_conv.h: strides in x_ld, y_ld */
    int oh, ow;
    if (conv_out_hw(&d->conv, &oh, &ow) < 0) return -EINVAL;
    const bool nhwc = d->layout == KERN_LAYOUT_NHWC;
    const struct kern_conv2d *const c = &d->conv;
    const size_t x_min = nhwc ? (size_t)c->c_in : (size_t)c->c_in * c->h_in * c->w_in,
                 y_min = nhwc ? (size_t)c->c_out : (size_t)c->c_out * oh * ow;
    if ((d->x_ld && d->x_ld < x_min) || (d->y_ld && d->y_ld < y_min)) return -EINVAL;
    return plan_get(ctx, &d->conv, dt, d->layout, d->x_ld, d->y_ld, p);
}

/* Bytes of the reduced-type dw kept at the head of the workspace by bwd_filter (0 for f32). */
static size_t lp_dw_bytes(const struct kern_conv2d_lowp *d)
{
    if (d->dtype == KERN_DT_F32) return 0;
    const struct kern_conv2d *const c = &d->conv;
    return lp_round_up((size_t)c->c_out * c->c_in * c->k_h * c->k_w * 2);
}

int kern_cuda_conv2d_lowp_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                         size_t *bytes)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!bytes) return -EINVAL;
    struct kern_conv_plan *p;
    const int rc = lp_plan(ctx, d, &p);
    if (rc < 0) return rc;
    *bytes = plan_ws_bytes(p, lp_dw_bytes(d));
    return 0;
}

int kern_cuda_conv2d_lowp_fwd(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                              void *__restrict__ y, const void *__restrict__ x,
                              const void *__restrict__ w, const void *__restrict__ bias)
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!y || !x || !w) return -EINVAL;
    struct kern_conv_plan *p;
    int rc = lp_plan(ctx, d, &p);
    if (rc < 0) return rc;
    rc = plan_fwd(ctx, p, y, x, w);
    if (rc < 0 || !bias) return rc;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    const size_t pos = (size_t)p->h_out * p->w_out, n = (size_t)d->conv.n * d->conv.c_out * pos;
    lp_bias_kernel<<<kern_cuda_blocks(n), KERN_CUDA_THREADS, 0, st->stream>>>(
        y, bias, n, d->conv.c_out, pos, d->dtype, d->layout == KERN_LAYOUT_NHWC, d->y_ld);
    return kern_cuda_launched(ctx, "conv2d_lowp_fwd bias");
}

int kern_cuda_conv2d_lowp_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                   void *__restrict__ dx, const void *__restrict__ dy,
                                   const void *__restrict__ w, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!dx || !dy || !w) return -EINVAL;
    struct kern_conv_plan *p;
    const int rc = lp_plan(ctx, d, &p);
    if (rc < 0) return rc;
    return plan_bwd_data(ctx, p, dx, dy, w, accum);
}

int kern_cuda_conv2d_lowp_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                     float *__restrict__ dw, const void *__restrict__ dy,
                                     const void *__restrict__ x, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!dw || !dy || !x) return -EINVAL;
    struct kern_conv_plan *p;
    int rc = lp_plan(ctx, d, &p);
    if (rc < 0) return rc;
    const size_t head = lp_dw_bytes(d);
    const int add = (accum & KERN_ACCUM_DPARAM) != 0;
    void *const out = head ? ctx->ws : (void *)dw;
    rc = plan_bwd_filter(ctx, p, out, dy, x, head, (head == 0 && add) ? 1.0f : 0.0f);
    if (rc < 0 || !head) return rc;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    const struct kern_conv2d *const c = &d->conv;
    const size_t n = (size_t)c->c_out * c->c_in * c->k_h * c->k_w;
    const int perm = d->dw_oihw && d->layout == KERN_LAYOUT_NHWC;
    lp_widen_kernel<<<kern_cuda_blocks(n), KERN_CUDA_THREADS, 0, st->stream>>>(
        dw, ctx->ws, n, d->dtype, add, perm ? c->c_in : 0, c->k_h * c->k_w);
    return kern_cuda_launched(ctx, "conv2d_lowp_bwd_filter widen");
}

int kern_cuda_conv2d_lowp_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                   float *__restrict__ db, const void *__restrict__ dy,
                                   unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    if (!db || !dy) return -EINVAL;
    cudnnDataType_t dt;
    int oh, ow;
    if (lp_check(d, &dt) < 0 || conv_out_hw(&d->conv, &oh, &ow) < 0) return -EINVAL;
    if (d->y_ld && d->y_ld < (d->layout == KERN_LAYOUT_NHWC ? (size_t)d->conv.c_out
                                                            : (size_t)d->conv.c_out * oh * ow))
        return -EINVAL;
    lp_bwd_bias_kernel<<<(unsigned)d->conv.c_out, KERN_CUDA_THREADS, 0,
                         kern_cuda_st(ctx)->stream>>>(
        db, dy, d->conv.n, d->conv.c_out, (size_t)oh * ow, d->dtype, d->layout == KERN_LAYOUT_NHWC,
        (accum & KERN_ACCUM_DPARAM) != 0, d->y_ld);
    return kern_cuda_launched(ctx, "conv2d_lowp_bwd_bias");
}

/* --- plans: the probe and the counts --- */
int kern_cuda_conv2d_probe(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d, int op,
                           struct kern_plan_cand *heur, int *nheur, struct kern_plan_cand *find,
                           int *nfind)
{
    KERN_CHECK_CUDA_CTX(ctx);
    cudnnDataType_t dt;
    int oh, ow;
    if (lp_check(d, &dt) < 0 || op < 0 || op > 2 || !heur || !nheur || !find || !nfind ||
        d->conv.x_nstride || conv_out_hw(&d->conv, &oh, &ow) < 0)
        return -EINVAL;
    cudnnHandle_t h;
    struct kern_cuda_state *const st = kern_cuda_st(ctx);
    st->conv_release = kern_cuda_conv_release;
    int rc = handle_get(ctx, &h);
    if (rc < 0) return rc;
    /* a plan of its own, never cached: the probe must not change what the context runs */
    struct kern_conv_plan *const p = (struct kern_conv_plan *)calloc(1, sizeof(*p));
    if (!p) return -ENOMEM;
    p->d = d->conv;
    p->dtype = dt;
    p->layout = d->layout;
    p->h_out = oh;
    p->w_out = ow;
    rc = plan_describe(ctx, p);
    struct choose_arg a = { ctx, h, p };
    if (rc == 0) rc = *nheur = cb_heur(&a, op, heur, KERN_PLAN_MAX_CANDS);
    if (rc >= 0) rc = *nfind = cb_find(&a, op, find, KERN_PLAN_MAX_CANDS);
    plan_free(p);
    return rc < 0 ? rc : 0;
}

int kern_cuda_conv_plan_counts(struct kern_ctx *ctx, int counts[3])
{
    KERN_CHECK_CUDA_CTX(ctx);
    if (!counts) return -EINVAL;
    memcpy(counts, kern_cuda_st(ctx)->plan_how, sizeof(int[3]));
    return 0;
}

#else /* no cuDNN: the conv ops exist (the table needs them) but say the backend lacks them */
int kern_cuda_conv2d_probe(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d, int op,
                           struct kern_plan_cand *heur, int *nheur, struct kern_plan_cand *find,
                           int *nfind)
{
    (void)d, (void)op, (void)heur, (void)nheur, (void)find, (void)nfind;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv_plan_counts(struct kern_ctx *ctx, int counts[3])
{
    (void)counts;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

void kern_cuda_conv_release(struct kern_ctx *ctx)
{
    (void)ctx;
}

int kern_cuda_conv2d_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                    size_t *bytes)
{
    (void)d;
    (void)bytes;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_fwd(struct kern_ctx *ctx, const struct kern_conv2d *d, float *__restrict__ y,
                         const float *__restrict__ x, const float *__restrict__ w,
                         const float *__restrict__ bias)
{
    (void)d, (void)y, (void)x, (void)w, (void)bias;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d *d,
                              float *__restrict__ dx, const float *__restrict__ dy,
                              const float *__restrict__ w, unsigned accum)
{
    (void)d, (void)dx, (void)dy, (void)w, (void)accum;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                float *__restrict__ dw, const float *__restrict__ dy,
                                const float *__restrict__ x, unsigned accum)
{
    (void)d, (void)dw, (void)dy, (void)x, (void)accum;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d *d,
                              float *__restrict__ db, const float *__restrict__ dy, unsigned accum)
{
    (void)d, (void)db, (void)dy, (void)accum;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}
/* --- lowp --- */
int kern_cuda_conv2d_lowp_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                         size_t *bytes)
{
    (void)d, (void)bytes;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_lowp_fwd(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                              void *__restrict__ y, const void *__restrict__ x,
                              const void *__restrict__ w, const void *__restrict__ bias)
{
    (void)d, (void)y, (void)x, (void)w, (void)bias;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_lowp_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                   void *__restrict__ dx, const void *__restrict__ dy,
                                   const void *__restrict__ w, unsigned accum)
{
    (void)d, (void)dx, (void)dy, (void)w, (void)accum;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_lowp_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                     float *__restrict__ dw, const void *__restrict__ dy,
                                     const void *__restrict__ x, unsigned accum)
{
    (void)d, (void)dw, (void)dy, (void)x, (void)accum;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}

int kern_cuda_conv2d_lowp_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                   float *__restrict__ db, const void *__restrict__ dy,
                                   unsigned accum)
{
    (void)d, (void)db, (void)dy, (void)accum;
    KERN_CHECK_CUDA_CTX(ctx);
    return -KERN_EBACKEND;
}
#endif
