/*
 * util: the few helpers every trainer layer and program needs, written once: the error line
 * (err/err_cap buffers that calls fill on failure), growable arrays, whole-file reads, and the
 * libyaml scalar comparison. Nothing here prints, exits or keeps state.
 */
#ifndef TRN_UTIL_H
#define TRN_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Format one line into err (err_cap bytes, truncated, NUL-terminated). NULL err or 0 err_cap:
 * nothing. */
void trn_seterr(char *err, size_t err_cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Seconds on the monotonic clock (for durations). */
double trn_now_s(void);

/* trn_seterr, then return rc: `return trn_fail(err, cap, -EINVAL, "...", ...);`. */
int trn_fail(char *err, size_t err_cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Make room for `need` elements of `elem` bytes in *p (capacity *cap elements): doubles from
 * 16, reallocs, and updates both; a no-op when need <= *cap. Returns 0, or -ENOMEM (the array is
 * left as it was, still owned by the caller).
 */
int trn_grow(void **p, size_t *cap, size_t need, size_t elem);

/*
 * Read a whole regular file (ffr_open_regular: FIFOs, devices and directories are refused with
 * -FFR_ENOTREG) into a new NUL-terminated buffer. At most max bytes: a longer file is -EFBIG.
 * *buf (free it) and *len are set on success. Returns 0 or a negative code (trn_strerror); err
 * gets "PATH: reason".
 */
int trn_read_file(const char *path, size_t max, char **buf, size_t *len, char *err, size_t err_cap);

/*
 * Write len bytes to path all or nothing: into PATH.tmp.PID (ffr_tmp_path; a killed writer's
 * leftovers are removed first), fsync'd when durable, then renamed over path. On failure the
 * temporary is removed and an existing path is left as it was. Returns 0 or -errno; err gets
 * "PATH: write failed: reason".
 */
int trn_write_file(const char *path, const void *data, size_t len, bool durable, char *err,
                   size_t err_cap);

/* Remove leading and trailing spaces, tabs, CR and LF of the string s in place. */
void trn_trim(char *s);

/* True when n is a scalar equal to s (byte for byte, length included). */
bool trn_yaml_scalar_is(const yaml_node_t *n, const char *s);

#ifdef __cplusplus
}
#endif

#endif
