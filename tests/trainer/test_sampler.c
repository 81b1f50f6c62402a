/*
 * The sampler: Philox against Random123's known answers, the keyed permutation is a bijection,
 * ranks partition every epoch as DistributedSampler does, the order is a pure function of
 * (seed, epoch, position), and the plan's draws have the rates and uniformity they claim.
 * Statistical bounds are 5 sigma (or chi-square mean + 5 sd) on fixed seeds: deterministic, and
 * far from the values a wrong draw (off-by-one range, biased shuffle, swapped probability) gives.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "tap.h"

static void test_philox_kat(void)
{
    /* Random123 kat_vectors, "philox4x32 10": counter, key, expected output. */
    static const uint32_t v[3][10] = {
        { 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
        { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
          0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
        { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
          0x94fdcceb, 0x5001e420, 0x24126ea1 },
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        trn_philox4x32_10(&v[i][0], &v[i][4], out);
        ok(memcmp(out, &v[i][6], sizeof out) == 0, "philox4x32-10 known answer %d", i);
    }
}

static void test_perm_bijection(void)
{
    static const uint64_t sizes[] = { 1,   2,   3,   4,    5,    7,    8,     31,    97,
                                      100, 127, 128, 1000, 1021, 4097, 65537, 100000 };
    uint8_t *seen = malloc(100000);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const uint64_t n = sizes[si];
        for (uint64_t key = 0; key < 3; key++) {
            struct trn_perm p;
            int good = trn_perm_init(&p, n, key * 0x12345678abcdefull) == 0;
            memset(seen, 0, n);
            uint64_t fixed = 0;
            for (uint64_t x = 0; x < n && good; x++) {
                const uint64_t y = trn_perm_apply(&p, x);
                if (y >= n || seen[y] || trn_perm_invert(&p, y) != x)
                    good = 0;
                else
                    seen[y] = 1;
                fixed += y == x;
            }
            /* A random permutation has about one fixed point; identity would have n. */
            ok(good && (n < 16 || fixed < n / 8),
               "permutation of [0, %llu) key %llu is a bijection with its inverse (%llu fixed)",
               (unsigned long long)n, (unsigned long long)key, (unsigned long long)fixed);
        }
    }
    free(seen);
    struct trn_perm p;
    is_int(trn_perm_init(&p, 0, 1), -EINVAL, "n = 0 rejected");
    is_int(trn_perm_init(&p, (1ull << 62) + 1, 1), -EINVAL, "n > 2^62 rejected");
    ok(trn_perm_init(&p, 1ull << 62, 7) == 0 && trn_perm_apply(&p, 12345) < (1ull << 62) &&
           trn_perm_invert(&p, trn_perm_apply(&p, 12345)) == 12345,
       "largest domain (2^62) round-trips");
}

static int make(struct trn_sampler *s, uint64_t n, uint64_t seed, uint32_t w, uint32_t r)
{
    struct trn_sampler_opts o;
    trn_sampler_opts_default(&o);
    o.n = n;
    o.seed = seed;
    o.world_size = w;
    o.rank = r;
    return trn_sampler_init(s, &o);
}

/* Every epoch, across all ranks: equal counts, disjoint positions, each sample at least once,
 * and the padding is exactly DistributedSampler's wrap (the first `pad` of the order again). */
static void test_partition(void)
{
    static const uint64_t sizes[] = { 1, 2, 3, 5, 7, 13, 64, 97, 101, 1001 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const uint64_t n = sizes[si];
        for (uint32_t w = 1; w <= 8; w++) {
            int good = 1;
            uint32_t *count = calloc(n, sizeof *count);
            uint64_t *order = malloc(n * sizeof *order);
            struct trn_sampler s0;
            good &= make(&s0, n, 42, 1, 0) == 0;
            trn_sampler_set_epoch(&s0, 3);
            for (uint64_t g = 0; g < n; g++)
                order[g] = trn_sampler_index(&s0, g);
            const uint64_t per = (n + w - 1) / w, pad = per * w - n;
            uint32_t *extra = calloc(n, sizeof *extra);
            for (uint64_t k = 0; k < pad; k++)
                extra[order[k % n]]++;
            uint64_t total = 0;
            for (uint32_t r = 0; r < w; r++) {
                struct trn_sampler s;
                good &= make(&s, n, 42, w, r) == 0;
                trn_sampler_set_epoch(&s, 3);
                good &= trn_sampler_rank_count(&s) == per && trn_sampler_total(&s) == per * w;
                for (uint64_t i = 0; i < per; i++) {
                    const uint64_t g = trn_sampler_position(&s, i);
                    good &= g % w == r && g < per * w;
                    const uint64_t idx = trn_sampler_index(&s, g);
                    /* The global order does not depend on the world size. */
                    good &= idx == order[g % n];
                    if (idx < n) count[idx]++;
                    total++;
                }
            }
            for (uint64_t i = 0; i < n; i++)
                good &= count[i] == 1 + extra[i];
            ok(good && total == per * w,
               "n=%llu world=%u: %llu per rank, every sample once (+%llu wrapped), same order as "
               "world 1",
               (unsigned long long)n, w, (unsigned long long)per, (unsigned long long)pad);
            free(count);
            free(order);
            free(extra);
        }
    }
    /* A global step covers the same samples for any world size. */
    {
        const uint64_t n = 1000, b = 4;
        int good = 1;
        for (uint32_t w = 1; w <= 8 && good; w++) {
            uint8_t *hit = calloc(n, 1);
            const uint64_t step = 5, gb = b * w;
            for (uint32_t r = 0; r < w; r++) {
                struct trn_sampler s;
                make(&s, n, 9, w, r);
                for (uint64_t j = 0; j < b; j++) {
                    const uint64_t g = trn_sampler_position(&s, step * b + j);
                    good &= g >= step * gb && g < (step + 1) * gb;
                    hit[trn_sampler_index(&s, g)] = 1;
                }
            }
            struct trn_sampler s1;
            make(&s1, n, 9, 1, 0);
            for (uint64_t g = step * gb; g < (step + 1) * gb; g++)
                good &= hit[trn_sampler_index(&s1, g)];
            free(hit);
        }
        ok(good, "global step k holds positions [k*B, (k+1)*B) whatever the world size");
    }
    struct trn_sampler s;
    is_int(make(&s, 0, 1, 1, 0), -EINVAL, "n = 0 rejected");
    is_int(make(&s, 10, 1, 0, 0), -EINVAL, "world size 0 rejected");
    is_int(make(&s, 10, 1, 4, 4), -EINVAL, "rank >= world size rejected");
}

