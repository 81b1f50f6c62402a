/*
 * loader: worker threads turn (seed, epoch, position) into augmented samples and write them
 * into a ring of pinned batch buffers. See loader.h for the contract.
 *
 * Work is handed out one sample at a time, in order: task (seq, j) is image j of the seq-th
 * batch since the last (re)positioning. Batch seq lives in ring slot seq % depth, and tasks of
 * batch seq may be claimed only once the consumer has released batch seq - depth, so the ring
 * never overwrites a batch the consumer holds. Each sample is computed by one worker from pure
 * inputs and written to its own place in the slot, which is why the bytes do not depend on the
 * number of workers. The worker that finishes a batch's last sample packs the per-sample label
 * rows into the batch's target list (in image order) and marks the slot ready.
 *
 * Read-ahead: a worker claims its next sample before it builds the current one and submits that
 * sample's record reads (ffio_records_submit), so that on a device with latency (O_DIRECT, a
 * cold cache) the records land while the CPU augments. Everything the sampler decides (records,
 * random draws) is taken at claim time, so the bytes stay those of the sample's position. A
 * claimed sample counts as in flight until it is built or, after a repositioning or at stop,
 * its reads have landed and it is dropped.
 *
 * Locking: one mutex guards the task counters, the slot states and the error; samples are built
 * outside it. `gen` changes on every set_position, and results of older generations are dropped
 * (set_position waits for in-flight tasks first, so nothing writes a slot after it is reset).
 *
 * GPU augmentation overlaps the upload with the step. The worker that completes a batch also
 * uploads its tiles, on pix_ctx's copy queue (kern.h "Queues and events"), and records the
 * slot's up_ev, before it marks the slot ready: the copy starts the moment the batch is whole,
 * typically while the consumer's previous step still runs on the compute queue, rather than when
 * the consumer asks for the batch (uploading at the start of trn_loader_next for the next ready
 * slot would also overlap, but only with slots already whole at that call, and would put the
 * dedup and the enqueueing on the training thread). trn_loader_next makes the compute queue wait
 * for up_ev on the device, enqueues aug_batch, records aug_ev and returns without waiting. Reuse
 * is ordered by the two events, never by a host wait on the consumer: a worker syncs up_ev on
 * the host before it rewrites the slot's pinned arena (in practice long complete: the slot went
 * round the ring), and the next upload into the slot's device tiles waits, on the copy queue,
 * for aug_ev (the previous aug_batch that reads them). The slot's image tensor is rewritten only
 * by a later aug_batch on the compute queue, after the steps that read it. On a CPU context all
 * of this is synchronous and the bytes are those of the host path.
 */
#include "loader.h"
#include "ram_shm.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "augment.h"
#include "kern_cuda.h"
#include "sampler.h"
#include "util.h"

/* Tiles a sample reads at most: a mosaic of 4 and a mixup mosaic of 4. */
#define MAX_TILES      8
#define ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))

enum slot_state { SLOT_EMPTY = 0, SLOT_FILLING = 1, SLOT_READY = 2 };

/* What the index summary says about one record. */
struct rec_meta {
    uint32_t h, w, h0, w0; /* stored and original sizes */
    uint32_t th, tw;       /* the tile's size: load_image's for img_size (== h, w unless the
                              record is packed larger and resized on load) */
    uint32_t n_labels;     /* label rows */
};

/*
 * Where one tile of a GPU-augmented sample sits in its slot's arena (and at the same offset in
 * the arena's device twin).
 */
struct arena_tile {
    uint64_t record; /* dataset record whose decoded pixels these are; NO_RECORD for a sample
                        built on the host (never shared with another tile) */
    size_t off;      /* bytes from the arena's start, 64-aligned */
    size_t bytes;    /* h * w * 3 */
    size_t dev_off;  /* consumer: offset of the device copy this tile's plan reads (its own, or
                        that of the first tile of the batch with the same record) */
};

#define NO_RECORD UINT64_MAX

/*
 * A decoded tile kept in RAM (trn_loader_opts.cache_ram): pixels (already resized on load),
 * labels and polygons in one allocation, written once by the worker that decoded the record and
 * then only read, by any worker.
 */
struct ram_tile {
    struct trn_aug_tile t; /* pointers into this allocation */
    size_t bytes;          /* of the allocation */
};

/* One ring buffer. */
struct slot {
    enum slot_state state;
    uint64_t seq;                 /* batch it holds (FILLING, READY) */
    uint32_t epoch;               /* that batch's epoch */
    uint64_t step;                /* and step */
    int n;                        /* images */
    int remaining;                /* samples not finished yet (FILLING) */
    int height, width;            /* image size of this batch */
    struct ffio_pinned mem;       /* images, then targets */
    void *images;                 /* batch_size * 3 * max_h * max_w elements */
    float *targets;               /* batch_size * cap_rows * 6 */
    size_t n_targets;             /* rows in targets (READY) */
    float *rows;                  /* staging: [batch_size][cap_rows][5] per-sample rows */
    int *n_rows;                  /* [batch_size] rows per sample */
    struct trn_batch_image *info; /* [batch_size] */
    /* GPU augmentation (pix_ctx set, TRAIN): no images above; the tiles instead. */
    struct ffio_pinned arena;      /* [batch_size] regions of region_bytes: each sample's decoded
                                      tiles, packed (or its host-built image) */
    struct arena_tile *tiles;      /* [batch_size][MAX_TILES] */
    int *n_tiles;                  /* [batch_size] tiles in use per sample */
    struct kern_aug_sample *plans; /* [batch_size]: pixel pointers into arena until the
                                      consumer rewrites them to the device twin */
    void *dev_tiles;               /* pix_ctx memory, the arena's twin (same size and layout) */
    void *dev_images;              /* pix_ctx memory, batch_size * 3 * s * s elements */
    /* The overlapped upload (see "GPU augmentation" below): up_ev marks the slot's tile uploads
     * on pix_ctx's copy queue (the consumer's aug_batch waits for it on the device; a worker
     * waits for it on the host before it rewrites the arena); aug_ev marks the slot's aug_batch
     * on the compute queue (the next upload into dev_tiles waits for it on the copy queue). */
    struct kern_event *up_ev;
    struct kern_event *aug_ev;
    /* The batch's first tile of each record (open addressing, keyed by record, entries valid
     * when their stamp is dd_now), used by the worker that uploads the slot. */
    uint64_t *dd_key;
    size_t *dd_off;
    uint32_t *dd_stamp;
    uint32_t dd_now;
};

/*
 * A sample a worker has claimed: what its position decides (its records and random draws, taken
 * from the worker's sampler when it is claimed, since the sampler's epoch moves on with the next
 * claim), and the reads of its records, which may be in flight while the worker builds the
 * sample before it (trn_loader_opts.read_ahead).
 */
struct sample {
    struct slot *sl;
    int j;             /* image in the slot */
    uint64_t seq, gen; /* the batch and the loader generation it was claimed in */
    bool planned;      /* sample_plan done */
    uint64_t g;        /* position in the epoch's order */
    uint64_t own;      /* TRAIN: the sample's own record before bad-record replacement */
    int n_tiles;
    uint64_t idx[MAX_TILES];
    struct trn_plan plan;   /* TRAIN */
    struct trn_aug_draws d; /* TRAIN */
    struct trn_aug_tile tiles[MAX_TILES];
    bool pending[MAX_TILES]; /* tile k not read and made yet */
    struct ffio_record_req req[MAX_TILES];
    int which[MAX_TILES];    /* req[q] is tile which[q] */
    int m;                   /* requests in req */
    bool reading;            /* req[0, m) submitted and not yet waited for */
    bool ahead;              /* its reads began before the worker built the sample before it */
    uint8_t *ext[MAX_TILES]; /* its own record extents and decode buffers (4096-aligned) */
    uint8_t *dec[MAX_TILES];
};

struct worker {
    struct trn_loader *l;
    pthread_t thread;
    bool joinable;
    struct ffio_records *rr;
    struct ffio_pinned scratch; /* both samples' record extents and decode buffers */
    struct sample smp[2];       /* the one being built and the one read ahead */
    uint8_t *pix[MAX_TILES];    /* unfiltered RGB8-SUB pixels (malloc on first use) */
    uint8_t *small[MAX_TILES];  /* tiles resized on load to img_size (malloc on first use) */
    uint8_t *hwc;               /* one augmented sample, HWC */
    struct trn_aug_ws *ws;
    struct trn_sampler sampler; /* private copy; epoch switched as tasks need */
    uint64_t files_gen;         /* the loader's files_gen when rr was opened */
    char msg[512];              /* error line of the last failed task */
};

struct trn_loader {
    const struct ffr_reader *r;
    struct trn_loader_opts o;
    bool pix;                    /* GPU augmentation: TRAIN with o.pix_ctx */
    int tiles_per_sample;        /* pix: most tiles a sample reads (1, 4 or 8 from the probs) */
    size_t region_bytes;         /* pix: arena bytes per sample */
    size_t device_bytes;         /* pix: pix_ctx memory held */
    atomic_bool told_host_built; /* pix: the one-time log line about host-built samples is out */
    _Atomic(struct ram_tile *) *ram; /* cache_ram: [n] decoded tiles, published once each */
    struct ram_shm *shm;             /* cache_ram shared by the node's ranks, or NULL */
    atomic_uint_least64_t ram_bytes; /* cache_ram: bytes held */
    uint64_t ram_cap;                /* cache_ram: most bytes to hold */
    struct trn_aug_hyp aug;
    struct trn_plan_probs probs;
    struct trn_sampler sampler;    /* template for the workers */
    uint64_t n;                    /* records */
    struct rec_meta *meta;         /* [n] */
    struct det_labels *own_labels; /* built here when the caller gave no table */
    uint64_t rank_samples;         /* per epoch on this rank */
    uint64_t steps;                /* batches per epoch */
    int cap_rows;                  /* label rows one sample may produce */
    size_t max_extent, max_raw;    /* largest record extent and decoded size */
    bool any_coded;                /* some record needs decoding (not FFR_CODEC_RAW) */
    size_t max_pixels;             /* largest h * w * 3 */
    size_t max_tile;               /* largest th * tw * 3 */
    uint64_t *indices;             /* trn_loader_set_indices' table (n), or NULL */
    uint64_t n_resized;            /* records packed larger than img_size, resized on load */
    bool round_ceil;               /* the pack sized with math.ceil (yolo-pack --resize-round) */
    int64_t *order;                /* rect: dataset indices sorted by aspect ratio */
    int32_t *shapes;               /* rect: (h, w) per batch */
    int max_h, max_w;              /* largest batch image */
    float lut[256];                /* u8 -> float / 255 */
    unsigned depth;
    struct slot *slots;
    unsigned n_workers;
    struct worker *workers;

    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* workers: a task may be claimable, or stop */
    pthread_cond_t cv_done; /* consumer: a batch is ready, an error, inflight reached 0, init */
    pthread_mutex_t log_mu; /* one log call at a time */
    bool stop, paused;
    uint64_t gen;
    uint32_t start_epoch; /* batch seq 0 is (start_epoch, start_step) */
    uint64_t start_step;
    uint64_t claim_seq; /* next task */
    int claim_j;
    uint32_t open_epoch; /* o.epoch_gate: the last epoch whose samples may be claimed */
    uint64_t files_gen;  /* o.epoch_gate: bumped when the reader's shards may have changed */
    uint64_t released;   /* batches < released are free for the workers */
    uint64_t deliver;    /* next batch for the consumer */
    bool holding;        /* the consumer holds batch deliver - 1 */
    unsigned inflight;   /* tasks being computed */
    unsigned inited;     /* workers done with their setup */
    int init_rc;         /* first setup error */
    int err;             /* error that stopped the loader, 0 if none */
    uint64_t err_seq;    /* batch it belongs to: batches before it are still delivered */
    char errmsg[512];
    char errcopy[512]; /* what trn_loader_error returned last */

