/*
 * The net's AMP weights (net.h AMP WEIGHTS): the PARAM arena is cast to bf16 / fp16 only when the
 * parameters may have changed, and never left stale. On models_test/tiny_net.yaml, for bf16 and
 * fp16, every writer of the parameters is run and the next forward must equal, bit for bit, a
 * fresh CPU net's forward on the same weights:
 *   - a resident net on the device data path: the device SGD step given the net's cast
 *     (trn_optim_dev_set_params_lowp; no recast), the step without it followed by
 *     trn_net_params_changed (first shown stale without the call: the test can see a stale
 *     cast), trn_net_sync_model(H2D) after host writes, trn_net_set_resident off and on;
 *   - a net sharing the resident one's parameters (trn_net_opts.share) with the same dtype (it
 *     shares the cast) and with the other dtype (it casts at every forward);
 *   - a CPU net with trn_net_opts.fixed_params (host write + trn_net_params_changed), and a plain
 *     CPU net written behind its back (it still casts at every forward);
 *   - trn_net_lowp_refresh (the graph step's call) casts a stale tracking net once, then nothing;
 *   - with bf16 activations (net.h ACTIVATIONS) the executor's own copy, channels last in NHWC:
 *     kept by the step given it and its order, caught stale without it, refreshed once.
 * And the counts (trn_net_lowp_casts): gradient accumulation over 4 micro-batches and 3
 * optimizer steps on the resident net casts once in 12 training forwards (the host path: 12);
 * 5 eval forwards of a fixed_params net cast once.
 */
#include "kern.h"
#include "model.h"
#include "net.h"
#include "optim.h"
#include "tap.h"
#include "errors.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TB   2
#define TIMG 64

static struct trn_model *g_m;
static float *g_img;
static long g_n[TRN_MODEL_MAX_LEVELS];
static int g_nl;
static size_t g_plen;
static enum trn_act_store g_act = TRN_ACT_F32; /* training nets' activations (make_net) */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1.0p-53;
}

static void bail(const char *what, const char *why)
{
    printf("Bail out! %s: %s\n", what, why);
    exit(99);
}

/* Eval outputs of one forward, concatenated (caller frees). */
static float *eval_out(struct trn_net *net)
{
    const float *outs[TRN_MODEL_MAX_LEVELS];
    const int rc = trn_net_forward(net, g_img, false, outs);
    if (rc < 0) bail("forward", trn_strerror(rc));
    size_t n = 0;
    for (int l = 0; l < g_nl; l++)
        n += (size_t)g_n[l];
    float *const o = malloc(n * sizeof *o);
    if (!o) bail("malloc", "out of memory");
    n = 0;
    for (int l = 0; l < g_nl; l++) {
        memcpy(o + n, outs[l], (size_t)g_n[l] * sizeof *o);
        n += (size_t)g_n[l];
    }
    return o;
}

static size_t out_len(void)
{
    size_t n = 0;
    for (int l = 0; l < g_nl; l++)
        n += (size_t)g_n[l];
    return n;
}

static struct trn_net *make_net(int dt, bool device_path, bool fixed, bool train,
                                struct kern_ctx *ctx, struct trn_net *share)
{
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.amp = dt;
    o.device_path = device_path;
    o.fixed_params = fixed;
    o.train = train;
    o.ctx = ctx;
    o.share = share;
    if (train) o.act_store = g_act;
    struct trn_net *net = NULL;
    char err[256] = "";
    const int rc = trn_net_create(g_m, TB, TIMG, TIMG, &o, &net, err, sizeof err);
    if (rc < 0) bail("trn_net_create", err[0] ? err : trn_strerror(rc));
    return net;
}

/* A fresh plain CPU net's eval outputs on the model's host weights. */
static float *fresh_out(int dt)
{
    struct trn_net *const net = make_net(dt, false, false, false, NULL, NULL);
    float *const o = eval_out(net);
    trn_net_destroy(net);
    return o;
}

/* The outputs of net equal a fresh net's on the host weights (net's own weights brought to the
 * host first when it is resident). Frees got. */
static int equals_fresh(struct trn_net *net, float *got, int dt, const char *what)
{
    if (trn_net_resident(net) && trn_net_sync_model(net, KERN_COPY_D2H) < 0) bail("sync", what);
    float *const want = fresh_out(dt);
    const int same = !memcmp(got, want, out_len() * sizeof *got);
    ok(same, "%s: the forward equals a fresh net's, bit for bit", what);
    free(want);
    free(got);
    return same;
}

