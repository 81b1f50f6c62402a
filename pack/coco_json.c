/*
 * COCO instances JSON, parsed streaming with yajl.
 *
 * Why yajl: COCO's instances_train2017.json is ~450 MB; a DOM parser (cJSON, json-c, jansson) needs
 * several times that in memory. yajl (Debian libyajl-dev 2.1.0, with Debian's security fixes) is
 * the one SAX-style C JSON parser packaged in Debian: it hands us tokens from fixed-size chunks and
 * keeps only a small nesting stack, so memory is what we keep (images, boxes in double, polygons
 * in float32) and never a tree of the file. Numbers come as text (yajl_number) and are converted
 * by pack_ds_parse_number, correctly rounded like Python's json module.
 *
 * What is kept follows JSON2YOLO convert_coco_json (see dataset.h): images{id, file_name, width,
 * height}, annotations{id, image_id, category_id, bbox, iscrowd, segmentation}, categories{id,
 * name}; every other key is skipped without storing. Key order inside the file does not matter
 * (real COCO files put categories last), so class mapping and box normalisation happen in
 * pack_coco_emit, after the whole file is read. Structural errors (the top level is not an object,
 * images/annotations/categories not arrays of objects, a repeated top-level key, a bad category)
 * stop the parse with -PACK_DS_ESCHEMA naming the byte offset and line; a bad field inside one
 * image or annotation drops that entry with a warning.
 *
 * Polygons: the parts of one annotation are buffered in double; several parts are merged into
 * one as JSON2YOLO's merge_multi_segment does (pixel space, its quirks included: a middle part
 * that is entered at a higher index than it is left is reversed without re-indexing), then stored
 * as float32 pixel coordinates until the image size is known. An unusable polygon (odd count,
 * empty part, non-finite value, RLE on a non-crowd annotation, flat list) drops the polygon and
 * keeps the box, with a warning: JSON2YOLO would crash or write a row that ultralytics then
 * rejects with the whole image.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yajl/yajl_parse.h>

#include "dataset_internal.h"
#include "ffr.h"

#define CHUNK_BYTES      ((size_t)256 << 10)
#define MIN_REGION_BYTES ((uint64_t)4 << 20)
#define MAX_THREADS      16
#define NAME_MAX_LEN     4096
#define MAX_DIM          (1u << 30)

/* COCO's 80 detection categories: id and name in ascending id order. coco91_to_coco80_class in
 * ultralytics is the inverse of this list (id -> position). */
const uint8_t pack_coco80_ids[80] = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21,
    22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
    46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
    67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
};

const char *const pack_coco80_names[80] = {
    "person",        "bicycle",      "car",
    "motorcycle",    "airplane",     "bus",
    "train",         "truck",        "boat",
    "traffic light", "fire hydrant", "stop sign",
    "parking meter", "bench",        "bird",
    "cat",           "dog",          "horse",
    "sheep",         "cow",          "elephant",
    "bear",          "zebra",        "giraffe",
    "backpack",      "umbrella",     "handbag",
    "tie",           "suitcase",     "frisbee",
    "skis",          "snowboard",    "sports ball",
    "kite",          "baseball bat", "baseball glove",
    "skateboard",    "surfboard",    "tennis racket",
    "bottle",        "wine glass",   "cup",
    "fork",          "knife",        "spoon",
    "bowl",          "banana",       "apple",
    "sandwich",      "orange",       "broccoli",
    "carrot",        "hot dog",      "pizza",
    "donut",         "cake",         "chair",
    "couch",         "potted plant", "bed",
    "dining table",  "toilet",       "tv",
    "laptop",        "mouse",        "remote",
    "keyboard",      "cell phone",   "microwave",
    "oven",          "toaster",      "sink",
    "refrigerator",  "book",         "clock",
    "vase",          "scissors",     "teddy bear",
    "hair drier",    "toothbrush",
};

/* ---------------------------------------------------------------------------------------------
 * Stored entries
 * ------------------------------------------------------------------------------------------- */

enum seg_state {
    SEG_NONE = 0, /* no segmentation key, or an empty list: box only, silently */
    SEG_POLY = 1, /* one or more parts in the point store */
    SEG_BAD = 2,  /* unusable: see seg_why */
};

struct coco_img {
    int64_t id;
    char *file_name;
    uint32_t w, h;
    uint32_t line;
    char *path;  /* at emit: image_dir/file_name */
    bool usable; /* at emit: exists and not a repeat */
};

struct coco_ann {
    int64_t id; /* -1 when absent */
    int64_t image_id;
    int64_t cat;
    double bbox[4];
    size_t pt_off; /* polygon (merged) in c->pts, float32 pixel x y */
    uint32_t n_pts;
    uint32_t line;
    uint8_t seg;     /* enum seg_state */
    uint8_t seg_why; /* index into seg_whys when SEG_BAD */
};

struct coco_cat {
    int64_t id;
    char *name;
    uint32_t line;
};

static const char *const seg_whys[] = {
    "",
    "odd number of polygon values",
    "empty polygon part",
    "non-numeric or non-finite polygon value",
    "RLE segmentation on a non-crowd annotation",
    "segmentation is not a list of polygons",
};

enum { WHY_NONE, WHY_ODD, WHY_EMPTY, WHY_VALUE, WHY_RLE, WHY_SHAPE };

/* ---------------------------------------------------------------------------------------------
 * Parser state
 * ------------------------------------------------------------------------------------------- */

enum state {
    ST_START,  /* before the top-level value */
    ST_ROOT,   /* in the top-level object */
    ST_IMAGES, /* in the images array */
    ST_IMAGE,  /* in one image object */
    ST_ANNS,
    ST_ANN,
    ST_BBOX,     /* in annotation.bbox */
    ST_SEG,      /* in annotation.segmentation (list of parts) */
    ST_SEG_PART, /* in one polygon part */
    ST_CATS,
    ST_CAT,
    ST_DONE,
};

enum field {
    F_NONE,
    F_OTHER,
    F_IMAGES,
    F_ANNS,
    F_CATS,
    F_ID,
    F_FILE_NAME,
    F_WIDTH,
    F_HEIGHT,
    F_IMAGE_ID,
    F_CATEGORY_ID,
    F_BBOX,
    F_ISCROWD,
    F_SEGMENTATION,
    F_NAME,
};

/* What the current image / annotation / category object has shown so far. */
struct cur_entry {
    bool has_id, id_bad;
    int64_t id;
    /* image */
    char *file_name;
    bool fname_bad;
    double w, h;
    bool has_w, has_h;
    /* annotation */
    bool has_image_id, image_id_bad;
    int64_t image_id;
    bool has_cat, cat_bad;
    int64_t cat;
    int n_bbox; /* numbers seen in bbox; -1 = malformed */
    double bbox[4];
    bool crowd;
    enum seg_state seg;
    int seg_why;
    /* category */
    char *name;
    bool name_bad;
    uint32_t line;
};

struct pack_coco {
    struct pack_ds *ds;
    char *json_path;
    yajl_handle h;
    enum state st;
    enum field field;
    int64_t skip; /* > 0: inside a skipped value, this many containers deep */
    bool seen[3]; /* images, annotations, categories arrays seen */
    int rc;       /* error that stopped the parse */
    /* position */
    const unsigned char *chunk;
    uint64_t base;     /* bytes before the current chunk */
    uint64_t line_pos; /* newlines counted up to this absolute offset */
    uint32_t line;     /* line number at line_pos */
    /* entries */
    struct cur_entry cur;
    struct coco_img *imgs;
    size_t n_imgs, cap_imgs;
    struct coco_ann *anns;
    size_t n_anns, cap_anns;
    struct coco_cat *cats;
    size_t n_cats, cap_cats;
    float *pts; /* float32 pixel x y */
    size_t n_pts, cap_pts;
    /* polygon parts of the current annotation */
    double *seg_xy;
    size_t n_seg, cap_seg; /* values */
    size_t *part_end;      /* value index where each part ends */
    size_t n_parts, cap_parts;
    bool store_polygons;
    /* image id -> index */
    int64_t *hkeys;
    uint32_t *hvals;
    size_t hcap, hn;
    /* parallel parse (see "Parsing in parallel") */
    struct pack_ds_stats *stats; /* &ds->st; a region parser's own_stats */
    struct pack_ds_stats own_stats;
    bool region;        /* a region parser: never touches ds, gives up where the file warns */
    bool wrap_close;    /* region: feeding the `]` that closes its wrapper array */
    uint64_t ann_close; /* offset just past the `}` that last closed an annotation */
    uint64_t arr_close; /* region: offset of the `]` that closed the annotations array */
    const atomic_bool *cancel;
    unsigned threads; /* 0 = one per core, at most 16 */
    uint64_t min_region;
    size_t read_bytes; /* the main parser reads on a grid of this step (see parse_file) */
    size_t regions_taken;
};

