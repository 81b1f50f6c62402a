/*
 * Helpers for the dataset tests: a temporary directory tree that the test writes its small
 * hand-made datasets into, removed at the end.
 */
#ifndef TEST_DATASET_UTIL_H
#define TEST_DATASET_UTIL_H

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "dataset_internal.h"
#include "tap.h"

static char tdu_root[512];

static int tdu_rm(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static inline void tdu_cleanup(void)
{
    if (tdu_root[0]) nftw(tdu_root, tdu_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* Creates the temporary root (exit 99 if impossible) and registers its removal. */
static inline const char *tdu_init(const char *tag)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tdu_root, sizeof tdu_root, "%s/ffyolo_%s_XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    if (!mkdtemp(tdu_root)) {
        printf("# cannot create a temporary directory: %s\n", strerror(errno));
        exit(99);
    }
    atexit(tdu_cleanup);
    return tdu_root;
}

/* Path under the root, formatted; returns a static buffer (one of 8 in rotation). */
static inline const char *tdu_path(const char *fmt, ...)
{
    static char bufs[8][2048];
    static int k;
    char rel[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tdu_root, rel);
    return b;
}

/* mkdir -p of the directory part of p (p itself if dir_too). */
static inline void tdu_mkdirs(const char *p, int dir_too)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", p);
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        mkdir(tmp, 0755);
        *s = '/';
    }
    if (dir_too) mkdir(tmp, 0755);
}

/* Writes n bytes (n = strlen when n is (size_t)-1) to root/rel, creating directories. */
static inline void tdu_write(const char *rel, const char *data, size_t n)
{
    const char *p = tdu_path("%s", rel);
    tdu_mkdirs(p, 0);
    FILE *f = fopen(p, "wb");
    if (!f) {
        printf("# cannot write %s: %s\n", p, strerror(errno));
        exit(99);
    }
    if (n == (size_t)-1) n = strlen(data);
    fwrite(data, 1, n, f);
    fclose(f);
}

static inline void tdu_text(const char *rel, const char *text)
{
    tdu_write(rel, text, (size_t)-1);
}

/* A stand-in image: the scanner never decodes images, it only needs the file to exist. */
static inline void tdu_image(const char *rel)
{
    tdu_write(rel, "\xff\xd8\xff\xd9", 4);
}

static inline void tdu_mkdir(const char *rel)
{
    tdu_mkdirs(tdu_path("%s", rel), 1);
}

/* pack_ds_scan of path with o; *rc its result (a failure printed as a TAP comment), err its
 * message. */
static inline struct pack_ds *tdu_scan(const char *path, const struct pack_ds_opts *o, int *rc,
                                       char *err, size_t cap)
{
    struct pack_ds *ds = NULL;
    err[0] = '\0';
    *rc = pack_ds_scan(path, o, &ds, err, cap);
    if (*rc) printf("#   scan %s: %s (%s)\n", path, pack_ds_strerror(*rc), err);
    return ds;
}

/* Ends a COCO parse that pack_coco_create began (rc: where it got to): converts to samples,
 * finishes ds and destroys c. On success *out = ds, else ds is destroyed. Returns rc. */
static inline int tdu_coco_end(struct pack_ds *ds, struct pack_coco *c, int rc,
                               struct pack_ds **out)
{
    if (!rc) rc = pack_coco_emit(c, NULL);
    if (!rc) rc = pack_ds_finish(ds);
    pack_coco_destroy(c);
    if (rc)
        pack_ds_destroy(ds);
    else
        *out = ds;
    return rc;
}

/* Same samples (paths, ids, sizes, rows, polygon points) and counters. */
static inline bool tdu_same_result(const struct pack_ds *a, const struct pack_ds *b)
{
    if (pack_ds_count(a) != pack_ds_count(b)) return false;
    if (memcmp(pack_ds_stats(a), pack_ds_stats(b), sizeof(struct pack_ds_stats)) != 0) return false;
    for (size_t i = 0; i < pack_ds_count(a); i++) {
        const struct pack_ds_sample *x = pack_ds_get(a, i), *y = pack_ds_get(b, i);
        if (strcmp(x->image_path, y->image_path) || x->image_id != y->image_id ||
            x->n_rows != y->n_rows || x->n_seg_points != y->n_seg_points || x->width != y->width ||
            x->height != y->height)
            return false;
        if (x->n_rows && memcmp(x->rows, y->rows, x->n_rows * sizeof *x->rows)) return false;
        if (x->n_seg_points && memcmp(x->seg_xy, y->seg_xy, 2 * x->n_seg_points * sizeof(float)))
            return false;
    }
    return true;
}

#endif
