/*
 * The .pt reader (trainer/weights/ptload.h): torch.save files made by tests/trainer/data_pt/
 * make_pt_data.py (values follow formulas recomputed here), hostile archives and pickles, and
 * the official yolov5n.pt from ../shared/weights when present.
 *   test_ptload DATA_DIR SHARED_WEIGHTS_DIR MODELS_DIR [--yolov5n]
 * --yolov5n runs only the yolov5n.pt checks (exit 77 when the file is absent).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "ptload.h"
#include "util.h"
#include "tap.h"
#include "errors.h"

static const char *data_dir, *weights_dir, *models_dir;

static char *path_of(const char *dir, const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

/* A whole file (at most 1 GiB), or NULL. */
static uint8_t *slurp(const char *path, size_t *len)
{
    char *b = NULL, e[256];
    return trn_read_file(path, (size_t)1 << 30, &b, len, e, sizeof e) < 0 ? NULL : (uint8_t *)b;
}

static const struct trn_pt_tensor *find(const struct trn_pt_tensor *sd, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(sd[i].name, name) == 0) return &sd[i];
    return NULL;
}

/* nn.Sequential(Conv2d(3,4,3), BatchNorm2d(4), SiLU()): value i of float tensor k is
 * (i - 5) / 8 + 0.25 k; num_batches_tracked is 7. */
static void test_module(const char *file, const char *which, bool half)
{
    char err[512];
    struct trn_pt *pt = NULL;
    int rc = trn_pt_open(path_of(data_dir, file), &pt, err, sizeof err);
    if (!ok(rc == 0, "%s opens", file)) {
        tap_diag("%s", err);
        return;
    }
    const struct trn_pt_tensor *sd;
    const int n = trn_pt_state_dict(pt, which, &sd, err, sizeof err);
    is_int(n, 7, "%s: 7 state-dict entries", file);
    static const char *const names[] = { "0.weight",
                                         "0.bias",
                                         "1.weight",
                                         "1.bias",
                                         "1.running_mean",
                                         "1.running_var",
                                         "1.num_batches_tracked" };
    bool names_ok = n == 7, values_ok = n == 7, params_ok = n == 7;
    float buf[128];
    for (int k = 0; k < n && k < 7; k++) {
        names_ok &= strcmp(sd[k].name, names[k]) == 0;
        params_ok &= sd[k].parameter == (k < 4);
        if (k == 6) {
            int64_t c = 0;
            values_ok &= trn_pt_tensor_read_i64(pt, &sd[k], &c, 1) == 1 && c == 7 &&
                         sd[k].ndim == 0 && sd[k].dtype == TRN_PT_I64;
            continue;
        }
        values_ok &= sd[k].dtype == (half ? TRN_PT_F16 : TRN_PT_F32);
        const int64_t got = trn_pt_tensor_read_f32(pt, &sd[k], buf, 128);
        values_ok &= got == sd[k].numel;
        for (int64_t i = 0; i < got; i++)
            values_ok &= buf[i] == (float)(i - 5) / 8 + 0.25f * (float)k;
    }
    ok(names_ok, "%s: names in state_dict() order", file);
    ok(params_ok, "%s: parameters vs buffers", file);
    ok(values_ok, "%s: every value exact (%s)", file, half ? "fp16 -> fp32" : "fp32");
    ok(n == 7 && sd[0].ndim == 4 && sd[0].shape[0] == 4 && sd[0].shape[1] == 3 &&
           sd[0].shape[3] == 3 && sd[0].contiguous,
       "%s: conv weight [4, 3, 3, 3]", file);
    trn_pt_close(pt);
}

