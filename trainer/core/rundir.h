/* Run directories as ultralytics names them (runs/train/exp, exp2, ...), shared by the programs. */
#ifndef TRN_RUNDIR_H
#define TRN_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>

/* mkdir -p path. Returns 0 or -errno (-ENAMETOOLONG for a path over PATH_MAX). */
int trn_mkdirs(const char *path);

/*
 * ultralytics' increment_path(Path(project) / name, exist_ok, mkdir=True): PROJECT/NAME when it
 * does not exist (or exist_ok), else the first of PROJECT/NAME2, NAME3, ... that does not; the
 * directory is created. The path goes to dst. Returns 0 or -errno.
 */
int trn_run_dir(const char *project, const char *name, bool exist_ok, char *dst, size_t cap);

#endif
