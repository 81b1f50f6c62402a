/*
 * ComputeLoss and the first optimizer step against the PyTorch parity dump
 * (tests/trainer/make_parity_ref.py: yolov5n, nc 80, 128x128, batch 2): the dump's Detect
 * outputs and targets go through trn_loss; build_targets indices and boxes, per-entry CIoU,
 * the loss sums, the logged items, the total and d total / d outputs are compared. Then the
 * schedule of the dump's three steps, and step 1 of SGD from the dump's initial weights and
 * gradients, element by element at the dump's sampled indices (the update is elementwise).
 * Steps 2 and 3 need the gradients at the updated weights, which only the network can make
 * (the full-trainer parity test covers them).
 *
 * Usage: test_loss_parity DUMP. Exit 77 if the dump file is absent.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kern.h"
#include "loss.h"
#include "optim.h"
#include "parity_dump.h"
#include "tap.h"

static const struct pdump_tensor *need(const struct pdump *d, const char *name)
{
    const struct pdump_tensor *t = pdump_find(d, name);
    if (!t) tap_diag("dump has no entry %s", name);
    return t;
}

static void check_loss(const struct pdump *d, const struct trn_model *m, struct kern_ctx *ctx)
{
    struct trn_hyp h;
    trn_hyp_default(&h);
    struct trn_loss_cfg c;
    ok(trn_loss_cfg_from_model(m, &h, 2, 128, 0.0f, 64, &c) == 0, "cfg for yolov5n at 128, bs 2");
    const struct pdump_tensor *hy = need(d, "hyp");
    if (hy && hy->numel == 8)
        ok(c.box == hy->data[0] && c.obj == hy->data[1] && c.cls == hy->data[2] &&
               c.balance[0] == hy->data[3] && c.balance[1] == hy->data[4] &&
               c.balance[2] == hy->data[5] && c.anchor_t == hy->data[6] && c.bs == (int)hy->data[7],
           "gains, balance, anchor_t and bs equal the dump's (%g %g %g)", c.box, c.obj, c.cls);
    struct trn_loss *L = NULL;
    if (trn_loss_create(&c, &L) < 0) {
        ok(0, "loss created");
        return;
    }
    const struct pdump_tensor *tg = need(d, "targets");
    const float *p[3];
    float *dp[3];
    size_t len[3];
    int have = tg != NULL;
    char name[64];
    for (int l = 0; l < 3; l++) {
        snprintf(name, sizeof name, "detect.%d", l);
        const struct pdump_tensor *t = need(d, name);
        len[l] = (size_t)c.bs * c.na * c.ny[l] * c.nx[l] * (c.nc + 5);
        have &= t && t->kind == PDUMP_FULL && t->numel == len[l];
        p[l] = t ? t->data : NULL;
        dp[l] = malloc(len[l] * sizeof(float));
    }
    ok(have, "dump has the Detect outputs (FULL, matching shapes) and targets");
    if (!have) goto out;
    struct trn_loss_items it;
    int rc = trn_loss_compute(L, ctx, p, tg->data, (int)(tg->numel / 6), dp, &it);
    ok(rc == 0, "compute on the dump's outputs (%s)", trn_loss_strerror(rc));
    for (int l = 0; l < 3; l++) {
        struct trn_loss_level lv;
        trn_loss_level(L, l, &lv);
        static const char *const fields[5] = { "b", "a", "gj", "gi", "tcls" };
        const int *const mine[5] = { lv.b, lv.a, lv.gj, lv.gi, lv.cls };
        snprintf(name, sizeof name, "bt.%d.b", l);
        const struct pdump_tensor *tb = need(d, name);
        is_int(lv.n, tb ? (long long)tb->numel : -1, "level %d: entry count", l);
        if (!tb || (size_t)lv.n != tb->numel) continue;
        int bad = 0;
        for (int f = 0; f < 5; f++) {
            snprintf(name, sizeof name, "bt.%d.%s", l, fields[f]);
            const struct pdump_tensor *t = need(d, name);
            for (int e = 0; t && e < lv.n; e++)
                if ((float)mine[f][e] != t->data[e]) {
                    if (bad++ < 4)
                        tap_diag("level %d %s[%d]: %d vs %g", l, fields[f], e, mine[f][e],
                                 t->data[e]);
                }
            bad += !t;
        }
        ok(bad == 0, "level %d: build_targets b, a, gj, gi, class identical, in order", l);
        snprintf(name, sizeof name, "bt.%d.tbox", l);
        const struct pdump_tensor *tt = need(d, name);
        double wt = 0.0;
        for (int e = 0; tt && e < 4 * lv.n; e++)
            wt = fmax(wt, fabs(lv.tbox[e] - tt->data[e]));
        ok(tt && wt <= 1e-6, "level %d: tbox (max err %.3g)", l, wt);
        snprintf(name, sizeof name, "loss.%d.iou", l);
        const struct pdump_tensor *ti = need(d, name);
        double wi = 0.0;
        for (int e = 0; ti && e < lv.n; e++)
            wi = fmax(wi, fabs(lv.ciou[e] - ti->data[e]));
        ok(ti && wi <= 1e-5, "level %d: CIoU per entry (max err %.3g)", l, wi);
    }
    struct {
        const char *name;
        float got;
    } sc[] = { { "loss.lbox", it.raw_box },
               { "loss.lobj", it.raw_obj },
               { "loss.lcls", it.raw_cls },
               { "loss.total", it.total } };
    for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++) {
        const struct pdump_tensor *t = need(d, sc[k].name);
        ok(t && fabs(sc[k].got - t->data[0]) <= 1e-4 * fabs(t->data[0]), "%s: %.8g vs %.8g",
           sc[k].name, sc[k].got, t ? t->data[0] : NAN);
    }
    const struct pdump_tensor *ti = need(d, "loss.items");
    ok(ti && fabs(it.lbox - ti->data[0]) <= 1e-4 * ti->data[0] &&
           fabs(it.lobj - ti->data[1]) <= 1e-4 * ti->data[1] &&
           fabs(it.lcls - ti->data[2]) <= 1e-4 * ti->data[2],
       "logged items (after gains) equal loss.items");
    struct pdump_tol tol;
    pdump_tol_default(&tol);
    tol.atol = 1e-8;
    tol.rtol = 1e-4;
    for (int l = 0; l < 3; l++) {
        snprintf(name, sizeof name, "dloss.detect.%d", l);
        struct pdump_result res;
        const int bad = pdump_compare_named(d, name, dp[l], len[l], &tol, stdout, &res);
        ok(bad == 0, "%s: d total / d output (max abs err %.3g, tensor rel %.3g)", name,
           res.max_abs_err, res.tensor_rel);
    }
out:
    for (int l = 0; l < 3; l++)
        free(dp[l]);
    trn_loss_destroy(L);
}

/* The dump's tensor PREFIX + T's name, when it has T's size; else NULL. */
static const struct pdump_tensor *dumped(const struct pdump *d, const char *prefix,
                                         const struct trn_tensor *T)
{
    char nm[160];
    snprintf(nm, sizeof nm, "%s%s", prefix, T->name);
    const struct pdump_tensor *t = pdump_find(d, nm);
    return t && t->numel == T->numel ? t : NULL;
}