static void test_state_dict(const char *file)
{
    char err[512];
    struct trn_pt *pt = NULL;
    int rc = trn_pt_open(path_of(data_dir, file), &pt, err, sizeof err);
    if (!ok(rc == 0, "%s opens", file)) {
        tap_diag("%s", err);
        return;
    }
    const struct trn_pt_tensor *sd;
    const int n = trn_pt_state_dict(pt, "", &sd, err, sizeof err);
    is_int(n, 9, "%s: 9 tensors", file);
    float f[16];
    int64_t iv[4];
    const struct trn_pt_tensor *t = find(sd, n, "half");
    bool good = t && t->dtype == TRN_PT_F16 && trn_pt_tensor_read_f32(pt, t, f, 16) == 12;
    for (int i = 0; good && i < 12; i++)
        good = f[i] == (float)i / 4;
    ok(good, "%s: fp16 [3, 4] = arange / 4", file);
    t = find(sd, n, "transposed");
    good = t && !t->contiguous && t->stride[0] == 1 && t->stride[1] == 3 &&
           trn_pt_tensor_read_f32(pt, t, f, 16) == 6;
    /* base = arange(6).view(2, 3); transposed[r][c] = base[c][r] = 3c + r. */
    for (int r = 0; good && r < 3; r++)
        for (int c = 0; good && c < 2; c++)
            good = f[r * 2 + c] == (float)(3 * c + r);
    ok(good, "%s: transposed view (stride 1, 3) read in row-major order", file);
    const struct trn_pt_tensor *sh = find(sd, n, "shared");
    ok(t && sh && strcmp(t->storage_key, sh->storage_key) == 0 &&
           trn_pt_storage(pt, t) == trn_pt_storage(pt, sh),
       "%s: views of one storage share it", file);
    t = find(sd, n, "strided");
    good = t && t->offset == 2 && t->stride[0] == 2 && trn_pt_tensor_read_f32(pt, t, f, 16) == 3;
    good = good && f[0] == 2 && f[1] == 4 && f[2] == 6;
    ok(good, "%s: storage offset 2, stride 2 -> 2, 4, 6", file);
    t = find(sd, n, "long");
    good = t && trn_pt_tensor_read_i64(pt, t, iv, 4) == 3 && iv[0] == -3 && iv[1] == 0 &&
           iv[2] == (INT64_C(1) << 40);
    ok(good, "%s: int64 values", file);
    ok(t && trn_pt_tensor_read_f32(pt, t, f, 2) == -EINVAL, "%s: too small a buffer refused", file);
    t = find(sd, n, "special");
    good = t && trn_pt_tensor_read_f32(pt, t, f, 16) == 6 && isinf(f[0]) && f[0] > 0 &&
           isinf(f[1]) && f[1] < 0 && f[2] == ldexpf(1, -24) && f[3] == 0 && signbit(f[3]) &&
           f[4] == 65504 && f[5] == ldexpf(1, -14);
    ok(good, "%s: fp16 inf, -inf, subnormal, -0, max, min normal exact", file);
    t = find(sd, n, "bf16");
    good = t && t->dtype == TRN_PT_BF16 && trn_pt_tensor_read_f32(pt, t, f, 16) == 3 &&
           f[0] == 1.5f && f[1] == -2.25f && fabsf(f[2] - 3.0e38f) < 1e36f;
    ok(good, "%s: bf16", file);
    t = find(sd, n, "double");
    good = t && trn_pt_tensor_read_f32(pt, t, f, 16) == 2 && f[0] == 0.1f && isinf(f[1]);
    ok(good, "%s: fp64 rounded to float", file);
    t = find(sd, n, "scalar");
    ok(t && t->ndim == 0 && t->numel == 1 && trn_pt_tensor_read_i64(pt, t, iv, 1) == 1 &&
           iv[0] == 5,
       "%s: 0-dim tensor", file);
    trn_pt_close(pt);
}

/* A hostile file: an error naming the file, never a crash. */
static void test_bad(const char *file, int want, const char *what)
{
    char err[512];
    struct trn_pt *pt = NULL;
    int rc = trn_pt_open(path_of(data_dir, file), &pt, err, sizeof err);
    if (rc == 0) {
        const struct trn_pt_tensor *sd;
        rc = trn_pt_state_dict(pt, "", &sd, err, sizeof err);
        if (rc >= 0) rc = 0;
        trn_pt_close(pt);
    }
    ok(rc == want && strncmp(err, file, strlen(file)) == 0, "%s: %s -> %s", file, what,
       trn_strerror(want));
    tap_diag("%s", err);
}

static void test_evil_global(void)
{
    char err[512];
    unlink("/tmp/ptload_pwn");
    struct trn_pt *pt = NULL;
    const int rc = trn_pt_open(path_of(data_dir, "evil_system.pt"), &pt, err, sizeof err);
    ok(rc == 0, "os.system GLOBAL + REDUCE parses into an inert placeholder");
    const char *key = NULL, *desc = NULL;
    ok(rc == 0 && trn_pt_top_key(pt, 0, &key, &desc) == 1 && strcmp(key, "cmd") == 0 &&
           strcmp(desc, "os.system") == 0,
       "the placeholder records the callable (%s)", desc ? desc : "");
    const struct trn_pt_tensor *sd;
    ok(rc == 0 && trn_pt_state_dict(pt, "", &sd, err, sizeof err) == -TRN_PT_ESTRUCT,
       "its state dict is an error (%s)", err);
    struct stat st;
    ok(stat("/tmp/ptload_pwn", &st) != 0, "nothing ran: /tmp/ptload_pwn does not exist");
    trn_pt_close(pt);
}

/* Corrupt a valid archive in memory. */
static void test_mutations(void)
{
    size_t len = 0;
    uint8_t *b = slurp(path_of(data_dir, "state_dict.pt"), &len);
    if (!ok(b != NULL, "state_dict.pt read")) return;
    char err[512];
    struct trn_pt *pt = NULL;
    int rc = trn_pt_open_mem(b, len, "mem.pt", &pt, err, sizeof err);
    ok(rc == 0, "open_mem of the intact bytes");
    trn_pt_close(pt);
    /* Every truncation is an error; most lose the end-of-directory record. */
    bool all_err = true;
    for (size_t cut = 0; cut < len; cut += 97) {
        pt = NULL;
        rc = trn_pt_open_mem(b, cut, "cut.pt", &pt, err, sizeof err);
        if (rc == 0) all_err = false;
        trn_pt_close(pt);
    }
    ok(all_err, "every truncated copy is refused");
    rc = trn_pt_open_mem(b, len - 10, "cut.pt", &pt, err, sizeof err);
    ok(rc == -TRN_PT_EZIP && strncmp(err, "cut.pt: ", 8) == 0, "truncated zip: %s", err);
    /* Flip a byte inside data.pkl (the first entry's data, after its local header). */
    uint8_t *c = malloc(len);
    memcpy(c, b, len);
    const size_t at = 30 + (size_t)(c[26] | c[27] << 8) + (size_t)(c[28] | c[29] << 8) + 5;
    c[at] ^= 0x40;
    rc = trn_pt_open_mem(c, len, "crc.pt", &pt, err, sizeof err);
    ok(rc == -TRN_PT_ECRC && strstr(err, "data.pkl"), "changed pickle byte: %s", err);
    free(c);
    free(b);
}

