/*
 * yolo-detect: ultralytics/yolov5 v7.0 detect.py on images (JPEG, PNG, BMP, WebP), directories,
 * globs and image list files.
 *
 *   yolo-detect --weights W [W ...] --source FILE|DIR|GLOB|LIST.txt [--imgsz H [W]] [--augment]
 *               [--conf-thres 0.25] [--iou-thres 0.45] [--max-det 1000] [--classes C ...]
 *               [--agnostic-nms] [--device D] [--half] [--line-thickness 3] [--hide-labels]
 *               [--hide-conf] [--save-txt] [--save-conf] [--save-crop] [--save-json]
 *               [--project runs/detect] [--name exp] [--exist-ok] [--nosave]
 *               [--cpu-engine auto|onednn|reference]
 *
 * Per image, as detect.py: cv2.imread (pack_image_decode: JPEG with EXIF, grey and CMYK, PNG,
 * BMP and WebP, all as OpenCV reads them), letterbox(im0, (h, w), stride=max(model stride, 32),
 * auto=True) (trn_aug_letterbox, INTER_LINEAR, 114 padding), an eval forward (fp16 convolutions
 * with --half) and the Detect decode on a net built for that input shape (nets are cached per
 * shape), with --augment ultralytics' test-time augmentation (scales 1, 0.83, 0.67, the middle
 * one flipped left-right, merged before NMS) and with several --weights ultralytics' Ensemble
 * (outputs concatenated before NMS, stride the largest, class names from the first; the models
 * must have the same classes) (trainer/eval/tta.h), NMS with multi_label=False (agnostic with
 * --agnostic-nms; its time is the speed line's NMS), scale_boxes back to the original image,
 * then the annotated image (Annotator(line_width=--line-thickness): box + "name conf"),
 * labels/<stem>.txt rows "cls cx cy w h [conf]" ('%g', normalised, lowest confidence first,
 * appended as detect.py opens them with 'a'), --save-crop's save_one_box crops and, with
 * --save-json, predictions.json in val.py's COCO results form. --weights takes .pt checkpoints,
 * plain state dicts (yolo-export --include pt; with --cfg) and our .ckpt files.
 *
 * A list file holds one path per line (blank lines skipped): a path that exists as written (from
 * the working directory, as detect.py's LoadImages resolves it) is taken, else the same path
 * relative to the list's folder (newer ultralytics' LoadImages fallback); a line naming nothing
 * is reported with the list's name and line and skipped, as is an unreadable image.
 *
 * Differences from detect.py, on purpose: TIFF, DNG, MPO and PFM are not read (reported as
 * unreadable); a glob has no '**' recursion (glob(3)); a missing list entry is skipped with an
 * error instead of stopping the run; list entries keep their order (detect.py sorts them);
 * annotated images are written as .jpg, or .png for a PNG (detect.py keeps every format); labels
 * are drawn with cairo's sans-serif instead of OpenCV's Hershey font; --classes filters after
 * NMS with max_det applied after the filter, which keeps the same boxes as detect.py's filter
 * before NMS because NMS is class-aware. Class names: the checkpoint's metadata `names`; for a
 * .pt (whose `names` list our .pt reader cannot return yet) the COCO names when nc == 80, else
 * class numbers.
 *
 * Exit: 0, 1 (weights or run directory unusable, models of different classes, no images, or any
 * source skipped: the others are still processed and the count of skipped ones is printed),
 * 2 (bad arguments).
 */
#include <cairo.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <time.h>

#include "argparse.h"
#include "cli.h"
#include "augment.h"
#include "cocoeval.h"
#include "dataset.h"
#include "ffr.h"
#include "common_opts.h"
#include "image.h"
#include "model.h"
#include "net.h"
#include "nms.h"
#include "plots.h"
#include "rundir.h"
#include "ptload.h"
#include "train.h"
#include "tta.h"
#include "weights.h"
#include "util.h"
#include "errors.h"

#define PROG        "yolo-detect"
#define MAX_CLASSES 1024
#define MAX_NETS    8 /* nets kept for the shapes seen (LRU), over all models and branches */
#define MAX_WEIGHTS TRN_TTA_MAX_MODELS
#define MAX_FILE    (512u << 20) /* largest image file read, bytes */
#define LB_STRIDE   32           /* detect.py: letterbox(stride=max(int(model.stride.max()), 32)) */
#define DET_JPEG_Q  95           /* cv2.imwrite's default JPEG quality */

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

struct args {
    const char *weights[MAX_WEIGHTS]; /* --weights, in the order given (an ensemble if > 1) */
    int n_weights;
    const char *source, *cfg, *project, *name;
    long imgsz[2], max_det, threads, line_thickness;
    int n_imgsz;        /* --imgsz H [W]: one value is square */
    const char *device; /* --device: cpu, a CUDA device number, or NULL (0 when present) */
    double conf, iou;
    long classes[MAX_CLASSES]; /* --classes, in the order given */
    int n_classes;             /* 0: every class */
    bool hide_labels, hide_conf, save_txt, save_conf, save_json, exist_ok, nosave, augment;
    bool half, agnostic_nms, save_crop;
    const char *cpu_engine; /* --cpu-engine auto|onednn|reference */
};

/* A list of image paths (malloc'd strings). */
struct paths {
    char **v;
    size_t n, cap;
};