/* Region parsers' internal outcomes (c->rc); never returned from this file. */
#define R_FAIL   (-1) /* the region must be parsed in sequence: an error, a warning, a bad cut */
#define R_CLOSED 1    /* the annotations array ended inside the region, at arr_close */

/* double -> float32 without undefined behaviour for values beyond float's range. */
static float to_f32(double d)
{
    if (d > FLT_MAX) return INFINITY;
    if (d < -FLT_MAX) return -INFINITY;
    return (float)d;
}

/* Integral value usable as an id. */
static bool as_int(double d, int64_t *out)
{
    if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0) return false;
    *out = (int64_t)d;
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Image id hash (open addressing)
 * ------------------------------------------------------------------------------------------- */

static size_t hslot(int64_t k, size_t cap)
{
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

/* Returns the index stored for k, or -1. */
static int64_t hget(const struct pack_coco *c, int64_t k)
{
    if (!c->hcap) return -1;
    for (size_t i = hslot(k, c->hcap);; i = (i + 1) & (c->hcap - 1)) {
        if (c->hvals[i] == UINT32_MAX) return -1;
        if (c->hkeys[i] == k) return c->hvals[i];
    }
}

static int hput(struct pack_coco *c, int64_t k, uint32_t v)
{
    if (2 * (c->hn + 1) > c->hcap) {
        const size_t ncap = c->hcap ? 2 * c->hcap : 1024;
        int64_t *nk = malloc(ncap * sizeof *nk);
        uint32_t *nv = malloc(ncap * sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -ENOMEM;
        }
        memset(nv, 0xff, ncap * sizeof *nv);
        for (size_t i = 0; i < c->hcap; i++) {
            if (c->hvals[i] == UINT32_MAX) continue;
            size_t j = hslot(c->hkeys[i], ncap);
            while (nv[j] != UINT32_MAX)
                j = (j + 1) & (ncap - 1);
            nk[j] = c->hkeys[i];
            nv[j] = c->hvals[i];
        }
        free(c->hkeys);
        free(c->hvals);
        c->hkeys = nk;
        c->hvals = nv;
        c->hcap = ncap;
    }
    size_t i = hslot(k, c->hcap);
    while (c->hvals[i] != UINT32_MAX)
        i = (i + 1) & (c->hcap - 1);
    c->hkeys[i] = k;
    c->hvals[i] = v;
    c->hn++;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Position and errors
 * ------------------------------------------------------------------------------------------- */

/* Absolute offset of the parse: inside a feed, where yajl is; between feeds, the bytes fed. */
static uint64_t cur_offset(const struct pack_coco *c)
{
    return c->base + (c->chunk ? yajl_get_bytes_consumed(c->h) : 0);
}

static uint32_t count_lines(const unsigned char *p, size_t n)
{
    uint32_t k = 0;
    for (const unsigned char *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))); p++)
        k++;
    return k;
}

/* Line at absolute offset off (>= line_pos, within the current chunk); counting only forward
 * keeps the total cost linear in the file size. */
static uint32_t line_at(struct pack_coco *c, uint64_t off)
{
    if (off > c->line_pos && c->chunk) {
        c->line += count_lines(c->chunk + (c->line_pos - c->base), (size_t)(off - c->line_pos));
        c->line_pos = off;
    }
    return c->line;
}

__attribute__((format(printf, 3, 4))) static int stop(struct pack_coco *c, int rc, const char *fmt,
                                                      ...)
{
    if (c->region) {
        c->rc = R_FAIL;
        return 0;
    }
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    const uint64_t off = cur_offset(c);
    c->rc = pack_ds_fail(c->ds, rc, "%s: %s at byte %llu (line %u)", c->json_path, body,
                         (unsigned long long)off, line_at(c, off));
    return 0; /* yajl: cancel */
}

