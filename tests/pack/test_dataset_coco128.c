/*
 * Real data: ../shared/datasets/coco128 (YOLO layout, ultralytics' coco128) and
 * ../shared/datasets/coco128-json (the same 128 images with COCO's own JSON). The YOLO scan must
 * give what ultralytics reports for coco128 ("128 images, 2 backgrounds", 929 boxes), and the
 * COCO scan must give the same boxes and classes for every image within 1e-5 (the labels were
 * written by JSON2YOLO with 6 significant digits). Skipped when ../shared is absent.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dataset.h"
#include "tap.h"

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int main(int argc, char **argv)
{
    const char *shared = argc > 1 ? argv[1] : "../shared";
    char yolo[1024], coco[1024], err[1024] = "";
    snprintf(yolo, sizeof yolo, "%s/datasets/coco128", shared);
    snprintf(coco, sizeof coco, "%s/datasets/coco128-json", shared);
    struct stat st;
    if (stat(yolo, &st) != 0 || stat(coco, &st) != 0)
        tap_skip_all("../shared/datasets/coco128{,-json} not present (real COCO data)");

    struct pack_ds *y = NULL, *c = NULL;
    int rc = pack_ds_scan(yolo, NULL, &y, err, sizeof err);
    ok(rc == 0, "scan coco128 (YOLO): %s", rc ? err : "ok");
    rc = pack_ds_scan(coco, NULL, &c, err, sizeof err);
    ok(rc == 0, "scan coco128-json (COCO): %s", rc ? err : "ok");
    if (!y || !c) return tap_done();

    const struct pack_ds_stats *ys = pack_ds_stats(y), *cs = pack_ds_stats(c);
    char line[512];
    pack_ds_stats_format(ys, line, sizeof line);
    tap_diag("yolo: %s", line);
    pack_ds_stats_format(cs, line, sizeof line);
    tap_diag("coco: %s", line);
    is_int(pack_ds_count(y), 128, "YOLO: 128 images");
    is_int(ys->labelled, 126, "YOLO: 126 labelled");
    is_int(ys->backgrounds, 2, "YOLO: 2 backgrounds");
    is_int(ys->rows, 929, "YOLO: 929 boxes");
    is_int(ys->corrupt, 0, "YOLO: nothing corrupt");
    is_int(ys->orphan_labels, 2, "YOLO: 656.txt and 659.txt have no image");
    is_int(pack_ds_get(y, 0)->image_id, 9, "YOLO: first image is 000000000009");

    is_int(pack_ds_count(c), 128, "COCO: 128 images");
    is_int(cs->labelled, 126, "COCO: 126 labelled");
    is_int(cs->rows, 929, "COCO: 929 boxes");
    is_int(cs->crowd_skipped, 10, "COCO: 10 crowd annotations skipped");
    is_int(cs->warnings, 0, "COCO: no warnings");
    size_t nn;
    const char *const *names = pack_ds_names(c, &nn);
    ok(nn == 80 && !strcmp(names[0], "person") && !strcmp(names[79], "toothbrush"),
       "COCO: the 80 COCO names");

    size_t bad_name = 0, bad_rows = 0, bad_vals = 0;
    double max_err = 0;
    for (size_t i = 0; i < pack_ds_count(y) && i < pack_ds_count(c); i++) {
        const struct pack_ds_sample *a = pack_ds_get(y, i), *b = pack_ds_get(c, i);
        if (strcmp(base(a->image_path), base(b->image_path))) {
            bad_name++;
            continue;
        }
        if (a->image_id != b->image_id || b->width == 0) bad_name++;
        if (a->n_rows != b->n_rows) {
            if (bad_rows++ < 3)
                printf("#   %s: %u rows vs %u\n", base(a->image_path), a->n_rows, b->n_rows);
            continue;
        }
        for (uint32_t r = 0; r < a->n_rows; r++) {
            const struct pack_ds_row *p = &a->rows[r], *q = &b->rows[r];
            const double e = fmax(fmax(fabs(p->cx - q->cx), fabs(p->cy - q->cy)),
                                  fmax(fabs(p->w - q->w), fabs(p->h - q->h)));
            if (e > max_err) max_err = e;
            if (p->cls != q->cls || e > 1e-5) {
                if (bad_vals++ < 3)
                    printf("#   %s row %u: %d %g %g %g %g vs %d %g %g %g %g\n", base(a->image_path),
                           r, p->cls, (double)p->cx, (double)p->cy, (double)p->w, (double)p->h,
                           q->cls, (double)q->cx, (double)q->cy, (double)q->w, (double)q->h);
            }
        }
    }
    is_int(bad_name, 0, "same images in the same order, ids and sizes known");
    is_int(bad_rows, 0, "same number of boxes per image");
    is_int(bad_vals, 0, "same classes and boxes (in file order) within 1e-5");
    tap_diag("max |yolo - coco| = %.3g", max_err);
    ok(max_err <= 5e-7 * 1.01 + 1e-7, "max error %.3g within the README's 5e-7 (+float32 ulp)",
       max_err);
    size_t polys = 0;
    for (size_t i = 0; i < pack_ds_count(c); i++)
        polys += pack_ds_get(c, i)->n_seg_points > 0;
    ok(polys == 126, "COCO: polygons for every labelled image (%zu)", polys);
    pack_ds_destroy(y);
    pack_ds_destroy(c);
    return tap_done();
}
