/*
 * The ONNX side of export.h. The graph is built as protobuf-c messages (onnx.pb-c.h, generated
 * at build time from trainer/weights/onnx/onnx.proto) whose every string, array and tensor lives in
 * one allocation list freed at the end, then packed by protobuf-c: no protobuf byte is written
 * here.
 *
 * Construction follows the forward pass of trainer/model/net.c row by row (the same conv order
 * inside C3, SPPF and Bottleneck), with each Conv + BatchNorm folded into one Conv with a bias as
 * ultralytics' fuse_conv_and_bn does: w' = w * g / sqrt(var + eps), b' = beta - mean * g /
 * sqrt(var + eps), computed in double and rounded once. The Detect decode works on rank-4
 * tensors: (B, na*no, ny, nx) -> Reshape (B, na, no, ny*nx) -> Transpose (B, na, ny*nx, no), so
 * the grid is one (ny*nx, 2) table: a constant for a fixed size, or computed with integer
 * Range / Div / Mul / Sub from the runtime shape for dynamic axes. The arithmetic order of each
 * decoded value is kern_ref_detect_decode's: (2 s + (g - 0.5)) * stride and (2 s)^2 * anchor,
 * with anchor = anchor_grid_units * stride in float32.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "ffyolo_config.h"
#include "onnx.pb-c.h"
#include "errors.h"
#include "util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "raw_data is written in host order: little-endian hosts only"
#endif

#define FT_FLOAT ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define FT_HALF  ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16
#define FT_INT64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

/* The graph under construction. Errors are sticky: after one, every helper returns NULL and
 * the first code is reported at the end, so the builders read as straight-line code. */
struct gb {
    const struct trn_model *m;
    const struct trn_export_opts *o;
    int ft; /* element type of activations and float constants: FT_FLOAT or FT_HALF */
    void **mem;
    size_t n_mem, cap_mem;
    Onnx__NodeProto **node;
    size_t n_node, cap_node;
    Onnx__TensorProto **init;
    size_t n_init, cap_init;
    int rc;
    char why[256];
};

static int gb_fail(struct gb *g, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int gb_fail(struct gb *g, int rc, const char *fmt, ...)
{
    if (g->rc) return g->rc;
    g->rc = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->why, sizeof g->why, fmt, ap);
    va_end(ap);
    return rc;
}

/* Room for one more element in the builder's array arr (*n used of *cap). */
static bool grow(struct gb *g, void *arr, size_t *n, size_t *cap, size_t elem)
{
    if (trn_grow(arr, cap, *n + 1, elem) == 0) return true;
    gb_fail(g, -ENOMEM, "out of memory");
    return false;
}

/* Zeroed memory owned by the builder; NULL after an error. */
static void *gb_alloc(struct gb *g, size_t bytes)
{
    if (g->rc || !grow(g, &g->mem, &g->n_mem, &g->cap_mem, sizeof *g->mem)) return NULL;
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        gb_fail(g, -ENOMEM, "out of memory");
        return NULL;
    }
    g->mem[g->n_mem++] = p;
    return p;
}

/* A new message initialised from its protobuf-c INIT value. */
static void *gb_msg(struct gb *g, const void *init, size_t size)
{
    void *p = gb_alloc(g, size);
    if (p) memcpy(p, init, size);
    return p;
}
#define NEW(g, T, INIT) ((T *)gb_msg((g), &(T)INIT, sizeof(T)))

