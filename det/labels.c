/*
 * The label table: every image's sizes and label rows, from the index summaries, once.
 *
 * Contract: one rule for a bad summary, whoever asks. A summary that does not parse, or that
 * det_summary_check refuses (the checks `ffr verify` applies), stops the build with the record
 * named; nothing is skipped, so the loader, AutoAnchor, image weights and the plots all see the
 * same images. The rows are not copied: each image's entry points at its rows in the reader's
 * index, which holds them anyway (at 118,287 images the copy was 140 bytes an image, more than
 * half of the trainer's start-up memory that grows with the dataset).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "det.h"

__attribute__((format(printf, 5, 6))) static int fail(char *err, size_t cap, const char *path,
                                                      int rc, const char *fmt, ...)
{
    if (err && cap) {
        int o = path ? snprintf(err, cap, "%s: ", path) : 0;
        if (o < 0 || (size_t)o >= cap) o = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + o, cap - (size_t)o, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Record i's summary, parsed and checked. */
static int summary(const struct ffr_reader *r, const char *path, uint64_t i, struct det_summary *s,
                   char *err, size_t cap)
{
    struct ffr_record_info ri;
    int rc = ffr_reader_info(r, i, &ri);
    if (rc < 0) return fail(err, cap, path, rc, "record %" PRIu64 ": %s", i, ffr_strerror(rc));
    if ((rc = det_summary_decode(ri.summary, ri.summary_len, s)) < 0)
        return fail(err, cap, path, rc, "record %" PRIu64 ": index summary does not parse (%s)", i,
                    ffr_strerror(rc));
    char why[200];
    if ((rc = det_summary_check(s, why, sizeof why)) < 0)
        return fail(err, cap, path, rc,
                    "record %" PRIu64 ": %s (ffr verify names every such record)", i, why);
    return 0;
}

int det_labels_build(const struct ffr_reader *r, const char *path, struct det_labels **out,
                     char *err, size_t cap)
{
    if (err && cap) err[0] = '\0';
    if (!r || !out) return -EINVAL;
    *out = NULL;
    const uint64_t n = ffr_reader_count(r);
    struct det_labels *t = calloc(1, sizeof *t);
    if (!t || n >= SIZE_MAX / sizeof *t->first - 1 ||
        !(t->image = malloc((size_t)(n ? n : 1) * sizeof *t->image)) ||
        !(t->first = malloc((size_t)(n + 1) * sizeof *t->first)) ||
        !(t->rows = malloc((size_t)(n ? n : 1) * sizeof *t->rows))) {
        det_labels_free(t);
        return fail(err, cap, path, -ENOMEM, "out of memory for the labels of %" PRIu64 " images",
                    n);
    }
    t->n = n;
    uint64_t rows = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct det_summary s;
        const int rc = summary(r, path, i, &s, err, cap);
        if (rc < 0) {
            det_labels_free(t);
            return rc;
        }
        t->image[i] = (struct det_image){ s.h, s.w, s.h0, s.w0 };
        t->first[i] = rows;
        t->rows[i] = s.labels;
        rows += s.n_labels;
        if (s.n_labels > t->max_rows) t->max_rows = s.n_labels;
    }
    t->first[n] = rows;
    *out = t;
    return 0;
}

void det_labels_free(struct det_labels *t)
{
    if (!t) return;
    free(t->image);
    free(t->first);
    free((void *)t->rows);
    free(t);
}
