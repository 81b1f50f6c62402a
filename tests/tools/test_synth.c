/*
 * yolo-synth: spawn the built generator (argv[1]) into a temporary folder and check what it
 * wrote: determinism, counts, YOLO rows against COCO boxes, boxes against the decoded pixels
 * (shapes are saturated, backgrounds nearly grey), and every --broken kind being broken as
 * advertised.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw's FTW_DEPTH; meson defines it too */
#endif
#include "tap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#define SAT_SHAPE 80 /* max-min channel spread that only shapes reach */
#define MAX_ROWS  64
#define MAX_FILES 4096

static const char *exe;
static char tmp_root[256];

/* ---- small helpers ------------------------------------------------------------------------- */

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0; /* text files can be used as strings */
    *len = n;
    return buf;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Run exe with args (NULL-terminated); stdout and stderr go to log. Returns the exit status. */
static int run(const char *log, const char *const *args)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = exe;
    while (args[n - 1] && n < 31) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        const int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Sorted relative paths of the regular files under root. */
static char *files[MAX_FILES];
static int n_files;
static size_t root_len;

static int list_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_F && n_files < MAX_FILES) files[n_files++] = strdup(path + root_len);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_tree(const char *root, char ***out)
{
    n_files = 0;
    root_len = strlen(root);
    nftw(root, list_entry, 16, FTW_PHYS);
    qsort(files, (size_t)n_files, sizeof(char *), cmp_str);
    *out = malloc(sizeof(char *) * (size_t)(n_files + 1));
    memcpy(*out, files, sizeof(char *) * (size_t)n_files);
    return n_files;
}

static void free_list(char **l, int n)
{
    for (int i = 0; i < n; i++)
        free(l[i]);
    free(l);
}

/* Compare two trees: same file names and bytes. Returns the number of differing files, or -1
 * when the name lists differ. */
static int tree_diff(const char *a, const char *b, int *n_out)
{
    char **la, **lb;
    const int na = list_tree(a, &la), nb = list_tree(b, &lb);
    int diff = 0;
    *n_out = na;
    if (na != nb) {
        diff = -1;
    } else {
        for (int i = 0; i < na; i++) {
            if (strcmp(la[i], lb[i])) {
                diff = -1;
                break;
            }
            char pa[512], pb[512];
            size_t sa, sb;
            snprintf(pa, sizeof(pa), "%s%s", a, la[i]);
            snprintf(pb, sizeof(pb), "%s%s", b, lb[i]);
            unsigned char *da = read_all(pa, &sa), *db = read_all(pb, &sb);
            if (!da || !db || sa != sb || memcmp(da, db, sa)) diff++;
            free(da);
            free(db);
        }
    }
    free_list(la, na);
    free_list(lb, nb);
    return diff;
}

/* ---- labels -------------------------------------------------------------------------------- */

struct row {
    int cls;
    double v[4]; /* cx cy w h */
};

/* Parse a clean YOLO label file; returns the row count, or -1 if any row is malformed. */
static int read_labels(const char *path, struct row *rows, int cap)
{
    size_t len;
    char *text = (char *)read_all(path, &len);
    if (!text) return -1;
    int n = 0, bad = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct row r;
        char extra;
        if (n >= cap || sscanf(line, "%d %lf %lf %lf %lf %c", &r.cls, &r.v[0], &r.v[1], &r.v[2],
                               &r.v[3], &extra) != 5) {
            bad = 1;
            break;
        }
        rows[n++] = r;
    }
    free(text);
    return bad ? -1 : n;
}

/* COCO's 91-id numbers of the first classes (ultralytics' coco80_to_coco91_class). */
static int coco91_to_80(int id)
{
    static const int ids[] = { 1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 13, 14, 15, 16, 17,
                               18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36 };
    for (int i = 0; i < (int)(sizeof(ids) / sizeof(ids[0])); i++)
        if (ids[i] == id) return i;
    return -1;
}

/* ---- pixels -------------------------------------------------------------------------------- */

struct pix_stats {
    long objects, inside_fail, band_fail, sides, sides_hit, stray_images;
    double min_inside;
    /* Per class: sum of shape-pixel colours over objects that touch no other box. */
    double class_sum[16][3];
    long class_n[16];
};

static int sat_at(const uint8_t *rgb, int w, int x, int y)
{
    const uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
    int mx = p[0], mn = p[0];
    for (int c = 1; c < 3; c++) {
        if (p[c] > mx) mx = p[c];
        if (p[c] < mn) mn = p[c];
    }
    return mx - mn;
}

struct pbox {
    int x0, y0, x1, y1; /* pixels, exclusive ends */
    int cls;
};

static void to_pixels(const struct row *r, int w, int h, struct pbox *b)
{
    b->x0 = (int)lround((r->v[0] - r->v[2] / 2) * w);
    b->x1 = (int)lround((r->v[0] + r->v[2] / 2) * w);
    b->y0 = (int)lround((r->v[1] - r->v[3] / 2) * h);
    b->y1 = (int)lround((r->v[1] + r->v[3] / 2) * h);
    b->cls = r->cls;
}

static int in_any_box(const struct pbox *b, int n, int x, int y, int margin)
{
    for (int i = 0; i < n; i++)
        if (x >= b[i].x0 - margin && x < b[i].x1 + margin && y >= b[i].y0 - margin &&
            y < b[i].y1 + margin)
            return 1;
    return 0;
}

/* Check the boxes of one displayed image against its pixels and accumulate into st. Per-object
 * colour means go to *means (rgb, -1 when the object overlaps another box). */
static void check_pixels(const uint8_t *rgb, int w, int h, const struct row *rows, int n,
                         struct pix_stats *st, double (*means)[4])
{
    struct pbox b[MAX_ROWS];
    for (int i = 0; i < n; i++)
        to_pixels(&rows[i], w, h, &b[i]);

