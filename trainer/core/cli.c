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
             "the process; BLAS kernels %s",
             threads > 1 ? threads : 1, kern_blas_threads(), workers, trn_cli_os_threads(),
             kern_blas_core());
    return buf;
}

/* tqdm's format_interval: [H:]MM:SS */
static void interval(char *dst, size_t cap, double secs)
{
    long t = secs > 0 ? (long)(secs + 0.5) : 0;
    const long h = t / 3600, m = t / 60 % 60, sec = t % 60;
    if (h)
        snprintf(dst, cap, "%ld:%02ld:%02ld", h, m, sec);
    else
        snprintf(dst, cap, "%02ld:%02ld", m, sec);
}

char *trn_cli_bar(char *buf, size_t cap, const char *desc, long long done, long long total,
                  double secs)
{
    static const char *const part[8] = { " ",      "\u258f", "\u258e", "\u258d",
                                         "\u258c", "\u258b", "\u258a", "\u2589" };
    const double frac = total > 0 ? (double)done / (double)total : 0.0;
    char bar[64] = "";
    const int cells = (int)(frac * 10 * 8 + 1e-9), full = cells / 8 > 10 ? 10 : cells / 8;
    size_t o = 0;
    for (int i = 0; i < full; i++)
        o += (size_t)snprintf(bar + o, sizeof bar - o, "\u2588");
    if (full < 10) o += (size_t)snprintf(bar + o, sizeof bar - o, "%s", part[cells % 8]);
    for (int i = full + 1; i < 10; i++)
        o += (size_t)snprintf(bar + o, sizeof bar - o, " ");
    char el[32], left[32] = "?", rate[32] = "?it/s";
    interval(el, sizeof el, secs);
    if (done > 0 && secs > 0) {
        const double r = (double)done / secs;
        interval(left, sizeof left, (double)(total - done) / r);
        if (r >= 1.0)
            snprintf(rate, sizeof rate, "%5.2fit/s", r);
        else
            snprintf(rate, sizeof rate, "%5.2fs/it", 1.0 / r);
    }
    snprintf(buf, cap, "%s: %3.0f%%|%s| %lld/%lld [%s<%s, %s]", desc, 100.0 * frac, bar, done,
             total, el, left, rate);
    return buf;
}