static void test_determinism(void)
{
    const uint64_t n = 5000;
    struct trn_sampler a, b, c;
    make(&a, n, 1234, 1, 0);
    make(&b, n, 1234, 1, 0);
    make(&c, n, 1235, 1, 0);
    uint64_t same_ab = 0, same_ac = 0, same_epoch = 0, identity = 0;
    uint64_t *e0 = malloc(n * sizeof *e0);
    for (uint64_t g = 0; g < n; g++) {
        e0[g] = trn_sampler_index(&a, g);
        same_ab += e0[g] == trn_sampler_index(&b, g);
        same_ac += e0[g] == trn_sampler_index(&c, g);
        identity += e0[g] == g;
    }
    trn_sampler_set_epoch(&a, 1);
    for (uint64_t g = 0; g < n; g++)
        same_epoch += e0[g] == trn_sampler_index(&a, g);
    is_int(same_ab, n, "same seed, same epoch: same order");
    ok(same_ac < 20, "another seed: a different order (%llu of %llu positions agree)",
       (unsigned long long)same_ac, (unsigned long long)n);
    ok(same_epoch < 20, "another epoch: a different order (%llu agree)",
       (unsigned long long)same_epoch);
    ok(identity < 20, "the order is shuffled (%llu fixed points)", (unsigned long long)identity);
    trn_sampler_set_epoch(&a, 0);
    int back = 1;
    for (uint64_t g = 0; g < n; g++)
        back &= e0[g] == trn_sampler_index(&a, g);
    ok(back, "returning to epoch 0 gives epoch 0's order again (no hidden state)");

    struct trn_sampler_opts o;
    trn_sampler_opts_default(&o);
    o.n = 10;
    o.shuffle = false;
    struct trn_sampler v;
    trn_sampler_init(&v, &o);
    int ident = 1;
    for (uint64_t g = 0; g < 13; g++)
        ident &= trn_sampler_index(&v, g) == g % 10;
    ok(ident, "shuffle off: identity order, padding wraps to the start");

    /* Plans are pure functions of (seed, epoch, position). */
    struct trn_plan_probs pr = { .mosaic = 0.8, .mixup = 0.3, .flipud = 0.1, .fliplr = 0.5 };
    struct trn_plan p1, p2;
    make(&b, n, 77, 1, 0);
    trn_sampler_set_epoch(&b, 4);
    trn_sampler_plan(&b, 123, &pr, &p1);
    struct trn_sampler b2;
    make(&b2, n, 77, 1, 0);
    trn_sampler_set_epoch(&b2, 9);
    trn_sampler_plan(&b2, 124, &pr, &p2); /* touch other state first */
    trn_sampler_set_epoch(&b2, 4);
    trn_sampler_plan(&b2, 123, &pr, &p2);
    ok(memcmp(&p1, &p2, sizeof p1) == 0, "plan(seed, epoch, g) is reproducible");
    /* Partners do not move when a probability changes. */
    struct trn_plan_probs pr2 = pr;
    pr2.mixup = 1.0;
    pr2.fliplr = 0.0;
    int stable = 1;
    for (uint64_t g = 0; g < 200; g++) {
        trn_sampler_plan(&b, g, &pr, &p1);
        trn_sampler_plan(&b, g, &pr2, &p2);
        stable &= p1.mosaic == p2.mosaic && memcmp(p1.tiles, p2.tiles, sizeof p1.tiles) == 0 &&
                  p1.flipud == p2.flipud &&
                  (!p1.mixup || memcmp(p1.mixup_tiles, p2.mixup_tiles, sizeof p1.mixup_tiles) == 0);
    }
    ok(stable, "changing mixup/fliplr probabilities leaves the mosaic tiles and other draws alone");

    struct trn_rng r1, r2, r3;
    trn_rng_init(&r1, 5, 1, 99, TRN_STREAM_MOSAIC);
    trn_rng_init(&r2, 5, 1, 99, TRN_STREAM_MOSAIC);
    trn_rng_init(&r3, 5, 1, 99, TRN_STREAM_COLOR);
    int eq = 1, diff = 0;
    for (int i = 0; i < 100; i++) {
        const uint32_t x = trn_rng_u32(&r1);
        eq &= x == trn_rng_u32(&r2);
        diff += x != trn_rng_u32(&r3);
    }
    ok(eq && diff > 95, "streams: same inputs same words, another stream other words");
    free(e0);
}

/* Sum over bins of (obs - exp)^2 / exp. */
static double chi2(const uint64_t *obs, size_t bins, double expect)
{
    double x = 0;
    for (size_t i = 0; i < bins; i++)
        x += ((double)obs[i] - expect) * ((double)obs[i] - expect);
    return x / expect;
}

