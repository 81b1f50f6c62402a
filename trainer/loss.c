/*
 * ComputeLoss (see loss.h). Tensor layouts: p[l] and dp[l] (bs, na, ny, nx, no) float32,
 * row-major; targets (nt, 6). dp is overwritten (=), never accumulated across calls.
 *
 * Float arithmetic follows PyTorch's op order in float32 (the scalars python passes are rounded
 * to float first, as PyTorch's CPU kernels do), so that the result matches a PyTorch run to
 * rounding; only the means are summed in double (PyTorch's reduction order is its own).
 */
#include "loss.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The workspace of one level; every array holds cap entries (tobj: bs * na * ny * nx). */
struct loss_level_ws {
    int n;                      /* entries of the last build */
    int *b, *a, *gj, *gi, *cls; /* (cap) */
    float *tbox, *pbox, *dpbox; /* (cap, 4) target box, predicted box, its gradient */
    float *ciou, *dciou;        /* (cap) */
    float *tobj;                /* (bs, na, ny, nx) objectness targets */
    size_t cells;               /* bs * na * ny * nx */
};

struct trn_loss {
    struct trn_loss_cfg cfg;
    size_t cap;                                    /* entries per level */
    struct loss_level_ws lv[TRN_MODEL_MAX_LEVELS]; /* views into mem */
    void *mem;                                     /* the one allocation */
};

/* 64-byte aligned sub-array sizes in bytes. */
static size_t loss_round(size_t bytes)
{
    return (bytes + 63) & ~(size_t)63;
}

