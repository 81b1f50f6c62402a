/*
 * Issue 43's peer test: 4 "node" processes on loopback, each with its own cache directory and
 * its own peer server, read 3 epochs of a sharded dataset as the shard-aware sampler gives
 * them out (4 ranks, one per node), filling their caches through trn_peers_fill from one origin
 * (a server of the same kind, in this process, counting the bytes it sends). Four runs:
 *   - peers: the origin sends each shard once: egress <= 1.1x the dataset (issue 43's goal);
 *   - no peers: every node fetches what it reads from the origin (printed beside it);
 *   - a peer killed in the middle of epoch 1 (after its first fetches, before the others ask
 *     it): the others fall back to the origin;
 *   - a peer whose server sends corrupted bytes: caught, avoided, fetched from the origin.
 * In every run each node's cached shards are compared record for record with the dataset's
 * own files (what a local run reads): none may differ.
 * argv[1]: a scratch directory.
 *
 * The nodes are this program run again (fork, then exec of /proc/self/exe with --node), not bare
 * forks: the origin's server thread runs in the parent, and a child forked while that thread held
 * the allocator's lock would wait on it forever (ASan's allocator, unlike glibc's, is not reset at
 * fork; the test hung so in CI). Real nodes are separate programs too.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "peers.h"
#include "remote_test_util.h"
#include "sampler.h"
#include "tap.h"

enum { NODES = 4, EPOCHS = 3, MAX_SHARDS = 128 };
enum mode { M_PEERS, M_NOPEERS, M_KILL, M_CORRUPT };
static const char *const mode_name[] = { "peers", "no peers", "peer killed mid-epoch",
                                         "corrupt peer" };

static char scratch[512], ds_path[700], url[256];
static struct ffr_cache_shard *shards;
static uint32_t n_shards;
static uint64_t *counts, n_records, ds_bytes;
static char self_exe[4096];

/* The dataset's shards from its manifest (ds_path), in the parent and in every node. */
static int load_manifest(char *err, size_t err_cap)
{
    FILE *f = fopen(ds_path, "rb");
    static char text[1 << 20];
    const size_t tn = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    if (ffr_manifest_shards(text, tn, &shards, &n_shards, err, err_cap) < 0) return -1;
    if (n_shards > MAX_SHARDS) {
        snprintf(err, err_cap, "%u shards (at most %d)", n_shards, MAX_SHARDS);
        return -1;
    }
    counts = calloc(n_shards, sizeof *counts);
    if (!counts) return -1;
    for (uint32_t k = 0; k < n_shards; k++) {
        counts[k] = shards[k].records;
        n_records += shards[k].records;
        ds_bytes += shards[k].bytes;
    }
    return 0;
}

/* child -> parent */
struct msg {
    int type; /* 1: at a barrier; 2: an epoch's report */
    int port;
    uint32_t from_peers, from_origin, peer_bad, mismatched, checked;
};

static int xwrite(int fd, const void *p, size_t n)
{
    return write(fd, p, n) == (ssize_t)n ? 0 : -EIO;
}

static int xread(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        const ssize_t r = read(fd, (char *)p + got, n - got);
        if (r <= 0) return -EIO;
        got += (size_t)r;
    }
    return 0;
}

struct chan {
    int up, down; /* to the parent, from the parent */
};

static int child_barrier(void *ctx)
{
    const struct chan *c = ctx;
    const struct msg m = { .type = 1 };
    char go;
    if (xwrite(c->up, &m, sizeof m) < 0 || xread(c->down, &go, 1) < 0) return -EPIPE;
    return 0;
}

/* Every record of shard k in the cache equals the dataset file's. */
static bool shard_equal(const char *cache_dir, uint32_t k)
{
    char entry[512], a[2048];
    ffr_cache_entry_name(&shards[k], entry, sizeof entry);
    snprintf(a, sizeof a, "%s/%s", cache_dir, entry);
    char *b = ffr_manifest_shard_source(ds_path, shards[k].file);
    const bool same = b && rt_same_records(a, b);
    free(b);
    return same;
}

/* The corrupt node serves a copy of its cache with a byte flipped in every shard. */
static void corrupt_copy(const char *cache_dir, const char *served)
{
    for (uint32_t k = 0; k < n_shards; k++) {
        char entry[512], a[2048], b[2048];
        ffr_cache_entry_name(&shards[k], entry, sizeof entry);
        snprintf(a, sizeof a, "%s/%s", cache_dir, entry);
        snprintf(b, sizeof b, "%s/%s", served, entry);
        FILE *in = fopen(a, "rb");
        if (!in) continue;
        static uint8_t buf[1 << 20];
        const size_t n = fread(buf, 1, sizeof buf, in);
        fclose(in);
        buf[n / 2] ^= 0x01;
        FILE *out = fopen(b, "wb");
        if (out) {
            fwrite(buf, 1, n, out);
            fclose(out);
        }
    }
}

