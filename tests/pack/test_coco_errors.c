/*
 * Malformed and hostile COCO JSON: truncated files, syntax errors (with byte offset and line),
 * wrong structure, wrong field types, absurd numbers, deep nesting, invalid UTF-8; and the
 * streaming parser's independence from chunk boundaries (feeding one byte at a time gives the
 * same result as one buffer), plus every truncation of a valid file failing cleanly.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "test_dataset_util.h"

static char err[1024];

/* Parses json from memory in chunks of `chunk` bytes; returns rc and the result in *out. */
static int parse_mem(const char *json, size_t len, size_t chunk, struct pack_ds **out)
{
    *out = NULL;
    err[0] = '\0';
    struct pack_ds *ds = pack_ds_new(NULL, err, sizeof err);
    struct pack_coco *c = NULL;
    int rc = ds ? pack_coco_create(&c, ds, "mem.json") : -ENOMEM;
    for (size_t off = 0; !rc && off < len; off += chunk)
        rc = pack_coco_feed(c, json + off, len - off < chunk ? len - off : chunk);
    if (!rc) rc = pack_coco_finish(c);
    return tdu_coco_end(ds, c, rc, out);
}

static int scan_text(const char *json, struct pack_ds **out)
{
    tdu_text("e/instances_t.json", json);
    tdu_mkdir("e/t");
    *out = NULL;
    err[0] = '\0';
    return pack_ds_scan(tdu_path("e/instances_t.json"), NULL, out, err, sizeof err);
}

static const char *valid =
    "{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 640, \"height\": 480},\n"
    "  {\"id\": 2, \"file_name\": \"b.jpg\", \"width\": 320, \"height\": 240}],\n"
    " \"annotations\": [{\"id\": 1, \"image_id\": 1, \"category_id\": 3, \"iscrowd\": 0,"
    " \"bbox\": [10.5, 20.25, 100, 50], \"segmentation\": [[10.5, 20.25, 110.5, 20.25, 60,"
    " 70.25], [1, 2, 3, 4]]},\n"
    "  {\"id\": 2, \"image_id\": 2, \"category_id\": 1, \"iscrowd\": 1, \"bbox\": [1, 2, 3, 4],"
    " \"segmentation\": {\"counts\": [5, 6, 7], \"size\": [240, 320]}},\n"
    "  {\"id\": 3, \"image_id\": 2, \"category_id\": 1, \"bbox\": [1e1, 2E0, 3.0e+0, 4]}],\n"
    " \"categories\": [{\"id\": 1, \"name\": \"person\"}, {\"id\": 3, \"name\": \"car\"}]}";

static void test_chunks_and_truncation(void)
{
    const size_t len = strlen(valid);
    struct pack_ds *whole = NULL, *bytes = NULL, *odd = NULL;
    ok(parse_mem(valid, len, len, &whole) == 0, "valid JSON parses in one buffer");
    ok(parse_mem(valid, len, 1, &bytes) == 0, "valid JSON parses one byte at a time");
    ok(parse_mem(valid, len, 7, &odd) == 0, "valid JSON parses in 7-byte chunks");
    ok(whole && bytes && odd && tdu_same_result(whole, bytes) && tdu_same_result(whole, odd),
       "same samples, rows, points and counters whatever the chunking");
    if (whole) {
        is_int(pack_ds_count(whole), 2, "2 samples");
        is_int(pack_ds_stats(whole)->crowd_skipped, 1, "crowd RLE skipped");
        is_int(pack_ds_get(whole, 0)->n_seg_points, 3 + 1 + 2 + 1, "two parts merged (3+1+2+1)");
    }
    pack_ds_destroy(whole);
    pack_ds_destroy(bytes);
    pack_ds_destroy(odd);

    int n_bad = 0;
    for (size_t cut = 0; cut < len; cut++) {
        struct pack_ds *ds = NULL;
        const int rc = parse_mem(valid, cut, 64, &ds);
        const bool good = rc == -PACK_DS_ESYNTAX && strstr(err, "mem.json") && !ds;
        if (!good && n_bad++ < 3) printf("#   cut %zu: rc %d (%s)\n", cut, rc, err);
        pack_ds_destroy(ds);
    }
    is_int(n_bad, 0, "every truncation of the file is a syntax error naming it");
}

