/*
 * sampler: Philox4x32-10 streams, a Feistel permutation with cycle walking, the
 * DistributedSampler layout and the per-sample plan. See sampler.h for the contract.
 */
#include "sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Philox4x32 constants from the paper (multipliers and Weyl key increments). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Stream reserved for deriving the permutation key of an epoch (position 0). */
#define STREAM_PERM_KEY 255u
/* Shard mode: the epoch's shard order (position 0) and each node's span shuffle (position =
 * node). */
#define STREAM_SHARD_KEY 254u
#define STREAM_NODE_KEY  253u
/* The epoch that keys a sticky shard order (any fixed value: the order then depends on the seed
 * only). */
#define STICKY_EPOCH 0xffffffffu

/* The shard layout: immutable counts and natural first indices, plus the epoch's order. */
struct trn_shard_table {
    uint32_t n_shards;
    uint32_t nodes;    /* ceil(world_size / local) */
    uint32_t local;    /* ranks per node */
    uint64_t *first;   /* [n_shards] global number of each shard's first record */
    uint64_t *count;   /* [n_shards] records */
    uint32_t *order;   /* [n_shards] the shard in each slot of the epoch's virtual order */
    uint64_t *start;   /* [n_shards + 1] virtual position where each slot begins */
    uint64_t node_key; /* the epoch's key for the node-span shuffles */
};

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

/* One allocation holds every array, so a copy is one memcpy and a free is one free. */
static struct trn_shard_table *table_alloc(uint32_t n_shards)
{
    const size_t ns = n_shards;
    const size_t bytes = sizeof(struct trn_shard_table) + ns * 8 * 3 + 8 + ns * 4;
    struct trn_shard_table *t = calloc(1, bytes);
    if (!t) return NULL;
    uint64_t *u = (uint64_t *)(t + 1);
    t->n_shards = n_shards;
    t->first = u;
    t->count = u + ns;
    t->start = u + 2 * ns;
    t->order = (uint32_t *)(u + 3 * ns + 1);
    return t;
}

static size_t table_bytes(const struct trn_shard_table *t)
{
    return sizeof *t + (size_t)t->n_shards * 8 * 3 + 8 + (size_t)t->n_shards * 4;
}

int trn_sampler_init(struct trn_sampler *s, const struct trn_sampler_opts *o)
{
    if (!s) return -EINVAL;
    memset(s, 0, sizeof *s);
    if (!o || o->n == 0 || o->n > (1ull << 62) || o->world_size == 0 || o->rank >= o->world_size)
        return -EINVAL;
    if (o->n_shards) {
        const uint32_t local = o->local_world_size ? o->local_world_size : 1;
        if (!o->shard_counts || local > o->world_size) return -EINVAL;
        uint64_t sum = 0;
        for (uint32_t k = 0; k < o->n_shards; k++) {
            if (o->shard_counts[k] > o->n - sum) return -EINVAL;
            sum += o->shard_counts[k];
        }
        if (sum != o->n) return -EINVAL;
        struct trn_shard_table *t = table_alloc(o->n_shards);
        if (!t) return -ENOMEM;
        t->local = local;
        t->nodes = (o->world_size + local - 1) / local;
        sum = 0;
        for (uint32_t k = 0; k < o->n_shards; k++) {
            t->first[k] = sum;
            t->count[k] = o->shard_counts[k];
            sum += o->shard_counts[k];
        }
        s->shards = t;
    }
    s->opts = *o;
    s->opts.shard_counts = NULL; /* borrowed only during init */
    trn_sampler_set_epoch(s, 0);
    return 0;
}

int trn_sampler_copy(struct trn_sampler *dst, const struct trn_sampler *src)
{
    *dst = *src;
    if (!src->shards) return 0;
    const size_t bytes = table_bytes(src->shards);
    struct trn_shard_table *t = malloc(bytes);
    if (!t) {
        memset(dst, 0, sizeof *dst);
        return -ENOMEM;
    }
    memcpy(t, src->shards, bytes);
    /* Re-point the arrays into the new block (same offsets). */
    const ptrdiff_t d = (char *)t - (char *)src->shards;
    t->first = (uint64_t *)((char *)t->first + d);
    t->count = (uint64_t *)((char *)t->count + d);
    t->start = (uint64_t *)((char *)t->start + d);
    t->order = (uint32_t *)((char *)t->order + d);
    dst->shards = t;
    return 0;
}

