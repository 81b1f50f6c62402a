/*
 * yolo-val --half (trn_val_opts.amp = KERN_DT_F16: fp16 convolutions with float32 accumulation,
 * BN, SiLU, decode and NMS in float32; net.h AUTOCAST) against the float32 run of the same
 * weights on the same records:
 *   (default)   a yolo-synth dataset with yolov5n's initial weights: both exit 0 on the same
 *               images and labels, the same detection count within 2%, mAP50-95 within 0.01 and
 *               at least 95% of the 300 most confident float32 detections found again (same
 *               image and class, IoU >= 0.9) in the --half predictions (--save-json);
 *   --coco128   the official yolov5n.pt on the whole of coco128 packed at 320: mAP50-95 within
 *               0.005 and mAP50 within 0.01 of float32, and 95% of the 300 most confident
 *               float32 detections found again at IoU >= 0.9 (skips without ../shared).
 * The tolerances: fp16 keeps 11 significant bits, so each conv's output moves by about 2^-11
 * relative; boxes move by a fraction of a pixel and only detections near a threshold (conf,
 * NMS IoU, the 10 matching IoUs) change side, a few in a thousand.
 * usage: test_val_half YOLO_VAL YOLO_SYNTH YOLO_PACK SHARED_DIR [--coco128]
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_testutil.h"
#include "tap.h"

static void show_stderr(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    char *e = slurp(p, NULL);
    if (e && e[0]) tap_diag("stderr: %.600s", e);
    free(e);
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1e9;
}

/* yolo-val ... --json --save-json into runs/NAME; the parsed metrics (NULL on failure). */
static cJSON *val_run_x(const char *val, const char *records, const char *model, int img,
                        const char *name, bool half, const char *extra)
{
    const int rc = run("%s --records %s %s --img %d --batch-size 8 --project %s/runs --name %s "
                       "--exist-ok --json --save-json --no-plots --workers 1%s%s",
                       val, records, model, img, dir, name, half ? " --half" : "", extra);
    if (rc) show_stderr();
    is_int(rc, 0, "yolo-val%s%s exits 0", half ? " --half" : "", extra);
    char p[512];
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    char *t = slurp(p, NULL);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    return j;
}

static cJSON *val_run(const char *val, const char *records, const char *model, int img,
                      const char *name, bool half)
{
    return val_run_x(val, records, model, img, name, half, " --device cpu");
}

/* The predictions json of runs/NAME (the only *_predictions.json there), parsed. */
static cJSON *preds(const char *name)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s/runs/%s/*_predictions.json", dir, name);
    FILE *pf = popen(cmd, "r");
    char path[600] = "";
    if (pf) {
        if (!fgets(path, sizeof path, pf)) path[0] = '\0';
        pclose(pf);
    }
    path[strcspn(path, "\n")] = '\0';
    char *t = path[0] ? slurp(path, NULL) : NULL;
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    return j;
}

struct det {
    double img, cls, x, y, w, h, score;
};

static int load_dets(const cJSON *a, struct det **out)
{
    const int n = cJSON_GetArraySize(a);
    struct det *d = calloc((size_t)n + 1, sizeof *d);
    if (!d) return -1;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        const cJSON *bb = cJSON_GetObjectItemCaseSensitive(e, "bbox");
        d[i].img = num(e, "image_id");
        d[i].cls = num(e, "category_id");
        d[i].score = num(e, "score");
        d[i].x = cJSON_GetArrayItem(bb, 0) ? cJSON_GetArrayItem(bb, 0)->valuedouble : 0;
        d[i].y = cJSON_GetArrayItem(bb, 1) ? cJSON_GetArrayItem(bb, 1)->valuedouble : 0;
        d[i].w = cJSON_GetArrayItem(bb, 2) ? cJSON_GetArrayItem(bb, 2)->valuedouble : 0;
        d[i].h = cJSON_GetArrayItem(bb, 3) ? cJSON_GetArrayItem(bb, 3)->valuedouble : 0;
    }
    *out = d;
    return n;
}

static int by_score_desc(const void *a, const void *b)
{
    const double x = ((const struct det *)a)->score, y = ((const struct det *)b)->score;
    return (x < y) - (x > y);
}

static double iou(const struct det *a, const struct det *b)
{
    const double ix = fmin(a->x + a->w, b->x + b->w) - fmax(a->x, b->x);
    const double iy = fmin(a->y + a->h, b->y + b->h) - fmax(a->y, b->y);
    const double i = ix > 0 && iy > 0 ? ix * iy : 0;
    const double u = a->w * a->h + b->w * b->h - i;
    return u > 0 ? i / u : 0;
}

/* Of the `top` most confident float32 detections, how many have a --half detection of the same
 * image and class at IoU >= 0.9. */
