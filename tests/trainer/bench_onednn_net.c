/*
 * bench_onednn_net: the whole of yolov5n's inference forward in oneDNN's blocked layout (the plan
 * in docs/design.md, "Next for the CPU path"), against our trn_net_infer, alternating rounds.
 * A measurement of what that plan can give before it is built, not an implementation: random
 * weights, BN taken as folded into each conv (a bias), SiLU as a swish post-op, the bottleneck's
 * residual as a binary-add post-op, concat / SPPF max pools / nearest upsample as oneDNN
 * primitives, activations in nChw16c, the three Detect convs writing NCHW. Ours includes the
 * Detect decode (about 2% of its time); this does not.
 *
 *   OMP_NUM_THREADS=2 build/tests/trainer/bench_onednn_net [IMG=320] [BATCH=32] [THREADS=2]
 *   [ROUNDS=5]
 * Built where the oneDNN headers are installed (Debian's libdnnl-dev).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "model.h"
#include "net.h"

#define DN(call)                                                                           \
    do {                                                                                   \
        const dnnl_status_t st_ = (call);                                                  \
        if (st_ != dnnl_success) {                                                         \
            fprintf(stderr, "bench_onednn_net: %s failed (status %d)\n", #call, (int)st_); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define MAX_STEPS 128

struct step {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[6];
};

/* The network as a list of primitives with their arguments. */
struct g {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    struct step steps[MAX_STEPS];
    int n;
    dnnl_memory_t owned[4 * MAX_STEPS];
    int n_owned;
    unsigned seed;
    double flops;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dnnl_memory_t mem(struct g *g, const dnnl_memory_desc_t *md)
{
    dnnl_memory_t m;
    DN(dnnl_memory_create(&m, md, g->eng, DNNL_MEMORY_ALLOCATE));
    if (g->n_owned == 4 * MAX_STEPS) exit(1);
    g->owned[g->n_owned++] = m;
    return m;
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

static void push(struct g *g, dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args)
{
    if (g->n == MAX_STEPS) exit(1);
    struct step *s = &g->steps[g->n++];
    DN(dnnl_primitive_create(&s->p, pd));
    s->nargs = nargs;
    memcpy(s->args, args, (size_t)nargs * sizeof *args);
    DN(dnnl_primitive_desc_destroy(pd));
}

static dnnl_memory_t act(struct g *g, dnnl_dim_t n, dnnl_dim_t c, dnnl_dim_t h, dnnl_dim_t w,
                         dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t md;
    const dnnl_dims_t d = { n, c, h, w };
    DN(dnnl_memory_desc_init_by_tag(&md, 4, d, dnnl_f32, tag));
    return mem(g, &md);
}

/*
 * conv k x k stride s (pad k / 2; the k6 stem pads 2), bias, then SiLU when silu, then + `add`
 * when given (the residual: a binary post-op; oneDNN 2.6 runs a sum post-op after an eltwise
 * one, and a blocked-to-NCHW conv, only in its reference implementation); NCHW output when
 * plain, through a reorder after the conv.
 */
static dnnl_memory_t conv(struct g *g, dnnl_memory_t x, int c_out, int k, int s, int silu,
                          dnnl_memory_t add, int plain)
{
    const dnnl_memory_desc_t *xd = md_of(x);
    const dnnl_dim_t n = xd->dims[0], c_in = xd->dims[1], h = xd->dims[2], w = xd->dims[3];
    const int pad = k == 6 ? 2 : k / 2;
    const dnnl_dim_t oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1;
    dnnl_memory_t y = act(g, n, c_out, oh, ow, dnnl_nChw16c);
    dnnl_memory_desc_t wd, bd;
    const dnnl_dims_t wdims = { c_out, c_in, k, k }, bdims = { c_out };
    DN(dnnl_memory_desc_init_by_tag(&wd, 4, wdims, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&bd, 1, bdims, dnnl_f32, dnnl_a));
    const dnnl_dims_t strides = { s, s }, padl = { pad, pad };
    const dnnl_dims_t padr = { (oh - 1) * s + k - h - pad, (ow - 1) * s + k - w - pad };
    dnnl_convolution_desc_t cd;
    DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, xd,
                                          &wd, &bd, md_of(y), strides, padl, padr));
    dnnl_post_ops_t po;
    dnnl_primitive_attr_t attr;
    DN(dnnl_post_ops_create(&po));
    if (silu) DN(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f));
    if (add) DN(dnnl_post_ops_append_binary(po, dnnl_binary_add, md_of(add)));
    DN(dnnl_primitive_attr_create(&attr));
    DN(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &cd, attr, g->eng, NULL));
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(po);
    dnnl_memory_t wm = mem(g, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
    dnnl_memory_t bm = mem(g, &bd);
    fill(g, wm, -0.1f, 0.1f); /* values only, in whatever layout: this is a timing */
    fill(g, bm, -0.1f, 0.1f);
    g->flops += 2.0 * (double)(n * c_out * oh * ow) * (double)(c_in * k * k);
    const dnnl_exec_arg_t a[5] = {
        { DNNL_ARG_SRC, x },
        { DNNL_ARG_WEIGHTS, wm },
        { DNNL_ARG_BIAS, bm },
        { DNNL_ARG_DST, y },
        { DNNL_ARG_ATTR_MULTIPLE_POST_OP(silu ? 1 : 0) | DNNL_ARG_SRC_1, add },
    };
    push(g, pd, add ? 5 : 4, a);
    if (!plain) return y;
    dnnl_memory_t yp = act(g, n, c_out, oh, ow, dnnl_nchw);
    DN(dnnl_reorder_primitive_desc_create(&pd, md_of(y), g->eng, md_of(yp), g->eng, NULL));
    const dnnl_exec_arg_t r[2] = { { DNNL_ARG_FROM, y }, { DNNL_ARG_TO, yp } };
    push(g, pd, 2, r);
    return yp;
}

