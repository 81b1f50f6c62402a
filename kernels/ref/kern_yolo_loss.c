/*
 * The whole YOLOv5 loss (ComputeLoss), CPU reference: build_targets, CIoU box loss, objectness
 * and class BCE, and the gradient of the total to the Detect outputs (kern.h, "The whole YOLOv5
 * loss").
 *
 * Tensors: p[l], dp[l] (bs, na, ny_l, nx_l, no) float32, row-major, no = nc + 5, or where a
 * channel-blocked executor's Detect conv wrote them (d.blk: yl_at), so that it needs no reshape
 * either way; targets (nt, 6). dp[l] is overwritten (every element, pad lanes too) or, with
 * KERN_ACCUM_DX, added to. Each element's arithmetic is the same in both layouts and the
 * objectness sum runs over the same rows in the same order (kern_bce_map), so both give the same
 * bits.
 *
 * This is the code trainer/model/loss.c ran before it moved here, operation for operation, so CPU
 * training stays bit-identical: float32 in PyTorch's op order (python scalars rounded to float
 * first, as PyTorch's CPU kernels do), only the means summed in double, CIoU and the objectness
 * BCE through kern_ref_ciou_* and kern_ref_bce_logits_* (kern_loss.c; when dp is overwritten,
 * the objectness gradient through its row pass, which here also clears each share of cells).
 * Those two run on the context's threads, with the same bits on any count. kernels/meson.build lets
 * the reference contract a * b + c into FMAs; this file must not (the history it reproduces had
 * none), hence the pragma.
 *
 * SCRATCH (host): a header of per-level entry counts, then per level the entry arrays (cap =
 * KERN_YOLO_OFFSETS na max_targets entries each): b, a, gj, gi, cls (int); tbox, pbox, dpbox
 * (cap, 4); ciou, dciou (cap); tobj (bs na ny nx). Every array starts on 64 bytes.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kern_internal.h"

/* One level's arrays inside the scratch. */
struct yl_level {
    int *b, *a, *gj, *gi, *cls; /* (cap) */
    float *tbox, *pbox, *dpbox; /* (cap, 4) target box, predicted box, its gradient */
    float *ciou, *dciou;        /* (cap) */
    float *tobj;                /* (cells) objectness targets */
    size_t cells;               /* bs na ny nx */
};

struct yl_ws {
    int *n; /* (KERN_YOLO_MAX_LEVELS) entries of the last build per level */
    struct yl_level lv[KERN_YOLO_MAX_LEVELS];
    float *p32[KERN_YOLO_MAX_LEVELS], *dp32[KERN_YOLO_MAX_LEVELS]; /* raw16's (yl_raw16) */
};

static size_t yl_round(size_t bytes)
{
    return (bytes + 63) & ~(size_t)63;
}

void kern_yolo_loss_init(struct kern_yolo_loss *d, int nl, int na, int nc, int bs, int max_targets)
{
    if (!d) return;
    static const float bal3[3] = { 4.0f, 1.0f, 0.4f };
    static const float bal5[5] = { 4.0f, 1.0f, 0.25f, 0.06f, 0.02f };
    memset(d, 0, sizeof *d);
    d->nl = nl;
    d->na = na;
    d->nc = nc;
    d->bs = bs;
    d->max_targets = max_targets;
    for (int l = 0; l < nl && l < KERN_YOLO_MAX_LEVELS; l++)
        d->balance[l] = nl == 3 ? bal3[l] : l < 5 ? bal5[l] : 0.02f;
    d->box = 0.05f;
    d->obj = 1.0f;
    d->cls = 0.5f;
    d->anchor_t = 4.0f;
    d->label_smoothing = 0.0f;
    d->cls_pw = d->obj_pw = 1.0f;
    d->gr = 1.0f;
}

