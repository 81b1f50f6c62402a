/*
 * yolo-synth: write a synthetic detection dataset (shapes of K classes on textured backgrounds)
 * in the YOLO layout, the COCO-JSON layout or both, with deliberately broken files on request.
 * Tests and the README demo use it so that nothing needs a download.
 *
 * The output is a pure function of the arguments: every image draws from its own RNG stream
 * keyed by (seed, image id), files are written in a fixed order and numbers are printed in the
 * C locale, so the same arguments give byte-identical files.
 *
 * Layout under OUT_DIR:
 *   images/<split>/<000000000001>.jpg        shared by both layouts
 *   labels/<split>/<000000000001>.txt        YOLO: "class cx cy w h" normalised, one per object
 *   annotations/instances_<split>.json       COCO: category ids in COCO's 91-id numbering
 *   synth.yaml                               ultralytics dataset yaml (YOLO layout)
 *   broken.txt                               what --broken injected, one "kind<TAB>path<TAB>note"
 */
#include "argparse.h"
#include "synth_draw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#define SYNTH_MAX_SPLITS       8
#define SYNTH_MAX_OBJECTS      32
#define SYNTH_SPLIT_NAME_MAX   64
#define SYNTH_MAX_IMAGES       100000000L /* ids stay within COCO's 12-digit file names */
#define SYNTH_JPEG_QUALITY     90
#define SYNTH_VISIBLE_FRACTION 0.6 /* each object keeps at least this share of its pixels */
#define SYNTH_BOX_MIN          3   /* pixels: smaller boxes are redrawn */

enum { FMT_YOLO = 1, FMT_COCO = 2 };

/* Broken-input kinds, in the order they are injected. */
enum {
    BK_TRUNCATED_JPEG,
    BK_NOT_JPEG,
    BK_EMPTY_IMAGE,
    BK_BAD_LABEL_ROW,
    BK_LABEL_OUT_OF_RANGE,
    BK_DUPLICATE_LABEL,
    BK_MISSING_IMAGE,
    BK_BAD_JSON,
    BK_GREY,
    BK_CMYK,
    BK_EXIF_ROTATE,
    BK_PROGRESSIVE,
    BK_COUNT
};

static const char *const broken_names[BK_COUNT] = {
    "truncated-jpeg",  "not-jpeg",      "empty-image", "bad-label-row", "label-out-of-range",
    "duplicate-label", "missing-image", "bad-json",    "grey",          "cmyk",
    "exif-rotate",     "progressive",
};

/* COCO's 91-id category numbers of the 80 detection classes, in order (ultralytics'
 * coco80_to_coco91_class); class k is written with category id coco91_ids[k]. */
static const int coco91_ids[SYNTH_MAX_CLASSES] = { 1, 2,  3,  4,  5,  6,  7,  8,
                                                   9, 10, 11, 13, 14, 15, 16, 17 };

struct split {
    char name[SYNTH_SPLIT_NAME_MAX + 1]; /* [A-Za-z0-9_.-]+ */
    long count;                          /* normal images, >= 0 */
};

struct options {
    const char *out_dir;                   /* OUT_DIR, as given */
    struct split splits[SYNTH_MAX_SPLITS]; /* in command-line order; ids run through them */
    int n_splits;                          /* 0..SYNTH_MAX_SPLITS */
    int classes;                           /* 1..SYNTH_MAX_CLASSES */
    uint64_t seed;                         /* --seed */
    int format;                            /* FMT_* bits */
    int min_side;                          /* pixels, image sides drawn in [min_side, max_side] */
    int max_side;                          /* pixels */
    int max_objects; /* objects per image are drawn in [1, max_objects] (or 0: background) */
    int more_pct;    /* after each object, another with this chance (percent): a geometric
                        count of mean 100 / (100 - more_pct) before the max_objects cap */
    unsigned broken; /* bit i: broken kind i */
    int force;       /* write into a non-empty OUT_DIR */
};

/* One drawn object in display coordinates. */
struct object {
    int cls;                                   /* 0..classes-1 */
    int x0, y0, x1, y1;                        /* tight pixel box, x1/y1 exclusive */
    long area;                                 /* pixels drawn */
    long visible;                              /* pixels not covered by later objects */
    int npts;                                  /* outline vertices (clipped to the image) */
    struct synth_point pts[SYNTH_CLIPPED_MAX]; /* outline, pixels */
};

/* One image as displayed: pixels, objects and an optional crowd region. */
struct sample {
    int w, h;               /* displayed size, pixels */
    int nobj;               /* objects drawn, 0 for a background image */
    struct object *objs;    /* SYNTH_MAX_OBJECTS entries, owned by struct gen */
    int crowd_obj;          /* object the crowd region covers, or -1 */
    int cx0, cy0, cx1, cy1; /* crowd box, x1/y1 exclusive */
};

/* Per-split COCO output under construction. */
struct coco_split {
    FILE *images;      /* memstream of the image entries (small: ~100 bytes each) */
    char *images_buf;  /* its buffer, valid after fclose(images) */
    size_t images_len; /* its length */
    FILE *anns;        /* tmpfile of the annotation entries, which can be large */
    long n_images;     /* entries written to images */
    long n_anns;       /* entries written to anns */
};

/* Everything one run needs, allocated once for the largest image (no per-image malloc). */
struct gen {
    const struct options *o; /* the parsed command line */
    tjhandle tj;             /* baseline JPEG compressor, reused */
    uint8_t *rgb;            /* max_side^2 * 3: the displayed image */
    uint8_t *rgb2;           /* max_side^2 * 4: rotated or CMYK copy */
    uint8_t *ids;           /* max_side^2: which object (1-based) owns each pixel, 0 = background */
    int16_t *scratch;       /* synth_background()'s work area */
    unsigned char *jpeg;    /* tjAlloc'ed output buffer of jpeg_cap bytes */
    unsigned long jpeg_cap; /* tjBufSize() of a max_side^2 4:4:4 image */
    struct synth_span *spans; /* one shape's runs, span_cap entries */
    int span_cap;             /* 8 per row: more than any shape's crossings need */
    struct object *objs;      /* SYNTH_MAX_OBJECTS entries */
    struct sample s;          /* the image being written */
    long next_ann_id;         /* last COCO annotation id used (ids are unique across splits) */
    FILE *broken_txt;         /* OUT/broken.txt, or NULL without --broken */
    long total_images;        /* ids of normal images are 1..total_images */
    long next_broken_id;      /* last id given to a --broken image (after total_images) */
};

