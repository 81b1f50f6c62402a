/*
 * COCO JSON layouts through pack_ds_scan, on small hand-written annotation files: box conversion,
 * crowd, zero-size and duplicate boxes, unknown categories and images, missing image files,
 * polygons (one part, several parts merged as JSON2YOLO does, unusable ones), class mapping
 * (COCO's 80 and other category sets), backgrounds, root detection and format override.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "test_dataset_util.h"

static char err[1024];

static void show_warn(void *u, const struct pack_ds_warning *w)
{
    (void)u;
    printf("#   warning [%s] %s\n", pack_ds_warn_kind_name(w->kind), w->msg);
}

static bool box_is(const struct pack_ds_row *r, int cls, double x, double y, double w, double h)
{
    const bool same = r->cls == cls && r->cx == (float)x && r->cy == (float)y && r->w == (float)w &&
                      r->h == (float)h;
    if (!same)
        printf("#   row %d %.9g %.9g %.9g %.9g, want %d %.9g %.9g %.9g %.9g\n", r->cls,
               (double)r->cx, (double)r->cy, (double)r->w, (double)r->h, cls, (double)(float)x,
               (double)(float)y, (double)(float)w, (double)(float)h);
    return same;
}

static const char *mixed_json =
    "{\"info\": {\"x\": [1, {\"y\": null}], \"z\": \"s\"},\n"
    " \"images\": [\n"
    "  {\"id\": 1, \"file_name\": \"1.jpg\", \"width\": 640, \"height\": 480},\n"
    "  {\"id\": 2.0, \"file_name\": \"2.jpg\", \"width\": 100, \"height\": 200,"
    " \"extra\": {\"a\": [1, 2]}},\n"
    "  {\"id\": 3, \"file_name\": \"3.jpg\", \"width\": 50, \"height\": 50},\n"
    "  {\"id\": 4, \"file_name\": \"4.jpg\", \"width\": 50, \"height\": 50},\n"
    "  {\"id\": 5, \"file_name\": \"5.jpg\", \"width\": 10.5, \"height\": 50}\n"
    " ],\n"
    " \"annotations\": [\n"
    "  {\"id\": 10, \"image_id\": 1, \"category_id\": 9, \"bbox\": [100, 50, 200, 100],"
    " \"iscrowd\": 0, \"area\": 1, \"segmentation\": [[100, 50, 300, 50, 300, 150]]},\n"
    "  {\"id\": 11, \"image_id\": 1, \"category_id\": 2, \"bbox\": [0.5, 0.25, 10, 20],"
    " \"iscrowd\": 1, \"segmentation\": {\"counts\": [1, 2, 3], \"size\": [480, 640]}},\n"
    "  {\"id\": 12, \"image_id\": 1, \"category_id\": 5, \"bbox\": [10, 10, 0, 5], \"iscrowd\": "
    "0},\n"
    "  {\"id\": 13, \"image_id\": 1, \"category_id\": 7, \"bbox\": [10, 10, 5, 5], \"iscrowd\": "
    "0},\n"
    "  {\"id\": 14, \"image_id\": 99, \"category_id\": 2, \"bbox\": [10, 10, 5, 5]},\n"
    "  {\"id\": 15, \"image_id\": 1, \"category_id\": 9, \"bbox\": [100, 50, 200, 100]},\n"
    "  {\"id\": 16, \"image_id\": 2, \"category_id\": 2, \"bbox\": [10, 20, 30, 40], \"iscrowd\": "
    "false, \"segmentation\": {\"counts\": \"abc\", \"size\": [200, 100]}},\n"
    "  {\"id\": 17, \"image_id\": 2, \"category_id\": 5, \"bbox\": [1, 2, 3, 4], \"segmentation\": "
    "[[1, 2, 3]]},\n"
    "  {\"id\": 18, \"image_id\": 4, \"category_id\": 5, \"bbox\": [1, 2, 3, 4]},\n"
    "  {\"id\": 19, \"image_id\": 2, \"category_id\": 5, \"bbox\": [1, 2, \"3\", 4]}\n"
    " ],\n"
    " \"categories\": [{\"id\": 9, \"name\": \"nine\"}, {\"id\": 2, \"name\": \"two\"},"
    " {\"id\": 5, \"name\": \"five\", \"supercategory\": \"x\"}]\n"
    "}\n";

static void test_mixed(void)
{
    tdu_text("cj/annotations/instances_val.json", mixed_json);
    tdu_image("cj/images/val/1.jpg");
    tdu_image("cj/images/val/2.jpg");
    tdu_image("cj/images/val/3.jpg");
    tdu_image("cj/images/val/5.jpg");
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.warn_fn = show_warn;
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("cj"), &o, &rc, err, sizeof err);
    ok(rc == 0 && ds, "scan COCO root (annotations/ + images/val/)");
    if (!ds) return;
    const struct pack_ds_stats *st = pack_ds_stats(ds);
    is_int(pack_ds_info(ds)->format, PACK_DS_FORMAT_COCO, "format COCO");
    ok(strcmp(pack_ds_info(ds)->split, "val") == 0, "split from instances_val.json");
    is_int(st->images_found, 5, "5 images[] entries");
    is_int(st->images_invalid, 1, "image 5: non-integer width");
    is_int(st->images_missing, 1, "image 4: file missing");
    is_int(st->crowd_skipped, 1, "1 crowd");
    is_int(st->rows_bad_box, 2, "zero width + malformed bbox");
    is_int(st->rows_bad_category, 1, "unknown category 7");
    is_int(st->rows_no_image, 2, "unknown image 99 + annotation of the missing image");
    is_int(st->rows_duplicate, 1, "annotation 15 duplicates 10");
    is_int(st->segments_dropped, 2, "RLE on non-crowd + odd polygon");
    is_int(pack_ds_count(ds), 3, "3 samples");
    is_int(st->labelled, 2, "2 labelled");
    is_int(st->backgrounds, 1, "image 3 is a background");
    is_int(st->rows, 3, "3 rows");
    is_int(st->rows_with_segment, 1, "1 polygon");
    is_int(st->warnings, 9, "9 warnings");

    size_t nn;
    const char *const *names = pack_ds_names(ds, &nn);
    ok(nn == 3 && !strcmp(names[0], "two") && !strcmp(names[1], "five") &&
           !strcmp(names[2], "nine"),
       "non-COCO categories: sorted-id order 2, 5, 9");
    is_int(pack_ds_info(ds)->names_source, PACK_DS_NAMES_JSON, "names from the JSON");

    const struct pack_ds_sample *s = pack_ds_get(ds, 0);
    ok(strstr(s->image_path, "images/val/1.jpg") && s->image_id == 1 && s->width == 640 &&
           s->height == 480,
       "sample 0: 1.jpg 640x480 id 1");
    ok(s->n_rows == 1 && box_is(&s->rows[0], 2, (100 + 200 / 2.0) / 640, (50 + 100 / 2.0) / 480,
                                200 / 640.0, 100 / 480.0),
       "box (x + w/2)/W..., category 9 -> class 2");
    ok(s->rows[0].seg_count == 3 && s->seg_xy[0] == (float)(100 / 640.0) &&
           s->seg_xy[5] == (float)(150 / 480.0),
       "polygon normalised by width and height");
    ok(!strcmp(s->label_path, tdu_path("cj/annotations/instances_val.json")),
       "label_path is the JSON");
    s = pack_ds_get(ds, 1);
    ok(s->n_rows == 2 && box_is(&s->rows[0], 0, 25 / 100.0, 40 / 200.0, 0.3, 0.2) &&
           box_is(&s->rows[1], 1, (1 + 1.5) / 100, (2 + 2.0) / 200, 0.03, 0.02),
       "image 2 (id 2.0): RLE and odd-polygon boxes kept in file order");
    ok(s->n_seg_points == 0, "no polygon for them");
    ok(pack_ds_get(ds, 2)->n_rows == 0 && pack_ds_get(ds, 2)->image_id == 3, "background id 3");

    bool dup = false, miss = false;
    for (size_t i = 0; i < pack_ds_warning_count(ds); i++) {
        const struct pack_ds_warning *w = pack_ds_warning_get(ds, i);
        if (w->kind == PACK_DS_W_LABEL_DUPLICATE) dup = w->ann_id == 15 && w->line == 15;
        if (w->kind == PACK_DS_W_IMAGE_MISSING) miss = w->ann_id == 4 && strstr(w->msg, "4.jpg");
    }
    ok(dup, "duplicate warning names annotation 15 on line 15");
    ok(miss, "missing image warning names 4.jpg");
    pack_ds_destroy(ds);

    /* JSON named directly; strict fails at the first warning */
    o.strict = true;
    o.warn_fn = NULL;
    ds = tdu_scan(tdu_path("cj/annotations/instances_val.json"), &o, &rc, err, sizeof err);
    ok(rc == -PACK_DS_ESTRICT && strstr(err, "instances_val.json:7:"),
       "strict: first warning (image 5, line 7) fails: %s", err);
    pack_ds_opts_default(&o);
    o.drop_backgrounds = true;
    ds = tdu_scan(tdu_path("cj/annotations/instances_val.json"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 2 && pack_ds_stats(ds)->backgrounds_dropped == 1,
       "drop_backgrounds");
    pack_ds_destroy(ds);
    const char *short_names[] = { "a", "b" };
    o.names = short_names;
    o.n_names = 2;
    ds = tdu_scan(tdu_path("cj"), &o, &rc, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "2 class names"), "names override shorter than classes");
}

