/*
 * ComputeLoss (see loss.h). Tensor layouts: p[l] and dp[l] (bs, na, ny, nx, no) float32,
 * row-major; targets (nt, 6). dp is overwritten (=), never accumulated across calls.
 *
 * The computation itself is kern's (kern_ref_yolo_loss on the CPU, its CUDA twin through
 * trn_loss_compute_dev): one implementation, shared with the GPU path's parity tests. This file
 * keeps the trainer's API: the configuration from a model and hyp, the trainer's own error codes
 * (-E2BIG, -TRN_LOSS_ETARGET, checked before the op runs) and the views of the last build.
 */
#include "loss.h"
#include "errors.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(TRN_MODEL_MAX_LEVELS <= KERN_YOLO_MAX_LEVELS, "loss levels fit kern's descriptor");
_Static_assert(TRN_MODEL_MAX_ANCHORS <= KERN_YOLO_MAX_ANCHORS, "anchors fit kern's descriptor");
_Static_assert(TRN_LOSS_OFFSETS == KERN_YOLO_OFFSETS, "same five offsets");

struct trn_loss {
    struct trn_loss_cfg cfg;
    struct kern_yolo_loss kd; /* cfg as kern's descriptor */
    void *mem;                /* the reference op's scratch, bytes long, 64-byte aligned */
    size_t bytes;
};

static int loss_cfg_check(const struct trn_loss_cfg *c)
{
    if (!c || c->nl < 1 || c->nl > TRN_MODEL_MAX_LEVELS || c->na < 1 ||
        c->na > TRN_MODEL_MAX_ANCHORS || c->nc < 1 || c->nc > 1000000 || c->bs < 1 ||
        c->max_targets < 1)
        return -EINVAL;
    if (c->head != 0 && c->head != TRN_LOSS_HEAD_BF16_NCHW && c->head != TRN_LOSS_HEAD_BF16_NHWC)
        return -EINVAL;
    if (!(c->anchor_t > 0.0f) || !isfinite(c->anchor_t) || !(c->label_smoothing >= 0.0f) ||
        !(c->label_smoothing < 1.0f) || !isfinite(c->box) || !isfinite(c->obj) || !isfinite(c->cls))
        return -EINVAL;
    /* Entry counts are ints: TRN_LOSS_OFFSETS * na * max_targets must fit. */
    if ((int64_t)TRN_LOSS_OFFSETS * c->na * c->max_targets > INT32_MAX / 4) return -EINVAL;
    for (int l = 0; l < c->nl; l++) {
        if (c->ny[l] < 1 || c->nx[l] < 1 || c->ny[l] > 65536 || c->nx[l] > 65536) return -EINVAL;
        if (!isfinite(c->balance[l])) return -EINVAL;
        for (int a = 0; a < c->na; a++)
            for (int k = 0; k < 2; k++)
                if (!(c->anchors[l][a][k] > 0.0f) || !isfinite(c->anchors[l][a][k])) return -EINVAL;
    }
    return 0;
}

/* cfg as kern's descriptor (gr is 1, as train.py's model.gr). */
/* A head value (trn_loss_cfg.head, trn_loss_compute_blk's blk) into d's layout fields. */
static void loss_head_to_kern(int head, struct kern_yolo_loss *d)
{
    d->blk = head <= 64 ? head : 0;
    d->raw16 = head == TRN_LOSS_HEAD_BF16_NCHW || head == TRN_LOSS_HEAD_BF16_NHWC;
    d->raw_layout = head == TRN_LOSS_HEAD_BF16_NHWC ? KERN_LAYOUT_NHWC : KERN_LAYOUT_NCHW;
}

