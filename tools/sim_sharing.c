/*
 * yolo-sim-sharing: how a job of many nodes shares a dataset, by simulation (issue 43; the table
 * in docs/sharing.md section 8). No byte moves: it drives the real shard-aware sampler
 * (trn_sampler_node_shards: what each node reads each epoch), the real peer plan
 * (trn_sampler_peer_plan: who fetches from the origin, whom the others ask) and the real
 * eviction policy (ffr_cache_lru_order: what a full cache drops) over a synthetic dataset of
 * equal images cut into equal shards.
 *
 * CONTRACT
 * - One fill per node before each epoch, as trn_peers_fill does: every shard the node reads in
 *   the epoch is made present, those the plan gives it from the origin first (all nodes), then
 *   the rest from their holders in the plan's order (all nodes, lowest first), each holder
 *   that no longer has the shard a 404 and the next asked, none left: the origin. Without peers
 *   every missing shard comes from the origin.
 * - A shard counts as used when the fill reaches it (hit or fetch); the epoch's shards are
 *   pinned while it fills, as ffr_cache_dataset pins a dataset's, and room is made by
 *   ffr_cache_lru_order over the node's other entries. A node whose epoch does not fit its
 *   cache is reported ("too small"), not simulated further: the real fill fails there.
 * - Nodes act one after another inside a phase (the real ones at once): a holder of this epoch
 *   has always fetched before it is asked, which real timing may not give (a 404, then the
 *   next holder). Deterministic: the same flags print the same table.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argparse.h"
#include "ffr.h"
#include "sampler.h"

#define GIB      (1024.0 * 1024.0 * 1024.0)
#define MAX_CFGS 16

struct sim {
    /* the job and the dataset */
    uint32_t nodes, per_node, epochs, n_shards;
    uint64_t seed, images, *counts, *bytes, data_bytes;
    bool sticky;
    /* one run's state: per node, each shard's last use (-1: absent) and the bytes held */
    int64_t *used_at, clock;
    uint64_t *held;
    /* scratch */
    struct ffr_cache_use *victims;
    bool *want, *pins;
    /* the plan hold_cb is writing: the asking node's slices of run()'s tables (per shard, its
     * holders in the plan's order, nodes slots each, and their count) */
    uint32_t *holders, *n_holders;
};

struct result {
    bool too_small;
    uint32_t small_node, small_epoch;
    uint64_t origin, peer, wants, hits, not_found, fill_max; /* fill_max: one node, one epoch */
    uint64_t served_max;                                     /* the busiest peer, one epoch */
    uint64_t shards_max;                                     /* shards one node reads, one epoch */
    double shards_mean;
};

static void hold_cb(void *ctx, uint32_t shard, uint32_t node)
{
    struct sim *S = ctx;
    S->holders[(size_t)shard * S->nodes + S->n_holders[shard]++] = node;
}

/* Makes shard k present in node m's cache (the fill's ffr_cache_shard): 1 when it was, 0 when
 * there is now room and it was added, -ENOSPC when the pinned shards leave no room. */
static int cache_use(struct sim *S, uint32_t m, uint32_t k, uint64_t max)
{
    int64_t *t = S->used_at + (size_t)m * S->n_shards;
    if (t[k] >= 0) {
        t[k] = ++S->clock;
        return 1;
    }
    size_t nv = 0;
    for (uint32_t j = 0; j < S->n_shards; j++)
        if (t[j] >= 0 && !S->pins[j])
            S->victims[nv++] = (struct ffr_cache_use){ "", S->bytes[j], t[j], j };
    /* equal times never occur (one clock), so the empty names never decide */
    const int64_t go = ffr_cache_lru_order(S->victims, nv, S->held[m], S->bytes[k], max);
    if (go < 0) return -ENOSPC;
    for (int64_t i = 0; i < go; i++) {
        t[S->victims[i].tag] = -1;
        S->held[m] -= S->victims[i].bytes;
    }
    t[k] = ++S->clock;
    S->held[m] += S->bytes[k];
    return 0;
}

