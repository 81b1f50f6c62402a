/*
 * Dataset scanning: layout detection, image discovery (directories, list files, dataset yaml),
 * YOLO label files, and the result object. COCO JSON is in coco_json.c, the yaml reader in
 * dsyaml.c, label parsing and cleaning in yolo_labels.c. Behaviour is documented in dataset.h.
 *
 * Ultralytics facts used here (yolov5 v7.0, utils/dataloaders.py LoadImagesAndLabels and
 * img2label_paths; utils/general.py check_dataset):
 *   - a directory is searched recursively ('**' glob: hidden entries skipped, symlinks followed);
 *     a file is a list of image paths, where a line starting with "./" is relative to the list
 *     file's directory; only names whose text after the last '.' is an image suffix are kept;
 *     the combined list is sorted as Python sorts strings;
 *   - the label of an image: the last "/images/" of its path becomes "/labels/" and the text
 *     after the last '.' becomes "txt"; no label file = background;
 *   - yaml: train/val/test are joined to `path`; a missing "../x" entry is retried as "x".
 * Where we differ (documented in dataset.h and here): relative list lines that do not start with
 * "./" are taken relative to the list file (ultralytics: the working directory); a relative
 * yaml `path` is relative to the yaml file (ultralytics: its own repository or datasets dir).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_internal.h"
#include "det.h"
#include "ffr.h"

#define LABEL_MAX_BYTES ((size_t)256 << 20) /* a label file larger than this is corrupt */
#define LIST_MAX_BYTES  ((size_t)1 << 30)
#define YAML_MAX_BYTES  ((size_t)16 << 20)
#define WALK_MAX_DEPTH  64

/* ---------------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------------- */

