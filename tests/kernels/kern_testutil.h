/*
 * Helpers for the kern tests: a seeded RNG, NaN canaries, tolerance comparison that reports the
 * maximum error and the first mismatches (style guide rule 25), and a central-difference
 * gradient check. Header-only (static functions) so each test program stays one file.
 */
#ifndef KERN_TESTUTIL_H
#define KERN_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "tap.h"

/* ---- RNG (splitmix64): reproducible across platforms, seed printed by each test ---- */

#ifdef TESTS_SHARED_STATE /* one stream of draws for every unit of a program (tap.h) */
extern uint64_t kt_rng_state;
#ifdef TESTS_DEFINE_STATE
uint64_t kt_rng_state = 0x9e3779b97f4a7c15ull;
#endif
#else
static uint64_t kt_rng_state = 0x9e3779b97f4a7c15ull;
#endif

static inline void kt_seed(uint64_t s)
{
    kt_rng_state = s;
}

static inline uint64_t kt_next(void)
{
    uint64_t z = (kt_rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float kt_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(kt_next() >> 40) / (double)(1ull << 24));
}

static inline int kt_randint(int lo, int hi_incl)
{
    return lo + (int)(kt_next() % (uint64_t)(hi_incl - lo + 1));
}

static inline void kt_fill(float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = kt_uniform(lo, hi);
}

/* ---- canaries ---- */

/* A quiet NaN with a payload, so a surviving canary is recognisable bit for bit. */
static inline float kt_canary(void)
{
    const uint32_t bits = 0x7fc0beefu;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline void kt_poison(float *p, size_t n)
{
    const float c = kt_canary();
    for (size_t i = 0; i < n; i++)
        p[i] = c;
}

static inline int kt_is_canary(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    return bits == 0x7fc0beefu;
}

/* Number of non-finite values in p[0..n). */
static inline size_t kt_count_nonfinite(const float *p, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isfinite(p[i]);
    return bad;
}

static inline float *kt_alloc(size_t n)
{
    float *const p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        printf("Bail out! out of memory\n");
        exit(99);
    }
    return p;
}

/* ---- optimizer segment tables ---- */

/*
 * A random table over len elements: tensors at increasing offsets with 0..max_gap elements of
 * padding before each, of 1..small elements (or, one time in four when large > small, of
 * 1..large), groups 0..n_groups-1, then shuffled so the table order is not the memory order.
 * Returns the number of segments (the caller prepares the table if it needs to).
 */
static inline size_t kt_random_segs(struct kern_optim_seg *seg, size_t cap, size_t len, int max_gap,
                                    int small, int large, int n_groups)
{
    size_t n = 0, at = 0;
    while (n < cap) {
        at += (size_t)kt_randint(0, max_gap);
        size_t c = (size_t)kt_randint(1, large > small && !kt_randint(0, 3) ? large : small);
        if (n == 0 && at < len && at + c > len) c = len - at; /* never an empty table */
        if (at + c > len) break;
        seg[n].offset = at, seg[n].count = c, seg[n].group = kt_randint(0, n_groups - 1);
        at += c;
        n++;
    }
    for (size_t i = n; i > 1; i--) {
        const size_t j = (size_t)kt_randint(0, (int)i - 1);
        const struct kern_optim_seg t = seg[i - 1];
        seg[i - 1] = seg[j];
        seg[j] = t;
    }
    return n;
}

/* kt_random_segs, prepared (kern_optim_segs_prepare; *total its padded length); bails out of
 * the test when no table came out. */
static inline size_t kt_random_segs_prepared(struct kern_optim_seg *seg, size_t cap, size_t len,
                                             int max_gap, int small, int large, int n_groups,
                                             size_t *total)
{
    const size_t n = kt_random_segs(seg, cap, len, max_gap, small, large, n_groups);
    if (n == 0 || kern_optim_segs_prepare(seg, n, len, n_groups, total) < 0) {
        printf("Bail out! random segment table\n");
        exit(99);
    }
    return n;
}

/* Gives every third segment a channels-last lowp order (kern_optim_seg.lowp.c, .hw) that
 * permutes it: hw the least divisor >= 2 of its count, c the least divisor >= 2 of the rest
 * (a count with no such pair keeps the plain order). The table stays prepared. */
