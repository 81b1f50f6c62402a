/* --data DATA.yaml: a split through the pack cache (data_pack.h). */
#include "data_pack.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "packer.h"

int data_pack(const char *prog, const char *data, const char *split, int img, const char *pack_dir,
              const char *codec, bool quiet, char *out, size_t cap)
{
    if (access(data, R_OK) != 0) {
        fprintf(stderr,
                "%s: --data %s: cannot read it\nhint: a dataset yaml in ultralytics' form "
                "(path, train, val, names), e.g. datasets/coco128.yaml\n",
                prog, data);
        return -1;
    }
    char err[1024] = "";
    const int has = pack_cache_has_split(data, split, err, sizeof err);
    if (has < 0) {
        fprintf(stderr, "%s: --data %s: %s\n", prog, data, err);
        return -1;
    }
    if (!has) return 1;
    struct pack_cache_opts o;
    pack_cache_opts_default(&o);
    o.data = data;
    o.split = split;
    o.size = img;
    o.dir = pack_dir;
    o.codec = codec && !strcmp(codec, "zstd") ? PACK_CODEC_ZSTD : PACK_CODEC_RAW;
    o.progress = !quiet && isatty(STDERR_FILENO);
    /* held for the life of the process (never closed): a newer pack of this split, made by
     * another job after a label changed, then leaves ours in place while we read it */
    o.hold = true;
    struct pack_cache_result r;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (pack_cache_get(&o, &r, err, sizeof err) < 0) {
        fprintf(stderr, "%s: --data %s, split %s: %s\n", prog, data, split, err);
        return -1;
    }
    if (strlen(r.path) >= cap) {
        fprintf(stderr, "%s: %s: path too long\n", prog, r.path);
        return -1;
    }
    snprintf(out, cap, "%s", r.path);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* the check of a warm cache (a scan and a stat of every file) says how long it took */
    fprintf(stderr, "%s: %s %s: %llu images at %d, %s %s", prog, data, split,
            (unsigned long long)r.samples, img, r.hit ? "packed before:" : "packed into", r.path);
    if (r.hit)
        fprintf(stderr, " (checked in %.2f s)",
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    fputc('\n', stderr);
    return 0;
}
