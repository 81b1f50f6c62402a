/* COCOeval on hand-built cases (pycocotools is not packaged in Debian), the results-json writer
 * and the annotation reader. Every expected statistic is derived in a comment. Stats order:
 * AP, AP50, AP75, APs, APm, APl, AR1, AR10, AR100, ARs, ARm, ARl. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cocoeval.h"
#include "tap.h"

static char err[256];

static int load(const char *json, struct trn_coco_gt *gt)
{
    return trn_coco_gt_parse(json, strlen(json), "test.json", gt, err, sizeof(err));
}

static int stats_eq(const double *got, const double *want, const char *what)
{
    int good = 1;
    for (int i = 0; i < TRN_COCO_NSTATS; i++)
        good &= fabs(got[i] - want[i]) < 1e-12;
    if (!ok(good, "%s", what)) {
        for (int i = 0; i < TRN_COCO_NSTATS; i++)
            tap_diag("stat %d: got %.15g want %.15g", i, got[i], want[i]);
    }
    return good;
}

static struct trn_coco_det cdet(int64_t img, int cat, double x, double y, double w, double h,
                                double s)
{
    struct trn_coco_det d = { img, cat, { x, y, w, h }, s };
    return d;
}

int main(void)
{
    struct trn_coco_gt gt;
    double st[TRN_COCO_NSTATS];

    /* Case 1: one small GT (area 100) and its exact detection. Every threshold matches:
     * AP = AP50 = AP75 = APs = 1; medium/large: the GT is ignored (outside the range), the
     * detection matches it and is ignored too, no non-ignored GT -> -1. AR1/10/100/ARs = 1. */
    ok(load("{\"images\":[{\"id\":1,\"width\":100,\"height\":100}],"
            "\"annotations\":[{\"id\":1,\"image_id\":1,\"category_id\":1,"
            "\"bbox\":[0,0,10,10],\"area\":100,\"iscrowd\":0,\"segmentation\":[[0,0,1,1]]}],"
            "\"categories\":[{\"id\":1,\"name\":\"a\"}]}",
            &gt) == 0,
       "parse case 1 (%s)", err);
    struct trn_coco_det d1 = cdet(1, 1, 0, 0, 10, 10, .9);
    const double w1[12] = { 1, 1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1 };
    ok(trn_coco_eval(&gt, NULL, 0, &d1, 1, st, err, sizeof(err)) == 0, "eval case 1");
    stats_eq(st, w1, "case 1: a perfect small detection");
    /* A detection on an image not in the annotations: loadRes's assertion -> error. */
    struct trn_coco_det dx = cdet(7, 1, 0, 0, 10, 10, .9);
    ok(trn_coco_eval(&gt, NULL, 0, &dx, 1, st, err, sizeof(err)) == -EINVAL &&
           strstr(err, "image_id 7"),
       "unknown image is an error: %s", err);
    trn_coco_gt_free(&gt);

    /* Case 2: crowd, duplicate, a category without GT (3), a category without detections (2).
     * GT: g1 cat1 [0,0,100,100] area 10000 (large); g2 cat1 CROWD [200,0,100,100];
     *     g3 cat2 [0,200,50,50] area 2500 (medium).
     * Dets: d1 cat1 = g1, .9 (TP); d2 cat1 = g1 again, .8 (duplicate: g1 taken -> FP);
     *       d3 cat1 [210,10,50,50] .95 inside the crowd: IoU = inter / det area = 2500/2500
     *       = 1 -> matched to an ignored GT -> ignored; d4 cat3 [0,0,10,10] .6.
     * cat1/all: sorted d3 ignored, d1 TP, d2 FP; npig 1; rc [0,1,1], pr [0,1,.5] -> envelope
     *   [1,1,.5]: threshold 0 reads index 0 (1), the others index 1 (1) -> precision 1 at all
     *   101 and all 10 IoUs; recall 1. (Were d3 not ignored, it would be an FP ranked first.)
     * cat2/all: GT, no detections -> precision 0, recall 0. cat3: no GT -> -1 (excluded).
     * AP = AP50 = AP75 = mean(1 x 1010, 0 x 1010) = .5. small: no category has a non-ignored
     * small GT -> -1. medium: only cat2 (g3) -> 0. large: only cat1 (g1; d2 is a large FP
     * after d1) -> 1. AR1: cat1's first detection is d3 (ignored) -> recall 0, cat2 0 -> 0;
     * AR10 = AR100 = (1 + 0) / 2 = .5;
     * ARs -1, ARm 0, ARl 1. */
    ok(load("{\"images\":[{\"id\":1},{\"id\":2}],\"annotations\":["
            "{\"id\":1,\"image_id\":1,\"category_id\":1,\"bbox\":[0,0,100,100],\"area\":10000,"
            "\"iscrowd\":0},"
            "{\"id\":2,\"image_id\":1,\"category_id\":1,\"bbox\":[200,0,100,100],\"area\":10000,"
            "\"iscrowd\":1},"
            "{\"id\":3,\"image_id\":1,\"category_id\":2,\"bbox\":[0,200,50,50],\"area\":2500,"
            "\"iscrowd\":0}],"
            "\"categories\":[{\"id\":3,\"name\":\"c\"},{\"id\":1,\"name\":\"a\"},"
            "{\"id\":2,\"name\":\"b\"}]}",
            &gt) == 0,
       "parse case 2 (%s)", err);
    struct trn_coco_det d2[4] = { cdet(1, 1, 0, 0, 100, 100, .9), cdet(1, 1, 0, 0, 100, 100, .8),
                                  cdet(1, 1, 210, 10, 50, 50, .95), cdet(1, 3, 0, 0, 10, 10, .6) };
    const double w2[12] = { .5, .5, .5, -1, 0, 1, 0, .5, .5, -1, 0, 1 };
    ok(trn_coco_eval(&gt, NULL, 0, d2, 4, st, err, sizeof(err)) == 0, "eval case 2");
    stats_eq(st, w2, "case 2: crowd, duplicate, categories without GT / detections");
    /* Restricting imgIds to image 2 (no GT, no detections there): every category -1. */
    const int64_t only2 = 2;
    const double wneg[12] = { -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1 };
    ok(trn_coco_eval(&gt, &only2, 1, d2, 4, st, err, sizeof(err)) == 0, "eval on image 2");
    stats_eq(st, wneg, "imgIds restriction: detections of other images are not evaluated");
    /* Case 2b, without the crowd flag: d3 is an FP (IoU 2500/10000 = .25 < .5 with g2, now a
     * regular GT and an FN). cat1 sorted: d3 FP, d1 TP, d2 FP; npig 2. rc [0,.5,.5],
     * pr [0,.5,1/3] -> envelope [.5,.5,1/3]; thresholds <= .5 (51 of them: 0, .01, ..., .5)
     * read .5, above: past the end -> 0. AP cat1 = 51 * .5 / 101; with cat2 at 0:
     * AP = 25.5 / 202. AR100 = (.5 + 0) / 2 = .25. */
    trn_coco_gt_free(&gt);
    ok(load("{\"images\":[{\"id\":1}],\"annotations\":["
            "{\"id\":1,\"image_id\":1,\"category_id\":1,\"bbox\":[0,0,100,100],\"area\":10000},"
            "{\"id\":2,\"image_id\":1,\"category_id\":1,\"bbox\":[200,0,100,100],\"area\":10000},"
            "{\"id\":3,\"image_id\":1,\"category_id\":2,\"bbox\":[0,200,50,50],\"area\":2500}],"
            "\"categories\":[{\"id\":1,\"name\":\"a\"},{\"id\":2,\"name\":\"b\"}]}",
            &gt) == 0,
       "parse case 2b (%s)", err);
    ok(trn_coco_eval(&gt, NULL, 0, d2, 3, st, err, sizeof(err)) == 0, "eval case 2b");
    ok(fabs(st[0] - 25.5 / 202) < 1e-12 && fabs(st[8] - .25) < 1e-12,
       "case 2b: no crowd flag -> FP and FN (AP %.15g, AR %.15g)", st[0], st[8]);
    trn_coco_gt_free(&gt);

    /* Case 3: maxDets. One small GT [0,0,10,10] (area 100); 99 far detections with scores
     * .99 down to .50 ((99 - i) / 100 + .5 ... all above .3), then the exact one at .3 (rank
     * 100). AP: the TP is the 100th: rc jumps to 1 at index 99 with pr = 1 / (99 + 1 + eps)
     * = .01; the envelope is .01 everywhere before, so every threshold reads .01: AP = .01
     * (small the same). AR100 = 1, AR10 = AR1 = 0. Medium/large: GT ignored, every
     * detection has area 100 (outside) and is ignored -> -1.
     * With one more far detection above it, the TP falls to rank 101 and is cut by
     * maxDets 100: AP = 0, AR100 = 0. */
    ok(load("{\"images\":[{\"id\":5}],\"annotations\":[{\"id\":9,\"image_id\":5,"
            "\"category_id\":1,\"bbox\":[0,0,10,10],\"area\":100,\"iscrowd\":0}],"
            "\"categories\":[{\"id\":1,\"name\":\"a\"}]}",
            &gt) == 0,
       "parse case 3 (%s)", err);
    struct trn_coco_det d3[101];
    for (int i = 0; i < 100; i++)
        d3[i] = cdet(5, 1, 500 + 20 * i, 500, 10, 10, .99 - .004 * i);
    d3[99] = cdet(5, 1, 0, 0, 10, 10, .3);
    const double w3[12] = { .01, .01, .01, .01, -1, -1, 0, 0, 1, 1, -1, -1 };
    ok(trn_coco_eval(&gt, NULL, 0, d3, 100, st, err, sizeof(err)) == 0, "eval case 3");
    stats_eq(st, w3, "case 3: the TP at rank 100");
    d3[100] = d3[99];
    d3[99] = cdet(5, 1, 3000, 500, 10, 10, .31);
    const double w3b[12] = { 0, 0, 0, 0, -1, -1, 0, 0, 0, 0, -1, -1 };
    ok(trn_coco_eval(&gt, NULL, 0, d3, 101, st, err, sizeof(err)) == 0, "eval case 3b");
    stats_eq(st, w3b, "case 3b: the TP at rank 101 is cut by maxDets 100");
    trn_coco_gt_free(&gt);

    /* Case 4: the GT 'area' field, not its box, picks the range. GT box 40x40 (1600, medium)
     * but area 900 (small); its exact detection (box area 1600). small: GT counted, TP -> 1.
     * medium: the GT is ignored (900 < 1024); the detection matches it -> ignored -> -1.
     * Two images (ids 1, 2) with one such GT each and a detection only on image 2 at IoU .6
     * ([0,0,40,24]: 960/1600): matched at .50, .55, .60 only. Sorted: the image-1 TP (.9)
     * then the image-2 one (.8): recall .5, 1 at t <= .6 -> AP 1; for t >= .65 recall .5 with
     * precision 1 then .5: thresholds <= .5 read 1, above read 0 -> 51/101.
     * AP = (3 * 1 + 7 * 51/101) / 10; AP50 = 1; AP75 = 51/101; APs = AP; APm -1; APl -1.
     * AR1 = AR10 = AR100 = mean over t of recall = (3 * 1 + 7 * .5) / 10 = .65 (one detection
     * per image, so maxDets 1 sees both); ARs = .65. */
    ok(load("{\"images\":[{\"id\":1},{\"id\":2}],\"annotations\":["
            "{\"id\":1,\"image_id\":1,\"category_id\":4,\"bbox\":[0,0,40,40],\"area\":900},"
            "{\"id\":2,\"image_id\":2,\"category_id\":4,\"bbox\":[0,0,40,40],\"area\":900}],"
            "\"categories\":[{\"id\":4,\"name\":\"d\"}]}",
            &gt) == 0,
       "parse case 4 (%s)", err);
    struct trn_coco_det d4[2] = { cdet(1, 4, 0, 0, 40, 40, .9), cdet(2, 4, 0, 0, 40, 24, .8) };
    const double ap4 = (3 + 7 * 51.0 / 101) / 10;
    const double w4[12] = { ap4, 1, 51.0 / 101, ap4, -1, -1, .65, .65, .65, .65, -1, -1 };
    ok(trn_coco_eval(&gt, NULL, 0, d4, 2, st, err, sizeof(err)) == 0, "eval case 4");
    stats_eq(st, w4, "case 4: area field, two images, IoU .6");
    trn_coco_gt_free(&gt);

    /* Reader errors name the file and the entry. */
    ok(load("{\"images\":[],\"annotations\":[{\"id\":1,\"image_id\":1,\"category_id\":1,"
            "\"bbox\":[0,0,1,1]}],\"categories\":[]}",
            &gt) == -EINVAL &&
           strstr(err, "test.json: annotations[0]") && strstr(err, "area"),
       "missing area: %s", err);
    ok(load("{\"images\":[", &gt) == -EINVAL && strstr(err, "not valid json"), "truncated json");
    ok(trn_coco_gt_load("/nonexistent/x.json", &gt, err, sizeof(err)) == -ENOENT,
       "missing file: %s", err);

    /* coco80_to_coco91. */
    ok(trn_coco80_to_coco91(0) == 1 && trn_coco80_to_coco91(11) == 13 &&
           trn_coco80_to_coco91(79) == 90 && trn_coco80_to_coco91(80) == -1,
       "coco80_to_coco91");

    /* save_one_json: xyxy (2.0005, 2, 12.5, 22.25) conf 0.123456 (float32). w = 10.4995 and
     * x = 2.0005 in float32 are 10.49950027... and 2.00049996...: rounded to 3 decimals
     * 10.5 and 2.0; h = 20.25, y = 2.0; score 0.12345600128 -> 0.12346. */
    struct trn_det td = { 2.0005f, 2.0f, 12.5f, 22.25f, 0.123456f, 11 };
    struct trn_coco_det cd;
    trn_coco_det_from(&td, 42, trn_coco80_to_coco91(td.cls), &cd);
    ok(cd.bbox[0] == 2.0 && cd.bbox[1] == 2.0 && cd.bbox[2] == 10.5 && cd.bbox[3] == 20.25 &&
           cd.score == 0.12346 && cd.category_id == 13,
       "save_one_json rounding (%.17g %.17g %.17g)", cd.bbox[0], cd.bbox[2], cd.score);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct trn_coco_det two[2] = { cd, cdet(7, 1, 1.5, 0, 3, 4, 1) };
    ok(f && trn_coco_dets_write(f, two, 2) == 0 && fclose(f) == 0, "write json");
    const char *want = "[{\"image_id\": 42, \"category_id\": 13, \"bbox\": [2.0, 2.0, 10.5, "
                       "20.25], \"score\": 0.12346}, {\"image_id\": 7, \"category_id\": 1, "
                       "\"bbox\": [1.5, 0.0, 3.0, 4.0], \"score\": 1.0}]";
    ok(buf && !strcmp(buf, want), "json.dump format: %s", buf ? buf : "(null)");
    /* Round trip through the reader. */
    char path[] = "/tmp/test_cocoeval_XXXXXX";
    const int fd = mkstemp(path);
    FILE *g = fd >= 0 ? fdopen(fd, "w") : NULL;
    struct trn_coco_det *rd = NULL;
    size_t rn = 0;
    ok(g && fputs(buf, g) >= 0 && fclose(g) == 0 &&
           trn_coco_dets_load(path, &rd, &rn, err, sizeof(err)) == 0 && rn == 2 &&
           rd[0].image_id == 42 && rd[0].bbox[3] == 20.25 && rd[1].score == 1.0,
       "results json round trip");
    free(rd);
    free(buf);
    remove(path);
    return tap_done();
}