/* Three-part polygon where the middle part is entered at a higher index than it is left: the
 * JSON2YOLO merge reverses it without re-indexing. Expected points worked out by hand from
 * merge_multi_segment (see coco_json.c). */
static void test_merge(void)
{
    const char *json =
        "{\"images\": [{\"id\": 7, \"file_name\": \"m.jpg\", \"width\": 100, \"height\": 50}],\n"
        " \"annotations\": [{\"id\": 1, \"image_id\": 7, \"category_id\": 1, \"iscrowd\": 0,\n"
        "   \"bbox\": [0, 0, 50, 10], \"segmentation\": [[0, 0, 10, 0, 10, 10],\n"
        "     [20, 10, 30, 0, 20, 0], [40, 0, 50, 0, 40, 10]]},\n"
        "  {\"id\": 2, \"image_id\": 7, \"category_id\": 90, \"bbox\": [1, 1, 2, 2],\n"
        "   \"segmentation\": [[4, 4, 2, 2, 6, 8]]}],\n"
        " \"categories\": [{\"id\": 90, \"name\": \"toothbrush\"}, {\"id\": 1, \"name\": "
        "\"person\"}]}\n";
    tdu_text("cc/annotations/instances_val2017.json", json);
    tdu_image("cc/val2017/m.jpg");
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("cc"), NULL, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 1, "ROOT/val2017/ image directory");
    if (!ds || pack_ds_count(ds) != 1) return;
    size_t nn;
    const char *const *names = pack_ds_names(ds, &nn);
    ok(nn == 80 && !strcmp(names[0], "person") && !strcmp(names[79], "toothbrush"),
       "COCO categories: 80 names");
    const struct pack_ds_sample *s = pack_ds_get(ds, 0);
    ok(s->n_rows == 2 && s->rows[0].cls == 0 && s->rows[1].cls == 79, "coco91 -> coco80 classes");
    static const double want[][2] = {
        { 10, 0 },  { 10, 10 }, { 0, 0 },   { 10, 0 }, /* first part rolled by 1, closed */
        { 30, 0 },  { 20, 10 },                        /* middle: reversed, rolled, head */
        { 40, 0 },  { 50, 0 },  { 40, 10 }, { 40, 0 }, /* last part, closed */
        { 20, 10 }, { 20, 0 },  { 30, 0 },             /* middle: the rest */
    };
    const size_t nw = sizeof want / sizeof *want;
    bool same = s->rows[0].seg_count == nw;
    for (size_t i = 0; same && i < nw; i++)
        same = s->seg_xy[2 * (s->rows[0].seg_first + i)] == (float)(want[i][0] / 100) &&
               s->seg_xy[2 * (s->rows[0].seg_first + i) + 1] == (float)(want[i][1] / 50);
    ok(same, "multi-part polygon merged as merge_multi_segment (%u points)", s->rows[0].seg_count);
    ok(s->rows[1].seg_count == 3 && s->rows[1].seg_first == nw, "one-part polygon kept as is");
    ok(box_is(&s->rows[0], 0, 25 / 100.0, 5 / 50.0, 0.5, 0.2), "box from bbox by default");
    pack_ds_destroy(ds);

    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.coco_boxes_from_segments = true;
    ds = tdu_scan(tdu_path("cc"), &o, &rc, err, sizeof err);
    s = ds ? pack_ds_get(ds, 0) : NULL;
    const float x0 = (float)(2 / 100.0), x1 = (float)(6 / 100.0), y0 = (float)(2 / 50.0),
                y1 = (float)(8 / 50.0);
    ok(s && s->rows[1].cx == (x0 + x1) / 2.0f && s->rows[1].cy == (y0 + y1) / 2.0f &&
           s->rows[1].w == x1 - x0 && s->rows[1].h == y1 - y0,
       "coco_boxes_from_segments: box = polygon bounds");
    pack_ds_destroy(ds);
}

