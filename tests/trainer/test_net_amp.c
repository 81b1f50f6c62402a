/*
 * Autocast in the net (trn_net_opts.amp, net.h AUTOCAST):
 *   1. amp bf16 and fp16 forward + backward of data_amp/amp_net.yaml (Conv, Conv, Detect) equal,
 *      bit for bit, a reference computed here op by op from the kern CPU ops with explicit casts;
 *   2. amp bf16 matches PyTorch 1.13's torch.autocast('cpu', torch.bfloat16) on the same net
 *      (data_amp/amp_net_bf16.bin, from make_amp_refs.py), within the tolerances below;
 *   3. on models_test/tiny_net.yaml (every module kind), amp bf16 is close to float32, and the
 *      device data path (trn_net_opts.device_path) equals the CPU path bit for bit, bf16 and fp16;
 *   4. program mode (test_train_amp YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR): yolo-train
 *      --amp fp16 with an Inf injected into one batch's loss gradient (--amp-test-inf-at) skips
 *      that optimizer step and halves the scale; the checkpoint keeps the scaler state and
 *      --resume restores it; the resident step (--device-path) gives the host step's bytes.
 */
#include "kern.h"
#include "model.h"
#include "net.h"
#include "loss.h"
#include "hyp.h"
#include "ffr.h"
#include "run_testutil.h"
#include "tap.h"

#include "resident_testutil.h"
#include "errors.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS  2
#define IMG 16

struct rec {
    char name[65];
    uint32_t n;
    float *v;
};

static struct rec recs[64];
static int n_recs;

static int load_refs(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint32_t count = 0;
    int rc = -1;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "AMPREF1", 8) != 0 ||
        fread(&count, 4, 1, f) != 1 || count > 64)
        goto out;
    for (uint32_t i = 0; i < count; i++) {
        struct rec *r = &recs[n_recs];
        memset(r->name, 0, sizeof r->name);
        if (fread(r->name, 1, 64, f) != 64 || fread(&r->n, 4, 1, f) != 1 || r->n > (1u << 20))
            goto out;
        r->v = malloc((size_t)r->n * sizeof(float) + 1);
        if (!r->v || fread(r->v, sizeof(float), r->n, f) != r->n) goto out;
        n_recs++;
    }
    rc = 0;
out:
    fclose(f);
    return rc;
}

static const struct rec *ref(const char *name)
{
    for (int i = 0; i < n_recs; i++)
        if (!strcmp(recs[i].name, name)) return &recs[i];
    printf("Bail out! %s missing from the reference\n", name);
    exit(99);
}

/* Set the model's tensor `name` from the reference record of the same name. */
static void put(struct trn_model *m, const char *name)
{
    const int t = trn_model_find(m, name);
    const struct rec *r = ref(name);
    const struct trn_tensor *T = t >= 0 ? trn_model_tensor(m, t) : NULL;
    if (!T || T->numel != r->n) {
        printf("Bail out! tensor %s: not in the model or another size\n", name);
        exit(99);
    }
    memcpy((float *)trn_model_arena(m, T->arena) + T->offset, r->v, r->n * sizeof(float));
}

static float *tensor(struct trn_model *m, const char *name)
{
    const struct trn_tensor *T = trn_model_tensor(m, trn_model_find(m, name));
    return (float *)trn_model_arena(m, T->arena) + T->offset;
}

static size_t tensor_numel(struct trn_model *m, const char *name)
{
    return trn_model_tensor(m, trn_model_find(m, name))->numel;
}