static int matched(const char *a_name, const char *b_name, int top, int *n_a, int *n_b)
{
    cJSON *ja = preds(a_name), *jb = preds(b_name);
    struct det *a = NULL, *b = NULL;
    *n_a = ja ? load_dets(ja, &a) : -1;
    *n_b = jb ? load_dets(jb, &b) : -1;
    int m = 0;
    if (*n_a > 0 && *n_b > 0) {
        qsort(a, (size_t)*n_a, sizeof *a, by_score_desc);
        if (top > *n_a) top = *n_a;
        for (int i = 0; i < top; i++) {
            bool hit = false;
            for (int k = 0; k < *n_b && !hit; k++)
                hit = b[k].img == a[i].img && b[k].cls == a[i].cls && iou(&a[i], &b[k]) >= 0.9;
            m += hit;
        }
    }
    free(a);
    free(b);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return m;
}

static void compare(const char *val, const char *records, const char *model, int img,
                    double map_tol, double map50_tol, bool count_tol)
{
    cJSON *f = val_run(val, records, model, img, "f32", false);
    cJSON *h = val_run(val, records, model, img, "f16", true);
    if (!ok(f && h, "both runs print one JSON object")) {
        cJSON_Delete(f);
        cJSON_Delete(h);
        return;
    }
    tap_diag("fp32: P %.4f R %.4f mAP50 %.4f mAP50-95 %.4f, %g detections, %.1f ms/img",
             num(f, "precision"), num(f, "recall"), num(f, "map50"), num(f, "map50_95"),
             num(f, "detections"), num(cJSON_GetObjectItem(f, "ms_per_image"), "inference"));
    tap_diag("fp16: P %.4f R %.4f mAP50 %.4f mAP50-95 %.4f, %g detections, %.1f ms/img",
             num(h, "precision"), num(h, "recall"), num(h, "map50"), num(h, "map50_95"),
             num(h, "detections"), num(cJSON_GetObjectItem(h, "ms_per_image"), "inference"));
    ok(num(f, "images") == num(h, "images") && num(f, "instances") == num(h, "instances") &&
           num(f, "images") > 0,
       "the same images and labels (%g, %g)", num(h, "images"), num(h, "instances"));
    const double dm = fabs(num(f, "map50_95") - num(h, "map50_95"));
    const double d50 = fabs(num(f, "map50") - num(h, "map50"));
    ok(dm <= map_tol, "mAP50-95 within %g of fp32 (|diff| %.5f)", map_tol, dm);
    ok(d50 <= map50_tol, "mAP50 within %g of fp32 (|diff| %.5f)", map50_tol, d50);
    if (count_tol) {
        const double nf = num(f, "detections"), nh = num(h, "detections");
        ok(nf > 0 && fabs(nf - nh) <= 0.02 * nf, "detections within 2%% (%g vs %g)", nh, nf);
    }
    int na = 0, nb = 0;
    const int top = 300, m = matched("f32", "f16", top, &na, &nb);
    const int want = na < top ? na : top;
    ok(na > 0 && nb > 0 && m >= (int)ceil(0.95 * want),
       "%d of the %d most confident fp32 boxes found again in --half's at IoU >= 0.9", m, want);
    cJSON_Delete(f);
    cJSON_Delete(h);
}

/* The predictions of runs/NAME as printed JSON text (NULL if missing). */
static char *preds_text(const char *name)
{
    cJSON *j = preds(name);
    char *t = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return t;
}

/* yolo-val --device-path (validation's GPU data path: device arenas, one upload of the weights,
 * the cast kept, run on the CPU ops) gives the plain CPU run's metrics and predictions exactly,
 * in float32 and --half; --device N without such a GPU is refused with the device named. */
