/*
 * Fuzz target: the streaming COCO JSON parser, fed from memory in chunks whose size comes from
 * the first input byte (so chunk boundaries fall everywhere), then converted to samples without
 * touching the filesystem. Any error code is fine; a crash, a leak or a returned row out of range
 * is not.
 */
#include <stdint.h>
#include <stdlib.h>

#include "dataset_internal.h"

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
    return 0;
}
