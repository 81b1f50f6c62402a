/*
 * YOLO layouts end to end through pack_ds_scan, on small datasets written to a temporary
 * directory: the ROOT/images|labels layout with good, duplicate, corrupt, segment and missing
 * labels; orphans; split choice; strict mode; image list files; dataset yamls (list and dict
 * names, list files, relative paths); names overrides; the summary line; yaml memory bombs
 * (nc without names, aliases of one large scalar) refused by name under a peak RSS bound.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dataset.h"
#include "test_dataset_util.h"

static char err[1024];

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A realistic small YOLO dataset: 5 images in images/train (one in a subdirectory), labels with
 * every kind of problem, plus files that must be ignored. */
static void make_yolo_root(void)
{
    tdu_image("yolo/images/train/000000000042.jpg");
    tdu_image("yolo/images/train/b.jpg");
    tdu_image("yolo/images/train/c.png");
    tdu_image("yolo/images/train/d.JPG");
    tdu_image("yolo/images/train/sub/e.jpeg");
    tdu_image("yolo/images/train/.hidden.jpg");
    tdu_text("yolo/images/train/notes.txt", "not an image\n");
    tdu_text("yolo/labels/train/000000000042.txt", "0 0.5 0.5 0.2 0.2\n3 0.25 0.75 0.1 0.3\n");
    tdu_text("yolo/labels/train/b.txt",
             "1 0.5 0.5 0.2 0.2\n0 0.1 0.1 0.1 0.1\n1 0.5 0.5 0.2 0.2\n");
    tdu_text("yolo/labels/train/c.txt", "0 0.5 0.5 0.2 0.2\n2 0.5 1.5 0.2 0.2\n");
    /* d.JPG: no label file -> background */
    tdu_text("yolo/labels/train/sub/e.txt", "4 0.1 0.1 0.3 0.1 0.3 0.4 0.1 0.4\n");
    tdu_text("yolo/labels/train/orphan.txt", "0 0.5 0.5 0.1 0.1\n");
    tdu_text("yolo/labels/train.cache", "ultralytics cache, ignored");
}

static int n_warn_calls;

static void on_warn(void *user, const struct pack_ds_warning *w)
{
    (void)user;
    n_warn_calls++;
    printf("#   warning [%s] %s\n", pack_ds_warn_kind_name(w->kind), w->msg);
}