static float *grad_of(struct trn_net *net, struct trn_model *m, const char *name)
{
    return trn_net_grad(net) + trn_model_tensor(m, trn_model_find(m, name))->offset;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static struct trn_model *load_amp_model(void)
{
    struct trn_model *m = NULL;
    char err[256];
    if (trn_model_load(TRN_TEST_AMP_DIR "/amp_net.yaml", NULL, &m, err, sizeof err)) {
        printf("Bail out! %s\n", err);
        exit(99);
    }
    static const char *const names[] = {
        "model.0.conv.weight",     "model.0.bn.weight",      "model.0.bn.bias",
        "model.0.bn.running_mean", "model.0.bn.running_var", "model.1.conv.weight",
        "model.1.bn.weight",       "model.1.bn.bias",        "model.1.bn.running_mean",
        "model.1.bn.running_var",  "model.2.m.0.weight",     "model.2.m.0.bias",
    };
    trn_model_init(m, 1);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        put(m, names[k]);
    return m;
}

/* ---------------------------------------------------------------------------------------- */
/* 1. op-by-op reference                                                                    */

struct lp {
    struct kern_ctx *ctx;
    int dt;
};

static uint16_t *cast16(struct lp *L, const float *x, size_t n)
{
    uint16_t *o = malloc(n * 2 + 2);
    if (L->dt == KERN_DT_BF16)
        kern_ref_cast_f32_bf16(L->ctx, o, x, n);
    else
        kern_ref_cast_f32_f16(L->ctx, o, x, n);
    return o;
}

static float *widen(struct lp *L, const uint16_t *x, size_t n)
{
    float *o = malloc(n * sizeof(float) + 4);
    if (L->dt == KERN_DT_BF16)
        kern_ref_cast_bf16_f32(L->ctx, o, x, n);
    else
        kern_ref_cast_f16_f32(L->ctx, o, x, n);
    return o;
}

struct refres {
    float *out, *gin, *gw[3], *gg[2], *gb[2], *gbias, *rm[2], *rv[2];
};

/* The net's AUTOCAST by hand: casts, lowp convs, float32 BN + SiLU, Detect reshape. */
static void reference(struct trn_model *m, int dt, const float *x, const float *dout,
                      struct refres *R)
{
    struct kern_ctx *ctx = NULL;
    kern_ctx_create(NULL, &ctx);
    kern_ctx_reserve(ctx, 1 << 20);
    struct lp L = { ctx, dt };
    const int c[3] = { 3, 8, 16 }, hw[3] = { IMG, IMG / 2, IMG / 4 };
    struct kern_conv2d_lowp d[3];
    struct kern_conv2d cd;
    for (int i = 0; i < 2; i++) {
        kern_conv2d_init(&cd, BS, c[i], hw[i], hw[i], c[i + 1], 3, 2, 1);
        kern_conv2d_lowp_init(&d[i], &cd, dt, KERN_LAYOUT_NCHW);
    }
    kern_conv2d_init(&cd, BS, 16, hw[2], hw[2], 18, 1, 1, 0);
    kern_conv2d_lowp_init(&d[2], &cd, dt, KERN_LAYOUT_NCHW);
    char nm[64];
    float *a[3], *z[2], *mean[2], *inv[2];
    uint16_t *a16[3], *w16[3];
    a[0] = (float *)x;
    for (int i = 0; i < 3; i++) {
        const size_t n_in = (size_t)BS * c[i] * hw[i] * hw[i];
        snprintf(nm, sizeof nm, i < 2 ? "model.%d.conv.weight" : "model.%d.m.0.weight", i);
        w16[i] = cast16(&L, tensor(m, nm), tensor_numel(m, nm));
        a16[i] = cast16(&L, a[i], n_in);
        if (i == 2) break;
        const size_t n_out = (size_t)BS * c[i + 1] * hw[i + 1] * hw[i + 1];
        uint16_t *y16 = malloc(n_out * 2);
        kern_ref_conv2d_lowp_fwd(ctx, &d[i], y16, a16[i], w16[i], NULL);
        z[i] = widen(&L, y16, n_out);
        free(y16);
        struct kern_bn b;
        kern_bn_init(&b, BS, c[i + 1], hw[i + 1] * hw[i + 1]);
        a[i + 1] = malloc(n_out * sizeof(float));
        mean[i] = malloc((size_t)c[i + 1] * sizeof(float));
        inv[i] = malloc((size_t)c[i + 1] * sizeof(float));
        R->rm[i] = malloc((size_t)c[i + 1] * sizeof(float));
        R->rv[i] = malloc((size_t)c[i + 1] * sizeof(float));
        snprintf(nm, sizeof nm, "model.%d.bn.running_mean", i);
        memcpy(R->rm[i], tensor(m, nm), (size_t)c[i + 1] * sizeof(float));
        snprintf(nm, sizeof nm, "model.%d.bn.running_var", i);
        memcpy(R->rv[i], tensor(m, nm), (size_t)c[i + 1] * sizeof(float));
        snprintf(nm, sizeof nm, "model.%d.bn.weight", i);
        const float *gamma = tensor(m, nm);
        snprintf(nm, sizeof nm, "model.%d.bn.bias", i);
        kern_ref_bn_silu_fwd_train(ctx, &b, a[i + 1], mean[i], inv[i], R->rm[i], R->rv[i], z[i],
                                   gamma, tensor(m, nm));
    }
    const size_t n_raw = (size_t)BS * 18 * hw[2] * hw[2];
    uint16_t *b16 = cast16(&L, tensor(m, "model.2.m.0.bias"), 18), *r16 = malloc(n_raw * 2);
    kern_ref_conv2d_lowp_fwd(ctx, &d[2], r16, a16[2], w16[2], b16);
    float *raw = widen(&L, r16, n_raw);
    struct kern_detect det = { .bs = BS, .na = 3, .no = 6, .ny = hw[2], .nx = hw[2], .stride = 4 };
    R->out = malloc(n_raw * sizeof(float));
    kern_ref_detect_reshape_fwd(ctx, &det, R->out, raw);

    /* backward */
    float *dz = malloc(n_raw * sizeof(float));
    kern_ref_detect_reshape_bwd(ctx, &det, dz, dout, 0);
    uint16_t *dy16 = cast16(&L, dz, n_raw);
    R->gbias = calloc(18, sizeof(float));
    R->gw[2] = calloc(tensor_numel(m, "model.2.m.0.weight"), sizeof(float));
    kern_ref_conv2d_lowp_bwd_bias(ctx, &d[2], R->gbias, dy16, KERN_ACCUM_DPARAM);
    kern_ref_conv2d_lowp_bwd_filter(ctx, &d[2], R->gw[2], dy16, a16[2], KERN_ACCUM_DPARAM);
    for (int i = 2; i >= 0; i--) {
        const size_t n_in = (size_t)BS * c[i] * hw[i] * hw[i];
        uint16_t *dx16 = malloc(n_in * 2);
        kern_ref_conv2d_lowp_bwd_data(ctx, &d[i], dx16, dy16, w16[i], 0);
        float *da = widen(&L, dx16, n_in);
        free(dx16);
        free(dy16);
        if (i == 0) {
            R->gin = da;
            break;
        }
        const int j = i - 1;
        struct kern_bn b;
        kern_bn_init(&b, BS, c[i], hw[i] * hw[i]);
        float *dzj = malloc(n_in * sizeof(float));
        R->gg[j] = calloc((size_t)c[i], sizeof(float));
        R->gb[j] = calloc((size_t)c[i], sizeof(float));
        snprintf(nm, sizeof nm, "model.%d.bn.weight", j);
        const float *gamma = tensor(m, nm);
        snprintf(nm, sizeof nm, "model.%d.bn.bias", j);
        kern_ref_bn_silu_bwd(ctx, &b, dzj, R->gg[j], R->gb[j], da, z[j], gamma, tensor(m, nm),
                             mean[j], inv[j], KERN_ACCUM_DPARAM);
        free(da);
        dy16 = cast16(&L, dzj, n_in);
        free(dzj);
        snprintf(nm, sizeof nm, "model.%d.conv.weight", j);
        R->gw[j] = calloc(tensor_numel(m, nm), sizeof(float));
        kern_ref_conv2d_lowp_bwd_filter(ctx, &d[j], R->gw[j], dy16, a16[j], KERN_ACCUM_DPARAM);
    }
    for (int i = 0; i < 3; i++) {
        free(w16[i]);
        free(a16[i]);
        if (i) free(a[i]);
    }
    for (int i = 0; i < 2; i++) {
        free(z[i]);
        free(mean[i]);
        free(inv[i]);
    }
    free(b16);
    free(r16);
    free(raw);
    free(dz);
    kern_ctx_destroy(ctx);
}

static void free_ref(struct refres *R)
{
    void *p[] = { R->out,   R->gin,   R->gw[0], R->gw[1], R->gw[2], R->gg[0], R->gg[1],
                  R->gb[0], R->gb[1], R->gbias, R->rm[0], R->rm[1], R->rv[0], R->rv[1] };
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
        free(p[k]);
}

/* Forward (training) + backward of an amp_net net with the reference's input and dout; *head:
 * the Detect output (host view, valid until the next forward). */
static struct trn_net *run_amp_net(struct trn_model *m, int dt, bool device_path,
                                   const float **head)
{
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.input_grad = true;
    o.amp = dt;
    o.device_path = device_path;
    struct trn_net *net = NULL;
    char err[256];
    int rc = trn_net_create(m, BS, IMG, IMG, &o, &net, err, sizeof err);
    if (rc) {
        printf("Bail out! create: %s\n", err);
        exit(99);
    }
    const float *outs[1];
    rc = trn_net_forward(net, ref("input")->v, true, outs);
    const float *d[1] = { ref("dout")->v };
    trn_net_zero_grad(net);
    if (!rc) rc = trn_net_backward(net, d);
    if (rc) {
        printf("Bail out! amp net: %s\n", trn_strerror(rc));
        exit(99);
    }
    *head = outs[0];
    return net;
}

static void test_op_by_op(int dt, const char *dn)
{
    struct trn_model *m = load_amp_model();
    struct refres R;
    reference(m, dt, ref("input")->v, ref("dout")->v, &R);
    const float *head = NULL;
    struct trn_net *net = run_amp_net(m, dt, false, &head);
    const long n_out = trn_net_output_shape(net, 0, NULL);
    ok(same_bits(head, R.out, (size_t)n_out), "%s: Detect output == op-by-op reference", dn);
    ok(same_bits(trn_net_input_grad(net), R.gin, (size_t)BS * 3 * IMG * IMG),
       "%s: input gradient == reference", dn);
    ok(same_bits(grad_of(net, m, "model.2.m.0.bias"), R.gbias, 18), "%s: Detect bias grad", dn);
    char nm[64];
    for (int i = 0; i < 3; i++) {
        snprintf(nm, sizeof nm, i < 2 ? "model.%d.conv.weight" : "model.%d.m.0.weight", i);
        ok(same_bits(grad_of(net, m, nm), R.gw[i], tensor_numel(m, nm)), "%s: %s grad", dn, nm);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(nm, sizeof nm, "model.%d.bn.weight", i);
        ok(same_bits(grad_of(net, m, nm), R.gg[i], tensor_numel(m, nm)), "%s: %s grad", dn, nm);
        snprintf(nm, sizeof nm, "model.%d.bn.bias", i);
        ok(same_bits(grad_of(net, m, nm), R.gb[i], tensor_numel(m, nm)), "%s: %s grad", dn, nm);
        snprintf(nm, sizeof nm, "model.%d.bn.running_mean", i);
        ok(same_bits(tensor(m, nm), R.rm[i], tensor_numel(m, nm)), "%s: %s", dn, nm);
        snprintf(nm, sizeof nm, "model.%d.bn.running_var", i);
        ok(same_bits(tensor(m, nm), R.rv[i], tensor_numel(m, nm)), "%s: %s", dn, nm);
    }
    trn_net_destroy(net);
    trn_model_destroy(m);
    free_ref(&R);
}

/* ---------------------------------------------------------------------------------------- */
/* 2. PyTorch autocast                                                                      */

/* max |a - b| over max |b|, and the share of elements that are bitwise equal. */
static double rel_maxdiff(const float *a, const float *b, size_t n, double *exact)
{
    double md = 0, mb = 0;
    size_t same = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
        same += a[i] == b[i];
    }
    if (exact) *exact = n ? (double)same / (double)n : 1;
    return mb > 0 ? md / mb : md;
}