/* Returns 0 to run, 2 on bad arguments (message printed). */
static int parse_args(int argc, char **argv, struct args *A)
{
    memset(A, 0, sizeof *A);
    A->project = "runs/detect";
    A->name = "exp";
    A->imgsz[0] = A->imgsz[1] = 640;
    A->line_thickness = 3;
    A->max_det = 1000;
    A->conf = 0.25;
    A->iou = 0.45;
    const struct ap_opt t[] = {
        TOOL_OPT_WEIGHTS(A->weights, &A->n_weights, MAX_WEIGHTS,
                         " (same classes; names from the first)"),
        TOOL_OPT_CFG(&A->cfg, ": with --weights, the architecture; without, the initial "
                              "weights (seed 0)"),
        AP_OPT("--source", AP_STR, &A->source, "S",
               "an image (JPEG, PNG, BMP, WebP), a directory of them, a glob ('dir/*.jpg'), or a "
               ".txt list of paths (as written, else relative to the list's folder)"),
        { .names = "--img|--imgsz|--img-size",
          .kind = AP_LONGS,
          .dst = A->imgsz,
          .metavar = "H [W]",
          .help = "inference size h,w, pixels (default 640; one value: square)",
          .lo = 32,
          .hi = 8192,
          .max_n = 2,
          .n = &A->n_imgsz },
        TOOL_OPT_DEVICE(&A->device),
        AP_OPT("--half", AP_FLAG, &A->half, NULL,
               "FP16 half-precision inference: the convolutions in fp16 with fp32 accumulation"),
        TOOL_OPT_CPU_ENGINE(&A->cpu_engine),
        AP_OPT("--agnostic-nms", AP_FLAG, &A->agnostic_nms, NULL, "class-agnostic NMS"),
        AP_RANGE("--line-thickness", AP_LONG, &A->line_thickness, "N",
                 "bounding box thickness, pixels (default 3)", 1, 100),
        AP_OPT("--save-crop", AP_FLAG, &A->save_crop, NULL,
               "save each box's crop to crops/<class>/<stem>.jpg (1.02x + 10 px, as "
               "save_one_box)"),
        AP_OPT("--augment", AP_FLAG, &A->augment, NULL,
               "test-time augmentation (scales 1, 0.83, 0.67; flip)"),
        AP_RANGE("--conf-thres", AP_DOUBLE, &A->conf, "X", "confidence threshold (default 0.25)", 0,
                 1),
        AP_RANGE("--iou-thres", AP_DOUBLE, &A->iou, "X", "NMS IoU threshold (default 0.45)", 0, 1),
        AP_RANGE("--max-det", AP_LONG, &A->max_det, "N", "detections per image (default 1000)", 1,
                 TRN_NMS_MAX_NMS),
        { .names = "--classes",
          .kind = AP_LONGS,
          .dst = A->classes,
          .metavar = "C [C ...]",
          .help = "keep only these classes",
          .lo = 0,
          .hi = 65535,
          .max_n = MAX_CLASSES,
          .n = &A->n_classes },
        AP_OPT("--hide-labels", AP_FLAG, &A->hide_labels, NULL, "boxes without labels"),
        AP_OPT("--hide-conf", AP_FLAG, &A->hide_conf, NULL, "labels without confidences"),
        AP_OPT("--save-txt", AP_FLAG, &A->save_txt, NULL,
               "write labels/<stem>.txt (cls cx cy w h, normalised)"),
        AP_OPT("--save-conf", AP_FLAG, &A->save_conf, NULL,
               "add the confidence to --save-txt rows"),
        AP_OPT("--save-json", AP_FLAG, &A->save_json, NULL,
               "write predictions.json (COCO results format)"),
        TOOL_OPT_RUN_DIR(&A->project, &A->name, &A->exist_ok, "runs/detect"),
        AP_OPT("--nosave", AP_FLAG, &A->nosave, NULL, "do not write annotated images"),
        AP_RANGE("--threads", AP_LONG, &A->threads, "N",
                 "compute threads (default 0: one per core, BLAS single-threaded)", 0, 256),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = PROG,
        .usage = "--weights W [W ...] --source FILE|DIR|GLOB|LIST.txt [options]",
        .about = "Detect objects in images as ultralytics' detect.py does.",
        .opts = t,
        .n_opts = sizeof t / sizeof t[0],
    };
    const int rc = ap_parse(&sp, argc, argv);
    if (rc) return rc;
    if (!A->source) return ap_usage_error(&sp, "--source FILE|DIR|GLOB|LIST.txt is required");
    if (A->n_imgsz == 1) A->imgsz[1] = A->imgsz[0]; /* detect.py: imgsz *= 2 if len == 1 */
    if (!A->n_weights && !A->cfg)
        return ap_usage_error(&sp, "--weights W (or --cfg MODEL for initial weights)");
    if (strchr(A->name, '/'))
        return ap_usage_error(&sp, "--name: '%s' is not a plain name", A->name);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Model                                                                                    */

static bool ends_with_ci(const char *s, const char *suf)
{
    const size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

/* ---------------------------------------------------------------------------------------- */
/* Sources                                                                                  */

/* ultralytics' IMG_FORMATS: files of a directory that are taken as images. */
static bool is_image_name(const char *s)
{
    static const char *const ext[] = { ".bmp", ".dng", ".jpeg", ".jpg",  ".mpo",
                                       ".png", ".tif", ".tiff", ".webp", ".pfm" };
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (ends_with_ci(s, ext[i])) return true;
    return false;
}

static int paths_add(struct paths *p, const char *dir, const char *name)
{
    if (p->n == p->cap) {
        const size_t cap = p->cap ? 2 * p->cap : 64;
        char **v = realloc(p->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        p->v = v;
        p->cap = cap;
    }
    char *s;
    if (dir ? asprintf(&s, "%s/%s", dir, name) < 0 : !(s = strdup(name))) return -ENOMEM;
    p->v[p->n++] = s;
    return 0;
}

static void paths_free(struct paths *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i]);
    free(p->v);
    memset(p, 0, sizeof *p);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The images of directory `dir`, sorted by name (ultralytics sorts its glob). */
static int add_dir(struct paths *p, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -errno;
    const size_t first = p->n;
    int rc = 0;
    const struct dirent *e;
    while ((e = readdir(d)) && rc == 0)
        if (e->d_name[0] != '.' && is_image_name(e->d_name)) rc = paths_add(p, dir, e->d_name);
    closedir(d);
    qsort(p->v + first, p->n - first, sizeof *p->v, cmp_str);
    return rc;
}

/*
 * A list entry: `line` as written when it exists, else relative to the folder of `list` (when
 * line is relative and list has a folder). dst: out, the path to use. Returns 0, or -errno of
 * the path as written (the file is named by the caller).
 */
static int list_entry(const char *list, const char *line, char *dst, size_t cap)
{
    struct stat st;
    if (stat(line, &st) == 0) {
        snprintf(dst, cap, "%s", line);
        return 0;
    }
    const int first = -errno;
    const char *slash = strrchr(list, '/');
    if (line[0] == '/' || !slash) return first;
    const int n = snprintf(dst, cap, "%.*s/%s", (int)(slash - list), list, line);
    if (n < 0 || (size_t)n >= cap) return -ENAMETOOLONG;
    return stat(dst, &st) == 0 ? 0 : first;
}

/*
 * A file, a directory, or (for *.txt) a list of files and directories, one per line. Entries
 * that cannot be used are reported (file, and list line) and counted in *skipped. Returns 0, or
 * -ENOMEM (stop).
 */
static int add_source(struct paths *p, const char *src, int depth, int *skipped)
{
    struct stat st;
    if (depth == 0 && strpbrk(src, "*?[") && stat(src, &st) != 0) {
        /* LoadImages: sorted(glob.glob(p)), the image files among them */
        glob_t g;
        const int grc = glob(src, 0, NULL, &g);
        int rc = 0;
        for (size_t i = 0; grc == 0 && i < g.gl_pathc && rc == 0; i++)
            if (is_image_name(g.gl_pathv[i])) rc = paths_add(p, NULL, g.gl_pathv[i]);
        if (grc == 0) globfree(&g);
        if (grc == GLOB_NOSPACE || rc == -ENOMEM) return -ENOMEM;
        return 0;
    }
    if (stat(src, &st) != 0) {
        fprintf(stderr, PROG ": %s: %s\n", src, strerror(errno));
        ++*skipped;
        return 0;
    }
    int rc;
    if (S_ISDIR(st.st_mode)) {
        rc = add_dir(p, src);
    } else if (depth == 0 && ends_with_ci(src, ".txt")) {
        FILE *f = fopen(src, "r");
        if (!f) {
            fprintf(stderr, PROG ": %s: %s\n", src, strerror(errno));
            ++*skipped;
            return 0;
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        int ln = 0;
        rc = 0;
        while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
            ln++;
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                             line[n - 1] == '\t'))
                line[--n] = '\0';
            const char *s = line;
            while (*s == ' ' || *s == '\t')
                s++;
            if (!*s) continue;
            char path[PATH_MAX];
            const int e = list_entry(src, s, path, sizeof path);
            if (e < 0) {
                fprintf(stderr, PROG ": %s:%d: %s: %s (also not found relative to the list)\n", src,
                        ln, s, strerror(-e));
                ++*skipped;
                continue;
            }
            rc = add_source(p, path, depth + 1, skipped);
        }
        const int bad_read = ferror(f);
        free(line);
        fclose(f);
        if (rc == 0 && bad_read) {
            fprintf(stderr, PROG ": %s: read error after line %d\n", src, ln);
            ++*skipped;
        }
        return rc;
    } else {
        rc = paths_add(p, NULL, src);
    }
    if (rc == -ENOMEM) return rc;
    if (rc < 0) {
        fprintf(stderr, PROG ": %s: %s\n", src, strerror(-rc));
        ++*skipped;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The file name without directory and extension into dst. */
static void stem_of(const char *path, char *dst, size_t cap)
{
    snprintf(dst, cap, "%s", base_name(path));
    char *dot = strrchr(dst, '.');
    if (dot && dot != dst) *dot = '\0';
}

static const char *class_name(const struct trn_plot_names *names, int c, char *buf, size_t cap)
{
    if (names && c >= 0 && c < names->n && names->names[c]) return names->names[c];
    snprintf(buf, cap, "%d", c);
    return buf;
}

/*
 * The Annotator's box_label (utils/plots.py, cv2 path) on an RGB image: a box of width
 * lw = max(round((h + w) / 2 * 0.003), 2) in the class colour, and when label != NULL a filled
 * tag in that colour above the box (inside when there is no room) with the label in white.
 */
static int annotate(uint8_t *rgb, int w, int h, const struct trn_det *dets, int n,
                    const struct trn_plot_names *names, const struct args *A)
{
    cairo_surface_t *s = trn_plot_rgb_surface(rgb, w, h);
    if (!s) return -ENOMEM;
    uint8_t *px = cairo_image_surface_get_data(s);
    const int stride = cairo_image_surface_get_stride(s);
    cairo_t *cr = cairo_create(s);
    /* Annotator(line_width=line_thickness): detect.py's default 3 */
    const double lw = (double)A->line_thickness;
    /* cv2.getTextSize(fontScale = lw / 3) is about 22 * scale pixels tall for capitals; a sans
     * font at 1.4x that em size has the same cap height */
    const double font_px = 22.0 * lw / 3 * 1.4;
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, font_px);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_MITER);
    /* detect.py draws reversed(det): the most confident box last, on top */
    for (int i = n - 1; i >= 0; i--) {
        const struct trn_det *d = &dets[i];
        const uint32_t c = trn_plot_color(d->cls);
        const double r = (c >> 16 & 255) / 255.0, g = (c >> 8 & 255) / 255.0, b = (c & 255) / 255.0;
        const double x1 = floor(d->x1), y1 = floor(d->y1), x2 = floor(d->x2), y2 = floor(d->y2);
        cairo_set_source_rgb(cr, r, g, b);
        cairo_set_line_width(cr, lw);
        cairo_rectangle(cr, x1, y1, x2 - x1, y2 - y1);
        cairo_stroke(cr);
        if (A->hide_labels) continue;
        char label[160], num[32];
        const char *nm = class_name(names, d->cls, num, sizeof num);
        if (A->hide_conf)
            snprintf(label, sizeof label, "%s", nm);
        else
            snprintf(label, sizeof label, "%s %.2f", nm, (double)d->conf);
        cairo_text_extents_t te;
        cairo_font_extents_t fe;
        cairo_text_extents(cr, label, &te);
        cairo_font_extents(cr, &fe);
        const double tw = te.x_advance, th = fe.ascent;
        const bool outside = y1 - th >= 3;
        const double ty0 = outside ? y1 - th - 3 : y1, ty1 = outside ? y1 : y1 + th + 3;
        cairo_rectangle(cr, x1 - lw / 2, ty0, tw + lw, ty1 - ty0);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_move_to(cr, x1, outside ? y1 - 2 - fe.descent * 0.3 : y1 + th + 1);
        cairo_show_text(cr, label);
    }
    cairo_surface_flush(s);
    int rc = cairo_status(cr) == CAIRO_STATUS_SUCCESS ? 0 : -EIO;
    for (int y = 0; y < h && rc == 0; y++) {
        const uint32_t *row = (const uint32_t *)(const void *)(px + (size_t)y * (size_t)stride);
        uint8_t *dst = rgb + (size_t)y * (size_t)w * 3;
        for (int x = 0; x < w; x++) {
            dst[3 * x] = (uint8_t)(row[x] >> 16);
            dst[3 * x + 1] = (uint8_t)(row[x] >> 8);
            dst[3 * x + 2] = (uint8_t)row[x];
        }
    }
    cairo_destroy(cr);
    cairo_surface_destroy(s);
    return rc;
}

