/*
 * The CPU reference ops against PyTorch: tests/kernels/data/op_refs.bin holds outputs and
 * autograd gradients from torch 1.13 (Debian python3-torch) for tiny shapes, written by
 * tests/kernels/make_op_refs.py (the file format is described there). Covers conv2d (stem k6 s2
 * p2, k3 s2 p1 + bias, 1x1 + bias), BatchNorm2d train/eval (+ running stats) alone and with
 * SiLU, SiLU, MaxPool2d(5, 1, 2) with ties, nearest x2, BCE-with-logits on a class block, CIoU
 * (including identical and touching boxes, where autograd's tie rules decide), Detect
 * permute and decode. Skips (77) if the data file is missing.
 *
 * Tolerances (fp32 against fp32, different summation orders): 2e-5 + 1e-4 |ref| for sums over
 * up to 108 products (conv) and for BN; 1e-6 + 1e-5 for elementwise ops; exact for maxpool
 * values and indices.
 */
#include <errno.h>

#include "kern_testutil.h"

struct ref_tensor {
    char name[64];
    size_t count;
    const float *data; /* into the file buffer (copied to an aligned float array at load) */
};

static struct ref_tensor refs[256];
static int nrefs;
static float *ref_blob;

static void bail(const char *path, const char *why)
{
    printf("Bail out! %s: %s\n", path, why);
    exit(99);
}

static void load(const char *path)
{
    FILE *const f = fopen(path, "rb");
    if (!f) {
        char msg[600];
        snprintf(msg, sizeof(msg), "%s not found (run tests/kernels/make_op_refs.py)", path);
        tap_skip_all(msg);
    }
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < 16 || len > (64l << 20)) bail(path, "bad size");
    unsigned char *const buf = malloc((size_t)len);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) bail(path, "read failed");
    fclose(f);
    if (memcmp(buf, "KOPREF01", 8)) bail(path, "bad magic");
    uint32_t version, count;
    memcpy(&version, buf + 8, 4);
    memcpy(&count, buf + 12, 4);
    if (version != 1) bail(path, "unknown version");
    if (count > sizeof(refs) / sizeof(refs[0])) bail(path, "too many tensors");
    ref_blob = kt_alloc((size_t)len / 4 + 1);
    size_t at = 16, fl = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint16_t nl;
        if (at + 2 > (size_t)len) bail(path, "truncated name length");
        memcpy(&nl, buf + at, 2);
        at += 2;
        if (nl >= sizeof(refs[i].name) || at + nl + 1 > (size_t)len) bail(path, "bad name");
        memcpy(refs[i].name, buf + at, nl);
        refs[i].name[nl] = 0;
        at += nl;
        const unsigned nd = buf[at++];
        if (nd > 8 || at + 4 * nd > (size_t)len) bail(path, "bad ndim");
        size_t cnt = 1;
        for (unsigned k = 0; k < nd; k++) {
            uint32_t dim;
            memcpy(&dim, buf + at, 4);
            at += 4;
            cnt *= dim;
        }
        if (cnt > ((size_t)len - at) / 4) bail(path, "tensor data truncated");
        memcpy(ref_blob + fl, buf + at, cnt * 4);
        refs[i].count = cnt;
        refs[i].data = ref_blob + fl;
        at += cnt * 4;
        fl += cnt;
    }
    if (at != (size_t)len) bail(path, "trailing bytes");
    nrefs = (int)count;
    free(buf);
}

/* The tensor `name` with exactly `count` elements, copied into a fresh writable buffer. */
static float *get(const char *name, size_t count)
{
    for (int i = 0; i < nrefs; i++) {
        if (strcmp(refs[i].name, name)) continue;
        if (refs[i].count != count) {
            printf("Bail out! %s: %zu values, expected %zu\n", name, refs[i].count, count);
            exit(99);
        }
        float *const p = kt_alloc(count);
        memcpy(p, refs[i].data, count * 4);
        return p;
    }
    printf("Bail out! tensor %s missing from the reference file\n", name);
    exit(99);
}

