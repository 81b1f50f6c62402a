/*
 * Channel-slice (n-stride) checks shared by test_stride.c (CPU) and test_cuda_parity_stride.c
 * (CUDA): every op that takes an n-stride (kern.h "Channel slices") is run twice on one backend,
 * once on dense tensors and once with its strided side(s) placed as a channel slice of a wider,
 * poisoned buffer (the canary in every gap, so an op that reads a gap turns its result into NaN,
 * and one that writes a gap is caught). The strided run must equal the dense run bit for bit,
 * and the gaps must still hold the canary. With a reference environment (the CPU, for the CUDA
 * test) the dense run is also compared with the reference's dense run within a tolerance.
 *
 * A case is a list of tensors (inputs, poisoned outputs, accumulated in-outs) and a call that
 * runs the op on backend pointers. Include after kern.h, kern_testutil.h and tap.h.
 */
#ifndef STRIDE_TESTUTIL_H
#define STRIDE_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A backend: its op table and context, and how tensors get there and back. */
struct st_env {
    const char *name;
    const struct kern_ops *K;
    struct kern_ctx *ctx;
    void *(*up)(const void *host, size_t bytes); /* a new backend buffer holding a copy */
    void (*down)(void *host, const void *dev, size_t bytes);
    void (*release)(void *dev);
};

enum { ST_IN = 0, ST_OUT = 1, ST_INOUT = 2 };
enum { ST_F32 = 0, ST_U16 = 1, ST_F64 = 2, ST_I32 = 3 };

#define ST_MAX_T 12

struct st_tensor {
    const char *name;
    int n;             /* images */
    size_t img;        /* elements per image */
    size_t ns, off;    /* strided run: images ns apart from element off (ns 0: dense both runs) */
    int role;          /* ST_IN, ST_OUT (poisoned first), ST_INOUT (random start, accumulated) */
    int type;          /* ST_F32, ST_U16, ST_F64, ST_I32 */
    float lo, hi;      /* random range of float inputs */
    double atol, rtol; /* output vs the reference backend (0, 0: exact) */
};

/* The op on backend pointers p[i] (tensor i); strided says which layout the pointers have (the
 * call sets the descriptors' strides from it). Returns the op's code. */
typedef int (*st_call_fn)(const struct st_env *E, void *const *p, int strided, const void *arg);
/* Optional: after the random draws, fix inputs that need structure (stats, indices). */
typedef void (*st_init_fn)(void *const *host, const void *arg);

struct st_case {
    const char *name;
    int nt;
    struct st_tensor t[ST_MAX_T];
    st_call_fn call;
    st_init_fn init;
    const void *arg;
};

static size_t st_esize(int type)
{
    return type == ST_U16 ? 2 : type == ST_F64 ? 8 : 4;
}

static size_t st_dense_len(const struct st_tensor *t)
{
    return (size_t)t->n * t->img;
}

/* Elements of the strided buffer: the slice's images end by (n - 1) ns + off + img; one more
 * ns-wide image's worth of room after it keeps the tail a gap as well. */
static size_t st_wide_len(const struct st_tensor *t)
{
    return t->ns ? (size_t)t->n * t->ns + t->off : st_dense_len(t);
}

/* The canary of a type: kt_canary's bits for floats, 0xbeef for 16-bit, a NaN double, -7. */
static void st_poison(void *p, size_t n, int type)
{
    for (size_t i = 0; i < n; i++) {
        if (type == ST_F32) {
            ((float *)p)[i] = kt_canary();
        } else if (type == ST_U16) {
            ((uint16_t *)p)[i] = 0xbeefu;
        } else if (type == ST_F64) {
            const uint64_t b = 0x7ff8deadbeef0000ull;
            memcpy((double *)p + i, &b, 8);
        } else {
            ((int32_t *)p)[i] = -7;
        }
    }
}

static int st_is_canary(const void *p, size_t i, int type)
{
    const float c = kt_canary();
    const uint64_t b = 0x7ff8deadbeef0000ull;
    if (type == ST_F32) return !memcmp((const float *)p + i, &c, 4);
    if (type == ST_U16) return ((const uint16_t *)p)[i] == 0xbeefu;
    if (type == ST_F64) return !memcmp((const double *)p + i, &b, 8);
    return ((const int32_t *)p)[i] == -7;
}

/* Random draws of a type: floats in [lo, hi); 16-bit values as bf16 or fp16 of such floats
 * (finite either way: the top half of a float, or an fp16 exponent below 31). */
static void st_fill(void *p, size_t n, const struct st_tensor *t)
{
    for (size_t i = 0; i < n; i++) {
        const float v = kt_uniform(t->lo, t->hi);
        if (t->type == ST_F32) {
            ((float *)p)[i] = v;
        } else if (t->type == ST_U16) {
            uint32_t u;
            memcpy(&u, &v, 4);
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        } else if (t->type == ST_F64) {
            ((double *)p)[i] = v;
        } else {
            ((int32_t *)p)[i] = 0;
        }
    }
}

/* The dense tensor d scattered into the slice of wide w (whose gaps keep what they hold). */
static void st_scatter(void *w, const void *d, const struct st_tensor *t)
{
    const size_t es = st_esize(t->type);
    for (int i = 0; i < t->n; i++)
        memcpy((char *)w + ((size_t)i * t->ns + t->off) * es,
               (const char *)d + (size_t)i * t->img * es, t->img * es);
}

