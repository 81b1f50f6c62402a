/* Packs of a dataset split made on first use and reused (cache.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "dataset.h"
#include "dataset_internal.h"
#include "ffr.h"
#include "ffyolo_config.h"
#include "packer.h"

/* The key's first bytes: a new layout of the key (or of what a pack holds) changes it. */
#define PACK_CACHE_TAG "ffyolo-pack-cache-2"
/* The dataset yaml is hashed whole; larger is not a dataset yaml. */
#define PACK_CACHE_YAML_MAX (1u << 20)

void pack_cache_opts_default(struct pack_cache_opts *o)
{
    memset(o, 0, sizeof *o);
    o->split = "train";
    o->size = 640;
    o->interp = -1;
    o->round = PACK_IMAGE_ROUND_INT;
    o->codec = PACK_CODEC_RAW;
    o->progress = true;
}

/* A growing byte string: the key's input. */
struct kbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void kput(struct kbuf *b, const void *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 1 << 16;
        while (c < b->n + n)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q, b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void kprintf(struct kbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) kput(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A file's identity in the key: path, size, mtime and ctime (ns) and inode, or "absent". A path
 * is followed by a NUL so that no two lists of names hash alike. The ctime and the inode catch
 * what size and mtime miss: an edit whose mtime was put back (touch -r, rsync -t), and a swap of
 * two files of equal size and mtime (a rename changes both files' ctime, and their inodes trade
 * places); the kernel sets ctime, so no user tool can put it back. */
static void kfile(struct kbuf *b, const char *path)
{
    kput(b, path, strlen(path) + 1);
    struct stat st;
    if (stat(path, &st) != 0)
        kprintf(b, "absent;");
    else
        kprintf(b, "%lld %lld.%09ld %lld.%09ld %llu;", (long long)st.st_size,
                (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec,
                st.st_ctim.tv_nsec, (unsigned long long)st.st_ino);
}

/* mkdir -p; 0 or -errno. */
static int mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -ENAMETOOLONG;
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -errno;
        *s = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -errno;
    return 0;
}

/* dir exists (made if need be) and this process may create files there. */
static bool usable_dir(const char *dir)
{
    return mkdirs(dir) == 0 && access(dir, W_OK | X_OK) == 0;
}

/* The folder the packs of this dataset go to, per cache.h PLACE. */
static int pack_dir(const struct pack_cache_opts *o, const char *root, const char *abs_data,
                    char *dst, size_t cap, char *err, size_t err_cap)
{
    char base[PATH_MAX];
    if (o->dir) {
        snprintf(base, sizeof base, "%s", o->dir);
        if (!usable_dir(base))
            return pack_errf(err, err_cap, errno ? -errno : -EACCES,
                             "--pack-dir %s: cannot create or write it: %s", base, strerror(errno));
    } else {
        snprintf(base, sizeof base, "%s/ffyolo-packs", root);
        /* a root whose mode has no write bit is meant to be read in place, even by root, for
         * whom access(W_OK) says yes */
        struct stat st;
        const bool meant = stat(root, &st) == 0 && (st.st_mode & 0222) != 0;
        if (!meant || !usable_dir(base)) {
            const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
            if (xdg && xdg[0] == '/')
                snprintf(base, sizeof base, "%s/ffyolo/packs", xdg);
            else if (home && home[0])
                snprintf(base, sizeof base, "%s/.cache/ffyolo/packs", home);
            else
                return pack_errf(
                    err, err_cap, -EACCES,
                    "%s/ffyolo-packs is not writable and HOME is unset: give --pack-dir", root);
            if (!usable_dir(base))
                return pack_errf(err, err_cap, -EACCES, "%s: cannot create or write it: %s", base,
                                 strerror(errno));
        }
    }
    const char *name = strrchr(abs_data, '/');
    name = name ? name + 1 : abs_data;
    const char *dot = strrchr(name, '.');
    const int stem = dot && dot != name ? (int)(dot - name) : (int)strlen(name);
    if (snprintf(dst, cap, "%s/%.*s-%08" PRIx32, base, stem, name,
                 (uint32_t)ffr_hash(abs_data, strlen(abs_data))) >= (int)cap)
        return pack_errf(err, err_cap, -ENAMETOOLONG, "%s: path too long", base);
    const int rc = mkdirs(dst);
    return rc < 0 ? pack_errf(err, err_cap, rc, "%s: %s", dst, strerror(-rc)) : 0;
}

/* The key of the split as ds scanned it, with the packing options of po. */
static int make_key(const struct pack_cache_opts *o, const struct pack_opts *po,
                    const struct pack_ds *ds, uint64_t *key, char *err, size_t err_cap)
{
    struct kbuf b = { 0 };
    kprintf(&b, "%s|%s|ffr %u ffr-det-1|size %d|interp %d|round %d|codec %d %d %d %d|split %s|",
            PACK_CACHE_TAG, FFYOLO_VERSION, (unsigned)FFR_FORMAT_VERSION, po->size, po->interp,
            (int)po->round, (int)po->codec, po->zstd_level, (int)po->sub_filter, po->quality,
            o->split);
    char *yaml = NULL;
    size_t ylen = 0;
    struct stat st;
    if (stat(o->data, &st) == 0 && S_ISREG(st.st_mode)) {
        const int rc = pack_ds_read_file(o->data, PACK_CACHE_YAML_MAX, &yaml, &ylen);
        if (rc < 0) return pack_errf(err, err_cap, rc, "%s: %s", o->data, strerror(-rc));
        kput(&b, yaml, ylen);
        free(yaml);
    }
    const size_t n = pack_ds_count(ds);
    for (size_t i = 0; i < n; i++) {
        const struct pack_ds_sample *s = pack_ds_get(ds, i);
        kfile(&b, s->image_path);
        kfile(&b, s->label_path ? s->label_path : "");
    }
    if (b.oom) {
        free(b.p);
        return pack_errf(err, err_cap, -ENOMEM, "%s: out of memory", o->data);
    }
    *key = ffr_hash(b.p, b.n);
    free(b.p);
    return 0;
}

/* True when path is a complete pack (index and trailer check out). */
static bool complete(const char *path)
{
    struct ffr_reader *r = NULL;
    if (access(path, F_OK) != 0 || ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return false;
    ffr_reader_close(r);
    return true;
}

/* Removes the packs of an older source: PREFIX*.ffr in dir other than keep, except those a
 * live process holds (pack_cache_result.hold_fd's shared lock): a job still training or
 * validating on an older pack keeps it until it exits, and a later call removes it. */
static void remove_stale(const char *dir, const char *prefix, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t pl = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        const size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, pl) || l < 4 || strcmp(e->d_name + l - 4, ".ffr") ||
            !strcmp(e->d_name, keep))
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
        const int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) continue;
        /* a holder takes its shared lock under the split's lock, which we hold: no one can
         * start holding this pack between the test and the unlink */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) unlink(p);
        close(fd);
    }
    closedir(d);
}

