/*
 * tta: ultralytics' augmented forward and model ensembles (see tta.h for what is reproduced).
 */
#include "tta.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "errors.h"
#include "util.h"

const double trn_tta_scales[TRN_TTA_BRANCHES] = { 1.0, 0.83, 0.67 };
const bool trn_tta_flips[TRN_TTA_BRANCHES] = { false, true, false };

int trn_tta_scaled_size(int h, int w, double r, int gs, int *rh, int *rw, int *ph, int *pw)
{
    if (h < 1 || w < 1 || !(r > 0) || !isfinite(r) || gs < 1 || !rh || !rw || !ph || !pw)
        return -EINVAL;
    if (r == 1.0) {
        *rh = *ph = h;
        *rw = *pw = w;
        return 0;
    }
    /* Python: int(h * ratio) truncates; math.ceil(h * ratio / gs) * gs, all in double */
    const double sh = (double)h * r, sw = (double)w * r;
    const double qh = ceil(sh / gs) * gs, qw = ceil(sw / gs) * gs;
    if (sh < 1 || sw < 1 || qh > INT_MAX || qw > INT_MAX) return -EINVAL;
    *rh = (int)sh;
    *rw = (int)sw;
    *ph = (int)qh;
    *pw = (int)qw;
    return 0;
}

/*
 * PyTorch's linear interpolation indices for one axis (align_corners=False, size given), as its
 * CPU kernel computes them: scale = float32(in) / out; the source index in double (the CPU
 * accumulate type) src = scale * (i + 0.5) - 0.5 clamped at 0; i0 = (int)src,
 * i1 = i0 + (i0 < in - 1); l1 = clamp(src - i0, 0, 1), l0 = 1 - l1, rounded to float32 (measured
 * against torch 2.x: float32 source indices are off by up to 3e-5 at 640 pixels). flip reads the
 * mirrored input index, as resizing x.flip() does.
 */
static void axis_weights(int in, int out, bool flip, int *i0, int *i1, float *l0, float *l1)
{
    const double scale = (double)((float)in / (float)out);
    for (int i = 0; i < out; i++) {
        double src = scale * ((double)i + 0.5) - 0.5;
        if (src < 0) src = 0;
        int a = (int)src;
        if (a > in - 1) a = in - 1;
        const int b = a + (a < in - 1 ? 1 : 0);
        double w1 = src - (double)a;
        w1 = w1 < 0 ? 0 : w1 > 1 ? 1 : w1;
        i0[i] = flip ? in - 1 - a : a;
        i1[i] = flip ? in - 1 - b : b;
        l1[i] = (float)w1;
        l0[i] = (float)(1.0 - w1);
    }
}

/* F.interpolate(bilinear, align_corners=False) of `planes` h x w planes to rh x rw, written at
 * the top-left of ph x pw output planes padded with TRN_TTA_PAD (ph >= rh, pw >= rw). */
static int resize_planes(const float *src, size_t planes, int h, int w, int rh, int rw, int ph,
                         int pw, bool flip_lr, float *dst)
{
    const size_t out_plane = (size_t)ph * (size_t)pw, in_plane = (size_t)h * (size_t)w;
    int *ix = malloc(2 * ((size_t)rw + (size_t)rh) * sizeof *ix);
    float *lx = malloc(2 * ((size_t)rw + (size_t)rh) * sizeof *lx);
    if (!ix || !lx) {
        free(ix);
        free(lx);
        return -ENOMEM;
    }
    int *x0 = ix, *x1 = ix + rw, *y0 = ix + 2 * rw, *y1 = y0 + rh;
    float *wx0 = lx, *wx1 = lx + rw, *wy0 = lx + 2 * rw, *wy1 = wy0 + rh;
    axis_weights(w, rw, flip_lr, x0, x1, wx0, wx1);
    axis_weights(h, rh, false, y0, y1, wy0, wy1);
    for (size_t p = 0; p < planes; p++) {
        const float *s = src + p * in_plane;
        float *d = dst + p * out_plane;
        for (int y = 0; y < ph; y++) {
            float *row = d + (size_t)y * (size_t)pw;
            if (y >= rh) {
                for (int x = 0; x < pw; x++)
                    row[x] = TRN_TTA_PAD;
                continue;
            }
            const float *ra = s + (size_t)y0[y] * (size_t)w, *rb = s + (size_t)y1[y] * (size_t)w;
            const float a0 = wy0[y], a1 = wy1[y];
            for (int x = 0; x < rw; x++) {
                /* the separable order of PyTorch's CPU kernel: along w per input row, then h */
                const float t0 = ra[x0[x]] * wx0[x] + ra[x1[x]] * wx1[x];
                const float t1 = rb[x0[x]] * wx0[x] + rb[x1[x]] * wx1[x];
                row[x] = t0 * a0 + t1 * a1;
            }
            for (int x = rw; x < pw; x++)
                row[x] = TRN_TTA_PAD;
        }
    }
    free(ix);
    free(lx);
    return 0;
}