static void loss_to_kern(const struct trn_loss_cfg *c, struct kern_yolo_loss *d)
{
    kern_yolo_loss_init(d, c->nl, c->na, c->nc, c->bs, c->max_targets);
    for (int l = 0; l < c->nl; l++) {
        d->ny[l] = c->ny[l];
        d->nx[l] = c->nx[l];
        d->balance[l] = c->balance[l];
        for (int a = 0; a < c->na; a++) {
            d->anchors[l][a][0] = c->anchors[l][a][0];
            d->anchors[l][a][1] = c->anchors[l][a][1];
        }
    }
    d->box = c->box;
    d->obj = c->obj;
    d->cls = c->cls;
    d->anchor_t = c->anchor_t;
    d->label_smoothing = c->label_smoothing;
    d->cls_pw = c->cls_pw > 0 ? c->cls_pw : 1.0f; /* 0: a cfg filled by hand before the field */
    d->obj_pw = c->obj_pw > 0 ? c->obj_pw : 1.0f;
    loss_head_to_kern(c->head, d);
}

int trn_loss_kern_desc(const struct trn_loss_cfg *cfg, struct kern_yolo_loss *out)
{
    if (!out) return -EINVAL;
    int rc = loss_cfg_check(cfg);
    if (rc < 0) return rc;
    struct kern_yolo_loss d;
    loss_to_kern(cfg, &d);
    if ((rc = kern_yolo_loss_check(&d)) < 0) return rc;
    *out = d;
    return 0;
}

size_t trn_loss_workspace_bytes(const struct trn_loss_cfg *cfg)
{
    struct kern_yolo_loss d;
    size_t bytes = 0;
    if (trn_loss_kern_desc(cfg, &d) < 0 || kern_ref_yolo_loss_scratch_size(NULL, &d, &bytes) < 0)
        return 0;
    return bytes;
}

int trn_loss_create(const struct trn_loss_cfg *cfg, struct trn_loss **out)
{
    if (!out) return -EINVAL;
    struct kern_yolo_loss d;
    size_t bytes = 0;
    int rc = trn_loss_kern_desc(cfg, &d);
    if (rc == 0) rc = kern_ref_yolo_loss_scratch_size(NULL, &d, &bytes);
    if (rc < 0) return rc;
    struct trn_loss *const L = calloc(1, sizeof *L);
    if (!L) return -ENOMEM;
    L->cfg = *cfg;
    L->kd = d;
    L->bytes = (bytes + 63) & ~(size_t)63;
    L->mem = aligned_alloc(64, L->bytes);
    if (!L->mem) {
        free(L);
        return -ENOMEM;
    }
    memset(L->mem, 0, L->bytes);
    *out = L;
    return 0;
}

void trn_loss_destroy(struct trn_loss *L)
{
    if (!L) return;
    free(L->mem);
    free(L);
}

const struct trn_loss_cfg *trn_loss_get_cfg(const struct trn_loss *L)
{
    return L ? &L->cfg : NULL;
}

