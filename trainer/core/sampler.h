/*
 * sampler: the sample order and every random draw of training, as pure functions.
 *
 * Everything the data pipeline draws at random is a pure function of
 * (seed, epoch, global sample position g, stream, draw number), computed with a counter-based
 * generator (Philox4x32-10, Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 * No generator state is carried from one sample to the next, so:
 *   - the same seed gives the same batches whatever the number of worker threads;
 *   - a run resumes mid-epoch exactly from (seed, epoch, position);
 *   - the global order does not depend on the number of ranks.
 *
 * Order. The shuffle of epoch e is a keyed bijection over [0, N): a balanced Feistel network on
 * the smallest even-bit domain 2^(2h) >= N, with cycle walking (re-apply until the value falls in
 * [0, N); fewer than 4 applications on average because 2^(2h) < 4N). It needs O(1) state and no
 * O(N) index array, and it gives the dataset index at any position directly.
 *
 * Ranks (torch.utils.data.DistributedSampler with drop_last=False). The epoch's global order has
 * total = ceil(N / W) * W positions: position g < N holds perm(g), and the W*ceil(N/W) - N padding
 * positions g >= N wrap around to perm(g mod N), which is exactly DistributedSampler's
 * `indices += indices[:padding]` (repeated when padding > N). Rank r takes the positions
 * r, r + W, r + 2W, ... (DistributedSampler's `indices[rank:total:W]`), so every rank gets
 * ceil(N/W) samples, the ranks are disjoint over [0, total), and every sample appears at least
 * once per epoch and at most twice (only when N is not divisible by W). With a local batch of b
 * per rank, global step k covers exactly the positions [k*b*W, (k+1)*b*W): the set of samples
 * of a global batch does not depend on W, only which rank holds which.
 *
 * Shard-aware partition (opts.n_shards > 0; docs/sharing.md has the scheme and its statistics).
 * Ranks are grouped into nodes of opts.local_world_size consecutive ranks. Each epoch the shards
 * are put in a keyed random order and concatenated into a "virtual order" of the n samples
 * (padded to total by wrapping, the rule above); node m takes the contiguous span
 * [rank_count * m * L, rank_count * (m * L + L_m)) of it, so a node reads about
 * n_shards / nodes + 2 shards per epoch instead of all of them. Within its span a node
 * shuffles its samples with a keyed bijection (all of the span, or independent windows of
 * opts.shuffle_block positions), and its local ranks take the result round-robin, so the
 * position g -> rank mapping (r = g mod W), the counts and the padding rule are the same as in
 * the plain layout: only which sample sits at g changes. In shard mode the sampler owns a small
 * table (O(n_shards)): copy it with trn_sampler_copy() and free it with trn_sampler_destroy().
 *
 * Augmentation draws (recipe S5). For the sample at position g, trn_sampler_plan() decides the
 * mosaic (probability hyp.mosaic), its 3 partners drawn uniformly with replacement from the
 * whole dataset and the 4 shuffled as ultralytics' load_mosaic does, mixup (probability
 * hyp.mixup, only for mosaic samples, as in ultralytics) with a second mosaic of its own, and
 * the flips. Every further draw (mosaic centre, random_perspective, HSV gains, mixup ratio) comes
 * from the trn_rng streams of that position, one stream per purpose (enum trn_stream), so
 * changing one probability does not shift the draws of another.
 *
 * Everything here is plain computation: no allocation, no I/O, no locks; all functions are
 * thread-safe on distinct objects, and the const ones on shared objects.
 */
#ifndef TRN_SAMPLER_H
#define TRN_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Philox4x32-10                                                                            */

/*
 * One Philox4x32-10 block: out = philox(ctr, key), ten rounds, as published (Random123's
 * known-answer vectors hold: see tests/trainer/test_sampler.c). ctr, key: in. out: out (may not
 * alias ctr). Thread-safe.
 */
void trn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* ---------------------------------------------------------------------------------------- */
/* Random streams                                                                           */

/*
 * What a stream is for. Each purpose draws from its own stream, so every draw is a pure
 * function of (seed, epoch, position, stream, draw number). Values are pinned: changing them
 * changes every augmented batch of every seed.
 */
