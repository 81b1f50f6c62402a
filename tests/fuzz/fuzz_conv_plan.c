/*
 * Fuzz target: the conv plan file reader (kernels/ref/kern_plan.c). Whatever the input, a parse
 * either fails with an error naming the file and leaves the table empty, or yields entries that
 * format back to a text that parses to the same table (same hash, same text).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kern_plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kern_plan *t, *u;
    if (kern_plan_create(&t) != 0) return 0;
    char err[256];
    err[0] = '\0';
    const int rc = kern_plan_parse(t, (const char *)data, size, "fuzz.txt", err, sizeof err);
    if (rc < 0) {
        if (strncmp(err, "fuzz.txt", 8) != 0 || kern_plan_count(t) != 0) abort();
        kern_plan_destroy(t);
        return 0;
    }
    if (kern_plan_count(t) != rc) abort();
    const int need = kern_plan_format(t, 0, NULL, 0);
    char *a = malloc((size_t)need + 1), *b = malloc((size_t)need + 1);
    if (!a || !b || kern_plan_format(t, 0, a, (size_t)need + 1) != need) abort();
    if (kern_plan_create(&u) != 0) abort();
    if (kern_plan_parse(u, a, (size_t)need, "again.txt", err, sizeof err) != rc) abort();
    if (kern_plan_format(u, 0, b, (size_t)need + 1) != need || memcmp(a, b, (size_t)need) != 0)
        abort();
    free(a);
    free(b);
    kern_plan_destroy(u);
    kern_plan_destroy(t);
    return 0;
}