static void test_yolov5n(void)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/yolov5n.pt", weights_dir);
    if (access(path, R_OK) != 0) {
        char why[1100];
        snprintf(why, sizeof why, "%s not present", path);
        tap_skip_all(why);
    }
    struct trn_pt *pt = NULL;
    int rc = trn_pt_open(path, &pt, err, sizeof err);
    if (!ok(rc == 0, "yolov5n.pt opens")) {
        tap_diag("%s", err);
        return;
    }
    ok(trn_pt_default_key(pt) && strcmp(trn_pt_default_key(pt), "model") == 0,
       "released checkpoint: ema is None, the default is 'model'");
    const struct trn_pt_tensor *sd;
    ok(trn_pt_state_dict(pt, "ema", &sd, err, sizeof err) == -TRN_PT_ESTRUCT,
       "asking for ema says it is None (%s)", err);
    const int n = trn_pt_state_dict(pt, NULL, &sd, err, sizeof err);
    is_int(n, 349, "349 state-dict tensors");
    int64_t params = 0;
    for (int i = 0; i < n; i++)
        params += sd[i].parameter ? sd[i].numel : 0;
    is_int(params, 1872157, "1,872,157 parameters");
    ok(n > 0 && strcmp(sd[0].name, "model.0.conv.weight") == 0 &&
           strcmp(sd[n - 1].name, "model.24.m.2.bias") == 0,
       "first and last names as state_dict() writes them");
    int64_t nc = 0;
    ok(trn_pt_model_attr_int(pt, NULL, "nc", &nc) == 0 && nc == 80, "model.nc = 80");
    /* Spot values: model.0.conv.weight is fp16 [16, 3, 6, 6]; its sums as float64 of the
     * float32 values, computed independently with numpy from the zip entry. */
    const struct trn_pt_tensor *w = find(sd, n, "model.0.conv.weight");
    static float buf[1728];
    double sum = 0, asum = 0;
    bool finite = true;
    if (w && w->dtype == TRN_PT_F16 && trn_pt_tensor_read_f32(pt, w, buf, 1728) == 1728) {
        for (int i = 0; i < 1728; i++) {
            sum += buf[i];
            asum += fabs(buf[i]);
            finite &= isfinite(buf[i]);
        }
    }
    ok(finite && fabs(sum - -2.0980430245399475) < 1e-9 && fabs(asum - 154.8815377354622) < 1e-9,
       "model.0.conv.weight sum %.12f, abs sum %.12f (numpy: -2.098043024540, 154.881537735462)",
       sum, asum);
    /* fp16 -> fp32 exact: converting back gives the stored bits. */
    const uint16_t *raw = trn_pt_storage(pt, w);
    bool exact = raw != NULL;
    for (int i = 0; exact && i < 1728; i++)
        exact = trn_pt_half_to_float(raw[i]) == buf[i];
    ok(exact, "fp16 -> fp32 element by element");

    /* Map onto our yolov5n and copy into its arenas. */
    char ypath[1024];
    snprintf(ypath, sizeof ypath, "%s/yolov5n.yaml", models_dir);
    struct trn_model *m = NULL;
    rc = trn_model_load(ypath, NULL, &m, err, sizeof err);
    if (!ok(rc == 0, "our yolov5n.yaml loads")) {
        tap_diag("%s", err);
        trn_pt_close(pt);
        return;
    }
    struct trn_pt_match mt;
    rc = trn_pt_copy_into_model(pt, NULL, m, &mt, err, sizeof err);
    ok(rc == 0 && mt.n_matched == 349 && mt.n_model == 349 && mt.ckpt_params == 1872157 &&
           mt.model_params == 1872157,
       "every tensor maps onto our model with its shape (%d matched) %s", mt.n_matched, err);
    const struct trn_tensor *mw = trn_model_tensor(m, trn_model_find(m, "model.0.conv.weight"));
    const float *arena = trn_model_arena(m, TRN_ARENA_PARAM);
    ok(mw && memcmp(arena + mw->offset, buf, sizeof buf) == 0, "weights copied into the arena");
    const struct trn_tensor *an = trn_model_tensor(m, trn_model_find(m, "model.24.anchors"));
    const float *barena = trn_model_arena(m, TRN_ARENA_BUFFER);
    ok(an && barena[an->offset] == 1.25f && barena[an->offset + 17] == 10.1875f,
       "anchors in grid units (10/8 = 1.25, 326/32 = 10.1875)");
    const struct trn_tensor *cnt =
        trn_model_tensor(m, trn_model_find(m, "model.0.bn.num_batches_tracked"));
    ok(cnt && ((const int64_t *)trn_model_arena(m, TRN_ARENA_COUNT))[cnt->offset] >= 0,
       "num_batches_tracked copied as int64");
    trn_model_destroy(m);

    /* A model of another shape is a clear mismatch. */
    snprintf(ypath, sizeof ypath, "%s/yolov5s.yaml", models_dir);
    if (trn_model_load(ypath, NULL, &m, err, sizeof err) == 0) {
        rc = trn_pt_match_model(pt, NULL, m, &mt, err, sizeof err);
        ok(rc == -TRN_PT_EMISMATCH && mt.n_shape > 0 && strstr(err, "shape"),
           "yolov5n.pt onto yolov5s: %s", err);
        trn_model_destroy(m);
    }
    /* The stored yaml builds the same model. */
    char y[4096];
    const int ylen = trn_pt_model_yaml(pt, NULL, y, sizeof y);
    rc = ylen > 0 && ylen < (int)sizeof y
             ? trn_model_parse(y, (size_t)ylen, "yolov5n.yaml", NULL, &m, err, sizeof err)
             : -1;
    ok(rc == 0 && trn_model_info(m)->n_params == 1872157,
       "the checkpoint's own yaml builds a 1,872,157-parameter model");
    if (rc == 0) trn_model_destroy(m);
    trn_pt_close(pt);
    ok(trn_pt_load_into_model(path, "ema", NULL, err, sizeof err) == -EINVAL,
       "load_into_model refuses a NULL model");
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: test_ptload DATA_DIR WEIGHTS_DIR MODELS_DIR\n");
        return 99;
    }
    data_dir = argv[1];
    weights_dir = argv[2];
    models_dir = argv[3];
    if (argc > 4 && strcmp(argv[4], "--yolov5n") == 0) {
        test_yolov5n();
        return tap_done();
    }
    test_module("seq_module.pt", "", false);
    test_module("seq_ckpt.pt", "model", true);
    test_module("seq_ckpt.pt", NULL, true);
    test_state_dict("state_dict.pt");
    test_state_dict("state_dict_deflate.pt");
    {
        char err[256];
        struct trn_pt *pt;
        ok(trn_pt_open(path_of(data_dir, "good_tensor.pt"), &pt, err, sizeof err) == 0,
           "hand-made tensor pickle opens");
        const struct trn_pt_tensor *sd;
        float f[4];
        ok(trn_pt_state_dict(pt, "", &sd, err, sizeof err) == 1 && !sd[0].parameter &&
               trn_pt_tensor_read_f32(pt, &sd[0], f, 4) == 4 && f[0] == 1 && f[3] == 4,
           "hand-made tensor (not a parameter) reads 1, 2, 3, 4");
        trn_pt_close(pt);
    }
    test_bad("bad_opcode.pt", -TRN_PT_EUNSUPPORTED, "unknown opcode 0xff");
    test_bad("mark_bomb.pt", -TRN_PT_ELIMIT, "5000 nested MARKs");
    test_bad("huge_string.pt", -TRN_PT_EPICKLE, "4 GiB string length");
    test_bad("deep_dicts.pt", -TRN_PT_ELIMIT, "2000 nested dicts");
    test_bad("missing_storage.pt", -TRN_PT_ESTRUCT, "storage entry missing");
    test_bad("view_overflow.pt", -TRN_PT_EPICKLE, "view past its storage");
    test_bad("no_such_file.pt", -ENOENT, "missing file");
    test_evil_global();
    test_mutations();
    return tap_done();
}
