/*
 * The pack cache of --data (pack/cache.h) on a yolo-synth dataset: made on first use and found
 * afterwards without a rewrite; made again when a label is touched, changed (same mtime, other
 * size; same size with its mtime put back), two labels of equal size and mtime swapped, or an
 * image removed, the older pack removed unless a live job holds it; a killed packer's temporary
 * removed; one file per split and size; a damaged pack
 * is made again; two processes asking at once get one pack (one makes it, the other waits and
 * finds it); the default folder beside the dataset; errors that name the folder.
 * Usage: test_pack_cache YOLO_SYNTH
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "packer.h"
#include "ffr.h"
#include "tap.h"

static char dir[256], data[300], packs[300];

static int g_codec = -1; /* a pack_cache_opts.codec to set, or -1 for the default */

static int get(const char *split, int size, const char *where, struct pack_cache_result *r,
               char *err, size_t cap)
{
    struct pack_cache_opts o;
    pack_cache_opts_default(&o);
    if (g_codec >= 0) o.codec = g_codec;
    o.data = data;
    o.split = split;
    o.size = size;
    o.dir = where;
    o.threads = 2;
    o.progress = false;
    o.log = fopen("/dev/null", "w");
    const int rc = pack_cache_get(&o, r, err, cap);
    fclose(o.log);
    return rc;
}

/* Records of pack p stored with codec c (FFR_CODEC_*). */
static uint64_t records_coded(const char *p, uint32_t c)
{
    struct ffr_reader *rd = NULL;
    if (ffr_reader_open(&rd, p, NULL, NULL, 0) < 0) return 0;
    uint64_t n = 0;
    for (uint64_t i = 0; i < ffr_reader_count(rd); i++) {
        struct ffr_record_info in;
        n += ffr_reader_info(rd, i, &in) == 0 && in.codec == c;
    }
    ffr_reader_close(rd);
    return n;
}

static bool exists(const char *p)
{
    return access(p, F_OK) == 0;
}

static uint64_t records(const char *p)
{
    struct ffr_reader *rd = NULL;
    if (ffr_reader_open(&rd, p, NULL, NULL, 0) < 0) return 0;
    const uint64_t n = ffr_reader_count(rd);
    ffr_reader_close(rd);
    return n;
}

/* The first label file of a split (yolo-synth writes none for a background), for touching and
 * changing. */
