/*
 * Fuzz target: the streaming COCO JSON parser, fed from memory in chunks whose size comes from
 * the first input byte (so chunk boundaries fall everywhere), then converted to samples without
 * touching the filesystem. Any error code is fine; a crash, a leak or a returned row out of range
 * is not. Then the same bytes as a file, parsed by one thread and by several with small regions
 * (pack_coco_parse_file): both must give the same samples, counters and error text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset_internal.h"
#include "test_dataset_util.h"

/* Parses the file with `threads` threads; returns rc, the result in *out and the error in err. */
static int parse_path(const char *path, unsigned threads, uint64_t min_region, size_t read_bytes,
                      struct pack_ds **out, char *err, size_t cap)
{
    *out = NULL;
    err[0] = '\0';
    struct pack_ds *ds = pack_ds_new(NULL, err, cap);
    struct pack_coco *c = NULL;
    int rc = ds ? pack_coco_create(&c, ds, path) : -1;
    if (!rc) pack_coco_set_threads(c, threads, min_region, read_bytes);
    if (!rc) rc = pack_coco_parse_file(c);
    return tdu_coco_end(ds, c, rc, out);
}

static void regions_agree(const uint8_t *data, size_t size, unsigned sel)
{
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_coco_json_%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return;
    const bool wrote = fwrite(data, 1, size, f) == size;
    if (fclose(f) != 0 || !wrote) return;
    char e1[512], e2[512];
    struct pack_ds *a = NULL, *b = NULL;
    /* both on one read grid: yajl's syntax-error offset depends on where feeds end */
    const size_t grid = 1 + sel % 61;
    const int r1 = parse_path(path, 1, 0, grid, &a, e1, sizeof e1);
    const int r2 = parse_path(path, 2 + sel % 7, 1 + sel * 3, grid, &b, e2, sizeof e2);
    const bool same = r1 == r2 && strcmp(e1, e2) == 0 && (r1 || tdu_same_result(a, b));
    pack_ds_destroy(a);
    pack_ds_destroy(b);
    unlink(path);
    if (!same) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    const size_t chunk = 1 + (size_t)data[0] * 17;
    data++;
    size--;
    char err[256];
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.coco_boxes_from_segments = size & 1;
    struct pack_ds *ds = pack_ds_new(&o, err, sizeof err);
    struct pack_coco *c = NULL;
    if (!ds) return 0;
    int rc = pack_coco_create(&c, ds, "fuzz.json");
    for (size_t off = 0; !rc && off < size; off += chunk)
        rc = pack_coco_feed(c, data + off, size - off < chunk ? size - off : chunk);
    if (!rc) rc = pack_coco_finish(c);
    if (!rc) rc = pack_coco_emit(c, NULL);
    if (!rc) rc = pack_ds_finish(ds);
    if (!rc) {
        size_t nn;
        pack_ds_names(ds, &nn);
        for (size_t i = 0; i < pack_ds_count(ds); i++) {
            const struct pack_ds_sample *s = pack_ds_get(ds, i);
            for (uint32_t r = 0; r < s->n_rows; r++) {
                const struct pack_ds_row *w = &s->rows[r];
                if (w->cls < 0 || (size_t)w->cls >= nn) abort();
                if (!(w->cx >= 0 && w->cx <= 1 && w->cy >= 0 && w->cy <= 1 && w->w >= 0 &&
                      w->w <= 1 && w->h >= 0 && w->h <= 1))
                    abort();
                if ((uint64_t)w->seg_first + w->seg_count > s->n_seg_points) abort();
            }
        }
    }
    pack_coco_destroy(c);
    pack_ds_destroy(ds);
    regions_agree(data, size, (unsigned)data[-1]);
    return 0;
}