/* A shared lock on the pack at path, for as long as the descriptor stays open; -1 if none. */
static int hold(const char *path)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_SH) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int pack_cache_has_split(const char *data, const char *split, char *err, size_t err_cap)
{
    const int si = pack_dsyaml_split_index(split);
    const size_t l = strlen(data);
    if (si < 0) return 0;
    if (!(l > 5 && !strcmp(data + l - 5, ".yaml")) && !(l > 4 && !strcmp(data + l - 4, ".yml")))
        return si == PACK_DSYAML_TRAIN;
    char *buf = NULL;
    size_t len = 0;
    int rc = pack_ds_read_file(data, PACK_CACHE_YAML_MAX, &buf, &len);
    if (rc == -EFBIG)
        return pack_errf(err, err_cap, rc, "%s: over %u MiB, which no dataset yaml needs", data,
                         PACK_CACHE_YAML_MAX >> 20);
    if (rc < 0) return pack_errf(err, err_cap, rc, "%s: %s", data, ffr_strerror(rc));
    struct pack_dsyaml y = { 0 };
    /* a yaml that does not parse is said as such, not as a missing split */
    rc = pack_dsyaml_parse(buf, len, data, &y, err, err_cap);
    if (rc == 0) rc = y.n_split[si] > 0;
    pack_dsyaml_free(&y);
    free(buf);
    return rc;
}

