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
};

void trn_node_cache_close(struct trn_node_cache *nc)
{
    if (!nc) return;
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

/* The node's shards of the sampler's current epoch into nc->want; their bytes. */
static uint64_t node_want(struct trn_node_cache *nc)
{
    memset(nc->want, 0, nc->n * sizeof *nc->want);
    const int64_t m = trn_sampler_node_shards(&nc->s, trn_sampler_node(&nc->s), nc->list, nc->n);
    uint64_t bytes = 0;
    for (int64_t i = 0; i < m; i++)
        if (!nc->want[nc->list[i]]) {
            nc->want[nc->list[i]] = true;
            bytes += nc->shards[nc->list[i]].bytes;
        }
    return bytes;
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
    for (uint32_t e = 0; rc == 0 && e < (o->epochs ? o->epochs : 1); e++) {
        trn_sampler_set_epoch(&nc->s, e);
        const uint64_t need = node_want(nc);
        char b[3][24];
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
    struct ffr_cache_stats a, b;
    ffr_cache_stats(nc->c, &a);
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
        char *from = ffr_manifest_shard_source(nc->src, nc->shards[k].file);
        char path[PATH_MAX];
        rc = from ? ffr_cache_shard(nc->c, from, &nc->shards[k], path, sizeof path, err, err_cap)
                  : trn_fail(err, err_cap, -ENOMEM, "out of memory");
        free(from);
        if (rc >= 0) rc = ffr_reader_swap_shard(r, k, path, err, err_cap);
        if (rc == 0) nc->full[k] = true;
    }
    ffr_cache_stats(nc->c, &b);
    st->from_peers = (uint32_t)(b.peer_fetches - a.peer_fetches);
    st->from_origin = (uint32_t)(b.fetches - a.fetches) - st->from_peers;
    st->peer_bytes = b.peer_bytes - a.peer_bytes;
    st->origin_bytes = (b.fetched_bytes - a.fetched_bytes) - st->peer_bytes;
    return rc < 0 ? rc : 0;
}