/* The convs and casts are torch's bit for bit; BN's float32 sums run in another order, which
 * here moves the BN parameter gradients by ~1e-7 of their largest value and nothing else (the
 * outputs, conv gradients and input gradient come out bitwise equal). A sum order that flips a
 * later bf16 rounding would move a tensor by up to 2^-8 of an element: the bound is 1e-5 of each
 * tensor's largest magnitude, and the Detect output at least 90% bitwise equal. */
#define TORCH_TOL 1e-5

static void test_torch(void)
{
    struct trn_model *m = load_amp_model();
    const float *head = NULL;
    struct trn_net *net = run_amp_net(m, KERN_DT_BF16, false, &head);
    double ex = 0, d = rel_maxdiff(head, ref("out")->v, ref("out")->n, &ex);
    ok(d <= TORCH_TOL && ex >= 0.9, "torch: Detect output within %g (%.2g, %.1f%% bitwise equal)",
       TORCH_TOL, d, 100 * ex);
    d = rel_maxdiff(trn_net_input_grad(net), ref("grad.input")->v, ref("grad.input")->n, NULL);
    ok(d <= TORCH_TOL, "torch: input gradient within %g (%.2g)", TORCH_TOL, d);
    for (int i = 0; i < n_recs; i++) {
        const char *nm = recs[i].name;
        if (!strncmp(nm, "grad.model.", 11)) {
            d = rel_maxdiff(grad_of(net, m, nm + 5), recs[i].v, recs[i].n, NULL);
            ok(d <= TORCH_TOL, "torch: %s within %g (%.2g)", nm, TORCH_TOL, d);
        } else if (!strncmp(nm, "after.", 6)) {
            d = rel_maxdiff(tensor(m, nm + 6), recs[i].v, recs[i].n, NULL);
            ok(d <= 1e-5, "torch: %s within 1e-5 (%.2g)", nm + 6, d);
        }
    }
    /* the same net in float32 is further from autocast than autocast's own tolerance: the test
       sees the casts */
    struct trn_model *m32 = load_amp_model();
    const float *h32 = NULL;
    struct trn_net *n32 = run_amp_net(m32, KERN_DT_F32, false, &h32);
    d = rel_maxdiff(h32, ref("out")->v, ref("out")->n, &ex);
    ok(ex < 0.5, "torch: float32 net differs from autocast (%.1f%% bitwise equal, %.2g)", 100 * ex,
       d);
    trn_net_destroy(n32);
    trn_model_destroy(m32);
    trn_net_destroy(net);
    trn_model_destroy(m);
}

/* ---------------------------------------------------------------------------------------- */
/* 3. tiny_net: close to float32; device data path == CPU path                              */

#define TB   2
#define TIMG 64

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1.0p-53;
}

struct tiny {
    struct trn_model *m;
    float *img;
    float *dout[TRN_MODEL_MAX_LEVELS];
    long n[TRN_MODEL_MAX_LEVELS];
    int nl;
};

/* One training forward + backward; copies of the outputs, input and parameter gradients. */
struct run {
    float *out[TRN_MODEL_MAX_LEVELS];
    float *gin, *grad;
};

