/*
 * conv2d CPU reference (kern_ref_conv2d_*): forward, backward-data, backward-filter and bias
 * against a naive direct convolution in double on random shapes (the YOLOv5 stem k6 s2 p2, 1x1,
 * k3 s2, odd and non-square cases), overwrite and accumulate modes with NaN canaries, finite
 * differences on a tiny shape, and the error paths.
 * `--bench` times YOLOv5n-like layers at 320x320, batch 8 (meson benchmark 'kern_conv2d').
 *
 * Tolerances: against the double reference |got - want| <= 1e-4 + 1e-4 |want| (fp32 GEMMs with
 * K <= 300 terms of magnitude <= 1). Finite differences: conv is linear, so central differences
 * with h = 0.25 are exact up to rounding; checked at 2e-3 + 1e-3 |g|.
 */
#include <errno.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "kern_testutil.h"

struct shape {
    int n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw;
};

static void desc_of(const struct shape *s, struct kern_conv2d *d)
{
    d->n = s->n;
    d->c_in = s->c_in;
    d->h_in = s->h;
    d->w_in = s->w;
    d->c_out = s->c_out;
    d->k_h = s->kh;
    d->k_w = s->kw;
    d->stride_h = s->sh;
    d->stride_w = s->sw;
    d->pad_h = s->ph;
    d->pad_w = s->pw;
    d->x_nstride = 0;
}

/* Naive direct convolution in double: y, dx, dw from their definitions. */
static void naive_fwd(const struct kern_conv2d *d, int oh, int ow, double *y, const float *x,
                      const float *w, const float *b)
{
    for (int i = 0; i < d->n; i++)
        for (int co = 0; co < d->c_out; co++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double s = b ? b[co] : 0.0;
                    for (int ci = 0; ci < d->c_in; ci++)
                        for (int ky = 0; ky < d->k_h; ky++)
                            for (int kx = 0; kx < d->k_w; kx++) {
                                const int iy = oy * d->stride_h - d->pad_h + ky;
                                const int ix = ox * d->stride_w - d->pad_w + kx;
                                if (iy < 0 || iy >= d->h_in || ix < 0 || ix >= d->w_in) continue;
                                s += (double)
                                         x[((size_t)(i * d->c_in + ci) * d->h_in + iy) * d->w_in +
                                           ix] *
                                     w[((size_t)(co * d->c_in + ci) * d->k_h + ky) * d->k_w + kx];
                            }
                    y[((size_t)(i * d->c_out + co) * oh + oy) * ow + ox] = s;
                }
}

static void naive_bwd(const struct kern_conv2d *d, int oh, int ow, double *dx, double *dw,
                      double *db, const float *dy, const float *x, const float *w)
{
    const size_t nx = (size_t)d->n * d->c_in * d->h_in * d->w_in;
    const size_t nw = (size_t)d->c_out * d->c_in * d->k_h * d->k_w;
    for (size_t i = 0; i < nx; i++)
        dx[i] = 0.0;
    for (size_t i = 0; i < nw; i++)
        dw[i] = 0.0;
    for (int c = 0; c < d->c_out; c++)
        db[c] = 0.0;
    for (int i = 0; i < d->n; i++)
        for (int co = 0; co < d->c_out; co++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    const double g = dy[((size_t)(i * d->c_out + co) * oh + oy) * ow + ox];
                    db[co] += g;
                    for (int ci = 0; ci < d->c_in; ci++)
                        for (int ky = 0; ky < d->k_h; ky++)
                            for (int kx = 0; kx < d->k_w; kx++) {
                                const int iy = oy * d->stride_h - d->pad_h + ky;
                                const int ix = ox * d->stride_w - d->pad_w + kx;
                                if (iy < 0 || iy >= d->h_in || ix < 0 || ix >= d->w_in) continue;
                                const size_t xi =
                                    ((size_t)(i * d->c_in + ci) * d->h_in + iy) * d->w_in + ix;
                                const size_t wi =
                                    ((size_t)(co * d->c_in + ci) * d->k_h + ky) * d->k_w + kx;
                                dx[xi] += g * w[wi];
                                dw[wi] += g * x[xi];
                            }
                }
}

/* Threads of the contexts check_shape creates (1: OpenBLAS threads; n: the context's own). */
static int g_threads = 1;

static struct kern_ctx *ctx_threads(int threads)
{
    struct kern_ctx_opts o;
    struct kern_ctx *ctx = NULL;
    kern_ctx_opts_default(&o);
    o.threads = threads;
    if (kern_ctx_create(&o, &ctx) < 0) exit(99);
    return ctx;
}

