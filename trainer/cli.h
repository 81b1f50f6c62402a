/* Command-line number parsing shared by the programs (yolo-train, yolo-val, yolo-detect,
 * yolo-export): a whole argument or nothing, within a range, so every program refuses "12x",
 * "", "1e999" and out-of-range values the same way. */
#ifndef TRN_CLI_H
#define TRN_CLI_H

/* The whole of s as a base-10 integer in [lo, hi] into *out. Returns 0, or -EINVAL (then *out is
 * unchanged). */
int trn_cli_long(const char *s, long lo, long hi, long *out);

/* The whole of s as a finite number in [lo, hi] into *out. Returns 0, or -EINVAL (then *out is
 * unchanged). */
int trn_cli_double(const char *s, double lo, double hi, double *out);

#endif
