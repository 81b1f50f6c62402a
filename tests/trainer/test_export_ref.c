/*
 * The C side of test_export.py (not a test by itself): our weights, input and forward pass,
 * for the Python checks of the exported ONNX graph and state dict to compare against.
 *
 *   test_export_ref MODELS_DIR OUTDIR [--weights W.pt | --cfg M.yaml] [--image IMG.jpg] H W ...
 *   test_export_ref --nms PRED.bin CONF DETS.bin
 *
 * Model: W (an ultralytics .pt) when given, else M (default MODELS_DIR/yolov5n.yaml) with
 * trn_model_init(seed 0) and every BatchNorm's gamma, beta, running mean and var replaced by
 * seeded values, so that folding BN into the convs changes every weight. Writes
 *   OUTDIR/model.pt        the model as a plain state dict (trn_export_pt, fp32);
 *   OUTDIR/ref_HxW.bin     per size: int32 magic 0x52455846 ("FXER"), H, W, rows, no, 0,
 *                          float32 conf, int32 0; float32 input (1, 3, H, W); output
 *                          (1, rows, no) of trn_net_infer. conf is a threshold that leaves
 *                          about N_CAND candidate boxes (equal to no score), so that NMS has
 *                          overlapping boxes to suppress whatever the weights.
 * --nms: trn_nms_run (best class only, IoU 0.45, max_det 300, conf > CONF) on PRED.bin (int32
 * rows, no, then rows x no float32: one image's decoded predictions), written to DETS.bin as
 * int32 n then n rows of float32 x1 y1 x2 y2 conf cls.
 * Input: IMG letterboxed to H x W (no auto padding) as detect.py prepares it, or without an
 * image a synthetic one (smooth shapes plus seeded noise). Exit 0, or 99 on any failure (message on
 * stderr).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "export.h"
#include "image.h"
#include "model.h"
#include "net.h"
#include "nms.h"
#include "weights.h"
#include "errors.h"

#define MAGIC  0x52455846
#define N_CAND 150

static int die(const char *what, const char *detail)
{
    fprintf(stderr, "test_export_ref: %s: %s\n", what, detail);
    return 99;
}

/* Seeded BN statistics (xorshift), positive variances and gammas. */
static void perturb_bn(struct trn_model *m)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    float *P = trn_model_arena(m, TRN_ARENA_PARAM), *B = trn_model_arena(m, TRN_ARENA_BUFFER);
    const struct trn_model_info *I = trn_model_info(m);
    for (int i = 0; i < I->n_convs; i++) {
        const struct trn_conv *c = trn_model_conv(m, i);
        if (!c->bn) continue;
        float *gam = P + trn_model_tensor(m, c->bn_weight)->offset;
        float *beta = P + trn_model_tensor(m, c->bn_bias)->offset;
        float *mean = B + trn_model_tensor(m, c->bn_mean)->offset;
        float *var = B + trn_model_tensor(m, c->bn_var)->offset;
        for (int o = 0; o < c->c2; o++) {
            float u[4];
            for (int k = 0; k < 4; k++) {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                u[k] = (float)(s >> 40) / (float)(1u << 24);
            }
            gam[o] = 0.6f + 0.8f * u[0];
            beta[o] = 0.4f * u[1] - 0.2f;
            mean[o] = 0.2f * u[2] - 0.1f;
            var[o] = 0.3f + 1.2f * u[3];
        }
    }
}

static int read_all(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    uint8_t *b = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            uint8_t *q = realloc(b, cap);
            if (!q) {
                free(b);
                fclose(f);
                return -ENOMEM;
            }
            b = q;
        }
        const size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *buf = b;
    *len = n;
    return 0;
}

