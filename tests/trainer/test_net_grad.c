/*
 * Finite-difference check of the whole network's backward (trainer/model/net.c) on a tiny model
 * (models_test/tiny_net.yaml: Conv, Conv x2, C3 with shortcut, a standalone Bottleneck, C3 with
 * two bottlenecks, SPPF, Upsample, Concat, C3 without shortcut, a two-level Detect), batch 2,
 * 64x64, BN in training mode.
 *
 * Loss L = sum_i w_i * out_i over the Detect outputs with fixed random w, so dL/dout = w. For a
 * sample of elements of every parameter tensor and of the input, the analytic gradient is
 * compared with the central difference (L(p + e) - L(p - e)) / 2e, L summed in double. The net
 * is float32, so the difference carries float rounding noise of about 1e-7 * sum|w_i out_i| / e;
 * the tolerance is |analytic - numeric| <= 0.02 * |numeric| + 0.01 * (rms of the tensor's
 * gradient) + 2e-3 at one of the steps e = 3e-3 * max(|p|, 0.1) / 2^k, k < 6 (see fd_check),
 * which a wrong sign, a missing path (concat order, residual) or a wrong factor fails by orders
 * of magnitude (the failure message prints both values). Every parameter tensor must also get
 * a non-zero gradient, so a tensor the forward forgets cannot pass with 0 == 0.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "net.h"
#include "tap.h"
#include "errors.h"

#define BATCH 2
#define IMG   64

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void) /* [0, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

struct ctx {
    struct trn_net *net;
    int nl;
    float *w[TRN_MODEL_MAX_LEVELS];
    long n[TRN_MODEL_MAX_LEVELS];
    const float *img;
};

static double loss(struct ctx *c)
{
    const float *out[TRN_MODEL_MAX_LEVELS];
    if (trn_net_forward(c->net, c->img, true, out)) return NAN;
    double s = 0;
    for (int l = 0; l < c->nl; l++)
        for (long i = 0; i < c->n[l]; i++)
            s += (double)c->w[l][i] * out[l][i];
    return s;
}

static int check(double an, double num, double rms)
{
    return fabs(an - num) <= 0.02 * fabs(num) + 0.01 * rms + 2e-3;
}

/* Central difference of the loss in *p with step e, retried at e/2 .. e/32 when it misses: the
 * SPPF max pools (5x5 windows on a 4x4 grid) switch their argmax within small steps and bend the
 * difference, while float noise grows as the step shrinks, so no single step fits every element;
 * a real gradient error misses at every step. num: out, the last difference. */
static int fd_check(struct ctx *c, float *p, float e, double an, double rms, double *num)
{
    const float p0 = *p;
    for (int k = 0; k < 6; k++, e /= 2) {
        *p = p0 + e;
        const double lp = loss(c);
        *p = p0 - e;
        const double lm = loss(c);
        *p = p0;
        *num = (lp - lm) / ((double)(p0 + e) - (double)(p0 - e));
        if (check(an, *num, rms)) return 1;
    }
    return 0;
}