/* ---- errors -------------------------------------------------------------------------------- */

static void die(const char *hint, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "yolo-synth: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    exit(1);
}

static void bad_arg(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "yolo-synth: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nhint: yolo-synth --help lists the options\n");
    exit(2);
}

/* ---- argument parsing ---------------------------------------------------------------------- */

static long parse_long(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        bad_arg("%s: '%s' is not an integer in [%ld, %ld]", opt, s, lo, hi);
    return v;
}

static void parse_split(struct options *o, const char *arg, int *replaced)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) bad_arg("--split: '%s' is not NAME=COUNT", arg);
    const size_t len = (size_t)(eq - arg);
    if (len > SYNTH_SPLIT_NAME_MAX) bad_arg("--split: name longer than %d", SYNTH_SPLIT_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        const char c = arg[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.') ||
            (i == 0 && c == '.'))
            bad_arg("--split: name '%.*s' may use only letters, digits, '_', '-' and '.'", (int)len,
                    arg);
    }
    if (!*replaced) {
        o->n_splits = 0;
        *replaced = 1;
    }
    for (int i = 0; i < o->n_splits; i++)
        if (strlen(o->splits[i].name) == len && !memcmp(o->splits[i].name, arg, len))
            bad_arg("--split: '%.*s' given twice", (int)len, arg);
    if (o->n_splits == SYNTH_MAX_SPLITS) bad_arg("--split: at most %d splits", SYNTH_MAX_SPLITS);
    struct split *s = &o->splits[o->n_splits++];
    memcpy(s->name, arg, len);
    s->name[len] = 0;
    s->count = parse_long("--split", eq + 1, 0, SYNTH_MAX_IMAGES);
}

static unsigned parse_broken(const char *arg)
{
    unsigned mask = 0;
    const char *p = arg;
    while (1) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int found = 0;
        if (len == 3 && !memcmp(p, "all", 3)) {
            mask |= (1u << BK_COUNT) - 1;
            found = 1;
        }
        for (int k = 0; k < BK_COUNT && !found; k++) {
            if (strlen(broken_names[k]) == len && !memcmp(broken_names[k], p, len)) {
                mask |= 1u << k;
                found = 1;
            }
        }
        if (!found) bad_arg("--broken: unknown kind '%.*s'", (int)len, p);
        if (!comma) break;
        p = comma + 1;
    }
    return mask;
}

/* The repeatable options write through this: --split replaces the default splits once. */
struct synth_cli {
    struct options *o;
    int replaced;
};

static int split_arg(const char *v, void *dst, char *why, size_t cap)
{
    (void)why;
    (void)cap;
    struct synth_cli *c = dst;
    parse_split(c->o, v, &c->replaced); /* exits with a usage error on a bad value */
    return 0;
}

static int broken_arg(const char *v, void *dst, char *why, size_t cap)
{
    (void)why;
    (void)cap;
    *(unsigned *)dst |= parse_broken(v);
    return 0;
}

static int seed_arg(const char *v, void *dst, char *why, size_t cap)
{
    char *end;
    errno = 0;
    const unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') {
        snprintf(why, cap, "is not an integer in [0, 2^64-1]");
        return -EINVAL;
    }
    *(uint64_t *)dst = x;
    return 0;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    memset(o, 0, sizeof(*o));
    o->splits[0] = (struct split){ "train2017", 64 };
    o->splits[1] = (struct split){ "val2017", 16 };
    o->n_splits = 2;
    o->format = FMT_YOLO | FMT_COCO;
    struct synth_cli cli = { o, 0 };
    long classes = 8, min_side = 240, max_side = 800, max_objects = 10;
    double mean_objects = 10.0 / 3.0;
    const char *format = "both";
    bool force = false;
    int n_pos = 0;
    const struct ap_opt opts[] = {
        { .names = "--split",
          .kind = AP_CALL,
          .dst = &cli,
          .metavar = "NAME=COUNT",
          .help = "a split and its image count; repeatable; the first use replaces the default "
                  "train2017=64 val2017=16",
          .call = split_arg },
        AP_RANGE("--classes", AP_LONG, &classes, "K", "number of classes (default 8)", 1,
                 SYNTH_MAX_CLASSES),
        { .names = "--seed",
          .kind = AP_CALL,
          .dst = &o->seed,
          .metavar = "S",
          .help = "RNG seed, 0..2^64-1 (default 0); same arguments, same bytes",
          .call = seed_arg },
        { .names = "--format",
          .kind = AP_CHOICE,
          .dst = &format,
          .metavar = "F",
          .help = "yolo, coco or both (default both)",
          .choices = "yolo|coco|both" },
        AP_RANGE("--min-side", AP_LONG, &min_side, "A",
                 "smallest image side in pixels (default 240)", 32, 8192),
        AP_RANGE("--max-side", AP_LONG, &max_side, "B",
                 "largest image side in pixels (default 800)", 32, 8192),
        AP_RANGE("--max-objects", AP_LONG, &max_objects, "N",
                 "at most N objects per image (default 10)", 1, SYNTH_MAX_OBJECTS),
        AP_RANGE("--mean-objects", AP_DOUBLE, &mean_objects, "M",
                 "mean of the (geometric) number of objects an image is drawn with, before the "
                 "--max-objects cap and overlaps (default 3.33; COCO has about 7)",
                 1, 100),
        { .names = "--broken",
          .kind = AP_CALL,
          .dst = &o->broken,
          .metavar = "KIND[,...]",
          .help = "add deliberately bad inputs to the first split, listed in OUT_DIR/broken.txt; "
                  "KIND is one of: truncated-jpeg not-jpeg empty-image bad-label-row "
                  "label-out-of-range duplicate-label missing-image bad-json grey cmyk "
                  "exif-rotate progressive, or all",
          .call = broken_arg },
        AP_OPT("--force", AP_FLAG, &force, NULL,
               "write into a non-empty OUT_DIR (stale files are not removed)"),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "print this help and exit"),
    };
    const struct ap_spec sp = {
        .prog = "yolo-synth",
        .usage = "OUT_DIR [options]",
        .about = "Write a synthetic detection dataset: shapes of K classes on textured "
                 "backgrounds, in the YOLO layout (images/, labels/, synth.yaml) and/or COCO's "
                 "(annotations/).",
        .epilog = "Exit status: 0 success, 1 failure while writing, 2 bad arguments.",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .positional = &o->out_dir,
        .max_positional = 1,
        .n_positional = &n_pos,
        .positional_name = "OUT_DIR",
    };
    const int rc = ap_parse(&sp, argc, argv);
    if (rc) exit(rc == AP_HELPED ? 0 : rc);
    if (!o->out_dir) bad_arg("missing OUT_DIR");
    o->classes = (int)classes;
    o->min_side = (int)min_side;
    o->max_side = (int)max_side;
    o->max_objects = (int)max_objects;
    o->more_pct = (int)lround(100.0 - 100.0 / mean_objects);
    o->force = force;
    o->format = !strcmp(format, "yolo")   ? FMT_YOLO
                : !strcmp(format, "coco") ? FMT_COCO
                                          : FMT_YOLO | FMT_COCO;
    if (!o->out_dir[0]) bad_arg("OUT_DIR is empty");
    if (o->min_side > o->max_side)
        bad_arg("--min-side %d is larger than --max-side %d", o->min_side, o->max_side);
    long total = 0;
    for (int i = 0; i < o->n_splits; i++)
        total += o->splits[i].count;
    if (total > SYNTH_MAX_IMAGES) bad_arg("more than %ld images in all", SYNTH_MAX_IMAGES);
    if (o->broken && o->n_splits == 0) bad_arg("--broken needs a split to add files to");
}

