/*
 * Fuzz target: the hyp yaml reader (libyaml document API + trainer/core/hyp.c's key and range
 * checks). Whatever the input, a parse either fails with an error line or yields values that pass
 * the range check; it never crashes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hyp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drop(void *ctx, const char *msg)
{
    (void)ctx;
    if (!msg || !msg[0]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct trn_hyp h;
    char err[256];
    err[0] = '\0';
    const int rc =
        trn_hyp_parse((const char *)data, size, "fuzz.yaml", drop, NULL, &h, err, sizeof err);
    if (rc == 0 && trn_hyp_check(&h, NULL, 0) != 0) abort();
    if (rc != 0 && strncmp(err, "fuzz.yaml", 9) != 0) abort();
    return 0;
}
