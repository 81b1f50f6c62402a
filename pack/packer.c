/*
 * The yolo-pack pipeline (see packer.h). Threads: N workers and the calling thread, which
 * appends. Sample i goes to slot i % W of a reorder window of W = 4N slots; a worker may start
 * sample i only once sample i - W has been appended, so at most W records are in memory, and the
 * appender takes slots strictly in sample order, so the file does not depend on N.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "det.h"
#include "ffr.h"
#include "ffyolo_config.h"
#include "packer.h"

enum slot_state { SLOT_FREE, SLOT_BUSY, SLOT_READY, SLOT_SKIPPED, SLOT_FATAL };

/* Record alignment of the output (the ffr default), which O_DIRECT writes need. */
#define PACK_ALIGN 4096u

struct slot {
    enum slot_state state;
    size_t idx;      /* sample number it holds */
    uint8_t *stored; /* encoded (compressed) record */
    size_t stored_cap, stored_len, raw_len;
    int codec;
    uint64_t hash; /* xxh3 of the stored bytes */
    uint8_t *summary;
    size_t summary_cap, summary_len;
    int background, restored, corrupt;
    uint64_t bytes_in;
    int fatal_rc;
    char msg[768]; /* a warning to print when the slot is consumed, or "" */
};

struct job {
    const struct pack_opts *o;
    const struct pack_ds *ds;
    size_t n;
    int interp;
    volatile int *stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_worker, cv_writer;
    struct slot *slots;
    size_t window;
    size_t next;       /* next sample to hand to a worker */
    size_t written;    /* samples consumed by the appender */
    int abort;         /* set by the appender on a fatal error or stop */
    uint64_t budget;   /* bytes the images being decoded may take at once (PACK_MAX_PIXELS) */
    uint64_t decoding; /* bytes they take now (under mu) */
    pthread_cond_t cv_budget;
    double stalled_s; /* workers' seconds waiting for a free slot (under mu) */
};