/* ---- files --------------------------------------------------------------------------------- */

static void path_join(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap) die("use a shorter OUT_DIR", "path too long: %s...", dst);
}

/* mkdir -p: OUT_DIR may name folders that do not exist yet, as users expect. */
static void make_dir(const char *path)
{
    char part[4096];
    const size_t n = strlen(path);
    if (n >= sizeof part) die("use a shorter OUT_DIR", "path too long: %s", path);
    memcpy(part, path, n + 1);
    for (char *p = part + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(part, 0777) && errno != EEXIST)
            die("check that the parent folder is writable", "cannot create %s: %s", part,
                strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0777) && errno != EEXIST)
        die("check that the parent folder exists and is writable", "cannot create %s: %s", path,
            strerror(errno));
}

/* Write parts[0..n) to path, replacing it. */
static void write_parts(const char *path, const void *const *parts, const size_t *lens, int n)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        die("check free space and permissions", "cannot create %s: %s", path, strerror(errno));
    for (int i = 0; i < n; i++) {
        const char *p = parts[i];
        size_t left = lens[i];
        while (left) {
            const ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) die("check free space", "cannot write %s: %s", path, strerror(errno));
            p += w;
            left -= (size_t)w;
        }
    }
    if (close(fd)) die("check free space", "cannot write %s: %s", path, strerror(errno));
}

static void write_file(const char *path, const void *data, size_t len)
{
    write_parts(path, &data, &len, 1);
}

static void check_stream(FILE *f, const char *what)
{
    if (ferror(f)) die("check free space", "cannot write %s", what);
}

static void prepare_out_dir(const struct options *o)
{
    char p[PATH_MAX];
    DIR *d = opendir(o->out_dir);
    if (d) {
        const struct dirent *e;
        int empty = 1;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
        closedir(d);
        if (!empty && !o->force)
            die("choose a new or empty folder, or add --force to write over it", "%s is not empty",
                o->out_dir);
    } else {
        make_dir(o->out_dir);
    }
    const char *tops[3] = { "images", (o->format & FMT_YOLO) ? "labels" : NULL,
                            (o->format & FMT_COCO) ? "annotations" : NULL };
    for (int t = 0; t < 3; t++) {
        if (!tops[t]) continue;
        path_join(p, sizeof(p), "%s/%s", o->out_dir, tops[t]);
        make_dir(p);
        if (t == 2) continue;
        for (int i = 0; i < o->n_splits; i++) {
            path_join(p, sizeof(p), "%s/%s/%s", o->out_dir, tops[t], o->splits[i].name);
            make_dir(p);
        }
    }
}

/* ---- drawing a sample ---------------------------------------------------------------------- */