/* Field `field` of the case `nm` (needs a local char key[96]). */
#define G(field, cnt) (snprintf(key, sizeof(key), "%s.%s", nm, field), get(key, cnt))

static void check_conv(struct kern_ctx *ctx, const char *nm, int n, int ci, int h, int w, int co,
                       int k, int s, int p, int bias)
{
    struct kern_conv2d d;
    int oh, ow;
    size_t ws;
    char key[96], what[128];
    kern_conv2d_init(&d, n, ci, h, w, co, k, s, p);
    kern_conv2d_out_hw(&d, &oh, &ow);
    kern_ref_conv2d_workspace_size(ctx, &d, &ws);
    kern_ctx_reserve(ctx, ws);
    const size_t nx = (size_t)n * ci * h * w, nw = (size_t)co * ci * k * k;
    const size_t ny = (size_t)n * co * oh * ow;
    float *const x = G("x", nx), *const wt = G("w", nw), *const y = G("y", ny),
                 *const r = G("r", ny);
    float *const dx = G("dx", nx), *const dw = G("dw", nw);
    float *const b = bias ? G("b", (size_t)co) : NULL, *const db =
                                                           bias ? G("db", (size_t)co) : NULL;
    float *const oy = kt_alloc(ny), *const odx = kt_alloc(nx), *const odw = kt_alloc(nw);
    float *const odb = kt_alloc((size_t)co);
    kt_poison(oy, ny), kt_poison(odx, nx), kt_poison(odw, nw), kt_poison(odb, (size_t)co);
    kern_ref_conv2d_fwd(ctx, &d, oy, x, wt, b);
    kern_ref_conv2d_bwd_data(ctx, &d, odx, r, wt, 0);
    kern_ref_conv2d_bwd_filter(ctx, &d, odw, r, x, 0);
    snprintf(what, sizeof(what), "%s y vs torch", nm);
    kt_check_close_f(what, oy, y, ny, 2e-5, 1e-4);
    snprintf(what, sizeof(what), "%s dx vs torch", nm);
    kt_check_close_f(what, odx, dx, nx, 2e-5, 1e-4);
    snprintf(what, sizeof(what), "%s dw vs torch", nm);
    kt_check_close_f(what, odw, dw, nw, 2e-5, 1e-4);
    if (bias) {
        kern_ref_conv2d_bwd_bias(ctx, &d, odb, r, 0);
        snprintf(what, sizeof(what), "%s db vs torch", nm);
        kt_check_close_f(what, odb, db, (size_t)co, 2e-5, 1e-4);
    }
    free(x), free(wt), free(y), free(r), free(dx), free(dw), free(b), free(db);
    free(oy), free(odx), free(odw), free(odb);
}