    /* Nothing saturated outside the labelled boxes: no shape is drawn without a label. */
    long stray = 0, outside = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (!in_any_box(b, n, x, y, 1)) {
                outside++;
                stray += sat_at(rgb, w, x, y) > SAT_SHAPE;
            }
    if (stray > outside / 1000 + 2) {
        st->stray_images++;
        tap_diag("%ld saturated pixels outside all %d boxes", stray, n);
    }

    for (int i = 0; i < n; i++) {
        const struct pbox *bb = &b[i];
        const long area = (long)(bb->x1 - bb->x0) * (bb->y1 - bb->y0);
        long hit = 0;
        double sum[3] = { 0, 0, 0 };
        for (int y = bb->y0; y < bb->y1; y++)
            for (int x = bb->x0; x < bb->x1; x++)
                if (sat_at(rgb, w, x, y) > SAT_SHAPE) {
                    const uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
                    hit++;
                    for (int c = 0; c < 3; c++)
                        sum[c] += p[c];
                }
        st->objects++;
        const double frac = area ? (double)hit / (double)area : 0;
        /* Tiny boxes lose their chroma to 4:2:0 subsampling; judge boxes of 8 px and up. */
        if (bb->x1 - bb->x0 >= 8 && bb->y1 - bb->y0 >= 8) {
            if (frac < st->min_inside) st->min_inside = frac;
            if (frac < 0.2) {
                st->inside_fail++;
                tap_diag("box %d,%d-%d,%d class %d: only %.3f of it is shape-coloured", bb->x0,
                         bb->y0, bb->x1, bb->y1, bb->cls, frac);
            }
        }

        /* A band 2..5 px outside the box, away from other boxes, must be background (the
         * adjacent pixel may carry chroma bleeding from 4:2:0 subsampling). */
        long band = 0, band_hit = 0;
        for (int y = bb->y0 - 5; y < bb->y1 + 5; y++)
            for (int x = bb->x0 - 5; x < bb->x1 + 5; x++) {
                if (x < 0 || y < 0 || x >= w || y >= h) continue;
                if (x >= bb->x0 - 1 && x < bb->x1 + 1 && y >= bb->y0 - 1 && y < bb->y1 + 1)
                    continue;
                int other = 0;
                for (int j = 0; j < n && !other; j++)
                    if (j != i && x >= b[j].x0 - 1 && x < b[j].x1 + 1 && y >= b[j].y0 - 1 &&
                        y < b[j].y1 + 1)
                        other = 1;
                if (other) continue;
                band++;
                band_hit += sat_at(rgb, w, x, y) > SAT_SHAPE;
            }
        if (band_hit > band / 100) {
            st->band_fail++;
            tap_diag("box %d,%d-%d,%d class %d: %ld of %ld pixels just outside are shape-coloured",
                     bb->x0, bb->y0, bb->x1, bb->y1, bb->cls, band_hit, band);
        }

        /* Tight: each side's 2-px strip inside the box touches the shape (unless covered). */
        const int x0 = bb->x0, x1 = bb->x1, y0 = bb->y0, y1 = bb->y1;
        for (int side = 0; side < 4; side++) {
            int found = 0;
            for (int t = 0; t < 2 && !found; t++) {
                if (side < 2) {
                    const int x = side == 0 ? x0 + t : x1 - 1 - t;
                    for (int y = y0; y < y1 && !found; y++)
                        found = x >= 0 && x < w && y >= 0 && y < h && sat_at(rgb, w, x, y) > 60;
                } else {
                    const int y = side == 2 ? y0 + t : y1 - 1 - t;
                    for (int x = x0; x < x1 && !found; x++)
                        found = x >= 0 && x < w && y >= 0 && y < h && sat_at(rgb, w, x, y) > 60;
                }
            }
            st->sides++;
            st->sides_hit += found;
        }

        int alone = 1;
        for (int j = 0; j < n; j++)
            if (j != i && b[j].x0 < x1 + 2 && b[j].x1 > x0 - 2 && b[j].y0 < y1 + 2 &&
                b[j].y1 > y0 - 2)
                alone = 0;
        if (means) {
            means[i][3] = alone && hit >= 20 ? 1 : -1;
            for (int c = 0; c < 3; c++)
                means[i][c] = hit ? sum[c] / (double)hit : 0;
        }
        if (alone && hit >= 20 && bb->cls >= 0 && bb->cls < 16) {
            for (int c = 0; c < 3; c++)
                st->class_sum[bb->cls][c] += sum[c] / (double)hit;
            st->class_n[bb->cls]++;
        }
    }
}

/* Objects (apart from other boxes) whose mean shape colour is nearer another class's mean in
 * ref than their own class's: labels whose class does not match what is drawn. */
static int colour_mismatches(const uint8_t *rgb, int w, int h, const struct row *rows, int n,
                             const struct pix_stats *ref)
{
    double means[MAX_ROWS][4];
    struct pix_stats tmp;
    int bad = 0;
    memset(&tmp, 0, sizeof(tmp));
    check_pixels(rgb, w, h, rows, n, &tmp, means);
    for (int i = 0; i < n; i++) {
        if (means[i][3] < 0) continue;
        int best = -1;
        double bd = 1e18;
        for (int k = 0; k < 16; k++) {
            if (!ref->class_n[k]) continue;
            double dd = 0;
            for (int ch = 0; ch < 3; ch++)
                dd += fabs(means[i][ch] - ref->class_sum[k][ch] / (double)ref->class_n[k]);
            if (dd < bd) {
                bd = dd;
                best = k;
            }
        }
        if (best != rows[i].cls) bad++;
    }
    return bad;
}