int pack_cache_get(const struct pack_cache_opts *o, struct pack_cache_result *r, char *err,
                   size_t err_cap)
{
    if (!o || !r || !o->data || !o->split || o->size < 1) return -EINVAL;
    memset(r, 0, sizeof *r);
    r->hold_fd = -1;
    struct pack_opts po;
    pack_opts_default(&po);
    po.input = o->data;
    po.size = o->size;
    po.interp = o->interp;
    po.round = o->round;
    po.codec = o->codec;
    po.threads = o->threads > 0 ? o->threads : po.threads;
    po.progress = o->progress;
    po.log = o->log;
    po.ds.split = o->split;

    struct pack_ds *ds = NULL;
    struct pack_ds_opts so;
    pack_ds_opts_default(&so);
    so.split = o->split;
    int rc = pack_ds_scan(o->data, &so, &ds, err, err_cap);
    if (rc < 0) return rc;
    r->samples = pack_ds_count(ds);
    char abs_data[PATH_MAX], dir[PATH_MAX];
    if (!realpath(o->data, abs_data)) snprintf(abs_data, sizeof abs_data, "%s", o->data);
    rc = make_key(o, &po, ds, &r->key, err, err_cap);
    if (rc == 0) rc = pack_dir(o, pack_ds_info(ds)->root, abs_data, dir, sizeof dir, err, err_cap);
    pack_ds_destroy(ds);
    if (rc < 0) return rc;

    char prefix[64], name[128], lock[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s-%d-", o->split, o->size);
    snprintf(name, sizeof name, "%s%016" PRIx64 ".ffr", prefix, r->key);
    if (snprintf(r->path, sizeof r->path, "%s/%s", dir, name) >= (int)sizeof r->path ||
        snprintf(lock, sizeof lock, "%s/%slock", dir, prefix) >= (int)sizeof lock)
        return pack_errf(err, err_cap, -ENAMETOOLONG, "%s: path too long", dir);
    const int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return pack_errf(err, err_cap, -errno, "%s: %s", lock, strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            rc = pack_errf(err, err_cap, -errno, "%s: lock: %s", lock, strerror(errno));
            close(fd);
            return rc;
        }
    }
    /* the split is ours: any temporary of its packs is a killed packer's (of this or an older
     * key), which no later pack would ever reuse */
    char stem[PATH_MAX + 64];
    snprintf(stem, sizeof stem, "%s/%s", dir, prefix);
    ffr_remove_stale_tmp(stem, 1);
    if (complete(r->path)) {
        r->hit = true;
    } else {
        po.output = r->path;
        struct pack_result pr;
        rc = pack_run(&po, &pr, NULL);
        if (rc < 0)
            pack_errf(err, err_cap, rc,
                      "%s: packing split '%s' into %s failed (the packer said why)", o->data,
                      o->split, r->path);
    }
    /* on a hit too: an older pack that was held when this one was made goes once let go */
    if (rc == 0) remove_stale(dir, prefix, name);
    if (rc == 0 && o->hold && (r->hold_fd = hold(r->path)) < 0)
        rc = pack_errf(err, err_cap, -errno, "%s: %s", r->path, strerror(errno));
    flock(fd, LOCK_UN);
    close(fd);
    return rc;
}