/* Whether the slice of w equals d bit for bit (*bad: the first differing element) and the
 * gaps of w all hold the canary (*gap: the first that does not). */
static void st_compare_wide(const void *w, const void *d, const struct st_tensor *t, size_t *bad,
                            size_t *gap)
{
    const size_t es = st_esize(t->type);
    *bad = *gap = SIZE_MAX;
    for (int i = 0; i < t->n && *bad == SIZE_MAX; i++)
        for (size_t j = 0; j < t->img; j++)
            if (memcmp((const char *)w + ((size_t)i * t->ns + t->off + j) * es,
                       (const char *)d + ((size_t)i * t->img + j) * es, es)) {
                *bad = (size_t)i * t->img + j;
                break;
            }
    const size_t wl = st_wide_len(t);
    for (size_t k = 0; k < wl; k++) {
        const size_t r = k < t->off ? SIZE_MAX : (k - t->off) % t->ns;
        const int inside = k >= t->off && (k - t->off) / t->ns < (size_t)t->n && r < t->img;
        if (!inside && !st_is_canary(w, k, t->type)) {
            *gap = k;
            break;
        }
    }
}

static double st_get(const void *p, size_t i, int type)
{
    if (type == ST_F32) return ((const float *)p)[i];
    if (type == ST_U16) return ((const uint16_t *)p)[i];
    if (type == ST_F64) return ((const double *)p)[i];
    return ((const int32_t *)p)[i];
}

/* Runs the dense call on env with host tensors h (copies; outputs written back into out[i]). */
static int st_run(const struct st_env *E, const struct st_case *c, void *const *h, int strided,
                  void **out)
{
    void *p[ST_MAX_T];
    for (int i = 0; i < c->nt; i++) {
        const struct st_tensor *t = &c->t[i];
        const size_t len = strided && t->ns ? st_wide_len(t) : st_dense_len(t);
        p[i] = E->up(h[i], len * st_esize(t->type));
    }
    void *q[ST_MAX_T]; /* what the op sees: a slice starts at its offset */
    for (int i = 0; i < c->nt; i++)
        q[i] = strided && c->t[i].ns ? (char *)p[i] + c->t[i].off * st_esize(c->t[i].type) : p[i];
    const int rc = c->call(E, q, strided, c->arg);
    for (int i = 0; i < c->nt; i++) {
        const struct st_tensor *t = &c->t[i];
        const size_t len = strided && t->ns ? st_wide_len(t) : st_dense_len(t);
        if (t->role != ST_IN) E->down(out[i], p[i], len * st_esize(t->type));
        E->release(p[i]);
    }
    return rc;
}

/*
 * The case on E, dense and strided, compared; with R, E's dense run against R's. Every input
 * and starting value is drawn fresh; outputs start poisoned in both runs.
 */