/* Nudge every weight on the host (a change every output sees). */
static void host_write(float scale)
{
    float *const p = trn_model_arena(g_m, TRN_ARENA_PARAM);
    const struct trn_model_info *I = trn_model_info(g_m);
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(g_m, t);
        if (T->arena != TRN_ARENA_PARAM) continue;
        for (size_t j = 0; j < T->numel; j++)
            p[T->offset + j] *= scale;
    }
}

/* Gradients of one training forward + backward on net (into its grad arena, += ). */
static void fwd_bwd(struct trn_net *net)
{
    const float *outs[TRN_MODEL_MAX_LEVELS];
    float *dout[TRN_MODEL_MAX_LEVELS];
    int rc = trn_net_forward_dev(net, g_img, false, true, outs);
    if (rc < 0) bail("training forward", trn_strerror(rc));
    for (int l = 0; l < g_nl; l++) {
        dout[l] = calloc((size_t)g_n[l], sizeof(float));
        if (!dout[l]) bail("calloc", "dout");
        for (long i = 0; i < g_n[l]; i++)
            dout[l][i] = (float)(urand() - 0.5);
    }
    /* trn_net_backward uploads host gradients (on the device path too) */
    rc = trn_net_backward(net, (const float *const *)dout);
    if (rc < 0) bail("backward", trn_strerror(rc));
    for (int l = 0; l < g_nl; l++)
        free(dout[l]);
}

struct dstep {
    struct trn_optim *opt;
    struct trn_optim_dev *dv;
    struct trn_optim_sched sch;
};

static void dstep_init(struct dstep *S, struct trn_net *net)
{
    struct trn_optim_opts oo;
    trn_optim_opts_default(&oo);
    oo.batch_size = TB;
    int rc = trn_optim_create(g_m, &oo, &S->opt);
    if (!rc)
        rc = trn_optim_dev_create(S->opt, trn_net_kern_ops(net), trn_net_kern_ctx(net), &S->dv);
    if (rc < 0) bail("optimizer", trn_optim_strerror(rc));
    memset(&S->sch, 0, sizeof S->sch);
    S->sch.lr[0] = S->sch.lr[1] = S->sch.lr[2] = 0.05;
    S->sch.momentum = 0.9;
    S->sch.accumulate = 1;
}

/* One device SGD step on net's resident parameters; with_lowp: the step keeps the net's cast. */
static void dstep_run(struct dstep *S, struct trn_net *net, bool with_lowp)
{
    const struct trn_optim_dev_step_opts so = { .grad_scale = 1.0f };
    int dt = 0;
    void *const lowp = with_lowp ? trn_net_dev_params_lowp(net, &dt) : NULL;
    int rc = trn_optim_dev_set_params_lowp(S->dv, lowp, dt,
                                           with_lowp ? trn_net_params_lowp_order(net) : NULL);
    if (!rc)
        rc = trn_optim_dev_step(S->dv, trn_net_dev_arena(net, TRN_ARENA_PARAM),
                                trn_net_dev_grad(net), &S->sch, &so);
    if (!rc) rc = trn_optim_dev_zero_grad(S->dv, trn_net_dev_grad(net));
    if (rc < 0) bail("device step", trn_optim_strerror(rc));
}

static void dstep_free(struct dstep *S)
{
    trn_optim_dev_destroy(S->dv);
    trn_optim_destroy(S->opt);
}

static void load_model(void)
{
    char err[256];
    if (trn_model_load(TRN_TEST_NET_MODELS_DIR "/tiny_net.yaml", NULL, &g_m, err, sizeof err))
        bail("tiny_net.yaml", err);
    trn_model_init(g_m, 11);
    const struct trn_model_info *I = trn_model_info(g_m);
    g_plen = I->arena_len[TRN_ARENA_PARAM];
    float *const par = trn_model_arena(g_m, TRN_ARENA_PARAM);
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *T = trn_model_tensor(g_m, t);
        if (T->role == TRN_T_BN_WEIGHT || T->role == TRN_T_BN_BIAS)
            for (size_t j = 0; j < T->numel; j++)
                par[T->offset + j] += (float)(0.4 * (urand() - 0.5));
    }
    const size_t nin = (size_t)TB * 3 * TIMG * TIMG;
    g_img = malloc(nin * sizeof *g_img);
    if (!g_img) bail("malloc", "image");
    for (size_t i = 0; i < nin; i++)
        g_img[i] = (float)urand();
}