static void check_shape(const struct shape *s, const char *label)
{
    struct kern_conv2d d;
    int oh, ow;
    size_t ws;
    desc_of(s, &d);
    if (kern_conv2d_out_hw(&d, &oh, &ow) < 0) {
        ok(0, "%s: shape accepted", label);
        return;
    }
    struct kern_ctx *const ctx = ctx_threads(g_threads);
    is_int(kern_ref_conv2d_workspace_size(ctx, &d, &ws), 0, "%s: workspace size query", label);
    is_int(kern_ref_conv2d_fwd(ctx, &d, NULL, NULL, NULL, NULL), -EINVAL,
           "%s: NULL tensors refused", label);
    if (ws) {
        /* The full size is what the fused eval op needs (its band of conv output; the plain ops
         * may need less: none for 1x1 convs). Refused before any buffer is touched. */
        float b1[4] = { 0 }, b2[4] = { 0 }, b3[4] = { 0 }, b4[4] = { 0 }, b5[4] = { 0 };
        float b6[4] = { 0 }, b7[4] = { 0 }, b8[4] = { 0 };
        struct kern_bn bn;
        kern_bn_init(&bn, d.n, d.c_out, oh * ow);
        is_int(kern_ref_conv2d_bn_silu_fwd_eval(ctx, &d, &bn, b1, b2, b3, b4, b5, b6, b7, b8, NULL),
               -KERN_EWORKSPACE,
               "%s: missing workspace refused with KERN_EWORKSPACE, nothing allocated", label);
    }
    if (kern_ctx_reserve(ctx, ws) < 0) exit(99);

    const size_t nx = (size_t)d.n * d.c_in * d.h_in * d.w_in;
    const size_t nw = (size_t)d.c_out * d.c_in * d.k_h * d.k_w;
    const size_t ny = (size_t)d.n * d.c_out * oh * ow;
    float *const x = kt_alloc(nx), *const w = kt_alloc(nw), *const b = kt_alloc((size_t)d.c_out);
    float *const y = kt_alloc(ny), *const dy = kt_alloc(ny);
    float *const dx = kt_alloc(nx), *const dw = kt_alloc(nw), *const db = kt_alloc((size_t)d.c_out);
    float *const dx0 = kt_alloc(nx), *const dw0 = kt_alloc(nw),
                 *const db0 = kt_alloc((size_t)d.c_out);
    double *const ry = malloc(ny * sizeof(double)), *const rdx = malloc(nx * sizeof(double));
    double *const rdw = malloc(nw * sizeof(double)), *const rdb = malloc((size_t)d.c_out * 8);
    if (!ry || !rdx || !rdw || !rdb) exit(99);
    kt_fill(x, nx, -1, 1);
    kt_fill(w, nw, -1, 1);
    kt_fill(b, (size_t)d.c_out, -1, 1);
    kt_fill(dy, ny, -1, 1);
    const double atol = 1e-4, rtol = 1e-4;
    char what[200];

    naive_fwd(&d, oh, ow, ry, x, w, NULL);
    kt_poison(y, ny);
    is_int(kern_ref_conv2d_fwd(ctx, &d, y, x, w, NULL), 0, "%s: fwd runs", label);
    snprintf(what, sizeof(what), "%s: fwd vs naive", label);
    kt_check_close(what, y, ry, ny, atol, rtol);

    naive_fwd(&d, oh, ow, ry, x, w, b);
    kt_poison(y, ny);
    kern_ref_conv2d_fwd(ctx, &d, y, x, w, b);
    snprintf(what, sizeof(what), "%s: fwd+bias vs naive", label);
    kt_check_close(what, y, ry, ny, atol, rtol);

    naive_bwd(&d, oh, ow, rdx, rdw, rdb, dy, x, w);
    kt_poison(dx, nx);
    kt_poison(dw, nw);
    kt_poison(db, (size_t)d.c_out);
    is_int(kern_ref_conv2d_bwd_data(ctx, &d, dx, dy, w, 0), 0, "%s: bwd_data runs", label);
    is_int(kern_ref_conv2d_bwd_filter(ctx, &d, dw, dy, x, 0), 0, "%s: bwd_filter runs", label);
    is_int(kern_ref_conv2d_bwd_bias(ctx, &d, db, dy, 0), 0, "%s: bwd_bias runs", label);
    snprintf(what, sizeof(what), "%s: dx (=) vs naive", label);
    kt_check_close(what, dx, rdx, nx, atol, rtol);
    snprintf(what, sizeof(what), "%s: dw (=) vs naive", label);
    kt_check_close(what, dw, rdw, nw, atol, rtol);
    snprintf(what, sizeof(what), "%s: db (=) vs naive", label);
    kt_check_close(what, db, rdb, (size_t)d.c_out, atol, rtol);

    /* Accumulate: start from random gradients, expect start + naive. */
    kt_fill(dx0, nx, -1, 1);
    kt_fill(dw0, nw, -1, 1);
    kt_fill(db0, (size_t)d.c_out, -1, 1);
    memcpy(dx, dx0, nx * sizeof(float));
    memcpy(dw, dw0, nw * sizeof(float));
    memcpy(db, db0, (size_t)d.c_out * sizeof(float));
    kern_ref_conv2d_bwd_data(ctx, &d, dx, dy, w, KERN_ACCUM_DX);
    kern_ref_conv2d_bwd_filter(ctx, &d, dw, dy, x, KERN_ACCUM_DPARAM);
    kern_ref_conv2d_bwd_bias(ctx, &d, db, dy, KERN_ACCUM_DPARAM);
    for (size_t i = 0; i < nx; i++)
        rdx[i] += dx0[i];
    for (size_t i = 0; i < nw; i++)
        rdw[i] += dw0[i];
    for (int c = 0; c < d.c_out; c++)
        rdb[c] += db0[c];
    snprintf(what, sizeof(what), "%s: dx (+=) vs dx0 + naive", label);
    kt_check_close(what, dx, rdx, nx, atol, rtol);
    snprintf(what, sizeof(what), "%s: dw (+=) vs dw0 + naive", label);
    kt_check_close(what, dw, rdw, nw, atol, rtol);
    snprintf(what, sizeof(what), "%s: db (+=) vs db0 + naive", label);
    kt_check_close(what, db, rdb, (size_t)d.c_out, atol, rtol);

    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
    free(dx0), free(dw0), free(db0), free(ry), free(rdx), free(rdw), free(rdb);
    kern_ctx_destroy(ctx);
}