static void st_check(const struct st_env *E, const struct st_env *R, const struct st_case *c)
{
    void *hd[ST_MAX_T], *hw[ST_MAX_T], *od[ST_MAX_T], *ow[ST_MAX_T], *orf[ST_MAX_T];
    for (int i = 0; i < c->nt; i++) {
        const struct st_tensor *t = &c->t[i];
        const size_t es = st_esize(t->type), dl = st_dense_len(t), wl = st_wide_len(t);
        hd[i] = calloc(dl ? dl : 1, es);
        hw[i] = calloc(wl ? wl : 1, es);
        od[i] = calloc(dl ? dl : 1, es);
        ow[i] = calloc(wl ? wl : 1, es);
        orf[i] = calloc(dl ? dl : 1, es);
        if (!hd[i] || !hw[i] || !od[i] || !ow[i] || !orf[i]) {
            printf("Bail out! out of memory\n");
            exit(99);
        }
        if (t->role == ST_OUT)
            st_poison(hd[i], dl, t->type);
        else
            st_fill(hd[i], dl, t);
    }
    if (c->init) c->init(hd, c->arg);
    for (int i = 0; i < c->nt; i++) {
        const struct st_tensor *t = &c->t[i];
        if (!t->ns) {
            memcpy(hw[i], hd[i], st_dense_len(t) * st_esize(t->type));
            continue;
        }
        st_poison(hw[i], st_wide_len(t), t->type);
        if (t->role != ST_OUT) st_scatter(hw[i], hd[i], t);
    }
    const int rd = st_run(E, c, hd, 0, od);
    const int rw = st_run(E, c, hw, 1, ow);
    ok(rd == 0 && rw == 0, "%s %s: dense and strided calls return 0 (%d, %d)", E->name, c->name, rd,
       rw);
    for (int i = 0; i < c->nt; i++) {
        const struct st_tensor *t = &c->t[i];
        if (t->role == ST_IN) continue;
        size_t bad = SIZE_MAX, gap = SIZE_MAX;
        if (t->ns) {
            st_compare_wide(ow[i], od[i], t, &bad, &gap);
        } else {
            for (size_t k = 0; k < st_dense_len(t); k++)
                if (memcmp((char *)ow[i] + k * st_esize(t->type),
                           (char *)od[i] + k * st_esize(t->type), st_esize(t->type))) {
                    bad = k;
                    break;
                }
        }
        if (bad != SIZE_MAX)
            printf("#   %s: element %zu: strided %.9g, dense %.9g\n", t->name, bad,
                   t->ns ? st_get(ow[i], (bad / t->img) * t->ns + t->off + bad % t->img, t->type)
                         : st_get(ow[i], bad, t->type),
                   st_get(od[i], bad, t->type));
        if (gap != SIZE_MAX) printf("#   %s: gap element %zu was written\n", t->name, gap);
        ok(bad == SIZE_MAX && gap == SIZE_MAX, "%s %s: %s%s equals the dense run bit for bit%s",
           E->name, c->name, t->name, t->ns ? " (slice)" : "", t->ns ? ", gaps untouched" : "");
        size_t nonfin = 0;
        if (t->type == ST_F32) nonfin = kt_count_nonfinite(od[i], st_dense_len(t));
        ok(nonfin == 0, "%s %s: %s all written and finite", E->name, c->name, t->name);
    }
    if (R) {
        const int rr = st_run(R, c, hd, 0, orf);
        ok(rr == 0, "%s %s: reference call returns 0 (%d)", R->name, c->name, rr);
        for (int i = 0; i < c->nt; i++) {
            const struct st_tensor *t = &c->t[i];
            if (t->role == ST_IN) continue;
            double worst = 0.0;
            size_t where = 0, nbad = 0;
            for (size_t k = 0; k < st_dense_len(t); k++) {
                const double g = st_get(od[i], k, t->type), w = st_get(orf[i], k, t->type);
                const double err = fabs(g - w), lim = t->atol + t->rtol * fabs(w);
                if (!(err <= lim)) {
                    if (!nbad) where = k;
                    nbad++;
                }
                if (err > worst) worst = err;
            }
            if (nbad)
                printf("#   %s: %zu mismatches, first at %zu: %.9g vs reference %.9g\n", t->name,
                       nbad, where, st_get(od[i], where, t->type), st_get(orf[i], where, t->type));
            ok(nbad == 0, "%s %s: %s matches %s (max abs err %.3g)", E->name, c->name, t->name,
               R->name, worst);
        }
    }
    for (int i = 0; i < c->nt; i++) {
        free(hd[i]);
        free(hw[i]);
        free(od[i]);
        free(ow[i]);
        free(orf[i]);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* The cases                                                                                */

/* Shapes of a BN case: n images of c channels, hw per plane; the slice is channels
 * [c_off, c_off + c) of a c_tot-channel tensor. */
struct st_bn_arg {
    int n, c, hw, c_tot, c_off;
    int silu;
    unsigned accum;
};

static void st_bn_desc(const struct st_bn_arg *a, int strided, struct kern_bn *d)
{
    kern_bn_init(d, a->n, a->c, a->hw);
    if (strided) d->y_nstride = (size_t)a->c_tot * (size_t)a->hw;
}

/* Positive invstd and variance where the draws put them (tensor indices in the cases). */
static void st_abs_at(void *const *h, int i, size_t n)
{
    float *const p = h[i];
    for (size_t k = 0; k < n; k++)
        p[k] = 0.5f + fabsf(p[k]);
}

/* fwd_train: 0 y, 1 save_mean, 2 save_invstd, 3 running_mean, 4 running_var, 5 x, 6 gamma,
 * 7 beta. */
static int st_bn_fwd_train(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_bn_arg *a = arg;
    struct kern_bn d;
    st_bn_desc(a, s, &d);
    return (a->silu ? E->K->bn_silu_fwd_train : E->K->bn_fwd_train)(E->ctx, &d, p[0], p[1], p[2],
                                                                    p[3], p[4], p[5], p[6], p[7]);
}

static void st_bn_fwd_train_init(void *const *h, const void *arg)
{
    st_abs_at(h, 4, (size_t)((const struct st_bn_arg *)arg)->c);
}

/* fwd_eval: 0 y, 1 x, 2 gamma, 3 beta, 4 running_mean, 5 running_var. */
static int st_bn_fwd_eval(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_bn_arg *a = arg;
    struct kern_bn d;
    st_bn_desc(a, s, &d);
    return (a->silu ? E->K->bn_silu_fwd_eval : E->K->bn_fwd_eval)(E->ctx, &d, p[0], p[1], p[2],
                                                                  p[3], p[4], p[5]);
}

static void st_bn_fwd_eval_init(void *const *h, const void *arg)
{
    st_abs_at(h, 5, (size_t)((const struct st_bn_arg *)arg)->c);
}

/* bwd: 0 dx, 1 dgamma, 2 dbeta, 3 dy, 4 x, 5 gamma, 6 beta, 7 save_mean, 8 save_invstd. */
static int st_bn_bwd(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_bn_arg *a = arg;
    struct kern_bn d;
    st_bn_desc(a, s, &d);
    if (a->silu)
        return E->K->bn_silu_bwd(E->ctx, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                                 a->accum);
    return E->K->bn_bwd(E->ctx, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[7], p[8], a->accum);
}

static void st_bn_bwd_init(void *const *h, const void *arg)
{
    st_abs_at(h, 8, (size_t)((const struct st_bn_arg *)arg)->c);
}

/* fwd_apply: as fwd_train, plus 8 sums (doubles). */
static int st_bn_fwd_apply(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_bn_arg *a = arg;
    struct kern_bn d;
    st_bn_desc(a, s, &d);
    return (a->silu ? E->K->bn_silu_fwd_apply : E->K->bn_fwd_apply)(
        E->ctx, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]);
}

/* Sums of a plausible batch: mean m, variance v > 0 per channel, count N = 2 n hw (two ranks). */
static void st_bn_sums_init(void *const *h, const void *arg)
{
    const struct st_bn_arg *a = arg;
    double *const s = h[8];
    const double cnt = 2.0 * a->n * a->hw;
    for (int ch = 0; ch < a->c; ch++) {
        const double m = kt_uniform(-1.0f, 1.0f), v = kt_uniform(0.2f, 2.0f);
        s[ch] = cnt * m;
        s[a->c + ch] = cnt * (v + m * m);
    }
    s[2 * a->c] = cnt;
    st_abs_at(h, 4, (size_t)a->c);
}

/* bwd_reduce: 0 sums, 1 dgamma, 2 dbeta, 3 dy, 4 x, 5 gamma, 6 beta, 7 save_mean,
 * 8 save_invstd. */
static int st_bn_bwd_reduce(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_bn_arg *a = arg;
    struct kern_bn d;
    st_bn_desc(a, s, &d);
    return (a->silu ? E->K->bn_silu_bwd_reduce : E->K->bn_bwd_reduce)(
        E->ctx, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], a->accum);
}