static void test_statistics(void)
{
    const uint64_t n = 50, plans = 40000;
    struct trn_sampler s;
    make(&s, n, 2024, 1, 0);
    trn_sampler_set_epoch(&s, 2);
    const struct trn_plan_probs pr = { .mosaic = 0.7, .mixup = 0.3, .flipud = 0.2, .fliplr = 0.5 };
    uint64_t partner[50] = { 0 }, slot[4] = { 0 }, mixidx[50] = { 0 };
    uint64_t n_mosaic = 0, n_mixup = 0, n_ud = 0, n_lr = 0, partners = 0, mixes = 0;
    int consistent = 1;
    for (uint64_t g = 0; g < plans; g++) {
        struct trn_plan p;
        trn_sampler_plan(&s, g, &pr, &p);
        consistent &= p.position == g && p.index == trn_sampler_index(&s, g % n);
        n_ud += p.flipud;
        n_lr += p.fliplr;
        if (!p.mosaic) {
            consistent &= !p.mixup && p.tiles[0] == p.index;
            continue;
        }
        n_mosaic++;
        n_mixup += p.mixup;
        /* The base sits in one slot; the other three are partners. */
        int base_slot = -1, copies = 0;
        for (int k = 0; k < 4; k++)
            if (p.tiles[k] == p.index) base_slot = k, copies++;
        consistent &= base_slot >= 0;
        for (int k = 0; k < 4; k++) {
            consistent &= p.tiles[k] < n;
            if (k != base_slot) partner[p.tiles[k]]++, partners++;
        }
        /* Slot uniformity only where the base is unambiguous (no partner equals it). */
        if (copies == 1) slot[base_slot]++;
        if (p.mixup)
            for (int k = 0; k < 4; k++)
                mixidx[p.mixup_tiles[k]]++, mixes++;
    }
    ok(consistent, "plans are consistent (index at its position, base among the tiles)");
    /* Bernoulli rates within 5 sigma. */
    const double sig_m = sqrt(plans * 0.7 * 0.3), sig_ud = sqrt(plans * 0.2 * 0.8),
                 sig_lr = sqrt(plans * 0.25), sig_x = sqrt((double)n_mosaic * 0.3 * 0.7);
    ok(fabs((double)n_mosaic - 0.7 * plans) < 5 * sig_m, "mosaic rate %.4f ~ 0.7",
       (double)n_mosaic / plans);
    ok(fabs((double)n_mixup - 0.3 * (double)n_mosaic) < 5 * sig_x,
       "mixup rate among mosaics %.4f ~ 0.3", (double)n_mixup / (double)n_mosaic);
    ok(fabs((double)n_ud - 0.2 * plans) < 5 * sig_ud, "flipud rate %.4f ~ 0.2",
       (double)n_ud / plans);
    ok(fabs((double)n_lr - 0.5 * plans) < 5 * sig_lr, "fliplr rate %.4f ~ 0.5",
       (double)n_lr / plans);
    /* Partners: n bins, df = n - 1; mean df, sd sqrt(2 df). The base index is excluded, but
     * when a partner equals the base it is counted once less: a tiny, uniform effect. */
    const double df = (double)n - 1, bound = df + 5 * sqrt(2 * df);
    const double c_part = chi2(partner, n, (double)partners / (double)n);
    ok(c_part < bound, "partners uniform over the dataset: chi2 %.1f < %.1f (df %.0f)", c_part,
       bound, df);
    const double c_slot = chi2(slot, 4, (double)(slot[0] + slot[1] + slot[2] + slot[3]) / 4);
    ok(c_slot < 3 + 5 * sqrt(6.0), "the sample's own tile is uniform over the 4 slots: chi2 %.2f",
       c_slot);
    const double c_mix = chi2(mixidx, n, (double)mixes / (double)n);
    ok(c_mix < bound, "mixup mosaic tiles uniform: chi2 %.1f < %.1f", c_mix, bound);

    /* Probabilities 0 and 1 are exact. */
    const struct trn_plan_probs all = { 1, 1, 1, 1 }, none = { 0, 0, 0, 0 };
    int exact = 1;
    for (uint64_t g = 0; g < 2000; g++) {
        struct trn_plan a, b;
        trn_sampler_plan(&s, g, &all, &a);
        trn_sampler_plan(&s, g, &none, &b);
        exact &= a.mosaic && a.mixup && a.flipud && a.fliplr;
        exact &= !b.mosaic && !b.mixup && !b.flipud && !b.fliplr && b.tiles[0] == b.index;
    }
    ok(exact, "p = 1 always, p = 0 never");

    /* The first sample of each epoch, over many epochs: uniform over the dataset. */
    uint64_t first[50] = { 0 };
    for (uint32_t e = 0; e < 20000; e++) {
        trn_sampler_set_epoch(&s, e);
        first[trn_sampler_index(&s, 0)]++;
    }
    const double c_first = chi2(first, n, 20000.0 / (double)n);
    ok(c_first < bound, "position 0 over 20000 epochs is uniform: chi2 %.1f < %.1f", c_first,
       bound);

    /* Distributions. */
    struct trn_rng r;
    trn_rng_init(&r, 11, 0, 0, TRN_STREAM_USER);
    uint64_t die[6] = { 0 };
    double sum_u = 0, sum_n = 0, sum_n2 = 0, sum_b = 0, sum_b2 = 0, sum_g = 0;
    int in_range = 1;
    const int m = 30000;
    for (int i = 0; i < m; i++) {
        const uint64_t d = trn_rng_below(&r, 6);
        in_range &= d < 6;
        if (d < 6) die[d]++;
        const double u = trn_rng_uniform(&r);
        in_range &= u >= 0 && u < 1;
        sum_u += u;
        const double z = trn_rng_normal(&r);
        sum_n += z;
        sum_n2 += z * z;
        const double be = trn_rng_beta(&r, 32, 32);
        in_range &= be > 0 && be < 1;
        sum_b += be;
        sum_b2 += be * be;
        sum_g += trn_rng_gamma(&r, 0.5);
        const double ur = trn_rng_uniform_range(&r, -3, 5);
        in_range &= ur >= -3 && ur < 5;
    }
    ok(in_range, "draws stay in their ranges");
    ok(chi2(die, 6, m / 6.0) < 5 + 5 * sqrt(10.0), "below(6) is uniform: chi2 %.2f",
       chi2(die, 6, m / 6.0));
    ok(fabs(sum_u / m - 0.5) < 5 * sqrt(1.0 / 12 / m), "uniform mean %.4f", sum_u / m);
    ok(fabs(sum_n / m) < 5 / sqrt(m) && fabs(sum_n2 / m - 1) < 5 * sqrt(2.0 / m),
       "normal mean %.4f variance %.4f", sum_n / m, sum_n2 / m);
    const double bm = sum_b / m, bv = sum_b2 / m - bm * bm, want_v = 1.0 / (4 * 65);
    ok(fabs(bm - 0.5) < 5 * sqrt(want_v / m) && fabs(bv - want_v) < 0.1 * want_v,
       "Beta(32,32) mean %.4f variance %.6f (want 0.5, %.6f)", bm, bv, want_v);
    ok(fabs(sum_g / m - 0.5) < 5 * sqrt(0.5 / m), "Gamma(0.5) mean %.4f", sum_g / m);
    ok(isnan(trn_rng_beta(&r, 0, 1)) && isnan(trn_rng_gamma(&r, -1)), "bad parameters give NAN");
    is_int(trn_rng_below(&r, 0), 0, "below(0) is 0");
    int one = 1;
    for (int i = 0; i < 100; i++)
        one &= trn_rng_below(&r, 1) == 0;
    ok(one, "below(1) is always 0");
    /* Huge n: no bias trap, still in range. */
    int big = 1;
    for (int i = 0; i < 1000; i++)
        big &= trn_rng_below(&r, (1ull << 63) + 1) <= (1ull << 63);
    ok(big, "below(2^63 + 1) in range");
}