int kern_yolo_loss_check(const struct kern_yolo_loss *d)
{
    KERN_RETURN_IF(!d || d->nl < 1 || d->nl > KERN_YOLO_MAX_LEVELS || d->na < 1 ||
                       d->na > KERN_YOLO_MAX_ANCHORS || d->nc < 1 || d->nc > 1000000 || d->bs < 1 ||
                       d->max_targets < 1 || d->blk < 0 || d->blk > 64,
                   -EINVAL);
    KERN_RETURN_IF(d->raw16 < 0 || d->raw16 > 1 ||
                       (d->raw16 && (d->blk || (d->raw_layout != KERN_LAYOUT_NCHW &&
                                                d->raw_layout != KERN_LAYOUT_NHWC))),
                   -EINVAL);
    KERN_RETURN_IF(!(d->anchor_t > 0.0f) || !isfinite(d->anchor_t) ||
                       !(d->label_smoothing >= 0.0f) || !(d->label_smoothing < 1.0f) ||
                       !isfinite(d->box) || !isfinite(d->obj) || !isfinite(d->cls),
                   -EINVAL);
    KERN_RETURN_IF(!(d->cls_pw > 0.0f) || !isfinite(d->cls_pw) || !(d->obj_pw > 0.0f) ||
                       !isfinite(d->obj_pw) || !(d->gr >= 0.0f && d->gr <= 1.0f),
                   -EINVAL);
    /* Entry slots of all levels, and cells of all levels, index int32 arrays (and CUDA keys). */
    KERN_RETURN_IF((int64_t)KERN_YOLO_OFFSETS * d->na * d->max_targets * d->nl > INT32_MAX / 4,
                   -EINVAL);
    int64_t cells = 0;
    for (int l = 0; l < d->nl; l++) {
        KERN_RETURN_IF(d->ny[l] < 1 || d->nx[l] < 1 || d->ny[l] > 65536 || d->nx[l] > 65536,
                       -EINVAL);
        KERN_RETURN_IF(!isfinite(d->balance[l]), -EINVAL);
        for (int a = 0; a < d->na; a++)
            for (int k = 0; k < 2; k++)
                KERN_RETURN_IF(!(d->anchors[l][a][k] > 0.0f) || !isfinite(d->anchors[l][a][k]),
                               -EINVAL);
        cells += (int64_t)d->bs * d->na * d->ny[l] * d->nx[l];
        KERN_RETURN_IF(cells > INT32_MAX / 4, -EINVAL);
    }
    return 0;
}

/* Bytes of the scratch for d, carving the arrays into *w when base is given. */
static size_t yl_layout(const struct kern_yolo_loss *d, unsigned char *base, struct yl_ws *w)
{
    const size_t cap = (size_t)KERN_YOLO_OFFSETS * (size_t)d->na * (size_t)d->max_targets;
    size_t off = 0;
    if (base) w->n = (int *)(void *)base;
    off += yl_round(KERN_YOLO_MAX_LEVELS * sizeof(int));
#define YL_CARVE(field, type, count)                             \
    do {                                                         \
        if (base) w->lv[l].field = (type *)(void *)(base + off); \
        off += yl_round((count) * sizeof(type));                 \
    } while (0)
    for (int l = 0; l < d->nl; l++) {
        const size_t cells = (size_t)d->bs * (size_t)d->na * (size_t)d->ny[l] * (size_t)d->nx[l];
        if (base) w->lv[l].cells = cells;
        YL_CARVE(b, int, cap);
        YL_CARVE(a, int, cap);
        YL_CARVE(gj, int, cap);
        YL_CARVE(gi, int, cap);
        YL_CARVE(cls, int, cap);
        YL_CARVE(tbox, float, cap * 4);
        YL_CARVE(pbox, float, cap * 4);
        YL_CARVE(dpbox, float, cap * 4);
        YL_CARVE(ciou, float, cap);
        YL_CARVE(dciou, float, cap);
        YL_CARVE(tobj, float, cells);
    }
#undef YL_CARVE
    /* raw16: the float32 head and its gradient, (bs, na, ny, nx, no) a level, after the rest */
    for (int l = 0; d->raw16 && l < d->nl; l++) {
        const size_t n = (size_t)d->bs * (size_t)d->na * (size_t)d->ny[l] * (size_t)d->nx[l] *
                         (size_t)(d->nc + 5);
        if (base) w->p32[l] = (float *)(void *)(base + off);
        off += yl_round(n * sizeof(float));
        if (base) w->dp32[l] = (float *)(void *)(base + off);
        off += yl_round(n * sizeof(float));
    }
    return off;
}