/* Try to place one object of class cls; returns 1 when drawn. */
static int place_object(struct gen *g, struct synth_rng *rng, int cls)
{
    struct sample *s = &g->s;
    struct object *ob = &s->objs[s->nobj];
    const double m = s->w < s->h ? s->w : s->h;
    const double lo = fmax(6.0, 0.05 * m), hi = fmax(lo + 1.0, 0.6 * m);
    struct synth_point raw[SYNTH_OUTLINE_MAX];
    long covered[SYNTH_MAX_OBJECTS];

    for (int attempt = 0; attempt < 30; attempt++) {
        /* Log-uniform sizes: as many small objects as large ones. */
        const double len = exp(synth_rng_uniform(rng, log(lo), log(hi)));
        const double aspect = synth_rng_uniform(rng, 0.55, 1.0);
        struct synth_shape_geom geom;
        geom.hx = len / 2;
        geom.hy = len / 2 * aspect;
        if (synth_rng_below(rng, 2)) {
            const double t = geom.hx;
            geom.hx = geom.hy;
            geom.hy = t;
        }
        const double turn = synth_class_turns(cls) ? synth_rng_below(rng, 4) * (M_PI / 2) : 0.0;
        geom.angle = turn + synth_rng_uniform(rng, -0.17, 0.17);
        /* Centres keep at least ~70% of the shape's extent inside the image. */
        const double ex = fmax(geom.hx, geom.hy) * 0.7;
        geom.cx = synth_rng_uniform(rng, ex, s->w - ex);
        geom.cy = synth_rng_uniform(rng, ex, s->h - ex);

        const int nraw = synth_shape_outline(cls, &geom, raw, SYNTH_OUTLINE_MAX);
        if (nraw < 0) die(NULL, "internal: no outline for class %d", cls);
        const int n = synth_poly_clip(raw, nraw, s->w, s->h, ob->pts, SYNTH_CLIPPED_MAX);
        if (n < 0) die(NULL, "internal: outline clipping overflow");
        if (n == 0) continue;
        const int ns = synth_poly_spans(ob->pts, n, s->w, s->h, g->spans, g->span_cap);
        if (ns < 0) die(NULL, "internal: span buffer overflow");
        if (ns == 0) continue;

        int x0 = s->w, x1 = 0;
        long area = 0;
        memset(covered, 0, sizeof(covered));
        for (int i = 0; i < ns; i++) {
            const struct synth_span *sp = &g->spans[i];
            const uint8_t *id = g->ids + (size_t)sp->y * (size_t)s->w;
            if (sp->x0 < x0) x0 = sp->x0;
            if (sp->x1 > x1) x1 = sp->x1;
            area += sp->x1 - sp->x0;
            for (int x = sp->x0; x < sp->x1; x++)
                if (id[x]) covered[id[x] - 1]++;
        }
        const int y0 = g->spans[0].y, y1 = g->spans[ns - 1].y + 1;
        if (x1 - x0 < SYNTH_BOX_MIN || y1 - y0 < SYNTH_BOX_MIN) continue;
        int ok = 1;
        for (int j = 0; j < s->nobj && ok; j++)
            if (s->objs[j].visible - covered[j] < SYNTH_VISIBLE_FRACTION * s->objs[j].area) ok = 0;
        if (!ok) continue;

        /* Accepted: paint it. Per-instance colour jitter and per-pixel grain keep it from being
         * one flat colour, without moving it towards the grey backgrounds. */
        uint8_t col[3];
        synth_class_colour(cls, col);
        int c[3];
        for (int k = 0; k < 3; k++)
            c[k] = col[k] + (int)synth_rng_below(rng, 25) - 12;
        uint32_t grain = (uint32_t)synth_rng_next(rng) | 1u;
        const uint8_t idv = (uint8_t)(s->nobj + 1);
        for (int i = 0; i < ns; i++) {
            const struct synth_span *sp = &g->spans[i];
            uint8_t *id = g->ids + (size_t)sp->y * (size_t)s->w;
            uint8_t *px = g->rgb + ((size_t)sp->y * (size_t)s->w) * 3;
            for (int x = sp->x0; x < sp->x1; x++) {
                grain ^= grain << 13;
                grain ^= grain >> 17;
                grain ^= grain << 5;
                const int d = (int)(grain % 11u) - 5;
                for (int k = 0; k < 3; k++) {
                    const int v = c[k] + d;
                    px[3 * x + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
                id[x] = idv;
            }
        }
        for (int j = 0; j < s->nobj; j++)
            s->objs[j].visible -= covered[j];
        ob->cls = cls;
        ob->x0 = x0;
        ob->x1 = x1;
        ob->y0 = y0;
        ob->y1 = y1;
        ob->area = area;
        ob->visible = area;
        ob->npts = n;
        s->nobj++;
        return 1;
    }
    return 0;
}

/* Draw one w x h image into g->rgb with its objects; min_objects forces a non-background. */
static void make_sample(struct gen *g, struct synth_rng *rng, int w, int h, int min_objects)
{
    struct sample *s = &g->s;
    s->w = w;
    s->h = h;
    s->nobj = 0;
    s->crowd_obj = -1;
    synth_background(g->rgb, w, h, rng, g->scratch);
    memset(g->ids, 0, (size_t)w * (size_t)h);

    int want = 0;
    if (min_objects > 0 || synth_rng_below(rng, 12) != 0) {
        /* Geometric counts: mostly a few objects, sometimes crowded scenes. */
        want = 1;
        while (want < g->o->max_objects && synth_rng_below(rng, 100) < (uint32_t)g->o->more_pct)
            want++;
    }
    if (want < min_objects) want = min_objects;
    for (int i = 0; i < want; i++)
        place_object(g, rng, (int)synth_rng_below(rng, (uint32_t)g->o->classes));

    /* Some images get a crowd region over one object: COCO marks such regions iscrowd=1 and
     * trainers skip them, so a packer must too. */
    if (s->nobj > 0 && synth_rng_below(rng, 6) == 0) {
        const struct object *ob = &s->objs[synth_rng_below(rng, (uint32_t)s->nobj)];
        const int mx = (ob->x1 - ob->x0) / 10 + 1, my = (ob->y1 - ob->y0) / 10 + 1;
        s->crowd_obj = (int)(ob - s->objs);
        s->cx0 = ob->x0 - mx < 0 ? 0 : ob->x0 - mx;
        s->cy0 = ob->y0 - my < 0 ? 0 : ob->y0 - my;
        s->cx1 = ob->x1 + mx > w ? w : ob->x1 + mx;
        s->cy1 = ob->y1 + my > h ? h : ob->y1 + my;
    }
}

static void sample_size(struct gen *g, struct synth_rng *rng, int *w, int *h)
{
    const uint32_t span = (uint32_t)(g->o->max_side - g->o->min_side + 1);
    *w = g->o->min_side + (int)synth_rng_below(rng, span);
    *h = g->o->min_side + (int)synth_rng_below(rng, span);
}

/* ---- JPEG ---------------------------------------------------------------------------------- */

/* Compress w x h pixels of format pf; returns the JPEG size (data in g->jpeg). */
static unsigned long encode(struct gen *g, const uint8_t *px, int w, int h, int pf, int subsamp,
                            int flags, const char *what)
{
    unsigned long size = g->jpeg_cap;
    unsigned char *buf = g->jpeg;
    /* libjpeg-turbo 2.1 keeps the progressive scan script in the handle: later baseline images
     * from the same handle come out corrupt ("bad Huffman code"). Progressive gets its own. */
    tjhandle tj = (flags & TJFLAG_PROGRESSIVE) ? tjInitCompress() : g->tj;
    if (!tj) die(NULL, "cannot start a JPEG compressor: %s", tjGetErrorStr2(NULL));
    /* NOREALLOC: the buffer holds tjBufSize() of the largest 4:4:4 image (6 bytes a pixel), more
     * than any of ours needs, and TurboJPEG's growth path would leak our original buffer. */
    if (tjCompress2(tj, px, w, 0, h, pf, &buf, &size, subsamp, SYNTH_JPEG_QUALITY,
                    flags | TJFLAG_NOREALLOC))
        die(NULL, "cannot compress %s: %s", what, tjGetErrorStr2(tj));
    if (tj != g->tj) tjDestroy(tj);
    return size;
}

/* An EXIF APP1 segment holding Make, Orientation and ResolutionUnit, in either byte order. */
static size_t exif_app1(uint8_t *dst, int orientation, int big_endian)
{
    uint8_t *p = dst;
    const char make[] = "ffyolo"; /* 7 bytes with its NUL: stored at an offset */
    const int n_entries = 3;
#define PUT16(v)                           \
    do {                                   \
        const unsigned v_ = (unsigned)(v); \
        if (big_endian) {                  \
            *p++ = (uint8_t)(v_ >> 8);     \
            *p++ = (uint8_t)v_;            \
        } else {                           \
            *p++ = (uint8_t)v_;            \
            *p++ = (uint8_t)(v_ >> 8);     \
        }                                  \
    } while (0)
#define PUT32(v)                                     \
    do {                                             \
        const unsigned long w_ = (unsigned long)(v); \
        if (big_endian) {                            \
            PUT16(w_ >> 16);                         \
            PUT16(w_ & 0xffff);                      \
        } else {                                     \
            PUT16(w_ & 0xffff);                      \
            PUT16(w_ >> 16);                         \
        }                                            \
    } while (0)
    *p++ = 0xff;
    *p++ = 0xe1;
    p += 2; /* segment length, filled in below */
    memcpy(p, "Exif\0\0", 6);
    p += 6;
    if (big_endian) {
        memcpy(p, "MM\0*", 4);
    } else {
        memcpy(p, "II*\0", 4);
    }
    p += 4;
    PUT32(8); /* IFD0 right after the header */
    PUT16(n_entries);
    const unsigned long data_off = 8 + 2 + 12 * (unsigned long)n_entries + 4;
    PUT16(0x010f); /* Make, ASCII, 7 bytes at data_off */
    PUT16(2);
    PUT32(sizeof(make));
    PUT32(data_off);
    PUT16(0x0112); /* Orientation, SHORT, value left-justified in the 4-byte field */
    PUT16(3);
    PUT32(1);
    PUT16(orientation);
    PUT16(0);
    PUT16(0x0128); /* ResolutionUnit, SHORT: inches */
    PUT16(3);
    PUT32(1);
    PUT16(2);
    PUT16(0);
    PUT32(0); /* no IFD1 */
    memcpy(p, make, sizeof(make));
    p += sizeof(make);
#undef PUT16
#undef PUT32
    const size_t len = (size_t)(p - dst);
    dst[2] = (uint8_t)((len - 2) >> 8);
    dst[3] = (uint8_t)(len - 2);
    return len;
}

/* ---- labels and annotations ---------------------------------------------------------------- */

static void label_row(char *dst, size_t cap, const struct sample *s, const struct object *ob)
{
    const double cx = (ob->x0 + ob->x1) / 2.0 / s->w, cy = (ob->y0 + ob->y1) / 2.0 / s->h;
    const double bw = (double)(ob->x1 - ob->x0) / s->w, bh = (double)(ob->y1 - ob->y0) / s->h;
    snprintf(dst, cap, "%d %.6f %.6f %.6f %.6f\n", ob->cls, cx, cy, bw, bh);
}

/* Labels of the current sample with extra text rows: extra[i] goes before good row at[i]
 * (at[i] == nobj: at the end). */
static void write_labels(struct gen *g, const char *path, const char *const *extra, const int *at,
                         int n_extra)
{
    const struct sample *s = &g->s;
    char buf[SYNTH_MAX_OBJECTS * 64 + 512];
    size_t len = 0;
    for (int i = 0; i <= s->nobj; i++) {
        for (int e = 0; e < n_extra; e++) {
            if (at[e] != i) continue;
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s", extra[e]);
        }
        if (i < s->nobj) {
            label_row(buf + len, sizeof(buf) - len, s, &s->objs[i]);
            len += strlen(buf + len);
        }
    }
    write_file(path, buf, len);
}

static void coco_image(struct coco_split *cs, long id, const char *file_name, int w, int h)
{
    fprintf(cs->images,
            "%s{\"id\": %ld, \"file_name\": \"%s\", \"width\": %d, \"height\": %d, "
            "\"license\": 1}",
            cs->n_images ? ",\n" : "", id, file_name, w, h);
    cs->n_images++;
}

static void coco_annotations(struct gen *g, struct coco_split *cs, long image_id)
{
    const struct sample *s = &g->s;
    for (int i = 0; i < s->nobj; i++) {
        const struct object *ob = &s->objs[i];
        fprintf(cs->anns,
                "%s{\"id\": %ld, \"image_id\": %ld, \"category_id\": %d, \"iscrowd\": 0, "
                "\"area\": %ld, \"bbox\": [%d, %d, %d, %d], \"segmentation\": [[",
                cs->n_anns ? ",\n" : "", ++g->next_ann_id, image_id, coco91_ids[ob->cls], ob->area,
                ob->x0, ob->y0, ob->x1 - ob->x0, ob->y1 - ob->y0);
        for (int k = 0; k < ob->npts; k++)
            fprintf(cs->anns, "%s%.2f, %.2f", k ? ", " : "", ob->pts[k].x, ob->pts[k].y);
        fprintf(cs->anns, "]]}");
        cs->n_anns++;
        if (i != s->crowd_obj) continue;
        /* Uncompressed RLE of the crowd box: column-major runs, starting with background. */
        const int h = s->h, bh = s->cy1 - s->cy0;
        fprintf(cs->anns,
                ",\n{\"id\": %ld, \"image_id\": %ld, \"category_id\": %d, \"iscrowd\": 1, "
                "\"area\": %ld, \"bbox\": [%d, %d, %d, %d], \"segmentation\": {\"counts\": [%ld",
                ++g->next_ann_id, image_id, coco91_ids[ob->cls], (long)(s->cx1 - s->cx0) * bh,
                s->cx0, s->cy0, s->cx1 - s->cx0, bh, (long)s->cx0 * h + s->cy0);
        for (int x = s->cx0; x < s->cx1; x++) {
            const long zeros =
                x + 1 < s->cx1 ? (long)(h - bh) : (long)(h - s->cy1) + (long)(s->w - s->cx1) * h;
            fprintf(cs->anns, ", %d, %ld", bh, zeros);
        }
        fprintf(cs->anns, "], \"size\": [%d, %d]}}", s->h, s->w);
        cs->n_anns++;
    }
}

static void coco_open(struct coco_split *cs)
{
    memset(cs, 0, sizeof(*cs));
    cs->images = open_memstream(&cs->images_buf, &cs->images_len);
    cs->anns = tmpfile();
    if (!cs->images || !cs->anns)
        die("check that $TMPDIR is writable", "cannot open temporary streams: %s", strerror(errno));
}

/* Assemble annotations/instances_<split>.json; returns its path in out_path. */
static void coco_close(struct gen *g, struct coco_split *cs, const struct split *sp, char *out_path,
                       size_t cap)
{
    const struct options *o = g->o;
    path_join(out_path, cap, "%s/annotations/instances_%s.json", o->out_dir, sp->name);
    FILE *f = fopen(out_path, "w");
    if (!f) die("check permissions", "cannot create %s: %s", out_path, strerror(errno));
    if (fclose(cs->images)) die(NULL, "cannot build %s", out_path);
    fprintf(f,
            "{\"info\": {\"description\": \"yolo-synth shapes, seed %llu, %d classes\", "
            "\"version\": \"1.0\", \"year\": 2017, \"contributor\": \"yolo-synth\"},\n"
            "\"licenses\": [{\"id\": 1, \"name\": \"CC0 1.0\", "
            "\"url\": \"https://creativecommons.org/publicdomain/zero/1.0/\"}],\n"
            "\"images\": [\n",
            (unsigned long long)o->seed, o->classes);
    fwrite(cs->images_buf, 1, cs->images_len, f);
    fprintf(f, "],\n\"annotations\": [\n");
    check_stream(cs->anns, "a temporary file");
    rewind(cs->anns);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), cs->anns)) > 0)
        fwrite(buf, 1, n, f);
    if (ferror(cs->anns)) die(NULL, "cannot read back a temporary file");
    fprintf(f, "],\n\"categories\": [\n");
    for (int k = 0; k < o->classes; k++)
        fprintf(f, "%s{\"supercategory\": \"shape\", \"id\": %d, \"name\": \"%s\"}", k ? ",\n" : "",
                coco91_ids[k], synth_class_name(k));
    fprintf(f, "]}\n");
    check_stream(f, out_path);
    if (fclose(f)) die("check free space", "cannot write %s", out_path);
    fclose(cs->anns);
    free(cs->images_buf);
    memset(cs, 0, sizeof(*cs));
}

