/*
 * yolov5n (models/yolov5n.yaml) at 128x128, batch 2, through trainer/model/net.c:
 *   - forward + backward give finite outputs and gradients, and the same bytes when repeated;
 *   - the forward wires the modules as the recipe says (S2), checked on the activations
 *     against direct recomputation: the stem Conv (conv k6 s2 p2 + train BN + SiLU, in
 *     double), C3's concat order (bottleneck branch first), SPPF's chained 5x5 max pools,
 *     nearest upsampling and Concat in `from` order, the Detect permute;
 *   - BN running stats move by momentum 0.03 and num_batches_tracked counts;
 *   - the inference decode has one row per anchor and cell, probabilities in (0, 1).
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
#define IMG   128

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static float urandf(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) * 0x1.0p-53);
}

static int all_finite(const float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return 0;
    return 1;
}

static const struct trn_act *act_of(const struct trn_net *net, int a)
{
    return &trn_net_plan(net)->acts[a];
}

/* Max |a - b| over the elements of a (n, c, h, w) slice pair. */
static double cat_slice_diff(const struct trn_net *net, int cat, int c_off, int src)
{
    const struct trn_act *y = act_of(net, cat), *x = act_of(net, src);
    const float *Y = trn_net_act(net, cat), *X = trn_net_act(net, src);
    const size_t hw = (size_t)x->h * x->w;
    double d = 0;
    for (int n = 0; n < x->n; n++)
        for (size_t i = 0; i < (size_t)x->c * hw; i++) {
            const double v =
                fabs(Y[((size_t)n * y->c + c_off) * hw + i] - X[(size_t)n * x->c * hw + i]);
            if (v > d) d = v;
        }
    return d;
}

/* The stem conv output at (n, co, oy, ox) in double, from the input and the weights. */
static double stem_conv(const float *img, const float *w, const struct trn_conv *c, int n, int co,
                        int oy, int ox)
{
    double s = 0;
    for (int ci = 0; ci < c->c1; ci++)
        for (int ky = 0; ky < c->k; ky++)
            for (int kx = 0; kx < c->k; kx++) {
                const int iy = oy * c->s - c->p + ky, ix = ox * c->s - c->p + kx;
                if (iy < 0 || ix < 0 || iy >= IMG || ix >= IMG) continue;
                s += (double)img[(((size_t)n * c->c1 + ci) * IMG + iy) * IMG + ix] *
                     w[((co * c->c1 + ci) * c->k + ky) * c->k + kx];
            }
    return s;
}