/*
 * detect.py --save-crop: save_one_box(xyxy, imc, crops/NAME/STEM.jpg, BGR=True) for one
 * detection of the unannotated image im (w x h RGB): the box's w, h * 1.02 + 10 about its
 * centre in float32, truncated to integers (.long()), clipped to the image; written as PIL does
 * (quality 95, 4:4:4) to the first free name of STEM.jpg, STEM2.jpg, ... (increment_path).
 */
static int save_crop(const char *run_dir, const struct trn_plot_names *names, const uint8_t *im,
                     int w, int h, const struct trn_det *d, const char *stem)
{
    const float cx = (d->x1 + d->x2) / 2, cy = (d->y1 + d->y2) / 2;
    const float bw = (d->x2 - d->x1) * 1.02f + 10, bh = (d->y2 - d->y1) * 1.02f + 10;
    long x1 = (long)(cx - bw / 2), y1 = (long)(cy - bh / 2), x2 = (long)(cx + bw / 2),
         y2 = (long)(cy + bh / 2);
    x1 = x1 < 0 ? 0 : x1 > w ? w : x1, x2 = x2 < 0 ? 0 : x2 > w ? w : x2;
    y1 = y1 < 0 ? 0 : y1 > h ? h : y1, y2 = y2 < 0 ? 0 : y2 > h ? h : y2;
    if (x2 <= x1 || y2 <= y1) return 0;
    char num[32], dirp[PATH_MAX], path[PATH_MAX + 300];
    const char *nm = class_name(names, d->cls, num, sizeof num);
    snprintf(dirp, sizeof dirp, "%s/crops", run_dir);
    if (mkdir(dirp, 0777) < 0 && errno != EEXIST) return -errno;
    snprintf(dirp, sizeof dirp, "%s/crops/%s", run_dir, nm);
    if (mkdir(dirp, 0777) < 0 && errno != EEXIST) return -errno;
    snprintf(path, sizeof path, "%s/%s.jpg", dirp, stem);
    for (int k = 2; access(path, F_OK) == 0 && k < 9999; k++)
        snprintf(path, sizeof path, "%s/%s%d.jpg", dirp, stem, k);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    const int cw = (int)(x2 - x1), ch = (int)(y2 - y1);
    int rc = tj && tjCompress2(tj, im + ((size_t)y1 * (size_t)w + (size_t)x1) * 3, cw, w * 3, ch,
                               TJPF_RGB, &jpg, &len, TJSAMP_444, 95, TJFLAG_ACCURATEDCT) == 0
                 ? 0
                 : -EIO;
    if (rc == 0) rc = trn_write_file(path, jpg, len, false, NULL, 0);
    tjFree(jpg);
    if (tj) tjDestroy(tj);
    return rc;
}

