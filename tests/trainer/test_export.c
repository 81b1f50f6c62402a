/*
 * export (trainer/weights/export.h): the ONNX file parsed back with protobuf-c (graph structure,
 * opset, initializer shapes and values, metadata) for each option, the state dict read back by our
 * .pt reader (names, dtypes, bytes, zip layout), and the errors.
 *
 *   test_export MODELS_DIR SHARED_WEIGHTS_DIR
 *
 * The model is ../shared/weights/yolov5n.pt when present, else yolov5n.yaml with
 * trn_model_init(0) and seeded BatchNorm statistics (so folding changes every weight).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "export.h"
#include "ffyolo_config.h"
#include "model.h"
#include "onnx.pb-c.h"
#include "ptload.h"
#include "tap.h"
#include "weights.h"
#include "errors.h"

static void perturb_bn(struct trn_model *m)
{
    uint32_t s = 12345;
    float *P = trn_model_arena(m, TRN_ARENA_PARAM), *B = trn_model_arena(m, TRN_ARENA_BUFFER);
    for (int i = 0; i < trn_model_info(m)->n_convs; i++) {
        const struct trn_conv *c = trn_model_conv(m, i);
        if (!c->bn) continue;
        for (int o = 0; o < c->c2; o++) {
            float u[4];
            for (int k = 0; k < 4; k++) {
                s = s * 1664525u + 1013904223u;
                u[k] = (float)(s >> 8) / (float)(1u << 24);
            }
            P[trn_model_tensor(m, c->bn_weight)->offset + (size_t)o] = 0.5f + u[0];
            P[trn_model_tensor(m, c->bn_bias)->offset + (size_t)o] = u[1] - 0.5f;
            B[trn_model_tensor(m, c->bn_mean)->offset + (size_t)o] = 0.2f * u[2] - 0.1f;
            B[trn_model_tensor(m, c->bn_var)->offset + (size_t)o] = 0.25f + u[3];
        }
    }
}

static const Onnx__TensorProto *find_init(const Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_initializer; i++)
        if (!strcmp(g->initializer[i]->name, name)) return g->initializer[i];
    return NULL;
}

static const char *find_prop(const Onnx__ModelProto *mp, const char *key)
{
    for (size_t i = 0; i < mp->n_metadata_props; i++)
        if (!strcmp(mp->metadata_props[i]->key, key)) return mp->metadata_props[i]->value;
    return NULL;
}

static int count_op(const Onnx__GraphProto *g, const char *op)
{
    int n = 0;
    for (size_t i = 0; i < g->n_node; i++)
        n += !strcmp(g->node[i]->op_type, op);
    return n;
}

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *nd, const char *name)
{
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (!strcmp(nd->attribute[i]->name, name)) return nd->attribute[i];
    return NULL;
}

static bool dims_are(const Onnx__TensorProto *t, int n, const int64_t *d)
{
    if (!t || (int)t->n_dims != n) return false;
    for (int i = 0; i < n; i++)
        if (t->dims[i] != d[i]) return false;
    return true;
}

/* Every node input is the graph input, an initializer, or an earlier node's output; every
 * output is produced once; the graph outputs are produced. */
static bool topological(const Onnx__GraphProto *g)
{
    size_t n = 0, cap = g->n_node * 2 + 16;
    const char **seen = malloc(sizeof *seen * cap);
    bool ok = seen != NULL;
    for (size_t i = 0; ok && i < g->n_node; i++) {
        const Onnx__NodeProto *nd = g->node[i];
        for (size_t j = 0; ok && j < nd->n_input; j++) {
            const char *x = nd->input[j];
            bool found = !x[0] || !strcmp(x, g->input[0]->name) || find_init(g, x);
            for (size_t k = 0; !found && k < n; k++)
                found = !strcmp(seen[k], x);
            if (!found) printf("# node %s: input %s not produced before\n", nd->name, x);
            ok = found;
        }
        for (size_t j = 0; ok && j < nd->n_output; j++) {
            for (size_t k = 0; ok && k < n; k++)
                if (!strcmp(seen[k], nd->output[j])) ok = false;
            if (n == cap) ok = false;
            if (ok) seen[n++] = nd->output[j];
        }
    }
    for (size_t o = 0; ok && o < g->n_output; o++) {
        bool found = false;
        for (size_t k = 0; !found && k < n; k++)
            found = !strcmp(seen[k], g->output[o]->name);
        ok = found;
    }
    free(seen);
    return ok;
}

