/*
 * Replay driver for the fuzz targets when no fuzzing engine is linked (style guide rule 27):
 * every file in the corpus directories (or files) named on the command line is fed to
 * LLVMFuzzerTestOneInput once, so `meson test` replays the checked-in corpus on every build and
 * the sanitizer build catches regressions. Prints TAP, one point per input.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return -1;
    }
    const long n = ftell(f);
    rewind(f);
    /* One spare byte so a zero-length input still gets a valid, distinct pointer. */
    uint8_t *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
    const size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!buf || (long)got != n) {
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        ok(0, "corpus path %s exists", path);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        ok(replay_file(path) == 0, "replayed %s", path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        ok(0, "open corpus dir %s", path);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names); /* stable order, readable logs */
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        ok(replay_file(full) == 0, "replayed %s", full);
        free(names[i]);
    }
    free(names);
    ok(n > 0, "corpus %s is not empty", path);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        replay_path(argv[i]);
    return tap_done();
}