/* bwd_apply: 0 dx, 1 dy, 2 x, 3 gamma, 4 beta, 5 save_mean, 6 save_invstd, 7 sums. */
static int st_bn_bwd_apply(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_bn_arg *a = arg;
    struct kern_bn d;
    st_bn_desc(a, s, &d);
    return (a->silu ? E->K->bn_silu_bwd_apply : E->K->bn_bwd_apply)(
        E->ctx, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], a->accum);
}

static void st_bn_bwd_apply_init(void *const *h, const void *arg)
{
    const struct st_bn_arg *a = arg;
    double *const s = h[7];
    s[2 * a->c] = 2.0 * a->n * a->hw;
    st_abs_at(h, 6, (size_t)a->c);
}

/* Every BN op of one shape: the fused and phased forwards (y strided) and backwards (dy
 * strided), BN and BN+SiLU, with and without accumulation. */
static void st_bn_cases(const struct st_env *E, const struct st_env *R, int n, int c, int hw,
                        int c_tot, int c_off)
{
    const size_t ns = (size_t)c_tot * hw, off = (size_t)c_off * hw, img = (size_t)c * hw;
    const double at = 2e-4, rt = 2e-3; /* CPU vs CUDA: two-pass vs one-pass statistics */
    for (int silu = 0; silu < 2; silu++) {
        for (int acc = 0; acc < 2; acc++) {
            const struct st_bn_arg a = {
                n, c, hw, c_tot, c_off, silu, acc ? KERN_ACCUM_DX | KERN_ACCUM_DPARAM : 0u
            };
            char name[96];
            const int io = acc ? ST_INOUT : ST_OUT;
            if (!acc) {
                snprintf(name, sizeof name, "%s_fwd_train n%d c%d hw%d", silu ? "bn_silu" : "bn", n,
                         c, hw);
                const struct st_case ft = {
                    name,
                    8,
                    { { "y", n, img, ns, off, ST_OUT, ST_F32, 0, 0, at, rt },
                      { "save_mean", 1, (size_t)c, 0, 0, ST_OUT, ST_F32, 0, 0, at, rt },
                      { "save_invstd", 1, (size_t)c, 0, 0, ST_OUT, ST_F32, 0, 0, at, rt },
                      { "running_mean", 1, (size_t)c, 0, 0, ST_INOUT, ST_F32, -1, 1, at, rt },
                      { "running_var", 1, (size_t)c, 0, 0, ST_INOUT, ST_F32, -1, 1, at, rt },
                      { "x", n, img, 0, 0, ST_IN, ST_F32, -2, 3, 0, 0 },
                      { "gamma", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0.5f, 1.5f, 0, 0 },
                      { "beta", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -0.5f, 0.5f, 0, 0 } },
                    st_bn_fwd_train,
                    st_bn_fwd_train_init,
                    &a
                };
                st_check(E, R, &ft);
                snprintf(name, sizeof name, "%s_fwd_eval n%d c%d hw%d", silu ? "bn_silu" : "bn", n,
                         c, hw);
                const struct st_case fe = {
                    name,
                    6,
                    { { "y", n, img, ns, off, ST_OUT, ST_F32, 0, 0, at, rt },
                      { "x", n, img, 0, 0, ST_IN, ST_F32, -2, 3, 0, 0 },
                      { "gamma", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0.5f, 1.5f, 0, 0 },
                      { "beta", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -0.5f, 0.5f, 0, 0 },
                      { "running_mean", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -1, 1, 0, 0 },
                      { "running_var", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -1, 1, 0, 0 } },
                    st_bn_fwd_eval,
                    st_bn_fwd_eval_init,
                    &a
                };
                st_check(E, R, &fe);
                snprintf(name, sizeof name, "%s_fwd_apply n%d c%d hw%d", silu ? "bn_silu" : "bn", n,
                         c, hw);
                const struct st_case fa = {
                    name,
                    9,
                    { { "y", n, img, ns, off, ST_OUT, ST_F32, 0, 0, at, rt },
                      { "save_mean", 1, (size_t)c, 0, 0, ST_OUT, ST_F32, 0, 0, at, rt },
                      { "save_invstd", 1, (size_t)c, 0, 0, ST_OUT, ST_F32, 0, 0, at, rt },
                      { "running_mean", 1, (size_t)c, 0, 0, ST_INOUT, ST_F32, -1, 1, at, rt },
                      { "running_var", 1, (size_t)c, 0, 0, ST_INOUT, ST_F32, -1, 1, at, rt },
                      { "x", n, img, 0, 0, ST_IN, ST_F32, -2, 3, 0, 0 },
                      { "gamma", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0.5f, 1.5f, 0, 0 },
                      { "beta", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -0.5f, 0.5f, 0, 0 },
                      { "sums", 1, 2 * (size_t)c + 1, 0, 0, ST_IN, ST_F64, 0, 1, 0, 0 } },
                    st_bn_fwd_apply,
                    st_bn_sums_init,
                    &a
                };
                st_check(E, R, &fa);
            }
            snprintf(name, sizeof name, "%s_bwd n%d c%d hw%d accum %u", silu ? "bn_silu" : "bn", n,
                     c, hw, a.accum);
            const struct st_case b = {
                name,
                9,
                { { "dx", n, img, 0, 0, io, ST_F32, -1, 1, at, rt },
                  { "dgamma", 1, (size_t)c, 0, 0, io, ST_F32, -1, 1, 1e-3, rt },
                  { "dbeta", 1, (size_t)c, 0, 0, io, ST_F32, -1, 1, 1e-3, rt },
                  { "dy", n, img, ns, off, ST_IN, ST_F32, -1, 1, 0, 0 },
                  { "x", n, img, 0, 0, ST_IN, ST_F32, -2, 3, 0, 0 },
                  { "gamma", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0.5f, 1.5f, 0, 0 },
                  { "beta", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -0.5f, 0.5f, 0, 0 },
                  { "save_mean", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0, 1, 0, 0 },
                  { "save_invstd", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0, 1, 0, 0 } },
                st_bn_bwd,
                st_bn_bwd_init,
                &a
            };
            st_check(E, R, &b);
            snprintf(name, sizeof name, "%s_bwd_reduce n%d c%d hw%d accum %u",
                     silu ? "bn_silu" : "bn", n, c, hw, a.accum);
            const struct st_case br = {
                name,
                9,
                { { "sums", 1, 2 * (size_t)c + 1, 0, 0, ST_OUT, ST_F64, 0, 0, 1e-3, rt },
                  { "dgamma", 1, (size_t)c, 0, 0, io, ST_F32, -1, 1, 1e-3, rt },
                  { "dbeta", 1, (size_t)c, 0, 0, io, ST_F32, -1, 1, 1e-3, rt },
                  { "dy", n, img, ns, off, ST_IN, ST_F32, -1, 1, 0, 0 },
                  { "x", n, img, 0, 0, ST_IN, ST_F32, -2, 3, 0, 0 },
                  { "gamma", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0.5f, 1.5f, 0, 0 },
                  { "beta", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -0.5f, 0.5f, 0, 0 },
                  { "save_mean", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0, 1, 0, 0 },
                  { "save_invstd", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0, 1, 0, 0 } },
                st_bn_bwd_reduce,
                st_bn_bwd_init,
                &a
            };
            st_check(E, R, &br);
            snprintf(name, sizeof name, "%s_bwd_apply n%d c%d hw%d accum %u",
                     silu ? "bn_silu" : "bn", n, c, hw, a.accum);
            const struct st_case ba = {
                name,
                8,
                { { "dx", n, img, 0, 0, io, ST_F32, -1, 1, at, rt },
                  { "dy", n, img, ns, off, ST_IN, ST_F32, -1, 1, 0, 0 },
                  { "x", n, img, 0, 0, ST_IN, ST_F32, -2, 3, 0, 0 },
                  { "gamma", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0.5f, 1.5f, 0, 0 },
                  { "beta", 1, (size_t)c, 0, 0, ST_IN, ST_F32, -0.5f, 0.5f, 0, 0 },
                  { "save_mean", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0, 1, 0, 0 },
                  { "save_invstd", 1, (size_t)c, 0, 0, ST_IN, ST_F32, 0, 1, 0, 0 },
                  { "sums", 1, 2 * (size_t)c + 1, 0, 0, ST_IN, ST_F64, -50, 50, 0, 0 } },
                st_bn_bwd_apply,
                st_bn_bwd_apply_init,
                &a
            };
            st_check(E, R, &ba);
        }
    }
}