/* ---- writing samples ----------------------------------------------------------------------- */

static void broken_note(struct gen *g, int kind, const char *rel, const char *fmt, ...)
{
    va_list ap;
    fprintf(g->broken_txt, "%s\t%s\t", broken_names[kind], rel);
    va_start(ap, fmt);
    vfprintf(g->broken_txt, fmt, ap);
    va_end(ap);
    fputc('\n', g->broken_txt);
}

/* Write a normal image: JPEG, label file and COCO entries. */
static void emit_normal(struct gen *g, struct coco_split *cs, const struct split *sp, long id)
{
    const struct options *o = g->o;
    char name[32], path[PATH_MAX];
    snprintf(name, sizeof(name), "%012ld", id);
    const unsigned long n =
        encode(g, g->rgb, g->s.w, g->s.h, TJPF_RGB, TJSAMP_420, TJFLAG_ACCURATEDCT, name);
    path_join(path, sizeof(path), "%s/images/%s/%s.jpg", o->out_dir, sp->name, name);
    write_file(path, g->jpeg, n);
    if (o->format & FMT_YOLO) {
        path_join(path, sizeof(path), "%s/labels/%s/%s.txt", o->out_dir, sp->name, name);
        write_labels(g, path, NULL, NULL, 0);
    }
    if (o->format & FMT_COCO) {
        char file_name[48];
        snprintf(file_name, sizeof(file_name), "%s.jpg", name);
        coco_image(cs, id, file_name, g->s.w, g->s.h);
        coco_annotations(g, cs, id);
    }
}

