/* Command-line number parsing shared by the programs (yolo-train, yolo-val, yolo-detect,
 * yolo-export): a whole argument or nothing, within a range, so every program refuses "12x",
 * "", "1e999" and out-of-range values the same way. */
#ifndef TRN_CLI_H
#define TRN_CLI_H

#include <stddef.h>

/* The whole of s as a base-10 integer in [lo, hi] into *out. Returns 0, or -EINVAL (then *out is
 * unchanged). */
int trn_cli_long(const char *s, long lo, long hi, long *out);

/* The whole of s as a finite number in [lo, hi] into *out. Returns 0, or -EINVAL (then *out is
 * unchanged). */
int trn_cli_double(const char *s, double lo, double hi, double *out);

/*
 * The compute threads (kern_ctx_opts.threads) a program uses: `requested` when > 0, else one per
 * CPU this process may use, shared by the `ranks` of this node (at least 1, at most 64). The
 * ops then split each layer themselves and the BLAS runs single-threaded (kern_ctx_create), so
 * the defaults never oversubscribe: OpenBLAS's own threads beside ours halved the step's speed
 * (issue 25).
 */
int trn_cli_threads(long requested, int ranks);

/* The line training and validation print at their start, counted now:
 * "compute: N thread(s) per op, BLAS M thread(s), W loader worker(s); T threads in the process;
 * BLAS kernels K" (K: kern_blas_core).
 * Returns buf. */
char *trn_cli_compute_line(char *buf, size_t cap, int threads, unsigned workers);

/*
 * A progress line as ultralytics' tqdm draws it (TQDM_BAR_FORMAT '{l_bar}{bar:10}{r_bar}'):
 * "DESC: 45%|████▌     | 53/118 [00:22<00:26,  2.41it/s]" (s/it below one per second, "?" for
 * the time left before the first step). done of total steps, secs since the start. Returns buf.
 */
char *trn_cli_bar(char *buf, size_t cap, const char *desc, long long done, long long total,
                  double secs);

/* A progress callback: one line (no newline), final true for the last of its run (an epoch's
 * or a validation's): a terminal redraws the others in place, a log keeps the final ones. */
typedef void (*trn_progress_fn)(void *ctx, const char *line, int final);

/* Threads of this process right now (the entries of /proc/self/task; -1 when unreadable): what
 * the programs report so that thread counts can be checked by counting, not by timing. */
int trn_cli_os_threads(void);

#endif
