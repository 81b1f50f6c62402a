/*
 * The writer's commit (issue 20): a sharded dataset replaced under the same name survives a job
 * killed at any point (its shards are never renamed over before the new manifest commits); a
 * killed fresh sharded pack leaves nothing under a final name; temporaries of dead processes are
 * removed by the next writer, those of live processes and other hosts never; a completed
 * re-pack keeps the plain shard names and leaves no extra file; with a sink (the publish hook of
 * yolo-pack -o s3://) shards are handed over as they finish, the manifest last, and names the
 * sink holds are avoided.
 * Kills are real: a child process writes and _exit()s (as kill -9 would leave it) or is killed.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ffr.h"
#include "tap.h"
#include "testutil.h"

static char err[512];

static void opts(struct ffr_writer_opts *o)
{
    ffr_writer_opts_default(o);
    o->shard_bytes = 16384;
    o->durable = 0;
}

/* n records of 5000 bytes, each filled with `fill`: one record a shard */
static int write_set(const char *path, int n, uint8_t fill, int close_it)
{
    struct ffr_writer_opts o;
    opts(&o);
    struct ffr_writer *w;
    if (ffr_writer_open(&w, path, &o) < 0) return -1;
    uint8_t rec[5000];
    memset(rec, fill, sizeof rec);
    for (int i = 0; i < n; i++)
        if (ffr_writer_append(w, rec, sizeof rec, NULL, 0) < 0) return -1;
    return close_it ? ffr_writer_close(w) : 0;
}

/* The dataset at path: -1 when it does not open or verify, else its first record's fill byte
 * (its record count in *n). */
static int dataset_fill(const char *path, uint64_t *n)
{
    struct ffr_reader *r;
    if (ffr_reader_open(&r, path, NULL, err, sizeof err) < 0) return -1;
    *n = ffr_reader_count(r);
    uint8_t buf[5000];
    int fill = -1;
    if (ffr_reader_verify_all(r, NULL, NULL) == 0 &&
        ffr_reader_read(r, NULL, 0, buf, sizeof buf) == (int64_t)sizeof buf)
        fill = buf[0];
    ffr_reader_close(r);
    return fill;
}

/* Entries of dir containing `part`. */
static int count_names(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

/* Shards under a final plain name: set-NNNNN.ffr exactly. */
static int count_plain(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        unsigned k;
        char tail[8] = "";
        n += sscanf(e->d_name, "set-%5u.ff%1s", &k, tail) == 2 && !strcmp(tail, "r") &&
             strlen(e->d_name) == 13;
    }
    if (d) closedir(d);
    return n;
}

/* Shards of the dataset at path (-1: does not open). */
static int shard_count(const char *path)
{
    struct ffr_reader *r;
    if (ffr_reader_open(&r, path, NULL, err, sizeof err) < 0) return -1;
    const int n = (int)ffr_reader_shard_count(r);
    ffr_reader_close(r);
    return n;
}

/* A sink for the publish hook (ffr_writer_opts.publish, as yolo-pack -o s3:// uses it): copies
 * each file handed over into dest, logging the order; fails the call numbered fail_at. */
struct fake_sink {
    char dest[600];
    char log[2048];
    int calls, fail_at, taken_calls;
    int appended; /* records the writer had when each shard came: they come as finished */
};

static int fake_publish(void *arg, const char *tmp, const char *name, int last)
{
    struct fake_sink *s = arg;
    if (++s->calls == s->fail_at) return -EIO;
    char to[900], cmd[2000];
    snprintf(to, sizeof to, "%s/%s", s->dest, name);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tmp, to);
    if (access(tmp, R_OK) != 0 || system(cmd) != 0) return -EIO;
    const size_t l = strlen(s->log);
    snprintf(s->log + l, sizeof s->log - l, "%s%s@%d%s", l ? " " : "", name, s->appended,
             last ? "!" : "");
    return 0;
}

static bool fake_taken(void *arg, const char *name)
{
    struct fake_sink *s = arg;
    char p[900];
    s->taken_calls++;
    snprintf(p, sizeof p, "%s/%s", s->dest, name);
    return access(p, F_OK) == 0;
}

