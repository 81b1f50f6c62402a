/*
 * A node cache smaller than the dataset (node_cache.h has the contract). The reader sees every
 * shard all the time: a skeleton where the node holds no record of it, the cached entry where
 * it does. Disk is what the cache's limit allows: a shard goes back to its skeleton before the
 * fill that may evict it, so no evicted entry stays alive through an open descriptor.
 */
#include "node_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sampler.h"
#include "util.h"

struct trn_node_cache {
    struct trn_node_cache_opts o;
    char *src;
    struct ffr_cache *c;
    struct ffio_http *origin;
    struct ffr_cache_source cs;
    struct ffr_cache_peers hooks;
    struct ffr_cache_shard *shards;
    uint32_t n;
    struct trn_sampler s;
    bool have_s;
    uint32_t *list; /* [n]: a node's shards this epoch */
    bool *want;     /* [n] */
    bool *full;     /* [n]: the reader reads shard k from its cache entry */
    char **skel;    /* [n]: each shard's skeleton, as the reader named it at open */
    /* The next epoch's prefetch, run by local rank 0 of each node during the current epoch
     * (prefetch_start): the fill's part that needs no barrier. The thread owns c and the
     * pf_ arrays while pf_on; the other fields are the caller's. */
    pthread_t pf_thread;
    bool pf_on;
    int pf_stop;         /* __atomic: the boundary asks the thread to end after its shard */
    uint32_t *pf_list;   /* [n]: the shards to try, in the order the node reads them */
    uint32_t pf_n;       /* entries of pf_list */
    uint8_t *pf_now;     /* [nodes * n]: node m reads shard k in the current epoch at m * n + k */
    uint32_t *pf_hold;   /* [nodes]: the thread's list of one shard's holders */
    uint8_t *pf_first;   /* [n]: the next epoch's plan has this node fetch it from the origin */
    uint32_t pf_fetched; /* the thread's counts (read after the join) */
    uint32_t pf_failed;
    struct ffr_cache_stats mark; /* the cache's counts when the last fill ended */
    int64_t filled;              /* the epoch the last fill made present, or -1 */
};

/* Node m's shards of the sampler's current epoch into nc->list (as many as it holds); their
 * count. */
static uint32_t node_list(struct trn_node_cache *nc, uint32_t m)
{
    const int64_t c = trn_sampler_node_shards(&nc->s, m, nc->list, nc->n);
    return c < 0 ? 0 : c > nc->n ? nc->n : (uint32_t)c;
}

/* The node's shards of the sampler's current epoch into nc->want; their bytes. */
static uint64_t node_want(struct trn_node_cache *nc)
{
    memset(nc->want, 0, nc->n * sizeof *nc->want);
    const uint32_t m = node_list(nc, trn_sampler_node(&nc->s));
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < m; i++)
        if (!nc->want[nc->list[i]]) {
            nc->want[nc->list[i]] = true;
            bytes += nc->shards[nc->list[i]].bytes;
        }
    return bytes;
}

/* Shard k into the cache from its source (peers first when the cache has them), its cached
 * path into path (NULL: not wanted). Returns what ffr_cache_shard returns. */
static int fetch_shard(struct trn_node_cache *nc, uint32_t k, char *path, size_t cap, char *err,
                       size_t err_cap)
{
    char *from = ffr_manifest_shard_source(nc->src, nc->shards[k].file);
    const int rc = from ? ffr_cache_shard(nc->c, from, &nc->shards[k], path, cap, err, err_cap)
                        : trn_fail(err, err_cap, -ENOMEM, "out of memory");
    free(from);
    return rc;
}

/* The prefetch thread: each shard of pf_list that fits under the limit without evicting a
 * pinned one (what the node reads now, what it prefetched) from the nodes that read it now, or
 * from the origin where the next epoch's fill would fetch it from there too; the rest is left
 * to that fill. A failure costs nothing but the fill's time: the fill fetches the shard again
 * and says why if it fails. */