/* conv2d: the input x (and dx) a slice of c_tot channels from channel c_off. */
struct st_conv_arg {
    struct kern_conv2d d; /* x_nstride 0; the strided run sets it */
    size_t x_ns;
    unsigned accum;
};

static void st_conv_desc(const struct st_conv_arg *a, int s, struct kern_conv2d *d)
{
    *d = a->d;
    d->x_nstride = s ? a->x_ns : 0;
}

/* fwd: 0 y, 1 x, 2 w. */
static int st_conv_fwd(const struct st_env *E, void *const *p, int s, const void *arg)
{
    struct kern_conv2d d;
    st_conv_desc(arg, s, &d);
    return E->K->conv2d_fwd(E->ctx, &d, p[0], p[1], p[2], NULL);
}

/* bwd_data: 0 dx, 1 dy, 2 w. */
static int st_conv_bwd_data(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_conv_arg *a = arg;
    struct kern_conv2d d;
    st_conv_desc(a, s, &d);
    return E->K->conv2d_bwd_data(E->ctx, &d, p[0], p[1], p[2], a->accum);
}

/* bwd_filter: 0 dw, 1 dy, 2 x. */
static int st_conv_bwd_filter(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_conv_arg *a = arg;
    struct kern_conv2d d;
    st_conv_desc(a, s, &d);
    return E->K->conv2d_bwd_filter(E->ctx, &d, p[0], p[1], p[2], a->accum);
}

