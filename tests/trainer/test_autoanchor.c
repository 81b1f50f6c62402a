/*
 * AutoAnchor (trainer/train/autoanchor.h) on yolov5n's anchors:
 *  - labels shaped like the anchors: BPR above 0.98, one "good fit" line, the anchors untouched;
 *  - thin labels (aspect 1:12) that no yolov5 anchor recalls: BPR below 0.98, k-means and
 *    evolution, the anchors replaced by a set whose BPR is higher (and is what trn_autoanchor
 *    reports, recomputed here independently), per level in stride order, fp16 values, >= 2 px;
 *  - the same seed gives the same anchors, the messages are ultralytics';
 *  - a dataset too small for k-means falls back to random anchors and says so;
 *  - with ../shared, coco128 at 320 from its label files: BPR after evolution within 0.01 of
 *    ultralytics' 0.9935 (train.py's log for yolov5n on coco128 at --img 320).
 * Usage: test_autoanchor MODELS_DIR SHARED_DIR
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "autoanchor.h"
#include "model.h"
#include "tap.h"

static char models[1024];
static char logbuf[16384];

static void grab(void *ctx, const char *line)
{
    (void)ctx;
    strncat(logbuf, line, sizeof logbuf - strlen(logbuf) - 2);
    strcat(logbuf, "\n");
}

static struct trn_model *yolov5n(void)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/yolov5n.yaml", models);
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    struct trn_model *m = NULL;
    char err[256];
    if (trn_model_load(path, &o, &m, err, sizeof err)) {
        printf("Bail out! %s: %s\n", path, err);
        exit(99);
    }
    trn_model_init(m, 0);
    return m;
}

static float *anchors(struct trn_model *m)
{
    const struct trn_model_info *I = trn_model_info(m);
    for (int i = 0; i < I->n_tensors; i++) {
        const struct trn_tensor *t = trn_model_tensor(m, i);
        if (t->role == TRN_T_ANCHORS) return (float *)trn_model_arena(m, t->arena) + t->offset;
    }
    return NULL;
}

/* A synthetic set: n images of w0 x h0, each with labels drawn by a fixed LCG. */
struct set {
    size_t n_img;
    float shape[2 * 512];
    size_t first[513];
    float wh[2 * 4096];
};

static unsigned lcg = 12345;
static float unit(void)
{
    lcg = lcg * 1103515245u + 12345u;
    return (float)((lcg >> 8) & 0xffff) / 65536.0f;
}

static void make(struct set *s, size_t n_img, int per, float wlo, float whi, float aspect)
{
    s->n_img = n_img;
    size_t k = 0;
    for (size_t i = 0; i < n_img; i++) {
        s->shape[2 * i] = 640.0f, s->shape[2 * i + 1] = 480.0f;
        s->first[i] = k;
        for (int j = 0; j < per; j++, k++) {
            const float w = wlo + (whi - wlo) * unit();
            s->wh[2 * k] = w, s->wh[2 * k + 1] = fminf(w * aspect, 1.0f);
        }
    }
    s->first[n_img] = k;
}

/* BPR of pixel anchors k (nk) on the set at img without the random scale, for a cross-check. */
static double bpr_of(const struct set *s, const float *k, int nk, int img, float thr)
{
    size_t got = 0, n = 0;
    for (size_t i = 0; i < s->n_img; i++) {
        const float sc = img / fmaxf(s->shape[2 * i], s->shape[2 * i + 1]);
        for (size_t l = s->first[i]; l < s->first[i + 1]; l++, n++) {
            float best = 0;
            for (int j = 0; j < nk; j++) {
                const float rw = s->wh[2 * l] * s->shape[2 * i] * sc / k[2 * j];
                const float rh = s->wh[2 * l + 1] * s->shape[2 * i + 1] * sc / k[2 * j + 1];
                const float x = fminf(fminf(rw, 1 / rw), fminf(rh, 1 / rh));
                best = fmaxf(best, x);
            }
            got += best > thr;
        }
    }
    return n ? (double)got / n : 0;
}