static int tiny_step(struct trn_net *net, struct tiny *T, struct run *r)
{
    const float *outs[TRN_MODEL_MAX_LEVELS];
    int rc = trn_net_forward(net, T->img, true, outs);
    if (rc) return rc;
    for (int l = 0; l < T->nl; l++) {
        r->out[l] = malloc((size_t)T->n[l] * sizeof(float));
        memcpy(r->out[l], outs[l], (size_t)T->n[l] * sizeof(float));
    }
    trn_net_zero_grad(net);
    if ((rc = trn_net_backward(net, (const float *const *)T->dout))) return rc;
    const size_t plen = trn_model_info(T->m)->arena_len[TRN_ARENA_PARAM];
    const size_t nin = (size_t)TB * 3 * TIMG * TIMG;
    r->grad = malloc(plen * sizeof(float));
    memcpy(r->grad, trn_net_grad(net), plen * sizeof(float));
    r->gin = malloc(nin * sizeof(float));
    memcpy(r->gin, trn_net_input_grad(net), nin * sizeof(float));
    return 0;
}

static void free_run(struct run *r, int nl)
{
    for (int l = 0; l < nl; l++)
        free(r->out[l]);
    free(r->gin);
    free(r->grad);
}

static struct trn_net *tiny_net(struct tiny *T, int dt, bool device_path)
{
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.input_grad = true;
    o.amp = dt;
    o.device_path = device_path;
    struct trn_net *net = NULL;
    char err[256];
    if (trn_net_create(T->m, TB, TIMG, TIMG, &o, &net, err, sizeof err)) {
        printf("Bail out! tiny net: %s\n", err);
        exit(99);
    }
    return net;
}

static int same_steps(const struct run *a, const struct run *b, const struct tiny *T)
{
    int same = same_bits(a->gin, b->gin, (size_t)TB * 3 * TIMG * TIMG) &&
               same_bits(a->grad, b->grad, trn_model_info(T->m)->arena_len[TRN_ARENA_PARAM]);
    for (int l = 0; l < T->nl; l++)
        same = same && same_bits(a->out[l], b->out[l], (size_t)T->n[l]);
    return same;
}

/* Relative L2 distance of two vectors. */
static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* bf16 keeps 8 significant bits (relative rounding 2^-9 per cast), fp16 11. On the tiny net
 * (batch 2, BN over maps down to 2x2) BN's backward subtracts nearly equal terms, so the
 * gradients move much more than the outputs: measured relative L2 distance from float32, bf16:
 * 0.006 / 0.017 (outputs), 0.15 (all parameter gradients), 0.16 (input gradient); fp16 8x less
 * each, as rounding with 3 more bits gives (a wrong gradient would not shrink with the dtype).
 * Bounds: bf16 outputs 5e-2, gradients 0.3; fp16 an eighth of those. */
#define OUT_TOL_BF16  5e-2
#define GRAD_TOL_BF16 0.3

/* tests/trainer/models_test/tiny_net.yaml with its parameters drawn from seed (bails out). */
static struct trn_model *tiny_model(uint64_t seed)
{
    struct trn_model *m = NULL;
    char err[256];
    if (trn_model_load(TRN_TEST_NET_MODELS_DIR "/tiny_net.yaml", NULL, &m, err, sizeof err)) {
        printf("Bail out! %s\n", err);
        exit(99);
    }
    trn_model_init(m, seed);
    return m;
}

static void test_tiny(void)
{
    struct tiny T = { 0 };
    char err[256];
    T.m = tiny_model(7);
    const struct trn_model_info *I = trn_model_info(T.m);
    float *par = trn_model_arena(T.m, TRN_ARENA_PARAM);
    for (int t = 0; t < I->n_tensors; t++) {
        const struct trn_tensor *Tt = trn_model_tensor(T.m, t);
        if (Tt->role == TRN_T_BN_WEIGHT || Tt->role == TRN_T_BN_BIAS)
            for (size_t j = 0; j < Tt->numel; j++)
                par[Tt->offset + j] += (float)(0.4 * (urand() - 0.5));
    }
    const size_t nin = (size_t)TB * 3 * TIMG * TIMG;
    T.img = malloc(nin * sizeof(float));
    for (size_t i = 0; i < nin; i++)
        T.img[i] = (float)urand();
    struct trn_net *n32 = tiny_net(&T, KERN_DT_F32, false);
    T.nl = trn_net_levels(n32);
    for (int l = 0; l < T.nl; l++) {
        T.n[l] = trn_net_output_shape(n32, l, NULL);
        T.dout[l] = malloc((size_t)T.n[l] * sizeof(float));
        for (long i = 0; i < T.n[l]; i++)
            T.dout[l][i] = (float)(2 * urand() - 1);
    }
    struct run r32 = { 0 }, rb = { 0 }, rh = { 0 };
    int rc = tiny_step(n32, &T, &r32);
    struct trn_net *nb = tiny_net(&T, KERN_DT_BF16, false);
    if (!rc) rc = tiny_step(nb, &T, &rb);
    ok(rc == 0, "tiny: float32 and bf16 steps run: %s", trn_strerror(rc));
    if (rc) exit(tap_done());

    struct trn_net *nh = tiny_net(&T, KERN_DT_F16, false);
    rc = tiny_step(nh, &T, &rh);
    trn_net_destroy(nh);
    ok(rc == 0, "tiny: fp16 step runs: %s", trn_strerror(rc));
    if (rc) exit(tap_done());
    const size_t plen = I->arena_len[TRN_ARENA_PARAM];
    for (int l = 0; l < T.nl; l++) {
        const double db = rel_l2(rb.out[l], r32.out[l], (size_t)T.n[l]);
        const double dh = rel_l2(rh.out[l], r32.out[l], (size_t)T.n[l]);
        ok(db > 0 && db <= OUT_TOL_BF16 && dh > 0 && dh <= OUT_TOL_BF16 / 8,
           "tiny: level %d output near float32: bf16 %.2g (<= %g), fp16 %.2g (<= %g)", l, db,
           OUT_TOL_BF16, dh, OUT_TOL_BF16 / 8);
    }
    const double gb = rel_l2(rb.grad, r32.grad, plen), gh = rel_l2(rh.grad, r32.grad, plen);
    const double ib = rel_l2(rb.gin, r32.gin, nin), ih = rel_l2(rh.gin, r32.gin, nin);
    ok(gb > 0 && gb <= GRAD_TOL_BF16 && ib > 0 && ib <= GRAD_TOL_BF16,
       "tiny bf16: parameter gradients %.2g, input gradient %.2g from float32 (<= %g)", gb, ib,
       GRAD_TOL_BF16);
    ok(gh > 0 && gh <= GRAD_TOL_BF16 / 8 && ih > 0 && ih <= GRAD_TOL_BF16 / 8,
       "tiny fp16: parameter gradients %.2g, input gradient %.2g from float32 (<= %g)", gh, ih,
       GRAD_TOL_BF16 / 8);
    ok(gh * 4 <= gb && ih * 4 <= ib,
       "tiny: the distance is rounding's: fp16's (3 more mantissa bits) is %.1fx / %.1fx smaller",
       gb / gh, ib / ih);

    /* device data path == CPU path, two steps with the weights changed between them (the bf16
       weight copy must follow the master weights) */
    const int dts[2] = { KERN_DT_BF16, KERN_DT_F16 };
    for (int k = 0; k < 2; k++) {
        const char *dn = k ? "fp16" : "bf16";
        struct trn_net *cpu = tiny_net(&T, dts[k], false), *dev = tiny_net(&T, dts[k], true);
        for (int step = 0; step < 2; step++) {
            struct run a = { 0 }, b = { 0 };
            rc = tiny_step(cpu, &T, &a);
            if (!rc) rc = tiny_step(dev, &T, &b);
            ok(rc == 0 && same_steps(&a, &b, &T),
               "tiny %s step %d: device data path == CPU path bit for bit (%s)", dn, step,
               trn_strerror(rc));
            if (step == 1 && k == 0) {
                struct trn_net *fresh = tiny_net(&T, dts[k], false);
                struct run f = { 0 };
                rc = tiny_step(fresh, &T, &f);
                ok(rc == 0 && same_steps(&a, &f, &T),
                   "tiny bf16: after a weight update, == a fresh net (weights re-cast)");
                free_run(&f, T.nl);
                trn_net_destroy(fresh);
            }
            free_run(&a, T.nl);
            free_run(&b, T.nl);
            for (size_t i = 0; i < I->arena_len[TRN_ARENA_PARAM]; i++)
                par[i] *= 1.0078125f; /* the optimizer's update, in spirit */
        }
        trn_net_destroy(cpu);
        trn_net_destroy(dev);
    }
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.amp = 7;
    struct trn_net *bad = NULL;
    is_int(trn_net_create(T.m, TB, TIMG, TIMG, &o, &bad, err, sizeof err), -EINVAL,
           "an unknown amp dtype is refused");
    ok(bad == NULL && strstr(err, "amp"), "and named: %s", err);
    free_run(&r32, T.nl);
    free_run(&rb, T.nl);
    free_run(&rh, T.nl);
    for (int l = 0; l < T.nl; l++)
        free(T.dout[l]);
    free(T.img);
    trn_net_destroy(n32);
    trn_net_destroy(nb);
    trn_model_destroy(T.m);
}