static void test_syntax(void)
{
    struct pack_ds *ds;
    int rc = scan_text("{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"wid", &ds);
    ok(rc == -PACK_DS_ESYNTAX && strstr(err, "instances_t.json: malformed JSON at byte"),
       "truncated: %s", err);
    rc = scan_text("{\n\"images\": [\n  {\"id\": 1,, \"x\": 2}\n]}\n", &ds);
    ok(rc == -PACK_DS_ESYNTAX && strstr(err, "(line 3)"), "syntax error line: %s", err);
    rc = scan_text("{\"images\": []} x", &ds);
    ok(rc == -PACK_DS_ESYNTAX && strstr(err, "trailing garbage"), "trailing garbage: %s", err);
    rc = scan_text("", &ds);
    ok(rc == -PACK_DS_ESYNTAX, "empty file: %s", err);
    rc = scan_text("{\"images\": [{\"file_name\": \"\xff\xfe.jpg\"}]}", &ds);
    ok(rc == -PACK_DS_ESYNTAX, "invalid UTF-8: %s", err);
    rc = scan_text("{\"images\": [], \"x\": NaN}", &ds);
    ok(rc == -PACK_DS_ESYNTAX, "NaN literal is not JSON: %s", err);
    rc = scan_text("{\"images\": [] /* c */}", &ds);
    ok(rc == -PACK_DS_ESYNTAX, "comments are not JSON: %s", err);
}

static void test_schema(void)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        { "[]", "top level is an array" },
        { "42", "top level is a number" },
        { "{\"images\": {\"a\": 1}}", "images is an object" },
        { "{\"images\": 3}", "images is a number" },
        { "{\"images\": [1]}", "images entry is a number" },
        { "{\"images\": [[]]}", "images entry is an array" },
        { "{\"images\": [], \"images\": []}", "images given twice" },
        { "{\"annotations\": []}", "no \"images\" array" },
        { "{\"images\": [], \"annotations\": [\"x\"]}", "annotations entry is a string" },
        { "{\"images\": [], \"categories\": [{\"id\": \"1\", \"name\": \"a\"}]}", "invalid id" },
        { "{\"images\": [], \"categories\": [{\"id\": 1}]}", "invalid name" },
        { "{\"images\": [], \"categories\": [{\"id\": 1, \"name\": \"a\"}, {\"id\": 1, \"name\": "
          "\"b\"}]}",
          "id 1 repeated" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct pack_ds *ds;
        const int rc = scan_text(cases[i].json, &ds);
        ok(rc == -PACK_DS_ESCHEMA && strstr(err, cases[i].want) && strstr(err, "at byte") && !ds,
           "schema %zu: %s", i, err);
    }
}

