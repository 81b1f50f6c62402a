/*
 * Minimal TAP producer for the test programs (style guide rule 23).
 *
 * Each check prints "ok N - desc" or "not ok N - desc # file:line"; tap_done() prints the plan
 * and "# N passed, M failed" and returns the exit code: 0 all passed, 1 any failed. Programs
 * that cannot run here call tap_skip_all(), which prints a SKIP plan that meson reads as a skip.
 * The exit code, not the text, decides the result.
 */
#ifndef FFYOLO_TAP_H
#define FFYOLO_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef TESTS_SHARED_STATE
/* Several translation units report into one TAP stream (tests/kernels/test_cuda_ops.c): the
 * counters are defined once, in the unit that also defines TESTS_DEFINE_STATE. */
extern int tap_n_run, tap_n_failed;
#ifdef TESTS_DEFINE_STATE
int tap_n_run, tap_n_failed;
#endif
#else
static int tap_n_run;
static int tap_n_failed;
#endif

static inline int tap_check(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    tap_n_run++;
    if (!cond) tap_n_failed++;
    printf("%sok %d - ", cond ? "" : "not ", tap_n_run);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (!cond) printf(" # %s:%d", file, line);
    printf("\n");
    fflush(stdout);
    return cond;
}

/* ok(cond, "printf-style description"): one TAP test point; evaluates to cond. */
#define ok(cond, ...) tap_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* is_int(got, want, desc): equality of integers, printing both on failure. */
#define is_int(got, want, ...)                                                 \
    do {                                                                       \
        const long long tap_g_ = (long long)(got), tap_w_ = (long long)(want); \
        if (!ok(tap_g_ == tap_w_, __VA_ARGS__))                                \
            printf("#   got %lld, want %lld\n", tap_g_, tap_w_);               \
    } while (0)

static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* Skips n test points that cannot run here ("ok N # SKIP why", which TAP readers count as
 * skipped, not passed). */
static inline void tap_skip(int n, const char *why)
{
    for (int i = 0; i < n; i++)
        printf("ok %d # SKIP %s\n", ++tap_n_run, why);
    fflush(stdout);
}

/* Skips the whole program: the plan "1..0 # SKIP why" is what meson's TAP reader turns into
 * SKIP; it must exit 0, because under protocol 'tap' meson 1.0 reports exit 77 as an error.
 * (Programs registered with the exit-code protocol, like the CUDA parity test, exit 77.) */
static inline void tap_skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    exit(0);
}

static inline int tap_done(void)
{
    printf("1..%d\n# %d passed, %d failed\n", tap_n_run, tap_n_run - tap_n_failed, tap_n_failed);
    return tap_n_failed ? 1 : 0;
}

#endif