/* ---------------------------------------------------------------------------------------- */
/* 4. yolo-train --amp fp16: the loss scaler (program mode)                                 */

static const char *train_exe;

#define TRAIN_ARGS                                                                               \
    "--records %s/r.ffr --img 64 --batch-size 4 --cfg %s/tiny_net.yaml --workers 1 --threads 1 " \
    "--seed 3 --project %s/runs --exist-ok --noval"

/* The checkpoint metadata's value of key (a number), or NAN. */
static double ckpt_num(const char *path, const char *key)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return NAN;
    size_t ml = 0;
    const char *m = ffr_reader_metadata(r, &ml);
    char *t = strndup(m, ml), pat[80];
    snprintf(pat, sizeof pat, "\n%s: ", key);
    const char *at = t ? strstr(t, pat) : NULL;
    const double v = at ? strtod(at + strlen(pat), NULL) : NAN;
    free(t);
    ffr_reader_close(r);
    return v;
}

static int ckpt_has(const char *path, const char *needle)
{
    struct ffr_reader *r = NULL;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return 0;
    size_t ml = 0;
    const char *m = ffr_reader_metadata(r, &ml);
    char *t = strndup(m, ml);
    const int has = t && strstr(t, needle) != NULL;
    free(t);
    ffr_reader_close(r);
    return has;
}

