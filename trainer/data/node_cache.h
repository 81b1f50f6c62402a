/*
 * A node cache smaller than the dataset: each node holds the shards it reads this epoch (and
 * what its --cache-max keeps of earlier ones), filled before each epoch from its peers first,
 * then the origin (docs/sharing.md section 9; issue 43).
 *
 * CONTRACT
 * - trn_node_cache_open decides: with no limit, a dataset that fits under it, or a single
 *   record file, it returns 1 and the caller caches the dataset whole, as before. Otherwise it
 *   makes every shard's skeleton in the cache (ffr_cache_skeletons: header, index, trailer; no
 *   record) and gives the path of a manifest naming them, which the caller opens with
 *   ffr_reader_open: every count, index entry and summary is there from the start.
 * - trn_node_cache_epoch, called by every process of the job before epoch e's first record is
 *   read, while nothing reads the reader r (the loader's epoch gate): the shards this node does
 *   not read in epoch e go back to their skeletons (so that the cache's evictions free their
 *   disk), then after `barrier` (every process has let go) the node's shards of epoch e are
 *   made present (trn_peers_fill with peers, else from the origin), each verified byte for
 *   byte by the cache, and swapped into r (ffr_reader_swap_shard). Which node reads which
 *   shard is the loader's shard-aware partition (trn_sampler_node_shards with the same seed,
 *   ranks and local_world_size).
 * - With opts.prefetch, once every node has filled epoch e (trn_node_cache_prefetch), local
 *   rank 0 of each node fetches, on a thread while epoch e trains, what it can of the node's
 *   epoch e + 1 shards without a barrier: a shard from the other nodes that read it in epoch e
 *   (they hold it until the boundary), or
 *   from the origin when epoch e + 1's plan has this node fetch it from there first, so the
 *   origin serves no more than without. Only what fits under the limit without evicting an
 *   entry of epoch e or an earlier prefetch is fetched (ffr_cache_pin, ffr_cache_fits); the
 *   fill at the boundary stops the thread after its shard in flight and does the rest. A
 *   limit of two epochs' shards lets the whole fill overlap training.
 * - The limit must hold one epoch's shards of a node: open refuses a smaller one, naming the
 *   epoch and the bytes it needs.
 * - Errors: negative codes, one line in err; nothing printed.
 */
#ifndef TRN_NODE_CACHE_H
#define TRN_NODE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ffr.h"
#include "peers.h"

struct trn_node_cache_opts {
    const char *dir;    /* the node cache directory */
    const char *src;    /* the dataset: a manifest's path or URL */
    uint64_t max_bytes; /* the cache's limit (0: none, and open returns 1) */
    uint64_t seed;      /* the loader's partition: seed, ranks, ranks per node */
    uint32_t world_size, rank, local_world_size;
    uint32_t epochs;           /* epochs the run trains (each one's shards must fit) */
    struct trn_peers *peers;   /* the job's peers (trn_peers_set_nodes done), or NULL */
    int (*barrier)(void *ctx); /* every process of the job; NULL with one process */
    void *barrier_ctx;
    bool prefetch; /* during each epoch, local rank 0 fetches what it can of the next one's
                      shards (see CONTRACT) */
};

/* What one epoch's fill did (this process's view). */
struct trn_node_cache_stats {
    uint32_t shards;                   /* the node's shards this epoch */
    uint32_t from_peers;               /* fetched from peers, verified */
    uint32_t from_origin;              /* fetched from the origin */
    uint32_t swapped_out;              /* put back to their skeletons */
    uint64_t peer_bytes, origin_bytes; /* prefetched ones included */
    uint32_t prefetched;               /* of from_peers + from_origin: during the epoch before */
    uint32_t prefetch_failed;          /* shards the prefetch could not fetch (this fill did) */
};

struct trn_node_cache;

/*
 * Returns 0 with *out and the view's path in view (view_cap bytes), 1 when the dataset is cached
 * whole instead (see CONTRACT), -ENOSPC when max_bytes cannot hold the node's shards of some
 * epoch, or the errors of the cache, the manifest and ffr_cache_skeletons (err: one line).
 */
int trn_node_cache_open(const struct trn_node_cache_opts *o, struct trn_node_cache **out,
                        char *view, size_t view_cap, char *err, size_t err_cap);

/* Before epoch `epoch` (see CONTRACT). r: the reader over the view. Returns 0 or a negative
 * error with one line in err. Every process calls `barrier` as often as the others (once, twice
 * with peers), also after an error, so that none waits for ever; the caller then agrees with
 * the others on one answer. */
int trn_node_cache_epoch(struct trn_node_cache *nc, struct ffr_reader *r, uint32_t epoch,
                         struct trn_node_cache_stats *st, char *err, size_t err_cap);

/*
 * After epoch e's fill has ended well on every node (the caller's agreement), before epoch e
 * trains: starts the prefetch of epoch e + 1's shards (see CONTRACT), which the next
 * trn_node_cache_epoch (or close) ends. Every process may call it; only local rank 0 of a node
 * with opts.prefetch, after a fill that ended well and before the last epoch, starts one.
 * Returns 1 when started, 0 when not due, or a negative error (none started: the next fill
 * does it all).
 */
int trn_node_cache_prefetch(struct trn_node_cache *nc);

/* The total of the dataset's shards, and how many there are. */
uint64_t trn_node_cache_dataset_bytes(const struct trn_node_cache *nc, uint32_t *shards);

/* Frees nc (the cache directory stays). Accepts NULL. */
void trn_node_cache_close(struct trn_node_cache *nc);

#endif /* TRN_NODE_CACHE_H */