static void test_fields(void)
{
    /* Wrong types and absurd numbers inside entries: the entry is dropped, with a warning. */
    const char *json =
        "{\"images\": [\n"
        " {\"id\": 1, \"file_name\": \"ok.jpg\", \"width\": 100, \"height\": 100},\n"
        " {\"id\": 2, \"file_name\": 5, \"width\": 100, \"height\": 100},\n"
        " {\"id\": 3, \"file_name\": \"w.jpg\", \"width\": 1e999, \"height\": 100},\n"
        " {\"id\": 1e300, \"file_name\": \"big.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 4, \"file_name\": \"n\\u0000.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 5, \"file_name\": \"neg.jpg\", \"width\": -10, \"height\": 10},\n"
        " {\"id\": 1, \"file_name\": \"again.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 6, \"file_name\": \"ok.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 7, \"file_name\": [\"x\"], \"width\": {\"v\": 1}, \"height\": 10}\n"
        "],\n"
        " \"annotations\": [\n"
        " {\"id\": 1, \"image_id\": 1, \"category_id\": 1.5, \"bbox\": [1, 1, 1, 1]},\n"
        " {\"id\": 2, \"image_id\": 1, \"category_id\": 1, \"bbox\": \"1 1 1 1\"},\n"
        " {\"id\": 3, \"image_id\": 1, \"category_id\": 1, \"bbox\": [1, 1, 1]},\n"
        " {\"id\": 4, \"image_id\": 1, \"category_id\": 1, \"bbox\": [1, 1, 1, 1, 1]},\n"
        " {\"id\": 5, \"image_id\": 1, \"category_id\": 1, \"bbox\": [1e308, 0, 1e308, 1]},\n"
        " {\"id\": 6, \"image_id\": \"1\", \"category_id\": 1, \"bbox\": [1, 1, 1, 1]},\n"
        " {\"id\": 7, \"image_id\": 1, \"category_id\": 1, \"bbox\": [1, 1, 1e999, 1]},\n"
        " {\"id\": 8, \"image_id\": 1, \"category_id\": 1, \"bbox\": [[1], 1, 1, 1]},\n"
        " {\"id\": 9, \"image_id\": 1, \"category_id\": 1, \"iscrowd\": \"yes\", \"bbox\": [1, 1, "
        "1, "
        "1]},\n"
        " {\"id\": 10, \"image_id\": 1, \"category_id\": 1, \"bbox\": [1, 1, 1, 1],"
        " \"segmentation\": [[1, 1, 2, 1e999]]},\n"
        " {\"id\": 11, \"image_id\": 1, \"category_id\": 1, \"bbox\": [2, 2, 1, 1],"
        " \"segmentation\": [1, 2, 3, 4]},\n"
        " {\"id\": 12, \"image_id\": 1, \"category_id\": 1, \"bbox\": [3, 3, 1, 1],"
        " \"segmentation\": [[], [1, 2]]},\n"
        " {\"id\": 13, \"image_id\": 1, \"category_id\": 1, \"bbox\": [4, 4, 1, 1],"
        " \"segmentation\": [[1, 2, 3, 4, 5, 6]], \"deep\": [[[[[[[[[[{}]]]]]]]]]]}\n"
        "],\n"
        " \"categories\": [{\"id\": 1, \"name\": \"thing\"}]}\n";
    struct pack_ds *ds = NULL;
    const int rc = parse_mem(json, strlen(json), 4096, &ds);
    ok(rc == 0 && ds, "bad fields do not stop the parse: %s", err);
    if (!ds) return;
    const struct pack_ds_stats *st = pack_ds_stats(ds);
    is_int(st->images_found, 9, "9 image entries");
    is_int(st->images_invalid, 8, "7 unusable entries + the repeated file name ok.jpg");
    is_int(pack_ds_count(ds), 0, "image 1 rejected as a whole (annotation 5 out of range)");
    is_int(st->corrupt, 1, "1 corrupt image");
    is_int(st->rows_bad_category, 1, "category 1.5");
    is_int(st->rows_bad_box, 5, "string, short, long, 1e999 and nested bbox");
    is_int(st->rows_no_image, 1, "image_id as a string");
    is_int(st->crowd_skipped, 1, "iscrowd \"yes\" is truthy, as in Python");
    is_int(st->segments_dropped, 3, "non-finite, flat and empty-part polygons dropped");
    is_int(st->rows_corrupt, 5, "the 5 rows of image 1 lost with it");
    pack_ds_destroy(ds);

    /* deep nesting in a skipped value */
    const size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    if (!deep) exit(99);
    size_t k = (size_t)sprintf(deep, "{\"info\": ");
    memset(deep + k, '[', depth);
    k += depth;
    memset(deep + k, ']', depth);
    k += depth;
    k += (size_t)sprintf(deep + k, ", \"images\": []}");
    ok(parse_mem(deep, k, 65536, &ds) == 0, "100000-deep nesting in an ignored key");
    pack_ds_destroy(ds);
    free(deep);
}

int main(void)
{
    tdu_init("dscocoerr");
    test_chunks_and_truncation();
    test_syntax();
    test_schema();
    test_fields();
    return tap_done();
}