static void test_resident(int dt, const char *dn)
{
    struct kern_ctx *ctx = NULL;
    if (kern_ctx_create(NULL, &ctx) < 0) bail("kern_ctx_create", dn);
    struct trn_net *const R = make_net(dt, true, false, true, ctx, NULL);
    if (trn_net_set_resident(R, true) < 0 || trn_net_sync_model(R, KERN_COPY_H2D) < 0)
        bail("resident", dn);
    int dtype = -1;
    ok(trn_net_dev_params_lowp(R, &dtype) != NULL && dtype == dt,
       "%s: the resident net hands out its cast and its dtype", dn);
    char what[160];

    /* repeated forwards on unchanged weights: one cast */
    free(eval_out(R));
    free(eval_out(R));
    snprintf(what, sizeof what, "%s resident, 3rd forward on the same weights", dn);
    equals_fresh(R, eval_out(R), dt, what);
    is_int(trn_net_lowp_casts(R), 1, "%s: 3 forwards on the same weights, 1 cast", dn);

    /* the device step that rewrites the cast: current without a recast */
    struct dstep S;
    dstep_init(&S, R);
    float *const before = eval_out(R);
    fwd_bwd(R);
    dstep_run(&S, R, true);
    float *const after = eval_out(R);
    ok(memcmp(before, after, out_len() * sizeof(float)) != 0,
       "%s: the step changed the outputs (lr %.2f)", dn, S.sch.lr[1]);
    free(before);
    snprintf(what, sizeof what, "%s resident, after the SGD step given the cast", dn);
    equals_fresh(R, after, dt, what);
    is_int(trn_net_lowp_casts(R), 1, "%s: the step kept the cast current (no recast)", dn);

    /* a step without the cast: stale until trn_net_params_changed */
    fwd_bwd(R);
    dstep_run(&S, R, false);
    float *const stale = eval_out(R);
    if (trn_net_sync_model(R, KERN_COPY_D2H) < 0) bail("sync", dn);
    float *const want = fresh_out(dt);
    ok(memcmp(stale, want, out_len() * sizeof(float)) != 0,
       "%s: a step without the cast, not reported: the forward is stale (what the test catches)",
       dn);
    free(stale);
    free(want);
    trn_net_params_changed(R);
    snprintf(what, sizeof what, "%s resident, step without the cast + trn_net_params_changed", dn);
    equals_fresh(R, eval_out(R), dt, what);
    is_int(trn_net_lowp_casts(R), 2, "%s: trn_net_params_changed: one recast", dn);

    /* host writes uploaded with trn_net_sync_model */
    host_write(0.97f);
    if (trn_net_sync_model(R, KERN_COPY_H2D) < 0) bail("sync", dn);
    snprintf(what, sizeof what, "%s resident, host write + trn_net_sync_model(H2D)", dn);
    equals_fresh(R, eval_out(R), dt, what);

    /* not resident: each forward uploads the host weights */
    if (trn_net_set_resident(R, false) < 0) bail("set_resident", dn);
    host_write(1.02f);
    snprintf(what, sizeof what, "%s after trn_net_set_resident(false) + host write", dn);
    equals_fresh(R, eval_out(R), dt, what);
    host_write(0.99f);
    snprintf(what, sizeof what, "%s not resident, another host write", dn);
    equals_fresh(R, eval_out(R), dt, what);
    if (trn_net_set_resident(R, true) < 0) bail("set_resident", dn);
    host_write(1.01f);
    if (trn_net_sync_model(R, KERN_COPY_H2D) < 0) bail("sync", dn);
    snprintf(what, sizeof what, "%s resident again + host write + sync", dn);
    equals_fresh(R, eval_out(R), dt, what);

    /* a net sharing R's parameters: the same dtype shares the cast, the other casts each time */
    struct trn_net *const Sh = make_net(dt, true, false, false, ctx, R);
    const int odt = dt == KERN_DT_BF16 ? KERN_DT_F16 : KERN_DT_BF16;
    struct trn_net *const Od = make_net(odt, true, false, false, ctx, R);
    trn_net_set_resident(Sh, true);
    trn_net_set_resident(Od, true);
    ok(trn_net_dev_params_lowp(Sh, NULL) == trn_net_dev_params_lowp(R, NULL) &&
           trn_net_dev_params_lowp(Od, NULL) == NULL,
       "%s: the same-dtype share hands out R's cast, the other dtype none", dn);
    free(eval_out(R)); /* current again (Sh's set_resident made it stale) */
    fwd_bwd(R);
    dstep_run(&S, R, true);
    const int64_t c0 = trn_net_lowp_casts(R) + trn_net_lowp_casts(Sh);
    snprintf(what, sizeof what, "%s sharing net (same dtype) after R's step", dn);
    equals_fresh(Sh, eval_out(Sh), dt, what);
    is_int(trn_net_lowp_casts(R) + trn_net_lowp_casts(Sh), c0,
           "%s: the sharing net reads R's cast (no cast)", dn);
    fwd_bwd(R);
    dstep_run(&S, R, true);
    snprintf(what, sizeof what, "%s sharing net (%s) after R's step", dn,
             odt == KERN_DT_F16 ? "fp16" : "bf16");
    equals_fresh(Od, eval_out(Od), odt, what);
    free(eval_out(Od));
    is_int(trn_net_lowp_casts(Od), 2, "%s: the other-dtype share casts at every forward", dn);
    /* trn_net_params_changed through a sharing net makes the owner's cast stale */
    fwd_bwd(R);
    dstep_run(&S, R, false);
    trn_net_params_changed(Od);
    snprintf(what, sizeof what, "%s R after a step reported through the sharing net", dn);
    equals_fresh(R, eval_out(R), dt, what);

    /* trn_net_lowp_refresh: casts a stale cast once, then nothing */
    trn_net_params_changed(R);
    const int64_t c1 = trn_net_lowp_casts(R);
    ok(trn_net_lowp_refresh(R) == 0 && trn_net_lowp_refresh(R) == 0 &&
           trn_net_lowp_casts(R) == c1 + 1,
       "%s: trn_net_lowp_refresh casts the stale weights once", dn);
    snprintf(what, sizeof what, "%s after trn_net_lowp_refresh", dn);
    equals_fresh(R, eval_out(R), dt, what);
    is_int(trn_net_lowp_casts(R), c1 + 1, "%s: the forward after the refresh does not cast", dn);

    trn_net_destroy(Od);
    trn_net_destroy(Sh);
    dstep_free(&S);
    trn_net_destroy(R);
    kern_ctx_destroy(ctx);
}