int kern_ref_yolo_loss_scratch_size(struct kern_ctx *ctx, const struct kern_yolo_loss *d,
                                    size_t *bytes)
{
    KERN_RETURN_IF(ctx && ctx->backend != KERN_BACKEND_CPU, -KERN_EBACKEND);
    KERN_RETURN_IF(!bytes, -EINVAL);
    const int rc = kern_yolo_loss_check(d);
    if (rc < 0) return rc;
    *bytes = yl_layout(d, NULL, NULL);
    return 0;
}

/* Lays out a caller's scratch after checking its size and alignment. */
static int yl_bind(const struct kern_yolo_loss *d, const void *scratch, size_t bytes,
                   struct yl_ws *w)
{
    KERN_RETURN_IF(!scratch || ((uintptr_t)scratch & 15u) != 0, -EINVAL);
    KERN_RETURN_IF(bytes < yl_layout(d, NULL, NULL), -KERN_EWORKSPACE);
    yl_layout(d, (unsigned char *)(uintptr_t)scratch, w);
    return 0;
}

/* torch.remainder(x, 1) for float32. */
static float yl_frac(float x)
{
    float r = fmodf(x, 1.0f);
    if (r != 0.0f && r < 0.0f) r += 1.0f;
    return r;
}

/* trunc(v) clamped to [0, hi]: .long() then clamp_(0, hi), without converting huge floats. */
static int yl_cell(float v, int hi)
{
    if (!(v > 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static int yl_check_targets(const struct kern_yolo_loss *d, const float *t, int nt)
{
    for (int r = 0; r < nt; r++) {
        const float *const row = t + 6 * (size_t)r;
        for (int k = 0; k < 6; k++)
            KERN_RETURN_IF(!isfinite(row[k]), -EINVAL);
        KERN_RETURN_IF(!(row[0] >= 0.0f && row[0] < (float)d->bs), -EINVAL);
        KERN_RETURN_IF(!(row[1] >= 0.0f && row[1] < (float)d->nc), -EINVAL);
        KERN_RETURN_IF(row[4] < 0.0f || row[5] < 0.0f, -EINVAL);
    }
    return 0;
}

/* build_targets (loss.py:177-234) of checked rows; returns the entries over all levels. */
static int yl_build(const struct kern_yolo_loss *d, struct yl_ws *w, const float *targets, int nt)
{
    /* Offsets g * off (loss.py:185-194): centre, left (+x), up (+y), right (-x), down (-y). */
    static const float offx[KERN_YOLO_OFFSETS] = { 0.0f, 0.5f, 0.0f, -0.5f, 0.0f };
    static const float offy[KERN_YOLO_OFFSETS] = { 0.0f, 0.0f, 0.5f, 0.0f, -0.5f };
    const float g = 0.5f;
    int total = 0;
    for (int l = 0; l < d->nl; l++) {
        struct yl_level *const v = &w->lv[l];
        const float fnx = (float)d->nx[l], fny = (float)d->ny[l];
        int n = 0;
        for (int o = 0; o < KERN_YOLO_OFFSETS; o++) {
            for (int a = 0; a < d->na; a++) {
                const float aw = d->anchors[l][a][0], ah = d->anchors[l][a][1];
                for (int t = 0; t < nt; t++) {
                    const float *const row = targets + 6 * (size_t)t;
                    const float gx = row[2] * fnx, gy = row[3] * fny;
                    const float gw = row[4] * fnx, gh = row[5] * fny;
                    const float rw = gw / aw, rh = gh / ah;
                    const float mw = fmaxf(rw, 1.0f / rw), mh = fmaxf(rh, 1.0f / rh);
                    if (!(fmaxf(mw, mh) < d->anchor_t)) continue;
                    const float gxi = fnx - gx, gyi = fny - gy;
                    int sel;
                    switch (o) {
                    case 1:
                        sel = yl_frac(gx) < g && gx > 1.0f;
                        break;
                    case 2:
                        sel = yl_frac(gy) < g && gy > 1.0f;
                        break;
                    case 3:
                        sel = yl_frac(gxi) < g && gxi > 1.0f;
                        break;
                    case 4:
                        sel = yl_frac(gyi) < g && gyi > 1.0f;
                        break;
                    default:
                        sel = 1;
                        break;
                    }
                    if (!sel) continue;
                    const int gi = yl_cell(gx - offx[o], d->nx[l] - 1);
                    const int gj = yl_cell(gy - offy[o], d->ny[l] - 1);
                    v->b[n] = (int)row[0];
                    v->a[n] = a;
                    v->gj[n] = gj;
                    v->gi[n] = gi;
                    v->cls[n] = (int)row[1];
                    float *const tb = v->tbox + 4 * (size_t)n;
                    tb[0] = gx - (float)gi;
                    tb[1] = gy - (float)gj;
                    tb[2] = gw;
                    tb[3] = gh;
                    n++;
                }
            }
        }
        w->n[l] = n;
        total += n;
    }
    return total;
}

int kern_ref_yolo_build_targets(const struct kern_yolo_loss *d, void *scratch, size_t scratch_bytes,
                                const float *targets, int nt)
{
    int rc = kern_yolo_loss_check(d);
    if (rc < 0) return rc;
    struct yl_ws w;
    if ((rc = yl_bind(d, scratch, scratch_bytes, &w)) < 0) return rc;
    for (int l = 0; l < d->nl; l++)
        w.n[l] = 0;
    KERN_RETURN_IF(nt < 0 || nt > d->max_targets || (nt > 0 && !targets), -EINVAL);
    if ((rc = yl_check_targets(d, targets, nt)) < 0) return rc;
    return yl_build(d, &w, targets, nt);
}

int kern_ref_yolo_loss_entries(const struct kern_yolo_loss *d, const void *scratch,
                               size_t scratch_bytes, int l, struct kern_yolo_entries *out)
{
    int rc = kern_yolo_loss_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!out || l < 0 || l >= d->nl, -EINVAL);
    struct yl_ws w;
    if ((rc = yl_bind(d, scratch, scratch_bytes, &w)) < 0) return rc;
    const struct yl_level *const v = &w.lv[l];
    out->n = w.n[l];
    out->b = v->b;
    out->a = v->a;
    out->gj = v->gj;
    out->gi = v->gi;
    out->cls = v->cls;
    out->tbox = v->tbox;
    out->ciou = v->ciou;
    return 0;
}

static float yl_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* BCE-with-logits of one element with pos_weight pw (PyTorch's formula; pw 1: the usual one). */
static float yl_bce(float x, float t, float pw)
{
    if (pw == 1.0f) return fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
    const float lw = (pw - 1.0f) * t + 1.0f;
    return (1.0f - t) * x + lw * (log1pf(expf(-fabsf(x))) + fmaxf(-x, 0.0f));
}

/* d yl_bce / dx. */
static float yl_bce_grad(float x, float t, float pw)
{
    const float s = yl_sigmoid(x);
    if (pw == 1.0f) return s - t;
    const float lw = (pw - 1.0f) * t + 1.0f;
    return (1.0f - t) - lw * (1.0f - s);
}

/* Where level l's logits lie in p[l] (kern_yolo_loss.blk): element k of anchor a's row at
 * (image b, cell) of hw cells. */
struct yl_map {
    size_t hw, na, no, blk, img; /* img: an image's floats in the blocked layout */
};

static struct yl_map yl_map_of(const struct kern_yolo_loss *d, int l)
{
    struct yl_map m = { .hw = (size_t)d->ny[l] * (size_t)d->nx[l],
                        .na = (size_t)d->na,
                        .no = (size_t)d->nc + 5,
                        .blk = (size_t)d->blk };
    if (m.blk) m.img = (m.na * m.no + m.blk - 1) / m.blk * m.hw * m.blk;
    return m;
}

static size_t yl_at(const struct yl_map *m, size_t b, size_t a, size_t cell, size_t k)
{
    if (!m->blk) return ((b * m->na + a) * m->hw + cell) * m->no + k;
    const size_t ch = a * m->no + k;
    return b * m->img + (ch / m->blk * m->hw + cell) * m->blk + ch % m->blk;
}

/* Entry e's cell as an index of tobj, (b, a, gj, gi), and its element k in p[l]. */
static size_t yl_cell_of(const struct yl_map *m, const struct yl_level *v, int e, int nx)
{
    return ((size_t)v->b[e] * m->na + (size_t)v->a[e]) * m->hw + (size_t)v->gj[e] * (size_t)nx +
           (size_t)v->gi[e];
}

static size_t yl_elem(const struct yl_map *m, const struct yl_level *v, int e, int nx, size_t k)
{
    return yl_at(m, (size_t)v->b[e], (size_t)v->a[e],
                 (size_t)v->gj[e] * (size_t)nx + (size_t)v->gi[e], k);
}

/* A walk over entry e's elements k, k + 1, ... in p[l] (yl_take): the next lane, or the next
 * block's first; no division per element (the class loops take 80 of them per entry). */
struct yl_walk {
    size_t at, lane, blk, jump;
};

static struct yl_walk yl_walk_of(const struct yl_map *m, const struct yl_level *v, int e, int nx,
                                 size_t k)
{
    struct yl_walk w = { .at = yl_elem(m, v, e, nx, k), .blk = SIZE_MAX, .jump = 1 };
    if (m->blk) {
        w.lane = ((size_t)v->a[e] * m->no + k) % m->blk;
        w.blk = m->blk;
        w.jump = m->hw * m->blk - (m->blk - 1);
    }
    return w;
}

static size_t yl_take(struct yl_walk *w)
{
    const size_t at = w->at;
    if (++w->lane == w->blk) {
        w->lane = 0;
        w->at += w->jump;
    } else {
        w->at++;
    }
    return at;
}

/* The objectness column of a level as BCE rows (kern_bce_map): plane (b, a), its cells. */
static struct kern_bce_map yl_obj_map(const struct yl_map *m)
{
    struct kern_bce_map r = { .rows = m->hw, .ldx = m->blk ? m->blk : m->no, .na = m->na };
    r.img = m->blk ? m->img : m->na * m->hw * m->no;
    for (size_t a = 0; a < m->na; a++)
        r.aoff[a] = yl_at(m, 0, a, 0, 4);
    return r;
}

/*
 * The objectness gradient of a level that dl does not accumulate: each share of cells cleared,
 * then its objectness column written as kern_ref_bce_logits_bwd would, YL_OBJ_RUN cells at a time
 * while their rows are in cache. One pass over the level's gradient instead of a memset and a
 * second pass (they took 4.4 and 2.9 ms of the yolov5n 320 b16 step on one thread). Blocked
 * (blk): a share of (image, channel block) planes' cells, their pad lanes cleared too.
 */
#define YL_OBJ_RUN 256

struct yl_obj_job {
    float *dl;
    const float *pl, *t;
    const struct yl_map *m;
    size_t cells;
    float scale;
};

static void yl_obj_task(void *arg, int w, int n)
{
    const struct yl_obj_job *const j = arg;
    const struct yl_map *const m = j->m;
    size_t lo, hi;
    if (!m->blk) {
        kern_share(j->cells, w, n, &lo, &hi);
        for (size_t c0 = lo; c0 < hi; c0 += YL_OBJ_RUN) {
            const size_t c1 = hi - c0 < YL_OBJ_RUN ? hi : c0 + YL_OBJ_RUN;
            memset(j->dl + c0 * m->no, 0, (c1 - c0) * m->no * sizeof *j->dl);
            kern_bce_logits_grad(j->dl + 4, j->pl + 4, j->t, c0, c1, 1, m->no, j->scale, 0);
        }
        return;
    }
    /* items: (plane, run of cells), plane = image * nb + block */
    const size_t nb = m->img / (m->hw * m->blk), runs = (m->hw + YL_OBJ_RUN - 1) / YL_OBJ_RUN;
    kern_share(j->cells / (m->na * m->hw) * nb * runs, w, n, &lo, &hi);
    for (size_t it = lo; it < hi; it++) {
        const size_t plane = it / runs, b = plane / nb, cb = plane % nb;
        const size_t c0 = it % runs * YL_OBJ_RUN,
                     c1 = c0 + YL_OBJ_RUN < m->hw ? c0 + YL_OBJ_RUN : m->hw;
        const size_t base = plane * m->hw * m->blk;
        memset(j->dl + base + c0 * m->blk, 0, (c1 - c0) * m->blk * sizeof *j->dl);
        for (size_t a = 0; a < m->na; a++) {
            const size_t ch = a * m->no + 4;
            if (ch / m->blk != cb) continue;
            const size_t at = base + ch % m->blk;
            kern_bce_logits_grad(j->dl + at, j->pl + at, j->t + (b * m->na + a) * m->hw, c0, c1, 1,
                                 m->blk, j->scale, 0);
        }
    }
}

/* raw16 (kern_loss.h): the head widened into float32 scratch, the float32 loss (whose scratch
 * is the same, before these arrays), the gradient rounded back: the composition the contract
 * names, so the bits are those by construction. */
static int yl_raw16(struct kern_ctx *ctx, const struct kern_yolo_loss *d, const struct yl_ws *w,
                    float *const *dp, float *out, const float *const *p, const float *targets,
                    const int *ntp, unsigned accum)
{
    KERN_RETURN_IF(accum & KERN_ACCUM_DX, -EINVAL);
    struct kern_yolo_loss f = *d;
    f.raw16 = 0;
    const float *p32[KERN_YOLO_MAX_LEVELS];
    float *dp32[KERN_YOLO_MAX_LEVELS];
    struct kern_detect det[KERN_YOLO_MAX_LEVELS];
    int rc;
    for (int l = 0; l < d->nl; l++) {
        det[l] = (struct kern_detect){
            .bs = d->bs, .na = d->na, .no = d->nc + 5, .ny = d->ny[l], .nx = d->nx[l], .stride = 1
        };
        rc = kern_ref_detect16_fwd(ctx, &det[l], d->raw_layout, w->p32[l],
                                   (const uint16_t *)(const void *)p[l]);
        if (rc < 0) return rc;
        p32[l] = w->p32[l];
        dp32[l] = w->dp32[l];
    }
    /* the float32 op rebinds the same scratch: its arrays come first (yl_layout) */
    rc = kern_ref_yolo_loss(ctx, &f, dp ? dp32 : NULL, out, p32, targets, ntp, w->n,
                            yl_layout(d, NULL, NULL), 0);
    for (int l = 0; rc == 0 && dp && l < d->nl; l++)
        rc = kern_ref_detect16_bwd(ctx, &det[l], d->raw_layout, (uint16_t *)(void *)dp[l], dp32[l]);
    return rc;
}

int kern_ref_yolo_loss(struct kern_ctx *ctx, const struct kern_yolo_loss *d, float *const *dp,
                       float *restrict out, const float *const *p, const float *restrict targets,
                       const int *restrict ntp, void *scratch, size_t scratch_bytes, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    int rc = kern_yolo_loss_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!out || !p || !ntp, -EINVAL);
    for (int l = 0; l < d->nl; l++)
        KERN_RETURN_IF(!p[l] || (dp && !dp[l]), -EINVAL);
    const int nt = *ntp;
    KERN_RETURN_IF(nt < 0 || nt > d->max_targets || (nt > 0 && !targets), -EINVAL);
    if ((rc = yl_check_targets(d, targets, nt)) < 0) return rc;
    if (!scratch) {
        scratch = ctx->ws;
        scratch_bytes = ctx->ws_size;
        KERN_RETURN_IF(!scratch, -KERN_EWORKSPACE);
    }
    struct yl_ws w;
    if ((rc = yl_bind(d, scratch, scratch_bytes, &w)) < 0) return rc;
    if (d->raw16) return yl_raw16(ctx, d, &w, dp, out, p, targets, ntp, accum);
    yl_build(d, &w, targets, nt);

    const int no = d->nc + 5;
    const float cp = 1.0f - 0.5f * d->label_smoothing, cn = 0.5f * d->label_smoothing;
    const float fbs = (float)d->bs;
    float lbox = 0.0f, lobj = 0.0f, lcls = 0.0f;
    for (int l = 0; l < d->nl; l++) {
        struct yl_level *const v = &w.lv[l];
        const int n = w.n[l];
        const float *const pl = p[l];
        const struct yl_map m = yl_map_of(d, l);
        const int nx = d->nx[l];
        memset(v->tobj, 0, v->cells * sizeof *v->tobj);
        if (n > 0) {
            for (int e = 0; e < n; e++) {
                float *const pb = v->pbox + 4 * (size_t)e;
                pb[0] = yl_sigmoid(pl[yl_elem(&m, v, e, nx, 0)]) * 2.0f - 0.5f;
                pb[1] = yl_sigmoid(pl[yl_elem(&m, v, e, nx, 1)]) * 2.0f - 0.5f;
                const float qw = yl_sigmoid(pl[yl_elem(&m, v, e, nx, 2)]) * 2.0f;
                const float qh = yl_sigmoid(pl[yl_elem(&m, v, e, nx, 3)]) * 2.0f;
                pb[2] = (qw * qw) * d->anchors[l][v->a[e]][0];
                pb[3] = (qh * qh) * d->anchors[l][v->a[e]][1];
            }
            if ((rc = kern_ref_ciou_fwd(ctx, v->ciou, v->pbox, v->tbox, (size_t)n)) < 0) return rc;
            double s = 0.0;
            for (int e = 0; e < n; e++) {
                s += (double)(1.0f - v->ciou[e]);
                /* The last entry in build order wins a shared cell (kern.h). */
                const size_t cell = yl_cell_of(&m, v, e, nx);
                const float io = fmaxf(v->ciou[e], 0.0f);
                v->tobj[cell] = d->gr < 1.0f ? (1.0f - d->gr) + d->gr * io : io;
            }
            lbox += (float)(s / n);
            if (d->nc > 1) {
                double sc = 0.0;
                for (int e = 0; e < n; e++) {
                    struct yl_walk it = yl_walk_of(&m, v, e, nx, 5);
                    for (int k = 0; k < d->nc; k++) {
                        const float t = k == v->cls[e] ? cp : cn;
                        sc += (double)yl_bce(pl[yl_take(&it)], t, d->cls_pw);
                    }
                }
                lcls += (float)(sc / ((double)n * (double)d->nc));
            }
        }
        float bo = 0.0f;
        const struct kern_bce_map om = yl_obj_map(&m);
        if (d->obj_pw == 1.0f) {
            if ((rc = kern_bce_map_fwd(ctx, &bo, pl, v->tobj, v->cells, 1, &om)) < 0) return rc;
        } else {
            double so = 0.0;
            for (size_t c = 0; c < v->cells; c++)
                so += (double)yl_bce(pl[kern_bce_map_plane(&om, c / m.hw) + c % m.hw * om.ldx],
                                     v->tobj[c], d->obj_pw);
            bo = (float)(so / (double)v->cells);
        }
        lobj += bo * d->balance[l];
    }
    out[KERN_YOLO_OUT_RAW_BOX] = lbox;
    out[KERN_YOLO_OUT_RAW_OBJ] = lobj;
    out[KERN_YOLO_OUT_RAW_CLS] = lcls;
    out[KERN_YOLO_OUT_LBOX] = lbox * d->box;
    out[KERN_YOLO_OUT_LOBJ] = lobj * d->obj;
    out[KERN_YOLO_OUT_LCLS] = lcls * d->cls;
    out[KERN_YOLO_OUT_TOTAL] =
        (out[KERN_YOLO_OUT_LBOX] + out[KERN_YOLO_OUT_LOBJ] + out[KERN_YOLO_OUT_LCLS]) * fbs;
    out[KERN_YOLO_OUT_STATUS] = 0.0f;
    if (!dp) return 0;

    /* d total = bs (box d lbox + obj d lobj + cls d lcls). */
    const unsigned add = accum & KERN_ACCUM_DX;
    for (int l = 0; l < d->nl; l++) {
        struct yl_level *const v = &w.lv[l];
        const int n = w.n[l];
        const float *const pl = p[l];
        float *const dl = dp[l];
        const struct yl_map m = yl_map_of(d, l);
        const struct kern_bce_map om = yl_obj_map(&m);
        const int nx = d->nx[l];
        const float go = fbs * d->obj * d->balance[l];
        const float scale = kern_bce_logits_scale(go, v->cells, 1);
        if (d->obj_pw == 1.0f && !add) {
            struct yl_obj_job j = {
                .dl = dl, .pl = pl, .t = v->tobj, .m = &m, .cells = v->cells, .scale = scale
            };
            kern_parallel(ctx, yl_obj_task, &j, v->cells * (size_t)no);
        } else if (d->obj_pw == 1.0f && !m.blk) {
            rc = kern_ref_bce_logits_bwd(ctx, dl + 4, pl + 4, v->tobj, v->cells, 1, (size_t)no, go,
                                         add);
            if (rc < 0) return rc;
        } else if (d->obj_pw == 1.0f) { /* blocked, added to: plane by plane */
            for (size_t q = 0; q < v->cells / m.hw; q++) {
                const size_t at = kern_bce_map_plane(&om, q);
                kern_bce_logits_grad(dl + at, pl + at, v->tobj + q * m.hw, 0, m.hw, 1, om.ldx,
                                     scale, 1);
            }
        } else {
            if (!add) memset(dl, 0, (m.blk ? m.img * (size_t)d->bs : v->cells * m.no) * sizeof *dl);
            for (size_t c = 0; c < v->cells; c++) {
                const size_t at = kern_bce_map_plane(&om, c / m.hw) + c % m.hw * om.ldx;
                const float g = yl_bce_grad(pl[at], v->tobj[c], d->obj_pw) * scale;
                dl[at] = add ? dl[at] + g : g;
            }
        }
        if (n == 0) continue;
        const float gci = -(fbs * d->box) / (float)n;
        for (int e = 0; e < n; e++)
            v->dciou[e] = gci;
        rc = kern_ref_ciou_bwd(ctx, v->dpbox, NULL, v->dciou, v->pbox, v->tbox, (size_t)n, 0);
        if (rc < 0) return rc;
        const float gcls = (float)((double)(fbs * d->cls) / ((double)n * (double)d->nc));
        for (int e = 0; e < n; e++) {
            const float *const db = v->dpbox + 4 * (size_t)e;
            for (int k = 0; k < 2; k++) {
                const size_t at = yl_elem(&m, v, e, nx, (size_t)k);
                const float s = yl_sigmoid(pl[at]);
                dl[at] += db[k] * 2.0f * (s * (1.0f - s));
            }
            for (int k = 2; k < 4; k++) {
                const size_t at = yl_elem(&m, v, e, nx, (size_t)k);
                const float s = yl_sigmoid(pl[at]);
                const float q = s * 2.0f;
                dl[at] += ((db[k] * d->anchors[l][v->a[e]][k - 2]) * (2.0f * q)) * 2.0f *
                          (s * (1.0f - s));
            }
            if (d->nc > 1) {
                struct yl_walk it = yl_walk_of(&m, v, e, nx, 5);
                for (int k = 0; k < d->nc; k++) {
                    const float t = k == v->cls[e] ? cp : cn;
                    const size_t at = yl_take(&it);
                    dl[at] += yl_bce_grad(pl[at], t, d->cls_pw) * gcls;
                }
            }
        }
    }
    return 0;
}