/* ---- finite differences on a tiny shape: L = sum r * conv(x, w) + b ---- */

struct fd_state {
    struct kern_ctx *ctx;
    struct kern_conv2d d;
    float *x, *w, *b, *y, *r;
    size_t ny;
};

static double fd_loss(void *p)
{
    struct fd_state *const s = p;
    kern_ref_conv2d_fwd(s->ctx, &s->d, s->y, s->x, s->w, s->b);
    return kt_dot(s->r, s->y, s->ny);
}

static void check_fd(void)
{
    struct fd_state s;
    int oh, ow;
    size_t ws;
    kern_conv2d_init(&s.d, 2, 3, 6, 5, 4, 3, 2, 1);
    kern_conv2d_out_hw(&s.d, &oh, &ow);
    s.ctx = kt_ctx(0);
    kern_ref_conv2d_workspace_size(s.ctx, &s.d, &ws);
    kern_ctx_reserve(s.ctx, ws);
    const size_t nx = 2 * 3 * 6 * 5, nw = 4 * 3 * 3 * 3;
    s.ny = (size_t)2 * 4 * oh * ow;
    s.x = kt_alloc(nx), s.w = kt_alloc(nw), s.b = kt_alloc(4), s.y = kt_alloc(s.ny);
    s.r = kt_alloc(s.ny);
    float *const dx = kt_alloc(nx), *const dw = kt_alloc(nw), *const db = kt_alloc(4);
    kt_fill(s.x, nx, -1, 1);
    kt_fill(s.w, nw, -1, 1);
    kt_fill(s.b, 4, -1, 1);
    kt_fill(s.r, s.ny, -1, 1);
    kern_ref_conv2d_bwd_data(s.ctx, &s.d, dx, s.r, s.w, 0);
    kern_ref_conv2d_bwd_filter(s.ctx, &s.d, dw, s.r, s.x, 0);
    kern_ref_conv2d_bwd_bias(s.ctx, &s.d, db, s.r, 0);
    kt_check_fd("conv k3 s2 p1 dx", s.x, nx, dx, fd_loss, &s, 0.25f, 2e-3, 1e-3, 1);
    kt_check_fd("conv k3 s2 p1 dw", s.w, nw, dw, fd_loss, &s, 0.25f, 2e-3, 1e-3, 1);
    kt_check_fd("conv k3 s2 p1 db", s.b, 4, db, fd_loss, &s, 0.25f, 2e-3, 1e-3, 1);
    free(s.x), free(s.w), free(s.b), free(s.y), free(s.r), free(dx), free(dw), free(db);
    kern_ctx_destroy(s.ctx);
}