enum trn_stream {
    TRN_STREAM_PLAN = 1,       /* trn_sampler_plan: mosaic/mixup/flip decisions and partners */
    TRN_STREAM_MOSAIC = 2,     /* the sample's own mosaic: centre, then random_perspective */
    TRN_STREAM_MIXUP = 3,      /* the mixup mosaic: centre, random_perspective */
    TRN_STREAM_COLOR = 4,      /* mixup ratio, HSV gains */
    TRN_STREAM_LETTERBOX = 5,  /* non-mosaic path: random_perspective after the letterbox */
    TRN_STREAM_WEIGHTS = 6,    /* trn_sampler_weighted_indices (position 0): an epoch's image
                                  weights draw */
    TRN_STREAM_EVOLVE = 7,     /* --evolve (epoch = generation, position 0): parent, mutation */
    TRN_STREAM_COPYPASTE = 8,  /* hyp.copy_paste > 0: the keys of copy_paste's draws */
    TRN_STREAM_MULTISCALE = 9, /* --multi-scale (position = the batch's step): its size */
    TRN_STREAM_USER = 16,      /* first value free for callers */
};

/*
 * A sequence of random draws. Treat the fields as private: they are public only so that a
 * stream lives on the stack with no allocation. Block b of the stream is
 * philox(ctr = {g_lo, g_hi, epoch, stream << 24 | b}, key = {seed_lo, seed_hi}); each block
 * gives 4 words, used in order. A stream has 2^24 blocks (2^26 words); past that it repeats.
 */
struct trn_rng {
    uint32_t key[2]; /* seed */
    uint32_t ctr[4]; /* position (2 words), epoch, stream << 24 | next block */
    uint32_t buf[4]; /* the current block */
    unsigned used;   /* words of buf already returned, 0..4 (4: the next draw makes a block) */
};

/*
 * Start stream `stream` (0..255) of position `position` in epoch `epoch` under `seed`.
 * r: out. Thread-safe.
 */
void trn_rng_init(struct trn_rng *r, uint64_t seed, uint32_t epoch, uint64_t position,
                  uint32_t stream);

/* The next 32 random bits. */
uint32_t trn_rng_u32(struct trn_rng *r);

/* The next 64 random bits (two words). */
uint64_t trn_rng_u64(struct trn_rng *r);

/* A double uniform in [0, 1) with 53 random bits (two words). */
double trn_rng_uniform(struct trn_rng *r);

/* A double uniform in [lo, hi) (numpy/random.uniform's lo + (hi - lo) * u). */
double trn_rng_uniform_range(struct trn_rng *r, double lo, double hi);

/*
 * An integer uniform in [0, n), without modulo bias (Lemire's multiply-and-reject). n == 0
 * returns 0 without drawing. Uses a variable number of words.
 */
uint64_t trn_rng_below(struct trn_rng *r, uint64_t n);

/* true with probability p (one uniform draw compared with p; p <= 0 never, p >= 1 always,
 * but a draw is made in every case so that later draws do not move with p). */
bool trn_rng_bernoulli(struct trn_rng *r, double p);

/* A standard normal variate (Marsaglia's polar method; a variable number of draws). */
double trn_rng_normal(struct trn_rng *r);

/* A Gamma(shape, 1) variate, shape > 0 (Marsaglia and Tsang 2000; boosted for shape < 1).
 * Returns NAN for shape <= 0 or not finite. */
double trn_rng_gamma(struct trn_rng *r, double shape);

/* A Beta(a, b) variate, a, b > 0, as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b) (numpy's
 * method for a, b > 1; ultralytics' mixup uses Beta(32, 32)). NAN for bad parameters. */
double trn_rng_beta(struct trn_rng *r, double a, double b);

/* ---------------------------------------------------------------------------------------- */
/* Keyed permutation                                                                        */

#define TRN_PERM_ROUNDS 8

/*
 * A bijection of [0, n) chosen by a 64-bit key: a balanced Feistel network of TRN_PERM_ROUNDS
 * rounds on 2h bits (the smallest 2^(2h) >= n, h >= 1) with cycle walking. Fields are private
 * (public so that it is a plain value: copy it freely).
 */
