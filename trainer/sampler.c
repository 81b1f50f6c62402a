/*
 * sampler: Philox4x32-10 streams, a Feistel permutation with cycle walking, the
 * DistributedSampler layout and the per-sample plan. See sampler.h for the contract.
 */
#include "sampler.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* Philox4x32 constants from the paper (multipliers and Weyl key increments). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Stream reserved for deriving the permutation key of an epoch (position 0). */
#define STREAM_PERM_KEY 255u

static inline void philox_round(uint32_t x[4], const uint32_t k[2])
{
    const uint64_t p0 = (uint64_t)PHILOX_M0 * x[0];
    const uint64_t p1 = (uint64_t)PHILOX_M1 * x[2];
    const uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k[0];
    const uint32_t y1 = (uint32_t)p1;
    const uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k[1];
    const uint32_t y3 = (uint32_t)p0;
    x[0] = y0;
    x[1] = y1;
    x[2] = y2;
    x[3] = y3;
}

void trn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t x[4] = { ctr[0], ctr[1], ctr[2], ctr[3] };
    uint32_t k[2] = { key[0], key[1] };
    philox_round(x, k);
    for (int i = 1; i < 10; i++) {
        k[0] += PHILOX_W0;
        k[1] += PHILOX_W1;
        philox_round(x, k);
    }
    memcpy(out, x, sizeof x);
}

void trn_rng_init(struct trn_rng *r, uint64_t seed, uint32_t epoch, uint64_t position,
                  uint32_t stream)
{
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->ctr[0] = (uint32_t)position;
    r->ctr[1] = (uint32_t)(position >> 32);
    r->ctr[2] = epoch;
    r->ctr[3] = (stream & 0xffu) << 24;
    r->used = 4;
}

uint32_t trn_rng_u32(struct trn_rng *r)
{
    if (r->used >= 4) {
        trn_philox4x32_10(r->ctr, r->key, r->buf);
        /* The block number lives in the low 24 bits; wrapping it keeps the stream bits. */
        r->ctr[3] = (r->ctr[3] & 0xff000000u) | ((r->ctr[3] + 1) & 0x00ffffffu);
        r->used = 0;
    }
    return r->buf[r->used++];
}

uint64_t trn_rng_u64(struct trn_rng *r)
{
    const uint64_t lo = trn_rng_u32(r);
    const uint64_t hi = trn_rng_u32(r);
    return hi << 32 | lo;
}

double trn_rng_uniform(struct trn_rng *r)
{
    return (double)(trn_rng_u64(r) >> 11) * 0x1.0p-53;
}

double trn_rng_uniform_range(struct trn_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * trn_rng_uniform(r);
}

uint64_t trn_rng_below(struct trn_rng *r, uint64_t n)
{
    if (n == 0) return 0;
    /* Accept x in [2^64 mod n, 2^64): a range whose length is a multiple of n. */
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
        const uint64_t x = trn_rng_u64(r);
        if (x >= threshold) return x % n;
    }
}

bool trn_rng_bernoulli(struct trn_rng *r, double p)
{
    const double u = trn_rng_uniform(r);
    return u < p;
}

double trn_rng_normal(struct trn_rng *r)
{
    for (;;) {
        const double u = 2.0 * trn_rng_uniform(r) - 1.0;
        const double v = 2.0 * trn_rng_uniform(r) - 1.0;
        const double s = u * u + v * v;
        if (s > 0.0 && s < 1.0) return u * sqrt(-2.0 * log(s) / s);
    }
}

double trn_rng_gamma(struct trn_rng *r, double shape)
{
    if (!(shape > 0.0) || !isfinite(shape)) return NAN;
    if (shape < 1.0) {
        /* Gamma(a) = Gamma(a + 1) * U^(1/a) (Marsaglia and Tsang, section 6). */
        const double g = trn_rng_gamma(r, shape + 1.0);
        double u;
        do
            u = trn_rng_uniform(r);
        while (u <= 0.0);
        return g * pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        const double x = trn_rng_normal(r);
        double v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        const double u = trn_rng_uniform(r);
        const double x2 = x * x;
        if (u < 1.0 - 0.0331 * x2 * x2) return d * v;
        if (u > 0.0 && log(u) < 0.5 * x2 + d * (1.0 - v + log(v))) return d * v;
    }
}

double trn_rng_beta(struct trn_rng *r, double a, double b)
{
    if (!(a > 0.0) || !(b > 0.0) || !isfinite(a) || !isfinite(b)) return NAN;
    const double x = trn_rng_gamma(r, a);
    const double y = trn_rng_gamma(r, b);
    return x / (x + y);
}

/* ---------------------------------------------------------------------------------------- */

/* splitmix64's finaliser: a bijective 64-bit mixer with full avalanche. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int trn_perm_init(struct trn_perm *p, uint64_t n, uint64_t key)
{
    memset(p, 0, sizeof *p);
    if (n == 0 || n > (1ull << 62)) return -EINVAL;
    uint32_t h = 1;
    while (h < 32 && (1ull << (2 * h)) < n)
        h++;
    p->n = n;
    p->half_bits = h;
    p->half_mask = (1ull << h) - 1;
    uint64_t state = key;
    for (int i = 0; i < TRN_PERM_ROUNDS; i++) {
        state += 0x9e3779b97f4a7c15ull;
        p->round_key[i] = mix64(state);
    }
    return 0;
}

static inline uint64_t feistel_f(const struct trn_perm *p, int round, uint64_t half)
{
    return mix64(half ^ p->round_key[round]) & p->half_mask;
}

static uint64_t feistel_forward(const struct trn_perm *p, uint64_t x)
{
    uint64_t l = x >> p->half_bits, r = x & p->half_mask;
    for (int i = 0; i < TRN_PERM_ROUNDS; i++) {
        const uint64_t t = l ^ feistel_f(p, i, r);
        l = r;
        r = t;
    }
    return l << p->half_bits | r;
}

static uint64_t feistel_backward(const struct trn_perm *p, uint64_t y)
{
    uint64_t l = y >> p->half_bits, r = y & p->half_mask;
    for (int i = TRN_PERM_ROUNDS - 1; i >= 0; i--) {
        const uint64_t t = r ^ feistel_f(p, i, l);
        r = l;
        l = t;
    }
    return l << p->half_bits | r;
}

uint64_t trn_perm_apply(const struct trn_perm *p, uint64_t x)
{
    if (p->n <= 1) return 0;
    x %= p->n;
    /* Cycle walking: the Feistel network permutes [0, 2^(2h)); following the cycle of x until
     * it re-enters [0, n) gives a permutation of [0, n). It terminates because the cycle
     * through x returns to x itself. */
    do
        x = feistel_forward(p, x);
    while (x >= p->n);
    return x;
}

uint64_t trn_perm_invert(const struct trn_perm *p, uint64_t y)
{
    if (p->n <= 1) return 0;
    y %= p->n;
    do
        y = feistel_backward(p, y);
    while (y >= p->n);
    return y;
}

/* ---------------------------------------------------------------------------------------- */

void trn_sampler_opts_default(struct trn_sampler_opts *o)
{
    memset(o, 0, sizeof *o);
    o->world_size = 1;
    o->shuffle = true;
}

int trn_sampler_init(struct trn_sampler *s, const struct trn_sampler_opts *o)
{
    if (!s) return -EINVAL;
    memset(s, 0, sizeof *s);
    if (!o || o->n == 0 || o->n > (1ull << 62) || o->world_size == 0 || o->rank >= o->world_size)
        return -EINVAL;
    s->opts = *o;
    trn_sampler_set_epoch(s, 0);
    return 0;
}

void trn_sampler_set_epoch(struct trn_sampler *s, uint32_t epoch)
{
    struct trn_rng r;
    trn_rng_init(&r, s->opts.seed, epoch, 0, STREAM_PERM_KEY);
    s->epoch = epoch;
    /* n was checked in trn_sampler_init, so this cannot fail. */
    (void)trn_perm_init(&s->perm, s->opts.n, trn_rng_u64(&r));
}

uint64_t trn_sampler_rank_count(const struct trn_sampler *s)
{
    const uint64_t w = s->opts.world_size;
    return s->opts.n / w + (s->opts.n % w != 0);
}

uint64_t trn_sampler_total(const struct trn_sampler *s)
{
    return trn_sampler_rank_count(s) * s->opts.world_size;
}

uint64_t trn_sampler_position(const struct trn_sampler *s, uint64_t local)
{
    return local * s->opts.world_size + s->opts.rank;
}

uint64_t trn_sampler_index(const struct trn_sampler *s, uint64_t g)
{
    const uint64_t x = g % s->opts.n;
    return s->opts.shuffle ? trn_perm_apply(&s->perm, x) : x;
}

void trn_sampler_rng(const struct trn_sampler *s, uint64_t g, uint32_t stream, struct trn_rng *r)
{
    trn_rng_init(r, s->opts.seed, s->epoch, g, stream);
}

/* ultralytics' load_mosaic index choice: `base` plus 3 uniform partners, then shuffled. */
static void draw_mosaic(struct trn_rng *r, uint64_t n, uint64_t base, uint64_t tiles[4])
{
    tiles[0] = base;
    for (int k = 1; k < 4; k++)
        tiles[k] = trn_rng_below(r, n);
    /* Fisher-Yates from the end, as Python's random.shuffle. */
    for (int i = 3; i > 0; i--) {
        const uint64_t j = trn_rng_below(r, (uint64_t)i + 1);
        const uint64_t t = tiles[i];
        tiles[i] = tiles[j];
        tiles[j] = t;
    }
}

void trn_sampler_plan(const struct trn_sampler *s, uint64_t g, const struct trn_plan_probs *probs,
                      struct trn_plan *out)
{
    static const struct trn_plan_probs none = { 0 };
    const struct trn_plan_probs *p = probs ? probs : &none;
    const uint64_t n = s->opts.n;
    struct trn_rng r;
    uint64_t tiles[4], mix[4];

    memset(out, 0, sizeof *out);
    out->position = g;
    out->index = trn_sampler_index(s, g);
    trn_sampler_rng(s, g, TRN_STREAM_PLAN, &r);

    out->mosaic = trn_rng_bernoulli(&r, p->mosaic);
    draw_mosaic(&r, n, out->index, tiles);
    const bool mixup = trn_rng_bernoulli(&r, p->mixup);
    draw_mosaic(&r, n, trn_rng_below(&r, n), mix);
    out->flipud = trn_rng_bernoulli(&r, p->flipud);
    out->fliplr = trn_rng_bernoulli(&r, p->fliplr);

    if (out->mosaic) {
        memcpy(out->tiles, tiles, sizeof tiles);
        out->mixup = mixup;
        if (mixup) memcpy(out->mixup_tiles, mix, sizeof mix);
    } else {
        out->tiles[0] = out->index;
    }
}