int trn_tta_interpolate(const float *src, int n, int c, int h, int w, int oh, int ow, float *dst,
                        size_t dst_cap)
{
    if (!src || !dst || n < 1 || c < 1 || h < 1 || w < 1 || oh < 1 || ow < 1) return -EINVAL;
    const size_t planes = (size_t)n * (size_t)c, out_plane = (size_t)oh * (size_t)ow;
    if (out_plane > SIZE_MAX / planes || dst_cap < planes * out_plane) return -EINVAL;
    return resize_planes(src, planes, h, w, oh, ow, oh, ow, false, dst);
}

int trn_tta_scale_img(const float *src, int n, int c, int h, int w, double r, int gs, bool flip_lr,
                      float *dst, size_t dst_cap)
{
    int rh, rw, ph, pw;
    if (!src || !dst || n < 1 || c < 1) return -EINVAL;
    int rc = trn_tta_scaled_size(h, w, r, gs, &rh, &rw, &ph, &pw);
    if (rc < 0) return rc;
    const size_t planes = (size_t)n * (size_t)c;
    const size_t out_plane = (size_t)ph * (size_t)pw, in_plane = (size_t)h * (size_t)w;
    if (out_plane > SIZE_MAX / planes || dst_cap < planes * out_plane) return -EINVAL;
    if (r == 1.0) {
        for (size_t p = 0; p < planes; p++) {
            const float *s = src + p * in_plane;
            float *d = dst + p * out_plane;
            if (!flip_lr) {
                memcpy(d, s, in_plane * sizeof *d);
                continue;
            }
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    d[(size_t)y * (size_t)w + (size_t)x] =
                        s[(size_t)y * (size_t)w + (size_t)(w - 1 - x)];
        }
        return 0;
    }
    return resize_planes(src, planes, h, w, rh, rw, ph, pw, flip_lr, dst);
}

int trn_tta_descale(float *pred, size_t rows, int no, double r, bool flip_lr, int img_w)
{
    if ((!pred && rows) || no < 4 || !(r > 0) || !isfinite(r)) return -EINVAL;
    const float s = (float)r, W = (float)img_w;
    for (size_t i = 0; i < rows; i++) {
        float *p = pred + i * (size_t)no;
        for (int k = 0; k < 4; k++)
            p[k] /= s;
        if (flip_lr) p[0] = W - p[0];
    }
    return 0;
}

int trn_tta_clip_counts(int nl, size_t rows_first, size_t rows_last, size_t *keep_first,
                        size_t *skip_last)
{
    if (nl < 1 || nl > TRN_MODEL_MAX_LEVELS || !keep_first || !skip_last) return -EINVAL;
    size_t g = 0, top = 1;
    for (int i = 0; i < nl; i++) {
        g += top;
        if (i < nl - 1) top *= 4;
    }
    const size_t tail = rows_first / g; /* e = 1: sum(4 ** x for x in range(1)) = 1 */
    *keep_first = tail ? rows_first - tail : 0;
    const size_t head = (rows_last / g) * top; /* 4 ** (nl - 1) */
    *skip_last = head < rows_last ? head : rows_last;
    return 0;
}

