/*
 * trn_net_infer on oneDNN (trn_net_opts.cpu_engine, net.h) against the reference ops, on the
 * same model and images: every decoded value within float summation-order distance, on
 *   - models_test/dnn_net.yaml (every module kind: Conv copies, standalone Bottleneck, C3 with
 *     and without shortcut, SPPF, Upsample, Concat) at a non-square 96x128, batch 3, at its
 *     width (16..64 channels: nChw16c on AVX-512) and at 0.0625 (8..32: convs of 8 channels,
 *     which only nChw8c runs in JIT code, so the executor falls back to that layout);
 *   - yolov5n at 160, batch 2;
 * with BatchNorm statistics and affine parameters drawn at random, so that the folding of BN
 * into the weights and bias (val.py's fuse_conv_and_bn) is exercised; the same for an eval
 * trn_net_forward's raw (bs, na, ny, nx, no) head, which val losses read. Also: a fixed_params net
 * keeps its folded weights until trn_net_params_changed and refolds after it; a net without
 * fixed_params refolds at every call; the engine choice (AUTO, ONEDNN, training nets, builds
 * without oneDNN, tiny_net's own width 0.0625 with 4-channel convs that oneDNN has only its
 * reference code for: -ENOTSUP from ONEDNN, the reference ops from AUTO).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "hyp.h"
#include "loss.h"
#include "model.h"
#include "net.h"
#include "tap.h"

static unsigned long long rng = 0x9e3779b97f4a7c15ull;

static float urand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) * 0x1.0p-53);
}

/* BN statistics and affine parameters of every Conv at random, as a trained model has them. */
static void randomize_bn(struct trn_model *m)
{
    float *P = trn_model_arena(m, TRN_ARENA_PARAM), *B = trn_model_arena(m, TRN_ARENA_BUFFER);
    const struct trn_model_info *I = trn_model_info(m);
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(m, t);
        float *p = (T->arena == TRN_ARENA_PARAM ? P : B) + T->offset;
        for (size_t j = 0; j < T->numel; j++) {
            switch (T->role) {
            case TRN_T_BN_WEIGHT:
                p[j] = 0.5f + urand();
                break;
            case TRN_T_BN_BIAS:
                p[j] = urand() - 0.5f;
                break;
            case TRN_T_BN_MEAN:
                p[j] = 0.4f * (urand() - 0.5f);
                break;
            case TRN_T_BN_VAR:
                p[j] = 0.05f + urand();
                break;
            default:
                break;
            }
        }
    }
}

static struct trn_net *make_net(struct trn_model *m, int batch, int h, int w, int engine,
                                bool fixed, bool train, int *rc)
{
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.train = train;
    o.threads = 2;
    o.cpu_engine = engine;
    o.fixed_params = fixed;
    struct trn_net *net = NULL;
    char err[256] = "";
    *rc = trn_net_create(m, batch, h, w, &o, &net, err, sizeof err);
    if (*rc < 0) tap_diag("trn_net_create: %s (%s)", err, trn_strerror(*rc));
    return net;
}

/*
 * Largest error of b against a, each value scaled by its column's magnitude (pixels for the
 * boxes, 1 for probabilities): summation order moves a box by a tiny fraction of a pixel.
 */
static double max_err(const float *a, const float *b, size_t rows, int no)
{
    double e = 0;
    for (size_t r = 0; r < rows; r++)
        for (int k = 0; k < no; k++) {
            const double ref = a[r * (size_t)no + k];
            const double d = fabs(ref - (double)b[r * (size_t)no + k]) / (1.0 + fabs(ref));
            if (!(d <= e)) e = d; /* NaN too */
        }
    return e;
}

/* Infers the same images with net a and net b; returns the largest scaled difference. */
static double compare(struct trn_net *a, struct trn_net *b, const float *img, int batch, int no)
{
    const float *oa, *ob;
    int ra = 0, rb = 0;
    if (trn_net_infer(a, img, &oa, &ra) < 0 || trn_net_infer(b, img, &ob, &rb) < 0 || ra != rb)
        return INFINITY;
    return max_err(oa, ob, (size_t)batch * (size_t)ra, no);
}