int pack_ds_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem) return -ENOMEM;
        n *= 2;
    }
    void *q = realloc(*p, n * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

int pack_ds_read_file(const char *path, size_t max_len, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    const int fd = ffr_open_regular(path, 0); /* a FIFO or device: -FFR_ENOTREG, unblocked */
    if (fd < 0) return fd;
    struct stat st;
    int rc = 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        goto out;
    }
    cap = (size_t)st.st_size + 1;
    if ((size_t)st.st_size > max_len) {
        rc = -EFBIG;
        goto out;
    }
    buf = malloc(cap);
    if (!buf) {
        rc = -ENOMEM;
        goto out;
    }
    for (;;) {
        if (n + 1 >= cap) { /* the file grew while we read it */
            if (cap > max_len) {
                rc = -EFBIG;
                goto out;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        const ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            rc = -errno;
            goto out;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

int pack_errf(char *err, size_t cap, int rc, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

char *pack_ds_join(const char *a, const char *b)
{
    char *s = NULL;
    if (b[0] == '/' || a[0] == '\0') return strdup(b);
    if (b[0] == '\0') return strdup(a);
    const size_t la = strlen(a);
    const bool slash = a[la - 1] == '/';
    if (asprintf(&s, "%s%s%s", a, slash ? "" : "/", b) < 0) return NULL;
    return s;
}

/* IMG_FORMATS of yolov5 v7.0. */
static const char *const img_formats[] = { "bmp", "dng", "jpeg", "jpg", "mpo",
                                           "png", "tif", "tiff", "webp" };

bool pack_ds_is_image_name(const char *path)
{
    const char *dot = strrchr(path, '.');
    if (!dot) return false;
    for (size_t i = 0; i < sizeof img_formats / sizeof *img_formats; i++)
        if (strcasecmp(dot + 1, img_formats[i]) == 0) return true;
    return false;
}

static bool has_suffix_ci(const char *s, const char *suf)
{
    const size_t ls = strlen(s), lf = strlen(suf);
    return ls >= lf && strcasecmp(s + ls - lf, suf) == 0;
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Directory part of a path ("." when none). */
static char *dir_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    if (!sl) return strdup(".");
    if (sl == path) return strdup("/");
    return strndup(path, (size_t)(sl - path));
}

static const char *base_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    return sl ? sl + 1 : path;
}

/* ultralytics img2label_paths for one path. */
static char *img2label(const char *img)
{
    const char *hit = NULL;
    for (const char *p = img; (p = strstr(p, "/images/")); p++)
        hit = p;
    const char *dot = strrchr(img, '.');
    const size_t stem_len = dot ? (size_t)(dot - img) : strlen(img);
    char *s = malloc(stem_len + 5);
    if (!s) return NULL;
    memcpy(s, img, stem_len);
    memcpy(s + stem_len, ".txt", 5);
    /* "/images/" and "/labels/" have the same length, so the replacement is in place. The dot
     * found above may lie inside the replaced part only if the file name has no dot, which an
     * image name always has. */
    if (hit && (size_t)(hit - img) + 8 <= stem_len) memcpy(s + (hit - img), "/labels/", 8);
    return s;
}

/* Image id from a file name: the stem when it is all digits (COCO names), else -1. */
static int64_t id_from_name(const char *path)
{
    const char *b = base_of(path);
    const char *dot = strrchr(b, '.');
    const size_t n = dot ? (size_t)(dot - b) : strlen(b);
    if (n == 0 || n > 18) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (b[i] < '0' || b[i] > '9') return -1;
        v = v * 10 + (b[i] - '0');
    }
    return v;
}

/* ---------------------------------------------------------------------------------------------
 * Result object, warnings
 * ------------------------------------------------------------------------------------------- */

void pack_ds_opts_default(struct pack_ds_opts *o)
{
    memset(o, 0, sizeof *o);
    o->format = PACK_DS_FORMAT_AUTO;
    o->keep_segments = true;
    o->max_warnings = 1000;
}

struct pack_ds *pack_ds_new(const struct pack_ds_opts *opts, char *err, size_t err_cap)
{
    struct pack_ds *ds = calloc(1, sizeof *ds);
    if (!ds) return NULL;
    if (opts)
        ds->opts = *opts;
    else
        pack_ds_opts_default(&ds->opts);
    ds->nc = -1;
    ds->max_cls = -1;
    ds->err = err;
    ds->err_cap = err_cap;
    ds->info.root = ds->info.split = ds->info.source = "";
    return ds;
}

void pack_ds_destroy(struct pack_ds *ds)
{
    if (!ds) return;
    for (size_t i = 0; i < ds->n_bs; i++) {
        free(ds->bs[i].image_path);
        free(ds->bs[i].label_path);
    }
    free(ds->bs);
    free(ds->samples);
    free(ds->rows);
    free(ds->pts);
    for (size_t i = 0; i < ds->n_names; i++)
        free(ds->names[i]);
    free(ds->names);
    for (size_t i = 0; i < ds->n_warns; i++) {
        free((char *)ds->warns[i].file);
        free((char *)ds->warns[i].msg);
    }
    free(ds->warns);
    free(ds->root);
    free(ds->split);
    free(ds->source);
    pack_lbl_free(&ds->lbl);
    free(ds);
}

int pack_ds_fail(struct pack_ds *ds, int rc, const char *fmt, ...)
{
    if (ds->err && ds->err_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ds->err, ds->err_cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int pack_ds_warn(struct pack_ds *ds, enum pack_ds_warn_kind kind, const char *file, uint64_t line,
                 int64_t ann_id, const char *fmt, ...)
{
    char body[768], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (line)
        snprintf(msg, sizeof msg, "%s:%llu: %s", file, (unsigned long long)line, body);
    else
        snprintf(msg, sizeof msg, "%s: %s", file, body);
    ds->st.warnings++;
    const struct pack_ds_warning w = {
        .kind = kind, .file = file, .line = line, .ann_id = ann_id, .msg = msg
    };
    if (ds->opts.warn_fn) ds->opts.warn_fn(ds->opts.warn_user, &w);
    if (ds->n_warns < ds->opts.max_warnings) {
        int rc =
            pack_ds_grow((void **)&ds->warns, &ds->cap_warns, ds->n_warns + 1, sizeof *ds->warns);
        if (rc) return rc;
        struct pack_ds_warning *s = &ds->warns[ds->n_warns];
        *s = w;
        s->file = strdup(file);
        s->msg = strdup(msg);
        if (!s->file || !s->msg) {
            free((char *)s->file);
            free((char *)s->msg);
            return -ENOMEM;
        }
        ds->n_warns++;
    }
    if (ds->opts.strict && kind != PACK_DS_W_ORPHAN_LABEL)
        return pack_ds_fail(ds, -PACK_DS_ESTRICT, "strict: %s", msg);
    return 0;
}

int pack_ds_set_names(struct pack_ds *ds, const char *const *names, size_t n)
{
    char **v = calloc(n ? n : 1, sizeof *v);
    if (!v) return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        v[i] = strdup(names[i] ? names[i] : "");
        if (!v[i]) {
            for (size_t j = 0; j < i; j++)
                free(v[j]);
            free(v);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < ds->n_names; i++)
        free(ds->names[i]);
    free(ds->names);
    ds->names = v;
    ds->n_names = n;
    return 0;
}

int pack_ds_add_sample(struct pack_ds *ds, char *image_path, char *label_path, int64_t image_id,
                       uint32_t width, uint32_t height, const struct pack_lbl *L)
{
    const size_t n = L->status == PACK_LBL_OK ? L->n_rows : 0;
    if (n == 0 && ds->opts.drop_backgrounds) {
        ds->st.backgrounds_dropped++;
        free(image_path);
        free(label_path);
        return 0;
    }
    size_t npts = 0;
    if (ds->opts.keep_segments)
        for (size_t r = 0; r < n; r++)
            npts += L->rows[r].seg_n;
    int rc = pack_ds_grow((void **)&ds->bs, &ds->cap_bs, ds->n_bs + 1, sizeof *ds->bs);
    if (!rc) rc = pack_ds_grow((void **)&ds->rows, &ds->cap_rows, ds->n_rows + n, sizeof *ds->rows);
    if (!rc)
        rc = pack_ds_grow((void **)&ds->pts, &ds->cap_pts, 2 * (ds->n_pts + npts), sizeof *ds->pts);
    if (!rc && (n > UINT32_MAX || npts > UINT32_MAX)) rc = -ENOMEM;
    if (rc) {
        free(image_path);
        free(label_path);
        return rc;
    }
    struct pack_ds_bsample *s = &ds->bs[ds->n_bs++];
    *s = (struct pack_ds_bsample){ .image_path = image_path,
                                   .label_path = label_path,
                                   .image_id = image_id,
                                   .width = width,
                                   .height = height,
                                   .row_off = ds->n_rows,
                                   .n_rows = (uint32_t)n,
                                   .pt_off = ds->n_pts,
                                   .n_pts = (uint32_t)npts,
                                   .seq = ds->n_bs - 1 };
    uint32_t first = 0;
    for (size_t r = 0; r < n; r++) {
        const struct pack_lbl_row *in = &L->rows[r];
        struct pack_ds_row *o = &ds->rows[ds->n_rows++];
        o->cls = (int32_t)in->v[0];
        o->cx = in->v[1];
        o->cy = in->v[2];
        o->w = in->v[3];
        o->h = in->v[4];
        o->seg_first = 0;
        o->seg_count = 0;
        if (o->cls > ds->max_cls) ds->max_cls = o->cls;
        if (in->seg_n) ds->st.rows_with_segment += ds->opts.keep_segments;
        if (ds->opts.keep_segments && in->seg_n) {
            o->seg_first = first;
            o->seg_count = in->seg_n;
            memcpy(ds->pts + 2 * ds->n_pts, L->pts + 2 * (size_t)in->seg_off,
                   2 * (size_t)in->seg_n * sizeof *ds->pts);
            ds->n_pts += in->seg_n;
            first += in->seg_n;
        }
    }
    ds->st.samples++;
    ds->st.rows += n;
    if (n)
        ds->st.labelled++;
    else
        ds->st.backgrounds++;
    return 0;
}

int pack_ds_report_lbl(struct pack_ds *ds, const struct pack_lbl *L, const char *file,
                       const char *image_path)
{
    int rc = 0;
    if (L->status == PACK_LBL_CORRUPT) {
        ds->st.corrupt++;
        ds->st.rows_corrupt += L->n_in;
        return pack_ds_warn(ds, PACK_DS_W_LABEL_CORRUPT, file, L->bad_line, -1,
                            "ignoring corrupt image/label %s: %s (%zu row%s dropped)", image_path,
                            L->reason, L->n_in, L->n_in == 1 ? "" : "s");
    }
    for (size_t i = 0; i < L->n_dups && !rc; i++) {
        const struct pack_lbl_dup *d = &L->dups[i];
        ds->st.rows_duplicate++;
        if (d->ann_id >= 0)
            rc = pack_ds_warn(ds, PACK_DS_W_LABEL_DUPLICATE, file, d->line, d->ann_id,
                              "annotation %lld duplicates annotation %lld of %s: removed",
                              (long long)d->ann_id, (long long)d->kept_ann_id, image_path);
        else
            rc = pack_ds_warn(ds, PACK_DS_W_LABEL_DUPLICATE, file, d->line, -1,
                              "duplicate of line %u: removed", d->kept_line);
    }
    for (size_t i = 0; i < L->n_drops && !rc; i++) {
        const struct pack_lbl_drop *d = &L->drops[i];
        ds->st.rows_bad_category++;
        rc = pack_ds_warn(ds, PACK_DS_W_ROW_DROPPED, file, d->line, d->ann_id,
                          "class %.0f of %s is beyond the record format's limit of %u: row "
                          "dropped",
                          (double)d->cls, image_path, DET_CLASS_MAX);
    }
    return rc;
}

static int bs_cmp(const void *pa, const void *pb)
{
    const struct pack_ds_bsample *a = pa, *b = pb;
    const int c = strcmp(a->image_path, b->image_path);
    if (c) return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq; /* stable */
}

int pack_ds_finish(struct pack_ds *ds)
{
    if (ds->n_bs > 1) qsort(ds->bs, ds->n_bs, sizeof *ds->bs, bs_cmp);
    free(ds->samples);
    ds->samples = calloc(ds->n_bs ? ds->n_bs : 1, sizeof *ds->samples);
    if (!ds->samples) return -ENOMEM;
    for (size_t i = 0; i < ds->n_bs; i++) {
        const struct pack_ds_bsample *b = &ds->bs[i];
        ds->samples[i] = (struct pack_ds_sample){
            .image_path = b->image_path,
            .label_path = b->label_path ? b->label_path : "",
            .image_id = b->image_id,
            .width = b->width,
            .height = b->height,
            .n_rows = b->n_rows,
            .rows = ds->rows ? ds->rows + b->row_off : NULL,
            .n_seg_points = b->n_pts,
            .seg_xy = b->n_pts ? ds->pts + 2 * b->pt_off : NULL,
        };
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Public accessors
 * ------------------------------------------------------------------------------------------- */

size_t pack_ds_count(const struct pack_ds *ds)
{
    return ds ? ds->n_bs : 0;
}

const struct pack_ds_sample *pack_ds_get(const struct pack_ds *ds, size_t i)
{
    return ds && i < ds->n_bs && ds->samples ? &ds->samples[i] : NULL;
}

const char *const *pack_ds_names(const struct pack_ds *ds, size_t *n)
{
    if (n) *n = ds ? ds->n_names : 0;
    return ds ? (const char *const *)ds->names : NULL;
}

const struct pack_ds_stats *pack_ds_stats(const struct pack_ds *ds)
{
    return ds ? &ds->st : NULL;
}

const struct pack_ds_info *pack_ds_info(const struct pack_ds *ds)
{
    return ds ? &ds->info : NULL;
}

size_t pack_ds_warning_count(const struct pack_ds *ds)
{
    return ds ? ds->n_warns : 0;
}

const struct pack_ds_warning *pack_ds_warning_get(const struct pack_ds *ds, size_t i)
{
    return ds && i < ds->n_warns ? &ds->warns[i] : NULL;
}

int pack_ds_stats_format(const struct pack_ds_stats *s, char *dst, size_t dst_cap)
{
    if (!s || (!dst && dst_cap)) return -EINVAL;
    const unsigned long long dropped =
        (unsigned long long)(s->rows_duplicate + s->rows_corrupt + s->rows_bad_box +
                             s->rows_bad_category + s->rows_no_image);
    const int n = snprintf(
        dst, dst_cap,
        "%llu found, %llu samples (%llu labelled, %llu backgrounds%s), %llu missing, %llu "
        "corrupt; %llu rows kept, %llu dropped (%llu duplicate, %llu corrupt, %llu bad box, "
        "%llu bad category, %llu no image), %llu crowd skipped, %llu orphan labels, %llu warnings",
        (unsigned long long)s->images_found, (unsigned long long)s->samples,
        (unsigned long long)s->labelled, (unsigned long long)s->backgrounds,
        s->backgrounds_dropped ? ", backgrounds dropped" : "",
        (unsigned long long)(s->images_missing + s->images_invalid), (unsigned long long)s->corrupt,
        (unsigned long long)s->rows, dropped, (unsigned long long)s->rows_duplicate,
        (unsigned long long)s->rows_corrupt, (unsigned long long)s->rows_bad_box,
        (unsigned long long)s->rows_bad_category, (unsigned long long)s->rows_no_image,
        (unsigned long long)s->crowd_skipped, (unsigned long long)s->orphan_labels,
        (unsigned long long)s->warnings);
    return n < 0 ? -EINVAL : n;
}

const char *pack_ds_warn_kind_name(enum pack_ds_warn_kind kind)
{
    switch (kind) {
    case PACK_DS_W_LABEL_CORRUPT:
        return "label-corrupt";
    case PACK_DS_W_LABEL_DUPLICATE:
        return "label-duplicate";
    case PACK_DS_W_IMAGE_MISSING:
        return "image-missing";
    case PACK_DS_W_LIST_ENTRY:
        return "list-entry";
    case PACK_DS_W_ANN_INVALID:
        return "annotation-invalid";
    case PACK_DS_W_SEGMENT_INVALID:
        return "segment-invalid";
    case PACK_DS_W_IMAGE_INVALID:
        return "image-invalid";
    case PACK_DS_W_ORPHAN_LABEL:
        return "orphan-label";
    case PACK_DS_W_NOT_A_FILE:
        return "not-a-file";
    case PACK_DS_W_ROW_DROPPED:
        return "row-dropped";
    }
    return "unknown";
}

const char *pack_ds_strerror(int rc)
{
    switch (-rc) {
    case 0:
        return "success";
    case PACK_DS_ESYNTAX:
        return "malformed dataset file";
    case PACK_DS_ESCHEMA:
        return "dataset file has an unexpected structure";
    case PACK_DS_ELAYOUT:
        return "dataset layout not recognised";
    case PACK_DS_ENOIMAGES:
        return "no images found";
    case PACK_DS_ESTRICT:
        return "dataset warning in strict mode";
    }
    return rc < 0 ? strerror(-rc) : "unknown error";
}

/* ---------------------------------------------------------------------------------------------
 * Image discovery
 * ------------------------------------------------------------------------------------------- */

/* A candidate image: where it came from, for messages. */
struct img_ent {
    char *path;
    const char *src; /* list file (owned by img_list.srcs), or NULL for a directory walk */
    uint32_t line;   /* line in src */
};

struct img_list {
    struct img_ent *v;
    size_t n, cap;
    char **srcs;
    size_t n_srcs, cap_srcs;
    char **dirs; /* image directories walked: their label directories are checked for orphans */
    size_t n_dirs, cap_dirs;
};

static void img_list_free(struct img_list *L)
{
    for (size_t i = 0; i < L->n; i++)
        free(L->v[i].path);
    free(L->v);
    for (size_t i = 0; i < L->n_srcs; i++)
        free(L->srcs[i]);
    free(L->srcs);
    for (size_t i = 0; i < L->n_dirs; i++)
        free(L->dirs[i]);
    free(L->dirs);
    memset(L, 0, sizeof *L);
}

static int img_list_add(struct img_list *L, char *path, const char *src, uint32_t line)
{
    if (!path) return -ENOMEM;
    int rc = pack_ds_grow((void **)&L->v, &L->cap, L->n + 1, sizeof *L->v);
    if (rc) {
        free(path);
        return rc;
    }
    L->v[L->n++] = (struct img_ent){ .path = path, .src = src, .line = line };
    return 0;
}

static int str_list_add(char ***v, size_t *n, size_t *cap, const char *s)
{
    char *d = strdup(s);
    if (!d) return -ENOMEM;
    int rc = pack_ds_grow((void **)v, cap, *n + 1, sizeof **v);
    if (rc) {
        free(d);
        return rc;
    }
    (*v)[(*n)++] = d;
    return 0;
}

struct walk_frame {
    dev_t dev;
    ino_t ino;
};

/* Collects regular files under dir (recursively, hidden entries skipped, symlinks followed,
 * loops cut) for which keep(name) holds; counts the others in *skipped. */
static int walk(struct pack_ds *ds, const char *dir, bool (*keep)(const char *), char ***out,
                size_t *n, size_t *cap, uint64_t *skipped, struct walk_frame *stack, int depth)
{
    struct stat st;
    if (stat(dir, &st) != 0) return pack_ds_fail(ds, -errno, "%s: %s", dir, strerror(errno));
    for (int i = 0; i < depth; i++)
        if (stack[i].dev == st.st_dev && stack[i].ino == st.st_ino) return 0; /* symlink loop */
    if (depth >= WALK_MAX_DEPTH)
        return pack_ds_fail(ds, -ELOOP, "%s: directories nested deeper than %d", dir,
                            WALK_MAX_DEPTH);
    stack[depth] = (struct walk_frame){ st.st_dev, st.st_ino };
    /* an image walk names what is called like an image but is no file (a label walk's odd
     * entries are named when their image's label is read) */
    const bool images = keep == pack_ds_is_image_name;
    DIR *d = opendir(dir);
    if (!d) return pack_ds_fail(ds, -errno, "%s: %s", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; !rc && (errno = 0, e = readdir(d));) {
        if (e->d_name[0] == '.') continue; /* glob skips hidden names */
        char *p = pack_ds_join(dir, e->d_name);
        if (!p) {
            rc = -ENOMEM;
            break;
        }
        /* d_type saves a stat per file (118k of them for COCO); links and unknown types are
         * resolved with stat, which follows symlinks as glob does. */
        struct stat es;
        bool st_ok = true;
        if (e->d_type == DT_REG)
            es.st_mode = S_IFREG;
        else if (e->d_type == DT_DIR)
            es.st_mode = S_IFDIR;
        else
            st_ok = stat(p, &es) == 0;
        if (!st_ok) { /* dangling symlink: glob lists it, nothing can read it */
            if (skipped) (*skipped)++;
        } else if (S_ISDIR(es.st_mode)) {
            if (images && keep(p))
                rc = pack_ds_warn(ds, PACK_DS_W_NOT_A_FILE, p, 0, -1,
                                  "a directory named like an image: searched for images, not "
                                  "read as one");
            if (!rc) rc = walk(ds, p, keep, out, n, cap, skipped, stack, depth + 1);
        } else if (images && !S_ISREG(es.st_mode) && keep(p)) {
            /* a FIFO would block the reader, a device never end: named, counted, never opened */
            ds->st.images_found++;
            ds->st.images_invalid++;
            rc = pack_ds_warn(ds, PACK_DS_W_NOT_A_FILE, p, 0, -1, "%s, not a file: skipped",
                              S_ISFIFO(es.st_mode)   ? "a FIFO"
                              : S_ISSOCK(es.st_mode) ? "a socket"
                                                     : "a device");
        } else if (S_ISREG(es.st_mode) && keep(p)) {
            rc = pack_ds_grow((void **)out, cap, *n + 1, sizeof **out);
            if (!rc) {
                (*out)[(*n)++] = p;
                p = NULL;
            }
        } else if (skipped) {
            (*skipped)++;
        }
        free(p);
    }
    if (!rc && errno) rc = pack_ds_fail(ds, -errno, "%s: %s", dir, strerror(errno));
    closedir(d);
    return rc;
}

static int add_image_dir(struct pack_ds *ds, struct img_list *L, const char *dir)
{
    struct walk_frame stack[WALK_MAX_DEPTH];
    char **files = NULL;
    size_t n = 0, cap = 0;
    int rc =
        walk(ds, dir, pack_ds_is_image_name, &files, &n, &cap, &ds->st.non_image_files, stack, 0);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = img_list_add(L, files[i], NULL, 0);
        else
            free(files[i]);
    }
    free(files);
    if (!rc) rc = str_list_add(&L->dirs, &L->n_dirs, &L->cap_dirs, dir);
    return rc;
}

/* Python str.splitlines() boundaries, ASCII part, and str.strip() whitespace. */
static bool py_break(unsigned char c)
{
    return c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e);
}

static bool py_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static int add_list_file(struct pack_ds *ds, struct img_list *L, const char *list)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = pack_ds_read_file(list, LIST_MAX_BYTES, &buf, &len);
    if (rc) return pack_ds_fail(ds, rc, "%s: cannot read image list: %s", list, ffr_strerror(rc));
    if (memchr(buf, '\0', len)) {
        free(buf);
        return pack_ds_fail(ds, -PACK_DS_ESYNTAX, "%s: image list has NUL bytes (not text)", list);
    }
    char *parent = dir_of(list);
    rc = parent ? str_list_add(&L->srcs, &L->n_srcs, &L->cap_srcs, list) : -ENOMEM;
    const char *src = rc ? NULL : L->srcs[L->n_srcs - 1];
    /* t.read().strip().splitlines(): each line is used as is (not stripped). */
    size_t b = 0, e = len;
    while (b < e && py_space((unsigned char)buf[b]))
        b++;
    while (e > b && py_space((unsigned char)buf[e - 1]))
        e--;
    uint32_t line = 1;
    for (size_t i = 0; i < b; i++)
        if (buf[i] == '\n' || (buf[i] == '\r' && buf[i + 1] != '\n')) line++;
    for (size_t i = b; !rc && i < e;) {
        size_t j = i;
        while (j < e && !py_break((unsigned char)buf[j]))
            j++;
        char *entry = strndup(buf + i, j - i);
        if (!entry) {
            rc = -ENOMEM;
            break;
        }
        if (entry[0] == '\0') {
            free(entry); /* blank line */
        } else if (!pack_ds_is_image_name(entry)) {
            ds->st.non_image_files++;
            /* the line itself is not quoted: a list that is no list (a yaml's train: naming
             * /etc/shadow) must not have its lines echoed into logs */
            rc = pack_ds_warn(ds, PACK_DS_W_LIST_ENTRY, list, line, -1,
                              "not an image path (its suffix is not one of %s): ignored",
                              "bmp,dng,jpeg,jpg,mpo,png,tif,tiff,webp");
            free(entry);
        } else {
            char *path;
            if (strncmp(entry, "./", 2) == 0)
                path = pack_ds_join(parent, entry + 2);
            else
                path = pack_ds_join(parent, entry);
            free(entry);
            rc = img_list_add(L, path, src, line);
        }
        if (j < e && buf[j] == '\r' && buf[j + 1] == '\n') j++;
        if (j < e && (buf[j] == '\n' || buf[j] == '\r')) line++;
        i = j + 1;
    }
    free(parent);
    free(buf);
    return rc;
}

/* A directory walk, a single image, or a list file. */
static int add_source(struct pack_ds *ds, struct img_list *L, const char *p)
{
    struct stat st;
    if (stat(p, &st) != 0) return pack_ds_fail(ds, -errno, "%s: %s", p, strerror(errno));
    if (S_ISDIR(st.st_mode)) return add_image_dir(ds, L, p);
    if (pack_ds_is_image_name(p)) {
        char *c = strdup(p);
        return img_list_add(L, c, NULL, 0);
    }
    return add_list_file(ds, L, p);
}

static int ent_cmp(const void *pa, const void *pb)
{
    const struct img_ent *a = pa, *b = pb;
    const int c = strcmp(a->path, b->path);
    if (c) return c;
    if (a->src != b->src) return a->src ? (b->src ? strcmp(a->src, b->src) : 1) : -1;
    return a->line < b->line ? -1 : a->line > b->line;
}

static int str_cmp(const void *pa, const void *pb)
{
    return strcmp(*(char *const *)pa, *(char *const *)pb);
}

static bool is_txt(const char *p)
{
    return has_suffix_ci(p, ".txt");
}

/* Label files in the label directories of the walked image directories that no image uses. */
static int find_orphans(struct pack_ds *ds, const struct img_list *L, char **labels, size_t n_lab)
{
    int rc = 0;
    for (size_t d = 0; d < L->n_dirs && !rc; d++) {
        char *probe = pack_ds_join(L->dirs[d], "x.jpg");
        if (!probe) return -ENOMEM;
        char *lab = img2label(probe);
        free(probe);
        if (!lab) return -ENOMEM;
        char *ldir = dir_of(lab);
        free(lab);
        if (!ldir) return -ENOMEM;
        if (strcmp(ldir, L->dirs[d]) == 0 || !is_dir(ldir)) { /* labels beside images: skip */
            free(ldir);
            continue;
        }
        struct walk_frame stack[WALK_MAX_DEPTH];
        char **files = NULL;
        size_t n = 0, cap = 0;
        rc = walk(ds, ldir, is_txt, &files, &n, &cap, NULL, stack, 0);
        if (n > 1) qsort(files, n, sizeof *files, str_cmp);
        for (size_t i = 0; i < n; i++) {
            if (!rc && !bsearch(&files[i], labels, n_lab, sizeof *labels, str_cmp)) {
                ds->st.orphan_labels++;
                rc = pack_ds_warn(ds, PACK_DS_W_ORPHAN_LABEL, files[i], 0, -1,
                                  "label file without an image: ignored");
            }
            free(files[i]);
        }
        free(files);
        free(ldir);
    }
    return rc;
}

/* One image of a batch: what the serial pass decided, then what a worker read. */
enum job_kind { JOB_LABEL, JOB_REPEAT, JOB_MISSING };

struct label_job {
    enum job_kind kind;
    const struct img_ent *e;
    char *label;         /* img2label(e->path) */
    struct pack_lbl lbl; /* the parsed label file (own buffers) */
    int read_rc;         /* pack_ds_read_file result */
    int rc;              /* -ENOMEM from parsing */
};

struct label_pool {
    struct label_job *jobs;
    size_t n;
    atomic_size_t next;
    int64_t nc;
};

static void label_job_run(struct label_job *j, int64_t nc)
{
    char *buf = NULL;
    size_t len = 0;
    pack_lbl_reset(&j->lbl);
    j->read_rc = pack_ds_read_file(j->label, LABEL_MAX_BYTES, &buf, &len);
    if (j->read_rc == 0) {
        j->rc = pack_lbl_parse(&j->lbl, buf, len, nc);
        free(buf);
    }
}

static void *label_worker(void *arg)
{
    struct label_pool *p = arg;
    for (;;) {
        const size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n) break;
        if (p->jobs[i].kind == JOB_LABEL) label_job_run(&p->jobs[i], p->nc);
    }
    return NULL;
}

/* Label files are read and parsed by `threads` threads, a batch at a time; everything that
 * counts, warns or adds a sample happens afterwards on this thread in sorted order, so the result
 * does not depend on the thread count. */
#define LABEL_BATCH 4096

static unsigned label_threads(const struct pack_ds *ds)
{
    if (ds->opts.threads) return ds->opts.threads;
    /* Reading many small files waits on storage more than on the CPU: 8 threads at least
     * (coco-sized tree, cold cache, 2 cores: 12.2 s with 1 thread, 5.2 s with 8, 4.3 s with 16). */
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 8 ? 8 : n > 16 ? 16 : (unsigned)n;
}

static int label_job_finish(struct pack_ds *ds, struct label_job *j)
{
    const struct img_ent *e = j->e;
    ds->st.images_found++;
    if (j->kind == JOB_REPEAT) {
        ds->st.images_invalid++;
        return pack_ds_warn(ds, PACK_DS_W_LIST_ENTRY, e->src ? e->src : e->path, e->line, -1,
                            "%s listed again: ignored", e->path);
    }
    if (j->kind == JOB_MISSING) {
        ds->st.images_missing++;
        return pack_ds_warn(ds, PACK_DS_W_IMAGE_MISSING, e->src, e->line, -1,
                            "image %s does not exist: skipped", e->path);
    }
    struct pack_lbl *lb = &j->lbl;
    const int rr = j->read_rc;
    if (j->rc) return j->rc;
    if (rr == -ENOENT || rr == -ENOTDIR) {
        pack_lbl_reset(lb); /* os.path.isfile() is false: a background */
        ds->st.label_missing++;
    } else if (rr == -EISDIR || rr == -FFR_ENOTREG) {
        pack_lbl_reset(lb); /* the same for ultralytics, but never silently here */
        ds->st.label_missing++;
        const int w =
            pack_ds_warn(ds, PACK_DS_W_NOT_A_FILE, j->label, 0, -1,
                         "label is %s, not a file: %s taken as a background",
                         rr == -EISDIR ? "a directory" : "a FIFO, device or socket", e->path);
        if (w) return w;
    } else if (rr) {
        pack_lbl_reset(lb);
        lb->status = PACK_LBL_CORRUPT;
        snprintf(lb->reason, sizeof lb->reason, "cannot read label file: %s", ffr_strerror(rr));
    } else if (lb->status == PACK_LBL_EMPTY) {
        ds->st.label_empty++;
    }
    int rc = pack_ds_report_lbl(ds, lb, j->label, e->path);
    if (rc || lb->status == PACK_LBL_CORRUPT) return rc;
    char *img = strdup(e->path), *labc = strdup(j->label);
    if (!img || !labc) {
        free(img);
        free(labc);
        return -ENOMEM;
    }
    return pack_ds_add_sample(ds, img, labc, id_from_name(e->path), 0, 0, lb);
}

/* Reads the labels of every image in L (sorted here) and adds the samples. */
static int yolo_process(struct pack_ds *ds, struct img_list *L)
{
    if (L->n > 1) qsort(L->v, L->n, sizeof *L->v, ent_cmp);
    char **labels = calloc(L->n ? L->n : 1, sizeof *labels);
    struct label_job *jobs = calloc(LABEL_BATCH, sizeof *jobs);
    const unsigned nthreads = label_threads(ds);
    pthread_t *tids = calloc(nthreads, sizeof *tids);
    size_t n_lab = 0;
    int rc = labels && jobs && tids ? 0 : -ENOMEM;
    for (size_t b = 0; !rc && b < L->n; b += LABEL_BATCH) {
        const size_t nb = L->n - b < LABEL_BATCH ? L->n - b : LABEL_BATCH;
        for (size_t k = 0; k < nb && !rc; k++) {
            struct label_job *j = &jobs[k];
            const size_t i = b + k;
            j->e = &L->v[i];
            j->rc = 0;
            j->read_rc = 0;
            if (i > 0 && strcmp(j->e->path, L->v[i - 1].path) == 0)
                j->kind = JOB_REPEAT;
            else if (j->e->src && !is_file(j->e->path))
                j->kind = JOB_MISSING;
            else
                j->kind = JOB_LABEL;
            if (j->kind == JOB_LABEL) {
                j->label = img2label(j->e->path);
                if (!j->label)
                    rc = -ENOMEM;
                else
                    labels[n_lab++] = j->label; /* owned by labels[] */
            }
        }
        if (rc) break;
        struct label_pool pool = { .jobs = jobs, .n = nb, .nc = ds->nc };
        atomic_init(&pool.next, 0);
        unsigned started = 0;
        if (nthreads > 1 && nb > 64)
            for (; started < nthreads; started++)
                if (pthread_create(&tids[started], NULL, label_worker, &pool) != 0) break;
        label_worker(&pool); /* this thread works too, and alone when no thread started */
        for (unsigned t = 0; t < started; t++)
            pthread_join(tids[t], NULL);
        for (size_t k = 0; k < nb && !rc; k++)
            rc = label_job_finish(ds, &jobs[k]);
    }
    if (!rc) {
        if (n_lab > 1) qsort(labels, n_lab, sizeof *labels, str_cmp);
        rc = find_orphans(ds, L, labels, n_lab);
    }
    for (size_t k = 0; jobs && k < LABEL_BATCH; k++)
        pack_lbl_free(&jobs[k].lbl);
    for (size_t i = 0; labels && i < n_lab; i++)
        free(labels[i]);
    free(labels);
    free(jobs);
    free(tids);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Layouts
 * ------------------------------------------------------------------------------------------- */

static int set_info(struct pack_ds *ds, enum pack_ds_format f, const char *root, const char *split,
                    const char *source)
{
    free(ds->root);
    free(ds->split);
    free(ds->source);
    ds->root = strdup(root);
    ds->split = strdup(split ? split : "");
    ds->source = strdup(source);
    if (!ds->root || !ds->split || !ds->source) return -ENOMEM;
    ds->info.format = f;
    ds->info.root = ds->root;
    ds->info.split = ds->split;
    ds->info.source = ds->source;
    return 0;
}

/* Subdirectory names of dir (non-hidden), or files matching prefix/suffix; sorted. */
static int list_names(const char *dir, bool want_dirs, const char *prefix, const char *suffix,
                      char ***out, size_t *n)
{
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return -errno;
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *p = pack_ds_join(dir, e->d_name);
        if (!p) {
            rc = -ENOMEM;
            break;
        }
        const bool dirp = is_dir(p);
        free(p);
        if (want_dirs != dirp) continue;
        if (prefix && strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        if (suffix && !has_suffix_ci(e->d_name, suffix)) continue;
        if (suffix && strlen(e->d_name) <= strlen(prefix) + strlen(suffix)) continue;
        rc = str_list_add(out, n, &cap, e->d_name);
    }
    closedir(d);
    if (!rc && *n > 1) qsort(*out, *n, sizeof **out, str_cmp);
    return rc;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void join_names(char *dst, size_t cap, char **v, size_t n)
{
    size_t k = 0;
    dst[0] = '\0';
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        k += (size_t)snprintf(dst + k, cap - k, "%s%s", i ? ", " : "", v[i]);
}

static int finish_yolo(struct pack_ds *ds, struct img_list *L)
{
    int rc = yolo_process(ds, L);
    if (rc) return rc;
    if (!ds->names) {
        /* No names anywhere: "0".."K-1" so that every class returned has a name. */
        const size_t k = (size_t)(ds->max_cls + 1);
        char **v = calloc(k ? k : 1, sizeof *v);
        if (!v) return -ENOMEM;
        for (size_t i = 0; i < k; i++) {
            if (asprintf(&v[i], "%zu", i) < 0) {
                free_names(v, i);
                return -ENOMEM;
            }
        }
        ds->names = v;
        ds->n_names = k;
        ds->info.names_source = k ? PACK_DS_NAMES_GENERATED : PACK_DS_NAMES_NONE;
    }
    return 0;
}

static int scan_yolo_root(struct pack_ds *ds, const char *root)
{
    char *images = pack_ds_join(root, "images");
    char **splits = NULL;
    size_t n_splits = 0;
    struct img_list L = { 0 };
    char *src = NULL;
    const char *split = ds->opts.split;
    int rc = images ? 0 : -ENOMEM;
    if (rc) goto out;
    if (!is_dir(images)) { /* format=yolo on a plain image directory */
        rc = set_info(ds, PACK_DS_FORMAT_YOLO, root, "", root);
        if (!rc) rc = add_image_dir(ds, &L, root);
        if (!rc) rc = finish_yolo(ds, &L);
        goto out;
    }
    if (!split) {
        rc = list_names(images, true, NULL, NULL, &splits, &n_splits);
        if (rc) {
            rc = pack_ds_fail(ds, rc, "%s: %s", images, strerror(-rc));
            goto out;
        }
        if (n_splits > 1) {
            char list[512];
            join_names(list, sizeof list, splits, n_splits);
            rc = pack_ds_fail(ds, -PACK_DS_ELAYOUT,
                              "%s: several splits (%s): choose one with the split option", images,
                              list);
            goto out;
        }
        split = n_splits ? splits[0] : "";
    }
    src = pack_ds_join(images, split);
    if (!src) {
        rc = -ENOMEM;
        goto out;
    }
    if (!is_dir(src)) {
        /* ultralytics' COCO download lists its splits in ROOT/<split>.txt */
        char *txt = NULL;
        if (asprintf(&txt, "%s/%s.txt", root, split) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        if (split[0] && is_file(txt)) {
            free(src);
            src = txt;
        } else {
            free(txt);
            rc = pack_ds_fail(ds, -PACK_DS_ELAYOUT, "%s: no such split directory", src);
            goto out;
        }
    }
    rc = set_info(ds, PACK_DS_FORMAT_YOLO, root, split, src);
    if (!rc) rc = add_source(ds, &L, src);
    if (!rc) rc = finish_yolo(ds, &L);
out:
    free(src);
    free(images);
    free_names(splits, n_splits);
    img_list_free(&L);
    return rc;
}

/* COCO: the JSON at json, images from image_dir (detected when NULL). */
static int scan_coco(struct pack_ds *ds, const char *root, const char *split, const char *json)
{
    char *imgdir = NULL;
    struct pack_coco *c = NULL;
    int rc;
    if (ds->opts.image_dir) {
        imgdir = strdup(ds->opts.image_dir);
    } else {
        char *a = split[0] ? pack_ds_join(root, split) : pack_ds_join(root, "images");
        char *b = NULL;
        if (split[0] && asprintf(&b, "%s/images/%s", root, split) < 0) b = NULL;
        if (!split[0]) b = strdup(root);
        if (a && is_dir(a)) {
            imgdir = a;
            a = NULL;
        } else if (b && is_dir(b)) {
            imgdir = b;
            b = NULL;
        } else if (a && b) {
            rc = pack_ds_fail(ds, -PACK_DS_ELAYOUT,
                              "%s: no image directory for it: tried %s/ and %s/", json, a, b);
            free(a);
            free(b);
            return rc;
        }
        free(a);
        free(b);
    }
    if (!imgdir) return -ENOMEM;
    rc = set_info(ds, PACK_DS_FORMAT_COCO, root, split, json);
    if (!rc) rc = pack_coco_create(&c, ds, json);
    if (!rc) rc = pack_coco_parse_file(c);
    if (!rc) rc = pack_coco_emit(c, imgdir);
    pack_coco_destroy(c);
    free(imgdir);
    return rc;
}

static int scan_coco_root(struct pack_ds *ds, const char *root)
{
    char *ann = pack_ds_join(root, "annotations");
    char **files = NULL;
    size_t n = 0;
    char *json = NULL, *split = NULL;
    int rc = ann ? 0 : -ENOMEM;
    if (rc) goto out;
    if (ds->opts.split) {
        split = strdup(ds->opts.split);
    } else {
        rc = list_names(ann, false, "instances_", ".json", &files, &n);
        if (rc) {
            rc = pack_ds_fail(ds, rc, "%s: %s", ann, strerror(-rc));
            goto out;
        }
        if (n != 1) {
            char list[512];
            join_names(list, sizeof list, files, n);
            rc = pack_ds_fail(ds, n ? -PACK_DS_ELAYOUT : -ENOENT,
                              n ? "%s: several annotation files (%s): choose a split"
                                : "%s: no instances_<split>.json%s",
                              ann, list);
            goto out;
        }
        split = strndup(files[0] + 10, strlen(files[0]) - 15);
    }
    if (!split || asprintf(&json, "%s/instances_%s.json", ann, split) < 0) {
        json = NULL;
        rc = -ENOMEM;
        goto out;
    }
    if (!is_file(json)) {
        rc = pack_ds_fail(ds, -ENOENT, "%s: no such annotation file", json);
        goto out;
    }
    rc = scan_coco(ds, root, split, json);
out:
    free(ann);
    free(json);
    free(split);
    free_names(files, n);
    return rc;
}

/* A JSON file named directly: ROOT is above annotations/, split from instances_<split>.json. */
static int scan_coco_file(struct pack_ds *ds, const char *json)
{
    char *dir = dir_of(json);
    char *root = NULL, *split = NULL;
    int rc = dir ? 0 : -ENOMEM;
    if (rc) goto out;
    root = strcmp(base_of(dir), "annotations") == 0 ? dir_of(dir) : strdup(dir);
    const char *b = base_of(json);
    if (ds->opts.split)
        split = strdup(ds->opts.split);
    else if (strncmp(b, "instances_", 10) == 0 && has_suffix_ci(b, ".json") && strlen(b) > 15)
        split = strndup(b + 10, strlen(b) - 15);
    else
        split = strdup("");
    if (!root || !split) {
        rc = -ENOMEM;
        goto out;
    }
    rc = scan_coco(ds, root, split, json);
out:
    free(dir);
    free(root);
    free(split);
    return rc;
}

/*
 * The dataset root a yaml's relative `path:` names: the first existing directory of base/path
 * (beside the yaml), base/../path (ultralytics' rule: its yamls live in ROOT/data/ and path is
 * relative to ROOT, so `../datasets/coco128` is beside the checkout) and path (the working
 * directory); base/path when none exists, for the error to name.
 */
static char *yaml_root(const char *base, const char *path)
{
    if (path[0] == '/') return strdup(path);
    char *up = pack_ds_join(base, "..");
    char *c[3] = { pack_ds_join(base, path), up ? pack_ds_join(up, path) : NULL, strdup(path) };
    free(up);
    int pick = 0;
    for (int i = 0; i < 3; i++)
        if (c[i] && is_dir(c[i])) {
            pick = i;
            break;
        }
    char *r = c[pick];
    for (int i = 0; i < 3; i++)
        if (i != pick) free(c[i]);
    return r;
}

static int scan_yaml(struct pack_ds *ds, const char *yaml_path)
{
    struct pack_dsyaml y = { 0 };
    struct img_list L = { 0 };
    char *buf = NULL, *base = NULL, *root = NULL;
    size_t len = 0;
    int rc = pack_ds_read_file(yaml_path, YAML_MAX_BYTES, &buf, &len);
    if (rc) return pack_ds_fail(ds, rc, "%s: %s", yaml_path, ffr_strerror(rc));
    rc = pack_dsyaml_parse(buf, len, yaml_path, &y, ds->err, ds->err_cap);
    free(buf);
    if (rc) goto out;
    const char *split = ds->opts.split ? ds->opts.split : "train";
    const int si = pack_dsyaml_split_index(split);
    if (si < 0) {
        rc =
            pack_ds_fail(ds, -EINVAL, "%s: split '%s' is not train, val or test", yaml_path, split);
        goto out;
    }
    if (!y.n_split[si]) {
        rc = pack_ds_fail(ds, -PACK_DS_ELAYOUT, "%s: no '%s' entry", yaml_path, split);
        goto out;
    }
    base = dir_of(yaml_path);
    root = base && y.path ? yaml_root(base, y.path) : (base ? strdup(base) : NULL);
    if (!root) {
        rc = -ENOMEM;
        goto out;
    }
    rc = set_info(ds, PACK_DS_FORMAT_YOLO, root, split, yaml_path);
    for (size_t i = 0; !rc && i < y.n_split[si]; i++) {
        const char *e = y.split[si][i];
        char *p = pack_ds_join(root, e);
        if (p && access(p, F_OK) != 0 && strncmp(e, "../", 3) == 0) {
            free(p);
            p = pack_ds_join(root, e + 3);
        }
        if (!p) {
            rc = -ENOMEM;
            break;
        }
        rc = add_source(ds, &L, p);
        free(p);
    }
    if (rc) goto out;
    if (y.names && !ds->names) {
        rc = pack_ds_set_names(ds, (const char *const *)y.names, y.n_names);
        if (rc) goto out;
        ds->nc = (int64_t)y.n_names;
        ds->info.names_source = PACK_DS_NAMES_YAML;
    } else if (!ds->names && y.nc >= 0) {
        char **v = calloc(y.nc ? (size_t)y.nc : 1, sizeof *v);
        if (!v) {
            rc = -ENOMEM;
            goto out;
        }
        for (int64_t i = 0; i < y.nc; i++) {
            if (asprintf(&v[i], "class_%lld", (long long)i) < 0) {
                free_names(v, (size_t)i);
                rc = -ENOMEM;
                goto out;
            }
        }
        ds->names = v;
        ds->n_names = (size_t)y.nc;
        ds->nc = y.nc;
        ds->info.names_source = PACK_DS_NAMES_YAML;
    }
    rc = finish_yolo(ds, &L);
out:
    pack_dsyaml_free(&y);
    img_list_free(&L);
    free(base);
    free(root);
    return rc;
}

/* Names override from a file: a yaml with names:, or one name a line. */
static int load_names_file(struct pack_ds *ds, const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = pack_ds_read_file(path, YAML_MAX_BYTES, &buf, &len);
    if (rc) return pack_ds_fail(ds, rc, "%s: %s", path, ffr_strerror(rc));
    if (has_suffix_ci(path, ".yaml") || has_suffix_ci(path, ".yml")) {
        struct pack_dsyaml y = { 0 };
        rc = pack_dsyaml_parse(buf, len, path, &y, ds->err, ds->err_cap);
        if (!rc && !y.names) rc = pack_ds_fail(ds, -PACK_DS_ESCHEMA, "%s: no names", path);
        if (!rc) rc = pack_ds_set_names(ds, (const char *const *)y.names, y.n_names);
        pack_dsyaml_free(&y);
    } else {
        char **v = NULL;
        size_t n = 0, cap = 0;
        for (char *save = NULL, *t = strtok_r(buf, "\r\n", &save); t && !rc;
             t = strtok_r(NULL, "\r\n", &save)) {
            size_t l = strlen(t);
            while (l && py_space((unsigned char)t[l - 1]))
                t[--l] = '\0';
            while (*t && py_space((unsigned char)*t))
                t++;
            if (*t) rc = str_list_add(&v, &n, &cap, t);
        }
        if (!rc) rc = pack_ds_set_names(ds, (const char *const *)v, n);
        free_names(v, n);
    }
    free(buf);
    return rc;
}

int pack_ds_scan(const char *path, const struct pack_ds_opts *opts, struct pack_ds **out, char *err,
                 size_t err_cap)
{
    if (out) *out = NULL;
    if (!path || !out || !path[0]) return -EINVAL;
    if (opts && (opts->format < PACK_DS_FORMAT_AUTO || opts->format > PACK_DS_FORMAT_COCO))
        return -EINVAL;
    if (opts && opts->n_names && !opts->names) return -EINVAL;
    struct pack_ds *ds = pack_ds_new(opts, err, err_cap);
    if (!ds) return -ENOMEM;
    int rc = 0;
    if (ds->opts.names) {
        rc = pack_ds_set_names(ds, ds->opts.names, ds->opts.n_names);
    } else if (ds->opts.names_path) {
        rc = load_names_file(ds, ds->opts.names_path);
    }
    if (rc) goto out;
    if (ds->names) {
        ds->nc = (int64_t)ds->n_names;
        ds->info.names_source = PACK_DS_NAMES_OVERRIDE;
    }

    struct stat st;
    if (stat(path, &st) != 0) {
        rc = pack_ds_fail(ds, -errno, "%s: %s", path, strerror(errno));
        goto out;
    }
    const enum pack_ds_format fmt = ds->opts.format;
    if (S_ISREG(st.st_mode)) {
        if (has_suffix_ci(path, ".yaml") || has_suffix_ci(path, ".yml")) {
            rc = fmt == PACK_DS_FORMAT_COCO
                     ? pack_ds_fail(ds, -EINVAL, "%s: a dataset yaml is a YOLO layout", path)
                     : scan_yaml(ds, path);
        } else if (has_suffix_ci(path, ".json")) {
            rc = fmt == PACK_DS_FORMAT_YOLO
                     ? pack_ds_fail(ds, -EINVAL, "%s: a JSON file is a COCO layout", path)
                     : scan_coco_file(ds, path);
        } else {
            struct img_list L = { 0 };
            char *dir = dir_of(path);
            rc = dir ? set_info(ds, PACK_DS_FORMAT_YOLO, dir, "", path) : -ENOMEM;
            if (!rc) rc = add_source(ds, &L, path);
            if (!rc) rc = finish_yolo(ds, &L);
            img_list_free(&L);
            free(dir);
        }
    } else if (S_ISDIR(st.st_mode)) {
        char *im = pack_ds_join(path, "images"), *lb = pack_ds_join(path, "labels");
        char *an = pack_ds_join(path, "annotations");
        if (!im || !lb || !an) {
            rc = -ENOMEM;
        } else {
            const bool yolo = is_dir(im) && is_dir(lb);
            const bool coco = is_dir(an);
            if (fmt == PACK_DS_FORMAT_COCO || (fmt == PACK_DS_FORMAT_AUTO && !yolo && coco)) {
                rc = coco ? scan_coco_root(ds, path)
                          : pack_ds_fail(ds, -PACK_DS_ELAYOUT, "%s: no annotations/ directory",
                                         path);
            } else {
                rc = scan_yolo_root(ds, path);
            }
        }
        free(im);
        free(lb);
        free(an);
    } else {
        rc = pack_ds_fail(ds, -EINVAL, "%s: not a file or directory", path);
    }
    if (rc) goto out;
    if (ds->st.images_found == 0) {
        rc = pack_ds_fail(ds, -PACK_DS_ENOIMAGES, "%s: no images found", path);
        goto out;
    }
    rc = pack_ds_finish(ds);
out:
    if (rc) {
        if (rc == -ENOMEM) pack_ds_fail(ds, rc, "%s: out of memory", path);
        pack_ds_destroy(ds);
        return rc;
    }
    ds->err = NULL;
    ds->err_cap = 0;
    *out = ds;
    return 0;
}