int main(void)
{
    struct trn_model *m = NULL;
    char err[256];
    int rc = trn_model_load(TRN_TEST_NET_MODELS_DIR "/tiny_net.yaml", NULL, &m, err, sizeof err);
    if (rc) {
        printf("Bail out! %s\n", err);
        return 99;
    }
    trn_model_init(m, 7);
    const struct trn_model_info *I = trn_model_info(m);
    /* Move BN off its identity init so gamma and beta gradients are not special cases. */
    float *par = trn_model_arena(m, TRN_ARENA_PARAM);
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(m, t);
        if (T->role == TRN_T_BN_WEIGHT || T->role == TRN_T_BN_BIAS)
            for (size_t j = 0; j < T->numel; j++)
                par[T->offset + j] += (float)(0.4 * (urand() - 0.5));
    }

    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.input_grad = true;
    struct ctx c = { 0 };
    rc = trn_net_create(m, BATCH, IMG, IMG, &o, &c.net, err, sizeof err);
    ok(rc == 0, "create tiny net: %s", rc ? err : "ok");
    if (rc) return tap_done();
    c.nl = trn_net_levels(c.net);
    is_int(c.nl, 2, "two Detect levels");
    const float *dout[TRN_MODEL_MAX_LEVELS];
    for (int l = 0; l < c.nl; l++) {
        int sh[5];
        c.n[l] = trn_net_output_shape(c.net, l, sh);
        c.w[l] = malloc((size_t)c.n[l] * sizeof(float));
        for (long i = 0; i < c.n[l]; i++)
            c.w[l][i] = (float)(2 * urand() - 1);
        dout[l] = c.w[l];
    }
    const size_t n_img = (size_t)BATCH * 3 * IMG * IMG;
    float *img = malloc(n_img * sizeof(float));
    for (size_t i = 0; i < n_img; i++)
        img[i] = (float)urand();
    c.img = img;

    const double L0 = loss(&c);
    ok(isfinite(L0), "loss finite (%g)", L0);
    trn_net_zero_grad(c.net);
    rc = trn_net_backward(c.net, dout);
    ok(rc == 0, "backward: %s", trn_strerror(rc));
    const size_t plen = I->arena_len[TRN_ARENA_PARAM];
    float *g = malloc(plen * sizeof(float));
    memcpy(g, trn_net_grad(c.net), plen * sizeof(float));
    float *gin = malloc(n_img * sizeof(float));
    memcpy(gin, trn_net_input_grad(c.net), n_img * sizeof(float));

    /* A second backward adds the same gradient again: the grad arena accumulates (up to float
     * rounding: the GEMMs sum into the old value in another order). */
    rc = trn_net_backward(c.net, dout);
    int twice = rc == 0;
    float gmax = 0;
    for (size_t j = 0; j < plen; j++)
        gmax = fmaxf(gmax, fabsf(g[j]));
    for (size_t j = 0; j < plen && twice; j++)
        if (!(twice =
                  fabsf(trn_net_grad(c.net)[j] - 2 * g[j]) <= 1e-5f * fabsf(g[j]) + 1e-6f * gmax))
            tap_diag("grad[%zu]: %g after two, %g after one", j, (double)trn_net_grad(c.net)[j],
                     (double)g[j]);
    ok(twice, "a second backward accumulates (+=) into the grad arena");

    /* Parameters: 4 elements per tensor, one of them the largest gradient. */
    int n_checked = 0;
    double worst = 0;
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(m, t);
        if (T->arena != TRN_ARENA_PARAM) continue;
        double rms = 0;
        size_t jmax = 0;
        for (size_t j = 0; j < T->numel; j++) {
            const double v = g[T->offset + j];
            rms += v * v;
            if (fabs(v) > fabs(g[T->offset + jmax])) jmax = j;
        }
        rms = sqrt(rms / (double)T->numel);
        /* A parameter the forward never reads would pass the difference check with 0 == 0. */
        if (!ok(rms > 0, "%s has a non-zero gradient", T->name)) continue;
        int bad = 0;
        for (int s = 0; s < 4; s++) {
            const size_t j = s == 0 ? jmax : (size_t)(urand() * (double)T->numel);
            const double an = g[T->offset + j];
            double num = 0;
            const int pass =
                fd_check(&c, par + T->offset + j, 3e-3f * fmaxf(fabsf(par[T->offset + j]), 0.1f),
                         an, rms, &num);
            n_checked++;
            const double rel = fabs(an - num) / (fabs(num) + 0.01 * rms + 2e-3);
            if (rel > worst) worst = rel;
            if (!pass) {
                if (!bad)
                    tap_diag("%s[%zu]: analytic %.6g numeric %.6g (rms %.3g)", T->name, j, an, num,
                             rms);
                bad = 1;
            }
        }
        ok(!bad, "d loss / d %s", T->name);
    }
    tap_diag("%d parameter elements checked, worst |a-n| / (|n| + 0.01 rms + 2e-3) = %.3g",
             n_checked, worst);

    /* Input: 16 random pixels. */
    double rms_in = 0;
    for (size_t i = 0; i < n_img; i++)
        rms_in += (double)gin[i] * gin[i];
    rms_in = sqrt(rms_in / (double)n_img);
    ok(rms_in > 0, "input gradient is not zero (rms %.3g)", rms_in);
    int bad_in = 0;
    for (int s = 0; s < 16; s++) {
        const size_t j = (size_t)(urand() * (double)n_img);
        double num = 0;
        if (!fd_check(&c, &img[j], 1e-2f, gin[j], rms_in, &num)) {
            tap_diag("input[%zu]: analytic %.6g numeric %.6g", j, (double)gin[j], num);
            bad_in++;
        }
    }
    ok(bad_in == 0, "d loss / d input at 16 pixels");

    trn_net_destroy(c.net);
    for (int l = 0; l < c.nl; l++)
        free(c.w[l]);
    free(img);
    free(g);
    free(gin);
    trn_model_destroy(m);
    return tap_done();
}