    size_t dd_mask; /* pix: slot dedup table size - 1 (a power of two >= 2 tiles per batch) */
    atomic_uint_fast64_t n_uploads, upload_bytes; /* pix: batches and bytes uploaded */

    _Atomic uint8_t *bad;     /* [n]: 1 once a record is known bad */
    _Atomic uint8_t *damaged; /* [shards]: 1 once o.damaged was called for the shard */
    atomic_uint_fast64_t n_bad, n_images, n_read_ahead;
    size_t pinned_bytes;
    enum ffio_pinned_kind pinned_kind;
};

__attribute__((format(printf, 2, 3))) static void log_line(struct trn_loader *l, const char *fmt,
                                                           ...)
{
    if (!l->o.log) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&l->log_mu);
    l->o.log(l->o.log_ctx, msg);
    pthread_mutex_unlock(&l->log_mu);
}

static void ffio_log_adapter(void *ctx, enum ffio_log_level level, const char *msg)
{
    (void)level;
    log_line(ctx, "%s", msg);
}

void trn_loader_opts_default(struct trn_loader_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = TRN_LOADER_TRAIN;
    o->img_size = 640;
    o->batch_size = 16;
    o->depth = 3;
    o->world_size = 1;
    o->stride = 32;
    o->rect_pad = 0.5;
    o->pixels = TRN_PIXELS_U8;
    o->bad_records = TRN_BAD_RECORD_SKIP;
    o->read_ahead = true;
    trn_hyp_default(&o->hyp);
    ffio_records_opts_default(&o->io);
}

/* ---------------------------------------------------------------------------------------- */
/* Positions                                                                                */

/* Batch seq (since the last positioning) as (epoch, step) and its image count. */
static void seq_position(const struct trn_loader *l, uint64_t seq, uint32_t *epoch, uint64_t *step,
                         int *n)
{
    const uint64_t abs = l->start_step + seq;
    *epoch = l->start_epoch + (uint32_t)(abs / l->steps);
    *step = abs % l->steps;
    const uint64_t first = *step * (uint64_t)l->o.batch_size;
    const uint64_t left = l->rank_samples - first;
    *n = left < (uint64_t)l->o.batch_size ? (int)left : l->o.batch_size;
}

static void batch_shape(const struct trn_loader *l, uint64_t step, int *h, int *w)
{
    if (l->shapes) {
        *h = l->shapes[2 * step];
        *w = l->shapes[2 * step + 1];
    } else {
        *h = *w = l->o.img_size;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Reading tiles                                                                            */

/* The first record at or after idx (wrapping) not known to be bad; n when all are bad. */
static uint64_t resolve(const struct trn_loader *l, uint64_t idx)
{
    for (uint64_t k = 0; k < l->n; k++) {
        const uint64_t i = (idx + k) % l->n;
        if (!atomic_load_explicit(&l->bad[i], memory_order_relaxed)) return i;
    }
    return l->n;
}

/* The shard of record idx is damaged: tell o.damaged, once per shard. */
static void report_damaged(struct trn_loader *l, uint64_t idx)
{
    const uint32_t ns = ffr_reader_shard_count(l->r);
    for (uint32_t k = 0; k < ns; k++) {
        struct ffr_shard_info si;
        if (ffr_reader_shard(l->r, k, &si) < 0 || idx < si.first || idx - si.first >= si.count)
            continue;
        if (!atomic_exchange(&l->damaged[k], 1)) l->o.damaged(l->o.damaged_ctx, si.path, idx);
        return;
    }
}

/*
 * Record idx is bad for `why`: report it (once per record) and either fail the task
 * (TRN_BAD_RECORD_FAIL: returns rc with w->msg set) or return 0 so the caller moves on.
 */
static int mark_bad(struct worker *w, uint64_t idx, int rc, const char *why)
{
    struct trn_loader *l = w->l;
    const bool skip = l->o.bad_records == TRN_BAD_RECORD_SKIP;
    const uint8_t was = atomic_exchange(&l->bad[idx], 1);
    if (!was) {
        atomic_fetch_add(&l->n_bad, 1);
        log_line(l, "bad record %" PRIu64 ": %s; %s", idx, why,
                 skip ? "using the next good record instead" : "stopping (bad records: fail)");
        if (rc == -FFR_ECHECKSUM && l->o.damaged) report_damaged(l, idx);
    }
    if (skip) return 0;
    snprintf(w->msg, sizeof w->msg, "bad record %" PRIu64 ": %s", idx, why);
    return rc < 0 ? rc : -EIO;
}

/* Check a decoded record against its summary and make its tile. Returns 0, 1 (bad: why in
 * `why`), or a fatal negative error with w->msg set. */
static int make_tile(struct worker *w, int k, uint64_t idx, const void *payload, size_t len,
                     struct trn_aug_tile *t, char *why, size_t why_cap)
{
    const struct trn_loader *l = w->l;
    struct det_sample s;
    const int rc = det_decode(payload, len, &s);
    if (rc < 0) {
        snprintf(why, why_cap, "not a detection sample (%s)", ffr_strerror(rc));
        return 1;
    }
    if (det_check(&s, why, why_cap) < 0) return 1; /* the check ffr verify makes */
    const struct rec_meta *m = &l->meta[idx];
    if (s.h != m->h || s.w != m->w || s.n_labels != m->n_labels) {
        snprintf(why, why_cap,
                 "sample (%" PRIu32 "x%" PRIu32 ", %" PRIu32 " labels) disagrees with its index "
                 "summary (%" PRIu32 "x%" PRIu32 ", %" PRIu32 " labels)",
                 s.w, s.h, s.n_labels, m->w, m->h, m->n_labels);
        return 1;
    }
    const uint8_t *pixels = s.pixels;
    if (s.pixel_format == DET_JPEG) {
        snprintf(w->msg, sizeof w->msg,
                 "record %" PRIu64 ": JPEG pixels are not supported by the loader; repack with "
                 "yolo-pack --codec zstd or raw",
                 idx);
        return -ENOTSUP;
    }
    if (s.pixel_format == DET_RGB8_SUB) {
        if (!w->pix[k]) {
            w->pix[k] = malloc(l->max_pixels);
            if (!w->pix[k]) {
                snprintf(w->msg, sizeof w->msg, "out of memory for pixels");
                return -ENOMEM;
            }
        }
        const int64_t got = det_pixels(&s, w->pix[k], l->max_pixels);
        if (got < 0) {
            snprintf(why, why_cap, "pixels do not decode (%s)", ffr_strerror((int)got));
            return 1;
        }
        pixels = w->pix[k];
    } else if (s.pixel_format != DET_RGB8) {
        snprintf(why, why_cap, "unknown pixel format %" PRIu32, s.pixel_format);
        return 1;
    }
    if (m->tw != m->w || m->th != m->h) {
        if (!w->small[k] && !(w->small[k] = malloc(l->max_tile))) {
            snprintf(w->msg, sizeof w->msg, "out of memory for pixels");
            return -ENOMEM;
        }
        const int rc2 =
            trn_aug_resize_linear(pixels, (int)s.w, (int)s.h, w->small[k], (int)m->tw, (int)m->th);
        if (rc2 < 0) {
            snprintf(w->msg, sizeof w->msg, "record %" PRIu64 ": resizing on load: %s", idx,
                     trn_aug_strerror(rc2));
            return rc2;
        }
        pixels = w->small[k];
    }
    t->pixels = pixels;
    t->w = (int)m->tw;
    t->h = (int)m->th;
    t->labels = s.labels;
    t->n_labels = (int)s.n_labels;
    t->seg_n = s.n_points ? s.seg_counts : NULL;
    t->seg_xy = s.n_points ? s.seg_points : NULL;
    return 0;
}

/* The cached tile of record idx, or NULL. */
static const struct ram_tile *ram_get(const struct trn_loader *l, uint64_t idx)
{
    return l->ram ? atomic_load_explicit(&l->ram[idx], memory_order_acquire) : NULL;
}

/*
 * Keep a copy of tile t of record idx while the budget allows; *t then points at the copy. A
 * record another worker published first keeps that copy. Out of memory or budget: t stays.
 */
static void ram_put(struct trn_loader *l, uint64_t idx, struct trn_aug_tile *t)
{
    const size_t px = (size_t)t->w * (size_t)t->h * 3, nl = (size_t)t->n_labels;
    size_t pts = 0;
    for (size_t i = 0; t->seg_n && i < nl; i++)
        pts += t->seg_n[i];
    const size_t bytes = sizeof(struct ram_tile) + nl * 5 * sizeof(float) +
                         (t->seg_n ? nl * sizeof(uint32_t) : 0) + pts * 2 * sizeof(float) + px;
    if (atomic_fetch_add(&l->ram_bytes, bytes) + bytes > l->ram_cap) {
        atomic_fetch_sub(&l->ram_bytes, bytes);
        return;
    }
    struct ram_tile *rt = malloc(bytes);
    if (!rt) {
        atomic_fetch_sub(&l->ram_bytes, bytes);
        return;
    }
    rt->bytes = bytes;
    char *p = (char *)(rt + 1);
    float *labels = (float *)(void *)p;
    memcpy(labels, t->labels, nl * 5 * sizeof(float));
    p += nl * 5 * sizeof(float);
    uint32_t *seg_n = NULL;
    float *seg_xy = NULL;
    if (t->seg_n) {
        seg_n = (uint32_t *)(void *)p;
        memcpy(seg_n, t->seg_n, nl * sizeof(uint32_t));
        p += nl * sizeof(uint32_t);
        seg_xy = (float *)(void *)p;
        memcpy(seg_xy, t->seg_xy, pts * 2 * sizeof(float));
        p += pts * 2 * sizeof(float);
    }
    memcpy(p, t->pixels, px);
    rt->t =
        (struct trn_aug_tile){ (const uint8_t *)p, t->w, t->h, labels, t->n_labels, seg_n, seg_xy };
    struct ram_tile *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&l->ram[idx], &none, rt, memory_order_release,
                                                 memory_order_acquire)) {
        atomic_fetch_sub(&l->ram_bytes, bytes);
        free(rt);
        rt = none;
    }
    *t = rt->t;
}

/*
 * Requests for the sample's pending tiles into p->req: known-bad records are replaced first and
 * tiles in the RAM cache taken from it. Returns the request count or a fatal error (w->msg).
 */
static int tiles_queue(struct worker *w, struct sample *p)
{
    struct trn_loader *l = w->l;
    int m = 0;
    for (int k = 0; k < p->n_tiles; k++) {
        if (!p->pending[k]) continue;
        p->idx[k] = resolve(l, p->idx[k]);
        if (p->idx[k] >= l->n) {
            snprintf(w->msg, sizeof w->msg, "every record of the dataset is bad");
            return -EIO;
        }
        const struct ram_tile *rt = ram_get(l, p->idx[k]);
        if (rt || ram_shm_get(l->shm, p->idx[k], &p->tiles[k])) {
            /* decoded before (here, or by any rank of the node): no read, no decode */
            if (rt) p->tiles[k] = rt->t;
            p->pending[k] = false;
            continue;
        }
        struct ffr_record_info info;
        if (ffr_reader_info(l->r, p->idx[k], &info) < 0) {
            snprintf(w->msg, sizeof w->msg, "record %" PRIu64 " out of range", p->idx[k]);
            return -EINVAL;
        }
        struct ffio_record_req *q = &p->req[m];
        memset(q, 0, sizeof *q);
        q->index = p->idx[k];
        q->extent = p->ext[k];
        q->extent_cap = ALIGN_UP(l->max_extent, 4096);
        q->dst = info.codec == FFR_CODEC_RAW ? NULL : p->dec[k];
        q->dst_cap = info.codec == FFR_CODEC_RAW ? 0 : l->max_raw;
        p->which[m++] = k;
    }
    return m;
}