static int write_to_sink(const char *stage_path, struct fake_sink *s, int n, uint8_t fill)
{
    struct ffr_writer_opts o;
    opts(&o);
    o.publish = fake_publish;
    o.taken = fake_taken;
    o.sink = s;
    struct ffr_writer *w;
    if (ffr_writer_open(&w, stage_path, &o) < 0) return -1;
    uint8_t rec[5000];
    memset(rec, fill, sizeof rec);
    for (int i = 0; i < n; i++, s->appended++)
        if (ffr_writer_append(w, rec, sizeof rec, NULL, 0) < 0) {
            ffr_writer_abort(w);
            return -1;
        }
    return ffr_writer_close(w);
}

/* A child writes `records` into path and dies without closing (as a kill -9 would). */
static void killed_writer(const char *path, int records, uint8_t fill)
{
    const pid_t pid = fork();
    if (pid == 0) {
        write_set(path, records, fill, 0);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
}

int main(void)
{
    const char *dir = tu_tmpdir();
    if (!dir) return 99;
    char path[600];
    snprintf(path, sizeof path, "%s/set.ffr", dir);
    uint64_t n = 0;

    /* 1. A killed fresh sharded pack: nothing under a final name, no manifest */
    killed_writer(path, 7, 0x11);
    ok(count_names(dir, ".tmp.") >= 3, "the killed writer left temporaries (%d)",
       count_names(dir, ".tmp."));
    is_int(count_plain(dir), 0, "every shard it finished is a temporary: none has a final name");
    ok(access(path, F_OK) != 0, "no manifest");

    /* 2. The next writer removes them (their process is dead) and writes the dataset */
    ok(write_set(path, 6, 0xA1, 1) == 0, "a fresh sharded dataset written (6 records)");
    is_int(count_names(dir, ".tmp."), 0, "the dead writer's temporaries are gone");
    ok(dataset_fill(path, &n) == 0xA1 && n == 6, "it opens and verifies (%s)", err);
    ok(shard_count(path) == 6 && count_plain(dir) == 6, "six shards under the plain names");

    /* 3. Re-packing to the same name, killed after several new shards: the old dataset is
     * intact (before the fix the new shards were renamed over the old ones one at a time) */
    killed_writer(path, 9, 0xB2);
    ok(dataset_fill(path, &n) == 0xA1 && n == 6,
       "killed re-pack: the old dataset opens, "
       "verifies and is the old one (%s)",
       err);
    ok(count_names(dir, ".tmp.") >= 4, "the killed re-pack left only temporaries (%d)",
       count_names(dir, ".tmp."));

    /* 4. A completed re-pack: new content, plain names again, nothing else left over */
    ok(write_set(path, 5, 0xC3, 1) == 0, "re-pack to the same name (5 records)");
    ok(dataset_fill(path, &n) == 0xC3 && n == 5, "the new dataset opens and verifies");
    ok(shard_count(path) == 5 && count_plain(dir) == 5,
       "its five shards carry the plain names, the old sixth is gone");
    is_int(count_names(dir, "set."), 1, "no tagged shard is left (only set.ffr)");
    is_int(count_names(dir, ".tmp."), 0, "and no temporary");

    /* 5. A single file written over the sharded dataset: its shards go after the commit */
    struct ffr_writer *w;
    ok(ffr_writer_open(&w, path, NULL) == 0, "single-file writer over the manifest");
    uint8_t rec[5000];
    memset(rec, 0xD4, sizeof rec);
    ffr_writer_append(w, rec, sizeof rec, NULL, 0);
    ok(ffr_writer_close(w) == 0 && dataset_fill(path, &n) == 0xD4 && n == 1,
       "the single file replaced it");
    is_int(count_plain(dir), 0, "the old shards are removed");

    /* 5b. A relative path over a broken old dataset (its first shard gone, so the new shards
     * take the plain names the old manifest also lists): the old shards are removed by identity,
     * never the new ones under the same name ("./set-00001.ffr" is "set-00001.ffr") */
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) && chdir(dir) == 0) {
        ok(write_set("set.ffr", 4, 0xE5, 1) == 0 && unlink("set-00000.ffr") == 0,
           "a 4-shard dataset, its first shard then removed");
        ok(write_set("set.ffr", 3, 0xF6, 1) == 0, "re-packed by a relative path, 3 records");
        ok(dataset_fill("set.ffr", &n) == 0xF6 && n == 3 && count_plain(".") == 3,
           "the new dataset is whole: 3 plain shards, the old fourth removed (%s)", err);
        if (chdir(cwd) != 0) tap_diag("chdir back failed");
    }

    /* 6. ffr_remove_stale_tmp keeps what a live process or another host may still write */
    char name[700];
    char host[256] = "";
    gethostname(host, sizeof host);
    for (char *p = host; *p; p++)
        if (*p == '.' || *p == '/') *p = '_';
    const char *const keep[] = { "set.ffr.tmp.1.%s", "set.ffr.tmp.999999.other_host",
                                 "set.ffr.tmp.1" };
    for (int i = 0; i < 3; i++) {
        char rel[300];
        snprintf(rel, sizeof rel, keep[i], host);
        snprintf(name, sizeof name, "%s/%s", dir, rel);
        fclose(fopen(name, "w"));
    }
    snprintf(name, sizeof name, "%s/set.ffr.tmp.999999.%s", dir, host);
    fclose(fopen(name, "w"));
    snprintf(name, sizeof name, "%s/set.ffr.tmp.999998", dir);
    fclose(fopen(name, "w"));
    is_int(ffr_remove_stale_tmp(path, 0), 2, "two stale temporaries removed (dead PIDs here)");
    is_int(count_names(dir, ".tmp."), 3,
           "PID 1 (alive) and another host's are kept, with or without a host");

    /* 7. A sink (the upload of yolo-pack -o s3://): shards handed over as they are finished,
     * the manifest last, nothing left in the staging directory; names taken at the destination
     * avoided; a failed hand-over fails the close */
    char stage[600], sp[700];
    struct fake_sink fs = { .fail_at = 0 };
    snprintf(stage, sizeof stage, "%s/stage", dir);
    snprintf(fs.dest, sizeof fs.dest, "%s/dest", dir);
    snprintf(sp, sizeof sp, "%s/set.ffr", stage);
    snprintf(name, sizeof name, "%s/set.ffr", fs.dest);
    if (mkdir(stage, 0755) < 0 || mkdir(fs.dest, 0755) < 0) tap_diag("mkdir failed");
    ok(write_to_sink(sp, &fs, 3, 0x17) == 0, "3 records written through a sink");
    ok(!strcmp(fs.log, "set-00000.ffr@1 set-00001.ffr@2 set-00002.ffr@3 set.ffr@3!"),
       "each shard handed over when the next record needs a new one, the manifest last: %s",
       fs.log);
    ok(dataset_fill(name, &n) == 0x17 && n == 3, "what the sink holds opens and verifies (%s)",
       err);
    is_int(count_names(stage, "set"), 0, "the staging directory is empty");
    fs.log[0] = '\0';
    fs.appended = 0;
    const int again = write_to_sink(sp, &fs, 2, 0x28);
    ok(again == 0 && fs.taken_calls >= 3,
       "written again: the sink is asked which names it holds (%d asks)", fs.taken_calls);
    ok(strstr(fs.log, "set.") == fs.log && strstr(fs.log, "-00000.ffr@1") &&
           strstr(fs.log, "set.ffr@2!"),
       "the new shards avoid the names the sink holds: %s", fs.log);
    ok(dataset_fill(name, &n) == 0x28 && n == 2, "and the new dataset is the sink's manifest");
    fs.log[0] = '\0';
    fs.appended = 0;
    fs.calls = 0;
    fs.fail_at = 2;
    ok(write_to_sink(sp, &fs, 4, 0x39) < 0 && fs.calls == 2,
       "a hand-over that fails fails the writer");
    is_int(count_names(stage, "set"), 0, "and the staging directory is left empty");
    ok(dataset_fill(name, &n) == 0x28 && n == 2, "the sink's dataset is the one before");
    tu_rmtree(dir);
    return tap_done();
}