static void first_label(const char *split, char *dst, size_t cap)
{
    for (int i = 1; i < 100; i++) {
        snprintf(dst, cap, "%s/s/labels/%s2017/%012d.txt", dir, split, i);
        if (exists(dst)) return;
    }
    printf("Bail out! no label file in %s/s/labels/%s2017\n", dir, split);
    exit(99);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("Bail out! usage: test_pack_cache YOLO_SYNTH\n");
        return 99;
    }
    snprintf(dir, sizeof dir, "/tmp/test_pack_cache_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    snprintf(data, sizeof data, "%s/s/synth.yaml", dir);
    snprintf(packs, sizeof packs, "%s/packs", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' '%s/s' --split train2017=12 --split val2017=4 --format yolo --max-side 320 "
             ">/dev/null 2>&1",
             argv[1], dir);
    if (system(cmd) != 0) {
        printf("Bail out! yolo-synth failed\n");
        return 99;
    }
    char err[1024] = "";
    struct pack_cache_result a, b, c;

    ok(pack_cache_has_split(data, "train", err, sizeof err) == 1 &&
           pack_cache_has_split(data, "val", err, sizeof err) == 1 &&
           pack_cache_has_split(data, "test", err, sizeof err) == 0 &&
           pack_cache_has_split(data, "bogus", err, sizeof err) == 0,
       "has_split: the yaml's train and val, no test");
    char imgdir[300];
    snprintf(imgdir, sizeof imgdir, "%s/s/images/train2017", dir);
    ok(pack_cache_has_split(imgdir, "train", err, sizeof err) == 1 &&
           pack_cache_has_split(imgdir, "val", err, sizeof err) == 0,
       "has_split: an image folder has only train");
    {
        /* a yaml that is wrong is said as such, not as a missing split (issue 44) */
        char bad[400];
        snprintf(bad, sizeof bad, "%s/bad.yaml", dir);
        FILE *bf = fopen(bad, "w");
        fputs("path: s\ntrain: images/train2017\nnames: [a, b]\nnc: 3\n", bf);
        fclose(bf);
        err[0] = '\0';
        ok(pack_cache_has_split(bad, "train", err, sizeof err) < 0 &&
               strstr(err, "names has 2 entries but nc is 3"),
           "has_split: nc disagreeing with names is said (%s)", err);
        bf = fopen(bad, "w");
        for (int k = 0; k < 70000; k++)
            fprintf(bf, "# a comment line of a large yaml, line %d\n", k);
        fclose(bf);
        err[0] = '\0';
        ok(pack_cache_has_split(bad, "train", err, sizeof err) < 0 && strstr(err, "over 1 MiB"),
           "has_split: a yaml over 1 MiB is said (%s)", err);
        unlink(bad);
    }

    is_int(get("train", 96, packs, &a, err, sizeof err), 0, "first use: packed (%s)", err);
    ok(!a.hit && exists(a.path) && records(a.path) == 12 && a.samples == 12,
       "first use makes a complete pack of the 12 images (hit %d, %s)", a.hit, a.path);
    ok(records_coded(a.path, FFR_CODEC_RAW) == 12,
       "the pack cache stores raw pixels by default (a local copy for speed)");
    {
        /* in a folder of its own: a pack of another key replaces the older one in its folder */
        struct pack_cache_result z;
        char zdir[400];
        snprintf(zdir, sizeof zdir, "%s/zstd", dir);
        g_codec = PACK_CODEC_ZSTD;
        is_int(get("train", 96, zdir, &z, err, sizeof err), 0, "codec zstd (%s)", err);
        g_codec = -1;
        ok(!z.hit && z.key != a.key && strcmp(z.path, a.path) && exists(a.path) &&
               records_coded(z.path, FFR_CODEC_ZSTD) + records_coded(z.path, FFR_CODEC_RAW) == 12 &&
               records_coded(z.path, FFR_CODEC_ZSTD) > 0,
           "--pack-codec zstd: another key, zstd records (%s)", z.path);
        unlink(z.path);
    }
    ok(strncmp(a.path, packs, strlen(packs)) == 0 && strstr(a.path, "/synth-") &&
           strstr(a.path, "/train-96-"),
       "named DIR/synth-PATHHASH/train-96-KEY.ffr");
    struct stat s1, s2;
    stat(a.path, &s1);
    is_int(get("train", 96, packs, &b, err, sizeof err), 0, "second use");
    stat(b.path, &s2);
    ok(b.hit && !strcmp(a.path, b.path) && s1.st_ino == s2.st_ino &&
           s1.st_mtim.tv_nsec == s2.st_mtim.tv_nsec && s1.st_mtim.tv_sec == s2.st_mtim.tv_sec,
       "second use: found, the same file, not rewritten");

    is_int(get("val", 96, packs, &c, err, sizeof err), 0, "the val split");
    ok(!c.hit && strcmp(c.path, a.path) && records(c.path) == 4 && exists(a.path),
       "val: its own pack of 4 beside train's");
    is_int(get("train", 64, packs, &c, err, sizeof err), 0, "train at 64");
    ok(!c.hit && strcmp(c.path, a.path) && exists(a.path) && exists(c.path),
       "another size: another pack, the first kept");

    char lab[400];
    first_label("train", lab, sizeof lab);
    struct timespec later[2] = { { s1.st_mtim.tv_sec + 5, 0 }, { s1.st_mtim.tv_sec + 5, 0 } };
    utimensat(AT_FDCWD, lab, later, 0);
    is_int(get("train", 96, packs, &b, err, sizeof err), 0, "after touching a label");
    ok(!b.hit && strcmp(a.path, b.path) && b.key != a.key,
       "a touched label (mtime) gives a new key and a new pack");
    ok(!exists(a.path) && exists(b.path) && exists(c.path),
       "the older pack of train at 96 is removed; train at 64 stays");

    struct stat ls;
    stat(lab, &ls);
    FILE *f = fopen(lab, "a");
    fputs("0 0.5 0.5 0.1 0.1\n", f);
    fclose(f);
    struct timespec same[2] = { ls.st_atim, ls.st_mtim };
    utimensat(AT_FDCWD, lab, same, 0);
    is_int(get("train", 96, packs, &a, err, sizeof err), 0, "after changing a label");
    ok(!a.hit && a.key != b.key && records(a.path) == 12,
       "a changed label with its mtime kept (another size) gives a new pack");

    /* the same size and the mtime put back (touch -r): only the ctime tells */
    stat(lab, &ls);
    {
        /* the first row's class digit, changed in place: the same size, still a valid label */
        const int fd = open(lab, O_RDWR);
        char d = 0;
        if (fd < 0 || pread(fd, &d, 1, 0) != 1 || d < '0' || d > '8' ||
            pwrite(fd, (char[]){ (char)(d + 1) }, 1, 0) != 1)
            tap_diag("could not edit %s", lab);
        if (fd >= 0) close(fd);
    }
    struct timespec back[2] = { ls.st_atim, ls.st_mtim };
    utimensat(AT_FDCWD, lab, back, 0);
    struct stat ls2;
    stat(lab, &ls2);
    is_int(get("train", 96, packs, &b, err, sizeof err), 0, "after a same-size edit");
    ok(ls2.st_size == ls.st_size && ls2.st_mtim.tv_nsec == ls.st_mtim.tv_nsec &&
           ls2.st_mtim.tv_sec == ls.st_mtim.tv_sec && !b.hit && b.key != a.key,
       "a same-size label edit with its mtime put back gives a new pack");

    /* two labels of equal size and mtime swapped (yolo-synth writes equal nanosecond mtimes) */
    char l1[400], l2[400], tmp[420];
    snprintf(l1, sizeof l1, "%s/s/labels/train2017/a-swap.txt", dir);
    snprintf(l2, sizeof l2, "%s/s/labels/train2017/b-swap.txt", dir);
    char src1[400], src2[400];
    snprintf(src1, sizeof src1, "%s/s/images/train2017/a-swap.jpg", dir);
    snprintf(src2, sizeof src2, "%s/s/images/train2017/b-swap.jpg", dir);
    char cp[2000];
    snprintf(cp, sizeof cp, "cp '%s/s/images/train2017/000000000012.jpg' '%s' && cp '%s' '%s'", dir,
             src1, src1, src2);
    ok(system(cp) == 0, "two more images for the swap");
    FILE *g1 = fopen(l1, "w"), *g2 = fopen(l2, "w");
    fputs("1 0.5 0.5 0.2 0.2\n", g1), fputs("2 0.5 0.5 0.2 0.2\n", g2);
    fclose(g1), fclose(g2);
    struct timespec t0[2] = { { 1700000000, 5 }, { 1700000000, 5 } };
    utimensat(AT_FDCWD, l1, t0, 0), utimensat(AT_FDCWD, l2, t0, 0);
    is_int(get("train", 96, packs, &a, err, sizeof err), 0, "with the two labels");
    snprintf(tmp, sizeof tmp, "%s.tmp", l1);
    rename(l1, tmp), rename(l2, l1), rename(tmp, l2);
    is_int(get("train", 96, packs, &b, err, sizeof err), 0, "after swapping them");
    ok(!b.hit && b.key != a.key, "a swap of two labels of equal size and mtime gives a new pack");
    unlink(l1), unlink(l2), unlink(src1), unlink(src2);
    is_int(get("train", 96, packs, &a, err, sizeof err), 0, "without the two");

    /* a killed packer's temporary, of an older key: gone on the next call, whatever its key;
     * one of a live process (ours) stays */
    const pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char orphan[600], live[600];
    {
        char base[500];
        snprintf(base, sizeof base, "%.*s/train-96-0123456789abcdef.ffr",
                 (int)(strrchr(a.path, '/') - a.path), a.path);
        char *t = ffr_tmp_path(base); /* BASE.tmp.OURPID.HOST */
        char *dot = strstr(t, ".tmp.") + 5, *host = strchr(dot, '.');
        snprintf(orphan, sizeof orphan, "%.*s%d%s", (int)(dot - t), t, (int)dead, host);
        snprintf(live, sizeof live, "%s", t);
        free(t);
    }
    FILE *o1 = fopen(orphan, "w"), *o2 = fopen(live, "w");
    fputs("a partial pack", o1), fputs("a pack being written", o2);
    fclose(o1), fclose(o2);
    is_int(get("train", 96, packs, &b, err, sizeof err), 0, "with a killed packer's temporary");
    ok(!exists(orphan) && exists(live),
       "the killed packer's temporary is removed, a live one kept");
    unlink(live);

    /* a pack a live job holds is not removed by a newer pack of its split */
    int go[2], done[2];
    if (pipe(go) != 0 || pipe(done) != 0) return 99;
    const pid_t holder = fork();
    if (holder == 0) {
        struct pack_cache_opts ho;
        pack_cache_opts_default(&ho);
        ho.data = data, ho.split = "train", ho.size = 96, ho.dir = packs, ho.threads = 2;
        ho.progress = false, ho.hold = true, ho.log = fopen("/dev/null", "w");
        struct pack_cache_result hr;
        char he[256];
        const int rc = pack_cache_get(&ho, &hr, he, sizeof he);
        char yes = rc == 0 && hr.hold_fd >= 0 ? 'y' : 'n';
        if (write(go[1], &yes, 1) != 1) _exit(2);
        if (read(done[0], &yes, 1) != 1) _exit(3); /* hold until told */
        _exit(0);
    }
    char said = 0;
    ok(read(go[0], &said, 1) == 1 && said == 'y', "a job holds the train pack (%s)", a.path);
    stat(lab, &ls);
    struct timespec later2[2] = { { ls.st_mtim.tv_sec + 7, 0 }, { ls.st_mtim.tv_sec + 7, 0 } };
    utimensat(AT_FDCWD, lab, later2, 0);
    is_int(get("train", 96, packs, &b, err, sizeof err), 0, "a new pack while it is held");
    ok(!b.hit && strcmp(b.path, a.path) && exists(a.path),
       "the held pack stays beside the new one (the job can still validate and resume)");
    if (write(done[1], "x", 1) != 1) tap_diag("could not release the holder");
    waitpid(holder, NULL, 0);
    is_int(get("train", 96, packs, &c, err, sizeof err), 0, "the next use, the job gone");
    ok(c.hit && !strcmp(c.path, b.path) && !exists(a.path),
       "once let go, the older pack is removed");

    char img[400];
    snprintf(img, sizeof img, "%s/s/images/train2017/000000000011.jpg", dir);
    unlink(img);
    is_int(get("train", 96, packs, &b, err, sizeof err), 0, "after removing an image");
    ok(!b.hit && b.samples == 11 && records(b.path) == 11, "a removed image: a pack of 11");

    /* a pack cut short (a disk that filled, a copy interrupted) is made again */
    if (truncate(b.path, 4096) != 0) tap_diag("truncate: %s", strerror(errno));
    is_int(get("train", 96, packs, &a, err, sizeof err), 0, "after damaging the pack");
    ok(!a.hit && !strcmp(a.path, b.path) && records(a.path) == 11,
       "a damaged pack is not used: made again in its place");

    /* two processes at once, on a size nobody made yet */
    int fds[2][2];
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        if (pipe(fds[i]) != 0) return 99;
        pid[i] = fork();
        if (pid[i] == 0) {
            struct pack_cache_result r;
            char e[256];
            const int rc = get("train", 128, packs, &r, e, sizeof e);
            char msg[4200];
            const int n = snprintf(msg, sizeof msg, "%d %d %s", rc, r.hit, r.path);
            if (write(fds[i][1], msg, (size_t)n) < 0) _exit(2);
            _exit(0);
        }
        close(fds[i][1]);
    }
    char got[2][4200] = { "", "" };
    int hits = 0, fails = 0;
    for (int i = 0; i < 2; i++) {
        const ssize_t n = read(fds[i][0], got[i], sizeof got[i] - 1);
        got[i][n > 0 ? n : 0] = '\0';
        close(fds[i][0]);
        waitpid(pid[i], NULL, 0);
        int rc = -1, hit = 0;
        sscanf(got[i], "%d %d", &rc, &hit);
        fails += rc != 0;
        hits += hit;
    }
    const char *p0 = strchr(strchr(got[0], ' ') + 1, ' ') + 1;
    const char *p1 = strchr(strchr(got[1], ' ') + 1, ' ') + 1;
    ok(fails == 0 && hits == 1 && !strcmp(p0, p1) && records(p0) == 11,
       "two processes at once: one packs, the other waits and finds it (%s | %s)", got[0], got[1]);

    /* the default folder: beside the dataset (its root is writable here) */
    is_int(get("val", 96, NULL, &c, err, sizeof err), 0, "no --pack-dir");
    char root[400];
    snprintf(root, sizeof root, "%s/s/", dir); /* the yaml's path: . makes it s/./ffyolo-packs */
    ok(!strncmp(c.path, root, strlen(root)) && strstr(c.path, "/ffyolo-packs/synth-"),
       "default: ROOT/ffyolo-packs (%s)", c.path);

    /* a root meant to be read in place (no write bit; root may still write there) */
    char sroot[400];
    snprintf(sroot, sizeof sroot, "%s/s", dir);
    chmod(sroot, 0555);
    char home[400];
    snprintf(home, sizeof home, "%s/home", dir);
    setenv("XDG_CACHE_HOME", home, 1);
    is_int(get("val", 64, NULL, &c, err, sizeof err), 0, "a read-only dataset root");
    ok(!strncmp(c.path, home, strlen(home)) && strstr(c.path, "/ffyolo/packs/synth-"),
       "... packs into $XDG_CACHE_HOME/ffyolo/packs (%s)", c.path);
    chmod(sroot, 0755);

    int rc = get("train", 96, "/proc/no/such/dir", &c, err, sizeof err);
    ok(rc < 0 && strstr(err, "/proc/no/such/dir"), "an unusable --pack-dir fails naming it (%s)",
       err);
    snprintf(data, sizeof data, "%s/none.yaml", dir);
    rc = get("train", 96, packs, &c, err, sizeof err);
    ok(rc < 0 && strstr(err, "none.yaml"), "a missing yaml fails naming it (%s)", err);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) tap_diag("cleanup failed");
    return tap_done();
}