/* ---------------------------------------------------------------------------------------- */
/* Shard-aware partition                                                                    */

static int make_sharded(struct trn_sampler *s, uint64_t n, const uint64_t *counts, uint32_t ns,
                        uint64_t seed, uint32_t w, uint32_t local, uint32_t r, uint64_t block,
                        bool sticky)
{
    struct trn_sampler_opts o;
    trn_sampler_opts_default(&o);
    o.n = n;
    o.seed = seed;
    o.world_size = w;
    o.rank = r;
    o.shard_counts = counts;
    o.n_shards = ns;
    o.local_world_size = local;
    o.shuffle_block = block;
    o.sticky_shards = sticky;
    return trn_sampler_init(s, &o);
}

/* Random shard sizes summing to n, some of them empty (as a writer's last shard can be). */
static void split_counts(uint64_t n, uint32_t ns, uint64_t seed, uint64_t *counts)
{
    struct trn_rng r;
    trn_rng_init(&r, seed, 0, 0, TRN_STREAM_USER);
    uint64_t left = n;
    for (uint32_t k = 0; k + 1 < ns; k++) {
        const uint64_t c = trn_rng_below(&r, 4) == 0 ? 0 : trn_rng_below(&r, 2 * n / ns + 2);
        counts[k] = c < left ? c : left;
        left -= counts[k];
    }
    counts[ns - 1] = left;
}

static uint32_t shard_of(const uint64_t *counts, uint32_t ns, uint64_t idx)
{
    for (uint32_t k = 0; k < ns; k++) {
        if (idx < counts[k]) return k;
        idx -= counts[k];
    }
    return UINT32_MAX;
}

/* Every epoch, across all ranks: equal counts per rank, each sample exactly once plus the
 * padding (T - n extra draws, each sample at most ceil(pad / n) extra times), for odd sizes,
 * world sizes, ranks per node, shard counts and windows. */
static void test_shard_partition(void)
{
    static const uint64_t sizes[] = { 1, 2, 7, 97, 1001 };
    static const uint32_t shard_n[] = { 1, 3, 8, 13 };
    static const uint64_t blocks[] = { 0, 5 };
    int all = 1, cases = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (size_t ki = 0; ki < sizeof shard_n / sizeof *shard_n; ki++)
            for (uint32_t w = 1; w <= 7; w++)
                for (uint32_t local = 1; local <= w; local += (w > 2 ? 2 : 1))
                    for (size_t bi = 0; bi < 2; bi++) {
                        const uint64_t n = sizes[si];
                        const uint32_t ns = shard_n[ki];
                        uint64_t counts[13];
                        split_counts(n, ns, n * 31 + ns, counts);
                        const uint64_t per = (n + w - 1) / w, pad = per * w - n;
                        uint32_t *seen = calloc(n, sizeof *seen);
                        int good = 1;
                        for (uint32_t epoch = 0; epoch < 2; epoch++) {
                            memset(seen, 0, n * sizeof *seen);
                            for (uint32_t r = 0; r < w; r++) {
                                struct trn_sampler s;
                                good &= make_sharded(&s, n, counts, ns, 7, w, local, r, blocks[bi],
                                                     false) == 0;
                                trn_sampler_set_epoch(&s, epoch);
                                good &= trn_sampler_rank_count(&s) == per;
                                for (uint64_t i = 0; i < per; i++) {
                                    const uint64_t idx =
                                        trn_sampler_index(&s, trn_sampler_position(&s, i));
                                    if (idx < n)
                                        seen[idx]++;
                                    else
                                        good = 0;
                                }
                                trn_sampler_destroy(&s);
                            }
                            uint64_t extra = 0;
                            for (uint64_t i = 0; i < n; i++) {
                                good &= seen[i] >= 1 && seen[i] <= 1 + (pad + n - 1) / n;
                                extra += seen[i] - 1;
                            }
                            good &= extra == pad;
                        }
                        free(seen);
                        if (!good)
                            ok(0, "n=%llu shards=%u world=%u local=%u block=%llu",
                               (unsigned long long)n, ns, w, local, (unsigned long long)blocks[bi]);
                        all &= good;
                        cases++;
                    }
    ok(all,
       "shard mode: %d cases of n, shards, world, ranks per node, window: equal counts per "
       "rank, every sample once plus the padding, every epoch",
       cases);

    struct trn_sampler s;
    const uint64_t c3[3] = { 4, 0, 6 };
    is_int(make_sharded(&s, 11, c3, 3, 1, 2, 1, 0, 0, false), -EINVAL, "counts not summing to n");
    is_int(make_sharded(&s, 10, NULL, 3, 1, 2, 1, 0, 0, false), -EINVAL, "NULL shard counts");
    is_int(make_sharded(&s, 10, c3, 3, 1, 2, 3, 0, 0, false), -EINVAL,
           "more ranks per node than ranks");
    ok(make_sharded(&s, 10, c3, 3, 1, 4, 2, 3, 0, false) == 0 && trn_sampler_node(&s) == 1 &&
           trn_sampler_node_count(&s) == 2,
       "rank 3 of 4 with 2 per node is on node 1 of 2");
    trn_sampler_destroy(&s);
    trn_sampler_destroy(NULL);
}