/*
 * Start reading the sample's records, to be finished by load_tiles. Anything that goes wrong
 * here is left for load_tiles, which meets it again and reports it.
 */
static void tiles_start(struct worker *w, struct sample *p)
{
    const int m = tiles_queue(w, p);
    if (m > 0 && ffio_records_submit(w->rr, p->req, (size_t)m) == 0) {
        p->m = m;
        p->reading = true;
    }
}

/* Let the sample's reads land (a sample given up: its buffers are about to be reused). */
static void tiles_drop(struct worker *w, struct sample *p)
{
    if (p->reading) (void)ffio_records_wait(w->rr, p->req, (size_t)p->m);
    p->reading = false;
}

/*
 * Read and decode the sample's records into its tiles, finishing reads tiles_start began.
 * Records found bad are reported and replaced (SKIP) or fail the task; idx is updated to the
 * records actually used.
 */
static int load_tiles(struct worker *w, struct sample *p)
{
    struct trn_loader *l = w->l;
    for (uint64_t round = 0;; round++) {
        int m = p->m;
        if (p->reading) {
            p->reading = false;
        } else {
            if ((m = tiles_queue(w, p)) <= 0) return m;
            if (round > l->n) {
                snprintf(w->msg, sizeof w->msg,
                         "every record is bad (each is named in a line above): check the dataset "
                         "with ffr verify");
                return -EIO;
            }
            const int s = ffio_records_submit(w->rr, p->req, (size_t)m);
            if (s < 0) {
                snprintf(w->msg, sizeof w->msg, "record reader failed: %s", ffio_strerror(s));
                return s;
            }
        }
        const int rc = ffio_records_wait(w->rr, p->req, (size_t)m);
        if (rc < 0) {
            snprintf(w->msg, sizeof w->msg, "record reader failed: %s", ffio_strerror(rc));
            return rc;
        }
        for (int q = 0; q < m; q++) {
            const int k = p->which[q];
            const struct ffio_record_req *req = &p->req[q];
            char why[384];
            int bad_rc = 0;
            if (req->result < 0) {
                char desc[300];
                ffio_records_describe(w->rr, req, desc, sizeof desc);
                snprintf(why, sizeof why, "%s", desc);
                bad_rc = (int)req->result;
            } else {
                const int t = make_tile(w, k, p->idx[k], req->payload, (size_t)req->result,
                                        &p->tiles[k], why, sizeof why);
                if (t < 0) return t;
                if (t == 0) {
                    if (l->shm)
                        ram_shm_put(l->shm, p->idx[k], &p->tiles[k]);
                    else if (l->ram)
                        ram_put(l, p->idx[k], &p->tiles[k]);
                    p->pending[k] = false;
                    continue;
                }
                bad_rc = -FFR_ECORRUPT;
            }
            const int b = mark_bad(w, p->idx[k], bad_rc, why);
            if (b < 0) return b;
            p->idx[k] = (p->idx[k] + 1) % l->n;
        }
    }
}

/* kern_augment.h's dtype of a pixel type (checked at create). */
static int aug_dtype(enum trn_pixel_type p)
{
    switch (p) {
    case TRN_PIXELS_F32:
        return KERN_AUG_F32;
    case TRN_PIXELS_BF16_S2D_NHWC:
        return KERN_AUG_BF16_S2D_NHWC;
    case TRN_PIXELS_BF16_S2D_NCHW:
        return KERN_AUG_BF16_S2D_NCHW;
    default:
        return KERN_AUG_U8;
    }
}

/* Bytes of one h x w image of the batch tensor. */
static size_t image_bytes(const struct trn_loader *l, int h, int w)
{
    return kern_aug_image_bytes(aug_dtype(l->o.pixels), h, w);
}

uint8_t trn_batch_pixel(const struct trn_batch *b, const void *images, int i, int ch, int y, int x)
{
    const int t = aug_dtype(b->pixels);
    const size_t one = kern_aug_image_bytes(t, b->height, b->width);
    return kern_aug_pixel((const uint8_t *)images + (size_t)i * one, t, b->height, b->width, ch, y,
                          x);
}

/* ---------------------------------------------------------------------------------------- */
/* One sample                                                                               */

static double uniform_cb(void *ctx)
{
    return trn_rng_uniform(ctx);
}

/* HWC uint8 (h x w) -> image j of the slot, NCHW, as u8 or float / 255. */
static void store_image(const struct trn_loader *l, const uint8_t *hwc, int h, int w, void *dst)
{
    const size_t plane = (size_t)h * (size_t)w;
    if (l->o.pixels == TRN_PIXELS_F32) {
        float *r = dst, *g = r + plane, *b = g + plane;
        for (size_t i = 0; i < plane; i++) {
            r[i] = l->lut[hwc[3 * i]];
            g[i] = l->lut[hwc[3 * i + 1]];
            b[i] = l->lut[hwc[3 * i + 2]];
        }
    } else {
        uint8_t *r = dst, *g = r + plane, *b = g + plane;
        for (size_t i = 0; i < plane; i++) {
            r[i] = hwc[3 * i];
            g[i] = hwc[3 * i + 1];
            b[i] = hwc[3 * i + 2];
        }
    }
}

/*
 * A plan that reproduces the s x s RGB8 image img as it is: one paste covering an s x s canvas
 * and the identity warp. Exact: identity coordinates have no fraction in the warp's fixed point
 * (X = x * 32 + 16 >> 5 bits), so each output pixel is its source pixel with weight 1024 / 1024;
 * no HSV, flips or mixup (the image has them already).
 */
static void identity_plan(struct kern_aug_sample *p, const uint8_t *img, int s)
{
    memset(p, 0, sizeof *p);
    p->canvas[0].w = p->canvas[0].h = s;
    p->canvas[0].n_paste = 1;
    p->canvas[0].paste[0] =
        (struct kern_aug_paste){ .src = img, .src_w = s, .src_h = s, .w = s, .h = s };
    p->inv[0][0] = p->inv[0][4] = p->inv[0][8] = 1;
}

/*
 * GPU augmentation, worker side: copy the sample's decoded tiles into its region of the slot's
 * arena and plan it (labels into rows exactly as trn_aug_train_sample; the pixels in
 * sl->plans[j], pointing into the arena until the consumer moves them to the device twin).
 * A sample without a plan (-ENOTSUP: a letterbox that must resize, when a record's long side is
 * not exactly img_size) is built on the host by trn_aug_train_sample and uploaded whole, with an
 * identity plan: the same bytes, at the cost of the CPU augmentation for that sample (reported
 * once through the log). Returns the row count or a trn_aug error.
 */
static int plan_on_arena(struct worker *w, struct slot *sl, int j, const struct trn_aug_draws *d,
                         const struct trn_aug_tile *tiles, int n_tiles, const uint64_t *idx,
                         float *rows)
{
    struct trn_loader *l = w->l;
    const size_t base = (size_t)j * l->region_bytes;
    uint8_t *const region = (uint8_t *)sl->arena.ptr + base;
    struct arena_tile *const at = sl->tiles + (size_t)j * MAX_TILES;
    const uint8_t *pix[MAX_TILES];
    size_t off = 0;
    for (int k = 0; k < n_tiles; k++) {
        const size_t bytes = (size_t)tiles[k].w * (size_t)tiles[k].h * 3;
        /* Never true: region_bytes holds tiles_per_sample tiles of max_tile (n_tiles follows
         * the same probabilities), and every tile is checked against its index summary. */
        if (n_tiles > l->tiles_per_sample || off + bytes > l->region_bytes) return -EINVAL;
        memcpy(region + off, tiles[k].pixels, bytes);
        at[k] = (struct arena_tile){ .record = idx[k], .off = base + off, .bytes = bytes };
        pix[k] = region + off;
        off += ALIGN_UP(bytes, 64);
    }
    sl->n_tiles[j] = n_tiles;
    int nr = trn_aug_plan_sample(w->ws, &l->aug, d, tiles, n_tiles, pix, &sl->plans[j], rows,
                                 l->cap_rows);
    if (nr != -ENOTSUP) return nr;
    nr = trn_aug_train_sample(w->ws, &l->aug, d, tiles, n_tiles, w->hwc, rows, l->cap_rows);
    if (nr < 0) return nr;
    const int s = l->o.img_size;
    memcpy(region, w->hwc, (size_t)s * (size_t)s * 3);
    at[0] = (struct arena_tile){ .record = NO_RECORD, .off = base, .bytes = (size_t)s * s * 3 };
    sl->n_tiles[j] = 1;
    identity_plan(&sl->plans[j], region, s);
    if (!atomic_exchange(&l->told_host_built, true)) {
        char why[160];
        if (d->mosaic)
            snprintf(why, sizeof why, "copy_paste pasted on its mosaic canvas");
        else
            snprintf(why, sizeof why,
                     "record %" PRIu64 " is stored at %dx%d, so its letterbox to %d needs a resize",
                     idx[0], tiles[0].w, tiles[0].h, s);
        log_line(l,
                 "%s, which GPU augmentation does not plan; such samples are augmented on the "
                 "CPU and uploaded whole (same bytes; reported once)",
                 why);
    }
    return nr;
}

/*
 * What the sample's position decides: its records (the sampler's plan) and, for training, its
 * random draws. Everything that reads the worker's sampler happens here.
 */
static void sample_plan(struct worker *w, struct sample *p)
{
    struct trn_loader *l = w->l;
    struct slot *sl = p->sl;
    const int s = l->o.img_size;
    const uint64_t local = sl->step * (uint64_t)l->o.batch_size + (uint64_t)p->j;
    uint64_t *idx = p->idx;

    if (w->sampler.epoch != sl->epoch) trn_sampler_set_epoch(&w->sampler, sl->epoch);
    p->planned = true;
    p->n_tiles = 1;
    if (l->order) {
        p->g = local;
        idx[0] = (uint64_t)l->order[p->g];
    } else {
        p->g = trn_sampler_position(&w->sampler, local);
        idx[0] = trn_sampler_index(&w->sampler, p->g);
    }
    if (l->o.mode == TRN_LOADER_TRAIN) {
        const uint64_t g = p->g;
        struct trn_plan *plan = &p->plan;
        trn_sampler_plan(&w->sampler, g, &l->probs, plan);
        if (plan->mosaic) {
            p->n_tiles = plan->mixup ? 8 : 4;
            memcpy(idx, plan->tiles, sizeof plan->tiles);
            if (plan->mixup) memcpy(idx + 4, plan->mixup_tiles, sizeof plan->mixup_tiles);
        } else if (!l->order) {
            idx[0] = plan->index;
        } else {
            plan->index = plan->tiles[0] = idx[0]; /* rect training: the aspect-ratio order */
        }
        p->own = plan->index;

        struct trn_aug_draws *d = &p->d;
        struct trn_rng r;
        memset(d, 0, sizeof *d);
        d->mosaic = plan->mosaic;
        d->mixup = plan->mixup;
        d->flipud = plan->flipud;
        d->fliplr = plan->fliplr;
        if (plan->mosaic) {
            trn_sampler_rng(&w->sampler, g, TRN_STREAM_MOSAIC, &r);
            trn_aug_draw_mosaic(&l->aug, s, uniform_cb, &r, &d->mos);
        } else {
            trn_sampler_rng(&w->sampler, g, TRN_STREAM_LETTERBOX, &r);
            trn_aug_draw_perspective(&l->aug, uniform_cb, &r, &d->mos.persp);
        }
        if (plan->mixup) {
            trn_sampler_rng(&w->sampler, g, TRN_STREAM_MIXUP, &r);
            trn_aug_draw_mosaic(&l->aug, s, uniform_cb, &r, &d->mixmos);
        }
        if (plan->mosaic && l->aug.copy_paste > 0) {
            trn_sampler_rng(&w->sampler, g, TRN_STREAM_COPYPASTE, &r);
            d->copy_paste_key[0] = trn_rng_u64(&r);
            d->copy_paste_key[1] = trn_rng_u64(&r);
        }
        trn_sampler_rng(&w->sampler, g, TRN_STREAM_COLOR, &r);
        d->mixup_ratio = trn_rng_beta(&r, 32.0, 32.0);
        trn_aug_draw_hsv(&l->aug, uniform_cb, &r, &d->hsv);
    }
    for (int k = 0; k < p->n_tiles; k++)
        p->pending[k] = true;
}