static Onnx__ModelProto *export_parse(const struct trn_model *m, const struct trn_export_opts *o,
                                      size_t *len)
{
    uint8_t *buf = NULL;
    char err[256] = "";
    const int rc = trn_export_onnx_mem(m, o, &buf, len, err, sizeof err);
    if (rc < 0) {
        printf("# export: %s (%s)\n", err, trn_strerror(rc));
        return NULL;
    }
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, *len, buf);
    free(buf);
    return mp;
}

static void test_static(const struct trn_model *m)
{
    const struct trn_model_info *I = trn_model_info(m);
    struct trn_export_opts o;
    trn_export_opts_default(&o);
    const char *names[80];
    char buf[80][16];
    for (int c = 0; c < 80; c++) {
        snprintf(buf[c], sizeof buf[c], "c%d", c);
        names[c] = buf[c];
    }
    names[0] = "person's";
    o.names = names;
    o.n_names = I->nc;
    size_t len = 0;
    Onnx__ModelProto *mp = export_parse(m, &o, &len);
    if (!ok(mp != NULL, "yolov5n fp32 640: exported and parsed back by protobuf-c (%zu bytes)",
            len))
        return;
    const Onnx__GraphProto *g = mp->graph;
    is_int(mp->ir_version, 8, "IR version 8 for opset 17");
    ok(mp->n_opset_import == 1 && !strcmp(mp->opset_import[0]->domain, "") &&
           mp->opset_import[0]->version == 17,
       "one opset import: ai.onnx 17");
    ok(g->n_input == 1 && !strcmp(g->input[0]->name, "images"), "input 'images'");
    const Onnx__TensorShapeProto *is = g->input[0]->type->tensor_type->shape;
    ok(is->n_dim == 4 && is->dim[0]->dim_value == 1 && is->dim[1]->dim_value == 3 &&
           is->dim[2]->dim_value == 640 && is->dim[3]->dim_value == 640 &&
           g->input[0]->type->tensor_type->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
       "images: float [1, 3, 640, 640]");
    const Onnx__TensorShapeProto *os = g->output[0]->type->tensor_type->shape;
    ok(g->n_output == 1 && !strcmp(g->output[0]->name, "output0") && os->n_dim == 3 &&
           os->dim[0]->dim_value == 1 && os->dim[1]->dim_value == 25200 &&
           os->dim[2]->dim_value == 85,
       "output0: [1, 25200, 85]");
    is_int(count_op(g, "Conv"), I->n_convs, "one Conv per conv of the model (%d)", I->n_convs);
    is_int(count_op(g, "BatchNormalization"), 0, "no BatchNormalization: folded");
    is_int(count_op(g, "Sigmoid"), (int)(I->n_convs - I->nl) + I->nl,
           "Sigmoid: one per SiLU and one per Detect level");
    is_int(count_op(g, "MaxPool"), 3, "SPPF: 3 MaxPool");
    is_int(count_op(g, "Resize"), 2, "2 Resize (nearest x2)");
    is_int(count_op(g, "Concat"), 8 + 4 + 1 + I->nl + 1,
           "Concat: 8 C3 + 4 rows + SPPF + one per level + the levels");
    ok(topological(g), "nodes in topological order, every tensor produced once");

    /* every conv's initializers: shapes, and the folded values of each */
    int shapes_ok = 0, attrs_ok = 0;
    double worst = 0;
    const float *P = trn_model_arena_const(m, TRN_ARENA_PARAM);
    const float *B = trn_model_arena_const(m, TRN_ARENA_BUFFER);
    for (int i = 0; i < I->n_convs; i++) {
        const struct trn_conv *c = trn_model_conv(m, i);
        char wn[96], bn[96];
        snprintf(wn, sizeof wn, "%s%s.weight", c->name, c->bn ? ".conv" : "");
        snprintf(bn, sizeof bn, "%s%s.bias", c->name, c->bn ? ".conv" : "");
        const Onnx__TensorProto *w = find_init(g, wn), *b = find_init(g, bn);
        const int64_t wd[4] = { c->c2, c->c1, c->k, c->k }, bd = c->c2;
        if (!dims_are(w, 4, wd) || !dims_are(b, 1, &bd) ||
            w->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
            w->raw_data.len != (size_t)c->c2 * c->c1 * c->k * c->k * 4 ||
            b->raw_data.len != (size_t)bd * 4) {
            printf("# %s / %s: missing or wrong shape\n", wn, bn);
            continue;
        }
        shapes_ok++;
        const float *wf = (const float *)(const void *)w->raw_data.data;
        const float *bf = (const float *)(const void *)b->raw_data.data;
        const size_t per = (size_t)c->c1 * c->k * c->k;
        const float *W = P + trn_model_tensor(m, c->weight)->offset;
        for (int oc = 0; oc < c->c2; oc++) {
            double sc = 1, sh;
            if (c->bn) {
                const double ga = P[trn_model_tensor(m, c->bn_weight)->offset + oc];
                const double va = B[trn_model_tensor(m, c->bn_var)->offset + oc];
                sc = ga / sqrt(va + (double)TRN_MODEL_BN_EPS);
                sh = P[trn_model_tensor(m, c->bn_bias)->offset + oc] -
                     B[trn_model_tensor(m, c->bn_mean)->offset + oc] * sc;
            } else {
                sh = P[trn_model_tensor(m, c->bias)->offset + oc];
            }
            for (size_t j = 0; j < per; j += 7) {
                const double want = W[oc * per + j] * sc;
                const double e = fabs(wf[oc * per + j] - want) / fmax(fabs(want), 1e-6);
                if (e > worst) worst = e;
            }
            const double e = fabs(bf[oc] - sh) / fmax(fabs(sh), 1e-6);
            if (e > worst) worst = e;
        }
        /* the node's attributes */
        for (size_t k = 0; k < g->n_node; k++) {
            const Onnx__NodeProto *nd = g->node[k];
            if (strcmp(nd->op_type, "Conv") || nd->n_input != 3 || strcmp(nd->input[1], wn))
                continue;
            const Onnx__AttributeProto *ks = find_attr(nd, "kernel_shape"),
                                       *st = find_attr(nd, "strides"), *pd = find_attr(nd, "pads");
            if (ks && st && pd && ks->n_ints == 2 && ks->ints[0] == c->k && st->n_ints == 2 &&
                st->ints[0] == c->s && pd->n_ints == 4 && pd->ints[0] == c->p &&
                pd->ints[3] == c->p)
                attrs_ok++;
        }
    }
    is_int(shapes_ok, I->n_convs, "every conv: weight [c2, c1, k, k] and bias [c2], float32");
    ok(worst < 1e-6,
       "folded weights and biases = w g / sqrt(var + 1e-3), beta - mean g / ... "
       "(worst rel %.2e)",
       worst);
    is_int(attrs_ok, I->n_convs, "every Conv: kernel_shape, strides, pads of the model");
    const int64_t ad[3] = { 3, 1, 2 };
    const Onnx__TensorProto *ag = find_init(g, "model.detect.l2.anchor_grid");
    const int t_anch = trn_model_find(m, "model.24.anchors");
    ok(dims_are(ag, 3, ad) && t_anch >= 0 &&
           ((const float *)(const void *)ag->raw_data.data)[0] ==
               B[trn_model_tensor(m, t_anch)->offset + 12] * 32.0f,
       "anchor_grid of P5: [3, 1, 2] = anchors * 32 (pixels)");
    const char *sp = find_prop(mp, "stride"), *np = find_prop(mp, "names"),
               *ip = find_prop(mp, "imgsz"), *vp = find_prop(mp, "ffyolo_version");
    ok(sp && !strcmp(sp, "32"), "metadata stride '32'");
    ok(np && !strncmp(np, "{0: 'person\\'s', 1: 'c1', 2: 'c2'", 32) && np[strlen(np) - 1] == '}' &&
           strstr(np, ", 79: 'c79'}"),
       "metadata names: a Python dict literal, quotes escaped");
    ok(ip && !strcmp(ip, "[640, 640]"), "metadata imgsz '[640, 640]'");
    ok(vp && !strcmp(vp, FFYOLO_VERSION), "metadata ffyolo_version");
    onnx__model_proto__free_unpacked(mp, NULL);

    /* deterministic */
    uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    trn_export_onnx_mem(m, &o, &a, &la, NULL, 0);
    trn_export_onnx_mem(m, &o, &b, &lb, NULL, 0);
    ok(a && b && la == lb && !memcmp(a, b, la), "two exports give the same bytes");
    free(a);
    free(b);
}

