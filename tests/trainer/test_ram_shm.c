/*
 * One RAM cache per node (trainer/data/ram_shm.c), with real processes:
 * - 4 "ranks" (forked) attach under one key; each caches a quarter of 48 tiles (pixels, labels,
 *   and polygons for some), then each reads all 48 and finds every byte of what the others
 *   cached. The name is gone from /dev/shm once the 4th attached. The 4 ranks' shared memory
 *   (Pss_Shmem summed) is at most 1.2x one copy, where a copy per rank costs 4 copies (their
 *   Pss_Anon, the same tiles malloc'ed in each, as the per-rank cache does).
 * - A job killed before every rank attached leaves its name; the next attach (any key) removes
 *   it, since its creator is gone. A segment whose creator lives is kept (and ram_shm_exists,
 *   which tells a rank the node's copy is already reserved, sees which is which).
 * - Under the same key, another layout is refused (-EPROTO); a segment /dev/shm cannot hold is
 *   refused at attach (no SIGBUS later) and leaves nothing; a tile larger than its slot is not
 *   cached.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ram_shm.h"
#include "tap.h"

enum { N = 48, W = 200, H = 160, RANKS = 4 };

static uint64_t slot_bytes[N];

static bool shm_exists(const char *key)
{
    char name[64], path[128];
    ram_shm_name(key, name, sizeof name);
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

/* Tile i: labels (i % 3 + 1 rows), pixels from i, polygons for odd i. */
static void make_tile(int i, uint8_t *px, float *lab, uint32_t *seg_n, float *seg_xy,
                      struct trn_aug_tile *t)
{
    const int nl = i % 3 + 1;
    for (size_t k = 0; k < (size_t)W * H * 3; k++)
        px[k] = (uint8_t)(k * 31 + (size_t)i * 7);
    for (int r = 0; r < nl * 5; r++)
        lab[r] = (float)(i * 10 + r);
    int pts = 0;
    for (int r = 0; r < nl; r++)
        pts += (int)(seg_n[r] = (uint32_t)(3 + r + i % 4));
    for (int k = 0; k < pts * 2; k++)
        seg_xy[k] = (float)i + 0.25f * (float)k;
    *t = (struct trn_aug_tile){ px, W, H, lab, nl, i % 2 ? seg_n : NULL, i % 2 ? seg_xy : NULL };
}

static bool same_tile(int i, const struct trn_aug_tile *got)
{
    static uint8_t px[W * H * 3];
    float lab[15], seg_xy[64];
    uint32_t seg_n[3];
    struct trn_aug_tile want;
    make_tile(i, px, lab, seg_n, seg_xy, &want);
    if (got->w != W || got->h != H || got->n_labels != want.n_labels ||
        memcmp(got->pixels, px, sizeof px) ||
        memcmp(got->labels, lab, (size_t)want.n_labels * 5 * sizeof(float)) ||
        !got->seg_n != !want.seg_n)
        return false;
    if (!want.seg_n) return true;
    int pts = 0;
    for (int r = 0; r < want.n_labels; r++)
        pts += (int)seg_n[r];
    return !memcmp(got->seg_n, seg_n, (size_t)want.n_labels * 4) &&
           !memcmp(got->seg_xy, seg_xy, (size_t)pts * 2 * sizeof(float));
}

/* A field of /proc/self/smaps_rollup, kB. */
static long rollup_kb(const char *field)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long v = -1;
    const size_t fl = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':') v = strtol(line + fl + 1, NULL, 10);
    if (f) fclose(f);
    return v;
}

/* Rank r: attach (or, private, malloc its own copies), cache its quarter, wait for the others
 * (go: a pipe the parent closes), read all. Writes "ok PSS_KB" or "bad ..." to out. */
