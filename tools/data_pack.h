/*
 * --data DATA.yaml for yolo-train and yolo-val: a split of an ultralytics dataset yaml packed on
 * first use into the pack cache (pack/cache.h) at the run's image size, with the packer's
 * progress bar, and reused afterwards; one line says which pack is read and whether it was made.
 */
#ifndef TOOLS_DATA_PACK_H
#define TOOLS_DATA_PACK_H

#include <stdbool.h>
#include <stddef.h>

#include "argparse.h"

/* The --pack-dir and --pack-codec rows of a program's argument table (yolo-train, yolo-val):
 * dir and codec are the addresses of its const char * fields, passed to data_pack. */
/* --data DATA.yaml (what: how this program uses its splits) and the rows below. */
#define DATA_PACK_OPTS(data, dir, codec, what)       \
    AP_OPT("--data", AP_STR, (data), "DATA.yaml",    \
           "dataset yaml (ultralytics' form: path, " \
           "train, val, names): " what),             \
        DATA_PACK_ARGS(dir, codec)

#define DATA_PACK_ARGS(dir, codec)                                                          \
    AP_OPT("--pack-dir", AP_STR, dir, "DIR",                                                \
           "--data: the pack cache (default: ffyolo-packs in the dataset's folder when "    \
           "writable, else ~/.cache/ffyolo/packs)"),                                        \
    {                                                                                       \
        .names = "--pack-codec", .kind = AP_CHOICE, .dst = codec, .metavar = "C",           \
        .help = "--data: how the pack cache stores pixels: raw (default: fastest to train " \
                "from) or zstd (a fifth smaller, a fifth slower to load)",                  \
        .choices = "raw|zstd"                                                               \
    }

/* The pack of `split` of data at img (pack_dir: --pack-dir or NULL; codec: --pack-codec, "raw"
 * or "zstd", NULL for raw) into out. quiet: no progress bar (the packer's summary and the line
 * above still print). Returns 0, 1 when data names no such split (nothing printed), or -1 after
 * printing "PROG: why" on stderr. */
int data_pack(const char *prog, const char *data, const char *split, int img, const char *pack_dir,
              const char *codec, bool quiet, char *out, size_t cap);

#endif