static void test_scaler(const char *synth, const char *pack, const char *models)
{
    snprintf(dir, sizeof dir, "/tmp/test_train_amp_XXXXXX");
    if (!mkdtemp(dir)) {
        ok(0, "mkdtemp");
        return;
    }
    if (!make_data(synth, pack, "r", 10, 64)) {
        show_stderr();
        ok(0, "dataset");
        return;
    }
    char ck[400], p[400];
    /* 10 images at batch 4: 3 batches per epoch; in warmup accumulate is 1, so every batch steps.
       Batch 1's seed gets an Inf: its step is skipped, the scale halves. */
    int rc = run("%s " TRAIN_ARGS " --epochs 2 --name a --amp fp16 --amp-test-inf-at 1 "
                 "--stop-after-steps 2",
                 train_exe, dir, models, dir);
    if (rc) show_stderr();
    is_int(rc, 0, "fp16 run, overflow injected at batch 1, stopped after 2 batches");
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    char *log = slurp(p, NULL);
    ok(log && strstr(log, "fp16 loss scaler: Inf/NaN gradients at epoch 0 batch 1: optimizer "
                          "step skipped, scale now 32768"),
       "the step is skipped and the scale halves (logged)");
    free(log);
    snprintf(ck, sizeof ck, "%s/runs/a/weights/last.ckpt", dir);
    ok(ckpt_has(ck, "\namp: fp16\n"), "the checkpoint records amp: fp16");
    ok(ckpt_num(ck, "amp_scale") == 32768.0, "checkpoint amp_scale 32768 (%g)",
       ckpt_num(ck, "amp_scale"));
    ok(ckpt_num(ck, "amp_growth_tracker") == 0.0, "growth tracker reset by the overflow");
    ok(ckpt_num(ck, "optim_steps") == 1.0, "one optimizer step taken of two (%g)",
       ckpt_num(ck, "optim_steps"));
    ok(ckpt_num(ck, "last_opt_step") == 1.0, "the skipped step still counts for accumulation");
    /* the same two batches without the overflow: both steps taken, scale unchanged */
    rc = run("%s " TRAIN_ARGS " --epochs 2 --name b --amp fp16 --stop-after-steps 2", train_exe,
             dir, models, dir);
    snprintf(ck, sizeof ck, "%s/runs/b/weights/last.ckpt", dir);
    ok(rc == 0 && ckpt_num(ck, "amp_scale") == 65536.0 && ckpt_num(ck, "optim_steps") == 2.0 &&
           ckpt_num(ck, "amp_growth_tracker") == 2.0,
       "without the overflow: 2 steps, scale 65536, tracker 2");
    /* resume a: the scale is the checkpoint's (a fresh scaler would start at 65536 and, with
       one more clean step, save 65536 and tracker 1) */
    rc = run("%s --resume %s/runs/a --stop-after-steps 1", train_exe, dir);
    if (rc) show_stderr();
    snprintf(ck, sizeof ck, "%s/runs/a/weights/last.ckpt", dir);
    ok(rc == 0 && ckpt_num(ck, "amp_scale") == 32768.0 &&
           ckpt_num(ck, "amp_growth_tracker") == 1.0 && ckpt_num(ck, "optim_steps") == 2.0,
       "--resume restores the scale (32768, tracker 1, 2 steps: %g %g %g)",
       ckpt_num(ck, "amp_scale"), ckpt_num(ck, "amp_growth_tracker"), ckpt_num(ck, "optim_steps"));
    /* the resident step (device data path: the seed scaled by kern amp_unscale, the fused step's
       unscale and skip on the device) gives the host step's bytes: 2 epochs of 4 + 4 + 2 images
       (the short batch's net too), the overflow at batch 4 (epoch 1's second) */
    rc = run("%s " TRAIN_ARGS " --epochs 2 --name e --amp fp16 --amp-test-inf-at 4", train_exe, dir,
             models, dir);
    if (!rc)
        rc = run("%s " TRAIN_ARGS " --epochs 2 --name f --amp fp16 --amp-test-inf-at 4 "
                 "--device-path",
                 train_exe, dir, models, dir);
    if (rc) show_stderr();
    is_int(rc, 0, "fp16 2 epochs, host step and resident step (--device-path)");
    snprintf(ck, sizeof ck, "%s/runs/f/weights/last.ckpt", dir);
    ok(ckpt_num(ck, "amp_scale") == 32768.0, "resident: the skip halved the scale (%g)",
       ckpt_num(ck, "amp_scale"));
    same_run("e", "f", "fp16 resident vs host step");
    /* bf16 records its dtype and no scaler state */
    rc = run("%s " TRAIN_ARGS " --epochs 1 --name c --amp bf16 --stop-after-steps 1", train_exe,
             dir, models, dir);
    snprintf(ck, sizeof ck, "%s/runs/c/weights/last.ckpt", dir);
    ok(rc == 0 && ckpt_has(ck, "\namp: bf16\n") && !ckpt_has(ck, "amp_scale"),
       "bf16 run: amp: bf16, no scaler state");
    rc = run("%s " TRAIN_ARGS " --epochs 1 --name d --amp fp8", train_exe, dir, models, dir);
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    log = slurp(p, NULL);
    ok(rc == 2 && log && strstr(log, "--amp: 'fp8'"), "--amp fp8 is refused");
    free(log);
    if (tap_n_failed == 0) run("rm -rf %s", dir);
}

/* trn_net_opts.act_store: where the bf16 executor cannot run, creation says why (no silent
 * fallback to float32 activations); an inference net keeps the walk; a bad value is refused. */
static void test_act_store_errors(void)
{
    struct trn_model *m = tiny_model(7);
    char err[256];
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.act_store = TRN_ACT_BF16_NHWC;
    struct trn_net *n = NULL;
    err[0] = '\0';
    int rc = trn_net_create(m, 2, 32, 32, &o, &n, err, sizeof err);
    ok(rc == -EINVAL && !n && strstr(err, "amp bf16"),
       "act_store bf16 with float32 convs: -EINVAL (%s)", err);
    o.amp = KERN_DT_BF16, o.input_grad = true;
    rc = trn_net_create(m, 2, 32, 32, &o, &n, err, sizeof err);
    ok(rc == -EINVAL && !n, "act_store bf16 with an input gradient: -EINVAL (%s)", err);
    o.input_grad = false, o.act_store = 3;
    rc = trn_net_create(m, 2, 32, 32, &o, &n, err, sizeof err);
    ok(rc == -EINVAL && !n, "act_store 3: -EINVAL (%s)", err);
    o.act_store = TRN_ACT_BF16_NHWC, o.train = false;
    rc = trn_net_create(m, 2, 32, 32, &o, &n, err, sizeof err);
    ok(rc == 0 && n && !strcmp(trn_net_engine(n), "reference"),
       "an inference net with act_store bf16: the walk runs it (%s)", n ? trn_net_engine(n) : err);
    trn_net_destroy(n);
    n = NULL;
    o.train = true;
    rc = trn_net_create(m, 2, 32, 32, &o, &n, err, sizeof err);
    ok(rc == 0 && n && !strcmp(trn_net_engine(n), "reference bf16 NHWC"),
       "a training net with act_store bf16 NHWC and amp bf16: %s", n ? trn_net_engine(n) : err);
    trn_net_destroy(n);
    trn_model_destroy(m);
}

/*
 * The bf16 executor's raw head (trn_net_raw_head; kern_yolo_loss.raw16): two training nets of
 * one model, NHWC and NCHW, one giving the loss its head widened and permuted (detect16), the
 * other its Detect convs' bf16 outputs in place (the loss writes their gradients into the net's
 * own buffers): two steps each, the same loss bits, gradient arena and running statistics, byte
 * for byte. The backward refuses other buffers; off gives the usual head back.
 */