/* One COCO results entry (val.py's save_one_json) appended to the json text. */
struct json_out {
    FILE *f;
    size_t n;
};

static void json_det(struct json_out *j, const char *stem, int category, const struct trn_det *d)
{
    /* image_id: int(stem) when the stem is numeric, else the stem (a JSON string) */
    bool numeric = stem[0] != '\0';
    for (const char *s = stem; *s; s++)
        if (*s < '0' || *s > '9') numeric = false;
    fprintf(j->f, "%s\n  {\"image_id\": ", j->n ? "," : "");
    if (numeric) {
        fprintf(j->f, "%lld", strtoll(stem, NULL, 10));
    } else {
        fputc('"', j->f);
        for (const unsigned char *s = (const unsigned char *)stem; *s; s++) {
            if (*s == '"' || *s == '\\')
                fprintf(j->f, "\\%c", *s);
            else if (*s < 0x20)
                fprintf(j->f, "\\u%04x", *s);
            else
                fputc(*s, j->f);
        }
        fputc('"', j->f);
    }
    /* xyxy2xywh then box[:, :2] -= box[:, 2:] / 2: the top-left corner, rounded to 3 places */
    const float bw = d->x2 - d->x1, bh = d->y2 - d->y1;
    const float cx = (d->x1 + d->x2) / 2, cy = (d->y1 + d->y2) / 2;
    fprintf(j->f, ", \"category_id\": %d, \"bbox\": [%.3f, %.3f, %.3f, %.3f], \"score\": %.5f}",
            category, (double)(cx - bw / 2), (double)(cy - bh / 2), (double)bw, (double)bh,
            (double)d->conf);
    j->n++;
}