void pack_opts_default(struct pack_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = 640;
    o->interp = -1;
    /* Chosen by measurement on coco128 (docs/benchmarks.md, "Record codecs"): zstd -1 keeps
     * 1.28x of the size at ~1.9 GB/s of decode per core (~2,000 images/s), so the loader stays
     * far cheaper than JPEG decoding; the Sub filter gains 1.4x more size but halves decode
     * speed, so it is an option for bandwidth-bound storage, not the default. */
    o->codec = PACK_CODEC_ZSTD;
    o->zstd_level = -1;
    o->sub_filter = false;
    o->quality = 95;
    const long nc = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = nc > 0 ? (int)nc : 1;
    o->max_warnings_shown = 20;
    pack_ds_opts_default(&o->ds);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int grow(uint8_t **p, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    uint8_t *q = realloc(*p, n);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

static int read_file(const char *path, uint8_t **buf, size_t *cap, size_t *len)
{
    /* open + read, not stdio: no FILE and no buffer of its own per image. */
    const int fd = ffr_open_regular(path, 0); /* a FIFO or device: -FFR_ENOTREG, unblocked */
    if (fd < 0) return fd;
    struct stat st;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc == 0) rc = grow(buf, cap, (size_t)st.st_size + 1);
    size_t got = 0;
    while (rc == 0 && got < (size_t)st.st_size) {
        const ssize_t k = read(fd, *buf + got, (size_t)st.st_size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rc = -errno;
        if (k == 0) rc = -EIO; /* shrank under us */
        if (k > 0) got += (size_t)k;
    }
    close(fd);
    if (rc == 0) *len = (size_t)st.st_size;
    return rc;
}

/* Grows a slot's frame buffer to hold the frame header and `stored` bytes rounded up to the
 * record alignment; 4096-aligned so the writer may use O_DIRECT. Old contents are dropped. */
static int grow_frame(struct slot *s, size_t stored)
{
    const size_t need =
        (FFR_FRAME_HEADER_SIZE + stored + PACK_ALIGN - 1) & ~(size_t)(PACK_ALIGN - 1);
    if (need <= s->stored_cap) return 0;
    /* In 2 MiB huge pages where the kernel gives them (THP "madvise" mode): each O_DIRECT
     * write pins its buffer's pages, and pinning 300 small pages per record cost ~3% of the
     * whole job (docs/benchmarks.md); one huge page costs next to nothing. */
    const size_t huge = (size_t)2 << 20;
    const size_t cap = (need + need / 4 + huge - 1) & ~(huge - 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, cap) != 0) return -ENOMEM;
#ifdef MADV_HUGEPAGE
    madvise(p, cap, MADV_HUGEPAGE); /* advice only: small pages work too */
#endif
    free(s->stored);
    s->stored = p;
    s->stored_cap = cap;
    return 0;
}

struct worker {
    struct job *j;
    struct pack_image_decoder *dec;
    struct ffr_codec *codec;
    tjhandle tj;
    uint8_t *file;
    size_t file_cap;
    uint8_t *sample; /* the ffr-det-1 encoding */
    size_t sample_cap;
    uint8_t *jpeg; /* JPEG codec output */
    unsigned long jpeg_cap;
    float *labels;
    size_t labels_cap;
    uint32_t *seg_counts;
    size_t seg_cap;
    uint64_t held; /* this worker's share of job.decoding */
};

/* Waits until the image of `pixels` (coded) fits the decode budget beside the others being
 * decoded; alone it always fits. Its decode, orientation and resize buffers: 4 + 3 bytes a
 * pixel at most. */
static void budget_take(struct worker *w, uint64_t pixels)
{
    struct job *j = w->j;
    const uint64_t need = pixels * 7;
    pthread_mutex_lock(&j->mu);
    while (j->decoding > 0 && j->decoding + need > j->budget && !j->abort)
        pthread_cond_wait(&j->cv_budget, &j->mu);
    j->decoding += need;
    pthread_mutex_unlock(&j->mu);
    w->held = need;
}

/* After a sample: a big image's buffers go, and its share of the budget with them. */
static void budget_give(struct worker *w)
{
    if (!w->held) return;
    pack_image_decoder_trim(w->dec, 32u << 20);
    struct job *j = w->j;
    pthread_mutex_lock(&j->mu);
    j->decoding -= w->held;
    pthread_cond_broadcast(&j->cv_budget);
    pthread_mutex_unlock(&j->mu);
    w->held = 0;
}

/* Processes sample i into slot s (whose state the caller sets under the lock). Returns 0 when
 * the slot holds a record, 1 when the sample is skipped (s->msg says why), or a fatal error. */
static int process(struct worker *w, size_t i, struct slot *s)
{
    const struct pack_opts *o = w->j->o;
    const struct pack_ds_sample *ds = pack_ds_get(w->j->ds, i);
    s->msg[0] = '\0';
    s->background = s->restored = s->corrupt = 0;
    s->bytes_in = 0;
    size_t len = 0;
    int rc = read_file(ds->image_path, &w->file, &w->file_cap, &len);
    if (rc < 0) {
        snprintf(s->msg, sizeof s->msg, "%s: cannot read: %s; skipped", ds->image_path,
                 ffr_strerror(rc));
        s->corrupt = 1;
        return 1;
    }
    s->bytes_in = len;
    struct pack_image_info head;
    if (pack_image_probe(w->file, len, &head) == 0 &&
        (uint64_t)head.coded_width * (uint64_t)head.coded_height <= w->j->budget / 7)
        budget_take(w, (uint64_t)head.coded_width * (uint64_t)head.coded_height);

    /* Labels and polygons in the record's layout. */
    if ((rc = grow((uint8_t **)&w->labels, &w->labels_cap, 20 * (size_t)ds->n_rows + 4)) < 0 ||
        (rc = grow((uint8_t **)&w->seg_counts, &w->seg_cap, 4 * (size_t)ds->n_rows + 4)) < 0)
        return rc;
    for (uint32_t r = 0; r < ds->n_rows; r++) {
        const struct pack_ds_row *row = &ds->rows[r];
        float *l = w->labels + 5 * (size_t)r;
        l[0] = (float)row->cls;
        l[1] = row->cx;
        l[2] = row->cy;
        l[3] = row->w;
        l[4] = row->h;
        w->seg_counts[r] = row->seg_count;
    }
    const char *slash = strrchr(ds->image_path, '/');
    const char *name = slash ? slash + 1 : ds->image_path;
    struct det_sample smp = {
        .n_labels = ds->n_rows,
        .labels = w->labels,
        .n_points = ds->n_seg_points,
        .seg_counts = ds->n_seg_points ? w->seg_counts : NULL,
        .seg_points = ds->n_seg_points ? ds->seg_xy : NULL,
        .image_id = ds->image_id,
        .name = name,
        .name_len = (uint32_t)strlen(name),
    };
    smp.pixel_format = o->codec == PACK_CODEC_ZSTD && o->sub_filter ? DET_RGB8_SUB : DET_RGB8;

    /* Plain RGB8 records get their pixels decoded (or resized) straight into place: into the
     * slot's frame when stored raw, into the sample buffer that zstd reads otherwise. The
     * header says the size; if it does not parse, the plain path below reports why. */
    uint8_t *into = NULL;
    size_t into_cap = 0;
    struct pack_image_info info;
    int dw = 0, dh = 0;
    if (o->codec != PACK_CODEC_JPEG && smp.pixel_format == DET_RGB8 &&
        pack_image_probe(w->file, len, &info) == 0 &&
        (o->size == 0
             ? (dw = info.width, dh = info.height, 0)
             : pack_image_target_size(info.width, info.height, o->size, o->round, &dw, &dh)) == 0) {
        smp.h = (uint32_t)dh;
        smp.w = (uint32_t)dw;
        smp.pixel_bytes = (uint32_t)((size_t)dw * (size_t)dh * 3);
        const size_t need = det_encoded_size(&smp);
        if (need && o->codec == PACK_CODEC_RAW) {
            if ((rc = grow_frame(s, need)) < 0) return rc;
            into = s->stored + FFR_FRAME_HEADER_SIZE + DET_PIXEL_OFFSET;
            into_cap = s->stored_cap - FFR_FRAME_HEADER_SIZE - DET_PIXEL_OFFSET;
        } else if (need) {
            if ((rc = grow(&w->sample, &w->sample_cap, need)) < 0) return rc;
            into = w->sample + DET_PIXEL_OFFSET;
            into_cap = w->sample_cap - DET_PIXEL_OFFSET;
        }
    }
    struct pack_image img;
    const enum pack_image_interp interp = (enum pack_image_interp)w->j->interp;
    rc = into ? pack_image_load_into(w->dec, o->size, interp, w->file, len, into, into_cap, &img)
              : pack_image_load(w->dec, o->size, interp, w->file, len, &img);
    if (rc == -ENOSPC) /* the header walk and libjpeg disagree on the size: decode plainly */
        rc = pack_image_load(w->dec, o->size, interp, w->file, len, &img);
    if (rc == -ENOMEM) return rc;
    const uint8_t *const placed = rc == 0 && into && img.pixels == into ? into : NULL;
    if (rc < 0) {
        char line[160];
        const char *what = pack_image_error_line(rc, w->file, len, line, sizeof line),
                   *detail = pack_image_decoder_detail(w->dec);
        const int same = !detail[0] || strcmp(what, detail) == 0;
        snprintf(s->msg, sizeof s->msg, "%s: corrupt image: %s%s%s%s; skipped%s", ds->image_path,
                 what, same ? "" : " (", same ? "" : detail, same ? "" : ")",
                 rc == -PACK_IMAGE_ETOOBIG ? " (yolo-pack --max-pixels raises the limit)" : "");
        s->corrupt = 1;
        return 1;
    }
    if (img.warnings & PACK_IMAGE_WARN_DATA) {
        /* Truncated or damaged scan data: OpenCV would decode it with the rest filled in, but
         * ultralytics' verify_image_label re-saves such a file through PIL, which refuses it,
         * so the image never reaches training. Skip it as they do. */
        snprintf(s->msg, sizeof s->msg, "%s: corrupt JPEG data (%s); skipped", ds->image_path,
                 pack_image_decoder_detail(w->dec));
        s->corrupt = 1;
        return 1;
    }
    if (img.warnings & PACK_IMAGE_WARN_NO_EOI) {
        /* Complete image data without the FF D9 end marker: ultralytics restores and keeps it. */
        s->restored = 1;
        snprintf(s->msg, sizeof s->msg, "%s: JPEG without an end marker; kept (restored)",
                 ds->image_path);
    }

    smp.h = (uint32_t)img.height;
    smp.w = (uint32_t)img.width;
    smp.h0 = (uint32_t)img.src_height;
    smp.w0 = (uint32_t)img.src_width;
    smp.pixels = img.pixels;
    smp.pixel_bytes = (uint32_t)((size_t)img.width * (size_t)img.height * 3);
    if (o->codec == PACK_CODEC_JPEG) {
        unsigned char *jp = w->jpeg;
        unsigned long jlen = w->jpeg_cap;
        if (tjCompress2(w->tj, img.pixels, img.width, 0, img.height, TJPF_RGB, &jp, &jlen,
                        TJSAMP_420, o->quality, TJFLAG_ACCURATEDCT | TJFLAG_NOREALLOC) != 0)
            return -EIO;
        smp.pixel_format = DET_JPEG;
        smp.pixels = jp;
        smp.pixel_bytes = (uint32_t)jlen;
    }
    const size_t need = det_encoded_size(&smp);
    if (!need) return -EOVERFLOW;
    if ((rc = grow(&s->summary, &s->summary_cap, det_summary_size(&smp))) < 0) return rc;
    const int64_t sn = det_summary_encode(&smp, s->summary, s->summary_cap);
    if (sn < 0) return (int)sn;
    s->summary_len = (size_t)sn;
    /* The slot holds the whole frame, laid out in place (ffr_writer_append_frame): the header
     * room, then the stored bytes, in a 4096-aligned buffer the writer can hand to O_DIRECT. */
    uint8_t *at;
    if (o->codec != PACK_CODEC_ZSTD) {
        /* Stored as is: encode straight into the frame (where the pixels already are when
         * they were decoded into place: grow_frame keeps a frame that is big enough). */
        if ((rc = grow_frame(s, need)) < 0) return rc;
        at = s->stored + FFR_FRAME_HEADER_SIZE;
        if (placed && placed != at + DET_PIXEL_OFFSET) return -EFAULT; /* frame moved */
        const int64_t n = det_encode(&smp, at, s->stored_cap - FFR_FRAME_HEADER_SIZE);
        if (n < 0) return (int)n;
        s->stored_len = s->raw_len = (size_t)n;
        s->codec = FFR_CODEC_RAW;
    } else {
        if ((rc = grow(&w->sample, &w->sample_cap, need)) < 0) return rc;
        if (placed && placed != w->sample + DET_PIXEL_OFFSET) return -EFAULT; /* moved */
        const int64_t n = det_encode(&smp, w->sample, w->sample_cap);
        if (n < 0) return (int)n;
        if ((rc = grow_frame(s, ffr_encode_bound((size_t)n))) < 0) return rc;
        at = s->stored + FFR_FRAME_HEADER_SIZE;
        const int64_t stored =
            ffr_encode(w->codec, at, s->stored_cap - FFR_FRAME_HEADER_SIZE, w->sample, (size_t)n,
                       FFR_CODEC_ZSTD, o->zstd_level, &s->codec);
        if (stored < 0) return (int)stored;
        s->stored_len = (size_t)stored;
        s->raw_len = (size_t)n;
    }
    /* Hashing here spreads it over the workers instead of the one appending thread. */
    s->hash = ffr_hash(at, s->stored_len);
    s->background = ds->n_rows == 0;
    return 0;
}

/* Share of a run the appender spends writing above which the summary says that the output's
 * storage was the limit, for runs long enough that the final flush does not decide it. */
#define PACK_WRITING_NOTE 0.75
#define PACK_NOTE_MIN_S   2.0

/* Bytes of finished records the appender waits for before it writes them in one call. */
#define PACK_RUN_BYTES ((size_t)4 << 20)

/*
 * Whether the appender should wake (called by a worker under the lock after finishing a slot):
 * when the finished records in order from j->written hold PACK_RUN_BYTES, half the window, or
 * everything left, or when the workers are about to wait for free slots, or on an error. Waking
 * it per record cost a futex wake, a context switch, an O_DIRECT write and a virtio
 * notification (a VM exit) each: 5-6% of the job, docs/benchmarks.md. Bigger runs cost some
 * slots of memory, nothing else.
 */
static bool writer_has_work(const struct job *j)
{
    if (j->next >= j->n || j->next >= j->written + j->window) return true;
    size_t m = 0, bytes = 0;
    for (; j->written + m < j->n && m < j->window; m++) {
        const struct slot *q = &j->slots[(j->written + m) % j->window];
        if (q->idx != j->written + m || q->state == SLOT_FREE || q->state == SLOT_BUSY) break;
        if (q->state == SLOT_FATAL) return true;
        bytes += q->state == SLOT_READY ? q->stored_len : 0;
    }
    return bytes >= PACK_RUN_BYTES || 2 * m >= j->window;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct job *j = w->j;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        if (!j->abort && j->next < j->n && j->next >= j->written + j->window) {
            /* Every slot waits on the appender: the writes are behind. The clock is read only
             * here, so a run that decoding limits pays nothing for the count. */
            const double w0 = now_s();
            while (!j->abort && j->next < j->n && j->next >= j->written + j->window)
                pthread_cond_wait(&j->cv_worker, &j->mu);
            j->stalled_s += now_s() - w0;
        }
        if (j->abort || j->next >= j->n) {
            pthread_mutex_unlock(&j->mu);
            return NULL;
        }
        const size_t i = j->next++;
        struct slot *s = &j->slots[i % j->window];
        s->state = SLOT_BUSY;
        s->idx = i;
        pthread_mutex_unlock(&j->mu);

        const int rc = process(w, i, s);
        budget_give(w);

        pthread_mutex_lock(&j->mu);
        s->state = rc < 0 ? SLOT_FATAL : rc == 1 ? SLOT_SKIPPED : SLOT_READY;
        s->fatal_rc = rc < 0 ? rc : 0;
        if (writer_has_work(j)) pthread_cond_signal(&j->cv_writer);
        pthread_mutex_unlock(&j->mu);
    }
}

