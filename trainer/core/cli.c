/* Command-line number parsing (see cli.h). */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "kern.h"

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

int trn_cli_threads(long requested, int ranks)
{
    if (requested > 0) return (int)(requested < 256 ? requested : 256);
    const int n = kern_cpu_count() / (ranks > 0 ? ranks : 1);
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

int trn_cli_os_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

char *trn_cli_compute_line(char *buf, size_t cap, int threads, unsigned workers)
{
    snprintf(buf, cap,
             "compute: %d thread(s) per op, BLAS %d thread(s), %u loader worker(s); %d threads in "
             "the process",
             threads > 1 ? threads : 1, kern_blas_threads(), workers, trn_cli_os_threads());
    return buf;
}