/* ---------------------------------------------------------------------------------------- */
/* Detection                                                                                */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Per-run state. */
struct detector {
    const struct args *A;
    struct trn_tta *tta; /* the model or ensemble, with --augment's branches */
    const struct trn_plot_names *names;
    int nc, img_h, img_w, stride; /* stride: the letterbox's, max(model stride, 32) */
    struct pack_image_decoder *dec;
    struct trn_nms *nms;
    uint8_t *lb;    /* letterboxed RGB */
    size_t lb_cap;  /* bytes */
    float *in;      /* network input, CHW */
    size_t in_cap;  /* floats */
    uint8_t *im0;   /* copy of the decoded image to draw on */
    size_t im0_cap; /* bytes */
    struct trn_det *dets;
    size_t dets_cap;
    const char *dir; /* run directory */
    struct json_out json;
    double t_pre, t_inf, t_nms; /* summed ms */
    int n_done, n_txt;
    int last_w, last_h;
};

static bool class_wanted(const struct args *A, int c)
{
    if (!A->n_classes) return true;
    for (int i = 0; i < A->n_classes; i++)
        if (A->classes[i] == c) return true;
    return false;
}

/* Detect on one image. Returns 0, or 1 (this image failed, message printed), or < 0 (stop). */
static int detect_one(struct detector *D, const char *path, size_t idx, size_t total)
{
    const struct args *A = D->A;
    const double t0 = now_ms();
    uint8_t *file = NULL;
    size_t flen = 0;
    char e[512];
    int rc = trn_read_file(path, MAX_FILE, (char **)&file, &flen, e, sizeof e);
    if (rc < 0) {
        fprintf(stderr, PROG ": image %zu/%zu %s\n", idx, total, e);
        return rc == -ENOMEM ? rc : 1;
    }
    struct pack_image im;
    rc = pack_image_decode(D->dec, file, flen, &im);
    char why[160];
    if (rc < 0) pack_image_error_line(rc, file, flen, why, sizeof why);
    free(file);
    if (rc < 0) {
        const char *detail = pack_image_decoder_detail(D->dec);
        if (!strcmp(detail, why)) detail = "";
        fprintf(stderr, PROG ": image %zu/%zu %s: cannot read the image: %s%s%s\n", idx, total,
                path, why, detail[0] ? ": " : "", detail);
        return rc == -ENOMEM ? rc : 1;
    }
    /* One rule, each side as ultralytics has it, and said: detect.py's cv2.imread decodes a
     * JPEG whose scan data is cut or damaged with the missing part filled, and so do we;
     * train.py's verify_image_label refuses it, and so does yolo-pack. */
    if (im.warnings & PACK_IMAGE_WARN_DATA)
        fprintf(stderr,
                PROG
                ": warning: image %zu/%zu %s: corrupt JPEG data (%s): decoded with the missing "
                "part filled, as cv2.imread does (yolo-pack skips such an image, as train.py "
                "does)\n",
                idx, total, path, pack_image_decoder_detail(D->dec));
    const int w0 = im.width, h0 = im.height;
    struct trn_aug_letterbox_opts lo;
    trn_aug_letterbox_opts_default(&lo);
    lo.auto_pad = true;
    lo.stride = D->stride;
    struct trn_aug_letterbox_plan plan;
    char err[512] = "";
    rc = trn_aug_letterbox_plan(w0, h0, D->img_h, D->img_w, &lo, &plan);
    if (rc < 0) {
        fprintf(stderr, PROG ": image %zu/%zu %s: %dx%d cannot be letterboxed: %s\n", idx, total,
                path, w0, h0, trn_aug_strerror(rc));
        return 1;
    }
    const size_t lb_bytes = (size_t)plan.out_w * (size_t)plan.out_h * 3;
    const size_t im0_bytes = (size_t)w0 * (size_t)h0 * 3;
    if (trn_grow((void **)&D->lb, &D->lb_cap, lb_bytes, 1) ||
        trn_grow((void **)&D->in, &D->in_cap, lb_bytes, sizeof(float)) ||
        trn_grow((void **)&D->im0, &D->im0_cap, im0_bytes, 1))
        return -ENOMEM;
    memcpy(D->im0, im.pixels, im0_bytes);
    rc = trn_aug_letterbox(D->im0, w0, h0, &plan, D->lb, D->lb_cap);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s: letterbox: %s\n", path, trn_aug_strerror(rc));
        return 1;
    }
    const size_t plane = (size_t)plan.out_w * (size_t)plan.out_h;
    for (size_t p = 0; p < plane; p++)
        for (int c = 0; c < 3; c++)
            D->in[(size_t)c * plane + p] = (float)D->lb[3 * p + (size_t)c] / 255.0f;
    const double t1 = now_ms();

    const float *pred = NULL;
    int rows = 0;
    rc = trn_tta_infer(D->tta, D->in, plan.out_h, plan.out_w, &pred, &rows, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s: inference at %dx%d: %s\n", path, plan.out_w, plan.out_h,
                err[0] ? err : trn_strerror(rc));
        return rc;
    }
    const double t2 = now_ms();

    struct trn_nms_opts no;
    trn_nms_opts_default(&no);
    no.conf_thres = (float)A->conf;
    no.iou_thres = A->iou;
    no.multi_label = 0;
    no.agnostic = A->agnostic_nms;
    no.max_det = A->n_classes ? TRN_NMS_MAX_NMS : (int)A->max_det;
    const int nd = trn_nms_run(D->nms, pred, (size_t)rows, (size_t)D->nc + 5, D->nc, &no, D->dets,
                               D->dets_cap);
    if (nd < 0) {
        fprintf(stderr, PROG ": %s: NMS: %s\n", path, trn_strerror(nd));
        return nd;
    }
    int n = 0;
    for (int i = 0; i < nd && n < A->max_det; i++)
        if (class_wanted(A, D->dets[i].cls)) D->dets[n++] = D->dets[i];
    const double t3 = now_ms(); /* detect.py's dt[2]: non_max_suppression (classes= included) */
    double gain, padw, padh;
    trn_ratio_pad(plan.out_w, plan.out_h, w0, h0, &gain, &padw, &padh);
    trn_scale_dets(D->dets, (size_t)n, gain, padw, padh, w0, h0);
    D->t_pre += t1 - t0;
    D->t_inf += t2 - t1;
    D->t_nms += t3 - t2;
    D->last_w = plan.out_w;
    D->last_h = plan.out_h;

    /* detect.py's line: counts per class in class order, then the inference time */
    char line[4096];
    int len = snprintf(line, sizeof line, "image %zu/%zu %s: %dx%d ", idx, total, path, plan.out_h,
                       plan.out_w);
    int *count = calloc((size_t)D->nc, sizeof *count);
    if (!count) return -ENOMEM;
    for (int i = 0; i < n; i++)
        count[D->dets[i].cls]++;
    for (int c = 0; c < D->nc && len < (int)sizeof line - 200; c++) {
        if (!count[c]) continue;
        char num[32];
        len += snprintf(line + len, sizeof line - (size_t)len, "%d %s%s, ", count[c],
                        class_name(D->names, c, num, sizeof num), count[c] > 1 ? "s" : "");
    }
    free(count);
    printf("%s%s%.1fms\n", line, n ? "" : "(no detections), ", t2 - t1);

    char stem[NAME_MAX + 1];
    stem_of(path, stem, sizeof stem);
    int ret = 0;
    if (A->save_txt && n > 0) {
        char tp[PATH_MAX];
        snprintf(tp, sizeof tp, "%s/labels/%s.txt", D->dir, stem);
        FILE *f = fopen(tp, "a");
        if (!f) {
            fprintf(stderr, PROG ": %s: %s\n", tp, strerror(errno));
            ret = 1;
        } else {
            for (int i = n - 1; i >= 0; i--) {
                const struct trn_det *d = &D->dets[i];
                /* xyxy2xywh(...) / gn in float32, as the torch tensors */
                const float cx = (d->x1 + d->x2) / 2 / (float)w0;
                const float cy = (d->y1 + d->y2) / 2 / (float)h0;
                const float bw = (d->x2 - d->x1) / (float)w0;
                const float bh = (d->y2 - d->y1) / (float)h0;
                fprintf(f, "%d %g %g %g %g", d->cls, (double)cx, (double)cy, (double)bw,
                        (double)bh);
                if (A->save_conf) fprintf(f, " %g", (double)d->conf);
                fputc('\n', f);
            }
            if (fclose(f) != 0) {
                fprintf(stderr, PROG ": %s: %s\n", tp, strerror(errno));
                ret = 1;
            }
            D->n_txt++;
        }
    }
    if (D->json.f)
        for (int i = 0; i < n; i++) {
            const int cls = D->dets[i].cls;
            json_det(&D->json, stem, D->nc == 80 ? trn_coco80_to_coco91(cls) : cls, &D->dets[i]);
        }
    for (int i = n - 1; A->save_crop && i >= 0 && ret == 0; i--) { /* reversed(det) */
        if ((rc = save_crop(D->dir, D->names, D->im0, w0, h0, &D->dets[i], stem)) < 0) {
            fprintf(stderr, PROG ": %s: crop: %s\n", path, strerror(-rc));
            ret = 1;
        }
    }
    if (!A->nosave) {
        rc = annotate(D->im0, w0, h0, D->dets, n, D->names, A);
        char ip[PATH_MAX];
        const char *bn = base_name(path);
        /* cv2.imwrite(save_dir / p.name): a PNG stays PNG (lossless); JPEG for the others
         * (detect.py keeps BMP and WebP too) */
        const bool jpg = ends_with_ci(bn, ".jpg") || ends_with_ci(bn, ".jpeg");
        const bool png = ends_with_ci(bn, ".png");
        snprintf(ip, sizeof ip, "%s/%s%s", D->dir, jpg || png ? bn : stem,
                 jpg || png ? "" : ".jpg");
        if (rc == 0 && png)
            rc = trn_plot_png_write(D->im0, w0, h0, ip, err, sizeof err);
        else if (rc == 0)
            rc = trn_plot_jpeg_write(D->im0, w0, h0, DET_JPEG_Q, ip, err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, PROG ": %s: %s\n", ip, err[0] ? err : strerror(-rc));
            ret = 1;
        }
    }
    D->n_done++;
    return ret;
}