/* The order is a pure function of (seed, epoch, position), survives a copy, and changes from
 * one epoch to the next. */
static void test_shard_determinism(void)
{
    enum { N = 3001, NS = 17 };
    uint64_t counts[NS];
    split_counts(N, NS, 5, counts);
    struct trn_sampler a, b, c;
    make_sharded(&a, N, counts, NS, 99, 8, 4, 5, 0, false);
    make_sharded(&b, N, counts, NS, 99, 8, 4, 5, 0, false);
    trn_sampler_set_epoch(&a, 4);
    trn_sampler_set_epoch(&b, 9);
    trn_sampler_set_epoch(&b, 4);
    int same = trn_sampler_copy(&c, &a) == 0;
    trn_sampler_set_epoch(&a, 5); /* must not move c: it has its own table */
    trn_sampler_set_epoch(&a, 4);
    uint64_t moved = 0, samples = trn_sampler_rank_count(&a);
    struct trn_sampler e5;
    trn_sampler_copy(&e5, &b);
    trn_sampler_set_epoch(&e5, 5);
    for (uint64_t i = 0; i < samples; i++) {
        const uint64_t g = trn_sampler_position(&a, i);
        same &= trn_sampler_index(&a, g) == trn_sampler_index(&b, g) &&
                trn_sampler_index(&c, g) == trn_sampler_index(&a, g);
        moved += trn_sampler_index(&e5, g) != trn_sampler_index(&a, g);
    }
    ok(same, "same (seed, epoch, position): same sample, for a re-made sampler and for a copy");
    ok(moved > samples * 9 / 10, "epoch 5 moves %llu of %llu samples of this rank",
       (unsigned long long)moved, (unsigned long long)samples);
    trn_sampler_destroy(&a);
    trn_sampler_destroy(&b);
    trn_sampler_destroy(&c);
    trn_sampler_destroy(&e5);

    /* shuffle = false (validation): node spans in dataset order, each node reads a range. */
    struct trn_sampler v;
    struct trn_sampler_opts o;
    trn_sampler_opts_default(&o);
    o.n = N;
    o.world_size = 4;
    o.rank = 2;
    o.shard_counts = counts;
    o.n_shards = NS;
    o.local_world_size = 2;
    o.shuffle = false;
    int ordered = trn_sampler_init(&v, &o) == 0;
    uint64_t prev = 0;
    for (uint64_t i = 0; i < trn_sampler_rank_count(&v) && ordered; i++) {
        const uint64_t idx = trn_sampler_index(&v, trn_sampler_position(&v, i));
        ordered &= i == 0 || idx > prev || idx < 10; /* only the padding wraps to the start */
        prev = idx;
    }
    ok(ordered, "without shuffle a rank reads its node's contiguous range in order");
    trn_sampler_destroy(&v);
}

/* Shards each node touches in one epoch: shard mode against the plain (naive) partition, and
 * trn_sampler_node_shards against what the ranks actually read. */
static void test_shard_locality(void)
{
    enum { N = 20000, NS = 64 };
    uint64_t counts[NS];
    for (uint32_t k = 0; k < NS; k++)
        counts[k] = N / NS + (k % 3 == 0 ? 7 : k % 3 == 1 ? -7 : 0);
    uint64_t sum = 0;
    for (uint32_t k = 0; k + 1 < NS; k++)
        sum += counts[k];
    counts[NS - 1] = N - sum;
    static const uint32_t cfg[][2] = { { 16, 8 }, { 32, 4 }, { 7, 1 }, { 64, 1 } };
    for (size_t ci = 0; ci < sizeof cfg / sizeof *cfg; ci++) {
        const uint32_t w = cfg[ci][0], local = cfg[ci][1], nodes = (w + local - 1) / local;
        uint32_t worst = 0, worst_naive = 0;
        int listed = 1;
        for (uint32_t m = 0; m < nodes; m++) {
            uint8_t hit[NS] = { 0 }, hit_naive[NS] = { 0 };
            struct trn_sampler s;
            for (uint32_t r = m * local; r < w && r < (m + 1) * local; r++) {
                struct trn_sampler p;
                make_sharded(&s, N, counts, NS, 3, w, local, r, 0, false);
                make(&p, N, 3, w, r);
                trn_sampler_set_epoch(&s, 2);
                trn_sampler_set_epoch(&p, 2);
                for (uint64_t i = 0; i < trn_sampler_rank_count(&s); i++) {
                    hit[shard_of(counts, NS, trn_sampler_index(&s, trn_sampler_position(&s, i)))] =
                        1;
                    hit_naive[shard_of(counts, NS,
                                       trn_sampler_index(&p, trn_sampler_position(&p, i)))] = 1;
                }
                if (r + 1 < w && r + 1 < (m + 1) * local) trn_sampler_destroy(&s);
            }
            uint32_t a = 0, b = 0;
            for (uint32_t k = 0; k < NS; k++) {
                a += hit[k];
                b += hit_naive[k];
            }
            uint32_t list[NS];
            const int64_t got = trn_sampler_node_shards(&s, m, list, NS);
            uint8_t in_list[NS] = { 0 };
            for (int64_t j = 0; j < got && j < NS; j++)
                in_list[list[j]] = 1;
            listed &= got == (int64_t)a && !memcmp(in_list, hit, sizeof hit);
            trn_sampler_destroy(&s);
            if (a > worst) worst = a;
            if (b > worst_naive) worst_naive = b;
        }
        /* A node's span covers N / nodes samples: about NS / nodes shards plus the two it
         * shares with its neighbours (and the padding's, at the end). */
        const uint32_t bound = (NS + nodes - 1) / nodes + 3;
        ok(worst <= bound && worst_naive == NS,
           "world %u, %u per node (%u nodes): a node reads at most %u of %u shards (bound %u); "
           "the plain partition reads %u",
           w, local, nodes, worst, NS, bound, worst_naive);
        ok(listed, "world %u, %u per node: trn_sampler_node_shards lists exactly what is read", w,
           local);
    }
    struct trn_sampler s;
    make(&s, 10, 1, 2, 0);
    uint32_t x;
    is_int(trn_sampler_node_shards(&s, 0, &x, 1), -EINVAL, "node_shards needs shard mode");
}