/* Read the planned sample's records (finishing reads begun earlier) and build it in its slot. */
static int sample_build(struct worker *w, struct sample *p)
{
    struct trn_loader *l = w->l;
    struct slot *sl = p->sl;
    const int j = p->j;
    const uint64_t g = p->g;
    const uint64_t *idx = p->idx;
    const struct trn_aug_tile *tiles = p->tiles;
    struct trn_batch_image *info = &sl->info[j];
    float *rows = sl->rows + (size_t)j * (size_t)l->cap_rows * 5;
    int nr;

    memset(info, 0, sizeof *info);
    int rc = load_tiles(w, p);
    if (rc < 0) return rc;
    if (l->o.mode == TRN_LOADER_TRAIN) {
        const struct trn_aug_draws *d = &p->d;
        if (l->pix) {
            /* The slot's previous upload may still read the arena. */
            const int up = kern_event_sync(sl->up_ev);
            if (up < 0) {
                snprintf(w->msg, sizeof w->msg,
                         "waiting for the upload of the slot's previous batch: %s (%s)",
                         kern_strerror(up), kern_stream_last_error());
                return up;
            }
            nr = plan_on_arena(w, sl, j, d, tiles, p->n_tiles, idx, rows);
        } else {
            /* straight into the slot's planes: one fused pass, no HWC image */
            nr = trn_aug_train_sample_planar(
                w->ws, &l->aug, d, tiles, p->n_tiles, sl->height, sl->width, aug_dtype(l->o.pixels),
                (char *)sl->images + (size_t)j * image_bytes(l, sl->height, sl->width), rows,
                l->cap_rows);
        }
        if (nr < 0) {
            snprintf(w->msg, sizeof w->msg,
                     "augmenting the sample at position %" PRIu64 " (record %" PRIu64 "%s): %s", g,
                     p->own, l->pix ? ", GPU plan" : "", trn_aug_strerror(nr));
            return nr;
        }
        /* The image's own record, after any bad-record replacement. */
        info->index = idx[0];
        for (int k = 0; k < 4 && p->plan.mosaic; k++)
            if (p->plan.tiles[k] == p->own) {
                info->index = idx[k];
                break;
            }
    } else {
        struct trn_aug_letterbox_plan lp;
        nr = trn_aug_val_sample(&tiles[0], sl->height, sl->width, w->hwc,
                                (size_t)l->max_h * (size_t)l->max_w * 3, rows, l->cap_rows, &lp);
        if (nr < 0) {
            snprintf(w->msg, sizeof w->msg, "letterboxing record %" PRIu64 ": %s", idx[0],
                     trn_aug_strerror(nr));
            return nr;
        }
        info->index = idx[0];
        info->ratio_w = (float)lp.ratio_w;
        info->ratio_h = (float)lp.ratio_h;
        info->pad_w = (float)lp.pad_w;
        info->pad_h = (float)lp.pad_h;
        store_image(l, w->hwc, sl->height, sl->width,
                    (char *)sl->images + (size_t)j * image_bytes(l, sl->height, sl->width));
    }
    const struct rec_meta *m = &l->meta[info->index];
    info->position = g;
    info->h0 = m->h0;
    info->w0 = m->w0;
    info->h = m->th;
    info->w = m->tw;
    sl->n_rows[j] = nr;
    atomic_fetch_add(&l->n_images, 1);
    if (p->ahead) atomic_fetch_add(&l->n_read_ahead, 1);
    return 0;
}

/* Pack the per-sample rows of a finished batch into its target list, in image order. */
static void pack_targets(const struct trn_loader *l, struct slot *sl)
{
    size_t t = 0;
    for (int j = 0; j < sl->n; j++) {
        const float *src = sl->rows + (size_t)j * (size_t)l->cap_rows * 5;
        for (int i = 0; i < sl->n_rows[j]; i++, t++) {
            float *dst = sl->targets + t * 6;
            dst[0] = (float)j;
            memcpy(dst + 1, src + (size_t)i * 5, 5 * sizeof(float));
            if (l->o.single_cls) dst[1] = 0.0f;
        }
    }
    sl->n_targets = t;
}

/*
 * The batch's first tile of `record` in slot sl (its device offset), or NULL after noting `off`
 * as the first; the table lives for one batch (sl->dd_now).
 */
static const size_t *dedup(const struct trn_loader *l, struct slot *sl, uint64_t record, size_t off)
{
    /* Fibonacci hashing: records of a batch are spread, but consecutive ones are common. */
    size_t h = (size_t)((record * 0x9E3779B97F4A7C15ull) >> 32) & l->dd_mask;
    for (;; h = (h + 1) & l->dd_mask) {
        if (sl->dd_stamp[h] != sl->dd_now) {
            sl->dd_stamp[h] = sl->dd_now;
            sl->dd_key[h] = record;
            sl->dd_off[h] = off;
            return NULL;
        }
        if (sl->dd_key[h] == record) return &sl->dd_off[h];
    }
}

/*
 * GPU augmentation, upload, by the worker that completed the slot (outside the lock; the slot
 * is neither READY nor claimable until it returns): the slot's tiles go to their device twin on
 * pix_ctx's copy queue, each record once per batch (a tile whose record already came earlier in
 * the batch reads that copy), the plans are pointed at the device copies, and up_ev marks the
 * uploads. The copy queue first waits for the slot's previous aug_batch (aug_ev), which reads the
 * device tiles. On failure whatever was enqueued is waited for, so that no copy still reads the
 * arena when workers rewrite it. Returns 0 or a kern error with the text in msg.
 */