static void *prefetch_run(void *arg)
{
    struct trn_node_cache *nc = arg;
    const uint32_t nodes = trn_sampler_node_count(&nc->s);
    char err[512];
    for (uint32_t i = 0; i < nc->pf_n && !__atomic_load_n(&nc->pf_stop, __ATOMIC_ACQUIRE); i++) {
        const uint32_t k = nc->pf_list[i];
        uint32_t nh = 0;
        for (uint32_t m = 0; m < nodes; m++)
            if (nc->pf_now[(size_t)m * nc->n + k]) nc->pf_hold[nh++] = m;
        const struct ffr_cache_shard *w = &nc->shards[k];
        if ((nc->o.peers && !nh && !nc->pf_first[k]) || ffr_cache_fits(nc->c, w->bytes) != 1)
            continue;
        int rc = nc->o.peers ? trn_peers_fetch_from(nc->o.peers, nc->c, nc->src, w, nc->pf_hold, nh,
                                                    err, sizeof err)
                             : fetch_shard(nc, k, NULL, 0, err, sizeof err);
        if (rc >= 0) rc = ffr_cache_pin(nc->c, w);
        if (rc < 0)
            nc->pf_failed++;
        else
            nc->pf_fetched++;
    }
    return NULL;
}

/* Ends the prefetch (after the shard in flight) and forgets its pins. */
static void prefetch_stop(struct trn_node_cache *nc)
{
    if (!nc->pf_on) return;
    __atomic_store_n(&nc->pf_stop, 1, __ATOMIC_RELEASE);
    pthread_join(nc->pf_thread, NULL);
    nc->pf_on = false;
    ffr_cache_unpin_all(nc->c);
}

/* After epoch e's fill (the sampler at e, full[] its shards): plans and starts the prefetch of
 * epoch e + 1's. Leaves the sampler at e + 1. Returns 0, or -ENOMEM / -errno (no prefetch). */
static int prefetch_start(struct trn_node_cache *nc, uint32_t epoch)
{
    const uint32_t self = trn_sampler_node(&nc->s), nodes = trn_sampler_node_count(&nc->s);
    if (!nc->pf_list) {
        nc->pf_list = calloc(nc->n, sizeof *nc->pf_list);
        nc->pf_now = calloc((size_t)nodes * nc->n, 1);
        nc->pf_hold = calloc(nodes, sizeof *nc->pf_hold);
        nc->pf_first = calloc(nc->n, 1);
        if (!nc->pf_list || !nc->pf_now || !nc->pf_hold || !nc->pf_first) return -ENOMEM;
    }
    /* the holders now: the other nodes' shards of epoch e */
    memset(nc->pf_now, 0, (size_t)nodes * nc->n);
    for (uint32_t m = 0; m < nodes; m++) {
        const uint32_t c = m == self ? 0 : node_list(nc, m);
        for (uint32_t i = 0; i < c; i++)
            nc->pf_now[(size_t)m * nc->n + nc->list[i]] = 1;
    }
    /* the next epoch's shards, which of them its fill would take from the origin, and those
     * not held here now in the order the node will read them */
    trn_sampler_set_epoch(&nc->s, epoch + 1);
    (void)node_want(nc);
    const uint32_t c = node_list(nc, self);
    memset(nc->pf_first, 0, nc->n);
    if (nc->o.peers) {
        const int rc = trn_sampler_peer_plan(&nc->s, self, 0, nc->want, nc->pf_first, NULL, NULL);
        if (rc < 0) return rc;
    }
    nc->pf_n = 0;
    for (uint32_t i = 0; i < c; i++) {
        const uint32_t k = nc->list[i];
        if (!nc->want[k] || nc->full[k]) continue;
        nc->want[k] = false; /* listed once (want is this function's from here) */
        nc->pf_list[nc->pf_n++] = k;
    }
    /* what the node reads now stays: a prefetch may evict only older entries */
    for (uint32_t k = 0; k < nc->n; k++)
        if (nc->full[k] && ffr_cache_pin(nc->c, &nc->shards[k]) < 0) return -ENOMEM;
    nc->pf_stop = 0;
    nc->pf_fetched = nc->pf_failed = 0;
    const int rc = pthread_create(&nc->pf_thread, NULL, prefetch_run, nc);
    if (rc != 0) {
        ffr_cache_unpin_all(nc->c);
        return -rc;
    }
    nc->pf_on = true;
    return 0;
}

