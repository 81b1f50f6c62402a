/*
 * Fuzz target: YOLO label text (pack_lbl_parse + cleaning). Beyond not crashing, checks the
 * invariants a packer relies on: an accepted file has at least one row, every row is in range
 * (class a non-negative integer below nc when nc is known, box values in [0, 1]), polygons lie
 * inside the point store, and no two rows are equal.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pack_lbl L = { 0 };
    /* the first byte picks whether the class count is known */
    const int64_t nc = size && (data[0] & 1) ? 80 : -1;
    if (pack_lbl_parse(&L, (const char *)data, size, nc) != 0) abort();
    if (L.status == PACK_LBL_OK) {
        if (L.n_rows == 0) abort();
        for (size_t r = 0; r < L.n_rows; r++) {
            const struct pack_lbl_row *w = &L.rows[r];
            if (!(w->v[0] >= 0 && w->v[0] < 16777216.0f)) abort();
            if (w->v[0] != (float)(int32_t)w->v[0]) abort();
            if (nc >= 0 && w->v[0] >= (float)nc) abort();
            for (int k = 1; k < 5; k++)
                if (!(w->v[k] >= 0 && w->v[k] <= 1)) abort();
            if ((size_t)w->seg_off + w->seg_n > L.n_pts) abort();
            for (size_t q = 0; q < r; q++)
                if (memcmp(L.rows[q].v, w->v, sizeof w->v) == 0) abort();
        }
    } else if (L.status == PACK_LBL_EMPTY) {
        if (L.n_rows) abort();
    }
    pack_lbl_free(&L);
    return 0;
}