/* The metadata block (docs/format.md 8.3), written by det's one writer (det_meta_write's
 * returns). No command line and no thread count: the same input must give the same bytes whatever
 * -j and the output name are; the options that shape the output are the keys. */
static int make_metadata(const struct pack_opts *o, const struct pack_ds *ds,
                         const struct pack_result *r, char **text, size_t *len)
{
    const struct pack_ds_info *info = pack_ds_info(ds);
    size_t nn;
    const char *const *names = pack_ds_names(ds, &nn);
    if (nn > DET_CLASS_MAX + 1) return -EINVAL;
    static const enum det_codec codecs[] = { DET_CODEC_RAW, DET_CODEC_ZSTD, DET_CODEC_JPEG };
    const struct det_meta m = {
        .is_det = true,
        .nc = (uint32_t)nn,
        .n_names = (uint32_t)nn,
        .names = (char **)names,
        .size = (uint32_t)o->size,
        .split = (char *)(info->split ? info->split : ""),
        .format = info->format == PACK_DS_FORMAT_COCO ? DET_FORMAT_COCO : DET_FORMAT_YOLO,
        .interp = o->interp == PACK_IMAGE_INTERP_LINEAR       ? DET_INTERP_LINEAR
                  : o->interp == PACK_IMAGE_INTERP_AREA       ? DET_INTERP_AREA
                  : o->interp == PACK_IMAGE_INTERP_AUTO_TRAIN ? DET_INTERP_TRAIN
                                                              : DET_INTERP_VAL,
        .round = o->round == PACK_IMAGE_ROUND_CEIL ? DET_ROUND_CEIL : DET_ROUND_INT,
        .codec = codecs[o->codec],
        .zstd_level = o->zstd_level,
        .sub_filter = o->sub_filter,
        .jpeg_quality = o->quality,
        .source = (char *)(info->source ? info->source : o->input),
        .counts = { r->scan.images_found, r->packed, r->backgrounds,
                    r->corrupt_images + r->scan.corrupt, r->scan.images_missing, r->restored_images,
                    r->scan.rows,
                    r->scan.rows_corrupt + r->scan.rows_duplicate + r->scan.rows_bad_box +
                        r->scan.rows_bad_category + r->scan.rows_no_image,
                    r->scan.crowd_skipped },
        .packer_version = FFYOLO_VERSION,
        .drop_backgrounds = o->ds.drop_backgrounds,
        .segments = o->ds.keep_segments,
        .boxes_from_segments = o->ds.coco_boxes_from_segments,
    };
    return det_meta_write(&m, text, len);
}

