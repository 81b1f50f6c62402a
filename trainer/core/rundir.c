/* Run directories (rundir.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

#include "rundir.h"

int trn_mkdirs(const char *path)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return -ENAMETOOLONG;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0777) < 0 && errno != EEXIST) return -errno;
        *s = '/';
    }
    if (mkdir(p, 0777) < 0 && errno != EEXIST) return -errno;
    return 0;
}

int trn_run_dir(const char *project, const char *name, bool exist_ok, char *dst, size_t cap)
{
    struct stat st;
    if (snprintf(dst, cap, "%s/%s", project, name) >= (int)cap) return -ENAMETOOLONG;
    if (!exist_ok && stat(dst, &st) == 0) {
        for (int n = 2; n < 100000; n++) {
            if (snprintf(dst, cap, "%s/%s%d", project, name, n) >= (int)cap) return -ENAMETOOLONG;
            if (stat(dst, &st) != 0) break;
        }
    }
    return trn_mkdirs(dst);
}