static void test_variants(const struct trn_model *m)
{
    struct trn_export_opts o;
    trn_export_opts_default(&o);
    o.img_h = 320;
    o.img_w = 256;
    size_t len = 0;
    Onnx__ModelProto *f32 = export_parse(m, &o, &len);
    o.half = true;
    Onnx__ModelProto *f16 = export_parse(m, &o, &len);
    if (ok(f32 && f16, "fp32 and fp16 exports at 320x256")) {
        ok(f16->graph->input[0]->type->tensor_type->elem_type == 10 &&
               f16->graph->output[0]->type->tensor_type->elem_type == 10,
           "half: fp16 input and output");
        ok(f32->graph->output[0]->type->tensor_type->shape->dim[1]->dim_value ==
               3 * (40 * 32 + 20 * 16 + 10 * 8),
           "320x256: 5040 rows");
        int n16 = 0, same = 0;
        for (size_t i = 0; i < f16->graph->n_initializer; i++) {
            const Onnx__TensorProto *t = f16->graph->initializer[i];
            if (t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16) continue;
            n16++;
            const Onnx__TensorProto *r = find_init(f32->graph, t->name);
            if (!r || r->raw_data.len != 2 * t->raw_data.len) continue;
            bool eq = true;
            const float *rf = (const float *)(const void *)r->raw_data.data;
            const uint16_t *h = (const uint16_t *)(const void *)t->raw_data.data;
            for (size_t j = 0; eq && j < t->raw_data.len / 2; j++)
                eq = h[j] == trn_export_f16_bits(rf[j]);
            same += eq;
        }
        ok(n16 > 120 && same == n16, "half: %d fp16 initializers, each the fp32 one rounded", n16);
    }
    onnx__model_proto__free_unpacked(f32, NULL);
    onnx__model_proto__free_unpacked(f16, NULL);

    trn_export_opts_default(&o);
    o.dynamic = true;
    Onnx__ModelProto *dy = export_parse(m, &o, &len);
    if (ok(dy != NULL, "dynamic export")) {
        const Onnx__TensorShapeProto *s = dy->graph->input[0]->type->tensor_type->shape;
        ok(s->n_dim == 4 && !strcmp(s->dim[0]->dim_param, "batch") && s->dim[1]->dim_value == 3 &&
               !strcmp(s->dim[2]->dim_param, "height") && !strcmp(s->dim[3]->dim_param, "width"),
           "dynamic: images [batch, 3, height, width]");
        const Onnx__TensorShapeProto *so = dy->graph->output[0]->type->tensor_type->shape;
        ok(!strcmp(so->dim[0]->dim_param, "batch") && !strcmp(so->dim[1]->dim_param, "anchors") &&
               so->dim[2]->dim_value == 85,
           "dynamic: output0 [batch, anchors, 85]");
        ok(count_op(dy->graph, "Range") == 3 && count_op(dy->graph, "Shape") == 3 &&
               !find_init(dy->graph, "model.detect.l0.grid"),
           "dynamic: grids computed from the runtime shape (Shape, Range), no grid constants");
        ok(topological(dy->graph), "dynamic: topological");
    }
    onnx__model_proto__free_unpacked(dy, NULL);

    trn_export_opts_default(&o);
    o.nms = true;
    o.half = true;
    Onnx__ModelProto *nm = export_parse(m, &o, &len);
    if (ok(nm != NULL, "nms (fp16) export")) {
        ok(count_op(nm->graph, "NonMaxSuppression") == 1 && nm->graph->n_output == 2 &&
               !strcmp(nm->graph->output[1]->name, "detections") &&
               nm->graph->output[1]->type->tensor_type->shape->dim[1]->dim_value == 7,
           "nms: one NonMaxSuppression, outputs output0 and detections [n, 7]");
        const Onnx__TensorProto *mx = find_init(nm->graph, "nms.max_output_boxes_per_class");
        const Onnx__TensorProto *th = find_init(nm->graph, "nms.iou_threshold");
        ok(mx && th && th->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
               *(const int64_t *)(const void *)mx->raw_data.data == 100 &&
               *(const float *)(const void *)th->raw_data.data == 0.45f,
           "nms: max 100 per class, IoU 0.45 as float32 (fp16 graph)");
        ok(topological(nm->graph), "nms: topological");
        const char *p = find_prop(nm, "nms");
        ok(p && !strcmp(p, "True"), "metadata nms 'True'");
    }
    onnx__model_proto__free_unpacked(nm, NULL);

    trn_export_opts_default(&o);
    o.batch = 4;
    Onnx__ModelProto *b4 = export_parse(m, &o, &len);
    ok(b4 && b4->graph->input[0]->type->tensor_type->shape->dim[0]->dim_value == 4 &&
           b4->graph->output[0]->type->tensor_type->shape->dim[0]->dim_value == 4,
       "batch 4: images and output0 of batch 4");
    onnx__model_proto__free_unpacked(b4, NULL);

    trn_export_opts_default(&o);
    o.opset = 12;
    Onnx__ModelProto *o12 = export_parse(m, &o, &len);
    ok(o12 && o12->ir_version == 7 && o12->opset_import[0]->version == 12,
       "opset 12: IR version 7");
    onnx__model_proto__free_unpacked(o12, NULL);
}