struct trn_perm {
    uint64_t n;                          /* domain size, >= 1 */
    uint32_t half_bits;                  /* h */
    uint64_t half_mask;                  /* 2^h - 1 */
    uint64_t round_key[TRN_PERM_ROUNDS]; /* per-round keys derived from the key */
};

/*
 * Set up the permutation of [0, n) for `key`. Returns 0, or -EINVAL when n == 0 or n > 2^62
 * (then *p is zeroed). p: out. Thread-safe.
 */
int trn_perm_init(struct trn_perm *p, uint64_t n, uint64_t key);

/* The image of x (x < n; larger x are reduced mod n first). At most a few microseconds. */
uint64_t trn_perm_apply(const struct trn_perm *p, uint64_t x);

/* The inverse: trn_perm_invert(p, trn_perm_apply(p, x)) == x for every x < n. */
uint64_t trn_perm_invert(const struct trn_perm *p, uint64_t y);

/* ---------------------------------------------------------------------------------------- */
/* Sampler                                                                                  */

/* Sampler options: fill with trn_sampler_opts_default(), then set n. */
struct trn_sampler_opts {
    uint64_t n;          /* samples in the dataset, 1..2^62 (no default: must be set) */
    uint64_t seed;       /* shuffle and augmentation seed; default 0 */
    uint32_t world_size; /* ranks, >= 1; default 1 */
    uint32_t rank;       /* this rank, < world_size; default 0 */
    bool shuffle;        /* true (default): per-epoch keyed shuffle; false: identity order
                            (validation), padding still wraps */
    /* Shard-aware partition (see the top of this file); n_shards == 0 (default): plain. */
    const uint64_t *shard_counts; /* records of each shard in dataset order (the sum must be n);
                                     read during trn_sampler_init only (copied) */
    uint32_t n_shards;            /* entries in shard_counts; 0 = not shard-aware */
    uint32_t local_world_size;    /* ranks per node (consecutive ranks share a node),
                                     1..world_size; 0 = 1 */
    uint64_t shuffle_block;       /* 0 (default): shuffle a node's whole span each epoch; else
                                     shuffle windows of this many positions (fewer shards open
                                     at once, less mixing) */
    bool sticky_shards;           /* false (default): the shard order changes every epoch; true:
                                     it depends on the seed only, so each node reads the same
                                     shards every epoch (a node cache holds 1/nodes of the data)
                                     while the order within the node still changes */
};

/* Fill *o with the defaults above (n = 0: the caller sets it). o: out. */
void trn_sampler_opts_default(struct trn_sampler_opts *o);

/*
 * The sampler: a small value (O(1) state, no allocation) holding the options and the
 * permutation of the current epoch. Fields are private; copy it into each thread that needs
 * one. Const functions may be called concurrently on one sampler.
 */
struct trn_shard_table;

struct trn_sampler {
    struct trn_sampler_opts opts;   /* as given (opts.shard_counts is not kept: NULL) */
    uint32_t epoch;                 /* epoch of `perm` */
    struct trn_perm perm;           /* the shuffle of `epoch` (identity when !opts.shuffle) */
    struct trn_shard_table *shards; /* shard mode: owned table of the epoch's shard order;
                                       NULL in the plain layout */
    const uint64_t *indices;        /* trn_sampler_set_indices: borrowed table of n dataset
                                       indices, or NULL */
};

/*
 * Initialise s for epoch 0. Returns 0, or -EINVAL (n == 0, n > 2^62, world_size == 0,
 * rank >= world_size, o == NULL; in shard mode: shard_counts NULL, counts not summing to n,
 * local_world_size > world_size), -ENOMEM (shard table). s: out; on success, in shard mode, s
 * owns a table that trn_sampler_destroy() frees (a plain sampler owns nothing).
 */
int trn_sampler_init(struct trn_sampler *s, const struct trn_sampler_opts *o);

/*
 * Copy src into dst with its own shard table (a plain `*dst = *src` shares the table, which
 * trn_sampler_set_epoch then changes under the other copy). Returns 0 or -ENOMEM (then dst is
 * zeroed). dst: out, not initialised.
 */