/* The three float32 conv ops of one shape with x a channel slice (workspace reserved here). */
static void st_conv_cases(const struct st_env *E, const struct st_env *R, int n, int c_in, int hw,
                          int c_out, int k, int stride, int c_tot, int c_off)
{
    struct st_conv_arg a;
    kern_conv2d_init(&a.d, n, c_in, hw, hw, c_out, k, stride, k / 2);
    int oh = 0, ow = 0;
    kern_conv2d_out_hw(&a.d, &oh, &ow);
    const size_t img = (size_t)c_in * hw * hw, yimg = (size_t)c_out * oh * ow;
    a.x_ns = (size_t)c_tot * hw * hw;
    const size_t off = (size_t)c_off * hw * hw, nw = (size_t)c_out * c_in * k * k;
    for (int s = 0; s < 2; s++) {
        struct kern_conv2d d;
        size_t ws = 0;
        st_conv_desc(&a, s, &d);
        const struct st_env *const envs[2] = { E, R };
        for (int e = 0; e < 2; e++)
            if (envs[e] && (envs[e]->K->conv2d_workspace_size(envs[e]->ctx, &d, &ws) < 0 ||
                            kern_ctx_reserve(envs[e]->ctx, ws) < 0)) {
                printf("Bail out! conv2d workspace\n");
                exit(99);
            }
    }
    const double at = 1e-4, rt = 1e-4;
    char name[96];
    for (int acc = 0; acc < 2; acc++) {
        a.accum = acc ? KERN_ACCUM_DX | KERN_ACCUM_DPARAM : 0u;
        const int io = acc ? ST_INOUT : ST_OUT;
        if (!acc) {
            snprintf(name, sizeof name, "conv2d_fwd n%d %d->%d k%d s%d %dx%d", n, c_in, c_out, k,
                     stride, hw, hw);
            const struct st_case f = { name,
                                       3,
                                       { { "y", n, yimg, 0, 0, ST_OUT, ST_F32, 0, 0, at, rt },
                                         { "x", n, img, a.x_ns, off, ST_IN, ST_F32, -1, 1, 0, 0 },
                                         { "w", 1, nw, 0, 0, ST_IN, ST_F32, -0.3f, 0.3f, 0, 0 } },
                                       st_conv_fwd,
                                       NULL,
                                       &a };
            st_check(E, R, &f);
        }
        snprintf(name, sizeof name, "conv2d_bwd_data n%d %d->%d k%d s%d %dx%d accum %u", n, c_in,
                 c_out, k, stride, hw, hw, a.accum);
        const struct st_case bd = { name,
                                    3,
                                    { { "dx", n, img, a.x_ns, off, io, ST_F32, -1, 1, at, rt },
                                      { "dy", n, yimg, 0, 0, ST_IN, ST_F32, -1, 1, 0, 0 },
                                      { "w", 1, nw, 0, 0, ST_IN, ST_F32, -0.3f, 0.3f, 0, 0 } },
                                    st_conv_bwd_data,
                                    NULL,
                                    &a };
        st_check(E, R, &bd);
        snprintf(name, sizeof name, "conv2d_bwd_filter n%d %d->%d k%d s%d %dx%d accum %u", n, c_in,
                 c_out, k, stride, hw, hw, a.accum);
        const struct st_case bf = { name,
                                    3,
                                    { { "dw", 1, nw, 0, 0, io, ST_F32, -1, 1, 1e-3, rt },
                                      { "dy", n, yimg, 0, 0, ST_IN, ST_F32, -1, 1, 0, 0 },
                                      { "x", n, img, a.x_ns, off, ST_IN, ST_F32, -1, 1, 0, 0 } },
                                    st_conv_bwd_filter,
                                    NULL,
                                    &a };
        st_check(E, R, &bf);
    }
}

/* SPPF's pool: x and y slices of two concat buffers (x at channel 0, y at channel c of 4c). */
struct st_pool_arg {
    struct kern_pool2d d;
    size_t x_ns, y_ns;
    unsigned accum;
};

static void st_pool_desc(const struct st_pool_arg *a, int s, struct kern_pool2d *d)
{
    *d = a->d;
    d->x_nstride = s ? a->x_ns : 0;
    d->y_nstride = s ? a->y_ns : 0;
}