static int pix_upload(struct trn_loader *l, struct slot *sl, char *msg, size_t cap)
{
    struct kern_ctx *const ctx = l->o.pix_ctx;
    const uint8_t *const host = sl->arena.ptr;
    uint8_t *const dev = sl->dev_tiles;
    size_t run_off = 0, run_len = 0, sent = 0;
    int rc = kern_event_wait(ctx, KERN_QUEUE_COPY, sl->aug_ev);
    if (rc < 0) {
        snprintf(msg, cap, "ordering the upload after the slot's previous aug_batch (%s)",
                 kern_stream_last_error());
        goto out;
    }
    if (++sl->dd_now == 0) {
        memset(sl->dd_stamp, 0, (l->dd_mask + 1) * sizeof *sl->dd_stamp);
        sl->dd_now = 1;
    }
    for (int j = 0; j < sl->n && rc == 0; j++) {
        for (int k = 0; k < sl->n_tiles[j] && rc == 0; k++) {
            struct arena_tile *t = &sl->tiles[(size_t)j * MAX_TILES + k];
            t->dev_off = t->off;
            const size_t *first = t->record == NO_RECORD ? NULL : dedup(l, sl, t->record, t->off);
            if (first) {
                t->dev_off = *first;
                continue;
            }
            /* Copies coalesce over a sample's packed tiles (gaps < 64 bytes of alignment). */
            if (run_len && t->off >= run_off + run_len && t->off - (run_off + run_len) < 64) {
                run_len = t->off + t->bytes - run_off;
                continue;
            }
            if (run_len)
                rc = kern_mem_copy_on(ctx, KERN_QUEUE_COPY, dev + run_off, host + run_off, run_len,
                                      KERN_COPY_H2D);
            sent += run_len;
            run_off = t->off;
            run_len = t->bytes;
        }
    }
    if (rc == 0 && run_len)
        rc = kern_mem_copy_on(ctx, KERN_QUEUE_COPY, dev + run_off, host + run_off, run_len,
                              KERN_COPY_H2D);
    sent += run_len;
    if (rc < 0) {
        snprintf(msg, cap, "uploading %zu bytes of tiles (%s)", sent, kern_stream_last_error());
        goto out;
    }
    for (int j = 0; j < sl->n; j++) {
        struct kern_aug_sample *p = &sl->plans[j];
        const struct arena_tile *t = &sl->tiles[(size_t)j * MAX_TILES];
        for (int c = 0; c < 1 + (p->mixup != 0); c++)
            for (int q = 0; q < p->canvas[c].n_paste; q++) {
                struct kern_aug_paste *ps = &p->canvas[c].paste[q];
                int k = 0;
                while (k < sl->n_tiles[j] && ps->src != host + t[k].off)
                    k++;
                if (k == sl->n_tiles[j]) {
                    /* Never true: plan_on_arena plans from these tiles' arena copies. */
                    snprintf(msg, cap, "a plan reads outside its sample's tiles");
                    rc = -EINVAL;
                    goto out;
                }
                ps->src = dev + t[k].dev_off;
            }
    }
    rc = kern_event_record(ctx, KERN_QUEUE_COPY, sl->up_ev);
    if (rc < 0) snprintf(msg, cap, "marking the upload (%s)", kern_stream_last_error());
out:
    if (rc < 0) {
        if (kern_event_record(ctx, KERN_QUEUE_COPY, sl->up_ev) == 0)
            (void)kern_event_sync(sl->up_ev);
        return rc;
    }
    atomic_fetch_add(&l->n_uploads, 1);
    atomic_fetch_add(&l->upload_bytes, sent);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Workers                                                                                  */

/* The worker's record engine over the reader's shards as they are now (at setup, and again
 * when trn_loader_open_epoch says they were swapped). */
static int records_open(struct worker *w, const char *what)
{
    struct trn_loader *l = w->l;
    struct ffio_records_opts io = l->o.io;
    if (!io.io.log) {
        io.io.log = ffio_log_adapter;
        io.io.log_ctx = l;
    }
    ffio_records_close(w->rr);
    w->rr = NULL;
    const int rc = ffio_records_open(l->r, &io, &w->rr);
    if (rc < 0) snprintf(w->msg, sizeof w->msg, "%s: %s", what, ffio_strerror(rc));
    return rc;
}

static int worker_setup(struct worker *w)
{
    struct trn_loader *l = w->l;
    int rc = records_open(w, "opening a record reader");
    if (rc < 0) return rc;
    w->files_gen = l->files_gen;
    /* Tiles per sample: a worker's two samples need their own buffers; raw records are used
     * where they land, so decode buffers only for a dataset with coded records. */
    const size_t tiles = l->o.mode == TRN_LOADER_TRAIN ? MAX_TILES : 1;
    const size_t ext = ALIGN_UP(l->max_extent, 4096);
    const size_t dec = l->any_coded ? ALIGN_UP(l->max_raw, 4096) : 0;
    const size_t n_smp = l->o.read_ahead ? 2 : 1, bytes = n_smp * tiles * (ext + dec);
    rc = ffio_pinned_alloc(bytes, FFIO_PINNED_HOST_ONLY, &w->scratch);
    if (rc < 0) {
        snprintf(w->msg, sizeof w->msg, "allocating %zu bytes of read buffers: %s", bytes,
                 ffio_strerror(rc));
        return rc;
    }
    uint8_t *at = w->scratch.ptr;
    for (size_t i = 0; i < n_smp; i++)
        for (size_t k = 0; k < tiles; k++) {
            w->smp[i].ext[k] = at;
            at += ext;
            w->smp[i].dec[k] = dec ? at : NULL;
            at += dec;
        }
    /* Registration is an optimisation: the engine reads without it when refused. */
    (void)ffio_engine_register_buffer(ffio_records_engine(w->rr), w->scratch.ptr, w->scratch.size);
    w->hwc = malloc((size_t)l->max_h * (size_t)l->max_w * 3);
    if (!w->hwc) {
        snprintf(w->msg, sizeof w->msg, "out of memory");
        return -ENOMEM;
    }
    if (l->o.mode == TRN_LOADER_TRAIN) {
        rc = trn_aug_ws_create(l->o.img_size, l->cap_rows, 0, &w->ws);
        if (rc < 0) {
            snprintf(w->msg, sizeof w->msg, "augmentation workspace: %s", trn_aug_strerror(rc));
            return rc;
        }
    }
    /* Its own copy: a shard-aware sampler's table changes with the epoch. */
    if ((rc = trn_sampler_copy(&w->sampler, &l->sampler)) < 0) {
        snprintf(w->msg, sizeof w->msg, "out of memory");
        return rc;
    }
    return 0;
}

/* records_open again, its read buffers registered with the new engine. */
static int reopen_files(struct worker *w)
{
    const int rc = records_open(w, "opening the record files again");
    if (rc < 0) return rc;
    (void)ffio_engine_register_buffer(ffio_records_engine(w->rr), w->scratch.ptr, w->scratch.size);
    return 0;
}

static void worker_teardown(struct worker *w)
{
    /* The engine must be destroyed by the thread that used it (ffio.h "Threads"). */
    ffio_records_close(w->rr);
    w->rr = NULL;
    ffio_pinned_free(&w->scratch);
    for (int k = 0; k < MAX_TILES; k++) {
        free(w->pix[k]);
        free(w->small[k]);
        w->pix[k] = w->small[k] = NULL;
    }
    free(w->hwc);
    w->hwc = NULL;
    trn_aug_ws_destroy(w->ws);
    trn_sampler_destroy(&w->sampler);
    w->ws = NULL;
}

/* Whether a worker may claim a sample now (l->mu held). */
static bool claimable(const struct trn_loader *l, int setup)
{
    if (setup != 0 || l->stop || l->paused || l->err || l->claim_seq >= l->released + l->depth)
        return false;
    if (!l->o.epoch_gate) return true;
    uint32_t e;
    uint64_t step;
    int n;
    seq_position(l, l->claim_seq, &e, &step, &n);
    return e <= l->open_epoch;
}

/* Claim the next sample into p (l->mu held): the slot's batch is set up by its first sample. */
static struct sample *claim(struct trn_loader *l, struct sample *p)
{
    const uint64_t seq = l->claim_seq;
    struct slot *sl = &l->slots[seq % l->depth];
    const int j = l->claim_j;
    if (j == 0) {
        sl->seq = seq;
        sl->state = SLOT_FILLING;
        seq_position(l, seq, &sl->epoch, &sl->step, &sl->n);
        sl->remaining = sl->n;
        sl->n_targets = 0;
        batch_shape(l, sl->step, &sl->height, &sl->width);
    }
    if (++l->claim_j >= sl->n) {
        l->claim_seq++;
        l->claim_j = 0;
    }
    l->inflight++;
    p->sl = sl;
    p->j = j;
    p->seq = seq;
    p->gen = l->gen;
    p->planned = false;
    p->reading = false;
    p->ahead = false;
    return p;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct trn_loader *l = w->l;
    const int setup = worker_setup(w);

    pthread_mutex_lock(&l->mu);
    if (setup < 0 && l->init_rc == 0) {
        l->init_rc = setup;
        snprintf(l->errmsg, sizeof l->errmsg, "%s", w->msg);
    }
    l->inited++;
    pthread_cond_broadcast(&l->cv_done);
    /*
     * cur: the sample being built; nx: the next one, claimed and its reads started before cur is
     * built (read_ahead), so that the records land while the CPU augments. A claimed sample is
     * always finished or, when the loader moved (gen) or stops, its reads drained and dropped:
     * inflight counts both, so that a repositioning waits for them.
     */
    struct sample *cur = NULL;
    while (!(l->stop && !cur)) {
        if (cur && (l->stop || cur->gen != l->gen)) {
            pthread_mutex_unlock(&l->mu);
            tiles_drop(w, cur);
            pthread_mutex_lock(&l->mu);
            cur = NULL;
            if (--l->inflight == 0) pthread_cond_broadcast(&l->cv_done);
            continue;
        }
        if (!cur && setup == 0 && w->files_gen != l->files_gen && !l->stop && !l->err) {
            /* The reader's shards were swapped (trn_loader_open_epoch): nothing is in flight,
             * and this engine opened the files the shards had before. A failed reopen stops
             * the loader; a repositioning clears the error and this is tried again. */
            const uint64_t g = l->files_gen;
            pthread_mutex_unlock(&l->mu);
            const int rc = reopen_files(w);
            pthread_mutex_lock(&l->mu);
            if (rc == 0) w->files_gen = g;
            if (rc < 0 && !l->err) {
                l->err = rc;
                l->err_seq = l->claim_seq;
                snprintf(l->errmsg, sizeof l->errmsg, "%s", w->msg);
                pthread_cond_broadcast(&l->cv_done);
            }
            continue;
        }
        if (!cur) {
            if (!claimable(l, setup)) {
                pthread_cond_wait(&l->cv_work, &l->mu);
                continue;
            }
            cur = claim(l, &w->smp[0]);
        }
        struct sample *nx = NULL;
        if (l->o.read_ahead && claimable(l, setup)) nx = claim(l, &w->smp[cur == &w->smp[0]]);
        pthread_mutex_unlock(&l->mu);

        if (!cur->planned) {
            sample_plan(w, cur);
            tiles_start(w, cur);
        }
        if (nx) {
            sample_plan(w, nx);
            tiles_start(w, nx);
            nx->ahead = nx->reading;
        }
        const uint64_t seq = cur->seq, gen = cur->gen;
        struct slot *sl = cur->sl;
        const int rc = sample_build(w, cur);
        cur = nx;

        pthread_mutex_lock(&l->mu);
        if (gen == l->gen) {
            if (rc < 0) {
                if (!l->err || seq < l->err_seq) {
                    l->err = rc;
                    l->err_seq = seq;
                    snprintf(l->errmsg, sizeof l->errmsg, "%s", w->msg);
                }
                pthread_cond_broadcast(&l->cv_done);
            } else if (--sl->remaining == 0) {
                pthread_mutex_unlock(&l->mu);
                pack_targets(l, sl);
                char up_msg[400]; /* as the consumer's pix_batch text */
                const int up = l->pix ? pix_upload(l, sl, up_msg, sizeof up_msg) : 0;
                pthread_mutex_lock(&l->mu);
                if (gen == l->gen && up < 0 && (!l->err || seq < l->err_seq)) {
                    l->err = up;
                    l->err_seq = seq;
                    snprintf(l->errmsg, sizeof l->errmsg,
                             "GPU augmentation of batch %" PRIu64 " of epoch %" PRIu32 ": %s: %s",
                             sl->step, sl->epoch, up_msg, kern_strerror(up));
                } else if (gen == l->gen && up == 0) {
                    sl->state = SLOT_READY;
                }
                pthread_cond_broadcast(&l->cv_done);
            }
        }
        if (--l->inflight == 0) pthread_cond_broadcast(&l->cv_done);
    }
    pthread_mutex_unlock(&l->mu);
    worker_teardown(w);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Setup                                                                                    */

/*
 * Whether a record was packed for img_size s: ultralytics' load_image makes (int(w0 * r),
 * int(h0 * r)) with r = s / max(h0, w0) (v7.0; ceil in later master, yolo-pack --resize-round),
 * so each side is within a pixel of ceil(w0 * r). One pixel of slack on each side keeps this a
 * check of the packing size, not of the packer's rounding.
 */
static bool packed_for(const struct det_summary *m, uint32_t s)
{
    if (m->h0 == 0 || m->w0 == 0) return false;
    const double r = (double)s / (double)(m->h0 > m->w0 ? m->h0 : m->w0);
    const double wh = ceil((double)m->w0 * r), hh = ceil((double)m->h0 * r);
    return fabs((double)m->w - wh) <= 1.0 && fabs((double)m->h - hh) <= 1.0;
}

/* load_image's size for img_size s (the packer's rule, pack_image_target_size): r = s / max side
 * in double, int() or ceil() of each side times r, at least 1, unchanged when r == 1. */
static void load_size(uint32_t w0, uint32_t h0, uint32_t s, bool ceil_round, uint32_t *w,
                      uint32_t *h)
{
    const double r = (double)s / (double)(h0 > w0 ? h0 : w0);
    if (r == 1.0) {
        *w = w0;
        *h = h0;
        return;
    }
    const double fw = (double)w0 * r, fh = (double)h0 * r;
    *w = (uint32_t)(ceil_round ? ceil(fw) : fw);
    *h = (uint32_t)(ceil_round ? ceil(fh) : fh);
    if (*w < 1) *w = 1;
    if (*h < 1) *h = 1;
}

static int scan_index(struct trn_loader *l, char *err, size_t cap)
{
    size_t mlen = 0;
    const char *text = ffr_reader_metadata(l->r, &mlen);
    struct det_meta dm;
    char why[300];
    int rc = det_meta_parse(text, mlen, &dm, why, sizeof why);
    const bool is_det = dm.is_det;
    l->round_ceil = dm.round == DET_ROUND_CEIL;
    det_meta_free(&dm);
    if (rc < 0) return trn_fail(err, cap, rc, "%s", rc == -ENOMEM ? "out of memory" : why);
    if (!is_det)
        return trn_fail(err, cap, -EINVAL,
                        "not a detection dataset (its metadata has no 'encoding: " DET_ENCODING
                        "'); make it with yolo-pack");
    /* the table of the caller's (the trainer builds one for everyone), or one of its own */
    const struct det_labels *t = l->o.labels;
    if (!t) {
        if ((rc = det_labels_build(l->r, NULL, &l->own_labels, err, cap)) < 0) return rc;
        t = l->own_labels;
    }
    if (t->n != l->n) return trn_fail(err, cap, -EINVAL, "the label table is of another dataset");
    l->meta = calloc(l->n, sizeof *l->meta);
    if (!l->meta) return trn_fail(err, cap, -ENOMEM, "out of memory for %" PRIu64 " records", l->n);
    const uint32_t s = (uint32_t)l->o.img_size;
    for (uint64_t i = 0; i < l->n; i++) {
        struct ffr_record_info info;
        if ((rc = ffr_reader_info(l->r, i, &info)) < 0)
            return trn_fail(err, cap, rc, "record %" PRIu64 ": %s", i, ffr_strerror(rc));
        const struct det_image *im = &t->image[i];
        const struct det_summary sum = { im->h, im->w, im->h0, im->w0, 0, NULL };
        uint32_t tw = sum.w, th = sum.h;
        if (!packed_for(&sum, s)) {
            /* Packed larger: shrink on load. Smaller would enlarge stored pixels, which is not
             * what load_image does from the original either. */
            if ((sum.w > sum.h ? sum.w : sum.h) < s)
                return trn_fail(err, cap, -EINVAL,
                                "record %" PRIu64 " is stored at %" PRIu32 "x%" PRIu32
                                ", smaller than long side %" PRIu32
                                " (--img): pack at --size %" PRIu32
                                " or larger (yolo-pack --size, or --data to pack it for you)",
                                i, sum.w, sum.h, s, s);
            load_size(sum.w0, sum.h0, s, l->round_ceil, &tw, &th);
            l->n_resized++;
        }
        const uint32_t n_labels = (uint32_t)(t->first[i + 1] - t->first[i]);
        l->meta[i] = (struct rec_meta){ sum.h, sum.w, sum.h0, sum.w0, th, tw, n_labels };
        if ((size_t)th * tw * 3 > l->max_tile) l->max_tile = (size_t)th * tw * 3;
        if (info.extent_len > l->max_extent) l->max_extent = (size_t)info.extent_len;
        if (info.raw_len > l->max_raw) l->max_raw = info.raw_len;
        if (info.codec != FFR_CODEC_RAW) l->any_coded = true;
        const size_t px = (size_t)sum.h * sum.w * 3;
        if (px > l->max_pixels) l->max_pixels = px;
    }
    const uint32_t max_labels = t->max_rows;
    if (max_labels > 100000)
        return trn_fail(err, cap, -EINVAL, "a record has %" PRIu32 " labels (limit 100000)",
                        max_labels);
    /* copy_paste appends at most one mirrored copy per label */
    const int tiles = l->o.mode != TRN_LOADER_TRAIN ? 1
                      : l->o.hyp.copy_paste > 0     ? 2 * MAX_TILES
                                                    : MAX_TILES;
    l->cap_rows = (int)max_labels * tiles;
    if (l->cap_rows < 1) l->cap_rows = 1;
    return 0;
}

static int setup_rect(struct trn_loader *l, char *err, size_t cap)
{
    int32_t *hw = malloc(l->n * 2 * sizeof *hw);
    l->order = malloc(l->n * sizeof *l->order);
    l->shapes = malloc(l->steps * 2 * sizeof *l->shapes);
    if (!hw || !l->order || !l->shapes) {
        free(hw);
        return trn_fail(err, cap, -ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < l->n; i++) {
        hw[2 * i] = (int32_t)l->meta[i].h0;
        hw[2 * i + 1] = (int32_t)l->meta[i].w0;
    }
    const int nb = trn_aug_rect_shapes(hw, (int64_t)l->n, l->o.batch_size, l->o.img_size,
                                       l->o.stride, l->o.rect_pad, l->order, l->shapes);
    free(hw);
    if (nb < 0 || (uint64_t)nb != l->steps)
        return trn_fail(err, cap, nb < 0 ? nb : -EINVAL, "rect batch shapes: %s",
                        nb < 0 ? trn_aug_strerror(nb) : "unexpected batch count");
    l->max_h = l->max_w = 0;
    for (int b = 0; b < nb; b++) {
        if (l->shapes[2 * b] > l->max_h) l->max_h = l->shapes[2 * b];
        if (l->shapes[2 * b + 1] > l->max_w) l->max_w = l->shapes[2 * b + 1];
    }
    return 0;
}

/* A /proc/meminfo field ("MemAvailable", "MemTotal") in bytes, or 0 when unknown. */
static uint64_t meminfo(const char *field)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    const size_t fl = strlen(field);
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':' && sscanf(line + fl + 1, "%llu", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* MemAvailable in bytes, or 0 when unknown. TRN_LOADER_TEST_MEM_AVAILABLE (bytes) stands in for
 * it in the tests. */
static uint64_t mem_available(void)
{
    const char *t = getenv("TRN_LOADER_TEST_MEM_AVAILABLE");
    if (t && *t) return strtoull(t, NULL, 10);
    return meminfo("MemAvailable");
}

/*
 * FFIO_DIRECT_AUTO, decided per dataset: O_DIRECT pays when the data is much larger than RAM
 * (ffio.h); a dataset within half of the memory available (MemAvailable, MemTotal / 4 when the
 * kernel does not say) is read through the page cache, so that after the first epoch its reads
 * are memory copies, one copy for all the ranks of a node. On this VM's disk O_DIRECT trained
 * 0.80-0.86x as fast as the page cache on a 0.7 GB set at 10,000 images, and the earlier
 * threshold, a quarter of MemTotal, put COCO's 118,287 images at 160 (8.7 GB, 24 GB of RAM) on
 * O_DIRECT (docs/benchmarks.md, issue 44); on coco128 the page cache is 1.5x O_DIRECT's rate
 * (issue 23). The price is a cold first epoch: buffered random reads of data not yet cached ran
 * at 0.6x O_DIRECT's rate there. An explicit FFIO_DIRECT_ON or _OFF is kept.
 */
static void choose_direct(struct trn_loader *l)
{
    if (l->o.io.io.direct != FFIO_DIRECT_AUTO) return;
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < l->n; i++) {
        struct ffr_record_info in;
        if (ffr_reader_info(l->r, i, &in) == 0) bytes += in.extent_len;
    }
    const uint64_t avail = mem_available(), mem = avail ? avail : meminfo("MemTotal");
    const uint64_t room = avail ? mem / 2 : mem / 4;
    const char *what =
        avail ? "half of the memory available" : "a quarter of this machine's memory";
    if (!room) return;
    if (bytes <= room) {
        l->o.io.io.direct = FFIO_DIRECT_OFF;
        log_line(l,
                 "the dataset (%.2f GB) fits in %s (%.1f GB): reading it through the page "
                 "cache, not O_DIRECT",
                 1e-9 * (double)bytes, what, 1e-9 * (double)mem);
    } else {
        log_line(l, "the dataset (%.2f GB) is larger than %s (%.1f GB): reading it with O_DIRECT",
                 1e-9 * (double)bytes, what, 1e-9 * (double)mem);
    }
}

/* train.py's refusal: the decoded tiles do not fit in the memory available with a 10% margin.
 * Says so and returns true. */
static bool ram_refused(struct trn_loader *l, uint64_t need, uint64_t avail)
{
    if (!avail || (double)need * 1.1 <= (double)avail) return false;
    log_line(l,
             "WARNING: --cache ram needs %.1f GB for %" PRIu64 " decoded images, %.1f GB "
             "available: not caching",
             1e-9 * (double)need, l->n, 1e-9 * (double)avail);
    return true;
}

/*
 * One copy for the node's ranks (ram_shm.h): slots sized from the index's tiles, polygons in a
 * pool of a 64th of that plus 4 MiB (COCO's are about 0.2% of the pixels at 640; a tile whose
 * polygons do not fit is not cached). The segment's key is the job's plus what makes the tiles
 * the same: the dataset (its records' count, original sizes and label counts), the image
 * size, the mode. The memory check is made by the rank that would create the copy: once it is
 * reserved it is no longer in MemAvailable, and the others would refuse a copy that exists.
 * Returns 0 (attached), 1 (refused for memory, said), or < 0 with a log line: then each rank
 * may keep its own cache.
 */
static int setup_ram_shared(struct trn_loader *l, uint64_t need, uint64_t avail)
{
    uint64_t *slot = malloc((size_t)(l->n ? l->n : 1) * sizeof *slot), sum = 0, ident = l->n;
    if (!slot) return -ENOMEM;
    for (uint64_t i = 0; i < l->n; i++) {
        const struct rec_meta *m = &l->meta[i];
        slot[i] = (uint64_t)m->tw * m->th * 3 + 5 * 4 * (uint64_t)m->n_labels;
        sum += slot[i];
        ident = ident * 1099511628211ull ^ ((uint64_t)m->w0 << 32 | m->h0) ^ m->n_labels;
    }
    char key[600], err[600];
    snprintf(key, sizeof key, "%.400s|%" PRIx64 "|%d|%d|%d", l->o.ram_share_key, ident,
             l->o.img_size, (int)l->o.mode, (int)l->o.single_cls);
    if (!ram_shm_exists(key) && ram_refused(l, need, avail)) {
        free(slot);
        return 1;
    }
    const int rc = ram_shm_attach(key, l->o.ram_share_ranks, l->n, slot, sum / 64 + (4u << 20),
                                  300.0, &l->shm, err, sizeof err);
    free(slot);
    if (rc < 0) {
        log_line(l,
                 "WARNING: --cache ram: no copy shared by this node's ranks (%s): each keeps "
                 "its own",
                 err);
        return rc;
    }
    if (ram_shm_created(l->shm))
        log_line(l,
                 "caching decoded images in RAM once for this node's %u ranks (%.3f GB for %" PRIu64
                 " images; %.3f GB of shared memory reserved) as they are first read",
                 l->o.ram_share_ranks, 1e-9 * (double)sum, l->n,
                 1e-9 * (double)ram_shm_bytes(l->shm));
    return 0;
}

/*
 * cache_ram as train.py --cache ram decides it: the decoded tiles must fit in the memory
 * available with a 10% margin, else a warning and no cache. Tiles are cached as workers first
 * decode them (the first epoch reads everything once), not up front.
 */
static void setup_ram(struct trn_loader *l)
{
    uint64_t need = 0;
    for (uint64_t i = 0; i < l->n; i++)
        need += (uint64_t)l->meta[i].tw * l->meta[i].th * 3 +
                5 * 4 * (uint64_t)l->meta[i].n_labels + sizeof(struct ram_tile);
    const uint64_t avail = mem_available();
    if (l->o.ram_share_key && l->o.ram_share_ranks > 1 && setup_ram_shared(l, need, avail) >= 0)
        return;
    if (ram_refused(l, need, avail)) return;
    l->ram = calloc(l->n, sizeof *l->ram);
    if (!l->ram) return;
    /* polygons are not in the index summary: room for them within the margin */
    l->ram_cap = avail ? (uint64_t)((double)avail * 0.9) : need + need / 2;
    log_line(
        l, "caching decoded images in RAM (%.1f GB for %" PRIu64 " images) as they are first read",
        1e-9 * (double)need, l->n);
}

static int check_opts(const struct trn_loader_opts *o, char *err, size_t cap)
{
    if (o->mode != TRN_LOADER_TRAIN && o->mode != TRN_LOADER_VAL)
        return trn_fail(err, cap, -EINVAL, "unknown loader mode %d", (int)o->mode);
    if (o->img_size < 32 || o->img_size > 16383)
        return trn_fail(err, cap, -EINVAL, "img_size %d is outside [32, 16383]", o->img_size);
    if (o->batch_size < 1 || o->batch_size > 65536)
        return trn_fail(err, cap, -EINVAL, "batch_size %d is outside [1, 65536]", o->batch_size);
    if (o->workers > 256) return trn_fail(err, cap, -EINVAL, "workers %u > 256", o->workers);
    if (o->depth < 2 || o->depth > 8)
        return trn_fail(err, cap, -EINVAL, "depth %u is outside [2, 8]", o->depth);
    if (o->world_size < 1 || o->rank >= o->world_size)
        return trn_fail(err, cap, -EINVAL, "rank %u of world size %u", o->rank, o->world_size);
    if (o->rect && o->world_size != 1)
        return trn_fail(err, cap, -EINVAL,
                        "rect batches are for one rank (world_size 1): ultralytics validates on "
                        "rank 0 only, and a rect batch's images must share its shape");
    if (o->rect && (o->stride < 1 || o->stride > 1024 || !(o->rect_pad >= 0 && o->rect_pad < 64)))
        return trn_fail(err, cap, -EINVAL, "bad rect stride %d or pad %g", o->stride, o->rect_pad);
    if ((unsigned)o->pixels > TRN_PIXELS_BF16_S2D_NCHW)
        return trn_fail(err, cap, -EINVAL, "unknown pixel type %d", (int)o->pixels);
    if (o->pixels >= TRN_PIXELS_BF16_S2D_NHWC &&
        (o->mode != TRN_LOADER_TRAIN || !o->pix_ctx || o->rect || o->img_size % 2))
        return trn_fail(err, cap, -EINVAL,
                        "bf16 space-to-depth batches are built by the GPU augmentation: training "
                        "with pix_ctx, square batches of an even side (not rect)");
    if (o->bad_records != TRN_BAD_RECORD_SKIP && o->bad_records != TRN_BAD_RECORD_FAIL)
        return trn_fail(err, cap, -EINVAL, "unknown bad-record policy %d", (int)o->bad_records);
    if (o->mode == TRN_LOADER_TRAIN && o->pix_ctx) {
        const int be = kern_ctx_backend(o->pix_ctx);
        if (!o->pix_ops || !o->pix_ops->aug_batch || o->pix_ops->backend != be)
            return trn_fail(err, cap, -EINVAL,
                            "GPU augmentation: pix_ops %s (pix_ctx is a %s context)",
                            !o->pix_ops              ? "is missing"
                            : !o->pix_ops->aug_batch ? "has no aug_batch"
                                                     : "is the table of another backend",
                            be == KERN_BACKEND_CUDA ? "CUDA" : "CPU");
    }
    char why[160];
    if (trn_hyp_check(&o->hyp, why, sizeof why) < 0)
        return trn_fail(err, cap, -EINVAL, "hyperparameters: %s", why);
    return 0;
}

static void hyp_to_aug(const struct trn_hyp *h, struct trn_aug_hyp *a)
{
    trn_aug_hyp_default(a);
    a->hsv_h = h->hsv_h;
    a->hsv_s = h->hsv_s;
    a->hsv_v = h->hsv_v;
    a->degrees = h->degrees;
    a->translate = h->translate;
    a->scale = h->scale;
    a->shear = h->shear;
    a->perspective = h->perspective;
    a->flipud = h->flipud;
    a->fliplr = h->fliplr;
    a->mosaic = h->mosaic;
    a->mixup = h->mixup;
    a->copy_paste = h->copy_paste;
}

/*
 * GPU augmentation memory, all at setup: per slot a pinned arena of batch_size regions (the
 * pinned path of the ring: cudaHostAlloc when CUDA is usable, so the uploads are DMA from it),
 * its twin and the image tensor in pix_ctx's memory, the plans; the consumer's dedup table.
 */
static int setup_pix(struct trn_loader *l, char *err, size_t cap)
{
    struct kern_ctx *const ctx = l->o.pix_ctx;
    const size_t b = (size_t)l->o.batch_size, s = (size_t)l->o.img_size;
    l->tiles_per_sample = l->probs.mosaic <= 0 ? 1 : l->probs.mixup > 0 ? 8 : 4;
    const size_t tile_cap = ALIGN_UP(l->max_tile, 64), host_built = ALIGN_UP(s * s * 3, 64);
    l->region_bytes = (size_t)l->tiles_per_sample * tile_cap;
    if (l->region_bytes < host_built) l->region_bytes = host_built;
    const size_t arena = b * l->region_bytes, images = b * image_bytes(l, (int)s, (int)s);
    for (unsigned i = 0; i < l->depth; i++) {
        struct slot *sl = &l->slots[i];
        int rc = ffio_pinned_alloc(arena, 0, &sl->arena);
        if (rc < 0)
            return trn_fail(err, cap, rc, "allocating %zu bytes of pinned tile memory: %s", arena,
                            ffio_strerror(rc));
        l->pinned_bytes += sl->arena.size;
        sl->tiles = calloc(b * MAX_TILES, sizeof *sl->tiles);
        sl->n_tiles = calloc(b, sizeof *sl->n_tiles);
        sl->plans = calloc(b, sizeof *sl->plans);
        if (!sl->tiles || !sl->n_tiles || !sl->plans)
            return trn_fail(err, cap, -ENOMEM, "out of memory");
        rc = kern_mem_alloc(ctx, arena, &sl->dev_tiles);
        if (rc == 0) rc = kern_mem_alloc(ctx, images, &sl->dev_images);
        if (rc < 0)
            return trn_fail(err, cap, rc, "allocating %zu bytes of GPU augmentation memory: %s",
                            arena + images, kern_strerror(rc));
        l->device_bytes += arena + images;
        rc = kern_event_create(ctx, &sl->up_ev);
        if (rc == 0) rc = kern_event_create(ctx, &sl->aug_ev);
        if (rc < 0)
            return trn_fail(err, cap, rc, "GPU augmentation events: %s (%s)", kern_strerror(rc),
                            kern_stream_last_error());
    }
    size_t t = 16;
    while (t < 2 * b * MAX_TILES)
        t *= 2;
    l->dd_mask = t - 1;
    for (unsigned i = 0; i < l->depth; i++) {
        struct slot *sl = &l->slots[i];
        sl->dd_key = malloc(t * sizeof *sl->dd_key);
        sl->dd_off = malloc(t * sizeof *sl->dd_off);
        sl->dd_stamp = calloc(t, sizeof *sl->dd_stamp);
        if (!sl->dd_key || !sl->dd_off || !sl->dd_stamp)
            return trn_fail(err, cap, -ENOMEM, "out of memory");
    }
    return 0;
}

static unsigned default_workers(void)
{
    const long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1u : c > 8 ? 8u : (unsigned)c;
}

int trn_loader_create(const struct ffr_reader *r, const struct trn_loader_opts *o,
                      struct trn_loader **out, char *err, size_t err_cap)
{
    struct trn_loader_opts def;
    int rc;
    if (err && err_cap) err[0] = '\0';
    if (!out) return trn_fail(err, err_cap, -EINVAL, "no output");
    *out = NULL;
    if (!r) return trn_fail(err, err_cap, -EINVAL, "no dataset");
    if (!o) {
        trn_loader_opts_default(&def);
        o = &def;
    }
    rc = check_opts(o, err, err_cap);
    if (rc < 0) return rc;
    struct trn_loader *l = calloc(1, sizeof *l);
    if (!l) return trn_fail(err, err_cap, -ENOMEM, "out of memory");
    l->r = r;
    l->o = *o;
    /* rect training's batches are not s x s: the host builds them */
    l->pix = o->mode == TRN_LOADER_TRAIN && o->pix_ctx && !o->rect;
    if (!l->pix) {
        l->o.pix_ctx = NULL;
        l->o.pix_ops = NULL;
    }
    if (l->o.mode == TRN_LOADER_TRAIN) {
        hyp_to_aug(&o->hyp, &l->aug);
        rc = trn_aug_hyp_validate(&l->aug);
        if (rc < 0) {
            free(l);
            return trn_fail(err, err_cap, rc, "augmentation hyperparameters: %s",
                            trn_aug_strerror(rc));
        }
        /* rect training has no mosaic (mosaic = augment and not rect), so no mixup either */
        l->probs = (struct trn_plan_probs){ .mosaic = o->rect ? 0 : o->hyp.mosaic,
                                            .mixup = o->rect ? 0 : o->hyp.mixup,
                                            .flipud = o->hyp.flipud,
                                            .fliplr = o->hyp.fliplr };
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->log_mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_done, NULL);
    l->n = ffr_reader_count(r);
    l->depth = o->depth;
    l->max_h = l->max_w = o->img_size;
    l->start_epoch = o->epoch;
    l->open_epoch = o->epoch;
    l->err_seq = UINT64_MAX;
    l->paused = true;
    for (int i = 0; i < 256; i++)
        l->lut[i] = (float)i / 255.0f;
    if (l->n == 0) {
        rc = trn_fail(err, err_cap, -EINVAL, "the dataset has no records");
        goto fail_out;
    }

    struct trn_sampler_opts so;
    trn_sampler_opts_default(&so);
    so.n = l->n;
    so.seed = o->seed;
    so.world_size = o->world_size;
    so.rank = o->rank;
    so.shuffle = o->mode == TRN_LOADER_TRAIN && !o->rect; /* train.py: rect sets shuffle=False */
    /* Several ranks on a sharded dataset: the shard-aware partition, so that a node reads a
     * few shards per epoch, not all of them (docs/sharing.md). One rank keeps the plain order. */
    const uint32_t n_shards = ffr_reader_shard_count(r);
    uint64_t *shard_counts = NULL;
    if (o->mode == TRN_LOADER_TRAIN && o->world_size > 1 && n_shards > 1) {
        shard_counts = calloc(n_shards, sizeof *shard_counts);
        if (!shard_counts) {
            rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
            goto fail_out;
        }
        for (uint32_t k = 0; k < n_shards; k++) {
            struct ffr_shard_info si;
            if ((rc = ffr_reader_shard(r, k, &si)) < 0) break;
            shard_counts[k] = si.count;
        }
        so.shard_counts = shard_counts;
        so.n_shards = n_shards;
        so.local_world_size = o->local_world_size ? o->local_world_size : o->world_size;
    }
    if (rc >= 0) rc = trn_sampler_init(&l->sampler, &so);
    free(shard_counts); /* copied by trn_sampler_init */
    if (rc < 0) {
        trn_fail(err, err_cap, rc, "sampler: bad options");
        goto fail_out;
    }
    l->rank_samples = trn_sampler_rank_count(&l->sampler);
    l->steps = (l->rank_samples + (uint64_t)o->batch_size - 1) / (uint64_t)o->batch_size;
    if (o->step >= l->steps) {
        rc = trn_fail(err, err_cap, -EINVAL,
                      "start step %" PRIu64 " >= %" PRIu64 " steps per epoch", o->step, l->steps);
        goto fail_out;
    }
    l->start_step = o->step;
    l->bad = calloc(l->n, sizeof *l->bad);
    l->damaged = calloc(ffr_reader_shard_count(l->r) + 1, sizeof *l->damaged);
    if (!l->bad || !l->damaged) {
        rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
        goto fail_out;
    }
    rc = scan_index(l, err, err_cap);
    if (rc < 0) goto fail_out;
    if (l->n_resized)
        log_line(l,
                 "%" PRIu64 " of %" PRIu64 " records are packed larger than --img %d: resizing "
                 "them on load (INTER_LINEAR from the stored pixels). %s a pack at exactly --img "
                 "is what matches ultralytics byte for byte",
                 l->n_resized, l->n, o->img_size,
                 o->mode == TRN_LOADER_VAL
                     ? "val.py shrinks the original image with INTER_AREA instead:"
                     : "load_image resizes the original image:");
    choose_direct(l);
    if (o->cache_ram) setup_ram(l);
    if (o->rect) {
        rc = setup_rect(l, err, err_cap);
        if (rc < 0) goto fail_out;
    }

    /* The ring. */
    l->slots = calloc(l->depth, sizeof *l->slots);
    if (!l->slots) {
        rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
        goto fail_out;
    }
    const size_t b = (size_t)o->batch_size;
    /* With GPU augmentation the host builds no images: the ring holds targets only, and each
     * slot an arena of the batch's tiles. */
    const size_t img_bytes = l->pix ? 0 : ALIGN_UP(b * image_bytes(l, l->max_h, l->max_w), 64);
    const size_t tgt_bytes = b * (size_t)l->cap_rows * 6 * sizeof(float);
    for (unsigned i = 0; i < l->depth; i++) {
        struct slot *sl = &l->slots[i];
        rc = ffio_pinned_alloc(img_bytes + tgt_bytes, 0, &sl->mem);
        if (rc < 0) {
            trn_fail(err, err_cap, rc, "allocating %zu bytes of pinned batch memory: %s",
                     img_bytes + tgt_bytes, ffio_strerror(rc));
            goto fail_out;
        }
        l->pinned_bytes += sl->mem.size;
        l->pinned_kind = sl->mem.kind;
        sl->images = sl->mem.ptr;
        sl->targets = (float *)(void *)((char *)sl->mem.ptr + img_bytes);
        sl->rows = malloc(b * (size_t)l->cap_rows * 5 * sizeof(float));
        sl->n_rows = calloc(b, sizeof *sl->n_rows);
        sl->info = calloc(b, sizeof *sl->info);
        if (!sl->rows || !sl->n_rows || !sl->info) {
            rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
            goto fail_out;
        }
    }
    if (l->pix && (rc = setup_pix(l, err, err_cap)) < 0) goto fail_out;

    /* The workers set themselves up in their own threads (engines are per thread). */
    l->n_workers = o->workers ? o->workers : default_workers();
    l->workers = calloc(l->n_workers, sizeof *l->workers);
    if (!l->workers) {
        rc = trn_fail(err, err_cap, -ENOMEM, "out of memory");
        goto fail_out;
    }
    unsigned started = 0;
    for (unsigned i = 0; i < l->n_workers; i++) {
        l->workers[i].l = l;
        const int e = pthread_create(&l->workers[i].thread, NULL, worker_main, &l->workers[i]);
        if (e != 0) {
            rc = trn_fail(err, err_cap, -e, "starting worker %u: %s", i, strerror(e));
            break;
        }
        l->workers[i].joinable = true;
        started++;
    }
    pthread_mutex_lock(&l->mu);
    while (l->inited < started)
        pthread_cond_wait(&l->cv_done, &l->mu);
    if (started == l->n_workers && l->init_rc < 0) {
        rc = l->init_rc;
        trn_fail(err, err_cap, rc, "%s", l->errmsg);
    }
    if (started == l->n_workers && l->init_rc == 0) {
        l->errmsg[0] = '\0';
        l->paused = false;
        pthread_cond_broadcast(&l->cv_work);
        pthread_mutex_unlock(&l->mu);
        *out = l;
        return 0;
    }
    pthread_mutex_unlock(&l->mu);
fail_out:
    trn_loader_destroy(l);
    return rc;
}

void trn_loader_destroy(struct trn_loader *l)
{
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    for (unsigned i = 0; l->workers && i < l->n_workers; i++)
        if (l->workers[i].joinable) pthread_join(l->workers[i].thread, NULL);
    free(l->workers);
    for (unsigned i = 0; l->slots && i < l->depth; i++) {
        struct slot *sl = &l->slots[i];
        if (l->o.pix_ctx) {
            /* An upload may still read the arena and write the device tiles. */
            if (sl->up_ev) (void)kern_event_sync(sl->up_ev);
            kern_mem_free(l->o.pix_ctx, sl->dev_tiles);
            kern_mem_free(l->o.pix_ctx, sl->dev_images);
        }
        kern_event_destroy(sl->up_ev);
        kern_event_destroy(sl->aug_ev);
        free(sl->dd_key);
        free(sl->dd_off);
        free(sl->dd_stamp);
        ffio_pinned_free(&sl->arena);
        free(sl->tiles);
        free(sl->n_tiles);
        free(sl->plans);
        ffio_pinned_free(&l->slots[i].mem);
        free(l->slots[i].rows);
        free(l->slots[i].n_rows);
        free(l->slots[i].info);
    }
    free(l->slots);
    ram_shm_detach(l->shm);
    for (uint64_t i = 0; l->ram && i < l->n; i++)
        free(atomic_load(&l->ram[i]));
    free((void *)l->ram);
    free(l->meta);
    det_labels_free(l->own_labels);
    free(l->indices);
    free(l->order);
    free(l->shapes);
    trn_sampler_destroy(&l->sampler);
    free((void *)l->bad);
    free((void *)l->damaged);
    pthread_cond_destroy(&l->cv_work);
    pthread_cond_destroy(&l->cv_done);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->log_mu);
    free(l);
}

/* ---------------------------------------------------------------------------------------- */
/* Consumer                                                                                 */

/*
 * GPU augmentation, consumer side, on pix_ctx's compute queue: wait on the device for the slot's
 * upload (up_ev), run aug_batch into the slot's image tensor, and mark it (aug_ev) for the
 * slot's next upload. No host wait: the tensor is complete in compute-queue order, and the
 * arena's reuse is ordered by up_ev (see the top of this file). Returns 0 or a kern error with
 * l->errmsg-style text in msg.
 */
static int pix_batch(struct trn_loader *l, struct slot *sl, char *msg, size_t cap)
{
    struct kern_ctx *const ctx = l->o.pix_ctx;
    int rc = kern_event_wait(ctx, KERN_QUEUE_COMPUTE, sl->up_ev);
    if (rc < 0) {
        snprintf(msg, cap, "ordering aug_batch after the upload (%s)", kern_stream_last_error());
    } else {
        rc = l->o.pix_ops->aug_batch(ctx, sl->dev_images, aug_dtype(l->o.pixels), l->o.img_size,
                                     sl->plans, sl->n);
        if (rc < 0 && kern_ctx_backend(ctx) == KERN_BACKEND_CUDA)
            snprintf(msg, cap, "aug_batch over %d images (%s)", sl->n,
                     kern_cuda_ctx_last_error(ctx));
        else if (rc < 0)
            snprintf(msg, cap, "aug_batch over %d images", sl->n);
    }
    /* Also after a failure: what aug_batch enqueued may still read the device tiles. */
    const int marked = kern_event_record(ctx, KERN_QUEUE_COMPUTE, sl->aug_ev);
    if (rc == 0 && marked < 0) {
        rc = marked;
        snprintf(msg, cap, "marking aug_batch (%s)", kern_stream_last_error());
    }
    return rc;
}

int trn_loader_next(struct trn_loader *l, struct trn_batch *out)
{
    if (!l || !out) return -EINVAL;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&l->mu);
    if (l->holding) {
        l->slots[(l->deliver - 1) % l->depth].state = SLOT_EMPTY;
        l->released = l->deliver;
        l->holding = false;
        pthread_cond_broadcast(&l->cv_work);
    }
    struct slot *sl = &l->slots[l->deliver % l->depth];
    for (;;) {
        if (sl->state == SLOT_READY && sl->seq == l->deliver) break;
        uint32_t e;
        uint64_t step;
        int n;
        seq_position(l, l->deliver, &e, &step, &n);
        if (l->o.epoch_gate && e > l->open_epoch) {
            pthread_mutex_unlock(&l->mu);
            return -EAGAIN; /* nobody would ever build it */
        }
        if (l->err && l->err_seq <= l->deliver) {
            const int rc = l->err;
            pthread_mutex_unlock(&l->mu);
            return rc;
        }
        pthread_cond_wait(&l->cv_done, &l->mu);
    }
    out->epoch = sl->epoch;
    out->step = sl->step;
    out->steps = l->steps;
    out->n = sl->n;
    out->height = sl->height;
    out->width = sl->width;
    out->pixels = l->o.pixels;
    out->images = l->pix ? NULL : sl->images;
    out->image_bytes = (size_t)sl->n * image_bytes(l, sl->height, sl->width);
    out->targets = sl->targets;
    out->n_targets = sl->n_targets;
    out->info = sl->info;
    l->holding = true;
    l->deliver++;
    pthread_mutex_unlock(&l->mu);
    if (!l->pix) return 0;

    /* The slot is the consumer's until the next call (workers wait for its release), so its
     * aug_batch is enqueued outside the lock; its upload was enqueued by the worker that
     * completed it. */
    char msg[400];
    msg[0] = '\0';
    const int rc = pix_batch(l, sl, msg, sizeof msg);
    if (rc == 0) {
        out->device_images = sl->dev_images;
        return 0;
    }
    pthread_mutex_lock(&l->mu);
    if (!l->err || sl->seq < l->err_seq) {
        l->err = rc;
        l->err_seq = sl->seq;
        snprintf(l->errmsg, sizeof l->errmsg,
                 "GPU augmentation of batch %" PRIu64 " of epoch %" PRIu32 ": %s: %s", sl->step,
                 sl->epoch, msg, kern_strerror(rc));
    }
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    memset(out, 0, sizeof *out);
    return rc;
}

/* set_position, and with `table` set, the image-weights table swapped in while no worker
 * runs (each worker's sampler copy points at it). */
static int reposition(struct trn_loader *l, uint32_t epoch, uint64_t step, bool table,
                      uint64_t *indices)
{
    pthread_mutex_lock(&l->mu);
    l->paused = true;
    l->gen++;
    while (l->inflight > 0)
        pthread_cond_wait(&l->cv_done, &l->mu);
    if (table) {
        free(l->indices);
        l->indices = indices;
        trn_sampler_set_indices(&l->sampler, indices);
        for (unsigned i = 0; i < l->n_workers; i++)
            trn_sampler_set_indices(&l->workers[i].sampler, indices);
    }
    l->start_epoch = epoch;
    l->start_step = step;
    if (l->o.epoch_gate) {
        /* the caller moved here, so it made this epoch's shards readable */
        l->open_epoch = epoch;
        l->files_gen++;
    }
    l->claim_seq = 0;
    l->claim_j = 0;
    l->released = 0;
    l->deliver = 0;
    l->holding = false;
    l->err = 0;
    l->err_seq = UINT64_MAX;
    l->errmsg[0] = '\0';
    for (unsigned i = 0; i < l->depth; i++)
        l->slots[i].state = SLOT_EMPTY;
    l->paused = false;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int trn_loader_set_position(struct trn_loader *l, uint32_t epoch, uint64_t step)
{
    if (!l || step >= l->steps) return -EINVAL;
    return reposition(l, epoch, step, false, NULL);
}

int trn_loader_set_epoch(struct trn_loader *l, uint32_t epoch)
{
    return trn_loader_set_position(l, epoch, 0);
}

int trn_loader_open_epoch(struct trn_loader *l, uint32_t epoch)
{
    if (!l || !l->o.epoch_gate) return -EINVAL;
    pthread_mutex_lock(&l->mu);
    if (epoch <= l->open_epoch) {
        pthread_mutex_unlock(&l->mu);
        return -EINVAL;
    }
    /* Nothing past the gate was claimed, and the open epoch was consumed: a sample still in
     * flight is a straggler of it, which must not read a shard swapped under it. */
    while (l->inflight > 0)
        pthread_cond_wait(&l->cv_done, &l->mu);
    l->open_epoch = epoch;
    l->files_gen++;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int trn_loader_set_indices(struct trn_loader *l, const uint64_t *indices, uint32_t epoch,
                           uint64_t step)
{
    if (!l || step >= l->steps || l->o.mode != TRN_LOADER_TRAIN || (indices && l->sampler.shards))
        return -EINVAL;
    uint64_t *copy = NULL;
    if (indices) {
        if (!(copy = malloc(l->n * sizeof *copy))) return -ENOMEM;
        for (uint64_t i = 0; i < l->n; i++)
            if ((copy[i] = indices[i]) >= l->n) {
                free(copy);
                return -EINVAL;
            }
    }
    return reposition(l, epoch, step, true, copy);
}

void trn_loader_info(struct trn_loader *l, struct trn_loader_info *out)
{
    memset(out, 0, sizeof *out);
    if (!l) return;
    out->records = l->n;
    out->rank_samples = l->rank_samples;
    out->steps = l->steps;
    out->max_height = l->max_h;
    out->max_width = l->max_w;
    out->workers = l->n_workers;
    out->depth = l->depth;
    out->pinned_bytes = l->pinned_bytes;
    out->pinned_kind = l->pinned_kind;
    out->device_bytes = l->device_bytes;
    out->uploads = atomic_load(&l->n_uploads);
    out->upload_bytes = atomic_load(&l->upload_bytes);
    out->bad_records = atomic_load(&l->n_bad);
    out->images = atomic_load(&l->n_images);
    out->read_ahead = atomic_load(&l->n_read_ahead);
}

const char *trn_loader_error(struct trn_loader *l)
{
    if (!l) return "";
    pthread_mutex_lock(&l->mu);
    snprintf(l->errcopy, sizeof l->errcopy, "%s", l->err ? l->errmsg : "");
    pthread_mutex_unlock(&l->mu);
    return l->errcopy;
}