int trn_sampler_copy(struct trn_sampler *dst, const struct trn_sampler *src);

/* Free what s owns (the shard table) and zero it. Accepts NULL and plain samplers. */
void trn_sampler_destroy(struct trn_sampler *s);

/* Switch to epoch `epoch` (recomputes the permutation key: O(1); in shard mode also the shard
 * order: O(n_shards)). Not thread-safe on s. */
void trn_sampler_set_epoch(struct trn_sampler *s, uint32_t epoch);

/*
 * Image weights (train.py --image-weights): ultralytics' dataset.indices. With a table of n
 * dataset indices, the sample at position g is indices[perm(g)] and each mosaic partner is
 * indices[u] with u uniform (random.choices(self.indices, k=3)); the mixup mosaic's base stays
 * uniform over [0, n) (random.randint(0, n - 1)). NULL restores the plain order. The draws are
 * the same in number, so no other stream moves. The table is borrowed: it must hold n values
 * < n and outlive its use. Plain layout only: -EINVAL in shard mode (as ultralytics, image
 * weights are for one process). Not thread-safe on s.
 */
int trn_sampler_set_indices(struct trn_sampler *s, const uint64_t *indices);

/*
 * random.choices(range(n), weights=w, k=n) for epoch `epoch`: n draws, each the first index
 * whose cumulative weight exceeds u * total (bisect_right, as Python), u from stream
 * TRN_STREAM_WEIGHTS of (seed, epoch, position 0). w: n finite weights >= 0 with a positive
 * sum. out: n indices. Returns 0 or -EINVAL (n 0, a bad weight, zero total). -ENOMEM.
 */
int trn_sampler_weighted_indices(const double *w, uint64_t n, uint64_t seed, uint32_t epoch,
                                 uint64_t *out);

/*
 * train.py's image weights from a dataset's labels: image i holds the classes
 * cls[first[i] .. first[i+1]) (each in [0, nc)). class_w (nc, out): labels_to_class_weights * nc
 * (1 / count, absent classes counted once, normalised to sum 1, times nc: model.class_weights).
 * Then with maps (nc per-class mAP@0.5:0.95 of the last validation; NULL: zeros),
 * cw = class_w * (1 - maps)^2 / nc and image_w[i] = sum over its labels of cw[class]
 * (labels_to_image_weights). image_w: n, out; class_w may be recomputed each call. Returns 0,
 * -EINVAL (a class outside [0, nc)) or -ENOMEM.
 */
int trn_image_weights(const uint64_t *first, const int32_t *cls, uint64_t n, int nc,
                      const double *maps, double *class_w, double *image_w);

/* Number of nodes: ceil(world_size / local_world_size) (1 when not shard-aware). */
uint32_t trn_sampler_node_count(const struct trn_sampler *s);

/* The node of this rank: rank / local_world_size (0 when not shard-aware). */
uint32_t trn_sampler_node(const struct trn_sampler *s);

/*
 * The shards node `node` reads in the current epoch (shard mode), padding included, in the
 * order the node's span meets them, written to out[0, min(count, cap)). Returns the count
 * (call with cap 0 to size out), or -EINVAL (not shard-aware, node >= trn_sampler_node_count).
 * Use it to prefetch a node's shards into a cache before the epoch (ffr_cache_*).
 */
int64_t trn_sampler_node_shards(const struct trn_sampler *s, uint32_t node, uint32_t *out,
                                size_t cap);