static inline void kt_segs_lowp_order(struct kern_optim_seg *seg, size_t n_seg)
{
    for (size_t s = 0; s < n_seg; s += 3) {
        const size_t n = seg[s].count;
        size_t hw = 2, c = 2;
        while (hw < n && n % hw)
            hw++;
        if (hw >= n) continue;
        while (c < n / hw && (n / hw) % c)
            c++;
        if (c >= n / hw) continue;
        seg[s].lowp = (struct kern_lowp_order){ .c = (int)c, .hw = (int)hw };
    }
}

/*
 * Appends two stem segments (kern_lowp_order.s2d) past a table's elements, from element `end`:
 * w6 (3, 3, 6, 6) whose copy is w3 (3, 16, 3, 3) channels last, and w6 (2, 1, 6, 6) whose copy
 * is w3 (2, 4, 3, 3) OIHW, each after a gap, their copies past both. Prepares the table again
 * (n_seg += 2, *total). Returns the buffers' length: every element from `end` that is not in
 * the new segments is padding (the copies' ranges included).
 */
static inline size_t kt_segs_add_s2d(struct kern_optim_seg *seg, size_t *n_seg, size_t end,
                                     int n_groups, size_t *total)
{
    const size_t n_a = 3 * 3 * 36, n_b = 2 * 1 * 36;  /* the two w6 */
    const size_t n3_a = 3 * 16 * 9, n3_b = 2 * 4 * 9; /* their w3 */
    const size_t a = end + 5, b = a + n_a + 7, at_a = b + n_b + 3, at_b = at_a + n3_a + 1;
    const size_t len = at_b + n3_b + 4;
    seg[*n_seg] = (struct kern_optim_seg){
        .offset = a, .count = n_a, .group = 0, .lowp = { .c = 3, .hw = 9, .s2d = 16, .at = at_a }
    };
    seg[*n_seg + 1] = (struct kern_optim_seg){ .offset = b,
                                               .count = n_b,
                                               .group = n_groups - 1,
                                               .lowp = { .c = 1, .hw = 0, .s2d = 4, .at = at_b } };
    *n_seg += 2;
    if (kern_optim_segs_prepare(seg, *n_seg, len, n_groups, total) < 0) {
        printf("Bail out! stem segments\n");
        exit(99);
    }
    return len;
}

/* Canaries everywhere in p[0..len), values in [lo, hi) inside the segments. */
static inline void kt_fill_segs(float *p, const struct kern_optim_seg *seg, size_t n_seg,
                                size_t len, float lo, float hi)
{
    kt_poison(p, len);
    for (size_t s = 0; s < n_seg; s++)
        kt_fill(p + seg[s].offset, seg[s].count, lo, hi);
}

/* ---- comparison ---- */

/*
 * One TAP point: |got - want| <= atol + rtol |want| for every element (NaN anywhere fails).
 * Prints the maximum absolute and relative error, and the first few mismatches.
 */
static inline int kt_check_close(const char *what, const float *got, const double *want, size_t n,
                                 double atol, double rtol)
{
    double max_abs = 0.0, max_rel = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]);
        const double lim = atol + rtol * fabs(want[i]);
        if (!(e <= lim)) {
            if (bad < 4)
                printf("#   %s[%zu]: got %.9g want %.9g (err %.3g > %.3g)\n", what, i,
                       (double)got[i], want[i], e, lim);
            bad++;
        }
        if (e > max_abs || isnan(e)) max_abs = e;
        const double rel = e / (fabs(want[i]) > 1e-30 ? fabs(want[i]) : 1e-30);
        if (rel > max_rel && fabs(want[i]) > atol) max_rel = rel;
    }
    const int r = ok(bad == 0, "%s: %zu values, atol %.1e rtol %.1e (max abs err %.3g, rel %.3g)",
                     what, n, atol, rtol, max_abs, max_rel);
    if (!r) printf("#   %zu of %zu out of tolerance\n", bad, n);
    return r;
}