#define TOL 2e-4

/* The model at path, its width_multiple replaced by width when not NULL. */
static struct trn_model *load(const char *path, const char *width)
{
    char err[256], text[8192];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    char *at = width ? strstr(text, "width_multiple: ") : NULL;
    if (at) { /* at most the same number of characters: "0.1250" -> "0.0625" */
        at += strlen("width_multiple: ");
        memcpy(at, "      ", 6);
        memcpy(at, width, strlen(width));
    }
    struct trn_model *m = NULL;
    if (!n || trn_model_parse(text, n, path, NULL, &m, err, sizeof err) < 0)
        ok(0, "load %s: %s", path, n ? err : "unreadable");
    return m;
}

/* Largest |a - b| over a tensor, against its largest |a| (a gradient's own scale). */
static double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, s = 1e-12;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d;
        if (fabs((double)a[i]) > s) s = fabs((double)a[i]);
    }
    return e / s;
}

/*
 * Training on oneDNN against the reference ops: two copies of one model (a training forward
 * moves its running statistics), two steps without zeroing between them (backward adds): the
 * head, the running statistics, num_batches_tracked and every parameter's gradient.
 */
static void check_train(const char *yaml, const char *width, int batch, int h, int w)
{
    const unsigned long long seed = rng;
    struct trn_model *ma = load(yaml, width), *mb = NULL;
    rng = seed;
    if (ma) mb = load(yaml, width);
    if (!ma || !mb) goto out;
    trn_model_init(ma, 3);
    trn_model_init(mb, 3);
    randomize_bn(ma);
    rng = seed;
    randomize_bn(mb);
    int rc;
    struct trn_net *ref = make_net(ma, batch, h, w, TRN_CPU_ENGINE_REF, false, true, &rc);
    struct trn_net *dnt = make_net(mb, batch, h, w, TRN_CPU_ENGINE_ONEDNN, false, true, &rc);
    ok(ref && dnt && !strncmp(trn_net_engine(dnt), "oneDNN ", 7),
       "%s: training nets, %dx%d batch %d ('%s')", yaml, w, h, batch,
       dnt ? trn_net_engine(dnt) : "");
    if (!ref || !dnt) goto nets;
    const struct trn_model_info *I = trn_model_info(ma);
    const size_t n_img = (size_t)batch * 3 * (size_t)h * (size_t)w;
    float *img = malloc(n_img * sizeof *img);
    float *dout[TRN_MODEL_MAX_LEVELS] = { 0 };
    const float *dc[TRN_MODEL_MAX_LEVELS];
    long nout[TRN_MODEL_MAX_LEVELS];
    if (!img) goto nets;
    for (size_t i = 0; i < n_img; i++)
        img[i] = urand();
    for (int l = 0; l < I->nl; l++) {
        nout[l] = trn_net_output_shape(ref, l, NULL);
        if (!(dout[l] = malloc((size_t)nout[l] * sizeof(float)))) goto bufs;
        for (long i = 0; i < nout[l]; i++)
            dout[l][i] = 0.01f * (urand() - 0.5f);
        dc[l] = dout[l];
    }
    trn_net_zero_grad(ref);
    trn_net_zero_grad(dnt);
    for (int step = 1; step <= 2; step++) {
        const float *oa[TRN_MODEL_MAX_LEVELS], *ob[TRN_MODEL_MAX_LEVELS];
        double eo = INFINITY;
        if (trn_net_forward(ref, img, true, oa) == 0 && trn_net_forward(dnt, img, true, ob) == 0) {
            eo = 0;
            for (int l = 0; l < I->nl; l++) {
                const double el = max_err(oa[l], ob[l], (size_t)nout[l] / (size_t)I->no, I->no);
                if (!(el <= eo)) eo = el;
            }
        }
        ok(eo < 2e-4, "%s step %d: training forward's head within 2e-4 (max scaled error %.2e)",
           yaml, step, eo);
        const float *Ba = trn_model_arena(ma, TRN_ARENA_BUFFER);
        const float *Bb = trn_model_arena(mb, TRN_ARENA_BUFFER);
        const int64_t *Ca = trn_model_arena(ma, TRN_ARENA_COUNT);
        const int64_t *Cb = trn_model_arena(mb, TRN_ARENA_COUNT);
        double eb = rel_err(Ba, Bb, I->arena_len[TRN_ARENA_BUFFER]);
        ok(eb < 1e-4 && !memcmp(Ca, Cb, I->arena_len[TRN_ARENA_COUNT] * sizeof *Ca),
           "%s step %d: running statistics within 1e-4 (%.2e), the same batch counts", yaml, step,
           eb);
        const int rb = trn_net_backward(ref, dc), rd = trn_net_backward(dnt, dc);
        double eg = INFINITY;
        const char *worst = "";
        if (rb == 0 && rd == 0) {
            eg = 0;
            const float *ga = trn_net_grad(ref), *gb = trn_net_grad(dnt);
            for (int t = 0; t < I->n_tensors; t++) {
                const struct trn_tensor *T = trn_model_tensor(ma, t);
                if (T->arena != TRN_ARENA_PARAM) continue;
                const double et = rel_err(ga + T->offset, gb + T->offset, T->numel);
                if (!(et <= eg)) {
                    eg = et;
                    worst = T->name;
                }
            }
        }
        ok(eg < 5e-4,
           "%s step %d: every parameter's gradient (added over the steps) within 5e-4 of its "
           "scale (worst %.2e, %s)",
           yaml, step, eg, worst);
    }
bufs:
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
        free(dout[l]);
    free(img);
nets:
    trn_net_destroy(ref);
    trn_net_destroy(dnt);
out:
    trn_model_destroy(ma);
    trn_model_destroy(mb);
}

