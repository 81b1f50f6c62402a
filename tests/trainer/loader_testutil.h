/*
 * What the loader tests (test_loader.c, test_loader_gpu_aug.c, test_loader_stream.c) share
 * beyond run_testutil.h: counting log lines, opening a dataset of the scratch directory, a copy
 * of train.ffr with one record's checksum broken, and (with LOADER_TEST_BATCH defined) saved
 * copies of batches. Header-only (static inline). Include after run_testutil.h,
 * ffr.h and tap.h.
 */
#ifndef LOADER_TESTUTIL_H
#define LOADER_TESTUTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

#ifdef LOADER_TEST_BATCH
/* A copy of one batch (LOADER_TEST_BATCH: the largest batch size of the test), its pixels in
 * host memory; `same` compares everything but where the pixels were. Needs loader.h and kern.h. */
struct saved {
    uint32_t epoch;
    uint64_t step;
    int n, h, w;
    size_t bytes, nt;
    int on_device; /* device_images was set and images NULL */
    uint8_t *images;
    float *targets;
    struct trn_batch_image info[LOADER_TEST_BATCH];
};

/* Copies b; device pixels come down with kern_mem_copy on ctx's compute queue (on CUDA it waits
 * for the queue: the tensor is complete in its order), or are read in place with ctx NULL (a CPU
 * context's memory). Returns 0 or the copy's error. */
static inline int save_batch(struct saved *s, const struct trn_batch *b, struct kern_ctx *ctx)
{
    memset(s, 0, sizeof *s);
    s->epoch = b->epoch;
    s->step = b->step;
    s->n = b->n;
    s->h = b->height;
    s->w = b->width;
    s->bytes = b->image_bytes;
    s->nt = b->n_targets;
    s->on_device = b->device_images != NULL && b->images == NULL;
    s->images = malloc(b->image_bytes + 1);
    s->targets = malloc(b->n_targets * 6 * sizeof(float) + 1);
    int rc = 0;
    const void *px = b->device_images ? b->device_images : b->images;
    if (b->device_images && ctx)
        rc = kern_mem_copy(ctx, s->images, b->device_images, b->image_bytes, KERN_COPY_D2H);
    else if (px) /* host pixels, or a CPU context's (host) memory */
        memcpy(s->images, px, b->image_bytes);
    memcpy(s->targets, b->targets, b->n_targets * 6 * sizeof(float));
    memcpy(s->info, b->info, (size_t)b->n * sizeof *b->info);
    return rc;
}

static inline void unsave(struct saved *s, int n)
{
    for (int i = 0; i < n; i++) {
        free(s[i].images);
        free(s[i].targets);
    }
    memset(s, 0, (size_t)n * sizeof *s);
}

static inline int same(const struct saved *a, const struct saved *b)
{
    return a->epoch == b->epoch && a->step == b->step && a->n == b->n && a->h == b->h &&
           a->w == b->w && a->bytes == b->bytes && a->nt == b->nt &&
           memcmp(a->images, b->images, a->bytes) == 0 &&
           memcmp(a->targets, b->targets, a->nt * 6 * sizeof(float)) == 0 &&
           memcmp(a->info, b->info, (size_t)a->n * sizeof a->info[0]) == 0;
}
#endif

#endif