int main(void)
{
    char err[256];
    struct trn_model *m = NULL;
    int rc = trn_model_load(TRN_TEST_MODELS_DIR "/yolov5n.yaml", NULL, &m, err, sizeof err);
    if (rc) {
        printf("Bail out! %s\n", err);
        return 99;
    }
    trn_model_init(m, 0);
    const struct trn_model_info *I = trn_model_info(m);
    struct trn_net *net = NULL;
    rc = trn_net_create(m, BATCH, IMG, IMG, NULL, &net, err, sizeof err);
    ok(rc == 0, "create yolov5n net at %dx%d batch %d: %s", IMG, IMG, BATCH, rc ? err : "ok");
    if (rc) return tap_done();

    const size_t n_img = (size_t)BATCH * 3 * IMG * IMG;
    float *img = malloc(n_img * sizeof(float));
    for (size_t i = 0; i < n_img; i++)
        img[i] = urandf();
    const int nl = trn_net_levels(net);
    is_int(nl, 3, "three Detect levels");
    long n_out[3];
    float *dout[3], *out_a[3];
    for (int l = 0; l < 3; l++) {
        int sh[5];
        n_out[l] = trn_net_output_shape(net, l, sh);
        const int g = IMG / (8 << l);
        ok(sh[0] == BATCH && sh[1] == 3 && sh[2] == g && sh[3] == g && sh[4] == 85,
           "level %d output is (%d, 3, %d, %d, 85)", l, BATCH, g, g);
        dout[l] = malloc((size_t)n_out[l] * sizeof(float));
        out_a[l] = malloc((size_t)n_out[l] * sizeof(float));
        for (long i = 0; i < n_out[l]; i++)
            dout[l][i] = (urandf() - 0.5f) * 1e-2f;
    }
    const size_t plen = I->arena_len[TRN_ARENA_PARAM];
    float *grad_a = malloc(plen * sizeof(float));

    /* Run 1. */
    const float *outs[3];
    trn_net_zero_grad(net);
    rc = trn_net_forward(net, img, true, outs);
    ok(rc == 0, "train forward: %s", trn_strerror(rc));
    int fin = 1;
    for (int l = 0; l < 3; l++)
        fin &= all_finite(outs[l], (size_t)n_out[l]);
    ok(fin, "Detect outputs finite");
    for (int l = 0; l < 3; l++)
        memcpy(out_a[l], outs[l], (size_t)n_out[l] * sizeof(float));

    /* Module wiring, on run 1's activations. */
    const struct trn_act_plan *pl = trn_net_plan(net);
    {
        /* Stem: conv k6 s2 p2, training BN (batch stats), SiLU; recomputed in double. */
        const struct trn_conv *c = trn_model_conv(m, 0);
        const float *w = (const float *)trn_model_arena_const(m, TRN_ARENA_PARAM) +
                         trn_model_tensor(m, c->weight)->offset;
        const struct trn_act *a = act_of(net, pl->convs[0].act);
        const float *y = trn_net_act(net, pl->convs[0].act);
        double worst = 0;
        for (int co = 0; co < c->c2; co += 5) {
            double s = 0, s2 = 0;
            const int cnt = a->n * a->h * a->w;
            for (int n = 0; n < a->n; n++)
                for (int oy = 0; oy < a->h; oy++)
                    for (int ox = 0; ox < a->w; ox++) {
                        const double v = stem_conv(img, w, c, n, co, oy, ox);
                        s += v;
                        s2 += v * v;
                    }
            const double mean = s / cnt, var = s2 / cnt - mean * mean;
            for (int k = 0; k < 8; k++) {
                const int n = k & 1, oy = (k * 13) % a->h, ox = (k * 29) % a->w;
                const double bn = (stem_conv(img, w, c, n, co, oy, ox) - mean) / sqrt(var + 1e-3);
                const double want = bn / (1 + exp(-bn));
                const double got = y[(((size_t)n * a->c + co) * a->h + oy) * a->w + ox];
                worst = fmax(worst, fabs(got - want) / (fabs(want) + 1e-2));
            }
        }
        ok(worst < 1e-4, "stem Conv = SiLU(BN_train(conv k6 s2 p2)) (worst rel %.2g)", worst);
    }
    {
        /* Layer 2 (C3 n=1, shortcut): cat = [m(cv1(x)), cv2(x)], then cv3. */
        const struct trn_layer *L = trn_model_layer(m, 2);
        const int cat = pl->layers[2].cat;
        const int bott = pl->convs[L->conv0 + 4].add; /* m.0.cv2 + residual */
        ok(bott >= 0, "C3 bottleneck has a residual add");
        const double d0 = cat_slice_diff(net, cat, 0, bott);
        const double d1 = cat_slice_diff(net, cat, L->hidden, pl->convs[L->conv0 + 1].act);
        ok(d0 == 0 && d1 == 0, "C3 concat: bottleneck branch first, cv2 second");
        /* The residual: add = SiLU(BN_train(m.0.cv2 conv)) + m.0 input (= cv1 act), written at
           once: m.0.cv2's SiLU output is not stored (trn_act_conv.act). BN recomputed in double
           (gamma 1, beta 0 at init). */
        ok(pl->convs[L->conv0 + 4].act == -1, "m.0.cv2's SiLU output is not planned");
        const struct trn_act *a = act_of(net, bott);
        const size_t numel = a->numel, hw = (size_t)a->h * a->w;
        float *const s = malloc(numel * sizeof(float)), *const cv = malloc(numel * sizeof(float));
        float *const q = malloc(numel * sizeof(float));
        memcpy(s, trn_net_act(net, bott), numel * sizeof(float));
        memcpy(cv, trn_net_act(net, pl->convs[L->conv0 + 4].conv), numel * sizeof(float));
        memcpy(q, trn_net_act(net, pl->convs[L->conv0].act), numel * sizeof(float));
        double worst = 0;
        for (int co = 0; co < a->c; co++) {
            double sum = 0, sum2 = 0;
            for (int n = 0; n < a->n; n++)
                for (size_t i = 0; i < hw; i++) {
                    const double v = cv[((size_t)n * a->c + co) * hw + i];
                    sum += v;
                    sum2 += v * v;
                }
            const double cnt = (double)a->n * (double)hw, mean = sum / cnt;
            const double invstd = 1.0 / sqrt(sum2 / cnt - mean * mean + 1e-3);
            for (int n = 0; n < a->n; n++)
                for (size_t i = 0; i < hw; i++) {
                    const size_t k = ((size_t)n * a->c + co) * hw + i;
                    const double bn = (cv[k] - mean) * invstd;
                    const double want = bn / (1 + exp(-bn)) + q[k];
                    worst = fmax(worst, fabs(s[k] - want) / (fabs(want) + 1e-2));
                }
        }
        ok(worst < 1e-4,
           "Bottleneck shortcut: add = SiLU(BN_train(cv2 conv)) + its input (worst "
           "rel %.2g)",
           worst);
        free(s), free(cv), free(q);
    }
    {
        /* SPPF (layer 9): cat = [x, p(x), p(p(x)), p(p(p(x)))], p = max pool 5, stride 1, pad 2. */
        const struct trn_layer *L = trn_model_layer(m, 9);
        const struct trn_act_layer *al = &pl->layers[9];
        ok(L->type == TRN_MOD_SPPF, "layer 9 is SPPF");
        int src = pl->convs[L->conv0].act;
        double d = cat_slice_diff(net, al->cat, 0, src);
        int pool_ok = 1;
        for (int j = 0; j < 3; j++) {
            const struct trn_act *a = act_of(net, src);
            const float *x = trn_net_act(net, src), *y = trn_net_act(net, al->pool[j]);
            for (int pc = 0; pc < a->n * a->c; pc++)
                for (int oy = 0; oy < a->h; oy++)
                    for (int ox = 0; ox < a->w; ox++) {
                        float mx = -INFINITY;
                        for (int iy = oy - 2; iy <= oy + 2; iy++)
                            for (int ix = ox - 2; ix <= ox + 2; ix++)
                                if (iy >= 0 && ix >= 0 && iy < a->h && ix < a->w)
                                    mx = fmaxf(mx, x[((size_t)pc * a->h + iy) * a->w + ix]);
                        pool_ok &= y[((size_t)pc * a->h + oy) * a->w + ox] == mx;
                    }
            d = fmax(d, cat_slice_diff(net, al->cat, (j + 1) * L->hidden, al->pool[j]));
            src = al->pool[j];
        }
        ok(pool_ok, "SPPF: three chained 5x5 stride-1 max pools");
        ok(d == 0, "SPPF concat order x, y1, y2, y3");
    }
    {
        /* Upsample (11) nearest x2 of layer 10, Concat (12) [-1, 6] in that order. */
        const struct trn_act *x = act_of(net, pl->layers[10].out);
        const float *X = trn_net_act(net, pl->layers[10].out);
        const float *Y = trn_net_act(net, pl->layers[11].out);
        int up_ok = act_of(net, pl->layers[11].out)->h == 2 * x->h;
        for (int pc = 0; pc < x->n * x->c && up_ok; pc++)
            for (int oy = 0; oy < 2 * x->h; oy++)
                for (int ox = 0; ox < 2 * x->w; ox++)
                    up_ok &= Y[((size_t)pc * 2 * x->h + oy) * 2 * x->w + ox] ==
                             X[((size_t)pc * x->h + oy / 2) * x->w + ox / 2];
        ok(up_ok, "Upsample: nearest x2");
        const int cat = pl->layers[12].cat;
        const double d =
            cat_slice_diff(net, cat, 0, pl->layers[11].out) +
            cat_slice_diff(net, cat, act_of(net, pl->layers[11].out)->c, pl->layers[6].out);
        ok(d == 0, "Concat [-1, 6] in from order");
    }
    {
        /* Detect permute: out[b, a, y, x, k] = raw[b, a*no + k, y, x]. */
        const struct trn_layer *L = trn_model_layer(m, I->detect);
        int perm_ok = 1;
        for (int l = 0; l < 3; l++) {
            const struct trn_act *r = act_of(net, pl->convs[L->conv0 + l].conv);
            const float *R = trn_net_act(net, pl->convs[L->conv0 + l].conv);
            for (int k = 0; k < 200; k++) {
                const int b = k & 1, a = k % 3, y = (k * 7) % r->h, x = (k * 11) % r->w,
                          o = (k * 17) % 85;
                perm_ok &= outs[l][((((size_t)b * 3 + a) * r->h + y) * r->w + x) * 85 + o] ==
                           R[(((size_t)b * r->c + a * 85 + o) * r->h + y) * r->w + x];
            }
        }
        ok(perm_ok, "Detect output is raw.view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2)");
    }
    {
        /* Running stats after one step from (0, 1): 0.03 * batch mean, 0.97 + 0.03 * var_unb. */
        const struct trn_conv *c = trn_model_conv(m, 5);
        const struct trn_act *a = act_of(net, pl->convs[5].conv);
        const float *x = trn_net_act(net, pl->convs[5].conv);
        const float *buf = trn_model_arena_const(m, TRN_ARENA_BUFFER);
        const float *rm = buf + trn_model_tensor(m, c->bn_mean)->offset;
        const float *rv = buf + trn_model_tensor(m, c->bn_var)->offset;
        const size_t hw = (size_t)a->h * a->w, cnt = (size_t)a->n * hw;
        double worst = 0;
        for (int ch = 0; ch < a->c; ch++) {
            double s = 0, s2 = 0;
            for (int n = 0; n < a->n; n++)
                for (size_t i = 0; i < hw; i++) {
                    const double v = x[((size_t)n * a->c + ch) * hw + i];
                    s += v;
                    s2 += v * v;
                }
            const double mean = s / (double)cnt;
            const double var_u = (s2 - s * mean) / (double)(cnt - 1);
            worst = fmax(worst, fabs(rm[ch] - 0.03 * mean) / (fabs(0.03 * mean) + 1e-6));
            worst = fmax(worst, fabs(rv[ch] - (0.97 + 0.03 * var_u)) / (0.97 + 0.03 * var_u));
        }
        ok(worst < 1e-4, "BN running stats: momentum 0.03, unbiased var (worst rel %.2g)", worst);
        const int64_t *cntp = trn_model_arena_const(m, TRN_ARENA_COUNT);
        is_int(cntp[trn_model_tensor(m, c->bn_count)->offset], 1, "num_batches_tracked = 1");
    }

    const float *dptr[3] = { dout[0], dout[1], dout[2] };
    rc = trn_net_backward(net, dptr);
    ok(rc == 0, "backward: %s", trn_strerror(rc));
    ok(all_finite(trn_net_grad(net), plen), "parameter gradients finite");
    memcpy(grad_a, trn_net_grad(net), plen * sizeof(float));
    /* Every trainable tensor gets a gradient. */
    int zero_tensors = 0;
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(m, t);
        if (T->arena != TRN_ARENA_PARAM) continue;
        int nz = 0;
        for (size_t j = 0; j < T->numel && !nz; j++)
            nz = grad_a[T->offset + j] != 0;
        if (!nz) {
            tap_diag("no gradient reaches %s", T->name);
            zero_tensors++;
        }
    }
    is_int(zero_tensors, 0, "every parameter tensor has a non-zero gradient");

    /* Run 2: same bytes. */
    trn_net_zero_grad(net);
    rc = trn_net_forward(net, img, true, outs);
    int same = rc == 0;
    for (int l = 0; l < 3 && same; l++)
        same = memcmp(outs[l], out_a[l], (size_t)n_out[l] * sizeof(float)) == 0;
    ok(same, "second train forward gives the same output bytes");
    rc = trn_net_backward(net, dptr);
    ok(rc == 0 && memcmp(trn_net_grad(net), grad_a, plen * sizeof(float)) == 0,
       "second backward gives the same gradient bytes");

    /* Eval forward: running stats, no update; backward refused after it. */
    const int64_t *cntp = trn_model_arena_const(m, TRN_ARENA_COUNT);
    const int64_t c_before = cntp[trn_model_tensor(m, trn_model_conv(m, 0)->bn_count)->offset];
    rc = trn_net_forward(net, img, false, outs);
    ok(rc == 0 && all_finite(outs[0], (size_t)n_out[0]), "eval forward");
    is_int(cntp[trn_model_tensor(m, trn_model_conv(m, 0)->bn_count)->offset], c_before,
           "eval forward leaves num_batches_tracked");
    is_int(trn_net_backward(net, dptr), -22, "backward after an eval forward is -EINVAL");

    /* Inference decode. */
    const float *dec = NULL;
    int rows = 0;
    rc = trn_net_infer(net, img, &dec, &rows);
    is_int(rows, 3 * (16 * 16 + 8 * 8 + 4 * 4), "decode rows = sum of na * ny * nx");
    int dec_ok = rc == 0;
    for (size_t i = 0; dec_ok && i < (size_t)BATCH * (size_t)rows; i++) {
        const float *r = dec + i * 85;
        dec_ok = r[2] > 0 && r[3] > 0 && isfinite(r[0]) && isfinite(r[1]);
        for (int k = 4; k < 85; k++)
            dec_ok &= r[k] > 0 && r[k] < 1;
    }
    ok(dec_ok, "decoded boxes: positive w, h; objectness and classes in (0, 1)");
    /* Row 0 of image 1, level 0 anchor 0 cell (0,0): xy = (2 s - 0.5) * 8 from the raw logit. */
    {
        const struct trn_layer *L = trn_model_layer(m, I->detect);
        const struct trn_act *r = act_of(net, pl->convs[L->conv0].conv);
        const float *R = trn_net_act(net, pl->convs[L->conv0].conv);
        const double raw = R[(size_t)1 * r->c * r->h * r->w]; /* b 1, channel 0, y 0, x 0 */
        const double want = (2.0 / (1 + exp(-raw)) - 0.5) * 8;
        ok(fabs(dec[(size_t)rows * 85] - want) < 1e-4, "decode of image 1 row 0: x %g, want %g",
           (double)dec[(size_t)rows * 85], want);
    }

    trn_net_destroy(net);
    for (int l = 0; l < 3; l++) {
        free(dout[l]);
        free(out_a[l]);
    }
    free(grad_a);
    free(img);
    trn_model_destroy(m);
    return tap_done();
}
