/*
 * trainer/dist/dist.h's TCP rendezvous and collectives with several processes on loopback: the
 * rendezvous (ranks arriving in any order, a stranger on the port, a missing rank, a duplicate
 * rank), all-reduce in several buckets (every rank gets the same bytes, summed in rank order),
 * int64 sum/max/min, broadcast, barrier, trn_dist_tcp_exchange (the NCCL id bootstrap), and the
 * faults: a rank that exits, a rank that hangs, ranks calling different collectives; and a
 * barrier longer than the deadline (trn_dist_barrier_for), with a rank stopped during it.
 *
 * Each case forks `world` children; child r builds its own launcher table (RANK, WORLD_SIZE,
 * MASTER_ADDR=127.0.0.1, MASTER_PORT), runs the case, writes what it saw to DIR/rR.txt and
 * exits 0 when its own checks pass. The parent checks exit statuses and the files.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"
#include "port_testutil.h"
#include "tap.h"

static char dir[64];

static int port;

static double g_heartbeat = 30; /* trn_dist_opts.heartbeat_s of the next joins */

static int join(int rank, int world, double timeout, struct trn_dist **d, char *err, size_t cap)
{
    char r[32], w[32], p[32];
    snprintf(r, sizeof r, "RANK=%d", rank);
    snprintf(w, sizeof w, "WORLD_SIZE=%d", world);
    snprintf(p, sizeof p, "MASTER_PORT=%d", port);
    const char *env[] = { r, w, "MASTER_ADDR=127.0.0.1", p, NULL };
    struct trn_dist_env e;
    int rc = trn_dist_env_parse(env, &e, err, cap);
    if (rc < 0) return rc;
    struct trn_dist_opts o;
    trn_dist_opts_default(&o);
    o.backend = TRN_DIST_TCP;
    o.timeout_s = timeout;
    o.bucket_bytes = 4096; /* small buckets: several per all-reduce */
    o.heartbeat_s = g_heartbeat;
    return trn_dist_create(&e, &o, d, err, cap);
}

/* A line for the parent (port_testutil.h). */
#define note(rank, ...) tu_note(dir, rank, __VA_ARGS__)

/* join, or NULL with a note for the parent saying why. */
static struct trn_dist *joined(int rank, int world, double timeout)
{
    struct trn_dist *d = NULL;
    char err[512] = "";
    if (join(rank, world, timeout, &d, err, sizeof err) < 0) {
        note(rank, "join: %s", err);
        return NULL;
    }
    return d;
}

static char *read_note(int rank)
{
    char p[128];
    snprintf(p, sizeof p, "%s/r%d.txt", dir, rank);
    FILE *f = fopen(p, "r");
    if (!f) return strdup("");
    static char buf[4096];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\n') buf[i] = i + 1 < n ? ';' : '\0';
    fclose(f);
    return strdup(buf);
}

typedef int (*child_fn)(int rank, int world);

/* Fork world children running fn; statuses: out (exit codes, or 128 + signal). Rank order of
 * starting: reversed when `reverse` (rank 0 last: the others must retry until it listens). */