static bool present(const struct sim *S, uint32_t m, uint32_t k)
{
    return S->used_at[(size_t)m * S->n_shards + k] >= 0;
}

/* One configuration over all epochs. since: the plan counts holders from epoch max(0, e -
 * since) (0: every earlier epoch, as yolo-train asks). */
static int run(struct sim *S, bool peers, uint64_t max, uint32_t since, struct result *R)
{
    memset(R, 0, sizeof *R);
    const size_t cells = (size_t)S->nodes * S->n_shards;
    for (size_t i = 0; i < cells; i++)
        S->used_at[i] = -1;
    memset(S->held, 0, S->nodes * sizeof *S->held);
    S->clock = 0;
    struct trn_sampler_opts so;
    trn_sampler_opts_default(&so);
    so.n = S->images;
    so.seed = S->seed;
    so.world_size = S->nodes * S->per_node;
    so.local_world_size = S->per_node;
    so.shard_counts = S->counts;
    so.n_shards = S->n_shards;
    so.sticky_shards = S->sticky;
    struct trn_sampler s;
    int rc = trn_sampler_init(&s, &so);
    if (rc < 0) return rc;
    uint64_t *served = calloc(S->nodes, sizeof *served), *fill = calloc(S->nodes, sizeof *fill);
    uint32_t *lists = malloc(cells * sizeof *lists), *n_list = calloc(S->nodes, sizeof *n_list);
    uint8_t *firsts = malloc(cells);
    uint32_t *hold_all = malloc(cells * S->nodes * sizeof *hold_all);
    uint32_t *n_hold_all = malloc(cells * sizeof *n_hold_all);
    if (!served || !fill || !lists || !n_list || !firsts || !hold_all || !n_hold_all) rc = -ENOMEM;
    uint64_t shards_sum = 0;
    for (uint32_t e = 0; rc == 0 && e < S->epochs && !R->too_small; e++) {
        trn_sampler_set_epoch(&s, e);
        memset(served, 0, S->nodes * sizeof *served);
        memset(fill, 0, S->nodes * sizeof *fill);
        /* the plan of every node, made before anything moves (each node makes its own from the
         * same sampler, at the same point) */
        for (uint32_t m = 0; rc == 0 && m < S->nodes; m++) {
            const int64_t c =
                trn_sampler_node_shards(&s, m, lists + (size_t)m * S->n_shards, S->n_shards);
            if (c < 0) {
                rc = (int)c;
                break;
            }
            n_list[m] = (uint32_t)c;
            shards_sum += (uint64_t)c;
            if ((uint64_t)c > R->shards_max) R->shards_max = (uint64_t)c;
            uint8_t *first = firsts + (size_t)m * S->n_shards;
            memset(first, 0, S->n_shards);
            if (!peers) continue;
            memset(S->want, 0, S->n_shards * sizeof *S->want);
            for (uint32_t i = 0; i < n_list[m]; i++)
                S->want[lists[(size_t)m * S->n_shards + i]] = true;
            S->holders = hold_all + (size_t)m * S->n_shards * S->nodes;
            S->n_holders = n_hold_all + (size_t)m * S->n_shards;
            memset(S->n_holders, 0, S->n_shards * sizeof *S->n_holders);
            rc = trn_sampler_peer_plan(&s, m, since && e > since ? e - since : 0, S->want, first,
                                       hold_cb, S);
        }
        /* phase 1 (with peers: the shards a node fetches first; without: all), then phase 2 */
        for (int phase = 1; rc == 0 && phase <= (peers ? 2 : 1) && !R->too_small; phase++) {
            for (uint32_t m = 0; m < S->nodes && !R->too_small; m++) {
                const uint32_t *list = lists + (size_t)m * S->n_shards;
                const uint8_t *first = firsts + (size_t)m * S->n_shards;
                memset(S->pins, 0, S->n_shards * sizeof *S->pins);
                for (uint32_t i = 0; i < n_list[m]; i++)
                    S->pins[list[i]] = true;
                for (uint32_t i = 0; i < n_list[m]; i++) {
                    const uint32_t k = list[i];
                    if (peers && (phase == 1) != (first[k] != 0)) continue;
                    const bool had = present(S, m, k);
                    uint32_t from = UINT32_MAX; /* a holder that has it, else the origin */
                    if (!had && phase == 2) {
                        const uint32_t *h = hold_all + ((size_t)m * S->n_shards + k) * S->nodes;
                        const uint32_t nh = n_hold_all[(size_t)m * S->n_shards + k];
                        for (uint32_t j = 0; j < nh && from == UINT32_MAX; j++) {
                            if (present(S, h[j], k))
                                from = h[j];
                            else
                                R->not_found++;
                        }
                    }
                    const int u = cache_use(S, m, k, max);
                    if (u < 0) {
                        R->too_small = true;
                        R->small_node = m;
                        R->small_epoch = e;
                        break;
                    }
                    R->wants++;
                    if (u == 1) {
                        R->hits++;
                        continue;
                    }
                    fill[m] += S->bytes[k];
                    if (from == UINT32_MAX) {
                        R->origin += S->bytes[k];
                    } else {
                        R->peer += S->bytes[k];
                        served[from] += S->bytes[k];
                    }
                }
            }
        }
        for (uint32_t m = 0; m < S->nodes; m++) {
            if (served[m] > R->served_max) R->served_max = served[m];
            if (fill[m] > R->fill_max) R->fill_max = fill[m];
        }
    }
    R->shards_mean = (double)shards_sum / ((double)S->nodes * S->epochs);
    free(served);
    free(fill);
    free(lists);
    free(n_list);
    free(firsts);
    free(hold_all);
    free(n_hold_all);
    trn_sampler_destroy(&s);
    return rc;
}

