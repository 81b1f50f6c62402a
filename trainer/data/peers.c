/* Peers: see peers.h. */
#include "peers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

struct trn_peers {
    struct ffio_peer_server *server;
    struct ffio_peers *client;
    int *peer_of; /* [n_nodes]: the client's peer number of node m; -1 for self */
    uint32_t n_nodes;
    ffio_log_fn log;
    void *log_ctx;
};

int trn_peers_create(const char *cache_dir, bool serve, const char *bind_host, int port,
                     ffio_log_fn log, void *log_ctx, struct trn_peers **out, char *err,
                     size_t err_cap)
{
    if (!cache_dir || !out) return -EINVAL;
    if (!ffio_http_available())
        return trn_fail(err, err_cap, -ENOTSUP, "this build has no HTTP client (libcurl)");
    struct trn_peers *p = calloc(1, sizeof *p);
    if (!p) return trn_fail(err, err_cap, -ENOMEM, "out of memory");
    p->log = log;
    p->log_ctx = log_ctx;
    int rc;
    if (serve) {
        /* the cache makes its directory (and its parents) as it opens */
        struct ffr_cache *c = NULL;
        char why0[512] = "";
        rc = ffr_cache_open(&c, cache_dir, NULL, why0, sizeof why0);
        ffr_cache_close(c);
        if (rc < 0) {
            free(p);
            return trn_fail(err, err_cap, rc, "%s", why0[0] ? why0 : strerror(-rc));
        }
        struct ffio_peer_server_opts o;
        ffio_peer_server_opts_default(&o);
        o.bind_host = bind_host;
        o.port = port;
        char why[512] = "";
        rc = ffio_peer_serve(cache_dir, &o, &p->server, why, sizeof why);
        if (rc < 0) {
            trn_peers_destroy(p);
            return trn_fail(err, err_cap, rc, "serving %s to the other nodes: %s", cache_dir,
                            why[0] ? why : strerror(-rc));
        }
    }
    *out = p;
    return 0;
}

void trn_peers_destroy(struct trn_peers *p)
{
    if (!p) return;
    ffio_peer_server_stop(p->server);
    ffio_peers_destroy(p->client);
    free(p->peer_of);
    free(p);
}

int trn_peers_port(const struct trn_peers *p)
{
    return p && p->server ? ffio_peer_server_port(p->server) : 0;
}

int trn_peers_set_nodes(struct trn_peers *p, uint32_t n_nodes, const char *const *hosts,
                        const int *ports, uint32_t self)
{
    if (!p || !hosts || !ports || self >= n_nodes) return -EINVAL;
    /* a fresh client: peers are only ever added to one */
    struct ffio_peers *c = NULL;
    int rc = ffio_peers_create(NULL, p->log, p->log_ctx, &c);
    int *of = calloc(n_nodes, sizeof *of);
    if (rc < 0 || !of) {
        ffio_peers_destroy(c);
        free(of);
        return rc < 0 ? rc : -ENOMEM;
    }
    for (uint32_t m = 0; m < n_nodes && rc >= 0; m++) {
        of[m] = -1;
        if (m != self) rc = of[m] = ffio_peers_add(c, hosts[m], ports[m]);
    }
    if (rc < 0) {
        ffio_peers_destroy(c);
        free(of);
        return rc;
    }
    ffio_peers_destroy(p->client);
    p->client = c;
    free(p->peer_of);
    p->peer_of = of;
    p->n_nodes = n_nodes;
    return 0;
}

void trn_peers_cache_hooks(struct trn_peers *p, struct ffr_cache_peers *out)
{
    ffio_peers_cache_hooks(p->client, out);
}

struct hold_ctx {
    struct trn_peers *p;
    const struct ffr_cache_shard *shards;
    int rc;
};

static void hold_cb(void *ctx, uint32_t shard, uint32_t node)
{
    struct hold_ctx *h = ctx;
    if (node >= h->p->n_nodes || h->p->peer_of[node] < 0 || h->rc < 0) return;
    char entry[512];
    ffr_cache_entry_name(&h->shards[shard], entry, sizeof entry);
    const int rc = ffio_peers_hold(h->p->client, entry, h->p->peer_of[node]);
    if (rc < 0) h->rc = rc;
}

/* Fetches the wanted shards of one phase (1: first[k] set, 2: the others). */
static int fetch_phase(struct ffr_cache *c, const char *src, const struct ffr_cache_shard *shards,
                       uint32_t n, const bool *want, const uint8_t *first, int phase,
                       struct trn_peers_fill_stats *st, char *err, size_t err_cap)
{
    for (uint32_t k = 0; k < n; k++) {
        if ((want && !want[k]) || (phase == 1) != (first[k] != 0)) continue;
        char *from = ffr_manifest_shard_source(src, shards[k].file);
        if (!from) return trn_fail(err, err_cap, -ENOMEM, "out of memory");
        const int r = ffr_cache_shard(c, from, &shards[k], NULL, 0, err, err_cap);
        free(from);
        if (r < 0) return r;
        st->shards++;
    }
    return 0;
}