static void spawn(child_fn fn, int world, bool reverse, int *status, pid_t *pids, bool wait_all)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -f %s/r*.txt", dir);
    if (system(cmd) != 0) tap_diag("cleanup failed");
    port = free_port_pair(29400);
    for (int k = 0; k < world; k++) {
        const int r = reverse ? world - 1 - k : k;
        const pid_t pid = fork();
        if (pid == 0) {
            alarm(30); /* never outlive the test */
            _exit(fn(r, world));
        }
        pids[r] = pid;
        if (reverse) {
            struct timespec ts = { 0, 30 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    for (int r = 0; wait_all && r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
}

/* ---------------------------------------------------------------------------------------- */

#define NF 5000 /* floats: 5 buckets of 4096 bytes */

static float value(int rank, size_t i)
{
    /* not exactly representable sums: the order of additions shows in the bits */
    return (float)sin((double)(rank + 1) * 0.37 + (double)i * 0.011) * (float)(rank + 1);
}

static int child_collectives(int rank, int world)
{
    struct trn_dist *d = NULL;
    char err[512] = "";
    int rc = join(rank, world, 20, &d, err, sizeof err);
    if (rc < 0) {
        note(rank, "join: %s", err);
        return 2;
    }
    int bad = 0;
    bad |= (trn_dist_rank(d) != rank || trn_dist_world(d) != world ||
            trn_dist_backend(d) != TRN_DIST_TCP)
           << 0;
    float *x = malloc(NF * sizeof *x);
    for (size_t i = 0; i < NF; i++)
        x[i] = value(rank, i);
    rc = trn_dist_allreduce_f32(d, x, NF);
    /* the sum in rank order, as rank 0 does it */
    for (size_t i = 0; i < NF && rc == 0; i++) {
        float s = value(0, i);
        for (int r = 1; r < world; r++)
            s += value(r, i);
        if (memcmp(&s, &x[i], sizeof s)) {
            bad |= 1 << 1;
            break;
        }
    }
    bad |= (rc != 0) << 2;
    int64_t v[3] = { rank + 1, rank * 10, -rank };
    int64_t mx[3] = { rank, -rank, 7 }, mn[3] = { rank, -rank, 7 };
    rc = trn_dist_allreduce_i64(d, v, 3, TRN_DIST_SUM);
    rc |= trn_dist_allreduce_i64(d, mx, 3, TRN_DIST_MAX);
    rc |= trn_dist_allreduce_i64(d, mn, 3, TRN_DIST_MIN);
    const int64_t ws = (int64_t)world * (world + 1) / 2;
    bad |= (rc != 0 || v[0] != ws || v[1] != 10 * (ws - world) || v[2] != -(ws - world) ||
            mx[0] != world - 1 || mx[1] != 0 || mx[2] != 7 || mn[0] != 0 || mn[1] != -(world - 1) ||
            mn[2] != 7)
           << 3;
    double dv[2] = { 0.5 * rank, 1e-300 };
    rc = trn_dist_allreduce_f64(d, dv, 2);
    bad |= (rc != 0 || dv[0] != 0.5 * (double)(ws - world) || dv[1] != 1e-300 * world) << 4;
    /* a broadcast longer than a bucket, then an empty one */
    unsigned char *b = malloc(10000);
    for (int i = 0; i < 10000; i++)
        b[i] = (unsigned char)(rank == 0 ? i * 7 + 1 : 0xee);
    rc = trn_dist_broadcast(d, b, 10000, false);
    rc |= trn_dist_broadcast(d, b, 0, false);
    for (int i = 0; i < 10000 && !rc; i++)
        if (b[i] != (unsigned char)(i * 7 + 1)) {
            bad |= 1 << 5;
            break;
        }
    bad |= (rc != 0) << 6;
    bad |= (trn_dist_barrier(d) != 0) << 7;
    bad |= (trn_dist_allreduce_f32(d, x, 0) != 0) << 8;
    /* every rank's result, for the parent to compare bytes */
    char p[128];
    snprintf(p, sizeof p, "%s/sum%d.bin", dir, rank);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(x, sizeof *x, NF, f);
        fclose(f);
    }
    note(rank, "bad=%d err=%s", bad, trn_dist_error(d));
    free(x);
    free(b);
    trn_dist_destroy(d);
    return bad ? 1 : 0;
}

static void test_collectives(int world, bool reverse)
{
    int st[8];
    pid_t pids[8];
    spawn(child_collectives, world, reverse, st, pids, true);
    int good = 0;
    for (int r = 0; r < world; r++) {
        good += st[r] == 0;
        if (st[r]) {
            char *n = read_note(r);
            tap_diag("rank %d: status %d: %s", r, st[r], n);
            free(n);
        }
    }
    is_int(good, world,
           "%d ranks%s: rendezvous, all-reduce f32 in 5 buckets (rank-order sum, bit for bit), "
           "i64 sum/max/min, f64, broadcast, barrier",
           world, reverse ? " started rank 0 last" : "");
    char p[128];
    float *a = malloc(NF * sizeof *a), *b = malloc(NF * sizeof *b);
    int same = 0;
    for (int r = 0; r < world; r++) {
        snprintf(p, sizeof p, "%s/sum%d.bin", dir, r);
        FILE *f = fopen(p, "rb");
        if (!f) continue;
        const size_t got = fread(r ? b : a, sizeof *a, NF, f);
        fclose(f);
        same += got == NF && (r == 0 || !memcmp(a, b, NF * sizeof *a));
    }
    is_int(same, world, "every rank holds the same all-reduced bytes");
    free(a);
    free(b);
}

/* ---------------------------------------------------------------------------------------- */
/* Faults                                                                                    */

static int child_dies(int rank, int world)
{
    struct trn_dist *d = joined(rank, world, 25);
    if (!d) return 2;
    if (rank == world - 1) _exit(3); /* crashes before its first collective */
    float x[64] = { 0 };
    const int rc = trn_dist_allreduce_f32(d, x, 64);
    note(rank, "rc=%d err=%s", rc, trn_dist_error(d));
    /* a failed communicator refuses further use */
    const int again = trn_dist_barrier(d);
    note(rank, "again=%d", again);
    trn_dist_destroy(d);
    return rc == -ECONNRESET ? 0 : rc == -ETIMEDOUT ? 4 : 1;
}

static int child_hangs(int rank, int world)
{
    struct trn_dist *d = joined(rank, world, 1.5);
    if (!d) return 2;
    if (rank == 1) {
        pause(); /* hangs; the parent kills it */
        return 5;
    }
    int64_t v = 1;
    const int rc = trn_dist_allreduce_i64(d, &v, 1, TRN_DIST_SUM);
    note(rank, "rc=%d err=%s", rc, trn_dist_error(d));
    trn_dist_destroy(d);
    return rc == -ETIMEDOUT || rc == -ECONNRESET ? 0 : 1;
}

/* Rank 1 stops (SIGSTOP: its heartbeat thread with it) while rank 0 sums (a 60 s deadline);
 * rank 2 sums too. With g_long_wait the deadline is 1.5 s, which leaves a 3 s heartbeat limit
 * unused, and the sum is a 60 s trn_dist_barrier_for, which uses it again. */
static bool g_long_wait;

static int child_stopped(int rank, int world)
{
    struct trn_dist *d = joined(rank, world, g_long_wait ? 1.5 : 60);
    if (!d) return 2;
    if (rank == 1) {
        raise(SIGSTOP); /* the parent kills it */
        return 5;
    }
    const double t0 = (double)time(NULL);
    int64_t v = 1;
    const int rc =
        g_long_wait ? trn_dist_barrier_for(d, 60) : trn_dist_allreduce_i64(d, &v, 1, TRN_DIST_SUM);
    note(rank, "rc=%d after=%.0f err=%s", rc, (double)time(NULL) - t0, trn_dist_error(d));
    trn_dist_destroy(d);
    return rc == -ETIMEDOUT || rc == -ECONNRESET ? 0 : 1;
}

/* child_stopped's case with a 3 s heartbeat limit: rank 0 must name rank 1 by its silence
 * within 20 s (not at the deadline), and rank 2 fail too. */
static void stopped_case(bool long_wait, const char *what)
{
    int st[8];
    pid_t pids[8];
    int s0 = 0, s2 = 0;
    g_heartbeat = 3;
    g_long_wait = long_wait;
    spawn(child_stopped, 3, false, st, pids, false);
    waitpid(pids[0], &s0, 0);
    waitpid(pids[2], &s2, 0);
    kill(pids[1], SIGKILL);
    waitpid(pids[1], NULL, 0);
    g_heartbeat = 30;
    char *n0 = read_note(0), *n2 = read_note(2);
    const char *at = strstr(n0, "after=");
    const double after = at ? atof(at + 6) : 99;
    ok(WIFEXITED(s0) && WEXITSTATUS(s0) == 0 && WIFEXITED(s2) && WEXITSTATUS(s2) == 0 &&
           strstr(n0, "rank 1 sent no heartbeat for 3 s") && after < 20 && strstr(n2, "rc=-"),
       "%s: rank 0 names it within %.0f s by its silent heartbeat, rank 2 fails too ('%s' | "
       "'%s')",
       what, after, n0, n2);
    free(n0), free(n2);
}

/* A 1.5 s deadline, and rank 1 slower than it (3.5 s of "fill") before a long barrier: all
 * pass it; then the deadline is 1.5 s again (rank 1 late by 3 s fails the plain barrier). */
static int child_long_wait(int rank, int world)
{
    struct trn_dist *d = joined(rank, world, 1.5);
    if (!d) return 2;
    const struct timespec slow = { 3, 500 * 1000 * 1000 }, late = { 3, 0 };
    if (rank == 1) nanosleep(&slow, NULL);
    const double t0 = (double)time(NULL);
    const int rc = trn_dist_barrier_for(d, 30);
    note(rank, "long=%d after=%.0f err=%s", rc, (double)time(NULL) - t0, trn_dist_error(d));
    if (rank == 1) nanosleep(&late, NULL);
    const int rc2 = rc == 0 ? trn_dist_barrier(d) : rc;
    note(rank, "plain=%d", rc2);
    trn_dist_destroy(d);
    return rc == 0 && (rank != 0 || rc2 == -ETIMEDOUT) ? 0 : 1;
}

static int child_mismatch(int rank, int world)
{
    struct trn_dist *d = joined(rank, world, 10);
    if (!d) return 2;
    int rc;
    if (rank == 0) {
        char b[16] = "x";
        rc = trn_dist_broadcast(d, b, sizeof b, false);
        /* a broadcast only sends: the disagreement shows at rank 0's next receive */
        if (rc == 0) rc = trn_dist_barrier(d);
    } else {
        float x[4] = { 0 };
        rc = trn_dist_allreduce_f32(d, x, 4);
    }
    note(rank, "rc=%d err=%s", rc, trn_dist_error(d));
    trn_dist_destroy(d);
    return rc == -EPROTO ? 0 : rc == -ECONNRESET ? 6 : 1;
}

static int child_missing(int rank, int world)
{
    if (rank == 2) return 0; /* never joins */
    struct trn_dist *d = NULL;
    char err[512] = "";
    const int rc = join(rank, world, 1.5, &d, err, sizeof err);
    note(rank, "rc=%d err=%s", rc, err);
    trn_dist_destroy(d);
    return rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -ECONNREFUSED ? 0 : 1;
}

static int child_duplicate(int rank, int world)
{
    /* ranks 1 and 2 both claim rank 1 */
    struct trn_dist *d = NULL;
    char err[512] = "";
    const int rc = join(rank == 2 ? 1 : rank, world, 3, &d, err, sizeof err);
    note(rank, "rc=%d err=%s", rc, err);
    trn_dist_destroy(d);
    return rank == 0 ? (rc == -EPROTO ? 0 : 1) : 0;
}

static int child_stranger(int rank, int world)
{
    if (rank == 0) {
        /* a port scanner connects first and sends garbage */
        struct timespec ts = { 0, 150 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    if (rank == world - 1) {
        for (int attempt = 0; attempt < 40; attempt++) {
            const int s = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sa;
            memset(&sa, 0, sizeof sa);
            sa.sin_family = AF_INET;
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            sa.sin_port = htons((uint16_t)(port + 1));
            if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0) {
                const char junk[] = "GET / HTTP/1.0\r\n\r\n0123456789abcdef";
                if (write(s, junk, sizeof junk) < 0) note(rank, "junk not sent");
                close(s);
                break;
            }
            close(s);
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    struct trn_dist *d = NULL;
    char err[512] = "";
    int rc = join(rank, world, 10, &d, err, sizeof err);
    int64_t v = rank;
    if (rc == 0) rc = trn_dist_allreduce_i64(d, &v, 1, TRN_DIST_SUM);
    note(rank, "rc=%d v=%lld err=%s", rc, (long long)v, err);
    trn_dist_destroy(d);
    return rc == 0 && v == (int64_t)world * (world - 1) / 2 ? 0 : 1;
}

static int child_exchange(int rank, int world)
{
    unsigned char blob[128];
    for (int i = 0; i < 128; i++)
        blob[i] = (unsigned char)(rank == 0 ? 255 - i : 0);
    char err[512] = "";
    const int rc = trn_dist_tcp_exchange("localhost", port + 1, rank, world, blob, sizeof blob, 10,
                                         err, sizeof err);
    int good = rc == 0;
    for (int i = 0; i < 128; i++)
        good &= blob[i] == (unsigned char)(255 - i);
    note(rank, "rc=%d err=%s", rc, err);
    return good ? 0 : 1;
}

static int diag_all(int world, const int *st)
{
    int good = 0;
    for (int r = 0; r < world; r++) {
        char *n = read_note(r);
        const int g = st[r] == 0;
        if (!g || getenv("DIST_TEST_VERBOSE")) tap_diag("rank %d: status %d: %s", r, st[r], n);
        good += g;
        free(n);
    }
    return good;
}

static void test_faults(void)
{
    int st[8];
    pid_t pids[8];
    /* a rank exits: the others fail at once with a reset (timeout 25 s: a -ETIMEDOUT would mean
     * they waited for the deadline) */
    spawn(child_dies, 3, false, st, pids, true);
    ok(st[0] == 0 && st[1] == 0 && st[2] == 3,
       "a rank that exits: every other rank's collective fails with -ECONNRESET, not a timeout "
       "(statuses %d %d %d)",
       st[0], st[1], st[2]);
    char *n0 = read_note(0);
    ok(strstr(n0, "rank 2") && strstr(n0, "closed") && strstr(n0, "again=-"),
       "rank 0's message names rank 2; the communicator then refuses use ('%s')", n0);
    free(n0);

    /* a rank hangs: the others give up at their 1.5 s deadline, naming it */
    spawn(child_hangs, 3, false, st, pids, false);
    int s0 = 0, s2 = 0;
    waitpid(pids[0], &s0, 0);
    waitpid(pids[2], &s2, 0);
    kill(pids[1], SIGKILL);
    waitpid(pids[1], NULL, 0);
    n0 = read_note(0);
    ok(WIFEXITED(s0) && WEXITSTATUS(s0) == 0 && WIFEXITED(s2) && WEXITSTATUS(s2) == 0 &&
           strstr(n0, "rc=-110") && strstr(n0, "rank 1") && strstr(n0, "hung"),
       "a hung rank: rank 0 times out naming rank 1, rank 2 fails too ('%s')", n0);
    free(n0);

    /* a stopped rank (SIGSTOP): heartbeats end the job at 3 s, not at the 60 s deadline */
    stopped_case(false, "a stopped rank");

    /* a barrier longer than the deadline (a cache fill), then the deadline again */
    spawn(child_long_wait, 3, false, st, pids, true);
    n0 = read_note(0);
    char *n1 = read_note(1);
    ok(st[0] == 0 && st[1] == 0 && st[2] == 0 && strstr(n0, "long=0 after=") &&
           atof(strstr(n0, "after=") + 6) >= 3 && strstr(n0, "plain=-110"),
       "trn_dist_barrier_for(30 s) waits 3.5 s for a rank past the 1.5 s deadline; the next "
       "plain barrier has the 1.5 s deadline again (statuses %d %d %d; '%s' | '%s')",
       st[0], st[1], st[2], n0, n1);
    free(n0), free(n1);

    /* a rank stopped during it: found by the heartbeat, which the short deadline had left off */
    stopped_case(true, "a rank stopped in a 60 s trn_dist_barrier_for");

    spawn(child_mismatch, 2, false, st, pids, true);
    ok(st[0] == 0 || st[1] == 0, "different collectives on two ranks: -EPROTO (statuses %d %d)",
       st[0], st[1]);
    n1 = read_note(st[0] == 0 ? 0 : 1);
    ok(strstr(n1, "disagree"), "... saying the ranks disagree ('%s')", n1);
    free(n1);

    spawn(child_missing, 3, false, st, pids, true);
    n0 = read_note(0);
    ok(st[0] == 0 && st[1] == 0 && strstr(n0, "missing: 2"),
       "a rank that never arrives: rendezvous times out, rank 0 names it ('%s')", n0);
    free(n0);

    spawn(child_duplicate, 3, false, st, pids, true);
    n0 = read_note(0);
    ok(st[0] == 0 && strstr(n0, "same RANK"),
       "two processes claiming rank 1: rank 0 refuses ('%s')", n0);
    free(n0);

    spawn(child_stranger, 3, false, st, pids, true);
    is_int(diag_all(3, st), 3, "a stranger sending garbage to the port is ignored");

    spawn(child_exchange, 4, true, st, pids, true);
    is_int(diag_all(4, st), 4,
           "trn_dist_tcp_exchange: rank 0's 128-byte id reaches 3 ranks (rank 0 started last)");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_dist_comm_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    signal(SIGPIPE, SIG_IGN);
    test_collectives(2, false);
    test_collectives(4, true);
    test_faults();
    const int rc = tap_done();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 99;
    return rc;
}