static void human_bytes(char *dst, size_t cap, uint64_t b)
{
    static const char *const u[] = { "B", "KB", "MB", "GB", "TB" };
    double v = (double)b;
    int k = 0;
    while (v >= 1000 && k < 4) {
        v /= 1000;
        k++;
    }
    snprintf(dst, cap, k ? "%.1f %s" : "%.0f %s", v, u[k]);
}

static void progress(FILE *log, size_t done, size_t n, double t0)
{
    const double dt = now_s() - t0;
    const double rate = dt > 0 ? (double)done / dt : 0;
    const double eta = rate > 0 ? (double)(n - done) / rate : 0;
    const int width = 30, filled = n ? (int)((double)width * (double)done / (double)n) : width;
    fprintf(log, "\r  [%.*s%*s] %zu/%zu  %.0f img/s  ETA %d:%02d ", filled,
            "##############################", width - filled, "", done, n, rate, (int)eta / 60,
            (int)eta % 60);
    fflush(log);
}

struct warn_ctx {
    FILE *log;
    size_t shown, max;
};

static void warn_cb(void *user, const struct pack_ds_warning *w)
{
    struct warn_ctx *c = user;
    if (c->shown++ < c->max) fprintf(c->log, "warning: %s\n", w->msg);
}

/* The caller's sink, and the bytes of the data files handed to it (the summary's "out"). */
struct counted_sink {
    const struct pack_opts *o;
    void *sink;
    uint64_t bytes;
};