/*
 * The raw head (trn_net_raw_head): two oneDNN training nets of one model, one giving the loss
 * its head reshaped, one the Detect convs' blocked outputs (trn_loss_compute_blk writing the
 * gradient into the net's own buffers), two steps each with targets over every image: the same
 * loss bits, running statistics and gradient arena, byte for byte. The backward refuses other
 * buffers, and off gives the usual head back.
 */
static void check_raw_head(const char *yaml, int batch, int h, int w)
{
    struct trn_model *ma = load(yaml, NULL), *mb = load(yaml, NULL);
    struct trn_net *na = NULL, *nb = NULL;
    struct trn_loss *L = NULL;
    struct kern_ctx *ctx = NULL;
    float *img = NULL, *dp[TRN_MODEL_MAX_LEVELS] = { 0 };
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.threads = 2; /* the loss's objectness passes shared, as yolo-train runs them */
    if (!ma || !mb || kern_ctx_create(&ko, &ctx) < 0) goto out;
    trn_model_init(ma, 5);
    trn_model_init(mb, 5);
    int rc;
    na = make_net(ma, batch, h, w, TRN_CPU_ENGINE_ONEDNN, false, true, &rc);
    nb = make_net(mb, batch, h, w, TRN_CPU_ENGINE_ONEDNN, false, true, &rc);
    if (!na || !nb) {
        ok(0, "%s raw head: nets", yaml);
        goto out;
    }
    const int blk = trn_net_raw_head(nb, true);
    ok(blk == 16 || blk == 8, "%s: raw head on, channel block %d", yaml, blk);
    const struct trn_model_info *I = trn_model_info(ma);
    struct trn_hyp hyp;
    trn_hyp_default(&hyp);
    struct trn_loss_cfg lc;
    enum { NT = 24 };
    float t[6 * NT];
    for (int r = 0; r < NT; r++) {
        t[6 * r] = (float)(r % batch);
        t[6 * r + 1] = (float)(r * 7 % I->nc);
        t[6 * r + 2] = 0.05f + 0.9f * urand();
        t[6 * r + 3] = 0.05f + 0.9f * urand();
        t[6 * r + 4] = 0.02f + 0.5f * urand();
        t[6 * r + 5] = 0.02f + 0.5f * urand();
    }
    if (trn_loss_cfg_from_model(ma, &hyp, batch, w, 0.0f, NT, &lc) < 0 ||
        trn_loss_cfg_set_grid(&lc, ma, h, w) < 0 || trn_loss_create(&lc, &L) < 0) {
        ok(0, "%s raw head: loss", yaml);
        goto out;
    }
    const size_t n_img = (size_t)batch * 3 * (size_t)h * (size_t)w;
    if (!(img = malloc(n_img * sizeof *img))) goto out;
    for (size_t i = 0; i < n_img; i++)
        img[i] = urand();
    for (int l = 0; l < I->nl; l++)
        if (!(dp[l] = malloc((size_t)trn_net_output_shape(na, l, NULL) * sizeof(float)))) goto out;
    trn_net_zero_grad(na);
    trn_net_zero_grad(nb);
    for (int step = 1; step <= 2; step++) {
        const float *oa[TRN_MODEL_MAX_LEVELS], *ob[TRN_MODEL_MAX_LEVELS];
        float *raw[TRN_MODEL_MAX_LEVELS];
        struct trn_loss_items ia, ib;
        int r[6] = { trn_net_forward(na, img, true, oa), trn_net_forward(nb, img, true, ob) };
        r[2] = trn_net_raw_dhead(nb, raw);
        r[3] = trn_loss_compute(L, ctx, oa, t, NT, dp, &ia);
        r[4] = trn_loss_compute_blk(L, ctx, ob, blk, t, NT, raw, &ib);
        r[5] = trn_net_backward(na, (const float *const *)dp);
        if (step == 2)
            is_int(trn_net_backward(nb, (const float *const *)dp), -EINVAL,
                   "%s: the raw head's backward refuses other gradient buffers", yaml);
        const int rb = trn_net_backward(nb, (const float *const *)raw);
        const size_t ng = I->arena_len[TRN_ARENA_PARAM], nbuf = I->arena_len[TRN_ARENA_BUFFER];
        ok(!r[0] && !r[1] && r[2] == blk && !r[3] && !r[4] && !r[5] && !rb &&
               !memcmp(&ia, &ib, sizeof ia) &&
               !memcmp(trn_net_grad(na), trn_net_grad(nb), ng * sizeof(float)) &&
               !memcmp(trn_model_arena(ma, TRN_ARENA_BUFFER), trn_model_arena(mb, TRN_ARENA_BUFFER),
                       nbuf * sizeof(float)),
           "%s step %d: raw head, the same loss (%.6f), gradients and running statistics, bit "
           "for bit (rc %d %d %d %d %d %d %d)",
           yaml, step, (double)ib.total, r[0], r[1], r[2], r[3], r[4], r[5], rb);
    }
    is_int(trn_net_raw_head(nb, false), 0, "%s: raw head off", yaml);
    const float *oa[TRN_MODEL_MAX_LEVELS], *ob[TRN_MODEL_MAX_LEVELS];
    float *raw[TRN_MODEL_MAX_LEVELS];
    int same = !trn_net_forward(na, img, true, oa) && !trn_net_forward(nb, img, true, ob) &&
               trn_net_raw_dhead(nb, raw) == -EINVAL;
    for (int l = 0; same && l < I->nl; l++)
        same = !memcmp(oa[l], ob[l], (size_t)trn_net_output_shape(na, l, NULL) * sizeof(float));
    ok(same, "%s: and off, the usual head again, the same bytes", yaml);
out:
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
        free(dp[l]);
    free(img);
    trn_loss_destroy(L);
    kern_ctx_destroy(ctx);
    trn_net_destroy(na);
    trn_net_destroy(nb);
    trn_model_destroy(ma);
    trn_model_destroy(mb);
}