static void rank_main(int r, const char *key, bool private_copy, int go, int cached, int measure,
                      int out, int leave)
{
    static uint8_t px[W * H * 3];
    float lab[15], seg_xy[64];
    uint32_t seg_n[3];
    struct trn_aug_tile t;
    char msg[200];
    struct ram_shm *s = NULL;
    char err[300] = "";
    uint8_t *copies[N] = { 0 };
    /* what the process maps anyway (libraries' shared memory), before the cache */
    const long base = rollup_kb(private_copy ? "Pss_Anon" : "Pss_Shmem");
    if (!private_copy &&
        ram_shm_attach(key, RANKS, N, slot_bytes, 64 << 10, 30, &s, err, sizeof err) < 0) {
        snprintf(msg, sizeof msg, "bad attach: %.180s\n", err);
        write(out, msg, strlen(msg));
        _exit(1);
    }
    for (int i = r; i < N; i += RANKS) {
        make_tile(i, px, lab, seg_n, seg_xy, &t);
        if (s)
            ram_shm_put(s, (uint64_t)i, &t);
        else if ((copies[i] = malloc(sizeof px)))
            memcpy(copies[i], px, sizeof px);
    }
    char c = 'c';
    if (write(cached, &c, 1) != 1 || read(go, &c, 1) < 0) _exit(1); /* EOF: all have cached */
    int good = 0;
    for (int i = 0; i < N; i++) {
        if (s) {
            good += ram_shm_get(s, (uint64_t)i, &t) && same_tile(i, &t);
        } else if (!copies[i] && (copies[i] = malloc(sizeof px))) { /* a per-rank cache */
            make_tile(i, px, lab, seg_n, seg_xy, &t);
            memcpy(copies[i], px, sizeof px);
            good++;
        } else {
            good += copies[i] != NULL;
        }
    }
    /* measured once every rank has read every tile: a page's share depends on how many map it
     * at that moment */
    if (write(cached, &c, 1) != 1 || read(measure, &c, 1) < 0) _exit(1);
    const long kb = rollup_kb(s ? "Pss_Shmem" : "Pss_Anon") - base;
    snprintf(msg, sizeof msg, "%s %ld %d\n", good == N ? "ok" : "bad", kb, good);
    write(out, msg, strlen(msg));
    /* mapped until every rank has measured: a rank gone early would shift its share of the
     * pages onto the others */
    if (read(leave, &c, 1) < 0) _exit(1);
    ram_shm_detach(s);
    _exit(0);
}