static uint8_t *decode_rgb(const char *path, int *w, int *h)
{
    size_t len;
    unsigned char *jpg = read_all(path, &len);
    if (!jpg) return NULL;
    tjhandle tj = tjInitDecompress();
    int ss, cs;
    uint8_t *rgb = NULL;
    if (tj && !tjDecompressHeader3(tj, jpg, (unsigned long)len, w, h, &ss, &cs)) {
        rgb = malloc((size_t)*w * (size_t)*h * 3);
        if (rgb && tjDecompress2(tj, jpg, (unsigned long)len, rgb, *w, 0, *h, TJPF_RGB,
                                 TJFLAG_ACCURATEDCT)) {
            free(rgb);
            rgb = NULL;
        }
    }
    if (tj) tjDestroy(tj);
    free(jpg);
    return rgb;
}

/* ---- JPEG markers -------------------------------------------------------------------------- */

struct jpeg_info {
    int sof;         /* SOFn marker byte (0xc0 baseline, 0xc2 progressive), 0 if none */
    int orientation; /* EXIF Orientation, 0 if absent */
    int exif_big_endian;
};

static unsigned rd16(const unsigned char *p, int be)
{
    return be ? (unsigned)(p[0] << 8 | p[1]) : (unsigned)(p[1] << 8 | p[0]);
}

static unsigned long rd32(const unsigned char *p, int be)
{
    return be ? (unsigned long)rd16(p, 1) << 16 | rd16(p + 2, 1)
              : (unsigned long)rd16(p + 2, 0) << 16 | rd16(p, 0);
}

/* Walk the marker segments up to SOS, reading the SOF type and EXIF orientation. */
static void jpeg_markers(const unsigned char *d, size_t n, struct jpeg_info *ji)
{
    memset(ji, 0, sizeof(*ji));
    size_t i = 2;
    while (i + 4 <= n && d[i] == 0xff) {
        const int m = d[i + 1];
        const size_t len = (size_t)d[i + 2] << 8 | d[i + 3];
        if (m == 0xda || len < 2 || i + 2 + len > n) break;
        const unsigned char *seg = d + i + 4;
        const size_t sl = len - 2;
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) ji->sof = m;
        if (m == 0xe1 && sl >= 14 && !memcmp(seg, "Exif\0\0", 6)) {
            const unsigned char *t = seg + 6;
            const size_t tl = sl - 6;
            const int be = t[0] == 'M';
            const unsigned long ifd = rd32(t + 4, be);
            if (ifd + 2 <= tl) {
                const unsigned cnt = rd16(t + ifd, be);
                for (unsigned e = 0; e < cnt && ifd + 2 + 12 * (e + 1) <= tl; e++) {
                    const unsigned char *ent = t + ifd + 2 + 12 * e;
                    if (rd16(ent, be) == 0x0112 && rd16(ent + 2, be) == 3) {
                        ji->orientation = (int)rd16(ent + 8, be);
                        ji->exif_big_endian = be;
                    }
                }
            }
        }
        i += 2 + len;
    }
}

/* The displayed image for EXIF orientation o (1, 3, 6, 8) from the stored one, per the EXIF
 * definition: for 6 the stored row 0 is the visual right edge and column 0 the top; for 8 row 0
 * is the left edge and column 0 the bottom; 3 is a half turn. */
static uint8_t *apply_orientation(const uint8_t *s, int sw, int sh, int o, int *dw, int *dh)
{
    *dw = o == 6 || o == 8 ? sh : sw;
    *dh = o == 6 || o == 8 ? sw : sh;
    uint8_t *d = malloc((size_t)sw * (size_t)sh * 3);
    for (int y = 0; y < *dh; y++)
        for (int x = 0; x < *dw; x++) {
            int r = y, c = x;
            if (o == 3) {
                r = sh - 1 - y;
                c = sw - 1 - x;
            } else if (o == 6) {
                r = *dw - 1 - x;
                c = y;
            } else if (o == 8) {
                r = x;
                c = *dh - 1 - y;
            }
            memcpy(d + ((size_t)y * (size_t)*dw + (size_t)x) * 3,
                   s + ((size_t)r * (size_t)sw + (size_t)c) * 3, 3);
        }
    return d;
}

/* ---- the dataset checks -------------------------------------------------------------------- */

static cJSON *load_json(const char *path)
{
    size_t len;
    char *t = (char *)read_all(path, &len);
    if (!t) return NULL;
    cJSON *j = cJSON_ParseWithLength(t, len);
    free(t);
    return j;
}

/* Polygon extent [lo, hi] against box start x and size n (pixels), on one axis. */
static int poly_fits(double lo, double hi, double x, double n)
{
    return lo <= x + 0.5 + 1e-6 && hi >= x + n - 0.5 - 1e-6 && lo >= x - 3 && hi <= x + n + 3;
}