static void check_bn(struct kern_ctx *ctx, const char *nm, int silu)
{
    char key[96], what[128];
    struct kern_bn d;
    kern_bn_init(&d, 3, 4, 25);
    const size_t nx = 300;
    float *const x = G("x", nx), *const g = G("gamma", 4), *const b = G("beta", 4);
    float *const rm = G("rm0", 4), *const rv = G("rv0", 4), *const y = G("y", nx);
    float *const r = G("r", nx), *const trm = G("rm", 4), *const trv = G("rv", 4);
    float *const dx = G("dx", nx), *const dg = G("dgamma", 4), *const db = G("dbeta", 4);
    float *const ye = G("y_eval", nx);
    float *const oy = kt_alloc(nx), *const odx = kt_alloc(nx), sm[4], si[4], odg[4], odb[4];
    kt_poison(oy, nx), kt_poison(odx, nx);
    if (silu)
        kern_ref_bn_silu_fwd_train(ctx, &d, oy, sm, si, rm, rv, x, g, b);
    else
        kern_ref_bn_fwd_train(ctx, &d, oy, sm, si, rm, rv, x, g, b);
    snprintf(what, sizeof(what), "%s train y vs torch", nm);
    kt_check_close_f(what, oy, y, nx, 2e-5, 1e-4);
    snprintf(what, sizeof(what), "%s running_mean vs torch", nm);
    kt_check_close_f(what, rm, trm, 4, 1e-6, 1e-5);
    snprintf(what, sizeof(what), "%s running_var vs torch", nm);
    kt_check_close_f(what, rv, trv, 4, 1e-6, 1e-5);
    if (silu)
        kern_ref_bn_silu_bwd(ctx, &d, odx, odg, odb, r, x, g, b, sm, si, 0);
    else
        kern_ref_bn_bwd(ctx, &d, odx, odg, odb, r, x, g, sm, si, 0);
    snprintf(what, sizeof(what), "%s dx vs torch", nm);
    kt_check_close_f(what, odx, dx, nx, 2e-5, 1e-4);
    snprintf(what, sizeof(what), "%s dgamma vs torch", nm);
    kt_check_close_f(what, odg, dg, 4, 2e-5, 1e-4);
    snprintf(what, sizeof(what), "%s dbeta vs torch", nm);
    kt_check_close_f(what, odb, db, 4, 2e-5, 1e-4);
    kt_poison(oy, nx);
    if (silu)
        kern_ref_bn_silu_fwd_eval(ctx, &d, oy, x, g, b, rm, rv);
    else
        kern_ref_bn_fwd_eval(ctx, &d, oy, x, g, b, rm, rv);
    snprintf(what, sizeof(what), "%s eval y vs torch", nm);
    kt_check_close_f(what, oy, ye, nx, 2e-5, 1e-4);
    free(x), free(g), free(b), free(rm), free(rv), free(y), free(r), free(trm), free(trv);
    free(dx), free(dg), free(db), free(ye), free(oy), free(odx);
}