/* Rotate the displayed image in g->rgb into the stored image in g->rgb2 for EXIF orientation
 * o (3, 6 or 8), so that applying the orientation to the stored image shows the displayed one. */
static void store_for_orientation(struct gen *g, int orient, int *sw, int *sh)
{
    const int W = g->s.w, H = g->s.h;
    *sw = orient == 3 ? W : H;
    *sh = orient == 3 ? H : W;
    for (int r = 0; r < *sh; r++) {
        for (int c = 0; c < *sw; c++) {
            int x, y; /* displayed pixel shown at stored (row r, column c) */
            if (orient == 3) {
                x = W - 1 - c;
                y = H - 1 - r;
            } else if (orient == 6) { /* row 0 is the visual right edge, column 0 the top */
                x = W - 1 - r;
                y = c;
            } else { /* 8: row 0 is the visual left edge, column 0 the bottom */
                x = r;
                y = H - 1 - c;
            }
            memcpy(g->rgb2 + ((size_t)r * (size_t)*sw + (size_t)c) * 3,
                   g->rgb + ((size_t)y * (size_t)W + (size_t)x) * 3, 3);
        }
    }
}

/* One broken sample of the given kind; variant distinguishes the EXIF orientations. */
static void emit_broken(struct gen *g, struct coco_split *cs, const struct split *sp, int kind,
                        int variant)
{
    const struct options *o = g->o;
    const int yolo = o->format & FMT_YOLO, coco = o->format & FMT_COCO;
    const long id = ++g->next_broken_id;
    struct synth_rng rng;
    char base[64], img_rel[PATH_MAX], lab_rel[PATH_MAX], path[PATH_MAX];
    int w, h;

    if (variant)
        snprintf(base, sizeof(base), "broken-%s-%d", broken_names[kind], variant);
    else
        snprintf(base, sizeof(base), "broken-%s", broken_names[kind]);
    path_join(img_rel, sizeof(img_rel), "images/%s/%s.jpg", sp->name, base);
    path_join(lab_rel, sizeof(lab_rel), "labels/%s/%s.txt", sp->name, base);
    /* Streams for broken samples live apart from the normal ids' streams. */
    synth_rng_init(&rng, o->seed,
                   0x8000000000000000ULL | ((uint64_t)kind << 8) | (uint64_t)variant);
    sample_size(g, &rng, &w, &h);
    const int is_label_kind =
        kind == BK_BAD_LABEL_ROW || kind == BK_LABEL_OUT_OF_RANGE || kind == BK_DUPLICATE_LABEL;
    make_sample(g, &rng, w, h, is_label_kind ? 2 : 1);
    const struct sample *s = &g->s;

    /* The image file. */
    unsigned long n = 0;
    const void *img = g->jpeg;
    int write_image = 1;
    char jpeg_note[160] = "";
    switch (kind) {
    case BK_TRUNCATED_JPEG:
        n = encode(g, g->rgb, w, h, TJPF_RGB, TJSAMP_420, TJFLAG_ACCURATEDCT, base);
        snprintf(jpeg_note, sizeof(jpeg_note), "JPEG cut to %lu of its %lu bytes (no EOI)", n / 2,
                 n);
        n /= 2;
        break;
    case BK_NOT_JPEG: {
        static const char text[] = "This is not a JPEG file: yolo-synth wrote plain text here to "
                                   "test how readers handle a file that lies about its type.\n";
        img = text;
        n = sizeof(text) - 1;
        snprintf(jpeg_note, sizeof(jpeg_note), "plain text named .jpg");
        break;
    }
    case BK_EMPTY_IMAGE:
        n = 0;
        snprintf(jpeg_note, sizeof(jpeg_note), "0-byte file");
        break;
    case BK_MISSING_IMAGE:
        write_image = 0;
        break;
    case BK_GREY:
        n = encode(g, g->rgb, w, h, TJPF_RGB, TJSAMP_GRAY, TJFLAG_ACCURATEDCT, base);
        snprintf(jpeg_note, sizeof(jpeg_note), "greyscale JPEG (1 component)");
        break;
    case BK_CMYK: {
        /* Adobe-style inverted CMYK, the way Photoshop writes it and OpenCV reads it:
         * R = C*K/255 (likewise G from M, B from Y). */
        const size_t np = (size_t)w * (size_t)h;
        for (size_t i = 0; i < np; i++) {
            const uint8_t *q = g->rgb + 3 * i;
            uint8_t *d = g->rgb2 + 4 * i;
            int k = q[0] > q[1] ? q[0] : q[1];
            if (q[2] > k) k = q[2];
            for (int c = 0; c < 3; c++)
                d[c] = (uint8_t)(k ? (q[c] * 255 + k / 2) / k : 0);
            d[3] = (uint8_t)k;
        }
        n = encode(g, g->rgb2, w, h, TJPF_CMYK, TJSAMP_420, TJFLAG_ACCURATEDCT, base);
        snprintf(jpeg_note, sizeof(jpeg_note),
                 "CMYK JPEG (YCCK, Adobe inverted: R = C*K/255 as OpenCV reads it)");
        break;
    }
    case BK_EXIF_ROTATE: {
        int sw, sh;
        store_for_orientation(g, variant, &sw, &sh);
        n = encode(g, g->rgb2, sw, sh, TJPF_RGB, TJSAMP_420, TJFLAG_ACCURATEDCT, base);
        snprintf(jpeg_note, sizeof(jpeg_note),
                 "EXIF Orientation %d (%s-endian TIFF); stored %dx%d, displayed %dx%d; labels "
                 "describe the displayed image",
                 variant, variant == 6 ? "little" : "big", sw, sh, w, h);
        break;
    }
    case BK_PROGRESSIVE:
        n = encode(g, g->rgb, w, h, TJPF_RGB, TJSAMP_420, TJFLAG_ACCURATEDCT | TJFLAG_PROGRESSIVE,
                   base);
        snprintf(jpeg_note, sizeof(jpeg_note), "progressive JPEG (SOF2)");
        break;
    default:
        n = encode(g, g->rgb, w, h, TJPF_RGB, TJSAMP_420, TJFLAG_ACCURATEDCT, base);
        break;
    }
    if (write_image) {
        path_join(path, sizeof(path), "%s/%s", o->out_dir, img_rel);
        if (kind == BK_EXIF_ROTATE) {
            /* Splice APP1 in after TurboJPEG's JFIF APP0, where cameras' files carry it. */
            uint8_t app1[128];
            const size_t la = exif_app1(app1, variant, variant != 6);
            size_t at = 2;
            if (n > 6 && g->jpeg[2] == 0xff && g->jpeg[3] == 0xe0)
                at = 4 + ((size_t)g->jpeg[4] << 8 | g->jpeg[5]);
            const void *parts[3] = { g->jpeg, app1, g->jpeg + at };
            const size_t lens[3] = { at, la, n - at };
            write_parts(path, parts, lens, 3);
        } else {
            write_file(path, img, n);
        }
        if (jpeg_note[0]) broken_note(g, kind, img_rel, "%s", jpeg_note);
    }

    /* The labels. */
    if (yolo) {
        path_join(path, sizeof(path), "%s/%s", o->out_dir, lab_rel);
        char row[128];
        switch (kind) {
        case BK_BAD_LABEL_ROW: {
            const char *extra[2] = { "0 abc 0.500000 0.200000 0.200000\n",
                                     "1 0.500000 0.500000 0.200000\n" };
            const int at[2] = { 1, s->nobj };
            write_labels(g, path, extra, at, 2);
            broken_note(g, kind, lab_rel, "line 2: non-numeric field; line %d: 4 columns",
                        s->nobj + 2);
            break;
        }
        case BK_LABEL_OUT_OF_RANGE: {
            const char *extra[2] = { "0 1.250000 0.500000 0.100000 0.100000\n",
                                     "1 0.500000 -0.100000 0.100000 0.100000\n" };
            const int at[2] = { 1, s->nobj };
            write_labels(g, path, extra, at, 2);
            broken_note(g, kind, lab_rel, "line 2: cx 1.25 > 1; line %d: cy -0.1 < 0", s->nobj + 2);
            break;
        }
        case BK_DUPLICATE_LABEL: {
            label_row(row, sizeof(row), s, &s->objs[0]);
            const char *extra[1] = { row };
            const int at[1] = { s->nobj };
            write_labels(g, path, extra, at, 1);
            broken_note(g, kind, lab_rel, "line %d repeats line 1", s->nobj + 1);
            break;
        }
        default:
            write_labels(g, path, NULL, NULL, 0);
            break;
        }
        if (kind == BK_MISSING_IMAGE)
            broken_note(g, kind, lab_rel, "label file whose image %s does not exist", img_rel);
    }
    if (coco) {
        coco_image(cs, id, strrchr(img_rel, '/') + 1, w, h);
        coco_annotations(g, cs, id);
        if (kind == BK_MISSING_IMAGE)
            broken_note(g, kind, img_rel,
                        "absent; named by annotations/instances_%s.json (image id %ld)", sp->name,
                        id);
    }
}