static void check_step(const struct pdump *d, struct trn_model *m)
{
    struct trn_optim_opts o;
    trn_optim_opts_default(&o);
    o.batch_size = 2;
    o.nb = 100;
    o.epochs = 300;
    const struct pdump_tensor *lr = need(d, "step.lr"), *mo = need(d, "step.momentum");
    int bad = 0;
    for (int s = 0; lr && mo && s < 3; s++) {
        struct trn_optim_sched sc;
        trn_optim_schedule(&o, 0, s, &sc);
        for (int g = 0; g < 3; g++)
            bad += fabs(sc.lr[g] - lr->data[3 * s + g]) > 1e-7 * fmax(sc.lr[g], 1e-3);
        bad += fabs(sc.momentum - mo->data[s]) > 1e-7;
        bad += sc.accumulate != 1;
    }
    ok(lr && mo && bad == 0, "schedule of steps ni 0, 1, 2 equals step.lr / step.momentum");
    const struct pdump_tensor *ed = need(d, "step.ema_decay");
    ok(ed && fabs(trn_ema_decay(1) - ed->data[0]) < 1e-9 &&
           fabs(trn_ema_decay(3) - ed->data[2]) < 1e-9,
       "EMA decay of updates 1 and 3");

    /* Step 1 from the initial weights (trn_model_init seed 0) and the dump's gradients at the
     * sampled indices; other gradients are 0, which does not change sampled elements. */
    trn_model_init(m, 0);
    float *P = trn_model_arena(m, TRN_ARENA_PARAM);
    const size_t plen = trn_model_info(m)->arena_len[TRN_ARENA_PARAM];
    float *init = malloc(plen * sizeof(float)), *G = calloc(plen, sizeof(float));
    memcpy(init, P, plen * sizeof(float));
    int missing = 0, init_bad = 0;
    for (int g = 0; g < 3; g++) {
        const int *idx;
        const int n = trn_model_group(m, g, &idx);
        for (int k = 0; k < n; k++) {
            const struct trn_tensor *T = trn_model_tensor(m, idx[k]);
            const struct pdump_tensor *gt = dumped(d, "grad.", T), *it = dumped(d, "init.", T);
            if (!gt || !it) {
                missing++;
                continue;
            }
            for (size_t i = 0; i < gt->n_stored; i++) {
                const size_t j = pdump_index(gt, i);
                G[T->offset + j] = gt->data[i];
                init_bad += P[T->offset + pdump_index(it, i)] != it->data[i];
            }
        }
    }
    ok(missing == 0 && init_bad == 0, "initial weights equal init.* (%d missing, %d differ)",
       missing, init_bad);
    struct trn_optim *opt = NULL;
    trn_optim_create(m, &o, &opt);
    struct trn_optim_sched sc;
    trn_optim_schedule(&o, 0, 0, &sc);
    trn_optim_step(opt, P, G, &sc);
    size_t checked = 0, off = 0;
    double worst = 0.0;
    for (int g = 0; g < 3; g++) {
        const int *idx;
        const int n = trn_model_group(m, g, &idx);
        for (int k = 0; k < n; k++) {
            const struct trn_tensor *T = trn_model_tensor(m, idx[k]);
            const struct pdump_tensor *dt = dumped(d, "step1.delta.", T);
            if (!dt) {
                off++;
                continue;
            }
            for (size_t i = 0; i < dt->n_stored; i++) {
                const size_t j = T->offset + pdump_index(dt, i);
                const double got = (double)P[j] - (double)init[j], want = dt->data[i];
                /* A float32 weight holds the delta only to half an ulp of |w|. */
                const double tol1 = 0.6 * fabs(init[j]) * 1.2e-7 + 1e-4 * fabs(want) + 1e-12;
                worst = fmax(worst, fabs(got - want) / tol1);
                checked++;
            }
        }
    }
    ok(off == 0 && checked > 0 && worst <= 1.0,
       "SGD step 1 (nesterov, wd, warmup lr 0.1/0/0) at %zu sampled elements (worst %.3g of "
       "tolerance)",
       checked, worst);
    trn_optim_destroy(opt);
    free(init);
    free(G);
}

int main(int argc, char **argv)
{
    if (argc < 2 || access(argv[1], R_OK) != 0) tap_skip_all("parity dump not present");
    struct pdump *d = NULL;
    int rc = pdump_open(argv[1], &d);
    if (rc < 0) {
        printf("Bail out! %s: %s\n", argv[1], pdump_strerror(rc));
        return 99;
    }
    char path[1024], err[256];
    struct trn_model *m = NULL;
    if (trn_model_cfg_find("yolov5n", TRN_TEST_MODELS_DIR, path, sizeof path) < 0 ||
        trn_model_load(path, NULL, &m, err, sizeof err) < 0) {
        printf("Bail out! cannot load yolov5n.yaml\n");
        return 99;
    }
    trn_model_init(m, 0);
    struct kern_ctx *ctx = NULL;
    kern_ctx_create(NULL, &ctx);
    check_loss(d, m, ctx);
    check_step(d, m);
    kern_ctx_destroy(ctx);
    trn_model_destroy(m);
    pdump_close(d);
    return tap_done();
}