static void test_layouts(void)
{
    /* both layouts in one root (ultralytics' COCO download) */
    tdu_image("both/images/train2017/000000000001.jpg");
    tdu_text("both/labels/train2017/000000000001.txt", "3 0.5 0.5 0.5 0.5\n");
    tdu_text("both/annotations/instances_train2017.json",
             "{\"images\": [{\"id\": 1, \"file_name\": \"000000000001.jpg\", \"width\": 10,"
             " \"height\": 10}], \"annotations\": [{\"id\": 5, \"image_id\": 1, \"category_id\":"
             " 1, \"bbox\": [0, 0, 10, 10], \"iscrowd\": 0}], \"categories\": [{\"id\": 1, "
             "\"name\": \"person\"}]}");
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("both"), NULL, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_info(ds)->format == PACK_DS_FORMAT_YOLO &&
           pack_ds_get(ds, 0)->rows[0].cls == 3,
       "both layouts: YOLO labels win");
    pack_ds_destroy(ds);
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.format = PACK_DS_FORMAT_COCO;
    ds = tdu_scan(tdu_path("both"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_info(ds)->format == PACK_DS_FORMAT_COCO &&
           pack_ds_get(ds, 0)->rows[0].cls == 0 && pack_ds_get(ds, 0)->rows[0].w == 1.0f,
       "format=coco overrides (images from ROOT/images/<split>/)");
    pack_ds_destroy(ds);
    o.format = PACK_DS_FORMAT_COCO;
    ds = tdu_scan(tdu_path("cj/images"), &o, &rc, err, sizeof err);
    ok(rc == -PACK_DS_ELAYOUT, "format=coco without annotations/: ELAYOUT");

    /* empty annotations, and none at all: every image is a background */
    tdu_text("bg/annotations/instances_x.json",
             "{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 10, \"height\": 10},"
             "{\"id\": 2, \"file_name\": \"b.jpg\", \"width\": 10, \"height\": 10}],"
             " \"annotations\": [], \"categories\": []}");
    tdu_image("bg/x/a.jpg");
    tdu_image("bg/x/b.jpg");
    ds = tdu_scan(tdu_path("bg"), NULL, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 2 && pack_ds_stats(ds)->backgrounds == 2,
       "empty annotations: 2 backgrounds");
    size_t nn = 99;
    if (ds) pack_ds_names(ds, &nn);
    is_int(nn, 0, "no categories: no names");
    pack_ds_destroy(ds);
    tdu_text(
        "bg/annotations/instances_x.json",
        "{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 10, \"height\": 10}]}");
    o.format = PACK_DS_FORMAT_AUTO;
    o.drop_backgrounds = true;
    ds = tdu_scan(tdu_path("bg"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 0 && pack_ds_stats(ds)->backgrounds_dropped == 1,
       "no annotations key, backgrounds dropped: empty result");
    pack_ds_destroy(ds);

    /* image_dir override */
    pack_ds_opts_default(&o);
    o.image_dir = tdu_path("cj/images/val");
    ds = tdu_scan(tdu_path("cc/annotations/instances_val2017.json"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 0 && pack_ds_stats(ds)->images_missing == 1,
       "image_dir override is used (m.jpg is not there)");
    pack_ds_destroy(ds);
}

int main(void)
{
    tdu_init("dscoco");
    test_mixed();
    test_merge();
    test_layouts();
    return tap_done();
}