static void test_x16_raw_head(enum trn_act_store act, const char *an)
{
    struct trn_model *m[2] = { tiny_model(9), tiny_model(9) };
    char err[256];
    enum { B = 2, H = 64, W = 64, NT = 12 };
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.amp = KERN_DT_BF16;
    o.act_store = act;
    struct trn_net *n[2] = { NULL, NULL };
    for (int k = 0; k < 2; k++)
        if (trn_net_create(m[k], B, H, W, &o, &n[k], err, sizeof err) < 0) {
            printf("Bail out! %s\n", err);
            exit(99);
        }
    const int head = trn_net_raw_head(n[1], true);
    ok(head == (act == TRN_ACT_BF16_NHWC ? TRN_LOSS_HEAD_BF16_NHWC : TRN_LOSS_HEAD_BF16_NCHW),
       "%s: raw head on (%#x)", an, head);
    const struct trn_model_info *I = trn_model_info(m[0]);
    struct trn_hyp hyp;
    trn_hyp_default(&hyp);
    struct trn_loss_cfg lc[2];
    struct trn_loss *L[2] = { NULL, NULL };
    for (int k = 0; k < 2; k++) {
        if (trn_loss_cfg_from_model(m[k], &hyp, B, W, 0.0f, NT, &lc[k]) < 0 ||
            trn_loss_cfg_set_grid(&lc[k], m[k], H, W) < 0)
            exit(99);
        lc[k].head = k ? head : 0;
        if (trn_loss_create(&lc[k], &L[k]) < 0) exit(99);
    }
    struct kern_ctx *ctx = NULL;
    if (kern_ctx_create(NULL, &ctx) < 0) exit(99);
    float t[6 * NT], *img = malloc((size_t)B * 3 * H * W * sizeof(float));
    float *dp[TRN_MODEL_MAX_LEVELS] = { 0 };
    if (!img) exit(99);
    for (int r = 0; r < NT; r++) {
        t[6 * r] = (float)(r % B);
        t[6 * r + 1] = (float)(r % I->nc);
        t[6 * r + 2] = 0.05f + 0.9f * (float)urand();
        t[6 * r + 3] = 0.05f + 0.9f * (float)urand();
        t[6 * r + 4] = 0.05f + 0.4f * (float)urand();
        t[6 * r + 5] = 0.05f + 0.4f * (float)urand();
    }
    for (size_t i = 0; i < (size_t)B * 3 * H * W; i++)
        img[i] = (float)urand();
    for (int l = 0; l < I->nl; l++)
        if (!(dp[l] = malloc((size_t)trn_net_output_shape(n[0], l, NULL) * sizeof(float))))
            exit(99);
    trn_net_zero_grad(n[0]);
    trn_net_zero_grad(n[1]);
    for (int step = 1; step <= 2; step++) {
        const float *oa[TRN_MODEL_MAX_LEVELS], *ob[TRN_MODEL_MAX_LEVELS];
        float *raw[TRN_MODEL_MAX_LEVELS];
        struct trn_loss_items ia, ib;
        int r[6] = { trn_net_forward(n[0], img, true, oa), trn_net_forward(n[1], img, true, ob) };
        r[2] = trn_net_raw_dhead(n[1], raw);
        r[3] = trn_loss_compute(L[0], ctx, oa, t, NT, dp, &ia);
        r[4] = trn_loss_compute_blk(L[1], ctx, ob, head, t, NT, raw, &ib);
        r[5] = trn_net_backward(n[0], (const float *const *)dp);
        if (step == 2)
            is_int(trn_net_backward(n[1], (const float *const *)dp), -EINVAL,
                   "%s: the raw head's backward refuses other gradient buffers", an);
        const int rb = trn_net_backward(n[1], (const float *const *)raw);
        const size_t ng = I->arena_len[TRN_ARENA_PARAM], nb = I->arena_len[TRN_ARENA_BUFFER];
        ok(!r[0] && !r[1] && r[2] == head && !r[3] && !r[4] && !r[5] && !rb &&
               !memcmp(&ia, &ib, sizeof ia) &&
               !memcmp(trn_net_grad(n[0]), trn_net_grad(n[1]), ng * sizeof(float)) &&
               !memcmp(trn_model_arena(m[0], TRN_ARENA_BUFFER),
                       trn_model_arena(m[1], TRN_ARENA_BUFFER), nb * sizeof(float)),
           "%s step %d: the raw head gives the same loss (%.6f), gradients and running "
           "statistics, bit for bit (rc %d %d %d %d %d %d %d)",
           an, step, (double)ib.total, r[0], r[1], r[2], r[3], r[4], r[5], rb);
    }
    is_int(trn_net_raw_head(n[1], false), 0, "%s: raw head off", an);
    const float *oa[TRN_MODEL_MAX_LEVELS], *ob[TRN_MODEL_MAX_LEVELS];
    float *raw[TRN_MODEL_MAX_LEVELS];
    int same = !trn_net_forward(n[0], img, true, oa) && !trn_net_forward(n[1], img, true, ob) &&
               trn_net_raw_dhead(n[1], raw) == -EINVAL;
    for (int l = 0; same && l < I->nl; l++)
        same = !memcmp(oa[l], ob[l], (size_t)trn_net_output_shape(n[0], l, NULL) * sizeof(float));
    ok(same, "%s: and off, the usual head again, the same bytes", an);
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
        free(dp[l]);
    free(img);
    kern_ctx_destroy(ctx);
    for (int k = 0; k < 2; k++) {
        trn_loss_destroy(L[k]);
        trn_net_destroy(n[k]);
        trn_model_destroy(m[k]);
    }
}

/*
 * THE STEM'S INPUT (net.h): trn_net_s2d_input answers from the model and the options; a bf16 net
 * given its batches as the space-to-depth tensor (the float32 images' cast_f32_lowp_s2d, as the
 * GPU augmentation writes it) gives the float32-fed net's outputs, gradients and running
 * statistics bit for bit over two steps, and a third from its own input slot
 * (trn_net_dev_input, no copy); nets that cannot take it refuse.
 */