static void child(enum mode mode, uint32_t node, struct chan ch)
{
    char dir[900], served[900], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%d/node%u", scratch, (int)mode, node);
    snprintf(served, sizeof served, "%s/%d/node%u-served", scratch, (int)mode, node);
    const bool corrupt = mode == M_CORRUPT && node == 2;
    if (corrupt) mkdir(served, 0755);
    mkdir(dir, 0755);
    struct trn_peers *p = NULL;
    int rc = trn_peers_create(corrupt ? served : dir, mode != M_NOPEERS, "127.0.0.1", 0, NULL, NULL,
                              &p, err, sizeof err);
    struct msg m = { .type = 1, .port = rc == 0 ? trn_peers_port(p) : -1 };
    char go;
    int ports[NODES];
    if (xwrite(ch.up, &m, sizeof m) < 0 || xread(ch.down, ports, sizeof ports) < 0) _exit(3);
    if (rc < 0) _exit(4);
    const char *hosts[NODES] = { "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1" };
    if (mode != M_NOPEERS && trn_peers_set_nodes(p, NODES, hosts, ports, node) < 0) _exit(5);

    struct ffio_http *origin = NULL;
    if (ffio_http_create(NULL, &origin) < 0) _exit(6);
    struct ffr_cache_source src;
    ffio_http_cache_source(origin, &src);
    struct ffr_cache_peers hooks;
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.durable = 0;
    co.source = &src;
    if (mode != M_NOPEERS) {
        trn_peers_cache_hooks(p, &hooks);
        co.peers = &hooks;
    }
    struct ffr_cache *c = NULL;
    if (ffr_cache_open(&c, dir, &co, err, sizeof err) < 0) _exit(7);

    struct trn_sampler_opts so;
    trn_sampler_opts_default(&so);
    so.n = n_records;
    so.seed = 7;
    so.world_size = NODES;
    so.rank = node;
    so.shard_counts = counts;
    so.n_shards = n_shards;
    so.local_world_size = 1;
    struct trn_sampler s;
    if (trn_sampler_init(&s, &so) < 0) _exit(8);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        trn_sampler_set_epoch(&s, e);
        uint32_t list[MAX_SHARDS];
        bool want[MAX_SHARDS] = { false };
        const int64_t k = trn_sampler_node_shards(&s, node, list, MAX_SHARDS);
        for (int64_t i = 0; i < k; i++)
            want[list[i]] = true;
        struct trn_peers_fill_stats st = { 0 };
        struct msg r = { .type = 2 };
        if (mode == M_NOPEERS) {
            /* the same shards, each from the origin unless already cached */
            struct ffr_cache_stats a, b;
            ffr_cache_stats(c, &a);
            for (int64_t i = 0; i < k && rc >= 0; i++) {
                char *from = ffr_manifest_shard_source(url, shards[list[i]].file);
                rc = from ? ffr_cache_shard(c, from, &shards[list[i]], NULL, 0, err, sizeof err)
                          : -ENOMEM;
                free(from);
            }
            if (rc >= 0) rc = child_barrier(&ch); /* the same rounds as the others */
            ffr_cache_stats(c, &b);
            st.from_origin = (uint32_t)(b.fetches - a.fetches);
        } else {
            rc = trn_peers_fill(p, c, &s, 0, url, shards, n_shards, want, child_barrier, &ch, &st,
                                err, sizeof err);
        }
        if (rc < 0) {
            fprintf(stderr, "node %u epoch %u: %s\n", node, e, err);
            _exit(9);
        }
        r.from_peers = st.from_peers;
        r.from_origin = st.from_origin;
        r.peer_bad = st.peer_bad;
        for (int64_t i = 0; i < k; i++) {
            r.checked++;
            r.mismatched += !shard_equal(dir, list[i]);
        }
        if (corrupt) corrupt_copy(dir, served);
        if (xwrite(ch.up, &r, sizeof r) < 0 || xread(ch.down, &go, 1) < 0) _exit(10);
    }
    trn_sampler_destroy(&s);
    ffr_cache_close(c);
    ffio_http_destroy(origin);
    trn_peers_destroy(p);
    _exit(0);
}

struct run {
    uint64_t egress;
    uint32_t from_peers, from_origin, peer_bad, mismatched, checked;
    int exited_ok;
};

