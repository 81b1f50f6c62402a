/*
 * The whole network on the CUDA backend against the CPU reference: yolov5n at 128x128 (and a
 * non-square 96x160), batch 2, one training forward + backward and one inference, on two copies
 * of the same model. Compared: the Detect outputs, every parameter gradient, the BN running
 * statistics and num_batches_tracked after the training forward, and the decoded boxes.
 *
 * Needs a CUDA device. Without one (no CUDA in the build, no driver, no visible GPU) it checks
 * that asking for a GPU net fails cleanly with -KERN_EBACKEND, says so, and exits 77 (skipped).
 *
 * `--device-path`: the same comparison where the second net runs the GPU net's data path
 * (parameter and buffer copies, staged gradients, host mirrors, every copy through
 * kern_mem_copy) on the CPU ops (trn_net_opts.device_path). Runs everywhere, and must agree
 * bit for bit, so the data path is tested before any GPU sees it.
 *
 * RESIDENT (net.h): a third net, resident, fed through trn_net_forward_dev / backward_dev with
 * the images and output gradients in its backend memory, must give the same outputs, BN
 * statistics and gradients once they are brought back with trn_net_sync_model / sync_grad, and
 * must leave the host model and mirror alone until then; a net sharing its device copies
 * (trn_net_opts.share) reads them, and sharing across models is refused.
 *
 * Tolerance: fp32 on both sides, but cuDNN picks its own algorithms (Winograd, FFT, TF32 tensor
 * cores where allowed) and sums in other orders, so errors are measured relative to each
 * tensor's largest magnitude: outputs and boxes within 2e-3, gradients within 1e-2 (they go
 * through ~60 layers of backward), BN statistics within 1e-3.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda.h"
#include "model.h"
#include "net.h"
#include "errors.h"

static int failures, checks;
static bool emulate; /* --device-path: the second net is the device data path on the CPU */

static void check(int cond, const char *fmt, double v, double tol, const char *what)
{
    checks++;
    printf("%s %s: %s %.3g (tolerance %.3g)\n", cond ? "ok  " : "FAIL", what, fmt, v, tol);
    if (!cond) failures++;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float urandf(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) * 0x1.0p-53);
}

/* The GPU tolerance, or 0 for the device path on the CPU ops (the same ops in the same order). */
static double tol(double gpu)
{
    return emulate ? 0.0 : gpu;
}

/* max |a - b| / max |b| (the reference's scale), 0 for an all-zero reference. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        const double e = fabs((double)a[i] - b[i]);
        if (e > d) d = e;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return s > 0 ? d / s : d;
}

static struct trn_model *load(void)
{
    char err[256], yaml[4200];
    struct trn_model *m = NULL;
    /* FFYOLO_MODELS_DIR: a checkout at another path (a lent GPU machine: scripts/gpu-check) */
    const char *dir = getenv("FFYOLO_MODELS_DIR");
    snprintf(yaml, sizeof yaml, "%s/yolov5n.yaml", dir && *dir ? dir : TRN_TEST_MODELS_DIR);
    if (trn_model_load(yaml, NULL, &m, err, sizeof err)) {
        printf("Bail out! %s\n", err);
        exit(99);
    }
    trn_model_init(m, 7);
    return m;
}