void trn_sampler_destroy(struct trn_sampler *s)
{
    if (!s) return;
    free(s->shards);
    memset(s, 0, sizeof *s);
}

/* The epoch's shard order: a keyed bijection of the slots (identity without shuffle), and the
 * virtual position where each slot starts. */
static void table_set_epoch(struct trn_shard_table *t, const struct trn_sampler_opts *o,
                            uint32_t epoch)
{
    struct trn_rng r;
    trn_rng_init(&r, o->seed, o->sticky_shards ? STICKY_EPOCH : epoch, 0, STREAM_SHARD_KEY);
    struct trn_perm p;
    (void)trn_perm_init(&p, t->n_shards, trn_rng_u64(&r)); /* n_shards >= 1: cannot fail */
    uint64_t at = 0;
    for (uint32_t k = 0; k < t->n_shards; k++) {
        const uint32_t sh = o->shuffle ? (uint32_t)trn_perm_apply(&p, k) : k;
        t->order[k] = sh;
        t->start[k] = at;
        at += t->count[sh];
    }
    t->start[t->n_shards] = at;
    trn_rng_init(&r, o->seed, epoch, 0, STREAM_NODE_KEY);
    t->node_key = trn_rng_u64(&r);
}

void trn_sampler_set_epoch(struct trn_sampler *s, uint32_t epoch)
{
    struct trn_rng r;
    trn_rng_init(&r, s->opts.seed, epoch, 0, STREAM_PERM_KEY);
    s->epoch = epoch;
    /* n was checked in trn_sampler_init, so this cannot fail. */
    (void)trn_perm_init(&s->perm, s->opts.n, trn_rng_u64(&r));
    if (s->shards) table_set_epoch(s->shards, &s->opts, epoch);
}

uint32_t trn_sampler_node_count(const struct trn_sampler *s)
{
    return s->shards ? s->shards->nodes : 1;
}

uint32_t trn_sampler_node(const struct trn_sampler *s)
{
    return s->shards ? s->opts.rank / s->shards->local : 0;
}

/* Node m's span of the virtual order: it starts at *base and holds *len positions (before the
 * wrap at n), and has *ranks ranks. */
static void node_span(const struct trn_sampler *s, uint32_t m, uint64_t *base, uint64_t *len,
                      uint32_t *ranks)
{
    const struct trn_shard_table *t = s->shards;
    const uint64_t per_rank = trn_sampler_rank_count(s);
    const uint32_t first_rank = m * t->local;
    const uint32_t left = s->opts.world_size - first_rank;
    *ranks = left < t->local ? left : t->local;
    *base = per_rank * first_rank;
    *len = per_rank * *ranks;
}