static void run_mode(enum mode mode, struct ffio_peer_server *origin, struct run *out)
{
    char d[700];
    snprintf(d, sizeof d, "%s/%d", scratch, (int)mode);
    mkdir(d, 0755);
    struct ffio_peer_server_stats s0, s1;
    ffio_peer_server_stats(origin, &s0);
    pid_t pid[NODES];
    struct chan parent[NODES];
    for (uint32_t m = 0; m < NODES; m++) {
        int up[2], down[2];
        if (pipe(up) < 0 || pipe(down) < 0) exit(99);
        /* the parent's ends are not the other nodes' business */
        fcntl(up[0], F_SETFD, FD_CLOEXEC);
        fcntl(down[1], F_SETFD, FD_CLOEXEC);
        char a[4][16];
        snprintf(a[0], sizeof a[0], "%d", (int)mode);
        snprintf(a[1], sizeof a[1], "%u", m);
        snprintf(a[2], sizeof a[2], "%d", up[1]);
        snprintf(a[3], sizeof a[3], "%d", down[0]);
        char *const args[] = { self_exe, "--node", a[0], a[1], a[2], a[3], scratch, url, NULL };
        fflush(stdout);
        pid[m] = fork();
        if (pid[m] == 0) {
            /* only async-signal-safe calls until exec: the origin's thread may hold any lock */
            execv(self_exe, args);
            _exit(127);
        }
        close(up[1]);
        close(down[0]);
        parent[m] = (struct chan){ up[0], down[1] };
    }
    bool live[NODES];
    int ports[NODES];
    for (uint32_t m = 0; m < NODES; m++) {
        struct msg hello;
        live[m] = xread(parent[m].up, &hello, sizeof hello) == 0;
        ports[m] = hello.port;
    }
    for (uint32_t m = 0; m < NODES; m++)
        xwrite(parent[m].down, ports, sizeof ports);
    memset(out, 0, sizeof *out);
    /* per epoch: the fill's barrier, then the report */
    for (uint32_t e = 0; e < EPOCHS; e++) {
        for (int round = 0; round < 2; round++) {
            for (uint32_t m = 0; m < NODES; m++) {
                if (!live[m]) continue;
                struct msg r;
                if (xread(parent[m].up, &r, sizeof r) < 0) {
                    live[m] = false;
                    continue;
                }
                if (r.type == 2) {
                    out->from_peers += r.from_peers;
                    out->from_origin += r.from_origin;
                    out->peer_bad += r.peer_bad;
                    out->mismatched += r.mismatched;
                    out->checked += r.checked;
                }
            }
            if (mode == M_KILL && e == 1 && round == 0 && live[3]) {
                /* node 3 made its first fetches of epoch 1 and waits: it dies before the
                 * others ask it for anything */
                kill(pid[3], SIGKILL);
                live[3] = false;
            }
            const char go = 'g';
            for (uint32_t m = 0; m < NODES; m++)
                if (live[m]) xwrite(parent[m].down, &go, 1);
        }
    }
    int ok_exits = 0;
    for (uint32_t m = 0; m < NODES; m++) {
        int st;
        waitpid(pid[m], &st, 0);
        ok_exits += WIFEXITED(st) && WEXITSTATUS(st) == 0;
        close(parent[m].up);
        close(parent[m].down);
    }
    ffio_peer_server_stats(origin, &s1);
    out->egress = s1.bytes - s0.bytes;
    out->exited_ok = ok_exits;
}