void trn_node_cache_close(struct trn_node_cache *nc)
{
    if (!nc) return;
    prefetch_stop(nc);
    free(nc->pf_list);
    free(nc->pf_now);
    free(nc->pf_hold);
    free(nc->pf_first);
    ffr_cache_close(nc->c);
    ffio_http_destroy(nc->origin);
    ffr_manifest_shards_free(nc->shards, nc->n);
    if (nc->have_s) trn_sampler_destroy(&nc->s);
    for (uint32_t k = 0; nc->skel && k < nc->n; k++)
        free(nc->skel[k]);
    free(nc->skel);
    free(nc->list);
    free(nc->want);
    free(nc->full);
    free(nc->src);
    free(nc);
}

uint64_t trn_node_cache_dataset_bytes(const struct trn_node_cache *nc, uint32_t *shards)
{
    uint64_t b = 0;
    for (uint32_t k = 0; nc && k < nc->n; k++)
        b += nc->shards[k].bytes;
    if (shards) *shards = nc ? nc->n : 0;
    return b;
}

/* bytes as "1.25 GB", "312.4 MB" or "96.0 kB" into b (24 bytes) */
static const char *size_str(char b[24], double v)
{
    if (v >= 1e9)
        snprintf(b, 24, "%.2f GB", v / 1e9);
    else if (v >= 1e6)
        snprintf(b, 24, "%.1f MB", v / 1e6);
    else
        snprintf(b, 24, "%.1f kB", v / 1e3);
    return b;
}