/* The dataset index at virtual position v (wrapping at n, DistributedSampler's padding). */
static uint64_t virtual_index(const struct trn_shard_table *t, uint64_t n, uint64_t v)
{
    v %= n;
    /* The last slot whose start is <= v and which is not empty: upper bound, minus one. */
    uint32_t lo = 0, hi = t->n_shards; /* start[lo] <= v < start[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (t->start[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    const uint32_t sh = t->order[lo];
    return t->first[sh] + (v - t->start[lo]);
}

/* Where the node's q-th position (after its shuffle) lands in its span. */
static uint64_t node_shuffle(const struct trn_sampler *s, uint32_t m, uint64_t len, uint64_t q)
{
    if (!s->opts.shuffle || len <= 1) return q;
    const uint64_t key = mix64(s->shards->node_key ^ mix64((uint64_t)m + 1));
    struct trn_perm p;
    const uint64_t b = s->opts.shuffle_block;
    if (!b || b >= len) {
        (void)trn_perm_init(&p, len, key);
        return trn_perm_apply(&p, q);
    }
    const uint64_t blk = q / b, at = blk * b;
    const uint64_t blen = len - at < b ? len - at : b;
    (void)trn_perm_init(&p, blen, mix64(key + (blk + 1) * 0x9e3779b97f4a7c15ull));
    /* Windows start at a random offset of the span each epoch: with fixed boundaries a sample
     * at offset o of its shard could only ever fall in windows that meet o + k * shard size, so
     * its step in the epoch would not be uniform (docs/sharing.md). */
    const uint64_t rot = mix64(key ^ 0x5851f42d4c957f2dull) % len;
    const uint64_t u = at + trn_perm_apply(&p, q - at) + rot;
    return u >= len ? u - len : u;
}

int64_t trn_sampler_node_shards(const struct trn_sampler *s, uint32_t node, uint32_t *out,
                                size_t cap)
{
    if (!s->shards || node >= s->shards->nodes) return -EINVAL;
    const struct trn_shard_table *t = s->shards;
    uint64_t base, len;
    uint32_t ranks;
    node_span(s, node, &base, &len, &ranks);
    /* The span [base, base + len) of the padded order is at most two ranges of [0, n): the
     * part before the wrap and the padding that repeats the start. */
    const uint64_t n = s->opts.n;
    uint64_t ranges[3][2];
    int nr = 0;
    if (base < n) {
        ranges[nr][0] = base;
        ranges[nr][1] = base + len < n ? base + len : n;
        nr++;
    }
    if (base + len > n) {
        /* Padding: positions [max(base, n), base + len) repeat the order from v mod n. */
        const uint64_t p0 = base > n ? base : n, plen = base + len - p0, a = p0 % n;
        if (plen >= n) {
            ranges[nr][0] = 0;
            ranges[nr++][1] = n;
        } else if (a + plen <= n) {
            ranges[nr][0] = a;
            ranges[nr++][1] = a + plen;
        } else {
            ranges[nr][0] = a;
            ranges[nr++][1] = n;
            ranges[nr][0] = 0;
            ranges[nr++][1] = a + plen - n;
        }
    }
    int64_t found = 0;
    for (int i = 0; i < nr; i++) {
        for (uint32_t k = 0; k < t->n_shards; k++) {
            if (t->start[k + 1] <= ranges[i][0] || t->start[k] >= ranges[i][1] ||
                t->start[k] == t->start[k + 1])
                continue;
            int dup = 0;
            for (int64_t j = 0; j < found && (size_t)j < cap; j++)
                dup |= out[j] == t->order[k];
            if (dup) continue;
            if ((size_t)found < cap) out[found] = t->order[k];
            found++;
        }
    }
    return found;
}

/* For every shard a node of s's epoch reads: last[shard * nodes + m] = epoch + 1 (a later
 * epoch's call overwrites an earlier one's). */
static int mark_readers(const struct trn_sampler *s, uint32_t *last, uint32_t *buf)
{
    const uint32_t nodes = s->shards->nodes;
    for (uint32_t m = 0; m < nodes; m++) {
        const int64_t k = trn_sampler_node_shards(s, m, buf, s->shards->n_shards);
        if (k < 0) return (int)k;
        for (int64_t i = 0; i < k; i++)
            last[(size_t)buf[i] * nodes + m] = s->epoch + 1;
    }
    return 0;
}

struct holder {
    uint32_t node, epoch; /* epoch + 1 of its last read; UINT32_MAX: this epoch's first reader */
    uint64_t key;
};

/* Most recent reader first (under LRU the likeliest to still hold the shard); among readers of
 * one epoch a keyed order, so that the nodes asking for a shard spread over its holders instead
 * of all asking the lowest-numbered one (yolo-sim-sharing: with every node asking the lowest,
 * the busiest peer served 10x the mean); this epoch's first reader last, as it may still be
 * fetching. */
static int cmp_holder(const void *a, const void *b)
{
    const struct holder *x = a, *y = b;
    const bool xn = x->epoch == UINT32_MAX, yn = y->epoch == UINT32_MAX;
    if (xn != yn) return xn ? 1 : -1;
    if (x->epoch != y->epoch) return x->epoch > y->epoch ? -1 : 1;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->node < y->node ? -1 : x->node > y->node;
}

int trn_sampler_peer_plan(const struct trn_sampler *s, uint32_t node, uint32_t since_epoch,
                          const bool *want, uint8_t *first,
                          void (*hold)(void *ctx, uint32_t shard, uint32_t node), void *ctx)
{
    if (!s || !s->shards || !first || node >= s->shards->nodes || since_epoch > s->epoch)
        return -EINVAL;
    const uint32_t ns = s->shards->n_shards, nodes = s->shards->nodes;
    uint32_t *before = calloc((size_t)ns * nodes, sizeof *before);
    uint32_t *now = calloc((size_t)ns * nodes, sizeof *now);
    uint32_t *buf = malloc((size_t)ns * sizeof *buf);
    struct holder *h = malloc((size_t)nodes * sizeof *h);
    struct trn_sampler past = { 0 };
    int rc = before && now && buf && h ? 0 : -ENOMEM;
    if (rc == 0 && since_epoch < s->epoch) rc = trn_sampler_copy(&past, s);
    for (uint32_t e = since_epoch; rc == 0 && e < s->epoch; e++) {
        trn_sampler_set_epoch(&past, e);
        rc = mark_readers(&past, before, buf);
    }
    if (rc == 0) rc = mark_readers(s, now, buf);
    const uint64_t key = mix64(s->opts.seed ^ mix64(((uint64_t)s->epoch << 32) | node));
    for (uint32_t k = 0; rc == 0 && k < ns; k++) {
        first[k] = 0;
        if (want && !want[k]) continue;
        const uint32_t *b = before + (size_t)k * nodes, *c = now + (size_t)k * nodes;
        const bool mine = c[node] != 0;
        /* this epoch's lowest reader other than `node`, counted as a holder when it fetches
         * the shard first: it is below `node`, or `node` does not read it */
        uint32_t lowest = UINT32_MAX;
        for (uint32_t m = 0; m < nodes && lowest == UINT32_MAX; m++)
            if (m != node && c[m]) lowest = m;
        if (mine && lowest > node) lowest = UINT32_MAX;
        uint32_t nh = 0;
        for (uint32_t m = 0; m < nodes; m++) {
            if (m == node || !(b[m] || m == lowest)) continue;
            h[nh].node = m;
            h[nh].epoch = b[m] ? b[m] : UINT32_MAX;
            h[nh].key = mix64(key ^ mix64(((uint64_t)k << 32) | m));
            nh++;
        }
        if (nh > 1) qsort(h, nh, sizeof *h, cmp_holder);
        for (uint32_t i = 0; hold && i < nh; i++)
            hold(ctx, k, h[i].node);
        first[k] = nh == 0;
    }
    trn_sampler_destroy(&past);
    free(before);
    free(now);
    free(buf);
    free(h);
    return rc;
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
    if (!s->shards) {
        const uint64_t x = g % s->opts.n, i = s->opts.shuffle ? trn_perm_apply(&s->perm, x) : x;
        return s->indices ? s->indices[i] : i;
    }
    const uint32_t w = s->opts.world_size;
    g %= trn_sampler_total(s);
    const uint32_t rank = (uint32_t)(g % w), m = rank / s->shards->local;
    uint64_t base, len;
    uint32_t ranks;
    node_span(s, m, &base, &len, &ranks);
    /* The node's q-th position: local ranks take its shuffled span round-robin. */
    const uint64_t q = (g / w) * ranks + (rank - m * s->shards->local);
    return virtual_index(s->shards, s->opts.n, base + node_shuffle(s, m, len, q));
}

/* A uniform draw for a mosaic partner: over the dataset (through the image-weights table when
 * `weighted`), or in shard mode over the span of the node holding position g. */
static uint64_t draw_partner(const struct trn_sampler *s, struct trn_rng *r, uint64_t g,
                             bool weighted)
{
    if (!s->shards) {
        const uint64_t u = trn_rng_below(r, s->opts.n);
        return weighted && s->indices ? s->indices[u] : u;
    }
    const uint32_t m = (uint32_t)(g % trn_sampler_total(s) % s->opts.world_size) / s->shards->local;
    uint64_t base, len;
    uint32_t ranks;
    node_span(s, m, &base, &len, &ranks);
    return virtual_index(s->shards, s->opts.n, base + trn_rng_below(r, len));
}

int trn_sampler_set_indices(struct trn_sampler *s, const uint64_t *indices)
{
    if (!s || (indices && s->shards)) return -EINVAL;
    s->indices = indices;
    return 0;
}

int trn_sampler_weighted_indices(const double *w, uint64_t n, uint64_t seed, uint32_t epoch,
                                 uint64_t *out)
{
    if (!w || !out || n == 0) return -EINVAL;
    double *cum = malloc(n * sizeof *cum);
    if (!cum) return -ENOMEM;
    double total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!(w[i] >= 0) || !isfinite(w[i])) {
            free(cum);
            return -EINVAL;
        }
        cum[i] = total += w[i]; /* itertools.accumulate */
    }
    if (!(total > 0)) {
        free(cum);
        return -EINVAL;
    }
    struct trn_rng r;
    trn_rng_init(&r, seed, epoch, 0, TRN_STREAM_WEIGHTS);
    for (uint64_t k = 0; k < n; k++) {
        const double x = trn_rng_uniform(&r) * total;
        uint64_t lo = 0, hi = n - 1; /* bisect(cum, x, 0, n - 1) */
        while (lo < hi) {
            const uint64_t mid = lo + (hi - lo) / 2;
            if (x < cum[mid])
                hi = mid;
            else
                lo = mid + 1;
        }
        out[k] = lo;
    }
    free(cum);
    return 0;
}

