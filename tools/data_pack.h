/*
 * --data DATA.yaml for yolo-train and yolo-val: a split of an ultralytics dataset yaml packed on
 * first use into the pack cache (pack/cache.h) at the run's image size, with the packer's
 * progress bar, and reused afterwards; one line says which pack is read and whether it was made.
 */
#ifndef TOOLS_DATA_PACK_H
#define TOOLS_DATA_PACK_H

#include <stdbool.h>
#include <stddef.h>

/* The pack of `split` of data at img (pack_dir: --pack-dir or NULL; codec: --pack-codec, "raw"
 * or "zstd", NULL for raw) into out. quiet: no progress bar (the packer's summary and the line
 * above still print). Returns 0, 1 when data names no such split (nothing printed), or -1 after
 * printing "PROG: why" on stderr. */
int data_pack(const char *prog, const char *data, const char *split, int img, const char *pack_dir,
              const char *codec, bool quiet, char *out, size_t cap);

#endif
