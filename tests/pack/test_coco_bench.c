/*
 * Benchmark (meson benchmark, not a test): time of the streaming COCO parser on a big annotation
 * file, e.g. the ~450 MB synthetic one from gen_big_coco_json.py. Parses, converts to samples
 * without looking for the images (pack_coco_emit with no image directory) and prints the time,
 * the throughput and what was kept. Peak memory: run it under /usr/bin/time -v.
 *
 *   test_coco_bench FILE.json [--no-segments] [--threads N]   (N: 0 = one per core, the default)
 *   (or FFYOLO_BIG_COCO=FILE.json; exit 77 when neither is given)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dataset_internal.h"
#include "tap.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : getenv("FFYOLO_BIG_COCO");
    if (!path || !*path)
        tap_skip_all("give a COCO JSON (gen_big_coco_json.py) as argument or FFYOLO_BIG_COCO");
    struct stat st;
    if (stat(path, &st) != 0) tap_skip_all("the COCO JSON given does not exist");
    char err[1024] = "";
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.max_warnings = 10;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--no-segments") == 0) o.keep_segments = false;
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            o.threads = (unsigned)atoi(argv[++i]);
    }
    struct pack_ds *ds = pack_ds_new(&o, err, sizeof err);
    struct pack_coco *c = NULL;
    const double t0 = now();
    int rc = ds ? pack_coco_create(&c, ds, path) : -1;
    if (!rc) rc = pack_coco_parse_file(c);
    const double t1 = now();
    if (!rc) rc = pack_coco_emit(c, NULL);
    if (!rc) rc = pack_ds_finish(ds);
    const double t2 = now();
    pack_coco_destroy(c);
    ok(rc == 0, "parse %s: %s", path, rc ? err : "ok");
    if (!rc) {
        const struct pack_ds_stats *s = pack_ds_stats(ds);
        uint64_t pts = 0;
        for (size_t i = 0; i < pack_ds_count(ds); i++)
            pts += pack_ds_get(ds, i)->n_seg_points;
        char line[512];
        pack_ds_stats_format(s, line, sizeof line);
        tap_diag("%s", line);
        tap_diag("file %.1f MB: parse %.2f s (%.0f MB/s), emit %.2f s, total %.2f s",
                 (double)st.st_size / 1e6, t1 - t0, (double)st.st_size / 1e6 / (t1 - t0), t2 - t1,
                 t2 - t0);
        tap_diag("kept %llu rows, %llu polygon points (%.1f MB as float32)",
                 (unsigned long long)s->rows, (unsigned long long)pts, (double)pts * 8 / 1e6);
    }
    pack_ds_destroy(ds);
    return tap_done();
}