static void check_rest(struct kern_ctx *ctx)
{
    /* SiLU */
    {
        float *const x = get("silu.x", 200), *const y = get("silu.y", 200);
        float *const r = get("silu.r", 200), *const dx = get("silu.dx", 200);
        float oy[200], odx[200];
        kern_ref_silu_fwd(ctx, oy, x, 200);
        kern_ref_silu_bwd(ctx, odx, r, x, 200, 0);
        kt_check_close_f("silu y vs torch", oy, y, 200, 1e-6, 1e-5);
        kt_check_close_f("silu dx vs torch", odx, dx, 200, 1e-6, 1e-5);
        free(x), free(y), free(r), free(dx);
    }
    /* MaxPool2d(5, 1, 2) with ties */
    {
        const struct kern_pool2d d = { 2, 3, 6, 7, 5, 1, 2, 0, 0 };
        const size_t n = 2 * 3 * 6 * 7;
        float *const x = get("maxpool.x", n), *const y = get("maxpool.y", n);
        float *const idx = get("maxpool.idx", n), *const r = get("maxpool.r", n);
        float *const dx = get("maxpool.dx", n), *const oy = kt_alloc(n), *const odx = kt_alloc(n);
        int32_t *const oi = malloc(n * 4);
        kern_ref_maxpool2d_fwd(ctx, &d, oy, oi, x);
        kern_ref_maxpool2d_bwd(ctx, &d, odx, r, oi, 0);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += (float)oi[i] != idx[i];
        ok(!memcmp(oy, y, n * 4), "maxpool k5 s1 p2 y equals torch");
        ok(bad == 0, "maxpool indices equal torch's on tied inputs (%zu differ)", bad);
        kt_check_close_f("maxpool dx vs torch", odx, dx, n, 1e-6, 1e-5);
        free(x), free(y), free(idx), free(r), free(dx), free(oy), free(odx), free(oi);
    }
    /* nearest x2 */
    {
        const size_t n = 2 * 3 * 4 * 5;
        float *const x = get("upsample.x", n), *const y = get("upsample.y", 4 * n);
        float *const r = get("upsample.r", 4 * n), *const dx = get("upsample.dx", n);
        float *const oy = kt_alloc(4 * n), *const odx = kt_alloc(n);
        kern_ref_upsample2x_fwd(ctx, oy, x, 6, 4, 5);
        kern_ref_upsample2x_bwd(ctx, odx, r, 6, 4, 5, 0);
        ok(!memcmp(oy, y, 16 * n), "upsample y equals torch");
        kt_check_close_f("upsample dx vs torch", odx, dx, n, 1e-6, 1e-5);
        free(x), free(y), free(r), free(dx), free(oy), free(odx);
    }
    /* BCE on the class block (columns 5..84) of (5, 85) rows, dL = 0.5 */
    {
        float *const x = get("bce.x", 425), *const t = get("bce.t", 400);
        float *const loss = get("bce.loss", 1), *const dx = get("bce.dx", 425);
        float ol = NAN, odx[425];
        kern_ref_bce_logits_fwd(ctx, &ol, x + 5, t, 5, 80, 85);
        for (int i = 0; i < 425; i++)
            odx[i] = 0.0f; /* torch's grad is 0 outside the block */
        kern_ref_bce_logits_bwd(ctx, odx + 5, x + 5, t, 5, 80, 85, 0.5f, KERN_ACCUM_DX);
        kt_check_close_f("bce loss vs torch", &ol, loss, 1, 1e-6, 1e-6);
        kt_check_close_f("bce dx vs torch", odx, dx, 425, 1e-8, 1e-5);
        free(x), free(t), free(loss), free(dx);
    }
    /* CIoU, including identical and touching boxes */
    {
        const size_t n = 40;
        float *const b1 = get("ciou.b1", 4 * n), *const b2 = get("ciou.b2", 4 * n);
        float *const c = get("ciou.c", n), *const r = get("ciou.r", n);
        float *const db1 = get("ciou.db1", 4 * n), *const db2 = get("ciou.db2", 4 * n);
        float oc[40], o1[160], o2[160];
        kt_poison(oc, n), kt_poison(o1, 4 * n), kt_poison(o2, 4 * n);
        kern_ref_ciou_fwd(ctx, oc, b1, b2, n);
        kern_ref_ciou_bwd(ctx, o1, o2, r, b1, b2, n, 0);
        kt_check_close_f("ciou vs torch", oc, c, n, 1e-6, 1e-5);
        kt_check_close_f("ciou db1 vs torch autograd (alpha no_grad)", o1, db1, 4 * n, 1e-6, 1e-4);
        kt_check_close_f("ciou db2 vs torch autograd (alpha no_grad)", o2, db2, 4 * n, 1e-6, 1e-4);
        kt_check_close_f("ciou tie cases (identical, touching, shared extent) db1", o1, db1, 12,
                         1e-6, 1e-4);
        free(b1), free(b2), free(c), free(r), free(db1), free(db2);
    }
    /* Detect */
    {
        const struct kern_detect d = { 2, 3, 7, 3, 4, 8.0f };
        const size_t n = 2 * 3 * 7 * 3 * 4;
        float *const raw = get("detect.raw", n), *const p = get("detect.p", n);
        float *const an = get("detect.anchors", 6), *const out = get("detect.out", n);
        float *const op = kt_alloc(n), *const oo = kt_alloc(n);
        kern_ref_detect_reshape_fwd(ctx, &d, op, raw);
        kern_ref_detect_decode(ctx, &d, oo, raw, an);
        ok(!memcmp(op, p, n * 4), "detect permute equals torch");
        kt_check_close_f("detect decode vs torch", oo, out, n, 1e-5, 1e-6);
        free(raw), free(p), free(an), free(out), free(op), free(oo);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("Bail out! usage: %s op_refs.bin\n", argv[0]);
        return 99;
    }
    load(argv[1]);
    tap_diag("%d reference tensors from %s", nrefs, argv[1]);
    struct kern_ctx *const ctx = kt_ctx(0);
    check_conv(ctx, "conv_stem", 2, 3, 12, 10, 4, 6, 2, 2, 0);
    check_conv(ctx, "conv_k3s2", 2, 4, 7, 6, 5, 3, 2, 1, 1);
    check_conv(ctx, "conv_k1", 2, 6, 5, 5, 3, 1, 1, 0, 1);
    check_bn(ctx, "bn", 0);
    check_bn(ctx, "bn_silu", 1);
    check_rest(ctx);
    kern_ctx_destroy(ctx);
    free(ref_blob);
    return tap_done();
}
