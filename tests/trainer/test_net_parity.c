/*
 * trainer/model/net.c against the PyTorch reference dump (make_parity_ref.py, parity_dump.h):
 * yolov5n at 128x128, batch 2, weights trn_model_init(seed 0), input trn_model_init_uniform(0,
 * 1000, j). Compares every row's output (layer.0 .. layer.23), the three Detect outputs
 * (detect.<l>), and, after a backward from the dump's d loss / d Detect outputs
 * (dloss.detect.<l>), every parameter gradient (grad.<param>). The criterion is the issue's:
 * per tensor, max |C - ref| <= 1e-4 * max |ref| (pdump's tensor_rel), with the stored samples
 * and the whole-tensor L2 norm checked. The reference is float64 rounded to float32, so the
 * error measured is our float32 rounding.
 * argv[1]: the dump. Exits 77 (skip) when the dump is absent.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "net.h"
#include "parity_dump.h"
#include "tap.h"
#include "errors.h"

#define BATCH 2
#define IMG   128
#define RTOL  1e-4

/* One tensor against its entry; prints the per-tensor error. Returns 1 on a match. */
static int cmp(const struct pdump *d, const char *name, const float *x, size_t numel, double *worst,
               char *worst_name)
{
    const struct pdump_tensor *t = pdump_find(d, name);
    if (!t) {
        ok(0, "%s is in the dump", name);
        return 0;
    }
    struct pdump_tol tol;
    pdump_tol_default(&tol);
    tol.rtol = 0;
    tol.atol = RTOL * t->maxabs; /* per-tensor relative error, as the issue states it */
    tol.check_stats = 0;
    struct pdump_result r;
    const int bad = pdump_compare(t, x, numel, &tol, stdout, &r);
    /* The whole tensor through its L2 norm (samples cover SAMPLED entries partly). */
    double st[4];
    pdump_stats(x, numel, st);
    const double l2_rel = t->l2 > 0 ? fabs(st[0] - t->l2) / t->l2 : st[0];
    if (r.tensor_rel > *worst) {
        *worst = r.tensor_rel;
        snprintf(worst_name, 96, "%s", name);
    }
    return ok(bad == 0 && l2_rel <= RTOL, "%s: rel %.2e (abs %.2e), l2 rel %.2e", name,
              r.tensor_rel, r.max_abs_err, l2_rel);
}

int main(int argc, char **argv)
{
    if (argc < 2 || access(argv[1], R_OK) != 0) tap_skip_all("no parity dump (make_parity_ref.py)");
    struct pdump *d = NULL;
    int rc = pdump_open(argv[1], &d);
    if (rc) {
        printf("Bail out! %s: %s\n", argv[1], pdump_strerror(rc));
        return 99;
    }
    char err[256];
    struct trn_model *m = NULL;
    rc = trn_model_load(TRN_TEST_MODELS_DIR "/yolov5n.yaml", NULL, &m, err, sizeof err);
    if (rc) {
        printf("Bail out! %s\n", err);
        return 99;
    }
    trn_model_init(m, 0);
    const struct trn_model_info *I = trn_model_info(m);
    struct trn_net *net = NULL;
    rc = trn_net_create(m, BATCH, IMG, IMG, NULL, &net, err, sizeof err);
    if (!ok(rc == 0, "create net: %s", rc ? err : "ok")) return tap_done();

    const size_t n_img = (size_t)BATCH * 3 * IMG * IMG;
    float *img = malloc(n_img * sizeof(float));
    for (size_t j = 0; j < n_img; j++)
        img[j] = trn_model_init_uniform(0, 1000, j);
    double worst_f = 0, worst_g = 0;
    char wname_f[96] = "", wname_g[96] = "";
    cmp(d, "input", img, n_img, &worst_f, wname_f);

    const float *outs[3];
    rc = trn_net_forward(net, img, true, outs);
    ok(rc == 0, "train forward: %s", trn_strerror(rc));
    char name[128];
    for (int i = 0; i < I->n_layers; i++) {
        if (i == I->detect) continue;
        int sh[4];
        const float *y = trn_net_layer_output(net, i, sh);
        snprintf(name, sizeof name, "layer.%d", i);
        cmp(d, name, y, (size_t)sh[0] * sh[1] * sh[2] * sh[3], &worst_f, wname_f);
    }
    const float *dl[3];
    for (int l = 0; l < 3; l++) {
        const long n = trn_net_output_shape(net, l, NULL);
        snprintf(name, sizeof name, "detect.%d", l);
        cmp(d, name, outs[l], (size_t)n, &worst_f, wname_f);
        snprintf(name, sizeof name, "dloss.detect.%d", l);
        const struct pdump_tensor *t = pdump_find(d, name);
        dl[l] = t && t->kind == PDUMP_FULL && t->numel == (size_t)n ? t->data : NULL;
        ok(dl[l] != NULL, "%s: full, %ld elements", name, n);
    }
    tap_diag("forward: worst per-tensor rel %.2e (%s)", worst_f, wname_f);
    if (!dl[0] || !dl[1] || !dl[2]) goto out;

    trn_net_zero_grad(net);
    rc = trn_net_backward(net, dl);
    ok(rc == 0, "backward: %s", trn_strerror(rc));
    const float *g = trn_net_grad(net);
    int n_grad = 0;
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(m, t);
        if (T->arena != TRN_ARENA_PARAM) continue;
        snprintf(name, sizeof name, "grad.%s", T->name);
        cmp(d, name, g + T->offset, T->numel, &worst_g, wname_g);
        n_grad++;
    }
    tap_diag("gradients: %d tensors, worst per-tensor rel %.2e (%s)", n_grad, worst_g, wname_g);
out:
    free(img);
    trn_net_destroy(net);
    trn_model_destroy(m);
    pdump_close(d);
    return tap_done();
}