/* fwd: 0 y, 1 idx, 2 x. */
static int st_pool_fwd(const struct st_env *E, void *const *p, int s, const void *arg)
{
    struct kern_pool2d d;
    st_pool_desc(arg, s, &d);
    return E->K->maxpool2d_fwd(E->ctx, &d, p[0], p[1], p[2]);
}

/* bwd: 0 dx, 1 dy, 2 idx. */
static int st_pool_bwd(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_pool_arg *a = arg;
    struct kern_pool2d d;
    st_pool_desc(a, s, &d);
    return E->K->maxpool2d_bwd(E->ctx, &d, p[0], p[1], p[2], a->accum);
}

/* Valid argmax indices for the backward: the CPU reference's forward on random x. */
static void st_pool_bwd_init(void *const *h, const void *arg)
{
    const struct st_pool_arg *a = arg;
    const size_t nx = (size_t)a->d.n * a->d.c * a->d.h_in * a->d.w_in;
    float *const x = kt_alloc(nx), *const y = kt_alloc(nx);
    kt_fill(x, nx, -1, 1);
    struct kern_ctx *const c = kt_ctx(0);
    if (kern_ref_maxpool2d_fwd(c, &a->d, y, h[2], x) < 0) {
        printf("Bail out! maxpool indices\n");
        exit(99);
    }
    kern_ctx_destroy(c);
    free(x);
    free(y);
}

static void st_pool_cases(const struct st_env *E, const struct st_env *R, int n, int c, int hw)
{
    struct st_pool_arg a;
    a.d = (struct kern_pool2d){
        .n = n, .c = c, .h_in = hw, .w_in = hw, .k = 5, .stride = 1, .pad = 2
    };
    const size_t img = (size_t)c * hw * hw, plane = (size_t)hw * hw;
    a.x_ns = a.y_ns = 4 * img; /* SPPF's concat of x and three pools */
    char name[96];
    snprintf(name, sizeof name, "maxpool2d_fwd n%d c%d %dx%d k5", n, c, hw, hw);
    a.accum = 0;
    const struct st_case f = { name,
                               3,
                               { { "y", n, img, a.y_ns, img, ST_OUT, ST_F32, 0, 0, 0, 0 },
                                 { "idx", n, img, 0, 0, ST_OUT, ST_I32, 0, 0, 0, 0 },
                                 { "x", n, img, a.x_ns, 0, ST_IN, ST_F32, -1, 1, 0, 0 } },
                               st_pool_fwd,
                               NULL,
                               &a };
    st_check(E, R, &f);
    (void)plane;
    for (int acc = 0; acc < 2; acc++) {
        struct st_pool_arg b = a;
        b.accum = acc ? KERN_ACCUM_DX : 0u;
        snprintf(name, sizeof name, "maxpool2d_bwd n%d c%d %dx%d k5 accum %u", n, c, hw, hw,
                 b.accum);
        const struct st_case bw = { name,
                                    3,
                                    { { "dx", n, img, b.x_ns, 3 * img, acc ? ST_INOUT : ST_OUT,
                                        ST_F32, -1, 1, 1e-6, 1e-6 },
                                      { "dy", n, img, b.y_ns, 2 * img, ST_IN, ST_F32, -1, 1, 0, 0 },
                                      { "idx", n, img, 0, 0, ST_IN, ST_I32, 0, 0, 0, 0 } },
                                    st_pool_bwd,
                                    st_pool_bwd_init,
                                    &b };
        st_check(E, R, &bw);
    }
}

/* Upsample: x a slice (head output 10 / 14 in a Concat) and y a slice of another buffer. */
struct st_up_arg {
    int n, c, h, w;
    size_t x_ns, y_ns;
    unsigned accum;
};

/* fwd: 0 y, 1 x. */
static int st_up_fwd(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_up_arg *a = arg;
    return E->K->upsample2x_ns_fwd(E->ctx, p[0], p[1], a->n, a->c, a->h, a->w, s ? a->y_ns : 0,
                                   s ? a->x_ns : 0);
}

/* bwd: 0 dx, 1 dy. */
static int st_up_bwd(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_up_arg *a = arg;
    return E->K->upsample2x_ns_bwd(E->ctx, p[0], p[1], a->n, a->c, a->h, a->w, s ? a->x_ns : 0,
                                   s ? a->y_ns : 0, a->accum);
}

static void st_up_cases(const struct st_env *E, const struct st_env *R, int n, int c, int h, int w)
{
    struct st_up_arg a = { n, c, h, w, (size_t)3 * c * h * w, (size_t)2 * 4 * c * h * w, 0 };
    const size_t xi = (size_t)c * h * w, yi = 4 * xi;
    char name[96];
    snprintf(name, sizeof name, "upsample2x_ns_fwd n%d c%d %dx%d", n, c, h, w);
    const struct st_case f = { name,
                               2,
                               { { "y", n, yi, a.y_ns, 0, ST_OUT, ST_F32, 0, 0, 0, 0 },
                                 { "x", n, xi, a.x_ns, 2 * xi, ST_IN, ST_F32, -1, 1, 0, 0 } },
                               st_up_fwd,
                               NULL,
                               &a };
    st_check(E, R, &f);
    for (int acc = 0; acc < 2; acc++) {
        struct st_up_arg b = a;
        b.accum = acc ? KERN_ACCUM_DX : 0u;
        snprintf(name, sizeof name, "upsample2x_ns_bwd n%d c%d %dx%d accum %u", n, c, h, w,
                 b.accum);
        const struct st_case bw = { name,
                                    2,
                                    { { "dx", n, xi, b.x_ns, 2 * xi, acc ? ST_INOUT : ST_OUT,
                                        ST_F32, -1, 1, 0, 0 },
                                      { "dy", n, yi, b.y_ns, 0, ST_IN, ST_F32, -1, 1, 0, 0 } },
                                    st_up_bwd,
                                    NULL,
                                    &b };
        st_check(E, R, &bw);
    }
}

