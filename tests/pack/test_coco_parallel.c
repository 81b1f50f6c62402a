/*
 * The COCO JSON parser's regions (pack_coco_parse_file with several threads) against the same
 * file parsed by one thread: the same samples, rows, polygon points, counters, warnings (text,
 * lines, ids) and, for a broken file, the same error text with its byte offset and line.
 *
 * The files are made here by a seeded generator, small regions making many cuts in a small file:
 *   - plain: annotations with one- and several-part polygons, crowds, pretty-printed and
 *     one-line stretches, newlines before and after the commas between entries, the images
 *     array after the annotations and the categories in between; regions must be taken here,
 *     or the comparison would prove nothing;
 *   - hostile: strings and nested values that look like cuts (`}, {` inside a string, inside an
 *     extra key's list of objects), annotations that warn, an unknown category; the parser may
 *     fall back to one thread anywhere, and the result must still be the one-thread one;
 *   - broken: a syntax error or a schema error late in the annotations.
 * And coco128's real instances_train2017.json when ../shared is there.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "test_dataset_util.h"

static uint64_t rng = 1;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

struct text {
    char *p;
    size_t n, cap;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->n + (size_t)k + 1 > t->cap) {
        t->cap = 2 * (t->n + (size_t)k + 1);
        t->p = realloc(t->p, t->cap);
        if (!t->p) exit(99);
    }
    va_start(ap, fmt);
    vsnprintf(t->p + t->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    t->n += (size_t)k;
}

enum kind { PLAIN, HOSTILE, SYNTAX, SCHEMA };

/* A COCO file of n_img images and about 3 annotations each. */
static void make_json(struct text *t, enum kind kind, int n_img)
{
    t->n = 0;
    put(t, "{\"info\": {\"year\": 2017, \"note\": \"}, {\"},\n \"annotations\": [");
    const int n_ann = 3 * n_img;
    for (int i = 0; i < n_ann; i++) {
        if (i) put(t, rnd(4) == 0 ? "\n," : rnd(3) == 0 ? ",\n  " : ", ");
        const int img = 1 + rnd((uint32_t)n_img);
        const int cat = kind == HOSTILE && rnd(50) == 0 ? 9 : 1 + (int)rnd(4); /* 9: unknown */
        const double x = rnd(400) + rnd(100) / 100.0, y = rnd(300) + rnd(100) / 64.0;
        const double w = 1 + rnd(200) + rnd(100) / 10.0, h = 1 + rnd(150);
        put(t, "{\"id\": %d, \"image_id\": %d, \"category_id\": %d, ", i + 1, img, cat);
        if (kind == HOSTILE && rnd(30) == 0) put(t, "\"note\": \"a}, {\\\"id\\\": 7}, {b\", ");
        if (kind == HOSTILE && rnd(25) == 0) /* a fake cut whose region parses as a valid one */
            put(t, "\"extra\": [{\"k\": [1, 2]}, {\"id\": 9, \"image_id\": 1, \"category_id\": "
                   "1, \"bbox\": [1, 2, 3, 4]}], ");
        if (kind == HOSTILE && rnd(150) == 0)
            put(t, "\"bbox\": [%.2f, %.2f, -1, %.2f], ", x, y, h); /* warns */
        else if (kind == HOSTILE && rnd(250) == 0)
            put(t, "\"bbox\": [%.2f, \"x\", %.2f, %.2f], ", x, w, h); /* warns */
        else
            put(t, "\"bbox\": [%.2f, %.2f, %.2f, %.2f], ", x, y, w, h);
        if (kind == SYNTAX && i == n_ann * 4 / 5) put(t, "\"area\": 12,, ");
        if (kind == SCHEMA && i == n_ann * 5 / 6) put(t, "\"zz\": 0}, 17, {\"id\": 0, ");
        const int crowd = rnd(12) == 0;
        put(t, "\"iscrowd\": %d, \"segmentation\": ", crowd);
        if (crowd) {
            put(t, "{\"counts\": [3, 4, 5], \"size\": [480, 640]}}");
            continue;
        }
        put(t, "[");
        const int parts = rnd(5) == 0 ? 2 + rnd(2) : 1;
        for (int p = 0; p < parts; p++) {
            put(t, p ? ", [" : "[");
            const int pts = 3 + rnd(6);
            for (int k = 0; k < pts; k++)
                put(t, "%s%.2f, %.2f", k ? (rnd(10) ? ", " : ",\n      ") : "", x + rnd(100),
                    y + rnd(100) / 3.0);
            put(t, "]");
        }
        put(t, "], \"area\": %.3f}", w * h);
    }
    put(t, "],\n \"categories\": [");
    for (int c = 1; c <= 4 + (kind == HOSTILE); c++)
        put(t, "%s{\"id\": %d, \"name\": \"class %d\"}", c > 1 ? ", " : "", c, c);
    put(t, "],\n \"images\": [\n");
    for (int i = 1; i <= n_img; i++)
        put(t, "%s{\"id\": %d, \"file_name\": \"%012d.jpg\", \"width\": 640, \"height\": 480}",
            i > 1 ? ",\n  " : "  ", i, i);
    put(t, "]}\n");
}

struct result {
    int rc;
    char err[1024];
    struct text warns;
    struct pack_ds *ds;
    size_t taken;
};

static void on_warn(void *u, const struct pack_ds_warning *w)
{
    put(u, "%d %llu %lld %s\n", (int)w->kind, (unsigned long long)w->line, (long long)w->ann_id,
        w->msg);
}

static void parse(const char *path, unsigned threads, uint64_t min_region, size_t read_bytes,
                  struct result *r)
{
    memset(r, 0, sizeof *r);
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.warn_fn = on_warn;
    o.warn_user = &r->warns;
    put(&r->warns, "%s", "");
    struct pack_ds *ds = pack_ds_new(&o, r->err, sizeof r->err);
    struct pack_coco *c = NULL;
    r->rc = ds ? pack_coco_create(&c, ds, path) : -ENOMEM;
    if (!r->rc) {
        pack_coco_set_threads(c, threads, min_region, read_bytes);
        r->rc = pack_coco_parse_file(c);
        r->taken = pack_coco_regions_taken(c);
    }
    r->rc = tdu_coco_end(ds, c, r->rc, &r->ds);
}

static void result_free(struct result *r)
{
    pack_ds_destroy(r->ds);
    free(r->warns.p);
}

static bool same(const struct result *a, const struct result *b)
{
    return a->rc == b->rc && strcmp(a->err, b->err) == 0 && strcmp(a->warns.p, b->warns.p) == 0 &&
           (a->rc || tdu_same_result(a->ds, b->ds));
}

/* Parses path with 1 thread, then with each of several thread counts and region sizes, on the
 * same read grid (61 bytes, which splits tokens, and 1000); every result must equal the one-thread
 * one on its grid. Returns the regions taken over all the parallel runs. */
static size_t check_file(const char *name, const char *path, int want_rc)
{
    static const size_t grids[] = { 61, 1000 };
    static const unsigned threads[] = { 2, 3, 5, 16 };
    static const uint64_t mins[] = { 1, 700, 6000 };
    size_t taken = 0;
    int n_diff = 0, n_runs = 0, ref_bad = 0;
    struct result ref0 = { 0 };
    for (size_t g = 0; g < sizeof grids / sizeof *grids; g++) {
        struct result ref;
        parse(path, 1, 0, grids[g], &ref);
        ref_bad += ref.rc != want_rc || ref.taken != 0;
        for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
            for (size_t j = 0; j < sizeof mins / sizeof *mins; j++) {
                struct result r;
                parse(path, threads[i], mins[j], grids[g], &r);
                taken += r.taken;
                n_runs++;
                if (!same(&ref, &r) && n_diff++ < 2)
                    printf("#   %s, read %zu, %u threads, regions >= %llu: rc %d (%s) against %d "
                           "(%s), %zu warning bytes against %zu\n",
                           name, grids[g], threads[i], (unsigned long long)mins[j], r.rc, r.err,
                           ref.rc, ref.err, r.warns.n, ref.warns.n);
                result_free(&r);
            }
        }
        if (g == 0)
            ref0 = ref;
        else
            result_free(&ref);
    }
    is_int(ref_bad, 0, "%s: one thread: rc %d (%s), no region taken", name, ref0.rc,
           ref0.rc ? ref0.err : "ok");
    is_int(n_diff, 0,
           "%s: %d parses by 2-16 threads give the one-thread samples, counters, warnings%s", name,
           n_runs, want_rc ? " and error" : "");
    if (!ref0.rc)
        printf("#   %zu samples, %zu warning bytes\n", pack_ds_count(ref0.ds), ref0.warns.n);
    result_free(&ref0);
    return taken;
}

int main(int argc, char **argv)
{
    tdu_init("coco_par");
    struct text t = { 0 };
    size_t taken;

    rng = 7;
    make_json(&t, PLAIN, 400);
    tdu_write("plain.json", t.p, t.n);
    taken = check_file("plain", tdu_path("plain.json"), 0);
    ok(taken > 20, "plain: the parallel runs took %zu regions from their threads", taken);

    rng = 11;
    make_json(&t, HOSTILE, 400);
    tdu_write("hostile.json", t.p, t.n);
    taken = check_file("hostile", tdu_path("hostile.json"), 0);
    ok(taken > 0, "hostile: %zu regions taken, between those that warn or have fake cuts", taken);

    rng = 13;
    make_json(&t, SYNTAX, 300);
    tdu_write("syntax.json", t.p, t.n);
    check_file("syntax error", tdu_path("syntax.json"), -PACK_DS_ESYNTAX);

    rng = 17;
    make_json(&t, SCHEMA, 300);
    tdu_write("schema.json", t.p, t.n);
    check_file("schema error", tdu_path("schema.json"), -PACK_DS_ESCHEMA);

    /* the file ends inside the annotations: every region ends open, the end is the main's */
    rng = 7;
    make_json(&t, PLAIN, 200);
    const char *cut = strstr(t.p, "],\n \"categories\"");
    tdu_write("truncated.json", t.p, cut ? (size_t)(cut - t.p) : t.n);
    check_file("truncated", tdu_path("truncated.json"), -PACK_DS_ESYNTAX);
    free(t.p);

    char real[2048];
    snprintf(real, sizeof real, "%s/datasets/coco128-json/annotations/instances_train2017.json",
             argc > 1 ? argv[1] : "../shared");
    FILE *f = fopen(real, "rb");
    if (!f) {
        tap_diag("coco128 skipped: no %s (../shared absent)", real);
    } else {
        fclose(f);
        taken = check_file("coco128", real, 0);
        ok(taken > 0, "coco128: %zu regions taken", taken);
    }
    return tap_done();
}