static void test_bad(const struct trn_model *m)
{
    struct trn_export_opts o;
    trn_export_opts_default(&o);
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256] = "";
    o.img_h = 100;
    int rc = trn_export_onnx_mem(m, &o, &buf, &len, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "multiple of the largest stride 32"), "img 100: %s", err);
    trn_export_opts_default(&o);
    o.opset = 11;
    rc = trn_export_onnx_mem(m, &o, &buf, &len, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "opset 11"), "opset 11: %s", err);
    trn_export_opts_default(&o);
    const char *two[2] = { "a", "b" };
    o.names = two;
    o.n_names = 2;
    rc = trn_export_onnx_mem(m, &o, &buf, &len, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "2 class names"), "2 names for 80 classes: %s", err);
    trn_export_opts_default(&o);
    rc = trn_export_onnx(m, &o, "/nonexistent-dir/x.onnx", err, sizeof err);
    ok(rc == -ENOENT && strstr(err, "/nonexistent-dir/x.onnx"), "missing directory: %s", err);
    rc = trn_export_pt(m, false, "/nonexistent-dir/x.pt", err, sizeof err);
    ok(rc == -ENOENT && strstr(err, "/nonexistent-dir/x.pt"), "pt, missing directory: %s", err);
    ok(buf == NULL, "nothing allocated on error");
}