static dnnl_memory_t concat(struct g *g, const dnnl_memory_t *xs, int k)
{
    dnnl_memory_desc_t mds[4];
    dnnl_dim_t c = 0;
    for (int i = 0; i < k; i++) {
        mds[i] = *md_of(xs[i]);
        c += mds[i].dims[1];
    }
    dnnl_memory_t y = act(g, mds[0].dims[0], c, mds[0].dims[2], mds[0].dims[3], dnnl_nChw16c);
    dnnl_primitive_desc_t pd;
    DN(dnnl_concat_primitive_desc_create(&pd, md_of(y), k, 1, mds, NULL, g->eng));
    dnnl_exec_arg_t a[5];
    for (int i = 0; i < k; i++)
        a[i] = (dnnl_exec_arg_t){ DNNL_ARG_MULTIPLE_SRC + i, xs[i] };
    a[k] = (dnnl_exec_arg_t){ DNNL_ARG_DST, y };
    push(g, pd, k + 1, a);
    return y;
}

static dnnl_memory_t maxpool5(struct g *g, dnnl_memory_t x)
{
    const dnnl_memory_desc_t *xd = md_of(x);
    dnnl_memory_t y = act(g, xd->dims[0], xd->dims[1], xd->dims[2], xd->dims[3], dnnl_nChw16c);
    const dnnl_dims_t s = { 1, 1 }, k = { 5, 5 }, p = { 2, 2 };
    dnnl_pooling_desc_t d;
    DN(dnnl_pooling_forward_desc_init(&d, dnnl_forward_inference, dnnl_pooling_max, xd, md_of(y), s,
                                      k, p, p));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &d, NULL, g->eng, NULL));
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_SRC, x }, { DNNL_ARG_DST, y } };
    push(g, pd, 2, a);
    return y;
}

static dnnl_memory_t up2(struct g *g, dnnl_memory_t x)
{
    const dnnl_memory_desc_t *xd = md_of(x);
    dnnl_memory_t y =
        act(g, xd->dims[0], xd->dims[1], 2 * xd->dims[2], 2 * xd->dims[3], dnnl_nChw16c);
    dnnl_resampling_desc_t d;
    DN(dnnl_resampling_forward_desc_init(&d, dnnl_forward_inference, dnnl_resampling_nearest, NULL,
                                         xd, md_of(y)));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &d, NULL, g->eng, NULL));
    const dnnl_exec_arg_t a[2] = { { DNNL_ARG_SRC, x }, { DNNL_ARG_DST, y } };
    push(g, pd, 2, a);
    return y;
}

/* ultralytics' C3: cv1, n bottlenecks (residual when sc), cv2, concat, cv3. */
static dnnl_memory_t c3(struct g *g, dnnl_memory_t x, int c2, int n, int sc)
{
    const int c_ = c2 / 2;
    dnnl_memory_t a = conv(g, x, c_, 1, 1, 1, NULL, 0);
    for (int i = 0; i < n; i++) {
        dnnl_memory_t t = conv(g, a, c_, 1, 1, 1, NULL, 0);
        a = sc ? conv(g, t, c_, 3, 1, 1, a, 0) : conv(g, t, c_, 3, 1, 1, NULL, 0);
    }
    const dnnl_memory_t cat[2] = { a, conv(g, x, c_, 1, 1, 1, NULL, 0) };
    return conv(g, concat(g, cat, 2), c2, 1, 1, 1, NULL, 0);
}

static dnnl_memory_t sppf(struct g *g, dnnl_memory_t x, int c2)
{
    const int c_ = (int)md_of(x)->dims[1] / 2;
    dnnl_memory_t cat[4];
    cat[0] = conv(g, x, c_, 1, 1, 1, NULL, 0);
    for (int i = 1; i < 4; i++)
        cat[i] = maxpool5(g, cat[i - 1]);
    return conv(g, concat(g, cat, 4), c2, 1, 1, 1, NULL, 0);
}