/* Gradient accumulation: 3 optimizer steps of 4 micro-batches each. */
static void test_accumulate(int dt, const char *dn)
{
    struct trn_net *const R = make_net(dt, true, false, true, NULL, NULL);
    struct trn_net *const H = make_net(dt, false, false, true, NULL, NULL);
    trn_net_set_resident(R, true);
    trn_net_sync_model(R, KERN_COPY_H2D);
    struct dstep S;
    dstep_init(&S, R);
    for (int step = 0; step < 3; step++) {
        for (int k = 0; k < 4; k++) {
            fwd_bwd(R);
            fwd_bwd(H); /* the host path's net, for its count (its weights are not stepped) */
        }
        dstep_run(&S, R, true);
    }
    is_int(trn_net_lowp_casts(R), 1,
           "%s: resident, 12 training forwards over 3 steps of 4 micro-batches: 1 cast", dn);
    is_int(trn_net_lowp_casts(H), 12, "%s: host path, 12 training forwards: 12 casts", dn);
    char what[96];
    snprintf(what, sizeof what, "%s resident after 3 accumulated steps", dn);
    equals_fresh(R, eval_out(R), dt, what);
    dstep_free(&S);
    trn_net_destroy(H);
    trn_net_destroy(R);
}

/* Outputs of one training forward, concatenated (caller frees). */
static float *train_out(struct trn_net *net)
{
    const float *outs[TRN_MODEL_MAX_LEVELS];
    const int rc = trn_net_forward_dev(net, g_img, false, true, outs);
    if (rc < 0) bail("training forward", trn_strerror(rc));
    float *const o = malloc(out_len() * sizeof *o);
    if (!o) bail("malloc", "out of memory");
    size_t n = 0;
    for (int l = 0; l < g_nl; l++) {
        memcpy(o + n, outs[l], (size_t)g_n[l] * sizeof *o);
        n += (size_t)g_n[l];
    }
    return o;
}