static void check_errors(void)
{
    struct kern_conv2d d;
    struct kern_ctx *const ctx = kt_ctx(0);
    int oh, ow;
    float b1[16] = { 0 }, b2[16] = { 0 }, b3[16] = { 0 };
    kern_conv2d_init(&d, 1, 1, 2, 2, 1, 5, 1, 0);
    is_int(kern_conv2d_out_hw(&d, &oh, &ow), -EINVAL, "kernel larger than the padded input");
    kern_conv2d_init(&d, 1, 1, 4, 4, 1, 3, 0, 1);
    is_int(kern_conv2d_out_hw(&d, &oh, &ow), -EINVAL, "stride 0 refused");
    kern_conv2d_init(&d, 1, 1, 4, 4, 1, 1, 1, 0);
    is_int(kern_ref_conv2d_fwd(NULL, &d, b1, b2, b3, NULL), -EINVAL, "NULL ctx refused");
    is_int(kern_ref_conv2d_bwd_data(ctx, &d, b1, b2, b3, 8u), -EINVAL,
           "unknown accum bits refused");
    is_int(kern_ref_conv2d_fwd(ctx, &d, b1, b2, b3, NULL), 0,
           "1x1 stride-1 conv needs no workspace");
    struct kern_ctx_opts o;
    struct kern_ctx *c2 = NULL;
    kern_ctx_opts_default(&o);
    o.backend = KERN_BACKEND_CUDA;
    is_int(kern_ctx_create(&o, &c2), -KERN_EBACKEND, "CUDA context refused by the CPU library");
    ok(c2 == NULL, "no context on failure");
    ok(strstr(kern_strerror(-KERN_EWORKSPACE), "workspace") != NULL, "kern_strerror names codes");
    ok(strcmp(kern_strerror(-EINVAL), strerror(EINVAL)) == 0, "kern_strerror falls back to errno");
    ok(kern_ops_ref()->conv2d_fwd == kern_ref_conv2d_fwd &&
           kern_ops_ref()->ciou_bwd == kern_ref_ciou_bwd &&
           kern_ops_ref()->backend == KERN_BACKEND_CPU,
       "kern_ops_ref table points at the reference ops");
    kern_ctx_destroy(ctx);
    kern_ctx_destroy(NULL);
}

/*
 * The BLAS core (kern_ctx.c): with OPENBLAS_CORETYPE unset, a CPU with AVX2 and FMA never runs
 * OpenBLAS's Prescott fallback; a core the user set is kept as set, without the note; the
 * environment is left as it was. The conv checks after this one run on the chosen core.
 */
static void check_blas_core(void)
{
    const char *const env0 = getenv("OPENBLAS_CORETYPE");
    char env[64];
    snprintf(env, sizeof env, "%s", env0 ? env0 : "");
    struct kern_ctx *const ctx = ctx_threads(1);
    const char *const core = kern_blas_core();
    ok(core && *core, "BLAS kernels named: %s", core ? core : "(null)");
    if (!strcmp(core, "not OpenBLAS")) {
        tap_diag("not OpenBLAS: nothing to check of the core");
        kern_ctx_destroy(ctx);
        return;
    }
    const char *const env1 = getenv("OPENBLAS_CORETYPE");
    ok(!env0 == !env1 && (!env0 || !strcmp(env, env1)), "OPENBLAS_CORETYPE left as it was (%s)",
       env0 ? env : "unset");
    if (env0) {
        ok(!strncasecmp(core, env, strlen(env)) && !strstr(core, "fell back"),
           "OPENBLAS_CORETYPE=%s is kept: %s", env, core);
    } else {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            ok(strncmp(core, "Prescott", 8) != 0, "an AVX2 CPU runs no SSE3 Prescott kernels: %s",
               core);
        else
            tap_diag("this CPU has no AVX2 and FMA: nothing to check of the core");
    }
    kern_ctx_destroy(ctx);
}

/* ---- benchmark ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * Times every layer with a context of `threads` threads (1: images in turn, OpenBLAS threads
 * inside the GEMMs; n: images split over the context's own threads, OpenBLAS single).
 */