/* models/yolov5n.yaml (depth 0.33, width 0.25). Returns the input memory. */
static dnnl_memory_t yolov5n(struct g *g, int batch, int img)
{
    dnnl_memory_t in = act(g, batch, 3, img, img, dnnl_nchw);
    fill(g, in, 0.0f, 1.0f);
    dnnl_memory_t x = conv(g, in, 16, 6, 2, 1, NULL, 0);
    x = conv(g, x, 32, 3, 2, 1, NULL, 0);
    x = c3(g, x, 32, 1, 1);
    x = conv(g, x, 64, 3, 2, 1, NULL, 0);
    dnnl_memory_t p3 = c3(g, x, 64, 2, 1);
    x = conv(g, p3, 128, 3, 2, 1, NULL, 0);
    dnnl_memory_t p4 = c3(g, x, 128, 3, 1);
    x = conv(g, p4, 256, 3, 2, 1, NULL, 0);
    x = c3(g, x, 256, 1, 1);
    x = sppf(g, x, 256);
    dnnl_memory_t h10 = conv(g, x, 128, 1, 1, 1, NULL, 0);
    dnnl_memory_t cat[2] = { up2(g, h10), p4 };
    x = c3(g, concat(g, cat, 2), 128, 1, 0);
    dnnl_memory_t h14 = conv(g, x, 64, 1, 1, 1, NULL, 0);
    cat[0] = up2(g, h14);
    cat[1] = p3;
    dnnl_memory_t o3 = c3(g, concat(g, cat, 2), 64, 1, 0);
    cat[0] = conv(g, o3, 64, 3, 2, 1, NULL, 0);
    cat[1] = h14;
    dnnl_memory_t o4 = c3(g, concat(g, cat, 2), 128, 1, 0);
    cat[0] = conv(g, o4, 128, 3, 2, 1, NULL, 0);
    cat[1] = h10;
    dnnl_memory_t o5 = c3(g, concat(g, cat, 2), 256, 1, 0);
    conv(g, o3, 255, 1, 1, 0, NULL, 1); /* Detect: NCHW out, no activation */
    conv(g, o4, 255, 1, 1, 0, NULL, 1);
    conv(g, o5, 255, 1, 1, 0, NULL, 1);
    return in;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const int img = argc > 1 ? atoi(argv[1]) : 320, batch = argc > 2 ? atoi(argv[2]) : 32;
    const int threads = argc > 3 ? atoi(argv[3]) : 2, rounds = argc > 4 ? atoi(argv[4]) : 5;
    if (img < 64 || img % 32 || batch < 1 || threads < 1 || rounds < 1 || rounds > 99) {
        fprintf(stderr, "usage: bench_onednn_net [IMG=320] [BATCH=32] [THREADS=2] [ROUNDS=5]\n");
        return 2;
    }
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!omp || atoi(omp) != threads)
        fprintf(stderr,
                "bench_onednn_net: OMP_NUM_THREADS is %s, not %d: oneDNN's threads differ\n",
                omp ? omp : "unset", threads);

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
    o.train = false;
    o.fixed_params = true;
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

    static struct g g;
    DN(dnnl_engine_create(&g.eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&g.st, g.eng, dnnl_stream_default_flags));
    g.seed = 1;
    yolov5n(&g, batch, img);

    double t[2][99];
    for (int r = -1; r < rounds; r++) { /* round -1 warms both up */
        double t0 = now();
        const float *out = NULL;
        int rows = 0;
        if (trn_net_infer(net, x, &out, &rows) < 0) return 1;
        if (r >= 0) t[0][r] = now() - t0;
        t0 = now();
        for (int i = 0; i < g.n; i++)
            DN(dnnl_primitive_execute(g.steps[i].p, g.st, g.steps[i].nargs, g.steps[i].args));
        DN(dnnl_stream_wait(g.st));
        if (r >= 0) t[1][r] = now() - t0;
    }
    static const char *const names[2] = { "ours (trn_net_infer, NCHW, with decode)",
                                          "oneDNN, blocked end to end" };
    printf("yolov5n inference, img %d batch %d, %d thread(s); %.3f GFLOP per image "
           "(the %d oneDNN primitives' convs); BLAS %s\n",
           img, batch, threads, g.flops * 1e-9 / batch, g.n, kern_blas_core());
    double med[2];
    for (int a = 0; a < 2; a++) {
        qsort(t[a], (size_t)rounds, sizeof(double), cmp_double);
        med[a] = t[a][rounds / 2];
        printf("%-42s %8.3f ms per image  %6.1f GFLOP/s  (sorted rounds, ms per batch:", names[a],
               med[a] * 1e3 / batch, g.flops / med[a] * 1e-9);
        for (int r = 0; r < rounds; r++)
            printf(" %.1f", t[a][r] * 1e3);
        printf(")\n");
    }
    printf("ratio ours / oneDNN time: %.2f\n", med[0] / med[1]);
    for (int i = 0; i < g.n; i++)
        dnnl_primitive_destroy(g.steps[i].p);
    for (int i = 0; i < g.n_owned; i++)
        dnnl_memory_destroy(g.owned[i]);
    dnnl_stream_destroy(g.st);
    dnnl_engine_destroy(g.eng);
    free(x);
    trn_net_destroy(net);
    trn_model_destroy(m);
    return 0;
}