static void emit_broken_all(struct gen *g, struct coco_split *cs, const struct split *sp)
{
    const struct options *o = g->o;
    for (int k = 0; k < BK_COUNT; k++) {
        if (!(o->broken & (1u << k))) continue;
        const int label_kind =
            k == BK_BAD_LABEL_ROW || k == BK_LABEL_OUT_OF_RANGE || k == BK_DUPLICATE_LABEL;
        if (label_kind && !(o->format & FMT_YOLO)) {
            fprintf(stderr,
                    "yolo-synth: note: --broken %s needs YOLO labels; skipped with --format coco\n",
                    broken_names[k]);
            continue;
        }
        if (k == BK_BAD_JSON) continue; /* written once the split's JSON is complete */
        if (k == BK_EXIF_ROTATE) {
            emit_broken(g, cs, sp, k, 3);
            emit_broken(g, cs, sp, k, 6);
            emit_broken(g, cs, sp, k, 8);
        } else {
            emit_broken(g, cs, sp, k, 0);
        }
    }
}

/* instances_<split>_bad.json: the first half (at most 64 KiB) of the real file, so the JSON
 * stops mid-value. */
static void emit_bad_json(struct gen *g, const struct split *sp, const char *json_path)
{
    const struct options *o = g->o;
    char rel[PATH_MAX], path[PATH_MAX];
    FILE *f = fopen(json_path, "rb");
    if (!f) die(NULL, "cannot reopen %s: %s", json_path, strerror(errno));
    static char buf[1 << 17];
    const size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    size_t cut = n / 2;
    if (cut > 65536) cut = 65536;
    path_join(rel, sizeof(rel), "annotations/instances_%s_bad.json", sp->name);
    path_join(path, sizeof(path), "%s/%s", o->out_dir, rel);
    write_file(path, buf, cut);
    broken_note(g, BK_BAD_JSON, rel, "JSON truncated at byte %zu (of instances_%s.json)", cut,
                sp->name);
}