int main(int argc, char **argv)
{
    if (argc == 8 && strcmp(argv[1], "--node") == 0) {
        /* --node MODE NODE UP_FD DOWN_FD SCRATCH URL: one node, run by run_mode */
        snprintf(scratch, sizeof scratch, "%s", argv[6]);
        snprintf(url, sizeof url, "%s", argv[7]);
        snprintf(ds_path, sizeof ds_path, "%s/origin/ds.ffr", scratch);
        char err[256];
        if (load_manifest(err, sizeof err) < 0) {
            fprintf(stderr, "node %s: manifest: %s\n", argv[3], err);
            _exit(2);
        }
        child((enum mode)atoi(argv[2]), (uint32_t)atoi(argv[3]),
              (struct chan){ atoi(argv[4]), atoi(argv[5]) });
    }
    if (argc < 2) {
        printf("Bail out! usage: test_peer_nodes SCRATCH\n");
        return 99;
    }
    const ssize_t sl = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (sl <= 0 || (size_t)sl >= sizeof self_exe - 1) {
        printf("Bail out! cannot read /proc/self/exe\n");
        return 99;
    }
    self_exe[sl] = 0;
    if (!ffio_http_available()) {
        tap_skip_all("built without libcurl: no peers");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(scratch, sizeof scratch, "%s/peer_nodes.%d", argv[1], (int)getpid());
    mkdir(scratch, 0755);
    char odir[600];
    snprintf(odir, sizeof odir, "%s/origin", scratch);
    mkdir(odir, 0755);
    snprintf(ds_path, sizeof ds_path, "%s/ds.ffr", odir);
    if (rt_make_dataset(ds_path, 600, 64 << 10) < 0) {
        printf("Bail out! cannot write %s\n", ds_path);
        return 99;
    }
    char err[256];
    if (load_manifest(err, sizeof err) < 0) {
        printf("Bail out! manifest: %s\n", err);
        return 99;
    }
    struct ffio_peer_server_opts so;
    ffio_peer_server_opts_default(&so);
    so.bind_host = "127.0.0.1";
    so.entries_only = false;
    struct ffio_peer_server *origin = NULL;
    if (ffio_peer_serve(odir, &so, &origin, err, sizeof err) < 0) {
        printf("Bail out! origin: %s\n", err);
        return 99;
    }
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ffr/ds.ffr", ffio_peer_server_port(origin));
    tap_diag("dataset: %u shards, %" PRIu64 " records, %.2f MB; %d nodes x %d epochs", n_shards,
             n_records, (double)ds_bytes / 1e6, NODES, EPOCHS);

    /* the address a node announces: the one routing to MASTER_ADDR, in its family */
    char a4[INET6_ADDRSTRLEN] = "", a6[INET6_ADDRSTRLEN] = "";
    ok(trn_peers_local_addr("127.0.0.1", a4, sizeof a4) == 0 && !strcmp(a4, "127.0.0.1"),
       "toward 127.0.0.1: this host is %s", a4);
    const int r6 = trn_peers_local_addr("::1", a6, sizeof a6);
    if (r6 == -EADDRNOTAVAIL || r6 == -EAFNOSUPPORT || r6 == -ENETUNREACH)
        tap_skip(1, "no IPv6 loopback (::1) on this machine");
    else
        ok(r6 == 0 && !strcmp(a6, "::1"), "toward ::1: this host is %s (%d)", a6, r6);
    ok(trn_peers_local_addr("", a4, sizeof a4) == -EADDRNOTAVAIL, "toward nothing: no address");

    struct run r[4];
    for (int mode = 0; mode < 4; mode++) {
        run_mode((enum mode)mode, origin, &r[mode]);
        tap_diag("%-22s origin egress %.2f MB = %.2fx the dataset; %u shard fetches from peers, "
                 "%u from the origin, %u bad from a peer; %u shard reads checked",
                 mode_name[mode], (double)r[mode].egress / 1e6,
                 (double)r[mode].egress / (double)ds_bytes, r[mode].from_peers, r[mode].from_origin,
                 r[mode].peer_bad, r[mode].checked);
    }
    const double x = (double)r[M_PEERS].egress / (double)ds_bytes;
    const double x0 = (double)r[M_NOPEERS].egress / (double)ds_bytes;
    ok(r[M_PEERS].exited_ok == NODES && r[M_PEERS].mismatched == 0 && r[M_PEERS].checked > 0,
       "peers: 4 nodes x 3 epochs, every record equal to the dataset's");
    ok(x <= 1.1, "peers: origin egress %.3fx the dataset (goal <= 1.1; without peers %.3fx)", x,
       x0);
    ok(r[M_PEERS].from_peers > r[M_PEERS].from_origin,
       "peers: %u shards came from peers, %u from the origin", r[M_PEERS].from_peers,
       r[M_PEERS].from_origin);
    ok(r[M_NOPEERS].exited_ok == NODES && r[M_NOPEERS].mismatched == 0 && x0 > 1.5,
       "no peers: every node fetched what it read from the origin (%.3fx)", x0);
    ok(r[M_KILL].exited_ok == NODES - 1 && r[M_KILL].mismatched == 0,
       "killed peer: the 3 others finished, every record equal");
    ok(r[M_KILL].egress > r[M_PEERS].egress && r[M_KILL].egress < r[M_NOPEERS].egress + ds_bytes,
       "killed peer: the origin served what the dead node held (%.3fx)",
       (double)r[M_KILL].egress / (double)ds_bytes);
    ok(r[M_CORRUPT].exited_ok == NODES && r[M_CORRUPT].mismatched == 0 && r[M_CORRUPT].peer_bad > 0,
       "corrupt peer: %u bad shard(s) caught, every record equal", r[M_CORRUPT].peer_bad);
    ffio_peer_server_stop(origin);
    ffr_manifest_shards_free(shards, n_shards);
    free(counts);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0) tap_diag("could not remove %s", scratch);
    return tap_done();
}