static void bench_config(int threads)
{
    /* YOLOv5n at 320x320, batch 8: the stem, the strided 3x3s, C3 1x1 and 3x3, SPPF, Detect. */
    static const struct {
        const char *name;
        int c_in, hw, c_out, k, s, p;
    } layers[] = {
        { "L0 stem 3->16 k6s2", 3, 320, 16, 6, 2, 2 },
        { "L1 16->32 k3s2", 16, 160, 32, 3, 2, 1 },
        { "L2 C3.cv1 32->16 k1", 32, 80, 16, 1, 1, 0 },
        { "L2 C3.m 16->16 k3", 16, 80, 16, 3, 1, 1 },
        { "L3 32->64 k3s2", 32, 80, 64, 3, 2, 1 },
        { "L4 C3.m 32->32 k3", 32, 40, 32, 3, 1, 1 },
        { "L5 64->128 k3s2", 64, 40, 128, 3, 2, 1 },
        { "L7 128->256 k3s2", 128, 20, 256, 3, 2, 1 },
        { "L9 SPPF.cv2 512->256 k1", 512, 10, 256, 1, 1, 0 },
        { "L24 Detect P3 64->255 k1", 64, 40, 255, 1, 1, 0 },
    };
    const int n = 8, reps = 5;
    struct kern_ctx_opts o;
    struct kern_ctx *ctx = NULL;
    kern_ctx_opts_default(&o);
    o.threads = threads;
    if (kern_ctx_create(&o, &ctx) < 0) exit(99);
    double tot_flop = 0.0, tot_t[3] = { 0, 0, 0 };
    printf("# conv2d CPU reference, batch %d, best of %d, context threads %d (%s)\n", n, reps,
           threads, threads > 1 ? "own threads, OpenBLAS single" : "OpenBLAS threads");
    printf("# %-26s %7s %16s %16s %16s\n", "layer", "GFLOP", "fwd ms (GF/s)", "bwd_data ms",
           "bwd_filter ms");
    for (size_t l = 0; l < sizeof(layers) / sizeof(layers[0]); l++) {
        struct kern_conv2d d;
        int oh, ow;
        size_t ws;
        kern_conv2d_init(&d, n, layers[l].c_in, layers[l].hw, layers[l].hw, layers[l].c_out,
                         layers[l].k, layers[l].s, layers[l].p);
        kern_conv2d_out_hw(&d, &oh, &ow);
        kern_ref_conv2d_workspace_size(ctx, &d, &ws);
        if (kern_ctx_reserve(ctx, ws) < 0) exit(99);
        const size_t nx = (size_t)n * d.c_in * d.h_in * d.w_in;
        const size_t nw = (size_t)d.c_out * d.c_in * d.k_h * d.k_w;
        const size_t ny = (size_t)n * d.c_out * oh * ow;
        float *const x = kt_alloc(nx), *const w = kt_alloc(nw), *const y = kt_alloc(ny);
        float *const dx = kt_alloc(nx), *const dw = kt_alloc(nw);
        kt_fill(x, nx, -1, 1);
        kt_fill(w, nw, -1, 1);
        double best[3] = { 1e30, 1e30, 1e30 };
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            kern_ref_conv2d_fwd(ctx, &d, y, x, w, NULL);
            double t1 = now_s();
            if (t1 - t0 < best[0]) best[0] = t1 - t0;
            kern_ref_conv2d_bwd_data(ctx, &d, dx, y, w, 0);
            t0 = now_s();
            if (t0 - t1 < best[1]) best[1] = t0 - t1;
            kern_ref_conv2d_bwd_filter(ctx, &d, dw, y, x, 0);
            t1 = now_s();
            if (t1 - t0 < best[2]) best[2] = t1 - t0;
        }
        const double f = kern_conv2d_flops(&d);
        tot_flop += f;
        for (int k = 0; k < 3; k++)
            tot_t[k] += best[k];
        printf("# %-26s %7.3f %7.2f (%6.1f) %7.2f (%6.1f) %7.2f (%6.1f)\n", layers[l].name,
               f * 1e-9, best[0] * 1e3, f * 1e-9 / best[0], best[1] * 1e3, f * 1e-9 / best[1],
               best[2] * 1e3, f * 1e-9 / best[2]);
        free(x), free(w), free(y), free(dx), free(dw);
    }
    printf("# %-26s %7.3f %7.2f (%6.1f) %7.2f (%6.1f) %7.2f (%6.1f)\n", "total", tot_flop * 1e-9,
           tot_t[0] * 1e3, tot_flop * 1e-9 / tot_t[0], tot_t[1] * 1e3, tot_flop * 1e-9 / tot_t[1],
           tot_t[2] * 1e3, tot_flop * 1e-9 / tot_t[2]);
    kern_ctx_destroy(ctx);
}