int trn_peers_fill(struct trn_peers *p, struct ffr_cache *c, const struct trn_sampler *s,
                   uint32_t since_epoch, const char *src, const struct ffr_cache_shard *shards,
                   uint32_t n, const bool *want, int (*barrier)(void *bctx), void *bctx,
                   struct trn_peers_fill_stats *st, char *err, size_t err_cap)
{
    if (!p || !c || !s || !src || !shards || !st || !p->peer_of || s->opts.n_shards != n ||
        trn_sampler_node_count(s) != p->n_nodes)
        return trn_fail(err, err_cap, -EINVAL, "the plan does not match the dataset");
    memset(st, 0, sizeof *st);
    uint8_t *first = calloc(n ? n : 1, 1);
    int rc = first ? 0 : trn_fail(err, err_cap, -ENOMEM, "out of memory");
    struct ffr_cache_stats a, b;
    ffr_cache_stats(c, &a);
    if (rc == 0) {
        ffio_peers_clear(p->client);
        ffio_peers_epoch(p->client);
        struct hold_ctx h = { p, shards, 0 };
        rc = trn_sampler_peer_plan(s, trn_sampler_node(s), since_epoch, want, first, hold_cb, &h);
        if (rc == 0) rc = h.rc;
        if (rc < 0) trn_fail(err, err_cap, rc, "planning the fill: %s", strerror(-rc));
    }
    /* phase 1: what this node fetches first, from the origin */
    if (rc == 0) rc = fetch_phase(c, src, shards, n, want, first, 1, st, err, err_cap);
    /* The barrier, whatever happened before it: the other processes cannot pass it without
     * this one. */
    if (barrier) {
        const int br = barrier(bctx);
        if (rc == 0 && br < 0)
            rc = trn_fail(err, err_cap, br, "waiting for the other nodes' first fetches");
    }
    /* phase 2: the rest, from the peers holding it */
    if (rc == 0) rc = fetch_phase(c, src, shards, n, want, first, 2, st, err, err_cap);
    ffr_cache_stats(c, &b);
    st->reused = (uint32_t)(b.hits - a.hits);
    st->from_peers = (uint32_t)(b.peer_fetches - a.peer_fetches);
    st->from_origin = (uint32_t)(b.fetches - a.fetches) - st->from_peers;
    st->peer_bytes = b.peer_bytes - a.peer_bytes;
    st->origin_bytes = (b.fetched_bytes - a.fetched_bytes) - st->peer_bytes;
    st->peer_bad = (uint32_t)(b.peer_bad - a.peer_bad);
    free(first);
    return rc;
}

int trn_peers_fetch_from(struct trn_peers *p, struct ffr_cache *c, const char *src,
                         const struct ffr_cache_shard *w, const uint32_t *holders,
                         uint32_t n_holders, char *err, size_t err_cap)
{
    if (!p || !c || !src || !w || (n_holders && !holders) || !p->peer_of)
        return trn_fail(err, err_cap, -EINVAL, "no peers to fetch from");
    char entry[512];
    ffr_cache_entry_name(w, entry, sizeof entry);
    ffio_peers_clear(p->client);
    int rc = 0;
    for (uint32_t i = 0; i < n_holders && rc >= 0; i++)
        if (holders[i] < p->n_nodes && p->peer_of[holders[i]] >= 0)
            rc = ffio_peers_hold(p->client, entry, p->peer_of[holders[i]]);
    if (rc < 0) return trn_fail(err, err_cap, rc, "%s: %s", w->file, strerror(-rc));
    char *from = ffr_manifest_shard_source(src, w->file);
    if (!from) return trn_fail(err, err_cap, -ENOMEM, "out of memory");
    rc = ffr_cache_shard(c, from, w, NULL, 0, err, err_cap);
    free(from);
    return rc;
}

int trn_peers_local_addr(const char *toward, char *addr, size_t cap)
{
    struct addrinfo *ai = NULL;
    const struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM };
    if (!toward || !*toward || !addr || getaddrinfo(toward, "9", &hints, &ai) != 0 || !ai)
        return -EADDRNOTAVAIL;
    const int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int rc = 0;
    struct sockaddr_storage me;
    socklen_t ml = sizeof me;
    /* a datagram socket's connect only picks the route and the source address */
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
        getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
        rc = -errno;
    else if (!inet_ntop(me.ss_family,
                        me.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&me)->sin6_addr
                                                 : (void *)&((struct sockaddr_in *)&me)->sin_addr,
                        addr, (socklen_t)cap))
        rc = -ENOSPC;
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return rc;
}