static uint32_t rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
static uint32_t rd32(const uint8_t *p)
{
    return rd16(p) | rd16(p + 2) << 16;
}

/* The zip's local headers in order: names, 64-byte aligned data, CRC-32. */
static void check_zip(const uint8_t *b, size_t len, int n_tensors)
{
    size_t off = 0;
    int k = 0, aligned = 0, crc_ok = 0;
    bool names_ok = true;
    while (off + 30 <= len && rd32(b + off) == 0x04034b50u) {
        const size_t nl = rd16(b + off + 26), el = rd16(b + off + 28), sz = rd32(b + off + 22);
        const size_t data = off + 30 + nl + el;
        if (data + sz > len) break;
        char name[128], want[64];
        snprintf(name, sizeof name, "%.*s", (int)nl, (const char *)b + off + 30);
        if (k == 0)
            snprintf(want, sizeof want, "archive/data.pkl");
        else if (k == 1)
            snprintf(want, sizeof want, "archive/byteorder");
        else if (k < 2 + n_tensors)
            snprintf(want, sizeof want, "archive/data/%d", k - 2);
        else
            snprintf(want, sizeof want, "archive/version");
        if (strcmp(name, want)) names_ok = false;
        aligned += data % 64 == 0;
        crc_ok += (uint32_t)crc32(0, b + data, (uInt)sz) == rd32(b + off + 14);
        off = data + sz;
        k++;
    }
    is_int(k, n_tensors + 3, "zip: data.pkl, byteorder, one entry per tensor, version");
    ok(names_ok, "zip: entry names as torch.save writes them");
    is_int(aligned, k, "zip: every entry's data on a 64-byte boundary");
    is_int(crc_ok, k, "zip: every CRC-32 right");
}