static int counted_publish(void *arg, const char *tmp_path, const char *name, int last)
{
    struct counted_sink *c = arg;
    struct stat st;
    const bool data = !last || !c->o->shard_bytes; /* a shard, or the single file */
    if (data && stat(tmp_path, &st) == 0) c->bytes += (uint64_t)st.st_size;
    return c->o->publish(c->sink, tmp_path, name, last);
}

static bool counted_taken(void *arg, const char *name)
{
    const struct counted_sink *c = arg;
    return c->o->taken(c->sink, name);
}

int pack_run(const struct pack_opts *o, struct pack_result *res, volatile int *stop)
{
    FILE *log = o->log ? o->log : stderr;
    const char *out_name = o->output_name ? o->output_name : o->output;
    struct pack_result r;
    memset(&r, 0, sizeof r);
    struct warn_ctx wc = { log, 0, o->max_warnings_shown };
    struct pack_ds_opts dso = o->ds;
    dso.strict = o->strict;
    dso.warn_fn = warn_cb;
    dso.warn_user = &wc;
    struct pack_ds *ds = NULL;
    char err[1024] = "";
    int rc = pack_ds_scan(o->input, &dso, &ds, err, sizeof err);
    if (rc < 0) {
        fprintf(log, "yolo-pack: %s\n", err[0] ? err : pack_ds_strerror(rc));
        return rc;
    }
    r.scan = *pack_ds_stats(ds);
    if (wc.shown > wc.max) fprintf(log, "(%zu more scan warnings not shown)\n", wc.shown - wc.max);

    struct job j;
    memset(&j, 0, sizeof j);
    j.o = o;
    j.ds = ds;
    j.n = pack_ds_count(ds);
    j.stop = stop;
    if (o->interp >= 0) {
        j.interp = o->interp;
    } else {
        const char *split = pack_ds_info(ds)->split;
        j.interp = split && strstr(split, "train") ? PACK_IMAGE_INTERP_AUTO_TRAIN
                                                   : PACK_IMAGE_INTERP_AUTO_VAL;
    }
    struct pack_opts eff = *o;
    eff.interp = j.interp;
    j.o = &eff;
    const int nt = o->threads > 0 ? o->threads : 1;
    /* Enough slots that the appender finds runs of finished records to write at once
     * (PACK_RUN_BYTES: about 5 records at 640) while the workers go on. */
    j.window = 4 * (size_t)nt + 16;
    j.budget = 7 * (o->max_pixels ? o->max_pixels : PACK_MAX_PIXELS);
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv_worker, NULL);
    pthread_cond_init(&j.cv_writer, NULL);
    pthread_cond_init(&j.cv_budget, NULL);
    j.slots = calloc(j.window, sizeof *j.slots);
    struct worker *ws = calloc((size_t)nt, sizeof *ws);
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    struct ffr_writer *fw = NULL;
    int started = 0;
    double t0 = 0; /* set as the workers start */
    if (!j.slots || !ws || !th) {
        rc = -ENOMEM;
        goto out;
    }

    struct ffr_writer_opts wo;
    ffr_writer_opts_default(&wo);
    wo.codec = o->codec == PACK_CODEC_ZSTD ? FFR_CODEC_ZSTD : FFR_CODEC_RAW;
    wo.zstd_level = o->zstd_level;
    wo.shard_bytes = o->shard_bytes;
    wo.align = PACK_ALIGN;
    /* The output is written once and read later: keeping it out of the page cache saves the
     * copy that otherwise costs the appending thread more than a third of a JPEG decode. */
    wo.direct_io = 1;
    struct counted_sink cs = { .o = o };
    if (o->publish) {
        /* Staged files are read back at once by the upload: through the page cache, and not
         * made durable (the object store's copy is the one that must last). */
        wo.direct_io = 0;
        wo.durable = 0;
        wo.publish = counted_publish;
        wo.taken = o->taken ? counted_taken : NULL;
        wo.sink = &cs;
        cs.sink = o->sink;
    }
    if ((rc = ffr_writer_open(&fw, o->output, &wo)) < 0) {
        fprintf(log, "yolo-pack: %s: %s\n", out_name, ffr_strerror(rc));
        goto out;
    }
    for (int k = 0; k < nt; k++) {
        ws[k].j = &j;
        ws[k].tj = o->codec == PACK_CODEC_JPEG ? tjInitCompress() : NULL;
        struct pack_image_opts io;
        pack_image_opts_default(&io);
        io.round = o->round;
        io.max_pixels = j.budget / 7;
        if ((rc = pack_image_decoder_create(&io, &ws[k].dec)) < 0 ||
            (rc = ffr_codec_create(&ws[k].codec)) < 0)
            goto out;
        if (o->codec == PACK_CODEC_JPEG) {
            if (!ws[k].tj) {
                rc = -ENOMEM;
                goto out;
            }
            ws[k].jpeg_cap = tjBufSize(o->size > 0 ? 2 * o->size : 16384,
                                       o->size > 0 ? 2 * o->size : 16384, TJSAMP_420);
            ws[k].jpeg = tjAlloc((int)ws[k].jpeg_cap);
            if (!ws[k].jpeg) {
                rc = -ENOMEM;
                goto out;
            }
        }
    }
    t0 = now_s();
    for (int k = 0; k < nt; k++) {
        if (pthread_create(&th[k], NULL, worker_main, &ws[k]) != 0) {
            rc = -EAGAIN;
            goto out;
        }
        started++;
    }
    double last_draw = 0;
    size_t shown = 0, more = 0;
    /* The appender takes every slot that is done, in order, and writes the ready ones with one
     * ffr_writer_append_frames call: one system call and one device wait per run instead of
     * per record (and fewer wake-ups of this thread). */
    struct ffr_frame_in *run = calloc(j.window, sizeof *run);
    if (!run) {
        rc = -ENOMEM;
        goto out;
    }
    while (j.written < j.n) {
        pthread_mutex_lock(&j.mu);
        const struct slot *s0 = &j.slots[j.written % j.window];
        while (!(stop && *stop) &&
               (s0->idx != j.written || s0->state == SLOT_FREE || s0->state == SLOT_BUSY)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&j.cv_writer, &j.mu, &ts);
        }
        size_t m = 0; /* slots done, in order from j.written */
        while (j.written + m < j.n && m < j.window) {
            const struct slot *q = &j.slots[(j.written + m) % j.window];
            if (q->idx != j.written + m || q->state == SLOT_FREE || q->state == SLOT_BUSY) break;
            m++;
        }
        pthread_mutex_unlock(&j.mu);
        if (stop && *stop) {
            rc = -EINTR;
            break;
        }
        size_t nin = 0, taken = 0;
        for (; taken < m && rc == 0; taken++) {
            struct slot *s = &j.slots[(j.written + taken) % j.window];
            if (s->state == SLOT_FATAL) {
                rc = s->fatal_rc;
                fprintf(log, "\nyolo-pack: %s: %s\n", pack_ds_get(ds, s->idx)->image_path,
                        pack_image_strerror(rc));
                break;
            }
            if (s->msg[0]) {
                if (o->strict) {
                    fprintf(log, "\nyolo-pack: %s (--strict)\n", s->msg);
                    rc = -PACK_DS_ESTRICT;
                    break;
                }
                if (shown++ < o->max_warnings_shown)
                    fprintf(log, "%swarning: %s\n", o->progress ? "\r" : "", s->msg);
                else
                    more++;
            }
            r.bytes_in += s->bytes_in;
            r.corrupt_images += (uint64_t)s->corrupt;
            r.restored_images += (uint64_t)s->restored;
            if (s->state == SLOT_READY) {
                run[nin++] = (struct ffr_frame_in){ .codec = s->codec,
                                                    .frame = s->stored,
                                                    .frame_cap = s->stored_cap,
                                                    .stored_len = s->stored_len,
                                                    .raw_len = s->raw_len,
                                                    .hash = s->hash,
                                                    .hash_set = 1,
                                                    .summary = s->summary,
                                                    .summary_len = s->summary_len };
                r.backgrounds += (uint64_t)s->background;
                r.bytes_raw += s->raw_len;
            }
        }
        /* What came before a fatal or --strict slot is written, as one by one would have. */
        const double w0 = now_s();
        const int wrc = nin ? ffr_writer_append_frames(fw, run, nin) : 0;
        r.seconds_writing += now_s() - w0;
        if (wrc < 0) {
            fprintf(log, "\nyolo-pack: writing %s: %s\n", out_name, ffr_strerror(wrc));
            rc = wrc;
            break;
        }
        r.packed += nin;
        if (rc < 0) break;
        pthread_mutex_lock(&j.mu);
        for (size_t q = 0; q < m; q++)
            j.slots[(j.written + q) % j.window].state = SLOT_FREE;
        j.written += m;
        pthread_cond_broadcast(&j.cv_worker);
        pthread_mutex_unlock(&j.mu);
        if (o->progress && (now_s() - last_draw > 0.2 || j.written == j.n)) {
            progress(log, j.written, j.n, t0);
            last_draw = now_s();
        }
    }
    free(run);
    if (o->progress) fputc('\n', log);
    if (more) fprintf(log, "(%zu more warnings not shown)\n", more);
    r.seconds = now_s() - t0;
    r.stalled = r.seconds > 0 ? j.stalled_s / (r.seconds * nt) : 0;