/* Across epochs each sample's position in the epoch is uniform: chi-square of every sample's
 * histogram over the positions (or steps), averaged over the samples, against its mean plus 5
 * standard deviations; and the node holding a sample is uniform. */
static void shard_uniformity(uint64_t block, bool sticky, const char *what)
{
    enum { N = 96, NS = 8, W = 4, LOCAL = 2, B = 4, EPOCHS = 3000 };
    uint64_t counts[NS];
    for (uint32_t k = 0; k < NS; k++)
        counts[k] = N / NS;
    const uint64_t per = N / W, steps = per / B;
    uint64_t *step_hist = calloc((size_t)N * steps, sizeof *step_hist);
    uint64_t *pos_hist = calloc((size_t)N * N, sizeof *pos_hist);
    uint64_t node_hist[N][2];
    memset(node_hist, 0, sizeof node_hist);
    uint64_t same_shard = 0, pairs = 0;
    struct trn_sampler s[W];
    for (uint32_t r = 0; r < W; r++)
        make_sharded(&s[r], N, counts, NS, 11, W, LOCAL, r, block, sticky);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        uint64_t batch[W * B];
        for (uint32_t r = 0; r < W; r++)
            trn_sampler_set_epoch(&s[r], e);
        for (uint64_t g = 0; g < N; g++) {
            const uint32_t r = (uint32_t)(g % W);
            const uint64_t idx = trn_sampler_index(&s[r], g);
            pos_hist[idx * N + g]++;
            step_hist[idx * steps + g / W / B]++;
            node_hist[idx][r / LOCAL]++;
            batch[g % (W * B)] = idx;
            if (g % (W * B) == W * B - 1)
                for (uint32_t i = 0; i < W * B; i++)
                    for (uint32_t j = i + 1; j < W * B; j++) {
                        pairs++;
                        same_shard += batch[i] / (N / NS) == batch[j] / (N / NS);
                    }
        }
    }
    double c_pos = 0, c_step = 0, c_node = 0;
    for (uint64_t i = 0; i < N; i++) {
        c_pos += chi2(pos_hist + i * N, N, (double)EPOCHS / N);
        c_step += chi2(step_hist + i * steps, steps, (double)EPOCHS / steps);
        c_node += chi2(node_hist[i], 2, EPOCHS / 2.0);
    }
    c_pos /= N;
    c_step /= N;
    c_node /= N;
    /* chi2 with k bins has mean k - 1 and variance 2 (k - 1); the mean over N samples has
     * variance 2 (k - 1) / N (samples are nearly independent). */
    const double df_pos = N - 1, df_step = (double)steps - 1;
    if (!sticky)
        ok(c_node < 1 + 5 * sqrt(2.0 / N), "%s: the node of a sample is uniform (chi2 mean %.2f)",
           what, c_node);
    else
        ok(c_node > 100, "%s: a sample stays on its node (chi2 mean %.0f)", what, c_node);
    if (!block && !sticky) /* sticky: only the node's positions, by design */
        ok(c_pos < df_pos + 5 * sqrt(2 * df_pos / N),
           "%s: a sample's position in the epoch is uniform over all %d (chi2 mean %.1f, df %.0f)",
           what, N, c_pos, df_pos);
    ok(c_step < df_step + 5 * sqrt(2 * df_step / N),
       "%s: a sample's step in the epoch is uniform over %llu steps (chi2 mean %.2f, df %.0f)",
       what, (unsigned long long)steps, c_step, df_step);
    tap_diag("%s: P(two samples of a global batch share a shard) = %.3f (uniform shuffle: %.3f)",
             what, (double)same_shard / (double)pairs, (double)(N / NS - 1) / (N - 1));
    for (uint32_t r = 0; r < W; r++)
        trn_sampler_destroy(&s[r]);
    free(step_hist);
    free(pos_hist);
}

static void test_shard_statistics(void)
{
    shard_uniformity(0, false, "whole-span shuffle");
    shard_uniformity(6, false, "windows of 6");
    shard_uniformity(0, true, "sticky shards");

    /* Mosaic partners come from the node's own shards. */
    enum { N = 4000, NS = 40 };
    uint64_t counts[NS];
    for (uint32_t k = 0; k < NS; k++)
        counts[k] = N / NS;
    struct trn_sampler s;
    make_sharded(&s, N, counts, NS, 8, 8, 2, 5, 0, false);
    trn_sampler_set_epoch(&s, 1);
    uint32_t mine[NS];
    const int64_t k = trn_sampler_node_shards(&s, trn_sampler_node(&s), mine, NS);
    uint8_t own[NS] = { 0 };
    for (int64_t j = 0; j < k; j++)
        own[mine[j]] = 1;
    const struct trn_plan_probs pr = { .mosaic = 1, .mixup = 1 };
    int inside = 1;
    for (uint64_t i = 0; i < 200; i++) {
        struct trn_plan p;
        trn_sampler_plan(&s, trn_sampler_position(&s, i), &pr, &p);
        for (int t = 0; t < 4; t++)
            inside &= own[p.tiles[t] / (N / NS)] && own[p.mixup_tiles[t] / (N / NS)];
    }
    ok(inside && k <= NS / 4 + 3, "mosaic and mixup tiles come from the node's %lld shards",
       (long long)k);
    trn_sampler_destroy(&s);
}