/* net's training outputs equal a fresh host net's (same activations) on net's weights. Frees
 * got. */
static int train_equals_fresh(struct trn_net *net, float *got, const char *what)
{
    if (trn_net_sync_model(net, KERN_COPY_D2H) < 0) bail("sync", what);
    struct trn_net *const F = make_net(KERN_DT_BF16, false, false, true, NULL, NULL);
    float *const want = train_out(F);
    trn_net_destroy(F);
    const int same = !memcmp(got, want, out_len() * sizeof *got);
    ok(same, "%s: the training forward equals a fresh net's, bit for bit", what);
    free(want);
    free(got);
    return same;
}

/*
 * The bf16 executor's own copy (net.h ACTIVATIONS): the resident net hands it out, with its
 * channels-last order in NHWC; the SGD step given both keeps it current (no recast, the same
 * bits as a fresh net's cast); a step without it is caught stale and trn_net_params_changed
 * recasts; the net's own cast for eval forwards is never trusted again (it is not the one the
 * step writes); trn_net_lowp_refresh casts the executor's stale copy once.
 */
static void test_x16(enum trn_act_store act, const char *an)
{
    g_act = act;
    char what[160];
    struct trn_net *const R = make_net(KERN_DT_BF16, true, false, true, NULL, NULL);
    if (trn_net_set_resident(R, true) < 0 || trn_net_sync_model(R, KERN_COPY_H2D) < 0)
        bail("resident", an);
    int dt = -1;
    void *const lp = trn_net_dev_params_lowp(R, &dt);
    const struct kern_lowp_order *const ord = trn_net_params_lowp_order(R);
    const bool nhwc = act == TRN_ACT_BF16_NHWC;
    const size_t plen = trn_model_info(g_m)->arena_len[TRN_ARENA_PARAM];
    int cl = ord != NULL, n_other = 0;
    for (int ci = 0; ord && ci < trn_model_info(g_m)->n_convs; ci++) {
        const struct trn_conv *c = trn_model_conv(g_m, ci);
        const struct kern_lowp_order *L = &ord[c->weight];
        if (ci == 0) /* the stem: its 3x3 space-to-depth weights past the PARAM elements */
            cl &= c->k == 6 && L->c == c->c1 && L->hw == (nhwc ? 9 : 0) && L->s2d == 16 &&
                  L->at >= plen && L->at % 64 == 0;
        else if (nhwc && c->k > 1)
            cl &= L->c == c->c1 && L->hw == c->k * c->k && !L->s2d;
        else
            cl &= !L->c && !L->hw && !L->s2d;
    }
    for (int t = 0; ord && t < trn_model_info(g_m)->n_tensors; t++)
        n_other += trn_model_tensor(g_m, t)->role != TRN_T_CONV_WEIGHT &&
                   (ord[t].c || ord[t].hw || ord[t].s2d);
    ok(lp && dt == KERN_DT_BF16 && cl && n_other == 0,
       "%s: the net hands out its executor's copy, %sthe stem's weights as its 3x3 "
       "space-to-depth past the PARAM elements",
       an, nhwc ? "3x3 weights channels last (c_in, k k), " : "");
    struct dstep S;
    dstep_init(&S, R);
    fwd_bwd(R);
    dstep_run(&S, R, true);
    snprintf(what, sizeof what, "%s after the SGD step given the copy", an);
    train_equals_fresh(R, train_out(R), what);
    is_int(trn_net_lowp_casts(R), 1, "%s: the step kept the copy current (1 cast in 2 forwards)",
           an);
    snprintf(what, sizeof what, "%s eval forward (the net's own cast) after the step", an);
    equals_fresh(R, eval_out(R), KERN_DT_BF16, what);
    free(eval_out(R));
    is_int(trn_net_lowp_casts(R), 3, "%s: the net's own cast is recast at each eval forward", an);

    fwd_bwd(R);
    dstep_run(&S, R, false);
    float *const stale = train_out(R);
    if (trn_net_sync_model(R, KERN_COPY_D2H) < 0) bail("sync", an);
    struct trn_net *const F = make_net(KERN_DT_BF16, false, false, true, NULL, NULL);
    float *const want = train_out(F);
    trn_net_destroy(F);
    ok(memcmp(stale, want, out_len() * sizeof(float)) != 0,
       "%s: a step without the copy, not reported: the training forward is stale", an);
    free(stale), free(want);
    trn_net_params_changed(R);
    const int64_t c0 = trn_net_lowp_casts(R);
    snprintf(what, sizeof what, "%s step without the copy + trn_net_params_changed", an);
    train_equals_fresh(R, train_out(R), what);
    is_int(trn_net_lowp_casts(R), c0 + 1, "%s: trn_net_params_changed: one recast", an);

    trn_net_params_changed(R);
    const int64_t c1 = trn_net_lowp_casts(R);
    ok(trn_net_lowp_refresh(R) == 0 && trn_net_lowp_refresh(R) == 0 &&
           trn_net_lowp_casts(R) == c1 + 1,
       "%s: trn_net_lowp_refresh casts the executor's stale copy once", an);
    snprintf(what, sizeof what, "%s after trn_net_lowp_refresh", an);
    train_equals_fresh(R, train_out(R), what);
    is_int(trn_net_lowp_casts(R), c1 + 1, "%s: the training forward after it does not cast", an);
    dstep_free(&S);
    trn_net_destroy(R);
    g_act = TRN_ACT_F32;
}

