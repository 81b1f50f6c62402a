/*
 * The activation plan: one arena, every forward tensor at its own aligned offset, shapes that
 * chain (each conv reads a tensor with its c1 channels), the recipe's spatial sizes, Detect
 * outputs at 80/40/20, and image sizes the model cannot take refused with the row named. The
 * gradient arena: offsets distinct but where a bottleneck input shares its residual sum's.
 * Concat inputs are channel slices of their buffer (forward and gradient) at their offsets.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_testutil.h"
#include "tap.h"

static int cmp_offset(const void *a, const void *b)
{
    const struct trn_act *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void check_plan(const struct trn_model *m, int batch, int h, int w)
{
    const struct trn_model_info *I = trn_model_info(m);
    struct trn_act_plan p;
    char err[256];
    const int rc = trn_model_plan(m, batch, h, w, &p, err, sizeof err);
    if (!ok(rc == 0, "%s: plan %d x %dx%d", I->name, batch, h, w)) {
        tap_diag("%s", err);
        return;
    }
    /* disjoint, aligned, inside total: every act but the concat slices, which lie inside
       their concat buffer (model.h CONCAT SLICES; checked below) */
    struct trn_act *sorted = malloc((size_t)p.n_acts * sizeof *sorted);
    int n_own = 0, n_fslice = 0, n_gslice = 0;
    for (int i = 0; i < p.n_acts; i++) {
        if (!p.acts[i].nstride) sorted[n_own++] = p.acts[i];
        n_fslice += p.acts[i].nstride != 0;
        n_gslice += p.acts[i].dnstride != 0;
    }
    qsort(sorted, (size_t)n_own, sizeof *sorted, cmp_offset);
    int bad = 0;
    size_t end = 0, sum = 0;
    for (int i = 0; i < n_own; i++) {
        const struct trn_act *a = &sorted[i];
        bad += a->offset < end || a->offset % TRN_MODEL_ALIGN ||
               a->numel != (size_t)a->n * a->c * a->h * a->w || a->n != batch;
        end = a->offset + a->numel;
        sum += a->numel;
    }
    free(sorted);
    bad += end > p.total;
    is_int(bad, 0,
           "%d activations (%d more in concat slices): disjoint, aligned, in the arena "
           "(%zu floats)",
           n_own, n_fslice, p.total);
    ok(p.total - sum < (size_t)n_own * TRN_MODEL_ALIGN, "only alignment padding is wasted");
    /* every concat input is a slice (yolov5's C3, SPPF and Concat inputs all qualify), at its
       channel offset of the buffer, forward and, where placed, gradient */
    int n_inputs = 0, n_ginputs = 0;
    bad = 0;
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = trn_model_layer(m, i);
        const struct trn_act_layer *al = &p.layers[i];
        int src[TRN_MODEL_MAX_FROM + 4], coff[TRN_MODEL_MAX_FROM + 4], k = 0;
        if (L->type == TRN_MOD_C3) {
            const int last = L->n ? L->conv0 + 4 + 2 * (L->n - 1) : L->conv0;
            src[k] = p.convs[last].add >= 0 ? p.convs[last].add : p.convs[last].act;
            coff[k++] = 0;
            src[k] = p.convs[L->conv0 + 1].act;
            coff[k++] = L->hidden;
        } else if (L->type == TRN_MOD_SPPF) {
            src[k] = p.convs[L->conv0].act;
            coff[k++] = 0;
            for (int j = 0; j < 3; j++) {
                src[k] = al->pool[j];
                coff[k++] = (j + 1) * L->hidden;
            }
        } else if (L->type == TRN_MOD_CONCAT) {
            int off = 0;
            for (int j = 0; j < L->n_from; j++) {
                src[k] = L->from[j] < 0 ? 0 : p.layers[L->from[j]].out;
                coff[k++] = off;
                off += p.acts[src[k - 1]].c;
            }
        }
        for (int j = 0; j < k; j++) {
            const struct trn_act *a = &p.acts[src[j]], *c = &p.acts[al->cat];
            const size_t plane = (size_t)c->h * c->w, whole = (size_t)c->c * plane;
            n_inputs++;
            bad += a->nstride != whole || a->offset != c->offset + (size_t)coff[j] * plane;
            n_ginputs += a->dnstride != 0;
            if (a->dnstride)
                bad += a->dnstride != whole || a->doff != c->doff + (size_t)coff[j] * plane;
        }
    }
    is_int(bad, 0,
           "%d concat inputs: %d forward slices, %d with gradient slices (%d acts share them), at "
           "their offsets",
           n_inputs, n_fslice, n_ginputs, n_gslice);
    ok(strcmp(p.acts[0].name, "input") == 0 && p.acts[0].c == I->ch && p.acts[0].h == h &&
           p.acts[0].w == w,
       "acts[0] is the input batch");
    /* every conv reads a tensor of its input channels and writes c2 at its own size */
    bad = 0;
    for (int i = 0; i < I->n_convs; i++) {
        const struct trn_conv *c = trn_model_conv(m, i);
        const struct trn_act_conv *ac = &p.convs[i];
        const struct trn_act *in = &p.acts[ac->in], *o = &p.acts[ac->conv];
        const int oh = (in->h + 2 * c->p - c->k) / c->s + 1;
        bad += in->c != c->c1 || o->c != c->c2 || o->h != oh;
        if (c->bn && ac->add >= 0) /* shortcut cv2: the sum stands in for its SiLU output */
            bad += ac->bn != -1 || ac->act != -1 || i < 1 || p.convs[i - 1].act != ac->in;
        else if (c->bn)
            bad += ac->bn != -1 || ac->act < 0 || p.acts[ac->act].c != c->c2;
        else
            bad += ac->bn != -1 || ac->act != -1;
        if (ac->add >= 0) bad += p.acts[ac->add].c != c->c2 || p.acts[ac->add].h != o->h;
    }
    is_int(bad, 0, "conv inputs and outputs chain with matching channels and sizes");
    /* gradients: aligned, inside dtotal, distinct but for each shortcut bottleneck's input
       sharing its sum's (inside a C3 every one does: its only readers are cv1 and the add) */
    bad = 0;
    int shared = 0, sums = 0;
    for (int i = 0; i < p.n_acts; i++) {
        const struct trn_act *a = &p.acts[i];
        const size_t extent =
            a->dnstride ? (size_t)(a->n - 1) * a->dnstride + (size_t)a->c * a->h * a->w : a->numel;
        bad += a->doff % TRN_MODEL_ALIGN != 0 || a->doff + extent > p.dtotal;
        for (int j = i + 1; j < p.n_acts; j++) {
            const struct trn_act *b = &p.acts[j];
            if (a->doff >= b->doff + b->numel || b->doff >= a->doff + a->numel) continue;
            /* a gradient slice inside its buffer's gradient, or two slices of one buffer at
               different channels (their ranges interleave, their elements do not) */
            if ((a->dnstride && a->dnstride == (size_t)b->c * b->h * b->w && !b->dnstride) ||
                (b->dnstride && b->dnstride == (size_t)a->c * a->h * a->w && !a->dnstride) ||
                (a->dnstride && a->dnstride == b->dnstride && a->doff != b->doff))
                continue;
            int ok_pair = 0; /* i is the input of a cv2 whose sum is j, or of the same chain */
            for (int k = 0; k < I->n_convs; k++)
                if (k > 0 && p.convs[k].add >= 0 && p.convs[k - 1].in == i &&
                    p.acts[p.convs[k].add].doff == b->doff && a->doff == b->doff &&
                    a->numel == b->numel)
                    ok_pair = 1;
            bad += !ok_pair;
            shared += ok_pair;
        }
    }
    for (int k = 0; k < I->n_convs; k++)
        sums += p.convs[k].add >= 0;
    is_int(bad, 0,
           "gradient offsets: aligned, in dtotal (%zu floats, total %zu), shared only by "
           "a bottleneck input and its sum",
           p.dtotal, p.total);
    ok(sums > 0 && shared >= sums && p.dtotal < p.total, "%d residual sums, %d gradient sharings",
       sums, shared);
    /* layer outputs: Concat buffers hold the sum of their inputs, C3 cat holds 2 c_ */
    bad = 0;
    for (int i = 0; i < I->n_layers; i++) {
        const struct trn_layer *L = trn_model_layer(m, i);
        const struct trn_act_layer *al = &p.layers[i];
        if (L->type == TRN_MOD_DETECT) continue;
        bad += p.acts[al->out].c != L->c_out || p.acts[al->out].h != al->h;
        if (L->type == TRN_MOD_C3) bad += al->cat < 0 || p.acts[al->cat].c != 2 * L->hidden;
        if (L->type == TRN_MOD_SPPF)
            bad += al->cat < 0 || p.acts[al->cat].c != 4 * L->hidden || al->pool[2] < 0;
        if (L->type == TRN_MOD_CONCAT) bad += al->cat != al->out;
    }
    is_int(bad, 0, "row outputs, C3/SPPF/Concat buffers have the right channels");
    const struct trn_layer *D = trn_model_layer(m, I->detect);
    bad = 0;
    for (int l = 0; l < I->nl; l++) {
        const struct trn_act *o = &p.acts[p.convs[D->conv0 + l].conv];
        bad += o->c != I->na * I->no || o->h != h / I->stride[l] || o->w != w / I->stride[l];
    }
    is_int(bad, 0, "Detect outputs: na*no channels at h/8, h/16, h/32");
    tap_diag("%s batch %d at %dx%d: %d activation tensors, %.1f MiB", I->name, batch, h, w,
             p.n_acts, (double)p.total * 4 / (1 << 20));
    trn_act_plan_free(&p);
}