static void device_path(const char *val, const char *records, const char *model, int img)
{
    for (int half = 0; half <= 1; half++) {
        const char *a = half ? "h_cpu" : "f_cpu", *b = half ? "h_dp" : "f_dp";
        cJSON *f = val_run_x(val, records, model, img, a, half, " --device cpu");
        cJSON *d = val_run_x(val, records, model, img, b, half, " --device cpu --device-path");
        char *pf = preds_text(a), *pd = preds_text(b);
        ok(f && d && num(f, "map50_95") == num(d, "map50_95") &&
               num(f, "map50") == num(d, "map50") && num(f, "detections") == num(d, "detections"),
           "%s: --device-path gives the CPU run's metrics (mAP50-95 %.5f, %g detections)",
           half ? "fp16" : "fp32", f ? num(f, "map50_95") : -1, f ? num(f, "detections") : -1);
        ok(pf && pd && strlen(pf) > 2 && !strcmp(pf, pd),
           "%s: --device-path predictions equal the CPU run's (%zu bytes of JSON)",
           half ? "fp16" : "fp32", pf ? strlen(pf) : 0);
        cJSON_free(pf);
        cJSON_free(pd);
        cJSON_Delete(f);
        cJSON_Delete(d);
    }
    /* a device number past the visible ones: exit 1 naming it (no GPU here, or not that many) */
    const int rc = run("%s --records %s %s --img %d --device 63 --project %s/runs --name nodev "
                       "--exist-ok --workers 1",
                       val, records, model, img, dir);
    char p[512];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    char *e = slurp(p, NULL);
    ok(rc == 1 && e && strstr(e, "--device 63") && strstr(e, "not there"),
       "--device 63: exit 1, the device named (%d)", rc);
    free(e);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        printf("usage: test_val_half YOLO_VAL YOLO_SYNTH YOLO_PACK SHARED_DIR [--coco128]\n");
        return 99;
    }
    const bool coco = argc > 5 && !strcmp(argv[5], "--coco128");
    char ds[PATH_MAX], w[PATH_MAX + 32];
    if (coco) {
        snprintf(ds, sizeof ds, "%s/datasets/coco128", argv[4]);
        snprintf(w, sizeof w, "%s/weights/yolov5n.pt", argv[4]);
        if (access(ds, R_OK) || access(w, R_OK))
            tap_skip_all("no ../shared/datasets/coco128 or ../shared/weights/yolov5n.pt");
    }
    static char val_abs[PATH_MAX];
    if (!realpath(argv[1], val_abs)) return 99;
    snprintf(dir, sizeof dir, "/tmp/test_val_half_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    char rec[400], model[PATH_MAX + 64];
    snprintf(rec, sizeof rec, "%s/val.ffr", dir);
    if (coco) {
        const int made = run("%s %s -o %s --size 320 --interp val -q", argv[3], ds, rec) == 0;
        if (!ok(made, "yolo-pack coco128 at 320")) {
            show_stderr();
            return tap_done();
        }
        snprintf(model, sizeof model, "--weights %s", w);
        compare(val_abs, rec, model, 320, 0.005, 0.01, false);
    } else {
        const int made = run("%s %s/synth --split val2017=12 --seed 3 --min-side 64 "
                             "--max-side 200 --format yolo --classes 4 --max-objects 4",
                             argv[2], dir) == 0 &&
                         run("%s %s/synth/synth.yaml --split val -o %s --size 160 --interp val "
                             "-q -j 1",
                             argv[3], dir, rec) == 0;
        if (!ok(made, "yolo-synth and yolo-pack made the dataset")) {
            show_stderr();
            return tap_done();
        }
        snprintf(model, sizeof model, "--cfg yolov5n");
        compare(val_abs, rec, model, 160, 0.01, 0.01, true);
        device_path(val_abs, rec, model, 160);
        /* --half is a flag: a value is refused */
        is_int(run("%s --records %s --cfg yolov5n --img 160 --half=1", val_abs, rec), 2,
               "--half=1: exit 2 (a flag takes no value)");
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) tap_diag("could not remove %s", dir);
    return tap_done();
}