static void test_x16_s2d_input(enum trn_act_store act, const char *an)
{
    struct trn_model *m[2] = { tiny_model(5), tiny_model(5) };
    char err[256];
    enum { B = 2, H = 64, W = 64 };
    const int layout = act == TRN_ACT_BF16_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
    const int want = act == TRN_ACT_BF16_NHWC ? KERN_AUG_BF16_S2D_NHWC : KERN_AUG_BF16_S2D_NCHW;
    struct trn_net_opts o;
    trn_net_opts_default(&o);
    o.amp = KERN_DT_BF16;
    o.act_store = act;
    is_int(trn_net_s2d_input(m[0], H, W, &o), want, "%s: trn_net_s2d_input gives its layout", an);
    struct trn_net_opts bad = o;
    bad.amp = KERN_DT_F32;
    int no = trn_net_s2d_input(m[0], H, W, &bad) == -ENOTSUP;
    bad = o, bad.act_store = TRN_ACT_F32;
    no &= trn_net_s2d_input(m[0], H, W, &bad) == -ENOTSUP;
    bad = o, bad.input_grad = true;
    no &= trn_net_s2d_input(m[0], H, W, &bad) == -ENOTSUP;
    bad = o, bad.train = false;
    no &= trn_net_s2d_input(m[0], H, W, &bad) == -ENOTSUP;
    no &= trn_net_s2d_input(m[0], H, W - 1, &o) == -ENOTSUP;
    ok(no,
       "%s: -ENOTSUP for float32 convs or activations, an input gradient, an inference "
       "net, an odd width",
       an);
    struct trn_net *n[2] = { NULL, NULL };
    for (int k = 0; k < 2; k++)
        if (trn_net_create(m[k], B, H, W, &o, &n[k], err, sizeof err) < 0) {
            printf("Bail out! %s\n", err);
            exit(99);
        }
    void *const f32_slot = trn_net_dev_input(n[1]);
    is_int(trn_net_set_s2d_input(n[1], true), 0, "%s: space-to-depth input on", an);
    void *const slot = trn_net_dev_input(n[1]);
    ok(slot && slot != f32_slot, "%s: the input slot is the stem's", an);
    const struct trn_model_info *I = trn_model_info(m[0]);
    const size_t nx = (size_t)B * 3 * H * W, ny = (size_t)B * kern_aug_image_bytes(want, H, W) / 2;
    float *img = malloc(nx * sizeof *img), *dp[TRN_MODEL_MAX_LEVELS] = { 0 };
    uint16_t *s2d = malloc(ny * sizeof *s2d);
    struct kern_ctx *ctx = NULL;
    if (!img || !s2d || kern_ctx_create(NULL, &ctx) < 0) exit(99);
    for (size_t i = 0; i < nx; i++)
        img[i] = (float)(int)(urand() * 256) / 255.0f;
    const struct kern_s2d sd = { B, 3, H, W, KERN_AUG_S2D_C, layout };
    if (kern_ref_cast_f32_lowp_s2d(ctx, &sd, KERN_DT_BF16, s2d, img) < 0) exit(99);
    for (int l = 0; l < I->nl; l++) {
        const long len = trn_net_output_shape(n[0], l, NULL);
        if (!(dp[l] = malloc((size_t)len * sizeof(float)))) exit(99);
        for (long i = 0; i < len; i++)
            dp[l][i] = (float)(urand() - 0.5) * 1e-2f;
    }
    trn_net_zero_grad(n[0]);
    trn_net_zero_grad(n[1]);
    const size_t ng = I->arena_len[TRN_ARENA_PARAM], nb = I->arena_len[TRN_ARENA_BUFFER];
    for (int step = 1; step <= 3; step++) {
        const float *oa[TRN_MODEL_MAX_LEVELS], *ob[TRN_MODEL_MAX_LEVELS];
        int rb;
        const int ra = trn_net_forward(n[0], img, true, oa);
        if (step < 3) {
            rb = trn_net_forward(n[1], (const float *)(const void *)s2d, true, ob);
        } else { /* the batch already in the slot: read where it is */
            memcpy(slot, s2d, ny * sizeof *s2d);
            rb = trn_net_forward_dev(n[1], slot, true, true, ob);
        }
        int same = !ra && !rb;
        for (int l = 0; same && l < I->nl; l++)
            same =
                !memcmp(oa[l], ob[l], (size_t)trn_net_output_shape(n[0], l, NULL) * sizeof(float));
        same &= !trn_net_backward(n[0], (const float *const *)dp) &&
                !trn_net_backward(n[1], (const float *const *)dp) &&
                !memcmp(trn_net_grad(n[0]), trn_net_grad(n[1]), ng * sizeof(float)) &&
                !memcmp(trn_model_arena(m[0], TRN_ARENA_BUFFER),
                        trn_model_arena(m[1], TRN_ARENA_BUFFER), nb * sizeof(float));
        ok(same,
           "%s step %d: the space-to-depth batch%s gives the float32 batch's outputs, "
           "gradients and running statistics bit for bit (rc %d %d)",
           an, step, step == 3 ? " in the net's own slot" : "", ra, rb);
    }
    /* a changed pixel changes the result: the slot is what the net reads */
    const float *oa[TRN_MODEL_MAX_LEVELS], *ob[TRN_MODEL_MAX_LEVELS];
    ((uint16_t *)slot)[layout == KERN_LAYOUT_NHWC ? 17 : 5] ^= 0x0100;
    int differ =
        !trn_net_forward(n[0], img, true, oa) && !trn_net_forward_dev(n[1], slot, true, true, ob);
    int any = 0;
    for (int l = 0; differ && l < I->nl; l++)
        any |= memcmp(oa[l], ob[l], (size_t)trn_net_output_shape(n[0], l, NULL) * sizeof(float));
    ok(differ && any, "%s: a bit flipped in the slot changes the outputs", an);
    is_int(trn_net_set_s2d_input(n[1], false), 0, "%s: off", an);
    ok(trn_net_dev_input(n[1]) == f32_slot, "%s: and the slot is the float32 one again", an);
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
        free(dp[l]);
    free(img), free(s2d);
    kern_ctx_destroy(ctx);
    for (int k = 0; k < 2; k++) {
        trn_net_destroy(n[k]);
        trn_model_destroy(m[k]);
    }
    if (act != TRN_ACT_BF16_NHWC) return;
    /* the float32-activation walk has no such stem */
    struct trn_model *wm = tiny_model(5);
    struct trn_net *wn = NULL;
    o.act_store = TRN_ACT_F32;
    if (trn_net_create(wm, B, H, W, &o, &wn, err, sizeof err) < 0) exit(99);
    ok(trn_net_set_s2d_input(wn, true) == -ENOTSUP && trn_net_set_s2d_input(NULL, true) == -EINVAL,
       "the walk refuses the space-to-depth input (-ENOTSUP), NULL is -EINVAL");
    trn_net_destroy(wn);
    trn_model_destroy(wm);
}

int main(int argc, char **argv)
{
    if (argc == 5) { /* program mode: YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_TEST_DIR */
        train_exe = argv[1];
        test_scaler(argv[2], argv[3], argv[4]);
        return tap_done();
    }
    if (load_refs(TRN_TEST_AMP_DIR "/amp_net_bf16.bin")) {
        printf("Bail out! cannot read %s\n", TRN_TEST_AMP_DIR "/amp_net_bf16.bin");
        return 99;
    }
    test_op_by_op(KERN_DT_BF16, "bf16");
    test_op_by_op(KERN_DT_F16, "fp16");
    test_torch();
    test_tiny();
    test_act_store_errors();
    test_x16_raw_head(TRN_ACT_BF16_NHWC, "bf16 NHWC");
    test_x16_raw_head(TRN_ACT_BF16_NCHW, "bf16 NCHW");
    test_x16_s2d_input(TRN_ACT_BF16_NHWC, "bf16 NHWC");
    test_x16_s2d_input(TRN_ACT_BF16_NCHW, "bf16 NCHW");
    for (int i = 0; i < n_recs; i++)
        free(recs[i].v);
    return tap_done();
}