int main(void)
{
    struct trn_model *m = tu_model_load("yolov5s", 0);
    check_plan(m, 2, 640, 640);
    check_plan(m, 3, 320, 256);
    struct trn_act_plan p;
    char err[256];
    is_int(trn_model_plan(m, 1, 640, 640, &p, err, sizeof err), 0, "plan s at 640");
    static const int hw[25] = { 320, 160, 160, 80, 80, 40, 40, 20, 20, 20, 20, 40, 40,
                                40,  40,  80,  80, 80, 40, 40, 40, 20, 20, 20, 80 };
    int bad = 0;
    for (int i = 0; i < 25; i++)
        bad += p.layers[i].h != hw[i] || p.layers[i].w != hw[i];
    is_int(bad, 0, "row sizes at 640 are the recipe's");
    ok(strcmp(p.acts[p.convs[0].conv].name, "model.0.conv") == 0 &&
           strcmp(p.acts[p.convs[0].act].name, "model.0.act") == 0,
       "names: model.0.conv / model.0.act");
    trn_act_plan_free(&p);

    /* 650 is not a multiple of 32: layer 12 concatenates 42x42 with 41x41 */
    is_int(trn_model_plan(m, 1, 650, 640, &p, err, sizeof err), -TRN_MODEL_ESHAPE,
           "650x640 is refused");
    ok(strstr(err, "layer 12: Concat inputs differ") != NULL, "message names the row: %s", err);
    is_int(trn_model_plan(m, 0, 640, 640, &p, err, sizeof err), -EINVAL, "batch 0: -EINVAL");
    is_int(trn_model_plan(m, 1, 8, 8, &p, err, sizeof err), -TRN_MODEL_ESHAPE, "8x8 is too small");
    trn_act_plan_free(NULL);
    trn_model_destroy(m);

    m = tu_model_load("yolov5n", 0);
    check_plan(m, 1, 128, 128);
    trn_model_destroy(m);
    return tap_done();
}