/* A warning from inside the parse; returns the yajl continue flag. */
#define WARN(c, kind, id, ...)                                                           \
    do {                                                                                 \
        if ((c)->region) {                                                               \
            (c)->rc = R_FAIL;                                                            \
            return 0;                                                                    \
        }                                                                                \
        const int w_rc_ =                                                                \
            pack_ds_warn((c)->ds, kind, (c)->json_path, (c)->cur.line, id, __VA_ARGS__); \
        if (w_rc_) {                                                                     \
            (c)->rc = w_rc_;                                                             \
            return 0;                                                                    \
        }                                                                                \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * Polygons
 * ------------------------------------------------------------------------------------------- */

/* ultralytics/JSON2YOLO min_index: first (i, j) in row-major order with the smallest squared
 * distance. */
static void min_index(const double *a, size_t na, const double *b, size_t nb, size_t *ia,
                      size_t *ib)
{
    double best = INFINITY;
    bool any = false;
    *ia = *ib = 0;
    for (size_t i = 0; i < na; i++) {
        for (size_t j = 0; j < nb; j++) {
            const double dx = a[2 * i] - b[2 * j], dy = a[2 * i + 1] - b[2 * j + 1];
            const double d = dx * dx + dy * dy;
            if (!any || d < best) {
                best = d;
                *ia = i;
                *ib = j;
                any = true;
            }
        }
    }
}

static int out_push(double **o, size_t *n, size_t *cap, const double *xy, size_t npts)
{
    int rc = pack_ds_grow((void **)o, cap, *n + 2 * npts, sizeof **o);
    if (rc) return rc;
    memcpy(*o + *n, xy, 2 * npts * sizeof *xy);
    *n += 2 * npts;
    return 0;
}

/* merge_multi_segment over the parts in c->seg_xy / c->part_end; the result replaces seg_xy. */
static int merge_parts(struct pack_coco *c)
{
    const size_t np = c->n_parts;
    size_t *start = malloc(np * sizeof *start), *len = malloc(np * sizeof *len);
    size_t(*idx)[2] = malloc(np * sizeof *idx);
    size_t *nidx = calloc(np, sizeof *nidx);
    double **seg = calloc(np, sizeof *seg);
    double *out = NULL;
    size_t n_out = 0, cap_out = 0;
    int rc = (!start || !len || !idx || !nidx || !seg) ? -ENOMEM : 0;
    for (size_t i = 0; !rc && i < np; i++) {
        start[i] = i ? c->part_end[i - 1] : 0;
        len[i] = (c->part_end[i] - start[i]) / 2;
        /* one spare point for the closing copy of the first point */
        seg[i] = malloc(2 * (len[i] + 1) * sizeof **seg);
        if (!seg[i]) rc = -ENOMEM;
    }
    if (rc) goto out;
    for (size_t i = 1; i < np; i++) {
        size_t a, b;
        min_index(c->seg_xy + start[i - 1], len[i - 1], c->seg_xy + start[i], len[i], &a, &b);
        idx[i - 1][nidx[i - 1]++] = a;
        idx[i][nidx[i]++] = b;
    }
    /* forward pass */
    for (size_t i = 0; !rc && i < np; i++) {
        const double *src = c->seg_xy + start[i];
        const size_t n = len[i];
        size_t i0 = idx[i][0], i1 = nidx[i] == 2 ? idx[i][1] : 0;
        const bool rev = nidx[i] == 2 && i0 > i1;
        if (rev) {
            const size_t t = i0;
            i0 = i1;
            i1 = t;
        }
        /* np.roll(seg, -i0) of the (maybe reversed) part, then the first point again */
        for (size_t j = 0; j < n; j++) {
            const size_t k = (j + i0) % n;
            const size_t s = rev ? n - 1 - k : k;
            seg[i][2 * j] = src[2 * s];
            seg[i][2 * j + 1] = src[2 * s + 1];
        }
        seg[i][2 * n] = seg[i][0];
        seg[i][2 * n + 1] = seg[i][1];
        if (i == 0 || i == np - 1)
            rc = out_push(&out, &n_out, &cap_out, seg[i], n + 1);
        else
            rc = out_push(&out, &n_out, &cap_out, seg[i], i1 - i0 + 1);
    }
    /* backward pass over the middle parts: the rest of each, from the unswapped distance */
    for (size_t i = np; !rc && i-- > 0;) {
        if (i == 0 || i == np - 1) continue;
        const size_t d = idx[i][1] > idx[i][0] ? idx[i][1] - idx[i][0] : idx[i][0] - idx[i][1];
        rc = out_push(&out, &n_out, &cap_out, seg[i] + 2 * d, len[i] + 1 - d);
    }
    if (!rc) {
        free(c->seg_xy);
        c->seg_xy = out;
        c->n_seg = n_out;
        c->cap_seg = cap_out;
        out = NULL;
    }
out:
    for (size_t i = 0; seg && i < np; i++)
        free(seg[i]);
    free(seg);
    free(out);
    free(start);
    free(len);
    free(idx);
    free(nidx);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Committing entries
 * ------------------------------------------------------------------------------------------- */

static void cur_reset(struct pack_coco *c)
{
    free(c->cur.file_name);
    free(c->cur.name);
    memset(&c->cur, 0, sizeof c->cur);
    c->n_seg = 0;
    c->n_parts = 0;
}

static int commit_image(struct pack_coco *c)
{
    struct cur_entry *e = &c->cur;
    if (c->region) return stop(c, 0, "images in a region"); /* unreachable: see parse_region */
    const int64_t id = e->has_id && !e->id_bad ? e->id : -1;
    c->ds->st.images_found++;
    const char *why = NULL;
    if (!e->has_id || e->id_bad)
        why = "missing or non-integer id";
    else if (!e->file_name || e->fname_bad)
        why = "missing or invalid file_name";
    else if (!e->has_w || !e->has_h || !(e->w >= 1 && e->w <= MAX_DIM && e->w == floor(e->w)) ||
             !(e->h >= 1 && e->h <= MAX_DIM && e->h == floor(e->h)))
        why = "missing or invalid width/height";
    else if (hget(c, e->id) >= 0)
        why = "repeated image id";
    if (why) {
        c->ds->st.images_invalid++;
        WARN(c, PACK_DS_W_IMAGE_INVALID, id, "images[] entry id %lld: %s: skipped", (long long)id,
             why);
        return 1;
    }
    if (c->n_imgs >= UINT32_MAX - 1) return stop(c, -PACK_DS_ESCHEMA, "too many images");
    int rc = pack_ds_grow((void **)&c->imgs, &c->cap_imgs, c->n_imgs + 1, sizeof *c->imgs);
    if (!rc) rc = hput(c, e->id, (uint32_t)c->n_imgs);
    if (rc) return stop(c, rc, "out of memory");
    c->imgs[c->n_imgs++] = (struct coco_img){ .id = e->id,
                                              .file_name = e->file_name,
                                              .w = (uint32_t)e->w,
                                              .h = (uint32_t)e->h,
                                              .line = e->line };
    e->file_name = NULL;
    return 1;
}

static int commit_ann(struct pack_coco *c)
{
    struct cur_entry *e = &c->cur;
    const int64_t id = e->has_id && !e->id_bad ? e->id : -1;
    struct pack_ds_stats *st = c->stats;
    if (e->crowd) {
        st->crowd_skipped++;
        return 1;
    }
    if (!e->has_image_id || e->image_id_bad) {
        st->rows_no_image++;
        WARN(c, PACK_DS_W_ANN_INVALID, id, "annotation %lld: missing or non-integer image_id",
             (long long)id);
        return 1;
    }
    if (e->n_bbox != 4 || !isfinite(e->bbox[0]) || !isfinite(e->bbox[1]) || !isfinite(e->bbox[2]) ||
        !isfinite(e->bbox[3])) {
        st->rows_bad_box++;
        WARN(c, PACK_DS_W_ANN_INVALID, id,
             "annotation %lld: bbox is not 4 finite numbers [x, y, w, h]", (long long)id);
        return 1;
    }
    if (e->bbox[2] <= 0 || e->bbox[3] <= 0) {
        st->rows_bad_box++;
        WARN(c, PACK_DS_W_ANN_INVALID, id, "annotation %lld: bbox width %g or height %g <= 0",
             (long long)id, e->bbox[2], e->bbox[3]);
        return 1;
    }
    if (!e->has_cat || e->cat_bad) {
        st->rows_bad_category++;
        WARN(c, PACK_DS_W_ANN_INVALID, id, "annotation %lld: missing or non-integer category_id",
             (long long)id);
        return 1;
    }
    struct coco_ann a = { .id = id,
                          .image_id = e->image_id,
                          .cat = e->cat,
                          .bbox = { e->bbox[0], e->bbox[1], e->bbox[2], e->bbox[3] },
                          .line = e->line,
                          .seg = (uint8_t)e->seg,
                          .seg_why = (uint8_t)e->seg_why };
    if (!c->store_polygons || (e->seg == SEG_POLY && c->n_parts == 0))
        a.seg = SEG_NONE; /* polygons not wanted, or "segmentation": [] */
    if (a.seg == SEG_POLY) {
        for (size_t i = 0; i < c->n_parts; i++) {
            const size_t n = c->part_end[i] - (i ? c->part_end[i - 1] : 0);
            if (n == 0) {
                a.seg = SEG_BAD;
                a.seg_why = WHY_EMPTY;
            } else if (n % 2) {
                a.seg = SEG_BAD;
                a.seg_why = WHY_ODD;
            }
        }
    }
    if (a.seg == SEG_POLY) {
        if (c->n_parts > 1) {
            int rc = merge_parts(c);
            if (rc) return stop(c, rc, "out of memory");
        }
        const size_t npts = c->n_seg / 2;
        if (npts > UINT32_MAX) return stop(c, -PACK_DS_ESCHEMA, "polygon too large");
        int rc = pack_ds_grow((void **)&c->pts, &c->cap_pts, 2 * (c->n_pts + npts), sizeof *c->pts);
        if (rc) return stop(c, rc, "out of memory");
        a.pt_off = c->n_pts;
        a.n_pts = (uint32_t)npts;
        for (size_t i = 0; i < 2 * npts; i++)
            c->pts[2 * c->n_pts + i] = to_f32(c->seg_xy[i]);
        c->n_pts += npts;
    }
    int rc = pack_ds_grow((void **)&c->anns, &c->cap_anns, c->n_anns + 1, sizeof *c->anns);
    if (rc) return stop(c, rc, "out of memory");
    c->anns[c->n_anns++] = a;
    return 1;
}

static int commit_cat(struct pack_coco *c)
{
    struct cur_entry *e = &c->cur;
    if (c->region) return stop(c, 0, "categories in a region"); /* unreachable */
    if (!e->has_id || e->id_bad || e->id < 0 || e->id > INT32_MAX)
        return stop(c, -PACK_DS_ESCHEMA, "categories[%zu]: missing or invalid id", c->n_cats);
    if (!e->name || e->name_bad)
        return stop(c, -PACK_DS_ESCHEMA, "categories[%zu] (id %lld): missing or invalid name",
                    c->n_cats, (long long)e->id);
    for (size_t i = 0; i < c->n_cats; i++)
        if (c->cats[i].id == e->id)
            return stop(c, -PACK_DS_ESCHEMA, "categories: id %lld repeated", (long long)e->id);
    int rc = pack_ds_grow((void **)&c->cats, &c->cap_cats, c->n_cats + 1, sizeof *c->cats);
    if (rc) return stop(c, rc, "out of memory");
    c->cats[c->n_cats++] = (struct coco_cat){ .id = e->id, .name = e->name, .line = e->line };
    e->name = NULL;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * yajl callbacks
 * ------------------------------------------------------------------------------------------- */

enum vtype { V_NULL, V_BOOL, V_NUM, V_STR };

struct val {
    enum vtype t;
    bool b;
    double num;
    bool num_ok;
    const unsigned char *s;
    size_t len;
};

static const char *vtype_name(enum vtype t)
{
    return t == V_NULL ? "null" : t == V_BOOL ? "boolean" : t == V_NUM ? "number" : "string";
}

/* Python truthiness of a scalar (for iscrowd). */
static bool truthy(const struct val *v)
{
    switch (v->t) {
    case V_NULL:
        return false;
    case V_BOOL:
        return v->b;
    case V_NUM:
        return v->num != 0;
    case V_STR:
        return v->len != 0;
    }
    return false;
}

static int on_scalar(struct pack_coco *c, const struct val *v)
{
    if (c->skip) return 1;
    struct cur_entry *e = &c->cur;
    switch (c->st) {
    case ST_START:
        return stop(c, -PACK_DS_ESCHEMA, "top level is a %s, not an object", vtype_name(v->t));
    case ST_ROOT:
        if (c->field == F_IMAGES || c->field == F_ANNS || c->field == F_CATS)
            return stop(c, -PACK_DS_ESCHEMA, "%s is a %s, not an array",
                        c->field == F_IMAGES ? "images"
                        : c->field == F_ANNS ? "annotations"
                                             : "categories",
                        vtype_name(v->t));
        break;
    case ST_IMAGES:
    case ST_ANNS:
    case ST_CATS:
        return stop(c, -PACK_DS_ESCHEMA, "%s entry is a %s, not an object",
                    c->st == ST_IMAGES ? "images"
                    : c->st == ST_ANNS ? "annotations"
                                       : "categories",
                    vtype_name(v->t));
    case ST_IMAGE:
        switch (c->field) {
        case F_ID:
            e->has_id = true;
            e->id_bad = !(v->t == V_NUM && v->num_ok && as_int(v->num, &e->id));
            break;
        case F_FILE_NAME:
            free(e->file_name);
            e->file_name = NULL;
            e->fname_bad =
                v->t != V_STR || v->len == 0 || v->len > NAME_MAX_LEN || memchr(v->s, '\0', v->len);
            if (!e->fname_bad) {
                e->file_name = strndup((const char *)v->s, v->len);
                if (!e->file_name) return stop(c, -ENOMEM, "out of memory");
            }
            break;
        case F_WIDTH:
            e->has_w = true;
            e->w = v->t == V_NUM && v->num_ok ? v->num : -1;
            break;
        case F_HEIGHT:
            e->has_h = true;
            e->h = v->t == V_NUM && v->num_ok ? v->num : -1;
            break;
        default:
            break;
        }
        break;
    case ST_ANN:
        switch (c->field) {
        case F_ID:
            e->has_id = true;
            e->id_bad = !(v->t == V_NUM && v->num_ok && as_int(v->num, &e->id));
            break;
        case F_IMAGE_ID:
            e->has_image_id = true;
            e->image_id_bad = !(v->t == V_NUM && v->num_ok && as_int(v->num, &e->image_id));
            break;
        case F_CATEGORY_ID:
            e->has_cat = true;
            e->cat_bad = !(v->t == V_NUM && v->num_ok && as_int(v->num, &e->cat));
            break;
        case F_ISCROWD:
            e->crowd = truthy(v);
            break;
        case F_BBOX:
            e->n_bbox = -1;
            break; /* not a list */
        case F_SEGMENTATION:
            e->seg = SEG_BAD;
            e->seg_why = WHY_SHAPE;
            break;
        default:
            break;
        }
        break;
    case ST_BBOX:
        if (v->t != V_NUM || !v->num_ok || e->n_bbox < 0 || e->n_bbox >= 4)
            e->n_bbox = -1;
        else
            e->bbox[e->n_bbox++] = v->num;
        return 1;
    case ST_SEG: /* a number directly in the list: a flat polygon, which JSON2YOLO cannot read */
        e->seg = SEG_BAD;
        e->seg_why = WHY_SHAPE;
        return 1;
    case ST_SEG_PART:
        if (v->t != V_NUM || !v->num_ok || !isfinite(v->num)) {
            e->seg = SEG_BAD;
            e->seg_why = WHY_VALUE;
        } else if (e->seg == SEG_POLY && c->store_polygons) {
            if (pack_ds_grow((void **)&c->seg_xy, &c->cap_seg, c->n_seg + 1, sizeof *c->seg_xy))
                return stop(c, -ENOMEM, "out of memory");
            c->seg_xy[c->n_seg++] = v->num;
        }
        return 1;
    case ST_CAT:
        if (c->field == F_ID) {
            e->has_id = true;
            e->id_bad = !(v->t == V_NUM && v->num_ok && as_int(v->num, &e->id));
        } else if (c->field == F_NAME) {
            free(e->name);
            e->name = NULL;
            e->name_bad = v->t != V_STR || v->len > NAME_MAX_LEN || memchr(v->s, '\0', v->len);
            if (!e->name_bad) {
                e->name = strndup((const char *)v->s, v->len);
                if (!e->name) return stop(c, -ENOMEM, "out of memory");
            }
        }
        break;
    case ST_DONE:
        break;
    }
    c->field = F_NONE;
    return 1;
}

static int on_start(struct pack_coco *c, bool map)
{
    if (c->skip) {
        c->skip++;
        return 1;
    }
    struct cur_entry *e = &c->cur;
    switch (c->st) {
    case ST_START:
        if (!map) return stop(c, -PACK_DS_ESCHEMA, "top level is an array, not an object");
        c->st = ST_ROOT;
        return 1;
    case ST_ROOT:
        if (c->field == F_IMAGES || c->field == F_ANNS || c->field == F_CATS) {
            const int k = c->field - F_IMAGES;
            const char *nm = k == 0 ? "images" : k == 1 ? "annotations" : "categories";
            if (map) return stop(c, -PACK_DS_ESCHEMA, "%s is an object, not an array", nm);
            if (c->seen[k]) return stop(c, -PACK_DS_ESCHEMA, "%s given twice", nm);
            c->seen[k] = true;
            c->st = k == 0 ? ST_IMAGES : k == 1 ? ST_ANNS : ST_CATS;
            c->field = F_NONE;
            return 1;
        }
        c->skip = 1;
        return 1;
    case ST_IMAGES:
    case ST_ANNS:
    case ST_CATS:
        if (!map)
            return stop(c, -PACK_DS_ESCHEMA, "%s entry is an array, not an object",
                        c->st == ST_IMAGES ? "images"
                        : c->st == ST_ANNS ? "annotations"
                                           : "categories");
        cur_reset(c);
        e->line = line_at(c, cur_offset(c));
        c->st = c->st == ST_IMAGES ? ST_IMAGE : c->st == ST_ANNS ? ST_ANN : ST_CAT;
        c->field = F_NONE;
        return 1;
    case ST_ANN:
        if (c->field == F_BBOX && !map) {
            e->n_bbox = 0;
            c->st = ST_BBOX;
            return 1;
        }
        if (c->field == F_SEGMENTATION && !map) {
            e->seg = SEG_POLY;
            e->seg_why = WHY_NONE;
            c->n_seg = 0;
            c->n_parts = 0;
            c->st = ST_SEG;
            return 1;
        }
        if (c->field == F_SEGMENTATION) { /* RLE {counts, size} */
            e->seg = SEG_BAD;
            e->seg_why = WHY_RLE;
        } else if (c->field == F_BBOX) {
            e->n_bbox = -1;
        } else if (c->field == F_ID) {
            e->id_bad = e->has_id = true;
        } else if (c->field == F_IMAGE_ID) {
            e->image_id_bad = e->has_image_id = true;
        } else if (c->field == F_CATEGORY_ID) {
            e->cat_bad = e->has_cat = true;
        } else if (c->field == F_ISCROWD) {
            e->crowd = true; /* Python truthiness of a (non-empty) list or dict */
        }
        c->skip = 1;
        return 1;
    case ST_IMAGE:
        if (c->field == F_ID) e->id_bad = e->has_id = true;
        if (c->field == F_FILE_NAME) e->fname_bad = true;
        if (c->field == F_WIDTH) e->has_w = true, e->w = -1;
        if (c->field == F_HEIGHT) e->has_h = true, e->h = -1;
        c->skip = 1;
        return 1;
    case ST_CAT:
        if (c->field == F_ID) e->id_bad = e->has_id = true;
        if (c->field == F_NAME) e->name_bad = true;
        c->skip = 1;
        return 1;
    case ST_BBOX:
        e->n_bbox = -1;
        c->skip = 1;
        return 1;
    case ST_SEG:
        if (map) {
            e->seg = SEG_BAD;
            e->seg_why = WHY_SHAPE;
            c->skip = 1;
            return 1;
        }
        c->st = ST_SEG_PART;
        return 1;
    case ST_SEG_PART:
        e->seg = SEG_BAD;
        e->seg_why = WHY_SHAPE;
        c->skip = 1;
        return 1;
    case ST_DONE:
        break;
    }
    c->skip = 1;
    return 1;
}

static int on_end(struct pack_coco *c)
{
    if (c->skip) {
        if (--c->skip == 0) c->field = F_NONE;
        return 1;
    }
    int r = 1;
    switch (c->st) {
    case ST_ROOT:
        c->st = ST_DONE;
        break;
    case ST_ANNS:
        if (c->region && !c->wrap_close) {
            /* the real end of the array: the main parser goes on from this `]` */
            c->arr_close = cur_offset(c) - 1;
            line_at(c, c->arr_close);
            c->rc = R_CLOSED;
            return 0;
        }
        c->st = ST_ROOT;
        break;
    case ST_IMAGES:
    case ST_CATS:
        c->st = ST_ROOT;
        break;
    case ST_IMAGE:
        r = commit_image(c);
        c->st = ST_IMAGES;
        break;
    case ST_ANN:
        r = commit_ann(c);
        c->st = ST_ANNS;
        c->ann_close = cur_offset(c);
        if (c->cancel && atomic_load_explicit(c->cancel, memory_order_relaxed)) {
            c->rc = R_FAIL;
            return 0;
        }
        break;
    case ST_CAT:
        r = commit_cat(c);
        c->st = ST_CATS;
        break;
    case ST_BBOX:
        c->st = ST_ANN;
        break;
    case ST_SEG:
        c->st = ST_ANN;
        break;
    case ST_SEG_PART:
        if (c->cur.seg == SEG_POLY && c->store_polygons) {
            if (pack_ds_grow((void **)&c->part_end, &c->cap_parts, c->n_parts + 1,
                             sizeof *c->part_end))
                return stop(c, -ENOMEM, "out of memory");
            c->part_end[c->n_parts++] = c->n_seg;
        }
        c->st = ST_SEG;
        return 1;
    case ST_START:
    case ST_DONE:
        break;
    }
    c->field = F_NONE;
    return r;
}

static bool key_is(const unsigned char *k, size_t n, const char *s)
{
    return strlen(s) == n && memcmp(k, s, n) == 0;
}

static int cb_map_key(void *ctx, const unsigned char *k, size_t n)
{
    struct pack_coco *c = ctx;
    if (c->skip) return 1;
    enum field f = F_OTHER;
    switch (c->st) {
    case ST_ROOT:
        if (key_is(k, n, "images"))
            f = F_IMAGES;
        else if (key_is(k, n, "annotations"))
            f = F_ANNS;
        else if (key_is(k, n, "categories"))
            f = F_CATS;
        break;
    case ST_IMAGE:
        if (key_is(k, n, "id"))
            f = F_ID;
        else if (key_is(k, n, "file_name"))
            f = F_FILE_NAME;
        else if (key_is(k, n, "width"))
            f = F_WIDTH;
        else if (key_is(k, n, "height"))
            f = F_HEIGHT;
        break;
    case ST_ANN:
        if (key_is(k, n, "id"))
            f = F_ID;
        else if (key_is(k, n, "image_id"))
            f = F_IMAGE_ID;
        else if (key_is(k, n, "category_id"))
            f = F_CATEGORY_ID;
        else if (key_is(k, n, "bbox"))
            f = F_BBOX;
        else if (key_is(k, n, "iscrowd"))
            f = F_ISCROWD;
        else if (key_is(k, n, "segmentation"))
            f = F_SEGMENTATION;
        break;
    case ST_CAT:
        if (key_is(k, n, "id"))
            f = F_ID;
        else if (key_is(k, n, "name"))
            f = F_NAME;
        break;
    default:
        break;
    }
    c->field = f;
    return 1;
}

static int cb_null(void *ctx)
{
    const struct val v = { .t = V_NULL };
    return on_scalar(ctx, &v);
}

static int cb_bool(void *ctx, int b)
{
    const struct val v = { .t = V_BOOL, .b = b != 0 };
    return on_scalar(ctx, &v);
}

static int cb_number(void *ctx, const char *s, size_t n)
{
    struct pack_coco *c = ctx;
    if (c->skip) return 1;
    struct val v = { .t = V_NUM };
    v.num_ok = pack_ds_parse_number(s, n, &v.num) == 0;
    return on_scalar(c, &v);
}

static int cb_string(void *ctx, const unsigned char *s, size_t n)
{
    const struct val v = { .t = V_STR, .s = s, .len = n };
    return on_scalar(ctx, &v);
}

static int cb_start_map(void *ctx)
{
    return on_start(ctx, true);
}

static int cb_start_array(void *ctx)
{
    return on_start(ctx, false);
}

static int cb_end(void *ctx)
{
    return on_end(ctx);
}

static const yajl_callbacks callbacks = {
    .yajl_null = cb_null,
    .yajl_boolean = cb_bool,
    .yajl_number = cb_number,
    .yajl_string = cb_string,
    .yajl_start_map = cb_start_map,
    .yajl_map_key = cb_map_key,
    .yajl_end_map = cb_end,
    .yajl_start_array = cb_start_array,
    .yajl_end_array = cb_end,
};

/* ---------------------------------------------------------------------------------------------
 * Driving the parse
 * ------------------------------------------------------------------------------------------- */

int pack_coco_create(struct pack_coco **out, struct pack_ds *ds, const char *json_path)
{
    *out = NULL;
    struct pack_coco *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->ds = ds;
    c->json_path = strdup(json_path);
    c->h = yajl_alloc(&callbacks, NULL, c);
    c->line = 1;
    c->store_polygons = ds->opts.keep_segments || ds->opts.coco_boxes_from_segments;
    c->stats = &ds->st;
    c->threads = ds->opts.threads;
    c->min_region = MIN_REGION_BYTES;
    c->read_bytes = CHUNK_BYTES;
    if (!c->json_path || !c->h) {
        pack_coco_destroy(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

void pack_coco_destroy(struct pack_coco *c)
{
    if (!c) return;
    if (c->h) yajl_free(c->h);
    cur_reset(c);
    for (size_t i = 0; i < c->n_imgs; i++) {
        free(c->imgs[i].file_name);
        free(c->imgs[i].path);
    }
    free(c->imgs);
    free(c->anns);
    for (size_t i = 0; i < c->n_cats; i++)
        free(c->cats[i].name);
    free(c->cats);
    free(c->pts);
    free(c->seg_xy);
    free(c->part_end);
    free(c->hkeys);
    free(c->hvals);
    free(c->json_path);
    free(c);
}

/* Error after yajl stopped: ours if a callback cancelled, else yajl's syntax message. */
/* yajl's message for the error h stopped at, on one line. */
static void yajl_msg(yajl_handle h, const unsigned char *buf, size_t len, char *msg, size_t cap)
{
    unsigned char *m = yajl_get_error(h, 0, buf, len);
    snprintf(msg, cap, "%s", m ? (const char *)m : "parse error");
    if (m) yajl_free_error(h, m);
    for (char *p = msg; *p; p++)
        if (*p == '\n') *p = ' ';
    size_t l = strlen(msg);
    while (l && msg[l - 1] == ' ')
        msg[--l] = '\0';
}

static int syntax_error(struct pack_coco *c, uint64_t off, uint32_t line, const char *msg)
{
    return c->rc = pack_ds_fail(c->ds, -PACK_DS_ESYNTAX,
                                "%s: malformed JSON at byte %llu (line %u): %s", c->json_path,
                                (unsigned long long)off, line, msg);
}

static int parse_error(struct pack_coco *c, yajl_status s, const unsigned char *buf, size_t len)
{
    if (s == yajl_status_client_canceled && c->rc) return c->rc;
    if (c->region) return c->rc = R_FAIL;
    char msg[256];
    yajl_msg(c->h, buf, len, msg, sizeof msg);
    const uint64_t off = cur_offset(c);
    return syntax_error(c, off, line_at(c, off), msg);
}

int pack_coco_feed(struct pack_coco *c, const void *buf, size_t len)
{
    if (c->rc) return c->rc;
    c->chunk = buf;
    const yajl_status s = yajl_parse(c->h, buf, len);
    if (s != yajl_status_ok) {
        const int rc = parse_error(c, s, buf, len);
        c->chunk = NULL;
        return rc;
    }
    line_at(c, c->base + len);
    c->base += len;
    c->line_pos = c->base;
    c->chunk = NULL;
    return 0;
}

int pack_coco_finish(struct pack_coco *c)
{
    if (c->rc) return c->rc;
    const yajl_status s = yajl_complete_parse(c->h);
    if (s != yajl_status_ok) return parse_error(c, s, NULL, 0);
    if (c->st != ST_DONE) return stop(c, -PACK_DS_ESCHEMA, "incomplete document"), c->rc;
    if (!c->seen[0]) return stop(c, -PACK_DS_ESCHEMA, "no \"images\" array"), c->rc;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Parsing in parallel
 *
 * The annotations array is nearly all of a COCO file (97% of instances_train2017.json), and one
 * yajl parser reads it at 100-200 MB/s. So once the main parser is inside that array, the rest
 * of the file is cut into regions, one a thread, each parsed by its own yajl parser as if it
 * were a whole array: "[" + region + "]". Cuts are guessed: the first `}` ws* `,` ws* `{` after
 * an even split point, which is an element boundary unless it sits in a string or deeper down.
 *
 * Why the result is the sequential parse's, byte for byte, whatever the file holds: the main
 * parser takes regions in file order, and takes region k's result only when it KNOWS that
 * region k starts at a boundary: either it parsed up to there itself and its last event was an
 * annotation's `}` ending exactly there, in the array and outside any skipped value, or it took
 * region k-1, whose parser started at a known boundary (so it tokenised every byte as the
 * sequential parse does) and closed its wrapper at our `]` just after the region's last byte, a
 * `}`. Anything else, such as a region that warns, fails, or a cut that was not a boundary,
 * is parsed again by the main parser in sequence, so warnings, errors and their lines and byte
 * offsets are the sequential ones. A region whose parser meets the array's real `]` stops there
 * and the main parser goes on from that `]`. Lines of taken entries are counted by each region
 * from its start and shifted by the main parser's line there.
 *
 * Memory: each region's entries are appended to the main arrays in order and then freed, so the
 * peak is the entries once plus one region's, and a 256 KB buffer per thread: the file itself is
 * never held.
 * ------------------------------------------------------------------------------------------- */

#define CUT_SEARCH ((uint64_t)1 << 20) /* bytes searched for a cut after each split point */

struct region {
    uint64_t start;     /* just after the `}` of the cut */
    uint64_t content;   /* just after the `,` that follows it */
    uint64_t end;       /* the next region's start, or the file's size */
    uint32_t gap_lines; /* newlines in [start, content) */
    int fd;
    struct pack_coco *w;
    int outcome; /* 0: closed by our `]` at end; R_CLOSED; R_FAIL */
    pthread_t th;
    bool running;
};

static bool is_ws(unsigned char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* The first `}` ws* `,` ws* `{` starting in [from, from + CUT_SEARCH), within one buffer. */
static bool find_cut(int fd, uint64_t from, uint64_t size, unsigned char *buf, struct region *r)
{
    for (uint64_t off = from; off < size && off < from + CUT_SEARCH;) {
        const ssize_t n = pread(fd, buf, CHUNK_BYTES, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        const unsigned char *p = buf, *e = buf + n;
        while ((p = memchr(p, '}', (size_t)(e - p)))) {
            const unsigned char *q = p + 1;
            uint32_t nl = 0;
            while (q < e && is_ws(*q))
                nl += *q++ == '\n';
            const unsigned char *comma = q;
            if (q < e && *q == ',') {
                q++;
                while (q < e && is_ws(*q))
                    q++;
                if (q < e && *q == '{') {
                    r->start = off + (uint64_t)(p - buf) + 1;
                    r->content = off + (uint64_t)(comma - buf) + 1;
                    r->gap_lines = nl;
                    return true;
                }
            }
            p++;
        }
        /* a cut across the buffer's end is found from the next one */
        off += (size_t)n > 4096 ? (size_t)n - 4096 : (size_t)n;
    }
    return false;
}

static void *parse_region(void *arg)
{
    struct region *r = arg;
    struct pack_coco *w = r->w;
    unsigned char *buf = malloc(CHUNK_BYTES);
    r->outcome = R_FAIL;
    /* the wrapper's `[` leaves w where the main parser is at a cut: in the annotations array */
    w->st = ST_ROOT;
    w->field = F_ANNS;
    if (!buf || yajl_parse(w->h, (const unsigned char *)"[", 1) != yajl_status_ok) goto out;
    w->base = w->line_pos = r->content;
    w->line = r->gap_lines;
    for (uint64_t off = r->content; off < r->end && !w->rc;) {
        const size_t want = r->end - off < CHUNK_BYTES ? (size_t)(r->end - off) : CHUNK_BYTES;
        const ssize_t n = pread(r->fd, buf, want, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) goto out;
        pack_coco_feed(w, buf, (size_t)n);
        off += (uint64_t)n;
    }
    if (w->rc == R_CLOSED) r->outcome = R_CLOSED;
    if (w->rc) goto out;
    w->wrap_close = true;
    if (yajl_parse(w->h, (const unsigned char *)"]", 1) == yajl_status_ok &&
        yajl_complete_parse(w->h) == yajl_status_ok && !w->rc && w->st == ST_ROOT)
        r->outcome = 0;
out:
    free(buf);
    return NULL;
}

static unsigned parse_threads(const struct pack_coco *c)
{
    long n = c->threads;
    if (!n) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (unsigned)n;
}

/* Cuts [pos, size) into regions and starts a parser on each but the first, which the main
 * parser reads itself. Returns the number of regions started (0: parse in sequence). */
static size_t plan_regions(struct pack_coco *c, int fd, uint64_t pos, uint64_t size,
                           unsigned char *buf, const atomic_bool *cancel, struct region **out)
{
    unsigned t = parse_threads(c);
    const uint64_t rest = size - pos;
    if (rest / t < c->min_region) t = (unsigned)(rest / (c->min_region ? c->min_region : 1));
    if (t < 2) return 0;
    struct region *rg = calloc(t - 1, sizeof *rg);
    if (!rg) return 0;
    size_t n = 0;
    for (unsigned i = 1; i < t; i++) {
        struct region r = { .fd = fd, .end = size };
        const uint64_t guess = pos + rest / t * i;
        if (n && guess < rg[n - 1].content) continue;
        if (find_cut(fd, guess, size, buf, &r)) {
            if (n) rg[n - 1].end = r.start;
            rg[n++] = r;
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct pack_coco *w = calloc(1, sizeof *w);
        if (w) w->h = yajl_alloc(&callbacks, NULL, w);
        if (!w || !w->h) {
            pack_coco_destroy(w);
            continue; /* parsed in sequence */
        }
        w->ds = c->ds;
        w->region = true;
        w->store_polygons = c->store_polygons;
        w->stats = &w->own_stats;
        w->cancel = cancel;
        rg[i].w = w;
        rg[i].outcome = R_FAIL;
        rg[i].running = pthread_create(&rg[i].th, NULL, parse_region, &rg[i]) == 0;
    }
    *out = rg;
    return n;
}

static void region_join(struct region *r)
{
    if (r->running) pthread_join(r->th, NULL);
    r->running = false;
    if (!r->w) r->outcome = R_FAIL;
}

/* Appends a region's entries to c's, in file order; its lines start at c's line there. */
static int region_take(struct pack_coco *c, struct region *r, uint64_t resume)
{
    struct pack_coco *w = r->w;
    int rc = pack_ds_grow((void **)&c->anns, &c->cap_anns, c->n_anns + w->n_anns, sizeof *c->anns);
    if (!rc)
        rc = pack_ds_grow((void **)&c->pts, &c->cap_pts, 2 * (c->n_pts + w->n_pts), sizeof *c->pts);
    if (rc) return stop(c, rc, "out of memory"), c->rc;
    for (size_t i = 0; i < w->n_anns; i++) {
        struct coco_ann a = w->anns[i];
        if (a.seg == SEG_POLY) a.pt_off += c->n_pts;
        a.line += c->line;
        c->anns[c->n_anns++] = a;
    }
    if (w->n_pts) memcpy(c->pts + 2 * c->n_pts, w->pts, 2 * w->n_pts * sizeof *c->pts);
    c->n_pts += w->n_pts;
    /* the counters commit_ann can move without a warning (a warning fails the region) */
    c->stats->crowd_skipped += w->own_stats.crowd_skipped;
    c->line += w->line;
    c->base = c->line_pos = resume;
    c->ann_close = r->end;
    c->regions_taken++;
    pack_coco_destroy(w);
    r->w = NULL;
    return 0;
}

void pack_coco_set_threads(struct pack_coco *c, unsigned threads, uint64_t min_region,
                           size_t read_bytes)
{
    c->threads = threads;
    c->min_region = min_region;
    c->read_bytes = read_bytes ? read_bytes : CHUNK_BYTES;
}

/* A syntax error's offset is yajl's guess at where the bad token began, and it moves when a feed
 * ends inside that token. The one-thread parse feeds on a grid; the main parser also stops at
 * region starts, which may lie inside a string when the cut was not a boundary. So after regions,
 * a syntax error is found again on the grid by a bare yajl handle from the file's start: no
 * callback stopped the first parse before it, so none would have here. (Without regions the main
 * parser's reads are the grid.) */
static int grid_syntax_error(struct pack_coco *c, int fd, unsigned char *buf)
{
    yajl_handle h = yajl_alloc(NULL, NULL, NULL);
    if (!h) return c->rc;
    uint64_t base = 0;
    uint32_t line = 1;
    yajl_status s = yajl_status_ok;
    ssize_t n;
    for (;;) {
        n = pread(fd, buf, c->read_bytes, (off_t)base);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        s = yajl_parse(h, buf, (size_t)n);
        if (s != yajl_status_ok) break;
        line += count_lines(buf, (size_t)n);
        base += (uint64_t)n;
    }
    if (n == 0 && s == yajl_status_ok) s = yajl_complete_parse(h);
    if (s == yajl_status_error) {
        uint64_t off = base;
        if (n > 0) { /* in a feed: where yajl stopped in it */
            const size_t in = yajl_get_bytes_consumed(h);
            line += count_lines(buf, in);
            off += in;
        }
        char msg[256];
        yajl_msg(h, n > 0 ? buf : NULL, n > 0 ? (size_t)n : 0, msg, sizeof msg);
        syntax_error(c, off, line, msg);
    } /* else the file changed under us: the first message stands */
    yajl_free(h);
    return c->rc;
}

size_t pack_coco_regions_taken(const struct pack_coco *c)
{
    return c->regions_taken;
}

int pack_coco_parse_file(struct pack_coco *c)
{
    const int fd = ffr_open_regular(c->json_path, 0);
    if (fd < 0) return pack_ds_fail(c->ds, fd, "%s: %s", c->json_path, ffr_strerror(fd));
    struct stat sb;
    /* find_cut reads CHUNK_BYTES into it too */
    unsigned char *buf = malloc(c->read_bytes > CHUNK_BYTES ? c->read_bytes : CHUNK_BYTES);
    int rc = !buf ? -ENOMEM : fstat(fd, &sb) != 0 ? -errno : 0;
    if (rc) rc = pack_ds_fail(c->ds, rc, "%s: %s", c->json_path, strerror(-rc));
    const uint64_t size = rc ? 0 : (uint64_t)sb.st_size;
    atomic_bool cancel = false;
    struct region *rg = NULL;
    size_t n_rg = 0, next = 0;
    bool planned = false;
    uint64_t pos = 0, stop_at = UINT64_MAX;
    while (!rc) {
        if (next < n_rg && pos == rg[next].start) {
            struct region *r = &rg[next++];
            const bool at_cut = !c->skip && c->st == ST_ANNS && c->ann_close == pos;
            if (!at_cut) {
                next = n_rg; /* not a boundary after all: the rest in sequence */
            } else {
                region_join(r);
                if (r->outcome == 0 || r->outcome == R_CLOSED) {
                    const uint64_t resume = r->outcome == 0 ? r->end : r->w->arr_close;
                    rc = region_take(c, r, resume);
                    pos = resume;
                    if (resume != r->end) next = n_rg; /* the array ended: the rest in sequence */
                } else {
                    pack_coco_destroy(r->w); /* this region in sequence */
                    r->w = NULL;
                }
            }
            stop_at = next < n_rg ? rg[next].start : UINT64_MAX;
            if (next == n_rg) atomic_store(&cancel, true);
            continue;
        }
        const size_t want = stop_at - pos < c->read_bytes ? (size_t)(stop_at - pos) : c->read_bytes;
        const ssize_t n = pread(fd, buf, want, (off_t)pos);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int e = errno;
            rc = pack_ds_fail(c->ds, -e, "%s: read: %s", c->json_path, strerror(e));
            break;
        }
        if (n == 0) break;
        rc = pack_coco_feed(c, buf, (size_t)n);
        pos += (uint64_t)n;
        if (!rc && !planned && c->seen[1] && c->st >= ST_ANNS && c->st <= ST_SEG_PART) {
            planned = true;
            n_rg = plan_regions(c, fd, pos, size, buf, &cancel, &rg);
            if (n_rg) stop_at = rg[0].start;
        }
    }
    atomic_store(&cancel, true);
    for (size_t i = 0; i < n_rg; i++) {
        region_join(&rg[i]);
        pack_coco_destroy(rg[i].w);
    }
    free(rg);
    if (!rc) rc = pack_coco_finish(c);
    if (rc == -PACK_DS_ESYNTAX && n_rg) rc = grid_syntax_error(c, fd, buf);
    free(buf);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Emitting samples
 * ------------------------------------------------------------------------------------------- */

struct cat_map {
    int64_t id;
    int32_t cls;
};

static int cat_map_cmp(const void *a, const void *b)
{
    const int64_t x = ((const struct cat_map *)a)->id, y = ((const struct cat_map *)b)->id;
    return x < y ? -1 : x > y;
}

static int img_path_cmp(const void *a, const void *b, void *ctx)
{
    const struct coco_img *imgs = ctx;
    const uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    const int r = strcmp(imgs[i].path, imgs[j].path);
    if (r) return r;
    return i < j ? -1 : i > j;
}

/* JSON2YOLO's `if box not in bboxes`, per image: exact (class, box) equality in double. */
struct dedup_key {
    double k[5];
    size_t i;
};

static int dedup_cmp(const void *a, const void *b)
{
    const struct dedup_key *x = a, *y = b;
    for (int j = 0; j < 5; j++) {
        if (x->k[j] < y->k[j]) return -1;
        if (x->k[j] > y->k[j]) return 1;
    }
    return x->i < y->i ? -1 : x->i > y->i;
}

static int build_names(struct pack_coco *c, struct cat_map **map_out, size_t *k_out)
{
    struct pack_ds *ds = c->ds;
    const size_t n = c->n_cats;
    struct cat_map *map = calloc(n ? n : 1, sizeof *map);
    if (!map) return -ENOMEM;
    bool is_coco = n > 0;
    for (size_t i = 0; i < n && is_coco; i++) {
        int pos = -1;
        for (int j = 0; j < 80; j++)
            if (pack_coco80_ids[j] == c->cats[i].id) pos = j;
        is_coco = pos >= 0 && strcmp(pack_coco80_names[pos], c->cats[i].name) == 0;
    }
    for (size_t i = 0; i < n; i++)
        map[i].id = c->cats[i].id;
    if (n > 1) qsort(map, n, sizeof *map, cat_map_cmp);
    const char **names = calloc(n > 80 ? n : 80, sizeof *names);
    if (!names) {
        free(map);
        return -ENOMEM;
    }
    size_t k;
    if (is_coco) {
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < 80; j++)
                if (pack_coco80_ids[j] == map[i].id) map[i].cls = j;
        for (int j = 0; j < 80; j++)
            names[j] = pack_coco80_names[j];
        k = 80;
    } else {
        for (size_t i = 0; i < n; i++) {
            map[i].cls = (int32_t)i;
            for (size_t j = 0; j < n; j++)
                if (c->cats[j].id == map[i].id) names[i] = c->cats[j].name;
        }
        k = n;
    }
    int rc = 0;
    if (ds->info.names_source == PACK_DS_NAMES_OVERRIDE) {
        if (ds->n_names < k)
            rc = pack_ds_fail(ds, -EINVAL, "%s: %zu class names given, the file has %zu classes",
                              c->json_path, ds->n_names, k);
    } else {
        rc = pack_ds_set_names(ds, names, k);
        ds->info.names_source = PACK_DS_NAMES_JSON;
        ds->nc = (int64_t)k;
    }
    free(names);
    if (rc) {
        free(map);
        return rc;
    }
    *map_out = map;
    *k_out = n;
    return 0;
}

int pack_coco_emit(struct pack_coco *c, const char *image_dir)
{
    struct pack_ds *ds = c->ds;
    struct pack_ds_stats *st = &ds->st;
    struct cat_map *map = NULL;
    size_t n_map = 0;
    uint32_t *order = NULL, *first = NULL, *next_ann = NULL;
    struct dedup_key *keys = NULL;
    size_t cap_keys = 0;
    bool *drop = NULL;
    size_t cap_drop = 0;
    struct pack_lbl *L = &ds->lbl;
    int rc = build_names(c, &map, &n_map);
    if (rc) goto out;

    /* Image paths, sorted; missing files and repeated paths are skipped. */
    order = malloc((c->n_imgs ? c->n_imgs : 1) * sizeof *order);
    if (!order) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < c->n_imgs; i++) {
        struct coco_img *im = &c->imgs[i];
        im->path = image_dir ? pack_ds_join(image_dir, im->file_name) : strdup(im->file_name);
        if (!im->path) {
            rc = -ENOMEM;
            goto out;
        }
        order[i] = (uint32_t)i;
    }
    if (c->n_imgs > 1) qsort_r(order, c->n_imgs, sizeof *order, img_path_cmp, c->imgs);
    for (size_t o = 0; o < c->n_imgs; o++) {
        struct coco_img *im = &c->imgs[order[o]];
        im->usable = true;
        if (o && strcmp(im->path, c->imgs[order[o - 1]].path) == 0) {
            im->usable = false;
            st->images_invalid++;
            rc = pack_ds_warn(ds, PACK_DS_W_IMAGE_INVALID, c->json_path, im->line, im->id,
                              "image id %lld: file %s already used by another image: skipped",
                              (long long)im->id, im->path);
        } else if (image_dir) {
            struct stat sb;
            if (stat(im->path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
                im->usable = false;
                st->images_missing++;
                rc = pack_ds_warn(ds, PACK_DS_W_IMAGE_MISSING, c->json_path, im->line, im->id,
                                  "image id %lld: %s does not exist: skipped", (long long)im->id,
                                  im->path);
            }
        }
        if (rc) goto out;
    }

    /* Annotations per image, in file order: first[img] -> next_ann[...] chains (built backward
     * so each chain is in file order). */
    first = malloc((c->n_imgs ? c->n_imgs : 1) * sizeof *first);
    next_ann = malloc((c->n_anns ? c->n_anns : 1) * sizeof *next_ann);
    if (!first || !next_ann) {
        rc = -ENOMEM;
        goto out;
    }
    memset(first, 0xff, (c->n_imgs ? c->n_imgs : 1) * sizeof *first);
    for (size_t a = c->n_anns; a-- > 0;) {
        struct coco_ann *an = &c->anns[a];
        const int64_t im = hget(c, an->image_id);
        if (im >= 0 && an->seg == SEG_POLY && an->n_pts) {
            /* Polygons normalised here, in place and in file order: the image loop below meets
             * them in image order, scattered over the point store, and the cache misses of
             * that walk were the larger part of this function. */
            const double W = c->imgs[im].w, H = c->imgs[im].h;
            float *xy = c->pts + 2 * an->pt_off;
            bool finite = true;
            for (size_t p = 0; p < an->n_pts; p++) {
                xy[2 * p] = to_f32((double)xy[2 * p] / W);
                xy[2 * p + 1] = to_f32((double)xy[2 * p + 1] / H);
                finite &= isfinite(xy[2 * p]) && isfinite(xy[2 * p + 1]);
            }
            if (!finite) {
                an->seg = SEG_BAD;
                an->seg_why = WHY_VALUE;
            }
        }
        if (im < 0) {
            st->rows_no_image++;
            rc = pack_ds_warn(ds, PACK_DS_W_ANN_INVALID, c->json_path, an->line, an->id,
                              "annotation %lld: image_id %lld is not in images[]",
                              (long long)an->id, (long long)an->image_id);
            if (rc) goto out;
            continue;
        }
        next_ann[a] = first[im];
        first[im] = (uint32_t)a;
    }

    for (size_t o = 0; o < c->n_imgs; o++) {
        const uint32_t ii = order[o];
        struct coco_img *im = &c->imgs[ii];
        if (!im->usable) {
            for (uint32_t a = first[ii]; a != UINT32_MAX; a = next_ann[a])
                st->rows_no_image++;
            continue;
        }
        const double W = im->w, H = im->h;
        pack_lbl_reset(L);
        size_t nk = 0;
        for (uint32_t a = first[ii]; a != UINT32_MAX; a = next_ann[a]) {
            const struct coco_ann *an = &c->anns[a];
            const struct cat_map key = { .id = an->cat };
            const struct cat_map *m = bsearch(&key, map, n_map, sizeof *map, cat_map_cmp);
            if (!m) {
                st->rows_bad_category++;
                rc = pack_ds_warn(ds, PACK_DS_W_ANN_INVALID, c->json_path, an->line, an->id,
                                  "annotation %lld: category_id %lld is not in categories[]",
                                  (long long)an->id, (long long)an->cat);
                if (rc) goto out;
                continue;
            }
            /* box[:2] += box[2:] / 2; box[[0, 2]] /= w; box[[1, 3]] /= h (float64) */
            const double bx = (an->bbox[0] + an->bbox[2] / 2) / W;
            const double by = (an->bbox[1] + an->bbox[3] / 2) / H;
            const double bw = an->bbox[2] / W, bh = an->bbox[3] / H;
            rc = pack_ds_grow((void **)&keys, &cap_keys, nk + 1, sizeof *keys);
            if (rc) goto out;
            keys[nk] = (struct dedup_key){ .k = { m->cls, bx, by, bw, bh }, .i = nk };
            nk++;
        }
        /* mark later copies of an identical (class, box) */
        rc = pack_ds_grow((void **)&drop, &cap_drop, nk ? nk : 1, sizeof *drop);
        if (rc) goto out;
        memset(drop, 0, (nk ? nk : 1) * sizeof *drop);
        struct dedup_key *sorted = malloc((nk ? nk : 1) * sizeof *sorted);
        if (!sorted) {
            rc = -ENOMEM;
            goto out;
        }
        if (nk) memcpy(sorted, keys, nk * sizeof *sorted);
        if (nk > 1) qsort(sorted, nk, sizeof *sorted, dedup_cmp);
        for (size_t j = 1; j < nk; j++) {
            const double *x = sorted[j].k, *y = sorted[j - 1].k;
            if (x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4])
                drop[sorted[j].i] = true;
        }
        free(sorted);

        size_t j = 0;
        for (uint32_t a = first[ii]; a != UINT32_MAX; a = next_ann[a]) {
            const struct coco_ann *an = &c->anns[a];
            const struct cat_map key = { .id = an->cat };
            if (!bsearch(&key, map, n_map, sizeof *map, cat_map_cmp)) continue;
            const struct dedup_key *k = &keys[j];
            if (drop[j++]) {
                st->rows_duplicate++;
                rc = pack_ds_warn(ds, PACK_DS_W_LABEL_DUPLICATE, c->json_path, an->line, an->id,
                                  "annotation %lld: same class and box as an earlier annotation "
                                  "of image %lld: removed",
                                  (long long)an->id, (long long)im->id);
                if (rc) goto out;
                continue;
            }
            float v[5] = { (float)k->k[0], to_f32(k->k[1]), to_f32(k->k[2]), to_f32(k->k[3]),
                           to_f32(k->k[4]) };
            const float *xy = NULL;
            size_t npts = 0;
            if (an->seg == SEG_BAD) {
                st->segments_dropped++;
                rc = pack_ds_warn(ds, PACK_DS_W_SEGMENT_INVALID, c->json_path, an->line, an->id,
                                  "annotation %lld: %s: polygon dropped, box kept",
                                  (long long)an->id, seg_whys[an->seg_why]);
                if (rc) goto out;
            } else if (an->seg == SEG_POLY && an->n_pts) {
                xy = c->pts + 2 * an->pt_off; /* normalised above */
                npts = an->n_pts;
                if (ds->opts.coco_boxes_from_segments) pack_ds_poly_box(xy, npts, v + 1);
            }
            rc = pack_lbl_push(L, v, xy, npts, an->line, an->id);
            if (rc) goto out;
        }
        rc = pack_lbl_clean(L, ds->nc);
        if (!rc) rc = pack_ds_report_lbl(ds, L, c->json_path, im->path);
        if (rc) goto out;
        if (L->status == PACK_LBL_CORRUPT) continue;
        char *path = strdup(im->path), *lab = strdup(c->json_path);
        if (!path || !lab) {
            free(path);
            free(lab);
            rc = -ENOMEM;
            goto out;
        }
        rc = pack_ds_add_sample(ds, path, lab, im->id, im->w, im->h, L);
        if (rc) goto out;
    }
out:
    free(map);
    free(order);
    free(first);
    free(next_ann);
    free(keys);
    free(drop);
    return rc;
}