static void run_shape(int batch, int h, int w)
{
    char err[256], what[160];
    struct trn_model *mc = load(), *mg = load();
    const struct trn_model_info *I = trn_model_info(mc);
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    struct trn_net *nc = NULL, *ng = NULL;
    int rc = trn_net_create(mc, batch, h, w, &o, &nc, err, sizeof err);
    if (rc) {
        printf("Bail out! CPU net: %s\n", err);
        exit(99);
    }
    if (emulate)
        o.device_path = true;
    else
        o.device = 0;
    rc = trn_net_create(mg, batch, h, w, &o, &ng, err, sizeof err);
    if (rc) {
        printf("FAIL GPU net at %dx%d: %s\n", h, w, err);
        failures++;
        trn_net_destroy(nc);
        return;
    }
    checks++;
    printf("ok   %dx%d batch %d: %s net created (on device: %d)\n", h, w, batch,
           emulate ? "device-path" : "GPU", trn_net_on_device(ng));

    const size_t n_img = (size_t)batch * 3 * (size_t)h * (size_t)w;
    float *img = malloc(n_img * sizeof(float));
    for (size_t i = 0; i < n_img; i++)
        img[i] = urandf();
    const float *oc[8], *og[8];
    float *dout[8], *keep[8];
    const int nl = trn_net_levels(nc);
    trn_net_zero_grad(nc);
    trn_net_zero_grad(ng);
    if (trn_net_forward(nc, img, true, oc) || (rc = trn_net_forward(ng, img, true, og))) {
        printf("FAIL training forward: %s\n", trn_strerror(rc));
        failures++;
        goto out;
    }
    for (int l = 0; l < nl; l++) {
        const size_t n = (size_t)trn_net_output_shape(nc, l, NULL);
        snprintf(what, sizeof what, "%dx%d level %d Detect output", h, w, l);
        const double e = rel_err(og[l], oc[l], n);
        check(e <= tol(2e-3), "rel err", e, tol(2e-3), what);
        keep[l] = malloc(n * sizeof(float));
        memcpy(keep[l], oc[l], n * sizeof(float));
        dout[l] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            dout[l][i] = (urandf() - 0.5f) * 1e-2f;
    }
    {
        const size_t nb = I->arena_len[TRN_ARENA_BUFFER];
        const double e = rel_err(trn_model_arena(mg, TRN_ARENA_BUFFER),
                                 trn_model_arena(mc, TRN_ARENA_BUFFER), nb);
        snprintf(what, sizeof what, "%dx%d BN running stats after the training forward", h, w);
        check(e <= tol(1e-3), "rel err", e, tol(1e-3), what);
        const int64_t *cc = trn_model_arena(mc, TRN_ARENA_COUNT),
                      *cg = trn_model_arena(mg, TRN_ARENA_COUNT);
        int same = memcmp(cc, cg, I->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t)) == 0;
        snprintf(what, sizeof what, "%dx%d num_batches_tracked equal", h, w);
        check(same, "equal", same, 1, what);
    }
    if (trn_net_backward(nc, (const float *const *)dout) ||
        (rc = trn_net_backward(ng, (const float *const *)dout))) {
        printf("FAIL backward: %s\n", trn_strerror(rc));
        failures++;
        goto free_levels;
    }
    {
        /* Per tensor, so that a small tensor's error is not hidden by a large one's scale. */
        double worst = 0;
        int worst_t = -1;
        const float *gc = trn_net_grad(nc), *gg = trn_net_grad(ng);
        for (int t = 0; t < I->n_tensors; t++) {
            const struct trn_tensor *T = trn_model_tensor(mc, t);
            if (T->arena != TRN_ARENA_PARAM) continue;
            const double e = rel_err(gg + T->offset, gc + T->offset, T->numel);
            if (e > worst || worst_t < 0) {
                worst = e;
                worst_t = t;
            }
        }
        snprintf(what, sizeof what, "%dx%d parameter gradients, worst tensor %s", h, w,
                 worst_t >= 0 ? trn_model_tensor(mc, worst_t)->name : "?");
        check(worst <= tol(1e-2), "rel err", worst, tol(1e-2), what);
    }
    {
        const float *dc, *dg;
        int rows_c = 0, rows_g = 0;
        if (trn_net_infer(nc, img, &dc, &rows_c) || (rc = trn_net_infer(ng, img, &dg, &rows_g))) {
            printf("FAIL infer: %s\n", trn_strerror(rc));
            failures++;
            goto free_levels;
        }
        snprintf(what, sizeof what, "%dx%d decoded boxes (%d rows)", h, w, rows_c);
        const double e =
            rows_c == rows_g ? rel_err(dg, dc, (size_t)batch * rows_c * I->no) : INFINITY;
        check(e <= tol(2e-3), "rel err", e, tol(2e-3), what);
    }
free_levels:
    for (int l = 0; l < nl; l++) {
        free(dout[l]);
        free(keep[l]);
    }