/* The network input (1, 3, h, w) from the image or the synthetic picture. */
static int make_input(const char *image, int h, int w, float *in)
{
    const size_t plane = (size_t)h * (size_t)w;
    if (!image) {
        /* smooth shapes plus seeded noise: no two cells see the same pixels, so no two boxes
         * get near-equal scores that rounding could reorder */
        uint32_t s = 2463534242u;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    s ^= s << 13;
                    s ^= s >> 17;
                    s ^= s << 5;
                    const float smooth =
                        0.5f + 0.3f * sinf(0.05f * (float)(x * (c + 1)) + 0.031f * (float)y) *
                                   cosf(0.023f * (float)(y * (3 - c)));
                    in[(size_t)c * plane + (size_t)y * w + x] =
                        smooth + 0.2f * ((float)(s >> 8) / (float)(1u << 24) - 0.5f);
                }
        return 0;
    }
    uint8_t *file = NULL;
    size_t len = 0;
    int rc = read_all(image, &file, &len);
    if (rc < 0) return rc;
    struct pack_image_decoder *dec = NULL;
    struct pack_image im;
    rc = pack_image_decoder_create(NULL, &dec);
    if (rc == 0) rc = pack_image_decode(dec, file, len, &im);
    free(file);
    uint8_t *lb = NULL;
    if (rc == 0) {
        struct trn_aug_letterbox_opts lo;
        trn_aug_letterbox_opts_default(&lo);
        struct trn_aug_letterbox_plan plan;
        rc = trn_aug_letterbox_plan(im.width, im.height, h, w, &lo, &plan);
        lb = malloc(plane * 3);
        if (rc == 0 && !lb) rc = -ENOMEM;
        if (rc == 0) rc = trn_aug_letterbox(im.pixels, im.width, im.height, &plan, lb, plane * 3);
    }
    if (rc == 0)
        for (size_t p = 0; p < plane; p++)
            for (int c = 0; c < 3; c++)
                in[(size_t)c * plane + p] = (float)lb[3 * p + (size_t)c] / 255.0f;
    free(lb);
    pack_image_decoder_destroy(dec);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* A threshold below the N_CAND largest best-class confidences obj * max(cls) and above the rest. */
static float pick_conf(const float *pred, int rows, int no)
{
    float *c = malloc(sizeof *c * (size_t)rows);
    if (!c) return 0.25f;
    for (int r = 0; r < rows; r++) {
        const float *p = pred + (size_t)r * (size_t)no;
        float best = 0;
        for (int k = 5; k < no; k++)
            if (p[k] * p[4] > best) best = p[k] * p[4];
        c[r] = best;
    }
    qsort(c, (size_t)rows, sizeof *c, cmp_desc);
    /* halfway between two distinct scores, equal to none: "> t" and ">= t" (the ONNX spec's
     * NonMaxSuppression) then keep the same boxes */
    int k = rows > N_CAND ? N_CAND : rows - 1;
    while (k > 0 && k + 1 < rows && c[k] == c[k - 1])
        k++;
    const float t = k > 0 && c[k] < c[k - 1] ? c[k] + (c[k - 1] - c[k]) / 2 : 0.0f;
    free(c);
    return t;
}

static int one_size(struct trn_model *m, const char *dir, const char *image, int h, int w)
{
    const struct trn_model_info *I = trn_model_info(m);
    float *in = malloc(sizeof *in * 3 * (size_t)h * (size_t)w);
    struct trn_net *net = NULL;
    char err[512] = "", path[4096];
    int ret = 99;
    if (!in) goto out;
    int rc = make_input(image, h, w, in);
    if (rc < 0) {
        die(image, strerror(-rc));
        goto out;
    }
    struct trn_net_opts no;
    trn_net_opts_default(&no);
    no.train = false;
    rc = trn_net_create(m, 1, h, w, &no, &net, err, sizeof err);
    if (rc < 0) {
        die("net", err[0] ? err : trn_strerror(rc));
        goto out;
    }
    const float *pred;
    int rows = 0;
    rc = trn_net_infer(net, in, &pred, &rows);
    if (rc < 0) {
        die("infer", trn_strerror(rc));
        goto out;
    }
    const float conf = pick_conf(pred, rows, I->no);
    snprintf(path, sizeof path, "%s/ref_%dx%d.bin", dir, h, w);
    FILE *f = fopen(path, "wb");
    if (!f) {
        die(path, strerror(errno));
        goto out;
    }
    int32_t hdr[8] = { MAGIC, h, w, rows, I->no, 0, 0, 0 };
    memcpy(&hdr[6], &conf, sizeof conf);
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(in, sizeof *in, 3 * (size_t)h * (size_t)w, f);
    fwrite(pred, sizeof *pred, (size_t)rows * (size_t)I->no, f);
    if (fclose(f) != 0) {
        die(path, strerror(errno));
        goto out;
    }
    ret = 0;
out:
    trn_net_destroy(net);
    free(in);
    return ret;
}