static int is_numeric_name(const char *name)
{
    for (int i = 0; i < 12; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return !strcmp(name + 12, ".jpg");
}

/* Checks YOLO rows against COCO annotations and pixels for every numeric image of a split.
 * Returns the number of images checked. */
static int check_split(const char *root, const char *split, int classes, struct pix_stats *ps,
                       long *n_backgrounds, long *n_crowd, long *mismatches, long *range_bad,
                       long *seg_bad)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/annotations/instances_%s.json", root, split);
    cJSON *j = load_json(path);
    if (!ok(j != NULL, "%s parses", path)) return 0;
    const cJSON *images = cJSON_GetObjectItem(j, "images");
    const cJSON *anns = cJSON_GetObjectItem(j, "annotations");
    const cJSON *cats = cJSON_GetObjectItem(j, "categories");
    is_int(cJSON_GetArraySize(cats), classes, "%s: %d categories", split, classes);
    int cats_ok = 1;
    for (int k = 0; k < cJSON_GetArraySize(cats); k++) {
        const cJSON *c = cJSON_GetArrayItem(cats, k);
        const cJSON *id = cJSON_GetObjectItem(c, "id");
        if (!cJSON_IsNumber(id) || coco91_to_80(id->valueint) != k) cats_ok = 0;
    }
    ok(cats_ok, "%s: category ids use COCO's 91-id numbering in class order", split);

    int checked = 0;
    const cJSON *img;
    cJSON_ArrayForEach(img, images)
    {
        const char *fname = cJSON_GetStringValue(cJSON_GetObjectItem(img, "file_name"));
        const int id = cJSON_GetObjectItem(img, "id")->valueint;
        const int w = cJSON_GetObjectItem(img, "width")->valueint;
        const int h = cJSON_GetObjectItem(img, "height")->valueint;
        if (!fname || !is_numeric_name(fname)) continue;
        if (atoi(fname) != id) (*mismatches)++;
        struct row rows[MAX_ROWS];
        char stem[13];
        memcpy(stem, fname, 12);
        stem[12] = 0;
        snprintf(path, sizeof(path), "%s/labels/%s/%s.txt", root, split, stem);
        const int n = read_labels(path, rows, MAX_ROWS);
        if (n < 0) {
            (*mismatches)++;
            tap_diag("%s: unreadable or malformed", path);
            continue;
        }
        if (n == 0) (*n_backgrounds)++;
        for (int i = 0; i < n; i++) {
            const struct row *r = &rows[i];
            int bad = r->cls < 0 || r->cls >= classes;
            for (int k = 0; k < 4; k++)
                bad |= !(r->v[k] >= 0 && r->v[k] <= 1);
            bad |= r->v[2] <= 0 || r->v[3] <= 0;
            bad |= r->v[0] - r->v[2] / 2 < -1e-6 || r->v[0] + r->v[2] / 2 > 1 + 1e-6;
            bad |= r->v[1] - r->v[3] / 2 < -1e-6 || r->v[1] + r->v[3] / 2 > 1 + 1e-6;
            if (bad) (*range_bad)++;
        }

        /* The non-crowd annotations of this image, in file order, are the rows. */
        int k = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, anns)
        {
            if (cJSON_GetObjectItem(a, "image_id")->valueint != id) continue;
            const cJSON *bbox = cJSON_GetObjectItem(a, "bbox");
            double bx[4];
            for (int t = 0; t < 4; t++)
                bx[t] = cJSON_GetArrayItem(bbox, t)->valuedouble;
            const int cat = cJSON_GetObjectItem(a, "category_id")->valueint;
            const cJSON *seg = cJSON_GetObjectItem(a, "segmentation");
            if (cJSON_GetObjectItem(a, "iscrowd")->valueint) {
                /* RLE over the whole image, on top of a labelled object. */
                (*n_crowd)++;
                const cJSON *counts = cJSON_GetObjectItem(seg, "counts");
                const cJSON *size = cJSON_GetObjectItem(seg, "size");
                double total = 0;
                const cJSON *c;
                cJSON_ArrayForEach(c, counts) total += c->valuedouble;
                int over = 0;
                for (int i = 0; i < n; i++) {
                    struct pbox pb;
                    to_pixels(&rows[i], w, h, &pb);
                    if (pb.x0 >= bx[0] && pb.x1 <= bx[0] + bx[2] && pb.y0 >= bx[1] &&
                        pb.y1 <= bx[1] + bx[3] && coco91_to_80(cat) == rows[i].cls)
                        over = 1;
                }
                if (total != (double)w * h || cJSON_GetArrayItem(size, 0)->valueint != h ||
                    cJSON_GetArrayItem(size, 1)->valueint != w || !over) {
                    (*seg_bad)++;
                    tap_diag("image %d: crowd RLE sums to %.0f (want %d), or covers no object", id,
                             total, w * h);
                }
                continue;
            }
            if (k >= n) {
                (*mismatches)++;
                k++;
                continue;
            }
            const struct row *r = &rows[k++];
            const double want[4] = { (bx[0] + bx[2] / 2) / w, (bx[1] + bx[3] / 2) / h, bx[2] / w,
                                     bx[3] / h };
            int same = coco91_to_80(cat) == r->cls;
            for (int t = 0; t < 4; t++)
                same &= fabs(want[t] - r->v[t]) <= 1e-6;
            if (!same) {
                (*mismatches)++;
                tap_diag("image %d row %d: YOLO %d %f %f %f %f vs COCO %d [%g %g %g %g]", id, k,
                         r->cls, r->v[0], r->v[1], r->v[2], r->v[3], cat, bx[0], bx[1], bx[2],
                         bx[3]);
            }
            /* The polygon traces the shape: it covers every pixel centre in the box, so its
             * extent reaches the box's outer pixel centres, and sharp tips stick out a little
             * past them. */
            const cJSON *poly = cJSON_GetArrayItem(seg, 0);
            const int np = cJSON_GetArraySize(poly);
            double mnx = 1e9, mny = 1e9, mxx = -1e9, mxy = -1e9;
            for (int t = 0; t + 1 < np; t += 2) {
                const double px = cJSON_GetArrayItem(poly, t)->valuedouble;
                const double py = cJSON_GetArrayItem(poly, t + 1)->valuedouble;
                mnx = fmin(mnx, px);
                mxx = fmax(mxx, px);
                mny = fmin(mny, py);
                mxy = fmax(mxy, py);
            }
            if (cJSON_GetArraySize(seg) != 1 || np < 6 || np % 2 ||
                !poly_fits(mnx, mxx, bx[0], bx[2]) || !poly_fits(mny, mxy, bx[1], bx[3]) ||
                mnx < 0 || mny < 0 || mxx > w || mxy > h) {
                (*seg_bad)++;
                tap_diag("image %d: polygon extent %.2f,%.2f-%.2f,%.2f vs bbox [%g %g %g %g]", id,
                         mnx, mny, mxx, mxy, bx[0], bx[1], bx[2], bx[3]);
            }
        }
        if (k != n) {
            (*mismatches)++;
            tap_diag("image %d: %d label rows but %d annotations", id, n, k);
        }

        snprintf(path, sizeof(path), "%s/images/%s/%s", root, split, fname);
        int iw, ih;
        uint8_t *rgb = decode_rgb(path, &iw, &ih);
        if (!rgb || iw != w || ih != h) {
            (*mismatches)++;
            tap_diag("%s: does not decode to %dx%d", path, w, h);
        } else {
            check_pixels(rgb, w, h, rows, n, ps, NULL);
        }
        free(rgb);
        checked++;
    }
    cJSON_Delete(j);
    return checked;
}