int trn_loss_cfg_from_model(const struct trn_model *m, const struct trn_hyp *h, int bs, int imgsz,
                            float label_smoothing, int max_targets, struct trn_loss_cfg *out)
{
    if (!m || !h || !out || bs < 1 || imgsz < 1 || max_targets < 1) return -EINVAL;
    if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f)) return -EINVAL;
    if (h->fl_gamma != 0.0) return -ENOTSUP;
    if (!(h->cls_pw > 0) || !(h->obj_pw > 0)) return -EINVAL;
    const struct trn_model_info *const I = trn_model_info(m);
    if (I->nl < 1 || I->nl > 5 || I->na < 1) return -EINVAL;
    /* The anchors as the model holds them (grid units), so a loaded checkpoint's are used. */
    int ta = -1;
    for (int k = 0; k < I->n_tensors; k++)
        if (trn_model_tensor(m, k)->role == TRN_T_ANCHORS) ta = k;
    if (ta < 0) return -EINVAL;
    const struct trn_tensor *const T = trn_model_tensor(m, ta);
    const float *const anc = (const float *)trn_model_arena_const(m, T->arena) + T->offset;

    struct trn_loss_cfg c;
    memset(&c, 0, sizeof c);
    c.nl = I->nl;
    c.na = I->na;
    c.nc = I->nc;
    c.bs = bs;
    static const float bal3[3] = { 4.0f, 1.0f, 0.4f };
    static const float bal5[5] = { 4.0f, 1.0f, 0.25f, 0.06f, 0.02f };
    for (int l = 0; l < I->nl; l++) {
        if (I->stride[l] < 1 || imgsz % I->stride[l] != 0) return -EINVAL;
        c.ny[l] = c.nx[l] = imgsz / I->stride[l];
        c.balance[l] = I->nl == 3 ? bal3[l] : bal5[l];
        for (int a = 0; a < I->na; a++) {
            c.anchors[l][a][0] = anc[((size_t)l * (size_t)I->na + (size_t)a) * 2];
            c.anchors[l][a][1] = anc[((size_t)l * (size_t)I->na + (size_t)a) * 2 + 1];
        }
    }
    /* train.py:234-237, python floats. */
    const double scale = 3.0 / I->nl;
    c.box = (float)(h->box * scale);
    c.cls = (float)(h->cls * I->nc / 80.0 * scale);
    c.obj = (float)(h->obj * ((double)imgsz / 640.0) * ((double)imgsz / 640.0) * scale);
    c.anchor_t = (float)h->anchor_t;
    c.label_smoothing = label_smoothing;
    c.cls_pw = (float)h->cls_pw;
    c.obj_pw = (float)h->obj_pw;
    c.max_targets = max_targets;
    const int rc = loss_cfg_check(&c);
    if (rc < 0) return rc;
    *out = c;
    return 0;
}

int trn_loss_cfg_set_grid(struct trn_loss_cfg *c, const struct trn_model *m, int h, int w)
{
    if (!c || !m || h < 1 || w < 1) return -EINVAL;
    const struct trn_model_info *const I = trn_model_info(m);
    if (I->nl != c->nl) return -EINVAL;
    for (int l = 0; l < I->nl; l++) {
        if (I->stride[l] < 1 || h % I->stride[l] || w % I->stride[l]) return -EINVAL;
        c->ny[l] = h / I->stride[l];
        c->nx[l] = w / I->stride[l];
    }
    return loss_cfg_check(c);
}

static int loss_check_targets(const struct trn_loss_cfg *c, const float *t, int nt)
{
    for (int r = 0; r < nt; r++) {
        const float *const row = t + 6 * (size_t)r;
        for (int k = 0; k < 6; k++)
            if (!isfinite(row[k])) return -TRN_LOSS_ETARGET;
        if (!(row[0] >= 0.0f && row[0] < (float)c->bs)) return -TRN_LOSS_ETARGET;
        if (!(row[1] >= 0.0f && row[1] < (float)c->nc)) return -TRN_LOSS_ETARGET;
        if (row[4] < 0.0f || row[5] < 0.0f) return -TRN_LOSS_ETARGET;
    }
    return 0;
}

/* The trainer's checks, in the order trn_loss_build_targets has always made them; on an error
 * every level is left with no entries. */
static int loss_prepare(struct trn_loss *L, const float *targets, int nt)
{
    int rc = kern_ref_yolo_build_targets(&L->kd, L->mem, L->bytes, NULL, 0);
    if (rc < 0) return rc;
    if (nt > L->cfg.max_targets) return -E2BIG;
    return loss_check_targets(&L->cfg, targets, nt);
}

int trn_loss_build_targets(struct trn_loss *L, const float *targets, int nt)
{
    if (!L || nt < 0 || (nt > 0 && !targets)) return -EINVAL;
    const int rc = loss_prepare(L, targets, nt);
    if (rc < 0) return rc;
    return kern_ref_yolo_build_targets(&L->kd, L->mem, L->bytes, targets, nt);
}