/* Runs RANKS ranks; returns the summed kB (Pss_Shmem, or Pss_Anon for private), -1 on error. */
static long run_ranks(const char *key, bool private_copy, bool *name_gone)
{
    int go[2], out[2], cached[2], leave[2], measure[2];
    if (pipe(go) < 0 || pipe(out) < 0 || pipe(cached) < 0 || pipe(leave) < 0 || pipe(measure) < 0)
        return -1;
    pid_t pid[RANKS];
    for (int r = 0; r < RANKS; r++)
        if ((pid[r] = fork()) == 0) {
            close(go[1]);
            close(out[0]);
            close(cached[0]);
            close(leave[1]);
            close(measure[1]);
            rank_main(r, key, private_copy, go[0], cached[1], measure[0], out[1], leave[0]);
        }
    close(go[0]);
    close(out[1]);
    close(cached[1]);
    close(leave[0]);
    close(measure[0]);
    char c;
    int n_cached = 0; /* every rank attached and cached its quarter (or died: EOF) */
    while (n_cached < RANKS && read(cached[0], &c, 1) == 1)
        n_cached++;
    *name_gone = !shm_exists(key);
    close(go[1]);                                               /* go */
    while (n_cached < 2 * RANKS && read(cached[0], &c, 1) == 1) /* all have read all */
        n_cached++;
    close(cached[0]);
    close(measure[1]);
    long sum = 0;
    bool ok_all = true;
    FILE *f = fdopen(out[0], "r");
    char line[300];
    int lines = 0;
    while (lines < RANKS && f && fgets(line, sizeof line, f)) {
        long kb = 0;
        ok_all &= sscanf(line, "ok %ld", &kb) == 1;
        if (!ok_all) tap_diag("rank: %s", line);
        sum += kb;
        lines++;
    }
    close(leave[1]); /* all have measured: leave */
    if (f) fclose(f);
    for (int r = 0; r < RANKS; r++)
        waitpid(pid[r], NULL, 0);
    return ok_all && lines == RANKS ? sum : -1;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < N; i++)
        slot_bytes[i] = (uint64_t)W * H * 3 + (uint64_t)(i % 3 + 1) * 5 * 4;
    char key[64];
    snprintf(key, sizeof key, "test-ram-shm-%d", (int)getpid());
    const double copy_kb = (double)N * W * H * 3 / 1024;

    bool gone = false;
    const long shared = run_ranks(key, false, &gone);
    ok(shared > 0, "4 ranks share one cache: each reads every tile the others cached, byte for "
                   "byte (pixels, labels, polygons)");
    ok(gone, "the segment's name is unlinked once the 4th rank attached");
    bool unused;
    const long priv = run_ranks(key, true, &unused);
    ok(shared > 0 && shared <= 1.2 * copy_kb,
       "shared: the 4 ranks hold %.2f copies of the tiles (Pss_Shmem %ld kB with the header "
       "and the polygon pool, one copy %.0f kB; bound 1.2)",
       (double)shared / copy_kb, shared, copy_kb);
    ok(priv >= 3.5 * copy_kb,
       "a copy per rank: %.2f copies (Pss_Anon %ld kB), what the sharing saves",
       (double)priv / copy_kb, priv);

    /* a job killed before its second rank attached */
    char stale[64];
    snprintf(stale, sizeof stale, "test-ram-shm-stale-%d", (int)getpid());
    pid_t p = fork();
    if (p == 0) {
        struct ram_shm *s;
        char e[300];
        _exit(ram_shm_attach(stale, 2, N, slot_bytes, 1 << 20, 5, &s, e, sizeof e) < 0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && shm_exists(stale),
       "a rank that dies before the others attach leaves the segment's name");
    /* a live creator's segment stays */
    char live[64];
    snprintf(live, sizeof live, "test-ram-shm-live-%d", (int)getpid());
    struct ram_shm *keep = NULL;
    char err[300] = "";
    ok(ram_shm_attach(live, 2, N, slot_bytes, 1 << 20, 5, &keep, err, sizeof err) == 0 &&
           !shm_exists(stale),
       "the next attach (another key) removes the dead creator's segment (%s)", err);
    ram_shm_clean_stale();
    ok(shm_exists(live), "a segment whose creator lives is kept");
    ok(ram_shm_exists(live) && !ram_shm_exists(stale),
       "ram_shm_exists sees the live segment and not the removed one (how a rank knows the "
       "node copy is already reserved)");

    /* under the same key, another layout */
    uint64_t other[N];
    for (int i = 0; i < N; i++)
        other[i] = slot_bytes[i] + 16;
    struct ram_shm *bad = NULL;
    p = fork();
    if (p == 0) {
        char e[300] = "";
        const int rc = ram_shm_attach(live, 2, N, other, 1 << 20, 5, &bad, e, sizeof e);
        _exit(rc == -EPROTO && strstr(e, "another") ? 0 : 1);
    }
    waitpid(p, &st, 0);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "another layout under the same key is refused");
    ram_shm_detach(keep);
    char nm[64];
    ram_shm_name(live, nm, sizeof nm); /* its second rank never came: the name is ours to go */
    shm_unlink(nm);

    /* larger than /dev/shm can hold: refused at attach, nothing left behind */
    char huge[64];
    snprintf(huge, sizeof huge, "test-ram-shm-huge-%d", (int)getpid());
    const int rc =
        ram_shm_attach(huge, 2, N, slot_bytes, (uint64_t)1 << 50, 5, &bad, err, sizeof err);
    ok(rc < 0 && strstr(err, "reserving") && !shm_exists(huge),
       "a cache /dev/shm cannot hold is refused at attach: %s", err);

    /* a tile larger than its slot is not cached */
    char small_key[64];
    snprintf(small_key, sizeof small_key, "test-ram-shm-small-%d", (int)getpid());
    uint64_t tiny[N];
    for (int i = 0; i < N; i++)
        tiny[i] = 1000;
    struct ram_shm *s = NULL;
    static uint8_t px[W * H * 3];
    float lab[15], seg_xy[64];
    uint32_t seg_n[3];
    struct trn_aug_tile t, got;
    make_tile(0, px, lab, seg_n, seg_xy, &t);
    const int arc = ram_shm_attach(small_key, 1, N, tiny, 1 << 20, 5, &s, err, sizeof err);
    ram_shm_put(s, 0, &t);
    ok(arc == 0 && !ram_shm_get(s, 0, &got) && t.pixels == px,
       "a tile larger than its slot is not cached; the caller keeps its own");
    ram_shm_detach(s);
    return tap_done();
}