static void check_model(const char *yaml, const char *width, int batch, int h, int w)
{
    struct trn_model *m = load(yaml, width);
    if (!m) return;
    trn_model_init(m, 7);
    randomize_bn(m);
    const int no = trn_model_info(m)->no;
    int rc;
    struct trn_net *ref = make_net(m, batch, h, w, TRN_CPU_ENGINE_REF, true, false, &rc);
    struct trn_net *dnn = make_net(m, batch, h, w, TRN_CPU_ENGINE_ONEDNN, true, false, &rc);
    struct trn_net *live = make_net(m, batch, h, w, TRN_CPU_ENGINE_AUTO, false, false, &rc);
    ok(ref && dnn && live, "%s: nets at %dx%d batch %d", yaml, w, h, batch);
    if (!ref || !dnn || !live) goto out;
    ok(!strcmp(trn_net_engine(ref), "reference"), "the reference net says '%s'",
       trn_net_engine(ref));
    ok(!strncmp(trn_net_engine(dnn), "oneDNN ", 7) &&
           !strcmp(trn_net_engine(live), trn_net_engine(dnn)),
       "ONEDNN and AUTO run '%s'", trn_net_engine(dnn));
    ok(trn_net_memory_bytes(dnn) > trn_net_memory_bytes(ref),
       "the executor's tensors are counted (%zu > %zu bytes)", trn_net_memory_bytes(dnn),
       trn_net_memory_bytes(ref));

    const size_t n_img = (size_t)batch * 3 * (size_t)h * (size_t)w;
    float *img = malloc(n_img * sizeof *img);
    if (!img) goto out;
    for (size_t i = 0; i < n_img; i++)
        img[i] = urand();
    double e = compare(ref, dnn, img, batch, no);
    ok(e < TOL, "%s: oneDNN within %.0e of the reference (max scaled error %.2e)", yaml, TOL, e);
    /* the same executor again: the same bytes (nothing left over from the last run) */
    const float *o1, *o2;
    int r1 = 0, r2 = 0;
    float *keep = NULL;
    if (trn_net_infer(dnn, img, &o1, &r1) == 0) {
        const size_t n = (size_t)batch * (size_t)r1 * (size_t)no;
        keep = malloc(n * sizeof *keep);
        if (keep) memcpy(keep, o1, n * sizeof *keep);
        ok(keep && trn_net_infer(dnn, img, &o2, &r2) == 0 && !memcmp(keep, o2, n * sizeof *keep),
           "%s: a second run gives the same bytes", yaml);
    }

    /* an eval forward's raw head (what val losses read) too */
    const float *ha[TRN_MODEL_MAX_LEVELS], *hb[TRN_MODEL_MAX_LEVELS];
    double eh = INFINITY;
    const int nl = trn_net_levels(ref);
    if (trn_net_forward(ref, img, false, ha) == 0 && trn_net_forward(dnn, img, false, hb) == 0) {
        eh = 0;
        for (int l = 0; l < nl; l++) {
            int shape[5];
            const long n = trn_net_output_shape(ref, l, shape);
            const double el = max_err(ha[l], hb[l], (size_t)n / (size_t)no, no);
            if (!(el <= eh)) eh = el;
        }
    }
    ok(eh < TOL, "%s: eval forward's head within %.0e (max scaled error %.2e)", yaml, TOL, eh);

    /* Change one BN layer's statistics: the fixed net keeps its fold until told, the other
       nets see the change at once. */
    const struct trn_conv *c0 = trn_model_conv(m, 0);
    float *mean =
        (float *)trn_model_arena(m, TRN_ARENA_BUFFER) + trn_model_tensor(m, c0->bn_mean)->offset;
    for (int k = 0; k < c0->c2; k++)
        mean[k] += 2.0f;
    const double stale = compare(ref, dnn, img, batch, no);
    ok(stale > 10 * TOL, "%s: a fixed_params net keeps its folded weights (error %.2e)", yaml,
       stale);
    e = compare(ref, live, img, batch, no);
    ok(e < TOL, "%s: a net without fixed_params refolds at every call (error %.2e)", yaml, e);
    trn_net_params_changed(dnn);
    e = compare(ref, dnn, img, batch, no);
    ok(e < TOL, "%s: after trn_net_params_changed it refolds (error %.2e)", yaml, e);
    free(keep);
    free(img);
out:
    trn_net_destroy(ref);
    trn_net_destroy(dnn);
    trn_net_destroy(live);
    trn_model_destroy(m);
}