static void test_yolo_root(void)
{
    make_yolo_root();
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.warn_fn = on_warn;
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("yolo"), &o, &rc, err, sizeof err);
    ok(rc == 0 && ds, "scan YOLO root");
    if (!ds) return;
    const struct pack_ds_stats *st = pack_ds_stats(ds);
    is_int(st->images_found, 5, "5 images found (hidden file and notes.txt ignored)");
    is_int(st->non_image_files, 1, "notes.txt counted as a non-image file");
    is_int(pack_ds_count(ds), 4, "4 samples (c.png corrupt)");
    is_int(st->corrupt, 1, "1 corrupt");
    is_int(st->rows_corrupt, 2, "its 2 rows dropped");
    is_int(st->rows_duplicate, 1, "1 duplicate row");
    is_int(st->backgrounds, 1, "1 background");
    is_int(st->label_missing, 1, "d.JPG has no label file");
    is_int(st->labelled, 3, "3 labelled");
    is_int(st->rows, 5, "5 rows kept (2 + 2 after the duplicate + 1)");
    is_int(st->orphan_labels, 1, "1 orphan label");
    is_int(st->rows_with_segment, 1, "1 row with a polygon");
    is_int(st->warnings, 3, "3 warnings: corrupt, duplicate, orphan");
    is_int(n_warn_calls, 3, "callback saw each warning");

    const char *want[] = { "000000000042.jpg", "b.jpg", "d.JPG", "e.jpeg" };
    for (size_t i = 0; i < 4 && i < pack_ds_count(ds); i++)
        ok(strcmp(base(pack_ds_get(ds, i)->image_path), want[i]) == 0, "sample %zu is %s (%s)", i,
           want[i], pack_ds_get(ds, i)->image_path);
    const struct pack_ds_sample *s0 = pack_ds_get(ds, 0);
    is_int(s0->image_id, 42, "numeric stem gives the image id");
    is_int(pack_ds_get(ds, 1)->image_id, -1, "non-numeric stem gives -1");
    ok(s0->n_rows == 2 && s0->rows[1].cls == 3 && s0->rows[1].cx == 0.25f && s0->rows[1].h == 0.3f,
       "rows of the first sample");
    ok(strstr(s0->label_path, "/labels/train/000000000042.txt") != NULL, "label path: %s",
       s0->label_path);
    const struct pack_ds_sample *sb = pack_ds_get(ds, 1);
    ok(sb->n_rows == 2 && sb->rows[0].cls == 0 && sb->rows[1].cls == 1,
       "duplicates removed and rows sorted as np.unique does");
    const struct pack_ds_sample *se = pack_ds_get(ds, 3);
    ok(se->n_rows == 1 && se->rows[0].seg_count == 4 && se->n_seg_points == 4 &&
           se->seg_xy[2] == 0.3f && se->seg_xy[5] == 0.4f,
       "polygon returned with its points");
    ok(se->rows[0].cx == (0.1f + 0.3f) / 2.0f && se->rows[0].h == 0.4f - 0.1f,
       "segment box = polygon bounds");
    ok(pack_ds_get(ds, 4) == NULL, "out of range index gives NULL");

    size_t nn;
    const char *const *names = pack_ds_names(ds, &nn);
    is_int(nn, 5, "generated names for classes 0..4");
    ok(nn == 5 && strcmp(names[4], "4") == 0, "generated name is the index");
    is_int(pack_ds_info(ds)->names_source, PACK_DS_NAMES_GENERATED, "names source: generated");
    is_int(pack_ds_info(ds)->format, PACK_DS_FORMAT_YOLO, "format YOLO");
    ok(strcmp(pack_ds_info(ds)->split, "train") == 0, "split detected: train");

    /* warnings are stored with file and line */
    bool found = false;
    for (size_t i = 0; i < pack_ds_warning_count(ds); i++) {
        const struct pack_ds_warning *w = pack_ds_warning_get(ds, i);
        if (w->kind == PACK_DS_W_LABEL_CORRUPT)
            found = strstr(w->file, "c.txt") && w->line == 2 && strstr(w->msg, "c.txt:2:");
    }
    ok(found, "corrupt warning names c.txt line 2");
    char line[512];
    const int n = pack_ds_stats_format(st, line, sizeof line);
    ok(n > 0 && strstr(line, "5 found") && strstr(line, "4 samples") && strstr(line, "1 corrupt") &&
           strstr(line, "1 duplicate"),
       "summary: %s", line);
    pack_ds_destroy(ds);

    /* strict: the first warning fails the scan, naming the file and line */
    o.strict = true;
    o.warn_fn = NULL;
    ds = tdu_scan(tdu_path("yolo"), &o, &rc, err, sizeof err);
    ok(rc == -PACK_DS_ESTRICT && !ds, "strict mode fails");
    ok(strstr(err, "b.txt:3") != NULL, "strict error names b.txt:3 (the duplicate): %s", err);

    /* drop backgrounds */
    pack_ds_opts_default(&o);
    o.drop_backgrounds = true;
    ds = tdu_scan(tdu_path("yolo"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 3 && pack_ds_stats(ds)->backgrounds_dropped == 1,
       "drop_backgrounds drops d.JPG");
    pack_ds_destroy(ds);

    /* no polygons wanted */
    o.drop_backgrounds = false;
    o.keep_segments = false;
    ds = tdu_scan(tdu_path("yolo"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_get(ds, 3)->n_seg_points == 0 &&
           pack_ds_get(ds, 3)->rows[0].seg_count == 0,
       "keep_segments=false returns no points");
    pack_ds_destroy(ds);

    /* names override: class 4 is out of range for 4 names -> e.jpeg corrupt */
    const char *names4[] = { "a", "b", "c", "d" };
    pack_ds_opts_default(&o);
    o.names = names4;
    o.n_names = 4;
    ds = tdu_scan(tdu_path("yolo"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_stats(ds)->corrupt == 2 && pack_ds_count(ds) == 3,
       "names override: class >= 4 rejects e.jpeg");
    ok(ds && pack_ds_info(ds)->names_source == PACK_DS_NAMES_OVERRIDE, "names from override");
    pack_ds_destroy(ds);

    /* an image directory given directly, with its labels beside (img2label rule) */
    ds = tdu_scan(tdu_path("yolo/images/train"), NULL, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 4, "image directory scans the same samples");
    pack_ds_destroy(ds);
}

static void test_splits(void)
{
    tdu_image("two/images/train/a.jpg");
    tdu_image("two/images/val/b.jpg");
    tdu_image("two/images/val/c.jpg");
    tdu_text("two/labels/val/b.txt", "0 0.5 0.5 0.5 0.5\n");
    tdu_mkdir("two/labels/train");
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("two"), NULL, &rc, err, sizeof err);
    ok(rc == -PACK_DS_ELAYOUT && !ds, "two splits without a choice: ELAYOUT");
    ok(strstr(err, "train, val") != NULL, "error lists the splits: %s", err);
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.split = "val";
    ds = tdu_scan(tdu_path("two"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 2 && pack_ds_stats(ds)->labelled == 1, "split=val");
    pack_ds_destroy(ds);
    o.split = "test";
    ds = tdu_scan(tdu_path("two"), &o, &rc, err, sizeof err);
    ok(rc == -PACK_DS_ELAYOUT, "missing split: ELAYOUT");
    ds = tdu_scan(tdu_path("nothing-here"), NULL, &rc, err, sizeof err);
    ok(rc == -ENOENT && strstr(err, "nothing-here"), "missing root: ENOENT naming it");
    tdu_mkdir("emptyroot/images/train");
    tdu_mkdir("emptyroot/labels/train");
    ds = tdu_scan(tdu_path("emptyroot"), NULL, &rc, err, sizeof err);
    ok(rc == -PACK_DS_ENOIMAGES, "no images: ENOIMAGES");
}

static bool secret_echoed;
static int secret_named;

static void on_secret_warn(void *user, const struct pack_ds_warning *w)
{
    (void)user;
    secret_echoed |= strstr(w->msg, "s3cr3t") != NULL || strstr(w->msg, "user") != NULL;
    secret_named += w->kind == PACK_DS_W_LIST_ENTRY && w->line >= 1 && w->line <= 25 &&
                    strstr(w->msg, "not an image path") != NULL;
}

static void test_list_file(void)
{
    tdu_image("lst/images/train/x1.jpg");
    tdu_image("lst/images/train/x2.jpg");
    tdu_image("lst/elsewhere/x3.png");
    tdu_text("lst/labels/train/x1.txt", "0 0.5 0.5 0.5 0.5\n");
    tdu_text("lst/labels/train/x2.txt", "1 0.5 0.5 0.5 0.5\n");
    char list[2048];
    snprintf(list, sizeof list,
             "./images/train/x2.jpg\n"
             "%s\n"
             "./images/train/missing.jpg\n"
             "./images/train/readme.md\n"
             "images/train/x1.jpg\n"
             "./images/train/x2.jpg\n",
             tdu_path("lst/elsewhere/x3.png"));
    tdu_text("lst/train.txt", list);
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("lst/train.txt"), NULL, &rc, err, sizeof err);
    ok(rc == 0 && ds, "scan a list file");
    if (!ds) return;
    const struct pack_ds_stats *st = pack_ds_stats(ds);
    is_int(pack_ds_count(ds), 3, "3 samples");
    is_int(st->images_missing, 1, "1 missing image");
    is_int(st->images_invalid, 1, "1 repeated entry");
    is_int(st->non_image_files, 1, "1 non-image line");
    ok(strcmp(base(pack_ds_get(ds, 0)->image_path), "x3.png") == 0 &&
           strcmp(base(pack_ds_get(ds, 2)->image_path), "x2.jpg") == 0,
       "sorted by full path (absolute /elsewhere sorts before /images)");
    bool miss = false;
    for (size_t i = 0; i < pack_ds_warning_count(ds); i++) {
        const struct pack_ds_warning *w = pack_ds_warning_get(ds, i);
        if (w->kind == PACK_DS_W_IMAGE_MISSING)
            miss = w->line == 3 && strstr(w->file, "train.txt") && strstr(w->msg, "missing.jpg");
    }
    ok(miss, "missing image warning names train.txt line 3");
    pack_ds_destroy(ds);

    /* a "list" that is no list (a yaml's train: naming /etc/shadow): its lines are never
     * quoted in warnings or errors, only their numbers (issue 44) */
    char secret[4096];
    size_t sn = 0;
    for (int k = 0; k < 25; k++)
        sn += (size_t)snprintf(secret + sn, sizeof secret - sn,
                               "user%d:$6$s3cr3t%d$hash:19000:0:99999:7:::\n", k, k);
    tdu_text("lst/shadow", secret);
    struct pack_ds_opts so;
    pack_ds_opts_default(&so);
    so.warn_fn = on_secret_warn;
    ds = tdu_scan(tdu_path("lst/shadow"), &so, &rc, err, sizeof err);
    ok(!secret_echoed && strstr(err, "s3cr3t") == NULL && secret_named == 25,
       "a list of secrets: no line echoed, in any warning or the error (%d warnings name the "
       "line numbers only; %s)",
       secret_named, err);
    pack_ds_destroy(ds);

    /* the ultralytics COCO layout: ROOT/<split>.txt when images/<split>/ is absent */
    tdu_image("lroot/images/all/y1.jpg");
    tdu_mkdir("lroot/labels/all");
    tdu_text("lroot/train2017.txt", "./images/all/y1.jpg\n");
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.split = "train2017";
    ds = tdu_scan(tdu_path("lroot"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 1 && strstr(pack_ds_info(ds)->source, "train2017.txt"),
       "root + split falls back to ROOT/<split>.txt");
    pack_ds_destroy(ds);
}

static void test_yaml(void)
{
    tdu_image("ydata/images/train/t1.jpg");
    tdu_image("ydata/images/train/t2.jpg");
    tdu_image("ydata/images/val/v1.jpg");
    tdu_image("ydata/images/extra/e1.jpg");
    tdu_text("ydata/labels/train/t1.txt", "1 0.5 0.5 0.5 0.5\n");
    tdu_text("ydata/labels/val/v1.txt", "2 0.5 0.5 0.5 0.5\n");
    tdu_text("ydata/labels/extra/e1.txt", "7 0.5 0.5 0.5 0.5\n");
    tdu_text("ydata/val.txt", "./images/val/v1.jpg\n");
    tdu_text("cfg/list.yaml", "# ultralytics form\n"
                              "path: ../ydata\n"
                              "train: images/train\n"
                              "val: val.txt\n"
                              "test: [images/train, val.txt]\n"
                              "names: [person, bicycle, car]\n"
                              "download: https://example.invalid/x.zip\n");
    tdu_text("cfg/dict.yaml", "path: ../ydata\n"
                              "train: ../images/train  # retried without ../\n"
                              "val: images/extra\n"
                              "nc: 3\n"
                              "names:\n  2: car\n  0: person\n  1: bicycle\n");
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("cfg/list.yaml"), NULL, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 2, "yaml train: directory, 2 images");
    size_t nn = 0;
    const char *const *names = ds ? pack_ds_names(ds, &nn) : NULL;
    ok(nn == 3 && strcmp(names[2], "car") == 0, "names list");
    ok(ds && pack_ds_info(ds)->names_source == PACK_DS_NAMES_YAML, "names source yaml");
    ok(ds && strcmp(pack_ds_info(ds)->split, "train") == 0, "default split train");
    pack_ds_destroy(ds);

    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.split = "val";
    ds = tdu_scan(tdu_path("cfg/list.yaml"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 1 && pack_ds_get(ds, 0)->rows[0].cls == 2,
       "yaml val: list file with ./ paths relative to it");
    pack_ds_destroy(ds);
    o.split = "test";
    ds = tdu_scan(tdu_path("cfg/list.yaml"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_count(ds) == 3, "yaml test: list of a directory and a list file");
    pack_ds_destroy(ds);

    ds = tdu_scan(tdu_path("cfg/dict.yaml"), NULL, &rc, err, sizeof err);
    names = ds ? pack_ds_names(ds, &nn) : NULL;
    ok(rc == 0 && nn == 3 && strcmp(names[0], "person") == 0 && strcmp(names[2], "car") == 0,
       "names dict in any key order");
    ok(rc == 0 && pack_ds_count(ds) == 2, "train '../images/train' retried as 'images/train'");
    pack_ds_destroy(ds);
    o.split = "val";
    ds = tdu_scan(tdu_path("cfg/dict.yaml"), &o, &rc, err, sizeof err);
    ok(rc == 0 && pack_ds_stats(ds)->corrupt == 1 && pack_ds_count(ds) == 0,
       "class 7 with 3 names: image rejected");
    pack_ds_destroy(ds);
    o.split = "train2017";
    ds = tdu_scan(tdu_path("cfg/dict.yaml"), &o, &rc, err, sizeof err);
    ok(rc == -EINVAL, "split must be train/val/test for a yaml");

    struct {
        const char *text, *want;
        int rc;
    } bad[] = {
        { "path: .\ntrain: a\nnames: {0: a, 2: b}\n", "0..1", -PACK_DS_ESCHEMA },
        { "path: .\ntrain: a\nnames: {'0': a}\n", "integers", -PACK_DS_ESCHEMA },
        { "path: .\ntrain: a\nnames: [a, b]\nnc: 3\n", "nc is 3", -PACK_DS_ESCHEMA },
        { "path: .\ntrain: {a: 1}\nnames: [a]\n", "train must be", -PACK_DS_ESCHEMA },
        { "path: .\ntrain: [a\nnames: [a]\n", "bad.yaml:", -PACK_DS_ESYNTAX },
        { "- just\n- a list\n", "must be a mapping", -PACK_DS_ESCHEMA },
        { "", "empty", -PACK_DS_ESCHEMA },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tdu_text("cfg/bad.yaml", bad[i].text);
        ds = tdu_scan(tdu_path("cfg/bad.yaml"), NULL, &rc, err, sizeof err);
        ok(rc == bad[i].rc && strstr(err, bad[i].want) != NULL, "bad yaml %zu: %s", i, err);
        pack_ds_destroy(ds);
    }

    /* names override from files */
    tdu_text("cfg/names.txt", "zero\n one \n\ntwo\nthree\n");
    pack_ds_opts_default(&o);
    o.names_path = tdu_path("cfg/names.txt");
    ds = tdu_scan(tdu_path("cfg/list.yaml"), &o, &rc, err, sizeof err);
    names = ds ? pack_ds_names(ds, &nn) : NULL;
    ok(rc == 0 && nn == 4 && strcmp(names[1], "one") == 0, "names from a text file win over yaml");
    pack_ds_destroy(ds);
    o.names_path = tdu_path("cfg/dict.yaml");
    ds = tdu_scan(tdu_path("cfg/list.yaml"), &o, &rc, err, sizeof err);
    names = ds ? pack_ds_names(ds, &nn) : NULL;
    ok(rc == 0 && nn == 3 && strcmp(names[1], "bicycle") == 0, "names from a yaml file");
    pack_ds_destroy(ds);
}

/* Label files are read by several threads: the result must not depend on how many. */
static void test_threads(void)
{
    char rel[128], text[256];
    for (int i = 0; i < 700; i++) {
        snprintf(rel, sizeof rel, "thr/images/all/%06d.jpg", i * 7);
        tdu_image(rel);
        if (i % 11 == 0) continue; /* background */
        snprintf(rel, sizeof rel, "thr/labels/all/%06d.txt", i * 7);
        if (i % 13 == 0)
            snprintf(text, sizeof text, "%d 0.5 0.5 0.5 %s\n", i % 80, i % 2 ? "1.5" : "x");
        else if (i % 17 == 0)
            snprintf(text, sizeof text,
                     "%d 0.5 0.5 0.1 0.1\n1 0.2 0.2 0.1 0.1\n%d 0.5 0.5 0.1 0.1\n", i % 80, i % 80);
        else
            snprintf(text, sizeof text, "%d 0.%03d 0.5 0.1 0.2\n%d 0.3 0.%03d 0.2 0.1 0.25 0.3\n",
                     i % 80, i % 997, (i + 3) % 80, i % 991);
        tdu_text(rel, text);
    }
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    int rc1, rc4;
    o.threads = 1;
    struct pack_ds *a = tdu_scan(tdu_path("thr"), &o, &rc1, err, sizeof err);
    o.threads = 4;
    struct pack_ds *b = tdu_scan(tdu_path("thr"), &o, &rc4, err, sizeof err);
    ok(rc1 == 0 && rc4 == 0 && a && b, "scan with 1 and 4 threads");
    if (!a || !b) return;
    bool same = pack_ds_count(a) == pack_ds_count(b) &&
                !memcmp(pack_ds_stats(a), pack_ds_stats(b), sizeof(struct pack_ds_stats)) &&
                pack_ds_warning_count(a) == pack_ds_warning_count(b);
    for (size_t i = 0; same && i < pack_ds_count(a); i++) {
        const struct pack_ds_sample *x = pack_ds_get(a, i), *y = pack_ds_get(b, i);
        same = !strcmp(x->image_path, y->image_path) && x->n_rows == y->n_rows &&
               x->n_seg_points == y->n_seg_points &&
               (!x->n_rows || !memcmp(x->rows, y->rows, x->n_rows * sizeof *x->rows)) &&
               (!x->n_seg_points ||
                !memcmp(x->seg_xy, y->seg_xy, 2 * x->n_seg_points * sizeof(float)));
    }
    for (size_t i = 0; same && i < pack_ds_warning_count(a); i++)
        same = !strcmp(pack_ds_warning_get(a, i)->msg, pack_ds_warning_get(b, i)->msg);
    ok(same, "identical samples, rows, polygons, counters and warnings");
    const struct pack_ds_stats *st = pack_ds_stats(a);
    ok(st->corrupt > 40 && st->rows_duplicate > 20 && st->backgrounds > 50 &&
           st->rows_with_segment > 500,
       "the tree has corrupt (%llu), duplicate (%llu), background (%llu) and segment rows",
       (unsigned long long)st->corrupt, (unsigned long long)st->rows_duplicate,
       (unsigned long long)st->backgrounds);
    pack_ds_destroy(a);
    pack_ds_destroy(b);
}

/* Paths that are not regular files (issue 20): a FIFO label used to block the scan in open(),
 * a directory label made its image a background silently, and a FIFO or directory named like an
 * image was not counted at all. Now each is named in a warning and counted, nothing is opened
 * that could block, and --strict refuses. */
static void test_not_files(void)
{
    tdu_image("odd/images/train/a.jpg");
    tdu_image("odd/images/train/b.jpg");
    tdu_image("odd/images/train/c.jpg");
    tdu_text("odd/labels/train/a.txt", "0 0.5 0.5 0.2 0.2\n");
    tdu_mkdirs(tdu_path("odd/labels/train/b.txt"), 1); /* a directory named like a label */
    ok(mkfifo(tdu_path("odd/labels/train/c.txt"), 0644) == 0, "mkfifo label c.txt");
    ok(mkfifo(tdu_path("odd/images/train/f.jpg"), 0644) == 0, "mkfifo image f.jpg");
    tdu_image("odd/images/train/d.jpg/inner.jpg"); /* a directory named like an image */
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.warn_fn = on_warn;
    n_warn_calls = 0;
    int rc;
    /* a FIFO opened the old way blocks for ever: the alarm ends the test instead */
    alarm(60);
    struct pack_ds *ds = tdu_scan(tdu_path("odd"), &o, &rc, err, sizeof err);
    alarm(0);
    ok(rc == 0 && ds, "the scan ends without opening a FIFO");
    if (!ds) return;
    const struct pack_ds_stats *st = pack_ds_stats(ds);
    is_int(pack_ds_count(ds), 4, "4 samples: a, b, c and d.jpg/inner.jpg");
    is_int(st->images_invalid, 1, "the FIFO image f.jpg counted as invalid");
    is_int(st->images_found, 5, "5 image names found, f.jpg among them");
    is_int(st->backgrounds, 3,
           "b (directory label), c (FIFO label), inner (no label): backgrounds");
    int not_file = 0;
    bool named_b = false, named_c = false, named_d = false, named_f = false;
    for (size_t i = 0; i < pack_ds_warning_count(ds); i++) {
        const struct pack_ds_warning *w = pack_ds_warning_get(ds, i);
        if (w->kind != PACK_DS_W_NOT_A_FILE) continue;
        not_file++;
        named_b |= strstr(w->msg, "labels/train/b.txt") && strstr(w->msg, "a directory");
        named_c |= strstr(w->msg, "labels/train/c.txt") && strstr(w->msg, "FIFO");
        named_d |= strstr(w->msg, "images/train/d.jpg") && strstr(w->msg, "directory named");
        named_f |= strstr(w->msg, "images/train/f.jpg") && strstr(w->msg, "a FIFO");
    }
    is_int(not_file, 4, "four not-a-file warnings");
    ok(named_b && named_c && named_d && named_f, "each names its path and what it is");
    pack_ds_destroy(ds);
    o.strict = true;
    ds = tdu_scan(tdu_path("odd"), &o, &rc, err, sizeof err);
    ok(rc != 0 && !ds, "--strict refuses the dataset (%s)", err);
    pack_ds_destroy(ds);
    n_warn_calls = 0;
}

/* A class beyond the format's 65535 aborted the whole pack ("b.jpg: Invalid argument"): now
 * that row alone is dropped, named with its file, line and the limit, and counted (issue 20). */
/* Scans path in a child (so that its peak RSS is its own, from wait4): the return code, the
 * message and the child's peak RSS in KB. */
static int scan_in_child(const char *path, char *msg, size_t cap, long *rss_kb)
{
    int fd[2];
    if (pipe(fd) != 0) return -999;
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        int rc;
        struct pack_ds *ds = tdu_scan(path, NULL, &rc, err, sizeof err);
        pack_ds_destroy(ds);
        char out[1100];
        const int n = snprintf(out, sizeof out, "%d %s", rc, err);
        if (write(fd[1], out, (size_t)n) < 0) _exit(2);
        _exit(0);
    }
    close(fd[1]);
    char in[1100] = "";
    ssize_t got = 0, r;
    while (got < (ssize_t)sizeof in - 1 &&
           (r = read(fd[0], in + got, sizeof in - 1 - (size_t)got)) > 0)
        got += r;
    close(fd[0]);
    int status;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status)) return -998;
    *rss_kb = ru.ru_maxrss;
    int rc = -997, off = 0;
    if (sscanf(in, "%d %n", &rc, &off) >= 1) snprintf(msg, cap, "%s", in + off);
    return rc;
}