static int count_files(const char *dir, const char *suffix, int numeric_only)
{
    char **l;
    const int n = list_tree(dir, &l);
    int c = 0;
    for (int i = 0; i < n; i++) {
        const char *name = l[i] + 1; /* skip the '/' */
        const size_t len = strlen(name), sl = strlen(suffix);
        if (len < sl || strcmp(name + len - sl, suffix)) continue;
        if (numeric_only && !(len == 12 + sl && strspn(name, "0123456789") == 12)) continue;
        c++;
    }
    free_list(l, n);
    return c;
}

struct broken_entry {
    char kind[32];
    char path[160];
    char note[200];
};

static int read_broken(const char *root, struct broken_entry *e, int cap)
{
    char path[512];
    size_t len;
    snprintf(path, sizeof(path), "%s/broken.txt", root);
    char *t = (char *)read_all(path, &len);
    if (!t) return -1;
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(t, "\n", &save); line && n < cap;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') continue;
        if (sscanf(line, "%31[^\t]\t%159[^\t]\t%199[^\n]", e[n].kind, e[n].path, e[n].note) == 3)
            n++;
    }
    free(t);
    return n;
}

static const struct broken_entry *find_broken(const struct broken_entry *e, int n, const char *kind,
                                              const char *prefix)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].kind, kind) && !strncmp(e[i].path, prefix, strlen(prefix))) return &e[i];
    return NULL;
}

/* Labels of a broken image, from the same stem as its image path. */
static int broken_labels(const char *root, const char *img_rel, struct row *rows)
{
    char path[512];
    const char *split = img_rel + strlen("images/");
    snprintf(path, sizeof(path), "%s/labels/%.*s.txt", root, (int)(strrchr(split, '.') - split),
             split);
    return read_labels(path, rows, MAX_ROWS);
}