/*
 * Where node `node` gets the shards it needs in the current epoch when the nodes serve their
 * caches to each other (docs/sharing.md section 7). A shard counts as held by every other node
 * that read it in an epoch from since_epoch to the current one's previous (their caches keep
 * it), and by the lowest other node reading it in this epoch, if that node is below `node`
 * or `node` does not read it (it fetches it first). Then for each shard k with want[k] (want
 * NULL: every shard):
 *   - first[k] = 1 when no other node holds it: `node` fetches it from the origin, first;
 *   - first[k] = 0 otherwise, and hold(ctx, k, m) is called for each holder m in the order
 *     `node` asks them, after every node's first fetches (a barrier), before the origin: the
 *     most recent readers first (under LRU the likeliest to still have it), readers of one
 *     epoch in an order keyed by (seed, epoch, node, shard) so that askers spread over them,
 *     this epoch's first reader last (it may still be fetching).
 * So each shard leaves the origin once per job as long as the caches keep it. Shards the
 * node does not want get first[k] = 0 and no hold calls. Returns 0, or -EINVAL (not
 * shard-aware, node >= trn_sampler_node_count, since_epoch > the current epoch), -ENOMEM.
 * O(nodes * shards * epochs counted) time, 8 bytes per (node, shard) of memory.
 */
int trn_sampler_peer_plan(const struct trn_sampler *s, uint32_t node, uint32_t since_epoch,
                          const bool *want, uint8_t *first,
                          void (*hold)(void *ctx, uint32_t shard, uint32_t node), void *ctx);

/* Samples this rank takes per epoch: ceil(n / world_size). */
uint64_t trn_sampler_rank_count(const struct trn_sampler *s);

/* Positions in the epoch's padded global order: rank_count * world_size. */
uint64_t trn_sampler_total(const struct trn_sampler *s);

/* Global position of this rank's local sample i (i < rank_count): i * world_size + rank. */
uint64_t trn_sampler_position(const struct trn_sampler *s, uint64_t local);

/* Dataset index at global position g of the current epoch (g < total; g >= n wraps; in shard
 * mode the virtual order wraps). O(1) plain, O(log n_shards) in shard mode. */
uint64_t trn_sampler_index(const struct trn_sampler *s, uint64_t g);

/* Probabilities the plan draws against (from the hyp file: trn_hyp). Each in [0, 1]. */
struct trn_plan_probs {
    double mosaic; /* hyp.mosaic */
    double mixup;  /* hyp.mixup; only mosaic samples get mixup (as in ultralytics) */
    double flipud; /* hyp.flipud */
    double fliplr; /* hyp.fliplr */
};

/* What happens to the sample at one position. */
struct trn_plan {
    uint64_t position;       /* global position g */
    uint64_t index;          /* dataset index at g */
    bool mosaic;             /* a mosaic of 4 (else the letterboxed image alone) */
    uint64_t tiles[4];       /* mosaic tiles in placement order (top-left, top-right,
                                bottom-left, bottom-right); `index` is one of them. Without
                                mosaic, tiles[0] = index and the rest are 0 */
    bool mixup;              /* blend with a second mosaic (only when mosaic) */
    uint64_t mixup_tiles[4]; /* that mosaic's tiles in placement order, when mixup */
    bool flipud;             /* mirror top-bottom after HSV */
    bool fliplr;             /* mirror left-right after HSV */
};

/*
 * The plan of global position g in the current epoch, drawn from stream TRN_STREAM_PLAN in
 * this order: the mosaic decision; 3 partners uniform over [0, n) with replacement; a
 * Fisher-Yates shuffle of {index, partners}; the mixup decision; the mixup mosaic's base
 * index (uniform, as ultralytics' random.randint(0, n - 1)), its 3 partners and its shuffle;
 * flipud; fliplr. Every step draws whether or not its branch is taken, so a plan's partners do
 * not move when a probability changes. In shard mode, partners and the mixup base are drawn
 * uniformly from the span of the node holding g (so mosaics read no other node's shards; over
 * the epochs' shard orders each partner is still uniform over the dataset).
 * probs: NULL = no mosaic, no mixup, no flips.
 * out: out. Thread-safe (s is not modified).
 */
void trn_sampler_plan(const struct trn_sampler *s, uint64_t g, const struct trn_plan_probs *probs,
                      struct trn_plan *out);

/* Start stream `stream` of global position g in the current epoch (trn_rng_init with the
 * sampler's seed and epoch). r: out. */
void trn_sampler_rng(const struct trn_sampler *s, uint64_t g, uint32_t stream, struct trn_rng *r);

#ifdef __cplusplus
}
#endif

#endif /* TRN_SAMPLER_H */
