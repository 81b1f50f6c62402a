/*
 * val: the validation loop of val.py run() on the CPU (see val.h for what is reproduced).
 */
#include "val.h"
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kern.h"
#include "det.h"
#include "loader.h"
#include "loss.h"
#include "net.h"
#include "nms.h"
#include "tta.h"
#include "errors.h"
#include "util.h"

void trn_val_opts_default(struct trn_val_opts *o)
{
    memset(o, 0, sizeof *o);
    o->img_size = 640;
    o->batch_size = 32;
    o->micro_batch = 4;
    o->device = -1;
    o->conf_thres = 0.001f;
    o->iou_thres = 0.6;
    o->max_det = TRN_NMS_MAX_DET;
    o->rect = true;
    o->cpu_engine = TRN_CPU_ENGINE_AUTO;
}

void trn_val_result_free(struct trn_val_result *res)
{
    if (!res) return;
    trn_ap_result_free(&res->ap);
    free(res->confusion);
    free(res->coco);
    free(res->image_ids);
    memset(res, 0, sizeof *res);
}

void trn_val_dets_to_rows(const struct trn_det *dets, size_t n, int image, float *rows)
{
    for (size_t i = 0; i < n; i++) {
        const struct trn_det *d = &dets[i];
        float *r = rows + 7 * i;
        /* xyxy2xywh in float32, as output_to_target does on the float32 tensor */
        r[0] = (float)image;
        r[1] = (float)d->cls;
        r[2] = (d->x1 + d->x2) / 2;
        r[3] = (d->y1 + d->y2) / 2;
        r[4] = d->x2 - d->x1;
        r[5] = d->y2 - d->y1;
        r[6] = d->conf;
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void logf_(const struct trn_val_opts *o, const char *fmt, ...)
{
    if (!o->log) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->log(o->log_ctx, line);
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/*
 * The image id of every record (save_json): read and decode each record once (the index
 * summaries do not carry it). A record without an id (-1: a file stem that is not a number)
 * gets its record number, as ultralytics would use the stem string, which COCO cannot take.
 */
static int read_image_ids(const struct ffr_reader *r, const struct trn_val_opts *o, int64_t *ids,
                          char **stems, char *err, size_t err_cap)
{
    const uint64_t n = ffr_reader_count(r);
    struct ffr_decoder *dec = NULL;
    int rc = ffr_decoder_create(&dec);
    if (rc < 0) {
        trn_seterr(err, err_cap, "reading image ids: %s", ffr_strerror(rc));
        return rc;
    }
    void *buf = NULL;
    size_t cap = 0;
    uint64_t fallback = 0;
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        struct ffr_record_info ri;
        rc = ffr_reader_info(r, i, &ri);
        if (rc < 0) break;
        if (ri.raw_len > cap) {
            void *nb = realloc(buf, ri.raw_len);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
            cap = ri.raw_len;
        }
        const int64_t got = ffr_reader_read(r, dec, i, buf, cap);
        if (got < 0) {
            rc = (int)got;
            trn_seterr(err, err_cap, "record %" PRIu64 ": %s", i, ffr_strerror(rc));
            break;
        }
        struct det_sample s;
        rc = det_decode(buf, (size_t)got, &s);
        if (rc < 0) {
            trn_seterr(err, err_cap, "record %" PRIu64 ": not a detection sample: %s", i,
                       ffr_strerror(rc));
            break;
        }
        if (stems) { /* Path(name).stem: the name less its last extension */
            size_t len = s.name_len;
            const char *base = s.name;
            for (uint32_t k = 0; k < s.name_len; k++)
                if (s.name[k] == '/') base = s.name + k + 1, len = s.name_len - k - 1;
            const char *dot = memrchr(base, '.', len);
            if (dot && dot > base) len = (size_t)(dot - base);
            if (len == 0 || !(stems[i] = strndup(base, len))) {
                rc = len ? -ENOMEM : -EINVAL;
                if (!len) trn_seterr(err, err_cap, "record %" PRIu64 ": no file name", i);
                break;
            }
        }
        if (!ids) continue;
        ids[i] = s.image_id;
        if (s.image_id < 0) {
            ids[i] = (int64_t)i;
            fallback++;
        }
    }
    if (rc == -ENOMEM) trn_seterr(err, err_cap, "reading image ids: out of memory");
    if (rc == 0 && fallback)
        logf_(o,
              "%" PRIu64 " records have no numeric image id: their record numbers are used as "
              "image_id in the json",
              fallback);
    free(buf);
    ffr_decoder_destroy(dec);
    return rc;
}

/* Everything one run holds; freed by state_free. */
struct state {
    struct trn_loader *loader;
    struct trn_tta *tta;  /* the models (one, or an ensemble), with or without augment */
    struct trn_nms **nms; /* one workspace per NMS thread (nms_threads) */
    int n_nms;
    struct trn_val_stats *stats;
    struct trn_confusion *cm;
    float *stage;             /* micro x 3 x max_h x max_w */
    struct trn_det *dets;     /* micro_batch x max_det: a chunk's images, max_det each */
    int *nd;                  /* micro_batch: each image's detection count, or its NMS error */
    struct trn_label *labels; /* label_cap */
    size_t label_cap;
    float *plot_rows; /* 7 floats per detection of a plotted batch */
    size_t plot_cap, n_plot;
    int64_t *ids; /* save_json: image id per record */
    char **stems; /* save_txt: file stem per record */
    uint64_t n_stems;
    float *hybrid; /* save_hybrid: predictions + labels of one image */
    size_t hybrid_cap;
    struct kern_ctx *loss_ctx;            /* loss_hyp: a caller-only context for the loss */
    float *raw[TRN_MODEL_MAX_LEVELS];     /* loss_hyp: the batch's raw Detect outputs */
    size_t raw_cap[TRN_MODEL_MAX_LEVELS]; /* floats allocated in raw[l] */
    uint8_t *seen_rec;                    /* save_json: records validated */
    size_t coco_cap;
};

static void state_free(struct state *s)
{
    trn_loader_destroy(s->loader);
    trn_tta_destroy(s->tta);
    for (int t = 0; s->nms && t < s->n_nms; t++)
        trn_nms_destroy(s->nms[t]);
    free(s->nms);
    free(s->nd);
    trn_val_stats_destroy(s->stats);
    trn_confusion_destroy(s->cm);
    free(s->stage);
    free(s->dets);
    free(s->labels);
    free(s->plot_rows);
    free(s->ids);
    for (uint64_t i = 0; s->stems && i < s->n_stems; i++)
        free(s->stems[i]);
    free(s->stems);
    free(s->hybrid);
    free(s->seen_rec);
    kern_ctx_destroy(s->loss_ctx);
    for (int l = 0; l < TRN_MODEL_MAX_LEVELS; l++)
        free(s->raw[l]);
}

/*
 * The raw Detect outputs of images c0 .. c0 + cn - 1 of the batch into s->raw (val.py keeps
 * train_out for compute_loss). trn_net_infer does not hand out its raw outputs, so this runs
 * the eval forward once more: the cost of the val losses, paid only when they are asked for.
 */
static int keep_raw(struct state *s, const struct trn_batch *b, int c0, int cn, char *err,
                    size_t err_cap)
{
    const int bn = b->n;
    struct trn_net *net = NULL;
    int rc = trn_tta_net(s->tta, 0, b->height, b->width, &net, err, err_cap);
    if (rc < 0) return rc;
    const float *outs[TRN_MODEL_MAX_LEVELS];
    rc = trn_net_forward(net, s->stage, false, outs);
    if (rc < 0) {
        trn_seterr(err, err_cap, "forward for the val loss: %s", trn_strerror(rc));
        return rc;
    }
    for (int l = 0; l < trn_net_levels(net); l++) {
        int shape[5];
        const long n = trn_net_output_shape(net, l, shape);
        if (n <= 0) return -EINVAL;
        const size_t per = (size_t)n / (size_t)shape[0]; /* floats per image */
        if (s->raw_cap[l] < per * (size_t)bn) {
            free(s->raw[l]);
            s->raw_cap[l] = 0;
            if (!(s->raw[l] = malloc(per * (size_t)bn * sizeof(float)))) {
                trn_seterr(err, err_cap, "out of memory");
                return -ENOMEM;
            }
            s->raw_cap[l] = per * (size_t)bn;
        }
        memcpy(s->raw[l] + (size_t)c0 * per, outs[l], (size_t)cn * per * sizeof(float));
    }
    return 0;
}

/* ComputeLoss of one whole rect batch (val.py: loss += compute_loss(train_out, targets)[1]). */
static int batch_loss(struct state *s, struct trn_model *m, const struct trn_val_opts *o,
                      const struct trn_batch *b, uint64_t step, double sum[3], char *err,
                      size_t err_cap)
{
    if (b->n_targets > (size_t)INT32_MAX / 64) return -E2BIG;
    const int nt = (int)b->n_targets;
    struct trn_loss_cfg cfg;
    const int img = o->loss_img > 0 ? o->loss_img : o->img_size;
    /* gains as train.py sets them for the training image size; grids of this rect batch */
    struct trn_net *net = NULL;
    int rc = trn_tta_net(s->tta, 0, b->height, b->width, &net, err, err_cap);
    if (rc < 0) return rc;
    rc = trn_loss_cfg_from_model(m, o->loss_hyp, b->n, img, 0.0f, nt > 0 ? nt : 1, &cfg);
    for (int l = 0; rc == 0 && l < cfg.nl; l++) {
        int shape[5];
        if (trn_net_output_shape(net, l, shape) <= 0) rc = -EINVAL;
        cfg.ny[l] = shape[2];
        cfg.nx[l] = shape[3];
    }
    struct trn_loss *L = NULL;
    if (rc == 0) rc = trn_loss_create(&cfg, &L);
    struct trn_loss_items it;
    if (rc == 0)
        rc = trn_loss_compute(L, s->loss_ctx, (const float *const *)s->raw, b->targets, nt, NULL,
                              &it);
    trn_loss_destroy(L);
    if (rc < 0) {
        trn_seterr(err, err_cap, "val loss of step %" PRIu64 ": %s", step, trn_loss_strerror(rc));
        return rc;
    }
    sum[0] += it.lbox;
    sum[1] += it.lobj;
    sum[2] += it.lcls;
    return 0;
}

static int check_opts(const struct trn_val_opts *o, int nc, char *err, size_t err_cap)
{
    if (o->img_size < 32 || o->batch_size < 1 || o->micro_batch < 1 ||
        o->micro_batch > o->batch_size || !(o->conf_thres >= 0 && o->conf_thres < 1) ||
        !(o->iou_thres >= 0 && o->iou_thres <= 1) || o->max_det < 1 || o->max_batches < 0 ||
        (o->amp != KERN_DT_F32 && o->amp != KERN_DT_F16 && o->amp != KERN_DT_BF16)) {
        trn_seterr(err, err_cap, "bad validation options");
        return -EINVAL;
    }
    if (o->save_json && o->coco91 && nc > 80) {
        trn_seterr(err, err_cap,
                   "COCO 91-id mapping asked for a model with %d classes (at most 80)", nc);
        return -EINVAL;
    }
    return 0;
}

/* The labels of batch image i, in the original image's pixels (val.py's labelsn). */
static int image_labels(struct state *s, const struct trn_batch *b, int i, int nc, double gain,
                        int *n_out, char *err, size_t err_cap)
{
    int n = 0;
    for (size_t t = 0; t < b->n_targets; t++) {
        const float *row = b->targets + 6 * t;
        if ((int)row[0] != i) continue;
        const float c = row[1];
        if (!(c >= 0 && c < (float)nc)) {
            trn_seterr(err, err_cap,
                       "record %" PRIu64 ": label class %g is not one of the model's %d",
                       b->info[i].index, (double)c, nc);
            return -EINVAL;
        }
        if ((size_t)n == s->label_cap) {
            const size_t cap = s->label_cap ? 2 * s->label_cap : 64;
            struct trn_label *nl = realloc(s->labels, cap * sizeof *nl);
            if (!nl) return -ENOMEM;
            s->labels = nl;
            s->label_cap = cap;
        }
        /* targets[:, 2:] *= [width, height] in float32, then xywh2xyxy and scale_boxes */
        const float xywh[4] = { row[2] * (float)b->width, row[3] * (float)b->height,
                                row[4] * (float)b->width, row[5] * (float)b->height };
        float xyxy[4];
        trn_xywh2xyxy(xywh, xyxy);
        const struct trn_batch_image *bi = &b->info[i];
        trn_scale_box(xyxy, gain, bi->pad_w, bi->pad_h, (int)bi->w0, (int)bi->h0);
        struct trn_label *L = &s->labels[n++];
        L->cls = (int)c;
        L->x1 = xyxy[0];
        L->y1 = xyxy[1];
        L->x2 = xyxy[2];
        L->y2 = xyxy[3];
    }
    *n_out = n;
    return 0;
}

static int add_coco(struct state *s, struct trn_val_result *res, const struct trn_val_opts *o,
                    int64_t image_id, const struct trn_det *dets, size_t nd)
{
    if (res->n_coco + nd > s->coco_cap) {
        size_t cap = s->coco_cap ? s->coco_cap : 4096;
        while (cap < res->n_coco + nd)
            cap *= 2;
        struct trn_coco_det *nc = realloc(res->coco, cap * sizeof *nc);
        if (!nc) return -ENOMEM;
        res->coco = nc;
        s->coco_cap = cap;
    }
    for (size_t k = 0; k < nd; k++) {
        const int cls = dets[k].cls;
        const int cat = o->coco91 ? trn_coco80_to_coco91(cls) : cls;
        trn_coco_det_from(&dets[k], image_id, cat, &res->coco[res->n_coco++]);
    }
    return 0;
}

/*
 * val.py --save-hybrid: image i's prediction rows followed by its labels as candidates
 * (non_max_suppression's labels=: box = the label's xywh in batch pixels, objectness 1, its
 * class 1, the rest 0), in s->hybrid; *rows grows by the label count.
 */
static int hybrid_rows(struct state *s, const struct trn_batch *b, int i, const float *pred,
                       int *rows, int no, int nc)
{
    size_t nl = 0;
    for (size_t t = 0; t < b->n_targets; t++)
        nl += (int)b->targets[6 * t] == i;
    const size_t need = ((size_t)*rows + nl) * (size_t)no;
    if (need > s->hybrid_cap) {
        float *h = realloc(s->hybrid, need * sizeof *h);
        if (!h) return -ENOMEM;
        s->hybrid = h;
        s->hybrid_cap = need;
    }
    memcpy(s->hybrid, pred, (size_t)*rows * (size_t)no * sizeof *pred);
    float *v = s->hybrid + (size_t)*rows * (size_t)no;
    for (size_t t = 0; t < b->n_targets; t++) {
        const float *row = b->targets + 6 * t;
        if ((int)row[0] != i) continue;
        memset(v, 0, (size_t)no * sizeof *v);
        v[0] = row[2] * (float)b->width; /* targets[:, 2:] *= whwh, in float32 */
        v[1] = row[3] * (float)b->height;
        v[2] = row[4] * (float)b->width;
        v[3] = row[5] * (float)b->height;
        v[4] = 1.0f;
        const int c = (int)row[1];
        if (c >= 0 && c < nc) v[5 + c] = 1.0f;
        v += no;
    }
    *rows += (int)nl;
    return 0;
}

/* save_one_txt: the image's detections (already in its own pixels) appended to its stem's file,
 * "cls cx cy w h [conf]" normalised by (w0, h0) in float32, '%g' each. */
static int save_one_txt(const struct state *s, const struct trn_val_opts *o,
                        const struct trn_batch_image *bi, const struct trn_det *dets, int nd)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.txt", o->save_txt_dir, s->stems[bi->index]);
    FILE *f = fopen(path, "a");
    if (!f) return -errno;
    const float gw = (float)bi->w0, gh = (float)bi->h0;
    for (int k = 0; k < nd; k++) {
        const struct trn_det *d = &dets[k];
        const float xywh[4] = { (d->x1 + d->x2) / 2 / gw, (d->y1 + d->y2) / 2 / gh,
                                (d->x2 - d->x1) / gw, (d->y2 - d->y1) / gh };
        fprintf(f, "%g %g %g %g %g", (double)(float)d->cls, (double)xywh[0], (double)xywh[1],
                (double)xywh[2], (double)xywh[3]);
        if (o->save_conf) fprintf(f, " %g", (double)d->conf);
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -EIO;
}

/* NMS of image i of a batch (pred: its rows) into dets, on workspace nms: the detection count,
 * or a negative code. Called from the NMS threads, one image each (see post_chunk). */
static int nms_image(struct state *s, struct trn_nms *nms, const struct trn_val_opts *o,
                     const struct trn_batch *b, int i, const float *pred, int rows, int no, int nc,
                     struct trn_det *dets)
{
    struct trn_nms_opts no_;
    trn_nms_opts_default(&no_);
    no_.conf_thres = o->conf_thres;
    no_.iou_thres = o->iou_thres;
    no_.max_det = o->max_det;
    if (o->save_hybrid) { /* s->hybrid is one buffer: nms_threads gives this one thread */
        const int rc = hybrid_rows(s, b, i, pred, &rows, no, nc);
        if (rc < 0) return rc;
        pred = s->hybrid;
    }
    const int nd =
        trn_nms_run(nms, pred, (size_t)rows, (size_t)no, nc, &no_, dets, (size_t)o->max_det);
    for (int k = 0; o->single_cls && k < nd; k++) /* val.py: pred[:, 5] = 0 */
        dets[k].cls = 0;
    return nd;
}

/* One batch image after its NMS (nd detections in dets): mapping back, stats, json, plot rows. */
static int post_image(struct state *s, const struct trn_val_opts *o, struct trn_val_result *res,
                      const struct trn_batch *b, int i, struct trn_det *dets, int nd, int nc,
                      bool plot, char *err, size_t err_cap)
{
    const struct trn_batch_image *bi = &b->info[i];
    if (plot && nd > 0) {
        if (s->n_plot + (size_t)nd > s->plot_cap) {
            size_t cap = s->plot_cap ? s->plot_cap : 1024;
            while (cap < s->n_plot + (size_t)nd)
                cap *= 2;
            float *nr = realloc(s->plot_rows, cap * 7 * sizeof *nr);
            if (!nr) return -ENOMEM;
            s->plot_rows = nr;
            s->plot_cap = cap;
        }
        trn_val_dets_to_rows(dets, (size_t)nd, i, s->plot_rows + 7 * s->n_plot);
        s->n_plot += (size_t)nd;
    }
    /* shapes[si][1][0][0] = h / h0: the record's load_image resize (the letterbox ratio is 1 in
     * validation; kept as a factor so that any other value is still honoured) */
    if (bi->h0 < 1 || bi->w0 < 1 || bi->h < 1) {
        trn_seterr(err, err_cap, "record %" PRIu64 ": bad image size", bi->index);
        return -EINVAL;
    }
    const double gain = (double)bi->ratio_h * ((double)bi->h / (double)bi->h0);
    int nl = 0;
    int rc = image_labels(s, b, i, nc, gain, &nl, err, err_cap);
    if (rc < 0) {
        if (rc == -ENOMEM) trn_seterr(err, err_cap, "out of memory");
        return rc;
    }
    rc = trn_scale_dets(dets, (size_t)nd, gain, bi->pad_w, bi->pad_h, (int)bi->w0, (int)bi->h0);
    if (rc == 0) rc = trn_val_stats_add(s->stats, dets, (size_t)nd, s->labels, (size_t)nl);
    if (rc == 0) rc = trn_confusion_add(s->cm, dets, (size_t)nd, s->labels, (size_t)nl);
    if (rc < 0) {
        trn_seterr(err, err_cap, "record %" PRIu64 ": metrics: %s", bi->index, trn_strerror(rc));
        return rc;
    }
    res->n_dets += nd;
    if (o->save_txt_dir && nd > 0 && (rc = save_one_txt(s, o, bi, dets, nd)) < 0) {
        trn_seterr(err, err_cap, "%s/%s.txt: %s", o->save_txt_dir, s->stems[bi->index],
                   strerror(-rc));
        return rc;
    }
    if (o->save_json) {
        s->seen_rec[bi->index] = 1;
        rc = add_coco(s, res, o, s->ids[bi->index], dets, (size_t)nd);
        if (rc < 0) {
            trn_seterr(err, err_cap, "out of memory");
            return rc;
        }
    }
    return 0;
}

/*
 * Threads for the NMS of a chunk's images: the net's compute threads (--threads, else one per
 * CPU; on a GPU the CPUs wait for it), no more than a chunk's images, and one with --save-hybrid
 * (its rows are built in one buffer). Each image's NMS is independent and the rest of its
 * post-processing runs afterwards in image order, so every count and output is the one thread's.
 */
static int nms_threads(const struct trn_val_opts *o)
{
    int t = o->device < 0 && o->threads > 0 ? o->threads : kern_cpu_count();
    if (t > o->micro_batch) t = o->micro_batch;
    return o->save_hybrid || t < 1 ? 1 : t;
}

/* Images c0 .. c0 + cn of a batch after the forward (out: their rows): NMS of each on the NMS
 * threads, then post_image in image order. */
static int post_chunk(struct state *s, const struct trn_val_opts *o, struct trn_val_result *res,
                      const struct trn_batch *b, int c0, int cn, const float *out, int rows, int no,
                      int nc, bool plot, char *err, size_t err_cap)
{
    const size_t md = (size_t)o->max_det;
#ifdef _OPENMP
    /* dynamic: an image's candidates, and so its NMS time, vary by orders of magnitude */
#pragma omp parallel for num_threads(s->n_nms) schedule(dynamic, 1)
#endif
    for (int k = 0; k < cn; k++) {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#else
        const int t = 0;
#endif
        s->nd[k] = nms_image(s, s->nms[t], o, b, c0 + k, out + (size_t)k * (size_t)rows * no, rows,
                             no, nc, s->dets + (size_t)k * md);
    }
    for (int k = 0; k < cn; k++) {
        const int i = c0 + k;
        if (s->nd[k] < 0) {
            trn_seterr(err, err_cap, "NMS of record %" PRIu64 ": %s", b->info[i].index,
                       s->nd[k] == -ENOMEM ? "out of memory" : trn_strerror(s->nd[k]));
            return s->nd[k];
        }
        const int rc =
            post_image(s, o, res, b, i, s->dets + (size_t)k * md, s->nd[k], nc, plot, err, err_cap);
        if (rc < 0) return rc;
    }
    return 0;
}

static int plot_batch(struct state *s, const struct trn_val_opts *o, struct trn_val_result *res,
                      const struct trn_batch *b, uint64_t step, char *err, size_t err_cap)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/val_batch%" PRIu64 "_labels.jpg", o->plot_dir, step);
    int rc = trn_plot_batch(b, o->names, path, err, err_cap);
    if (rc == 0) {
        res->plots_written++;
        snprintf(path, sizeof path, "%s/val_batch%" PRIu64 "_pred.jpg", o->plot_dir, step);
        rc = trn_plot_preds(b, s->plot_rows, s->n_plot, o->names, path, err, err_cap);
        if (rc == 0) res->plots_written++;
    }
    return rc;
}

int trn_val_run(struct trn_model *m, const struct ffr_reader *r, const struct trn_val_opts *o,
                struct trn_val_result *res, char *err, size_t err_cap)
{
    return trn_val_run_ensemble(&m, 1, r, o, res, err, err_cap);
}

int trn_val_run_ensemble(struct trn_model *const *models, int n_models, const struct ffr_reader *r,
                         const struct trn_val_opts *o_in, struct trn_val_result *res, char *err,
                         size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!res) return -EINVAL;
    memset(res, 0, sizeof *res);
    if (!models || n_models < 1 || !models[0] || !r) {
        trn_seterr(err, err_cap, "no model or dataset");
        return -EINVAL;
    }
    struct trn_model *m = models[0];
    struct trn_val_opts o;
    if (o_in)
        o = *o_in;
    else
        trn_val_opts_default(&o);
    const struct trn_model_info *mi = trn_model_info(m);
    const int nc = mi->nc;
    int rc = check_opts(&o, nc, err, err_cap);
    if (rc < 0) return rc;
    if (o.loss_hyp && n_models > 1) {
        trn_seterr(err, err_cap, "val losses are for one model, not an ensemble");
        return -EINVAL;
    }
    res->nc = nc;

    struct state s;
    memset(&s, 0, sizeof s);
    struct trn_tta_opts to;
    trn_tta_opts_default(&to);
    /* val.py: compute_loss ? model(im) : model(im, augment=augment) */
    to.augment = o.augment && !o.loss_hyp;
    to.threads = o.threads;
    to.amp = o.amp;
    /* the models are read-only for the whole run (val.h THREADS): each net casts them once */
    to.fixed_params = true;
    to.device = o.device;
    to.device_path = o.device_path;
    to.cpu_engine = o.cpu_engine;
    rc = trn_tta_create(models, n_models, o.micro_batch, &to, &s.tta, err, err_cap);
    if (rc < 0) return rc;
    const int no = trn_tta_no(s.tta);
    /* the loader's stride: max(int(model.stride.max()), 32), the ensemble's largest */
    const int gs = trn_tta_stride(s.tta) > 32 ? trn_tta_stride(s.tta) : 32;
    const uint64_t n_records = ffr_reader_count(r);
    if (o.save_json) {
        s.ids = malloc((n_records ? n_records : 1) * sizeof *s.ids);
        s.seen_rec = calloc(n_records ? n_records : 1, 1);
        if (!s.ids || !s.seen_rec) {
            rc = -ENOMEM;
            trn_seterr(err, err_cap, "out of memory");
            goto out;
        }
    }
    if (o.save_txt_dir) {
        s.stems = calloc(n_records ? n_records : 1, sizeof *s.stems);
        s.n_stems = n_records;
        if (!s.stems) {
            rc = -ENOMEM;
            trn_seterr(err, err_cap, "out of memory");
            goto out;
        }
    }
    if (o.save_json || o.save_txt_dir) {
        rc = read_image_ids(r, &o, s.ids, s.stems, err, err_cap);
        if (rc < 0) goto out;
    }

    struct trn_loader_opts lo;
    trn_loader_opts_default(&lo);
    lo.mode = TRN_LOADER_VAL;
    lo.img_size = o.img_size;
    lo.batch_size = o.batch_size;
    lo.workers = o.workers;
    lo.rect = o.rect;
    lo.single_cls = o.single_cls;
    lo.stride = gs;
    lo.rect_pad = 0.5;
    lo.pixels = TRN_PIXELS_F32;
    lo.bad_records = TRN_BAD_RECORD_FAIL;
    lo.log = o.log;
    lo.log_ctx = o.log_ctx;
    char msg[512] = "";
    rc = trn_loader_create(r, &lo, &s.loader, msg, sizeof msg);
    if (rc < 0) {
        trn_seterr(err, err_cap, "%s", msg[0] ? msg : trn_strerror(rc));
        goto out;
    }
    struct trn_loader_info li;
    trn_loader_info(s.loader, &li);
    char line[200];
    logf_(&o, "%s", trn_cli_compute_line(line, sizeof line, o.threads, li.workers));
    const size_t stage_len =
        (size_t)o.micro_batch * 3 * (size_t)li.max_height * (size_t)li.max_width;
    s.stage = malloc(stage_len * sizeof *s.stage);
    s.dets = malloc((size_t)o.micro_batch * (size_t)o.max_det * sizeof *s.dets);
    s.nd = malloc((size_t)o.micro_batch * sizeof *s.nd);
    s.n_nms = nms_threads(&o);
    s.nms = calloc((size_t)s.n_nms, sizeof *s.nms);
    if (!s.stage || !s.dets || !s.nd || !s.nms) {
        rc = -ENOMEM;
        trn_seterr(err, err_cap, "out of memory");
        goto out;
    }
    rc = 0;
    for (int t = 0; t < s.n_nms && rc >= 0; t++)
        rc = trn_nms_create(&s.nms[t]);
    if (rc < 0 || (rc = trn_val_stats_create(nc, &s.stats)) < 0 ||
        (rc = trn_confusion_create(nc, 0.25f, 0.45f, &s.cm)) < 0) {
        trn_seterr(err, err_cap, "%s", trn_strerror(rc));
        goto out;
    }

    if (o.loss_hyp) {
        struct kern_ctx_opts ko;
        kern_ctx_opts_default(&ko);
        if ((rc = kern_ctx_create(&ko, &s.loss_ctx)) < 0) {
            trn_seterr(err, err_cap, "kern context: %s", kern_strerror(rc));
            goto out;
        }
    }
    double loss_sum[3] = { 0, 0, 0 };
    uint64_t steps = li.steps;
    if (o.max_batches > 0 && (uint64_t)o.max_batches < steps) steps = (uint64_t)o.max_batches;
    double t_pre = 0, t_inf = 0, t_nms = 0;
    const double t_start = now_ms();
    for (uint64_t step = 0; step < steps; step++) {
        double t0 = now_ms();
        struct trn_batch b;
        rc = trn_loader_next(s.loader, &b);
        if (rc < 0) {
            trn_seterr(err, err_cap, "%s", trn_loader_error(s.loader));
            goto out;
        }
        double t1 = now_ms();
        t_pre += t1 - t0;
        const bool plot = o.plot_dir && step < TRN_VAL_PLOT_BATCHES;
        s.n_plot = 0;
        const size_t img_len = 3 * (size_t)b.height * (size_t)b.width;
        for (int c0 = 0; c0 < b.n; c0 += o.micro_batch) {
            const int cn = b.n - c0 < o.micro_batch ? b.n - c0 : o.micro_batch;
            t0 = now_ms();
            memcpy(s.stage, (const float *)b.images + (size_t)c0 * img_len,
                   (size_t)cn * img_len * sizeof(float));
            /* a short last chunk: the spare images are zeros, computed and ignored */
            if (cn < o.micro_batch)
                memset(s.stage + (size_t)cn * img_len, 0,
                       (size_t)(o.micro_batch - cn) * img_len * sizeof(float));
            if (o.loss_hyp && (rc = keep_raw(&s, &b, c0, cn, err, err_cap)) < 0) goto out;
            const float *out = NULL;
            int rows = 0;
            char why[384] = "";
            rc = trn_tta_infer(s.tta, s.stage, b.height, b.width, &out, &rows, why, sizeof why);
            if (rc < 0) {
                trn_seterr(err, err_cap, "forward of step %" PRIu64 ": %s", step,
                           why[0] ? why : trn_strerror(rc));
                goto out;
            }
            t1 = now_ms();
            t_inf += t1 - t0;
            if (!step && !c0) {
                struct trn_net *net = NULL;
                if (trn_tta_net(s.tta, 0, b.height, b.width, &net, NULL, 0) == 0)
                    logf_(&o, "inference: %s", trn_net_engine(net));
            }
            rc = post_chunk(&s, &o, res, &b, c0, cn, out, rows, no, nc, plot, err, err_cap);
            if (rc < 0) goto out;
            t_nms += now_ms() - t1;
        }
        if (o.loss_hyp && (rc = batch_loss(&s, m, &o, &b, step, loss_sum, err, err_cap)) < 0)
            goto out;
        if (plot) {
            rc = plot_batch(&s, &o, res, &b, step, err, err_cap);
            if (rc < 0) goto out;
        }
        if (o.progress) {
            char bar[512];
            trn_cli_bar(bar, sizeof bar, TRN_VAL_HEADER, (long long)step + 1, (long long)steps,
                        (now_ms() - t_start) / 1e3);
            o.progress(o.progress_ctx, bar, step + 1 == steps);
        }
    }

    res->seen = trn_val_stats_seen(s.stats);
    rc = trn_val_stats_compute(s.stats, &res->ap);
    if (rc < 0) {
        trn_seterr(err, err_cap, "ap_per_class: %s", trn_strerror(rc));
        goto out;
    }
    res->n_labels = res->ap.n_labels;
    res->mp = res->ap.mp;
    res->mr = res->ap.mr;
    res->map50 = res->ap.map50;
    res->map = res->ap.map5095;
    res->fitness = trn_fitness(res->mp, res->mr, res->map50, res->map);
    if (o.loss_hyp && steps > 0) {
        res->loss_box = loss_sum[0] / (double)steps;
        res->loss_obj = loss_sum[1] / (double)steps;
        res->loss_cls = loss_sum[2] / (double)steps;
    }
    const size_t cm_len = (size_t)(nc + 1) * (size_t)(nc + 1);
    res->confusion = malloc(cm_len * sizeof *res->confusion);
    if (!res->confusion) {
        rc = -ENOMEM;
        trn_seterr(err, err_cap, "out of memory");
        goto out;
    }
    memcpy(res->confusion, trn_confusion_matrix(s.cm), cm_len * sizeof *res->confusion);
    if (o.curves_dir) {
        int written = 0;
        rc = trn_plot_val(&res->ap, res->confusion, nc, o.names, o.curves_dir, &written, err,
                          err_cap);
        res->plots_written += written;
        if (rc < 0) goto out;
    }
    if (res->seen > 0) {
        res->ms_pre = t_pre / res->seen;
        res->ms_infer = t_inf / res->seen;
        res->ms_nms = t_nms / res->seen;
    }
    if (o.save_json) {
        size_t n = 0;
        for (uint64_t i = 0; i < n_records; i++)
            if (s.seen_rec[i]) n++;
        res->image_ids = malloc((n ? n : 1) * sizeof *res->image_ids);
        if (!res->image_ids) {
            rc = -ENOMEM;
            trn_seterr(err, err_cap, "out of memory");
            goto out;
        }
        n = 0;
        for (uint64_t i = 0; i < n_records; i++)
            if (s.seen_rec[i]) res->image_ids[n++] = s.ids[i];
        qsort(res->image_ids, n, sizeof *res->image_ids, cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || res->image_ids[i] != res->image_ids[u - 1])
                res->image_ids[u++] = res->image_ids[i];
        res->n_image_ids = u;
    }
    rc = 0;
out:
    state_free(&s);
    return rc;
}