static char *gb_str(struct gb *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *gb_str(struct gb *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? gb_alloc(g, (size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* Nodes and attributes                                                                     */

/* Adds a node; its output tensor names are out[0..n_out). Returns the node or NULL. */
static Onnx__NodeProto *gb_node(struct gb *g, const char *op, const char *name, int n_in,
                                const char *const *in, int n_out, const char *const *out)
{
    if (g->rc) return NULL;
    for (int i = 0; i < n_in + n_out; i++)
        if (!(i < n_in ? in[i] : out[i - n_in])) {
            gb_fail(g, -TRN_EXPORT_EMODEL, "%s node %s: a tensor without a producer", op,
                    name ? name : "?");
            return NULL;
        }
    Onnx__NodeProto *nd = NEW(g, Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
    char **ins = gb_alloc(g, sizeof(char *) * (size_t)n_in);
    char **outs = gb_alloc(g, sizeof(char *) * (size_t)n_out);
    if (!nd || !ins || !outs || !grow(g, &g->node, &g->n_node, &g->cap_node, sizeof *g->node))
        return NULL;
    for (int i = 0; i < n_in; i++)
        ins[i] = (char *)in[i];
    for (int i = 0; i < n_out; i++)
        outs[i] = (char *)out[i];
    nd->op_type = (char *)op;
    nd->name = (char *)name;
    nd->n_input = (size_t)n_in;
    nd->input = ins;
    nd->n_output = (size_t)n_out;
    nd->output = outs;
    g->node[g->n_node++] = nd;
    return nd;
}

static Onnx__AttributeProto *gb_attr(struct gb *g, Onnx__NodeProto *nd, const char *name,
                                     Onnx__AttributeProto__AttributeType type)
{
    if (!nd) return NULL;
    Onnx__AttributeProto *a = NEW(g, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
    Onnx__AttributeProto **v = gb_alloc(g, sizeof *v * (nd->n_attribute + 1));
    if (!a || !v) return NULL;
    if (nd->n_attribute) memcpy(v, nd->attribute, sizeof *v * nd->n_attribute);
    v[nd->n_attribute++] = a;
    nd->attribute = v;
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    return a;
}

static void attr_int(struct gb *g, Onnx__NodeProto *nd, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = gb_attr(g, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a) return;
    a->has_i = 1;
    a->i = v;
}

static void attr_str(struct gb *g, Onnx__NodeProto *nd, const char *name, const char *v)
{
    Onnx__AttributeProto *a = gb_attr(g, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (!a) return;
    a->has_s = 1;
    a->s.data = (uint8_t *)v;
    a->s.len = strlen(v);
}

static void attr_ints(struct gb *g, Onnx__NodeProto *nd, const char *name, const int64_t *v,
                      size_t n)
{
    Onnx__AttributeProto *a = gb_attr(g, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *c = gb_alloc(g, sizeof *c * n);
    if (!a || !c) return;
    memcpy(c, v, sizeof *c * n);
    a->n_ints = n;
    a->ints = c;
}

/* One-output nodes, named by their output. */
static const char *op1(struct gb *g, const char *op, const char *out, const char *a)
{
    return gb_node(g, op, out, 1, &a, 1, &out) ? out : NULL;
}

static const char *op2(struct gb *g, const char *op, const char *out, const char *a, const char *b)
{
    const char *in[2] = { a, b };
    return gb_node(g, op, out, 2, in, 1, &out) ? out : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Initializers                                                                             */

/* An initializer of raw little-endian bytes (copied). */
static const char *gb_init(struct gb *g, const char *name, int type, const int64_t *dims, int nd,
                           const void *raw, size_t bytes)
{
    if (g->rc || !name) return NULL;
    Onnx__TensorProto *t = NEW(g, Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT);
    int64_t *d = gb_alloc(g, sizeof *d * (size_t)(nd ? nd : 1));
    uint8_t *data = gb_alloc(g, bytes);
    if (!t || !d || !data || !grow(g, &g->init, &g->n_init, &g->cap_init, sizeof *g->init))
        return NULL;
    if (nd) memcpy(d, dims, sizeof *d * (size_t)nd);
    if (bytes) memcpy(data, raw, bytes);
    t->name = (char *)name;
    t->n_dims = (size_t)nd;
    t->dims = d;
    t->has_data_type = 1;
    t->data_type = type;
    t->has_raw_data = 1;
    t->raw_data.data = data;
    t->raw_data.len = bytes;
    g->init[g->n_init++] = t;
    return name;
}

/* Float values (computed in double) as an initializer of element type `type` (FT_FLOAT or
 * FT_HALF), each rounded once. */
static const char *init_real(struct gb *g, const char *name, int type, const int64_t *dims, int nd,
                             const double *v)
{
    size_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= (size_t)dims[i];
    const size_t es = type == FT_HALF ? 2 : 4;
    uint8_t *raw = malloc(n * es + 1);
    if (!raw) {
        gb_fail(g, -ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const float f = (float)v[i];
        if (type == FT_HALF) {
            const uint16_t h = trn_export_f16_bits(f);
            memcpy(raw + 2 * i, &h, 2);
        } else {
            memcpy(raw + 4 * i, &f, 4);
        }
    }
    const char *r = gb_init(g, name, type, dims, nd, raw, n * es);
    free(raw);
    return r;
}

/* As init_real from float32 values (exact for FT_FLOAT). */
static const char *init_f32(struct gb *g, const char *name, int type, const int64_t *dims, int nd,
                            const float *v)
{
    size_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= (size_t)dims[i];
    double *d = malloc(sizeof *d * (n ? n : 1));
    if (!d) {
        gb_fail(g, -ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        d[i] = v[i];
    const char *r = init_real(g, name, type, dims, nd, d);
    free(d);
    return r;
}

static const char *init_scalar(struct gb *g, const char *name, int type, double v)
{
    return init_real(g, name, type, NULL, 0, &v);
}

static const char *init_i64(struct gb *g, const char *name, const int64_t *v, int n, bool scalar)
{
    const int64_t dim = n;
    return gb_init(g, name, FT_INT64, &dim, scalar ? 0 : 1, v, sizeof *v * (size_t)n);
}

/* ---------------------------------------------------------------------------------------- */
/* Layers                                                                                   */

static const float *param(const struct gb *g, int t)
{
    return (const float *)trn_model_arena_const(g->m, TRN_ARENA_PARAM) +
           trn_model_tensor(g->m, t)->offset;
}

static const float *buffer(const struct gb *g, int t)
{
    return (const float *)trn_model_arena_const(g->m, TRN_ARENA_BUFFER) +
           trn_model_tensor(g->m, t)->offset;
}

/* Conv ci on x: the fused Conv, then SiLU as Sigmoid + Mul (Detect convs: no activation).
 * Returns the output name ("<conv name>" for Conv modules, "<name>.conv" for Detect). */
static const char *conv(struct gb *g, int ci, const char *x)
{
    if (g->rc) return NULL;
    const struct trn_conv *c = trn_model_conv(g->m, ci);
    const size_t per = (size_t)c->c1 * (size_t)c->k * (size_t)c->k;
    double *w = malloc(sizeof *w * per * (size_t)c->c2);
    double *b = malloc(sizeof *b * (size_t)c->c2);
    if (!w || !b) {
        free(w);
        free(b);
        gb_fail(g, -ENOMEM, "out of memory");
        return NULL;
    }
    const float *W = param(g, c->weight);
    for (int o = 0; o < c->c2; o++) {
        double scale = 1.0, shift;
        if (c->bn) {
            const double gam = param(g, c->bn_weight)[o], beta = param(g, c->bn_bias)[o];
            const double mean = buffer(g, c->bn_mean)[o], var = buffer(g, c->bn_var)[o];
            scale = gam / sqrt(var + (double)TRN_MODEL_BN_EPS);
            shift = beta - mean * scale;
        } else {
            shift = param(g, c->bias)[o];
        }
        for (size_t j = 0; j < per; j++)
            w[(size_t)o * per + j] = W[(size_t)o * per + j] * scale;
        b[o] = shift;
    }
    const char *pre = c->bn ? ".conv" : "";
    const int64_t wd[4] = { c->c2, c->c1, c->k, c->k }, bd = c->c2;
    const char *in[3] = { x, init_real(g, gb_str(g, "%s%s.weight", c->name, pre), g->ft, wd, 4, w),
                          init_real(g, gb_str(g, "%s%s.bias", c->name, pre), g->ft, &bd, 1, b) };
    free(w);
    free(b);
    const char *y = gb_str(g, c->bn ? "%s.conv" : "%s", c->name);
    Onnx__NodeProto *nd = gb_node(g, "Conv", y, 3, in, 1, &y);
    const int64_t k[2] = { c->k, c->k }, s[2] = { c->s, c->s }, p[4] = { c->p, c->p, c->p, c->p },
                  dl[2] = { 1, 1 };
    attr_ints(g, nd, "kernel_shape", k, 2);
    attr_ints(g, nd, "strides", s, 2);
    attr_ints(g, nd, "pads", p, 4);
    attr_ints(g, nd, "dilations", dl, 2);
    attr_int(g, nd, "group", 1);
    if (!c->bn) return y;
    const char *sg = op1(g, "Sigmoid", gb_str(g, "%s.sigmoid", c->name), y);
    return op2(g, "Mul", gb_str(g, "%s", c->name), y, sg);
}

/* A bottleneck of convs cv1, cv1 + 1 on x; add: the residual sum (shortcut and c1 == c2). */
static const char *bottleneck(struct gb *g, int cv1, const char *x, bool shortcut)
{
    const struct trn_conv *a = trn_model_conv(g->m, cv1), *b = trn_model_conv(g->m, cv1 + 1);
    const char *y = conv(g, cv1 + 1, conv(g, cv1, x));
    if (!(shortcut && a->c1 == b->c2)) return y;
    /* "model.2.m.0.cv1" -> "model.2.m.0.add" */
    char base[64];
    snprintf(base, sizeof base, "%s", a->name);
    char *dot = strrchr(base, '.');
    if (dot) *dot = '\0';
    return op2(g, "Add", gb_str(g, "%s.add", base), x, y);
}

static const char *concat(struct gb *g, const char *out, int n, const char *const *in, int axis)
{
    Onnx__NodeProto *nd = gb_node(g, "Concat", out, n, in, 1, &out);
    attr_int(g, nd, "axis", axis);
    return nd ? out : NULL;
}

static const char *slice(struct gb *g, const char *out, const char *x, const char *starts,
                         const char *ends, const char *axes)
{
    const char *in[4] = { x, starts, ends, axes };
    return gb_node(g, "Slice", out, 4, in, 1, &out) ? out : NULL;
}

/* Constants the decode and NMS share, created once. */
struct consts {
    const char *two;                                         /* ft scalar 2 */
    const char *i0, *i2, *i4, *i5, *i_end, *ax1, *ax2, *ax3; /* int64 [1] for Slice */
    const char *s0, *s1;                                     /* int64 scalars 0, 1 (Range) */
    const char *s3;                                          /* int64 scalar 3 (Gather nx) */
    const char *rs_flat;                                     /* int64 [2] {-1, 1} */
    const char *half_f32;                                    /* float scalar 0.5 */
};

static void make_consts(struct gb *g, struct consts *k)
{
    const int64_t v[] = { 0, 2, 4, 5, INT64_MAX, 1, 2, 3, -1, 1 };
    memset(k, 0, sizeof *k);
    k->two = init_scalar(g, "const.two", g->ft, 2.0);
    k->i0 = init_i64(g, "const.i0", &v[0], 1, false);
    k->i2 = init_i64(g, "const.i2", &v[1], 1, false);
    k->i4 = init_i64(g, "const.i4", &v[2], 1, false);
    k->i_end = init_i64(g, "const.end", &v[4], 1, false);
    k->ax3 = init_i64(g, "const.axis3", &v[7], 1, false);
    if (g->o->dynamic || g->o->nms) k->rs_flat = init_i64(g, "const.col", &v[8], 2, false);
    if (g->o->nms) {
        k->i5 = init_i64(g, "const.i5", &v[3], 1, false);
        k->ax1 = init_i64(g, "const.axis1", &v[5], 1, false);
        k->ax2 = init_i64(g, "const.axis2", &v[6], 1, false);
    }
    if (g->o->dynamic) {
        k->s0 = init_i64(g, "const.s0", &v[0], 1, true);
        k->s1 = init_i64(g, "const.s1", &v[5], 1, true);
        k->s3 = init_i64(g, "const.s3", &v[7], 1, true);
        k->half_f32 = init_scalar(g, "const.half", FT_FLOAT, 0.5);
    }
}

/* The (ny*nx, 2) grid (gx - 0.5, gy - 0.5) of a level whose raw conv output is `y`. */
static const char *grid(struct gb *g, const struct consts *k, int l, const char *y, int ny, int nx)
{
    const char *p = gb_str(g, "model.detect.l%d.grid", l);
    if (!g->o->dynamic) {
        double *v = malloc(sizeof *v * (size_t)ny * (size_t)nx * 2);
        if (!v) {
            gb_fail(g, -ENOMEM, "out of memory");
            return NULL;
        }
        for (int j = 0; j < ny; j++)
            for (int i = 0; i < nx; i++) {
                v[2 * ((size_t)j * nx + i)] = i - 0.5;
                v[2 * ((size_t)j * nx + i) + 1] = j - 0.5;
            }
        const int64_t d[2] = { (int64_t)ny * nx, 2 };
        const char *r = init_real(g, p, g->ft, d, 2, v);
        free(v);
        return r;
    }
    /* From the runtime shape, in int64 (exact), then float32 (exact up to 2^24 cells). */
    const char *sh = op1(g, "Shape", gb_str(g, "%s.shape", p), y);
    const char *hw = slice(g, gb_str(g, "%s.hw", p), sh, k->i2, k->i4, k->i0);
    Onnx__NodeProto *nd;
    const char *cells = gb_str(g, "%s.cells", p);
    nd = gb_node(g, "ReduceProd", cells, 1, &hw, 1, &cells);
    attr_int(g, nd, "keepdims", 0);
    const char *nx_s = gb_str(g, "%s.nx", p);
    const char *gin[2] = { sh, k->s3 };
    nd = gb_node(g, "Gather", nx_s, 2, gin, 1, &nx_s);
    attr_int(g, nd, "axis", 0);
    const char *idx = gb_str(g, "%s.idx", p);
    const char *rin[3] = { k->s0, cells, k->s1 };
    gb_node(g, "Range", idx, 3, rin, 1, &idx);
    const char *gy = op2(g, "Div", gb_str(g, "%s.gy", p), idx, nx_s);
    const char *gx =
        op2(g, "Sub", gb_str(g, "%s.gx", p), idx, op2(g, "Mul", gb_str(g, "%s.gynx", p), gy, nx_s));
    const char *cols[2] = { op2(g, "Reshape", gb_str(g, "%s.gxc", p), gx, k->rs_flat),
                            op2(g, "Reshape", gb_str(g, "%s.gyc", p), gy, k->rs_flat) };
    const char *gi = concat(g, gb_str(g, "%s.int", p), 2, cols, 1);
    const char *gf = gb_str(g, "%s.f32", p);
    nd = gb_node(g, "Cast", gf, 1, &gi, 1, &gf);
    attr_int(g, nd, "to", FT_FLOAT);
    const char *r = op2(g, "Sub", g->ft == FT_FLOAT ? p : gb_str(g, "%s.sub", p), gf, k->half_f32);
    if (g->ft == FT_FLOAT) return r;
    nd = gb_node(g, "Cast", p, 1, &r, 1, &p);
    attr_int(g, nd, "to", g->ft);
    return nd ? p : NULL;
}

/* Detect level l on the row output x: conv, decode; returns (B, na*ny*nx, no). */
static const char *detect_level(struct gb *g, const struct consts *k, int ci, int l, const char *x)
{
    const struct trn_model_info *I = trn_model_info(g->m);
    const int stride = I->stride[l];
    const int ny = g->o->img_h / stride, nx = g->o->img_w / stride;
    const char *y = conv(g, ci, x);
    const char *p = gb_str(g, "model.detect.l%d", l);
    const int64_t s4[4] = { 0, I->na, I->no, -1 }, s3[3] = { 0, -1, I->no };
    const char *r4 = op2(g, "Reshape", gb_str(g, "%s.view", p), y,
                         init_i64(g, gb_str(g, "%s.shape4", p), s4, 4, false));
    const char *tr = gb_str(g, "%s.permute", p);
    Onnx__NodeProto *nd = gb_node(g, "Transpose", tr, 1, &r4, 1, &tr);
    const int64_t perm[4] = { 0, 1, 3, 2 };
    attr_ints(g, nd, "perm", perm, 4);
    const char *sg = op1(g, "Sigmoid", gb_str(g, "%s.sigmoid", p), nd ? tr : NULL);
    const char *xy = slice(g, gb_str(g, "%s.xy", p), sg, k->i0, k->i2, k->ax3);
    const char *wh = slice(g, gb_str(g, "%s.wh", p), sg, k->i2, k->i4, k->ax3);
    const char *cf = slice(g, gb_str(g, "%s.conf", p), sg, k->i4, k->i_end, k->ax3);
    /* xy = (2 s + grid) * stride */
    const char *gr = grid(g, k, l, y, ny, nx);
    const char *st = init_scalar(g, gb_str(g, "%s.stride", p), g->ft, stride);
    xy = op2(g, "Mul", gb_str(g, "%s.xy2", p), xy, k->two);
    xy = op2(g, "Add", gb_str(g, "%s.xyg", p), xy, gr);
    xy = op2(g, "Mul", gb_str(g, "%s.xyp", p), xy, st);
    /* wh = (2 s)^2 * anchor_grid, anchor_grid (na, 1, 2) = anchors (grid units) * stride */
    const int t_anch = trn_model_find(g->m, gb_str(g, "model.%d.anchors", I->detect));
    if (t_anch < 0) {
        gb_fail(g, -TRN_EXPORT_EMODEL, "model.%d.anchors: not in the model", I->detect);
        return NULL;
    }
    const float *an = buffer(g, t_anch) + (size_t)l * (size_t)I->na * 2;
    float ag[2 * TRN_MODEL_MAX_ANCHORS];
    for (int a = 0; a < 2 * I->na; a++)
        ag[a] = an[a] * (float)stride;
    const int64_t agd[3] = { I->na, 1, 2 };
    const char *ga = init_f32(g, gb_str(g, "%s.anchor_grid", p), g->ft, agd, 3, ag);
    wh = op2(g, "Mul", gb_str(g, "%s.wh2", p), wh, k->two);
    wh = op2(g, "Mul", gb_str(g, "%s.whsq", p), wh, wh);
    wh = op2(g, "Mul", gb_str(g, "%s.whp", p), wh, ga);
    const char *parts[3] = { xy, wh, cf };
    const char *cat = concat(g, gb_str(g, "%s.cat", p), 3, parts, 3);
    return op2(g, "Reshape", gb_str(g, "%s.out", p), cat,
               init_i64(g, gb_str(g, "%s.shape3", p), s3, 3, false));
}

/* The whole network on "images"; returns the name of the (B, N, no) output. */
static const char *network(struct gb *g, const struct consts *k, const char *images)
{
    const struct trn_model_info *I = trn_model_info(g->m);
    const char **out = gb_alloc(g, sizeof *out * (size_t)I->n_layers);
    if (!out) return NULL;
    const char *levels[TRN_MODEL_MAX_LEVELS] = { 0 };
    for (int i = 0; i < I->n_layers && !g->rc; i++) {
        const struct trn_layer *L = trn_model_layer(g->m, i);
        const int c0 = L->conv0;
        const char *x = L->from[0] < 0 ? images : out[L->from[0]];
        switch (L->type) {
        case TRN_MOD_CONV:
            for (int j = 0; j < L->n; j++)
                x = conv(g, c0 + j, x);
            out[i] = x;
            break;
        case TRN_MOD_BOTTLENECK:
            for (int j = 0; j < L->n; j++)
                x = bottleneck(g, c0 + 2 * j, x, L->shortcut);
            out[i] = x;
            break;
        case TRN_MOD_C3: {
            const char *a = conv(g, c0, x);
            for (int j = 0; j < L->n; j++)
                a = bottleneck(g, c0 + 3 + 2 * j, a, L->shortcut);
            /* the bottleneck branch first (common.py C3.forward) */
            const char *in[2] = { a, conv(g, c0 + 1, x) };
            out[i] = conv(g, c0 + 2, concat(g, gb_str(g, "model.%d.cat", i), 2, in, 1));
            break;
        }
        case TRN_MOD_SPPF: {
            const char *in[4];
            in[0] = conv(g, c0, x);
            for (int j = 0; j < 3; j++) {
                const char *y = gb_str(g, "model.%d.pool%d", i, j + 1);
                Onnx__NodeProto *nd = gb_node(g, "MaxPool", y, 1, &in[j], 1, &y);
                const int64_t kk[2] = { L->k, L->k }, s[2] = { 1, 1 },
                              p[4] = { L->k / 2, L->k / 2, L->k / 2, L->k / 2 };
                attr_ints(g, nd, "kernel_shape", kk, 2);
                attr_ints(g, nd, "strides", s, 2);
                attr_ints(g, nd, "pads", p, 4);
                in[j + 1] = nd ? y : NULL;
            }
            out[i] = conv(g, c0 + 1, concat(g, gb_str(g, "model.%d.cat", i), 4, in, 1));
            break;
        }
        case TRN_MOD_UPSAMPLE: {
            const float sc[4] = { 1, 1, (float)L->scale, (float)L->scale };
            const int64_t d4 = 4, d0 = 0;
            const char *in[3] = {
                x, gb_init(g, gb_str(g, "model.%d.roi", i), FT_FLOAT, &d0, 1, "", 0),
                gb_init(g, gb_str(g, "model.%d.scales", i), FT_FLOAT, &d4, 1, sc, sizeof sc)
            };
            const char *y = gb_str(g, "model.%d", i);
            Onnx__NodeProto *nd = gb_node(g, "Resize", y, 3, in, 1, &y);
            /* floor(dst / scale): nearest as torch's Upsample(mode='nearest') */
            attr_str(g, nd, "mode", "nearest");
            attr_str(g, nd, "coordinate_transformation_mode", "asymmetric");
            attr_str(g, nd, "nearest_mode", "floor");
            out[i] = nd ? y : NULL;
            break;
        }
        case TRN_MOD_CONCAT: {
            const char *in[TRN_MODEL_MAX_FROM];
            for (int j = 0; j < L->n_from; j++)
                in[j] = L->from[j] < 0 ? images : out[L->from[j]];
            out[i] = concat(g, gb_str(g, "model.%d", i), L->n_from, in, 1);
            break;
        }
        case TRN_MOD_DETECT:
            if (L->n_conv != I->nl || I->nl > TRN_MODEL_MAX_LEVELS) {
                gb_fail(g, -TRN_EXPORT_EMODEL, "Detect row %d: %d convs for %d levels", i,
                        L->n_conv, I->nl);
                return NULL;
            }
            for (int l = 0; l < I->nl; l++)
                levels[l] =
                    detect_level(g, k, c0 + l, l, L->from[l] < 0 ? images : out[L->from[l]]);
            out[i] = NULL;
            break;
        default:
            gb_fail(g, -TRN_EXPORT_EMODEL, "row %d: a module the exporter does not know", i);
            return NULL;
        }
    }
    if (g->rc) return NULL;
    return concat(g, "output0", I->nl, levels, 1);
}

/* NonMaxSuppression after the decode; returns the "detections" output name. */
static const char *nms(struct gb *g, const struct consts *k, const char *pred)
{
    Onnx__NodeProto *nd;
    if (g->ft != FT_FLOAT) { /* NonMaxSuppression takes float32 only */
        const char *f = "nms.pred";
        nd = gb_node(g, "Cast", f, 1, &pred, 1, &f);
        attr_int(g, nd, "to", FT_FLOAT);
        pred = nd ? f : NULL;
    }
    const char *xywh = slice(g, "nms.xywh", pred, k->i0, k->i4, k->ax2);
    const char *obj = slice(g, "nms.obj", pred, k->i4, k->i5, k->ax2);
    const char *cls = slice(g, "nms.cls", pred, k->i5, k->i_end, k->ax2);
    /* conf = obj * cls, only the best class of each box competes (multi_label=False) */
    const char *sc = op2(g, "Mul", "nms.conf", cls, obj);
    const char *best = "nms.best";
    nd = gb_node(g, "ReduceMax", best, 1, &sc, 1, &best);
    const int64_t ax2 = 2;
    attr_ints(g, nd, "axes", &ax2, 1);
    attr_int(g, nd, "keepdims", 1);
    const char *is_best = op2(g, "Equal", "nms.is_best", sc, nd ? best : NULL);
    const char *maskf = "nms.mask";
    nd = gb_node(g, "Cast", maskf, 1, &is_best, 1, &maskf);
    attr_int(g, nd, "to", FT_FLOAT);
    sc = op2(g, "Mul", "nms.score", sc, nd ? maskf : NULL);
    const char *sct = "nms.scores";
    nd = gb_node(g, "Transpose", sct, 1, &sc, 1, &sct);
    const int64_t perm[3] = { 0, 2, 1 };
    attr_ints(g, nd, "perm", perm, 3);
    sct = nd ? sct : NULL;
    /* xywh2xyxy as ultralytics: x1 = x - w / 2, x2 = x + w / 2 */
    const char *cxy = slice(g, "nms.cxy", xywh, k->i0, k->i2, k->ax2);
    const char *wh = slice(g, "nms.wh", xywh, k->i2, k->i4, k->ax2);
    const char *two = g->ft == FT_FLOAT ? k->two : init_scalar(g, "const.two_f32", FT_FLOAT, 2);
    const char *hwh = op2(g, "Div", "nms.half_wh", wh, two);
    const char *xyxy[2] = { op2(g, "Sub", "nms.x1y1", cxy, hwh),
                            op2(g, "Add", "nms.x2y2", cxy, hwh) };
    const char *boxes = concat(g, "nms.boxes", 2, xyxy, 2);
    const int64_t max_det = g->o->max_det;
    const float iou = g->o->iou_thres, conf = g->o->conf_thres;
    const int64_t one = 1;
    const char *in[5] = {
        boxes, sct, init_i64(g, "nms.max_output_boxes_per_class", &max_det, 1, false),
        gb_init(g, "nms.iou_threshold", FT_FLOAT, &one, 1, &iou, sizeof iou),
        gb_init(g, "nms.score_threshold", FT_FLOAT, &one, 1, &conf, sizeof conf)
    };
    const char *sel = "nms.selected";
    nd = gb_node(g, "NonMaxSuppression", sel, 5, in, 1, &sel);
    attr_int(g, nd, "center_point_box", 0);
    sel = nd ? sel : NULL;
    /* rows (batch, class, box) -> batch, x1, y1, x2, y2, conf, class */
    const char *bi = slice(g, "nms.batch", sel, k->i0, k->ax1, k->ax1);
    const char *ci = slice(g, "nms.class", sel, k->ax1, k->i2, k->ax1);
    const char *xi = slice(g, "nms.box", sel, k->i2, k->ax3, k->ax1);
    const char *bx[2] = { bi, xi };
    const char *bxi = concat(g, "nms.batch_box", 2, bx, 1);
    const char *gb_ = op2(g, "GatherND", "nms.det_boxes", boxes, bxi);
    const char *gs = op2(g, "GatherND", "nms.det_scores", sct, sel);
    gs = op2(g, "Reshape", "nms.det_conf", gs, k->rs_flat);
    const char *bif = "nms.batch_f", *cif = "nms.class_f";
    nd = gb_node(g, "Cast", bif, 1, &bi, 1, &bif);
    attr_int(g, nd, "to", FT_FLOAT);
    nd = gb_node(g, "Cast", cif, 1, &ci, 1, &cif);
    attr_int(g, nd, "to", FT_FLOAT);
    const char *cols[4] = { bif, gb_, gs, cif };
    const char *det = concat(g, g->ft == FT_FLOAT ? "detections" : "nms.det_f32", 4, cols, 1);
    if (g->ft == FT_FLOAT) return det;
    const char *dh = "detections";
    nd = gb_node(g, "Cast", dh, 1, &det, 1, &dh);
    attr_int(g, nd, "to", g->ft);
    return nd ? dh : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The model                                                                                */

/* A tensor value info; param[i] != NULL makes dim i symbolic. */
static Onnx__ValueInfoProto *value_info(struct gb *g, const char *name, int type, int nd,
                                        const int64_t *dims, const char *const *param)
{
    Onnx__ValueInfoProto *v = NEW(g, Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
    Onnx__TypeProto *t = NEW(g, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
    Onnx__TypeProto__Tensor *tt = NEW(g, Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT);
    Onnx__TensorShapeProto *sh = NEW(g, Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT);
    Onnx__TensorShapeProto__Dimension **dd = gb_alloc(g, sizeof *dd * (size_t)nd);
    if (!v || !t || !tt || !sh || !dd) return NULL;
    for (int i = 0; i < nd; i++) {
        dd[i] =
            NEW(g, Onnx__TensorShapeProto__Dimension, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT);
        if (!dd[i]) return NULL;
        if (param && param[i]) {
            dd[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dd[i]->dim_param = (char *)param[i];
        } else {
            dd[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dd[i]->dim_value = dims[i];
        }
    }
    sh->n_dim = (size_t)nd;
    sh->dim = dd;
    tt->has_elem_type = 1;
    tt->elem_type = type;
    tt->shape = sh;
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->name = (char *)name;
    v->type = t;
    return v;
}

static Onnx__StringStringEntryProto *prop(struct gb *g, const char *key, char *value)
{
    Onnx__StringStringEntryProto *p =
        NEW(g, Onnx__StringStringEntryProto, ONNX__STRING_STRING_ENTRY_PROTO__INIT);
    if (!p || !value) return NULL;
    p->key = (char *)key;
    p->value = value;
    return p;
}

/* Python's repr of a str, enough for ast.literal_eval: single quotes, \\ \' and control bytes
 * escaped (UTF-8 passes through). */
static char *py_names(struct gb *g, const struct trn_export_opts *o, int nc)
{
    size_t cap = 16;
    for (int c = 0; c < nc; c++)
        cap += 24 + 4 * (o->names ? strlen(o->names[c]) : 16);
    char *s = gb_alloc(g, cap);
    if (!s) return NULL;
    size_t n = 0;
    s[n++] = '{';
    for (int c = 0; c < nc; c++) {
        n += (size_t)snprintf(s + n, cap - n, "%s%d: '", c ? ", " : "", c);
        if (!o->names) {
            n += (size_t)snprintf(s + n, cap - n, "class%d", c);
        } else {
            for (const unsigned char *p = (const unsigned char *)o->names[c]; *p; p++) {
                if (*p == '\\' || *p == '\'')
                    n += (size_t)snprintf(s + n, cap - n, "\\%c", *p);
                else if (*p < 0x20 || *p == 0x7f)
                    n += (size_t)snprintf(s + n, cap - n, "\\x%02x", *p);
                else
                    s[n++] = (char)*p;
            }
        }
        s[n++] = '\'';
    }
    s[n++] = '}';
    s[n] = '\0';
    return s;
}

static int ir_version_for(int opset)
{
    return opset >= 15 ? 8 : 7; /* ONNX's versioning table: opsets 12-14 IR 7, 15-17 IR 8 */
}

void trn_export_opts_default(struct trn_export_opts *o)
{
    memset(o, 0, sizeof *o);
    o->img_h = o->img_w = 640;
    o->batch = 1;
    o->conf_thres = 0.25f;
    o->iou_thres = 0.45f;
    o->max_det = 100;
    o->opset = TRN_EXPORT_OPSET_DEFAULT;
}

static int check_opts(const struct trn_model *m, const struct trn_export_opts *o, char *err,
                      size_t cap)
{
    const struct trn_model_info *I = trn_model_info(m);
    int smax = 1;
    for (int l = 0; l < I->nl; l++)
        if (I->stride[l] > smax) smax = I->stride[l];
    const char *why = NULL;
    char buf[160];
    if (o->img_h < 1 || o->img_w < 1 || o->img_h > 16384 || o->img_w > 16384 || o->img_h % smax ||
        o->img_w % smax) {
        snprintf(buf, sizeof buf,
                 "image size %dx%d: each side must be a multiple of the largest "
                 "stride %d (1..16384)",
                 o->img_h, o->img_w, smax);
        why = buf;
    } else if (o->batch < 1 || o->batch > 65536) {
        why = "batch must be in 1..65536";
    } else if (o->opset < TRN_EXPORT_OPSET_MIN || o->opset > TRN_EXPORT_OPSET_MAX) {
        snprintf(buf, sizeof buf, "opset %d: supported are %d..%d", o->opset, TRN_EXPORT_OPSET_MIN,
                 TRN_EXPORT_OPSET_MAX);
        why = buf;
    } else if (o->nms && (!(o->conf_thres >= 0 && o->conf_thres <= 1) ||
                          !(o->iou_thres >= 0 && o->iou_thres <= 1) || o->max_det < 1)) {
        why = "NMS thresholds must be in [0, 1] and max_det >= 1";
    } else if (o->names && o->n_names != I->nc) {
        snprintf(buf, sizeof buf, "%d class names for a model of %d classes", o->n_names, I->nc);
        why = buf;
    } else if (I->nl < 1 || I->ch < 1) {
        why = "the model has no Detect levels";
    }
    if (!why) return 0;
    if (err && cap) snprintf(err, cap, "%s", why);
    return -EINVAL;
}

int trn_export_onnx_mem(const struct trn_model *m, const struct trn_export_opts *o, uint8_t **buf,
                        size_t *len, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!m || !o || !buf || !len) return -EINVAL;
    int rc = check_opts(m, o, err, err_cap);
    if (rc < 0) return rc;
    const struct trn_model_info *I = trn_model_info(m);
    struct gb g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.o = o;
    g.ft = o->half ? FT_HALF : FT_FLOAT;

    struct consts k;
    make_consts(&g, &k);
    const char *out0 = network(&g, &k, "images");
    const char *det = o->nms ? nms(&g, &k, out0) : NULL;

    /* inputs and outputs */
    int64_t rows = 0;
    for (int l = 0; l < I->nl; l++)
        rows += (int64_t)I->na * (o->img_h / I->stride[l]) * (o->img_w / I->stride[l]);
    const int64_t in_d[4] = { o->batch, I->ch, o->img_h, o->img_w };
    const char *in_p[4] = { "batch", NULL, "height", "width" };
    const int64_t out_d[3] = { o->batch, rows, I->no };
    const char *out_p[3] = { "batch", "anchors", NULL };
    const int64_t det_d[2] = { 0, 7 };
    const char *det_p[2] = { "detections", NULL };
    Onnx__ValueInfoProto **gin = gb_alloc(&g, sizeof *gin);
    Onnx__ValueInfoProto **gout = gb_alloc(&g, sizeof *gout * 2);
    if (gin && gout) {
        gin[0] = value_info(&g, "images", g.ft, 4, in_d, o->dynamic ? in_p : NULL);
        gout[0] = value_info(&g, "output0", g.ft, 3, out_d, o->dynamic ? out_p : NULL);
        if (det) gout[1] = value_info(&g, det, g.ft, 2, det_d, det_p);
    }

    Onnx__GraphProto *graph = NEW(&g, Onnx__GraphProto, ONNX__GRAPH_PROTO__INIT);
    Onnx__ModelProto *model = NEW(&g, Onnx__ModelProto, ONNX__MODEL_PROTO__INIT);
    Onnx__OperatorSetIdProto *ops =
        NEW(&g, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT);
    Onnx__OperatorSetIdProto **opsv = gb_alloc(&g, sizeof *opsv);
    enum { N_PROPS = 11 };
    Onnx__StringStringEntryProto **props = gb_alloc(&g, sizeof *props * N_PROPS);
    if (!g.rc && graph && model && ops && opsv && props && out0) {
        int smax = 0;
        for (int l = 0; l < I->nl; l++)
            if (I->stride[l] > smax) smax = I->stride[l];
        const char *tf[2] = { "False", "True" };
        props[0] = prop(&g, "stride", gb_str(&g, "%d", smax));
        props[1] = prop(&g, "names", py_names(&g, o, I->nc));
        props[2] = prop(&g, "imgsz", gb_str(&g, "[%d, %d]", o->img_h, o->img_w));
        props[3] =
            prop(&g, "batch", o->dynamic ? gb_str(&g, "dynamic") : gb_str(&g, "%d", o->batch));
        props[4] = prop(&g, "dynamic", gb_str(&g, "%s", tf[o->dynamic]));
        props[5] = prop(&g, "half", gb_str(&g, "%s", tf[o->half]));
        props[6] = prop(&g, "nms", gb_str(&g, "%s", tf[o->nms]));
        props[7] = prop(&g, "nc", gb_str(&g, "%d", I->nc));
        props[8] = prop(&g, "ffyolo_version", gb_str(&g, "%s", FFYOLO_VERSION));
        props[9] =
            prop(&g, "outputs",
                 o->nms ? gb_str(&g,
                                 "output0 [batch, anchors, %d]: x y w h (pixels) obj "
                                 "cls...; detections [n, 7]: batch x1 y1 x2 y2 conf "
                                 "class (conf > %g, IoU %g, %d per class)",
                                 I->no, (double)o->conf_thres, (double)o->iou_thres, o->max_det)
                        : gb_str(&g,
                                 "output0 [batch, anchors, %d]: x y w h (pixels) obj "
                                 "cls...",
                                 I->no));
        props[10] = prop(&g, "task", gb_str(&g, "detect"));
        graph->name = gb_str(&g, "%s", I->name);
        graph->n_node = g.n_node;
        graph->node = g.node;
        graph->n_initializer = g.n_init;
        graph->initializer = g.init;
        graph->n_input = 1;
        graph->input = gin;
        graph->n_output = det ? 2 : 1;
        graph->output = gout;
        ops->domain = (char *)"";
        ops->has_version = 1;
        ops->version = o->opset;
        opsv[0] = ops;
        model->has_ir_version = 1;
        model->ir_version = ir_version_for(o->opset);
        model->n_opset_import = 1;
        model->opset_import = opsv;
        model->producer_name = (char *)"ffyolo yolo-export";
        model->producer_version = (char *)FFYOLO_VERSION;
        model->has_model_version = 1;
        model->model_version = 1;
        model->doc_string = gb_str(&g, "%s (nc %d, %dx%d%s%s%s) from %s", I->name, I->nc, o->img_h,
                                   o->img_w, o->dynamic ? ", dynamic" : "", o->half ? ", fp16" : "",
                                   o->nms ? ", NMS" : "", o->source ? o->source : "memory");
        model->graph = graph;
        model->n_metadata_props = N_PROPS;
        model->metadata_props = props;
    }
    if (!g.rc && !out0) gb_fail(&g, -TRN_EXPORT_EMODEL, "the graph could not be built");
    if (!g.rc) {
        for (int i = 0; i < N_PROPS; i++)
            if (!props[i]) gb_fail(&g, -ENOMEM, "out of memory");
    }
    if (!g.rc) {
        /* protobuf's hard limit on one message: 2 GiB (external data is not written) */
        const size_t n = protobuf_c_message_get_packed_size(&model->base);
        uint8_t *b = n < (2ull << 30) ? malloc(n ? n : 1) : NULL;
        if (n >= (2ull << 30))
            gb_fail(&g, -EFBIG, "%zu bytes: over protobuf's 2 GiB (external data is not written)",
                    n);
        else if (!b)
            gb_fail(&g, -ENOMEM, "out of memory");
        else if (protobuf_c_message_pack(&model->base, b) != n) {
            free(b);
            gb_fail(&g, -TRN_EXPORT_EPROTOBUF, "protobuf-c packed a different size than planned");
        } else {
            *buf = b;
            *len = n;
        }
    }
    rc = g.rc;
    if (rc < 0 && err && err_cap) snprintf(err, err_cap, "%s", g.why);
    for (size_t i = 0; i < g.n_mem; i++)
        free(g.mem[i]);
    free(g.mem);
    free(g.node);
    free(g.init);
    return rc;
}

int trn_export_onnx(const struct trn_model *m, const struct trn_export_opts *o, const char *path,
                    char *err, size_t err_cap)
{
    if (!path) return -EINVAL;
    uint8_t *buf = NULL;
    size_t len = 0;
    char why[256] = "";
    int rc = trn_export_onnx_mem(m, o, &buf, &len, why, sizeof why);
    if (rc < 0) {
        if (err && err_cap) snprintf(err, err_cap, "%s: %s", path, why[0] ? why : trn_strerror(rc));
        return rc;
    }
    rc = trn_export_write_file(path, buf, len, err, err_cap);
    free(buf);
    return rc;
}