/* --cache-max: a list of sizes (K, M, G, T; 0: no limit), comma-separated. */
struct sizes {
    uint64_t v[MAX_CFGS];
    int n;
};

static int parse_sizes(const char *value, void *dst, char *why, size_t cap)
{
    struct sizes *z = dst;
    z->n = 0;
    for (const char *p = value; *p;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || x < 0 || z->n == MAX_CFGS) {
            snprintf(why, cap, "a list of up to %d sizes such as 8G,16G,0", MAX_CFGS);
            return -EINVAL;
        }
        const char *u = "KMGT", *q = *end ? strchr(u, *end) : NULL;
        if (q) {
            for (int i = 0; i <= q - u; i++)
                x *= 1024;
            end++;
        }
        if (*end && *end != ',') {
            snprintf(why, cap, "'%s': sizes are numbers with K, M, G or T, comma-separated", p);
            return -EINVAL;
        }
        z->v[z->n++] = (uint64_t)x;
        p = *end ? end + 1 : end;
    }
    return z->n ? 0 : -EINVAL;
}

static void print_size(char *out, size_t cap, uint64_t b)
{
    if (!b)
        snprintf(out, cap, "no limit");
    else
        snprintf(out, cap, "%.0f GiB", (double)b / GIB);
}

int main(int argc, char **argv)
{
    long nodes = 64, per_node = 8, epochs = 10, seed = 0, since = 0;
    double images = 1.7e6, shard_gib = 1.0, image_kb = 190.0;
    const char *peers_s = "both";
    bool sticky = false, tsv = false;
    struct sizes caches = { { 8ull << 30, 16ull << 30, 32ull << 30, 64ull << 30, 0 }, 5 };
    const struct ap_opt opts[] = {
        AP_RANGE("--nodes", AP_LONG, &nodes, "N", "nodes (default 64)", 1, 256),
        AP_RANGE("--nproc-per-node", AP_LONG, &per_node, "N", "ranks per node (default 8)", 1, 64),
        AP_RANGE("--images", AP_DOUBLE, &images, "N", "images in the dataset (default 1.7e6)", 1,
                 1e10),
        AP_RANGE("--image-kb", AP_DOUBLE, &image_kb, "KB",
                 "bytes of one packed image, in units of 1000 (default 190: COCO at 640, as "
                 "yolo-pack stores coco128)",
                 0.001, 1e6),
        AP_RANGE("--shard-gib", AP_DOUBLE, &shard_gib, "GIB", "shard size (default 1)", 1e-6, 1024),
        AP_RANGE("--epochs", AP_LONG, &epochs, "N", "epochs (default 10)", 1, 10000),
        AP_RANGE("--seed", AP_LONG, &seed, "N", "the training seed (default 0)", 0, 1L << 40),
        { .names = "--cache-max",
          .kind = AP_CALL,
          .dst = &caches,
          .metavar = "SIZES",
          .help = "node cache limits to compare, comma-separated, 0 for none (default "
                  "8G,16G,32G,64G,0)",
          .call = parse_sizes },
        { .names = "--peers",
          .kind = AP_CHOICE,
          .dst = &peers_s,
          .metavar = "on|off|both",
          .choices = "on|off|both",
          .help = "with peers, without, or both (default)" },
        AP_RANGE("--plan-epochs", AP_LONG, &since, "N",
                 "the plan counts a node as holding the shards it read in the last N epochs (0, "
                 "the default: all earlier epochs, as yolo-train)",
                 0, 10000),
        AP_OPT("--sticky-shards", AP_FLAG, &sticky, NULL,
               "each node reads the same shards every epoch (trn_sampler_opts.sticky_shards)"),
        AP_OPT("--tsv", AP_FLAG, &tsv, NULL, "tab-separated numbers instead of the table"),
        { .names = "-h|--help", .kind = AP_HELP, .help = "show this help" },
    };
    const struct ap_spec spec = {
        .prog = "yolo-sim-sharing",
        .usage = "[options]",
        .about = "Simulates a job's node caches and peers over its epochs (no byte moves): "
                 "origin egress, peer traffic, cache hits and the busiest peer, for each cache "
                 "limit, with and without peers.",
        .epilog = "Exit status: 0, 2 for a usage error, 1 when the simulation cannot run.",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
    };
    int rc = ap_parse(&spec, argc, argv);
    if (rc) return rc == AP_HELPED ? 0 : rc;

    struct sim S = { .nodes = (uint32_t)nodes,
                     .per_node = (uint32_t)per_node,
                     .epochs = (uint32_t)epochs,
                     .seed = (uint64_t)seed,
                     .images = (uint64_t)images,
                     .sticky = sticky };
    const uint64_t img_bytes = (uint64_t)(image_kb * 1000.0 + 0.5); /* >= 1: --image-kb's range */
    uint64_t per_shard = (uint64_t)(shard_gib * GIB) / img_bytes;
    if (!per_shard) per_shard = 1;
    const uint64_t ns = (S.images + per_shard - 1) / per_shard;
    /* the plans of one epoch: nodes^2 x shards holders of 4 bytes */
    if ((double)ns * (double)nodes * (double)nodes * 4 > 2e9)
        return ap_usage_error(&spec,
                              "%" PRIu64 " shards x %ld nodes: the plans would take over 2 GB "
                              "(fewer nodes or larger shards)",
                              ns, nodes);
    S.n_shards = (uint32_t)ns;
    const size_t cells = (size_t)S.nodes * S.n_shards;
    S.counts = calloc(ns, sizeof *S.counts);
    S.bytes = calloc(ns, sizeof *S.bytes);
    S.used_at = malloc(cells * sizeof *S.used_at);
    S.held = calloc(S.nodes, sizeof *S.held);
    S.victims = malloc(ns * sizeof *S.victims);
    S.want = calloc(ns, sizeof *S.want);
    S.pins = calloc(ns, sizeof *S.pins);
    if (!S.counts || !S.bytes || !S.used_at || !S.held || !S.victims || !S.want || !S.pins) {
        fprintf(stderr, "yolo-sim-sharing: out of memory (%" PRIu64 " shards x %u nodes)\n", ns,
                S.nodes);
        return 1;
    }
    for (uint64_t k = 0; k < ns; k++) {
        S.counts[k] = k + 1 < ns ? per_shard : S.images - per_shard * (ns - 1);
        S.bytes[k] = S.counts[k] * img_bytes;
        S.data_bytes += S.bytes[k];
    }
    const bool want_on = strcmp(peers_s, "off") != 0, want_off = strcmp(peers_s, "on") != 0;
    if (tsv)
        printf("peers\tcache_max\tok\torigin_x\tpeer_gib_per_node_epoch\thit_rate\t"
               "busiest_peer_gib_epoch\tnot_found_per_node_epoch\tfill_max_gib\n");
    else {
        printf("yolo-sim-sharing: %u nodes x %u ranks, %" PRIu64 " images of %.0f KB in %u "
               "shards of %.2f GiB (%.1f GiB), %u epochs, seed %" PRIu64 "%s\n",
               S.nodes, S.per_node, S.images, (double)img_bytes / 1000.0, S.n_shards,
               (double)S.bytes[0] / GIB, (double)S.data_bytes / GIB, S.epochs, S.seed,
               sticky ? ", sticky shards" : "");
        printf("\n| peers | --cache-max | origin egress | from peers, per node and epoch | "
               "cache hits | busiest peer, one epoch | 404s per node and epoch | largest fill |\n"
               "|---|---|---|---|---|---|---|---|\n");
    }
    uint64_t shards_max = 0;
    double shards_mean = 0;
    for (int p = 0; p < 2; p++) {
        const bool peers = p == 1;
        if ((peers && !want_on) || (!peers && !want_off)) continue;
        for (int c = 0; c < caches.n; c++) {
            struct result R;
            rc = run(&S, peers, caches.v[c], (uint32_t)since, &R);
            if (rc < 0) {
                fprintf(stderr, "yolo-sim-sharing: %s\n", strerror(-rc));
                return 1;
            }
            shards_max = R.shards_max;
            shards_mean = R.shards_mean;
            char cm[32];
            print_size(cm, sizeof cm, caches.v[c]);
            const double ne = (double)S.nodes * S.epochs;
            if (tsv) {
                printf("%s\t%" PRIu64 "\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\n",
                       peers ? "on" : "off", caches.v[c], !R.too_small,
                       (double)R.origin / (double)S.data_bytes, (double)R.peer / GIB / ne,
                       R.wants ? (double)R.hits / (double)R.wants : 0.0, (double)R.served_max / GIB,
                       (double)R.not_found / ne, (double)R.fill_max / GIB);
                continue;
            }
            if (R.too_small) {
                printf("| %s | %s | too small: node %u's shards of epoch %u do not fit | | | | "
                       "| |\n",
                       peers ? "on" : "off", cm, R.small_node, R.small_epoch);
                continue;
            }
            printf("| %s | %s | %.2f× the dataset (%.0f GiB) | %.1f GiB | %.0f%% | %.1f GiB | "
                   "%.1f | %.1f GiB |\n",
                   peers ? "on" : "off", cm, (double)R.origin / (double)S.data_bytes,
                   (double)R.origin / GIB, (double)R.peer / GIB / ne,
                   R.wants ? 100.0 * (double)R.hits / (double)R.wants : 0.0,
                   (double)R.served_max / GIB, (double)R.not_found / ne, (double)R.fill_max / GIB);
        }
    }
    if (!tsv)
        printf("\nA node reads %.1f shards per epoch on average, %" PRIu64
               " at most (%.1f GiB): a cache must hold that much.\n",
               shards_mean, shards_max, (double)shards_max * (double)S.bytes[0] / GIB);
    free(S.counts);
    free(S.bytes);
    free(S.used_at);
    free(S.held);
    free(S.victims);
    free(S.want);
    free(S.pins);
    return 0;
}