int trn_loss_level(const struct trn_loss *L, int l, struct trn_loss_level *out)
{
    if (!L || !out || l < 0 || l >= L->cfg.nl) return -EINVAL;
    struct kern_yolo_entries e;
    const int rc = kern_ref_yolo_loss_entries(&L->kd, L->mem, L->bytes, l, &e);
    if (rc < 0) return rc;
    out->n = e.n;
    out->b = e.b;
    out->a = e.a;
    out->gj = e.gj;
    out->gi = e.gi;
    out->cls = e.cls;
    out->tbox = e.tbox;
    out->ciou = e.ciou;
    return 0;
}

int trn_loss_items_from_out(const float *out, struct trn_loss_items *items)
{
    if (!out || !items) return -EINVAL;
    items->lbox = out[KERN_YOLO_OUT_LBOX];
    items->lobj = out[KERN_YOLO_OUT_LOBJ];
    items->lcls = out[KERN_YOLO_OUT_LCLS];
    items->total = out[KERN_YOLO_OUT_TOTAL];
    items->raw_box = out[KERN_YOLO_OUT_RAW_BOX];
    items->raw_obj = out[KERN_YOLO_OUT_RAW_OBJ];
    items->raw_cls = out[KERN_YOLO_OUT_RAW_CLS];
    return out[KERN_YOLO_OUT_STATUS] != 0.0f ? -TRN_LOSS_ETARGET : 0;
}

int trn_loss_compute(struct trn_loss *L, struct kern_ctx *ctx, const float *const *p,
                     const float *targets, int nt, float *const *dp, struct trn_loss_items *items)
{
    return trn_loss_compute_blk(L, ctx, p, 0, targets, nt, dp, items);
}

int trn_loss_compute_blk(struct trn_loss *L, struct kern_ctx *ctx, const float *const *p, int blk,
                         const float *targets, int nt, float *const *dp,
                         struct trn_loss_items *items)
{
    if (!L || !ctx || !p || !items || blk < 0 || (blk > 64 && blk != L->cfg.head)) return -EINVAL;
    const struct trn_loss_cfg *const c = &L->cfg;
    for (int l = 0; l < c->nl; l++)
        if (!p[l] || (dp && !dp[l])) return -EINVAL;
    if (nt < 0 || (nt > 0 && !targets)) return -EINVAL;
    int rc = loss_prepare(L, targets, nt);
    if (rc < 0) return rc;
    float out[KERN_YOLO_OUT_N];
    struct kern_yolo_loss kd = L->kd;
    loss_head_to_kern(blk, &kd);
    rc = kern_ref_yolo_loss(ctx, &kd, dp, out, p, targets, &nt, L->mem, L->bytes, 0);
    if (rc < 0) return rc;
    return trn_loss_items_from_out(out, items);
}

int trn_loss_dev_scratch_bytes(const struct trn_loss_cfg *cfg, const struct kern_ops *K,
                               struct kern_ctx *ctx, size_t *bytes)
{
    if (!K || !ctx || !bytes) return -EINVAL;
    struct kern_yolo_loss d;
    const int rc = trn_loss_kern_desc(cfg, &d);
    if (rc < 0) return rc;
    return K->yolo_loss_scratch_size(ctx, &d, bytes);
}

int trn_loss_compute_dev(const struct trn_loss_cfg *cfg, const struct kern_ops *K,
                         struct kern_ctx *ctx, const float *const *p, const float *targets,
                         const int *nt, float *const *dp, unsigned accum, float *out, void *scratch,
                         size_t scratch_bytes)
{
    if (!K || !ctx) return -EINVAL;
    struct kern_yolo_loss d;
    const int rc = trn_loss_kern_desc(cfg, &d);
    if (rc < 0) return rc;
    return K->yolo_loss(ctx, &d, dp, out, p, targets, nt, scratch, scratch_bytes, accum);
}

const char *trn_loss_strerror(int rc)
{
    if (rc == -E2BIG) return "more targets than the loss workspace was planned for";
    if (rc == -ENOTSUP) return "focal loss (hyp fl_gamma > 0) is not implemented";
    return trn_strerror(rc);
}