/* Same, comparing two float arrays. */
static inline int kt_check_close_f(const char *what, const float *got, const float *want, size_t n,
                                   double atol, double rtol)
{
    double *const w = malloc((n ? n : 1) * sizeof(double));
    if (!w) exit(99);
    for (size_t i = 0; i < n; i++)
        w[i] = want[i];
    const int r = kt_check_close(what, got, w, n, atol, rtol);
    free(w);
    return r;
}

/* ---- finite differences ---- */

/* A scalar loss of the current inputs, computed through the op under test (double sum). */
typedef double kt_loss_fn(void *state);

/*
 * Central differences over every element of x[0..n) (or every `step`-th): fd = (L(x + h) -
 * L(x - h)) / 2h, compared with analytic[i] as |fd - an| <= atol + rtol |an|. x is restored.
 */
static inline int kt_check_fd(const char *what, float *x, size_t n, const float *analytic,
                              kt_loss_fn *loss, void *state, float h, double atol, double rtol,
                              size_t step)
{
    double *const fd = malloc((n ? n : 1) * sizeof(double));
    float *const an = kt_alloc(n);
    size_t m = 0;
    if (!fd) exit(99);
    for (size_t i = 0; i < n; i += (step ? step : 1)) {
        const float keep = x[i];
        x[i] = keep + h;
        const double lp = loss(state);
        x[i] = keep - h;
        const double lm = loss(state);
        x[i] = keep;
        /* The step actually taken, as float rounding moved it. */
        const double hh = ((double)(keep + h) - (double)(keep - h));
        fd[m] = (lp - lm) / hh;
        an[m] = analytic[i];
        m++;
    }
    char name[160];
    snprintf(name, sizeof(name), "%s (finite differences, h %.0e)", what, (double)h);
    /* Compare analytic against the FD estimate: the analytic value is the one under test. */
    const int r = kt_check_close(name, an, fd, m, atol, rtol);
    free(fd);
    free(an);
    return r;
}

/* Dot product in double: the scalar loss sum_i r_i y_i used by the gradient checks. */
static inline double kt_dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

static inline struct kern_ctx *kt_ctx(size_t ws)
{
    struct kern_ctx *ctx = NULL;
    const int rc = kern_ctx_create(NULL, &ctx);
    if (rc < 0 || (ws && kern_ctx_reserve(ctx, ws) < 0)) {
        printf("Bail out! kern_ctx_create: %s\n", kern_strerror(rc));
        exit(99);
    }
    return ctx;
}

/* A context with `threads` threads (1: the calling thread only). */
static inline struct kern_ctx *kt_ctx_threads(int threads)
{
    struct kern_ctx_opts o;
    struct kern_ctx *ctx = NULL;
    kern_ctx_opts_default(&o);
    o.threads = threads;
    const int rc = kern_ctx_create(&o, &ctx);
    if (rc < 0) {
        printf("Bail out! kern_ctx_create(threads %d): %s\n", threads, kern_strerror(rc));
        exit(99);
    }
    return ctx;
}

/* Seed from argv ("--seed N") or a fixed default; printed so any failure can be replayed. */
static inline uint64_t kt_seed_from_args(int argc, char **argv, uint64_t dflt)
{
    uint64_t s = dflt;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--seed")) s = strtoull(argv[i + 1], NULL, 0);
    kt_seed(s);
    tap_diag("seed %llu", (unsigned long long)s);
    return s;
}

/* NCHW (n, c, hw) into a channel-blocked (n, cpad / blk, hw, blk), oneDNN's nChw16c / nChw8c
 * (kern_bnblk's and kern_detect_blk's layout), pad lanes 0. */
static inline void kt_to_blk(float *dst, const float *src, int n, int c, int cpad, int blk,
                             size_t hw)
{
    memset(dst, 0, (size_t)n * (size_t)cpad * hw * sizeof *dst);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (size_t p = 0; p < hw; p++)
                dst[(((size_t)i * (size_t)(cpad / blk) + (size_t)(ch / blk)) * hw + p) *
                        (size_t)blk +
                    (size_t)(ch % blk)] = src[((size_t)i * (size_t)c + (size_t)ch) * hw + p];
}

#endif
