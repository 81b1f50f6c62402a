/*
 * Peers: the nodes of a job fill their shard caches from each other's, and the origin serves
 * each shard about once (docs/sharing.md section 7; issue 43 part 3).
 *
 * CONTRACT
 * - One trn_peers per process. With `serve` (one process per node: local rank 0), it serves the
 *   node's cache directory read-only (ffio_peer_serve) until trn_peers_destroy.
 * - trn_peers_set_nodes gives the address of every node's server (node m: ranks m*L .. m*L+L-1,
 *   as the sampler numbers them). How they are exchanged is the caller's: yolo-train sums them
 *   over the job's communicator (trn_peers_announce).
 * - trn_peers_fill makes the shards a node needs present in its cache: first those that no other
 *   node holds and it reads first (from the origin), then, after `barrier` (every node has made
 *   its first fetches), the others from the nodes holding them, each shard checked byte for byte
 *   against the manifest; any failure (a 404, a refusal, a stall, bad bytes) falls back to the
 *   origin, and a failing peer is avoided until the next fill (trn_sampler_peer_plan says who
 *   holds what; ffr_cache verifies).
 * - Errors: negative codes, one line in err; nothing printed (log lines go to the callback).
 */
#ifndef TRN_PEERS_H
#define TRN_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ffio.h"
#include "ffr.h"
#include "sampler.h"

struct trn_peers;

/*
 * cache_dir: the node's cache (served when serve). bind_host (NULL: every interface) and port
 * (0: any free one) are the server's. log: one line per peer avoided (NULL: none). Returns 0,
 * -ENOTSUP (no libcurl in this build), or the server's error (err: one line).
 */
int trn_peers_create(const char *cache_dir, bool serve, const char *bind_host, int port,
                     ffio_log_fn log, void *log_ctx, struct trn_peers **out, char *err,
                     size_t err_cap);

/* Frees p and stops its server. Accepts NULL. */
void trn_peers_destroy(struct trn_peers *p);

/* The server's port (0 when not serving). */
int trn_peers_port(const struct trn_peers *p);

/* The nodes' servers: hosts[m], ports[m] for node m < n_nodes; self: this process's node (never
 * asked). Replaces an earlier list. Returns 0, -EINVAL or -ENOMEM. */
int trn_peers_set_nodes(struct trn_peers *p, uint32_t n_nodes, const char *const *hosts,
                        const int *ports, uint32_t self);

/* What a fill did. */
struct trn_peers_fill_stats {
    uint32_t shards;      /* shards wanted */
    uint32_t reused;      /* already in the cache */
    uint32_t from_peers;  /* fetched from peers, verified */
    uint32_t from_origin; /* fetched from the origin */
    uint64_t peer_bytes;
    uint64_t origin_bytes;
    uint32_t peer_bad; /* shards a peer sent damaged (then fetched from the origin) */
};

/*
 * Fills cache c (opened with the origin as its source; its peers hook is this fill's, so open
 * it with trn_peers_cache_hooks) with the shards of the manifest at src (shards[n], as
 * ffr_manifest_shards gives them; their sources are src's directory + file) that want selects
 * (NULL: all), for this process's node in s's current epoch (s: shard-aware, over the same
 * shards), counting as held what the other nodes read since since_epoch. barrier(bctx) is called
 * once between the two phases, by every process of the job, also when this one failed before
 * it (the others cannot pass it without this one); a negative return ends the fill with that
 * error. Only invalid arguments (-EINVAL) return without calling it. Returns 0 or a negative
 * error (err: one line naming the shard).
 */
int trn_peers_fill(struct trn_peers *p, struct ffr_cache *c, const struct trn_sampler *s,
                   uint32_t since_epoch, const char *src, const struct ffr_cache_shard *shards,
                   uint32_t n, const bool *want, int (*barrier)(void *bctx), void *bctx,
                   struct trn_peers_fill_stats *st, char *err, size_t err_cap);

/*
 * One shard fetched without a plan or a barrier (a prefetch during an epoch, for the next):
 * shard w of the manifest at src into c, from the nodes holders[0, n_holders) in that order
 * (nodes that certainly hold it: they read it in the current epoch), then the origin; c's peers
 * hook must be p's. It replaces the holdings of the last fill, which the next fill plans again.
 * Returns what ffr_cache_shard returns (err: one line).
 */
int trn_peers_fetch_from(struct trn_peers *p, struct ffr_cache *c, const char *src,
                         const struct ffr_cache_shard *w, const uint32_t *holders,
                         uint32_t n_holders, char *err, size_t err_cap);

/* Fills *out so that an ffr cache asks p's peers (borrowed: p must outlive the cache). Call it
 * after trn_peers_set_nodes, which makes a new client. */
void trn_peers_cache_hooks(struct trn_peers *p, struct ffr_cache_peers *out);

/*
 * The address by which this host reaches `toward` (the job's MASTER_ADDR, a name or an IPv4 or
 * IPv6 address): the address the other nodes can reach this one at, as NCCL's bootstrap picks
 * its interface, in the family `toward` resolves to first. No packet is sent. Returns 0 (addr:
 * a dotted quad, or IPv6 text without brackets; cap INET6_ADDRSTRLEN holds either) or -errno /
 * -EADDRNOTAVAIL.
 */
int trn_peers_local_addr(const char *toward, char *addr, size_t cap);

#endif /* TRN_PEERS_H */