int main(void)
{
    char err[256];
    struct trn_model *m = NULL;
    if (trn_model_load(TRN_TEST_MODELS_DIR "/yolov5n.yaml", NULL, &m, err, sizeof err) < 0) {
        ok(0, "load yolov5n: %s", err);
        return tap_done();
    }
    int rc;
    struct trn_net *net = NULL;
    {
        struct trn_net_opts o;
        trn_net_opts_default(&o);
        o.cpu_engine = TRN_CPU_ENGINE_ONEDNN;
        o.input_grad = true;
        rc = trn_net_create(m, 1, 64, 64, &o, &net, NULL, 0);
        ok(!net && rc == -ENOTSUP, "a oneDNN training net has no image gradient (%d)", rc);
        trn_net_destroy(net);
        net = NULL;
    }
    /* 2 x 128 x 128, as check_train's nets: at one 64 x 64 image an AVX2-only CPU (AMD EPYC)
     * gets only oneDNN 2.6's reference code for model.2.m.0.cv2, and AUTO rightly keeps ours */
    net = make_net(m, 2, 128, 128, TRN_CPU_ENGINE_AUTO, false, true, &rc);
    ok(net && !strncmp(trn_net_engine(net), TRN_HAVE_ONEDNN ? "oneDNN " : "reference", 7),
       "AUTO runs a training net on %s ('%s')", TRN_HAVE_ONEDNN ? "oneDNN" : "the reference ops",
       net ? trn_net_engine(net) : "");
    trn_net_destroy(net);
    {
        struct trn_net_opts o;
        trn_net_opts_default(&o);
        o.cpu_engine = TRN_CPU_ENGINE_AUTO;
        o.input_grad = true;
        net = NULL;
        rc = trn_net_create(m, 1, 64, 64, &o, &net, NULL, 0);
        ok(net && !strcmp(trn_net_engine(net), "reference"),
           "and one with an image gradient on the reference ops");
        trn_net_destroy(net);
    }
    net = make_net(m, 1, 64, 64, 3, false, false, &rc);
    ok(!net && rc == -EINVAL, "an unknown engine is refused");
#if !TRN_HAVE_ONEDNN
    net = make_net(m, 1, 64, 64, TRN_CPU_ENGINE_ONEDNN, false, false, &rc);
    ok(!net && rc == -ENOTSUP, "without oneDNN in the build, ONEDNN is -ENOTSUP");
    net = make_net(m, 1, 64, 64, TRN_CPU_ENGINE_AUTO, false, false, &rc);
    ok(net && !strcmp(trn_net_engine(net), "reference"), "and AUTO is the reference");
    trn_net_destroy(net);
    trn_model_destroy(m);
    tap_diag("this build has no oneDNN (libdnnl-dev): the parity checks need it");
    return tap_done();
#else
    trn_model_destroy(m);
    if ((m = load(TRN_TEST_NETS_DIR "/tiny_net.yaml", NULL))) {
        net = make_net(m, 1, 64, 64, TRN_CPU_ENGINE_ONEDNN, false, false, &rc);
        ok(!net && rc == -ENOTSUP, "tiny_net's 4-channel convs: ONEDNN is -ENOTSUP (%d)", rc);
        net = make_net(m, 1, 64, 64, TRN_CPU_ENGINE_AUTO, false, false, &rc);
        ok(net && !strcmp(trn_net_engine(net), "reference"), "and AUTO the reference ops");
        trn_net_destroy(net);
        trn_model_destroy(m);
    }
    check_model(TRN_TEST_NETS_DIR "/dnn_net.yaml", NULL, 3, 96, 128);
    check_model(TRN_TEST_NETS_DIR "/dnn_net.yaml", "0.0625", 3, 96, 128);
    check_model(TRN_TEST_MODELS_DIR "/yolov5n.yaml", NULL, 2, 160, 160);
    check_train(TRN_TEST_NETS_DIR "/dnn_net.yaml", NULL, 2, 96, 128);
    check_train(TRN_TEST_NETS_DIR "/dnn_net.yaml", "0.0625", 2, 96, 128);
    check_train(TRN_TEST_MODELS_DIR "/yolov5n.yaml", NULL, 2, 128, 128);
    check_raw_head(TRN_TEST_MODELS_DIR "/yolov5n.yaml", 2, 128, 160);
    return tap_done();
#endif
}