/* A dataset yaml that copies out far more than it holds, and nc with no names: each refused,
 * naming the line and the bound, in a child whose peak RSS stays under 256 MB (the issue's
 * bound; without these bounds nc: 20000000 took 1.6 GB and an alias bomb 3.0 GB). */
static void test_yaml_bombs(void)
{
    tdu_image("bomb/images/train/a.jpg");
    tdu_text("bomb/labels/train/a.txt", "0 0.5 0.5 0.2 0.2\n");
    const size_t big = 4000, aliases = 5000;
    char *names = malloc(big + aliases * 8 + 256), *train = malloc(big + aliases * 8 + 256);
    size_t n = (size_t)sprintf(names, "path: ..\ntrain: images/train\nnames:\n  - &a \"");
    memset(names + n, 'n', big);
    n += big;
    n += (size_t)sprintf(names + n, "\"\n");
    for (size_t k = 0; k < aliases; k++)
        n += (size_t)sprintf(names + n, "  - *a\n");
    n = (size_t)sprintf(train, "path: ..\nnames: [a]\ntrain:\n  - &p \"images/");
    memset(train + n, 't', big);
    n += big;
    n += (size_t)sprintf(train + n, "\"\n");
    for (size_t k = 0; k < aliases; k++)
        n += (size_t)sprintf(train + n, "  - *p\n");
    char *long_name = malloc(300 * 1024);
    n = (size_t)sprintf(long_name, "path: ..\ntrain: images/train\nnames: [\"");
    memset(long_name + n, 'x', 200 * 1024);
    n += 200 * 1024;
    sprintf(long_name + n, "\"]\n");
    struct {
        const char *text, *want, *what;
    } bombs[] = {
        { "path: ..\ntrain: images/train\nnc: 20000000\n",
          "bomb.yaml:3: nc is 20000000; a dataset holds at most 65536 classes", "nc: 20000000" },
        { "path: ..\ntrain: images/train\nnc: 2147483647\n", "nc is 2147483647", "nc: 2147483647" },
        { names, "the yaml's strings exceed 16 MiB with its aliases expanded",
          "5,000 aliases of a 4,000-byte name" },
        { train, "the yaml's strings exceed 16 MiB with its aliases expanded",
          "5,000 aliases of a 4,000-byte train path" },
        { long_name, "bomb.yaml:3: a name is 204800 bytes, over 4096", "a 200 KB name" },
        { "path: ..\ntrain: images/train\nnames: [\"a\\0b\"]\n",
          "bomb.yaml:3: a name holds a NUL byte", "a name with \\0 (not 'out of memory')" },
    };
    for (size_t i = 0; i < sizeof bombs / sizeof *bombs; i++) {
        tdu_text("bomb/cfg/bomb.yaml", bombs[i].text);
        char msg[1100] = "";
        long rss = 0;
        const int rc = scan_in_child(tdu_path("bomb/cfg/bomb.yaml"), msg, sizeof msg, &rss);
        ok(rc == -PACK_DS_ESCHEMA && strstr(msg, bombs[i].want) && rss < 256 * 1024,
           "%s: refused in a child of peak RSS %ld KB (bound 256 MB): %s", bombs[i].what, rss, msg);
    }
    /* the bounds leave real datasets alone: 65,536 short names pass */
    char *many = malloc(65536 * 12 + 64);
    n = (size_t)sprintf(many, "path: ..\ntrain: images/train\nnames:\n");
    for (int k = 0; k < 65536; k++)
        n += (size_t)sprintf(many + n, "- c%d\n", k);
    tdu_text("bomb/cfg/bomb.yaml", many);
    char msg[1100] = "";
    long rss = 0;
    ok(scan_in_child(tdu_path("bomb/cfg/bomb.yaml"), msg, sizeof msg, &rss) == 0,
       "65,536 names are a dataset, not a bomb (%s)", msg);
    free(many), free(names), free(train), free(long_name);
}