static int run(const struct args *A)
{
    struct trn_model *models[MAX_WEIGHTS] = { 0 };
    const int n_models = A->n_weights ? A->n_weights : 1;
    struct trn_plot_names names = { 0 };
    struct detector D;
    memset(&D, 0, sizeof D);
    struct paths src = { 0 };
    int ret = 1, rc;
    char dir[PATH_MAX - 64] = "";

    for (int k = 0; k < n_models; k++) {
        char werr[768] = "", *meta = NULL;
        size_t mlen = 0;
        rc = trn_weights_load(A->n_weights ? A->weights[k] : NULL, A->cfg, 0, &models[k],
                              k == 0 ? &meta : NULL, k == 0 ? &mlen : NULL, werr, sizeof werr);
        if (rc < 0) {
            fprintf(stderr, PROG ": %s\n", werr);
            goto out;
        }
        /* attempt_load(fuse=True)'s lines: the Conv+BN fused model of a released checkpoint
         * (strip_optimizer froze its parameters: 0 gradients) */
        char fl[256];
        if (trn_model_summary_line(models[k], 640, true, true, fl, sizeof fl) > 0)
            fprintf(stderr, "Fusing layers... \n%s\n", fl);
        /* A checkpoint carries the dataset's class names in its metadata; an ensemble takes the
         * first model's, as ultralytics' Ensemble does. */
        if (meta && trn_plot_names_parse(meta, mlen, &names) < 0) {
            free(meta);
            goto oom;
        }
        free(meta);
    }
    if (!A->n_weights)
        fprintf(stderr, PROG ": no --weights: the initial weights of --cfg (seed 0)\n");
    const struct trn_model_info *mi = trn_model_info(models[0]);
    if (names.n != mi->nc) {
        trn_plot_names_free(&names);
        if (mi->nc == 80) {
            names.names = calloc(80, sizeof *names.names);
            if (!names.names) goto oom;
            names.n = 80;
            for (int c = 0; c < 80; c++)
                if (!(names.names[c] = strdup(pack_coco80_names[c]))) goto oom;
        }
    }
    struct trn_tta_opts to;
    trn_tta_opts_default(&to);
    to.augment = A->augment;
    to.device = tool_pick_device(PROG, A->device);
    if (to.device == -2) goto out;
    to.amp = A->half ? KERN_DT_F16 : KERN_DT_F32; /* --half: fp16 convs, fp32 accumulation */
    to.threads = trn_cli_threads(A->threads, 1);  /* one per core, BLAS single (cli.h) */
    to.cpu_engine = tool_cpu_engine(A->cpu_engine);
    /* detect.py's auto letterbox gives several shapes: keep nets for a few of them */
    const int per_shape = n_models * (A->augment ? TRN_TTA_BRANCHES : 1);
    to.max_shapes = MAX_NETS / per_shape > 1 ? MAX_NETS / per_shape : 1;
    char terr[512] = "";
    rc = trn_tta_create(models, n_models, 1, &to, &D.tta, terr, sizeof terr);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s\n", terr[0] ? terr : trn_strerror(rc));
        if (rc == -EINVAL && n_models > 1)
            fprintf(stderr, "hint: every --weights of an ensemble must detect the same classes\n");
        goto out;
    }
    if (n_models > 1) {
        fprintf(stderr, PROG ": Ensemble created with");
        for (int k = 0; k < n_models; k++)
            fprintf(stderr, " %s", A->weights[k]);
        fprintf(stderr, "\n");
    }
    for (int i = 0; i < A->n_classes; i++)
        if (A->classes[i] >= mi->nc)
            fprintf(stderr, PROG ": warning: --classes %ld: the model has %d classes\n",
                    A->classes[i], mi->nc);
    /* check_img_size: a multiple of the largest stride */
    const int smax = trn_tta_stride(D.tta) > LB_STRIDE ? trn_tta_stride(D.tta) : LB_STRIDE;
    D.stride = smax;
    D.img_h = (int)((A->imgsz[0] + smax - 1) / smax * smax);
    D.img_w = (int)((A->imgsz[1] + smax - 1) / smax * smax);
    for (int k = 0; k < 2; k++)
        if ((k ? D.img_w : D.img_h) != A->imgsz[k])
            fprintf(stderr,
                    PROG ": warning: --img-size %ld must be multiple of max stride %d, updating "
                         "to %d\n",
                    A->imgsz[k], smax, k ? D.img_w : D.img_h);

    int skipped = 0;
    rc = add_source(&src, A->source, 0, &skipped);
    if (rc < 0) goto oom;
    if (src.n == 0) {
        fprintf(stderr,
                PROG ": %s: no images found\nhint: JPEG files, a directory of them, or a "
                     ".txt list of paths\n",
                A->source);
        goto out;
    }
    rc = trn_run_dir(A->project, A->name, A->exist_ok, dir, sizeof dir);
    if (rc == 0 && A->save_txt) {
        char lp[PATH_MAX];
        snprintf(lp, sizeof lp, "%s/labels", dir);
        rc = trn_mkdirs(lp);
    }
    if (rc < 0) {
        fprintf(stderr, PROG ": cannot create the run directory %s/%s: %s\n", A->project, A->name,
                strerror(-rc));
        goto out;
    }
    D.A = A;
    D.names = names.n ? &names : NULL;
    D.nc = mi->nc;
    D.dir = dir;
    D.dets_cap = A->n_classes ? TRN_NMS_MAX_NMS : (size_t)A->max_det;
    D.dets = malloc(D.dets_cap * sizeof *D.dets);
    if (!D.dets || pack_image_decoder_create(NULL, &D.dec) < 0 || trn_nms_create(&D.nms) < 0)
        goto oom;
    char jp[PATH_MAX];
    if (A->save_json) {
        snprintf(jp, sizeof jp, "%s/predictions.json", dir);
        D.json.f = fopen(jp, "w");
        if (!D.json.f) {
            fprintf(stderr, PROG ": %s: %s\n", jp, strerror(errno));
            goto out;
        }
        fputc('[', D.json.f);
    }
    int failed = 0;
    for (size_t i = 0; i < src.n; i++) {
        rc = detect_one(&D, src.v[i], i + 1, src.n);
        if (rc < 0) goto out;
        if (rc) failed++;
    }
    if (D.json.f) {
        fputs(D.json.n ? "\n]\n" : "]\n", D.json.f);
        const int bad_close = fclose(D.json.f) != 0;
        D.json.f = NULL;
        if (bad_close) {
            fprintf(stderr, PROG ": %s: %s\n", jp, strerror(errno));
            failed++;
        }
    }
    if (D.n_done > 0)
        printf("Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape "
               "(1, 3, %d, %d)\n",
               D.t_pre / D.n_done, D.t_inf / D.n_done, D.t_nms / D.n_done, D.img_h, D.img_w);
    if (A->save_txt || !A->nosave) {
        printf("Results saved to %s\n", dir);
        if (A->save_txt) printf("%d labels saved to %s/labels\n", D.n_txt, dir);
    }
    if (A->save_json) printf("Saving %s (%zu detections)\n", jp, D.json.n);
    if (failed || skipped) {
        const int unreadable = (int)src.n - D.n_done;
        fprintf(stderr,
                PROG ": %d of %zu images detected; skipped: %d unreadable images, %d missing "
                     "sources or list lines; %d outputs not written (see above)\n",
                D.n_done, src.n, unreadable, skipped, failed - unreadable);
    }
    ret = failed || skipped ? 1 : 0;
    goto out;
oom:
    fprintf(stderr, PROG ": out of memory\n");
    ret = 1;
out:
    if (D.json.f) fclose(D.json.f);
    trn_tta_destroy(D.tta);
    trn_nms_destroy(D.nms);
    pack_image_decoder_destroy(D.dec);
    free(D.dets);
    free(D.lb);
    free(D.in);
    free(D.im0);
    paths_free(&src);
    trn_plot_names_free(&names);
    for (int k = 0; k < n_models; k++)
        trn_model_destroy(models[k]);
    return ret;
}

int main(int argc, char **argv)
{
    tool_omp_wait(argv);
    struct args A;
    const int rc = parse_args(argc, argv, &A);
    if (rc) return rc == AP_HELPED ? 0 : rc;
    const int ret = run(&A);
    trn_plots_cleanup(); /* cairo's and fontconfig's caches: a clean exit under leak checks */
    return ret;
}