static void write_yaml(const struct options *o)
{
    char path[PATH_MAX];
    const char *keys[3] = { "train", "val", "test" };
    const char *found[3] = { NULL, NULL, NULL };
    for (int i = 0; i < o->n_splits; i++)
        for (int k = 0; k < 3; k++)
            if (!found[k] && !strncmp(o->splits[i].name, keys[k], strlen(keys[k])))
                found[k] = o->splits[i].name;
    /* ultralytics needs train and val: fall back to the first splits given. */
    if (!found[0] && o->n_splits > 0) found[0] = o->splits[0].name;
    if (!found[1] && o->n_splits > 0)
        found[1] = o->n_splits > 1 && o->splits[1].name != found[0] ? o->splits[1].name : found[0];
    path_join(path, sizeof(path), "%s/synth.yaml", o->out_dir);
    FILE *f = fopen(path, "w");
    if (!f) die("check permissions", "cannot create %s: %s", path, strerror(errno));
    fprintf(f,
            "# Synthetic shapes dataset written by yolo-synth (seed %llu, %d classes).\n"
            "# path is the dataset root, relative to this file's folder.\n"
            "path: .\n",
            (unsigned long long)o->seed, o->classes);
    for (int k = 0; k < 3; k++)
        if (found[k]) fprintf(f, "%s: images/%s\n", keys[k], found[k]);
    fprintf(f, "\nnc: %d\nnames: [", o->classes);
    for (int k = 0; k < o->classes; k++)
        fprintf(f, "%s%s", k ? ", " : "", synth_class_name(k));
    fprintf(f, "]\n");
    check_stream(f, path);
    if (fclose(f)) die("check free space", "cannot write %s", path);
}

int main(int argc, char **argv)
{
    struct options o;
    struct gen g;
    parse_args(argc, argv, &o);
    prepare_out_dir(&o);

    memset(&g, 0, sizeof(g));
    g.o = &o;
    const size_t maxpx = (size_t)o.max_side * (size_t)o.max_side;
    g.rgb = malloc(maxpx * 3);
    g.rgb2 = malloc(maxpx * 4);
    g.ids = malloc(maxpx);
    g.scratch = malloc(synth_background_scratch(o.max_side, o.max_side));
    g.span_cap = o.max_side * 8;
    g.spans = malloc((size_t)g.span_cap * sizeof(*g.spans));
    g.objs = malloc(SYNTH_MAX_OBJECTS * sizeof(*g.objs));
    g.jpeg_cap = tjBufSize(o.max_side, o.max_side, TJSAMP_444);
    g.jpeg = tjAlloc((int)g.jpeg_cap);
    g.tj = tjInitCompress();
    if (!g.rgb || !g.rgb2 || !g.ids || !g.scratch || !g.spans || !g.objs || !g.jpeg || !g.tj)
        die("try a smaller --max-side", "out of memory");
    g.s.objs = g.objs;
    for (int i = 0; i < o.n_splits; i++)
        g.total_images += o.splits[i].count;
    g.next_broken_id = g.total_images;

    char path[PATH_MAX];
    if (o.broken) {
        path_join(path, sizeof(path), "%s/broken.txt", o.out_dir);
        g.broken_txt = fopen(path, "w");
        if (!g.broken_txt) die("check permissions", "cannot create %s: %s", path, strerror(errno));
        fprintf(
            g.broken_txt,
            "# yolo-synth --broken: kind<TAB>path (relative to this folder)<TAB>what is wrong\n");
    }

    long id = 0;
    for (int si = 0; si < o.n_splits; si++) {
        const struct split *sp = &o.splits[si];
        struct coco_split cs;
        memset(&cs, 0, sizeof(cs));
        if (o.format & FMT_COCO) coco_open(&cs);
        for (long i = 0; i < sp->count; i++) {
            struct synth_rng rng;
            int w, h;
            id++;
            synth_rng_init(&rng, o.seed, (uint64_t)id);
            sample_size(&g, &rng, &w, &h);
            make_sample(&g, &rng, w, h, 0);
            emit_normal(&g, &cs, sp, id);
        }
        if (si == 0 && o.broken) emit_broken_all(&g, &cs, sp);
        if (o.format & FMT_COCO) {
            coco_close(&g, &cs, sp, path, sizeof(path));
            if (si == 0 && (o.broken & (1u << BK_BAD_JSON))) emit_bad_json(&g, sp, path);
        }
    }
    if ((o.broken & (1u << BK_BAD_JSON)) && !(o.format & FMT_COCO))
        fprintf(
            stderr,
            "yolo-synth: note: --broken bad-json needs COCO output; skipped with --format yolo\n");
    if (o.format & FMT_YOLO) write_yaml(&o);
    if (g.broken_txt) {
        check_stream(g.broken_txt, "broken.txt");
        if (fclose(g.broken_txt)) die("check free space", "cannot write broken.txt");
    }

    tjDestroy(g.tj);
    tjFree(g.jpeg);
    free(g.rgb);
    free(g.rgb2);
    free(g.ids);
    free(g.scratch);
    free(g.spans);
    free(g.objs);
    return 0;
}
