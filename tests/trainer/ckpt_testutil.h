/*
 * Reading a checkpoint's records back in the trainer's program-level tests
 * (test_train_run.c, test_dist_train.c, resident_testutil.h): the bytes of its first records,
 * concatenated, so two runs' states compare with one memcmp. Header-only (static inline).
 */
#ifndef CKPT_TESTUTIL_H
#define CKPT_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>

#include "ffr.h"

/* Records 0 .. max-1 (fewer if the file has fewer) of the checkpoint at path, concatenated.
 * *len: their total bytes (0 on failure); *count (may be NULL): the file's record count.
 * Returns a malloc'ed buffer, or NULL when the file does not open or a read fails. */
static inline char *ckpt_records(const char *path, uint64_t max, size_t *len, uint64_t *count)
{
    struct ffr_reader *r = NULL;
    *len = 0;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return NULL;
    const uint64_t n = ffr_reader_count(r), use = n < max ? n : max;
    size_t total = 0;
    for (uint64_t i = 0; i < use; i++) {
        struct ffr_record_info ri;
        ffr_reader_info(r, i, &ri);
        total += ri.raw_len;
    }
    char *buf = malloc(total + 1);
    size_t at = 0;
    for (uint64_t i = 0; buf && i < use; i++) {
        struct ffr_record_info ri;
        ffr_reader_info(r, i, &ri);
        if (ffr_reader_read(r, NULL, i, buf + at, ri.raw_len) != (int64_t)ri.raw_len) {
            free(buf);
            buf = NULL;
            break;
        }
        at += ri.raw_len;
    }
    ffr_reader_close(r);
    *len = total;
    if (count) *count = n;
    return buf;
}

#endif