/*
 * --image-weights: train.py's labels_to_class_weights / labels_to_image_weights on a hand-worked
 * example, random.choices' rates (5 sigma) and its zero-weight images never drawn, and a
 * sampler with a table draws its images and mosaic partners through it.
 */
static void test_image_weights(void)
{
    /* images: {0, 0, 1}, {1}, {} ; nc 3: counts 2, 2, 0 (-> 1); 1/count = .5 .5 1, / 2 = .25
     * .25 .5, x nc = .75 .75 1.5; maps 0: cw = .25 .25 .5, image weights .75 .25 0 */
    const uint64_t first[4] = { 0, 3, 4, 4 };
    const int32_t cls[4] = { 0, 0, 1, 1 };
    double cw[3], iw[3];
    int rc = trn_image_weights(first, cls, 3, 3, NULL, cw, iw);
    ok(rc == 0 && fabs(cw[0] - 0.75) < 1e-7 && fabs(cw[2] - 1.5) < 1e-7 &&
           fabs(iw[0] - 0.75) < 1e-7 && fabs(iw[1] - 0.25) < 1e-7 && iw[2] == 0,
       "class weights %g %g %g, image weights %g %g %g (train.py's: .75 .75 1.5, .75 .25 0)", cw[0],
       cw[1], cw[2], iw[0], iw[1], iw[2]);
    const double maps[3] = { 0.5, 0, 0 };
    rc = trn_image_weights(first, cls, 3, 3, maps, cw, iw);
    ok(rc == 0 && fabs(iw[0] - 0.375) < 1e-7 && fabs(iw[1] - 0.25) < 1e-7,
       "mAP 0.5 on class 0 quarters its weight: image 0 %g (0.375)", iw[0]);
    const int32_t bad[4] = { 0, 0, 3, 1 };
    ok(trn_image_weights(first, bad, 3, 3, NULL, cw, iw) == -EINVAL, "a class >= nc is refused");

    enum { N = 4000 };
    double *w = malloc(N * sizeof *w);
    uint64_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (int i = 0; i < N; i++)
        w[i] = i % 4; /* images i % 4 == k drawn with probability k / 6 */
    rc = trn_sampler_weighted_indices(w, N, 11, 2, a);
    int hits[4] = { 0 }, same = rc == 0 && trn_sampler_weighted_indices(w, N, 11, 2, b) == 0;
    for (int i = 0; rc == 0 && i < N; i++) {
        hits[a[i] % 4]++;
        same &= a[i] == b[i];
    }
    int rates = hits[0] == 0;
    for (int k = 1; k < 4; k++) {
        const double p = k / 6.0, sd = sqrt(N * p * (1 - p));
        rates &= fabs(hits[k] - N * p) < 5 * sd;
    }
    ok(rc == 0 && rates, "random.choices rates: %d %d %d %d of %d (0, 1/6, 2/6, 3/6)", hits[0],
       hits[1], hits[2], hits[3], N);
    ok(same, "the same (seed, epoch) draws the same images");
    trn_sampler_weighted_indices(w, N, 11, 3, b);
    ok(memcmp(a, b, N * sizeof *a) != 0, "another epoch draws others");
    w[1] = -1;
    ok(trn_sampler_weighted_indices(w, N, 11, 2, a) == -EINVAL, "a negative weight is refused");
    memset(w, 0, N * sizeof *w);
    ok(trn_sampler_weighted_indices(w, N, 11, 2, a) == -EINVAL, "all-zero weights are refused");

    /* A table of odd indices: every image and mosaic partner is odd; the mixup base is not
     * drawn through it (random.randint(0, n - 1)). */
    for (int i = 0; i < N; i++)
        a[i] = (uint64_t)(2 * (i % (N / 2)) + 1);
    struct trn_sampler_opts o;
    trn_sampler_opts_default(&o);
    o.n = N;
    o.seed = 5;
    struct trn_sampler s;
    trn_sampler_init(&s, &o);
    rc = trn_sampler_set_indices(&s, a);
    const struct trn_plan_probs pr = { .mosaic = 1, .mixup = 1 };
    int odd = rc == 0, even_base = 0;
    for (uint64_t g = 0; g < 500; g++) {
        struct trn_plan p;
        trn_sampler_plan(&s, g, &pr, &p);
        odd &= p.index % 2 == 1;
        for (int k = 0; k < 4; k++)
            odd &= p.tiles[k] % 2 == 1;
        for (int k = 0; k < 4; k++)
            even_base += p.mixup_tiles[k] % 2 == 0;
    }
    ok(odd && even_base > 0,
       "with the table every image and partner comes from it; the mixup base does not (%d even)",
       even_base);
    trn_sampler_set_indices(&s, NULL);
    struct trn_plan p;
    trn_sampler_plan(&s, 0, &pr, &p);
    ok(p.index == trn_sampler_index(&s, 0), "NULL restores the plain order");
    uint64_t counts[2] = { N / 2, N / 2 };
    struct trn_sampler sh;
    ok(make_sharded(&sh, N, counts, 2, 7, 2, 1, 0, 0, false) == 0 &&
           trn_sampler_set_indices(&sh, a) == -EINVAL,
       "a shard-aware sampler refuses a table (image weights are for one process)");
    trn_sampler_destroy(&sh);
    free(w);
    free(a);
    free(b);
}

/* trn_sampler_peer_plan against the readers computed here from trn_sampler_node_shards: who
 * holds a shard (every other node that read it since since_epoch, plus this epoch's lowest
 * other reader when it fetches first), the order they are asked in (most recent read first,
 * this epoch's reader last), one origin fetch per shard, and askers spread over equally recent
 * holders instead of all asking the lowest-numbered one. */