out:
    free(img);
    trn_net_destroy(nc);
    trn_net_destroy(ng);
    trn_model_destroy(mc);
    trn_model_destroy(mg);
}

/* A resident net (and one sharing its device copies) against the CPU net, see RESIDENT. */
static void run_resident(int batch, int h, int w)
{
    char err[256], what[160];
    struct trn_model *mc = load(), *mg = load();
    const struct trn_model_info *I = trn_model_info(mc);
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    struct trn_net *nc = NULL, *ng = NULL, *ns = NULL, *bad = NULL;
    struct kern_ctx *ctx = NULL;
    if (trn_net_create(mc, batch, h, w, &o, &nc, err, sizeof err)) {
        printf("Bail out! CPU net: %s\n", err);
        exit(99);
    }
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    if (!emulate) {
        ko.backend = KERN_BACKEND_CUDA;
        ko.device = 0;
    }
    int rc = kern_ctx_create(&ko, &ctx);
    o.ctx = ctx;
    o.device_path = emulate;
    if (!rc) rc = trn_net_create(mg, batch, h, w, &o, &ng, err, sizeof err);
    if (!rc) {
        o.share = ng;
        o.train = false;
        rc = trn_net_create(mg, 1, h, w, &o, &ns, err, sizeof err);
    }
    checks++;
    if (rc) {
        printf("FAIL resident nets: %s\n", err);
        failures++;
        goto out;
    }
    printf("ok   resident net and a net sharing its device copies created\n");
    {
        struct trn_net_opts ob = o;
        ob.share = nc; /* another model, another context */
        rc = trn_net_create(mg, 1, h, w, &ob, &bad, err, sizeof err);
        check(rc == -EINVAL && !bad, "rc", rc, 0, "sharing another model's net is refused");
    }
    const bool shares =
        trn_net_dev_arena(ns, TRN_ARENA_PARAM) == trn_net_dev_arena(ng, TRN_ARENA_PARAM);
    check(shares, "same", shares, 1, "the sharing net reads the shared parameter copy");
    trn_net_set_resident(ng, true);
    check(trn_net_resident(ng), "resident", trn_net_resident(ng), 1, "resident flag set");
    const struct kern_ops *K = trn_net_kern_ops(ng);
    check(K != NULL && trn_net_kern_ctx(ng) == ctx, "ok", K != NULL, 1, "the net's ops and ctx");
    rc = trn_net_sync_model(ng, KERN_COPY_H2D);

    const size_t n_img = (size_t)batch * 3 * (size_t)h * (size_t)w;
    const size_t nb = I->arena_len[TRN_ARENA_BUFFER], np = I->arena_len[TRN_ARENA_PARAM];
    float *img = malloc(n_img * sizeof(float)), *d_img = NULL;
    float *buf0 = malloc(nb * sizeof(float)), *host = malloc(np * sizeof(float));
    for (size_t i = 0; i < n_img; i++)
        img[i] = urandf();
    memcpy(buf0, trn_model_arena(mg, TRN_ARENA_BUFFER), nb * sizeof(float));
    if (!rc) rc = kern_mem_alloc(ctx, n_img * sizeof(float), (void **)&d_img);
    if (!rc) rc = kern_mem_copy(ctx, d_img, img, n_img * sizeof(float), KERN_COPY_H2D);
    const float *oc[8], *og[8];
    float *d_dout[8] = { 0 }, *dout[8] = { 0 };
    const int nl = trn_net_levels(nc);
    trn_net_zero_grad(nc);
    trn_net_zero_grad(ng);
    if (rc || trn_net_forward(nc, img, true, oc) ||
        (rc = trn_net_forward_dev(ng, d_img, true, true, og))) {
        printf("FAIL resident training forward: %s\n", trn_strerror(rc));
        failures++;
        goto free_all;
    }
    for (int l = 0; l < nl; l++) {
        const size_t n = (size_t)trn_net_output_shape(nc, l, NULL);
        float *got = malloc(n * sizeof(float));
        dout[l] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            dout[l][i] = (urandf() - 0.5f) * 1e-2f;
        rc = kern_mem_copy(ctx, got, og[l], n * sizeof(float), KERN_COPY_D2H);
        if (!rc) rc = kern_mem_alloc(ctx, n * sizeof(float), (void **)&d_dout[l]);
        if (!rc) rc = kern_mem_copy(ctx, d_dout[l], dout[l], n * sizeof(float), KERN_COPY_H2D);
        const double e = rc ? INFINITY : rel_err(got, oc[l], n);
        snprintf(what, sizeof what, "resident %dx%d level %d Detect output (backend memory)", h, w,
                 l);
        check(e <= tol(2e-3), "rel err", e, tol(2e-3), what);
        free(got);
    }
    {
        const int same = memcmp(buf0, trn_model_arena(mg, TRN_ARENA_BUFFER), nb * 4) == 0;
        check(same, "unchanged", same, 1, "resident: the host BN buffers are not brought back");
        rc = trn_net_sync_model(ng, KERN_COPY_D2H);
        const double e = rc ? INFINITY
                            : rel_err(trn_model_arena(mg, TRN_ARENA_BUFFER),
                                      trn_model_arena(mc, TRN_ARENA_BUFFER), nb);
        check(e <= tol(1e-3), "rel err", e, tol(1e-3),
              "resident: BN running stats after trn_net_sync_model");
    }
    if (trn_net_backward(nc, (const float *const *)dout) ||
        (rc = trn_net_backward_dev(ng, (const float *const *)d_dout))) {
        printf("FAIL resident backward: %s\n", trn_strerror(rc));
        failures++;
        goto free_all;
    }
    {
        const float *mirror = trn_net_grad(ng);
        int zero = 1;
        for (size_t i = 0; i < np; i++)
            zero &= mirror[i] == 0.0f;
        check(zero, "zero", zero, 1, "resident: backward leaves the host gradient mirror alone");
        rc = kern_mem_copy(ctx, host, trn_net_dev_grad(ng), np * sizeof(float), KERN_COPY_D2H);
        const double e = rc ? INFINITY : rel_err(host, trn_net_grad(nc), np);
        check(e <= tol(1e-2), "rel err", e, tol(1e-2), "resident: parameter gradients (device)");
        rc = trn_net_sync_grad(ng, KERN_COPY_D2H);
        const int same = !rc && memcmp(trn_net_grad(ng), host, np * sizeof(float)) == 0;
        check(same, "same", same, 1, "trn_net_sync_grad brings the device gradients to the mirror");
    }
free_all:
    for (int l = 0; l < nl; l++) {
        free(dout[l]);
        kern_mem_free(ctx, d_dout[l]);
    }
    kern_mem_free(ctx, d_img);
    free(img);
    free(buf0);
    free(host);
out:
    trn_net_destroy(ns);
    trn_net_destroy(ng);
    trn_net_destroy(nc);
    kern_ctx_destroy(ctx);
    trn_model_destroy(mc);
    trn_model_destroy(mg);
}

int main(int argc, char **argv)
{
    emulate = argc > 1 && strcmp(argv[1], "--device-path") == 0;
    const int devices = kern_cuda_device_count();
    if (!emulate && devices < 1) {
        /* What must hold everywhere: asking for a GPU net fails cleanly. */
        struct trn_model *m = load();
        struct trn_net_opts o;
        trn_net_opts_default(&o);
        o.device = 0;
        struct trn_net *net = NULL;
        char err[256];
        const int rc = trn_net_create(m, 1, 64, 64, &o, &net, err, sizeof err);
        trn_model_destroy(m);
        if (rc != -KERN_EBACKEND || net) {
            printf("FAIL a GPU net without a device gave %d (%s), not -KERN_EBACKEND\n", rc,
                   trn_strerror(rc));
            trn_net_destroy(net);
            return 1;
        }
        printf("ok   without a device a GPU net is refused: %s\n", err);
        printf("SKIP no CUDA device (kern_cuda_device_count() = 0): the GPU net parity did not "
               "run\n");
        fprintf(stderr, "test_net_cuda: SKIPPED: no CUDA device\n");
        return 77;
    }
    run_shape(2, 128, 128);
    run_shape(2, 96, 160);
    run_resident(2, 96, 128);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