static void check_broken(const char *root, const char *split, int classes,
                         const struct pix_stats *ref)
{
    struct broken_entry e[64];
    const int n = read_broken(root, e, 64);
    char path[512], pre[128];
    size_t len;
    ok(n >= 15, "broken.txt lists %d entries", n);
    static const char *const kinds[] = { "truncated-jpeg", "not-jpeg",           "empty-image",
                                         "bad-label-row",  "label-out-of-range", "duplicate-label",
                                         "missing-image",  "bad-json",           "grey",
                                         "cmyk",           "exif-rotate",        "progressive" };
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        ok(find_broken(e, n, kinds[k], "") != NULL, "broken.txt has %s", kinds[k]);
    tjhandle tj = tjInitDecompress();
    int w = 0, h = 0, ss = 0, cs = 0;
    const struct broken_entry *b;

    snprintf(pre, sizeof(pre), "images/%s/", split);
    if ((b = find_broken(e, n, "truncated-jpeg", pre))) {
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        unsigned char *d = read_all(path, &len);
        unsigned long cut = 0, full = 0;
        sscanf(b->note, "JPEG cut to %lu of its %lu bytes", &cut, &full);
        ok(d && len == cut && cut > 0 && cut < full, "truncated-jpeg: %zu bytes of %lu", len, full);
        const int hdr = d && len > 2 && !tjDecompressHeader3(tj, d, len, &w, &h, &ss, &cs);
        ok(hdr, "truncated-jpeg: header still parses");
        ok(hdr && !(d[len - 2] == 0xff && d[len - 1] == 0xd9), "truncated-jpeg: no EOI marker");
        uint8_t *px = hdr ? malloc((size_t)w * (size_t)h * 3) : NULL;
        ok(px && tjDecompress2(tj, d, len, px, w, 0, h, TJPF_RGB, 0) != 0,
           "truncated-jpeg: decoding reports an error or warning");
        free(px);
        free(d);
    }
    if ((b = find_broken(e, n, "not-jpeg", pre))) {
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        unsigned char *d = read_all(path, &len);
        ok(d && len > 0 && tjDecompressHeader3(tj, d, len, &w, &h, &ss, &cs) != 0,
           "not-jpeg: %zu bytes that TurboJPEG rejects", len);
        free(d);
    }
    if ((b = find_broken(e, n, "empty-image", pre))) {
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        struct stat st;
        ok(stat(path, &st) == 0 && st.st_size == 0, "empty-image: 0-byte file exists");
    }

    /* Label kinds: read the raw rows. */
    static const char *const label_kinds[] = { "bad-label-row", "label-out-of-range",
                                               "duplicate-label" };
    snprintf(pre, sizeof(pre), "labels/%s/", split);
    for (int lk = 0; lk < 3; lk++) {
        if (!(b = find_broken(e, n, label_kinds[lk], pre))) continue;
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        char *t = (char *)read_all(path, &len);
        int good = 0, nonnum = 0, four = 0, over = 0, neg = 0, dup = 0;
        char lines[MAX_ROWS][128];
        int nl = 0;
        char *save = NULL;
        for (char *line = t ? strtok_r(t, "\n", &save) : NULL; line && nl < MAX_ROWS;
             line = strtok_r(NULL, "\n", &save)) {
            snprintf(lines[nl], sizeof(lines[nl]), "%s", line);
            for (int i = 0; i < nl; i++)
                dup += !strcmp(lines[i], line);
            nl++;
            double v[5];
            int cols = 0, numeric = 1;
            char *s2 = NULL;
            for (char *tok = strtok_r(line, " ", &s2); tok; tok = strtok_r(NULL, " ", &s2)) {
                char *end;
                const double x = strtod(tok, &end);
                if (*end) numeric = 0;
                if (cols < 5) v[cols] = x;
                cols++;
            }
            if (!numeric) {
                nonnum++;
                continue;
            }
            if (cols == 4) four++;
            if (cols != 5) continue;
            int in = 1;
            for (int i = 1; i < 5; i++) {
                over += v[i] > 1;
                neg += v[i] < 0;
                in &= v[i] >= 0 && v[i] <= 1;
            }
            good += in && v[0] >= 0 && v[0] < classes;
        }
        free(t);
        if (lk == 0)
            ok(nonnum >= 1 && four >= 1 && good >= 2,
               "bad-label-row: %d non-numeric, %d 4-column, %d good rows", nonnum, four, good);
        if (lk == 1)
            ok(over >= 1 && neg >= 1 && good >= 2,
               "label-out-of-range: %d rows > 1, %d negative, %d good", over, neg, good);
        if (lk == 2) ok(dup >= 1 && good >= 2, "duplicate-label: %d repeated rows", dup);
    }

    if ((b = find_broken(e, n, "missing-image", "images/"))) {
        struct row rows[MAX_ROWS];
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        ok(!file_exists(path), "missing-image: %s does not exist", b->path);
        ok(broken_labels(root, b->path, rows) >= 1, "missing-image: its label file exists");
        snprintf(path, sizeof(path), "%s/annotations/instances_%s.json", root, split);
        char *t = (char *)read_all(path, &len);
        ok(t && strstr(t, strrchr(b->path, '/') + 1), "missing-image: named in the COCO JSON");
        free(t);
    }
    if ((b = find_broken(e, n, "bad-json", "annotations/"))) {
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        char *t = (char *)read_all(path, &len);
        cJSON *j = t ? cJSON_ParseWithLength(t, len) : NULL;
        ok(t && len > 100 && j == NULL, "bad-json: %zu bytes that do not parse", len);
        cJSON_Delete(j);
        free(t);
    }

    /* Unusual but valid JPEGs: their labels must still match the displayed pixels. */
    struct pix_stats ps;
    memset(&ps, 0, sizeof(ps));
    ps.min_inside = 1;
    snprintf(pre, sizeof(pre), "images/%s/", split);
    if ((b = find_broken(e, n, "grey", pre))) {
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        unsigned char *d = read_all(path, &len);
        ok(d && !tjDecompressHeader3(tj, d, len, &w, &h, &ss, &cs) && ss == TJSAMP_GRAY &&
               cs == TJCS_GRAY,
           "grey: a 1-component JPEG");
        free(d);
    }
    if ((b = find_broken(e, n, "cmyk", pre))) {
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        unsigned char *d = read_all(path, &len);
        const int hdr = d && !tjDecompressHeader3(tj, d, len, &w, &h, &ss, &cs);
        ok(hdr && (cs == TJCS_CMYK || cs == TJCS_YCCK), "cmyk: a 4-component JPEG (cs %d)", cs);
        if (hdr) {
            uint8_t *cmyk = malloc((size_t)w * (size_t)h * 4), *rgb = malloc((size_t)w * h * 3);
            ok(!tjDecompress2(tj, d, len, cmyk, w, 0, h, TJPF_CMYK, 0), "cmyk: decodes as CMYK");
            /* Adobe-inverted CMYK as OpenCV converts it. */
            for (size_t i = 0; i < (size_t)w * (size_t)h; i++)
                for (int c = 0; c < 3; c++)
                    rgb[3 * i + c] = (uint8_t)(cmyk[4 * i + c] * cmyk[4 * i + 3] / 255);
            struct row rows[MAX_ROWS];
            const int nr = broken_labels(root, b->path, rows);
            const long before = ps.inside_fail + ps.band_fail + ps.stray_images;
            check_pixels(rgb, w, h, rows, nr, &ps, NULL);
            ok(nr >= 1 && ps.inside_fail + ps.band_fail + ps.stray_images == before &&
                   colour_mismatches(rgb, w, h, rows, nr, ref) == 0,
               "cmyk: %d labels match the pixels converted as OpenCV does", nr);
            free(cmyk);
            free(rgb);
        }
        free(d);
    }
    if ((b = find_broken(e, n, "progressive", pre))) {
        snprintf(path, sizeof(path), "%s/%s", root, b->path);
        unsigned char *d = read_all(path, &len);
        struct jpeg_info ji;
        if (d) jpeg_markers(d, len, &ji);
        ok(d && ji.sof == 0xc2, "progressive: SOF2 frame (got 0x%02x)", d ? ji.sof : 0);
        free(d);
        int iw, ih;
        uint8_t *rgb = decode_rgb(path, &iw, &ih);
        struct row rows[MAX_ROWS];
        const int nr = broken_labels(root, b->path, rows);
        const long before = ps.inside_fail + ps.band_fail + ps.stray_images;
        if (rgb) check_pixels(rgb, iw, ih, rows, nr, &ps, NULL);
        ok(rgb && nr >= 1 && ps.inside_fail + ps.band_fail + ps.stray_images == before &&
               colour_mismatches(rgb, iw, ih, rows, nr, ref) == 0,
           "progressive: decodes and its %d labels match", nr);
        free(rgb);
    }
    int orientations = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(e[i].kind, "exif-rotate")) continue;
        snprintf(path, sizeof(path), "%s/%s", root, e[i].path);
        unsigned char *d = read_all(path, &len);
        struct jpeg_info ji;
        if (d) jpeg_markers(d, len, &ji);
        free(d);
        ok(d && (ji.orientation == 3 || ji.orientation == 6 || ji.orientation == 8),
           "exif-rotate: %s carries Orientation %d", e[i].path, d ? ji.orientation : -1);
        if (!d) continue;
        orientations |= 1 << ji.orientation;
        int sw, sh, dw, dh, want_w = 0, want_h = 0;
        uint8_t *stored = decode_rgb(path, &sw, &sh);
        if (!stored) continue;
        uint8_t *disp = apply_orientation(stored, sw, sh, ji.orientation, &dw, &dh);
        sscanf(strstr(e[i].note, "displayed") ? strstr(e[i].note, "displayed") : "",
               "displayed %dx%d", &want_w, &want_h);
        struct row rows[MAX_ROWS];
        const int nr = broken_labels(root, e[i].path, rows);
        const long before = ps.inside_fail + ps.band_fail + ps.stray_images;
        check_pixels(disp, dw, dh, rows, nr, &ps, NULL);
        ok(dw == want_w && dh == want_h && nr >= 1 &&
               ps.inside_fail + ps.band_fail + ps.stray_images == before &&
               colour_mismatches(disp, dw, dh, rows, nr, ref) == 0,
           "exif-rotate %d: %d labels match the image as displayed (%dx%d)", ji.orientation, nr, dw,
           dh);
        free(stored);
        free(disp);
    }
    is_int(orientations, (1 << 3) | (1 << 6) | (1 << 8), "exif-rotate: orientations 3, 6 and 8");
    tjDestroy(tj);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("# usage: test_synth PATH_TO_YOLO_SYNTH\n");
        return 99;
    }
    exe = argv[1];
    const char *tmpdir = getenv("TMPDIR");
    snprintf(tmp_root, sizeof(tmp_root), "%s/ffyolo-synth-XXXXXX", tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(tmp_root)) {
        printf("# cannot create a temporary folder under %s\n", tmpdir ? tmpdir : "/tmp");
        return 99;
    }
    char a[320], b[320], c[320], d[320], log[320], path[512];
    snprintf(a, sizeof(a), "%s/a", tmp_root);
    snprintf(b, sizeof(b), "%s/b", tmp_root);
    snprintf(c, sizeof(c), "%s/c", tmp_root);
    snprintf(d, sizeof(d), "%s/d", tmp_root);
    snprintf(log, sizeof(log), "%s/log.txt", tmp_root);

    /* CLI. */
    size_t len;
    is_int(run(log, (const char *[]){ "--help", NULL }), 0, "--help exits 0");
    char *text = (char *)read_all(log, &len);
    ok(text && strstr(text, "usage: yolo-synth") && strstr(text, "--broken"),
       "--help prints usage");
    free(text);
    static const char *const bad[][6] = {
        { NULL },
        { "X", "--classes", "0", NULL },
        { "X", "--classes", "17", NULL },
        { "X", "--split", "train", NULL },
        { "X", "--split", "a=-3", NULL },
        { "X", "--format", "voc", NULL },
        { "X", "--broken", "grey,nope", NULL },
        { "X", "--min-side", "500", "--max-side", "400", NULL },
        { "X", "--no-such-option", NULL },
        { "X", "Y", NULL },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *args[8];
        int k = 0;
        for (; bad[i][k]; k++)
            args[k] = !strcmp(bad[i][k], "X") ? d : bad[i][k];
        args[k] = NULL;
        const int rc = run(log, args);
        text = (char *)read_all(log, &len);
        ok(rc == 2 && text && strstr(text, "yolo-synth: "),
           "bad arguments #%zu: exit %d with a message", i, rc);
        free(text);
    }
    ok(!file_exists(d), "bad arguments write nothing");

    /* Three datasets: a and b with the same seed, c with another. */
    const char *args_a[] = { a,        "--split",  "train2017=40", "--split", "val2017=12",
                             "--seed", "7",        "--min-side",   "96",      "--max-side",
                             "360",    "--broken", "all",          NULL };
    const char *args_b[] = { b,        "--split",  "train2017=40", "--split", "val2017=12",
                             "--seed", "7",        "--min-side",   "96",      "--max-side",
                             "360",    "--broken", "all",          NULL };
    const char *args_c[] = { c,        "--split",  "train2017=40", "--split", "val2017=12",
                             "--seed", "8",        "--min-side",   "96",      "--max-side",
                             "360",    "--broken", "all",          NULL };
    is_int(run(log, args_a), 0, "generate a (seed 7)");
    is_int(run(log, args_b), 0, "generate b (seed 7)");
    is_int(run(log, args_c), 0, "generate c (seed 8)");
    is_int(run(log, args_a), 1, "refuses to write into a non-empty folder");

    int nf;
    const int diff_ab = tree_diff(a, b, &nf);
    ok(diff_ab == 0 && nf > 100, "same seed: %d files, %d differ", nf, diff_ab);
    const int diff_ac = tree_diff(a, c, &nf);
    ok(diff_ac > nf / 2, "different seed: %d of %d files differ", diff_ac, nf);

    /* Counts. */
    snprintf(path, sizeof(path), "%s/images/train2017", a);
    is_int(count_files(path, ".jpg", 1), 40, "train2017: 40 numbered images");
    snprintf(path, sizeof(path), "%s/labels/train2017", a);
    is_int(count_files(path, ".txt", 1), 40, "train2017: 40 numbered label files");
    snprintf(path, sizeof(path), "%s/images/val2017", a);
    is_int(count_files(path, ".jpg", 0), 12, "val2017: 12 images, no broken ones");
    snprintf(path, sizeof(path), "%s/labels/val2017", a);
    is_int(count_files(path, ".txt", 0), 12, "val2017: 12 label files");
    snprintf(path, sizeof(path), "%s/images/val2017/000000000041.jpg", a);
    ok(file_exists(path), "ids continue across splits (val2017 starts at 41)");

    /* Labels, COCO and pixels. */
    struct pix_stats ps;
    memset(&ps, 0, sizeof(ps));
    ps.min_inside = 1;
    long backgrounds = 0, crowd = 0, mismatches = 0, range_bad = 0, seg_bad = 0;
    const int ct = check_split(a, "train2017", 8, &ps, &backgrounds, &crowd, &mismatches,
                               &range_bad, &seg_bad);
    const int cv =
        check_split(a, "val2017", 8, &ps, &backgrounds, &crowd, &mismatches, &range_bad, &seg_bad);
    is_int(ct, 40, "COCO train2017 lists the 40 numbered images");
    is_int(cv, 12, "COCO val2017 lists the 12 images");
    is_int(mismatches, 0, "every YOLO row equals its COCO annotation (ids mapped coco91->80)");
    is_int(range_bad, 0, "every label row is in range");
    is_int(seg_bad, 0, "polygons trace the boxes; crowd RLEs cover the image and an object");
    ok(crowd >= 1, "some iscrowd=1 annotations (%ld)", crowd);
    ok(backgrounds >= 1, "some background images with empty labels (%ld)", backgrounds);
    ok(ps.objects >= 100, "%ld objects checked against pixels", ps.objects);
    is_int(ps.inside_fail, 0, "every box holds its shape (min shape fraction %.2f)", ps.min_inside);
    is_int(ps.band_fail, 0, "no box is too small: just outside each box is background");
    is_int(ps.stray_images, 0, "no shape is drawn without a label");
    ok(ps.sides_hit >= ps.sides * 95 / 100, "boxes are tight: %ld of %ld sides touch the shape",
       ps.sides_hit, ps.sides);

    /* Class ids follow colours: each class's mean colour is nearer its own objects than any
     * other class's is. Re-scan to compare objects against the class means. */
    int classes_seen = 0, colour_bad = 0;
    for (int k = 0; k < 8; k++)
        classes_seen += ps.class_n[k] > 0;
    for (int s = 0; s < 2; s++) {
        const char *split = s ? "val2017" : "train2017";
        const int first = s ? 41 : 1, count = s ? 12 : 40;
        for (int id = first; id < first + count; id++) {
            struct row rows[MAX_ROWS];
            snprintf(path, sizeof(path), "%s/labels/%s/%012d.txt", a, split, id);
            const int nr = read_labels(path, rows, MAX_ROWS);
            snprintf(path, sizeof(path), "%s/images/%s/%012d.jpg", a, split, id);
            int w, h;
            uint8_t *rgb = decode_rgb(path, &w, &h);
            if (!rgb || nr <= 0) {
                free(rgb);
                continue;
            }
            colour_bad += colour_mismatches(rgb, w, h, rows, nr, &ps);
            free(rgb);
        }
    }
    ok(classes_seen == 8, "all 8 classes drawn (%d)", classes_seen);
    is_int(colour_bad, 0, "each object's colour is nearest its own class's mean colour");

    /* The yaml. */
    snprintf(path, sizeof(path), "%s/synth.yaml", a);
    text = (char *)read_all(path, &len);
    ok(text && strstr(text, "\npath: .\n") && strstr(text, "\ntrain: images/train2017\n") &&
           strstr(text, "\nval: images/val2017\n") && strstr(text, "\nnc: 8\n") &&
           strstr(text, "\nnames: [rectangle, ellipse, triangle, cross, ring, diamond, star, "
                        "arrow]\n"),
       "synth.yaml has path, train, val, nc and the names list");
    free(text);

    check_broken(a, "train2017", 8, &ps);

    /* --format picks the layouts; --classes sets the categories. */
    snprintf(path, sizeof(path), "%s/y", tmp_root);
    is_int(run(log, (const char *[]){ path, "--format", "yolo", "--split", "train=3", "--classes",
                                      "3", NULL }),
           0, "--format yolo");
    char p2[600];
    snprintf(p2, sizeof(p2), "%s/annotations", path);
    ok(!file_exists(p2), "--format yolo: no annotations/");
    snprintf(p2, sizeof(p2), "%s/labels/train/000000000003.txt", path);
    ok(file_exists(p2), "--format yolo: labels written");
    snprintf(path, sizeof(path), "%s/o", tmp_root);
    is_int(run(log, (const char *[]){ path, "--format", "coco", "--split", "train=3", "--classes",
                                      "16", NULL }),
           0, "--format coco --classes 16");
    snprintf(p2, sizeof(p2), "%s/labels", path);
    ok(!file_exists(p2), "--format coco: no labels/");
    snprintf(p2, sizeof(p2), "%s/synth.yaml", path);
    ok(!file_exists(p2), "--format coco: no synth.yaml");
    snprintf(p2, sizeof(p2), "%s/annotations/instances_train.json", path);
    cJSON *j = load_json(p2);
    const cJSON *cats = cJSON_GetObjectItem(j, "categories");
    const cJSON *last = cJSON_GetArrayItem(cats, 15);
    ok(j && cJSON_GetArraySize(cats) == 16 && cJSON_GetObjectItem(last, "id")->valueint == 17,
       "--classes 16: 16 categories, the last with COCO id 17");
    cJSON_Delete(j);

    nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tap_done();
}