int trn_image_weights(const uint64_t *first, const int32_t *cls, uint64_t n, int nc,
                      const double *maps, double *class_w, double *image_w)
{
    if (!first || (first[n] && !cls) || nc < 1 || !class_w || !image_w) return -EINVAL;
    for (int c = 0; c < nc; c++)
        class_w[c] = 0;
    for (uint64_t k = 0; k < first[n]; k++) {
        if (cls[k] < 0 || cls[k] >= nc) return -EINVAL;
        class_w[cls[k]] += 1;
    }
    double sum = 0;
    for (int c = 0; c < nc; c++)
        sum += class_w[c] = 1.0 / (class_w[c] > 0 ? class_w[c] : 1.0);
    for (int c = 0; c < nc; c++) /* float32 in ultralytics: the model's class_weights tensor */
        class_w[c] = (double)(float)(class_w[c] / sum) * nc;
    for (uint64_t i = 0; i < n; i++) {
        double acc = 0;
        for (uint64_t k = first[i]; k < first[i + 1]; k++) {
            const double m = maps ? maps[cls[k]] : 0.0;
            acc += class_w[cls[k]] * (1 - m) * (1 - m) / nc;
        }
        image_w[i] = acc;
    }
    return 0;
}

void trn_sampler_rng(const struct trn_sampler *s, uint64_t g, uint32_t stream, struct trn_rng *r)
{
    trn_rng_init(r, s->opts.seed, s->epoch, g, stream);
}

/* ultralytics' load_mosaic index choice: `base` plus 3 uniform partners, then shuffled. */
static void draw_mosaic(const struct trn_sampler *s, struct trn_rng *r, uint64_t g, uint64_t base,
                        uint64_t tiles[4])
{
    tiles[0] = base;
    for (int k = 1; k < 4; k++)
        tiles[k] = draw_partner(s, r, g, true);
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
    struct trn_rng r;
    uint64_t tiles[4], mix[4];

    memset(out, 0, sizeof *out);
    out->position = g;
    out->index = trn_sampler_index(s, g);
    trn_sampler_rng(s, g, TRN_STREAM_PLAN, &r);

    out->mosaic = trn_rng_bernoulli(&r, p->mosaic);
    draw_mosaic(s, &r, g, out->index, tiles);
    const bool mixup = trn_rng_bernoulli(&r, p->mixup);
    draw_mosaic(s, &r, g, draw_partner(s, &r, g, false), mix);
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