/* Casts: the float32 side a slice; dtype bf16 or fp16. */
struct st_cast_arg {
    int dtype, n;
    size_t inner, ns;
    unsigned accum;
};

/* f32 -> lowp: 0 dst (16-bit), 1 src. */
static int st_cast_down(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_cast_arg *a = arg;
    return E->K->cast_f32_lowp_ns(E->ctx, a->dtype, p[0], p[1], a->n, a->inner, s ? a->ns : 0);
}

/* lowp -> f32: 0 dst, 1 src (16-bit). */
static int st_cast_up(const struct st_env *E, void *const *p, int s, const void *arg)
{
    const struct st_cast_arg *a = arg;
    return E->K->cast_lowp_f32_ns(E->ctx, a->dtype, p[0], p[1], a->n, a->inner, s ? a->ns : 0,
                                  a->accum);
}

/* 16-bit inputs as the dtype's rounding of the floats drawn (fp16: via the reference cast, so
 * every pattern is a finite value of that type). */
static void st_cast_up_init(void *const *h, const void *arg)
{
    const struct st_cast_arg *a = arg;
    const size_t n = (size_t)a->n * a->inner;
    float *const f = kt_alloc(n);
    kt_fill(f, n, -300.0f, 300.0f);
    struct kern_ctx *const c = kt_ctx(0);
    const int rc = a->dtype == KERN_DT_BF16 ? kern_ref_cast_f32_bf16(c, h[1], f, n)
                                            : kern_ref_cast_f32_f16(c, h[1], f, n);
    if (rc < 0) {
        printf("Bail out! cast\n");
        exit(99);
    }
    kern_ctx_destroy(c);
    free(f);
}

static void st_cast_cases(const struct st_env *E, const struct st_env *R, int n, int c, int hw)
{
    const size_t inner = (size_t)c * hw, ns = 3 * inner;
    for (int k = 0; k < 2; k++) {
        const int dt = k ? KERN_DT_F16 : KERN_DT_BF16;
        const struct st_cast_arg a = { dt, n, inner, ns, 0 };
        char name[96];
        snprintf(name, sizeof name, "cast_f32_lowp_ns %s n%d inner %zu", k ? "f16" : "bf16", n,
                 inner);
        /* values from tiny (fp16 subnormals) to past fp16's range (Inf) */
        const struct st_case dn = { name,
                                    2,
                                    { { "dst", n, inner, 0, 0, ST_OUT, ST_U16, 0, 0, 0, 0 },
                                      { "src", n, inner, ns, inner, ST_IN, ST_F32, -7e4f, 7e4f, 0,
                                        0 } },
                                    st_cast_down,
                                    NULL,
                                    &a };
        st_check(E, R, &dn);
        for (int acc = 0; acc < 2; acc++) {
            struct st_cast_arg b = a;
            b.accum = acc ? KERN_ACCUM_DX : 0u;
            snprintf(name, sizeof name, "cast_lowp_f32_ns %s n%d inner %zu accum %u",
                     k ? "f16" : "bf16", n, inner, b.accum);
            const struct st_case upc = { name,
                                         2,
                                         { { "dst", n, inner, ns, 2 * inner,
                                             acc ? ST_INOUT : ST_OUT, ST_F32, -1, 1, 0, 0 },
                                           { "src", n, inner, 0, 0, ST_IN, ST_U16, 0, 0, 0, 0 } },
                                         st_cast_up,
                                         st_cast_up_init,
                                         &b };
            st_check(E, R, &upc);
        }
    }
}

/* Every op with an n-stride on E (against R when given), on YOLOv5-like slices. */
static void st_all(const struct st_env *E, const struct st_env *R)
{
    /* C3's branch (c 16 of 32 at 0 / 16), SPPF-like 4-way, Concat of head outputs; hw below and
     * above KERN_BN_CHUNK (1024), odd sizes. */
    st_bn_cases(E, R, 4, 12, 13 * 11, 36, 12);
    st_bn_cases(E, R, 2, 8, 40 * 40, 16, 0);
    st_conv_cases(E, R, 4, 16, 20, 24, 1, 1, 32, 16); /* pointwise: GEMM on x in place */
    st_conv_cases(E, R, 3, 8, 17, 12, 3, 1, 24, 8);   /* im2col */
    st_conv_cases(E, R, 3, 8, 18, 16, 3, 2, 16, 8);   /* phase split of a strided conv */
    st_pool_cases(E, R, 3, 8, 13);
    st_up_cases(E, R, 3, 8, 10, 7);
    st_cast_cases(E, R, 3, 8, 50);
}

#endif