int trn_node_cache_open(const struct trn_node_cache_opts *o, struct trn_node_cache **out,
                        char *view, size_t view_cap, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!o || !o->dir || !o->src || !out || !view) return -EINVAL;
    *out = NULL;
    if (!o->max_bytes || o->world_size < 2) return 1;
    struct trn_node_cache *nc = calloc(1, sizeof *nc);
    if (!nc || !(nc->src = strdup(o->src))) {
        free(nc);
        return trn_fail(err, err_cap, -ENOMEM, "out of memory");
    }
    nc->o = *o;
    nc->o.src = nc->src;
    nc->filled = -1;
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.max_bytes = o->max_bytes;
    int rc = 0;
    if (ffio_http_is_url(o->src)) {
        if ((rc = ffio_http_create(NULL, &nc->origin)) < 0)
            trn_fail(err, err_cap, rc, "%s: an HTTP client: %s", o->src, ffio_strerror(rc));
        ffio_http_cache_source(nc->origin, &nc->cs);
        co.source = &nc->cs;
    }
    if (rc == 0 && o->peers) {
        trn_peers_cache_hooks(o->peers, &nc->hooks);
        co.peers = &nc->hooks;
    }
    if (rc == 0) rc = ffr_cache_open(&nc->c, o->dir, &co, err, err_cap);
    if (rc == 0) rc = ffr_cache_manifest_shards(nc->c, o->src, &nc->shards, &nc->n, err, err_cap);
    uint64_t total = 0;
    for (uint32_t k = 0; rc == 0 && k < nc->n; k++)
        total += nc->shards[k].bytes;
    if (rc == 0 && (nc->n < 2 || total <= o->max_bytes)) rc = 1; /* cached whole */
    uint64_t *counts = rc == 0 ? calloc(nc->n, sizeof *counts) : NULL;
    if (rc == 0) {
        nc->list = calloc(nc->n, sizeof *nc->list);
        nc->want = calloc(nc->n, sizeof *nc->want);
        nc->full = calloc(nc->n, sizeof *nc->full);
        if (!counts || !nc->list || !nc->want || !nc->full)
            rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
    }
    if (rc == 0) {
        /* The loader's partition (loader.c builds the same options from the reader). */
        struct trn_sampler_opts so;
        trn_sampler_opts_default(&so);
        for (uint32_t k = 0; k < nc->n; k++)
            so.n += counts[k] = nc->shards[k].records;
        so.seed = o->seed;
        so.world_size = o->world_size;
        so.rank = o->rank;
        so.shard_counts = counts;
        so.n_shards = nc->n;
        so.local_world_size = o->local_world_size ? o->local_world_size : o->world_size;
        if ((rc = trn_sampler_init(&nc->s, &so)) < 0)
            trn_fail(err, err_cap, rc, "the shard plan: %s", strerror(-rc));
        nc->have_s = rc == 0;
    }
    free(counts);
    /* Every epoch's shards must fit, or a fill would fail mid-run. */
    uint64_t most = 0;
    uint32_t most_e = 0;
    char b[3][24];
    for (uint32_t e = 0; rc == 0 && e < (o->epochs ? o->epochs : 1); e++) {
        trn_sampler_set_epoch(&nc->s, e);
        const uint64_t need = node_want(nc);
        if (need > most) most = need, most_e = e;
        if (need > o->max_bytes)
            rc = trn_fail(err, err_cap, -ENOSPC,
                          "--cache-max %s cannot hold the %s (%" PRIu64
                          " bytes) of shards node %u reads in epoch %u; give at least that "
                          "(docs/sharing.md section 8 advises 3 x the dataset / nodes = %s)",
                          size_str(b[0], (double)o->max_bytes), size_str(b[1], (double)need), need,
                          trn_sampler_node(&nc->s), e,
                          size_str(b[2], 3.0 * (double)total / trn_sampler_node_count(&nc->s)));
    }
    if (rc == 0 && (rc = ffr_cache_skeletons(nc->c, o->src, view, view_cap, err, err_cap)) > 0)
        rc = 0;
    /* ... also beside the skeletons, which are never evicted (a fill pins its epoch's shards) */
    if (rc == 0 && ffr_cache_fits(nc->c, most) == 0)
        rc = trn_fail(err, err_cap, -ENOSPC,
                      "--cache-max %s cannot hold the %s of shards node %u reads in epoch %u "
                      "beside the shards' skeletons (their indexes, kept in %s); give more",
                      size_str(b[0], (double)o->max_bytes), size_str(b[1], (double)most),
                      trn_sampler_node(&nc->s), most_e, o->dir);
    if (rc != 0) {
        trn_node_cache_close(nc);
        return rc;
    }
    *out = nc;
    return 0;
}

