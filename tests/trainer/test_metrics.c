/* numpy reproductions, process_batch, compute_ap, ap_per_class, fitness and the confusion
 * matrix on hand cases; every expected value is derived in a comment. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "metrics.h"
#include "tap.h"

static int near(double a, double b, double tol)
{
    return fabs(a - b) <= tol;
}

static struct trn_det det(float x1, float y1, float x2, float y2, float conf, int cls)
{
    struct trn_det d = { x1, y1, x2, y2, conf, cls };
    return d;
}

static struct trn_label lab(int cls, float x1, float y1, float x2, float y2)
{
    struct trn_label l = { cls, x1, y1, x2, y2 };
    return l;
}

int main(void)
{
    /* --- numpy --- */
    /* np.interp(x, [0,1,1,2], [0,1,2,3]): x = 1 hits xp[2] (the last xp <= 1) -> 2; 0.5 -> 0.5;
     * 1.5 -> 2 + (3-2)/(2-1) * 0.5 = 2.5; -1 -> left; 3 -> right; 2 -> fp[-1] = 3. */
    const double xp[4] = { 0, 1, 1, 2 }, fp[4] = { 0, 1, 2, 3 };
    const double x[6] = { 1, 0.5, 1.5, -1, 3, 2 };
    double y[6];
    trn_np_interp(x, 6, xp, fp, 4, -7, 9, y);
    ok(y[0] == 2 && y[1] == 0.5 && y[2] == 2.5 && y[3] == -7 && y[4] == 9 && y[5] == 3,
       "np.interp: duplicates, edges, left/right (%g %g %g %g %g %g)", y[0], y[1], y[2], y[3], y[4],
       y[5]);
    /* Pairwise sum: [1e16, 1 x 7]. numpy: ((1e16+1) + (1+1)) + ((1+1) + (1+1)): 1e16+1 rounds to
     * 1e16 (ulp 2, ties to even), + 2 + 4 -> 1e16 + 6. A sequential sum stays at 1e16. */
    double v[8] = { 1e16, 1, 1, 1, 1, 1, 1, 1 };
    ok(trn_np_sum(v, 8, 1) == 1e16 + 6, "pairwise summation as numpy (%.17g)", trn_np_sum(v, 8, 1));
    double big[300];
    for (int i = 0; i < 300; i++)
        big[i] = i + 1;
    ok(trn_np_sum(big, 300, 1) == 45150.0, "pairwise sum of 1..300 = 45150");
    double ls[101];
    trn_np_linspace(0, 1, 101, ls);
    ok(ls[0] == 0 && ls[50] == 0.5 && ls[100] == 1.0, "linspace(0, 1, 101)");
    /* trapz of y = x on [0, 1] = 0.5. */
    ok(near(trn_np_trapz(ls, ls, 101), 0.5, 1e-15), "trapz(x, x) = 0.5");

    /* --- compute_ap --- */
    double ap = -1;
    /* recall [1], precision [1]: mrec [0,1,1], mpre [1,1,0]; interp gives 1 on [0, 1) and, at
     * x = 1 (== xp[-1]), fp[-1] = 0. trapz: 99 intervals of 0.01 * 1 + 0.01 * (1 + 0) / 2
     * = 0.995 (ultralytics' well-known AP of a perfect detector). */
    const double r1[1] = { 1 }, p1[1] = { 1 };
    ok(trn_compute_ap(r1, p1, 1, &ap) == 0 && near(ap, 0.995, 1e-12), "perfect AP = 0.995 (%.17g)",
       ap);
    /* recall [.5,.5,1], precision [1,.5,2/3]: mrec [0,.5,.5,1,1], envelope of [1,1,.5,2/3,0]
     * = [1,1,2/3,2/3,0]. y = 1 for x < .5, 2/3 at .5 (xp hit, index 2) and on (.5, 1), 0 at 1.
     * trapz = 49 * .01 + .01 * (1 + 2/3) / 2 + 49 * .01 * 2/3 + .01 * (2/3) / 2
     *       = .49 + 1/120 + .98/3 + 1/300 = 0.828333... */
    const double r3[3] = { .5, .5, 1 }, p3[3] = { 1, .5, 2.0 / 3 };
    const double want3 = .49 + 1.0 / 120 + .98 / 3 + 1.0 / 300;
    ok(trn_compute_ap(r3, p3, 3, &ap) == 0 && near(ap, want3, 1e-12), "hand PR curve AP %.12f", ap);
    /* No points: mrec [0,1], mpre [1,0]: y = 1 - x, trapz = 0.5. */
    ok(trn_compute_ap(NULL, NULL, 0, &ap) == 0 && near(ap, 0.5, 1e-12), "empty curve AP = 0.5");

    /* --- iouv --- */
    float iouv[TRN_NIOU];
    trn_iouv(iouv);
    ok(iouv[0] == 0.5f && iouv[9] == 0.95f && near(iouv[5], 0.75, 1e-6), "iouv 0.5:0.05:0.95");

    /* --- process_batch: where ultralytics' unique rule differs from greedy matching ---
     * L0 = [0,0,10,10]; L1 = [0,0,10,13.2258] (area 132.258); D0 = [0,0,10,7.2] conf .9,
     * D1 = [0,0,10,8.2] conf .8, all class 0. IoU: D0-L0 72/100 = .72, D1-L0 .82,
     * D0-L1 72/132.258 = .544, D1-L1 82/132.258 = .62.
     * t = .50, .55, .60: every det's best label is L0 (.72, .82) -> L0 keeps the lowest det
     *   index D0; L1 stays unmatched (a greedy matcher would give D1 to L1: 2 TP, here 1).
     * t = .65, .70: pairs D0-L0, D1-L0 -> D0.   t = .75, .80: only D1-L0 -> D1.
     * t >= .85: nothing. */
    struct trn_label L[2] = { lab(0, 0, 0, 10, 10), lab(0, 0, 0, 10, 13.2258f) };
    struct trn_det D[3] = { det(0, 0, 10, 7.2f, .9f, 0), det(0, 0, 10, 8.2f, .8f, 0),
                            det(0, 0, 10, 10, .7f, 1) };
    uint8_t cor[3 * TRN_NIOU];
    const uint8_t want_d0[TRN_NIOU] = { 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 };
    const uint8_t want_d1[TRN_NIOU] = { 0, 0, 0, 0, 0, 1, 1, 0, 0, 0 };
    ok(trn_process_batch(D, 3, L, 2, cor) == 0, "process_batch runs");
    ok(!memcmp(cor, want_d0, TRN_NIOU), "D0: matched at .50-.70 (unique per label, lowest index)");
    ok(!memcmp(cor + TRN_NIOU, want_d1, TRN_NIOU), "D1: only at .75-.80, never to L1");
    /* D2 is class 1 over L0 (IoU 1): class mismatch, never correct. */
    int any = 0;
    for (int t = 0; t < TRN_NIOU; t++)
        any |= cor[2 * TRN_NIOU + t];
    ok(!any, "a box of another class is never correct");
    /* Per detection the highest IoU wins, wherever the label sits: D = [0,0,10,9] class 0 vs
     * Lr = {L1 (IoU 90/132.258 = .68), L0 (.9)}: its label is L0 at every threshold up to .9,
     * so it is correct at .85 but not at .95 (taking the first valid label L1 would stop at
     * .65). */
    struct trn_det Dh = det(0, 0, 10, 9, .9f, 0);
    struct trn_label Lr[2] = { L[1], L[0] };
    ok(trn_process_batch(&Dh, 1, Lr, 2, cor) == 0 && cor[7] == 1 && cor[8] == 1 && cor[9] == 0,
       "single detection: correct up to its best IoU");

    /* The same with competition: D0 = [0,0,10,9] (L1 .68, L0 .9) and D1 = [0,5,10,13.2258]
     * (L1: 82.258/132.258 = .622; L0: 50/132.258 = .378). D0 keeps L0 (its best), so L1 is
     * free for D1: both correct at .50-.60; D1 not at .65 (.622). Had D0 taken its first
     * valid label L1, L1 would go to D0 and D1 would be an FP. */
    struct trn_det Dc[2] = { det(0, 0, 10, 9, .9f, 0), det(0, 5, 10, 13.2258f, .8f, 0) };
    ok(trn_process_batch(Dc, 2, Lr, 2, cor) == 0 && cor[0] && cor[8] && !cor[9] &&
           cor[TRN_NIOU + 0] && cor[TRN_NIOU + 2] && !cor[TRN_NIOU + 3],
       "each detection takes its highest-IoU label, freeing the others");

    /* --- ap_per_class with unmatched classes ---
     * nc 3; labels: class 0 x2, class 1 x1; detections (conf, class, TP at every threshold):
     * (.9,0,TP) (.8,0,FP) (.7,0,TP) (.95,2,FP: class 2 has no labels, so no row).
     * Class 0: recall [.5,.5,1], precision [1,.5,2/3] -> AP = want3 at all 10 thresholds.
     * Class 1: no detections -> p = r = ap = 0. mAP50 = mAP = want3 / 2.
     * P/R: class-0 F1 = 2*(2/3)*1/(5/3) = 0.8 for every confidence <= .7 (px[0..699]), lower
     * above; class 1 F1 = 0. The class-mean F1 is a plateau of 0.4 on [0, 699], the smoothed
     * curve equals it (same summands) up to index 649 and decreases after, so argmax = 0:
     * p0 = 2/3, r0 = 1, tp0 = round(1 * 2) = 2, fp0 = round(2 / (2/3) - 2) = 1; mp = 1/3,
     * mr = 1/2. */
    uint8_t tp[4 * TRN_NIOU];
    const float conf[4] = { .9f, .8f, .7f, .95f };
    const int pcls[4] = { 0, 0, 0, 2 }, tcls[3] = { 0, 1, 0 };
    for (int t = 0; t < TRN_NIOU; t++) {
        tp[0 * TRN_NIOU + t] = 1;
        tp[1 * TRN_NIOU + t] = 0;
        tp[2 * TRN_NIOU + t] = 1;
        tp[3 * TRN_NIOU + t] = 0;
    }
    struct trn_ap_result res;
    ok(trn_ap_per_class(tp, conf, pcls, 4, tcls, 3, 3, &res) == 0, "ap_per_class runs");
    ok(res.n_cls == 2 && res.cls[0] == 0 && res.cls[1] == 1, "rows: the classes with labels");
    ok(near(res.ap50[0], want3, 1e-12) && near(res.ap5095[0], want3, 1e-12), "class 0 AP %.12f",
       res.ap50[0]);
    ok(res.ap50[1] == 0 && res.p[1] == 0 && res.r[1] == 0, "class 1 (no detections) all zero");
    ok(near(res.map50, want3 / 2, 1e-12) && near(res.map5095, want3 / 2, 1e-12), "mAP %.12f",
       res.map50);
    is_int(res.conf_index, 0, "max smoothed F1 at the first confidence of the plateau");
    ok(near(res.p[0], 2.0 / 3, 1e-15) && res.r[0] == 1, "class 0 P = 2/3, R = 1");
    ok(res.tp[0] == 2 && res.fp[0] == 1, "class 0 tp 2, fp 1");
    ok(near(res.mp, 1.0 / 3, 1e-15) && near(res.mr, 0.5, 1e-15), "mp 1/3, mr 1/2");
    ok(res.nt[0] == 2 && res.nt[1] == 1 && res.nt[2] == 0 && res.n_labels == 3, "nt per class");
    trn_ap_result_free(&res);
    /* No correct detection anywhere: val.py leaves everything 0. */
    for (int t = 0; t < TRN_NIOU; t++)
        tp[0 * TRN_NIOU + t] = tp[2 * TRN_NIOU + t] = 0;
    ok(trn_ap_per_class(tp, conf, pcls, 4, tcls, 3, 3, &res) == 0 && res.n_cls == 0 &&
           res.map50 == 0 && res.nt[0] == 2,
       "no TP: zeros, as val.py");
    trn_ap_result_free(&res);
    const int bad[1] = { 3 };
    ok(trn_ap_per_class(tp, conf, bad, 1, tcls, 3, 3, &res) == -EINVAL, "class out of range");
    trn_ap_result_free(&res);

    /* Accumulator: the process_batch case above through trn_val_stats: D0 TP at .5, D1 FP, D2
     * (class 1, no class-1 label) FP; class 0 has 2 labels. Class 0: recall [.5, .5],
     * precision [1, .5] at t=0 -> mrec [0,.5,.5,1], envelope [1,1,.5,0]: y = 1 on [0,.5),
     * .5 at .5, then .5 + (x-.5)/.5 * (0-.5) down to 0 at 1.
     * trapz = .49 + .01*(1+.5)/2 + integral of .5*(1-(x-.5)/.5) on [.5,1] (linear, exact
     * under trapz) = .49 + .0075 + .125 = .6225. */
    struct trn_val_stats *st = NULL;
    ok(trn_val_stats_create(2, &st) == 0, "stats create");
    ok(trn_val_stats_add(st, D, 3, L, 2) == 0, "stats add image");
    ok(trn_val_stats_add(st, NULL, 0, NULL, 0) == 0, "empty image still seen");
    ok(trn_val_stats_compute(st, &res) == 0 && res.n_cls == 1 && near(res.ap50[0], .6225, 1e-12),
       "AP50 through the accumulator %.12f", res.n_cls ? res.ap50[0] : -1);
    is_int(trn_val_stats_seen(st), 2, "seen counts every image");
    trn_ap_result_free(&res);
    trn_val_stats_destroy(st);

    /* fitness: 0.1 * .4 + 0.9 * .3 = 0.31. */
    ok(near(trn_fitness(.5, .5, .4, .3), 0.31, 1e-15), "fitness 0.1/0.9");

    /* --- confusion matrix (nc 2: rows pred 0, 1, bg; columns true 0, 1, bg) ---
     * Labels: A cls0 [0,0,10,10], B cls1 [20,20,30,30], C cls0 [50,50,60,60].
     * D0 cls0 .9 on A (IoU 1) -> [0][0]; D1 cls0 .8 on B -> [0][1]; D2 cls1 .2 on C is below
     * conf .25 -> C unmatched -> [bg][0]; D3 cls1 .5 far away, unmatched while the image has
     * matches -> [1][bg]. */
    struct trn_confusion *cm = NULL;
    ok(trn_confusion_create(2, .25f, .45f, &cm) == 0, "confusion create");
    struct trn_label CL[3] = { lab(0, 0, 0, 10, 10), lab(1, 20, 20, 30, 30),
                               lab(0, 50, 50, 60, 60) };
    struct trn_det CD[4] = { det(0, 0, 10, 10, .9f, 0), det(20, 20, 30, 30, .8f, 0),
                             det(50, 50, 60, 60, .2f, 1), det(100, 100, 110, 110, .5f, 1) };
    ok(trn_confusion_add(cm, CD, 4, CL, 3) == 0, "confusion add");
    const double want_m[9] = { 1, 1, 0, 0, 0, 1, 1, 0, 0 };
    ok(!memcmp(trn_confusion_matrix(cm), want_m, sizeof(want_m)), "confusion matrix counts");
    /* An image without any match: the label is a background FN, the far detection is NOT
     * counted as background FP (ultralytics' `if n:`): [bg][0] += 1 only. No detections: each
     * label a background FN: [bg][1] += 1. No labels: nothing. */
    ok(trn_confusion_add(cm, &CD[3], 1, &CL[0], 1) == 0 &&
           trn_confusion_add(cm, NULL, 0, &CL[1], 1) == 0 &&
           trn_confusion_add(cm, &CD[0], 1, NULL, 0) == 0,
       "confusion: three more images");
    const double want_m2[9] = { 1, 1, 0, 0, 0, 1, 2, 1, 0 };
    ok(!memcmp(trn_confusion_matrix(cm), want_m2, sizeof(want_m2)), "no-match and no-det images");
    /* Two detections on one label: the higher IoU keeps it, the other is background FP.
     * E0 cls1 [0,0,10,9] (IoU .9 with A), E1 cls0 [0,0,10,10] (IoU 1): A -> E1: [0][0]; E0 ->
     * [1][bg]. */
    struct trn_det E[2] = { det(0, 0, 10, 9, .9f, 1), det(0, 0, 10, 10, .8f, 0) };
    ok(trn_confusion_add(cm, E, 2, &CL[0], 1) == 0, "confusion: duplicate detections");
    const double want_m3[9] = { 2, 1, 0, 0, 0, 2, 2, 1, 0 };
    ok(!memcmp(trn_confusion_matrix(cm), want_m3, sizeof(want_m3)), "highest IoU keeps the label");
    trn_confusion_destroy(cm);
    return tap_done();
}