struct plan_rec {
    uint32_t n, nodes[64];
};

static void plan_hold(void *ctx, uint32_t shard, uint32_t node)
{
    struct plan_rec *r = (struct plan_rec *)ctx + shard;
    if (r->n < 64) r->nodes[r->n++] = node;
}

static void test_peer_plan(void)
{
    enum { NS = 60, NODES = 8, L = 2, E = 3 };
    uint64_t counts[NS];
    for (uint32_t k = 0; k < NS; k++)
        counts[k] = 100;
    struct trn_sampler s, t;
    if (make_sharded(&s, 100 * NS, counts, NS, 7, NODES * L, L, 0, 0, false) ||
        make_sharded(&t, 100 * NS, counts, NS, 7, NODES * L, L, 0, 0, false)) {
        ok(0, "peer plan: samplers");
        return;
    }
    /* reads[e][k][m]: node m reads shard k in epoch e */
    static bool reads[E + 1][NS][NODES];
    memset(reads, 0, sizeof reads);
    for (uint32_t e = 0; e <= E; e++) {
        trn_sampler_set_epoch(&t, e);
        for (uint32_t m = 0; m < NODES; m++) {
            uint32_t list[NS];
            const int64_t c = trn_sampler_node_shards(&t, m, list, NS);
            for (int64_t i = 0; i < c; i++)
                reads[e][list[i]][m] = true;
        }
    }
    trn_sampler_set_epoch(&s, E);
    static struct plan_rec rec[NS], again[NS];
    bool sets = true, order = true, firsts = true, same = true;
    uint32_t origin[NS] = { 0 }, ties = 0, lowest_first = 0;
    for (uint32_t since = 0; since <= 2; since += 2) {
        for (uint32_t m = 0; m < NODES; m++) {
            uint8_t first[NS], first2[NS];
            memset(rec, 0, sizeof rec);
            memset(again, 0, sizeof again);
            const int rc = trn_sampler_peer_plan(&s, m, since, NULL, first, plan_hold, rec);
            const int rc2 = trn_sampler_peer_plan(&s, m, since, NULL, first2, plan_hold, again);
            same &= rc == 0 && rc2 == 0 && !memcmp(first, first2, NS) &&
                    !memcmp(rec, again, sizeof rec);
            for (uint32_t k = 0; k < NS; k++) {
                /* the expected holders, and each one's last epoch (E + 1: this epoch's) */
                uint32_t want_last[NODES], n_want = 0, lowest = UINT32_MAX;
                for (uint32_t q = 0; q < NODES && lowest == UINT32_MAX; q++)
                    if (q != m && reads[E][k][q]) lowest = q;
                if (reads[E][k][m] && lowest > m) lowest = UINT32_MAX;
                for (uint32_t q = 0; q < NODES; q++) {
                    want_last[q] = 0;
                    if (q == m) continue;
                    for (uint32_t e = since; e < E; e++)
                        if (reads[e][k][q]) want_last[q] = e + 1;
                    if (!want_last[q] && q == lowest) want_last[q] = E + 1;
                    n_want += want_last[q] != 0;
                }
                sets &= rec[k].n == n_want;
                for (uint32_t i = 0; i < rec[k].n; i++)
                    sets &= want_last[rec[k].nodes[i]] != 0;
                /* most recent first; this epoch's reader (E + 1) last */
                for (uint32_t i = 1; i < rec[k].n; i++) {
                    const uint32_t a = want_last[rec[k].nodes[i - 1]];
                    const uint32_t b = want_last[rec[k].nodes[i]];
                    order &= b != E + 1 ? a >= b && a != E + 1 : true;
                }
                firsts &= first[k] == (n_want == 0);
                if (first[k] && reads[E][k][m] && since == 0) origin[k]++;
                /* a tie at the top: is the first asked always the lowest of it? */
                uint32_t top = rec[k].n ? want_last[rec[k].nodes[0]] : 0, tied = 0, low = NODES;
                for (uint32_t i = 0; i < rec[k].n; i++)
                    if (want_last[rec[k].nodes[i]] == top) {
                        tied++;
                        if (rec[k].nodes[i] < low) low = rec[k].nodes[i];
                    }
                if (tied >= 2 && top != E + 1) {
                    ties++;
                    lowest_first += rec[k].nodes[0] == low;
                }
            }
        }
    }
    ok(sets, "peer plan: the holders are the other readers since since_epoch, and this epoch's "
             "lowest other reader where it fetches first");
    ok(order, "peer plan: most recent readers asked first, this epoch's first reader last");
    ok(firsts, "peer plan: a node fetches first from the origin exactly the shards nobody holds");
    bool once = true;
    for (uint32_t k = 0; k < NS; k++)
        once &= origin[k] <= 1;
    ok(once, "peer plan: at most one node fetches each shard from the origin");
    ok(same, "peer plan: the same plan from the same sampler");
    ok(ties > 20 && lowest_first * 4 < ties * 3,
       "peer plan: equally recent holders are asked in a keyed order, not lowest first "
       "(%u of %u ties began with the lowest)",
       lowest_first, ties);
    is_int(trn_sampler_peer_plan(&s, NODES, 0, NULL, (uint8_t[NS]){ 0 }, NULL, NULL), -EINVAL,
           "peer plan: a node outside the job");
    is_int(trn_sampler_peer_plan(&s, 0, E + 1, NULL, (uint8_t[NS]){ 0 }, NULL, NULL), -EINVAL,
           "peer plan: since_epoch after the epoch");
    trn_sampler_destroy(&s);
    trn_sampler_destroy(&t);
}

int main(void)
{
    test_philox_kat();
    test_perm_bijection();
    test_partition();
    test_determinism();
    test_statistics();
    test_shard_partition();
    test_shard_determinism();
    test_shard_locality();
    test_shard_statistics();
    test_peer_plan();
    test_image_weights();
    return tap_done();
}