void trn_tta_opts_default(struct trn_tta_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_shapes = 1;
    o->device = -1;
    o->cpu_engine = TRN_CPU_ENGINE_AUTO;
}

/* One cached net: model `model` at batch x 3 x h x w. */
struct slot {
    struct trn_net *net;
    int model, h, w;
    uint64_t used; /* tick of the last call that needed it */
};

struct trn_tta {
    struct trn_model *models[TRN_TTA_MAX_MODELS];
    int n_models, batch, nc, no, ch, stride;
    int gs[TRN_TTA_MAX_MODELS]; /* per model: int(max Detect stride), scale_img's grid */
    bool augment;
    int amp;           /* trn_tta_opts.amp */
    bool fixed_params; /* trn_tta_opts.fixed_params */
    int cpu_engine;    /* trn_tta_opts.cpu_engine */
    bool device_path;  /* trn_tta_opts.device_path */
    struct kern_ctx *ctx;
    struct slot *slots;
    int n_slots;
    uint64_t tick;
    float *scaled; /* a branch's scaled input */
    size_t scaled_cap;
    float *out; /* merged rows, (batch, rows, no) */
    size_t out_cap;
};

int trn_tta_create(struct trn_model *const *models, int n_models, int batch,
                   const struct trn_tta_opts *o_in, struct trn_tta **out, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    struct trn_tta_opts o;
    if (o_in)
        o = *o_in;
    else
        trn_tta_opts_default(&o);
    if (!models || !out || n_models < 1 || n_models > TRN_TTA_MAX_MODELS || batch < 1 ||
        o.max_shapes < 1 || o.max_shapes > 64) {
        trn_seterr(err, err_cap, "bad ensemble arguments (%d models, batch %d)", n_models, batch);
        return -EINVAL;
    }
    for (int i = 0; i < n_models; i++)
        if (!models[i]) {
            trn_seterr(err, err_cap, "model %d of the ensemble is missing", i + 1);
            return -EINVAL;
        }
    const struct trn_model_info *i0 = trn_model_info(models[0]);
    for (int i = 1; i < n_models; i++) {
        const struct trn_model_info *mi = trn_model_info(models[i]);
        if (mi->nc != i0->nc || mi->ch != i0->ch) {
            trn_seterr(
                err, err_cap,
                "models have different class counts: model 1 has %d classes (%d channels), model "
                "%d has %d (%d channels); an ensemble needs the same classes",
                i0->nc, i0->ch, i + 1, mi->nc, mi->ch);
            return -EINVAL;
        }
    }
    struct trn_tta *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->n_models = n_models;
    t->batch = batch;
    t->nc = i0->nc;
    t->no = i0->no;
    t->ch = i0->ch;
    t->augment = o.augment;
    t->amp = o.amp;
    t->fixed_params = o.fixed_params;
    t->cpu_engine = o.cpu_engine;
    t->device_path = o.device_path;
    for (int i = 0; i < n_models; i++) {
        t->models[i] = models[i];
        const struct trn_model_info *mi = trn_model_info(models[i]);
        int g = 1;
        for (int l = 0; l < mi->nl; l++)
            if (mi->stride[l] > g) g = mi->stride[l];
        t->gs[i] = g;
        if (g > t->stride) t->stride = g;
    }
    t->n_slots = o.max_shapes * n_models * (o.augment ? TRN_TTA_BRANCHES : 1);
    t->slots = calloc((size_t)t->n_slots, sizeof *t->slots);
    if (!t->slots) goto oom;
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.threads = o.threads;
    if (o.device >= 0) {
        ko.backend = KERN_BACKEND_CUDA;
        ko.device = o.device;
    }
    const int rc = kern_ctx_create(&ko, &t->ctx);
    if (rc < 0) {
        if (o.device >= 0)
            trn_seterr(err, err_cap, "CUDA context on device %d: %s", o.device, kern_strerror(rc));
        else
            trn_seterr(err, err_cap, "kern context: %s", kern_strerror(rc));
        trn_tta_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
oom:
    trn_tta_destroy(t);
    trn_seterr(err, err_cap, "out of memory");
    return -ENOMEM;
}

void trn_tta_destroy(struct trn_tta *t)
{
    if (!t) return;
    for (int i = 0; t->slots && i < t->n_slots; i++)
        trn_net_destroy(t->slots[i].net);
    free(t->slots);
    kern_ctx_destroy(t->ctx); /* after the nets that borrow it */
    free(t->scaled);
    free(t->out);
    free(t);
}

int trn_tta_stride(const struct trn_tta *t)
{
    return t ? t->stride : -EINVAL;
}

int trn_tta_no(const struct trn_tta *t)
{
    return t ? t->no : -EINVAL;
}

/* The net of (model, h, w): cached, or new in an empty slot or the least recently used one of an
 * earlier call (the slots hold every net one call needs, so none of this call's is evicted). */
static int get_net(struct trn_tta *t, int model, int h, int w, struct trn_net **out, char *err,
                   size_t err_cap)
{
    int victim = -1;
    for (int i = 0; i < t->n_slots; i++) {
        struct slot *s = &t->slots[i];
        if (s->net && s->model == model && s->h == h && s->w == w) {
            s->used = t->tick;
            *out = s->net;
            return 0;
        }
        if (victim < 0 || (t->slots[victim].net && (!s->net || s->used < t->slots[victim].used)))
            victim = i;
    }
    struct slot *s = &t->slots[victim];
    trn_net_destroy(s->net);
    s->net = NULL;
    struct trn_net_opts no;
    trn_net_opts_default(&no);
    no.train = false;
    no.ctx = t->ctx;
    no.amp = t->amp;
    no.fixed_params = t->fixed_params;
    no.device_path = t->device_path;
    no.cpu_engine = t->cpu_engine;
    char msg[256] = "";
    const int rc = trn_net_create(t->models[model], t->batch, h, w, &no, &s->net, msg, sizeof msg);
    if (rc < 0) {
        trn_seterr(err, err_cap, "model %d: network at %dx%d: %s", model + 1, w, h,
                   msg[0] ? msg : trn_strerror(rc));
        return rc;
    }
    s->model = model;
    s->h = h;
    s->w = w;
    s->used = t->tick;
    *out = s->net;
    return 0;
}

int trn_tta_net(struct trn_tta *t, int model, int h, int w, struct trn_net **net, char *err,
                size_t err_cap)
{
    if (!t || !net || model < 0 || model >= t->n_models || h < 1 || w < 1) return -EINVAL;
    t->tick++;
    return get_net(t, model, h, w, net, err, err_cap);
}

/* Rows of a net's decoded output per image. */
static size_t net_rows(const struct trn_net *net)
{
    size_t rows = 0;
    for (int l = 0; l < trn_net_levels(net); l++) {
        int shape[5];
        if (trn_net_output_shape(net, l, shape) > 0)
            rows += (size_t)shape[1] * (size_t)shape[2] * (size_t)shape[3];
    }
    return rows;
}

/* What one (model, branch) contributes: rows [lo, hi) of its output, at its padded shape. */
struct part {
    int ph, pw;
    size_t lo, hi;
};

int trn_tta_infer(struct trn_tta *t, const float *images, int h, int w, const float **out,
                  int *rows, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!t || !images || !out || h < 1 || w < 1) {
        trn_seterr(err, err_cap, "bad inference arguments");
        return -EINVAL;
    }
    const int nb = t->augment ? TRN_TTA_BRANCHES : 1;
    struct part parts[TRN_TTA_MAX_MODELS][TRN_TTA_BRANCHES];
    size_t total = 0, scaled_need = 0;
    t->tick++;
    /* pass 1: every net this call needs (so their rows are known) and the merged row count */
    for (int m = 0; m < t->n_models; m++) {
        const struct trn_model_info *mi = trn_model_info(t->models[m]);
        size_t full[TRN_TTA_BRANCHES];
        for (int b = 0; b < nb; b++) {
            struct part *p = &parts[m][b];
            int rh, rw;
            int rc =
                trn_tta_scaled_size(h, w, trn_tta_scales[b], t->gs[m], &rh, &rw, &p->ph, &p->pw);
            if (rc < 0) {
                trn_seterr(err, err_cap, "input %dx%d cannot be scaled by %g", w, h,
                           trn_tta_scales[b]);
                return rc;
            }
            struct trn_net *net;
            rc = get_net(t, m, p->ph, p->pw, &net, err, err_cap);
            if (rc < 0) return rc;
            full[b] = net_rows(net);
            p->lo = 0;
            p->hi = full[b];
            if (b > 0) {
                const size_t need =
                    (size_t)t->batch * (size_t)t->ch * (size_t)p->ph * (size_t)p->pw;
                if (need > scaled_need) scaled_need = need;
            }
        }
        if (t->augment) {
            size_t keep = 0, skip = 0;
            trn_tta_clip_counts(mi->nl, full[0], full[nb - 1], &keep, &skip);
            parts[m][0].hi = keep;
            parts[m][nb - 1].lo = skip;
        }
        for (int b = 0; b < nb; b++)
            total += parts[m][b].hi - parts[m][b].lo;
    }
    if (total > (size_t)INT_MAX / 2) {
        trn_seterr(err, err_cap, "too many rows (%zu)", total);
        return -EINVAL;
    }
    const size_t no = (size_t)t->no;
    const size_t out_need = (size_t)t->batch * total * no;
    if (out_need > t->out_cap) {
        float *nb_ = realloc(t->out, out_need * sizeof *nb_);
        if (!nb_) goto oom;
        t->out = nb_;
        t->out_cap = out_need;
    }
    if (scaled_need > t->scaled_cap) {
        float *ns = realloc(t->scaled, scaled_need * sizeof *ns);
        if (!ns) goto oom;
        t->scaled = ns;
        t->scaled_cap = scaled_need;
    }
    /* pass 2: run and merge */
    size_t off = 0;
    for (int m = 0; m < t->n_models; m++) {
        for (int b = 0; b < nb; b++) {
            const struct part *p = &parts[m][b];
            const float *in = images;
            if (b > 0) {
                const int rc =
                    trn_tta_scale_img(images, t->batch, t->ch, h, w, trn_tta_scales[b], t->gs[m],
                                      trn_tta_flips[b], t->scaled, t->scaled_cap);
                if (rc < 0) {
                    trn_seterr(err, err_cap, "scale_img %dx%d by %g: %s", w, h, trn_tta_scales[b],
                               rc == -ENOMEM ? "out of memory" : "bad size");
                    return rc;
                }
                in = t->scaled;
            }
            struct trn_net *net;
            int rc = get_net(t, m, p->ph, p->pw, &net, err, err_cap);
            const float *pred = NULL;
            int r = 0;
            if (rc == 0) rc = trn_net_infer(net, in, &pred, &r);
            if (rc < 0) {
                if (!err || !err[0])
                    trn_seterr(err, err_cap, "model %d: forward at %dx%d: %s", m + 1, p->pw, p->ph,
                               trn_strerror(rc));
                return rc;
            }
            const size_t n = p->hi - p->lo;
            for (int k = 0; k < t->batch; k++) {
                float *dst = t->out + ((size_t)k * total + off) * no;
                memcpy(dst, pred + ((size_t)k * (size_t)r + p->lo) * no, n * no * sizeof *dst);
                if (b > 0) trn_tta_descale(dst, n, t->no, trn_tta_scales[b], trn_tta_flips[b], w);
            }
            off += n;
        }
    }
    *out = t->out;
    if (rows) *rows = (int)total;
    return 0;
oom:
    trn_seterr(err, err_cap, "out of memory");
    return -ENOMEM;
}
