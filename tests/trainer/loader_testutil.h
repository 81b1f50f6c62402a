/*
 * What the loader tests (test_loader.c, test_loader_gpu_aug.c) share beyond run_testutil.h:
 * counting log lines, opening a dataset of the scratch directory, and a copy of train.ffr with
 * one record's checksum broken. Header-only (static inline). Include after run_testutil.h,
 * ffr.h and tap.h.
 */
#ifndef LOADER_TESTUTIL_H
#define LOADER_TESTUTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static inline struct ffr_reader *open_ds(const char *name)
{
    char path[512], err[256];
    struct ffr_reader *r = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (ffr_reader_open(&r, path, NULL, err, sizeof err) < 0) {
        printf("# cannot open %s: %s\n", path, err);
        return NULL;
    }
    return r;
}

/* Flip one stored byte of record `bad` in a copy of train.ffr: its checksum fails. */
static inline int write_checksum_bad(uint64_t bad)
{
    struct ffr_reader *r = open_ds("train.ffr");
    if (!r) return -1;
    struct ffr_record_info info;
    ffr_reader_info(r, bad, &info);
    ffr_reader_close(r);
    if (run("cp %s/train.ffr %s/checksum.ffr", dir, dir) != 0) return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/checksum.ffr", dir);
    const int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    uint8_t byte;
    const off_t at = (off_t)(info.offset + FFR_FRAME_HEADER_SIZE + info.stored_len / 2);
    int rc = pread(fd, &byte, 1, at) == 1 ? 0 : -1;
    byte ^= 0x40;
    if (rc == 0 && pwrite(fd, &byte, 1, at) != 1) rc = -1;
    close(fd);
    return rc;
}

#endif