static void test_class_limit(void)
{
    tdu_image("big/images/train/a.jpg");
    tdu_image("big/images/train/b.jpg");
    tdu_text("big/labels/train/a.txt", "0 0.5 0.5 0.2 0.2\n");
    tdu_text("big/labels/train/b.txt", "3 0.5 0.5 0.2 0.2\n70000 0.25 0.25 0.1 0.1\n");
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    int rc;
    struct pack_ds *ds = tdu_scan(tdu_path("big"), &o, &rc, err, sizeof err);
    ok(rc == 0 && ds, "a class of 70000 does not stop the scan");
    if (!ds) return;
    const struct pack_ds_stats *st = pack_ds_stats(ds);
    is_int(pack_ds_count(ds), 2, "both images kept");
    const struct pack_ds_sample *b = pack_ds_get(ds, 1);
    ok(b && b->n_rows == 1 && b->rows[0].cls == 3, "b.jpg keeps its class-3 row only");
    is_int(st->rows_bad_category, 1, "the dropped row is counted");
    bool named = false;
    for (size_t i = 0; i < pack_ds_warning_count(ds); i++) {
        const struct pack_ds_warning *w = pack_ds_warning_get(ds, i);
        named |= w->kind == PACK_DS_W_ROW_DROPPED && strstr(w->msg, "labels/train/b.txt:2:") &&
                 strstr(w->msg, "70000") && strstr(w->msg, "65535");
    }
    ok(named, "the warning names b.txt line 2, the class and the limit");
    pack_ds_destroy(ds);
    o.strict = true;
    ds = tdu_scan(tdu_path("big"), &o, &rc, err, sizeof err);
    ok(rc != 0 && !ds && strstr(err, "70000"), "--strict refuses it: %s", err);
    pack_ds_destroy(ds);
}

int main(void)
{
    tdu_init("dsyolo");
    test_not_files();
    test_yaml_bombs();
    test_class_limit();
    test_yolo_root();
    test_splits();
    test_list_file();
    test_yaml();
    test_threads();
    return tap_done();
}