static void test_pt(const struct trn_model *m, const char *models)
{
    const struct trn_model_info *I = trn_model_info(m);
    for (int half = 0; half < 2; half++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        char err[512] = "";
        int rc = trn_export_pt_mem(m, half, &buf, &len, err, sizeof err);
        if (!ok(rc == 0, "%s state dict written (%zu bytes)", half ? "fp16" : "fp32", len))
            continue;
        if (!half) check_zip(buf, len, I->n_tensors);
        struct trn_pt *pt = NULL;
        rc = trn_pt_open_mem(buf, len, "export.pt", &pt, err, sizeof err);
        free(buf);
        if (!ok(rc == 0, "our .pt reader opens it: %s", err)) continue;
        const struct trn_pt_tensor *sd = NULL;
        const int n = trn_pt_state_dict(pt, "", &sd, err, sizeof err);
        is_int(n, I->n_tensors, "state dict: one entry per model tensor");
        int names = 0, types = 0, values = 0;
        float *tmp = malloc(sizeof *tmp * 1000000);
        int64_t cnt = 0;
        for (int i = 0; i < n && i < I->n_tensors && tmp; i++) {
            const struct trn_tensor *t = trn_model_tensor(m, i);
            bool shape = sd[i].ndim == t->ndim;
            for (int d = 0; shape && d < t->ndim; d++)
                shape = sd[i].shape[d] == t->shape[d];
            names += !strcmp(sd[i].name, t->name) && shape && sd[i].contiguous;
            const enum trn_pt_dtype want = t->arena == TRN_ARENA_COUNT ? TRN_PT_I64
                                           : half                      ? TRN_PT_F16
                                                                       : TRN_PT_F32;
            types += sd[i].dtype == want;
            if (t->arena == TRN_ARENA_COUNT) {
                values += trn_pt_tensor_read_i64(pt, &sd[i], &cnt, 1) == 1 &&
                          cnt == ((const int64_t *)trn_model_arena_const(m, t->arena))[t->offset];
                continue;
            }
            if (t->numel > 1000000 || trn_pt_tensor_read_f32(pt, &sd[i], tmp, 1000000) < 0)
                continue;
            const float *src = (const float *)trn_model_arena_const(m, t->arena) + t->offset;
            bool eq = true;
            for (size_t j = 0; eq && j < t->numel; j++)
                eq = tmp[j] == (half ? trn_model_round_fp16(src[j]) : src[j]);
            values += eq;
        }
        free(tmp);
        is_int(names, I->n_tensors, "names, shapes and order are the model's (ultralytics')");
        is_int(types, I->n_tensors, "dtypes: %s, int64 num_batches_tracked",
               half ? "fp16" : "fp32");
        is_int(values, I->n_tensors, "every value read back %s",
               half ? "= fp16(value)" : "exactly");
        if (!half) {
            /* into a fresh model of the same yaml, arenas byte for byte */
            char cfg[4096];
            snprintf(cfg, sizeof cfg, "%s/yolov5n.yaml", models);
            struct trn_model *m2 = NULL;
            struct trn_pt_match mt;
            rc = trn_model_load(cfg, NULL, &m2, err, sizeof err);
            if (rc == 0) rc = trn_pt_copy_into_model(pt, "", m2, &mt, err, sizeof err);
            bool same = rc == 0;
            for (int a = 0; same && a < TRN_ARENA_N; a++)
                same = !memcmp(trn_model_arena_const(m, (enum trn_arena)a),
                               trn_model_arena_const(m2, (enum trn_arena)a),
                               I->arena_len[a] * (a == TRN_ARENA_COUNT ? 8 : 4));
            ok(same, "round trip: copied into a new yolov5n, every arena byte equal %s", err);
            trn_model_destroy(m2);
        }
        trn_pt_close(pt);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_export MODELS_DIR SHARED_WEIGHTS_DIR\n");
        return 99;
    }
    char cfg[4096], pt[4096], err[768] = "";
    snprintf(cfg, sizeof cfg, "%s/yolov5n.yaml", argv[1]);
    snprintf(pt, sizeof pt, "%s/yolov5n.pt", argv[2]);
    const bool have_pt = access(pt, R_OK) == 0;
    struct trn_model *m = NULL;
    const int rc = trn_weights_load(have_pt ? pt : NULL, have_pt ? NULL : cfg, 0, &m, NULL, NULL,
                                    err, sizeof err);
    if (rc < 0) {
        printf("Bail out! %s\n", err);
        return 99;
    }
    if (!have_pt) perturb_bn(m);
    tap_diag("model: %s", have_pt ? pt : "yolov5n.yaml, seed 0, seeded BatchNorm statistics");
    test_static(m);
    test_variants(m);
    test_bad(m);
    test_pt(m, argv[1]);
    trn_model_destroy(m);
    return tap_done();
}