static void test_good_fit(void)
{
    struct trn_model *m = yolov5n();
    const float *a = anchors(m);
    float before[18];
    memcpy(before, a, sizeof before);
    static struct set s;
    make(&s, 64, 6, 0.05f, 0.4f, 1.0f); /* squares of 24..190 px at 640 */
    struct trn_autoanchor_result r;
    logbuf[0] = '\0';
    is_int(trn_autoanchor(m, &(struct trn_anchor_data){ s.n_img, s.shape, s.first, s.wh }, 640, 4.0,
                          0, grab, NULL, &r),
           0, "good fit: runs");
    ok(r.bpr > 0.98 && !r.evolved && !r.replaced, "good fit: BPR %.3f, nothing evolved", r.bpr);
    ok(!memcmp(before, a, sizeof before), "good fit: the anchors are untouched");
    ok(strstr(logbuf, "Best Possible Recall (BPR). Current anchors are a good fit to dataset") &&
           !strchr(strchr(logbuf, '\n') + 1, '\n'),
       "good fit: one line, ultralytics' words");
    trn_model_destroy(m);
}

static void test_evolve(void)
{
    struct trn_model *m = yolov5n(), *m2 = yolov5n();
    const struct trn_model_info *I = trn_model_info(m);
    static struct set s;
    make(&s, 100, 8, 0.004f, 0.008f, 30.0f); /* 2.6..5 px wide, 30x as tall */
    const struct trn_anchor_data d = { s.n_img, s.shape, s.first, s.wh };
    struct trn_autoanchor_result r, r2;
    logbuf[0] = '\0';
    is_int(trn_autoanchor(m, &d, 640, 4.0, 7, grab, NULL, &r), 0, "thin labels: runs");
    ok(r.bpr < 0.98 && r.evolved && r.replaced && r.new_bpr > r.bpr,
       "thin labels: BPR %.3f -> %.3f, evolved and replaced", r.bpr, r.new_bpr);
    float px[18];
    const float *a = anchors(m);
    bool fp16 = true, big = true, order = true;
    double prev_area = 0;
    for (int l = 0; l < I->nl; l++) {
        double area = 0;
        for (int j = 0; j < I->na; j++)
            for (int c = 0; c < 2; c++) {
                const float g = a[(l * I->na + j) * 2 + c];
                fp16 &= g == trn_model_round_fp16(g);
                px[(l * I->na + j) * 2 + c] = g * I->stride[l];
                big &= g * I->stride[l] >= 1.99f;
            }
        for (int j = 0; j < I->na; j++)
            area += px[(l * I->na + j) * 2] * px[(l * I->na + j) * 2 + 1];
        order &= area >= prev_area;
        prev_area = area;
    }
    ok(fp16 && big && order,
       "the new anchors: fp16 values, >= 2 px, mean area growing with stride");
    const double b = bpr_of(&s, px, 9, 640, 0.25f);
    ok(b > 0.98, "recomputed here, the new anchors recall %.3f of the labels", b);
    ok(strstr(logbuf, "Anchors are a poor fit to dataset") &&
           strstr(logbuf, "Running kmeans for 9 anchors on 800 points") &&
           strstr(logbuf, "Evolving anchors with Genetic Algorithm: fitness = ") &&
           strstr(logbuf, "thr=0.25: ") && strstr(logbuf, "n=9, img_size=640, metric_all=") &&
           strstr(logbuf, "Done"),
       "ultralytics' messages in order");
    is_int(trn_autoanchor(m2, &d, 640, 4.0, 7, NULL, NULL, &r2), 0, "again, same seed");
    ok(!memcmp(anchors(m2), a, 18 * sizeof(float)) && r2.new_bpr == r.new_bpr,
       "the same seed gives the same anchors");
    trn_model_destroy(m);
    trn_model_destroy(m2);
}

