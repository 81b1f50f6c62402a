/* The first batches of a dataset as pictures (plot_batches.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ffr.h"
#include "plot_batches.h"
#include "plots.h"

int trn_plot_batches(const char *records, const struct trn_loader_opts *lo, const char *dir,
                     const char *prefix, int count, void (*written)(void *ctx, const char *path),
                     void *ctx, char *err, size_t err_cap)
{
    if (!records || !lo || !dir || !prefix || count < 0) return -EINVAL;
    struct ffr_reader *r = NULL;
    int rc = ffr_reader_open(&r, records, NULL, err, err_cap);
    if (rc < 0) return rc;
    size_t mlen = 0;
    const char *meta = ffr_reader_metadata(r, &mlen);
    struct trn_plot_names names;
    if ((rc = trn_plot_names_parse(meta, mlen, &names)) < 0) {
        ffr_reader_close(r);
        return rc;
    }
    struct trn_loader *l = NULL;
    char why[512];
    rc = trn_loader_create(r, lo, &l, why, sizeof why);
    if (rc < 0 && err && err_cap) snprintf(err, err_cap, "%s: %s", records, why);
    int n = 0;
    for (; n < count && rc == 0; n++) {
        struct trn_batch b;
        if ((rc = trn_loader_next(l, &b)) < 0) {
            if (err && err_cap) snprintf(err, err_cap, "%s: %s", records, trn_loader_error(l));
            break;
        }
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s%d.jpg", dir, prefix, n);
        if ((rc = trn_plot_batch(&b, &names, path, err, err_cap)) < 0) break;
        if (written) written(ctx, path);
        if (b.step + 1 == b.steps) {
            n++; /* a one-batch epoch: plot what exists, as ultralytics does */
            break;
        }
    }
    trn_loader_destroy(l);
    trn_plot_names_free(&names);
    ffr_reader_close(r);
    return rc < 0 ? rc : n;
}