int trn_node_cache_epoch(struct trn_node_cache *nc, struct ffr_reader *r, uint32_t epoch,
                         struct trn_node_cache_stats *st, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!nc || !r || !st) return -EINVAL;
    memset(st, 0, sizeof *st);
    /* The prefetch ends with the epoch it overlapped; what it fetched counts in this fill. */
    const bool pf = nc->pf_on;
    prefetch_stop(nc);
    if (pf) {
        st->prefetched = nc->pf_fetched;
        st->prefetch_failed = nc->pf_failed;
    }
    int rc = ffr_reader_shard_count(r) == nc->n
                 ? 0
                 : trn_fail(err, err_cap, -EINVAL, "the reader has %u shards, the manifest %u",
                            ffr_reader_shard_count(r), nc->n);
    if (rc == 0 && !nc->skel) {
        /* At the first call every shard is its skeleton, as the view names it. */
        if (!(nc->skel = calloc(nc->n, sizeof *nc->skel)))
            rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
        for (uint32_t k = 0; rc == 0 && k < nc->n; k++) {
            struct ffr_shard_info si;
            ffr_reader_shard(r, k, &si);
            if (!(nc->skel[k] = strdup(si.path)))
                rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
        }
    }
    if (rc == 0) {
        trn_sampler_set_epoch(&nc->s, epoch);
        (void)node_want(nc);
    }
    /* 1. out: what this node does not read now, so that an eviction frees its disk */
    for (uint32_t k = 0; rc == 0 && k < nc->n; k++)
        if (nc->full[k] && !nc->want[k]) {
            if ((rc = ffr_reader_swap_shard(r, k, nc->skel[k], err, err_cap)) < 0) break;
            nc->full[k] = false;
            st->swapped_out++;
        }
    /* 2. no process of the node evicts what another still reads */
    if (nc->o.barrier) {
        const int br = nc->o.barrier(nc->o.barrier_ctx);
        if (rc == 0 && br < 0)
            rc = trn_fail(err, err_cap, br,
                          "waiting for the other processes to let go of "
                          "epoch %u's shards",
                          epoch ? epoch - 1 : 0);
    }
    /* 3. with peers, the fill in their plan's order (its own barrier between the origin's
     * fetches and the peers'); without, step 4 fetches what is missing */
    struct ffr_cache_stats a = nc->mark, b;
    if (!pf) ffr_cache_stats(nc->c, &a);
    /* this fill evicts none of the node's shards of the epoch, also those it holds already and
     * has not touched yet (LRU would take them first: they were used an epoch ago) */
    for (uint32_t k = 0; rc == 0 && k < nc->n; k++)
        if (nc->want[k] && ffr_cache_pin(nc->c, &nc->shards[k]) < 0)
            rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
    if (nc->o.peers) {
        struct trn_peers_fill_stats ps;
        if (rc == 0)
            rc = trn_peers_fill(nc->o.peers, nc->c, &nc->s, 0, nc->src, nc->shards, nc->n, nc->want,
                                nc->o.barrier, nc->o.barrier_ctx, &ps, err, err_cap);
        else if (nc->o.barrier)
            (void)nc->o.barrier(nc->o.barrier_ctx); /* the fill's, which the others wait at */
    }
    /* 4. in: each wanted shard's entry under the reader, also one it reads already: the cheap
     * check finds the entry, or fetches it (from the origin without peers; again when it was
     * evicted since, by another process of the node or as damaged: the loader's damaged
     * callback) */
    for (uint32_t k = 0; rc == 0 && k < nc->n; k++) {
        if (!nc->want[k]) continue;
        st->shards++;
        char path[PATH_MAX];
        rc = fetch_shard(nc, k, path, sizeof path, err, err_cap);
        if (rc >= 0) rc = ffr_reader_swap_shard(r, k, path, err, err_cap);
        if (rc == 0) nc->full[k] = true;
    }
    ffr_cache_unpin_all(nc->c);
    ffr_cache_stats(nc->c, &b);
    st->from_peers = (uint32_t)(b.peer_fetches - a.peer_fetches);
    st->from_origin = (uint32_t)(b.fetches - a.fetches) - st->from_peers;
    st->peer_bytes = b.peer_bytes - a.peer_bytes;
    st->origin_bytes = (b.fetched_bytes - a.fetched_bytes) - st->peer_bytes;
    nc->mark = b;
    nc->filled = rc == 0 ? (int64_t)epoch : -1;
    return rc < 0 ? rc : 0;
}

int trn_node_cache_prefetch(struct trn_node_cache *nc)
{
    if (!nc) return -EINVAL;
    /* one process per node fetches, after a fill that ended well, when an epoch follows */
    const uint32_t L = nc->o.local_world_size ? nc->o.local_world_size : nc->o.world_size;
    if (nc->pf_on || !nc->o.prefetch || nc->o.rank % L != 0 || nc->filled < 0 ||
        (uint64_t)nc->filled + 1 >= nc->o.epochs)
        return 0;
    trn_sampler_set_epoch(&nc->s, (uint32_t)nc->filled); /* where the fill left it */
    const int rc = prefetch_start(nc, (uint32_t)nc->filled);
    if (rc < 0) ffr_cache_unpin_all(nc->c); /* the next fill fetches it all, as without */
    return rc < 0 ? rc : 1;
}