static int loss_cfg_check(const struct trn_loss_cfg *c)
{
    if (!c || c->nl < 1 || c->nl > TRN_MODEL_MAX_LEVELS || c->na < 1 ||
        c->na > TRN_MODEL_MAX_ANCHORS || c->nc < 1 || c->nc > 1000000 || c->bs < 1 ||
        c->max_targets < 1)
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

/* Bytes of the workspace, laying out the arrays when L is given (mem already set). */
static size_t loss_layout(const struct trn_loss_cfg *c, size_t cap, struct trn_loss *L)
{
    size_t off = 0;
    unsigned char *const base = L ? (unsigned char *)L->mem : NULL;
#define LOSS_CARVE(field, type, count)                  \
    do {                                                \
        if (L) w->field = (type *)(void *)(base + off); \
        off += loss_round((count) * sizeof(type));      \
    } while (0)
    for (int l = 0; l < c->nl; l++) {
        struct loss_level_ws tmp;
        struct loss_level_ws *const w = L ? &L->lv[l] : &tmp;
        const size_t cells = (size_t)c->bs * (size_t)c->na * (size_t)c->ny[l] * (size_t)c->nx[l];
        w->cells = cells;
        w->n = 0;
        LOSS_CARVE(b, int, cap);
        LOSS_CARVE(a, int, cap);
        LOSS_CARVE(gj, int, cap);
        LOSS_CARVE(gi, int, cap);
        LOSS_CARVE(cls, int, cap);
        LOSS_CARVE(tbox, float, cap * 4);
        LOSS_CARVE(pbox, float, cap * 4);
        LOSS_CARVE(dpbox, float, cap * 4);
        LOSS_CARVE(ciou, float, cap);
        LOSS_CARVE(dciou, float, cap);
        LOSS_CARVE(tobj, float, cells);
    }
#undef LOSS_CARVE
    return off;
}

size_t trn_loss_workspace_bytes(const struct trn_loss_cfg *cfg)
{
    if (loss_cfg_check(cfg) < 0) return 0;
    const size_t cap = (size_t)TRN_LOSS_OFFSETS * (size_t)cfg->na * (size_t)cfg->max_targets;
    return loss_layout(cfg, cap, NULL);
}

int trn_loss_create(const struct trn_loss_cfg *cfg, struct trn_loss **out)
{
    if (!out) return -EINVAL;
    const int rc = loss_cfg_check(cfg);
    if (rc < 0) return rc;
    struct trn_loss *const L = calloc(1, sizeof *L);
    if (!L) return -ENOMEM;
    L->cfg = *cfg;
    L->cap = (size_t)TRN_LOSS_OFFSETS * (size_t)cfg->na * (size_t)cfg->max_targets;
    const size_t bytes = loss_layout(cfg, L->cap, NULL);
    L->mem = aligned_alloc(64, bytes);
    if (!L->mem) {
        free(L);
        return -ENOMEM;
    }
    memset(L->mem, 0, bytes);
    loss_layout(cfg, L->cap, L);
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
    if (h->fl_gamma != 0.0 || h->cls_pw != 1.0 || h->obj_pw != 1.0) return -ENOTSUP;
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
    c.max_targets = max_targets;
    const int rc = loss_cfg_check(&c);
    if (rc < 0) return rc;
    *out = c;
    return 0;
}

/* torch.remainder(x, 1) for float32. */
static float loss_frac(float x)
{
    float r = fmodf(x, 1.0f);
    if (r != 0.0f && r < 0.0f) r += 1.0f;
    return r;
}

/* trunc(v) clamped to [0, hi]: .long() then clamp_(0, hi), without converting huge floats. */
static int loss_cell(float v, int hi)
{
    if (!(v > 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
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

int trn_loss_build_targets(struct trn_loss *L, const float *targets, int nt)
{
    if (!L || nt < 0 || (nt > 0 && !targets)) return -EINVAL;
    const struct trn_loss_cfg *const c = &L->cfg;
    for (int l = 0; l < c->nl; l++)
        L->lv[l].n = 0;
    if (nt > c->max_targets) return -E2BIG;
    const int rc = loss_check_targets(c, targets, nt);
    if (rc < 0) return rc;
    /* Offsets g * off (loss.py:185-194): centre, left (+x), up (+y), right (-x), down (-y). */
    static const float offx[TRN_LOSS_OFFSETS] = { 0.0f, 0.5f, 0.0f, -0.5f, 0.0f };
    static const float offy[TRN_LOSS_OFFSETS] = { 0.0f, 0.0f, 0.5f, 0.0f, -0.5f };
    const float g = 0.5f;
    int total = 0;
    for (int l = 0; l < c->nl; l++) {
        struct loss_level_ws *const w = &L->lv[l];
        const float fnx = (float)c->nx[l], fny = (float)c->ny[l];
        int n = 0;
        for (int o = 0; o < TRN_LOSS_OFFSETS; o++) {
            for (int a = 0; a < c->na; a++) {
                const float aw = c->anchors[l][a][0], ah = c->anchors[l][a][1];
                for (int t = 0; t < nt; t++) {
                    const float *const row = targets + 6 * (size_t)t;
                    const float gx = row[2] * fnx, gy = row[3] * fny;
                    const float gw = row[4] * fnx, gh = row[5] * fny;
                    const float rw = gw / aw, rh = gh / ah;
                    const float mw = fmaxf(rw, 1.0f / rw), mh = fmaxf(rh, 1.0f / rh);
                    if (!(fmaxf(mw, mh) < c->anchor_t)) continue;
                    const float gxi = fnx - gx, gyi = fny - gy;
                    int sel;
                    switch (o) {
                    case 1:
                        sel = loss_frac(gx) < g && gx > 1.0f;
                        break;
                    case 2:
                        sel = loss_frac(gy) < g && gy > 1.0f;
                        break;
                    case 3:
                        sel = loss_frac(gxi) < g && gxi > 1.0f;
                        break;
                    case 4:
                        sel = loss_frac(gyi) < g && gyi > 1.0f;
                        break;
                    default:
                        sel = 1;
                        break;
                    }
                    if (!sel) continue;
                    const int gi = loss_cell(gx - offx[o], c->nx[l] - 1);
                    const int gj = loss_cell(gy - offy[o], c->ny[l] - 1);
                    w->b[n] = (int)row[0];
                    w->a[n] = a;
                    w->gj[n] = gj;
                    w->gi[n] = gi;
                    w->cls[n] = (int)row[1];
                    float *const tb = w->tbox + 4 * (size_t)n;
                    tb[0] = gx - (float)gi;
                    tb[1] = gy - (float)gj;
                    tb[2] = gw;
                    tb[3] = gh;
                    n++;
                }
            }
        }
        w->n = n;
        total += n;
    }
    return total;
}

int trn_loss_level(const struct trn_loss *L, int l, struct trn_loss_level *out)
{
    if (!L || !out || l < 0 || l >= L->cfg.nl) return -EINVAL;
    const struct loss_level_ws *const w = &L->lv[l];
    out->n = w->n;
    out->b = w->b;
    out->a = w->a;
    out->gj = w->gj;
    out->gi = w->gi;
    out->cls = w->cls;
    out->tbox = w->tbox;
    out->ciou = w->ciou;
    return 0;
}

static float loss_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Offset of entry e's anchor row (its `no` logits) in p[l]. */
static size_t loss_row(const struct trn_loss_cfg *c, int l, const struct loss_level_ws *w, int e)
{
    const size_t cell = (((size_t)w->b[e] * (size_t)c->na + (size_t)w->a[e]) * (size_t)c->ny[l] +
                         (size_t)w->gj[e]) *
                            (size_t)c->nx[l] +
                        (size_t)w->gi[e];
    return cell * (size_t)(c->nc + 5);
}

int trn_loss_compute(struct trn_loss *L, struct kern_ctx *ctx, const float *const *p,
                     const float *targets, int nt, float *const *dp, struct trn_loss_items *items)
{
    if (!L || !ctx || !p || !items) return -EINVAL;
    const struct trn_loss_cfg *const c = &L->cfg;
    for (int l = 0; l < c->nl; l++)
        if (!p[l] || (dp && !dp[l])) return -EINVAL;
    int rc = trn_loss_build_targets(L, targets, nt);
    if (rc < 0) return rc;

    const int no = c->nc + 5;
    const float cp = 1.0f - 0.5f * c->label_smoothing, cn = 0.5f * c->label_smoothing;
    const float fbs = (float)c->bs;
    float lbox = 0.0f, lobj = 0.0f, lcls = 0.0f;
    for (int l = 0; l < c->nl; l++) {
        struct loss_level_ws *const w = &L->lv[l];
        const int n = w->n;
        const float *const pl = p[l];
        memset(w->tobj, 0, w->cells * sizeof *w->tobj);
        if (n > 0) {
            for (int e = 0; e < n; e++) {
                const float *const ps = pl + loss_row(c, l, w, e);
                float *const pb = w->pbox + 4 * (size_t)e;
                pb[0] = loss_sigmoid(ps[0]) * 2.0f - 0.5f;
                pb[1] = loss_sigmoid(ps[1]) * 2.0f - 0.5f;
                const float qw = loss_sigmoid(ps[2]) * 2.0f, qh = loss_sigmoid(ps[3]) * 2.0f;
                pb[2] = (qw * qw) * c->anchors[l][w->a[e]][0];
                pb[3] = (qh * qh) * c->anchors[l][w->a[e]][1];
            }
            if ((rc = kern_ref_ciou_fwd(ctx, w->ciou, w->pbox, w->tbox, (size_t)n)) < 0) return rc;
            double s = 0.0;
            for (int e = 0; e < n; e++) {
                s += (double)(1.0f - w->ciou[e]);
                /* Last entry in build order wins on a shared cell (see loss.h). */
                const size_t cell = loss_row(c, l, w, e) / (size_t)no;
                w->tobj[cell] = fmaxf(w->ciou[e], 0.0f);
            }
            lbox += (float)(s / n);
            if (c->nc > 1) {
                double sc = 0.0;
                for (int e = 0; e < n; e++) {
                    const float *const pc = pl + loss_row(c, l, w, e) + 5;
                    for (int k = 0; k < c->nc; k++) {
                        const float x = pc[k], t = k == w->cls[e] ? cp : cn;
                        sc += (double)(fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x))));
                    }
                }
                lcls += (float)(sc / ((double)n * (double)c->nc));
            }
        }
        float bo = 0.0f;
        if ((rc = kern_ref_bce_logits_fwd(ctx, &bo, pl + 4, w->tobj, w->cells, 1, (size_t)no)) < 0)
            return rc;
        lobj += bo * c->balance[l];
    }
    items->raw_box = lbox;
    items->raw_obj = lobj;
    items->raw_cls = lcls;
    items->lbox = lbox * c->box;
    items->lobj = lobj * c->obj;
    items->lcls = lcls * c->cls;
    items->total = (items->lbox + items->lobj + items->lcls) * fbs;
    if (!dp) return 0;

    /* d total = bs * (box d lbox + obj d lobj + cls d lcls). */
    for (int l = 0; l < c->nl; l++) {
        struct loss_level_ws *const w = &L->lv[l];
        const int n = w->n;
        const float *const pl = p[l];
        float *const dl = dp[l];
        memset(dl, 0, w->cells * (size_t)no * sizeof *dl);
        rc = kern_ref_bce_logits_bwd(ctx, dl + 4, pl + 4, w->tobj, w->cells, 1, (size_t)no,
                                     fbs * c->obj * c->balance[l], 0);
        if (rc < 0) return rc;
        if (n == 0) continue;
        const float gci = -(fbs * c->box) / (float)n;
        for (int e = 0; e < n; e++)
            w->dciou[e] = gci;
        rc = kern_ref_ciou_bwd(ctx, w->dpbox, NULL, w->dciou, w->pbox, w->tbox, (size_t)n, 0);
        if (rc < 0) return rc;
        const float gcls = (float)((double)(fbs * c->cls) / ((double)n * (double)c->nc));
        for (int e = 0; e < n; e++) {
            const size_t r = loss_row(c, l, w, e);
            const float *const ps = pl + r;
            float *const ds = dl + r;
            const float *const db = w->dpbox + 4 * (size_t)e;
            for (int k = 0; k < 2; k++) {
                const float s = loss_sigmoid(ps[k]);
                ds[k] += db[k] * 2.0f * (s * (1.0f - s));
            }
            for (int k = 2; k < 4; k++) {
                const float s = loss_sigmoid(ps[k]);
                const float q = s * 2.0f;
                ds[k] += ((db[k] * c->anchors[l][w->a[e]][k - 2]) * (2.0f * q)) * 2.0f *
                         (s * (1.0f - s));
            }
            if (c->nc > 1) {
                for (int k = 0; k < c->nc; k++) {
                    const float t = k == w->cls[e] ? cp : cn;
                    ds[5 + k] += (loss_sigmoid(ps[5 + k]) - t) * gcls;
                }
            }
        }
    }
    return 0;
}

const char *trn_loss_strerror(int rc)
{
    if (rc >= 0) return "success";
    if (rc == -TRN_LOSS_ETARGET) return "bad target row (non-finite, image or class out of range)";
    if (rc == -E2BIG) return "more targets than the loss workspace was planned for";
    if (rc == -ENOTSUP) return "focal loss and BCE positive weights are not implemented";
    return kern_strerror(rc);
}