static int bench(void)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    /* One-thread context first: a threaded one sets OpenBLAS to one thread for the process. */
    bench_config(1);
    if (cpus > 1) bench_config((int)cpus);
    ok(1, "benchmark ran");
    return tap_done();
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--bench")) return bench();
    kt_seed_from_args(argc, argv, 20240601);
    check_blas_core();

    static const struct shape fixed[] = {
        { 2, 3, 16, 14, 5, 6, 6, 2, 2, 2, 2 }, /* YOLOv5 stem k6 s2 p2 */
        { 2, 5, 7, 9, 6, 1, 1, 1, 1, 0, 0 },   /* 1x1, no workspace */
        { 2, 4, 9, 8, 5, 3, 3, 2, 2, 1, 1 },   /* k3 s2 p1, odd size */
        { 1, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1 },   /* k3 s1 p1 */
        { 2, 3, 7, 6, 2, 1, 1, 2, 2, 0, 0 },   /* 1x1 stride 2 (im2col path) */
        { 1, 2, 5, 11, 3, 2, 4, 1, 3, 0, 2 },  /* non-square everything */
        { 1, 1, 1, 1, 3, 1, 1, 1, 1, 0, 0 },   /* single pixel */
        { 1, 2, 5, 40, 3, 2, 3, 1, 9, 0, 1 },  /* stride 9 > 8 phases: the gathering path */
    };
    static const char *const names[] = { "k6s2p2 stem", "k1",
                                         "k3s2p1",      "k3s1p1",
                                         "k1s2",        "k2x4 s1x3 p0x2",
                                         "1x1 pixel",   "stride 9 (gather)" };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        check_shape(&fixed[i], names[i]);
    for (int t = 0; t < 6; t++) {
        struct shape s;
        s.n = kt_randint(1, 3);
        s.c_in = kt_randint(1, 6);
        s.c_out = kt_randint(1, 7);
        s.kh = kt_randint(1, 5);
        s.kw = kt_randint(1, 5);
        s.sh = kt_randint(1, 3);
        s.sw = kt_randint(1, 3);
        s.ph = kt_randint(0, s.kh);
        s.pw = kt_randint(0, s.kw);
        s.h = kt_randint(s.kh > 2 * s.ph ? s.kh - 2 * s.ph : 1, 12);
        s.w = kt_randint(s.kw > 2 * s.pw ? s.kw - 2 * s.pw : 1, 12);
        char label[96];
        snprintf(label, sizeof(label), "random n%d c%d->%d %dx%d k%dx%d s%dx%d p%dx%d", s.n, s.c_in,
                 s.c_out, s.h, s.w, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw);
        check_shape(&s, label);
    }
    /* Threaded contexts: images split over 3 threads (uneven shares, idle workers when the batch
     * is smaller), per-worker workspace slots, dw summed from partials. Shapes above the size
     * where ops go parallel. */
    g_threads = 3;
    static const struct shape big[] = {
        { 5, 8, 28, 28, 12, 3, 3, 2, 2, 1, 1 },
        { 2, 16, 30, 30, 8, 1, 1, 1, 1, 0, 0 },
        { 1, 4, 60, 60, 6, 6, 6, 2, 2, 2, 2 },
        { 2, 3, 64, 64, 4, 6, 6, 2, 2, 2, 2 },
    };
    static const char *const big_names[] = { "3 threads n5 k3s2p1", "3 threads n2 k1",
                                             "3 threads n1 stem", "3 threads n2 stem" };
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
        check_shape(&big[i], big_names[i]);
    {
        struct kern_conv2d d;
        size_t ws1, ws3;
        struct kern_ctx *const c1 = ctx_threads(1), *const c3 = ctx_threads(3);
        kern_conv2d_init(&d, 5, 8, 28, 28, 12, 3, 2, 1);
        kern_ref_conv2d_workspace_size(c1, &d, &ws1);
        kern_ref_conv2d_workspace_size(c3, &d, &ws3);
        ok(ws3 >= 3 * ws1, "threaded workspace covers one slot per worker (%zu vs %zu bytes)", ws3,
           ws1);
        kern_ctx_destroy(c1);
        kern_ctx_destroy(c3);
    }
    g_threads = 1;
    check_fd();
    check_errors();
    return tap_done();
}