static void test_cpu(int dt, const char *dn)
{
    char what[96];
    struct trn_net *const F = make_net(dt, false, true, false, NULL, NULL);
    for (int k = 0; k < 4; k++)
        free(eval_out(F));
    snprintf(what, sizeof what, "%s fixed_params, 5th forward", dn);
    equals_fresh(F, eval_out(F), dt, what);
    is_int(trn_net_lowp_casts(F), 1, "%s: fixed_params: 5 forwards, 1 cast", dn);
    host_write(1.03f);
    trn_net_params_changed(F);
    snprintf(what, sizeof what, "%s fixed_params, host write + trn_net_params_changed", dn);
    equals_fresh(F, eval_out(F), dt, what);
    is_int(trn_net_lowp_casts(F), 2, "%s: fixed_params: the change recast once", dn);

    struct trn_net *const P = make_net(dt, false, false, false, NULL, NULL);
    free(eval_out(P));
    host_write(0.98f); /* behind the plain net's back */
    snprintf(what, sizeof what, "%s plain CPU net, host write not reported", dn);
    equals_fresh(P, eval_out(P), dt, what);
    is_int(trn_net_lowp_casts(P), 2, "%s: the plain CPU net casts at every forward", dn);
    ok(trn_net_lowp_refresh(P) == 0 && trn_net_lowp_casts(P) == 2,
       "%s: refresh on a net that does not track is a no-op", dn);
    trn_net_destroy(P);
    trn_net_destroy(F);
}

int main(void)
{
    load_model();
    {
        struct trn_net *const n = make_net(KERN_DT_BF16, false, false, false, NULL, NULL);
        g_nl = trn_net_levels(n);
        for (int l = 0; l < g_nl; l++)
            g_n[l] = trn_net_output_shape(n, l, NULL);
        trn_net_destroy(n);
    }
    {
        struct trn_net *const n = make_net(KERN_DT_F32, true, false, true, NULL, NULL);
        trn_net_set_resident(n, true);
        ok(trn_net_dev_params_lowp(n, NULL) == NULL && trn_net_lowp_refresh(n) == 0,
           "fp32: no cast to hand out, refresh is a no-op");
        free(eval_out(n));
        is_int(trn_net_lowp_casts(n), 0, "fp32: no casts");
        trn_net_destroy(n);
    }
    ok(trn_net_params_changed(NULL) == -EINVAL && trn_net_lowp_refresh(NULL) == -EINVAL &&
           trn_net_dev_params_lowp(NULL, NULL) == NULL && trn_net_lowp_casts(NULL) == 0,
       "NULL net: -EINVAL / NULL / 0");
    test_resident(KERN_DT_BF16, "bf16");
    test_resident(KERN_DT_F16, "fp16");
    test_accumulate(KERN_DT_BF16, "bf16");
    test_accumulate(KERN_DT_F16, "fp16");
    test_cpu(KERN_DT_BF16, "bf16");
    test_cpu(KERN_DT_F16, "fp16");
    test_x16(TRN_ACT_BF16_NHWC, "bf16 NHWC activations");
    test_x16(TRN_ACT_BF16_NCHW, "bf16 NCHW activations");
    free(g_img);
    trn_model_destroy(g_m);
    return tap_done();
}