out:
    pthread_mutex_lock(&j.mu);
    j.abort = 1;
    pthread_cond_broadcast(&j.cv_worker);
    pthread_mutex_unlock(&j.mu);
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    if (rc == 0 && r.packed == 0) {
        fprintf(log, "yolo-pack: %s: no image could be packed\n", o->input);
        rc = -PACK_DS_ENOIMAGES;
    }
    if (fw && rc == 0) {
        size_t mlen = 0;
        char *meta = NULL;
        rc = make_metadata(&eff, ds, &r, &meta, &mlen);
        if (rc == -EINVAL)
            fprintf(log,
                    "yolo-pack: %s: the class names exceed what a dataset's metadata holds (%u "
                    "classes, %u bytes a name, %u MiB in all)\n",
                    o->input, DET_CLASS_MAX + 1, DET_NAME_MAX, DET_NAMES_BYTES_MAX >> 20);
        if (rc == 0) rc = ffr_writer_set_metadata(fw, meta, mlen);
        free(meta);
        if (rc == 0) {
            /* The output is not complete before its index, flush and rename: on storage that
             * buffers the records, the flush is seconds, and a rate without it would flatter. */
            const double w0 = now_s();
            rc = ffr_writer_close(fw);
            r.seconds_writing += now_s() - w0;
            r.seconds = now_s() - t0;
            if (rc < 0) fprintf(log, "yolo-pack: closing %s: %s\n", out_name, ffr_strerror(rc));
        } else {
            ffr_writer_abort(fw);
        }
    } else {
        ffr_writer_abort(fw);
    }
    if (rc == 0) {
        /* Output size: every file the reader sees. */
        struct ffr_reader *rd;
        r.bytes_out = cs.bytes;
        if (!o->publish && ffr_reader_open(&rd, o->output, NULL, NULL, 0) == 0) {
            for (uint32_t k = 0; k < ffr_reader_shard_count(rd); k++) {
                struct ffr_shard_info si;
                ffr_reader_shard(rd, k, &si);
                r.bytes_out += si.file_size;
            }
            ffr_reader_close(rd);
        }
        char in[32], raw[32], outb[32];
        human_bytes(in, sizeof in, r.bytes_in);
        human_bytes(raw, sizeof raw, r.bytes_raw);
        human_bytes(outb, sizeof outb, r.bytes_out);
        const uint64_t dropped = r.scan.rows_corrupt + r.scan.rows_duplicate + r.scan.rows_bad_box +
                                 r.scan.rows_bad_category + r.scan.rows_no_image;
        fprintf(log,
                "yolo-pack: %" PRIu64 " found, %" PRIu64 " packed (%" PRIu64
                " backgrounds), %" PRIu64 " corrupt skipped, %" PRIu64 " missing, %" PRIu64
                " restored, %" PRIu64 " label rows dropped, %" PRIu64
                " crowd skipped; %s in, %s decoded, %s out; %.1f s, %.0f img/s -> %s\n",
                r.scan.images_found, r.packed, r.backgrounds, r.corrupt_images + r.scan.corrupt,
                r.scan.images_missing, r.restored_images, dropped, r.scan.crowd_skipped, in, raw,
                outb, r.seconds, r.seconds > 0 ? (double)(r.packed) / r.seconds : 0.0, out_name);
        /* Raw records are ~1 MB at 640, so a few cores decode faster than many disks write:
         * say when the writes set the pace, since the cure differs (a faster disk, or a codec
         * that writes fewer bytes, rather than more cores). The appender writing most of the
         * run is the sign. The workers' wait for free slots (r.stalled) is not: on a VM the
         * storage's cost can show as CPU time the host takes from the workers instead. */
        const double share = r.seconds > 0 ? r.seconds_writing / r.seconds : 0;
        if (r.seconds >= PACK_NOTE_MIN_S && share >= PACK_WRITING_NOTE) {
            char rate[32];
            human_bytes(rate, sizeof rate, (uint64_t)((double)r.bytes_out / r.seconds_writing));
            fprintf(log,
                    "yolo-pack: writing took %.0f%% of the run (%s/s while writing): the "
                    "output's storage is at or near the limit\n",
                    100 * share, rate);
        }
    }
    for (int k = 0; k < nt && ws; k++) {
        pack_image_decoder_destroy(ws[k].dec);
        ffr_codec_destroy(ws[k].codec);
        if (ws[k].tj) tjDestroy(ws[k].tj);
        if (ws[k].jpeg) tjFree(ws[k].jpeg);
        free(ws[k].file);
        free(ws[k].sample);
        free(ws[k].labels);
        free(ws[k].seg_counts);
    }
    for (size_t k = 0; j.slots && k < j.window; k++) {
        free(j.slots[k].stored);
        free(j.slots[k].summary);
    }
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv_worker);
    pthread_cond_destroy(&j.cv_writer);
    pthread_cond_destroy(&j.cv_budget);
    free(j.slots);
    free(ws);
    free(th);
    pack_ds_destroy(ds);
    if (res) *res = r;
    return rc;
}
