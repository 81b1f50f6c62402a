/*
 * Fuzz target: the dataset yaml reader (libyaml document API + our schema checks).
 */
#include <stdint.h>
#include <stdlib.h>

#include "dataset_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pack_dsyaml y;
    char err[256];
    const int rc = pack_dsyaml_parse((const char *)data, size, "fuzz.yaml", &y, err, sizeof err);
    if (rc == 0) {
        for (size_t i = 0; i < y.n_names; i++)
            if (!y.names[i]) abort();
        if (y.nc >= 0 && y.names && (size_t)y.nc != y.n_names) abort();
        pack_dsyaml_free(&y);
    }
    return 0;
}