static void test_tiny(void)
{
    struct trn_model *m = yolov5n();
    static struct set s;
    make(&s, 1, 4, 0.002f, 0.004f, 15.0f); /* 4 labels: fewer than 9 anchors */
    struct trn_autoanchor_result r;
    logbuf[0] = '\0';
    is_int(trn_autoanchor(m, &(struct trn_anchor_data){ s.n_img, s.shape, s.first, s.wh }, 640, 4.0,
                          1, grab, NULL, &r),
           0, "4 labels: runs");
    ok(strstr(logbuf, "switching strategies from kmeans to random init") != NULL,
       "fewer labels than anchors: random init, said");
    struct trn_autoanchor_result z;
    is_int(trn_autoanchor(m, &(struct trn_anchor_data){ 0, NULL, NULL, NULL }, 640, 4.0, 1, grab,
                          NULL, &z),
           0, "no images: nothing to do");
    is_int(trn_autoanchor(m, &(struct trn_anchor_data){ 0, NULL, NULL, NULL }, 640, 0.5, 1, NULL,
                          NULL, &z),
           -22, "anchor_t below 1: -EINVAL");
    trn_model_destroy(m);
}

/* An image's size from its JPEG header (TurboJPEG, as the packer reads it). */
static int jpeg_size(const char *path, int *w, int *h)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static unsigned char buf[1 << 21];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tjhandle tj = tjInitDecompress();
    int sub = 0, cs = 0;
    const int rc = tj ? tjDecompressHeader3(tj, buf, n, w, h, &sub, &cs) : -1;
    if (tj) tjDestroy(tj);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_coco128(const char *shared)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/datasets/coco128/images/train2017", shared);
    DIR *d = opendir(dir);
    if (!d) {
        ok(1, "# SKIP %s is absent (../shared)", dir);
        return;
    }
    char *names[256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 256;)
        if (strstr(e->d_name, ".jpg")) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    static struct set s;
    size_t k = 0;
    s.n_img = 0;
    for (int i = 0; i < n; i++) {
        char p[1500];
        int w, h;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (jpeg_size(p, &w, &h)) continue;
        snprintf(p, sizeof p, "%s/datasets/coco128/labels/train2017/%.*s.txt", shared,
                 (int)(strlen(names[i]) - 4), names[i]);
        s.shape[2 * s.n_img] = (float)w, s.shape[2 * s.n_img + 1] = (float)h;
        s.first[s.n_img] = k;
        FILE *f = fopen(p, "r");
        float c, x, y, bw, bh;
        while (f && fscanf(f, "%f %f %f %f %f", &c, &x, &y, &bw, &bh) == 5 && k < 4096)
            s.wh[2 * k] = bw, s.wh[2 * k + 1] = bh, k++;
        if (f) fclose(f);
        s.n_img++;
    }
    s.first[s.n_img] = k;
    for (int i = 0; i < n; i++)
        free(names[i]);
    struct trn_model *m = yolov5n();
    struct trn_autoanchor_result r;
    logbuf[0] = '\0';
    is_int(trn_autoanchor(m, &(struct trn_anchor_data){ s.n_img, s.shape, s.first, s.wh }, 320, 4.0,
                          0, grab, NULL, &r),
           0, "coco128 at 320: runs (%zu images, %zu labels)", s.n_img, k);
    const char *t = strstr(logbuf, "thr=0.25: ");
    const double after = t ? atof(t + 10) : 0;
    ok(r.bpr < 0.98 && r.replaced && fabs(after - 0.9935) <= 0.01,
       "coco128 at 320: BPR %.3f (ultralytics 0.957) evolved to %.4f (ultralytics 0.9935)", r.bpr,
       after);
    trn_model_destroy(m);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("Bail out! usage: test_autoanchor MODELS_DIR SHARED_DIR\n");
        return 99;
    }
    snprintf(models, sizeof models, "%s", argv[1]);
    test_good_fit();
    test_evolve();
    test_tiny();
    test_coco128(argv[2]);
    return tap_done();
}
