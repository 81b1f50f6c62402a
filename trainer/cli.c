/* Command-line number parsing (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>

int trn_cli_long(const char *s, long lo, long hi, long *out)
{
    if (!s || !out) return -EINVAL;
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -EINVAL;
    *out = v;
    return 0;
}

int trn_cli_double(const char *s, double lo, double hi, double *out)
{
    if (!s || !out) return -EINVAL;
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -EINVAL;
    *out = v;
    return 0;
}
