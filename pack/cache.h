/*
 * pack/cache: a dataset split packed on first use and reused afterwards, for `yolo-train --data`
 * and `yolo-val --data` (ultralytics' train.py --data DATA.yaml, where a user never runs a
 * packer by hand).
 *
 * KEY. A pack is named by a 64-bit hash (ffr_hash) of everything that decides its bytes: the
 * record format and packer version, the size, interpolation, rounding and codec, the split, the
 * dataset yaml's own bytes (class names), and for every sample of the scan (pack_ds_scan, in its
 * sorted order) the image's and its label file's (or the COCO JSON's) path, size, mtime, ctime
 * and inode, "absent" for a missing label. A changed, added, removed, touched, replaced or
 * swapped file gives another key (ctime cannot be put back from user space), so a stale pack is
 * never read.
 *
 * PLACE. DIR/STEM-PATHHASH/SPLIT-SIZE-KEY.ffr, where STEM is the yaml's name without extension,
 * PATHHASH hashes its absolute path (two datasets never share a folder), and DIR is the caller's
 * (--pack-dir), else ROOT/ffyolo-packs beside the dataset (ROOT: the scan's root) when that can
 * be created and written and ROOT's mode has a write bit (a read-only share is read in place, also
 * by root), else $XDG_CACHE_HOME/ffyolo/packs ($HOME/.cache/... when unset). After
 * a new pack is complete, older packs of the same split and size in that folder (other keys: an
 * older source) are removed, except those a live process holds (opts.hold): a job reading an
 * older pack keeps it until it exits. Temporaries of killed packers of that split and size
 * (SPLIT-SIZE-*.ffr.tmp.PID.HOST with PID dead on this host) are removed on every call.
 *
 * CONCURRENCY. The ranks of one node may ask at once: an exclusive flock on SPLIT-SIZE.lock in
 * that folder is held from the check to the end of packing, so one packs and the others wait and
 * then find it. pack_run writes to a temporary and renames, so a killed packer leaves no file
 * that claims to be complete, and the next call packs again.
 *
 * Errors are negative (pack_ds / pack_image / ffr / errno codes); err gets one line naming the
 * file. Messages (the packer's progress bar and summary) go to opts.log; nothing else prints.
 */
#ifndef PACK_CACHE_H
#define PACK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "image.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pack_cache_opts {
    const char *data;            /* a dataset yaml (or any input pack_ds_scan reads) */
    const char *split;           /* "train", "val" or "test" */
    int size;                    /* long side of the packed images */
    int interp;                  /* -1: by split, as yolo-pack; else PACK_IMAGE_INTERP_* */
    enum pack_image_round round; /* resize rounding (PACK_IMAGE_ROUND_INT: ultralytics v7.0) */
    int codec;                   /* PACK_CODEC_* (packer.h) of the pixels [PACK_CODEC_RAW] */
    const char *dir;             /* NULL: beside the dataset, else the user's cache (above) */
    int threads;                 /* packer workers, 0 = all cores */
    bool progress;               /* the packer's progress bar on log */
    bool hold;                   /* keep a shared lock on the pack (result.hold_fd) [false] */
    FILE *log;                   /* packer output; NULL = stderr */
};

/* Defaults: split "train", size 640, interp by split, int rounding, raw pixels, all cores,
 * progress on. Raw, not yolo-pack's zstd: a pack cache is a local copy made for speed, as
 * ultralytics' --cache disk keeps decoded .npy arrays; zstd -1 saves a fifth of the bytes and
 * costs the loader a fifth of its rate (docs/benchmarks.md, issue 23). */
void pack_cache_opts_default(struct pack_cache_opts *o);

struct pack_cache_result {
    char path[4096];  /* the pack to read */
    bool hit;         /* true: it existed; false: packed by this call */
    uint64_t samples; /* images the scan found for the split */
    uint64_t key;     /* the content key */
    int hold_fd;      /* opts.hold: a descriptor with a shared lock on path, which no newer pack
                         removes while it is open (close it, or exit, to let go); else -1 */
};

/* Whether data names split: a dataset yaml's train/val/test entry (empty or null is none); any
 * other input has only "train". Returns 1, 0, or a negative error with one line in err (a yaml
 * that cannot be read, is too large or does not parse: said as such, not as a missing split). */
int pack_cache_has_split(const char *data, const char *split, char *err, size_t err_cap);

/* Finds or makes the pack of o->split of o->data. Returns 0 with *r filled, or an error. */
int pack_cache_get(const struct pack_cache_opts *o, struct pack_cache_result *r, char *err,
                   size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif
