/*
 * Fuzz target: det's metadata reader (det/meta.c). Whatever the input, a parse either fails with
 * a reason and keeps nothing, or yields fields within the reader's bounds that the writer turns
 * into a text which parses back to the same text again (write, parse, write: equal bytes).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "det.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct det_meta m, p;
    char why[256] = "";
    const int rc = det_meta_parse((const char *)data, size, &m, why, sizeof why);
    if (rc < 0) {
        if (rc != -ENOMEM && (!why[0] || m.names || m.n_names)) abort();
        return 0;
    }
    if (m.n_names > DET_CLASS_MAX + 1 || m.nc > DET_CLASS_MAX + 1) abort();
    size_t total = 0;
    for (uint32_t k = 0; k < m.n_names; k++)
        total += m.names[k] ? strlen(m.names[k]) : 0;
    if (total > DET_NAMES_BYTES_MAX) abort();
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (det_meta_write(&m, &a, &na) != 0) abort();
    if (det_meta_parse(a, na, &p, why, sizeof why) != 0 || !p.is_det || p.n_names != m.n_names)
        abort();
    if (det_meta_write(&p, &b, &nb) != 0 || na != nb || memcmp(a, b, na) != 0) abort();
    free(a);
    free(b);
    det_meta_free(&p);
    det_meta_free(&m);
    return 0;
}