/* --nms PRED.bin CONF DETS.bin */
static int nms_mode(const char *in_path, const char *conf_s, const char *out_path)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = read_all(in_path, &buf, &len);
    if (rc < 0) return die(in_path, strerror(-rc));
    int32_t rows = 0, no = 0;
    if (len >= 8) {
        memcpy(&rows, buf, 4);
        memcpy(&no, buf + 4, 4);
    }
    if (len < 8 || rows < 1 || no < 6 || len != 8 + (size_t)rows * (size_t)no * 4) {
        free(buf);
        return die(in_path, "not int32 rows, no + rows x no float32");
    }
    float *pred = malloc((size_t)rows * (size_t)no * sizeof *pred);
    struct trn_det *dets = malloc(sizeof *dets * 300);
    struct trn_nms *nms = NULL;
    int ret = 99;
    if (pred && dets && trn_nms_create(&nms) == 0) {
        memcpy(pred, buf + 8, (size_t)rows * (size_t)no * sizeof *pred);
        struct trn_nms_opts o;
        trn_nms_opts_default(&o);
        o.conf_thres = strtof(conf_s, NULL);
        o.iou_thres = 0.45;
        o.multi_label = 0;
        o.max_det = 300;
        const int nd = trn_nms_run(nms, pred, (size_t)rows, (size_t)no, no - 5, &o, dets, 300);
        FILE *f = nd >= 0 ? fopen(out_path, "wb") : NULL;
        if (f) {
            const int32_t n = nd;
            fwrite(&n, sizeof n, 1, f);
            for (int i = 0; i < nd; i++) {
                const float d[6] = { dets[i].x1, dets[i].y1,   dets[i].x2,
                                     dets[i].y2, dets[i].conf, (float)dets[i].cls };
                fwrite(d, sizeof d, 1, f);
            }
            ret = fclose(f) == 0 ? 0 : die(out_path, strerror(errno));
        } else {
            ret = die(out_path, nd < 0 ? trn_strerror(nd) : strerror(errno));
        }
    }
    trn_nms_destroy(nms);
    free(dets);
    free(pred);
    free(buf);
    return ret;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--nms")) return nms_mode(argv[2], argv[3], argv[4]);
    if (argc < 5) {
        fprintf(stderr, "usage: test_export_ref MODELS_DIR OUTDIR [--weights W] [--image JPG] H W "
                        "[H W ...]\n");
        return 99;
    }
    const char *models = argv[1], *dir = argv[2], *weights = NULL, *image = NULL, *yaml = NULL;
    int i = 3;
    for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (!strcmp(argv[i], "--weights"))
            weights = argv[i + 1];
        else if (!strcmp(argv[i], "--cfg"))
            yaml = argv[i + 1];
        else if (!strcmp(argv[i], "--image"))
            image = argv[i + 1];
        else
            return die(argv[i], "unknown option");
    }
    char cfg[4096], err[768] = "";
    if (yaml)
        snprintf(cfg, sizeof cfg, "%s", yaml);
    else
        snprintf(cfg, sizeof cfg, "%s/yolov5n.yaml", models);
    struct trn_model *m = NULL;
    int rc = trn_weights_load(weights, weights ? NULL : cfg, 0, &m, NULL, NULL, err, sizeof err);
    if (rc < 0) return die(weights ? weights : cfg, err);
    if (!weights) perturb_bn(m);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.pt", dir);
    rc = trn_export_pt(m, false, path, err, sizeof err);
    int ret = rc < 0 ? die("export", err) : 0;
    for (; ret == 0 && i + 1 < argc; i += 2)
        ret = one_size(m, dir, image, atoi(argv[i]), atoi(argv[i + 1]));
    trn_model_destroy(m);
    return ret;
}
